//! weft's AllReduces across nodes (`port_ring`, `port_allpairs`, `nvrar`, `2ph`) as their kernels run them over
//! one α-β network link: in rounds of a bounded size (the scratch holds one round), each round's
//! messages costing `α + bytes / β` on the link. `weft bench` prints these next to the measured
//! time across virtual nodes (weft-coll's `Collectives::cross_node_model_us`); with a round as
//! large as the call, the ring's time is [`crate::closed_form`]'s `ring` on one GPU per node.

use std::time::Duration;

use weft_core::LinkModel;

/// The time, in µs, of a call of `bytes` moved in rounds of at most `round_bytes`, round by round
/// (`round_time` of each round's bytes; the last round may be short). 0 for nothing to move.
pub fn rounds_us(bytes: u64, round_bytes: u64, round_time: impl Fn(u64) -> Duration) -> f64 {
    let mut total = Duration::ZERO;
    let mut first = 0;
    while first < bytes && round_bytes > 0 {
        let round = round_bytes.min(bytes - first);
        total += round_time(round);
        first += round;
    }
    total.as_secs_f64() * 1e6
}

/// `port_ring`'s AllReduce of `bytes` on `ranks` ranks whose ring crosses `link`, in rounds of at
/// most `round_bytes`. A round is 2(n − 1) steps; in each step every rank sends one shard of the
/// round (round / n) to its successor, all edges at once, so a step lasts as long as a crossing
/// edge takes to deliver a shard: `α + shard / β` (the blocks' pieces of the shard share the
/// link, which the pacer serialises).
pub fn port_ring_us(bytes: u64, ranks: usize, round_bytes: u64, link: &LinkModel) -> f64 {
    if ranks < 2 {
        return 0.0;
    }
    let steps = 2 * (ranks as u32 - 1);
    rounds_us(bytes, round_bytes, |round| link.message_time(round.div_ceil(ranks as u64)) * steps)
}

/// `port_allpairs`'s AllReduce of `bytes` when `remote_peers` peers sit across `link` (the others
/// are reached within the node, faster), in rounds of at most `round_bytes`: in a round this
/// rank's NIC serialises one message of the round's bytes to every remote peer, and the last
/// arrives `α` after it leaves; the round ends when every peer's messages have arrived, which
/// take as long.
pub fn port_allpairs_us(bytes: u64, remote_peers: usize, round_bytes: u64, link: &LinkModel) -> f64 {
    if remote_peers == 0 {
        return 0.0;
    }
    rounds_us(bytes, round_bytes, |round| link.message_time(round * remote_peers as u64))
}

/// Most puts a step of `nvrar` sends (the kernel's `kNvrarMaxPuts`: groups of blocks, each
/// packing and putting its range of the shard).
pub const NVRAR_MAX_PUTS: usize = 4;
/// Fewest LL packets a put of `nvrar` carries (the kernel's `kNvrarMinPutPackets`).
pub const NVRAR_MIN_PUT_PACKETS: u64 = 8192;
/// Payload bytes of one LL packet of `nvrar` (8 of data, 8 of flag).
pub const NVRAR_PACKET_PAYLOAD: u64 = 8;

/// A launch of an AllReduce on the GIN device API across nodes (`nvrar`, `2ph`), as its model
/// sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GinCall {
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub gpus_per_node: usize,
    /// Most input bytes of one round.
    pub round_bytes: u64,
    /// Groups of blocks the launch deals a round's puts to (the kernels take at most 4).
    pub groups: usize,
}

impl GinCall {
    /// A rank's shard of a round of `round` bytes, in whole `unit`-byte pieces.
    fn shard(&self, round: u64, unit: u64) -> u64 {
        shard_bytes(round, self.gpus_per_node, unit)
    }
}

/// A rank's shard of `round` bytes spread over the `gpus_per_node` ranks of its node, in whole
/// `unit`-byte pieces (8 for `nvrar`'s LL packets, 16 for `2ph`'s vectors): what the kernels
/// compute per round, and what their windows' slots hold.
pub fn shard_bytes(round: u64, gpus_per_node: usize, unit: u64) -> u64 {
    round.div_ceil(gpus_per_node.max(1) as u64).next_multiple_of(unit)
}

/// How many puts carry `units` units when the launch has `groups` groups of blocks (at most
/// `max_puts`), as the kernels' `PutGroups` deals them: each put at least `min_put` units, a
/// multiple of 32.
fn group_puts(units: u64, groups: usize, max_puts: usize, min_put: u64) -> u64 {
    let groups = groups.clamp(1, max_puts) as u64;
    let put = units.div_ceil(groups).max(min_put).next_multiple_of(32);
    units.div_ceil(put).max(1)
}

