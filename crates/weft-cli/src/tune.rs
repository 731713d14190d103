//! `weft tune`: times every algorithm of every collective at every size on this machine (CUDA
//! graph mode, one process per GPU, the slowest rank counts), for each HB block count asked
//! for, and writes the tuning table the selector reads (`WEFT_TUNING_FILE`): the block count
//! with the best geometric-mean time, and per collective the fastest algorithm at each size,
//! as rules for the rank count measured and the element type measured (any type on request).
//!
//! An LL candidate is timed only at the sizes its packet slot carries (beyond them the call
//! itself falls back to HB, and the sample is dropped); LL launches do not depend on the HB
//! block count, so they are timed once.
//!
//! Nothing is timed before it is checked: every LL candidate, and every other one up to
//! `--check-max` (16 MiB), is first checked element by element against the float64 reference
//! on every rank, eager and in graph replays, out of place and in place, as `weft bench
//! --check` does. One wrong element on any rank, or ranks whose results differ where they must
//! be bitwise identical, and the algorithm is reported and left out of the table. A check that
//! times out on a GPU ends the tune with that error, since the timed-out launch leaves the LL
//! flags out of step.
//!
//! The LL128 algorithms (`ll128`) are timed only with `--with-ll128`: they have not yet run on
//! a GPU, and they need NVLink peers, which a few checked launches cannot prove (a line torn on
//! PCIe would fail now and then).
//!
//! Across virtual nodes (`WEFT_RANKS_PER_NODE` below the GPU count) it times the AllReduces
//! that reach other nodes instead (`port_ring`, `port_allpairs` and the plans whose memory
//! channels stay within nodes), each forced in turn, and writes rules for that node count
//! (`"nodes": N`), which the selector consults only across nodes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_coll::{
    Algorithm, CollConfig, CollectiveAlgorithms, Collectives, Nodes, Protocol, Rule, Selector, TuningTable,
};
use weft_core::{Communicator, Env};
use weft_gpu::Device;
use weft_types::{DataType, ReduceOp};

use crate::harness::data::Reference;
use crate::harness::rank::{Buffers, Call, CallOp, Checking, Placement, Rank, Run, every_launch, shared_seed};
use crate::harness::start_line::StartLine;
use crate::harness::sweep::{by_name, format_size, sizes_between};
use crate::harness::workers::run_workers;
use crate::harness::{Collective, NcclTests, data, launch, progress};

type BoxError = Box<dyn std::error::Error>;

const WORKER_OPTIONS: &str = "WEFT_TUNE_OPTIONS";

/// Two algorithms whose times differ by less than this factor are treated as equally fast.
const NOISE: f64 = 1.03;

/// Options of `weft tune`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TuneOptions {
    /// Collectives to tune.
    pub collectives: Vec<Collective>,
    /// Smallest message in bytes.
    pub min_bytes: usize,
    /// Largest message in bytes.
    pub max_bytes: usize,
    /// Size multiplier between measured sizes.
    pub factor: usize,
    /// Element type of the measurements.
    #[serde(with = "by_name::dtype")]
    pub dtype: DataType,
    /// Operator of the reducing collectives.
    #[serde(with = "by_name::op")]
    pub op: ReduceOp,
    /// HB block counts to try (the first also times the LL algorithms).
    pub hb_blocks: Vec<u32>,
    /// GPUs.
    pub gpus: usize,
    /// Write rules for every element type instead of only `dtype`.
    #[serde(default)]
    pub any_dtype: bool,
    /// Largest size whose results are checked before they are timed (0: none); LL candidates
    /// are checked at every size.
    #[serde(default = "default_check_max_bytes")]
    pub check_max_bytes: usize,
    /// Time the LL128 algorithms too (`weft tune` sets it where every pair of GPUs is NVLink).
    #[serde(default)]
    pub with_ll128: bool,
}

/// `--check-max`'s default: 16 MiB.
pub const DEFAULT_CHECK_MAX_BYTES: usize = 16 << 20;

fn default_check_max_bytes() -> usize {
    DEFAULT_CHECK_MAX_BYTES
}

