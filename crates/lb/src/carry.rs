//! Connection entries carried across a restart: what a stopping balancer's workers tracked,
//! written to the state directory after they stopped and read by the next start, so a restart,
//! an upgrade of the binary or a restart with a changed configuration loses no connection entry.
//!
//! Entries are carried by **backend identity** (the backend's address), not by the backend id or
//! table slot of the process that wrote them: the next start maps each entry onto its own backend
//! ids, so a changed configuration (backends added, removed, reordered, reweighted) still finds
//! them. An entry whose backend is not in the new configuration is dropped and counted; so is one
//! that idled out while no balancer ran, and one a full table cannot take. Entries of flows that
//! were picked up mid-way under second chance are not carried: the next start picks them up again
//! with the backend sets it restores (`crate::sets`), which name the same backends.
//!
//! Which worker a flow reaches depends on the kernel's fan-out hash or the NIC's receive hashing,
//! neither of which the balancer can compute, so every worker gets every carried entry (a copy
//! that its worker never sees idles out like any entry).
//!
//! The file is `connections` in `balancer.state_dir` (else the service's state directory), mode
//! 0600, written through a temporary file and renamed; the next start reads it and removes it (a
//! start after a crash, which wrote nothing, starts cold and says so). Layout, little-endian:
//!
//! ```text
//! magic "FPCONN" 0x00 0x01 (8 bytes; another layout is refused: cold start)
//! u64  wall-clock ms when the workers stopped (the forwarding gap is measured from it)
//! u32  IPv4 entries, u32 IPv6 entries
//! IPv4 entries: key 13 bytes | backend 16 bytes (IPv4 as ::ffff:a.b.c.d) | flags 1 | idle ms u32
//! IPv6 entries: key 37 bytes | backend 16 bytes | flags 1 | idle ms u32
//! flags: bit 0 embryonic (made by a SYN, not yet confirmed)
//! ```

use crate::config::LbConfig;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"FPCONN\x00\x01";
const EMBRYONIC: u8 = 1;

/// One carried entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedEntry {
    /// The backend the connection is on.
    pub backend: IpAddr,
    /// Made by a SYN and not yet confirmed by a later packet of its flow.
    pub embryonic: bool,
    /// Time since the flow's last packet, in ms, when the workers stopped.
    pub idle_ms: u32,
}

/// Every carried entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// IPv4 connection keys and their entries.
    pub v4: Vec<([u8; 13], CarriedEntry)>,
    /// IPv6 connection keys and their entries.
    pub v6: Vec<([u8; 37], CarriedEntry)>,
    /// Wall-clock ms (since the Unix epoch) when the writer's workers stopped.
    pub stopped_ms: u64,
}

impl Carried {
    /// Entries in all.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep one entry per key (workers hold copies of carried entries): the most recently seen.
    pub fn dedup(&mut self) {
        fn one<const N: usize>(v: &mut Vec<([u8; N], CarriedEntry)>) {
            // Keys compare as big-endian integers of their first 16 bytes (all of an IPv4 key's
            // 13), the rest bytewise: two word compares instead of a byte loop per comparison.
            fn head<const N: usize>(k: &[u8; N]) -> u128 {
                let mut b = [0u8; 16];
                let n = N.min(16);
                b[..n].copy_from_slice(&k[..n]);
                u128::from_be_bytes(b)
            }
            v.sort_unstable_by(|a, b| {
                head(&a.0)
                    .cmp(&head(&b.0))
                    .then_with(|| a.0[N.min(16)..].cmp(&b.0[N.min(16)..]))
                    .then(a.1.idle_ms.cmp(&b.1.idle_ms))
            });
            v.dedup_by(|a, b| a.0 == b.0);
        }
        one(&mut self.v4);
        one(&mut self.v6);
    }
}

/// How a start went: warm (entries carried from a predecessor) or cold, and what became of the
/// entries. What the metrics and the status page show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Takeover {
    /// Entries were read from a predecessor.
    pub warm: bool,
    /// The predecessor was running and handed over while it forwarded (the overlapped
    /// handover), rather than leaving a file when it stopped.
    pub handover: bool,
    /// Entries of the handover's delta: seen between the checkpoint and the cut-over.
    pub delta: u64,
    /// Why the start is cold (no file, another layout, unreadable), for the status page.
    pub cold_reason: Option<String>,
    /// Entries read from the file.
    pub read: u64,
    /// Entries every worker took.
    pub carried: u64,
    /// Entries dropped: their backend is not in the configuration.
    pub removed_backend: u64,
    /// Entries dropped: idle longer than the idle timeout by the time they were read.
    pub expired: u64,
    /// Entries a worker's full table could not take (summed over workers).
    pub full: u64,
    /// From the predecessor's workers stopping to this process's workers running, in ms.
    pub gap_ms: Option<u64>,
    /// The slowest worker's time filling its tables with the entries, in ms.
    pub load_ms: u64,
}

impl Takeover {
    /// What became of the entries read, for the log and the status page: `backend removed X,
    /// idled out Y, table full Z`.
    pub fn dropped(&self) -> String {
        format!(
            "backend removed {}, idled out {}, table full {}",
            self.removed_backend, self.expired, self.full
        )
    }
}

/// Why a carried-entries file is not used.
#[derive(Debug, thiserror::Error)]
pub enum CarryError {
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
    /// Not this layout (another version of flowplane wrote it, or it is damaged).
    #[error("{}: not a connection-entry file of this version ({why})", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
}

/// The file `cfg` carries its connection entries in.
pub fn path_of(cfg: &LbConfig) -> PathBuf {
    crate::seed::state_dir_of(cfg).join("connections")
}

