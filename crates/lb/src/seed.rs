//! The hash seed's state file: a balancer whose configuration gives no `balancer.seed` keeps its
//! secret seed in a file, drawn once from the operating system's random source and read again at
//! every start, so restarts and upgrades hash every flow as before: Maglev sends each connection
//! to the backend it had (a new seed deals every flow anew, and about `1 - 1/n` of them land on
//! another of `n` backends, which resets them).
//!
//! The file is `balancer.seed_file`, else `seed` in `balancer.state_dir`, else in the service's
//! state directory (`$STATE_DIRECTORY`, which systemd sets for `StateDirectory=flowplane`, else
//! `/var/lib/flowplane`). It holds the seed as 16 hexadecimal digits and a newline, mode 0600,
//! written to a temporary file and renamed, so a crash never leaves half a seed. Balancers that
//! share VIPs must share the seed: give them the same file (`balancer.seed_file`) or the same
//! `balancer.seed`. The value is never printed.

use crate::config::{LbConfig, SeedOrigin};
use std::path::{Path, PathBuf};

/// Why the seed's state file could not be used (the balancer does not start: it would hash with
/// another seed than before).
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The file could not be read or written.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The file does not hold a seed.
    #[error(
        "{}: not a seed (16 hexadecimal digits); remove it to draw a new one, which moves \
         established connections to other backends",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

pub use fp_control::state::{state_directory, write_private, write_private_with};

/// Where `cfg` keeps what outlives a process: `balancer.state_dir`, else the service's state
/// directory.
pub fn state_dir_of(cfg: &LbConfig) -> PathBuf {
    cfg.balancer
        .state_dir
        .clone()
        .unwrap_or_else(state_directory)
}

/// The default state file when the configuration names neither `balancer.seed_file` nor
/// `balancer.state_dir`: `seed` in the service's state directory.
pub fn default_path() -> PathBuf {
    state_directory().join("seed")
}

/// The state file `cfg` keeps its seed in, if it keeps it in one (no `balancer.seed`).
pub fn path_of(cfg: &LbConfig) -> Option<PathBuf> {
    match cfg.balancer.seed_origin {
        SeedOrigin::Configured => None,
        SeedOrigin::StateFile | SeedOrigin::Random => Some(
            cfg.balancer
                .seed_file
                .clone()
                .unwrap_or_else(|| state_dir_of(cfg).join("seed")),
        ),
    }
}

/// Whether the seed was read from `path` or drawn and stored there now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// Read from the file.
    Read,
    /// Drawn now and stored in the file.
    Created,
}

impl std::fmt::Display for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Loaded::Read => "read from",
            Loaded::Created => "drawn and kept in",
        })
    }
}

/// The seed kept in `path`, if the file exists.
pub fn read(path: &Path) -> Result<Option<u64>, SeedError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let t = text.trim();
            let malformed = || SeedError::Malformed {
                path: path.to_path_buf(),
            };
            if t.len() != 16 {
                return Err(malformed());
            }
            Ok(Some(u64::from_str_radix(t, 16).map_err(|_| malformed())?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SeedError::Io {
            path: path.to_path_buf(),
            what: "reading it",
            source,
        }),
    }
}

/// Read the seed kept in `path`, or draw one and keep it there (creating the directory).
pub fn load_or_create(path: &Path) -> Result<(u64, Loaded), SeedError> {
    let io = |what| {
        move |source| SeedError::Io {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    match read(path)? {
        Some(seed) => Ok((seed, Loaded::Read)),
        None => {
            let seed = fp_control::seed::random_seed();
            write_private(path, format!("{seed:016x}\n").as_bytes()).map_err(io("writing it"))?;
            Ok((seed, Loaded::Created))
        }
    }
}

/// Give `cfg` the seed of its state file when it has no `balancer.seed` (the live balancer, before
/// it starts). Returns the file and whether it was read or created; `None` for a configured seed.
pub fn resolve(cfg: &mut LbConfig) -> Result<Option<(PathBuf, Loaded)>, SeedError> {
    let Some(path) = path_of(cfg) else {
        return Ok(None);
    };
    let (seed, how) = load_or_create(&path)?;
    cfg.balancer.seed = seed;
    cfg.balancer.seed_origin = SeedOrigin::StateFile;
    Ok(Some((path, how)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fp-seed-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_seed_is_drawn_once_kept_secret_and_read_again() {
        let d = dir("once");
        let p = d.join("state/seed");
        let (a, how) = load_or_create(&p).unwrap();
        assert_eq!(how, Loaded::Created);
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600, "readable by its owner only");
        let (b, how) = load_or_create(&p).unwrap();
        assert_eq!((b, how), (a, Loaded::Read), "a restart reads the same seed");
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, format!("{a:016x}\n"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_file_stops_the_start_naming_it() {
        let d = dir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("seed");
        for bad in ["", "12345", "zzzzzzzzzzzzzzzz", "0123456789abcdef0"] {
            std::fs::write(&p, bad).unwrap();
            let e = load_or_create(&p).unwrap_err().to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(e.contains("not a seed"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn resolve_follows_the_configuration() {
        let d = dir("resolve");
        let base = r#"
            [balancer]
            address = "10.0.0.2"
            SEED
            [[vip]]
            name = "web"
            address = "203.0.113.10"
            port = 80
            protocol = "tcp"
            pools = ["p"]
            [[pool]]
            name = "p"
            backends = [{ address = "10.0.1.1" }]
        "#;
        let file = d.join("s");
        let text = base.replace(
            "SEED",
            &format!("seed_file = {:?}", file.display().to_string()),
        );
        let mut a = LbConfig::from_toml(&text).unwrap();
        let (p, how) = resolve(&mut a).unwrap().unwrap();
        assert_eq!((p.as_path(), how), (file.as_path(), Loaded::Created));
        assert_eq!(a.balancer.seed_origin, SeedOrigin::StateFile);
        let mut b = LbConfig::from_toml(&text).unwrap();
        resolve(&mut b).unwrap();
        assert_eq!(a.balancer.seed, b.balancer.seed, "two starts, one seed");
        let mut c = LbConfig::from_toml(&base.replace("SEED", "seed = 7")).unwrap();
        assert!(resolve(&mut c).unwrap().is_none());
        assert_eq!(c.balancer.seed, 7);
        let _ = std::fs::remove_dir_all(&d);
    }
}
