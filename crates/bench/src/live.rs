//! `flowplane-bench live`: the load balancer on veth, per port type, next to kernel forwarding.
//!
//! Topology (network namespaces made and removed by the benchmark): a *sender* namespace and a
//! *balancer* namespace joined by one veth pair. The sender's thread writes 60-byte UDP frames
//! of 1024 flows to a VIP as fast as it can through an AF_PACKET socket (batched `sendmmsg`);
//! the balancer is one-armed, so what it forwards comes back over the same veth to the sender
//! namespace, whose second address is the backend (the GRE packets end there). The cases:
//!
//! * `sender_only` — nothing forwards (`ip_forward=0`): the cost of producing and dropping a
//!   frame, subtracted below to estimate what forwarding itself costs.
//! * `kernel_forward` — the peer: Linux routes the VIP to the same next hop (`ip_forward=1`, one
//!   route, redirects off) between the same namespaces.
//! * `af_packet`, `af_xdp` — `flowplane run --interface` with one worker, GRE toward the backend.
//! * `af_xdp_2q_1w`, `af_xdp_2q_2w` — the same balancer on a veth pair with two queues (the
//!   sender's flows hash over them), with one worker serving both queues and with one worker per
//!   queue: how the balancer scales with workers (on this two-core machine the sender shares the
//!   cores, so the CPU per frame is the figure to read).
//! * `forwarder_af_packet`, `forwarder_af_xdp` — the no-lookup forwarder on the same port driver,
//!   interface and capture as the balancer: one engine worker (pinned to CPU 1) whose stage only
//!   rewrites the Ethernet addresses of each frame to the VIP (toward the backend's MAC) and hands
//!   the burst back to the port — receive, rewrite, transmit: what the ports can do, the bound the
//!   balancer's work sits on (CuckooSwitch's Table 2 "raw packet I/O"). Its CPU figure is the
//!   forwarding thread's own run time (`/proc/self/task/TID/schedstat`).
//! * `forwarder_xdp` — the same no-lookup forwarding done by an XDP program on the balancer's
//!   veth (native mode, `XDP_TX`: no socket, no user space): what a path that never leaves the
//!   driver's receive costs on veth. The sender's veth gets an `XDP_PASS` program for the run,
//!   because a veth receives `XDP_TX` frames only in the NAPI context an XDP program gives it.
//!
//! Reported per case: frames per second delivered back to the sender namespace (the balancer's
//! veth `tx_packets`), the whole machine's CPU time per delivered frame (both cores' wall time
//! minus their idle time: the sender, softirqs, the balancer, everything), that minus the
//! `sender_only` cost per offered frame (the forwarding cost estimate), and the balancer
//! process's own CPU time per frame (its threads' run time, split into user and system by the
//! tick samples' ratio). Then, unless `--throttle 0`, the single-queue cases again with the
//! sender paced to a load every path keeps up with (`throttled_*` records): CPU per frame at
//! equal offered load. Every case runs `--rounds` times (default 3), the cases alternating within
//! each round, and each figure is the median of its rounds (the records carry the range of the
//! delivered rate and of the machine CPU). On veth the sender is usually the bottleneck (a veth
//! transmit runs the receiver's stack in the sender's context), which is why the CPU per frame,
//! not the rate, is the figure to read.

use super::{CommonOpts, Record, Report};
use anyhow::{bail, Context, Result};
use fp_engine::afpacket::{AfPacketConfig, AfPacketPort};
use fp_engine::driver::{self, Options, Running, Worker};
use fp_engine::live::{Capture, LiveControl, LiveSpec};
use fp_engine::port::Port;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_testnet::{Netns, TestNet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Seconds measured per case (after one second of warm-up).
    #[arg(long)]
    pub secs: Option<f64>,
    /// Cases to run (default: all): sender_only, kernel_forward, forwarder_af_packet, af_packet,
    /// forwarder_af_xdp, af_xdp, forwarder_xdp, af_xdp_2q_1w, af_xdp_2q_2w.
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// After the unpaced pass, run the single-queue cases again with the sender paced to this
    /// many kpps (a load every path keeps up with, so CPU per frame compares at equal load);
    /// 0 skips it.
    #[arg(long, default_value_t = 300.0)]
    pub throttle: f64,
    /// Rounds: every case runs once per round, the cases alternating within each round, and each
    /// figure is the median of its rounds (default 3; quick 1).
    #[arg(long)]
    pub rounds: Option<usize>,
}

