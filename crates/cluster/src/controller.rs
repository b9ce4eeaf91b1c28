//! The control plane: the single writer of every node's FIB share and partition table replica.
//!
//! It keeps the authoritative entry list (key → owner node, external port) and applies each change
//! to the tables in an order that never leaves a known key without a node that can forward it:
//!
//! * **add** (ScaleBricks): insert into the owner's FIB, then into the partition table (all replicas);
//! * **move** A → B: insert into B's FIB, point every partition table at B, remove from A's FIB
//!   (frames already on their way to A are redirected by A, see `stage.rs`);
//! * **delete**: remove from the owner's FIB, then from the partition table's key set (SetSep keeps
//!   mapping the key somewhere, and that node drops it as unknown).
//!
//! When a call returns, the update is complete on every node: a frame that enters the cluster after
//! that takes the new path. Full duplication writes every node's FIB; hash partitioning writes the
//! key's home node's FIB.

use crate::stage::hash_home;
use crate::{Error, Mode};
use fp_cuckoo::{FibWriter, InsertError};
use fp_setsep::Updater;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a control-plane call changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Update {
    /// The entry already had this owner and port.
    Unchanged,
    /// A new entry.
    Added,
    /// The entry moved to another owner.
    Moved,
    /// Same owner, new port.
    Repointed,
    /// The entry was deleted.
    Deleted,
    /// There was no such entry.
    Absent,
}

/// The control plane of a cluster.
pub struct Controller {
    pub(crate) mode: Mode,
    pub(crate) nodes: u8,
    pub(crate) hash_seed: u64,
    pub(crate) entries: HashMap<u64, (u8, u16)>,
    pub(crate) fibs: Vec<FibWriter>,
    pub(crate) gpt: Option<Updater>,
    pub(crate) down: Arc<AtomicU64>,
}

fn fib_err(node: u8) -> impl Fn(InsertError) -> Error {
    move |e| Error::Fib { node, error: e }
}

impl Controller {
    /// The entry of `key`.
    pub fn get(&self, key: u64) -> Option<(u8, u16)> {
        self.entries.get(&key).copied()
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Mark node `node` down (or up again): every node drops frames for it where they are
    /// (`drop_owner_down`) instead of sending them over the interconnect.
    pub fn set_down(&self, node: u8, down: bool) {
        set_down(&self.down, node, down);
    }

    /// The partition table's writer (ScaleBricks).
    pub fn partition_table(&self) -> Option<&Updater> {
        self.gpt.as_ref()
    }

    /// FIB value stored for an entry under this mode.
    fn fib_value(&self, owner: u8, port: u16) -> u16 {
        match self.mode {
            Mode::ScaleBricks => port,
            _ => ((owner as u16) << 8) | port,
        }
    }

    pub(crate) fn check(&self, key: u64, owner: u8, port: u16) -> Result<(), Error> {
        check_entry(self.nodes, key, owner, port)
    }

    /// Add `key` with its owner node and external port, or move / repoint it. Returns once every
    /// node's tables reflect the change.
    pub fn set(&mut self, key: u64, owner: u8, port: u16) -> Result<Update, Error> {
        self.check(key, owner, port)?;
        let prev = self.entries.get(&key).copied();
        if prev == Some((owner, port)) {
            return Ok(Update::Unchanged);
        }
        let v = self.fib_value(owner, port);
        match self.mode {
            Mode::ScaleBricks => {
                self.fibs[owner as usize]
                    .insert(key, v)
                    .map_err(fib_err(owner))?;
                let gpt = self
                    .gpt
                    .as_mut()
                    .expect("ScaleBricks has a partition table");
                if let Err(e) = gpt.insert(key, owner as u16) {
                    // Undo the FIB change: nothing else was touched.
                    match prev {
                        Some((o, p)) if o == owner => {
                            let _ = self.fibs[owner as usize].insert(key, p);
                        }
                        _ => {
                            self.fibs[owner as usize].remove(key);
                        }
                    }
                    return Err(Error::Partition(e));
                }
                if let Some((o, _)) = prev {
                    if o != owner {
                        self.fibs[o as usize].remove(key);
                    }
                }
            }
            Mode::Duplicate => {
                for n in 0..self.nodes {
                    if let Err(e) = self.fibs[n as usize].insert(key, v) {
                        // Restore the nodes already written.
                        for m in 0..n {
                            match prev {
                                Some((o, p)) => {
                                    let old = ((o as u16) << 8) | p;
                                    let _ = self.fibs[m as usize].insert(key, old);
                                }
                                None => {
                                    self.fibs[m as usize].remove(key);
                                }
                            }
                        }
                        return Err(Error::Fib { node: n, error: e });
                    }
                }
            }
            Mode::HashPartition => {
                let h = hash_home(self.hash_seed, key, self.nodes);
                self.fibs[h as usize].insert(key, v).map_err(fib_err(h))?;
            }
        }
        self.entries.insert(key, (owner, port));
        Ok(match prev {
            None => Update::Added,
            Some((o, _)) if o != owner => Update::Moved,
            Some(_) => Update::Repointed,
        })
    }

    /// Delete `key`.
    pub fn remove(&mut self, key: u64) -> Result<Update, Error> {
        let Some((owner, _)) = self.entries.remove(&key) else {
            return Ok(Update::Absent);
        };
        match self.mode {
            Mode::ScaleBricks => {
                self.fibs[owner as usize].remove(key);
                self.gpt
                    .as_mut()
                    .expect("ScaleBricks has a partition table")
                    .remove(key)
                    .map_err(Error::Partition)?;
            }
            Mode::Duplicate => {
                for f in &mut self.fibs {
                    f.remove(key);
                }
            }
            Mode::HashPartition => {
                let h = hash_home(self.hash_seed, key, self.nodes);
                self.fibs[h as usize].remove(key);
            }
        }
        Ok(Update::Deleted)
    }
}

/// Set or clear node `node`'s bit in a down mask.
pub(crate) fn set_down(mask: &AtomicU64, node: u8, down: bool) {
    if node < 64 {
        if down {
            mask.fetch_or(1 << node, Ordering::Relaxed);
        } else {
            mask.fetch_and(!(1 << node), Ordering::Relaxed);
        }
    }
}

/// Whether an entry fits a cluster of `nodes` nodes: a 48-bit key, an existing owner, a port the
/// FIB encoding holds.
pub(crate) fn check_entry(nodes: u8, key: u64, owner: u8, port: u16) -> Result<(), Error> {
    if key > fp_cuckoo::COMPACT_MAX_KEY {
        return Err(Error::KeyTooWide { key });
    }
    if owner >= nodes {
        return Err(Error::NoSuchNode { node: owner, nodes });
    }
    if port > 0xFE {
        return Err(Error::PortTooLarge { port });
    }
    Ok(())
}
