//! Flow state inserted by the data path: the Switcharoo table, and the Flowlet load balancer on it.
//!
//! Layer: **tables** (pure: no I/O, no clock — time is an argument in ns — no allocation or lock on
//! the per-packet path once warmed up).
//!
//! This crate implements *Switcharoo* (Caiazzi, Scazzariello, Chiesa: "Millions of Low-latency State
//! Insertions on ASIC Switches", CoNEXT 2023) for a software worker:
//!
//! * **§3.2 — the table**: a cuckoo hash of two arrays `t1`, `t2`, one slot per bucket, each slot a key
//!   (5-tuple), a value updated per packet and a timestamp; entries expire a timeout after insertion
//!   or after the flow's last packet ([`ExpiryFrom`]). Lookups read one slot per array; an insertion
//!   writes `t1`, moves the displaced entry to `t2`, and carries whatever that displaces to the next
//!   pass as a SWAP packet (the paper's recirculation), so **every pass does bounded work** (at most
//!   one access to each array per packet) and no packet waits for a whole cuckoo path.
//! * **§3.3 / §3.6 — transient states**: SWAPPING / SWAPPED counter arrays keep a flow whose entry is
//!   in transit from getting a second state.
//! * **§3.4 — ordering**: PACKET-COUNTER / NEXT-PACKET arrays number the packets of each ordering cell
//!   and let them leave only in order; with [`Mode::Strict`] (the default) a packet also reads and
//!   updates its state only when it is next to leave, which is appendix A's full consistency
//!   (Lemma 3.7); [`Mode::Weak`] is the paper's Tofino behaviour, [`Mode::Unordered`] its
//!   "w/o ordering" baseline. Appendix A's LAST-LOOKUP-T1/T2 arrays are *not* implemented: a switch
//!   needs them because a slot's value register comes before the ordering registers, so a packet
//!   touches its state before it can know whether it is its turn; here a looking-up packet reaches the
//!   value only after the ordering stage, and the head rule of [`Mode::Strict`] gives Lemma 3.7 from
//!   PACKET-COUNTER / NEXT-PACKET alone (docs/flowstate.md has the argument).
//! * **§3.5 — termination**: recirculation limits that stay safe when packets or swaps are dropped
//!   (see [`table`] for the rules and why they cannot reorder packets or duplicate state).
//! * **§2, §5 — Flowlet**: [`FlowletLb`], the paper's driving network function, with a batch API for
//!   the pipeline.
//!
//! The pass model ([`Engine`]): a worker processes each batch in one pass; a packet or swap that
//! cannot finish goes to a recirculation queue and is processed in the next pass, before new packets.
//!
//! # Guarantees (§3.6), as enforced here
//!
//! * **Ordering**: the packets of a flow that leave, leave in arrival order — also when packets or
//!   swaps are dropped (a packet whose turn was skipped is dropped, never sent late).
//! * **Consistency** ([`Mode::Strict`]): a flow never has two states; once a state exists, every later
//!   packet of the flow reads and updates that state, in arrival order, until it expires — unless the
//!   state is *evicted*, which happens only when a swap chain exceeds `max_swap_passes` or a swap is
//!   lost, and is counted ([`Stats::evictions`]) and reported ([`Step::evicted`]).
//! * **Termination**: every data packet leaves or is dropped (counted by reason) within
//!   `max_passes` passes; every swap chain ends within `max_swap_passes` passes.
//!
//! [`audit`] checks all three on departures; the model tests (`tests/model.rs`) drive the table with
//! random interleavings, drops and expiries and check them after every step.
//!
//! # Example
//!
//! ```
//! use fp_flowstate::{Config, Engine, EngineConfig, Fate, FlowFn};
//!
//! // A per-flow packet counter as the network function.
//! struct Count;
//! impl FlowFn<u64> for Count {
//!     type Value = u32;
//!     type Meta = u32; // a packet handle
//!     type Out = u32;  // the count this packet saw
//!     fn create(&mut self, _: &u64, _: &u32, _: u64) -> (u32, u32) { (1, 1) }
//!     fn update(&mut self, _: &u64, v: &mut u32, _: &u32, _: u64) -> u32 { *v += 1; *v }
//! }
//!
//! let mut e = Engine::new(&Config::with_slots(1024), EngineConfig::default(), Count).unwrap();
//! let mut out = Vec::new();
//! // Pass 1: flow 42's first packet finds no state and recirculates to insert it; its second packet
//! // arrives in the same batch and waits behind it.
//! e.run_pass([(42u64, 0u32, 0u64), (42, 1, 10)], 10, &mut out);
//! assert!(out.is_empty());
//! // Pass 2: the insertion, then the waiting packet, then a new one: in order, one state.
//! e.run_pass([(42u64, 2u32, 20u64)], 20, &mut out);
//! let seen: Vec<_> = out.iter().map(|d| (d.meta, d.fate, d.passes)).collect();
//! assert_eq!(seen, [(0, Fate::Exit(1), 2), (1, Fate::Exit(2), 2), (2, Fate::Exit(3), 1)]);
//! assert_eq!(e.stats().inserts, 1);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
mod config;
mod engine;
mod flowlet;
mod key;
pub mod table;
pub mod workload;

pub use config::{Config, ConfigError, Expiry, ExpiryFrom, Mode};
pub use engine::{Departure, Departures, Engine, EngineConfig, Fate, Schedule};
pub use flowlet::{
    Action, Decision, FlowletConfig, FlowletConfigError, FlowletCounters, FlowletEvent, FlowletFn,
    FlowletLb, FlowletOut, FlowletState, PacketIn, PacketMeta, Policy,
};
pub use key::{FiveTuple, FiveTuple6, FlowKey};
pub use table::{
    Array, DataPacket, DropReason, Effects, Entry, FlowFn, Op, Stats, Step, SwapOutcome,
    SwapPacket, Table, Verdict,
};