/// One timing: `algorithm` of `collective` at `bytes` with `hb_blocks` HB blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// HB blocks of the communicator it ran on.
    pub hb_blocks: u32,
    /// Collective.
    pub collective: Collective,
    /// Algorithm name.
    pub algorithm: String,
    /// Message bytes (as `weft bench` sizes it).
    pub bytes: usize,
    /// Microseconds per call (CUDA graph).
    pub us: f64,
}

/// The nodes of the `gpus` ranks `weft tune` starts: virtual nodes of `WEFT_RANKS_PER_NODE`
/// ranks, else one.
fn tuned_nodes(gpus: usize, env: &Env) -> Nodes {
    Nodes::virtual_nodes(gpus, env.ranks_per_node.unwrap_or(0))
}

/// Whether `algorithm` is one `weft tune` times on ranks in `nodes`: within one node the native
/// algorithms (plans wait until their executor overhead is measured, the PortChannel
/// AllReduces serve across nodes), across nodes the AllReduces that reach other nodes.
fn tuned_here(algorithm: Algorithm, nodes: &Nodes) -> bool {
    if nodes.count() <= 1 {
        return !matches!(algorithm.protocol(), Protocol::Plan | Protocol::Port);
    }
    let sets_up = match algorithm {
        Algorithm::Plan(id) => id.plan_at(nodes, 0).is_ok(),
        // (Virtual nodes are numbered node after node, so `uniform` is "of equal size".)
        Algorithm::AllReduceNvrar | Algorithm::AllReduce2ph => {
            nodes.uniform().is_ok() && algorithm.available(nodes.ranks() as usize)
        }
        _ => algorithm.available(nodes.ranks() as usize),
    };
    algorithm.collective() == Collective::AllReduce && algorithm.may_cross_nodes() && sets_up
}

/// What a worker measures, in order: (HB blocks, algorithm, requested size). The launcher uses
/// the same list for the progress bar.
fn work(options: &TuneOptions, nodes: &Nodes) -> Vec<(u32, Algorithm, usize)> {
    let sizes = sizes_between(options.min_bytes, options.max_bytes, options.factor);
    // Across nodes nothing depends on the HB block count: one pass.
    let counts =
        if nodes.count() > 1 { &options.hb_blocks[..options.hb_blocks.len().min(1)] } else { &options.hb_blocks };
    let mut out = Vec::new();
    for (i, &blocks) in counts.iter().enumerate() {
        for &collective in &options.collectives {
            let timed = |a: &Algorithm| {
                tuned_here(*a, nodes)
                    && (i == 0 || a.protocol() != Protocol::Ll)
                    && (options.with_ll128 || !a.is_ll128())
            };
            for algorithm in collective.algorithms().filter(timed) {
                out.extend(sizes.iter().map(|&s| (blocks, algorithm, s)));
            }
        }
    }
    out
}

/// Runs the measurements on `options.gpus` processes, prints what each collective chose and
/// writes the table to `output`.
pub fn run(options: &TuneOptions, output: &Path) -> Result<ExitCode, BoxError> {
    // Between NVLink peers the size rules run LL128 lines: time them too, so that the table
    // keeps them where they win (every candidate is checked before it is timed).
    let with_ll128 = options.with_ll128 || nvlink_between_all(options.gpus);
    let options = &TuneOptions { with_ll128, ..options.clone() };
    let nodes = tuned_nodes(options.gpus, &Env::from_process()?);
    let items: Vec<usize> = work(options, &nodes).iter().map(|&(_, _, bytes)| bytes).collect();
    if items.is_empty() {
        return Err(format!(
            "nothing to time: across {} nodes only AllReduce has algorithms (asked: {})",
            nodes.count(),
            options.collectives.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
        )
        .into());
    }
    let per_rank: Vec<Vec<Sample>> = run_workers(
        options.gpus,
        "tune-worker",
        &[(WORKER_OPTIONS, serde_json::to_string(options)?)],
        &items,
        Duration::from_secs(3 * 3600),
    )?;
    let samples = slowest_rank(&per_rank)?;
    let machine = format!("{} x {}", options.gpus, Device::new(0).and_then(|d| d.name()).unwrap_or_default());
    let dtype = (!options.any_dtype).then_some(options.dtype);
    let across = (nodes.count() > 1).then_some(nodes.count());
    let tuned = choose(&samples, Scope { ranks: options.gpus, dtype, nodes: across }, &machine)?;
    print_summary(&samples, &tuned);
    std::fs::write(output, serde_json::to_string_pretty(&tuned.table)? + "\n")?;
    println!("wrote {} (use it with WEFT_TUNING_FILE={})", output.display(), output.display());
    Ok(ExitCode::SUCCESS)
}

