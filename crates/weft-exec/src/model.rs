//! A CPU model of one launch of the interpreter kernel (`device/kernels/exec/executor.cu`), byte
//! for byte: dense user buffers, padded input and output stages and scratch, staging in and
//! out, every chunk addressed the way the kernel's `locate` does ([`Sizing::padded_offset`]:
//! a scratch chunk by its owner's table) and written in whole 16-byte vectors into padded
//! buffers, exact bytes into user buffers. Operations run one at a time in an order their
//! waits, thread-block steps and barriers allow. Its results are compared with weft-plan's
//! reference interpreter for element sizes 1, 2, 4 and 8, so a chunk placed where its reader
//! does not look, or a vector spilling into a neighbour chunk, shows as wrong elements.
//!
//! LL packets are modelled as the kernel lays them out (two 16-byte packets per 16 data
//! bytes, data words interleaved with the launch's flag, in the launch's scratch half), and a
//! receive runs only once every packet of its slice carries the launch's flag; launches run
//! one after another on the same memory, so stale packets of earlier launches are there.
//!
//! The buffers are laid out as `resources.rs` allocates them: for the executor's capacity (the
//! largest call), not the call's count, with the halves of packet scratch and of the output
//! stage (launches without an entry fence alternate between them) that far apart.

use std::collections::HashMap;

use weft_plan::ExecutionPlan;
use weft_plan::interp::{Interpreter, RankBuffers, ReduceOp};
use weft_plan::plan::Geometry;
use weft_types::{
    EXEC_BARRIER, EXEC_FLUSH, EXEC_LOC_PACKETS, EXEC_LOCAL, EXEC_PORT_PUT, EXEC_PUBLISH, EXEC_SIGNAL, EXEC_SIGNAL_PORT,
    EXEC_WAIT_LINK, EXEC_WAIT_PORT, EXEC_WAIT_TB, ExecLoc, ExecOp,
};

use crate::geometry::{Sizing, op_slice, replica_slice};
use crate::lower::{DevicePlan, lower};
use crate::resources::{buffer_lengths, stage_flips};
use crate::tables::{PeerRoute, RankTables, peer_routes, rank_tables};

/// One rank's memory: the user buffer (input at `input_at`, output at `output_at`; they
/// overlap in place) and the executor's padded buffers.
struct RankMemory {
    user: Vec<u8>,
    input_at: usize,
    output_at: usize,
    stages: [Vec<u8>; 3],
    input_staged: bool,
    output_staged: bool,
    /// Output chunks are the user outputs of every rank (`EXEC_OUTPUT_DIRECT`, alike on all).
    output_direct: bool,
}

struct Model<'a> {
    plan: &'a DevicePlan,
    sizing: Sizing,
    elem: u64,
    tables: Vec<RankTables>,
    memory: Vec<RankMemory>,
    /// Bytes between the scratch halves (packets), else 0.
    scratch_flip: usize,
    /// Bytes between the output stage's halves (launches without an entry fence), else 0.
    output_flip: usize,
    /// The launch being run: its packet flag and scratch half.
    launch: u64,
    /// A broken kernel for the tests: every launch's packets carry the same flag.
    same_flag: bool,
    /// Per rank, the peers whose memory it maps (`peer_routes`): its threads touch no other
    /// rank's memory; the proxy writes a port put's destination.
    mapped: Vec<u32>,
}

/// How the model's ranks are set up.
#[derive(Clone, Copy, Debug, Default)]
struct Setup {
    /// A broken kernel for the tests: every launch's packets carry the same flag.
    same_flag: bool,
    /// Ranks per node (`None`: one node). Ranks map only the peers `peer_routes` maps; a plan
    /// it refuses is a panic.
    gpus_per_node: Option<usize>,
}

/// Packet bytes per data byte of a location.
fn scale(loc: &ExecLoc) -> usize {
    if loc.flags & EXEC_LOC_PACKETS != 0 { 2 } else { 1 }
}

