// Evaluates device/kernels/coll/ll128_geometry.cuh on the host for ll128_geometry.rs. Queries,
// a line each on stdin:
//   deal BYTES BLOCKS WARPS  one line per warp: `block warp g0 g1 ...`, the groups it handles
//   lanes BYTES              one line per (line, lane): `line lane offset valid`
//   end                      one line `end`, so the reader knows the answer is complete
#include <cstdio>
#include <iostream>
#include <string>

#include "ll128_geometry.cuh"

using namespace weft::coll;

int main() {
  std::string kind;
  while (std::cin >> kind) {
    if (kind == "deal") {
      unsigned long long bytes;
      unsigned blocks, warps;
      std::cin >> bytes >> blocks >> warps;
      const unsigned long long groups = ll128_groups(bytes);
      for (unsigned b = 0; b < blocks; ++b) {
        for (unsigned w = 0; w < warps; ++w) {
          const Ll128Deal deal{blocks, warps, b, w};
          std::printf("%u %u", b, w);
          for (unsigned long long k = 0, g; (g = deal.group(k)) < groups; ++k) std::printf(" %llu", g);
          std::printf("\n");
        }
      }
    } else if (kind == "lanes") {
      unsigned long long bytes;
      std::cin >> bytes;
      const unsigned long long lines = ll128_lines(bytes);
      for (unsigned long long line = 0; line < ll128_groups(bytes) * kLl128LinesPerGroup; ++line) {
        for (unsigned lane = 0; lane < kLl128LanesPerLine; ++lane) {
          const unsigned valid = line < lines ? ll128_valid(bytes, line, lane) : 0u;
          std::printf("%llu %u %llu %u\n", line, lane, (unsigned long long)ll128_offset(line, lane), valid);
        }
      }
    }
    std::printf("end\n");
  }
  return 0;
}
