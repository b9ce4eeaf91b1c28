//! `flowplane cluster`: a ScaleBricks cluster of separate node processes whose state lives in
//! etcd.
//!
//! ```text
//!  flowplane cluster entries add|move|remove|load ──put──► etcd  <prefix>/entries/<MAC> = {"node":N,"port":P}
//!                         ▲  waits until every live member's "applied" ≥ the write's revision
//!                         │                                       <prefix>/members/<id> (under a lease)
//!  flowplane cluster run --node i: snapshot ─► Member (FIB share + partition table replica)
//!                                  watch    ─► apply each change in revision order ─► put applied revision
//!                                  data path: fp_cluster::live node on AF_PACKET / AF_XDP
//! ```
//!
//! * **Configuration**: one TOML file for the whole cluster (`[cluster]`: name, etcd endpoints,
//!   mode, capacity, lease TTL, port driver; one `[[node]]` per node: id, external interfaces,
//!   interconnect interface, admin address), validated before anything starts, errors naming the
//!   field. The settings every node must share (mode, node count, capacity, hash seed) are
//!   written to `<prefix>/config` by the first node; a node whose file disagrees refuses to start.
//! * **Entries** are keys `<prefix>/entries/<MAC>` with value `{"node":N,"port":P}`; the `entries`
//!   commands validate them against the file (node exists, port is one of its external ports)
//!   and write them in transactions of at most 128.
//! * **A node** reads every entry at one revision, builds its [`Member`] (its FIB share and its
//!   partition-table replica), starts its data path, registers `<prefix>/members/<id>` under a
//!   lease it keeps alive, and watches the prefix from the next revision: each entry change is
//!   applied in revision order, then the member key is rewritten with the revision applied, the
//!   entry digest and any error. A watch that breaks resumes after the last revision seen; one
//!   whose history was compacted reads the state again and applies the difference.
//! * **Members**: a member key that disappears (its lease expired: the node died or lost etcd)
//!   marks that node down on every other node — frames for its entries are dropped at the
//!   ingress node (`drop_owner_down`), not flooded — until it registers again. A node restarted
//!   with the same id waits for its previous lease to expire, then rebuilds from the current
//!   state.
//!
//! `--admin` serves `/metrics` (frames by path, drops by reason, table sizes and bytes per
//! entry, updates applied, the applied revision, members up), `/status` (members, revision,
//! digest, and a check of every entry against this node's tables) and `/trace` (the tracer's
//! records: each probe frame's way through this node). SIGTERM: the node revokes its lease (the
//! others mark it down at once), drains and exits 0.

