// HB AllReduce: the two-shot through scratch (two_shot_hb.cuh), results to every rank.
#include "two_shot_hb.cuh"

extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, PeerBuffers outputs) {
  two_shot_hb(c, input, output, bytes, kEveryRank, outputs);
}
