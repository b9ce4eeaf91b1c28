//! A small, blocking client of etcd v3 through its JSON gateway (`POST /v3/...` on the client
//! port, served by every etcd since 3.3): key ranges, puts, deletes, transactions, leases and
//! watches, enough for a control plane that keeps its state in etcd.
//!
//! Why the gateway and not gRPC: flowplane's control plane is synchronous (plain threads, no async
//! runtime), and a watch over the gateway is one long HTTP/1.1 response whose chunks carry one
//! JSON message per line; keys and values are base64 in JSON, revisions and lease ids decimal
//! strings. The gateway is part of etcd and answers exactly what the gRPC API answers.
//!
//! Every request opens one TCP connection (`Connection: close`) to the first endpoint that
//! accepts it, with a connect timeout and a read timeout; responses are bounded (64 MiB), and key
//! ranges are read in pages of [`PAGE`] keys at one revision, so a large prefix reads
//! consistently without one huge response.
//!
//! ```no_run
//! use fp_control::etcd::{Etcd, WatchMsg};
//! let etcd = Etcd::new(&["http://127.0.0.1:2379".to_string()])?;
//! let rev = etcd.put(b"/app/a", b"1", None)?;
//! let (at, kvs) = etcd.get_prefix(b"/app/")?;
//! assert!(at >= rev && kvs.iter().any(|kv| kv.key == b"/app/a"));
//! let mut watch = etcd.watch_prefix(b"/app/", at + 1)?;
//! etcd.put(b"/app/b", b"2", None)?;
//! while let Some(msg) = watch.recv()? {
//!     if let WatchMsg::Events { events, .. } = msg {
//!         println!("{events:?}");
//!         break;
//!     }
//! }
//! # Ok::<(), fp_control::etcd::EtcdError>(())
//! ```

use serde_json::{json, Value};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Keys per page of a range read.
pub const PAGE: usize = 10_000;
/// Largest response body accepted.
const MAX_BODY: usize = 64 << 20;
/// Operations per transaction (etcd's default `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Why an etcd request failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// An endpoint is not `http://HOST:PORT` (or `HOST:PORT`).
    #[error("etcd endpoint {0:?}: expected http://HOST:PORT")]
    Endpoint(String),
    /// No endpoint accepted a connection.
    #[error("etcd: no endpoint reachable ({endpoints}): {error}")]
    Unreachable { endpoints: String, error: io::Error },
    /// A connection broke or timed out.
    #[error("etcd {endpoint}: {error}")]
    Io { endpoint: String, error: io::Error },
    /// etcd answered with an error.
    #[error("etcd {endpoint} {path}: HTTP {status}: {body}")]
    Status {
        endpoint: String,
        path: &'static str,
        status: u16,
        body: String,
    },
    /// The answer was not what the API promises.
    #[error("etcd {endpoint} {path}: unexpected answer: {why}")]
    Protocol {
        endpoint: String,
        path: &'static str,
        why: String,
    },
}

/// A key-value pair with its revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the key's creation.
    pub create_revision: i64,
    /// Revision of the key's last change.
    pub mod_revision: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// A change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A key was created or changed.
    Put(Kv),
    /// A key was deleted (explicitly or by its lease's expiry) at `mod_revision`.
    Delete { key: Vec<u8>, mod_revision: i64 },
}

impl Event {
    /// The key.
    pub fn key(&self) -> &[u8] {
        match self {
            Event::Put(kv) => &kv.key,
            Event::Delete { key, .. } => key,
        }
    }

    /// The revision of the change.
    pub fn revision(&self) -> i64 {
        match self {
            Event::Put(kv) => kv.mod_revision,
            Event::Delete { mod_revision, .. } => *mod_revision,
        }
    }
}

/// One write of a transaction.
#[derive(Clone, Debug)]
pub enum Op {
    /// Put `value` at `key` (attached to `lease` if not 0).
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    /// Delete `key`.
    Delete { key: Vec<u8> },
}

