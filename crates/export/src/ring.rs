//! The queue between a worker and the exporter thread: a bounded single-producer
//! single-consumer ring of fixed-size records of `u64` words.
//!
//! A worker writes each record into its slot with relaxed stores and makes what it wrote visible
//! once per burst ([`Producer::publish`]: one `Release` store of the tail), so an event costs a
//! few plain moves on x86 and no read-modify-write; the exporter reads the tail with `Acquire`,
//! copies records out with relaxed loads and frees their slots once per drain
//! ([`Consumer::release`]: one `Release` store of the head). A full ring refuses the record
//! (the caller counts it): the worker never waits. Each side caches the other's index and reads
//! it only when the ring looks full (producer) or empty (consumer). No unsafe code, no lock, no
//! allocation after construction.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
use loom::sync::Arc;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::Arc;

/// An index on its own cache line (the producer's and the consumer's never share one).
#[repr(align(64))]
#[derive(Debug)]
struct Padded(AtomicUsize);

/// The shared ring.
#[derive(Debug)]
struct Ring {
    /// Records, `words` each.
    data: Box<[AtomicU64]>,
    words: usize,
    /// Slots − 1 (slots is a power of two).
    mask: usize,
    /// Records published (written by the producer).
    tail: Padded,
    /// Records consumed (written by the consumer).
    head: Padded,
}

/// The worker's end.
#[derive(Debug)]
pub struct Producer {
    ring: Arc<Ring>,
    /// Records written, published or not.
    tail: usize,
    /// The consumer's head as last read.
    head: usize,
    /// Records published.
    published: usize,
}

/// The exporter's end.
#[derive(Debug)]
pub struct Consumer {
    ring: Arc<Ring>,
    /// Records read, released or not.
    head: usize,
    /// The producer's tail as last read.
    tail: usize,
}

/// A ring of at least `slots` records (rounded up to a power of two, at least 2) of `words` words.
pub fn ring(slots: usize, words: usize) -> (Producer, Consumer) {
    assert!(words > 0, "records of at least one word");
    let slots = slots.max(2).next_power_of_two();
    let r = Arc::new(Ring {
        data: (0..slots * words).map(|_| AtomicU64::new(0)).collect(),
        words,
        mask: slots - 1,
        tail: Padded(AtomicUsize::new(0)),
        head: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            ring: r.clone(),
            tail: 0,
            head: 0,
            published: 0,
        },
        Consumer {
            ring: r,
            head: 0,
            tail: 0,
        },
    )
}

impl Producer {
    /// Slots of the ring.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }

    /// Whether a record fits now (the caller may skip building one that would be refused).
    #[inline]
    pub fn has_room(&mut self) -> bool {
        let r = &*self.ring;
        if self.tail.wrapping_sub(self.head) > r.mask {
            self.head = r.head.0.load(Ordering::Acquire);
        }
        self.tail.wrapping_sub(self.head) <= r.mask
    }

    /// Write `record` (its first `words` words; missing ones are 0) into the next slot; `false`,
    /// with nothing written, when the ring is full. The consumer sees it after
    /// [`Producer::publish`].
    #[inline]
    pub fn push(&mut self, record: &[u64]) -> bool {
        let r = &*self.ring;
        if self.tail.wrapping_sub(self.head) > r.mask {
            // Looks full: see how far the consumer got (its reads of the slots happened before
            // its release, so the slots it freed may be written now).
            self.head = r.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head) > r.mask {
                return false;
            }
        }
        let base = (self.tail & r.mask) * r.words;
        for i in 0..r.words {
            r.data[base + i].store(record.get(i).copied().unwrap_or(0), Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// Make every record written so far visible to the consumer.
    #[inline]
    pub fn publish(&mut self) {
        if self.published != self.tail {
            self.ring.tail.0.store(self.tail, Ordering::Release);
            self.published = self.tail;
        }
    }
}

impl Consumer {
    /// Slots of the ring.
    pub fn capacity(&self) -> usize {
        self.ring.mask + 1
    }

    /// Copy the next published record into `out` (its first `words` words); `false` when there
    /// is none.
    #[inline]
    pub fn pop(&mut self, out: &mut [u64]) -> bool {
        let r = &*self.ring;
        if self.head == self.tail {
            self.tail = r.tail.0.load(Ordering::Acquire);
            if self.head == self.tail {
                return false;
            }
        }
        let base = (self.head & r.mask) * r.words;
        for (i, o) in out.iter_mut().enumerate().take(r.words) {
            *o = r.data[base + i].load(Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Give the slots of the records read so far back to the producer.
    #[inline]
    pub fn release(&mut self) {
        self.ring.head.0.store(self.head, Ordering::Release);
    }

    /// Records published and not yet read.
    pub fn waiting(&self) -> usize {
        self.ring
            .tail
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn records_come_out_in_order_once_published() {
        let (mut p, mut c) = ring(4, 3);
        assert_eq!(p.capacity(), 4);
        let mut out = [0u64; 3];
        assert!(p.push(&[1, 2, 3]));
        assert!(!c.pop(&mut out), "not published yet");
        p.publish();
        assert!(c.pop(&mut out));
        assert_eq!(out, [1, 2, 3]);
        assert!(!c.pop(&mut out));
        // A short record is padded with zeros.
        assert!(p.push(&[9]));
        p.publish();
        assert!(c.pop(&mut out));
        assert_eq!(out, [9, 0, 0]);
    }

    #[test]
    fn a_full_ring_refuses_until_the_consumer_releases() {
        let (mut p, mut c) = ring(4, 1);
        for i in 0..4 {
            assert!(p.push(&[i]));
        }
        assert!(!p.push(&[4]), "full");
        p.publish();
        let mut out = [0u64];
        assert!(c.pop(&mut out) && c.pop(&mut out));
        assert_eq!(out, [1]);
        assert!(!p.push(&[4]), "read but not released");
        c.release();
        assert!(p.push(&[4]) && p.push(&[5]));
        assert!(!p.push(&[6]));
        p.publish();
        let mut got = Vec::new();
        while c.pop(&mut out) {
            got.push(out[0]);
        }
        assert_eq!(got, [2, 3, 4, 5]);
    }

    #[test]
    fn across_threads_every_record_arrives_whole_and_in_order() {
        let (mut p, mut c) = ring(64, 4);
        let n = 200_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(&[i, i * 3, !i, i ^ 0x5555]) {
                    i += 1;
                    if i % 7 == 0 {
                        p.publish();
                    }
                } else {
                    p.publish();
                    std::thread::yield_now();
                }
            }
            p.publish();
        });
        let mut out = [0u64; 4];
        let mut next = 0;
        while next < n {
            if c.pop(&mut out) {
                assert_eq!(out, [next, next * 3, !next, next ^ 0x5555]);
                next += 1;
                if next % 5 == 0 {
                    c.release();
                }
            } else {
                c.release();
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }
}
