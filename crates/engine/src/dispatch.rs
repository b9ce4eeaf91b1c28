//! Software steering for sources that do not spread flows over workers themselves (a capture file,
//! the traffic generator, an in-memory list): the stand-in for a NIC's RSS or AF_PACKET's fan-out.
//!
//! ```text
//!   real port 0 ─┐                    ┌─► lane (w0, port 0) ─► worker 0 ─► lane (w0, port j) ─┐
//!   real port 1 ─┼─► dispatcher:      ├─► lane (w1, port 0) ─► worker 1 ─► ...                 ├─► real port j
//!       ...      ┘   5-tuple hash     └─► ...                                                   ┘
//!                    (3-tuple for fragments)
//! ```
//!
//! The dispatcher runs on the calling thread with the real ports; each worker gets one *lane* per
//! real port — a [`Port`] whose receive side is fed by the dispatcher with the frames steered to
//! that worker and whose transmit side hands bursts back to the dispatcher for the real port. So a
//! worker runs the driver's ordinary loop ([`crate::driver`]) whatever its input: a stage cannot
//! tell a lane from a socket. Packets of one flow always meet one worker (fp-pipeline's
//! [`steer`](fp_pipeline::steer)), so per-flow order is kept from input to output.
//!
//! Bursts travel over bounded channels as vectors that are recycled, and packet buffers a worker
//! freed return to the dispatcher's pool, so a steady state where each burst comes back as one
//! burst allocates nothing (a stage that splits bursts over several ports makes its lane allocate
//! the extra vectors; the dispatcher keeps a bounded number of them). A worker that
//! sleeps is woken (`unpark`) by the dispatcher when it feeds it. A burst for a worker closes at
//! [`MAX_BURST`] frames, when the input pauses, or — with a batching window — when the next frame
//! for that worker is more than the window younger than the burst's first (in packet time, like a
//! NIC's interrupt moderation; applications whose state depends on time gaps need it).

use crate::driver::{self, EngineError, Finished, Options, Worker};
use crate::port::{Port, PortStats, Wait};
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::stage::Stage;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{
    sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError,
};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How frames are spread over workers.
#[derive(Clone, Copy, Debug)]
pub struct Steering {
    /// Seed of the steering hash.
    pub seed: u64,
    /// Batching window in packet time (ns), if any: see the module docs.
    pub window_ns: Option<u64>,
    /// Packet buffers of the dispatcher (frames in flight between it and the workers).
    pub buffers: usize,
}

impl Default for Steering {
    fn default() -> Self {
        Steering {
            seed: 0x0005_7ee7,
            window_ns: None,
            buffers: 16384,
        }
    }
}

/// What a dispatched run did.
#[derive(Debug)]
pub struct Dispatched<S> {
    /// The workers, as they ended.
    pub workers: Vec<Finished<S>>,
    /// Wall-clock time from start to the last packet out.
    pub elapsed: Duration,
}

/// Bursts queued per lane.
const LANE_QUEUE: usize = 32;

/// What a lane hands back to the dispatcher.
enum Back {
    /// Packets to transmit on real port `.0`.
    Tx(usize, Vec<Packet>),
    /// Buffers the worker freed.
    Free(Vec<Packet>),
}

/// A worker's view of one real port.
struct Lane {
    name: String,
    index: usize,
    rx: Receiver<Vec<Packet>>,
    back: SyncSender<Back>,
    /// The burst being delivered (a burst may be taken in parts).
    cur: Vec<Packet>,
    spare: Vec<Vec<Packet>>,
    closed: bool,
    stats: PortStats,
}

impl Lane {
    /// Buffers a worker keeps for its stage's own needs (copies of flooded frames); the rest of
    /// what it frees goes back to the dispatcher.
    const KEEP: usize = 2 * MAX_BURST;

    fn spare(&mut self) -> Vec<Packet> {
        self.spare.pop().unwrap_or_else(burst)
    }
}

