//! The monitor's own guarantees, on a hand-made plan (the load balancer's plans from its
//! configuration are tested with it, in fp-lb).

use super::*;
use std::net::TcpListener;
use std::sync::mpsc::TryRecvError;

#[test]
fn initial_state_is_configurable_and_drop_stops_threads() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let address: IpAddr = "127.0.0.1".parse().unwrap();
    let plan = Plan {
        checks: vec![PlannedCheck {
            address,
            pool: "p".into(),
            port,
            check: HealthCheck {
                kind: HealthKind::Tcp,
                port: Some(port),
                interval_ms: 20,
                timeout_ms: 20,
                rise: 1,
                fall: 2,
            },
        }],
        unchecked: Vec::new(),
        conflicts: Vec::new(),
    };
    let opts = HealthOptions {
        initial_healthy: false,
        added_healthy: false,
    };
    let (m, rx) = HealthMonitor::start(plan, opts).unwrap();
    assert!(!m.states()[0].healthy);
    let e = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("an event within 5 s");
    assert!(e.healthy);

    let weak = Arc::downgrade(&m.shared);
    let t0 = Instant::now();
    drop(m);
    // The thread held the only other reference: it is gone once the thread exited.
    assert!(weak.upgrade().is_none(), "checker thread still running");
    assert!(t0.elapsed() < Duration::from_secs(1));
    // The events channel is closed (the sender lived in the shared state).
    while rx.try_recv().is_ok() {}
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    drop(l);
}
