//! Health checks (Maglev §2.2): one check stream per address, with rise/fall hysteresis, state
//! changes reported as events; for any application whose configuration names servers to check.
//!
//! # What is checked
//!
//! A [`Plan`] says which addresses get which check ([`PlannedCheck`]: TCP connect or HTTP GET
//! with status and body match, port, interval, timeout, rise and fall) and which addresses are
//! served without one (always healthy). The application makes the plan from its configuration —
//! the load balancer deduplicates its pools' checks by backend address, as Maglev §2.2 says
//! ("health checks are deduplicated by IP addresses"): one check stream per address, however
//! many pools hold it.
//!
//! # Hysteresis and initial state
//!
//! A healthy backend goes down after `fall` consecutive failed checks; an unhealthy one comes up
//! after `rise` consecutive successes. [`HealthOptions`] sets the initial state: by default backends
//! known **at start are healthy** (so the balancer serves at once, and a dead backend leaves after
//! `fall` failures, as with the pipeline's `Builder`, which also starts backends healthy), while
//! backends **added by a reload start unhealthy** and receive traffic only after `rise` successes
//! (adding capacity never sends connections to a server that is not ready yet).
//!
//! # Threads
//!
//! One thread per checked address (named `fp-health`, 128 KiB stack). Each sleeps on its command
//! channel until its next check is due, runs the check (bounded by `timeout_ms`), and schedules the
//! next one `interval_ms` after the previous one *started* (checks don't drift). Checks are
//! blocking socket calls with timeouts, so a thread per address keeps a slow or black-holed backend
//! from delaying the others without an event loop; for hundreds of backends that is hundreds of
//! mostly sleeping threads, which Linux handles well. No thread is spawned per check.
//!
//! # Reporting
//!
//! State *changes* go out as [`HealthEvent`]s on the channel returned by [`HealthMonitor::start`];
//! [`HealthMonitor::states`] gives the current state of every backend (for metrics and status).
//! Events and state updates happen under one lock, so a reader of `states` after receiving an
//! event sees at least that event's state, and a removed backend never produces an event after
//! [`HealthMonitor::update`] returned.

mod probe;

pub(crate) use probe::find as find_bytes;
pub use probe::{check, MAX_BODY, MAX_HEAD};

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A health check (what to check, how often, how many results change the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// What to check.
    pub kind: HealthKind,
    /// Port to connect to (default: chosen by the application, e.g. the VIP's port).
    pub port: Option<u16>,
    /// Interval between checks.
    pub interval_ms: u64,
    /// Timeout of one check.
    pub timeout_ms: u64,
    /// Consecutive successes to mark a backend up.
    pub rise: u32,
    /// Consecutive failures to mark a backend down.
    pub fall: u32,
}

/// Kinds of health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthKind {
    /// A TCP connection can be established.
    Tcp,
    /// An HTTP GET returns the expected status (and body substring, if given).
    Http {
        /// Request path.
        path: String,
        /// Expected status code.
        status: u16,
        /// Substring the body must contain.
        body: Option<String>,
    },
}

/// A backend changed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    /// Backend address.
    pub address: IpAddr,
    /// New state.
    pub healthy: bool,
    /// Why, e.g. `2 consecutive failed tcp checks of 10.0.1.1:80: tcp connect 10.0.1.1:80:
    /// Connection refused (os error 111)`.
    pub reason: String,
}

/// The check one backend address gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedCheck {
    /// Backend address.
    pub address: IpAddr,
    /// The group (the load balancer's pool) whose check this is.
    pub pool: String,
    /// Port checked.
    pub port: u16,
    /// The check.
    pub check: HealthCheck,
}

impl PlannedCheck {
    /// The socket address checked.
    pub fn target(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    /// `"tcp"` or `"http"`.
    pub fn kind(&self) -> &'static str {
        kind_name(&self.check.kind)
    }
}

fn kind_name(k: &HealthKind) -> &'static str {
    match k {
        HealthKind::Tcp => "tcp",
        HealthKind::Http { .. } => "http",
    }
}

/// Which backend gets which check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// One check per distinct checked address, in pool then backend order.
    pub checks: Vec<PlannedCheck>,
    /// Backends of VIPs that no pool checks (always healthy).
    pub unchecked: Vec<IpAddr>,
    /// Addresses for which the configuration asked different checks, and which one was chosen
    /// (for the log).
    pub conflicts: Vec<String>,
}

