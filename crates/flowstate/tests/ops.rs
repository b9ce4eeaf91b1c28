//! Unit tests for each packet operation of the paper (New/LOOKUP, INSERT, WAIT, SWAP, SWAPPED) and for
//! the recirculation limits, driving the table one step at a time.

use fp_flowstate::table::{DataPacket, Step, SwapPacket};
use fp_flowstate::*;

/// Counts packets per flow; a packet leaves with the count it saw.
struct Count;
impl FlowFn<u64> for Count {
    type Value = u32;
    type Meta = u32;
    type Out = u32;
    fn create(&mut self, _: &u64, _: &u32, _: u64) -> (u32, u32) {
        (1, 1)
    }
    fn update(&mut self, _: &u64, v: &mut u32, _: &u32, _: u64) -> u32 {
        *v += 1;
        *v
    }
}

type Pkt = DataPacket<u64, u32, u32>;
type T = Table<u64, u32>;

fn cfg(slots: usize, mode: Mode) -> Config {
    Config {
        slots_per_array: slots,
        transient_cells: 1024,
        ordering_cells: 1024,
        expiry: Expiry {
            timeout_ns: 1_000_000,
            from: ExpiryFrom::LastPacket,
        },
        mode,
        max_passes: 16,
        max_swap_passes: 4,
        seed: 1,
    }
}

fn step(t: &mut T, p: &mut Pkt, now: u64) -> Step<Verdict<u32>, u64, u32> {
    t.step_data(p, &mut Count, now)
}

/// Insert `key` with a fresh packet: two passes. Returns any swap spawned.
fn insert(t: &mut T, key: u64, now: u64) -> Option<SwapPacket<u64, u32>> {
    t.begin_pass();
    let mut p: Pkt = t.admit(key, 0, now);
    assert_eq!(step(t, &mut p, now).result, Verdict::Recirculate);
    assert_eq!(p.op(), Op::Insert);
    t.begin_pass();
    let s = step(t, &mut p, now);
    assert_eq!(s.result, Verdict::Exit(1));
    s.spawned
}

#[test]
fn new_flow_inserts_in_second_pass_then_hits_in_one() {
    let mut t = T::new(&cfg(64, Mode::Strict)).unwrap();
    t.begin_pass();
    let mut p: Pkt = t.admit(7, 0, 0);
    // LOOKUP fails, no transient state, nothing in flight: INSERT in the next pass (Lemma A.1 (i)).
    let s = step(&mut t, &mut p, 0);
    assert_eq!(
        (s.result, p.op(), p.passes()),
        (Verdict::Recirculate, Op::Insert, 1)
    );
    assert!(t.get(&7, 0).is_none());
    assert_eq!(t.ordering_cell(&7), (1, 0), "one packet in flight");
    t.begin_pass();
    let s = step(&mut t, &mut p, 0);
    assert_eq!((s.result, p.passes()), (Verdict::Exit(1), 2));
    assert!(s.spawned.is_none());
    assert_eq!(t.get(&7, 0).unwrap().0, Array::T1, "insertions go to t1");
    assert_eq!(
        t.ordering_cell(&7),
        (1, 1),
        "NEXT-PACKET advanced as it left"
    );
    // A later packet finds the state in its first pass and leaves.
    t.begin_pass();
    let mut q: Pkt = t.admit(7, 1, 10);
    assert_eq!(step(&mut t, &mut q, 10).result, Verdict::Exit(2));
    assert_eq!(
        (t.stats().inserts, t.stats().hits_t1, t.stats().exits),
        (1, 1, 2)
    );
}

#[test]
fn lookup_finds_a_displaced_state_in_t2() {
    // One slot per array: the second insertion moves the first entry to t2 (no swap needed).
    let mut t = T::new(&cfg(1, Mode::Strict)).unwrap();
    assert!(insert(&mut t, 1, 0).is_none());
    assert!(insert(&mut t, 2, 0).is_none());
    assert_eq!(t.get(&1, 0).unwrap().0, Array::T2);
    assert_eq!(t.get(&2, 0).unwrap().0, Array::T1);
    t.begin_pass();
    let mut p: Pkt = t.admit(1, 0, 0);
    assert_eq!(
        step(&mut t, &mut p, 0).result,
        Verdict::Exit(2),
        "state kept its count"
    );
    assert_eq!(t.stats().hits_t2, 1);
}

