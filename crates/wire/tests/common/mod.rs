//! Test support: a random packet *specification* and a naive byte builder for it, written
//! independently of fp-wire's emitters (plain `Vec` pushes and a textbook checksum), so that the
//! crate's parsers, etherparse and the spec can be compared three ways.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

pub fn rng(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(seed)
}

/// RFC 1071 sum, word by word (independent of fp_wire::checksum).
pub fn naive_sum(data: &[u8]) -> u32 {
    let mut acc: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            (c[0] as u16) << 8
        };
        acc += w as u32;
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc
}

pub fn naive_checksum(parts: &[&[u8]]) -> u16 {
    let mut acc = 0u32;
    for p in parts {
        assert!(p.len() % 2 == 0 || std::ptr::eq(*p, *parts.last().unwrap()));
        acc += naive_sum(p);
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

#[derive(Clone, Debug)]
pub enum Ext {
    HopByHop(Vec<u8>),
    Routing(Vec<u8>),
    DestOpts(Vec<u8>),
    /// 12 + icv bytes; icv len multiple of 8 minus 4 so the IPv6 AH stays 8-aligned (not required).
    Auth {
        spi: u32,
        seq: u32,
        icv: Vec<u8>,
    },
    Fragment {
        offset_units: u16,
        more: bool,
        ident: u32,
    },
}

impl Ext {
    pub fn number(&self) -> u8 {
        match self {
            Ext::HopByHop(_) => 0,
            Ext::Routing(_) => 43,
            Ext::DestOpts(_) => 60,
            Ext::Auth { .. } => 51,
            Ext::Fragment { .. } => 44,
        }
    }
}

#[derive(Clone, Debug)]
pub enum IpSpec {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        tos: u8,
        ident: u16,
        df: bool,
        mf: bool,
        offset_units: u16,
        ttl: u8,
        options: Vec<u8>,
        ah: Option<(u32, u32, Vec<u8>)>,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        tc: u8,
        flow: u32,
        hop: u8,
        exts: Vec<Ext>,
    },
}

#[derive(Clone, Debug)]
pub enum L4Spec {
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u16,
        window: u16,
        urg: u16,
        options: Vec<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
    },
    Icmp4 {
        ty: u8,
        code: u8,
        rest: u32,
    },
    Icmp6 {
        ty: u8,
        code: u8,
        rest: u32,
    },
    /// Some other protocol: its bytes are opaque payload.
    Other(u8),
}

impl L4Spec {
    pub fn protocol(&self) -> u8 {
        match self {
            L4Spec::Tcp { .. } => 6,
            L4Spec::Udp { .. } => 17,
            L4Spec::Icmp4 { .. } => 1,
            L4Spec::Icmp6 { .. } => 58,
            L4Spec::Other(p) => *p,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// (tpid, tci)
    pub vlans: Vec<(u16, u16)>,
    pub ip: IpSpec,
    pub l4: L4Spec,
    pub payload: Vec<u8>,
    pub padding: usize,
}

/// Where things ended up in the built frame.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Bytes of an IPv4 authentication header (fragment data when the fragment is not the first).
    pub ah_len: usize,
    pub l3: usize,
    pub l4: usize,
    pub end: usize,
    pub l4_len: usize,
}

impl Spec {
    pub fn is_v6(&self) -> bool {
        matches!(self.ip, IpSpec::V6 { .. })
    }

    /// Offset of the fragment in bytes and MF, if this datagram is a fragment.
    pub fn fragment(&self) -> Option<(u16, bool, u32)> {
        match &self.ip {
            IpSpec::V4 {
                mf,
                offset_units,
                ident,
                ..
            } => {
                if *mf || *offset_units != 0 {
                    Some((offset_units * 8, *mf, *ident as u32))
                } else {
                    None
                }
            }
            IpSpec::V6 { exts, .. } => exts.iter().find_map(|e| match e {
                Ext::Fragment {
                    offset_units,
                    more,
                    ident,
                } if *more || *offset_units != 0 => Some((offset_units * 8, *more, *ident)),
                _ => None,
            }),
        }
    }

