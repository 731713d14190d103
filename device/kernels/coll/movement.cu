// The collectives that move bytes without reducing them (compiled once, for every type).
// Protocols (LL, HB) and their invariants: weft/collective.cuh.
//
// One program for every type: this file includes every algorithm's file, so weft-coll compiles
// and caches one module and finds every kernel in it.
//
//   weft_allgather_ll   every rank sends its block as packets to every peer.
//   weft_allgather_hb   every rank pushes its block into slot `rank` of every peer's scratch;
//                       each rank copies the slots out, in rounds; or (zero-copy, registered
//                       outputs) straight into block `rank` of every peer's output.
//   weft_broadcast_ll   the root sends its buffer as packets to every peer.
//   weft_broadcast_hb   scatter + all-gather through scratch: the root pushes shard i to the
//                       i-th other rank, which pushes it to the others, so the root sends each
//                       byte once instead of once per peer; rounds pipelined over three buffers.
//   weft_broadcast_chain the ranks from the root pass the message down in steps through slots
//                       of the next rank's scratch, with credits and no barrier (chain.cuh).
//   weft_broadcast_ll128 the same chain as LL128 lines, each passed on as it arrives (ll128.cuh).
//   weft_allgather_ll128 weft_allgather_ll in LL128 lines (ll128.cuh).
//   weft_p2p            grouped send/receive: per (peer, direction) a set of blocks moves the
//                       bytes through a double-buffered slot of the receiver's scratch, with
//                       credits, so sends and receives of one group progress together.
//   weft_p2p_ll         the same for directions of up to WEFT_P2P_LL_BYTES: per (direction,
//                       part) a lane of its own, the sender storing LL packets straight into
//                       its slot of the receiver's packet buffer, the receiver polling them.
#include "weft/generated/kernels/coll.cuh"  // the prototypes every definition must match
#include "allgather.cu"
#include "broadcast.cu"
#include "p2p.cu"
