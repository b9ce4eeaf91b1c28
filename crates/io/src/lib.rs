//! flowplane's ports and the threads that drive them.
//!
//! Layer: **io** (see `DESIGN.md`). Every packet source and sink implements
//! [`fp_pipeline::port::Port`], so the pipeline never knows where packets come from:
//!
//! * [`gen::Generator`]: the in-memory traffic generator with named mixes (SYN floods, established
//!   connections uniform or Zipf, one constant 5-tuple, IPv4/IPv6 mixes, fragmented datagrams,
//!   malformed frames), with synthetic timestamps at a given rate;
//! * [`pcap::PcapReader`] / [`pcap::PcapWriter`]: capture files in and out;
//! * [`mem::MemPort`] / [`mem::NullPort`]: lists in and out, and a counting sink.
//!
//! [`runner::run_lb`] runs the Maglev load balancer from an input port to an output port with one
//! worker thread per core and software steering by 5-tuple hash (Maglev §3.1).
//!
//! # Example
//!
//! ```
//! use std::sync::{atomic::AtomicBool, Arc};
//! use fp_io::{gen::{GenConfig, Generator, Mix, Target}, mem::NullPort, runner::{run_lb, RunConfig}};
//! use fp_pipeline::{config::LbConfig, snapshot::{Builder, Published}, stats::{Outcome, Totals}};
//!
//! let cfg = LbConfig::from_toml(r#"
//!     [balancer]
//!     address = "10.0.0.2"
//!     conn_table_capacity = 10000
//!     [[vip]]
//!     name = "web"
//!     address = "203.0.113.10"
//!     port = 80
//!     protocol = "tcp"
//!     pools = ["web"]
//!     [[pool]]
//!     name = "web"
//!     backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }]
//! "#).unwrap();
//! let snapshots = Arc::new(Published::new(Arc::new(Builder::new().build(Arc::new(cfg)).unwrap())));
//! let mut gen = Generator::new(GenConfig {
//!     mix: Mix::named("zipf", 1000).unwrap(),
//!     targets: vec![Target { addr: "203.0.113.10".parse().unwrap(), port: 80,
//!                            protocol: fp_wire::ip::IpProtocol::TCP }],
//!     packets: Some(10_000), pps: 1e6, seed: 1, start_ns: 0,
//! });
//! let mut sink = NullPort::default();
//! let rc = RunConfig { workers: 2, ..Default::default() };
//! let r = run_lb(snapshots, &mut gen, &mut sink, &rc, &AtomicBool::new(false)).unwrap();
//! let t = Totals::sum(r.workers.iter().map(|w| &**w));
//! assert_eq!(t.get(Outcome::Tx), 10_000);
//! ```
#![deny(unsafe_code)]

pub mod afpacket;
pub mod afxdp;
pub mod gen;
pub mod live;
pub mod mem;
pub mod pcap;
pub mod runner;
pub mod sys;
