use super::*;
use fp_pipeline::trace::{probe_queue, TracerConfig};
use std::sync::Mutex as StdMutex;

#[derive(Clone, Debug, PartialEq)]
struct Hop(u16);

impl Record for Hop {
    fn write_json(&self, out: &mut String) {
        let _ = write!(out, "\"port\":{}", self.0);
    }
}

#[test]
fn records_are_collected_from_every_worker_in_order_and_logged() {
    let lines = Arc::new(StdMutex::new(Vec::new()));
    let l2 = lines.clone();
    let log = TraceLog::with_sink(
        3,
        "n1".into(),
        Some(Box::new(move |s: &str| {
            l2.lock().unwrap().push(s.to_string())
        })),
    );
    let (mut w0, r0) = probe_queue(8, TracerConfig::default());
    let (mut w1, r1) = probe_queue(8, TracerConfig::default());
    log.attach(r0);
    log.attach(r1);
    for (i, w) in [&mut w0, &mut w1].into_iter().enumerate() {
        for k in 0..2u16 {
            assert!(w.admit(0));
            w.send(10 * i as u64 + k as u64, 0, Hop(k));
        }
    }
    // Nothing is stamped or logged until the control side collects.
    assert!(lines.lock().unwrap().is_empty());
    assert_eq!(log.collect(), 4);
    assert_eq!(lines.lock().unwrap().len(), 4);
    let e = log.entries();
    // The log keeps the last 3, numbered in collection order.
    assert_eq!(
        e.iter().map(|e| (e.seq, e.probe_id)).collect::<Vec<_>>(),
        vec![(2, 1), (3, 10), (4, 11)]
    );
    assert!(log
        .json_lines()
        .ends_with("\"node\":\"n1\",\"probe_id\":11,\"port\":1}\n"));
    assert_eq!(
        log.counts(),
        TraceCounts {
            recorded: 4,
            suppressed: 0,
            dropped: 0
        }
    );
}

#[test]
fn counts_add_the_workers_suppressed_and_dropped_records() {
    let log = TraceLog::<Hop>::with_sink(16, "n1".into(), None);
    let cfg = TracerConfig {
        rate_per_sec: 1.0,
        burst: 2,
    };
    let (mut w, r) = probe_queue(1, cfg);
    log.attach(r);
    let mut admitted = 0;
    for k in 0..4 {
        if w.admit(0) {
            admitted += 1;
            w.send(k, 0, Hop(0));
        }
    }
    assert_eq!(admitted, 2);
    // One fit in the queue, one was dropped, two were over the rate.
    assert_eq!(
        log.counts(),
        TraceCounts {
            recorded: 1,
            suppressed: 2,
            dropped: 1
        }
    );
    // A control-side push is recorded too.
    log.push(99, Hop(7));
    assert_eq!(log.counts().recorded, 2);
    assert_eq!(log.entries().last().map(|e| e.probe_id), Some(99));
}
