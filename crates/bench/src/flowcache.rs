//! `flowplane-bench flowcache`: the flow-cache microbenchmarks of Zhou et al., ATC 2020 (§7.3), and
//! the hit-rate simulation against the paper's analysis (§4, appendices A and B).
//!
//! **α sweeps.** For each cache size (default 4 MiB, which the paper's L3 holds, and 64 MiB, which
//! it does not), key popularity (uniform, Zipf θ = 0.99) and oversubscription factor α (working set
//! / entries), every variant is built empty and warmed until its hit rate stops increasing (windows
//! of one working set; stop when the last window beats the one four windows earlier by less than
//! 0.05 percentage point or twice the sampling noise; at most 64 working sets at 4 MiB, 32 above;
//! the number used is reported). Warm-ups run on `--warm-threads` threads; measurements run one at a
//! time on one thread, on pre-generated segments of lookups identical for every variant:
//!
//! * `lookup`: cost per lookup of batched lookups (32 per batch, buckets prefetched) on the warm
//!   cache, no inserts, in cycles of the nominal clock (and ns): the lowest of the segments (other
//!   jobs on a shared machine only ever add time);
//! * `throughput`: other segments with an emulated miss penalty (default 1000 cycles: a busy loop
//!   calibrated to that time) and an insert after every miss, in million lookups per second of the
//!   thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so time spent preempted by other jobs on a
//!   shared machine is not counted (wall-clock throughput is reported too, as a parameter);
//! * `hit_rate`: the hit rate of the throughput passes over all segments, next to the analytical
//!   expectation for uniform popularity (appendix A for set-associative, appendix B for BLP; for
//!   cuckoo-lite §4.3's empirical lower bound `0.99 min(1, 0.93 / alpha)`, `analysis_kind =
//!   empirical_lower_bound`), which is a lower bound for Zipf (appendix C).
//!
//! Variants, in the paper's terms: "4-way" (scalar: stock OvS SMC), "4-way w/ SIMD", "8-way w/
//! SIMD", "2-4 cuckoo-lite", "2-4 BLP", "w/ PBLRU" (BLP + PBLRU) and DC-Bubble (BLP + DC-Bubble),
//! plus BLP's scalar path (measured on a copy of the same warm cache). At sizes up to 4 MiB (or with
//! `--all-policies`) every design is also run with every policy. The peer of every record is the
//! 4-way SIMD cache with random eviction at the same point (the paper's baseline: "we implemented
//! this optimization and use it as the baseline for comparison", §6); the 4-way SIMD record's own
//! peer is the scalar 4-way.
//!
//! Tables use huge pages when available (flowplane's default); `--normal-pages-mib` repeats the
//! uniform measurement on 4 KiB pages (default: 64 MiB at α = 1), the regime of a malloc'd cache.
//!
//! **Lookup cost against size** (`lookup_vs_size`): α = 1, uniform, each design with random
//! eviction filled with two working sets of lookups, then batched lookups and *dependent* lookups
//! (one at a time, each hash depending on the previous result, so no two overlap) at 1 to 256 MiB on
//! huge and on 4 KiB pages.

use super::plot::{self, Axes, Series};
use super::{CommonOpts, Record, Report};
use anyhow::{bail, Context, Result};
use fp_flowcache::analysis::{self, Analysis};
use fp_flowcache::sim::{self, Popularity, WarmUp, Workload, BATCH};
use fp_flowcache::{
    Blp, Config, CuckooLite, DcBubble, Design, FlowCache, Isa, PagePolicy, Pblru, Policy, Random,
    SetAssoc4, SetAssoc8,
};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct FlowcacheArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Cache sizes in MiB (4 bytes per entry). Default 4,64 (quick: 1).
    #[arg(long = "sizes-mib", value_delimiter = ',')]
    pub sizes_mib: Vec<u64>,
    /// Oversubscription factors (working set / cache entries). Default
    /// 0.5,0.75,0.95,1,1.25,1.5,2 (quick: 0.5,0.95,1.5).
    #[arg(long, value_delimiter = ',')]
    pub alphas: Vec<f64>,
    /// Key popularity: uniform, zipf (θ = 0.99). Default both.
    #[arg(long, value_delimiter = ',')]
    pub dists: Vec<String>,
    /// Emulated miss penalty in cycles of the nominal clock (§7.3: 1000).
    #[arg(long, default_value_t = 1000)]
    pub miss_penalty: u64,
    /// PBLRU promotes one hit in N on average.
    #[arg(long, default_value_t = Pblru::DEFAULT_ONE_IN)]
    pub pblru_one_in: u32,
    /// Warm-up cap in working sets. Default 64 at 4 MiB and below, 32 above (the paper warms "about
    /// 20x"), 16 with --quick.
    #[arg(long)]
    pub max_warmup: Option<u32>,
    /// Lookups per measurement segment. Default 262144 (quick: 131072).
    #[arg(long)]
    pub trace: Option<usize>,
    /// Measurement segments, N for the lookup-cost pass and N other ones for the throughput pass.
    /// Lookup cost is the lowest of its N segments (other jobs on a shared machine only ever add
    /// time); throughput and hit rate are measured over all N throughput segments together (thread
    /// CPU time). Default 8 (quick: 4).
    #[arg(long)]
    pub segments: Option<usize>,
    /// Run every design with every policy at every size (default: only at sizes up to 4 MiB, and
    /// not with --quick; otherwise the paper's variants).
    #[arg(long)]
    pub all_policies: bool,
    /// Nominal clock in GHz used to express times in cycles (default: "cpu MHz" of /proc/cpuinfo).
    #[arg(long)]
    pub ghz: Option<f64>,
    /// Table sizes in MiB for the lookup-cost-vs-size case (α = 1, uniform, every design with
    /// random eviction; batched and dependent lookups; huge and 4 KiB pages). Default 1,4,16,64,256
    /// (quick: 1,16); 0 skips the case.
    #[arg(long = "latency-sizes-mib", value_delimiter = ',')]
    pub latency_sizes_mib: Vec<u64>,
    /// Pages for the cache tables of the α sweeps: auto (huge pages when available, flowplane's
    /// default) or 4k (normal pages, as a malloc'd cache such as OvS's would get).
    #[arg(long, default_value = "auto")]
    pub pages: String,
    /// Sizes (MiB) at which to repeat the uniform measurement on 4 KiB pages (a table that does not
    /// fit in the TLB either, as a malloc'd cache would be). Default 64 (quick: none); 0 skips.
    #[arg(long = "normal-pages-mib", value_delimiter = ',')]
    pub normal_pages_mib: Vec<u64>,
    /// Oversubscription factors for the 4 KiB-page runs. Default 1.
    #[arg(long = "normal-pages-alphas", value_delimiter = ',')]
    pub normal_pages_alphas: Vec<f64>,
    /// Threads that warm caches up in parallel (untimed); measurements always run on one thread.
    #[arg(long, default_value_t = 2)]
    pub warm_threads: usize,
}

