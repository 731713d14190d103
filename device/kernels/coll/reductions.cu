// The reducing collectives. Compiled once per (WEFT_DTYPE, WEFT_REDOP) pair (DataType /
// ReduceOp values), so every kernel is specialised for its element type and operator. Every
// result is folded in rank order, so all ranks get bitwise identical results, run after run.
// Every fully reduced element goes through Fin (elementwise.cuh): Avg's division, so no
// algorithm needs a pass of its own for it. PreMulSum is NCCL's pre-operation: every rank
// multiplies its OWN input by its OWN scalar (Pre, elementwise.cuh's Premultiply; the scalar
// the launch's CollContext carries, by value or a device address read when the kernel runs)
// where that input enters the reduction or leaves for a peer, then the kernels sum. Each
// kernel applies it exactly once to every contributing element of its own input: at the
// local read of ll_reduce and ring_reduce, in ll_put's packets and in push_padded's pushes
// (a rank's push into its own scratch included); never to a peer's data or a partial result.
// Protocols (LL, HB) and their invariants: weft/collective.cuh.
//
// One program per (type, operator): this file includes every algorithm's file, so the crate
// that launches them (weft-coll) compiles and caches one module per pair, as one translation
// unit, and finds every kernel in it. Helpers more than one algorithm uses live in
// reducing.cuh (the type and operator, the LL, vector and ring folds), two_shot_hb.cuh,
// port_grid.cuh (the PortChannel grid) and put_groups.cuh (puts by groups of blocks).
//
//   weft_allreduce_ll       one-shot: every rank sends its whole input to every peer as
//                           packets and reduces all ranks' packets.
//   weft_allreduce_ll2      two-shot: scatter shards as packets, each rank reduces its shard
//                           and sends the result as packets to every peer.
//   weft_allreduce_hb       two-shot through scratch, push only (NVLink stores): shard d of
//                           every input goes into rank d's scratch, rank d reduces it (local
//                           reads) and stores the result into every rank's result region, or
//                           (zero-copy, registered outputs) straight into every rank's output;
//                           with every input and output in windows, the direct two-shot: rank
//                           d reads shard d of every input in place and stores the result into
//                           every output (two barriers, no scratch).
//   weft_allreduce_ring     ring reduce-scatter then ring all-gather through the next rank's
//                           scratch, one step slot each, signals per (neighbour, block).
//   weft_allreduce_port_ring  the same ring over PortChannels (MSCCL++ "2PR"): the copy engine
//                           moves every byte between ranks (the proxy's puts), the GPU only
//                           reduces, a large step in pieces so that one piece's reduction
//                           overlaps another's copy; one driver block talks to the proxy for
//                           the grid.
//   weft_allreduce_port_allpairs  every rank puts its input to every peer over PortChannels
//                           and folds all inputs: one network crossing, for small messages.
//   weft_allreduce_nvrar    NVRAR across nodes (nvrar.cu, on the GIN device API): reduce-
//                           scatter within the node, recursive doubling across nodes with LL
//                           packets (data and flag in one put), all-gather within the node.
//   weft_allreduce_2ph      2PH across nodes (two_phase.cu, on the GIN device API): reduce-
//                           scatter within the node, the shard's partial to every other node
//                           (puts with signals), all-gather within the node; whole vectors.
//   weft_reduce_scatter_ll  the scatter and reduce of the two-shot, shard d = block d of input.
//   weft_reduce_scatter_hb  push shards into their owners' scratch, reduce there.
//   weft_reduce_ll          every rank sends its input to the root as packets.
//   weft_reduce_hb          the two-shot HB over the non-roots, results to the root only.
//   weft_reduce_chain       a chain ending at the root: each rank folds its input into the
//                           partial and passes it on, in steps with credits (chain.cuh).
//   weft_reduce_ll128       the same chain as LL128 lines, each folded and passed on as it
//                           arrives (ll128.cuh); Pre at the local read, as in ring_reduce.
//   weft_allreduce_ll128, weft_reduce_scatter_ll128  weft_allreduce_ll2 and
//                           weft_reduce_scatter_ll in LL128 lines (ll128.cuh, ll128_reduce).
#include "weft/generated/kernels/coll.cuh"  // the prototypes every definition must match
#include "allreduce_ll.cu"
#include "allreduce_hb.cu"
#include "ring.cu"
#include "port_ring.cu"
#include "port_allpairs.cu"
#include "nvrar.cu"
#include "two_phase.cu"
#include "reduce_scatter.cu"
#include "reduce.cu"
