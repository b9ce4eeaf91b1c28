//! Metrics in the Prometheus text exposition format (version 0.0.4), for any application: an
//! [`Exposition`] to write families and samples into, and the engine's per-port counters
//! ([`ports`]), which every application on the engine exports the same way.
//!
//! Conventions: every counter ends in `_total`; every family has `# HELP` and `# TYPE` lines and
//! its samples are contiguous; label values are escaped (`\\`, `\"`, `\n`). Counters are emitted
//! even when zero, so `rate()` works from the first scrape. Values that are 64-bit identifiers
//! (a table digest) go into labels as hex text, since a sample value is a float64. Workers keep
//! their counters privately (one writer each) and nothing here touches the data path: the reader
//! sums, the exposition formats.
//!
//! ```
//! use fp_control::metrics::{Exposition, Kind};
//!
//! let mut e = Exposition::new();
//! e.family("app_frames_total", Kind::Counter, "Frames by outcome.");
//! e.sample("app_frames_total", &[("outcome", "forwarded")], 42u64);
//! e.single("app_uptime_seconds", Kind::Gauge, "Seconds since start.", 1.5);
//! let text = e.finish();
//! assert!(text.contains("# TYPE app_frames_total counter\napp_frames_total{outcome=\"forwarded\"} 42\n"));
//! assert!(text.ends_with("app_uptime_seconds 1.5\n"));
//! ```

use fp_engine::driver::WorkerCounters;
use std::fmt::Write;
use std::sync::Arc;

/// Configuration reloads so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReloadCounts {
    /// Reloads that passed validation and were committed.
    pub ok: u64,
    /// Reloads that were rejected (the running configuration stayed).
    pub failed: u64,
}

/// Escape a label value (`\` → `\\`, `"` → `\"`, newline → `\n`).
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: integers exactly, floats in Prometheus spelling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An integer.
    U(u64),
    /// A float (`NaN`, `+Inf`, `-Inf` spelled as Prometheus wants).
    F(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U(v)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::U(v as u64)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::U(v as u64)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F(v)
    }
}

/// A family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, sum and count.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// The text of one scrape being written.
#[derive(Debug, Default)]
pub struct Exposition {
    s: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition {
            s: String::with_capacity(16 * 1024),
        }
    }

    /// Start a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(kind != Kind::Counter || name.ends_with("_total"), "{name}");
        let _ = writeln!(self.s, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.s, "# TYPE {name} {}", kind.name());
    }

    /// One sample of the current family (or a histogram's `_bucket`/`_sum`/`_count` series).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl Into<Value>) {
        self.s.push_str(name);
        if !labels.is_empty() {
            self.s.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.s.push(',');
                }
                let _ = write!(self.s, "{k}=\"{}\"", escape_label(val));
            }
            self.s.push('}');
        }
        self.s.push(' ');
        match v.into() {
            Value::U(u) => {
                let _ = write!(self.s, "{u}");
            }
            Value::F(f) if f.is_nan() => self.s.push_str("NaN"),
            Value::F(f) if f.is_infinite() => {
                self.s.push_str(if f > 0.0 { "+Inf" } else { "-Inf" })
            }
            Value::F(f) => {
                let _ = write!(self.s, "{f}");
            }
        }
        self.s.push('\n');
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, v: impl Into<Value>) {
        self.family(name, kind, help);
        self.sample(name, &[], v);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.s
    }
}

/// Export the engine's per-port counters, summed over workers, as
/// `{prefix}_port_{rx,tx,tx_dropped,rx_dropped}_frames_total{port="i",interface="name"}`:
/// `names[i]` names port `i` of every worker (workers have the same ports).
pub fn ports(e: &mut Exposition, prefix: &str, names: &[String], workers: &[Arc<WorkerCounters>]) {
    type Field = fn(&fp_engine::driver::PortCounters) -> u64;
    let fields: [(&str, &str, Field); 4] = [
        ("rx_frames_total", "Frames received on the port.", |c| {
            c.rx.get()
        }),
        (
            "tx_frames_total",
            "Frames sent out of the port (a flooded frame counts once per port).",
            |c| c.tx.get(),
        ),
        (
            "tx_dropped_frames_total",
            "Frames the port's transmit queue refused (full ring or socket buffer).",
            |c| c.tx_dropped.get(),
        ),
        (
            "rx_dropped_frames_total",
            "Frames the kernel dropped before a worker read them (receive ring full).",
            |c| c.rx_dropped.get(),
        ),
    ];
    for (suffix, help, f) in fields {
        let name = format!("{prefix}_port_{suffix}");
        e.family(&name, Kind::Counter, help);
        for (i, n) in names.iter().enumerate() {
            let v: u64 = workers.iter().filter_map(|w| w.ports.get(i)).map(f).sum();
            e.sample(&name, &[("port", &i.to_string()), ("interface", n)], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_help("h\\n\nx"), "h\\\\n\\nx");
    }

    #[test]
    fn labels_and_values_are_escaped_and_spelled() {
        let mut e = Exposition::new();
        e.family("x_total", Kind::Counter, "a \\ help\nline");
        e.sample("x_total", &[("a", "q\"b\\c\nd")], 1u64);
        e.sample("x_total", &[("a", "inf")], f64::INFINITY);
        e.sample("x_total", &[("a", "nan")], f64::NAN);
        let t = e.finish();
        assert!(t.contains("# HELP x_total a \\\\ help\\nline\n"), "{t}");
        assert!(t.contains("x_total{a=\"q\\\"b\\\\c\\nd\"} 1\n"), "{t}");
        assert!(t.contains("x_total{a=\"inf\"} +Inf\n"));
        assert!(t.contains("x_total{a=\"nan\"} NaN\n"));
    }
}