/// The variants: a design, a policy, and whether its scalar path is measured too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    A4(Pol),
    A8(Pol),
    Cuckoo(Pol),
    Blp(Pol),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pol {
    Random,
    Pblru,
    Dc,
}

/// The paper's series (Figures 8 and 9).
const PAPER: &[Variant] = &[
    Variant::A4(Pol::Random),
    Variant::A8(Pol::Random),
    Variant::Cuckoo(Pol::Random),
    Variant::Blp(Pol::Random),
    Variant::Blp(Pol::Pblru),
    Variant::Blp(Pol::Dc),
];

/// Every design with every policy.
const ALL: &[Variant] = &[
    Variant::A4(Pol::Random),
    Variant::A4(Pol::Pblru),
    Variant::A4(Pol::Dc),
    Variant::A8(Pol::Random),
    Variant::A8(Pol::Pblru),
    Variant::A8(Pol::Dc),
    Variant::Cuckoo(Pol::Random),
    Variant::Cuckoo(Pol::Pblru),
    Variant::Cuckoo(Pol::Dc),
    Variant::Blp(Pol::Random),
    Variant::Blp(Pol::Pblru),
    Variant::Blp(Pol::Dc),
];

/// Label of the baseline (the peer).
const BASELINE: &str = "4-way";
const BASELINE_SCALAR: &str = "4-way scalar";

/// What one measurement point shares.
struct Point<'a> {
    entries: usize,
    keys: u64,
    alpha: f64,
    wl: &'a Workload,
    /// Segments for the lookup-cost passes and, drawn separately, for the throughput passes; the
    /// same for every variant. Separate draws matter: PBLRU and DC-Bubble move entries on hits, so
    /// replaying the lookup pass's keys in the throughput pass would favour them.
    lookup_segments: &'a [Vec<u64>],
    segments: &'a [Vec<u64>],
    seed: u64,
    warm_cap: u32,
    penalty: Penalty,
    pblru_one_in: u32,
    pages: PagePolicy,
}

/// One variant measured at one point.
#[derive(Clone, Debug)]
struct Outcome {
    label: String,
    design: &'static str,
    policy: &'static str,
    isa: Isa,
    warm_ws: f64,
    converged: bool,
    /// (working sets done, window hit rate) of the warm-up.
    warm_curve: Vec<(f64, f64)>,
    hit: f64,
    lookup_ns: f64,
    /// Lookups per second of thread CPU time.
    mops: f64,
    /// Lookups per second of wall-clock time (includes time preempted by other jobs).
    wall_mops: f64,
    analysis: Analysis,
}

fn short_name<D: Design>() -> &'static str {
    match D::ID {
        "4way" => "4-way",
        "8way" => "8-way",
        "cuckoo-lite" => "cuckoo-lite",
        "blp" => "BLP",
        other => other,
    }
}

fn label<D: Design, P: Policy>(isa: Isa) -> String {
    let mut s = short_name::<D>().to_string();
    if P::ID != "random" {
        s.push('+');
        s.push_str(P::NAME);
    }
    if isa.is_scalar() {
        s.push_str(" scalar");
    }
    s
}

/// The emulated slow path: a fixed amount of CPU work (a dependent multiply chain), calibrated to
/// last the miss penalty on an idle core. Work, not a wait on the clock, so that time the thread
/// spends preempted by other jobs is neither counted (throughput is measured in thread CPU time)
/// nor able to shorten the penalty.
#[derive(Clone, Copy, Debug)]
struct Penalty {
    iters: u64,
    /// Measured duration of one penalty (ns).
    ns: f64,
}

