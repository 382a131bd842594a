// Gated DeltaNet's ops (Qwen3-Next / Qwen3.5 linear attention) on rvv-kernels:
// causal_conv1d_fwd_cpu / causal_conv1d_update_cpu (the short depthwise convolution with
// its per-request state), fused_sigmoid_gating_delta_rule_update_cpu (decode) and
// chunk_gated_delta_rule_cpu (prefill), with sgl-kernel's schemas.
//
// The op layer converts inputs to fp32 (l2 norms, gates and layouts by ATen), validates
// every index before anything is written and runs the kernels over (sequence, channel
// block) or (sequence, value head) tasks; states are read and written where they are.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <sstream>
#include <vector>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

void check_ndim(const char* op, const char* arg, const at::Tensor& t, std::int64_t ndim,
                const char* layout) {
  TORCH_CHECK_VALUE(t.dim() == ndim, op, ": ", arg, " has ", t.dim(), " dimensions (",
                    describe(t), "); expected ", ndim, " (", layout, ")");
}

void check_shape(const char* op, const char* arg, const at::Tensor& t,
                 c10::SymIntArrayRef want, const char* layout) {
  TORCH_CHECK_VALUE(t.sym_sizes() == want, op, ": ", arg, " has shape ", t.sym_sizes(),
                    "; expected ", want, " (", layout, ")");
}

void check_float(const char* op, const char* arg, const at::Tensor& t) {
  (void)kernel_dtype(op, arg, t);  // TypeError unless fp32, bf16 or fp16
}

void check_index_dtype(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, op, ": ", arg,
                   " has dtype ", dtype_name(t.scalar_type()),
                   "; expected torch.int32 or torch.int64");
}

std::vector<std::int64_t> read_ints(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  const std::int64_t* p = c.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + c.numel());
}

std::string list_str(const std::vector<std::int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size() && i < 16; ++i) s << (i ? ", " : "") << v[i];
  if (v.size() > 16) s << ", ...";
  s << "]";
  return s.str();
}

// Sequence boundaries: `starts` [n + 1], 0 <= starts[0] <= ... <= starts[n] <= total.
void check_offsets(const char* op, const char* arg, const std::vector<std::int64_t>& starts,
                   std::int64_t total) {
  for (std::size_t i = 0; i < starts.size(); ++i) {
    TORCH_CHECK_VALUE(starts[i] >= 0 && starts[i] <= total && (i == 0 || starts[i] >= starts[i - 1]),
                      op, ": ", arg, " = ", list_str(starts), " has ", starts[i], " at ", i,
                      "; expected non-decreasing offsets in [0, ", total, "]");
  }
}

// State slots: each in [0, slots) or `pad` (no state: zeros in, nothing written); no slot
// twice, as each is written.
void check_slots(const char* op, const char* arg, const std::vector<std::int64_t>& idx,
                 std::int64_t slots, bool allow_negative_pad, std::int64_t pad) {
  std::set<std::int64_t> seen;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::int64_t s = idx[i];
    if (s == pad || (allow_negative_pad && s < 0)) continue;
    TORCH_CHECK_VALUE(s >= 0 && s < slots, op, ": ", arg, "[", i, "] = ", s,
                      " is not a state slot; expected 0 <= index < ", slots,
                      allow_negative_pad ? " or a negative padding index" : " or pad_slot_id");
    TORCH_CHECK_VALUE(seen.insert(s).second, op, ": ", arg, " = ", list_str(idx), " has slot ", s,
                      " twice; expected distinct slots (each is written)");
  }
}

bool is_pad(std::int64_t s, bool allow_negative_pad, std::int64_t pad) {
  return s == pad || (allow_negative_pad && s < 0);
}

// ---------------------------------------------------------------------------------------
// causal conv1d

struct ConvSeq {
  std::int64_t start, len, slot;  // slot < 0 or pad: no state
  bool init;                      // read the state (else zeros)
  bool has_state;
};

