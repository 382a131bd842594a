// rvv-kernels public API: raw-pointer kernels, no torch.
//
// Each kernel is compiled once per "variant" (portable C++, RVV 1.0, RVV 1.0 +
// Zvfh); the library picks the best variant the running CPU supports on first
// use. See docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rvvk {

// Element types. Activations (q, out, norms) are kF32/kBF16/kF16; a KV cache
// may also hold fp8 (per-tensor scale) or int8 (per-token, per-KV-head scales).
enum class DType : int {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kFP8E4M3 = 3,  // e4m3 "fn": bias 7, no infinities, 0x7f/0xff are NaN
  kFP8E5M2 = 4,  // e5m2: the high byte of an fp16
  kI8 = 5,       // symmetric int8, real value = q * scale
};

// SGLang's indexed KV cache of one layer. Strides are in elements.
struct KvCache {
  DType dtype = DType::kF32;
  // k [tokens, num_kv_heads, head_dim], v [tokens, num_kv_heads, head_dim_v]
  const void* k = nullptr;
  std::int64_t k_stride_t = 0, k_stride_h = 0;
  const void* v = nullptr;
  std::int64_t v_stride_t = 0, v_stride_h = 0;
  // fp8: real value = stored value * scale (per tensor)
  float k_scale = 1.0f, v_scale = 1.0f;
  // int8: real value = stored value * scales[token * scales_stride + kv_head]
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  std::int64_t scales_stride = 0;
  // req_to_token [rows, max_context] (int32 or int64): cache row of each position
  const void* req_to_token = nullptr;
  bool req_to_token_int64 = false;
  std::int64_t req_to_token_stride = 0;
};

// Decode attention over an indexed KV cache (SGLang's data model): one query
// token per request attends to the cached keys of its request. Split-KV
// ("flash-decoding"): decode_attention_partial computes, per (request, KV head,
// split), the softmax-weighted V of its share of the keys for every query head
// of the group into `partial` (one task per request, split and pair of KV heads:
// kDecodeKvHeadsPerTask); decode_attention_merge combines the splits.
// Strides are in elements. Results do not depend on how tasks are spread over
// threads.
struct DecodeAttentionArgs {
  std::int64_t batch = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t head_dim = 0, head_dim_v = 0;
  std::int64_t num_splits = 1;
  // q [batch, num_heads, head_dim]
  DType q_dtype = DType::kF32;
  const void* q = nullptr;
  std::int64_t q_stride_b = 0, q_stride_h = 0;
  KvCache cache;
  const std::int64_t* req_pool_indices = nullptr;  // [batch]
  const std::int64_t* seq_lens = nullptr;          // [batch]
  // out [batch, num_heads, head_dim_v]
  DType o_dtype = DType::kF32;
  void* o = nullptr;
  std::int64_t o_stride_b = 0, o_stride_h = 0;
  // scratch [batch, num_heads, num_splits, head_dim_v + 1]: normalised partial
  // output, then log-sum-exp of the split's scores (-inf when it had no key)
  float* partial = nullptr;
  float sm_scale = 1.0f;
  float logit_cap = 0.0f;        // > 0: scores become cap * tanh(score / cap)
  std::int64_t window = 0;       // > 0: attend only to the last `window` keys
  const float* sinks = nullptr;  // [num_heads] or null: logit added to each softmax denominator
};
// A stage-1 task covers up to this many consecutive KV heads of one request and
// split, taking their key blocks in turn, so the heads' pieces of a cache row
// (adjacent in SGLang's [tokens, kv_heads, dim] layout) are read close together.
inline constexpr std::int64_t kDecodeKvHeadsPerTask = 2;
inline std::int64_t decode_attention_kv_groups(const DecodeAttentionArgs& a) {
  return (a.num_kv_heads + kDecodeKvHeadsPerTask - 1) / kDecodeKvHeadsPerTask;
}
inline std::int64_t decode_attention_partial_tasks(const DecodeAttentionArgs& a) {
  return a.batch * decode_attention_kv_groups(a) * a.num_splits;
}
inline std::int64_t decode_attention_merge_tasks(const DecodeAttentionArgs& a) {
  return a.batch * a.num_heads;
}