#[inline(never)]
fn burn(iters: u64) -> u64 {
    let mut x = black_box(iters);
    for _ in 0..iters {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    }
    black_box(x)
}

impl Penalty {
    /// Iterations of [`burn`] that take `target_ns` (best of many trials, so preemption does not
    /// inflate the calibration).
    fn calibrate(target_ns: f64) -> Penalty {
        let per_iter = |n: u64| {
            (0..40)
                .map(|_| {
                    let t = Instant::now();
                    burn(n);
                    t.elapsed().as_nanos() as f64 / n as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        let measure = |iters: u64| {
            (0..200)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..100 {
                        burn(iters);
                    }
                    t.elapsed().as_nanos() as f64 / 100.0
                })
                .fold(f64::INFINITY, f64::min)
        };
        // A first estimate from long runs, then one correction for the per-call overhead.
        let mut iters = ((target_ns / per_iter(100_000)).round() as u64).max(1);
        iters = ((iters as f64 * target_ns / measure(iters)).round() as u64).max(1);
        let ns = measure(iters);
        Penalty { iters, ns }
    }
}

/// Batched lookups over the trace on the warm cache, no inserts: ns per lookup.
fn lookup_pass<D: Design, P: Policy>(cache: &mut FlowCache<D, P>, trace: &[u64]) -> f64 {
    let mut out = [None; BATCH];
    let mut hits = 0usize;
    let t = Instant::now();
    for chunk in trace.chunks(BATCH) {
        let o = &mut out[..chunk.len()];
        cache.lookup_batch(chunk, |i, v| v == Workload::tag(chunk[i]), o);
        hits += o.iter().filter(|x| x.is_some()).count();
    }
    let secs = t.elapsed().as_secs_f64();
    black_box(hits);
    secs * 1e9 / trace.len() as f64
}

/// The trace with a miss penalty and an insert after each miss: (hit rate, Mops).
fn throughput_pass<D: Design, P: Policy>(
    cache: &mut FlowCache<D, P>,
    trace: &[u64],
    penalty: Penalty,
) -> u64 {
    let mut out = [None; BATCH];
    let mut hits = 0u64;
    for chunk in trace.chunks(BATCH) {
        let o = &mut out[..chunk.len()];
        cache.lookup_batch(chunk, |i, v| v == Workload::tag(chunk[i]), o);
        hits += sim::settle_misses(cache, chunk, o, |_| {
            burn(penalty.iters);
        });
    }
    hits
}

/// One lookup at a time, each hash depending on the previous result (through a mask that is zero at
/// run time but opaque to the compiler and the CPU): the latency of a lookup, with no overlap between
/// lookups. ns per lookup.
fn dependent_pass<D: Design, P: Policy>(cache: &mut FlowCache<D, P>, trace: &[u64]) -> f64 {
    let zero = black_box(0u64);
    let mut prev = 0u64;
    let t = Instant::now();
    for &h in trace {
        let h = h ^ (prev & zero);
        prev = cache
            .lookup(h, |v| v == Workload::tag(h))
            .map_or(1, |v| v as u64);
    }
    let secs = t.elapsed().as_secs_f64();
    black_box(prev);
    secs * 1e9 / trace.len() as f64
}

/// Lookup cost of one design at one table size: (label, batched ns, dependent ns, hit rate).
fn size_point<D: Design>(
    entries: usize,
    pages: PagePolicy,
    seed: u64,
    segments: &[Vec<u64>],
    wl: &Workload,
) -> Result<(String, f64, f64, f64, String)> {
    let mut cache =
        FlowCache::<D, Random>::new(&Config::with_entries(entries).seed(seed).pages(pages))
            .with_context(|| format!("building {} of {entries} entries", D::NAME))?;
    // Fill: two working sets of lookups and inserts (the table is mostly full; not converged).
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x5123);
    let filled = sim::run(&mut cache, wl, &mut rng, 2 * wl.keys());
    let batched = min(segments.iter().map(|s| lookup_pass(&mut cache, s)));
    let dep_len = segments[0].len().min(1 << 16);
    let dependent = min(segments
        .iter()
        .take(3)
        .map(|s| dependent_pass(&mut cache, &s[..dep_len])));
    Ok((
        short_name::<D>().to_string(),
        batched,
        dependent,
        filled.hit_rate(),
        cache.pages().to_string(),
    ))
}

