//! Announcing VIPs to the router over BGP, through BIRD 2 (Maglev §2.1, §2.2, §4.1.1).
//!
//! "Maglev associates each VIP with a set of service endpoints and announces it to the router over
//! BGP"; "all Maglev machines announce the VIP with the same cost", so the router spreads VIP
//! traffic over them by ECMP; and "depending on the results [of the forwarder's health], the
//! controller decides whether to announce or withdraw all the VIPs via BGP". flowplane does not
//! speak BGP itself: an [`Announcer`] runs an existing BGP speaker, **BIRD 2**, as a child process
//! with a configuration it generates, and changes what BIRD announces through BIRD's control
//! socket.
//!
//! # What BIRD is told
//!
//! [`main_config`] and [`static_config`] produce two files in the state directory:
//!
//! * `bird.conf`: the router id, a `device` protocol (BIRD needs the interface list to accept a
//!   directly connected neighbour), and one BGP protocol named [`BGP_PROTOCOL`] to `spec.peer`
//!   with `spec.hold_time_s` (keepalives every third of it). It imports nothing and exports only
//!   the routes of the static protocol, with the next hop rewritten to `spec.next_hop` and ORIGIN
//!   set to IGP (so announcements of several balancers, or of other speakers announcing the same
//!   way, have equal attributes and the router merges them into one ECMP route; a speaker that
//!   announces ORIGIN incomplete, as some do by default, is not merged with them). Graceful restart is off: a balancer whose speaker dies must not have its routes
//!   kept by the router while it "restarts".
//! * `vips.conf` (included by `bird.conf`): a static protocol [`STATIC_PROTOCOL`] with one
//!   `blackhole` route per announced VIP, a /32 or /128. The route lives only in this BIRD's own
//!   table (there is no kernel protocol), so it never touches the balancer's routing table.
//!
//! [`Announcer::set`] rewrites `vips.conf` and sends `configure`; BIRD re-reads the files, keeps
//! the BGP session (its configuration did not change), and sends an UPDATE with the new routes or
//! withdrawals at once.
//!
//! # Failure behaviour
//!
//! * **The balancer dies** (crash, `SIGKILL`, OOM kill): BIRD is spawned with
//!   `PR_SET_PDEATHSIG(SIGKILL)`, so the kernel kills it with its parent. Its TCP session is closed
//!   by the kernel, the router drops the session and withdraws the balancer's routes (no hold-timer
//!   wait). A crashed balancer never keeps announcing. The parent is a keeper thread owned by the
//!   `Announcer` (the death signal follows the spawning *thread*): it lives exactly as long as the
//!   `Announcer`, whatever thread created it, and reaps BIRD.
//! * **The machine or its link dies silently**: the router withdraws after its hold timer
//!   (`spec.hold_time_s`, at least 3 s).
//! * **BIRD dies on its own**: the session closes as above; every later call returns
//!   [`AnnounceError::Exited`] with the end of BIRD's log, so the controller can report it. Nothing
//!   restarts BIRD behind the controller's back.
//! * **Stop** ([`Announcer::stop`]): `down` over the control socket (BIRD sends a BGP Cease to the
//!   router, which withdraws at once), then `SIGKILL` if BIRD has not exited within
//!   [`STOP_TIMEOUT`]; the state files are removed. Dropping an `Announcer` kills BIRD at once.
//!
//! # Trade-offs
//!
//! * BIRD rather than GoBGP or ExaBGP: it is a Debian package (`bird2`), needs no runtime beyond
//!   itself, is the de-facto route server in data centres, and its configuration and control
//!   protocol are stable text. Reconfiguration re-reads a small file: about a millisecond.
//! * The control socket is spoken directly (the protocol `birdc` speaks: a greeting, then
//!   numbered reply lines, `0xxx` success, `8xxx`/`9xxx` errors) rather than by running `birdc`
//!   per call: no process per call, exact reply codes, and every read and write has a timeout. The
//!   socket is the same one `birdc -s <state dir>/bird.ctl` talks to, for operators.
//! * BIRD runs in its own process group, so a terminal's Ctrl-C or a signal to the balancer's
//!   group reaches only the balancer, which then drains (withdraw, wait, stop) in order.
//! * Announced next hops are of one family, that of `spec.next_hop`: a VIP of the other family is
//!   rejected by [`Announcer::set`] ([`AnnounceError::Family`]) rather than silently not announced.
//! * The BGP session is a direct (single-hop) one: the router must be on a connected network.
//!
//! # Example
//!
//! ```
//! use fp_control::announce::{main_config, static_config, BgpSpec};
//! use std::path::Path;
//!
//! let mut spec = BgpSpec::new(65001, "10.0.2.1".parse().unwrap(), 65000, "10.0.2.11".parse().unwrap());
//! spec.hold_time_s = 3;
//! let conf = main_config(&spec, Path::new("/run/flowplane/vips.conf"));
//! assert!(conf.contains("neighbor 10.0.2.1 as 65000;"));
//! assert!(conf.contains("hold time 3;"));
//! let vips = static_config(&["10.100.0.1".parse().unwrap()]);
//! assert!(vips.contains("route 10.100.0.1/32 blackhole;"));
//! // Starting BIRD needs the `bird` program and a reachable router:
//! // let mut a = fp_control::announce::Announcer::start(&spec)?;
//! // a.set(&["10.100.0.1".parse()?])?;
//! ```

