//! Low-latency dispatch and combine (DeepEP's decoding path): every (token, expert) pair is a
//! message into a fixed per-(local expert, source rank) region of `max_tokens` slots; the
//! receiver packs each local expert's rows by source rank, then token order.

use half::bf16;

/// The sizes every rank agrees on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlShape {
    /// Ranks.
    pub ranks: usize,
    /// Experts, `experts / ranks` per rank.
    pub experts: usize,
    /// Top-k slots per token.
    pub topk: usize,
    /// `num_max_dispatch_tokens_per_rank`: rows per (local expert, source rank).
    pub max_tokens: usize,
}

/// What one rank holds after a low-latency dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlReceived {
    /// `[local experts]`: rows of each local expert.
    pub recv_count: Vec<i32>,
    /// `[local experts][ranks * max_tokens]`: the source token of each valid row (the rest is
    /// not written by the kernel; here 0).
    pub src_info: Vec<i32>,
    /// `[local experts][ranks]`: `first row << 32 | rows` of each source rank.
    pub layout_range: Vec<i64>,
    /// `[local experts][ranks * max_tokens]`: the source rank of each valid row (for checks).
    pub src_rank: Vec<usize>,
}

impl LlReceived {
    /// Nothing received yet: `local` experts, rows for `ranks` sources of `max_tokens` each.
    pub(super) fn empty(local: usize, ranks: usize, max_tokens: usize) -> Self {
        let rows = ranks * max_tokens;
        Self {
            recv_count: vec![0; local],
            src_info: vec![0; local * rows],
            layout_range: vec![0; local * ranks],
            src_rank: vec![0; local * rows],
        }
    }

    /// Appends token `t` of rank `src` as row `*next` of local expert `le` (of `rows`).
    pub(super) fn push_row(&mut self, le: usize, rows: usize, next: &mut usize, src: usize, t: i32) {
        self.src_info[le * rows + *next] = t;
        self.src_rank[le * rows + *next] = src;
        *next += 1;
    }
}

/// The low-latency dispatch of every rank's `topk_idx` (`[tokens][topk]`, entry r is rank r's).
pub fn ll_dispatch(shape: LlShape, topk_idx: &[&[i64]]) -> Vec<LlReceived> {
    let LlShape { ranks, experts, topk, max_tokens } = shape;
    let local = experts / ranks;
    let rows = ranks * max_tokens;
    (0..ranks)
        .map(|me| {
            let mut out = LlReceived::empty(local, ranks, max_tokens);
            for le in 0..local {
                let e = (me * local + le) as i64;
                let mut next = 0usize;
                for (s, idx) in topk_idx.iter().enumerate() {
                    let begin = next;
                    for t in 0..idx.len() / topk {
                        if idx[t * topk..(t + 1) * topk].contains(&e) {
                            out.push_row(le, rows, &mut next, s, t as i32);
                        }
                    }
                    out.layout_range[le * ranks + s] = ((begin as i64) << 32) | (next - begin) as i64;
                }
                out.recv_count[le] = next as i32;
            }
            out
        })
        .collect()
}

/// The low-latency combine: rank r's `x[r]` holds `[local experts][ranks * max_tokens][hidden]`
/// BF16 rows in its dispatch's packed order. Token t of rank s: in f32 from 0, for each top-k
/// slot k in order whose expert is not -1, `acc = fma(row, weight_k, acc)` (one rounding per
/// slot) with the row the expert's rank holds for (s, t); rounded once to BF16.
pub fn ll_combine(
    shape: LlShape,
    received: &[LlReceived],
    x: &[&[bf16]],
    topk_idx: &[&[i64]],
    topk_weights: &[&[f32]],
    hidden: usize,
) -> Vec<Vec<bf16>> {
    let LlShape { ranks, experts, topk, max_tokens } = shape;
    let local = experts / ranks;
    let rows = ranks * max_tokens;
    (0..ranks)
        .map(|s| {
            let tokens = topk_idx[s].len() / topk;
            let mut out = vec![bf16::ZERO; tokens * hidden];
            for t in 0..tokens {
                // (owner rank, offset of the row in its x, weight) per selected slot, in slot order.
                let sources: Vec<(usize, usize, f32)> = (0..topk)
                    .filter_map(|k| {
                        let e = usize::try_from(topk_idx[s][t * topk + k]).ok()?;
                        let (owner, le) = (e / local, e % local);
                        let got = &received[owner];
                        let row = (0..got.recv_count[le] as usize)
                            .find(|&i| got.src_rank[le * rows + i] == s && got.src_info[le * rows + i] as usize == t)?;
                        Some((owner, (le * rows + row) * hidden, topk_weights[s][t * topk + k]))
                    })
                    .collect();
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for &(owner, offset, w) in &sources {
                        acc = x[owner][offset + h].to_f32().mul_add(w, acc);
                    }
                    out[t * hidden + h] = bf16::from_f32(acc);
                }
            }
            out
        })
        .collect()
}
