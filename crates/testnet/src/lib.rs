//! Leak-proof test networks for flowplane's live tests: network namespaces, veth pairs, Linux
//! bridges, addresses, routes (ECMP included), per-namespace sysctls, commands with timeouts and
//! background servers and clients (nginx, `python3 -m http.server`, iperf3, wrk, tcpdump, scapy)
//! — all removed when the [`TestNet`] is dropped, also when the test panics.
//!
//! Layer: test support (docs/architecture.md): live tests create their own network namespaces,
//! veths and processes, clean up on every exit path, and run in CI. Every end-to-end test of the load
//! balancer (Maglev §2-§4 on real TCP), the switch (CuckooSwitch §3.1 on live ports) and the
//! ECMP/BGP scale-out is built on it.
//!
//! # Guarantees
//!
//! * **Unique names.** Everything is created inside network namespaces named
//!   `fpt-<pid>-<start>-<seq>-<tag>-<name>` (see [`sweep`]): tests running in parallel in one
//!   binary, other test binaries and other users on the same machine never collide, and
//!   interface names inside a namespace are private to it, so tests may call every device `eth0`.
//!   Nothing is created in the host's (root) namespace except those namespaces and one
//!   temporary directory, `$TMPDIR/fpt-…`.
//! * **Removed on drop.** Dropping the [`TestNet`] kills every background process it started
//!   (SIGKILL to the process group), then every other process still running in its namespaces
//!   (daemons, grandchildren), deletes the namespaces (which destroys their veths and bridges) and
//!   removes the temporary directory. `Drop` runs during unwinding, so a failed assertion cleans up
//!   too; when the test is panicking, the tail of each background process's log is printed first.
//! * **Crashed runs are swept.** A run killed by a signal never runs destructors: the first
//!   [`TestNet::new`] of every process calls [`sweep::sweep_stale`], which removes namespaces (and
//!   the processes in them) and temporary directories whose owning process is gone — never those of
//!   a running process.
//! * **Cannot run ⇒ fails, loudly.** [`TestNet::new`] returns [`Error::Unavailable`] when the
//!   process is not root or `ip` is missing, and the helpers return [`Error::MissingTool`] naming
//!   the Debian package when a program is not installed (`scripts/deps.sh` installs them all): a
//!   test that `?`s or `unwrap`s these fails with the reason instead of passing silently.
//! * Set `FP_TESTNET_KEEP=1` to keep a network after the test for inspection (`ip netns list`);
//!   the next run's sweep removes it once the process is gone.
//!
//! The `ip` command (iproute2) does the work, so every step can be replayed by hand from the error
//! messages, which quote the failed command with its output. Rust code runs *inside* a namespace
//! with [`Netns::enter`] / [`Netns::spawn_thread`] (a thread that `setns`es; sockets it creates —
//! e.g. an AF_PACKET port — stay in that namespace whichever thread later uses them).
//!
//! docs/platform.md, "Partial checksums on veth": frames the kernel sends on a veth carry partial TCP/UDP checksums
//! (`CHECKSUM_PARTIAL`); call [`Link::tx_checksum_off`] on the interfaces of kernel traffic sources
//! whose frames a user-space dataplane forwards without fixing them.
//!
//! # Example: client → router → balancer → 3 backends (direct server return)
//!
//! ```no_run
//! use fp_testnet::{NginxConfig, TestNet};
//! # fn main() -> Result<(), fp_testnet::Error> {
//! let net = TestNet::new("lb-e2e")?;            // unique namespaces for this test
//! let client = net.ns("client")?;
//! let router = net.ns("router")?;
//! let lb = net.ns("lb")?;
//! let sw = net.ns("sw")?;                        // the backends' segment: a bridge in its own ns
//! let br = sw.bridge("br0")?;
//!
//! // client 10.0.1.2 -- 10.0.1.1 router 10.0.2.1 -- 10.0.2.2 lb; lb and backends on 10.0.3.0/24
//! let (c0, r0) = net.veth(&client, "eth0", &router, "eth0")?;
//! c0.addr_add("10.0.1.2/24")?;
//! r0.addr_add("10.0.1.1/24")?;
//! c0.tx_checksum_off()?;                         // pitfall 1: kernel sender, no partial csums
//! let (r1, l0) = net.veth(&router, "eth1", &lb, "eth0")?;
//! r1.addr_add("10.0.2.1/24")?;
//! l0.addr_add("10.0.2.2/24")?;
//! router.sysctl("net.ipv4.ip_forward", "1")?;
//! client.route_add("default", "10.0.1.1")?;
//! router.route_add("10.100.0.100/32", "10.0.2.2")?;   // static route for the VIP
//! let (l1, p) = net.veth(&lb, "eth1", &sw, "p-lb")?;
//! p.set_master(&br)?;
//! l1.addr_add("10.0.3.1/24")?;
//!
//! let mut servers = Vec::new();
//! for i in 1..=3 {
//!     let b = net.ns(&format!("b{i}"))?;
//!     let (e, p) = net.veth(&b, "eth0", &sw, &format!("p-b{i}"))?;
//!     p.set_master(&br)?;
//!     e.addr_add(&format!("10.0.3.{}/24", 10 + i))?;
//!     e.tx_checksum_off()?;                      // the backends answer the client directly
//!     b.route_add("default", "10.0.3.1")?;
//!     b.lo().addr_add("10.100.0.100/32")?;        // direct server return: the VIP on lo
//!     b.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
//!     b.sysctl("net.ipv4.conf.all.arp_announce", "2")?;
//!     servers.push(b.nginx(&NginxConfig { body: format!("backend {i}\n"), ..Default::default() })?);
//! }
//! // ... start the balancer in `lb` (AF_PACKET port on eth0/eth1: `lb.spawn_thread(..)`) ...
//! let out = client.cmd(["curl", "-s", "-m", "2", "http://10.100.0.100/"]).run()?;
//! assert!(out.stdout.starts_with("backend "));
//! let wrk = client.wrk("http://10.100.0.100/", &Default::default())?;
//! assert_eq!(wrk.errors(), 0);
//! # Ok(()) }
//! // `net` drops here: nginx killed, namespaces and temp files removed.
//! ```
//!
//! A smaller example that runs (it needs root, like every live test):
//!
//! ```
//! # fn main() -> Result<(), fp_testnet::Error> {
//! let net = fp_testnet::TestNet::new("doc")?;
//! let (a, b) = (net.ns("a")?, net.ns("b")?);
//! let (ea, eb) = net.veth(&a, "eth0", &b, "eth0")?;
//! ea.addr_add("10.9.0.1/24")?;
//! eb.addr_add("10.9.0.2/24")?;
//! a.ping("10.9.0.2", 1)?;
//! let name = a.name().to_string();
//! drop(net);
//! assert!(!fp_testnet::netns_exists(&name));
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]

