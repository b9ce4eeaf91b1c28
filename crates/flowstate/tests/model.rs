//! Model tests: drive the table with random interleavings of new packets, recirculated packets and
//! swaps, with random drops, late (lost) recirculations and time jumps that expire entries, on tiny
//! tables and counter arrays so that collisions, swap chains and shared ordering cells are the rule.
//! After every single step the test checks, against the table's own contents:
//!
//! * Consistency: no flow ever has two live states (table + swaps in transit); a live state never
//!   disappears unless it expired, was evicted and reported, or its swap was dropped; in Strict (and
//!   Unordered) mode the packet that leaves read its flow's one current state, with the count right
//!   after the previous reader's.
//! * Ordering: per flow, packets leave in arrival order (Strict and Weak modes).
//! * Termination: every packet leaves (sent or dropped) within `max_passes` passes, and after the
//!   input stops everything in flight drains within the bound.

use fp_flowstate::audit::{AuditFn, AuditMeta, AuditOut, AuditState, Auditor};
use fp_flowstate::table::{DataPacket, SwapPacket};
use fp_flowstate::*;
use std::collections::{HashMap, HashSet};

type Pkt = DataPacket<u64, AuditMeta, AuditOut>;
type Swp = SwapPacket<u64, AuditState>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        fp_hash::splitmix64(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        fp_hash::reduce(self.next(), n)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

#[derive(Clone, Copy, Debug)]
enum Item {
    D(Pkt),
    S(Swp),
}

fn live(stamp: u64, now: u64, timeout: u64) -> bool {
    now.saturating_sub(stamp) < timeout
}

/// flow -> live instances (table and transit).
fn live_map<'a>(
    t: &Table<u64, AuditState>,
    transit: impl Iterator<Item = &'a Swp>,
    now: u64,
    timeout: u64,
) -> HashMap<u64, Vec<(u32, u32, &'static str)>> {
    let mut m: HashMap<u64, Vec<(u32, u32, &'static str)>> = HashMap::new();
    for (a, e) in t.live_entries(now) {
        assert_eq!(e.key, e.value.flow, "entry filed under the wrong key");
        let w = if a == Array::T1 { "t1" } else { "t2" };
        m.entry(e.key)
            .or_default()
            .push((e.value.instance, e.value.count, w));
    }
    for s in transit {
        if live(s.entry.stamp, now, timeout) {
            m.entry(s.entry.key).or_default().push((
                s.entry.value.instance,
                s.entry.value.count,
                "transit",
            ));
        }
    }
    m
}

fn cuckoo_feasible(t: &Table<u64, AuditState>, flows: u64) -> bool {
    let n = t.config().slots_per_array;
    let mut parent: Vec<usize> = (0..2 * n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    let mut edges = vec![0usize; 2 * n];
    for f in 0..flows {
        let (a, b) = t.slots_of(&f);
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, n + b));
        if ra != rb {
            parent[ra] = rb;
            edges[rb] += edges[ra];
        }
        edges[rb] += 1;
    }
    let mut verts = vec![0usize; 2 * n];
    for v in 0..2 * n {
        let r = find(&mut parent, v);
        verts[r] += 1;
    }
    (0..2 * n).all(|v| parent[v] != v || edges[v] <= verts[v])
}

/// Swaps in transit: those still to be processed in this pass or spawned for the next. A swap that
/// missed its pass (late) is dead: the table will evict it.
fn swaps_of(a: &[Item], b: &[Item], pass: u64) -> Vec<Swp> {
    let this = pass as u32;
    a.iter()
        .filter_map(|it| match it {
            Item::S(s) if s.due() == this => Some(*s),
            _ => None,
        })
        .chain(b.iter().filter_map(|it| match it {
            Item::S(s) => Some(*s),
            _ => None,
        }))
        .collect()
}

#[derive(Default, Debug)]
struct Totals {
    cases: u64,
    exits: u64,
    drops: u64,
    inserts: u64,
    swaps: u64,
    evictions: u64,
    resets: u64,
    skips: u64,
    out_of_order_unordered: u64,
    weak_violations: u64,
}

