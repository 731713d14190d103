//! Mixed placement through a window (step `plan`, two ranks or more, one node): through a
//! registered window each rank decides alone whether a plan call runs into every rank's output
//! (zero-copy) or stages through scratch, and the plan executor's entry fence carries that
//! choice. The all-to-all plan, which does not verify in place, is called with rank 0's output
//! at the window's start (zero-copy) and every other rank's 4 bytes further (not 16-byte
//! aligned: it stages). weft-coll stages an in-place all-to-all's input before the launch and
//! every rank must share one configuration, so an offset of its own is how a rank of the
//! collective API places such a call otherwise. Every rank must fail with the placement
//! mismatch, naming a peer that chose otherwise, well before the device timeout, and leave its
//! buffer as it was.

use std::time::{Duration, Instant};

use weft_coll::{Algorithm, CollConfig, Collectives, Nodes, PlanId};
use weft_core::{Communicator, Env, Error, PLACEMENT_MISMATCH_OP};
use weft_gpu::{DeviceBuffer, Stream};

use super::report::RankReport;

/// The plan: not verified in place, its peers write the ranks' outputs.
const PLAN: &str = "plan:two_step_alltoall";
/// Elements of every rank's block (whole 16-byte vectors: the call may run zero-copy).
const BLOCK: usize = 4096;
const POISON: f32 = -7.5;

type BoxError = Box<dyn std::error::Error>;

/// Runs the check on `comm` (two ranks or more, one node), one outcome in all.
pub(super) fn run(comm: &Communicator, env: &Env, label: &str, report: &mut RankReport) {
    let ranks = comm.world_size();
    if ranks < 2 || comm.topology().spans_nodes() {
        return;
    }
    let what = format!(
        "{label}{PLAN} through a window with mixed placement (rank 0 zero-copy, the others staged at an offset of their own): every rank fails with the placement mismatch within the timeout, outputs untouched"
    );
    let Some(id) = PlanId::all().find(|id| id.name() == PLAN) else {
        report.skip(format!("{what}: no plan {PLAN}"));
        return;
    };
    if let Err(why) = id.plan_at(&Nodes::one(ranks), 0) {
        report.skip(format!("{what}: {why}"));
        return;
    }
    report.record(what, check(comm, env, id).map_err(|e| e.to_string()));
}

fn check(comm: &Communicator, env: &Env, id: PlanId) -> Result<(), BoxError> {
    let (me, ranks) = (comm.rank(), comm.world_size());
    let mut config = CollConfig::from_env(env)?;
    config.selector.force(Algorithm::Plan(id));
    config.zero_copy_plan_min = 0;
    let coll = Collectives::new(comm, config)?;
    let stream = Stream::new(comm.device())?;
    let n = ranks * BLOCK;
    let input: Vec<f32> = (0..n).map(|i| (me * n + i) as f32).collect();
    let send = DeviceBuffer::from_host(comm.device(), &input)?;
    // One element to spare: rank 0's output starts at the window's start, the others' 4 bytes on.
    let mut recv = DeviceBuffer::from_host(comm.device(), &vec![POISON; n + 1])?;
    let window = coll.register_window(&recv)?;
    // Every rank deregisters (a collective exchange) whatever became of its call.
    let outcome = (|| -> Result<(), BoxError> {
        let at = usize::from(me != 0);
        let started = Instant::now();
        let called = coll.all_to_all(&send.as_slice(), &mut recv.slice_mut(at..at + n)?, &stream);
        stream.wait_idle(env.device_timeout + Duration::from_secs(60), "the mixed all-to-all")?;
        let elapsed = started.elapsed();
        let failure = comm.check_device();
        comm.clear_device_failure()?;
        judge(me, called.map(|_| ()).map_err(|e| e.to_string()), failure, elapsed, env.device_timeout)?;
        if recv.to_vec()?.iter().any(|&x| x != POISON) {
            return Err("the failed call wrote the output".into());
        }
        Ok(())
    })();
    coll.deregister_window(&window)?;
    outcome
}

/// Rank `me`'s verdict: the call enqueued, and the device recorded the placement mismatch with
/// a peer that chose otherwise (rank 0 ran into the outputs, the others staged), sooner than
/// the device timeout would have fired.
fn judge(
    me: usize,
    called: Result<(), String>,
    failure: Result<(), Error>,
    elapsed: Duration,
    timeout: Duration,
) -> Result<(), String> {
    called.map_err(|e| format!("the call failed on the host: {e}"))?;
    let mine = u64::from(me == 0);
    match failure {
        Err(Error::PeerMismatch(f))
            if f.op == PLACEMENT_MISMATCH_OP
                && f.rank == me as i32
                && f.expected == mine
                && f.observed == 1 - mine
                && (me == 0) != (f.peer == 0) =>
        {
            if elapsed >= timeout {
                return Err(format!("the mismatch took {elapsed:?}, past the {timeout:?} timeout"));
            }
            Ok(())
        }
        Err(e) => Err(format!("expected the placement mismatch, got: {e}")),
        Ok(()) => Err("the call ran although the ranks placed it differently".into()),
    }
}

#[cfg(test)]
mod tests {
    use weft_core::DeviceFailure;

    use super::*;

    fn mismatch(rank: i32, peer: i32, expected: u64) -> Result<(), Error> {
        let f =
            DeviceFailure { rank, peer, op: PLACEMENT_MISMATCH_OP, expected, observed: 1 - expected, mismatch: true };
        Err(Error::PeerMismatch(f))
    }

    /// Only the mismatch with a peer of the other choice, in time, passes.
    #[test]
    fn only_the_placement_mismatch_in_time_passes() {
        let (fast, timeout) = (Duration::from_millis(20), Duration::from_secs(5));
        assert_eq!(judge(0, Ok(()), mismatch(0, 1, 1), fast, timeout), Ok(()));
        assert_eq!(judge(2, Ok(()), mismatch(2, 0, 0), fast, timeout), Ok(()));
        // A peer that chose alike, this rank's choice misread, too late, ran, or timed out.
        assert!(judge(2, Ok(()), mismatch(2, 1, 0), fast, timeout).is_err());
        assert!(judge(1, Ok(()), mismatch(1, 0, 1), fast, timeout).is_err());
        assert!(judge(0, Ok(()), mismatch(0, 1, 1), timeout, timeout).is_err());
        assert!(judge(0, Ok(()), Ok(()), fast, timeout).unwrap_err().contains("ran although"));
        let stalled =
            DeviceFailure { rank: 0, peer: 1, op: "semaphore wait", expected: 3, observed: 2, mismatch: false };
        assert!(judge(0, Ok(()), Err(Error::PeerTimeout(stalled)), fast, timeout).unwrap_err().contains("timed out"));
        assert!(judge(0, Err("refused".into()), mismatch(0, 1, 1), fast, timeout).is_err());
    }
}
