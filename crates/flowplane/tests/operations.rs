//! Operating the balancer as a service: `flowplane check`, the systemd notification protocol and
//! the unit's capability set, and a real Prometheus scraping the admin server with the packaged
//! Grafana dashboard's queries run against it.
//!
//! # Topology (live tests)
//!
//! ```text
//!   lb namespace                                   peer namespace
//!   flowplane run --interface eth0 ── veth ──────  eth0 10.9.0.2, nginx :80 (the one backend,
//!   eth0 10.9.0.1, admin 127.0.0.1:9180            health-checked over TCP)
//!   prometheus 127.0.0.1:9090 (scrapes the admin server every second)
//! ```
//!
//! The notification test plays systemd: it binds the datagram socket named in `NOTIFY_SOCKET`
//! (with `WATCHDOG_USEC` set) and starts the balancer under `setpriv` with exactly the capability
//! bounding set and `NoNewPrivileges` of packaging/flowplane.service, on AF_XDP (the driver
//! that needs the most privilege).

use anyhow::{bail, ensure, Context, Result};
use fp_testnet::{Netns, NginxConfig, Proc, TestNet};
use std::collections::BTreeSet;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_flowplane");
const ADMIN: &str = "127.0.0.1:9180";
const PROMETHEUS: &str = "127.0.0.1:9090";

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

// ---- flowplane check --------------------------------------------------------------------------

fn run_check(config: &Path) -> Result<std::process::Output> {
    std::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(config)
        .output()
        .context("running flowplane check")
}

/// A directory of this test process, removed when the test ends (also when it fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<TempDir> {
        let d = std::env::temp_dir().join(format!("fp-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d)?;
        Ok(TempDir(d))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn check_prints_the_plan_and_names_the_bad_field() -> Result<()> {
    let tmp = TempDir::new("check")?;
    let dir = &tmp.0;
    let demo = repo_file("configs/demo.toml");
    let out = run_check(&demo)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "demo config rejected: {out:?}");
    for want in [
        ": valid",
        "vip \"web\": 203.0.113.10 port 80/tcp, encap gre",
        "Maglev table digest ",
        "backend 10.0.1.4 name \"10.0.1.4\" weight 2",
        "seed: not in the file: kept in the state file ",
        "bgp: none",
    ] {
        ensure!(
            stdout.contains(want),
            "check output lacks {want:?}:\n{stdout}"
        );
    }
    let text = std::fs::read_to_string(&demo)?;
    let cases = [
        (
            text.replacen("weight = 2", "weight = 2000000", 1),
            "pool \"web\".backends[3].weight",
        ),
        (text.replacen("port = 80", "port = 80000", 1), "line "),
        (
            format!("{text}\n[bgp]\nlocal_as = 65001\npeer = \"10.0.0.1\"\npeer_as = 65000\n"),
            "balancer.seed",
        ),
    ];
    for (i, (bad, field)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, bad)?;
        let out = run_check(&path)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && out.stdout.is_empty(),
            "case {i} accepted: {out:?}"
        );
        ensure!(
            stderr.starts_with(&format!("flowplane: error: {}: {field}", path.display())),
            "case {i}: the error names file and field {field:?}: {stderr}"
        );
        ensure!(!stderr.contains("backtrace"), "{stderr}");
    }
    Ok(())
}

// ---- the unit file ----------------------------------------------------------------------------

/// `KEY=VALUE` lines of the unit's `[Service]` section, in order.
fn unit_settings() -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(repo_file("packaging/flowplane.service"))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn unit_values(key: &str) -> Result<Vec<String>> {
    Ok(unit_settings()?
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect())
}

