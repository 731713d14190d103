//! Checked calls (step `coll`, two ranks or more): with `WEFT_CHECK_CALLS` on, calls whose
//! ranks disagree on the type, the count or the root fail on every rank with the same text
//! naming both calls, a call one rank refuses (its buffers do not fit) fails at once on the
//! others naming it, and every output is left as it was (nothing was launched anywhere); calls
//! that agree before and after run and are checked element by element, so the communicator
//! stays usable after a refused call.

use std::time::Duration;

use weft_coll::{CollConfig, CollError, Collectives, ReduceOp};
use weft_core::{Communicator, Env};
use weft_gpu::{DeviceBuffer, Stream};

use super::report::RankReport;

/// Elements of every call.
const COUNT: usize = 1000;
const POISON: f32 = -7.5;

type BoxError = Box<dyn std::error::Error>;

/// Runs the checks on `comm` (two ranks or more), one outcome in all.
pub(super) fn run(comm: &Communicator, env: &Env, label: &str, report: &mut RankReport) {
    if comm.world_size() < 2 {
        return;
    }
    let what = format!(
        "{label}checked calls: a type, count and root mismatch and a call refused on one rank each fail on every rank and launch nothing; agreeing calls around them are right"
    );
    report.record(what, check(comm, env).map_err(|e| e.to_string()));
}

fn check(comm: &Communicator, env: &Env) -> Result<(), BoxError> {
    let coll = Collectives::new(comm, CollConfig { check_calls: true, ..CollConfig::from_env(env)? })?;
    let stream = Stream::new(comm.device())?;
    let (me, ranks) = (comm.rank(), comm.world_size());
    let input: Vec<f32> = (0..COUNT + 1).map(|i| ((me + 1) * (i % 13)) as f32).collect();
    let send = DeviceBuffer::from_host(comm.device(), &input)?;
    let mut recv = DeviceBuffer::from_host(comm.device(), &[POISON; COUNT + 1])?;
    let send_i32 = DeviceBuffer::from_host(comm.device(), &[1i32; COUNT])?;
    let mut recv_i32 = DeviceBuffer::from_host(comm.device(), &[0i32; COUNT])?;
    let calls = Calls { coll: &coll, stream: &stream, ranks };
    calls.agreeing(&send, &mut recv, "the first agreeing call")?;

    // Rank 0 sums f32 where the others sum i32 of the same bytes.
    recv.copy_from_host(&[POISON; COUNT + 1])?;
    let outcome = if me == 0 {
        coll.all_reduce(&send.slice(..COUNT)?, &mut recv.slice_mut(..COUNT)?, ReduceOp::Sum, &stream)
    } else {
        coll.all_reduce(&send_i32.as_slice(), &mut recv_i32.as_mut_slice(), ReduceOp::Sum, &stream)
    };
    refused("a type mismatch", outcome, &["f32", "i32"])?;
    // The last rank reduces one element more.
    let count = if me == ranks - 1 { COUNT + 1 } else { COUNT };
    let outcome = coll.all_reduce(&send.slice(..count)?, &mut recv.slice_mut(..count)?, ReduceOp::Sum, &stream);
    refused("a count mismatch", outcome, &[&format!("of {COUNT} f32"), &format!("of {} f32", COUNT + 1)])?;
    // The last rank's own buffers do not fit its call: it reports that, the others learn it
    // at once (not after the bootstrap timeout).
    let started = std::time::Instant::now();
    let outcome = if me == ranks - 1 {
        coll.all_reduce(&send.slice(..COUNT)?, &mut recv.slice_mut(..COUNT + 1)?, ReduceOp::Sum, &stream)
    } else {
        coll.all_reduce(&send.slice(..COUNT)?, &mut recv.slice_mut(..COUNT)?, ReduceOp::Sum, &stream)
    };
    match outcome {
        Err(CollError::Length { .. }) if me == ranks - 1 => {}
        other if me == ranks - 1 => return Err(format!("a call with buffers of two lengths: {other:?}").into()),
        other => refused("a peer's refused call", other, &[&format!("rank {} refused", ranks - 1)])?,
    }
    if started.elapsed() > Duration::from_secs(5) {
        return Err(format!("a peer's refused call took {:?} to fail", started.elapsed()).into());
    }
    // Every rank names itself the root, of a buffer holding its own rank: had the broadcast
    // run, some rank would hold another's.
    let own = vec![me as f32; COUNT];
    let mut rooted = DeviceBuffer::from_host(comm.device(), &own)?;
    let outcome = coll.broadcast_in_place(&mut rooted.as_mut_slice(), me, &stream);
    refused("a root mismatch", outcome, &["from rank 0", "from rank 1"])?;
    stream.wait_idle(Duration::from_secs(60), "the refused calls")?;
    if recv.to_vec()?.iter().any(|&x| x != POISON)
        || recv_i32.to_vec()?.iter().any(|&x| x != 0)
        || rooted.to_vec()? != own
    {
        return Err("a refused call wrote its output".into());
    }
    calls.agreeing(&send, &mut recv, "the agreeing call after the refused ones")
}

struct Calls<'a> {
    coll: &'a Collectives,
    stream: &'a Stream,
    ranks: usize,
}

impl Calls<'_> {
    /// An AllReduce every rank makes alike, every element checked and the poison after the
    /// output kept.
    fn agreeing(&self, send: &DeviceBuffer<f32>, recv: &mut DeviceBuffer<f32>, when: &str) -> Result<(), BoxError> {
        recv.copy_from_host(&[POISON; COUNT + 1])?;
        self.coll.all_reduce(&send.slice(..COUNT)?, &mut recv.slice_mut(..COUNT)?, ReduceOp::Sum, self.stream)?;
        self.stream.wait_idle(Duration::from_secs(60), "a checked AllReduce")?;
        let got = recv.to_vec()?;
        // Sum of (r + 1) * (i % 13) over the ranks: small integers, exact in f32.
        let expected = |i: usize| ((self.ranks * (self.ranks + 1) / 2) * (i % 13)) as f32;
        if let Some(i) = (0..COUNT).find(|&i| got[i] != expected(i)) {
            return Err(format!("{when}: element {i} is {}, expected {}", got[i], expected(i)).into());
        }
        if got[COUNT] != POISON {
            return Err(format!("{when}: the element after the output was written").into());
        }
        Ok(())
    }
}

/// Whether `outcome` is a mismatch whose text names every one of `names`.
fn refused(what: &str, outcome: Result<weft_coll::Algorithm, CollError>, names: &[&str]) -> Result<(), BoxError> {
    match outcome {
        Err(CollError::Mismatch { detail, .. }) if names.iter().all(|n| detail.contains(n)) => Ok(()),
        Err(e) => Err(format!("{what}: expected a mismatch naming {names:?}, got: {e}").into()),
        Ok(_) => Err(format!("{what}: ran although the ranks disagree").into()),
    }
}
