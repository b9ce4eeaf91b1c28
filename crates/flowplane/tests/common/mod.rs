//! What the live balancer tests (`live_lb.rs`, `syn_flood.rs`, `drain.rs`, `ipv6.rs`) share: the
//! lab — client → router → balancer, one-armed on a bridge with nginx backends prepared by
//! `flowplane backend` (the topology is drawn in `live_lb.rs`; IPv4 only, or dual stack with
//! [`LabSpec::build_dual_stack`]) —, starting and stopping `flowplane run` in it, one lab at a
//! time, a small keep-alive HTTP client, admin requests, metrics parsing and polling.
//!
//! Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use anyhow::{anyhow, bail, ensure, Context, Result};
use fp_testnet::{Link, Netns, Nginx, NginxConfig, Proc, TestNet};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_flowplane");

pub const CLIENT: &str = "10.0.1.2";
pub const ROUTER_C: &str = "10.0.1.1";
pub const ROUTER_L: &str = "10.0.2.1";
pub const LB: &str = "10.0.2.2";
pub const ADMIN: &str = "127.0.0.1:9100";

/// The IPv6 addresses of a dual-stack lab: client, router (client side, bridge side), balancer.
pub const CLIENT6: &str = "fd00:1::2";
pub const ROUTER_C6: &str = "fd00:1::1";
pub const ROUTER_L6: &str = "fd00:2::1";
pub const LB6: &str = "fd00:2::2";

/// One lab at a time: two labs in parallel on 2 cores would make the timing assertions noise.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn backend_addr(i: usize) -> String {
    format!("10.0.2.{}", 10 + i)
}

/// Backend `i`'s IPv6 address in a dual-stack lab.
pub fn backend_addr6(i: usize) -> String {
    format!("fd00:2::{}", 10 + i)
}

pub fn body_of(i: usize) -> String {
    format!("backend {i}")
}

pub struct Backend {
    pub i: usize,
    pub ns: Netns,
    pub addr: String,
    /// Its IPv6 address (dual-stack labs only).
    pub addr6: Option<String>,
    /// `eth0`'s MAC (the L2 DSR destination).
    pub mac: String,
    pub nginx: Nginx,
}

pub struct Lab {
    pub net: TestNet,
    pub client: Netns,
    pub router: Netns,
    pub lb: Netns,
    /// The bridge's namespace (`p-lb` is the balancer's port).
    pub sw: Netns,
    /// The bridge (`br0` in `sw`).
    pub br: Link,
    pub lb_mac: String,
    pub backends: Vec<Backend>,
    pub config: PathBuf,
    /// IPv6 on as well as IPv4 ([`LabSpec::build_dual_stack`]).
    pub dual_stack: bool,
}

impl Lab {
    pub fn backend(&self, i: usize) -> &Backend {
        &self.backends[i - 1]
    }

    pub fn write_config(&self, text: &str) -> Result<()> {
        std::fs::write(&self.config, text)
            .with_context(|| format!("writing {}", self.config.display()))
    }
}

/// What differs between the tests' labs.
pub struct LabSpec<'a> {
    /// Label of the test network (namespace names).
    pub tag: &'a str,
    /// Programs the test needs besides `ip`.
    pub tools: &'a [&'a str],
    /// The VIPs: the router routes them to the balancer, every backend serves them.
    pub vips: &'a [&'a str],
    /// `flowplane backend --decap` of every backend.
    pub decap: &'a str,
    /// More `flowplane backend` arguments for backend `i`.
    pub backend_args: &'a dyn Fn(usize) -> Vec<String>,
    /// Backends b1..bN (each with nginx answering "backend i").
    pub backends: usize,
    /// More nginx `server` directives on every backend (e.g. a location accepting uploads).
    pub nginx_server: &'a str,
}

/// No IPv6 in a namespace: no DAD / solicited-node delays, no ND/MLD frames in the balancer's
/// drop counters.
pub fn quiet(ns: &Netns) -> Result<()> {
    ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
    Ok(())
}

/// IPv6 on in a namespace, without duplicate address detection: interfaces created afterwards
/// take `default`'s settings, so their addresses are usable at once.
pub fn ipv6_on(ns: &Netns) -> Result<()> {
    for conf in ["all", "default"] {
        ns.sysctl(&format!("net.ipv6.conf.{conf}.disable_ipv6"), "0")?;
        ns.sysctl(&format!("net.ipv6.conf.{conf}.accept_dad"), "0")?;
        ns.sysctl(&format!("net.ipv6.conf.{conf}.dad_transmits"), "0")?;
    }
    Ok(())
}