// Extend (prefill) attention: each request has `prefix` = seq_len - extend_len
// tokens already in the KV cache and extend_len new tokens whose q, k, v are
// given contiguously (rows extend_start_loc[b] .. + extend_seq_lens[b]). New
// token i attends to the whole prefix and, if causal, to new tokens 0..i (all
// new tokens otherwise); a window > 0 keeps only the last `window` keys up to
// and including the query's own position. Tiled, online softmax; no full score
// matrix. Tasks: extend_attention_tasks(args) = batch x num_kv_heads x
// ceil(max_extend_len / kExtendBlockM); a task past its request's end is a no-op.
inline constexpr std::int64_t kExtendBlockM = 32;
struct ExtendAttentionArgs {
  std::int64_t batch = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t head_dim = 0, head_dim_v = 0;
  std::int64_t max_extend_len = 0;
  // q [tokens, num_heads, head_dim]; k/v [tokens, num_kv_heads, head_dim(_v)]: new tokens
  DType dtype = DType::kF32;  // of q, k, v and out
  const void* q = nullptr;
  std::int64_t q_stride_t = 0, q_stride_h = 0;
  const void* k = nullptr;
  std::int64_t k_stride_t = 0, k_stride_h = 0;
  const void* v = nullptr;
  std::int64_t v_stride_t = 0, v_stride_h = 0;
  // out [tokens, num_heads, head_dim_v]
  void* o = nullptr;
  std::int64_t o_stride_t = 0, o_stride_h = 0;
  KvCache cache;                                    // the prefix
  const std::int64_t* req_pool_indices = nullptr;   // [batch]
  const std::int64_t* seq_lens = nullptr;           // [batch] prefix + extend
  const std::int64_t* extend_seq_lens = nullptr;    // [batch]
  const std::int64_t* extend_start_loc = nullptr;   // [batch]
  float sm_scale = 1.0f;
  float logit_cap = 0.0f;
  std::int64_t window = 0;
  const float* sinks = nullptr;
  bool causal = true;
};
inline std::int64_t extend_attention_tasks(const ExtendAttentionArgs& a) {
  return a.batch * a.num_kv_heads * ((a.max_extend_len + kExtendBlockM - 1) / kExtendBlockM);
}

// The activation of a gated MLP (act_and_mul): out = act(gate) * up.
enum class Activation : int {
  kSilu = 0,      // x / (1 + exp(-x))
  kGelu = 1,      // x / 2 * (1 + erf(x / sqrt(2)))
  kGeluTanh = 2,  // x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
};

// Rotary position embedding of one tensor (query or key) of `tokens` tokens x
// `heads` heads x `head_size`: the first `rotary_dim` (even) elements of each
// head are rotated by the angles of row positions[t] of `cos_sin_cache`
// (cos[rotary_dim / 2] then sin[rotary_dim / 2]); the rest are copied. neox:
// element j pairs with j + rotary_dim / 2; otherwise (GPT-J) 2j with 2j + 1.
// Pair i becomes (x1 cos_i - x2 sin_i, x2 cos_i + x1 sin_i). `out` may be `x`
// (same strides). Strides are in elements; the last dimension is contiguous.
struct RotaryArgs {
  std::int64_t heads = 0, head_size = 0, rotary_dim = 0;
  bool neox = true;
  DType dtype = DType::kF32;  // of x and out
  const void* x = nullptr;
  std::int64_t x_stride_t = 0, x_stride_h = 0;
  void* out = nullptr;
  std::int64_t out_stride_t = 0, out_stride_h = 0;
  DType cache_dtype = DType::kF32;  // kF32 or `dtype`
  const void* cos_sin_cache = nullptr;
  std::int64_t cache_stride = 0;
  const std::int64_t* positions = nullptr;  // [tokens], valid rows of the cache
};

