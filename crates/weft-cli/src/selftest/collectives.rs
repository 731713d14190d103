//! The collective matrix of the GPU suite: every collective x algorithm x element type x
//! operator (for the reducing ones) x odd element counts, each checked out of place, in place
//! and in two CUDA-graph replays against the float64 reference of `weft bench --check`, on
//! every rank. The communicator's collectives are set up with small rounds and packet slots,
//! so counts of a few thousand elements already take the multi-round paths of every kernel.
//! The same matrix runs the native algorithms (step `coll`) or every execution plan of the
//! registry available at this rank count (step `plan`: the shipped plans and any of
//! `WEFT_PLAN_DIR`), each through the plan executor, or the AllReduces that cross nodes (step
//! `multinode`, on virtual nodes: what it cannot set up or lacks is reported as skipped).
//! Graph-captured AllReduce HB and AllGather HB calls, and captured out-of-place plan launches
//! whose chunks are whole 16-byte vectors, write straight into the peers' registered outputs
//! (AllReduce HB reading the peers' inputs in place too); captured Reduce chain calls at two
//! ranks read the peers' inputs in place (its direct form, at every count of whole 16-byte
//! vectors here: 2048 and 163 840 elements);
//! a line per communicator checks that every one that could did. Reducing collectives run
//! every operator the algorithm supports,
//! PreMulSum twice: its scalar as a value and in device memory (read by the kernels, graph
//! replays included), each rank with a scalar of its own, as NCCL allows (the result is the sum
//! of each rank's input times its own scalar). Integer inputs span the whole range in one element of four, so integer
//! sums, averages and PreMulSum products wrap and must equal NCCL's bit for bit. Broadcast and
//! Reduce move their root from call to call: call k of an algorithm's matrix runs at root k mod
//! ranks ([`entries`]; a plan: among the roots it builds at), so every root is checked and
//! consecutive calls change root.

use std::time::Duration;

use weft_coll::{Algorithm, CollConfig, CollError, CollectiveAlgorithms, Collectives, Nodes, PathCounts, Protocol};
use weft_core::{Communicator, Env};
use weft_gpu::DeviceBuffer;
use weft_types::{DataType, ReduceOp};

use super::report::RankReport;
use crate::harness::data::Reference;
use crate::harness::op_case::OpCase;
use crate::harness::rank::{Buffers, Call, Checked, Checking, Placement, Rank, every_launch, shared_seed};
use crate::harness::roots::{cycled, roots};
use crate::harness::sweep::parse_dtype;
use crate::harness::{Collective, NcclTests, Shape};

/// Element counts per rank block: 1, odd sizes around the LL slot, several HB rounds, and two
/// counts whose blocks are whole 16-byte vectors in every type (AllGather's zero-copy layout;
/// Reduce's direct form, the larger one over every block of the grid and many HB rounds).
const COUNTS: [usize; 7] = [1, 37, 1531, 2048, 20_011, 150_001, 163_840];
/// AllReduce HB's tail cases: 2^20 + 3 elements, a message of one round at the shipped round
/// size whose last vector is partial (3 bytes of i8, 12 of f32), the count of a 2×H200
/// conformance failure; with the operators it failed with.
const TAIL_COUNT: usize = (1 << 20) + 3;
const TAIL_CASES: [(DataType, ReduceOp); 2] = [(DataType::I8, ReduceOp::Prod), (DataType::F32, ReduceOp::Sum)];
/// Bytes of an HB round (the scratch is twice this) and payload of an LL slot in the matrix.
const CHUNK_BYTES: usize = 64 << 10;
const LL_SLOT_BYTES: usize = 16 << 10;

type BoxError = Box<dyn std::error::Error>;

/// Which algorithms a matrix runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    /// The native kernels (across nodes: those that reach every peer).
    Native,
    /// The execution plans of the registry (on one node).
    Plans,
    /// The AllReduces that cross nodes ([`MULTI_NODE`]), native or plan.
    MultiNode,
}

