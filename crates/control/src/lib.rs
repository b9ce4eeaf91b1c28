//! flowplane's control plane: health checks, Prometheus metrics, the admin HTTP server, reload and
//! shutdown signals, and the packet tracer.
//!
//! Layer: **control** (see `DESIGN.md`). Nothing here runs on the per-packet path except
//! `wants` of [`trace::PacketTracer`], which the workers call for packets matched to a VIP while
//! a tracer is installed, and which costs a few header reads and two 8-byte compares for an
//! ordinary packet. Everything else runs on its own threads and talks to the balancer's control loop
//! through plain values: health *events* on a channel, a [`metrics::MetricsView`] to render, an
//! [`admin::AdminHandler`] the balancer implements, flags set by signals.
//!
//! It implements the operational parts of *Maglev* (Eisenbud et al., NSDI 2016):
//!
//! * §2.2 — backend pools are "associated with one or more health checking methods with which all
//!   its backends are verified … health checks are deduplicated by IP addresses": [`health`]
//!   (TCP connect and HTTP GET with status and body match, interval, timeout, rise/fall, one check
//!   stream per backend address, reload without losing state); config updates "committed
//!   atomically" are triggered by [`signal::ReloadSignal`] (`SIGHUP`) or `POST /reload`.
//! * §2.1, §2.2, §4.1.1 — each balancer "announces [its VIPs] to the router over BGP", health-gated,
//!   and the router spreads traffic over all balancers by ECMP: [`announce`] runs BIRD 2 with a
//!   generated configuration, changes the announced VIPs through its control socket, and makes
//!   sure a dead balancer's BIRD dies with it.
//! * §4.4 — "we export various metrics from each Maglev machine via an HTTP server": [`metrics`]
//!   (Prometheus text format) served by [`admin`]; and the *packet-tracer*: "specially marked
//!   Maglev-recognizable payloads" that are forwarded as usual while the balancer reports what it
//!   did with them, rate-limited: [`trace`].
//!
//! Guarantees: no thread is spawned per request or per check; every socket operation has a
//! timeout; every buffer read from the network is bounded; dropping a [`health::HealthMonitor`]
//! or an [`admin::AdminServer`] stops its threads. `unsafe` code is confined to the `sys` module
//! (`sigaction`, `raise`, `poll`). docs/operations.md is the operator's reference (every metric,
//! the endpoints, reload semantics, the tracer).
//!
//! # Example
//!
//! A balancer's metrics and traces served over HTTP, with a probe traced through a worker:
//!
//! ```
//! use std::io::{Read, Write};
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use fp_control::admin::{AdminHandler, AdminServer};
//! use fp_control::metrics::{self, MaglevChanges, MetricsView, ReloadCounts};
//! use fp_control::trace::{probe_payload, TraceLog, TracerConfig};
//! use fp_pipeline::{config::LbConfig, lb::LbWorker, packet::{burst, Pool}};
//! use fp_pipeline::snapshot::{Builder, Published, Snapshot};
//! use fp_pipeline::stats::{Totals, WorkerStats};
//!
//! let cfg = LbConfig::from_toml(r#"
//!     [balancer]
//!     address = "10.0.0.2"
//!     conn_table_capacity = 1000
//!     [[vip]]
//!     name = "dns"
//!     address = "203.0.113.10"
//!     port = 53
//!     protocol = "udp"
//!     pools = ["p"]
//!     [[pool]]
//!     name = "p"
//!     backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }]
//! "#).unwrap();
//! let snaps = Arc::new(Published::new(Arc::new(Builder::new().build(Arc::new(cfg)).unwrap())));
//!
//! // A worker with a tracer; a probe is a UDP/TCP payload starting with the marker.
//! let traces = TraceLog::with_sink(100, "lb1".into(), None);
//! let mut worker = LbWorker::new(0, snaps.clone(), 7).unwrap();
//! worker.set_tracer(Box::new(traces.tracer(TracerConfig::default())));
//! let mut frame = fp_pipeline::craft::udp(
//!     &fp_pipeline::craft::Endpoints::new("198.51.100.7", 4000, "203.0.113.10", 53), 24);
//! let n = frame.len();
//! frame[n - 24..].copy_from_slice(&probe_payload(42));
//! let (mut pool, mut rx, mut tx) = (Pool::new(8), burst(), burst());
//! let mut p = pool.get().unwrap();
//! p.fill(&frame);
//! rx.push(p);
//! worker.process(&mut rx, &mut tx, &mut pool, 1_000_000);
//! assert_eq!(tx.len(), 1); // forwarded as usual …
//! assert_eq!(traces.entries()[0].probe_id, 42); // … and traced
//!
//! // What the balancer's control loop exposes to the admin server.
//! struct Lb {
//!     snaps: Arc<Published<Snapshot>>,
//!     stats: Vec<Arc<WorkerStats>>,
//!     traces: Arc<TraceLog>,
//! }
//! impl AdminHandler for Lb {
//!     fn metrics(&self) -> String {
//!         let snap = self.snaps.load();
//!         let totals = Totals::sum(self.stats.iter().map(|s| &**s));
//!         metrics::render(&MetricsView {
//!             totals: &totals,
//!             workers: &[],
//!             snapshot: &snap,
//!             config_generation: 1,
//!             reloads: ReloadCounts::default(),
//!             health: &[],
//!             maglev: &MaglevChanges::new(),
//!             trace: self.traces.counts(),
//!             uptime: Duration::from_secs(1),
//!         })
//!     }
//!     fn reload(&self) -> Result<u64, String> { Err("config: no file in this example".into()) }
//!     fn traces(&self) -> String { self.traces.json_lines() }
//!     fn status(&self) -> String { "ok".into() }
//! }
//! let lb = Arc::new(Lb { snaps, stats: vec![worker.stats().clone()], traces });
//! let admin = AdminServer::start("127.0.0.1:0".parse().unwrap(), lb).unwrap();
//!
//! let mut s = std::net::TcpStream::connect(admin.local_addr()).unwrap();
//! s.write_all(b"GET /metrics HTTP/1.1\r\nHost: lb1\r\n\r\n").unwrap();
//! let mut answer = String::new();
//! s.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK"));
//! assert!(answer.contains("\nflowplane_vip_packets_total{vip=\"dns\"} 1\n"));
//! assert!(answer.contains("\nflowplane_traced_packets_total 1\n"));
//! ```
#![deny(unsafe_code)]

pub mod admin;
pub mod announce;
pub mod health;
mod json;
pub mod metrics;
pub mod signal;
mod sys;
pub mod trace;

pub use admin::{AdminHandler, AdminOptions, AdminServer};
pub use health::{BackendHealth, HealthEvent, HealthMonitor, HealthOptions};
pub use metrics::{render, MaglevChanges, MetricsView, WorkerGauges, WorkerMetrics};
pub use signal::{ReloadSignal, TerminateSignal};
pub use trace::{probe_payload, PacketTracer, TraceLog, TracerConfig};
