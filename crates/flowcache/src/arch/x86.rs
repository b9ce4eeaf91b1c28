//! x86-64 matchers: SSE2 (baseline), AVX2 and AVX-512BW/VL.
//!
//! Every matcher returns the candidate mask of [`Matcher`]: one bit per candidate slot. The loads
//! read the 64-bit words of the table through pointers derived from the `&AtomicU64` references the
//! caller passes, so they are in bounds and 8-byte aligned by construction. Those words are only
//! written through `&mut` access to the cache that owns them, so no other thread can be writing
//! them while a (shared) reference exists: the plain vector loads do not race.

use super::Kernel;
use crate::matcher::Matcher;
use std::arch::x86_64::*;
use std::sync::atomic::AtomicU64;

/// SSE2 matcher. SSE2 is part of the x86-64 baseline, so it needs no detection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sse2(());

impl Sse2 {
    /// The SSE2 token (always valid on x86-64).
    pub(crate) fn baseline() -> Sse2 {
        Sse2(())
    }
}

/// AVX2 matcher token; only [`run_avx2`] creates it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

/// AVX-512BW/VL matcher token; only [`run_avx512`] creates it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

/// Run `k` with the AVX2 matcher, the whole kernel compiled with AVX2 enabled.
#[target_feature(enable = "avx2")]
pub(super) fn run_avx2<K: Kernel>(k: K) -> K::Out {
    k.run(Avx2(()))
}

/// Run `k` with the AVX-512 matcher, the whole kernel compiled with AVX-512BW/VL enabled.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
pub(super) fn run_avx512<K: Kernel>(k: K) -> K::Out {
    k.run(Avx512(()))
}

// ---- SSE2 ---------------------------------------------------------------------------------------

// The SSE2 helpers below call SSE2 intrinsics from functions without `#[target_feature]` (so that
// they can be `#[inline(always)]` into any kernel). That is sound because SSE2 is enabled in every
// x86-64 build; this makes sure of it.
#[cfg(not(target_feature = "sse2"))]
compile_error!("x86-64 without SSE2 is not a supported target");

/// Load the 64-bit word `w` into the low half of a vector (upper half zero): `movq`.
#[inline(always)]
fn load64(w: &AtomicU64) -> __m128i {
    // SAFETY: `w.as_ptr()` points to 8 readable, 8-byte-aligned bytes (an `AtomicU64` has the size
    // and alignment of `u64`), which is all `movq` reads; no thread writes it concurrently (module
    // doc). SSE2 is enabled in every x86-64 build (checked above).
    unsafe { _mm_loadl_epi64(w.as_ptr().cast::<__m128i>()) }
}

/// Load two consecutive words (128 bits).
#[inline(always)]
fn load128(w: &[AtomicU64; 2]) -> __m128i {
    // SAFETY: `w` is 16 readable bytes; the unaligned load has no alignment requirement; no
    // concurrent writer (module doc); SSE2 is baseline (checked above).
    unsafe { _mm_loadu_si128(w.as_ptr().cast::<__m128i>()) }
}

/// Lanes of `v` equal to `fp`, one bit per 16-bit lane: lanes 0..8 → bits 0..8.
#[inline(always)]
fn eq_bits(v: __m128i, fp: u16) -> u32 {
    // SAFETY: pure register operations; SSE2 is baseline (checked above).
    unsafe {
        let eq = _mm_cmpeq_epi16(v, _mm_set1_epi16(fp as i16));
        // packsswb saturates each 0xffff lane to 0xff and each 0 to 0; movemask takes the byte signs.
        (_mm_movemask_epi8(_mm_packs_epi16(eq, eq)) as u32) & 0xff
    }
}

/// The low 64-bit halves of `a` and `b` side by side (`punpcklqdq`).
#[inline(always)]
fn low_halves(a: __m128i, b: __m128i) -> __m128i {
    // SAFETY: pure register operation; SSE2 is baseline (checked above).
    unsafe { _mm_unpacklo_epi64(a, b) }
}

#[inline(always)]
fn sse2_one4(fps: &AtomicU64, fp: u16) -> u32 {
    // Lanes 4..8 are the zeroed upper half: masked off (a query for 0, "empty", would match them).
    eq_bits(load64(fps), fp) & 0xf
}

#[inline(always)]
fn sse2_one8(fps: &[AtomicU64; 2], fp: u16) -> u32 {
    eq_bits(load128(fps), fp)
}

#[inline(always)]
fn sse2_two4(a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
    // §6: copy the two buckets' fingerprint words into one 128-bit register, then compare.
    eq_bits(low_halves(load64(a), load64(b)), fp)
}

#[inline(always)]
fn sse2_pair4(ab: &[AtomicU64; 4], fp: u16) -> u32 {
    let lo: &[AtomicU64; 2] = ab[..2].try_into().expect("2 words");
    let hi: &[AtomicU64; 2] = ab[2..].try_into().expect("2 words");
    // Without 256-bit registers: two loads, keep the fingerprint (low) halves.
    eq_bits(low_halves(load128(lo), load128(hi)), fp)
}

