//! The runner: what happens between `main` and an application's stage and control hooks.
//!
//! Start-up, in order: the signal handlers (`SIGTERM`/`SIGINT`, `SIGHUP`) and the systemd
//! notifier; the application ([`Service`]) is made, with the [`Events`] sender its own threads use;
//! the ports are opened by the chosen port driver; one stage per worker is made, each with its
//! tracer queue; the engine's driver starts the workers; the admin server listens;
//! [`Service::started`] runs; `READY=1`.
//!
//! The control thread (the caller's) then sleeps until something happens — a message on one
//! channel: a signal (forwarded by a thread that sleeps on the self-pipe,
//! `fp_control::signal::SignalWait`), `POST /reload` from the admin server, an application event —
//! or until the next tick: every [`HOUSEKEEPING`] it checks that every worker lives, pings the
//! systemd watchdog and collects trace records; every [`Service::tick_every`] it calls
//! [`Service::tick`]. Reloads (`SIGHUP` or `POST /reload`) run on this thread, bracketed by
//! `RELOADING=1` and `READY=1`; the admin server waits for the answer, so `/metrics`, which reads
//! only the [`View`], is never held up by a reload.
//!
//! Shutdown (`SIGTERM`/`SIGINT`, [`Events::stop`], a dead worker or a hook's error), in order:
//! [`Service::drain`] (withdraw from the network; the workers keep forwarding for the time it
//! returns), `STOPPING=1`, the drain, [`Service::shutdown`], the admin server, the workers (with
//! a log line of every port's counters), [`Service::finished`], and last the ports' control (the
//! XDP program and promiscuous mode go with it).

use crate::args::LiveOptions;
use anyhow::{anyhow, Context as _, Result};
use fp_control::admin::{AdminHandler, AdminServer, ReloadError};
use fp_control::log;
use fp_control::metrics::{self, Exposition, Kind};
use fp_control::signal::{ReloadSignal, SignalWait, TerminateSignal};
use fp_control::systemd::Notifier;
use fp_control::trace::{Record, TraceLog, DEFAULT_CAPACITY, QUEUE_CAPACITY};
use fp_engine::driver::{self, Finished, Options, Running, Worker, WorkerCounters};
use fp_engine::live::{Capture, LiveControl, LiveSpec, Opened};
use fp_engine::port::PortStats;
use fp_pipeline::stage::Stage;
use fp_pipeline::trace::{probe_queue, ProbeSender, TracerConfig};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the runner checks the workers, pings the watchdog and collects trace records.
pub const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// How long `POST /reload` waits for the control thread's answer.
const RELOAD_WAIT: Duration = Duration::from_secs(120);

/// The interfaces an application opens and what it captures on them.
#[derive(Clone, Debug)]
pub struct Ports {
    /// The interfaces; port index = position.
    pub interfaces: Vec<String>,
    /// What to receive.
    pub capture: Capture,
    /// Receive ring memory per AF_PACKET socket (`None`: the driver's default).
    pub ring_bytes: Option<usize>,
}

/// What the admin server reads, from its own threads: counters the workers write (single-writer
/// atomics) and state the control thread publishes. It must not wait for the control thread.
pub trait View: Send + Sync + 'static {
    /// The application's metric families (the runner adds the common ones).
    fn metrics(&self, e: &mut Exposition);
    /// The application's lines of `GET /status` (the runner writes the header).
    fn status(&self, s: &mut String);
}

/// Worker `worker` of `workers`, for [`Service::stage`].
#[derive(Clone, Copy, Debug)]
pub struct Setup<'a> {
    /// This worker's index.
    pub worker: usize,
    /// How many workers the driver opened (a driver may open fewer than asked).
    pub workers: usize,
    /// What was opened (for logs and status pages).
    pub description: &'a str,
}

