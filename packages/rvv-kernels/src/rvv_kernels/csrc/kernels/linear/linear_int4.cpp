// INT4 linear layers with groups along K (AWQ / GPTQ weights): packing and the W4A8 and
// W4A16 GEMMs over the same packed weight (see PackedInt4Header and Int4LinearArgs).
//
// The driver here prepares what every micro-kernel call shares - the activations of each
// register block of rows interleaved k-major ([k_padded][rows], zero past k; W4A8: int8
// with the per-group row sums S[i, g] = sum_{k in g} a[i, k]; W4A16: fp32), the bias in
// fp32 - and runs the ISA's micro-kernels (linear_int4_isa.h,
// rvv/ or generic/) over register blocks of rows and panels: M <= 8 (decode) in one block,
// so each weight byte is read once per call; larger M in blocks of kInt4BlockRows rows
// over panel groups that stay in L2 (for_each_block).
//
// W4A8 keeps the nibbles unsigned: sum_k a_k (q_k - z) = sum_k a_k q_k - z S_g, all exact
// in int32; per group, in fp32, y += (float(acc) * a_scale) * scale, starting from the
// bias (Int4LinearArgs' order). W4A16 dequantises (q - z) in registers, sums
// x_k (q_k - z) in fp32 per group, then y += scale * sum; with Zvfh (the rvv_zvfh
// variant) bf16 / fp16 activations take an fp16-multiply kernel instead (w4a16_half).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"
#include "linear_common.h"

namespace rvvk::RVVK_NS {
namespace {

// What one micro-kernel call needs besides its rows: the weight's shape, groups and the
// per-channel scales and zero points.
struct Int4Ctx {
  std::int64_t n = 0, k_padded = 0, panel = 0;
  std::int64_t group_size = 0, groups = 0;
  const float* scales = nullptr;         // [groups, n]
  const std::uint8_t* zeros = nullptr;   // [groups, n]
  const float* bias = nullptr;           // [n] fp32 or null
  float* ybuf = nullptr;                 // [8, panel] fp32 scratch: the rows' running sums
  // Byte rows [begin, end) of group g (two k's per byte row; the last group ends at
  // k_padded / 2, so an odd k with group_size == k keeps its padded nibble).
  std::int64_t group_begin(std::int64_t g) const { return g * group_size / 2; }
  std::int64_t group_end(std::int64_t g) const {
    return g + 1 == groups ? k_padded / 2 : (g + 1) * group_size / 2;
  }
};

}  // namespace
}  // namespace rvvk::RVVK_NS

#include "linear_int4_isa.h"

