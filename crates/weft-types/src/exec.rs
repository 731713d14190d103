//! What the plan executor's interpreter kernel reads: execution-plan operations lowered to one
//! fixed-size form. Every plan operation (copy, reduce, put, get, read-reduce, send, recv and
//! the fused rcs/rrc/rrcs/rrs) is the same four phases — wait, read and fold the inputs, write
//! the result to every output, signal — so one [`ExecOp`] encodes any of them and the kernel
//! has one code path. Chunk indices, not bytes: the kernel turns chunks into byte ranges from
//! the message size, so one uploaded plan serves every size.

/// Most inputs one [`ExecOp`] folds.
pub const EXEC_MAX_INPUTS: usize = 4;
/// Most outputs one [`ExecOp`] writes.
pub const EXEC_MAX_OUTPUTS: usize = 2;
/// Words of a row-cache entry's key: what the resolved rows depend on that may change from one
/// call to the next (size, flags and replicas, the user buffers, the peers' user outputs).
pub const EXEC_ROW_CACHE_KEY_WORDS: usize = 16;
/// Bytes of one row-cache entry: its key, then the rows.
pub const EXEC_ROW_CACHE_ENTRY_BYTES: usize = EXEC_ROW_CACHE_KEY_WORDS * 8 + EXEC_RESOLVED_ROWS * 64;
/// Ranks an execution plan may have: the launch fence's peer mask is 32 bits, and the kernel
/// keeps every rank's [`ExecBuffers`] in shared memory.
pub const EXEC_MAX_RANKS: usize = 32;
/// Chunks of operations whose addresses an executor block resolves at once, in shared memory:
/// where every location of the chunk holds the block's slice (one 64-byte row per chunk).
pub const EXEC_RESOLVED_ROWS: usize = 64;
/// Bytes of shared memory an executor block holds besides its operations: the resolved rows of
/// both launch parities and every rank's [`ExecBuffers`].
pub const EXEC_STATIC_SHARED_BYTES: usize = 2 * EXEC_RESOLVED_ROWS * 64 + EXEC_MAX_RANKS * size_of::<ExecBuffers>();
/// [`ExecLoc::peer`] of this rank's own buffers.
pub const EXEC_LOCAL: u16 = u16::MAX;

/// [`ExecOp::flags`]: wait for the next inbound signal on (`wait_peer`, `wait_channel`).
pub const EXEC_WAIT_LINK: u32 = 1 << 0;
/// [`ExecOp::flags`]: wait until thread block `wait_tb` has finished its operation `wait_step`.
pub const EXEC_WAIT_TB: u32 = 1 << 1;
/// [`ExecOp::flags`]: barrier of every thread block of this rank.
pub const EXEC_BARRIER: u32 = 1 << 2;
/// [`ExecOp::flags`]: signal (`signal_peer`, `signal_channel`) after the writes.
pub const EXEC_SIGNAL: u32 = 1 << 3;
/// [`ExecOp::flags`]: publish the thread block's step after this operation (another thread
/// block of the rank waits for it, EXEC_WAIT_TB); other operations publish nothing.
pub const EXEC_PUBLISH: u32 = 1 << 4;
/// [`ExecOp::flags`]: the awaited link (`wait_peer`, `wait_channel`) is a port channel: its
/// signals are the peer's proxy's, on [`ExecContext::ports`].
pub const EXEC_WAIT_PORT: u32 = 1 << 5;
/// [`ExecOp::flags`]: the outbound link (`signal_peer`, `signal_channel`) is a port channel:
/// its signal, put and flush go through this rank's proxy.
pub const EXEC_SIGNAL_PORT: u32 = 1 << 6;
/// [`ExecOp::flags`]: a port put: thread 0 pushes a put of each row's slice of `inputs[0]` (this
/// rank's scratch) into `outputs[0]` (the peer's scratch) on the outbound port link; no thread
/// moves the data.
pub const EXEC_PORT_PUT: u32 = 1 << 7;
/// [`ExecOp::flags`]: flush the outbound port link after the operation: wait (bounded) until
/// the proxy has applied every earlier put and signal of the link.
pub const EXEC_FLUSH: u32 = 1 << 8;

/// [`ExecOp::flags`]: bits `EXEC_PART_SHIFT..+8` hold the part of every chunk the operation moves
/// (a thread-block group member), bits `EXEC_PARTS_SHIFT..+8` the part count (0: whole chunks).
pub const EXEC_PART_SHIFT: u32 = 16;
/// [`ExecOp::flags`]: where the part count starts (see [`EXEC_PART_SHIFT`]).
pub const EXEC_PARTS_SHIFT: u32 = 24;

