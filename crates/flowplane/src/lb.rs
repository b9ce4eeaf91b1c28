//! `flowplane run` and `flowplane demo`: the load balancer over pcap files or generated traffic.

use anyhow::{bail, Context, Result};
use fp_io::gen::{GenConfig, Generator, Mix, Target};
use fp_io::mem::NullPort;
use fp_io::pcap::{PcapReader, PcapWriter};
use fp_io::runner::{run_lb, RunConfig, RunResult};
use fp_pipeline::config::{LbConfig, VipMatch};
use fp_pipeline::port::Port;
use fp_pipeline::snapshot::{Builder, Published, Snapshot};
use fp_pipeline::stats::{Outcome, Totals};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The configuration `flowplane demo` runs with (configs/demo.toml).
pub const DEMO_CONFIG: &str = include_str!("../../../configs/demo.toml");

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Load-balancer configuration (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Offline: input capture (pcap, Ethernet or raw IP).
    #[arg(
        long = "in",
        value_name = "IN.pcap",
        requires = "output",
        conflicts_with = "interface"
    )]
    pub input: Option<PathBuf>,
    /// Offline: output capture, the encapsulated packets sent toward backends.
    #[arg(long = "out", value_name = "OUT.pcap", requires = "input")]
    pub output: Option<PathBuf>,
    /// Live: balance the traffic of this interface (one-armed: packets to backends leave through
    /// it too). Runs until SIGTERM/SIGINT; SIGHUP reloads the configuration.
    #[arg(
        long,
        short = 'i',
        value_name = "IF",
        required_unless_present = "input"
    )]
    pub interface: Option<String>,
    /// Live: socket kind, af_packet (TPACKET_V3 + fan-out) or af_xdp.
    #[arg(long, default_value = "af_packet")]
    pub driver: fp_io::live::Driver,
    /// Live, AF_XDP: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto", value_parser = parse_xdp_mode)]
    pub xdp_mode: fp_io::afxdp::ModeChoice,
    /// Live: serve metrics, reload, trace and status over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Live: do not pin worker i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
}

fn parse_xdp_mode(s: &str) -> Result<fp_io::afxdp::ModeChoice, String> {
    use fp_io::afxdp::ModeChoice;
    match s {
        "auto" => Ok(ModeChoice::Auto),
        "native" | "drv" => Ok(ModeChoice::Native),
        "generic" | "skb" => Ok(ModeChoice::Generic),
        _ => Err(format!("{s:?}: use auto, native or generic")),
    }
}

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

fn load(path: &std::path::Path) -> Result<LbConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    LbConfig::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn publish(cfg: LbConfig) -> Result<Arc<Published<Snapshot>>> {
    let snap = Builder::new().build(Arc::new(cfg))?;
    Ok(Arc::new(Published::new(Arc::new(snap))))
}

fn run_config(workers: Option<usize>) -> RunConfig {
    let mut rc = RunConfig::default();
    if let Some(w) = workers {
        rc.workers = w.max(1);
    }
    rc.pin = true;
    rc
}

pub fn run(a: RunArgs) -> Result<()> {
    let (Some(input_path), Some(output_path)) = (&a.input, &a.output) else {
        let interface = a
            .interface
            .clone()
            .expect("clap requires --interface or --in");
        return crate::live::run(&crate::live::LiveOptions {
            config: a.config,
            interface,
            driver: a.driver,
            xdp_mode: a.xdp_mode,
            workers: a.workers.unwrap_or_else(|| run_config(None).workers),
            admin: a.admin,
            pin: !a.no_pin,
        });
    };
    let cfg = load(&a.config)?;
    let snaps = publish(cfg)?;
    let mut input = PcapReader::open(input_path)?;
    let mut output = PcapWriter::create(output_path)?;
    let rc = run_config(a.workers);
    let r = run_lb(
        snaps.clone(),
        &mut input,
        &mut output,
        &rc,
        &AtomicBool::new(false),
    )?;
    if input.truncated > 0 {
        eprintln!(
            "warning: {}: the last record was truncated and skipped",
            input_path.display()
        );
    }
    report(&snaps.load(), &r, &input, &output);
    Ok(())
}

pub fn demo(a: DemoArgs) -> Result<()> {
    let cfg = match &a.config {
        Some(p) => load(p)?,
        None => {
            LbConfig::from_toml(DEMO_CONFIG).map_err(|e| anyhow::anyhow!("embedded config: {e}"))?
        }
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
    let rc = run_config(a.workers);
    println!(
        "flowplane demo: {} packets of mix {:?} over {} connections, {} workers, embedded config (configs/demo.toml)",
        a.packets, a.mix, a.conns, rc.workers
    );
    let r = run_lb(
        snaps.clone(),
        &mut gen,
        &mut sink,
        &rc,
        &AtomicBool::new(false),
    )?;
    report(&snaps.load(), &r, &gen, &sink);
    Ok(())
}

fn report(snap: &Snapshot, r: &RunResult, input: &dyn Port, output: &dyn Port) {
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