impl Model<'_> {
    /// Where chunk `chunk` of `loc` lies, seen from `rank`: (rank owning the memory, buffer
    /// index: 3 user, else the stage), byte offset, whether padded.
    fn locate(&self, rank: usize, loc: &ExecLoc, chunk: u64) -> (usize, usize, usize, bool) {
        let local = loc.peer == EXEC_LOCAL;
        let owner = if local { rank } else { usize::from(loc.peer) };
        let m = &self.memory[owner];
        let dense = self.sizing.split().dense_offset(chunk) * self.elem;
        if local && loc.buffer == 0 && !m.input_staged {
            return (owner, 3, m.input_at + dense as usize, false);
        }
        // Direct outputs are written as the kernel writes them: whole vectors, checked to stay
        // inside the chunk.
        if loc.buffer == 1 && m.output_direct {
            return (owner, 3, m.output_at + dense as usize, true);
        }
        if local && loc.buffer == 1 && !m.output_staged {
            return (owner, 3, m.output_at + dense as usize, false);
        }
        let at = self.sizing.padded_offset(&self.plan.ranks[owner], loc.buffer, chunk, self.elem).unwrap();
        (owner, usize::from(loc.buffer), at as usize + self.half(loc.buffer), true)
    }

    /// Where this launch's half of stage `buffer` starts: odd launches use the second half.
    fn half(&self, buffer: u8) -> usize {
        match buffer {
            1 if self.launch % 2 == 1 => self.output_flip,
            2 if self.launch % 2 == 1 => self.scratch_flip,
            _ => 0,
        }
    }

    /// The launch's packet flag, as the kernel computes it.
    fn flag(&self) -> u32 {
        if self.same_flag { 1 } else { (self.launch as u32).wrapping_add(1).max(1) }
    }

    /// Whether every packet of replica `replica`'s slice of `op`'s packet inputs carries this
    /// launch's flag: the kernel's receive polls until then.
    fn packets_ready(&self, rank: usize, op: &ExecOp, replica: u32, replicas: u32) -> bool {
        let flag = self.flag().to_le_bytes();
        op.used_inputs().iter().filter(|l| scale(l) == 2).all(|loc| {
            (0..u64::from(loc.count)).all(|k| {
                let chunk = u64::from(loc.chunk) + k;
                let slice = replica_slice(self.bytes_of(rank, loc, chunk) as u64, replica, replicas);
                let (owner, which, at, _) = self.locate(rank, loc, chunk);
                let m = &self.memory[owner].stages[which];
                let (from, to) = (at + 2 * slice.start as usize, at + 2 * slice.end.next_multiple_of(16) as usize);
                m[from..to].chunks(8).all(|word| word[4..8] == flag)
            })
        })
    }

    /// Checks that `rank` may touch `owner`'s memory: its own, a peer it maps, or one the proxy
    /// writes for it (`proxied`).
    fn check_reach(&self, rank: usize, owner: usize, proxied: bool) {
        assert!(
            owner == rank || proxied || self.mapped[rank] & (1 << owner) != 0,
            "{}: rank {rank} touches the memory of rank {owner}, which it does not map",
            self.plan.name
        );
    }

    fn bytes_of(&self, rank: usize, loc: &ExecLoc, chunk: u64) -> usize {
        let owner = if loc.peer == EXEC_LOCAL { rank } else { usize::from(loc.peer) };
        let class = self.sizing.class_of(&self.plan.ranks[owner], loc.buffer, chunk).unwrap();
        (self.sizing.split().class_len(class) * self.elem) as usize
    }

    fn buffer(&mut self, owner: usize, which: usize) -> &mut Vec<u8> {
        let m = &mut self.memory[owner];
        if which == 3 { &mut m.user } else { &mut m.stages[which] }
    }

    /// Folds (wrapping sum of `elem`-byte little-endian integers) and writes, as the kernel's
    /// `fold` does for replica `replica` of `replicas`: its slice of every chunk, in whole 16-byte
    /// vectors (zero-padded) into padded outputs, exact bytes elsewhere. `proxied`: a port put
    /// the proxy applies (its destination is a peer's memory this rank need not map).
    fn run_data(&mut self, rank: usize, op: &ExecOp, replica: u32, replicas: u32, proxied: bool) {
        let lead = op.inputs[0];
        for k in 0..u64::from(lead.count) {
            let bytes = self.bytes_of(rank, &lead, u64::from(lead.chunk) + k);
            let slice = op_slice(bytes as u64, crate::lower::exec_part(op), replica, replicas);
            let (from, len) = (slice.start as usize, (slice.end - slice.start) as usize);
            if len == 0 {
                continue;
            }
            let mut acc = vec![0u8; len.next_multiple_of(16)];
            for (i, loc) in op.used_inputs().iter().enumerate() {
                let (owner, which, at, _) = self.locate(rank, loc, u64::from(loc.chunk) + k);
                self.check_reach(rank, owner, false);
                let at = at + from * scale(loc);
                let src = if scale(loc) == 2 {
                    // Data words interleaved with flags: keep the data, `len` bytes of it.
                    let packets = &self.buffer(owner, which)[at..at + 2 * acc.len()];
                    let data: Vec<u8> = packets.chunks(8).flat_map(|w| w[..4].to_vec()).collect();
                    data[..len].to_vec()
                } else {
                    self.buffer(owner, which)[at..at + len].to_vec()
                };
                if i == 0 {
                    acc[..len].copy_from_slice(&src);
                } else {
                    add_into(&mut acc[..len], &src, self.elem as usize);
                }
            }
            let flag = self.flag().to_le_bytes();
            for (o, loc) in op.used_outputs().iter().enumerate() {
                let (owner, which, at, padded) = self.locate(rank, loc, u64::from(loc.chunk) + k);
                self.check_reach(rank, owner, proxied && o == 0);
                let bytes: Vec<u8> = if scale(loc) == 2 {
                    acc.chunks(4).flat_map(|d| d.iter().chain(&flag).copied().collect::<Vec<u8>>()).collect()
                } else {
                    acc[..if padded { acc.len() } else { len }].to_vec()
                };
                let (at, n) = (at + from * scale(loc), bytes.len());
                if padded {
                    // The vector stays inside the chunk as its owner lays it out.
                    let chunk = u64::from(loc.chunk) + k;
                    let class = self.sizing.class_of(&self.plan.ranks[owner], loc.buffer, chunk).unwrap();
                    let room = if loc.buffer == 2 {
                        self.sizing.scratch_class_bytes(class, self.elem)
                    } else {
                        self.sizing.split().padded_class_bytes(class, self.elem)
                    };
                    assert!(
                        from * scale(loc) + n <= room as usize,
                        "a vector spills past chunk {chunk} of rank {owner}"
                    );
                }
                self.buffer(owner, which)[at..at + n].copy_from_slice(&bytes);
            }
        }
    }

    /// Copies every (written) chunk between a user buffer and its stage, as `stage` does.
    fn stage(&mut self, rank: usize, into_stage: bool) {
        let chunks = if into_stage { self.plan.input_chunks } else { self.plan.output_chunks };
        for i in 0..u64::from(chunks) {
            if !into_stage && self.tables[rank].written[i as usize] == 0 {
                continue;
            }
            let bytes = (self.sizing.split().class_len(i % self.sizing.classes()) * self.elem) as usize;
            let dense = (self.sizing.split().dense_offset(i) * self.elem) as usize;
            let padded = self.sizing.split().padded_dense_offset(i, self.elem) as usize;
            let padded = padded + if into_stage { 0 } else { self.half(1) };
            let m = &mut self.memory[rank];
            if into_stage {
                let at = m.input_at + dense;
                let src = m.user[at..at + bytes].to_vec();
                m.stages[0][padded..padded + bytes].copy_from_slice(&src);
                m.stages[0][padded + bytes..padded + bytes.next_multiple_of(16)].fill(0);
            } else {
                let at = m.output_at + dense;
                let src = m.stages[1][padded..padded + bytes].to_vec();
                m.user[at..at + bytes].copy_from_slice(&src);
            }
        }
    }

    /// One launch on every rank: copy-in, the plan, copy-out. Every plan thread block runs as
    /// `replicas` replicas (the kernel's plan blocks), each with its own links and steps; the
    /// blocks take turns in an order shuffled by `seed`, so a replica that read a slice before
    /// its writer's signal ordered it would read the poison the stages start with.
    fn launch(&mut self, replicas: u32, seed: u64) {
        for r in 0..self.memory.len() {
            if self.memory[r].input_staged {
                self.stage(r, true);
            }
        }
        let ranks = self.plan.ranks.len();
        let replicas_n = replicas as usize;
        // Plan block b = replica * threadblocks + tb, as in the kernel.
        let blocks: Vec<usize> = self.plan.ranks.iter().map(|r| (r.tb_starts.len() - 1) * replicas_n).collect();
        let mut pc: Vec<Vec<usize>> = blocks.iter().map(|&n| vec![0; n]).collect();
        // Steps done as other blocks see them: only operations marked EXEC_PUBLISH publish.
        let mut published = pc.clone();
        let mut arrived: Vec<Vec<bool>> = blocks.iter().map(|&n| vec![false; n]).collect();
        let mut arrivals = vec![0usize; ranks];
        let mut barriers: Vec<Vec<usize>> = blocks.iter().map(|&n| vec![0; n]).collect();
        // (rank, peer, channel, port, replica) -> signals received, and waits claimed.
        let mut inbound: HashMap<(usize, u16, u16, bool, usize), u64> = HashMap::new();
        let mut expected: HashMap<(usize, u16, u16, bool, usize), u64> = HashMap::new();
        // (rank, block, peer, channel) -> port puts the proxy has not applied yet: applied as
        // late as the port channel allows, at the link's next signal or flush.
        let mut pending: HashMap<(usize, usize, u16, u16), Vec<ExecOp>> = HashMap::new();
        let mut order: Vec<(usize, usize)> = (0..ranks).flat_map(|r| (0..blocks[r]).map(move |b| (r, b))).collect();
        let mut state = seed | 1;
        loop {
            // A fresh order every sweep (Fisher-Yates).
            for i in (1..order.len()).rev() {
                order.swap(i, (xorshift(&mut state) % (i as u64 + 1)) as usize);
            }
            let mut progressed = false;
            let mut done = true;
            for &(r, b) in &order {
                // A burst of one to three operations, so blocks drift apart as on a GPU.
                for _ in 0..1 + xorshift(&mut state) % 3 {
                    let rp = &self.plan.ranks[r];
                    let threadblocks = rp.tb_starts.len() - 1;
                    let (tb, replica) = (b % threadblocks, b / threadblocks);
                    let (first, end) = (rp.tb_starts[tb] as usize, rp.tb_starts[tb + 1] as usize);
                    let step = pc[r][b];
                    if first + step >= end {
                        break;
                    }
                    done = false;
                    let op = rp.ops[first + step];
                    let key = (r, op.wait_peer, op.wait_channel, op.flags & EXEC_WAIT_PORT != 0, replica);
                    let want = expected.get(&key).copied().unwrap_or(0) + 1;
                    // Under packets a wait is the polling of the packet input.
                    let ready = if self.plan.packets {
                        self.packets_ready(r, &op, replica as u32, replicas)
                    } else {
                        inbound.get(&key).copied().unwrap_or(0) >= want
                    };
                    if op.flags & EXEC_WAIT_LINK != 0 && !ready {
                        break;
                    }
                    if op.flags & EXEC_WAIT_TB != 0
                        && published[r][op.wait_tb as usize + replica * threadblocks] <= op.wait_step as usize
                    {
                        break;
                    }
                    if op.flags & EXEC_BARRIER != 0 {
                        if !arrived[r][b] {
                            arrived[r][b] = true;
                            arrivals[r] += 1;
                            progressed = true;
                        }
                        if arrivals[r] < (barriers[r][b] + 1) * blocks[r] {
                            break;
                        }
                        arrived[r][b] = false;
                        barriers[r][b] += 1;
                    }
                    if op.flags & EXEC_WAIT_LINK != 0 {
                        expected.insert(key, want);
                    }
                    let outbound = (r, b, op.signal_peer, op.signal_channel);
                    if op.flags & EXEC_PORT_PUT != 0 {
                        pending.entry(outbound).or_default().push(op);
                    } else if op.n_inputs > 0 {
                        self.run_data(r, &op, replica as u32, replicas, false);
                    }
                    if op.flags & EXEC_SIGNAL_PORT != 0 && op.flags & (EXEC_SIGNAL | EXEC_FLUSH) != 0 {
                        for put in pending.remove(&outbound).unwrap_or_default() {
                            self.run_data(r, &put, replica as u32, replicas, true);
                        }
                    }
                    if op.flags & EXEC_SIGNAL != 0 && !self.plan.packets {
                        let port = op.flags & EXEC_SIGNAL_PORT != 0;
                        let to = (usize::from(op.signal_peer), r as u16, op.signal_channel, port, replica);
                        *inbound.entry(to).or_default() += 1;
                    }
                    pc[r][b] += 1;
                    if op.flags & EXEC_PUBLISH != 0 {
                        published[r][b] = pc[r][b];
                    }
                    progressed = true;
                }
            }
            if done {
                break;
            }
            assert!(progressed, "{}: the model deadlocked", self.plan.name);
        }
        for r in 0..ranks {
            if self.memory[r].output_staged {
                self.stage(r, false);
            }
        }
    }
}

