//! Processor-specific copies of the level-2 search, chosen once at run time.
//!
//! The search body (`search::search_lanes`) is plain, portable Rust; here it is compiled a second
//! and third time inside functions with `#[target_feature(enable = "avx2")]` /
//! `"avx512f"`, so the compiler vectorises the lane loop with 8 × 32-bit `vpmulld` / `vpsllvd`
//! (AVX2) or 16-lane zmm instructions (AVX-512). The baseline x86_64 target (SSE2) has no 32-bit
//! lane multiply, which is why the portable copy is 2–3x slower. All three compute the same
//! function (the smallest valid index), so tables are identical whatever the CPU.
#![allow(unsafe_code)]

use crate::search::{search_lanes, search_portable, Probe};

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn search_avx2(p: &Probe<'_>, ly: u32, end: u32) -> Option<(u32, u32)> {
    search_lanes::<8>(p, ly, end)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn search_avx512(p: &Probe<'_>, ly: u32, end: u32) -> Option<(u32, u32)> {
    search_lanes::<16>(p, ly, end)
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
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` returned Avx512 only because the CPU reports AVX-512F, the only
        // precondition of calling a function compiled with that target feature.
        Isa::Avx512 => unsafe { search_avx512(p, ly, end) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` returned Avx2 only because the CPU reports AVX2.
        Isa::Avx2 => unsafe { search_avx2(p, ly, end) },
        _ => search_portable(p, ly, end),
    }
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
                    if std::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 was just detected.
                        assert_eq!(unsafe { search_avx2(&p, ly, 5000) }, want);
                    }
                    if std::is_x86_feature_detected!("avx512f") {
                        // SAFETY: AVX-512F was just detected.
                        assert_eq!(unsafe { search_avx512(&p, ly, 5000) }, want);
                    }
                }
                assert_eq!(search(&p, ly, 5000), want);
            }
        }
    }
}
