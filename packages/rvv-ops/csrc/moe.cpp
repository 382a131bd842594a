// sgl_kernel::fused_experts_cpu and shared_expert_cpu on rvv-kernels' mixture-of-experts
// kernels (rvvk::moe_plan, rvvk::moe_experts).
//
// fused_experts_cpu: SGLang's CPU MoE layers (unquantised, W8A8 int8, FP8 W8A16 with block
// scales, AWQ / GPTQ INT4 W4A8) call it with the routing of every token (topk_ids /
// topk_weights) and the expert-stacked weights w1 = w13 [E, 2I, H] (gate rows then up rows)
// and w2 [E, H, I], packed once at load by convert_weight_packed (is_vnni=True; INT4:
// convert_weight_packed_scale_zp) or plain (float, int8, fp8: packed per call). The (token, choice)
// pairs are grouped by expert so that each expert's weights are read once per call; the
// stages run over all threads, the GEMM stages split over (expert, panel of N) so that a
// single token still uses every core.
//
// shared_expert_cpu: DeepSeek's shared expert, fused with the routed experts' output:
// out = shared_mlp(x) + fused_experts_out * routed_scaling_factor, run as one expert chosen
// by every token with weight 1 and the routed output as the kernels' base term.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "ops.h"
#include "packed_weight.h"