/// The next number of a xorshift64 sequence (`state` nonzero).
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn add_into(acc: &mut [u8], x: &[u8], elem: usize) {
    for (a, b) in acc.chunks_mut(elem).zip(x.chunks(elem)) {
        let mut carry = 0u16;
        for (p, q) in a.iter_mut().zip(b) {
            let s = u16::from(*p) + u16::from(*q) + carry;
            *p = s as u8;
            carry = s >> 8;
        }
    }
}

fn value(seed: u64, rank: usize, i: usize) -> u64 {
    let mut x = seed ^ ((rank as u64) << 40) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// How a modelled launch places its buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Separate input and output; peers' output writes go to the output stage.
    OutOfPlace,
    /// nccl-tests' in-place layout; the output is assembled in the stage.
    InPlace,
    /// Separate input and output; peers write the user outputs (`EXEC_OUTPUT_DIRECT`).
    Direct,
    /// nccl-tests' in-place layout, peers writing the user outputs (plans verified in place).
    DirectInPlace,
}

/// Runs `plan` on `count` input elements of `elem` bytes per rank through the model and
/// through weft-plan's interpreter; panics on the first wrong element of a written output
/// chunk.
fn check(plan: &ExecutionPlan, count: usize, elem: u64, placement: Placement, replicas: u32) {
    check_lowered(plan, &lower(plan).unwrap(), count, elem, placement, replicas, Setup::default());
}

