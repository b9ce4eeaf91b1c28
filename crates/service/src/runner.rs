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
//! Taking over ([`crate::handover`]): when [`Service::handover_socket`] names a socket a process
//! of the same application listens on, start-up asks it for a checkpoint first, opens the ports
//! holding (or, for a driver that cannot hold, after the cut-over), makes and fills the stages,
//! asks for the cut-over, puts the delta in, says `MAINPID=`, releases the ports and starts the
//! workers. A running process with a checkpointer listens on that socket; a successor's cut-over
//! ends its control loop, and its shutdown then skips the drain, sends the delta after the
//! workers stopped, closes the ports and says so. `SIGUSR2` starts the binary's path again with
//! this process's arguments, to take over.
//!
//! Shutdown (`SIGTERM`/`SIGINT`, [`Events::stop`], a dead worker or a hook's error), in order:
//! [`Service::drain`] (withdraw from the network; the workers keep forwarding for the time it
//! returns), `STOPPING=1`, the drain, [`Service::shutdown`], the admin server, the workers (with
//! a log line of every port's counters), [`Service::finished`], and last the ports' control (the
//! XDP program and promiscuous mode go with it).

use crate::args::LiveOptions;
use crate::handover::{Checkpointer, Cut, Delta, Listener, Successor};
use anyhow::{anyhow, Context as _, Result};
use fp_control::admin::{AdminHandler, AdminServer, ReloadError};
use fp_control::log;
use fp_control::metrics::{self, Exposition, Kind};
use fp_control::signal::{ReloadSignal, SignalWait, TerminateSignal, UpgradeSignal};
use fp_control::systemd::Notifier;
use fp_control::trace::{Record, TraceLog, DEFAULT_CAPACITY, QUEUE_CAPACITY};
use fp_engine::driver::{self, Finished, Options, Running, Worker, WorkerCounters};
use fp_engine::live::{Capture, Handoff, LiveControl, LiveSpec, Opened};
use fp_engine::port::{Port, PortStats};
use fp_pipeline::stage::Stage;
use fp_pipeline::trace::{probe_queue, ProbeSender, TracerConfig};
use std::fmt::Write as _;
use std::path::PathBuf;
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

    /// Where a running process of this application listens for a successor that takes over
    /// from it while it forwards ([`crate::handover`]), and where a starting one looks for it.
    /// `None` (the default): no overlapped handover; restarts stop one process and start the
    /// next.
    fn handover_socket(&self) -> Option<PathBuf> {
        None
    }

    /// The function that copies the application's state while the workers forward, for a
    /// successor (asked once the workers run; run on the handover thread).
    fn checkpointer(&self) -> Option<Checkpointer> {
        None
    }

    /// The workers stopped for a handover: what changed since the checkpoint, for the successor.
    fn delta(&mut self, _stages: &mut [Finished<Self::Stage>]) -> Vec<u8> {
        Vec::new()
    }

    /// The successor has the delta: the stopped workers' leftovers (a summary for the log).
    /// [`finished`](Self::finished) runs instead when the delta could not be sent.
    fn handed_over(&mut self, _stages: Vec<Finished<Self::Stage>>) {}

    /// Taking over: fill the stages with the predecessor's checkpoint, before the ports forward
    /// (the predecessor still does). An error ends this start; the predecessor keeps running.
    fn take_checkpoint(&mut self, _bytes: &[u8], _stages: &mut [Self::Stage]) -> Result<()> {
        Ok(())
    }

    /// Taking over: the predecessor's workers stopped; put what changed since its checkpoint
    /// into the stages.
    fn take_delta(&mut self, _delta: &Delta, _stages: &mut [Self::Stage]) -> Result<()> {
        Ok(())
    }

    /// Taking over: the workers run, `gap_ms` after the predecessor's stopped.
    fn took_over(&mut self, _gap_ms: u64) {}
}