/// Why health checking could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The configuration does not say what to check (an application's plan reports this).
    #[error("{field}: {message}")]
    Config {
        /// The field, e.g. `pool "web".health.port`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A checker thread could not be started.
    #[error("health checker thread for {address}: {source}")]
    Spawn {
        /// The backend.
        address: IpAddr,
        /// The error.
        source: io::Error,
    },
}

/// Initial states (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthOptions {
    /// State of checked backends known when the monitor starts. Default `true`.
    pub initial_healthy: bool,
    /// State of checked backends added later by [`HealthMonitor::update`]. Default `false`.
    pub added_healthy: bool,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            initial_healthy: true,
            added_healthy: false,
        }
    }
}

/// The state of one backend, for metrics and status pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendHealth {
    /// Backend address.
    pub address: IpAddr,
    /// Current state.
    pub healthy: bool,
    /// The last check's result (or `"no health check"`, or the initial state before the first).
    pub reason: String,
    /// The check, if the backend has one.
    pub check: Option<PlannedCheck>,
    /// Successful checks so far.
    pub successes: u64,
    /// Failed checks so far.
    pub failures: u64,
    /// State changes so far (not counting the initial state).
    pub transitions: u64,
    /// When the state last changed (or the backend was added).
    pub since: Instant,
}

impl std::fmt::Display for BackendHealth {
    /// One status line: `10.0.1.1 up for 12s (tcp 10.0.1.1:80 of pool "web"; 10 ok, 2 failed):
    /// tcp connect ok`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} for {}s (",
            self.address,
            if self.healthy { "up" } else { "down" },
            self.since.elapsed().as_secs()
        )?;
        match &self.check {
            Some(c) => write!(
                f,
                "{} {} of pool {:?}; {} ok, {} failed",
                c.kind(),
                c.target(),
                c.pool,
                self.successes,
                self.failures
            )?,
            None => f.write_str("unchecked")?,
        }
        write!(f, "): {}", self.reason)
    }
}

struct Entry {
    state: BackendHealth,
    /// Which checker thread owns the entry (0: none). A thread whose token no longer matches
    /// was stopped and must neither update the entry nor send events.
    token: u64,
}

struct Shared {
    states: Mutex<HashMap<IpAddr, Entry>>,
    events: Sender<HealthEvent>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, Entry>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Task {
    spec: PlannedCheck,
    cmd: Sender<PlannedCheck>,
    handle: JoinHandle<()>,
}

/// Runs the health checks of a configuration; see the module doc.
pub struct HealthMonitor {
    shared: Arc<Shared>,
    tasks: HashMap<IpAddr, Task>,
    /// Stopped threads that may still be finishing a check.
    retired: Vec<JoinHandle<()>>,
    order: Vec<IpAddr>,
    plan: Plan,
    opts: HealthOptions,
    next_token: u64,
}

/// How long `Drop` waits for checker threads that are in the middle of a check.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl HealthMonitor {
    /// Start checking what `plan` says. State changes arrive on the returned receiver; the
    /// initial states ([`HealthOptions::initial_healthy`] for checked backends, healthy for
    /// unchecked ones) are in [`HealthMonitor::states`] — apply them to the snapshot builder before
    /// the first build if `initial_healthy` is `false` (the builder starts backends healthy).
    pub fn start(
        plan: Plan,
        opts: HealthOptions,
    ) -> Result<(HealthMonitor, Receiver<HealthEvent>), HealthError> {
        let (tx, rx) = mpsc::channel();
        let mut m = HealthMonitor {
            shared: Arc::new(Shared {
                states: Mutex::new(HashMap::new()),
                events: tx,
            }),
            tasks: HashMap::new(),
            retired: Vec::new(),
            order: Vec::new(),
            plan: Plan::default(),
            opts,
            next_token: 1,
        };
        m.apply(plan, opts.initial_healthy)?;
        Ok((m, rx))
    }

    /// Apply a new plan (a reloaded configuration's): new backends start being checked (in the
    /// [`HealthOptions::added_healthy`] state), removed ones stop, unchanged ones keep their state
    /// and their schedule; a backend whose check changed keeps its state and is checked at once
    /// with the new check.
    ///
    /// Returns the state of every backend that is new, or whose state changed because its check
    /// was removed (an unchecked backend is healthy): apply these to the snapshot builder before
    /// building the new configuration's snapshot. On error nothing changes.
    pub fn update(&mut self, plan: Plan) -> Result<Vec<HealthEvent>, HealthError> {
        self.apply(plan, self.opts.added_healthy)
    }

