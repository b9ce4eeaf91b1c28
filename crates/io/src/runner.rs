//! Driving the load balancer over ports with threads: software steering for sources that do not
//! steer themselves (generator, pcap files), one worker thread per core (Maglev §3.1, Fig 4).
//!
//! ```text
//!   input port ──► dispatcher: parse, 5-tuple hash ──► worker 0 ──┐
//!                               (3-tuple for fragments)─► worker 1 ──┼─► output port
//!                                                      ─► ...      ──┘
//! ```
//!
//! The dispatcher and the output muxing share the calling thread; workers run on their own threads,
//! pinned to cores when asked. Bursts travel over bounded channels as vectors that are recycled, and
//! packet buffers return to the dispatcher's pool after output, so the steady state allocates
//! nothing. Packets of one connection always meet one worker, so per-flow order is preserved from
//! input to output (the order across flows is not).
//!
//! Time comes from the packets: each burst is processed at the latest timestamp it carries (pcap
//! time for captures, synthetic time for the generator), so expiry and fragment timeouts follow the
//! traffic's clock and a capture replays the same way however fast the machine is.

use fp_pipeline::lb::LbWorker;
use fp_pipeline::packet::{burst, Packet, Pool, MAX_BURST};
use fp_pipeline::port::{Port, PortStats};
use fp_pipeline::snapshot::{Published, Snapshot};
use fp_pipeline::stats::WorkerStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runner settings.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Worker threads.
    pub workers: usize,
    /// Seed of the steering hash.
    pub steer_seed: u64,
    /// Seed of the connection tables' placement (keep secret).
    pub table_seed: u64,
    /// Pin worker `i` to CPU `i` (modulo the CPU count).
    pub pin: bool,
    /// Packet buffers in flight at most.
    pub buffers: usize,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            steer_seed: 0x0005_7ee7,
            table_seed: 0x0007_ab1e_5eed,
            pin: false,
            buffers: 16384,
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct RunResult {
    /// Each worker's counters.
    pub workers: Vec<Arc<WorkerStats>>,
    /// Wall-clock time from the first burst to the last packet out.
    pub elapsed: Duration,
    /// Input port counters.
    pub input: PortStats,
    /// Output port counters.
    pub output: PortStats,
    /// Connections tracked at the end, per worker (IPv4 + IPv6).
    pub connections: Vec<usize>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A worker could not be set up.
    #[error("worker {0}: {1}")]
    Worker(usize, fp_pipeline::lb::WorkerError),
    /// Flushing the output failed.
    #[error("output {0}: {1}")]
    Output(String, std::io::Error),
}

enum ToWorker {
    Burst(Vec<Packet>),
}

enum FromWorker {
    /// Packets to transmit (the vector comes back empty for reuse).
    Out(Vec<Packet>),
    /// Buffers the worker dropped, to return to the dispatcher's pool.
    Free(Vec<Packet>),
    /// Worker `.0` ended, tracking `.1` connections.
    Done(usize, usize),
}

/// Run the load balancer from `input` to `output` until the input is exhausted or `stop` is set.
pub fn run_lb(
    snapshots: Arc<Published<Snapshot>>,
    input: &mut dyn Port,
    output: &mut dyn Port,
    rc: &RunConfig,
    stop: &AtomicBool,
) -> Result<RunResult, RunError> {
    let n = rc.workers.max(1);
    let mut workers = Vec::new();
    for i in 0..n {
        workers.push(
            LbWorker::new(i, snapshots.clone(), rc.table_seed ^ i as u64)
                .map_err(|e| RunError::Worker(i, e))?,
        );
    }
    let stats: Vec<Arc<WorkerStats>> = workers.iter().map(|w| w.stats().clone()).collect();
    let (from_tx, from_rx) = sync_channel::<FromWorker>(n * 64);
    let mut connections = vec![0usize; n];
    let started = Instant::now();
    let result = std::thread::scope(|s| {
        let mut to_workers = Vec::new();
        for (i, w) in workers.into_iter().enumerate() {
            let (tx, rx) = sync_channel::<ToWorker>(64);
            to_workers.push(Some(tx));
            let from = from_tx.clone();
            let pin = rc.pin;
            s.spawn(move || worker_loop(i, w, rx, from, pin));
        }
        drop(from_tx);
        dispatch(
            input,
            output,
            rc,
            stop,
            to_workers,
            &from_rx,
            &mut connections,
        )
    });
    result?;
    output
        .flush()
        .map_err(|e| RunError::Output(output.name().to_string(), e))?;
    Ok(RunResult {
        workers: stats,
        elapsed: started.elapsed(),
        input: input.stats(),
        output: output.stats(),
        connections,
    })
}

