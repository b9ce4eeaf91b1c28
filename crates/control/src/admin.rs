//! The admin HTTP server: `/metrics`, `/reload`, `/trace`, `/status` (Maglev §4.4's "metrics
//! from each Maglev machine via an HTTP server").
//!
//! A deliberately small HTTP/1.1 server on `std::net`: one request per connection
//! (`Connection: close`), no keep-alive, no TLS (bind it to a management address). What it serves
//! comes from an [`AdminHandler`] the balancer implements.
//!
//! # Robustness
//!
//! * **Bounded concurrency:** one accept thread and [`AdminOptions::workers`] handler threads fed
//!   through a queue of [`AdminOptions::queue`] connections. When all are busy and the queue is
//!   full, a new connection gets `503 Service Unavailable` at once and is closed, so a flood of
//!   connections costs a bounded number of threads and file descriptors.
//! * **Slow clients:** a request must arrive completely within [`AdminOptions::request_timeout`]
//!   (default 5 s), else `408`; sockets are read in 100 ms slices so shutdown is not held up.
//! * **Size limits:** the request line and headers at most [`AdminOptions::max_head`] bytes (`431`),
//!   a body at most [`AdminOptions::max_body`] (`413`; bodies are read and ignored — `POST /reload`
//!   re-reads the configuration file). `Transfer-Encoding` is refused (`501`).
//! * **Malformed requests** get `400` (bad request line or header), `505` (not HTTP/1.x), `405`
//!   with `Allow` (wrong method), `404` (unknown path). A panicking handler gives `500`, and the
//!   server keeps serving.
//! * **Shutdown:** dropping the [`AdminServer`] (or [`AdminServer::shutdown`]) stops accepting
//!   within 100 ms and joins every thread; a request in progress is finished or abandoned within
//!   a 100 ms read slice.
//!
//! # Routes
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | [`AdminHandler::metrics`], `text/plain; version=0.0.4` |
//! | POST | `/reload` | `200 generation N` or `400` with the error naming the field |
//! | GET | `/trace` | [`AdminHandler::traces`]: JSON lines, `application/x-ndjson` |
//! | GET | `/status` | [`AdminHandler::status`], `text/plain` |
//! | GET | `/healthz` | `ok` (the admin server itself is alive) |
//! | GET | `/` | the list of routes |
//!
//! `HEAD` is accepted wherever `GET` is. Query strings are ignored.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What the admin endpoints serve; implemented by the balancer. Called from the server's handler
/// threads, possibly concurrently: implementations synchronise themselves (a reload typically
/// takes the control loop's lock or sends it a message and waits for the answer).
pub trait AdminHandler: Send + Sync {
    /// The Prometheus text (built with [`crate::metrics::Exposition`]).
    fn metrics(&self) -> String;
    /// Re-read and apply the configuration: the new generation, or why not (the running
    /// configuration stays).
    fn reload(&self) -> Result<u64, ReloadError>;
    /// Recent trace records as JSON lines (see [`crate::trace::TraceLog::json_lines`]).
    fn traces(&self) -> String;
    /// A human-readable status page.
    fn status(&self) -> String;
}

/// Why `POST /reload` did not apply a new configuration; the running one stays.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The configuration was refused: the message names the field (HTTP 400).
    #[error("{0}")]
    Rejected(String),
    /// The service cannot take a reload now: it is shutting down, or did not answer in time
    /// (HTTP 503).
    #[error("{0}")]
    Unavailable(&'static str),
}

/// Limits of the admin server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminOptions {
    /// Handler threads. Default 2.
    pub workers: usize,
    /// Accepted connections waiting for a handler thread; beyond that, `503`. Default 16.
    pub queue: usize,
    /// Time a client has to send its whole request. Default 5 s.
    pub request_timeout: Duration,
    /// Most bytes of request line and headers. Default 8 KiB.
    pub max_head: usize,
    /// Most bytes of request body. Default 64 KiB.
    pub max_body: usize,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            workers: 2,
            queue: 16,
            request_timeout: Duration::from_secs(5),
            max_head: 8 * 1024,
            max_body: 64 * 1024,
        }
    }
}

/// A running admin server. Dropping it stops it.
pub struct AdminServer {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// The read slice: how often a blocked reader looks at the deadline and the stop flag.
const SLICE: Duration = Duration::from_millis(100);

impl AdminServer {
    /// Bind `addr` (port 0: any free port, see [`AdminServer::local_addr`]) and serve `handler`
    /// with the default [`AdminOptions`].
    pub fn start(addr: SocketAddr, handler: Arc<dyn AdminHandler>) -> io::Result<AdminServer> {
        AdminServer::start_with(addr, handler, AdminOptions::default())
    }