    fn apply(&mut self, plan: Plan, new_healthy: bool) -> Result<Vec<HealthEvent>, HealthError> {
        let now = Instant::now();
        let new_checks: HashMap<IpAddr, &PlannedCheck> =
            plan.checks.iter().map(|c| (c.address, c)).collect();
        let new_all: HashSet<IpAddr> = plan
            .checks
            .iter()
            .map(|c| c.address)
            .chain(plan.unchecked.iter().copied())
            .collect();
        let mut events = Vec::new();
        // Hold the lock from before the first spawn: a new thread that finishes its first check
        // early must find its entry (it waits for the lock, then sees its token).
        let shared = self.shared.clone();
        let mut states = shared.lock();
        // Spawn threads first (the only fallible step), so an error changes nothing.
        let mut spawned: Vec<(PlannedCheck, u64, Sender<PlannedCheck>, JoinHandle<()>)> =
            Vec::new();
        for c in &plan.checks {
            if self.tasks.contains_key(&c.address) {
                continue;
            }
            let token = self.next_token;
            self.next_token += 1;
            let (ctx, crx) = mpsc::channel();
            let shared = self.shared.clone();
            let spec = c.clone();
            let h = thread::Builder::new()
                .name("fp-health".into())
                .stack_size(128 * 1024)
                .spawn(move || run(shared, token, spec, crx));
            match h {
                Ok(h) => spawned.push((c.clone(), token, ctx, h)),
                Err(e) => {
                    // Threads spawned so far find no entry with their token and exit.
                    drop(states);
                    drop(spawned);
                    return Err(HealthError::Spawn {
                        address: c.address,
                        source: e,
                    });
                }
            }
        }
        // Removed backends, and backends whose check was removed.
        let old: Vec<IpAddr> = self.order.clone();
        for a in old {
            if !new_all.contains(&a) {
                states.remove(&a);
                if let Some(t) = self.tasks.remove(&a) {
                    self.retired.push(t.handle);
                }
            } else if !new_checks.contains_key(&a) {
                if let Some(t) = self.tasks.remove(&a) {
                    self.retired.push(t.handle);
                }
                if let Some(e) = states.get_mut(&a) {
                    e.token = 0;
                    e.state.check = None;
                    e.state.reason = "no health check".into();
                    if !e.state.healthy {
                        e.state.healthy = true;
                        e.state.transitions += 1;
                        e.state.since = now;
                        events.push(HealthEvent {
                            address: a,
                            healthy: true,
                            reason: "health check removed: always healthy".into(),
                        });
                    }
                }
            }
        }
        // Changed checks.
        for (a, t) in self.tasks.iter_mut() {
            if let Some(&c) = new_checks.get(a) {
                if t.spec != *c {
                    t.spec = c.clone();
                    let _ = t.cmd.send(c.clone());
                    if let Some(e) = states.get_mut(a) {
                        e.state.check = Some(c.clone());
                    }
                }
            }
        }
        // New threads: for known (previously unchecked) addresses they keep the state.
        for (spec, token, cmd, handle) in spawned {
            let a = spec.address;
            match states.get_mut(&a) {
                Some(e) => {
                    e.token = token;
                    e.state.check = Some(spec.clone());
                }
                None => {
                    let reason = initial_reason(new_healthy, &spec);
                    events.push(HealthEvent {
                        address: a,
                        healthy: new_healthy,
                        reason: reason.clone(),
                    });
                    states.insert(
                        a,
                        Entry {
                            state: BackendHealth {
                                address: a,
                                healthy: new_healthy,
                                reason,
                                check: Some(spec.clone()),
                                successes: 0,
                                failures: 0,
                                transitions: 0,
                                since: now,
                            },
                            token,
                        },
                    );
                }
            }
            self.tasks.insert(a, Task { spec, cmd, handle });
        }
        // New unchecked backends.
        for &a in &plan.unchecked {
            states.entry(a).or_insert_with(|| {
                events.push(HealthEvent {
                    address: a,
                    healthy: true,
                    reason: "no health check".into(),
                });
                Entry {
                    state: BackendHealth {
                        address: a,
                        healthy: true,
                        reason: "no health check".into(),
                        check: None,
                        successes: 0,
                        failures: 0,
                        transitions: 0,
                        since: now,
                    },
                    token: 0,
                }
            });
        }
        drop(states);
        // Keep a stable order: checked in plan order, then unchecked.
        self.order = plan
            .checks
            .iter()
            .map(|c| c.address)
            .chain(plan.unchecked.iter().copied())
            .collect();
        self.plan = plan;
        self.retired.retain(|h| !h.is_finished());
        Ok(events)
    }