#[test]
fn swap_carries_the_entry_and_swapped_releases_waiting_packets() {
    let mut t = T::new(&cfg(1, Mode::Strict)).unwrap();
    insert(&mut t, 1, 0); // 1 -> t1
    insert(&mut t, 2, 0); // 2 -> t1, 1 -> t2
                          // Inserting 3 takes t1, moves 2 to t2, and displaces 1: a SWAP packet carries it.
    let mut swap = insert(&mut t, 3, 0).expect("a swap");
    assert_eq!(swap.entry.key, 1);
    assert_eq!(swap.entry.value, 1, "the state travels with its value");
    assert_eq!(swap.hops(), 1);
    assert_eq!(t.transient_count(&1), 1, "SWAPPING counted it");
    assert!(t.get(&1, 0).is_none(), "in transit: in neither array");

    // A packet of flow 1 arrives now: it misses, sees SWAPPING > SWAPPED and must not insert.
    let mut p: Pkt = t.admit(1, 9, 0);
    let s = step(&mut t, &mut p, 0);
    assert_eq!((s.result, p.op()), (Verdict::Recirculate, Op::Lookup));
    assert_eq!(t.stats().transient_waits, 1);

    // Next pass: the SWAP lands in t1 (SWAPPED +1), displacing 3 -> t2 -> 2 (another swap).
    t.begin_pass();
    let s = t.step_swap(&mut swap, 0);
    assert_eq!(s.result, SwapOutcome::Landed);
    assert_eq!(t.transient_count(&1), 0, "SWAPPED caught up");
    let next = s.spawned.expect("chain continues");
    assert_eq!((next.entry.key, next.hops()), (2, 2));
    // The waiting packet now finds its original state (count 1 -> 2), no second state.
    assert_eq!(step(&mut t, &mut p, 0).result, Verdict::Exit(2));
    assert_eq!(t.stats().inserts, 3);
}

