//! Interleaved trials: the order in which a row's contenders (weft, NCCL, …) run in each round
//! of timing, and the median and spread of one contender's trials.
//!
//! Clocks, power and the other tenants of a machine drift while a sweep runs: timing weft for
//! a while and then NCCL for a while lets the drift land on one of them. Every round times
//! each contender once, and the order reverses from one round to the next (A B C, C B A, A B
//! C, …), so every contender runs as often early in a round as late; the median over the
//! rounds then drops the odd trial a hiccup spoiled.

/// Trials of `weft bench` unless `--trials` says otherwise: odd, so the median is a trial.
pub const DEFAULT_TRIALS: usize = 7;

/// The order in which `contenders` contenders run in round `round` (from 0): indices into the
/// contenders, each once, forwards in even rounds and backwards in odd ones. Depends on
/// nothing else, so every rank runs the same sequence.
pub(crate) fn round_order(round: usize, contenders: usize) -> Vec<usize> {
    if round.is_multiple_of(2) { (0..contenders).collect() } else { (0..contenders).rev().collect() }
}

/// A contender's time per call over its trials: the median, and the fastest and slowest trial.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Median trial, µs per call (the mean of the middle two for an even number of trials).
    pub median: f64,
    /// Fastest trial, µs per call.
    pub min: f64,
    /// Slowest trial, µs per call.
    pub max: f64,
}

impl Timing {
    /// The median and spread of `trials` (µs per call each); `None` without trials.
    pub fn of(trials: &[f64]) -> Option<Self> {
        let mut sorted = trials.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let mid = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) { (sorted[mid - 1] + sorted[mid]) / 2.0 } else { sorted[mid] };
        Some(Self { median, min, max })
    }

    /// The slower of two ranks' timings, statistic by statistic (a collective is done when its
    /// slowest rank is). Each rank's min ≤ median ≤ max, so the result's are too.
    pub fn slowest(self, other: Self) -> Self {
        Self { median: self.median.max(other.median), min: self.min.max(other.min), max: self.max.max(other.max) }
    }

    /// The spread as a fraction of the median: (max − min) / median.
    pub fn relative_spread(&self) -> f64 {
        (self.max - self.min) / self.median
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_contender_once_and_the_order_alternates() {
        for contenders in 1..=4 {
            let rounds: Vec<Vec<usize>> = (0..7).map(|r| round_order(r, contenders)).collect();
            for order in &rounds {
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..contenders).collect::<Vec<_>>(), "a round runs each contender once");
            }
            for pair in rounds.windows(2) {
                let reversed: Vec<usize> = pair[0].iter().rev().copied().collect();
                assert_eq!(pair[1], reversed, "the next round runs them backwards");
            }
        }
        assert_eq!(round_order(0, 3), vec![0, 1, 2]);
        assert_eq!(round_order(1, 3), vec![2, 1, 0]);
        assert_eq!(round_order(0, 0), Vec::<usize>::new());
    }

    #[test]
    fn over_rounds_each_contender_runs_as_often_first_as_last() {
        let (contenders, rounds) = (2, 6);
        let firsts = (0..rounds).filter(|&r| round_order(r, contenders)[0] == 0).count();
        assert_eq!(firsts, rounds / 2);
    }

    #[test]
    fn the_median_ignores_one_spoiled_trial_and_the_spread_keeps_it() {
        let t = Timing::of(&[4.0, 3.9, 12.0, 4.1, 4.0]).unwrap();
        assert_eq!(t, Timing { median: 4.0, min: 3.9, max: 12.0 });
        assert!((t.relative_spread() - 8.1 / 4.0).abs() < 1e-12);
        assert_eq!(Timing::of(&[2.0, 1.0, 4.0, 3.0]).unwrap(), Timing { median: 2.5, min: 1.0, max: 4.0 });
        assert_eq!(Timing::of(&[5.0]).unwrap(), Timing { median: 5.0, min: 5.0, max: 5.0 });
        assert_eq!(Timing::of(&[]), None);
    }

    #[test]
    fn the_slowest_of_two_ranks_is_taken_statistic_by_statistic() {
        let a = Timing { median: 4.0, min: 3.0, max: 9.0 };
        let b = Timing { median: 5.0, min: 2.0, max: 6.0 };
        assert_eq!(a.slowest(b), Timing { median: 5.0, min: 3.0, max: 9.0 });
        assert_eq!(a.slowest(b), b.slowest(a));
    }
}
