//! The cluster's state in etcd: the key schema and its values. Under `/flowplane/cluster/<name>/`:
//! `config` (the settings every node must share), `entries/<MAC>` = `{"node":N,"port":P}`, and
//! `members/<id>` (a live node's record, under its lease).

use crate::config::{parse_mode, Config};
use crate::{Member, Mode};
use anyhow::{anyhow, bail, Context, Result};
use fp_control::etcd::{Etcd, Event, Kv};
use fp_wire::ethernet::MacAddr;

/// The settings every node must share, as stored at `<prefix>config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedSettings {
    pub(crate) mode: Mode,
    pub(crate) nodes: u8,
    pub(crate) capacity: usize,
    pub(crate) seed: u64,
}

impl SharedSettings {
    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({
            "mode": self.mode.name(),
            "nodes": self.nodes,
            "capacity": self.capacity,
            "seed": format!("{:#x}", self.seed),
        })
        .to_string()
    }

    pub(crate) fn from_json(v: &[u8]) -> Result<SharedSettings> {
        let v: serde_json::Value = serde_json::from_slice(v)?;
        let mode = v["mode"]
            .as_str()
            .and_then(parse_mode)
            .ok_or_else(|| anyhow!("mode {}", v["mode"]))?;
        let seed = v["seed"]
            .as_str()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .ok_or_else(|| anyhow!("seed {}", v["seed"]))?;
        Ok(SharedSettings {
            mode,
            nodes: v["nodes"].as_u64().ok_or_else(|| anyhow!("nodes"))? as u8,
            capacity: v["capacity"].as_u64().ok_or_else(|| anyhow!("capacity"))? as usize,
            seed,
        })
    }
}

/// The entry key of `mac`.
pub(crate) fn entry_key(prefix: &str, mac: MacAddr) -> String {
    format!("{prefix}entries/{mac}")
}

pub(crate) fn entry_value(node: u8, port: u16) -> String {
    format!("{{\"node\":{node},\"port\":{port}}}")
}

/// (MAC, node, port) of an entry key-value, checked against the configuration.
pub(crate) fn parse_entry(
    cfg: &Config,
    prefix: &str,
    kv_key: &[u8],
    value: &[u8],
) -> Result<(MacAddr, u8, u16)> {
    let key = std::str::from_utf8(kv_key)?;
    let mac: MacAddr = key
        .strip_prefix(prefix)
        .and_then(|k| k.strip_prefix("entries/"))
        .ok_or_else(|| anyhow!("not an entry key"))?
        .parse()
        .map_err(|e| anyhow!("{key}: {e:?}"))?;
    if mac.is_multicast() {
        bail!("{key}: a group address is not a host");
    }
    let v: serde_json::Value =
        serde_json::from_slice(value).with_context(|| format!("{key}: value"))?;
    let node = v["node"].as_u64().filter(|&n| n < 256);
    let port = v["port"].as_u64().filter(|&p| p < 256);
    let (Some(node), Some(port)) = (node, port) else {
        bail!("{key}: value {v}: expected {{\"node\":N,\"port\":P}}");
    };
    cfg.check_entry(node as u8, port as u16)
        .with_context(|| key.to_string())?;
    Ok((mac, node as u8, port as u16))
}

/// A host MAC as the entry commands take it.
pub(crate) fn parse_host_mac(s: &str) -> Result<MacAddr> {
    let mac: MacAddr = s
        .parse()
        .map_err(|_| anyhow!("{s:?} is not a MAC address (xx:xx:xx:xx:xx:xx)"))?;
    if mac.is_multicast() {
        bail!("{mac} is a group address; entries are hosts");
    }
    Ok(mac)
}

/// A member's record, as it publishes it.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemberRecord {
    pub(crate) node: u8,
    pub(crate) applied: i64,
    pub(crate) digest: String,
    pub(crate) entries: u64,
    pub(crate) errors: u64,
    pub(crate) last_error: Option<(i64, String)>,
    pub(crate) admin: Option<String>,
    pub(crate) pid: u32,
}