#[test]
fn swap_chain_is_cut_at_max_swap_passes_and_reported() {
    // Three flows in a two-slot table: the chain cycles until the limit evicts the carried entry.
    let mut t = T::new(&cfg(1, Mode::Strict)).unwrap();
    insert(&mut t, 1, 0);
    insert(&mut t, 2, 0);
    let mut swap = insert(&mut t, 3, 0).unwrap();
    let mut evicted = None;
    for hop in 1..=4u16 {
        assert_eq!(swap.hops(), hop);
        t.begin_pass();
        let s = t.step_swap(&mut swap, 0);
        assert_eq!(s.result, SwapOutcome::Landed);
        match (s.spawned, s.evicted) {
            (Some(n), None) => swap = n,
            (None, Some(e)) => {
                evicted = Some(e);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let e = evicted.expect("max_swap_passes = 4 cuts the chain");
    assert_eq!(t.stats().evictions, 1);
    assert_eq!(t.stats().swap_passes, 4);
    // Two of the three flows remain, each exactly once; no transient state is left behind.
    let live: Vec<u64> = t.live_entries(0).map(|(_, e)| e.key).collect();
    assert_eq!(live.len(), 2);
    assert!(!live.contains(&e.key));
    for k in 1..=3 {
        assert_eq!(t.transient_count(&k), 0);
    }
}

#[test]
fn lost_swap_resets_transient_after_its_deadline() {
    let mut t = T::new(&cfg(1, Mode::Strict)).unwrap();
    insert(&mut t, 1, 0);
    insert(&mut t, 2, 0);
    let _lost = insert(&mut t, 3, 0).unwrap(); // carries flow 1; never processed
    t.begin_pass(); // the swap's pass: it is not processed (dropped)
    let mut p: Pkt = t.admit(1, 0, 0);
    assert_eq!(step(&mut t, &mut p, 0).result, Verdict::Recirculate);
    assert_eq!(p.op(), Op::Lookup, "deadline not passed: still busy");
    t.begin_pass();
    assert_eq!(step(&mut t, &mut p, 0).result, Verdict::Recirculate);
    assert_eq!(
        p.op(),
        Op::Insert,
        "deadline passed: counters reset, the flow re-inserts"
    );
    assert_eq!(t.stats().transient_resets, 1);
    t.begin_pass();
    let s = step(&mut t, &mut p, 0);
    assert_eq!(
        s.result,
        Verdict::Exit(1),
        "a new state (the old one was lost)"
    );
    assert_eq!(t.transient_count(&1), 0);
}

#[test]
fn late_swap_evicts_without_touching_counters() {
    let mut t = T::new(&cfg(1, Mode::Strict)).unwrap();
    insert(&mut t, 1, 0);
    insert(&mut t, 2, 0);
    let mut swap = insert(&mut t, 3, 0).unwrap();
    t.begin_pass();
    t.begin_pass(); // one pass too late
    let s = t.step_swap(&mut swap, 0);
    assert_eq!(s.result, SwapOutcome::Late);
    assert_eq!(s.evicted.unwrap().key, 1);
    assert_eq!(
        t.transient_count(&1),
        1,
        "only a reset may clear a lost swap's count"
    );
    assert!(t.get(&1, 0).is_none());
}

#[test]
fn swap_of_an_expired_entry_is_discarded() {
    let mut c = cfg(1, Mode::Strict);
    c.expiry.timeout_ns = 100;
    let mut t = T::new(&c).unwrap();
    insert(&mut t, 1, 0);
    insert(&mut t, 2, 50);
    let mut swap = insert(&mut t, 3, 90).unwrap(); // flow 1 (stamp 0) is displaced at t=90
    t.begin_pass();
    let s = t.step_swap(&mut swap, 100);
    assert_eq!(s.result, SwapOutcome::Expired);
    assert_eq!(t.stats().expired_in_transit, 1);
    assert_eq!(t.transient_count(&1), 0);
}

#[test]
fn strict_mode_reads_state_only_in_turn() {
    // One ordering cell for everything: flow 2's packet must wait behind flow 1's insertion, and in
    // Strict mode it must not touch flow 2's state until its turn.
    let mut c = cfg(64, Mode::Strict);
    c.ordering_cells = 1;
    let mut t = T::new(&c).unwrap();
    insert(&mut t, 2, 0);
    t.begin_pass();
    let mut a: Pkt = t.admit(1, 0, 0);
    assert_eq!(step(&mut t, &mut a, 0).result, Verdict::Recirculate); // head, INSERT next
    let mut b: Pkt = t.admit(2, 0, 0);
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!(b.op(), Op::Lookup, "not its turn: no read");
    assert_eq!(t.get(&2, 0).unwrap().1.value, 1, "state untouched");
    t.begin_pass();
    // Out of order within the pass: b first. Still not its turn.
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!(step(&mut t, &mut a, 0).result, Verdict::Exit(1));
    t.begin_pass();
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Exit(2));
    assert_eq!(t.stats().order_waits, 2);
}

#[test]
fn weak_mode_wait_holds_its_read_and_leaves_in_turn() {
    let mut c = cfg(64, Mode::Weak);
    c.ordering_cells = 1;
    let mut t = T::new(&c).unwrap();
    insert(&mut t, 2, 0);
    t.begin_pass();
    let mut a: Pkt = t.admit(1, 0, 0);
    step(&mut t, &mut a, 0);
    let mut b: Pkt = t.admit(2, 0, 0);
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!(b.op(), Op::Wait, "read the state, now waits for its turn");
    assert_eq!(
        t.get(&2, 0).unwrap().1.value,
        2,
        "updated out of turn (weak consistency)"
    );
    t.begin_pass();
    // WAIT skips the tables: it leaves only after `a`, with the value it read.
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!(step(&mut t, &mut a, 0).result, Verdict::Exit(1));
    t.begin_pass();
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Exit(2));
}

#[test]
fn packets_of_one_flow_leave_in_order_behind_the_insertion() {
    // §3.4's example: packets 2-4 arrive while packet 1 inserts; packet 5 would find the state first.
    let mut t = T::new(&cfg(64, Mode::Strict)).unwrap();
    t.begin_pass();
    let mut ps: Vec<Pkt> = (0..4).map(|i| t.admit(5, i, 0)).collect();
    for p in &mut ps {
        assert_eq!(step(&mut t, p, 0).result, Verdict::Recirculate);
    }
    assert_eq!(ps[0].op(), Op::Insert);
    assert!(ps[1..].iter().all(|p| p.op() == Op::Lookup));
    assert_eq!(t.ordering_cell(&5), (4, 0));
    t.begin_pass();
    let mut p5: Pkt = t.admit(5, 4, 0);
    // Packet 5 first: it finds no state yet, waits with number 4.
    assert_eq!(step(&mut t, &mut p5, 0).result, Verdict::Recirculate);
    // Then 4, 3 (not their turn), the insertion, and 2 (its turn right after).
    assert_eq!(step(&mut t, &mut ps[3], 0).result, Verdict::Recirculate);
    assert_eq!(step(&mut t, &mut ps[2], 0).result, Verdict::Recirculate);
    assert_eq!(step(&mut t, &mut ps[0], 0).result, Verdict::Exit(1));
    assert_eq!(step(&mut t, &mut ps[1], 0).result, Verdict::Exit(2));
    t.begin_pass();
    assert_eq!(
        step(&mut t, &mut p5, 0).result,
        Verdict::Recirculate,
        "#5 still behind 3 and 4"
    );
    assert_eq!(step(&mut t, &mut ps[2], 0).result, Verdict::Exit(3));
    assert_eq!(step(&mut t, &mut ps[3], 0).result, Verdict::Exit(4));
    t.begin_pass();
    assert_eq!(step(&mut t, &mut p5, 0).result, Verdict::Exit(5));
    assert_eq!(t.ordering_cell(&5), (5, 5));
}

#[test]
fn lost_head_is_skipped_by_heartbeat_and_nobody_is_reordered() {
    let mut c = cfg(64, Mode::Strict);
    c.ordering_cells = 1;
    let mut t = T::new(&c).unwrap();
    t.begin_pass();
    let mut a: Pkt = t.admit(1, 0, 0);
    step(&mut t, &mut a, 0); // head, will INSERT; then lost
    let mut b: Pkt = t.admit(1, 1, 0);
    step(&mut t, &mut b, 0);
    t.begin_pass();
    assert_eq!(
        step(&mut t, &mut b, 0).result,
        Verdict::Recirculate,
        "head seen last pass"
    );
    assert_eq!(t.stats().order_skips, 0);
    t.begin_pass();
    // Two passes without the head: b skips it, becomes head, finds no state: INSERT.
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!((b.op(), t.stats().order_skips), (Op::Insert, 1));
    t.begin_pass();
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Exit(1));
    // The lost packet coming back late is dropped, not sent out of order.
    assert_eq!(
        step(&mut t, &mut a, 0).result,
        Verdict::Drop(DropReason::Late)
    );
    assert_eq!(t.live_entries(0).count(), 1);
}

