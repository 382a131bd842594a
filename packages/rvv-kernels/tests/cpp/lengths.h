// Row lengths shared by the element-wise kernel tests: tiny, prime, around powers of two,
// model-sized (1536 = Qwen2.5-1.5B's hidden size, 8960 its MLP width), and every tail
// around 1..k times the LMUL-4 fp32 vector length of each VLEN the tests run at.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace rvvk_test {

inline std::vector<std::int64_t> row_lengths(unsigned vlen_bits, std::int64_t max_multiple = 4,
                                             std::set<std::int64_t> base = {1, 7, 16, 17, 255,
                                                                            1536, 8960}) {
  for (unsigned v : {128u, 256u, 512u, 1024u, vlen_bits}) {
    const std::int64_t vl = v / 32 * 4;
    for (std::int64_t k = 1; k <= max_multiple; ++k)
      for (std::int64_t d = -1; d <= 1; ++d) base.insert(k * vl + d);
  }
  return {base.begin(), base.end()};
}

}  // namespace rvvk_test
