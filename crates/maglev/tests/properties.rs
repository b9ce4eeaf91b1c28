//! Property tests over random backend sets, against a literal model of Pseudocode 1.

use fp_maglev::{
    Backend, Canonical, Config, Karger, Maglev, Method, Permutation, Prepared, Rendezvous, Table,
};
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};

/// Pseudocode 1 exactly as printed, with the permutation matrix stored and `entry` starting at −1.
/// Turn order: backend `i`'s k-th turn at time k / w_i, ties by index (equal weights: the printed
/// round robin; see `round_robin_model`).
fn model(m: u32, perms: &[Permutation], weights: &[u32]) -> Vec<u16> {
    let n = perms.len();
    let m_us = m as usize;
    let permutation: Vec<Vec<usize>> = perms
        .iter()
        .map(|p| {
            (0..m as u64)
                .map(|j| ((p.offset as u64 + j * p.skip as u64) % m as u64) as usize)
                .collect()
        })
        .collect();
    let mut next = vec![0usize; n];
    let mut entry = vec![-1i64; m_us];
    let mut turns = vec![0u128; n];
    let mut filled = 0;
    loop {
        // The backend whose next turn time turns[i] / w[i] is smallest (first index on ties).
        let mut i = 0;
        for c in 1..n {
            if turns[c] * (weights[i] as u128) < turns[i] * (weights[c] as u128) {
                i = c;
            }
        }
        let mut c = permutation[i][next[i]];
        while entry[c] >= 0 {
            next[i] += 1;
            c = permutation[i][next[i]];
        }
        entry[c] = i as i64;
        next[i] += 1;
        turns[i] += 1;
        filled += 1;
        if filled == m_us {
            return entry.into_iter().map(|e| e as u16).collect();
        }
    }
}

/// Pseudocode 1 line by line (equal weights), indices and all.
#[allow(clippy::needless_range_loop)]
fn round_robin_model(m: u32, perms: &[Permutation]) -> Vec<u16> {
    let n = perms.len();
    let perm = |i: usize, j: usize| {
        ((perms[i].offset as u64 + j as u64 * perms[i].skip as u64) % m as u64) as usize
    };
    let mut next = vec![0usize; n];
    let mut entry = vec![-1i64; m as usize];
    let mut filled = 0;
    loop {
        for i in 0..n {
            let mut c = perm(i, next[i]);
            while entry[c] >= 0 {
                next[i] += 1;
                c = perm(i, next[i]);
            }
            entry[c] = i as i64;
            next[i] += 1;
            filled += 1;
            if filled == m as usize {
                return entry.into_iter().map(|e| e as u16).collect();
            }
        }
    }
}

/// A random backend set: 1..=max distinct names, weights 1..=max_w, and a prime size.
fn backends(max: usize, max_w: u32) -> impl Strategy<Value = (Vec<Backend>, Config)> {
    (
        prop::collection::btree_set("[a-z0-9.:-]{1,14}", 1..=max),
        prop::collection::vec(1..=max_w, max),
        0u64..3000,
        any::<u64>(),
    )
        .prop_map(
            |(names, ws, extra, seed): (BTreeSet<String>, Vec<u32>, u64, u64)| {
                let bs: Vec<Backend> = names
                    .into_iter()
                    .zip(ws)
                    .map(|(n, w)| Backend::weighted(n, w))
                    .collect();
                let m = fp_maglev::next_prime(bs.len() as u64 + extra).unwrap();
                (bs, Config::new(m, seed).unwrap())
            },
        )
}

fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = fp_hash::splitmix64(seed);
        v.swap(i, fp_hash::reduce(seed, i as u64 + 1) as usize);
    }
}

