//! Ready-made servers and clients for live tests: nginx with a generated configuration, Python's
//! `http.server`, iperf3, wrk, tcpdump, scapy, etcd and Open vSwitch — each run inside a
//! namespace, with its files in the test network's temporary directory, and each parsed into a
//! small report where that helps.

use crate::cmd::{require_tool, Output, Proc};
use crate::netns::{Link, Netns};
use crate::{io_err, Error, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long servers get to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The Python with Debian's packages (scapy): `/usr/bin/python3` when present (a `python3` first
/// in `PATH` may be a pyenv one without them).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").is_file() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// An nginx server's configuration: [`Netns::nginx`] writes it to a file and starts nginx in the
/// foreground (`daemon off`), so it is a background [`Proc`] killed with the test network.
#[derive(Debug, Clone)]
pub struct NginxConfig {
    /// TCP port to listen on (all addresses, `reuseport`).
    pub port: u16,
    /// Body of every response (`index.html` in the document root, served for any path that is
    /// not a file there). Put other files in [`Nginx::www`].
    pub body: String,
    /// Worker processes.
    pub workers: u32,
    /// Raw directives added inside `http { }`.
    pub extra_http: String,
    /// Raw directives added inside `server { }` (e.g. `location /status { stub_status; }`).
    pub extra_server: String,
}

impl Default for NginxConfig {
    fn default() -> Self {
        NginxConfig {
            port: 80,
            body: "ok\n".into(),
            workers: 1,
            extra_http: String::new(),
            extra_server: String::new(),
        }
    }
}

/// A running nginx.
#[derive(Debug, Clone)]
pub struct Nginx {
    /// The master process.
    pub proc: Proc,
    /// Its directory (configuration, pid file, error log).
    pub dir: PathBuf,
    /// Its document root.
    pub www: PathBuf,
    /// Its port.
    pub port: u16,
}

impl Nginx {
    /// The error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

/// Options of a wrk run.
#[derive(Debug, Clone)]
pub struct WrkOptions {
    /// Threads (`-t`).
    pub threads: u32,
    /// Open connections (`-c`), kept alive across requests.
    pub connections: u32,
    /// Duration (`-d`, whole seconds, at least 1).
    pub duration: Duration,
    /// Per-request timeout (`--timeout`, whole seconds, at least 1).
    pub timeout: Duration,
}

impl Default for WrkOptions {
    fn default() -> Self {
        WrkOptions {
            threads: 1,
            connections: 10,
            duration: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
        }
    }
}

impl WrkOptions {
    fn args(&self, url: &str) -> Vec<String> {
        vec![
            "wrk".into(),
            "-t".into(),
            self.threads.max(1).to_string(),
            "-c".into(),
            self.connections.max(self.threads.max(1)).to_string(),
            "-d".into(),
            format!("{}s", self.duration.as_secs().max(1)),
            "--timeout".into(),
            // wrk's time units are s, m and h.
            format!("{}s", self.timeout.as_secs().max(1)),
            url.into(),
        ]
    }
}

/// What wrk reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WrkReport {
    /// Completed requests.
    pub requests: u64,
    /// Measured duration in seconds.
    pub seconds: f64,
    /// Requests per second.
    pub requests_per_sec: f64,
    /// Connect errors.
    pub connect_errors: u64,
    /// Read errors (e.g. connection reset).
    pub read_errors: u64,
    /// Write errors.
    pub write_errors: u64,
    /// Request timeouts.
    pub timeouts: u64,
    /// Responses with a status other than 2xx or 3xx.
    pub non_2xx_3xx: u64,
}

impl WrkReport {
    /// Every kind of failed request added up.
    pub fn errors(&self) -> u64 {
        self.connect_errors
            + self.read_errors
            + self.write_errors
            + self.timeouts
            + self.non_2xx_3xx
    }

    /// Parse wrk's text output.
    pub fn parse(text: &str) -> Result<WrkReport> {
        let bad = |why: &str| Error::Invalid {
            what: "wrk output".into(),
            why: format!("{why}:\n{text}"),
        };
        let mut r = WrkReport::default();
        let mut saw_requests = false;
        for line in text.lines().map(str::trim) {
            if let Some((n, rest)) = line.split_once(" requests in ") {
                r.requests = n.trim().parse().map_err(|_| bad("request count"))?;
                let secs = rest.split(',').next().unwrap_or("");
                r.seconds = parse_duration_s(secs).ok_or_else(|| bad("duration"))?;
                saw_requests = true;
            } else if let Some(rest) = line.strip_prefix("Socket errors:") {
                for part in rest.split(',') {
                    let mut it = part.split_whitespace();
                    let (Some(k), Some(v)) = (it.next(), it.next()) else {
                        return Err(bad("socket errors"));
                    };
                    let v: u64 = v.parse().map_err(|_| bad("socket error count"))?;
                    match k {
                        "connect" => r.connect_errors = v,
                        "read" => r.read_errors = v,
                        "write" => r.write_errors = v,
                        "timeout" => r.timeouts = v,
                        _ => {}
                    }
                }
            } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
                r.non_2xx_3xx = rest.trim().parse().map_err(|_| bad("non-2xx count"))?;
            } else if let Some(rest) = line.strip_prefix("Requests/sec:") {
                r.requests_per_sec = rest.trim().parse().map_err(|_| bad("requests/sec"))?;
            }
        }
        if saw_requests {
            Ok(r)
        } else {
            Err(bad("no `N requests in` line"))
        }
    }
}

