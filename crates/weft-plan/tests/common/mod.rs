//! Helpers shared by the integration tests: inputs, host references, running plans.

#![allow(dead_code, unreachable_pub)]

use weft_plan::interp::{Element, InterpretError, Interpreter, RankBuffers, ReduceOp};
use weft_plan::plan::{
    Buffer, CollectiveKind, ExecutionPlan, Geometry, Op, PLAN_VERSION, Protocol, RankPlan, ThreadBlock,
};

/// splitmix64: small, deterministic, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `-range..=range`.
    pub fn int(&mut self, range: i64) -> i64 {
        (self.next_u64() % (2 * range as u64 + 1)) as i64 - range
    }

    /// Uniform in `[-1, 1)`.
    pub fn float(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// The collectives the shipped plans compute, as host references see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast(usize),
    /// Rank `r` receives rank `r - 1`'s input; rank 0's output is untouched.
    AllToNext,
}

/// Expected outputs, computed directly from the collective's definition (no chunks involved).
/// `None`: the rank's output must be left exactly as it was.
pub fn reference<T: Copy>(coll: Coll, inputs: &[Vec<T>], op: impl Fn(T, T) -> T) -> Vec<Option<Vec<T>>> {
    let n = inputs.len();
    let count = inputs[0].len();
    let reduce = |e: usize| {
        let mut acc = inputs[0][e];
        for input in &inputs[1..] {
            acc = op(acc, input[e]);
        }
        acc
    };
    match coll {
        Coll::AllReduce => {
            let out: Vec<T> = (0..count).map(reduce).collect();
            vec![Some(out); n]
        }
        Coll::AllGather => {
            let out: Vec<T> = inputs.iter().flatten().copied().collect();
            vec![Some(out); n]
        }
        Coll::ReduceScatter => {
            let m = count / n;
            (0..n).map(|r| Some((r * m..(r + 1) * m).map(reduce).collect())).collect()
        }
        Coll::AllToAll => {
            let m = count / n;
            (0..n).map(|r| Some((0..n).flat_map(|q| inputs[q][r * m..(r + 1) * m].to_vec()).collect())).collect()
        }
        Coll::Broadcast(root) => vec![Some(inputs[root].clone()); n],
        Coll::AllToNext => (0..n).map(|r| (r > 0).then(|| inputs[r - 1].clone())).collect(),
    }
}

/// Runs `plan` on `inputs` with every output element poisoned first; returns the outputs.
pub fn run<T: Element>(
    plan: &ExecutionPlan,
    inputs: &[Vec<T>],
    poison: T,
    op: ReduceOp,
) -> Result<Vec<Vec<T>>, InterpretError> {
    let count = inputs[0].len();
    let geometry = Geometry::new(plan, count)?;
    let mut buffers: Vec<RankBuffers<T>> = inputs
        .iter()
        .enumerate()
        .map(|(r, input)| {
            let len = geometry.buffer_len(r as u32, Buffer::Output).unwrap_or(0);
            RankBuffers::new(input.clone(), vec![poison; len])
        })
        .collect();
    Interpreter::new(plan).reduce_op(op).run(&mut buffers, count)?;
    Ok(buffers.into_iter().map(|b| b.output).collect())
}

/// Input elements per rank for `m` elements per block.
pub fn element_count(plan: &ExecutionPlan, m: usize) -> usize {
    m * (plan.input_chunks / plan.size_classes) as usize
}

/// Integer inputs in `-1000..=1000`.
pub fn int_inputs(nranks: usize, count: usize, seed: u64) -> Vec<Vec<i64>> {
    let mut rng = Rng::new(seed);
    (0..nranks).map(|_| (0..count).map(|_| rng.int(1000)).collect()).collect()
}

pub fn combine_i64(op: ReduceOp) -> impl Fn(i64, i64) -> i64 {
    move |a, b| match op {
        ReduceOp::Sum => a.wrapping_add(b),
        ReduceOp::Prod => a.wrapping_mul(b),
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
        _ => unreachable!("test uses only the four operators"),
    }
}