    pub fn non_first_fragment(&self) -> bool {
        matches!(self.fragment(), Some((o, _, _)) if o != 0)
    }

    fn l4_bytes(&self, pseudo: &dyn Fn(u8, usize) -> Vec<u8>) -> Vec<u8> {
        let mut b = Vec::new();
        match &self.l4 {
            L4Spec::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                window,
                urg,
                options,
            } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&seq.to_be_bytes());
                b.extend_from_slice(&ack.to_be_bytes());
                let doff = ((20 + options.len()) / 4) as u16;
                b.extend_from_slice(&((doff << 12) | (flags & 0x0FFF)).to_be_bytes());
                b.extend_from_slice(&window.to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(&urg.to_be_bytes());
                b.extend_from_slice(options);
                b.extend_from_slice(&self.payload);
                let ph = pseudo(6, b.len());
                let c = naive_checksum(&[&ph, &b]);
                b[16..18].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::Udp { sport, dport } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&((8 + self.payload.len()) as u16).to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(&self.payload);
                let ph = pseudo(17, b.len());
                let mut c = naive_checksum(&[&ph, &b]);
                if c == 0 {
                    c = 0xFFFF;
                }
                b[6..8].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::Icmp4 { ty, code, rest } | L4Spec::Icmp6 { ty, code, rest } => {
                b.push(*ty);
                b.push(*code);
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(&rest.to_be_bytes());
                b.extend_from_slice(&self.payload);
                let c = if matches!(self.l4, L4Spec::Icmp6 { .. }) {
                    let ph = pseudo(58, b.len());
                    naive_checksum(&[&ph, &b])
                } else {
                    naive_checksum(&[&b])
                };
                b[2..4].copy_from_slice(&c.to_be_bytes());
            }
            L4Spec::Other(_) => b.extend_from_slice(&self.payload),
        }
        b
    }

