//! A test aid: a transport that hands counter updates to the transport it wraps late and in a
//! seeded random order, as a carrier that reorders (SRD, the emulated NIC under chaos) delivers
//! them, so the receiver's sequence ordering is exercised over transports that keep order
//! (TCP).
//!
//! A submission holding an [`Op::Counter`] is held; every other one goes through at once. Each
//! [`Transport::progress`] call releases every held submission, in an order drawn from a
//! generator seeded with the seed. An update only ever moves later, never ahead of an operation
//! submitted before it, so a counter update still lands after the writes it announces. `lose`
//! names a counter update (the n-th, counting from 0 over this transport) that is never
//! released: a message lost for good, for testing a gap that never fills.
//!
//! Tickets are this transport's own: `completed` counts the submissions, in submission order,
//! whose operations the wrapped transport completed, so flushes and flow control keep their
//! meaning.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::{ConnectionId, Op, Submitted, Transport, TransportError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain queues behind; keep going with them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One submission.
#[derive(Debug)]
struct Entry {
    /// This transport's ticket after its last operation.
    end: u64,
    /// The wrapped transport's ticket after its last operation, once handed over.
    inner_end: Option<u64>,
    /// The operations, while held.
    ops: Vec<Op>,
    /// Never handed over.
    lost: bool,
}

#[derive(Debug, Default)]
struct Conn {
    submitted: u64,
    completed: u64,
    /// Submissions not known complete, in submission order.
    entries: VecDeque<Entry>,
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    conns: BTreeMap<ConnectionId, Conn>,
    /// Counter updates submitted so far.
    counters: u64,
}

/// Wraps a transport, reordering its counter updates (see the module docs).
#[derive(Debug)]
pub struct ReorderCounters {
    inner: Arc<dyn Transport>,
    lose: Option<u64>,
    state: Mutex<State>,
}

impl ReorderCounters {
    /// Reorders the counter updates submitted to `inner` with a generator seeded by `seed`;
    /// never hands over the `lose`-th one.
    pub fn new(inner: Arc<dyn Transport>, seed: u64, lose: Option<u64>) -> Self {
        let state = State { rng: StdRng::seed_from_u64(seed), conns: BTreeMap::new(), counters: 0 };
        Self { inner, lose, state: Mutex::new(state) }
    }
}

impl Transport for ReorderCounters {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        let mut state = lock(&self.state);
        let counters = ops.iter().filter(|op| matches!(op, Op::Counter { .. })).count() as u64;
        let lost = self.lose.is_some_and(|n| (state.counters..state.counters + counters).contains(&n));
        state.counters += counters;
        let submitted = state.conns.get(&connection).map_or(0, |c| c.submitted);
        if ops.is_empty() {
            self.inner.submitted(connection)?;
            return Ok(Submitted::Accepted { last: submitted.wrapping_sub(1) });
        }
        let inner_end = if counters > 0 {
            None
        } else {
            match self.inner.submit(connection, ops)? {
                Submitted::Full => return Ok(Submitted::Full),
                Submitted::Accepted { last } => Some(last + 1),
            }
        };
        let conn = state.conns.entry(connection).or_default();
        conn.submitted += ops.len() as u64;
        let held = if inner_end.is_none() { ops.to_vec() } else { Vec::new() };
        conn.entries.push_back(Entry { end: conn.submitted, inner_end, ops: held, lost });
        Ok(Submitted::Accepted { last: conn.submitted - 1 })
    }

    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        let inner_done = self.inner.completed(connection)?;
        let mut state = lock(&self.state);
        let Some(conn) = state.conns.get_mut(&connection) else { return Ok(0) };
        while let Some(entry) = conn.entries.front() {
            if entry.inner_end.is_none_or(|end| end > inner_done) {
                break;
            }
            conn.completed = entry.end;
            conn.entries.pop_front();
        }
        let (completed, outstanding) = (conn.completed, !conn.entries.is_empty());
        drop(state);
        // Operations are outstanding here even when the wrapped transport has applied all it
        // was given (held or lost updates): its failure is this connection's failure, and an
        // empty submission is how a transport reports a failure with nothing outstanding.
        if outstanding {
            self.inner.submit(connection, &[])?;
        }
        Ok(completed)
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.inner.submitted(connection)?;
        Ok(lock(&self.state).conns.get(&connection).map_or(0, |c| c.submitted))
    }

    fn progress(&self) -> Result<(), TransportError> {
        self.inner.progress()?;
        let mut state = lock(&self.state);
        let State { rng, conns, .. } = &mut *state;
        let mut held: Vec<(ConnectionId, usize)> = conns
            .iter()
            .flat_map(|(&c, conn)| {
                conn.entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.inner_end.is_none() && !e.lost)
                    .map(move |(i, _)| (c, i))
            })
            .collect();
        held.shuffle(rng);
        for (connection, index) in held {
            let Some(entry) = conns.get_mut(&connection).and_then(|c| c.entries.get_mut(index)) else { continue };
            match self.inner.submit(connection, &entry.ops)? {
                // Out of credit: stays held, released by a later call.
                Submitted::Full => {}
                Submitted::Accepted { last } => {
                    entry.inner_end = Some(last + 1);
                    entry.ops.clear();
                }
            }
        }
        Ok(())
    }

    fn shutdown(&self) {
        self.inner.shutdown();
    }
}
