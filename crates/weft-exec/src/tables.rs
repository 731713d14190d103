//! What the interpreter kernel needs of one rank besides its operations, computed from a
//! lowered plan: which of the rank's buffers peers touch (those are staged in registered
//! memory), which output chunks the plan writes (those are copied out of the stage), the shape
//! of the link table, the peers the launch fences cover, which of them the rank maps and which
//! it reaches through port channels alone ([`peer_routes`]) and the barrier count. Also the checks
//! the kernel relies on: every thread block runs the same number of barriers, the chunks an
//! operation pairs up have the same size class, and every thread block fits shared memory.

use weft_types::{
    EXEC_BARRIER, EXEC_LOCAL, EXEC_PORT_PUT, EXEC_RESOLVED_ROWS, EXEC_SIGNAL, EXEC_SIGNAL_PORT, EXEC_WAIT_LINK,
    EXEC_WAIT_PORT, EXEC_WAIT_TB, ExecLoc, ExecOp,
};

use crate::error::ExecError;
use crate::lower::{DevicePlan, DeviceRankPlan};

/// Operations of one thread block the kernel holds in shared memory (48 KiB, less the resolved
/// rows and the ranks' buffers).
pub const MAX_TB_OPS: usize = (48 * 1024 - weft_types::EXEC_STATIC_SHARED_BYTES) / size_of::<ExecOp>();
// A step word counts a thread block's operations below its launch's multiple of the stride.
const _: () = assert!((MAX_TB_OPS as u64) < weft_types::EXEC_STEP_STRIDE);
/// Ranks a plan may have (the launch fence's peer mask is 32 bits).
pub const MAX_PLAN_RANKS: usize = weft_types::EXEC_MAX_RANKS;

/// One rank's tables (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTables {
    /// A peer reads this rank's input: the input is copied into the input stage first.
    pub input_remote: bool,
    /// Some operation, this rank's or a peer's, reads this rank's input (a broadcast's
    /// non-root reads none: where its input lies does not matter).
    pub input_read: bool,
    /// A peer reads or writes this rank's output: the output is assembled in the output stage.
    pub output_remote: bool,
    /// Per output chunk, 1 when the plan writes it on this rank.
    pub written: Vec<u8>,
    /// Channels per peer in the link table (the largest memory channel used plus one).
    pub link_stride: u32,
    /// Channels per peer in the port table (the largest port channel plus one; 0: none).
    pub port_stride: u32,
    /// Bit `p`: the rank waits on or signals peer `p`.
    pub peer_mask: u32,
    /// The peers of `peer_mask` whose buffers this rank maps and with which it fences over a
    /// memory semaphore ([`memory_peers`]); the others are port-only: reached through port
    /// channels alone (a peer in another node), fenced over a port channel of their own.
    pub memory_mask: u32,
    /// Barriers every thread block runs per launch.
    pub plan_barriers: u32,
    /// Operations of the largest thread block.
    pub max_tb_ops: u32,
    /// Per thread block, the rows the kernel resolves for it (chunks its operations move), at
    /// most `EXEC_RESOLVED_ROWS + 1`: the kernel resolves a thread block's rows up front when
    /// they fit, and fetches them before it has read its operations.
    pub tb_rows: Vec<u32>,
}

impl RankTables {
    /// Index of link (`peer`, `channel`) in the link table.
    pub fn link_index(&self, peer: u32, channel: u32) -> usize {
        peer as usize * self.link_stride as usize + channel as usize
    }

    /// Index of port link (`peer`, `channel`) in the port table.
    pub fn port_index(&self, peer: u32, channel: u32) -> usize {
        peer as usize * self.port_stride as usize + channel as usize
    }
}

/// Every peer's buffer `plan`'s operations read or write, as (buffer) of each such location.
fn peer_buffers(plan: &DevicePlan) -> impl Iterator<Item = u8> + '_ {
    plan.ranks
        .iter()
        .flat_map(|r| &r.ops)
        .flat_map(ExecOp::locations)
        .filter(|l| l.peer != EXEC_LOCAL)
        .map(|l| l.buffer)
}

/// Whether every launch of `plan` starts with a fence (`EXEC_ENTRY_FENCE`): some operation
/// touches a peer's input, whose stage its owner fills at the start of the launch. A property of
/// the whole plan, so every rank answers the same (the fence is pairwise).
pub fn needs_entry_fence(plan: &DevicePlan) -> bool {
    peer_buffers(plan).any(|b| b == 0)
}

/// Whether some rank's output is read or written by a peer: only then can a launch gain by
/// running into the ranks' registered user outputs (`EXEC_OUTPUT_DIRECT`). The same on every
/// rank.
pub fn peers_touch_outputs(plan: &DevicePlan) -> bool {
    peer_buffers(plan).any(|b| b == 1)
}

