//! Building one block: place its keys in bins, balance bins over groups (level 1), search every
//! group's hash indices (level 2), write the words. Also the group-local rebuild used by updates.

use crate::balance::balance;
use crate::geometry::{write_bits, Geometry, KeyHash, MAX_GROUP};
use crate::search::{search, Probe};

/// Bins a repair may move out of a failed group (each costs a full search of the receiving group).
const REPAIR_MOVES: usize = 12;

/// Counters of a construction or an update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SolveStats {
    /// Groups solved (including those sent to the fallback table).
    pub groups: u64,
    /// Groups whose search failed: their keys are in the fallback table.
    pub fallback_groups: u64,
    /// Keys placed in the fallback table.
    pub fallback_keys: u64,
    /// Hash indices tried, summed over all (group, value bit) searches.
    pub tries: u64,
    /// Largest group seen.
    pub max_group: u32,
}

impl SolveStats {
    pub(crate) fn add(&mut self, o: &SolveStats) {
        self.groups += o.groups;
        self.fallback_groups += o.fallback_groups;
        self.fallback_keys += o.fallback_keys;
        self.tries += o.tries;
        self.max_group = self.max_group.max(o.max_group);
    }
}

/// The `(index, array)` pair of each value bit of a group.
pub(crate) type Records = [(u32, u32); 16];

/// Reusable scratch space for building blocks and groups (no allocation per block once warm).
#[derive(Default)]
pub(crate) struct Solver {
    kh: Vec<KeyHash>,
    counts: Vec<u16>,
    choice: Vec<u8>,
    load: Vec<u32>,
    order: Vec<u16>,
    gstart: Vec<u32>,
    members: Vec<u32>,
    a: Vec<u32>,
    b: Vec<u32>,
    vals: Vec<u16>,
    m: Vec<u32>,
    pub stats: SolveStats,
}

impl Solver {
    /// Build one block from its keys into `out` (`geo.wpb` words, overwritten). Keys of groups with
    /// no solution are appended to `fallback`.
    pub(crate) fn build_block(
        &mut self,
        geo: &Geometry,
        keys: &[(u64, u16)],
        out: &mut [u64],
        fallback: &mut Vec<(u64, u16)>,
    ) {
        out.iter_mut().for_each(|w| *w = 0);
        let (bins, groups) = (geo.bins as usize, geo.groups as usize);
        self.kh.clear();
        self.kh.extend(keys.iter().map(|&(k, _)| geo.hash(k)));
        self.counts.clear();
        self.counts.resize(bins, 0);
        for kh in &self.kh {
            self.counts[kh.bin as usize] += 1;
        }
        self.choice.clear();
        self.choice.resize(bins, 0);
        self.load.clear();
        self.load.resize(groups, 0);
        balance(
            &self.counts,
            &geo.cand,
            &mut self.choice,
            &mut self.load,
            &mut self.order,
        );
        for (bin, &c) in self.choice.iter().enumerate() {
            write_bits(out, 2 * bin as u32, 2, c as u64);
        }
        // Counting sort of key indices by group.
        self.gstart.clear();
        self.gstart.resize(groups + 1, 0);
        let mut acc = 0u32;
        for g in 0..groups {
            self.gstart[g] = acc;
            acc += self.load[g];
        }
        self.gstart[groups] = acc;
        self.members.clear();
        self.members.resize(keys.len(), 0);
        {
            let mut next: [u32; 256] = [0; 256];
            next[..groups].copy_from_slice(&self.gstart[..groups]);
            for (i, kh) in self.kh.iter().enumerate() {
                let g = geo.cand[kh.bin as usize][self.choice[kh.bin as usize] as usize] as usize;
                self.members[next[g] as usize] = i as u32;
                next[g] += 1;
            }
        }
        let mut failed: [u8; 256] = [0; 256];
        let mut nfailed = 0;
        for g in 0..groups {
            let (s, e) = (self.gstart[g] as usize, self.gstart[g + 1] as usize);
            self.a.clear();
            self.b.clear();
            self.vals.clear();
            for &i in &self.members[s..e] {
                let kh = &self.kh[i as usize];
                self.a.push(kh.a);
                self.b.push(kh.b);
                self.vals.push(keys[i as usize].1);
            }
            match self.solve_prepared(geo) {
                Some(recs) => write_records(geo, out, g as u32, &recs),
                None => {
                    failed[nfailed] = g as u8;
                    nfailed += 1;
                }
            }
        }
        // Repair only isolated failures: when many groups of a block fail, the setting is too tight
        // and moving bins between failing groups only burns time.
        let repairable = nfailed * 4 <= groups;
        for &g in &failed[..nfailed] {
            let g = g as u32;
            if !(repairable && self.repair(geo, keys, out, g, &failed[..nfailed])) {
                write_fallback(geo, out, g);
                self.stats.fallback_groups += 1;
                for (i, kh) in self.kh.iter().enumerate() {
                    if geo.cand[kh.bin as usize][self.choice[kh.bin as usize] as usize] as u32 == g
                    {
                        self.stats.fallback_keys += 1;
                        fallback.push(keys[i]);
                    }
                }
            }
        }
    }

