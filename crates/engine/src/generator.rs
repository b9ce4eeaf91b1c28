//! The in-memory traffic generator: a [`Port`] that produces frames of a named mix toward a set of
//! targets (the VIPs), with synthetic timestamps at a given packet rate.
//!
//! Mixes (Maglev §5.2.2's traffic types and the cases the pipeline must survive):
//!
//! | name | what |
//! |---|---|
//! | `syn` | a new connection per packet (TCP SYN from an ever-new source) |
//! | `established` | ACK packets over `conns` connections, chosen uniformly |
//! | `zipf` | ACK packets over `conns` connections, Zipf(0.99) popularity |
//! | `constant` | every packet has the same 5-tuple |
//! | `v4v6` | `established`, half of the connections over IPv6 |
//! | `fragmented` | 4000-byte UDP datagrams in 1200-byte fragments, shuffled within each datagram |
//! | `malformed` | valid frames damaged one way or another (truncated, bad checksum, bad IHL, ...) |
//! | `demo` | a blend: 70 % zipf, 10 % syn, 10 % IPv6, 5 % fragmented, 5 % malformed |
//!
//! Frames are written straight into packet buffers (no allocation per packet). Sources are
//! 198.18.0.0/15 (IPv4) and 2001:db8:c::/48 (IPv6), the documentation benchmark ranges.

use crate::port::{Port, PortStats};
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{Packet, Pool, MAX_FRAME};
use fp_wire::ip::IpProtocol;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use rand_pcg::Pcg64Mcg;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A destination the generator sends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Address.
    pub addr: IpAddr,
    /// Port.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: IpProtocol,
}

/// A traffic mix.
#[derive(Clone, Debug, PartialEq)]
pub enum Mix {
    /// A new connection per packet.
    Syn,
    /// ACKs over `conns` connections, uniform, or Zipf with exponent `zipf`.
    Established {
        /// Number of connections.
        conns: u64,
        /// Zipf exponent, or uniform.
        zipf: Option<f64>,
    },
    /// One 5-tuple.
    Constant,
    /// `Established` with a share of IPv6 connections.
    V4V6 {
        /// Number of connections.
        conns: u64,
        /// Share of connections over IPv6.
        v6_share: f64,
    },
    /// Fragmented UDP datagrams.
    Fragmented {
        /// UDP payload per datagram.
        datagram: usize,
        /// IP payload per fragment.
        fragment: usize,
        /// Shuffle the fragments of each datagram.
        shuffle: bool,
    },
    /// Damaged frames.
    Malformed,
    /// A weighted blend of mixes.
    Blend(Vec<(f64, Mix)>),
}

impl Mix {
    /// The mix called `name` (see the module doc), with `conns` connections where that applies.
    pub fn named(name: &str, conns: u64) -> Option<Mix> {
        Some(match name {
            "syn" => Mix::Syn,
            "established" => Mix::Established { conns, zipf: None },
            "zipf" => Mix::Established {
                conns,
                zipf: Some(0.99),
            },
            "constant" => Mix::Constant,
            "v4v6" => Mix::V4V6 {
                conns,
                v6_share: 0.5,
            },
            "fragmented" => Mix::Fragmented {
                datagram: 4000,
                fragment: 1200,
                shuffle: true,
            },
            "malformed" => Mix::Malformed,
            "demo" => Mix::Blend(vec![
                (
                    0.70,
                    Mix::Established {
                        conns,
                        zipf: Some(0.99),
                    },
                ),
                (0.10, Mix::Syn),
                (
                    0.10,
                    Mix::V4V6 {
                        conns: conns / 4 + 1,
                        v6_share: 1.0,
                    },
                ),
                (
                    0.05,
                    Mix::Fragmented {
                        datagram: 4000,
                        fragment: 1200,
                        shuffle: true,
                    },
                ),
                (0.05, Mix::Malformed),
            ]),
            _ => return None,
        })
    }

    /// Names accepted by [`Mix::named`].
    pub const NAMES: &'static [&'static str] = &[
        "syn",
        "established",
        "zipf",
        "constant",
        "v4v6",
        "fragmented",
        "malformed",
        "demo",
    ];
}

