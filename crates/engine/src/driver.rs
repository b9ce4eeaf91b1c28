//! The driver: the one receive → process → transmit → wait loop of flowplane.
//!
//! Every application runs its stages here: the load balancer, the switch, the Flowlet balancer and
//! the cluster node, on live sockets, on captures and on generated traffic, and so do the live
//! benchmarks. A worker is a [`Stage`] with its own ports (one socket per interface for live
//! ports, whose kernel or NIC spreads flows over the workers; or the dispatcher's lanes for
//! sources that do not, see [`crate::dispatch`]). [`start`] runs one thread per worker, pinned to
//! a CPU when asked; [`Core::pass`] is one round of a worker's loop:
//!
//! ```text
//!   for each port i of the worker (if the stage admits it):
//!       rx_burst(i) ─► stage.process(i, burst, outputs, now) ─► tx_burst(j) for every j with output
//!   stage.pass_done(some port filled its whole burst) ─► tx_burst(j) for every j with output
//!   nothing received for `spin` passes: stage.idle() once after `idle_after`, then sleep until a
//!   port is ready (poll on the sockets, or a wake-up from the dispatcher), at most `max_wait`
//!   every `maintain_every` of the clock: stage.maintain()
//! ```
//!
//! Time is the packets' receive stamp ([`Clock`]): `CLOCK_MONOTONIC` for live ports (read when
//! idle, so maintenance runs on an idle worker too), or the capture's or generator's own time,
//! so a capture replays the same way however fast the machine is. A stage's `now` never goes
//! backwards.
//!
//! The driver counts per worker and port (received, sent, refused, the port's own drops), never
//! allocates after start, and reports a worker that died (a panic) by index and message instead
//! of hanging: [`Running::check`] for a supervisor, [`Running::stop`] and [`Running::join`] at the
//! end. A port that is momentarily full (an in-memory ring) keeps its backlog in the worker's
//! [`Outputs`]; it goes out first on the next pass.
//!
//! ```
//! use fp_engine::driver::{self, Clock, Options, Worker};
//! use fp_engine::memory::MemPort;
//! use fp_engine::port::Port;
//! use fp_pipeline::packet::{Packet, Pool};
//! use fp_pipeline::stage::{Outputs, Stage};
//!
//! /// Count frames and send them back out of the port they came from.
//! struct Echo(u64);
//! impl Stage for Echo {
//!     fn process(&mut self, port: usize, rx: &mut Vec<Packet>, out: &mut Outputs,
//!                _: &mut Pool, _: u64) {
//!         self.0 += rx.len() as u64;
//!         out.to(port).append(rx);
//!     }
//! }
//!
//! let frames = (0..100u64).map(|i| (i * 1000, vec![0u8; 60]));
//! let ports: Vec<Box<dyn Port>> = vec![Box::new(MemPort::new(frames))];
//! let opts = Options { clock: Clock::Packets, ..Options::default() };
//! let running = driver::start(vec![Worker { stage: Echo(0), ports }], &opts).unwrap();
//! let done = running.join().unwrap(); // the MemPort is finite: the worker ends by itself
//! assert_eq!(done[0].stage.0, 100);
//! assert_eq!((done[0].ports[0].rx, done[0].ports[0].tx), (100, 100));
//! ```

use crate::port::{Port, PortStats, Wait};
use crate::sys;
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::stats::Counter;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Where a worker's time comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Clock {
    /// `CLOCK_MONOTONIC`: live ports stamp frames with it, and an idle worker reads it.
    #[default]
    Monotonic,
    /// The packets' own timestamps (a capture's, a generator's): time stands still while no
    /// packet comes.
    Packets,
}

/// How workers run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Thread names are `{name}-{worker}`.
    pub name: String,
    /// Pin worker `i` to CPU `first_cpu + i` (modulo the CPU count).
    pub pin: bool,
    /// See [`Options::pin`].
    pub first_cpu: usize,
    /// CPUs to pin the workers to, in order (worker `i` on `cpus[i % cpus.len()]`); when empty,
    /// worker `i` is pinned to `first_cpu + i`.
    pub cpus: Vec<usize>,
    /// The workers' clock.
    pub clock: Clock,
    /// How often [`Stage::maintain`] runs, in the clock's time.
    pub maintain_every: Duration,
    /// Wall time without input after which [`Stage::idle`] runs (once per idle period).
    pub idle_after: Duration,
    /// The longest sleep of an idle worker (bounds how late it notices a stop).
    pub max_wait: Duration,
    /// Empty passes before a worker sleeps.
    pub spin: u32,
    /// Packet buffers per worker.
    pub buffers: usize,
    /// After a stop, keep forwarding while frames still arrive, at most this long (frames in flight
    /// toward the worker are not lost); zero: stop at once.
    pub drain: Duration,
    /// Largest backlog kept for a momentarily full port; beyond, packets are dropped (counted).
    pub max_backlog: usize,
    /// Most frames taken from a port at once (1..=`MAX_BURST`).
    pub burst: usize,
    /// A worker that ends leaves its ports open in [`Finished::open_ports`] instead of closing
    /// them on its thread (an application handing over to a successor closes them after its
    /// last step).
    pub keep_ports_open: bool,
}

