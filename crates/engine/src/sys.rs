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
    // SAFETY: `ts` is a valid, writable timespec; both clocks used here exist on every Linux this
    // runs on (CLOCK_THREAD_CPUTIME_ID since 2.6.12), so the call cannot fail.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The most descriptors one [`poll_readable`] waits on; beyond, the rest are not waited on (their
/// owners still read them on their next pass, at most `timeout` later).
pub const MAX_POLL_FDS: usize = 64;

/// Wait until one of `fds` is readable (or has an error or hang-up condition) or `timeout` passes
/// (rounded up to a whole millisecond, so a short wait still sleeps). Returns whether one became
/// ready; an interrupted wait (`EINTR`) counts as "not ready", since every caller loops.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_POLL_FDS];
    let n = fds.len().min(MAX_POLL_FDS);
    for (slot, &fd) in p.iter_mut().zip(fds) {
        slot.fd = fd;
        slot.events = libc::POLLIN;
    }
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a live array of MAX_POLL_FDS initialised pollfd structs and n <= MAX_POLL_FDS,
    // so the kernel reads and writes only inside it, and does not keep the pointer. A closed or
    // invalid descriptor is reported in `revents` (POLLNVAL), not undefined behaviour.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

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
}
