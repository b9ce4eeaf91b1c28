use super::*;
use std::sync::atomic::AtomicU64;

struct TestHandler {
    generation: AtomicU64,
    fail_reload: AtomicBool,
}

impl AdminHandler for TestHandler {
    fn metrics(&self) -> String {
        "# HELP x_total test\n# TYPE x_total counter\nx_total 1\n".into()
    }
    fn reload(&self) -> Result<u64, ReloadError> {
        if self.fail_reload.load(Ordering::Relaxed) {
            Err(ReloadError::Rejected(
                "vip[0].pools[0]: no pool named \"nope\"".into(),
            ))
        } else {
            Ok(self.generation.fetch_add(1, Ordering::Relaxed) + 1)
        }
    }
    fn traces(&self) -> String {
        "{\"seq\":1}\n{\"seq\":2}\n".into()
    }
    fn status(&self) -> String {
        if self.fail_reload.load(Ordering::Relaxed) {
            panic!("status handler bug");
        }
        "all good".into()
    }
}

fn server(opts: AdminOptions) -> (AdminServer, Arc<TestHandler>) {
    let h = Arc::new(TestHandler {
        generation: AtomicU64::new(1),
        fail_reload: AtomicBool::new(false),
    });
    let s = AdminServer::start_with("127.0.0.1:0".parse().unwrap(), h.clone(), opts).unwrap();
    (s, h)
}

/// Send raw bytes, read the whole answer; (status, headers, body).
fn raw(addr: SocketAddr, req: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    read_answer(&mut s)
}