#[test]
fn unit_file_verifies_and_reloads_through_the_check() -> Result<()> {
    let settings = unit_settings()?;
    let get = |k: &str| {
        settings
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    ensure!(get("Type") == Some("notify"));
    ensure!(get("NoNewPrivileges") == Some("yes"));
    ensure!(get("WatchdogSec").is_some());
    let reload = unit_values("ExecReload")?;
    ensure!(
        reload.len() == 2
            && reload[0].contains("flowplane check")
            && reload[0].contains("--driver ${FLOWPLANE_DRIVER}")
            && reload[1].ends_with("kill -HUP $MAINPID"),
        "ExecReload must check the file for the driver in use, then signal: {reload:?}"
    );
    // systemd's own parser, with the binary path pointed at this build.
    let tmp = TempDir::new("unit")?;
    let dir = &tmp.0;
    let unit = std::fs::read_to_string(repo_file("packaging/flowplane.service"))?
        .replace("/usr/bin/flowplane", BIN);
    let path = dir.join("flowplane.service");
    std::fs::write(&path, unit)?;
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .context("running systemd-analyze (Debian package systemd)")?;
    let msgs =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    // Offline verification may note that no systemd runs here; anything about the unit fails.
    let complaints: Vec<&str> = msgs
        .lines()
        .filter(|l| l.contains("flowplane.service"))
        .collect();
    ensure!(
        out.status.success() && complaints.is_empty(),
        "systemd-analyze verify: {msgs}"
    );
    // systemd's own rating of the hardening ("OK" is below 5; 10 is an unconfined service).
    let out = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&path)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for flowplane.service:")
                .nth(1)
        })
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no exposure level in systemd-analyze security: {text}"))?;
    ensure!(level < 5.0, "exposure level {level}:\n{text}");
    Ok(())
}

// ---- live: the lab ----------------------------------------------------------------------------

struct Lab {
    net: TestNet,
    lb: Netns,
    config: PathBuf,
}

fn config_text(weight: u32) -> String {
    format!(
        r#"[balancer]
address = "10.9.0.1"
seed = 17
conn_table_capacity = 4096
conn_table_capacity_v6 = 1024

[[vip]]
name = "web"
address = "10.100.0.10"
port = 80
protocol = "tcp"
pools = ["web"]

[[pool]]
name = "web"
backends = [{{ address = "10.9.0.2", weight = {weight} }}]
health = {{ kind = "tcp", port = 80, interval_ms = 200, timeout_ms = 150 }}
"#
    )
}

fn lab(tag: &str) -> Result<Lab> {
    let net = TestNet::new(tag)?;
    let lb = net.ns("lb")?;
    let peer = net.ns("peer")?;
    for ns in [&lb, &peer] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
        ns.lo().up()?;
    }
    let (a, b) = net.veth(&lb, "eth0", &peer, "eth0")?;
    a.addr_add("10.9.0.1/24")?;
    b.addr_add("10.9.0.2/24")?;
    peer.nginx(&NginxConfig::default())?;
    let config = net.dir("etc")?.join("flowplane.toml");
    std::fs::write(&config, config_text(1))?;
    Ok(Lab { net, lb, config })
}

/// Poll `f` until it returns `Some`, or fail after `timeout`.
fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last error: {last:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `curl` inside `ns`; the body.
fn curl(ns: &Netns, args: &[&str]) -> Result<String> {
    let mut a = vec!["curl", "-sS", "--max-time", "5"];
    a.extend_from_slice(args);
    Ok(ns.cmd(a).run()?.check()?.stdout)
}

// ---- live: systemd notifications ----------------------------------------------------------------

/// The service manager's end: every datagram received, with its arrival time.
struct Manager {
    path: PathBuf,
    got: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Manager {
    fn bind(dir: &Path) -> Result<Manager> {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path)?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            // A blocked recv times out every 200 ms to look at the stop flag.
            while !s.load(Ordering::Relaxed) {
                match sock.recv(&mut buf) {
                    Ok(n) => g.lock().unwrap().push((
                        Instant::now(),
                        String::from_utf8_lossy(&buf[..n]).into_owned(),
                    )),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => return,
                }
            }
        });
        Ok(Manager { path, got, stop })
    }

    fn messages(&self) -> Vec<(Instant, String)> {
        self.got.lock().unwrap().clone()
    }

    /// Wait for a message after index `from` that starts with `prefix`; its index and text.
    fn wait(&self, from: usize, prefix: &str, timeout: Duration) -> Result<(usize, String)> {
        wait_for(&format!("{prefix:?} on NOTIFY_SOCKET"), timeout, || {
            Ok(self
                .messages()
                .into_iter()
                .enumerate()
                .skip(from)
                .find(|(_, (_, m))| m.starts_with(prefix))
                .map(|(i, (_, m))| (i, m)))
        })
    }
}