impl Options {
    /// The CPU worker `index` is pinned to (when [`Options::pin`] is set).
    pub fn cpu_of(&self, index: usize) -> usize {
        if self.cpus.is_empty() {
            self.first_cpu + index
        } else {
            self.cpus[index % self.cpus.len()]
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: "fp-worker".into(),
            pin: false,
            first_cpu: 0,
            cpus: Vec::new(),
            clock: Clock::Monotonic,
            maintain_every: Duration::from_millis(10),
            idle_after: Duration::from_millis(5),
            max_wait: Duration::from_millis(1),
            spin: 4,
            buffers: 8 * MAX_BURST,
            drain: Duration::ZERO,
            max_backlog: 8 * MAX_BURST,
            burst: MAX_BURST,
            keep_ports_open: false,
        }
    }
}

/// Worker threads: the number asked, else one per CPU (at least one).
pub fn workers_or_cpus(workers: Option<usize>) -> usize {
    workers
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1)
}

/// One worker's counters for one of its ports. One writer (the worker); readers sum over workers.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx: Counter,
    /// Frames the port took for sending.
    pub tx: Counter,
    /// Frames the port refused, or that were dropped from a backlog that grew too long.
    pub tx_dropped: Counter,
    /// The port's own receive drops (kernel ring full, frame too big), copied from
    /// [`PortStats::rx_dropped`] at maintenance time.
    pub rx_dropped: Counter,
}
const _: () = assert!(std::mem::size_of::<PortCounters>() == 64);

/// One worker's counters (see [`PortCounters`]).
#[derive(Debug)]
pub struct WorkerCounters {
    /// Per port of the worker, in port order.
    pub ports: Box<[PortCounters]>,
    /// Bursts handed to the stage.
    pub bursts: Counter,
    /// Times the worker went to sleep for lack of input.
    pub sleeps: Counter,
}

impl WorkerCounters {
    /// Zeroed counters for a worker with `ports` ports.
    pub fn new(ports: usize) -> WorkerCounters {
        WorkerCounters {
            ports: (0..ports).map(|_| PortCounters::default()).collect(),
            bursts: Counter::default(),
            sleeps: Counter::default(),
        }
    }
}

/// A worker to run: its stage and its ports (indexed as the stage sees them).
pub struct Worker<S> {
    /// What the worker does with bursts.
    pub stage: S,
    /// Its ports.
    pub ports: Vec<Box<dyn Port>>,
}

/// A worker that ended: its stage (for final reports) and its ports' counters.
#[derive(Debug)]
pub struct Finished<S> {
    /// The stage, as the worker left it.
    pub stage: S,
    /// Each port's own counters at the end.
    pub ports: Vec<PortStats>,
    /// The driver's counters of this worker.
    pub counters: Arc<WorkerCounters>,
    /// CPU time the worker's thread used, in ns (read by [`Core::into_finished`] on the thread
    /// that ran the worker).
    pub cpu_ns: u64,
    /// The worker's ports, still open when [`start`]'s workers end with
    /// [`Options::keep_ports_open`] (closing a socket waits for the kernel's RCU grace period,
    /// milliseconds an application handing over to a successor need not spend before its last
    /// step): closed by [`Finished::close_ports`] or with this.
    pub open_ports: Option<Box<dyn std::any::Any + Send>>,
}

impl<S> Finished<S> {
    /// Close the worker's ports now (they also close when this is dropped).
    pub fn close_ports(&mut self) {
        self.open_ports = None;
    }
}

/// Why running workers failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The operating system refused a thread.
    #[error("starting worker {0}: {1}")]
    Spawn(usize, std::io::Error),
    /// A worker thread ended without finishing (it panicked).
    #[error("worker {0} died: {1}")]
    WorkerDied(usize, String),
    /// A worker was given no port.
    #[error("worker {0} has no port")]
    NoPorts(usize),
}