pub use fp_control::state::wall_ms;

fn addr_bytes(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

fn addr_of(b: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(b);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Write the file's bytes to `out`.
pub fn encode_to(c: &Carried, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut head = [0u8; 24];
    head[..8].copy_from_slice(&MAGIC);
    head[8..16].copy_from_slice(&c.stopped_ms.to_le_bytes());
    head[16..20].copy_from_slice(&(c.v4.len() as u32).to_le_bytes());
    head[20..24].copy_from_slice(&(c.v6.len() as u32).to_le_bytes());
    out.write_all(&head)?;
    fn put<const N: usize, const R: usize>(
        out: &mut dyn std::io::Write,
        key: &[u8; N],
        e: &CarriedEntry,
    ) -> std::io::Result<()> {
        let mut r = [0u8; R];
        r[..N].copy_from_slice(key);
        r[N..N + 16].copy_from_slice(&addr_bytes(e.backend));
        r[N + 16] = if e.embryonic { EMBRYONIC } else { 0 };
        r[N + 17..N + 21].copy_from_slice(&e.idle_ms.to_le_bytes());
        out.write_all(&r)
    }
    for (k, e) in &c.v4 {
        put::<13, 34>(out, k, e)?;
    }
    for (k, e) in &c.v6 {
        put::<37, 58>(out, k, e)?;
    }
    Ok(())
}

/// The file's bytes.
pub fn encode(c: &Carried) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + c.v4.len() * 34 + c.v6.len() * 58);
    encode_to(c, &mut out).expect("writing to memory");
    out
}

/// Parse the file's bytes; `Err` names what is wrong.
pub fn decode(b: &[u8]) -> Result<Carried, &'static str> {
    if b.len() < 24 || b[..8] != MAGIC {
        return Err("no flowplane connection-entry header of this layout");
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let stopped_ms = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    let (n4, n6) = (u32_at(16) as usize, u32_at(20) as usize);
    if b.len() != 24 + n4 * 34 + n6 * 58 {
        return Err("its length does not match its entry counts");
    }
    fn entry(r: &[u8], key: usize) -> CarriedEntry {
        let a: [u8; 16] = r[key..key + 16].try_into().expect("16 bytes");
        let idle = &r[key + 17..key + 21];
        CarriedEntry {
            backend: addr_of(a),
            embryonic: r[key + 16] & EMBRYONIC != 0,
            idle_ms: u32::from_le_bytes(idle.try_into().expect("4 bytes")),
        }
    }
    let mut c = Carried {
        v4: Vec::with_capacity(n4),
        v6: Vec::with_capacity(n6),
        stopped_ms,
    };
    let (v4, v6) = b[24..].split_at(n4 * 34);
    for r in v4.chunks_exact(34) {
        c.v4.push((r[..13].try_into().expect("13 bytes"), entry(r, 13)));
    }
    for r in v6.chunks_exact(58) {
        c.v6.push((r[..37].try_into().expect("37 bytes"), entry(r, 37)));
    }
    Ok(c)
}

/// Write `c` to `path` (mode 0600, atomically).
pub fn write(path: &Path, c: &Carried) -> Result<(), CarryError> {
    crate::seed::write_private_with(path, |w| encode_to(c, w)).map_err(|source| CarryError::Io {
        path: path.to_path_buf(),
        what: "writing it",
        source,
    })
}

/// Read and remove the entries a predecessor left in `path`; `Ok(None)` when there is no file.
/// A file that is not of this layout is removed too (it would be refused at every start).
pub fn take(path: &Path) -> Result<Option<Carried>, CarryError> {
    let bytes = match fp_control::state::take(path) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(CarryError::Io {
                path: path.to_path_buf(),
                what: "reading it",
                source,
            })
        }
    };
    decode(&bytes).map(Some).map_err(|why| CarryError::Format {
        path: path.to_path_buf(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Carried {
        let e = |a: &str, embryonic, idle_ms| CarriedEntry {
            backend: a.parse().unwrap(),
            embryonic,
            idle_ms,
        };
        Carried {
            v4: vec![
                ([1; 13], e("10.0.0.1", false, 5)),
                ([2; 13], e("fd00::1", true, 0)),
            ],
            v6: vec![([3; 37], e("10.0.0.2", false, 70_000))],
            stopped_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let c = sample();
        let b = encode(&c);
        assert_eq!(b.len(), 24 + 2 * 34 + 58);
        assert_eq!(decode(&b).unwrap(), c);
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut other = b.clone();
        other[7] = 2;
        assert!(decode(&other).is_err(), "another layout version");
        assert!(decode(b"").is_err());
    }

    #[test]
    fn take_reads_once() {
        let dir = std::env::temp_dir().join(format!("fp-carry-{}", std::process::id()));
        let path = dir.join("connections");
        assert!(take(&path).unwrap().is_none());
        write(&path, &sample()).unwrap();
        assert_eq!(take(&path).unwrap(), Some(sample()));
        assert!(take(&path).unwrap().is_none(), "removed once read");
        std::fs::write(&path, b"junk").unwrap();
        assert!(matches!(take(&path), Err(CarryError::Format { .. })));
        assert!(!path.exists(), "a file of another layout is removed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dedup_keeps_the_most_recently_seen_copy() {
        let mut c = sample();
        let mut older = c.v4[0];
        older.1.idle_ms = 900;
        c.v4.push(older);
        c.dedup();
        assert_eq!(c.v4.len(), 2);
        assert_eq!(c.v4[0].1.idle_ms, 5);
    }
}
