//! Executes a [`Schedule`] on host vectors, one per rank, with the schedule's rules (a step's
//! transfers read the state at the step's start), and checks the result is an AllReduce.

use std::ops::Add;

use crate::{Op, Schedule};

/// Runs `schedule` on `vectors` (one per rank, each `schedule.len` elements), in place.
///
/// # Panics
/// If `vectors` does not hold one vector of `schedule.len` elements per rank (a caller's
/// mistake, not a property of the schedule).
pub fn execute<T: Copy + Add<Output = T>>(schedule: &Schedule, vectors: &mut [Vec<T>]) {
    assert_eq!(vectors.len(), schedule.shape.ranks(), "one vector per rank");
    assert!(vectors.iter().all(|v| v.len() == schedule.len), "every vector holds the schedule's length");
    for step in &schedule.steps {
        let before = vectors.to_vec();
        for t in &step.transfers {
            let src = &before[t.src][t.range.clone()];
            let dst = &mut vectors[t.dst][t.range.clone()];
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = match t.op {
                    Op::Reduce => *d + s,
                    Op::Copy => s,
                };
            }
        }
    }
}

/// The element-wise sum of `vectors`.
pub fn sum<T: Copy + Add<Output = T>>(vectors: &[Vec<T>]) -> Vec<T> {
    let mut total = vectors.first().cloned().unwrap_or_default();
    for v in vectors.iter().skip(1) {
        for (t, &x) in total.iter_mut().zip(v) {
            *t = *t + x;
        }
    }
    total
}

/// Runs `schedule` on `inputs` and returns the ranks whose result differs from the exact sum
/// of the inputs (empty: the schedule is an AllReduce for these inputs).
pub fn wrong_ranks<T: Copy + Add<Output = T> + PartialEq>(schedule: &Schedule, inputs: &[Vec<T>]) -> Vec<usize> {
    let expected = sum(inputs);
    let mut vectors = inputs.to_vec();
    execute(schedule, &mut vectors);
    vectors.iter().enumerate().filter(|(_, v)| **v != expected).map(|(rank, _)| rank).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;
    use crate::{Algorithm, Shape};

    /// Distinct values per (rank, element) so a lost or doubled contribution shows: rank r's
    /// element i is (r + 1) · 1_000_003 + i · 7919 (+ a fraction for f64, exact in binary).
    fn inputs_i64(ranks: usize, len: usize) -> Vec<Vec<i64>> {
        (0..ranks).map(|r| (0..len).map(|i| (r as i64 + 1) * 1_000_003 + i as i64 * 7919).collect()).collect()
    }

    fn inputs_f64(ranks: usize, len: usize) -> Vec<Vec<f64>> {
        inputs_i64(ranks, len).into_iter().map(|v| v.into_iter().map(|x| x as f64 + 0.25).collect()).collect()
    }

    /// Every schedule on 2 to 64 nodes (powers of two and not), 1 to 4 GPUs per node, lengths
    /// that do and do not divide by the ranks, in i64 and f64: every rank ends with the exact sum.
    #[test]
    fn every_schedule_is_an_allreduce_from_2_to_64_nodes() {
        let algorithms = [
            Algorithm::Nvrar,
            Algorithm::TwoPhase,
            Algorithm::TwoPhaseRing,
            Algorithm::Ring,
            Algorithm::AllPairs,
            Algorithm::NcclRing,
            Algorithm::NcclTree,
        ];
        for nodes in (2..=64).filter(|&n| n <= 17 || n % 8 == 0 || n == 63) {
            for gpus in [1, 2, 3, 4] {
                let shape = Shape::new(nodes, gpus).unwrap();
                for len in [1, 7, 4 * shape.ranks() + 3] {
                    let ints = inputs_i64(shape.ranks(), len);
                    let floats = inputs_f64(shape.ranks(), len);
                    for algorithm in algorithms {
                        if matches!(algorithm, Algorithm::AllPairs | Algorithm::Ring | Algorithm::NcclRing)
                            && nodes > 16
                        {
                            continue; // flat over every rank: slow at 256 ranks, and not what this test is about
                        }
                        let schedule = Schedule::build(algorithm, shape, len, 2.0);
                        let what = format!("{} on {nodes} x {gpus}, {len} elements", algorithm.name());
                        assert_eq!(wrong_ranks(&schedule, &ints), Vec::<usize>::new(), "{what} (i64)");
                        assert_eq!(wrong_ranks(&schedule, &floats), Vec::<usize>::new(), "{what} (f64)");
                    }
                }
            }
        }
    }

    #[test]
    fn the_check_catches_a_schedule_that_loses_a_contribution() {
        let shape = Shape::new(6, 2).unwrap();
        let inputs = inputs_i64(shape.ranks(), 10);
        let mut schedule = Schedule::build(Algorithm::Nvrar, shape, 10, 2.0);
        assert!(wrong_ranks(&schedule, &inputs).is_empty());
        // Without the fix-up's hand-back, the folded nodes keep a partial sum.
        let hand_back = schedule.steps.len() - 1 - 1; // before the one all-gather step
        schedule.steps.remove(hand_back);
        assert!(!wrong_ranks(&schedule, &inputs).is_empty());
    }
}