impl Matcher for Sse2 {
    #[inline(always)]
    fn one4(self, fps: &AtomicU64, fp: u16) -> u32 {
        sse2_one4(fps, fp)
    }
    #[inline(always)]
    fn one8(self, fps: &[AtomicU64; 2], fp: u16) -> u32 {
        sse2_one8(fps, fp)
    }
    #[inline(always)]
    fn two4(self, a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
        sse2_two4(a, b, fp)
    }
    #[inline(always)]
    fn pair4(self, ab: &[AtomicU64; 4], fp: u16) -> u32 {
        sse2_pair4(ab, fp)
    }
}

// ---- AVX2 ---------------------------------------------------------------------------------------

/// Both BLP buckets in one 256-bit load; value lanes masked off after the compare.
#[target_feature(enable = "avx2")]
#[inline]
fn avx2_pair4(ab: &[AtomicU64; 4], fp: u16) -> u32 {
    // SAFETY: `ab` is 32 readable bytes; unaligned load; no concurrent writer (module doc); AVX2 is
    // enabled for this function.
    let v = unsafe { _mm256_loadu_si256(ab.as_ptr().cast::<__m256i>()) };
    let eq = _mm256_cmpeq_epi16(v, _mm256_set1_epi16(fp as i16));
    // packsswb works per 128-bit half: bits 0..8 = lanes 0..8 (fingerprints of bucket a in 0..4,
    // its values in 4..8), bits 16..24 = lanes 8..16 (bucket b). Keep the fingerprint lanes only.
    let m = _mm256_movemask_epi8(_mm256_packs_epi16(eq, eq)) as u32;
    (m & 0xf) | ((m >> 12) & 0xf0)
}

impl Matcher for Avx2 {
    #[inline(always)]
    fn one4(self, fps: &AtomicU64, fp: u16) -> u32 {
        sse2_one4(fps, fp)
    }
    #[inline(always)]
    fn one8(self, fps: &[AtomicU64; 2], fp: u16) -> u32 {
        sse2_one8(fps, fp)
    }
    #[inline(always)]
    fn two4(self, a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
        sse2_two4(a, b, fp)
    }
    #[inline(always)]
    fn pair4(self, ab: &[AtomicU64; 4], fp: u16) -> u32 {
        // SAFETY: an `Avx2` token exists only inside `run_avx2`, which is only called after AVX2 was
        // detected (`arch::dispatch`), so the CPU supports the function's target feature.
        unsafe { avx2_pair4(ab, fp) }
    }
}

// ---- AVX-512BW/VL -------------------------------------------------------------------------------

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn avx512_one4(fps: &AtomicU64, fp: u16) -> u32 {
    _mm_mask_cmpeq_epi16_mask(0x0f, load64(fps), _mm_set1_epi16(fp as i16)) as u32
}

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn avx512_one8(fps: &[AtomicU64; 2], fp: u16) -> u32 {
    _mm_cmpeq_epi16_mask(load128(fps), _mm_set1_epi16(fp as i16)) as u32
}

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn avx512_two4(a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
    let v = low_halves(load64(a), load64(b));
    _mm_cmpeq_epi16_mask(v, _mm_set1_epi16(fp as i16)) as u32
}

#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn avx512_pair4(ab: &[AtomicU64; 4], fp: u16) -> u32 {
    // SAFETY: `ab` is 32 readable bytes; unaligned load; no concurrent writer (module doc); AVX2 is
    // enabled for this function.
    let v = unsafe { _mm256_loadu_si256(ab.as_ptr().cast::<__m256i>()) };
    // The write mask 0x0f0f keeps lanes 0..4 (bucket a's fingerprints) and 8..12 (bucket b's).
    let k = _mm256_mask_cmpeq_epi16_mask(0x0f0f, v, _mm256_set1_epi16(fp as i16)) as u32;
    (k & 0xf) | ((k >> 4) & 0xf0)
}

impl Matcher for Avx512 {
    #[inline(always)]
    fn one4(self, fps: &AtomicU64, fp: u16) -> u32 {
        // SAFETY: an `Avx512` token exists only inside `run_avx512`, which is only called after
        // AVX2/AVX-512F/BW/VL were detected (`arch::dispatch`). Same for the three methods below.
        unsafe { avx512_one4(fps, fp) }
    }
    #[inline(always)]
    fn one8(self, fps: &[AtomicU64; 2], fp: u16) -> u32 {
        // SAFETY: as in `one4`.
        unsafe { avx512_one8(fps, fp) }
    }
    #[inline(always)]
    fn two4(self, a: &AtomicU64, b: &AtomicU64, fp: u16) -> u32 {
        // SAFETY: as in `one4`.
        unsafe { avx512_two4(a, b, fp) }
    }
    #[inline(always)]
    fn pair4(self, ab: &[AtomicU64; 4], fp: u16) -> u32 {
        // SAFETY: as in `one4`.
        unsafe { avx512_pair4(ab, fp) }
    }
}
