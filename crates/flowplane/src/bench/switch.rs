//! `flowplane bench switch`: CuckooSwitch's full-system experiments (§4.4) on in-memory ports.
//!
//! A 4-port switch; one worker forwards 64-byte frames from memory: each burst of 32 frames is
//! copied into packet buffers (a port's receive), switched by `SwitchWorker::process` (destination
//! lookups of the whole burst in the cuckoo FIB, hand-off to per-port transmit bursts), and the
//! transmit bursts are recycled (a port's send). Destinations are drawn uniformly from the whole
//! FIB: the worst case for the table, as in the paper. Learning is off, as in the paper's
//! evaluation (the FIB is preloaded).
//!
//! * `forward` (Fig 8/9): Mpps against FIB size, with the factor analysis — single lookups on 4 KiB
//!   pages → batched → batched with two-round prefetching → + huge pages — next to the no-lookup
//!   baseline (the same path with the output port taken from the frame instead of the FIB: the
//!   paper's Table 2 bound, where I/O is everything). On in-memory ports the baseline is the cost of
//!   copying and handing over a frame; the ratio is forwarding / baseline.
//! * `updates` (Fig 10): Mpps at 2M entries while a writer thread on the other core applies 0..1M
//!   updates per second (a new MAC inserted, an old one removed), next to the same without updates.

use super::{contest, CommonOpts, Record, Report};
use anyhow::{Context, Result};
use fp_cuckoo::{CompactMap, CompactWriter, Config, PagePolicy};
use fp_io::sys::pin_to_cpu;
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::switch::{learn_queue, LookupMode, SwitchWorker};
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const PORTS: u16 = 4;
const FRAME: usize = 60;
const M48: u64 = (1 << 48) - 1;

#[derive(clap::Args, Debug)]
pub struct SwitchArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// FIB sizes (entries; K/M/G are powers of two). Default 1M,16M,64M,256M (quick: 1M,16M).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<String>,
    /// Add the paper's billion-entry FIB (1G entries, about 8.5 GiB; only on huge pages).
    #[arg(long)]
    pub billion: bool,
}

fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (n, m) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    Ok(n.parse::<u64>()
        .with_context(|| format!("--sizes: bad size {s:?}"))?
        * m)
}

/// Distinct unicast MACs (a bijection of 48-bit integers with the group bit cleared).
fn mac(i: u64) -> u64 {
    let mut x = i & M48;
    x = x.wrapping_mul(0x9E37_79B9_7F4B) & M48;
    x ^= x >> 23;
    x = x.wrapping_mul(0xC2B2_AE3D_27D5) & M48;
    x ^= x >> 19;
    // Clear the group bit; keep the locally-administered bit set so no real vendor MAC is hit.
    (x & !(1u64 << 40)) | 1 << 41
}