/// Generator settings.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// The mix.
    pub mix: Mix,
    /// Destinations (VIPs). TCP mixes use TCP targets, UDP mixes UDP targets (any if none).
    pub targets: Vec<Target>,
    /// Stop after this many packets (`None`: never).
    pub packets: Option<u64>,
    /// Packet rate that spaces the timestamps.
    pub pps: f64,
    /// Seed.
    pub seed: u64,
    /// Timestamp of the first packet.
    pub start_ns: u64,
}

/// Ways a `malformed` frame is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Cut inside the IP header.
    Truncated,
    /// IPv4 header checksum wrong.
    BadChecksum,
    /// IPv4 IHL below 5.
    BadIhl,
    /// IPv4 total length beyond the frame.
    BadTotalLength,
    /// Ethertype neither IPv4 nor IPv6.
    UnknownEthertype,
    /// IP version neither 4 nor 6.
    BadVersion,
}

impl Damage {
    /// All kinds, in the order the generator cycles through them.
    pub const ALL: [Damage; 6] = [
        Damage::Truncated,
        Damage::BadChecksum,
        Damage::BadIhl,
        Damage::BadTotalLength,
        Damage::UnknownEthertype,
        Damage::BadVersion,
    ];
}

/// The generator port.
pub struct Generator {
    cfg: GenConfig,
    rng: Pcg64Mcg,
    zipf: Vec<Option<Zipf<f64>>>,
    sent: u64,
    next_syn: u64,
    next_datagram: u32,
    damage: usize,
    pending: VecDeque<Vec<u8>>,
    stats: PortStats,
    tcp: Vec<Target>,
    udp: Vec<Target>,
}

fn source(flow: u64, v6: bool) -> (IpAddr, u16) {
    let host = flow / 50_000;
    let sport = 1024 + (flow % 50_000) as u16;
    if v6 {
        let a = 0x2001_0db8_000c_0000_0000_0000_0000_0000u128 | host as u128;
        (IpAddr::V6(Ipv6Addr::from(a)), sport)
    } else {
        // 198.18.0.0/15 has 2^17 hosts; wrap beyond (host * 50000 ports is plenty for benchmarks).
        let a = (198u32 << 24 | 18 << 16) + (host as u32 & 0x1_ffff);
        (IpAddr::V4(Ipv4Addr::from(a)), sport)
    }
}

impl Generator {
    /// A generator.
    pub fn new(cfg: GenConfig) -> Generator {
        let zipf = Self::zipfs(&cfg.mix);
        let tcp: Vec<Target> = cfg
            .targets
            .iter()
            .filter(|t| t.protocol == IpProtocol::TCP)
            .copied()
            .collect();
        let udp: Vec<Target> = cfg
            .targets
            .iter()
            .filter(|t| t.protocol == IpProtocol::UDP)
            .copied()
            .collect();
        Generator {
            rng: Pcg64Mcg::seed_from_u64(cfg.seed),
            zipf,
            sent: 0,
            next_syn: 1 << 40,
            next_datagram: 1,
            damage: 0,
            pending: VecDeque::new(),
            stats: PortStats::default(),
            tcp,
            udp,
            cfg,
        }
    }

    fn zipfs(m: &Mix) -> Vec<Option<Zipf<f64>>> {
        match m {
            Mix::Established {
                conns,
                zipf: Some(s),
            } => vec![Zipf::new(*conns, *s).ok()],
            Mix::Blend(v) => v.iter().flat_map(|(_, m)| Self::zipfs(m)).collect(),
            _ => vec![None],
        }
    }

    fn target(&self, proto: IpProtocol, flow: u64, v6: bool) -> Option<Target> {
        let pick = |v: &Vec<Target>| -> Option<Target> {
            let fam: Vec<&Target> = v.iter().filter(|t| t.addr.is_ipv6() == v6).collect();
            if fam.is_empty() {
                None
            } else {
                Some(*fam[(flow % fam.len() as u64) as usize])
            }
        };
        let primary = if proto == IpProtocol::UDP {
            &self.udp
        } else {
            &self.tcp
        };
        pick(primary).or_else(|| pick(&self.cfg.targets))
    }

    fn endpoints(&self, proto: IpProtocol, flow: u64, v6: bool) -> Option<Endpoints> {
        let t = self
            .target(proto, flow, v6)
            .or_else(|| self.target(proto, flow, !v6))?;
        let (src, sport) = source(flow, t.addr.is_ipv6());
        Some(Endpoints {
            src,
            sport,
            dst: t.addr,
            dport: t.port,
        })
    }

