//! Interconnect links. A node talks to the others only through the [`Link`] trait, so the same node
//! logic runs over the in-memory fabric here and over real interfaces (`live::AfPacketLink`, feature
//! `live`: one AF_PACKET socket on an interface of a Linux bridge or switch).
//!
//! [`MemFabric`] connects `n` nodes with one single-producer single-consumer ring per ordered pair
//! (what a non-blocking switch gives: no head-of-line blocking between destinations). A ring is a
//! fixed array of frame slots made of `AtomicU64` words: the producer copies a frame into the slot
//! with relaxed stores and publishes it by advancing `tail` with `Release`; the consumer reads
//! `tail` with `Acquire`, copies the frame out with relaxed loads and frees the slot by advancing
//! `head` with `Release`. No unsafe code, no lock, no allocation per frame: on x86 the relaxed
//! atomics are plain moves. A full ring refuses the frame (the caller counts the drop), like a
//! switch port.

use crate::port::Burst;
use crate::wire::ALL_NODES;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Why a frame was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The queue towards that node is full.
    #[error("interconnect queue full")]
    Full,
    /// The frame is longer than the link's slots.
    #[error("frame longer than the link carries")]
    TooLarge,
    /// No such node.
    #[error("no such node")]
    NoRoute,
}

/// A node's interconnect port.
pub trait Link: Send {
    /// Send one frame to node `to`, or to every other node if `to` is [`ALL_NODES`] (all or
    /// nothing: a flood is never delivered to some nodes only because a queue was full). A link
    /// may queue the frame until [`flush`](Self::flush).
    fn send(&mut self, to: u8, frame: &[u8]) -> Result<(), LinkError>;
    /// Whether at least `frames` more frames fit towards every other node (the node admits a new
    /// external burst only then, so forwarding rarely meets a full queue).
    fn room(&self, frames: usize) -> bool;
    /// Append received frames to `burst` (up to its capacity); returns how many.
    fn recv(&mut self, burst: &mut Burst) -> usize;
    /// Frames waiting to be received (for a kernel socket: at least one is waiting, or none).
    fn pending(&self) -> usize;
    /// Transmit what [`send`](Self::send) queued. The node calls it at the end of every poll round.
    fn flush(&mut self) {}
}

#[repr(align(64))]
struct Padded(AtomicUsize);

/// A single-producer single-consumer ring of frames.
struct Ring {
    slots: usize,
    max_frame: usize,
    slot_words: usize,
    data: Box<[AtomicU64]>,
    head: Padded,
    tail: Padded,
}

