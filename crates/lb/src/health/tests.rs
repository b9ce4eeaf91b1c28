use super::*;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A loopback server that accepts connections (so the backlog never fills), counts them, and for
/// HTTP answers with the current `response`. Dropping it closes the listening socket.
struct TestServer {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    response: Arc<Mutex<Option<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn bind(addr: &str) -> TestServer {
        TestServer::on(TcpListener::bind(addr).unwrap(), None)
    }

    fn http(response: &[u8]) -> TestServer {
        TestServer::on(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            Some(response.to_vec()),
        )
    }

    fn on(l: TcpListener, response: Option<Vec<u8>>) -> TestServer {
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let response = Arc::new(Mutex::new(response));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, r, st) = (accepted.clone(), response.clone(), stop.clone());
        let thread = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        let resp = r.lock().unwrap().clone();
                        if let Some(resp) = resp {
                            answer(s, &resp);
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        TestServer {
            addr,
            accepted,
            response,
            stop,
            thread: Some(thread),
        }
    }

    fn set_response(&self, r: &[u8]) {
        *self.response.lock().unwrap() = Some(r.to_vec());
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

fn answer(mut s: TcpStream, resp: &[u8]) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut req = Vec::new();
    let mut b = [0u8; 512];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&b[..n]),
        }
    }
    let _ = s.write_all(resp);
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

const OK_BODY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nhealthy\n";
const WRONG_BODY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndraining\n";
const ERROR_500: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";

fn config(pools: &str, vip_pools: &str) -> LbConfig {
    LbConfig::from_toml(&format!(
        r#"
        [balancer]
        address = "10.0.0.2"
        [[vip]]
        name = "web"
        address = "203.0.113.10"
        port = 80
        protocol = "tcp"
        pools = [{vip_pools}]
        {pools}
        "#
    ))
    .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Wait for the next event (or fail after `within`).
fn next_event(rx: &Receiver<HealthEvent>, within: Duration) -> HealthEvent {
    rx.recv_timeout(within)
        .unwrap_or_else(|e| panic!("no health event within {within:?}: {e}"))
}

#[test]
fn plan_dedups_by_address_and_resolves_ports() {
    // Two pools hold 10.0.1.1 with the same check; a third pool has no check.
    let cfg = config(
        r#"
        [[pool]]
        name = "a"
        backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }]
        health = { kind = "tcp", interval_ms = 100, timeout_ms = 50 }
        [[pool]]
        name = "b"
        backends = [{ address = "10.0.1.1" }]
        health = { kind = "tcp", interval_ms = 100, timeout_ms = 50 }
        [[pool]]
        name = "c"
        backends = [{ address = "10.0.1.3" }]
        [[pool]]
        name = "unused"
        backends = [{ address = "10.0.9.9" }, { address = "10.0.1.3" }]
        health = { kind = "tcp" }
        "#,
        r#""a", "b", "c""#,
    );
    let p = plan(&cfg).unwrap();
    let addrs: Vec<IpAddr> = p.checks.iter().map(|c| c.address).collect();
    assert_eq!(addrs, vec![ip("10.0.1.1"), ip("10.0.1.2")]);
    assert!(p.checks.iter().all(|c| c.port == 80 && c.pool == "a"));
    // 10.0.1.3 is also in "unused", whose check does not run: no VIP uses that pool.
    assert_eq!(p.unchecked, vec![ip("10.0.1.3")]);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);

    // Nested: the VIP uses "outer", which nests the checked pool "inner".
    let cfg = config(
        r#"
        [[pool]]
        name = "inner"
        backends = [{ address = "10.0.1.1" }]
        health = { kind = "http", port = 8080 }
        [[pool]]
        name = "outer"
        pools = ["inner"]
        backends = [{ address = "10.0.1.2" }]
        "#,
        r#""outer""#,
    );
    let p = plan(&cfg).unwrap();
    assert_eq!(p.checks.len(), 1);
    assert_eq!(
        (p.checks[0].address, p.checks[0].port),
        (ip("10.0.1.1"), 8080)
    );
    assert_eq!(p.unchecked, vec![ip("10.0.1.2")]);

    // Different checks for one address: the first pool's wins, the conflict is reported.
    let cfg = config(
        r#"
        [[pool]]
        name = "a"
        backends = [{ address = "10.0.1.1" }]
        health = { kind = "tcp", port = 8080 }
        [[pool]]
        name = "b"
        backends = [{ address = "10.0.1.1" }]
        health = { kind = "http", path = "/healthz" }
        "#,
        r#""b", "a""#,
    );
    let p = plan(&cfg).unwrap();
    assert_eq!(p.checks.len(), 1);
    assert_eq!(
        p.checks[0].pool, "a",
        "configuration order of pools decides"
    );
    assert_eq!(p.checks[0].port, 8080);
    assert_eq!(p.conflicts.len(), 1);
    assert!(p.conflicts[0].contains("10.0.1.1"), "{}", p.conflicts[0]);
}

