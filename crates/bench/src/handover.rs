//! `flowplane-bench handover`: how long a restart of the live balancer leaves the VIP unserved,
//! seen from the wire, with a million tracked connections.
//!
//! The bed is `live`'s (a sender namespace and a balancer namespace joined by a veth pair with
//! two queues; the balancer is one-armed and its GRE packets come back to the sender namespace,
//! which holds the backend's address). `flowplane run` runs with two workers and a state
//! directory whose `connections` file holds `--entries` connection entries (random 5-tuples on
//! the one backend), so it starts warm with that many tracked connections in every worker. The
//! sender offers UDP frames of 1024 flows to the VIP at a paced rate; a receiver in the sender
//! namespace timestamps every GRE packet the balancer forwards. Then, per case:
//!
//! * `handover` — a second `flowplane run` with the same state directory starts while the first
//!   forwards (the overlapped handover: checkpoint while forwarding, cut-over, delta; AF_PACKET
//!   sockets opened holding, AF_XDP sockets bound at the cut-over);
//! * `stop_start` — the peer: the first is stopped (SIGTERM: it writes its entries to the state
//!   directory) and the second started once it exited (it reads them), as `systemctl restart`
//!   does.
//!
//! The figure is the longest time between two forwarded packets from the change until the
//! successor has run for half a second: the forwarding gap as a client's packets see it,
//! everything included (stopping the workers, the state's transfer, the ports). Also reported:
//! frames offered during that window that never came back. Cases alternate within each round,
//! per driver; each figure is the median of its rounds.

use super::{CommonOpts, Record, Report};
use crate::live::{bed, lb_config, start_sender, Bed, BACKEND_IP};
use anyhow::{bail, Context, Result};
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::port::Port;
use fp_lb::carry::{Carried, CarriedEntry};
use fp_pipeline::packet::{burst, Pool, MAX_BURST};
use rand::{Rng, SeedableRng};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct HandoverArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Connection entries the balancer tracks when it is restarted (e.g. 1M).
    #[arg(long)]
    pub entries: Option<String>,
    /// Frames per second the sender offers, in thousands.
    #[arg(long, default_value_t = 50.0)]
    pub kpps: f64,
    /// Rounds (default 3; quick 1).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Port drivers (default: af_packet, af_xdp).
    #[arg(long, value_delimiter = ',')]
    pub drivers: Vec<String>,
}

/// What one restart looked like from the wire.
#[derive(Clone, Copy, Debug)]
struct Gap {
    /// The longest time between two forwarded packets, ms.
    gap_ms: f64,
    /// Frames offered in the window that were not forwarded.
    lost: u64,
}

/// The receiver: timestamps of forwarded GRE packets, as (µs since `start`, count) per burst.
struct Receiver {
    stop: Arc<AtomicBool>,
    arrivals: Arc<Mutex<Vec<(u64, u32)>>>,
    thread: std::thread::JoinHandle<Result<()>>,
    start: Instant,
}

fn start_receiver(b: &Bed) -> Result<Receiver> {
    let stop = Arc::new(AtomicBool::new(false));
    let arrivals = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
    let start = Instant::now();
    let (s, a) = (stop.clone(), arrivals.clone());
    let thread = b.sender.spawn_thread(move || -> Result<()> {
        let mut port = AfPacketPort::open("eth0", &AfPacketConfig::default())?;
        let mut pool = Pool::new(4 * MAX_BURST);
        let mut rx = burst();
        while !s.load(Ordering::Relaxed) {
            port.wait_rx(Duration::from_millis(5))?;
            let n = port.rx_burst(&mut pool, &mut rx, MAX_BURST);
            if n == 0 {
                continue;
            }
            let at = start.elapsed().as_micros() as u64;
            // IPv4 carrying GRE: what the balancer forwards.
            let gre = rx
                .iter()
                .filter(|p| {
                    let d = p.data();
                    d.len() > 23 && d[12..14] == [0x08, 0x00] && d[23] == 47
                })
                .count() as u32;
            pool.put_all(&mut rx);
            if gre > 0 {
                a.lock().unwrap_or_else(|p| p.into_inner()).push((at, gre));
            }
        }
        Ok(())
    })?;
    Ok(Receiver {
        stop,
        arrivals,
        thread,
        start,
    })
}