/// The unit's `CapabilityBoundingSet`, as setpriv's `--bounding-set` argument.
fn unit_bounding_set(without: &[&str]) -> Result<String> {
    let caps = unit_values("CapabilityBoundingSet")?;
    ensure!(caps.len() == 1, "one CapabilityBoundingSet line: {caps:?}");
    let mut arg = String::from("-all");
    for c in caps[0].split_whitespace() {
        let c = c.trim_start_matches("CAP_").to_lowercase();
        if !without.contains(&c.as_str()) {
            arg.push_str(",+");
            arg.push_str(&c);
        }
    }
    Ok(arg)
}

fn start_hardened(lab: &Lab, notify: &Path, without: &[&str], driver: &str) -> Result<Proc> {
    lab.net.require_tools(&["setpriv"])?;
    let caps = unit_bounding_set(without)?;
    let cfg = lab.config.to_string_lossy().into_owned();
    Ok(lab
        .lb
        .cmd([
            "setpriv",
            "--bounding-set",
            &caps,
            "--inh-caps",
            "-all",
            "--no-new-privs",
            "--",
            BIN,
            "run",
            "--config",
            &cfg,
            "--interface",
            "eth0",
            "--driver",
            driver,
            "--workers",
            "1",
            "--admin",
            ADMIN,
        ])
        .env("NOTIFY_SOCKET", notify)
        .env("WATCHDOG_USEC", "400000")
        .env("STATE_DIRECTORY", lab.config.with_file_name("state"))
        .spawn()?)
}