/// Whether GPUs `0..gpus` (the workers') are NVLink-connected pairwise (NVML); false without
/// GPUs or NVML.
fn nvlink_between_all(gpus: usize) -> bool {
    let buses: Result<Vec<String>, _> = (0..gpus).map(|o| Device::new(o).and_then(|d| d.pci_bus_id())).collect();
    buses.is_ok_and(|b| b.iter().all(|own| weft_gpu::nvml::nvlink_to_all(own, b.iter().map(String::as_str))))
}

/// Every rank times the same items in the same order: each item's time is its slowest rank's.
fn slowest_rank(per_rank: &[Vec<Sample>]) -> Result<Vec<Sample>, String> {
    let Some(first) = per_rank.first() else { return Ok(Vec::new()) };
    let mut merged = first.clone();
    for (rank, samples) in per_rank.iter().enumerate().skip(1) {
        if samples.len() != merged.len() {
            return Err(format!("rank {rank} measured {} items, rank 0 {}", samples.len(), merged.len()));
        }
        for (m, s) in merged.iter_mut().zip(samples) {
            if (m.hb_blocks, m.collective, &m.algorithm, m.bytes) != (s.hb_blocks, s.collective, &s.algorithm, s.bytes)
            {
                return Err(format!("rank {rank} measured {s:?} where rank 0 measured {m:?}"));
            }
            m.us = m.us.max(s.us);
        }
    }
    Ok(merged)
}

/// The outcome of tuning: the table and the block count it chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    /// What `WEFT_TUNING_FILE` reads.
    pub table: TuningTable,
    /// The HB block count with the best geometric-mean time.
    pub hb_blocks: u32,
}

/// The samples that count at `blocks` HB blocks: HB/P2P ones measured with it, and every LL one.
fn at_blocks(samples: &[Sample], blocks: u32) -> impl Iterator<Item = &Sample> {
    samples.iter().filter(move |s| s.hb_blocks == blocks || is_ll(s))
}

fn is_ll(s: &Sample) -> bool {
    Algorithm::from_name(s.collective, &s.algorithm).is_some_and(|a| a.protocol() == Protocol::Ll)
}

/// Fastest sample per (collective, bytes).
fn fastest<'a>(samples: impl Iterator<Item = &'a Sample>) -> BTreeMap<(Collective, usize), &'a Sample> {
    let mut best: BTreeMap<(Collective, usize), &Sample> = BTreeMap::new();
    for s in samples {
        let entry = best.entry((s.collective, s.bytes)).or_insert(s);
        if s.us < entry.us {
            *entry = s;
        }
    }
    best
}

/// Whom the written rules serve.
#[derive(Clone, Copy, Debug)]
pub struct Scope {
    /// The rank count measured.
    pub ranks: usize,
    /// The element type measured (`None`: rules for any type).
    pub dtype: Option<DataType>,
    /// The node count measured across (`None`: within one node).
    pub nodes: Option<usize>,
}

