//! Updates: the keys are kept by the updater (SetSep itself stores none), so changing, adding or
//! removing one key touches only its group.
//!
//! An insert or value change, in order of cost:
//!
//! 1. **Absorbed** — for every value bit, the group's current function already gives the key the
//!    right bit, or the key's array position is used by no other key of the group, so flipping that
//!    array bit fixes it. One block rewrite, no search (about half of the 1-bit updates).
//! 2. **Rebuilt** — the value bits that conflict are searched again over the group's keys (the paper's
//!    "rebuild only its group").
//! 3. **Moved** — if no index exists, the key's bin is moved to another of its candidate groups,
//!    which is searched again with the bin's keys added; the old group keeps its function, which is
//!    still right for its remaining keys.
//! 4. **Fallback** — else the whole group goes to the exact fallback table.
//!
//! A removal changes no block (a key outside the set may map to anything); if the key's group is in
//! the fallback table the key leaves it, and the group is solved again so it can leave the fallback.
//!
//! Every change is applied to all replicas (one per node of a cluster) block by block under the
//! version protocol of `table.rs`; a replica's readers see each block either before or after.

use crate::block::{write_fallback, write_records, Records, SolveStats, Solver};
use crate::build::build_blocks;
use crate::geometry::{position, read_bits, write_bits, Geometry, KeyHash};
use crate::sync::{Arc, Ordering};
use crate::table::{FallbackWriter, SetSep, Shared};
use crate::{Config, Error};
use fp_cuckoo::GeneralMap;
use std::collections::HashMap;

/// What an update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The key already had this value (or a removed key was absent): nothing written.
    Unchanged,
    /// The group's functions were patched by flipping array bits, no search.
    Absorbed,
    /// Some value bits of the group were searched again.
    Rebuilt,
    /// The key's bin moved to another candidate group, which was searched again.
    Moved,
    /// The key's group is (now) in the fallback table.
    Fallback,
    /// The key was removed from the set.
    Removed,
}

/// Counts of the updates an [`Updater`] made, by kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct UpdateStats {
    pub unchanged: u64,
    pub absorbed: u64,
    pub rebuilt: u64,
    pub moved: u64,
    pub fallback: u64,
    pub removed: u64,
    /// Search work (indices tried, groups solved) of updates and of the initial build.
    pub solve: SolveStats,
}

struct Replica {
    shared: Arc<Shared>,
    fb: FallbackWriter,
}

/// The single writer of a SetSep table and of any number of replicas of it.
///
/// It keeps every key and value (grouped by block) so that a change can rebuild one group. In a
/// ScaleBricks cluster the control plane owns it and each node reads its own replica.
pub struct Updater {
    geo: Geometry,
    keys: Vec<Vec<(u64, u16)>>,
    words: Vec<u64>,
    fallback: HashMap<u64, u16>,
    fb_capacity: usize,
    fb_seed: u64,
    pages: fp_mem::PagePolicy,
    replicas: Vec<Replica>,
    solver: Solver,
    members: Vec<(KeyHash, u16, u64)>,
    len: usize,
    stats: UpdateStats,
}

