//! `flowplane-bench NAME`: flowplane's benchmark programs, each measuring a peer in the same run.
//!
//! This binary is separate from the shipped `flowplane` so that the peers (hashbrown, dashmap, sux's
//! VFunc), the plotting library and the namespace test harness are linked here only. Every benchmark
//! prints a human table as it goes and, with `--json FILE`, writes one JSON object per measurement
//! (docs/architecture.md, "How to add", describes the records):
//!
//! ```text
//! {"bench":"fib","case":"lookup_batched","params":{"entries":67108864,...},"value":41.7,"unit":"Mops",
//!  "peer":"hashbrown","peer_value":19.2,"ratio":2.17}
//! ```
//!
//! `ratio` is ours / peer when higher is better (throughput) and peer / ours when lower is better
//! (ns, bytes), so a ratio above 1 always means flowplane wins. `--quick` runs a reduced version that
//! finishes within a minute on 2 cores; `--plots DIR` writes PNG plots.
//!
//! Every `--json` file starts with a provenance line (commit, command, date, machine; [`mod@env`]),
//! and every peer allocates on the same kind of pages as flowplane's tables: the binary's global
//! allocator puts large blocks on transparent huge pages ([`heap`]), and records carry the pages
//! both sides got (`pages`, `peer_pages`).

#![deny(unsafe_code)]

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

mod cluster;
#[cfg(feature = "dpdk")]
mod dpdk;
mod env;
mod fib;
mod flowcache;
mod flowstate;
mod handover;
mod heap;
mod lb;
mod live;
mod maglev;
mod plot;
mod setsep;
mod sux_peer;
mod switch;

/// Large heap allocations on transparent huge pages, so peers run on the same pages as flowplane.
#[global_allocator]
static HEAP: heap::HugeHeap = heap::HugeHeap;

/// Options every benchmark accepts.
#[derive(Args, Clone, Debug, Default)]
pub struct CommonOpts {
    /// Reduced run (small tables, few repetitions) that finishes within about a minute.
    #[arg(long)]
    pub quick: bool,
    /// Append one JSON record per measurement to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write PNG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Seed for generated keys and traffic (results are reproducible for a given seed).
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
}

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// CuckooSwitch FIB: lookup Mops vs size, threads, batch size; factor analysis; updates; memory.
    Fib(fib::FibArgs),
    /// Flow cache: BLP + PBLRU vs set-associative and cuckoo-lite; hit rates (simulated and analytical),
    /// lookup latency, throughput with a miss penalty.
    Flowcache(flowcache::FlowcacheArgs),
    /// The load balancer's data path per worker: SYN, non-SYN and constant 5-tuple traffic with 1M and
    /// 10M tracked connections, against a parse-and-emit baseline (Maglev Fig 9).
    Lb(lb::LbArgs),
    /// The load balancer on veth per port type (AF_PACKET, AF_XDP) next to kernel forwarding.
    Live(live::LiveArgs),
    /// The forwarding gap of restarting the live balancer with 1M tracked connections: the
    /// overlapped handover against stop-then-start through the state directory.
    Handover(handover::HandoverArgs),
    /// CuckooSwitch forwarding: Mpps vs FIB size with the factor analysis, vs FIB update rate.
    Switch(switch::SwitchArgs),
    /// SetSep partition table and the ScaleBricks cluster.
    Setsep(setsep::SetsepArgs),
    /// The ScaleBricks cluster on live ports, one node per core, against full duplication and
    /// hash partitioning (throughput per core, memory per node, hops).
    Cluster(cluster::ClusterArgs),
    /// Maglev hashing: balance, disruption, population time vs Karger and rendezvous.
    Maglev(maglev::MaglevArgs),
    /// Switcharoo flow-state table with data-path insertions, and the Flowlet load balancer.
    Flowstate(flowstate::FlowstateArgs),
}

#[derive(Parser, Debug)]
#[command(
    name = "flowplane-bench",
    version,
    about = "flowplane's benchmarks: each prints a table and, with --json FILE, writes records with a peer measured in the same run"
)]
struct Cli {
    #[command(subcommand)]
    which: BenchCmd,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    env::configure_heap();
    run(cli.which)
}

fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Fib(a) => fib::run(a),
        BenchCmd::Lb(a) => lb::run(a),
        BenchCmd::Live(a) => live::run(a),
        BenchCmd::Handover(a) => handover::run(a),
        BenchCmd::Switch(a) => switch::run(a),
        BenchCmd::Flowcache(a) => flowcache::run(a),
        BenchCmd::Setsep(a) => setsep::run(a),
        BenchCmd::Cluster(a) => cluster::run(a),
        BenchCmd::Maglev(a) => maglev::run(a),
        BenchCmd::Flowstate(a) => flowstate::run(a),
    }
}