fn read_answer(s: &mut TcpStream) -> (u16, String, String) {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{text:?}"));
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(head.contains("\r\nConnection: close"), "{head}");
    (status, head.to_string(), {
        assert!(body.len() == len || body.is_empty(), "{len} vs {body:?}");
        body.to_string()
    })
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

#[test]
fn routes() {
    let (s, h) = server(AdminOptions::default());
    let a = s.local_addr();
    let (st, head, body) = get(a, "/metrics");
    assert_eq!(st, 200);
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert_eq!(body, h.metrics());
    let (st, head, body) = get(a, "/trace?limit=5");
    assert_eq!(st, 200);
    assert!(head.contains("application/x-ndjson"));
    assert_eq!(body.lines().count(), 2);
    assert_eq!(get(a, "/status").2, "all good\n");
    assert_eq!(get(a, "/healthz").2, "ok\n");
    assert!(get(a, "/").2.contains("/reload"));

    // Reload: the new generation, or 400 with the error naming the field.
    let post = b"POST /reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    let (st, _, body) = raw(a, post);
    assert_eq!((st, body.as_str()), (200, "generation 2\n"));
    h.fail_reload.store(true, Ordering::Relaxed);
    let (st, _, body) = raw(a, post);
    assert_eq!(st, 400);
    assert_eq!(body, "vip[0].pools[0]: no pool named \"nope\"\n");
    // A body is read and ignored; HTTP/1.0 is fine.
    h.fail_reload.store(false, Ordering::Relaxed);
    let (st, _, body) = raw(
        a,
        b"POST /reload HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!((st, body.as_str()), (200, "generation 3\n"));

    // HEAD: headers with the length, no body.
    let (st, head, body) = raw(a, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(st, 200);
    assert!(head.contains(&format!("Content-Length: {}", h.metrics().len())));
    assert!(body.is_empty());
}

#[test]
fn bad_requests() {
    let (s, _) = server(AdminOptions {
        max_head: 1024,
        max_body: 100,
        ..AdminOptions::default()
    });
    let a = s.local_addr();
    let cases: &[(&[u8], u16, &str)] = &[
        (b"GET /nope HTTP/1.1\r\n\r\n", 404, "no such endpoint"),
        (b"GET /reload HTTP/1.1\r\n\r\n", 405, "use POST"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", 405, "use GET, HEAD"),
        (b"garbage\r\n\r\n", 400, "malformed request line"),
        (
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            400,
            "malformed request line",
        ),
        (b"get /metrics HTTP/1.1\r\n\r\n", 400, "malformed method"),
        (
            b"GET metrics HTTP/1.1\r\n\r\n",
            400,
            "malformed request target",
        ),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505, "not supported"),
        (
            b"GET /metrics SPDY/3\r\n\r\n",
            400,
            "malformed HTTP version",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nNoColonHere\r\n\r\n",
            400,
            "malformed header line",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
            400,
            "malformed header name",
        ),
        (
            b"GET /metrics HTTP/1.1\r\nX: a\r\n  folded\r\n\r\n",
            400,
            "folding",
        ),
        (
            b"POST /reload HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            400,
            "Content-Length",
        ),
        (
            b"POST /reload HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "conflicting",
        ),
        (
            b"POST /reload HTTP/1.1\r\nContent-Length: 101\r\n\r\n",
            413,
            "exceeds 100",
        ),
        (
            b"POST /reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            501,
            "Transfer-Encoding",
        ),
        (b"GET /\xff HTTP/1.1\r\n\r\n", 400, "not UTF-8"),
    ];
    for (req, status, text) in cases {
        let (st, head, body) = raw(a, req);
        assert_eq!(st, *status, "{:?}: {body}", String::from_utf8_lossy(req));
        assert!(
            body.contains(text),
            "{:?}: {body}",
            String::from_utf8_lossy(req)
        );
        if st == 405 {
            assert!(head.contains("\r\nAllow: "), "{head}");
        }
    }
    // Oversized header block.
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 4000));
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(raw(a, &big).0, 431);
    // Bare LF line endings are accepted.
    assert_eq!(raw(a, b"GET /healthz HTTP/1.1\nHost: x\n\n").0, 200);
    // The server still works.
    assert_eq!(get(a, "/healthz").0, 200);
}

#[test]
fn slow_clients_time_out_and_do_not_block_others() {
    let (s, _) = server(AdminOptions {
        workers: 2,
        request_timeout: Duration::from_millis(1000),
        ..AdminOptions::default()
    });
    let a = s.local_addr();
    // Sends half a request line, then nothing.
    let mut slow = TcpStream::connect(a).unwrap();
    slow.write_all(b"GET /met").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    thread::sleep(Duration::from_millis(50));
    // The other worker serves meanwhile.
    let t0 = Instant::now();
    assert_eq!(get(a, "/healthz").0, 200);
    assert!(
        t0.elapsed() < Duration::from_millis(700),
        "served while the slow client still has time left"
    );
    let (st, _, body) = read_answer(&mut slow);
    assert_eq!(st, 408, "{body}");
    // A body that never completes.
    let mut slow = TcpStream::connect(a).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"POST /reload HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    assert_eq!(read_answer(&mut slow).0, 408);
}

#[test]
fn connections_beyond_the_queue_get_503() {
    let (s, _) = server(AdminOptions {
        workers: 1,
        queue: 1,
        request_timeout: Duration::from_secs(3),
        ..AdminOptions::default()
    });
    let a = s.local_addr();
    // Two idle clients: one occupies the only worker (or waits in the queue), the other fills
    // the queue (or is turned away). Either way the queue holds one connection for the next 3 s.
    let _busy = TcpStream::connect(a).unwrap();
    thread::sleep(Duration::from_millis(50));
    let _queued = TcpStream::connect(a).unwrap();
    thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let (st, head, _) = get(a, "/metrics");
    assert_eq!(st, 503);
    assert!(head.contains("Retry-After: 1"));
    assert!(t0.elapsed() < Duration::from_secs(1), "503 is immediate");
}

#[test]
fn handler_panic_is_a_500_and_shutdown_is_prompt() {
    let (s, h) = server(AdminOptions::default());
    let a = s.local_addr();
    h.fail_reload.store(true, Ordering::Relaxed);
    let (st, _, body) = get(a, "/status");
    assert_eq!(st, 500, "{body}");
    h.fail_reload.store(false, Ordering::Relaxed);
    assert_eq!(get(a, "/status").0, 200, "the worker survived");

    // A client in the middle of a request does not hold up shutdown.
    let mut slow = TcpStream::connect(a).unwrap();
    slow.write_all(b"GET /").unwrap();
    thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    s.shutdown();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(TcpStream::connect(a).is_err(), "listener closed");
}

#[test]
fn head_parsing_unit() {
    let (r, n) =
        parse_head("POST /reload?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 12\r\n\r\n").unwrap();
    assert_eq!(
        r,
        Request {
            method: "POST".into(),
            path: "/reload".into()
        }
    );
    assert_eq!(n, 12);
    assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
    assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
    assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
}