impl Updater {
    /// Build a table from `keys[i] → values[i]` (duplicate keys with equal values are merged) and
    /// return its writer and a first reader. `cfg.capacity` sizes the table for later inserts.
    pub fn build(cfg: &Config, keys: &[u64], values: &[u16]) -> Result<(Updater, SetSep), Error> {
        let capacity = cfg.capacity.unwrap_or(0).max(keys.len());
        let geo = Geometry::new(cfg, capacity)?;
        let built = build_blocks(&geo, keys, values, cfg.threads, cfg.pages, true)?;
        let mut by_block = built.keys_by_block.expect("asked for keys");
        // Merge duplicates; reject conflicting ones.
        let mut len = 0;
        for list in &mut by_block {
            list.sort_unstable_by_key(|&(k, _)| k);
            let mut w = 0;
            for r in 0..list.len() {
                if w > 0 && list[w - 1].0 == list[r].0 {
                    if list[w - 1].1 != list[r].1 {
                        return Err(Error::ConflictingValues { key: list[r].0 });
                    }
                    continue;
                }
                list[w] = list[r];
                w += 1;
            }
            list.truncate(w);
            len += w;
        }
        let mut words = vec![0u64; geo.blocks * geo.wpb];
        for b in 0..geo.blocks {
            built
                .shared
                .read_block_plain(b, &mut words[b * geo.wpb..(b + 1) * geo.wpb]);
        }
        let mut fallback = HashMap::new();
        for &(k, v) in &built.fallback {
            fallback.insert(k, v);
        }
        let fb_capacity = (2 * fallback.len() + capacity / 2048).max(1024);
        let fb_seed = cfg.seed;
        let shared = built.shared;
        shared.len.store(len, Ordering::Relaxed);
        let mut up = Updater {
            geo,
            keys: by_block,
            words,
            fallback,
            fb_capacity,
            fb_seed,
            pages: cfg.pages,
            replicas: Vec::new(),
            solver: Solver::default(),
            members: Vec::new(),
            len,
            stats: UpdateStats {
                solve: built.stats,
                ..Default::default()
            },
        };
        let first = up.attach(shared)?;
        Ok((up, first))
    }

    /// A new, independent copy of the table (its own memory), kept up to date by every later update.
    pub fn replica(&mut self) -> Result<SetSep, Error> {
        let shared = Shared::new(self.geo.clone(), self.pages)?;
        for b in 0..self.geo.blocks {
            shared.write_block(b, &self.words[b * self.geo.wpb..(b + 1) * self.geo.wpb]);
        }
        shared.len.store(self.len, Ordering::Relaxed);
        self.attach(shared)
    }

    fn attach(&mut self, shared: Shared) -> Result<SetSep, Error> {
        let cfg = crate::fallback_config(self.fb_capacity, self.fb_seed);
        let (mut fb, reader) = GeneralMap::<u64, u16>::new(&cfg)?;
        for (&k, &v) in &self.fallback {
            fb.insert(k, v).map_err(|_| Error::FallbackFull {
                capacity: self.fb_capacity,
            })?;
        }
        let shared = Arc::new(shared);
        self.replicas.push(Replica {
            shared: shared.clone(),
            fb,
        });
        Ok(SetSep {
            shared,
            fallback: Some(reader),
        })
    }

    /// The value of `key` if it is in the set (exact: the updater keeps the keys).
    pub fn get(&self, key: u64) -> Option<u16> {
        let blk = self.geo.hash(key).blk;
        self.keys[blk]
            .iter()
            .find(|&&(k, _)| k == key)
            .map(|&(_, v)| v)
    }

    /// Keys in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys in the fallback table.
    pub fn fallback_len(&self) -> usize {
        self.fallback.len()
    }

    /// Counts of updates by kind, and search work.
    pub fn stats(&self) -> UpdateStats {
        self.stats
    }

    /// Replicas kept up to date (including the first reader's table).
    pub fn replicas(&self) -> usize {
        self.replicas.len()
    }

    /// Add `key` with `value`, or change its value. Touches only the key's group (or, if that
    /// group has no solution, moves the key's bin to another of its candidate groups).
    pub fn insert(&mut self, key: u64, value: u16) -> Result<Change, Error> {
        if value as u32 >= 1 << self.geo.vbits {
            return Err(Error::ValueTooWide {
                key,
                value,
                bits: self.geo.vbits,
            });
        }
        let kh = self.geo.hash(key);
        let blk = kh.blk;
        let list = &mut self.keys[blk];
        let old = match list.iter().position(|&(k, _)| k == key) {
            Some(i) => {
                let o = list[i].1;
                if o == value {
                    self.stats.unchanged += 1;
                    return Ok(Change::Unchanged);
                }
                list[i].1 = value;
                Some(o)
            }
            None => {
                list.push((key, value));
                None
            }
        };
        let r = self.place(kh, key, value);
        match &r {
            Ok(_) => {
                if old.is_none() {
                    self.len += 1;
                    for r in &self.replicas {
                        r.shared.len.store(self.len, Ordering::Relaxed);
                    }
                }
            }
            Err(_) => {
                // Nothing was published: undo the key list change.
                let list = &mut self.keys[blk];
                let i = list
                    .iter()
                    .position(|&(k, _)| k == key)
                    .expect("just added");
                match old {
                    Some(o) => list[i].1 = o,
                    None => {
                        list.swap_remove(i);
                    }
                }
            }
        }
        r
    }