// Rotary embedding with per-token cos/sin rows (SGLang's apply_rotary_pos_emb, neox
// layout over the whole head): for each token t < tokens and head h < heads, with
// x = the head's head_size elements (even head_size, half = head_size / 2) and c, s the
// token's rows of cos and sin (head_size elements each),
//   out[i]        = x[i] c[i] - x[i + half] s[i]                  (i < half)
//   out[i + half] = x[i + half] c[i + half] + x[i] s[i + half]
// in fp32, rounded once. `out` may be `x` (same strides). Strides are in elements; the
// last dimension is contiguous.
struct RotaryPosEmbArgs {
  std::int64_t heads = 0, head_size = 0;
  DType dtype = DType::kF32;  // of x and out
  const void* x = nullptr;
  std::int64_t x_stride_t = 0, x_stride_h = 0;
  void* out = nullptr;
  std::int64_t out_stride_t = 0, out_stride_h = 0;
  DType cos_dtype = DType::kF32;  // of cos and sin: kF32, kBF16 or kF16
  const void* cos = nullptr;
  const void* sin = nullptr;
  std::int64_t cos_stride_t = 0, sin_stride_t = 0;
};

// Gated DeltaNet gating (Qwen3-Next / Qwen3.5 linear attention), per row r and head h:
//   g[r, h]    = -exp(A_log[h]) * softplus(a[r, h] + dt_bias[h]),  softplus(x) = log(1 + e^x)
//   beta[r, h] = sigmoid(b[r, h])
// fp32 arithmetic; g fp32, beta of `dtype` (the dtype of a and b). A_log and dt_bias
// (`heads` contiguous elements) each fp32 or `dtype`. Row strides in elements.
struct GdnGatingArgs {
  std::int64_t heads = 0;
  DType dtype = DType::kF32;  // of a, b and beta
  const void* a = nullptr;
  std::int64_t a_stride = 0;
  const void* b = nullptr;
  std::int64_t b_stride = 0;
  DType a_log_dtype = DType::kF32;
  const void* a_log = nullptr;
  DType dt_bias_dtype = DType::kF32;
  const void* dt_bias = nullptr;
  float* g = nullptr;
  std::int64_t g_stride = 0;
  void* beta = nullptr;
  std::int64_t beta_stride = 0;
};

// Linear layers: y[M, N] = x[M, K] @ W^T + bias, W an [N, K] weight packed once at
// load time. A packed weight is a PackedWeightHeader followed by panels of `panel`
// output channels: panel p holds channels [p * panel, (p + 1) * panel) (the last one
// zero-padded) for every k < k_padded (zero rows past k). Within a panel, k-major:
//  - layout kRows (fp32, fp16, int8, fp8 e4m3): element (k, j) at index k * panel + j;
//  - layout kPairs (bf16): 32-bit word (k / 2, j) at index (k / 2) * panel + j holds
//    W[j, k] in its low half and W[j, k + 1] in its high half.
// `panel` is chosen from the packing CPU's VLEN (pack_weight_layout), but the kernels
// handle any panel width, so a weight packed elsewhere still gives the right answer.
inline constexpr std::uint32_t kPackedWeightMagic = 0x57564b52u;  // "RKVW"
inline constexpr std::uint32_t kPackedWeightVersion = 1;
inline constexpr std::int64_t kPackedWeightHeaderBytes = 64;
enum class PackedLayout : std::int32_t { kRows = 0, kPairs = 1 };
struct PackedWeightHeader {
  std::uint32_t magic = kPackedWeightMagic;
  std::uint32_t version = kPackedWeightVersion;
  DType dtype = DType::kF32;  // kF32, kBF16, kF16, kI8 or kFP8E4M3
  PackedLayout layout = PackedLayout::kRows;
  std::int64_t n = 0, k = 0;
  std::int64_t panel = 0;     // output channels per panel
  std::int64_t k_padded = 0;  // k rounded up to even
  std::int64_t bytes = 0;     // header + panels
  std::int64_t vlen_bits = 0;  // VLEN of the CPU that chose `panel` (information only)
};
static_assert(sizeof(PackedWeightHeader) == kPackedWeightHeaderBytes, "packed header size");
inline std::int64_t linear_tasks(const PackedWeightHeader& h) {
  return h.panel > 0 ? (h.n + h.panel - 1) / h.panel : 0;
}
inline std::int64_t packed_element_bytes(DType dt) {
  return dt == DType::kF32                                              ? 4
         : dt == DType::kI8 || dt == DType::kFP8E4M3 || dt == DType::kFP8E5M2 ? 1
                                                                                : 2;
}

