//! flowplane's pipeline layer: what every application's data path shares.
//!
//! Layer: **pipeline** (docs/architecture.md): no I/O, no clock (time is an argument), no
//! allocation or lock per packet. An application (the load balancer in `fp-lb`, the switch in
//! `fp-switch`, the Flowlet balancer in `fp-flowlet`, the cluster node in `fp-cluster`) is a
//! [`stage::Stage`] built from these parts, and the engine (`fp-engine`) runs it over ports:
//!
//! * [`packet`]: packet buffers with headroom for in-place encapsulation, bursts of at most
//!   [`packet::MAX_BURST`] packets (DPDK's burst model, Maglev §3.1's batching), and the per-worker
//!   buffer [`packet::Pool`];
//! * [`stage`]: the [`stage::Stage`] trait — a burst in, output bursts per port, time passed in —
//!   and the worker's [`stage::Outputs`];
//! * [`stats`]: single-writer counters, summed by whoever reads metrics;
//! * [`steer`]: which worker a frame belongs to (5-tuple hash, 3-tuple for fragments: Maglev
//!   §3.1), for software steering;
//! * [`craft`]: well-formed test frames (TCP, UDP, fragments) for tests, examples and generators;
//! * [`trace`]: the packet tracer's worker side (Maglev §4.4): recognising probes, a rate limit on
//!   the worker's own clock, and a bounded queue of records to the control side.
//!
//! # Example
//!
//! ```
//! use fp_pipeline::packet::{burst, Pool};
//! use fp_pipeline::steer::steer;
//!
//! let frame = fp_pipeline::craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, true);
//! let mut pool = Pool::new(64);
//! let mut rx = burst();
//! let mut p = pool.get().unwrap();
//! assert!(p.fill(&frame));
//! rx.push(p);
//! // All packets of this connection go to the same one of 4 workers.
//! let w = steer(rx[0].data(), 7, 4);
//! assert!(w < 4);
//! assert_eq!(w, steer(&frame, 7, 4));
//! pool.put_all(&mut rx);
//! assert_eq!(pool.in_use(), 0);
//! ```
#![deny(unsafe_code)]

pub mod craft;
pub mod packet;
pub mod published;
pub mod stage;
pub mod stats;
pub mod steer;
pub mod trace;
