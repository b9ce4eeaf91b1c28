//! flowplane's service runner: the one shell every live application runs in.
//!
//! Layer: between **control** and the **applications** (docs/architecture.md). An application —
//! the load balancer, the switch, the Flowlet balancer, a cluster node — gives the runner a stage
//! factory and control hooks ([`Service`]); the runner does the rest, the same way for all of them:
//! signals (`SIGTERM`/`SIGINT` stop, `SIGHUP` reloads), the systemd notification protocol
//! (readiness, reloading, stopping, watchdog), opening the ports with the chosen port driver,
//! starting and stopping the engine's pinned workers, the admin server (`/metrics`, `/reload`,
//! `/trace`, `/status`), the tracer's per-worker queues, one tick, and the shutdown order. The
//! live options are one clap struct ([`LiveArgs`]), so every application spells `--driver`,
//! `--xdp-mode`, `--workers`, `--cpus`, `--admin` and `--no-pin` the same way.
//!
//! It implements the operational shell of *Maglev* (Eisenbud et al., NSDI 2016): §4.4's metrics
//! over HTTP and packet tracer, §2.2's configuration updates committed on request, and the
//! health of the forwarder reported to the service manager. The metrics every application
//! exports under one name come from here: `flowplane_info{application,version}`,
//! `flowplane_uptime_seconds`, `flowplane_workers`, `flowplane_trace_records_total{result}` and
//! the engine's `flowplane_port_{rx,tx,rx_dropped,tx_dropped}_frames_total{port,interface}`.
//!
//! A running process can hand its state and its ports over to a new process of the same
//! application while it forwards ([`handover`]): the gap of a restart or an upgrade is then the
//! cut-over alone.
//!
//! The control thread never polls on a sleep: it waits on one channel for signals (forwarded by
//! a thread sleeping on the signal self-pipe), reload requests and application events, with a
//! timeout that is the next tick. See [`runner`] for the order of start-up and shutdown.
//!
//! # Example
//!
//! A service whose stage sends every frame back out of the port it came in on, run on in-memory
//! ports until it asks itself to stop:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use fp_engine::driver::WorkerCounters;
//! use fp_engine::live::{Capture, LiveControl, Opened};
//! use fp_pipeline::packet::{Packet, Pool};
//! use fp_pipeline::stage::{Outputs, Stage};
//! use fp_pipeline::trace::ProbeSender;
//! use fp_service::{run_on, Context, Events, LiveOptions, Ports, Service, Setup, View};
//!
//! struct Echo;
//! impl Stage for Echo {
//!     fn process(&mut self, port: usize, rx: &mut Vec<Packet>, out: &mut Outputs,
//!                _pool: &mut Pool, _now_ns: u64) {
//!         out.to(port).append(rx);
//!     }
//! }
//! #[derive(Clone)]
//! struct Nothing;
//! impl fp_control::trace::Record for Nothing {
//!     fn write_json(&self, _out: &mut String) {}
//! }
//! struct Quiet;
//! impl View for Quiet {
//!     fn metrics(&self, _e: &mut fp_control::metrics::Exposition) {}
//!     fn status(&self, _s: &mut String) {}
//! }
//! struct App { events: Events<()> }
//! impl Service for App {
//!     type Stage = Echo;
//!     type Probe = Nothing;
//!     type Event = ();
//!     type View = Quiet;
//!     fn name(&self) -> &'static str { "echo" }
//!     fn ports(&self) -> Ports {
//!         Ports { interfaces: vec!["mem0".into()], capture: Capture::All, ring_bytes: None }
//!     }
//!     fn stage(&mut self, _s: Setup<'_>, _p: ProbeSender<Nothing>) -> anyhow::Result<Echo> {
//!         Ok(Echo)
//!     }
//!     fn view(&self, _: &[Arc<WorkerCounters>]) -> Arc<Quiet> { Arc::new(Quiet) }
//!     fn ready_status(&self) -> String { "echoing".into() }
//!     fn tick_every(&self) -> Duration { Duration::from_millis(10) }
//!     fn tick(&mut self, _cx: &mut Context<'_>) -> anyhow::Result<()> {
//!         let _ = self.events.stop(); // one tick is enough for this example
//!         Ok(())
//!     }
//! }
//! let opened = Opened {
//!     ports: vec![vec![Box::new(fp_engine::memory::NullPort::default())]],
//!     control: LiveControl::default(),
//!     description: "one in-memory port".into(),
//! };
//! let mut opts = LiveOptions::new(fp_engine::live::Driver(fp_engine::live::DRIVERS[0]));
//! opts.pin = false;
//! run_on(&opts, opened, |events| Ok(App { events })).unwrap();
//! ```
#![deny(unsafe_code)]

mod args;
pub mod handover;
pub mod runner;

pub use args::{parse_cpus, CpuList, LiveArgs, LiveOptions};
pub use runner::{run, run_on, Closed, Context, Events, Ports, Service, Setup, View};
