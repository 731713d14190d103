// Normal-mode dispatch. Every token goes, whole, once to each rank holding one of its experts:
// the sender writes it into that rank's staging area at its final position among the tokens
// from this rank (the staging area is sized for every rank's largest dispatch, so nothing
// waits for room), and the receiver copies it out to the caller's tensors in DeepEP's receive
// order (source rank, channel, token).
#include "common.cuh"
#include "rail_arrival.cuh"

/// A staged token: payload, then f32 scales, then int32 local expert indices, float weights,
/// and the int32 source token index (the slot is a 16-byte multiple).
struct StagedToken {
  uint32_t scales, topk_idx, weights, src_idx;
  __device__ __forceinline__ explicit StagedToken(const EpDispatchArgs& a)
      : scales(a.hidden_bytes),
        topk_idx(a.hidden_bytes + 4 * a.num_scales),
        weights(topk_idx + 4 * a.topk),
        src_idx(weights + 4 * a.topk) {}
};

/// Writes `n` tokens into rank `dst`'s staging area, token `token(r)` into slot `slot(r)`, with
/// their experts as `dst`'s local indices (-1 and weight 0 for the experts `dst` does not hold):
/// the payloads as one stream of vectors, then the scales, then the top-k fields, so the loads
/// of all `n` tokens share their round trips. Called by: one warp.
template <typename Token, typename Slot>
__device__ __forceinline__ void stage_tokens(const EpContext& c, const EpDispatchArgs& a, uint32_t n, Token token,
                                             Slot slot, uint32_t dst, uint32_t lane) {
  const StagedToken s(a);
  const char* x = reinterpret_cast<const char*>(a.x);
  warp_copy_records<true>(
      n, a.hidden_bytes, [&](uint32_t r) { return x + uint64_t(token(r)) * a.hidden_bytes; }, slot, lane);
  const float* scales = reinterpret_cast<const float*>(a.x_scales);
  warp_copy_fields<true, float>(
      n, a.num_scales,
      [&](uint32_t r, uint32_t i) {
        return scales + uint64_t(token(r)) * a.scale_token_stride + uint64_t(i) * a.scale_hidden_stride;
      },
      [&](uint32_t r, uint32_t i) { return reinterpret_cast<float*>(slot(r) + s.scales) + i; }, lane);
  const int64_t local = a.experts / c.ranks, first = int64_t(dst) * local;
  for (uint32_t q = lane; q < n * a.topk; q += 32) {
    const uint32_t r = q / a.topk, k = q % a.topk;
    const uint64_t i = uint64_t(token(r)) * a.topk + k;
    const int64_t e = reinterpret_cast<const int64_t*>(a.topk_idx)[i];
    const float w = a.topk_weights != 0 ? reinterpret_cast<const float*>(a.topk_weights)[i] : 0.f;
    const bool mine = e >= first && e < first + local;
    reinterpret_cast<int*>(slot(r) + s.topk_idx)[k] = mine ? int(e - first) : -1;
    reinterpret_cast<float*>(slot(r) + s.weights)[k] = mine ? w : 0.f;
  }
  for (uint32_t r = lane; r < n; r += 32) *reinterpret_cast<int*>(slot(r) + s.src_idx) = int(token(r));
}

