//! End-to-end tests of scale-out (Maglev §2.1, §3.3-3.4, §4.1.1, §4.3): several
//! `flowplane run` balancers behind a router that spreads VIP traffic over them by ECMP, each
//! announcing the VIPs over BGP through the BIRD it starts itself (`[bgp]`, fp-control's
//! announcer), real HTTP backends, and a client under load while balancers join, drain, crash
//! and go silent.
//!
//! # Topology
//!
//! ```text
//!            10.72.1.0/24 (MTU 1400)          10.72.2.0/24, one Linux bridge ("sw")
//!   client ───────────────────── router ───┬──────────┬──────────┬──────────┬─────────────┐
//!   10.72.1.2          10.72.1.1  10.72.2.1│          │          │          │             │
//!   wrk, keep-alive     BIRD (AS 65000):   lb1 .11    lb2 .12    lb3 .13    b1..b3 .21-.23
//!   probes, UDP         BGP from lb1..lb3, flowplane run --interface eth0, nginx "backend N",
//!                       kernel protocol    [bgp] (AS 65001, hold 3 s,      UDP receiver :9999,
//!                       `merge paths on`,  drain 1.5 s), [cluster]         VIPs on lo, GRE decap
//!                       L4 multipath hash  of all three, same seed         (`flowplane backend`)
//! ```
//!
//! The router learns the VIPs from every balancer that announces them and installs one ECMP
//! route whose next hops are those balancers; `fib_multipath_hash_policy = 1` hashes the 5-tuple.
//! A balancer GRE-encapsulates to a backend on the bridge (one-armed, out of the same `eth0`); the
//! backend answers the client directly through the router (DSR). All balancers have the same
//! configuration except `balancer.address` (and the BGP state directory): the same seed, table
//! size and backends, so their Maglev tables are identical — a connection that ECMP moves to
//! another balancer reaches the same backend there (§3.4).
//!
//! The client-router link has MTU 1400 so that a full-size packet from the client still fits
//! the bridge's 1500 bytes after 24 bytes of GRE (fragments included).
//!
//! # What is asserted
//!
//! 1. `ecmp_add_and_drain`: with lb1 and lb2 running, the router's route to each VIP has exactly
//!    their addresses as next hops; both balancers report the same Maglev table digest
//!    (`flowplane_maglev_table_info`); 60 new connections all succeed and both balancers carry
//!    some. Then, under wrk and 40 keep-alive probe connections: lb3 starts (route grows to 3 next
//!    hops, lb3's digest agrees, it carries moved connections), and lb1 is drained by SIGTERM
//!    (route shrinks before lb1 stops; lb1 exits 0 after the drain time). Zero failed requests,
//!    zero broken probe connections, and no probe connection ever changes backend. Finally every
//!    backend's nginx stops: with no healthy backend the VIPs are withdrawn (route gone, table
//!    digest `none`); nginx comes back and they are announced again.
//! 2. `abrupt_failures`: under the same load on three balancers, lb2's flowplane gets SIGKILL
//!    (its BIRD must die with it: parent-death signal, and the router withdraws at once on the
//!    closed session), then lb3 hangs (flowplane and BIRD stopped with SIGSTOP, kernel up: silent,
//!    only the hold timer can tell, and until then its share of packets is lost). Each is
//!    withdrawn (times printed: closed session → milliseconds, silence → the hold time); the
//!    share of connections that broke is reported and must be zero for the probes (identical
//!    Maglev tables, no backend change), and wrk must see no connection error.
//!
//!    A link cut is *not* used for the silent case: the Linux bridge then forgets the balancer's
//!    MAC and floods its frames to every port, and the other balancers forward them (flowplane
//!    does not drop frames addressed to another MAC), which hides the outage.
//! 3. `fragments_reach_one_backend`: large UDP datagrams — fragmented by the client's kernel, and
//!    crafted with scapy so that their fragments hit different balancers in every order — each
//!    reach exactly one backend, intact (fragments redirected to their datagram's owner
//!    balancer, Maglev §4.3).
//!
//! The tests serialise themselves. They need root, bird2, nginx, wrk and python3-scapy, and fail
//! saying so otherwise. `cargo test -p flowplane --test scaleout -- --nocapture` prints every
//! measured figure (docs/deployment.md quotes them).

mod common;

use anyhow::{anyhow, bail, ensure, Context, Result};
use fp_testnet::{Netns, Nginx, NginxConfig, Proc, TestNet, WrkOptions, WrkReport};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_flowplane");

const CLIENT: &str = "10.72.1.2";
const ROUTER_C: &str = "10.72.1.1";
const ROUTER_L: &str = "10.72.2.1";
const VIP: &str = "10.100.72.10";
const VIP_UDP: &str = "10.100.72.20";
const UDP_PORT: u16 = 9999;
const ADMIN: &str = "127.0.0.1:9100";
const ROUTER_AS: u32 = 65000;
const LB_AS: u32 = 65001;
const HOLD_S: u64 = 3;
const DRAIN_MS: u64 = 1500;
const BALANCERS: usize = 3;
const BACKENDS: usize = 3;

/// A balancer's BGP session comes up about 1 s after BIRD starts (both sides' connect delay);
/// the route follows within milliseconds. Slack for a loaded 2-core machine.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(15);
/// Withdrawals that do not wait for a timer (update, Cease, TCP close) reach the router's kernel
/// table in milliseconds; slack for a loaded machine.
const WITHDRAWN_WITHIN: Duration = Duration::from_secs(2);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn lb_addr(i: usize) -> String {
    format!("10.72.2.{}", 10 + i)
}

fn backend_addr(i: usize) -> String {
    format!("10.72.2.{}", 20 + i)
}

fn body_of(i: usize) -> String {
    format!("backend {i}")
}

fn set_of(addrs: &[String]) -> BTreeSet<String> {
    addrs.iter().cloned().collect()
}

// ---------------------------------------------------------------------------------------------
// The lab.

/// Datagrams the backends' UDP receivers got: (backend, payload).
type Received = Arc<Mutex<Vec<(usize, Vec<u8>)>>>;

struct LbSlot {
    ns: Netns,
    mac: String,
    config: PathBuf,
    proc: Option<Proc>,
}

struct Lab {
    /// Owns every namespace and process; dropping it removes them.
    _net: TestNet,
    client: Netns,
    router: Netns,
    router_bird: Proc,
    router_socket: PathBuf,
    lbs: Vec<LbSlot>,
    backends: Vec<Netns>,
    nginx: Vec<Nginx>,
    /// Datagrams the backends' UDP receivers got: (backend, payload).
    udp_rx: Received,
    udp_stop: Arc<AtomicBool>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.udp_stop.store(true, Ordering::Relaxed);
    }
}

fn router_bird_config() -> String {
    let mut s = format!(
        "router id {ROUTER_L};\nlog stderr all;\n\
         protocol device {{ scan time 1; }}\n\
         protocol kernel {{ ipv4 {{ import none; export where source = RTS_BGP; }}; merge paths on; }}\n\
         template bgp balancer {{\n  local as {ROUTER_AS};\n  hold time {HOLD_S};\n  keepalive time 1;\n  \
         connect delay time 1;\n  connect retry time 1;\n  error wait time 1, 5;\n  \
         debug {{ states, events }};\n  ipv4 {{ import all; export none; }};\n}}\n"
    );
    for i in 1..=BALANCERS {
        s += &format!(
            "protocol bgp lb{i} from balancer {{ neighbor {} as {LB_AS}; }}\n",
            lb_addr(i)
        );
    }
    s
}

