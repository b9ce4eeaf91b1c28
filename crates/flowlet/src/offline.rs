//! `flowplane flowlet` offline: the Flowlet balancer over a pcap file or generated traffic, with
//! per-outcome counters — the stage ([`crate::stage`]) fed by the engine's software dispatcher.
//!
//! ```text
//!   input port ─► dispatcher: 5-tuple hash (3-tuple for fragments), batching window
//!                   ─► worker 0: parse, drop malformed by reason, FlowletLb (IPv4) + (IPv6) ─┐
//!                   ─► worker 1: ...                                                        ─┼─► output port
//!                   ─► ...                                                                  ─┘
//! ```
//!
//! * **Workers.** One `FlowletLb` per address family per worker (the IPv6 one is created at the
//!   first IPv6 packet). Each balances its own traffic over the outputs (least-loaded by bytes, or
//!   random); the sum of balanced shares is balanced.
//! * **Next hops.** Output `o` is the MAC `02:66:6c:00:HH:LL` (`HH:LL` = `o` big-endian; 02 =
//!   locally administered unicast, 66:6c = "fl"), or the `o`-th address of `--next-hops`.
//!
//! # Time: trace time with a batching window
//!
//! Time comes from the packets (pcap timestamps, generator time), so a capture replays the same way
//! however fast the machine is. A pass runs at the latest timestamp of its burst, and the table's
//! expiry is measured at that time, so a burst must not span much trace time: a flowlet packet
//! processed long after it arrived could find its flowlet expired. Two rules bound the delay, like a
//! NIC's interrupt-moderation window on a live port:
//!
//! * the dispatcher closes a worker's burst at 32 packets *or* when the next packet for that worker
//!   arrived more than `window` after the burst's first one (the engine's batching window);
//! * a worker whose next burst starts more than `window` after its last pass first finishes its
//!   recirculating packets (`flush`) at the time of that last pass.
//!
//! So a packet's passes run within `window` of its arrival plus `2 * window` per recirculation.
//! The default window is a tenth of the flowlet gap (5 us for 50 us). A worker that gets no burst for
//! 5 ms of wall time (input stalled) also flushes (the stage's `idle`), so held buffers always come
//! back.
//!
//! Trade-off: the dispatcher (steering) runs on the calling thread and can limit the rate on
//! small machines; the report therefore also gives the workers' own CPU time per packet.