pub(crate) const SENDER_IP: &str = "10.77.0.1";
pub(crate) const BACKEND_IP: &str = "10.77.0.3";
pub(crate) const BALANCER_IP: &str = "10.77.0.2";
pub(crate) const VIP: &str = "203.0.113.77";
const FLOWS: usize = 1024;

/// Counters read at the start and end of a measurement window.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    at: Option<Instant>,
    /// Frames the balancer's veth sent (what reached the sender namespace).
    delivered: u64,
    /// Frames the sender handed to its socket.
    offered: u64,
    /// The whole machine's idle time.
    machine: Option<crate::env::cpu::Machine>,
    /// CPU time of the balancer process: (user, system) ticks and the run time of its threads,
    /// ns.
    balancer_ns: (u64, u64),
    balancer_run_ns: u64,
    /// Run time of the no-lookup forwarder's thread, ns.
    forwarder_ns: u64,
}

/// `/proc` reports CPU time in USER_HZ ticks, which Linux fixes at 100 per second on every
/// architecture user space sees (sysconf(_SC_CLK_TCK)).
fn clock_tick_ns() -> u64 {
    10_000_000
}

/// (utime, stime) tick samples of a process (all its threads), ns: user time is the pipeline's
/// own work, system time the kernel's socket and veth work done on its behalf. Only their ratio
/// is used (see `crate::env::cpu`).
fn process_cpu_ns(pid: u32) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0, 0);
    };
    // Fields after the command name, which is in parentheses and may contain spaces.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 2..]) else {
        return (0, 0);
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) * clock_tick_ns(), ticks(12) * clock_tick_ns())
}

pub(crate) struct Bed {
    pub(crate) _net: TestNet,
    pub(crate) sender: Netns,
    pub(crate) balancer: Netns,
    pub(crate) balancer_mac: [u8; 6],
    pub(crate) sender_mac: [u8; 6],
}

/// The balancer's workers and the veth's queues of a case (`af_xdp_2q_2w`: 2 queues, 2 workers).
fn queues_workers(case: &str) -> (u32, u32) {
    let mut qw = (1, 1);
    for part in case.split('_') {
        if let Some(q) = part.strip_suffix('q').and_then(|x| x.parse().ok()) {
            qw.0 = q;
        } else if let Some(w) = part.strip_suffix('w').and_then(|x| x.parse().ok()) {
            qw.1 = w;
        }
    }
    qw
}

pub(crate) fn bed(queues: u32) -> Result<Bed> {
    let net = TestNet::new("bench-live")?;
    let s = net.ns("snd")?;
    let l = net.ns("lb")?;
    let (se, le) = net.veth_queues(&s, "eth0", &l, "eth0", queues)?;
    se.addr_add(&format!("{SENDER_IP}/24"))?;
    se.addr_add(&format!("{BACKEND_IP}/24"))?;
    le.addr_add(&format!("{BALANCER_IP}/24"))?;
    // The flows' sources live behind the sender.
    l.route_add("198.18.0.0/15", SENDER_IP)?;
    for (k, v) in [
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.eth0.rp_filter", "0"),
        ("net.ipv4.conf.all.send_redirects", "0"),
        ("net.ipv4.conf.eth0.send_redirects", "0"),
    ] {
        l.sysctl(k, v)?;
    }
    l.ping(BACKEND_IP, 1)?;
    Ok(Bed {
        balancer_mac: le.mac()?,
        sender_mac: se.mac()?,
        sender: s,
        balancer: l,
        _net: net,
    })
}

