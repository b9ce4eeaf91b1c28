//! The packet tracer's worker side (Maglev §4.4): recognise a probe, rate-limit it, and hand a
//! record of what the worker did with it to the control side — without a clock, a lock, a system
//! call or an allocation in the worker.
//!
//! # The probe marker
//!
//! A probe is a TCP segment or UDP datagram whose **payload begins with the 16 bytes
//! [`PROBE_MAGIC`] = `b"FLOWPLANE-TRACE1"`**, followed by an 8-byte big-endian probe id the sender
//! chooses (to find its probe among the records). [`probe_payload`] builds it; anything may follow.
//! With any TCP/UDP client: `printf 'FLOWPLANE-TRACE1\0\0\0\0\0\0\0\x2a' | nc -u VIP PORT` sends
//! probe 42. The marker sits at the start of the payload, behind unmodified L3/L4 headers, so the
//! probe takes exactly the path that ordinary packets of its 5-tuple take (Maglev's tool likewise
//! sends "specially marked Maglev-recognizable payloads with specified L3 and L4 headers").
//!
//! Recognised: whatever `fp_wire`'s parser ([`PacketSummary`]) accepts — Ethernet II with up to
//! two VLAN tags, IPv4 (with options; unfragmented or a first fragment) or IPv6 (with extension
//! headers), then TCP or UDP. ICMP errors quoting a connection are never probes.
//!
//! # Cost for ordinary packets
//!
//! [`probe_id`] rejects frames too short to hold a probe (pure ACKs, SYNs, small datagrams) with
//! one length test; for longer frames it reads the Ethernet, IP and TCP/UDP headers through
//! `fp_wire`'s checked views (a few ns) and compares 16 bytes. A stage that has parsed the frame
//! already calls [`probe_in`] with its summary: the compare only.
//!
//! # Records: a bounded queue per worker
//!
//! A worker owns a [`ProbeSender`]: a token bucket ([`TracerConfig`], default 10 records/s with a
//! burst of 10, on the worker's `now_ns`) and the sending end of a bounded queue. A probe over the
//! limit is forwarded as usual and counted as suppressed; a record that finds the queue full is
//! counted as dropped. The control side holds the [`ProbeReceiver`]s, drains them, stamps the
//! records with the wall clock, logs them and serves them (`fp_control::trace::TraceLog`).
//!
//! ```
//! use fp_pipeline::trace::{probe_id, probe_payload, probe_queue, TracerConfig};
//!
//! let frame = fp_pipeline::craft::udp_with(
//!     &fp_pipeline::craft::Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80),
//!     &probe_payload(42),
//! );
//! let (mut tx, rx) = probe_queue::<&'static str>(16, TracerConfig::default());
//! let now_ns = 1_000;
//! if let Some(id) = probe_id(&frame) {
//!     if tx.admit(now_ns) {
//!         tx.send(id, now_ns, "forwarded to port 3");
//!     }
//! }
//! let p = rx.try_recv().unwrap();
//! assert_eq!((p.id, p.record), (42, "forwarded to port 3"));
//! assert_eq!(probe_id(&[0u8; 60]), None);
//! ```

use crate::stats::Counter;
use fp_wire::ethernet::EtherType;
use fp_wire::ip::IpProtocol;
use fp_wire::ipv4::Ipv4Packet;
use fp_wire::ipv6::Ipv6Packet;
use fp_wire::tcp::TcpPacket;
use fp_wire::udp::UdpPacket;
use fp_wire::{L2Header, L4Kind, PacketSummary, ParseOptions};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

/// The 16 bytes a probe's TCP/UDP payload starts with.
pub const PROBE_MAGIC: [u8; 16] = *b"FLOWPLANE-TRACE1";
/// Length of a probe payload from [`probe_payload`]: magic and id.
pub const PROBE_LEN: usize = PROBE_MAGIC.len() + 8;

/// The shortest probe frame: Ethernet, IPv4, UDP, marker and id.
const MIN_PROBE_FRAME: usize = 14 + 20 + 8 + PROBE_LEN;

