//! flowplane's control plane, for every application on the engine: health checks, Prometheus
//! metrics, the admin HTTP server, reload and shutdown signals, the BGP announcer and the packet
//! tracer.
//!
//! Layer: **control** (docs/architecture.md). Nothing here runs on the per-packet path: a
//! worker's side of the tracer is `fp_pipeline::trace`, and this crate's [`trace::TraceLog`]
//! collects what the workers queue. Everything runs on its own threads and talks to an
//! application's control side through plain values: health *events* on a channel, an
//! [`metrics::Exposition`] to write, an [`admin::AdminHandler`] (the service runner, `fp-service`,
//! implements it for every application), flags set by signals and a pipe to sleep on. The load
//! balancer, the switch, the Flowlet balancer and the cluster node all use these; none has its
//! own copy.
//!
//! It implements the operational parts of *Maglev* (Eisenbud et al., NSDI 2016):
//!
//! * §2.2 — backends are "associated with one or more health checking methods … health checks are
//!   deduplicated by IP addresses": [`health`] runs one check stream per address of a plan (TCP
//!   connect and HTTP GET with status and body match, interval, timeout, rise/fall, reload
//!   without losing state); config updates "committed atomically" are triggered by
//!   [`signal::ReloadSignal`] (`SIGHUP`) or `POST /reload`.
//! * §2.1, §2.2, §4.1.1 — each balancer "announces [its VIPs] to the router over BGP", health-gated,
//!   and the router spreads traffic over all balancers by ECMP: [`announce`] runs BIRD 2 with a
//!   generated configuration, changes the announced VIPs through its control socket, and makes
//!   sure a dead balancer's BIRD dies with it.
//! * §4.4 — "we export various metrics from each Maglev machine via an HTTP server": [`metrics`]
//!   (Prometheus text format, with the engine's per-port counters) served by [`admin`]; and the
//!   *packet-tracer*: "specially marked Maglev-recognizable payloads" that are forwarded as usual
//!   while the worker reports what it did with them, rate-limited: [`trace`].
//!
//! And what running under a service manager needs: [`systemd`] speaks the notification protocol
//! (readiness, reloading, stopping, status, watchdog) and [`seed`] draws the secret hash seeds
//! applications use when not told one.
//!
//! Guarantees: no thread is spawned per request or per check; every socket operation has a
//! timeout; every buffer read from the network is bounded; dropping a [`health::HealthMonitor`]
//! or an [`admin::AdminServer`] stops its threads. `unsafe` code is confined to the `sys` module
//! (`sigaction`, `raise`). docs/operations.md is the operator's reference (every metric, the
//! endpoints, reload semantics, the tracer).
//!
//! # Example
//!
//! An application's metrics and traces served over HTTP:
//!
//! ```
//! use std::io::{Read, Write};
//! use std::sync::Arc;
//! use fp_control::admin::{AdminHandler, AdminServer, ReloadError};
//! use fp_control::metrics::{Exposition, Kind};
//! use fp_control::trace::{TraceLog, Record};
//!
//! #[derive(Clone)]
//! struct Hop(u16);
//! impl Record for Hop {
//!     fn write_json(&self, out: &mut String) {
//!         out.push_str(&format!("\"port\":{}", self.0));
//!     }
//! }
//! struct App {
//!     traces: Arc<TraceLog<Hop>>,
//! }
//! impl AdminHandler for App {
//!     fn metrics(&self) -> String {
//!         let mut e = Exposition::new();
//!         e.single("app_traced_total", Kind::Counter, "Probes recorded.", self.traces.counts().recorded);
//!         e.finish()
//!     }
//!     fn reload(&self) -> Result<u64, ReloadError> {
//!         Err(ReloadError::Rejected("config: no file in this example".into()))
//!     }
//!     fn traces(&self) -> String { self.traces.json_lines() }
//!     fn status(&self) -> String { "ok".into() }
//! }
//! let traces = TraceLog::with_sink(100, "node1".into(), None);
//! traces.push(42, Hop(3));
//! let admin = AdminServer::start("127.0.0.1:0".parse().unwrap(), Arc::new(App { traces })).unwrap();
//!
//! let mut s = std::net::TcpStream::connect(admin.local_addr()).unwrap();
//! s.write_all(b"GET /metrics HTTP/1.1\r\nHost: node1\r\n\r\n").unwrap();
//! let mut answer = String::new();
//! s.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK"));
//! assert!(answer.contains("\napp_traced_total 1\n"));
//! ```
#![deny(unsafe_code)]

pub mod admin;
pub mod announce;
pub mod etcd;
pub mod health;
pub mod json;
pub mod metrics;
pub mod seed;
pub mod signal;
pub mod state;
mod sys;
pub mod systemd;
pub mod trace;

/// Write one line to standard error as `flowplane: {msg}` (the journal, under systemd): every
/// application logs through this.
pub fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane: {msg}");
}

pub use admin::{AdminHandler, AdminOptions, AdminServer, ReloadError};
pub use health::{BackendHealth, HealthEvent, HealthMonitor, HealthOptions};
pub use metrics::{Exposition, Kind, ReloadCounts};
pub use signal::{ReloadSignal, TerminateSignal};
pub use trace::{Record, TraceLog};