/// The capacity the model's executor is set up with for calls of `count` elements of `elem`
/// bytes: more than the call (the executor serves every call up to its capacity, so the halves
/// of its buffers lie further apart than this call's data reaches), and not a multiple of it.
fn capacity_for(count: usize, elem: u64) -> u64 {
    (2 * count as u64 + 5) * elem + 4096
}

/// [`check`] of `lowered`, which may differ from `plan`'s lowering (a broken variant).
fn check_lowered(
    plan: &ExecutionPlan,
    lowered: &DevicePlan,
    count: usize,
    elem: u64,
    placement: Placement,
    replicas: u32,
    setup: Setup,
) {
    let in_place = matches!(placement, Placement::InPlace | Placement::DirectInPlace);
    let lowered = lowered.clone();
    let sizing = Sizing::new(&lowered, count as u64).unwrap();
    let direct = matches!(placement, Placement::Direct | Placement::DirectInPlace);
    assert!(!direct || sizing.split().dense_is_padded(elem), "direct outputs need chunks of whole vectors");
    let geometry = Geometry::new(plan, count).unwrap();
    let ranks = plan.ranks.len();
    let out_len = geometry.buffer_len(0, weft_plan::plan::Buffer::Output).unwrap();
    let mask = if elem == 8 { u64::MAX } else { (1u64 << (8 * elem)) - 1 };
    let poison = 0xa5a5_a5a5_a5a5_a5a5u64 & mask;
    let tables: Vec<RankTables> = (0..ranks).map(|r| rank_tables(&lowered, r).unwrap()).collect();
    let per_node = setup.gpus_per_node.unwrap_or(ranks);
    let mapped: Vec<u32> = tables
        .iter()
        .enumerate()
        .map(|(r, t)| {
            let routes = peer_routes(&lowered, r, t, |p| p / per_node == r / per_node).unwrap();
            routes.iter().filter(|(_, route)| *route == PeerRoute::Memory).fold(0, |mask, (p, _)| mask | 1 << p)
        })
        .collect();
    let e = elem as usize;
    // Buffers for the executor's capacity, as resources.rs lays them out.
    let capacity = capacity_for(count, elem);
    let flips: Vec<(u64, u64)> = (0..ranks).map(|r| stage_flips(&lowered, r, capacity)).collect();
    assert!(flips.iter().all(|f| *f == flips[0]), "{}: the ranks' halves differ", plan.name);
    let (output_flip, scratch_flip) = (flips[0].0 as usize, flips[0].1 as usize);
    let mut memory = Vec::new();
    for (r, t) in tables.iter().enumerate() {
        // In place: AllGather's input is block `r` of the output, ReduceScatter's output block
        // `r` of the input, otherwise they coincide (nccl-tests).
        let (input_at, output_at, len) = if !in_place {
            (0, count * e, (count + out_len) * e)
        } else if out_len > count {
            (r * count * e, 0, out_len * e)
        } else if out_len < count {
            (0, r * out_len * e, count * e)
        } else {
            (0, 0, count * e)
        };
        assert!(!direct || output_at.is_multiple_of(16), "a direct output starts 16-byte aligned");
        let mut lengths = buffer_lengths(&lowered, r, capacity);
        assert!(sizing.padded_lengths(&lowered.ranks[r], elem).iter().zip(&lengths).all(|(need, have)| need <= have));
        lengths[1] += output_flip as u64;
        if lowered.packets {
            lengths[2] = 2 * scratch_flip as u64;
        }
        memory.push(RankMemory {
            user: vec![0xa5u8; len],
            input_at,
            output_at,
            stages: lengths.map(|l| vec![0x5au8; l as usize]),
            input_staged: t.input_remote,
            output_staged: !direct && (t.output_remote || in_place),
            output_direct: direct,
        });
    }
    let same_flag = setup.same_flag;
    let mut model =
        Model { plan: &lowered, sizing, elem, tables, memory, scratch_flip, output_flip, launch: 0, same_flag, mapped };
    // Alternating halves: three launches on the same memory, so the third reads the half the
    // first left its packets or outputs in (packets are told apart by their flags).
    let launches = if lowered.packets || output_flip != 0 { 3 } else { 1 };
    for launch in 0..launches {
        let mut reference = Vec::new();
        for (r, m) in model.memory.iter_mut().enumerate() {
            let seed = count as u64 ^ elem ^ launch << 48;
            let input: Vec<u64> = (0..count).map(|i| value(seed, r, i) & mask).collect();
            m.user.fill(0xa5);
            for (i, v) in input.iter().enumerate() {
                let at = m.input_at + i * e;
                m.user[at..at + e].copy_from_slice(&v.to_le_bytes()[..e]);
            }
            reference.push(RankBuffers::new(input, vec![poison; out_len]));
        }
        Interpreter::new(plan).reduce_op(ReduceOp::Sum).run(&mut reference, count).unwrap();
        model.launch = launch;
        model.launch(replicas, count as u64 ^ elem ^ u64::from(replicas) << 32 ^ launch);
        for (r, want) in reference.iter().enumerate() {
            let m = &model.memory[r];
            for chunk in (0..u64::from(plan.output_chunks)).filter(|&c| model.tables[r].written[c as usize] == 1) {
                let range = sizing.extent(
                    &lowered.ranks[r],
                    weft_plan::plan::BufRef::new(weft_plan::plan::Buffer::Output, chunk as u32, 1),
                );
                for i in range.unwrap() {
                    let at = m.output_at + i as usize * e;
                    let mut b = [0u8; 8];
                    b[..e].copy_from_slice(&m.user[at..at + e]);
                    let got = u64::from_le_bytes(b);
                    let expect = want.output[i as usize] & mask;
                    assert_eq!(
                        got, expect,
                        "{} ranks {ranks} count {count} elem {elem} {placement:?} replicas {replicas} launch {launch}: rank {r} element {i} (chunk {chunk})",
                        plan.name
                    );
                }
            }
        }
    }
}

