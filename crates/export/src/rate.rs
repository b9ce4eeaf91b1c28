//! A records-per-second limit on an exporter thread's intake from the workers' queues.
//!
//! Under a flood (every packet a new connection, every frame sampled) the workers produce far more
//! records than collectors take, and an exporter working flat out on another core slows the
//! workers beside it through the memory both touch. The limit keeps the exporter's work bounded:
//! what it does not take stays in the queues, which fill, and the workers drop the rest at the
//! cost of a branch (counted). It is a token bucket a tenth of a second deep, shared between the
//! queues without waste: each may take an equal share first, then what the others left goes to
//! those with records still waiting, starting from a different queue each time.

use std::time::Instant;

/// The limit's state: tokens, when they were last refilled, the queue to start with.
#[derive(Debug)]
pub struct RateLimit {
    tokens: f64,
    at: Instant,
    next: usize,
    limited: bool,
}

impl Default for RateLimit {
    fn default() -> RateLimit {
        RateLimit::new()
    }
}

impl RateLimit {
    /// A full bucket (clamped to its depth at the first take).
    pub fn new() -> RateLimit {
        RateLimit {
            tokens: f64::INFINITY,
            at: Instant::now(),
            next: 0,
            limited: false,
        }
    }

    /// Whether the last [`RateLimit::take`] stopped at the limit with records still waiting.
    pub fn limited(&self) -> bool {
        self.limited
    }

    /// Records that may be taken now at `rate` per second (0: no limit).
    fn refill(&mut self, rate: u32) -> u64 {
        if rate == 0 {
            return u64::MAX;
        }
        let now = Instant::now();
        let depth = (rate as f64 / 10.0).max(1.0);
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * rate as f64).min(depth);
        self.at = now;
        self.tokens as u64
    }

    /// Take records from `queues` within `rate` per second (0: all of them): `one` takes and
    /// handles one record of a queue (`false`: it had none), `waiting` says whether a queue
    /// still holds some. Returns the records taken from each queue.
    pub fn take<Q>(
        &mut self,
        rate: u32,
        queues: &mut [Q],
        mut one: impl FnMut(&mut Q) -> bool,
        waiting: impl Fn(&Q) -> bool,
    ) -> Vec<u64> {
        let mut left = self.refill(rate);
        let n = queues.len();
        let mut taken = vec![0u64; n];
        if n == 0 {
            self.limited = false;
            return taken;
        }
        let first = self.next % n;
        self.next = self.next.wrapping_add(1);
        let equal = left / n as u64;
        for pass in 0..2 {
            for k in 0..n {
                let i = (first + k) % n;
                // An equal share first; then whatever is left, to each in turn.
                let share = if pass == 0 { equal } else { left };
                let mut t = 0u64;
                while t < share && one(&mut queues[i]) {
                    t += 1;
                }
                taken[i] += t;
                left -= t.min(left);
            }
        }
        self.limited = rate != 0 && queues.iter().any(waiting);
        if rate != 0 {
            let spent: u64 = taken.iter().sum();
            self.tokens = (self.tokens - spent as f64).max(0.0);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_busy_queue_gets_the_whole_allowance_and_small_rates_are_not_overspent() {
        let mut r = RateLimit::new();
        // 1000 a second: a bucket of 100; queue 2 of 4 busy.
        let mut q = vec![0u64, 0, 500, 0];
        let t = r.take(
            1000,
            &mut q,
            |c| (*c > 0).then(|| *c -= 1).is_some(),
            |c| *c > 0,
        );
        assert_eq!(t, vec![0, 0, 100, 0]);
        assert!(r.limited());
        // 5 a second with 4 busy queues: one record in total, not one each.
        let mut r = RateLimit::new();
        let mut q = vec![10u64; 4];
        let t = r.take(
            5,
            &mut q,
            |c| (*c > 0).then(|| *c -= 1).is_some(),
            |c| *c > 0,
        );
        assert_eq!(t.iter().sum::<u64>(), 1);
        // No limit: everything.
        let mut q = vec![10u64; 4];
        let t = r.take(
            0,
            &mut q,
            |c| (*c > 0).then(|| *c -= 1).is_some(),
            |c| *c > 0,
        );
        assert_eq!(t, vec![10; 4]);
        assert!(!r.limited());
    }
}