    /// Bind `addr` and serve `handler` with the given limits.
    pub fn start_with(
        addr: SocketAddr,
        handler: Arc<dyn AdminHandler>,
        opts: AdminOptions,
    ) -> io::Result<AdminServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel::<TcpStream>(opts.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for _ in 0..opts.workers.max(1) {
            let (rx, handler, st) = (rx.clone(), handler.clone(), stop.clone());
            let t = thread::Builder::new()
                .name("fp-admin".into())
                .spawn(move || worker(&rx, &*handler, &opts, &st));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    stop.store(true, Ordering::Release);
                    drop(tx);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        let st = stop.clone();
        let accept = thread::Builder::new()
            .name("fp-admin-accept".into())
            .spawn(move || accept_loop(listener, tx, &st));
        match accept {
            Ok(t) => threads.push(t),
            Err(e) => {
                // `tx` moved into the closure that was never run and is dropped: workers exit.
                stop.store(true, Ordering::Release);
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        Ok(AdminServer {
            local,
            stop,
            threads,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stop serving and wait for the server's threads.
    pub fn shutdown(self) {
        drop(self)
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, tx: SyncSender<TcpStream>, stop: &AtomicBool) {
    let fd = listener.as_raw_fd();
    while !stop.load(Ordering::Acquire) {
        match fp_engine::sys::poll_readable(&[fd], SLICE) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                thread::sleep(SLICE);
                continue;
            }
        }
        loop {
            match listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(false).is_err() {
                        continue;
                    }
                    match tx.try_send(s) {
                        Ok(()) => {}
                        Err(TrySendError::Full(s)) => busy(s),
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    thread::sleep(SLICE);
                    break;
                }
            }
        }
    }
}

/// Tell a client that found every handler busy, without waiting on it.
fn busy(mut s: TcpStream) {
    let _ = s.set_write_timeout(Some(SLICE));
    let body = "busy: too many admin connections\n";
    let _ = s.write_all(
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let _ = s.shutdown(Shutdown::Write);
    // Swallow what the client already sent, without waiting: closing with unread data would send
    // a reset that can destroy the answer before the client reads it.
    if s.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match s.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

fn worker(
    rx: &Mutex<Receiver<TcpStream>>,
    handler: &dyn AdminHandler,
    opts: &AdminOptions,
    stop: &AtomicBool,
) {
    loop {
        let next = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            // Wake up now and then to notice `stop` even if the accept thread is gone.
            rx.recv_timeout(SLICE)
        };
        match next {
            Ok(s) => {
                if stop.load(Ordering::Acquire) {
                    continue; // shutting down: drop queued connections
                }
                serve(s, handler, opts, stop);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// A parsed request (only what routing needs).
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    path: String,
}

/// An error answer: status and a message for the body.
#[derive(Debug, PartialEq, Eq)]
struct Reject(u16, String);

fn reject(code: u16, msg: impl Into<String>) -> Reject {
    Reject(code, msg.into())
}

/// Why reading stopped.
enum ReadEnd {
    Data(usize),
    Eof,
    Stopped,
    TimedOut,
}

/// Read into `buf` with 100 ms slices until data, EOF, the deadline or `stop`.
fn read_some(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<ReadEnd> {
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(ReadEnd::Stopped);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(ReadEnd::TimedOut);
        }
        s.set_read_timeout(Some(left.min(SLICE)))?;
        match s.read(buf) {
            Ok(0) => return Ok(ReadEnd::Eof),
            Ok(n) => return Ok(ReadEnd::Data(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

/// End of the header block: after `\r\n\r\n` (or a bare `\n\n`).
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = crate::health::find_bytes(buf, b"\r\n\r\n").map(|i| i + 4);
    let lf = crate::health::find_bytes(buf, b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Read and parse one request. `Ok(None)`: the client went away or we are stopping (no answer).
fn read_request(
    s: &mut TcpStream,
    opts: &AdminOptions,
    stop: &AtomicBool,
) -> Result<Option<Request>, Reject> {
    let deadline = Instant::now() + opts.request_timeout;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(e) = head_end(&buf) {
            break e;
        }
        if buf.len() > opts.max_head {
            return Err(reject(431, "request header fields too large"));
        }
        match read_some(s, &mut chunk, deadline, stop) {
            Ok(ReadEnd::Data(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(ReadEnd::Eof) | Ok(ReadEnd::Stopped) | Err(_) => return Ok(None),
            Ok(ReadEnd::TimedOut) => return Err(reject(408, "request timeout")),
        }
    };
    if end > opts.max_head {
        return Err(reject(431, "request header fields too large"));
    }
    let head =
        std::str::from_utf8(&buf[..end]).map_err(|_| reject(400, "request header is not UTF-8"))?;
    let (req, content_length) = parse_head(head)?;
    if content_length > opts.max_body {
        return Err(reject(
            413,
            format!(
                "request body of {content_length} bytes exceeds {}",
                opts.max_body
            ),
        ));
    }
    // Read (and ignore) the body.
    let mut have = buf.len() - end;
    while have < content_length {
        match read_some(s, &mut chunk, deadline, stop) {
            Ok(ReadEnd::Data(n)) => have += n,
            Ok(ReadEnd::Eof) | Ok(ReadEnd::Stopped) | Err(_) => return Ok(None),
            Ok(ReadEnd::TimedOut) => return Err(reject(408, "request timeout")),
        }
    }
    Ok(Some(req))
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parse the request line and headers; returns the request and its Content-Length.
fn parse_head(head: &str) -> Result<(Request, usize), Reject> {
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(reject(400, format!("malformed request line {line:?}")));
    };
    if !is_token(method) || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(reject(400, format!("malformed method {method:?}")));
    }
    if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(reject(400, format!("malformed request target {target:?}")));
    }
    match version {
        "HTTP/1.1" | "HTTP/1.0" => {}
        v if v.starts_with("HTTP/") => {
            return Err(reject(505, format!("{v} is not supported; use HTTP/1.1")))
        }
        v => return Err(reject(400, format!("malformed HTTP version {v:?}"))),
    }
    let mut content_length: Option<usize> = None;
    for l in lines {
        if l.is_empty() {
            continue; // the blank line(s) ending the head
        }
        if l.starts_with(' ') || l.starts_with('\t') {
            return Err(reject(400, "obsolete header line folding"));
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(reject(400, format!("malformed header line {l:?}")));
        };
        if !is_token(name) {
            return Err(reject(400, format!("malformed header name {name:?}")));
        }
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| reject(400, format!("malformed Content-Length {value:?}")))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(reject(400, "conflicting Content-Length headers"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(reject(501, "Transfer-Encoding is not supported"));
        }
    }
    let path = target
        .split(['?', '#'])
        .next()
        .unwrap_or(target)
        .to_string();
    Ok((
        Request {
            method: method.to_string(),
            path,
        },
        content_length.unwrap_or(0),
    ))
}

/// An answer to send.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: Option<&'static str>,
}

fn text(status: u16, body: impl Into<String>) -> Response {
    let mut body = body.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body,
        allow: None,
    }
}

const INDEX: &str = "flowplane admin endpoints:\n\
    GET  /metrics   Prometheus metrics\n\
    POST /reload    re-read the configuration file\n\
    GET  /trace     recent packet-tracer records (JSON lines)\n\
    GET  /status    status page\n\
    GET  /healthz   liveness of this server\n";

fn route(req: &Request, handler: &dyn AdminHandler) -> Response {
    let get = req.method == "GET" || req.method == "HEAD";
    let allow = match req.path.as_str() {
        "/metrics" | "/trace" | "/status" | "/healthz" | "/" => "GET, HEAD",
        "/reload" => "POST",
        _ => return text(404, format!("no such endpoint: {}", req.path)),
    };
    let method_ok = if allow == "POST" {
        req.method == "POST"
    } else {
        get
    };
    if !method_ok {
        let mut r = text(405, format!("{} {}: use {allow}", req.method, req.path));
        r.allow = Some(allow);
        return r;
    }
    let call = |f: &dyn Fn() -> Response| {
        panic::catch_unwind(AssertUnwindSafe(f))
            .unwrap_or_else(|_| text(500, "internal error: the handler panicked"))
    };
    match req.path.as_str() {
        "/metrics" => call(&|| Response {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: handler.metrics(),
            allow: None,
        }),
        "/reload" => call(&|| match handler.reload() {
            Ok(g) => text(200, format!("generation {g}")),
            Err(e @ ReloadError::Rejected(_)) => text(400, e.to_string()),
            Err(e @ ReloadError::Unavailable(_)) => text(503, e.to_string()),
        }),
        "/trace" => call(&|| Response {
            status: 200,
            content_type: "application/x-ndjson",
            body: handler.traces(),
            allow: None,
        }),
        "/status" => call(&|| text(200, handler.status())),
        "/healthz" => text(200, "ok"),
        _ => text(200, INDEX),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

fn serve(mut s: TcpStream, handler: &dyn AdminHandler, opts: &AdminOptions, stop: &AtomicBool) {
    let _ = s.set_nodelay(true);
    let (resp, head_only) = match read_request(&mut s, opts, stop) {
        Ok(None) => return,
        Ok(Some(req)) => (route(&req, handler), req.method == "HEAD"),
        Err(Reject(code, msg)) => (text(code, msg), false),
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: close\r\n",
        resp.status,
        reason(resp.status),
        resp.content_type,
        resp.body.len()
    );
    if let Some(a) = resp.allow {
        out.push_str(&format!("Allow: {a}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.set_write_timeout(Some(opts.request_timeout));
    let ok = s.write_all(out.as_bytes()).is_ok()
        && (head_only || s.write_all(resp.body.as_bytes()).is_ok());
    if !ok {
        return;
    }
    // Close gently: after our FIN, swallow what the client still sends (an unread request body
    // would otherwise make the kernel answer with a reset that can destroy the response).
    let _ = s.shutdown(Shutdown::Write);
    let _ = s.set_read_timeout(Some(SLICE));
    let mut sink = [0u8; 4096];
    let mut budget = opts.max_body + opts.max_head;
    while budget > 0 {
        match s.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => budget = budget.saturating_sub(n),
        }
    }
}

#[cfg(test)]
mod tests;