namespace rvv_ops {
namespace {

// SGLang's CPUQuantMethod.
constexpr std::int64_t kUnquant = 0, kInt8W8A8 = 1, kFp8W8A16 = 2, kInt4W4A8 = 3, kMxfp4 = 4;

const char* method_name(std::int64_t m) {
  switch (m) {
    case kUnquant:
      return "UNQUANT";
    case kInt8W8A8:
      return "INT8_W8A8";
    case kFp8W8A16:
      return "FP8_W8A16";
    case kInt4W4A8:
      return "INT4_W4A8";
    case kMxfp4:
      return "MXFP4";
    default:
      return "unknown";
  }
}

rvvk::Activation moe_activation(const char* op, const std::optional<std::string>& act) {
  if (!act || *act == "silu") return rvvk::Activation::kSilu;
  if (*act == "gelu") return rvvk::Activation::kGelu;
  TORCH_CHECK_VALUE(false, op, ": activation is '", *act,
                    "'; expected 'silu' or 'gelu' (None means 'silu')");
  return rvvk::Activation::kSilu;
}

// One expert-stacked weight: 3-D, packed (is_vnni) or plain, with every expert's header
// checked to be the same as expert 0's.
struct Experts {
  at::Tensor packed;  // [E, N, cols], expert e's packed weight in slice e
  rvvk::PackedWeightHeader h;  // float, int8, fp8
  rvvk::PackedInt4Header h4;   // int4
  std::int64_t panel = 0;
  std::int64_t stride_bytes = 0;
};

void check_3d(const char* op, const char* arg, const at::Tensor& w, const char* what) {
  TORCH_CHECK_VALUE(w.dim() == 3, op, ": ", arg, " is ", w.dim(), "-d (", describe(w),
                    "); expected a 3-D expert-stacked weight ", what);
  TORCH_CHECK_VALUE(w.size(0) > 0 && w.size(1) > 0 && w.size(2) > 0, op, ": ", arg, " (",
                    describe(w), ") is empty; expected [E, N, K] with E, N, K >= 1");
}

void check_same_headers(const char* op, const char* arg, const Experts& x, const char* packer) {
  const auto* base = static_cast<const unsigned char*>(x.packed.data_ptr());
  for (std::int64_t e = 1; e < x.packed.size(0); ++e) {
    TORCH_CHECK_VALUE(
        std::memcmp(base, base + e * x.stride_bytes, rvvk::kPackedWeightHeaderBytes) == 0, op,
        ": ", arg, "[", e, "] has a packed-weight header unlike ", arg,
        "[0]'s; expected every expert packed by one ", packer, " call");
  }
}

Experts experts_of(const char* op, const char* arg, const at::Tensor& w, rvvk::DType dt,
                   bool is_vnni, std::int64_t n, std::int64_t k, const char* what) {
  Experts x;
  if (is_vnni) {
    TORCH_CHECK_VALUE(w.is_contiguous() &&
                          reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 4 == 0 &&
                          w.stride(0) * w.element_size() % 4 == 0,
                      op, ": ", arg, " (", describe(w),
                      ") is not contiguous with 4-byte aligned experts; expected the tensor "
                      "convert_weight_packed returns for the 3-D weight");
    x.packed = w;
  } else {
    TORCH_CHECK_VALUE(w.size(1) == n && w.size(2) == k, op, ": ", arg, " (", describe(w),
                      ") is not [E, ", n, ", ", k, "] ", what);
    x.packed = pack3(op, w, dt);
  }
  x.stride_bytes = x.packed.stride(0) * x.packed.element_size();
  x.h = packed_header(op, arg, x.packed[0], dt, k);
  x.panel = x.h.panel;
  TORCH_CHECK_VALUE(x.h.n == n, op, ": ", arg, " was packed for N = ", x.h.n,
                    " output channels; expected ", n, " ", what);
  check_same_headers(op, arg, x, "convert_weight_packed");
  return x;
}

// An INT4 expert-stacked weight: convert_weight_packed_scale_zp's packed uint8 [E, N, X].
Experts int4_experts_of(const char* op, const char* arg, const at::Tensor& w, std::int64_t n,
                        const char* what) {
  TORCH_CHECK_TYPE(w.scalar_type() == at::kByte, op, ": ", arg, " has dtype ",
                   dtype_name(w.scalar_type()),
                   "; expected torch.uint8 (the packed weight convert_weight_packed_scale_zp "
                   "returns for 3-D AWQ / GPTQ weights)");
  TORCH_CHECK_VALUE(w.is_contiguous() && w.stride(0) % 4 == 0, op, ": ", arg, " (",
                    describe(w), ") is not contiguous with 4-byte aligned experts; expected "
                    "the tensor convert_weight_packed_scale_zp returns for 3-D weights");
  Experts x;
  x.packed = w;
  x.stride_bytes = w.stride(0);
  x.h4 = int4_header(op, arg, w[0]);
  x.panel = x.h4.panel;
  if (n > 0) {
    TORCH_CHECK_VALUE(x.h4.n == n, op, ": ", arg, " was packed for N = ", x.h4.n,
                      " output channels; expected ", n, " ", what);
  }
  check_same_headers(op, arg, x, "convert_weight_packed_scale_zp");
  return x;
}

// A per-expert fp32 vector [E, n] (or [E, n, 1]), contiguous.
at::Tensor per_expert(const char* op, const char* arg, const std::optional<at::Tensor>& t,
                      std::int64_t experts, std::int64_t n, const char* what, bool float32) {
  TORCH_CHECK_VALUE(t.has_value(), op, ": ", arg, " is None; expected [", experts, ", ", n,
                    "] ", what);
  check_cpu(op, arg, *t);
  if (float32) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                     dtype_name(t->scalar_type()), "; expected torch.float32 (", what, ")");
  } else {
    kernel_dtype(op, arg, *t);
  }
  TORCH_CHECK_VALUE(t->numel() == experts * n && t->dim() >= 2 && t->size(0) == experts &&
                        t->size(1) == n && (t->dim() == 2 || (t->dim() == 3 && t->size(2) == 1)),
                    op, ": ", arg, " (", describe(*t), ") is not [", experts, ", ", n, "] or [",
                    experts, ", ", n, ", 1] (", what, ")");
  return t->contiguous();
}

// The MoE problem of one call, checked, with the kernels' arguments.
struct Problem {
  rvvk::MoeExpertsArgs a;
  Experts w13, w2;
  std::int64_t experts = 0;
  at::Tensor x, weights, ids, s13, s2, z13, z2, b13, b2, base;
};

// A table of [experts, rows, n] (INT4 scales fp32 / zero points uint8), contiguous.
at::Tensor group_table(const char* op, const char* arg, const std::optional<at::Tensor>& t,
                       at::ScalarType st, std::int64_t experts, std::int64_t rows,
                       std::int64_t n, const char* what) {
  TORCH_CHECK_VALUE(t.has_value(), op, ": ", arg, " is None; expected ", dtype_name(st), " [",
                    experts, ", ", rows, ", ", n, "] ", what);
  check_cpu(op, arg, *t);
  TORCH_CHECK_TYPE(t->scalar_type() == st, op, ": ", arg, " has dtype ",
                   dtype_name(t->scalar_type()), "; expected ", dtype_name(st), " (", what,
                   ")");
  TORCH_CHECK_VALUE(t->dim() == 3 && t->size(0) == experts && t->size(1) == rows &&
                        t->size(2) == n,
                    op, ": ", arg, " (", describe(*t), ") is not [", experts, ", ", rows, ", ",
                    n, "] (", what, ")");
  return t->contiguous();
}

