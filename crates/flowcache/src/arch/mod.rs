//! Processor-specific fingerprint matching and its run-time selection. The only module of this crate
//! that contains `unsafe` code.
//!
//! [`Isa`] names an instruction set the CPU was *found* to support (its constructors detect; there
//! is no way to name AVX2 on a CPU without it), and [`dispatch`] runs a kernel (a lookup, a batch of
//! lookups, an insert) monomorphised for that instruction set. The AVX2 and AVX-512 kernels are
//! compiled inside one `#[target_feature]` function each, so the whole loop — hashing, prefetching,
//! matching, the caller's check — is compiled with the wider instructions and the vector compare is
//! inlined into it; the choice costs one predictable branch per call, not one per slot.
//!
//! Why these instructions (see `x86.rs` for the code):
//! * SSE2 (`pcmpeqw` + `packsswb` + `pmovmskb`) compares 8 fingerprints in one 128-bit register. It
//!   is part of the x86-64 baseline, so the 4-way, 8-way and cuckoo-lite matchers need no detection.
//!   The 4-way matcher loads only the 64-bit fingerprint half of the bucket (`movq`), as §6 does with
//!   64-bit integers; cuckoo-lite combines the fingerprint words of its two buckets in one register
//!   (`punpcklqdq`), as §6 describes.
//! * AVX2 lets BLP load *both* of its consecutive buckets — fingerprints and values, 256 bits — with
//!   one load and mask off the value lanes after the compare, which §6 reports saves ~10 % over
//!   copying the fingerprints together.
//! * AVX-512BW/VL compares into a mask register with a write mask, so the value lanes are masked off
//!   by the compare itself (`vpcmpeqw k{0x0f0f}`), and 4- and 8-lane compares yield one bit per slot
//!   without the pack step.
//!
//! The portable [`crate::matcher::Scalar`] matcher is the oracle: `tests` below and the property
//! tests compare every implementation with it on random bucket contents.
#![allow(unsafe_code)]

use crate::matcher::{Matcher, Scalar};
use std::fmt;

#[cfg(target_arch = "x86_64")]
mod x86;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Scalar,
    Sse2,
    Avx2,
    Avx512,
}

/// An instruction set for fingerprint matching that this CPU supports.
///
/// Values can only be obtained from constructors that check the CPU, so every `Isa` is safe to run.
/// [`Isa::best`] is what caches use by default; the others exist for comparisons and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Isa(Kind);

impl Isa {
    /// The portable per-slot loop (no vector instructions). Always available.
    pub const fn scalar() -> Isa {
        Isa(Kind::Scalar)
    }

    /// SSE2 128-bit compares (x86-64 baseline).
    pub fn sse2() -> Option<Isa> {
        cfg!(target_arch = "x86_64").then_some(Isa(Kind::Sse2))
    }

    /// AVX2: BLP compares both buckets in one 256-bit register.
    pub fn avx2() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(Isa(Kind::Avx2));
        }
        None
    }

    /// AVX-512BW + VL: masked compares into mask registers.
    pub fn avx512() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return Some(Isa(Kind::Avx512));
        }
        None
    }

    /// The widest instruction set this CPU supports.
    pub fn best() -> Isa {
        Isa::avx512()
            .or_else(Isa::avx2)
            .or_else(Isa::sse2)
            .unwrap_or(Isa::scalar())
    }

    /// Every instruction set this CPU supports, narrowest first (scalar is always first).
    pub fn available() -> Vec<Isa> {
        [Some(Isa::scalar()), Isa::sse2(), Isa::avx2(), Isa::avx512()]
            .into_iter()
            .flatten()
            .collect()
    }

    /// Look up by [`Isa::name`]; `None` if unknown or not supported by this CPU.
    pub fn by_name(name: &str) -> Option<Isa> {
        Isa::available().into_iter().find(|i| i.name() == name)
    }

    /// Short name: `scalar`, `sse2`, `avx2`, `avx512`.
    pub const fn name(self) -> &'static str {
        match self.0 {
            Kind::Scalar => "scalar",
            Kind::Sse2 => "sse2",
            Kind::Avx2 => "avx2",
            Kind::Avx512 => "avx512",
        }
    }

    /// True for the portable scalar matcher.
    pub const fn is_scalar(self) -> bool {
        matches!(self.0, Kind::Scalar)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Work that is generic over the matcher: monomorphised once per instruction set.
pub(crate) trait Kernel {
    type Out;
    /// Run with matcher `m`. Implementations should be `#[inline(always)]` so the body is compiled
    /// inside the instruction-set-specific wrapper.
    fn run<M: Matcher>(self, m: M) -> Self::Out;
}

/// Run `k` with the matcher of `isa`.
#[inline]
pub(crate) fn dispatch<K: Kernel>(isa: Isa, k: K) -> K::Out {
    match isa.0 {
        Kind::Scalar => k.run(Scalar),
        #[cfg(target_arch = "x86_64")]
        Kind::Sse2 => k.run(x86::Sse2::baseline()),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Isa` of kind Avx2 is only constructed by `Isa::avx2`, after
        // `is_x86_feature_detected!("avx2")` returned true, so the CPU executes AVX2 instructions,
        // which is the only precondition of calling a `#[target_feature(enable = "avx2")]` function.
        Kind::Avx2 => unsafe { x86::run_avx2(k) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Isa` of kind Avx512 is only constructed by `Isa::avx512`, after detecting
        // AVX2, AVX-512F, AVX-512BW and AVX-512VL: exactly the features `run_avx512` enables.
        Kind::Avx512 => unsafe { x86::run_avx512(k) },
        #[cfg(not(target_arch = "x86_64"))]
        // Not constructible off x86-64 (their constructors return None there).
        _ => k.run(Scalar),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Masks<'a> {
        w: &'a [AtomicU64; 4],
        fp: u16,
    }

    impl Kernel for Masks<'_> {
        type Out = [u32; 4];
        #[inline(always)]
        fn run<M: Matcher>(self, m: M) -> [u32; 4] {
            let one8: &[AtomicU64; 2] = self.w[..2].try_into().unwrap();
            [
                m.one4(&self.w[1], self.fp),
                m.one8(one8, self.fp),
                m.two4(&self.w[0], &self.w[3], self.fp),
                m.pair4(self.w, self.fp),
            ]
        }
    }

    /// A small deterministic generator (tests must not depend on the rand crate's stream).
    fn next(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fp_hash::splitmix64(*s)
    }

    #[test]
    fn every_isa_agrees_with_scalar_on_random_words() {
        let isas = Isa::available();
        assert!(isas[0].is_scalar());
        let mut s = 42u64;
        for round in 0..20_000 {
            // Fingerprints from a tiny alphabet so that matches (and zero = empty) are common.
            let alphabet = if round % 2 == 0 { 3 } else { 1 << 16 };
            let mut lane = || (next(&mut s) % alphabet) as u16;
            let mut word = || (0..4).fold(0u64, |w, i| w | (lane() as u64) << (16 * i));
            let w = [
                AtomicU64::new(word()),
                AtomicU64::new(word()),
                AtomicU64::new(word()),
                AtomicU64::new(word()),
            ];
            let fp = (next(&mut s) % 3) as u16;
            let want = dispatch(Isa::scalar(), Masks { w: &w, fp });
            for &isa in &isas[1..] {
                assert_eq!(dispatch(isa, Masks { w: &w, fp }), want, "{isa} fp {fp}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for isa in Isa::available() {
            assert_eq!(Isa::by_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::by_name("neon9000"), None);
        assert!(Isa::available().contains(&Isa::best()));
    }
}