/// Batched and dependent lookup cost against table size (α = 1, uniform): where each design falls
/// out of the CPU caches.
fn size_case(
    rep: &mut Report,
    sizes: &[u64],
    seed: u64,
    ghz: f64,
    seg_len: usize,
    plots_dir: Option<&Path>,
) -> Result<()> {
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for &mib in sizes {
        let entries = (mib as usize) << 18;
        let wl = Workload::new(entries as u64, Popularity::Uniform, seed ^ 0x51e);
        let mut trng = Pcg64Mcg::seed_from_u64(seed ^ 0x7ace51);
        let segments: Vec<Vec<u64>> = (0..4)
            .map(|_| (0..seg_len).map(|_| wl.next_hash(&mut trng)).collect())
            .collect();
        for pages in [PagePolicy::Auto, PagePolicy::Normal] {
            let t = Instant::now();
            let res = vec![
                size_point::<SetAssoc4>(entries, pages, seed, &segments, &wl)?,
                size_point::<SetAssoc8>(entries, pages, seed, &segments, &wl)?,
                size_point::<CuckooLite>(entries, pages, seed, &segments, &wl)?,
                size_point::<Blp>(entries, pages, seed, &segments, &wl)?,
            ];
            let (base_b, base_d) = (res[0].1, res[0].2);
            for (label, batched, dependent, hit, got) in &res {
                for (mode, ns, base) in [
                    ("batched", *batched, base_b),
                    ("dependent", *dependent, base_d),
                ] {
                    rep.add(
                        Record::lower("lookup_vs_size", ns * ghz, "cycles")
                            .param("size_mib", mib)
                            .param("entries", entries)
                            .param("alpha", 1.0)
                            .param("dist", "uniform")
                            .param("design", label.clone())
                            .param("mode", mode)
                            .param("ns", (ns * 100.0).round() / 100.0)
                            .param("fill_hit_rate_pct", (hit * 1e4).round() / 100.0)
                            .param("pages", got.clone())
                            .peer(BASELINE, base * ghz),
                    )?;
                    let name = format!("{label} {mode} {}", page_name(pages));
                    let pt = (mib as f64, ns * ghz);
                    match curves.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, v)) => v.push(pt),
                        None => curves.push((name, vec![pt])),
                    }
                }
            }
            rep.note(&format!(
                "lookup cost at {mib} MiB on {} pages measured in {:.1} s",
                res[0].4,
                t.elapsed().as_secs_f64()
            ));
        }
    }
    if let Some(dir) = plots_dir {
        if sizes.len() > 1 {
            for mode in ["batched", "dependent"] {
                let series: Vec<Series> = curves
                    .iter()
                    .filter(|(n, _)| n.contains(mode))
                    .map(|(n, p)| Series::new(n.replace(&format!(" {mode}"), ""), p.clone()))
                    .collect();
                let how = if mode == "batched" {
                    "batches of 32, prefetched"
                } else {
                    "one at a time, each depending on the last"
                };
                plot::lines(
                    &dir.join(format!("flowcache-{mode}-vs-size.png")),
                    &format!("Lookup cost against table size, α = 1 ({how})"),
                    "table size (MiB)",
                    "cycles per lookup",
                    &series,
                    Axes {
                        log_x: true,
                        log_y: true,
                        ..Default::default()
                    },
                )?;
            }
        }
    }
    Ok(())
}

/// A warmed cache of any design and policy, waiting to be measured.
trait Warm: Send {
    fn measure(&mut self, pt: &Point) -> Result<Vec<Outcome>>;
}

struct Warmed<D: Design, P: Policy> {
    cache: FlowCache<D, P>,
    rep: sim::WarmReport,
    scalar_too: bool,
}

fn min(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(f64::INFINITY, f64::min)
}

impl<D: Design, P: Policy> Warm for Warmed<D, P> {
    /// Measure the SIMD path and, if asked, the scalar path on a copy of the same warm state.
    fn measure(&mut self, pt: &Point) -> Result<Vec<Outcome>> {
        let mut runs = vec![(Isa::best(), None)];
        if self.scalar_too && !Isa::best().is_scalar() {
            runs.push((Isa::scalar(), Some(self.cache.try_clone()?)));
        }
        let warm_curve: Vec<(f64, f64)> = self
            .rep
            .window_hit_rates
            .iter()
            .enumerate()
            .map(|(i, &h)| ((i + 1) as f64, h))
            .collect();
        let mut outs = Vec::new();
        for (isa, copy) in runs {
            let cache = match copy {
                Some(c) => {
                    self.cache = c;
                    &mut self.cache
                }
                None => &mut self.cache,
            };
            cache.set_isa(isa);
            // Lookups only, no inserts (PBLRU and DC-Bubble still move entries on hits); the
            // throughput passes use other keys (see `Point`).
            let lookup_ns = min(pt.lookup_segments.iter().map(|s| lookup_pass(cache, s)));
            let total: usize = pt.segments.iter().map(Vec::len).sum();
            let (cpu0, wall0) = (fp_engine::sys::thread_cpu_ns(), Instant::now());
            let mut hits = 0u64;
            for seg in pt.segments {
                hits += throughput_pass(cache, seg, pt.penalty);
            }
            let wall = wall0.elapsed().as_secs_f64();
            let cpu = match fp_engine::sys::thread_cpu_ns() {
                b if b > cpu0 => (b - cpu0) as f64 * 1e-9,
                _ => wall,
            };
            outs.push(Outcome {
                label: label::<D, P>(isa),
                design: D::ID,
                policy: P::ID,
                isa,
                warm_ws: self.rep.lookups as f64 / pt.keys as f64,
                converged: self.rep.converged,
                warm_curve: warm_curve.clone(),
                hit: hits as f64 / total as f64,
                lookup_ns,
                mops: total as f64 / cpu / 1e6,
                wall_mops: total as f64 / wall / 1e6,
                analysis: analysis::hit_rate::<D>(pt.alpha),
            });
        }
        Ok(outs)
    }
}