use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How VIPs are announced (an application's `[bgp]` section, Maglev §2.1, §3.3): a BGP speaker on
/// the same host is told which VIPs this machine serves; the router spreads traffic over all
/// machines that announce a VIP (ECMP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpSpec {
    /// The speaker: `"bird"` (BIRD 2, started with a generated configuration and driven over its
    /// control socket).
    pub speaker: String,
    /// This machine's AS number.
    pub local_as: u32,
    /// The router's address.
    pub peer: IpAddr,
    /// The router's AS number.
    pub peer_as: u32,
    /// BGP router id.
    pub router_id: Ipv4Addr,
    /// Next hop announced for the VIPs.
    pub next_hop: IpAddr,
    /// BGP hold time in seconds (3..=65535; keepalives every third of it).
    pub hold_time_s: u16,
    /// On shutdown: time between withdrawing the VIPs and stopping the data path, so the router
    /// moves traffic away first.
    pub drain_ms: u64,
    /// Where the speaker's configuration and control socket live (default: a directory under
    /// the system temp dir named after the process).
    pub state_dir: Option<String>,
}

impl BgpSpec {
    /// A session of AS `local_as` to router `peer` (AS `peer_as`), announcing `address` (this
    /// machine's) as router id and next hop, with BIRD, a 9 s hold time and a 2 s drain.
    pub fn new(local_as: u32, peer: IpAddr, peer_as: u32, address: Ipv4Addr) -> BgpSpec {
        BgpSpec {
            speaker: "bird".into(),
            local_as,
            peer,
            peer_as,
            router_id: address,
            next_hop: IpAddr::V4(address),
            hold_time_s: 9,
            drain_ms: 2000,
            state_dir: None,
        }
    }
}

/// Name of the BGP protocol in the generated configuration (`birdc show protocols all uplink`).
pub const BGP_PROTOCOL: &str = "uplink";
/// Name of the static protocol that holds the announced VIPs.
pub const STATIC_PROTOCOL: &str = "vips";
/// How long [`Announcer::start`] waits for BIRD's control socket to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Announcer::stop`] waits for BIRD to exit after `down` before killing it.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// Time limit of one control-socket read or write.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one control-socket reply.
const MAX_REPLY: u64 = 1 << 20;
/// How often the keeper thread looks at BIRD.
const KEEPER_POLL: Duration = Duration::from_millis(20);
/// Longest Unix socket path (`sun_path` is 108 bytes with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Lines of BIRD's log quoted in errors.
const LOG_TAIL: usize = 20;

const CONFIG_FILE: &str = "bird.conf";
const VIPS_FILE: &str = "vips.conf";
const SOCKET_FILE: &str = "bird.ctl";
const LOG_FILE: &str = "bird.log";
const OUR_FILES: [&str; 4] = [CONFIG_FILE, VIPS_FILE, SOCKET_FILE, LOG_FILE];

