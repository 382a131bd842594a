// Linear layers: weight packing, fp32/bf16/fp16 GEMM with fp32 accumulation, per-row
// int8 quantisation and the W8A8 int8 GEMM with exact int32 accumulation.
//
// Both GEMMs share one shape: for a block of MR rows and a chunk of a weight panel
// (one vector of output channels), MR accumulators stay in registers for the whole K
// loop; each weight vector is loaded once and used for all MR rows. With M <= 8
// (decode) one block covers every row, so each weight byte is read once per call
// ("weight streaming"); larger M (prefill) runs register blocks of 4 (float) or
// 6 (int8) rows over panel groups small enough to stay in L2.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"
#include "linear_common.h"

namespace rvvk::RVVK_NS {
namespace {

using detail::TypeTag;

std::int64_t group_panels(const PackedWeightHeader& h) {
  return panels_per_group(h.k_padded * h.panel * packed_element_bytes(h.dtype));
}

const unsigned char* panel_data(const PackedWeightHeader& h, std::int64_t p) {
  return reinterpret_cast<const unsigned char*>(&h) + kPackedWeightHeaderBytes +
         p * h.k_padded * h.panel * packed_element_bytes(h.dtype);
}

// ---------------------------------------------------------------------------
// Float GEMM micro-kernel: rows [0, MR) of xs (fp32, row stride xs_stride, k_padded
// columns, zero past k) times one panel, written to out columns [n0, min(n0 + panel, n)).
// Each output is one fp32 FMA chain over k = 0, 1, ... in order.
// Out of line: inlined into for_each_block's lambda, clang-16 runs short of registers
// and recomputes loop invariants inside the K loop.
template <int L, int MR, class WT, class OutT>
__attribute__((noinline)) void float_block(const PackedWeightHeader& h,
                                           const unsigned char* panel, const float* xs,
                                           std::int64_t xs_stride, std::int64_t n0,
                                           const float* bias, OutT* out,
                                           std::int64_t out_stride) {
  using F = vec::F32<L>;
  const std::int64_t nr = h.panel;
  const std::int64_t cols_left = std::min(nr, h.n - n0);
  for (std::int64_t c = 0; c < cols_left;) {
    // A strip of min(columns left, VLMAX) channels: a length setvl may return, taken as
    // a plain min so that the strip's vector instructions read it from a register. With
    // setvl's result clang-16 starts the K loop in a different vector state (setvl's
    // mask-undisturbed policy) than the loop ends in, and re-issues a vsetvli every step.
    const std::size_t vl = std::min(static_cast<std::size_t>(nr - c), F::vlmax());
#define RVVK_DECL(i)                                     \
  typename F::V acc##i = F::splat(0.0f, vl);             \
  const float* x##i = xs + (MR > i ? i : 0) * xs_stride; \
  (void)x##i;
    RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
    if constexpr (std::is_same_v<WT, bf16>) {
      const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(panel) + c;
      // One word: W[., k] in its low half, W[., k + 1] in its high half; xk is k's offset
      // from the x row pointers.
#define RVVK_WORD(wp, xk)                                        \
  {                                                              \
    const std::int64_t xo = (xk);                                \
    const typename F::U u = F::load_u32(wp, vl);                 \
    const typename F::V lo = F::bf16_low(u, vl);                 \
    RVVK_ROWS(RVVK_LO)                                           \
    const typename F::V hi = F::bf16_high(u, vl);                \
    RVVK_ROWS(RVVK_HI)                                           \
  }
#define RVVK_LO(i) \
  if constexpr (MR > i) acc##i = F::fmacc(acc##i, x##i[xo], lo, vl);
#define RVVK_HI(i) \
  if constexpr (MR > i) acc##i = F::fmacc(acc##i, x##i[xo + 1], hi, vl);
#define RVVK_NEXT(i) \
  if constexpr (MR > i) x##i += 2 * kWords;
      // kWords words (2 kWords k's) per step share the step's pointer updates and branch
      // (fewer with more rows, whose accumulators take the registers), then the words left.
      constexpr std::int64_t kWords = MR == 1 ? 4 : 2;
      const std::int64_t words = h.k_padded / 2;
      const std::uint32_t* const w_steps_end = w + words / kWords * kWords * nr;
      for (; w != w_steps_end; w += kWords * nr) {
#pragma GCC unroll 4
        for (std::int64_t j = 0; j < kWords; ++j) RVVK_WORD(w + j * nr, 2 * j)
        RVVK_ROWS(RVVK_NEXT)
      }
      for (std::int64_t j = 0; j < words % kWords; ++j) RVVK_WORD(w + j * nr, 2 * j)
#undef RVVK_NEXT
#undef RVVK_HI
#undef RVVK_LO
#undef RVVK_WORD
    } else {
      const WT* w = reinterpret_cast<const WT*>(panel) + c;
      for (std::int64_t k = 0; k < h.k; ++k, w += nr) {
        const typename F::V wv = F::load(w, vl);
#define RVVK_MAC(i) \
  if constexpr (MR > i) acc##i = F::fmacc(acc##i, x##i[k], wv, vl);
        RVVK_ROWS(RVVK_MAC)
#undef RVVK_MAC
      }
    }
    const std::size_t cols = static_cast<std::size_t>(std::min<std::int64_t>(
        static_cast<std::int64_t>(vl), cols_left - c));
    const typename F::V b =
        bias ? F::load(bias + n0 + c, cols) : F::splat(0.0f, cols);
#define RVVK_STORE(i) \
  if constexpr (MR > i) F::store(out + i * out_stride + n0 + c, F::add(acc##i, b, cols), cols);
    RVVK_ROWS(RVVK_STORE)
#undef RVVK_STORE
    c += static_cast<std::int64_t>(vl);
  }
}

// Rows per register block and the LMUL that keeps them in the 32 vector registers:
// MR accumulators of L registers plus the weight vector and its widened halves.
template <class WT, class OutT>
void float_rows(int mr, const PackedWeightHeader& h, const unsigned char* panel,
                const float* xs, std::int64_t xs_stride, std::int64_t n0, const float* bias,
                OutT* out, std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L)                                                                  \
  case R:                                                                                \
    return float_block<L, R, WT, OutT>(h, panel, xs, xs_stride, n0, bias, out, out_stride);
    RVVK_CASE(1, 4) RVVK_CASE(2, 4) RVVK_CASE(3, 4) RVVK_CASE(4, 4)
    RVVK_CASE(5, 2) RVVK_CASE(6, 2) RVVK_CASE(7, 2) RVVK_CASE(8, 2)
#undef RVVK_CASE
  }
}
constexpr int kFloatBlockRows = 4;

template <class WT, class OutT>
void linear_impl(const LinearArgs& a, const PackedWeightHeader& h, std::int64_t pb,
                 std::int64_t pe) {
  // x rows in fp32, zero-padded to k_padded columns: scalar operands of vfmacc.vf.
  const std::int64_t kp = h.k_padded;
  std::vector<float> xs(static_cast<std::size_t>(a.m * kp), 0.0f);
  for (std::int64_t r = 0; r < a.m; ++r) {
    to_f32(a.x_dtype,
           static_cast<const unsigned char*>(a.x) +
               r * a.x_stride * packed_element_bytes(a.x_dtype),
           xs.data() + r * kp, h.k);
  }
  const std::vector<float> bias = bias_f32(a.bias, a.bias_dtype, h.n);
  OutT* out = static_cast<OutT*>(a.out);
  for_each_block(group_panels(h), a.m, kFloatBlockRows, pb, pe, [&](std::int64_t r, int mr, std::int64_t p) {
    float_rows<WT, OutT>(mr, h, panel_data(h, p), xs.data() + r * kp, kp, p * h.panel,
                         a.bias ? bias.data() : nullptr, out + r * a.out_stride, a.out_stride);
  });
}

// ---------------------------------------------------------------------------
// W8A8 micro-kernel. `pairs`: no activation is -128, so two k's may be summed in
// int16 before widening (|a0 w0 + a1 w1| <= 127 * 128 * 2 < 32768).
template <int L, int MR, bool kPairs, class OutT>
void int8_block(const PackedWeightHeader& h, const unsigned char* panel,
                const std::int8_t* a_rows, std::int64_t a_stride, const float* a_scales,
                std::int64_t n0, const float* w_scales, const float* bias, OutT* out,
                std::int64_t out_stride) {
  using I = vec::I8Acc<L>;
  using F = vec::F32<L>;
  const std::int64_t nr = h.panel;
  const std::int64_t cols_left = std::min(nr, h.n - n0);
  const std::int64_t k_even = h.k & ~std::int64_t{1};
  for (std::int64_t c = 0; c < cols_left;) {
    const std::size_t vl = I::setvl(static_cast<std::size_t>(nr - c));
#define RVVK_DECL(i)                                                  \
  typename I::V acc##i = I::zero(vl);                                 \
  const std::int8_t* a##i = a_rows + (MR > i ? i : 0) * a_stride;     \
  (void)a##i;
    RVVK_ROWS(RVVK_DECL)
#undef RVVK_DECL
    const std::int8_t* w = reinterpret_cast<const std::int8_t*>(panel) + c;
    std::int64_t k = 0;
    if constexpr (kPairs) {
      for (; k < k_even; k += 2, w += 2 * nr) {
        const typename I::W w0 = I::load(w, vl);
        const typename I::W w1 = I::load(w + nr, vl);
#define RVVK_MAC2(i) \
  if constexpr (MR > i) acc##i = I::macc2(acc##i, a##i[k], w0, a##i[k + 1], w1, vl);
        RVVK_ROWS(RVVK_MAC2)
#undef RVVK_MAC2
      }
    }
    for (; k < h.k; ++k, w += nr) {
      const typename I::W w0 = I::load(w, vl);
#define RVVK_MAC(i) \
  if constexpr (MR > i) acc##i = I::macc(acc##i, a##i[k], w0, vl);
      RVVK_ROWS(RVVK_MAC)
#undef RVVK_MAC
    }
    const std::size_t cols = static_cast<std::size_t>(std::min<std::int64_t>(
        static_cast<std::int64_t>(vl), cols_left - c));
    const typename F::V ws = F::load(w_scales + n0 + c, cols);
    const typename F::V b = bias ? F::load(bias + n0 + c, cols) : F::splat(0.0f, cols);
    // SGLang's order: (a_scale * acc) * w_scale + bias, in fp32.
#define RVVK_STORE(i)                                                                    \
  if constexpr (MR > i) {                                                                \
    const typename F::V y = F::mul(F::mul(I::to_f32(acc##i, cols), a_scales[i], cols), ws, cols); \
    F::store(out + i * out_stride + n0 + c, F::add(y, b, cols), cols);                   \
  }
    RVVK_ROWS(RVVK_STORE)
#undef RVVK_STORE
    c += static_cast<std::int64_t>(vl);
  }
}

template <bool kPairs, class OutT>
void int8_rows(int mr, const PackedWeightHeader& h, const unsigned char* panel,
               const std::int8_t* a_rows, std::int64_t a_stride, const float* a_scales,
               std::int64_t n0, const float* w_scales, const float* bias, OutT* out,
               std::int64_t out_stride) {
  switch (mr) {
#define RVVK_CASE(R, L)                                                                \
  case R:                                                                              \
    return int8_block<L, R, kPairs, OutT>(h, panel, a_rows, a_stride, a_scales, n0,    \
                                          w_scales, bias, out, out_stride);
    RVVK_CASE(1, 8) RVVK_CASE(2, 8) RVVK_CASE(3, 4) RVVK_CASE(4, 4)
    RVVK_CASE(5, 4) RVVK_CASE(6, 4) RVVK_CASE(7, 2) RVVK_CASE(8, 2)
#undef RVVK_CASE
  }
}
constexpr int kInt8BlockRows = 6;

template <class OutT>
void int8_linear_impl(const Int8LinearArgs& a, const PackedWeightHeader& h, std::int64_t pb,
                      std::int64_t pe) {
  bool pairs = true;
  for (std::int64_t r = 0; r < a.m && pairs; ++r) {
    const std::int8_t* row = a.a + r * a.a_stride;
    for (std::int64_t k = 0; k < h.k; ++k) pairs &= row[k] != -128;
  }
  const std::vector<float> bias = bias_f32(a.bias, a.bias_dtype, h.n);
  OutT* out = static_cast<OutT*>(a.out);
  for_each_block(group_panels(h), a.m, kInt8BlockRows, pb, pe, [&](std::int64_t r, int mr, std::int64_t p) {
    const auto run = [&](auto pair_tag) {
      int8_rows<decltype(pair_tag)::value, OutT>(
          mr, h, panel_data(h, p), a.a + r * a.a_stride, a.a_stride, a.a_scales + r,
          p * h.panel, a.w_scales, a.bias ? bias.data() : nullptr, out + r * a.out_stride,
          a.out_stride);
    };
    if (pairs) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  });
}

}  // namespace

void pack_weight_layout(DType dtype, std::int64_t n, std::int64_t k,
                        PackedWeightHeader* header) {
  PackedWeightHeader h;
  h.dtype = dtype;
  h.layout = dtype == DType::kBF16 ? PackedLayout::kPairs : PackedLayout::kRows;
  h.n = n;
  h.k = k;
  // One LMUL-4 fp32 vector of channels for float weights (the GEMM's accumulator
  // width); one LMUL-8 int32 vector for int8 (its K loop is cheaper per element, so
  // wider accumulators pay off).
  h.panel = static_cast<std::int64_t>(dtype == DType::kI8 ? vec::I8Acc<8>::vlmax()
                                                          : vec::F32<4>::vlmax());
  h.k_padded = k + (k & 1);
  h.bytes = kPackedWeightHeaderBytes + linear_tasks(h) * h.panel * h.k_padded *
                                           packed_element_bytes(dtype);
  h.vlen_bits = static_cast<std::int64_t>(vec::vlen_bits());
  *header = h;
}

void pack_weight(const PackedWeightHeader& h, const void* w, std::int64_t w_stride,
                 void* packed) {
  std::memcpy(packed, &h, sizeof h);
  unsigned char* base = static_cast<unsigned char*>(packed) + kPackedWeightHeaderBytes;
  const std::int64_t es = packed_element_bytes(h.dtype);
  std::memset(base, 0, static_cast<std::size_t>(h.bytes - kPackedWeightHeaderBytes));
  const unsigned char* src = static_cast<const unsigned char*>(w);
  for (std::int64_t j = 0; j < h.n; ++j) {
    const std::int64_t p = j / h.panel, jj = j % h.panel;
    unsigned char* pd = base + p * h.k_padded * h.panel * es;
    const unsigned char* row = src + j * w_stride * es;
    if (h.layout == PackedLayout::kPairs) {
      for (std::int64_t k = 0; k < h.k; ++k) {
        // word (k / 2, jj), half k % 2: element index ((k / 2) * panel + jj) * 2 + k % 2
        std::memcpy(pd + (((k / 2) * h.panel + jj) * 2 + (k & 1)) * 2, row + k * 2, 2);
      }
    } else {
      for (std::int64_t k = 0; k < h.k; ++k) {
        std::memcpy(pd + (k * h.panel + jj) * es, row + k * es, static_cast<std::size_t>(es));
      }
    }
  }
}

void linear(const LinearArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  const auto& h = *static_cast<const PackedWeightHeader*>(a.packed);
  if (panel_begin >= panel_end || a.m <= 0) return;
  detail::visit_activation(h.dtype, [&](auto wtag) {
    using WT = typename decltype(wtag)::type;
    detail::visit_activation(a.out_dtype, [&](auto otag) {
      linear_impl<WT, typename decltype(otag)::type>(a, h, panel_begin, panel_end);
    });
  });
}

void quantize_int8_rows(DType dtype, const void* x, std::int64_t x_stride, std::int64_t rows,
                        std::int64_t cols, std::int8_t* q, std::int64_t q_stride,
                        float* scales) {
  using F = vec::F32<4>;
  detail::visit_activation(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = static_cast<const T*>(x) + r * x_stride;
      float amax = 1e-10f;  // SGLang's clamp_min: an all-zero row gets a tiny scale, q = 0
      for (std::int64_t i = 0; i < cols;) {
        const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
        amax = std::max(amax, F::reduce_max(F::abs(F::load(row + i, vl), vl), vl));
        i += static_cast<std::int64_t>(vl);
      }
      scales[r] = amax / 127.0f;
      // 127 * (1 / amax), rounded twice: what torch computes for SGLang's `127 / absmax`
      // (a Python number over a tensor is a reciprocal times the number).
      const float inv = 127.0f * (1.0f / amax);
      std::int8_t* qr = q + r * q_stride;
      for (std::int64_t i = 0; i < cols;) {
        const std::size_t vl = F::setvl(static_cast<std::size_t>(cols - i));
        F::store_i8_rne(qr + i, F::mul(F::load(row + i, vl), inv, vl), vl);
        i += static_cast<std::int64_t>(vl);
      }
    }
  });
}

void int8_linear(const Int8LinearArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  const auto& h = *static_cast<const PackedWeightHeader*>(a.packed);
  if (panel_begin >= panel_end || a.m <= 0) return;
  detail::visit_activation(a.out_dtype, [&](auto otag) {
    int8_linear_impl<typename decltype(otag)::type>(a, h, panel_begin, panel_end);
  });
}

}  // namespace rvvk::RVVK_NS