/// An application as the runner runs it: a stage factory and control hooks. Every hook runs on
/// the control thread; only [`Service::view`]'s value is read from other threads.
pub trait Service: Send + Sized + 'static {
    /// What each worker runs.
    type Stage: Stage + 'static;
    /// What a worker records about a probe (`fp_pipeline::trace`).
    type Probe: Record;
    /// Messages from the application's own threads (health checks, a watch), handed to
    /// [`Service::event`].
    type Event: Send + 'static;
    /// What the admin server reads.
    type View: View;

    /// The application's name: thread names, the `application` label of `flowplane_info`.
    fn name(&self) -> &'static str;

    /// The interfaces to open.
    fn ports(&self) -> Ports;

    /// Adjust the driver's options (buffers, burst, drain); name and pinning are set already.
    fn driver_options(&self, _o: &mut Options) {}

    /// Make worker `setup.worker`'s stage; `probes` is its tracer queue.
    fn stage(&mut self, setup: Setup<'_>, probes: ProbeSender<Self::Probe>) -> Result<Self::Stage>;

    /// The admin server's view (asked once, when the workers run; `engine` are their driver
    /// counters, one per worker, for views that read a port's frames).
    fn view(&self, engine: &[Arc<WorkerCounters>]) -> Arc<Self::View>;

    /// The workers forward and the admin server listens: start what had to wait for that (BGP
    /// announcements, registering with the cluster).
    fn started(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        Ok(())
    }

    /// The status line the service manager shows once ready.
    fn ready_status(&self) -> String;

    /// How often [`Service::tick`] runs.
    fn tick_every(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Periodic work; an error stops the service.
    fn tick(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        Ok(())
    }

    /// A message from the application's own threads; an error stops the service.
    fn event(&mut self, _e: Self::Event, _cx: &mut Context<'_>) -> Result<()> {
        Ok(())
    }

    /// Re-read the configuration: the new generation, or why it was rejected, naming the field
    /// (the running configuration stays).
    fn reload(&mut self, _cx: &mut Context<'_>) -> Result<u64> {
        Err(anyhow!(
            "{} has no configuration file to reload (its settings are command-line arguments)",
            self.name()
        ))
    }

    /// Shutdown begins (`clean`: on request, not after a failure): withdraw from the network.
    /// Returns how long the workers keep forwarding while traffic moves away.
    fn drain(&mut self, _cx: &mut Context<'_>, _clean: bool) -> Duration {
        Duration::ZERO
    }

    /// The drain is over; the workers still run. Stop the control side's helpers.
    fn shutdown(&mut self) {}

    /// The workers have stopped: what they leave (a summary for the log).
    fn finished(&mut self, _stages: Vec<Finished<Self::Stage>>) {}
}

enum Msg<E> {
    Terminate,
    Reload(Option<mpsc::SyncSender<Result<u64, ReloadError>>>),
    App(E),
}

/// Sends application events to the control thread (clone it into the application's threads).
pub struct Events<E> {
    tx: mpsc::Sender<Msg<E>>,
}

impl<E> Clone for Events<E> {
    fn clone(&self) -> Self {
        Events {
            tx: self.tx.clone(),
        }
    }
}

impl<E> std::fmt::Debug for Events<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

/// The control thread has ended; nobody takes events any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl<E: Send> Events<E> {
    /// Hand `e` to [`Service::event`] on the control thread.
    pub fn send(&self, e: E) -> Result<(), Closed> {
        self.tx.send(Msg::App(e)).map_err(|_| Closed)
    }

    /// Ask for a configuration reload, as `SIGHUP` does.
    pub fn reload(&self) -> Result<(), Closed> {
        self.tx.send(Msg::Reload(None)).map_err(|_| Closed)
    }

    /// Ask the service to shut down, as `SIGTERM` does.
    pub fn stop(&self) -> Result<(), Closed> {
        self.tx.send(Msg::Terminate).map_err(|_| Closed)
    }
}

/// What a control hook may touch besides its own state.
pub struct Context<'a> {
    live: &'a LiveControl,
    notify: &'a mut Notifier,
    workers: usize,
}

impl Context<'_> {
    /// The opened interfaces' control (change the captured destinations).
    pub fn live(&self) -> &LiveControl {
        self.live
    }

    /// A status line for the service manager.
    pub fn status(&mut self, s: &str) {
        self.notify.status(s);
    }

    /// How many workers run.
    pub fn workers(&self) -> usize {
        self.workers
    }
}

/// Run `make`'s service on live interfaces until `SIGTERM`/`SIGINT` (or a failure).
pub fn run<S: Service>(
    opts: &LiveOptions,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
) -> Result<()> {
    serve(opts, make, |service: &S, opts: &LiveOptions| {
        let ports = service.ports();
        let spec = LiveSpec {
            interfaces: ports.interfaces.clone(),
            workers: opts.workers,
            capture: ports.capture,
            xdp_mode: opts.xdp_mode,
            ring_bytes: ports.ring_bytes,
        };
        opts.driver
            .open(&spec)
            .with_context(|| format!("opening {}", ports.interfaces.join(", ")))
    })
}

/// [`run`] on ports opened already (`opened.ports[w]` are worker `w`'s ports; `opts.driver` is
/// not used): harnesses and tests.
pub fn run_on<S: Service>(
    opts: &LiveOptions,
    opened: Opened,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
) -> Result<()> {
    serve(opts, make, move |_: &S, _: &LiveOptions| Ok(opened))
}