// The weight [dim, width] in fp32, transposed to [width, dim]. `is_vnni`: sgl-kernel's
// causal_conv1d_weight_pack layout (bf16/fp16, width 4, dim % 32 == 0: [dim / 32, 2, 32, 2]
// as 16-bit pairs), unpacked here.
at::Tensor conv_weight_t(const char* op, const at::Tensor& weight, std::int64_t dim,
                         bool is_vnni) {
  at::Tensor w = weight;
  if (is_vnni) {
    TORCH_CHECK_VALUE(weight.scalar_type() != at::kFloat, op,
                      ": is_vnni=True with an fp32 weight; the packed layout "
                      "(causal_conv1d_weight_pack) holds bf16 or fp16 pairs");
    TORCH_CHECK_VALUE(weight.size(1) == 4 && dim % 32 == 0, op, ": is_vnni=True with weight ",
                      describe(weight), "; the packed layout needs width 4 and dim % 32 == 0");
    w = weight.contiguous().view({dim / 32, 2, 32, 2}).permute({0, 2, 1, 3}).reshape({dim, 4});
  }
  return w.t().to(at::kFloat).contiguous();
}

// Runs the convolution of `seqs` over xs [total, dim] (fp32, contiguous); returns out
// [total, dim] fp32 (rows outside every sequence: 0) and, with `states` [slots, dim,
// width - 1], writes each sequence's last width - 1 inputs (after its history) back.
at::Tensor run_conv(const at::Tensor& xs, const at::Tensor& wt, const at::Tensor& bias_f,
                    const std::optional<at::Tensor>& states, const std::vector<ConvSeq>& seqs,
                    std::int64_t width, bool silu) {
  const std::int64_t total = xs.size(0), dim = xs.size(1), w1 = width - 1;
  const auto nseq = static_cast<std::int64_t>(seqs.size());
  at::Tensor out = at::zeros({total, dim}, xs.options());
  at::Tensor hist = at::zeros({nseq, w1, dim}, xs.options());
  if (w1 > 0 && states.has_value())
    for (std::int64_t i = 0; i < nseq; ++i)
      if (seqs[i].has_state && seqs[i].init) hist[i].copy_(states->select(0, seqs[i].slot).t());
  if (total > 0 && dim > 0) {
    constexpr std::int64_t kBlock = 256;  // channels per task
    const std::int64_t blocks = (dim + kBlock - 1) / kBlock;
    const float* x_p = xs.data_ptr<float>();
    const float* h_p = hist.data_ptr<float>();
    const float* w_p = wt.data_ptr<float>();
    const float* b_p = bias_f.defined() ? bias_f.data_ptr<float>() : nullptr;
    float* o_p = out.data_ptr<float>();
    at::parallel_for(0, nseq * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t task = begin; task < end; ++task) {
        const ConvSeq& s = seqs[task / blocks];
        const std::int64_t c0 = (task % blocks) * kBlock, n = std::min(kBlock, dim - c0);
        rvvk::causal_conv1d(x_p + s.start * dim + c0, dim, h_p + (task / blocks) * w1 * dim + c0,
                            w_p + c0, dim, b_p != nullptr ? b_p + c0 : nullptr,
                            o_p + s.start * dim + c0, dim, s.len, n, width, silu);
      }
    });
  }
  if (w1 > 0 && states.has_value())
    for (std::int64_t i = 0; i < nseq; ++i) {
      if (!seqs[i].has_state) continue;
      const at::Tensor window = at::cat({hist[i], xs.narrow(0, seqs[i].start, seqs[i].len)}, 0);
      states->select(0, seqs[i].slot).copy_(window.narrow(0, seqs[i].len, w1).t());
    }
  return out;
}

// Checks shared by the two conv ops; returns width.
std::int64_t check_conv_common(const char* op, const at::Tensor& x, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& states, std::int64_t dim,
                               bool is_vnni) {
  check_float(op, "x", x);
  check_float(op, "weight", weight);
  check_ndim(op, "weight", weight, 2, "[dim, width]");
  TORCH_CHECK_VALUE(weight.sym_size(0) == dim && weight.sym_size(1) >= 1, op,
                    ": weight has shape ", weight.sym_sizes(), "; expected [", dim,
                    ", width >= 1] (dim = x's channels)");
  const std::int64_t width = weight.size(1);
  TORCH_CHECK_VALUE(!is_vnni || width == 4, op, ": is_vnni=True with weight ",
                    weight.sym_sizes(), "; the packed layout (causal_conv1d_weight_pack) has "
                    "width 4");
  if (bias.has_value()) {
    check_float(op, "bias", *bias);
    check_shape(op, "bias", *bias, c10::SymIntArrayRef({c10::SymInt(dim)}), "[dim]");
  }
  if (states.has_value()) {
    check_float(op, "conv_states", *states);
    check_ndim(op, "conv_states", *states, 3, "[slots, dim, width - 1]");
    TORCH_CHECK_VALUE(states->sym_size(1) == dim && states->sym_size(2) == width - 1, op,
                      ": conv_states has shape ", states->sym_sizes(), "; expected [slots, ", dim,
                      ", ", width - 1, "] (dim, width - 1 of weight ", weight.sym_sizes(), ")");
  }
  return width;
}

}  // namespace

