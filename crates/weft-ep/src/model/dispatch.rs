//! Normal-mode dispatch: where every token lands on every rank, and the handle combine reuses.
//!
//! Receive order (DeepEP's): by source rank, then by the source's channel, then by source token
//! order; as channels split a rank's tokens into consecutive ranges, this is source rank, then
//! token order.

use std::ops::Range;

use super::layout::dispatch_layout;

/// The routing one rank holds: `[tokens][topk]` expert indices (negative: no expert) and
/// weights.
#[derive(Debug, Clone, Copy)]
pub struct RankRouting<'a> {
    /// `[tokens][topk]` global expert indices; a negative entry selects nothing.
    pub topk_idx: &'a [i64],
    /// `[tokens][topk]` weights.
    pub topk_weights: &'a [f32],
}

/// The sizes every rank agrees on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchShape {
    /// Ranks of the expert-parallel group.
    pub ranks: usize,
    /// Experts, `experts / ranks` on each rank.
    pub experts: usize,
    /// Top-k entries per token.
    pub topk: usize,
    /// Channels the tokens of a rank are split into (half the SMs of a normal-mode kernel).
    pub channels: usize,
    /// Each local expert's receive count is rounded up to a multiple of this.
    pub expert_alignment: usize,
}

/// The tokens of channel `channel` out of `channels` over `tokens` tokens: DeepEP's split,
/// `ceil(tokens / channels)` consecutive tokens per channel, the last channels possibly short
/// or empty.
pub fn channel_range(tokens: usize, channels: usize, channel: usize) -> Range<usize> {
    let per = tokens.div_ceil(channels.max(1));
    let start = (channel * per).min(tokens);
    start..(start + per).min(tokens)
}

/// What one rank holds after a dispatch: its received rows and the handle.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// `[ranks][ranks]`, the same on every rank: entry `[s][d]` counts the tokens ranks `0..=s`
    /// send to rank `d`.
    pub rank_prefix_matrix: Vec<i32>,
    /// `[ranks][channels]`, this rank as sender: entry `[d][c]` counts the tokens of channels
    /// `0..=c` this rank sends to rank `d`.
    pub channel_prefix_matrix: Vec<i32>,
    /// `[ranks][channels]`, this rank as receiver: entry `[s][c]` is the first received row of
    /// the tokens of rank `s`'s channel `c`.
    pub recv_channel_prefix_matrix: Vec<i32>,
    /// `[received]`: each row's token index on its source rank.
    pub recv_src_idx: Vec<i32>,
    /// `[received]`: each row's source rank (implied by `rank_prefix_matrix`; for checks).
    pub recv_src_rank: Vec<usize>,
    /// `[received][topk]`: the row's experts as local indices on this rank, -1 for the others.
    pub recv_topk_idx: Vec<i64>,
    /// `[received][topk]`: the row's weights, 0 where `recv_topk_idx` is -1.
    pub recv_topk_weights: Vec<f32>,
    /// `[experts / ranks]`: rows naming each local expert, rounded up to the alignment.
    pub recv_tokens_per_expert: Vec<i32>,
    /// `[tokens][ranks]`, this rank as sender: whether a token goes to a rank.
    pub token_in_rank: Vec<bool>,
    /// `[tokens][ranks]`, this rank as sender: a token's position among the tokens this rank
    /// sends to that rank (its row there is `rank_prefix_matrix[me - 1][r]` plus it), or -1.
    pub send_head: Vec<i32>,
}

impl Received {
    /// Rows this rank received.
    pub fn len(&self) -> usize {
        self.recv_src_idx.len()
    }

    /// Whether this rank received no row.
    pub fn is_empty(&self) -> bool {
        self.recv_src_idx.is_empty()
    }
}

/// The dispatch of every rank's `routing` (entry r is rank r's): what each rank receives.
pub fn dispatch(shape: DispatchShape, routing: &[RankRouting<'_>]) -> Vec<Received> {
    let DispatchShape { ranks, experts, topk, channels, expert_alignment } = shape;
    let local_experts = experts / ranks;
    let layouts: Vec<_> = routing.iter().map(|r| dispatch_layout(r.topk_idx, topk, experts, ranks)).collect();
    let mut rank_prefix_matrix = vec![0i32; ranks * ranks];
    for s in 0..ranks {
        for d in 0..ranks {
            let before = if s == 0 { 0 } else { rank_prefix_matrix[(s - 1) * ranks + d] };
            rank_prefix_matrix[s * ranks + d] = before + layouts[s].tokens_per_rank[d];
        }
    }
    // Per sender: channel prefix matrix and send head.
    let senders: Vec<(Vec<i32>, Vec<i32>)> = layouts
        .iter()
        .map(|layout| {
            let tokens = layout.token_in_rank.len() / ranks;
            let mut prefix = vec![0i32; ranks * channels];
            let mut send_head = vec![-1i32; tokens * ranks];
            for d in 0..ranks {
                let mut sent = 0;
                for c in 0..channels {
                    for t in channel_range(tokens, channels, c) {
                        if layout.token_in_rank[t * ranks + d] {
                            send_head[t * ranks + d] = sent;
                            sent += 1;
                        }
                    }
                    prefix[d * channels + c] = sent;
                }
            }
            (prefix, send_head)
        })
        .collect();
    (0..ranks)
        .map(|me| {
            let mut out = Received {
                rank_prefix_matrix: rank_prefix_matrix.clone(),
                channel_prefix_matrix: senders[me].0.clone(),
                recv_channel_prefix_matrix: vec![0; ranks * channels],
                recv_src_idx: Vec::new(),
                recv_src_rank: Vec::new(),
                recv_topk_idx: Vec::new(),
                recv_topk_weights: Vec::new(),
                recv_tokens_per_expert: vec![0; local_experts],
                token_in_rank: layouts[me].token_in_rank.clone(),
                send_head: senders[me].1.clone(),
            };
            let mine = me * local_experts..(me + 1) * local_experts;
            for (s, layout) in layouts.iter().enumerate() {
                let tokens = layout.token_in_rank.len() / ranks;
                for c in 0..channels {
                    out.recv_channel_prefix_matrix[s * channels + c] = out.recv_src_idx.len() as i32;
                    for t in channel_range(tokens, channels, c).filter(|t| layout.token_in_rank[t * ranks + me]) {
                        out.recv_src_idx.push(t as i32);
                        out.recv_src_rank.push(s);
                        for k in 0..topk {
                            let e = routing[s].topk_idx[t * topk + k];
                            let local = usize::try_from(e).ok().filter(|e| mine.contains(e)).map(|e| e - mine.start);
                            if let Some(l) = local {
                                out.recv_tokens_per_expert[l] += 1;
                            }
                            out.recv_topk_idx.push(local.map_or(-1, |l| l as i64));
                            out.recv_topk_weights.push(local.map_or(0.0, |_| routing[s].topk_weights[t * topk + k]));
                        }
                    }
                }
            }
            let align = expert_alignment.max(1) as i32;
            for count in &mut out.recv_tokens_per_expert {
                *count = (*count + align - 1) / align * align;
            }
            out
        })
        .collect()
}