    /// Build the frame with a naive writer. Returns the bytes and where the layers are.
    pub fn build(&self) -> (Vec<u8>, Layout) {
        let mut f = Vec::new();
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        let ethertype: u16 = if self.is_v6() { 0x86DD } else { 0x0800 };
        for (tpid, tci) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        let l3 = f.len();
        let mut lay = Layout {
            l3,
            ..Default::default()
        };
        match &self.ip {
            IpSpec::V4 {
                src,
                dst,
                tos,
                ident,
                df,
                mf,
                offset_units,
                ttl,
                options,
                ah,
            } => {
                let (s, d) = (*src, *dst);
                let pseudo = move |p: u8, len: usize| {
                    let mut v = Vec::new();
                    v.extend_from_slice(&s);
                    v.extend_from_slice(&d);
                    v.push(0);
                    v.push(p);
                    v.extend_from_slice(&(len as u16).to_be_bytes());
                    v
                };
                let l4 = self.l4_bytes(&pseudo);
                let mut ahb = Vec::new();
                if let Some((spi, seq, icv)) = ah {
                    ahb.push(self.l4.protocol());
                    ahb.push(((12 + icv.len()) / 4 - 2) as u8);
                    ahb.extend_from_slice(&[0, 0]);
                    ahb.extend_from_slice(&spi.to_be_bytes());
                    ahb.extend_from_slice(&seq.to_be_bytes());
                    ahb.extend_from_slice(icv);
                }
                let hl = 20 + options.len();
                let total = hl + ahb.len() + l4.len();
                let mut h = vec![
                    0x40 | (hl / 4) as u8,
                    *tos,
                    (total >> 8) as u8,
                    total as u8,
                    (ident >> 8) as u8,
                    *ident as u8,
                ];
                let fo = (if *df { 0x4000u16 } else { 0 })
                    | (if *mf { 0x2000 } else { 0 })
                    | (offset_units & 0x1FFF);
                h.extend_from_slice(&fo.to_be_bytes());
                h.push(*ttl);
                h.push(if ah.is_some() { 51 } else { self.l4.protocol() });
                h.extend_from_slice(&[0, 0]);
                h.extend_from_slice(src);
                h.extend_from_slice(dst);
                h.extend_from_slice(options);
                let c = naive_checksum(&[&h]);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                f.extend_from_slice(&h);
                f.extend_from_slice(&ahb);
                lay.ah_len = ahb.len();
                lay.l4 = f.len();
                f.extend_from_slice(&l4);
            }
            IpSpec::V6 {
                src,
                dst,
                tc,
                flow,
                hop,
                exts,
            } => {
                let (s, d) = (*src, *dst);
                let pseudo = move |p: u8, len: usize| {
                    let mut v = Vec::new();
                    v.extend_from_slice(&s);
                    v.extend_from_slice(&d);
                    v.extend_from_slice(&(len as u32).to_be_bytes());
                    v.extend_from_slice(&[0, 0, 0, p]);
                    v
                };
                let l4 = self.l4_bytes(&pseudo);
                let mut eb = Vec::new();
                for (i, e) in exts.iter().enumerate() {
                    let next = exts
                        .get(i + 1)
                        .map(|n| n.number())
                        .unwrap_or(self.l4.protocol());
                    match e {
                        Ext::HopByHop(data) | Ext::Routing(data) | Ext::DestOpts(data) => {
                            assert_eq!((data.len() + 2) % 8, 0);
                            eb.push(next);
                            eb.push(((data.len() + 2) / 8 - 1) as u8);
                            eb.extend_from_slice(data);
                        }
                        Ext::Auth { spi, seq, icv } => {
                            eb.push(next);
                            eb.push(((12 + icv.len()) / 4 - 2) as u8);
                            eb.extend_from_slice(&[0, 0]);
                            eb.extend_from_slice(&spi.to_be_bytes());
                            eb.extend_from_slice(&seq.to_be_bytes());
                            eb.extend_from_slice(icv);
                        }
                        Ext::Fragment {
                            offset_units,
                            more,
                            ident,
                        } => {
                            eb.push(next);
                            eb.push(0);
                            eb.extend_from_slice(
                                &(((offset_units & 0x1FFF) << 3) | *more as u16).to_be_bytes(),
                            );
                            eb.extend_from_slice(&ident.to_be_bytes());
                        }
                    }
                }
                let plen = eb.len() + l4.len();
                let first = exts
                    .first()
                    .map(|e| e.number())
                    .unwrap_or(self.l4.protocol());
                let w0 = (6u32 << 28) | ((*tc as u32) << 20) | (flow & 0xFFFFF);
                f.extend_from_slice(&w0.to_be_bytes());
                f.extend_from_slice(&(plen as u16).to_be_bytes());
                f.push(first);
                f.push(*hop);
                f.extend_from_slice(src);
                f.extend_from_slice(dst);
                f.extend_from_slice(&eb);
                lay.l4 = f.len();
                f.extend_from_slice(&l4);
            }
        }
        lay.end = f.len();
        lay.l4_len = lay.end - lay.l4;
        f.extend(std::iter::repeat_n(0u8, self.padding));
        (f, lay)
    }
}

fn bytes<const N: usize>(r: &mut Pcg64Mcg) -> [u8; N] {
    let mut b = [0u8; N];
    r.fill(&mut b[..]);
    b
}

fn vec(r: &mut Pcg64Mcg, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.fill(&mut v[..]);
    v
}

/// `base + step * k` random bytes, k uniform in `0..kmax`.
fn rvec(r: &mut Pcg64Mcg, base: usize, step: usize, kmax: usize) -> Vec<u8> {
    let n = base + step * r.gen_range(0..kmax);
    vec(r, n)
}

