//! Primality for table sizes.
//!
//! Maglev's permutation `offset + j·skip (mod M)` visits every slot exactly once only if every `skip`
//! in `1..M` is coprime to `M`, i.e. if `M` is prime (§3.4). Sizes are validated with a
//! deterministic Miller–Rabin test: the witnesses {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37} are
//! proven sufficient for every n < 3.3·10^24, so the answer is exact for all `u64` — no
//! probabilistic error, no table of primes. Cost: well under a microsecond, once per config.

/// `a·b mod m` without overflow.
#[inline]
fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    ((a as u128 * b as u128) % m as u128) as u64
}

fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1u64 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = mul_mod(acc, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    acc
}

/// Whether `n` is prime (exact for every `u64`).
///
/// ```
/// assert!(fp_maglev::is_prime(65537));
/// assert!(fp_maglev::is_prime(655373));
/// assert!(!fp_maglev::is_prime(65536));
/// ```
pub fn is_prime(n: u64) -> bool {
    const WITNESSES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for &p in &WITNESSES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    // n − 1 = d · 2^s with d odd.
    let s = (n - 1).trailing_zeros();
    let d = (n - 1) >> s;
    'witness: for &a in &WITNESSES {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// The smallest prime `>= n`, if it fits in a `u64`.
///
/// Handy for sizing a table: `next_prime(100 * backends)` meets the paper's "M > 100·N" rule.
///
/// ```
/// assert_eq!(fp_maglev::next_prime(65536), Some(65537));
/// assert_eq!(fp_maglev::next_prime(655360), Some(655373));
/// ```
pub fn next_prime(n: u64) -> Option<u64> {
    (n..=u64::MAX).find(|&k| is_prime(k))
}

/// The largest prime `<= n`, if any.
pub fn prev_prime(n: u64) -> Option<u64> {
    (2..=n).rev().find(|&k| is_prime(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_a_sieve() {
        const LIMIT: usize = 200_000;
        let mut composite = vec![false; LIMIT];
        composite[0] = true;
        composite[1] = true;
        for i in 2..LIMIT {
            if !composite[i] {
                let mut j = i * i;
                while j < LIMIT {
                    composite[j] = true;
                    j += i;
                }
            }
        }
        for (n, &c) in composite.iter().enumerate() {
            assert_eq!(is_prime(n as u64), !c, "n = {n}");
        }
    }

    #[test]
    fn large_values() {
        // Known primes and strong pseudoprimes to small bases.
        assert!(is_prime(4_294_967_291)); // largest prime below 2^32
        assert!(is_prime(18_446_744_073_709_551_557)); // largest prime below 2^64
        assert!(is_prime(2_147_483_647)); // 2^31 − 1
        assert!(!is_prime(3_215_031_751)); // strong pseudoprime to bases 2, 3, 5, 7
        assert!(!is_prime(3_825_123_056_546_413_051)); // strong pseudoprime to bases 2..23
        assert!(!is_prime(4_294_967_297)); // 641 · 6700417
        assert!(!is_prime(u64::MAX));
    }

    #[test]
    fn neighbours() {
        assert_eq!(next_prime(0), Some(2));
        assert_eq!(next_prime(65537), Some(65537));
        assert_eq!(prev_prime(65536), Some(65521));
        assert_eq!(prev_prime(1), None);
        assert_eq!(next_prime(u64::MAX), None);
    }
}
