//! The normal-mode dispatch and combine of a group spanning nodes, in two hops as DeepEP's
//! internode kernels (docs/ep.md, "Normal mode between nodes"). Consecutive groups of
//! `ranks_per_node` ranks form a node; rank `n · k + l` is local rank `l` of node `n`, and the
//! ranks of one local index form a *rail*.
//!
//! - **Rail hop.** Rank `(n, l)` sends each token once to rank `(n', l)` of every node `n'` that
//!   holds one of its experts (its own node included, which needs no network), with its top-k
//!   indices rewritten to the experts of `n'` (-1 for the others). The forwarder `(n', l)`
//!   receives, by source node, then token: the rows of source node `s` start at
//!   `rail_prefix_matrix[s - 1][n']`, the counts the notify exchanged along the rail.
//! - **NVL hop.** Each node runs the one-node dispatch ([`dispatch`]) over its own ranks, with
//!   the forwarders' received rows as their tokens and the node's experts as the experts. So a
//!   rank receives by source local index (its forwarder), then source node, then source token:
//!   for `k = 1` or one node this is the one-node order (by source rank, then token).
//! - **Combine** reverses: the one-node combine ([`combine`]) over each node's ranks sums at the
//!   forwarder, in f32 in increasing local rank order, each forwarded row's rows of that node,
//!   rounded once to BF16 (a node's partial, as DeepEP sends BF16 between nodes); the forwarder
//!   returns its partials along the rail, and the source sums, in f32, its biases and then the
//!   nodes' partials in increasing node order, rounded once to BF16. The top-k weights sum the
//!   same way, their partials kept in f32. Results are the same bits on every run.
//!
//! Local expert indices coincide with the one-node dispatch's: the NVL hop gives rank `(n', j)`
//! the experts `j · local .. (j + 1) · local` of node `n'`'s experts, which are its global
//! experts.

use half::bf16;

use super::combine::{CombineInput, Combined, combine};
use super::dispatch::{DispatchShape, RankRouting, Received, dispatch};
use super::layout::dispatch_layout;

/// What the rail hop left on one rank, as a source and as a forwarder.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    /// `[nodes][nodes]`, the same on every rank of a rail: entry `[s][d]` counts the tokens the
    /// rail's ranks of nodes `0..=s` send to its rank of node `d`.
    pub rail_prefix_matrix: Vec<i32>,
    /// `[tokens][nodes]`, this rank as source: a token's position among the tokens it sends to
    /// node `n` (its row at the forwarder is `rail_prefix_matrix[me - 1][n]` plus it), or -1.
    pub rail_send_head: Vec<i32>,
    /// `[rows]`, this rank as forwarder: each forwarded row's source node.
    pub src_node: Vec<usize>,
    /// `[rows]`: each forwarded row's token index on its source.
    pub src_idx: Vec<i32>,
    /// `[rows][topk]`: the row's experts as indices among this node's experts, -1 for others.
    pub topk_idx: Vec<i64>,
    /// `[rows][topk]`: the row's weights as the source gave them.
    pub topk_weights: Vec<f32>,
}

/// What one rank holds after a dispatch between nodes: the rail hop's tables, the NVL hop's
/// one-node handle and its received rows' origins.
#[derive(Debug, Clone, PartialEq)]
pub struct InternodeReceived {
    /// The rail hop.
    pub rail: Forwarded,
    /// The NVL hop: the one-node dispatch over this node's ranks, whose sources are the
    /// forwarders (`recv_src_rank` a local index, `recv_src_idx` a forwarded row). Its
    /// `recv_topk_idx`, `recv_topk_weights` and `recv_tokens_per_expert` are the call's.
    pub nvl: Received,
    /// `[received]`: each row's source rank.
    pub recv_src_rank: Vec<usize>,
    /// `[received]`: each row's token index on its source rank.
    pub recv_src_idx: Vec<i32>,
}