/// A message of a watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchMsg {
    /// The watch was created.
    Created { revision: i64 },
    /// Changes, in revision order; `revision` is the store's revision when they were sent.
    Events { revision: i64, events: Vec<Event> },
    /// The start revision was compacted away: read the state again and watch from there.
    Compacted { compact_revision: i64 },
    /// etcd cancelled the watch.
    Canceled { reason: String },
}

/// An etcd client (cheap to clone; holds no connection).
#[derive(Clone, Debug)]
pub struct Etcd {
    endpoints: Vec<String>,
    connect_timeout: Duration,
    read_timeout: Duration,
}

fn b64(v: &[u8]) -> String {
    base64_encode(v)
}

fn as_i64(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The end of the key range holding every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    // Every key: etcd's "\0" range end.
    vec![0]
}

impl Etcd {
    /// A client of the etcd cluster at `endpoints` (`http://HOST:PORT`, tried in order).
    pub fn new(endpoints: &[String]) -> Result<Etcd, EtcdError> {
        let mut eps = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let hp = e.strip_prefix("http://").unwrap_or(e).trim_end_matches('/');
            if hp.is_empty() || !hp.contains(':') || hp.contains('/') || e.starts_with("https://") {
                return Err(EtcdError::Endpoint(e.clone()));
            }
            eps.push(hp.to_string());
        }
        if eps.is_empty() {
            return Err(EtcdError::Endpoint(String::new()));
        }
        Ok(Etcd {
            endpoints: eps,
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(10),
        })
    }

    /// The endpoints, as `HOST:PORT`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    fn connect(&self) -> Result<(TcpStream, &str), EtcdError> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for ep in &self.endpoints {
            let addrs = match ep.to_socket_addrs() {
                Ok(a) => a,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            for a in addrs {
                match TcpStream::connect_timeout(&a, self.connect_timeout) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        return Ok((s, ep));
                    }
                    Err(e) => last = e,
                }
            }
        }
        Err(EtcdError::Unreachable {
            endpoints: self.endpoints.join(","),
            error: last,
        })
    }

    /// Send `body` to `path`; the connection, positioned at the response body, and its framing.
    fn send(
        &self,
        path: &'static str,
        body: &Value,
        read_timeout: Option<Duration>,
    ) -> Result<(Body, String), EtcdError> {
        let (mut s, ep) = self.connect()?;
        let ep = ep.to_string();
        let io_err = |error| EtcdError::Io {
            endpoint: ep.clone(),
            error,
        };
        s.set_read_timeout(read_timeout).map_err(io_err)?;
        s.set_write_timeout(Some(self.read_timeout))
            .map_err(io_err)?;
        let body = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {ep}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(io_err)?;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).map_err(io_err)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| EtcdError::Protocol {
                endpoint: ep.clone(),
                path,
                why: format!("status line {:?}", line.trim_end()),
            })?;
        let mut chunked = false;
        let mut length = None;
        loop {
            line.clear();
            if r.read_line(&mut line).map_err(io_err)? == 0 {
                break;
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                } else if k == "content-length" {
                    length = v.parse::<usize>().ok();
                }
            }
        }
        let mut body = Body {
            r,
            chunked,
            left: if chunked {
                0
            } else {
                length.unwrap_or(usize::MAX)
            },
            done: false,
        };
        if status != 200 {
            let text = body.read_all().unwrap_or_default();
            return Err(EtcdError::Status {
                endpoint: ep,
                path,
                status,
                body: String::from_utf8_lossy(&text).trim().to_string(),
            });
        }
        Ok((body, ep))
    }

    /// One request, one JSON answer.
    fn call(&self, path: &'static str, body: Value) -> Result<Value, EtcdError> {
        let (mut b, ep) = self.send(path, &body, Some(self.read_timeout))?;
        let bytes = b.read_all().map_err(|error| EtcdError::Io {
            endpoint: ep.clone(),
            error,
        })?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| EtcdError::Protocol {
            endpoint: ep.clone(),
            path,
            why: e.to_string(),
        })?;
        if let Some(err) = v.get("error") {
            return Err(EtcdError::Protocol {
                endpoint: ep,
                path,
                why: err.to_string(),
            });
        }
        Ok(v)
    }

    /// Put `value` at `key`, attached to `lease`. Returns the revision of the change.
    pub fn put(&self, key: &[u8], value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let mut req = json!({"key": b64(key), "value": b64(value)});
        if let Some(l) = lease {
            req["lease"] = Value::String(l.to_string());
        }
        let v = self.call("/v3/kv/put", req)?;
        Ok(as_i64(&v["header"]["revision"]))
    }

    /// The value at `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Kv>, EtcdError> {
        let v = self.call("/v3/kv/range", json!({"key": b64(key)}))?;
        Ok(kvs(&v).into_iter().next())
    }

    /// Every key under `prefix`, read at one revision (returned), in key order.
    pub fn get_prefix(&self, prefix: &[u8]) -> Result<(i64, Vec<Kv>), EtcdError> {
        self.get_prefix_paged(prefix, PAGE)
    }

    /// [`Etcd::get_prefix`] reading `page` keys per request.
    pub fn get_prefix_paged(
        &self,
        prefix: &[u8],
        page: usize,
    ) -> Result<(i64, Vec<Kv>), EtcdError> {
        let end = b64(&prefix_end(prefix));
        let mut out = Vec::new();
        let mut from = prefix.to_vec();
        let mut rev = 0i64;
        loop {
            let mut req =
                json!({"key": b64(&from), "range_end": end, "limit": page.max(1).to_string()});
            if rev > 0 {
                req["revision"] = Value::String(rev.to_string());
            }
            let v = self.call("/v3/kv/range", req)?;
            if rev == 0 {
                rev = as_i64(&v["header"]["revision"]);
            }
            let page = kvs(&v);
            let more = v["more"].as_bool().unwrap_or(false);
            if let Some(last) = page.last() {
                from = last.key.clone();
                from.push(0);
            }
            let n = page.len();
            out.extend(page);
            if !more || n == 0 {
                return Ok((rev, out));
            }
        }
    }

    /// How many keys start with `prefix`, and the store's revision (no keys or values are
    /// transferred).
    pub fn count_prefix(&self, prefix: &[u8]) -> Result<(i64, u64), EtcdError> {
        let v = self.call(
            "/v3/kv/range",
            json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix)), "count_only": true}),
        )?;
        Ok((as_i64(&v["header"]["revision"]), as_i64(&v["count"]) as u64))
    }

    /// Delete `key`. Returns the revision and whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<(i64, bool), EtcdError> {
        let v = self.call("/v3/kv/deleterange", json!({"key": b64(key)}))?;
        Ok((as_i64(&v["header"]["revision"]), as_i64(&v["deleted"]) > 0))
    }

    /// Apply `ops` atomically (at most [`MAX_TXN_OPS`]; a key at most once). Returns the revision.
    pub fn txn(&self, ops: &[Op]) -> Result<i64, EtcdError> {
        let success: Vec<Value> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => {
                    let mut p = json!({"key": b64(key), "value": b64(value)});
                    if *lease != 0 {
                        p["lease"] = Value::String(lease.to_string());
                    }
                    json!({ "request_put": p })
                }
                Op::Delete { key } => json!({"request_delete_range": {"key": b64(key)}}),
            })
            .collect();
        let v = self.call("/v3/kv/txn", json!({ "success": success }))?;
        Ok(as_i64(&v["header"]["revision"]))
    }

    /// Create `key` with `value` unless it exists: `Ok(revision)` if created, `Err(existing)`.
    pub fn create(&self, key: &[u8], value: &[u8]) -> Result<Result<i64, Kv>, EtcdError> {
        let k = b64(key);
        let v = self.call(
            "/v3/kv/txn",
            json!({
                "compare": [{"target": "CREATE", "key": k, "create_revision": "0"}],
                "success": [{"request_put": {"key": k, "value": b64(value)}}],
                "failure": [{"request_range": {"key": k}}],
            }),
        )?;
        if v["succeeded"].as_bool().unwrap_or(false) {
            return Ok(Ok(as_i64(&v["header"]["revision"])));
        }
        let existing = v["responses"]
            .get(0)
            .map(|r| kvs(&r["response_range"]))
            .and_then(|k| k.into_iter().next());
        match existing {
            Some(kv) => Ok(Err(kv)),
            // Deleted between the compare and the read: try again.
            None => self.create(key, value),
        }
    }

    /// Compact the history up to `revision`: watches from before it get [`WatchMsg::Compacted`].
    pub fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        self.call(
            "/v3/kv/compaction",
            json!({"revision": revision.to_string(), "physical": true}),
        )
        .map(|_| ())
    }

    /// Grant a lease of `ttl` seconds; its id.
    pub fn lease_grant(&self, ttl: u64) -> Result<i64, EtcdError> {
        let v = self.call("/v3/lease/grant", json!({"TTL": ttl.to_string()}))?;
        match as_i64(&v["ID"]) {
            0 => Err(EtcdError::Protocol {
                endpoint: self.endpoints[0].clone(),
                path: "/v3/lease/grant",
                why: format!("no lease id in {v}"),
            }),
            id => Ok(id),
        }
    }

    /// Refresh lease `id`; the seconds it has left (0: it expired or was revoked).
    pub fn lease_keepalive(&self, id: i64) -> Result<i64, EtcdError> {
        let v = self.call("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        Ok(as_i64(&v["result"]["TTL"]))
    }

    /// Revoke lease `id`: every key attached to it is deleted now.
    pub fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", json!({"ID": id.to_string()}))
            .map(|_| ())
    }

    /// Watch every key under `prefix` from revision `start` on (events of `start` included).
    pub fn watch_prefix(&self, prefix: &[u8], start: i64) -> Result<Watch, EtcdError> {
        let req = json!({"create_request": {
            "key": b64(prefix),
            "range_end": b64(&prefix_end(prefix)),
            "start_revision": start.to_string(),
        }});
        // Reads time out every second so the owner can look at its stop flag.
        let (body, endpoint) = self.send("/v3/watch", &req, Some(Duration::from_secs(1)))?;
        Ok(Watch {
            body,
            endpoint,
            line: Vec::new(),
        })
    }
}

