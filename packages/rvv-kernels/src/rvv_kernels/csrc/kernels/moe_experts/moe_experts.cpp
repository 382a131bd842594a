// Mixture-of-experts feed-forward (SGLang's fused_experts_cpu / shared_expert_cpu): the
// (token, choice) pairs grouped by expert, then per expert the gate/up GEMM, the gated
// activation and the down GEMM over all of its rows, then the weighted sum per token.
// The GEMMs and the activation are this variant's linear, int8_linear, fp8_linear,
// int4_linear (W4A8) and act_and_mul kernels (their RVV code on RISC-V), picked by the
// packed weights' header; this file adds the grouping, the gathering (and the row
// quantisation of W8A8 / W4A8) and the weighted sum.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rvvk/detail/dispatch.h"
#include "rvvk/detail/vec.h"
#include "rvvk/rvvk.h"

namespace rvvk::RVVK_NS {

// This variant's kernels (defined in kernels/linear and kernels/activation), called
// qualified: argument-dependent lookup would also find the dispatching rvvk:: ones.
void linear(const LinearArgs& args, std::int64_t panel_begin, std::int64_t panel_end);
void int8_linear(const Int8LinearArgs& args, std::int64_t panel_begin,
                 std::int64_t panel_end);
void quantize_int8_rows(DType dtype, const void* x, std::int64_t x_stride, std::int64_t rows,
                        std::int64_t cols, std::int8_t* q, std::int64_t q_stride,
                        float* scales);
void fp8_linear(const Fp8LinearArgs& args, std::int64_t panel_begin, std::int64_t panel_end);
void int4_linear(const Int4LinearArgs& args, std::int64_t panel_begin,
                 std::int64_t panel_end);
void act_and_mul(Activation act, DType dtype, void* out, std::int64_t out_stride,
                 const void* input, std::int64_t input_stride, std::int64_t rows,
                 std::int64_t cols);

namespace {

using F = vec::F32<4>;

const void* bias_row(DType dt, const void* b, std::int64_t row, std::int64_t n) {
  if (b == nullptr) return nullptr;
  return static_cast<const unsigned char*>(b) + row * n * packed_element_bytes(dt);
}

// Runs fn(expert, first slot, slot count, panel_begin, panel_end) for the GEMM tasks
// [begin, end) of a stage whose weights have `panels` panels per expert: task i is panel
// i % panels of active expert i / panels.
template <class Fn>
void for_each_expert_panels(const MoePlan& plan, std::int64_t panels, std::int64_t begin,
                            std::int64_t end, const Fn& fn) {
  if (panels <= 0) return;
  for (std::int64_t i = begin; i < end;) {
    const std::int64_t a = i / panels, p0 = i % panels;
    const std::int64_t p1 = std::min(panels, p0 + (end - i));
    const std::int32_t e = plan.active[a];
    const std::int64_t first = plan.offsets[e];
    fn(e, first, plan.offsets[e + 1] - first, p0, p1);
    i += p1 - p0;
  }
}

void gather(const MoeExpertsArgs& a, std::int64_t begin, std::int64_t end) {
  const bool int8 = moe_quantised_rows(a.w13);
  const std::int64_t elem = packed_element_bytes(a.x_dtype);
  const auto* x = static_cast<const unsigned char*>(a.x);
  for (std::int64_t s = begin; s < end; ++s) {
    const unsigned char* row = x + a.plan.sorted_tokens[s] * a.x_stride * elem;
    if (int8) {
      RVVK_NS::quantize_int8_rows(a.x_dtype, row, a.x_stride, 1, a.hidden,
                         static_cast<std::int8_t*>(a.xg) + s * a.hidden, a.hidden,
                         a.xg_scales + s);
    } else {
      std::memcpy(static_cast<unsigned char*>(a.xg) + s * a.hidden * elem, row,
                  static_cast<std::size_t>(a.hidden * elem));
    }
  }
}

// One GEMM stage: rows [first, first + m) of `in` times expert e's weight, fp32 out.
void gemm(const MoeExpertsArgs& a, bool gate_up, std::int64_t begin, std::int64_t end) {
  const unsigned char* w = gate_up ? a.w13 : a.w2;
  const MoeWeights kind = moe_weights(w);
  const std::int64_t w_stride = gate_up ? a.w13_stride : a.w2_stride;
  const std::int64_t k = gate_up ? a.hidden : a.intermediate;
  const std::int64_t n = gate_up ? 2 * a.intermediate : a.hidden;
  const std::int64_t block_k = gate_up ? a.w13_block_k : a.w2_block_k;
  // Expert e's scales and zero points start at e * scale_elems.
  const std::int64_t scale_elems = moe_scale_rows(w, block_k) * n;
  const float* scales = gate_up ? a.w13_scales : a.w2_scales;
  const std::uint8_t* zeros = gate_up ? a.w13_zeros : a.w2_zeros;
  const void* bias = gate_up ? a.b13 : a.b2;
  float* out = gate_up ? a.ic1 : a.y;
  // The rows entering the GEMM: int8 + row scales (W8A8, W4A8) or float.
  const std::int8_t* q_rows = gate_up ? static_cast<const std::int8_t*>(a.xg) : a.ic2_q;
  const float* q_scales = gate_up ? a.xg_scales : a.ic2_scales;
  const DType x_dtype = gate_up ? a.x_dtype : DType::kF32;
  const unsigned char* x_rows = gate_up ? static_cast<const unsigned char*>(a.xg)
                                        : reinterpret_cast<const unsigned char*>(a.ic2);
  const std::int64_t x_elem = packed_element_bytes(x_dtype);
  for_each_expert_panels(
      a.plan, moe_weight_tasks(w), begin, end,
      [&](std::int32_t e, std::int64_t first, std::int64_t m, std::int64_t p0,
          std::int64_t p1) {
        // What every GEMM form shares: the weight, bias and fp32 output rows.
        const auto common = [&](auto& g) {
          g.m = m;
          g.packed = w + e * w_stride;
          g.bias_dtype = a.bias_dtype;
          g.bias = bias_row(a.bias_dtype, bias, e, n);
          g.out_dtype = DType::kF32;
          g.out = out + first * n;
          g.out_stride = n;
        };
        const auto float_rows = [&](auto& g) {
          g.x_dtype = x_dtype;
          g.x = x_rows + first * k * x_elem;
          g.x_stride = k;
        };
        const auto int8_rows = [&](auto& g) {
          g.a = q_rows + first * k;
          g.a_stride = k;
          g.a_scales = q_scales + first;
        };
        switch (kind) {
          case MoeWeights::kInt8: {
            Int8LinearArgs g;
            common(g);
            int8_rows(g);
            g.w_scales = scales + e * scale_elems;
            return RVVK_NS::int8_linear(g, p0, p1);
          }
          case MoeWeights::kInt4: {
            Int4LinearArgs g;
            common(g);
            int8_rows(g);
            g.scales = scales + e * scale_elems;
            g.zeros = zeros + e * scale_elems;
            return RVVK_NS::int4_linear(g, p0, p1);
          }
          case MoeWeights::kFp8: {
            Fp8LinearArgs g;
            common(g);
            float_rows(g);
            g.scales = scales + e * scale_elems;
            g.block_k = block_k;
            return RVVK_NS::fp8_linear(g, p0, p1);
          }
          case MoeWeights::kFloat: {
            LinearArgs g;
            common(g);
            float_rows(g);
            return RVVK_NS::linear(g, p0, p1);
          }
        }
      });
}

void activate(const MoeExpertsArgs& a, std::int64_t begin, std::int64_t end) {
  if (begin >= end) return;
  const std::int64_t i = a.intermediate;
  RVVK_NS::act_and_mul(a.act, DType::kF32, a.ic2 + begin * i, i, a.ic1 + begin * 2 * i, 2 * i,
              end - begin, i);
  if (moe_quantised_rows(a.w2)) {
    RVVK_NS::quantize_int8_rows(DType::kF32, a.ic2 + begin * i, i, end - begin, i, a.ic2_q + begin * i,
                       i, a.ic2_scales + begin);
  }
}

// out[t] = base_scale * base[t] + sum_j w[t, j] * y[slot_of[t, j]], fp32, j in order.
template <class T>
void combine(const MoeExpertsArgs& a, std::int64_t begin, std::int64_t end) {
  const std::int64_t hd = a.hidden, topk = a.topk;
  for (std::int64_t t = begin; t < end; ++t) {
    T* o = static_cast<T*>(a.out) + t * a.out_stride;
    const T* base = a.base ? static_cast<const T*>(a.base) + t * a.base_stride : nullptr;
    const float* w = a.weights + t * topk;
    const std::int32_t* slots = a.plan.slot_of + t * topk;
    for (std::int64_t c = 0; c < hd;) {
      const std::size_t vl = F::setvl(static_cast<std::size_t>(hd - c));
      F::V acc = base ? F::mul(F::load(base + c, vl), a.base_scale, vl) : F::splat(0.0f, vl);
      for (std::int64_t j = 0; j < topk; ++j) {
        acc = F::fmacc(acc, w[j], F::load(a.y + slots[j] * hd + c, vl), vl);
      }
      F::store(o + c, acc, vl);
      c += static_cast<std::int64_t>(vl);
    }
  }
}

}  // namespace

void moe_plan(const std::int32_t* ids, std::int64_t tokens, std::int64_t topk,
              std::int64_t experts, MoePlan* plan) {
  const std::int64_t pairs = tokens * topk;
  std::int64_t* off = plan->offsets;
  std::fill(off, off + experts + 1, std::int64_t{0});
  for (std::int64_t p = 0; p < pairs; ++p) ++off[ids[p] + 1];
  plan->active_count = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    if (off[e + 1] > 0) plan->active[plan->active_count++] = static_cast<std::int32_t>(e);
    off[e + 1] += off[e];
  }
  // Pairs in (token, choice) order land in their expert's range in that order: stable.
  // offsets[e] is used as expert e's fill pointer, then restored.
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int64_t s = off[ids[p]]++;
    plan->sorted_tokens[s] = static_cast<std::int32_t>(p / topk);
    plan->slot_of[p] = static_cast<std::int32_t>(s);
  }
  for (std::int64_t e = experts; e > 0; --e) off[e] = off[e - 1];
  off[0] = 0;
}

void moe_experts(const MoeExpertsArgs& args, MoeStage stage, std::int64_t task_begin,
                 std::int64_t task_end) {
  switch (stage) {
    case MoeStage::kGather:
      return gather(args, task_begin, task_end);
    case MoeStage::kGateUp:
      return gemm(args, true, task_begin, task_end);
    case MoeStage::kAct:
      return activate(args, task_begin, task_end);
    case MoeStage::kDown:
      return gemm(args, false, task_begin, task_end);
    case MoeStage::kCombine:
      return detail::visit_activation(args.x_dtype, [&](auto tag) {
        combine<typename decltype(tag)::type>(args, task_begin, task_end);
      });
  }
}

}  // namespace rvvk::RVVK_NS