/// How many puts carry a step's `shard_bytes` (a multiple of 8) when the launch has `groups`
/// groups of blocks (min(blocks, [`NVRAR_MAX_PUTS`])): as the kernel's `NvrarRange` deals
/// them, each put at least [`NVRAR_MIN_PUT_PACKETS`] packets, a multiple of 32.
pub fn nvrar_puts(shard_bytes: u64, groups: usize) -> u64 {
    group_puts(shard_bytes.div_ceil(NVRAR_PACKET_PAYLOAD), groups, NVRAR_MAX_PUTS, NVRAR_MIN_PUT_PACKETS)
}

/// A step that sends `wire` bytes in `puts` puts of equal size, which one proxy thread posts one
/// after another, `proxy_us` each, while the link carries their bytes one after another: it
/// ends `α` after the later of the two, `α + max((k − 1)·proxy + w/(kβ), w/β)`.
fn posted_step(puts: u64, wire: u64, link: &LinkModel, proxy_us: f64) -> Duration {
    let on_link = |bytes: u64| link.serialization(bytes);
    let posted =
        Duration::from_secs_f64(proxy_us.max(0.0) * 1e-6) * (puts.max(1) as u32 - 1) + on_link(wire / puts.max(1));
    link.latency + posted.max(on_link(wire))
}

/// `nvrar`'s AllReduce of `bytes` on `nodes` nodes of `gpus_per_node` ranks across `link`, in
/// rounds of at most `round_bytes`, its launch holding `groups` groups of blocks: in a round,
/// each of recursive doubling's steps sends the rank's shard (the round over the node's ranks,
/// in whole 8-byte packets) as LL packets (twice its bytes) in [`nvrar_puts`] puts, one step
/// after the other, each step a [`posted_step`]. The phases within a node are NVLink's, outside
/// this link's model.
pub fn nvrar_us(bytes: u64, call: GinCall, link: &LinkModel, proxy_us: f64) -> f64 {
    let steps = crate::closed_form::recursive_doubling_steps(call.nodes) as u32;
    rounds_us(bytes, call.round_bytes, |round| {
        let shard = call.shard(round, 8);
        posted_step(nvrar_puts(shard, call.groups), 2 * shard, link, proxy_us) * steps
    })
}

/// Most puts `2ph` sends a node per round (the kernel's `kTwoPhaseMaxPuts`).
pub const TWO_PHASE_MAX_PUTS: usize = 4;
/// Fewest 16-byte vectors a put of `2ph` carries (the kernel's `kTwoPhaseMinPutVectors`).
pub const TWO_PHASE_MIN_PUT_VECTORS: u64 = 16384;

/// How many puts carry `2ph`'s `shard_bytes` (a multiple of 16) to one node when the launch
/// has `groups` groups of blocks.
pub fn two_phase_puts(shard_bytes: u64, groups: usize) -> u64 {
    group_puts(shard_bytes.div_ceil(16), groups, TWO_PHASE_MAX_PUTS, TWO_PHASE_MIN_PUT_VECTORS)
}