    /// Write the next frame into `out`; returns its length (0 if the mix cannot produce one).
    fn frame(&mut self, mix_index: &mut usize, mix: &Mix, out: &mut [u8]) -> usize {
        match mix {
            Mix::Syn => {
                let flow = self.next_syn;
                self.next_syn += 1;
                self.endpoints(IpProtocol::TCP, flow, false)
                    .map_or(0, |e| craft::tcp_into(&e, true, out))
            }
            Mix::Established { conns, zipf } => {
                let z = self.zipf.get(*mix_index).copied().flatten();
                *mix_index += 1;
                let flow = match (zipf, z) {
                    (Some(_), Some(z)) => z.sample(&mut self.rng) as u64 - 1,
                    _ => self.rng.gen_range(0..*conns),
                };
                self.endpoints(IpProtocol::TCP, flow, false)
                    .map_or(0, |e| craft::tcp_into(&e, false, out))
            }
            Mix::Constant => self
                .endpoints(IpProtocol::TCP, 7, false)
                .map_or(0, |e| craft::tcp_into(&e, false, out)),
            Mix::V4V6 { conns, v6_share } => {
                let flow = self.rng.gen_range(0..*conns);
                let v6 = (fp_hash::splitmix64(flow) as f64 / u64::MAX as f64) < *v6_share;
                self.endpoints(IpProtocol::TCP, flow, v6)
                    .map_or(0, |e| craft::tcp_into(&e, false, out))
            }
            Mix::Fragmented {
                datagram,
                fragment,
                shuffle,
            } => {
                if self.pending.is_empty() {
                    let id = self.next_datagram;
                    self.next_datagram = self.next_datagram.wrapping_add(1);
                    let Some(e) = self.endpoints(IpProtocol::UDP, id as u64, false) else {
                        return 0;
                    };
                    let mut frags = craft::udp_fragments(&e, *datagram, *fragment, id);
                    if *shuffle {
                        for i in (1..frags.len()).rev() {
                            let j = self.rng.gen_range(0..=i);
                            frags.swap(i, j);
                        }
                    }
                    self.pending.extend(frags);
                }
                let f = self.pending.pop_front().expect("refilled above");
                out[..f.len()].copy_from_slice(&f);
                f.len()
            }
            Mix::Malformed => {
                let flow = self.rng.gen_range(0..1_000_000);
                let Some(e) = self.endpoints(IpProtocol::TCP, flow, false) else {
                    return 0;
                };
                let n = craft::tcp_into(&e, false, out);
                let d = Damage::ALL[self.damage % Damage::ALL.len()];
                self.damage += 1;
                match d {
                    Damage::Truncated => 14 + self.rng.gen_range(1..20),
                    Damage::BadChecksum => {
                        out[24] ^= 0x5a;
                        n
                    }
                    Damage::BadIhl => {
                        out[14] = 0x43;
                        n
                    }
                    Damage::BadTotalLength => {
                        out[16..18].copy_from_slice(&1400u16.to_be_bytes());
                        n
                    }
                    Damage::UnknownEthertype => {
                        out[12..14].copy_from_slice(&[0x88, 0xb5]);
                        n
                    }
                    Damage::BadVersion => {
                        out[14] = 0x55;
                        n
                    }
                }
            }
            Mix::Blend(v) => {
                // While a fragmented datagram is being emitted, finish it first.
                if !self.pending.is_empty() {
                    let f = self.pending.pop_front().expect("non-empty");
                    out[..f.len()].copy_from_slice(&f);
                    return f.len();
                }
                let total: f64 = v.iter().map(|(w, _)| w).sum();
                let mut x = self.rng.gen::<f64>() * total;
                let mut idx = 0;
                for (i, (w, m)) in v.iter().enumerate() {
                    let zi = idx;
                    idx += Self::zipfs(m).len();
                    if x < *w || i + 1 == v.len() {
                        let mut z = zi;
                        return self.frame(&mut z, m, out);
                    }
                    x -= w;
                }
                0
            }
        }
    }
}

