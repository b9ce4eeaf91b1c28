//! The port abstraction: every packet source and sink — generated traffic, pcap files, in-memory
//! lists, AF_PACKET and AF_XDP sockets, the dispatcher's lanes — implements [`Port`], so the
//! driver and the stages never know which one they run on.
//!
//! A port also says how a worker waits for it ([`Port::wait`]): on a descriptor (`poll(2)` on a
//! socket), on a thread wake-up (the software dispatcher's lanes), or not at all (a file or a
//! generator, which has frames whenever it is asked until it is exhausted). The driver combines
//! the ports of a worker into one wait, so an idle worker sleeps and a frame on any of its ports
//! wakes it.

use fp_pipeline::packet::{Packet, Pool};
use std::os::fd::RawFd;

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

impl PortStats {
    /// Add `o`'s counters to these.
    pub fn add(&mut self, o: &PortStats) {
        self.rx += o.rx;
        self.tx += o.tx;
        self.rx_dropped += o.rx_dropped;
        self.tx_dropped += o.tx_dropped;
    }
}

/// How a worker sleeps until a port has frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing to wait for: the port has frames whenever asked (a file, a generator) until it is
    /// exhausted, or never receives at all (a sink).
    Never,
    /// The descriptor becomes readable (`POLLIN`) when frames arrive.
    Readable(RawFd),
    /// Whoever feeds the port wakes the worker's thread (`Thread::unpark`).
    Unpark,
}

/// A packet source and sink.
pub trait Port: Send {
    /// A short name for logs and metrics.
    fn name(&self) -> &str;

    /// Append up to `max` received packets to `out`, taking buffers from `pool`. Returns how many
    /// were appended; 0 means nothing is available now (or, for finite sources, see
    /// [`Port::exhausted`]). Received packets carry their receive time in `ts_ns` and a `tag` of 0.
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize;

    /// Send packets from the front of `batch` and return how many were sent; buffers of sent or
    /// refused packets go back to `pool`. A port normally takes the whole batch and counts what it
    /// could not send in [`PortStats::tx_dropped`]. A port that is only *momentarily* full (an
    /// in-memory ring, see [`Port::tx_room`]) may instead stop early and leave the rest in `batch`,
    /// in order: the driver offers them again before anything newer.
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize;

    /// How many packets [`Port::tx_burst`] would take now. Ports that never push back answer
    /// `usize::MAX`; stages use this (through the driver's [`Outputs::room`]) to stop taking new
    /// input while an output is congested.
    ///
    /// [`Outputs::room`]: fp_pipeline::stage::Outputs::room
    fn tx_room(&self) -> usize {
        usize::MAX
    }

    /// True when a finite source (a pcap file, a bounded generator, a closed lane) has nothing
    /// more to give. A worker whose ports are all exhausted finishes.
    fn exhausted(&self) -> bool {
        false
    }

    /// Flush buffered output (files).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The port's counters.
    fn stats(&self) -> PortStats;
    /// Add what another process needs to go on with this port's kernel objects (a successor
    /// taking over; [`crate::live::PortDriver::adopt`]) to `to`, changing nothing here yet. An
    /// error (`Unsupported` by default) for ports that cannot be handed over.
    fn hand_off(&self, to: &mut crate::live::Handoff) -> std::io::Result<()> {
        let _ = to;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("port {} cannot be handed to another process", self.name()),
        ))
    }
    /// The other process has what [`Port::hand_off`] gave: dropping this port must leave those
    /// kernel objects as they are.
    fn handed_over(&mut self) {}

    /// How to wait for this port's frames.
    fn wait(&self) -> Wait {
        Wait::Never
    }

    /// True if a frame is known to be waiting without a system call (e.g. a filled ring block the
    /// kernel has handed over); the driver checks it before sleeping.
    fn rx_ready(&self) -> bool {
        false
    }
}

impl<P: Port + ?Sized> Port for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        (**self).rx_burst(pool, out, max)
    }
    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        (**self).tx_burst(batch, pool)
    }
    fn tx_room(&self) -> usize {
        (**self).tx_room()
    }
    fn exhausted(&self) -> bool {
        (**self).exhausted()
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (**self).flush()
    }
    fn stats(&self) -> PortStats {
        (**self).stats()
    }
    fn wait(&self) -> Wait {
        (**self).wait()
    }
    fn rx_ready(&self) -> bool {
        (**self).rx_ready()
    }
    fn hand_off(&self, to: &mut crate::live::Handoff) -> std::io::Result<()> {
        (**self).hand_off(to)
    }
    fn handed_over(&mut self) {
        (**self).handed_over()
    }
}