/// A random, valid frame specification.
pub fn random_spec(r: &mut Pcg64Mcg) -> Spec {
    let nvlan = [0, 0, 0, 1, 1, 2][r.gen_range(0..6)];
    let mut vlans = Vec::new();
    for i in 0..nvlan {
        let tpid = if i == 0 && nvlan == 2 {
            [0x88A8u16, 0x9100, 0x8100][r.gen_range(0..3)]
        } else {
            0x8100
        };
        vlans.push((tpid, r.gen::<u16>()));
    }
    let v6 = r.gen_bool(0.5);
    let l4 = match r.gen_range(0..10) {
        0..=3 => {
            let optlen = [0usize, 4, 12, 20, 40][r.gen_range(0..5)];
            L4Spec::Tcp {
                sport: r.gen(),
                dport: r.gen(),
                seq: r.gen(),
                ack: r.gen(),
                flags: r.gen::<u16>() & 0x0FFF,
                window: r.gen(),
                urg: r.gen(),
                options: vec(r, optlen),
            }
        }
        4..=6 => L4Spec::Udp {
            sport: r.gen(),
            dport: r.gen(),
        },
        7 => {
            if v6 {
                L4Spec::Icmp6 {
                    ty: r.gen(),
                    code: r.gen(),
                    rest: r.gen(),
                }
            } else {
                L4Spec::Icmp4 {
                    ty: r.gen(),
                    code: r.gen(),
                    rest: r.gen(),
                }
            }
        }
        _ => {
            // Anything that is not parsed further by either parser and not an IPv6 ext header.
            let choices = [47u8, 4, 50, 132, 59, 253, 41, 103];
            L4Spec::Other(choices[r.gen_range(0..choices.len())])
        }
    };
    let plen = [0usize, 1, 7, 64, 300][r.gen_range(0..5)];
    let payload = vec(r, plen);
    let ip = if !v6 {
        let frag = r.gen_bool(0.2);
        let optlen = if r.gen_bool(0.3) {
            4 * r.gen_range(1..=10)
        } else {
            0
        };
        IpSpec::V4 {
            src: bytes(r),
            dst: bytes(r),
            tos: r.gen(),
            ident: r.gen(),
            df: !frag && r.gen_bool(0.7),
            mf: frag && r.gen_bool(0.6),
            offset_units: if frag && r.gen_bool(0.6) {
                r.gen_range(1..1000)
            } else {
                0
            },
            ttl: r.gen(),
            options: vec(r, optlen),
            ah: if r.gen_bool(0.1) {
                Some((r.gen(), r.gen(), rvec(r, 0, 4, 4)))
            } else {
                None
            },
        }
    } else {
        let mut exts = Vec::new();
        if r.gen_bool(0.2) {
            exts.push(Ext::HopByHop(rvec(r, 6, 8, 3)));
        }
        for _ in 0..r.gen_range(0..3) {
            exts.push(match r.gen_range(0..3) {
                0 => Ext::Routing(rvec(r, 6, 8, 3)),
                1 => Ext::DestOpts(rvec(r, 6, 8, 2)),
                _ => Ext::Auth {
                    spi: r.gen(),
                    seq: r.gen(),
                    icv: rvec(r, 4, 8, 2),
                },
            });
        }
        if r.gen_bool(0.25) {
            let more = r.gen_bool(0.6);
            let offset_units = if r.gen_bool(0.5) {
                r.gen_range(1..1000)
            } else {
                0
            };
            exts.push(Ext::Fragment {
                offset_units,
                more,
                ident: r.gen(),
            });
        }
        IpSpec::V6 {
            src: bytes(r),
            dst: bytes(r),
            tc: r.gen(),
            flow: r.gen::<u32>() & 0xFFFFF,
            hop: r.gen(),
            exts,
        }
    };
    Spec {
        dst_mac: bytes(r),
        src_mac: bytes(r),
        vlans,
        ip,
        l4,
        payload,
        padding: [0usize, 0, 0, 6, 20][r.gen_range(0..5)],
    }
}

/// Damage a valid frame: flip bytes, truncate, or overwrite a length-ish byte.
pub fn mutate(r: &mut Pcg64Mcg, f: &mut Vec<u8>) {
    for _ in 0..r.gen_range(1..4) {
        if f.is_empty() {
            return;
        }
        match r.gen_range(0..5) {
            0 => {
                let n = r.gen_range(0..=f.len());
                f.truncate(n);
            }
            1 | 2 => {
                // Mostly the first 80 bytes, where the headers are.
                let i = r.gen_range(0..f.len().min(80));
                f[i] = r.gen();
            }
            3 => {
                let i = r.gen_range(0..f.len());
                f[i] ^= 1 << r.gen_range(0..8);
            }
            _ => {
                let n = r.gen_range(0..40);
                f.extend(std::iter::repeat_n(0u8, n));
            }
        }
    }
}
