//! Property tests of the CPU model: random top-k routing with dropped slots, ranks and experts
//! that receive nothing, and single-token ranks.

#![allow(clippy::needless_range_loop)] // the checks index several per-rank tables by rank

use half::bf16;
use proptest::prelude::*;

use super::*;

/// One randomly routed world: per rank, `topk_idx` and weights.
#[derive(Debug, Clone)]
struct World {
    shape: DispatchShape,
    topk_idx: Vec<Vec<i64>>,
    weights: Vec<Vec<f32>>,
}

impl World {
    fn routing(&self) -> Vec<RankRouting<'_>> {
        self.topk_idx.iter().zip(&self.weights).map(|(i, w)| RankRouting { topk_idx: i, topk_weights: w }).collect()
    }

    fn tokens(&self, rank: usize) -> usize {
        self.topk_idx[rank].len() / self.shape.topk
    }
}

/// Ranks 1..=8, 1..=4 experts per rank, top-k up to 8 distinct experts per token drawn from a
/// random subset of experts (so some ranks and experts get nothing), about one slot in five
/// dropped (-1), 0..=24 tokens per rank (1 more often than chance).
fn world() -> impl Strategy<Value = World> {
    (1usize..=8, 1usize..=4, 1usize..=8, 1usize..=6, 1usize..=4, any::<u64>()).prop_map(
        |(ranks, local, topk, channels, alignment, seed)| {
            let experts = ranks * local;
            let topk = topk.min(experts);
            let mut rng = SplitMix::new(seed);
            let hot: Vec<usize> = (0..experts).filter(|_| rng.below(3) != 0).collect();
            let (mut topk_idx, mut weights) = (Vec::new(), Vec::new());
            for _ in 0..ranks {
                let tokens = if rng.below(4) == 0 { 1 } else { rng.below(25) };
                let (mut idx, mut w) = (Vec::new(), Vec::new());
                for _ in 0..tokens {
                    let mut pool = hot.clone();
                    for _ in 0..topk {
                        if pool.is_empty() || rng.below(5) == 0 {
                            idx.push(-1);
                        } else {
                            idx.push(pool.swap_remove(rng.below(pool.len())) as i64);
                        }
                        w.push((rng.below(1000) as f32) / 250.0 - 2.0);
                    }
                }
                topk_idx.push(idx);
                weights.push(w);
            }
            let shape = DispatchShape { ranks, experts, topk, channels, expert_alignment: alignment };
            World { shape, topk_idx, weights }
        },
    )
}