/// `ip -6 addr add CIDR dev DEV nodad`.
pub fn addr6_add(link: &Link, cidr: &str) -> Result<()> {
    link.ns()
        .ip(&["-6", "addr", "add", cidr, "dev", link.name(), "nodad"])?;
    Ok(())
}

/// `ip -6 route add DST via GW`.
pub fn route6_add(ns: &Netns, dst: &str, gw: &str) -> Result<()> {
    ns.ip(&["-6", "route", "add", dst, "via", gw])?;
    Ok(())
}

/// Ping `addr` (either family) until it answers, for up to 5 s: a neighbour entry may take a
/// retransmission or two to settle on a fresh segment.
pub fn ping_until(ns: &Netns, addr: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ns.ping(addr, 1) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("ping {addr} from {}", ns.name()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// `http://ADDR/`, an IPv6 address in brackets.
pub fn url_of(addr: &str) -> String {
    if addr.contains(':') {
        format!("http://[{addr}]/")
    } else {
        format!("http://{addr}/")
    }
}

impl LabSpec<'_> {
    /// Build the topology (no balancer yet) and check it without the balancer: the client
    /// reaches a backend's own address through the router, every nginx answers.
    pub fn build(&self) -> Result<Lab> {
        build_lab(self, false)
    }

    /// The same lab with IPv6 as well: every namespace gets IPv6 (no DAD), the client
    /// [`CLIENT6`], the router [`ROUTER_C6`] / [`ROUTER_L6`] and IPv6 forwarding, the balancer
    /// [`LB6`], backend `i` [`backend_addr6`]`(i)` with nginx listening on IPv6 too; the router
    /// routes IPv6 VIPs (`/128`) to [`LB6`]; the bridge floods multicast (no MLD snooping, so
    /// neighbour discovery does not depend on MLD reports). The check without the balancer covers
    /// both families.
    pub fn build_dual_stack(&self) -> Result<Lab> {
        build_lab(self, true)
    }
}

fn build_lab(spec: &LabSpec<'_>, dual: bool) -> Result<Lab> {
    let net = TestNet::new(spec.tag)?;
    net.require_tools(spec.tools)?;
    let client = net.ns("client")?;
    let router = net.ns("router")?;
    let lb = net.ns("lb")?;
    let sw = net.ns("sw")?;
    for ns in [&client, &router, &lb, &sw] {
        if dual {
            ipv6_on(ns)?;
        } else {
            quiet(ns)?;
        }
    }
    let br = sw.bridge("br0")?;
    if dual {
        sw.ip(&[
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
    }
    // br_netfilter is built into this kernel and on by default: a bridge would validate IPv4
    // headers (br_validate_ipv4) and silently drop malformed packets before they reach the
    // balancer.
    for k in ["iptables", "ip6tables", "arptables"] {
        sw.sysctl(&format!("net.bridge.bridge-nf-call-{k}"), "0")?;
    }

    let (c0, r0) = net.veth(&client, "eth0", &router, "eth0")?;
    c0.addr_add(&format!("{CLIENT}/24"))?;
    r0.addr_add(&format!("{ROUTER_C}/24"))?;
    // The client is the kernel traffic source whose segments cross the balancer, so its
    // checksums must be complete on the wire.
    c0.tx_checksum_off()?;
    // Each client connection keeps its socket hash, so it stays on the balancer's receive queue
    // (and worker, whose connection table knows it) it started on: on veth the receive queue
    // follows the hash the sending socket stamps on its packets, and TCP draws a new one after a
    // retransmission timeout, which a loaded 2-core machine sometimes causes.
    client.sysctl("net.core.txrehash", "0")?;
    client.route_add("default", ROUTER_C)?;
    if dual {
        addr6_add(&c0, &format!("{CLIENT6}/64"))?;
        addr6_add(&r0, &format!("{ROUTER_C6}/64"))?;
        route6_add(&client, "default", ROUTER_C6)?;
    }

    let (r1, p) = net.veth(&router, "eth1", &sw, "p-router")?;
    p.set_master(&br)?;
    r1.addr_add(&format!("{ROUTER_L}/24"))?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    router.sysctl("net.ipv4.conf.all.rp_filter", "1")?;
    router.sysctl("net.ipv4.conf.eth1.rp_filter", "1")?;
    if dual {
        addr6_add(&r1, &format!("{ROUTER_L6}/64"))?;
        router.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    }
    for vip in spec.vips {
        if vip.contains(':') {
            route6_add(&router, &format!("{vip}/128"), LB6)?;
        } else {
            router.route_add(&format!("{vip}/32"), LB)?;
        }
    }

    // The balancer's interface has two queues on both ends, so AF_XDP runs two workers like
    // AF_PACKET's fan-out (the bridge port spreads flows over its two TX queues, which are the
    // balancer's RX queues).
    lb.ip(&[
        "link",
        "add",
        "eth0",
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "p-lb",
        "netns",
        sw.name(),
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
    ])?;
    let l0 = lb.link("eth0");
    let p = sw.link("p-lb");
    p.set_master(&br)?;
    p.up()?;
    l0.up()?;
    l0.addr_add(&format!("{LB}/24"))?;
    lb.sysctl("net.ipv4.ip_forward", "0")?;
    if dual {
        addr6_add(&l0, &format!("{LB6}/64"))?;
        // A route back to the clients' network and none covering the IPv6 VIPs (no default
        // route). Over AF_PACKET this kernel would answer each client packet to a VIP with
        // ICMPv6 "unreachable route" (which resets the client's connection) if it saw them; the
        // port driver keeps VIP frames from the host's stack, and ipv6.rs checks that no
        // destination unreachable leaves this namespace.
        route6_add(&lb, "fd00:1::/64", ROUTER_L6)?;
    }
    let lb_mac = l0.mac_string()?;

    let mut backends = Vec::new();
    for i in 1..=spec.backends {
        let ns = net.ns(&format!("b{i}"))?;
        if dual {
            ipv6_on(&ns)?;
        } else {
            quiet(&ns)?;
        }
        let (e, p) = net.veth(&ns, "eth0", &sw, &format!("p-b{i}"))?;
        p.set_master(&br)?;
        let addr = backend_addr(i);
        e.addr_add(&format!("{addr}/24"))?;
        ns.route_add("default", ROUTER_L)?;
        let addr6 = if dual {
            let a = backend_addr6(i);
            addr6_add(&e, &format!("{a}/64"))?;
            route6_add(&ns, "default", ROUTER_L6)?;
            Some(a)
        } else {
            None
        };
        let state = net.dir(&format!("backend-b{i}"))?.join("state.json");
        let state_s = state.to_string_lossy().into_owned();
        let extra = (spec.backend_args)(i);
        let mut args = vec![BIN, "backend", "--interface", "eth0"];
        for v in spec.vips {
            args.extend(["--vip", v]);
        }
        args.extend(["--decap", spec.decap]);
        args.extend(extra.iter().map(String::as_str));
        args.extend(["--state", &state_s]);
        ns.cmd(args).run().context("flowplane backend")?;
        let nginx = ns.nginx(&NginxConfig {
            body: format!("{}\n", body_of(i)),
            extra_server: if dual {
                format!("    listen [::]:80 reuseport;\n{}", spec.nginx_server)
            } else {
                spec.nginx_server.to_string()
            },
            ..Default::default()
        })?;
        backends.push(Backend {
            i,
            mac: e.mac_string()?,
            ns,
            addr,
            addr6,
            nginx,
        });
    }

    // The topology without the balancer: client → router → backend address, reply direct.
    client.ping(ROUTER_C, 1)?;
    router.ping(LB, 1)?;
    if dual {
        ping_until(&client, ROUTER_C6)?;
        ping_until(&router, LB6)?;
    }
    for b in &backends {
        let addrs = std::iter::once(&b.addr).chain(b.addr6.as_ref());
        for addr in addrs {
            let url = url_of(addr);
            let mut args = vec!["curl", "-sS", "-m", "5", &url];
            if addr.contains(':') {
                // Brackets are curl's glob syntax otherwise.
                args.push("-g");
            }
            let out = client
                .cmd(args)
                .run()
                .context("topology check (no balancer involved): client → router → backend")?;
            ensure!(
                out.stdout.trim() == body_of(b.i),
                "topology check: backend {} ({addr}) answered {:?}",
                b.i,
                out.stdout
            );
        }
    }
    let config = net.dir("balancer")?.join("flowplane.toml");
    Ok(Lab {
        net,
        client,
        router,
        lb,
        sw,
        br,
        lb_mac,
        backends,
        config,
        dual_stack: dual,
    })
}

// ---------------------------------------------------------------------------------------------
// Small HTTP/1.1 client (keep-alive aware), metrics parsing, polling.

pub fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

pub fn request(s: &mut TcpStream, host: &str, close: bool) -> io::Result<(u16, String)> {
    let conn = if close { "Connection: close\r\n" } else { "" };
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n{conn}\r\n").as_bytes())?;
    fp_testnet::read_http_response(s)
}

pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(4))?;
    s.set_read_timeout(Some(Duration::from_secs(4)))?;
    s.set_write_timeout(Some(Duration::from_secs(4)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One new connection, one request, the backend's name from the body.
pub fn get_once(addr: SocketAddr) -> io::Result<String> {
    let mut s = connect(addr)?;
    let (status, body) = request(&mut s, &addr.ip().to_string(), true)?;
    if status != 200 {
        return Err(other(format!("HTTP status {status}, body {body:?}")));
    }
    Ok(body.trim().to_string())
}

/// Which backend answered how many of a series of new connections, and what failed.
#[derive(Debug, Default)]
pub struct Tally {
    pub served: BTreeMap<String, usize>,
    pub failures: Vec<String>,
}

impl Tally {
    pub fn total(&self) -> usize {
        self.served.values().sum()
    }
}

/// `n` sequential new connections from the client to `vip:80`, each with one request.
pub fn new_connections(client: &Netns, vip: &str, n: usize) -> Result<Tally> {
    let addr: SocketAddr = format!("{vip}:80").parse()?;
    Ok(client.enter(move || {
        let mut t = Tally::default();
        for k in 0..n {
            match get_once(addr) {
                Ok(b) => *t.served.entry(b).or_default() += 1,
                Err(e) => t.failures.push(format!("connection {k}: {e}")),
            }
        }
        t
    })?)
}

/// `n` connections from the client to `vip:80`, kept open: one request on each, answered 200;
/// each with the backend that answered (the body's name).
pub fn hold_connections(client: &Netns, vip: &str, n: usize) -> Result<Vec<(TcpStream, String)>> {
    let vip_addr: SocketAddr = format!("{vip}:80").parse()?;
    Ok(
        client.enter(move || -> io::Result<Vec<(TcpStream, String)>> {
            (0..n)
                .map(|_| {
                    let mut s = connect(vip_addr)?;
                    let (st, body) = request(&mut s, vip, false)?;
                    if st != 200 {
                        return Err(other(format!("status {st}")));
                    }
                    Ok((s, body.trim().to_string()))
                })
                .collect()
        })??,
    )
}

/// A request to the admin server inside the balancer's namespace: status and body.
pub fn admin(lb: &Netns, method: &str, path: &str) -> Result<(u16, String)> {
    let addr: SocketAddr = ADMIN.parse()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {ADMIN}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    let r = lb.enter(move || -> io::Result<(u16, String)> {
        let mut s = connect(addr)?;
        s.write_all(req.as_bytes())?;
        fp_testnet::read_http_response(&mut s)
    })?;
    r.with_context(|| format!("admin {method} {path}"))
}

/// Start `flowplane switch --config FILE` in `ns` (the file `config` written into `dir`, which
/// is also its state directory), one worker on `driver`, admin at `admin`; wait until it is
/// ready. Returns the process and the file's path.
pub fn start_switch(
    ns: &Netns,
    dir: &std::path::Path,
    config: &str,
    driver: &str,
    admin: &str,
) -> Result<(Proc, std::path::PathBuf)> {
    let path = dir.join("sw.toml");
    std::fs::write(&path, config)?;
    let switch = ns
        .cmd([
            env!("CARGO_BIN_EXE_flowplane"),
            "switch",
            "--config",
            path.to_str().context("config path")?,
            "--driver",
            driver,
            "--workers",
            "1",
            "--admin",
            admin,
        ])
        .env("STATE_DIRECTORY", dir.to_str().context("state path")?)
        .spawn()?;
    switch
        .wait_log("flowplane: ready", Duration::from_secs(20))
        .with_context(|| format!("the switch did not start:\n{}", switch.log()))?;
    Ok((switch, path))
}

/// Every sample an admin server at `admin` serves on `/metrics` (fetched with curl from `ns`),
/// keyed as printed: `name{labels}` → value.
pub fn scrape(ns: &Netns, admin: &str) -> Result<HashMap<String, f64>> {
    let text = ns
        .cmd([
            "curl",
            "-sS",
            "--max-time",
            "5",
            &format!("http://{admin}/metrics"),
        ])
        .run()?
        .stdout;
    let mut m = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some((k, v)) = line.rsplit_once(' ') {
            m.insert(k.to_string(), v.parse::<f64>().unwrap_or(f64::NAN));
        }
    }
    Ok(m)
}

/// A scrape of `/metrics`.
pub struct Metrics(pub String);

/// A sample's labels, in order.
pub type Labels = Vec<(String, String)>;

/// `name{k="v",...} value` → (name, labels, value).
fn parse_sample(line: &str) -> Option<(&str, Labels, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series, Vec::new(), value));
    };
    let rest = rest.strip_suffix('}')?;
    let mut labels = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            return None;
        }
        let mut val = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => val.extend(chars.next()),
                '"' => break,
                c => val.push(c),
            }
        }
        labels.push((key.trim_start_matches(',').to_string(), val));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    Some((name, labels, value))
}

