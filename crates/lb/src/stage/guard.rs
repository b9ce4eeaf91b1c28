//! The SYN-flood guard: embryonic entries, table pressure and the new-connection rate limit (see
//! the module doc of `stage`). Step 3 consults it for each SYN that misses; housekeeping
//! publishes its mode.

/// A connection table is under pressure from this share of its slots on.
pub const PRESSURE: f64 = 0.9;
/// Under pressure, an insert's cuckoo path search visits at most this many buckets: the key's
/// two and their eight alternates (one level of moves, each a cache line).
pub const PRESSURE_SEARCH_NODES: usize = 10;
/// New entries are counted against `balancer.new_conn_rate` over windows of this many ms.
const RATE_WINDOW_MS: u32 = 100;

/// What the SYN-flood guard is doing (the `flowplane_syn_guard_mode` gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GuardMode {
    /// SYNs that miss are recorded as embryonic entries.
    Normal = 0,
    /// The worker recorded `new_conn_rate` new entries in the current window: SYNs that miss are
    /// balanced without an entry.
    RateLimit = 1,
    /// A connection table is under pressure: SYNs that miss are balanced without an entry and
    /// other new entries may replace embryonic ones.
    Pressure = 2,
}

impl GuardMode {
    /// From the gauge's value.
    pub fn from_gauge(v: u64) -> GuardMode {
        match v {
            1 => GuardMode::RateLimit,
            2 => GuardMode::Pressure,
            _ => GuardMode::Normal,
        }
    }

    /// Name on the status page.
    pub fn name(self) -> &'static str {
        match self {
            GuardMode::Normal => "normal",
            GuardMode::RateLimit => "rate limit",
            GuardMode::Pressure => "table pressure",
        }
    }
}

/// The SYN-flood guard's state in one worker.
pub(super) struct Guard {
    /// New entries per rate window before SYNs bypass the table (0: no limit).
    per_window: u32,
    /// Start of the current rate window, and new entries recorded in it.
    window_ms: u32,
    pub(super) recorded: u32,
    /// Entries (IPv4, IPv6) from which a table is under pressure.
    pub(super) pressure: (usize, usize),
    /// Lifetime of embryonic entries.
    pub(super) syn_ms: u32,
}

impl Guard {
    pub(super) fn new(b: &crate::config::BalancerSpec, slots: (usize, usize)) -> Guard {
        let mut g = Guard {
            per_window: 0,
            window_ms: 0,
            recorded: 0,
            pressure: (
                (slots.0 as f64 * PRESSURE) as usize,
                (slots.1 as f64 * PRESSURE) as usize,
            ),
            syn_ms: 0,
        };
        g.configure(b);
        g
    }

    /// Take the reloadable settings.
    pub(super) fn configure(&mut self, b: &crate::config::BalancerSpec) {
        self.syn_ms = b.syn_timeout_ms;
        self.per_window = if b.new_conn_rate == 0 {
            0
        } else {
            (b.new_conn_rate * RATE_WINDOW_MS as u64 / 1000).clamp(1, u32::MAX as u64) as u32
        };
    }

    /// Whether the current window's allowance of new entries is used up.
    #[inline]
    pub(super) fn over_rate(&mut self, now_ms: u32) -> bool {
        if self.per_window == 0 {
            return false;
        }
        if now_ms.wrapping_sub(self.window_ms) >= RATE_WINDOW_MS {
            self.window_ms = now_ms;
            self.recorded = 0;
        }
        self.recorded >= self.per_window
    }
}
