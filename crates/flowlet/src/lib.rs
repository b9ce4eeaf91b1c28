//! The Flowlet load balancer, an application on flowplane's engine: Switcharoo's driving network
//! function (Kogias et al., "Switcharoo"), built on the data-path-insertion flow-state table of
//! `fp-flowstate` (§3: cuckoo tables whose inserts, swaps and evictions happen as packets
//! recirculate through the pipeline, with no control-plane insert path).
//!
//! A flowlet is a burst of a flow's packets separated from the next by a pause longer than the
//! gap; a new flowlet may take another output (least-loaded by bytes, or random) without
//! reordering the flow, since the pause is longer than the difference in path delays.
//!
//! The crate has the rooms every application crate has (docs/architecture.md):
//!
//! * [`stage`]: what a worker does with a burst — parse (malformed frames dropped by reason), run
//!   the packets through its balancers (IPv4 and IPv6), rewrite each forwarded frame's destination
//!   MAC to its output's next hop; no clock, no lock, no system call.
//! * [`cli`]: `flowplane flowlet`'s options and the balancer's settings built from them.
//! * [`offline`]: the stage behind the engine's dispatcher on a capture or generated traffic, with
//!   a batching window in packet time, and the report (rates, flowlets, per-output shares, drops
//!   by reason, passes per packet).
//! * [`service`]: the same stage on live interfaces (`--interface IN --paths IF1,IF2,...`: one
//!   input, one interface per output path) on the service runner (`fp-service`).
//! * [`metrics`]: what the admin server reads.
//!
//! # Example
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     flowlet: fp_flowlet::cli::FlowletArgs,
//! }
//! // flowplane flowlet --generate 8-pkt --packets 100000 --outputs 4
//! let cli = Cli::parse_from(["x", "--generate", "8-pkt", "--packets", "100000"]);
//! fp_flowlet::cli::run(cli.flowlet).unwrap();
//! ```
#![deny(unsafe_code)]

pub mod cli;
pub mod metrics;
pub mod offline;
pub mod service;
pub mod stage;
