// Evaluates device/include/weft/ll_flags.cuh on the host for ll_flags.rs. Queries, a line each on
// stdin, each answered by one line:
//   after LAST         ll_flag_after(LAST)
//   back FLAG          ll_flag_two_back(FLAG)
//   behind SEEN WANT   1 when ll_token_behind(SEEN, WANT), else 0
#include <cstdio>
#include <iostream>
#include <string>

#include "weft/ll_flags.cuh"

int main() {
  std::string kind;
  while (std::cin >> kind) {
    unsigned long long a = 0, b = 0;
    if (kind == "after") {
      std::cin >> a;
      std::printf("%u\n", weft::ll_flag_after(static_cast<uint32_t>(a)));
    } else if (kind == "back") {
      std::cin >> a;
      std::printf("%u\n", weft::ll_flag_two_back(static_cast<uint32_t>(a)));
    } else if (kind == "behind") {
      std::cin >> a >> b;
      std::printf("%d\n", weft::ll_token_behind(static_cast<uint32_t>(a), static_cast<uint32_t>(b)) ? 1 : 0);
    }
    std::fflush(stdout);
  }
  return 0;
}