/// [`ExecContext::flags`]: this rank's input is copied into its registered input stage first
/// (a peer reads it).
pub const EXEC_INPUT_STAGED: u32 = 1 << 0;
/// [`ExecContext::flags`]: this rank's output is assembled in its registered output stage and
/// copied out last (a peer reads or writes it, or the call is in place).
pub const EXEC_OUTPUT_STAGED: u32 = 1 << 1;
/// [`ExecContext::flags`]: every launch starts with a fence with every peer (a peer reads this
/// rank's input stage, which the launch fills first). Set alike on every rank of a plan.
pub const EXEC_ENTRY_FENCE: u32 = 1 << 2;
/// [`ExecContext::flags`]: every rank's output chunks are the user outputs themselves, which
/// the peers write through their registrations (the launch's `PeerBuffers`), in the dense
/// layout: every chunk is whole 16-byte vectors. Set alike on every rank, with
/// [`EXEC_ENTRY_FENCE`] (a peer may write a rank's user output only once that rank's stream
/// has reached the launch).
pub const EXEC_OUTPUT_DIRECT: u32 = 1 << 3;
/// [`ExecContext::flags`]: the launch ends with a fence with every peer. Cleared only with
/// [`EXEC_ENTRY_FENCE`] set, for plans where peers only write a rank's buffers and signal every
/// write (the rank's waits then cover them all); the launch after one without it fences on
/// entry. Set alike on every rank.
pub const EXEC_EXIT_FENCE: u32 = 1 << 4;
/// [`ExecContext::flags`]: links carry LL packets (the plan's protocol): a wait on a link is
/// the polling of the operation's packet input ([`EXEC_LOC_PACKETS`]), a signal is the flags of
/// its packet outputs; no semaphore is touched. Scratch has two halves (`scratch_flip`), one
/// per launch parity, and packets carry the launch's flag, so no exit fence is needed.
pub const EXEC_PACKETS: u32 = 1 << 5;
/// [`ExecLoc::flags`]: the chunks hold LL packets (16 bytes per 8 bytes of data: data word,
/// flag, data word, flag), read by polling for the launch's flag or written with it.
pub const EXEC_LOC_PACKETS: u8 = 1 << 0;
/// A thread block's step word holds `launch * EXEC_STEP_STRIDE + operations done`: a thread
/// block has fewer operations than this, and the word grows for 2^48 launches.
pub const EXEC_STEP_STRIDE: u64 = 1 << 16;

use crate::handles::WaitContext;

