//! The α-β floor of a low-latency call between nodes: the bytes weft-ep's kernels put through
//! a rank's NIC for a given routing, and the least time an α-β link needs to move them
//! (docs/ep.md, "Low latency between nodes"); and of a normal-mode call between nodes, whose
//! rail hop sends each token once per other node it goes to ([`rail_floor`]; docs/ep.md,
//! "Normal mode between nodes").
//!
//! What crosses, as the kernels send it: in the dispatch, one message per (token, expert)
//! pair whose expert lives on a rank of another node (a token selecting an expert twice sends
//! it once), of `16 + H + 4·⌈H/128⌉` bytes with FP8 (header, payload, scales) or `16 + 2H` with
//! BF16, rounded to 16; and to every rank of another node one row of counts, a `u64` per local
//! expert of that rank. In the combine, each such pair's row comes back, `2H` bytes of BF16
//! (only bare signals otherwise). Signals carry no data.
//!
//! The floor of rank r: its NIC sends `out` bytes one after the other and the last of them
//! arrives α later, and r waits for every peer's messages to it, which leave each peer's NIC
//! one after the other too: `α + max(out, largest inflow from one peer) / β`. The emulated NIC
//! paces what each GPU sends (one link per GPU), so this bounds an emulated run; a run ends
//! above it by the kernels' own work and the copies the emulated puts become.

use serde::Serialize;
use weft_core::LinkModel;

/// Bytes of one dispatch message between nodes, as the kernels pack them
/// ([`weft_ep::ll_message_bytes`]).
pub fn dispatch_message_bytes(hidden: usize, fp8: bool) -> u64 {
    weft_ep::ll_message_bytes(hidden, fp8) as u64
}

/// A low-latency call's routing over the ranks of a group.
#[derive(Clone, Copy, Debug)]
pub struct NetRouting<'a> {
    /// Each rank's `topk_idx`: `tokens × topk` global experts, -1 where a slot is unused.
    pub topk_idx: &'a [Vec<i64>],
    /// Experts per token.
    pub topk: usize,
    /// Experts of the group, `experts / ranks` on each rank in order.
    pub experts: usize,
    /// The (possibly virtual) node of each rank.
    pub nodes: &'a [usize],
    /// Channels per token.
    pub hidden: usize,
    /// FP8 dispatch messages (BF16 otherwise).
    pub fp8: bool,
}

/// One rank's floor between nodes for one dispatch and one combine.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct NetFloor {
    /// Bytes this rank's dispatch puts through its NIC (messages and count rows).
    pub dispatch_bytes: u64,
    /// The dispatch's α-β floor in µs.
    pub dispatch_us: f64,
    /// Bytes this rank's combine puts through its NIC (rows).
    pub combine_bytes: u64,
    /// The combine's α-β floor in µs.
    pub combine_us: f64,
}

/// The floor of `rank` on `link`; `None` where every rank is in `rank`'s node (nothing crosses
/// a network).
///
/// Panics where the routing is not one of a group: a rank count other than `nodes`', experts
/// not split evenly over the ranks, a `topk_idx` not a multiple of `topk` long, or an expert
/// out of range.
pub fn net_floor(routing: &NetRouting<'_>, rank: usize, link: LinkModel) -> Option<NetFloor> {
    let ranks = routing.nodes.len();
    assert_eq!(routing.topk_idx.len(), ranks, "a routing per rank");
    assert!(ranks > 0 && routing.experts.is_multiple_of(ranks), "experts split evenly over the ranks");
    if routing.nodes.iter().all(|&n| n == routing.nodes[rank]) {
        return None;
    }
    let local_experts = routing.experts / ranks;
    let message = dispatch_message_bytes(routing.hidden, routing.fp8);
    let row = 2 * routing.hidden as u64;
    // dispatch[s][d]: bytes rank s's dispatch sends to rank d of another node; the combine
    // sends `row` back from d to s for each of those pairs.
    let mut dispatch = vec![vec![0u64; ranks]; ranks];
    let mut combine = vec![vec![0u64; ranks]; ranks];
    for (s, idx) in routing.topk_idx.iter().enumerate() {
        assert!(idx.len().is_multiple_of(routing.topk.max(1)), "rank {s}: topk_idx is tokens × topk");
        for d in (0..ranks).filter(|&d| routing.nodes[d] != routing.nodes[s]) {
            dispatch[s][d] += 8 * local_experts as u64;
        }
        for token in idx.chunks(routing.topk.max(1)) {
            for (j, &e) in token.iter().enumerate() {
                if e < 0 || token[..j].contains(&e) {
                    continue;
                }
                assert!((e as usize) < routing.experts, "rank {s}: expert {e} of {}", routing.experts);
                let d = e as usize / local_experts;
                if routing.nodes[d] != routing.nodes[s] {
                    dispatch[s][d] += message;
                    combine[d][s] += row;
                }
            }
        }
    }
    let floor = |sent: &[Vec<u64>]| {
        let out: u64 = sent[rank].iter().sum();
        let inflow = (0..ranks).map(|s| sent[s][rank]).max().unwrap_or(0);
        (out, link.message_time(out.max(inflow)).as_secs_f64() * 1e6)
    };
    let (dispatch_bytes, dispatch_us) = floor(&dispatch);
    let (combine_bytes, combine_us) = floor(&combine);
    Some(NetFloor { dispatch_bytes, dispatch_us, combine_bytes, combine_us })
}

