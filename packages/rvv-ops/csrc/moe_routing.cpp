// sgl_kernel's mixture-of-experts routing ops on rvv-kernels' moe_topk: topk_softmax_cpu,
// topk_sigmoid_cpu, grouped_topk_cpu, biased_grouped_topk_cpu and fused_moe_router_cpu, with
// SGLang 0.5.23's arguments (srt/layers/moe/topk.py, srt/models/grok.py). Outputs:
// topk_weights float32 [tokens, topk] and topk_ids int32 [tokens, topk], highest selection
// value first, ties to the lowest expert id.
//
// Semantics (SGLang's torch references, which its CPU kernels follow):
//  - topk_softmax_cpu / topk_sigmoid_cpu: scores softmax(logits) / sigmoid(logits); with a
//    correction_bias the choice is by score + bias and the weights are the unbiased scores;
//  - grouped_topk_cpu: softmax scores; group value = the group's highest score; the
//    topk_group best groups' experts are the candidates. routed_scaling_factor does not
//    scale the weights: SGLang passes the model's factor here while asserting that it is not
//    to be applied on the output (it only weighs fused shared experts, refused below);
//  - biased_grouped_topk_cpu: sigmoid scores, choice by score + bias, group value = the sum
//    of the group's two highest biased scores; weights unbiased; routed_scaling_factor
//    (SGLang passes it only when it is to be applied) multiplies the weights last;
//  - fused_moe_router_cpu (Grok): gating_output is the router's weight [experts, hidden]
//    (Grok passes self.gate.weight), logits = hidden_states @ gating_output^T in fp32, then
//    moe_softcapping * tanh(logits / moe_softcapping) (0: none), + correction_bias, softmax;
//    the weights are those softmax probabilities (of the biased logits, as sgl-kernel's CPU
//    and triton routers compute them).
// renormalize divides the chosen weights by their sum. num_fused_shared_experts > 0 (SGLang
// fills the last slot with a random shared-expert id) and num_token_non_padded are refused.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

using Result = std::tuple<at::Tensor, at::Tensor>;

// topk_weights float32 and topk_ids int32, [tokens, topk], on hidden_states' device.
Result outputs(const at::Tensor& hidden_states, std::int64_t topk) {
  return {at::empty_symint({hidden_states.sym_size(0), topk},
                           hidden_states.options().dtype(at::kFloat)),
          at::empty_symint({hidden_states.sym_size(0), topk},
                           hidden_states.options().dtype(at::kInt))};
}

void check_hidden(const char* op, const at::Tensor& hidden_states) {
  TORCH_CHECK_VALUE(hidden_states.dim() == 2, op, ": hidden_states (", describe(hidden_states),
                    ") is ", hidden_states.dim(), "-d; expected [tokens, hidden_size]");
}

void check_topk(const char* op, std::int64_t topk, const c10::SymInt& experts,
                const char* experts_what) {
  TORCH_CHECK_VALUE(topk >= 1, op, ": topk is ", topk, "; expected >= 1");
  TORCH_CHECK_VALUE(experts >= 1, op, ": ", experts_what, " is ", experts,
                    "; expected at least one expert");
  TORCH_CHECK_VALUE(topk <= experts, op, ": topk is ", topk, "; expected at most the number of "
                    "experts, ", experts_what, " = ", experts);
}

// gating_output [tokens, experts] of a routing op (not the fused router's weight).
rvvk::DType check_gating(const char* op, const at::Tensor& hidden_states,
                         const at::Tensor& gating_output, std::int64_t topk) {
  check_hidden(op, hidden_states);
  const rvvk::DType dtype = kernel_dtype(op, "gating_output", gating_output);
  check_same_device(op, "gating_output", gating_output, "hidden_states", hidden_states);
  TORCH_CHECK_VALUE(gating_output.dim() == 2, op, ": gating_output (", describe(gating_output),
                    ") is ", gating_output.dim(), "-d; expected [tokens, experts]");
  TORCH_CHECK_VALUE(gating_output.sym_size(0) == hidden_states.sym_size(0), op,
                    ": gating_output (", describe(gating_output), ") has ",
                    gating_output.sym_size(0), " tokens; expected hidden_states.size(0) = ",
                    hidden_states.sym_size(0), " (hidden_states: ", describe(hidden_states), ")");
  check_topk(op, topk, gating_output.sym_size(1), "gating_output.size(1)");
  return dtype;
}