impl Metrics {
    pub fn scrape(lb: &Netns) -> Result<Metrics> {
        let (st, body) = admin(lb, "GET", "/metrics")?;
        ensure!(st == 200, "GET /metrics: status {st}: {body}");
        Ok(Metrics(body))
    }

    /// The sample of `name` whose labels include `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(parse_sample)
            .find(|(n, ls, _)| {
                *n == name
                    && labels
                        .iter()
                        .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
    }

    /// Like `get`, 0 if absent is an error.
    pub fn val(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
        self.get(name, labels)
            .ok_or_else(|| anyhow!("metric {name}{labels:?} not in /metrics"))
    }

    /// All label sets of `name` with values.
    pub fn all(&self, name: &str) -> Vec<(Labels, f64)> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(parse_sample)
            .filter(|(n, _, _)| *n == name)
            .map(|(_, l, v)| (l, v))
            .collect()
    }

    pub fn drops(&self, reason: &str) -> Result<f64> {
        self.val("flowplane_drops_total", &[("reason", reason)])
    }
}

/// The kernel's SNMP counters of a namespace (`nstat -asz`: absolute, with zeros, no history).
pub fn snmp(ns: &Netns) -> Result<HashMap<String, i64>> {
    let out = ns.cmd(["nstat", "-asz"]).run()?;
    Ok(out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.parse().ok()?))
        })
        .collect())
}