use crate::live::{self, LiveNode, StatsReader};
use crate::{ClusterConfig, Member, MemberStats, Mode, NodeTrace, Tracer};
use anyhow::{anyhow, bail, Context, Result};
use fp_control::admin::{AdminHandler, AdminServer};
use fp_control::etcd::{Etcd, Event, Kv, Op, WatchMsg, MAX_TXN_OPS};
use fp_control::metrics::{self, Exposition, Kind};
use fp_control::signal::TerminateSignal;
use fp_control::systemd::Notifier;
use fp_control::trace::{TraceLog, TracerConfig};
use fp_wire::ethernet::MacAddr;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCmd {
    /// Run one node of the cluster on its interfaces (until SIGTERM).
    Run {
        /// The cluster's configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// This node's id (a `[[node]]` of the file).
        #[arg(long)]
        node: u8,
        /// Pin the node's worker thread to this CPU (default: not pinned).
        #[arg(long)]
        cpu: Option<usize>,
        /// Do not look for tracer probes.
        #[arg(long)]
        no_trace: bool,
    },
    /// Validate the configuration file and print what it describes.
    Check {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Add, move, remove, load or list entries (host MAC → node, external port).
    Entries {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Seconds to wait for every live member to apply the change (0: do not wait).
        #[arg(long, default_value_t = 10.0)]
        wait: f64,
        #[command(subcommand)]
        op: EntryOp,
    },
    /// The members, the revision each applied, their digests, and the entry count.
    Status {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum EntryOp {
    /// Add (or overwrite) an entry.
    Add {
        mac: String,
        #[arg(long)]
        node: u8,
        #[arg(long)]
        port: u16,
    },
    /// Move an entry to another node (and port; default: the same port number).
    Move {
        mac: String,
        #[arg(long)]
        node: u8,
        #[arg(long)]
        port: Option<u16>,
    },
    /// Remove an entry.
    Remove { mac: String },
    /// Add or overwrite every entry of FILE (lines `MAC NODE PORT`, `#` comments).
    Load {
        file: PathBuf,
        /// Also remove the entries FILE does not list.
        #[arg(long)]
        replace: bool,
    },
    /// Print every entry (`MAC NODE PORT`).
    List,
}

/// `[cluster]` of the configuration file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    /// The cluster's name: its keys live under `/flowplane/cluster/<name>/`.
    name: String,
    /// etcd client endpoints, `http://HOST:PORT`.
    etcd: Vec<String>,
    #[serde(default = "default_mode")]
    mode: String,
    #[serde(default = "default_capacity")]
    capacity: usize,
    /// Seconds a member's lease lives without a keepalive.
    #[serde(default = "default_ttl")]
    lease_ttl: u64,
    #[serde(default = "default_driver")]
    driver: String,
    /// Hash seed of the tables (hex); default: drawn at random by the first node.
    seed: Option<String>,
}

fn default_mode() -> String {
    "scalebricks".into()
}
fn default_capacity() -> usize {
    1 << 20
}
fn default_ttl() -> u64 {
    3
}
fn default_driver() -> String {
    "af_packet".into()
}

/// `[[node]]` of the configuration file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
struct NodeSection {
    id: u8,
    /// External interfaces: external port `i` is the `i`-th.
    external: Vec<String>,
    /// The interconnect interface.
    interconnect: String,
    /// Admin HTTP address (metrics, status).
    admin: Option<SocketAddr>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    cluster: ClusterSection,
    node: Vec<NodeSection>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    cluster: ClusterSection,
    mode: Mode,
    seed: Option<u64>,
    /// By id.
    nodes: Vec<NodeSection>,
}

fn parse_mode(s: &str) -> Option<Mode> {
    [Mode::ScaleBricks, Mode::Duplicate, Mode::HashPartition]
        .into_iter()
        .find(|m| m.name() == s)
}

impl Config {
    /// Parse and validate `text`; errors name the field.
    pub fn parse(text: &str) -> Result<Config> {
        let f: FileConfig = toml::from_str(text)?;
        let c = f.cluster;
        let name_ok = !c.name.is_empty()
            && c.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            bail!(
                "cluster.name = {:?}: use letters, digits, '-' and '_'",
                c.name
            );
        }
        if c.etcd.is_empty() {
            bail!("cluster.etcd: at least one endpoint (http://HOST:PORT)");
        }
        Etcd::new(&c.etcd).map_err(|e| anyhow!("cluster.etcd: {e}"))?;
        let mode = parse_mode(&c.mode).ok_or_else(|| {
            anyhow!(
                "cluster.mode = {:?}: use scalebricks, duplication or hash-partition",
                c.mode
            )
        })?;
        if !(1..=1 << 32).contains(&c.capacity) {
            bail!("cluster.capacity = {}: must be in 1..=2^32", c.capacity);
        }
        if !(1..=3600).contains(&c.lease_ttl) {
            bail!("cluster.lease_ttl = {}: seconds in 1..=3600", c.lease_ttl);
        }
        fp_engine::live::driver(&c.driver).map_err(|e| anyhow!("cluster.driver = {e}"))?;
        let seed = match &c.seed {
            None => None,
            Some(s) => Some(
                u64::from_str_radix(s.trim_start_matches("0x"), 16)
                    .map_err(|_| anyhow!("cluster.seed = {s:?}: a hex number"))?,
            ),
        };
        let n = f.node.len();
        if !(1..=64).contains(&n) {
            bail!("node: {n} nodes; a cluster has 1 to 64");
        }
        let mut nodes: Vec<Option<NodeSection>> = vec![None; n];
        for (i, nd) in f.node.into_iter().enumerate() {
            let id = nd.id as usize;
            if id >= n || nodes[id].is_some() {
                bail!("node[{i}].id = {id}: ids must be 0..{n}, each once");
            }
            if nd.external.is_empty() || nd.external.len() > 255 {
                bail!("node[{i}].external: 1 to 255 interfaces");
            }
            let mut all = nd.external.clone();
            all.push(nd.interconnect.clone());
            for (j, name) in all.iter().enumerate() {
                if name.is_empty() || name.len() > 15 {
                    bail!("node[{i}]: interface name {name:?} (1 to 15 characters)");
                }
                if all[..j].contains(name) {
                    bail!("node[{i}]: interface {name:?} is listed twice");
                }
            }
            nodes[id] = Some(nd);
        }
        Ok(Config {
            cluster: c,
            mode,
            seed,
            nodes: nodes.into_iter().map(|n| n.expect("every id")).collect(),
        })
    }

    /// Read and validate `path`.
    pub fn load(path: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("{}", path.display()))
    }

    fn prefix(&self) -> String {
        format!("/flowplane/cluster/{}/", self.cluster.name)
    }

    fn etcd(&self) -> Etcd {
        Etcd::new(&self.cluster.etcd).expect("validated")
    }

    fn n(&self) -> u8 {
        self.nodes.len() as u8
    }

    /// Check an entry against the file: the node exists and has the port.
    fn check_entry(&self, node: u8, port: u16) -> Result<()> {
        let Some(nd) = self.nodes.get(node as usize) else {
            bail!("node {node} does not exist (the cluster has {})", self.n());
        };
        if port as usize >= nd.external.len() {
            bail!(
                "node {node} has {} external port(s) (0..{}); port {port} does not exist",
                nd.external.len(),
                nd.external.len()
            );
        }
        Ok(())
    }
}

