//! In the cluster every frame for a known key leaves its owner's external port exactly once, with one
//! interconnect hop (none if it entered at the owner) — before updates, after updates, and while
//! updates run concurrently with traffic.

use fp_cluster::{build, Cluster, ClusterConfig, Delivery, Frames, GenPort, Mode, Sink, Update};
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

/// Node `i`'s frames carry source MAC 02:00:00:00:00:i.
fn ports(nodes: u8, keys: &[u64], limit: u64, stamps: &Arc<AtomicU64>) -> Vec<GenPort> {
    (0..nodes)
        .map(|i| {
            GenPort::new(
                Frames::to_keys(keys, 64, [2, 0, 0, 0, 0, i]),
                limit,
                stamps.clone(),
                Sink::new(PORTS as usize, true),
            )
        })
        .collect()
}

/// (node, delivery) for everything emitted so far; clears the logs.
fn drain(c: &mut Cluster<GenPort>) -> Vec<(u8, Delivery)> {
    let mut v = vec![];
    for n in &mut c.nodes {
        let id = n.id();
        for d in n.port.sink.log.as_mut().unwrap().drain(..) {
            v.push((id, d));
        }
    }
    v
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
        let ingress = d.src[5];
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
        for n in &mut c.nodes {
            n.port
                .set_frames(Frames::to_keys(&live, 64, [2, 0, 0, 0, 0, n.id()]));
            n.port.add_limit(live.len() as u64);
        }
        c.run_until_idle(1 << 20);
        let total = live.len() as u64 * nodes as u64;
        check_exact(mode, &drain(&mut c), base..base + total, &table);
        // Deleted keys: dropped as unknown, never emitted.
        let deleted: Vec<u64> = es[1200..1500].iter().map(|e| e.0).collect();
        let before = c.counters();
        for n in &mut c.nodes {
            n.port
                .set_frames(Frames::to_keys(&deleted, 64, [2, 0, 0, 0, 0, n.id()]));
            n.port.add_limit(deleted.len() as u64);
        }
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

/// Nodes on their own threads, the control plane moving entries while traffic flows. Every frame is
/// emitted exactly once; frames that entered after the last update of their key completed leave
/// at the new owner and port with one hop (zero at the owner); frames in flight during a move leave
/// at the old or the new owner with at most one extra (redirect) hop.
#[test]
fn updates_while_traffic_flows() {
    let nodes = 4u8;
    let es = entries(5, 3000, nodes);
    let keys: Vec<u64> = es.iter().map(|e| e.0).collect();
    let stamps = Arc::new(AtomicU64::new(0));
    let per_node = 60_000u64;
    let mut cfg = ClusterConfig::new(nodes, Mode::ScaleBricks, PORTS, 5000);
    cfg.ring_slots = 4096;
    let (mut c, mut ctl) = build(&cfg, &es, ports(nodes, &keys, per_node, &stamps)).unwrap();
    // history[key] = [(stamp when the update completed, owner, port)], initial entry at stamp 0.
    let mut history: HashMap<u64, Vec<(u64, u8, u16)>> =
        es.iter().map(|&(k, o, p)| (k, vec![(0, o, p)])).collect();
    let stamps2 = stamps.clone();
    let updates = c.run_threaded(|| {
        let mut done = 0u64;
        let mut i = 0usize;
        // Keep updating until the traffic is almost over.
        while stamps2.load(Ordering::Relaxed) < per_node * nodes as u64 * 9 / 10 {
            let (k, _, p) = es[(fp_hash::splitmix64(i as u64) % es.len() as u64) as usize];
            let cur = history[&k].last().unwrap();
            let (o2, p2) = if i % 4 == 3 {
                (cur.1, (cur.2 + 1) % PORTS)
            } else {
                ((cur.1 + 1) % nodes, p)
            };
            ctl.set(k, o2, p2).unwrap();
            // The update is complete: a read-modify-write on the stamp counter orders it before
            // every stamp handed out later (release sequence).
            let s = stamps2.fetch_add(0, Ordering::AcqRel);
            history.get_mut(&k).unwrap().push((s, o2, p2));
            done += 1;
            i += 1;
            if i.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        done
    });
    assert!(updates > 100, "only {updates} updates ran");
    let total = stamps.load(Ordering::Relaxed);
    assert_eq!(total, per_node * nodes as u64);
    let got = drain(&mut c);
    let cn = c.counters();
    assert_eq!(cn.drops(), 0, "{cn:?}");
    let mut seen = vec![false; total as usize];
    let mut after_update = 0u64;
    for &(node, d) in &got {
        assert!(!seen[d.stamp as usize], "stamp {} emitted twice", d.stamp);
        seen[d.stamp as usize] = true;
        let h = &history[&d.key];
        let ingress = d.src[5];
        // The last update that completed before the frame entered.
        let last = h.iter().rposition(|u| u.0 <= d.stamp).unwrap();
        let (_, o, p) = h[last];
        let next_started = h.get(last + 1).map(|u| u.0);
        if next_started.is_none() {
            // Entered after the key's last update completed (or the key never changed): exactly
            // the current path.
            assert_eq!((node, d.port), (o, p), "key {:#x} stamp {}", d.key, d.stamp);
            assert_eq!(d.hops, (ingress != o) as u8);
            after_update += (h.len() > 1) as u64;
        } else {
            // Possibly in flight during later updates: an owner from the history, and one
            // redirect hop at most per update it was overtaken by.
            let later = h.len() - 1 - last;
            assert!(
                h[last..].iter().any(|u| (u.1, u.2) == (node, d.port)),
                "key {:#x}: emitted at node {node} port {}",
                d.key,
                d.port
            );
            assert!(
                d.hops as usize <= 1 + later,
                "{} hops, {later} later updates",
                d.hops
            );
        }
    }
    assert!(seen.iter().all(|&s| s), "frames lost");
    assert!(after_update > 0);
}

/// Every table of the cluster hashes with its own seed: a hash-partitioned FIB filled to its sized
/// capacity builds (with the home hash equal to the FIB hash, node 0's keys all fell into the first
/// quarter of its buckets and the build failed).
#[test]
fn hash_partitioned_fibs_fill_to_capacity() {
    for nodes in [2u8, 4] {
        let es = entries(9, 100_000, nodes);
        let cfg = ClusterConfig::new(nodes, Mode::HashPartition, PORTS, 100_000);
        let ports: Vec<GenPort> = (0..nodes)
            .map(|_| {
                GenPort::new(
                    Frames::to_keys(&[], 64, [2, 0, 0, 0, 0, 0]),
                    0,
                    Arc::new(AtomicU64::new(0)),
                    Sink::new(4, false),
                )
            })
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
                    let e = copies.entry(d.stamp).or_insert((d.src[5], vec![]));
                    assert_eq!(e.0, d.src[5]);
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