#[test]
fn plan_needs_a_port() {
    let text = r#"
        [balancer]
        address = "10.0.0.2"
        [[vip]]
        name = "any"
        address = "203.0.113.10"
        port = 0
        protocol = "udp"
        pools = ["dns"]
        [[pool]]
        name = "dns"
        backends = [{ address = "10.0.1.1" }]
        health = { kind = "tcp" }
    "#;
    let e = plan(&LbConfig::from_toml(text).unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("pool \"dns\".health.port: required"),
        "{e}"
    );
    let fixed = text.replace(r#"kind = "tcp""#, r#"kind = "tcp", port = 53"#);
    let p = plan(&LbConfig::from_toml(&fixed).unwrap()).unwrap();
    assert_eq!(p.checks[0].port, 53);
}

#[test]
fn tcp_backend_goes_down_and_comes_back() {
    let server = TestServer::bind("127.0.0.1:0");
    let port = server.addr.port();
    let cfg = config(
        &format!(
            r#"
            [[pool]]
            name = "p"
            backends = [{{ address = "127.0.0.1" }}]
            health = {{ kind = "tcp", port = {port}, interval_ms = 40, timeout_ms = 40, rise = 2, fall = 3 }}
            "#
        ),
        r#""p""#,
    );
    let (m, rx) = HealthMonitor::start(plan(&cfg).unwrap(), HealthOptions::default()).unwrap();
    assert_eq!(m.threads(), 1);
    let s = m.state(ip("127.0.0.1")).unwrap();
    assert!(s.healthy, "starts healthy by default");
    assert!(s.reason.starts_with("initial state: up"), "{}", s.reason);

    // While the server listens: checks succeed, no event.
    thread::sleep(Duration::from_millis(200));
    assert!(rx.try_recv().is_err());
    let s = m.state(ip("127.0.0.1")).unwrap();
    assert!(s.successes >= 2, "{s:?}");
    assert_eq!(s.reason, "tcp connect ok");

    // Close it: down after `fall` = 3 failures, i.e. at least 2 intervals after the first one.
    drop(server);
    let t0 = Instant::now();
    let e = next_event(&rx, Duration::from_secs(5));
    let took = t0.elapsed();
    assert_eq!(e.address, ip("127.0.0.1"));
    assert!(!e.healthy);
    assert!(
        e.reason.starts_with(&format!(
            "3 consecutive failed tcp checks of 127.0.0.1:{port}: tcp connect"
        )),
        "{}",
        e.reason
    );
    assert!(took >= Duration::from_millis(60), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(!m.state(ip("127.0.0.1")).unwrap().healthy);

    // Reopen on the same port: up after `rise` = 2 successes.
    let server = TestServer::bind(&format!("127.0.0.1:{port}"));
    let e = next_event(&rx, Duration::from_secs(5));
    assert!(e.healthy, "{e:?}");
    assert!(
        e.reason.starts_with("2 consecutive successful tcp checks"),
        "{}",
        e.reason
    );
    let s = m.state(ip("127.0.0.1")).unwrap();
    assert!(s.healthy && s.transitions == 2, "{s:?}");
    // The kernel completed the handshakes; the test server accepts them shortly after.
    let t0 = Instant::now();
    while server.accepted() < 2 && t0.elapsed() < Duration::from_secs(2) {
        thread::sleep(Duration::from_millis(5));
    }
    assert!(server.accepted() >= 2);
}

#[test]
fn http_status_and_body_decide() {
    let server = TestServer::http(OK_BODY);
    let port = server.addr.port();
    let cfg = config(
        &format!(
            r#"
            [[pool]]
            name = "p"
            backends = [{{ address = "127.0.0.1" }}]
            health = {{ kind = "http", path = "/healthz", body = "healthy", port = {port}, interval_ms = 100, timeout_ms = 100, rise = 1, fall = 2 }}
            "#
        ),
        r#""p""#,
    );
    let (m, rx) = HealthMonitor::start(plan(&cfg).unwrap(), HealthOptions::default()).unwrap();
    thread::sleep(Duration::from_millis(250));
    assert!(rx.try_recv().is_err());
    assert_eq!(
        m.state(ip("127.0.0.1")).unwrap().reason,
        "http 200, body matches"
    );

    server.set_response(ERROR_500);
    let e = next_event(&rx, Duration::from_secs(5));
    assert!(!e.healthy);
    assert!(
        e.reason.contains("status 500 for GET /healthz, want 200"),
        "{}",
        e.reason
    );

    server.set_response(OK_BODY);
    let e = next_event(&rx, Duration::from_secs(5));
    assert!(e.healthy, "{e:?}");

    server.set_response(WRONG_BODY);
    let e = next_event(&rx, Duration::from_secs(5));
    assert!(!e.healthy);
    assert!(
        e.reason.contains("does not contain \"healthy\""),
        "{}",
        e.reason
    );
}

#[test]
fn one_check_stream_per_address() {
    let server = TestServer::bind("127.0.0.1:0");
    let other = TestServer::bind("127.0.0.1:0");
    let (port, other_port) = (server.addr.port(), other.addr.port());
    // Pools "a" and "b" both hold 127.0.0.1 with the same check; pool "c" too, with a different
    // port (it loses to "a", which comes first).
    let check = format!("{{ kind = \"tcp\", port = {port}, interval_ms = 40, timeout_ms = 40 }}");
    let cfg = config(
        &format!(
            r#"
            [[pool]]
            name = "a"
            backends = [{{ address = "127.0.0.1" }}]
            health = {check}
            [[pool]]
            name = "b"
            backends = [{{ address = "127.0.0.1" }}]
            health = {check}
            [[pool]]
            name = "c"
            backends = [{{ address = "127.0.0.1" }}]
            health = {{ kind = "tcp", port = {other_port}, interval_ms = 10, timeout_ms = 10 }}
            "#
        ),
        r#""a", "b", "c""#,
    );
    let (m, _rx) = HealthMonitor::start(plan(&cfg).unwrap(), HealthOptions::default()).unwrap();
    assert_eq!(m.threads(), 1);
    assert_eq!(m.plan().conflicts.len(), 1);
    let t0 = Instant::now();
    thread::sleep(Duration::from_millis(400));
    let n = server.accepted();
    let elapsed = t0.elapsed().as_millis() as u64;
    // One stream at 40 ms: about elapsed/40 + 1 connections; two streams would double it.
    let one_stream = elapsed / 40 + 1;
    assert!(n >= 3, "{n} checks in {elapsed} ms");
    assert!(
        n <= one_stream + 1,
        "{n} checks in {elapsed} ms: more than one stream"
    );
    assert_eq!(other.accepted(), 0, "the losing pool's check never runs");
    let s = m.state(ip("127.0.0.1")).unwrap();
    assert_eq!(s.check.unwrap().pool, "a");
}

#[test]
fn reload_adds_removes_and_keeps() {
    let a = TestServer::bind("127.0.0.1:0");
    let port = a.addr.port();
    // 127.0.0.2 is loopback too (127/8); bind it on the same port.
    let b = TestServer::bind(&format!("127.0.0.2:{port}"));
    let pool = |backends: &str| {
        format!(
            r#"
            [[pool]]
            name = "p"
            backends = [{backends}]
            health = {{ kind = "tcp", port = {port}, interval_ms = 30, timeout_ms = 30, rise = 2, fall = 2 }}
            [[pool]]
            name = "plain"
            backends = [{{ address = "10.9.9.9" }}]
            "#
        )
    };
    let cfg1 = config(&pool(r#"{ address = "127.0.0.1" }"#), r#""p", "plain""#);
    let (mut m, rx) = HealthMonitor::start(plan(&cfg1).unwrap(), HealthOptions::default()).unwrap();
    let unchecked = m.state(ip("10.9.9.9")).unwrap();
    assert!(unchecked.healthy && unchecked.check.is_none());
    assert_eq!(unchecked.reason, "no health check");
    assert_eq!(
        unchecked.to_string(),
        "10.9.9.9 up for 0s (unchecked): no health check"
    );
    let line = m.state(ip("127.0.0.1")).unwrap().to_string();
    assert!(
        line.starts_with(&format!(
            "127.0.0.1 up for 0s (tcp 127.0.0.1:{port} of pool \"p\"; "
        )),
        "{line}"
    );
    thread::sleep(Duration::from_millis(100));
    let before = m.state(ip("127.0.0.1")).unwrap();

    // Add 127.0.0.2: it starts down and comes up after `rise` checks; 127.0.0.1 keeps its state.
    let cfg2 = config(
        &pool(r#"{ address = "127.0.0.1" }, { address = "127.0.0.2" }"#),
        r#""p", "plain""#,
    );
    let ev = m.update(plan(&cfg2).unwrap()).unwrap();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].address, ip("127.0.0.2"));
    assert!(!ev[0].healthy);
    assert_eq!(m.threads(), 2);
    let e = next_event(&rx, Duration::from_secs(5));
    assert_eq!((e.address, e.healthy), (ip("127.0.0.2"), true));
    let kept = m.state(ip("127.0.0.1")).unwrap();
    assert_eq!(kept.since, before.since);
    assert!(kept.successes > before.successes, "checks continued");
    assert_eq!(m.states().len(), 3);

    // Remove 127.0.0.1 and make it unreachable: no event about it ever comes.
    let cfg3 = config(&pool(r#"{ address = "127.0.0.2" }"#), r#""p", "plain""#);
    assert!(m.update(plan(&cfg3).unwrap()).unwrap().is_empty());
    assert_eq!(m.threads(), 1);
    assert!(m.state(ip("127.0.0.1")).is_none());
    drop(a);
    thread::sleep(Duration::from_millis(150));
    assert!(rx.try_recv().is_err());

    // Take 127.0.0.2 down, then remove its check: it becomes healthy (unchecked) at once.
    drop(b);
    let e = next_event(&rx, Duration::from_secs(5));
    assert_eq!((e.address, e.healthy), (ip("127.0.0.2"), false));
    let cfg4 = config(
        r#"
        [[pool]]
        name = "p"
        backends = [{ address = "127.0.0.2" }]
        [[pool]]
        name = "plain"
        backends = [{ address = "10.9.9.9" }]
        "#,
        r#""p", "plain""#,
    );
    let ev = m.update(plan(&cfg4).unwrap()).unwrap();
    assert_eq!(ev.len(), 1);
    assert!(ev[0].healthy && ev[0].reason.contains("removed"), "{ev:?}");
    assert_eq!(m.threads(), 0);
    assert!(m.state(ip("127.0.0.2")).unwrap().healthy);
}
