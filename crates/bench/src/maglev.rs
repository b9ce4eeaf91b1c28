//! `flowplane-bench maglev`: Maglev hashing against Karger (ring) and rendezvous hashing, as in the
//! Maglev paper §5.3.
//!
//! * **Fig 11, balance.** One table per method and size (1000 backends, M = 65537 and 655373);
//!   the largest and smallest number of entries per backend, as a multiple of the average, and
//!   their spread `(max − min) / avg` in percent.
//! * **Fig 12, disruption.** For each failure fraction, remove that many random backends, rebuild,
//!   count changed entries; 200 trials per point (10 with `--quick`). Karger and rendezvous are
//!   measured too (the paper only argues they move nothing else); Karger rebuilds its ring without
//!   the dead points, rendezvous recomputes the dead backends' slots (identical to a full rebuild,
//!   which the crate's tests check) because a full rendezvous rebuild costs `M · N` hashes.
//!   Trials run on `--threads` threads; they measure counts, not time.
//! * **Population time.** End-to-end `Method::build` (validate, sort, hash names, populate,
//!   digest), median of several runs, single-threaded.
//! * **Weighted balance** (weights 1..=4): worst relative deviation of a backend's entries from its
//!   weighted share, for all three methods.
//! * **Lookup.** Maglev table lookups against binary search on Karger's ring (a ring used without a
//!   table).
//!
//! Every Maglev record carries a peer measured in the same run: Karger, and a second record with
//! rendezvous. Plots: `maglev-fig11.png` (bars) and `maglev-fig12.png` (lines).

use super::plot::Series;
use super::{CommonOpts, Record, Report};
use anyhow::{anyhow, Context, Result};
use fp_maglev::{Backend, Config, Karger, Maglev, Method, Prepared, Rendezvous, Table};
use rand::SeedableRng;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct MaglevArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Number of backends (paper: 1000).
    #[arg(long, default_value_t = 1000)]
    pub backends: usize,
    /// Table sizes, primes (paper: 65537 and 655373).
    #[arg(long, value_delimiter = ',', default_values_t = vec![65_537u64, 655_373])]
    pub sizes: Vec<u64>,
    /// Trials per failure fraction for Fig 12 (default 200, as in the paper; 10 with --quick).
    #[arg(long)]
    pub trials: Option<usize>,
    /// Percent of backends failing at once, for Fig 12.
    #[arg(long, value_delimiter = ',')]
    pub failures: Option<Vec<f64>>,
    /// Karger virtual nodes per backend (the paper's "views": 1000).
    #[arg(long, default_value_t = 1000)]
    pub vnodes: u32,
    /// Threads for the Fig 12 trials (timings are always single-threaded).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// Paper values (§5.3) for the notes: overprovisioning needed (max share over average − 1).
const PAPER_OVERPROVISION: [(&str, u64, f64); 4] = [
    ("karger", 65_537, 29.7),
    ("rendezvous", 65_537, 49.5),
    ("karger", 655_373, 10.3),
    ("rendezvous", 655_373, 12.3),
];
/// Paper population times (ms), Maglev, 1000 backends.
const PAPER_POPULATE_MS: [(u64, f64); 2] = [(65_537, 1.8), (655_373, 22.9)];

fn backends(n: usize, weighted: bool) -> Vec<Backend> {
    (0..n)
        .map(|i| {
            let name = format!("10.{}.{}.{}:443", i >> 16, (i >> 8) & 255, i & 255);
            Backend::weighted(name, if weighted { 1 + (i % 4) as u32 } else { 1 })
        })
        .collect()
}

/// Entries per backend as multiples of each backend's ideal share: (max, min, spread %).
fn shares(t: &Table) -> (f64, f64, f64) {
    let w_sum: f64 = t.backends().iter().map(|b| b.weight as f64).sum();
    let m = t.size() as f64;
    let (mut hi, mut lo) = (f64::MIN, f64::MAX);
    for (c, b) in t.counts().iter().zip(t.backends()) {
        let r = *c as f64 / (m * b.weight as f64 / w_sum);
        hi = hi.max(r);
        lo = lo.min(r);
    }
    (hi, lo, (hi - lo) * 100.0)
}

/// Build time in ms over `reps` runs: (median, min), and the last table.
fn time_build<M: Method>(
    m: &M,
    cfg: &Config,
    bs: &[Backend],
    reps: usize,
) -> Result<((f64, f64), Table)> {
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        let t = m.build(cfg, bs)?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        last = Some(std::hint::black_box(t));
    }
    let min = times.iter().copied().fold(f64::MAX, f64::min);
    Ok(((super::median(times), min), last.expect("at least one run")))
}