/// The settings every node must share, as stored at `<prefix>config`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shared {
    mode: Mode,
    nodes: u8,
    capacity: usize,
    seed: u64,
}

impl Shared {
    fn to_json(&self) -> String {
        serde_json::json!({
            "mode": self.mode.name(),
            "nodes": self.nodes,
            "capacity": self.capacity,
            "seed": format!("{:#x}", self.seed),
        })
        .to_string()
    }

    fn from_json(v: &[u8]) -> Result<Shared> {
        let v: serde_json::Value = serde_json::from_slice(v)?;
        let mode = v["mode"]
            .as_str()
            .and_then(parse_mode)
            .ok_or_else(|| anyhow!("mode {}", v["mode"]))?;
        let seed = v["seed"]
            .as_str()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .ok_or_else(|| anyhow!("seed {}", v["seed"]))?;
        Ok(Shared {
            mode,
            nodes: v["nodes"].as_u64().ok_or_else(|| anyhow!("nodes"))? as u8,
            capacity: v["capacity"].as_u64().ok_or_else(|| anyhow!("capacity"))? as usize,
            seed,
        })
    }
}

/// The entry key of `mac`.
fn entry_key(prefix: &str, mac: MacAddr) -> String {
    format!("{prefix}entries/{mac}")
}

fn entry_value(node: u8, port: u16) -> String {
    format!("{{\"node\":{node},\"port\":{port}}}")
}

