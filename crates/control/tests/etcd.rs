//! The etcd client against a real etcd (Debian's `etcd-server`), run inside a network namespace
//! the test creates: puts, paged prefix reads at one revision, transactions, create-if-absent,
//! deletes, leases (keepalive, revoke deletes the attached key), watches in revision order, and a
//! watch from a compacted revision.
//!
//! Needs root and etcd (scripts/deps.sh installs it); a missing piece fails the test with the reason.

use anyhow::{ensure, Context, Result};
use fp_control::etcd::{Etcd, Event, Op, WatchMsg};
use fp_testnet::TestNet;
use std::time::{Duration, Instant};

/// The next events of `w` (skipping the creation message), until `n` arrived or 10 s passed.
fn events(w: &mut fp_control::etcd::Watch, n: usize) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        ensure!(
            Instant::now() < deadline,
            "only {} of {n} events: {out:?}",
            out.len()
        );
        match w.recv()? {
            Some(WatchMsg::Events { events, .. }) => out.extend(events),
            Some(WatchMsg::Created { .. }) | None => {}
            Some(m) => anyhow::bail!("unexpected watch message {m:?}"),
        }
    }
    Ok(out)
}

#[test]
fn the_client_speaks_to_a_real_etcd() -> Result<()> {
    let net = TestNet::new("etcd")?;
    net.require_tools(&["etcd"])?;
    let ns = net.ns("kv")?;
    let dir = net.dir("etcd")?;
    let _etcd = ns.etcd("127.0.0.1", 23790, &dir)?;
    ns.enter(|| -> Result<()> {
        let etcd = Etcd::new(&["http://127.0.0.1:23790".to_string()])?;
        // Put and get.
        let r1 = etcd.put(b"/t/a", b"1", None)?;
        ensure!(r1 > 0);
        let kv = etcd.get(b"/t/a")?.context("/t/a missing")?;
        ensure!(kv.value == b"1" && kv.mod_revision == r1, "{kv:?}");
        ensure!(etcd.get(b"/t/none")?.is_none());
        // A transaction of 100 puts, read back in pages of 7 at one revision.
        let ops: Vec<Op> = (0..100)
            .map(|i| Op::Put {
                key: format!("/t/k/{i:03}").into_bytes(),
                value: vec![i as u8; 3],
                lease: 0,
            })
            .collect();
        let r2 = etcd.txn(&ops)?;
        ensure!(
            r2 == r1 + 1,
            "one transaction, one revision: {r1} then {r2}"
        );
        let (at, kvs) = etcd.get_prefix_paged(b"/t/k/", 7)?;
        ensure!(at == r2 && kvs.len() == 100, "{at} {}", kvs.len());
        ensure!(etcd.count_prefix(b"/t/k/")? == (r2, 100));
        for (i, kv) in kvs.iter().enumerate() {
            ensure!(kv.key == format!("/t/k/{i:03}").as_bytes() && kv.value == vec![i as u8; 3]);
        }
        // Create-if-absent.
        let c = etcd.create(b"/t/cfg", b"x")?;
        ensure!(c.is_ok(), "{c:?}");
        match etcd.create(b"/t/cfg", b"y")? {
            Err(kv) => ensure!(kv.value == b"x"),
            Ok(r) => anyhow::bail!("created twice (revision {r})"),
        }
        // A watch from the current revision sees puts and deletes in order.
        let (now, _) = etcd.get_prefix(b"/t/")?;
        let mut w = etcd.watch_prefix(b"/t/", now + 1)?;
        let p = etcd.put(b"/t/b", b"2", None)?;
        let (d, existed) = etcd.delete(b"/t/a")?;
        ensure!(existed && d == p + 1);
        let ev = events(&mut w, 2)?;
        ensure!(
            matches!(&ev[0], Event::Put(kv) if kv.key == b"/t/b" && kv.mod_revision == p)
                && ev[1]
                    == Event::Delete {
                        key: b"/t/a".to_vec(),
                        mod_revision: d
                    },
            "{ev:?}"
        );
        // Leases: a key under a lease lives while it is kept alive and goes with its revocation.
        let lease = etcd.lease_grant(5)?;
        etcd.put(b"/t/member", b"m", Some(lease))?;
        ensure!(etcd.get(b"/t/member")?.context("member key")?.lease == lease);
        ensure!(etcd.lease_keepalive(lease)? > 0);
        etcd.lease_revoke(lease)?;
        ensure!(etcd.get(b"/t/member")?.is_none());
        ensure!(etcd.lease_keepalive(lease)? == 0, "a revoked lease is gone");
        let ev = events(&mut w, 2)?;
        ensure!(
            matches!(&ev[1], Event::Delete { key, .. } if key == b"/t/member"),
            "{ev:?}"
        );
        // A lease that is not kept alive expires and takes its key.
        let short = etcd.lease_grant(1)?;
        etcd.put(b"/t/short", b"s", Some(short))?;
        let ev = events(&mut w, 2)?;
        ensure!(
            matches!(&ev[1], Event::Delete { key, .. } if key == b"/t/short"),
            "{ev:?}"
        );
        // A watch from a compacted revision is told so.
        let (now, _) = etcd.get_prefix(b"/t/")?;
        etcd.compact(now)?;
        let mut old = etcd.watch_prefix(b"/t/", r1)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            ensure!(Instant::now() < deadline, "no compaction notice");
            match old.recv()? {
                Some(WatchMsg::Compacted { compact_revision }) => {
                    ensure!(compact_revision == now);
                    break;
                }
                Some(WatchMsg::Created { .. }) | None => {}
                Some(m) => anyhow::bail!("unexpected {m:?}"),
            }
        }
        Ok(())
    })??;
    Ok(())
}

#[test]
fn an_unreachable_etcd_is_an_error_naming_the_endpoint() {
    let etcd = Etcd::new(&["http://127.0.0.1:9".to_string()]).unwrap();
    let e = etcd.put(b"k", b"v", None).unwrap_err().to_string();
    assert!(e.contains("127.0.0.1:9"), "{e}");
}
