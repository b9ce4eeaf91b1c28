//! Level 1: assign each bin of a block to one of its four candidate groups so that group sizes are
//! even.
//!
//! What matters is not the largest group but the total search work and the failure risk, both of
//! which grow about 2x per extra key in a group (see `search.rs`). So after a greedy start (bins in
//! decreasing size, each to its currently smallest candidate — the LPT rule) a few passes of local
//! search move single bins whenever that lowers `Σ 2^size` over the groups. The potential strictly
//! decreases with every move, so the passes terminate; they are capped anyway. Deterministic: ties go
//! to the lower bin index and the lower choice.

/// Most improvement passes.
const PASSES: usize = 6;

#[inline]
fn cost(k: u32) -> u64 {
    1u64 << k.min(62)
}

/// Assign bins (`counts[bin]` keys each) to groups. Writes `choice[bin]` (0..4) and the resulting
/// `load[group]`. `order` is scratch of at least `counts.len()` entries.
pub(crate) fn balance(
    counts: &[u16],
    cand: &[[u8; 4]],
    choice: &mut [u8],
    load: &mut [u32],
    order: &mut Vec<u16>,
) {
    let bins = counts.len();
    load.iter_mut().for_each(|l| *l = 0);
    order.clear();
    order.extend(0..bins as u16);
    // Decreasing size, then increasing bin index (stable sort).
    order.sort_by(|&x, &y| counts[y as usize].cmp(&counts[x as usize]));
    for &bin in order.iter() {
        let bin = bin as usize;
        let c = &cand[bin];
        let mut best = 0usize;
        for j in 1..4 {
            if load[c[j] as usize] < load[c[best] as usize] {
                best = j;
            }
        }
        choice[bin] = best as u8;
        load[c[best] as usize] += counts[bin] as u32;
    }
    for _ in 0..PASSES {
        let mut moved = false;
        for bin in 0..bins {
            let k = counts[bin] as u32;
            if k == 0 {
                continue;
            }
            let c = &cand[bin];
            let g = c[choice[bin] as usize] as usize;
            for (j, &g2) in c.iter().enumerate() {
                let g2 = g2 as usize;
                if g2 == g {
                    continue;
                }
                let before = cost(load[g]) + cost(load[g2]);
                let after = cost(load[g] - k) + cost(load[g2] + k);
                if after < before {
                    load[g] -= k;
                    load[g2] += k;
                    choice[bin] = j as u8;
                    moved = true;
                    break;
                }
            }
        }
        if !moved {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{geometry::Geometry, Config};

    #[test]
    fn loads_add_up_and_are_even() {
        let g = Geometry::new(&Config::new(1), 1 << 20).unwrap();
        let mut r = 1u64;
        let mut worst = 0;
        let mut hist = [0u32; 64];
        for _ in 0..2000 {
            let mut counts = vec![0u16; g.bins as usize];
            // 256 keys per block on average.
            for _ in 0..256 {
                r = fp_hash::splitmix64(r);
                counts[fp_hash::reduce(r, g.bins as u64) as usize] += 1;
            }
            let mut choice = vec![0u8; g.bins as usize];
            let mut load = vec![0u32; g.groups as usize];
            let mut order = vec![];
            balance(&counts, &g.cand, &mut choice, &mut load, &mut order);
            let mut check = vec![0u32; g.groups as usize];
            for (bin, &c) in choice.iter().enumerate() {
                check[g.cand[bin][c as usize] as usize] += counts[bin] as u32;
            }
            assert_eq!(check, load);
            assert_eq!(load.iter().sum::<u32>(), 256);
            worst = worst.max(*load.iter().max().unwrap());
            for &l in &load {
                hist[l as usize] += 1;
            }
        }
        // 16 keys per group on average; the balancing keeps every group of 2000 blocks small.
        assert!(worst <= 22, "largest group {worst}, histogram {hist:?}");
    }
}
