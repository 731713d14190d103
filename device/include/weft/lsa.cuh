// GIN teams and the load/store (LSA) side of a device communicator (DevCommHandle, built by
// weft_gin::DevComm): the world, this rank's LSA team (its node: peers whose memory is mapped
// here, reached over NVLink) and its rail team (the same local rank on every node), rank
// conversions between them, and direct pointers into an LSA peer's window.
//
// Every function here only reads the handle: any thread may call it.
#pragma once
#include "weft/generated/types.cuh"

namespace weft {

/// A team: `size` ranks, this rank is member `rank`, member i is world rank `ranks[i]`
/// (`ranks == nullptr`: the world, member i is rank i).
struct GinTeam {
  const uint32_t* ranks;
  uint32_t size;
  uint32_t rank;
};

__device__ __forceinline__ GinTeam gin_team_world(const DevCommHandle& h) { return {nullptr, h.world, h.rank}; }
__device__ __forceinline__ GinTeam gin_team_lsa(const DevCommHandle& h) {
  return {reinterpret_cast<const uint32_t*>(h.lsa_ranks), h.lsa_size, h.lsa_rank};
}
__device__ __forceinline__ GinTeam gin_team_rail(const DevCommHandle& h) {
  return {reinterpret_cast<const uint32_t*>(h.rail_ranks), h.rail_size, h.rail_rank};
}

/// The world rank of member `peer` of `team` (peer < team.size).
__device__ __forceinline__ uint32_t gin_world_rank(const GinTeam& team, uint32_t peer) {
  return team.ranks == nullptr ? peer : team.ranks[peer];
}

/// Whether world rank `rank` is reached through the proxy (else by loads and stores).
__device__ __forceinline__ bool gin_is_proxy_peer(const DevCommHandle& h, uint32_t rank) {
  return ((h.proxy_mask >> rank) & 1ull) != 0;
}

/// Offset of window `window` in every rank's heap.
__device__ __forceinline__ uint64_t gin_window_offset(const DevCommHandle& h, uint32_t window) {
  return reinterpret_cast<const uint64_t*>(h.windows)[2 * window];
}

/// Bytes of window `window`.
__device__ __forceinline__ uint64_t gin_window_bytes(const DevCommHandle& h, uint32_t window) {
  return reinterpret_cast<const uint64_t*>(h.windows)[2 * window + 1];
}

/// World rank `rank`'s heap as this GPU addresses it (0 for a proxy peer).
__device__ __forceinline__ uint64_t gin_peer_heap(const DevCommHandle& h, uint32_t rank) {
  return reinterpret_cast<const uint64_t*>(h.peer_heaps)[rank];
}

/// Byte `offset` of window `window` of member `peer` of this rank's LSA team, for direct loads
/// and stores over NVLink (peer == h.lsa_rank: this rank's own window).
template <typename T = void>
__device__ __forceinline__ T* lsa_pointer(const DevCommHandle& h, uint32_t window, uint32_t peer, uint64_t offset) {
  const uint32_t rank = gin_world_rank(gin_team_lsa(h), peer);
  return reinterpret_cast<T*>(gin_peer_heap(h, rank) + gin_window_offset(h, window) + offset);
}

/// Byte `offset` of this rank's own window `window`.
template <typename T = void>
__device__ __forceinline__ T* gin_local_pointer(const DevCommHandle& h, uint32_t window, uint64_t offset) {
  return reinterpret_cast<T*>(h.heap + gin_window_offset(h, window) + offset);
}

}  // namespace weft
