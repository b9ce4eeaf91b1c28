//! Emitting a burst's packets: the `Emitter` encapsulates a packet toward its backend and queues
//! it for transmission; a packet too big for the path MTU is fragmented or answered with an ICMP
//! error (rate-limited); a fragment owned by another balancer of a cluster is redirected to it.

use crate::config::EncapKind;
use crate::export::{Event, Tap, Why};
use crate::snapshot::Snapshot;
use crate::stats::{Outcome, WorkerStats};
use fp_pipeline::packet::{Packet, Pool};
use fp_pipeline::trace::TokenBucket;
use fp_wire::{FlowKey, PacketSummary};

/// The worker's ICMP "too big" rate limit: `balancer.icmp_rate` per second with bursts of up to
/// [`ICMP_BURST`] (the shape of the kernel's own ICMP limits); `None` when the rate is 0.
pub(super) fn icmp_limit(rate: u32) -> Option<TokenBucket> {
    (rate > 0).then(|| TokenBucket::new(rate as f64, rate.min(ICMP_BURST)))
}

/// Most ICMP errors a worker sends back to back.
const ICMP_BURST: u32 = 50;

/// Most fragments one datagram is cut into for the path MTU (a 2 KiB frame at the smallest MTU
/// needs 5).
const MAX_PIECES: usize = 8;

/// Where a burst's packets go out: the snapshot they are forwarded with, the counters, the
/// transmit burst and the buffer pool, and the outer IPv4 identification counter.
pub(super) struct Emitter<'a> {
    pub(super) snap: &'a Snapshot,
    pub(super) stats: &'a WorkerStats,
    pub(super) tx: &'a mut Vec<Packet>,
    pub(super) pool: &'a mut Pool,
    pub(super) ident: &'a mut u16,
    pub(super) seed: u64,
    pub(super) icmp: &'a mut Option<TokenBucket>,
    pub(super) now_ns: u64,
    /// The flow export's queue and sampler, when the worker has one.
    pub(super) export: Option<&'a mut Tap>,
}

