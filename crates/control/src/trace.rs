//! The packet tracer (Maglev §4.4), for any application: a marked probe packet is forwarded as
//! usual, and the worker that handled it leaves a record of what it did in a shared [`TraceLog`]
//! that the admin endpoint serves as JSON lines and that also writes each record to the log. The
//! record is the application's own type ([`Record`]): the load balancer's says which VIP,
//! connection-table outcome, Maglev slot and backend; the switch's which ports the frame left on.
//!
//! # The probe marker
//!
//! A probe is a TCP segment or UDP datagram whose **payload begins with the 16 bytes
//! [`PROBE_MAGIC`] = `b"FLOWPLANE-TRACE1"`**, followed by an 8-byte big-endian probe id the sender
//! chooses (to find its probe among the records). [`probe_payload`] builds it; anything may follow.
//! With any TCP/UDP client: `printf 'FLOWPLANE-TRACE1\0\0\0\0\0\0\0\x2a' | nc -u VIP PORT` sends
//! probe 42. The marker sits at the start of the payload, behind unmodified L3/L4 headers, so the
//! probe takes exactly the path that ordinary packets of its 5-tuple take (Maglev's tool likewise
//! sends "specially marked Maglev-recognizable payloads with specified L3 and L4 headers").
//!
//! Recognised: Ethernet II with up to two VLAN tags, IPv4 (with options; unfragmented or a first
//! fragment) or IPv6 *without* extension headers, then TCP or UDP. ICMP errors quoting a
//! connection are never probes.
//!
//! # Cost for ordinary packets
//!
//! [`probe_id`] reads a handful of header bytes, then compares 16 payload bytes as two `u64`s: no
//! allocation, no clock, no lock. Pure ACKs fail the length test before the payload is touched.
//! Only a packet carrying the marker reads the monotonic clock (for the rate limit).
//!
//! # Rate limit
//!
//! Probes are expensive to record (Maglev rate-limits them too), so each worker has a [`Limiter`]
//! (a token bucket, [`TracerConfig`], default 10 records/s with a burst of 10). A probe over the
//! limit is forwarded as usual and not recorded; it is counted in [`TraceCounts::suppressed`].
//!
//! # Difference from the paper
//!
//! Maglev's probes carry the address of a receiver to which the balancer *sends* the debugging
//! information. Here records go to the admin endpoint (`GET /trace`) and the log instead: no
//! packets are generated toward addresses taken from untrusted payloads, and the worker makes no
//! extra system call beyond the log line. Each record names the node (host name), so records
//! collected from several machines still say which one handled the probe.
//!
//! ```
//! use fp_control::trace::{probe_id, probe_payload, TraceLog, Record, TracerConfig};
//!
//! #[derive(Clone, Debug)]
//! struct Seen { port: u16 }
//! impl Record for Seen {
//!     fn write_json(&self, out: &mut String) {
//!         out.push_str(&format!("\"port\":{}", self.port));
//!     }
//! }
//! let log = TraceLog::with_sink(16, "node1".into(), None);
//! let mut limiter = log.limiter(TracerConfig::default());
//! if limiter.take() {
//!     log.push(42, Seen { port: 3 });
//! }
//! assert!(log.json_lines().starts_with("{\"seq\":1,"));
//! assert!(log.json_lines().ends_with("\"node\":\"node1\",\"probe_id\":42,\"port\":3}\n"));
//! assert_eq!(probe_id(&[0u8; 60]), None);
//! assert_eq!(probe_payload(42).len(), 24);
//! ```

use crate::json;
use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Records a [`TraceLog`] keeps unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 1024;

/// The 16 bytes a probe's TCP/UDP payload starts with.
pub const PROBE_MAGIC: [u8; 16] = *b"FLOWPLANE-TRACE1";
/// Length of a probe payload from [`probe_payload`]: magic and id.
pub const PROBE_LEN: usize = PROBE_MAGIC.len() + 8;

/// The payload of probe `id`: [`PROBE_MAGIC`] then `id` as 8 big-endian bytes.
pub fn probe_payload(id: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(PROBE_LEN);
    v.extend_from_slice(&PROBE_MAGIC);
    v.extend_from_slice(&id.to_be_bytes());
    v
}

const MAGIC_HI: u64 = u64::from_ne_bytes(*b"FLOWPLAN");
const MAGIC_LO: u64 = u64::from_ne_bytes(*b"E-TRACE1");

#[inline(always)]
fn u16_at(f: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(i)?, *f.get(i + 1)?]))
}