/// Whether a launch that fences on entry may skip its exit fence: peers never read a rank's
/// buffers, every write into a peer is followed in its thread block by a signal to that peer
/// (which covers it), and every link carries as many signals as its receiver waits for. A
/// rank whose plan is done has then seen every write into its buffers, and no peer touches them
/// again before the next launch's entry fence. The same on every rank.
/// Plans with port links keep their exit fence: a port signal covers its link's puts, not the
/// thread block's other writes into the peer.
pub fn peers_only_push_signalled(plan: &DevicePlan) -> bool {
    use std::collections::{BTreeSet, HashMap};
    if plan.ranks.iter().any(|r| !r.ports.is_empty()) {
        return false;
    }
    // (sender, receiver, channel) -> signals minus waits.
    let mut balance: HashMap<(usize, usize, u16), i64> = HashMap::new();
    for (r, rp) in plan.ranks.iter().enumerate() {
        for ops in rp.tb_starts.windows(2).map(|w| &rp.ops[w[0] as usize..w[1] as usize]) {
            // Peers written since the thread block last signalled them.
            let mut unsignalled = BTreeSet::new();
            for op in ops {
                if op.used_inputs().iter().any(|l| l.peer != EXEC_LOCAL) {
                    return false;
                }
                for l in op.used_outputs().iter().filter(|l| l.peer != EXEC_LOCAL) {
                    unsignalled.insert(l.peer);
                }
                if op.flags & EXEC_WAIT_LINK != 0 {
                    *balance.entry((usize::from(op.wait_peer), r, op.wait_channel)).or_default() -= 1;
                }
                if op.flags & EXEC_SIGNAL != 0 {
                    unsignalled.remove(&op.signal_peer);
                    *balance.entry((r, usize::from(op.signal_peer), op.signal_channel)).or_default() += 1;
                }
            }
            if !unsignalled.is_empty() {
                return false;
            }
        }
    }
    balance.values().all(|&b| b == 0)
}

/// Whether, in every launch of an LL plan, each rank that sends packets to a peer cannot finish
/// before that peer has started the launch: some operation of the peer precedes some
/// operation of the sender, through links, thread-block steps, barriers and program order.
/// Then a sender is never two launches ahead of its receiver, and the two scratch halves
/// (alternating by launch) keep a launch's packets out of the half a peer still reads, with no
/// fence. Ring and all-pairs plans qualify; a one-way plan (a broadcast) does not and fences on
/// entry.
pub fn packet_launches_chain(plan: &DevicePlan) -> bool {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    // Nodes: (rank, index of the op in the rank's ops).
    let mut next: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    // (from, to, channel, port) -> signalling ops in order; the same -> waiting ops.
    let mut signals: BTreeMap<(usize, usize, u16, bool), Vec<usize>> = BTreeMap::new();
    let mut waits: BTreeMap<(usize, usize, u16, bool), Vec<usize>> = BTreeMap::new();
    let mut sends = BTreeSet::new();
    for (r, rp) in plan.ranks.iter().enumerate() {
        // Per thread block, its barrier ops in order.
        let mut barriers: Vec<Vec<usize>> = Vec::new();
        for w in rp.tb_starts.windows(2) {
            let (first, end) = (w[0] as usize, w[1] as usize);
            let mut mine = Vec::new();
            for i in first..end {
                let op = &rp.ops[i];
                if i + 1 < end {
                    next.entry((r, i)).or_default().push((r, i + 1));
                }
                if op.flags & EXEC_WAIT_TB != 0 {
                    let awaited = rp.tb_starts[op.wait_tb as usize] as usize + op.wait_step as usize;
                    next.entry((r, awaited)).or_default().push((r, i));
                }
                if op.flags & EXEC_BARRIER != 0 {
                    mine.push(i);
                }
                if op.flags & EXEC_SIGNAL != 0 {
                    let port = op.flags & EXEC_SIGNAL_PORT != 0;
                    signals.entry((r, usize::from(op.signal_peer), op.signal_channel, port)).or_default().push(i);
                    sends.insert((r, usize::from(op.signal_peer)));
                }
                if op.flags & EXEC_WAIT_LINK != 0 {
                    let port = op.flags & EXEC_WAIT_PORT != 0;
                    waits.entry((usize::from(op.wait_peer), r, op.wait_channel, port)).or_default().push(i);
                }
            }
            barriers.push(mine);
        }
        for (u, ours) in barriers.iter().enumerate() {
            for (k, &at) in ours.iter().enumerate() {
                for theirs in barriers.iter().enumerate().filter(|(v, _)| *v != u).map(|(_, b)| b) {
                    if let Some(&other) = theirs.get(k) {
                        next.entry((r, at)).or_default().push((r, other));
                    }
                }
            }
        }
    }
    for (&(from, to, channel, port), sent) in &signals {
        let got = waits.get(&(from, to, channel, port)).map_or(&[][..], Vec::as_slice);
        for (&s, &w) in sent.iter().zip(got) {
            next.entry((from, s)).or_default().push((to, w));
        }
    }
    sends.into_iter().all(|(sender, receiver)| {
        let ops = plan.ranks[receiver].ops.len();
        let mut seen: BTreeSet<(usize, usize)> = (0..ops).map(|i| (receiver, i)).collect();
        let mut queue: VecDeque<(usize, usize)> = seen.iter().copied().collect();
        while let Some(node) = queue.pop_front() {
            if node.0 == sender {
                return true;
            }
            for &n in next.get(&node).map_or(&[][..], Vec::as_slice) {
                if seen.insert(n) {
                    queue.push_back(n);
                }
            }
        }
        false
    })
}