/// Build one design/policy and warm it until its hit rate stops increasing.
fn warm_variant<D: Design, P: Policy>(
    pt: &Point,
    policy: P,
    scalar_too: bool,
) -> Result<Box<dyn Warm>> {
    let cfg = Config::with_entries(pt.entries)
        .seed(pt.seed ^ 0xe71c)
        .pages(pt.pages);
    let mut cache = FlowCache::<D, P>::with_policy(&cfg, policy)
        .with_context(|| format!("building {} / {}", D::NAME, P::NAME))?;
    // The same key sequence for every variant (until their warm-ups end).
    let mut rng = Pcg64Mcg::seed_from_u64(pt.seed ^ 0x3a3a ^ pt.alpha.to_bits());
    let rep = sim::warm_up(
        &mut cache,
        pt.wl,
        &mut rng,
        &WarmUp::until_stable(pt.keys, pt.warm_cap),
    );
    Ok(Box::new(Warmed {
        cache,
        rep,
        scalar_too,
    }))
}

fn warm_one(pt: &Point, v: Variant) -> Result<Box<dyn Warm>> {
    let pblru = Pblru::new(pt.pblru_one_in);
    match v {
        Variant::A4(Pol::Random) => warm_variant::<SetAssoc4, _>(pt, Random, true),
        Variant::A4(Pol::Pblru) => warm_variant::<SetAssoc4, _>(pt, pblru, false),
        Variant::A4(Pol::Dc) => warm_variant::<SetAssoc4, _>(pt, DcBubble::default(), false),
        Variant::A8(Pol::Random) => warm_variant::<SetAssoc8, _>(pt, Random, false),
        Variant::A8(Pol::Pblru) => warm_variant::<SetAssoc8, _>(pt, pblru, false),
        Variant::A8(Pol::Dc) => warm_variant::<SetAssoc8, _>(pt, DcBubble::default(), false),
        Variant::Cuckoo(Pol::Random) => warm_variant::<CuckooLite, _>(pt, Random, false),
        Variant::Cuckoo(Pol::Pblru) => warm_variant::<CuckooLite, _>(pt, pblru, false),
        Variant::Cuckoo(Pol::Dc) => warm_variant::<CuckooLite, _>(pt, DcBubble::default(), false),
        Variant::Blp(Pol::Random) => warm_variant::<Blp, _>(pt, Random, true),
        Variant::Blp(Pol::Pblru) => warm_variant::<Blp, _>(pt, pblru, false),
        Variant::Blp(Pol::Dc) => warm_variant::<Blp, _>(pt, DcBubble::default(), false),
    }
}

/// Warm every variant of a point, `threads` at a time (untimed), then measure them one by one.
fn run_point(pt: &Point, variants: &[Variant], threads: usize) -> Result<Vec<Outcome>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let warmed: Vec<(usize, Result<Box<dyn Warm>>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.clamp(1, variants.len().max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&v) = variants.get(i) else { break };
                        done.push((i, warm_one(pt, v)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("warm-up thread"))
            .collect()
    });
    let mut warmed = warmed;
    warmed.sort_by_key(|(i, _)| *i);
    let mut outs = Vec::new();
    for (_, w) in warmed {
        outs.extend(w?.measure(pt)?);
    }
    Ok(outs)
}

/// The nominal clock: `--ghz`, else the first "cpu MHz" of /proc/cpuinfo (on a VM, the TSC rate).
fn nominal_ghz(arg: Option<f64>) -> Result<f64> {
    if let Some(g) = arg {
        if !(g > 0.1 && g < 10.0) {
            bail!("--ghz {g}: expected a clock between 0.1 and 10 GHz");
        }
        return Ok(g);
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mhz = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse::<f64>().ok());
    Ok(mhz.map_or(2.0, |m| m / 1000.0))
}

fn page_name(p: PagePolicy) -> &'static str {
    match p {
        PagePolicy::Normal => "4k",
        _ => "huge",
    }
}

fn dist_name(p: Popularity) -> &'static str {
    match p {
        Popularity::Uniform => "uniform",
        Popularity::Zipf(_) => "zipf0.99",
    }
}

/// Results of one (size, popularity) sweep over α.
struct Sweep {
    mib: u64,
    pop: Popularity,
    pages: PagePolicy,
    /// (alpha, outcomes at that alpha)
    points: Vec<(f64, Vec<Outcome>)>,
}