// correction_bias [experts], fp32/bf16/fp16 (converted to fp32 for the kernel).
void check_bias(const char* op, const std::optional<at::Tensor>& bias,
                const c10::SymInt& experts, const at::Tensor& hidden_states) {
  if (!bias.has_value()) return;
  kernel_dtype(op, "correction_bias", *bias);
  check_same_device(op, "correction_bias", *bias, "hidden_states", hidden_states);
  TORCH_CHECK_VALUE(bias->dim() == 1 && bias->sym_size(0) == experts, op,
                    ": correction_bias (", describe(*bias), ") has the wrong shape; expected [",
                    experts, "] (one value per expert)");
}

void check_groups(const char* op, std::int64_t topk, const c10::SymInt& experts,
                  std::int64_t num_expert_group, std::int64_t topk_group) {
  TORCH_CHECK_VALUE(num_expert_group >= 1, op, ": num_expert_group is ", num_expert_group,
                    "; expected >= 1");
  TORCH_CHECK_VALUE(experts % num_expert_group == 0, op, ": gating_output.size(1) = ", experts,
                    " experts do not split into num_expert_group = ", num_expert_group,
                    " equal groups; expected a divisor of the expert count");
  TORCH_CHECK_VALUE(topk_group >= 1 && topk_group <= num_expert_group, op, ": topk_group is ",
                    topk_group, "; expected 1 <= topk_group <= num_expert_group = ",
                    num_expert_group);
  const c10::SymInt candidates = experts / num_expert_group * topk_group;
  TORCH_CHECK_VALUE(topk <= candidates, op, ": topk is ", topk, "; expected at most topk_group "
                    "* experts per group = ", topk_group, " * ", experts / num_expert_group,
                    " = ", candidates, " (the experts of the kept groups)");
}

void check_unsupported(const char* op, std::int64_t num_fused_shared_experts,
                       const std::optional<at::Tensor>& num_token_non_padded) {
  TORCH_CHECK_VALUE(num_fused_shared_experts == 0, op, ": num_fused_shared_experts is ",
                    num_fused_shared_experts, "; expected 0 (fused shared-expert slots are not "
                    "supported: run the shared expert separately)");
  TORCH_CHECK_VALUE(!num_token_non_padded.has_value(), op,
                    ": num_token_non_padded is a tensor; expected None (padded-token masking "
                    "is not supported, as in sgl-kernel's CPU op)");
}

// `t` itself if its last dimension is contiguous, else a contiguous copy (inputs are only
// read, so a layout the kernel cannot walk is copied rather than refused).
at::Tensor last_dim_contiguous(const at::Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

// The CPU part: runs moe_topk over the tokens of `args` (logits or router fields and options
// set by the caller) into new outputs.
Result run(const at::Tensor& hidden_states, std::int64_t topk, rvvk::MoeTopkArgs args,
           const std::optional<at::Tensor>& bias, std::int64_t cost_per_token) {
  Result out = outputs(hidden_states, topk);
  const std::int64_t tokens = hidden_states.size(0);
  if (tokens == 0) return out;
  at::Tensor bias_f32;
  if (bias.has_value()) {
    bias_f32 = bias->to(at::kFloat).contiguous();
    args.bias = bias_f32.data_ptr<float>();
  }
  at::Tensor& weights = std::get<0>(out);
  at::Tensor& ids = std::get<1>(out);
  args.topk = topk;
  args.topk_weights = weights.data_ptr<float>();
  args.weights_stride = topk;
  args.topk_ids = ids.data_ptr<std::int32_t>();
  args.ids_stride = topk;
  parallel_rows(tokens, cost_per_token, [&](std::int64_t begin, std::int64_t end) {
    rvvk::moe_topk(args, begin, end);
  });
  return out;
}

// The routing ops on gating logits [tokens, experts].
Result route_logits(bool meta, const char* op, const at::Tensor& hidden_states,
                    const at::Tensor& gating_output, std::int64_t topk, rvvk::MoeTopkArgs args,
                    const std::optional<at::Tensor>& bias) {
  if (meta) return outputs(hidden_states, topk);
  // Read only: a layout the kernel cannot walk (last-dimension stride != 1) is copied.
  const Rows logits = readable_rows(last_dim_contiguous(gating_output));
  args.experts = gating_output.size(1);
  args.logits_dtype = kernel_dtype(op, "gating_output", gating_output);
  args.logits = logits.t.data_ptr();
  args.logits_stride = logits.stride;
  return run(hidden_states, topk, args, bias, args.experts * (topk + 4));
}

Result topk_scores(bool meta, const char* op, rvvk::MoeScoring scoring,
                   const at::Tensor& hidden_states, const at::Tensor& gating_output,
                   std::int64_t topk, bool renormalize,
                   const std::optional<at::Tensor>& correction_bias) {
  if (!meta) {
    check_cpu(op, "hidden_states", hidden_states);
    check_cpu(op, "gating_output", gating_output);
    if (correction_bias.has_value()) check_cpu(op, "correction_bias", *correction_bias);
  }
  check_gating(op, hidden_states, gating_output, topk);
  check_bias(op, correction_bias, gating_output.sym_size(1), hidden_states);
  rvvk::MoeTopkArgs args;
  args.scoring = scoring;
  args.renormalize = renormalize;
  return route_logits(meta, op, hidden_states, gating_output, topk, args, correction_bias);
}

}  // namespace