device_structs! {
    /// A run of `count` chunks of a buffer (`buffer`: 0 input, 1 output, 2 scratch) of this
    /// rank (`peer == EXEC_LOCAL`) or of a peer.
    struct ExecLoc align(4) size(12) {
        /// First chunk.
        chunk: u32 => "uint32_t",
        /// Chunks (at least 1).
        count: u32 => "uint32_t",
        /// Owner of the buffer: a peer rank, or EXEC_LOCAL.
        peer: u16 => "uint16_t",
        /// 0 input, 1 output, 2 scratch.
        buffer: u8 => "uint8_t",
        /// EXEC_LOC_PACKETS or zero.
        flags: u8 => "uint8_t",
    }

    /// One operation of a thread block: wait (flags), fold `inputs[0..n_inputs]` with the
    /// reduction operator (one input: a copy), write the result to `outputs[0..n_outputs]`,
    /// signal (flags). A wait is followed, and a signal preceded, by a block-wide barrier.
    struct ExecOp align(4) size(96) {
        /// EXEC_WAIT_LINK | EXEC_WAIT_TB | EXEC_BARRIER | EXEC_SIGNAL | EXEC_PUBLISH | EXEC_WAIT_PORT | EXEC_SIGNAL_PORT | EXEC_PORT_PUT | EXEC_FLUSH.
        flags: u32 => "uint32_t",
        /// Thread block waited for (EXEC_WAIT_TB).
        wait_tb: u32 => "uint32_t",
        /// Its operation index that must have finished (EXEC_WAIT_TB).
        wait_step: u32 => "uint32_t",
        /// Peer of the awaited link (EXEC_WAIT_LINK).
        wait_peer: u16 => "uint16_t",
        /// Channel of the awaited link (EXEC_WAIT_LINK).
        wait_channel: u16 => "uint16_t",
        /// Peer of the outbound link: signalled (EXEC_SIGNAL), put on (EXEC_PORT_PUT) or flushed (EXEC_FLUSH).
        signal_peer: u16 => "uint16_t",
        /// Channel of the outbound link.
        signal_channel: u16 => "uint16_t",
        /// Inputs used.
        n_inputs: u8 => "uint8_t",
        /// Outputs used.
        n_outputs: u8 => "uint8_t",
        /// Which locations hold packets ([`ExecOp::packet_mask`]): bit `i` input `i`, bit `4 + o` output `o`.
        packets: u16 => "uint16_t",
        /// Folded in order.
        inputs: [ExecLoc; 4] => "ExecLoc[4]",
        /// Each receives the result.
        outputs: [ExecLoc; 2] => "ExecLoc[2]",
    }

    /// Where one rank's executor buffers lie, as the GPU reading the table maps them: the input
    /// and output stages and the scratch, and where that rank's scratch chunks lie in its
    /// scratch (ranks' scratch layouts differ: every rank places a chunk of a peer's scratch by
    /// the peer's table). Every chunk in them starts 16-byte aligned and is padded to 16 bytes
    /// (see weft-exec's geometry), so writers never share a word.
    struct ExecBuffers align(8) size(32) {
        /// Input stage (device address).
        input: u64 => "uint64_t",
        /// Output stage (device address).
        output: u64 => "uint64_t",
        /// Scratch (device address).
        scratch: u64 => "uint64_t",
        /// `uint32_t[(scratch chunks + 1) * size_classes]` of this rank's plan, in this GPU's memory: per scratch chunk, the chunks of each class before it.
        scratch_counts: u64 => "uint64_t",
    }

    /// What the executor's interpreter kernel receives: one rank's uploaded plan, its
    /// connections and persistent sync state, and the call's buffers and size.
    struct ExecContext align(8) size(216) {
        /// `ExecOp[threadblocks * max_tb_ops]`: thread block `t` runs `ops[t * max_tb_ops..][..tb_ops[t]]` (zero past them), so a block fetches its operations without first reading where they start.
        ops: u64 => "uint64_t",
        /// `uint32_t[threadblocks]`: operations of each thread block.
        tb_ops: u64 => "uint64_t",
        /// `uint8_t[output_chunks]`: 1 where the plan writes the output chunk (the chunks copied out of the stage).
        written: u64 => "uint64_t",
        /// `ExecBuffers[ranks]`: every rank's stages, scratch and scratch layout as this GPU maps them (entry `rank`: its own).
        buffers: u64 => "uint64_t",
        /// `SemaphoreDeviceHandle[ranks * link_stride * replicas]`: entry `(peer * link_stride + channel) * replicas + r` is link (peer, channel) of replica `r`.
        links: u64 => "uint64_t",
        /// `PortChannelDeviceHandle[ranks * port_stride * replicas]`: entry `(peer * port_stride + channel) * replicas + r` is port link (peer, channel) of replica `r` (0 when the plan has no port links).
        ports: u64 => "uint64_t",
        /// `SemaphoreDeviceHandle[ranks]`: the launch fence's semaphore with each peer of `peer_mask` outside `port_peer_mask`.
        fences: u64 => "uint64_t",
        /// `uint64_t[3 * grid + 2 + threadblocks * replicas]`: per block `launches done * 2 + 1 if the last one ended without an exit fence`, per block fences done, per block grid barriers done, grid barrier arrivals, plan barrier arrivals, then per plan block `launch * EXEC_STEP_STRIDE + operations done`.
        state: u64 => "uint64_t",
        /// `EXEC_ROW_CACHE_ENTRY_BYTES[2 * threadblocks * replicas]`, zeroed at set-up: entry `2 * b + launch % 2` holds plan block `b`'s resolved rows of its last launch of that parity with the call it was made for, reused while the call is the same (a block fetches both entries before it knows its launch's parity).
        row_cache: u64 => "uint64_t",
        /// `uint32_t[threadblocks]`: rows of each thread block, the chunks its operations move ([`ExecOp::rows`]), at most EXEC_RESOLVED_ROWS + 1 (more than fit: resolved per operation).
        tb_rows: u64 => "uint64_t",
        /// The call's input buffer (device address).
        input: u64 => "uint64_t",
        /// The call's output buffer (device address).
        output: u64 => "uint64_t",
        /// Elements of one input block for this call (weft-exec's `Sizing::unit`).
        unit: u64 => "uint64_t",
        /// Bytes between the two halves of every rank's output stage: launch `n` assembles its output in half `n % 2`, so a peer's next launch may write while this rank still copies out (0: one half; the entry fence orders launches instead).
        output_flip: u64 => "uint64_t",
        /// Bytes between the two halves of every rank's scratch under EXEC_PACKETS: launch `n` uses half `n % 2`, so a peer's next launch may send while this rank still reads (0 otherwise).
        scratch_flip: u64 => "uint64_t",
        /// Bound and error record of waits inside this rank (barriers, thread-block steps).
        wait: WaitContext => "WaitContext",
        /// This rank.
        rank: u32 => "uint32_t",
        /// Ranks of the plan.
        ranks: u32 => "uint32_t",
        /// Thread blocks of the plan on this rank (the grid may be larger: extra blocks only stage).
        threadblocks: u32 => "uint32_t",
        /// Channels per peer in `links`.
        link_stride: u32 => "uint32_t",
        /// Size classes of the plan's chunks.
        size_classes: u32 => "uint32_t",
        /// Chunks of the input buffer.
        input_chunks: u32 => "uint32_t",
        /// Chunks of the output buffer.
        output_chunks: u32 => "uint32_t",
        /// EXEC_INPUT_STAGED | EXEC_OUTPUT_STAGED | EXEC_ENTRY_FENCE | EXEC_OUTPUT_DIRECT | EXEC_EXIT_FENCE | EXEC_PACKETS.
        flags: u32 => "uint32_t",
        /// Barrier operations every thread block of the plan runs per launch.
        plan_barriers: u32 => "uint32_t",
        /// Bit p set: this rank talks to peer p (the launch fence covers exactly these).
        peer_mask: u32 => "uint32_t",
        /// Replicas of every plan thread block: block `r * threadblocks + t` runs thread block `t` on slice `r` of every chunk, with its own links and steps.
        replicas: u32 => "uint32_t",
        /// Operations of the largest thread block (the stride of `ops`).
        max_tb_ops: u32 => "uint32_t",
        /// Port channels per peer in `ports` (0: the plan has no port links).
        port_stride: u32 => "uint32_t",
        /// Replicas running this launch's plan, 1..=`replicas`: replica `r` below it moves slice `r` of `active_replicas` of every chunk, the others skip the plan (a small call is not worth many slices). Every rank launches the same count; plans with plan barriers always run all replicas (the barrier counts every plan block).
        active_replicas: u32 => "uint32_t",
        /// `PortChannelDeviceHandle[ranks]`: the launch fence's port channel with each peer of `port_peer_mask` (0 when there is none).
        port_fences: u64 => "uint64_t",
        /// The peers of `peer_mask` in other nodes, reached only through port channels: the launch fence signals and waits on their `port_fences` entry instead of a `fences` semaphore, and their `buffers` entry holds only the scratch layout (no mapping; a port put's destination is an offset from the scratch base).
        port_peer_mask: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
    }
}

