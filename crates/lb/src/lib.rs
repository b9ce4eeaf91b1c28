//! The Maglev load balancer, an application on flowplane's engine.
//!
//! It implements the forwarder and the controller of *Maglev* (Eisenbud et al., NSDI 2016):
//!
//! * §3.1 one [`stage::LbStage`] per core, fed by flow-affine steering (the kernel's fan-out,
//!   the NIC's queues, or the engine's software dispatcher), processing a burst at a time: parse →
//!   VIP match → connection table → Maglev selection → GRE (or IPIP, VXLAN, L2 DSR)
//!   encapsulation → emit. The worker is a `fp_pipeline::stage::Stage`: the engine's driver runs it.
//! * §3.3 per-worker connection tracking in CuckooSwitch tables with batched, prefetched lookups; a
//!   full table still forwards by Maglev, counted;
//! * §3.4 Maglev hashing from `fp-maglev`, one table per VIP over its healthy backends, rebuilt off
//!   the data path and published atomically ([`snapshot`]);
//! * §2.2 VIPs with backend pools that nest, validated configuration ([`config`]) with §4.2's
//!   prefix/suffix VIP matching, health checks deduplicated by address ([`health`]);
//! * §4.3 fragments: a fragment table holds non-first fragments until their datagram's first
//!   fragment decides ([`frag`]), and in a cluster of balancers fragments are redirected to their
//!   datagram's owner;
//! * §2.1/§4.1.1 the controller: a sans-I/O state machine ([`controller`]) fed with health results,
//!   reloads and neighbour changes, whose actions (announce VIPs over BGP, steer destinations,
//!   resolve neighbours) a thin shell ([`service`], on the service runner `fp-service`) carries out
//!   with the BGP speaker ([`speaker`]), the kernel's neighbour tables ([`neighbors`]) and the hash
//!   seed's state file ([`seed`]);
//! * §4.4 metrics ([`metrics`]) and the packet tracer ([`trace`]);
//! * IPFIX flow records of connections and sampled packets, exported off the data path
//!   ([`export`]);
//! * a configuration checked without running it ([`check`], `flowplane check`), and under systemd
//!   the notification protocol and watchdog (spoken by the service runner);
//! * per-worker counters for every outcome and drop reason ([`stats`]).
//!
//! [`offline`] runs the balancer over capture files and generated traffic; [`backend`] prepares a
//! Linux host as a direct-server-return backend.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use fp_lb::{config::LbConfig, stage::LbStage};
//! use fp_lb::snapshot::{Builder, Published};
//! use fp_pipeline::packet::{burst, Pool};
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
//! let mut worker = LbStage::new(0, snapshots.clone(), 0x1234).unwrap();
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

pub mod backend;
pub mod carry;
pub mod check;
pub mod cli;
pub mod config;
pub mod controller;
pub mod export;
pub mod frag;
pub mod health;
pub mod metrics;
pub mod neighbors;
pub mod offline;
pub mod seed;
pub mod service;
pub mod sets;
pub mod snapshot;
pub mod speaker;
pub mod stage;
pub mod stats;
pub mod trace;