#[inline(always)]
fn u64_ne_at(f: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&f[i..i + 8]);
    u64::from_ne_bytes(b)
}

/// The shortest probe frame: Ethernet, IPv4, UDP, marker and id.
const MIN_PROBE_FRAME: usize = 14 + 20 + 8 + PROBE_LEN;

/// If `frame` (an Ethernet frame) is a probe, its id. Cheap for ordinary packets; never panics.
#[inline]
pub fn probe_id(frame: &[u8]) -> Option<u64> {
    // Most ordinary packets stop here (pure ACKs and SYNs are shorter) or at the magic compare.
    if frame.len() < MIN_PROBE_FRAME {
        return None;
    }
    match u16::from_be_bytes([frame[12], frame[13]]) {
        t @ (0x0800 | 0x86dd) => probe_at(frame, 14, t),
        0x8100 | 0x88a8 => probe_tagged(frame),
        _ => None,
    }
}

/// Behind one or two VLAN tags.
#[cold]
#[inline(never)]
fn probe_tagged(frame: &[u8]) -> Option<u64> {
    let mut off = 12;
    let mut ethertype = u16_at(frame, off)?;
    let mut tags = 0;
    while (ethertype == 0x8100 || ethertype == 0x88a8) && tags < 2 {
        off += 4;
        tags += 1;
        ethertype = u16_at(frame, off)?;
    }
    probe_at(frame, off + 2, ethertype)
}

/// The IP packet starts at `off`.
#[inline(always)]
fn probe_at(frame: &[u8], off: usize, ethertype: u16) -> Option<u64> {
    // IP: find the transport header and the end of the datagram.
    let (proto, l4, end) = match ethertype {
        0x0800 => {
            let vihl = *frame.get(off)?;
            let ihl = (vihl & 0x0f) as usize * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return None;
            }
            // Not a non-first fragment (offset field non-zero).
            if u16_at(frame, off + 6)? & 0x1fff != 0 {
                return None;
            }
            let total = u16_at(frame, off + 2)? as usize;
            (*frame.get(off + 9)?, off + ihl, off + total)
        }
        0x86dd => {
            if *frame.get(off)? >> 4 != 6 {
                return None;
            }
            let payload = u16_at(frame, off + 4)? as usize;
            (*frame.get(off + 6)?, off + 40, off + 40 + payload)
        }
        _ => return None,
    };
    let data = match proto {
        6 => l4 + (*frame.get(l4 + 12)? >> 4) as usize * 4,
        17 => l4 + 8,
        _ => return None,
    };
    if data + PROBE_LEN > end.min(frame.len()) {
        return None;
    }
    if u64_ne_at(frame, data) != MAGIC_HI || u64_ne_at(frame, data + 8) != MAGIC_LO {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&frame[data + 16..data + 24]);
    Some(u64::from_be_bytes(id))
}

/// A token bucket: `rate` tokens per second, at most `burst` stored. Time is an argument (ns).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_per_ns: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at time 0.
    pub fn new(rate_per_sec: f64, burst: u32) -> TokenBucket {
        let burst = burst.max(1) as f64;
        TokenBucket {
            rate_per_ns: rate_per_sec.max(0.0) / 1e9,
            burst,
            tokens: burst,
            last_ns: 0,
        }
    }

    /// Take one token at time `now_ns` (monotonic), if there is one.
    pub fn take(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns) as f64;
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt * self.rate_per_ns).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Settings of each worker's tracer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracerConfig {
    /// Records per second per worker (refill rate). Default 10.
    pub rate_per_sec: f64,
    /// Records in a burst (bucket size). Default 10.
    pub burst: u32,
}

impl Default for TracerConfig {
    fn default() -> Self {
        TracerConfig {
            rate_per_sec: 10.0,
            burst: 10,
        }
    }
}

/// What an application records about a probe: written as the members of a JSON object (without
/// braces), after the log's own `seq`, `unix_ms`, `node` and `probe_id`.
pub trait Record: Clone + Send + Sync + 'static {
    /// Append `"key":value` members, comma-separated, to `out`.
    fn write_json(&self, out: &mut String);
}

/// One recorded probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry<R> {
    /// Sequence number in this log (from 1).
    pub seq: u64,
    /// Wall-clock time, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The probe's id.
    pub probe_id: u64,
    /// What the worker did.
    pub record: R,
}

/// Counts of traced and rate-limited probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// Probes recorded.
    pub recorded: u64,
    /// Probes forwarded without a record because of the rate limit.
    pub suppressed: u64,
}

