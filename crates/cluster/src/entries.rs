//! `flowplane cluster entries|status`: the commands that change the entries in etcd (validated
//! against the configuration file, written in transactions of at most 128) and wait until every
//! live member applied them, and the cluster's status as etcd holds it.

use crate::cli::EntryOp;
use crate::config::Config;
use crate::store::{entry_key, entry_value, members, parse_entry, parse_host_mac};
use anyhow::{anyhow, bail, Context, Result};
use fp_control::etcd::{Etcd, Op, MAX_TXN_OPS};
use fp_wire::ethernet::MacAddr;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// `flowplane cluster entries ...`: change the entries, then wait until every live member applied
/// the change (`wait` seconds at most; 0: do not wait).
pub fn entries(cfg: &Config, wait: f64, op: EntryOp) -> Result<()> {
    let etcd = cfg.etcd();
    let prefix = cfg.prefix();
    let rev = match op {
        EntryOp::Add { mac, node, port } => {
            let mac = parse_host_mac(&mac)?;
            cfg.check_entry(node, port)?;
            let r = etcd.put(
                entry_key(&prefix, mac).as_bytes(),
                entry_value(node, port).as_bytes(),
                None,
            )?;
            println!("{mac} -> node {node} port {port} (revision {r})");
            r
        }
        EntryOp::Move { mac, node, port } => {
            let mac = parse_host_mac(&mac)?;
            let key = entry_key(&prefix, mac);
            let Some(kv) = etcd.get(key.as_bytes())? else {
                bail!("{mac}: no such entry (use `entries add`)");
            };
            let (_, old_node, old_port) = parse_entry(cfg, &prefix, &kv.key, &kv.value)?;
            let port = port.unwrap_or(old_port);
            cfg.check_entry(node, port)?;
            let r = etcd.put(key.as_bytes(), entry_value(node, port).as_bytes(), None)?;
            println!(
                "{mac}: node {old_node} port {old_port} -> node {node} port {port} (revision {r})"
            );
            r
        }
        EntryOp::Remove { mac } => {
            let mac = parse_host_mac(&mac)?;
            let (r, existed) = etcd.delete(entry_key(&prefix, mac).as_bytes())?;
            if !existed {
                bail!("{mac}: no such entry");
            }
            println!("{mac} removed (revision {r})");
            r
        }
        EntryOp::Load { file, replace } => load(cfg, &etcd, &file, replace)?,
        EntryOp::List => {
            let (_, kvs) = etcd.get_prefix(format!("{prefix}entries/").as_bytes())?;
            for kv in kvs {
                match parse_entry(cfg, &prefix, &kv.key, &kv.value) {
                    Ok((mac, n, p)) => println!("{mac} {n} {p}"),
                    Err(e) => println!("# invalid: {e:#}"),
                }
            }
            return Ok(());
        }
    };
    if wait > 0.0 {
        wait_applied(cfg, &etcd, rev, Duration::from_secs_f64(wait))?;
    }
    Ok(())
}

/// Write every entry of `file` (and with `replace`, delete the others). Returns the last revision.
fn load(cfg: &Config, etcd: &Etcd, file: &Path, replace: bool) -> Result<i64> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let prefix = cfg.prefix();
    let mut want: BTreeMap<MacAddr, (u8, u16)> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", file.display(), i + 1);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            bail!("{}: expected `MAC NODE PORT`, got {line:?}", at());
        }
        let mac = parse_host_mac(f[0]).with_context(at)?;
        let node: u8 = f[1]
            .parse()
            .map_err(|_| anyhow!("{}: node {:?}", at(), f[1]))?;
        let port: u16 = f[2]
            .parse()
            .map_err(|_| anyhow!("{}: port {:?}", at(), f[2]))?;
        cfg.check_entry(node, port).with_context(at)?;
        want.insert(mac, (node, port));
    }
    let (_, have) = etcd.get_prefix(format!("{prefix}entries/").as_bytes())?;
    let mut current = HashMap::new();
    let mut ops = Vec::new();
    for kv in &have {
        match parse_entry(cfg, &prefix, &kv.key, &kv.value) {
            Ok((mac, n, p)) => {
                current.insert(mac, (n, p));
                if replace && !want.contains_key(&mac) {
                    ops.push(Op::Delete {
                        key: kv.key.clone(),
                    });
                }
            }
            Err(_) if replace => ops.push(Op::Delete {
                key: kv.key.clone(),
            }),
            Err(_) => {}
        }
    }
    let removed = ops.len();
    for (mac, &(n, p)) in &want {
        if current.get(mac) != Some(&(n, p)) {
            ops.push(Op::Put {
                key: entry_key(&prefix, *mac).into_bytes(),
                value: entry_value(n, p).into_bytes(),
                lease: 0,
            });
        }
    }
    let mut rev = 0;
    for chunk in ops.chunks(MAX_TXN_OPS) {
        rev = etcd.txn(chunk)?;
    }
    if rev == 0 {
        // Nothing written: the store's current revision (every live member is at it or past).
        rev = etcd.count_prefix(prefix.as_bytes())?.0;
    }
    println!(
        "{}: {} entries, {} written, {removed} removed (revision {rev})",
        file.display(),
        want.len(),
        ops.len() - removed
    );
    Ok(rev)
}

/// Wait until every live member applied revision `rev`.
fn wait_applied(cfg: &Config, etcd: &Etcd, rev: i64, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let ms = members(etcd, &cfg.prefix())?;
        let failed: Vec<String> = ms
            .iter()
            .filter_map(|m| match &m.last_error {
                Some((r, e)) if *r >= rev => Some(format!("node {}: {e}", m.node)),
                _ => None,
            })
            .collect();
        if !failed.is_empty() {
            bail!("revision {rev} not applied: {}", failed.join("; "));
        }
        let behind: Vec<u8> = ms
            .iter()
            .filter(|m| m.applied < rev)
            .map(|m| m.node)
            .collect();
        if behind.is_empty() {
            let up: Vec<String> = ms.iter().map(|m| m.node.to_string()).collect();
            let down: Vec<String> = (0..cfg.n())
                .filter(|i| !ms.iter().any(|m| m.node == *i))
                .map(|i| i.to_string())
                .collect();
            println!(
                "applied by {} live member(s) [{}] in {:.0} ms{}",
                ms.len(),
                up.join(","),
                start.elapsed().as_secs_f64() * 1e3,
                if down.is_empty() {
                    String::new()
                } else {
                    format!("; down: [{}]", down.join(","))
                }
            );
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!(
                "revision {rev} not applied by node(s) {behind:?} within {:.1} s",
                limit.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `flowplane cluster status`: the members, the revision each applied, their digests.
pub fn status(cfg: &Config) -> Result<()> {
    let etcd = cfg.etcd();
    let prefix = cfg.prefix();
    let (rev, entries) = etcd.count_prefix(format!("{prefix}entries/").as_bytes())?;
    println!(
        "cluster {:?} at revision {rev}: {entries} entries",
        cfg.cluster.name
    );
    let ms = members(&etcd, &prefix)?;
    for id in 0..cfg.n() {
        match ms.iter().find(|m| m.node == id) {
            Some(m) => println!(
                "node {id}: up, applied {}, {} entries, digest {}, {} error(s){}",
                m.applied,
                m.entries,
                m.digest,
                m.errors,
                m.admin
                    .as_ref()
                    .map_or(String::new(), |a| format!(", admin {a}"))
            ),
            None => println!("node {id}: down"),
        }
    }
    Ok(())
}