    /// Remove `key` from the set; returns its value if it was present.
    pub fn remove(&mut self, key: u64) -> Result<Option<u16>, Error> {
        let kh = self.geo.hash(key);
        let blk = kh.blk;
        let list = &mut self.keys[blk];
        let Some(i) = list.iter().position(|&(k, _)| k == key) else {
            return Ok(None);
        };
        let (_, v) = list.swap_remove(i);
        self.len -= 1;
        for r in &self.replicas {
            r.shared.len.store(self.len, Ordering::Relaxed);
        }
        self.stats.removed += 1;
        let wpb = self.geo.wpb;
        let g = self
            .geo
            .group_of(&self.words[blk * wpb..(blk + 1) * wpb], kh.bin);
        if self
            .geo
            .is_fallback(&self.words[blk * wpb..(blk + 1) * wpb], g)
        {
            self.fallback_remove(&[key]);
            // The smaller group may have a solution now.
            self.collect_members(blk, g, None);
            if let Some(recs) = self.solve_members() {
                let mut w = self.block_copy(blk);
                write_records(&self.geo, &mut w, g, &recs);
                self.publish(blk, &w);
                let keys: Vec<u64> = self.members.iter().map(|m| m.2).collect();
                self.fallback_remove(&keys);
            }
        }
        Ok(Some(v))
    }

    fn block_copy(&self, blk: usize) -> Vec<u64> {
        self.words[blk * self.geo.wpb..(blk + 1) * self.geo.wpb].to_vec()
    }

    /// Gather the members of group `g` of block `blk` (with the bin `extra_bin` counted in as well,
    /// whatever its current group).
    fn collect_members(&mut self, blk: usize, g: u32, extra_bin: Option<u32>) {
        let wpb = self.geo.wpb;
        let words = &self.words[blk * wpb..(blk + 1) * wpb];
        self.members.clear();
        for &(k, v) in &self.keys[blk] {
            let kh = self.geo.hash(k);
            if self.geo.group_of(words, kh.bin) == g || Some(kh.bin) == extra_bin {
                self.members.push((kh, v, k));
            }
        }
    }

    fn solve_members(&mut self) -> Option<Records> {
        let it = self.members.iter().map(|m| (m.0, m.1));
        let r = self.solver.solve_group(&self.geo, it);
        self.stats.solve.add(&self.solver.stats);
        self.solver.stats = SolveStats::default();
        r
    }

