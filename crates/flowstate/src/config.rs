//! Table configuration and its validation.

use thiserror::Error;

/// From when an entry's lifetime is measured (§3.2, "Supporting different state deletion policies").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryFrom {
    /// The entry expires `timeout` after it was inserted, whatever traffic the flow sends (packet
    /// schedulers: per-flow state for a fixed window).
    Insertion,
    /// The entry expires `timeout` after the last packet of the flow that found it (Flowlet: a gap
    /// longer than the timeout ends the flowlet).
    LastPacket,
}

/// Entry expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// Lifetime in nanoseconds (> 0). The paper's default, and Flowlet's gap, is 50 us.
    pub timeout_ns: u64,
    /// What the lifetime is measured from.
    pub from: ExpiryFrom,
}

impl Default for Expiry {
    fn default() -> Self {
        Expiry {
            timeout_ns: 50_000,
            from: ExpiryFrom::LastPacket,
        }
    }
}

/// Which of the paper's guarantees the table enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ordering and full consistency (appendix A, Lemma 3.7): a packet reads or updates its flow's
    /// state only when every earlier packet of its ordering domain has left, so per-flow state updates
    /// happen exactly in arrival order. The default.
    Strict,
    /// Ordering and weak consistency, as the paper's Tofino implementation (§4): a packet that finds
    /// its state reads and updates it at once, then WAITs for its turn to leave. Packets still leave in
    /// order, but a later packet may update the state before an earlier one that is still waiting.
    Weak,
    /// No ordering arrays (the "w/o ordering" line of Fig. 9): a packet leaves as soon as it has a state.
    /// Transient-state counters still prevent two states for a flow (§3.3): the packet that will insert
    /// claims the flow's transient slot, as in the paper's main-text design.
    Unordered,
}

/// Configuration of a [`Table`](crate::Table).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Slots in each of the two cuckoo arrays t1 and t2 (the P4 code's `TABLE_SIZE`): the table holds
    /// up to `2 * slots_per_array` states. Any size ≥ 1 (indices use Lemire reduction).
    pub slots_per_array: usize,
    /// Cells of the SWAPPING and SWAPPED counter arrays (the TRANSIENT-STATES filter, §3.3/§3.6).
    pub transient_cells: usize,
    /// Cells of the ORDERING / PACKET-COUNTER / NEXT-PACKET arrays (§3.4). Flows that share a cell are
    /// kept in order with respect to each other too.
    pub ordering_cells: usize,
    /// Entry lifetime.
    pub expiry: Expiry,
    /// Guarantees enforced.
    pub mode: Mode,
    /// A data packet leaves (or is dropped, counted) within this many passes (≥ 2: a new flow's first
    /// packet needs one pass to find no state and one to insert it).
    pub max_passes: u16,
    /// A chain of swaps that displaces entries from pass to pass is cut after this many passes: the
    /// entry it still carries is evicted and reported ([`Stats::evictions`](crate::Stats)). 0 makes
    /// an insertion that would need a swap evict at once.
    pub max_swap_passes: u16,
    /// Hash seed for every array index. Use a secret one for untrusted traffic.
    pub seed: u64,
}

impl Default for Config {
    /// The paper's evaluation setup (§5): a 32K-entry cuckoo table (per array, as the P4 code's
    /// `TABLE_SIZE`), 64K-cell auxiliary arrays, 50 us expiry from the last packet.
    fn default() -> Self {
        Config {
            slots_per_array: 32 * 1024,
            transient_cells: 64 * 1024,
            ordering_cells: 64 * 1024,
            expiry: Expiry::default(),
            mode: Mode::Strict,
            max_passes: 32,
            max_swap_passes: 16,
            seed: 0x5357_4954_4348_524f,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// An array size is zero or does not fit the 32-bit indices.
    #[error("flowstate config: {field} = {value} is out of range (1 ..= 4294967295)")]
    Size {
        /// The field name.
        field: &'static str,
        /// The rejected value.
        value: usize,
    },
    /// The expiry timeout is zero.
    #[error("flowstate config: expiry.timeout_ns = 0; entries would expire as they are inserted")]
    ZeroTimeout,
    /// `max_passes` is below 2.
    #[error("flowstate config: max_passes = {0}; a new flow needs 2 passes (lookup, then insert)")]
    MaxPasses(u16),
}

impl Config {
    /// A configuration with `slots_per_array` slots per cuckoo array and the other fields default.
    pub fn with_slots(slots_per_array: usize) -> Self {
        Config {
            slots_per_array,
            ..Config::default()
        }
    }

    /// Check every field; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("slots_per_array", self.slots_per_array),
            ("transient_cells", self.transient_cells),
            ("ordering_cells", self.ordering_cells),
        ] {
            if value == 0 || value > u32::MAX as usize {
                return Err(ConfigError::Size { field, value });
            }
        }
        if self.expiry.timeout_ns == 0 {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.max_passes < 2 {
            return Err(ConfigError::MaxPasses(self.max_passes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        assert!(Config::default().validate().is_ok());
        let e = Config {
            ordering_cells: 0,
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("ordering_cells = 0"), "{e}");
        let e = Config {
            max_passes: 1,
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e, ConfigError::MaxPasses(1));
        let mut c = Config::default();
        c.expiry.timeout_ns = 0;
        assert_eq!(c.validate(), Err(ConfigError::ZeroTimeout));
    }
}