/// The key-value pairs of a range answer.
fn kvs(v: &Value) -> Vec<Kv> {
    v["kvs"]
        .as_array()
        .map(|a| a.iter().map(kv).collect())
        .unwrap_or_default()
}

fn kv(v: &Value) -> Kv {
    let bytes = |f: &str| {
        v[f].as_str()
            .and_then(|s| base64_decode(s.as_bytes()))
            .unwrap_or_default()
    };
    Kv {
        key: bytes("key"),
        value: bytes("value"),
        create_revision: as_i64(&v["create_revision"]),
        mod_revision: as_i64(&v["mod_revision"]),
        lease: as_i64(&v["lease"]),
    }
}

/// A response body: plain (to a length or the end) or chunked.
struct Body {
    r: BufReader<TcpStream>,
    chunked: bool,
    /// Bytes left in the current chunk (or in the plain body).
    left: usize,
    done: bool,
}

impl Body {
    /// Read up to `buf.len()` body bytes; 0 at the end.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.chunked && self.left == 0 {
            let mut line = String::new();
            // The CRLF after the previous chunk, then the size line.
            loop {
                line.clear();
                if self.r.read_line(&mut line)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
                if !line.trim().is_empty() {
                    break;
                }
            }
            let size = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("chunk size {size:?}"))
            })?;
            if size == 0 {
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let want = buf.len().min(self.left);
        let n = self.r.read(&mut buf[..want])?;
        if n == 0 {
            self.done = true;
        }
        self.left -= n;
        if !self.chunked && self.left == 0 {
            self.done = true;
        }
        Ok(n)
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 16 << 10];
        loop {
            let n = self.read_some(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            if out.len() + n > MAX_BODY {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response larger than 64 MiB",
                ));
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
}