mod apps;
mod cmd;
pub mod collectors;
mod netns;
pub mod sweep;
mod sys;

pub use apps::{
    read_http_response, Capture, Iperf3Report, Nginx, NginxConfig, Ovs, WrkOptions, WrkReport,
};
pub use cmd::{Cmd, Output, Proc};
pub use netns::{Link, LinkStats, Netns};
pub use sweep::{sweep_stale, SweepReport};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What can go wrong building or using a test network.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The live test cannot run on this machine (not root, no iproute2, no namespace support).
    #[error("live test cannot run: {0}")]
    Unavailable(String),
    /// A program the test needs is not installed.
    #[error("`{tool}` is not installed (Debian package `{package}`; scripts/deps.sh installs it)")]
    MissingTool {
        /// The program.
        tool: String,
        /// The Debian package that provides it.
        package: String,
    },
    /// A command exited with a failure status.
    #[error("`{cmd}` failed ({status})\n--- stderr ---\n{stderr}--- stdout ---\n{stdout}")]
    Failed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// Its standard output.
        stdout: String,
        /// Its standard error.
        stderr: String,
    },
    /// A command or a wait did not finish in time.
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was being waited for (a command line, with its output so far).
        what: String,
        /// The time limit.
        after: Duration,
    },
    /// An I/O error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A bad argument (a name too long for an interface, an unparsable report).
    #[error("invalid {what}: {why}")]
    Invalid {
        /// What was invalid.
        what: String,
        /// Why.
        why: String,
    },
}