#[test]
fn pass_limit_drops_and_the_gap_is_closed() {
    let mut c = cfg(64, Mode::Strict);
    c.ordering_cells = 1;
    c.max_passes = 2;
    let mut t = T::new(&c).unwrap();
    t.begin_pass();
    let mut x: Pkt = t.admit(1, 0, 0);
    step(&mut t, &mut x, 0);
    let mut y: Pkt = t.admit(2, 0, 0);
    step(&mut t, &mut y, 0);
    t.begin_pass();
    // y first: second pass, not its turn, at the limit: dropped (it leaves a gap in the numbers).
    assert_eq!(
        step(&mut t, &mut y, 0).result,
        Verdict::Drop(DropReason::PassLimit)
    );
    assert_eq!(step(&mut t, &mut x, 0).result, Verdict::Exit(1));
    t.begin_pass();
    let mut z: Pkt = t.admit(1, 0, 0);
    assert_eq!(
        step(&mut t, &mut z, 0).result,
        Verdict::Recirculate,
        "waits for the gap"
    );
    t.begin_pass();
    assert_eq!(
        step(&mut t, &mut z, 0).result,
        Verdict::Exit(2),
        "gap skipped"
    );
    assert_eq!(t.stats().drops_pass_limit, 1);
    assert_eq!(t.ordering_cell(&1), (3, 3));
}

