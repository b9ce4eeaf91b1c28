//! In the cluster every frame for a known key leaves its owner's external port exactly once, with one
//! interconnect hop (none if it entered at the owner) — before updates, after updates, and while
//! updates (additions, moves, repoints, deletions) run concurrently with traffic; frames of a
//! deleted key are never emitted once the deletion returned.

use fp_cluster::{
    build, Cluster, ClusterConfig, Delivery, Frames, GenPort, Mode, Update, MAX_HOPS,
};
use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const PORTS: u16 = 4;

fn entries(seed: u64, n: usize, nodes: u8) -> Vec<(u64, u8, u16)> {
    (0..n as u64)
        .map(|i| {
            let r = fp_hash::splitmix64(seed ^ i);
            let key = 0x0200_0000_0000 | (r & 0xFF_FFFF_FFFF);
            let h = fp_hash::splitmix64(r);
            (
                key,
                (h % nodes as u64) as u8,
                ((h >> 20) % PORTS as u64) as u16,
            )
        })
        .collect()
}

/// The source MAC of node `i`'s test frames: 02:00:00:00:00:i.
fn src(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

/// Every node's external ports; traffic enters at port 0 of each node.
fn ports(nodes: u8, keys: &[u64], limit: u64, stamps: &Arc<AtomicU64>) -> Vec<Vec<GenPort>> {
    (0..nodes)
        .map(|i| {
            GenPort::node(
                PORTS,
                Frames::to_keys(keys, 64, src(i)),
                limit,
                stamps,
                true,
            )
        })
        .collect()
}

/// (node, delivery) for everything emitted so far; clears the logs.
fn drain(c: &mut Cluster<GenPort>) -> Vec<(u8, Delivery)> {
    let mut v = vec![];
    for i in 0..c.nodes.len() {
        for p in 0..PORTS as usize {
            for d in c.external_mut(i, p).sink.log.as_mut().unwrap().drain(..) {
                v.push((i as u8, d));
            }
        }
    }
    v
}

/// Inject `frames` (to `keys`) at port 0 of every node.
fn inject(c: &mut Cluster<GenPort>, keys: &[u64]) {
    for i in 0..c.nodes.len() {
        let port = c.external_mut(i, 0);
        port.set_frames(Frames::to_keys(keys, 64, src(i as u8)));
        port.add_limit(keys.len() as u64);
    }
}

/// Every stamp in `stamps` delivered exactly once, at the key's owner and port, with the expected
/// number of hops.
fn check_exact(
    mode: Mode,
    got: &[(u8, Delivery)],
    stamps: std::ops::Range<u64>,
    table: &HashMap<u64, (u8, u16)>,
) {
    let mut seen = HashMap::new();
    for &(node, d) in got {
        assert!(
            stamps.contains(&d.stamp),
            "stamp {} outside {stamps:?}",
            d.stamp
        );
        assert!(
            seen.insert(d.stamp, ()).is_none(),
            "stamp {} emitted twice",
            d.stamp
        );
        let &(owner, port) = table.get(&d.key).expect("delivered an unknown key");
        assert_eq!(
            (node, d.port),
            (owner, port),
            "{mode:?}: key {:#x} emitted at the wrong place",
            d.key
        );
        let ingress = d.src.0[5];
        match mode {
            Mode::ScaleBricks | Mode::Duplicate => {
                assert_eq!(
                    d.hops,
                    (ingress != owner) as u8,
                    "{mode:?}: hops of key {:#x}",
                    d.key
                )
            }
            Mode::HashPartition => assert!(d.hops <= 2),
        }
    }
    assert_eq!(
        seen.len() as u64,
        stamps.end - stamps.start,
        "{mode:?}: frames lost"
    );
}

#[test]
fn every_frame_exits_once_at_its_owner_in_every_mode() {
    for mode in [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition] {
        for nodes in [1u8, 2, 3, 4, 8] {
            let es = entries(nodes as u64, 3000, nodes);
            let keys: Vec<u64> = es.iter().map(|e| e.0).collect();
            let stamps = Arc::new(AtomicU64::new(0));
            let total = 3000 * nodes as u64;
            let cfg = ClusterConfig::new(nodes, mode, PORTS, 4000);
            let (mut c, ctl) = build(&cfg, &es, ports(nodes, &keys, 3000, &stamps)).unwrap();
            c.run_until_idle(1 << 20);
            let table: HashMap<u64, (u8, u16)> = es.iter().map(|&(k, o, p)| (k, (o, p))).collect();
            check_exact(mode, &drain(&mut c), 0..total, &table);
            let cn = c.counters();
            assert_eq!(cn.drops(), 0, "{mode:?} {nodes}: {cn:?}");
            // Hop counts: ScaleBricks and duplication one hop for frames entering away from the
            // owner; hash partitioning two for most.
            let hops: u64 = c.hops();
            let away = (0..nodes)
                .map(|i| es.iter().filter(|e| e.1 != i).count() as u64)
                .sum::<u64>();
            match mode {
                Mode::HashPartition => assert!(hops >= away, "{hops} < {away}"),
                _ => assert_eq!(hops, away),
            }
            assert_eq!(ctl.len(), 3000);
            // Memory: partitioned FIBs hold about 1/n of the entries each.
            let m = c.memory(0);
            match mode {
                Mode::Duplicate => assert_eq!(m.fib_entries, 3000),
                _ => assert!(m.fib_entries < 3000 / nodes as usize + 300),
            }
            assert_eq!(m.gpt_bytes > 0, mode == Mode::ScaleBricks);
        }
    }
}

#[test]
fn after_updates_frames_take_the_new_path() {
    for mode in [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition] {
        let nodes = 4u8;
        let es = entries(77, 4000, nodes);
        let mut table: HashMap<u64, (u8, u16)> = es.iter().map(|&(k, o, p)| (k, (o, p))).collect();
        let stamps = Arc::new(AtomicU64::new(0));
        let mut keys: Vec<u64> = es.iter().map(|e| e.0).collect();
        let cfg = ClusterConfig::new(nodes, mode, PORTS, 6000);
        let (mut c, mut ctl) = build(&cfg, &es, ports(nodes, &keys, 4000, &stamps)).unwrap();
        c.run_until_idle(1 << 20);
        check_exact(mode, &drain(&mut c), 0..16_000, &table);
        // Move 1000 entries, repoint 200, delete 300, add 1000.
        let mut kinds: HashMap<Update, u32> = HashMap::new();
        for (i, &(k, o, p)) in es.iter().enumerate().take(1500) {
            let (o2, p2) = if i < 1000 {
                ((o + 1 + (i % 3) as u8) % nodes, p)
            } else {
                (o, (p + 1) % PORTS)
            };
            if i < 1200 {
                *kinds.entry(ctl.set(k, o2, p2).unwrap()).or_default() += 1;
                table.insert(k, (o2, p2));
            } else {
                assert_eq!(ctl.remove(k).unwrap(), Update::Deleted);
                table.remove(&k);
            }
        }
        for &(k, o, p) in &entries(78, 1000, nodes) {
            if let std::collections::hash_map::Entry::Vacant(v) = table.entry(k) {
                assert_eq!(ctl.set(k, o, p).unwrap(), Update::Added);
                v.insert((o, p));
                keys.push(k);
            }
        }
        assert_eq!(kinds[&Update::Moved], 1000);
        assert_eq!(kinds[&Update::Repointed], 200);
        assert_eq!(ctl.len(), table.len());
        // Traffic for every key still known (old and new), from every node.
        let live: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|k| table.contains_key(k))
            .collect();
        let base = stamps.load(Ordering::Relaxed);
        inject(&mut c, &live);
        c.run_until_idle(1 << 20);
        let total = live.len() as u64 * nodes as u64;
        check_exact(mode, &drain(&mut c), base..base + total, &table);
        // Deleted keys: dropped as unknown, never emitted.
        let deleted: Vec<u64> = es[1200..1500].iter().map(|e| e.0).collect();
        let before = c.counters();
        inject(&mut c, &deleted);
        c.run_until_idle(1 << 20);
        assert!(
            drain(&mut c).is_empty(),
            "{mode:?}: a deleted key was forwarded"
        );
        let after = c.counters();
        assert_eq!(
            after.drop_unknown - before.drop_unknown,
            300 * nodes as u64,
            "{mode:?}"
        );
        assert_eq!(
            after.drop_link_full + after.drop_malformed + after.drop_oversize,
            0
        );
    }
}

