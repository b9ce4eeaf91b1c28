//! `flowplane cluster`'s configuration file: one TOML file for the whole cluster (`[cluster]`:
//! name, etcd endpoints, mode, capacity, lease TTL, port driver, hash seed; one `[[node]]` per
//! node: id, external interfaces, interconnect interface, admin address), validated before
//! anything starts, errors naming the field.

use crate::Mode;
use anyhow::{anyhow, bail, Context, Result};
use fp_control::etcd::Etcd;
use fp_engine::live::Driver;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// `[cluster]` of the configuration file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterSection {
    /// The cluster's name: its keys live under `/flowplane/cluster/<name>/`.
    pub(crate) name: String,
    /// etcd client endpoints, `http://HOST:PORT`.
    pub(crate) etcd: Vec<String>,
    #[serde(default = "default_mode")]
    pub(crate) mode: String,
    #[serde(default = "default_capacity")]
    pub(crate) capacity: usize,
    /// Each node's FIB layout: `auto` (by its share of the capacity), `compact` or `quotient`.
    #[serde(default = "default_fib_layout")]
    pub(crate) fib_layout: String,
    /// Seconds a member's lease lives without a keepalive.
    #[serde(default = "default_ttl")]
    pub(crate) lease_ttl: u64,
    #[serde(default = "default_driver")]
    pub(crate) driver: String,
    /// Hash seed of the tables (hex); default: drawn at random by the first node.
    pub(crate) seed: Option<String>,
}

fn default_mode() -> String {
    "scalebricks".into()
}
fn default_capacity() -> usize {
    1 << 20
}
fn default_fib_layout() -> String {
    "auto".into()
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
pub(crate) struct NodeSection {
    pub(crate) id: u8,
    /// External interfaces: external port `i` is the `i`-th.
    pub(crate) external: Vec<String>,
    /// The interconnect interface.
    pub(crate) interconnect: String,
    /// Admin HTTP address (metrics, status).
    pub(crate) admin: Option<SocketAddr>,
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
    pub(crate) cluster: ClusterSection,
    pub(crate) mode: Mode,
    /// The port driver (`cluster.driver`).
    pub(crate) driver: Driver,
    pub(crate) seed: Option<u64>,
    /// The FIB layout asked (`cluster.fib_layout`; none: by size).
    pub(crate) fib_layout: Option<fp_cuckoo::FibLayout>,
    /// By id.
    pub(crate) nodes: Vec<NodeSection>,
}

pub(crate) fn parse_mode(s: &str) -> Option<Mode> {
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
        let fib_layout = match c.fib_layout.as_str() {
            "auto" => None,
            l => Some(
                l.parse()
                    .map_err(|e| anyhow!("cluster.fib_layout = {e} or auto"))?,
            ),
        };
        if !(1..=3600).contains(&c.lease_ttl) {
            bail!("cluster.lease_ttl = {}: seconds in 1..=3600", c.lease_ttl);
        }
        let driver = fp_engine::live::driver(&c.driver)
            .map(Driver)
            .map_err(|e| anyhow!("cluster.driver = {e}"))?;
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
            driver,
            seed,
            fib_layout,
            nodes: nodes.into_iter().map(|n| n.expect("every id")).collect(),
        })
    }

    /// Read and validate `path`.
    pub fn load(path: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("{}", path.display()))
    }

    pub(crate) fn prefix(&self) -> String {
        format!("/flowplane/cluster/{}/", self.cluster.name)
    }

    pub(crate) fn etcd(&self) -> Etcd {
        Etcd::new(&self.cluster.etcd).expect("validated")
    }

    pub(crate) fn n(&self) -> u8 {
        self.nodes.len() as u8
    }

    /// Check an entry against the file: the node exists and has the port.
    pub(crate) fn check_entry(&self, node: u8, port: u16) -> Result<()> {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"
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
            (
                "name = \"lab\"",
                "name = \"lab\"\nfib_layout = \"hopscotch\"",
                "cluster.fib_layout",
            ),
            ("[\"p0\", \"p1\"]", "[\"p0\", \"ic0\"]", "listed twice"),
            ("name = \"lab\"", "name = \"lab\"\ncolour = 1", "colour"),
        ] {
            let text = GOOD.replacen(from, to, 1);
            let e = format!("{:#}", Config::parse(&text).unwrap_err());
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
