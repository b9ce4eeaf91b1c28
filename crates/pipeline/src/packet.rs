//! Packet buffers, bursts and the buffer pool.
//!
//! A [`Packet`] owns a fixed 2304-byte buffer; the frame starts after [`HEADROOM`] bytes so that
//! encapsulation can prepend outer headers in place (no copy of the inner packet). Buffers are
//! recycled through a per-worker [`Pool`]: after warm-up, receiving and sending allocate nothing.
//! Ports that own their memory (AF_XDP's UMEM, AF_PACKET's ring) copy a frame in on receive and out
//! on transmit; that one copy of at most 2 KiB is the price of a port-independent pipeline.

/// Bytes reserved in front of every received frame for encapsulation headers (the largest,
/// VXLAN over IPv6 with a VLAN tag, needs 88).
pub const HEADROOM: usize = 256;
/// Size of one packet buffer.
pub const BUF_SIZE: usize = 2304;
/// Largest frame a port can hand to the pipeline.
pub const MAX_FRAME: usize = BUF_SIZE - HEADROOM;
/// Largest burst: ports deliver and accept at most this many packets at a time.
pub const MAX_BURST: usize = 32;

/// One packet: a buffer and the frame's place in it, plus receive metadata.
pub struct Packet {
    buf: Box<[u8; BUF_SIZE]>,
    start: u16,
    len: u16,
    /// Receive time in nanoseconds (port clock, pcap timestamp or generator time).
    pub ts_ns: u64,
    /// Ingress port index (set by the driver: the index of the worker's port it came from).
    pub port: u16,
    /// Metadata a stage attaches to a packet on its way to a port, not on the wire (the cluster's
    /// interconnect hop count, for example). 0 on a fresh or recycled buffer.
    pub tag: u16,
}

impl Packet {
    fn new() -> Packet {
        Packet {
            buf: Box::new([0u8; BUF_SIZE]),
            start: HEADROOM as u16,
            len: 0,
            ts_ns: 0,
            port: 0,
            tag: 0,
        }
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start as usize..self.start as usize + self.len as usize]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start as usize..self.start as usize + self.len as usize]
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for an empty frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the frame in [`Packet::buffer`].
    #[inline]
    pub fn start(&self) -> usize {
        self.start as usize
    }

    /// The whole buffer, headroom included (for in-place encapsulation).
    #[inline]
    pub fn buffer(&mut self) -> &mut [u8; BUF_SIZE] {
        &mut self.buf
    }

    /// Set where the frame lies in the buffer. Panics if the range is outside the buffer (a bug in
    /// the caller, not bad input).
    #[inline]
    pub fn set_frame(&mut self, start: usize, len: usize) {
        assert!(
            start + len <= BUF_SIZE,
            "frame {start}+{len} outside the packet buffer"
        );
        self.start = start as u16;
        self.len = len as u16;
    }

    /// Copy `frame` in after the headroom. Returns false (and leaves the packet empty) if the frame
    /// is longer than [`MAX_FRAME`].
    #[inline]
    pub fn fill(&mut self, frame: &[u8]) -> bool {
        self.start = HEADROOM as u16;
        if frame.len() > MAX_FRAME {
            self.len = 0;
            return false;
        }
        self.buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        self.len = frame.len() as u16;
        true
    }

    /// Let a receive path write up to [`MAX_FRAME`] bytes directly: returns the area after the
    /// headroom; call [`Packet::set_len`] with the number of bytes written.
    #[inline]
    pub fn rx_area(&mut self) -> &mut [u8] {
        self.start = HEADROOM as u16;
        &mut self.buf[HEADROOM..]
    }

    /// Set the frame length after writing into [`Packet::rx_area`].
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.set_frame(HEADROOM, len.min(MAX_FRAME));
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len)
            .field("start", &self.start)
            .field("ts_ns", &self.ts_ns)
            .field("port", &self.port)
            .finish()
    }
}

/// A per-worker pool of packet buffers. It allocates lazily up to its capacity, then only recycles.
pub struct Pool {
    free: Vec<Packet>,
    allocated: usize,
    capacity: usize,
}

impl Pool {
    /// A pool that will hold at most `capacity` buffers.
    pub fn new(capacity: usize) -> Pool {
        Pool {
            free: Vec::with_capacity(capacity),
            allocated: 0,
            capacity,
        }
    }

    /// A buffer, or `None` when all `capacity` buffers are in use.
    #[inline]
    pub fn get(&mut self) -> Option<Packet> {
        if let Some(p) = self.free.pop() {
            return Some(p);
        }
        self.grow()
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> Option<Packet> {
        if self.allocated == self.capacity {
            return None;
        }
        self.allocated += 1;
        Some(Packet::new())
    }

    /// Return a buffer.
    #[inline]
    pub fn put(&mut self, mut p: Packet) {
        p.len = 0;
        p.start = HEADROOM as u16;
        p.tag = 0;
        if self.free.len() < self.capacity {
            self.free.push(p);
        }
    }

    /// Return every packet of a burst.
    #[inline]
    pub fn put_all(&mut self, batch: &mut Vec<Packet>) {
        for p in batch.drain(..) {
            self.put(p);
        }
    }

    /// Buffers this pool created and that are not in it now (buffers may also be returned to a
    /// pool other than the one that created them, e.g. by another thread).
    pub fn in_use(&self) -> usize {
        self.allocated.saturating_sub(self.free.len())
    }

    /// Move up to `max` free buffers into `out` (to hand them back to another thread's pool).
    pub fn take_free(&mut self, max: usize, out: &mut Vec<Packet>) {
        let keep = self.free.len().saturating_sub(max);
        out.extend(self.free.drain(keep..));
    }

    /// Free buffers in the pool.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Buffers [`Pool::get`] can still hand out: the free ones and those not created yet.
    pub fn available(&self) -> usize {
        self.free.len() + self.capacity.saturating_sub(self.allocated)
    }

    /// Buffers allocated so far.
    pub fn allocated(&self) -> usize {
        self.allocated
    }
}

/// A new, empty burst with room for [`MAX_BURST`] packets.
pub fn burst() -> Vec<Packet> {
    Vec::with_capacity(MAX_BURST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_frame() {
        let mut pool = Pool::new(2);
        let mut p = pool.get().unwrap();
        assert!(p.fill(&[1, 2, 3]));
        assert_eq!(p.data(), &[1, 2, 3]);
        assert_eq!(p.start(), HEADROOM);
        p.set_frame(HEADROOM - 2, 5);
        assert_eq!(p.len(), 5);
        assert!(!p.fill(&vec![0u8; MAX_FRAME + 1]));
        assert!(p.is_empty());
        pool.put(p);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn pool_is_bounded_and_recycles() {
        let mut pool = Pool::new(2);
        let a = pool.get().unwrap();
        let b = pool.get().unwrap();
        assert!(pool.get().is_none());
        pool.put(a);
        let c = pool.get().unwrap();
        assert_eq!(pool.allocated(), 2);
        pool.put(b);
        pool.put(c);
        assert_eq!(pool.in_use(), 0);
    }
}