fn frame(dst: u64, src: u64) -> [u8; FRAME] {
    let mut f = [0u8; FRAME];
    f[0..6].copy_from_slice(&dst.to_be_bytes()[2..]);
    f[6..12].copy_from_slice(&src.to_be_bytes()[2..]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f
}

fn build_fib(n: u64, pages: PagePolicy, seed: u64) -> Result<CompactWriter> {
    let (mut w, _) = CompactMap::new(&Config::with_capacity(n as usize).seed(seed).pages(pages))?;
    for i in 0..n {
        // Macs whose index collides after masking are rare; skip duplicates silently (upsert).
        w.insert(mac(i), (i % PORTS as u64) as u16)
            .with_context(|| format!("FIB insert #{i}"))?;
    }
    Ok(w)
}

/// Frames with destinations uniform over the FIB's first `n` entries.
fn frames(n: u64, count: usize, seed: u64) -> Vec<[u8; FRAME]> {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    (0..count)
        .map(|_| frame(mac(rng.gen_range(0..n)), mac(rng.gen_range(0..n))))
        .collect()
}

/// Forward `count` frames through `step` (bursts of 32, receive copy, per-port transmit recycled);
/// returns Mpps.
fn drive(
    fr: &[[u8; FRAME]],
    count: usize,
    pool: &mut Pool,
    tx: &mut [Vec<Packet>],
    mut step: impl FnMut(&mut Vec<Packet>, &mut [Vec<Packet>], &mut Pool),
) -> f64 {
    let mut rx = burst();
    let t = Instant::now();
    let mut i = 0;
    while i < count {
        for j in 0..MAX_BURST {
            let mut p = pool.get().expect("pool");
            p.fill(&fr[(i + j) % fr.len()]);
            rx.push(p);
        }
        i += MAX_BURST;
        step(&mut rx, tx, pool);
        for t in tx.iter_mut() {
            pool.put_all(t);
        }
    }
    count as f64 / t.elapsed().as_secs_f64() / 1e6
}

/// The no-lookup baseline: the output port comes from the frame itself.
fn baseline(rx: &mut Vec<Packet>, tx: &mut [Vec<Packet>], _pool: &mut Pool) {
    for p in rx.drain(..) {
        let port = (p.data()[5] as usize) % tx.len();
        tx[port].push(p);
    }
}

pub fn run(a: SwitchArgs) -> Result<()> {
    let quick = a.common.quick;
    let mut sizes: Vec<u64> = if a.sizes.is_empty() {
        if quick {
            vec![1 << 20, 16 << 20]
        } else {
            vec![1 << 20, 16 << 20, 64 << 20, 256 << 20]
        }
    } else {
        a.sizes
            .iter()
            .map(|s| parse_size(s))
            .collect::<Result<_>>()?
    };
    if a.billion {
        sizes.push(1 << 30);
    }
    let (rounds, per_round) = if quick { (3, 1 << 20) } else { (5, 4 << 20) };
    let mut rep = Report::new("switch", &a.common)?;
    rep.note(
        "4-port switch, one worker pinned to CPU 0, 60-byte frames in bursts of 32, learning off",
    );
    pin_to_cpu(0);
    let fr_count = 1 << 20;
    for &n in &sizes {
        let fr = frames(n, fr_count, a.common.seed);
        let huge = build_fib(n, PagePolicy::Auto, a.common.seed)?;
        let st = huge.stats();
        rep.note(&format!("{n} entries: {st}"));
        let small = if n <= 256 << 20 {
            Some(build_fib(n, PagePolicy::Normal, a.common.seed)?)
        } else {
            None
        };
        let worker = |w: &CompactWriter, mode: LookupMode| {
            let (ltx, _lrx) = learn_queue(1);
            let mut sw = SwitchWorker::new(w.reader(), PORTS, ltx, u64::MAX);
            sw.set_learning(false);
            sw.set_mode(mode);
            RefCell::new(sw)
        };
        let pool = RefCell::new(Pool::new(4 * MAX_BURST));
        let tx = RefCell::new((0..PORTS).map(|_| burst()).collect::<Vec<_>>());
        let run_sw = |sw: &RefCell<SwitchWorker>| -> Result<f64> {
            let mut sw = sw.borrow_mut();
            Ok(drive(
                &fr,
                per_round,
                &mut pool.borrow_mut(),
                &mut tx.borrow_mut(),
                |rx, tx, pool| sw.process(0, rx, tx, pool, 0),
            ))
        };
        let base = || -> Result<f64> {
            Ok(drive(
                &fr,
                per_round,
                &mut pool.borrow_mut(),
                &mut tx.borrow_mut(),
                baseline,
            ))
        };
        let hp = worker(&huge, LookupMode::Prefetched);
        let pages = st.pages.to_string();
        let mut variants: Vec<(&str, RefCell<SwitchWorker>, &str)> = Vec::new();
        if let Some(s) = &small {
            variants.push(("1_plain", worker(s, LookupMode::Single), "4K"));
            variants.push(("2_batching", worker(s, LookupMode::Batched), "4K"));
            variants.push((
                "3_batching_prefetch",
                worker(s, LookupMode::Prefetched),
                "4K",
            ));
        }
        let mut runs: Vec<Box<dyn Fn() -> Result<f64> + '_>> =
            vec![Box::new(base), Box::new(|| run_sw(&hp))];
        for (_, sw, _) in &variants {
            runs.push(Box::new(move || run_sw(sw)));
        }
        let refs: Vec<&dyn Fn() -> Result<f64>> = runs.iter().map(|f| f.as_ref()).collect();
        let v = contest(rounds, &refs)?;
        let (bv, ours) = (v[0], v[1]);
        rep.add(
            Record::higher("forward", ours, "Mpps")
                .param("entries", n)
                .param("pages", pages.clone())
                .param("frame_bytes", FRAME)
                .peer("no_lookup_baseline", bv),
        )?;
        for ((name, _, pg), val) in variants.iter().zip(&v[2..]) {
            rep.add(
                Record::higher("factor", *val, "Mpps")
                    .param("entries", n)
                    .param("step", *name)
                    .param("pages", *pg)
                    .peer("no_lookup_baseline", bv),
            )?;
        }
        if small.is_some() {
            rep.add(
                Record::higher("factor", ours, "Mpps")
                    .param("entries", n)
                    .param("step", "4_hugepages")
                    .param("pages", pages)
                    .peer("no_lookup_baseline", bv),
            )?;
        }
    }
    updates_case(&mut rep, a.common.seed, rounds, per_round)?;
    rep.finish()
}

/// Fig 10: forwarding while a writer on the other core applies updates at a fixed rate.
fn updates_case(rep: &mut Report, seed: u64, rounds: usize, per_round: usize) -> Result<()> {
    let n: u64 = 2 << 20; // the paper's 2M-entry FIB
    let churn = n / 10; // entries [0, churn) are replaced; frames go to [churn, n)
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed ^ 0x77);
    let fr: Vec<[u8; FRAME]> = (0..1 << 20)
        .map(|_| frame(mac(rng.gen_range(churn..n)), mac(rng.gen_range(churn..n))))
        .collect();
    let mut no_updates = None;
    for rate in [0u64, 64_000, 256_000, 1_000_000] {
        let mut fib = build_fib(n, PagePolicy::Auto, seed)?;
        let (ltx, _lrx) = learn_queue(1);
        let mut sw = SwitchWorker::new(fib.reader(), PORTS, ltx, u64::MAX);
        sw.set_learning(false);
        let stop = AtomicBool::new(false);
        let (ours, achieved) = std::thread::scope(|s| -> Result<(f64, f64)> {
            let writer = s.spawn(|| -> Result<f64> {
                if rate == 0 {
                    return Ok(0.0);
                }
                pin_to_cpu(1);
                let start = Instant::now();
                // Entries to remove, oldest first: the churn range, then what this writer inserted.
                let victim = |k: u64| if k < churn { k } else { n + (k - churn) };
                let (mut done, mut next, mut oldest) = (0u64, n, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                    if done >= due {
                        // Sleep rather than spin: a spinning writer would take a whole core and
                        // push everything else on this 2-CPU machine onto the reader's core.
                        std::thread::sleep(std::time::Duration::from_micros(500));
                        continue;
                    }
                    while done < due {
                        if done % 2 == 0 {
                            fib.insert(mac(next), (next % PORTS as u64) as u16)?;
                            next += 1;
                        } else {
                            fib.remove(mac(victim(oldest)));
                            oldest += 1;
                        }
                        done += 1;
                    }
                }
                Ok(done as f64 / start.elapsed().as_secs_f64())
            });
            let mut pool = Pool::new(4 * MAX_BURST);
            let mut tx: Vec<Vec<Packet>> = (0..PORTS).map(|_| burst()).collect();
            let mut best = 0f64;
            for _ in 0..rounds {
                best = best.max(drive(&fr, per_round, &mut pool, &mut tx, |rx, tx, pool| {
                    sw.process(0, rx, tx, pool, 0)
                }));
            }
            stop.store(true, Ordering::Relaxed);
            let achieved = writer.join().expect("writer")?;
            Ok((best, achieved))
        })?;
        let base = *no_updates.get_or_insert(ours);
        rep.add(
            Record::higher("forward_under_updates", ours, "Mpps")
                .param("entries", n)
                .param("target_updates_per_s", rate)
                .param("achieved_updates_per_s", achieved.round())
                .peer("no_updates", base),
        )?;
    }
    Ok(())
}
