// FP8 e4m3 W8A16 linear with block scales (Fp8LinearArgs): y = x @ W^T + bias, W[j, k] =
// fp8(w[j, k]) * scales[k / block_k, j], fp32 arithmetic.
//
// The shape of linear.cpp's GEMMs: for a block of MR rows and one vector of output
// channels of a panel, the accumulators stay in registers for the whole K loop and each
// weight vector is decoded once (Fp8Weights, linear_fp8_isa.h: fp8 bytes to fp32 by
// integer operations) and used for all MR rows. M <= 8 (decode) is one block, so each
// weight byte is read and decoded once per call; larger M runs blocks of 6 rows over
// panel groups small enough to stay in L2.
//
// Block scales: per k block, each row sums x * fp8 unscaled in a second register group,
// then acc += block_sum * scales[b, channels] (one fused multiply-add); the bias is
// added at the end. The decoded weight is fp8 * 2^kExponent (2^-120 for the integer
// decode): each activation row is scaled by an exact 2^64 when converted to fp32 and the
// block scales by 2^(-kExponent - 64) (= 2^56), so the products x * fp8 * 2^-56 stay
// clear of fp32's subnormal range. Every rounding is then that of fp32 arithmetic on the
// unscaled values as long as each nonzero |x| lies in [2^-61, 2^64) (products and
// partial sums at least 2^-70 in magnitude) and every scale is below 2^72.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "linear_common.h"
#include "linear_fp8_isa.h"
#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {
namespace {

// What one register block needs besides its rows, channels and LMUL.
struct Fp8Problem {
  const PackedWeightHeader* h;
  const float* xs;         // activations in fp32 times x_scale, [m, k], row stride k
  const float* scales;     // [ceil(k / block_k), n]
  std::int64_t block_k;
  float scale_fix;         // 2^(-kExponent - x exponent): undoes both powers of two
  const float* bias;       // fp32 [n] or null
};

// Rows [0, MR) of xs (row stride xs_stride) times the panel starting at channel n0.
template <int L, int MR, class OutT>
void fp8_block(const Fp8Problem& pr, const std::uint8_t* panel, const float* xs,
               std::int64_t xs_stride, std::int64_t n0, OutT* out, std::int64_t out_stride) {
  using F = vec::F32<L>;
  using D = Fp8Weights<L>;
  const PackedWeightHeader& h = *pr.h;
  const std::int64_t nr = h.panel, bk = pr.block_k;
  const std::int64_t cols_left = std::min(nr, h.n - n0);
  // Groups of 4 or 2 k (decoded together: half or a quarter of the loop overhead and, for
  // a decode switching element widths, of the vtype changes) where their decoded weight
  // vectors fit beside the 2 MR accumulator groups.
  constexpr bool kQuads = 2 * MR * L + 4 * L <= 24;
  constexpr bool kPairs = 2 * MR * L + 2 * L <= 24;
  for (std::int64_t c = 0; c < cols_left;) {
    // Only real channels: the scale and bias loads stay inside their [.., n] rows.
    const std::size_t vl = F::setvl(static_cast<std::size_t>(cols_left - c));
#define RVVK_DECL(i)                                     \
  typename F::V acc##i = F::splat(0.0f, vl);             \
  typename F::V sum##i = acc##i;                         \
  const float* x##i = xs + (MR > i ? i : 0) * xs_stride; \
  (void)x##i;                                            \
  (void)sum##i;
    RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
    const std::uint8_t* w = panel + c;
    const float* srow = pr.scales + n0 + c;
    for (std::int64_t kb = 0; kb < h.k; kb += bk, srow += h.n) {
      const std::int64_t ke = std::min(h.k, kb + bk);
      {
        const typename F::V wv = D::load(w, vl);
        w += nr;
#define RVVK_FIRST(i) \
  if constexpr (MR > i) sum##i = F::mul(wv, x##i[kb], vl);
        RVVK_ROWS(RVVK_FIRST)
#undef RVVK_FIRST
      }
      std::int64_t k = kb + 1;
      if constexpr (kQuads) {
        for (; k + 3 < ke; k += 4, w += 4 * nr) {
          D::load4(w, nr, vl,
                   [&](typename F::V w0, typename F::V w1, typename F::V w2,
                       typename F::V w3) RVVK_ALWAYS_INLINE {
#define RVVK_MAC4(i)                                \
  if constexpr (MR > i) {                           \
    sum##i = D::mac(sum##i, x##i[k], w0, vl);       \
    sum##i = D::mac(sum##i, x##i[k + 1], w1, vl);   \
    sum##i = D::mac(sum##i, x##i[k + 2], w2, vl);   \
    sum##i = D::mac(sum##i, x##i[k + 3], w3, vl);   \
  }
                     RVVK_ROWS(RVVK_MAC4)
#undef RVVK_MAC4
                   });
        }
      }
      if constexpr (kPairs) {
        for (; k + 1 < ke; k += 2, w += 2 * nr) {
          D::load2(w, w + nr, vl,
                   [&](typename F::V w0, typename F::V w1) RVVK_ALWAYS_INLINE {
#define RVVK_MAC2(i)                                \
  if constexpr (MR > i) {                           \
    sum##i = D::mac(sum##i, x##i[k], w0, vl);       \
    sum##i = D::mac(sum##i, x##i[k + 1], w1, vl);   \
  }
                     RVVK_ROWS(RVVK_MAC2)
#undef RVVK_MAC2
                   });
        }
      }
      for (; k < ke; ++k, w += nr) {
        const typename F::V wv = D::load(w, vl);
#define RVVK_MAC(i) \
  if constexpr (MR > i) sum##i = F::fmacc(sum##i, x##i[k], wv, vl);
        RVVK_ROWS(RVVK_MAC)
#undef RVVK_MAC
      }
      const typename F::V s = F::mul(F::load(srow, vl), pr.scale_fix, vl);
#define RVVK_SCALE(i) \
  if constexpr (MR > i) acc##i = F::fmacc(acc##i, sum##i, s, vl);
      RVVK_ROWS(RVVK_SCALE)
#undef RVVK_SCALE
    }
    const typename F::V b = pr.bias ? F::load(pr.bias + n0 + c, vl) : F::splat(0.0f, vl);
#define RVVK_STORE(i) \
  if constexpr (MR > i) F::store(out + i * out_stride + n0 + c, F::add(acc##i, b, vl), vl);
    RVVK_ROWS(RVVK_STORE)
#undef RVVK_STORE
    c += static_cast<std::int64_t>(vl);
  }
}

// LMUL per block height: 2 MR accumulator groups (total and block sum) of L registers,
// the decoded weight vector and its byte source within the 32 vector registers.
template <class OutT>
void fp8_rows(int mr, const Fp8Problem& pr, const std::uint8_t* panel, const float* xs,
              std::int64_t xs_stride, std::int64_t n0, OutT* out, std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L) \
  case R:               \
    return fp8_block<L, R, OutT>(pr, panel, xs, xs_stride, n0, out, out_stride);
    RVVK_CASE(1, 4) RVVK_CASE(2, 4) RVVK_CASE(3, 2) RVVK_CASE(4, 2)
    RVVK_CASE(5, 2) RVVK_CASE(6, 2) RVVK_CASE(7, 1) RVVK_CASE(8, 1)
#undef RVVK_CASE
  }
}
constexpr int kFp8BlockRows = 6;

template <class OutT>
void fp8_linear_impl(const Fp8LinearArgs& a, const PackedWeightHeader& h, std::int64_t pb,
                     std::int64_t pe) {
  // The activation power of two keeps x * decoded weight above fp32's subnormals.
  constexpr int kWeightExp = Fp8Weights<1>::kExponent;
  constexpr int kXExp = kWeightExp <= -64 ? 64 : 0;
  const float x_scale = std::ldexp(1.0f, kXExp);
  const std::int64_t k = h.k;
  std::vector<float> xs(static_cast<std::size_t>(a.m * k));
  for (std::int64_t r = 0; r < a.m; ++r) {
    float* row = xs.data() + r * k;
    to_f32(a.x_dtype,
           static_cast<const unsigned char*>(a.x) +
               r * a.x_stride * packed_element_bytes(a.x_dtype),
           row, k);
    for (std::int64_t i = 0; i < k; ++i) row[i] *= x_scale;
  }
  const std::vector<float> bias = bias_f32(a.bias, a.bias_dtype, h.n);
  const Fp8Problem pr{&h,        xs.data(), a.scales, a.block_k,
                      std::ldexp(1.0f, -(kWeightExp + kXExp)),
                      a.bias ? bias.data() : nullptr};
  const unsigned char* panels =
      reinterpret_cast<const unsigned char*>(&h) + kPackedWeightHeaderBytes;
  const std::int64_t panel_bytes = h.k_padded * h.panel;
  OutT* out = static_cast<OutT*>(a.out);
  for_each_block(panels_per_group(panel_bytes), a.m, kFp8BlockRows, pb, pe,
                 [&](std::int64_t r, int mr, std::int64_t p) {
                   fp8_rows<OutT>(mr, pr, panels + p * panel_bytes, xs.data() + r * k, k,
                                  p * h.panel, out + r * a.out_stride, a.out_stride);
                 });
}

}  // namespace

void fp8_linear(const Fp8LinearArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  const auto& h = *static_cast<const PackedWeightHeader*>(a.packed);
  if (panel_begin >= panel_end || a.m <= 0) return;
  detail::visit_activation(a.out_dtype, [&](auto otag) {
    fp8_linear_impl<typename decltype(otag)::type>(a, h, panel_begin, panel_end);
  });
}

}  // namespace rvvk::RVVK_NS