// y = x @ W^T + bias for a float weight (kF32, kBF16, kF16). fp32 accumulation.
struct LinearArgs {
  std::int64_t m = 0;
  DType x_dtype = DType::kF32;  // kF32, kBF16, kF16
  const void* x = nullptr;      // [m, k], row stride x_stride elements
  std::int64_t x_stride = 0;
  const void* packed = nullptr;  // PackedWeightHeader + panels, 4-byte aligned
  DType bias_dtype = DType::kF32;
  const void* bias = nullptr;  // [n] or null
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // [m, n], row stride out_stride elements
  std::int64_t out_stride = 0;
};

// W8A8: out[i, j] = float(sum_k a[i, k] * w[j, k]) (exact, int32) * a_scales[i]
// * w_scales[j] + bias[j], rounded to out_dtype.
struct Int8LinearArgs {
  std::int64_t m = 0;
  const std::int8_t* a = nullptr;  // [m, k], row stride a_stride
  std::int64_t a_stride = 0;
  const float* a_scales = nullptr;  // [m]
  const void* packed = nullptr;     // an int8 packed weight
  const float* w_scales = nullptr;  // [n]
  DType bias_dtype = DType::kF32;
  const void* bias = nullptr;  // [n] or null
  DType out_dtype = DType::kF32;
  void* out = nullptr;
  std::int64_t out_stride = 0;
};

// FP8 W8A16 with block scales (DeepSeek-V3 / Qwen3-FP8 checkpoints): W[j, k] =
// fp8_e4m3(w[j, k]) * scales[k / block_k, j] (the op layer expands the [N / block_n,
// K / block_k] scale blocks to one scale per channel). out[i, j] = bias[j] +
// sum over k blocks b of scales[b, j] * sum_{k in b} x[i, k] * fp8(w[j, k]), fp32
// arithmetic. fp8 is decoded in registers by integer operations (RVV has no fp8
// arithmetic). The packed weight is a kFP8E4M3 PackedWeightHeader (layout kRows).
struct Fp8LinearArgs {
  std::int64_t m = 0;
  DType x_dtype = DType::kF32;  // kF32, kBF16, kF16
  const void* x = nullptr;      // [m, k], row stride x_stride elements
  std::int64_t x_stride = 0;
  const void* packed = nullptr;  // a kFP8E4M3 packed weight
  const float* scales = nullptr;  // [ceil(k / block_k), n], row stride n
  std::int64_t block_k = 0;       // >= 1
  DType bias_dtype = DType::kF32;
  const void* bias = nullptr;  // [n] or null
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // [m, n], row stride out_stride elements
  std::int64_t out_stride = 0;
};

// INT4 weights with groups along K (AWQ and GPTQ checkpoints):
// W[j, k] = (q[j, k] - zeros[g, j]) * scales[g, j], g = k / group_size, q in [0, 15], zeros
// in [0, 16] (GPTQ checkpoints store zero - 1 in four bits, so SGLang reads zeros 1..16). A packed int4 weight is a PackedInt4Header followed by panels of `panel`
// output channels (the last zero-padded) for every k < k_padded (k rounded up to even;
// zero past k): byte (k / 2) * panel + j of panel p holds q[p * panel + j, k] in its low
// nibble and q[p * panel + j, k + 1] in its high nibble (k even). group_size is even or
// equal to k, so a byte never straddles two groups. Scales and zero points stay outside
// the packed weight, [groups, n] each (groups = ceil(k / group_size)).
inline constexpr std::uint32_t kPackedInt4Magic = 0x3456524bu;  // "KRV4"
inline constexpr std::uint32_t kPackedInt4Version = 1;
struct PackedInt4Header {
  std::uint32_t magic = kPackedInt4Magic;
  std::uint32_t version = kPackedInt4Version;
  std::int64_t n = 0, k = 0;
  std::int64_t group_size = 0;  // k positions per scale / zero-point group
  std::int64_t panel = 0;       // output channels per panel
  std::int64_t k_padded = 0;    // k rounded up to even
  std::int64_t bytes = 0;       // header + panels
  std::int64_t vlen_bits = 0;   // VLEN of the CPU that chose `panel` (information only)
};
static_assert(sizeof(PackedInt4Header) == kPackedWeightHeaderBytes, "packed int4 header size");
inline std::int64_t int4_linear_tasks(const PackedInt4Header& h) {
  return h.panel > 0 ? (h.n + h.panel - 1) / h.panel : 0;
}
inline std::int64_t int4_groups(const PackedInt4Header& h) {
  return h.group_size > 0 ? (h.k + h.group_size - 1) / h.group_size : 0;
}