enum Msg<E> {
    Terminate,
    /// A successor asked for the cut-over ([`crate::handover`]).
    Cut(Cut),
    /// `SIGUSR2`: start a successor.
    Upgrade,
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

/// Run `make`'s service on live interfaces until `SIGTERM`/`SIGINT` (or a failure, or a
/// successor taking over). When a process of the same application runs and listens on
/// [`Service::handover_socket`], this one takes over from it ([`crate::handover`]).
pub fn run<S: Service>(
    opts: &LiveOptions,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
) -> Result<()> {
    let spec = |service: &S, hold: bool| {
        let ports = service.ports();
        LiveSpec {
            interfaces: ports.interfaces.clone(),
            workers: opts.workers,
            capture: ports.capture,
            xdp_mode: opts.xdp_mode,
            ring_bytes: ports.ring_bytes,
            hold,
        }
    };
    let how = Open {
        open: Box::new(move |service: &S, hold: bool| {
            let spec = spec(service, hold);
            opts.driver
                .open(&spec)
                .with_context(|| format!("opening {}", spec.interfaces.join(", ")))
        }),
        workers: Some(Box::new(move |service: &S| {
            let spec = spec(service, false);
            Ok(opts.driver.workers(&spec)?)
        })),
        adopt: Box::new(move |service: &S, handoff: Handoff| {
            let spec = spec(service, false);
            opts.driver
                .adopt(&spec, handoff)
                .with_context(|| format!("taking over {}", spec.interfaces.join(", ")))
        }),
        holds: opts.driver.holds(),
        hands_off: opts.driver.hands_off(),
    };
    serve(opts, make, how)
}

/// [`run`] on ports opened already (`opened.ports[w]` are worker `w`'s ports; `opts.driver` is
/// not used): harnesses and tests. It never takes over from a running process.
pub fn run_on<S: Service>(
    opts: &LiveOptions,
    opened: Opened,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
) -> Result<()> {
    let mut given = Some(opened);
    let how = Open {
        open: Box::new(move |_: &S, _: bool| {
            given
                .take()
                .ok_or_else(|| anyhow!("the given ports were opened once already"))
        }),
        workers: None,
        adopt: Box::new(|_: &S, _: Handoff| Err(anyhow!("ports given, none to take over"))),
        holds: false,
        hands_off: false,
    };
    serve(opts, make, how)
}

/// Opens a service's ports (`true`: holding, while a predecessor forwards).
type OpenPorts<'a, S> = Box<dyn FnMut(&S, bool) -> Result<Opened> + 'a>;
/// How many workers opening a service's ports would give, without opening them.
type CountWorkers<'a, S> = Box<dyn Fn(&S) -> Result<usize> + 'a>;
/// Goes on with the ports a predecessor handed over.
type AdoptPorts<'a, S> = Box<dyn FnMut(&S, Handoff) -> Result<Opened> + 'a>;

/// How [`serve`] gets its ports.
struct Open<'a, S> {
    /// Open them.
    open: OpenPorts<'a, S>,
    /// How many workers opening would give (`None`: no takeover possible).
    workers: Option<CountWorkers<'a, S>>,
    /// Take ports handed over.
    adopt: AdoptPorts<'a, S>,
    /// Whether ports can open holding.
    holds: bool,
    /// Whether a predecessor's ports can be handed over (taken rather than opened anew).
    hands_off: bool,
}

/// Why the control loop ended.
enum Ending {
    /// Stop (a signal, a request, a failure).
    Stop,
    /// Hand over to the successor waiting on this.
    Handover(Cut),
}