/// (MAC, node, port) of an entry key-value, checked against the configuration.
fn parse_entry(
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

fn parse_mac(s: &str) -> Result<MacAddr> {
    let mac: MacAddr = s
        .parse()
        .map_err(|_| anyhow!("{s:?} is not a MAC address (xx:xx:xx:xx:xx:xx)"))?;
    if mac.is_multicast() {
        bail!("{mac} is a group address; entries are hosts");
    }
    Ok(mac)
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("flowplane cluster: {msg}");
}

/// `flowplane cluster ...`.
pub fn run(args: ClusterArgs) -> Result<()> {
    match args.cmd {
        ClusterCmd::Run {
            config,
            node,
            cpu,
            no_trace,
        } => run_node(&Config::load(&config)?, node, cpu, !no_trace),
        ClusterCmd::Check { config } => {
            let c = Config::load(&config)?;
            println!(
                "cluster {:?}: {} node(s), mode {}, capacity {}, etcd {}, lease {} s, driver {}",
                c.cluster.name,
                c.n(),
                c.mode.name(),
                c.cluster.capacity,
                c.cluster.etcd.join(","),
                c.cluster.lease_ttl,
                c.cluster.driver
            );
            for nd in &c.nodes {
                println!(
                    "node {}: external {} (ports 0..{}), interconnect {}, admin {}",
                    nd.id,
                    nd.external.join(","),
                    nd.external.len(),
                    nd.interconnect,
                    nd.admin.map_or("-".into(), |a| a.to_string())
                );
            }
            Ok(())
        }
        ClusterCmd::Entries { config, wait, op } => entries(&Config::load(&config)?, wait, op),
        ClusterCmd::Status { config } => status(&Config::load(&config)?),
    }
}

// ---- the entries commands ----

fn entries(cfg: &Config, wait: f64, op: EntryOp) -> Result<()> {
    let etcd = cfg.etcd();
    let prefix = cfg.prefix();
    let rev = match op {
        EntryOp::Add { mac, node, port } => {
            let mac = parse_mac(&mac)?;
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
            let mac = parse_mac(&mac)?;
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
            let mac = parse_mac(&mac)?;
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
        let mac = parse_mac(f[0]).with_context(at)?;
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

/// A member's record, as it publishes it.
#[derive(Debug, Clone, Default)]
struct MemberRecord {
    node: u8,
    applied: i64,
    digest: String,
    entries: u64,
    errors: u64,
    last_error: Option<(i64, String)>,
    admin: Option<String>,
    pid: u32,
}

impl MemberRecord {
    fn to_json(&self) -> String {
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

    fn parse(v: &[u8]) -> Option<MemberRecord> {
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

fn members(etcd: &Etcd, prefix: &str) -> Result<Vec<MemberRecord>> {
    let (_, kvs) = etcd.get_prefix(format!("{prefix}members/").as_bytes())?;
    Ok(kvs
        .iter()
        .filter_map(|kv| MemberRecord::parse(&kv.value))
        .collect())
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

fn status(cfg: &Config) -> Result<()> {
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

// ---- a node ----

/// What the admin endpoints read.
struct NodeView {
    cfg: Config,
    id: u8,
    member: Arc<Mutex<Member>>,
    reader: StatsReader,
    names: Vec<String>,
    applied: Mutex<i64>,
    up: Mutex<Vec<bool>>,
    started: Instant,
    description: String,
    traces: Arc<TraceLog<NodeTrace>>,
}

impl AdminHandler for NodeView {
    fn metrics(&self) -> String {
        let st = self.reader.stats();
        let c = st.counters;
        let mut e = Exposition::new();
        metrics::ports(
            &mut e,
            "flowplane_cluster",
            &self.names,
            std::slice::from_ref(self.reader.engine()),
        );
        e.family(
            "flowplane_cluster_frames_total",
            Kind::Counter,
            "Frames by path: local (emitted on an external port, entered at this node), one_hop \
             (emitted here after one interconnect hop), redirected (emitted after two or more \
             hops: the entry moved while the frame travelled), flooded (group-addressed frames \
             that entered here), to_interconnect and from_interconnect (frames this node sent \
             to and received from other nodes).",
        );
        for (path, v) in [
            ("local", st.ports.by_hops[0]),
            ("one_hop", st.ports.by_hops[1]),
            ("redirected", st.ports.by_hops[2]),
            ("flooded", c.flooded),
            ("to_interconnect", c.ic_tx),
            ("from_interconnect", c.ic_rx),
        ] {
            e.sample("flowplane_cluster_frames_total", &[("path", path)], v);
        }
        e.family(
            "flowplane_cluster_drops_total",
            Kind::Counter,
            "Frames dropped, by reason: unknown (no entry), owner_down (the entry's node is \
             down), malformed, link_full (the interconnect refused it), oversize (too large \
             once encapsulated), no_buffer, no_port (an entry names a port this node lacks).",
        );
        for (reason, v) in [
            ("unknown", c.drop_unknown),
            ("owner_down", c.drop_owner_down),
            ("malformed", c.drop_malformed),
            ("link_full", c.drop_link_full),
            ("oversize", c.drop_oversize),
            ("no_buffer", c.drop_no_buffer),
            ("no_port", st.ports.tx_no_port),
        ] {
            e.sample("flowplane_cluster_drops_total", &[("reason", reason)], v);
        }
        let m = self.member.lock().unwrap_or_else(|e| e.into_inner());
        let mem = m.memory();
        let s: MemberStats = m.stats();
        let n = m.len();
        drop(m);
        e.family(
            "flowplane_cluster_entries",
            Kind::Gauge,
            "Entries: cluster (all entries this node applied), fib (held in this node's FIB \
             share), partition (keys of the partition table replica; 0 unless scalebricks).",
        );
        let gpt_keys = if self.cfg.mode == Mode::ScaleBricks {
            n
        } else {
            0
        };
        for (t, v) in [
            ("cluster", n),
            ("fib", mem.fib_entries),
            ("partition", gpt_keys),
        ] {
            e.sample("flowplane_cluster_entries", &[("table", t)], v as u64);
        }
        e.family(
            "flowplane_cluster_table_bytes",
            Kind::Gauge,
            "Bytes of this node's tables: fib (its FIB share) and partition (its partition \
             table replica).",
        );
        e.sample(
            "flowplane_cluster_table_bytes",
            &[("table", "fib")],
            mem.fib_bytes as u64,
        );
        e.sample(
            "flowplane_cluster_table_bytes",
            &[("table", "partition")],
            mem.gpt_bytes as u64,
        );
        e.single(
            "flowplane_cluster_bytes_per_entry",
            Kind::Gauge,
            "This node's table bytes (FIB share + partition table) per entry of the cluster.",
            if n == 0 {
                0.0
            } else {
                mem.bytes() as f64 / n as f64
            },
        );
        e.family(
            "flowplane_cluster_updates_total",
            Kind::Counter,
            "Entry changes applied, by result: added, moved, repointed, removed, unchanged, \
             error (refused: a full table, an invalid entry).",
        );
        for (r, v) in [
            ("added", s.added),
            ("moved", s.moved),
            ("repointed", s.repointed),
            ("removed", s.removed),
            ("unchanged", s.unchanged),
            ("error", s.errors),
        ] {
            e.sample("flowplane_cluster_updates_total", &[("result", r)], v);
        }
        e.single(
            "flowplane_cluster_applied_revision",
            Kind::Gauge,
            "The etcd revision up to which this node applied every entry change.",
            *self.applied.lock().unwrap_or_else(|e| e.into_inner()) as u64,
        );
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner()).clone();
        e.family(
            "flowplane_cluster_member_up",
            Kind::Gauge,
            "1 if the node is a live member (its lease is held), as this node sees it.",
        );
        for (i, u) in up.iter().enumerate() {
            e.sample(
                "flowplane_cluster_member_up",
                &[("node", &i.to_string())],
                *u as u64,
            );
        }
        e.single(
            "flowplane_uptime_seconds",
            Kind::Gauge,
            "Seconds since start.",
            self.started.elapsed().as_secs_f64(),
        );
        e.finish()
    }

    fn reload(&self) -> Result<u64, String> {
        Err(
            "a cluster node takes its entries from etcd (flowplane cluster entries ...); \
             its configuration file is read at start"
                .into(),
        )
    }

    fn traces(&self) -> String {
        self.traces.json_lines()
    }

    fn status(&self) -> String {
        let mut s = String::new();
        let st = self.reader.stats();
        let m = self.member.lock().unwrap_or_else(|e| e.into_inner());
        let applied = *self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let up = self.up.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = writeln!(
            s,
            "flowplane {} cluster {:?} node {} of {} ({}); up {} s",
            env!("CARGO_PKG_VERSION"),
            self.cfg.cluster.name,
            self.id,
            self.cfg.n(),
            self.cfg.mode.name(),
            self.started.elapsed().as_secs()
        );
        let _ = writeln!(s, "{}", self.description);
        let _ = writeln!(
            s,
            "applied revision {applied}; {} entries; digest {:016x}",
            m.len(),
            m.digest()
        );
        let mem = m.memory();
        let _ = writeln!(
            s,
            "tables: FIB share {} entries, {} bytes; partition table {} bytes",
            mem.fib_entries, mem.fib_bytes, mem.gpt_bytes
        );
        let _ = writeln!(
            s,
            "verify: {}",
            match m.verify() {
                Ok(()) => "ok".to_string(),
                Err(e) => e,
            }
        );
        drop(m);
        let list: Vec<String> = up
            .iter()
            .enumerate()
            .map(|(i, u)| format!("{i}:{}", if *u { "up" } else { "down" }))
            .collect();
        let _ = writeln!(s, "members: {}", list.join(" "));
        let c = st.counters;
        let _ = writeln!(
            s,
            "frames: local {}, one hop {}, redirected {}, flooded {}; drops: unknown {}, \
             owner down {}, other {}",
            st.ports.by_hops[0],
            st.ports.by_hops[1],
            st.ports.by_hops[2],
            c.flooded,
            c.drop_unknown,
            c.drop_owner_down,
            c.drops() - c.drop_unknown - c.drop_owner_down
        );
        s
    }
}

/// What the watch thread hands the control loop.
enum Input {
    /// Changes, in revision order.
    Events(Vec<Event>),
    /// The whole state at a revision (after a compaction).
    Snapshot(i64, Vec<Kv>),
}

/// The changes that turn what a node holds (`held` keys) into the state `kvs` read at revision
/// `rev` (after the watch's history was compacted): every key of the state as a put (unchanged
/// entries change nothing), then a delete for each held entry the state no longer has (or holds
/// only an invalid value for, which a starting node would skip too).
fn snapshot_events(
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
fn apply_entry(cfg: &Config, prefix: &str, member: &mut Member, ev: &Event) -> Result<()> {
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

/// The control loop's view of etcd: failures are logged once and then every 10 s (not at every
/// retry), the recovery once; after a failure the loop waits half a second before the next try.
#[derive(Default)]
struct EtcdHealth {
    failing_since: Option<Instant>,
    last_log: Option<Instant>,
    retry_at: Option<Instant>,
}

impl EtcdHealth {
    fn failed(&mut self, doing: &str, e: &dyn std::fmt::Display) {
        let now = Instant::now();
        let since = *self.failing_since.get_or_insert(now);
        if self
            .last_log
            .is_none_or(|t| now - t >= Duration::from_secs(10))
        {
            log(format_args!(
                "{doing}: {e} (etcd failing for {:.0} s; forwarding continues with the tables \
                 as they are)",
                (now - since).as_secs_f64()
            ));
            self.last_log = Some(now);
        }
        self.retry_at = Some(now + Duration::from_millis(500));
    }

    fn ok(&mut self) {
        if let Some(since) = self.failing_since.take() {
            log(format_args!(
                "etcd answers again (after {:.1} s)",
                since.elapsed().as_secs_f64()
            ));
        }
        self.last_log = None;
        self.retry_at = None;
    }
}

/// The node's registration: its lease and member key.
struct Registration {
    lease: i64,
    last_ok: Instant,
}

fn register(etcd: &Etcd, key: &str, ttl: u64, rec: &MemberRecord) -> Result<Registration> {
    let lease = etcd.lease_grant(ttl)?;
    etcd.put(key.as_bytes(), rec.to_json().as_bytes(), Some(lease))?;
    Ok(Registration {
        lease,
        last_ok: Instant::now(),
    })
}

fn run_node(cfg: &Config, id: u8, cpu: Option<usize>, trace: bool) -> Result<()> {
    let Some(me) = cfg.nodes.get(id as usize).cloned() else {
        bail!("--node {id}: the configuration has nodes 0..{}", cfg.n());
    };
    let etcd = cfg.etcd();
    let prefix = cfg.prefix();
    let term = TerminateSignal::install().context("installing SIGTERM/SIGINT handlers")?;
    let mut notify = Notifier::from_env().context("NOTIFY_SOCKET")?;
    // 1. The shared settings: create them, or check ours against them.
    let want = Shared {
        mode: cfg.mode,
        nodes: cfg.n(),
        capacity: cfg.cluster.capacity,
        seed: cfg.seed.unwrap_or_else(fp_control::seed::random_seed),
    };
    let config_key = format!("{prefix}config");
    let shared = match etcd
        .create(config_key.as_bytes(), want.to_json().as_bytes())
        .context("etcd")?
    {
        Ok(_) => want,
        Err(kv) => {
            let have = Shared::from_json(&kv.value)
                .with_context(|| format!("{config_key}: not a cluster configuration"))?;
            for (field, ours, theirs) in [
                (
                    "cluster.mode",
                    want.mode.name().to_string(),
                    have.mode.name().to_string(),
                ),
                (
                    "node (count)",
                    want.nodes.to_string(),
                    have.nodes.to_string(),
                ),
                (
                    "cluster.capacity",
                    want.capacity.to_string(),
                    have.capacity.to_string(),
                ),
            ] {
                if ours != theirs {
                    bail!(
                        "{field} = {ours}, but cluster {:?} in etcd has {theirs} ({config_key}); \
                         every node must agree",
                        cfg.cluster.name
                    );
                }
            }
            if cfg.seed.is_some_and(|s| s != have.seed) {
                bail!(
                    "cluster.seed differs from the seed of cluster {:?} in etcd",
                    cfg.cluster.name
                );
            }
            have
        }
    };
    // 2. Wait for a previous incarnation's lease to expire.
    let member_key = format!("{prefix}members/{id}");
    let deadline = Instant::now() + Duration::from_secs(cfg.cluster.lease_ttl + 2);
    while let Some(kv) = etcd.get(member_key.as_bytes())? {
        if Instant::now() > deadline {
            let pid = MemberRecord::parse(&kv.value).map_or(0, |r| r.pid);
            bail!(
                "node {id} is already a live member (pid {pid}, lease {}): is another process \
                 running as node {id}?",
                kv.lease
            );
        }
        if term.is_set() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // 3. The state at one revision, and this node's tables.
    let (rev0, kvs) = etcd.get_prefix(prefix.as_bytes())?;
    let mut ccfg = ClusterConfig::new(cfg.n(), cfg.mode, 255, shared.capacity);
    ccfg.seed = shared.seed;
    let mut initial = Vec::new();
    let mut up = vec![false; cfg.n() as usize];
    up[id as usize] = true;
    let mut bad = 0;
    for kv in &kvs {
        if kv.key.starts_with(format!("{prefix}entries/").as_bytes()) {
            match parse_entry(cfg, &prefix, &kv.key, &kv.value) {
                Ok((mac, n, p)) => initial.push((mac.to_u64(), n, p)),
                Err(e) => {
                    bad += 1;
                    log(format_args!("skipping an invalid entry: {e:#}"));
                }
            }
        } else if let Some(r) = kv
            .key
            .starts_with(format!("{prefix}members/").as_bytes())
            .then(|| MemberRecord::parse(&kv.value))
            .flatten()
        {
            if let Some(u) = up.get_mut(r.node as usize) {
                *u = true;
            }
        }
    }
    let t0 = Instant::now();
    let (member, tables) = Member::build(&ccfg, id, &initial)?;
    for (i, u) in up.iter().enumerate() {
        member.set_down(i as u8, !u);
    }
    log(format_args!(
        "node {id}: {} entries at revision {rev0} ({bad} invalid), tables built in {:.0} ms",
        member.len(),
        t0.elapsed().as_secs_f64() * 1e3
    ));
    // 4. The data path.
    let mut node_cfg = ccfg.node_config(id);
    node_cfg.ports = me.external.len() as u16;
    let ext: Vec<&str> = me.external.iter().map(String::as_str).collect();
    let ports = live::open(&ext, &me.interconnect, &cfg.cluster.driver)
        .with_context(|| format!("opening {} and {}", me.external.join(","), me.interconnect))?;
    let traces = TraceLog::<NodeTrace>::new(1024);
    let tracer = trace.then(|| Tracer {
        log: traces.clone(),
        limiter: traces.limiter(TracerConfig::default()),
    });
    let node: LiveNode = live::start_traced(node_cfg, tables, ports, cpu, tracer)?;
    let description = format!(
        "external {} + interconnect {} on {}",
        me.external.join(","),
        me.interconnect,
        cfg.cluster.driver
    );
    let mut names = me.external.clone();
    names.push(me.interconnect.clone());
    let member = Arc::new(Mutex::new(member));
    let view = Arc::new(NodeView {
        cfg: cfg.clone(),
        id,
        member: member.clone(),
        reader: node.reader(),
        names,
        applied: Mutex::new(rev0),
        up: Mutex::new(up.clone()),
        started: Instant::now(),
        description: description.clone(),
        traces,
    });
    let admin = match me.admin {
        Some(addr) => {
            let s = AdminServer::start(addr, view.clone())
                .with_context(|| format!("admin server on {addr}"))?;
            log(format_args!("admin server on http://{}", s.local_addr()));
            Some(s)
        }
        None => None,
    };
    // 5. Register, then follow the changes.
    let record = |m: &Member, applied: i64, last_error: &Option<(i64, String)>| MemberRecord {
        node: id,
        applied,
        digest: format!("{:016x}", m.digest()),
        entries: m.len() as u64,
        errors: m.stats().errors,
        last_error: last_error.clone(),
        admin: me.admin.map(|a| a.to_string()),
        pid: std::process::id(),
    };
    let ttl = cfg.cluster.lease_ttl;
    let mut applied = rev0;
    let mut last_error: Option<(i64, String)> = None;
    let mut reg = {
        let m = member.lock().unwrap_or_else(|e| e.into_inner());
        register(&etcd, &member_key, ttl, &record(&m, applied, &last_error))?
    };
    let (tx, rx) = mpsc::channel::<Input>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (etcd, prefix, stop) = (etcd.clone(), prefix.clone(), stop.clone());
        std::thread::Builder::new()
            .name("fp-cluster-watch".into())
            .spawn(move || watch_loop(&etcd, &prefix, rev0 + 1, &tx, &stop))?
    };
    log(format_args!(
        "node {id} ready: {description}; {} of {} members up",
        up.iter().filter(|u| **u).count(),
        cfg.n()
    ));
    notify.ready(&format!("cluster {:?} node {id}", cfg.cluster.name));
    let entries_prefix = format!("{prefix}entries/");
    let members_prefix = format!("{prefix}members/");
    let mut publish = false;
    let mut etcd_health = EtcdHealth::default();
    let result: Result<()> = loop {
        if term.is_set() {
            break Ok(());
        }
        if let Err(e) = node.check() {
            break Err(e.into());
        }
        notify.watchdog(true);
        // Changes: take everything queued, then publish once.
        let mut inputs = Vec::new();
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(i) => inputs.push(i),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err(anyhow!("the watch stopped")),
        }
        inputs.extend(rx.try_iter());
        for input in inputs {
            let mut m = member.lock().unwrap_or_else(|e| e.into_inner());
            let events = match input {
                Input::Events(ev) => ev,
                Input::Snapshot(rev, kvs) => {
                    let ev = snapshot_events(cfg, m.entries().map(|e| e.0), rev, kvs);
                    // Members absent from the snapshot are down.
                    let mut up = view.up.lock().unwrap_or_else(|e| e.into_inner());
                    for (i, u) in up.iter_mut().enumerate() {
                        if i != id as usize {
                            *u = false;
                            m.set_down(i as u8, true);
                        }
                    }
                    drop(up);
                    applied = applied.max(rev);
                    publish = true;
                    ev
                }
            };
            for ev in &events {
                let key = ev.key();
                if key.starts_with(entries_prefix.as_bytes()) {
                    if let Err(e) = apply_entry(cfg, &prefix, &mut m, ev) {
                        log(format_args!("revision {}: {e:#}", ev.revision()));
                        last_error = Some((ev.revision(), format!("{e:#}")));
                    }
                    applied = applied.max(ev.revision());
                    publish = true;
                } else if key.starts_with(members_prefix.as_bytes()) {
                    let Some(n) = std::str::from_utf8(&key[members_prefix.len()..])
                        .ok()
                        .and_then(|s| s.parse::<u8>().ok())
                        .filter(|&n| n < cfg.n())
                    else {
                        continue;
                    };
                    let is_up = matches!(ev, Event::Put(_));
                    if n == id {
                        if !is_up && !term.is_set() {
                            // Our own key went (the lease expired while etcd was away): again.
                            log("our member key was deleted; registering again");
                            reg.last_ok = Instant::now() - Duration::from_secs(3600);
                        }
                        continue;
                    }
                    let mut up = view.up.lock().unwrap_or_else(|e| e.into_inner());
                    if up[n as usize] != is_up {
                        log(format_args!(
                            "node {n} is {}",
                            if is_up { "up" } else { "down" }
                        ));
                    }
                    up[n as usize] = is_up;
                    m.set_down(n, !is_up);
                }
            }
        }
        *view.applied.lock().unwrap_or_else(|e| e.into_inner()) = applied;
        // Keep the lease; register again if it was lost. While etcd does not answer, try again
        // every half second (the data path keeps forwarding meanwhile).
        if etcd_health.retry_at.is_some_and(|t| Instant::now() < t) {
            continue;
        }
        let since = reg.last_ok.elapsed();
        if since >= Duration::from_secs(ttl) {
            let m = member.lock().unwrap_or_else(|e| e.into_inner());
            match register(&etcd, &member_key, ttl, &record(&m, applied, &last_error)) {
                Ok(r) => {
                    etcd_health.ok();
                    log(format_args!("registered again (lease {})", r.lease));
                    reg = r;
                    publish = false;
                }
                Err(e) => etcd_health.failed("registering", &e),
            }
        } else if since >= Duration::from_millis(ttl * 1000 / 3) {
            match etcd.lease_keepalive(reg.lease) {
                Ok(t) if t > 0 => {
                    etcd_health.ok();
                    reg.last_ok = Instant::now();
                }
                Ok(_) => reg.last_ok = Instant::now() - Duration::from_secs(3600),
                Err(e) => etcd_health.failed("lease keepalive", &e),
            }
        }
        if publish {
            let m = member.lock().unwrap_or_else(|e| e.into_inner());
            let rec = record(&m, applied, &last_error);
            drop(m);
            match etcd.put(
                member_key.as_bytes(),
                rec.to_json().as_bytes(),
                Some(reg.lease),
            ) {
                Ok(_) => {
                    etcd_health.ok();
                    publish = false;
                }
                Err(e) => etcd_health.failed("publishing the applied revision", &e),
            }
        }
    };
    notify.stopping(None);
    log("shutting down");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Leave at once: the other nodes mark this one down now, not after the lease's TTL.
    if let Err(e) = etcd.lease_revoke(reg.lease) {
        log(format_args!("revoking the lease: {e}"));
    }
    if let Some(s) = admin {
        s.shutdown();
    }
    let st = node.stop()?;
    let _ = watcher.join();
    log(format_args!(
        "stopped: frames local {}, one hop {}, redirected {}; drops {}",
        st.ports.by_hops[0],
        st.ports.by_hops[1],
        st.ports.by_hops[2],
        st.counters.drops()
    ));
    result
}

/// Follow the prefix from revision `from`, handing changes to the control loop; resume after a
/// broken stream, read the whole state again after a compaction.
fn watch_loop(
    etcd: &Etcd,
    prefix: &str,
    mut from: i64,
    tx: &mpsc::Sender<Input>,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut complained = false;
    while !stop.load(Relaxed) {
        let mut w = match etcd.watch_prefix(prefix.as_bytes(), from) {
            Ok(w) => w,
            Err(e) => {
                if !complained {
                    log(format_args!("watch: {e}; retrying"));
                    complained = true;
                }
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
        };
        if complained {
            log(format_args!("watch resumed from revision {from}"));
            complained = false;
        }
        while !stop.load(Relaxed) {
            match w.recv() {
                Ok(None) | Ok(Some(WatchMsg::Created { .. })) => {}
                Ok(Some(WatchMsg::Events { events, .. })) => {
                    if let Some(last) = events.last() {
                        from = last.revision() + 1;
                    }
                    if tx.send(Input::Events(events)).is_err() {
                        return;
                    }
                }
                Ok(Some(WatchMsg::Compacted { compact_revision })) => {
                    log(format_args!(
                        "watch: history compacted at {compact_revision}; reading the state again"
                    ));
                    match etcd.get_prefix(prefix.as_bytes()) {
                        Ok((rev, kvs)) => {
                            from = rev + 1;
                            if tx.send(Input::Snapshot(rev, kvs)).is_err() {
                                return;
                            }
                        }
                        Err(e) => log(format_args!("reading the state: {e}")),
                    }
                    break;
                }
                Ok(Some(WatchMsg::Canceled { reason })) => {
                    log(format_args!("watch cancelled ({reason}); watching again"));
                    break;
                }
                Err(e) => {
                    if !stop.load(Relaxed) {
                        log(format_args!("watch: {e}; resuming from revision {from}"));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[cluster]
name = "lab"
etcd = ["http://10.0.0.1:2379"]

[[node]]
id = 1
external = ["p0", "p1"]
interconnect = "ic0"

[[node]]
id = 0
external = ["p0"]
interconnect = "ic0"
admin = "127.0.0.1:9300"
"#;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.n(), 2);
        assert_eq!(c.mode, Mode::ScaleBricks);
        assert_eq!(c.nodes[1].external.len(), 2);
        assert_eq!(c.prefix(), "/flowplane/cluster/lab/");
        assert!(c.check_entry(1, 1).is_ok());
        assert!(c.check_entry(0, 1).is_err());
        assert!(c.check_entry(2, 0).is_err());
    }

    #[test]
    fn bad_files_name_the_field() {
        for (from, to, field) in [
            ("id = 1", "id = 0", "node[1].id"),
            ("name = \"lab\"", "name = \"a/b\"", "cluster.name"),
            (
                "etcd = [\"http://10.0.0.1:2379\"]",
                "etcd = []",
                "cluster.etcd",
            ),
            (
                "name = \"lab\"",
                "name = \"lab\"\nmode = \"mesh\"",
                "cluster.mode",
            ),
            (
                "name = \"lab\"",
                "name = \"lab\"\ndriver = \"dpdk\"",
                "cluster.driver",
            ),
            (
                "name = \"lab\"",
                "name = \"lab\"\nlease_ttl = 0",
                "cluster.lease_ttl",
            ),
            ("[\"p0\", \"p1\"]", "[\"p0\", \"ic0\"]", "listed twice"),
            ("name = \"lab\"", "name = \"lab\"\ncolour = 1", "colour"),
        ] {
            let text = GOOD.replacen(from, to, 1);
            let e = format!("{:#}", Config::parse(&text).unwrap_err());
            assert!(e.contains(field), "{field}: {e}");
        }
    }

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
