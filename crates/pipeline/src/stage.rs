//! The stage: what one worker of an application does with bursts of packets.
//!
//! Every application — the load balancer, the switch, the Flowlet balancer, a cluster node — is a
//! [`Stage`]: a value owned by one worker thread that turns a received burst into transmit bursts,
//! with the time passed in, and that has a few hooks for the clock. The engine's driver
//! (`fp_engine::driver`) does everything else: it owns the ports, receives, calls the stage,
//! transmits, waits when idle, counts, and stops. A stage makes no system call and reads no clock,
//! so it runs the same way on live sockets, on a capture file and in a deterministic test.
//!
//! ```
//! use fp_pipeline::packet::{burst, Packet, Pool};
//! use fp_pipeline::stage::{Outputs, Stage};
//!
//! /// A two-port wire: what enters on one port leaves on the other.
//! struct Cross;
//! impl Stage for Cross {
//!     fn process(&mut self, port: usize, rx: &mut Vec<Packet>, out: &mut Outputs,
//!                _pool: &mut Pool, _now_ns: u64) {
//!         out.to(1 - port).append(rx);
//!     }
//! }
//!
//! let (mut pool, mut out) = (Pool::new(4), Outputs::new(2));
//! let mut rx = burst();
//! let mut p = pool.get().unwrap();
//! p.fill(&[0u8; 60]);
//! rx.push(p);
//! Cross.process(0, &mut rx, &mut out, &mut pool, 0);
//! assert_eq!((out.queued(0), out.queued(1)), (0, 1));
//! ```

use crate::packet::{burst, Packet, Pool};

/// The transmit bursts of one worker: one per port of the worker, indexed like its ports.
///
/// What a stage pushes to [`Outputs::to`] is handed to that port by the driver after the stage
/// returns. A port that is momentarily full leaves packets here; they go out first on the next
/// pass ([`Outputs::queued`] counts them), and [`Outputs::room`] tells a stage how much more the
/// port takes, so it can hold back input while an output is congested ([`Stage::admit`]).
#[derive(Debug)]
pub struct Outputs {
    bursts: Vec<Vec<Packet>>,
    room: Vec<usize>,
}

impl Outputs {
    /// Empty bursts for `ports` ports, each with unlimited room.
    pub fn new(ports: usize) -> Outputs {
        Outputs {
            bursts: (0..ports).map(|_| burst()).collect(),
            room: vec![usize::MAX; ports],
        }
    }

    /// The burst for port `port`. Panics if the worker has no such port (a bug in the stage).
    #[inline]
    pub fn to(&mut self, port: usize) -> &mut Vec<Packet> {
        &mut self.bursts[port]
    }

    /// Number of ports.
    #[inline]
    pub fn ports(&self) -> usize {
        self.bursts.len()
    }

    /// The packets queued for port `port`.
    #[inline]
    pub fn burst(&self, port: usize) -> &[Packet] {
        &self.bursts[port]
    }

    /// Packets queued for port `port` and not yet taken by it.
    #[inline]
    pub fn queued(&self, port: usize) -> usize {
        self.bursts[port].len()
    }

    /// How many more packets port `port` would take now: what the port last reported
    /// (`Port::tx_room`, before this pass) minus what is queued for it.
    #[inline]
    pub fn room(&self, port: usize) -> usize {
        self.room[port].saturating_sub(self.bursts[port].len())
    }

    /// Record what port `port` would take now (the driver calls this before each pass).
    #[inline]
    pub fn set_room(&mut self, port: usize, room: usize) {
        self.room[port] = room;
    }

    /// True when nothing is queued for any port.
    pub fn is_empty(&self) -> bool {
        self.bursts.iter().all(|b| b.is_empty())
    }

    /// All bursts (the driver transmits them).
    #[inline]
    pub fn bursts_mut(&mut self) -> &mut [Vec<Packet>] {
        &mut self.bursts
    }

    /// Give every queued packet's buffer back to `pool` (the worker is ending and a port refused
    /// its backlog).
    pub fn discard(&mut self, pool: &mut Pool) -> usize {
        let mut n = 0;
        for b in &mut self.bursts {
            n += b.len();
            pool.put_all(b);
        }
        n
    }
}

/// One worker's share of an application: bursts in, bursts out, time passed in.
///
/// Every packet of `rx` must end up in an output burst, back in the pool (dropped, counted by the
/// stage), or held by the stage (to be emitted by a later call: fragments waiting for their first
/// fragment, packets recirculating through a flow-state table).
pub trait Stage: Send {
    /// Process a burst received on the worker's port `port` at time `now_ns` (the newest receive
    /// stamp of the burst, never earlier than the previous call's time).
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        now_ns: u64,
    );

    /// Whether to receive from port `port` now (called before every receive). A stage returns
    /// false to leave new frames in the port (the kernel ring, the lane) while an output it would
    /// need is congested; the default takes everything.
    #[inline]
    fn admit(&mut self, _port: usize, _out: &Outputs) -> bool {
        true
    }

    /// Periodic work on the clock, busy or idle (expiry sweeps, gauges): the driver calls it about
    /// every `maintain_every` of its clock.
    fn maintain(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {}

    /// The driver has offered every port once (one polling pass, called after every pass).
    /// `more_waiting` is true when some port filled its whole burst, so more frames are probably
    /// queued behind it and the next pass follows at once. A stage that gathers bursts to work
    /// on more frames at a time may hold them while `more_waiting` and must emit them when it is
    /// false: holding then would add latency at light load.
    fn pass_done(
        &mut self,
        _more_waiting: bool,
        _now_ns: u64,
        _out: &mut Outputs,
        _pool: &mut Pool,
    ) {
    }

    /// The worker has had no input for a while (the driver's `idle_after`): finish work that was
    /// waiting for more input.
    fn idle(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {}

    /// The input ended (every port exhausted) or the worker is stopping: emit or drop everything
    /// still held. Called once, last.
    fn finish(&mut self, _now_ns: u64, _out: &mut Outputs, _pool: &mut Pool) {}
}

impl<S: Stage + ?Sized> Stage for Box<S> {
    #[inline]
    fn process(
        &mut self,
        port: usize,
        rx: &mut Vec<Packet>,
        out: &mut Outputs,
        pool: &mut Pool,
        now_ns: u64,
    ) {
        (**self).process(port, rx, out, pool, now_ns)
    }
    #[inline]
    fn admit(&mut self, port: usize, out: &Outputs) -> bool {
        (**self).admit(port, out)
    }
    fn maintain(&mut self, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        (**self).maintain(now_ns, out, pool)
    }
    fn pass_done(&mut self, more_waiting: bool, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        (**self).pass_done(more_waiting, now_ns, out, pool)
    }

    #[inline]
    fn idle(&mut self, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        (**self).idle(now_ns, out, pool)
    }
    fn finish(&mut self, now_ns: u64, out: &mut Outputs, pool: &mut Pool) {
        (**self).finish(now_ns, out, pool)
    }
}