impl Receiver {
    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// Stop; the longest gap between forwarded packets in `from_us..to_us` (from the last packet
    /// before `from_us`), and how many packets arrived in that window.
    fn finish(self, from_us: u64, to_us: u64) -> Result<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the receiver panicked"))??;
        let a = self.arrivals.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = a
            .iter()
            .take_while(|(t, _)| *t < from_us)
            .last()
            .map_or(from_us, |(t, _)| *t);
        let (mut gap, mut got) = (0u64, 0u64);
        let mut gaps = Vec::new();
        for &(t, n) in a.iter().filter(|(t, _)| (from_us..to_us).contains(t)) {
            gap = gap.max(t - last);
            if t - last > 3000 {
                gaps.push(((last - from_us) / 1000, (t - last) / 1000));
            }
            last = t;
            got += n as u64;
        }
        if std::env::var_os("FP_BENCH_GAPS").is_some() {
            println!("# gaps over 3 ms (at ms after the change, length ms): {gaps:?}");
        }
        gap = gap.max(to_us.saturating_sub(last));
        Ok((gap as f64 / 1e3, got))
    }
}

fn config_text(state: &std::path::Path, entries: usize) -> String {
    lb_config(
        entries + entries / 4 + 65536,
        &format!("state_dir = {state:?}\n"),
    )
}

/// `n` connection entries of random IPv4 5-tuples on the backend, idle for up to a second.
fn synthetic(n: usize, seed: u64) -> Carried {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let backend: IpAddr = BACKEND_IP.parse().expect("literal");
    let mut c = Carried {
        v4: (0..n)
            .map(|_| {
                let mut k = [0u8; 13];
                rng.fill(&mut k[..]);
                let e = CarriedEntry {
                    backend,
                    embryonic: false,
                    idle_ms: rng.gen_range(0..1000),
                };
                (k, e)
            })
            .collect(),
        v6: Vec::new(),
        stopped_ms: fp_lb::carry::wall_ms(),
    };
    c.dedup();
    c
}

fn spawn_balancer(b: &Bed, cfg: &std::path::Path, driver: &str) -> Result<fp_testnet::Proc> {
    let exe = crate::flowplane_binary()?;
    Ok(b.balancer
        .cmd([
            exe.to_str().context("executable path")?,
            "run",
            "--config",
            cfg.to_str().context("temp path")?,
            "--interface",
            "eth0",
            "--driver",
            driver,
            "--workers",
            "2",
            "--no-pin",
        ])
        .spawn()?)
}

/// The start line a successor logged (warm, with the entries it carried).
fn start_line(p: &fp_testnet::Proc) -> String {
    p.log()
        .lines()
        .find(|l| l.contains("warm start") || l.contains("cold start"))
        .unwrap_or("(no start line)")
        .trim()
        .to_string()
}