/// `5.00s`, `1.00m`, `500.00ms` → seconds.
fn parse_duration_s(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * mult)
}

/// What an iperf3 client reported (`-J`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Iperf3Report {
    /// Sender throughput, bits per second.
    pub sent_bps: f64,
    /// Receiver throughput, bits per second.
    pub received_bps: f64,
    /// TCP retransmissions (0 for UDP).
    pub retransmits: u64,
}

impl Iperf3Report {
    /// Parse `iperf3 -J` output.
    pub fn parse(json: &str) -> Result<Iperf3Report> {
        let bad = |why: String| Error::Invalid {
            what: "iperf3 -J output".into(),
            why,
        };
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            return Err(bad(format!("iperf3 error: {e}")));
        }
        let end = v.get("end").ok_or_else(|| bad("no `end` section".into()))?;
        let f = |sect: &str, k: &str| {
            end.get(sect)
                .or_else(|| end.get("sum"))
                .and_then(|s| s.get(k))
                .and_then(|x| x.as_f64())
        };
        Ok(Iperf3Report {
            sent_bps: f("sum_sent", "bits_per_second")
                .ok_or_else(|| bad("no sender throughput".into()))?,
            received_bps: f("sum_received", "bits_per_second").unwrap_or(0.0),
            retransmits: f("sum_sent", "retransmits").unwrap_or(0.0) as u64,
        })
    }
}

/// A running tcpdump writing a pcap file; [`Capture::stop`] ends it and returns the file.
#[derive(Debug)]
pub struct Capture {
    /// The tcpdump process.
    pub proc: Proc,
    /// The pcap file it writes.
    pub path: PathBuf,
}

impl Capture {
    /// Stop the capture (SIGINT, so tcpdump flushes) and return the pcap file's path.
    pub fn stop(self) -> Result<PathBuf> {
        self.proc.signal(libc::SIGINT);
        self.proc.wait(Duration::from_secs(5))?;
        Ok(self.path)
    }
}

impl Link {
    /// Start `tcpdump -i DEV -w FILE FILTER…` (immediate mode, no name resolution, full frames)
    /// and return once it is capturing.
    pub fn capture(&self, filter: &[&str]) -> Result<Capture> {
        let ns = self.ns();
        let dir = ns.net().dir.join("captures");
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let path = dir.join(format!(
            "{}-{}-{}.pcap",
            ns.short_name(),
            self.name(),
            ns.net().new_proc_id()
        ));
        let p = path.to_string_lossy().into_owned();
        let mut args = vec![
            "tcpdump",
            "-i",
            self.name(),
            "-n",
            "-s",
            "0",
            "-U",
            "--immediate-mode",
            "-Z",
            "root",
            "-w",
            &p,
        ];
        args.extend_from_slice(filter);
        let proc = ns.cmd(args).spawn()?;
        proc.wait_log("listening on", START_TIMEOUT)?;
        Ok(Capture { proc, path })
    }
}