/// The AllReduces that run across nodes: the PortChannel natives, NVRAR and 2PH on the device
/// API and the multi-node plans.
const MULTI_NODE: [&str; 6] =
    ["port_ring", "port_allpairs", "nvrar", "2ph", "plan:nvrar_allreduce", "plan:hier2ph_allreduce"];

impl Family {
    /// Whether the family's matrix runs `algorithm` on a communicator that spans nodes or not.
    pub(super) fn includes(self, algorithm: Algorithm, spans_nodes: bool) -> bool {
        let plan = algorithm.protocol() == Protocol::Plan;
        let crosses_nodes = algorithm.collective() == Collective::AllReduce && MULTI_NODE.contains(&algorithm.name());
        match self {
            // Across (virtual) nodes only the AllReduces that cross nodes reach every peer.
            Family::Native => !plan && (!spans_nodes || crosses_nodes),
            Family::Plans => plan && !spans_nodes,
            Family::MultiNode => crosses_nodes,
        }
    }
}

/// Whether `algorithm` can be set up for the ranks of `nodes`: a plan's constraints (why not).
pub(super) fn runs_on(algorithm: Algorithm, nodes: &Nodes) -> Result<(), String> {
    match algorithm {
        Algorithm::Plan(id) => id.plan_at(nodes, 0).map(|_| ()),
        a if !a.available(nodes.ranks() as usize) => Err(format!("runs on at most {} ranks", weft_types::MAX_RANKS)),
        _ => Ok(()),
    }
}

/// The element types of `types` and the operators `algorithm` has none of, in words (`None`
/// when it has them all).
fn missing_cases(algorithm: Algorithm, types: &[DataType]) -> Option<String> {
    let no_types: Vec<&str> = types.iter().filter(|&&t| !algorithm.supports(t)).map(|t| t.name()).collect();
    let no_ops: Vec<&str> =
        ReduceOp::ALL.into_iter().filter(|&o| !algorithm.supports_op(o)).map(|o| o.name()).collect();
    let mut missing = Vec::new();
    if !no_types.is_empty() {
        missing.push(format!("no {} (types it does not support)", no_types.join(", ")));
    }
    if !no_ops.is_empty() {
        missing.push(format!("no {} (operators it does not support)", no_ops.join(", ")));
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Runs the matrix on `comm`, recording one outcome per (collective, algorithm, type, operator).
pub(super) fn run(comm: &Communicator, env: &Env, label: &str, family: Family, report: &mut RankReport) {
    if let Err(e) = run_matrix(comm, env, label, family, report) {
        report.record(format!("{label}collective matrix ({family:?}) set-up"), Err(e));
    }
}

fn run_matrix(
    comm: &Communicator,
    env: &Env,
    label: &str,
    family: Family,
    report: &mut RankReport,
) -> Result<(), BoxError> {
    let ranks = comm.world_size();
    let largest = (COUNTS.iter().max().copied().unwrap_or(1) * ranks * 8).max(TAIL_COUNT * 4);
    let me = Rank::new(comm, largest)?;
    // PreMulSum's device scalar: one element of any type.
    let scalar = DeviceBuffer::<u8>::new(comm.device(), 8)?;
    // Every captured HB AllReduce, AllGather and ReduceScatter, every captured Reduce chain,
    // and every captured plan launch that can, goes zero-copy here, whatever the size rules.
    let types = matrix_types(env.var(&weft_core::env::vars::WEFT_SELFTEST_TYPES))?;
    let base = CollConfig {
        chunk_bytes: CHUNK_BYTES,
        ll_slot_bytes: LL_SLOT_BYTES,
        zero_copy_allreduce_max: usize::MAX,
        zero_copy_allgather_max: usize::MAX,
        zero_copy_plan_min: 0,
        direct_reduce_min: 0,
        direct_reduce_scatter_max: usize::MAX,
        ..CollConfig::from_env(env)?
    };
    let spans_nodes = comm.topology().spans_nodes();
    let topology = comm.topology();
    let nodes = Nodes::new((0..ranks).map(|r| topology.node(r).unwrap_or_default()).collect());
    for collective in Collective::ALL {
        for algorithm in collective.algorithms().filter(|&a| family.includes(a, spans_nodes)) {
            if let Err(why) = runs_on(algorithm, &nodes) {
                // The other families leave out the plans of other rank counts as a matter of
                // course; the multi-node step names what it could not run.
                if family == Family::MultiNode {
                    report.skip(format!("{label}{collective:?} {}: {why}", algorithm.name()));
                }
                continue;
            }
            if family == Family::MultiNode
                && let Some(missing) = missing_cases(algorithm, &types)
            {
                report.skip(format!("{label}{collective:?} {}: {missing}", algorithm.name()));
            }
            for &variant in Variant::of(family) {
                let run = Run { me: &me, comm, nodes: &nodes, base: &base, label, types: &types, scalar: &scalar };
                run_algorithm(&run, collective, algorithm, variant, report)?;
            }
        }
    }
    Ok(())
}

/// How a plan's kernel is built: the one interpreter kernel every plan shares, or a kernel with
/// the rank's operations compiled in (`CollConfig::plan_specialize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// Native algorithms, or plans on the interpreter kernel: every type and operator.
    Interpreted,
    /// Plans on specialized kernels (those whose every rank gets one): one type and operator
    /// (a kernel is compiled per plan, rank, type and operator, seconds each), every count, in
    /// and out of place, graph replays.
    Specialized,
}

impl Variant {
    fn of(family: Family) -> &'static [Variant] {
        match family {
            Family::Native | Family::MultiNode => &[Variant::Interpreted],
            Family::Plans => &[Variant::Interpreted, Variant::Specialized],
        }
    }
}

