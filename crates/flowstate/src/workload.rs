//! Timestamped synthetic traffic at a given line rate: the paper's workloads (§5, "Traffic workload")
//! and a Zipf mix.
//!
//! Packets are spaced exactly at line rate: packet `i` arrives at `i * 8 * bytes / gbps` ns (1000-byte
//! packets at 100 Gbit/s: one every 80 ns, 12.5 Mpps, as the paper counts). Each slot carries either
//! a pending packet of an existing flow whose time has come or, if none is due, a new flow's first
//! packet:
//!
//! * [`Workload::Flows`] `{ packets: k, window_ns: w }` — every flow has `k` packets; packets 2..k come
//!   at uniformly random times within `w` after the first, each in its own slot (non-consecutive).
//!   (The offsets are drawn within 90 % of `w`, leaving room for the queueing behind other due
//!   packets.) `k = 1, 2, 8` with `w = 50 us` are the paper's 1-PKT, 2-PKT and 8-PKT FLOWS: one insertion per
//!   1, 2 or 8 packets when the table's entries live 50 us.
//! * [`Workload::Zipf`] `{ flows: n, exponent: s }` — every packet belongs to one of `n` flows drawn
//!   with Zipf(s) popularity: a few heavy flows whose packets keep their state alive and a long tail
//!   whose packets come further apart than the expiry and each insert a state (a stand-in for the
//!   paper's CAIDA trace).
//!
//! Deterministic for a seed; no clock, no allocation per packet after warm-up (the pending heap aside).

use crate::key::FiveTuple;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One generated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Flow id (unique per flow for the generator's lifetime).
    pub flow: u64,
    /// Position in the flow, in arrival order.
    pub seq: u32,
    /// The flow's 5-tuple.
    pub key: FiveTuple,
    /// Arrival time (ns).
    pub at: u64,
    /// Bytes.
    pub len: u32,
}

/// A traffic pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Workload {
    /// Flows of `packets` packets spread over `window_ns`.
    Flows {
        /// Packets per flow (≥ 1).
        packets: u32,
        /// Packets 2.. arrive within this long after the first.
        window_ns: u64,
    },
    /// Packets of `flows` flows with Zipf(`exponent`) popularity.
    Zipf {
        /// Flow population.
        flows: u32,
        /// Zipf exponent (> 0).
        exponent: f64,
    },
}

impl Workload {
    /// The paper's 1-PKT FLOWS.
    pub const ONE: Workload = Workload::Flows {
        packets: 1,
        window_ns: 50_000,
    };
    /// The paper's 2-PKT FLOWS.
    pub const TWO: Workload = Workload::Flows {
        packets: 2,
        window_ns: 50_000,
    };
    /// The paper's 8-PKT FLOWS.
    pub const EIGHT: Workload = Workload::Flows {
        packets: 8,
        window_ns: 50_000,
    };
    /// A Zipf mix: one million flows, exponent 1.
    pub const ZIPF: Workload = Workload::Zipf {
        flows: 1_000_000,
        exponent: 1.0,
    };

    /// A short name for tables and plots.
    pub fn name(&self) -> String {
        match self {
            Workload::Flows { packets, .. } => format!("{packets}-pkt"),
            Workload::Zipf { exponent, .. } => format!("zipf{exponent}"),
        }
    }
}

/// The key of flow `flow` under `salt`: distinct flows get distinct keys (the 64 bits of a bijective
/// mix fill the two addresses).
pub fn flow_key(flow: u64, salt: u64) -> FiveTuple {
    let h = fp_hash::splitmix64(flow ^ salt);
    let p = fp_hash::splitmix64(h);
    FiveTuple {
        src: (h >> 32) as u32,
        dst: h as u32,
        sport: p as u16,
        dport: (p >> 16) as u16,
        proto: 6,
    }
}

/// The generator: an endless iterator of [`Packet`]s.
pub struct TrafficGen {
    workload: Workload,
    bits_per_pkt: f64,
    gbps: f64,
    len: u32,
    salt: u64,
    rng: u64,
    slot: u64,
    next_flow: u64,
    pending: BinaryHeap<Reverse<(u64, u64, u32)>>,
    offsets: Vec<u64>,
    zipf_cdf: Vec<f64>,
    zipf_seq: Vec<u32>,
}

impl TrafficGen {
    /// Traffic of `workload` at `gbps` Gbit/s of `pkt_bytes`-byte packets, seeded.
    pub fn new(workload: Workload, gbps: f64, pkt_bytes: u32, seed: u64) -> Self {
        assert!(
            gbps > 0.0 && pkt_bytes > 0,
            "rate and packet size must be positive"
        );
        let (zipf_cdf, zipf_seq) = match workload {
            Workload::Zipf { flows, exponent } => {
                assert!(
                    flows > 0 && exponent > 0.0,
                    "zipf needs flows > 0, exponent > 0"
                );
                let mut cdf = Vec::with_capacity(flows as usize);
                let mut acc = 0.0;
                for r in 1..=flows {
                    acc += (r as f64).powf(-exponent);
                    cdf.push(acc);
                }
                for c in &mut cdf {
                    *c /= acc;
                }
                (cdf, vec![0; flows as usize])
            }
            Workload::Flows { packets, .. } => {
                assert!(packets >= 1, "flows need at least one packet");
                (Vec::new(), Vec::new())
            }
        };
        TrafficGen {
            workload,
            bits_per_pkt: pkt_bytes as f64 * 8.0,
            gbps,
            len: pkt_bytes,
            salt: fp_hash::splitmix64(seed),
            rng: seed,
            slot: 0,
            next_flow: 0,
            pending: BinaryHeap::new(),
            offsets: Vec::new(),
            zipf_cdf,
            zipf_seq,
        }
    }