fn names_of(t: &Table) -> Vec<&str> {
    t.entries()
        .iter()
        .map(|&e| t.backends()[e as usize].name.as_str())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn matches_the_model((bs, cfg) in backends(40, 4)) {
        let t = Table::build(&cfg, &bs).unwrap();
        let perms: Vec<Permutation> =
            t.backends().iter().map(|b| Permutation::for_name(&cfg, &b.name)).collect();
        let weights: Vec<u32> = t.backends().iter().map(|b| b.weight).collect();
        prop_assert_eq!(t.entries(), &model(cfg.size(), &perms, &weights)[..]);
        // With equal weights the weighted schedule is the printed round robin.
        let unweighted: Vec<Backend> = bs.iter().map(|b| Backend::new(b.name.clone())).collect();
        let u = Table::build(&cfg, &unweighted).unwrap();
        prop_assert_eq!(u.entries(), &round_robin_model(cfg.size(), &perms)[..]);
    }

    #[test]
    fn full_and_balanced((bs, cfg) in backends(60, 6)) {
        let t = Table::build(&cfg, &bs).unwrap();
        let (m, n) = (cfg.size() as u128, bs.len() as u128);
        let w_sum: u128 = bs.iter().map(|b| b.weight as u128).sum();
        prop_assert_eq!(t.entries().len() as u128, m);
        prop_assert!(t.entries().iter().all(|&e| (e as u128) < n));
        for (c, b) in t.counts().into_iter().zip(t.backends()) {
            let (c, w) = (c as u128, b.weight as u128);
            prop_assert!(c >= 1, "{} has no slot", b.name);
            // (M − N)·w/W ≤ c ≤ M·w/W + 1, in integers.
            prop_assert!((m - n) * w <= c * w_sum, "{}: {} slots too few", b.name, c);
            prop_assert!(c * w_sum <= m * w + w_sum, "{}: {} slots too many", b.name, c);
        }
        // Equal weights: ⌊M/N⌋ or ⌈M/N⌉ each.
        let u = Table::build(&cfg, &bs.iter().map(|b| Backend::new(b.name.clone())).collect::<Vec<_>>()).unwrap();
        let counts = u.counts();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        prop_assert!(hi - lo <= 1);
        prop_assert_eq!(*lo as u128, m / n);
    }

    #[test]
    fn order_independent((bs, cfg) in backends(50, 3), s in any::<u64>()) {
        let t = Table::build(&cfg, &bs).unwrap();
        let mut shuffled = bs.clone();
        shuffle(&mut shuffled, s);
        let u = Table::build(&cfg, &shuffled).unwrap();
        prop_assert_eq!(t.entries(), u.entries());
        prop_assert_eq!(t.digest(), u.digest());
        for i in 0..t.backends().len() as u16 {
            prop_assert_eq!(&shuffled[u.input_index(i)], &u.backends()[i as usize]);
            prop_assert_eq!(u.index_of(&u.backends()[i as usize].name), Some(i));
        }
        for h in [0u64, 7, u64::MAX, s] {
            prop_assert_eq!(t.lookup_backend(h), u.lookup_backend(h));
        }
    }

    #[test]
    fn digest_sees_every_change((bs, cfg) in backends(30, 3), pick in any::<prop::sample::Index>()) {
        let t = Table::build(&cfg, &bs).unwrap();
        let i = pick.index(bs.len());
        let mut heavier = bs.clone();
        heavier[i].weight += 1;
        prop_assert_ne!(t.digest(), Table::build(&cfg, &heavier).unwrap().digest());
        let mut renamed = bs.clone();
        renamed[i].name.push('~');
        if !bs.iter().any(|b| b.name == renamed[i].name) {
            prop_assert_ne!(t.digest(), Table::build(&cfg, &renamed).unwrap().digest());
        }
        let other_seed = Config::new(cfg.size() as u64, cfg.seed() ^ 1).unwrap();
        let t2 = Table::build(&other_seed, &bs).unwrap();
        prop_assert_eq!(t.digest() == t2.digest(), t.entries() == t2.entries());
    }

    #[test]
    fn removal_diff_and_subset_populate(
        (bs, cfg) in backends(40, 3),
        dead_bits in any::<u64>(),
    ) {
        prop_assume!(bs.len() >= 2);
        let n = bs.len();
        // Kill a random non-empty proper subset (canonical indices).
        let canon = Canonical::new(&cfg, &bs).unwrap();
        let mut alive: Vec<bool> = (0..n).map(|i| dead_bits >> (i % 64) & 1 == 0).collect();
        if alive.iter().all(|&a| a) { alive[0] = false; }
        if alive.iter().all(|&a| !a) { alive[n - 1] = true; }
        let survivors: Vec<Backend> = canon.backends().iter().zip(&alive)
            .filter(|(_, &a)| a).map(|(b, _)| b.clone()).collect();

        // Maglev: subset populate equals a fresh build over the survivors (by name), and diff
        // accounts for every slot of the dead.
        let full = Table::build(&cfg, &bs).unwrap();
        let after = Table::build(&cfg, &survivors).unwrap();
        let p = Maglev.prepare(&cfg, &bs).unwrap();
        let sub = p.populate(&alive).unwrap();
        let sub_names: Vec<&str> = sub.iter().map(|&e| canon.backends()[e as usize].name.as_str()).collect();
        prop_assert_eq!(&sub_names, &names_of(&after));
        let d = full.diff(&after).unwrap();
        let dead_slots: u32 = full.counts().iter().zip(&alive).filter(|(_, &a)| !a).map(|(c, _)| c).sum();
        prop_assert_eq!(d.from_removed, dead_slots);
        let recount = full.entries().iter().zip(after.entries()).filter(|(a, b)| {
            full.backends()[**a as usize].name != after.backends()[**b as usize].name
        }).count() as u32;
        prop_assert_eq!(d.changed(), recount);
        prop_assert_eq!(full.diff(&full).unwrap().changed(), 0);
        // Reverse direction: the same slots changed; none of the old owners is gone.
        let back = after.diff(&full).unwrap();
        prop_assert_eq!(back.changed(), d.changed());
        prop_assert_eq!(back.from_removed, 0);

        // Karger and rendezvous: incremental == full repopulation == fresh build; survivors keep
        // every slot they had (their guarantee).
        fn check<M: Method>(m: &M, cfg: &Config, bs: &[Backend], survivors: &[Backend], alive: &[bool]) -> Result<(), TestCaseError> {
            let p = m.prepare(cfg, bs).unwrap();
            let base = p.populate(&vec![true; alive.len()]).unwrap();
            let inc = p.populate_after_failure(&base, alive).unwrap();
            let again = p.populate(alive).unwrap();
            prop_assert_eq!(&inc, &again);
            for (b, a) in base.iter().zip(&inc) {
                if alive[*b as usize] { prop_assert_eq!(b, a); } else { prop_assert!(alive[*a as usize]); }
            }
            let fresh = m.build(cfg, survivors).unwrap();
            let names: Vec<&str> = inc.iter().map(|&e| p.canonical().backends()[e as usize].name.as_str()).collect();
            prop_assert_eq!(names, names_of(&fresh));
            Ok(())
        }
        check(&Karger { vnodes: 16 }, &cfg, &bs, &survivors, &alive)?;
        check(&Rendezvous, &cfg, &bs, &survivors, &alive)?;
    }

    #[test]
    fn lookup_is_entry_of_slot((bs, cfg) in backends(20, 2), hashes in prop::collection::vec(any::<u64>(), 0..100)) {
        let t = Table::build(&cfg, &bs).unwrap();
        let m = cfg.size() as u64;
        let mut batch = vec![0u16; hashes.len()];
        t.lookup_batch(&hashes, &mut batch);
        for (&h, &b) in hashes.iter().zip(&batch) {
            let slot = ((h ^ (h >> 32)) as u32 as u64 % m) as usize;
            prop_assert_eq!(t.slot(h), slot);
            t.prefetch(h);
            prop_assert_eq!(t.lookup(h), t.entries()[slot]);
            prop_assert_eq!(b, t.entries()[slot]);
            prop_assert_eq!(&bs[t.lookup_input(h)], t.lookup_backend(h));
        }
    }
}

#[test]
fn baselines_spread_weights_proportionally() {
    // Weighted Karger and rendezvous are approximate; just check the heavier backend wins more.
    let cfg = Config::new(20_011, 1).unwrap();
    let bs: Vec<Backend> = (0..20)
        .map(|i| Backend::weighted(format!("w{i}"), 1 + (i % 2) * 3))
        .collect();
    for t in [
        Karger::default().build(&cfg, &bs).unwrap(),
        Rendezvous.build(&cfg, &bs).unwrap(),
    ] {
        let mut by_w: HashMap<u32, u32> = HashMap::new();
        for (c, b) in t.counts().iter().zip(t.backends()) {
            *by_w.entry(b.weight).or_default() += c;
        }
        // 10 backends of weight 4 vs 10 of weight 1: expect 80 % / 20 %.
        let heavy = by_w[&4] as f64 / cfg.size() as f64;
        assert!((0.74..0.86).contains(&heavy), "heavy share {heavy}");
    }
}