/// The element types of the matrix: every type, or those `WEFT_SELFTEST_TYPES` lists
/// (comma-separated names, e.g. `bf16,f32,i8`) for a shorter run.
fn matrix_types(list: Option<&str>) -> Result<Vec<DataType>, String> {
    let Some(list) = list.filter(|l| !l.trim().is_empty()) else { return Ok(DataType::ALL.to_vec()) };
    list.split(',').map(|name| parse_dtype(name.trim()).map_err(|e| format!("WEFT_SELFTEST_TYPES: {e}"))).collect()
}

/// What every algorithm's matrix of one communicator shares.
struct Run<'a> {
    me: &'a Rank,
    comm: &'a Communicator,
    /// The node of every rank (a plan's roots depend on it).
    nodes: &'a Nodes,
    base: &'a CollConfig,
    label: &'a str,
    /// Element types of the interpreted matrix.
    types: &'a [DataType],
    /// Where PreMulSum cases with a device scalar keep it.
    scalar: &'a DeviceBuffer<u8>,
}

/// The matrix of one algorithm built as `variant`.
fn run_algorithm(
    run: &Run,
    collective: Collective,
    algorithm: Algorithm,
    variant: Variant,
    report: &mut RankReport,
) -> Result<(), BoxError> {
    let Run { me, comm, nodes, base, label, types, scalar } = *run;
    let ranks = comm.world_size();
    let specializes = matches!(algorithm, Algorithm::Plan(id) if id.specializes_on_every_rank(ranks));
    if variant == Variant::Specialized && !specializes {
        return Ok(());
    }
    let mut config = base.clone();
    config.selector.force(algorithm);
    config.plan_specialize = variant == Variant::Specialized;
    let suffix = if variant == Variant::Specialized { " specialized" } else { "" };
    let coll = Collectives::new(comm, config)?;
    let sum = OpCase::Plain(ReduceOp::Sum);
    let (types, ops): (Vec<DataType>, Vec<OpCase>) = match variant {
        Variant::Specialized => (vec![DataType::Bf16], vec![sum]),
        Variant::Interpreted if collective.reduces() => (types.to_vec(), OpCase::all(algorithm)),
        Variant::Interpreted => (types.to_vec(), vec![sum]),
    };
    // A forced algorithm rejects the types it does not support (weft-coll's tests).
    let types: Vec<DataType> = types.into_iter().filter(|&t| algorithm.supports(t)).collect();
    let roots = roots(algorithm, ranks, nodes);
    for Entry { dtype, op, cases } in entries(&types, &ops, &roots) {
        let name = if collective.reduces() {
            format!("{label}{collective:?} {}{suffix} {} {}", algorithm.name(), dtype.name(), op.name())
        } else {
            format!("{label}{collective:?} {}{suffix} {}", algorithm.name(), dtype.name())
        };
        report.record(name, check_cases(me, &coll, collective, op, scalar, &cases));
    }
    // One rank has no peer to write into. Every plan has a count of whole 16-byte vector
    // chunks (2048 elements: COUNTS); it runs direct where peers write outputs.
    let direct = match algorithm {
        Algorithm::AllReduceHb | Algorithm::AllGatherHb => true,
        // Its direct form runs at two NVLink-connected ranks only (`Collectives::direct_reduce`).
        Algorithm::ReduceChain => ranks == 2 && coll.nvlink_peers(),
        // Its direct form runs on NVLink-connected ranks (`Collectives::direct_reduce_scatter`).
        Algorithm::ReduceScatterHb => coll.nvlink_peers(),
        Algorithm::Plan(id) => id.peers_share_outputs(ranks),
        _ => false,
    };
    if collective_runs_plans(algorithm) && variant == Variant::Interpreted {
        let types = check_types_alternating(me, &coll, collective, scalar, &roots);
        report.record(format!("{label}{collective:?} {} element types alternating", algorithm.name()), types);
    }
    if collective_runs_plans(algorithm) {
        let paths = coll.path_counts();
        let specialized = variant == Variant::Specialized;
        let (ran, other) = if specialized {
            (paths.plan_specialized, paths.plan_interpreted)
        } else {
            (paths.plan_interpreted, paths.plan_specialized)
        };
        let kind = if specialized { "specialized" } else { "interpreter" };
        let detail = format!("{ran} launches on the {kind} kernel, {other} on the other");
        let outcome = if ran > 0 && other == 0 { Ok(()) } else { Err(detail) };
        report.record(
            format!("{label}{collective:?} {}{suffix} launches ran the {kind} kernel", algorithm.name()),
            outcome,
        );
    }
    if algorithm == Algorithm::AllReduceHb {
        let what = format!("{label}AllReduce hb at the shipped round size, 2^20 + 3 elements (i8 prod, f32 sum)");
        report.record(what, check_tail(me, comm, base, scalar));
    }
    if ranks > 1 && direct && variant == Variant::Interpreted {
        let what =
            format!("{label}{collective:?} {} through windows: eager and captured calls zero-copy", algorithm.name());
        report.record(what, check_windowed(me, &coll, collective, scalar, &roots));
    }
    if ranks > 1 && direct {
        let (paths, what) = (coll.path_counts(), format!("{label}{collective:?} {}{suffix}", algorithm.name()));
        report.metric(format!("{what} captured calls zero-copy"), paths.zero_copy as f64, "calls");
        report.metric(format!("{what} captured calls refused zero-copy"), paths.refused as f64, "calls");
        report.record(format!("{what} graph replays write into registered outputs"), zero_copy_ran(paths));
    }
    Ok(())
}

