//! The low-latency dispatch and combine of a group spanning nodes, as bytes move between the
//! ranks' buffers (docs/ep.md, "Low latency between nodes"): ranks of one node store into each
//! other's receive regions; a rank packs what goes to each rank of another node into a send
//! block of its own and reaches it with one put of the block's packed prefix (the dispatch
//! also a put of its row of counts), each raising the destination's signal of the phase (a
//! bare signal where the block is empty), a fixed number per call. The puts of every rank land in an
//! order a seed picks (each signal after its own put's data, as GIN guarantees; nothing else
//! ordered), so two puts writing the same bytes would make the result depend on the seed; the
//! receivers then check that every signal came and read their regions as the receive kernels
//! do. The results must be [`ll_dispatch`]'s and [`ll_combine`]'s for every seed: that
//! checks the offsets, message indices and count rows of the layout in `region.rs`
//! (`LlRegions` with `LlPath::Net`) that the kernels use.
//!
//! [`ll_dispatch`]: super::ll_dispatch
//! [`ll_combine`]: super::ll_combine

use half::bf16;

use super::low_latency::{LlReceived, LlShape};
use super::random::SplitMix;
use crate::region::{LlNetRegions, LlPath, LlRegions};

/// The half of the regions the modelled call uses (its phase's sequence is 0), and the tag its
/// count words carry (`sequence + 1`).
const HALF: usize = 0;
const TAG: u64 = 1;
/// Signals a rank of another node raises per call: the dispatch's packed messages and its row
/// of counts; the combine's packed rows (the kernels' `kLlDispatchPuts`, `kLlCombinePuts`).
const DISPATCH_PUTS: u64 = 2;
const COMBINE_PUTS: u64 = 1;

/// One put between two ranks' low-latency areas: `bytes` (0: a bare signal) from `from`'s at
/// `src` into `to`'s at `dst`, then one increment of `to`'s signal of the phase from `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Put {
    from: usize,
    to: usize,
    src: usize,
    dst: usize,
    bytes: usize,
}

/// Every rank's low-latency area, the signals (`[to][from]`: the increments `to` saw from
/// `from`) and the node of each rank.
struct World {
    areas: Vec<Vec<u8>>,
    signals: Vec<Vec<u64>>,
    ranks_per_node: usize,
}

impl World {
    fn new(ranks: usize, ranks_per_node: usize, bytes: usize) -> Self {
        Self { areas: vec![vec![0; bytes]; ranks], signals: vec![vec![0; ranks]; ranks], ranks_per_node }
    }

    fn same_node(&self, a: usize, b: usize) -> bool {
        a / self.ranks_per_node == b / self.ranks_per_node
    }

    /// Lands `puts` in an order `seed` picks, each put's bytes before its signal.
    fn deliver(&mut self, mut puts: Vec<Put>, seed: u64) {
        let mut rng = SplitMix::new(seed);
        for i in (1..puts.len()).rev() {
            puts.swap(i, rng.below(i + 1));
        }
        for p in puts {
            let bytes = self.areas[p.from][p.src..p.src + p.bytes].to_vec();
            self.areas[p.to][p.dst..p.dst + p.bytes].copy_from_slice(&bytes);
            self.signals[p.to][p.from] += 1;
        }
    }

