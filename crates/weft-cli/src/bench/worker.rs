//! One rank of `weft bench`: set up weft (and NCCL), then for every size check both, and time
//! both in interleaved trials.

use std::cell::RefCell;
use std::sync::Arc;

use weft_bootstrap::{Bootstrap, TorchrunEnv};
use weft_coll::nccl::{Nccl, NcclComm};
use weft_coll::{Algorithm, CollConfig, Collectives};
use weft_core::{Communicator, Env};
use weft_gpu::Device;

use super::{BenchOptions, Contender, Row, sizes};
use crate::harness::data::{self, Reference};
use crate::harness::rank::{
    Buffers, Call, CallFn, CallOp, Checking, Placement, Rank, Run, every_launch, nccl_launches, shared_seed,
};
use crate::harness::start_line::StartLine;
use crate::harness::trials::Timing;
use crate::harness::{NcclTests, launch, progress};

type BoxError = Box<dyn std::error::Error>;

/// One rank per process (started by `weft bench` or by torchrun), on GPU `LOCAL_RANK`, meeting
/// its peers through `bootstrap`: its rows. Rank 0 calls `record` with each size it finishes.
pub(super) fn run_on(
    options: &BenchOptions,
    bootstrap: Arc<dyn Bootstrap>,
    torchrun: &TorchrunEnv,
    record: &mut dyn FnMut(usize),
) -> Result<Vec<Row>, BoxError> {
    run_rank(options, bootstrap, torchrun.local_rank.unwrap_or(torchrun.rank), Env::from_process()?, record)
}

/// `ranks` ranks as threads of this process, placed on `options.gpus` GPUs round-robin and
/// sharing them (`WEFT_SHARE_GPUS`): every rank's rows, in rank order.
pub(super) fn run_threads(options: &BenchOptions, ranks: usize) -> Result<Vec<Vec<Row>>, BoxError> {
    let mut env = Env::from_process()?;
    env.share_gpus = true;
    let (gpus, shared) = (options.gpus.max(1), options.clone());
    let outcomes = launch::run_rank_threads(ranks, "weft-bench", move |rank, bootstrap| {
        run_rank(&shared, bootstrap, rank % gpus, env.clone(), &mut progress::record).map_err(|e| e.to_string())
    })?;
    // Every rank's outcome: the first failure is often what made its peers time out.
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(Ok(r)) => rows.push(r),
            Ok(Err(e)) => failures.push(format!("rank {rank}: {e}")),
            Err(_) => failures.push(format!("rank {rank} panicked")),
        }
    }
    if failures.is_empty() { Ok(rows) } else { Err(failures.join("; ").into()) }
}

