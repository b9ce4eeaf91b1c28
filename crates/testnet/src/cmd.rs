//! Running programs: in the host namespace (only `ip` itself), and inside a test namespace through
//! `ip netns exec`, in the foreground with a time limit ([`Cmd::run`], [`Cmd::output`]) or in the
//! background ([`Cmd::spawn`] → [`Proc`]).
//!
//! Every child is started in its own process group, so that killing it also kills what it started
//! (a shell's children, nginx's workers). Foreground output is read by two threads while the child
//! runs (a full pipe cannot stall it); background output goes to a log file in the network's
//! `logs/` directory, readable at any time with [`Proc::log`].

use crate::netns::Netns;
use crate::{io_err, sys, Error, Inner, ProcEntry, Result};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default time limit of a foreground command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line, for messages.
    pub cmd: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
    /// Wall-clock time it ran.
    pub elapsed: Duration,
}

impl Output {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `Ok(self)` on success, else [`Error::Failed`] with the output.
    pub fn check(self) -> Result<Output> {
        if self.success() {
            Ok(self)
        } else {
            Err(Error::Failed {
                cmd: self.cmd,
                status: describe(self.status),
                stdout: self.stdout,
                stderr: self.stderr,
            })
        }
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s}"),
    }
}

/// The Debian package that provides `tool`, for error messages.
pub(crate) fn package_of(tool: &str) -> &str {
    match tool {
        "ip" | "bridge" | "ss" | "tc" => "iproute2",
        "ping" => "iputils-ping",
        "nginx" => "nginx-light",
        "python3" | "/usr/bin/python3" => "python3",
        "sysctl" => "procps",
        "etcd" => "etcd-server",
        "ovs-vswitchd" | "ovsdb-server" | "ovs-vsctl" | "ovsdb-tool" => "openvswitch-switch",
        t => t,
    }
}

/// The full path of `prog` if it is installed (searched in `PATH`, plus the sbin directories).
pub(crate) fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

pub(crate) fn require_tool(tool: &str) -> Result<()> {
    if which(tool).is_some() {
        Ok(())
    } else {
        Err(Error::MissingTool {
            tool: tool.to_string(),
            package: package_of(tool).to_string(),
        })
    }
}