fn serve<S: Service>(
    opts: &LiveOptions,
    make: impl FnOnce(Events<S::Event>) -> Result<S>,
    mut how: Open<'_, S>,
) -> Result<()> {
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let hup = ReloadSignal::try_install().context("installing the SIGHUP handler")?;
    let usr2 = UpgradeSignal::install().context("installing the SIGUSR2 handler")?;
    let wake = SignalWait::new().context("the signal pipe")?;
    // The binary's path now: after a package upgrade replaced the file, a successor started
    // from this path runs the new binary.
    let exe = std::env::current_exe().context("locating this executable")?;
    let mut notify = Notifier::from_env().context("NOTIFY_SOCKET")?;
    let (tx, rx) = mpsc::channel::<Msg<S::Event>>();
    let mut service = make(Events { tx: tx.clone() })?;
    let app = service.name();

    // A process of this application forwarding on these ports hands over to this one.
    let mut successor = None;
    // Started by a running process's SIGUSR2: without a predecessor to take over from, starting
    // anyway would make two processes forward.
    let must_take_over = std::env::var_os(TAKE_OVER_ENV).is_some();
    if let (Some(path), Some(_)) = (service.handover_socket(), &how.workers) {
        let scope = service.ports().interfaces.join(",");
        successor = Successor::connect(&path, app, &scope).with_context(|| {
            format!(
                "taking over from the {app} process listening on {} (it keeps running)",
                path.display()
            )
        })?;
        if successor.is_none() && must_take_over {
            return Err(anyhow!(
                "started to take over from the running {app} process, but none answers on {}; \
                 not starting (it keeps running, or it stopped: start the service again)",
                path.display()
            ));
        }
        if let Some((s, cp)) = &successor {
            log(format_args!(
                "taking over from the {app} process listening on {} (this is pid {}): \
                 checkpoint of {} bytes received",
                s.path().display(),
                std::process::id(),
                cp.len()
            ));
        }
    }
    // Ports open now (holding, when taking over: the predecessor still forwards), or, for a
    // driver that cannot hold, once the predecessor has closed its own.
    let takeover = successor.is_some();
    let mut opened = if !takeover || how.holds {
        Some((how.open)(&service, takeover)?)
    } else {
        None
    };
    let n = match (&opened, &how.workers) {
        (Some(o), _) => o.ports.len(),
        (None, Some(w)) => w(&service)?,
        (None, None) => unreachable!("no takeover without a worker count"),
    };
    let description = opened.as_ref().map_or_else(
        || format!("{} ports, opened at the cut-over", opts.driver),
        |o| o.description.clone(),
    );
    let interfaces = service.ports().interfaces;
    let trace = TraceLog::<S::Probe>::new(DEFAULT_CAPACITY);
    let mut stages = Vec::with_capacity(n);
    for w in 0..n {
        let (probes, queue) = probe_queue(QUEUE_CAPACITY, TracerConfig::default());
        trace.attach(queue);
        let setup = Setup {
            worker: w,
            workers: n,
            description: &description,
        };
        stages.push(service.stage(setup, probes)?);
    }
    let mut took_over_at = None;
    if let Some((mut succ, checkpoint)) = successor {
        let t0 = Instant::now();
        service.take_checkpoint(&checkpoint, &mut stages)?;
        drop(checkpoint);
        log(format_args!(
            "checkpoint put into {n} worker(s) in {} ms; asking for the cut-over",
            t0.elapsed().as_millis()
        ));
        let t0 = Instant::now();
        // A driver that cannot hold its ports open beside the predecessor's takes them over.
        let want_ports = (opened.is_none() && how.hands_off).then(|| opts.driver.name());
        match succ.cut(want_ports) {
            Ok(delta) => {
                let got = t0.elapsed();
                // This process is the service from now on; the predecessor exits once told so.
                notify.main_pid();
                if let Err(e) = succ.confirm() {
                    log(format_args!(
                        "warning: the predecessor went away at the cut-over: {e}"
                    ));
                }
                if let Err(e) = service.take_delta(&delta, &mut stages) {
                    // The predecessor has stopped: forward with the checkpoint rather than not.
                    log(format_args!(
                        "warning: the predecessor's delta not taken ({e:#}); forwarding with its \
                         checkpoint"
                    ));
                }
                log(format_args!(
                    "cut-over: the predecessor's delta ({} bytes) came {} ms after asking, put \
                     into the workers in {} ms",
                    delta.bytes.len(),
                    got.as_millis(),
                    (t0.elapsed() - got).as_millis()
                ));
                took_over_at = Some(delta.stopped_ms);
            }
            // Whether the predecessor still forwards cannot be told: starting could make two
            // processes forward, so this one stops (a predecessor that died leaves its
            // `finished` state, and the service manager starts the service again).
            Err(e) => {
                return Err(
                    e.context("the cut-over: no delta from the running process; not starting")
                )
            }
        }
        match &mut opened {
            Some(o) => o.control.release()?,
            None => {
                let t = Instant::now();
                let taken = if want_ports.is_some() {
                    take_ports(&mut succ, &service, &mut how.adopt)
                } else {
                    wait_released(&mut succ);
                    None
                };
                let o = match taken {
                    Some(o) => {
                        log(format_args!(
                            "cut-over: the predecessor's ports taken over in {} ms",
                            t.elapsed().as_millis()
                        ));
                        o
                    }
                    None => {
                        let t = Instant::now();
                        let o = (how.open)(&service, false)?;
                        log(format_args!(
                            "cut-over: ports opened in {} ms",
                            t.elapsed().as_millis()
                        ));
                        o
                    }
                };
                if o.ports.len() != n {
                    return Err(anyhow!(
                        "{} worker(s) made for the takeover, but the ports opened for {}",
                        n,
                        o.ports.len()
                    ));
                }
                opened = Some(o);
            }
        }
    }
    let opened = opened.expect("ports opened");
    log(&opened.description);
    let workers: Vec<Worker<S::Stage>> = stages
        .into_iter()
        .zip(opened.ports)
        .map(|(stage, ports)| Worker { stage, ports })
        .collect();
    let mut dopts = Options {
        name: format!("fp-{app}"),
        pin: opts.pin,
        cpus: opts.cpus.clone(),
        keep_ports_open: true,
        ..Options::default()
    };
    service.driver_options(&mut dopts);
    let running = driver::start(workers, &dopts)?;
    if let Some(stopped_ms) = took_over_at {
        service.took_over(fp_control::state::wall_ms().saturating_sub(stopped_ms));
    }
    let mut live = Some(opened.control);

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
            .spawn(move || forward_signals(&term, &hup, &usr2, &wake, &tx, &stop))
            .context("starting the signal thread")?
    };
    let control_tx = tx.clone();
    drop(tx);

    let mut cx = Context {
        live: live.as_ref().expect("the ports' control"),
        notify: &mut notify,
        workers: n,
    };
    let mut result = service.started(&mut cx);
    let mut ending = Ending::Stop;
    // A successor may ask once the start is complete (a warm start's entries in the tables).
    let mut listener = match (service.handover_socket(), service.checkpointer()) {
        (Some(path), Some(checkpoint)) => {
            let tx = control_tx.clone();
            let scope = interfaces.join(",");
            match Listener::start(&path, app, scope, checkpoint, move |c| {
                tx.send(Msg::Cut(c)).is_ok()
            }) {
                Ok(l) => Some(l),
                Err(e) => {
                    log(format_args!("warning: no overlapped handover: {e:#}"));
                    None
                }
            }
        }
        _ => None,
    };
    if result.is_ok() {
        let status = service.ready_status();
        log(format_args!("ready: {status}"));
        cx.notify.ready(&status);
        let upgrade = Upgrade {
            exe: &exe,
            listening: listener.is_some(),
        };
        match control_loop(&mut service, &mut cx, &rx, &running, &trace, &upgrade) {
            Ok(e) => ending = e,
            Err(e) => result = Err(e),
        }
    }

    // The socket goes first: a successor binds its own there once it has the delta.
    if let Some(l) = listener.take() {
        l.close();
    }
    let mut cut = match ending {
        Ending::Handover(c) => {
            // Not STOPPING=1: systemd would then refuse the successor's MAINPID=.
            log("handing over to the successor");
            cx.notify.status("handing over to a successor");
            Some(c)
        }
        Ending::Stop => {
            log("shutting down");
            let drain = service.drain(&mut cx, result.is_ok());
            cx.notify.stopping((!drain.is_zero()).then_some(drain));
            if !drain.is_zero() {
                log(format_args!("draining for {} ms", drain.as_millis()));
                std::thread::sleep(drain);
            }
            None
        }
    };
    service.shutdown();
    if let Some(a) = admin {
        a.shutdown();
    }
    stop_signals.store(true, Ordering::Release);
    wake.poke();
    let _ = signals.join();
    // The forwarding gap of a handover starts when the workers are told to stop.
    let stopped_ms = fp_control::state::wall_ms();
    let t_stop = Instant::now();
    match running.stop() {
        Ok(mut done) => {
            let mut handed = false;
            if let Some(c) = &mut cut {
                log(format_args!(
                    "handover: workers stopped in {} ms",
                    t_stop.elapsed().as_millis()
                ));
                let delta = service.delta(&mut done);
                match c.delta(stopped_ms, &delta) {
                    Ok(()) => handed = true,
                    Err(e) => {
                        log(format_args!(
                            "the successor did not take the delta ({e}); keeping the state for \
                             the next start instead"
                        ));
                        // Not forwarding any more: exit with a failure, so the service manager
                        // starts the service again.
                        if result.is_ok() {
                            result = Err(anyhow!("the handover failed after the cut-over: {e}"));
                        }
                    }
                }
            }
            // A successor that asked for the ports gets them open (only their descriptors
            // close here then).
            let ported = match (&mut cut, handed) {
                (Some(c), true) if c.wants_ports() == Some(opts.driver.name()) => {
                    hand_ports(c, &mut done, live.as_mut())
                }
                _ => false,
            };
            // The ports close now (after the delta), each on a thread of its own: closing a
            // socket waits for the kernel's RCU grace period, and the waits overlap.
            let t = Instant::now();
            std::thread::scope(|s| {
                for f in &mut done {
                    let ports = f.open_ports.take();
                    s.spawn(move || drop(ports));
                }
                if handed {
                    // The XDP program detaches with the control (and the last port).
                    let live = live.take();
                    s.spawn(move || drop(live));
                }
            });
            log_ports(&interfaces, &done);
            if handed {
                log(format_args!(
                    "handover: ports {} in {} ms",
                    if ported { "handed over" } else { "closed" },
                    t.elapsed().as_millis()
                ));
                if let Some(c) = cut.take() {
                    c.released(Duration::from_secs(5));
                }
                service.handed_over(done);
                trace.collect();
                return result;
            }
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

/// The successor's side of handing ports over: the predecessor's ports, taken over; `None`
/// when it closed them instead or they could not be taken (then they are opened anew).
fn take_ports<S>(
    succ: &mut Successor,
    service: &S,
    adopt: &mut AdoptPorts<'_, S>,
) -> Option<Opened> {
    match succ.ports() {
        Ok(Some(h)) => match adopt(service, h) {
            Ok(o) => Some(o),
            Err(e) => {
                // What was handed over is closed (the program detached) by now; the
                // predecessor closes its copies and says so, then the queues are free.
                log(format_args!(
                    "warning: the predecessor's ports could not be taken over ({e:#}); opening \
                     them anew"
                ));
                wait_released(succ);
                None
            }
        },
        // Closed by the predecessor, which said so.
        Ok(None) => None,
        Err(e) => {
            log(format_args!(
                "warning: no ports from the predecessor ({e:#}); opening them anew"
            ));
            wait_released(succ);
            None
        }
    }
}

/// Wait until the predecessor has closed its ports (or is gone).
fn wait_released(succ: &mut Successor) {
    if let Err(e) = succ.wait_released() {
        log(format_args!(
            "warning: the predecessor did not confirm closing its ports: {e:#}"
        ));
    }
}

/// The predecessor's side: hand the stopped workers' ports (and what `live` changed on the
/// interfaces) to the successor. False (nothing handed: the ports close as usual) when a port
/// cannot be handed or the successor does not take them.
fn hand_ports<S>(cut: &mut Cut, done: &mut [Finished<S>], live: Option<&mut LiveControl>) -> bool {
    let mut ports: Vec<&mut Box<dyn Port>> = done
        .iter_mut()
        .filter_map(|f| f.open_ports.as_mut()?.downcast_mut::<Vec<Box<dyn Port>>>())
        .flatten()
        .collect();
    let mut h = Handoff::default();
    // What the control undoes (promiscuous mode) goes first: a successor that fails to take the
    // ports still learns it, and undoes it.
    if let Some(l) = &live {
        l.hand_off(&mut h);
    }
    for p in &ports {
        if let Err(e) = p.hand_off(&mut h) {
            log(format_args!(
                "handover: closing the ports instead of handing them over: {e}"
            ));
            return false;
        }
    }
    if h.fds.len() > fp_engine::sys::MAX_FDS_PER_MESSAGE {
        log(format_args!(
            "handover: {} descriptors are more than one message carries; closing the ports \
             instead of handing them over",
            h.fds.len()
        ));
        return false;
    }
    if let Err(e) = cut.ports(&h) {
        log(format_args!(
            "handover: the successor did not take the ports ({e}); closing them"
        ));
        return false;
    }
    for p in &mut ports {
        p.handed_over();
    }
    if let Some(l) = live {
        l.handed_over();
    }
    true
}

/// Forward signals to the control thread: sleep on the self-pipe, read the flags.
fn forward_signals<E>(
    term: &TerminateSignal,
    hup: &ReloadSignal,
    usr2: &UpgradeSignal,
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
        if usr2.take() && tx.send(Msg::Upgrade).is_err() {
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
    upgrade: &Upgrade<'_>,
) -> Result<Ending> {
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
            Ok(Msg::Terminate) => return Ok(Ending::Stop),
            Ok(Msg::Cut(c)) => return Ok(Ending::Handover(c)),
            Ok(Msg::Upgrade) => upgrade.start_successor(),
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
            Err(RecvTimeoutError::Disconnected) => return Ok(Ending::Stop),
        }
    }
}

/// Set for a successor started on `SIGUSR2`: it must take over, or not start.
const TAKE_OVER_ENV: &str = "FLOWPLANE_TAKE_OVER";

/// What `SIGUSR2` needs: the binary's path, and whether a successor could take over.
struct Upgrade<'a> {
    exe: &'a std::path::Path,
    listening: bool,
}

