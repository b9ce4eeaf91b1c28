//! The runner with a test service on in-memory ports: the admin endpoints, the tracer queues, the
//! order of the hooks, a reload that does not hold up `/metrics`, a dying worker.

use anyhow::Result;
use fp_control::metrics::{Exposition, Kind};
use fp_control::trace::Record;
use fp_engine::driver::Finished;
use fp_engine::live::{Capture, LiveControl, Opened};
use fp_engine::port::{Port, PortStats};
use fp_pipeline::packet::{Packet, Pool};
use fp_pipeline::stage::{Outputs, Stage};
use fp_pipeline::trace::{probe_id, probe_payload, ProbeSender};
use fp_service::{run_on, Context, Events, LiveOptions, Ports, Service, Setup, View};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frames from a list, then silence (never exhausted, like a live socket); sent frames counted.
struct ListPort {
    input: VecDeque<Vec<u8>>,
    stats: PortStats,
}

impl Port for ListPort {
    fn name(&self) -> &str {
        "list"
    }
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(f) = self.input.pop_front() else {
                break;
            };
            let mut p = pool.get().expect("buffers");
            p.fill(&f);
            out.push(p);
            n += 1;
        }
        self.stats.rx += n as u64;
        n
    }
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let n = batch.len();
        self.stats.tx += n as u64;
        pool.put_all(batch);
        n
    }
    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[derive(Clone, Debug)]
struct Seen {
    port: usize,
}

impl Record for Seen {
    fn write_json(&self, out: &mut String) {
        out.push_str(&format!("\"port\":{}", self.port));
    }
}

struct Echo {
    probes: ProbeSender<Seen>,
    panic_on_input: bool,
}

impl Stage for Echo {
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        _pool: &mut Pool,
        now_ns: u64,
    ) {
        assert!(!self.panic_on_input, "a worker bug");
        for p in rx.iter() {
            if let Some(id) = probe_id(p.data()) {
                if self.probes.admit(now_ns) {
                    self.probes.send(id, now_ns, Seen { port });
                }
            }
        }
        out.to(port).append(rx);
    }
}

#[derive(Default)]
struct Shared {
    hooks: Mutex<Vec<String>>,
    generation: AtomicU64,
}

impl View for Shared {
    fn metrics(&self, e: &mut Exposition) {
        e.single(
            "test_generation",
            Kind::Gauge,
            "The test service's generation.",
            self.generation.load(Ordering::Relaxed),
        );
    }
    fn status(&self, s: &mut String) {
        s.push_str("test status line\n");
    }
}

struct TestService {
    shared: Arc<Shared>,
    events: Events<String>,
    /// A reload waits for a message on this channel (the test holds the reload open).
    reload_gate: Option<mpsc::Receiver<()>>,
    panic_on_input: bool,
}

impl TestService {
    fn hook(&self, h: &str) {
        self.shared.hooks.lock().unwrap().push(h.to_string());
    }
}

impl Service for TestService {
    type Stage = Echo;
    type Probe = Seen;
    type Event = String;
    type View = Shared;

