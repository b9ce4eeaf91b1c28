//! The OS calls the engine makes outside the port implementations: CPU pinning, the clocks, and
//! the one `poll(2)` wrapper every part of flowplane waits with (idle workers, the ports' own
//! waits, the admin server's accept loop).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Pin the calling thread to `cpu` (modulo the online CPU count). Best effort: returns false if the
/// system refused (e.g. a restricted cpuset).
pub fn pin_to_cpu(cpu: usize) -> bool {
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // SAFETY: `set` is a plain bitmask struct for which all-zero is the empty set; CPU_SET writes
    // inside it (cpu % n < CPU_SETSIZE for any realistic n); sched_setaffinity(0, ...) only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % n, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock the ports stamp received packets with; vDSO, no
/// system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds (vDSO, no system call): the clock of the kernel's AF_PACKET
/// receive stamps, which the port converts to [`monotonic_ns`].
#[inline]
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time the calling thread has used, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: time on a CPU
/// only, so time spent descheduled on a shared machine does not count).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Clock `id` in nanoseconds.
#[inline]
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clocks used here exist on every Linux this
    // runs on (CLOCK_THREAD_CPUTIME_ID since 2.6.12), so the call cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The most descriptors one [`poll_readable`] waits on; beyond, the rest are not waited on (their
/// owners still read them on their next pass, at most `timeout` later).
pub const MAX_POLL_FDS: usize = 64;

/// Wait until one of `fds` is readable (or has an error or hang-up condition) or `timeout` passes
/// (rounded up to a whole millisecond, so a short wait still sleeps). Returns whether one became
/// ready; an interrupted wait (`EINTR`) counts as "not ready", since every caller loops. Up to
/// [`MAX_POLL_FDS`] descriptors are waited on without allocating; more are waited on too.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let slot = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut small = [slot(-1); MAX_POLL_FDS];
    let mut large = Vec::new();
    let p: &mut [libc::pollfd] = if fds.len() <= MAX_POLL_FDS {
        for (s, &fd) in small.iter_mut().zip(fds) {
            *s = slot(fd);
        }
        &mut small[..fds.len()]
    } else {
        large.extend(fds.iter().map(|&fd| slot(fd)));
        &mut large
    };
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a live slice of initialised pollfd structs and its length is passed as nfds,
    // so the kernel reads and writes only inside it, and does not keep the pointer. A closed or
    // invalid descriptor is reported in `revents` (POLLNVAL), not undefined behaviour.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

/// An `ifreq` for interface `ifname` (its name checked and copied in).
pub(crate) fn ifreq(ifname: &str) -> io::Result<libc::ifreq> {
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{ifname:?} is not an interface name"),
        ));
    }
    // SAFETY: `ifreq` is a plain C struct (a name array and a union of plain fields) for which
    // all-zero bytes are a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in r.ifr_name.iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    Ok(r)
}

/// Ask the kernel about interface `ifname` with `ioctl(request)` on a throw-away socket of the
/// calling thread's network namespace (sysfs shows the namespace it was mounted in, which is not
/// the thread's after `setns`).
fn if_ioctl(ifname: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let mut r = ifreq(ifname)?;
    // SAFETY: SIOCGIFFLAGS, SIOCGIFHWADDR and SIOCSIFFLAGS read the name and read or write one
    // plain member of the request's union, nothing else.
    unsafe { if_ioctl_with(ifname, request, &mut r)? };
    Ok(r)
}

