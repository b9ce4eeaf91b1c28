//! One node's own control plane, for clusters whose nodes run as separate processes: the single
//! writer of *this* node's FIB share and of its partition-table replica, fed with the cluster's
//! entry changes in one global order (the revision order of the store that holds them, e.g.
//! etcd). Sans-I/O: [`Member::set`] / [`Member::remove`] / [`Member::set_down`] are the events;
//! `service.rs` reads them from etcd.
//!
//! Each node applies every change to what it holds, in the order the in-process
//! [`Controller`](crate::Controller) uses for one node: the FIB insert before the partition-table
//! update, the FIB removal after it.
//!
//! | change of key k (owner A → B) | node A | node B | other nodes |
//! |---|---|---|---|
//! | ScaleBricks | table → B, then remove k from the FIB | insert k, then table → B | table → B |
//! | full duplication | FIB value → (B, port) | same | same |
//! | hash partitioning | k's home node: FIB value → (B, port) | — | — |
//!
//! Nodes do not apply a change at the same instant: for the moment between two nodes' updates a
//! frame may follow an old table. The data path then redirects it (a ScaleBricks node that no
//! longer holds a key forwards the frame by its own, newer, partition table, up to
//! [`MAX_HOPS`](crate::MAX_HOPS)) or drops it as unknown; once every node has applied the change,
//! every frame takes the new path.
//!
//! **Replicas agree.** Every node applies the same changes in the same order to a partition
//! table built with the cluster's seed, so every replica maps every stored key to its owner.
//! [`Member::digest`] summarises the entries applied (an order-independent hash of the
//! (key, owner, port) set): equal digests at equal revisions mean equal entries;
//! [`Member::verify`] checks, key by key, that this node's partition table and FIB share say what
//! the entries say. The bits of two replicas may differ (a node that started later built its
//! table from the entries at once instead of applying each change), never their answers for
//! stored keys.

use crate::controller::{check_entry, set_down};
use crate::stage::{hash_home, Tables};
use crate::{gpt_config, home_seed, node_fib, ClusterConfig, Error, Mode, NodeMemory, Update};
use fp_cuckoo::FibWriter;
use fp_setsep::Updater;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts of the changes a member applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    pub added: u64,
    pub moved: u64,
    pub repointed: u64,
    pub removed: u64,
    /// Changes that changed nothing (same entry again, removal of an absent key).
    pub unchanged: u64,
    /// Changes refused (a full FIB share, a partition-table failure, a bad entry).
    pub errors: u64,
}

/// One node's control state: its FIB share, its partition-table replica, the entries.
pub struct Member {
    id: u8,
    nodes: u8,
    mode: Mode,
    hash_seed: u64,
    entries: HashMap<u64, (u8, u16)>,
    fib: FibWriter,
    gpt: Option<Updater>,
    /// A reader of this node's replica (for memory figures and [`Member::verify`]).
    gpt_reader: Option<fp_setsep::SetSep>,
    down: Arc<AtomicU64>,
    digest: u64,
    stats: MemberStats,
}

/// The digest term of one entry.
fn term(key: u64, owner: u8, port: u16) -> u64 {
    fp_hash::splitmix64(key ^ fp_hash::splitmix64(((owner as u64) << 16 | port as u64) + 1))
}

