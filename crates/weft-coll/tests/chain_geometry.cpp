// Evaluates device/kernels/coll/chain_geometry.cuh on the host for chain_geometry.rs: a query
// `bytes ranks scratch_bytes grid` a line on stdin, `step steps sub blocks` a line on stdout.
#include <cstdio>
#include <iostream>

#include "chain_geometry.cuh"

int main() {
  unsigned long long bytes, scratch;
  unsigned ranks, grid;
  while (std::cin >> bytes >> ranks >> scratch >> grid) {
    const weft::coll::ChainGeometry g(bytes, ranks, scratch, grid);
    std::printf("%llu %llu %llu %u\n", (unsigned long long)g.step, (unsigned long long)g.steps,
                (unsigned long long)g.sub, g.blocks);
  }
  return 0;
}