proptest! {
    #[test]
    fn layout_counts_tokens_once_per_rank_and_once_per_expert_entry(w in world()) {
        let DispatchShape { ranks, experts, topk, .. } = w.shape;
        for (rank, idx) in w.topk_idx.iter().enumerate() {
            let layout = dispatch_layout(idx, topk, experts, ranks);
            let tokens = w.tokens(rank);
            for r in 0..ranks {
                let owned = |e: &i64| *e >= 0 && *e as usize / (experts / ranks) == r;
                let expected: Vec<bool> = (0..tokens).map(|t| idx[t * topk..(t + 1) * topk].iter().any(owned)).collect();
                let got: Vec<bool> = (0..tokens).map(|t| layout.token_in_rank[t * ranks + r]).collect();
                prop_assert_eq!(&got, &expected, "rank {} column", r);
                prop_assert_eq!(layout.tokens_per_rank[r] as usize, expected.iter().filter(|b| **b).count());
            }
            for e in 0..experts {
                prop_assert_eq!(layout.tokens_per_expert[e] as usize, idx.iter().filter(|&&i| i == e as i64).count());
            }
        }
    }

    #[test]
    fn dispatch_delivers_every_routed_token_once_in_source_rank_then_token_order(w in world()) {
        let DispatchShape { ranks, experts, topk, channels, expert_alignment } = w.shape;
        let local = experts / ranks;
        let received = dispatch(w.shape, &w.routing());
        for (d, got) in received.iter().enumerate() {
            // Every (source, token) routed to d, in source-rank-major, token order.
            let mut expected = Vec::new();
            for s in 0..ranks {
                for t in 0..w.tokens(s) {
                    let idx = &w.topk_idx[s][t * topk..(t + 1) * topk];
                    if idx.iter().any(|&e| e >= 0 && e as usize / local == d) {
                        expected.push((s, t));
                    }
                }
            }
            let rows: Vec<(usize, usize)> = got.recv_src_rank.iter().zip(&got.recv_src_idx).map(|(&s, &t)| (s, t as usize)).collect();
            prop_assert_eq!(&rows, &expected, "rank {} rows", d);
            // The prefix matrix places each source's rows.
            for s in 0..ranks {
                let start = if s == 0 { 0 } else { got.rank_prefix_matrix[(s - 1) * ranks + d] as usize };
                let end = got.rank_prefix_matrix[s * ranks + d] as usize;
                prop_assert!(rows[start..end].iter().all(|&(src, _)| src == s));
                // Each channel's rows start where the receiver's channel matrix says.
                for c in 0..channels {
                    let first = got.recv_channel_prefix_matrix[s * channels + c] as usize;
                    let range = channel_range(w.tokens(s), channels, c);
                    let in_channel = rows[start..end].iter().filter(|(_, t)| range.contains(t)).count();
                    prop_assert!(rows[first..first + in_channel].iter().all(|(_, t)| range.contains(t)));
                    prop_assert_eq!(received[s].channel_prefix_matrix[d * channels + c] as usize,
                        rows[start..end].iter().filter(|(_, t)| *t < range.end).count());
                }
            }
            // Local expert indices and weights, and the per-expert counts.
            let mut counts = vec![0usize; local];
            for (row, &(s, t)) in rows.iter().enumerate() {
                for k in 0..topk {
                    let e = w.topk_idx[s][t * topk + k];
                    let mine = e >= 0 && e as usize / local == d;
                    let want = if mine { e - (d * local) as i64 } else { -1 };
                    prop_assert_eq!(got.recv_topk_idx[row * topk + k], want);
                    let weight = if mine { w.weights[s][t * topk + k] } else { 0.0 };
                    prop_assert_eq!(got.recv_topk_weights[row * topk + k], weight);
                    if mine { counts[want as usize] += 1; }
                }
            }
            for (l, &n) in counts.iter().enumerate() {
                prop_assert_eq!(got.recv_tokens_per_expert[l] as usize, n.div_ceil(expert_alignment) * expert_alignment);
            }
        }
        // The send head of every sender points at the token's row on each receiver.
        for (s, sent) in received.iter().enumerate() {
            for t in 0..w.tokens(s) {
                for r in 0..ranks {
                    let head = sent.send_head[t * ranks + r];
                    prop_assert_eq!(head >= 0, sent.token_in_rank[t * ranks + r]);
                    if head >= 0 {
                        let before = if s == 0 { 0 } else { received[r].rank_prefix_matrix[(s - 1) * ranks + r] };
                        let row = (before + head) as usize;
                        prop_assert_eq!((received[r].recv_src_rank[row], received[r].recv_src_idx[row] as usize), (s, t));
                    }
                }
            }
        }
    }

    #[test]
    fn combine_sums_each_tokens_rows_in_rank_order(w in world(), hidden in 1usize..=4, biases in 0usize..=2) {
        let DispatchShape { ranks, topk, .. } = w.shape;
        let received = dispatch(w.shape, &w.routing());
        // Row values that make the order of summation visible: large and small magnitudes.
        let value = |r: usize, row: usize, h: usize| bf16::from_f32(((r * 7 + row * 3 + h) % 11) as f32 * 0.37 - 1.5 + if r.is_multiple_of(2) { 256.0 } else { 0.0 });
        let xs: Vec<Vec<bf16>> = (0..ranks).map(|r| (0..received[r].len() * hidden).map(|i| value(r, i / hidden, i % hidden)).collect()).collect();
        let bias: Vec<Vec<bf16>> = (0..ranks).map(|s| (0..w.tokens(s) * hidden).map(|i| bf16::from_f32(i as f32 * 0.5)).collect()).collect();
        let inputs: Vec<CombineInput<'_>> = (0..ranks).map(|r| CombineInput {
            x: &xs[r],
            topk_weights: Some(&received[r].recv_topk_weights),
            bias: [(biases >= 1).then_some(bias[r].as_slice()), (biases >= 2).then_some(bias[r].as_slice())],
        }).collect();
        let combined = combine(&received, &inputs, hidden, topk);
        for s in 0..ranks {
            for t in 0..w.tokens(s) {
                // Found by search over the receivers rather than through the send head.
                let rows: Vec<(usize, usize)> = (0..ranks).filter_map(|r| {
                    let row = received[r].recv_src_rank.iter().zip(&received[r].recv_src_idx).position(|(&rs, &rt)| rs == s && rt as usize == t)?;
                    Some((r, row))
                }).collect();
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for _ in 0..biases { acc += bias[s][t * hidden + h].to_f32(); }
                    for &(r, row) in &rows { acc += xs[r][row * hidden + h].to_f32(); }
                    prop_assert_eq!(combined[s].x[t * hidden + h].to_bits(), bf16::from_f32(acc).to_bits(), "rank {} token {} channel {}", s, t, h);
                }
                let weights = combined[s].topk_weights.as_ref().unwrap();
                for k in 0..topk {
                    let e = w.topk_idx[s][t * topk + k];
                    // Exactly one receiver holds a given expert: the sum is that weight (or 0).
                    let want = if e >= 0 { w.weights[s][t * topk + k] } else { 0.0 };
                    prop_assert_eq!(weights[t * topk + k], want);
                }
            }
        }
    }

    #[test]
    fn e4m3_rounds_to_the_nearest_value_ties_to_even(x in -500f32..500f32) {
        let b = e4m3_from_f32(x);
        let got = e4m3_to_f32(b);
        // No finite E4M3 value lies strictly closer to x.
        for other in (0u8..=255).filter(|o| !e4m3_to_f32(*o).is_nan()) {
            let (d_got, d_other) = ((got - x).abs(), (e4m3_to_f32(other) - x).abs());
            prop_assert!(d_got <= d_other || x.abs() > 448.0, "{} -> {} but {} is closer", x, got, e4m3_to_f32(other));
            if d_got == d_other && other != b && got != e4m3_to_f32(other) {
                prop_assert_eq!(b & 1, 0, "tie of {} not to even", x);
            }
        }
    }

    #[test]
    fn fp8_tokens_keep_each_block_within_half_a_quantum(blocks in 1usize..=3, seed in any::<u64>(), round_scale in any::<bool>()) {
        let mut rng = SplitMix::new(seed);
        let x: Vec<f32> = (0..blocks * 128).map(|i| if i % 128 == 5 && rng.below(2) == 0 { 0.0 } else { (rng.below(20001) as f32 - 10000.0) / 997.0 }).collect();
        let token = quantize_token(&x, round_scale);
        prop_assert_eq!(token.scales.len(), blocks);
        let back = dequantize(&token);
        for (b, block) in x.chunks(128).enumerate() {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            prop_assert!(token.scales[b] >= amax / 448.0);
            for (i, &v) in block.iter().enumerate() {
                // E4M3 keeps 4 significant bits: half a quantum is 1/16 of the magnitude, plus
                // the subnormal quantum 2^-9 of the scaled value.
                let tolerance = v.abs() / 16.0 + token.scales[b] * f32::powi(2.0, -10) + 1e-6;
                prop_assert!((back[b * 128 + i] - v).abs() <= tolerance, "block {} channel {}: {} vs {}", b, i, back[b * 128 + i], v);
            }
        }
    }
}

