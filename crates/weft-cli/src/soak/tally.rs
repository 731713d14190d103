//! What a soak found: calls, bytes, wrong elements, failed calls and the slowest call, per rank
//! ([`Tally`], sent from every rank as JSON) and over every rank ([`Tally::merge`]), and the
//! summary line that ends the run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::case::Case;
use crate::harness::sweep::format_size;

/// A call that failed on some rank: wrong elements, outputs that differ between ranks where they
/// must not, or an error (a hang shows as one: every wait is bounded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub(crate) rank: usize,
    /// The call, `None` for a failure outside any call (set-up, a rank that died).
    pub(crate) index: Option<u64>,
    pub(crate) case: String,
    pub(crate) detail: String,
}

/// The slowest call: the longest of its checked launches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Slowest {
    pub(crate) index: u64,
    pub(crate) micros: u64,
    pub(crate) case: String,
}

/// What one rank (or, merged, the whole soak) saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tally {
    /// Calls made (every rank makes the same ones).
    pub(crate) calls: u64,
    /// Bytes the checked launches moved (nccl-tests' size of each, per rank).
    pub(crate) bytes: u64,
    /// Wrong output elements, over every rank.
    pub(crate) wrong: u64,
    pub(crate) failures: Vec<Failure>,
    pub(crate) slowest: Option<Slowest>,
}

/// One call's outcome on one rank.
pub(crate) struct CallOutcome {
    pub(crate) wrong: u64,
    /// Whether every rank's output was bitwise the same where it must be.
    pub(crate) identical: bool,
    pub(crate) slowest: Duration,
}

impl CallOutcome {
    /// What failed in a call that ran (wrong elements, ranks that differ), `None` if nothing.
    pub(crate) fn failure(&self) -> Option<String> {
        (self.wrong > 0 || !self.identical)
            .then(|| format!("{} wrong elements, ranks identical: {}", self.wrong, self.identical))
    }
}

impl Tally {
    /// Records `case` as `rank` saw it.
    pub(crate) fn record(&mut self, rank: usize, case: &Case, outcome: Result<CallOutcome, String>) {
        self.record_as(rank, case, &case.describe(), outcome);
    }

    /// Records `case`, run as `what` says, as `rank` saw it.
    pub(crate) fn record_as(&mut self, rank: usize, case: &Case, what: &str, outcome: Result<CallOutcome, String>) {
        self.calls += 1;
        self.bytes += case.bytes();
        let failure = |detail: String| Failure { rank, index: Some(case.index), case: what.to_string(), detail };
        match outcome {
            Ok(o) => {
                self.wrong += o.wrong;
                if let Some(detail) = o.failure() {
                    self.failures.push(failure(detail));
                }
                let micros = o.slowest.as_micros() as u64;
                if self.slowest.as_ref().is_none_or(|s| micros > s.micros) {
                    self.slowest = Some(Slowest { index: case.index, micros, case: what.to_string() });
                }
            }
            Err(e) => self.failures.push(failure(e)),
        }
    }

    /// The soak over every rank: the calls and bytes of one rank (the most any rank made),
    /// wrong elements and failures of all, the slowest call of any.
    pub(crate) fn merge(ranks: &[Tally]) -> Tally {
        let mut all = Tally::default();
        for t in ranks {
            all.calls = all.calls.max(t.calls);
            all.bytes = all.bytes.max(t.bytes);
            all.wrong += t.wrong;
            all.failures.extend(t.failures.iter().cloned());
            if let Some(s) = &t.slowest
                && all.slowest.as_ref().is_none_or(|a| s.micros > a.micros)
            {
                all.slowest = Some(s.clone());
            }
        }
        all.failures.sort_by_key(|f| (f.index, f.rank));
        all
    }

    /// Whether the soak passed: at least one call, no wrong element, no failed call.
    pub(crate) fn passed(&self) -> bool {
        self.calls > 0 && self.wrong == 0 && self.failures.is_empty()
    }

