//! flowplane's batch pipeline and the Maglev load balancer's data path.
//!
//! Layer: **pipeline** (see `DESIGN.md`): no I/O, no clock (time is an argument), no allocation or
//! lock per packet. It implements the forwarder of *Maglev* (Eisenbud et al., NSDI 2016):
//!
//! * §3.1 steering by 5-tuple hash to one worker per core ([`steer`]), each worker processing a
//!   burst at a time ([`lb::LbWorker::process`]): parse → VIP match → connection table → Maglev
//!   selection → GRE (or IPIP, VXLAN, L2 DSR) encapsulation → emit;
//! * §3.3 per-worker connection tracking in CuckooSwitch tables with batched, prefetched lookups; a
//!   full table still forwards by Maglev, counted;
//! * §3.4 Maglev hashing from `fp-maglev`, one table per VIP over its healthy backends, rebuilt off
//!   the data path and published atomically ([`snapshot`]);
//! * §2.2 VIPs with backend pools that nest, validated configuration ([`config`]) with §4.2's
//!   prefix/suffix VIP matching;
//! * §4.3 fragments: a fragment table holds non-first fragments until their datagram's first
//!   fragment decides ([`frag`]);
//! * per-worker counters for every outcome and drop reason ([`stats`]).
//!
//! Packets live in fixed buffers with headroom ([`packet`]) and move between the pipeline and the
//! world through the [`port::Port`] trait, implemented by `fp-io` for generated traffic, pcap
//! files, AF_PACKET and AF_XDP.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use fp_pipeline::{config::LbConfig, lb::LbWorker, packet::{burst, Pool}};
//! use fp_pipeline::snapshot::{Builder, Published};
//!
//! let cfg = LbConfig::from_toml(r#"
//!     [balancer]
//!     address = "10.0.0.2"
//!     conn_table_capacity = 1000
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
//! let mut builder = Builder::new();
//! let snapshots = Arc::new(Published::new(Arc::new(builder.build(Arc::new(cfg)).unwrap())));
//! let mut worker = LbWorker::new(0, snapshots.clone(), 0x1234).unwrap();
//!
//! // A TCP SYN to the VIP, as a port would deliver it.
//! let frame = fp_pipeline::craft::tcp_v4("198.51.100.7", 40000, "203.0.113.10", 80, true);
//! let mut pool = Pool::new(64);
//! let (mut rx, mut tx) = (burst(), burst());
//! let mut p = pool.get().unwrap();
//! p.fill(&frame);
//! rx.push(p);
//! worker.process(&mut rx, &mut tx, &mut pool, 1_000_000);
//! assert_eq!(tx.len(), 1);                 // GRE-encapsulated toward a backend
//! assert_eq!(tx[0].len(), frame.len() + 24); // outer IPv4 (20) + GRE (4)
//! ```
#![deny(unsafe_code)]

pub mod config;
pub mod craft;
pub mod frag;
pub mod lb;
pub mod packet;
pub mod port;
pub mod snapshot;
pub mod stats;
pub mod steer;
pub mod switch;