fn measure(b: &Bed, driver: &str, case: &str, entries: usize, kpps: f64, seed: u64) -> Result<Gap> {
    let dir = std::env::temp_dir().join(format!("fp-bench-handover-{}", std::process::id()));
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&state)?;
    let cfg = dir.join("lb.toml");
    std::fs::write(&cfg, config_text(&state, entries))?;
    fp_lb::carry::write(&state.join("connections"), &synthetic(entries, seed))?;
    let ready = Duration::from_secs(300);
    let old = spawn_balancer(b, &cfg, driver)?;
    old.wait_log("flowplane: ready", ready)
        .with_context(|| format!("the first balancer:\n{}", old.log()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let rx = start_receiver(b)?;
    let sender = start_sender(b, stop.clone(), offered.clone(), Some(kpps * 1e3))?;
    std::thread::sleep(Duration::from_secs(1));
    let from = rx.now_us();
    let offered0 = offered.load(Ordering::Relaxed);
    let new = match case {
        "handover" => {
            let new = spawn_balancer(b, &cfg, driver)?;
            new.wait_log("flowplane: ready", ready)
                .with_context(|| format!("the successor:\n{}", new.log()))?;
            old.wait(Duration::from_secs(30))
                .with_context(|| format!("the predecessor:\n{}", old.log()))?;
            if !old.log().contains("handed over") {
                bail!("no handover:\n{}\n---\n{}", old.log(), new.log());
            }
            new
        }
        "stop_start" => {
            old.signal(libc::SIGTERM);
            old.wait(Duration::from_secs(120))?;
            let new = spawn_balancer(b, &cfg, driver)?;
            new.wait_log("flowplane: ready", ready)
                .with_context(|| format!("the successor:\n{}", new.log()))?;
            new
        }
        other => bail!("unknown case {other}"),
    };
    std::thread::sleep(Duration::from_millis(500));
    let to = rx.now_us();
    let offered_n = offered.load(Ordering::Relaxed) - offered0;
    stop.store(true, Ordering::Relaxed);
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?
        .context("sender")?;
    let (gap_ms, got) = rx.finish(from, to)?;
    let line = start_line(&new);
    let log = new.log();
    new.stop(Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    if !line.contains("warm start") {
        bail!("{driver} {case}: the successor did not start warm: {line}");
    }
    println!("# {driver} {case}: {line}");
    if case == "handover" {
        for l in old.log().lines().chain(log.lines()) {
            if l.contains("handover:") || l.contains("cut-over:") || l.contains("handover delta") {
                println!("#   {}", l.trim());
            }
        }
    }
    Ok(Gap {
        gap_ms,
        lost: offered_n.saturating_sub(got),
    })
}

pub fn run(a: HandoverArgs) -> Result<()> {
    let entries = match &a.entries {
        Some(s) => crate::lb::parse_count(s)? as usize,
        None => 1_000_000,
    };
    let rounds = a
        .rounds
        .unwrap_or(if a.common.quick { 1 } else { 3 })
        .max(1);
    let drivers: Vec<String> = if a.drivers.is_empty() {
        vec!["af_packet".into(), "af_xdp".into()]
    } else {
        a.drivers.clone()
    };
    let mut report = Report::new("handover", &a.common)?;
    report.note(&format!(
        "flowplane run with 2 workers on a veth pair with 2 queues, {entries} tracked connections \
         carried into it at its start; UDP frames of 1024 flows at {} kpps; the gap is the \
         longest time between two forwarded packets from the change until the successor has run \
         0.5 s; {rounds} round(s), the cases alternating within each, medians",
        a.kpps
    ));
    let b = bed(2)?;
    for driver in &drivers {
        let mut got: [Vec<Gap>; 2] = [Vec::new(), Vec::new()];
        for r in 0..rounds {
            for (i, case) in ["handover", "stop_start"].into_iter().enumerate() {
                let g = measure(&b, driver, case, entries, a.kpps, a.common.seed ^ r as u64)?;
                println!(
                    "# {driver} {case} round {r}: gap {:.1} ms, {} frames lost",
                    g.gap_ms, g.lost
                );
                got[i].push(g);
            }
        }
        let gap = |i: usize| crate::median(got[i].iter().map(|g| g.gap_ms).collect());
        let lost = |i: usize| crate::median(got[i].iter().map(|g| g.lost as f64).collect());
        let range = |i: usize| {
            let v: Vec<f64> = got[i].iter().map(|g| g.gap_ms).collect();
            format!(
                "{:.1}-{:.1}",
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max)
            )
        };
        report.add(
            Record::lower("gap_ms", gap(0), "ms")
                .param("driver", driver.as_str())
                .param("entries", entries)
                .param("workers", 2)
                .param("kpps", a.kpps)
                .param("rounds", rounds)
                .param("range_ms", range(0))
                .param("frames_lost", lost(0))
                .param("peer_frames_lost", lost(1))
                .param("peer_range_ms", range(1))
                .peer("stop_start", gap(1)),
        )?;
    }
    report.finish()
}