/// Why announcing failed. Messages name the file, command or address involved.
#[derive(Debug, thiserror::Error)]
pub enum AnnounceError {
    /// `bgp.speaker` names a speaker this module does not drive.
    #[error("bgp.speaker {0:?} is not supported by the announcer (only \"bird\")")]
    UnsupportedSpeaker(String),
    /// No `bird` program.
    #[error("the BGP speaker `bird` was not found (searched PATH and {searched}); install the Debian package bird2")]
    NotInstalled {
        /// Directories searched besides `PATH`.
        searched: String,
    },
    /// `bird --version` did not report BIRD 2.
    #[error("{program} --version said {said:?}; BIRD 2 is required (Debian package bird2)")]
    Version {
        /// The program run.
        program: String,
        /// What it printed.
        said: String,
    },
    /// A state-directory path BIRD cannot use.
    #[error("bgp.state_dir {path:?}: {why}")]
    BadPath {
        /// The path.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A file-system or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// Another BIRD answers on the state directory's control socket.
    #[error("another BIRD answers on {0} (is another balancer using the same bgp.state_dir?)")]
    SocketInUse(PathBuf),
    /// BIRD rejected the generated configuration (a bug or an unusual value).
    #[error("BIRD rejected the generated configuration {path}: {message}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// BIRD's message.
        message: String,
    },
    /// BIRD did not open its control socket in time.
    #[error("BIRD did not answer on {socket} within {after:?}; its log:\n{log}")]
    Timeout {
        /// The control socket.
        socket: PathBuf,
        /// How long we waited.
        after: Duration,
        /// The end of BIRD's log.
        log: String,
    },
    /// BIRD is not running any more.
    #[error("BIRD exited ({status}); its log:\n{log}")]
    Exited {
        /// How it ended.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// Talking to BIRD's control socket failed.
    #[error("BIRD control socket {socket}, command `{command}`: {source}")]
    Control {
        /// The socket.
        socket: PathBuf,
        /// The command being sent.
        command: String,
        /// The error.
        source: io::Error,
    },
    /// BIRD answered a command with an error code.
    #[error("BIRD answered `{command}` with error {code}: {message}")]
    Bird {
        /// The command.
        command: String,
        /// BIRD's reply code (8xxx run-time error, 9xxx parse error).
        code: u16,
        /// BIRD's message.
        message: String,
    },
    /// A VIP whose family differs from the next hop's.
    #[error("VIP {vip} cannot be announced with next hop {next_hop} (bgp.next_hop): the families differ; announce it from a balancer whose next hop is of its family")]
    Family {
        /// The VIP.
        vip: IpAddr,
        /// The configured next hop.
        next_hop: IpAddr,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> AnnounceError {
    let what = what.into();
    move |source| AnnounceError::Io { what, source }
}

// ---------------------------------------------------------------------------------------------
// Configuration generation (pure).

/// The prefix that announces `vip`: a /32 or a /128.
pub fn vip_prefix(vip: IpAddr) -> String {
    match vip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() {
        "ipv4"
    } else {
        "ipv6"
    }
}

/// BIRD's main configuration for `spec`, including the static part from `vips_file`.
///
/// Timers besides the hold time: keepalive every `hold_time_s / 3` s (BGP's recommendation, at
/// least 1 s); the first connection attempt 1 s after start (BIRD's default is 5 s); a failed
/// attempt is retried after 5 s (default 120 s, too long for a balancer that should rejoin as soon
/// as its router is back); after a session error BIRD waits 1 s, doubling up to 30 s on repeated
/// errors (default 60-300 s).
pub fn main_config(spec: &BgpSpec, vips_file: &Path) -> String {
    let hold = spec.hold_time_s.max(3);
    let keepalive = (hold / 3).max(1);
    let fam = family(spec.next_hop);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by flowplane (fp-control announce); rewritten at every start, do not edit."
    );
    let _ = writeln!(s, "router id {};", spec.router_id);
    let _ = writeln!(s, "log stderr all;");
    let _ = writeln!(s, "timeformat protocol iso long;");
    let _ = writeln!(s);
    let _ = writeln!(s, "protocol device {{ scan time 10; }}");
    let _ = writeln!(s);
    let _ = writeln!(s, "include \"{}\";", vips_file.display());
    let _ = writeln!(s);
    let _ = writeln!(s, "protocol bgp {BGP_PROTOCOL} {{");
    let _ = writeln!(s, "  description \"flowplane VIP announcements\";");
    let _ = writeln!(s, "  local as {};", spec.local_as);
    let _ = writeln!(s, "  neighbor {} as {};", spec.peer, spec.peer_as);
    let _ = writeln!(s, "  hold time {hold};");
    let _ = writeln!(s, "  keepalive time {keepalive};");
    let _ = writeln!(s, "  connect delay time 1;");
    let _ = writeln!(s, "  connect retry time 5;");
    let _ = writeln!(s, "  error wait time 1, 30;");
    let _ = writeln!(s, "  graceful restart off;");
    let _ = writeln!(s, "  debug {{ states, events }};");
    let _ = writeln!(s, "  {fam} {{");
    let _ = writeln!(s, "    import none;");
    let _ = writeln!(
        s,
        "    export filter {{ if proto = \"{STATIC_PROTOCOL}\" then {{ bgp_origin = ORIGIN_IGP; accept; }} reject; }};"
    );
    let _ = writeln!(s, "    next hop address {};", spec.next_hop);
    let _ = writeln!(s, "  }};");
    let _ = writeln!(s, "}}");
    s
}

/// The static protocol announcing exactly `vips` (all of one family; an empty list announces
/// nothing). The channel's family is that of the first VIP, IPv4 when there is none: BIRD accepts
/// an empty static protocol of either family, and [`Announcer::set`] checks the families first.
pub fn static_config(vips: &[IpAddr]) -> String {
    let fam = vips.first().map_or("ipv4", |a| family(*a));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Generated by flowplane: the VIPs this balancer announces ({}).",
        vips.len()
    );
    let _ = writeln!(s, "protocol static {STATIC_PROTOCOL} {{");
    let _ = writeln!(s, "  {fam};");
    for v in vips {
        let _ = writeln!(s, "  route {} blackhole;", vip_prefix(*v));
    }
    let _ = writeln!(s, "}}");
    s
}

/// The static part for `vips` announced with `next_hop`: the channel must have the next hop's
/// family, also when the list is empty (BIRD ties a channel to one table of one family).
fn static_config_for(vips: &[IpAddr], next_hop: IpAddr) -> String {
    if vips.is_empty() && next_hop.is_ipv6() {
        return static_config(&[]).replace("  ipv4;", "  ipv6;");
    }
    static_config(vips)
}

/// Sorted, deduplicated `vips`, all of `next_hop`'s family.
fn normalise(vips: &[IpAddr], next_hop: IpAddr) -> Result<Vec<IpAddr>, AnnounceError> {
    let mut v = vips.to_vec();
    v.sort();
    v.dedup();
    if let Some(bad) = v.iter().find(|a| a.is_ipv4() != next_hop.is_ipv4()) {
        return Err(AnnounceError::Family {
            vip: *bad,
            next_hop,
        });
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The control socket.

/// One line of a reply: its code and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyLine {
    /// BIRD's reply code (0xxx done, 1xxx data, 2xxx headings, 8xxx/9xxx errors).
    pub code: u16,
    /// The text after the code.
    pub text: String,
}

/// Parse one line of BIRD's control protocol: `DDDD-text` (more follows), `DDDD text` (the last
/// line), ` text` (continues the previous code), `+text` (an asynchronous message). Returns the
/// code (`None` for a continuation), whether the reply is complete, and the text.
fn parse_reply_line(line: &str) -> Option<(Option<u16>, bool, &str)> {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some(rest) = line.strip_prefix(' ') {
        return Some((None, false, rest));
    }
    let b = line.as_bytes();
    if b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && (b[4] == b'-' || b[4] == b' ') {
        let code: u16 = line[..4].parse().ok()?;
        return Some((Some(code), b[4] == b' ', &line[5..]));
    }
    if b.len() == 4 && b.iter().all(u8::is_ascii_digit) {
        return Some((Some(line.parse().ok()?), true, ""));
    }
    None
}

/// Send `command` on BIRD's control socket and read the whole reply.
fn control(socket: &Path, command: &str) -> Result<Vec<ReplyLine>, AnnounceError> {
    let fail = |source: io::Error| AnnounceError::Control {
        socket: socket.to_path_buf(),
        command: command.to_string(),
        source,
    };
    let bad = |what: String| fail(io::Error::new(io::ErrorKind::InvalidData, what));
    let mut stream = UnixStream::connect(socket).map_err(fail)?;
    stream
        .set_read_timeout(Some(CONTROL_TIMEOUT))
        .map_err(fail)?;
    stream
        .set_write_timeout(Some(CONTROL_TIMEOUT))
        .map_err(fail)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(fail)?.take(MAX_REPLY));
    let mut line = String::new();
    reader.read_line(&mut line).map_err(fail)?;
    if !line.starts_with("0001 ") {
        return Err(bad(format!("unexpected greeting {line:?}")));
    }
    stream
        .write_all(format!("{command}\n").as_bytes())
        .map_err(fail)?;
    let mut lines: Vec<ReplyLine> = Vec::new();
    let mut last_code = 0u16;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(fail)? == 0 {
            return Err(bad(format!(
                "connection closed before the end of the reply ({} lines)",
                lines.len()
            )));
        }
        if line.starts_with('+') {
            continue;
        }
        let Some((code, done, text)) = parse_reply_line(&line) else {
            return Err(bad(format!("unparsable reply line {line:?}")));
        };
        let code = code.unwrap_or(last_code);
        last_code = code;
        lines.push(ReplyLine {
            code,
            text: text.to_string(),
        });
        if done {
            break;
        }
    }
    if let Some(e) = lines.iter().find(|l| l.code >= 8000) {
        return Err(AnnounceError::Bird {
            command: command.to_string(),
            code: e.code,
            message: e.text.trim().to_string(),
        });
    }
    Ok(lines)
}

