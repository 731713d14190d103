//! Where a call between nodes spends its time on the GPU, for `WEFT_LOG=weft_ep::phases=debug`:
//! a timing event recorded on the call's stream at each phase boundary, and one log line per
//! call with the time between consecutive marks (the kernels, and the host's waits and launches
//! between them). Off unless that target logs at debug level: then no event is made and nothing
//! waits. On, the call waits for its stream before it returns, so the phases are exact and the
//! call's own time is not.

use std::fmt::Write as _;
use std::time::Instant;

use weft_gpu::{Event, Stream};

/// The log target.
pub(crate) const TARGET: &str = "weft_ep::phases";

/// The marks of one call.
pub(crate) struct PhaseTimer {
    op: &'static str,
    rank: usize,
    host_start: Instant,
    marks: Vec<(&'static str, Event)>,
}

impl PhaseTimer {
    /// A timer for `op` on `rank` whose first mark is recorded on `stream` now, or `None`
    /// when the target is off (or an event cannot be made: timing never fails a call).
    pub(crate) fn start(op: &'static str, rank: usize, stream: &Stream) -> Option<Self> {
        if !tracing::enabled!(target: TARGET, tracing::Level::DEBUG) {
            return None;
        }
        let mut timer = Self { op, rank, host_start: Instant::now(), marks: Vec::new() };
        timer.mark("start", stream);
        Some(timer)
    }

    /// Records mark `name` on `stream`: the phase since the previous mark ends here.
    pub(crate) fn mark(&mut self, name: &'static str, stream: &Stream) {
        if let Ok(event) = Event::new(stream.device())
            && event.record(stream).is_ok()
        {
            self.marks.push((name, event));
        }
    }

    /// Records the last mark, waits for `stream` and logs every phase's µs and the host's time
    /// from the start to the last launch.
    pub(crate) fn finish(mut self, name: &'static str, stream: &Stream) {
        let host_us = self.host_start.elapsed().as_secs_f64() * 1e6;
        self.mark(name, stream);
        if stream.wait_idle(std::time::Duration::from_secs(60), "EP phase timing").is_err() {
            return;
        }
        let mut line = String::new();
        for pair in self.marks.windows(2) {
            let us = pair[0].1.elapsed_ms(&pair[1].1).map_or(f64::NAN, |ms| f64::from(ms) * 1e3);
            let _ = write!(line, "{} {us:.1} µs, ", pair[1].0);
        }
        let total = match (self.marks.first(), self.marks.last()) {
            (Some(first), Some(last)) => first.1.elapsed_ms(&last.1).map_or(f64::NAN, |ms| f64::from(ms) * 1e3),
            _ => f64::NAN,
        };
        tracing::debug!(target: TARGET, "rank {} {}: {line}GPU total {total:.1} µs, host to the last launch {host_us:.1} µs", self.rank, self.op);
    }
}