    /// Packets per second.
    pub fn rate_pps(&self) -> f64 {
        self.gbps * 1e9 / self.bits_per_pkt
    }

    #[inline]
    fn rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fp_hash::splitmix64(self.rng)
    }

    fn time_of(&self, slot: u64) -> u64 {
        (slot as f64 * self.bits_per_pkt / self.gbps) as u64
    }

    /// The key the generator gives flow `flow`.
    pub fn key_of(&self, flow: u64) -> FiveTuple {
        flow_key(flow, self.salt)
    }
}

impl Iterator for TrafficGen {
    type Item = Packet;

    fn next(&mut self) -> Option<Packet> {
        let at = self.time_of(self.slot);
        self.slot += 1;
        let (flow, seq) = match self.workload {
            Workload::Flows { packets, window_ns } => match self.pending.peek() {
                Some(&Reverse((due, flow, seq))) if due <= at => {
                    self.pending.pop();
                    (flow, seq)
                }
                _ => {
                    let flow = self.next_flow;
                    self.next_flow += 1;
                    if packets > 1 {
                        self.offsets.clear();
                        for _ in 1..packets {
                            let u = self.rand();
                            // Within 90 % of the window: packets may queue a little behind
                            // other due packets, and should still come within the window.
                            self.offsets
                                .push(1 + fp_hash::reduce(u, (window_ns * 9 / 10).max(1)));
                        }
                        self.offsets.sort_unstable();
                        for (i, off) in self.offsets.iter().enumerate() {
                            self.pending.push(Reverse((at + off, flow, i as u32 + 1)));
                        }
                    }
                    (flow, 0)
                }
            },
            Workload::Zipf { .. } => {
                let u = (self.rand() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                let r = self
                    .zipf_cdf
                    .partition_point(|&c| c < u)
                    .min(self.zipf_cdf.len() - 1);
                let seq = self.zipf_seq[r];
                self.zipf_seq[r] += 1;
                (r as u64, seq)
            }
        };
        Some(Packet {
            flow,
            seq,
            key: flow_key(flow, self.salt),
            at,
            len: self.len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn line_rate_spacing() {
        let g = TrafficGen::new(Workload::ONE, 100.0, 1000, 1);
        assert_eq!(g.rate_pps(), 12.5e6);
        let v: Vec<_> = g.take(4).collect();
        assert_eq!(
            v.iter().map(|p| p.at).collect::<Vec<_>>(),
            [0, 80, 160, 240]
        );
        assert!(v
            .windows(2)
            .all(|w| w[0].flow != w[1].flow && w[0].key != w[1].key));
    }

    #[test]
    fn k_packet_flows_within_window() {
        for k in [2u32, 8] {
            let g = TrafficGen::new(
                Workload::Flows {
                    packets: k,
                    window_ns: 50_000,
                },
                100.0,
                1000,
                7,
            );
            // flow -> (last arrival, next seq, packets seen)
            let mut first: HashMap<u64, (u64, u32, u32)> = HashMap::new();
            let n = 200_000;
            let mut late = 0;
            for p in g.take(n) {
                let e = first.entry(p.flow).or_insert((p.at, 0, 0));
                assert_eq!(p.seq, e.1, "sequence numbers in arrival order");
                e.1 += 1;
                // A packet may queue a little behind other due packets, but consecutive packets of a
                // flow stay closer than the window (so a 50 us expiry keeps the flow's one state).
                late += (p.at - e.0 >= 50_000) as u32;
                e.0 = p.at;
                e.2 += 1;
            }
            assert!(late < n as u32 / 1000, "{late} gaps beyond the window");
            let complete = first.values().filter(|v| v.2 == k).count() as f64;
            let flows = first.len() as f64;
            // Nearly every flow started long enough before the end is complete; one in k packets
            // starts a flow.
            assert!(complete / flows > 0.95);
            let ratio = flows / n as f64;
            assert!((ratio - 1.0 / k as f64).abs() < 0.01, "{ratio}");
        }
    }

    #[test]
    fn zipf_is_skewed_and_deterministic() {
        let w = Workload::Zipf {
            flows: 1000,
            exponent: 1.0,
        };
        let a: Vec<_> = TrafficGen::new(w, 10.0, 1000, 3).take(50_000).collect();
        let b: Vec<_> = TrafficGen::new(w, 10.0, 1000, 3).take(50_000).collect();
        assert_eq!(a, b);
        let top = a.iter().filter(|p| p.flow == 0).count() as f64 / a.len() as f64;
        // Rank 1 of Zipf(1) over 1000 flows has probability 1/H_1000 ≈ 0.1336.
        assert!((top - 0.1336).abs() < 0.01, "{top}");
    }
}