impl InternodeReceived {
    /// Rows this rank received.
    pub fn len(&self) -> usize {
        self.recv_src_idx.len()
    }

    /// Whether this rank received no row.
    pub fn is_empty(&self) -> bool {
        self.recv_src_idx.is_empty()
    }
}

/// The nodes of `ranks` ranks with `ranks_per_node` each; panics if that is no split.
fn nodes_of(ranks: usize, ranks_per_node: usize) -> usize {
    assert!(ranks_per_node > 0 && ranks.is_multiple_of(ranks_per_node), "{ranks_per_node} ranks per node of {ranks}");
    ranks / ranks_per_node
}

/// The dispatch of every rank's `routing` between nodes of `ranks_per_node` ranks (a divisor
/// of `shape.ranks`; `shape.experts` a multiple of `shape.ranks`): what each rank holds.
/// `shape.channels` and `shape.expert_alignment` are the NVL hop's.
///
/// # Panics
/// If `ranks_per_node` does not divide the ranks.
pub fn dispatch_internode(
    shape: DispatchShape,
    ranks_per_node: usize,
    routing: &[RankRouting<'_>],
) -> Vec<InternodeReceived> {
    let DispatchShape { ranks, experts, topk, .. } = shape;
    let k = ranks_per_node;
    let nodes = nodes_of(ranks, k);
    let node_experts = experts / nodes;
    // Which nodes each token goes to: the layout over nodes instead of ranks.
    let to_node: Vec<_> = routing.iter().map(|r| dispatch_layout(r.topk_idx, topk, experts, nodes)).collect();
    let rails: Vec<Forwarded> = (0..ranks)
        .map(|me| {
            let (my_node, l) = (me / k, me % k);
            let mut rail_prefix_matrix = vec![0i32; nodes * nodes];
            for s in 0..nodes {
                for d in 0..nodes {
                    let before = if s == 0 { 0 } else { rail_prefix_matrix[(s - 1) * nodes + d] };
                    rail_prefix_matrix[s * nodes + d] = before + to_node[s * k + l].tokens_per_rank[d];
                }
            }
            let tokens = to_node[me].token_in_rank.len() / nodes;
            let mut rail_send_head = vec![-1i32; tokens * nodes];
            for d in 0..nodes {
                for (sent, t) in (0..tokens).filter(|t| to_node[me].token_in_rank[t * nodes + d]).enumerate() {
                    rail_send_head[t * nodes + d] = sent as i32;
                }
            }
            let mut forwarded = Forwarded {
                rail_prefix_matrix,
                rail_send_head,
                src_node: Vec::new(),
                src_idx: Vec::new(),
                topk_idx: Vec::new(),
                topk_weights: Vec::new(),
            };
            let mine = my_node * node_experts..(my_node + 1) * node_experts;
            for s in 0..nodes {
                let src = s * k + l;
                let tokens = to_node[src].token_in_rank.len() / nodes;
                for t in (0..tokens).filter(|t| to_node[src].token_in_rank[t * nodes + my_node]) {
                    forwarded.src_node.push(s);
                    forwarded.src_idx.push(t as i32);
                    for j in 0..topk {
                        let e = routing[src].topk_idx[t * topk + j];
                        let local =
                            usize::try_from(e).ok().filter(|e| mine.contains(e)).map(|e| (e - mine.start) as i64);
                        forwarded.topk_idx.push(local.unwrap_or(-1));
                        forwarded.topk_weights.push(routing[src].topk_weights[t * topk + j]);
                    }
                }
            }
            forwarded
        })
        .collect();
    let nvl_shape = DispatchShape { ranks: k, experts: node_experts, ..shape };
    let mut out = Vec::with_capacity(ranks);
    for node in 0..nodes {
        let forwarders = &rails[node * k..(node + 1) * k];
        let node_routing: Vec<RankRouting<'_>> =
            forwarders.iter().map(|f| RankRouting { topk_idx: &f.topk_idx, topk_weights: &f.topk_weights }).collect();
        for (j, nvl) in dispatch(nvl_shape, &node_routing).into_iter().enumerate() {
            let origin = |i: usize| {
                let (f, row) = (nvl.recv_src_rank[i], nvl.recv_src_idx[i] as usize);
                (forwarders[f].src_node[row] * k + f, forwarders[f].src_idx[row])
            };
            let (recv_src_rank, recv_src_idx) = (0..nvl.len()).map(origin).unzip();
            out.push(InternodeReceived { rail: rails[node * k + j].clone(), nvl, recv_src_rank, recv_src_idx });
        }
    }
    out
}

/// The combine between nodes of every rank's `inputs` (rows in the order
/// [`dispatch_internode`] received them) with the `received` of that dispatch: see the module
/// documentation for the order of the sums. Token t of rank s: in f32, `acc = 0`, then
/// `acc += bias0[t][h]`, `acc += bias1[t][h]` (each when given), then `acc += partial_n[t][h]`
/// for every node n that received t, in increasing n, rounded to BF16; `partial_n` is node n's
/// one-node combine (no bias) of the rows its ranks received of t. Weights: `Σ_n wpartial_n`
/// in f32 from 0, each partial the f32 one-node sum.
///
/// # Panics
/// If `ranks_per_node` does not divide the ranks.
pub fn combine_internode(
    received: &[InternodeReceived],
    ranks_per_node: usize,
    inputs: &[CombineInput<'_>],
    hidden: usize,
    topk: usize,
) -> Vec<Combined> {
    let ranks = received.len();
    let k = ranks_per_node;
    let nodes = nodes_of(ranks, k);
    let with_weights = inputs.iter().all(|i| i.topk_weights.is_some());
    // The NVL hop's combine: each forwarder's partials, by forwarded row.
    let partials: Vec<Combined> = (0..nodes)
        .flat_map(|node| {
            let ranks = node * k..(node + 1) * k;
            let nvl: Vec<Received> = received[ranks.clone()].iter().map(|r| r.nvl.clone()).collect();
            let node_inputs: Vec<CombineInput<'_>> = inputs[ranks]
                .iter()
                .map(|i| CombineInput { x: i.x, topk_weights: i.topk_weights, bias: [None, None] })
                .collect();
            combine(&nvl, &node_inputs, hidden, topk)
        })
        .collect();
    // The rail hop back: each source sums its nodes' partials.
    (0..ranks)
        .map(|me| {
            let (my_node, l) = (me / k, me % k);
            let rail = &received[me].rail;
            let tokens = rail.rail_send_head.len() / nodes;
            let mut x = vec![bf16::ZERO; tokens * hidden];
            let mut weights = with_weights.then(|| vec![0f32; tokens * topk]);
            for t in 0..tokens {
                let rows: Vec<(usize, usize)> = (0..nodes)
                    .filter_map(|d| {
                        let head = usize::try_from(rail.rail_send_head[t * nodes + d]).ok()?;
                        let f = d * k + l;
                        let prefix = &received[f].rail.rail_prefix_matrix;
                        let before = if my_node == 0 { 0 } else { prefix[(my_node - 1) * nodes + d] as usize };
                        Some((f, before + head))
                    })
                    .collect();
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for bias in inputs[me].bias.iter().flatten() {
                        acc += bias[t * hidden + h].to_f32();
                    }
                    for &(f, row) in &rows {
                        acc += partials[f].x[row * hidden + h].to_f32();
                    }
                    x[t * hidden + h] = bf16::from_f32(acc);
                }
                if let Some(w) = weights.as_mut() {
                    for j in 0..topk {
                        let mut acc = 0f32;
                        for &(f, row) in &rows {
                            acc += partials[f].topk_weights.as_ref().map_or(0.0, |p| p[row * topk + j]);
                        }
                        w[t * topk + j] = acc;
                    }
                }
            }
            Combined { x, topk_weights: weights }
        })
        .collect()
}
