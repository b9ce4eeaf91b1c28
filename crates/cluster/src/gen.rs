//! External ports: where frames enter and leave the cluster. A node sees them only through
//! [`ExternalPort`]; [`GenPort`] is the in-memory one used by tests and benchmarks (a traffic
//! generator on the receive side, a counting — optionally logging — sink on the transmit side), and
//! `live::AfPacketPorts` (feature `live`) puts a node's ports on Linux interfaces.

use crate::wire::{EthFrame, ETH_HDR};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A batch of frames in one preallocated buffer (no allocation per frame). Each frame carries the
/// external port it arrived on ([`Burst::port`]; 0 unless the receiver sets it), so a node can
/// flood a broadcast everywhere except back out of its ingress port.
pub struct Burst {
    buf: Box<[u8]>,
    lens: Box<[u16]>,
    ports: Box<[u16]>,
    n: usize,
    max_frame: usize,
}

impl Burst {
    /// Room for `cap` frames of up to `max_frame` bytes.
    pub fn new(cap: usize, max_frame: usize) -> Burst {
        assert!(max_frame <= u16::MAX as usize);
        Burst {
            buf: vec![0; cap * max_frame].into_boxed_slice(),
            lens: vec![0; cap].into_boxed_slice(),
            ports: vec![0; cap].into_boxed_slice(),
            n: 0,
            max_frame,
        }
    }

    /// Frames held.
    #[inline]
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when no frame is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// True when no more frames fit.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.n == self.lens.len()
    }

    /// Frames it can hold.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Longest frame a slot holds.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Forget all frames.
    #[inline]
    pub fn clear(&mut self) {
        self.n = 0;
    }

    /// The buffer of the next free slot, to receive into; [`commit`](Self::commit) keeps it.
    /// Panics if the burst is full.
    #[inline]
    pub fn slot(&mut self) -> &mut [u8] {
        let s = self.n * self.max_frame;
        &mut self.buf[s..s + self.max_frame]
    }

    /// Keep the next slot as a frame of `len` bytes (ingress port 0).
    #[inline]
    pub fn commit(&mut self, len: usize) {
        self.commit_from(len, 0);
    }

    /// Keep the next slot as a frame of `len` bytes that arrived on external port `port`.
    #[inline]
    pub fn commit_from(&mut self, len: usize, port: u16) {
        debug_assert!(len <= self.max_frame && !self.is_full());
        self.lens[self.n] = len as u16;
        self.ports[self.n] = port;
        self.n += 1;
    }

    /// Copy a frame in (ingress port 0); false if the burst is full or the frame too long.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        self.push_from(frame, 0)
    }

    /// Copy a frame that arrived on external port `port` in; false if the burst is full or the
    /// frame too long.
    pub fn push_from(&mut self, frame: &[u8], port: u16) -> bool {
        if self.is_full() || frame.len() > self.max_frame {
            return false;
        }
        self.slot()[..frame.len()].copy_from_slice(frame);
        self.commit_from(frame.len(), port);
        true
    }

    /// The external port frame `i` arrived on.
    #[inline]
    pub fn port(&self, i: usize) -> u16 {
        self.ports[i]
    }

    /// Frame `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let s = i * self.max_frame;
        &self.buf[s..s + self.lens[i] as usize]
    }

    /// Frame `i`, writable.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let s = i * self.max_frame;
        &mut self.buf[s..s + self.lens[i] as usize]
    }

    /// Keep only the frames for which `keep(index, frame)` is true, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(usize, &[u8]) -> bool) {
        let mut w = 0;
        for r in 0..self.n {
            if keep(r, self.get(r)) {
                if w != r {
                    let len = self.lens[r] as usize;
                    let (src, dst) = (r * self.max_frame, w * self.max_frame);
                    self.buf.copy_within(src..src + len, dst);
                    self.lens[w] = len as u16;
                    self.ports[w] = self.ports[r];
                }
                w += 1;
            }
        }
        self.n = w;
    }

    /// The frames.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.n).map(move |i| self.get(i))
    }
}

/// A node's external ports, numbered `0..ports()`.
pub trait ExternalPort: Send {
    /// Append received frames to `burst` (up to its capacity), each with the port it arrived on
    /// ([`Burst::commit_from`]); returns how many.
    fn rx_burst(&mut self, burst: &mut Burst) -> usize;
    /// Emit `frame` on external port `port`; `hops` is the number of interconnect hops it took
    /// (metadata for counters and tests, not on the wire). A port may queue the frame until
    /// [`flush`](Self::flush).
    fn tx(&mut self, port: u16, frame: &[u8], hops: u8);
    /// Number of external ports (a flooded frame goes to each, except its ingress port).
    fn ports(&self) -> u16;
    /// Send what [`tx`](Self::tx) queued. The node calls it at the end of every poll round.
    fn flush(&mut self) {}
}

