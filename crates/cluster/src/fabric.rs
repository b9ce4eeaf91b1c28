//! The in-memory interconnect: `n` nodes joined by one single-producer single-consumer ring per
//! ordered pair (what a non-blocking switch gives: no head-of-line blocking between destinations).
//! Each node's end is a [`FabricPort`], an engine port like any other, so the node's stage runs on
//! it exactly as on a socket on a real interconnect (`crate::live`).
//!
//! The port switches by the outer destination MAC the node wrote: a frame to [`node_mac`]`(j)` goes
//! into the ring towards node `j`; a frame to [`FLOOD_MAC`] into every ring, all or nothing (a
//! flood is never delivered to some nodes only because one queue was full). A full ring makes the
//! port stop and leave the rest of the burst (the engine's driver keeps it and offers it again,
//! first); [`Port::tx_room`] tells the node how much fits, so it takes no new external input while
//! the interconnect is congested.
//!
//! A ring is a fixed array of frame slots made of `AtomicU64` words: the producer copies a frame
//! into the slot with relaxed stores and publishes it by advancing `tail` with `Release`; the
//! consumer reads `tail` with `Acquire`, copies the frame out with relaxed loads and frees the slot
//! by advancing `head` with `Release`. No unsafe code, no lock, no allocation per frame: on x86 the
//! relaxed atomics are plain moves.