impl ExecOp {
    /// The inputs the operation folds: `inputs[..n_inputs]`.
    pub fn used_inputs(&self) -> &[ExecLoc] {
        &self.inputs[..usize::from(self.n_inputs)]
    }

    /// The outputs it writes: `outputs[..n_outputs]`.
    pub fn used_outputs(&self) -> &[ExecLoc] {
        &self.outputs[..usize::from(self.n_outputs)]
    }

    /// Chunks the operation moves, a row each in the kernel: its lead input's, none without
    /// inputs.
    pub fn rows(&self) -> u32 {
        if self.n_inputs == 0 { 0 } else { self.inputs[0].count }
    }

    /// The [`EXEC_LOC_PACKETS`] of its locations as [`ExecOp::packets`] holds them, so the kernel
    /// reads one field instead of looping over the locations.
    pub fn packet_mask(&self) -> u16 {
        let bit = |l: &ExecLoc| u16::from(l.flags & EXEC_LOC_PACKETS != 0);
        let inputs = self.used_inputs().iter().enumerate().map(|(i, l)| bit(l) << i);
        let outputs = self.used_outputs().iter().enumerate().map(|(o, l)| bit(l) << (EXEC_MAX_INPUTS + o));
        inputs.chain(outputs).fold(0, |mask, b| mask | b)
    }

    /// Every location it reads or writes, inputs first.
    pub fn locations(&self) -> impl Iterator<Item = &ExecLoc> {
        self.used_inputs().iter().chain(self.used_outputs())
    }
}