/// A sink for log lines (the JSON of each record).
pub type LogSink = Box<dyn Fn(&str) + Send + Sync>;

/// The recent trace records, shared by the workers and the admin endpoint.
pub struct TraceLog<R> {
    entries: Mutex<VecDeque<TraceEntry<R>>>,
    capacity: usize,
    node: String,
    seq: AtomicU64,
    recorded: AtomicU64,
    suppressed: AtomicU64,
    sink: Option<LogSink>,
}

impl<R> std::fmt::Debug for TraceLog<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceLog")
            .field("capacity", &self.capacity)
            .field("node", &self.node)
            .field("recorded", &self.recorded.load(Ordering::Relaxed))
            .finish()
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`), or `"unknown"`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

impl<R: Record> TraceLog<R> {
    /// A log keeping the last `capacity` records (see [`DEFAULT_CAPACITY`]), writing each to
    /// standard error as `flowplane trace: {json}`, naming this host.
    pub fn new(capacity: usize) -> Arc<TraceLog<R>> {
        TraceLog::with_sink(
            capacity,
            hostname(),
            Some(Box::new(|line: &str| eprintln!("flowplane trace: {line}"))),
        )
    }

    /// A log with a given node name and log sink (`None`: keep records only).
    pub fn with_sink(capacity: usize, node: String, sink: Option<LogSink>) -> Arc<TraceLog<R>> {
        Arc::new(TraceLog {
            entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            capacity: capacity.max(1),
            node,
            seq: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            sink,
        })
    }

    /// A rate limiter for one worker, counting what it refuses in this log.
    pub fn limiter(self: &Arc<TraceLog<R>>, cfg: TracerConfig) -> Limiter {
        Limiter {
            suppressed: self.clone() as Arc<dyn Suppressed>,
            bucket: TokenBucket::new(cfg.rate_per_sec, cfg.burst),
            epoch: Instant::now(),
        }
    }

    /// Add a record of probe `probe_id` (the workers call this, after their [`Limiter`] agreed).
    pub fn push(&self, probe_id: u64, record: R) {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Numbered under the lock, so the log and the sink see records in `seq` order (the
        // workers' rate limit keeps this off the data path's way).
        let mut q = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let e = TraceEntry {
            seq,
            unix_ms,
            probe_id,
            record,
        };
        self.recorded.fetch_add(1, Ordering::Relaxed);
        if let Some(sink) = &self.sink {
            sink(&self.json(&e));
        }
        if q.len() == self.capacity {
            q.pop_front();
        }
        q.push_back(e);
    }

    /// The records held, oldest first.
    pub fn entries(&self) -> Vec<TraceEntry<R>> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// The records held, oldest first, one JSON object per line (what `GET /trace` serves).
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for e in self.entries() {
            out.push_str(&self.json(&e));
            out.push('\n');
        }
        out
    }

    /// Recorded and suppressed probes so far.
    pub fn counts(&self) -> TraceCounts {
        TraceCounts {
            recorded: self.recorded.load(Ordering::Relaxed),
            suppressed: self.suppressed.load(Ordering::Relaxed),
        }
    }

    /// The node name records carry.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// One record as a JSON object: `{"seq":1,"unix_ms":…,"node":"lb1","probe_id":42,` then the
    /// application's members.
    pub fn json(&self, e: &TraceEntry<R>) -> String {
        let mut s = String::with_capacity(256);
        let _ = write!(s, "{{\"seq\":{},\"unix_ms\":{},\"node\":", e.seq, e.unix_ms);
        json::push_str(&mut s, &self.node);
        let _ = write!(s, ",\"probe_id\":{},", e.probe_id);
        e.record.write_json(&mut s);
        s.push('}');
        s
    }
}

/// Where a [`Limiter`] counts the probes it refuses.
trait Suppressed: Send + Sync {
    fn suppressed(&self);
}

impl<R: Send + Sync> Suppressed for TraceLog<R> {
    fn suppressed(&self) {
        self.suppressed.fetch_add(1, Ordering::Relaxed);
    }
}

/// A worker's rate limit on probe records (see the module docs), on its own monotonic clock.
pub struct Limiter {
    suppressed: Arc<dyn Suppressed>,
    bucket: TokenBucket,
    epoch: Instant,
}

impl Limiter {
    /// Whether a probe seen now may be recorded; a refusal is counted as suppressed.
    pub fn take(&mut self) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        if self.bucket.take(now) {
            true
        } else {
            self.suppressed.suppressed();
            false
        }
    }
}

#[cfg(test)]
mod tests;
