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
//! magic "FPFIB" 0x00 0x00 0x02 (8 bytes; version 1, without VLANs, is read as VLAN 0; another
//!      layout is refused: cold start)
//! u64  wall-clock ms when the switch stopped (the downtime is measured from it)
//! u16  ports, then per port: u8 name length, the name's bytes
//! u32  entries, then per entry: MAC 6 bytes | VLAN u16 (0: VLAN-unaware) | port u16 (index into
//!      the names) | idle ms u32
//! ```
//!
//! Entries keep their VLAN: a start whose VLAN settings no longer put the port in that VLAN
//! drops them (counted with the ports gone).

use fp_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"FPFIB\x00\x00\x02";
/// The layout before VLANs: entries without one.
const MAGIC_V1: [u8; 8] = *b"FPFIB\x00\x00\x01";

/// Learned entries of a stopped switch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// The stopped switch's ports, by its port number.
    pub ports: Vec<String>,
    /// (MAC, VLAN, port number of `ports`, ms since the MAC was last seen when the switch
    /// stopped).
    pub entries: Vec<(MacAddr, u16, u16, u32)>,
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
    /// Dropped: their port is not one of this start's ports, or not in their VLAN.
    pub port_gone: u64,
    /// Dropped: not seen for the aging time by the time they were read.
    pub aged: u64,
    /// Dropped: the FIB had no room.
    pub full: u64,
}

impl Learned {
    /// The entries mapped onto `ports` (this start's), each `(MAC, VLAN, port, idle ns)` with
    /// the time the switch was down, `gap_ms`, added; and how many name a port `ports` lacks.
    pub fn onto(&self, ports: &[String], gap_ms: u64) -> (Vec<(MacAddr, u16, u16, u64)>, u64) {
        let index: HashMap<&str, u16> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_str(), i as u16))
            .collect();
        let mut gone = 0;
        let mut out = Vec::with_capacity(self.entries.len());
        for &(mac, vlan, port, idle_ms) in &self.entries {
            let to = self
                .ports
                .get(port as usize)
                .and_then(|name| index.get(name.as_str()));
            match to {
                Some(&p) => out.push((mac, vlan, p, (idle_ms as u64 + gap_ms) * 1_000_000)),
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
    let mut out = Vec::with_capacity(32 + l.entries.len() * 14);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&l.stopped_ms.to_le_bytes());
    out.extend_from_slice(&(l.ports.len() as u16).to_le_bytes());
    for p in &l.ports {
        let name = &p.as_bytes()[..p.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    out.extend_from_slice(&(l.entries.len() as u32).to_le_bytes());
    for &(mac, vlan, port, idle) in &l.entries {
        out.extend_from_slice(&mac.octets());
        out.extend_from_slice(&vlan.to_le_bytes());
        out.extend_from_slice(&port.to_le_bytes());
        out.extend_from_slice(&idle.to_le_bytes());
    }
    out
}

/// Parse the file's bytes; `Err` says what is wrong.
pub fn decode(b: &[u8]) -> Result<Learned, &'static str> {
    const BAD: &str = "truncated or damaged";
    if b.len() < 18 || (b[..8] != MAGIC && b[..8] != MAGIC_V1) {
        return Err("no flowplane learned-FIB header of this layout");
    }
    // Version 1 entries have no VLAN.
    let width = if b[..8] == MAGIC_V1 { 12 } else { 14 };
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
    let rest = take(n.checked_mul(width).ok_or(BAD)?)?;
    let entries = rest
        .chunks_exact(width)
        .map(|r| {
            let mac = MacAddr(r[..6].try_into().expect("6 bytes"));
            let (vlan, r) = match width {
                12 => (0, &r[6..]),
                _ => (u16::from_le_bytes([r[6], r[7]]), &r[8..]),
            };
            let port = u16::from_le_bytes([r[0], r[1]]);
            let idle = u32::from_le_bytes(r[2..6].try_into().expect("4 bytes"));
            (mac, vlan, port, idle)
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
                (MacAddr([2, 0, 0, 0, 0, 1]), 0, 0, 5),
                (MacAddr([2, 0, 0, 0, 0, 2]), 20, 2, 70_000),
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
        other[7] = 3;
        assert!(decode(&other).is_err(), "another layout version");
    }

    #[test]
    fn the_layout_before_vlans_is_read_as_vlan_0() {
        let mut b = MAGIC_V1.to_vec();
        b.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&[2, b'p', b'0']);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&[2, 0, 0, 0, 0, 9]);
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&250u32.to_le_bytes());
        let l = decode(&b).unwrap();
        assert_eq!(l.entries, vec![(MacAddr([2, 0, 0, 0, 0, 9]), 0, 0, 250)]);
        assert_eq!(l.ports, vec!["p0".to_string()]);
    }

    #[test]
    fn entries_follow_their_port_by_name() {
        let l = sample();
        // Ports reordered, p1 gone, eth2 kept.
        let now = vec!["eth2".to_string(), "p0".to_string()];
        let (out, gone) = l.onto(&now, 100);
        assert_eq!(gone, 0);
        assert_eq!(out[0], (MacAddr([2, 0, 0, 0, 0, 1]), 0, 1, 105_000_000));
        assert_eq!(out[1], (MacAddr([2, 0, 0, 0, 0, 2]), 20, 0, 70_100_000_000));
        let (out, gone) = l.onto(&["p1".to_string(), "p9".to_string()], 0);
        assert_eq!((out.len(), gone), (0, 2));
    }
}
