//! `weft tune`: times every algorithm of every collective at every size on this machine (CUDA
//! graph mode, one process per GPU, the slowest rank counts), for each HB block count asked
//! for, and writes the tuning table the selector reads (`WEFT_TUNING_FILE`): the block count
//! with the best geometric-mean time, and per collective the fastest algorithm at each size,
//! as rules for the rank count measured and the element type measured (any type on request).
//!
//! An LL candidate is timed only at the sizes its packet slot carries (beyond them the call
//! itself falls back to HB, and the sample is dropped); LL launches do not depend on the HB
//! block count, so they are timed once.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_coll::{Algorithm, CollConfig, CollectiveAlgorithms, Collectives, Protocol, Rule, Selector, TuningTable};
use weft_core::{Communicator, Env};
use weft_gpu::Device;
use weft_types::{DataType, ReduceOp};

use crate::harness::rank::{Buffers, Call, CallOp, Placement, Rank};
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

/// What a worker measures, in order: (HB blocks, algorithm, requested size). The launcher uses
/// the same list for the progress bar.
fn work(options: &TuneOptions) -> Vec<(u32, Algorithm, usize)> {
    let sizes = sizes_between(options.min_bytes, options.max_bytes, options.factor);
    let mut out = Vec::new();
    for (i, &blocks) in options.hb_blocks.iter().enumerate() {
        for &collective in &options.collectives {
            // Plans are not tuned yet: their executor overhead is still to be measured. Neither
            // is the PortChannel ring, until it has passed the GPU suite (force it to time it).
            let native = |a: &Algorithm| !matches!(a.protocol(), Protocol::Plan | Protocol::Port);
            for algorithm in collective.algorithms().filter(native).filter(|a| i == 0 || a.protocol() != Protocol::Ll) {
                out.extend(sizes.iter().map(|&s| (blocks, algorithm, s)));
            }
        }
    }
    out
}

/// Runs the measurements on `options.gpus` processes, prints what each collective chose and
/// writes the table to `output`.
pub fn run(options: &TuneOptions, output: &Path) -> Result<ExitCode, BoxError> {
    let items: Vec<usize> = work(options).iter().map(|&(_, _, bytes)| bytes).collect();
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
    let tuned = choose(&samples, options.gpus, dtype, &machine)?;
    print_summary(&samples, &tuned);
    std::fs::write(output, serde_json::to_string_pretty(&tuned.table)? + "\n")?;
    println!("wrote {} (use it with WEFT_TUNING_FILE={})", output.display(), output.display());
    Ok(ExitCode::SUCCESS)
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

/// Picks the HB block count whose fastest algorithms have the smallest geometric-mean time
/// over every (collective, size), then the fastest algorithm per size at that count, merged
/// into ascending size rules (the last one open-ended) for `ranks` ranks and element type
/// `dtype` (`None`: any).
pub fn choose(samples: &[Sample], ranks: usize, dtype: Option<DataType>, machine: &str) -> Result<Tuned, String> {
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
                // `weft tune` measures within one node.
                nodes: None,
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
    let table =
        TuningTable { machine: machine.to_string(), ranks: Some(ranks), hb_blocks: Some(hb_blocks), collectives };
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
        let algorithms: Vec<Algorithm> = collective.algorithms().filter(|a| a.protocol() != Protocol::Plan).collect();
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

/// One rank's measurements of every item of [`work`].
fn measure(options: &TuneOptions, torchrun: &TorchrunEnv) -> Result<Vec<Sample>, BoxError> {
    let env = Env::from_process()?;
    let device = Device::new(torchrun.local_rank.unwrap_or(torchrun.rank))?;
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let comm = Communicator::new(bootstrap, device, env.clone())?;
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let me = Rank::new(&comm, options.max_bytes.max(options.dtype.size()))?;
    let start_line = StartLine::new(&comm)?;
    let mut samples = Vec::new();
    let mut current: Option<(u32, Collectives)> = None;
    for (blocks, algorithm, requested) in work(options) {
        if current.as_ref().is_none_or(|(b, _)| *b != blocks) {
            drop(current.take()); // release the previous resources first
            let config = CollConfig { hb_blocks: blocks, ..CollConfig::from_env(&env)? };
            let coll = Collectives::new(&comm, config)?;
            coll.prepare(options.dtype, options.op)?;
            current = Some((blocks, coll));
        }
        let Some((_, coll)) = current.as_mut() else { continue }; // set just above
        let mut selector = coll.config().selector.clone();
        selector.prefer(algorithm);
        coll.set_selector(selector);
        let collective = algorithm.collective();
        if let Some(shape) = collective.shape(requested, options.dtype.size(), ranks) {
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
            // The algorithm that actually ran: an LL one beyond its slot falls back to HB.
            if run(&mut me.buffers.borrow_mut())? == algorithm {
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
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(hb_blocks: u32, collective: Collective, algorithm: &str, bytes: usize, us: f64) -> Sample {
        Sample { hb_blocks, collective, algorithm: algorithm.into(), bytes, us }
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
        let tuned = choose(&samples, 4, Some(DataType::Bf16), "test").unwrap();
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
        let any = choose(&samples, 4, None, "test").unwrap();
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
        assert!(choose(&[], 4, None, "none").is_err());
    }

    #[test]
    fn the_work_list_times_ll_once() {
        let options = TuneOptions {
            collectives: vec![Collective::AllReduce],
            min_bytes: 1024,
            max_bytes: 4096,
            factor: 2,
            dtype: DataType::Bf16,
            op: ReduceOp::Sum,
            hb_blocks: vec![64, 128],
            gpus: 2,
            any_dtype: false,
        };
        let items = work(&options);
        // 4 algorithms x 3 sizes at 64 blocks, only the two HB ones (hb, ring) at 128.
        assert_eq!(items.len(), 18);
        assert!(items[12..].iter().all(|(b, a, _)| *b == 128 && a.protocol() == Protocol::Hb));
    }
}