// INT4 linear, two forms over the same packed weight:
//  - W4A8 (a != nullptr; what SGLang's int4_scaled_mm_cpu computes): a holds the rows
//    quantised by quantize_int8_rows, and
//    out[i, j] = bias[j] + sum over groups g, in order, of
//                float(sum_{k in g} a[i, k] * (q[j, k] - zeros[g, j])) * a_scales[i]
//                * scales[g, j]
//    with the integer sums exact (int32) and each term rounded to fp32 in that order,
//    accumulated in fp32 starting from the bias;
//  - W4A16 (a == nullptr): x in kF32/kBF16/kF16, out[i, j] = bias[j] + sum_g scales[g, j]
//    * sum_{k in g} x[i, k] * (q[j, k] - zeros[g, j]), fp32 arithmetic (the weight is
//    dequantised in registers, never in memory).
struct Int4LinearArgs {
  std::int64_t m = 0;
  DType x_dtype = DType::kF32;  // W4A16: kF32, kBF16, kF16
  const void* x = nullptr;      // W4A16: [m, k], row stride x_stride elements
  std::int64_t x_stride = 0;
  const std::int8_t* a = nullptr;   // W4A8: [m, k], row stride a_stride
  std::int64_t a_stride = 0;
  const float* a_scales = nullptr;  // W4A8: [m]
  const void* packed = nullptr;     // PackedInt4Header + panels, 4-byte aligned
  const float* scales = nullptr;    // [groups, n], row stride n
  const std::uint8_t* zeros = nullptr;  // [groups, n], row stride n, values 0..16
  DType bias_dtype = DType::kF32;
  const void* bias = nullptr;  // [n] or null
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // [m, n], row stride out_stride elements
  std::int64_t out_stride = 0;
};

