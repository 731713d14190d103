//! Outcomes of self-test items, merged over ranks and printed.

use serde::{Deserialize, Serialize};

/// One test item as one rank saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    /// Test name, identical on every rank that takes part.
    pub test: String,
    /// Whether this rank saw it pass.
    pub passed: bool,
    /// What went wrong (empty when passed).
    pub detail: String,
}

/// A measurement.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Metric {
    /// What was measured.
    pub name: String,
    /// Value.
    pub value: f64,
    /// Unit.
    pub unit: String,
}

/// Everything one rank reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RankReport {
    /// Test outcomes in execution order.
    pub outcomes: Vec<Outcome>,
    /// Measurements.
    pub metrics: Vec<Metric>,
    /// Checks this rank could not run, each with the reason (the same text on every rank).
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl RankReport {
    /// Records an outcome from a result.
    pub fn record<E: std::fmt::Display>(&mut self, test: impl Into<String>, result: Result<(), E>) {
        let (passed, detail) = match result {
            Ok(()) => (true, String::new()),
            Err(e) => (false, e.to_string()),
        };
        let test = test.into();
        // Live, for a run cut short (WEFT_LOG=weft_cli::selftest=info): the summary comes at the end.
        tracing::info!("{} {test}{}{detail}", if passed { "PASS" } else { "FAIL" }, if passed { "" } else { ": " });
        self.outcomes.push(Outcome { test, passed, detail });
    }

    /// Records a check that could not run, with the reason: counted apart, never as passed.
    pub fn skip(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!("SKIP {what}");
        self.skipped.push(what);
    }

    /// Records a measurement.
    pub fn metric(&mut self, name: impl Into<String>, value: f64, unit: &str) {
        self.metrics.push(Metric { name: name.into(), value, unit: unit.into() });
    }
}

/// Outcomes merged over ranks: a test passes when every rank that ran it passed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// `(test, passed, details)` in first-seen order.
    pub tests: Vec<(String, bool, Vec<String>)>,
    /// `(rank, metric)`.
    pub metrics: Vec<(usize, Metric)>,
    /// Checks that could not run here, each with the reason: counted apart, never as passed.
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl Summary {
    /// Merges per-rank reports (indexed by rank).
    pub fn merge(reports: &[RankReport]) -> Self {
        let mut summary = Self::default();
        for (rank, report) in reports.iter().enumerate() {
            for o in &report.outcomes {
                let index = match summary.tests.iter().position(|(t, _, _)| *t == o.test) {
                    Some(i) => i,
                    None => {
                        summary.tests.push((o.test.clone(), true, Vec::new()));
                        summary.tests.len() - 1
                    }
                };
                let entry = &mut summary.tests[index];
                if !o.passed {
                    entry.1 = false;
                    entry.2.push(format!("rank {rank}: {}", o.detail));
                }
            }
            summary.metrics.extend(report.metrics.iter().map(|m| (rank, m.clone())));
            for s in &report.skipped {
                if !summary.skipped.contains(s) {
                    summary.skipped.push(s.clone());
                }
            }
        }
        summary
    }

    /// Adds another summary's tests and metrics (e.g. a second mode).
    pub fn extend(&mut self, other: Summary) {
        self.tests.extend(other.tests);
        self.metrics.extend(other.metrics);
        self.skipped.extend(other.skipped);
    }

    /// Number of passed and failed tests.
    pub fn counts(&self) -> (usize, usize) {
        let passed = self.tests.iter().filter(|t| t.1).count();
        (passed, self.tests.len() - passed)
    }

    /// Prints every test, every metric, and the final `N passed, M failed` line.
    pub fn print(&self) {
        for (test, passed, details) in &self.tests {
            println!("{} {test}", if *passed { "PASS" } else { "FAIL" });
            for d in details {
                println!("       {d}");
            }
        }
        if !self.metrics.is_empty() {
            println!("measurements:");
            for (rank, m) in &self.metrics {
                println!("  rank {rank}: {:<48} {:>10.3} {}", m.name, m.value, m.unit);
            }
        }
        for s in &self.skipped {
            println!("SKIP {s}");
        }
        println!("{}", self.closing_line());
    }

    /// `N passed, M failed`, with `, K skipped` when something could not run.
    pub fn closing_line(&self) -> String {
        let (passed, failed) = self.counts();
        match self.skipped.len() {
            0 => format!("{passed} passed, {failed} failed"),
            skipped => format!("{passed} passed, {failed} failed, {skipped} skipped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_fails_when_any_rank_failed() {
        let mut a = RankReport::default();
        a.record::<String>("x", Ok(()));
        a.record("y", Err("boom"));
        let mut b = RankReport::default();
        b.record("x", Err("late"));
        b.record::<String>("z", Ok(()));
        let s = Summary::merge(&[a, b]);
        assert_eq!(s.counts(), (1, 2));
        assert_eq!(s.tests[0].2, vec!["rank 1: late".to_string()]);
    }

    #[test]
    fn skips_are_counted_apart_from_passes() {
        let mut a = RankReport::default();
        a.record::<String>("x", Ok(()));
        let mut summary = Summary::merge(&[a]);
        assert_eq!(summary.closing_line(), "1 passed, 0 failed");
        summary.skipped.push("NVRTC compile checks: libnvrtc missing".into());
        assert_eq!(summary.closing_line(), "1 passed, 0 failed, 1 skipped");
    }

    #[test]
    fn a_skip_every_rank_reports_counts_once() {
        let mut a = RankReport::default();
        a.skip("plan:x at 3 ranks: no such layout");
        let mut b = a.clone();
        b.skip("only rank 1 saw this");
        let summary = Summary::merge(&[a, b]);
        assert_eq!(summary.skipped.len(), 2);
        assert_eq!(summary.closing_line(), "0 passed, 0 failed, 2 skipped");
    }
}
