// The plan executor's interpreter kernel: one kernel runs every execution plan. Compiled once
// per (WEFT_DTYPE, WEFT_REDOP) pair like coll/reductions.cu, so folds use the same Reducer as the
// native kernels. Block t < threadblocks runs thread block t of this rank's plan; every block of
// the grid also shares the staging copies. Host side: crates/weft-exec. The chunk layout is
// weft-plan's chunk geometry, restated for the kernel in geometry.cuh (weft-exec's
// tests/geometry.rs holds the two equal).
//
// Replicas: plan thread block t runs on `replicas` blocks of the grid, block r * threadblocks + t
// moving slice r of every chunk (replica_slice in geometry.cuh: its share of the chunk's 16-byte
// vectors). A slice depends only on the chunk's length, so replica r of every rank writes and
// reads the same bytes of a chunk; each replica has its own links and its own steps, which
// order exactly those bytes. Plan barriers count every replica. A launch may run fewer
// (`active_replicas`, the same on every rank, chosen by the call's size): replica r below it
// moves slice r of active_replicas, the others skip the plan; their links and steps are left
// alone, so every link's signals and waits still pair up launch by launch.
//
// One launch:
//   1. copy-in     (all blocks) the user input into the registered input stage, when a peer
//                  reads this rank's input (EXEC_INPUT_STAGED).
//   2. entry fence (EXEC_ENTRY_FENCE: some rank's peers read its input stage, or the outputs
//                  are direct) grid barrier (only after a copy-in); block 0 signals the fence
//                  semaphore of every peer; every block waits until every peer's signal of
//                  this fence has arrived (fences are counted per block in the state, so the
//                  blocks read the semaphores' tokens without consuming them: no second grid
//                  barrier). After it, every peer has filled its input stage for this launch.
//                  Without it a peer may start launch n+1 while this rank still copies launch n
//                  out: it has passed its exit fence of launch n, so this rank's plan of launch
//                  n is done, and the output stage alternates halves by launch (output_flip),
//                  so its writes land in the half this rank copied out at launch n-1.
//   3. the plan    each plan block loads its ExecOps and every rank's ExecBuffers into shared
//                  memory and resolves where each chunk's slice lies, one thread per location
//                  (every operation's chunks up front when they fit EXEC_RESOLVED_ROWS rows, else
//                  each operation's in batches as it runs); rows resolved up front are cached
//                  per block and launch parity with the call they belong to (row_cache), and a
//                  launch of the same call copies them, fetched with the operations. Then it
//                  interprets the operations:
//                  wait (link: thread 0, semaphore_wait, acquire .sys; thread block step or
//                  barrier: thread 0 spins with ld.acquire.sys), block barrier, fold the inputs
//                  and write every output, block barrier, signal (thread 0, release .sys, so it
//                  covers the block's writes and everything the block waited for), publish the
//                  step where another thread block waits for it (EXEC_PUBLISH; st.release.sys,
//                  tagged with the launch).
//   4. exit fence  (EXEC_EXIT_FENCE) the same as 2: every peer has finished its plan, so every
//                  write into this rank's stages is visible and no peer still reads them.
//                  Skipped only by launches that fence on entry, of plans where peers only
//                  write (never read) a rank's buffers and signal every write, which the rank
//                  awaits: its plan's end then sees them all. The launch after one without it
//                  fences on entry (state[b]'s low bit), since a peer may still be in its plan.
//   5. copy-out    (all blocks) the output chunks the plan writes, from the output stage to the
//                  user output, when EXEC_OUTPUT_STAGED (after a grid barrier when there was no
//                  exit fence: packet plans in place).
// Direct outputs (EXEC_OUTPUT_DIRECT, alike on every rank): the output chunks are the ranks' user
// outputs (`outputs`, registered and mapped by weft-coll), whose chunks are then whole 16-byte
// vectors, so the padded and dense layouts coincide; no stage, no copy-out. The entry fence
// comes with it: a peer writes this rank's user output only after this rank's stream has
// reached the launch (the work before it may still read the buffer).
// LL packets (EXEC_PACKETS, the plan's protocol): a send writes its data as Ll16 packets (8
// bytes of data, each 4 with the launch's flag, in one 16-byte store) into a scratch chunk of
// the receiver, and the receive polls those packets (its EXEC_LOC_PACKETS input) instead of a
// semaphore; no semaphore is signalled or waited on. Scratch chunks take twice their padded
// bytes and scratch has two halves, half `launch % 2` for a launch, so a peer's next launch
// never writes packets this rank still reads (weft-exec's `packet_launches_chain` proves a
// sender cannot get two launches ahead, else launches fence on entry). No exit fence: a rank's
// plan ends having read every packet sent to it, and peers read nothing of it.
// Port links (EXEC_WAIT_PORT, EXEC_SIGNAL_PORT): the plan's PortChannel operations, one port
// channel per link and replica (ExecContext::ports) whose FIFO leads to this rank's proxy. A
// port put (EXEC_PORT_PUT) is thread 0 pushing one put per row of its slice, from this rank's
// scratch into the peer's (offsets from the scratch bases, the memories the proxy registered; a
// peer in another node is not mapped, its base here is 0, and the fence with it is a port
// channel of its own, port_fences);
// the block barrier that ends the previous operation orders the other threads' writes of the
// source before the push; a send's signal rides in its last put's command. Signals, flushes
// (EXEC_FLUSH) and waits are port_signal, port_flush and port_wait by thread 0, each bounded
// (WaitContext). The plan flushes every put before its thread block ends.
// Every wait is bounded (WaitContext): on expiry the error record names rank, peer and wait,
// and every block gives up promptly (Spin sees the record).
//
// Stages and scratch are registered buffers laid out "padded": every chunk starts 16-byte
// aligned and owns its bytes up to the next multiple of 16. A scratch chunk lies where its
// owner's table puts it (ranks' scratch layouts differ), whichever rank computes the address. Outputs there are written in whole
// 16-byte vectors, so no two writers (threads, blocks or ranks) ever store into one word: a
// sub-word store into a peer over NVLink can become a read-modify-write of its word. User
// buffers keep the dense layout and are only touched by this GPU, with exact stores.
#include "weft/collective.cuh"
#include "weft/elementwise.cuh"
#include "weft/packet.cuh"
#include "weft/port_channel.cuh"
#include "geometry.cuh"
#include "weft/generated/kernels/exec.cuh"  // the prototype the definition must match