#[test]
fn systemd_notifications_under_the_units_capabilities() -> Result<()> {
    let lab = lab("notify")?;
    let dir = lab.net.dir("systemd")?;

    // Without CAP_NET_RAW the balancer cannot open its sockets: the capability set matters, and
    // the failure is reported (no READY=1, exit non-zero).
    let m0 = Manager::bind(&lab.net.dir("systemd-0")?)?;
    let fp = start_hardened(&lab, &m0.path, &["net_raw"], "af_packet")?;
    let st = fp.wait(Duration::from_secs(30))?;
    ensure!(!st.success(), "started without CAP_NET_RAW: {}", fp.log());
    ensure!(
        fp.log().contains("Operation not permitted"),
        "failed for another reason than the missing capability: {}",
        fp.log()
    );
    ensure!(
        !m0.messages().iter().any(|(_, m)| m.starts_with("READY=1")),
        "READY=1 without a data path"
    );

    // With the unit's set: AF_XDP opens, and the whole protocol runs.
    let m = Manager::bind(&dir)?;
    let fp = start_hardened(&lab, &m.path, &[], "af_xdp")?;
    let (i_ready, ready) = m
        .wait(0, "READY=1", Duration::from_secs(30))
        .map_err(|e| anyhow::anyhow!("{e}\nbalancer log:\n{}", fp.log()))?;
    ensure!(
        ready.contains("STATUS=forwarding on eth0 with 1 worker(s)"),
        "{ready:?}"
    );
    // Ready means serving: the admin server answers at once.
    let metrics = curl(&lab.lb, &[&format!("http://{ADMIN}/metrics")])?;
    ensure!(metrics.contains("flowplane_workers 1"), "{metrics}");

    // The watchdog: WATCHDOG_USEC=400000 asks for a ping at least every 400 ms.
    std::thread::sleep(Duration::from_millis(1500));
    let pings: Vec<Instant> = m
        .messages()
        .into_iter()
        .skip(i_ready)
        .filter(|(_, s)| s == "WATCHDOG=1")
        .map(|(t, _)| t)
        .collect();
    ensure!(pings.len() >= 3, "{} watchdog pings in 1.5 s", pings.len());
    let worst = pings.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    ensure!(
        worst < Duration::from_millis(400),
        "watchdog gap {worst:?} exceeds WATCHDOG_USEC"
    );

    // A good reload: RELOADING=1 with the monotonic clock, then READY=1 naming the generation.
    std::fs::write(&lab.config, config_text(2))?;
    let n = m.messages().len();
    fp.signal(libc::SIGHUP);
    let (i, reloading) = m.wait(n, "RELOADING=1", Duration::from_secs(10))?;
    let usec: u64 = reloading
        .split("MONOTONIC_USEC=")
        .nth(1)
        .context("RELOADING=1 without MONOTONIC_USEC")?
        .trim()
        .parse()?;
    let now = fp_engine::sys::monotonic_ns() / 1000;
    ensure!(
        usec <= now && now - usec < 10_000_000,
        "MONOTONIC_USEC {usec} is not CLOCK_MONOTONIC (now {now})"
    );
    let (i, ready) = m.wait(i + 1, "READY=1", Duration::from_secs(10))?;
    ensure!(ready.contains("configuration generation 2"), "{ready:?}");

    // A bad reload: the same two messages; the status says it was rejected and why.
    std::fs::write(
        &lab.config,
        config_text(2).replace("port = 80\n", "port = 80\nbogus = 1\n"),
    )?;
    fp.signal(libc::SIGHUP);
    let (i, _) = m.wait(i + 1, "RELOADING=1", Duration::from_secs(10))?;
    let (i, ready) = m.wait(i + 1, "READY=1", Duration::from_secs(10))?;
    ensure!(
        ready.contains("last reload rejected") && ready.contains("bogus"),
        "{ready:?}"
    );
    let metrics = curl(&lab.lb, &[&format!("http://{ADMIN}/metrics")])?;
    ensure!(
        metrics.contains("flowplane_config_generation 2"),
        "the good config stays"
    );

    // Stop: STOPPING=1, then a clean exit.
    fp.signal(libc::SIGTERM);
    m.wait(i + 1, "STOPPING=1", Duration::from_secs(10))?;
    let st = fp.wait(Duration::from_secs(30))?;
    ensure!(st.success(), "exit status {st:?}; log:\n{}", fp.log());
    Ok(())
}

// ---- live: a real Prometheus and the dashboard ---------------------------------------------------

fn prom_api(lb: &Netns, path: &str, query: Option<&str>) -> Result<serde_json::Value> {
    let url = format!("http://{PROMETHEUS}{path}");
    let body = match query {
        Some(q) => curl(lb, &["-G", &url, "--data-urlencode", &format!("query={q}")])?,
        None => curl(lb, &[&url])?,
    };
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("{path}: {body}"))?;
    ensure!(v["status"] == "success", "{path} {query:?}: {body}");
    Ok(v["data"].clone())
}

/// Every `expr` in a Grafana dashboard, wherever it is nested.
fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