/// The peers `rank` needs memory access to, as a mask: those whose buffers an operation of
/// either reads or writes with its own threads (every location but a port put's destination,
/// which the proxy writes), and those it shares a memory link with, in either direction. The
/// rule looks at both ranks of a pair, so it is symmetric: both set up a pair alike (a memory
/// connect on one side with none on the other would hang). A peer of the launch fence outside
/// it is port-only: no mapping exists, or can (a peer in another node).
pub fn memory_peers(plan: &DevicePlan, rank: usize) -> u32 {
    let mut mask = 0u32;
    for (r, rp) in plan.ranks.iter().enumerate() {
        let touched = rp
            .ops
            .iter()
            .flat_map(|op| {
                let proxied = op.flags & EXEC_PORT_PUT != 0;
                op.used_inputs().iter().chain(op.used_outputs().iter().skip(usize::from(proxied)))
            })
            .filter(|l| l.peer != EXEC_LOCAL)
            .map(|l| usize::from(l.peer));
        let linked = rp.links.iter().map(|&(p, _)| p as usize);
        for peer in touched.chain(linked) {
            if r == rank && peer != rank {
                mask |= 1 << peer;
            } else if peer == rank && r != rank {
                mask |= 1 << r;
            }
        }
    }
    mask
}

/// How a rank sets up with one peer of its launch fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRoute {
    /// The peer's buffers mapped here, a fence semaphore and the pair's memory links (every
    /// peer in this rank's node, whatever the plan does with it).
    Memory,
    /// A peer in another node that the plan reaches through port channels alone: no mapping, a
    /// fence over a port channel of its own.
    Port,
}

/// The peers of `tables.peer_mask` in ascending order, each with its [`PeerRoute`]: memory
/// within this rank's node (`same_node`), port across nodes. Both ends of a pair choose alike
/// (nodes and [`memory_peers`] are symmetric), so their pairwise set-up calls match. A plan
/// that needs memory access to a peer in another node, or a peer without a port link to
/// fence over, is refused with the plan, rank and peer named.
pub fn peer_routes(
    plan: &DevicePlan,
    rank: usize,
    tables: &RankTables,
    same_node: impl Fn(usize) -> bool,
) -> Result<Vec<(usize, PeerRoute)>, ExecError> {
    let refuse = |peer: usize, why: &str| {
        Err(ExecError::Unsupported(format!(
            "plan {}: rank {rank} and peer {peer} are in different nodes, but {why}",
            plan.name
        )))
    };
    let mut routes = Vec::new();
    for peer in (0..plan.ranks.len()).filter(|&p| tables.peer_mask & (1 << p) != 0) {
        let route = if same_node(peer) {
            PeerRoute::Memory
        } else if tables.memory_mask & (1 << peer) != 0 {
            return refuse(peer, "the plan reads or writes the other's buffers or shares a memory link with it");
        } else if !plan.ranks[rank].ports.iter().any(|&(p, _)| p as usize == peer) {
            return refuse(peer, "the plan has no port link between them to fence launches over");
        } else {
            PeerRoute::Port
        };
        routes.push((peer, route));
    }
    Ok(routes)
}

/// Whether every rank of `plan` can set up with its peers when `same_node(a, b)` says which
/// ranks share a node: [`peer_routes`] for every rank, the first refusal returned. What the
/// executor's set-up will say, answered before any GPU work.
pub fn check_routes(plan: &DevicePlan, same_node: impl Fn(usize, usize) -> bool) -> Result<(), ExecError> {
    for rank in 0..plan.ranks.len() {
        peer_routes(plan, rank, &rank_tables(plan, rank)?, |peer| same_node(rank, peer))?;
    }
    Ok(())
}

