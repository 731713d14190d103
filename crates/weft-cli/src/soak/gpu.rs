//! One rank of `weft soak` on a GPU: the soak's calls one after another, each drawn from the
//! seed ([`super::case`]), run through weft's collectives with its algorithm forced through the
//! selector (or the selector's pick) and checked by the harness ([`Checking`]) on every
//! rank. Rank 0 alone reads the clock: before each call it tells every rank whether to go on,
//! so the ranks always agree on the last call.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_bootstrap::Bootstrap;
use weft_coll::{Algorithm, CollConfig, Collectives};
use weft_core::{Communicator, Env};
use weft_gpu::{Device, DeviceBuffer};
use weft_types::{DataType, ReduceOp};

use super::case::{Case, Generator, Limits, Rounds};
use super::tally::{CallOutcome, Failure, Replay, Tally};
use super::{Progress, SoakOptions};
use crate::harness::data::Reference;
use crate::harness::rank::{Buffers, Call, Checking, Launch, Placement, Rank};

type BoxError = Box<dyn std::error::Error>;

/// Runs the soak as one rank of `bootstrap`'s group on GPU `ordinal`; `progress` prints rank 0's
/// progress lines.
pub(crate) fn run_rank(
    bootstrap: Arc<dyn Bootstrap>,
    ordinal: usize,
    env: &Env,
    options: &SoakOptions,
    progress: &mut Progress,
) -> Result<Tally, String> {
    let join =
        || -> Result<Communicator, BoxError> { Ok(Communicator::new(bootstrap, Device::new(ordinal)?, env.clone())?) };
    join().and_then(|comm| soak(&comm, env, options, progress)).map_err(|e| e.to_string())
}

fn soak(comm: &Communicator, env: &Env, options: &SoakOptions, progress: &mut Progress) -> Result<Tally, BoxError> {
    if comm.topology().spans_nodes() {
        return Err("weft soak runs within one node: unset WEFT_RANKS_PER_NODE".into());
    }
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let shipped = CollConfig::from_env(env)?;
    let limits = Limits { ranks, max_bytes: options.max_bytes, ll_slot_bytes: shipped.ll_slot_bytes };
    let (generator, me) = (Generator::new(limits), Rank::new(comm, limits.buffer_bytes())?);
    // PreMulSum's device scalar: one element of any type.
    let scalar = DeviceBuffer::<u8>::new(comm.device(), 8)?;
    let mut soak =
        Soak { me: &me, comm, shipped, scalar: &scalar, collectives: HashMap::new(), prepared: HashSet::new() };
    let deadline = Instant::now() + options.duration();
    let mut tally = Tally::default();
    let calls: Box<dyn Iterator<Item = u64>> = match options.only_call {
        Some(k) => Box::new(std::iter::once(k)),
        None => Box::new(0..),
    };
    for index in calls {
        if options.only_call.is_none() {
            match go_on(&*me.bootstrap, Instant::now() < deadline) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    let detail = format!("no word from rank 0 before call #{index}: {e}");
                    tally.failures.push(Failure { rank, index: None, case: "between calls".into(), detail });
                    break;
                }
            }
        }
        let case = generator.case(options.seed, index);
        let outcome = soak.call(&case);
        let stop = outcome.is_err();
        let failure = match &outcome {
            Ok(o) => o.failure(),
            Err(e) => Some(e.to_string()),
        };
        if let Some(detail) = failure {
            eprintln!(
                "soak: rank {rank}: call #{index} failed: {}: {detail} (replay: {})",
                case.describe(),
                Replay { seed: options.seed, ranks, max_bytes: options.max_bytes }.command(index)
            );
        }
        tally.record(rank, &case, outcome.map_err(|e| e.to_string()));
        if rank == 0 {
            progress.update(&tally);
        }
        if stop {
            // After an error the ranks may no longer be at the same step of a call: stop here
            // (the others stop at their own error, or at rank 0's word).
            let _ = me.stream.wait_idle(Duration::from_secs(60), "a failed call");
            let _ = comm.clear_device_failure();
            break;
        }
    }
    Ok(tally)
}

/// Rank 0's word on whether to make another call (`mine` on rank 0), the same on every rank.
fn go_on(bootstrap: &dyn Bootstrap, mine: bool) -> Result<bool, BoxError> {
    Ok(bootstrap.broadcast(0, Some(&[u8::from(mine)]))?.first() == Some(&1))
}

/// What one rank's calls share.
struct Soak<'a> {
    me: &'a Rank,
    comm: &'a Communicator,
    /// The collectives' configuration from the environment (the shipped one unless set).
    shipped: CollConfig,
    scalar: &'a DeviceBuffer<u8>,
    /// The collectives of each (rounds, forced algorithm) drawn so far, set up on first use (in
    /// the same order on every rank: every rank draws the same calls).
    collectives: HashMap<(Rounds, Option<Algorithm>), Collectives>,
    /// The (collectives, type, operator) whose kernels are loaded.
    prepared: HashSet<((Rounds, Option<Algorithm>), DataType, ReduceOp)>,
}

impl Soak<'_> {
    /// Runs and checks `case` on this rank.
    fn call(&mut self, case: &Case) -> Result<CallOutcome, BoxError> {
        let key = (case.rounds, case.algorithm);
        if !self.collectives.contains_key(&key) {
            let mut config = case.rounds.config(&self.shipped);
            if let Some(a) = case.algorithm {
                config.selector.force(a);
            }
            self.collectives.insert(key, Collectives::new(self.comm, config)?);
        }
        let coll = &self.collectives[&key];
        // Kernels compile on first use, seconds each: compiled and loaded on every rank before
        // any launches, so that no rank's kernels wait on a peer that is still compiling.
        if self.prepared.insert((key, case.dtype, case.op.op())) {
            coll.prepare(case.dtype, case.op.op())?;
            self.me.barrier()?;
        }
        let (me, rank, ranks) = (self.me, self.comm.rank(), self.comm.world_size());
        let call = Call {
            collective: case.collective,
            shape: case.shape,
            dtype: case.dtype,
            op: case.op.reduction(case.dtype, rank as u32, self.scalar)?,
            rank,
            ranks,
            stream: &me.stream,
        };
        let ran = Cell::new(None);
        let run = |buffers: &mut Buffers, placement: Placement| {
            ran.set(Some(call.weft(coll, buffers, placement)?));
            Ok(())
        };
        let reference = Reference { dtype: case.dtype, op: case.op.op(), seed: case.data_seed, ranks: ranks as u32 };
        // A captured call first runs eagerly (checked as well), as an application warms up
        // before it captures: what a call sets up on first use (kernel compiles, a plan's
        // executor, staging buffers) allocates, which a capture cannot.
        let launches: &[(Placement, Launch)] = match case.launch {
            Launch::Eager => &[(case.placement, Launch::Eager)],
            graph => &[(case.placement, Launch::Eager), (case.placement, graph)],
        };
        let checked = Checking { me, call: &call, run: &run, reference: &reference }.launches(launches)?;
        let outcome = CallOutcome { wrong: checked.wrong, identical: checked.identical, slowest: checked.slowest };
        // A forced algorithm must be the one that ran (the selector refuses rather than falls
        // back), or for all-to-all and send/receive `ll`, the algorithm that carries through
        // scratch the directions too large for its packets.
        if let (Some(forced), Some(ran)) = (case.algorithm, ran.get())
            && ran != forced
            && Some(ran) != forced.through_scratch()
        {
            return Err(format!("{forced} was forced, {ran} ran").into());
        }
        Ok(outcome)
    }
}