/// The shipped `flowplane` binary, which the live benchmarks run as the system under test: the one
/// next to this benchmark binary (cargo builds both into the same directory), or the one named by
/// `FLOWPLANE_BIN`.
pub fn flowplane_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FLOWPLANE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().context("locating this executable")?;
    let p = me.with_file_name("flowplane");
    anyhow::ensure!(
        p.is_file(),
        "{} not found: build it next to flowplane-bench (cargo build --release -p flowplane -p fp-bench) \
         or set FLOWPLANE_BIN",
        p.display()
    );
    Ok(p)
}

/// The median of `v` (the upper one for an even count); `v` must not be empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measure competitors in alternating rounds and keep each one's best round. Background load on a
/// shared machine only ever slows a round down, and alternating (in both orders) gives every
/// competitor the same exposure to it, so ratios stay meaningful when absolute numbers drift.
pub fn contest(rounds: usize, runs: &[&dyn Fn() -> Result<f64>]) -> Result<Vec<f64>> {
    let mut best = vec![0.0f64; runs.len()];
    for round in 0..rounds.max(1) {
        for j in 0..runs.len() {
            let k = if round % 2 == 0 {
                j
            } else {
                runs.len() - 1 - j
            };
            best[k] = best[k].max(runs[k]()?);
        }
    }
    Ok(best)
}

/// Two competitors in alternating rounds (in both orders), as [`contest`]: each one's best round,
/// and the median over rounds of `b / a` within a round. The two runs of a round are next to each
/// other in time, so a spell of background load that slows one round of both cancels out of its
/// ratio; the median is the robust figure where such spells are common.
pub fn paired(
    rounds: usize,
    a: &dyn Fn() -> Result<f64>,
    b: &dyn Fn() -> Result<f64>,
) -> Result<(f64, f64, f64)> {
    let (mut best, mut ratios) = ((0.0f64, 0.0f64), Vec::new());
    for round in 0..rounds.max(1) {
        let (x, y) = if round % 2 == 0 {
            let x = a()?;
            (x, b()?)
        } else {
            let y = b()?;
            (a()?, y)
        };
        best = (best.0.max(x), best.1.max(y));
        ratios.push(y / x);
    }
    Ok((best.0, best.1, median(ratios)))
}

/// Whether a larger value is better (throughput) or a smaller one (latency, bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One measurement.
#[derive(Clone, Debug)]
pub struct Record {
    pub case: String,
    pub params: Map<String, Value>,
    pub value: f64,
    pub unit: String,
    pub better: Better,
    pub peer: Option<(String, f64)>,
}

impl Record {
    /// A measurement where higher is better (Mops, Mpps, hit rate).
    pub fn higher(case: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Record {
            case: case.into(),
            params: Map::new(),
            value,
            unit: unit.into(),
            better: Better::Higher,
            peer: None,
        }
    }

    /// A measurement where lower is better (ns, bytes, cycles).
    pub fn lower(case: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Record {
            better: Better::Lower,
            ..Record::higher(case, value, unit)
        }
    }

    /// Add a parameter.
    pub fn param(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.params.insert(key.to_string(), v.into());
        self
    }

    /// Attach the peer's value measured in the same run on the same input.
    pub fn peer(mut self, name: impl Into<String>, value: f64) -> Self {
        self.peer = Some((name.into(), value));
        self
    }

    /// ours / peer (higher better) or peer / ours (lower better); above 1 means flowplane is ahead.
    pub fn ratio(&self) -> Option<f64> {
        let (_, p) = self.peer.as_ref()?;
        let r = match self.better {
            Better::Higher => self.value / p,
            Better::Lower => p / self.value,
        };
        r.is_finite().then_some(r)
    }

    fn to_json(&self, bench: &str) -> Value {
        let mut m = Map::new();
        m.insert("bench".into(), bench.into());
        m.insert("case".into(), self.case.clone().into());
        m.insert("params".into(), Value::Object(self.params.clone()));
        m.insert("value".into(), round(self.value).into());
        m.insert("unit".into(), self.unit.clone().into());
        if let Some((name, v)) = &self.peer {
            m.insert("peer".into(), name.clone().into());
            m.insert("peer_value".into(), round(*v).into());
            if let Some(r) = self.ratio() {
                m.insert("ratio".into(), round(r).into());
            }
        }
        Value::Object(m)
    }
}