/// One worker's state and its pass: the receive → process → transmit step, usable on its own by
/// deterministic harnesses that interleave several workers on one thread (which may use a port
/// type of their own, `P`, to reach their ports' contents).
pub struct Core<S, P = Box<dyn Port>> {
    stage: S,
    ports: Vec<P>,
    pool: Pool,
    rx: Vec<Packet>,
    out: Outputs,
    counters: Arc<WorkerCounters>,
    now: u64,
    max_backlog: usize,
    burst: usize,
    /// The ports' descriptors for a wait (kept between waits: no allocation once grown).
    fds: Vec<RawFd>,
}

impl<S: Stage, P: Port> Core<S, P> {
    /// A worker with `buffers` packet buffers.
    pub fn new(stage: S, ports: Vec<P>, buffers: usize) -> Core<S, P> {
        let n = ports.len();
        Core {
            stage,
            ports,
            pool: Pool::new(buffers),
            rx: burst(),
            out: Outputs::new(n),
            counters: Arc::new(WorkerCounters::new(n)),
            now: 0,
            max_backlog: 8 * MAX_BURST,
            burst: MAX_BURST,
            fds: Vec::new(),
        }
    }

    /// Take at most `frames` (1..=`MAX_BURST`) from a port at once.
    pub fn set_burst(&mut self, frames: usize) {
        self.burst = frames.clamp(1, MAX_BURST);
    }

    /// The stage.
    pub fn stage(&self) -> &S {
        &self.stage
    }

    /// The stage, writable (harnesses; not while the worker runs on its thread).
    pub fn stage_mut(&mut self) -> &mut S {
        &mut self.stage
    }

    /// The ports.
    pub fn ports(&self) -> &[P] {
        &self.ports
    }

    /// Port `i`, writable.
    pub fn port_mut(&mut self, i: usize) -> &mut P {
        &mut self.ports[i]
    }

    /// Set the largest backlog kept for a momentarily full port.
    pub fn set_max_backlog(&mut self, frames: usize) {
        self.max_backlog = frames;
    }