/// The rank's buffers registered as windows: every count again (bf16 sum, cycling through
/// `roots`), eager and captured, out of place and in place; the calls that can must go
/// zero-copy through the windows (no refusal, at least one windowed call), then the windows are
/// deregistered.
fn check_windowed(
    me: &Rank,
    coll: &Collectives,
    collective: Collective,
    scalar: &DeviceBuffer<u8>,
    roots: &[u32],
) -> Result<(), String> {
    let before = coll.path_counts();
    let mut windows = Vec::new();
    let buffers = me.buffers.borrow();
    for buffer in [&buffers.send, &buffers.recv] {
        match coll.register_window(buffer) {
            Ok(w) => windows.push(w),
            // Registration fails on every rank alike: nothing to deregister on any.
            Err(e) => return Err(format!("window registration: {e}")),
        }
    }
    drop(buffers);
    let cases = at_every_count(DataType::Bf16, roots, 0);
    let checked = check_cases(me, coll, collective, OpCase::Plain(ReduceOp::Sum), scalar, &cases);
    let after = coll.path_counts();
    let mut outcome = checked.and_then(|()| {
        let (windowed, refused) = (after.windowed - before.windowed, after.refused - before.refused);
        let detail = format!("{windowed} calls through windows, {refused} refused zero-copy");
        if windowed > 0 && refused == 0 { Ok(()) } else { Err(detail) }
    });
    for w in &windows {
        if let Err(e) = coll.deregister_window(w) {
            outcome = outcome.and(Err(format!("window deregistration: {e}")));
        }
    }
    outcome
}

