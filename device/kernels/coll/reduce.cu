// Reduce to a root, LL (weft_reduce_ll), HB (weft_reduce_hb), chain (weft_reduce_chain), LL128
// chain (weft_reduce_ll128), and the root's pull straight from the peers' inputs
// (weft_reduce_direct, the chain's direct form).
#include "chain.cuh"
#include "ll128.cuh"
#include "reducing.cuh"
#include "two_shot_hb.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_ll(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_ll);
  LlRound round;
  if (!ll_round_begin(c, round, c.rank != root ? input : nullptr, bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(bytes));
  if (c.rank != root) {
    ll_put(c, round, c.rank, input, bytes, deal, only(root), Pre::of(c));
    WEFT_TRACE_MARK(ll_puts);
  } else {
    ll_reduce(c, round, 0, input, bytes, deal, StoreTo{output});
    WEFT_TRACE_MARK(ll_reduce);
  }
  ll_round_end(c, round);
}

extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_hb);
  two_shot_hb(c, input, output, bytes, root, PeerBuffers{});
}

// The chain ending at the root (chain.cuh), starting at the rank after it: every rank folds its
// input into the partial result in its slot (the head starts from its input) and pushes the
// sum into the next rank's slot; the root applies Fin and writes its output. Partials travel
// in the element type, as in the ring.
extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_chain(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_chain);
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  const bool is_root = c.rank == root;
  chain(c, (root + 1) % c.ranks, bytes, [&](uint64_t at, uint64_t len, const char* from, char* to) {
    ring_reduce(from, input + at, to, is_root ? output + at : nullptr, 0, len, is_root ? finish : Fin::partial(), pre);
  });
}

// The LL128 chain ending at the root (ll128.cuh), starting at the rank after it: every rank
// folds its input (through Pre) into the partial of each line (the head starts from its input)
// and passes the line on; the root applies Fin and stores its output. Partials travel in the
// element type, as in the chain. The flag lane's last 8 bytes fold as if data and are then
// replaced by the flag (or never stored, at the root).
extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_ll128(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_ll128);
  LlRound round;
  if (!ll128_round_begin(c, round)) return;
  using R = Reducer<kType, kOp, 16>;
  const Fin finish = c.rank == root ? Fin::of(c) : Fin::partial();
  const Pre pre = Pre::of(c);
  const bool is_root = c.rank == root;
  ll128_chain(c, round, (root + 1) % c.ranks, bytes, [&](uint64_t line, uint32_t lane, bool received, uint32_t (&w)[4]) {
    uint32_t own[4];
    ll128_load(input, bytes, line, lane, own);
    pre(own);
    Acc acc[R::kElems];
    if (received) {
      R::start(acc, w);
      R::fold(acc, own);
    } else {
      R::start(acc, own);
    }
    R::finish(acc, finish, w);
    if (is_root) ll128_store(output, bytes, line, lane, w);
  });
}

// The root reads every rank's input where it lies (a peer's through NVLink: a pull, which
// streams at NCCL's rate where the chain's pushes and the lines fall short), reduces in rank
// order and stores its output, between two barriers of each block with the same block of every
// peer; the other ranks only take part in the barriers. The entry barrier orders every rank's
// earlier stream work on its input before the root reads it; the exit barrier orders the
// root's reads before each peer's same block returns (after which its caller may overwrite its
// input). Each pair's signals and waits balance, so the HB table stays in step for the kernels
// that share it. In place, the root's thread reads a vector of its input before it stores the
// result there. The host chooses it when every rank's input is mapped here (windows, or a
// captured call's agreement), for messages of whole 16-byte vectors and operators without a
// per-rank pre-operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_direct(CollContext c, char* output, uint64_t bytes, uint32_t root, PeerBuffers inputs) {
  WEFT_TRACE_SCOPE(weft_reduce_direct);
  if (!hb_barrier(c)) return;
  WEFT_TRACE_MARK(barrier);
  if (c.rank == root) {
    pull_reduce(c, inputs, 0, bytes, output);
    WEFT_TRACE_MARK(reduce);
  }
  hb_barrier(c);
  WEFT_TRACE_MARK(barrier);
}