    fn write_u64(&mut self, rank: usize, at: usize, value: u64) {
        self.areas[rank][at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn read_u64(&self, rank: usize, at: usize) -> u64 {
        let mut word = [0; 8];
        word.copy_from_slice(&self.areas[rank][at..at + 8]);
        u64::from_le_bytes(word)
    }
}

/// For each (token, slot) of one rank's `topk_idx` (`[tokens][topk]`): the expert and the
/// message index of the token at that expert (the tokens before it selecting the expert, each
/// once: the dispatch send's token order), or `None` (no expert, or out of range). Slots naming
/// the same expert as an earlier slot of the token share its message.
fn message_indices(topk_idx: &[i64], topk: usize, experts: usize) -> Vec<Option<(usize, usize)>> {
    let mut seen = vec![0usize; experts];
    let mut out = vec![None; topk_idx.len()];
    for (t, slots) in topk_idx.chunks_exact(topk).enumerate() {
        for (k, &e) in slots.iter().enumerate() {
            let Some(g) = usize::try_from(e).ok().filter(|&g| g < experts) else { continue };
            out[t * topk + k] = match slots[..k].iter().position(|&earlier| earlier == e) {
                Some(first) => out[t * topk + first],
                None => {
                    seen[g] += 1;
                    Some((g, seen[g] - 1))
                }
            };
        }
    }
    out
}

/// Byte `j` of the payload of token `t` of rank `src`: what the model's messages carry, so a
/// receiver can tell a message that landed in the wrong place.
fn payload_byte(src: usize, t: usize, j: usize) -> u8 {
    (src * 131 + t * 31 + j * 7) as u8
}

/// The offsets of the modelled call (its half) in a rank's low-latency area.
struct Offsets {
    regions: LlRegions,
    net: LlNetRegions,
    local: usize,
    experts: usize,
    max_tokens: usize,
    message: usize,
    row: usize,
}

impl Offsets {
    fn new(shape: LlShape, hidden: usize, fp8: bool) -> Result<Self, String> {
        let regions = LlRegions::new(0, shape.max_tokens, hidden, shape.experts, LlPath::Net);
        let net = regions.net.ok_or("the network path's layout has no send regions")?;
        Ok(Self {
            regions,
            net,
            local: shape.experts / shape.ranks,
            experts: shape.experts,
            max_tokens: shape.max_tokens,
            message: crate::region::ll_message_bytes(hidden, fp8),
            row: 2 * hidden,
        })
    }

    /// Messages (rows) of one rank's block: `local experts x max_tokens`.
    fn block(&self) -> usize {
        self.local * self.max_tokens
    }

    /// Message `at` of source `src`'s block (dispatch receive region): slot `le * max_tokens +
    /// n` from this node, packed from another node.
    fn message_in(&self, src: usize, at: usize) -> usize {
        let r = &self.regions;
        r.dispatch_offset + HALF * r.dispatch_half_bytes + (src * self.block() + at) * self.message
    }

    /// Message `at` of this rank's send block for rank `dst` (dispatch send region, packed).
    fn message_out(&self, dst: usize, at: usize) -> usize {
        let r = &self.regions;
        self.net.dispatch_send_offset + HALF * r.dispatch_half_bytes + (dst * self.block() + at) * self.message
    }

    /// Count word of source `src` for local expert `le` (counts in), or of destination `dst`
    /// (counts out).
    fn count_in(&self, src: usize, le: usize) -> usize {
        self.net.counts_in_offset + (HALF * self.experts + src * self.local + le) * 8
    }
    fn count_out(&self, dst: usize, le: usize) -> usize {
        self.net.counts_out_offset + (HALF * self.experts + dst * self.local + le) * 8
    }

    /// Row `slot` of expert `g` (combine receive region): the token on this node, the message
    /// index from another node.
    fn row_in(&self, g: usize, slot: usize) -> usize {
        let r = &self.regions;
        r.combine_offset + HALF * r.combine_half_bytes + (g * self.max_tokens + slot) * self.row
    }

    /// Row `at` of this rank's send block for rank `dst` (combine send region, packed).
    fn row_out(&self, dst: usize, at: usize) -> usize {
        let r = &self.regions;
        self.net.combine_send_offset + HALF * r.combine_half_bytes + (dst * self.block() + at) * self.row
    }
}

/// Per expert, from a rank's message indices ([`message_indices`]): its tokens selecting the
/// owner's earlier experts (each token once per expert), where the packed block of the owner
/// holds the expert's messages or rows.
fn packed_starts(indices: &[Option<(usize, usize)>], experts: usize, local: usize) -> Vec<usize> {
    let mut totals = vec![0usize; experts];
    for &(g, n) in indices.iter().flatten() {
        totals[g] = totals[g].max(n + 1);
    }
    let mut starts = vec![0usize; experts];
    for g in (1..experts).filter(|g| g % local != 0) {
        starts[g] = starts[g - 1] + totals[g - 1];
    }
    starts
}

/// [`ll_dispatch`](super::ll_dispatch) over nodes of `ranks_per_node` ranks: every rank's
/// send as the kernel does it (stores into the owner's receive region on this node; for a
/// rank of another node, into its send block for that rank packed by expert, then one put of
/// the packed messages into its block there, a bare signal where there are none, and a put of
/// its count row: 2 signals), the puts delivered in the order `seed` picks, then every rank's
/// receive (tagged count words from this node, count rows once both signals came, each
/// expert's messages at the source's messages to its earlier experts). `Err` names the first inconsistency (a count without its tag, a
/// signal missing, a message with the wrong bytes).
pub fn ll_dispatch_net(
    shape: LlShape,
    ranks_per_node: usize,
    hidden: usize,
    fp8: bool,
    topk_idx: &[&[i64]],
    seed: u64,
) -> Result<Vec<LlReceived>, String> {
    let LlShape { ranks, experts, topk, max_tokens } = shape;
    let o = Offsets::new(shape, hidden, fp8)?;
    let local = o.local;
    let mut world = World::new(ranks, ranks_per_node.max(1), o.regions.bytes);
    // The count words of this node's sources (`[owner][local expert][source]`; in the buffer's
    // metadata, not in the low-latency area).
    let mut node_counts = vec![vec![0u64; experts]; ranks];
    let mut puts = Vec::new();
    for me in 0..ranks {
        let mut totals = vec![0usize; experts];
        let indices = message_indices(topk_idx[me], topk, experts);
        let packed = packed_starts(&indices, experts, local);
        for (slot, m) in indices.into_iter().enumerate() {
            let Some((g, n)) = m else { continue };
            let (owner, le, t) = (g / local, g % local, slot / topk);
            if topk_idx[me][t * topk..t * topk + slot % topk].contains(&(g as i64)) {
                continue; // the token's earlier slot sent it
            }
            let (rank, at) = if world.same_node(me, owner) {
                (owner, o.message_in(me, le * max_tokens + n))
            } else {
                (me, o.message_out(owner, packed[g] + n))
            };
            let area = &mut world.areas[rank];
            area[at..at + 4].copy_from_slice(&(t as i32).to_le_bytes());
            for j in 16..o.message {
                area[at + j] = payload_byte(me, t, j);
            }
            totals[g] = n + 1;
        }
        for owner in 0..ranks {
            for le in 0..local {
                let word = TAG << 32 | totals[owner * local + le] as u64;
                if world.same_node(me, owner) {
                    node_counts[owner][le * ranks + me] = word;
                } else {
                    world.write_u64(me, o.count_out(owner, le), word);
                }
            }
            if !world.same_node(me, owner) {
                let n: usize = totals[owner * local..(owner + 1) * local].iter().sum();
                let (src, dst) = (o.message_out(owner, 0), o.message_in(me, 0));
                puts.push(Put { from: me, to: owner, src, dst, bytes: n * o.message });
                let (src, dst) = (o.count_out(owner, 0), o.count_in(me, 0));
                puts.push(Put { from: me, to: owner, src, dst, bytes: local * 8 });
            }
        }
    }
    world.deliver(puts, seed);
    let rows = ranks * max_tokens;
    (0..ranks)
        .map(|me| {
            let mut out = LlReceived::empty(local, ranks, max_tokens);
            // Per source of another node: its messages to this rank's earlier experts.
            let mut packed = vec![0usize; ranks];
            for le in 0..local {
                let mut next = 0usize;
                for src in 0..ranks {
                    let remote = !world.same_node(me, src);
                    let word = if !remote {
                        node_counts[me][le * ranks + src]
                    } else if world.signals[me][src] != TAG * DISPATCH_PUTS {
                        let got = world.signals[me][src];
                        return Err(format!("rank {me}: {got} dispatch signals from rank {src}, not {DISPATCH_PUTS}"));
                    } else {
                        world.read_u64(me, o.count_in(src, le))
                    };
                    if word >> 32 != TAG {
                        return Err(format!("rank {me}: count of rank {src}, local expert {le} is {word:#x}"));
                    }
                    let (begin, count) = (next, (word & 0xffff_ffff) as usize);
                    let first = if remote { packed[src] } else { le * max_tokens };
                    packed[src] += count;
                    for i in 0..count {
                        let at = o.message_in(src, first + i);
                        let area = &world.areas[me];
                        let t = i32::from_le_bytes([area[at], area[at + 1], area[at + 2], area[at + 3]]);
                        if let Some(j) = (16..o.message).find(|&j| area[at + j] != payload_byte(src, t as usize, j)) {
                            return Err(format!("rank {me}: message {i} of rank {src} to local expert {le}, byte {j}"));
                        }
                        out.push_row(le, rows, &mut next, src, t);
                    }
                    out.layout_range[le * ranks + src] = ((begin as i64) << 32) | (next - begin) as i64;
                }
                out.recv_count[le] = next as i32;
            }
            Ok(out)
        })
        .collect()
}

/// [`ll_combine`](super::ll_combine) over nodes of `ranks_per_node` ranks: each expert rank
/// stores the rows for this node's tokens into their `[expert][token]` slots and packs the
/// rows for each rank of another node into its send block for it (local expert by local
/// expert), then puts the packed rows into that rank's rows of its experts, from their start
/// (a bare signal when there are none: 1 signal per destination of another node); the puts
/// land in the order `seed` picks; each token's rank then checks the signals and sums its
/// slots' rows in slot order as [`ll_combine`](super::ll_combine) does, finding a row of
/// another node at its tokens for the expert's rank's earlier experts plus its message index. `Err` names a rank whose signals did not all come.
#[allow(clippy::too_many_arguments)] // ll_combine's arguments, the nodes and the order
pub fn ll_combine_net(
    shape: LlShape,
    ranks_per_node: usize,
    received: &[LlReceived],
    x: &[&[bf16]],
    topk_idx: &[&[i64]],
    topk_weights: &[&[f32]],
    hidden: usize,
    seed: u64,
) -> Result<Vec<Vec<bf16>>, String> {
    let LlShape { ranks, experts, topk, max_tokens } = shape;
    let o = Offsets::new(shape, hidden, false)?;
    let (local, rows) = (o.local, ranks * max_tokens);
    let mut world = World::new(ranks, ranks_per_node.max(1), o.regions.bytes);
    let mut puts = Vec::new();
    for (me, got) in received.iter().enumerate() {
        // Per destination of another node: the rows packed for it so far.
        let mut packed = vec![0usize; ranks];
        for le in 0..local {
            let g = me * local + le;
            for (dst, before) in packed.iter_mut().enumerate() {
                let range = got.layout_range[le * ranks + dst];
                let (begin, n) = ((range >> 32) as usize, (range & 0xffff_ffff) as usize);
                for i in begin..begin + n {
                    let t = got.src_info[le * rows + i] as usize;
                    let (rank, at) = if world.same_node(me, dst) {
                        (dst, o.row_in(g, t))
                    } else {
                        (me, o.row_out(dst, *before + i - begin))
                    };
                    for h in 0..hidden {
                        let v = x[me][(le * rows + i) * hidden + h].to_bits().to_le_bytes();
                        world.areas[rank][at + 2 * h..at + 2 * h + 2].copy_from_slice(&v);
                    }
                }
                *before += n;
            }
        }
        for dst in (0..ranks).filter(|&d| !world.same_node(me, d)) {
            let (src, dst_at) = (o.row_out(dst, 0), o.row_in(me * local, 0));
            puts.push(Put { from: me, to: dst, src, dst: dst_at, bytes: packed[dst] * o.row });
        }
    }
    world.deliver(puts, seed);
    (0..ranks)
        .map(|s| {
            let tokens = topk_idx[s].len() / topk;
            let indices = message_indices(topk_idx[s], topk, experts);
            let packed = packed_starts(&indices, experts, local);
            let mut out = vec![bf16::ZERO; tokens * hidden];
            for t in 0..tokens {
                let mut sources = Vec::new();
                for k in 0..topk {
                    let Some((g, n)) = indices[t * topk + k] else { continue };
                    let owner = g / local;
                    let at = if world.same_node(s, owner) {
                        o.row_in(g, t)
                    } else if world.signals[s][owner] != TAG * COMBINE_PUTS {
                        let got = world.signals[s][owner];
                        return Err(format!("rank {s}: {got} combine signals from rank {owner}, not {COMBINE_PUTS}"));
                    } else {
                        o.row_in(owner * local, packed[g] + n)
                    };
                    sources.push((at, topk_weights[s][t * topk + k]));
                }
                for h in 0..hidden {
                    let mut acc = 0f32;
                    for &(at, w) in &sources {
                        let bits = u16::from_le_bytes([world.areas[s][at + 2 * h], world.areas[s][at + 2 * h + 1]]);
                        acc = bf16::from_bits(bits).to_f32().mul_add(w, acc);
                    }
                    out[t * hidden + h] = bf16::from_f32(acc);
                }
            }
            Ok(out)
        })
        .collect()
}