pub fn run(a: FlowcacheArgs) -> Result<()> {
    let quick = a.common.quick;
    let sizes = if a.sizes_mib.is_empty() {
        if quick {
            vec![1]
        } else {
            vec![4, 64]
        }
    } else {
        a.sizes_mib.clone()
    };
    let alphas = if a.alphas.is_empty() {
        if quick {
            vec![0.5, 0.95, 1.5]
        } else {
            vec![0.5, 0.75, 0.95, 1.0, 1.25, 1.5, 2.0]
        }
    } else {
        a.alphas.clone()
    };
    for &al in &alphas {
        if !(al > 0.0 && al <= 16.0) {
            bail!("--alphas: {al} is not an oversubscription factor in (0, 16]");
        }
    }
    for &m in &sizes {
        if m == 0 || m > 4096 {
            bail!("--sizes-mib: {m} MiB is outside 1..=4096");
        }
    }
    let mut pops = Vec::new();
    let dists = if a.dists.is_empty() {
        vec!["uniform".to_string(), "zipf".to_string()]
    } else {
        a.dists.clone()
    };
    for d in &dists {
        pops.push(match d.as_str() {
            "uniform" => Popularity::Uniform,
            "zipf" => Popularity::Zipf(0.99),
            other => bail!("--dists: unknown popularity {other:?} (uniform, zipf)"),
        });
    }
    if let Some(cap) = a.max_warmup {
        if cap < 8 {
            bail!("--max-warmup {cap}: need at least 8 working sets");
        }
    }
    let warm_cap = |mib: u64| {
        a.max_warmup.unwrap_or(if quick {
            16
        } else if mib <= 4 {
            64
        } else {
            32
        })
    };
    let trace_len = a.trace.unwrap_or(if quick { 1 << 17 } else { 1 << 18 });
    if trace_len < BATCH {
        bail!("--trace {trace_len}: need at least {BATCH} lookups");
    }
    let nseg = a.segments.unwrap_or(if quick { 4 } else { 8 });
    if nseg == 0 {
        bail!("--segments: need at least one");
    }
    let ghz = nominal_ghz(a.ghz)?;
    let penalty = Penalty::calibrate(a.miss_penalty as f64 / ghz);
    let seed = a.common.seed;

    let mut rep = Report::new("flowcache", &a.common)?;
    rep.note(&format!(
        "matching: {} (available: {}); nominal clock {ghz:.3} GHz (cycles = ns x {ghz:.3}); miss penalty {} cycles: a busy loop of {} iterations measured at {:.0} ns; throughput in lookups per second of thread CPU time ({}); PBLRU one hit in {}; {nseg} + {nseg} measurement segments of {trace_len} lookups; warm-ups on {} threads",
        Isa::best(),
        Isa::available().iter().map(|i| i.name()).collect::<Vec<_>>().join(","),
        a.miss_penalty,
        penalty.iters,
        penalty.ns,
        "CLOCK_THREAD_CPUTIME_ID",
        a.pblru_one_in,
        a.warm_threads.max(1),
    ));
    rep.note(&format!(
        "peer of every record: {BASELINE} (SIMD, random eviction) at the same point; the peer of {BASELINE} is {BASELINE_SCALAR}"
    ));

    let main_pages = match a.pages.as_str() {
        "auto" => PagePolicy::Auto,
        "4k" => PagePolicy::Normal,
        other => bail!("--pages: unknown page kind {other:?} (auto, 4k)"),
    };
    // (size, popularity, pages, alphas)
    let mut specs: Vec<(u64, Popularity, PagePolicy, Vec<f64>)> = Vec::new();
    for &mib in &sizes {
        for &pop in &pops {
            specs.push((mib, pop, main_pages, alphas.clone()));
        }
    }
    let normal_mib = if a.normal_pages_mib.is_empty() {
        if quick {
            vec![]
        } else {
            vec![64]
        }
    } else {
        a.normal_pages_mib
            .iter()
            .copied()
            .filter(|&m| m > 0)
            .collect()
    };
    if main_pages != PagePolicy::Normal {
        for mib in normal_mib {
            if mib > 4096 {
                bail!("--normal-pages-mib: {mib} MiB is above 4096");
            }
            let al = if a.normal_pages_alphas.is_empty() {
                vec![1.0]
            } else {
                a.normal_pages_alphas.clone()
            };
            if al.iter().any(|&x| !(x > 0.0 && x <= 16.0)) {
                bail!("--normal-pages-alphas: {al:?} must lie in (0, 16]");
            }
            specs.push((mib, Popularity::Uniform, PagePolicy::Normal, al));
        }
    }

    let mut sweeps = Vec::new();
    for (mib, pop, pages, alphas) in specs {
        let entries = (mib as usize) << 18;
        {
            let c = FlowCache::<Blp>::new(&Config::with_entries(entries).pages(pages))?;
            rep.note(&format!("{mib} MiB: {}", c.describe()));
        }
        let variants = if a.all_policies || (mib <= 4 && !quick) {
            ALL
        } else {
            PAPER
        };
        rep.note(&format!(
            "{mib} MiB {} on {} pages: warm-up cap {} working sets; {} variants",
            dist_name(pop),
            page_name(pages),
            warm_cap(mib),
            variants.len()
        ));
        let mut sweep = Sweep {
            mib,
            pop,
            pages,
            points: Vec::new(),
        };
        for &alpha in &alphas {
            let keys = ((alpha * entries as f64).round() as u64).max(2);
            let wl = Workload::new(keys, pop, seed);
            let mut trng = Pcg64Mcg::seed_from_u64(seed ^ 0x7ace ^ alpha.to_bits());
            let mut segments: Vec<Vec<u64>> = (0..2 * nseg)
                .map(|_| (0..trace_len).map(|_| wl.next_hash(&mut trng)).collect())
                .collect();
            let lookup_segments = segments.split_off(nseg);
            let pt = Point {
                entries,
                keys,
                alpha,
                wl: &wl,
                lookup_segments: &lookup_segments,
                segments: &segments,
                seed,
                warm_cap: warm_cap(mib),
                penalty,
                pblru_one_in: a.pblru_one_in,
                pages,
            };
            let t = Instant::now();
            let outs = run_point(&pt, variants, a.warm_threads)?;
            emit(&mut rep, &pt, mib, pop, ghz, a.miss_penalty, &outs)?;
            rep.note(&format!(
                "{mib} MiB {} {} pages alpha {alpha}: {} variants in {:.1} s",
                dist_name(pop),
                page_name(pages),
                outs.len(),
                t.elapsed().as_secs_f64()
            ));
            sweep.points.push((alpha, outs));
        }
        summary(&rep, &sweep, ghz);
        sweeps.push(sweep);
    }
    let lat_sizes: Vec<u64> = if a.latency_sizes_mib.is_empty() {
        if quick {
            vec![1, 16]
        } else {
            vec![1, 4, 16, 64, 256]
        }
    } else {
        a.latency_sizes_mib
            .iter()
            .copied()
            .filter(|&m| m > 0)
            .collect()
    };
    for &m in &lat_sizes {
        if m > 4096 {
            bail!("--latency-sizes-mib: {m} MiB is above 4096");
        }
    }
    if !lat_sizes.is_empty() {
        size_case(
            &mut rep,
            &lat_sizes,
            seed,
            ghz,
            trace_len,
            a.common.plots.as_deref(),
        )?;
    }
    if let Some(dir) = &a.common.plots {
        for s in &sweeps {
            plots(dir, s, ghz, a.miss_penalty)?;
        }
    }
    rep.finish()
}