impl Port for Generator {
    fn name(&self) -> &str {
        "generator"
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        // Take the mix out while generating (frame() needs `&mut self`); put it back after.
        let mix = std::mem::replace(&mut self.cfg.mix, Mix::Constant);
        while n < max && self.cfg.packets.is_none_or(|limit| self.sent < limit) {
            let Some(mut p) = pool.get() else { break };
            let mut zi = 0;
            let len = {
                let area = p.rx_area();
                self.frame(&mut zi, &mix, &mut area[..MAX_FRAME])
            };
            if len == 0 {
                pool.put(p);
                break;
            }
            p.set_len(len);
            p.ts_ns = self.cfg.start_ns + (self.sent as f64 * 1e9 / self.cfg.pps) as u64;
            self.sent += 1;
            out.push(p);
            n += 1;
        }
        self.cfg.mix = mix;
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.stats.tx_dropped += batch.len() as u64;
        pool.put_all(batch);
        0
    }

    fn exhausted(&self) -> bool {
        self.cfg.packets.is_some_and(|l| self.sent >= l)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_wire::PacketSummary;

    fn targets() -> Vec<Target> {
        vec![
            Target {
                addr: "203.0.113.10".parse().unwrap(),
                port: 80,
                protocol: IpProtocol::TCP,
            },
            Target {
                addr: "203.0.113.53".parse().unwrap(),
                port: 53,
                protocol: IpProtocol::UDP,
            },
            Target {
                addr: "2001:db8::10".parse().unwrap(),
                port: 80,
                protocol: IpProtocol::TCP,
            },
        ]
    }

    fn run(mix: &str, n: u64) -> Vec<Vec<u8>> {
        let mut g = Generator::new(GenConfig {
            mix: Mix::named(mix, 1000).unwrap(),
            targets: targets(),
            packets: Some(n),
            pps: 1e6,
            seed: 1,
            start_ns: 0,
        });
        let mut pool = Pool::new(64);
        let mut out = Vec::new();
        let mut b = Vec::new();
        while !g.exhausted() {
            g.rx_burst(&mut pool, &mut b, 32);
            out.extend(b.iter().map(|p| p.data().to_vec()));
            pool.put_all(&mut b);
        }
        out
    }

    #[test]
    fn mixes_produce_what_they_say() {
        let syn = run("syn", 500);
        assert_eq!(syn.len(), 500);
        let mut keys = std::collections::HashSet::new();
        for f in &syn {
            let s = PacketSummary::parse(f).unwrap();
            assert!(s.tcp_flags.is_syn_only());
            assert!(keys.insert(s.flow_key()), "SYN flows must be new");
        }
        let est = run("established", 2000);
        let flows: std::collections::HashSet<_> = est
            .iter()
            .map(|f| PacketSummary::parse(f).unwrap().flow_key())
            .collect();
        assert!(flows.len() <= 1000 && flows.len() > 500);
        let c = run("constant", 100);
        assert!(c.windows(2).all(|w| w[0] == w[1]));
        let v = run("v4v6", 1000);
        let v6 = v
            .iter()
            .filter(|f| PacketSummary::parse(f).unwrap().dst().is_ipv6())
            .count();
        assert!((300..700).contains(&v6), "{v6}");
        let frags = run("fragmented", 40);
        assert!(frags
            .iter()
            .all(|f| PacketSummary::parse(f).unwrap().fragment.is_some()));
        let bad = run("malformed", 60);
        assert!(bad.iter().all(|f| PacketSummary::parse(f).is_err()));
        let demo = run("demo", 2000);
        let errs = demo
            .iter()
            .filter(|f| PacketSummary::parse(f).is_err())
            .count();
        assert!((40..180).contains(&errs), "{errs}");
    }

    #[test]
    fn zipf_is_skewed() {
        let z = run("zipf", 5000);
        let mut counts = std::collections::HashMap::new();
        for f in &z {
            *counts
                .entry(PacketSummary::parse(f).unwrap().flow_key())
                .or_insert(0) += 1;
        }
        let max = counts.values().max().copied().unwrap_or(0);
        assert!(
            max > 5000 / 20,
            "most popular flow has {max} of 5000 packets"
        );
    }

    #[test]
    fn timestamps_follow_the_rate() {
        let mut g = Generator::new(GenConfig {
            mix: Mix::Constant,
            targets: targets(),
            packets: Some(3),
            pps: 1000.0,
            seed: 1,
            start_ns: 5,
        });
        let mut pool = Pool::new(8);
        let mut b = Vec::new();
        g.rx_burst(&mut pool, &mut b, 32);
        let ts: Vec<u64> = b.iter().map(|p| p.ts_ns).collect();
        assert_eq!(ts, vec![5, 1_000_005, 2_000_005]);
    }
}