/// The value of `BGP state:` in `show protocols all` output.
fn bgp_state(reply: &[ReplyLine]) -> Option<String> {
    reply.iter().find_map(|l| {
        let (_, v) = l.text.trim().split_once("BGP state:")?;
        Some(v.trim().to_string())
    })
}

// ---------------------------------------------------------------------------------------------
// The process.

/// Child-process setup that needs `unsafe`: the parent-death signal.
mod sys {
    #![allow(unsafe_code)]

    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// In the child, between fork and exec: ask for `SIGKILL` when the parent (the thread that
    /// forked) dies, then make sure the parent had not died already (in which case the signal
    /// would never come).
    fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG, sig) takes integers only, touches no memory of ours and
        // is async-signal-safe (it is a plain system call), as required between fork and exec.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: getppid has no preconditions and cannot fail; it is a plain system call.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    }

    /// Make the command's process get `SIGKILL` when the spawning thread exits.
    pub fn kill_with_parent(cmd: &mut Command) {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the hook runs in the child after fork, before exec. `die_with_parent` only
        // makes two system calls (prctl, getppid) and builds an `io::Error` from an errno, which
        // does not allocate; it takes no lock and touches no state shared with the parent, so it
        // is safe in the forked child of a multi-threaded process.
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
    }
}

/// Shared between an [`Announcer`] and its keeper thread.
struct KeeperState {
    exited: Mutex<Option<ExitStatus>>,
    kill: AtomicBool,
}

impl KeeperState {
    fn exited(&self) -> Option<ExitStatus> {
        *self.exited.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Spawn BIRD from a new thread that stays its parent until it exits (the parent-death signal
/// is tied to the spawning thread) and reaps it. Returns BIRD's pid.
fn spawn_keeper(
    mut cmd: Command,
    state: Arc<KeeperState>,
) -> Result<(u32, JoinHandle<()>), AnnounceError> {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("fp-bird".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(child.id()));
            loop {
                match child.try_wait() {
                    Ok(Some(s)) => {
                        *state.exited.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
                        return;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        // Cannot happen for our own unreaped child; kill it rather than lose it.
                        state.kill.store(true, Ordering::Relaxed);
                    }
                }
                if state.kill.load(Ordering::Relaxed) {
                    let _ = child.kill();
                    let s = child.wait().ok();
                    *state.exited.lock().unwrap_or_else(|p| p.into_inner()) = s;
                    return;
                }
                std::thread::sleep(KEEPER_POLL);
            }
        })
        .map_err(io_err("starting the BIRD keeper thread"))?;
    match rx.recv() {
        Ok(Ok(pid)) => Ok((pid, thread)),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(AnnounceError::Io {
                what: "starting bird".into(),
                source: e,
            })
        }
        Err(_) => {
            let _ = thread.join();
            Err(AnnounceError::Io {
                what: "starting bird".into(),
                source: io::Error::other("the keeper thread ended without starting it"),
            })
        }
    }
}

