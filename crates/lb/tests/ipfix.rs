//! The balancer's IPFIX export, read back by a real collector: nfdump's `nfcapd` receives the
//! messages on loopback and `nfdump` decodes what it stored. Workers are driven through
//! `LbStage::process` on in-memory bursts; the exporter is drained by the test.

use fp_lb::config::LbConfig;
use fp_lb::export::{tap, ExportStats, FlowExporter};
use fp_lb::snapshot::{Builder, Published, Snapshot};
use fp_lb::stage::LbStage;
use fp_pipeline::craft::{self, Endpoints};
use fp_pipeline::packet::{burst, Packet, Pool};
use fp_wire::PacketSummary;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(collector: &str, extra: &str) -> Arc<LbConfig> {
    Arc::new(
        LbConfig::from_toml(&format!(
            r#"
[balancer]
address = "10.0.0.2"
address6 = "fd00::2"
mac = "02:00:00:00:00:01"
gateway_mac = "02:00:00:00:00:fe"
seed = 42
conn_table_capacity = 20000
conn_table_capacity_v6 = 2000
conn_idle_timeout_ms = 2000

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
protocol = "tcp"
pools = ["web"]

[[vip]]
name = "web6"
address = "2001:db8::10"
port = 443
protocol = "tcp"
pools = ["web6"]

[[pool]]
name = "web"
backends = [{{ address = "10.0.1.1" }}, {{ address = "10.0.1.2" }}, {{ address = "10.0.1.3" }}]

[[pool]]
name = "web6"
backends = [{{ address = "fd00:1::1" }}, {{ address = "fd00:1::2" }}]

[ipfix]
collectors = ["{collector}"]
{extra}
"#
        ))
        .unwrap(),
    )
}

/// A worker with its export tap, and the exporter on its queue.
struct Harness {
    worker: LbStage,
    exporter: FlowExporter,
    stats: Arc<ExportStats>,
    pool: Pool,
}

impl Harness {
    fn new(cfg: Arc<LbConfig>) -> Harness {
        let queue = cfg.ipfix.as_ref().unwrap().queue;
        let snap = Builder::new().build(cfg).unwrap();
        let published = Arc::new(Published::<Snapshot>::new(Arc::new(snap)));
        let mut worker = LbStage::new(0, published.clone(), 7).unwrap();
        let (t, events) = tap(0, queue);
        worker.set_export(t);
        let stats = Arc::new(ExportStats::default());
        let exporter = FlowExporter::new(vec![events], published, stats.clone());
        Harness {
            worker,
            exporter,
            stats,
            pool: Pool::new(4096),
        }
    }

    /// Send frames at `now_ns`; the backend each came out to, in order.
    fn send(&mut self, frames: &[Vec<u8>], now_ns: u64) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for chunk in frames.chunks(32) {
            let (mut rx, mut tx) = (burst(), burst());
            for f in chunk {
                let mut p: Packet = self.pool.get().expect("pool");
                assert!(p.fill(f));
                rx.push(p);
            }
            self.worker
                .process(&mut rx, &mut tx, &mut self.pool, now_ns);
            out.extend(
                tx.iter()
                    .map(|p| PacketSummary::parse(p.data()).unwrap().dst()),
            );
            self.pool.put_all(&mut tx);
        }
        out
    }
}