Result topk_softmax_cpu(bool meta, const at::Tensor& hidden_states,
                        const at::Tensor& gating_output, std::int64_t topk, bool renormalize,
                        const std::optional<at::Tensor>& correction_bias) {
  return topk_scores(meta, "topk_softmax_cpu", rvvk::MoeScoring::kSoftmax, hidden_states,
                     gating_output, topk, renormalize, correction_bias);
}

Result topk_sigmoid_cpu(bool meta, const at::Tensor& hidden_states,
                        const at::Tensor& gating_output, std::int64_t topk, bool renormalize,
                        const std::optional<at::Tensor>& correction_bias) {
  return topk_scores(meta, "topk_sigmoid_cpu", rvvk::MoeScoring::kSigmoid, hidden_states,
                     gating_output, topk, renormalize, correction_bias);
}

Result grouped_topk_cpu(bool meta, const at::Tensor& hidden_states,
                        const at::Tensor& gating_output, std::int64_t topk, bool renormalize,
                        std::int64_t num_expert_group, std::int64_t topk_group,
                        std::int64_t num_fused_shared_experts,
                        std::optional<double> routed_scaling_factor,
                        const std::optional<at::Tensor>& num_token_non_padded) {
  constexpr const char* kOp = "grouped_topk_cpu";
  if (!meta) {
    check_cpu(kOp, "hidden_states", hidden_states);
    check_cpu(kOp, "gating_output", gating_output);
  }
  check_gating(kOp, hidden_states, gating_output, topk);
  check_groups(kOp, topk, gating_output.sym_size(1), num_expert_group, topk_group);
  check_unsupported(kOp, num_fused_shared_experts, num_token_non_padded);
  (void)routed_scaling_factor;  // not applied to the weights (see the top of this file)
  rvvk::MoeTopkArgs args;
  args.scoring = rvvk::MoeScoring::kSoftmax;
  args.renormalize = renormalize;
  args.num_groups = num_expert_group;
  args.topk_group = topk_group;
  args.group_score = rvvk::MoeGroupScore::kMax;
  return route_logits(meta, kOp, hidden_states, gating_output, topk, args, std::nullopt);
}