// FP8 block scales [experts, ceil(n / block_n), ceil(k / block_k)] (fp32 or bf16) expanded
// to the kernels' [experts, ceil(k / block_k), n] fp32.
at::Tensor fp8_scales(const char* op, const char* arg, const std::optional<at::Tensor>& t,
                      std::int64_t experts, std::int64_t n, std::int64_t k,
                      at::IntArrayRef block) {
  const std::int64_t nb = (n + block[0] - 1) / block[0], kb = (k + block[1] - 1) / block[1];
  TORCH_CHECK_VALUE(t.has_value(), op, ": ", arg, " is None; expected FP8 block scales [",
                    experts, ", ", nb, ", ", kb, "] (fp32 or bf16)");
  check_cpu(op, arg, *t);
  TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat || t->scalar_type() == at::kBFloat16, op,
                   ": ", arg, " has dtype ", dtype_name(t->scalar_type()),
                   "; expected torch.float32 or torch.bfloat16 (FP8 block scales)");
  TORCH_CHECK_VALUE(t->dim() == 3 && t->size(0) == experts && t->size(1) == nb &&
                        t->size(2) == kb,
                    op, ": ", arg, " (", describe(*t), ") is not [E, ceil(N / block_n), "
                    "ceil(K / block_k)] = [", experts, ", ", nb, ", ", kb, "] for N = ", n,
                    ", K = ", k, ", block_size [", block[0], ", ", block[1], "]");
  return expand_block_scales(*t, n, block[0]);
}

// Runs the five stages over all threads into `out` [T, H] (contiguous, x's dtype).
void run(Problem& p, const at::Tensor& out) {
  rvvk::MoeExpertsArgs& a = p.a;
  const std::int64_t tokens = a.tokens, topk = a.topk, pairs = tokens * topk;
  const std::int64_t h = a.hidden, inter = a.intermediate, experts = p.experts;
  const bool int8 = rvvk::moe_quantised_rows(a.w13);  // W8A8 or W4A8: rows quantised
  const at::TensorOptions f32 = p.x.options().dtype(at::kFloat);
  const at::TensorOptions i32 = p.x.options().dtype(at::kInt);
  at::Tensor offsets = at::empty({experts + 1}, p.x.options().dtype(at::kLong));
  at::Tensor sorted = at::empty({pairs}, i32), slot_of = at::empty({pairs}, i32);
  at::Tensor active = at::empty({experts}, i32);
  a.plan.offsets = offsets.data_ptr<std::int64_t>();
  a.plan.sorted_tokens = sorted.data_ptr<std::int32_t>();
  a.plan.slot_of = slot_of.data_ptr<std::int32_t>();
  a.plan.active = active.data_ptr<std::int32_t>();
  rvvk::moe_plan(p.ids.data_ptr<std::int32_t>(), tokens, topk, experts, &a.plan);
  at::Tensor xg = int8 ? at::empty({pairs, h}, p.x.options().dtype(at::kChar))
                       : at::empty({pairs, h}, p.x.options());
  at::Tensor xg_scales = at::empty({int8 ? pairs : 0}, f32);
  at::Tensor ic1 = at::empty({pairs, 2 * inter}, f32), ic2 = at::empty({pairs, inter}, f32);
  at::Tensor ic2_q = at::empty({int8 ? pairs : 0, inter}, p.x.options().dtype(at::kChar));
  at::Tensor ic2_scales = at::empty({int8 ? pairs : 0}, f32);
  at::Tensor y = at::empty({pairs, h}, f32);
  a.xg = xg.data_ptr();
  a.xg_scales = int8 ? xg_scales.data_ptr<float>() : nullptr;
  a.ic1 = ic1.data_ptr<float>();
  a.ic2 = ic2.data_ptr<float>();
  a.ic2_q = int8 ? static_cast<std::int8_t*>(ic2_q.data_ptr()) : nullptr;
  a.ic2_scales = int8 ? ic2_scales.data_ptr<float>() : nullptr;
  a.y = y.data_ptr<float>();
  a.out = out.data_ptr();
  a.out_stride = h;

  const auto stage = [&](rvvk::MoeStage s, std::int64_t work_per_task) {
    const std::int64_t tasks = rvvk::moe_stage_tasks(a, s);
    if (tasks == 0) return;
    const std::int64_t grain =
        std::max<std::int64_t>(1, kMinMacsPerTask / std::max<std::int64_t>(1, work_per_task));
    at::parallel_for(0, tasks, grain, [&](std::int64_t begin, std::int64_t end) {
      rvvk::moe_experts(a, s, begin, end);
    });
  };
  // Work per task: rows x columns for the row stages, the average rows of an active
  // expert x K x panel for the GEMMs.
  const std::int64_t rows_per_expert =
      std::max<std::int64_t>(1, pairs / std::max<std::int64_t>(1, a.plan.active_count));
  stage(rvvk::MoeStage::kGather, h * 4);
  stage(rvvk::MoeStage::kGateUp, rows_per_expert * h * p.w13.panel);
  stage(rvvk::MoeStage::kAct, inter * 16);
  stage(rvvk::MoeStage::kDown, rows_per_expert * inter * p.w2.panel);
  stage(rvvk::MoeStage::kCombine, h * (topk + 1));
}

