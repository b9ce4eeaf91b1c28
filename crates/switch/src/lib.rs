//! The CuckooSwitch Ethernet switch, an application on flowplane's engine (Zhou et al., CoNEXT
//! 2013, §3: "a software-based Ethernet switch designed around a memory-efficient,
//! high-performance, and highly-concurrent hash table").
//!
//! The crate has the rooms every application crate has (docs/architecture.md):
//!
//! * [`stage`]: the data path. One [`stage::SwitchWorker`] per core reads its queue of every port
//!   and looks up the destination (and, learning, source) MACs of a whole burst at once in the
//!   shared cuckoo FIB (`fp-cuckoo`'s `FibReader`: the 2,4 layout, or the quotiented one from
//!   256 Mi entries or with `--fib-layout`; two-round prefetching: §3.3–3.4, §4.3) — several bursts in
//!   one call when they come full (streaming lookups, `--gather`) — then hands each frame to its
//!   output port's burst; unknown unicast, broadcast and multicast are flooded, never back out of
//!   the ingress port. [`stage::SwitchStage`] decides when held bursts go (a short burst, a
//!   polling pass without a full one) and adds the tracer. No clock, no lock, no system call.
//! * [`controller`]: the FIB's single writer (§3.2: one writer, lock-free readers with version
//!   counters), free of I/O: it applies the workers' learn events, keeps static entries, ages
//!   learned ones.
//! * [`config`]: the checked settings, statics and the FIB file formats for preloading the
//!   paper's very large tables.
//! * [`carry`]: the learned entries carried across a restart, by port name, in the state
//!   directory.
//! * [`cli`]: `flowplane switch --ports IF1,IF2,...`.
//! * [`service`]: the wiring on the service runner (`fp-service`): ports, stages, the writer's
//!   tick.
//! * [`metrics`]: what the admin server reads: metric families, status lines, trace records.
//!
//! # Example
//!
//! ```
//! use fp_cuckoo::{CompactMap, Config};
//! use fp_pipeline::packet::{burst, Pool};
//! use fp_switch::controller::{learn_queue, SwitchControl};
//! use fp_switch::stage::SwitchWorker;
//! use fp_wire::ethernet::MacAddr;
//!
//! let (writer, reader) = CompactMap::new(&Config::with_capacity(1000)).unwrap();
//! let (learn_tx, learn_rx) = learn_queue(64);
//! let aging_ns = 300_000_000_000;
//! let mut fib = SwitchControl::new(writer, learn_rx, aging_ns);
//! let b: MacAddr = "02:00:00:00:00:0b".parse().unwrap();
//! fib.add_static(b, 2).unwrap();
//! let mut worker = SwitchWorker::new(reader, 3, learn_tx, aging_ns);
//!
//! // A frame from A (port 0) to B: forwarded to port 2 only, and A is learned on port 0.
//! let mut frame = [0u8; 60];
//! frame[..6].copy_from_slice(&b.0);
//! frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
//! let (mut pool, mut rx) = (Pool::new(8), burst());
//! let mut tx = vec![burst(), burst(), burst()];
//! let mut p = pool.get().unwrap();
//! p.fill(&frame);
//! rx.push(p);
//! worker.process(0, &mut rx, &mut tx, &mut pool, 1);
//! assert_eq!(tx.iter().map(Vec::len).collect::<Vec<_>>(), [0, 0, 1]);
//! fib.drain();
//! assert_eq!(fib.lookup("02:00:00:00:00:0a".parse().unwrap()), Some(0));
//! ```
#![deny(unsafe_code)]

pub mod carry;
pub mod cli;
pub mod config;
pub mod controller;
pub mod guard;
pub mod metrics;
pub mod service;
pub mod sflow;
pub mod stage;
pub mod stp;
pub mod vlan;