/// `2ph`'s AllReduce of `bytes` on `nodes` nodes of `gpus_per_node` ranks across `link`, in
/// rounds of at most `round_bytes`, its launch holding `groups` groups of blocks: in a round the
/// rank's shard (the round over the node's ranks, 16-byte aligned) goes to each of the N − 1
/// other nodes in [`two_phase_puts`] puts, all posted by one proxy thread and carried by the
/// rank's link one after another: one [`posted_step`] of (N − 1)·k puts. The phases within a
/// node are NVLink's, outside this link's model.
pub fn two_phase_us(bytes: u64, call: GinCall, link: &LinkModel, proxy_us: f64) -> f64 {
    if call.nodes < 2 {
        return 0.0;
    }
    let others = call.nodes as u64 - 1;
    rounds_us(bytes, call.round_bytes, |round| {
        let shard = call.shard(round, 16);
        posted_step(others * two_phase_puts(shard, call.groups), others * shard, link, proxy_us)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Params, Shape, closed_form};

    fn call(nodes: usize, gpus_per_node: usize, round_bytes: u64, groups: usize) -> GinCall {
        GinCall { nodes, gpus_per_node, round_bytes, groups }
    }

    #[test]
    fn a_call_is_timed_round_by_round_with_a_short_last_round() {
        let per_byte = |r: u64| Duration::from_micros(r);
        assert_eq!(rounds_us(10, 4, per_byte), 10.0);
        let fixed = |_: u64| Duration::from_micros(5);
        assert_eq!(rounds_us(10, 4, fixed), 15.0, "rounds of 4, 4 and 2");
        assert_eq!(rounds_us(0, 4, fixed), 0.0);
        assert_eq!(rounds_us(10, 0, fixed), 0.0);
    }

    #[test]
    fn the_ring_counts_steps_rounds_and_shards() {
        // α = 5 µs, β = 25 GB/s: 4 ranks, 1 MB in one round: 6 steps of 5 µs + 250 KB / 25 GB/s.
        let link = LinkModel::new(5.0, Some(25.0));
        let us = port_ring_us(1_000_000, 4, 32 << 20, &link);
        assert!((us - 6.0 * (5.0 + 10.0)).abs() < 1e-3, "{us}");
        // Two rounds of 1 MB and 0.5 MB.
        let us = port_ring_us(1_500_000, 4, 1_000_000, &link);
        assert!((us - 6.0 * (5.0 + 10.0) - 6.0 * (5.0 + 5.0)).abs() < 1e-3, "{us}");
        assert_eq!(port_ring_us(1 << 20, 1, 1 << 20, &link), 0.0);
        assert_eq!(port_ring_us(0, 4, 1 << 20, &link), 0.0);
    }

    #[test]
    fn all_pairs_serialises_one_message_per_remote_peer_per_round() {
        // α = 5 µs, β = 25 GB/s: 2 remote peers, 1 MB in one round: 5 µs + 2 MB / 25 GB/s.
        let link = LinkModel::new(5.0, Some(25.0));
        let us = port_allpairs_us(1_000_000, 2, 4 << 20, &link);
        assert!((us - (5.0 + 80.0)).abs() < 1e-3, "{us}");
        // Two rounds: a full round, then the rest.
        let round = 1 << 20;
        let us = port_allpairs_us(round + 1000, 1, round, &link);
        let want = 2.0 * 5.0 + (round + 1000) as f64 / 25e3;
        assert!((us - want).abs() < 1e-3, "{us} vs {want}");
        assert_eq!(port_allpairs_us(1 << 20, 0, round, &link), 0.0);
    }

    /// One round as large as the call is the closed form's ring (and all-pairs) on one GPU per
    /// node: the two models are one model at two granularities.
    #[test]
    fn one_round_is_the_closed_form_on_one_gpu_per_node() {
        let net = LinkModel::new(5.0, Some(25.0));
        let params = Params::new(LinkModel::new(0.7, Some(370.0)), net);
        for nodes in [2, 3, 4, 8] {
            let shape = Shape::new(nodes, 1).unwrap();
            for bytes in [4096u64, 1 << 20, 3_000_000] {
                let closed = closed_form::time_us(Algorithm::Ring, shape, bytes as f64, &params);
                let rounds = port_ring_us(bytes, nodes, bytes, &net);
                assert!((closed - rounds).abs() < 1e-3 * closed.max(1.0), "ring {nodes} {bytes}: {closed} vs {rounds}");
                let closed = closed_form::time_us(Algorithm::AllPairs, shape, bytes as f64, &params);
                let rounds = port_allpairs_us(bytes, nodes - 1, bytes, &net);
                assert!(
                    (closed - rounds).abs() < 1e-3 * closed.max(1.0),
                    "all-pairs {nodes} {bytes}: {closed} vs {rounds}"
                );
            }
        }
    }

    #[test]
    fn nvrar_sends_the_shard_as_packets_once_per_step() {
        let link = LinkModel::new(2.0, Some(50.0));
        let one = link.message_time(2 * 1024).as_secs_f64() * 1e6;
        assert!((nvrar_us(1024, call(2, 1, 4 << 20, 4), &link, 5.0) - one).abs() < 1e-9);
        // Three nodes: the fold, one exchange and the hand-back; a node of 4 ranks sends a quarter.
        let quarter = link.message_time(2 * 256).as_secs_f64() * 1e6;
        assert!((nvrar_us(1024, call(3, 4, 4 << 20, 4), &link, 5.0) - 3.0 * quarter).abs() < 1e-9);
        // Rounds of the window's size, one after the other; 1 MB shards go as 4 puts whose
        // bytes outlast their posting.
        let round = link.message_time(2 << 20).as_secs_f64() * 1e6;
        assert!((nvrar_us(3 << 20, call(2, 1, 1 << 20, 4), &link, 5.0) - 3.0 * round).abs() < 1e-6);
        assert_eq!(nvrar_us(1024, call(1, 8, 4 << 20, 4), &link, 5.0), 0.0);
    }

    #[test]
    fn nvrar_posts_a_step_s_puts_one_after_another() {
        // 256 KB: 4 puts of 128 KB of packets (2.6 µs each on the link), posted 5 µs apart: the
        // last leaves 15 µs after the first.
        let link = LinkModel::new(2.0, Some(50.0));
        let us = nvrar_us(256 << 10, call(2, 1, 4 << 20, 4), &link, 5.0);
        let last = 2.0 + 3.0 * 5.0 + (128 << 10) as f64 / 50e3;
        assert!((us - last).abs() < 1e-3, "{us} vs {last}");
        // A launch of one group puts the shard at once.
        let one = nvrar_us(256 << 10, call(2, 1, 4 << 20, 1), &link, 5.0);
        assert!((one - link.message_time(512 << 10).as_secs_f64() * 1e6).abs() < 1e-6, "{one}");
    }

    #[test]
    fn nvrar_deals_puts_as_its_kernel_does() {
        // 64 KB of payload (8192 packets) per put at least; at most 4.
        assert_eq!(nvrar_puts(8, 4), 1);
        assert_eq!(nvrar_puts(64 << 10, 4), 1);
        assert_eq!(nvrar_puts((64 << 10) + 8, 4), 2);
        assert_eq!(nvrar_puts(256 << 10, 4), 4);
        assert_eq!(nvrar_puts(4 << 20, 4), 4);
        assert_eq!(nvrar_puts(4 << 20, 2), 2);
        assert_eq!(nvrar_puts(4 << 20, 9), 4);
        // The constants are the kernel's.
        let kernel = include_str!("../../../device/kernels/coll/nvrar.cu");
        kernel_constants_are(
            kernel,
            &[("kNvrarMaxPuts = ", NVRAR_MAX_PUTS as u64), ("kNvrarMinPutPackets = ", NVRAR_MIN_PUT_PACKETS)],
        );
    }

    /// Each `(name, value)`: `name` followed by `value` in the kernel's source.
    fn kernel_constants_are(kernel: &str, constants: &[(&str, u64)]) {
        for (name, value) in constants {
            let at = kernel.find(name).unwrap_or_else(|| panic!("{name} not in the kernel")) + name.len();
            let text: String = kernel[at..].chars().take_while(char::is_ascii_digit).collect();
            assert_eq!(text.parse::<u64>().unwrap(), *value, "{name}");
        }
    }

    #[test]
    fn two_phase_sends_the_shard_once_to_every_other_node() {
        let link = LinkModel::new(2.0, Some(50.0));
        // One put of a 1 KB call's shard (1024 bytes over one GPU per node).
        let one = link.message_time(1024).as_secs_f64() * 1e6;
        assert!((two_phase_us(1024, call(2, 1, 8 << 20, 4), &link, 5.0) - one).abs() < 1e-9);
        // Four nodes of 4 ranks: a quarter of 64 MB (16 MB) to each of 3 nodes, in rounds of
        // 8 MB (2 MB shards, 4 puts each): 12 puts per round, whose bytes outlast their posting.
        let round = link.message_time(3 * (2 << 20)).as_secs_f64() * 1e6;
        assert!((two_phase_us(64 << 20, call(4, 4, 8 << 20, 4), &link, 5.0) - 8.0 * round).abs() < 1e-6);
        assert_eq!(two_phase_us(1 << 20, call(1, 8, 8 << 20, 4), &link, 5.0), 0.0);
        // 256 KB puts at least, 4 at most.
        assert_eq!(two_phase_puts(16, 4), 1);
        assert_eq!(two_phase_puts(256 << 10, 4), 1);
        assert_eq!(two_phase_puts((256 << 10) + 16, 4), 2);
        assert_eq!(two_phase_puts(8 << 20, 4), 4);
        assert_eq!(two_phase_puts(8 << 20, 1), 1);
        let kernel = include_str!("../../../device/kernels/coll/two_phase.cu");
        kernel_constants_are(
            kernel,
            &[
                ("kTwoPhaseMaxPuts = ", TWO_PHASE_MAX_PUTS as u64),
                ("kTwoPhaseMinPutVectors = ", TWO_PHASE_MIN_PUT_VECTORS),
            ],
        );
    }
}