/// A watch stream ([`Etcd::watch_prefix`]).
pub struct Watch {
    body: Body,
    endpoint: String,
    line: Vec<u8>,
}

impl Watch {
    /// The next message: `Ok(None)` when nothing came for a second (look at your stop flag and
    /// call again); an error when the stream broke (watch again from the next revision).
    pub fn recv(&mut self) -> Result<Option<WatchMsg>, EtcdError> {
        let mut buf = [0u8; 16 << 10];
        loop {
            if let Some(nl) = self.line.iter().position(|&b| b == b'\n') {
                let msg: Vec<u8> = self.line.drain(..=nl).collect();
                if msg.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                return self.parse(&msg).map(Some);
            }
            match self.body.read_some(&mut buf) {
                Ok(0) => {
                    // The stream ended: a last message without a newline, or a broken watch.
                    if !self.line.iter().all(|b| b.is_ascii_whitespace()) {
                        let msg = std::mem::take(&mut self.line);
                        return self.parse(&msg).map(Some);
                    }
                    return Err(EtcdError::Io {
                        endpoint: self.endpoint.clone(),
                        error: io::Error::new(io::ErrorKind::UnexpectedEof, "watch stream ended"),
                    });
                }
                Ok(n) => {
                    if self.line.len() + n > MAX_BODY {
                        return Err(self.protocol("a watch message larger than 64 MiB".into()));
                    }
                    self.line.extend_from_slice(&buf[..n]);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(error) => {
                    return Err(EtcdError::Io {
                        endpoint: self.endpoint.clone(),
                        error,
                    })
                }
            }
        }
    }

    fn protocol(&self, why: String) -> EtcdError {
        EtcdError::Protocol {
            endpoint: self.endpoint.clone(),
            path: "/v3/watch",
            why,
        }
    }

    fn parse(&self, msg: &[u8]) -> Result<WatchMsg, EtcdError> {
        let v: Value = serde_json::from_slice(msg).map_err(|e| self.protocol(e.to_string()))?;
        if let Some(err) = v.get("error") {
            return Err(self.protocol(err.to_string()));
        }
        let r = &v["result"];
        let revision = as_i64(&r["header"]["revision"]);
        let compact = as_i64(&r["compact_revision"]);
        if compact > 0 {
            return Ok(WatchMsg::Compacted {
                compact_revision: compact,
            });
        }
        if r["canceled"].as_bool().unwrap_or(false) {
            return Ok(WatchMsg::Canceled {
                reason: r["cancel_reason"].as_str().unwrap_or("").to_string(),
            });
        }
        if r["created"].as_bool().unwrap_or(false) {
            return Ok(WatchMsg::Created { revision });
        }
        let events = r["events"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        let kv = kv(&e["kv"]);
                        if e["type"].as_str() == Some("DELETE") {
                            Event::Delete {
                                key: kv.key,
                                mod_revision: kv.mod_revision,
                            }
                        } else {
                            Event::Put(kv)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(WatchMsg::Events { revision, events })
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (what the gateway speaks for bytes fields).
pub fn base64_encode(v: &[u8]) -> String {
    let mut out = String::with_capacity(v.len().div_ceil(3) * 4);
    for c in v.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decode standard base64 (padding optional); `None` if `s` is not base64.
pub fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let s = match s.iter().position(|&b| b == b'=') {
        Some(p) if s[p..].iter().all(|&b| b == b'=') && s.len() - p <= 2 => &s[..p],
        Some(_) => return None,
        None => s,
    };
    if s.len() % 4 == 1 {
        return None;
    }
    let val = |b: u8| B64.iter().position(|&c| c == b).map(|p| p as u32);
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for c in s.chunks(4) {
        let mut n = 0u32;
        for (i, &b) in c.iter().enumerate() {
            n |= val(b)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if c.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if c.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_the_standard_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), enc);
            assert_eq!(base64_decode(enc.as_bytes()).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(base64_encode(&all).as_bytes()).unwrap(), all);
        assert_eq!(base64_decode(b"Zm9v!"), None);
        assert_eq!(base64_decode(b"Zg=a"), None);
    }

    #[test]
    fn prefix_ends_cover_exactly_the_prefix() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn endpoints_must_be_plain_http_host_port() {
        assert!(Etcd::new(&["http://127.0.0.1:2379".into()]).is_ok());
        assert!(Etcd::new(&["10.0.0.1:2379".into()]).is_ok());
        assert!(Etcd::new(&["https://10.0.0.1:2379".into()]).is_err());
        assert!(Etcd::new(&["http://10.0.0.1".into()]).is_err());
        assert!(Etcd::new(&[]).is_err());
    }
}
