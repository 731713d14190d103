// Normal-mode combine. The rank holding a token's experts sends its row back to the token's
// rank, into the slot dispatch's send head names; the token's rank sums its rows in
// increasing rank order in f32 (after the biases) and rounds once to BF16, so the result is
// the same bits on every run (and equals weft-ep's CPU model).
#include "common.cuh"
#include "sum_rows.cuh"

/// Sender of channel `channel` back to rank `dst`: the rows dispatch received from `dst`'s
/// channel `channel`, taken in turn by the group's `members` warps (a warp copies its rows of
/// a batch as one stream), each batch published (group sync, then one release store) like
/// dispatch's.
__device__ __forceinline__ void send_rows(const EpContext& c, const EpCombineArgs& a, uint32_t channel, uint32_t dst,
                                          uint32_t member, uint32_t members, uint32_t lane) {
  const int* rank_prefix = reinterpret_cast<const int*>(a.rank_prefix_matrix);
  const int* starts = reinterpret_cast<const int*>(a.recv_channel_prefix_matrix) + dst * a.channels;
  const uint32_t segment = dst == 0 ? 0 : uint32_t(rank_prefix[(dst - 1) * c.ranks + c.rank]);
  const uint32_t first = uint32_t(starts[channel]);
  const uint32_t end = channel + 1 < a.channels ? uint32_t(starts[channel + 1]) : uint32_t(rank_prefix[dst * c.ranks + c.rank]);
  const uint32_t row_bytes = 2 * a.hidden, batch = 4 * members;
  char* region = staging(c, dst) + c.rank * a.region_bytes;
  const char* x = reinterpret_cast<const char*>(a.x);
  const float* weights = reinterpret_cast<const float*>(a.topk_weights);
  for (uint32_t b = first; b < end; b += batch) {
    // This warp's rows of the batch, b + member + r * members, copied as one stream.
    const uint32_t stop = min(b + batch, end);
    const uint32_t n = stop > b + member ? (stop - b - member + members - 1) / members : 0;
    auto row = [&](uint32_t r) { return b + member + r * members; };
    auto slot = [&](uint32_t r) { return region + uint64_t(row(r) - segment) * a.slot_bytes; };
    warp_copy_records<true>(n, row_bytes, [&](uint32_t r) { return x + uint64_t(row(r)) * row_bytes; }, slot, lane);
    if (weights != nullptr) {
      warp_copy_fields<true, float>(
          n, a.topk, [&](uint32_t r, uint32_t k) { return weights + uint64_t(row(r)) * a.topk + k; },
          [&](uint32_t r, uint32_t k) { return reinterpret_cast<float*>(slot(r) + row_bytes) + k; }, lane);
    }
    group_sync(1 + dst, members * 32);
    if (member == 0 && lane == 0) ptx::st_release_sys(combine_tail(c, dst, c.rank, channel), stop - first);
  }
}

/// Receiver of channel `channel`: each warp takes this rank's tokens of the channel in turn,
/// waits until every rank holding one of them has published its row (lane r watches rank r),
/// then sums the biases and the rows in rank order (warp_sum_rows, weight 1).
__device__ __forceinline__ void reduce_tokens(const EpContext& c, const EpCombineArgs& a, uint32_t channel,
                                              uint32_t warp, uint32_t lane) {
  const TokenRange tokens = channel_tokens(a.tokens, a.channels, channel);
  const int* send_head = reinterpret_cast<const int*>(a.send_head);
  const int* prefix = reinterpret_cast<const int*>(a.channel_prefix_matrix);
  const uint32_t chunks = a.hidden / 8, row_bytes = 2 * a.hidden;
  uint64_t published = 0;  // lane r: rank r's last published count for this channel
  for (uint32_t t = tokens.begin + warp; t < tokens.end; t += kChannelWarps) {
    int head = -1;
    bool ok = true;
    if (lane < c.ranks) {
      head = send_head[uint64_t(t) * c.ranks + lane];
      const uint64_t need = head < 0 ? 0 : uint64_t(head - (channel == 0 ? 0 : prefix[lane * a.channels + channel - 1])) + 1;
      if (published < need) {
        published = acquire_at_least(combine_tail(c, c.rank, lane, channel), need, c, lane, WaitOp::EpCombineTail);
        ok = published >= need;
      }
    }
    if (!__all_sync(~0u, ok)) return;
    __syncwarp();  // the lanes' acquires order every lane's reads of the rows
    // The sum's sources in the model's order: lane 0 and 1 the biases, lane 2 + r rank r's row.
    const int h = __shfl_sync(~0u, head, (lane + 30) % 32);
    const char* row = nullptr;
    if (lane == 0 && a.bias0 != 0) row = reinterpret_cast<const char*>(a.bias0) + uint64_t(t) * row_bytes;
    if (lane == 1 && a.bias1 != 0) row = reinterpret_cast<const char*>(a.bias1) + uint64_t(t) * row_bytes;
    if (lane >= 2 && lane - 2 < c.ranks && h >= 0) {
      row = staging(c, c.rank) + (lane - 2) * a.region_bytes + uint64_t(h) * a.slot_bytes;
    }
    warp_sum_rows(row, 1.f, reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes), 0, chunks, lane);
    if (a.combined_topk_weights == 0) continue;
    float w = 0.f;
#pragma unroll
    for (uint32_t r = 0; r < kMaxRanks; ++r) {
      const char* slot = reinterpret_cast<const char*>(__shfl_sync(~0u, reinterpret_cast<unsigned long long>(row), 2 + r));
      if (lane < a.topk && r < c.ranks && slot != nullptr) w += reinterpret_cast<const float*>(slot + row_bytes)[lane];
    }
    if (lane < a.topk) reinterpret_cast<float*>(a.combined_topk_weights)[uint64_t(t) * a.topk + lane] = w;
  }
}

// Grid: 2 x channels blocks of kChannelThreads; block 2c sends channel c's rows back (its
// warps split into one group per rank, as in dispatch), block 2c + 1 reduces this rank's
// tokens of channel c (every warp). Senders never wait.
extern "C" __global__ void __launch_bounds__(kChannelThreads, 1) weft_ep_combine(EpContext c, EpCombineArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_combine);
  const uint32_t channel = blockIdx.x / 2, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x % 2 == 1) {
    reduce_tokens(c, a, channel, warp, lane);
    WEFT_TRACE_WARP_MARK(copy);
    return;
  }
  const uint32_t members = kChannelWarps / c.ranks;
  const uint32_t peer = warp / members, member = warp % members;
  if (peer < c.ranks) {
    send_rows(c, a, channel, peer, member, members, lane);
    WEFT_TRACE_WARP_MARK(send);
  }
}