// Mixture-of-experts feed-forward of SGLang's fused_experts_cpu. Token t chose experts
// ids[t, j] with weights w[t, j] (j < topk); for each choice, with e = ids[t, j]:
//   g = x[t] @ W13[e][0:I]^T + b13[e][0:I],  u = x[t] @ W13[e][I:2I]^T + b13[e][I:2I]
//   y[t, j] = (act(g) * u) @ W2[e]^T + b2[e]
//   out[t] = base_scale * base[t] + sum over j = 0, 1, ... of w[t, j] * y[t, j]
// (fp32 arithmetic throughout, one rounding to out_dtype; base optional). The experts'
// weight format (moe_weights, from the packed header) picks the GEMMs:
//  - float (kF32 / kBF16 / kF16 pack_weight): linear's;
//  - W8A8 (kI8 pack_weight, channel scales): x[t] and act(g) * u are quantised per row as
//    quantize_int8_rows does and the GEMMs are int8_linear's (exact int32 sums times row
//    and channel scales);
//  - FP8 W8A16 (kFP8E4M3 pack_weight, per-(k block, channel) scales and block_k per
//    weight): rows are not quantised, the GEMMs are fp8_linear's;
//  - INT4 W4A8 (pack_int4_weight, [groups, n] scales and zero points per expert): rows
//    quantised as for W8A8 (x[t] and act(g) * u, as SGLang's CPU int4 MoE does), the
//    GEMMs are int4_linear's W4A8 form.
// The (token, choice) pairs are grouped by expert (moe_plan), so each expert's weights
// are read once per call however many tokens chose it, and each GEMM runs over all of
// the expert's rows. A call runs five stages in order (moe_experts with each MoeStage
// over [0, moe_stage_tasks) split in any way over threads; a stage needs the previous
// one complete): gather the rows of each pair (quantised for int8), the gate/up GEMMs,
// the activation, the down GEMMs, the weighted sum per token.
// Grouping: offsets[e] .. offsets[e + 1] are expert e's slots in the sorted order (by
// expert, then token, then choice); sorted_tokens[s] is slot s's token; slot_of[t * topk
// + j] is pair (t, j)'s slot; active[0 .. active_count) the experts with slots, ascending.
struct MoePlan {
  std::int64_t* offsets = nullptr;       // [experts + 1]
  std::int32_t* sorted_tokens = nullptr;  // [tokens * topk]
  std::int32_t* slot_of = nullptr;        // [tokens * topk]
  std::int32_t* active = nullptr;         // [experts]
  std::int64_t active_count = 0;
};
enum class MoeStage : int { kGather = 0, kGateUp = 1, kAct = 2, kDown = 3, kCombine = 4 };
struct MoeExpertsArgs {
  std::int64_t tokens = 0, topk = 0;
  std::int64_t hidden = 0;        // H: K of W13, N of W2
  std::int64_t intermediate = 0;  // I: W13 has 2I output channels, W2 has K = I
  Activation act = Activation::kSilu;
  DType x_dtype = DType::kF32;  // of x, base and out: kF32, kBF16, kF16
  const void* x = nullptr;      // [tokens, H], row stride x_stride elements
  std::int64_t x_stride = 0;
  const float* weights = nullptr;  // [tokens, topk], contiguous
  MoePlan plan;                    // filled by moe_plan
  // Expert e's packed weights (pack_weight: float dtypes, kI8 or kFP8E4M3; or
  // pack_int4_weight; the same format, shapes, panel width and group size for every
  // expert, w13 and w2 both quantised or both not) start at w13 + e * w13_stride bytes
  // (likewise w2).
  const unsigned char* w13 = nullptr;
  std::int64_t w13_stride = 0;
  const unsigned char* w2 = nullptr;
  std::int64_t w2_stride = 0;
  // Scales, expert e's at e * moe_scale_rows(weight) * N floats (N = 2I for w13, H for
  // w2; row stride N): kI8 [experts, N] channel scales; kFP8E4M3 [experts, ceil(K /
  // block_k), N]; int4 [experts, groups, N].
  const float* w13_scales = nullptr;
  const float* w2_scales = nullptr;
  std::int64_t w13_block_k = 0;  // kFP8E4M3: K positions per scale row (>= 1)
  std::int64_t w2_block_k = 0;
  const std::uint8_t* w13_zeros = nullptr;  // int4: [experts, groups, 2I] zero points 0..16
  const std::uint8_t* w2_zeros = nullptr;   // int4: [experts, groups, H]
  DType bias_dtype = DType::kF32;
  const void* b13 = nullptr;  // [experts, 2I] or null
  const void* b2 = nullptr;   // [experts, H] or null
  const void* base = nullptr;  // [tokens, H] (x_dtype, row stride base_stride) or null
  std::int64_t base_stride = 0;
  float base_scale = 1.0f;
  void* out = nullptr;  // [tokens, H] of x_dtype, row stride out_stride
  std::int64_t out_stride = 0;
  // Workspaces, A = tokens * topk rows each (moe_workspace_bytes): gathered rows [A, H]
  // (x_dtype, or int8 + xg_scales [A] for W8A8 / W4A8 weights), gate/up outputs ic1
  // [A, 2I], activations ic2 [A, I] (fp32; W8A8 / W4A8 also ic2_q + ic2_scales), down
  // outputs y [A, H].
  void* xg = nullptr;
  float* xg_scales = nullptr;
  float* ic1 = nullptr;
  float* ic2 = nullptr;
  std::int8_t* ic2_q = nullptr;
  float* ic2_scales = nullptr;
  float* y = nullptr;
};
// The format of a packed expert weight, from its header (both header kinds start with
// their magic number).
enum class MoeWeights : int { kFloat = 0, kInt8 = 1, kFp8 = 2, kInt4 = 3 };
inline bool moe_is_int4(const unsigned char* packed) {
  return *reinterpret_cast<const std::uint32_t*>(packed) == kPackedInt4Magic;
}
inline MoeWeights moe_weights(const unsigned char* packed) {
  if (moe_is_int4(packed)) return MoeWeights::kInt4;
  const DType dt = reinterpret_cast<const PackedWeightHeader*>(packed)->dtype;
  return dt == DType::kI8 ? MoeWeights::kInt8
         : dt == DType::kFP8E4M3 ? MoeWeights::kFp8
                                 : MoeWeights::kFloat;
}
// Whether the rows entering a GEMM over this weight are int8-quantised (W8A8, W4A8).
inline bool moe_quantised_rows(const unsigned char* packed) {
  const MoeWeights w = moe_weights(packed);
  return w == MoeWeights::kInt8 || w == MoeWeights::kInt4;
}
// GEMM tasks (panels) of one expert's packed weight.
inline std::int64_t moe_weight_tasks(const unsigned char* packed) {
  return moe_is_int4(packed)
             ? int4_linear_tasks(*reinterpret_cast<const PackedInt4Header*>(packed))
             : linear_tasks(*reinterpret_cast<const PackedWeightHeader*>(packed));
}
// Rows of N scales per expert (see MoeExpertsArgs::w13_scales): 1 for kI8, ceil(K /
// block_k) for kFP8E4M3, the groups for int4, 0 for float weights.
inline std::int64_t moe_scale_rows(const unsigned char* packed, std::int64_t block_k) {
  switch (moe_weights(packed)) {
    case MoeWeights::kInt8:
      return 1;
    case MoeWeights::kFp8: {
      const std::int64_t k = reinterpret_cast<const PackedWeightHeader*>(packed)->k;
      return block_k > 0 ? (k + block_k - 1) / block_k : 0;
    }
    case MoeWeights::kInt4:
      return int4_groups(*reinterpret_cast<const PackedInt4Header*>(packed));
    case MoeWeights::kFloat:
      break;
  }
  return 0;
}
inline std::int64_t moe_stage_tasks(const MoeExpertsArgs& a, MoeStage s) {
  switch (s) {
    case MoeStage::kGather:
    case MoeStage::kAct:
      return a.tokens * a.topk;
    case MoeStage::kGateUp:
      return a.plan.active_count * moe_weight_tasks(a.w13);
    case MoeStage::kDown:
      return a.plan.active_count * moe_weight_tasks(a.w2);
    case MoeStage::kCombine:
      return a.tokens;
  }
  return 0;
}
// Mixture-of-experts routing (moe_topk): per token, a score for each of `experts` experts
// from its gating logits, then the `topk` experts with the highest selection values, their
// weights and ids.
//  1. logits: row t of `logits` ([tokens, experts], row stride logits_stride elements,
//     dtype logits_dtype), or, when router_weight is set, the fp32 dot products
//     logit[e] = sum_k hidden[t, k] * router_weight[e, k] (Grok's fused router: `hidden`
//     [tokens, hidden_size], `router_weight` [experts, hidden_size], fp32 accumulation);
//  2. soft cap (softcap > 0): logit = softcap * tanh(logit / softcap);
//  3. bias_on_logits: logit += bias[e] (the fused router adds its bias before scoring);
//  4. score = softmax over the experts (kSoftmax) or sigmoid(logit) (kSigmoid);
//  5. selection value = score + bias[e] (bias set and not bias_on_logits: DeepSeek-V3's
//     correction bias, for the choice only), else the score;
//  6. groups (num_groups > 1; experts divisible by it, experts_per_group consecutive experts
//     each): a group's value is the maximum of its selection values (kMax, SGLang's
//     grouped_topk) or the sum of its two highest (kTop2Sum, biased_grouped_topk; a group
//     of one expert: that value); the topk_group groups with the highest values are kept and
//     only their experts are candidates;
//  7. the topk candidates with the highest selection values, highest first. Ties go to the
//     lowest expert id (and, for groups, the lowest group id). A NaN selection value ranks
//     below every number; if fewer than topk candidates have numbers, the lowest unchosen
//     ids fill the remaining slots;
//  8. topk_weights[t, j] = the (unbiased, unless bias_on_logits) score of expert
//     topk_ids[t, j]; with renormalize divided by their sum (fp32, in slot order; a zero sum
//     leaves them unchanged); then multiplied by `scaling` (routed_scaling_factor).
// The caller validates: 1 <= topk <= number of candidates, 1 <= topk_group <= num_groups.
// Scratch: 4 * experts floats on the stack up to kMoeStackExperts experts, heap beyond.
enum class MoeScoring : int { kSoftmax = 0, kSigmoid = 1 };
enum class MoeGroupScore : int { kMax = 0, kTop2Sum = 1 };
inline constexpr std::int64_t kMoeStackExperts = 512;
struct MoeTopkArgs {
  std::int64_t experts = 0;
  std::int64_t topk = 0;
  DType logits_dtype = DType::kF32;  // kF32, kBF16, kF16
  const void* logits = nullptr;      // [tokens, experts]; unused with router_weight
  std::int64_t logits_stride = 0;
  // Fused router (router_weight != nullptr): logits from hidden @ router_weight^T.
  DType hidden_dtype = DType::kF32;  // kF32, kBF16, kF16
  const void* hidden = nullptr;      // [tokens, hidden_size], row stride hidden_stride
  std::int64_t hidden_stride = 0;
  std::int64_t hidden_size = 0;
  DType router_dtype = DType::kF32;  // kF32, kBF16, kF16
  const void* router_weight = nullptr;  // [experts, hidden_size], row stride router_stride
  std::int64_t router_stride = 0;
  MoeScoring scoring = MoeScoring::kSoftmax;
  float softcap = 0.0f;          // > 0: logits soft-capped first
  const float* bias = nullptr;   // [experts] or null
  bool bias_on_logits = false;   // bias added to the logits (else to the scores, for choice)
  std::int64_t num_groups = 1;   // > 1: grouped selection
  std::int64_t topk_group = 1;
  MoeGroupScore group_score = MoeGroupScore::kMax;
  bool renormalize = false;
  float scaling = 1.0f;          // weights multiplied by it last
  float* topk_weights = nullptr;  // [tokens, topk], row stride weights_stride
  std::int64_t weights_stride = 0;
  std::int32_t* topk_ids = nullptr;  // [tokens, topk], row stride ids_stride
  std::int64_t ids_stride = 0;
};

