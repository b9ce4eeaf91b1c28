//! fp-testnet leaves nothing behind: not after a panic in the test body, not after a crashed run
//! (swept by the next one), and its sweep never touches a live run's objects.

use fp_testnet::{netns_exists, pid_alive, sweep_stale, TestNet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default, Debug)]
struct Made {
    namespaces: Vec<String>,
    pids: Vec<u32>,
    files: Vec<PathBuf>,
}

fn wait_gone(pids: &[u32]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        if alive.is_empty() || Instant::now() > deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn panic_in_test_body_removes_everything() {
    let made = Mutex::new(Made::default());
    let result = std::panic::catch_unwind(|| {
        let net = TestNet::new("panicky").expect("live test cannot run");
        let a = net.ns("a").unwrap();
        let b = net.ns("b").unwrap();
        let (ea, _eb) = net.veth(&a, "eth0", &b, "eth0").unwrap();
        ea.addr_add("10.80.0.1/24").unwrap();
        // A background process we started, ...
        let p = a.cmd(["sleep", "1000"]).spawn().unwrap();
        // ... a daemon that left our process group and session (only the namespace sweep finds
        // it), ...
        let out = b
            .cmd([
                "sh",
                "-c",
                "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!",
            ])
            .run()
            .unwrap();
        let daemon: u32 = out.stdout.trim().parse().unwrap();
        // ... and files.
        let d = net.dir("data").unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        {
            let mut m = made.lock().unwrap();
            m.namespaces = net.namespaces();
            m.pids = vec![p.pid(), daemon];
            m.files = vec![d.join("f"), net.root_dir().to_path_buf()];
        }
        assert!(pid_alive(p.pid()) && pid_alive(daemon));
        assert!(made
            .lock()
            .unwrap()
            .namespaces
            .iter()
            .all(|n| netns_exists(n)));
        panic!("the test body fails here");
    });
    assert!(result.is_err(), "the body should have panicked");
    let m = made.into_inner().unwrap();
    assert_eq!(m.namespaces.len(), 2);
    for n in &m.namespaces {
        assert!(!netns_exists(n), "namespace {n} survived");
    }
    assert_eq!(wait_gone(&m.pids), Vec::<u32>::new(), "processes survived");
    for f in &m.files {
        assert!(!f.exists(), "{} survived", f.display());
    }
}

#[test]
fn explicit_cleanup_reports_no_errors() {
    let net = TestNet::new("explicit").expect("live test cannot run");
    let a = net.ns("a").unwrap();
    let p = a.cmd(["sleep", "1000"]).spawn().unwrap();
    let name = a.name().to_string();
    let errors = net.cleanup();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(!netns_exists(&name));
    assert!(wait_gone(&[p.pid()]).is_empty());
    // Handles outlive the network but fail cleanly.
    assert!(a.cmd(["true"]).run().is_err());
    assert!(!p.is_running());
}

/// A run that crashed (its process is gone) left a namespace with a process in it and a temp
/// directory: the sweep removes them, and leaves a live run's namespace alone.
#[test]
fn sweep_removes_leftovers_of_dead_runs_only() {
    let live = TestNet::new("live").expect("live test cannot run");
    let live_ns = live.ns("x").unwrap();

    // The pid of a process that has exited: a "crashed" owner.
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let stale = format!("fpt-{}-zz0-0-crashed", dead.id());
    let stale_ns = format!("{stale}-ns");
    let st = Command::new("ip")
        .args(["netns", "add", &stale_ns])
        .status()
        .unwrap();
    assert!(st.success());
    let mut leftover = Command::new("ip")
        .args(["netns", "exec", &stale_ns, "sleep", "1000"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let stale_dir = std::env::temp_dir().join(&stale);
    std::fs::create_dir_all(stale_dir.join("logs")).unwrap();
    // Wait until the leftover process has entered the namespace.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let pids = Command::new("ip")
            .args(["netns", "pids", &stale_ns])
            .output()
            .unwrap();
        if !pids.stdout.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let rep = sweep_stale();
    // Another test binary's sweep may have got there first; what matters is the end state.
    assert!(
        !netns_exists(&stale_ns),
        "stale namespace survived: {rep:?}"
    );
    assert!(!stale_dir.exists(), "stale directory survived: {rep:?}");
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        if let Some(s) = leftover.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = leftover.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.is_some(), "the leftover process survived the sweep");
    assert!(
        rep.errors.is_empty() || !rep.errors.iter().any(|e| e.contains(&stale)),
        "{rep:?}"
    );
    // The live network is untouched.
    assert!(netns_exists(live_ns.name()));
    live_ns.cmd(["true"]).run().unwrap();
}