    fn name(&self) -> &'static str {
        "test"
    }
    fn ports(&self) -> Ports {
        Ports {
            interfaces: vec!["mem0".into()],
            capture: Capture::All,
            ring_bytes: None,
        }
    }
    fn stage(&mut self, _s: Setup<'_>, probes: ProbeSender<Seen>) -> Result<Echo> {
        self.hook("stage");
        Ok(Echo {
            probes,
            panic_on_input: self.panic_on_input,
        })
    }
    fn view(&self, _: &[Arc<fp_engine::driver::WorkerCounters>]) -> Arc<Shared> {
        self.shared.clone()
    }
    fn started(&mut self, _cx: &mut Context<'_>) -> Result<()> {
        self.hook("started");
        // An event from "another thread", delivered on the control thread.
        let _ = self.events.send("hello".into());
        Ok(())
    }
    fn ready_status(&self) -> String {
        "testing".into()
    }
    fn tick_every(&self) -> Duration {
        Duration::from_millis(20)
    }
    fn event(&mut self, e: String, _cx: &mut Context<'_>) -> Result<()> {
        self.hook(&format!("event {e}"));
        Ok(())
    }
    fn reload(&mut self, _cx: &mut Context<'_>) -> Result<u64> {
        if let Some(g) = &self.reload_gate {
            let _ = g.recv_timeout(Duration::from_secs(20));
        }
        Ok(self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn drain(&mut self, _cx: &mut Context<'_>, clean: bool) -> Duration {
        self.hook(&format!("drain clean={clean}"));
        Duration::from_millis(10)
    }
    fn shutdown(&mut self) {
        self.hook("shutdown");
    }
    fn finished(&mut self, stages: Vec<Finished<Echo>>) {
        self.hook(&format!("finished {}", stages.len()));
    }
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// One HTTP request; the body of the answer.
fn http(addr: SocketAddr, method: &str, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut a = String::new();
    s.read_to_string(&mut a)?;
    Ok(a.split_once("\r\n\r\n")
        .map_or(a.clone(), |x| x.1.to_string()))
}

fn wait_for(addr: SocketAddr) {
    let t = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "admin server never came up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Running {
    thread: std::thread::JoinHandle<Result<()>>,
    events: Events<String>,
    shared: Arc<Shared>,
    admin: SocketAddr,
}

fn start(frames: Vec<Vec<u8>>, gate: Option<mpsc::Receiver<()>>, panic: bool) -> Running {
    let admin = free_addr();
    let shared = Arc::new(Shared::default());
    let (etx, erx) = mpsc::channel();
    let sh = shared.clone();
    let thread = std::thread::spawn(move || {
        let mut opts = LiveOptions::new(fp_engine::live::Driver(fp_engine::live::DRIVERS[0]));
        opts.pin = false;
        opts.admin = Some(admin);
        let opened = Opened {
            ports: vec![vec![Box::new(ListPort {
                input: frames.into(),
                stats: PortStats::default(),
            }) as Box<dyn Port>]],
            control: LiveControl::default(),
            description: "one list port".into(),
        };
        run_on(&opts, opened, move |events: Events<String>| {
            etx.send(events.clone()).unwrap();
            Ok(TestService {
                shared: sh,
                events,
                reload_gate: gate,
                panic_on_input: panic,
            })
        })
    });
    let events = erx.recv().unwrap();
    Running {
        thread,
        events,
        shared,
        admin,
    }
}

#[test]
fn probes_and_port_counters_reach_the_common_endpoints() -> Result<()> {
    let p = fp_pipeline::craft::Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80);
    let mut frames = vec![fp_pipeline::craft::tcp(&p, true); 5];
    frames.push(fp_pipeline::craft::udp_with(&p, &probe_payload(77)));
    let r = start(frames, None, false);
    wait_for(r.admin);
    // The records travel worker → queue → control side; the counters are the engine's.
    let t = Instant::now();
    let traces = loop {
        let tr = http(r.admin, "GET", "/trace")?;
        if !tr.is_empty() || t.elapsed() > Duration::from_secs(20) {
            break tr;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(traces.contains("\"probe_id\":77,\"port\":0}"), "{traces}");
    let m = http(r.admin, "GET", "/metrics")?;
    for line in [
        "flowplane_info{application=\"test\",version=\"",
        "flowplane_trace_records_total{result=\"recorded\"} 1\n",
        "flowplane_trace_records_total{result=\"dropped\"} 0\n",
        "flowplane_port_rx_frames_total{port=\"0\",interface=\"mem0\"} 6\n",
        "flowplane_workers 1\n",
        "flowplane_uptime_seconds ",
        "test_generation 0\n",
    ] {
        assert!(m.contains(line), "{line:?} missing from\n{m}");
    }
    let s = http(r.admin, "GET", "/status")?;
    assert!(
        s.starts_with("flowplane ")
            && s.contains("test\none list port\n")
            && s.ends_with("test status line\n"),
        "{s}"
    );
    r.events.stop().unwrap();
    r.thread.join().unwrap()?;
    let hooks = r.shared.hooks.lock().unwrap().clone();
    assert_eq!(
        hooks,
        [
            "stage",
            "started",
            "event hello",
            "drain clean=true",
            "shutdown",
            "finished 1"
        ]
    );
    Ok(())
}

#[test]
fn metrics_are_served_while_a_reload_is_in_progress() -> Result<()> {
    let (gate_tx, gate_rx) = mpsc::channel();
    let r = start(Vec::new(), Some(gate_rx), false);
    wait_for(r.admin);
    let admin = r.admin;
    let reload = std::thread::spawn(move || http(admin, "POST", "/reload"));
    // The control thread is inside the reload now (or about to be): /metrics must still answer,
    // and show the generation from before the reload.
    std::thread::sleep(Duration::from_millis(200));
    let m = http(r.admin, "GET", "/metrics")?;
    assert!(m.contains("test_generation 0\n"), "{m}");
    assert!(!reload.is_finished(), "the reload waits for its gate");
    gate_tx.send(()).unwrap();
    let answer = reload.join().unwrap()?;
    assert!(answer.contains("generation 1"), "{answer}");
    assert!(http(r.admin, "GET", "/metrics")?.contains("test_generation 1\n"));
    // A reload asked through the events (as SIGHUP does) runs too.
    gate_tx.send(()).unwrap();
    r.events.reload().unwrap();
    let t = Instant::now();
    while r.shared.generation.load(Ordering::Relaxed) < 2 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(10));
    }
    r.events.stop().unwrap();
    r.thread.join().unwrap()
}

#[test]
fn a_worker_that_dies_stops_the_service_with_an_error() {
    let p = fp_pipeline::craft::Endpoints::new("198.51.100.7", 40000, "203.0.113.10", 80);
    let r = start(vec![fp_pipeline::craft::tcp(&p, true)], None, true);
    let e = r.thread.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("worker 0"), "{e}");
    let hooks = r.shared.hooks.lock().unwrap().clone();
    assert!(
        hooks.iter().any(|h| h == "drain clean=false"),
        "no clean drain after a failure: {hooks:?}"
    );
}