    /// The worker's output bursts (with any backlog of a congested port).
    pub fn outputs(&self) -> &Outputs {
        &self.out
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<WorkerCounters> {
        &self.counters
    }

    /// The worker's time (the newest burst's, or the clock's when idle).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Advance the worker's time to `now_ns` (never backwards).
    pub fn advance(&mut self, now_ns: u64) {
        self.now = self.now.max(now_ns);
    }

    /// One pass: receive a burst from every port the stage admits, process it, transmit the
    /// outputs. Returns the frames received (0: nothing to do).
    #[inline]
    pub fn pass(&mut self) -> usize {
        let (mut got, mut full) = (0, false);
        for (j, p) in self.ports.iter().enumerate() {
            self.out.set_room(j, p.tx_room());
        }
        for i in 0..self.ports.len() {
            if !self.stage.admit(i, &self.out) {
                continue;
            }
            let k = self.ports[i].rx_burst(&mut self.pool, &mut self.rx, self.burst);
            if k == 0 {
                continue;
            }
            got += k;
            full |= k >= self.burst;
            self.counters.ports[i].rx.add(k as u64);
            self.counters.bursts.inc();
            let mut newest = 0;
            for p in self.rx.iter_mut() {
                p.port = i as u16;
                newest = newest.max(p.ts_ns);
            }
            self.now = self.now.max(newest);
            self.stage
                .process(i, &mut self.rx, &mut self.out, &mut self.pool, self.now);
            // A stage hands every packet on; anything left is a bug, but must not leak buffers.
            self.pool.put_all(&mut self.rx);
            self.transmit();
        }
        let queued = self.queued();
        self.stage
            .pass_done(full, self.now, &mut self.out, &mut self.pool);
        // What the stage emitted now, or (after an empty pass) a congested port's backlog
        // offered again.
        if self.queued() != queued || (got == 0 && queued != 0) {
            self.transmit();
        }
        got
    }

    /// Packets waiting in the output bursts.
    #[inline]
    fn queued(&self) -> usize {
        (0..self.out.ports()).map(|j| self.out.queued(j)).sum()
    }

    /// Hand every output burst to its port.
    #[inline]
    pub fn transmit(&mut self) {
        for j in 0..self.out.ports() {
            let b = self.out.to(j);
            if b.is_empty() {
                continue;
            }
            let len = b.len();
            let sent = self.ports[j].tx_burst(b, &mut self.pool);
            let c = &self.counters.ports[j];
            c.tx.add(sent as u64);
            let left = b.len();
            let mut dropped = len - sent - left;
            if left > self.max_backlog {
                // The port stays full: keep the oldest, drop the newest.
                dropped += left - self.max_backlog;
                for p in b.drain(self.max_backlog..) {
                    self.pool.put(p);
                }
            }
            if dropped > 0 {
                c.tx_dropped.add(dropped as u64);
            }
            // What the port takes now (it may have filled up with this burst, or before it).
            self.out
                .set_room(j, if left > 0 { 0 } else { self.ports[j].tx_room() });
        }
    }

    /// Run the stage's maintenance at the worker's time and transmit what it emits.
    pub fn maintain(&mut self) {
        self.stage.maintain(self.now, &mut self.out, &mut self.pool);
        self.transmit();
    }

    /// Run the stage's idle hook and transmit what it emits.
    pub fn idle(&mut self) {
        self.stage.idle(self.now, &mut self.out, &mut self.pool);
        self.transmit();
    }

    /// Copy each port's own receive drops into the counters (a system call for some ports).
    pub fn publish_port_stats(&mut self) {
        for (p, c) in self.ports.iter().zip(self.counters.ports.iter()) {
            c.rx_dropped.set(p.stats().rx_dropped);
        }
    }

    /// True when every port is exhausted and nothing waits to be sent.
    pub fn exhausted(&self) -> bool {
        self.out.is_empty() && self.ports.iter().all(|p| p.exhausted())
    }

    /// Whether a frame is known to be waiting on some port.
    fn rx_ready(&self) -> bool {
        self.ports.iter().any(|p| p.rx_ready())
    }

    /// Sleep until a port is ready or `timeout` passes: `poll(2)` on every port's descriptor, or
    /// a thread park when the ports are all fed by other threads. A worker with both kinds polls
    /// its descriptors for at most `timeout` (the driver's `max_wait`, 1 ms by default): a
    /// descriptor wakes it at once, a thread's wake-up within `timeout`.
    pub fn wait(&mut self, timeout: Duration) {
        if self.rx_ready() {
            return;
        }
        self.fds.clear();
        let mut park = false;
        for p in &self.ports {
            match p.wait() {
                Wait::Readable(fd) => self.fds.push(fd),
                Wait::Never => {}
                Wait::Unpark => park = true,
            }
        }
        self.counters.sleeps.inc();
        if !self.fds.is_empty() {
            // An error here (e.g. a descriptor closed under us) only ends the sleep early.
            let _ = sys::poll_readable(&self.fds, timeout);
        } else if park {
            std::thread::park_timeout(timeout);
        } else {
            std::thread::yield_now();
        }
    }

    /// End: let the stage finish, send what it emits, flush the ports. Packets a port still
    /// refuses are dropped (counted).
    pub fn finish(&mut self) {
        self.stage.finish(self.now, &mut self.out, &mut self.pool);
        self.transmit();
        // What a port still refuses is dropped, counted on that port.
        for (j, c) in self.counters.ports.iter().enumerate() {
            let b = self.out.to(j);
            if !b.is_empty() {
                c.tx_dropped.add(b.len() as u64);
                self.pool.put_all(b);
            }
        }
        self.publish_port_stats();
        for p in &mut self.ports {
            let _ = p.flush();
        }
    }

    /// The stage and the counters of a worker that finished.
    pub fn into_finished(self) -> Finished<S> {
        Finished {
            cpu_ns: sys::thread_cpu_ns(),
            ports: self.ports.iter().map(|p| p.stats()).collect(),
            counters: self.counters,
            stage: self.stage,
            open_ports: None,
        }
    }

    /// [`into_finished`](Self::into_finished), keeping the ports open in
    /// [`Finished::open_ports`].
    pub fn into_finished_open(mut self) -> Finished<S>
    where
        P: Send + 'static,
    {
        let ports = std::mem::take(&mut self.ports);
        let stats = ports.iter().map(|p| p.stats()).collect();
        Finished {
            cpu_ns: sys::thread_cpu_ns(),
            ports: stats,
            counters: self.counters,
            stage: self.stage,
            open_ports: Some(Box::new(ports)),
        }
    }
}

/// How often a worker copies its ports' own drop counters (a system call for AF_PACKET).
const PORT_STATS_EVERY: Duration = Duration::from_millis(100);

/// A worker's loop, on the calling thread: passes while there is input, the stage's hooks on the
/// clock, sleep when idle, until `stop` is set (and the drain is over) or every port is exhausted;
/// then the stage finishes ([`Core::finish`]). [`start`] runs it on a thread per worker; a harness
/// may run it on threads of its own.
pub fn run<S: Stage, P: Port>(
    core: &mut Core<S, P>,
    index: usize,
    opts: &Options,
    stop: &AtomicBool,
) {
    if opts.pin {
        sys::pin_to_cpu(opts.cpu_of(index));
    }
    let every = opts.maintain_every.as_nanos() as u64;
    let stats_every = PORT_STATS_EVERY.as_nanos() as u64;
    if opts.clock == Clock::Monotonic {
        core.advance(sys::monotonic_ns());
    }
    let mut last_maintain = core.now();
    let mut last_stats = sys::monotonic_ns();
    let mut empty_passes = 0u32;
    // Since when the worker has had no input (read at that transition only, not per pass).
    let mut quiet_since: Option<Instant> = None;
    let mut idle_done = false;
    let mut stopping: Option<Instant> = None;
    core.maintain();
    loop {
        let got = core.pass();
        if got > 0 {
            empty_passes = 0;
            quiet_since = None;
            idle_done = false;
        } else {
            empty_passes += 1;
            if core.exhausted() {
                break;
            }
            if opts.clock == Clock::Monotonic {
                core.advance(sys::monotonic_ns());
            }
        }
        if stopping.is_none() && stop.load(Ordering::Relaxed) {
            stopping = Some(Instant::now());
        }
        if let Some(since) = stopping {
            // Drain: go on while frames still come or a port's backlog waits, at most `drain`;
            // end at the first quiet moment (a pass after a sleep that brought nothing).
            let quiet = got == 0 && empty_passes > opts.spin && core.outputs().is_empty();
            if quiet || since.elapsed() >= opts.drain {
                break;
            }
        }
        if got == 0 && empty_passes >= opts.spin {
            let quiet = *quiet_since.get_or_insert_with(Instant::now);
            if !idle_done && quiet.elapsed() >= opts.idle_after {
                idle_done = true;
                core.idle();
            }
            core.wait(opts.max_wait);
            if opts.clock == Clock::Monotonic {
                core.advance(sys::monotonic_ns());
            }
        }
        let now = core.now();
        if now.saturating_sub(last_maintain) >= every {
            last_maintain = now;
            core.maintain();
            let wall = sys::monotonic_ns();
            if wall.saturating_sub(last_stats) >= stats_every {
                last_stats = wall;
                core.publish_port_stats();
            }
        }
    }
    core.finish();
}

struct Handle<S> {
    thread: Option<JoinHandle<Finished<S>>>,
    finished: Arc<AtomicBool>,
    counters: Arc<WorkerCounters>,
}

/// Workers running on their threads.
pub struct Running<S> {
    stop: Arc<AtomicBool>,
    workers: Vec<Handle<S>>,
}

/// Start one thread per worker.
pub fn start<S: Stage + 'static>(
    workers: Vec<Worker<S>>,
    opts: &Options,
) -> Result<Running<S>, EngineError> {
    if let Some(i) = workers.iter().position(|w| w.ports.is_empty()) {
        return Err(EngineError::NoPorts(i));
    }
    let mut running = Running {
        stop: Arc::new(AtomicBool::new(false)),
        workers: Vec::with_capacity(workers.len()),
    };
    for (i, w) in workers.into_iter().enumerate() {
        let mut core: Core<S> = Core::new(w.stage, w.ports, opts.buffers);
        core.max_backlog = opts.max_backlog;
        core.set_burst(opts.burst);
        let counters = core.counters.clone();
        let finished = Arc::new(AtomicBool::new(false));
        let (stop2, fin2, o) = (running.stop.clone(), finished.clone(), opts.clone());
        let thread = std::thread::Builder::new()
            .name(format!("{}-{i}", opts.name))
            .spawn(move || {
                run(&mut core, i, &o, &stop2);
                fin2.store(true, Ordering::Release);
                if o.keep_ports_open {
                    core.into_finished_open()
                } else {
                    core.into_finished()
                }
            })
            // On error, dropping `running` stops and joins the workers already started.
            .map_err(|e| EngineError::Spawn(i, e))?;
        running.workers.push(Handle {
            thread: Some(thread),
            finished,
            counters,
        });
    }
    Ok(running)
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked".to_string()
    }
}