    /// Make the tables give `key` (hash `kh`) the value `value`; the key lists already hold it.
    fn place(&mut self, kh: KeyHash, key: u64, value: u16) -> Result<Change, Error> {
        let blk = kh.blk;
        let geo = &self.geo;
        let mut w = self.block_copy(blk);
        let g = geo.group_of(&w, kh.bin);
        if geo.is_fallback(&w, g) {
            self.collect_members(blk, g, None);
            if let Some(recs) = self.solve_members() {
                write_records(&self.geo, &mut w, g, &recs);
                self.publish(blk, &w);
                let keys: Vec<u64> = self.members.iter().map(|m| m.2).collect();
                self.fallback_remove(&keys);
                self.stats.rebuilt += 1;
                return Ok(Change::Rebuilt);
            }
            self.fallback_upsert(&[(key, value)])?;
            self.stats.fallback += 1;
            return Ok(Change::Fallback);
        }
        // 1. Try to absorb the change by flipping array bits.
        self.collect_members(blk, g, None);
        let geo = &self.geo;
        let xmask = geo.xmask();
        let mut recs: Records = [(0, 0); 16];
        let mut need = 0u32; // value bits that need a search
        for v in 0..geo.vbits {
            let rec = read_bits(&w, geo.rec_off(g, v), geo.rec_bits);
            let (idx, mut arr) = ((rec & xmask) as u32, (rec >> geo.xbits) as u32);
            let p = position(kh.a, kh.b, idx, geo.ly);
            let want = ((value >> v) & 1) as u32;
            if (arr >> p) & 1 != want {
                let shared = self
                    .members
                    .iter()
                    .any(|m| m.2 != key && position(m.0.a, m.0.b, idx, geo.ly) == p);
                if shared {
                    need |= 1 << v;
                } else {
                    arr ^= 1 << p;
                }
            }
            recs[v as usize] = (idx, arr);
        }
        if need == 0 {
            write_records(geo, &mut w, g, &recs);
            self.publish(blk, &w);
            self.stats.absorbed += 1;
            return Ok(Change::Absorbed);
        }
        // 2. Search the group again.
        if let Some(new) = self.solve_members() {
            write_records(&self.geo, &mut w, g, &new);
            self.publish(blk, &w);
            self.stats.rebuilt += 1;
            return Ok(Change::Rebuilt);
        }
        // 3. Move the key's bin to another candidate group.
        let cur = read_bits(&w, 2 * kh.bin, 2) as usize;
        for j in 0..4usize {
            let g2 = self.geo.cand[kh.bin as usize][j] as u32;
            if j == cur || g2 == g || self.geo.is_fallback(&w, g2) {
                continue;
            }
            self.collect_members(blk, g2, Some(kh.bin));
            if let Some(new) = self.solve_members() {
                write_bits(&mut w, 2 * kh.bin, 2, j as u64);
                write_records(&self.geo, &mut w, g2, &new);
                self.publish(blk, &w);
                self.stats.moved += 1;
                return Ok(Change::Moved);
            }
        }
        // 4. The group goes to the fallback table: fill it first, then publish the sentinel.
        self.collect_members(blk, g, None);
        let entries: Vec<(u64, u16)> = self.members.iter().map(|m| (m.2, m.1)).collect();
        self.fallback_upsert(&entries)?;
        write_fallback(&self.geo, &mut w, g);
        self.publish(blk, &w);
        self.stats.fallback += 1;
        Ok(Change::Fallback)
    }

    fn publish(&mut self, blk: usize, w: &[u64]) {
        let wpb = self.geo.wpb;
        self.words[blk * wpb..(blk + 1) * wpb].copy_from_slice(w);
        for r in &self.replicas {
            r.shared.write_block(blk, w);
        }
    }

    fn fallback_upsert(&mut self, entries: &[(u64, u16)]) -> Result<(), Error> {
        let new = entries
            .iter()
            .filter(|(k, _)| !self.fallback.contains_key(k))
            .count();
        // Stay well below the cuckoo table's capacity so inserts do not fail half-way.
        if (self.fallback.len() + new) * 10 > self.fb_capacity * 9 {
            return Err(Error::FallbackFull {
                capacity: self.fb_capacity,
            });
        }
        for &(k, v) in entries {
            self.fallback.insert(k, v);
            for r in &mut self.replicas {
                r.fb.insert(k, v).map_err(|_| Error::FallbackFull {
                    capacity: self.fb_capacity,
                })?;
            }
        }
        Ok(())
    }

    fn fallback_remove(&mut self, keys: &[u64]) {
        for &k in keys {
            if self.fallback.remove(&k).is_some() {
                for r in &mut self.replicas {
                    r.fb.remove(k);
                }
            }
        }
    }
}