/// Picks the HB block count whose fastest algorithms have the smallest geometric-mean time
/// over every (collective, size), then the fastest algorithm per size at that count, merged
/// into ascending size rules (the last one open-ended) for the calls of `scope`.
pub fn choose(samples: &[Sample], scope: Scope, machine: &str) -> Result<Tuned, String> {
    let Scope { ranks, dtype, nodes } = scope;
    let mut counts: Vec<u32> = samples.iter().filter(|s| !is_ll(s)).map(|s| s.hb_blocks).collect();
    counts.sort_unstable();
    counts.dedup();
    let score = |blocks: u32| {
        let best = fastest(at_blocks(samples, blocks));
        best.values().map(|s| s.us.max(1e-3).ln()).sum::<f64>() / best.len().max(1) as f64
    };
    let hb_blocks = counts
        .iter()
        .copied()
        .min_by(|&a, &b| score(a).total_cmp(&score(b)))
        .or_else(|| samples.first().map(|s| s.hb_blocks))
        .ok_or("nothing was measured")?;
    let mut collectives: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
    for ((collective, bytes), s) in fastest(at_blocks(samples, hb_blocks)) {
        let rules = collectives.entry(collective.name().to_string()).or_default();
        // Keep the previous size's algorithm while it is within the noise of the fastest, so
        // timing noise between near-equal algorithms does not fragment the rules.
        let keep = rules.last().is_some_and(|last| {
            at_blocks(samples, hb_blocks).any(|o| {
                (o.collective, o.bytes) == (collective, bytes) && o.algorithm == last.algorithm && o.us <= s.us * NOISE
            })
        });
        match rules.last_mut() {
            Some(last) if keep => last.max_bytes = Some(bytes as u64),
            _ => rules.push(Rule {
                dtype: dtype.map(|t| t.name().to_string()),
                ranks: Some(ranks),
                nodes,
                max_bytes: Some(bytes as u64),
                algorithm: s.algorithm.clone(),
            }),
        }
    }
    for rules in collectives.values_mut() {
        if let Some(last) = rules.last_mut() {
            last.max_bytes = None;
        }
    }
    // Across nodes no algorithm timed depends on the HB block count.
    let blocks = nodes.is_none().then_some(hb_blocks);
    let table = TuningTable { machine: machine.to_string(), ranks: Some(ranks), hb_blocks: blocks, collectives };
    // The table must be one the selector accepts.
    Selector::default().apply(&table)?;
    Ok(Tuned { table, hb_blocks })
}

/// Per collective: every algorithm's time at each size (at the chosen block count) and the pick.
fn print_summary(samples: &[Sample], tuned: &Tuned) {
    println!("# HB blocks: {} (best geometric mean)", tuned.hb_blocks);
    let chosen = fastest(at_blocks(samples, tuned.hb_blocks));
    let mut collectives: Vec<Collective> = samples.iter().map(|s| s.collective).collect();
    collectives.dedup();
    for collective in collectives {
        let timed = |a: &Algorithm| samples.iter().any(|s| s.collective == collective && s.algorithm == a.name());
        let algorithms: Vec<Algorithm> = collective.algorithms().filter(timed).collect();
        print!("\n{:>8} ", collective.name());
        for a in &algorithms {
            print!("{:>10} ", format!("{} us", a.name()));
        }
        println!("  chosen");
        for (&(c, bytes), pick) in chosen.iter().filter(|((c, _), _)| *c == collective) {
            print!("{:>8} ", format_size(bytes as f64));
            for a in &algorithms {
                let s = at_blocks(samples, tuned.hb_blocks)
                    .find(|s| s.collective == c && s.bytes == bytes && s.algorithm == a.name());
                print!("{:>10} ", s.map_or("-".to_string(), |s| format!("{:.2}", s.us)));
            }
            println!("  {}", pick.algorithm);
        }
    }
}