// The weights, scales and biases shared by both ops. w1: [E, 2I, H]; w2: [E, H, I].
void set_weights(Problem& p, const char* op, const at::Tensor& w1, const at::Tensor& w2,
                 std::int64_t method, bool is_vnni, const std::optional<at::Tensor>& w1_scale,
                 const std::optional<at::Tensor>& w2_scale,
                 const std::optional<at::Tensor>& w1_zero,
                 const std::optional<at::Tensor>& w2_zero, at::OptionalIntArrayRef block_size,
                 const std::optional<at::Tensor>& w1_bias,
                 const std::optional<at::Tensor>& w2_bias) {
  const std::int64_t h = p.a.hidden;
  const bool int8 = method == kInt8W8A8, fp8 = method == kFp8W8A16, int4 = method == kInt4W4A8;
  check_cpu(op, "w1", w1);
  check_cpu(op, "w2", w2);
  check_3d(op, "w1", w1, "[E, 2I, H] (gate and up projections)");
  check_3d(op, "w2", w2, "[E, H, I] (down projection)");
  TORCH_CHECK_VALUE(w1.size(0) == w2.size(0), op, ": w1 (", describe(w1), ") has ", w1.size(0),
                    " experts and w2 (", describe(w2), ") ", w2.size(0), "; expected the same");
  p.experts = w1.size(0);
  TORCH_CHECK_VALUE(int4 || (!w1_zero && !w2_zero), op,
                    ": w1_zero / w2_zero are given for ", method_name(method),
                    " experts; expected None (zero points belong to INT4_W4A8 experts)");
  TORCH_CHECK_VALUE(fp8 || !block_size.has_value(), op, ": block_size is given for ",
                    method_name(method),
                    " experts; expected None (block scales belong to FP8_W8A16 experts)");
  std::int64_t inter = 0;
  if (int4) {
    TORCH_CHECK_VALUE(is_vnni, op, ": is_vnni is False for INT4_W4A8 experts; expected True "
                      "with w1 / w2 packed by convert_weight_packed_scale_zp (the op does not "
                      "take AWQ / GPTQ checkpoint tensors directly)");
    p.w2 = int4_experts_of(op, "w2", w2, h, "(hidden x intermediate)");
    inter = p.w2.h4.k;
    p.w13 = int4_experts_of(op, "w1", w1, 2 * inter, "(2 x intermediate channels x hidden)");
    TORCH_CHECK_VALUE(p.w13.h4.k == h, op, ": w1 was packed for K = ", p.w13.h4.k,
                      "; expected the hidden size ", h, " (hidden_states.size(1))");
    const std::int64_t g13 = rvvk::int4_groups(p.w13.h4), g2 = rvvk::int4_groups(p.w2.h4);
    const char* sw = "per-expert group scales, as convert_weight_packed_scale_zp returns them";
    const char* zw = "per-expert zero points, as convert_weight_packed_scale_zp returns them";
    p.s13 = group_table(op, "w1_scale", w1_scale, at::kFloat, p.experts, g13, 2 * inter, sw);
    p.s2 = group_table(op, "w2_scale", w2_scale, at::kFloat, p.experts, g2, h, sw);
    p.z13 = group_table(op, "w1_zero", w1_zero, at::kByte, p.experts, g13, 2 * inter, zw);
    p.z2 = group_table(op, "w2_zero", w2_zero, at::kByte, p.experts, g2, h, zw);
    p.a.w13_zeros = p.z13.data_ptr<std::uint8_t>();
    p.a.w2_zeros = p.z2.data_ptr<std::uint8_t>();
  } else {
    const rvvk::DType dt1 = weight_dtype(op, "w1", w1, int8, !int8 && !fp8, fp8);
    const rvvk::DType dt2 = weight_dtype(op, "w2", w2, int8, !int8 && !fp8, fp8);
    // I: w2's K (from its header when packed), then w1 must have 2I channels.
    if (is_vnni) {
      TORCH_CHECK_VALUE(w2.numel() * w2.element_size() / w2.size(0) >=
                            rvvk::kPackedWeightHeaderBytes,
                        op, ": w2 (", describe(w2), ") is too small to hold packed experts");
      rvvk::PackedWeightHeader h2;
      std::memcpy(&h2, w2.data_ptr(), sizeof h2);
      inter = h2.k;  // checked below by packed_header against itself
    } else {
      inter = w2.size(2);
    }
    TORCH_CHECK_VALUE(inter >= 1, op, ": w2 (", describe(w2), ") has an intermediate size of ",
                      inter, "; expected >= 1");
    p.w2 = experts_of(op, "w2", w2, dt2, is_vnni, h, inter, "(hidden x intermediate)");
    p.w13 = experts_of(op, "w1", w1, dt1, is_vnni, 2 * inter, h,
                       "(2 x intermediate channels x hidden)");
  }
  p.a.intermediate = inter;
  p.a.w13 = static_cast<const unsigned char*>(p.w13.packed.data_ptr());
  p.a.w13_stride = p.w13.stride_bytes;
  p.a.w2 = static_cast<const unsigned char*>(p.w2.packed.data_ptr());
  p.a.w2_stride = p.w2.stride_bytes;
  if (int8) {
    p.s13 = per_expert(op, "w1_scale", w1_scale, p.experts, 2 * inter,
                       "one fp32 scale per expert and output channel of w1", true);
    p.s2 = per_expert(op, "w2_scale", w2_scale, p.experts, h,
                      "one fp32 scale per expert and output channel of w2", true);
  } else if (fp8) {
    TORCH_CHECK_VALUE(block_size.has_value() && block_size->size() == 2 &&
                          (*block_size)[0] >= 1 && (*block_size)[1] >= 1,
                      op, ": block_size is ",
                      block_size.has_value() ? c10::str(*block_size) : std::string("None"),
                      "; expected [block_n, block_k], both >= 1, for FP8_W8A16 experts");
    p.s13 = fp8_scales(op, "w1_scale", w1_scale, p.experts, 2 * inter, h, *block_size);
    p.s2 = fp8_scales(op, "w2_scale", w2_scale, p.experts, h, inter, *block_size);
    p.a.w13_block_k = (*block_size)[1];
    p.a.w2_block_k = (*block_size)[1];
  } else if (!int4) {
    TORCH_CHECK_VALUE(!w1_scale && !w2_scale, op,
                      ": w1_scale / w2_scale are given for unquantised weights; expected None");
  }
  if (p.s13.defined()) {
    p.a.w13_scales = p.s13.data_ptr<float>();
    p.a.w2_scales = p.s2.data_ptr<float>();
  }
  TORCH_CHECK_VALUE(w1_bias.has_value() == w2_bias.has_value(), op,
                    ": only one of w1_bias and w2_bias is given; expected both or neither");
  if (w1_bias) {
    p.b13 = per_expert(op, "w1_bias", w1_bias, p.experts, 2 * inter, "per-expert bias", false)
                .to(at::kFloat);
    p.b2 = per_expert(op, "w2_bias", w2_bias, p.experts, h, "per-expert bias", false)
               .to(at::kFloat);
    p.a.bias_dtype = rvvk::DType::kF32;
    p.a.b13 = p.b13.data_ptr();
    p.a.b2 = p.b2.data_ptr();
  }
}

