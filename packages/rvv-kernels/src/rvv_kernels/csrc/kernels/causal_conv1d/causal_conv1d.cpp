// Depthwise causal 1-D convolution over one sequence (Mamba / Gated DeltaNet's short conv),
// vectorised over channels, fp32 throughout.
#include <cstddef>
#include <cstdint>

#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

using F = vec::F32<2>;

// Row r of the window [history (width - 1 rows); x (tokens rows)], r in [0, width - 1 + tokens).
inline const float* window_row(const float* x, std::int64_t x_stride, const float* hist,
                               std::int64_t ld, std::int64_t width, std::int64_t r) {
  const std::int64_t h = width - 1;
  return r < h ? hist + r * ld : x + (r - h) * x_stride;
}

}  // namespace

void causal_conv1d(const float* x, std::int64_t x_stride, const float* hist,
                   const float* weight_t, std::int64_t ld, const float* bias, float* out,
                   std::int64_t out_stride, std::int64_t tokens, std::int64_t channels,
                   std::int64_t width, bool silu) {
  if (tokens <= 0 || channels <= 0 || width <= 0) return;
  for (std::int64_t c = 0; c < channels;) {
    const std::size_t vl = F::setvl(static_cast<std::size_t>(channels - c));
    for (std::int64_t t = 0; t < tokens; ++t) {
      F::V acc = bias != nullptr ? F::load(bias + c, vl) : F::splat(0.0f, vl);
      for (std::int64_t w = 0; w < width; ++w) {
        const float* row = window_row(x, x_stride, hist, ld, width, t + w);
        acc = F::fmacc(acc, F::load(weight_t + w * ld + c, vl), F::load(row + c, vl), vl);
      }
      if (silu) {
        // x / (1 + exp(-x))
        const F::V e = F::exp(F::mul(acc, -1.0f, vl), vl);
        acc = F::div(acc, F::add(e, 1.0f, vl), vl);
      }
      F::store(out + t * out_stride + c, acc, vl);
    }
    c += static_cast<std::int64_t>(vl);
  }
}

}  // namespace rvvk::RVVK_NS