/// Balancer `i`'s configuration: identical for all balancers but for its own address and BGP
/// state directory.
fn lb_config(i: usize, state_dir: &str) -> String {
    let cluster = (1..=BALANCERS)
        .map(|k| format!("\"{}\"", lb_addr(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let backends = (1..=BACKENDS)
        .map(|k| format!("{{ address = \"{}\" }}", backend_addr(k)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[balancer]\naddress = \"{addr}\"\nseed = 0x5ca1e0\nmaglev_size = 65537\n\
         conn_table_capacity = 65536\nconn_idle_timeout_ms = 120000\n\n\
         [bgp]\nspeaker = \"bird\"\nlocal_as = {LB_AS}\npeer = \"{ROUTER_L}\"\npeer_as = {ROUTER_AS}\n\
         hold_time_s = {HOLD_S}\ndrain_ms = {DRAIN_MS}\nstate_dir = \"{state_dir}\"\n\n\
         [cluster]\nbalancers = [{cluster}]\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nprotocol = \"tcp\"\npools = [\"web\"]\nencap = \"gre\"\n\n\
         [[vip]]\nname = \"dgram\"\naddress = \"{VIP_UDP}\"\nport = {UDP_PORT}\nprotocol = \"udp\"\npools = [\"web\"]\nencap = \"gre\"\n\n\
         [[pool]]\nname = \"web\"\nbackends = [{backends}]\n\
         health = {{ kind = \"http\", path = \"/\", status = 200, body = \"backend\", interval_ms = 500, \
         timeout_ms = 300, rise = 2, fall = 2 }}\n",
        addr = lb_addr(i)
    )
}

fn nginx_config(i: usize) -> NginxConfig {
    NginxConfig {
        body: format!("{}\n", body_of(i)),
        ..Default::default()
    }
}

fn build_lab(tag: &str) -> Result<Lab> {
    build_lab_with(tag, BACKENDS)
}

/// The lab with `backends` backends (every balancer's configuration lists the first
/// [`BACKENDS`]).
fn build_lab_with(tag: &str, backends_n: usize) -> Result<Lab> {
    let net = TestNet::new(tag)?;
    net.require_tools(&["bird", "birdc", "nginx", "wrk", "curl"])?;
    let quiet = |ns: &Netns| -> Result<()> {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
        Ok(())
    };
    let client = net.ns("client")?;
    let router = net.ns("router")?;
    let sw = net.ns("sw")?;
    for ns in [&client, &router, &sw] {
        quiet(ns)?;
    }
    let br = sw.bridge("br0")?;

    let (c0, r0) = net.veth(&client, "eth0", &router, "eth0")?;
    c0.set_mtu(1400)?;
    r0.set_mtu(1400)?;
    c0.addr_add(&format!("{CLIENT}/24"))?;
    r0.addr_add(&format!("{ROUTER_C}/24"))?;
    // docs/platform.md, "Partial checksums on veth": the client's segments cross the balancers' AF_PACKET sockets.
    c0.tx_checksum_off()?;
    client.route_add("default", ROUTER_C)?;
    // veth keeps a locally sent packet's socket hash (skb->hash, marked as an L4 hash) across
    // namespaces, and the router's multipath code uses such a hash as it is instead of hashing
    // the headers. After a retransmission timeout Linux TCP picks a new random socket hash, so
    // a stalled connection would hop to another next hop on its own — which a real router
    // (hashing the 5-tuple) never does, and which would hide outages. No rehash in the client.
    client.sysctl("net.core.txrehash", "0")?;

    let (r1, p) = net.veth(&router, "eth1", &sw, "p-router")?;
    p.set_master(&br)?;
    r1.addr_add(&format!("{ROUTER_L}/24"))?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    router.sysctl("net.ipv4.fib_multipath_hash_policy", "1")?;
    router.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
    router.sysctl("net.ipv4.conf.default.rp_filter", "0")?;

    let mut lbs = Vec::new();
    for i in 1..=BALANCERS {
        let ns = net.ns(&format!("lb{i}"))?;
        quiet(&ns)?;
        let (e, p) = net.veth(&ns, "eth0", &sw, &format!("p-lb{i}"))?;
        p.set_master(&br)?;
        e.addr_add(&format!("{}/24", lb_addr(i)))?;
        // The kernel must drop (not forward) the VIP packets AF_PACKET also hands to flowplane.
        ns.sysctl("net.ipv4.ip_forward", "0")?;
        let dir = net.dir(&format!("lb{i}"))?;
        let config = dir.join("flowplane.toml");
        let state = dir.join("bgp");
        std::fs::write(&config, lb_config(i, &state.to_string_lossy()))?;
        lbs.push(LbSlot {
            mac: e.mac_string()?,
            ns,
            config,
            proc: None,
        });
    }

    let udp_rx: Received = Arc::default();
    let udp_stop = Arc::new(AtomicBool::new(false));
    let mut nginx = Vec::new();
    let mut backends = Vec::new();
    for i in 1..=backends_n {
        let ns = net.ns(&format!("b{i}"))?;
        quiet(&ns)?;
        let (e, p) = net.veth(&ns, "eth0", &sw, &format!("p-b{i}"))?;
        p.set_master(&br)?;
        e.addr_add(&format!("{}/24", backend_addr(i)))?;
        ns.route_add("default", ROUTER_L)?;
        let state = net.dir(&format!("backend-b{i}"))?.join("state.json");
        let state = state.to_string_lossy().into_owned();
        ns.cmd([
            BIN,
            "backend",
            "--interface",
            "eth0",
            "--vip",
            VIP,
            "--vip",
            VIP_UDP,
            "--decap",
            "gre",
            "--state",
            &state,
        ])
        .run()
        .context("flowplane backend")?;
        nginx.push(ns.nginx(&nginx_config(i))?);
        backends.push(ns.clone());
        let sock = ns.enter(|| UdpSocket::bind(("0.0.0.0", UDP_PORT)))??;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let (rx, stop) = (udp_rx.clone(), udp_stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, _)) = sock.recv_from(&mut buf) {
                    rx.lock().unwrap().push((i, buf[..n].to_vec()));
                }
            }
        });
    }

    let dir = net.dir("router")?;
    let conf = dir.join("bird.conf");
    std::fs::write(&conf, router_bird_config())?;
    let router_socket = dir.join("bird.ctl");
    let (conf_s, sock_s) = (
        conf.to_string_lossy().into_owned(),
        router_socket.to_string_lossy().into_owned(),
    );
    let router_bird = router
        .cmd(["bird", "-f", "-c", &conf_s, "-s", &sock_s])
        .spawn()?;

    // The topology without balancers: client → router → backend address, reply direct.
    client.ping(ROUTER_C, 1)?;
    for i in 1..=backends_n {
        let out = client
            .cmd([
                "curl",
                "-sS",
                "-m",
                "5",
                &format!("http://{}/", backend_addr(i)),
            ])
            .run()
            .context("topology check (no balancer): client → router → backend")?;
        ensure!(
            out.stdout.trim() == body_of(i),
            "backend {i}: {:?}",
            out.stdout
        );
    }
    for i in 1..=BALANCERS {
        router.ping(&lb_addr(i), 1)?;
    }
    ensure!(
        router_bird.is_running() && router_socket.exists(),
        "router BIRD: {}",
        router_bird.log()
    );
    Ok(Lab {
        _net: net,
        client,
        router,
        router_bird,
        router_socket,
        lbs,
        backends,
        nginx,
        udp_rx,
        udp_stop,
    })
}

