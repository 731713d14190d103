// Evaluates device/kernels/exec/geometry.cuh on the host for geometry.rs: one query a line on
// stdin, one answer a line on stdout (formats in geometry.rs).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "geometry.cuh"

using weft::exec::ChunkGeometry;

namespace {

// One geometry's answers to a chunk query: `c` a class, `i` an input or output chunk, and
// `counts` (`rows` rows) a scratch table, `s` a scratch chunk.
template <uint64_t Elem>
void answer(char kind, uint64_t unit, uint32_t classes, uint32_t scale, uint32_t c, uint64_t i,
            const std::vector<uint32_t>& counts, uint64_t s) {
  const auto g = ChunkGeometry<Elem>::make(unit, classes, scale);
  if (kind == 'g') {
    std::printf("%llu %llu %llu %llu %llu %u\n", (unsigned long long)g.class_len(c),
                (unsigned long long)g.class_bytes(c), (unsigned long long)g.padded_class(c),
                (unsigned long long)g.dense(i), (unsigned long long)g.padded_dense(i), g.class_of(1, nullptr, i));
  } else {
    const bool has_class = (s + 1) * classes < counts.size();
    std::printf("%llu %d\n", (unsigned long long)g.padded_scratch(counts.data(), s),
                has_class ? static_cast<int>(g.class_of(2, counts.data(), s)) : -1);
  }
}

}  // namespace

int main() {
  std::string kind;
  while (std::cin >> kind) {
    if (kind == "o") {
      uint64_t bytes;
      uint32_t part, parts, r, n;
      std::cin >> bytes >> part >> parts >> r >> n;
      uint64_t begin, end, rb, re;
      weft::exec::op_slice(bytes, parts, [part] { return part; }, r, n, begin, end);
      weft::exec::replica_slice(bytes, r, n, rb, re);
      std::printf("%llu %llu %llu %llu\n", (unsigned long long)begin, (unsigned long long)end,
                  (unsigned long long)rb, (unsigned long long)re);
      continue;
    }
    // g elem unit classes scale c i
    // s elem unit classes scale rows counts... s
    uint64_t elem, unit, i = 0, s = 0;
    uint32_t classes, scale, c = 0;
    std::vector<uint32_t> counts;
    std::cin >> elem >> unit >> classes >> scale;
    if (kind == "g") {
      std::cin >> c >> i;
    } else {
      size_t rows;
      std::cin >> rows;
      counts.resize(rows * classes);
      for (auto& k : counts) std::cin >> k;
      std::cin >> s;
    }
    switch (elem) {
      case 1: answer<1>(kind[0], unit, classes, scale, c, i, counts, s); break;
      case 2: answer<2>(kind[0], unit, classes, scale, c, i, counts, s); break;
      case 4: answer<4>(kind[0], unit, classes, scale, c, i, counts, s); break;
      case 8: answer<8>(kind[0], unit, classes, scale, c, i, counts, s); break;
      default: std::printf("bad element width %llu\n", (unsigned long long)elem); return 1;
    }
  }
  return 0;
}