/// `gentle`: no losses injected, limits far above need, more slots than flows.
fn run_case(seed: u64, gentle: bool, tot: &mut Totals) {
    let mut r = Rng(seed);
    let mode = r.pick(&[Mode::Strict, Mode::Strict, Mode::Weak, Mode::Unordered]);
    let timeout = 50 + r.below(3000);
    let flows = 1 + r.below(12);
    let cfg = Config {
        // Gentle: at most 50 % load, so cuckoo insertion always succeeds without long chains (an
        // overfull table makes swap chains cycle while packets keep their entries fresh: then the
        // limits must drop and evict, which the other test covers).
        slots_per_array: if gentle {
            flows as usize + r.below(8) as usize
        } else {
            r.pick(&[1, 2, 3, 5, 8, 16, 64])
        },
        transient_cells: r.pick(&[1, 2, 4, 64]),
        ordering_cells: r.pick(&[1, 2, 4, 64]),
        expiry: Expiry {
            timeout_ns: timeout,
            from: r.pick(&[ExpiryFrom::LastPacket, ExpiryFrom::Insertion]),
        },
        mode,
        max_passes: if gentle { 1000 } else { 2 + r.below(14) as u16 },
        max_swap_passes: if gentle { 1000 } else { r.below(6) as u16 },
        seed: r.next(),
    };
    let mut cfg = cfg;
    if gentle {
        // Only key sets a one-slot cuckoo table can hold: every component of the cuckoo graph (slots
        // as vertices, flows as edges) has no more flows than slots. Otherwise a swap chain cycles
        // for ever while packets keep the entries fresh, and the limits must act (the other test).
        while !cuckoo_feasible(&Table::<u64, AuditState>::new(&cfg).unwrap(), flows) {
            cfg.seed = r.next();
        }
    }
    let drop_p = if gentle {
        0.0
    } else {
        r.pick(&[0.0, 0.0, 0.03, 0.15])
    };
    let late_p = if gentle {
        0.0
    } else {
        r.pick(&[0.0, 0.0, 0.02])
    };
    let dt_max = timeout / r.pick(&[1, 3, 10, 50]) + 1;
    let arrivals_max = if gentle {
        r.pick(&[1, 2, 3])
    } else {
        r.pick(&[1, 2, 4, 8])
    };
    let passes = 100 + r.below(250);
    let ctx =
        format!("seed {seed:#x} cfg {cfg:?} flows {flows} drop {drop_p} late {late_p} dt {dt_max}");

    let mut t: Table<u64, AuditState> = Table::new(&cfg).unwrap();
    let mut nf = AuditFn::default();
    let mut aud = Auditor::new(cfg.expiry);
    let mut seq = vec![0u32; flows as usize];
    let mut pending: Vec<Item> = Vec::new();
    let mut delayed: Vec<(u64, Item)> = Vec::new();
    let mut legit_lost: HashSet<(u64, u32)> = HashSet::new();
    let (mut admitted, mut departed, mut lost_data) = (0u64, 0u64, 0u64);
    let mut now = 0u64;
    let bound = (cfg.max_passes as u64).max(cfg.max_swap_passes as u64 + 1);
    let mut pass_no = 0u64;

    loop {
        let draining = pass_no >= passes;
        if draining && pending.is_empty() && delayed.is_empty() {
            break;
        }
        assert!(
            gentle || pass_no <= passes + bound + 8,
            "no termination: {ctx}"
        );
        assert!(pass_no <= passes + 100_000, "no termination: {ctx}");
        pass_no += 1;
        now += r.below(dt_max + 1);
        t.begin_pass();

        // What was recirculated comes back now, minus drops and late ones.
        let mut items: Vec<Item> = Vec::new();
        for it in std::mem::take(&mut pending) {
            if !draining && r.chance(drop_p) {
                match it {
                    Item::D(_) => lost_data += 1,
                    Item::S(s) => {
                        if std::env::var("FLOWSTATE_TRACE").is_ok() {
                            eprintln!("pass {pass_no} now {now} evicted {:?} (test drop)", s.entry);
                        }
                        legit_lost.insert((s.entry.key, s.entry.value.instance));
                        aud.evicted(&s.entry);
                    }
                }
            } else if !draining && r.chance(late_p) {
                if let Item::S(s) = it {
                    if std::env::var("FLOWSTATE_TRACE").is_ok() {
                        eprintln!("pass {pass_no} now {now} evicted {:?} (test late)", s.entry);
                    }
                    // A late swap can never land: its entry is lost now.
                    legit_lost.insert((s.entry.key, s.entry.value.instance));
                    aud.evicted(&s.entry);
                }
                delayed.push((pass_no + 1 + r.below(3), it));
            } else {
                items.push(it);
            }
        }
        let mut k = 0;
        while k < delayed.len() {
            if delayed[k].0 == pass_no {
                items.push(delayed.swap_remove(k).1);
            } else {
                k += 1;
            }
        }
        // Random order among recirculated items.
        for i in (1..items.len()).rev() {
            let j = r.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
        // New packets, interleaved at random positions (in their own arrival order).
        let mut arrivals: Vec<Item> = Vec::new();
        if !draining {
            for _ in 0..r.below(arrivals_max + 1) {
                let f = r.below(flows);
                let meta = AuditMeta {
                    flow: f,
                    seq: seq[f as usize],
                };
                seq[f as usize] += 1;
                admitted += 1;
                arrivals.push(Item::D(t.admit(f, meta, now)));
            }
        }
        let mut order: Vec<Item> = Vec::with_capacity(items.len() + arrivals.len());
        let (mut a, mut b) = (0, 0);
        while a < items.len() || b < arrivals.len() {
            let take_item = b == arrivals.len() || (a < items.len() && r.chance(0.5));
            if take_item {
                order.push(items[a]);
                a += 1;
            } else {
                order.push(arrivals[b]);
                b += 1;
            }
        }

        let mut next: Vec<Item> = Vec::new();
        for i in 0..order.len() {
            let before = live_map(
                &t,
                swaps_of(&order[i..], &next, t.pass()).iter(),
                now,
                timeout,
            );
            let evicted;
            let mut exit: Option<(u64, AuditOut)> = None;
            match order[i] {
                Item::D(mut p) => {
                    let st = t.step_data(&mut p, &mut nf, now);
                    if let Some(s) = st.spawned {
                        next.push(Item::S(s));
                    }
                    evicted = st.evicted;
                    let fate = match st.result {
                        Verdict::Recirculate => {
                            next.push(Item::D(p));
                            None
                        }
                        Verdict::Exit(o) => {
                            exit = Some((p.meta.flow, o));
                            Some(Fate::Exit(o))
                        }
                        Verdict::Drop(d) => Some(Fate::Drop(d)),
                    };
                    if let Some(fate) = fate {
                        if std::env::var("FLOWSTATE_TRACE").is_ok() {
                            eprintln!(
                                "pass {pass_no} now {now} flow {} seq {} {:?} passes {}",
                                p.meta.flow,
                                p.meta.seq,
                                fate,
                                p.passes()
                            );
                        }
                        departed += 1;
                        assert!(p.passes() <= cfg.max_passes, "{} passes: {ctx}", p.passes());
                        aud.departure(&Departure {
                            meta: p.meta,
                            fate,
                            passes: p.passes(),
                            now,
                        });
                    }
                }
                Item::S(mut s) => {
                    let st = t.step_swap(&mut s, now);
                    assert!(
                        s.hops() <= cfg.max_swap_passes,
                        "swap chain too long: {ctx}"
                    );
                    if let Some(n) = st.spawned {
                        next.push(Item::S(n));
                    }
                    evicted = st.evicted;
                }
            }
            if let Some(e) = evicted {
                if std::env::var("FLOWSTATE_TRACE").is_ok() {
                    eprintln!("pass {pass_no} now {now} evicted {:?}", e);
                }
                legit_lost.insert((e.key, e.value.instance));
                aud.evicted(&e);
            }
            let after = live_map(
                &t,
                swaps_of(&order[i + 1..], &next, t.pass()).iter(),
                now,
                timeout,
            );

            // Consistency: never two states for a flow.
            for (f, v) in &after {
                assert!(v.len() == 1, "flow {f} has {} states {v:?}: {ctx}", v.len());
            }
            // A live state only disappears when expired (time does not move within a pass, so not
            // here), evicted, or carried by a lost swap.
            for (f, v) in &before {
                let inst = v[0].0;
                let still = after.get(f).is_some_and(|w| w[0].0 == inst);
                assert!(
                    still || legit_lost.contains(&(*f, inst)),
                    "flow {f} lost state {inst} without expiry or eviction: {ctx}"
                );
            }
            // The packet that left read its flow's current state, with the current count.
            if let Some((f, o)) = exit {
                if mode != Mode::Weak {
                    let cur = after.get(&f).map(|v| (v[0].0, v[0].1));
                    assert_eq!(
                        cur,
                        Some((o.instance, o.count)),
                        "flow {f} read a stale state: {ctx}"
                    );
                }
            }
        }
        pending = next;
    }

    // Termination: every admitted packet left or was dropped (by the table or by the test).
    assert_eq!(
        admitted,
        departed + lost_data,
        "packets unaccounted for: {ctx}"
    );
    let s = t.stats();
    assert_eq!(s.anomalies, 0, "{ctx}");
    assert_eq!(s.drops_ordering_full, 0, "{ctx}");
    if late_p == 0.0 {
        assert_eq!(
            s.drops_late + s.swaps_late,
            0,
            "late drops without late packets: {ctx}"
        );
    }
    if drop_p == 0.0 && late_p == 0.0 {
        // Swaps and claims are only ever lost by the test: no reset without such a loss.
        assert_eq!(
            s.transient_resets, 0,
            "transient reset without a lost swap: {ctx}"
        );
        if s.drops() == 0 {
            assert_eq!(
                s.order_skips, 0,
                "ordering skip without a lost packet: {ctx}"
            );
        }
    }
    let rep = &aud.report;
    assert_eq!(rep.departures, departed);
    if mode != Mode::Unordered {
        assert_eq!(rep.out_of_order, 0, "Ordering violated: {ctx}");
    } else {
        tot.out_of_order_unordered += rep.out_of_order;
    }
    if mode == Mode::Weak {
        tot.weak_violations += rep.consistency_violations();
    } else {
        assert_eq!(
            rep.consistency_violations(),
            0,
            "Consistency violated: {rep:?} {ctx}"
        );
    }
    assert!(rep.max_passes <= cfg.max_passes);
    if gentle {
        // Nothing lost, no limit near: the table itself drops and evicts nothing.
        assert_eq!((s.drops(), s.evictions), (0, 0), "{s:?} {ctx}");
        assert_eq!(rep.exits, admitted, "{ctx}");
    }
    tot.cases += 1;
    tot.exits += rep.exits;
    tot.drops += rep.dropped();
    tot.inserts += s.inserts;
    tot.swaps += s.swaps;
    tot.evictions += s.evictions;
    tot.resets += s.transient_resets;
    tot.skips += s.order_skips;
}

#[test]
fn random_interleavings_keep_ordering_consistency_termination() {
    let mut tot = Totals::default();
    let cases = std::env::var("FLOWSTATE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600u64);
    if let Ok(seed) = std::env::var("FLOWSTATE_MODEL_SEED") {
        let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).unwrap();
        run_case(seed, std::env::var("FLOWSTATE_GENTLE").is_ok(), &mut tot);
        return;
    }
    for c in 0..cases {
        run_case(0x0F10_57A7E ^ fp_hash::splitmix64(c), false, &mut tot);
    }
    println!("{tot:?}");
    // The cases must actually exercise what they claim to.
    assert!(tot.exits > 50_000, "{tot:?}");
    assert!(tot.swaps > 1_000 && tot.evictions > 100, "{tot:?}");
    assert!(tot.resets > 10 && tot.skips > 10, "{tot:?}");
    assert!(tot.drops > 1_000, "{tot:?}");
}

#[test]
fn without_losses_nothing_is_dropped_or_evicted() {
    let mut tot = Totals::default();
    let cases = std::env::var("FLOWSTATE_GENTLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u64);
    for c in 0..cases {
        run_case(0x006E_171E ^ fp_hash::splitmix64(c), true, &mut tot);
    }
    println!("{tot:?}");
    assert!(tot.exits > 20_000 && tot.swaps > 50, "{tot:?}");
    assert_eq!(tot.drops, 0);
}