/// The sender: frames of `FLOWS` flows to the VIP, as fast as the socket takes them.
/// `rate`: frames per second to offer (bursts paced by sleeping until each is due), or as fast
/// as the socket takes them.
pub(crate) fn start_sender(
    b: &Bed,
    stop: Arc<AtomicBool>,
    offered: Arc<AtomicU64>,
    rate: Option<f64>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let (dst, src) = (b.balancer_mac, b.sender_mac);
    let h = b.sender.spawn_thread(move || -> Result<()> {
        let mut port = AfPacketPort::open("eth0", &AfPacketConfig::default())?;
        let frames: Vec<Vec<u8>> = (0..FLOWS)
            .map(|i| {
                let e = Endpoints {
                    src: IpAddr::V4(Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8)),
                    sport: 10_000 + i as u16,
                    dst: VIP.parse().expect("literal"),
                    dport: 5000,
                };
                let mut f = vec![0u8; 128];
                let n = craft::udp_into(&e, 18, &mut f);
                f.truncate(n);
                f[0..6].copy_from_slice(&dst);
                f[6..12].copy_from_slice(&src);
                f
            })
            .collect();
        let mut pool = Pool::new(4 * MAX_BURST);
        let mut batch = burst();
        let mut next = 0usize;
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if let Some(r) = rate {
                let due = start + Duration::from_secs_f64(next as f64 / r);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            for _ in 0..MAX_BURST {
                let Some(mut p) = pool.get() else { break };
                p.fill(&frames[next % FLOWS]);
                next += 1;
                batch.push(p);
            }
            let n = port.tx_burst(&mut batch, &mut pool);
            offered.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    })?;
    Ok(h)
}

fn config_text() -> String {
    lb_config(65536, "")
}

/// The bed's balancer configuration: a UDP VIP on the one backend, `capacity` IPv4 connection
/// entries per worker, `extra` more `[balancer]` lines.
pub(crate) fn lb_config(capacity: usize, extra: &str) -> String {
    format!(
        r#"[balancer]
address = "{BALANCER_IP}"
seed = 1
{extra}conn_table_capacity = {capacity}
conn_table_capacity_v6 = 1024
[[vip]]
name = "bench"
address = "{VIP}"
port = 5000
protocol = "udp"
pools = ["p"]
[[pool]]
name = "p"
backends = [{{ address = "{BACKEND_IP}" }}]
"#
    )
}

#[derive(Clone, Debug)]
struct Outcome {
    pps: f64,
    machine_ns: f64,
    /// Balancer process CPU per frame: (user, system) ns.
    balancer_ns: Option<(f64, f64)>,
    /// The no-lookup forwarder's thread CPU per frame, ns.
    forwarder_ns: Option<f64>,
    offered_pps: f64,
    /// Rounds behind the figures (each the median of its rounds), and the range of the delivered
    /// rate and of the machine CPU per frame over them.
    rounds: usize,
    pps_range: (f64, f64),
    machine_range: (f64, f64),
}

impl Outcome {
    /// The whole machine's CPU per frame as a record, with its rounds and range over them.
    fn machine_record(&self, name: String) -> Record {
        Record::lower(name, self.machine_ns, "ns")
            .param("rounds", self.rounds)
            .param("min_ns", self.machine_range.0.round())
            .param("max_ns", self.machine_range.1.round())
    }

    /// Each figure's median over the rounds of one case (the upper median for an even count).
    fn median(rounds: &[Outcome]) -> Outcome {
        let med = |f: &dyn Fn(&Outcome) -> f64| super::median(rounds.iter().map(f).collect());
        let range = |f: &dyn Fn(&Outcome) -> f64| {
            let v = rounds.iter().map(f);
            (
                v.clone().fold(f64::INFINITY, f64::min),
                v.fold(0.0, f64::max),
            )
        };
        let first = &rounds[0];
        Outcome {
            pps: med(&|o| o.pps),
            machine_ns: med(&|o| o.machine_ns),
            balancer_ns: first.balancer_ns.map(|_| {
                (
                    med(&|o| o.balancer_ns.map_or(0.0, |b| b.0)),
                    med(&|o| o.balancer_ns.map_or(0.0, |b| b.1)),
                )
            }),
            forwarder_ns: first
                .forwarder_ns
                .map(|_| med(&|o| o.forwarder_ns.unwrap_or(0.0))),
            offered_pps: med(&|o| o.offered_pps),
            rounds: rounds.len(),
            pps_range: range(&|o| o.pps),
            machine_range: range(&|o| o.machine_ns),
        }
    }
}