at::Tensor causal_conv1d_fwd_cpu(bool meta, const at::Tensor& x, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias,
                                 const std::optional<at::Tensor>& conv_states,
                                 const std::optional<at::Tensor>& query_start_loc,
                                 const std::optional<at::Tensor>& cache_indices,
                                 const std::optional<at::Tensor>& has_initial_state,
                                 bool silu_activation, std::int64_t pad_slot_id, bool is_vnni) {
  const char* op = "causal_conv1d_fwd_cpu";
  if (!meta) {
    check_cpu(op, "x", x);
    check_cpu(op, "weight", weight);
    for (const auto* t : {&bias, &conv_states, &query_start_loc, &cache_indices,
                          &has_initial_state})
      if (t->has_value()) check_cpu(op, "an optional tensor argument", **t);
  }
  const bool varlen = query_start_loc.has_value();
  check_ndim(op, "x", x, varlen ? 2 : 3,
             varlen ? "[dim, total_tokens] with query_start_loc"
                    : "[batch, dim, seqlen] without query_start_loc");
  const std::int64_t dim = x.size(varlen ? 0 : 1);
  const std::int64_t width = check_conv_common(op, x, weight, bias, conv_states, dim, is_vnni);
  std::int64_t batch = varlen ? 0 : x.size(0);
  if (varlen) {
    check_index_dtype(op, "query_start_loc", *query_start_loc);
    check_ndim(op, "query_start_loc", *query_start_loc, 1, "[batch + 1]");
    TORCH_CHECK_VALUE(query_start_loc->size(0) >= 1, op, ": query_start_loc is empty; expected [batch + 1] offsets");
    batch = query_start_loc->size(0) - 1;
  }
  if (cache_indices.has_value()) {
    check_index_dtype(op, "cache_indices", *cache_indices);
    check_shape(op, "cache_indices", *cache_indices, c10::SymIntArrayRef({c10::SymInt(batch)}), "[batch]");
  }
  if (has_initial_state.has_value()) {
    TORCH_CHECK_TYPE(has_initial_state->scalar_type() == at::kBool, op,
                     ": has_initial_state has dtype ", dtype_name(has_initial_state->scalar_type()),
                     "; expected torch.bool");
    check_shape(op, "has_initial_state", *has_initial_state, c10::SymIntArrayRef({c10::SymInt(batch)}), "[batch]");
  }
  at::Tensor out = at::empty_like(x);
  if (meta) return out;

  const std::int64_t total = varlen ? x.size(1) : batch * x.size(2);
  std::vector<std::int64_t> starts;
  if (varlen) {
    starts = read_ints(*query_start_loc);
    check_offsets(op, "query_start_loc", starts, total);
  } else {
    for (std::int64_t b = 0; b <= batch; ++b) starts.push_back(b * x.size(2));
  }
  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) slots[b] = b;
  if (cache_indices.has_value()) slots = read_ints(*cache_indices);
  if (conv_states.has_value())
    check_slots(op, "cache_indices", slots, conv_states->size(0), false, pad_slot_id);
  std::vector<std::int64_t> init(static_cast<std::size_t>(batch), 0);
  if (has_initial_state.has_value()) init = read_ints(*has_initial_state);

  std::vector<ConvSeq> seqs;
  for (std::int64_t b = 0; b < batch; ++b) {
    const bool has_state = conv_states.has_value() && slots[b] != pad_slot_id;
    seqs.push_back({starts[b], starts[b + 1] - starts[b], slots[b], init[b] != 0, has_state});
  }
  // tokens as rows [total, dim]
  const at::Tensor xs = (varlen ? x.t() : x.transpose(1, 2).reshape({total, dim}))
                            .to(at::kFloat)
                            .contiguous();
  const at::Tensor wt = conv_weight_t(op, weight, dim, is_vnni);
  const at::Tensor bias_f = bias.has_value() ? bias->to(at::kFloat).contiguous() : at::Tensor();
  const at::Tensor o = run_conv(xs, wt, bias_f, conv_states, seqs, width, silu_activation);
  if (varlen) {
    out.t().copy_(o);
  } else {
    out.transpose(1, 2).copy_(o.view({batch, x.size(2), dim}));
  }
  return out;
}