/// The shipped plans as weft-coll registers them (four instances) and at one instance.
fn plans(ranks: u32) -> Vec<ExecutionPlan> {
    use weft_plan::plans::*;
    let half = (ranks / 2).max(1);
    let mut out = Vec::new();
    for instances in [1, 4] {
        let programs = [
            ring_allreduce(ranks, instances),
            allpairs_allreduce(ranks, instances),
            hierarchical_allreduce(ranks, half, instances),
            ring_allgather(ranks, instances),
            ring_reduce_scatter(ranks, instances),
            allpairs_reduce_scatter(ranks, instances),
            two_step_alltoall(ranks, half, instances),
            direct_broadcast(ranks, 0, instances),
            ring_allreduce_ll(ranks, instances),
            allpairs_allreduce_ll(ranks, instances),
            alltonext(ranks, half, instances),
            // A local fold fused with a send (`reduce_send`).
            reduce_broadcast_allreduce(ranks, instances),
        ];
        out.extend(programs.into_iter().map(|p| p.unwrap().compile().unwrap()));
    }
    // A pipelined loop: tiles share their thread blocks and channels.
    out.push(ring_allreduce(ranks, 2).and_then(|p| p.with_pipeline(3)).unwrap().compile().unwrap());
    out.push(read_reduce_allreduce(ranks, 1, 1));
    // A channel-level program with instances and a pipelined loop.
    out.push(read_reduce_allreduce(ranks, 2, 3));
    out.push(port_allpairs_allreduce(ranks).unwrap().compile().unwrap());
    out.push(grouped_read_reduce_allreduce(ranks));
    out
}

