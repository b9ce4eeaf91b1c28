//! Steering (Maglev §3.1): which worker a packet goes to.
//!
//! Packets are spread over workers by a hash of their 5-tuple, so every packet of a connection meets
//! the same worker and its connection table. Fragments are steered by the 3-tuple instead (a
//! non-first fragment has no ports), so all fragments of a datagram meet at one worker, which keeps
//! the datagram's fragment table entry. Frames that do not parse go to worker 0, which counts them.

use fp_wire::PacketSummary;

/// The steering hash of a frame, or `None` if it does not parse.
#[inline]
pub fn steer_hash(frame: &[u8], seed: u64) -> Option<u64> {
    let s = PacketSummary::parse(frame).ok()?;
    Some(if s.fragment.is_some() {
        s.three_tuple().hash(seed)
    } else {
        s.flow_key().hash(seed)
    })
}

/// The worker (of `workers`) for a frame.
#[inline]
pub fn steer(frame: &[u8], seed: u64, workers: usize) -> usize {
    match steer_hash(frame, seed) {
        Some(h) => fp_hash::reduce(h, workers as u64) as usize,
        None => 0,
    }
}