/// Result with fp-testnet's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// A test network: the owner of every namespace, process and file a test creates. Drop it (or let
/// it go out of scope) to remove them all; see the [crate docs](crate).
pub struct TestNet {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// `fpt-<pid>-<start>-<seq>-<tag>`: prefix of every name.
    pub(crate) id: String,
    /// Temporary directory (`$TMPDIR/<id>`).
    pub(crate) dir: PathBuf,
    pub(crate) state: Mutex<State>,
    next_proc: AtomicU64,
}

#[derive(Default)]
pub(crate) struct State {
    /// Full names of the namespaces, in creation order.
    pub(crate) namespaces: Vec<String>,
    /// Background processes by id.
    pub(crate) procs: HashMap<u64, ProcEntry>,
    pub(crate) cleaned: bool,
}

pub(crate) struct ProcEntry {
    pub(crate) child: Child,
    pub(crate) label: String,
    pub(crate) log: PathBuf,
    pub(crate) exited: Option<ExitStatus>,
}

impl Inner {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock (in a test thread) must not stop the cleanup.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn new_proc_id(&self) -> u64 {
        self.next_proc.fetch_add(1, Ordering::Relaxed)
    }
}

static SWEPT: OnceLock<()> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(0);

impl TestNet {
    /// A new, empty test network labelled `tag` (letters and digits are kept, up to 16; the label
    /// only helps people reading `ip netns list`). Checks that live tests can run here, and on the
    /// first call in this process sweeps leftovers of crashed earlier runs.
    pub fn new(tag: &str) -> Result<TestNet> {
        check_environment()?;
        SWEPT.get_or_init(|| {
            let rep = sweep_stale();
            if !rep.is_empty() {
                eprintln!("fp-testnet: swept leftovers of crashed runs: {rep:?}");
            }
        });
        let (pid, tok) = sweep::self_identity();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(16)
            .collect::<String>()
            .to_ascii_lowercase();
        let id = if tag.is_empty() {
            format!("{}{pid}-{tok}-{seq}", sweep::PREFIX)
        } else {
            format!("{}{pid}-{tok}-{seq}-{tag}", sweep::PREFIX)
        };
        let dir = std::env::temp_dir().join(&id);
        std::fs::create_dir_all(dir.join("logs")).map_err(io_err(format!(
            "creating the test network's directory {}",
            dir.display()
        )))?;
        Ok(TestNet {
            inner: Arc::new(Inner {
                id,
                dir,
                state: Mutex::new(State::default()),
                next_proc: AtomicU64::new(0),
            }),
        })
    }

    /// The prefix of every name this network creates (`fpt-<pid>-<start>-<seq>-<tag>`).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The network's temporary directory (removed on drop). Background process logs are in its
    /// `logs/` subdirectory.
    pub fn root_dir(&self) -> &Path {
        &self.inner.dir
    }