impl Member {
    /// Node `id` of the cluster `cfg`, holding `entries` (key, owner, port; the last setting of a
    /// key wins): its control state and the tables its data path reads. Invalid entries fail.
    pub fn build(
        cfg: &ClusterConfig,
        id: u8,
        entries: &[(u64, u8, u16)],
    ) -> Result<(Member, Tables), Error> {
        cfg.validate()?;
        if id >= cfg.nodes {
            return Err(Error::NoSuchNode {
                node: id,
                nodes: cfg.nodes,
            });
        }
        let capacity = cfg.capacity.max(entries.len()).max(1);
        let (fib, reader) = node_fib(cfg, id, capacity)?;
        let mut m = Member {
            id,
            nodes: cfg.nodes,
            mode: cfg.mode,
            hash_seed: home_seed(cfg.seed),
            entries: HashMap::with_capacity(entries.len()),
            fib,
            gpt: None,
            gpt_reader: None,
            down: Arc::new(AtomicU64::new(0)),
            digest: 0,
            stats: MemberStats::default(),
        };
        for &(k, o, p) in entries {
            m.check(k, o, p)?;
            if let Some((po, pp)) = m.entries.insert(k, (o, p)) {
                m.digest = m.digest.wrapping_sub(term(k, po, pp));
            }
            m.digest = m.digest.wrapping_add(term(k, o, p));
        }
        let mut sorted: Vec<(u64, u8, u16)> =
            m.entries.iter().map(|(&k, &(o, p))| (k, o, p)).collect();
        sorted.sort_unstable_by_key(|e| e.0);
        for &(k, o, p) in &sorted {
            if let Some(v) = m.fib_value(k, o, p) {
                m.fib
                    .insert(k, v)
                    .map_err(|e| Error::Fib { node: id, error: e })?;
            }
        }
        let mut gpt = None;
        if cfg.mode == Mode::ScaleBricks {
            let keys: Vec<u64> = sorted.iter().map(|e| e.0).collect();
            let owners: Vec<u16> = sorted.iter().map(|e| e.1 as u16).collect();
            drop(sorted);
            let (up, table) = Updater::build(&gpt_config(cfg, capacity), &keys, &owners)?;
            m.gpt = Some(up);
            m.gpt_reader = Some(table.clone());
            gpt = Some(table);
        }
        let tables = Tables {
            fib: reader,
            gpt,
            hash_seed: m.hash_seed,
            down: m.down.clone(),
        };
        Ok((m, tables))
    }

    fn check(&self, key: u64, owner: u8, port: u16) -> Result<(), Error> {
        check_entry(self.nodes, key, owner, port)
    }

    /// What this node's FIB holds for the entry, if anything.
    fn fib_value(&self, key: u64, owner: u8, port: u16) -> Option<u16> {
        match self.mode {
            Mode::ScaleBricks => (owner == self.id).then_some(port),
            Mode::Duplicate => Some((owner as u16) << 8 | port),
            Mode::HashPartition => (hash_home(self.hash_seed, key, self.nodes) == self.id)
                .then_some((owner as u16) << 8 | port),
        }
    }

    fn count(&mut self, r: &Result<Update, Error>) {
        let s = &mut self.stats;
        match r {
            Ok(Update::Added) => s.added += 1,
            Ok(Update::Moved) => s.moved += 1,
            Ok(Update::Repointed) => s.repointed += 1,
            Ok(Update::Deleted) => s.removed += 1,
            Ok(Update::Unchanged | Update::Absent) => s.unchanged += 1,
            Err(_) => s.errors += 1,
        }
    }

    /// Apply "key → (owner, port)" (add, move or repoint). On error nothing changed here.
    pub fn set(&mut self, key: u64, owner: u8, port: u16) -> Result<Update, Error> {
        let r = self.set_inner(key, owner, port);
        self.count(&r);
        r
    }