/// A channel-level plan that reads its peers' inputs (staged by their owners) with no signal:
/// every rank folds every peer's input into its output.
fn read_reduce_allreduce(n: u32, instances: u32, tiles: u32) -> ExecutionPlan {
    use weft_plan::dsl::{Buffer, ChannelProgram, Collective};
    use weft_plan::plan::BufRef;
    let name = format!("read_reduce_allreduce_{instances}x{tiles}");
    let mut p = ChannelProgram::new(name, Collective::all_reduce(n, 1).unwrap());
    let (input, output) = (BufRef::new(Buffer::Input, 0, 1), BufRef::new(Buffer::Output, 0, 1));
    for r in 0..n {
        let channels: Vec<_> = (1..n).map(|k| p.memory_channel(r, (r + k) % n, 0).unwrap()).collect();
        let mut tb = p.threadblock(r, 0).unwrap();
        for (k, ch) in channels.iter().enumerate() {
            tb.read_reduce(ch, if k == 0 { input } else { output }, input, output);
        }
    }
    p.with_instances(instances).unwrap().with_pipeline(tiles).unwrap().compile().unwrap()
}

/// [`read_reduce_allreduce`] with every rank's fold split over a group of three thread blocks
/// (each folds its part of the chunk), then every member copies its part to scratch and back:
/// parts of odd sizes, and a whole-chunk reader is not needed.
fn grouped_read_reduce_allreduce(n: u32) -> ExecutionPlan {
    use weft_plan::dsl::{Buffer, ChannelProgram, Collective};
    use weft_plan::plan::BufRef;
    let mut p = ChannelProgram::new("grouped_read_reduce_allreduce", Collective::all_reduce(n, 1).unwrap());
    let (input, output) = (BufRef::new(Buffer::Input, 0, 1), BufRef::new(Buffer::Output, 0, 1));
    for r in 0..n {
        let staged = p.scratch(r, &[0]).unwrap();
        let channels: Vec<Vec<_>> =
            (1..n).map(|k| (0..3).map(|c| p.memory_channel(r, (r + k) % n, c).unwrap()).collect()).collect();
        let mut group = p.threadblock_group(r, &[0, 1, 2]).unwrap();
        for (k, per_member) in channels.iter().enumerate() {
            group.read_reduce(per_member, if k == 0 { input } else { output }, input, output);
        }
        group.copy(output, staged).copy(staged, output);
    }
    p.compile().unwrap()
}

