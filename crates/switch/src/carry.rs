//! Learned FIB entries carried across a restart: when the switch stops, the FIB writer's learned
//! entries (not the static or preloaded ones, which the next start loads itself) are written to
//! the state directory; the next start reads them (and removes the file) and puts them back
//! before forwarding, so a restart or an upgrade does not flood every known destination again
//! until it is relearned. Entries are carried by **port name** (the interface), so a start with
//! the ports listed in another order, or with ports added or removed, maps them onto its own
//! port numbers; entries of ports it no longer has, and entries that aged out meanwhile (the
//! downtime counts), are dropped and counted. The balancer carries its connection entries the
//! same way (`fp_lb::carry`).
//!
//! The file is `switch-fib` in `--state-dir` (else the service's state directory), mode 0600,
//! written through a temporary file renamed into place. Layout, little-endian:
//!
//! ```text
//! magic "FPFIB" 0x00 0x00 0x01 (8 bytes; another layout is refused: cold start)
//! u64  wall-clock ms when the switch stopped (the downtime is measured from it)
//! u16  ports, then per port: u8 name length, the name's bytes
//! u32  entries, then per entry: MAC 6 bytes | port u16 (index into the names) | idle ms u32
//! ```

use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"FPFIB\x00\x00\x01";

/// Learned entries of a stopped switch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// The stopped switch's ports, by its port number.
    pub ports: Vec<String>,
    /// (MAC, port number of `ports`, ms since the MAC was last seen when the switch stopped).
    pub entries: Vec<(MacAddr, u16, u32)>,
    /// Wall-clock ms (since the Unix epoch) when the switch stopped.
    pub stopped_ms: u64,
}

/// How a start went: warm (learned entries restored) or cold, and what became of the entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Why the start is cold (no file, another layout, unreadable); `None` when warm.
    pub cold_reason: Option<String>,
    /// Entries read.
    pub read: u64,
    /// Entries back in the FIB.
    pub restored: u64,
    /// Dropped: their port is not one of this start's ports.
    pub port_gone: u64,
    /// Dropped: not seen for the aging time by the time they were read.
    pub aged: u64,
    /// Dropped: the FIB had no room.
    pub full: u64,
}

impl Learned {
    /// The entries mapped onto `ports` (this start's), each `(MAC, port, idle ns)` with the time
    /// the switch was down, `gap_ms`, added; and how many name a port `ports` lacks.
    pub fn onto(&self, ports: &[String], gap_ms: u64) -> (Vec<(MacAddr, u16, u64)>, u64) {
        let index: HashMap<&str, u16> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_str(), i as u16))
            .collect();
        let mut gone = 0;
        let mut out = Vec::with_capacity(self.entries.len());
        for &(mac, port, idle_ms) in &self.entries {
            let to = self
                .ports
                .get(port as usize)
                .and_then(|name| index.get(name.as_str()));
            match to {
                Some(&p) => out.push((mac, p, (idle_ms as u64 + gap_ms) * 1_000_000)),
                None => gone += 1,
            }
        }
        (out, gone)
    }
}

/// The file the switch keeps its learned entries in, in the state directory `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join("switch-fib")
}

pub use fp_control::state::wall_ms;

/// The file's bytes.
pub fn encode(l: &Learned) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + l.entries.len() * 12);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&l.stopped_ms.to_le_bytes());
    out.extend_from_slice(&(l.ports.len() as u16).to_le_bytes());
    for p in &l.ports {
        let name = &p.as_bytes()[..p.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    out.extend_from_slice(&(l.entries.len() as u32).to_le_bytes());
    for &(mac, port, idle) in &l.entries {
        out.extend_from_slice(&mac.octets());
        out.extend_from_slice(&port.to_le_bytes());
        out.extend_from_slice(&idle.to_le_bytes());
    }
    out
}

/// Parse the file's bytes; `Err` says what is wrong.
pub fn decode(b: &[u8]) -> Result<Learned, &'static str> {
    const BAD: &str = "truncated or damaged";
    if b.len() < 18 || b[..8] != MAGIC {
        return Err("no flowplane learned-FIB header of this layout");
    }
    let mut at = 8;
    let mut take = |n: usize| -> Result<&[u8], &'static str> {
        let s = b.get(at..at + n).ok_or(BAD)?;
        at += n;
        Ok(s)
    };
    let stopped_ms = u64::from_le_bytes(take(8)?.try_into().map_err(|_| BAD)?);
    let nports = u16::from_le_bytes(take(2)?.try_into().map_err(|_| BAD)?);
    let mut ports = Vec::with_capacity(nports as usize);
    for _ in 0..nports {
        let len = take(1)?[0] as usize;
        let name = std::str::from_utf8(take(len)?).map_err(|_| BAD)?;
        ports.push(name.to_string());
    }
    let n = u32::from_le_bytes(take(4)?.try_into().map_err(|_| BAD)?) as usize;
    let rest = take(n.checked_mul(12).ok_or(BAD)?)?;
    let entries = rest
        .chunks_exact(12)
        .map(|r| {
            let mac = MacAddr(r[..6].try_into().expect("6 bytes"));
            let port = u16::from_le_bytes([r[6], r[7]]);
            let idle = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes"));
            (mac, port, idle)
        })
        .collect();
    if at != b.len() {
        return Err(BAD);
    }
    Ok(Learned {
        ports,
        entries,
        stopped_ms,
    })
}

/// Write `l` to `path` (mode 0600, atomically).
pub fn write(path: &Path, l: &Learned) -> std::io::Result<()> {
    let bytes = encode(l);
    fp_control::state::write_private_with(path, |w| w.write_all(&bytes))
}

/// Read and remove what a predecessor left in `path`; `Ok(None)` when there is no file. A file
/// of another layout is removed too, and refused.
pub fn take(path: &Path) -> Result<Option<Learned>, String> {
    match fp_control::state::take(path) {
        Ok(None) => Ok(None),
        Ok(Some(b)) => decode(&b).map(Some).map_err(|why| {
            format!(
                "{}: not a learned-FIB file of this version ({why})",
                path.display()
            )
        }),
        Err(e) => Err(format!("{}: reading it: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Learned {
        Learned {
            ports: vec!["p0".into(), "p1".into(), "eth2".into()],
            entries: vec![
                (MacAddr([2, 0, 0, 0, 0, 1]), 0, 5),
                (MacAddr([2, 0, 0, 0, 0, 2]), 2, 70_000),
            ],
            stopped_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let l = sample();
        let b = encode(&l);
        assert_eq!(decode(&b).unwrap(), l);
        for cut in [0, 7, 17, b.len() - 1] {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut other = b;
        other[7] = 2;
        assert!(decode(&other).is_err(), "another layout version");
    }

    #[test]
    fn entries_follow_their_port_by_name() {
        let l = sample();
        // Ports reordered, p1 gone, eth2 kept.
        let now = vec!["eth2".to_string(), "p0".to_string()];
        let (out, gone) = l.onto(&now, 100);
        assert_eq!(gone, 0);
        assert_eq!(out[0], (MacAddr([2, 0, 0, 0, 0, 1]), 1, 105_000_000));
        assert_eq!(out[1], (MacAddr([2, 0, 0, 0, 0, 2]), 0, 70_100_000_000));
        let (out, gone) = l.onto(&["p1".to_string(), "p9".to_string()], 0);
        assert_eq!((out.len(), gone), (0, 2));
    }
}
