//! Test traffic for the in-memory cluster: [`GenPort`], an engine port that replays [`Frames`] on
//! receive (each stamped with a global sequence number, so tests can order deliveries against
//! updates) and counts — optionally logs — what a node emits on it.

use fp_engine::port::{Port, PortStats};
use fp_pipeline::packet::{Packet, Pool};
use fp_wire::ethernet::{EtherType, EthernetFrame, MacAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where test traffic comes from: a fixed set of frames replayed in order.
#[derive(Clone)]
pub struct Frames {
    data: Arc<[u8]>,
    frame_len: usize,
    count: usize,
}

/// Offset of the stamp in a test frame: the first payload bytes.
const STAMP: usize = 14;

impl Frames {
    /// Frames of `frame_len` bytes (≥ 22), one per destination key (a MAC as `MacAddr::to_u64`),
    /// source MAC `src`; each carries a 64-bit stamp at payload offset 0 (bytes 14..22), filled
    /// when it is received.
    pub fn to_keys(keys: &[u64], frame_len: usize, src: MacAddr) -> Frames {
        assert!(frame_len >= STAMP + 8);
        let mut data = vec![0u8; keys.len() * frame_len];
        for (f, &k) in data.chunks_exact_mut(frame_len).zip(keys) {
            let mut e = EthernetFrame::new_unchecked(f);
            e.set_dst_addr(MacAddr::from_u64(k));
            e.set_src_addr(src);
            e.set_ethertype(EtherType::IPV4);
        }
        Frames {
            data: data.into(),
            frame_len,
            count: keys.len(),
        }
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// One delivered frame, as logged by a [`Sink`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The stamp the generator wrote when the frame entered the cluster.
    pub stamp: u64,
    /// Destination MAC as a key.
    pub key: u64,
    /// Source MAC (test traffic puts the ingress node in its last byte).
    pub src: MacAddr,
    /// External port.
    pub port: u16,
    /// Interconnect hops.
    pub hops: u8,
}

/// Transmit side of a [`GenPort`]: counts, and optionally logs, what a node emits.
#[derive(Clone, Debug, Default)]
pub struct Sink {
    /// Frames emitted.
    pub frames: u64,
    /// Frames by interconnect hops taken (0, 1, 2, 3 or more).
    pub by_hops: [u64; 4],
    /// Every delivery, if logging is on (tests; allocates).
    pub log: Option<Vec<Delivery>>,
}

impl Sink {
    /// A sink, logging if asked.
    pub fn new(log: bool) -> Sink {
        Sink {
            log: log.then(Vec::new),
            ..Sink::default()
        }
    }

    /// Total interconnect hops of the frames emitted.
    pub fn hops(&self) -> u64 {
        self.by_hops[1] + 2 * self.by_hops[2] + 3 * self.by_hops[3]
    }
}

/// An in-memory external port of a node: replays [`Frames`] on receive (with a global stamp
/// counter), counts and optionally logs on transmit (the hops a frame took come with the packet,
/// in its `tag`).
pub struct GenPort {
    port: u16,
    name: String,
    frames: Frames,
    pos: usize,
    remaining: u64,
    stamps: Arc<AtomicU64>,
    stats: PortStats,
    /// What the node emitted on this port.
    pub sink: Sink,
    /// (stamp, key) of every frame that entered here, if logging is on: frames the cluster
    /// dropped are accounted for too, not only those it emitted (tests; allocates).
    pub entered: Option<Vec<(u64, u64)>>,
}

impl GenPort {
    /// External port `port` of a node, replaying `frames` cyclically, `limit` frames in all; stamps
    /// come from `stamps`. The entry log is on when the sink logs.
    pub fn new(
        port: u16,
        frames: Frames,
        limit: u64,
        stamps: Arc<AtomicU64>,
        sink: Sink,
    ) -> GenPort {
        GenPort {
            entered: sink.log.is_some().then(Vec::new),
            port,
            name: format!("gen:{port}"),
            frames,
            pos: 0,
            remaining: limit,
            stamps,
            stats: PortStats::default(),
            sink,
        }
    }

    /// The external ports `0..ports` of a node: port 0 replays `frames` (`limit` in all), every
    /// port counts what it is sent (and logs it and what enters, if asked).
    pub fn node(
        ports: u16,
        frames: Frames,
        limit: u64,
        stamps: &Arc<AtomicU64>,
        log: bool,
    ) -> Vec<GenPort> {
        (0..ports)
            .map(|p| {
                let limit = if p == 0 { limit } else { 0 };
                GenPort::new(p, frames.clone(), limit, stamps.clone(), Sink::new(log))
            })
            .collect()
    }

    /// Inject `more` further frames.
    pub fn add_limit(&mut self, more: u64) {
        self.remaining = self.remaining.saturating_add(more);
    }

    /// Frames still to inject.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Replace the frames replayed (starting from the first).
    pub fn set_frames(&mut self, frames: Frames) {
        self.frames = frames;
        self.pos = 0;
    }

    /// The stamp of a test frame.
    pub fn stamp_of(frame: &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(
            frame.get(STAMP..STAMP + 8)?.try_into().ok()?,
        ))
    }
}

/// The destination MAC of a test frame.
fn area_dst(f: &[u8]) -> [u8; 6] {
    f[..6]
        .try_into()
        .expect("a test frame has an Ethernet header")
}

impl Port for GenPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let want = max.min(self.remaining as usize);
        if want == 0 || self.frames.count == 0 {
            return 0;
        }
        let start = out.len();
        while out.len() - start < want {
            match pool.get() {
                Some(p) => out.push(p),
                None => break,
            }
        }
        let got = out.len() - start;
        if got == 0 {
            return 0;
        }
        // One atomic add per burst: the stamps of this burst are base..base+got.
        let base = self.stamps.fetch_add(got as u64, Ordering::AcqRel);
        let fl = self.frames.frame_len;
        for (i, p) in out[start..].iter_mut().enumerate() {
            let s = self.pos * fl;
            let area = p.rx_area();
            area[..fl].copy_from_slice(&self.frames.data[s..s + fl]);
            area[STAMP..STAMP + 8].copy_from_slice(&(base + i as u64).to_le_bytes());
            p.set_len(fl);
            if let Some(log) = &mut self.entered {
                log.push((base + i as u64, MacAddr(area_dst(p.data())).to_u64()));
            }
            self.pos += 1;
            if self.pos == self.frames.count {
                self.pos = 0;
            }
        }
        self.remaining -= got as u64;
        self.stats.rx += got as u64;
        got
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let n = batch.len();
        for p in batch.drain(..) {
            let hops = p.tag.min(255) as u8;
            let s = &mut self.sink;
            s.frames += 1;
            s.by_hops[(hops as usize).min(3)] += 1;
            if let Some(log) = &mut s.log {
                let f = p.data();
                let (stamp, key, src) = match EthernetFrame::new_checked(f) {
                    Ok(e) => (
                        GenPort::stamp_of(f).unwrap_or(u64::MAX),
                        e.dst_addr().to_u64(),
                        e.src_addr(),
                    ),
                    Err(_) => (u64::MAX, u64::MAX, MacAddr([0; 6])),
                };
                log.push(Delivery {
                    stamp,
                    key,
                    src,
                    port: self.port,
                    hops,
                });
            }
            pool.put(p);
        }
        self.stats.tx += n as u64;
        n
    }

    fn exhausted(&self) -> bool {
        self.remaining == 0
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