impl Emitter<'_> {
    /// Flow export: a record of the packet of `key` whose IP packet lies at `l3` in its frame,
    /// when the sampler picks it (call once per packet matched to a VIP and given a backend),
    /// sent to `backend` for `why`.
    #[inline(always)]
    pub(super) fn sample(&mut self, l3: (u16, u16), key: &FlowKey, backend: u32, why: Why) {
        if let Some(t) = self.export.as_deref_mut() {
            if t.sample_this() {
                let snap = self.snap;
                let b = || snap.backend(backend).map(|b| b.address);
                // `octetDeltaCount` counts the IP packet (header and payload).
                let len = l3.1.saturating_sub(l3.0);
                t.send(Event::Sampled(why, len), *key, b, self.now_ns);
            }
        }
    }

    /// Drop `p`, counted under `why`.
    #[inline]
    pub(super) fn drop(&mut self, p: Packet, why: Outcome) {
        self.stats.count(why, 1);
        self.pool.put(p);
    }

    /// Encapsulate `p` (whose IP packet lies at `l3` in the frame) toward `backend` of `vip` and
    /// queue it for transmission (or drop it, counted).
    #[inline]
    pub(super) fn packet(
        &mut self,
        p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
    ) {
        self.send(p, l3, vip, backend, key, None)
    }

    /// [`packet`](Self::packet), naming `second` in the outer header when given (second chance,
    /// `fp_wire::second_chance`): the option costs 4 + 4n bytes of the path MTU over IPv4, 8 + 16n
    /// over IPv6; a packet the option does not fit (no headroom) goes without, counted.
    #[inline]
    pub(super) fn send(
        &mut self,
        mut p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
        second: Option<super::decide::Chain>,
    ) {
        let snap = self.snap;
        let stats = self.stats;
        let Some(pre) = snap.encap(vip, backend) else {
            self.drop(p, Outcome::NoBackend);
            return;
        };
        let v6_outer = matches!(pre.encap.ip, fp_wire::encap::OuterIp::V6 { .. });
        let second = match second {
            Some(c) if c.addrs().iter().all(|a| a.is_ipv6() == v6_outer) => Some(c),
            Some(_) => {
                stats.count(Outcome::SecondChanceUnsent, 1);
                None
            }
            None => None,
        };
        let max_inner = match &second {
            Some(c) => pre
                .max_inner
                .saturating_sub(fp_wire::second_chance::overhead(v6_outer, c.addrs().len()) as u16),
            None => pre.max_inner,
        };
        let inner_len = (l3.1 - l3.0) as u64;
        if inner_len > max_inner as u64 {
            self.too_big(p, l3, vip, backend, key, max_inner);
            return;
        }
        let start = p.start();
        let inner = start + l3.0 as usize..start + l3.1 as usize;
        *self.ident = self.ident.wrapping_add(1);
        let r = if let Some(t) = &pre.template {
            t.encapsulate(p.buffer(), inner.clone(), *self.ident)
        } else if snap.vips[vip as usize].encap == EncapKind::L2Dsr {
            fp_wire::ethernet::rewrite_macs(p.data_mut(), pre.encap.l2.dst, pre.encap.l2.src)
                .map(|_| start)
        } else {
            let needs_hash = matches!(pre.encap.ip, fp_wire::encap::OuterIp::V6 { .. })
                || matches!(pre.encap.tunnel, fp_wire::encap::Tunnel::Vxlan { .. });
            let flow_hash = if needs_hash { key.hash(self.seed) } else { 0 };
            pre.encap
                .encapsulate(p.buffer(), inner.clone(), flow_hash, *self.ident)
        };
        match r {
            Ok(new_start) if new_start != start => p.set_frame(new_start, inner.end - new_start),
            Ok(_) => {}
            Err(_) => {
                self.drop(p, Outcome::EncapFailed);
                return;
            }
        }
        if let Some(c) = &second {
            let (s, e) = (p.start(), inner.end);
            let l2 = pre.encap.l2.len();
            match fp_wire::second_chance::insert(p.buffer(), s, e, l2, c.addrs()) {
                Ok(n) => {
                    p.set_frame(n, e - n);
                    stats.count(Outcome::SecondChanceSent, 1);
                }
                Err(_) => stats.count(Outcome::SecondChanceUnsent, 1),
            }
        }
        stats.count(Outcome::Tx, 1);
        stats.count(Outcome::TxBytes, p.len() as u64);
        if let Some(c) = stats.vip(vip as usize) {
            c.packets.inc();
            c.bytes.add(inner_len);
        }
        if let Some(c) = stats.backend(backend as usize) {
            c.packets.inc();
            c.bytes.add(inner_len);
        }
        self.tx.push(p);
    }

    /// A packet that would exceed the path MTU once encapsulated: an IPv4 datagram without DF is
    /// cut into fragments that fit, each sent on like any packet; anything else is dropped and
    /// answered (rate-limited) with an ICMP "fragmentation needed" / "packet too big" carrying
    /// `max_inner`, the MTU the client should use toward the VIP.
    #[cold]
    #[inline(never)]
    fn too_big(
        &mut self,
        mut p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
        max_inner: u16,
    ) {
        let start = p.start();
        let inner = start + l3.0 as usize..start + l3.1 as usize;
        let ip = &p.data()[l3.0 as usize..l3.1 as usize];
        let may_fragment = ip.first().map(|b| b >> 4) == Some(4)
            && ip.len() >= fp_wire::ipv4::HEADER_LEN
            && ip[6] & 0x40 == 0;
        if may_fragment {
            self.fragment(p, l3, vip, backend, key, max_inner);
            return;
        }
        let to = fp_wire::pmtu::source_of(ip);
        self.stats.count(Outcome::TooBig, 1);
        if !to.is_some_and(fp_wire::pmtu::may_receive_error) {
            self.pool.put(p);
            return;
        }
        let now_ns = self.now_ns;
        if !self.icmp.as_mut().is_some_and(|b| b.take(now_ns)) {
            self.stats.count(Outcome::MtuIcmpLimited, 1);
            self.pool.put(p);
            return;
        }
        *self.ident = self.ident.wrapping_add(1);
        let frame = start..start + p.len();
        match fp_wire::pmtu::too_big_in_place(p.buffer(), frame, inner, max_inner, *self.ident) {
            Ok(r) => {
                p.set_frame(r.start, r.len());
                self.stats.count(Outcome::MtuIcmpSent, 1);
                self.stats.count(Outcome::Tx, 1);
                self.stats.count(Outcome::TxBytes, p.len() as u64);
                self.tx.push(p);
            }
            Err(_) => self.pool.put(p),
        }
    }

    /// Cut the IPv4 datagram at `l3` (DF clear) into fragments of at most `max_inner` bytes, each
    /// encapsulated and sent like any packet, in order.
    #[cold]
    fn fragment(
        &mut self,
        mut p: Packet,
        l3: (u16, u16),
        vip: u32,
        backend: u32,
        key: &FlowKey,
        max_inner: u16,
    ) {
        let (l2, end) = (l3.0 as usize, l3.1 as usize);
        let plan = match fp_wire::pmtu::Fragmenter::new(&p.data()[l2..end], max_inner as usize) {
            Ok(f) if f.count() <= MAX_PIECES => f,
            _ => {
                self.drop(p, Outcome::TooBig);
                return;
            }
        };
        let mut rest: [Option<(Packet, u16)>; MAX_PIECES] = std::array::from_fn(|_| None);
        for (i, slot) in rest.iter_mut().enumerate().take(plan.count()).skip(1) {
            let Some(mut q) = self.pool.get() else { break };
            let qs = q.start();
            let src = p.data();
            let out = &mut q.buffer()[qs..];
            out[..l2].copy_from_slice(&src[..l2]);
            match plan.emit(&src[l2..end], i, &mut out[l2..]) {
                Ok(n) => {
                    q.set_frame(qs, l2 + n);
                    *slot = Some((q, (l2 + n) as u16));
                }
                Err(_) => self.pool.put(q),
            }
        }
        if rest
            .iter()
            .skip(1)
            .take(plan.count() - 1)
            .any(Option::is_none)
        {
            for (q, _) in rest.iter_mut().filter_map(Option::take) {
                self.pool.put(q);
            }
            self.drop(p, Outcome::TooBig);
            return;
        }
        let Ok(n) = plan.first_in_place(&mut p.data_mut()[l2..end]) else {
            self.drop(p, Outcome::TooBig);
            return;
        };
        self.stats.count(Outcome::MtuFragmented, 1);
        let start = p.start();
        p.set_frame(start, l2 + n);
        self.packet(p, (l3.0, (l2 + n) as u16), vip, backend, key);
        for (q, e) in rest.iter_mut().filter_map(Option::take) {
            self.packet(q, (l3.0, e), vip, backend, key);
        }
    }

    /// Send a fragment to the balancer that owns its datagram, GRE-encapsulated with recursion
    /// control 1 (see [`crate::snapshot::ClusterState::redirect`]).
    #[cold]
    pub(super) fn redirect(
        &mut self,
        c: &crate::snapshot::ClusterState,
        owner: usize,
        mut p: Packet,
        s: &PacketSummary,
    ) {
        let Some(e) = c.redirect(owner, s.dst()) else {
            self.drop(p, Outcome::EncapFailed);
            return;
        };
        let start = p.start();
        let inner = start + s.l3_offset as usize..start + s.l3_end();
        *self.ident = self.ident.wrapping_add(1);
        match e.encapsulate(p.buffer(), inner.clone(), 0, *self.ident) {
            Ok(new_start) => {
                p.set_frame(new_start, inner.end - new_start);
                self.stats.count(Outcome::FragRedirected, 1);
                self.stats.count(Outcome::Tx, 1);
                self.stats.count(Outcome::TxBytes, p.len() as u64);
                self.tx.push(p);
            }
            Err(_) => self.drop(p, Outcome::EncapFailed),
        }
    }
}