fn worker_loop(
    i: usize,
    mut w: LbWorker,
    rx: Receiver<ToWorker>,
    out: SyncSender<FromWorker>,
    pin: bool,
) {
    if pin {
        crate::sys::pin_to_cpu(i);
    }
    let mut pool = Pool::new(4 * MAX_BURST);
    let mut tx = burst();
    let mut free = Vec::new();
    let mut now = 0u64;
    loop {
        match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(ToWorker::Burst(mut b)) => {
                now = b.iter().map(|p| p.ts_ns).max().unwrap_or(now).max(now);
                w.process(&mut b, &mut tx, &mut pool, now);
                if !tx.is_empty() {
                    let full = std::mem::replace(&mut tx, b);
                    if out.send(FromWorker::Out(full)).is_err() {
                        return;
                    }
                } else {
                    tx = b;
                }
            }
            Err(RecvTimeoutError::Timeout) => w.maintain(now, &mut pool),
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if pool.free() >= MAX_BURST {
            pool.take_free(usize::MAX, &mut free);
            if out
                .send(FromWorker::Free(std::mem::take(&mut free)))
                .is_err()
            {
                return;
            }
        }
    }
    pool.take_free(usize::MAX, &mut free);
    let (c4, c6) = w.connections();
    let _ = out.send(FromWorker::Free(free));
    let _ = out.send(FromWorker::Done(i, c4 + c6));
}