using namespace weft;

constexpr DataType kType = static_cast<DataType>(WEFT_DTYPE);
constexpr ReduceOp kOp = static_cast<ReduceOp>(WEFT_REDOP);
using Fold = Reducer<kType, kOp, 16>;
using Acc = typename Element<kType>::Acc;
constexpr uint64_t kElem = sizeof(typename Element<kType>::T);

namespace {

/// Where chunks lie for this call (geometry.cuh: weft-plan's chunk geometry in closed form).
using Geometry = exec::ChunkGeometry<kElem>;

/// A chunk's address and whether its buffer has the padded layout.
struct Piece {
  char* at;
  bool padded;
};

/// The rank owning `loc`'s buffer.
__device__ __forceinline__ uint32_t owner_rank(const ExecContext& c, const ExecLoc& loc) {
  return loc.peer == EXEC_LOCAL ? c.rank : loc.peer;
}

/// Every rank's buffers as this GPU maps them (ExecContext::buffers), copied into shared memory
/// with a plan block's operations: every address the block resolves reads them.
__shared__ ExecBuffers rank_buffers[EXEC_MAX_RANKS];

/// The buffers of `loc`'s owner.
__device__ __forceinline__ const ExecBuffers& owner(const ExecContext& c, const ExecLoc& loc) {
  return rank_buffers[owner_rank(c, loc)];
}

/// Bytes of chunk `chunk` of `loc`'s buffer.
__device__ __forceinline__ uint64_t chunk_bytes(const ExecContext& c, const Geometry& g, const ExecLoc& loc,
                                                uint64_t chunk) {
  return g.class_bytes(g.class_of(loc.buffer, reinterpret_cast<const uint32_t*>(owner(c, loc).scratch_counts), chunk));
}

/// This launch's half of a rank's output stage.
__device__ __forceinline__ char* output_stage(const ExecBuffers& b, uint64_t shift) {
  return reinterpret_cast<char*>(b.output + shift);
}

/// Which part of the plan one block runs in this launch, and where its outputs go.
struct Role {
  uint32_t replica;
  /// Bytes from an output stage's base to this launch's half.
  uint64_t output_shift;
  /// Every rank's user output (EXEC_OUTPUT_DIRECT), else all zero.
  const PeerBuffers* outputs;
  /// Bytes from a scratch's base to this launch's half (packets), else 0.
  uint64_t scratch_shift;
  /// The launch's packet flag: never 0 (what fresh scratch holds) and different from the flag
  /// of the launch before last, whose packets the same half holds.
  uint32_t flag;
};

__device__ __forceinline__ Piece locate(const ExecContext& c, const Geometry& g, const Role& role, const ExecLoc& loc,
                                        uint64_t chunk) {
  const bool local = loc.peer == EXEC_LOCAL;
  const ExecBuffers& b = owner(c, loc);
  if (loc.buffer == 0) {
    if (local && (c.flags & EXEC_INPUT_STAGED) == 0) {
      return {reinterpret_cast<char*>(c.input + g.dense(chunk) * kElem), false};
    }
    return {reinterpret_cast<char*>(b.input + g.padded_dense(chunk)), true};
  }
  if (loc.buffer == 1) {
    if ((c.flags & EXEC_OUTPUT_DIRECT) != 0) {
      // The host runs direct only with at most MAX_RANKS ranks; past it, a null address faults
      // rather than writing into another rank's output.
      return {coll::peer_buffer(*role.outputs, owner_rank(c, loc)) + g.dense(chunk) * kElem, true};
    }
    if (local && (c.flags & EXEC_OUTPUT_STAGED) == 0) {
      return {reinterpret_cast<char*>(c.output + g.dense(chunk) * kElem), false};
    }
    return {output_stage(b, role.output_shift) + g.padded_dense(chunk), true};
  }
  const uint32_t* counts = reinterpret_cast<const uint32_t*>(b.scratch_counts);
  return {reinterpret_cast<char*>(b.scratch + role.scratch_shift + g.padded_scratch(counts, chunk)), true};
}

/// The `n` (1..16) bytes at `p`, any alignment, zero-padded to 16.
__device__ __forceinline__ void load16(const char* p, uint32_t n, uint32_t (&w)[4]) {
  if (n == 16) {
    const uint4 v = coll::load16_any(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    detail::load_words<4>(p, n, w);
  }
}

/// How `fold` reads its inputs and writes its outputs.
struct FoldForm {
  /// Bit i: input i holds packets (two Ll16 packets per 16 data bytes, polled for `flag`).
  uint32_t packet_in;
  /// Bit o: output o receives packets.
  uint32_t packet_out;
  /// Bit o: output o is left alone (a copy onto itself).
  uint32_t skip_out;
  uint32_t flag;
  /// Bound of the packet polls, naming the peer that sends them.
  const WaitContext* wait;
};

/// The 16 data bytes whose packets are at `p`, once both carry `flag`. False on timeout.
__device__ __forceinline__ bool poll16(const char* p, uint32_t flag, const WaitContext& ctx, uint32_t (&w)[4]) {
  const Ll16Packet* packets = reinterpret_cast<const Ll16Packet*>(p);
  for (int half = 0; half < 2; ++half) {
    uint32_t d[2];
    if (!poll_packet<Ll16>(packets + half, flag, d, ctx)) return false;
    w[2 * half] = d[0], w[2 * half + 1] = d[1];
  }
  return true;
}

static_assert(EXEC_MAX_OUTPUTS == 2, "fold keeps every output in a register");

/// Folds `bytes` of `nin` inputs element-wise in order (one input: a bitwise copy) and writes the
/// result to every output but the skipped: whole 16-byte vectors into padded outputs (`padded[o]`
/// non-zero), exactly `bytes` into the others, two packets per vector into packet outputs
/// (packet locations advance twice as fast). Called by: `nthreads` threads, each with its own
/// `tid`. False when a packet poll timed out.
__device__ __forceinline__ bool fold(const char* const* in, uint32_t nin, char* const* out, const uint8_t* padded,
                                     uint32_t nout, uint64_t bytes, uint64_t tid, uint64_t nthreads,
                                     const FoldForm& form) {
  // The first two inputs and the outputs in registers: the callers' arrays may live in shared
  // memory, which the stores below could alias as far as the compiler knows.
  const char* const in0 = in[0];
  const char* const in1 = nin > 1 ? in[1] : nullptr;
  char* const out0 = nout > 0 ? out[0] : nullptr;
  char* const out1 = nout > 1 ? out[1] : nullptr;
  const uint32_t padded_out = (nout > 0 && padded[0] != 0 ? 1u : 0u) | (nout > 1 && padded[1] != 0 ? 2u : 0u);
  auto load = [&](uint32_t i, uint64_t at, uint32_t n, uint32_t(&w)[4]) {
    const char* p = i == 0 ? in0 : i == 1 ? in1 : in[i];
    if (((form.packet_in >> i) & 1u) == 0) {
      load16(p + at, n, w);
      return true;
    }
    return poll16(p + 2 * at, form.flag, *form.wait, w);
  };
  for (uint64_t at = tid * 16; at < bytes; at += nthreads * 16) {
    const uint32_t n = static_cast<uint32_t>(coll::min_u64(16, bytes - at));
    uint32_t w[4];
    if (!load(0, at, n, w)) return false;
    if (nin > 1) {
      Acc acc[Fold::kElems];
      Fold::start(acc, w);
      for (uint32_t i = 1; i < nin; ++i) {
        uint32_t x[4];
        if (!load(i, at, n, x)) return false;
        Fold::fold(acc, x);
      }
      Fold::finish(acc, Finish<kType, kOp>::partial(), w);
    }
    for (uint32_t o = 0; o < nout; ++o) {
      if (((form.skip_out >> o) & 1u) != 0) continue;
      char* const dst = o == 0 ? out0 : out1;
      if (((form.packet_out >> o) & 1u) != 0) {
        Ll16Packet* p = reinterpret_cast<Ll16Packet*>(dst + 2 * at);
        Ll16::write(p, {w[0], w[1]}, form.flag);
        Ll16::write(p + 1, {w[2], w[3]}, form.flag);
      } else if (((padded_out >> o) & 1u) != 0) {
        *reinterpret_cast<uint4*>(dst + at) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        detail::store_words<4>(dst + at, n, w);
      }
    }
  }
  return true;
}

/// The bytes [begin, end) of a `bytes`-long chunk this block moves for `op`: its part of the chunk
/// (a thread-block group member, the part count in the flags' top byte; the whole chunk without
/// one), then its replica's slice of that (geometry.cuh's op_slice).
__device__ __forceinline__ void op_slice(const ExecOp& op, uint64_t bytes, uint32_t r, uint32_t n, uint64_t& begin,
                                         uint64_t& end) {
  // The part is decoded only when there is one (as in the code the header replaced: ptxas
  // allocates the same registers).
  exec::op_slice(bytes, op.flags >> EXEC_PARTS_SHIFT, [&op] { return (op.flags >> EXEC_PART_SHIFT) & 0xffu; }, r, n,
                 begin, end);
}

/// One chunk of an operation as this block moves it: where each of its locations (inputs, then
/// outputs) holds the block's slice, whether that location is padded, and the slice's bytes.
/// Resolved in parallel, one thread per location, into shared memory: the chunk arithmetic is
/// a long dependent chain per address, and computed by every thread for every location it cost
/// about 1.5 µs per operation (clock64 stamps, ranks sharing one H200).
struct alignas(16) Row {  // copied as 16-byte vectors (load_cached_rows)
  char* at[EXEC_MAX_INPUTS + EXEC_MAX_OUTPUTS];
  uint64_t bytes;
  uint8_t padded[EXEC_MAX_INPUTS + EXEC_MAX_OUTPUTS];
  uint16_t reserved;
};
static_assert(2 * sizeof(Row) * EXEC_RESOLVED_ROWS + sizeof(ExecBuffers) * EXEC_MAX_RANKS == EXEC_STATIC_SHARED_BYTES,
              "the rows and the ranks' buffers fill the shared memory reserved");
constexpr uint32_t kLocations = EXEC_MAX_INPUTS + EXEC_MAX_OUTPUTS;

/// Rows resolved up front, half `launch % 2` for a launch (a block fetches both parities' cached
/// rows before it knows its launch's parity); rows resolved per operation use half 0.
__shared__ Row resolved[2 * EXEC_RESOLVED_ROWS];

/// Chunks operation `op` moves (its rows): those of its lead input, none without inputs.
__device__ __forceinline__ uint32_t rows_of(const ExecOp& op) { return op.n_inputs != 0 ? op.inputs[0].count : 0; }

/// Bytes of a location per data byte: packets take two.
__device__ __forceinline__ uint64_t scale(const ExecLoc& l) { return (l.flags & EXEC_LOC_PACKETS) != 0 ? 2 : 1; }

/// Resolves `n` rows into out[0, n): from chunk `k0` of operation `first` on, through the
/// operations after it. A replica's slice depends only on its lead chunk's length, so replica
/// r of every rank addresses the same bytes of a chunk (replica_slice). Called by: every thread
/// of the block; the caller synchronises before the rows are read.
__device__ __forceinline__ void resolve_rows(const ExecContext& c, const Geometry& g, const Role& role,
                                             const ExecOp* ops, uint32_t first, uint32_t k0, uint32_t n, Row* out) {
  for (uint32_t t = threadIdx.x; t < n * kLocations; t += blockDim.x) {
    const uint32_t row = t / kLocations, j = t % kLocations;
    uint32_t s = first;
    uint32_t k = k0 + row;
    while (k >= rows_of(ops[s])) k -= rows_of(ops[s++]);
    const ExecOp& op = ops[s];
    if (j >= static_cast<uint32_t>(op.n_inputs) + op.n_outputs) continue;
    const ExecLoc& lead = op.inputs[0];
    const ExecLoc& l = j < op.n_inputs ? op.inputs[j] : op.outputs[j - op.n_inputs];
    uint64_t begin, end;
    op_slice(op, chunk_bytes(c, g, lead, static_cast<uint64_t>(lead.chunk) + k), role.replica, c.active_replicas, begin,
             end);
    const Piece p = locate(c, g, role, l, static_cast<uint64_t>(l.chunk) + k);
    Row& r = out[row];
    r.at[j] = p.at + begin * scale(l);
    r.padded[j] = p.padded ? 1 : 0;
    if (j == 0) r.bytes = end - begin;
  }
}

/// A plan block's resolved rows of an earlier launch of one parity (ExecContext::row_cache),
/// with the call they were resolved for.
struct alignas(16) RowCacheEntry {
  uint64_t key[EXEC_ROW_CACHE_KEY_WORDS];
  Row rows[EXEC_RESOLVED_ROWS];
};
static_assert(sizeof(RowCacheEntry) == EXEC_ROW_CACHE_ENTRY_BYTES, "weft-types sizes the row cache");
constexpr uint32_t kOutputSlots = sizeof(PeerBuffers) / sizeof(uint64_t);
static_assert(EXEC_ROW_CACHE_KEY_WORDS >= 4 + kOutputSlots, "the key holds the call and every rank's output");

/// Word `i` of the key of this launch's rows: everything they depend on that a call may change
/// (the launch's parity picks the entry). Word 1 is never 0, so a zeroed entry matches nothing.
__device__ __forceinline__ uint64_t row_key(const ExecContext& c, const PeerBuffers& outputs, uint32_t i) {
  switch (i) {
    case 0: return c.unit;
    // The element size too: a call of another type with the same count, buffers and flags
    // places its chunks elsewhere (this kernel's rows must not serve another type's kernel).
    case 1: return uint64_t{1} << 63 | kElem << 48 | static_cast<uint64_t>(c.active_replicas) << 32 | c.flags;
    case 2: return c.input;
    case 3: return c.output;
    default:
      return i - 4 < kOutputSlots && (c.flags & EXEC_OUTPUT_DIRECT) != 0 ? outputs.ptr[i - 4] : 0;
  }
}

/// This block's row-cache entry for launches of parity `parity`.
__device__ __forceinline__ RowCacheEntry& cache_entry(const ExecContext& c, uint32_t parity) {
  return reinterpret_cast<RowCacheEntry*>(c.row_cache)[2 * blockIdx.x + parity];
}

/// Copies both parities' cached rows into `resolved` (all EXEC_RESOLVED_ROWS of each: the block
/// may not know yet how many it has) and compares this thread's word of the key of parity
/// `launch % 2`'s entry with the call's: true when it matches, or the thread compares none.
/// Needs neither the operations nor the launch's parity to start its loads, so they overlap
/// with the fetch of both. Called by: every thread of a plan block, which has at least
/// 2 * EXEC_ROW_CACHE_KEY_WORDS threads (weft-exec asserts it); the block's barrier-and of the
/// results says whether the copy of the launch's parity holds.
__device__ __forceinline__ bool load_cached_rows(const ExecContext& c, const PeerBuffers& outputs,
                                                 const uint64_t& launch) {
  constexpr uint32_t kVectors = EXEC_RESOLVED_ROWS * sizeof(Row) / 16;
  const uint32_t t = threadIdx.x;
  for (uint32_t i = t; i < 2 * kVectors; i += blockDim.x) {
    const uint4* cached = reinterpret_cast<const uint4*>(cache_entry(c, i / kVectors).rows);
    reinterpret_cast<uint4*>(resolved)[i] = cached[i % kVectors];
  }
  const uint32_t parity = t / EXEC_ROW_CACHE_KEY_WORDS, word = t % EXEC_ROW_CACHE_KEY_WORDS;
  if (parity > 1) return true;
  const uint64_t key = cache_entry(c, parity).key[word];
  return parity != (launch & 1) || key == row_key(c, outputs, word);
}

/// Resolves every operation's rows, `rows` in all, into `out` and caches them for launches of
/// parity `parity` with the call's key. Called by: every thread of a plan block, once the
/// operations are in shared memory; ends with a block barrier.
__device__ __forceinline__ void resolve_and_cache(const ExecContext& c, const Geometry& g, const Role& role,
                                                  const PeerBuffers& outputs, const ExecOp* ops, uint32_t rows,
                                                  uint32_t parity, Row* out) {
  RowCacheEntry& entry = cache_entry(c, parity);
  resolve_rows(c, g, role, ops, 0, 0, rows, out);
  __syncthreads();
  constexpr uint32_t kVectors = sizeof(Row) / 16;
  uint4* cache = reinterpret_cast<uint4*>(entry.rows);
  const uint4* shared = reinterpret_cast<const uint4*>(out);
  for (uint32_t i = threadIdx.x; i < rows * kVectors; i += blockDim.x) cache[i] = shared[i];
  if (threadIdx.x < EXEC_ROW_CACHE_KEY_WORDS) entry.key[threadIdx.x] = row_key(c, outputs, threadIdx.x);
}

/// Port link (`peer`, `channel`) of this block's replica.
__device__ __forceinline__ const PortChannelDeviceHandle& port_link(const ExecContext& c, const Role& role,
                                                                    uint16_t peer, uint16_t channel) {
  const PortChannelDeviceHandle* ports = reinterpret_cast<const PortChannelDeviceHandle*>(c.ports);
  return ports[(static_cast<uint64_t>(peer) * c.port_stride + channel) * c.replicas + role.replica];
}

/// A port put's data phase (EXEC_PORT_PUT): thread 0 pushes a put of each row's slice from this
/// rank's scratch (input 0) into the peer's (output 0) on the outbound port link; the proxy
/// moves the bytes. Offsets are from the scratch bases (below 4 GiB: the proxy registered
/// them). With `last` (the operation's last rows) it also pushes the operation's signal
/// (EXEC_SIGNAL), in the last non-empty put's command when there is one: every command costs the
/// proxy's thread several µs of driver calls. Called by: the block. False (thread 0) when the
/// proxy stopped or a push timed out.
__device__ __forceinline__ bool push_rows(const ExecContext& c, const Role& role, const ExecOp& op, const Row* rows,
                                          uint32_t n, bool last) {
  if (threadIdx.x != 0) return true;
  const PortChannelDeviceHandle& ch = port_link(c, role, op.signal_peer, op.signal_channel);
  const uint64_t src_base = rank_buffers[c.rank].scratch + role.scratch_shift;
  const uint64_t dst_base = owner(c, op.outputs[0]).scratch + role.scratch_shift;
  bool signal = last && (op.flags & EXEC_SIGNAL) != 0;
  uint32_t end = n;
  while (end > 0 && rows[end - 1].bytes == 0) --end;
  for (uint32_t r = 0; r < end; ++r) {
    const Row& row = rows[r];
    if (row.bytes == 0) continue;
    const uint32_t src = static_cast<uint32_t>(reinterpret_cast<uint64_t>(row.at[0]) - src_base);
    const uint32_t dst = static_cast<uint32_t>(reinterpret_cast<uint64_t>(row.at[op.n_inputs]) - dst_base);
    const uint32_t bytes = static_cast<uint32_t>(row.bytes);
    const bool with_signal = signal && r + 1 == end;
    if (!(with_signal ? port_put_with_signal(ch, dst, src, bytes) : port_put(ch, dst, src, bytes))) return false;
    if (with_signal) signal = false;
  }
  return !signal || port_signal(ch);
}

/// The data phase of operation `op` over its resolved rows `rows[0, n)`: each row's slice of
/// every input folded into every output; packet locations (EXEC_LOC_PACKETS) hold the slice at
/// twice its offset; a port put's rows go to the proxy (push_rows; `last`: these are the
/// operation's last rows). Called by: the block. False when a packet poll timed out or a push
/// failed.
__device__ __forceinline__ bool move_rows(const ExecContext& c, const Role& role, const ExecOp& op, const Row* rows,
                                          uint32_t n, bool last) {
  if ((op.flags & EXEC_PORT_PUT) != 0) return push_rows(c, role, op, rows, n, last);
  WaitContext wait = c.wait;
  wait.peer = op.wait_peer;
  FoldForm form{op.packets & ((1u << EXEC_MAX_INPUTS) - 1), static_cast<uint32_t>(op.packets) >> EXEC_MAX_INPUTS, 0,
                role.flag, &wait};
  // A copy onto itself (in place, direct: all-gather's own block) moves nothing: skipped.
  const bool plain_copy = op.n_inputs == 1 && form.packet_in == 0;
  for (uint32_t r = 0; r < n; ++r) {
    const Row& row = rows[r];
    if (row.bytes == 0) continue;
    char* const* out = row.at + op.n_inputs;
    form.skip_out = 0;
    for (uint32_t o = 0; plain_copy && o < op.n_outputs; ++o) {
      if (((form.packet_out >> o) & 1u) == 0 && out[o] == row.at[0]) form.skip_out |= 1u << o;
    }
    if (form.skip_out == (1u << op.n_outputs) - 1) continue;
    if (!fold(row.at, op.n_inputs, out, row.padded + op.n_inputs, op.n_outputs, row.bytes, threadIdx.x, blockDim.x,
              form)) {
      return false;
    }
  }
  return true;
}

/// The data phase of operation `s` when the block's rows did not all fit up front: its chunks
/// resolved and moved EXEC_RESOLVED_ROWS at a time. Called by: the block (every thread reaches
/// every barrier, even after a failed poll). False when a packet poll timed out.
__device__ __forceinline__ bool move_in_batches(const ExecContext& c, const Geometry& g, const Role& role,
                                                const ExecOp* ops, uint32_t s) {
  bool moved = true;
  const uint32_t rows = rows_of(ops[s]);
  for (uint32_t k0 = 0; k0 < rows; k0 += EXEC_RESOLVED_ROWS) {
    const uint32_t n = static_cast<uint32_t>(coll::min_u64(EXEC_RESOLVED_ROWS, rows - k0));
    if (k0 != 0) __syncthreads();  // the previous batch is moved
    resolve_rows(c, g, role, ops, s, k0, n, resolved);
    __syncthreads();
    moved = moved && move_rows(c, role, ops[s], resolved, n, k0 + n == rows);
  }
  return moved;
}

/// Barrier of `arrivals`' participants: each adds one (release) and waits for `target`
/// arrivals in all (acquire). Called by: every thread of each participating block.
__device__ __forceinline__ bool block_arrive(uint64_t* arrivals, uint64_t target, const WaitContext& ctx) {
  __syncthreads();
  bool ok = true;
  if (threadIdx.x == 0) {
    ptx::red_add_release_sys(arrivals, 1);
    ok = wait_at_least(arrivals, target, ctx, WaitOp::ExecBarrier);
  }
  return __syncthreads_and(ok);
}

/// Fence `number` (counted over the executor's launches) with every peer the plan talks to
/// (one thread per peer): block 0 signals (release .sys), then every block waits until the
/// peer's token holds that many signals (acquire .sys). The token is read, not consumed, so
/// every block can wait on it. A peer in another node (port_peer_mask) has a port channel
/// for it: the signal goes through the proxy, which stores the count in the peer's token; the
/// plan flushed every put into the peer before its thread blocks ended, so the signal follows
/// them. Called by: every thread of every block.
__device__ __forceinline__ bool fence(const ExecContext& c, uint64_t number) {
  bool ok = true;
  const uint32_t t = threadIdx.x;
  if (t < c.ranks && ((c.peer_mask >> t) & 1u) != 0) {
    const bool over_port = ((c.port_peer_mask >> t) & 1u) != 0;
    const SemaphoreDeviceHandle& s =
        over_port ? reinterpret_cast<const PortChannelDeviceHandle*>(c.port_fences)[t].semaphore
                  : reinterpret_cast<const SemaphoreDeviceHandle*>(c.fences)[t];
    if (blockIdx.x == 0) {
      if (over_port) {
        ok = port_signal(reinterpret_cast<const PortChannelDeviceHandle*>(c.port_fences)[t]);
      } else {
        semaphore_signal(s);
      }
    }
    ok = ok && wait_at_least(reinterpret_cast<const uint64_t*>(s.inbound), number, s.wait, WaitOp::SemaphoreWait);
  }
  return __syncthreads_and(ok);
}

/// What every operation of a plan block reads, and how far the block has come.
struct PlanBlock {
  const ExecContext& c;
  const Geometry& g;
  const Role& role;
  /// The block's operations, in shared memory (or the uploaded table in a specialized kernel):
  /// resolve_rows reads them.
  const ExecOp* ops;
  /// The rows of every operation, resolved before the plan, in order (else null: each
  /// operation resolves its own).
  const Row* up_front;
  uint64_t launch;
  uint64_t* plan_arrivals;
  uint64_t* progress;
  /// This replica's steps: thread block t's replica r publishes at progress[r * threadblocks + t].
  const uint64_t* steps;
  uint64_t plan_blocks;
  bool packets;
  /// Plan barriers passed and rows consumed so far.
  uint64_t barriers;
  uint32_t row;
  /// Thread 0: every port signal and flush so far succeeded (checked at the next operation).
  bool pushed;

  __device__ __forceinline__ const SemaphoreDeviceHandle& link(uint16_t peer, uint16_t channel) const {
    const SemaphoreDeviceHandle* links = reinterpret_cast<const SemaphoreDeviceHandle*>(c.links);
    return links[(static_cast<uint64_t>(peer) * c.link_stride + channel) * c.replicas + role.replica];
  }
};

/// Operation `s` of the block, `op` (the block's `ops[s]`; a compile-time constant in a
/// specialized kernel, which folds every flag test below): wait, data phase, signal, publish.
/// Called by: every thread of a plan block.
__device__ __forceinline__ bool run_op(PlanBlock& p, const ExecOp& op, uint32_t s) {
  const ExecContext& c = p.c;
  bool ok = p.pushed;
  if (threadIdx.x == 0 && ok) {
    // Under packets the link's wait is the polling of the packet input.
    if ((op.flags & EXEC_WAIT_PORT) != 0) {
      ok = port_wait(port_link(c, p.role, op.wait_peer, op.wait_channel));
    } else if ((op.flags & EXEC_WAIT_LINK) != 0 && !p.packets) {
      ok = semaphore_wait(p.link(op.wait_peer, op.wait_channel));
    }
    if (ok && (op.flags & EXEC_WAIT_TB) != 0) {
      const uint64_t want = p.launch * EXEC_STEP_STRIDE + op.wait_step + 1;
      ok = wait_at_least(p.steps + op.wait_tb, want, c.wait, WaitOp::ExecStep);
    }
    if (ok && (op.flags & EXEC_BARRIER) != 0) {
      // Every earlier write of the block is ordered before this by the barrier that ended
      // the previous operation.
      ptx::red_add_release_sys(p.plan_arrivals, 1);
      const uint64_t want = (p.launch * c.plan_barriers + p.barriers + 1) * p.plan_blocks;
      ok = wait_at_least(p.plan_arrivals, want, c.wait, WaitOp::ExecBarrier);
    }
  }
  if ((op.flags & EXEC_BARRIER) != 0) ++p.barriers;
  if (!__syncthreads_and(ok)) return false;
  bool moved = true;
  if (p.up_front != nullptr) {
    moved = move_rows(c, p.role, op, p.up_front + p.row, rows_of(op), true);
    p.row += rows_of(op);
  } else {
    moved = move_in_batches(c, p.g, p.role, p.ops, s);
  }
  if (!__syncthreads_and(moved)) return false;
  if (threadIdx.x == 0) {
    if ((op.flags & EXEC_SIGNAL_PORT) != 0) {
      // A port put's signal went with its rows (push_rows).
      const PortChannelDeviceHandle& ch = port_link(c, p.role, op.signal_peer, op.signal_channel);
      if ((op.flags & (EXEC_SIGNAL | EXEC_PORT_PUT)) == EXEC_SIGNAL) p.pushed = port_signal(ch);
      if ((op.flags & EXEC_FLUSH) != 0) p.pushed = p.pushed && port_flush(ch);
    } else if ((op.flags & EXEC_SIGNAL) != 0 && !p.packets) {
      semaphore_signal(p.link(op.signal_peer, op.signal_channel));
    }
    // Only steps another thread block waits for (a .sys release is not free).
    if ((op.flags & EXEC_PUBLISH) != 0) {
      ptx::st_release_sys(p.progress + blockIdx.x, p.launch * EXEC_STEP_STRIDE + s + 1);
    }
  }
  return true;
}

/// The block's end: a failed last port signal or flush (plans without port links have none).
__device__ __forceinline__ bool finish_plan(const PlanBlock& p) {
  return p.c.port_stride == 0 || __syncthreads_and(p.pushed);
}

#ifdef WEFT_STATIC_OPS
// A specialized kernel (weft-exec's specialize.rs): this rank's operations are compiled in, so
// every operation is straight-line code for exactly what it does, with its flags, counts and
// links constants, and so is the plan's protocol (WEFT_STATIC_PACKETS). The operations uploaded
// for the call are the same (resolve_rows reads them there: no copy into shared memory).
constexpr ExecOp kStaticOps[] = WEFT_STATIC_OPS;
/// Thread block t runs kStaticOps[kStaticStarts[t], kStaticStarts[t + 1]).
constexpr uint32_t kStaticStarts[] = WEFT_STATIC_STARTS;
constexpr uint32_t kStaticBlocks = sizeof(kStaticStarts) / sizeof(kStaticStarts[0]) - 1;

/// Operations `S` onwards of thread block `Tb`.
template <uint32_t Tb, uint32_t S>
__device__ __forceinline__ bool run_static_ops(PlanBlock& p) {
  if constexpr (kStaticStarts[Tb] + S == kStaticStarts[Tb + 1]) {
    return finish_plan(p);
  } else {
    constexpr ExecOp op = kStaticOps[kStaticStarts[Tb] + S];
    if (!run_op(p, op, S)) return false;
    return run_static_ops<Tb, S + 1>(p);
  }
}

/// Thread block `tb`'s operations, found from `Tb` on.
template <uint32_t Tb>
__device__ __forceinline__ bool run_static_block(PlanBlock& p, uint32_t tb) {
  if constexpr (Tb == kStaticBlocks) {
    return false;  // the host launches a specialized kernel only with its own plan
  } else {
    if (tb == Tb) return run_static_ops<Tb, 0>(p);
    return run_static_block<Tb + 1>(p, tb);
  }
}
#endif

/// Runs this block's `nops` operations (in shared memory) as replica `role.replica` of its
/// thread block `tb`; `up_front`: the rows of every operation resolved before the plan, in
/// order (else null: each operation resolves its own). Called by: every thread of a plan block.
__device__ __forceinline__ bool run_plan(const ExecContext& c, const Geometry& g, const Role& role, const ExecOp* ops,
                                         uint32_t tb, uint32_t nops, const Row* up_front, uint64_t launch,
                                         uint64_t* plan_arrivals, uint64_t* progress) {
  PlanBlock p{c,
              g,
              role,
              ops,
              up_front,
              launch,
              plan_arrivals,
              progress,
              progress + static_cast<uint64_t>(role.replica) * c.threadblocks,
              // Plans with plan barriers run every replica in every launch (weft-exec).
              static_cast<uint64_t>(c.threadblocks) * c.replicas,
#ifdef WEFT_STATIC_OPS
              WEFT_STATIC_PACKETS != 0,
#else
              (c.flags & EXEC_PACKETS) != 0,
#endif
              0,
              0,
              true};
#ifdef WEFT_STATIC_OPS
  (void)nops;
  return run_static_block<0>(p, tb);
#else
  (void)tb;
  for (uint32_t s = 0; s < nops; ++s) {
    if (!run_op(p, ops[s], s)) return false;
  }
  return finish_plan(p);
#endif
}

/// Copies every chunk of a dense user buffer to or from its padded stage with every thread of
/// the grid; `written` (when set) selects the chunks.
__device__ __forceinline__ void stage(const Geometry& g, uint32_t chunks, char* user, char* staged, bool into_stage,
                                      const uint8_t* written) {
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint32_t i = 0; i < chunks; ++i) {
    if (written != nullptr && written[i] == 0) continue;
    const uint64_t bytes = g.class_bytes(g.class_of(0, nullptr, i));
    char* dense = user + g.dense(i) * kElem;
    char* padded = staged + g.padded_dense(i);
    const char* in[1] = {into_stage ? dense : padded};
    char* out[1] = {into_stage ? padded : dense};
    const uint8_t layout[1] = {into_stage ? uint8_t{1} : uint8_t{0}};
    fold(in, 1, out, layout, 1, bytes, tid, nthreads, FoldForm{});
  }
}

}  // namespace