at::Tensor causal_conv1d_update_cpu(bool meta, const at::Tensor& x, at::Tensor& conv_states,
                                    const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, bool silu_activation,
                                    const std::optional<at::Tensor>& cache_seqlens,
                                    const std::optional<at::Tensor>& conv_state_indices,
                                    std::int64_t pad_slot_id, bool is_vnni) {
  const char* op = "causal_conv1d_update_cpu";
  if (!meta) {
    check_cpu(op, "x", x);
    check_cpu(op, "conv_states", conv_states);
    check_cpu(op, "weight", weight);
    for (const auto* t : {&bias, &conv_state_indices})
      if (t->has_value()) check_cpu(op, "an optional tensor argument", **t);
  }
  TORCH_CHECK_VALUE(x.dim() == 2 || x.dim() == 3, op, ": x has ", x.dim(), " dimensions (",
                    describe(x), "); expected 2 ([batch, dim]) or 3 ([batch, dim, seqlen])");
  TORCH_CHECK_VALUE(!cache_seqlens.has_value(), op,
                    ": cache_seqlens is given; a circular conv state is not supported (as in "
                    "sgl-kernel's CPU op): pass None");
  const std::int64_t batch = x.size(0), dim = x.size(1);
  const std::int64_t seqlen = x.dim() == 3 ? x.size(2) : 1;
  const std::int64_t width =
      check_conv_common(op, x, weight, bias, conv_states, dim, is_vnni);
  if (conv_state_indices.has_value()) {
    check_index_dtype(op, "conv_state_indices", *conv_state_indices);
    check_shape(op, "conv_state_indices", *conv_state_indices, c10::SymIntArrayRef({c10::SymInt(batch)}), "[batch]");
  }
  at::Tensor out = at::empty_like(x);
  if (meta) return out;

  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) slots[b] = b;
  if (conv_state_indices.has_value()) slots = read_ints(*conv_state_indices);
  check_slots(op, "conv_state_indices", slots, conv_states.size(0), false, pad_slot_id);
  std::vector<ConvSeq> seqs;
  for (std::int64_t b = 0; b < batch; ++b) {
    const bool has_state = slots[b] != pad_slot_id;
    seqs.push_back({b * seqlen, seqlen, slots[b], true, has_state});
  }
  const at::Tensor x3 = x.dim() == 3 ? x : x.unsqueeze(2);
  const at::Tensor xs = x3.transpose(1, 2).reshape({batch * seqlen, dim}).to(at::kFloat).contiguous();
  const at::Tensor wt = conv_weight_t(op, weight, dim, is_vnni);
  const at::Tensor bias_f = bias.has_value() ? bias->to(at::kFloat).contiguous() : at::Tensor();
  const at::Tensor o = run_conv(xs, wt, bias_f, conv_states, seqs, width, silu_activation);
  at::Tensor out3 = x.dim() == 3 ? out : out.unsqueeze(2);
  out3.transpose(1, 2).copy_(o.view({batch, seqlen, dim}));
  return out;
}

// ---------------------------------------------------------------------------------------
// gated delta rule