impl Ring {
    fn new(slots: usize, max_frame: usize) -> Ring {
        let slots = slots.next_power_of_two();
        let slot_words = 1 + max_frame.div_ceil(8);
        Ring {
            slots,
            max_frame,
            slot_words,
            data: (0..slots * slot_words).map(|_| AtomicU64::new(0)).collect(),
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }

    fn push(&self, frame: &[u8]) -> Result<(), LinkError> {
        if frame.len() > self.max_frame {
            return Err(LinkError::TooLarge);
        }
        let t = self.tail.0.load(Ordering::Relaxed);
        let h = self.head.0.load(Ordering::Acquire);
        if t.wrapping_sub(h) >= self.slots {
            return Err(LinkError::Full);
        }
        let base = (t & (self.slots - 1)) * self.slot_words;
        self.data[base].store(frame.len() as u64, Ordering::Relaxed);
        // Whole words with fixed-size copies (a variable-length copy per word became a memmove
        // call per 8 bytes), then the zero-padded tail.
        let mut words = frame.chunks_exact(8);
        let mut i = base + 1;
        for c in &mut words {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.data[i].store(w, Ordering::Relaxed);
            i += 1;
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.data[i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.tail.0.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Copy the oldest frame into `out` (at least `max_frame` bytes); returns its length.
    fn pop(&self, out: &mut [u8]) -> Option<usize> {
        let h = self.head.0.load(Ordering::Relaxed);
        let t = self.tail.0.load(Ordering::Acquire);
        if h == t {
            return None;
        }
        let base = (h & (self.slots - 1)) * self.slot_words;
        let len = (self.data[base].load(Ordering::Relaxed) as usize).min(out.len());
        let mut words = out[..len].chunks_exact_mut(8);
        let mut i = base + 1;
        for c in &mut words {
            c.copy_from_slice(&self.data[i].load(Ordering::Relaxed).to_le_bytes());
            i += 1;
        }
        let rest = words.into_remainder();
        if !rest.is_empty() {
            let w = self.data[i].load(Ordering::Relaxed).to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&w[..n]);
        }
        self.head.0.store(h.wrapping_add(1), Ordering::Release);
        Some(len)
    }

    fn len(&self) -> usize {
        self.tail
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(self.head.0.load(Ordering::Acquire))
    }
}

/// The in-memory interconnect of `n` nodes.
pub struct MemFabric;

impl MemFabric {
    /// Links for `n` nodes (node `i` gets element `i`), each queue holding `slots` frames of up to
    /// `max_frame` bytes.
    pub fn links(n: usize, slots: usize, max_frame: usize) -> Vec<MemLink> {
        // rings[src][dst]
        let rings: Vec<Vec<Option<Arc<Ring>>>> = (0..n)
            .map(|s| {
                (0..n)
                    .map(|d| (s != d).then(|| Arc::new(Ring::new(slots, max_frame))))
                    .collect()
            })
            .collect();
        (0..n)
            .map(|me| MemLink {
                me,
                out: rings[me].clone(),
                inp: (0..n).filter_map(|s| rings[s][me].clone()).collect(),
                next: 0,
            })
            .collect()
    }
}

/// One node's end of a [`MemFabric`].
pub struct MemLink {
    me: usize,
    out: Vec<Option<Arc<Ring>>>,
    inp: Vec<Arc<Ring>>,
    next: usize,
}

impl Link for MemLink {
    #[inline]
    fn send(&mut self, to: u8, frame: &[u8]) -> Result<(), LinkError> {
        if to == ALL_NODES {
            // This link is the only producer of its rings, so room seen here stays.
            let mut rings = self.out.iter().flatten();
            if frame.len() > rings.clone().next().map_or(usize::MAX, |r| r.max_frame) {
                return Err(LinkError::TooLarge);
            }
            if !rings.clone().all(|r| r.len() < r.slots) {
                return Err(LinkError::Full);
            }
            return rings.try_for_each(|r| r.push(frame));
        }
        match self.out.get(to as usize) {
            Some(Some(r)) => r.push(frame),
            _ => Err(LinkError::NoRoute),
        }
    }

    fn room(&self, frames: usize) -> bool {
        self.out
            .iter()
            .flatten()
            .all(|r| r.len() + frames <= r.slots)
    }

    fn recv(&mut self, burst: &mut Burst) -> usize {
        let mut got = 0;
        let k = self.inp.len();
        // Round robin over the sources, one frame each per turn, until the burst is full or every
        // queue is empty.
        let mut empty = 0;
        while !burst.is_full() && k > 0 && empty < k {
            let r = &self.inp[self.next];
            self.next = (self.next + 1) % k;
            let slot = burst.slot();
            match r.pop(slot) {
                Some(len) => {
                    burst.commit(len);
                    got += 1;
                    empty = 0;
                }
                None => empty += 1,
            }
        }
        got
    }

    fn pending(&self) -> usize {
        self.inp.iter().map(|r| r.len()).sum()
    }
}

impl MemLink {
    /// This link's node.
    pub fn node(&self) -> usize {
        self.me
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_arrive_in_order_and_intact() {
        let mut links = MemFabric::links(3, 4, 100);
        let mut b = Burst::new(32, 100);
        for i in 0..4u8 {
            let f: Vec<u8> = (0..(20 + i as usize * 13)).map(|j| j as u8 ^ i).collect();
            links[0].send(2, &f).unwrap();
        }
        assert_eq!(links[0].send(2, &[1; 20]), Err(LinkError::Full));
        assert_eq!(links[0].send(2, &[1; 101]), Err(LinkError::TooLarge));
        assert_eq!(links[0].send(0, &[1; 20]), Err(LinkError::NoRoute));
        assert!(!links[0].room(1));
        assert!(links[1].room(4));
        links[1].send(2, &[9; 15]).unwrap();
        assert_eq!(links[2].pending(), 5);
        assert_eq!(links[2].recv(&mut b), 5);
        let from0: Vec<&[u8]> = b.iter().filter(|f| f.len() != 15).collect();
        for (i, f) in from0.iter().enumerate() {
            let want: Vec<u8> = (0..(20 + i * 13)).map(|j| j as u8 ^ i as u8).collect();
            assert_eq!(*f, &want[..]);
        }
        assert!(b.iter().any(|f| f == [9u8; 15]));
        assert!(links[0].room(4));
    }

    #[test]
    fn send_to_all_is_all_or_nothing() {
        let mut links = MemFabric::links(3, 2, 100);
        links[1].send(2, &[1; 20]).unwrap();
        links[1].send(2, &[2; 20]).unwrap();
        // The queue to node 2 is full: node 0 gets nothing either.
        assert_eq!(links[1].send(ALL_NODES, &[3; 20]), Err(LinkError::Full));
        assert_eq!(links[0].pending(), 0);
        assert_eq!(
            links[1].send(ALL_NODES, &[3; 101]),
            Err(LinkError::TooLarge)
        );
        let mut b = Burst::new(8, 100);
        assert_eq!(links[2].recv(&mut b), 2);
        links[1].send(ALL_NODES, &[3; 20]).unwrap();
        for i in [0, 2] {
            b.clear();
            assert_eq!(links[i].recv(&mut b), 1);
            assert_eq!(b.get(0), &[3u8; 20][..]);
        }
        assert_eq!(links[1].pending(), 0);
    }

    #[test]
    fn spsc_across_threads() {
        let mut links = MemFabric::links(2, 64, 64);
        let mut rx = links.pop().unwrap();
        let mut tx = links.pop().unwrap();
        const N: u64 = 200_000;
        let h = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < N {
                let mut f = [0u8; 40];
                f[..8].copy_from_slice(&i.to_le_bytes());
                f[39] = i as u8;
                if tx.send(1, &f).is_ok() {
                    i += 1;
                }
            }
        });
        let mut b = Burst::new(32, 64);
        let mut want = 0u64;
        while want < N {
            b.clear();
            rx.recv(&mut b);
            for f in b.iter() {
                assert_eq!(f.len(), 40);
                assert_eq!(u64::from_le_bytes(f[..8].try_into().unwrap()), want);
                assert_eq!(f[39], want as u8);
                want += 1;
            }
        }
        h.join().unwrap();
    }
}