/// The selftest's small odd counts (per input block) on every shipped plan, every element
/// size, out of place and in place. Count 37 at four instances made ranks' scratch layouts
/// differ in padded size for 4- and 8-byte elements (ring all-reduce at 2 ranks: 20-byte
/// chunks of classes 0..4 against 16-byte ones of classes 5..7).
#[test]
fn the_kernel_model_computes_what_the_reference_interpreter_does_at_small_counts() {
    for ranks in [2, 4] {
        for plan in plans(ranks) {
            let blocks = (plan.input_chunks / plan.size_classes) as usize;
            for per_block in [1, 5, 37] {
                for elem in [1, 2, 4, 8] {
                    for placement in [Placement::OutOfPlace, Placement::InPlace] {
                        if placement == Placement::InPlace
                            && plan.collective
                                == weft_plan::plan::CollectiveKind::Rootless(weft_types::Collective::AllToAll)
                        {
                            continue;
                        }
                        for replicas in [1, 3] {
                            check(&plan, per_block * blocks, elem, placement, replicas);
                        }
                    }
                }
            }
        }
    }
}

/// Count 150001: 8-byte chunks of 18751 and 18750 elements pad to different sizes (150016 and
/// 150000 bytes), 4-byte ones do not.
#[test]
fn the_kernel_model_computes_what_the_reference_interpreter_does_at_150001_elements() {
    for plan in plans(2)
        .into_iter()
        .filter(|p| p.collective == weft_plan::plan::CollectiveKind::Rootless(weft_types::Collective::AllReduce))
    {
        for elem in [4, 8] {
            for replicas in [1, 5] {
                check(&plan, 150_001, elem, Placement::OutOfPlace, replicas);
            }
        }
    }
}

/// The shuffled schedule exposes a missing wait: without its link waits, ring all-gather reads
/// slices its peers have not written yet.
#[test]
fn the_kernel_model_catches_a_plan_that_reads_before_the_signal() {
    let plan = weft_plan::plans::ring_allgather(4, 1).unwrap().compile().unwrap();
    let mut racy = lower(&plan).unwrap();
    for op in racy.ranks.iter_mut().flat_map(|r| r.ops.iter_mut()) {
        op.flags &= !EXEC_WAIT_LINK;
    }
    let blocks = (plan.input_chunks / plan.size_classes) as usize;
    let caught = std::panic::catch_unwind(|| {
        check_lowered(&plan, &racy, 64 * blocks, 4, Placement::OutOfPlace, 3, Setup::default())
    });
    assert!(caught.is_err(), "the model ran a plan without its waits and found nothing wrong");
    check_lowered(&plan, &lower(&plan).unwrap(), 64 * blocks, 4, Placement::OutOfPlace, 3, Setup::default());
}

/// The packet model catches a receive that does not poll its packets, one that reads them as
/// plain data, and packets whose flag does not change between launches (the third launch then
/// takes the first one's packets, left in its half, for its own).
#[test]
fn the_kernel_model_catches_unpolled_misread_and_stale_packets() {
    for program in [weft_plan::plans::ring_allreduce_ll(4, 1), weft_plan::plans::allpairs_allreduce_ll(3, 2)] {
        let plan = program.unwrap().compile().unwrap();
        let lowered = lower(&plan).unwrap();
        let blocks = (plan.input_chunks / plan.size_classes) as usize;
        let run = |l: &DevicePlan, same_flag| {
            let l = l.clone();
            let plan = plan.clone();
            std::panic::catch_unwind(move || {
                check_lowered(
                    &plan,
                    &l,
                    64 * blocks,
                    4,
                    Placement::OutOfPlace,
                    3,
                    Setup { same_flag, ..Setup::default() },
                );
            })
            .is_err()
        };
        let mut unpolled = lowered.clone();
        unpolled.ranks.iter_mut().flat_map(|r| r.ops.iter_mut()).for_each(|op| op.flags &= !EXEC_WAIT_LINK);
        let mut misread = lowered.clone();
        for op in misread.ranks.iter_mut().flat_map(|r| r.ops.iter_mut()) {
            op.inputs.iter_mut().for_each(|l| l.flags &= !EXEC_LOC_PACKETS);
            op.packets = op.packet_mask();
        }
        assert!(run(&unpolled, false), "{}: a receive that does not poll passed", plan.name);
        assert!(run(&misread, false), "{}: packets read as data passed", plan.name);
        assert!(run(&lowered, true), "{}: stale packets passed", plan.name);
        assert!(!run(&lowered, false), "{}", plan.name);
    }
}