namespace rvvk::RVVK_NS {
namespace {

// Rows per register block for M > 8 (prefill).
constexpr int kInt4BlockRows = 8;

const std::uint8_t* int4_panel(const PackedInt4Header& h, std::int64_t p) {
  return reinterpret_cast<const std::uint8_t*>(&h) + kPackedWeightHeaderBytes +
         p * (h.k_padded / 2) * h.panel;
}

#if defined(RVVK_INT4_W4A16_HALF)
// W4A16 with bf16 / fp16 activations on the fp16 kernel (rvv_zvfh/linear_int4_isa.h):
// each row as fp16 x' = x * 2^e, e chosen per row so that max|x'| lies in [2^14, 2^15)
// (e = 0 for a row of zeros; at most 126, so that 2^-e is a normal fp32): bf16's 8
// significant bits then fit fp16's down to max|x| * 2^-31, where fp16 turns subnormal,
// and smaller values round to fp16's 2^-24 step (error <= 2^-25 in x' units). Per row
// and group, X_g = sum of the group's x' (in double, rounded once to fp32) for the zero
// points' term, and 2^-e to undo the scaling at the end.
template <class OutT>
void w4a16_half(const Int4LinearArgs& a, const PackedInt4Header& h, const Int4Ctx& cx,
                std::int64_t group, std::int64_t pb, std::int64_t pe) {
  const std::int64_t kp = h.k_padded;
  std::vector<float> row(static_cast<std::size_t>(h.k));
  std::vector<_Float16> xh(static_cast<std::size_t>(a.m * kp), static_cast<_Float16>(0.0f));
  std::vector<float> xsum(static_cast<std::size_t>(a.m * cx.groups));
  std::vector<float> unscale(static_cast<std::size_t>(a.m));
  row_blocks(a.m, kInt4BlockRows, [&](std::int64_t r, int mr) {
    for (int i = 0; i < mr; ++i) {
      to_f32(a.x_dtype,
             static_cast<const unsigned char*>(a.x) +
                 (r + i) * a.x_stride * packed_element_bytes(a.x_dtype),
             row.data(), h.k);
      float amax = 0.0f;
      for (float v : row) amax = std::max(amax, std::fabs(v));
      int e = 0;
      if (amax > 0.0f) {
        int ex = 0;
        std::frexp(amax, &ex);  // amax in [2^(ex - 1), 2^ex)
        e = std::min(15 - ex, 126);
      }
      const float up = std::ldexp(1.0f, e);
      unscale[static_cast<std::size_t>(r + i)] = std::ldexp(1.0f, -e);
      _Float16* blk = xh.data() + r * kp;
      for (std::int64_t k = 0; k < h.k; ++k) {
        blk[k * mr + i] = static_cast<_Float16>(row[static_cast<std::size_t>(k)] * up);
      }
      for (std::int64_t g = 0; g < cx.groups; ++g) {
        double s = 0.0;
        const std::int64_t ke = std::min(h.k, 2 * cx.group_end(g));
        for (std::int64_t k = 2 * cx.group_begin(g); k < ke; ++k) {
          s += static_cast<double>(blk[k * mr + i]);
        }
        xsum[static_cast<std::size_t>((r + i) * cx.groups + g)] = static_cast<float>(s);
      }
    }
  });
  OutT* out = static_cast<OutT*>(a.out);
  for_each_block(group, a.m, kInt4BlockRows, pb, pe, [&](std::int64_t r, int mr, std::int64_t p) {
    int4isa::w4a16h_rows<OutT>(mr, cx, int4_panel(h, p), xh.data() + r * kp,
                               xsum.data() + r * cx.groups, unscale.data() + r, p * h.panel,
                               out + r * a.out_stride, a.out_stride);
  });
}
#endif

template <class OutT>
void int4_impl(const Int4LinearArgs& a, const PackedInt4Header& h, std::int64_t pb,
               std::int64_t pe) {
  const std::int64_t kp = h.k_padded;
  Int4Ctx cx;
  cx.n = h.n;
  cx.k_padded = kp;
  cx.panel = h.panel;
  cx.group_size = h.group_size;
  cx.groups = int4_groups(h);
  cx.scales = a.scales;
  cx.zeros = a.zeros;
  const std::vector<float> bias = bias_f32(a.bias, a.bias_dtype, h.n);
  cx.bias = a.bias ? bias.data() : nullptr;
  std::vector<float> ybuf(static_cast<std::size_t>(8 * h.panel));
  cx.ybuf = ybuf.data();
  OutT* out = static_cast<OutT*>(a.out);
  const std::int64_t group = panels_per_group((kp / 2) * h.panel);
  // The rows' activations are copied, zero-padded to k_padded, block by block (the
  // blocks of row_blocks) as [k_padded][rows of the block]: the micro-kernel reads one
  // k's activations of all its rows at constant offsets from one pointer.
  const auto interleave = [&](auto* dst, auto&& get) {
    row_blocks(a.m, kInt4BlockRows, [&](std::int64_t r, int mr) {
      auto* blk = dst + r * kp;
      for (int i = 0; i < mr; ++i) {
        for (std::int64_t k = 0; k < h.k; ++k) blk[k * mr + i] = get(r + i, k);
      }
    });
  };
  if (a.a != nullptr) {
    // W4A8.
    std::vector<std::int8_t> rows(static_cast<std::size_t>(a.m * kp), 0);
    interleave(rows.data(), [&](std::int64_t r, std::int64_t k) { return a.a[r * a.a_stride + k]; });
    // S[r, g] = sum of row r's activations in group g (for the zero points' term).
    std::vector<std::int32_t> sums(static_cast<std::size_t>(a.m * cx.groups));
    for (std::int64_t r = 0; r < a.m; ++r) {
      const std::int8_t* row = a.a + r * a.a_stride;
      for (std::int64_t g = 0; g < cx.groups; ++g) {
        std::int32_t s = 0;
        const std::int64_t ke = std::min(h.k, 2 * cx.group_end(g));
        for (std::int64_t k = 2 * cx.group_begin(g); k < ke; ++k) s += row[k];
        sums[static_cast<std::size_t>(r * cx.groups + g)] = s;
      }
    }
    for_each_block(group, a.m, kInt4BlockRows, pb, pe, [&](std::int64_t r, int mr, std::int64_t p) {
      int4isa::w4a8_rows<OutT>(mr, cx, int4_panel(h, p), rows.data() + r * kp,
                               sums.data() + r * cx.groups, a.a_scales + r, p * h.panel,
                               out + r * a.out_stride, a.out_stride);
    });
  } else {
#if defined(RVVK_INT4_W4A16_HALF)
    if (a.x_dtype != DType::kF32) {
      w4a16_half<OutT>(a, h, cx, group, pb, pe);
      return;
    }
#endif
    // W4A16: the rows in fp32 (scalar FMA operands).
    std::vector<float> row(static_cast<std::size_t>(h.k));
    std::vector<float> xs(static_cast<std::size_t>(a.m * kp), 0.0f);
    row_blocks(a.m, kInt4BlockRows, [&](std::int64_t r, int mr) {
      for (int i = 0; i < mr; ++i) {
        to_f32(a.x_dtype,
               static_cast<const unsigned char*>(a.x) +
                   (r + i) * a.x_stride * packed_element_bytes(a.x_dtype),
               row.data(), h.k);
        float* blk = xs.data() + r * kp;
        for (std::int64_t k = 0; k < h.k; ++k) blk[k * mr + i] = row[static_cast<std::size_t>(k)];
      }
    });
    for_each_block(group, a.m, kInt4BlockRows, pb, pe, [&](std::int64_t r, int mr, std::int64_t p) {
      int4isa::w4a16_rows<OutT>(mr, cx, int4_panel(h, p), xs.data() + r * kp, p * h.panel,
                                out + r * a.out_stride, a.out_stride);
    });
  }
}

}  // namespace

void pack_int4_weight_layout(std::int64_t n, std::int64_t k, std::int64_t group_size,
                             PackedInt4Header* header) {
  PackedInt4Header h;
  h.n = n;
  h.k = k;
  h.group_size = group_size;
  // One LMUL-4 fp32 vector of channels (VLEN / 8 on RVV): the W4A16 decode kernel's
  // accumulator width and one LMUL-1 byte vector of the W4A8 decode kernel, so each
  // covers a panel in one strip.
  h.panel = static_cast<std::int64_t>(vec::F32<4>::vlmax());
  h.k_padded = k + (k & 1);
  h.bytes = kPackedWeightHeaderBytes + int4_linear_tasks(h) * h.panel * (h.k_padded / 2);
  h.vlen_bits = static_cast<std::int64_t>(vec::vlen_bits());
  *header = h;
}

void pack_int4_weight(const PackedInt4Header& h, const std::uint8_t* q, std::int64_t q_stride,
                      void* packed) {
  std::memcpy(packed, &h, sizeof h);
  std::uint8_t* base = static_cast<std::uint8_t*>(packed) + kPackedWeightHeaderBytes;
  std::memset(base, 0, static_cast<std::size_t>(h.bytes - kPackedWeightHeaderBytes));
  for (std::int64_t j = 0; j < h.n; ++j) {
    std::uint8_t* pd = base + (j / h.panel) * (h.k_padded / 2) * h.panel + j % h.panel;
    const std::uint8_t* row = q + j * q_stride;
    for (std::int64_t k = 0; k < h.k; ++k) {
      pd[(k / 2) * h.panel] |= static_cast<std::uint8_t>((row[k] & 15) << (4 * (k & 1)));
    }
  }
}

void int4_linear(const Int4LinearArgs& a, std::int64_t panel_begin, std::int64_t panel_end) {
  const auto& h = *static_cast<const PackedInt4Header*>(a.packed);
  if (panel_begin >= panel_end || a.m <= 0) return;
  detail::visit_activation(a.out_dtype, [&](auto otag) {
    int4_impl<typename decltype(otag)::type>(a, h, panel_begin, panel_end);
  });
}

}  // namespace rvvk::RVVK_NS
