//! In-memory ports: [`MemPort`] replays frames from a list and records what is sent (tests,
//! harnesses); [`NullPort`] discards what is sent and only counts it (benchmarks, the demo).

use crate::port::{Port, PortStats};
use fp_pipeline::packet::{Packet, Pool};
use std::collections::VecDeque;

/// Frames in from a list, frames out into a list.
#[derive(Default)]
pub struct MemPort {
    input: VecDeque<(u64, Vec<u8>)>,
    /// Frames sent, with their timestamps, in order.
    pub sent: Vec<(u64, Vec<u8>)>,
    stats: PortStats,
}

impl MemPort {
    /// A port that will deliver `frames` (timestamp, bytes) in order.
    pub fn new(frames: impl IntoIterator<Item = (u64, Vec<u8>)>) -> MemPort {
        MemPort {
            input: frames.into_iter().collect(),
            sent: Vec::new(),
            stats: PortStats::default(),
        }
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        "mem"
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some((ts, f)) = self.input.front() else {
                break;
            };
            let Some(mut p) = pool.get() else { break };
            if !p.fill(f) {
                self.stats.rx_dropped += 1;
                pool.put(p);
            } else {
                p.ts_ns = *ts;
                out.push(p);
                n += 1;
            }
            self.input.pop_front();
        }
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let n = batch.len();
        for p in batch.drain(..) {
            self.sent.push((p.ts_ns, p.data().to_vec()));
            pool.put(p);
        }
        self.stats.tx += n as u64;
        n
    }

    fn exhausted(&self) -> bool {
        self.input.is_empty()
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// Counts and discards what it is given; delivers nothing.
#[derive(Default)]
pub struct NullPort {
    stats: PortStats,
    /// Bytes sent.
    pub bytes: u64,
}

impl Port for NullPort {
    fn name(&self) -> &str {
        "null"
    }

    fn rx_burst(&mut self, _pool: &mut Pool, _out: &mut Vec<Packet>, _max: usize) -> usize {
        0
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let n = batch.len();
        self.bytes += batch.iter().map(|p| p.len() as u64).sum::<u64>();
        pool.put_all(batch);
        self.stats.tx += n as u64;
        n
    }

    fn exhausted(&self) -> bool {
        true
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