use crate::interconnect::{node_mac, FLOOD_MAC};
use fp_engine::port::{Port, PortStats};
use fp_pipeline::packet::{Packet, Pool};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Why a ring refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RingError {
    Full,
    TooLarge,
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

    fn push(&self, frame: &[u8]) -> Result<(), RingError> {
        if frame.len() > self.max_frame {
            return Err(RingError::TooLarge);
        }
        let t = self.tail.0.load(Ordering::Relaxed);
        let h = self.head.0.load(Ordering::Acquire);
        if t.wrapping_sub(h) >= self.slots {
            return Err(RingError::Full);
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

    /// Copy the oldest frame into `out`; returns its length. `out` holds at least `max_frame`
    /// bytes (the fabric is built that way).
    fn pop(&self, out: &mut [u8]) -> Option<usize> {
        let h = self.head.0.load(Ordering::Relaxed);
        let t = self.tail.0.load(Ordering::Acquire);
        if h == t {
            return None;
        }
        let base = (h & (self.slots - 1)) * self.slot_words;
        let len = self.data[base].load(Ordering::Relaxed) as usize;
        debug_assert!(
            len <= out.len(),
            "a fabric frame larger than a packet buffer"
        );
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

    fn free(&self) -> usize {
        self.slots.saturating_sub(self.len())
    }
}

/// The in-memory interconnect of `n` nodes: node `i`'s port is element `i`; each queue holds
/// `slots` frames of up to `max_frame` bytes (at most a packet buffer's [`MAX_FRAME`](fp_pipeline::packet::MAX_FRAME)).
pub fn fabric(n: usize, slots: usize, max_frame: usize) -> Vec<FabricPort> {
    assert!(
        max_frame <= fp_pipeline::packet::MAX_FRAME,
        "fabric frames of {max_frame} bytes do not fit a packet buffer"
    );
    // rings[src][dst]
    let rings: Vec<Vec<Option<Arc<Ring>>>> = (0..n)
        .map(|s| {
            (0..n)
                .map(|d| (s != d).then(|| Arc::new(Ring::new(slots, max_frame))))
                .collect()
        })
        .collect();
    (0..n)
        .map(|me| FabricPort {
            me,
            name: format!("fabric:{me}"),
            out: rings[me].clone(),
            inp: (0..n).filter_map(|s| rings[s][me].clone()).collect(),
            next: 0,
            stats: PortStats::default(),
        })
        .collect()
}

/// One node's end of the in-memory interconnect.
pub struct FabricPort {
    me: usize,
    name: String,
    out: Vec<Option<Arc<Ring>>>,
    inp: Vec<Arc<Ring>>,
    next: usize,
    stats: PortStats,
}

impl FabricPort {
    /// This port's node.
    pub fn node(&self) -> usize {
        self.me
    }

    /// Frames waiting to be received.
    pub fn pending(&self) -> usize {
        self.inp.iter().map(|r| r.len()).sum()
    }

    /// Put one frame into the ring(s) its destination MAC names.
    fn send(&self, frame: &[u8]) -> Result<(), RingError> {
        let dst = frame.get(..6).unwrap_or(&[]);
        if dst == FLOOD_MAC.0 {
            // This port is the only producer of its rings, so room seen here stays.
            let mut rings = self.out.iter().flatten();
            if frame.len() > rings.clone().next().map_or(usize::MAX, |r| r.max_frame) {
                return Err(RingError::TooLarge);
            }
            if !rings.clone().all(|r| r.len() < r.slots) {
                return Err(RingError::Full);
            }
            return rings.try_for_each(|r| r.push(frame));
        }
        // A node's MAC ends in its index.
        let to = match dst.split_last() {
            Some((&j, prefix)) if prefix == &node_mac(j).0[..5] => {
                self.out.get(j as usize).and_then(Option::as_ref)
            }
            _ => None,
        };
        match to {
            Some(r) => r.push(frame),
            // No such node (or this one): not deliverable, dropped.
            None => Err(RingError::TooLarge),
        }
    }
}

impl Port for FabricPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut got = 0;
        let k = self.inp.len();
        // Round robin over the sources, one frame each per turn, until the burst is full or every
        // queue is empty.
        let mut empty = 0;
        while got < max && k > 0 && empty < k {
            let r = &self.inp[self.next];
            self.next = (self.next + 1) % k;
            if r.len() == 0 {
                empty += 1;
                continue;
            }
            let Some(mut p) = pool.get() else { break };
            match r.pop(p.rx_area()) {
                Some(len) => {
                    p.set_len(len);
                    out.push(p);
                    got += 1;
                    empty = 0;
                }
                None => {
                    pool.put(p);
                    empty += 1;
                }
            }
        }
        self.stats.rx += got as u64;
        got
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let mut sent = 0;
        let mut taken = 0;
        for p in batch.iter() {
            match self.send(p.data()) {
                Ok(()) => sent += 1,
                Err(RingError::TooLarge) => self.stats.tx_dropped += 1,
                // Full: the rest waits, in order.
                Err(RingError::Full) => break,
            }
            taken += 1;
        }
        for p in batch.drain(..taken) {
            pool.put(p);
        }
        self.stats.tx += sent as u64;
        sent
    }

    fn tx_room(&self) -> usize {
        self.out
            .iter()
            .flatten()
            .map(|r| r.free())
            .min()
            .unwrap_or(usize::MAX)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp_pipeline::packet::burst;

    /// A frame to node `to` (or to all nodes) whose bytes after the header are `body`.
    fn frame(to: Option<u8>, body: &[u8]) -> Vec<u8> {
        let mut f = to.map_or(FLOOD_MAC, node_mac).0.to_vec();
        f.extend_from_slice(body);
        f
    }

    fn send(p: &mut FabricPort, pool: &mut Pool, frames: &[Vec<u8>]) -> (usize, usize) {
        let mut b = burst();
        for f in frames {
            let mut x = pool.get().unwrap();
            x.fill(f);
            b.push(x);
        }
        let sent = p.tx_burst(&mut b, pool);
        let left = b.len();
        pool.put_all(&mut b);
        (sent, left)
    }

    fn recv(p: &mut FabricPort, pool: &mut Pool) -> Vec<Vec<u8>> {
        let mut b = burst();
        p.rx_burst(pool, &mut b, 32);
        let v = b.iter().map(|x| x.data().to_vec()).collect();
        pool.put_all(&mut b);
        v
    }

    #[test]
    fn frames_arrive_in_order_and_intact() {
        let mut ports = fabric(3, 4, 100);
        let mut pool = Pool::new(64);
        let frames: Vec<Vec<u8>> = (0..4u8)
            .map(|i| {
                frame(
                    Some(2),
                    &(0..(14 + i as usize * 13))
                        .map(|j| j as u8 ^ i)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(send(&mut ports[0], &mut pool, &frames), (4, 0));
        // The ring to node 2 is full: the next frame waits in the burst; one too large is dropped.
        assert_eq!(ports[0].tx_room(), 0);
        assert_eq!(
            send(&mut ports[0], &mut pool, &[frame(Some(2), &[1; 20])]),
            (0, 1)
        );
        assert_eq!(
            send(&mut ports[0], &mut pool, &[frame(Some(1), &[1; 101])]),
            (0, 0)
        );
        assert_eq!(
            send(&mut ports[0], &mut pool, &[frame(Some(0), &[1; 20])]),
            (0, 0)
        );
        assert_eq!(ports[0].stats().tx_dropped, 2);
        assert_eq!(ports[1].tx_room(), 4);
        assert_eq!(
            send(&mut ports[1], &mut pool, &[frame(Some(2), &[9; 15])]),
            (1, 0)
        );
        assert_eq!(ports[2].pending(), 5);
        let got = recv(&mut ports[2], &mut pool);
        assert_eq!(got.len(), 5);
        let from0: Vec<&Vec<u8>> = got.iter().filter(|f| f.len() != 21).collect();
        for (i, f) in from0.iter().enumerate() {
            assert_eq!(*f, &frames[i]);
        }
        assert!(got.contains(&frame(Some(2), &[9; 15])));
        assert_eq!(ports[0].tx_room(), 4);
    }

    #[test]
    fn send_to_all_is_all_or_nothing() {
        let mut ports = fabric(3, 2, 100);
        let mut pool = Pool::new(64);
        let two = [frame(Some(2), &[1; 20]), frame(Some(2), &[2; 20])];
        assert_eq!(send(&mut ports[1], &mut pool, &two), (2, 0));
        // The queue to node 2 is full: node 0 gets nothing either.
        assert_eq!(
            send(&mut ports[1], &mut pool, &[frame(None, &[3; 20])]),
            (0, 1)
        );
        assert_eq!(ports[0].pending(), 0);
        assert_eq!(
            send(&mut ports[1], &mut pool, &[frame(None, &[3; 101])]),
            (0, 0)
        );
        assert_eq!(recv(&mut ports[2], &mut pool).len(), 2);
        assert_eq!(
            send(&mut ports[1], &mut pool, &[frame(None, &[3; 20])]),
            (1, 0)
        );
        for i in [0, 2] {
            assert_eq!(recv(&mut ports[i], &mut pool), vec![frame(None, &[3; 20])]);
        }
        assert_eq!(ports[1].pending(), 0);
    }

    #[test]
    fn spsc_across_threads() {
        let mut ports = fabric(2, 64, 64);
        let mut rx = ports.pop().unwrap();
        let mut tx = ports.pop().unwrap();
        const N: u64 = 200_000;
        let h = std::thread::spawn(move || {
            let mut pool = Pool::new(64);
            let mut i = 0u64;
            while i < N {
                let mut f = [0u8; 40];
                f[..6].copy_from_slice(&node_mac(1).0);
                f[8..16].copy_from_slice(&i.to_le_bytes());
                f[39] = i as u8;
                if send(&mut tx, &mut pool, &[f.to_vec()]).0 == 1 {
                    i += 1;
                }
            }
        });
        let mut pool = Pool::new(64);
        let mut want = 0u64;
        while want < N {
            for f in recv(&mut rx, &mut pool) {
                assert_eq!(f.len(), 40);
                assert_eq!(u64::from_le_bytes(f[8..16].try_into().unwrap()), want);
                assert_eq!(f[39], want as u8);
                want += 1;
            }
        }
        h.join().unwrap();
    }
}