use crate::cli::FlowletArgs;
use crate::stage::{add_counters, add_stats, FlowletStage, StageReport};
use anyhow::{bail, Context, Result};
use fp_engine::dispatch::{self, Steering};
use fp_engine::driver::{Clock, Options};
use fp_engine::generator::{GenConfig, Generator, Mix, Target};
use fp_engine::memory::NullPort;
use fp_engine::pcap::{PcapReader, PcapWriter};
use fp_engine::port::{Port, PortStats};
use fp_flowstate::workload::{TrafficGen, Workload};
use fp_flowstate::{FlowletConfig, FlowletCounters, Stats};
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{Packet, Pool, MAX_BURST};
use fp_wire::ethernet::MacAddr;
use fp_wire::ip::IpProtocol;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Workloads of `fp_flowstate::workload` (the paper's §5 traffic) accepted by `--generate`.
pub(crate) const WORKLOADS: &[&str] = &["1-pkt", "2-pkt", "8-pkt", "zipf-flows"];

// ---- a run --------------------------------------------------------------------------------------

/// Settings of one run.
struct RunOpts {
    workers: usize,
    cpus: Vec<usize>,
    seed: u64,
    window_ns: u64,
    pin: bool,
    lb: FlowletConfig,
    macs: Vec<MacAddr>,
}

/// What a run did.
struct Summary {
    /// Each worker's report and its thread's CPU time (ns).
    workers: Vec<(StageReport, u64)>,
    parse_drops: [u64; fp_wire::Error::COUNT],
    elapsed: Duration,
    input: PortStats,
    output: PortStats,
}

fn run_flowlet(input: &mut dyn Port, output: &mut dyn Port, o: &RunOpts) -> Result<Summary> {
    let n = o.workers.max(1);
    let mut stages = Vec::with_capacity(n);
    for _ in 0..n {
        stages.push(FlowletStage::new(
            o.lb.clone(),
            o.macs.clone(),
            o.window_ns,
            1,
        )?);
    }
    let steering = Steering {
        seed: o.seed,
        window_ns: Some(o.window_ns),
        // What every worker may hold (its recirculation queue, a burst being decided, its queued
        // bursts), plus the output in transit.
        buffers: n * (o.lb.engine.recirc_capacity + 34 * MAX_BURST) + 64 * MAX_BURST,
    };
    let opts = Options {
        name: "fp-flowlet".into(),
        pin: o.pin,
        cpus: o.cpus.clone(),
        clock: Clock::Packets,
        idle_after: Duration::from_millis(5),
        buffers: o.lb.engine.recirc_capacity + 4 * MAX_BURST,
        ..Options::default()
    };
    let d = dispatch::run(
        &mut [input, &mut *output],
        stages,
        &steering,
        &opts,
        &AtomicBool::new(false),
    )?;
    output
        .flush()
        .with_context(|| format!("writing {}", output.name()))?;
    let mut parse_drops = [0u64; fp_wire::Error::COUNT];
    let mut workers = Vec::with_capacity(n);
    for f in d.workers {
        let r = f.stage.report();
        for (a, b) in parse_drops.iter_mut().zip(&r.parse_drops) {
            *a += b;
        }
        workers.push((r, f.cpu_ns));
    }
    Ok(Summary {
        workers,
        parse_drops,
        elapsed: d.elapsed,
        input: input.stats(),
        output: output.stats(),
    })
}

// ---- generated traffic --------------------------------------------------------------------------

/// A port that turns a Switcharoo workload (`fp_flowstate::workload`) into IPv4/UDP frames of
/// `frame_bytes` bytes with the workload's 5-tuples and timestamps. Each frame is a copy of one
/// template with the addresses, ports and IPv4 header checksum patched; the UDP checksum is 0 ("not
/// computed", allowed over IPv4), so generating a frame does not cost more than balancing it.
struct WorkloadPort {
    gen: TrafficGen,
    left: u64,
    template: Vec<u8>,
    start_ns: u64,
    stats: PortStats,
}

impl WorkloadPort {
    fn new(gen: TrafficGen, packets: u64, frame_bytes: usize, start_ns: u64) -> WorkloadPort {
        let mut template = vec![0u8; frame_bytes];
        let e = Endpoints::new("192.0.2.1", 1, "192.0.2.2", 2);
        let n = craft::udp_into(&e, frame_bytes - 42, &mut template);
        debug_assert_eq!(n, frame_bytes);
        template[40..42].fill(0);
        WorkloadPort {
            gen,
            left: packets,
            template,
            start_ns,
            stats: PortStats::default(),
        }
    }
}

impl Port for WorkloadPort {
    fn name(&self) -> &str {
        "workload"
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        while n < max && self.left > 0 {
            let Some(mut p) = pool.get() else { break };
            let g = self.gen.next().expect("the workload generator is endless");
            let len = self.template.len();
            let f = &mut p.rx_area()[..len];
            f.copy_from_slice(&self.template);
            f[26..30].copy_from_slice(&g.key.src.to_be_bytes());
            f[30..34].copy_from_slice(&g.key.dst.to_be_bytes());
            f[34..36].copy_from_slice(&g.key.sport.to_be_bytes());
            f[36..38].copy_from_slice(&g.key.dport.to_be_bytes());
            f[24..26].fill(0);
            let h: &[u8; 20] = f[14..34].try_into().expect("20 bytes");
            let sum = fp_wire::checksum::finish(fp_wire::checksum::sum20(h));
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            p.set_len(len);
            p.ts_ns = self.start_ns + g.at;
            out.push(p);
            self.left -= 1;
            n += 1;
        }
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.stats.tx_dropped += batch.len() as u64;
        pool.put_all(batch);
        0
    }

    fn exhausted(&self) -> bool {
        self.left == 0
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

fn generator(a: &FlowletArgs, name: &str, seed: u64) -> Result<Box<dyn Port>> {
    let start_ns = 1_000_000_000;
    let workload = match name {
        "1-pkt" => Some(Workload::ONE),
        "2-pkt" => Some(Workload::TWO),
        "8-pkt" => Some(Workload::EIGHT),
        "zipf-flows" => Some(Workload::ZIPF),
        _ => None,
    };
    if !(a.mpps > 0.0 && a.mpps.is_finite()) {
        bail!("--mpps {}: must be a positive rate", a.mpps);
    }
    if let Some(w) = workload {
        if !(42 + 18..=fp_pipeline::packet::MAX_FRAME).contains(&a.frame_bytes) {
            bail!(
                "--frame-bytes {}: must be 60 ..= {}",
                a.frame_bytes,
                fp_pipeline::packet::MAX_FRAME
            );
        }
        let gbps = a.mpps * 1e6 * a.frame_bytes as f64 * 8.0 / 1e9;
        let gen = TrafficGen::new(w, gbps, a.frame_bytes as u32, seed);
        return Ok(Box::new(WorkloadPort::new(
            gen,
            a.packets,
            a.frame_bytes,
            start_ns,
        )));
    }
    let Some(mix) = Mix::named(name, a.conns.max(1)) else {
        bail!(
            "--generate {name:?}: use one of {} or {}",
            WORKLOADS.join(", "),
            Mix::NAMES.join(", ")
        );
    };
    let target = |addr: &str, port, protocol| Target {
        addr: addr.parse().expect("literal address"),
        port,
        protocol,
    };
    Ok(Box::new(Generator::new(GenConfig {
        mix,
        targets: vec![
            target("203.0.113.10", 80, IpProtocol::TCP),
            target("203.0.113.53", 53, IpProtocol::UDP),
            target("2001:db8::10", 80, IpProtocol::TCP),
        ],
        packets: Some(a.packets),
        pps: a.mpps * 1e6,
        seed,
        start_ns,
    })))
}

/// Run offline: a capture or generated traffic through the workers behind the dispatcher; print
/// the report (and write it as JSON with `--json`).
pub fn run(
    a: &FlowletArgs,
    seed: u64,
    window_ns: u64,
    lb: FlowletConfig,
    macs: Vec<MacAddr>,
) -> Result<()> {
    let live = a.live.options();
    let gap_ns = lb.flowlet_timeout_ns;
    let opts = RunOpts {
        workers: live.workers,
        cpus: live.cpus,
        seed,
        window_ns,
        pin: live.pin,
        lb,
        macs,
    };

    let (mut input, source): (Box<dyn Port>, String) = match (&a.input, &a.generate) {
        (Some(p), _) => {
            if a.output.is_none() {
                bail!("--in needs --out OUT.pcap");
            }
            (Box::new(PcapReader::open(p)?), p.display().to_string())
        }
        (None, Some(g)) => (
            generator(a, g, seed)?,
            format!("{} packets of {g:?} at {} Mpps", a.packets, a.mpps),
        ),
        (None, None) => bail!("give --in IN.pcap or --generate NAME"),
    };
    let mut output: Box<dyn Port> = match &a.output {
        Some(p) => Box::new(PcapWriter::create(p)?),
        None => Box::new(NullPort::default()),
    };
    println!(
        "flowplane flowlet: {source} -> {}; {} outputs, flowlet gap {} us, window {} us, {} workers, \
         {} slots per array ({:?}), {:?}, seed {seed:#x}",
        a.output
            .as_ref()
            .map_or("(discarded)".to_string(), |p| p.display().to_string()),
        opts.macs.len(),
        gap_ns as f64 / 1e3,
        window_ns as f64 / 1e3,
        opts.workers,
        a.slots,
        a.mode,
        a.policy,
    );
    let sum = run_flowlet(&mut *input, &mut *output, &opts)?;
    let json = report(&sum, &opts);
    if let Some(p) = &a.json {
        std::fs::write(p, format!("{json}\n"))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Print the report; return it as JSON.
fn report(s: &Summary, o: &RunOpts) -> serde_json::Value {
    let mut c = FlowletCounters {
        packets_per_output: vec![0; o.macs.len()],
        bytes_per_output: vec![0; o.macs.len()],
        ..Default::default()
    };
    let mut st = Stats::default();
    let mut passes = [0u64; 5];
    let mut max_passes = 0;
    let (mut handled, mut in_flight) = (0, 0);
    let cpu_ns: u64 = s.workers.iter().map(|w| w.1).sum();
    for (w, _) in &s.workers {
        add_counters(&mut c, &w.counters);
        add_stats(&mut st, &w.stats);
        for (x, y) in passes.iter_mut().zip(&w.passes) {
            *x += y;
        }
        max_passes = max_passes.max(w.max_passes);
        handled += w.packets;
        in_flight += w.in_flight_end;
    }
    let parse_total: u64 = s.parse_drops.iter().sum();
    let rx = s.input.rx;
    let fwd: u64 = c.packets_per_output.iter().sum();
    let table_drops = st.drops();
    let secs = s.elapsed.as_secs_f64();
    let busy_ns = if handled > 0 {
        cpu_ns as f64 / handled as f64
    } else {
        0.0
    };
    println!();
    println!(
        "packets in      {rx:>12}   ({:.3} Mpps over {secs:.3} s wall clock, all workers; \
         worker CPU {busy_ns:.1} ns per packet)",
        rx as f64 / secs.max(1e-9) / 1e6
    );
    println!(
        "packets out     {:>12}   ({fwd} forwarded by the balancer)",
        s.output.tx
    );
    println!(
        "flowlets        {:>12}   new (no state) / {} after a gap (moved: {}) / {} packets in the same flowlet",
        c.new_flowlets, c.gap_flowlets, c.moved, c.same_flowlet
    );
    println!("per output (next hop, packets, share, bytes):");
    for (i, m) in o.macs.iter().enumerate() {
        let p = c.packets_per_output[i];
        println!(
            "  {i:<4} {}  {p:>12} {:>7.2}% {:>14}",
            m,
            if fwd > 0 {
                100.0 * p as f64 / fwd as f64
            } else {
                0.0
            },
            c.bytes_per_output[i]
        );
    }
    println!(
        "drops by reason ({} in all):",
        parse_total + table_drops + s.input.rx_dropped
    );
    let mut parse_json = serde_json::Map::new();
    for (i, &k) in s.parse_drops.iter().enumerate() {
        if k > 0 {
            let name = fp_wire::Error::ALL[i].name();
            println!("  parse: {name:<28} {k:>10}");
            parse_json.insert(name.to_string(), k.into());
        }
    }
    let table = [
        ("pass_limit", st.drops_pass_limit),
        ("late", st.drops_late),
        ("recirc_overflow", st.drops_overflow),
        ("ordering_full", st.drops_ordering_full),
        ("anomaly", st.drops_anomaly),
    ];
    for (name, k) in table {
        if k > 0 {
            println!("  table: {name:<28} {k:>10}");
        }
    }
    if s.input.rx_dropped > 0 {
        println!("  input: {:<28} {:>10}", "too_large", s.input.rx_dropped);
    }
    if parse_total + table_drops + s.input.rx_dropped == 0 {
        println!("  none");
    }
    let pct = |k: u64| {
        if fwd > 0 {
            100.0 * k as f64 / fwd as f64
        } else {
            0.0
        }
    };
    println!(
        "passes per forwarded packet: 1: {:.3}%  2: {:.3}%  3: {:.3}%  4: {:.3}%  5+: {:.3}%  (max {max_passes})",
        pct(passes[0]),
        pct(passes[1]),
        pct(passes[2]),
        pct(passes[3]),
        pct(passes[4])
    );
    println!(
        "table: {} insertions, {} recirculations ({} waiting for a state in transit, {} for their turn), \
         {} swaps ({} swap passes), {} evictions; {:.4} recirculated passes per insertion",
        st.inserts,
        st.recirculations,
        st.transient_waits,
        st.order_waits,
        st.swaps,
        st.swap_passes,
        st.evictions,
        (st.recirculations + st.swap_passes) as f64 / st.inserts.max(1) as f64
    );
    if in_flight > 0 || st.anomalies > 0 {
        println!(
            "WARNING: {in_flight} packets still in flight at the end, {} anomalies",
            st.anomalies
        );
    }
    serde_json::json!({
        "packets_in": rx,
        "packets_out": s.output.tx,
        "forwarded": fwd,
        "elapsed_s": secs,
        "mpps": rx as f64 / secs.max(1e-9) / 1e6,
        "worker_busy_ns_per_packet": busy_ns,
        "workers": o.workers,
        "seed": o.seed,
        "window_ns": o.window_ns,
        "gap_ns": o.lb.flowlet_timeout_ns,
        "new_flowlets": c.new_flowlets,
        "gap_flowlets": c.gap_flowlets,
        "moved": c.moved,
        "same_flowlet": c.same_flowlet,
        "per_output": o.macs.iter().enumerate().map(|(i, m)| serde_json::json!({
            "next_hop": m.to_string(),
            "packets": c.packets_per_output[i],
            "bytes": c.bytes_per_output[i],
        })).collect::<Vec<_>>(),
        "drops": {
            "parse": parse_json,
            "table": table.iter().map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>(),
            "input_too_large": s.input.rx_dropped,
        },
        "passes_hist": passes,
        "max_passes": max_passes,
        "table": {
            "packets": st.packets,
            "passes": st.passes,
            "inserts": st.inserts,
            "recirculations": st.recirculations,
            "transient_waits": st.transient_waits,
            "order_waits": st.order_waits,
            "swaps": st.swaps,
            "swap_passes": st.swap_passes,
            "evictions": st.evictions,
            "anomalies": st.anomalies,
        },
        "in_flight_end": in_flight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Key;
    use fp_wire::PacketSummary;

    #[test]
    fn workload_frames_carry_the_workload_keys_and_parse() {
        let gen = TrafficGen::new(Workload::EIGHT, 100.0, 1000, 3);
        let mut expect = TrafficGen::new(Workload::EIGHT, 100.0, 1000, 3);
        let mut port = WorkloadPort::new(gen, 100, 1000, 5);
        let mut pool = Pool::new(64);
        let mut got = 0;
        while !port.exhausted() {
            let mut b = Vec::new();
            assert!(port.rx_burst(&mut pool, &mut b, MAX_BURST) > 0);
            for p in b {
                let g = expect.next().unwrap();
                let s = PacketSummary::parse(p.data()).expect("a valid frame");
                assert_eq!(p.len(), 1000);
                assert_eq!(p.ts_ns, 5 + g.at);
                let Key::V4(k) = Key::of(&s) else {
                    panic!("IPv4 expected")
                };
                assert_eq!(
                    (k.src, k.dst, k.sport, k.dport),
                    (g.key.src, g.key.dst, g.key.sport, g.key.dport)
                );
                got += 1;
                pool.put(p);
            }
        }
        assert_eq!(got, 100);
    }
}
