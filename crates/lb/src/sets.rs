//! The backend sets' state file: what Maglev dealt each VIP's connections from, kept across
//! restarts so that second chance works after one.
//!
//! A successor process has no connection entries. For a flow whose backend the running
//! configuration moves (a restart that also changes a weight or adds a backend), its packets would
//! reach another backend, which resets the connection. With the predecessor's backend sets the
//! successor knows where the flow lived: a VIP whose set differs from the predecessor's gets the
//! predecessor's set as its *earlier* set (for `balancer.second_chance_s`), and the packets of
//! flows it picks up name that set's backend in the tunnel header (`fp_wire::second_chance`).
//! A VIP whose set did not change keeps the predecessor's earlier set for the rest of its window.
//!
//! The file is `backends.json` in `balancer.state_dir`, else in the service's state directory
//! (`$STATE_DIRECTORY`, else `/var/lib/flowplane`). It is rewritten (atomically, mode 0600) when a
//! set changes, and holds a fingerprint of the hash seed and the Maglev table size: a successor
//! with another seed or size hashes flows elsewhere, so it ignores the file (and says so).

use crate::config::LbConfig;
use crate::snapshot::VipSets;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layout version of the file.
const VERSION: u32 = 1;

/// The file's content.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// Layout version.
    pub version: u32,
    /// A one-way fingerprint of the hash seed (never the seed).
    pub seed_check: u64,
    /// Maglev table size.
    pub maglev_size: u32,
    /// Every VIP's sets, by VIP name.
    pub vips: BTreeMap<String, VipSets>,
}

/// Why a saved file is not used.
#[derive(Debug, thiserror::Error)]
pub enum SetsError {
    /// Reading or writing failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Not this layout.
    #[error("{}: not a backend-sets file of version {VERSION}: {why}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        why: String,
    },
    /// Written under another seed or Maglev table size: its sets would name other backends.
    #[error("{}: written with another hash seed or Maglev table size; not used", path.display())]
    OtherHashing {
        /// The file.
        path: PathBuf,
    },
}

/// The file `cfg` keeps its backend sets in.
pub fn path_of(cfg: &LbConfig) -> PathBuf {
    crate::seed::state_dir_of(cfg).join("backends.json")
}

/// The seed's fingerprint.
fn seed_check(seed: u64) -> u64 {
    fp_hash::hash_bytes(seed, b"flowplane backend sets")
}

/// What to write for `vips` under `cfg`'s hashing.
pub fn saved(cfg: &LbConfig, vips: BTreeMap<String, VipSets>) -> Saved {
    Saved {
        version: VERSION,
        seed_check: seed_check(cfg.balancer.seed),
        maglev_size: cfg.balancer.maglev_size,
        vips,
    }
}

/// Write `s` to `path`.
pub fn write(path: &Path, s: &Saved) -> Result<(), SetsError> {
    let text = serde_json::to_string_pretty(s).expect("plain data serializes");
    crate::seed::write_private(path, text.as_bytes()).map_err(|source| SetsError::Io {
        path: path.to_path_buf(),
        what: "writing it",
        source,
    })
}

/// The sets kept in `path` for `cfg`'s hashing; `Ok(None)` when there is no file.
pub fn read(path: &Path, cfg: &LbConfig) -> Result<Option<BTreeMap<String, VipSets>>, SetsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SetsError::Io {
                path: path.to_path_buf(),
                what: "reading it",
                source,
            })
        }
    };
    let s: Saved = serde_json::from_str(&text).map_err(|e| SetsError::Malformed {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    if s.version != VERSION {
        return Err(SetsError::Malformed {
            path: path.to_path_buf(),
            why: format!("version {}", s.version),
        });
    }
    if s.seed_check != seed_check(cfg.balancer.seed) || s.maglev_size != cfg.balancer.maglev_size {
        return Err(SetsError::OtherHashing {
            path: path.to_path_buf(),
        });
    }
    Ok(Some(s.vips))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Selected;

    fn cfg(seed: u64) -> LbConfig {
        let text = format!(
            r#"
[balancer]
address = "10.0.0.1"
seed = {seed}
[[pool]]
name = "p"
backends = [{{ address = "10.0.1.1" }}]
[[vip]]
name = "web"
address = "10.100.0.1"
port = 80
protocol = "tcp"
pools = ["p"]
"#
        );
        LbConfig::from_toml(&text).unwrap()
    }

    #[test]
    fn sets_round_trip_and_other_hashing_is_refused() {
        let dir = std::env::temp_dir().join(format!("fp-sets-{}", std::process::id()));
        let path = dir.join("backends.json");
        let c = cfg(7);
        assert!(read(&path, &c).unwrap().is_none());
        let mut vips = BTreeMap::new();
        let sel = vec![Selected {
            address: "10.0.1.1".parse().unwrap(),
            name: "a".into(),
            weight: 2,
        }];
        vips.insert(
            "web".to_string(),
            VipSets {
                current: sel.clone(),
                earlier: vec![(sel, 1234)],
            },
        );
        write(&path, &saved(&c, vips.clone())).unwrap();
        assert_eq!(read(&path, &c).unwrap(), Some(vips));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("\"7\"") && !text.contains(": 7,"),
            "no seed in {text}"
        );
        assert!(matches!(
            read(&path, &cfg(8)),
            Err(SetsError::OtherHashing { .. })
        ));
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(read(&path, &c), Err(SetsError::Malformed { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