/// Copies `n` staged tokens out, `slot(r)` to received row `row(r)`, each field of all `n` as
/// one stream (as stage_tokens). Called by: one warp, after the acquire covering the tokens.
template <typename Slot, typename Row>
__device__ __forceinline__ void unstage_tokens(const EpDispatchArgs& a, uint32_t n, Slot slot, Row row, uint32_t lane) {
  const StagedToken s(a);
  char* recv_x = reinterpret_cast<char*>(a.recv_x);
  warp_copy_records<false>(
      n, a.hidden_bytes, slot, [&](uint32_t r) { return recv_x + row(r) * a.hidden_bytes; }, lane);
  if (a.recv_x_scales != 0) {
    float* out = reinterpret_cast<float*>(a.recv_x_scales);
    warp_copy_fields<false, float>(
        n, a.num_scales, [&](uint32_t r, uint32_t i) { return reinterpret_cast<const float*>(slot(r) + s.scales) + i; },
        [&](uint32_t r, uint32_t i) {
          return out + row(r) * a.recv_scale_token_stride + uint64_t(i) * a.recv_scale_hidden_stride;
        },
        lane);
  }
  if (a.recv_topk_idx != 0) {
    for (uint32_t q = lane; q < n * a.topk; q += 32) {
      const uint32_t r = q / a.topk, k = q % a.topk;
      reinterpret_cast<int64_t*>(a.recv_topk_idx)[row(r) * a.topk + k] = reinterpret_cast<const int*>(slot(r) + s.topk_idx)[k];
    }
  }
  if (a.recv_topk_weights != 0) {
    warp_copy_fields<false, float>(
        n, a.topk, [&](uint32_t r, uint32_t k) { return reinterpret_cast<const float*>(slot(r) + s.weights) + k; },
        [&](uint32_t r, uint32_t k) { return reinterpret_cast<float*>(a.recv_topk_weights) + row(r) * a.topk + k; },
        lane);
  }
  warp_copy_fields<false, int>(
      n, 1, [&](uint32_t r, uint32_t) { return reinterpret_cast<const int*>(slot(r) + s.src_idx); },
      [&](uint32_t r, uint32_t) { return reinterpret_cast<int*>(a.recv_src_idx) + row(r); }, lane);
}

/// Sender of channel `channel` to rank `dst`: the `members` warps of the group share each
/// batch of the channel's tokens for `dst` (the n-th token sent goes to warp n % members,
/// which stages its share of the batch together); after each batch the group syncs and one
/// thread publishes the count (release), so a published count covers every token before it.
/// Where the input rows arrive over the rail hop (`a.rail`), the group's first thread first
/// waits for the batch's rows and a group sync hands its verdict and its acquires to the
/// group's warps: they give up together, so no warp is left at a group sync alone.
__device__ __forceinline__ void send_channel(const EpContext& c, const EpDispatchArgs& a, uint32_t channel,
                                             uint32_t dst, uint32_t member, uint32_t members, uint32_t lane) {
  // This warp's tokens of the current batch.
  __shared__ uint32_t batches[kChannelWarps][32];
  // Per group: whether the batch's rows arrived.
  __shared__ bool arrived[kMaxRanks];
  uint32_t* mine = batches[threadIdx.x / 32];
  const TokenRange tokens = channel_tokens(a.tokens, a.channels, channel);
  const int* prefix = reinterpret_cast<const int*>(a.channel_prefix_matrix) + dst * a.channels;
  const uint32_t start = channel == 0 ? 0 : uint32_t(prefix[channel - 1]);
  const uint32_t count = uint32_t(prefix[channel]) - start;
  const bool leader = member == 0 && lane == 0;
  if (leader) ptx::st_release_sys(channel_word(c, dst, c.rank, channel), kChannelWordValid | uint64_t(count) << 32 | start);
  char* region = staging(c, dst) + c.rank * a.region_bytes;
  const bool* in_rank = reinterpret_cast<const bool*>(a.is_token_in_rank);
  int* send_head = reinterpret_cast<int*>(a.send_head);
  uint32_t sent = 0;
  uint32_t here = a.rail.nodes == 0 ? tokens.end : tokens.begin;  // rows below it have arrived
  for (uint32_t base = tokens.begin; base < tokens.end; base += 32) {
    const uint32_t last = min(base + 32, tokens.end) - 1;
    if (last >= here) {  // the same on every warp of the group
      if (leader) arrived[dst] = rail_rows_arrived(a.rail, base, last, WaitOp::EpRailRows);
      group_sync(1 + dst, members * 32);
      if (!arrived[dst]) return;  // recorded
      here = last + 1;
    }
    const uint32_t t = base + lane;
    const bool go = t < tokens.end && in_rank[uint64_t(t) * c.ranks + dst];
    const uint32_t ballot = __ballot_sync(~0u, go);
    const uint32_t before = __popc(ballot & ((1u << lane) - 1));  // go: this token's place in the batch
    if (member == 0 && t < tokens.end) send_head[uint64_t(t) * c.ranks + dst] = go ? int(start + sent + before) : -1;
    // The batch's places p with (sent + p) % members == member: skip, skip + members, ...
    const uint32_t skip = (member + members - sent % members) % members, total = __popc(ballot);
    const uint32_t n = total > skip ? (total - skip + members - 1) / members : 0;
    __syncwarp();  // the previous batch's reads of `mine` before these writes
    if (go && before >= skip && (before - skip) % members == 0) mine[(before - skip) / members] = t;
    __syncwarp();
    stage_tokens(
        c, a, n, [&](uint32_t r) { return mine[r]; },
        [&](uint32_t r) { return region + uint64_t(start + sent + skip + r * members) * a.slot_bytes; }, dst, lane);
    sent += total;
    // Every warp of the group saw the same ballots, so all reach this sync together.
    group_sync(1 + dst, members * 32);
    if (leader && ballot != 0) ptx::st_release_sys(dispatch_tail(c, dst, c.rank, channel), sent);
  }
}