namespace {

struct GdnSeq {
  std::int64_t start, len, slot;  // slot < 0: zero state, not written
};

// q, k [T, H, K], v [T, HV, V], g, beta [T, HV]: fp32 contiguous; q already l2-normalised
// if asked. Runs every (sequence, value head) and returns out [T, HV, V] fp32 (rows outside
// every sequence: 0). `state` [slots, HV, V, K] fp32 with a contiguous last dimension.
at::Tensor run_gdn(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& g, const at::Tensor& beta, at::Tensor& state,
                   const std::vector<GdnSeq>& seqs) {
  const std::int64_t T = q.size(0), H = q.size(1), K = q.size(2);
  const std::int64_t HV = v.size(1), V = v.size(2);
  const std::int64_t group = HV / H;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(K)));
  at::Tensor out = at::zeros({T, HV, V}, q.options());
  const at::Tensor g_h = g.t().contiguous(), beta_h = beta.t().contiguous();  // [HV, T]
  const auto nseq = static_cast<std::int64_t>(seqs.size());
  const float *q_p = q.data_ptr<float>(), *k_p = k.data_ptr<float>(), *v_p = v.data_ptr<float>();
  const float *g_p = g_h.data_ptr<float>(), *b_p = beta_h.data_ptr<float>();
  float* o_p = out.data_ptr<float>();
  float* s_p = state.data_ptr<float>();
  const std::int64_t s0 = state.stride(0), s1 = state.stride(1), s2 = state.stride(2);
  at::parallel_for(0, nseq * HV, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch;
    for (std::int64_t task = begin; task < end; ++task) {
      const GdnSeq& s = seqs[task / HV];
      const std::int64_t h = task % HV, hq = h / group;
      if (s.len == 0) continue;
      float* st = nullptr;
      std::int64_t st_stride = K;
      if (s.slot >= 0) {
        st = s_p + s.slot * s0 + h * s1;
        st_stride = s2;
      } else {
        scratch.assign(static_cast<std::size_t>(V * K), 0.0f);
        st = scratch.data();
      }
      rvvk::gated_delta_rule(st, st_stride, q_p + (s.start * H + hq) * K, H * K,
                             k_p + (s.start * H + hq) * K, H * K, v_p + (s.start * HV + h) * V,
                             HV * V, g_p + h * T + s.start, b_p + h * T + s.start,
                             o_p + (s.start * HV + h) * V, HV * V, s.len, K, V, scale);
    }
  });
  return out;
}

at::Tensor l2norm_f32(const at::Tensor& x, bool apply, double eps) {
  const at::Tensor f = x.to(at::kFloat);
  if (!apply) return f.contiguous();
  return (f * at::rsqrt(f.square().sum(-1, true) + eps)).contiguous();
}

void check_state(const char* op, const char* arg, const at::Tensor& state, std::int64_t HV,
                 std::int64_t V, std::int64_t K) {
  TORCH_CHECK_TYPE(state.scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                   dtype_name(state.scalar_type()), "; expected torch.float32");
  check_ndim(op, arg, state, 4, "[slots, v_heads, v_head_dim, k_head_dim]");
  TORCH_CHECK_VALUE(state.sym_size(1) == HV && state.sym_size(2) == V && state.sym_size(3) == K,
                    op, ": ", arg, " has shape ", state.sym_sizes(), "; expected [slots, ", HV,
                    ", ", V, ", ", K, "] ([slots, v_heads, v_head_dim, k_head_dim], SGLang's "
                    "state pool layout)");
}

void check_state_layout(const char* op, const char* arg, const at::Tensor& state) {
  TORCH_CHECK_VALUE(state.size(3) <= 1 || state.stride(3) == 1, op, ": ", arg, " is ",
                    describe(state), "; expected a contiguous last dimension");
}

}  // namespace

