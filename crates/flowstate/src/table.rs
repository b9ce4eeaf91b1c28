//! The Switcharoo arrays and the processing of one packet in one pass.
//!
//! # The arrays ("registers")
//!
//! | array | cells | indexed by | paper |
//! |---|---|---|---|
//! | `t1`, `t2` | `slots_per_array` each | `h1(key)`, `h2(key)` | the cuckoo table; per slot a key, a timestamp and a value (§3.2; in the P4 code five registers per table) |
//! | `swapped` | `transient_cells` | `hts(key)` | SWAPPED (§3.6): swaps that have landed |
//! | `swapping` | `transient_cells` | `hts(key)` | SWAPPING (§3.6): entries that went into transit; plus the pass until which one of them may still land |
//! | `ord` | `ordering_cells` | `hord(key)` | PACKET-COUNTER and NEXT-PACKET (§3.4); ORDERING is their difference, plus the pass in which the head of the cell was last seen |
//!
//! The three counter arrays are interleaved in memory (one 16-byte cell per index, see `Aux`), and
//! when `transient_cells == ordering_cells` (the default) `hord = hts`, so a packet that misses
//! finds all its counters in one cache line. Logically they stay separate registers.
//!
//! A slot's key and timestamp are one register group and its value another: as in the Tofino code,
//! where the key, value and timestamp are separate registers, the key group is visited first (stages 1-2)
//! and the value group last (stages 6-7), after the ordering decision. They share one memory slot only
//! for locality.
//!
//! # One pass of one packet
//!
//! Every packet visits the arrays in the same order, touching each at most once (the paper's
//! single-element, single-register and register-dependency constraints, §3.1):
//!
//! 1. `t1` key/timestamp — LOOKUP: compare; INSERT/SWAP: write the carried entry, take out the live
//!    entry that was there.
//! 2. `t2` key/timestamp — LOOKUP: compare (only if `t1` missed); INSERT/SWAP: write the entry taken
//!    out of `t1`, take out the live entry that was there (it will need another pass: a swap).
//! 3. `swapped` — a landed swap adds one; a packet that missed reads it.
//! 4. `swapping` — a new swap adds one and sets its deadline; a packet that missed compares it with
//!    `swapped` (busy: the flow's state may be in transit, so do not insert; §3.3, Lemmas 3.5-3.6).
//! 5. `ord` — assign sequence numbers, decide whether this packet is the next to leave (§3.4,
//!    Lemmas A.1, 3.3), whether it may insert (Lemma 3.8), and advance NEXT-PACKET when it leaves.
//! 6. / 7. value of `t1` / `t2` — a packet that may read its state (it is the next to leave, Lemma 3.7)
//!    reads and updates it here, and leaves in the same pass.
//!
//! So a packet's work in a pass is bounded (at most two table slots, two counters and one ordering
//! cell), whatever the length of the cuckoo path: a path longer than one pass continues in later
//! passes as a SWAP packet that carries the displaced entry.
//!
//! # Operations (the paper's `p.op`)
//!
//! * **New** — a packet's first pass (the paper's "non-recirculated packet", `Q_n`).
//! * **LOOKUP** — a recirculated packet that has not read its state yet: it looks it up again.
//! * **INSERT** — the packet found no state and no transient state, and is the next packet of its
//!   ordering cell to leave: it inserts the flow's state into `t1` and leaves.
//! * **WAIT** — [`Mode::Weak`] only: the packet read its state in an earlier pass and waits for its turn.
//! * **SWAP** — a control packet (not a data packet) carrying an entry displaced from `t2`, which it
//!   inserts into `t1` in the next pass (displacing further entries, possibly spawning another SWAP).
//! * **SWAPPED** — in the Tofino code, the report a SWAP sends to the second pipe after landing so it
//!   increments SWAPPED. Here stage 3 of the SWAP's own pass does it ([`SwapOutcome::Landed`]).
//!
//! # The pass discipline and the recirculation limits (termination, with drops)
//!
//! A recirculated packet must be processed in the very next pass ("next pass or never"); a packet
//! processed later is dropped as [`DropReason::Late`] (a SWAP that is late evicts its entry). The
//! [`Engine`](crate::Engine) never makes a packet late; tests do, to model a recirculation port that
//! drops. Two rules then bound every wait, even when packets and swaps are dropped:
//!
//! * **Transient deadline.** Every entry put in transit (a swap, or an INSERT's claim in
//!   [`Mode::Unordered`]) lands in the next pass or never. `swapping` records that pass; once it has
//!   passed, `swapping != swapped` can only mean a dropped swap, and the first packet to see it resets
//!   `swapping := swapped`. This is the paper's "reset TRANSIENT-STATES after a threshold" (§3.5) made
//!   safe: it never erases the count of a swap that may still land, so it cannot create a second state.
//! * **Ordering heartbeat.** The packet whose sequence number equals NEXT-PACKET (the head of its
//!   ordering cell) refreshes the cell's `stamp` every pass. A live head is processed every pass, so a
//!   stamp two passes old means the head was dropped: the next packet to see it skips that one number
//!   (`next += 1`). Only a dead head is ever skipped, so skipping never reorders live packets and never
//!   lets two packets of a flow insert.
//! * **Packet limit.** A data packet still in the table after `max_passes` passes is dropped (the head
//!   advances NEXT-PACKET as it goes; a non-head leaves a gap the heartbeat rule closes). A swap chain
//!   longer than `max_swap_passes` evicts the entry it carries and reports it.
//!
//! The real Tofino code instead sends a WAIT packet out after 10 loops even if it is out of turn, and
//! zeroes both transient counters after 20 loops of an INSERT; both can break ordering or create a
//! second state. See docs/flowstate.md for the comparison.
use crate::config::{Config, ConfigError, ExpiryFrom, Mode};
use crate::key::FlowKey;
use core::mem;