/// Receiver of channel `channel` from rank `src`: the `members` warps of the group take the
/// channel's tokens in turn (token i to warp i % members); a warp waits (lane 0, acquire)
/// until the source's published count covers its next token, then copies out together every
/// one of its tokens that count covers.
__device__ __forceinline__ void receive_channel(const EpContext& c, const EpDispatchArgs& a, uint32_t channel,
                                                uint32_t src, uint32_t member, uint32_t members, uint32_t lane) {
  uint64_t word = 0;
  if (lane == 0) word = acquire_at_least(channel_word(c, c.rank, src, channel), kChannelWordValid, c, src, WaitOp::EpDispatchChannel);
  word = __shfl_sync(~0u, word, 0);
  if (word < kChannelWordValid) return;
  WEFT_TRACE_WARP_MARK(wait);
  const uint32_t start = uint32_t(word), count = uint32_t(word >> 32) & 0x7fffffffu;
  const int* rank_prefix = reinterpret_cast<const int*>(a.rank_prefix_matrix);
  const uint64_t first_row = (src == 0 ? 0 : uint64_t(rank_prefix[(src - 1) * c.ranks + c.rank])) + start;
  if (member == 0 && lane == 0) reinterpret_cast<int*>(a.recv_channel_prefix_matrix)[src * a.channels + channel] = int(first_row);
  const char* region = staging(c, c.rank) + src * a.region_bytes;
  uint64_t published = 0;
  for (uint32_t i = member; i < count;) {
    if (published <= i) {
      if (lane == 0) published = acquire_at_least(dispatch_tail(c, c.rank, src, channel), i + 1, c, src, WaitOp::EpDispatchTail);
      published = __shfl_sync(~0u, published, 0);
      if (published <= i) return;
      __syncwarp();  // lane 0's acquire orders the other lanes' reads of the tokens
    }
    // This warp's tokens below the count: i, i + members, ...
    const uint32_t n = (uint32_t(min(published, uint64_t(count))) - i + members - 1) / members;
    unstage_tokens(
        a, n, [&](uint32_t r) { return region + uint64_t(start + i + r * members) * a.slot_bytes; },
        [&](uint32_t r) { return first_row + i + r * members; }, lane);
    i += n * members;
  }
}

// Grid: 2 x channels blocks of kChannelThreads; block 2c sends channel c, block 2c + 1
// receives it. A block's warps split evenly into one group per rank (the group of rank r
// sends to it or receives from it; spare warps idle). Senders never wait, so the kernel
// cannot deadlock however the blocks of several ranks share SMs.
extern "C" __global__ void __launch_bounds__(kChannelThreads, 1) weft_ep_dispatch(EpContext c, EpDispatchArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_dispatch);
  const uint32_t channel = blockIdx.x / 2, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t members = kChannelWarps / c.ranks;
  const uint32_t peer = warp / members, member = warp % members;
  if (peer >= c.ranks) return;
  if (blockIdx.x % 2 == 0) {
    send_channel(c, a, channel, peer, member, members, lane);
    WEFT_TRACE_WARP_MARK(send);
  } else {
    receive_channel(c, a, channel, peer, member, members, lane);
    WEFT_TRACE_WARP_MARK(copy);
  }
}