impl MemberRecord {
    pub(crate) fn to_json(&self) -> String {
        let mut v = serde_json::json!({
            "node": self.node,
            "applied": self.applied,
            "digest": self.digest,
            "entries": self.entries,
            "errors": self.errors,
            "pid": self.pid,
        });
        if let Some((r, e)) = &self.last_error {
            v["last_error"] = serde_json::json!({"revision": r, "error": e});
        }
        if let Some(a) = &self.admin {
            v["admin"] = serde_json::Value::String(a.clone());
        }
        v.to_string()
    }

    pub(crate) fn parse(v: &[u8]) -> Option<MemberRecord> {
        let v: serde_json::Value = serde_json::from_slice(v).ok()?;
        Some(MemberRecord {
            node: v["node"].as_u64()? as u8,
            applied: v["applied"].as_i64()?,
            digest: v["digest"].as_str().unwrap_or("").to_string(),
            entries: v["entries"].as_u64().unwrap_or(0),
            errors: v["errors"].as_u64().unwrap_or(0),
            last_error: v["last_error"]["revision"]
                .as_i64()
                .map(|r| (r, v["last_error"]["error"].as_str().unwrap_or("").into())),
            admin: v["admin"].as_str().map(String::from),
            pid: v["pid"].as_u64().unwrap_or(0) as u32,
        })
    }
}

pub(crate) fn members(etcd: &Etcd, prefix: &str) -> Result<Vec<MemberRecord>> {
    let (_, kvs) = etcd.get_prefix(format!("{prefix}members/").as_bytes())?;
    Ok(kvs
        .iter()
        .filter_map(|kv| MemberRecord::parse(&kv.value))
        .collect())
}

/// What the watch thread hands the control loop.
pub(crate) enum Input {
    /// Changes, in revision order.
    Events(Vec<Event>),
    /// The whole state at a revision (after a compaction).
    Snapshot(i64, Vec<Kv>),
}

/// The changes that turn what a node holds (`held` keys) into the state `kvs` read at revision
/// `rev` (after the watch's history was compacted): every key of the state as a put (unchanged
/// entries change nothing), then a delete for each held entry the state no longer has (or holds
/// only an invalid value for, which a starting node would skip too).
pub(crate) fn snapshot_events(
    cfg: &Config,
    held: impl Iterator<Item = u64>,
    rev: i64,
    kvs: Vec<Kv>,
) -> Vec<Event> {
    let prefix = cfg.prefix();
    let entries = format!("{prefix}entries/");
    let mut ev = Vec::with_capacity(kvs.len());
    let mut seen = std::collections::HashSet::new();
    for mut kv in kvs {
        if kv.key.starts_with(entries.as_bytes()) {
            if let Ok((mac, _, _)) = parse_entry(cfg, &prefix, &kv.key, &kv.value) {
                seen.insert(mac.to_u64());
            }
        }
        kv.mod_revision = rev;
        ev.push(Event::Put(kv));
    }
    let gone: Vec<u64> = held.filter(|k| !seen.contains(k)).collect();
    for k in gone {
        ev.push(Event::Delete {
            key: entry_key(&prefix, MacAddr::from_u64(k)).into_bytes(),
            mod_revision: rev,
        });
    }
    ev
}

