//! The OS calls the I/O layer makes outside the port implementations: CPU pinning, the clocks.
#![allow(unsafe_code)]

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