    /// The summary line: calls, bytes, wrong elements, failed calls, the slowest call with the
    /// command that replays it, and the seed.
    pub(crate) fn line(&self, replay: &Replay) -> String {
        let seed = replay.seed;
        let failed: std::collections::BTreeSet<Option<u64>> = self.failures.iter().map(|f| f.index).collect();
        let slowest = match &self.slowest {
            Some(s) => format!(
                "slowest call #{} {:.3} ms ({}; replay: {})",
                s.index,
                s.micros as f64 / 1e3,
                s.case,
                replay.command(s.index)
            ),
            None => "no call completed".to_string(),
        };
        format!(
            "soak: {} calls, {} bytes ({}B), {} wrong elements, {} failed calls, {slowest}, seed {seed}",
            self.calls,
            self.bytes,
            format_size(self.bytes as f64),
            self.wrong,
            failed.len()
        )
    }
}

/// What draws the same calls again: the seed, and the ranks and largest message the calls
/// were drawn for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replay {
    pub(crate) seed: u64,
    pub(crate) ranks: usize,
    pub(crate) max_bytes: usize,
}

impl Replay {
    /// The command that replays call `index` alone.
    pub(crate) fn command(&self, index: u64) -> String {
        let Replay { seed, ranks, max_bytes } = self;
        format!("weft soak --seed {seed} --ranks {ranks} --max-bytes {max_bytes} --only-call {index}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::case::{Generator, Limits};

    fn ok(wrong: u64, micros: u64) -> Result<CallOutcome, String> {
        Ok(CallOutcome { wrong, identical: true, slowest: Duration::from_micros(micros) })
    }

    #[test]
    fn the_summary_counts_calls_bytes_wrong_elements_and_the_slowest_call() {
        let l = Limits { ranks: 2, max_bytes: 1 << 20, ll_slot_bytes: 64 << 10 };
        let g = Generator::new(l);
        let cases: Vec<Case> = (0..4).map(|k| g.case(9, k)).collect();
        let mut rank0 = Tally::default();
        let mut rank1 = Tally::default();
        for (k, c) in cases.iter().enumerate() {
            rank0.record(0, c, ok(0, 10 + k as u64));
            let outcome = match k {
                1 => ok(3, 5),
                2 => Err("timed out".to_string()),
                3 => ok(0, 900),
                _ => ok(0, 1),
            };
            rank1.record(1, c, outcome);
        }
        let all = Tally::merge(&[rank0, rank1]);
        assert_eq!(all.calls, 4);
        assert_eq!(all.bytes, cases.iter().map(Case::bytes).sum::<u64>());
        assert_eq!(all.wrong, 3);
        assert_eq!(all.failures.iter().map(|f| (f.index, f.rank)).collect::<Vec<_>>(), [(Some(1), 1), (Some(2), 1)]);
        assert_eq!(all.slowest.as_ref().map(|s| (s.index, s.micros)), Some((3, 900)));
        assert!(!all.passed());
        let line = all.line(&Replay { seed: 9, ranks: 2, max_bytes: 1 << 20 });
        assert!(line.starts_with("soak: 4 calls, "), "{line}");
        assert!(line.contains(" 3 wrong elements, 2 failed calls, slowest call #3 0.900 ms"), "{line}");
        assert!(line.contains("replay: weft soak --seed 9 --ranks 2 --max-bytes 1048576 --only-call 3"), "{line}");
        assert!(line.ends_with("seed 9"), "{line}");
    }

    #[test]
    fn a_clean_soak_passes_and_an_empty_one_does_not() {
        assert!(!Tally::default().passed());
        let l = Limits { ranks: 1, max_bytes: 4096, ll_slot_bytes: 4096 };
        let (g, mut t) = (Generator::new(l), Tally::default());
        t.record(0, &g.case(1, 0), ok(0, 3));
        assert!(t.passed());
        // Outputs that differ between ranks fail the call even with every element right.
        t.record(0, &g.case(1, 1), Ok(CallOutcome { wrong: 0, identical: false, slowest: Duration::ZERO }));
        assert!(!t.passed());
        assert_eq!(t.wrong, 0);
    }
}