/// Bytes one row of a normal-mode call between nodes puts through the NIC, as the rail kernels
/// send it: the dispatch's payload (FP8 with a f32 scale per 128 channels, or BF16), its top-k
/// indices (i64) and weights (f32) when it carries them, and its source index (i32); the
/// combine's BF16 partial and, with weights, its `topk` f32 weights.
pub fn rail_row_bytes(hidden: usize, fp8: bool, topk: usize, combine: bool) -> u64 {
    let bytes = if combine {
        2 * hidden + 4 * topk
    } else {
        let payload = if fp8 { hidden + 4 * hidden.div_ceil(128) } else { 2 * hidden };
        payload + 12 * topk + 4
    };
    bytes as u64
}

/// The floor of a normal-mode dispatch and combine of `rank` on `link`: rank `(n, l)` sends a
/// token once to rank `(d, l)` of every other node `d` holding one of its experts (the rail
/// hop; its own node's share stays on the node), and gets each such token's partial sum back.
/// `dispatch_topk`, `combine_topk`: the top-k slots each call's rows carry (0: none, as a
/// dispatch with a handle or a combine without weights). `None` on one node.
///
/// Panics as [`net_floor`], or where the nodes are not equal groups of consecutive ranks.
pub fn rail_floor(
    routing: &NetRouting<'_>,
    rank: usize,
    link: LinkModel,
    dispatch_topk: usize,
    combine_topk: usize,
) -> Option<NetFloor> {
    let ranks = routing.nodes.len();
    assert_eq!(routing.topk_idx.len(), ranks, "a routing per rank");
    if routing.nodes.iter().all(|&n| n == routing.nodes[rank]) {
        return None;
    }
    let per_node = routing.nodes.iter().filter(|&&n| n == routing.nodes[0]).count();
    let nodes = ranks / per_node;
    assert!(
        (0..ranks).all(|r| routing.nodes[r] == routing.nodes[r - r % per_node]) && ranks.is_multiple_of(per_node),
        "nodes of equal size, each of consecutive ranks"
    );
    let node_experts = routing.experts / nodes;
    // to_node[s][d]: tokens of rank s going to node d.
    let to_node: Vec<Vec<u64>> = routing
        .topk_idx
        .iter()
        .map(|idx| {
            let mut counts = vec![0u64; nodes];
            for token in idx.chunks(routing.topk.max(1)) {
                let mut seen = vec![false; nodes];
                for &e in token.iter().filter(|&&e| e >= 0) {
                    assert!((e as usize) < routing.experts, "expert {e} of {}", routing.experts);
                    seen[e as usize / node_experts] = true;
                }
                for (d, _) in seen.iter().enumerate().filter(|(_, s)| **s) {
                    counts[d] += 1;
                }
            }
            counts
        })
        .collect();
    let (node, local) = (rank / per_node, rank % per_node);
    let rail = |d: usize| d * per_node + local;
    let others: Vec<usize> = (0..nodes).filter(|&d| d != node).collect();
    let floor = |row: u64, out_rows: &dyn Fn(usize) -> u64, in_rows: &dyn Fn(usize) -> u64| {
        let out: u64 = others.iter().map(|&d| out_rows(d) * row).sum();
        let inflow = others.iter().map(|&d| in_rows(d) * row).max().unwrap_or(0);
        (out, link.message_time(out.max(inflow)).as_secs_f64() * 1e6)
    };
    let dispatch_row = rail_row_bytes(routing.hidden, routing.fp8, dispatch_topk, false);
    let combine_row = rail_row_bytes(routing.hidden, false, combine_topk, true);
    // Dispatch: this rank's tokens to node d out, rank (d, l)'s tokens to this node in; the
    // combine sends the partials of what came in back out, and gets its own tokens' back.
    let (dispatch_bytes, dispatch_us) = floor(dispatch_row, &|d| to_node[rank][d], &|d| to_node[rail(d)][node]);
    let (combine_bytes, combine_us) = floor(combine_row, &|d| to_node[rail(d)][node], &|d| to_node[rank][d]);
    Some(NetFloor { dispatch_bytes, dispatch_us, combine_bytes, combine_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulated NIC: α = 2 µs, 50 GB/s.
    fn nic() -> LinkModel {
        LinkModel::new(2.0, Some(50.0))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn a_message_is_deepeps_with_fp8_and_a_bf16_row_without() {
        assert_eq!(dispatch_message_bytes(7168, true), 7408);
        assert_eq!(dispatch_message_bytes(7168, false), 16 + 14336);
        // 100 channels: 16 + 100 + 4 = 120, rounded to 128.
        assert_eq!(dispatch_message_bytes(100, true), 128);
    }

    #[test]
    fn one_node_has_no_floor() {
        let idx = vec![vec![0, 1, 2, 3], vec![3, 2, 1, 0]];
        let routing = NetRouting { topk_idx: &idx, topk: 2, experts: 4, nodes: &[0, 0], hidden: 128, fp8: true };
        assert_eq!(net_floor(&routing, 0, nic()), None);
        assert_eq!(net_floor(&routing, 1, nic()), None);
    }

    /// Two ranks on two nodes, 4 experts (2 a rank), 3 tokens of top-2 each, every pair on the
    /// other rank: 6 messages and a row of 2 counts out, 6 rows back.
    #[test]
    fn every_pair_crossing_sends_every_message_and_row() {
        let (hidden, msg) = (7168, 7408u64);
        let idx = vec![vec![2, 3, 3, 2, 2, 3], vec![0, 1, 1, 0, 0, 1]];
        let routing = NetRouting { topk_idx: &idx, topk: 2, experts: 4, nodes: &[0, 1], hidden, fp8: true };
        for rank in 0..2 {
            let f = net_floor(&routing, rank, nic()).unwrap();
            assert_eq!(f.dispatch_bytes, 6 * msg + 2 * 8);
            assert_eq!(f.combine_bytes, 6 * 14336);
            assert!(close(f.dispatch_us, 2.0 + (6 * msg + 16) as f64 / 50e3), "{f:?}");
            assert!(close(f.combine_us, 2.0 + (6 * 14336) as f64 / 50e3), "{f:?}");
        }
    }

    /// Every token selects experts of its own node only: the dispatch sends its count rows
    /// alone, the combine nothing (bare signals), so the combine's floor is α.
    #[test]
    fn no_pair_crossing_leaves_the_count_rows_and_alpha() {
        let idx = vec![vec![0, 1, 1, -1], vec![2, 3, 3, 2]];
        let routing = NetRouting { topk_idx: &idx, topk: 2, experts: 4, nodes: &[0, 1], hidden: 256, fp8: false };
        let f = net_floor(&routing, 1, nic()).unwrap();
        assert_eq!((f.dispatch_bytes, f.combine_bytes), (16, 0));
        assert!(close(f.combine_us, 2.0) && close(f.dispatch_us, 2.0 + 16.0 / 50e3), "{f:?}");
    }

    /// A token selecting an expert twice sends it once; -1 slots send nothing; an uncapped
    /// link's floor is α.
    #[test]
    fn repeated_and_unused_slots_send_nothing_more() {
        let idx = vec![vec![1, 1, -1, 1], vec![0, -1, -1, -1]];
        let routing = NetRouting { topk_idx: &idx, topk: 2, experts: 2, nodes: &[0, 1], hidden: 128, fp8: false };
        let msg = dispatch_message_bytes(128, false);
        let f = net_floor(&routing, 0, nic()).unwrap();
        assert_eq!((f.dispatch_bytes, f.combine_bytes), (2 * msg + 8, 256));
        let g = net_floor(&routing, 1, nic()).unwrap();
        assert_eq!((g.dispatch_bytes, g.combine_bytes), (msg + 8, 2 * 256));
        // Rank 1 sends one message but receives two from rank 0: the larger inflow bounds it.
        assert!(close(g.dispatch_us, f.dispatch_us), "{g:?} {f:?}");
        let uncapped = net_floor(&routing, 0, LinkModel::new(2.0, None)).unwrap();
        assert!(close(uncapped.dispatch_us, 2.0) && close(uncapped.combine_us, 2.0));
    }

    /// docs/ep.md's floor table, 2 nodes: DeepEP's shape (128 tokens per rank, H = 7168,
    /// top-8 of 256 experts) on 16 ranks, each token selecting 4 experts of its own node and 4
    /// of the other: 512 messages of 7,408 B out, 77.9 µs (the 8 count rows of 16 experts add
    /// 1 KB, 0.02 µs), and 512 rows of 14,336 B back, 148.8 µs.
    #[test]
    fn deepeps_shape_on_two_nodes_gives_the_documented_floor() {
        let (ranks, tokens, topk, experts, hidden) = (16, 128, 8, 256, 7168);
        let nodes: Vec<usize> = (0..ranks).map(|r| r / 8).collect();
        let idx: Vec<Vec<i64>> = (0..ranks)
            .map(|r| {
                let (own, other) = (nodes[r] * 128, (1 - nodes[r]) * 128);
                (0..tokens)
                    .flat_map(|t| (0..topk).map(move |j| (if j < 4 { own } else { other } + (t * 8 + j) % 128) as i64))
                    .collect()
            })
            .collect();
        let routing = NetRouting { topk_idx: &idx, topk, experts, nodes: &nodes, hidden, fp8: true };
        for rank in [0, 7, 8, 15] {
            let f = net_floor(&routing, rank, nic()).unwrap();
            assert_eq!(f.dispatch_bytes, 512 * 7408 + 8 * 16 * 8, "rank {rank}");
            assert_eq!(f.combine_bytes, 512 * 14336, "rank {rank}");
            assert_eq!(format!("{:.1} {:.1}", f.dispatch_us, f.combine_us), "77.9 148.8", "rank {rank}");
        }
    }

    /// Two ranks on two nodes, 4 experts (2 a node), 3 tokens: token 0 selects only the other
    /// node's experts (twice: sent once), token 1 only its own node's, token 2 both. Two rows
    /// cross each way; FP8 rows of 256 channels carry 256 + 8 + 4 bytes without top-k.
    #[test]
    fn the_rail_hop_sends_a_token_once_per_other_node() {
        let idx = vec![vec![2, 3, 0, 1, 0, 2], vec![0, 1, 2, 3, 3, -1]];
        let routing = NetRouting { topk_idx: &idx, topk: 2, experts: 4, nodes: &[0, 1], hidden: 256, fp8: true };
        let f = rail_floor(&routing, 0, nic(), 0, 2).unwrap();
        assert_eq!(rail_row_bytes(256, true, 0, false), 268);
        assert_eq!(f.dispatch_bytes, 2 * 268);
        // Rank 1 sends rank 0 one token (token 0); rank 0 returns its partial.
        assert_eq!(f.combine_bytes, 512 + 8);
        let g = rail_floor(&routing, 1, nic(), 8, 0).unwrap();
        assert_eq!(g.dispatch_bytes, 256 + 8 + 12 * 8 + 4);
        assert_eq!(g.combine_bytes, 2 * 512);
        assert!(close(f.dispatch_us, 2.0 + (2 * 268) as f64 / 50e3), "{f:?}");
        assert_eq!(rail_floor(&NetRouting { nodes: &[0, 0], ..routing }, 0, nic(), 0, 0), None);
    }

    /// DeepEP's internode shape on two nodes of 4 (4096 tokens, H = 7168, top-8 of 256
    /// experts), each token selecting experts of both nodes: every token crosses once, 4096
    /// FP8 rows of 7,396 B out (607.9 µs at 50 GB/s) and 4096 BF16 partials of 14,336 B back
    /// (1176.4 µs).
    #[test]
    fn deepeps_internode_shape_on_two_nodes() {
        let (ranks, tokens, topk, experts, hidden) = (8, 4096, 8, 256, 7168);
        let nodes: Vec<usize> = (0..ranks).map(|r| r / 4).collect();
        let idx: Vec<Vec<i64>> = (0..ranks)
            .map(|_| (0..tokens).flat_map(|t| (0..topk).map(move |j| ((j * 32 + t % 32) % 256) as i64)).collect())
            .collect();
        let routing = NetRouting { topk_idx: &idx, topk, experts, nodes: &nodes, hidden, fp8: true };
        let f = rail_floor(&routing, 5, nic(), 0, 0).unwrap();
        assert_eq!(f.dispatch_bytes, 4096 * 7396);
        assert_eq!(f.combine_bytes, 4096 * 14336);
        assert_eq!(format!("{:.1} {:.1}", f.dispatch_us, f.combine_us), "607.9 1176.4");
    }
}