/// Direct outputs: peers write the ranks' user outputs in the dense layout, for every shipped
/// plan at counts whose chunks are whole 16-byte vectors (the only ones that run direct), out
/// of place, and in place for the plans verified in place (the only ones that run so).
#[test]
fn the_kernel_model_computes_what_the_reference_interpreter_does_into_direct_outputs() {
    for ranks in [2, 4] {
        // Only plans whose peers write outputs run direct (LL plans never do).
        for plan in plans(ranks).into_iter().filter(|p| crate::tables::peers_touch_outputs(&lower(p).unwrap())) {
            // A custom collective (AllToNext) keeps its postcondition in its program: not in place.
            let in_place = weft_plan::dsl::Collective::from_plan(&plan)
                .is_ok_and(|c| weft_plan::passes::verify_in_place(&plan, &c).is_ok());
            let placements: &[Placement] =
                if in_place { &[Placement::Direct, Placement::DirectInPlace] } else { &[Placement::Direct] };
            let lowered = lower(&plan).unwrap();
            let blocks = (plan.input_chunks / plan.size_classes) as usize;
            for elem in [1u64, 2, 4, 8] {
                // The smallest whole-vector chunk of every class, and a ragged replica split.
                let per_block = (plan.size_classes as usize) * (16 / elem as usize);
                for count in [per_block * blocks, 37 * per_block * blocks] {
                    assert!(Sizing::new(&lowered, count as u64).unwrap().split().dense_is_padded(elem));
                    for (&placement, replicas) in placements.iter().flat_map(|p| [(p, 1), (p, 3)]) {
                        check(&plan, count, elem, placement, replicas);
                    }
                }
            }
        }
    }
}

/// The multi-node plans with ranks in separate nodes: the ranks map only their node's peers,
/// reach the others through port puts alone, and compute what the reference does.
#[test]
fn the_multinode_plans_touch_only_their_node_s_memory_and_compute_the_reference() {
    use weft_plan::plans::{hier2ph_allreduce, nvrar_allreduce};
    for (nodes, gpus) in [(2, 1), (2, 2), (4, 1), (3, 2)] {
        for program in [nvrar_allreduce(nodes, gpus), hier2ph_allreduce(nodes, gpus)] {
            let plan = program.unwrap().compile().unwrap();
            let lowered = lower(&plan).unwrap();
            let blocks = (plan.input_chunks / plan.size_classes) as usize;
            let setup = Setup { gpus_per_node: Some(gpus as usize), ..Setup::default() };
            for (per_block, elem, replicas) in [(1, 4, 1), (37, 2, 3), (5, 8, 2)] {
                check_lowered(&plan, &lowered, per_block * blocks, elem, Placement::OutOfPlace, replicas, setup);
            }
        }
    }
}

/// A plan that touches a rank of another node with its own threads is refused at set-up (the
/// model panics there), and the model's own check catches a touch the mapping does not cover.
#[test]
fn the_model_refuses_memory_access_across_nodes() {
    let plan = weft_plan::plans::nvrar_allreduce(2, 1).unwrap().compile().unwrap();
    let mut direct = lower(&plan).unwrap();
    // Rank 0's port put as a memory write into rank 1's scratch.
    let put = direct.ranks[0].ops.iter_mut().find(|o| o.flags & EXEC_PORT_PUT != 0).unwrap();
    put.flags &= !EXEC_PORT_PUT;
    let blocks = (plan.input_chunks / plan.size_classes) as usize;
    let setup = Setup { gpus_per_node: Some(1), ..Setup::default() };
    let refused = std::panic::catch_unwind(|| {
        check_lowered(&plan, &direct, 4 * blocks, 4, Placement::OutOfPlace, 1, setup);
    });
    let message = refused.unwrap_err();
    let message = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("rank 0 and peer 1 are in different nodes"), "{message}");
    // The same launch with a mapping that leaves rank 1 out.
    let lowered = lower(&plan).unwrap();
    let sizing = Sizing::new(&lowered, 4 * blocks as u64).unwrap();
    let model = Model {
        plan: &lowered,
        sizing,
        elem: 4,
        tables: Vec::new(),
        memory: Vec::new(),
        scratch_flip: 0,
        output_flip: 0,
        launch: 0,
        same_flag: false,
        mapped: vec![0, 0],
    };
    model.check_reach(0, 0, false);
    model.check_reach(0, 1, true);
    let caught = std::panic::catch_unwind(|| model.check_reach(0, 1, false));
    assert!(caught.is_err(), "the model let rank 0 touch unmapped memory");
}