impl Port for Lane {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, pool: &mut Pool, out: &mut Vec<Packet>, max: usize) -> usize {
        if pool.free() >= 2 * Self::KEEP {
            let mut v = self.spare();
            pool.take_free(pool.free() - Self::KEEP, &mut v);
            // The dispatcher is gone only after the input ended; then the buffers just drop.
            let _ = self.back.send(Back::Free(v));
        }
        if self.cur.is_empty() {
            match self.rx.try_recv() {
                Ok(v) => {
                    let old = std::mem::replace(&mut self.cur, v);
                    self.spare.push(old);
                }
                Err(TryRecvError::Empty) => return 0,
                Err(TryRecvError::Disconnected) => {
                    self.closed = true;
                    return 0;
                }
            }
        }
        let n = self.cur.len().min(max);
        out.extend(self.cur.drain(..n));
        self.stats.rx += n as u64;
        n
    }

    fn tx_burst(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> usize {
        let n = batch.len();
        let mut v = self.spare();
        std::mem::swap(&mut v, batch);
        match self.back.send(Back::Tx(self.index, v)) {
            Ok(()) => {
                self.stats.tx += n as u64;
                n
            }
            Err(e) => {
                // The dispatcher ended (it only does after the workers): nothing to send to.
                if let Back::Tx(_, mut v) = e.0 {
                    pool.put_all(&mut v);
                }
                self.stats.tx_dropped += n as u64;
                0
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.closed && self.cur.is_empty()
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn wait(&self) -> Wait {
        Wait::Unpark
    }
}

/// The dispatcher's state.
struct Dispatcher<'a, 'p> {
    ports: &'a mut [&'p mut dyn Port],
    pool: Pool,
    /// `lanes[w][i]`: the sender of worker w's lane for real port i (`None` once closed).
    lanes: Vec<Vec<Option<SyncSender<Vec<Packet>>>>>,
    threads: Vec<Thread>,
    back: Receiver<Back>,
    pending: Vec<Vec<Vec<Packet>>>,
    first_ts: Vec<Vec<u64>>,
    spare: Vec<Vec<Packet>>,
    spare_max: usize,
    steering: Steering,
}

impl Dispatcher<'_, '_> {
    fn handle(&mut self, m: Back) {
        let mut v = match m {
            Back::Tx(i, mut v) => {
                self.ports[i].tx_burst(&mut v, &mut self.pool);
                v
            }
            Back::Free(v) => v,
        };
        // A real port that left packets (it never should: files and lists take all) would
        // otherwise leak them.
        self.pool.put_all(&mut v);
        // Lanes send back more vectors than they get when a stage splits bursts: keep enough to
        // fill every lane's queue, let the rest go.
        if self.spare.len() < self.spare_max {
            self.spare.push(v);
        }
    }

    fn drain_back(&mut self) -> bool {
        loop {
            match self.back.try_recv() {
                Ok(m) => self.handle(m),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Hand worker `w` its pending burst of real port `i`.
    fn send(&mut self, w: usize, i: usize) {
        let next = self.spare.pop().unwrap_or_else(burst);
        let mut v = std::mem::replace(&mut self.pending[w][i], next);
        loop {
            let Some(lane) = &self.lanes[w][i] else {
                self.pool.put_all(&mut v);
                return;
            };
            match lane.try_send(v) {
                Ok(()) => {
                    self.threads[w].unpark();
                    return;
                }
                Err(TrySendError::Full(back)) => {
                    // The worker is behind: let it run, and keep its output moving meanwhile
                    // (it may be waiting for room in the channel back).
                    v = back;
                    self.threads[w].unpark();
                    if let Ok(m) = self.back.recv_timeout(Duration::from_millis(1)) {
                        self.handle(m);
                    }
                }
                Err(TrySendError::Disconnected(mut back)) => {
                    // The worker died; the driver reports it. Its frames are lost.
                    self.pool.put_all(&mut back);
                    self.lanes[w][i] = None;
                    return;
                }
            }
        }
    }

    fn flush_pending(&mut self) {
        for w in 0..self.pending.len() {
            for i in 0..self.ports.len() {
                if !self.pending[w][i].is_empty() {
                    self.send(w, i);
                }
            }
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        let n = self.lanes.len();
        let mut rx = burst();
        loop {
            // Results first: they return the buffers the input needs.
            if !self.drain_back() {
                return;
            }
            let mut got = 0;
            for i in 0..self.ports.len() {
                if self.ports[i].exhausted() {
                    continue;
                }
                got += self.ports[i].rx_burst(&mut self.pool, &mut rx, MAX_BURST);
                for p in rx.drain(..) {
                    let w = fp_pipeline::steer::steer(p.data(), self.steering.seed, n);
                    if let Some(window) = self.steering.window_ns {
                        if !self.pending[w][i].is_empty()
                            && p.ts_ns > self.first_ts[w][i].saturating_add(window)
                        {
                            self.send(w, i);
                        }
                    }
                    if self.pending[w][i].is_empty() {
                        self.first_ts[w][i] = p.ts_ns;
                    }
                    self.pending[w][i].push(p);
                    if self.pending[w][i].len() == MAX_BURST {
                        self.send(w, i);
                    }
                }
            }
            let finished = stop.load(Ordering::Relaxed) || self.ports.iter().all(|p| p.exhausted());
            if got == 0 || finished {
                // Idle, out of buffers, or finished: nothing may wait in a partial burst.
                self.flush_pending();
            }
            if finished {
                break;
            }
            if got == 0 {
                match self.back.recv_timeout(Duration::from_micros(200)) {
                    Ok(m) => self.handle(m),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        }
        // Closing the lanes ends the workers once they have drained them.
        for l in self.lanes.iter_mut().flatten() {
            *l = None;
        }
        for t in &self.threads {
            t.unpark();
        }
        // Their output, until the last lane (and with it the channel back) is gone.
        while let Ok(m) = self.back.recv() {
            self.handle(m);
        }
    }
}

/// Run `stages` (one worker each) over `ports` with software steering until every port is
/// exhausted or `stop` is set, and the workers have finished. Worker `w` sees one lane per real
/// port, with the same index: what it sends to lane `j` leaves through `ports[j]`.
pub fn run<S: Stage + 'static>(
    ports: &mut [&mut dyn Port],
    stages: Vec<S>,
    steering: &Steering,
    opts: &Options,
    stop: &AtomicBool,
) -> Result<Dispatched<S>, EngineError> {
    let started = Instant::now();
    let m = ports.len();
    let n = stages.len().max(1);
    let (back_tx, back_rx) = sync_channel::<Back>(n * 64 + 64);
    let mut lanes = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    for (w, stage) in stages.into_iter().enumerate() {
        let mut senders = Vec::with_capacity(m);
        let mut wports: Vec<Box<dyn Port>> = Vec::with_capacity(m);
        for (i, p) in ports.iter().enumerate() {
            let (tx, rx) = sync_channel::<Vec<Packet>>(LANE_QUEUE);
            senders.push(Some(tx));
            wports.push(Box::new(Lane {
                name: format!("{}@{w}", p.name()),
                index: i,
                rx,
                back: back_tx.clone(),
                cur: Vec::new(),
                spare: Vec::new(),
                closed: false,
                stats: PortStats::default(),
            }));
        }
        lanes.push(senders);
        workers.push(Worker {
            stage,
            ports: wports,
        });
    }
    drop(back_tx);
    let running = driver::start(workers, opts)?;
    let mut d = Dispatcher {
        threads: running.threads(),
        pending: (0..n).map(|_| (0..m).map(|_| burst()).collect()).collect(),
        first_ts: vec![vec![0; m]; n],
        ports,
        pool: Pool::new(steering.buffers),
        lanes,
        back: back_rx,
        spare: Vec::new(),
        spare_max: n * m * (LANE_QUEUE + 2),
        steering: *steering,
    };
    d.run(stop);
    drop(d);
    let workers = running.join()?;
    Ok(Dispatched {
        workers,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemPort;
    use fp_pipeline::craft::{self, Endpoints};
    use fp_pipeline::stage::Outputs;
    use std::collections::HashMap;

    /// Sends everything to port 1, counting.
    struct ToOne(u64);
    impl Stage for ToOne {
        fn process(
            &mut self,
            _: usize,
            rx: &mut Vec<Packet>,
            out: &mut Outputs,
            _: &mut Pool,
            _: u64,
        ) {
            self.0 += rx.len() as u64;
            out.to(1).append(rx);
        }
    }

    #[test]
    fn every_packet_comes_out_once_and_flows_keep_order() {
        // 300 flows x 20 packets, interleaved, over 3 workers.
        let mut frames = Vec::new();
        for round in 0..20u32 {
            for f in 0..300u16 {
                let e = Endpoints::new("198.51.100.1", 1000 + f, "203.0.113.10", 80);
                let mut fr = craft::tcp(&e, round == 0);
                fr[38..42].copy_from_slice(&round.to_be_bytes());
                frames.push((round as u64 * 1000, fr));
            }
        }
        let total = frames.len();
        let mut input = MemPort::new(frames);
        let mut output = MemPort::default();
        let stages = (0..3).map(|_| ToOne(0)).collect();
        let opts = Options {
            clock: crate::driver::Clock::Packets,
            ..Options::default()
        };
        let d = run(
            &mut [&mut input, &mut output],
            stages,
            &Steering::default(),
            &opts,
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(output.sent.len(), total);
        let per_worker: Vec<u64> = d.workers.iter().map(|w| w.stage.0).collect();
        assert_eq!(per_worker.iter().sum::<u64>(), total as u64);
        assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
        let mut last: HashMap<u16, u32> = HashMap::new();
        for (_, f) in &output.sent {
            let sport = u16::from_be_bytes([f[34], f[35]]);
            let round = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
            if let Some(r0) = last.insert(sport, round) {
                assert!(round > r0, "flow {sport} reordered");
            }
        }
    }

    #[test]
    fn the_window_closes_bursts_on_packet_time() {
        /// Records the time span of every burst it gets.
        struct Spans(Vec<u64>);
        impl Stage for Spans {
            fn process(
                &mut self,
                _: usize,
                rx: &mut Vec<Packet>,
                out: &mut Outputs,
                _: &mut Pool,
                _: u64,
            ) {
                let lo = rx.iter().map(|p| p.ts_ns).min().unwrap();
                let hi = rx.iter().map(|p| p.ts_ns).max().unwrap();
                self.0.push(hi - lo);
                out.to(1).append(rx);
            }
        }
        // One flow, a packet every 1 us; a 5 us window.
        let e = Endpoints::new("198.51.100.1", 1000, "203.0.113.10", 80);
        let frames: Vec<_> = (0..1000u64)
            .map(|i| (i * 1000, craft::tcp(&e, false)))
            .collect();
        let mut input = MemPort::new(frames);
        let mut output = MemPort::default();
        let steering = Steering {
            window_ns: Some(5000),
            ..Steering::default()
        };
        let d = run(
            &mut [&mut input, &mut output],
            vec![Spans(Vec::new())],
            &steering,
            &Options::default(),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(output.sent.len(), 1000);
        let spans = &d.workers[0].stage.0;
        assert!(spans.iter().all(|&s| s <= 5000), "{spans:?}");
    }
}