// hidden_states [T, H] of a float dtype.
void set_hidden(Problem& p, const char* op, const at::Tensor& hidden_states) {
  check_cpu(op, "hidden_states", hidden_states);
  check_2d(op, "hidden_states", hidden_states, "[tokens, hidden]");
  p.a.x_dtype = kernel_dtype(op, "hidden_states", hidden_states);
  TORCH_CHECK_VALUE(hidden_states.size(1) >= 1, op, ": hidden_states (",
                    describe(hidden_states), ") has hidden size 0; expected >= 1");
  p.x = hidden_states;
  p.a.x_stride = rows_of(p.x);
  p.a.x = p.x.data_ptr();
  p.a.tokens = p.x.size(0);
  p.a.hidden = p.x.size(1);
}

void check_method(const char* op, std::int64_t method) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      method >= kUnquant && method <= kInt4W4A8, op, ": moe_comp_method is ", method, " (",
      method_name(method),
      "); rvv-ops runs UNQUANT (0), INT8_W8A8 (1), FP8_W8A16 (2) and INT4_W4A8 (3) experts; "
      "MXFP4 (4) experts are not implemented");
}

// Every id in [0, experts), checked on the ids as given (before any narrowing).
template <class T>
void check_ids_of(const char* op, const at::Tensor& ids, std::int64_t experts) {
  const at::Tensor c = ids.contiguous();
  const T* d = c.data_ptr<T>();
  for (std::int64_t i = 0; i < c.numel(); ++i) {
    TORCH_CHECK_VALUE(d[i] >= 0 && d[i] < experts, op, ": topk_ids[", i / c.size(1), ", ",
                      i % c.size(1), "] is ", static_cast<std::int64_t>(d[i]),
                      "; expected expert ids in [0, ", experts, ") (w1 has ", experts,
                      " experts)");
  }
}

