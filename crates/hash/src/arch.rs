//! Processor-specific pieces: prefetch hints and the SSE4.2 CRC32C instruction.
//!
//! Each function has a portable fallback (a no-op for prefetch, the table-driven CRC for
//! `crc32c`), chosen with `cfg` at compile time or feature detection at run time.
#![allow(unsafe_code)]

/// Hint the CPU to bring the cache line holding `p` into L1 for reading. Never faults, even for
/// dangling or null pointers (prefetch is a hint, not an access).
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` performs no architectural memory access and cannot fault for any address;
    // SSE is part of the x86_64 baseline, so the instruction always exists.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hint the CPU that the cache line holding `p` is about to be written. On x86_64 this is the same
/// T0 prefetch (prefetchw needs a feature bit not in the baseline).
#[inline(always)]
pub fn prefetch_write<T>(p: *const T) {
    prefetch_read(p)
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_sse42() -> bool {
    // This crate is no_std, so it cannot use std's `is_x86_feature_detected!`; cpuid is slow (tens of
    // cycles, serialising), so its answer is cached here.
    use core::sync::atomic::{AtomicU8, Ordering};
    static STATE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes
    match STATE.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => {
            // cpuid leaf 1 exists on every x86_64 CPU.
            let r = core::arch::x86_64::__cpuid(1);
            let yes = r.ecx & (1 << 20) != 0;
            STATE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// CRC32C with the SSE4.2 `crc32` instruction, 8 bytes per step. Called only after
/// [`has_sse42`] returned true.
#[cfg(target_arch = "x86_64")]
pub(crate) fn crc32c_sse42(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: the caller checked that the CPU supports SSE4.2, the only precondition of `inner`.
    unsafe { inner(crc, data) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn inner(crc: u32, data: &[u8]) -> u32 {
    use core::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = !crc as u64;
    let mut chunks = data.chunks_exact(8);
    for ch in &mut chunks {
        let w = u64::from_le_bytes([ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]]);
        c = _mm_crc32_u64(c, w);
    }
    let mut c32 = c as u32;
    for &b in chunks.remainder() {
        c32 = _mm_crc32_u8(c32, b);
    }
    !c32
}