fn dispatch(
    input: &mut dyn Port,
    output: &mut dyn Port,
    rc: &RunConfig,
    stop: &AtomicBool,
    mut senders: Vec<Option<SyncSender<ToWorker>>>,
    from: &Receiver<FromWorker>,
    connections: &mut [usize],
) -> Result<(), RunError> {
    let n = senders.len();
    let mut pool = Pool::new(rc.buffers);
    let mut spare: Vec<Vec<Packet>> = Vec::new();
    let mut pending: Vec<Vec<Packet>> = (0..n).map(|_| burst()).collect();
    let mut rx = burst();
    let mut done_workers = 0;
    let mut input_done = false;
    let worker_of = |p: &Packet| fp_pipeline::steer::steer(p.data(), rc.steer_seed, n);
    loop {
        // Results first: they return buffers the input needs.
        loop {
            match from.try_recv() {
                Ok(FromWorker::Out(mut v)) => {
                    output.tx_burst(&mut v, &mut pool);
                    spare.push(v);
                }
                Ok(FromWorker::Free(mut v)) => {
                    pool.put_all(&mut v);
                    spare.push(v);
                }
                Ok(FromWorker::Done(i, c)) => {
                    connections[i] = c;
                    done_workers += 1;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        }
        if input_done {
            if done_workers == n {
                return Ok(());
            }
            // Wait for the workers to drain.
            match from.recv_timeout(Duration::from_millis(5)) {
                Ok(FromWorker::Out(mut v)) => {
                    output.tx_burst(&mut v, &mut pool);
                    spare.push(v);
                }
                Ok(FromWorker::Free(mut v)) => {
                    pool.put_all(&mut v);
                    spare.push(v);
                }
                Ok(FromWorker::Done(i, c)) => {
                    connections[i] = c;
                    done_workers += 1;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            continue;
        }
        let got = input.rx_burst(&mut pool, &mut rx, MAX_BURST);
        for p in rx.drain(..) {
            let w = worker_of(&p);
            pending[w].push(p);
            if pending[w].len() == MAX_BURST {
                let next = spare.pop().unwrap_or_else(burst);
                let full = std::mem::replace(&mut pending[w], next);
                if let Some(s) = &senders[w] {
                    let _ = s.send(ToWorker::Burst(full));
                }
            }
        }
        let finished = stop.load(Ordering::Relaxed) || (got == 0 && input.exhausted());
        if got == 0 || finished {
            // Idle or finished: send partial bursts so nothing waits.
            for w in 0..n {
                if !pending[w].is_empty() {
                    let next = spare.pop().unwrap_or_else(burst);
                    let part = std::mem::replace(&mut pending[w], next);
                    if let Some(s) = &senders[w] {
                        let _ = s.send(ToWorker::Burst(part));
                    }
                }
            }
            if got == 0 && !finished {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if finished {
            input_done = true;
            // Dropping the senders closes the channels: workers end after draining them.
            for s in senders.iter_mut() {
                *s = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemPort;
    use fp_pipeline::config::LbConfig;
    use fp_pipeline::craft::{self, Endpoints};
    use fp_pipeline::snapshot::Builder;
    use fp_pipeline::stats::{Outcome, Totals};
    use std::collections::HashMap;

    fn snapshots() -> Arc<Published<Snapshot>> {
        let cfg = LbConfig::from_toml(
            r#"
            [balancer]
            address = "10.0.0.2"
            conn_table_capacity = 10000
            [[vip]]
            name = "web"
            address = "203.0.113.10"
            port = 80
            protocol = "tcp"
            pools = ["p"]
            [[pool]]
            name = "p"
            backends = [{ address = "10.0.1.1" }, { address = "10.0.1.2" }, { address = "10.0.1.3" }]
        "#,
        )
        .unwrap();
        Arc::new(Published::new(Arc::new(
            Builder::new().build(Arc::new(cfg)).unwrap(),
        )))
    }

    #[test]
    fn every_packet_comes_out_once_and_flows_keep_order() {
        // 300 flows x 20 packets, interleaved; 2 workers.
        let mut frames = Vec::new();
        for round in 0..20u64 {
            for f in 0..300u16 {
                let e = Endpoints::new("198.51.100.1", 1000 + f, "203.0.113.10", 80);
                let mut fr = craft::tcp(&e, round == 0);
                // Tag each packet with its round in the TCP sequence number to check order.
                fr[38..42].copy_from_slice(&(round as u32).to_be_bytes());
                frames.push((round * 1000, fr));
            }
        }
        let total = frames.len();
        let mut input = MemPort::new(frames);
        let mut output = MemPort::default();
        let rc = RunConfig {
            workers: 2,
            ..Default::default()
        };
        let r = run_lb(
            snapshots(),
            &mut input,
            &mut output,
            &rc,
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(output.sent.len(), total);
        let t = Totals::sum(r.workers.iter().map(|w| &**w));
        assert_eq!(t.get(Outcome::Tx) as usize, total);
        assert_eq!(t.get(Outcome::ConnInsert), 300);
        assert_eq!(r.connections.iter().sum::<usize>(), 300);
        // Per flow: rounds in order, one backend.
        let mut last: HashMap<u16, (u32, std::net::IpAddr)> = HashMap::new();
        for (_, f) in &output.sent {
            let inner = &f[38..];
            let sport = u16::from_be_bytes([inner[20], inner[21]]);
            let round = u32::from_be_bytes([inner[24], inner[25], inner[26], inner[27]]);
            let backend = fp_wire::PacketSummary::parse(f).unwrap().dst();
            if let Some((r0, b0)) = last.get(&sport) {
                assert!(round > *r0, "flow {sport} reordered");
                assert_eq!(*b0, backend);
            }
            last.insert(sport, (round, backend));
        }
    }
}
