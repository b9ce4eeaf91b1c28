//! The small trait that puts Maglev, Karger and rendezvous hashing behind one interface, so the
//! benchmark (and tests) can treat them alike.
//!
//! A method works in two steps. [`Method::prepare`] does everything that depends only on the
//! backend set — validation, canonical order, hashing names, building Karger's ring. The resulting
//! [`Prepared`] can then populate a lookup table for the whole set or for any subset of it (the
//! failure experiments of Fig 12 remove random backends 200 times per point and repopulate).
//! Every method fills the same kind of table: `M` slots, each naming a backend by its canonical
//! index, looked up with [`crate::Table::slot`].

use crate::backend::Canonical;
use crate::{Backend, Config, Error, Table};

/// A way to assign `M` lookup-table slots to backends.
pub trait Method: Send + Sync {
    /// State prepared for one backend set.
    type Prepared: Prepared;

    /// Short name used in benchmark output (`"maglev"`, `"karger"`, `"rendezvous"`).
    fn name(&self) -> &'static str;

    /// Validate and hash the backends (see [`Canonical::new`] for the validation rules).
    fn prepare(&self, cfg: &Config, backends: &[Backend]) -> Result<Self::Prepared, Error>;

    /// Build the table for all `backends`.
    fn build(&self, cfg: &Config, backends: &[Backend]) -> Result<Table, Error> {
        let p = self.prepare(cfg, backends)?;
        let entries = p.populate(&vec![true; p.canonical().len()])?;
        Ok(Table::from_parts(p.size(), p.canonical().clone(), entries))
    }
}

/// A method's state for one backend set.
pub trait Prepared: Send + Sync {
    /// The validated backends, in the canonical order that table entries index.
    fn canonical(&self) -> &Canonical;

    /// The table size `M`.
    fn size(&self) -> u32;

    /// Populate the table with only the backends whose `alive` flag is set (indexed canonically).
    /// The result is the table a fresh build over the alive backends would give, with entries
    /// still naming backends by their index in the full canonical list. Errors if none is alive.
    ///
    /// # Panics
    ///
    /// If `alive.len()` is not the number of backends (a caller bug, not bad input).
    fn populate(&self, alive: &[bool]) -> Result<Vec<u16>, Error>;

    /// Like [`Prepared::populate`], given `base = populate(all alive)`. Methods that can update a
    /// table incrementally (rendezvous: only the slots of dead backends change) override this; the
    /// result must equal `populate(alive)`, which tests check.
    fn populate_after_failure(&self, base: &[u16], alive: &[bool]) -> Result<Vec<u16>, Error> {
        let _ = base;
        self.populate(alive)
    }
}