void check_ids(const char* op, const at::Tensor& ids, std::int64_t experts) {
  if (ids.scalar_type() == at::kLong) {
    check_ids_of<std::int64_t>(op, ids, experts);
  } else {
    check_ids_of<std::int32_t>(op, ids, experts);
  }
}

}  // namespace

at::Tensor fused_experts_cpu(bool meta, at::Tensor& hidden_states, const at::Tensor& w1,
                             const at::Tensor& w2, const at::Tensor& topk_weights,
                             const at::Tensor& topk_ids, bool inplace,
                             std::int64_t moe_comp_method,
                             const std::optional<at::Tensor>& w1_scale,
                             const std::optional<at::Tensor>& w2_scale,
                             const std::optional<at::Tensor>& w1_zero,
                             const std::optional<at::Tensor>& w2_zero,
                             at::OptionalIntArrayRef block_size,
                             const std::optional<at::Tensor>& w1_bias,
                             const std::optional<at::Tensor>& w2_bias,
                             std::optional<double> alpha, std::optional<double> limit,
                             bool is_vnni, const std::optional<std::string>& activation) {
  const char* op = "fused_experts_cpu";
  check_method(op, moe_comp_method);
  TORCH_CHECK_NOT_IMPLEMENTED(!alpha && !limit, op,
                              ": alpha / limit (the clamped SwiGLU of gpt-oss) are not "
                              "implemented; expected None");
  const rvvk::Activation act = moe_activation(op, activation);
  check_2d(op, "hidden_states", hidden_states, "[tokens, hidden]");
  kernel_dtype(op, "hidden_states", hidden_states);
  check_2d(op, "topk_weights", topk_weights, "[tokens, topk]");
  check_2d(op, "topk_ids", topk_ids, "[tokens, topk]");
  TORCH_CHECK_VALUE(topk_ids.sizes() == topk_weights.sizes() &&
                        topk_ids.size(0) == hidden_states.size(0) && topk_ids.size(1) >= 1,
                    op, ": topk_ids (", describe(topk_ids), ") and topk_weights (",
                    describe(topk_weights), ") must both be [tokens, topk] with tokens = ",
                    hidden_states.size(0), " (hidden_states.size(0)) and topk >= 1");
  TORCH_CHECK_TYPE(topk_ids.scalar_type() == at::kInt || topk_ids.scalar_type() == at::kLong,
                   op, ": topk_ids has dtype ", dtype_name(topk_ids.scalar_type()),
                   "; expected torch.int32 or torch.int64");
  TORCH_CHECK_TYPE(at::isFloatingType(topk_weights.scalar_type()), op,
                   ": topk_weights has dtype ", dtype_name(topk_weights.scalar_type()),
                   "; expected a floating-point dtype (torch.float32)");
  check_3d(op, "w1", w1, "[E, 2I, H] (gate and up projections)");
  check_3d(op, "w2", w2, "[E, H, I] (down projection)");
  if (meta) return at::empty_like(hidden_states, at::MemoryFormat::Contiguous);

  Problem p;
  set_hidden(p, op, hidden_states);
  p.a.act = act;
  set_weights(p, op, w1, w2, moe_comp_method, is_vnni, w1_scale, w2_scale, w1_zero, w2_zero,
              block_size, w1_bias, w2_bias);
  check_cpu(op, "topk_ids", topk_ids);
  check_cpu(op, "topk_weights", topk_weights);
  check_ids(op, topk_ids, p.experts);
  p.ids = topk_ids.to(at::kInt).contiguous();
  p.weights = topk_weights.to(at::kFloat).contiguous();
  p.a.topk = topk_ids.size(1);
  p.a.weights = p.weights.data_ptr<float>();
  at::Tensor out = at::empty({p.a.tokens, p.a.hidden}, hidden_states.options());
  if (p.a.tokens > 0) run(p, out);
  if (inplace) hidden_states.copy_(out);
  return out;
}