/// How probes are parsed: the header checksum is the forwarder's business, not the tracer's.
const PARSE: ParseOptions = ParseOptions {
    verify_ipv4_checksum: false,
    min_ttl: 0,
};

/// The payload of probe `id`: [`PROBE_MAGIC`] then `id` as 8 big-endian bytes.
pub fn probe_payload(id: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..16].copy_from_slice(&PROBE_MAGIC);
    p[16..].copy_from_slice(&id.to_be_bytes());
    p
}

/// If `frame` (an Ethernet frame) is a probe, its id. Cheap for ordinary frames; never panics.
///
/// The headers are read with `fp_wire`'s checked views (Ethernet and VLAN tags, IPv4, IPv6, TCP,
/// UDP: the same code the full parser uses, fuzzed with it); an IPv6 packet whose next header is
/// neither TCP nor UDP goes through the full parser ([`PacketSummary`]), which walks extension
/// headers. A unit test holds this function to the full parser's answer on every frame shape.
#[inline]
pub fn probe_id(frame: &[u8]) -> Option<u64> {
    // Most ordinary packets stop here (pure ACKs and SYNs are shorter than any probe).
    if frame.len() < MIN_PROBE_FRAME {
        return None;
    }
    let l2 = L2Header::parse(frame).ok()?;
    let l3 = l2.l3_offset as usize;
    let ip = frame.get(l3..)?;
    let (proto, l4, end) = match l2.ethertype {
        EtherType::IPV4 => {
            let p = Ipv4Packet::new_checked(ip).ok()?;
            if p.version() != 4 || p.frag_offset() != 0 {
                return None;
            }
            if p.more_frags() || !matches!(p.protocol(), IpProtocol::TCP | IpProtocol::UDP) {
                // A first fragment, an authentication header: the full parser knows those.
                return probe_parsed(frame);
            }
            (
                p.protocol(),
                l3 + p.header_len(),
                l3 + p.total_len() as usize,
            )
        }
        EtherType::IPV6 => {
            let p = Ipv6Packet::new_checked(ip).ok()?;
            if p.version() != 6 {
                return None;
            }
            match p.next_header() {
                IpProtocol::TCP | IpProtocol::UDP => (p.next_header(), l3 + 40, l3 + p.total_len()),
                // Extension headers: the full parser walks them.
                _ => return probe_parsed(frame),
            }
        }
        _ => return None,
    };
    let seg = frame.get(l4..end)?;
    let payload = match proto {
        IpProtocol::TCP => seg.get(TcpPacket::new_checked(seg).ok()?.header_len()..)?,
        IpProtocol::UDP => seg.get(UdpPacket::new_checked(seg).ok().map(|_| 8)?..)?,
        _ => return None,
    };
    magic_id(payload)
}

/// The full parser's answer (IPv6 extension headers).
#[cold]
#[inline(never)]
fn probe_parsed(frame: &[u8]) -> Option<u64> {
    let s = PacketSummary::parse_with(frame, &PARSE).ok()?;
    probe_in(&s, frame)
}

/// The id of a payload that starts with the marker.
#[inline]
fn magic_id(p: &[u8]) -> Option<u64> {
    if p.len() < PROBE_LEN || p[..16] != PROBE_MAGIC {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&p[16..PROBE_LEN]);
    Some(u64::from_be_bytes(id))
}

/// If the frame `summary` was parsed from is a probe, its id: for stages that parsed it already.
#[inline]
pub fn probe_in(summary: &PacketSummary, frame: &[u8]) -> Option<u64> {
    if !matches!(summary.l4, L4Kind::Tcp | L4Kind::Udp) {
        return None;
    }
    magic_id(summary.payload(frame))
}

