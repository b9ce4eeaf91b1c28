//! flowplane's engine: the ports, and the one driver that runs any application's stage over any
//! ports with pinned worker threads.
//!
//! Layer: **io** (docs/architecture.md). This crate makes the system calls; the stages it runs
//! (`fp_pipeline::stage::Stage`: the load balancer, the switch, the Flowlet balancer, the cluster
//! node) make none.
//!
//! * [`port::Port`]: every packet source and sink — [`afpacket`] (TPACKET_V3 ring, fan-out),
//!   [`afxdp`] (UMEM and four rings, flowplane's own XDP program), [`pcap`] files, [`memory`]
//!   lists and sinks, the traffic [`generator`] — receives and sends bursts and says how a worker
//!   waits for it.
//! * [`driver`]: the receive → process → transmit → wait loop, one thread per worker, pinned,
//!   with counters, maintenance on a clock, clean stop and worker-death reporting.
//! * [`dispatch`]: software steering by flow hash for sources that do not spread flows
//!   themselves (files, the generator); the workers see lanes and run the same loop.
//! * [`live`]: the table of port drivers that open Linux interfaces for N workers (AF_PACKET
//!   fan-out, AF_XDP queues) and what to capture on them.
//!
//! # Example
//!
//! A stage that sends every frame back where it came from, over two software-steered workers on
//! generated traffic:
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//! use fp_engine::dispatch::{self, Steering};
//! use fp_engine::driver::{Clock, Options};
//! use fp_engine::generator::{GenConfig, Generator, Mix, Target};
//! use fp_engine::memory::NullPort;
//! use fp_pipeline::packet::{Packet, Pool};
//! use fp_pipeline::stage::{Outputs, Stage};
//!
//! struct ToSink(u64);
//! impl Stage for ToSink {
//!     fn process(&mut self, _port: usize, rx: &mut Vec<Packet>, out: &mut Outputs,
//!                _pool: &mut Pool, _now_ns: u64) {
//!         self.0 += rx.len() as u64;
//!         out.to(1).append(rx); // port 1: the sink
//!     }
//! }
//!
//! let mut gen = Generator::new(GenConfig {
//!     mix: Mix::named("zipf", 1000).unwrap(),
//!     targets: vec![Target { addr: "203.0.113.10".parse().unwrap(), port: 80,
//!                            protocol: fp_wire::ip::IpProtocol::TCP }],
//!     packets: Some(10_000), pps: 1e6, seed: 1, start_ns: 0,
//! });
//! let mut sink = NullPort::default();
//! let opts = Options { clock: Clock::Packets, ..Options::default() };
//! let run = dispatch::run(&mut [&mut gen, &mut sink], vec![ToSink(0), ToSink(0)],
//!                         &Steering::default(), &opts, &AtomicBool::new(false)).unwrap();
//! assert_eq!(run.workers.iter().map(|w| w.stage.0).sum::<u64>(), 10_000);
//! assert_eq!(sink.bytes > 0, true);
//! ```
#![deny(unsafe_code)]

pub mod afpacket;
pub mod afxdp;
pub mod dispatch;
pub mod driver;
pub mod generator;
pub mod live;
pub mod memory;
pub mod pcap;
pub mod port;
pub mod sys;