pub fn delta(before: &HashMap<String, i64>, after: &HashMap<String, i64>, key: &str) -> i64 {
    after.get(key).copied().unwrap_or(0) - before.get(key).copied().unwrap_or(0)
}

/// Poll `f` every 20 ms until it yields a value or `timeout` passes.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the VIP named `vip` has forwarded more than `packets` packets since its counter
/// read `from` (a load generator's traffic reaches the balancer).
pub fn wait_vip_packets(lb: &Netns, what: &str, vip: &str, from: f64, packets: f64) -> Result<()> {
    wait_for(what, Duration::from_secs(5), || {
        let p = Metrics::scrape(lb)?.val("flowplane_vip_packets_total", &[("vip", vip)])?;
        Ok((p - from > packets).then_some(()))
    })
}

/// Whether an XDP program is attached to the balancer's `eth0` (`ip -j link` has an `xdp` object).
pub fn xdp_attached(lb: &Netns) -> Result<bool> {
    let out = lb.ip(&["-j", "-d", "link", "show", "eth0"])?.stdout;
    let v: serde_json::Value =
        serde_json::from_str(&out).with_context(|| format!("ip -j link: {out}"))?;
    Ok(!v[0]["xdp"].is_null())
}

/// The test network's tag for a test `prefix` and a port driver: `PREFIX-pkt` or `PREFIX-xsk`.
pub fn lab_tag(prefix: &str, driver: &str) -> String {
    let d = if driver == "af_xdp" { "xsk" } else { "pkt" };
    format!("{prefix}-{d}")
}