/// Entry of one `tune-worker` process.
pub fn run_worker() -> Result<ExitCode, BoxError> {
    let options: TuneOptions = serde_json::from_str(&std::env::var(WORKER_OPTIONS)?)?;
    let torchrun = TorchrunEnv::from_env()?;
    let result = measure(&options, &torchrun).map_err(|e| e.to_string());
    if let Err(e) = &result {
        eprintln!("rank {}: {e}", torchrun.rank);
    }
    launch::write_report(torchrun.rank, &serde_json::to_vec(&result)?)?;
    Ok(if result.is_err() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Whether `algorithm`'s call of `bytes` is checked before it is timed: LL ones always (their
/// sizes are small), the others up to `--check-max`.
fn checks(options: &TuneOptions, algorithm: Algorithm, bytes: usize) -> bool {
    options.check_max_bytes > 0 && (bytes <= options.check_max_bytes || algorithm.protocol() == Protocol::Ll)
}

/// What is wrong with `run`'s call on any rank, if anything: each rank checks its own result of
/// every launch of `weft bench --check` ([`every_launch`] with graph replays) against the
/// float64 reference, and the ranks pool their wrong elements and whether their results were
/// identical where they must be, so every rank gets the same answer. Collective: every rank
/// calls it with the same call.
fn failure_anywhere(me: &Rank, call: &Call<'_>, run: &Run<'_>, op: ReduceOp) -> Result<Option<String>, BoxError> {
    let seed = shared_seed(&*me.bootstrap)?;
    let reference = Reference { dtype: call.dtype, op, seed, ranks: call.ranks as u32 };
    let found = Checking { me, call, run, reference: &reference }.launches(&every_launch(true))?;
    let mine = [&found.wrong.to_le_bytes()[..], &[u8::from(found.identical)]].concat();
    let (mut wrong, mut identical) = (0u64, true);
    for theirs in me.bootstrap.all_gather(&mine)? {
        let count = theirs.get(..8).and_then(|b| b.try_into().ok()).ok_or("a short check report")?;
        wrong = wrong.saturating_add(u64::from_le_bytes(count));
        identical &= theirs.get(8) == Some(&1);
    }
    Ok(match (wrong, identical) {
        (0, true) => None,
        (0, false) => Some("ranks' results differ where they must be bitwise identical".into()),
        (n, _) => Some(format!("{n} wrong elements")),
    })
}

/// One rank's measurements of every item of [`work`].
fn measure(options: &TuneOptions, torchrun: &TorchrunEnv) -> Result<Vec<Sample>, BoxError> {
    let env = Env::from_process()?;
    let device = Device::new(torchrun.local_rank.unwrap_or(torchrun.rank))?;
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let comm = Communicator::new(bootstrap, device, env.clone())?;
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let me = Rank::new(&comm, options.max_bytes.max(options.dtype.size()))?;
    let start_line = StartLine::new(&comm)?;
    let nodes = tuned_nodes(ranks, &env);
    let across = nodes.count() > 1;
    let mut samples = Vec::new();
    let mut current: Option<(u32, Collectives)> = None;
    // Algorithms that failed a call across nodes (a plan this build cannot set up there), or
    // returned a wrong element: reported once, not run again, left out of the table.
    let mut failed: Vec<Algorithm> = Vec::new();
    for (blocks, algorithm, requested) in work(options, &nodes) {
        if failed.contains(&algorithm) {
            if rank == 0 {
                progress::record(requested);
            }
            continue;
        }
        if current.as_ref().is_none_or(|(b, _)| *b != blocks) {
            drop(current.take()); // release the previous resources first
            let config = CollConfig { hb_blocks: blocks, ..CollConfig::from_env(&env)? };
            let coll = Collectives::new(&comm, config)?;
            coll.prepare(options.dtype, options.op)?;
            current = Some((blocks, coll));
        }
        let Some((_, coll)) = current.as_mut() else { continue }; // set just above
        let mut selector = coll.config().selector.clone();
        // Across nodes only a forced algorithm replaces the choice across nodes.
        if across {
            selector.force(algorithm)
        } else {
            selector.prefer(algorithm)
        }
        coll.set_selector(selector);
        let collective = algorithm.collective();
        if let Some(shape) = collective.shape(requested, options.dtype.size(), ranks, 0) {
            let call = Call {
                collective,
                shape,
                dtype: options.dtype,
                op: CallOp::Host(data::reduction(options.dtype, options.op, rank as u32)),
                rank,
                ranks,
                stream: &me.stream,
            };
            let coll = &*coll;
            let run = |buffers: &mut Buffers| call.weft(coll, buffers, Placement::OutOfPlace);
            let placed = |buffers: &mut Buffers, placement| call.weft(coll, buffers, placement).map(|_| ());
            // The algorithm that actually ran: an LL one beyond its slot falls back to HB.
            let first = run(&mut me.buffers.borrow_mut());
            if let (true, Err(e)) = (across, &first) {
                eprintln!("rank {rank}: {algorithm} across {} nodes not timed: {e}", nodes.count());
                failed.push(algorithm);
            } else if first? != algorithm {
                // Not this algorithm's size: nothing to time.
            } else if let Some(why) = checks(options, algorithm, shape.bytes)
                .then(|| failure_anywhere(&me, &call, &placed, options.op))
                .transpose()?
                .flatten()
            {
                if rank == 0 {
                    eprintln!("{algorithm} at {}: {why}; left out of the table", format_size(shape.bytes as f64));
                }
                failed.push(algorithm);
            } else {
                let us = me.time(true, shape.bytes, &|b| run(b).map(|_| ()), &start_line)?;
                samples.push(Sample {
                    hb_blocks: blocks,
                    collective,
                    algorithm: algorithm.name().to_string(),
                    bytes: shape.bytes,
                    us,
                });
            }
        }
        if rank == 0 {
            progress::record(requested);
        }
    }
    comm.barrier()?;
    Ok(without_failed(samples, &failed))
}

/// `samples` less every one of an algorithm in `failed`: one that failed a check at some size
/// is out of the table at every size, its earlier timings included.
fn without_failed(mut samples: Vec<Sample>, failed: &[Algorithm]) -> Vec<Sample> {
    samples.retain(|s| !failed.iter().any(|a| a.collective() == s.collective && a.name() == s.algorithm));
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(hb_blocks: u32, collective: Collective, algorithm: &str, bytes: usize, us: f64) -> Sample {
        Sample { hb_blocks, collective, algorithm: algorithm.into(), bytes, us }
    }

    fn within(ranks: usize, dtype: Option<DataType>) -> Scope {
        Scope { ranks, dtype, nodes: None }
    }

    fn options(collectives: Vec<Collective>, gpus: usize) -> TuneOptions {
        TuneOptions {
            collectives,
            min_bytes: 1024,
            max_bytes: 4096,
            factor: 2,
            dtype: DataType::Bf16,
            op: ReduceOp::Sum,
            hb_blocks: vec![64, 128],
            gpus,
            any_dtype: false,
            check_max_bytes: DEFAULT_CHECK_MAX_BYTES,
            with_ll128: false,
        }
    }

    #[test]
    fn an_algorithm_that_failed_a_check_loses_every_timing() {
        use Collective::*;
        let samples = vec![
            sample(64, AllReduce, "ll128", 1024, 2.0),
            sample(64, AllReduce, "ll", 1024, 3.0),
            sample(64, AllGather, "ll128", 1024, 2.0),
            sample(128, AllReduce, "ll128", 4096, 2.5),
        ];
        // ll128 of AllReduce failed at a larger size: its timings at every size go, the
        // AllGather one of the same name stays.
        let kept = without_failed(samples, &[Algorithm::AllReduceLl128]);
        let left: Vec<(Collective, &str)> = kept.iter().map(|s| (s.collective, s.algorithm.as_str())).collect();
        assert_eq!(left, vec![(AllReduce, "ll"), (AllGather, "ll128")]);
    }

    #[test]
    fn ll128_is_timed_only_when_asked_and_ll_candidates_are_checked_at_every_size() {
        let one_node = Nodes::new(vec![0; 2]);
        let timed = |o: &TuneOptions| work(o, &one_node).iter().any(|(_, a, _)| a.is_ll128());
        let mut o = options(vec![Collective::AllReduce, Collective::Broadcast], 2);
        assert!(!timed(&o), "ll128 timed without --with-ll128");
        o.with_ll128 = true;
        assert!(timed(&o));
        // Checked: LL at any size, the others up to --check-max; nothing with 0.
        let big = 1 << 30;
        assert!(checks(&o, Algorithm::AllReduceLl128, big) && checks(&o, Algorithm::AllReduceLl, big));
        assert!(checks(&o, Algorithm::AllReduceHb, DEFAULT_CHECK_MAX_BYTES));
        assert!(!checks(&o, Algorithm::AllReduceHb, DEFAULT_CHECK_MAX_BYTES + 1));
        o.check_max_bytes = 0;
        assert!(!checks(&o, Algorithm::AllReduceLl, 1024) && !checks(&o, Algorithm::AllReduceHb, 1024));
        // Options written before the check existed read back checking.
        let mut json = serde_json::to_value(options(vec![Collective::AllReduce], 2)).unwrap();
        json.as_object_mut().unwrap().retain(|k, _| k != "check_max_bytes" && k != "with_ll128");
        let read: TuneOptions = serde_json::from_value(json).unwrap();
        assert_eq!((read.check_max_bytes, read.with_ll128), (DEFAULT_CHECK_MAX_BYTES, false));
    }

    #[test]
    fn the_fastest_algorithm_per_size_becomes_ascending_rules() {
        use Collective::*;
        let samples = vec![
            sample(64, AllReduce, "ll", 1024, 4.0),
            sample(64, AllReduce, "ll2", 1024, 6.0),
            sample(64, AllReduce, "hb", 1024, 9.0),
            sample(64, AllReduce, "ll", 4096, 5.0),
            sample(64, AllReduce, "ll2", 4096, 4.5),
            sample(64, AllReduce, "hb", 4096, 8.0),
            sample(64, AllReduce, "hb", 16384, 8.0),
            sample(64, AllReduce, "ll2", 16384, 8.5),
            // Within the noise of hb: hb stays.
            sample(64, AllReduce, "hb", 65536, 10.1),
            sample(64, AllReduce, "ll2", 65536, 10.0),
            sample(64, AllGather, "hb", 1024, 3.0),
            // 128 blocks: HB is slower everywhere, so 64 wins.
            sample(128, AllReduce, "hb", 1024, 10.0),
            sample(128, AllReduce, "hb", 4096, 9.0),
            sample(128, AllReduce, "hb", 16384, 7.9),
            sample(128, AllReduce, "hb", 65536, 11.0),
            sample(128, AllGather, "hb", 1024, 30.0),
        ];
        let tuned = choose(&samples, within(4, Some(DataType::Bf16)), "test").unwrap();
        assert_eq!(tuned.hb_blocks, 64);
        let rules = &tuned.table.collectives["allreduce"];
        let got: Vec<(Option<u64>, &str)> = rules.iter().map(|r| (r.max_bytes, r.algorithm.as_str())).collect();
        assert_eq!(got, vec![(Some(1024), "ll"), (Some(4096), "ll2"), (None, "hb")]);
        assert!(rules.iter().all(|r| (r.dtype.as_deref(), r.ranks) == (Some("bf16"), Some(4))), "{rules:?}");
        assert_eq!(tuned.table.collectives["allgather"].len(), 1);
        assert_eq!((tuned.table.ranks, tuned.table.hb_blocks), (Some(4), Some(64)));
        // What it writes is what the selector reads.
        let text = serde_json::to_string(&tuned.table).unwrap();
        let mut selector = Selector::default();
        selector.apply(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(selector.select(AllReduce, DataType::Bf16, 2048, 4), Algorithm::AllReduceLl2);
        assert_eq!(selector.select(AllReduce, DataType::Bf16, 1 << 30, 4), Algorithm::AllReduceHb);
        // Other types and rank counts keep the defaults.
        let default = Selector::default();
        for (dtype, ranks) in [(DataType::F32, 4), (DataType::Bf16, 8)] {
            for bytes in [2048, 1 << 30] {
                let expected = default.select(AllReduce, dtype, bytes, ranks);
                assert_eq!(selector.select(AllReduce, dtype, bytes, ranks), expected);
            }
        }
        // Asked for any type, the rules carry the rank count only.
        let any = choose(&samples, within(4, None), "test").unwrap();
        assert!(any.table.collectives["allreduce"].iter().all(|r| r.dtype.is_none() && r.ranks == Some(4)));
        let mut selector = Selector::default();
        selector.apply(&any.table).unwrap();
        assert_eq!(selector.select(AllReduce, DataType::F32, 2048, 4), Algorithm::AllReduceLl2);
        assert_eq!(
            selector.select(AllReduce, DataType::F32, 2048, 2),
            default.select(AllReduce, DataType::F32, 2048, 2)
        );
    }

    #[test]
    fn ranks_must_agree_on_what_they_measured() {
        let a = vec![sample(64, Collective::AllReduce, "hb", 1024, 4.0)];
        let b = vec![sample(64, Collective::AllReduce, "hb", 1024, 6.0)];
        assert_eq!(slowest_rank(&[a.clone(), b]).unwrap()[0].us, 6.0);
        let other = vec![sample(64, Collective::AllReduce, "ll", 1024, 6.0)];
        assert!(slowest_rank(&[a.clone(), other]).is_err());
        assert!(slowest_rank(&[a, vec![]]).is_err());
        assert!(choose(&[], within(4, None), "none").is_err());
    }

    #[test]
    fn the_work_list_times_ll_once() {
        let items = work(&options(vec![Collective::AllReduce], 2), &Nodes::one(2));
        // 4 algorithms x 3 sizes at 64 blocks, only the two HB ones (hb, ring) at 128.
        assert_eq!(items.len(), 18);
        assert!(items[12..].iter().all(|(b, a, _)| *b == 128 && a.protocol() == Protocol::Hb));
    }

    /// Across virtual nodes: the AllReduces that reach other nodes, once (no HB block pass),
    /// and nothing of the collectives that have none.
    #[test]
    fn across_nodes_the_work_list_is_the_allreduces_that_cross_them() {
        let all = options(vec![Collective::AllReduce, Collective::AllGather], 4);
        for (per_node, plans) in [(2, vec!["plan:nvrar_allreduce", "plan:hier2ph_allreduce"]), (1, vec![])] {
            let nodes = Nodes::virtual_nodes(4, per_node);
            let items = work(&all, &nodes);
            let mut names: Vec<&str> = items.iter().map(|(_, a, _)| a.name()).collect();
            names.dedup();
            let mut natives: Vec<&str> = names.iter().copied().filter(|n| !n.starts_with("plan:")).collect();
            natives.sort_unstable();
            assert_eq!(natives, ["2ph", "nvrar", "port_allpairs", "port_ring"]);
            // Every plan timed can be set up on these nodes; the single-node ones are not timed.
            for name in names.iter().filter(|n| n.starts_with("plan:")) {
                let a = Algorithm::from_name(Collective::AllReduce, name).unwrap();
                let Algorithm::Plan(id) = a else { panic!("{name} is not a plan") };
                assert!(id.plan_at(&nodes, 0).is_ok(), "{name}");
            }
            for plan in plans {
                assert!(names.contains(&plan), "{plan} at {per_node} ranks per node: {names:?}");
            }
            assert!(!names.contains(&"plan:ring_allreduce") && !names.contains(&"ll") && !names.contains(&"hb"));
            assert!(items.iter().all(|&(b, a, _)| b == 64 && a.collective() == Collective::AllReduce));
            assert_eq!(items.len(), names.len() * 3);
        }
        assert!(work(&options(vec![Collective::AllGather], 4), &Nodes::virtual_nodes(4, 2)).is_empty());
    }

    /// Rules measured across nodes carry the node count: the selector consults them across
    /// those nodes only, and the table sets no HB block count.
    #[test]
    fn rules_measured_across_nodes_serve_that_node_count_only() {
        use Collective::AllReduce;
        let samples = vec![
            sample(64, AllReduce, "port_allpairs", 1024, 20.0),
            sample(64, AllReduce, "port_ring", 1024, 30.0),
            sample(64, AllReduce, "port_allpairs", 1 << 20, 90.0),
            sample(64, AllReduce, "port_ring", 1 << 20, 60.0),
        ];
        let tuned = choose(&samples, Scope { ranks: 4, dtype: None, nodes: Some(2) }, "test").unwrap();
        let rules = &tuned.table.collectives["allreduce"];
        assert!(rules.iter().all(|r| (r.nodes, r.ranks) == (Some(2), Some(4))), "{rules:?}");
        assert_eq!(tuned.table.hb_blocks, None);
        let mut selector = Selector::default();
        selector.apply(&tuned.table).unwrap();
        let across = |bytes: u64, nodes: usize| {
            selector.across_nodes(weft_coll::AcrossNodes {
                collective: AllReduce,
                bytes,
                dtype: DataType::Bf16,
                op: ReduceOp::Sum,
                ranks: 4,
                nodes,
                equal_nodes: true,
            })
        };
        assert_eq!(across(1024, 2), Ok(Algorithm::AllReducePortAllPairs));
        assert_eq!(across(1 << 20, 2), Ok(Algorithm::AllReducePortRing));
        // Within one node the defaults stay.
        let default = Selector::default();
        assert_eq!(
            selector.select(AllReduce, DataType::Bf16, 1 << 20, 4),
            default.select(AllReduce, DataType::Bf16, 1 << 20, 4)
        );
    }
}
