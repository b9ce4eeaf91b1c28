//! The AF_XDP socket, its four rings and its UMEM: all the `unsafe` of the AF_XDP port, as thin
//! wrappers whose every block proves its preconditions (`// SAFETY:`).
#![allow(unsafe_code)]

use super::UmemPages;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

const HUGE_2M: usize = 2 << 20;

/// The UMEM: a shared mapping of a memory file (`memfd`), registered with the socket. A file
/// rather than anonymous memory so that a successor process can map the same frames when the
/// socket is handed to it ([`Umem::from_fd`]).
pub struct Umem {
    ptr: NonNull<u8>,
    len: usize,
    pages: UmemPages,
    file: OwnedFd,
}

// SAFETY: the mapping is owned by this value alone; moving it to another thread moves that
// ownership. The kernel writes into rx frames only while they are on the fill ring, which the
// owner of the `Umem` does not read (see `copy_out`).
unsafe impl Send for Umem {}

/// A new memory file of `len` bytes (`MFD_*` `flags`).
fn memfd(len: usize, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; the result is checked.
    let raw = unsafe { libc::memfd_create(c"fp-umem".as_ptr(), libc::MFD_CLOEXEC | flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain system call on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Map `len` bytes of `file`, shared.
fn map_shared(file: &OwnedFd, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a shared mapping of our file with no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap does not return NULL"))
}

/// Whether shared memory may get transparent huge pages when advised.
fn shmem_thp() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").is_ok_and(|s| {
        ["[always]", "[within_size]", "[advise]", "[force]"]
            .iter()
            .any(|m| s.contains(m))
    })
}