fn render(args: &[OsString]) -> String {
    args.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.is_empty() || s.contains([' ', '"', '\'', '\n', '$', '*']) {
                format!("'{}'", s.replace('\'', r"'\''"))
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `cmd` to completion (or `timeout`), capturing its output. The child gets its own process
/// group; on timeout the whole group is killed.
fn run_captured(
    mut cmd: Command,
    line: String,
    timeout: Duration,
    stdin: Option<Vec<u8>>,
) -> Result<Output> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(io_err(format!("starting `{line}`")))?;
    let bufs = [
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    ];
    let mut readers = Vec::new();
    let pipes: [Option<Box<dyn Read + Send>>; 2] = [
        child.stdout.take().map(|p| Box::new(p) as _),
        child.stderr.take().map(|p| Box::new(p) as _),
    ];
    for (pipe, buf) in pipes.into_iter().zip(bufs.iter()) {
        let Some(mut pipe) = pipe else { continue };
        let buf = buf.clone();
        readers.push(std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(&chunk[..n]);
            }
        }));
    }
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let pid = child.id() as i32;
    let mut nap = Duration::from_micros(500);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => return Err(io_err(format!("waiting for `{line}`"))(e)),
        }
        if start.elapsed() >= timeout {
            sys::kill(-pid, libc::SIGKILL);
            sys::kill(pid, libc::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    };
    // A daemon the command left behind may hold the pipes open: do not wait for it forever.
    let grace = Instant::now() + Duration::from_millis(500);
    for r in readers {
        while !r.is_finished() && Instant::now() < grace {
            std::thread::sleep(Duration::from_millis(2));
        }
        if r.is_finished() {
            let _ = r.join();
        }
    }
    let text = |i: usize| {
        String::from_utf8_lossy(&bufs[i].lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    };
    let (stdout, stderr) = (text(0), text(1));
    match status {
        Some(status) => Ok(Output {
            cmd: line,
            status,
            stdout,
            stderr,
            elapsed: start.elapsed(),
        }),
        None => Err(Error::Timeout {
            what: format!("`{line}` (killed)\n--- stderr ---\n{stderr}--- stdout ---\n{stdout}"),
            after: timeout,
        }),
    }
}

/// `ip ARGS` in the host namespace (only for `ip netns …` and `ip -n NS …`).
pub(crate) fn host_ip(args: &[&str]) -> Result<Output> {
    let mut c = Command::new("ip");
    c.args(args);
    let line = format!("ip {}", args.join(" "));
    run_captured(c, line, Duration::from_secs(30), None)?.check()
}

/// Names in `/run/netns` (the namespaces `ip netns` knows).
pub(crate) fn ip_netns_list() -> std::io::Result<Vec<String>> {
    match std::fs::read_dir("/run/netns") {
        Ok(rd) => Ok(rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Pids of the processes in namespace `ns`.
pub(crate) fn ip_netns_pids(ns: &str) -> Result<Vec<u32>> {
    let out = host_ip(&["netns", "pids", ns])?;
    Ok(out
        .stdout
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// Delete namespace `ns`; "does not exist" is success.
pub(crate) fn ip_netns_del(ns: &str) -> Result<()> {
    if !Path::new("/run/netns").join(ns).exists() {
        return Ok(());
    }
    host_ip(&["netns", "del", ns]).map(|_| ())
}

/// The last `n` lines of a file (for failure reports).
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let s = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(cannot read: {e})"));
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Kill a background process's group and reap it.
pub(crate) fn kill_and_reap(e: &mut ProcEntry, errors: &mut Vec<String>) {
    if e.exited.is_some() {
        return;
    }
    if let Ok(Some(s)) = e.child.try_wait() {
        e.exited = Some(s);
        // The leader is gone, but what it started may still run in its group.
        sys::kill(-(e.child.id() as i32), libc::SIGKILL);
        return;
    }
    let pid = e.child.id() as i32;
    sys::kill(-pid, libc::SIGKILL);
    sys::kill(pid, libc::SIGKILL);
    match e.child.wait() {
        Ok(s) => e.exited = Some(s),
        Err(err) => errors.push(format!("reaping `{}`: {err}", e.label)),
    }
}

/// A command to run inside a namespace; made by [`Netns::cmd`]. Runs the program found in `PATH`
/// (checked first, so a missing program is a clear [`Error::MissingTool`]).
#[must_use = "a Cmd does nothing until .run(), .output() or .spawn()"]
pub struct Cmd {
    ns: Netns,
    args: Vec<OsString>,
    timeout: Duration,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
}

impl Cmd {
    pub(crate) fn new<I, S>(ns: Netns, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Cmd {
            ns,
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            cwd: None,
            stdin: None,
        }
    }

    /// Time limit for [`Cmd::run`] / [`Cmd::output`] (default 60 s); the command is killed then.
    pub fn timeout(mut self, t: Duration) -> Cmd {
        self.timeout = t;
        self
    }

    /// Set an environment variable.
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Cmd {
        self.env.push((k.as_ref().into(), v.as_ref().into()));
        self
    }

    /// Working directory.
    pub fn current_dir(mut self, d: impl AsRef<Path>) -> Cmd {
        self.cwd = Some(d.as_ref().into());
        self
    }

    /// Bytes written to the command's standard input (foreground only).
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Cmd {
        self.stdin = Some(data.into());
        self
    }

    /// The command line as it would be typed (inside the namespace).
    pub fn line(&self) -> String {
        format!("ip netns exec {} {}", self.ns.name(), render(&self.args))
    }

    fn command(&self) -> Result<Command> {
        let prog = self.args.first().ok_or_else(|| Error::Invalid {
            what: "command".into(),
            why: "empty argument list".into(),
        })?;
        require_tool(&prog.to_string_lossy())?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns.name()]).args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(d) = &self.cwd {
            c.current_dir(d);
        }
        Ok(c)
    }

    /// Run to completion; [`Error::Failed`] unless it exits with status 0.
    pub fn run(self) -> Result<Output> {
        self.output()?.check()
    }

    /// Run to completion and return the output whatever the exit status (errors only if it could
    /// not start or hit the time limit).
    pub fn output(self) -> Result<Output> {
        let c = self.command()?;
        run_captured(c, self.line(), self.timeout, self.stdin)
    }

    /// Start in the background. Standard output and error go to a log file; the process (and its
    /// process group, and anything else left in the namespace) is killed when the [`TestNet`]
    /// is dropped, or earlier with [`Proc::kill`] / [`Proc::stop`]. Dropping the [`Proc`] handle
    /// does not stop it.
    ///
    /// [`TestNet`]: crate::TestNet
    pub fn spawn(self) -> Result<Proc> {
        let mut c = self.command()?;
        let net = self.ns.net().clone();
        let id = net.new_proc_id();
        let prog = Path::new(&self.args[0])
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let log = net
            .dir
            .join("logs")
            .join(format!("{}-{id}-{prog}.log", self.ns.short_name()));
        let f =
            std::fs::File::create(&log).map_err(io_err(format!("creating {}", log.display())))?;
        let f2 = f.try_clone().map_err(io_err("duplicating a log file"))?;
        c.stdout(f).stderr(f2).stdin(Stdio::null()).process_group(0);
        let line = self.line();
        let mut st = net.lock();
        if st.cleaned {
            return Err(Error::Invalid {
                what: "test network".into(),
                why: "already cleaned up".into(),
            });
        }
        let child = c.spawn().map_err(io_err(format!("starting `{line}`")))?;
        let pid = child.id();
        st.procs.insert(
            id,
            ProcEntry {
                child,
                label: line.clone(),
                log: log.clone(),
                exited: None,
            },
        );
        drop(st);
        Ok(Proc {
            ns: self.ns,
            id,
            pid,
            line,
            log,
        })
    }
}

/// A background process started by [`Cmd::spawn`]. It belongs to the [`TestNet`], which kills
/// it on drop; this handle controls and inspects it.
///
/// [`TestNet`]: crate::TestNet
#[derive(Clone)]
pub struct Proc {
    ns: Netns,
    id: u64,
    pid: u32,
    line: String,
    log: PathBuf,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("pid", &self.pid)
            .field("cmd", &self.line)
            .finish()
    }
}

impl Proc {
    fn net(&self) -> &Arc<Inner> {
        self.ns.net()
    }

    /// Process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The namespace it runs in.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// The command line.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// Path of its log (standard output and error).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Everything it has printed so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// `None` while running, else its exit status.
    pub fn try_status(&self) -> Option<ExitStatus> {
        let mut st = self.net().lock();
        let e = st.procs.get_mut(&self.id)?;
        if e.exited.is_none() {
            if let Ok(Some(s)) = e.child.try_wait() {
                e.exited = Some(s);
            }
        }
        e.exited
    }

    /// Still running?
    pub fn is_running(&self) -> bool {
        self.try_status().is_none() && !self.net().lock().cleaned
    }

    /// Send a signal to its process group.
    pub fn signal(&self, sig: i32) {
        if self.try_status().is_none() {
            sys::kill(-(self.pid as i32), sig);
        }
    }

    /// Wait up to `timeout` for it to exit on its own.
    pub fn wait(&self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Ok(s);
            }
            if self.net().lock().cleaned {
                return Err(Error::Invalid {
                    what: "process".into(),
                    why: "its test network was cleaned up".into(),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("`{}` to exit", self.line),
                    after: timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kill it (SIGKILL to its process group) and reap it.
    pub fn kill(&self) {
        let mut errors = Vec::new();
        let mut st = self.net().lock();
        if let Some(e) = st.procs.get_mut(&self.id) {
            kill_and_reap(e, &mut errors);
        }
    }

    /// Ask it to stop (SIGTERM to its process group), wait up to `grace`, then kill it.
    pub fn stop(&self, grace: Duration) -> Option<ExitStatus> {
        self.signal(libc::SIGTERM);
        match self.wait(grace) {
            Ok(s) => Some(s),
            Err(_) => {
                self.kill();
                self.try_status()
            }
        }
    }

    /// Wait until its log contains `needle` (e.g. a "listening" line); fails early, with the log,
    /// if the process exits first.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return Ok(());
            }
            self.fail_if_exited(&format!("printing `{needle}`"))?;
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "`{}` to print `{needle}`; its log:\n{}",
                        self.line,
                        tail(&self.log, 20)
                    ),
                    after: timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until a TCP connection to `addr`, made from inside the process's namespace, succeeds
    /// (the server is listening); fails early, with the log, if the process exits first.
    pub fn wait_tcp(&self, addr: SocketAddr, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ns.wait_tcp(addr, left.min(Duration::from_millis(200))) {
                Ok(()) => return Ok(()),
                Err(Error::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
            self.fail_if_exited(&format!("listening on {addr}"))?;
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "`{}` to listen on {addr}; its log:\n{}",
                        self.line,
                        tail(&self.log, 20)
                    ),
                    after: timeout,
                });
            }
        }
    }

    fn fail_if_exited(&self, doing: &str) -> Result<()> {
        match self.try_status() {
            Some(s) => Err(Error::Failed {
                cmd: self.line.clone(),
                status: format!("{} before {doing}", describe(s)),
                stdout: tail(&self.log, 30),
                stderr: String::new(),
            }),
            None => Ok(()),
        }
    }
}