#[test]
fn recirculated_packet_processed_late_is_dropped() {
    let mut t = T::new(&cfg(64, Mode::Strict)).unwrap();
    t.begin_pass();
    let mut p: Pkt = t.admit(1, 0, 0);
    step(&mut t, &mut p, 0);
    t.begin_pass();
    t.begin_pass();
    assert_eq!(
        step(&mut t, &mut p, 0).result,
        Verdict::Drop(DropReason::Late)
    );
    assert!(t.get(&1, 0).is_none(), "a late INSERT does not insert");
}

#[test]
fn expiry_from_last_packet_and_from_insertion() {
    for (from, hit_at_150) in [
        (ExpiryFrom::LastPacket, true),
        (ExpiryFrom::Insertion, false),
    ] {
        let mut c = cfg(64, Mode::Strict);
        c.expiry = Expiry {
            timeout_ns: 100,
            from,
        };
        let mut t = T::new(&c).unwrap();
        insert(&mut t, 1, 0);
        t.begin_pass();
        let mut p: Pkt = t.admit(1, 0, 60);
        assert_eq!(step(&mut t, &mut p, 60).result, Verdict::Exit(2));
        t.begin_pass();
        let mut q: Pkt = t.admit(1, 0, 150);
        let r = step(&mut t, &mut q, 150).result;
        if hit_at_150 {
            assert_eq!(r, Verdict::Exit(3), "{from:?}");
        } else {
            assert_eq!((r, q.op()), (Verdict::Recirculate, Op::Insert), "{from:?}");
            t.begin_pass();
            assert_eq!(step(&mut t, &mut q, 150).result, Verdict::Exit(1));
            assert_eq!(
                t.stats().expired_reclaimed,
                1,
                "the expired entry was overwritten"
            );
        }
    }
}

#[test]
fn unordered_mode_claims_so_a_flow_gets_one_state() {
    let mut t = T::new(&cfg(64, Mode::Unordered)).unwrap();
    t.begin_pass();
    let mut a: Pkt = t.admit(1, 0, 0);
    let mut b: Pkt = t.admit(1, 1, 0);
    step(&mut t, &mut a, 0);
    assert_eq!((a.op(), t.transient_count(&1)), (Op::Insert, 1), "claimed");
    step(&mut t, &mut b, 0);
    assert_eq!(b.op(), Op::Lookup, "sees the claim");
    t.begin_pass();
    // b before a: no state yet, still claimed: waits again (a software worker would run a first).
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Recirculate);
    assert_eq!(step(&mut t, &mut a, 0).result, Verdict::Exit(1));
    assert_eq!(t.transient_count(&1), 0, "claim released");
    t.begin_pass();
    assert_eq!(step(&mut t, &mut b, 0).result, Verdict::Exit(2));
    assert_eq!(t.stats().inserts, 1);
}

#[test]
fn config_errors_are_reported() {
    let e = T::new(&Config {
        slots_per_array: 0,
        ..Config::default()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("slots_per_array = 0"));
}

#[test]
fn placement_is_pinned() {
    // Array indices come from fp-hash's pinned hashes: two nodes (or two versions) with the same
    // seed place a flow in the same slots. A change here changes where every flow lives.
    let t: Table<FiveTuple, u32> = Table::new(&Config::default()).unwrap();
    let k = FiveTuple::new(0x0a00_0001, 0x0a00_0002, 1234, 80, 6);
    assert_eq!(t.slots_of(&k), (15607, 22588));
}
