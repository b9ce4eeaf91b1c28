//! Processor-specific copies of the level-2 search, chosen once at run time.
//!
//! The portable search (`search::search_lanes`) is the oracle; here the same loop is written with
//! x86 intrinsics, one vector lane per hash index: for each key, broadcast `a`, `b` and its bit mask,
//! then `vpxord`, `vpmulld`, `vpsrld`, `vpsllvd` (the per-lane position bit) and two `or`s into the
//! "ones" and "zeros" accumulators; a lane whose accumulators do not intersect is a solution. Left to
//! itself, the compiler vectorised the portable loop across keys instead of indices and spilled
//! every accumulator (measured: 3x slower), hence the explicit kernels. The baseline x86_64 target
//! (SSE2) has no 32-bit lane multiply at all. All versions return the smallest valid index, so
//! tables are identical whatever the CPU; the array is then computed once, in scalar code.
#![allow(unsafe_code)]

use crate::search::{ones_mask, search_portable, Probe};

/// AVX-512F: 16 consecutive indices per pass, one zmm register per quantity.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn first_index_avx512(p: &Probe<'_>, ly: u32, end: u32) -> Option<u32> {
    use core::arch::x86_64::*;
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let mul = _mm512_set1_epi32(crate::geometry::IDX_MUL as i32);
    let sh = _mm_cvtsi32_si128(32 - ly as i32);
    let one = _mm512_set1_epi32(1);
    let zero = _mm512_setzero_si512();
    let mut i0 = 0u32;
    while i0 < end {
        let s = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(i0 as i32), lane), mul);
        let mut o = zero;
        let mut z = zero;
        for j in 0..p.a.len() {
            let a = _mm512_set1_epi32(p.a[j] as i32);
            let b = _mm512_set1_epi32(p.b[j] as i32);
            let m = _mm512_set1_epi32(p.m[j] as i32);
            let pos = _mm512_srl_epi32(_mm512_mullo_epi32(_mm512_xor_si512(a, s), b), sh);
            let bit = _mm512_sllv_epi32(one, pos);
            o = _mm512_or_si512(o, _mm512_and_si512(bit, m));
            z = _mm512_or_si512(z, _mm512_andnot_si512(m, bit));
        }
        let ok = _mm512_cmpeq_epi32_mask(_mm512_and_si512(o, z), zero) as u32;
        let valid = if end - i0 >= 16 {
            0xFFFF
        } else {
            (1u32 << (end - i0)) - 1
        };
        let hit = ok & valid;
        if hit != 0 {
            return Some(i0 + hit.trailing_zeros());
        }
        i0 = i0.checked_add(16)?;
    }
    None
}

/// AVX2: 8 consecutive indices per pass (`vpmulld`, `vpsllvd`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn first_index_avx2(p: &Probe<'_>, ly: u32, end: u32) -> Option<u32> {
    use core::arch::x86_64::*;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mul = _mm256_set1_epi32(crate::geometry::IDX_MUL as i32);
    let sh = _mm_cvtsi32_si128(32 - ly as i32);
    let one = _mm256_set1_epi32(1);
    let zero = _mm256_setzero_si256();
    let mut i0 = 0u32;
    while i0 < end {
        let s = _mm256_mullo_epi32(_mm256_add_epi32(_mm256_set1_epi32(i0 as i32), lane), mul);
        let mut o = zero;
        let mut z = zero;
        for j in 0..p.a.len() {
            let a = _mm256_set1_epi32(p.a[j] as i32);
            let b = _mm256_set1_epi32(p.b[j] as i32);
            let m = _mm256_set1_epi32(p.m[j] as i32);
            let pos = _mm256_srl_epi32(_mm256_mullo_epi32(_mm256_xor_si256(a, s), b), sh);
            let bit = _mm256_sllv_epi32(one, pos);
            o = _mm256_or_si256(o, _mm256_and_si256(bit, m));
            z = _mm256_or_si256(z, _mm256_andnot_si256(m, bit));
        }
        let eq = _mm256_cmpeq_epi32(_mm256_and_si256(o, z), zero);
        let ok = _mm256_movemask_ps(_mm256_castsi256_ps(eq)) as u32;
        let valid = if end - i0 >= 8 {
            0xFF
        } else {
            (1u32 << (end - i0)) - 1
        };
        let hit = ok & valid;
        if hit != 0 {
            return Some(i0 + hit.trailing_zeros());
        }
        i0 = i0.checked_add(8)?;
    }
    None
}

/// Which copy runs on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// 16 lanes, AVX-512F.
    Avx512,
    /// 8 lanes, AVX2.
    Avx2,
    /// 8 lanes, baseline instructions.
    Portable,
}

/// The instruction set the construction search uses on this CPU.
pub fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        // std caches the cpuid answer; the check is a load and a test.
        if std::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
    }
    Isa::Portable
}

pub(crate) fn search(p: &Probe<'_>, ly: u32, end: u32) -> Option<(u32, u32)> {
    let i = match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` returned Avx512 only because the CPU reports AVX-512F, the only
        // precondition of calling a function compiled with that target feature.
        Isa::Avx512 => unsafe { first_index_avx512(p, ly, end) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` returned Avx2 only because the CPU reports AVX2.
        Isa::Avx2 => unsafe { first_index_avx2(p, ly, end) },
        _ => return search_portable(p, ly, end),
    }?;
    Some((i, ones_mask(p, i, ly)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_isa_agrees_with_portable() {
        let mut r = 5u64;
        for n in [2usize, 9, 16, 23, 40] {
            let (mut a, mut b, mut m) = (vec![], vec![], vec![]);
            for j in 0..n {
                r = fp_hash::splitmix64(r);
                a.push(r as u32);
                b.push((r >> 32) as u32 | 1);
                m.push(if j % 2 == 0 { u32::MAX } else { 0 });
            }
            let p = Probe {
                a: &a,
                b: &b,
                m: &m,
            };
            for ly in 1..=5 {
                let want = search_portable(&p, ly, 5000);
                #[cfg(target_arch = "x86_64")]
                {
                    for end in [1, 7, 8, 9, 17, 5000] {
                        let want = search_portable(&p, ly, end).map(|x| x.0);
                        if std::is_x86_feature_detected!("avx2") {
                            // SAFETY: AVX2 was just detected.
                            assert_eq!(unsafe { first_index_avx2(&p, ly, end) }, want);
                        }
                        if std::is_x86_feature_detected!("avx512f") {
                            // SAFETY: AVX-512F was just detected.
                            assert_eq!(unsafe { first_index_avx512(&p, ly, end) }, want);
                        }
                    }
                }
                assert_eq!(search(&p, ly, 5000), want);
            }
        }
    }
}