    /// A fresh subdirectory `name` of the temporary directory (removed on drop).
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        netns::check_simple_name("directory name", name, 64)?;
        let p = self.inner.dir.join(name);
        std::fs::create_dir_all(&p).map_err(io_err(format!("creating {}", p.display())))?;
        Ok(p)
    }

    /// Create network namespace `<id>-<name>` with its loopback up. `name` is letters, digits,
    /// `-`, `_` and `.`, at most 32 characters, unique within this network.
    pub fn ns(&self, name: &str) -> Result<Netns> {
        netns::check_simple_name("namespace name", name, 32)?;
        let full = format!("{}-{name}", self.inner.id);
        {
            let mut st = self.inner.lock();
            if st.namespaces.contains(&full) {
                return Err(Error::Invalid {
                    what: "namespace name".into(),
                    why: format!("`{name}` already exists in this test network"),
                });
            }
            // Registered before it exists, so a failure half-way is still cleaned up.
            st.namespaces.push(full.clone());
        }
        cmd::host_ip(&["netns", "add", &full])?;
        let ns = Netns::new(self.inner.clone(), full, name.to_string());
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Create a veth pair with end `a_dev` in `a` and end `b_dev` in `b` (which may be the same
    /// namespace), both up. Interface names have at most 15 characters.
    pub fn veth(&self, a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<(Link, Link)> {
        self.veth_queues(a, a_dev, b, b_dev, 1)
    }

    /// [`veth`](Self::veth) with `queues` receive and transmit queues on each end (a flow's
    /// frames stay on one queue: the sender's transmit queue, picked by flow hash, is the
    /// receiver's receive queue).
    pub fn veth_queues(
        &self,
        a: &Netns,
        a_dev: &str,
        b: &Netns,
        b_dev: &str,
        queues: u32,
    ) -> Result<(Link, Link)> {
        netns::check_ifname(a_dev)?;
        netns::check_ifname(b_dev)?;
        let q = queues.max(1).to_string();
        let qs = ["numrxqueues", &q, "numtxqueues", &q];
        let mut args = vec!["link", "add", a_dev];
        args.extend(qs);
        args.extend(["type", "veth", "peer", "name", b_dev]);
        args.extend(qs);
        if a.name() != b.name() {
            args.extend(["netns", b.name()]);
        }
        a.ip(&args)?;
        let (la, lb) = (a.link(a_dev), b.link(b_dev));
        la.up()?;
        lb.up()?;
        Ok((la, lb))
    }

    /// Fail with [`Error::MissingTool`] unless every program in `tools` is installed.
    pub fn require_tools(&self, tools: &[&str]) -> Result<()> {
        tools.iter().try_for_each(|t| cmd::require_tool(t))
    }

    /// Names of the namespaces created so far (full names).
    pub fn namespaces(&self) -> Vec<String> {
        self.inner.lock().namespaces.clone()
    }

    /// Remove everything now (what `Drop` does) and report what could not be removed.
    pub fn cleanup(self) -> Vec<String> {
        self.inner.cleanup()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let errors = self.inner.cleanup();
        for e in errors {
            eprintln!("fp-testnet cleanup of {}: {e}", self.inner.id);
        }
    }
}

impl Inner {
    /// Kill processes, delete namespaces, remove files. Idempotent; returns what failed.
    fn cleanup(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let (procs, namespaces) = {
            let mut st = self.lock();
            if st.cleaned {
                return errors;
            }
            st.cleaned = true;
            (
                std::mem::take(&mut st.procs),
                std::mem::take(&mut st.namespaces),
            )
        };
        if std::thread::panicking() {
            for e in procs.values() {
                eprintln!(
                    "fp-testnet: --- last lines of `{}` ({}) ---\n{}",
                    e.label,
                    e.log.display(),
                    cmd::tail(&e.log, 20)
                );
            }
        }
        if std::env::var_os("FP_TESTNET_KEEP").is_some_and(|v| v == "1") {
            eprintln!(
                "fp-testnet: FP_TESTNET_KEEP=1: keeping namespaces {namespaces:?}, {} processes \
                 and {} (the next run's sweep removes them once this process has exited)",
                procs.len(),
                self.dir.display()
            );
            for (_, mut e) in procs {
                // Reap nothing, kill nothing: but do not leave zombies of exited children.
                let _ = e.child.try_wait();
            }
            return errors;
        }
        for (_, mut e) in procs {
            cmd::kill_and_reap(&mut e, &mut errors);
        }
        for ns in namespaces.iter().rev() {
            sweep::kill_all_in(ns, &mut errors);
            if let Err(e) = cmd::ip_netns_del(ns) {
                errors.push(format!("deleting netns {ns}: {e}"));
            }
        }
        if let Err(e) = sweep::remove_tree(&self.dir) {
            errors.push(format!("removing {}: {e}", self.dir.display()));
        }
        errors
    }
}

/// Whether a network namespace of this name exists (`/run/netns/NAME`).
pub fn netns_exists(name: &str) -> bool {
    cmd::ip_netns_list()
        .map(|l| l.iter().any(|n| n == name))
        .unwrap_or(false)
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn check_environment() -> Result<()> {
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    CHECK
        .get_or_init(|| {
            if sys::euid() != 0 {
                return Err(format!(
                    "network namespaces need root, and this process runs as uid {}",
                    sys::euid()
                ));
            }
            if cmd::which("ip").is_none() {
                return Err("`ip` (Debian package iproute2) is not installed".into());
            }
            Ok(())
        })
        .clone()
        .map_err(Error::Unavailable)
}