/// Fig 12 for one method and size: mean and max percent of changed entries, and the mean percent
/// that belonged to surviving backends, over `trials` random failure sets of `k` backends.
struct Disruption {
    mean: f64,
    max: f64,
    collateral: f64,
}

fn disruption<P: Prepared>(
    p: &P,
    base: &[u16],
    k: usize,
    trials: usize,
    threads: usize,
    seed: u64,
) -> Result<Disruption> {
    let n = p.canonical().len();
    let size = p.size();
    let m = size as f64;
    let threads = threads.clamp(1, trials.max(1));
    let results: Vec<Result<Vec<(u32, u32)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<Vec<(u32, u32)>> {
                    let mut out = Vec::new();
                    for trial in (t..trials).step_by(threads) {
                        // Per-trial RNG: results do not depend on the thread count.
                        let mut rng = rand_pcg::Pcg64::seed_from_u64(fp_hash::hash_u64(
                            seed,
                            (size as u64) << 32 | (k as u64) << 16 | trial as u64,
                        ));
                        let mut alive = vec![true; n];
                        for i in rand::seq::index::sample(&mut rng, n, k) {
                            alive[i] = false;
                        }
                        let after = p.populate_after_failure(base, &alive)?;
                        let (mut dead, mut kept) = (0u32, 0u32);
                        for (b, a) in base.iter().zip(&after) {
                            if !alive[*b as usize] {
                                dead += 1;
                            } else if a != b {
                                kept += 1;
                            }
                        }
                        out.push((dead, kept));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("trial thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(trials);
    for r in results {
        all.extend(r?);
    }
    let pct = |x: u32| x as f64 / m * 100.0;
    let changed: Vec<f64> = all.iter().map(|&(d, k)| pct(d + k)).collect();
    Ok(Disruption {
        mean: changed.iter().sum::<f64>() / changed.len() as f64,
        max: changed.iter().copied().fold(0.0, f64::max),
        collateral: all.iter().map(|&(_, k)| pct(k)).sum::<f64>() / all.len() as f64,
    })
}

/// Lookups per second (millions) of `f` over `hashes`, best of 3.
fn mops(hashes: &[u64], f: impl Fn(u64) -> u16) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut acc = 0u64;
        for &h in hashes {
            acc = acc.wrapping_add(f(h) as u64);
        }
        std::hint::black_box(acc);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    hashes.len() as f64 / best / 1e6
}

pub fn run(a: MaglevArgs) -> Result<()> {
    let quick = a.common.quick;
    let trials = a.trials.unwrap_or(if quick { 10 } else { 200 });
    let failures = a.failures.clone().unwrap_or_else(|| {
        if quick {
            vec![1.0, 5.0, 10.0]
        } else {
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0]
        }
    });
    if a.backends < 2 {
        anyhow::bail!("--backends must be at least 2");
    }
    let karger = Karger { vnodes: a.vnodes };
    let mut report = Report::new("maglev", &a.common)?;
    report.note(&format!(
        "{} backends, sizes {:?}, karger vnodes {}, fig12 trials {trials}, failures {failures:?} %",
        a.backends, a.sizes, a.vnodes
    ));
    let bs = backends(a.backends, false);
    let wbs = backends(a.backends, true);
    let (reps_fast, reps_slow) = if quick { (5, 1) } else { (21, 3) };

    // Fig 11 rows for the plot: (label, max, min).
    let mut fig11: Vec<(String, f64, f64)> = Vec::new();
    // Fig 12 series.
    let mut fig12: Vec<Series> = Vec::new();

    for &size in &a.sizes {
        let cfg = Config::new(size, a.common.seed).context("--sizes")?;
        let p = |r: Record| r.param("size", size).param("backends", a.backends as u64);

        // ---- Population time (and the tables for Fig 11). ----
        let (t_mag, mag) = time_build(&Maglev, &cfg, &bs, reps_fast)?;
        let (t_kar, kar) = time_build(&karger, &cfg, &bs, reps_fast.min(11))?;
        let (t_ren, ren) = time_build(&Rendezvous, &cfg, &bs, reps_slow)?;
        for (peer, v) in [("karger", t_kar.0), ("rendezvous", t_ren.0)] {
            report.add(
                p(Record::lower("populate", t_mag.0, "ms"))
                    .param("min_ms", (t_mag.1 * 1000.0).round() / 1000.0)
                    .param("reps", reps_fast as u64)
                    .peer(peer, v),
            )?;
        }
        if let Some((_, paper)) = PAPER_POPULATE_MS.iter().find(|(m, _)| *m == size) {
            report.note(&format!(
                "populate M={size} (median/min): maglev {:.2}/{:.2} ms (paper {paper} ms), karger {:.1}/{:.1} ms, rendezvous {:.0}/{:.0} ms",
                t_mag.0, t_mag.1, t_kar.0, t_kar.1, t_ren.0, t_ren.1
            ));
        }
        let (tw_mag, wmag) = time_build(&Maglev, &cfg, &wbs, reps_fast)?;
        let (tw_kar, wkar) = time_build(&karger, &cfg, &wbs, reps_fast.min(11))?;
        report.add(
            p(Record::lower("populate_weighted", tw_mag.0, "ms"))
                .param("weights", "1..=4")
                .param("min_ms", (tw_mag.1 * 1000.0).round() / 1000.0)
                .peer("karger", tw_kar.0),
        )?;

        // ---- Fig 11: balance. ----
        let (mh, ml, ms) = shares(&mag);
        for (name, t) in [("maglev", &mag), ("karger", &kar), ("rendezvous", &ren)] {
            let (hi, lo, spread) = shares(t);
            let short = &name[..1].to_uppercase();
            let label = format!("{short}-{}", if size < 100_000 { "small" } else { "large" });
            fig11.push((label, hi, lo));
            let paper = PAPER_OVERPROVISION
                .iter()
                .find(|(n, m, _)| *n == name && *m == size)
                .map(|(_, _, v)| format!(" (paper: +{v}%)"))
                .unwrap_or_default();
            report.note(&format!(
                "fig11 M={size} {name:<10} max {hi:.4}x min {lo:.4}x avg; spread {spread:.2}%; overprovision +{:.1}%{paper}",
                (hi - 1.0) * 100.0
            ));
        }
        for (peer, t) in [("karger", &kar), ("rendezvous", &ren)] {
            let (ph, pl, ps) = shares(t);
            report.add(p(Record::lower("balance_spread", ms, "%")).peer(peer, ps))?;
            report.add(p(Record::lower("share_max", mh, "x avg")).peer(peer, ph))?;
            report.add(p(Record::higher("share_min", ml, "x avg")).peer(peer, pl))?;
        }

        // ---- Weighted balance: worst |entries / weighted share − 1|. ----
        let t0 = Instant::now();
        let wren = Rendezvous.build(&cfg, &wbs)?;
        report.note(&format!(
            "weighted rendezvous build M={size}: {:.0} ms",
            t0.elapsed().as_secs_f64() * 1e3
        ));
        let dev = |t: &Table| {
            let (hi, lo, _) = shares(t);
            (hi - 1.0).max(1.0 - lo) * 100.0
        };
        for (peer, t) in [("karger", &wkar), ("rendezvous", &wren)] {
            report.add(
                p(Record::lower("weighted_max_dev", dev(&wmag), "%"))
                    .param("weights", "1..=4")
                    .peer(peer, dev(t)),
            )?;
        }

        // ---- Fig 12: disruption. ----
        let t_fig12 = Instant::now();
        let mut s_mag = Vec::new();
        let mut s_kar = Vec::new();
        let mut s_ren = Vec::new();
        // Prepare each method and populate its full table once per size.
        let pm = Maglev.prepare(&cfg, &bs)?;
        let pk = karger.prepare(&cfg, &bs)?;
        let pr = Rendezvous.prepare(&cfg, &bs)?;
        let (bm, bk, br) = (mag.entries(), kar.entries(), ren.entries());
        for &pct in &failures {
            let k = ((a.backends as f64 * pct / 100.0).round() as usize).clamp(1, a.backends - 1);
            let seed = a.common.seed;
            let dm = disruption(&pm, bm, k, trials, a.threads, seed)?;
            let dk = disruption(&pk, bk, k, trials, a.threads, seed)?;
            let dr = disruption(&pr, br, k, trials, a.threads, seed)?;
            let q = |r: Record| {
                p(r).param("failed_pct", pct)
                    .param("failed", k as u64)
                    .param("trials", trials as u64)
            };
            for (peer, d) in [("karger", &dk), ("rendezvous", &dr)] {
                report.add(
                    q(Record::lower("disruption", dm.mean, "%"))
                        .param("max", (dm.max * 1000.0).round() / 1000.0)
                        .peer(peer, d.mean),
                )?;
            }
            report.add(q(Record::lower(
                "disruption_collateral",
                dm.collateral,
                "%",
            )))?;
            if dk.collateral != 0.0 || dr.collateral != 0.0 {
                report.note(&format!(
                    "WARNING: baseline moved surviving backends' entries (karger {}, rendezvous {})",
                    dk.collateral, dr.collateral
                ));
            }
            s_mag.push((pct, dm.mean));
            s_kar.push((pct, dk.mean));
            s_ren.push((pct, dr.mean));
        }
        report.note(&format!(
            "fig12 M={size}: {:.1} s",
            t_fig12.elapsed().as_secs_f64()
        ));
        fig12.push(Series::new(format!("Maglev M={size}"), s_mag));
        fig12.push(Series::new(format!("Karger M={size}"), s_kar));
        fig12.push(Series::new(format!("Rendezvous M={size}"), s_ren));

        // ---- Lookup cost: table vs ring binary search. ----
        let n_lookups = if quick { 2_000_000 } else { 20_000_000 };
        let mut x = a.common.seed;
        let hashes: Vec<u64> = (0..n_lookups)
            .map(|_| {
                x = fp_hash::splitmix64(x);
                x
            })
            .collect();
        let ring = &pk;
        let ours = mops(&hashes, |h| mag.lookup(h));
        // Ring search is ~100x slower: a tenth of the lookups keeps the run short.
        let theirs = mops(&hashes[..n_lookups / 10], |h| ring.ring_lookup(h));
        report.add(p(Record::higher("lookup", ours, "Mops")).peer("karger_ring_search", theirs))?;
    }

    if let Some(dir) = &a.common.plots {
        // Group as the paper does: M-small, M-large, K-small, …
        fig11.sort_by_key(|r| "MKR".find(&r.0[..1]).unwrap_or(3));
        let p11 = dir.join("maglev-fig11.png");
        bars(
            &p11,
            &format!(
                "Fig 11: entries per backend / average ({} backends; small = {}, large = {})",
                a.backends,
                a.sizes.first().copied().unwrap_or(0),
                a.sizes.last().copied().unwrap_or(0)
            ),
            &fig11,
        )?;
        let ideal: Vec<(f64, f64)> = failures.iter().map(|&f| (f, f)).collect();
        fig12.push(Series::new("ideal (failed share)", ideal));
        let p12 = dir.join("maglev-fig12.png");
        lines_legend_left(
            &p12,
            &format!(
                "Fig 12: changed entries vs backends failing ({} backends, {trials} trials)",
                a.backends
            ),
            "backends failing at once (%)  [Karger, rendezvous and ideal coincide]",
            "changed table entries (%)",
            &fig12,
        )?;
        report.note(&format!("plots: {} {}", p11.display(), p12.display()));
    }
    report.finish()
}

// ---- Bar chart for Fig 11 (the shared plot module draws lines only). ----

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

fn ensure_font() -> Result<()> {
    use plotters::style::FontStyle;
    use std::sync::OnceLock;
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{p} is not a usable TrueType font"));
            }
        }
        Err(format!(
            "no TrueType font found for plots (looked in {})",
            FONT_PATHS.join(", ")
        ))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Grouped bars: for each row, the max (dark) and min (light) share, with a line at 1.0.
