//! `flowplane-bench cluster`: the ScaleBricks cluster on live ports, one node per core, against
//! full duplication and hash partitioning on the same ports, entries and frames (ScaleBricks
//! §6.3: Fig 8's forwarding rate and Fig 11's memory per node, here with two nodes — this
//! machine's two cores).
//!
//! Topology (network namespaces made and removed by the benchmark):
//!
//! ```text
//!   snd: s0 ══ p0 node 0 (CPU 0) ic0 ══ ic0 node 1 (CPU 1) p0 ══ s1 :snd
//! ```
//!
//! Each node is `fp_cluster::harness` on one external port and the interconnect (a veth pair joining
//! the two nodes: a two-node mesh), its worker pinned to its core. A sender thread in `snd`
//! writes 60-byte frames whose destinations are uniform over every entry, alternating bursts into
//! node 0's and node 1's external port, as fast as the sockets take them; each frame leaves at
//! its owner's external port and comes back to `snd`, where the veths' `rx_packets` count what
//! the cluster delivered. Every entry's owner is one of the two nodes, uniformly, so under
//! ScaleBricks and full duplication half the frames enter at their owner and the other half cross
//! the interconnect once (0.5 hops per frame); under hash partitioning a frame first goes to its
//! key's hash-home node, which is the owner only half the time, so a quarter of the frames cross
//! twice (ingress → home → owner) and 1.0 hops per frame is expected.
//!
//! Reported per FIB size and mode (ScaleBricks with each baseline as its peer): the nodes'
//! forwarding threads' CPU time per delivered frame, as frames per second per core of it (the
//! sender, on the same two cores, bounds the delivered rate, so the rate is a parameter); the
//! delivered rate; the tables' memory per node; interconnect hops per frame. Rounds alternate the
//! modes and keep each mode's best.
//!
//! And Fig 11's shape, from measured tables rather than the paper's formula: for clusters of 1 to
//! 32 nodes, each scheme's tables are built for 1M entries and the largest node's bytes per
//! cluster entry measured; the entries a cluster holds with 16 MiB of table memory per node (the
//! paper's setting) follow (`cluster_capacity_16mib`).

use super::{CommonOpts, Record, Report};
use anyhow::{anyhow, bail, Context, Result};
use fp_cluster::{build_tables, harness, ClusterConfig, Mode, Tables};
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use fp_testnet::{Link, Netns, TestNet};
use fp_wire::ethernet::MacAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Seconds measured per case (after 0.5 s of warm-up). Default 4 (quick 1.5).
    #[arg(long)]
    pub secs: Option<f64>,
    /// FIB sizes (entries in the cluster). Default 1M, 8M, 32M (quick: 1M).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Alternating rounds per size. Default 3 (quick 1).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Port driver of the nodes.
    #[arg(long, default_value = "af_packet")]
    pub driver: String,
}

const FRAME: usize = 60;
const MODES: [Mode; 3] = [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition];
const MIB: f64 = (1 << 20) as f64;

struct Bed {
    _net: TestNet,
    snd: Netns,
    nodes: [Netns; 2],
    /// The sender's ends of the nodes' external ports.
    links: [Link; 2],
    snd_mac: [u8; 6],
}

fn bed() -> Result<Bed> {
    let net = TestNet::new("bench-cluster")?;
    let snd = net.ns("snd")?;
    let n0 = net.ns("n0")?;
    let n1 = net.ns("n1")?;
    for ns in [&snd, &n0, &n1] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    }
    let (s0, _) = net.veth(&snd, "s0", &n0, "p0")?;
    let (s1, _) = net.veth(&snd, "s1", &n1, "p0")?;
    let (a, b) = net.veth(&n0, "ic0", &n1, "ic0")?;
    for l in [&a, &b] {
        l.set_mtu(1600)?;
    }
    let snd_mac = s0.mac()?;
    Ok(Bed {
        _net: net,
        snd,
        nodes: [n0, n1],
        links: [s0, s1],
        snd_mac,
    })
}