/// What a network function does with a flow's state. The table calls it at the value stage, only
/// for the packet allowed to read the state (in [`Mode::Strict`]: the next packet of its ordering cell).
pub trait FlowFn<K> {
    /// The per-flow state stored in the table.
    type Value: Copy + Default;
    /// Per-packet data carried through recirculation (arrival time, length, a handle to the buffer).
    type Meta: Copy;
    /// What a packet leaves with (an output port, a verdict).
    type Out: Copy + Default;
    /// The flow has no state: make the state to insert, and this packet's output.
    fn create(&mut self, key: &K, meta: &Self::Meta, now: u64) -> (Self::Value, Self::Out);
    /// The flow's state exists: read and update it, and give this packet's output.
    fn update(
        &mut self,
        key: &K,
        value: &mut Self::Value,
        meta: &Self::Meta,
        now: u64,
    ) -> Self::Out;
}

const EMPTY: u64 = u64::MAX;

/// A flow's entry: key, timestamp (insertion or last packet, per [`ExpiryFrom`]) and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<K, V> {
    /// The flow.
    pub key: K,
    /// Time (ns) from which the entry's lifetime runs.
    pub stamp: u64,
    /// The state.
    pub value: V,
}

/// One bucket of `t1` or `t2`. Aligned to 32 bytes so a slot never straddles two cache lines: a
/// 16-byte key with an 8-byte value (the Flowlet state) fills exactly 32 bytes; larger entries round
/// up to 64.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Slot<K, V> {
    key: K,
    stamp: u64, // EMPTY: free
    value: V,
}

/// One cell of the per-flow counter arrays. SWAPPING (`swapping`, `deadline`), SWAPPED (`swapped`)
/// and the ordering counters (`pc`, `next`, `stamp`) are separate registers — a packet accesses each at
/// most once per pass, and a SWAP packet touches SWAPPED at one cell and SWAPPING at another — but
/// they sit side by side in memory so a packet that misses finds all of them in one cache line.
///
/// * `swapping`: entries of this cell that went into transit (SWAPPING); `deadline`: the pass in which
///   the last of them lands or is lost.
/// * `swapped`: entries of this cell that landed or expired in transit (SWAPPED).
/// * `pc` / `next`: PACKET-COUNTER and NEXT-PACKET; ORDERING (packets in flight) is `pc - next`;
///   `stamp`: the pass in which the cell's head was last seen. 16-bit counters, as the P4 code.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Aux {
    swapping: u16,
    swapped: u16,
    deadline: u32,
    pc: u16,
    next: u16,
    stamp: u32,
}

const _: () = assert!(mem::size_of::<Aux>() == 16);

/// Most packets one ordering cell may have in flight (16-bit sequence numbers compared as `i16`).
const MAX_IN_FLIGHT: u16 = 0x7fff;

/// The array indices of one flow, computed once per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Idx {
    pub(crate) t1: u32,
    pub(crate) t2: u32,
    pub(crate) tr: u32,
    pub(crate) ord: u32,
}

/// What a data packet will do in its next pass (the paper's `p.op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// First pass.
    New,
    /// Look the state up again.
    Lookup,
    /// Insert the flow's state.
    Insert,
    /// Holds its output; waits for its turn ([`Mode::Weak`]).
    Wait,
}

/// A data packet in the table: the flow key, the caller's metadata and the table's own metadata.
#[derive(Clone, Copy, Debug)]
pub struct DataPacket<K, M, O> {
    /// The flow.
    pub key: K,
    /// Caller's per-packet data, returned when the packet leaves.
    pub meta: M,
    /// Time the packet (re-)enters: its arrival time, or for a recirculated packet in an interleaved
    /// schedule the time it comes back. Used by the [`Engine`](crate::Engine) to order a pass.
    pub at: u64,
    pub(crate) idx: Idx,
    op: Op,
    seq: u16,
    passes: u16,
    due: u32,
    out: O,
}