/// Ok when nothing failed, else an error listing every failure.
pub fn none_failed(failures: &[String]) -> Result<()> {
    ensure!(
        failures.is_empty(),
        "{} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
    Ok(())
}

/// Second-chance packets the tc program of the backend in `ns` forwarded to a named backend, from
/// `flowplane backend --status` (the backend's state file is `state`).
pub fn second_chance_forwarded(ns: &Netns, state: &std::path::Path) -> Result<u64> {
    let out = ns
        .cmd([
            BIN,
            "backend",
            "--status",
            "--state",
            &state.to_string_lossy(),
        ])
        .run()?
        .stdout;
    let line = out
        .lines()
        .find(|l| l.contains("forwarded to the named backend"))
        .with_context(|| format!("no second-chance counters in {out}"))?;
    line.rsplit(' ')
        .next()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .with_context(|| format!("no count in {line:?}"))
}

/// The lab's state directory (seed, backend sets, carried connections), so that no balancer of
/// a test reads what another test's left in the machine's default one.
pub fn state_dir(lab: &Lab) -> PathBuf {
    lab.config
        .parent()
        .expect("the configuration is in the lab's directory")
        .join("state")
}

pub fn step(name: &str, t0: Instant) {
    println!("[{:>6.2}s] {name}", t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------
// The balancer's life in a lab.

/// One lab run: build it (`build`, serialised with the other labs of this binary), run
/// `scenario` with the slot where it puts the balancer it starts, and panic with the balancer's
/// status page and the tail of its log if the scenario fails. The lab is removed on return and on
/// panic.
pub fn run_lab(
    driver: &str,
    build: impl FnOnce() -> Result<Lab>,
    scenario: impl FnOnce(&Lab, &mut Option<Proc>, Instant) -> Result<()>,
) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let lab = build().unwrap_or_else(|e| panic!("building the lab (before any balancer): {e:#}"));
    step("topology built and checked without the balancer", t0);
    let mut balancer: Option<Proc> = None;
    let r = scenario(&lab, &mut balancer, t0);
    if let Err(e) = r {
        let log = balancer.as_ref().map(|p| p.log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let status = admin(&lab.lb, "GET", "/status")
            .map(|(_, b)| b)
            .unwrap_or_else(|e| format!("(no status: {e:#})"));
        panic!(
            "{driver}: {e:#}\n--- balancer status ---\n{status}\n--- balancer log (last 60 lines) ---\n{}\n\
             (network {}: rerun with FP_TESTNET_KEEP=1 to keep it for inspection)",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            lab.net.id()
        );
    }
    println!("[{:>6.2}s] {driver}: done", t0.elapsed().as_secs_f64());
    drop(lab);
}

/// Start `flowplane run` with the lab's configuration file (written by the caller) on the
/// balancer's `eth0` with `driver`, two workers and the admin server, and wait until it is ready
/// (two workers, generation 1, `/healthz`, the XDP program attached under AF_XDP) and knows the
/// MACs of backends b1..b`initial`. The process is also put in `balancer` (for the failure
/// report).
pub fn start_balancer(
    lab: &Lab,
    driver: &str,
    initial: usize,
    balancer: &mut Option<Proc>,
    t0: Instant,
) -> Result<Proc> {
    let lb = &lab.lb;
    let cfg = lab.config.to_string_lossy().into_owned();
    let fp = lb
        .cmd([
            BIN,
            "run",
            "--config",
            &cfg,
            "--interface",
            "eth0",
            "--driver",
            driver,
            "--workers",
            "2",
            "--admin",
            ADMIN,
        ])
        .env("STATE_DIRECTORY", state_dir(lab))
        .spawn()?;
    *balancer = Some(fp.clone());
    fp.wait_log("flowplane: ready", Duration::from_secs(30))?;
    step("balancer ready", t0);
    let m = Metrics::scrape(lb)?;
    ensure!(
        m.val("flowplane_workers", &[])? == 2.0,
        "expected 2 workers (2 queues / fan-out sockets), metrics say {:?}",
        m.get("flowplane_workers", &[])
    );
    ensure!(m.val("flowplane_config_generation", &[])? == 1.0);
    let (st, body) = admin(lb, "GET", "/healthz")?;
    ensure!(st == 200 && body.trim() == "ok", "/healthz: {st} {body:?}");
    if driver == "af_xdp" {
        ensure!(
            xdp_attached(lb)?,
            "AF_XDP balancer running but no XDP program on eth0"
        );
    }
    // Backend MACs come from the balancer namespace's neighbour table (resolved by the health
    // checks); wait until the balancer has them all.
    wait_for(
        "the balancer to know every backend's MAC (/status)",
        Duration::from_secs(10),
        || {
            let (_, s) = admin(lb, "GET", "/status")?;
            Ok((1..=initial)
                .all(|i| {
                    s.lines().any(|l| {
                        l.starts_with(&format!("backend {} ", backend_addr(i)))
                            && !l.contains("unresolved")
                    })
                })
                .then_some(()))
        },
    )?;
    step("backend MACs resolved", t0);
    Ok(fp)
}

/// SIGTERM: the balancer exits 0, logs its shutdown and leaves no XDP program attached.
pub fn stop_balancer(lab: &Lab, fp: &Proc, t0: Instant) -> Result<()> {
    fp.signal(libc::SIGTERM);
    let st = fp.wait(Duration::from_secs(10))?;
    ensure!(st.success(), "balancer exit status on SIGTERM: {st}");
    ensure!(fp.log().contains("shutting down"));
    ensure!(
        !xdp_attached(&lab.lb)?,
        "XDP program still attached to eth0 after the balancer exited"
    );
    step("SIGTERM: exit 0, nothing left attached", t0);
    Ok(())
}

/// How long [`ask_held`] waits for a held connection's answer: several of TCP's
/// retransmission intervals.
pub const HELD_PATIENCE: Duration = Duration::from_secs(16);

/// One more request on every held connection (kept-alive connections to `vip`, with the
/// backend that answered each): each must answer 200 from that backend. A late answer still
/// counts (the connection survived: a lost segment waits for TCP's retransmission, a backend
/// that forwards to another may first resolve its neighbour), up to [`HELD_PATIENCE`]; it is
/// printed.
pub fn ask_held(
    client: &Netns,
    vip: &str,
    held: &mut [(TcpStream, String)],
    when: &str,
) -> Result<()> {
    let (moved, failed) = client.enter(|| {
        let (mut moved, mut failed) = (Vec::new(), Vec::new());
        for (k, (s, was)) in held.iter_mut().enumerate() {
            let asked = Instant::now();
            let mut got = request(s, vip, false);
            while matches!(&got, Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
                && asked.elapsed() < HELD_PATIENCE
            {
                got = fp_testnet::read_http_response(s);
            }
            if got.is_ok() && asked.elapsed() > Duration::from_secs(2) {
                println!(
                    "    connection {k} (on {was}) {when}: answered after {:.1} s",
                    asked.elapsed().as_secs_f64()
                );
            }
            match got {
                Ok((200, body)) if body.trim() == was => {}
                Ok((st, body)) => moved.push(format!(
                    "connection {k} answered by {was} before: now {st} {:?}",
                    body.trim()
                )),
                Err(e) => failed.push(format!("connection {k} (on {was}): {e}")),
            }
        }
        (moved, failed)
    })?;
    ensure!(
        moved.is_empty() && failed.is_empty(),
        "held connections {when}: {} on another backend {moved:?}, {} failed {failed:?}",
        moved.len(),
        failed.len()
    );
    Ok(())
}

/// The frames of a pcap file (tcpdump's classic format, little-endian, µs or ns stamps).
pub fn read_pcap(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let d = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(d.len() >= 24, "{}: no pcap header", path.display());
    let magic = u32::from_le_bytes(d[0..4].try_into()?);
    ensure!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "{}: not a little-endian pcap (magic {magic:#x})",
        path.display()
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into()?) as usize;
        let end = (at + 16 + caplen).min(d.len());
        out.push(d[at + 16..end].to_vec());
        at = end;
    }
    Ok(out)
}

/// A MAC address as text (`aa:bb:cc:dd:ee:ff`).
pub fn mac_text(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A UDP frame whose payload is a tracer probe (`fp_control::trace`).
pub fn probe_frame(dst: [u8; 6], src: [u8; 6], id: u64) -> Vec<u8> {
    let payload = fp_pipeline::trace::probe_payload(id);
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&4000u16.to_be_bytes());
    f.extend_from_slice(&4001u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum (allowed in IPv4)
    f.extend_from_slice(&payload);
    f
}

/// A test frame: `dst`, `src`, `ethertype`, `mark`, a 32-bit tag, padded to 60 bytes.
pub fn tagged_frame(
    dst: [u8; 6],
    src: [u8; 6],
    ethertype: u16,
    mark: &[u8; 8],
    tag: u32,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(mark);
    f.extend_from_slice(&tag.to_be_bytes());
    f.resize(60, 0);
    f
}
