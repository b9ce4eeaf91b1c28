//! The switch's settings, checked before anything is opened: ports, aging, static entries and
//! the FIB preload files (text, or a binary format for the paper's very large tables). Every
//! error names the option or the file line that is wrong.

use fp_wire::ethernet::MacAddr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the switch's settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An option's value is wrong.
    #[error("{option}: {message}")]
    Invalid {
        /// The option (`--ports`, `--static "…"`).
        option: String,
        /// What is wrong.
        message: String,
    },
    /// A FIB file is wrong (`file`, and the entry or line where it matters).
    #[error("{}: {message}", file.display())]
    FibFile {
        /// The file.
        file: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// A FIB file could not be read.
    #[error("{}: {source}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn invalid(option: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option: option.into(),
        message: message.into(),
    }
}

/// A FIB file's content that does not parse: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FibFormatError(pub String);

/// The switch's checked settings.
#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// The ports' interfaces; port index = position.
    pub ports: Vec<String>,
    /// Learned entries not refreshed for this long are removed.
    pub aging: Duration,
    /// Static entries.
    pub statics: Vec<(MacAddr, u16)>,
    /// Entries preloaded from a FIB file.
    pub preload: Vec<(MacAddr, u16)>,
    /// FIB capacity asked (at least the preload and the statics).
    pub fib_capacity: usize,
    /// Capacity of the learn-event queue.
    pub learn_queue: usize,
    /// Entries of each worker's FIB cache (0: none).
    pub fib_cache: usize,
    /// Whether workers look for tracer probes.
    pub trace: bool,
    /// Most frames a worker gathers, while more are waiting, for one FIB lookup (1: each
    /// receive burst alone).
    pub gather: usize,
    /// Where the learned entries are kept across a restart (`--state-dir`, else the service's
    /// state directory).
    pub state_dir: std::path::PathBuf,
}

/// Frames a worker gathers for one lookup by default: eight receive bursts, the lookup call
/// size at which the FIB's reads stay in flight from one chunk of keys into the next.
pub const DEFAULT_GATHER: usize = 256;

impl SwitchConfig {
    /// Check the settings and read the preload file.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ports: Vec<String>,
        aging_secs: f64,
        statics: &[String],
        fib: Option<&Path>,
        fib_capacity: usize,
        learn_queue: usize,
        fib_cache: usize,
        trace: bool,
    ) -> Result<SwitchConfig, ConfigError> {
        let nports = ports.len();
        if nports < 2 {
            return Err(invalid(
                "--ports",
                format!("a switch needs at least 2 ports, got {nports}"),
            ));
        }
        if nports > u16::MAX as usize - 1 {
            return Err(invalid(
                "--ports",
                format!("at most {} ports", u16::MAX - 1),
            ));
        }
        for (i, p) in ports.iter().enumerate() {
            if ports[..i].contains(p) {
                return Err(invalid("--ports", format!("{p:?} is listed twice")));
            }
        }
        if !(aging_secs > 0.0 && aging_secs.is_finite()) {
            return Err(invalid(
                "--aging-secs",
                "must be a positive number of seconds",
            ));
        }
        if learn_queue == 0 {
            return Err(invalid("--learn-queue", "must be at least 1"));
        }
        let statics = statics
            .iter()
            .map(|s| parse_static(s, &ports))
            .collect::<Result<Vec<_>, _>>()?;
        let preload = match fib {
            Some(p) => read_fib(p, nports)?,
            None => Vec::new(),
        };
        let fib_capacity =
            fib_capacity.max(preload.len() + preload.len() / 16 + statics.len() + 1024);
        Ok(SwitchConfig {
            ports,
            aging: Duration::from_secs_f64(aging_secs),
            statics,
            preload,
            fib_capacity,
            learn_queue,
            fib_cache,
            trace,
            gather: DEFAULT_GATHER,
            state_dir: fp_control::state::state_directory(),
        })
    }

    /// Set how many frames a worker gathers for one lookup (`--gather`): 1 to
    /// [`crate::stage::MAX_GATHER`].
    pub fn set_gather(&mut self, frames: usize) -> Result<(), ConfigError> {
        if !(1..=crate::stage::MAX_GATHER).contains(&frames) {
            return Err(invalid(
                "--gather",
                format!(
                    "must be between 1 and {} frames, got {frames}",
                    crate::stage::MAX_GATHER
                ),
            ));
        }
        self.gather = frames;
        Ok(())
    }

    /// The aging time in nanoseconds.
    pub fn aging_ns(&self) -> u64 {
        self.aging.as_nanos().min(u64::MAX as u128) as u64
    }
}