impl Upgrade<'_> {
    /// Start this binary's path again with this process's arguments and environment: the new
    /// process takes over through the handover socket and this one exits; when it fails (a
    /// configuration the new binary refuses, a crash), this one goes on forwarding.
    fn start_successor(&self) {
        if !self.listening {
            log(
                "SIGUSR2 ignored: this process has no handover socket (an application or \
                 configuration without the overlapped handover, such as one with [bgp]); \
                 restart it instead",
            );
            return;
        }
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        let mut cmd = std::process::Command::new(self.exe);
        cmd.args(&args)
            // The watchdog belongs to whichever process is the main one.
            .env_remove("WATCHDOG_PID")
            .env(TAKE_OVER_ENV, "1");
        match cmd.spawn() {
            Ok(mut child) => {
                let pid = child.id();
                log(format_args!(
                    "SIGUSR2: started {} (pid {pid}) to take over",
                    self.exe.display()
                ));
                // Reap it if it fails while this process still runs.
                let _ = std::thread::Builder::new()
                    .name("fp-successor".into())
                    .spawn(move || {
                        if let Ok(st) = child.wait() {
                            if !st.success() {
                                log(format_args!(
                                    "the successor (pid {pid}) ended ({st}); this process goes \
                                     on forwarding"
                                ));
                            }
                        }
                    });
            }
            Err(e) => log(format_args!(
                "SIGUSR2: could not start {}: {e}; this process goes on forwarding",
                self.exe.display()
            )),
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