/// The run time of this process's thread named `name`, ns.
fn named_thread_cpu_ns(name: &str) -> Result<u64> {
    for e in std::fs::read_dir("/proc/self/task")?.flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let tid: i32 = e.file_name().to_string_lossy().parse()?;
            return crate::env::thread_cpu_ns(tid);
        }
    }
    bail!("no thread named {name}")
}

/// What one run of one mode measured.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Frames per second delivered back to the sender.
    pps: f64,
    offered_pps: f64,
    /// The two node threads' CPU time per delivered frame, ns.
    node_ns: f64,
    /// Interconnect frames per delivered frame.
    hops: f64,
    drops: u64,
}

fn run_mode(
    b: &Bed,
    cfg: &ClusterConfig,
    tables: &[Tables],
    driver: &str,
    frames: &Arc<Vec<[u8; FRAME]>>,
    secs: f64,
) -> Result<Run> {
    let mut nodes = Vec::with_capacity(2);
    for i in 0..2u8 {
        let d = driver.to_string();
        let ports = b.nodes[i as usize].enter(move || harness::open(&["p0"], "ic0", &d))??;
        let mut nc = cfg.node_config(i);
        nc.ports = 1;
        nodes.push(harness::start_on(
            nc,
            tables[i as usize].clone(),
            ports,
            Some(i as usize),
        )?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let sender = {
        let (frames, stop, offered) = (frames.clone(), stop.clone(), offered.clone());
        b.snd.spawn_thread(move || -> Result<()> {
            let mut ports = [
                AfPacketPort::open("s0", &AfPacketConfig::default())?,
                AfPacketPort::open("s1", &AfPacketConfig::default())?,
            ];
            let mut pool = Pool::new(4 * MAX_BURST);
            let mut out = burst();
            let mut next = 0usize;
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..MAX_BURST {
                    let Some(mut p) = pool.get() else { break };
                    p.fill(&frames[next]);
                    next = (next + 1) % frames.len();
                    out.push(p);
                }
                let n = ports[k].tx_burst(&mut out, &mut pool);
                offered.fetch_add(n as u64, Ordering::Relaxed);
                k ^= 1;
            }
            Ok(())
        })?
    };
    let sample = || -> Result<(Instant, u64, u64, u64, u64)> {
        let mut delivered = 0;
        for l in &b.links {
            delivered += l.stats()?.rx_packets;
        }
        let cpu = named_thread_cpu_ns("fp-node0-0")? + named_thread_cpu_ns("fp-node1-0")?;
        let ic: u64 = nodes.iter().map(|n| n.stats().counters.ic_tx).sum();
        Ok((
            Instant::now(),
            delivered,
            offered.load(Ordering::Relaxed),
            cpu,
            ic,
        ))
    };
    std::thread::sleep(Duration::from_millis(500));
    let a = sample()?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let z = sample()?;
    stop.store(true, Ordering::Relaxed);
    sender
        .join()
        .map_err(|_| anyhow!("sender panicked"))?
        .context("sender")?;
    let mut drops = 0;
    for n in nodes {
        drops += n.stop()?.counters.drops();
    }
    let dt = (z.0 - a.0).as_secs_f64();
    let delivered = (z.1 - a.1).max(1);
    Ok(Run {
        pps: delivered as f64 / dt,
        offered_pps: (z.2 - a.2) as f64 / dt,
        node_ns: (z.3 - a.3) as f64 / delivered as f64,
        hops: (z.4 - a.4) as f64 / delivered as f64,
        drops,
    })
}

pub fn run(a: ClusterArgs) -> Result<()> {
    let quick = a.common.quick;
    let secs = a.secs.unwrap_or(if quick { 1.5 } else { 4.0 }).max(0.5);
    let rounds = a.rounds.unwrap_or(if quick { 1 } else { 3 }).max(1);
    let sizes = if !a.sizes.is_empty() {
        a.sizes.clone()
    } else if quick {
        vec![1 << 20]
    } else {
        vec![1 << 20, 8 << 20, 32 << 20]
    };
    fp_engine::live::driver(&a.driver).map_err(|e| anyhow!("--driver {e}"))?;
    let mut report = Report::new("cluster", &a.common)?;
    report.note(&format!(
        "cluster: two nodes on live ports ({}), one per core, joined by a veth interconnect; a \
         sender thread alternating 60-byte frames (destinations uniform over the entries) into \
         both nodes' external port; {secs} s per case after 0.5 s warm-up, best of {rounds} \
         alternating rounds; per-core rate = 1 / (node threads' CPU time per delivered frame)",
        a.driver
    ));
    report.note(
        "cluster: each ScaleBricks record has two peers measured in the same run on the same \
         ports, entries and frames: full duplication, then hash partitioning",
    );
    capacity(
        &mut report,
        a.common.seed,
        if quick {
            &[1, 2, 4, 8]
        } else {
            &[1, 2, 4, 8, 16, 32]
        },
    )?;
    let b = bed()?;
    for &n in &sizes {
        // Entries: owners uniform over the two nodes, every host on external port 0.
        let entries: Vec<(u64, u8, u16)> = crate::setsep::cluster_entries(n, 2, a.common.seed)
            .into_iter()
            .map(|(k, o, _)| (k, o, 0))
            .collect();
        let frames: Arc<Vec<[u8; FRAME]>> = {
            let mut f = [0u8; FRAME];
            f[6..12].copy_from_slice(&b.snd_mac);
            f[12..14].copy_from_slice(&[0x88, 0xb6]);
            Arc::new(
                (0..1u64 << 20)
                    .map(|j| {
                        let k =
                            entries[(fp_hash::splitmix64(j ^ a.common.seed) % n as u64) as usize].0;
                        f[0..6].copy_from_slice(&MacAddr::from_u64(k).0);
                        f
                    })
                    .collect(),
            )
        };
        let mut built = Vec::new();
        for mode in MODES {
            let t = Instant::now();
            let mut cfg = ClusterConfig::new(2, mode, 1, n);
            cfg.seed = a.common.seed;
            cfg.build_threads = 2;
            let (tables, control) = build_tables(&cfg, &entries)?;
            let mut mem = 0usize;
            for t in &tables {
                mem += t.fib.stats().bytes() + t.gpt.as_ref().map_or(0, |g| g.stats().bytes());
            }
            let pages = tables[0].fib.stats().pages.to_string();
            report.note(&format!(
                "cluster {n} entries, {}: tables built in {:.1} s, {:.1} MiB per node (FIB on {pages})",
                mode.name(),
                t.elapsed().as_secs_f64(),
                mem as f64 / 2.0 / MIB
            ));
            built.push((mode, cfg, tables, control, mem as f64 / 2.0 / MIB, pages));
        }
        let mut best: Vec<Option<Run>> = vec![None; MODES.len()];
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..MODES.len()).collect()
            } else {
                (0..MODES.len()).rev().collect()
            };
            for k in order {
                let (mode, cfg, tables, ..) = &built[k];
                let r = run_mode(&b, cfg, tables, &a.driver, &frames, secs)?;
                eprintln!(
                    "# cluster {n} {} round {round}: {:.0} kpps delivered of {:.0} offered, \
                     {:.0} ns node CPU/frame, {:.2} hops/frame, {} drops",
                    mode.name(),
                    r.pps / 1e3,
                    r.offered_pps / 1e3,
                    r.node_ns,
                    r.hops,
                    r.drops
                );
                if r.drops != 0 {
                    bail!(
                        "{} {n}: {} frames dropped by the nodes",
                        mode.name(),
                        r.drops
                    );
                }
                if best[k].is_none_or(|b| r.node_ns < b.node_ns) {
                    best[k] = Some(r);
                }
            }
        }
        let runs: Vec<Run> = best.into_iter().map(|r| r.expect("rounds ran")).collect();
        let sb = runs[0];
        for k in 1..MODES.len() {
            let (peer, p) = (MODES[k].name(), runs[k]);
            let tag = |r: Record| {
                r.param("mode", Mode::ScaleBricks.name())
                    .param("nodes", 2)
                    .param("entries", n)
                    .param("via", a.driver.as_str())
            };
            report.add(
                tag(Record::higher(
                    "cluster_live_forward_per_core",
                    1e6 / sb.node_ns,
                    "kpps",
                ))
                .param("node_cpu_ns", sb.node_ns.round())
                .param("peer_node_cpu_ns", p.node_ns.round())
                .peer(peer, 1e6 / p.node_ns),
            )?;
            report.add(
                tag(Record::higher(
                    "cluster_live_delivered",
                    sb.pps / 1e3,
                    "kpps",
                ))
                .param("offered_kpps", (sb.offered_pps / 1e3).round())
                .param("peer_offered_kpps", (p.offered_pps / 1e3).round())
                .peer(peer, p.pps / 1e3),
            )?;
            report.add(
                tag(Record::lower(
                    "cluster_live_memory_per_node",
                    built[0].4,
                    "MiB",
                ))
                .param("pages", built[0].5.as_str())
                .param("peer_pages", built[k].5.as_str())
                .peer(peer, built[k].4),
            )?;
            report.add(
                tag(Record::lower("cluster_live_hops", sb.hops, "hops/frame")).peer(peer, p.hops),
            )?;
        }
        drop(built);
    }
    report.finish()
}