impl<K, M, O> DataPacket<K, M, O> {
    /// The operation of the packet's next pass.
    pub fn op(&self) -> Op {
        self.op
    }
    /// Passes done so far.
    pub fn passes(&self) -> u16 {
        self.passes
    }
    /// Sequence number in its ordering cell (meaningful once it has recirculated).
    pub fn seq(&self) -> u16 {
        self.seq
    }
    /// The pass in which it must be processed next (low 32 bits of the table's pass counter).
    pub fn due(&self) -> u32 {
        self.due
    }
}

/// A SWAP control packet: an entry in transit from `t2` to `t1`.
#[derive(Clone, Copy, Debug)]
pub struct SwapPacket<K, V> {
    /// The entry it carries.
    pub entry: Entry<K, V>,
    /// Time it re-enters (see [`DataPacket::at`]).
    pub at: u64,
    idx: Idx,
    hops: u16,
    due: u32,
}

impl<K, V> SwapPacket<K, V> {
    /// Which pass of its chain this is (1 for the swap spawned by an insertion).
    pub fn hops(&self) -> u16 {
        self.hops
    }
    /// The pass in which it must be processed.
    pub fn due(&self) -> u32 {
        self.due
    }
}

/// Why a data packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// It reached `max_passes` without leaving.
    PassLimit,
    /// It came back later than the pass after its last one (the recirculation "port" lost it).
    Late,
    /// The recirculation queue was full ([`Engine`](crate::Engine)).
    RecircOverflow,
    /// Its ordering cell already had the maximum number of packets in flight.
    OrderingFull,
    /// An internal invariant did not hold (never expected; counted in [`Stats::anomalies`]).
    Anomaly,
}

/// The result of one data packet's pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<O> {
    /// The packet leaves with this output.
    Exit(O),
    /// The packet must be processed again in the next pass.
    Recirculate,
    /// The packet is dropped.
    Drop(DropReason),
}

/// What a SWAP packet's pass did with its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapOutcome {
    /// Placed in `t1` (SWAPPED incremented); it may have displaced another entry (see `spawned`).
    Landed,
    /// The entry expired while in transit: discarded (SWAPPED incremented).
    Expired,
    /// Processed after its pass: the entry is evicted (reported in `evicted`), counters untouched.
    Late,
    /// `t1` already held a live state for the key (never expected; counted as an anomaly).
    Duplicate,
}

/// The result of one pass of one packet, with its side effects.
#[derive(Clone, Copy, Debug)]
pub struct Step<R, K, V> {
    /// What happened to the packet.
    pub result: R,
    /// A SWAP packet spawned by this pass, to be processed in the next pass.
    pub spawned: Option<SwapPacket<K, V>>,
    /// A live entry that was evicted (its swap chain hit `max_swap_passes`, or its swap came late).
    pub evicted: Option<Entry<K, V>>,
}

/// Where a pass puts its side effects: the SWAP packet it spawned and the entry it evicted. The
/// [`Engine`](crate::Engine) pushes spawned swaps straight into its recirculation queue; [`Step`]
/// collects them for callers that drive the table by hand.
pub trait Effects<K, V> {
    /// A SWAP packet to process in the next pass.
    fn spawned(&mut self, s: SwapPacket<K, V>);
    /// A live entry that was evicted (chain too long, or its swap came late).
    fn evicted(&mut self, e: Entry<K, V>);
}

impl<R, K, V> Effects<K, V> for Step<R, K, V> {
    fn spawned(&mut self, s: SwapPacket<K, V>) {
        self.spawned = Some(s);
    }
    fn evicted(&mut self, e: Entry<K, V>) {
        self.evicted = Some(e);
    }
}

/// Per-table counters (plain integers: one table belongs to one worker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data packets admitted.
    pub packets: u64,
    /// Data packet passes (first passes included).
    pub passes: u64,
    /// Data packets that left.
    pub exits: u64,
    /// States created (INSERTs).
    pub inserts: u64,
    /// Lookups that found the state in `t1` / `t2`.
    pub hits_t1: u64,
    /// See `hits_t1`.
    pub hits_t2: u64,
    /// Data packets sent to another pass.
    pub recirculations: u64,
    /// Of those, because their state was (possibly) in transit.
    pub transient_waits: u64,
    /// Of those, because an earlier packet of their ordering cell was still in flight.
    pub order_waits: u64,
    /// SWAP packets spawned (a displacement that needed another pass).
    pub swaps: u64,
    /// SWAP passes processed.
    pub swap_passes: u64,
    /// Live entries evicted (swap chain too long, or swap late).
    pub evictions: u64,
    /// Of the evictions, swaps that came late.
    pub swaps_late: u64,
    /// Expired entries overwritten by an insertion or a swap.
    pub expired_reclaimed: u64,
    /// Entries that expired while in transit.
    pub expired_in_transit: u64,
    /// Transient counters reset after a lost swap or claim.
    pub transient_resets: u64,
    /// Sequence numbers skipped because their packet was lost.
    pub order_skips: u64,
    /// Drops: `max_passes` reached.
    pub drops_pass_limit: u64,
    /// Drops: processed after their pass.
    pub drops_late: u64,
    /// Drops: recirculation queue full ([`Engine`](crate::Engine)).
    pub drops_overflow: u64,
    /// Drops: ordering cell full.
    pub drops_ordering_full: u64,
    /// Drops: an internal invariant did not hold.
    pub drops_anomaly: u64,
    /// Internal invariant violations (must stay 0).
    pub anomalies: u64,
}