/// Metric names (`flowplane_…`) in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("flowplane_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn prometheus_scrapes_the_balancer_and_the_dashboard_queries_its_series() -> Result<()> {
    let lab = lab("prom")?;
    lab.net.require_tools(&["prometheus", "curl"])?;
    let cfg = lab.config.to_string_lossy().into_owned();
    let fp = lab
        .lb
        .cmd([
            BIN,
            "run",
            "--config",
            &cfg,
            "--interface",
            "eth0",
            "--workers",
            "1",
            "--admin",
            ADMIN,
        ])
        .env("STATE_DIRECTORY", lab.config.with_file_name("state"))
        .spawn()?;
    fp.wait_log("flowplane: ready", Duration::from_secs(30))?;
    let pdir = lab.net.dir("prometheus")?;
    let pcfg = pdir.join("prometheus.yml");
    std::fs::write(
        &pcfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: flowplane\n    static_configs:\n      \
             - targets: ['{ADMIN}']\n"
        ),
    )?;
    let prom = lab
        .lb
        .cmd([
            "prometheus".to_string(),
            format!("--config.file={}", pcfg.display()),
            format!("--storage.tsdb.path={}", pdir.join("data").display()),
            format!("--web.listen-address={PROMETHEUS}"),
        ])
        .spawn()?;
    // The target is up and its last scrape parsed without error.
    wait_for(
        "Prometheus to scrape flowplane successfully",
        Duration::from_secs(60),
        || {
            if !prom.is_running() {
                bail!("prometheus exited:\n{}", prom.log());
            }
            let Ok(t) = prom_api(&lab.lb, "/api/v1/targets", None) else {
                return Ok(None);
            };
            let active = t["activeTargets"].as_array().cloned().unwrap_or_default();
            let Some(t) = active.first() else {
                return Ok(None);
            };
            ensure!(
                t["lastError"].as_str().unwrap_or("").is_empty(),
                "Prometheus rejected the exposition: {}",
                t["lastError"]
            );
            Ok((t["health"] == "up").then_some(()))
        },
    )?;

    // Every family the balancer exports is stored under its name (histograms as their series).
    let exposition = curl(&lab.lb, &[&format!("http://{ADMIN}/metrics")])?;
    let mut want = BTreeSet::new();
    for l in exposition.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let mut f = t.split_whitespace();
            let (name, kind) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
            if kind == "histogram" {
                for s in ["_bucket", "_sum", "_count"] {
                    want.insert(format!("{name}{s}"));
                }
            } else {
                want.insert(name.to_string());
            }
        }
    }
    ensure!(want.len() >= 40, "{} families exported", want.len());
    let names: BTreeSet<String> = wait_for(
        "every exported family in Prometheus",
        Duration::from_secs(20),
        || {
            let v = prom_api(&lab.lb, "/api/v1/label/__name__/values", None)?;
            let names: BTreeSet<String> = v
                .as_array()
                .context("names")?
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect();
            Ok(want.is_subset(&names).then_some(names))
        },
    )?;
    // A value that means something: one worker, the backend healthy after its TCP checks.
    let v = prom_api(&lab.lb, "/api/v1/query", Some("flowplane_workers"))?;
    ensure!(v["result"][0]["value"][1] == "1", "{v}");
    wait_for(
        "the backend healthy in Prometheus",
        Duration::from_secs(20),
        || {
            let v = prom_api(&lab.lb, "/api/v1/query", Some("flowplane_backend_healthy"))?;
            Ok((v["result"][0]["value"][1] == "1").then_some(()))
        },
    )?;

    // The dashboard: every metric it names is one Prometheus holds from flowplane, and every
    // query is valid PromQL to Prometheus's own parser (Grafana's variables substituted).
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo_file(
        "packaging/grafana/flowplane.json",
    ))?)?;
    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    ensure!(
        queries.len() >= 10,
        "{} queries in the dashboard",
        queries.len()
    );
    for q in &queries {
        let used = metric_names(q);
        ensure!(!used.is_empty(), "query names no flowplane metric: {q}");
        for n in &used {
            ensure!(
                names.contains(n),
                "dashboard query uses {n}, which flowplane does not export: {q}"
            );
        }
        let concrete = q
            .replace("$__rate_interval", "10s")
            .replace("$__interval", "5s")
            .replace("$__range", "1m")
            .replace("${instance}", ".*")
            .replace("$instance", ".*");
        prom_api(&lab.lb, "/api/v1/query", Some(&concrete))
            .with_context(|| format!("dashboard query {q}"))?;
    }
    prom.stop(Duration::from_secs(10));
    fp.stop(Duration::from_secs(20));
    Ok(())
}
