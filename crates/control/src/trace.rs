//! The packet tracer's control side (Maglev §4.4): the records that workers queue about the
//! probes they handled, collected, stamped with the wall clock, logged and kept for the admin
//! endpoint (`GET /trace`, JSON lines). The worker side — recognising a probe, the rate limit,
//! the bounded per-worker queue — is `fp_pipeline::trace`, so a stage needs nothing from here.
//!
//! The record is the application's own type ([`Record`]): the load balancer's says which VIP,
//! connection-table outcome, Maglev slot and backend; the switch's which ports the frame left on.
//! A [`TraceLog`] holds the receiving end of every worker's queue ([`TraceLog::attach`]) and drains
//! them when asked ([`TraceLog::collect`]: the service runner's tick, and every read), so time
//! stamps, the lock and the log line happen here, on the control side, never in a worker.
//!
//! # Difference from the paper
//!
//! Maglev's probes carry the address of a receiver to which the balancer *sends* the debugging
//! information. Here records go to the admin endpoint (`GET /trace`) and the log instead: no
//! packets are generated toward addresses taken from untrusted payloads, and the worker makes no
//! system call. Each record names the node (host name), so records collected from several
//! machines still say which one handled the probe.
//!
//! ```
//! use fp_control::trace::{TraceLog, Record};
//! use fp_pipeline::trace::{probe_queue, TracerConfig};
//!
//! #[derive(Clone, Debug)]
//! struct Seen { port: u16 }
//! impl Record for Seen {
//!     fn write_json(&self, out: &mut String) {
//!         out.push_str(&format!("\"port\":{}", self.port));
//!     }
//! }
//! let log = TraceLog::with_sink(16, "node1".into(), None);
//! // A worker's end of the queue, and the log's.
//! let (mut worker, rx) = probe_queue(64, TracerConfig::default());
//! log.attach(rx);
//! if worker.admit(1_000) {
//!     worker.send(42, 1_000, Seen { port: 3 });
//! }
//! assert!(log.json_lines().starts_with("{\"seq\":1,"));
//! assert!(log.json_lines().ends_with("\"node\":\"node1\",\"probe_id\":42,\"port\":3}\n"));
//! assert_eq!(log.counts().recorded, 1);
//! ```

use crate::json;
use fp_pipeline::trace::ProbeReceiver;
use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Records a [`TraceLog`] keeps unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 1024;

/// Records each worker's queue holds until the control side collects them (the rate limit,
/// 10 records/s by default, makes a full queue rare: it takes seconds without a collection).
pub const QUEUE_CAPACITY: usize = 64;

/// What an application records about a probe: written as the members of a JSON object (without
/// braces), after the log's own `seq`, `unix_ms`, `node` and `probe_id`.
pub trait Record: Clone + Send + 'static {
    /// Append `"key":value` members, comma-separated, to `out`.
    fn write_json(&self, out: &mut String);
}

/// One recorded probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry<R> {
    /// Sequence number in this log (from 1).
    pub seq: u64,
    /// Wall-clock time when the record was collected, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The probe's id.
    pub probe_id: u64,
    /// What the worker did.
    pub record: R,
}

/// Counts of traced, rate-limited and lost probe records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// Probes recorded.
    pub recorded: u64,
    /// Probes forwarded without a record because of the rate limit.
    pub suppressed: u64,
    /// Records lost because a worker's queue was full.
    pub dropped: u64,
}

/// A sink for log lines (the JSON of each record).
pub type LogSink = Box<dyn Fn(&str) + Send + Sync>;

/// The recent trace records, collected from the workers' queues and served by the admin endpoint.
pub struct TraceLog<R> {
    inner: Mutex<Inner<R>>,
    capacity: usize,
    node: String,
    recorded: AtomicU64,
    sink: Option<LogSink>,
}

struct Inner<R> {
    entries: VecDeque<TraceEntry<R>>,
    queues: Vec<ProbeReceiver<R>>,
    seq: u64,
}

impl<R> std::fmt::Debug for TraceLog<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceLog")
            .field("capacity", &self.capacity)
            .field("node", &self.node)
            .field("recorded", &self.recorded.load(Ordering::Relaxed))
            .finish_non_exhaustive()
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
            inner: Mutex::new(Inner {
                entries: VecDeque::with_capacity(capacity.min(4096)),
                queues: Vec::new(),
                seq: 0,
            }),
            capacity: capacity.max(1),
            node,
            recorded: AtomicU64::new(0),
            sink,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner<R>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Collect from a worker's queue from now on (its sending end belongs to the worker).
    pub fn attach(&self, queue: ProbeReceiver<R>) {
        self.lock().queues.push(queue);
    }

    /// Take what the workers queued: number, stamp, log and keep each record. Returns how many.
    pub fn collect(&self) -> usize {
        let mut g = self.lock();
        let inner = &mut *g;
        let mut n = 0;
        for q in 0..inner.queues.len() {
            while let Some(p) = inner.queues[q].try_recv() {
                self.store(inner, p.id, p.record);
                n += 1;
            }
        }
        n
    }

    /// Add a record of probe `probe_id` directly (a control-side caller).
    pub fn push(&self, probe_id: u64, record: R) {
        let mut g = self.lock();
        self.store(&mut g, probe_id, record);
    }

    fn store(&self, inner: &mut Inner<R>, probe_id: u64, record: R) {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        inner.seq += 1;
        let e = TraceEntry {
            seq: inner.seq,
            unix_ms,
            probe_id,
            record,
        };
        self.recorded.fetch_add(1, Ordering::Relaxed);
        if let Some(sink) = &self.sink {
            sink(&self.json(&e));
        }
        if inner.entries.len() == self.capacity {
            inner.entries.pop_front();
        }
        inner.entries.push_back(e);
    }

    /// The records held, oldest first (after collecting what the workers queued).
    pub fn entries(&self) -> Vec<TraceEntry<R>> {
        self.collect();
        self.lock().entries.iter().cloned().collect()
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

    /// Recorded, suppressed and lost probes so far (after collecting what the workers queued).
    pub fn counts(&self) -> TraceCounts {
        self.collect();
        let g = self.lock();
        let mut c = TraceCounts {
            recorded: self.recorded.load(Ordering::Relaxed),
            ..TraceCounts::default()
        };
        for q in &g.queues {
            c.suppressed += q.counts().suppressed.get();
            c.dropped += q.counts().dropped.get();
        }
        c
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

#[cfg(test)]
mod tests;
