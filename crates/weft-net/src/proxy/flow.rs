//! Flow control: a bound on the operations in flight per connection.
//!
//! A proxy thread takes credits before it hands a command's operations to a transport
//! ([`FlowControl::try_acquire`], all or nothing) and the transport gives them back when the
//! peer has applied the operations ([`FlowControl::release`], usually from another thread).
//! When no credit is left the command stays in its FIFO (the proxy moves on to other FIFOs and
//! retries later), the ring fills, and the GPU's `fifo_push` waits: backpressure reaches the
//! kernel without any thread blocking. Model-checked with loom (`loom_flow_*`).

use crate::sync::{AtomicU64, Ordering};

/// Per-connection credits.
#[derive(Debug)]
pub struct FlowControl {
    limit: u64,
    in_flight: Box<[AtomicU64]>,
}

impl FlowControl {
    /// `connections` connections, each with at most `limit` operations in flight (`limit >= 1`;
    /// a request for more than `limit` credits at once is refused forever, so callers size
    /// `limit` at least as large as their largest request).
    pub fn new(connections: usize, limit: u64) -> Self {
        Self { limit: limit.max(1), in_flight: (0..connections).map(|_| AtomicU64::new(0)).collect() }
    }

    /// The bound per connection.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes `n` credits of `connection` if that keeps it within the limit; false otherwise
    /// (and for an unknown connection). Never blocks.
    pub fn try_acquire(&self, connection: usize, n: u64) -> bool {
        let Some(counter) = self.in_flight.get(connection) else { return false };
        let mut current = counter.load(Ordering::Relaxed);
        loop {
            if current + n > self.limit {
                return false;
            }
            match counter.compare_exchange(current, current + n, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Gives back `n` credits of `connection` (at most what is in flight).
    pub fn release(&self, connection: usize, n: u64) {
        if let Some(counter) = self.in_flight.get(connection) {
            let before = counter.fetch_sub(n, Ordering::Release);
            debug_assert!(before >= n, "released {n} credits of connection {connection} with {before} in flight");
        }
    }

    /// Operations in flight on `connection`.
    pub fn in_flight(&self, connection: usize) -> u64 {
        self.in_flight.get(connection).map_or(0, |c| c.load(Ordering::Acquire))
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn credits_are_bounded_per_connection_and_all_or_nothing() {
        let flow = FlowControl::new(2, 3);
        assert!(flow.try_acquire(0, 2));
        assert!(!flow.try_acquire(0, 2), "would exceed the limit");
        assert!(flow.try_acquire(0, 1));
        assert!(flow.try_acquire(1, 3), "connections are independent");
        assert!(!flow.try_acquire(0, 1));
        flow.release(0, 2);
        assert_eq!(flow.in_flight(0), 1);
        assert!(flow.try_acquire(0, 2));
        assert!(!flow.try_acquire(5, 1), "unknown connection");
        assert!(!flow.try_acquire(1, 4));
    }
}

#[cfg(all(test, weft_loom))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Two proxy threads take credits of one connection while a completion thread returns
    /// them: the limit is never exceeded and no credit is lost or duplicated.
    #[test]
    fn loom_flow_never_exceeds_the_limit_and_loses_no_credit() {
        loom::model(|| {
            let flow = Arc::new(FlowControl::new(1, 2));
            let taken = Arc::new(AtomicU64::new(0));
            let takers: Vec<_> = (0..2)
                .map(|t| {
                    let (flow, taken) = (flow.clone(), taken.clone());
                    loom::thread::spawn(move || {
                        for _ in 0..1 + t {
                            if flow.try_acquire(0, 1) {
                                assert!(flow.in_flight(0) <= 2);
                                taken.fetch_add(1, Ordering::AcqRel);
                            }
                        }
                    })
                })
                .collect();
            let completer = {
                let (flow, taken) = (flow.clone(), taken.clone());
                loom::thread::spawn(move || {
                    // Complete one operation once at least one is in flight.
                    if taken.load(Ordering::Acquire) > 0 {
                        flow.release(0, 1);
                        1
                    } else {
                        0
                    }
                })
            };
            for t in takers {
                t.join().unwrap();
            }
            let released = completer.join().unwrap();
            let taken = taken.load(Ordering::Acquire);
            assert!(taken >= 2, "two credits are always available to the first takers");
            assert!(taken <= 3 && taken <= 2 + released);
            assert_eq!(flow.in_flight(0), taken - released);
        });
    }

    /// A two-credit request competes with one-credit requests: it succeeds only whole.
    #[test]
    fn loom_flow_multi_credit_requests_are_all_or_nothing() {
        loom::model(|| {
            let flow = Arc::new(FlowControl::new(1, 2));
            let f2 = flow.clone();
            let big = loom::thread::spawn(move || f2.try_acquire(0, 2));
            let small = flow.try_acquire(0, 1);
            let big = big.join().unwrap();
            assert!(!(big && small), "both cannot fit");
            assert!(big || small, "at least one fits");
            assert_eq!(flow.in_flight(0), if big { 2 } else { 1 });
        });
    }
}