impl Stats {
    /// All data-packet drops.
    pub fn drops(&self) -> u64 {
        self.drops_pass_limit
            + self.drops_late
            + self.drops_overflow
            + self.drops_ordering_full
            + self.drops_anomaly
    }
    /// Record a drop decided outside the table (the engine's queue overflow).
    pub(crate) fn count_drop(&mut self, r: DropReason) {
        match r {
            DropReason::PassLimit => self.drops_pass_limit += 1,
            DropReason::Late => self.drops_late += 1,
            DropReason::RecircOverflow => self.drops_overflow += 1,
            DropReason::OrderingFull => self.drops_ordering_full += 1,
            DropReason::Anomaly => self.drops_anomaly += 1,
        }
    }
}

/// Where a lookup found the state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Found {
    None,
    T1,
    T2,
}

enum Place<K, V> {
    Done(Option<Entry<K, V>>),
    Duplicate,
}

/// Which array an entry sits in (for inspection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Array {
    /// The first cuckoo array.
    T1,
    /// The second cuckoo array.
    T2,
}

/// The Switcharoo flow-state table.
pub struct Table<K, V> {
    t1: Vec<Slot<K, V>>,
    t2: Vec<Slot<K, V>>,
    aux: Vec<Aux>,
    n_tr: usize,
    n_ord: usize,
    same_aux_hash: bool,
    seed: u64,
    seed2: u64,
    seed_ord: u64,
    timeout: u64,
    refresh: bool,
    mode: Mode,
    max_passes: u16,
    max_swap_passes: u16,
    pass: u64,
    stats: Stats,
    cfg: Config,
}

#[inline(always)]
fn live(stamp: u64, now: u64, timeout: u64) -> bool {
    stamp != EMPTY && now.saturating_sub(stamp) < timeout
}

#[inline(always)]
fn reduce32(h: u64, n: usize) -> u32 {
    fp_hash::reduce(h, n as u64) as u32
}