/// Where test traffic comes from: a fixed set of frames replayed in order.
#[derive(Clone)]
pub struct Frames {
    data: Arc<[u8]>,
    frame_len: usize,
    count: usize,
}

impl Frames {
    /// Frames of `frame_len` bytes (≥ 22), one per destination key, source MAC `src`; each carries a
    /// 64-bit stamp at payload offset 0 (bytes 14..22), filled when it is received.
    pub fn to_keys(keys: &[u64], frame_len: usize, src: [u8; 6]) -> Frames {
        assert!(frame_len >= ETH_HDR + 8);
        let mut data = vec![0u8; keys.len() * frame_len];
        for (f, &k) in data.chunks_exact_mut(frame_len).zip(keys) {
            let mut e = EthFrame::new_unchecked(f);
            e.set_dst(crate::wire::key_to_mac(k));
            e.set_src(src);
            e.set_ethertype(0x0800);
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
    pub src: [u8; 6],
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
    /// Frames by external port.
    pub by_port: Vec<u64>,
    /// Every delivery, if logging is on (tests; allocates).
    pub log: Option<Vec<Delivery>>,
}

impl Sink {
    /// A sink for `ports` ports, logging if asked.
    pub fn new(ports: usize, log: bool) -> Sink {
        Sink {
            by_port: vec![0; ports],
            log: log.then(Vec::new),
            ..Sink::default()
        }
    }

    /// Total interconnect hops of the frames emitted.
    pub fn hops(&self) -> u64 {
        self.by_hops[1] + 2 * self.by_hops[2] + 3 * self.by_hops[3]
    }
}

/// An in-memory external port set: replays [`Frames`] on receive (with a global stamp counter so
/// tests can order deliveries against updates), counts and optionally logs on transmit.
pub struct GenPort {
    frames: Frames,
    pos: usize,
    remaining: u64,
    stamps: Arc<AtomicU64>,
    /// What this node emitted.
    pub sink: Sink,
}

impl GenPort {
    /// Replay `frames` cyclically, `limit` frames in all; stamps come from `stamps`.
    pub fn new(frames: Frames, limit: u64, stamps: Arc<AtomicU64>, sink: Sink) -> GenPort {
        GenPort {
            frames,
            pos: 0,
            remaining: limit,
            stamps,
            sink,
        }
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
}

impl ExternalPort for GenPort {
    fn ports(&self) -> u16 {
        self.sink.by_port.len() as u16
    }

    fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let want = (burst.capacity() - burst.len()).min(self.remaining as usize);
        if want == 0 || self.frames.count == 0 {
            return 0;
        }
        // One atomic add per burst: the stamps of this burst are base..base+want.
        let base = self.stamps.fetch_add(want as u64, Ordering::AcqRel);
        let fl = self.frames.frame_len;
        for i in 0..want {
            let s = self.pos * fl;
            let slot = burst.slot();
            slot[..fl].copy_from_slice(&self.frames.data[s..s + fl]);
            slot[ETH_HDR..ETH_HDR + 8].copy_from_slice(&(base + i as u64).to_le_bytes());
            burst.commit(fl);
            self.pos += 1;
            if self.pos == self.frames.count {
                self.pos = 0;
            }
        }
        self.remaining -= want as u64;
        want
    }

    fn tx(&mut self, port: u16, frame: &[u8], hops: u8) {
        let s = &mut self.sink;
        s.frames += 1;
        s.by_hops[(hops as usize).min(3)] += 1;
        if let Some(c) = s.by_port.get_mut(port as usize) {
            *c += 1;
        }
        if let Some(log) = &mut s.log {
            let (stamp, key, src) = match EthFrame::new_checked(frame) {
                Ok(f) if f.payload().len() >= 8 => (
                    u64::from_le_bytes(f.payload()[..8].try_into().unwrap_or([0; 8])),
                    f.dst_key(),
                    f.src(),
                ),
                _ => (u64::MAX, u64::MAX, [0; 6]),
            };
            log.push(Delivery {
                stamp,
                key,
                src,
                port,
                hops,
            });
        }
    }
}