fn serve<S: Service>(
    opts: &LiveOptions,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
    open: impl FnOnce(&S, &LiveOptions) -> Result<Opened>,
) -> Result<()> {
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let hup = ReloadSignal::try_install().context("installing the SIGHUP handler")?;
    let wake = SignalWait::new().context("the signal pipe")?;
    let mut notify = Notifier::from_env().context("NOTIFY_SOCKET")?;
    let (tx, rx) = mpsc::channel::<Msg<S::Event>>();
    let mut service = make(Events { tx: tx.clone() })?;
    let app = service.name();

    let opened = open(&service, opts)?;
    log(&opened.description);
    let interfaces = service.ports().interfaces;
    let n = opened.ports.len();
    let trace = TraceLog::<S::Probe>::new(DEFAULT_CAPACITY);
    let mut workers = Vec::with_capacity(n);
    for (w, ports) in opened.ports.into_iter().enumerate() {
        let (probes, queue) = probe_queue(QUEUE_CAPACITY, TracerConfig::default());
        trace.attach(queue);
        let setup = Setup {
            worker: w,
            workers: n,
            description: &opened.description,
        };
        workers.push(Worker {
            stage: service.stage(setup, probes)?,
            ports,
        });
    }
    let mut dopts = Options {
        name: format!("fp-{app}"),
        pin: opts.pin,
        cpus: opts.cpus.clone(),
        ..Options::default()
    };
    service.driver_options(&mut dopts);
    let running = driver::start(workers, &dopts)?;
    let live = opened.control;

    let admin = match opts.admin {
        Some(addr) => {
            let handler = Arc::new(Admin::<S> {
                app,
                view: service.view(&running.counters()),
                trace: trace.clone(),
                engine: running.counters(),
                interfaces: interfaces.clone(),
                started: Instant::now(),
                description: opened.description.clone(),
                control: tx.clone(),
            });
            let s = AdminServer::start(addr, handler)
                .with_context(|| format!("admin server on {addr}"))?;
            log(format_args!("admin server on http://{}", s.local_addr()));
            Some(s)
        }
        None => None,
    };
    let stop_signals = Arc::new(AtomicBool::new(false));
    let signals = {
        let (tx, stop) = (tx.clone(), stop_signals.clone());
        std::thread::Builder::new()
            .name(format!("fp-{app}-signals"))
            .spawn(move || forward_signals(&term, &hup, &wake, &tx, &stop))
            .context("starting the signal thread")?
    };
    drop(tx);

    let mut cx = Context {
        live: &live,
        notify: &mut notify,
        workers: n,
    };
    let mut result = service.started(&mut cx);
    if result.is_ok() {
        let status = service.ready_status();
        log(format_args!("ready: {status}"));
        cx.notify.ready(&status);
        result = control_loop(&mut service, &mut cx, &rx, &running, &trace);
    }

    log("shutting down");
    let drain = service.drain(&mut cx, result.is_ok());
    cx.notify.stopping((!drain.is_zero()).then_some(drain));
    if !drain.is_zero() {
        log(format_args!("draining for {} ms", drain.as_millis()));
        std::thread::sleep(drain);
    }
    service.shutdown();
    if let Some(a) = admin {
        a.shutdown();
    }
    stop_signals.store(true, Ordering::Release);
    wake.poke();
    let _ = signals.join();
    match running.stop() {
        Ok(done) => {
            log_ports(&interfaces, &done);
            service.finished(done);
        }
        Err(e) => {
            if result.is_ok() {
                result = Err(e.into());
            }
        }
    }
    trace.collect();
    drop(live);
    result
}

/// Forward signals to the control thread: sleep on the self-pipe, read the flags.
fn forward_signals<E>(
    term: &TerminateSignal,
    hup: &ReloadSignal,
    wake: &SignalWait,
    tx: &mpsc::Sender<Msg<E>>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Acquire) {
        if term.is_set() {
            let _ = tx.send(Msg::Terminate);
            return;
        }
        if hup.take() && tx.send(Msg::Reload(None)).is_err() {
            return;
        }
        // The flags are the truth; the timeout covers a wake-up another waiter consumed.
        wake.wait(Duration::from_secs(1));
    }
}