    /// A group without a solution: move its bins, smallest first, to other candidate groups (which
    /// must still have a solution with the bin added) until the group itself has one. Returns
    /// whether it does; moved bins stay moved either way (the group shrinks).
    fn repair(
        &mut self,
        geo: &Geometry,
        keys: &[(u64, u16)],
        out: &mut [u64],
        g: u32,
        failed: &[u8],
    ) -> bool {
        let mut bins: Vec<(u16, u32)> = (0..geo.bins)
            .filter(|&bin| {
                self.counts[bin as usize] > 0
                    && geo.cand[bin as usize][self.choice[bin as usize] as usize] as u32 == g
            })
            .map(|bin| (self.counts[bin as usize], bin))
            .collect();
        bins.sort_unstable();
        for &(_, bin) in bins.iter().take(REPAIR_MOVES) {
            for j in 0..4u8 {
                let g2 = geo.cand[bin as usize][j as usize] as u32;
                if g2 == g || failed.contains(&(g2 as u8)) {
                    continue;
                }
                if let Some(recs2) = self.solve_subset(geo, keys, g2, Some(bin)) {
                    self.choice[bin as usize] = j;
                    write_bits(out, 2 * bin, 2, j as u64);
                    write_records(geo, out, g2, &recs2);
                    if let Some(recs) = self.solve_subset(geo, keys, g, None) {
                        write_records(geo, out, g, &recs);
                        return true;
                    }
                    break;
                }
            }
        }
        false
    }

    /// Solve the keys of group `g` under the current choices, plus the keys of `extra_bin`.
    fn solve_subset(
        &mut self,
        geo: &Geometry,
        keys: &[(u64, u16)],
        g: u32,
        extra_bin: Option<u32>,
    ) -> Option<Records> {
        self.a.clear();
        self.b.clear();
        self.vals.clear();
        for (i, kh) in self.kh.iter().enumerate() {
            let kg = geo.cand[kh.bin as usize][self.choice[kh.bin as usize] as usize] as u32;
            if kg == g || Some(kh.bin) == extra_bin {
                self.a.push(kh.a);
                self.b.push(kh.b);
                self.vals.push(keys[i].1);
            }
        }
        self.solve_prepared(geo)
    }

    /// Solve one group whose keys are given as `(level-2 hash, value)`; `None` if some value bit has
    /// no index.
    pub(crate) fn solve_group(
        &mut self,
        geo: &Geometry,
        keys: impl Iterator<Item = (KeyHash, u16)>,
    ) -> Option<Records> {
        self.a.clear();
        self.b.clear();
        self.vals.clear();
        for (kh, v) in keys {
            self.a.push(kh.a);
            self.b.push(kh.b);
            self.vals.push(v);
        }
        self.solve_prepared(geo)
    }

    fn solve_prepared(&mut self, geo: &Geometry) -> Option<Records> {
        let n = self.a.len();
        self.stats.groups += 1;
        self.stats.max_group = self.stats.max_group.max(n as u32);
        if n > MAX_GROUP {
            return None;
        }
        let mut recs: Records = [(0, 0); 16];
        for v in 0..geo.vbits {
            self.m.clear();
            self.m.extend(
                self.vals
                    .iter()
                    .map(|&x| 0u32.wrapping_sub(((x >> v) & 1) as u32)),
            );
            let end = if v == 0 {
                geo.sentinel
            } else {
                geo.sentinel + 1
            };
            let p = Probe {
                a: &self.a,
                b: &self.b,
                m: &self.m,
            };
            match search(&p, geo.ly, end) {
                Some((i, arr)) => {
                    self.stats.tries += i as u64 + 1;
                    recs[v as usize] = (i, arr);
                }
                None => {
                    self.stats.tries += end as u64;
                    return None;
                }
            }
        }
        Some(recs)
    }
}

/// Write a solved group's records.
pub(crate) fn write_records(geo: &Geometry, out: &mut [u64], g: u32, recs: &Records) {
    for v in 0..geo.vbits {
        let (i, arr) = recs[v as usize];
        write_bits(
            out,
            geo.rec_off(g, v),
            geo.rec_bits,
            i as u64 | ((arr as u64) << geo.xbits),
        );
    }
}

/// Mark a group as living in the fallback table.
pub(crate) fn write_fallback(geo: &Geometry, out: &mut [u64], g: u32) {
    for v in 0..geo.vbits {
        let rec = if v == 0 { geo.sentinel as u64 } else { 0 };
        write_bits(out, geo.rec_off(g, v), geo.rec_bits, rec);
    }
}