/// A key's history: (the stamp counter when the update completed, the entry from then on; `None`:
/// no entry). Every key starts with one element at stamp 0.
type History = Vec<(u64, Option<(u8, u16)>)>;

/// Nodes on their own threads, the control plane adding, moving, repointing and deleting entries
/// while traffic flows to known keys and to keys that are not (yet) in the table. Every frame is
/// emitted at most once, and:
/// * a frame that entered after its key's last update completed leaves at that entry's owner and
///   port with one hop (zero at the owner) — in particular frames of a key added by `set` —, or,
///   if that update was a `remove` (or the key never had an entry), is never emitted: it is
///   dropped and counted as unknown;
/// * a frame in flight during later updates of its key leaves at an owner and port from the
///   history since it entered, with at most one extra (redirect) hop per such update, or is
///   dropped as unknown if the key had no entry at some point of that history;
/// * every frame that is not emitted is counted as `drop_unknown`, and nothing else is dropped.
#[test]
fn updates_while_traffic_flows() {
    let nodes = 4u8;
    let mut uniq = std::collections::HashSet::new();
    let pool: Vec<(u64, u8, u16)> = entries(5, 4000, nodes)
        .into_iter()
        .filter(|e| uniq.insert(e.0))
        .collect();
    // The first 3000 keys start in the table; the others get added (and may be deleted again).
    let (present, _) = pool.split_at(3000);
    let keys: Vec<u64> = pool.iter().map(|e| e.0).collect();
    let stamps = Arc::new(AtomicU64::new(0));
    let per_node = 60_000u64;
    let mut cfg = ClusterConfig::new(nodes, Mode::ScaleBricks, PORTS, 5000);
    cfg.ring_slots = 4096;
    // The ports log what enters too, so frames the cluster dropped are accounted for, not only the
    // ones it emitted.
    let (mut c, mut ctl) = build(&cfg, present, ports(nodes, &keys, per_node, &stamps)).unwrap();
    let mut history: HashMap<u64, History> = pool
        .iter()
        .enumerate()
        .map(|(i, &(k, o, p))| (k, vec![(0, (i < present.len()).then_some((o, p)))]))
        .collect();
    let stamps2 = stamps.clone();
    let (kinds, during) = c.run_threaded(|| {
        let mut kinds: HashMap<Update, u64> = HashMap::new();
        let mut i = 0u64;
        let mut during = 0u64;
        // Keep updating until the traffic is almost over, and until every kind of update ran a
        // few times (on a slow, busy machine the traffic may end first).
        let few = |kinds: &HashMap<Update, u64>| {
            [
                Update::Added,
                Update::Moved,
                Update::Repointed,
                Update::Deleted,
            ]
            .iter()
            .any(|u| kinds.get(u).copied().unwrap_or(0) < 50)
        };
        while stamps2.load(Ordering::Relaxed) < per_node * nodes as u64 * 9 / 10 || few(&kinds) {
            let r = fp_hash::splitmix64(i ^ 0xC0FF_EE00);
            let (k, o0, p0) = pool[(r % pool.len() as u64) as usize];
            let cur = history[&k].last().unwrap().1;
            // Absent keys are added; present ones moved (4/8), repointed (1/8) or deleted (3/8).
            let (next, want) = match cur {
                None => (
                    Some(((o0 + (r >> 40) as u8 % nodes) % nodes, p0)),
                    Update::Added,
                ),
                Some((o, p)) => match (r >> 32) % 8 {
                    0..=3 => (Some(((o + 1) % nodes, p)), Update::Moved),
                    4 => (Some((o, (p + 1) % PORTS)), Update::Repointed),
                    _ => (None, Update::Deleted),
                },
            };
            let got = match next {
                Some((o, p)) => ctl.set(k, o, p).unwrap(),
                None => ctl.remove(k).unwrap(),
            };
            assert_eq!(got, want, "key {k:#x}");
            // The update is complete: a read-modify-write on the stamp counter orders it before
            // every stamp handed out later (release sequence).
            let s = stamps2.fetch_add(0, Ordering::AcqRel);
            history.get_mut(&k).unwrap().push((s, next));
            *kinds.entry(got).or_default() += 1;
            during += (s < per_node * nodes as u64) as u64;
            i += 1;
            if i.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        (kinds, during)
    });
    assert!(
        during > 100,
        "only {during} updates ran while traffic flowed"
    );
    let live = history.values().filter(|h| h.last().unwrap().1.is_some());
    assert_eq!(ctl.len(), live.count());
    let total = stamps.load(Ordering::Relaxed);
    assert_eq!(total, per_node * nodes as u64);
    // stamp → (key, ingress node).
    let mut entered: Vec<Option<(u64, u8)>> = vec![None; total as usize];
    for i in 0..c.nodes.len() {
        for port in c.externals(i) {
            for &(s, k) in port.entered.as_ref().unwrap() {
                assert!(entered[s as usize].replace((k, i as u8)).is_none());
            }
        }
    }
    // stamp → (node, port, hops) where it was emitted.
    let mut emitted: Vec<Option<(u8, u16, u8)>> = vec![None; total as usize];
    let mut emitted_n = 0u64;
    for (id, d) in drain(&mut c) {
        let (k, ingress) = entered[d.stamp as usize].expect("emitted a frame that never entered");
        assert_eq!((d.key, d.src.0[5]), (k, ingress));
        let prev = emitted[d.stamp as usize].replace((id, d.port, d.hops));
        assert!(prev.is_none(), "stamp {} emitted twice", d.stamp);
        emitted_n += 1;
    }
    let cn = c.counters();
    assert_eq!(
        cn.drop_link_full + cn.drop_malformed + cn.drop_oversize,
        0,
        "{cn:?}"
    );
    assert_eq!(cn.emitted, emitted_n);
    assert_eq!(cn.emitted + cn.drop_unknown, total, "frames lost: {cn:?}");
    let (mut after_add, mut after_move, mut after_delete, mut must_drop) = (0u64, 0u64, 0u64, 0u64);
    let mut bounced = 0u64;
    for (s, e) in entered.iter().enumerate() {
        let (key, ingress) = e.expect("every stamp entered");
        let s = s as u64;
        let h = &history[&key];
        // The last update that completed before the frame entered, and how many followed.
        let last = h.iter().rposition(|u| u.0 <= s).unwrap();
        let later = h.len() - 1 - last;
        let out = emitted[s as usize];
        match (later, h[last].1) {
            (0, Some((o, p))) => {
                assert_eq!(
                    out,
                    Some((o, p, (ingress != o) as u8)),
                    "key {key:#x} stamp {s}: history {h:?}"
                );
                if last > 0 {
                    match h[last - 1].1 {
                        None => after_add += 1,
                        Some((o1, _)) if o1 != o => after_move += 1,
                        Some(_) => {}
                    }
                }
            }
            (0, None) => {
                assert_eq!(
                    out, None,
                    "key {key:#x} stamp {s}: emitted after its entry was deleted: {h:?}"
                );
                must_drop += 1;
                after_delete += (last > 0) as u64;
            }
            (_, _) => match out {
                Some((node, port, hops)) => {
                    assert!(
                        h[last..].iter().any(|u| u.1 == Some((node, port))),
                        "key {key:#x} stamp {s}: emitted at node {node} port {port}: {h:?}"
                    );
                    if h[last..].iter().all(|u| u.1.is_some()) {
                        assert!(
                            hops as usize <= 1 + later,
                            "key {key:#x} stamp {s}: {hops} hops, {later} later updates: {h:?}"
                        );
                    } else {
                        // While a key has no entry, the partition tables map it to an arbitrary
                        // node, and that value changes whenever another key of its group is
                        // updated: the frame follows the newer tables, up to the hop bound.
                        assert!(hops <= MAX_HOPS, "key {key:#x} stamp {s}: {hops} hops");
                        if hops as usize > 1 + later {
                            bounced += 1;
                        }
                    }
                }
                None => assert!(
                    h[last..].iter().any(|u| u.1.is_none()),
                    "key {key:#x} stamp {s}: dropped, but it had an entry all along: {h:?}"
                ),
            },
        }
    }
    assert!(cn.drop_unknown >= must_drop);
    eprintln!(
        "updates {kinds:?}; frames {total}: emitted {emitted_n}, dropped as unknown {} ({must_drop} entered after a deletion or before any entry); checked after add {after_add}, move {after_move}, delete {after_delete}; emitted after more than one hop per update while the key had no entry: {bounced}; redirected {}",
        cn.drop_unknown, cn.redirected
    );
    assert!(
        after_add > 0 && after_move > 0 && after_delete > 0,
        "checked after add {after_add}, move {after_move}, delete {after_delete}"
    );
}

/// Every table of the cluster hashes with its own seed: a hash-partitioned FIB filled to its sized
/// capacity builds (with the home hash equal to the FIB hash, node 0's keys all fell into the first
/// quarter of its buckets and the build failed).
#[test]
fn hash_partitioned_fibs_fill_to_capacity() {
    for nodes in [2u8, 4] {
        let es = entries(9, 100_000, nodes);
        let cfg = ClusterConfig::new(nodes, Mode::HashPartition, PORTS, 100_000);
        let stamps = Arc::new(AtomicU64::new(0));
        let ports: Vec<Vec<GenPort>> = (0..nodes)
            .map(|_| GenPort::node(PORTS, Frames::to_keys(&[], 64, src(0)), 0, &stamps, false))
            .collect();
        let (c, _) = build(&cfg, &es, ports).unwrap();
        let total: usize = (0..nodes as usize).map(|i| c.memory(i).fib_entries).sum();
        assert_eq!(total, 100_000);
    }
}

/// A flood's copy: (node, external port, hops).
type FloodCopy = (u8, u16, u8);

/// Broadcast and multicast frames are flooded: every external port of every node emits each one
/// exactly once — except the port it entered on — with one interconnect hop away from its ingress
/// node, and no node forwards a flood again. Unicast frames in the same bursts still leave once, at
/// their owner.
#[test]
fn group_frames_are_flooded_once_to_every_other_port() {
    let group = [0xFFFF_FFFF_FFFFu64, 0x0100_5E00_0016, 0x3333_0000_0001];
    for mode in [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition] {
        for nodes in [1u8, 2, 3, 4] {
            let es = entries(40 + nodes as u64, 50, nodes);
            let table: HashMap<u64, (u8, u16)> = es.iter().map(|&(k, o, p)| (k, (o, p))).collect();
            let mut keys: Vec<u64> = es.iter().map(|e| e.0).collect();
            // Group frames between unicast ones, so bursts mix both.
            for (i, g) in group.iter().enumerate() {
                keys.insert(10 + 15 * i, *g);
            }
            let stamps = Arc::new(AtomicU64::new(0));
            let n = keys.len() as u64;
            let cfg = ClusterConfig::new(nodes, mode, PORTS, 100);
            let (mut c, _) = build(&cfg, &es, ports(nodes, &keys, n, &stamps)).unwrap();
            c.run_until_idle(1 << 20);
            let got = drain(&mut c);
            // stamp → (ingress node, [(node, port, hops)]); frames from node i carry source MAC
            // 02:00:00:00:00:i and enter on its port 0.
            let mut copies: HashMap<u64, (u8, Vec<FloodCopy>)> = HashMap::new();
            for &(node, d) in &got {
                if group.contains(&d.key) {
                    let e = copies.entry(d.stamp).or_insert((d.src.0[5], vec![]));
                    assert_eq!(e.0, d.src.0[5]);
                    e.1.push((node, d.port, d.hops));
                } else {
                    let (o, p) = table[&d.key];
                    assert_eq!((node, d.port), (o, p), "{mode:?} {nodes}");
                }
            }
            assert_eq!(
                copies.len(),
                group.len() * nodes as usize,
                "{mode:?} {nodes}"
            );
            for (stamp, (ingress, mut v)) in copies {
                v.sort_unstable();
                let want: Vec<FloodCopy> = (0..nodes)
                    .flat_map(|o| (0..PORTS).map(move |p| (o, p)))
                    .filter(|&(o, p)| (o, p) != (ingress, 0))
                    .map(|(o, p)| (o, p, (o != ingress) as u8))
                    .collect();
                assert_eq!(v, want, "{mode:?} {nodes}: copies of flood {stamp}");
            }
            let cn = c.counters();
            let floods = group.len() as u64 * nodes as u64;
            assert_eq!(cn.drops(), 0, "{mode:?} {nodes}: {cn:?}");
            assert_eq!(cn.flooded, floods);
            // One interconnect frame per flood and other node (the in-memory fabric copies a
            // flood into each node's queue).
            assert_eq!(cn.flood_ic_rx, floods * (nodes as u64 - 1));
            assert_eq!(cn.flood_emitted, floods * (nodes as u64 * PORTS as u64 - 1));
            assert_eq!(cn.emitted, (n - group.len() as u64) * nodes as u64);
        }
    }
}