/// Size class of chunk `index` of `loc`'s buffer, owned by `owner`.
fn class_of(plan: &DevicePlan, owner: &DeviceRankPlan, loc: &ExecLoc, index: u64) -> Option<u32> {
    let k = plan.size_classes.max(1) as usize;
    if loc.buffer != 2 {
        return Some((index % k as u64) as u32);
    }
    let i = usize::try_from(index).ok()?;
    let (row, next) = (
        owner.scratch_class_counts.get(i * k..(i + 1) * k)?,
        owner.scratch_class_counts.get((i + 1) * k..(i + 2) * k)?,
    );
    row.iter().zip(next).position(|(a, b)| a != b).map(|c| c as u32)
}

/// Computes rank `rank`'s tables and checks the plan against the kernel's assumptions.
pub fn rank_tables(plan: &DevicePlan, rank: usize) -> Result<RankTables, ExecError> {
    let ranks = plan.ranks.len();
    if ranks > MAX_PLAN_RANKS {
        return Err(ExecError::Unsupported(format!("{ranks} ranks (the executor takes at most {MAX_PLAN_RANKS})")));
    }
    let me =
        plan.ranks.get(rank).ok_or_else(|| ExecError::Unsupported(format!("rank {rank} of a {ranks}-rank plan")))?;
    let mut t = RankTables {
        input_remote: false,
        input_read: false,
        output_remote: false,
        written: vec![0; plan.output_chunks as usize],
        link_stride: 1,
        port_stride: 0,
        peer_mask: 0,
        memory_mask: 0,
        plan_barriers: 0,
        max_tb_ops: 0,
        tb_rows: Vec::new(),
    };
    for (r, rp) in plan.ranks.iter().enumerate() {
        for (tb, ops) in rp.tb_starts.windows(2).map(|w| &rp.ops[w[0] as usize..w[1] as usize]).enumerate() {
            for (step, op) in ops.iter().enumerate() {
                check_classes(plan, r, op).map_err(|()| ExecError::ClassMismatch {
                    rank: r as u32,
                    tb: tb as u32,
                    step: step as u32,
                })?;
                // The kernel maps the buffers (and scratch layout) of exactly the peers of
                // `peer_mask`, and fences with them pairwise: a peer whose buffers this rank
                // touches, or that touches this rank's, belongs to it on both sides (a plan may
                // read or put without a signal: `get`, `read_reduce`, `put`).
                for loc in op.locations().filter(|l| l.peer != EXEC_LOCAL) {
                    if r == rank {
                        t.peer_mask |= 1 << loc.peer;
                    } else if usize::from(loc.peer) == rank {
                        t.peer_mask |= 1 << r;
                    }
                }
                for loc in op.used_inputs() {
                    let owner = if loc.peer == EXEC_LOCAL { r } else { usize::from(loc.peer) };
                    t.input_read |= owner == rank && loc.buffer == 0;
                    if r != rank && usize::from(loc.peer) == rank && loc.buffer == 0 {
                        t.input_remote = true;
                    }
                    if r != rank && usize::from(loc.peer) == rank && loc.buffer == 1 {
                        t.output_remote = true;
                    }
                }
                for loc in op.used_outputs() {
                    let owner = if loc.peer == EXEC_LOCAL { r } else { usize::from(loc.peer) };
                    if owner == rank && loc.buffer == 1 {
                        t.output_remote |= r != rank;
                        let (a, b) = (loc.chunk as usize, loc.chunk as usize + loc.count as usize);
                        t.written
                            .get_mut(a..b)
                            .ok_or(ExecError::ClassMismatch { rank: r as u32, tb: tb as u32, step: step as u32 })?
                            .fill(1);
                    }
                }
            }
        }
    }
    let mut barriers = None;
    for (tb, ops) in me.tb_starts.windows(2).map(|w| &me.ops[w[0] as usize..w[1] as usize]).enumerate() {
        if ops.len() > MAX_TB_OPS {
            return Err(ExecError::Unsupported(format!(
                "rank {rank} thread block {tb} has {} operations (at most {MAX_TB_OPS})",
                ops.len()
            )));
        }
        t.max_tb_ops = t.max_tb_ops.max(ops.len() as u32);
        let rows = ops.iter().map(|op| u64::from(op.rows())).sum::<u64>();
        t.tb_rows.push(rows.min(EXEC_RESOLVED_ROWS as u64 + 1) as u32);
        let n = ops.iter().filter(|o| o.flags & EXEC_BARRIER != 0).count() as u32;
        match barriers {
            None => barriers = Some(n),
            Some(b) if b != n => {
                return Err(ExecError::UnevenBarriers { rank: rank as u32, tb: tb as u32, found: n, expected: b });
            }
            Some(_) => {}
        }
        for op in ops {
            if op.flags & EXEC_WAIT_LINK != 0 && op.flags & EXEC_WAIT_PORT == 0 {
                t.peer_mask |= 1 << op.wait_peer;
                t.link_stride = t.link_stride.max(u32::from(op.wait_channel) + 1);
            }
            if op.flags & EXEC_SIGNAL != 0 && op.flags & EXEC_SIGNAL_PORT == 0 {
                t.peer_mask |= 1 << op.signal_peer;
                t.link_stride = t.link_stride.max(u32::from(op.signal_channel) + 1);
            }
        }
    }
    // Port channels are set up at both ends of every port link, used here or not.
    for &(peer, channel) in &me.ports {
        t.peer_mask |= 1 << peer;
        t.port_stride = t.port_stride.max(channel + 1);
    }
    t.plan_barriers = barriers.unwrap_or(0);
    t.memory_mask = memory_peers(plan, rank);
    Ok(t)
}