/// The no-lookup forwarder: IPv4 frames to the VIP get the backend's MAC as destination and the
/// balancer's as source and go back out of the port they came in on; anything else is dropped.
struct Forwarder {
    dst: [u8; 6],
    src: [u8; 6],
    vip: [u8; 4],
    tid: Arc<std::sync::atomic::AtomicI32>,
}

impl Stage for Forwarder {
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        _now_ns: u64,
    ) {
        for mut p in rx.drain(..) {
            let d = p.data_mut();
            if d.len() >= 34 && d[12..14] == [0x08, 0x00] && d[30..34] == self.vip {
                d[0..6].copy_from_slice(&self.dst);
                d[6..12].copy_from_slice(&self.src);
                out.to(port).push(p);
            } else {
                pool.put(p);
            }
        }
    }

    fn maintain(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {
        crate::env::note_thread_id(&self.tid);
    }
}

/// Start the no-lookup forwarder on the balancer's interface with port driver `driver`.
#[allow(clippy::type_complexity)]
fn start_forwarder(
    b: &Bed,
    driver: &str,
) -> Result<(
    Running<Forwarder>,
    Arc<std::sync::atomic::AtomicI32>,
    LiveControl,
)> {
    let d = fp_engine::live::driver(driver).map_err(|e| anyhow::anyhow!(e))?;
    let vip: IpAddr = VIP.parse().expect("literal");
    let spec = LiveSpec::new(&["eth0"], 1, Capture::Destinations(vec![vip]));
    let mut opened = b.balancer.enter(move || d.open(&spec))??;
    let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let running = driver::start(
        vec![Worker {
            stage: Forwarder {
                dst: b.sender_mac,
                src: b.balancer_mac,
                vip: VIP.parse::<Ipv4Addr>().expect("literal").octets(),
                tid: tid.clone(),
            },
            ports: opened.ports.remove(0),
        }],
        &Options {
            name: "fp-forward".into(),
            pin: true,
            first_cpu: 1,
            ..Options::default()
        },
    )?;
    let t = Instant::now();
    while tid.load(Ordering::Relaxed) == 0 {
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(20),
            "the forwarder did not start"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The control (steering, interface settings) is undone when the caller drops it, after the
    // run.
    Ok((running, tid, opened.control))
}

/// The no-lookup forwarder inside XDP: an IPv4 frame to `vip` gets `dst` as destination MAC and
/// `src` as source and goes back out of the interface it came in on (`XDP_TX`) before the kernel
/// builds a socket buffer for it; anything else (other addresses, other protocols, frames shorter
/// than the IPv4 header) is passed to the kernel unchanged.
fn xdp_forwarder_program(
    vip: [u8; 4],
    dst: [u8; 6],
    src: [u8; 6],
) -> Result<Vec<fp_ebpf::asm::Insn>> {
    use fp_ebpf::asm::{Asm, Cond, Size, R0, R1, R2, R3, R4, R5};
    use fp_ebpf::helper::xdp;
    // Packet bytes are stored and compared as the little-endian words they form in memory.
    let word = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let half = |b: &[u8]| i32::from(u16::from_le_bytes([b[0], b[1]]));
    let mut a = Asm::new();
    let pass = a.label();
    a.load(Size::W, R2, R1, 0); // data
    a.load(Size::W, R3, R1, 4); // data_end
    a.mov64(R4, R2);
    a.add64(R4, 34); // Ethernet + IPv4 header
    a.jmp(Cond::Gt, R4, R3, pass);
    a.load(Size::H, R5, R2, 12);
    a.jmp(Cond::Ne, R5, half(&[0x08, 0x00]), pass);
    a.load(Size::W, R5, R2, 30);
    a.jmp32(Cond::Ne, R5, word(&vip), pass);
    a.store_imm(Size::W, R2, 0, word(&dst[0..4]));
    a.store_imm(Size::H, R2, 4, half(&dst[4..6]));
    a.store_imm(Size::H, R2, 6, half(&src[0..2]));
    a.store_imm(Size::W, R2, 8, word(&src[2..6]));
    a.mov64(R0, xdp::TX);
    a.exit();
    a.bind(pass);
    a.mov64(R0, xdp::PASS);
    a.exit();
    Ok(a.finish()?)
}

/// The XDP forwarder attached (native mode) to the balancer's interface, and a program that
/// passes every frame attached to the sender's end of the veth: a veth receives frames sent by
/// `XDP_TX` only in the NAPI context an XDP program gives it (without one the kernel drops them
/// as `xdp_tx_errors`). Both are detached on drop.
struct XdpForwarder {
    _progs: [fp_ebpf::Program; 2],
    _links: [fp_ebpf::XdpLink; 2],
}

fn start_xdp_forwarder(b: &Bed) -> Result<XdpForwarder> {
    use fp_ebpf::{ifindex, ProgType, Program, XdpLink, XdpMode};
    let insns = xdp_forwarder_program(
        VIP.parse::<Ipv4Addr>().expect("literal").octets(),
        b.sender_mac,
        b.balancer_mac,
    )?;
    let (fwd, fwd_link) = b.balancer.enter(move || -> Result<_> {
        let prog = Program::load(ProgType::Xdp, "fp_xdp_forward", &insns)?;
        let link = XdpLink::attach(&prog, ifindex("eth0")?, XdpMode::Native)?;
        Ok((prog, link))
    })??;
    let (pass, pass_link) = b.sender.enter(move || -> Result<_> {
        let mut a = fp_ebpf::asm::Asm::new();
        a.mov64(fp_ebpf::asm::R0, fp_ebpf::helper::xdp::PASS);
        a.exit();
        let prog = Program::load(ProgType::Xdp, "fp_xdp_pass", &a.finish()?)?;
        let link = XdpLink::attach(&prog, ifindex("eth0")?, XdpMode::Native)?;
        Ok((prog, link))
    })??;
    Ok(XdpForwarder {
        _progs: [fwd, pass],
        _links: [fwd_link, pass_link],
    })
}

fn measure(b: &Bed, case: &str, secs: f64, rate: Option<f64>) -> Result<Outcome> {
    let forward = if case == "kernel_forward" { "1" } else { "0" };
    b.balancer.sysctl("net.ipv4.ip_forward", forward)?;
    if case == "kernel_forward" {
        b.balancer.route_add(&format!("{VIP}/32"), BACKEND_IP)?;
    }
    let dir = std::env::temp_dir().join(format!("fp-bench-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("lb.toml");
    std::fs::write(&cfg, config_text())?;
    let (_, workers) = queues_workers(case);
    let workers = workers.to_string();
    let proc = match case {
        "af_packet" | "af_xdp" | "af_xdp_2q_1w" | "af_xdp_2q_2w" => {
            let driver = if case.starts_with("af_xdp") {
                "af_xdp"
            } else {
                "af_packet"
            };
            let exe = crate::flowplane_binary()?;
            let p = b
                .balancer
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
                    &workers,
                    "--no-pin",
                ])
                .spawn()?;
            p.wait_log("flowplane: ready", Duration::from_secs(10))?;
            Some(p)
        }
        "sender_only"
        | "kernel_forward"
        | "forwarder_af_packet"
        | "forwarder_af_xdp"
        | "forwarder_xdp" => None,
        other => bail!("--cases: unknown case {other:?}"),
    };
    let fwd = match case.strip_prefix("forwarder_").filter(|d| *d != "xdp") {
        Some(driver) => Some(start_forwarder(b, driver)?),
        None => None,
    };
    let xdp = if case == "forwarder_xdp" {
        Some(start_xdp_forwarder(b)?)
    } else {
        None
    };
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let sender = start_sender(b, stop.clone(), offered.clone(), rate)?;
    let lb_link = b.balancer.link("eth0");
    let sample = || -> Result<Sample> {
        Ok(Sample {
            at: Some(Instant::now()),
            delivered: lb_link.stats()?.tx_packets,
            offered: offered.load(Ordering::Relaxed),
            machine: Some(crate::env::cpu::Machine::now()?),
            balancer_ns: proc.as_ref().map_or((0, 0), |p| process_cpu_ns(p.pid())),
            balancer_run_ns: proc
                .as_ref()
                .map_or(0, |p| crate::env::cpu::process_run_ns(&p.pid().to_string())),
            forwarder_ns: fwd.as_ref().map_or(Ok(0), |(_, tid, _)| {
                crate::env::thread_cpu_ns(tid.load(Ordering::Relaxed))
            })?,
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let a = sample()?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    let z = sample()?;
    stop.store(true, Ordering::Relaxed);
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))?;
    sent.context("sender")?;
    if let Some((running, _, control)) = fwd {
        running.stop()?;
        drop(control);
    }
    drop(xdp);
    if let Some(p) = &proc {
        let log = p.log();
        p.stop(Duration::from_secs(5));
        if !log.contains("ready") {
            bail!("balancer did not run:\n{log}");
        }
    }
    if case == "kernel_forward" {
        b.balancer.route_del(&format!("{VIP}/32"))?;
        b.balancer.sysctl("net.ipv4.ip_forward", "0")?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let dt = (z.at.expect("set") - a.at.expect("set")).as_secs_f64();
    let delivered = z.delivered - a.delivered;
    let offered_n = (z.offered - a.offered).max(1);
    // Per delivered frame for forwarding cases; per offered frame for the sender-only case.
    let per = if case == "sender_only" {
        offered_n
    } else {
        delivered.max(1)
    };
    Ok(Outcome {
        pps: delivered as f64 / dt,
        machine_ns: a.machine.expect("set").busy_until(&z.machine.expect("set")) as f64
            / per as f64,
        // The run time is exact; the user/system split comes from the tick samples.
        balancer_ns: proc.as_ref().map(|_| {
            let run = (z.balancer_run_ns - a.balancer_run_ns) as f64 / per as f64;
            let user = (z.balancer_ns.0 - a.balancer_ns.0) as f64;
            let sys = (z.balancer_ns.1 - a.balancer_ns.1) as f64;
            let share = if user + sys > 0.0 {
                user / (user + sys)
            } else {
                0.0
            };
            (run * share, run * (1.0 - share))
        }),
        forwarder_ns: (case.starts_with("forwarder_") && case != "forwarder_xdp")
            .then(|| (z.forwarder_ns - a.forwarder_ns) as f64 / per as f64),
        offered_pps: offered_n as f64 / dt,
        rounds: 1,
        pps_range: (0.0, 0.0),
        machine_range: (0.0, 0.0),
    })
}

/// One pass over `cases`: `rounds` times each, the cases alternating within every round (a test
/// bed per queue count, made when its first case of the round runs), each case's figures the
/// median of its rounds.
fn run_pass<'c>(
    cases: &[&'c str],
    secs: f64,
    rate: Option<f64>,
    rounds: usize,
) -> Result<Vec<(&'c str, Outcome)>> {
    let mut all: Vec<Vec<Outcome>> = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        let mut b: Option<(u32, Bed)> = None;
        for (c, out) in cases.iter().zip(all.iter_mut()) {
            let (queues, _) = queues_workers(c);
            if b.as_ref().map(|(q, _)| *q) != Some(queues) {
                drop(b.take()); // the old bed's namespaces go first
                b = Some((queues, bed(queues)?));
            }
            let (_, bed) = b.as_ref().expect("made above");
            out.push(measure(bed, c, secs, rate)?);
        }
    }
    Ok(cases
        .iter()
        .copied()
        .zip(all.iter().map(|v| Outcome::median(v)))
        .collect())
}

/// The records of one pass over the cases: names prefixed by `prefix`, each with the sender's
/// target rate where it was paced.
fn add_records(
    report: &mut Report,
    got: &[(&str, Outcome)],
    prefix: &str,
    target_kpps: Option<f64>,
) -> Result<()> {
    let mut add = |r: Record| -> Result<()> {
        report.add(match target_kpps {
            Some(t) => r.param("offered_target_kpps", t),
            None => r,
        })
    };
    let find = |n: &str| got.iter().find(|(c, _)| *c == n).map(|(_, o)| o);
    let send_cost = find("sender_only").map(|o| o.machine_ns);
    let kernel = find("kernel_forward");
    for (c, o) in got {
        let net = send_cost.map(|s| (o.machine_ns - s).max(0.0));
        match *c {
            "sender_only" => {
                add(o
                    .machine_record(format!("{prefix}sender_only_cpu_per_frame"))
                    .param("offered_kpps", o.offered_pps / 1e3))?;
            }
            _ => {
                let mut r = Record::higher(format!("{prefix}{c}"), o.pps / 1e3, "kpps")
                    .param("offered_kpps", o.offered_pps / 1e3)
                    .param("rounds", o.rounds)
                    .param("min_kpps", (o.pps_range.0 / 1e2).round() / 10.0)
                    .param("max_kpps", (o.pps_range.1 / 1e2).round() / 10.0);
                if *c == "forwarder_xdp" {
                    r = r.param(
                        "path",
                        "XDP program in native mode, XDP_TX; an XDP_PASS program on the \
                         sender's veth (a veth receives XDP_TX frames only with one)",
                    );
                }
                if let Some(k) = kernel.filter(|_| *c != "kernel_forward") {
                    r = r.peer(format!("{prefix}kernel_forward"), k.pps / 1e3);
                }
                add(r)?;
                let mut r = o.machine_record(format!("{prefix}{c}_machine_cpu_per_frame"));
                if let Some(k) = kernel.filter(|_| *c != "kernel_forward") {
                    r = r.peer(format!("{prefix}kernel_forward"), k.machine_ns);
                }
                add(r)?;
                if let Some(n) = net {
                    let mut r =
                        Record::lower(format!("{prefix}{c}_forwarding_cpu_per_frame"), n, "ns")
                            .param("method", "machine CPU minus sender_only");
                    if let (Some(k), Some(s)) =
                        (kernel.filter(|_| *c != "kernel_forward"), send_cost)
                    {
                        r = r.peer(
                            format!("{prefix}kernel_forward"),
                            (k.machine_ns - s).max(0.0),
                        );
                    }
                    add(r)?;
                }
                if let Some(ns) = o.forwarder_ns {
                    add(
                        Record::lower(format!("{prefix}{c}_thread_cpu_per_frame"), ns, "ns")
                            .param("method", "forwarding thread's run time (schedstat)"),
                    )?;
                }
                // The balancer against the no-lookup forwarder on the same driver: what its work
                // costs on top of the ports'.
                if let Some(f) = find(&format!("forwarder_{c}")) {
                    add(
                        Record::higher(format!("{prefix}{c}_vs_forwarder"), o.pps / 1e3, "kpps")
                            .param("offered_kpps", o.offered_pps / 1e3)
                            .peer(format!("{prefix}forwarder_{c}"), f.pps / 1e3),
                    )?;
                    if let (Some(n), Some(s)) = (net, send_cost) {
                        add(Record::lower(
                            format!("{prefix}{c}_forwarding_cpu_vs_forwarder"),
                            n,
                            "ns",
                        )
                        .param("method", "machine CPU minus sender_only")
                        .peer(
                            format!("{prefix}forwarder_{c}"),
                            (f.machine_ns - s).max(0.0),
                        ))?;
                    }
                }
                // Scaling: two workers, one per queue, against one worker serving both queues.
                if let Some(one) = c.strip_suffix("_2w").and_then(|p| find(&format!("{p}_1w"))) {
                    add(
                        Record::higher(format!("{prefix}{c}_vs_1w"), o.pps / 1e3, "kpps")
                            .param("offered_kpps", o.offered_pps / 1e3)
                            .peer(
                                format!("{prefix}{}", c.replace("_2w", "_1w")),
                                one.pps / 1e3,
                            ),
                    )?;
                    add(Record::lower(
                        format!("{prefix}{c}_machine_cpu_vs_1w"),
                        o.machine_ns,
                        "ns",
                    )
                    .peer(
                        format!("{prefix}{}", c.replace("_2w", "_1w")),
                        one.machine_ns,
                    ))?;
                }
                if let Some((user, sys)) = o.balancer_ns {
                    add(Record::lower(
                        format!("{prefix}{c}_balancer_process_cpu_per_frame"),
                        user + sys,
                        "ns",
                    )
                    .param("user_ns", user.round())
                    .param("system_ns", sys.round()))?;
                }
            }
        }
    }
    Ok(())
}

pub fn run(a: LiveArgs) -> Result<()> {
    let secs = a
        .secs
        .unwrap_or(if a.common.quick { 3.0 } else { 10.0 })
        .max(0.5);
    let rounds = a
        .rounds
        .unwrap_or(if a.common.quick { 1 } else { 3 })
        .max(1);
    let all = [
        "sender_only",
        "kernel_forward",
        "forwarder_af_packet",
        "af_packet",
        "forwarder_af_xdp",
        "af_xdp",
        "forwarder_xdp",
        "af_xdp_2q_1w",
        "af_xdp_2q_2w",
    ];
    let cases: Vec<&str> = if a.cases.is_empty() {
        all.to_vec()
    } else {
        all.iter()
            .copied()
            .filter(|c| a.cases.iter().any(|x| x == c))
            .collect()
    };
    if cases.is_empty() {
        bail!("--cases: choose from {}", all.join(", "));
    }
    let mut report = Report::new("live", &a.common)?;
    report.note(&format!(
        "60-byte UDP frames of {FLOWS} flows from an AF_PACKET sender over one veth pair; \
         one balancer worker (the _2q_ cases: a veth with two queues, one or two workers), GRE to a \
         backend on the sender's side; {secs} s per case after 1 s warm-up; {rounds} round(s), the \
         cases alternating within each, every figure the median of its rounds"
    ));
    let got = run_pass(&cases, secs, None, rounds)?;
    add_records(&mut report, &got, "", None)?;
    // The same cases at a paced load every path keeps up with, so CPU per frame is compared at
    // equal offered load (the two-queue cases are left out: they scale the unpaced load).
    if let Some(t) = Some(a.throttle).filter(|&t| t > 0.0) {
        let single: Vec<&str> = cases
            .iter()
            .filter(|c| queues_workers(c).0 == 1)
            .copied()
            .collect();
        report.note(&format!(
            "throttled pass: the sender paced to {t} kpps, cases {}",
            single.join(", ")
        ));
        let paced = run_pass(&single, secs, Some(t * 1e3), rounds)?;
        add_records(&mut report, &paced, "throttled_", Some(t))?;
    }
    report.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The XDP forwarder in the kernel (`BPF_PROG_TEST_RUN`; needs root): frames to the VIP come
    /// back with the new Ethernet addresses and `XDP_TX`, everything else passes unchanged.
    #[test]
    fn xdp_forwarder_rewrites_vip_frames_and_passes_the_rest() {
        let (dst, src) = ([2, 0, 0, 0, 0, 0xd1], [2, 0, 0, 0, 0, 0x51]);
        let vip = [203, 0, 113, 77];
        let insns = xdp_forwarder_program(vip, dst, src).unwrap();
        let prog = fp_ebpf::Program::load(fp_ebpf::ProgType::Xdp, "fp_xdp_fwd_test", &insns)
            .expect("loading an XDP program needs root");
        let udp = |to: [u8; 4]| {
            let e = Endpoints {
                src: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
                sport: 10_000,
                dst: IpAddr::V4(Ipv4Addr::from(to)),
                dport: 5000,
            };
            let mut f = vec![0u8; 128];
            let n = craft::udp_into(&e, 18, &mut f);
            f.truncate(n);
            f[0..12].copy_from_slice(&[0xee; 12]);
            f
        };
        let (action, out) = prog.test_run(&udp(vip)).unwrap();
        assert_eq!(action, fp_ebpf::helper::xdp::TX as u32);
        let mut want = udp(vip);
        want[0..6].copy_from_slice(&dst);
        want[6..12].copy_from_slice(&src);
        assert_eq!(out, want);
        let mut arp = udp(vip);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut short = udp(vip);
        short.truncate(33);
        for f in [udp([203, 0, 113, 78]), udp([77, 113, 0, 203]), arp, short] {
            let (action, out) = prog.test_run(&f).unwrap();
            assert_eq!(action, fp_ebpf::helper::xdp::PASS as u32);
            assert_eq!(out, f);
        }
    }
}