impl Lab {
    fn lb(&self, i: usize) -> &LbSlot {
        &self.lbs[i - 1]
    }

    /// Start balancer `i` (the built binary, one worker) and wait until it is ready.
    fn start_lb(&mut self, i: usize) -> Result<()> {
        self.start_lb_as(i, "af_packet", BIN)
    }

    /// Start balancer `i` from the binary `bin` on `driver` and wait until it is ready.
    fn start_lb_as(&mut self, i: usize, driver: &str, bin: &str) -> Result<()> {
        let slot = &self.lbs[i - 1];
        let config = slot.config.to_string_lossy().into_owned();
        let p = slot
            .ns
            .cmd([
                bin,
                "run",
                "--config",
                &config,
                "--interface",
                "eth0",
                "--driver",
                driver,
                "--admin",
                ADMIN,
                "--workers",
                "1",
                "--no-pin",
            ])
            .env("STATE_DIRECTORY", slot.config.with_file_name("state"))
            .spawn()?;
        p.wait_log("flowplane: ready", Duration::from_secs(20))
            .with_context(|| format!("lb{i} did not become ready"))?;
        self.lbs[i - 1].proc = Some(p);
        Ok(())
    }

    fn proc(&self, i: usize) -> Result<&Proc> {
        self.lb(i)
            .proc
            .as_ref()
            .ok_or_else(|| anyhow!("lb{i} is not running"))
    }

    /// The router's next hops for `vip`/32 in its kernel table (empty: no route).
    fn gateways(&self, vip: &str) -> Result<BTreeSet<String>> {
        let out = self
            .router
            .ip(&["route", "show", "exact", &format!("{vip}/32")])?;
        let words: Vec<&str> = out.stdout.split_whitespace().collect();
        Ok(words
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect())
    }

    /// Wait until the router's next hops for both VIPs are exactly the addresses of balancers
    /// `which`; returns how long it took.
    fn wait_route(&self, which: &[usize], limit: Duration) -> Result<Duration> {
        let want = set_of(&which.iter().map(|&i| lb_addr(i)).collect::<Vec<_>>());
        let t0 = Instant::now();
        loop {
            let a = self.gateways(VIP)?;
            let b = self.gateways(VIP_UDP)?;
            if a == want && b == want {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                let logs: Vec<String> = self
                    .lbs
                    .iter()
                    .enumerate()
                    .filter_map(|(k, s)| {
                        s.proc
                            .as_ref()
                            .map(|p| format!("--- lb{} log:\n{}", k + 1, tail(&p.log(), 15)))
                    })
                    .collect();
                bail!(
                    "router's next hops: {VIP} {a:?}, {VIP_UDP} {b:?}; expected {want:?} within \
                     {limit:?}\nrouter BIRD:\n{}\n{}",
                    self.birdc("show protocols")
                        .unwrap_or_else(|e| format!("({e})")),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn birdc(&self, cmd: &str) -> Result<String> {
        let sock = self.router_socket.to_string_lossy().into_owned();
        let mut args = vec!["birdc", "-s", &sock];
        args.extend(cmd.split_whitespace());
        Ok(self.router.cmd(args).run()?.stdout)
    }

    /// A scrape of balancer `i`'s `/metrics`.
    fn metrics(&self, i: usize) -> Result<Metrics> {
        let addr: SocketAddr = ADMIN.parse()?;
        let text = self.lb(i).ns.enter(move || -> io::Result<String> {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })??;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| anyhow!("lb{i} /metrics: no header end in {text:?}"))?;
        ensure!(head.starts_with("HTTP/1.1 200"), "lb{i} /metrics: {head}");
        Ok(Metrics(body.to_string()))
    }

    /// Process ids of BIRD processes in balancer `i`'s namespace.
    fn birds_in(&self, i: usize) -> Result<Vec<u32>> {
        Ok(self
            .lb(i)
            .ns
            .pids()?
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .map(|c| c.trim() == "bird")
                    .unwrap_or(false)
            })
            .collect())
    }

    /// Every running balancer's table digest for each VIP must be the same.
    fn check_digests(&self, running: &[usize]) -> Result<String> {
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &i in running {
            let m = self.metrics(i)?;
            for vip in ["web", "dgram"] {
                let d = m
                    .digest(vip)
                    .ok_or_else(|| anyhow!("lb{i}: no flowplane_maglev_table_info for {vip}"))?;
                ensure!(
                    d != "none",
                    "lb{i}: VIP {vip} has no table (no healthy backend)"
                );
                seen.entry(vip.to_string()).or_default().insert(d);
            }
        }
        for (vip, ds) in &seen {
            ensure!(
                ds.len() == 1,
                "balancers {running:?} disagree on {vip}'s Maglev table: digests {ds:?}"
            );
        }
        Ok(format!("{seen:?}"))
    }

    fn vip_packets(&self, i: usize) -> Result<f64> {
        self.metrics(i)?
            .value("flowplane_vip_packets_total", &[("vip", "web")])
            .ok_or_else(|| anyhow!("lb{i}: no flowplane_vip_packets_total{{vip=\"web\"}}"))
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A `/metrics` body.
struct Metrics(String);

impl Metrics {
    /// The value of the series `name{labels…}` whose labels include all of `want`.
    fn value(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        self.0.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            if !(labels.is_empty() || labels.starts_with('{')) {
                return None;
            }
            want.iter()
                .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse().ok())
                .flatten()
        })
    }

