//! The proxy's ordering of signals after data when a carrier completes a connection's
//! operations out of order.
//!
//! A carrier that keeps order (one CUDA stream, TCP's reorder buffer, an RC queue pair) puts a
//! signal after the data before it by itself. A carrier that may land a later write before an
//! earlier one (the emulated NIC under `WEFT_EMU_NET_CHAOS`) does not, so the proxy orders
//! explicitly: a [`Fence`] per connection records which operations completed at the target, in
//! any order, and clears the signal of ticket `t` only once every operation below `t` is
//! complete (the data and the earlier signals alike, so the peer's token also stays monotonic).
//! [`Fence::completed`] is the length of the completed prefix of tickets: what
//! `Transport::completed` reports and a flush waits for, so a finished flush means every earlier
//! operation is complete at the target, whatever order they landed in.
//!
//! Checked by a property test of the emulated NIC's release logic (`pacing::tests`), which
//! finds a signal landing before its data once the fence is taken out.

use std::collections::BTreeSet;

/// Completion of one connection's operations, in any order, and the signals it clears.
#[derive(Debug)]
pub struct Fence {
    /// Tickets below this are complete.
    completed: u64,
    /// Complete tickets above `completed`: operations that landed early.
    early: BTreeSet<u64>,
    /// Whether signals wait for the operations before them; false only in the tests that
    /// show the model checker finds the violation without the fence.
    ordered: bool,
}

impl Default for Fence {
    fn default() -> Self {
        Self { completed: 0, early: BTreeSet::new(), ordered: true }
    }
}

impl Fence {
    /// Nothing complete yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fence that clears every signal at once: the ordering step removed.
    #[cfg(test)]
    pub(crate) fn without_ordering() -> Self {
        Self { ordered: false, ..Self::default() }
    }

    /// Whether the signal of ticket `ticket` may go: every operation before it is complete.
    pub fn clears(&self, ticket: u64) -> bool {
        !self.ordered || self.completed >= ticket
    }

    /// Records that operation `ticket` is complete at the target; returns the completed prefix.
    /// A ticket reported twice counts once.
    pub fn complete(&mut self, ticket: u64) -> u64 {
        if ticket >= self.completed {
            self.early.insert(ticket);
            while self.early.remove(&self.completed) {
                self.completed += 1;
            }
        }
        self.completed
    }

    /// Operations complete with every operation before them (the tickets below it).
    pub fn completed(&self) -> u64 {
        self.completed
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn the_prefix_advances_only_over_contiguous_tickets_and_clears_signals_behind_it() {
        let mut fence = Fence::new();
        assert!(fence.clears(0), "a first signal has nothing before it");
        assert!(!fence.clears(2));
        assert_eq!(fence.complete(1), 0, "ticket 0 is still outstanding");
        assert_eq!(fence.complete(1), 0, "twice counts once");
        assert!(!fence.clears(2));
        assert_eq!(fence.complete(0), 2);
        assert!(fence.clears(2));
        assert_eq!(fence.complete(0), 2, "a ticket below the prefix changes nothing");
        assert_eq!(fence.complete(3), 2);
        assert_eq!(fence.complete(2), 4);
        assert!(Fence::without_ordering().clears(7));
    }
}