/// Whether every location of `op` (on rank `r`) pairs chunks of equal size classes.
fn check_classes(plan: &DevicePlan, r: usize, op: &ExecOp) -> Result<(), ()> {
    let locs = op.locations();
    let Some(lead) = op.used_inputs().first() else { return Ok(()) };
    let owner = |loc: &ExecLoc| plan.ranks.get(if loc.peer == EXEC_LOCAL { r } else { usize::from(loc.peer) });
    for loc in locs {
        if loc.count != lead.count {
            return Err(());
        }
        for k in 0..u64::from(lead.count) {
            let want = class_of(plan, owner(lead).ok_or(())?, lead, u64::from(lead.chunk) + k);
            let got = class_of(plan, owner(loc).ok_or(())?, loc, u64::from(loc.chunk) + k);
            if want.is_none() || want != got {
                return Err(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::lower;
    use crate::tests::shipped;

    #[test]
    fn every_shipped_plan_passes_the_kernel_checks_and_writes_every_output_chunk_of_a_collective() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            for r in 0..plan.ranks.len() {
                let t = rank_tables(&lowered, r).unwrap_or_else(|e| panic!("{} rank {r}: {e}", plan.name));
                assert!(t.max_tb_ops as usize <= MAX_TB_OPS);
                // A row per chunk an operation moves, capped one past what the kernel holds.
                let rp = &lowered.ranks[r];
                let rows: Vec<u32> = rp
                    .tb_starts
                    .windows(2)
                    .map(|w| rp.ops[w[0] as usize..w[1] as usize].iter().map(ExecOp::rows).sum::<u32>())
                    .map(|n| n.min(EXEC_RESOLVED_ROWS as u32 + 1))
                    .collect();
                assert_eq!(t.tb_rows, rows, "{} rank {r}", plan.name);
                assert_eq!(t.peer_mask & (1 << r), 0, "{} rank {r} talks to itself", plan.name);
                if plan.collective != weft_plan::plan::CollectiveKind::Custom {
                    assert!(t.written.iter().all(|&w| w == 1), "{} rank {r}: {:?}", plan.name, t.written);
                }
            }
        }
    }

    #[test]
    fn staging_follows_what_peers_touch() {
        // Ring all-reduce: peers write this rank's output, nobody reads its input.
        let ring = lower(&weft_plan::plans::ring_allreduce(4, 1).unwrap().compile().unwrap()).unwrap();
        let t = rank_tables(&ring, 1).unwrap();
        assert!(t.output_remote && !t.input_remote);
        assert_eq!(t.peer_mask, 0b0101);
        // A plan that reads a peer's input: stage it on the owner.
        let mut plan = weft_plan::plans::ring_allgather(2, 1).unwrap().compile().unwrap();
        use weft_plan::plan::{BufRef, Buffer, Link, Op};
        plan.ranks[1].threadblocks[0].ops.insert(
            0,
            Op::Get {
                src: BufRef::new(Buffer::Input, 0, 1),
                dst: BufRef::new(Buffer::Output, 0, 1),
                from: Link::new(0, 0),
            },
        );
        let lowered = lower(&plan).unwrap();
        assert!(rank_tables(&lowered, 0).unwrap().input_remote);
        assert!(!rank_tables(&lowered, 1).unwrap().input_remote);
        // ... and launches of that plan fence on entry; ring all-reduce's need not.
        assert!(needs_entry_fence(&lowered));
        assert!(!needs_entry_fence(&ring));
        // Peers write ring all-reduce's and all-gather's outputs; all-to-all's too, but a
        // broadcast rooted at 0 at one rank has no peer.
        assert!(peers_touch_outputs(&ring) && peers_touch_outputs(&lowered));
        let alone = lower(&weft_plan::plans::direct_broadcast(1, 0, 1).unwrap().compile().unwrap()).unwrap();
        assert!(!peers_touch_outputs(&alone));
    }

    /// docs/perf/executor.md says direct launches of every shipped plan skip the exit fence.
    /// Port plans keep it (they touch only scratch in peers, so never launch direct).
    #[test]
    fn every_shipped_plan_pushes_and_signals_so_direct_launches_skip_the_exit_fence() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let ports = lowered.ranks.iter().any(|r| !r.ports.is_empty());
            assert_eq!(peers_only_push_signalled(&lowered), !ports, "{}", plan.name);
            assert!(!needs_entry_fence(&lowered), "{}", plan.name);
            assert!(!ports || !peers_touch_outputs(&lowered), "{}", plan.name);
        }
    }

    #[test]
    fn the_exit_fence_may_go_only_where_peers_push_and_signal_every_write() {
        let ring = lower(&weft_plan::plans::ring_allreduce(4, 4).unwrap().compile().unwrap()).unwrap();
        assert!(peers_only_push_signalled(&ring));
        // A write into a peer with no signal after it (links still balanced): a copy of a put,
        // without its wait and signal, last in rank 0's last thread block.
        let mut unsignalled = ring.clone();
        let rank0 = &mut unsignalled.ranks[0];
        let pushes = |o: &&ExecOp| o.used_outputs().iter().any(|l| l.peer != EXEC_LOCAL);
        let mut put = *rank0.ops.iter().find(pushes).unwrap();
        put.flags = 0;
        rank0.ops.push(put);
        *rank0.tb_starts.last_mut().unwrap() += 1;
        assert!(!peers_only_push_signalled(&unsignalled));
        // A signal nobody waits for.
        let mut unbalanced = ring.clone();
        let wait = unbalanced.ranks[1].ops.iter_mut().find(|o| o.flags & EXEC_WAIT_LINK != 0).unwrap();
        wait.flags &= !EXEC_WAIT_LINK;
        assert!(!peers_only_push_signalled(&unbalanced));
        // A read of a peer's buffer.
        let mut reads = ring.clone();
        let op = reads.ranks[0].ops.iter_mut().find(|o| o.n_inputs > 0).unwrap();
        op.inputs[0].peer = 1;
        assert!(!peers_only_push_signalled(&reads));
    }

    /// A plan that only reads its peers (no signal, no wait) still maps and fences them, on
    /// both sides: rank 0 reads rank 1's input, rank 1 touches nothing of rank 0.
    #[test]
    fn the_peer_mask_covers_reads_and_puts_without_signals_on_both_sides() {
        use weft_plan::plan::{BufRef, Buffer, CollectiveKind, ExecutionPlan, Link, Op, PLAN_VERSION, RankPlan};
        use weft_plan::plan::{Protocol, ThreadBlock};
        let (i, o) = (BufRef::new(Buffer::Input, 0, 1), BufRef::new(Buffer::Output, 0, 1));
        let rank = |r: u32, ops: Vec<Op>| RankPlan {
            rank: r,
            scratch: vec![],
            threadblocks: vec![ThreadBlock { id: 0, ops }],
        };
        let plan = ExecutionPlan {
            version: PLAN_VERSION,
            name: "one_way_read".into(),
            collective: CollectiveKind::Custom,
            nranks: 2,
            size_classes: 1,
            input_chunks: 1,
            output_chunks: 1,
            protocol: Protocol::Simple,
            ranks: vec![
                rank(0, vec![Op::ReadReduce { local: i, remote: i, dst: o, from: Link::new(1, 0) }]),
                rank(1, vec![Op::Copy { src: i, dst: o }]),
            ],
        };
        plan.validate().unwrap();
        let lowered = lower(&plan).unwrap();
        let (t0, t1) = (rank_tables(&lowered, 0).unwrap(), rank_tables(&lowered, 1).unwrap());
        assert_eq!((t0.peer_mask, t1.peer_mask), (0b10, 0b01));
        assert!(t1.input_remote && !t0.input_remote);
        assert!(needs_entry_fence(&lowered));
    }

    /// Across nodes, the peers reached only through port channels are exactly the peers in
    /// other nodes; within a node every peer is mapped, as it always was.
    #[test]
    fn port_only_peers_are_exactly_the_peers_in_other_nodes() {
        use weft_plan::plans;
        for (nodes, gpus) in [(2, 1), (2, 2), (4, 1), (3, 2)] {
            for program in [plans::nvrar_allreduce(nodes, gpus), plans::hier2ph_allreduce(nodes, gpus)] {
                let plan = lower(&program.unwrap().compile().unwrap()).unwrap();
                for rank in 0..plan.ranks.len() {
                    let t = rank_tables(&plan, rank).unwrap();
                    let node = |r: usize| r / gpus as usize;
                    let mut in_node = 0u32;
                    for peer in (0..plan.ranks.len()).filter(|&p| p != rank && node(p) == node(rank)) {
                        in_node |= 1 << peer;
                    }
                    let at = format!("{} at {nodes}x{gpus} rank {rank}", plan.name);
                    assert_eq!(t.memory_mask, in_node, "{at}");
                    let port_only = t.peer_mask & !t.memory_mask;
                    assert_ne!(port_only, 0, "{at}");
                    assert_eq!(port_only & in_node, 0, "{at}");
                    // Every port-only peer is a port link's (the proxy exists to fence with it).
                    for peer in (0..plan.ranks.len()).filter(|&p| port_only & (1 << p) != 0) {
                        assert!(plan.ranks[rank].ports.iter().any(|&(p, _)| p as usize == peer), "{at}: {peer}");
                    }
                }
            }
        }
    }

    /// Within one node every peer of the fence is mapped, as always (port plans included);
    /// across nodes a plan that needs memory access to another node's rank is refused.
    #[test]
    fn peers_route_over_memory_within_a_node_and_refuse_memory_access_across_nodes() {
        use weft_plan::plans;
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            for rank in 0..plan.ranks.len() {
                let t = rank_tables(&lowered, rank).unwrap();
                let routes = peer_routes(&lowered, rank, &t, |_| true).unwrap();
                let peers: Vec<usize> = (0..plan.ranks.len()).filter(|&p| t.peer_mask & (1 << p) != 0).collect();
                assert_eq!(routes, peers.into_iter().map(|p| (p, PeerRoute::Memory)).collect::<Vec<_>>());
            }
        }
        for (nodes, gpus) in [(2, 1), (2, 2), (4, 1)] {
            for program in [plans::nvrar_allreduce(nodes, gpus), plans::hier2ph_allreduce(nodes, gpus)] {
                let plan = lower(&program.unwrap().compile().unwrap()).unwrap();
                for rank in 0..plan.ranks.len() {
                    let t = rank_tables(&plan, rank).unwrap();
                    let node = |r: usize| r / gpus as usize;
                    for (peer, route) in peer_routes(&plan, rank, &t, |p| node(p) == node(rank)).unwrap() {
                        let want = if node(peer) == node(rank) { PeerRoute::Memory } else { PeerRoute::Port };
                        assert_eq!(route, want, "{} at {nodes}x{gpus} rank {rank} peer {peer}", plan.name);
                    }
                }
            }
        }
        // Ring all-reduce at 2 ranks in 2 nodes: its memory links cannot cross.
        let ring = lower(&plans::ring_allreduce(2, 1).unwrap().compile().unwrap()).unwrap();
        let err = peer_routes(&ring, 0, &rank_tables(&ring, 0).unwrap(), |p| p == 0).unwrap_err();
        assert!(err.to_string().contains("plan ring_allreduce: rank 0 and peer 1 are in different nodes"), "{err}");
    }

    /// The whole plan's check answers as every rank's set-up would.
    #[test]
    fn check_routes_passes_the_multinode_plans_across_nodes_and_refuses_memory_links_there() {
        use weft_plan::plans;
        let layout = |gpus: usize| move |a: usize, b: usize| a / gpus == b / gpus;
        for (nodes, gpus) in [(2, 1), (2, 2), (4, 1)] {
            for program in [plans::nvrar_allreduce(nodes, gpus), plans::hier2ph_allreduce(nodes, gpus)] {
                let plan = lower(&program.unwrap().compile().unwrap()).unwrap();
                check_routes(&plan, layout(gpus as usize)).unwrap_or_else(|e| panic!("{}: {e}", plan.name));
            }
        }
        let ring = lower(&plans::ring_allreduce(4, 1).unwrap().compile().unwrap()).unwrap();
        check_routes(&ring, layout(4)).unwrap();
        let err = check_routes(&ring, layout(2)).unwrap_err().to_string();
        assert!(err.contains("plan ring_allreduce: rank 0 and peer 3 are in different nodes"), "{err}");
    }

    /// Memory peers are a subset of the launch fence's peers, and the rule is symmetric: a pair
    /// sets up alike at both ends. Plans without port links map every peer.
    #[test]
    fn memory_peers_are_symmetric_and_cover_every_peer_of_a_plan_without_ports() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let tables: Vec<RankTables> = (0..plan.ranks.len()).map(|r| rank_tables(&lowered, r).unwrap()).collect();
            for (r, t) in tables.iter().enumerate() {
                assert_eq!(t.memory_mask & !t.peer_mask, 0, "{} rank {r}", plan.name);
                for (p, theirs) in tables.iter().enumerate() {
                    let bit = |mask: u32, of: usize| mask & (1 << of) != 0;
                    assert_eq!(bit(t.memory_mask, p), bit(theirs.memory_mask, r), "{} ranks {r} {p}", plan.name);
                    assert_eq!(bit(t.peer_mask, p), bit(theirs.peer_mask, r), "{} ranks {r} {p}", plan.name);
                }
                if lowered.ranks.iter().all(|rp| rp.ports.is_empty()) {
                    assert_eq!(t.memory_mask, t.peer_mask, "{} rank {r}", plan.name);
                }
            }
        }
    }

    /// A port put's destination needs no mapping; any other location in a peer does, whichever
    /// rank's operation it is.
    #[test]
    fn only_a_port_put_s_destination_is_reached_without_a_mapping() {
        let plan = lower(&weft_plan::plans::nvrar_allreduce(2, 1).unwrap().compile().unwrap()).unwrap();
        assert_eq!((memory_peers(&plan, 0), memory_peers(&plan, 1)), (0, 0));
        let mut reads = plan.clone();
        let op = reads.ranks[1].ops.iter_mut().find(|o| o.flags & EXEC_PORT_PUT == 0 && o.n_inputs > 0).unwrap();
        op.inputs[0].peer = 0;
        assert_eq!((memory_peers(&reads, 0), memory_peers(&reads, 1)), (0b10, 0b01));
        let mut put = plan.clone();
        let op = put.ranks[0].ops.iter_mut().find(|o| o.flags & EXEC_PORT_PUT != 0).unwrap();
        op.flags &= !(EXEC_PORT_PUT | EXEC_SIGNAL_PORT);
        assert_eq!((memory_peers(&put, 0), memory_peers(&put, 1)), (0b10, 0b01));
    }

    /// Ring and all-pairs LL plans chain every sender to its receiver within a launch; a plan
    /// where data only flows one way (a broadcast) does not, nor one whose only link back is
    /// cut.
    #[test]
    fn packet_launches_chain_where_every_receiver_reaches_back_to_its_sender() {
        use weft_plan::plans;
        for program in
            [plans::ring_allreduce_ll(4, 2), plans::allpairs_allreduce_ll(3, 1), plans::ring_allreduce_ll(2, 1)]
        {
            let plan = program.unwrap().compile().unwrap();
            assert!(packet_launches_chain(&lower(&plan).unwrap()), "{}", plan.name);
        }
        let broadcast = lower(&plans::direct_broadcast(3, 0, 1).unwrap().compile().unwrap()).unwrap();
        assert!(!packet_launches_chain(&broadcast));
        // Two ranks, rank 1 never sends to rank 0: drop every link from 1 to 0.
        let mut one_way = lower(&plans::ring_allreduce_ll(2, 1).unwrap().compile().unwrap()).unwrap();
        for op in &mut one_way.ranks[1].ops {
            op.flags &= !EXEC_SIGNAL;
        }
        for op in &mut one_way.ranks[0].ops {
            op.flags &= !EXEC_WAIT_LINK;
        }
        assert!(!packet_launches_chain(&one_way));
    }

    #[test]
    fn uneven_barriers_and_mismatched_classes_are_errors_naming_the_site() {
        let mut plan = weft_plan::plans::ring_allreduce(2, 1).unwrap().compile().unwrap();
        plan.ranks[0].threadblocks[0].ops.push(weft_plan::plan::Op::Barrier);
        plan.ranks[0].threadblocks.push(weft_plan::plan::ThreadBlock { id: 1, ops: vec![] });
        let err = rank_tables(&lower(&plan).unwrap(), 0).unwrap_err();
        assert!(matches!(err, ExecError::UnevenBarriers { rank: 0, tb: 1, found: 0, expected: 1 }), "{err}");

        let mut plan = weft_plan::plans::ring_allreduce(2, 1).unwrap().compile().unwrap();
        use weft_plan::plan::{BufRef, Buffer, Op};
        // Input chunk 0 has class 0, output chunk 1 class 1: their sizes differ.
        plan.ranks[1].threadblocks[0]
            .ops
            .push(Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: BufRef::new(Buffer::Output, 1, 1) });
        let err = rank_tables(&lower(&plan).unwrap(), 0).unwrap_err();
        assert!(matches!(err, ExecError::ClassMismatch { rank: 1, tb: 0, .. }), "{err}");
        assert!(err.to_string().contains("rank 1 thread block 0"), "{err}");
    }
}