/// `MAC=PORT` with PORT an index or one of `ports`.
pub fn parse_static(s: &str, ports: &[String]) -> Result<(MacAddr, u16), ConfigError> {
    let opt = || format!("--static {s:?}");
    let (m, p) = s
        .split_once('=')
        .ok_or_else(|| invalid(opt(), "expected MAC=PORT"))?;
    let mac: MacAddr = m
        .trim()
        .parse()
        .map_err(|_| invalid(opt(), format!("{m:?} is not a MAC address")))?;
    if mac.is_multicast() {
        return Err(invalid(
            opt(),
            format!("{m} is a group (multicast) address; those are always flooded"),
        ));
    }
    let p = p.trim();
    let port = match ports.iter().position(|x| x == p) {
        Some(i) => i,
        None => p.parse::<usize>().map_err(|_| {
            invalid(
                opt(),
                format!("{p:?} is neither a port index nor one of the ports"),
            )
        })?,
    };
    if port >= ports.len() {
        return Err(invalid(
            opt(),
            format!(
                "port {port} does not exist (the switch has {} ports)",
                ports.len()
            ),
        ));
    }
    Ok((mac, port as u16))
}

/// The entries of a FIB file, checked against the port count: text (`aa:bb:cc:dd:ee:ff PORT` per
/// line) or, for names ending in `.bin`, the binary format ([`parse_fib_binary`]).
pub fn read_fib(path: &Path, nports: usize) -> Result<Vec<(MacAddr, u16)>, ConfigError> {
    let file = || path.to_path_buf();
    let io = |source| ConfigError::Io {
        file: file(),
        source,
    };
    let bad = |message: String| ConfigError::FibFile {
        file: file(),
        message,
    };
    let mut out = Vec::new();
    if path.extension().is_some_and(|e| e == "bin") {
        let mut f = std::fs::File::open(path).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        if len % 8 != 0 {
            return Err(bad(format!(
                "{len} bytes is not a whole number of 8-byte records"
            )));
        }
        out.reserve((len / 8) as usize);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let mut filled = 0;
            while filled < buf.len() {
                let n = f.read(&mut buf[filled..]).map_err(io)?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            out.extend(parse_fib_binary(&buf[..filled]).map_err(|e| bad(e.0))?);
            if filled < buf.len() {
                break;
            }
        }
    } else {
        let text = std::fs::read_to_string(path).map_err(io)?;
        out = parse_fib_text(&text).map_err(|e| bad(e.0))?;
    }
    for (i, &(m, p)) in out.iter().enumerate() {
        if p as usize >= nports {
            return Err(bad(format!(
                "entry {} names port {p}, but the switch has {nports} ports",
                i + 1
            )));
        }
        if m.is_multicast() {
            return Err(bad(format!("entry {} is a group address {m}", i + 1)));
        }
    }
    Ok(out)
}

/// Load FIB entries from text: one `aa:bb:cc:dd:ee:ff PORT` per line (`#` comments). Returns the
/// entries, or the line number and what is wrong.
pub fn parse_fib_text(text: &str) -> Result<Vec<(MacAddr, u16)>, FibFormatError> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(m), Some(p), None) = (it.next(), it.next(), it.next()) else {
            return Err(FibFormatError(format!(
                "line {}: expected `MAC PORT`",
                i + 1
            )));
        };
        let mac: MacAddr = m
            .parse()
            .map_err(|_| FibFormatError(format!("line {}: {m:?} is not a MAC address", i + 1)))?;
        let port: u16 = p
            .parse()
            .map_err(|_| FibFormatError(format!("line {}: {p:?} is not a port number", i + 1)))?;
        v.push((mac, port));
    }
    Ok(v)
}

