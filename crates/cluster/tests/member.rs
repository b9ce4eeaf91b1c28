//! Nodes with their own control planes ([`Member`]): fed the same changes in the same order, every
//! node's tables agree with the entries (partition table, FIB share), digests are equal, a node
//! built later from the final entries agrees with nodes that applied each change, and the cluster
//! made of their tables delivers every frame once at its owner with one hop. A node marked down
//! gets no frames: they are dropped at the ingress node and counted.

use fp_cluster::{assemble, ClusterConfig, Delivery, Frames, GenPort, Member, Mode, Update};
use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

const PORTS: u16 = 3;
const NODES: u8 = 4;

fn key(i: u64) -> u64 {
    0x0200_0000_0000 | (fp_hash::splitmix64(i) & 0xFF_FFFF_FFFF)
}

/// Traffic to `keys` entering at port 0 of every node; returns what was emitted (node, delivery).
fn run(
    cfg: &ClusterConfig,
    tables: Vec<fp_cluster::Tables>,
    keys: &[u64],
) -> (Vec<(u8, Delivery)>, fp_cluster::Counters) {
    let stamps = Arc::new(AtomicU64::new(0));
    let ports = (0..cfg.nodes)
        .map(|i| {
            GenPort::node(
                PORTS,
                Frames::to_keys(keys, 64, MacAddr([2, 0, 0, 0, 0, i])),
                keys.len() as u64,
                &stamps,
                true,
            )
        })
        .collect();
    let mut c = assemble(cfg, tables, ports).unwrap();
    c.run_until_idle(1 << 20);
    let mut got = vec![];
    for i in 0..cfg.nodes as usize {
        for p in 0..PORTS as usize {
            for d in c.external_mut(i, p).sink.log.as_mut().unwrap().drain(..) {
                got.push((i as u8, d));
            }
        }
    }
    (got, c.counters())
}

#[test]
fn members_fed_the_same_changes_agree_and_forward_like_one_cluster() {
    for mode in [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition] {
        let cfg = ClusterConfig::new(NODES, mode, PORTS, 4000);
        let initial: Vec<(u64, u8, u16)> = (0..1500)
            .map(|i| (key(i), (i % NODES as u64) as u8, (i % PORTS as u64) as u16))
            .collect();
        let mut members = vec![];
        let mut tables = vec![];
        for id in 0..NODES {
            let (m, t) = Member::build(&cfg, id, &initial).unwrap();
            members.push(m);
            tables.push(Some(t));
        }
        let mut model: HashMap<u64, (u8, u16)> =
            initial.iter().map(|&(k, o, p)| (k, (o, p))).collect();
        // 3000 changes: adds, moves, repoints, removals, repeats.
        let mut kinds = HashMap::new();
        for step in 0..3000u64 {
            let r = fp_hash::splitmix64(step ^ 0xABCD);
            let k = key(r % 2500);
            let remove = r.is_multiple_of(5);
            let (o, p) = ((r >> 8) as u8 % NODES, (r >> 16) as u16 % PORTS);
            let mut outcome = None;
            for m in &mut members {
                let u = if remove { m.remove(k) } else { m.set(k, o, p) }.unwrap();
                assert!(
                    outcome.is_none() || outcome == Some(u),
                    "members disagree on {u:?}"
                );
                outcome = Some(u);
            }
            *kinds.entry(outcome.unwrap()).or_insert(0) += 1;
            if remove {
                model.remove(&k);
            } else {
                model.insert(k, (o, p));
            }
        }
        for u in [
            Update::Added,
            Update::Moved,
            Update::Repointed,
            Update::Deleted,
        ] {
            assert!(
                kinds.get(&u).copied().unwrap_or(0) > 50,
                "{mode:?}: {kinds:?}"
            );
        }
        // Every member agrees with the model and with the others.
        let digest = members[0].digest();
        for m in &members {
            assert_eq!(m.len(), model.len());
            m.verify()
                .unwrap_or_else(|e| panic!("{mode:?} node {}: {e}", m.id()));
            assert_eq!(m.digest(), digest, "{mode:?} node {}", m.id());
        }
        // A node restarted now builds from the final entries: same digest, same answers.
        let last: Vec<(u64, u8, u16)> = model.iter().map(|(&k, &(o, p))| (k, o, p)).collect();
        let (fresh, fresh_tables) = Member::build(&cfg, 2, &last).unwrap();
        assert_eq!(fresh.digest(), digest);
        fresh.verify().unwrap();
        tables[2] = Some(fresh_tables);
        // The cluster of these tables (three incremental, one fresh) forwards every frame once.
        let keys: Vec<u64> = model.keys().copied().collect();
        let (got, counters) = run(
            &cfg,
            tables.into_iter().map(Option::unwrap).collect(),
            &keys,
        );
        assert_eq!(counters.drops(), 0, "{mode:?}: {counters:?}");
        assert_eq!(got.len(), keys.len() * NODES as usize, "{mode:?}");
        for (node, d) in got {
            let (o, p) = model[&d.key];
            assert_eq!((node, d.port), (o, p), "{mode:?}: {:#x}", d.key);
            let ingress = d.src.0[5];
            match mode {
                Mode::HashPartition => assert!(d.hops <= 2),
                _ => assert_eq!(d.hops, (ingress != o) as u8, "{mode:?}: {:#x}", d.key),
            }
        }
    }
}

#[test]
fn frames_for_a_down_node_are_dropped_at_the_ingress() {
    for mode in [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition] {
        let cfg = ClusterConfig::new(NODES, mode, PORTS, 4000);
        let es: Vec<(u64, u8, u16)> = (0..1000)
            .map(|i| (key(i), (i % NODES as u64) as u8, (i % PORTS as u64) as u16))
            .collect();
        let mut members = vec![];
        let mut tables = vec![];
        for id in 0..NODES {
            let (m, t) = Member::build(&cfg, id, &es).unwrap();
            members.push(m);
            tables.push(t);
        }
        // Node 1's lease expired: every other node marks it down.
        for m in members.iter().filter(|m| m.id() != 1) {
            m.set_down(1, true);
        }
        let keys: Vec<u64> = es.iter().map(|e| e.0).collect();
        let (got, c) = run(&cfg, tables, &keys);
        // Node 1 itself still forwards what enters there; nothing reaches it over the interconnect.
        assert!(
            got.iter().all(|(n, d)| *n != 1 || d.hops == 0),
            "{mode:?}: a frame crossed the interconnect to node 1"
        );
        // Frames for node 1's entries that entered elsewhere: dropped, counted, not flooded.
        let to_down = es.iter().filter(|e| e.1 == 1).count() as u64 * (NODES as u64 - 1);
        assert_eq!(c.flooded, 0);
        match mode {
            Mode::HashPartition => {
                // Frames whose home is node 1 are dropped too, wherever they go.
                assert!(c.drop_owner_down >= to_down, "{mode:?}: {c:?}");
            }
            _ => assert_eq!(c.drop_owner_down, to_down, "{mode:?}: {c:?}"),
        }
        assert_eq!(
            c.drop_owner_down + got.len() as u64 + c.drop_unknown,
            keys.len() as u64 * NODES as u64,
            "{mode:?}: {c:?}"
        );
        assert_eq!(c.drop_unknown, 0, "{mode:?}: {c:?}");
    }
}