fn control_loop<S: Service>(
    service: &mut S,
    cx: &mut Context<'_>,
    rx: &mpsc::Receiver<Msg<S::Event>>,
    running: &Running<S::Stage>,
    trace: &TraceLog<S::Probe>,
) -> Result<()> {
    let every = service.tick_every().max(Duration::from_millis(1));
    let mut next_house = Instant::now();
    let mut next_tick = Instant::now() + every;
    let ready_status = service.ready_status();
    loop {
        let now = Instant::now();
        if now >= next_house {
            running.check().map_err(|e| anyhow!("{e}; stopping"))?;
            // Every worker lives: tell systemd's watchdog (when it asked for pings).
            cx.notify.watchdog(true);
            trace.collect();
            next_house = now + HOUSEKEEPING;
        }
        if now >= next_tick {
            service.tick(cx)?;
            next_tick = now + every;
        }
        let wait = next_house
            .min(next_tick)
            .saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Msg::Terminate) => return Ok(()),
            Ok(Msg::Reload(reply)) => {
                cx.notify.reloading();
                let r = service
                    .reload(cx)
                    .map_err(|e| ReloadError::Rejected(format!("{e:#}")));
                let status = match &r {
                    Ok(g) => format!("{ready_status}; configuration generation {g}"),
                    Err(e) => format!("{ready_status}; last reload rejected: {e}"),
                };
                cx.notify.ready(&status);
                if let Some(reply) = reply {
                    let _ = reply.try_send(r);
                }
            }
            Ok(Msg::App(e)) => service.event(e, cx)?,
            Err(RecvTimeoutError::Timeout) => {}
            // Unreachable while the signal thread holds a sender; stop rather than spin.
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// One log line per port: the counters summed over the workers.
fn log_ports<S>(names: &[String], done: &[Finished<S>]) {
    let mut totals = vec![PortStats::default(); names.len()];
    for w in done {
        for (t, p) in totals.iter_mut().zip(&w.ports) {
            t.add(p);
        }
    }
    for (i, (name, p)) in names.iter().zip(&totals).enumerate() {
        log(format_args!(
            "port {i} ({name}): rx {} tx {} rx_dropped {} tx_dropped {}",
            p.rx, p.tx, p.rx_dropped, p.tx_dropped
        ));
    }
}

/// The admin server's handler: the common families and status header, the application's view,
/// reloads handed to the control thread.
struct Admin<S: Service> {
    app: &'static str,
    view: Arc<S::View>,
    trace: Arc<TraceLog<S::Probe>>,
    engine: Vec<Arc<WorkerCounters>>,
    interfaces: Vec<String>,
    started: Instant,
    description: String,
    control: mpsc::Sender<Msg<S::Event>>,
}

impl<S: Service> AdminHandler for Admin<S> {
    fn metrics(&self) -> String {
        let mut e = Exposition::new();
        common_metrics(
            &mut e,
            self.app,
            self.started,
            self.engine.len(),
            &self.trace.counts(),
        );
        metrics::ports(&mut e, "flowplane", &self.interfaces, &self.engine);
        self.view.metrics(&mut e);
        e.finish()
    }

    fn reload(&self) -> Result<u64, ReloadError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.control
            .send(Msg::Reload(Some(tx)))
            .map_err(|_| ReloadError::Unavailable("the service is shutting down"))?;
        rx.recv_timeout(RELOAD_WAIT).map_err(|_| {
            ReloadError::Unavailable("the control thread did not answer the reload in time")
        })?
    }

    fn traces(&self) -> String {
        self.trace.json_lines()
    }

    fn status(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "flowplane {} {}", env!("CARGO_PKG_VERSION"), self.app);
        let _ = writeln!(s, "{}", self.description);
        let _ = writeln!(
            s,
            "up {} s; {} worker(s)",
            self.started.elapsed().as_secs(),
            self.engine.len()
        );
        self.view.status(&mut s);
        s
    }
}

/// The families every application exports with the same names.
fn common_metrics(
    e: &mut Exposition,
    app: &str,
    started: Instant,
    workers: usize,
    trace: &fp_control::trace::TraceCounts,
) {
    e.family(
        "flowplane_info",
        Kind::Gauge,
        "Always 1: the application this process runs and flowplane's version.",
    );
    e.sample(
        "flowplane_info",
        &[("application", app), ("version", env!("CARGO_PKG_VERSION"))],
        1u64,
    );
    e.single(
        "flowplane_uptime_seconds",
        Kind::Gauge,
        "Seconds since start.",
        started.elapsed().as_secs_f64(),
    );
    e.single(
        "flowplane_workers",
        Kind::Gauge,
        "Worker threads.",
        workers as u64,
    );
    e.family(
        "flowplane_trace_records_total",
        Kind::Counter,
        "Tracer probes by what became of their record: recorded, suppressed (over the per-worker \
         rate limit) or dropped (the worker's queue to the control side was full).",
    );
    for (result, v) in [
        ("recorded", trace.recorded),
        ("suppressed", trace.suppressed),
        ("dropped", trace.dropped),
    ] {
        e.sample("flowplane_trace_records_total", &[("result", result)], v);
    }
}