/// Add the records of one point.
fn emit(
    rep: &mut Report,
    pt: &Point,
    mib: u64,
    pop: Popularity,
    ghz: f64,
    penalty_cycles: u64,
    outs: &[Outcome],
) -> Result<()> {
    let find = |l: &str| outs.iter().find(|o| o.label == l);
    let base = find(BASELINE).context("baseline 4-way was not measured")?;
    let scalar = find(BASELINE_SCALAR);
    for o in outs {
        let peer = if o.label == BASELINE {
            scalar
        } else {
            Some(base)
        };
        let params = |r: Record| {
            r.param("size_mib", mib)
                .param("entries", pt.entries)
                .param("dist", dist_name(pop))
                .param("alpha", pt.alpha)
                .param("design", o.design)
                .param("policy", o.policy)
                .param("isa", o.isa.name())
                .param("series", o.label.clone())
                .param("pages", page_name(pt.pages))
                .param("warmup_ws", (o.warm_ws * 10.0).round() / 10.0)
                .param("warmup_converged", o.converged)
        };
        let kind = o.analysis.estimate.name();
        let mut hit = params(Record::higher("hit_rate", 100.0 * o.hit, "%"))
            .param(
                "analysis_uniform_pct",
                (o.analysis.hit_rate * 1e4).round() / 100.0,
            )
            .param("analysis_kind", kind);
        let mut lat = params(Record::lower("lookup", o.lookup_ns * ghz, "cycles"))
            .param("ns", (o.lookup_ns * 100.0).round() / 100.0)
            .param("batch", BATCH);
        let mut thr = params(Record::higher("throughput", o.mops, "Mops"))
            .param("miss_penalty_cycles", penalty_cycles)
            .param("clock", "thread_cpu")
            .param("wall_mops", (o.wall_mops * 1000.0).round() / 1000.0);
        if let Some(p) = peer {
            hit = hit.peer(p.label.clone(), 100.0 * p.hit);
            lat = lat.peer(p.label.clone(), p.lookup_ns * ghz);
            thr = thr.peer(p.label.clone(), p.mops);
        }
        rep.add(hit)?;
        rep.add(lat)?;
        rep.add(thr)?;
    }
    Ok(())
}

/// Print compact α × variant tables for one sweep (hit rate with analysis, cycles, Mops).
fn summary(rep: &Report, s: &Sweep, ghz: f64) {
    let Some((_, first)) = s.points.first() else {
        return;
    };
    let labels: Vec<&str> = first.iter().map(|o| o.label.as_str()).collect();
    let head = |what: &str| {
        rep.note(&format!("{} MiB, {}: {what}", s.mib, dist_name(s.pop)));
        rep.note(&format!("| alpha | {} |", labels.join(" | ")));
        rep.note(&format!("|---:|{}", "---:|".repeat(labels.len())));
    };
    head(concat!(
        "hit rate % (uniform analysis in brackets; cuckoo-lite: ",
        "§4.3's empirical lower bound 0.99 min(1, 0.93/alpha))"
    ));
    for (alpha, outs) in &s.points {
        let cells: Vec<String> = outs
            .iter()
            .map(|o| format!("{:.2} ({:.2})", 100.0 * o.hit, 100.0 * o.analysis.hit_rate))
            .collect();
        rep.note(&format!("| {alpha} | {} |", cells.join(" | ")));
    }
    head("lookup cycles (batched, warm cache)");
    for (alpha, outs) in &s.points {
        let cells: Vec<String> = outs
            .iter()
            .map(|o| format!("{:.1}", o.lookup_ns * ghz))
            .collect();
        rep.note(&format!("| {alpha} | {} |", cells.join(" | ")));
    }
    head("throughput Mops with miss penalty");
    for (alpha, outs) in &s.points {
        let cells: Vec<String> = outs.iter().map(|o| format!("{:.3}", o.mops)).collect();
        rep.note(&format!("| {alpha} | {} |", cells.join(" | ")));
    }
    head("warm-up length in working sets (* = stopped at the cap, not converged)");
    for (alpha, outs) in &s.points {
        let cells: Vec<String> = outs
            .iter()
            .map(|o| format!("{:.0}{}", o.warm_ws, if o.converged { "" } else { "*" }))
            .collect();
        rep.note(&format!("| {alpha} | {} |", cells.join(" | ")));
    }
}