/// One rank of the benchmark on GPU `gpu`, meeting its peers through `bootstrap`; rank 0 calls
/// `record` with each size it finishes.
fn run_rank(
    options: &BenchOptions,
    bootstrap: Arc<dyn Bootstrap>,
    gpu: usize,
    env: Env,
    record: &mut dyn FnMut(usize),
) -> Result<Vec<Row>, BoxError> {
    let device = Device::new(gpu)?;
    let trace_dir = options.trace.as_deref();
    let env = super::trace::traced_env(env, trace_dir, &options.collective.to_string())?;
    let comm = Communicator::new(Arc::clone(&bootstrap), device.clone(), env.clone())?;
    let rank = comm.rank();
    let ranks = comm.world_size();
    let coll = Collectives::new(&comm, CollConfig::from_env(&env)?)?;
    coll.prepare(options.dtype, options.op)?;
    let versus = match &options.versus {
        Some(name) => {
            let algorithm = Algorithm::from_name(options.collective, name)
                .ok_or_else(|| format!("--versus {name}: not an algorithm of {}", options.collective))?;
            let mut config = CollConfig::from_env(&env)?;
            config.selector.force(algorithm);
            let versus = Collectives::new(&comm, config)?;
            versus.prepare(options.dtype, options.op)?;
            Some(versus)
        }
        None => None,
    };
    let nccl = if options.nccl || options.nccl_windows { Some(Nccl::load(&env)?) } else { None };
    let nccl_comm: Option<NcclComm<'_>> = match &nccl {
        Some(lib) => {
            let id = if rank == 0 { lib.unique_id()?.to_vec() } else { Vec::new() };
            let id = bootstrap.broadcast(0, (rank == 0).then_some(id.as_slice()))?;
            let id: [u8; 128] = id.try_into().map_err(|_| "bad NCCL unique id")?;
            device.bind()?;
            Some(lib.init_rank(id, rank, ranks)?)
        }
        None => None,
    };
    // `--model`'s parameters for the model column (its file was checked when read).
    let model_params = options.model.as_ref().and_then(|f| f.params().ok());
    let size = options.dtype.size();
    let max = options.max_bytes.max(size);
    let me = Rank::new(&comm, max)?;
    let start_line = StartLine::new(&comm)?;
    let buffers = me.buffers.borrow();
    let weft_windows = if options.windows {
        Some([coll.register_window(&buffers.send)?, coll.register_window(&buffers.recv)?])
    } else {
        None
    };
    drop(buffers);
    // NCCL's windowed buffers, of NCCL's own memory, as long as the rank's: the windowed calls
    // run on them in the layout the others use on the rank's buffers.
    let nccl_buffers: Option<RefCell<Buffers>> = match (&nccl_comm, options.nccl_windows) {
        (Some(nc), true) => {
            Some(RefCell::new(Buffers { send: nc.mem_alloc(&device, max)?, recv: nc.mem_alloc(&device, max)? }))
        }
        _ => None,
    };
    let nccl_windows = match (&nccl_comm, &nccl_buffers) {
        (Some(nc), Some(theirs)) => {
            let theirs = theirs.borrow();
            Some([nc.window_register(&theirs.send)?, nc.window_register(&theirs.recv)?])
        }
        _ => None,
    };
    let mut rows = Vec::new();
    for requested in sizes(options) {
        if let Some(shape) = options.collective.shape(requested, size, ranks, options.root) {
            let call = Call {
                collective: options.collective,
                shape,
                dtype: options.dtype,
                op: CallOp::Host(data::reduction(options.dtype, options.op, rank as u32)),
                rank,
                ranks,
                stream: &me.stream,
            };
            let weft_run = |b: &mut Buffers, p| call.weft(&coll, b, p).map(|_| ());
            let nccl_run = nccl_comm.as_ref().map(|nc| move |b: &mut Buffers, p| call.nccl(nc, b, p));
            // The windowed calls run on NCCL's buffers, whatever buffers the harness lends.
            let nccl_windows_run = nccl_comm
                .as_ref()
                .zip(nccl_buffers.as_ref())
                .map(|(nc, theirs)| move |_: &mut Buffers, p| call.nccl(nc, &mut theirs.borrow_mut(), p));
            // The check reads and writes the rank's buffers: copy them into NCCL's windows around
            // the call (stream-ordered, capturable), so the windowed call is checked like the
            // others.
            let nccl_windows_checked = nccl_windows_run.as_ref().zip(nccl_buffers.as_ref()).map(|(run, theirs)| {
                move |b: &mut Buffers, p| -> Result<(), BoxError> {
                    {
                        let mut theirs = theirs.borrow_mut();
                        theirs.send.as_mut_slice().copy_from_device(&b.send.as_slice(), call.stream)?;
                        theirs.recv.as_mut_slice().copy_from_device(&b.recv.as_slice(), call.stream)?;
                    }
                    run(b, p)?;
                    b.recv.as_mut_slice().copy_from_device(&theirs.borrow().recv.as_slice(), call.stream)?;
                    Ok(())
                }
            });
            let versus_run = versus.as_ref().map(|v| move |b: &mut Buffers, p| call.weft(v, b, p).map(|_| ()));
            let mut row = Row { bytes: shape.bytes, count: shape.count, identical: true, ..Row::default() };
            if options.check {
                let seed = shared_seed(&*bootstrap)?;
                let reference = Reference { dtype: options.dtype, op: options.op, seed, ranks: ranks as u32 };
                let launches = every_launch(options.graph);
                let check =
                    |run: &Run<'_>| Checking { me: &me, call: &call, run, reference: &reference }.launches(&launches);
                let weft = check(&weft_run)?;
                (row.wrong, row.identical) = (weft.wrong, weft.identical);
                let nccl_defined = nccl_launches(options.collective, &launches);
                let check_nccl = |run: &Run<'_>| {
                    Checking { me: &me, call: &call, run, reference: &reference }.launches(&nccl_defined)
                };
                if let Some(nccl_run) = &nccl_run {
                    row.nccl_wrong = Some(check_nccl(nccl_run)?.wrong);
                }
                if let Some(run) = &nccl_windows_checked {
                    row.nccl_windows_wrong = Some(check_nccl(run)?.wrong);
                }
                if let Some(versus_run) = &versus_run {
                    row.wrong += check(versus_run)?.wrong;
                }
            }
            // The timed buffers: send and recv, or the in-place layout inside recv.
            let placement = if options.in_place { Placement::InPlace } else { Placement::OutOfPlace };
            let algorithm = call.weft(&coll, &mut me.buffers.borrow_mut(), placement)?;
            // One eager call of the other algorithm too: its first call sets it up, which must
            // not happen inside a graph capture (the set-up synchronises).
            if let Some(run) = &versus_run {
                run(&mut me.buffers.borrow_mut(), placement)?;
            }
            row.algorithm = algorithm.name().to_string();
            row.model_us = coll.cross_node_model_us(algorithm, shape.bytes, model_params.as_ref());
            me.idle()?;
            // A row's trace covers its timed calls (warm-ups included), not the check's.
            for c in std::iter::once(&coll).chain(&versus) {
                c.take_trace()?;
            }
            let before = coll.path_counts().zero_copy;
            // Every contender this run measures, in the same order on every rank.
            let mut contenders: Vec<(Contender, Box<CallFn<'_>>)> =
                vec![(Contender::Weft, Box::new(|b: &mut Buffers| weft_run(b, placement)))];
            if let Some(run) = &nccl_run {
                contenders.push((Contender::Nccl, Box::new(move |b: &mut Buffers| run(b, placement))));
            }
            if let Some(run) = &nccl_windows_run {
                contenders.push((Contender::NcclWindows, Box::new(move |b: &mut Buffers| run(b, placement))));
            }
            if let Some(run) = &versus_run {
                contenders.push((Contender::Versus, Box::new(move |b: &mut Buffers| run(b, placement))));
            }
            let calls: Vec<&CallFn<'_>> = contenders.iter().map(|(_, call)| &**call).collect();
            let trials = me.time_interleaved(options.graph, shape.bytes, &calls, options.trials, &start_line)?;
            for ((contender, _), trials) in contenders.iter().zip(&trials) {
                let timing = Timing::of(trials).ok_or("--trials 0: nothing was timed")?;
                row.set_timing(*contender, timing);
            }
            if let Some(dir) = trace_dir {
                for (label, c) in std::iter::once(("weft", &coll)).chain(versus.iter().map(|v| ("versus", v))) {
                    let name = format!("{}-{}-{label}", options.collective, shape.bytes);
                    super::trace::write_row(dir, &name, rank, ranks, c.take_trace()?)?;
                }
            }
            if coll.path_counts().zero_copy > before {
                // The timed calls wrote straight into the peers' registered outputs.
                row.algorithm.push_str("+zc");
            }
            rows.push(row);
        }
        if rank == 0 {
            record(requested);
        }
    }
    me.barrier()?;
    // Every rank's work is done (the barrier above follows each rank's idle stream): the
    // windows go before the buffers they cover.
    drop(nccl_windows);
    drop(nccl_buffers);
    for window in weft_windows.iter().flatten() {
        coll.deregister_window(window)?;
    }
    Ok(rows)
}