/// A token bucket: `rate` tokens per second, at most `burst` stored. Time is an argument (ns).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_per_ns: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at time 0.
    pub fn new(rate_per_sec: f64, burst: u32) -> TokenBucket {
        let burst = burst.max(1) as f64;
        TokenBucket {
            rate_per_ns: rate_per_sec.max(0.0) / 1e9,
            burst,
            tokens: burst,
            last_ns: 0,
        }
    }

    /// Take one token at time `now_ns` (monotonic), if there is one.
    pub fn take(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt * self.rate_per_ns).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Settings of each worker's tracer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracerConfig {
    /// Records per second per worker (refill rate). Default 10.
    pub rate_per_sec: f64,
    /// Records in a burst (bucket size). Default 10.
    pub burst: u32,
}

impl Default for TracerConfig {
    fn default() -> Self {
        TracerConfig {
            rate_per_sec: 10.0,
            burst: 10,
        }
    }
}

/// One probe's record as a worker sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe<R> {
    /// The probe's id (from its payload).
    pub id: u64,
    /// The worker's time when it handled the probe (its `now_ns`).
    pub ts_ns: u64,
    /// What the worker did (the application's own record type).
    pub record: R,
}

/// A worker's probe counters: one writer (the worker), read by the control side.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct ProbeCounts {
    /// Records queued for the control side.
    pub sent: Counter,
    /// Probes forwarded without a record because of the rate limit.
    pub suppressed: Counter,
    /// Records lost because the queue was full.
    pub dropped: Counter,
}

/// A worker's end of the tracer: the rate limit and the bounded queue to the control side.
pub struct ProbeSender<R> {
    tx: SyncSender<Probe<R>>,
    bucket: TokenBucket,
    counts: Arc<ProbeCounts>,
}

impl<R> std::fmt::Debug for ProbeSender<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSender")
            .field("counts", &self.counts)
            .finish()
    }
}

impl<R: Send> ProbeSender<R> {
    /// Whether a probe seen at `now_ns` may be recorded; a refusal is counted as suppressed.
    #[inline]
    pub fn admit(&mut self, now_ns: u64) -> bool {
        if self.bucket.take(now_ns) {
            true
        } else {
            self.counts.suppressed.inc();
            false
        }
    }

    /// Queue the record of probe `id` (after [`ProbeSender::admit`] agreed). Never blocks: a full
    /// queue drops the record, counted.
    pub fn send(&mut self, id: u64, now_ns: u64, record: R) {
        let p = Probe {
            id,
            ts_ns: now_ns,
            record,
        };
        match self.tx.try_send(p) {
            Ok(()) => self.counts.sent.inc(),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.dropped.inc()
            }
        }
    }

    /// This worker's counters.
    pub fn counts(&self) -> &Arc<ProbeCounts> {
        &self.counts
    }
}

/// The control side's end of one worker's tracer queue.
pub struct ProbeReceiver<R> {
    rx: Receiver<Probe<R>>,
    counts: Arc<ProbeCounts>,
}

impl<R> std::fmt::Debug for ProbeReceiver<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeReceiver")
            .field("counts", &self.counts)
            .finish()
    }
}

impl<R> ProbeReceiver<R> {
    /// The next queued record, if any (never blocks).
    pub fn try_recv(&self) -> Option<Probe<R>> {
        self.rx.try_recv().ok()
    }

    /// The worker's counters.
    pub fn counts(&self) -> &Arc<ProbeCounts> {
        &self.counts
    }
}