/// AllReduce HB with the shipped round size (the matrix's small rounds split these counts):
/// every [`TAIL_CASES`] at [`TAIL_COUNT`] elements, out of place, in place and captured (the
/// replays zero-copy, in place with fresh inputs each), every element checked; then every
/// captured call must have gone zero-copy (with peers to write into).
fn check_tail(me: &Rank, comm: &Communicator, base: &CollConfig, scalar: &DeviceBuffer<u8>) -> Result<(), String> {
    let mut config = CollConfig { chunk_bytes: CollConfig::default().chunk_bytes, ..base.clone() };
    config.selector.force(Algorithm::AllReduceHb);
    let coll = Collectives::new(comm, config).map_err(|e| format!("set-up: {e}"))?;
    let mut outcome = Ok(());
    for (dtype, op) in TAIL_CASES {
        let case = Case { dtype, count: TAIL_COUNT, root: 0 };
        let checked = check_cases(me, &coll, Collective::AllReduce, OpCase::Plain(op), scalar, &[case]);
        outcome = outcome.and(checked.map_err(|e| format!("{}: {e}", op.name())));
    }
    if comm.world_size() > 1 {
        outcome = outcome.and(zero_copy_ran(coll.path_counts()));
    }
    outcome
}

/// Whether `algorithm` runs on the plan executor.
fn collective_runs_plans(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Plan(_))
}

/// One checked call of the matrix: element type, elements per rank block, and root (0 where
/// the collective has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Case {
    dtype: DataType,
    count: usize,
    root: u32,
}

/// The calls of `cases` (type, count) in order, the `k`-th at root `cycled(roots, first + k)`.
fn cycling_roots(cases: impl IntoIterator<Item = (DataType, usize)>, roots: &[u32], first: usize) -> Vec<Case> {
    cases
        .into_iter()
        .enumerate()
        .map(|(k, (dtype, count))| Case { dtype, count, root: cycled(roots, first + k) })
        .collect()
}

/// `dtype` at every count of [`COUNTS`], the first call at root `cycled(roots, first)`.
fn at_every_count(dtype: DataType, roots: &[u32], first: usize) -> Vec<Case> {
    cycling_roots(COUNTS.iter().map(|&count| (dtype, count)), roots, first)
}

/// One entry of an algorithm's matrix (one outcome): a type and operator at every count.
struct Entry {
    dtype: DataType,
    op: OpCase,
    cases: Vec<Case>,
}

/// The entries of an algorithm's matrix: every type of `types` with every operator of `ops`,
/// their calls numbered across entries so that call k runs at root `cycled(roots, k)`.
fn entries(types: &[DataType], ops: &[OpCase], roots: &[u32]) -> Vec<Entry> {
    let pairs = types.iter().flat_map(|&dtype| ops.iter().map(move |&op| (dtype, op)));
    pairs
        .enumerate()
        .map(|(e, (dtype, op))| Entry { dtype, op, cases: at_every_count(dtype, roots, e * COUNTS.len()) })
        .collect()
}