/// The binary FIB file format for very large preloads: a sequence of little-endian u64 records,
/// each `mac << 16 | port`. Returns the entries of `bytes` (its length must be a multiple of 8).
pub fn parse_fib_binary(
    bytes: &[u8],
) -> Result<impl Iterator<Item = (MacAddr, u16)> + '_, FibFormatError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(FibFormatError(format!(
            "binary FIB of {} bytes is not a whole number of 8-byte records",
            bytes.len()
        )));
    }
    Ok(bytes.chunks_exact(8).map(|c| {
        let r = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        (MacAddr::from_u64(r >> 16), r as u16)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statics_parse_by_index_or_name() {
        let ports: Vec<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse_static("02:00:00:00:00:99=2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 2)
        );
        assert_eq!(
            parse_static("02:00:00:00:00:99=p2", &ports).unwrap(),
            (MacAddr::from_u64(0x0200_0000_0099), 1)
        );
        let e = parse_static("02:00:00:00:00:99=3", &ports).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = parse_static("01:00:5e:00:00:01=1", &ports).unwrap_err();
        assert!(e.to_string().contains("group"), "{e}");
        assert!(parse_static("02:00:00:00:00=1", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99", &ports).is_err());
        assert!(parse_static("02:00:00:00:00:99=eth9", &ports).is_err());
    }

    #[test]
    fn mac_text_round_trips() {
        for m in [0u64, 0x0200_0000_000a, 0xffff_ffff_ffff] {
            let m = MacAddr::from_u64(m);
            assert_eq!(m.to_string().parse::<MacAddr>().ok(), Some(m));
        }
        assert_eq!(
            "2:0:0:0:0:a".parse::<MacAddr>().ok(),
            Some(MacAddr::from_u64(0x0200_0000_000a))
        );
        assert!("02:00:00:00:00:100".parse::<MacAddr>().is_err());
    }

    #[test]
    fn settings_are_checked_and_name_the_option() {
        let ports = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = SwitchConfig::new(ports(&["a", "b"]), 300.0, &[], None, 10, 64, 0, true).unwrap();
        assert_eq!(ok.fib_capacity, 1024, "grown to the minimum");
        assert_eq!(ok.gather, DEFAULT_GATHER);
        let mut g = ok.clone();
        for bad in [0, crate::stage::MAX_GATHER + 1] {
            let e = g.set_gather(bad).unwrap_err();
            assert!(e.to_string().starts_with("--gather"), "{e}");
            assert_eq!(g.gather, DEFAULT_GATHER, "a rejected value changes nothing");
        }
        g.set_gather(1).unwrap();
        assert_eq!(g.gather, 1);
        for (p, aging, q, want) in [
            (
                ports(&["a"]),
                300.0,
                64,
                "--ports: a switch needs at least 2 ports",
            ),
            (
                ports(&["a", "a"]),
                300.0,
                64,
                "--ports: \"a\" is listed twice",
            ),
            (ports(&["a", "b"]), 0.0, 64, "--aging-secs"),
            (ports(&["a", "b"]), f64::NAN, 64, "--aging-secs"),
            (ports(&["a", "b"]), 300.0, 0, "--learn-queue"),
        ] {
            let e = SwitchConfig::new(p, aging, &[], None, 10, q, 0, true).unwrap_err();
            assert!(e.to_string().starts_with(want), "{e}");
        }
    }

    #[test]
    fn fib_files_are_checked_against_the_ports() {
        let dir = std::env::temp_dir().join(format!("fp-switch-fib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let txt = dir.join("fib.txt");
        std::fs::write(&txt, "02:00:00:00:00:0a 1\n02:00:00:00:00:0b 0\n").unwrap();
        assert_eq!(
            read_fib(&txt, 2).unwrap(),
            vec![
                (MacAddr::from_u64(0x0200_0000_000a), 1),
                (MacAddr::from_u64(0x0200_0000_000b), 0)
            ]
        );
        let e = read_fib(&txt, 1).unwrap_err();
        assert!(e.to_string().contains("names port 1"), "{e}");
        let bin = dir.join("fib.bin");
        let mut b = Vec::new();
        for i in 0..300_000u64 {
            b.extend_from_slice(&((0x0200_0000_0000 + i) << 16 | (i % 3)).to_le_bytes());
        }
        std::fs::write(&bin, &b).unwrap();
        let v = read_fib(&bin, 3).unwrap();
        assert_eq!(v.len(), 300_000);
        assert_eq!(
            v[299_999],
            (
                MacAddr::from_u64(0x0200_0000_0000 + 299_999),
                (299_999u64 % 3) as u16
            )
        );
        std::fs::write(&bin, &b[..13]).unwrap();
        assert!(read_fib(&bin, 3).is_err());
        let e = read_fib(&dir.join("missing.txt"), 3).unwrap_err();
        assert!(e.to_string().contains("missing.txt"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fib_files() {
        let t = parse_fib_text("# comment\n02:00:00:00:00:0a 3\n\nff:ff:ff:ff:ff:fe 65534 # x\n")
            .unwrap();
        assert_eq!(
            t,
            vec![
                (MacAddr::from_u64(0x0200_0000_000a), 3),
                (MacAddr::from_u64(0xffff_ffff_fffe), 65534)
            ]
        );
        assert!(parse_fib_text("02:00:00:00:00 1")
            .unwrap_err()
            .0
            .contains("line 1"));
        assert!(parse_fib_text("02:00:00:00:00:0a x")
            .unwrap_err()
            .0
            .contains("port"));
        let mut bin = Vec::new();
        bin.extend_from_slice(&(0x0200_0000_000au64 << 16 | 7).to_le_bytes());
        let v: Vec<_> = parse_fib_binary(&bin).unwrap().collect();
        assert_eq!(v, vec![(MacAddr::from_u64(0x0200_0000_000a), 7)]);
        assert!(parse_fib_binary(&bin[..5]).is_err());
    }
}