#[test]
fn every_e4m3_byte_round_trips_and_saturates_at_448() {
    for b in 0u8..=255 {
        let v = e4m3_to_f32(b);
        if v.is_nan() {
            assert_eq!(b & 0x7f, 0x7f);
            continue;
        }
        assert_eq!(e4m3_from_f32(v), b, "byte {b:#x} = {v}");
    }
    assert_eq!(e4m3_to_f32(0x7e), 448.0);
    assert_eq!(e4m3_from_f32(1e9), 0x7e);
    assert_eq!(e4m3_from_f32(-465.0), 0xfe);
    assert_eq!(e4m3_to_f32(0x01), f32::powi(2.0, -9));
}

#[test]
fn a_blocks_largest_value_maps_to_448() {
    let mut x = vec![0.25f32; 128];
    x[17] = -3.0;
    let token = quantize_token(&x, false);
    assert_eq!(e4m3_to_f32(token.values[17]), -448.0);
    assert_eq!(token.scales[0], 3.0 / 448.0);
    let zeros = quantize_token(&[0.0; 128], false);
    assert!(zeros.values.iter().all(|&b| b == 0) && zeros.scales[0] == 1e-4 / 448.0);
}

#[test]
fn channels_split_tokens_like_deepep() {
    assert_eq!(channel_range(10, 4, 0), 0..3);
    assert_eq!(channel_range(10, 4, 3), 9..10);
    assert_eq!(channel_range(1, 12, 0), 0..1);
    assert_eq!(channel_range(1, 12, 5), 1..1);
    assert_eq!(channel_range(0, 3, 2), 0..0);
}