/// Element types of different sizes, alternating at one count on the same buffers: nothing a
/// plan launch keeps between calls (the executor's cached chunk addresses) may carry over from
/// a call of another type. Counts: one slice per chunk, and every replica. Roots: cycling
/// through `roots`.
fn check_types_alternating(
    me: &Rank,
    coll: &Collectives,
    collective: Collective,
    scalar: &DeviceBuffer<u8>,
    roots: &[u32],
) -> Result<(), String> {
    let alternating =
        [37, 150_001].into_iter().flat_map(|count| [DataType::F32, DataType::Bf16, DataType::F32].map(|t| (t, count)));
    check_cases(me, coll, collective, OpCase::Plain(ReduceOp::Sum), scalar, &cycling_roots(alternating, roots, 0))
}

/// Checks `collective` with `op` for each call of `cases` the algorithm can carry.
fn check_cases(
    me: &Rank,
    coll: &Collectives,
    collective: Collective,
    op: OpCase,
    scalar: &DeviceBuffer<u8>,
    cases: &[Case],
) -> Result<(), String> {
    let (rank, ranks) = (me.comm.rank(), me.comm.world_size());
    // Every rank goes through every case whatever it sees, so the ranks stay in step.
    let mut failures = Vec::new();
    for &Case { dtype, count, root } in cases {
        let elt = dtype.size();
        let per_rank = matches!(collective, Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll);
        let bytes = if per_rank { count * ranks * elt } else { count * elt };
        let Some(shape): Option<Shape> = collective.shape(bytes, elt, ranks, root) else { continue };
        let call = Call {
            collective,
            shape,
            dtype,
            op: op.reduction(dtype, rank as u32, scalar)?,
            rank,
            ranks,
            stream: &me.stream,
        };
        let run = |buffers: &mut Buffers, placement: Placement| call.weft(coll, buffers, placement).map(|_| ());
        // An LL algorithm forced past its slot says so before enqueuing anything: skip it
        // (every rank decides the same way, from the same numbers).
        let seed = shared_seed(&*me.bootstrap).map_err(|e| e.to_string())?;
        let reference = Reference { dtype, op: op.op(), seed, ranks: ranks as u32 };
        match (Checking { me, call: &call, run: &run, reference: &reference }).launches(&every_launch(true)) {
            Ok(Checked { wrong: 0, identical: true, .. }) => {}
            Ok(Checked { wrong, identical, .. }) => {
                let what = format!("{} count {count}{}", dtype.name(), collective.at_root(root));
                failures.push(format!("{what}: {wrong} wrong elements, ranks identical: {identical}"));
            }
            Err(e) if cannot_carry(e.as_ref()) => {}
            Err(e) => {
                // A kernel's failure record stays until cleared: clear it, so that the cases
                // after this one report their own results.
                let _ = me.stream.wait_idle(Duration::from_secs(60), "a failed case");
                let _ = me.comm.clear_device_failure();
                return Err(format!("{} count {count}{}: {e}", dtype.name(), collective.at_root(root)));
            }
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) }
}

/// Which path the captured calls that could go zero-copy took (every case captures two, out of
/// place and in place): all of them must have, and at least one must have run.
fn zero_copy_ran(paths: PathCounts) -> Result<(), String> {
    let detail = format!("{} captured calls zero-copy, {} refused", paths.zero_copy, paths.refused);
    if paths.zero_copy > 0 && paths.refused == 0 { Ok(()) } else { Err(detail) }
}

