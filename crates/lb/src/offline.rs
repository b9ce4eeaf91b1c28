//! The load balancer offline: over capture files (`flowplane run --in --out`) and generated traffic
//! (`flowplane demo`), on the engine's software dispatcher (flows steered to workers by 5-tuple
//! hash, time taken from the packets, so a capture replays the same way however fast the machine
//! is), with a report of rates, per-backend shares, connection-table hit rate and drops by reason.

use crate::config::{LbConfig, SeedOrigin, VipMatch};
use crate::snapshot::{Builder, Published, Snapshot};
use crate::stage::LbStage;
use crate::stats::{Outcome, Totals, WorkerStats};
use anyhow::{bail, Context, Result};
use fp_engine::dispatch::{self, Steering};
use fp_engine::driver::{Clock, Options};
use fp_engine::generator::{GenConfig, Generator, Mix, Target};
use fp_engine::memory::NullPort;
use fp_engine::pcap::{PcapReader, PcapWriter};
use fp_engine::port::Port;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The configuration `flowplane demo` runs with (configs/demo.toml).
pub const DEMO_CONFIG: &str = include_str!("../../../configs/demo.toml");

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Packets to generate.
    #[arg(long, default_value_t = 4_000_000)]
    pub packets: u64,
    /// Traffic mix: syn, established, zipf, constant, v4v6, fragmented, malformed, demo.
    #[arg(long, default_value = "demo")]
    pub mix: String,
    /// Distinct connections in the mix.
    #[arg(long, default_value_t = 200_000)]
    pub conns: u64,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Use this configuration instead of the embedded one.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Read and validate a configuration file for an offline run.
pub fn load(path: &Path) -> Result<LbConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    LbConfig::from_toml(&text)
        .map(repeatable)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The flow-hash seed of offline runs whose configuration gives none. A live balancer draws a
/// secret one at each start (a known seed invites hash flooding); offline there is no one to
/// flood, and a capture or a demo replayed twice should choose the same backends.
pub const OFFLINE_SEED: u64 = 0x0ff1_1e5e_ed00;

/// Give a configuration without `balancer.seed` the fixed offline seed.
fn repeatable(mut cfg: LbConfig) -> LbConfig {
    if cfg.balancer.seed_origin == SeedOrigin::Random {
        cfg.balancer.seed = OFFLINE_SEED;
    }
    cfg
}

fn publish(cfg: LbConfig) -> Result<Arc<Published<Snapshot>>> {
    let snap = Builder::new().build(Arc::new(cfg))?;
    Ok(Arc::new(Published::new(Arc::new(snap))))
}

/// Seed of the offline workers' connection tables (placement only; fixed, so runs repeat).
const TABLE_SEED: u64 = 0x0007_ab1e_5eed;

/// What an offline run did.
pub struct Offline {
    /// Each worker's counters.
    pub workers: Vec<Arc<WorkerStats>>,
    /// Connections tracked at the end, per worker (IPv4 + IPv6).
    pub connections: Vec<usize>,
    /// Wall-clock time from start to the last packet out.
    pub elapsed: Duration,
}

/// Run the balancer with `workers` workers from `input` to `output` until the input is
/// exhausted: the workers forward to port 1 (the output), the dispatcher steers by flow hash.
pub fn run_ports(
    snaps: Arc<Published<Snapshot>>,
    input: &mut dyn Port,
    output: &mut dyn Port,
    workers: usize,
    pin: bool,
) -> Result<Offline> {
    let mut stages = Vec::with_capacity(workers);
    for i in 0..workers.max(1) {
        let mut w = LbStage::new(i, snaps.clone(), TABLE_SEED ^ i as u64)
            .with_context(|| format!("worker {i}"))?;
        w.set_output(1);
        stages.push(w);
    }
    let opts = Options {
        name: "fp-lb".into(),
        pin,
        clock: Clock::Packets,
        ..Options::default()
    };
    let d = dispatch::run(
        &mut [input, &mut *output],
        stages,
        &Steering::default(),
        &opts,
        &AtomicBool::new(false),
    )?;
    output
        .flush()
        .with_context(|| format!("writing {}", output.name()))?;
    Ok(Offline {
        workers: d.workers.iter().map(|w| w.stage.stats().clone()).collect(),
        connections: d
            .workers
            .iter()
            .map(|w| {
                let (c4, c6) = w.stage.connections();
                c4 + c6
            })
            .collect(),
        elapsed: d.elapsed,
    })
}

/// Replay capture `input` through the balancer configured by `config` into capture `output`.
pub fn run_capture(
    config: &Path,
    input: &Path,
    output: &Path,
    workers: Option<usize>,
) -> Result<()> {
    let cfg = load(config)?;
    let snaps = publish(cfg)?;
    let mut inp = PcapReader::open(input)?;
    let mut out = PcapWriter::create(output)?;
    let r = run_ports(
        snaps.clone(),
        &mut inp,
        &mut out,
        fp_engine::driver::workers_or_cpus(workers),
        true,
    )?;
    if inp.truncated > 0 {
        eprintln!(
            "warning: {}: the last record was truncated and skipped",
            input.display()
        );
    }
    report(&snaps.load(), &r, &inp, &out);
    Ok(())
}