    /// Sum of `name` over all series including the labels `want`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.0
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(name)?;
                let (labels, value) = rest.rsplit_once(' ')?;
                if !(labels.is_empty() || labels.starts_with('{')) {
                    return None;
                }
                want.iter()
                    .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\"")))
                    .then(|| value.parse::<f64>().ok())
                    .flatten()
            })
            .sum()
    }

    /// The `digest` label of `flowplane_maglev_table_info{vip="VIP",…}`.
    fn digest(&self, vip: &str) -> Option<String> {
        let prefix = format!("flowplane_maglev_table_info{{vip=\"{vip}\"");
        let line = self.0.lines().find(|l| l.starts_with(&prefix))?;
        let (_, rest) = line.split_once("digest=\"")?;
        Some(rest.split('"').next()?.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP clients.

fn get(s: &mut TcpStream, close: bool) -> io::Result<String> {
    let conn = if close { "Connection: close\r\n" } else { "" };
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {VIP}\r\n{conn}\r\n").as_bytes())?;
    let (status, body) = fp_testnet::read_http_response(s)?;
    let body = body.trim().to_string();
    if status != 200 {
        return Err(io::Error::other(format!("HTTP {status}: {body:?}")));
    }
    Ok(body)
}

fn connect(timeout: Duration) -> io::Result<TcpStream> {
    let addr: SocketAddr = format!("{VIP}:80").parse().expect("literal");
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// `n` new connections with one request each; answers by backend and failures.
fn new_connections(client: &Netns, n: usize) -> Result<(BTreeMap<String, usize>, Vec<String>)> {
    Ok(client.enter(move || {
        let mut served = BTreeMap::new();
        let mut failed = Vec::new();
        for k in 0..n {
            match connect(Duration::from_secs(5)).and_then(|mut s| get(&mut s, true)) {
                Ok(b) => *served.entry(b).or_insert(0) += 1,
                Err(e) => failed.push(format!("connection {k}: {e}")),
            }
        }
        (served, failed)
    })?)
}

/// Long-lived keep-alive connections, each sending a request every `PROBE_GAP` until stopped,
/// and recording whether it broke (error, reset, timeout) or ever changed backend.
struct Probes {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<ProbeStats>>,
}

#[derive(Debug, Default, Clone)]
struct ProbeStats {
    backend: Option<String>,
    requests: u64,
    /// Longest time one request took (a stall while its path was broken).
    max_latency: Duration,
    /// What broke it, and when (since the probes started).
    broken: Option<(Duration, String)>,
    changed_backend: bool,
}

const PROBE_GAP: Duration = Duration::from_millis(50);
/// A request may take this long before the probe counts its connection as broken: long enough
/// to ride out a hold-timer withdrawal (3 s) plus TCP's retransmission back-off.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

fn start_probes(client: &Netns, n: usize) -> Result<Probes> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = client.spawn_thread(move || {
        let t0 = Instant::now();
        let threads: Vec<JoinHandle<ProbeStats>> = (0..n)
            .map(|_| {
                let stop = stop2.clone();
                std::thread::spawn(move || {
                    let mut st = ProbeStats::default();
                    let mut s = match connect(PROBE_TIMEOUT) {
                        Ok(s) => s,
                        Err(e) => {
                            st.broken = Some((t0.elapsed(), format!("connect: {e}")));
                            return st;
                        }
                    };
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        match get(&mut s, false) {
                            Ok(b) => {
                                st.requests += 1;
                                st.max_latency = st.max_latency.max(t.elapsed());
                                match &st.backend {
                                    None => st.backend = Some(b),
                                    Some(old) if *old != b => {
                                        st.changed_backend = true;
                                        st.broken = Some((
                                            t0.elapsed(),
                                            format!("backend changed from {old} to {b}"),
                                        ));
                                        return st;
                                    }
                                    Some(_) => {}
                                }
                            }
                            Err(e) => {
                                st.broken = Some((t0.elapsed(), e.to_string()));
                                return st;
                            }
                        }
                        std::thread::sleep(PROBE_GAP);
                    }
                    st
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    })?;
    Ok(Probes { stop, handle })
}

impl Probes {
    fn finish(self) -> Result<Vec<ProbeStats>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow!("probe thread panicked"))
    }
}

fn probe_summary(stats: &[ProbeStats]) -> String {
    let broken = stats.iter().filter(|s| s.broken.is_some()).count();
    let reqs: u64 = stats.iter().map(|s| s.requests).sum();
    let max = stats
        .iter()
        .map(|s| s.max_latency)
        .max()
        .unwrap_or_default();
    let mut by_backend: BTreeMap<String, usize> = BTreeMap::new();
    for s in stats {
        *by_backend
            .entry(s.backend.clone().unwrap_or_else(|| "-".into()))
            .or_default() += 1;
    }
    let stalled = stats
        .iter()
        .filter(|s| s.max_latency > Duration::from_secs(1))
        .count();
    format!(
        "{} connections, {reqs} requests, {broken} broken ({:.1}%), {stalled} stalled > 1 s, longest request {max:?}, by backend {by_backend:?}",
        stats.len(),
        100.0 * broken as f64 / stats.len().max(1) as f64
    )
}

fn wrk_options(secs: u64, timeout_s: u64) -> WrkOptions {
    WrkOptions {
        threads: 1,
        connections: 16,
        duration: Duration::from_secs(secs),
        timeout: Duration::from_secs(timeout_s),
    }
}

fn wrk_summary(w: &WrkReport) -> String {
    format!(
        "{} requests ({:.0}/s), connect {} read {} write {} timeout {} non-2xx {}",
        w.requests,
        w.requests_per_sec,
        w.connect_errors,
        w.read_errors,
        w.write_errors,
        w.timeouts,
        w.non_2xx_3xx
    )
}

/// SIGTERM to one process only (not its group).
fn sigterm(p: &Proc) -> Result<()> {
    let out = std::process::Command::new("kill")
        .args(["-TERM", &p.pid().to_string()])
        .output()?;
    ensure!(out.status.success(), "kill -TERM {}: {:?}", p.pid(), out);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn ecmp_add_and_drain() -> Result<()> {
    let _g = serial();
    let mut lab = build_lab("scaleout-drain")?;
    lab.start_lb(1)?;
    lab.start_lb(2)?;
    let t = lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
    println!("lb1, lb2 announced; ECMP route with both next hops {t:?} after lb2 was ready");
    let route = lab
        .router
        .ip(&["route", "show", "exact", &format!("{VIP}/32")])?;
    ensure!(
        route.stdout.matches("nexthop via").count() == 2,
        "not a multipath route: {:?}",
        route.stdout
    );
    println!("digests: {}", lab.check_digests(&[1, 2])?);

    // Traffic spreads over both balancers (and over the backends).
    let before = [lab.vip_packets(1)?, lab.vip_packets(2)?];
    let (served, failed) = new_connections(&lab.client, 60)?;
    ensure!(failed.is_empty(), "new connections failed: {failed:?}");
    let after = [lab.vip_packets(1)?, lab.vip_packets(2)?];
    let share = [after[0] - before[0], after[1] - before[1]];
    println!("60 new connections: backends {served:?}; VIP packets per balancer {share:?}");
    ensure!(
        share.iter().all(|&p| p > 0.0),
        "a balancer got no traffic: {share:?}"
    );
    ensure!(served.len() == BACKENDS, "backends used: {served:?}");

    // Under load: add lb3, then drain lb1.
    let wopts = wrk_options(12, 5);
    let wrk = lab.client.wrk_spawn(&format!("http://{VIP}/"), &wopts)?;
    let probes = start_probes(&lab.client, 40)?;
    std::thread::sleep(Duration::from_secs(2));

    lab.start_lb(3)?;
    let t = lab.wait_route(&[1, 2, 3], ANNOUNCED_WITHIN)?;
    println!("lb3 added: route has 3 next hops {t:?} after lb3 was ready");
    println!("digests: {}", lab.check_digests(&[1, 2, 3])?);
    std::thread::sleep(Duration::from_secs(2));
    let lb3_packets = lab.vip_packets(3)?;
    let m3 = lab.metrics(3)?;
    let mid_stream = m3.value("flowplane_conn_lookups_total", &[("result", "miss")]);
    println!("lb3 forwarded {lb3_packets} VIP packets (connection-table misses {mid_stream:?})");
    ensure!(
        lb3_packets > 0.0,
        "ECMP moved no traffic to lb3 after it joined"
    );

    let lb1 = lab.proc(1)?.clone();
    let t0 = Instant::now();
    sigterm(&lb1)?;
    let t_route = lab.wait_route(&[2, 3], WITHDRAWN_WITHIN)?;
    let status = lb1.wait(Duration::from_millis(DRAIN_MS) + Duration::from_secs(10))?;
    let t_exit = t0.elapsed();
    println!(
        "lb1 drained: withdrawn from the route after {t_route:?}, exited ({status}) after {t_exit:?} (drain_ms {DRAIN_MS})"
    );
    ensure!(status.success(), "lb1 exited with {status}:\n{}", lb1.log());
    ensure!(
        t_exit >= Duration::from_millis(DRAIN_MS),
        "lb1 stopped after {t_exit:?}, before its drain time"
    );
    ensure!(
        lab.birds_in(1)?.is_empty(),
        "lb1's BIRD still runs after it stopped"
    );
    lab.lbs[0].proc = None;

    let w = lab.client.wrk_finish(&wrk, &wopts)?;
    let stats = probes.finish()?;
    println!("wrk during add + drain: {}", wrk_summary(&w));
    println!("probes during add + drain: {}", probe_summary(&stats));
    ensure!(w.requests > 0, "wrk made no request");
    ensure!(
        w.errors() == 0,
        "failed requests under add + drain: {}",
        wrk_summary(&w)
    );
    let broken: Vec<_> = stats.iter().filter(|s| s.broken.is_some()).collect();
    ensure!(
        broken.is_empty(),
        "{} probe connections broke: {:?}",
        broken.len(),
        broken
    );
    ensure!(stats.iter().all(|s| s.requests > 10), "{stats:?}");
    ensure!(lab.router_bird.is_running(), "router BIRD died");

    // Health gating: every backend's nginx stops, so no VIP has a healthy backend and both
    // balancers withdraw; nginx comes back and the VIPs are announced again.
    for n in &lab.nginx {
        n.proc.kill();
    }
    let t0 = Instant::now();
    lab.wait_route(&[], Duration::from_secs(10))?;
    let t_down = t0.elapsed();
    let digest = lab.metrics(2)?.digest("web");
    ensure!(
        digest.as_deref() == Some("none"),
        "lb2's table with every backend down: {digest:?}"
    );
    let t0 = Instant::now();
    let restarted: Vec<Nginx> = lab
        .backends
        .iter()
        .enumerate()
        .map(|(k, ns)| ns.nginx(&nginx_config(k + 1)))
        .collect::<Result<_, _>>()?;
    lab.nginx = restarted;
    lab.wait_route(&[2, 3], Duration::from_secs(10))?;
    println!(
        "health gating: all backends down → both VIPs withdrawn after {t_down:?} (checks every 500 ms, fall 2); back → announced again after {:?} (rise 2)",
        t0.elapsed()
    );
    let (served, failed) = new_connections(&lab.client, 12)?;
    ensure!(failed.is_empty(), "after re-announcement: {failed:?}");
    println!("after re-announcement: {served:?}");
    Ok(())
}

#[test]
fn abrupt_failures() -> Result<()> {
    let _g = serial();
    let mut lab = build_lab("scaleout-fail")?;
    for i in 1..=3 {
        lab.start_lb(i)?;
    }
    lab.wait_route(&[1, 2, 3], ANNOUNCED_WITHIN)?;
    lab.check_digests(&[1, 2, 3])?;
    let birds2 = lab.birds_in(2)?;
    ensure!(birds2.len() == 1, "lb2 should run one BIRD: {birds2:?}");

    // Long request timeout: a request caught by the silent failure waits for the hold timer
    // plus TCP's retransmission back-off.
    let wopts = wrk_options(14, 12);
    let wrk = lab.client.wrk_spawn(&format!("http://{VIP}/"), &wopts)?;
    let probes = start_probes(&lab.client, 60)?;
    std::thread::sleep(Duration::from_secs(2));
    let carried2 = lab.vip_packets(2)?;
    let carried3 = lab.vip_packets(3)?;

    // lb2 crashes: SIGKILL to flowplane's process group (BIRD has its own group).
    let lb2 = lab.proc(2)?.clone();
    let t0 = Instant::now();
    lb2.kill();
    let t_route = lab.wait_route(&[1, 3], WITHDRAWN_WITHIN)?;
    let deadline = Instant::now() + Duration::from_secs(2);
    while !lab.birds_in(2)?.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    ensure!(
        lab.birds_in(2)?.is_empty(),
        "lb2's BIRD survived flowplane's SIGKILL"
    );
    println!(
        "lb2 killed (carried {carried2} VIP packets): withdrawn after {:?} (route wait {t_route:?}), its BIRD died with it",
        t0.elapsed()
    );
    lab.lbs[1].proc = None;
    std::thread::sleep(Duration::from_secs(2));

    // lb3 hangs: flowplane and its BIRD stop (SIGSTOP), the kernel stays up. No FIN, no Cease,
    // no keepalives: only the router's hold timer can tell, and until it does, the packets
    // ECMP sends to lb3 are lost (lb3's kernel does not forward them).
    let lb3 = lab.proc(3)?.clone();
    let birds3 = lab.birds_in(3)?;
    ensure!(birds3.len() == 1, "lb3 should run one BIRD: {birds3:?}");
    lb3.signal(libc::SIGSTOP);
    let out = std::process::Command::new("kill")
        .args(["-STOP", &birds3[0].to_string()])
        .output()?;
    ensure!(out.status.success(), "kill -STOP {}: {out:?}", birds3[0]);
    let t_hold = lab.wait_route(&[1], Duration::from_secs(HOLD_S) + WITHDRAWN_WITHIN)?;
    println!(
        "lb3 hung (carried {carried3} VIP packets): withdrawn after {t_hold:?} (hold time {HOLD_S} s, keepalive 1 s)"
    );
    // The router heard the last keepalive up to 1 s before the hang, and BIRD starts its
    // timers with up to 25 % jitter (RFC 4271 §10): the earliest expiry is 0.75 × 3 - 1 s.
    ensure!(
        t_hold >= Duration::from_millis(HOLD_S * 750 - 1000 - 50),
        "withdrawn after {t_hold:?}: faster than a hold timer can expire"
    );
    // Let TCP's retransmissions (backed off during the outage) get through lb1.
    std::thread::sleep(Duration::from_secs(4));

    let w = lab.client.wrk_finish(&wrk, &wopts)?;
    let stats = probes.finish()?;
    println!("wrk during kill + silence: {}", wrk_summary(&w));
    println!("probes during kill + silence: {}", probe_summary(&stats));
    let broken: Vec<_> = stats.iter().filter(|s| s.broken.is_some()).collect();
    ensure!(w.requests > 0, "wrk made no request");
    // Identical Maglev tables and no backend change: every connection recovers on lb1.
    ensure!(
        broken.is_empty(),
        "{} of {} probe connections broke: {:?}",
        broken.len(),
        stats.len(),
        broken
    );
    ensure!(
        w.connect_errors + w.read_errors + w.write_errors + w.non_2xx_3xx == 0,
        "connections failed under wrk: {}",
        wrk_summary(&w)
    );
    Ok(())
}

/// The payload of test datagram `id`: a header with the id, then a pattern that depends on it.
fn datagram(id: u32, len: usize) -> Vec<u8> {
    let mut v = b"FRAG".to_vec();
    v.extend_from_slice(&id.to_be_bytes());
    v.extend((8..len).map(|k| ((k as u32 * 7 + id) % 251) as u8));
    v
}

#[test]
fn fragments_reach_one_backend() -> Result<()> {
    let _g = serial();
    let mut lab = build_lab("scaleout-frag")?;
    for i in 1..=3 {
        lab.start_lb(i)?;
    }
    lab.wait_route(&[1, 2, 3], ANNOUNCED_WITHIN)?;
    let len = 2600;
    let mut expected = BTreeSet::new();

    // Fragmented by the client's kernel (MTU 1400): the router sends all fragments of a
    // datagram to one balancer (no ports in fragments to hash), which may not own it.
    let natural: Vec<u32> = (1..=6).collect();
    lab.client.enter({
        let natural = natural.clone();
        move || -> io::Result<()> {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            for id in natural {
                s.send_to(&datagram(id, len), (VIP_UDP, UDP_PORT))?;
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        }
    })??;
    expected.extend(natural);

    // Crafted: three fragments of each datagram sent straight to chosen balancers (as a router
    // hashing fragments differently would), in order and in reverse, from several sources so
    // that the owner varies.
    let macs: Vec<String> = lab.lbs.iter().map(|s| s.mac.clone()).collect();
    let perms: [[usize; 3]; 9] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
    ];
    let mut jobs = Vec::new();
    let mut id = 100u32;
    for src in ["10.72.1.2", "10.72.1.3", "10.72.1.4", "10.72.1.5"] {
        for (k, p) in perms.iter().enumerate() {
            jobs.push(format!(
                "({id}, '{src}', {:?}, {})",
                p,
                if k % 2 == 1 { "True" } else { "False" }
            ));
            expected.insert(id);
            id += 1;
        }
    }
    let script = format!(
        "import time\nconf.verb = 0\n\
         macs = {macs:?}\n\
         rmac = get_if_hwaddr('eth1')\n\
         s = conf.L2socket(iface='eth1')\n\
         for ident, src, assign, reverse in [{jobs}]:\n\
         \x20   payload = b'FRAG' + ident.to_bytes(4, 'big') + bytes(((k * 7 + ident) % 251) for k in range(8, {len}))\n\
         \x20   pkt = IP(src=src, dst='{VIP_UDP}', id=ident, ttl=63) / UDP(sport=40000 + ident, dport={UDP_PORT}) / Raw(payload)\n\
         \x20   frags = fragment(pkt, fragsize=1000)\n\
         \x20   assert len(frags) == 3, len(frags)\n\
         \x20   pairs = list(zip(frags, assign))\n\
         \x20   if reverse: pairs.reverse()\n\
         \x20   for f, lb in pairs:\n\
         \x20       s.send(Ether(src=rmac, dst=macs[lb]) / f)\n\
         \x20   time.sleep(0.01)\n\
         print('sent', len([{jobs}]))\n",
        jobs = jobs.join(", ")
    );
    let out = lab.router.scapy(&script)?;
    println!("scapy: {}", out.stdout.trim());

    // Every datagram reaches exactly one backend, intact.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: BTreeSet<u32> = lab
            .udp_rx
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, p)| {
                p.get(4..8)
                    .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
            })
            .collect();
        if got.is_superset(&expected) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300)); // duplicates, if any, arrive too
    let rx = lab.udp_rx.lock().unwrap().clone();
    let mut by_id: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (b, p) in &rx {
        ensure!(p.len() >= 8, "runt datagram at backend {b}: {p:?}");
        let id = u32::from_be_bytes(p[4..8].try_into().unwrap());
        ensure!(
            *p == datagram(id, len),
            "datagram {id} arrived corrupted at backend {b} ({} bytes)",
            p.len()
        );
        by_id.entry(id).or_default().push(*b);
    }
    let mut redirected = 0.0;
    let mut redirect_in = 0.0;
    for i in 1..=3 {
        let m = lab.metrics(i)?;
        redirected += m.sum("flowplane_fragments_total", &[("action", "redirected")]);
        redirect_in += m.sum("flowplane_fragments_total", &[("action", "redirect_in")]);
    }
    let missing: Vec<u32> = expected
        .iter()
        .filter(|id| !by_id.contains_key(id))
        .copied()
        .collect();
    let dup: Vec<(u32, Vec<usize>)> = by_id
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let per_backend: BTreeMap<usize, usize> = rx.iter().fold(BTreeMap::new(), |mut m, (b, _)| {
        *m.entry(*b).or_default() += 1;
        m
    });
    println!(
        "{} datagrams sent, {} received (per backend {per_backend:?}); fragments redirected {redirected}, received as owner {redirect_in}",
        expected.len(),
        by_id.len()
    );
    ensure!(
        missing.is_empty(),
        "{} of {} datagrams never reached a backend: {missing:?}",
        missing.len(),
        expected.len()
    );
    ensure!(
        dup.is_empty(),
        "datagrams delivered more than once: {dup:?}"
    );
    ensure!(
        redirected > 0.0 && redirect_in > 0.0,
        "no fragment was redirected to its owner (redirected {redirected}, in {redirect_in})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Changes under 1,000 keep-alive connections.

/// Backends of the changes test's lab (b4 and b5 join during the run).
const CHANGE_BACKENDS: usize = 5;
/// Keep-alive connections held through the changes.
const FLEET: usize = 1000;
/// Threads the fleet's connections are spread over.
const FLEET_THREADS: usize = 4;
/// Each connection makes one request per cycle at most.
const FLEET_CYCLE: Duration = Duration::from_millis(1000);
/// A request that takes longer counts its connection as broken.
const FLEET_TIMEOUT: Duration = Duration::from_secs(10);

/// The changes test's balancer configuration: no `balancer.seed` (the seed's state file is shared
/// by both balancers, as docs/deployment.md says), the state directory per balancer, the given
/// backends (index, weight), second chance on or off.
fn change_config(
    i: usize,
    dir: &std::path::Path,
    backends: &[(usize, u32)],
    second_chance: bool,
) -> String {
    let cluster = (1..=BALANCERS)
        .map(|k| format!("\"{}\"", lb_addr(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let list = backends
        .iter()
        .map(|&(k, w)| format!("{{ address = \"{}\", weight = {w} }}", backend_addr(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let shared = dir.parent().expect("lab directory").join("shared-seed");
    let vip = |name: &str, addr: &str, port: u16, proto: &str| {
        format!(
            "[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nprotocol = \"{proto}\"\n\
             pools = [\"web\"]\nencap = \"gre\"\nsecond_chance = {second_chance}\n\n"
        )
    };
    format!(
        "[balancer]\naddress = \"{addr}\"\nseed_file = {shared:?}\nstate_dir = {state:?}\n\
         maglev_size = 65537\nconn_table_capacity = 65536\nconn_idle_timeout_ms = 120000\n\n\
         [bgp]\nspeaker = \"bird\"\nlocal_as = {LB_AS}\npeer = \"{ROUTER_L}\"\npeer_as = {ROUTER_AS}\n\
         hold_time_s = {HOLD_S}\ndrain_ms = {DRAIN_MS}\nstate_dir = {bgp:?}\n\n\
         [cluster]\nbalancers = [{cluster}]\n\n{web}{dgram}\
         [[pool]]\nname = \"web\"\nbackends = [{list}]\n\
         health = {{ kind = \"http\", path = \"/\", status = 200, body = \"backend\", interval_ms = 500, \
         timeout_ms = 300, rise = 2, fall = 2 }}\n",
        addr = lb_addr(i),
        shared = shared.display().to_string(),
        state = dir.join("state").display().to_string(),
        bgp = dir.join("bgp").display().to_string(),
        web = vip("web", VIP, 80, "tcp"),
        dgram = vip("dgram", VIP_UDP, UDP_PORT, "udp"),
    )
}

/// What became of one of the fleet's connections.
#[derive(Debug, Default, Clone)]
struct Fate {
    backend: Option<String>,
    requests: u64,
    /// What broke it (an error, a reset, a timeout, another backend answering), and when
    /// (since the run's start).
    broken: Option<(Duration, String)>,
}

/// `FLEET` keep-alive connections, each asking for its backend once per `FLEET_CYCLE`.
struct Fleet {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Fate>>,
}

fn start_fleet(client: &Netns, t0: Instant) -> Result<Fleet> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = client.spawn_thread(move || {
        let threads: Vec<JoinHandle<Vec<Fate>>> = (0..FLEET_THREADS)
            .map(|_| {
                let stop = stop2.clone();
                std::thread::spawn(move || {
                    let mut conns: Vec<(Option<TcpStream>, Fate)> = (0..FLEET / FLEET_THREADS)
                        .map(|_| match connect(FLEET_TIMEOUT) {
                            Ok(s) => (Some(s), Fate::default()),
                            Err(e) => {
                                let f = Fate {
                                    broken: Some((t0.elapsed(), format!("connect: {e}"))),
                                    ..Fate::default()
                                };
                                (None, f)
                            }
                        })
                        .collect();
                    while !stop.load(Ordering::Relaxed) {
                        let cycle = Instant::now();
                        for (s, f) in conns.iter_mut() {
                            let Some(st) = s.as_mut() else { continue };
                            let why = match get(st, false) {
                                Ok(b) => {
                                    f.requests += 1;
                                    match &f.backend {
                                        None => {
                                            f.backend = Some(b);
                                            None
                                        }
                                        Some(old) if *old != b => {
                                            Some(format!("backend changed from {old} to {b}"))
                                        }
                                        Some(_) => None,
                                    }
                                }
                                Err(e) => Some(e.to_string()),
                            };
                            if let Some(why) = why {
                                f.broken = Some((t0.elapsed(), why));
                                *s = None;
                            }
                        }
                        if let Some(rest) = FLEET_CYCLE.checked_sub(cycle.elapsed()) {
                            std::thread::sleep(rest);
                        }
                    }
                    conns.into_iter().map(|(_, f)| f).collect()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })?;
    Ok(Fleet { stop, handle })
}

impl Fleet {
    fn finish(self) -> Result<Vec<Fate>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow!("fleet thread panicked"))
    }
}

/// Packets balancer `i` sent naming earlier backends (second chance), since it started.
fn second_chance_sent(lab: &Lab, i: usize) -> f64 {
    lab.metrics(i)
        .ok()
        .and_then(|m| m.value("flowplane_second_chance_total", &[("event", "sent")]))
        .unwrap_or(0.0)
}

/// SIGTERM balancer `i` and wait until it drained, withdrew and exited; adds the second-chance
/// packets it sent to `sent`.
fn stop_lb(lab: &mut Lab, i: usize, remaining: &[usize], sent: &mut f64) -> Result<()> {
    let p = lab.proc(i)?.clone();
    sigterm(&p)?;
    // Read at the start of the drain: the balancer still answers, and sends nothing new.
    *sent += second_chance_sent(lab, i);
    lab.wait_route(remaining, WITHDRAWN_WITHIN)?;
    let status = p.wait(Duration::from_millis(DRAIN_MS) + Duration::from_secs(10))?;
    ensure!(status.success(), "lb{i} exited with {status}:\n{}", p.log());
    lab.lbs[i - 1].proc = None;
    Ok(())
}

/// Write balancer `i`'s configuration.
fn write_change_config(lab: &Lab, i: usize, backends: &[(usize, u32)], on: bool) -> Result<()> {
    let path = &lab.lb(i).config;
    let dir = path.parent().context("config directory")?;
    std::fs::write(path, change_config(i, dir, backends, on))?;
    Ok(())
}

/// SIGHUP balancer `i` and wait until its configuration generation moved on.
fn reload_lb(lab: &Lab, i: usize) -> Result<()> {
    let gen = |lab: &Lab| -> Result<f64> {
        lab.metrics(i)?
            .value("flowplane_config_generation", &[])
            .ok_or_else(|| anyhow!("lb{i}: no flowplane_config_generation"))
    };
    let before = gen(lab)?;
    let p = lab.proc(i)?;
    let out = std::process::Command::new("kill")
        .args(["-HUP", &p.pid().to_string()])
        .output()?;
    ensure!(out.status.success(), "kill -HUP: {out:?}");
    let t = Instant::now();
    while gen(lab)? <= before {
        ensure!(
            t.elapsed() < Duration::from_secs(10),
            "lb{i} did not reload:\n{}",
            tail(&p.log(), 20)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Second-chance packets the backends' tc programs forwarded (`flowplane backend --status`).
fn backends_forwarded(lab: &Lab) -> Result<u64> {
    let mut n = 0;
    for (k, ns) in lab.backends.iter().enumerate() {
        let state = lab
            ._net
            .dir(&format!("backend-b{}", k + 1))?
            .join("state.json");
        n += common::second_chance_forwarded(ns, &state)?;
    }
    Ok(n)
}

/// The end of each step of a run (since the run's start), by name.
type Marks = Vec<(String, Duration)>;

/// What one run of the changes saw.
struct Run {
    fates: Vec<Fate>,
    /// When step (d) started (since the run's start).
    t_d: Duration,
    marks: Marks,
    /// Packets the balancers sent naming earlier backends, over all their processes.
    sent: f64,
    /// How many of the balancers running at the end started warm (their predecessor's
    /// connection entries carried).
    warm: usize,
}

/// Start balancer `i` from the binary `bin`; with the handover off, without the connection
/// entries its predecessor left in the state directory (a cold start, as after a crash).
fn start_lb(lab: &mut Lab, i: usize, driver: &str, bin: &str, handover: bool) -> Result<()> {
    if !handover {
        let dir = lab.lb(i).config.parent().context("config directory")?;
        match std::fs::remove_file(dir.join("state").join("connections")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    lab.start_lb_as(i, driver, bin)
}

/// One run of the changes (each a step the fleet rides through), with second chance and the
/// handover of connection entries on or off.
fn run_changes(
    lab: &mut Lab,
    driver: &str,
    second_chance: bool,
    handover: bool,
    t0: Instant,
) -> Result<Run> {
    let s0: &[(usize, u32)] = &[(1, 1), (2, 1), (3, 1)];
    let s1: &[(usize, u32)] = &[(1, 2), (2, 1), (3, 1), (4, 1)];
    let s2: &[(usize, u32)] = &[(1, 2), (2, 1), (3, 1), (4, 1), (5, 1)];
    let s3: &[(usize, u32)] = &[(1, 2), (3, 1), (4, 1), (5, 1)];
    let mut marks = Vec::new();
    let mut sent = 0.0;
    let mut mark = |what: &str| {
        println!("[{:>6.2}s] {driver}: {what}", t0.elapsed().as_secs_f64());
        marks.push((what.to_string(), t0.elapsed()));
    };
    for i in [1, 2] {
        write_change_config(lab, i, s0, second_chance)?;
        start_lb(lab, i, driver, BIN, handover)?;
    }
    lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
    let fleet = start_fleet(&lab.client, t0)?;
    std::thread::sleep(Duration::from_secs(3));
    mark("fleet running");

    // (a) A restart of one balancer with the default configuration.
    stop_lb(lab, 1, &[2], &mut sent)?;
    start_lb(lab, 1, driver, BIN, handover)?;
    lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
    std::thread::sleep(Duration::from_secs(2));
    mark("(a) lb1 restarted");

    // (b) An upgrade to another binary file (as a package upgrade replaces it), rolled over
    // both balancers, with backend 1's weight doubled and backend 4 added.
    let upgraded = lab._net.dir("upgrade")?.join("flowplane");
    std::fs::copy(BIN, &upgraded)?;
    let upgraded = upgraded.to_string_lossy().into_owned();
    for (i, other) in [(1, 2), (2, 1)] {
        stop_lb(lab, i, &[other], &mut sent)?;
        write_change_config(lab, i, s1, second_chance)?;
        start_lb(lab, i, driver, &upgraded, handover)?;
        lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(Duration::from_secs(1));
    mark("(b) both balancers upgraded with a weight change and backend 4");

    // (c) Backend 5 added (lb1 reloads) while lb2 is taken out, at the same moment.
    write_change_config(lab, 1, s2, second_chance)?;
    write_change_config(lab, 2, s2, second_chance)?;
    let lb2 = lab.proc(2)?.clone();
    sigterm(&lb2)?;
    sent += second_chance_sent(lab, 2);
    reload_lb(lab, 1)?;
    lab.wait_route(&[1], WITHDRAWN_WITHIN)?;
    let status = lb2.wait(Duration::from_millis(DRAIN_MS) + Duration::from_secs(10))?;
    ensure!(status.success(), "lb2 exited with {status}");
    lab.lbs[1].proc = None;
    std::thread::sleep(Duration::from_secs(2));
    start_lb(lab, 2, driver, &upgraded, handover)?;
    lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
    std::thread::sleep(Duration::from_secs(2));
    mark("(c) backend 5 added while lb2 left (and came back)");

    // (d) A restart whose configuration removes backend 2 (lb2 reloads the same change).
    let t_d = t0.elapsed();
    write_change_config(lab, 1, s3, second_chance)?;
    write_change_config(lab, 2, s3, second_chance)?;
    reload_lb(lab, 2)?;
    stop_lb(lab, 1, &[2], &mut sent)?;
    start_lb(lab, 1, driver, &upgraded, handover)?;
    lab.wait_route(&[1, 2], ANNOUNCED_WITHIN)?;
    std::thread::sleep(Duration::from_secs(3));
    mark("(d) lb1 restarted without backend 2");
    let fates = fleet.finish()?;
    sent += second_chance_sent(lab, 1) + second_chance_sent(lab, 2);
    let mut warm = 0;
    for i in [1, 2] {
        let log = lab.proc(i).map(|p| tail(&p.log(), 30)).unwrap_or_default();
        let kind = lab
            .metrics(i)
            .with_context(|| format!("lb{i} at the end of the run:\n{log}"))?
            .value("flowplane_takeover", &[("kind", "warm")]);
        warm += (kind == Some(1.0)) as usize;
    }
    Ok(Run {
        fates,
        t_d,
        marks,
        sent,
        warm,
    })
}

/// Broken connections per step: a connection broken before the first mark is counted under it.
fn broken_by_step(fates: &[Fate], marks: &[(String, Duration)]) -> Vec<(String, usize)> {
    marks
        .iter()
        .enumerate()
        .map(|(k, (what, until))| {
            let from = if k == 0 {
                Duration::ZERO
            } else {
                marks[k - 1].1
            };
            let n = fates
                .iter()
                .filter_map(|f| f.broken.as_ref())
                .filter(|(t, _)| *t >= from && (*t < *until || k == marks.len() - 1))
                .count();
            (what.clone(), n)
        })
        .collect()
}

fn stop_all(lab: &mut Lab) {
    for i in 1..=BALANCERS {
        if let Some(p) = lab.lbs[i - 1].proc.take() {
            let _ = sigterm(&p);
            let _ = p.wait(Duration::from_secs(10));
        }
    }
}

fn changes_keep_connections(driver: &str) -> Result<()> {
    let _g = serial();
    let mut lab = build_lab_with(&format!("chg-{driver}"), CHANGE_BACKENDS)?;
    let removed = body_of(2);
    let t0 = Instant::now();
    let fwd0 = backends_forwarded(&lab)?;
    let Run {
        fates,
        t_d,
        marks,
        sent,
        warm,
    } = run_changes(&mut lab, driver, true, true, t0)?;
    let forwarded = backends_forwarded(&lab)? - fwd0;
    stop_all(&mut lab);
    let requests: u64 = fates.iter().map(|f| f.requests).sum();
    let on_removed = fates
        .iter()
        .filter(|f| f.backend.as_deref() == Some(removed.as_str()))
        .count();
    let unexpected: Vec<&Fate> = fates
        .iter()
        .filter(|f| {
            f.broken
                .as_ref()
                .is_some_and(|(t, _)| *t < t_d || f.backend.as_deref() != Some(removed.as_str()))
        })
        .collect();
    let lingering = fates
        .iter()
        .filter(|f| f.backend.as_deref() == Some(removed.as_str()) && f.broken.is_none())
        .count();
    let ends: Vec<Duration> = fates
        .iter()
        .filter(|f| f.backend.as_deref() == Some(removed.as_str()))
        .filter_map(|f| f.broken.as_ref().map(|(t, _)| t.saturating_sub(t_d)))
        .collect();
    println!(
        "{driver}, second chance on: {} connections, {requests} requests; broken outside the \
         removed backend: {}; on the removed backend: {on_removed}, ended within {:?} of its \
         removal ({lingering} still open); balancers sent {sent} second-chance packets, backends \
         forwarded {forwarded}; by step {:?}",
        fates.len(),
        unexpected.len(),
        ends.iter().max().copied().unwrap_or_default(),
        broken_by_step(&fates, &marks)
    );
    ensure!(fates.len() == FLEET, "{} connections", fates.len());
    ensure!(
        unexpected.is_empty(),
        "{} connections broke: {:?}",
        unexpected.len(),
        unexpected.iter().take(10).collect::<Vec<_>>()
    );
    ensure!(
        lingering == 0,
        "{lingering} connections of the removed backend still open"
    );
    ensure!(sent > 0.0 && forwarded > 0, "second chance was never used");

    ensure!(
        warm == 2,
        "only {warm} of 2 balancers started warm after their last restart"
    );

    // Controls: the same run with second chance off, and with the handover of connection
    // entries off (every start cold).
    for (second_chance, handover) in [(false, true), (true, false)] {
        let what = if second_chance {
            "handover off"
        } else {
            "second chance off"
        };
        let t0 = Instant::now();
        let control = run_changes(&mut lab, driver, second_chance, handover, t0)?;
        stop_all(&mut lab);
        let lost = control
            .fates
            .iter()
            .filter(|f| {
                f.broken.as_ref().is_some_and(|(t, _)| {
                    *t < control.t_d || f.backend.as_deref() != Some(removed.as_str())
                })
            })
            .count();
        println!(
            "{driver}, {what} (control): {lost} of {} connections broke outside the removed \
             backend; {} second-chance packets; {} of 2 balancers warm at the end; by \
             step {:?}",
            control.fates.len(),
            control.sent,
            control.warm,
            broken_by_step(&control.fates, &control.marks)
        );
        if second_chance {
            // Without carried entries every balancer starts cold, and the flows it has no entry
            // for lean on second chance alone.
            ensure!(
                control.warm == 0,
                "handover off, but {} balancers started warm",
                control.warm
            );
            ensure!(
                control.sent > sent,
                "handover off: {} second-chance packets, no more than the {sent} with the \
                 handover on",
                control.sent
            );
        } else {
            ensure!(
                lost > 0,
                "without second chance no connection broke: the control shows nothing"
            );
        }
    }
    Ok(())
}

#[test]
fn changes_keep_connections_af_packet() -> Result<()> {
    changes_keep_connections("af_packet")
}

#[test]
fn changes_keep_connections_af_xdp() -> Result<()> {
    changes_keep_connections("af_xdp")
}