impl<K: FlowKey + Default, V: Copy + Default> Table<K, V> {
    /// An empty table.
    pub fn new(cfg: &Config) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let empty = Slot {
            key: K::default(),
            stamp: EMPTY,
            value: V::default(),
        };
        let s = cfg.seed;
        Ok(Table {
            t1: vec![empty; cfg.slots_per_array],
            t2: vec![empty; cfg.slots_per_array],
            aux: vec![Aux::default(); cfg.transient_cells.max(cfg.ordering_cells)],
            n_tr: cfg.transient_cells,
            n_ord: cfg.ordering_cells,
            same_aux_hash: cfg.transient_cells == cfg.ordering_cells,
            seed: s,
            seed2: fp_hash::splitmix64(s ^ 0x7432),
            seed_ord: fp_hash::splitmix64(s ^ 0x6f72),
            timeout: cfg.expiry.timeout_ns,
            refresh: cfg.expiry.from == ExpiryFrom::LastPacket,
            mode: cfg.mode,
            max_passes: cfg.max_passes,
            max_swap_passes: cfg.max_swap_passes,
            pass: 0,
            stats: Stats::default(),
            cfg: cfg.clone(),
        })
    }

    /// The configuration the table was built with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// Start the next pass. Every packet recirculated in this pass must be processed in the next one.
    #[inline]
    pub fn begin_pass(&mut self) {
        self.pass += 1;
    }

    /// The current pass number.
    pub fn pass(&self) -> u64 {
        self.pass
    }

    #[inline(always)]
    fn pass32(&self) -> u32 {
        self.pass as u32
    }

    /// The four array indices of `key`. `h1` is the key's pinned 64-bit hash; a second 64-bit value
    /// `h2 = mum(h1 ^ seed2, C)` (one folded multiply) gives `t2`'s index from its high bits and the
    /// counters' index from its low bits. Lemire reduction uses the high bits of its argument, so the
    /// rotation makes the two indices depend on disjoint halves of `h2`.
    #[inline(always)]
    pub(crate) fn indices(&self, key: &K) -> Idx {
        let h = key.hash64(self.seed);
        let h2 = fp_hash::mum(h ^ self.seed2, 0x9E37_79B9_7F4A_7C15);
        let tr = reduce32(h2.rotate_left(32), self.n_tr);
        Idx {
            t1: reduce32(h, self.t1.len()),
            t2: reduce32(h2, self.t2.len()),
            tr,
            // With equal sizes the transient and ordering counters of a flow share a cell (and a
            // cache line); flows that collide in one then collide in the other, which only makes
            // the (already conservative) filters agree.
            ord: if self.same_aux_hash {
                tr
            } else {
                reduce32(
                    fp_hash::mum(h ^ self.seed_ord, 0xC2B2_AE3D_27D4_EB4F),
                    self.n_ord,
                )
            },
        }
    }

    /// A new packet, ready for its first pass.
    #[inline]
    pub fn admit<M, O: Default>(&mut self, key: K, meta: M, at: u64) -> DataPacket<K, M, O> {
        self.stats.packets += 1;
        DataPacket {
            idx: self.indices(&key),
            key,
            meta,
            at,
            op: Op::New,
            seq: 0,
            passes: 0,
            due: 0,
            out: O::default(),
        }
    }

    /// Hint the cache lines this packet's next pass will touch.
    #[inline(always)]
    pub fn prefetch<M, O>(&self, p: &DataPacket<K, M, O>) {
        fp_hash::prefetch_read(&self.t1[p.idx.t1 as usize]);
        match p.op {
            Op::New | Op::Lookup => {
                fp_hash::prefetch_read(&self.t2[p.idx.t2 as usize]);
                fp_hash::prefetch_read(&self.aux[p.idx.tr as usize]);
            }
            _ => {}
        }
        if !self.same_aux_hash && self.mode != Mode::Unordered {
            fp_hash::prefetch_read(&self.aux[p.idx.ord as usize]);
        }
    }

    /// Hint the cache lines a swap's next pass will touch.
    #[inline(always)]
    pub fn prefetch_swap(&self, s: &SwapPacket<K, V>) {
        fp_hash::prefetch_read(&self.t1[s.idx.t1 as usize]);
        fp_hash::prefetch_read(&self.aux[s.idx.tr as usize]);
    }

    // ---- stages 1-2 ----------------------------------------------------------------------------

    /// LOOKUP on the key registers of t1, then (if it missed) t2. A hit refreshes the timestamp when
    /// entries expire from the last packet; a swap never does (§3.5: a loop of swaps ends because the
    /// entries it moves age).
    #[inline(always)]
    fn find(&mut self, key: &K, idx: Idx, now: u64) -> Found {
        let timeout = self.timeout;
        let s = &mut self.t1[idx.t1 as usize];
        if s.key == *key && live(s.stamp, now, timeout) {
            if self.refresh {
                s.stamp = s.stamp.max(now);
            }
            self.stats.hits_t1 += 1;
            return Found::T1;
        }
        let s = &mut self.t2[idx.t2 as usize];
        if s.key == *key && live(s.stamp, now, timeout) {
            if self.refresh {
                s.stamp = s.stamp.max(now);
            }
            self.stats.hits_t2 += 1;
            return Found::T2;
        }
        Found::None
    }

    /// INSERT/SWAP on the key registers: write `e` into `t1[i1]`; a live entry there moves to its slot
    /// in `t2`; a live entry there is returned (it needs another pass).
    #[inline(always)]
    fn place(&mut self, e: Entry<K, V>, i1: u32, now: u64) -> Place<K, V> {
        let timeout = self.timeout;
        let s1 = &mut self.t1[i1 as usize];
        let live1 = live(s1.stamp, now, timeout);
        if live1 && s1.key == e.key {
            return Place::Duplicate;
        }
        let reclaimed1 = !live1 && s1.stamp != EMPTY;
        let old = mem::replace(
            s1,
            Slot {
                key: e.key,
                stamp: e.stamp,
                value: e.value,
            },
        );
        if reclaimed1 {
            self.stats.expired_reclaimed += 1;
        }
        if !live1 {
            return Place::Done(None);
        }
        let i2 = self.indices(&old.key).t2;
        let s2 = &mut self.t2[i2 as usize];
        let live2 = live(s2.stamp, now, timeout);
        let reclaimed2 = !live2 && s2.stamp != EMPTY;
        let old2 = mem::replace(s2, old);
        if reclaimed2 {
            self.stats.expired_reclaimed += 1;
        }
        debug_assert!(
            !live2 || old2.key != old.key,
            "a key was live in both arrays"
        );
        Place::Done(live2.then_some(Entry {
            key: old2.key,
            stamp: old2.stamp,
            value: old2.value,
        }))
    }

    // ---- stages 3-4 ----------------------------------------------------------------------------

    /// A packet that missed reads SWAPPED and SWAPPING of its cell. Busy: an entry of this cell may be
    /// in transit (it may be this flow's), so the packet must not insert. A count difference whose
    /// deadline has passed can only come from a lost swap or claim: reset it. With `claim`, a packet
    /// that finds the cell quiet marks its own coming insertion as a transient state (Unordered mode).
    #[inline(always)]
    fn transient(&mut self, tr: u32, claim: bool) -> bool {
        let pass = self.pass32();
        let swapped = self.aux[tr as usize].swapped;
        let cell = &mut self.aux[tr as usize];
        if cell.swapping != swapped {
            // Deadlines are set to the pass after the spawn, so a live one is `pass` or `pass + 1`.
            if cell.deadline.wrapping_sub(pass) <= 1 {
                return true;
            }
            cell.swapping = swapped;
            self.stats.transient_resets += 1;
        }
        if claim {
            cell.swapping = cell.swapping.wrapping_add(1);
            cell.deadline = pass.wrapping_add(1);
        }
        false
    }

    /// Stage 4 for an entry that must continue in the next pass: count it in SWAPPING and spawn its
    /// SWAP packet into `step`, or evict it into `step` if its chain is at the limit.
    #[inline]
    fn spawn<E: Effects<K, V>>(&mut self, e: Entry<K, V>, hops: u16, at: u64, fx: &mut E) {
        if hops > self.max_swap_passes {
            self.stats.evictions += 1;
            fx.evicted(e);
            return;
        }
        let idx = self.indices(&e.key);
        let pass = self.pass32().wrapping_add(1);
        let cell = &mut self.aux[idx.tr as usize];
        cell.swapping = cell.swapping.wrapping_add(1);
        cell.deadline = pass;
        self.stats.swaps += 1;
        fx.spawned(SwapPacket {
            entry: e,
            at,
            idx,
            hops,
            due: pass,
        });
    }

    // ---- stages 6-7 ----------------------------------------------------------------------------

    #[inline(always)]
    fn read_update<F>(
        &mut self,
        found: Found,
        p: &DataPacket<K, F::Meta, F::Out>,
        nf: &mut F,
        now: u64,
    ) -> F::Out
    where
        F: FlowFn<K, Value = V>,
    {
        let slot = match found {
            Found::T1 => &mut self.t1[p.idx.t1 as usize],
            Found::T2 => &mut self.t2[p.idx.t2 as usize],
            Found::None => unreachable!("read_update without a state"),
        };
        nf.update(&p.key, &mut slot.value, &p.meta, now)
    }

    // ---- one pass of a data packet ---------------------------------------------------------------

    /// Process one pass of a data packet at time `now` (ns). On [`Verdict::Recirculate`] the caller
    /// must hand the packet back in the next pass (after [`begin_pass`](Self::begin_pass)); a
    /// spawned SWAP likewise. Convenience form of [`step_data_into`](Self::step_data_into).
    pub fn step_data<F>(
        &mut self,
        p: &mut DataPacket<K, F::Meta, F::Out>,
        nf: &mut F,
        now: u64,
    ) -> Step<Verdict<F::Out>, K, V>
    where
        F: FlowFn<K, Value = V>,
    {
        let mut step = Step {
            result: Verdict::Recirculate,
            spawned: None,
            evicted: None,
        };
        step.result = self.step_data_into(p, nf, now, &mut step);
        step
    }

    /// [`step_data`](Self::step_data) with the side effects delivered to `fx`.
    #[inline]
    pub fn step_data_into<F, E>(
        &mut self,
        p: &mut DataPacket<K, F::Meta, F::Out>,
        nf: &mut F,
        now: u64,
        fx: &mut E,
    ) -> Verdict<F::Out>
    where
        F: FlowFn<K, Value = V>,
        E: Effects<K, V>,
    {
        let pass = self.pass32();
        if p.op != Op::New && p.due != pass {
            self.stats.drops_late += 1;
            return Verdict::Drop(DropReason::Late);
        }
        p.passes += 1;
        self.stats.passes += 1;
        let can_recirc = p.passes < self.max_passes;
        let ordered = self.mode != Mode::Unordered;

        // Stages 1-2: key registers.
        let mut found = Found::None;
        let mut insert_out = F::Out::default();
        let mut displaced = None;
        let mut dup = false;
        match p.op {
            Op::New | Op::Lookup => found = self.find(&p.key, p.idx, now),
            Op::Insert => {
                let (value, out) = nf.create(&p.key, &p.meta, now);
                let e = Entry {
                    key: p.key,
                    stamp: now,
                    value,
                };
                match self.place(e, p.idx.t1, now) {
                    Place::Done(d) => {
                        self.stats.inserts += 1;
                        insert_out = out;
                        displaced = d;
                    }
                    Place::Duplicate => {
                        // Lemmas 3.5/3.6 say this cannot happen; if it did, keep the one state.
                        self.stats.anomalies += 1;
                        dup = true;
                    }
                }
            }
            Op::Wait => {}
        }
        if dup {
            insert_out = self.read_update(Found::T1, p, nf, now);
        }

        // Stages 3-4: SWAPPED, SWAPPING.
        let mut busy = false;
        match p.op {
            Op::Insert => {
                if !ordered {
                    // Release the claim this packet took when it decided to insert.
                    let c = &mut self.aux[p.idx.tr as usize].swapped;
                    *c = c.wrapping_add(1);
                }
                if let Some(e) = displaced {
                    self.spawn(e, 1, p.at, fx);
                }
            }
            Op::New | Op::Lookup if found == Found::None => {
                busy = self.transient(p.idx.tr, !ordered && can_recirc);
            }
            _ => {}
        }

        // Stage 5: ordering; stages 6-7: value registers.
        let result = if ordered {
            self.order_stage(p, nf, now, found, busy, can_recirc, insert_out)
        } else {
            match p.op {
                Op::Insert => Verdict::Exit(insert_out),
                _ if found != Found::None => Verdict::Exit(self.read_update(found, p, nf, now)),
                _ if !can_recirc => Verdict::Drop(DropReason::PassLimit),
                _ => {
                    if busy {
                        self.stats.transient_waits += 1;
                        p.op = Op::Lookup;
                    } else {
                        p.op = Op::Insert; // the claim was taken at stage 4
                    }
                    Verdict::Recirculate
                }
            }
        };
        match result {
            Verdict::Exit(_) => self.stats.exits += 1,
            Verdict::Recirculate => {
                self.stats.recirculations += 1;
                p.due = pass.wrapping_add(1);
            }
            Verdict::Drop(r) => self.stats.count_drop(r),
        }
        result
    }

    /// Stage 5 (ORDERING, PACKET-COUNTER, NEXT-PACKET) and, for the packet that may read its state,
    /// stages 6-7.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn order_stage<F>(
        &mut self,
        p: &mut DataPacket<K, F::Meta, F::Out>,
        nf: &mut F,
        now: u64,
        found: Found,
        busy: bool,
        can_recirc: bool,
        insert_out: F::Out,
    ) -> Verdict<F::Out>
    where
        F: FlowFn<K, Value = V>,
    {
        let pass = self.pass32();
        let weak = self.mode == Mode::Weak;
        let o = &mut self.aux[p.idx.ord as usize];
        // A head not seen for two passes was lost: skip its number (see the module doc).
        let stale = pass.wrapping_sub(o.stamp) >= 2;
        match p.op {
            Op::New => {
                let mut in_flight = o.pc.wrapping_sub(o.next);
                if in_flight != 0 && stale {
                    o.next = o.next.wrapping_add(1);
                    o.stamp = pass;
                    in_flight -= 1;
                    self.stats.order_skips += 1;
                }
                if in_flight == 0 {
                    if found != Found::None {
                        // Lemma A.1: nothing of this cell in flight, state found: leave now.
                        return Verdict::Exit(self.read_update(found, p, nf, now));
                    }
                    // The only packet of its cell: it becomes the head, and inserts unless the
                    // state may be in transit.
                    p.seq = o.pc;
                    o.pc = o.pc.wrapping_add(1);
                    o.stamp = pass;
                    if busy {
                        self.stats.transient_waits += 1;
                        p.op = Op::Lookup;
                    } else {
                        p.op = Op::Insert;
                    }
                    return Verdict::Recirculate;
                }
                if in_flight >= MAX_IN_FLIGHT {
                    return Verdict::Drop(DropReason::OrderingFull);
                }
                // Earlier packets of the cell are in flight: take a number and wait (§3.4).
                p.seq = o.pc;
                o.pc = o.pc.wrapping_add(1);
                self.stats.order_waits += 1;
                if weak && found != Found::None {
                    p.out = self.read_update(found, p, nf, now);
                    p.op = Op::Wait;
                } else {
                    p.op = Op::Lookup;
                }
                Verdict::Recirculate
            }
            Op::Insert => {
                if p.seq == o.next {
                    o.next = o.next.wrapping_add(1);
                    o.stamp = pass;
                    Verdict::Exit(insert_out)
                } else {
                    // Only the head inserts, and a head is never skipped while alive.
                    self.stats.anomalies += 1;
                    Verdict::Drop(DropReason::Anomaly)
                }
            }
            Op::Lookup | Op::Wait => {
                let mut rel = p.seq.wrapping_sub(o.next) as i16;
                if rel < 0 {
                    // Its number was skipped: leaving now would reorder. Only a packet that came
                    // back late can get here.
                    return Verdict::Drop(DropReason::Late);
                }
                if rel > 0 && stale {
                    o.next = o.next.wrapping_add(1);
                    o.stamp = pass;
                    rel -= 1;
                    self.stats.order_skips += 1;
                }
                if rel == 0 {
                    // The head: heartbeat, then leave if it has (or now reads) its state.
                    o.stamp = pass;
                    if p.op == Op::Wait {
                        o.next = o.next.wrapping_add(1);
                        return Verdict::Exit(p.out);
                    }
                    if found != Found::None {
                        o.next = o.next.wrapping_add(1);
                        return Verdict::Exit(self.read_update(found, p, nf, now));
                    }
                    if !can_recirc {
                        o.next = o.next.wrapping_add(1);
                        return Verdict::Drop(DropReason::PassLimit);
                    }
                    if busy {
                        self.stats.transient_waits += 1;
                        p.op = Op::Lookup;
                    } else {
                        p.op = Op::Insert; // Lemma 3.8: no state, and next to leave
                    }
                    return Verdict::Recirculate;
                }
                if !can_recirc {
                    return Verdict::Drop(DropReason::PassLimit);
                }
                self.stats.order_waits += 1;
                if weak && p.op == Op::Lookup && found != Found::None {
                    p.out = self.read_update(found, p, nf, now);
                    p.op = Op::Wait;
                }
                Verdict::Recirculate
            }
        }
    }

    // ---- one pass of a swap --------------------------------------------------------------------

    /// Process one pass of a SWAP packet at time `now`. Convenience form of
    /// [`step_swap_into`](Self::step_swap_into).
    pub fn step_swap(&mut self, s: &mut SwapPacket<K, V>, now: u64) -> Step<SwapOutcome, K, V> {
        let mut step = Step {
            result: SwapOutcome::Landed,
            spawned: None,
            evicted: None,
        };
        step.result = self.step_swap_into(s, now, &mut step);
        step
    }

    /// [`step_swap`](Self::step_swap) with the side effects delivered to `fx`.
    #[inline]
    pub fn step_swap_into<E: Effects<K, V>>(
        &mut self,
        s: &mut SwapPacket<K, V>,
        now: u64,
        fx: &mut E,
    ) -> SwapOutcome {
        if s.due != self.pass32() {
            self.stats.swaps_late += 1;
            self.stats.evictions += 1;
            fx.evicted(s.entry);
            return SwapOutcome::Late;
        }
        self.stats.swap_passes += 1;
        let e = s.entry;
        let mut displaced = None;
        let mut outcome = SwapOutcome::Landed;
        // Stages 1-2.
        if !live(e.stamp, now, self.timeout) {
            self.stats.expired_in_transit += 1;
            outcome = SwapOutcome::Expired;
        } else {
            match self.place(e, s.idx.t1, now) {
                Place::Done(d) => displaced = d,
                Place::Duplicate => {
                    self.stats.anomalies += 1;
                    outcome = SwapOutcome::Duplicate;
                }
            }
        }
        // Stage 3: SWAPPED (the paper's SWAPPED packet).
        let c = &mut self.aux[s.idx.tr as usize].swapped;
        *c = c.wrapping_add(1);
        // Stage 4: SWAPPING for the entry displaced in this pass.
        if let Some(d) = displaced {
            self.spawn(d, s.hops + 1, s.at, fx);
        }
        outcome
    }

    // ---- inspection (tests, tools; not for the data path) ---------------------------------------

    /// Every live entry at time `now`, with the array it sits in.
    pub fn live_entries(&self, now: u64) -> impl Iterator<Item = (Array, Entry<K, V>)> + '_ {
        let t = self.timeout;
        let f = move |a: Array, s: &Slot<K, V>| {
            live(s.stamp, now, t).then_some((
                a,
                Entry {
                    key: s.key,
                    stamp: s.stamp,
                    value: s.value,
                },
            ))
        };
        self.t1
            .iter()
            .filter_map(move |s| f(Array::T1, s))
            .chain(self.t2.iter().filter_map(move |s| f(Array::T2, s)))
    }

    /// The live state of `key` at time `now`, if any (looks at both candidate slots, changes nothing).
    pub fn get(&self, key: &K, now: u64) -> Option<(Array, Entry<K, V>)> {
        let idx = self.indices(key);
        for (a, s) in [
            (Array::T1, &self.t1[idx.t1 as usize]),
            (Array::T2, &self.t2[idx.t2 as usize]),
        ] {
            if s.key == *key && live(s.stamp, now, self.timeout) {
                return Some((
                    a,
                    Entry {
                        key: s.key,
                        stamp: s.stamp,
                        value: s.value,
                    },
                ));
            }
        }
        None
    }

    /// The candidate slots of `key` in `t1` and `t2` (its two cuckoo buckets).
    pub fn slots_of(&self, key: &K) -> (usize, usize) {
        let i = self.indices(key);
        (i.t1 as usize, i.t2 as usize)
    }

    /// SWAPPING − SWAPPED of `key`'s transient cell (entries in transit counted there).
    pub fn transient_count(&self, key: &K) -> u16 {
        let tr = self.indices(key).tr as usize;
        self.aux[tr].swapping.wrapping_sub(self.aux[tr].swapped)
    }

    /// (PACKET-COUNTER, NEXT-PACKET) of `key`'s ordering cell.
    pub fn ordering_cell(&self, key: &K) -> (u16, u16) {
        let o = self.aux[self.indices(key).ord as usize];
        (o.pc, o.next)
    }

    /// Bytes of table memory (both arrays and all counter arrays).
    pub fn memory_bytes(&self) -> usize {
        (self.t1.len() + self.t2.len()) * mem::size_of::<Slot<K, V>>()
            + self.aux.len() * mem::size_of::<Aux>()
    }
}