/// Per-node table memory per cluster entry of each scheme for clusters of `nodes` nodes (tables
/// built for 1M entries, the largest node counted), and the entries 16 MiB per node hold.
fn capacity(report: &mut Report, seed: u64, nodes: &[u8]) -> Result<()> {
    const N: usize = 1 << 20;
    const BUDGET: f64 = 16.0 * MIB;
    report.note(
        "cluster_capacity_16mib: Fig 11's shape from measured tables: each scheme built for 1M \
         entries (owners uniform), the largest node's table bytes (FIB share + partition table) \
         per cluster entry, and the entries 16 MiB per node would hold",
    );
    let per_entry = |n: u8, mode: Mode| -> Result<f64> {
        let entries = crate::setsep::cluster_entries(N, n, seed);
        let mut cfg = ClusterConfig::new(n, mode, 4, N);
        cfg.seed = seed;
        cfg.build_threads = 2;
        let (tables, _control) = build_tables(&cfg, &entries)?;
        let most = tables
            .iter()
            .map(|t| t.fib.stats().bytes() + t.gpt.as_ref().map_or(0, |g| g.stats().bytes()))
            .max()
            .unwrap_or(0);
        Ok(most as f64 / N as f64)
    };
    // Full duplication does not depend on the node count.
    let dup = per_entry(1, Mode::Duplicate)?;
    for &n in nodes {
        let sb = per_entry(n, Mode::ScaleBricks)?;
        let hash = per_entry(n, Mode::HashPartition)?;
        for (peer, p) in [(Mode::Duplicate, dup), (Mode::HashPartition, hash)] {
            report.add(
                Record::higher("cluster_capacity_16mib", BUDGET / sb / 1e6, "M entries")
                    .param("mode", Mode::ScaleBricks.name())
                    .param("nodes", n)
                    .param("bytes_per_entry_per_node", (sb * 1000.0).round() / 1000.0)
                    .param(
                        "peer_bytes_per_entry_per_node",
                        (p * 1000.0).round() / 1000.0,
                    )
                    .peer(peer.name(), BUDGET / p / 1e6),
            )?;
        }
    }
    Ok(())
}