/// `flowplane demo`: the balancer on generated traffic with the embedded (or a given)
/// configuration.
pub fn demo(a: DemoArgs) -> Result<()> {
    let cfg = match &a.config {
        Some(p) => load(p)?,
        None => LbConfig::from_toml(DEMO_CONFIG)
            .map(repeatable)
            .map_err(|e| anyhow::anyhow!("embedded config: {e}"))?,
    };
    let Some(mix) = Mix::named(&a.mix, a.conns.max(1)) else {
        bail!("--mix {:?}: use one of {}", a.mix, Mix::NAMES.join(", "));
    };
    let targets: Vec<Target> = cfg
        .vips
        .iter()
        .filter_map(|v| match v.matcher {
            VipMatch::Exact(addr) => Some(Target {
                addr,
                port: v.port.max(1),
                protocol: v.protocol,
            }),
            VipMatch::Suffix { .. } => None,
        })
        .collect();
    if targets.is_empty() {
        bail!("the configuration has no VIP with an exact address to send traffic to");
    }
    let snaps = publish(cfg)?;
    let mut gen = Generator::new(GenConfig {
        mix,
        targets,
        packets: Some(a.packets),
        pps: 10e6,
        seed: 0xde30,
        start_ns: 1_000_000_000,
    });
    let mut sink = NullPort::default();
    let workers = fp_engine::driver::workers_or_cpus(a.workers);
    println!(
        "flowplane demo: {} packets of mix {:?} over {} connections, {} workers, embedded config (configs/demo.toml)",
        a.packets, a.mix, a.conns, workers
    );
    let r = run_ports(snaps.clone(), &mut gen, &mut sink, workers, true)?;
    report(&snaps.load(), &r, &gen, &sink);
    Ok(())
}

fn report(snap: &Snapshot, r: &Offline, input: &dyn Port, output: &dyn Port) {
    let t = Totals::sum(r.workers.iter().map(|w| &**w));
    let rx = t.get(Outcome::Rx);
    let tx = t.get(Outcome::Tx);
    let secs = r.elapsed.as_secs_f64();
    println!();
    println!(
        "packets in       {rx:>12}   ({:.3} Mpps over {secs:.2} s wall clock, all workers)",
        rx as f64 / secs / 1e6
    );
    println!(
        "packets out      {tx:>12}   ({} in the output port {:?})",
        output.stats().tx,
        output.name()
    );
    let hits = t.get(Outcome::ConnHit);
    let lookups = hits + t.get(Outcome::ConnMiss) + t.get(Outcome::ConnReselect);
    if lookups > 0 {
        println!(
            "conn table       {:>11.2}%   hit rate ({} hits, {} new, {} re-selected, {} full, {} tracked at end)",
            100.0 * hits as f64 / lookups as f64,
            hits,
            t.get(Outcome::ConnMiss),
            t.get(Outcome::ConnReselect),
            t.get(Outcome::ConnFull),
            r.connections.iter().sum::<usize>()
        );
    }
    let bypass = (
        t.get(Outcome::SynBypassPressure),
        t.get(Outcome::SynBypassRate),
    );
    if bypass.0 + bypass.1 + t.get(Outcome::ConnEvicted) > 0 {
        println!(
            "syn guard        {:>12}   SYNs balanced without an entry ({} under table pressure, {} above \
             new_conn_rate); {} embryonic entries evicted for new connections",
            bypass.0 + bypass.1,
            bypass.0,
            bypass.1,
            t.get(Outcome::ConnEvicted)
        );
    }
    if t.get(Outcome::FragForwarded) + t.get(Outcome::FragHeld) > 0 {
        println!(
            "fragments        {:>12}   forwarded ({} held until their first fragment came)",
            t.get(Outcome::FragForwarded),
            t.get(Outcome::FragHeld)
        );
    }
    println!();
    println!("per backend (packets, share of forwarded, connections):");
    for b in snap.backends.iter().flatten() {
        let (p, _, c) = t.backend.get(b.id as usize).copied().unwrap_or_default();
        println!(
            "  {:<24} {:>10} {:>7.2}% {:>9}{}",
            b.address,
            p,
            if tx > 0 {
                100.0 * p as f64 / tx as f64
            } else {
                0.0
            },
            c,
            if b.healthy { "" } else { "  (down)" }
        );
    }
    println!("per VIP (packets):");
    for v in &snap.vips {
        let (p, _, c) = t.vip.get(v.id as usize).copied().unwrap_or_default();
        println!("  {:<24} {:>10}  {:>9} connections", v.name, p, c);
    }
    let drops = t.drops();
    let total: u64 = drops.iter().map(|d| d.1).sum();
    println!("drops by reason ({total} in all):");
    if drops.is_empty() {
        println!("  none");
    }
    for (name, n) in drops {
        println!("  {name:<32} {n:>10}");
    }
    let ins = input.stats();
    if ins.rx_dropped > 0 {
        println!(
            "input port dropped {} frames (too large or no buffer)",
            ins.rx_dropped
        );
    }
}