/// One launch of this rank's plan (see the top of the file). Dynamic shared memory: the
/// largest thread block's operations (none in a specialized kernel).
extern "C" __global__ void __launch_bounds__(1024) weft_execute(ExecContext c, const __grid_constant__ PeerBuffers outputs) {
  extern __shared__ ExecOp shared_ops[];
  const uint32_t b = blockIdx.x;
  uint64_t* state = reinterpret_cast<uint64_t*>(c.state);
  uint64_t* fences_done = state + gridDim.x;
  uint64_t* barriers_done = fences_done + gridDim.x;
  uint64_t* grid_arrivals = barriers_done + gridDim.x;
  uint64_t* plan_arrivals = grid_arrivals + 1;
  uint64_t* progress = plan_arrivals + 1;
  // Written only by this block, at the end of the previous launch (kernel boundary): launches
  // done and whether the last one skipped its exit fence, fences and grid barriers done (the
  // same in every block: every block runs the same fences and barriers).
  const uint64_t launch = state[b] >> 1;
  const bool after_open_exit = (state[b] & 1) != 0;
  uint64_t fences = fences_done[b];
  uint64_t barriers = barriers_done[b];
  // Blocks running the plan in this launch: the active replicas of every thread block (the
  // rest of the grid only stages and fences).
  const uint32_t plan_blocks = c.threadblocks * c.active_replicas;
  const bool packets = (c.flags & EXEC_PACKETS) != 0;
  const Geometry g = Geometry::make(c.unit, c.size_classes, packets ? 2u : 1u);
  const ExecBuffers& mine = reinterpret_cast<const ExecBuffers*>(c.buffers)[c.rank];
  const bool entry_fence = (c.flags & EXEC_ENTRY_FENCE) != 0 || after_open_exit;
  const bool exit_fence = (c.flags & EXEC_EXIT_FENCE) != 0;
  // A rank may have no thread block of the plan (its grid only stages and fences).
  const uint32_t flag = static_cast<uint32_t>(launch) + 1 != 0 ? static_cast<uint32_t>(launch) + 1 : 1;
  const Role role{c.threadblocks != 0 ? b / c.threadblocks : 0, (launch & 1) != 0 ? c.output_flip : 0, &outputs,
                  (launch & 1) != 0 ? c.scratch_flip : 0, flag};

  // A plan block fetches its operations, every rank's buffers and both parities' rows it cached
  // (used when every operation's rows fit up front: small plans and sizes, where the cost of
  // an operation shows) all at once; it resolves the rows only when the cache holds another
  // call's.
  uint32_t nops = 0;
  uint32_t rows = 0;
  bool cached = true;
  const ExecOp* ops = shared_ops;
  if (b < plan_blocks) {
    const uint32_t tb = b % c.threadblocks;
    nops = reinterpret_cast<const uint32_t*>(c.tb_ops)[tb];
    rows = reinterpret_cast<const uint32_t*>(c.tb_rows)[tb];
    const uint64_t uploaded = c.ops + static_cast<uint64_t>(tb) * c.max_tb_ops * sizeof(ExecOp);
#ifdef WEFT_STATIC_OPS
    // The operations are compiled in: the uploaded ones are read only to resolve rows.
    ops = reinterpret_cast<const ExecOp*>(uploaded);
#else
    const uint32_t* src = reinterpret_cast<const uint32_t*>(uploaded);
    uint32_t* dst = reinterpret_cast<uint32_t*>(shared_ops);
    for (uint32_t i = threadIdx.x; i < c.max_tb_ops * (sizeof(ExecOp) / 4); i += blockDim.x) dst[i] = src[i];
#endif
    if (threadIdx.x < c.ranks) rank_buffers[threadIdx.x] = reinterpret_cast<const ExecBuffers*>(c.buffers)[threadIdx.x];
    cached = __syncthreads_and(load_cached_rows(c, outputs, launch));
  }

  auto grid_barrier = [&]() {
    ++barriers;
    return block_arrive(grid_arrivals, barriers * gridDim.x, c.wait);
  };

  const Row* up_front = nullptr;
  if (b < plan_blocks && rows <= EXEC_RESOLVED_ROWS) {
    Row* half = resolved + (launch & 1) * EXEC_RESOLVED_ROWS;
    if (!cached) resolve_and_cache(c, g, role, outputs, ops, rows, launch & 1, half);
    up_front = half;
  }
  if ((c.flags & EXEC_INPUT_STAGED) != 0) {
    stage(g, c.input_chunks, reinterpret_cast<char*>(c.input), reinterpret_cast<char*>(mine.input), true, nullptr);
  }
  // The barrier orders the grid's work before block 0's signal: the copy-in before the entry
  // fence, the plan before the exit fence. An entry fence without copy-in needs none: the
  // launch has started, which is all the signal says.
  auto fence_with_peers = [&](bool work_before) {
    if (work_before && !grid_barrier()) return false;
    return fence(c, ++fences);
  };
  // (A plan block's operations and rows are visible to it: its barrier above.)
  if (entry_fence && !fence_with_peers((c.flags & EXEC_INPUT_STAGED) != 0)) return;
  if (b < plan_blocks &&
      !run_plan(c, g, role, ops, b % c.threadblocks, nops, up_front, launch, plan_arrivals, progress)) {
    return;
  }
  if (exit_fence && !fence_with_peers(true)) return;
  const bool copy_out = (c.flags & EXEC_OUTPUT_STAGED) != 0;
  // Without the exit fence's grid barrier, every block must still be done with the plan
  // before the grid copies the stage out.
  if (copy_out && !exit_fence && !grid_barrier()) return;
  if (copy_out) {
    stage(g, c.output_chunks, reinterpret_cast<char*>(c.output), output_stage(mine, role.output_shift), false,
          reinterpret_cast<const uint8_t*>(c.written));
  }
  if (threadIdx.x == 0) {
    // Packets need no exit fence: nothing is left open for the next launch.
    state[b] = (launch + 1) << 1 | (exit_fence || packets ? 0 : 1);
    fences_done[b] = fences;
    barriers_done[b] = barriers;
  }
}