/// Checks every element of every rank's output; `poison` must survive where the reference says
/// the output is unconstrained. Returns a description of the first difference.
pub fn compare<T: PartialEq + std::fmt::Debug + Copy>(
    got: &[Vec<T>],
    want: &[Option<Vec<T>>],
    poison: T,
) -> Result<(), String> {
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        match w {
            Some(w) => {
                if g.len() != w.len() {
                    return Err(format!("rank {r}: {} elements, expected {}", g.len(), w.len()));
                }
                if let Some(e) = (0..g.len()).find(|&e| g[e] != w[e]) {
                    return Err(format!("rank {r} element {e}: got {:?}, expected {:?}", g[e], w[e]));
                }
            }
            None => {
                if let Some(e) = g.iter().position(|x| *x != poison) {
                    return Err(format!("rank {r} element {e} was written but must be untouched"));
                }
            }
        }
    }
    Ok(())
}

/// Runs `plan` on random inputs of `m` elements per block and checks it computes `coll`:
/// exactly with i64 (the given operator, if the collective reduces), exactly with
/// integer-valued f32 (sum), and with general f64 values (sum, to a relative 1e-12).
pub fn check(plan: &ExecutionPlan, coll: Coll, m: usize, seed: u64, op: ReduceOp) -> Result<(), String> {
    let n = plan.nranks as usize;
    let count = element_count(plan, m);
    let ints = int_inputs(n, count, seed);

    let got = run(plan, &ints, i64::MIN + 7, op).map_err(|e| e.to_string())?;
    compare(&got, &reference(coll, &ints, combine_i64(op)), i64::MIN + 7).map_err(|e| format!("i64 {op:?}: {e}"))?;

    let floats: Vec<Vec<f32>> = ints.iter().map(|v| v.iter().map(|&x| x as f32).collect()).collect();
    let got = run(plan, &floats, f32::MIN, ReduceOp::Sum).map_err(|e| e.to_string())?;
    compare(&got, &reference(coll, &floats, |a, b| a + b), f32::MIN).map_err(|e| format!("f32: {e}"))?;

    let mut rng = Rng::new(seed ^ 0x5eed);
    let reals: Vec<Vec<f64>> = (0..n).map(|_| (0..count).map(|_| rng.float()).collect()).collect();
    let got = run(plan, &reals, f64::MAX, ReduceOp::Sum).map_err(|e| e.to_string())?;
    let want = reference(coll, &reals, |a, b| a + b);
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        match w {
            Some(w) => {
                for (e, (x, y)) in g.iter().zip(w).enumerate() {
                    if (x - y).abs() > 1e-12 * (1.0 + y.abs()) {
                        return Err(format!("f64 rank {r} element {e}: got {x}, expected {y}"));
                    }
                }
            }
            None => {
                if g.iter().any(|&x| x != f64::MAX) {
                    return Err(format!("f64 rank {r}: output must be untouched"));
                }
            }
        }
    }
    Ok(())
}

/// A hand-made plan: `ranks[r][t]` is thread block `t` of rank `r`; one size class, no scratch.
pub fn hand_plan(collective: CollectiveKind, input: u32, output: u32, ranks: Vec<Vec<Vec<Op>>>) -> ExecutionPlan {
    ExecutionPlan {
        version: PLAN_VERSION,
        name: "hand".into(),
        collective,
        nranks: ranks.len() as u32,
        size_classes: 1,
        input_chunks: input,
        output_chunks: output,
        protocol: Protocol::Simple,
        ranks: ranks
            .into_iter()
            .enumerate()
            .map(|(r, tbs)| RankPlan {
                rank: r as u32,
                scratch: vec![],
                threadblocks: tbs.into_iter().enumerate().map(|(id, ops)| ThreadBlock { id: id as u32, ops }).collect(),
            })
            .collect(),
    }
}