/// `ioctl(request, r)` on a throw-away socket of the calling thread's network namespace.
///
/// # Safety
/// `r` must be what `request` expects: for requests that follow a pointer in it (SIOCETHTOOL),
/// that pointer must be valid for what the kernel reads and writes there.
pub(crate) unsafe fn if_ioctl_with(
    ifname: &str,
    request: libc::c_ulong,
    r: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the descriptor is closed below on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` is a valid, writable ifreq that outlives the call, and the caller vouches for
    // what it points to.
    let rc = unsafe { libc::ioctl(fd, request as _, r as *mut libc::ifreq) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is the descriptor opened above, closed once.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(io::Error::new(
            err.kind(),
            format!("interface {ifname}: {err}"),
        ));
    }
    Ok(())
}

/// The flags of interface `ifname` (`IFF_UP`, `IFF_PROMISC`, ...) in the calling thread's network
/// namespace.
pub fn interface_flags(ifname: &str) -> io::Result<u32> {
    let r = if_ioctl(ifname, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_flags } as u16 as u32)
}

/// Set or clear `flag` (`IFF_PROMISC`, ...) of interface `ifname` in the calling thread's network
/// namespace.
pub fn set_interface_flag(ifname: &str, flag: u32, on: bool) -> io::Result<()> {
    let mut r = if_ioctl(ifname, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member, which SIOCSIFFLAGS reads back.
    unsafe {
        let f = &mut r.ifr_ifru.ifru_flags;
        if on {
            *f |= flag as libc::c_short;
        } else {
            *f &= !(flag as libc::c_short);
        }
        if_ioctl_with(ifname, libc::SIOCSIFFLAGS, &mut r)
    }
}

/// The hardware (MAC) address of interface `ifname` in the calling thread's network namespace.
pub fn interface_hwaddr(ifname: &str) -> io::Result<[u8; 6]> {
    let r = if_ioctl(ifname, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union, a sockaddr whose data
    // starts with the address.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, &b) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = b as u8;
    }
    Ok(m)
}

/// Most descriptors one message carries (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_FDS_PER_MESSAGE: usize = 250;

/// Send `data` on the unix stream socket `sock` with the descriptors `fds` attached
/// (`SCM_RIGHTS`, at most [`MAX_FDS_PER_MESSAGE`]). Returns the bytes sent, which may be fewer
/// than `data.len()`: the caller writes the rest plainly (the descriptors travel with the first
/// byte).
pub fn send_with_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    data: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    if fds.len() > MAX_FDS_PER_MESSAGE || data.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} descriptors with {} bytes", fds.len(), data.len()),
        ));
    }
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let payload = std::mem::size_of_val(raw.as_slice()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    // u64 words: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data: all-zero is valid (no name, no control yet).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds CMSG_SPACE(payload) bytes, room for one header and
        // `payload` bytes of data, so CMSG_FIRSTHDR is non-null and CMSG_DATA points at
        // `payload` writable bytes inside it; `raw` is a live slice of that many bytes.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                payload as usize,
            );
        }
    }
    // SAFETY: `msg` points at `iov` (over `data`) and the control buffer, all live for the call;
    // the kernel only reads them.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Receive into `buf` from the unix stream socket `sock`, with the descriptors attached
/// (`SCM_RIGHTS`, up to [`MAX_FDS_PER_MESSAGE`], received close-on-exec). Returns the bytes
/// read (0: the other side closed) and the descriptors.
pub fn recv_with_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let most = (MAX_FDS_PER_MESSAGE * std::mem::size_of::<i32>()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(most) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data: all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `iov` (over `buf`) and the control buffer, both live and writable
    // for the call; the kernel writes at most their lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: after recvmsg, the control buffer holds `msg_controllen` bytes of well-formed
    // control messages; CMSG_FIRSTHDR/CMSG_NXTHDR walk them within that length. An SCM_RIGHTS
    // message's data is `cmsg_len - CMSG_LEN(0)` bytes of descriptors the kernel just installed
    // in this process, owned by nobody else yet (read unaligned: CMSG_DATA may not be aligned
    // for i32 on every platform).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c).cast::<i32>();
                for i in 0..bytes / std::mem::size_of::<i32>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "more descriptors than one message may carry",
        ));
    }
    Ok((n as usize, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn clocks_are_in_nanoseconds_and_monotonic_does_not_go_back() {
        let (m1, r, m2) = (monotonic_ns(), realtime_ns(), monotonic_ns());
        assert!(m1 <= m2);
        // Realtime is after 2020 and well ahead of the time since boot.
        assert!(r > 1_577_836_800_000_000_000, "{r}");
        assert!(r > m2);
    }

    #[test]
    fn poll_sees_readable_and_times_out() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let t = std::time::Instant::now();
        assert!(!poll_readable(&[b.as_raw_fd()], Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(15));
        a.write_all(b"x").unwrap();
        assert!(poll_readable(&[a.as_raw_fd(), b.as_raw_fd()], Duration::from_secs(5)).unwrap());
        assert!(!poll_readable(&[], Duration::from_millis(1)).unwrap());
    }

    #[test]
    fn loopback_flags_and_address() {
        let f = interface_flags("lo").unwrap();
        assert_ne!(f & libc::IFF_LOOPBACK as u32, 0);
        assert_eq!(interface_hwaddr("lo").unwrap(), [0; 6]);
        assert!(interface_flags("no-such-if0").is_err());
        assert!(interface_flags("a-name-far-too-long-for-linux").is_err());
    }
}