/// nfcapd on a free loopback port, storing into a temporary directory; stopped (and its file
/// closed) by [`Nfcapd::records`].
struct Nfcapd {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Nfcapd {
    fn start(name: &str) -> Nfcapd {
        let dir = std::env::temp_dir().join(format!("fp-ipfix-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A free port: bound and released (nfcapd binds it next).
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("nfcapd")
            .args([
                "-b",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "3600",
                "-w",
            ])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nfcapd (Debian package nfdump; scripts/deps.sh installs it)");
        let n = Nfcapd {
            child: Some(child),
            dir,
            port,
        };
        // Listening once its current file exists.
        let t0 = Instant::now();
        while !n.has_current() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "nfcapd did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    }

    fn has_current(&self) -> bool {
        std::fs::read_dir(&self.dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().contains("current"))
            })
            .unwrap_or(false)
    }

    fn collector(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stop nfcapd (it writes its file out) and read every record back with nfdump, one map of
    /// field name to value per record.
    fn records(mut self) -> Vec<HashMap<&'static str, String>> {
        // Let the last datagrams reach it.
        std::thread::sleep(Duration::from_millis(300));
        if let Some(mut c) = self.child.take() {
            terminate(c.id());
            let _ = c.wait();
        }
        nfdump(&self.dir)
    }
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGTERM (nfcapd closes its file on it; `Child::kill` would send SIGKILL).
fn terminate(pid: u32) {
    let _ = Command::new("kill").arg(pid.to_string()).status();
}

/// Every record nfdump reads from `dir`, as name → value maps.
fn nfdump(dir: &Path) -> Vec<HashMap<&'static str, String>> {
    let recs = fp_testnet::collectors::nfdump_records(dir, &fp_testnet::collectors::FLOW_FIELDS)
        .expect("nfdump");
    for r in &recs {
        eprintln!("{r:?}");
    }
    recs
}

fn client(i: u16) -> Endpoints {
    Endpoints {
        src: IpAddr::from([198, 51, 100, (i % 200) as u8 + 1]),
        sport: 20_000 + i,
        dst: "203.0.113.10".parse().unwrap(),
        dport: 80,
    }
}

fn client6(i: u16) -> Endpoints {
    Endpoints {
        src: format!("2001:db8:c::{}", i + 1).parse().unwrap(),
        sport: 30_000 + i,
        dst: "2001:db8::10".parse().unwrap(),
        dport: 443,
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn nfdump_reads_one_created_and_one_ended_record_per_connection() {
    let nf = Nfcapd::start("conns");
    let mut h = Harness::new(config(&nf.collector(), "sample_one_in = 0"));
    // Connections: a SYN, then the handshake's ACK and a request.
    let (v4, v6) = (40u16, 8u16);
    let mut want: HashMap<(IpAddr, u16), IpAddr> = HashMap::new();
    let t0 = 5 * S;
    let flows: Vec<Endpoints> = (0..v4).map(client).chain((0..v6).map(client6)).collect();
    let syns: Vec<Vec<u8>> = flows.iter().map(|e| craft::tcp(e, true)).collect();
    let out = h.send(&syns, t0);
    let acks: Vec<Vec<u8>> = flows.iter().map(|e| craft::tcp(e, false)).collect();
    h.send(&acks, t0 + S / 10);
    for (e, b) in flows.iter().zip(out) {
        want.insert((e.src, e.sport), b);
    }
    h.exporter.drain();
    assert_eq!(h.stats.created.load(Relaxed), (v4 + v6) as u64);
    assert_eq!(h.stats.ended.load(Relaxed), 0);
    // Idle past the timeout: the sweep removes every entry, and each ends in a record.
    for k in 0..40 {
        h.worker.maintain(t0 + 3 * S + k * S / 10, &mut h.pool);
    }
    h.exporter.drain();
    assert_eq!(h.worker.connections(), (0, 0));
    assert_eq!(h.stats.ended.load(Relaxed), (v4 + v6) as u64);
    assert_eq!(h.stats.no_start.load(Relaxed), 0);

    let recs = nf.records();
    let mut seen: HashMap<(IpAddr, u16), Vec<&HashMap<&str, String>>> = HashMap::new();
    for r in &recs {
        let src: IpAddr = r["sa"].parse().unwrap();
        let sport: u16 = r["sp"].parse().unwrap();
        seen.entry((src, sport)).or_default().push(r);
    }
    assert_eq!(seen.len(), want.len(), "one client tuple per connection");
    for ((src, sport), backend) in &want {
        let rs = &seen[&(*src, *sport)];
        assert_eq!(rs.len(), 2, "created and ended for {src}:{sport}: {rs:?}");
        // Created (no end reason): at the SYN. Ended (idle timeout, reason 1): from the SYN to
        // the last packet, 0.1 s later.
        let created = rs.iter().find(|r| r["reason"] == "0").expect("created");
        let ended = rs.iter().find(|r| r["reason"] == "1").expect("ended");
        assert_eq!(created["start"], created["end"]);
        assert_eq!(ended["start"], created["start"]);
        assert_ne!(ended["end"], ended["start"]);
        for r in rs {
            let vip: IpAddr = if src.is_ipv4() {
                "203.0.113.10".parse().unwrap()
            } else {
                "2001:db8::10".parse().unwrap()
            };
            assert_eq!(r["da"].parse::<IpAddr>().unwrap(), vip);
            assert_eq!(r["dp"], if src.is_ipv4() { "80" } else { "443" });
            assert_eq!(r["pr"], "6");
            assert_eq!(r["nh"].parse::<IpAddr>().unwrap(), *backend, "{r:?}");
        }
    }
}

#[test]
fn one_packet_in_n_is_sampled_and_a_full_queue_drops_events_not_packets() {
    let nf = Nfcapd::start("sampled");
    let mut h = Harness::new(config(
        &nf.collector(),
        "sample_one_in = 100\nconnections = false",
    ));
    let flows: Vec<Endpoints> = (0..50).map(client).collect();
    let frames: Vec<Vec<u8>> = (0..5000)
        .map(|i| craft::tcp(&flows[i % flows.len()], false))
        .collect();
    let out = h.send(&frames, S);
    assert_eq!(out.len(), frames.len());
    h.exporter.drain();
    // Random 1-out-of-100 within each window of 100 packets: exactly one per window.
    assert_eq!(h.stats.sampled.load(Relaxed), 50);
    assert_eq!(h.stats.created.load(Relaxed), 0);
    let recs = nf.records();
    let backends: HashSet<IpAddr> = recs.iter().map(|r| r["nh"].parse().unwrap()).collect();
    assert_eq!(recs.len(), 50, "{recs:?}");
    assert!(backends
        .iter()
        .all(|b| b.to_string().starts_with("10.0.1.")));
    for r in &recs {
        assert_eq!(r["da"], "203.0.113.10");
        assert_eq!(r["pkt"], "1");
    }

    // A queue of 64 events and 1000 new connections before the exporter drains: 64 queued,
    // the rest dropped and counted, every packet forwarded.
    let mut h = Harness::new(config("127.0.0.1:9", "sample_one_in = 0\nqueue = 64"));
    let syns: Vec<Vec<u8>> = (0..1000).map(|i| craft::tcp(&client(i), true)).collect();
    assert_eq!(h.send(&syns, S).len(), 1000);
    let (waiting, dropped) = h.stats.queues();
    assert_eq!((waiting, dropped), (64, 936));
    h.exporter.drain();
    assert_eq!(h.stats.created.load(Relaxed), 64);
    assert_eq!(h.stats.queues(), (0, 936));
}

#[test]
fn the_exporter_takes_no_more_than_its_rate_limit() {
    // 1000 records a second: a bucket of a tenth of a second's worth (100) at the first drain,
    // about 1000 a second after it; the rest waits in the queue, which then drops (counted).
    let mut h = Harness::new(config(
        "127.0.0.1:9",
        "sample_one_in = 0\nqueue = 4096\nmax_records_per_second = 1000",
    ));
    let syns: Vec<Vec<u8>> = (0..3000).map(|i| craft::tcp(&client(i), true)).collect();
    assert_eq!(h.send(&syns, S).len(), 3000);
    let started = std::time::Instant::now();
    h.exporter.drain();
    assert_eq!(h.stats.created.load(Relaxed), 100);
    assert_eq!(h.stats.limited.load(Relaxed), 1);
    assert_eq!(h.stats.queues(), (2900, 0));
    std::thread::sleep(std::time::Duration::from_millis(50));
    h.exporter.drain();
    let taken = h.stats.created.load(Relaxed) - 100;
    let allowed = (started.elapsed().as_secs_f64() * 1000.0).ceil() as u64;
    assert!(
        (50..=allowed.min(100)).contains(&taken),
        "{taken} taken, {allowed} allowed"
    );
    // More connections than the queue holds: the workers drop them, counted.
    let more: Vec<Vec<u8>> = (3000..5000).map(|i| craft::tcp(&client(i), true)).collect();
    assert_eq!(h.send(&more, S).len(), 2000);
    let (waiting, dropped) = h.stats.queues();
    assert_eq!(waiting, 4096);
    assert_eq!(dropped, 3000 + 2000 - 100 - taken - 4096);
    // No limit: everything waiting is taken at once.
    let mut h = Harness::new(config(
        "127.0.0.1:9",
        "sample_one_in = 0\nqueue = 4096\nmax_records_per_second = 0",
    ));
    assert_eq!(h.send(&syns, S).len(), 3000);
    h.exporter.drain();
    assert_eq!(h.stats.created.load(Relaxed), 3000);
    assert_eq!(h.stats.limited.load(Relaxed), 0);
}

#[test]
fn the_rate_limit_is_shared_without_waste_followed_on_reload_and_lifted_at_stop() {
    // Four workers, only the first busy: it gets the whole allowance, not a quarter.
    let cfg = config(
        "127.0.0.1:9",
        "sample_one_in = 0\nqueue = 4096\nmax_records_per_second = 1000",
    );
    let published = Arc::new(Published::<Snapshot>::new(Arc::new(
        Builder::new().build(cfg.clone()).unwrap(),
    )));
    let (mut workers, mut queues) = (Vec::new(), Vec::new());
    for i in 0..4 {
        let mut w = LbStage::new(i, published.clone(), 7).unwrap();
        let (t, events) = tap(i, 4096);
        w.set_export(t);
        workers.push(w);
        queues.push(events);
    }
    let stats = Arc::new(ExportStats::default());
    let mut exporter = FlowExporter::new(queues, published.clone(), stats.clone());
    let mut pool = Pool::new(4096);
    let syns: Vec<Vec<u8>> = (0..3000).map(|i| craft::tcp(&client(i), true)).collect();
    for chunk in syns.chunks(32) {
        let (mut rx, mut tx) = (burst(), burst());
        for f in chunk {
            let mut p: Packet = pool.get().expect("pool");
            assert!(p.fill(f));
            rx.push(p);
        }
        workers[0].process(&mut rx, &mut tx, &mut pool, S);
        pool.put_all(&mut tx);
    }
    exporter.drain();
    assert_eq!(stats.created.load(Relaxed), 100);
    assert_eq!(stats.limited.load(Relaxed), 1);
    let options = stats.options.load(Relaxed);
    // A reload that changes only the rate: the same session (no templates sent again), the new
    // allowance (a tenth of a second of 10 a second: 1, after the bucket refills).
    let mut slow = (*cfg).clone();
    slow.ipfix.as_mut().unwrap().max_records_per_second = 10;
    published.publish(Arc::new(Builder::new().build(Arc::new(slow)).unwrap()));
    std::thread::sleep(Duration::from_millis(250));
    exporter.drain();
    assert_eq!(stats.created.load(Relaxed), 101);
    assert_eq!(stats.options.load(Relaxed), options);
    // Stopping: the last drain takes everything left, whatever the limit.
    exporter.run(Arc::new(std::sync::atomic::AtomicBool::new(true)));
    assert_eq!(stats.created.load(Relaxed), 3000);
    assert_eq!(stats.queues(), (0, 0));
}

#[test]
fn a_syn_on_the_ports_of_an_ended_connection_ends_it_and_starts_another() {
    let mut h = Harness::new(config("127.0.0.1:9", "sample_one_in = 0"));
    let e = client(7);
    let first = h.send(&[craft::tcp(&e, true)], S);
    h.send(&[craft::tcp(&e, false)], S + S / 10);
    h.exporter.drain();
    assert_eq!(
        (h.stats.created.load(Relaxed), h.stats.ended.load(Relaxed)),
        (1, 0)
    );
    // The client reuses its ports for a new connection: same backend, one record of each.
    let again = h.send(&[craft::tcp(&e, true)], 2 * S);
    assert_eq!(again, first);
    h.exporter.drain();
    assert_eq!(
        (h.stats.created.load(Relaxed), h.stats.ended.load(Relaxed)),
        (2, 1)
    );
    // Its end record carries the new start (the old connection's start was taken by its own end
    // record): nothing ends without a start.
    h.send(&[craft::tcp(&e, false)], 2 * S + S / 10);
    for k in 0..40 {
        h.worker.maintain(5 * S + k * S / 10, &mut h.pool);
    }
    h.exporter.drain();
    assert_eq!(h.stats.ended.load(Relaxed), 2);
    assert_eq!(h.stats.no_start.load(Relaxed), 0);
}