/// Hit rate, throughput and lookup cost against α; the warm-up curves at the α closest to 0.95.
fn plots(dir: &Path, s: &Sweep, ghz: f64, penalty_cycles: u64) -> Result<()> {
    let tag = format!(
        "{}-{}mib{}",
        dist_name(s.pop).trim_end_matches("0.99"),
        s.mib,
        if s.pages == PagePolicy::Normal {
            "-4k"
        } else {
            ""
        }
    );
    let what = format!(
        "{} MiB, {}{}",
        s.mib,
        match s.pop {
            Popularity::Uniform => "uniform".to_string(),
            Popularity::Zipf(t) => format!("Zipf θ={t}"),
        },
        if s.pages == PagePolicy::Normal {
            ", 4 KiB pages"
        } else {
            ""
        }
    );
    if s.points.len() < 2 {
        return Ok(());
    }
    let all_labels: Vec<String> = match s.points.first() {
        Some((_, o)) => o.iter().map(|o| o.label.clone()).collect(),
        None => return Ok(()),
    };
    // The main plots show the paper's series; every policy on every design gets its own plot.
    let paper: Vec<String> = all_labels
        .iter()
        .filter(|l| !l.contains('+') || l.starts_with("BLP"))
        .cloned()
        .collect();
    let series_of = |labels: &[String], f: &dyn Fn(&Outcome) -> f64| -> Vec<Series> {
        labels
            .iter()
            .map(|l| {
                let pts = s
                    .points
                    .iter()
                    .filter_map(|(a, outs)| outs.iter().find(|o| &o.label == l).map(|o| (*a, f(o))))
                    .collect();
                Series::new(l.clone(), pts)
            })
            .collect()
    };
    let series = |f: &dyn Fn(&Outcome) -> f64| series_of(&paper, f);
    if paper.len() < all_labels.len() {
        plot::lines(
            &dir.join(format!("flowcache-policies-{tag}.png")),
            &format!("Hit rate of every design and policy, {what}"),
            "oversubscription factor α",
            "hit rate (%)",
            &series_of(
                &all_labels
                    .iter()
                    .filter(|l| !l.ends_with(" scalar"))
                    .cloned()
                    .collect::<Vec<_>>(),
                &|o| 100.0 * o.hit,
            ),
            Axes::default(),
        )?;
    }
    // The scalar paths have the same hit rates as the SIMD ones (same table): left out here.
    let simd: Vec<String> = paper
        .iter()
        .filter(|l| !l.ends_with(" scalar"))
        .cloned()
        .collect();
    let mut hit = series_of(&simd, &|o| 100.0 * o.hit);
    for (name, design) in [("4-way", "4way"), ("8-way", "8way"), ("BLP", "blp")] {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|(a, outs)| {
                outs.iter()
                    .find(|o| o.design == design)
                    .map(|o| (*a, 100.0 * o.analysis.hit_rate))
            })
            .collect();
        if !pts.is_empty() {
            hit.push(Series::new(format!("{name} analysis (uniform)"), pts));
        }
    }
    plot::lines(
        &dir.join(format!("flowcache-hit-{tag}.png")),
        &format!("Flow cache hit rate, {what}"),
        "oversubscription factor α",
        "hit rate (%)",
        &hit,
        Axes::default(),
    )?;
    plot::lines(
        &dir.join(format!("flowcache-throughput-{tag}.png")),
        &format!("Throughput with a {penalty_cycles}-cycle miss penalty, {what}"),
        "oversubscription factor α",
        "Mops (1 core)",
        &series(&|o| o.mops),
        Axes::default(),
    )?;
    plot::lines(
        &dir.join(format!("flowcache-lookup-{tag}.png")),
        &format!("Batched lookup cost, {what}"),
        "oversubscription factor α",
        "cycles per lookup",
        &series(&|o| o.lookup_ns * ghz),
        Axes {
            y_from_zero: true,
            ..Default::default()
        },
    )?;
    // Warm-up curves (window hit rate against working sets looked up) near α = 0.95.
    if let Some((alpha, outs)) = s
        .points
        .iter()
        .min_by(|x, y| (x.0 - 0.95).abs().total_cmp(&(y.0 - 0.95).abs()))
    {
        let curves: Vec<Series> = outs
            .iter()
            .filter(|o| !o.isa.is_scalar() && o.policy == "random")
            .map(|o| {
                Series::new(
                    o.label.clone(),
                    o.warm_curve.iter().map(|&(w, h)| (w, 100.0 * h)).collect(),
                )
            })
            .collect();
        plot::lines(
            &dir.join(format!("flowcache-warmup-{tag}.png")),
            &format!("Warm-up: hit rate of each window of one working set, α = {alpha}, {what}"),
            "working sets looked up",
            "window hit rate (%)",
            &curves,
            Axes::default(),
        )?;
    }
    Ok(())
}
