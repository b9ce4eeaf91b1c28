//! The OS calls the I/O layer makes outside the port implementations: CPU pinning.
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
