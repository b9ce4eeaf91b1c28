//! pcap files as ports: [`PcapReader`] delivers a capture's frames (with their timestamps),
//! [`PcapWriter`] records transmitted frames.
//!
//! The classic libpcap format: microsecond or nanosecond timestamps, either byte order, link types
//! Ethernet (1) and raw IP (101, 228, 229; such packets get a synthetic Ethernet header so the
//! pipeline always sees Ethernet). The writer produces nanosecond-resolution Ethernet captures that
//! tshark, tcpdump and scapy read. pcapng is refused with a clear error (convert it with
//! `editcap -F pcap in.pcapng out.pcap`).

use crate::port::{Port, PortStats};
use fp_pipeline::packet::{Packet, Pool, MAX_FRAME};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const PCAPNG: u32 = 0x0a0d_0d0a;
const LINK_ETHERNET: u32 = 1;
const LINK_RAW: [u32; 3] = [101, 228, 229];

/// Errors reading or writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// I/O error, with the file.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// Not a pcap file.
    #[error("{path}: {what}")]
    Format {
        /// File.
        path: String,
        /// What is wrong.
        what: String,
    },
}

/// Reads a capture and delivers its frames.
pub struct PcapReader {
    name: String,
    input: BufReader<Box<dyn Read + Send>>,
    swapped: bool,
    nanos: bool,
    raw_ip: bool,
    done: bool,
    stats: PortStats,
    buf: Vec<u8>,
    /// Records that could not be read (truncated at the end of the file).
    pub truncated: u64,
}

impl PcapReader {
    /// Open a capture file.
    pub fn open(path: &Path) -> Result<PcapReader, PcapError> {
        let p = path.display().to_string();
        let f = File::open(path).map_err(|e| PcapError::Io {
            path: p.clone(),
            source: e,
        })?;
        PcapReader::from_reader(p, Box::new(f))
    }

    /// Read a capture from any byte stream.
    pub fn from_reader(name: String, r: Box<dyn Read + Send>) -> Result<PcapReader, PcapError> {
        let mut input = BufReader::with_capacity(1 << 16, r);
        let mut h = [0u8; 24];
        input.read_exact(&mut h).map_err(|e| PcapError::Format {
            path: name.clone(),
            what: format!("no pcap header ({e})"),
        })?;
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            MAGIC_US => (false, false),
            MAGIC_NS => (false, true),
            m if m.swap_bytes() == MAGIC_US => (true, false),
            m if m.swap_bytes() == MAGIC_NS => (true, true),
            PCAPNG => {
                return Err(PcapError::Format {
                    path: name,
                    what: "pcapng is not supported; convert with `editcap -F pcap IN OUT`".into(),
                })
            }
            m => {
                return Err(PcapError::Format {
                    path: name,
                    what: format!("bad magic {m:#010x}"),
                })
            }
        };
        let rd = |b: &[u8]| {
            let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let link = rd(&h[20..24]) & 0x0fff_ffff;
        let raw_ip = match link {
            LINK_ETHERNET => false,
            l if LINK_RAW.contains(&l) => true,
            l => {
                return Err(PcapError::Format {
                    path: name,
                    what: format!("link type {l} is not supported (Ethernet or raw IP only)"),
                })
            }
        };
        Ok(PcapReader {
            name,
            input,
            swapped,
            nanos,
            raw_ip,
            done: false,
            stats: PortStats::default(),
            buf: vec![0u8; 65536 + 14],
            truncated: 0,
        })
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }

    /// The next record: (timestamp ns, frame). `None` at the end of the file.
    pub fn next_frame(&mut self) -> Option<(u64, &[u8])> {
        if self.done {
            return None;
        }
        let mut rh = [0u8; 16];
        match self.input.read_exact(&mut rh) {
            Ok(()) => {}
            Err(_) => {
                self.done = true;
                return None;
            }
        }
        let sec = self.u32(&rh[0..4]) as u64;
        let frac = self.u32(&rh[4..8]) as u64;
        let incl = self.u32(&rh[8..12]) as usize;
        if incl > 65536 {
            self.truncated += 1;
            self.done = true;
            return None;
        }
        let ts = sec * 1_000_000_000 + if self.nanos { frac } else { frac * 1000 };
        let off = if self.raw_ip { 14 } else { 0 };
        if self
            .input
            .read_exact(&mut self.buf[off..off + incl])
            .is_err()
        {
            self.truncated += 1;
            self.done = true;
            return None;
        }
        if self.raw_ip {
            // Synthetic Ethernet header; ethertype from the IP version.
            let et: [u8; 2] = match self.buf[14] >> 4 {
                6 => [0x86, 0xdd],
                _ => [0x08, 0x00],
            };
            self.buf[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
            self.buf[12..14].copy_from_slice(&et);
        }
        Some((ts, &self.buf[..off + incl]))
    }
}

impl Port for PcapReader {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(mut p) = pool.get() else { break };
            let Some((ts, frame)) = self.next_frame() else {
                pool.put(p);
                break;
            };
            if frame.len() > MAX_FRAME || !p.fill(frame) {
                self.stats.rx_dropped += 1;
                pool.put(p);
                continue;
            }
            p.ts_ns = ts;
            out.push(p);
            n += 1;
        }
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        self.stats.tx_dropped += batch.len() as u64;
        pool.put_all(batch);
        0
    }

    fn exhausted(&self) -> bool {
        self.done
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// Writes transmitted frames to a capture.
pub struct PcapWriter {
    name: String,
    out: BufWriter<Box<dyn Write + Send>>,
    stats: PortStats,
    error: Option<io::Error>,
}

impl PcapWriter {
    /// Create (truncate) a capture file.
    pub fn create(path: &Path) -> Result<PcapWriter, PcapError> {
        let p = path.display().to_string();
        let f = File::create(path).map_err(|e| PcapError::Io {
            path: p.clone(),
            source: e,
        })?;
        PcapWriter::to_writer(p, Box::new(f))
    }

    /// Write a capture to any byte sink.
    pub fn to_writer(name: String, w: Box<dyn Write + Send>) -> Result<PcapWriter, PcapError> {
        let mut out = BufWriter::with_capacity(1 << 16, w);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&LINK_ETHERNET.to_le_bytes());
        out.write_all(&h).map_err(|e| PcapError::Io {
            path: name.clone(),
            source: e,
        })?;
        Ok(PcapWriter {
            name,
            out,
            stats: PortStats::default(),
            error: None,
        })
    }

    /// Append one frame.
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let mut rh = [0u8; 16];
        rh[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        rh[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        rh[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        rh[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&rh)?;
        self.out.write_all(frame)
    }

    /// The first write error, if any happened (the port keeps counting drops after it).
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }
}

impl Port for PcapWriter {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, _pool: &mut Pool, _out: &mut Vec<Packet>, _max: usize) -> usize {
        0
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let mut sent = 0;
        for p in batch.drain(..) {
            if self.error.is_none() {
                match self.write_frame(p.ts_ns, p.data()) {
                    Ok(()) => sent += 1,
                    Err(e) => self.error = Some(e),
                }
            }
            if self.error.is_some() {
                self.stats.tx_dropped += 1;
            }
            pool.put(p);
        }
        self.stats.tx += sent as u64;
        sent
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }

    fn exhausted(&self) -> bool {
        true
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A Write that appends into a shared buffer (to read back what was written).
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_then_read_back() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut w = PcapWriter::to_writer("mem".into(), Box::new(Shared(buf.clone()))).unwrap();
        w.write_frame(1_500_000_123, &[1, 2, 3]).unwrap();
        w.write_frame(2_000_000_000, &[4; 60]).unwrap();
        w.flush().unwrap();
        let bytes = buf.lock().unwrap().clone();
        let mut r =
            PcapReader::from_reader("mem".into(), Box::new(io::Cursor::new(bytes))).unwrap();
        assert_eq!(
            r.next_frame().map(|(t, f)| (t, f.to_vec())),
            Some((1_500_000_123, vec![1, 2, 3]))
        );
        assert_eq!(
            r.next_frame().map(|(t, f)| (t, f.len())),
            Some((2_000_000_000, 60))
        );
        assert!(r.next_frame().is_none());
    }

    #[test]
    fn microsecond_big_endian_raw_ip() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC_US.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&65535u32.to_be_bytes());
        b.extend_from_slice(&101u32.to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        b.extend_from_slice(&5u32.to_be_bytes());
        b.extend_from_slice(&20u32.to_be_bytes());
        b.extend_from_slice(&20u32.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        b.extend_from_slice(&ip);
        let mut r = PcapReader::from_reader("be".into(), Box::new(io::Cursor::new(b))).unwrap();
        let (ts, f) = r.next_frame().unwrap();
        assert_eq!(ts, 7_000_005_000);
        assert_eq!(f.len(), 34);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14], 0x45);
    }

    #[test]
    fn pcapng_and_garbage_are_refused() {
        let mut ng = vec![0u8; 28];
        ng[..4].copy_from_slice(&PCAPNG.to_le_bytes());
        let e = PcapReader::from_reader("x.pcapng".into(), Box::new(io::Cursor::new(ng)))
            .err()
            .unwrap();
        assert!(e.to_string().contains("pcapng"), "{e}");
        let e = PcapReader::from_reader("x".into(), Box::new(io::Cursor::new(vec![1u8; 30])))
            .err()
            .unwrap();
        assert!(e.to_string().contains("magic"), "{e}");
    }

    #[test]
    fn truncated_record_ends_the_capture() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut w = PcapWriter::to_writer("mem".into(), Box::new(Shared(buf.clone()))).unwrap();
        w.write_frame(1, &[9; 40]).unwrap();
        w.flush().unwrap();
        let mut bytes = buf.lock().unwrap().clone();
        bytes.truncate(bytes.len() - 10);
        let mut r =
            PcapReader::from_reader("mem".into(), Box::new(io::Cursor::new(bytes))).unwrap();
        assert!(r.next_frame().is_none());
        assert_eq!(r.truncated, 1);
    }
}