impl Umem {
    /// Map `len` bytes: 2 MiB pages if asked and available, else normal pages advised for
    /// transparent huge pages (which shared memory gets only where the system allows it).
    pub fn new(len: usize, huge: bool) -> io::Result<Umem> {
        if huge && len.is_multiple_of(HUGE_2M) {
            if let Ok(file) = memfd(len, libc::MFD_HUGETLB | libc::MFD_HUGE_2MB) {
                if let Ok(ptr) = map_shared(&file, len) {
                    return Ok(Umem {
                        ptr,
                        len,
                        pages: UmemPages::HugeTlb,
                        file,
                    });
                }
            }
        }
        let file = memfd(len, 0)?;
        let ptr = map_shared(&file, len)?;
        let mut pages = UmemPages::Normal;
        if huge && shmem_thp() {
            // SAFETY: `ptr..ptr+len` is the mapping just created; madvise only sets a policy.
            if unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) } == 0 {
                pages = UmemPages::Transparent;
            }
        }
        Ok(Umem {
            ptr,
            len,
            pages,
            file,
        })
    }

    /// Map the UMEM another process made ([`Umem::dup_file`]), `len` bytes on `pages`.
    pub fn from_fd(file: OwnedFd, len: usize, pages: UmemPages) -> io::Result<Umem> {
        // SAFETY: fstat writes a `stat` (plain integers) for our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `st` is live for the call.
        if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as u64) < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a UMEM file of {} bytes, {len} expected", st.st_size),
            ));
        }
        let ptr = map_shared(&file, len)?;
        Ok(Umem {
            ptr,
            len,
            pages,
            file,
        })
    }

    /// A duplicate of the memory file's descriptor, for another process.
    pub fn dup_file(&self) -> io::Result<OwnedFd> {
        use std::os::fd::AsFd;
        self.file.as_fd().try_clone_to_owned()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copy the frame bytes at UMEM offset `addr` into `dst`. The caller owns that frame (it
    /// took the descriptor from the rx ring and has not given it back), so the kernel does
    /// not write it concurrently. Out-of-range descriptors (a kernel bug) copy nothing.
    #[inline]
    pub fn copy_out(&self, addr: u64, dst: &mut [u8]) {
        let (a, n) = (addr as usize, dst.len());
        if a.checked_add(n).is_none_or(|end| end > self.len) {
            return;
        }
        // SAFETY: `a..a+n` lies inside the mapping (checked above); `dst` is a distinct Rust
        // buffer, so the ranges do not overlap; nobody writes the frame during the copy.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(a), dst.as_mut_ptr(), n) }
    }

    /// The native-endian u64 at UMEM offset `addr`, which lies in a chunk the caller owns
    /// (as for `copy_out`); `None` out of range.
    #[inline]
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        let a = addr as usize;
        if a.checked_add(8).is_none_or(|end| end > self.len) {
            return None;
        }
        self.copy_out(addr, &mut b);
        Some(u64::from_ne_bytes(b))
    }

    /// Write a native-endian u64 at UMEM offset `addr`, in a chunk the caller owns (not on
    /// any ring: the kernel writes a chunk only while it is on the fill ring); out of range:
    /// nothing written.
    #[inline]
    pub fn write_u64(&mut self, addr: u64, v: u64) {
        self.copy_in(addr, &v.to_ne_bytes());
    }

    /// Copy `src` into the frame at UMEM offset `addr`, which the caller owns (a free tx
    /// frame: not on any ring).
    #[inline]
    pub fn copy_in(&mut self, addr: u64, src: &[u8]) {
        let (a, n) = (addr as usize, src.len());
        if a.checked_add(n).is_none_or(|end| end > self.len) {
            return;
        }
        // SAFETY: `a..a+n` lies inside the mapping; `src` is a distinct buffer; the kernel
        // reads the frame only after its descriptor is published on the tx ring (Release).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(a), n) }
    }

    pub fn pages(&self) -> UmemPages {
        self.pages
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns; no reference into it outlives `self`
        // (copy_out/copy_in borrow `self`), and the socket that registered it is closed first
        // (see `Xsk`'s field order and Drop).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// One mapped ring.
pub struct Ring {
    map: NonNull<u8>,
    map_len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    desc: NonNull<u8>,
    mask: u32,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
    /// True if user space produces (fill, tx); false if it consumes (rx, completion).
    producer_side: bool,
}

// SAFETY: the ring mapping is owned by this value; its shared indices are atomics; user space
// has exactly one side of each ring and that side is this (non-Sync) value.
unsafe impl Send for Ring {}

impl Ring {
    /// Map a ring of `size` entries of `entry` bytes at page offset `pgoff` of socket `fd`.
    fn map(
        fd: i32,
        pgoff: u64,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        producer_side: bool,
    ) -> io::Result<Ring> {
        let map_len = off.desc as usize + size as usize * entry;
        // SAFETY: a shared mapping of the socket's ring; the kernel validates the offset and
        // the length against the ring it created; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        let at = |o: u64| {
            // SAFETY: the kernel's offsets lie inside the ring mapping (it reported them for
            // this ring); the producer/consumer/flags words are 4-byte aligned u32s.
            NonNull::new(unsafe { base.add(o as usize) }).expect("inside a mapping")
        };
        let mut r = Ring {
            map: NonNull::new(base).expect("mmap does not return NULL"),
            map_len,
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            desc: at(off.desc),
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            producer_side,
        };
        // Acquire: a ring taken over from another process has entries already; what the
        // kernel wrote before publishing these indices must be visible to the first read.
        r.cached_prod = r.prod().load(Ordering::Acquire);
        r.cached_cons = r.cons().load(Ordering::Acquire);
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping owned by `self`, aligned (see `map`); the
        // kernel accesses it only atomically.
        unsafe { self.producer.as_ref() }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { self.consumer.as_ref() }
    }

    /// Entries the ring holds.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `prod`.
        let f = unsafe { self.flags.as_ref() };
        f.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side: free entries, at least `want` if possible (refreshes the cached consumer
    /// index only when the cache says there are fewer).
    #[inline]
    pub fn free(&mut self, want: u32) -> u32 {
        debug_assert!(self.producer_side);
        let mut free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free < want {
            // Acquire: the kernel finished with the entries before it published this index.
            self.cached_cons = self.cons().load(Ordering::Acquire);
            free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        }
        free
    }

    /// Producer side: entries published but not yet consumed by the kernel.
    #[inline]
    pub fn outstanding(&mut self) -> u32 {
        self.cached_cons = self.cons().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Producer side: publish `n` entries written with `write_*`.
    #[inline]
    pub fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_prod = self.cached_prod.wrapping_add(n);
        // Release: the entries written before are visible to the kernel once it sees this.
        self.prod().store(self.cached_prod, Ordering::Release);
    }

    /// Consumer side: entries ready, at most `max` (refreshes the cached producer index when
    /// the cache is empty).
    #[inline]
    pub fn available(&mut self, max: u32) -> u32 {
        debug_assert!(!self.producer_side);
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            // Acquire: the entries the kernel wrote are visible once we see its index.
            self.cached_prod = self.prod().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max)
    }

    /// Consumer side: hand `n` read entries back to the kernel.
    #[inline]
    pub fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // Release: our reads of the entries complete before the kernel may overwrite them.
        self.cons().store(self.cached_cons, Ordering::Release);
    }

    #[inline]
    fn slot(&self, index: u32, entry: usize) -> *mut u8 {
        let i = (index & self.mask) as usize;
        // SAFETY: i < size, and the descriptor array holds `size` entries of `entry` bytes.
        unsafe { self.desc.as_ptr().add(i * entry) }
    }

    /// Fill/completion entry `i` past the consumer position (consumer side) — u64 address.
    #[inline]
    pub fn read_addr(&self, i: u32) -> u64 {
        let p = self.slot(self.cached_cons.wrapping_add(i), 8);
        // SAFETY: an aligned u64 slot of the ring, published by the kernel (Acquire in
        // `available`) and not yet released back to it.
        unsafe { p.cast::<u64>().read() }
    }

    /// Fill/completion entry `i` past the producer position (producer side).
    #[inline]
    pub fn write_addr(&mut self, i: u32, addr: u64) {
        let p = self.slot(self.cached_prod.wrapping_add(i), 8);
        // SAFETY: an aligned u64 slot that `free` reported as free: the kernel does not read
        // it until `submit` publishes it.
        unsafe { p.cast::<u64>().write(addr) }
    }

    /// rx descriptor `i` past the consumer position: (UMEM address, length).
    #[inline]
    pub fn read_desc(&self, i: u32) -> (u64, u32) {
        let p = self.slot(
            self.cached_cons.wrapping_add(i),
            size_of::<libc::xdp_desc>(),
        );
        // SAFETY: an aligned xdp_desc slot published by the kernel and not yet released.
        let d = unsafe { p.cast::<libc::xdp_desc>().read() };
        (d.addr, d.len)
    }

    /// tx descriptor `i` past the producer position.
    #[inline]
    pub fn write_desc(&mut self, i: u32, addr: u64, len: u32) {
        let p = self.slot(
            self.cached_prod.wrapping_add(i),
            size_of::<libc::xdp_desc>(),
        );
        // SAFETY: an aligned xdp_desc slot reported free by `free`, unpublished until
        // `submit`.
        unsafe {
            p.cast::<libc::xdp_desc>().write(libc::xdp_desc {
                addr,
                len,
                options: 0,
            })
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping the ring mapping this value owns; no reference into it survives.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

/// Layout parameters of a socket.
pub struct Geometry {
    pub frame_size: u32,
    pub ring_size: u32,
    pub ifindex: u32,
    pub queue: u32,
}

/// A bound AF_XDP socket with its four rings. Field order is drop order: rings, then the
/// socket, then the UMEM it registered.
pub struct Xsk {
    pub fill: Ring,
    pub comp: Ring,
    pub rx: Ring,
    pub tx: Ring,
    fd: OwnedFd,
    zero_copy: bool,
    umem: Option<Umem>,
}

fn setsockopt<T>(fd: i32, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: the kernel reads size_of::<T>() bytes from a live `&T`.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `getsockopt(fd, SOL_XDP, opt)` into `v`.
///
/// # Safety
/// `T` must be the C structure the kernel returns for `opt` (plain integers: every bit pattern
/// is valid), so that whatever prefix of it the kernel writes leaves a valid value.
unsafe fn getsockopt<T>(fd: i32, opt: libc::c_int, v: &mut T) -> io::Result<()> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` = size_of::<T>() bytes into the live `v`; the
    // caller guarantees any bytes are a valid T.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (v as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Xsk {
    /// Create a socket on `umem`, size and map its rings, give `rx_frames` frames to the fill
    /// ring, bind. On failure the UMEM is handed back (to retry in another mode).
    pub fn open(
        umem: Umem,
        g: &Geometry,
        zero_copy: bool,
        rx_frames: u32,
    ) -> Result<(Umem, Xsk), (Umem, io::Error)> {
        match Self::open_inner(&umem, g, zero_copy, rx_frames) {
            Ok(x) => Ok((umem, x)),
            Err(e) => Err((umem, e)),
        }
    }

    /// Go on with a bound socket another process handed over (`fd`, its UMEM `umem`, rings of
    /// `ring_size` entries): map its rings where they stand. The frames on them stay where
    /// they are (the rx ring's are received next).
    pub fn adopt(fd: OwnedFd, umem: Umem, ring_size: u32) -> io::Result<Xsk> {
        let raw = fd.as_raw_fd();
        let (fill, comp, rx, tx) = Self::map_rings(raw, ring_size)?;
        let mut opts = libc::xdp_options { flags: 0 };
        // SAFETY: XDP_OPTIONS returns an xdp_options (one u32).
        unsafe { getsockopt(raw, libc::XDP_OPTIONS, &mut opts) }?;
        Ok(Xsk {
            fill,
            comp,
            rx,
            tx,
            fd,
            zero_copy: opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            umem: Some(umem),
        })
    }

    /// A duplicate of the socket's descriptor, for another process.
    pub fn dup_fd(&self) -> io::Result<OwnedFd> {
        use std::os::fd::AsFd;
        self.fd.as_fd().try_clone_to_owned()
    }

    /// Map the four rings (fill, completion, rx, tx) of socket `raw`, sized `ring_size`.
    fn map_rings(raw: i32, ring_size: u32) -> io::Result<(Ring, Ring, Ring, Ring)> {
        // SAFETY: xdp_mmap_offsets is plain integers: all-zero is valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        // SAFETY: XDP_MMAP_OFFSETS returns an xdp_mmap_offsets (plain integers).
        unsafe { getsockopt(raw, libc::XDP_MMAP_OFFSETS, &mut off) }?;
        let d = size_of::<libc::xdp_desc>();
        let fill = Ring::map(
            raw,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            &off.fr,
            ring_size,
            8,
            true,
        )?;
        let comp = Ring::map(
            raw,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            &off.cr,
            ring_size,
            8,
            false,
        )?;
        let rx = Ring::map(
            raw,
            libc::XDP_PGOFF_RX_RING as u64,
            &off.rx,
            ring_size,
            d,
            false,
        )?;
        let tx = Ring::map(
            raw,
            libc::XDP_PGOFF_TX_RING as u32 as u64,
            &off.tx,
            ring_size,
            d,
            true,
        )?;
        Ok((fill, comp, rx, tx))
    }

    fn open_inner(umem: &Umem, g: &Geometry, zero_copy: bool, rx_frames: u32) -> io::Result<Xsk> {
        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: g.frame_size,
            // No headroom of our own: the kernel still puts each received frame
            // XDP_PACKET_HEADROOM (256) bytes into its chunk, and the receive stamp the XDP
            // program adds (8 bytes of metadata, copied with the frame) sits right in front.
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(raw, opt, &(g.ring_size as libc::c_int))?;
        }
        let (fill, comp, rx, tx) = Self::map_rings(raw, g.ring_size)?;
        let mut x = Xsk {
            fill,
            comp,
            rx,
            tx,
            fd,
            zero_copy,
            umem: None,
        };
        // Give the receive half of the UMEM to the kernel.
        let n = rx_frames.min(x.fill.free(rx_frames));
        for i in 0..n {
            x.fill.write_addr(i, i as u64 * g.frame_size as u64);
        }
        x.fill.submit(n);
        let mode = if zero_copy {
            libc::XDP_ZEROCOPY
        } else {
            libc::XDP_COPY
        };
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: mode | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: g.ifindex,
            sxdp_queue_id: g.queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: the kernel reads a sockaddr_xdp of the stated size from a live value.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const libc::sockaddr_xdp).cast(),
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut opts = libc::xdp_options { flags: 0 };
        // SAFETY: XDP_OPTIONS returns an xdp_options (one u32).
        unsafe { getsockopt(raw, libc::XDP_OPTIONS, &mut opts) }?;
        x.zero_copy = opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
        Ok(x)
    }

    /// Attach the UMEM so that it is unmapped after the socket closes.
    pub fn with_umem(mut self, umem: Umem) -> Xsk {
        self.umem = Some(umem);
        self
    }

    pub fn umem(&self) -> &Umem {
        self.umem.as_ref().expect("UMEM attached at open")
    }

    pub fn umem_mut(&mut self) -> &mut Umem {
        self.umem.as_mut().expect("UMEM attached at open")
    }

    pub fn umem_pages(&self) -> UmemPages {
        self.umem().pages()
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Wake the kernel's transmit path (copy mode transmits inside this call). Transient
    /// errors (EAGAIN, EBUSY, ENOBUFS, ENETDOWN) only mean "try again later".
    pub fn kick_tx(&self) {
        // SAFETY: a zero-length send with no buffer and no address, as AF_XDP expects.
        unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            );
        }
    }

    /// Wake the kernel's receive path (zero-copy drivers that asked for it).
    pub fn kick_rx(&self) {
        // SAFETY: a zero-length receive with no buffer, as AF_XDP expects.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }

    pub fn statistics(&self) -> io::Result<super::XskSocketStats> {
        // SAFETY: xdp_statistics is plain integers: all-zero is valid.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        // SAFETY: XDP_STATISTICS returns an xdp_statistics (plain integers).
        unsafe { getsockopt(self.fd.as_raw_fd(), libc::XDP_STATISTICS, &mut s) }?;
        Ok(super::XskSocketStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // Fields drop in order after this: rings, socket, UMEM. Nothing to do here; the impl
        // exists to document (and pin) that order.
    }
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// An `epoll` descriptor watching `fds` for input: readable (to `poll`) when any of them is.
pub fn epoll_over(fds: &[i32]) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor that
    // nothing else owns, so `OwnedFd` may take it.
    let ep = unsafe {
        let fd = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    for &fd in fds {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live epoll_event the kernel only reads during the call; `ep` is
        // our epoll descriptor. A bad `fd` is an error return, not undefined behaviour.
        let rc = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(ep)
}

pub fn rx_queue_count(ifname: &str) -> io::Result<u32> {
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    let mut req = crate::sys::ifreq(ifname)?;
    req.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL reads the name and the pointer to `ch`, a live ethtool_channels
    // that outlives the call, and writes only `ch`.
    unsafe { crate::sys::if_ioctl_with(ifname, SIOCETHTOOL, &mut req)? };
    Ok(ch.rx_count.max(ch.combined_count).max(1))
}