fn bars(path: &Path, title: &str, rows: &[(String, f64, f64)]) -> Result<()> {
    use plotters::prelude::*;
    ensure_font()?;
    let top = rows.iter().map(|r| r.1).fold(1.0, f64::max) * 1.1;
    let n = rows.len() as f64;
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..n, 0f64..top)?;
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .x_desc("method-table size (M = Maglev, K = Karger, R = rendezvous)")
        .y_desc("entries per backend / average")
        .label_style(("sans-serif", 15))
        .draw()?;
    let max_c = RGBColor(31, 119, 180);
    let min_c = RGBColor(255, 127, 14);
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let x = i as f64;
            Rectangle::new([(x + 0.12, 0.0), (x + 0.48, r.1)], max_c.filled())
        }))?
        .label("max")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], max_c.filled()));
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let x = i as f64;
            Rectangle::new([(x + 0.52, 0.0), (x + 0.88, r.2)], min_c.filled())
        }))?
        .label("min")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], min_c.filled()));
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 1.0), (n, 1.0)],
            BLACK.stroke_width(1),
        ))?
        .label("average")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(1)));
    // Values above the bars.
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    for (i, r) in rows.iter().enumerate() {
        for (dx, v) in [(0.30, r.1), (0.70, r.2)] {
            chart.draw_series(std::iter::once(Text::new(
                format!("{v:.3}"),
                (i as f64 + dx - 0.14, v + top * 0.012),
                font.clone(),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()
        .with_context(|| format!("writing plot {}", path.display()))?;
    Ok(())
}

/// Lines with markers, legend in the upper left (Fig 12's curves rise to the right, where the
/// shared plot module puts its legend).
fn lines_legend_left(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    use plotters::prelude::*;
    ensure_font()?;
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let x1 = pts().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let y1 = pts().map(|p| p.1).fold(0.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x1, 0f64..y1)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()
        .with_context(|| format!("writing plot {}", path.display()))?;
    Ok(())
}