pub(crate) fn constants() -> Vec<(&'static str, u64, &'static str)> {
    vec![
        ("EXEC_MAX_INPUTS", EXEC_MAX_INPUTS as u64, "most inputs of one ExecOp"),
        ("EXEC_MAX_OUTPUTS", EXEC_MAX_OUTPUTS as u64, "most outputs of one ExecOp"),
        ("EXEC_RESOLVED_ROWS", EXEC_RESOLVED_ROWS as u64, "chunks an executor block resolves at once"),
        ("EXEC_MAX_RANKS", EXEC_MAX_RANKS as u64, "most ranks of an execution plan"),
        ("EXEC_ROW_CACHE_KEY_WORDS", EXEC_ROW_CACHE_KEY_WORDS as u64, "words of a row-cache entry's key"),
        ("EXEC_ROW_CACHE_ENTRY_BYTES", EXEC_ROW_CACHE_ENTRY_BYTES as u64, "bytes of a row-cache entry"),
        ("EXEC_STATIC_SHARED_BYTES", EXEC_STATIC_SHARED_BYTES as u64, "executor shared memory besides the operations"),
        ("EXEC_LOCAL", EXEC_LOCAL.into(), "ExecLoc::peer of this rank's own buffers"),
        ("EXEC_WAIT_LINK", EXEC_WAIT_LINK.into(), "ExecOp flag: wait for the next signal on a link"),
        ("EXEC_WAIT_TB", EXEC_WAIT_TB.into(), "ExecOp flag: wait for another thread block's step"),
        ("EXEC_BARRIER", EXEC_BARRIER.into(), "ExecOp flag: barrier of every thread block of the rank"),
        ("EXEC_SIGNAL", EXEC_SIGNAL.into(), "ExecOp flag: signal a link after the writes"),
        ("EXEC_PUBLISH", EXEC_PUBLISH.into(), "ExecOp flag: publish the thread block's step after the operation"),
        ("EXEC_WAIT_PORT", EXEC_WAIT_PORT.into(), "ExecOp flag: the awaited link is a port channel"),
        ("EXEC_SIGNAL_PORT", EXEC_SIGNAL_PORT.into(), "ExecOp flag: the outbound link is a port channel"),
        ("EXEC_PORT_PUT", EXEC_PORT_PUT.into(), "ExecOp flag: the proxy moves the data (a port put)"),
        ("EXEC_FLUSH", EXEC_FLUSH.into(), "ExecOp flag: flush the outbound port link after the operation"),
        ("EXEC_PART_SHIFT", EXEC_PART_SHIFT.into(), "ExecOp flags bit where the operation's part starts"),
        ("EXEC_PARTS_SHIFT", EXEC_PARTS_SHIFT.into(), "ExecOp flags bit where the part count starts (0: whole chunks)"),
        ("EXEC_INPUT_STAGED", EXEC_INPUT_STAGED.into(), "ExecContext flag: the input is copied into the input stage"),
        (
            "EXEC_OUTPUT_STAGED",
            EXEC_OUTPUT_STAGED.into(),
            "ExecContext flag: the output is copied out of the output stage",
        ),
        (
            "EXEC_ENTRY_FENCE",
            EXEC_ENTRY_FENCE.into(),
            "ExecContext flag: every launch starts with a fence with every peer",
        ),
        (
            "EXEC_OUTPUT_DIRECT",
            EXEC_OUTPUT_DIRECT.into(),
            "ExecContext flag: output chunks are the ranks' registered user outputs",
        ),
        ("EXEC_EXIT_FENCE", EXEC_EXIT_FENCE.into(), "ExecContext flag: every launch ends with a fence with every peer"),
        ("EXEC_PACKETS", EXEC_PACKETS.into(), "ExecContext flag: links carry LL packets, no semaphores"),
        ("EXEC_LOC_PACKETS", EXEC_LOC_PACKETS.into(), "ExecLoc flag: the chunks hold LL packets"),
        ("EXEC_STEP_STRIDE", EXEC_STEP_STRIDE, "a step word is launch * EXEC_STEP_STRIDE + operations done"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_array_extents_match_the_limits() {
        let op = ExecOp::default();
        assert_eq!(op.inputs.len(), EXEC_MAX_INPUTS);
        assert_eq!(op.outputs.len(), EXEC_MAX_OUTPUTS);
        let flags = [
            EXEC_WAIT_LINK,
            EXEC_WAIT_TB,
            EXEC_BARRIER,
            EXEC_SIGNAL,
            EXEC_PUBLISH,
            EXEC_WAIT_PORT,
            EXEC_SIGNAL_PORT,
            EXEC_PORT_PUT,
            EXEC_FLUSH,
        ];
        let all = flags.iter().fold(0, |a, f| a | f);
        assert_eq!(all.count_ones(), flags.len() as u32, "flags are distinct bits");
        assert!(all < 1 << EXEC_PART_SHIFT, "the flags leave the part bits free");
    }
}