impl<S> Running<S> {
    /// Each worker's counters (share them with a metrics reader).
    pub fn counters(&self) -> Vec<Arc<WorkerCounters>> {
        self.workers.iter().map(|w| w.counters.clone()).collect()
    }

    /// The worker threads (to wake them: the dispatcher unparks a worker it fed).
    pub fn threads(&self) -> Vec<Thread> {
        self.workers
            .iter()
            .filter_map(|w| w.thread.as_ref().map(|t| t.thread().clone()))
            .collect()
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True with no worker.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Whether every worker has finished on its own (all its ports exhausted).
    pub fn finished(&self) -> bool {
        self.workers
            .iter()
            .all(|w| w.finished.load(Ordering::Acquire))
    }

    /// An error naming the first worker whose thread ended without finishing (a panic), if any.
    pub fn check(&self) -> Result<(), EngineError> {
        for (i, w) in self.workers.iter().enumerate() {
            let ended = w.thread.as_ref().is_none_or(|t| t.is_finished());
            if ended && !w.finished.load(Ordering::Acquire) {
                return Err(EngineError::WorkerDied(
                    i,
                    "the thread ended unexpectedly".into(),
                ));
            }
        }
        Ok(())
    }

    /// Ask the workers to stop (after their drain) without waiting.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads() {
            t.unpark();
        }
    }

    /// Stop the workers and wait for them.
    pub fn stop(self) -> Result<Vec<Finished<S>>, EngineError> {
        self.request_stop();
        self.join()
    }

    /// Wait until every worker has ended (on its own, for finite ports, or after a stop).
    pub fn join(mut self) -> Result<Vec<Finished<S>>, EngineError> {
        let mut out = Vec::with_capacity(self.workers.len());
        let mut died = None;
        for (i, w) in self.workers.iter_mut().enumerate() {
            if let Some(t) = w.thread.take() {
                match t.join() {
                    Ok(f) => out.push(f),
                    Err(p) => {
                        died.get_or_insert(EngineError::WorkerDied(i, panic_text(p)));
                    }
                }
            }
        }
        match died {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

impl<S> Drop for Running<S> {
    fn drop(&mut self) {
        // Workers never outlive their handle: stop and join what is still running.
        self.stop.store(true, Ordering::Relaxed);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                t.thread().unpark();
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemPort, NullPort};

    struct Fwd {
        to: usize,
        maintained: u64,
        idled: u64,
        finished: bool,
    }
    impl Stage for Fwd {
        fn process(
            &mut self,
            _: usize,
            rx: &mut Vec<Packet>,
            out: &mut Outputs,
            _: &mut Pool,
            _: u64,
        ) {
            out.to(self.to).append(rx);
        }
        fn maintain(&mut self, _: u64, _: &mut Outputs, _: &mut Pool) {
            self.maintained += 1;
        }
        fn idle(&mut self, _: u64, _: &mut Outputs, _: &mut Pool) {
            self.idled += 1;
        }
        fn finish(&mut self, _: u64, _: &mut Outputs, _: &mut Pool) {
            self.finished = true;
        }
    }

    fn fwd(to: usize) -> Fwd {
        Fwd {
            to,
            maintained: 0,
            idled: 0,
            finished: false,
        }
    }

    /// Records the port index every received packet carries.
    struct Ports(Vec<(usize, u16)>);
    impl Stage for Ports {
        fn process(
            &mut self,
            port: usize,
            rx: &mut Vec<Packet>,
            _: &mut Outputs,
            pool: &mut Pool,
            _: u64,
        ) {
            self.0.extend(rx.iter().map(|p| (port, p.port)));
            pool.put_all(rx);
        }
    }

    /// A port that receives nothing and waits as told.
    struct Waits(Wait);
    impl Port for Waits {
        fn name(&self) -> &str {
            "waits"
        }
        fn rx_burst(&mut self, _: &mut Pool, _: &mut Vec<Packet>, _: usize) -> usize {
            0
        }
        fn tx_burst(&mut self, b: &mut Vec<Packet>, pool: &mut Pool) -> usize {
            let n = b.len();
            pool.put_all(b);
            n
        }
        fn stats(&self) -> crate::port::PortStats {
            crate::port::PortStats::default()
        }
        fn wait(&self) -> Wait {
            self.0
        }
    }

    /// A pipe whose read end the test makes readable.
    fn pipe() -> (std::fs::File, std::fs::File) {
        let (r, w) = std::io::pipe().expect("pipe");
        (
            std::fs::File::from(std::os::fd::OwnedFd::from(r)),
            std::fs::File::from(std::os::fd::OwnedFd::from(w)),
        )
    }

    #[test]
    fn a_descriptor_wakes_a_worker_that_also_has_a_port_fed_by_a_thread() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (r, mut w) = pipe();
        let ports = vec![Waits(Wait::Unpark), Waits(Wait::Readable(r.as_raw_fd()))];
        let mut core: Core<Ports, Waits> = Core::new(Ports(Vec::new()), ports, 8);
        w.write_all(b"x").unwrap();
        let t = Instant::now();
        core.wait(Duration::from_secs(10));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the readable descriptor was ignored for the parked port: slept {:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_worker_waits_on_more_than_64_descriptors() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let pipes: Vec<_> = (0..70).map(|_| pipe()).collect();
        let ports: Vec<Waits> = pipes
            .iter()
            .map(|(r, _)| Waits(Wait::Readable(r.as_raw_fd())))
            .collect();
        let mut core: Core<Ports, Waits> = Core::new(Ports(Vec::new()), ports, 8);
        (&pipes[69].1).write_all(b"x").unwrap();
        let t = Instant::now();
        core.wait(Duration::from_secs(10));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the 70th descriptor was ignored: slept {:?}",
            t.elapsed()
        );
    }

    /// Holds what it receives while a pass says more is waiting, sends it on otherwise (the
    /// switch's gathering): records what each pass told it.
    struct Holds {
        held: Vec<Packet>,
        passes: Vec<bool>,
    }
    impl Stage for Holds {
        fn process(
            &mut self,
            _: usize,
            rx: &mut Vec<Packet>,
            _: &mut Outputs,
            _: &mut Pool,
            _: u64,
        ) {
            self.held.append(rx);
        }
        fn pass_done(&mut self, more: bool, _: u64, out: &mut Outputs, _: &mut Pool) {
            self.passes.push(more);
            if !more {
                out.to(1).append(&mut self.held);
            }
        }
    }

    #[test]
    fn every_pass_tells_the_stage_whether_a_burst_came_full() {
        let frames: Vec<_> = (0..70u64).map(|i| (i, vec![i as u8; 60])).collect();
        let ports: Vec<Box<dyn Port>> = vec![
            Box::new(MemPort::new(frames)),
            Box::new(NullPort::default()),
        ];
        let stage = Holds {
            held: Vec::new(),
            passes: Vec::new(),
        };
        let mut core = Core::new(stage, ports, 256);
        // 70 frames in bursts of 32: full, full, 6, then nothing.
        for _ in 0..4 {
            core.pass();
        }
        assert_eq!(core.stage().passes, [true, true, false, false]);
        assert!(core.stage().held.is_empty());
        assert_eq!(core.counters.ports[1].tx.get(), 70);
    }

    #[test]
    fn every_received_packet_carries_its_port_index() {
        let frames = |n: u64| (0..n).map(|i| (i, vec![0u8; 60])).collect::<Vec<_>>();
        let ports: Vec<MemPort> = vec![MemPort::new(frames(3)), MemPort::new(frames(40))];
        let mut core: Core<Ports, MemPort> = Core::new(Ports(Vec::new()), ports, 64);
        while core.pass() > 0 {}
        let seen = &core.stage().0;
        assert_eq!(seen.len(), 43);
        assert!(seen.iter().all(|&(port, tagged)| port == tagged as usize));
    }

    #[test]
    fn finite_ports_end_the_worker_and_everything_is_forwarded() {
        // 100 ms of packet time: maintenance runs on the packets' clock, about every 10 ms of it
        // (bursts of 32 frames span 3.2 ms).
        let frames: Vec<_> = (0..1000u64)
            .map(|i| (i * 100_000, vec![i as u8; 64]))
            .collect();
        let ports: Vec<Box<dyn Port>> = vec![
            Box::new(MemPort::new(frames)),
            Box::new(NullPort::default()),
        ];
        let opts = Options {
            clock: Clock::Packets,
            ..Options::default()
        };
        let r = start(
            vec![Worker {
                stage: fwd(1),
                ports,
            }],
            &opts,
        )
        .unwrap();
        let f = r.join().unwrap().pop().unwrap();
        assert_eq!(f.ports[0].rx, 1000);
        assert_eq!(f.ports[1].tx, 1000);
        assert_eq!(f.counters.ports[0].rx.get(), 1000);
        assert_eq!(f.counters.ports[1].tx.get(), 1000);
        assert!(f.stage.finished);
        assert!(
            (8..=12).contains(&f.stage.maintained),
            "{}",
            f.stage.maintained
        );
    }

    #[test]
    fn an_idle_live_worker_sleeps_maintains_and_stops() {
        /// Never has input, never ends: waits on an unpark.
        struct Quiet;
        impl Port for Quiet {
            fn name(&self) -> &str {
                "quiet"
            }
            fn rx_burst(&mut self, _: &mut Pool, _: &mut Vec<Packet>, _: usize) -> usize {
                0
            }
            fn tx_burst(&mut self, b: &mut Vec<Packet>, pool: &mut Pool) -> usize {
                pool.put_all(b);
                0
            }
            fn stats(&self) -> PortStats {
                PortStats::default()
            }
            fn wait(&self) -> Wait {
                Wait::Unpark
            }
        }
        let opts = Options {
            maintain_every: Duration::from_millis(5),
            ..Options::default()
        };
        let ports: Vec<Box<dyn Port>> = vec![Box::new(Quiet)];
        let r = start(
            vec![Worker {
                stage: fwd(0),
                ports,
            }],
            &opts,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        r.check().unwrap();
        assert!(!r.finished());
        let f = r.stop().unwrap().pop().unwrap();
        assert!(f.stage.maintained >= 5, "{}", f.stage.maintained);
        assert_eq!(f.stage.idled, 1, "once per idle period");
        assert!(f.counters.sleeps.get() > 10);
    }

    #[test]
    fn a_worker_that_panics_is_reported_by_index() {
        struct Boom;
        impl Stage for Boom {
            fn process(
                &mut self,
                _: usize,
                _: &mut Vec<Packet>,
                _: &mut Outputs,
                _: &mut Pool,
                _: u64,
            ) {
                panic!("boom");
            }
        }
        let ports = |n: u64| -> Vec<Box<dyn Port>> {
            vec![Box::new(MemPort::new((0..n).map(|i| (i, vec![0u8; 60]))))]
        };
        // Worker 1 panics on its first burst; worker 0 has nothing to do and ends.
        let workers = vec![
            Worker {
                stage: Box::new(fwd(0)) as Box<dyn Stage>,
                ports: ports(0),
            },
            Worker {
                stage: Box::new(Boom) as Box<dyn Stage>,
                ports: ports(5),
            },
        ];
        let r = start(workers, &Options::default()).unwrap();
        let t = Instant::now();
        while r.check().is_ok() {
            assert!(t.elapsed() < Duration::from_secs(10), "death not reported");
            std::thread::sleep(Duration::from_millis(1));
        }
        match r.join() {
            Err(EngineError::WorkerDied(1, m)) => assert_eq!(m, "boom"),
            other => panic!("{:?}", other.map(|v| v.len())),
        }
    }

    #[test]
    fn a_full_port_keeps_a_backlog_in_order() {
        /// Takes at most 3 packets per call, records them.
        struct Narrow(Vec<u8>, PortStats);
        impl Port for Narrow {
            fn name(&self) -> &str {
                "narrow"
            }
            fn rx_burst(&mut self, _: &mut Pool, _: &mut Vec<Packet>, _: usize) -> usize {
                0
            }
            fn tx_burst(&mut self, b: &mut Vec<Packet>, pool: &mut Pool) -> usize {
                let n = b.len().min(3);
                for p in b.drain(..n) {
                    assert_eq!(p.data()[0] as usize, self.0.len(), "reordered");
                    self.0.push(p.data()[0]);
                    pool.put(p);
                }
                self.1.tx += n as u64;
                n
            }
            fn tx_room(&self) -> usize {
                3
            }
            fn exhausted(&self) -> bool {
                true // a sink: nothing to receive
            }
            fn stats(&self) -> PortStats {
                self.1
            }
        }
        let frames: Vec<_> = (0..40u64).map(|i| (i, vec![i as u8; 60])).collect();
        let ports: Vec<Box<dyn Port>> = vec![
            Box::new(MemPort::new(frames)),
            Box::new(Narrow(Vec::new(), PortStats::default())),
        ];
        let mut core = Core::new(fwd(1), ports, 256);
        assert_eq!(core.pass(), 32);
        assert_eq!(core.out.queued(1), 29);
        assert_eq!(core.out.room(1), 0);
        while !core.exhausted() {
            core.pass();
        }
        core.finish();
        let f = core.into_finished();
        assert_eq!(f.ports[1].tx, 40);
        assert_eq!(f.counters.ports[1].tx_dropped.get(), 0);
    }
}