#define RVVK_KERNEL(name, params, args) void name params;
#include "rvvk/kernels.def"
#undef RVVK_KERNEL

// What the running CPU offers, detected at run time (never at build time).
struct CpuInfo {
  bool has_v = false;        // RVV 1.0 ('V' in AT_HWCAP)
  unsigned vlen_bits = 0;    // VLEN, 0 without V
  bool zvfh = false;         // fp16 vector arithmetic
  bool zvfhmin = false;      // fp16 vector conversions
  bool zvfbfmin = false;     // bf16 vector conversions
  bool avx2 = false;         // x86-64: AVX2, FMA and F16C usable (CPU and OS)
  bool avx512 = false;       // x86-64: AVX-512 F, BW, VL and DQ usable (CPU and OS)
  bool avx512_bf16 = false;  // x86-64: those and AVX512-BF16 (vdpbf16ps)
  bool amx_bf16 = false;     // x86-64: AMX tiles with bf16 dot products and AVX512-BF16
                             // usable (CPU, OS, and this process allowed the tile data)
  const char* source = "";   // where the extension bits came from: "hwprobe", "cpuinfo",
                             // "cpuid" (x86-64), "none", "assumed" (RVVK_ASSUME_EXTENSIONS)
};
CpuInfo cpu_info();

// Comma-separated variants compiled into this library, best last
// (e.g. "portable,rvv,rvv_zvfh").
const char* compiled_variants();
// The variant the kernels currently dispatch to.
const char* active_variant();
// Whether `name` is compiled in and runnable on this CPU.
bool variant_supported(const char* name);
// Switches every kernel to variant `name`; returns false (and changes nothing)
// if it is not compiled in or not runnable on this CPU.
bool set_variant(const char* name);
// Non-empty when the environment variable RVVK_VARIANT named a variant that
// cannot be used; the library then runs the default variant.
const char* variant_error();

}  // namespace rvvk