impl Netns {
    /// Start nginx with `cfg` and wait until it accepts connections on `127.0.0.1:port`.
    pub fn nginx(&self, cfg: &NginxConfig) -> Result<Nginx> {
        require_tool("nginx")?;
        let id = self.net().new_proc_id();
        let dir = self
            .net()
            .dir
            .join(format!("nginx-{}-{id}", self.short_name()));
        let www = dir.join("www");
        for d in [&www, &dir.join("tmp")] {
            std::fs::create_dir_all(d).map_err(io_err(format!("creating {}", d.display())))?;
        }
        std::fs::write(www.join("index.html"), &cfg.body)
            .map_err(io_err("writing nginx's index.html"))?;
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes {workers};\nuser root;\n\
             pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  default_type text/plain;\n  keepalive_requests 1000000;\n\
             client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n{extra_http}\n\
             server {{\n    listen {port} reuseport;\n    root {www};\n\
             location / {{ try_files $uri /index.html; }}\n{extra_server}\n  }}\n}}\n",
            workers = cfg.workers.max(1),
            port = cfg.port,
            www = www.display(),
            extra_http = cfg.extra_http,
            extra_server = cfg.extra_server,
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).map_err(io_err("writing nginx.conf"))?;
        let err_log = dir.join("error.log");
        let proc = self
            .cmd([
                "nginx".as_ref(),
                "-e".as_ref(),
                err_log.as_os_str(),
                "-p".as_ref(),
                dir.as_os_str(),
                "-c".as_ref(),
                conf_path.as_os_str(),
            ])
            .spawn()?;
        proc.wait_tcp(SocketAddr::from(([127, 0, 0, 1], cfg.port)), START_TIMEOUT)
            .map_err(|e| match e {
                Error::Failed { cmd, status, .. } => Error::Failed {
                    cmd,
                    status,
                    stdout: std::fs::read_to_string(&err_log).unwrap_or_default(),
                    stderr: proc.log(),
                },
                e => e,
            })?;
        Ok(Nginx {
            proc,
            dir,
            www,
            port: cfg.port,
        })
    }

    /// Start `python3 -m http.server PORT --directory DIR` (all addresses) and wait until it
    /// accepts connections.
    pub fn http_server(&self, port: u16, dir: &Path) -> Result<Proc> {
        let py = python();
        let port_s = port.to_string();
        let proc = self
            .cmd([
                py.as_ref(),
                "-m".as_ref(),
                "http.server".as_ref(),
                port_s.as_ref(),
                "--bind".as_ref(),
                "0.0.0.0".as_ref(),
                "--directory".as_ref(),
                dir.as_os_str(),
            ])
            .env("PYTHONUNBUFFERED", "1")
            .spawn()?;
        proc.wait_tcp(SocketAddr::from(([127, 0, 0, 1], port)), START_TIMEOUT)?;
        Ok(proc)
    }

    /// Start a single-member etcd (Debian's `etcd-server`) serving clients on `ip:port` and peers on
    /// `ip:port+1`, its data in `dir`, and wait until it accepts connections. Its endpoint is
    /// `http://ip:port`.
    pub fn etcd(&self, ip: &str, port: u16, dir: &Path) -> Result<Proc> {
        let client = format!("http://{ip}:{port}");
        let peer = format!("http://{ip}:{}", port + 1);
        let data = dir.join("etcd-data");
        let proc = self
            .cmd([
                "etcd".as_ref(),
                "--name".as_ref(),
                "fp-test".as_ref(),
                "--data-dir".as_ref(),
                data.as_os_str(),
                "--listen-client-urls".as_ref(),
                client.as_ref(),
                "--advertise-client-urls".as_ref(),
                client.as_ref(),
                "--listen-peer-urls".as_ref(),
                peer.as_ref(),
                "--initial-advertise-peer-urls".as_ref(),
                peer.as_ref(),
                "--initial-cluster".as_ref(),
                format!("fp-test={peer}").as_ref(),
            ])
            .spawn()?;
        let addr: SocketAddr = format!("{ip}:{port}").parse().map_err(|_| Error::Failed {
            cmd: proc.line().to_string(),
            status: format!("bad address {ip}:{port}"),
            stdout: String::new(),
            stderr: String::new(),
        })?;
        proc.wait_tcp(addr, START_TIMEOUT)?;
        Ok(proc)
    }

    /// Start a private Open vSwitch (Debian's `openvswitch-switch`) in this namespace: its own
    /// database server and switch daemon, run in the foreground with every file in `dir`, on
    /// the userspace datapath (no kernel module: bridges made with [`Ovs::add_bridge`] read and
    /// write their ports through packet sockets). It is an independent 802.1Q, STP and RSTP
    /// peer for a switch under test.
    pub fn ovs(&self, dir: &Path) -> Result<Ovs> {
        for tool in ["ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"] {
            require_tool(tool)?;
        }
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let db = dir.join("conf.db");
        let sock = dir.join("db.sock");
        let schema = ["/usr/share/openvswitch/vswitch.ovsschema"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .ok_or_else(|| Error::MissingTool {
                tool: "vswitch.ovsschema".into(),
                package: "openvswitch-common".into(),
            })?;
        self.cmd([
            "ovsdb-tool".as_ref(),
            "create".as_ref(),
            db.as_os_str(),
            schema.as_ref(),
        ])
        .run()?
        .check()?;
        let path = |name: &str| dir.join(name).into_os_string();
        let remote = format!("--remote=punix:{}", sock.display());
        let server = self
            .cmd([
                "ovsdb-server".to_string(),
                db.display().to_string(),
                remote,
                format!("--unixctl={}", dir.join("db.ctl").display()),
                format!("--log-file={}", dir.join("db.log").display()),
                "--no-chdir".to_string(),
            ])
            .env("OVS_RUNDIR", path(""))
            .env("OVS_LOGDIR", path(""))
            .spawn()?;
        let t = std::time::Instant::now();
        while !sock.exists() {
            if t.elapsed() > START_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("ovsdb-server's socket {}\n{}", sock.display(), server.log()),
                    after: START_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ovs = Ovs {
            ns: self.clone(),
            dir: dir.to_path_buf(),
            db: format!("--db=unix:{}", sock.display()),
            server,
            vswitchd: None,
        };
        ovs.vsctl(&["--no-wait", "init"])?;
        let vswitchd = self
            .cmd([
                "ovs-vswitchd".to_string(),
                format!("unix:{}", sock.display()),
                format!("--unixctl={}", dir.join("vs.ctl").display()),
                format!("--log-file={}", dir.join("vs.log").display()),
                "--no-chdir".to_string(),
            ])
            .env("OVS_RUNDIR", path(""))
            .env("OVS_LOGDIR", path(""))
            .spawn()?;
        Ok(Ovs {
            vswitchd: Some(vswitchd),
            ..ovs
        })
    }

    /// Start an iperf3 server on `port` and wait until it accepts connections.
    pub fn iperf3_server(&self, port: u16) -> Result<Proc> {
        let p = port.to_string();
        let proc = self.cmd(["iperf3", "-s", "-p", &p]).spawn()?;
        proc.wait_tcp(SocketAddr::from(([127, 0, 0, 1], port)), START_TIMEOUT)?;
        Ok(proc)
    }

    /// Run an iperf3 TCP client against `server:port` for `secs` seconds (extra arguments, e.g.
    /// `["-u", "-b", "100M"]` or `["-P", "4"]`, are appended).
    pub fn iperf3_client(
        &self,
        server: &str,
        port: u16,
        secs: u32,
        extra: &[&str],
    ) -> Result<Iperf3Report> {
        let (p, t) = (port.to_string(), secs.max(1).to_string());
        let mut args = vec!["iperf3", "-c", server, "-p", &p, "-t", &t, "-J"];
        args.extend_from_slice(extra);
        let out = self
            .cmd(args)
            .timeout(Duration::from_secs(u64::from(secs) + 20))
            .output()?;
        // iperf3 -J reports its errors in the JSON, with a failure status.
        Iperf3Report::parse(&out.stdout).map_err(|e| match out.success() {
            true => e,
            false => Error::Failed {
                cmd: out.cmd.clone(),
                status: format!("{}", out.status),
                stdout: out.stdout.clone(),
                stderr: out.stderr.clone(),
            },
        })
    }

    /// Run wrk against `url` and parse its report. Fails if wrk fails; failed requests are in the
    /// report ([`WrkReport::errors`]), for the test to judge.
    pub fn wrk(&self, url: &str, opts: &WrkOptions) -> Result<WrkReport> {
        let out = self
            .cmd(opts.args(url))
            .timeout(opts.duration + opts.timeout + Duration::from_secs(20))
            .run()?;
        WrkReport::parse(&out.stdout)
    }

    /// Start wrk in the background (to change something under load); finish with
    /// [`Netns::wrk_finish`].
    pub fn wrk_spawn(&self, url: &str, opts: &WrkOptions) -> Result<Proc> {
        self.cmd(opts.args(url)).spawn()
    }

    /// Wait for a wrk started with [`Netns::wrk_spawn`] and parse its report.
    pub fn wrk_finish(&self, proc: &Proc, opts: &WrkOptions) -> Result<WrkReport> {
        let st = proc.wait(opts.duration + opts.timeout + Duration::from_secs(20))?;
        if !st.success() {
            return Err(Error::Failed {
                cmd: proc.line().into(),
                status: format!("{st}"),
                stdout: proc.log(),
                stderr: String::new(),
            });
        }
        WrkReport::parse(&proc.log())
    }

    /// Run a scapy script (`from scapy.all import *` is prepended) with Debian's Python.
    pub fn scapy(&self, script: &str) -> Result<Output> {
        let code = format!("from scapy.all import *\n{script}\n");
        let out = self.cmd([python(), "-c", &code]).output()?;
        if !out.success() && out.stderr.contains("No module named 'scapy'") {
            return Err(Error::MissingTool {
                tool: "scapy".into(),
                package: "python3-scapy".into(),
            });
        }
        out.check()
    }
}

/// Read one HTTP/1.1 response from a client connection (the tests' own clients, for keep-alive
/// control wrk and curl do not give): status, body (Content-Length framing, as nginx and the admin server send;
/// without it, the body runs to the end of the connection).
pub fn read_http_response(s: &mut impl std::io::Read) -> std::io::Result<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::other(format!(
                "connection closed before the response headers ({} bytes)",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    let mut body = buf[head_end..].to_vec();
    match len {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk)?;
                if n == 0 {
                    return Err(std::io::Error::other("connection closed inside the body"));
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(len);
        }
        None => {
            s.read_to_end(&mut body)?;
        }
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A private Open vSwitch in a namespace ([`Netns::ovs`]); its daemons stop with the test
/// network.
pub struct Ovs {
    ns: Netns,
    dir: PathBuf,
    db: String,
    server: Proc,
    vswitchd: Option<Proc>,
}

impl Ovs {
    /// Run `ovs-vsctl ARGS` against this instance (waiting, by default, until the switch
    /// daemon applied the change; at most 10 s).
    pub fn vsctl(&self, args: &[&str]) -> Result<Output> {
        let mut a = vec!["ovs-vsctl", &self.db, "--timeout=10"];
        a.extend_from_slice(args);
        self.ns.cmd(a).env("OVS_RUNDIR", &self.dir).run()?.check()
    }

    /// Add bridge `name` on the userspace datapath.
    pub fn add_bridge(&self, name: &str) -> Result<()> {
        self.vsctl(&[
            "add-br",
            name,
            "--",
            "set",
            "bridge",
            name,
            "datapath_type=netdev",
        ])
        .map(|_| ())
    }

    /// Run `ovs-appctl ARGS` against the switch daemon (e.g. `fdb/show br0`, `rstp/show`).
    pub fn appctl(&self, args: &[&str]) -> Result<Output> {
        let target = self.dir.join("vs.ctl");
        let target = target.to_string_lossy();
        let mut a = vec!["ovs-appctl", "-t", &target];
        a.extend_from_slice(args);
        self.ns.cmd(a).run()?.check()
    }

    /// The daemons' logs (switch, then database).
    pub fn logs(&self) -> String {
        format!(
            "--- ovs-vswitchd ---\n{}\n--- ovsdb-server ---\n{}",
            self.vswitchd.as_ref().map(Proc::log).unwrap_or_default(),
            self.server.log()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wrk() {
        let text = "Running 2s test @ http://10.0.0.1/\n  1 threads and 10 connections\n\
          Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   211.12us  100.00us   3.00ms   90.00%\n\
          Req/Sec    45.00k     1.00k   47.00k    70.00%\n  89512 requests in 2.00s, 12.81MB read\n\
          Socket errors: connect 1, read 2, write 3, timeout 4\n  Non-2xx or 3xx responses: 5\n\
        Requests/sec:  44756.10\nTransfer/sec:      6.40MB\n";
        let r = WrkReport::parse(text).unwrap();
        assert_eq!(r.requests, 89512);
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.requests_per_sec, 44756.10);
        assert_eq!(
            (r.connect_errors, r.read_errors, r.write_errors, r.timeouts),
            (1, 2, 3, 4)
        );
        assert_eq!(r.non_2xx_3xx, 5);
        assert_eq!(r.errors(), 15);
        assert!(WrkReport::parse("unable to connect to 10.0.0.1:80").is_err());
        assert_eq!(parse_duration_s("1.00m"), Some(60.0));
        assert_eq!(parse_duration_s("500.00ms"), Some(0.5));
    }

    #[test]
    fn parses_iperf3() {
        let j = r#"{"end":{"sum_sent":{"bits_per_second":3.4e9,"retransmits":7},
                   "sum_received":{"bits_per_second":3.3e9}}}"#;
        let r = Iperf3Report::parse(j).unwrap();
        assert_eq!(r.sent_bps, 3.4e9);
        assert_eq!(r.received_bps, 3.3e9);
        assert_eq!(r.retransmits, 7);
        assert!(Iperf3Report::parse(r#"{"error":"unable to connect"}"#).is_err());
    }
}