/// Directories searched for `bird` besides `PATH` (it lives in /usr/sbin, which a non-root
/// `PATH` may lack).
const SBIN: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/local/sbin"];

fn find_bird() -> Result<PathBuf, AnnounceError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN.iter().map(PathBuf::from))
        .map(|d| d.join("bird"))
        .find(|p| p.is_file())
        .ok_or_else(|| AnnounceError::NotInstalled {
            searched: SBIN.join(", "),
        })
}

/// `bird --version` must say version 2.
fn check_version(bird: &Path) -> Result<(), AnnounceError> {
    let out = Command::new(bird)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {} --version", bird.display())))?;
    // BIRD prints its version on stderr.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
    .trim()
    .to_string();
    if said.contains("BIRD version 2.") {
        Ok(())
    } else {
        Err(AnnounceError::Version {
            program: bird.display().to_string(),
            said,
        })
    }
}

/// The last `n` lines of a file, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Write `text` to `path` atomically (a temporary file renamed over it).
fn write_atomic(path: &Path, text: &str) -> Result<(), AnnounceError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).map_err(io_err(format!("writing {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io_err(format!("renaming {} into place", tmp.display())))
}

/// Check that BIRD can use `dir`: the socket path fits `sun_path`, and the directory can be
/// quoted in BIRD's configuration language.
fn check_dir(dir: &Path) -> Result<(), AnnounceError> {
    let s = dir.to_string_lossy();
    let bad = |why: String| AnnounceError::BadPath {
        path: s.to_string(),
        why,
    };
    if dir.to_str().is_none() || s.contains(['"', '\\', '\n', '\r']) {
        return Err(bad(
            "must be UTF-8 without quotes, backslashes or line breaks (it is quoted in BIRD's configuration)".into(),
        ));
    }
    let socket_len = dir.join(SOCKET_FILE).as_os_str().len();
    if socket_len > MAX_SOCKET_PATH {
        return Err(bad(format!(
            "the control socket path would be {socket_len} bytes, more than the {MAX_SOCKET_PATH} a Unix socket allows"
        )));
    }
    Ok(())
}

/// Where default state directories go: the service's runtime directory when systemd gave one
/// (`RuntimeDirectory=` sets `$RUNTIME_DIRECTORY`; the first of a colon-separated list), where the
/// host can reach BIRD's socket and which the unit's `ProtectSystem=strict` leaves writable; else
/// the temporary directory.
fn default_base() -> PathBuf {
    base_from(std::env::var("RUNTIME_DIRECTORY").ok().as_deref())
}

fn base_from(runtime_directory: Option<&str>) -> PathBuf {
    match runtime_directory.and_then(|v| v.split(':').next()) {
        Some(d) if d.starts_with('/') => PathBuf::from(d),
        _ => std::env::temp_dir(),
    }
}

/// Default state directory: `<base>/flowplane-bgp-<pid>` (see [`default_base`]).
fn default_dir() -> PathBuf {
    default_base().join(format!("flowplane-bgp-{}", std::process::id()))
}

/// Remove default state directories of processes that are gone (a balancer killed with
/// `SIGKILL` runs no destructor; its BIRD died with it). Only `flowplane-bgp-<pid>` directories
/// in the default base whose pid does not exist and whose socket does not answer.
fn sweep_stale_default_dirs() {
    let Ok(entries) = fs::read_dir(default_base()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("flowplane-bgp-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path();
        if UnixStream::connect(dir.join(SOCKET_FILE)).is_ok() {
            continue;
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

/// Runs BIRD 2 for one balancer and tells it which VIPs to announce. See the module docs.
///
/// The controller calls [`set`](Announcer::set) with the VIPs that should be announced now
/// (health-gated), [`withdraw_all`](Announcer::withdraw_all) when it starts draining, and
/// [`stop`](Announcer::stop) after the drain time.
pub struct Announcer {
    spec: BgpSpec,
    dir: PathBuf,
    /// The directory was created by us (removed on stop).
    created_dir: bool,
    announced: Vec<IpAddr>,
    pid: u32,
    state: Arc<KeeperState>,
    keeper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Announcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Announcer")
            .field("peer", &self.spec.peer)
            .field("dir", &self.dir)
            .field("pid", &self.pid)
            .field("announced", &self.announced)
            .finish()
    }
}

impl Announcer {
    /// Start BIRD 2 with a generated configuration (see the module docs) announcing nothing yet,
    /// its files and control socket in `spec.state_dir` (default `$RUNTIME_DIRECTORY/flowplane-bgp-<pid>` under systemd, else
    /// `$TMPDIR/flowplane-bgp-<pid>`),
    /// and wait until its control socket answers. BIRD is killed by the kernel if the process
    /// dies. The BGP session comes up in the background ([`session_state`](Self::session_state)).
    pub fn start(spec: &BgpSpec) -> Result<Announcer, AnnounceError> {
        if spec.speaker != "bird" {
            return Err(AnnounceError::UnsupportedSpeaker(spec.speaker.clone()));
        }
        let bird = find_bird()?;
        check_version(&bird)?;
        let dir = match &spec.state_dir {
            Some(d) => PathBuf::from(d),
            None => {
                sweep_stale_default_dirs();
                default_dir()
            }
        };
        check_dir(&dir)?;
        let socket = dir.join(SOCKET_FILE);
        let created_dir = !dir.exists();
        if created_dir {
            fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        } else if UnixStream::connect(&socket).is_ok() {
            return Err(AnnounceError::SocketInUse(socket));
        }
        // From here on, Drop cleans up (kills BIRD, removes our files).
        let mut a = Announcer {
            spec: spec.clone(),
            dir,
            created_dir,
            announced: Vec::new(),
            pid: 0,
            state: Arc::new(KeeperState {
                exited: Mutex::new(None),
                kill: AtomicBool::new(false),
            }),
            keeper: None,
        };
        for f in OUR_FILES {
            let p = a.dir.join(f);
            if p.exists() {
                fs::remove_file(&p).map_err(io_err(format!("removing stale {}", p.display())))?;
            }
        }
        let conf = a.dir.join(CONFIG_FILE);
        let vips = a.dir.join(VIPS_FILE);
        write_atomic(&vips, &static_config_for(&[], spec.next_hop))?;
        write_atomic(&conf, &main_config(spec, &vips))?;

        // Parse-only run first: a rejected configuration is reported as such, not as a crash.
        let parsed = Command::new(&bird)
            .arg("-p")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .output()
            .map_err(io_err(format!("running {} -p", bird.display())))?;
        if !parsed.status.success() {
            return Err(AnnounceError::Config {
                path: conf,
                message: String::from_utf8_lossy(&parsed.stderr).trim().to_string(),
            });
        }

        let log = fs::File::create(a.dir.join(LOG_FILE)).map_err(io_err(format!(
            "creating {}",
            a.dir.join(LOG_FILE).display()
        )))?;
        let mut cmd = Command::new(&bird);
        cmd.arg("-f")
            .arg("-c")
            .arg(&conf)
            .arg("-s")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        sys::kill_with_parent(&mut cmd);
        let (pid, keeper) = spawn_keeper(cmd, a.state.clone())?;
        a.pid = pid;
        a.keeper = Some(keeper);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            a.check_running()?;
            match control(&socket, "show status") {
                Ok(_) => return Ok(a),
                Err(AnnounceError::Control { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(AnnounceError::Control { .. }) => {
                    return Err(AnnounceError::Timeout {
                        socket,
                        after: START_TIMEOUT,
                        log: tail(&a.dir.join(LOG_FILE), LOG_TAIL),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Announce exactly `vips` (sorted and deduplicated; all must be of `spec.next_hop`'s family):
    /// rewrite the static part and have BIRD re-read its configuration. Returns whether the set
    /// changed (`Ok(false)` sends nothing to BIRD). On error the previous set stays announced.
    pub fn set(&mut self, vips: &[IpAddr]) -> Result<bool, AnnounceError> {
        let want = normalise(vips, self.spec.next_hop)?;
        if want == self.announced {
            return Ok(false);
        }
        self.check_running()?;
        let path = self.dir.join(VIPS_FILE);
        write_atomic(&path, &static_config_for(&want, self.spec.next_hop))?;
        if let Err(e) = self.command("configure") {
            // BIRD keeps its previous configuration; make the file say so again.
            let _ = write_atomic(
                &path,
                &static_config_for(&self.announced, self.spec.next_hop),
            );
            return Err(e);
        }
        self.announced = want;
        Ok(true)
    }

    /// The VIPs announced now (sorted).
    pub fn announced(&self) -> &[IpAddr] {
        &self.announced
    }

    /// The BGP session's state as BIRD reports it: `Idle`, `Connect`, `Active`, `OpenSent`,
    /// `OpenConfirm`, `Established`, or `Down`.
    pub fn session_state(&self) -> Result<String, AnnounceError> {
        self.check_running()?;
        let reply = self.command(&format!("show protocols all {BGP_PROTOCOL}"))?;
        bgp_state(&reply).ok_or_else(|| AnnounceError::Control {
            socket: self.socket(),
            command: format!("show protocols all {BGP_PROTOCOL}"),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no \"BGP state:\" line in {reply:?}"),
            ),
        })
    }

    /// Withdraw every VIP (`set(&[])`). The caller then waits `spec.drain_ms`, so the router moves
    /// traffic away while this balancer still forwards, and calls [`stop`](Self::stop).
    pub fn withdraw_all(&mut self) -> Result<(), AnnounceError> {
        self.set(&[]).map(|_| ())
    }

    /// Stop BIRD gracefully (`down`: it tells the router with a BGP Cease, which withdraws
    /// whatever is still announced at once), kill it if it has not exited within
    /// [`STOP_TIMEOUT`], and remove the state files (and the directory if it was created here).
    pub fn stop(self) {
        if self.state.exited().is_none() {
            let _ = self.command("down");
            let deadline = Instant::now() + STOP_TIMEOUT;
            while self.state.exited().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // Drop kills BIRD if it is still running and removes the files.
    }

    /// Is BIRD still running?
    pub fn is_running(&self) -> bool {
        self.state.exited().is_none()
    }

    /// BIRD's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The state directory (configuration, `bird.log`, control socket).
    pub fn state_dir(&self) -> &Path {
        &self.dir
    }

    /// BIRD's control socket, for `birdc -s`.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(SOCKET_FILE)
    }

    /// The end of BIRD's log (`bird.log` in the state directory).
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.dir.join(LOG_FILE), lines)
    }

    /// Send a command on the control socket (any `birdc` command); the reply lines.
    pub fn command(&self, command: &str) -> Result<Vec<ReplyLine>, AnnounceError> {
        control(&self.socket(), command)
    }

    fn check_running(&self) -> Result<(), AnnounceError> {
        match self.state.exited() {
            None => Ok(()),
            Some(s) => Err(AnnounceError::Exited {
                status: s.to_string(),
                log: self.log_tail(LOG_TAIL),
            }),
        }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.state.kill.store(true, Ordering::Relaxed);
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
        if self.created_dir {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            for f in OUR_FILES {
                let _ = fs::remove_file(self.dir.join(f));
            }
            for f in [CONFIG_FILE, VIPS_FILE] {
                let _ = fs::remove_file(self.dir.join(f).with_extension("tmp"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn spec() -> BgpSpec {
        BgpSpec::new(
            65001,
            "10.0.2.1".parse().unwrap(),
            65000,
            "10.0.2.11".parse().unwrap(),
        )
    }

    #[test]
    fn main_config_has_the_session_and_the_policy() {
        let s = BgpSpec {
            hold_time_s: 9,
            ..spec()
        };
        let c = main_config(&s, Path::new("/tmp/x/vips.conf"));
        for want in [
            "router id 10.0.2.11;\n",
            "include \"/tmp/x/vips.conf\";\n",
            "protocol bgp uplink {\n",
            "  local as 65001;\n",
            "  neighbor 10.0.2.1 as 65000;\n",
            "  hold time 9;\n",
            "  keepalive time 3;\n",
            "  graceful restart off;\n",
            "  ipv4 {\n",
            "    import none;\n",
            "    next hop address 10.0.2.11;\n",
            "if proto = \"vips\" then { bgp_origin = ORIGIN_IGP; accept; } reject;",
        ] {
            assert!(c.contains(want), "missing {want:?} in\n{c}");
        }
        assert!(!c.contains("ipv6"), "{c}");
        // Braces balance (BIRD would reject the file otherwise; the live test parses it too).
        assert_eq!(c.matches('{').count(), c.matches('}').count());
    }

    #[test]
    fn keepalive_is_a_third_of_the_hold_time_and_at_least_one_second() {
        for (hold, ka) in [(3, 1), (4, 1), (9, 3), (10, 3), (90, 30)] {
            let s = BgpSpec {
                hold_time_s: hold,
                ..spec()
            };
            let c = main_config(&s, Path::new("/v"));
            assert!(c.contains(&format!("  hold time {hold};\n")), "{c}");
            assert!(c.contains(&format!("  keepalive time {ka};\n")), "{c}");
        }
    }

    #[test]
    fn explicit_router_id_and_ipv6_next_hop() {
        let s = BgpSpec {
            router_id: "192.0.2.9".parse().unwrap(),
            next_hop: "2001:db8::11".parse().unwrap(),
            ..spec()
        };
        let c = main_config(&s, Path::new("/v"));
        assert!(c.contains("router id 192.0.2.9;\n"), "{c}");
        assert!(c.contains("  ipv6 {\n"), "{c}");
        assert!(c.contains("    next hop address 2001:db8::11;\n"), "{c}");
        assert!(!c.contains("  ipv4 {"), "{c}");
    }

    #[test]
    fn static_config_lists_host_routes() {
        let v4 = static_config(&["10.100.0.1".parse().unwrap(), "10.100.0.2".parse().unwrap()]);
        assert_eq!(
            v4.lines().skip(1).collect::<Vec<_>>(),
            [
                "protocol static vips {",
                "  ipv4;",
                "  route 10.100.0.1/32 blackhole;",
                "  route 10.100.0.2/32 blackhole;",
                "}"
            ]
        );
        let v6 = static_config(&["2001:db8::1".parse().unwrap()]);
        assert!(
            v6.contains("  ipv6;\n  route 2001:db8::1/128 blackhole;\n"),
            "{v6}"
        );
        let empty = static_config(&[]);
        assert!(!empty.contains("route"), "{empty}");
        assert!(empty.contains("  ipv4;\n"));
        let empty6 = static_config_for(&[], "2001:db8::11".parse().unwrap());
        assert!(
            empty6.contains("  ipv6;\n") && !empty6.contains("ipv4"),
            "{empty6}"
        );
    }

    #[test]
    fn normalise_sorts_dedups_and_checks_families() {
        let nh: IpAddr = "10.0.2.11".parse().unwrap();
        let v: Vec<IpAddr> = ["10.100.0.2", "10.100.0.1", "10.100.0.2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(normalise(&v, nh).unwrap(), [v[1], v[0]]);
        let six: IpAddr = "2001:db8::1".parse().unwrap();
        match normalise(&[v[0], six], nh) {
            Err(AnnounceError::Family { vip, next_hop }) => {
                assert_eq!((vip, next_hop), (six, nh));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn state_dirs_go_to_the_service_runtime_directory() {
        assert_eq!(
            base_from(Some("/run/flowplane")),
            Path::new("/run/flowplane")
        );
        assert_eq!(base_from(Some("/run/a:/run/b")), Path::new("/run/a"));
        assert_eq!(base_from(Some("")), std::env::temp_dir());
        assert_eq!(base_from(None), std::env::temp_dir());
    }

    #[test]
    fn state_dir_paths_are_checked() {
        assert!(check_dir(Path::new("/run/flowplane")).is_ok());
        for bad in ["/tmp/a\"b", "/tmp/a\\b", "/tmp/a\nb"] {
            assert!(
                matches!(
                    check_dir(Path::new(bad)),
                    Err(AnnounceError::BadPath { .. })
                ),
                "{bad:?}"
            );
        }
        let long = format!("/tmp/{}", "d".repeat(100));
        let e = check_dir(Path::new(&long)).unwrap_err().to_string();
        assert!(e.contains("Unix socket"), "{e}");
    }

    #[test]
    fn reply_lines_parse() {
        assert_eq!(
            parse_reply_line("0001 BIRD 2.0.12 ready.\n"),
            Some((Some(1), true, "BIRD 2.0.12 ready."))
        );
        assert_eq!(
            parse_reply_line("1002-uplink BGP\n"),
            Some((Some(1002), false, "uplink BGP"))
        );
        assert_eq!(
            parse_reply_line("  BGP state: Idle\n"),
            Some((None, false, " BGP state: Idle"))
        );
        assert_eq!(parse_reply_line("0000 \n"), Some((Some(0), true, "")));
        assert_eq!(parse_reply_line("0000\n"), Some((Some(0), true, "")));
        assert_eq!(parse_reply_line("garbage\n"), None);
        assert_eq!(parse_reply_line("12-x\n"), None);
    }

    /// A fake BIRD control socket serving canned replies, one connection per reply.
    fn fake_bird(
        replies: Vec<&'static str>,
    ) -> (tempdir::Dir, std::thread::JoinHandle<Vec<String>>) {
        let dir = tempdir::Dir::new();
        let listener = UnixListener::bind(dir.0.join(SOCKET_FILE)).unwrap();
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            for r in replies {
                let (mut s, _) = listener.accept().unwrap();
                s.write_all(b"0001 BIRD 2.0.12 ready.\n").unwrap();
                let mut line = String::new();
                BufReader::new(s.try_clone().unwrap())
                    .read_line(&mut line)
                    .unwrap();
                got.push(line);
                s.write_all(r.as_bytes()).unwrap();
            }
            got
        });
        (dir, t)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "fp-announce-unit-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn control_reads_whole_replies_and_reports_error_codes() {
        let (dir, t) = fake_bird(vec![
            "2002-Name       Proto      Table      State  Since         Info\n\
             1002-uplink     BGP        ---        up     2026-01-01 00:00:00  Established   \n\
             1006-  BGP state:          Established\n\
             \x20    Neighbor address: 10.0.2.1\n\
             \x20 \n\
             0000 \n",
            "0002-Reading configuration from /x/bird.conf\n0003 Reconfigured\n",
            "9001 syntax error, unexpected CF_SYM_UNDEFINED\n",
            "0002-Reading configuration from /x/bird.conf\n",
        ]);
        let sock = dir.0.join(SOCKET_FILE);
        let r = control(&sock, "show protocols all uplink").unwrap();
        assert_eq!(r.len(), 6);
        assert_eq!(r[3].code, 1006, "continuation lines keep the code: {r:?}");
        assert_eq!(bgp_state(&r).as_deref(), Some("Established"));
        let r = control(&sock, "configure").unwrap();
        assert_eq!(r.last().unwrap().code, 3);
        match control(&sock, "foo") {
            Err(AnnounceError::Bird {
                command,
                code,
                message,
            }) => {
                assert_eq!((command.as_str(), code), ("foo", 9001));
                assert!(message.starts_with("syntax error"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // A reply cut short is an error, not a hang or a success.
        let e = control(&sock, "configure").unwrap_err().to_string();
        assert!(e.contains("closed before the end"), "{e}");
        assert_eq!(
            t.join().unwrap(),
            [
                "show protocols all uplink\n",
                "configure\n",
                "foo\n",
                "configure\n"
            ]
        );
        // Nobody listening: a control error naming the socket.
        drop(dir);
        let e = control(&sock, "show status").unwrap_err();
        assert!(matches!(e, AnnounceError::Control { .. }), "{e}");
    }

    #[test]
    fn unsupported_speaker_is_rejected_before_anything_starts() {
        let mut s = spec();
        s.speaker = "gobgp".into();
        let e = Announcer::start(&s).unwrap_err();
        assert!(matches!(e, AnnounceError::UnsupportedSpeaker(_)), "{e}");
    }
}
