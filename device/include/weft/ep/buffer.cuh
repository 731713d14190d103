// The EP buffer as kernels see it: where each region of a rank's buffer lies (offsets from
// EpContext, computed by weft-ep's host layout) and the wait context naming a peer.
#pragma once
#include "weft/generated/types.cuh"

namespace weft {
namespace ep {

/// Most ranks of an EP group (the rows of every metadata table).
constexpr uint32_t kMaxRanks = 8;

/// `T*` at `offset` in rank `owner`'s buffer, as this GPU maps it.
template <typename T>
__device__ __forceinline__ T* at(const EpContext& c, uint32_t owner, uint64_t offset) {
  return reinterpret_cast<T*>(c.peers[owner] + offset);
}

/// Rank `owner`'s dispatch channel word of (source `src`, channel `channel`).
__device__ __forceinline__ uint64_t* channel_word(const EpContext& c, uint32_t owner, uint32_t src,
                                                  uint32_t channel) {
  return at<uint64_t>(c, owner, c.channel_info_offset) + src * c.max_channels + channel;
}

/// Rank `owner`'s dispatch tail of (source `src`, channel `channel`): tokens written.
__device__ __forceinline__ uint64_t* dispatch_tail(const EpContext& c, uint32_t owner, uint32_t src,
                                                   uint32_t channel) {
  return at<uint64_t>(c, owner, c.dispatch_tail_offset) + src * c.max_channels + channel;
}

/// Rank `owner`'s combine tail of (sender `sender`, channel `channel`): rows written.
__device__ __forceinline__ uint64_t* combine_tail(const EpContext& c, uint32_t owner, uint32_t sender,
                                                  uint32_t channel) {
  return at<uint64_t>(c, owner, c.combine_tail_offset) + sender * c.max_channels + channel;
}

/// Rank `owner`'s staging area.
__device__ __forceinline__ char* staging(const EpContext& c, uint32_t owner) {
  return at<char>(c, owner, c.data_offset);
}

/// The context's wait context, naming `peer` as the rank waited for.
__device__ __forceinline__ WaitContext waiting_for(const EpContext& c, uint32_t peer) {
  WaitContext w = c.wait;
  w.peer = static_cast<int32_t>(peer);
  return w;
}

/// Tokens `[begin, end)` of channel `channel` out of `channels` over `tokens`: DeepEP's split,
/// `ceil(tokens / channels)` consecutive tokens each (weft-ep's `model::channel_range`).
struct TokenRange {
  uint32_t begin, end;
};
__device__ __forceinline__ TokenRange channel_tokens(uint32_t tokens, uint32_t channels, uint32_t channel) {
  const uint32_t per = (tokens + channels - 1) / channels;
  const uint32_t begin = min(channel * per, tokens);
  return {begin, min(begin + per, tokens)};
}

}  // namespace ep
}  // namespace weft
