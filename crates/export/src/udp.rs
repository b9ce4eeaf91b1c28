//! One UDP socket that sends every message to every collector.
//!
//! Export over UDP never waits for a collector: the socket is non-blocking, and a message the
//! kernel does not take (a full socket buffer, an unreachable collector reported back by ICMP)
//! is counted as failed and not retried — flow export is best effort, as RFC 7011 §10.3 and the
//! sFlow specification make it.

use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Why the exporter's socket could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No collector given.
    #[error("no collector")]
    NoCollector,
    /// The socket could not be opened.
    #[error("opening a UDP socket: {0}")]
    Socket(#[from] io::Error),
}

/// Messages sent and failed since the exporter started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Messages the kernel took (one per collector).
    pub messages: u64,
    /// Bytes of those.
    pub bytes: u64,
    /// Messages the kernel refused or could not deliver.
    pub failed: u64,
}

/// A UDP socket with its collectors.
#[derive(Debug)]
pub struct Exporter {
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    collectors: Vec<SocketAddr>,
    sent: Sent,
}

impl Exporter {
    /// An exporter to `collectors` (IPv4 and IPv6 collectors each get a socket of their family,
    /// bound to an ephemeral port).
    pub fn new(collectors: &[SocketAddr]) -> Result<Exporter, Error> {
        if collectors.is_empty() {
            return Err(Error::NoCollector);
        }
        let open = |bind: &str| -> Result<UdpSocket, Error> {
            let s = UdpSocket::bind(bind)?;
            s.set_nonblocking(true)?;
            Ok(s)
        };
        let v4 = if collectors.iter().any(SocketAddr::is_ipv4) {
            Some(open("0.0.0.0:0")?)
        } else {
            None
        };
        let v6 = if collectors.iter().any(SocketAddr::is_ipv6) {
            Some(open("[::]:0")?)
        } else {
            None
        };
        Ok(Exporter {
            v4,
            v6,
            collectors: collectors.to_vec(),
            sent: Sent::default(),
        })
    }

    /// The collectors.
    pub fn collectors(&self) -> &[SocketAddr] {
        &self.collectors
    }

    /// Send `msg` to every collector.
    pub fn send(&mut self, msg: &[u8]) {
        for c in &self.collectors {
            let s = if c.is_ipv4() { &self.v4 } else { &self.v6 };
            match s.as_ref().map(|s| s.send_to(msg, c)) {
                Some(Ok(n)) if n == msg.len() => {
                    self.sent.messages += 1;
                    self.sent.bytes += n as u64;
                }
                _ => self.sent.failed += 1,
            }
        }
    }

    /// What was sent so far.
    pub fn sent(&self) -> Sent {
        self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collector_gets_every_message() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut e = Exporter::new(&[a.local_addr().unwrap(), b.local_addr().unwrap()]).unwrap();
        e.send(b"hello");
        let mut buf = [0u8; 16];
        for s in [&a, &b] {
            let (n, _) = s.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"hello");
        }
        assert_eq!(
            e.sent(),
            Sent {
                messages: 2,
                bytes: 10,
                failed: 0
            }
        );
    }

    #[test]
    fn no_collector_is_an_error() {
        assert!(matches!(Exporter::new(&[]), Err(Error::NoCollector)));
    }
}