/// A worker's tracer queue holding at most `capacity` records, rate-limited by `cfg`.
pub fn probe_queue<R: Send>(
    capacity: usize,
    cfg: TracerConfig,
) -> (ProbeSender<R>, ProbeReceiver<R>) {
    let (tx, rx) = sync_channel(capacity.max(1));
    let counts = Arc::new(ProbeCounts::default());
    (
        ProbeSender {
            tx,
            bucket: TokenBucket::new(cfg.rate_per_sec, cfg.burst),
            counts: counts.clone(),
        },
        ProbeReceiver { rx, counts },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::craft::{self, Endpoints};
    use fp_wire::ipv4::Ipv4Packet;

    fn v4() -> Endpoints {
        Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80)
    }

    fn v6() -> Endpoints {
        Endpoints::new("2001:db8::7", 40000, "2001:db8::10", 80)
    }

    #[test]
    fn probes_are_recognised() {
        let p = probe_payload(0x0102_0304_0506_0708);
        assert_eq!(p.len(), PROBE_LEN);
        assert_eq!(&p[..16], b"FLOWPLANE-TRACE1");
        for e in [v4(), v6()] {
            assert_eq!(
                probe_id(&craft::udp_with(&e, &p)),
                Some(0x0102_0304_0506_0708)
            );
            assert_eq!(
                probe_id(&craft::tcp_with(&e, &p)),
                Some(0x0102_0304_0506_0708)
            );
            // Trailing bytes after the id are allowed.
            let mut long = p.to_vec();
            long.extend_from_slice(b"anything");
            assert!(probe_id(&craft::udp_with(&e, &long)).is_some());
        }
        // One VLAN tag and two (QinQ).
        let f = craft::udp_with(&v4(), &p);
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(probe_id(&tagged), Some(0x0102_0304_0506_0708));
        let mut qinq = f[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x07]);
        qinq.extend_from_slice(&f[12..]);
        assert_eq!(probe_id(&qinq), Some(0x0102_0304_0506_0708));
        // A stage that parsed the frame gets the same answer from its summary.
        let s = PacketSummary::parse(&f).unwrap();
        assert_eq!(probe_in(&s, &f), Some(0x0102_0304_0506_0708));
    }

    #[test]
    fn ordinary_packets_are_not_probes() {
        let p = probe_payload(7);
        // No payload (SYN, pure ACK), ordinary payloads, a near-miss of the magic.
        assert_eq!(probe_id(&craft::tcp(&v4(), true)), None);
        assert_eq!(probe_id(&craft::tcp(&v6(), false)), None);
        assert_eq!(probe_id(&craft::udp(&v4(), 1400)), None);
        assert_eq!(
            probe_id(&craft::tcp_with(
                &v4(),
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
            )),
            None
        );
        let mut near = p;
        near[15] = b'2';
        assert_eq!(probe_id(&craft::udp_with(&v4(), &near)), None);
        // The marker must be at the start of the payload.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&p);
        assert_eq!(probe_id(&craft::udp_with(&v4(), &shifted)), None);
        // Magic beyond the IP datagram's end (in Ethernet padding) does not count.
        let mut f = craft::udp(&v4(), 0);
        f.extend_from_slice(&p);
        assert_eq!(probe_id(&f), None);
        // A non-first IPv4 fragment whose data happens to start with the magic.
        let mut frag = craft::udp_with(&v4(), &p);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut frag[14..]);
            ip.set_frag(false, false, 1480);
            ip.fill_checksum();
        }
        assert_eq!(probe_id(&frag), None);
    }

    #[test]
    fn truncated_and_random_frames_never_panic() {
        let f = craft::tcp_with(&v6(), &probe_payload(9));
        for n in 0..f.len() {
            assert_eq!(probe_id(&f[..n]), None, "prefix of {n} bytes");
        }
        // Random bytes behind valid-looking Ethernet/IP prefixes.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let len = (next() % 120) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len > 14 && i % 2 == 0 {
                b[12] = if i % 4 == 0 { 0x08 } else { 0x86 };
                b[13] = if i % 4 == 0 { 0x00 } else { 0xdd };
            }
            let _ = probe_id(&b);
        }
    }

    /// The fast path agrees with the full parser on every frame shape: tags, IPv4 options,
    /// IPv6 extension headers, fragments, truncations and random bytes.
    #[test]
    fn the_fast_path_gives_the_full_parsers_answer() {
        let full = |f: &[u8]| {
            PacketSummary::parse_with(f, &PARSE)
                .ok()
                .and_then(|s| probe_in(&s, f))
        };
        let mut frames = Vec::new();
        for e in [v4(), v6()] {
            let p = probe_payload(0xabcd);
            frames.push(craft::udp_with(&e, &p));
            frames.push(craft::tcp_with(&e, &p));
            frames.push(craft::udp(&e, 200));
            frames.push(craft::tcp_with(
                &e,
                b"GET / HTTP/1.1\r\n\r\n-------------------",
            ));
        }
        // One and two VLAN tags.
        for f in frames.clone() {
            let mut t = f[..12].to_vec();
            t.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
            t.extend_from_slice(&f[12..]);
            frames.push(t.clone());
            let mut q = f[..12].to_vec();
            q.extend_from_slice(&[0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x07]);
            q.extend_from_slice(&f[12..]);
            frames.push(q);
        }
        // IPv6 with a hop-by-hop options header before UDP (next header 0, 8 bytes of padding).
        let u6 = craft::udp_with(&v6(), &probe_payload(0xabcd));
        let mut h = u6[..54].to_vec();
        h[20] = 0;
        let plen = u16::from_be_bytes([h[18], h[19]]) + 8;
        h[18..20].copy_from_slice(&plen.to_be_bytes());
        h.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        h.extend_from_slice(&u6[54..]);
        frames.push(h);
        // IPv4 with 4 bytes of options (IHL 6).
        let u4 = craft::udp_with(&v4(), &probe_payload(0xabcd));
        let mut o = u4[..34].to_vec();
        o[14] = 0x46;
        let tl = u16::from_be_bytes([o[16], o[17]]) + 4;
        o[16..18].copy_from_slice(&tl.to_be_bytes());
        o.extend_from_slice(&[1, 1, 1, 0]);
        o.extend_from_slice(&u4[34..]);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut o[14..]);
            ip.fill_checksum();
        }
        frames.push(o);
        let mut all = frames.clone();
        for f in &frames {
            for n in 0..f.len() {
                all.push(f[..n].to_vec());
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..20_000usize {
            let mut f = frames[i % frames.len()].clone();
            for _ in 0..(i % 4) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x as usize) % f.len();
                f[k] = (x >> 32) as u8;
            }
            all.push(f);
        }
        let mut probes = 0;
        for f in &all {
            assert_eq!(probe_id(f), full(f), "{f:02x?}");
            probes += probe_id(f).is_some() as usize;
        }
        assert!(
            probes > 100,
            "the frames include probes in every shape: {probes}"
        );
    }

    #[test]
    fn token_bucket() {
        let mut b = TokenBucket::new(10.0, 3);
        assert!(b.take(0) && b.take(0) && b.take(0));
        assert!(!b.take(0), "burst spent");
        assert!(!b.take(50_000_000), "half a token after 50 ms");
        assert!(b.take(100_000_000), "one token after 100 ms");
        assert!(!b.take(100_000_000));
        // Long idle refills to the burst, not beyond.
        for _ in 0..3 {
            assert!(b.take(10_000_000_000));
        }
        assert!(!b.take(10_000_000_000));
        // Time going backwards takes nothing and gives nothing.
        assert!(!b.take(5));
    }

    #[test]
    fn the_queue_is_bounded_and_counts_what_it_refuses() {
        let cfg = TracerConfig {
            rate_per_sec: 1.0,
            burst: 3,
        };
        let (mut tx, rx) = probe_queue::<u32>(2, cfg);
        let mut admitted = 0;
        for i in 0..5u32 {
            if tx.admit(0) {
                admitted += 1;
                tx.send(i as u64, 0, i);
            }
        }
        assert_eq!(admitted, 3, "the burst");
        let c = rx.counts();
        assert_eq!(
            (c.sent.get(), c.dropped.get(), c.suppressed.get()),
            (2, 1, 2)
        );
        assert_eq!(rx.try_recv().map(|p| p.record), Some(0));
        assert_eq!(rx.try_recv().map(|p| p.record), Some(1));
        assert!(rx.try_recv().is_none());
        // One second later the bucket has a token again and the queue room.
        assert!(tx.admit(1_000_000_000));
        tx.send(9, 1_000_000_000, 9);
        let p = rx.try_recv().unwrap();
        assert_eq!((p.id, p.ts_ns, p.record), (9, 1_000_000_000, 9));
        // A dropped receiver: records are counted as dropped, the worker goes on.
        drop(rx);
        tx.send(10, 2, 10);
        assert_eq!(tx.counts().dropped.get(), 2);
    }
}