    fn set_inner(&mut self, key: u64, owner: u8, port: u16) -> Result<Update, Error> {
        self.check(key, owner, port)?;
        let prev = self.entries.get(&key).copied();
        if prev == Some((owner, port)) {
            return Ok(Update::Unchanged);
        }
        let new = self.fib_value(key, owner, port);
        let old = prev.and_then(|(o, p)| self.fib_value(key, o, p));
        let id = self.id;
        if let Some(v) = new {
            self.fib
                .insert(key, v)
                .map_err(|e| Error::Fib { node: id, error: e })?;
        }
        if let Some(gpt) = self.gpt.as_mut() {
            if prev.map(|e| e.0) != Some(owner) {
                if let Err(e) = gpt.insert(key, owner as u16) {
                    // Undo the FIB change.
                    match (old, new) {
                        (Some(v), _) => {
                            let _ = self.fib.insert(key, v);
                        }
                        (None, Some(_)) => {
                            self.fib.remove(key);
                        }
                        (None, None) => {}
                    }
                    return Err(Error::Partition(e));
                }
            }
        }
        if old.is_some() && new.is_none() {
            self.fib.remove(key);
        }
        self.entries.insert(key, (owner, port));
        if let Some((o, p)) = prev {
            self.digest = self.digest.wrapping_sub(term(key, o, p));
        }
        self.digest = self.digest.wrapping_add(term(key, owner, port));
        Ok(match prev {
            None => Update::Added,
            Some((o, _)) if o != owner => Update::Moved,
            Some(_) => Update::Repointed,
        })
    }

    /// Delete `key`.
    pub fn remove(&mut self, key: u64) -> Result<Update, Error> {
        let r = self.remove_inner(key);
        self.count(&r);
        r
    }

    fn remove_inner(&mut self, key: u64) -> Result<Update, Error> {
        let Some(&(owner, port)) = self.entries.get(&key) else {
            return Ok(Update::Absent);
        };
        if self.fib_value(key, owner, port).is_some() {
            self.fib.remove(key);
        }
        if let Some(gpt) = self.gpt.as_mut() {
            gpt.remove(key).map_err(Error::Partition)?;
        }
        self.entries.remove(&key);
        self.digest = self.digest.wrapping_sub(term(key, owner, port));
        Ok(Update::Deleted)
    }

    /// Mark node `node` down (frames for it are dropped where they are) or up.
    pub fn set_down(&self, node: u8, down: bool) {
        set_down(&self.down, node, down);
    }

    /// Nodes marked down, bit `i` for node `i`.
    pub fn down_mask(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }

    /// The entry of `key`.
    pub fn get(&self, key: u64) -> Option<(u8, u16)> {
        self.entries.get(&key).copied()
    }

    /// Every entry (key, owner, port), in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u8, u16)> + '_ {
        self.entries.iter().map(|(&k, &(o, p))| (k, o, p))
    }

    /// Entries in the cluster.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the cluster has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// This node's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The changes applied, by kind.
    pub fn stats(&self) -> MemberStats {
        self.stats
    }

    /// An order-independent hash of the entries (key, owner, port) applied: nodes that applied the
    /// same entries have the same digest, however they got there.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Memory this node spends on its tables.
    pub fn memory(&self) -> NodeMemory {
        let fs = self.fib.stats();
        NodeMemory {
            fib_bytes: fs.bytes(),
            fib_entries: fs.len,
            fib_layout: fs.layout,
            gpt_bytes: self.gpt_reader.as_ref().map_or(0, |g| g.stats().bytes()),
        }
    }

    /// Check every entry against this node's tables: the partition table maps the key to its
    /// owner (ScaleBricks), and the FIB share holds exactly the entries it should, with their
    /// values. The first disagreement, if any.
    pub fn verify(&self) -> Result<(), String> {
        let gpt = self.gpt_reader.as_ref();
        let mut held = 0;
        for (&k, &(o, p)) in &self.entries {
            if let (Some(g), Mode::ScaleBricks) = (gpt, self.mode) {
                let got = g.get(k);
                if got != o as u16 {
                    return Err(format!(
                        "partition table maps {k:#014x} to node {got}, its owner is {o}"
                    ));
                }
            }
            let want = self.fib_value(k, o, p);
            let got = self.fib.get(k);
            if got != want {
                return Err(format!(
                    "FIB share of node {} holds {got:?} for {k:#014x}, expected {want:?}",
                    self.id
                ));
            }
            held += want.is_some() as usize;
        }
        if held != self.fib.len() {
            return Err(format!(
                "FIB share of node {} holds {} entries, expected {held}",
                self.id,
                self.fib.len()
            ));
        }
        Ok(())
    }
}
