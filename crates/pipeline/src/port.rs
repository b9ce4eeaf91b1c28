//! The port abstraction: every packet source and sink (generator, pcap file, AF_PACKET, AF_XDP)
//! implements [`Port`], so the pipeline never knows which one it runs on.

use crate::packet::{Packet, Pool};

/// Counters a port keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received and handed to the pipeline.
    pub rx: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Frames the port could not deliver (no buffer, too big, ring overrun).
    pub rx_dropped: u64,
    /// Frames the port could not send (ring full, send error).
    pub tx_dropped: u64,
}

/// A packet source and sink.
pub trait Port: Send {
    /// A short name for logs and metrics.
    fn name(&self) -> &str;

    /// Append up to `max` received packets to `out`, taking buffers from `pool`. Returns how many
    /// were appended; 0 means nothing is available now (or, for finite sources, see
    /// [`Port::exhausted`]).
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize;

    /// Send every packet in `batch` (draining it) and return the buffers to `pool`. Returns how
    /// many were sent; the rest were dropped and counted in [`PortStats::tx_dropped`].
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize;

    /// True when a finite source (a pcap file, a bounded generator) has nothing more to give.
    fn exhausted(&self) -> bool {
        false
    }

    /// Flush buffered output (files).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The port's counters.
    fn stats(&self) -> PortStats;
}