Result biased_grouped_topk_cpu(bool meta, const at::Tensor& hidden_states,
                               const at::Tensor& gating_output,
                               const at::Tensor& correction_bias, std::int64_t topk,
                               bool renormalize, std::int64_t num_expert_group,
                               std::int64_t topk_group, std::int64_t num_fused_shared_experts,
                               std::optional<double> routed_scaling_factor,
                               const std::optional<at::Tensor>& num_token_non_padded) {
  constexpr const char* kOp = "biased_grouped_topk_cpu";
  if (!meta) {
    check_cpu(kOp, "hidden_states", hidden_states);
    check_cpu(kOp, "gating_output", gating_output);
    check_cpu(kOp, "correction_bias", correction_bias);
  }
  check_gating(kOp, hidden_states, gating_output, topk);
  check_bias(kOp, correction_bias, gating_output.sym_size(1), hidden_states);
  check_groups(kOp, topk, gating_output.sym_size(1), num_expert_group, topk_group);
  check_unsupported(kOp, num_fused_shared_experts, num_token_non_padded);
  if (routed_scaling_factor.has_value()) {
    const double f = *routed_scaling_factor;
    TORCH_CHECK_VALUE(std::isfinite(f) && std::isfinite(static_cast<float>(f)), kOp,
                      ": routed_scaling_factor is ", f, "; expected a finite number (as fp32) "
                      "or None");
  }
  rvvk::MoeTopkArgs args;
  args.scoring = rvvk::MoeScoring::kSigmoid;
  args.renormalize = renormalize;
  args.num_groups = num_expert_group;
  args.topk_group = topk_group;
  args.group_score = rvvk::MoeGroupScore::kTop2Sum;
  args.scaling = static_cast<float>(routed_scaling_factor.value_or(1.0));
  return route_logits(meta, kOp, hidden_states, gating_output, topk, args, correction_bias);
}

Result fused_moe_router_cpu(bool meta, double moe_softcapping, const at::Tensor& hidden_states,
                            const at::Tensor& gating_output, std::int64_t topk,
                            bool renormalize,
                            const std::optional<at::Tensor>& correction_bias) {
  constexpr const char* kOp = "fused_moe_router_cpu";
  if (!meta) {
    check_cpu(kOp, "hidden_states", hidden_states);
    check_cpu(kOp, "gating_output", gating_output);
    if (correction_bias.has_value()) check_cpu(kOp, "correction_bias", *correction_bias);
  }
  check_hidden(kOp, hidden_states);
  const rvvk::DType hidden_dtype = kernel_dtype(kOp, "hidden_states", hidden_states);
  const rvvk::DType router_dtype = kernel_dtype(kOp, "gating_output", gating_output);
  check_same_device(kOp, "gating_output", gating_output, "hidden_states", hidden_states);
  TORCH_CHECK_VALUE(gating_output.dim() == 2, kOp, ": gating_output (", describe(gating_output),
                    ") is ", gating_output.dim(), "-d; expected the router weight "
                    "[experts, hidden_size]");
  TORCH_CHECK_VALUE(gating_output.sym_size(1) == hidden_states.sym_size(1), kOp,
                    ": gating_output (the router weight, ", describe(gating_output), ") has ",
                    gating_output.sym_size(1), " columns; expected hidden_states.size(1) = ",
                    hidden_states.sym_size(1));
  check_topk(kOp, topk, gating_output.sym_size(0), "gating_output.size(0)");
  check_bias(kOp, correction_bias, gating_output.sym_size(0), hidden_states);
  TORCH_CHECK_VALUE(std::isfinite(moe_softcapping) && moe_softcapping >= 0 &&
                        std::isfinite(static_cast<float>(moe_softcapping)),
                    kOp, ": moe_softcapping is ", moe_softcapping,
                    "; expected a finite number >= 0 (0: no soft cap)");
  if (meta) return outputs(hidden_states, topk);
  const at::Tensor hidden = last_dim_contiguous(hidden_states);
  const at::Tensor weight = last_dim_contiguous(gating_output);
  rvvk::MoeTopkArgs args;
  args.experts = weight.size(0);
  args.hidden_dtype = hidden_dtype;
  args.hidden = hidden.data_ptr();
  args.hidden_stride = hidden.stride(0);
  args.hidden_size = hidden.size(1);
  args.router_dtype = router_dtype;
  args.router_weight = weight.data_ptr();
  args.router_stride = weight.stride(0);
  args.scoring = rvvk::MoeScoring::kSoftmax;
  args.softcap = static_cast<float>(moe_softcapping);
  args.bias_on_logits = true;
  args.renormalize = renormalize;
  return run(hidden_states, topk, args, correction_bias,
             args.experts * (args.hidden_size + topk + 4));
}

}  // namespace rvv_ops