/// Round to 4 significant digits for output (measurements are not more precise than that).
fn round(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let mag = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * mag).round() / mag
}

fn fmt_num(x: f64) -> String {
    let r = round(x);
    if r.abs() >= 1e6 || (r != 0.0 && r.abs() < 1e-3) {
        format!("{r:.3e}")
    } else {
        format!("{r}")
    }
}

fn fmt_params(p: &Map<String, Value>) -> String {
    p.iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            _ => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Collects a benchmark's records: prints each as it arrives, appends it to the JSON file, and prints
/// the whole table at the end.
pub struct Report {
    bench: &'static str,
    records: Vec<Record>,
    json: Option<BufWriter<File>>,
    started: Instant,
}

impl Report {
    pub fn new(bench: &'static str, opts: &CommonOpts) -> Result<Self> {
        let mut json = match &opts.json {
            Some(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening --json file {}", path.display()))?;
                Some(BufWriter::new(f))
            }
            None => None,
        };
        if let Some(j) = &mut json {
            serde_json::to_writer(&mut *j, &env::provenance(bench))?;
            j.write_all(b"\n")?;
            j.flush()?;
        }
        if let Some(dir) = &opts.plots {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        println!(
            "# flowplane-bench {bench}{} (seed {:#x}); commit {} ({}); heap pages for peers: {}",
            if opts.quick { " --quick" } else { "" },
            opts.seed,
            env!("FP_BENCH_COMMIT"),
            env!("FP_BENCH_TREE"),
            env::heap_pages()
        );
        Ok(Report {
            bench,
            records: Vec::new(),
            json,
            started: Instant::now(),
        })
    }

    /// Record one measurement (printed at once).
    pub fn add(&mut self, r: Record) -> Result<()> {
        println!("{}", Self::line(&r));
        if let Some(j) = &mut self.json {
            serde_json::to_writer(&mut *j, &r.to_json(self.bench))?;
            j.write_all(b"\n")?;
            j.flush()?;
        }
        self.records.push(r);
        Ok(())
    }

    /// Print a free-form note (machine facts, page kinds) in the output, prefixed with `#`.
    pub fn note(&self, s: &str) {
        println!("# {s}");
    }

    fn line(r: &Record) -> String {
        let mut s = format!(
            "{:<26} {:>12} {:<8} {}",
            r.case,
            fmt_num(r.value),
            r.unit,
            fmt_params(&r.params)
        );
        if let Some((p, v)) = &r.peer {
            s.push_str(&format!("  | {p} {}", fmt_num(*v)));
            if let Some(ratio) = r.ratio() {
                s.push_str(&format!("  ratio {ratio:.2}"));
            }
        }
        s
    }

    /// Print the summary table (markdown, so it can be pasted into the README).
    pub fn finish(self) -> Result<()> {
        println!();
        println!("| case | params | value | unit | peer | peer value | ratio |");
        println!("|---|---|---:|---|---|---:|---:|");
        for r in &self.records {
            let (peer, pv) = match &r.peer {
                Some((p, v)) => (p.clone(), fmt_num(*v)),
                None => ("".into(), "".into()),
            };
            let ratio = r.ratio().map(|x| format!("{x:.2}")).unwrap_or_default();
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.case,
                fmt_params(&r.params),
                fmt_num(r.value),
                r.unit,
                peer,
                pv,
                ratio
            );
        }
        println!(
            "# {} records in {:.1} s",
            self.records.len(),
            self.started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_direction() {
        let r = Record::higher("x", 20.0, "Mops").peer("p", 10.0);
        assert_eq!(r.ratio(), Some(2.0));
        let r = Record::lower("x", 5.0, "ns").peer("p", 10.0);
        assert_eq!(r.ratio(), Some(2.0));
        assert_eq!(Record::higher("x", 1.0, "Mops").ratio(), None);
    }

    #[test]
    fn json_shape() {
        let r = Record::higher("lookup_batched", 41.7, "Mops")
            .param("entries", 64)
            .peer("hashbrown", 19.2);
        let v = r.to_json("fib");
        assert_eq!(v["bench"], "fib");
        assert_eq!(v["case"], "lookup_batched");
        assert_eq!(v["params"]["entries"], 64);
        assert_eq!(v["unit"], "Mops");
        assert_eq!(v["peer"], "hashbrown");
        assert_eq!(v["ratio"], 2.172);
    }

    #[test]
    fn rounding() {
        assert_eq!(round(123456.0), 123500.0);
        assert_eq!(round(0.012345), 0.01235);
        assert_eq!(round(0.0), 0.0);
    }
}