proptest! {
    #[test]
    fn ll_dispatch_packs_each_experts_rows_by_source_rank_then_token(w in world(), hidden in 1usize..=3) {
        let DispatchShape { ranks, experts, topk, .. } = w.shape;
        let max_tokens = (0..ranks).map(|r| w.tokens(r)).max().unwrap_or(0).max(1);
        let shape = LlShape { ranks, experts, topk, max_tokens };
        let idx: Vec<&[i64]> = w.topk_idx.iter().map(|v| v.as_slice()).collect();
        let received = ll_dispatch(shape, &idx);
        let (local, rows) = (experts / ranks, ranks * max_tokens);
        for (me, got) in received.iter().enumerate() {
            for le in 0..local {
                let e = (me * local + le) as i64;
                let mut want: Vec<(usize, i32)> = Vec::new();
                for s in 0..ranks {
                    for t in (0..w.tokens(s)).filter(|&t| idx[s][t * topk..(t + 1) * topk].contains(&e)) {
                        want.push((s, t as i32));
                    }
                }
                let n = got.recv_count[le] as usize;
                let have: Vec<(usize, i32)> = (0..n).map(|i| (got.src_rank[le * rows + i], got.src_info[le * rows + i])).collect();
                prop_assert_eq!(&have, &want);
                for s in 0..ranks {
                    let range = got.layout_range[le * ranks + s];
                    let (begin, count) = ((range >> 32) as usize, (range & 0xffff_ffff) as usize);
                    prop_assert!(have[begin..begin + count].iter().all(|&(src, _)| src == s));
                    prop_assert_eq!(count, want.iter().filter(|&&(src, _)| src == s).count());
                }
            }
        }
        // Combine: each rank returns, for its row of (s, t) under local expert le, a value of
        // (s, t, e) alone, so the sum can be predicted from the routing.
        let value = |s: usize, t: usize, e: usize, h: usize| bf16::from_f32(((s * 5 + t * 3 + e * 7 + h) % 13) as f32 * 0.25 - 1.0);
        let xs: Vec<Vec<bf16>> = received.iter().enumerate().map(|(me, got)| {
            let mut x = vec![bf16::ZERO; local * rows * hidden];
            for le in 0..local {
                for i in 0..got.recv_count[le] as usize {
                    for h in 0..hidden {
                        x[(le * rows + i) * hidden + h] = value(got.src_rank[le * rows + i], got.src_info[le * rows + i] as usize, me * local + le, h);
                    }
                }
            }
            x
        }).collect();
        let x: Vec<&[bf16]> = xs.iter().map(|v| v.as_slice()).collect();
        let weights: Vec<&[f32]> = w.weights.iter().map(|v| v.as_slice()).collect();
        let combined = ll_combine(shape, &received, &x, &idx, &weights, hidden);
        for s in 0..ranks {
            for t in 0..w.tokens(s) {
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for k in 0..topk {
                        if let Ok(e) = usize::try_from(idx[s][t * topk + k]) {
                            acc = value(s, t, e, h).to_f32().mul_add(weights[s][t * topk + k], acc);
                        }
                    }
                    prop_assert_eq!(combined[s][t * hidden + h].to_bits(), bf16::from_f32(acc).to_bits());
                }
            }
        }
    }
}