/// Whether `e` is the refusal of a forced LL algorithm to carry a message past its slot.
fn cannot_carry(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(e.downcast_ref::<CollError>(), Some(CollError::InvalidArgument { detail, .. }) if detail.contains("cannot carry"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_runs_every_type_unless_the_environment_lists_some() {
        assert_eq!(matrix_types(None).unwrap(), DataType::ALL.to_vec());
        assert_eq!(matrix_types(Some(" ")).unwrap(), DataType::ALL.to_vec());
        assert_eq!(matrix_types(Some("bf16, i8")).unwrap(), vec![DataType::Bf16, DataType::I8]);
        assert!(matrix_types(Some("bf16,float")).unwrap_err().contains("WEFT_SELFTEST_TYPES"));
    }

    fn family(family: Family, spans_nodes: bool) -> Vec<&'static str> {
        let mut names: Vec<&str> = Collective::ALL
            .into_iter()
            .flat_map(|c| c.algorithms())
            .filter(|&a| family.includes(a, spans_nodes))
            .map(Algorithm::name)
            .collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn across_nodes_the_families_run_only_the_allreduces_that_cross_nodes() {
        let mut crossing = MULTI_NODE.to_vec();
        crossing.sort_unstable();
        assert_eq!(family(Family::MultiNode, true), crossing);
        assert_eq!(family(Family::MultiNode, false), crossing);
        assert_eq!(family(Family::Native, true), ["2ph", "nvrar", "port_allpairs", "port_ring"]);
        assert!(family(Family::Plans, true).is_empty());
        // On one node the native and plan matrices are what they were.
        let (native, plans) = (family(Family::Native, false), family(Family::Plans, false));
        assert!(
            native.contains(&"hb") && native.contains(&"port_ring") && !native.iter().any(|n| n.starts_with("plan:"))
        );
        assert!(plans.contains(&"plan:nvrar_allreduce") && plans.iter().all(|n| n.starts_with("plan:")));
    }

    #[test]
    fn what_a_multinode_algorithm_lacks_is_named() {
        let plan = Algorithm::from_name(Collective::AllReduce, "plan:nvrar_allreduce").unwrap();
        let missing = missing_cases(plan, &DataType::ALL).unwrap();
        assert!(missing.contains("avg") && missing.contains("premulsum"), "{missing}");
        assert!(missing_cases(plan, &[DataType::F32]).is_some_and(|m| !m.contains("types")));
        let ring = Algorithm::from_name(Collective::AllReduce, "port_ring").unwrap();
        assert_eq!(missing_cases(ring, &[DataType::Bf16, DataType::I8]), None);
    }

    /// At 2 to 8 ranks, the matrix of Broadcast and of Reduce (every operator) runs at every
    /// root, consecutive calls at different roots, with as many calls as types x operators x
    /// counts; collectives without a root run at root 0.
    #[test]
    fn the_matrix_runs_rooted_collectives_at_every_root() {
        let sum = [OpCase::Plain(ReduceOp::Sum)];
        for ranks in 2..=8usize {
            let nodes = Nodes::one(ranks);
            for c in [Collective::Broadcast, Collective::Reduce, Collective::AllReduce] {
                for algorithm in c.algorithms().filter(|a| a.available(ranks) && !matches!(a, Algorithm::Plan(_))) {
                    let ops = if c.reduces() { OpCase::all(algorithm) } else { sum.to_vec() };
                    let types: Vec<DataType> = DataType::ALL.into_iter().filter(|&t| algorithm.supports(t)).collect();
                    let calls: Vec<Case> = entries(&types, &ops, &roots(algorithm, ranks, &nodes))
                        .into_iter()
                        .flat_map(|e| e.cases.into_iter().inspect(move |case| assert_eq!(case.dtype, e.dtype)))
                        .collect();
                    let what = format!("{algorithm} on {ranks} ranks");
                    assert_eq!(calls.len(), types.len() * ops.len() * COUNTS.len(), "{what}");
                    let mut seen: Vec<u32> = calls.iter().map(|case| case.root).collect();
                    if c.rooted() {
                        assert!(calls.windows(2).all(|w| w[0].root != w[1].root), "{what}: a root repeats");
                        seen.sort_unstable();
                        seen.dedup();
                        assert_eq!(seen, (0..ranks as u32).collect::<Vec<_>>(), "{what}");
                    } else {
                        assert!(seen.iter().all(|&r| r == 0), "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_captured_call_must_have_gone_zero_copy() {
        assert!(zero_copy_ran(PathCounts { zero_copy: 4, ..PathCounts::default() }).is_ok());
        assert!(
            zero_copy_ran(PathCounts { zero_copy: 3, refused: 1, ..PathCounts::default() })
                .unwrap_err()
                .contains("1 refused")
        );
        assert!(zero_copy_ran(PathCounts::default()).is_err());
    }
}