    /// The current state of every backend: checked ones in plan order, then unchecked ones.
    pub fn states(&self) -> Vec<BackendHealth> {
        let states = self.shared.lock();
        self.order
            .iter()
            .filter_map(|a| states.get(a).map(|e| e.state.clone()))
            .collect()
    }

    /// The state of one backend.
    pub fn state(&self, address: IpAddr) -> Option<BackendHealth> {
        self.shared.lock().get(&address).map(|e| e.state.clone())
    }

    /// The plan in force.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Number of checker threads running (one per checked address).
    pub fn threads(&self) -> usize {
        self.tasks.len()
    }
}

impl Drop for HealthMonitor {
    fn drop(&mut self) {
        {
            let mut states = self.shared.lock();
            for e in states.values_mut() {
                e.token = 0;
            }
        }
        // Dropping the command senders wakes every sleeping thread; one in the middle of a check
        // notices after the check (bounded by its timeout). Wait a little for them, not forever:
        // a thread that outlives the monitor holds only its `Arc<Shared>` and sends nothing.
        let mut handles: Vec<JoinHandle<()>> = self
            .tasks
            .drain()
            .map(|(_, t)| t.handle)
            .chain(self.retired.drain(..))
            .collect();
        let deadline = Instant::now() + STOP_WAIT;
        while !handles.is_empty() && Instant::now() < deadline {
            handles.retain(|h| !h.is_finished());
            if !handles.is_empty() {
                thread::sleep(Duration::from_millis(2));
            }
        }
        for h in handles.into_iter().filter(|h| h.is_finished()) {
            let _ = h.join();
        }
    }
}

fn initial_reason(healthy: bool, spec: &PlannedCheck) -> String {
    if healthy {
        format!(
            "initial state: up until {} consecutive failed {} checks of {}",
            spec.check.fall,
            spec.kind(),
            spec.target()
        )
    } else {
        format!(
            "initial state: down until {} consecutive successful {} checks of {}",
            spec.check.rise,
            spec.kind(),
            spec.target()
        )
    }
}

/// A checker thread: check, update, sleep until the next check or a command.
fn run(shared: Arc<Shared>, token: u64, mut spec: PlannedCheck, cmd: Receiver<PlannedCheck>) {
    let (mut ok_run, mut fail_run) = (0u32, 0u32);
    let mut next = Instant::now();
    loop {
        let now = Instant::now();
        let msg = if next > now {
            match cmd.recv_timeout(next - now) {
                Ok(s) => Some(s),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match cmd.try_recv() {
                Ok(s) => Some(s),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            }
        };
        if let Some(s) = msg {
            // A changed check: counters restart, the new check runs at once.
            spec = s;
            ok_run = 0;
            fail_run = 0;
            next = Instant::now();
            continue;
        }
        let start = Instant::now();
        let c = &spec.check;
        let result = check(spec.target(), &c.kind, Duration::from_millis(c.timeout_ms));
        next = (start + Duration::from_millis(c.interval_ms)).max(Instant::now());

        let mut states = shared.lock();
        let Some(e) = states.get_mut(&spec.address) else {
            return;
        };
        if e.token != token {
            return;
        }
        let s = &mut e.state;
        let event = match result {
            Ok(desc) => {
                s.successes += 1;
                fail_run = 0;
                ok_run = ok_run.saturating_add(1);
                let up = !s.healthy && ok_run >= c.rise;
                let reason = if up {
                    format!(
                        "{} consecutive successful {} checks of {} ({desc})",
                        c.rise,
                        spec.kind(),
                        spec.target()
                    )
                } else {
                    desc
                };
                s.reason = reason.clone();
                up.then_some((true, reason))
            }
            Err(why) => {
                s.failures += 1;
                ok_run = 0;
                fail_run = fail_run.saturating_add(1);
                let down = s.healthy && fail_run >= c.fall;
                let reason = if down {
                    format!(
                        "{} consecutive failed {} checks of {}: {why}",
                        c.fall,
                        spec.kind(),
                        spec.target()
                    )
                } else {
                    why
                };
                s.reason = reason.clone();
                down.then_some((false, reason))
            }
        };
        if let Some((healthy, reason)) = event {
            s.healthy = healthy;
            s.transitions += 1;
            s.since = Instant::now();
            let _ = shared.events.send(HealthEvent {
                address: spec.address,
                healthy,
                reason,
            });
        }
    }
}

#[cfg(test)]
mod tests;