at::Tensor fused_sigmoid_gating_delta_rule_update_cpu(
    bool meta, const at::Tensor& A_log, const at::Tensor& dt_bias, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, const at::Tensor& a, const at::Tensor& b,
    at::Tensor& initial_state_source, const at::Tensor& initial_state_indices,
    const at::Tensor& cu_seqlens, bool use_qk_l2norm_in_kernel, double softplus_beta,
    double softplus_threshold) {
  const char* op = "fused_sigmoid_gating_delta_rule_update_cpu";
  if (!meta) {
    for (auto [name, t] : std::initializer_list<std::pair<const char*, const at::Tensor*>>{
             {"A_log", &A_log}, {"dt_bias", &dt_bias}, {"q", &q}, {"k", &k}, {"v", &v},
             {"a", &a}, {"b", &b}, {"initial_state_source", &initial_state_source},
             {"initial_state_indices", &initial_state_indices}, {"cu_seqlens", &cu_seqlens}})
      check_cpu(op, name, *t);
  }
  for (auto [name, t] : std::initializer_list<std::pair<const char*, const at::Tensor*>>{
           {"A_log", &A_log}, {"dt_bias", &dt_bias}, {"q", &q}, {"k", &k}, {"v", &v},
           {"a", &a}, {"b", &b}})
    check_float(op, name, *t);
  check_ndim(op, "q", q, 4, "[seq_len, batch, heads, head_dim]");
  check_ndim(op, "v", v, 4, "[seq_len, batch, v_heads, v_head_dim]");
  const c10::SymInt S = q.sym_size(0), B = q.sym_size(1), H = q.sym_size(2), K = q.sym_size(3);
  const c10::SymInt HV = v.sym_size(2), V = v.sym_size(3);
  check_shape(op, "k", k, q.sym_sizes(), "q's shape");
  check_shape(op, "v", v, c10::SymIntArrayRef({S, B, HV, V}), "[seq_len, batch, v_heads, v_head_dim] with q's seq_len and batch");
  check_shape(op, "a", a, c10::SymIntArrayRef({B, HV}), "[batch, v_heads]");
  check_shape(op, "b", b, c10::SymIntArrayRef({B, HV}), "[batch, v_heads]");
  check_shape(op, "A_log", A_log, c10::SymIntArrayRef({HV}), "[v_heads]");
  check_shape(op, "dt_bias", dt_bias, c10::SymIntArrayRef({HV}), "[v_heads]");
  TORCH_CHECK_VALUE(H > 0 && HV % H == 0, op, ": v has ", HV, " heads and q ", H,
                    "; expected v_heads a positive multiple of heads");
  check_index_dtype(op, "initial_state_indices", initial_state_indices);
  check_shape(op, "initial_state_indices", initial_state_indices, c10::SymIntArrayRef({B}), "[batch]");
  check_index_dtype(op, "cu_seqlens", cu_seqlens);
  check_shape(op, "cu_seqlens", cu_seqlens, c10::SymIntArrayRef({B + 1}), "[batch + 1]");
  TORCH_CHECK_VALUE(softplus_beta > 0 && std::isfinite(softplus_beta), op, ": softplus_beta = ",
                    softplus_beta, "; expected a finite value > 0");
  const std::int64_t Kc = q.size(3), HVc = v.size(2), Vc = v.size(3);
  check_state(op, "initial_state_source", initial_state_source, HVc, Vc, Kc);
  if (meta) return at::empty_symint({B, S, HV, V}, q.options());

  check_state_layout(op, "initial_state_source", initial_state_source);
  const std::int64_t Sc = q.size(0), Bc = q.size(1);
  const std::vector<std::int64_t> slots = read_ints(initial_state_indices);
  check_slots(op, "initial_state_indices", slots, initial_state_source.size(0), true, -1);
  std::vector<GdnSeq> seqs;
  for (std::int64_t i = 0; i < Bc; ++i) seqs.push_back({i * Sc, Sc, slots[i] < 0 ? -1 : slots[i]});
  // tokens of batch entry i are rows [i * S, (i + 1) * S)
  auto rows = [&](const at::Tensor& t) { return t.transpose(0, 1).reshape({Bc * Sc, t.size(2), t.size(3)}); };
  const at::Tensor qf = l2norm_f32(rows(q), use_qk_l2norm_in_kernel, 1e-6);
  const at::Tensor kf = l2norm_f32(rows(k), use_qk_l2norm_in_kernel, 1e-6);
  const at::Tensor vf = rows(v).to(at::kFloat).contiguous();
  // g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b): per batch entry, for its tokens
  const at::Tensor gb = -at::exp(A_log.to(at::kFloat)) *
                        at::softplus(a.to(at::kFloat) + dt_bias.to(at::kFloat), softplus_beta,
                                     softplus_threshold);
  const at::Tensor bb = at::sigmoid(b.to(at::kFloat));
  const at::Tensor g = gb.unsqueeze(1).expand({Bc, Sc, HVc}).reshape({Bc * Sc, HVc}).contiguous();
  const at::Tensor beta = bb.unsqueeze(1).expand({Bc, Sc, HVc}).reshape({Bc * Sc, HVc}).contiguous();
  const at::Tensor o = run_gdn(qf, kf, vf, g, beta, initial_state_source, seqs);
  return o.view({Bc, Sc, HVc, Vc}).to(q.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> chunk_gated_delta_rule_cpu(
    bool meta, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& g, const at::Tensor& beta, at::Tensor& initial_state,
    bool output_final_state, const at::Tensor& cu_seqlens, bool head_first,
    bool use_qk_l2norm_in_kernel, const at::Tensor& initial_state_indices, double eps) {
  const char* op = "chunk_gated_delta_rule_cpu";
  if (!meta) {
    for (auto [name, t] : std::initializer_list<std::pair<const char*, const at::Tensor*>>{
             {"query", &query}, {"key", &key}, {"value", &value}, {"g", &g}, {"beta", &beta},
             {"initial_state", &initial_state}, {"cu_seqlens", &cu_seqlens},
             {"initial_state_indices", &initial_state_indices}})
      check_cpu(op, name, *t);
  }
  TORCH_CHECK_VALUE(!head_first, op, ": head_first=True; expected False (query [1, tokens, "
                    "heads, head_dim]), as sgl-kernel's CPU op");
  for (auto [name, t] : std::initializer_list<std::pair<const char*, const at::Tensor*>>{
           {"query", &query}, {"key", &key}, {"value", &value}, {"g", &g}, {"beta", &beta}})
    check_float(op, name, *t);
  check_ndim(op, "query", query, 4, "[1, tokens, heads, head_dim]");
  check_ndim(op, "value", value, 4, "[1, tokens, v_heads, v_head_dim]");
  TORCH_CHECK_VALUE(query.sym_size(0) == 1, op, ": query has shape ", query.sym_sizes(),
                    "; expected [1, tokens, heads, head_dim] (sequences packed, cu_seqlens)");
  const c10::SymInt T = query.sym_size(1), H = query.sym_size(2), K = query.sym_size(3);
  const c10::SymInt HV = value.sym_size(2), V = value.sym_size(3);
  check_shape(op, "key", key, query.sym_sizes(), "query's shape");
  check_shape(op, "value", value, c10::SymIntArrayRef({1, T, HV, V}), "[1, tokens, v_heads, v_head_dim]");
  check_shape(op, "g", g, c10::SymIntArrayRef({1, T, HV}), "[1, tokens, v_heads]");
  check_shape(op, "beta", beta, c10::SymIntArrayRef({1, T, HV}), "[1, tokens, v_heads]");
  TORCH_CHECK_VALUE(H > 0 && HV % H == 0, op, ": value has ", HV, " heads and query ", H,
                    "; expected v_heads a positive multiple of heads");
  check_index_dtype(op, "initial_state_indices", initial_state_indices);
  check_ndim(op, "initial_state_indices", initial_state_indices, 1, "[num_seqs]");
  const c10::SymInt N = initial_state_indices.sym_size(0);
  check_index_dtype(op, "cu_seqlens", cu_seqlens);
  check_shape(op, "cu_seqlens", cu_seqlens, c10::SymIntArrayRef({N + 1}), "[num_seqs + 1]");
  TORCH_CHECK_VALUE(eps >= 0 && std::isfinite(eps), op, ": eps = ", eps, "; expected a finite value >= 0");
  const std::int64_t Kc = query.size(3), HVc = value.size(2), Vc = value.size(3);
  check_state(op, "initial_state", initial_state, HVc, Vc, Kc);
  if (meta) {
    return {at::empty_symint({1, T, HV, V}, query.options()),
            at::empty_symint({output_final_state ? N : c10::SymInt(0), HV, V, K},
                             initial_state.options())};
  }
  check_state_layout(op, "initial_state", initial_state);
  const std::int64_t Tc = query.size(1), Nc = initial_state_indices.size(0);
  const std::vector<std::int64_t> slots = read_ints(initial_state_indices);
  check_slots(op, "initial_state_indices", slots, initial_state.size(0), true, -1);
  const std::vector<std::int64_t> starts = read_ints(cu_seqlens);
  check_offsets(op, "cu_seqlens", starts, Tc);
  std::vector<GdnSeq> seqs;
  for (std::int64_t i = 0; i < Nc; ++i)
    seqs.push_back({starts[i], starts[i + 1] - starts[i], slots[i] < 0 ? -1 : slots[i]});
  const at::Tensor qf = l2norm_f32(query[0], use_qk_l2norm_in_kernel, eps);
  const at::Tensor kf = l2norm_f32(key[0], use_qk_l2norm_in_kernel, eps);
  const at::Tensor vf = value[0].to(at::kFloat).contiguous();
  const at::Tensor gf = g[0].to(at::kFloat).contiguous();
  const at::Tensor bf = beta[0].to(at::kFloat).contiguous();
  const at::Tensor o = run_gdn(qf, kf, vf, gf, bf, initial_state, seqs);
  at::Tensor final_state = at::zeros({output_final_state ? Nc : 0, HVc, Vc, Kc},
                                     initial_state.options().memory_format(at::MemoryFormat::Contiguous));
  if (output_final_state)
    for (std::int64_t i = 0; i < Nc; ++i)
      if (slots[i] >= 0) final_state[i].copy_(initial_state[slots[i]]);
  return {o.unsqueeze(0).to(query.scalar_type()), final_state};
}

// Qwen3.5's GDN input projections, contiguous layout: mixed_qkvz [tokens, q | k | v | z]
// (q and k num_heads_qk * head_qk wide, v and z num_heads_v * head_v), mixed_ba [tokens,
// b | a] (num_heads_v each) -> new tensors mixed_qkv [tokens, q | k | v], z [tokens,
// num_heads_v, head_v], b and a [tokens, num_heads_v]. Data movement only (row copies).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fused_qkvzba_split_reshape_cat_contiguous_cpu(bool meta, const at::Tensor& mixed_qkvz,
                                              const at::Tensor& mixed_ba,
                                              std::int64_t num_heads_qk,
                                              std::int64_t num_heads_v, std::int64_t head_qk,
                                              std::int64_t head_v) {
  constexpr const char* kOp = "fused_qkvzba_split_reshape_cat_contiguous_cpu";
  if (!meta) {
    check_cpu(kOp, "mixed_qkvz", mixed_qkvz);
    check_cpu(kOp, "mixed_ba", mixed_ba);
  }
  for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"num_heads_qk", num_heads_qk},
                                {"num_heads_v", num_heads_v},
                                {"head_qk", head_qk},
                                {"head_v", head_v}}) {
    TORCH_CHECK_VALUE(v > 0, kOp, ": ", name, " is ", v, "; expected > 0");
  }
  check_same_device(kOp, "mixed_ba", mixed_ba, "mixed_qkvz", mixed_qkvz);
  TORCH_CHECK_VALUE(mixed_qkvz.dim() == 2 && mixed_ba.dim() == 2, kOp, ": mixed_qkvz (",
                    describe(mixed_qkvz), ") and mixed_ba (", describe(mixed_ba),
                    ") must be 2-D [tokens, width]");
  const std::int64_t qkv = 2 * num_heads_qk * head_qk + num_heads_v * head_v;
  const std::int64_t zw = num_heads_v * head_v;
  TORCH_CHECK_VALUE(mixed_qkvz.sym_size(1) == qkv + zw, kOp, ": mixed_qkvz.size(1) = ",
                    mixed_qkvz.sym_size(1), "; expected 2 * num_heads_qk * head_qk + 2 * "
                    "num_heads_v * head_v = ", qkv + zw);
  TORCH_CHECK_VALUE(mixed_ba.sym_size(1) == 2 * num_heads_v, kOp, ": mixed_ba.size(1) = ",
                    mixed_ba.sym_size(1), "; expected 2 * num_heads_v = ", 2 * num_heads_v);
  TORCH_CHECK_VALUE(mixed_ba.sym_size(0) == mixed_qkvz.sym_size(0), kOp, ": mixed_ba has ",
                    mixed_ba.sym_size(0), " rows; expected mixed_qkvz's ",
                    mixed_qkvz.sym_size(0));
  const c10::SymInt tokens = mixed_qkvz.sym_size(0);
  const auto o1 = mixed_qkvz.options(), o2 = mixed_ba.options();
  if (meta) {
    return {at::empty_symint({tokens, qkv}, o1), at::empty_symint({tokens, num_heads_v, head_v}, o1),
            at::empty_symint({tokens, num_heads_v}, o2), at::empty_symint({tokens, num_heads_v}, o2)};
  }
  const std::int64_t n = mixed_qkvz.size(0);
  at::Tensor out_qkv = at::empty({n, qkv}, o1);
  at::Tensor z = at::empty({n, num_heads_v, head_v}, o1);
  at::Tensor b = at::empty({n, num_heads_v}, o2);
  at::Tensor a = at::empty({n, num_heads_v}, o2);
  out_qkv.copy_(mixed_qkvz.narrow(1, 0, qkv));
  z.view({n, zw}).copy_(mixed_qkvz.narrow(1, qkv, zw));
  b.copy_(mixed_ba.narrow(1, 0, num_heads_v));
  a.copy_(mixed_ba.narrow(1, num_heads_v, num_heads_v));
  return {out_qkv, z, b, a};
}

}  // namespace rvv_ops