at::Tensor shared_expert_cpu(bool meta, at::Tensor& hidden_states, const at::Tensor& w1,
                             const at::Tensor& w2,
                             const std::optional<at::Tensor>& fused_experts_out,
                             std::optional<double> routed_scaling_factor, bool inplace,
                             bool use_int8_w8a8, bool use_fp8_w8a16,
                             const std::optional<at::Tensor>& w1_scale,
                             const std::optional<at::Tensor>& w2_scale,
                             at::OptionalIntArrayRef block_size, bool is_vnni) {
  const char* op = "shared_expert_cpu";
  TORCH_CHECK_NOT_IMPLEMENTED(!use_fp8_w8a16, op,
                              ": use_fp8_w8a16 (FP8 shared experts) is not implemented");
  TORCH_CHECK_VALUE(!block_size.has_value(), op,
                    ": block_size is given; expected None (block scales belong to FP8 "
                    "weights, which are not implemented)");
  check_2d(op, "hidden_states", hidden_states, "[tokens, hidden]");
  kernel_dtype(op, "hidden_states", hidden_states);
  if (fused_experts_out) {
    if (!meta) check_cpu(op, "fused_experts_out", *fused_experts_out);
    TORCH_CHECK_VALUE(fused_experts_out->sizes() == hidden_states.sizes(), op,
                      ": fused_experts_out (", describe(*fused_experts_out),
                      ") does not have hidden_states' shape ", hidden_states.sizes());
    check_same_dtype(op, "fused_experts_out", *fused_experts_out, "hidden_states",
                     hidden_states);
  }
  if (meta) return at::empty_like(hidden_states, at::MemoryFormat::Contiguous);
  check_2d(op, "w1", w1, "[2I, H] (gate and up projections)");
  check_2d(op, "w2", w2, "[H, I] (down projection)");
  Problem p;
  set_hidden(p, op, hidden_states);
  p.a.act = rvvk::Activation::kSilu;
  const auto s1 = w1_scale ? std::optional<at::Tensor>(w1_scale->reshape({1, -1}))
                           : std::optional<at::Tensor>();
  const auto s2 = w2_scale ? std::optional<at::Tensor>(w2_scale->reshape({1, -1}))
                           : std::optional<at::Tensor>();
  set_weights(p, op, w1.unsqueeze(0), w2.unsqueeze(0), use_int8_w8a8 ? kInt8W8A8 : kUnquant,
              is_vnni, s1, s2, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
              std::nullopt);
  // Every token chooses expert 0 with weight 1; the routed output is the base term.
  p.a.topk = 1;
  p.ids = at::zeros({p.a.tokens, 1}, hidden_states.options().dtype(at::kInt));
  p.weights = at::ones({p.a.tokens, 1}, hidden_states.options().dtype(at::kFloat));
  p.a.weights = p.weights.data_ptr<float>();
  if (fused_experts_out) {
    p.base = *fused_experts_out;
    p.a.base_stride = rows_of(p.base);
    p.a.base = p.base.data_ptr();
    p.a.base_scale = static_cast<float>(routed_scaling_factor.value_or(1.0));
  }
  at::Tensor out = at::empty({p.a.tokens, p.a.hidden}, hidden_states.options());
  if (p.a.tokens > 0) run(p, out);
  if (inplace) hidden_states.copy_(out);
  return out;
}

}  // namespace rvv_ops
