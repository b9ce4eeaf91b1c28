//! The Flowlet load balancer, an application on flowplane's engine: Switcharoo's driving network
//! function (Kogias et al., "Switcharoo"), built on the data-path-insertion flow-state table of
//! `fp-flowstate` (§3: cuckoo tables whose inserts, swaps and evictions happen as packets
//! recirculate through the pipeline, with no control-plane insert path).
//!
//! A flowlet is a burst of a flow's packets separated from the next by a pause longer than the
//! gap; a new flowlet may take another output (least-loaded by bytes, or random) without
//! reordering the flow, since the pause is longer than the difference in path delays.
//!
//! [`app`] is `flowplane flowlet`: each worker is a stage that parses its packets (malformed frames
//! dropped by reason), runs them through its balancers (IPv4 and IPv6) and rewrites each forwarded
//! frame's destination MAC to its output's next hop; the engine's dispatcher feeds the workers
//! from a capture or generated traffic with a batching window in packet time, and the report gives
//! rates, flowlets, per-output shares, drops by reason and passes per packet. [`live`] runs the
//! same workers on live interfaces (`flowplane flowlet --interface IN --paths IF1,IF2,...`): one
//! input, one interface per output path, metrics, status and tracer over HTTP.
//!
//! # Example
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     flowlet: fp_flowlet::app::FlowletArgs,
//! }
//! // flowplane flowlet --generate 8-pkt --packets 100000 --outputs 4
//! let cli = Cli::parse_from(["x", "--generate", "8-pkt", "--packets", "100000"]);
//! fp_flowlet::app::run(cli.flowlet).unwrap();
//! ```
#![deny(unsafe_code)]

pub mod app;
pub mod live;