/// Apply one entry change; `Err` describes a refused one.
pub(crate) fn apply_entry(
    cfg: &Config,
    prefix: &str,
    member: &mut Member,
    ev: &Event,
) -> Result<()> {
    match ev {
        Event::Put(kv) => {
            let (mac, node, port) = parse_entry(cfg, prefix, &kv.key, &kv.value)?;
            member.set(mac.to_u64(), node, port)?;
        }
        Event::Delete { key, .. } => {
            let k = std::str::from_utf8(key)?;
            let mac: MacAddr = k
                .strip_prefix(prefix)
                .and_then(|k| k.strip_prefix("entries/"))
                .and_then(|m| m.parse().ok())
                .ok_or_else(|| anyhow!("{k}: not an entry key"))?;
            member.remove(mac.to_u64())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::GOOD;
    use crate::ClusterConfig;

    #[test]
    fn a_snapshot_after_compaction_becomes_the_difference() {
        let c = Config::parse(GOOD).unwrap();
        let p = c.prefix();
        let mac = |i: u8| MacAddr([2, 0, 0, 0, 0, i]);
        let kv = |i: u8, node: u8, port: u16| Kv {
            key: entry_key(&p, mac(i)).into_bytes(),
            value: entry_value(node, port).into_bytes(),
            create_revision: 1,
            mod_revision: 2,
            lease: 0,
        };
        // The node holds 1, 2 and 3; the state has 2 moved, 3 with a bad value, 4 new, a member.
        let mut ccfg = ClusterConfig::new(2, Mode::ScaleBricks, 255, 64);
        ccfg.seed = 7;
        let held = [(1, 0, 0), (2, 0, 0), (3, 1, 1)];
        let entries: Vec<(u64, u8, u16)> = held
            .iter()
            .map(|&(i, n, p)| (mac(i).to_u64(), n, p))
            .collect();
        let (mut m, _tables) = Member::build(&ccfg, 0, &entries).unwrap();
        let mut bad = kv(3, 0, 0);
        bad.value = b"{\"node\":9}".to_vec();
        let member = Kv {
            key: format!("{p}members/1").into_bytes(),
            value: b"{}".to_vec(),
            create_revision: 1,
            mod_revision: 2,
            lease: 5,
        };
        let state = vec![kv(2, 1, 1), bad, kv(4, 1, 0), member];
        let ev = snapshot_events(&c, m.entries().map(|e| e.0), 40, state);
        assert!(ev.iter().all(|e| e.revision() == 40));
        let deleted: Vec<&[u8]> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Delete { key, .. } => Some(key.as_slice()),
                Event::Put(_) => None,
            })
            .collect();
        let key = |i: u8| entry_key(&p, mac(i)).into_bytes();
        assert_eq!(deleted.len(), 2, "{deleted:?}");
        assert!(deleted.contains(&key(1).as_slice()) && deleted.contains(&key(3).as_slice()));
        for e in &ev {
            if e.key().starts_with(format!("{p}entries/").as_bytes()) {
                let _ = apply_entry(&c, &p, &mut m, e);
            }
        }
        let mut got: Vec<(u64, u8, u16)> = m.entries().collect();
        got.sort_unstable();
        assert_eq!(got, vec![(mac(2).to_u64(), 1, 1), (mac(4).to_u64(), 1, 0)]);
        m.verify().unwrap();
    }

    #[test]
    fn entry_values_are_checked_against_the_file() {
        let c = Config::parse(GOOD).unwrap();
        let p = c.prefix();
        let k = format!("{p}entries/02:00:00:00:00:01");
        let (mac, n, port) = parse_entry(&c, &p, k.as_bytes(), b"{\"node\":1,\"port\":1}").unwrap();
        assert_eq!(
            (mac.to_string().as_str(), n, port),
            ("02:00:00:00:00:01", 1, 1)
        );
        assert!(parse_entry(&c, &p, k.as_bytes(), b"{\"node\":0,\"port\":1}").is_err());
        assert!(parse_entry(&c, &p, k.as_bytes(), b"{\"node\":5,\"port\":0}").is_err());
        assert!(parse_entry(&c, &p, k.as_bytes(), b"not json").is_err());
        let group = format!("{p}entries/01:00:5e:00:00:01");
        assert!(parse_entry(&c, &p, group.as_bytes(), b"{\"node\":0,\"port\":0}").is_err());
        let rec = MemberRecord {
            node: 1,
            applied: 42,
            digest: "ab".into(),
            entries: 3,
            errors: 1,
            last_error: Some((40, "full".into())),
            admin: None,
            pid: 7,
        };
        let back = MemberRecord::parse(rec.to_json().as_bytes()).unwrap();
        assert_eq!(
            (back.node, back.applied, back.last_error),
            (1, 42, Some((40, "full".into())))
        );
    }
}