#[test]
fn round_scale_takes_the_power_of_two_at_or_above() {
    let mut x = vec![0.0f32; 128];
    x[0] = 448.0 * 0.75;
    let token = quantize_token(&x, true);
    assert_eq!(token.scales[0], 1.0);
    x[0] = 448.0 * 2.0;
    assert_eq!(quantize_token(&x, true).scales[0], 2.0);
    x[0] = 448.0 * 2.000_001;
    assert_eq!(quantize_token(&x, true).scales[0], 4.0);
}

/// The world's routing with some slots naming the expert of the slot before (a token reaches
/// such an expert once, and each of those slots adds its row with its own weight).
fn with_repeated_slots(w: &World, seed: u64) -> Vec<Vec<i64>> {
    let mut rng = SplitMix::new(seed);
    let topk = w.shape.topk;
    w.topk_idx
        .iter()
        .map(|idx| {
            let mut idx = idx.clone();
            for i in (0..idx.len()).filter(|i| i % topk != 0) {
                if rng.below(6) == 0 {
                    idx[i] = idx[i - 1];
                }
            }
            idx
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn ll_dispatch_and_combine_between_nodes_match_the_one_node_model(
        w in world(),
        hidden in prop::sample::select(vec![128usize, 384]),
        fp8 in any::<bool>(),
        ranks_per_node in 1usize..=8,
        seed in any::<u64>(),
    ) {
        let DispatchShape { ranks, experts, topk, .. } = w.shape;
        let max_tokens = (0..ranks).map(|r| w.tokens(r)).max().unwrap_or(0).max(1);
        let shape = LlShape { ranks, experts, topk, max_tokens };
        let routing = with_repeated_slots(&w, seed);
        let idx: Vec<&[i64]> = routing.iter().map(|v| v.as_slice()).collect();
        let received = ll_dispatch(shape, &idx);
        let weights: Vec<&[f32]> = w.weights.iter().map(|v| v.as_slice()).collect();
        let (local, rows) = (experts / ranks, ranks * max_tokens);
        let xs: Vec<Vec<bf16>> = (0..ranks)
            .map(|me| (0..local * rows * hidden).map(|i| bf16::from_f32(((me * 7 + i * 5) % 29) as f32 * 0.125 - 1.5)).collect())
            .collect();
        let x: Vec<&[bf16]> = xs.iter().map(|v| v.as_slice()).collect();
        let combined = ll_combine(shape, &received, &x, &idx, &weights, hidden);
        // Three delivery orders of the same puts (the emulated NIC's chaos mode reorders writes).
        for order in 0..3u64 {
            let order_seed = seed ^ order.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let net = ll_dispatch_net(shape, ranks_per_node, hidden, fp8, &idx, order_seed);
            prop_assert_eq!(net.as_ref(), Ok(&received));
            let net = ll_combine_net(shape, ranks_per_node, &received, &x, &idx, &weights, hidden, order_seed);
            let bits = |v: &Vec<Vec<bf16>>| v.iter().map(|r| r.iter().map(|b| b.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>();
            prop_assert_eq!(net.map(|v| bits(&v)), Ok(bits(&combined)));
        }
    }
}

/// A divisor of `ranks` picked by `pick`: the ranks per node of a split into equal nodes.
fn ranks_per_node(ranks: usize, pick: usize) -> usize {
    let divisors: Vec<usize> = (1..=ranks).filter(|d| ranks.is_multiple_of(*d)).collect();
    divisors[pick % divisors.len()]
}

proptest! {
    #[test]
    fn dispatch_between_nodes_delivers_the_one_node_rows_by_forwarder_then_source_node(w in world(), pick in any::<usize>()) {
        let DispatchShape { ranks, topk, .. } = w.shape;
        let k = ranks_per_node(ranks, pick);
        let flat = dispatch(w.shape, &w.routing());
        let two_hop = dispatch_internode(w.shape, k, &w.routing());
        for d in 0..ranks {
            let (got, want) = (&two_hop[d], &flat[d]);
            // The same rows, ordered by the source's local index, then its node, then token.
            let row_of = |s: usize, t: i32| want.recv_src_rank.iter().zip(&want.recv_src_idx).position(|(&ws, &wt)| ws == s && wt == t);
            let mut order: Vec<usize> = (0..want.len()).collect();
            order.sort_by_key(|&i| (want.recv_src_rank[i] % k, want.recv_src_rank[i] / k, want.recv_src_idx[i]));
            prop_assert_eq!(got.len(), want.len(), "rank {} rows", d);
            for (row, &i) in order.iter().enumerate() {
                prop_assert_eq!((got.recv_src_rank[row], got.recv_src_idx[row]), (want.recv_src_rank[i], want.recv_src_idx[i]));
                prop_assert_eq!(row_of(got.recv_src_rank[row], got.recv_src_idx[row]), Some(i));
                prop_assert_eq!(&got.nvl.recv_topk_idx[row * topk..(row + 1) * topk], &want.recv_topk_idx[i * topk..(i + 1) * topk]);
                prop_assert_eq!(&got.nvl.recv_topk_weights[row * topk..(row + 1) * topk], &want.recv_topk_weights[i * topk..(i + 1) * topk]);
            }
            prop_assert_eq!(&got.nvl.recv_tokens_per_expert, &want.recv_tokens_per_expert);
            // With one node or one rank per node the order is the one-node order.
            if k == 1 || k == ranks {
                prop_assert_eq!(&got.recv_src_rank, &want.recv_src_rank);
                prop_assert_eq!(&got.recv_src_idx, &want.recv_src_idx);
            }
        }
        // Rail hop: a forwarder's rows are by source node, each node's at its prefix, and the
        // source's send head points at its token's row there.
        let nodes = ranks / k;
        for f in 0..ranks {
            let rail = &two_hop[f].rail;
            let (node, l) = (f / k, f % k);
            for s in 0..nodes {
                let start = if s == 0 { 0 } else { rail.rail_prefix_matrix[(s - 1) * nodes + node] as usize };
                let end = rail.rail_prefix_matrix[s * nodes + node] as usize;
                prop_assert!(rail.src_node[start..end].iter().all(|&n| n == s));
                let source = &two_hop[s * k + l].rail;
                for t in 0..w.tokens(s * k + l) {
                    let head = source.rail_send_head[t * nodes + node];
                    let goes = (0..topk).any(|j| {
                        let e = w.topk_idx[s * k + l][t * topk + j];
                        e >= 0 && e as usize / (w.shape.experts / nodes) == node
                    });
                    prop_assert_eq!(head >= 0, goes);
                    if head >= 0 {
                        prop_assert_eq!(rail.src_idx[start + head as usize], t as i32);
                    }
                }
            }
            prop_assert_eq!(rail.src_node.len(), rail.rail_prefix_matrix[(nodes - 1) * nodes + node] as usize);
        }
    }

    #[test]
    fn combine_between_nodes_sums_each_nodes_partial_in_node_order(w in world(), pick in any::<usize>(), hidden in 1usize..=4, biases in 0usize..=2) {
        let DispatchShape { ranks, topk, .. } = w.shape;
        let k = ranks_per_node(ranks, pick);
        let received = dispatch_internode(w.shape, k, &w.routing());
        // A row's value depends on (receiver, source, token, channel) only, so the reference
        // below needs no row index of the two-hop layout. Magnitudes of 2^24 by node make the
        // order of the nodes' partials visible in f32; 256 by rank, the rounding of a partial.
        let value = |r: usize, s: usize, t: usize, h: usize| {
            let by_node = [16_777_216.0, -16_777_216.0, 0.0][(r / k) % 3];
            bf16::from_f32(((r * 7 + s * 5 + t * 3 + h) % 11) as f32 * 0.37 - 1.5 + if r.is_multiple_of(2) { 256.0 } else { 0.0 } + by_node)
        };
        let xs: Vec<Vec<bf16>> = (0..ranks).map(|r| (0..received[r].len() * hidden).map(|i| {
            let row = i / hidden;
            value(r, received[r].recv_src_rank[row], received[r].recv_src_idx[row] as usize, i % hidden)
        }).collect()).collect();
        let bias: Vec<Vec<bf16>> = (0..ranks).map(|s| (0..w.tokens(s) * hidden).map(|i| bf16::from_f32(i as f32 * 0.5)).collect()).collect();
        let inputs: Vec<CombineInput<'_>> = (0..ranks).map(|r| CombineInput {
            x: &xs[r],
            topk_weights: Some(&received[r].nvl.recv_topk_weights),
            bias: [(biases >= 1).then_some(bias[r].as_slice()), (biases >= 2).then_some(bias[r].as_slice())],
        }).collect();
        let combined = combine_internode(&received, k, &inputs, hidden, topk);
        let local = w.shape.experts / ranks;
        for s in 0..ranks {
            for t in 0..w.tokens(s) {
                let idx = &w.topk_idx[s][t * topk..(t + 1) * topk];
                let holders: Vec<usize> = (0..ranks).filter(|&r| idx.iter().any(|&e| e >= 0 && e as usize / local == r)).collect();
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for _ in 0..biases { acc += bias[s][t * hidden + h].to_f32(); }
                    for node in 0..ranks / k {
                        let mine: Vec<usize> = holders.iter().copied().filter(|r| r / k == node).collect();
                        if mine.is_empty() { continue; }
                        let mut partial = 0f32;
                        for r in mine { partial += value(r, s, t, h).to_f32(); }
                        acc += bf16::from_f32(partial).to_f32();
                    }
                    prop_assert_eq!(combined[s].x[t * hidden + h].to_bits(), bf16::from_f32(acc).to_bits(), "rank {} token {} channel {} ({} per node)", s, t, h, k);
                }
                let weights = combined[s].topk_weights.as_ref().unwrap();
                for j in 0..topk {
                    let want = if idx[j] >= 0 { w.weights[s][t * topk + j] } else { 0.0 };
                    prop_assert_eq!(weights[t * topk + j], want);
                }
            }
        }
    }

    #[test]
    fn combine_between_nodes_of_exact_sums_is_the_one_node_combine(w in world(), pick in any::<usize>(), hidden in 1usize..=3) {
        let DispatchShape { ranks, topk, .. } = w.shape;
        let k = ranks_per_node(ranks, pick);
        let flat = dispatch(w.shape, &w.routing());
        let two_hop = dispatch_internode(w.shape, k, &w.routing());
        // Small integers: every partial and sum is exact, so the order of the sums is invisible.
        let value = |r: usize, s: usize, t: i32, h: usize| bf16::from_f32(((r + 3 * s + 5 * t as usize + h) % 9) as f32 - 4.0);
        let rows = |got: &[usize], idx: &[i32], r: usize| -> Vec<bf16> {
            (0..got.len() * hidden).map(|i| value(r, got[i / hidden], idx[i / hidden], i % hidden)).collect()
        };
        let xs_flat: Vec<Vec<bf16>> = (0..ranks).map(|r| rows(&flat[r].recv_src_rank, &flat[r].recv_src_idx, r)).collect();
        let xs_two: Vec<Vec<bf16>> = (0..ranks).map(|r| rows(&two_hop[r].recv_src_rank, &two_hop[r].recv_src_idx, r)).collect();
        let want = combine(&flat, &xs_flat.iter().map(|x| rows_only(x)).collect::<Vec<_>>(), hidden, topk);
        let got = combine_internode(&two_hop, k, &xs_two.iter().map(|x| rows_only(x)).collect::<Vec<_>>(), hidden, topk);
        for s in 0..ranks {
            prop_assert_eq!(&got[s].x, &want[s].x, "rank {}", s);
            prop_assert!(got[s].topk_weights.is_none());
        }
    }
}

/// A combine input of rows only: no weights, no bias.
fn rows_only(x: &[bf16]) -> CombineInput<'_> {
    CombineInput { x, topk_weights: None, bias: [None, None] }
}
