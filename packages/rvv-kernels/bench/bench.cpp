// Benchmark driver: runs one named kernel case a given number of times after
// setting it up. tools/bench_kernels.py runs it under QEMU with the
// instruction-counting plugin for two repetition counts and takes the
// difference, so set-up, process start-up and first-call effects cancel out.
//
// Usage: rvvk_bench CASE REPS     (rvvk_bench --list prints the cases: name, kernel,
// weight bytes streamed per call or 0, KV-cache bytes read per call or 0, the case
// it is compared with or "-")
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "rvvk/rvvk.h"

namespace {

using rvvk::DType;

// Deterministic pseudo-random fill (xorshift), values in [-1, 1).
struct Rng {
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  float next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / (1 << 23);
  }
};

std::vector<std::uint16_t> random_bf16(std::size_t n, Rng& rng) {
  std::vector<float> f(n);
  for (float& x : f) x = rng.next();
  std::vector<std::uint16_t> out(n);
  rvvk::convert(DType::kF32, f.data(), DType::kBF16, out.data(), static_cast<std::int64_t>(n));
  return out;
}

// A Qwen2.5-1.5B attention layer: 12 query heads, 2 KV heads, head size 128.
constexpr std::int64_t kHq = 12, kHkv = 2, kD = 128;

struct Case {
  const char* kernel;
  std::function<std::function<void()>()> setup;  // returns the call to repeat
  // Bytes of weights one call streams (linear layers at M = 1, and the INT4 layers at any
  // M), 0 otherwise: tools/bench_kernels.py reports instructions per weight byte for these.
  std::int64_t weight_bytes = 0;
  // Bytes of KV cache one call reads (decode: K and V rows, plus scales), 0 otherwise.
  std::int64_t kv_bytes = 0;
  // The case this one is compared with (same shapes, another dtype), or null:
  // tools/bench_kernels.py reports the instruction and cycle ratios to it.
  const char* baseline = nullptr;
};

// The Qwen2.5-1.5B layer's heads and a bf16 KV cache (k, v: kHkv heads of kD a
// row; rows of request slot i at r2t[i * r2t_stride ...]), the same for the
// decode and the extend arguments.
template <class Args>
void qwen_attention(Args& a, const void* k, const void* v, const std::int32_t* r2t,
                    std::int64_t r2t_stride, const std::int64_t* pool, const std::int64_t* lens) {
  a.num_heads = kHq;
  a.num_kv_heads = kHkv;
  a.head_dim = a.head_dim_v = kD;
  a.cache.dtype = DType::kBF16;
  a.cache.k = k;
  a.cache.v = v;
  a.cache.k_stride_t = a.cache.v_stride_t = kHkv * kD;
  a.cache.k_stride_h = a.cache.v_stride_h = kD;
  a.cache.req_to_token = r2t;
  a.cache.req_to_token_stride = r2t_stride;
  a.req_pool_indices = pool;
  a.seq_lens = lens;
  a.sm_scale = 0.08838834764831845f;  // 1 / sqrt(kD)
}

// Decode shapes: 4 requests, 1024 cached tokens + the new one each, cache rows
// shuffled by a stride.
constexpr std::int64_t kDecodeB = 4, kDecodeL = 1025, kDecodeT = kDecodeB * kDecodeL;

// The decode case over a KV cache of `dt`: kBF16, or kI8 with fp32 per-token,
// per-KV-head scales (real = stored * scale), the cache rvv-ops' INT8 decode op
// hands to the same entry points.
template <DType dt>
std::function<void()> decode_case() {
  constexpr std::int64_t B = kDecodeB, L = kDecodeL, S = 8, T = kDecodeT;
  static Rng rng;
  static auto q = random_bf16(B * kHq * kD, rng);
  static std::vector<std::uint16_t> k16, v16;
  static std::vector<std::int8_t> k8, v8;
  static std::vector<float> k_scales, v_scales;
  if constexpr (dt == DType::kI8) {
    for (auto* c : {&k8, &v8}) {
      c->resize(T * kHkv * kD);
      for (auto& x : *c) x = static_cast<std::int8_t>(rng.next() * 127.0f);
    }
    // Scales of rows whose absmax was about 1 (absmax / 127), varying per row and head.
    for (auto* s : {&k_scales, &v_scales}) {
      s->resize(T * kHkv);
      for (float& x : *s) x = (1.0f + 0.25f * rng.next()) / 127.0f;
    }
  } else {
    k16 = random_bf16(T * kHkv * kD, rng);
    v16 = random_bf16(T * kHkv * kD, rng);
  }
  static std::vector<std::uint16_t> o(B * kHq * kD);
  static std::vector<std::int32_t> r2t(B * L);
  for (std::int64_t i = 0; i < B * L; ++i) r2t[i] = static_cast<std::int32_t>((i * 7919) % T);
  static std::vector<std::int64_t> pool = {0, 1, 2, 3}, lens = {L, L, L, L};
  static std::vector<float> partial(B * kHq * S * (kD + 1));
  static rvvk::DecodeAttentionArgs a;
  if constexpr (dt == DType::kI8) {
    qwen_attention(a, k8.data(), v8.data(), r2t.data(), L, pool.data(), lens.data());
    a.cache.dtype = DType::kI8;
    a.cache.k_scales = k_scales.data();
    a.cache.v_scales = v_scales.data();
    a.cache.scales_stride = kHkv;
  } else {
    qwen_attention(a, k16.data(), v16.data(), r2t.data(), L, pool.data(), lens.data());
  }
  a.batch = B;
  a.num_splits = S;
  a.q_dtype = a.o_dtype = DType::kBF16;
  a.q = q.data();
  a.q_stride_b = kHq * kD;
  a.q_stride_h = kD;
  a.o = o.data();
  a.o_stride_b = kHq * kD;
  a.o_stride_h = kD;
  a.partial = partial.data();
  return [] {
    rvvk::decode_attention_partial(a, 0, rvvk::decode_attention_partial_tasks(a));
    rvvk::decode_attention_merge(a, 0, rvvk::decode_attention_merge_tasks(a));
  };
}

// KV-cache bytes one decode call reads: every request's K and V rows of all KV
// heads (elem bytes each), plus for int8 their fp32 K and V scales.
constexpr std::int64_t decode_kv_bytes(std::int64_t elem, bool scales) {
  return kDecodeT * kHkv * (2 * kD * elem + (scales ? 2 * 4 : 0));
}

std::function<void()> extend_case() {
  // 1 request: 256 new tokens on a 256-token prefix.
  constexpr std::int64_t P = 256, E = 256, L = P + E;
  static Rng rng;
  static auto q = random_bf16(E * kHq * kD, rng);
  static auto kn = random_bf16(E * kHkv * kD, rng);
  static auto vn = random_bf16(E * kHkv * kD, rng);
  static auto kc = random_bf16(L * kHkv * kD, rng);
  static auto vc = random_bf16(L * kHkv * kD, rng);
  static std::vector<std::uint16_t> o(E * kHq * kD);
  static std::vector<std::int32_t> r2t(L);
  for (std::int64_t i = 0; i < L; ++i) r2t[i] = static_cast<std::int32_t>((i * 131) % L);
  static std::vector<std::int64_t> pool = {0}, lens = {L}, ext = {E}, start = {0};
  static rvvk::ExtendAttentionArgs a;
  qwen_attention(a, kc.data(), vc.data(), r2t.data(), L, pool.data(), lens.data());
  a.batch = 1;
  a.max_extend_len = E;
  a.dtype = DType::kBF16;
  a.q = q.data();
  a.q_stride_t = kHq * kD;
  a.q_stride_h = kD;
  a.k = kn.data();
  a.v = vn.data();
  a.k_stride_t = a.v_stride_t = kHkv * kD;
  a.k_stride_h = a.v_stride_h = kD;
  a.o = o.data();
  a.o_stride_t = kHq * kD;
  a.o_stride_h = kD;
  a.extend_seq_lens = ext.data();
  a.extend_start_loc = start.data();
  a.causal = true;
  return [] { rvvk::extend_attention(a, 0, rvvk::extend_attention_tasks(a)); };
}

std::function<void()> rmsnorm_case() {
  // One token of Qwen2.5-1.5B's hidden size.
  constexpr std::int64_t N = 1536;
  static Rng rng;
  static auto x = random_bf16(N, rng);
  static auto w = random_bf16(N, rng);
  static std::vector<std::uint16_t> out(N);
  return [] {
    rvvk::rmsnorm(DType::kBF16, out.data(), N, x.data(), N, w.data(), 1, N, 1e-6f, 0.0f);
  };
}

std::function<void()> silu_and_mul_case() {
  // One token of Qwen2.5-1.5B's MLP: gate_up [2 x 8960] -> [8960].
  constexpr std::int64_t D = 8960;
  static Rng rng;
  static auto x = random_bf16(2 * D, rng);
  static std::vector<std::uint16_t> out(D);
  return [] {
    rvvk::act_and_mul(rvvk::Activation::kSilu, DType::kBF16, out.data(), D, x.data(), 2 * D, 1,
                      D);
  };
}

// Qwen3.5's per-token elementwise work around attention and its Gated DeltaNet layers
// (Qwen3.5-2B-like: hidden 2048, 8 query heads of 256 with an output gate, 16 value heads of
// 128 in the GDN layers): the gated RMSNorm of the GDN output, the attention output gate, the
// decode step of the gated delta rule (one value head) and the GDN short conv (width 4).
std::function<void()> rmsnorm_gated_case() {
  constexpr std::int64_t kHeads = 16, kHv = 128;
  static Rng rng;
  static auto x = random_bf16(kHeads * kHv, rng);
  static auto g = random_bf16(kHeads * kHv, rng);
  static auto w = random_bf16(kHv, rng);
  static std::vector<std::uint16_t> out(kHeads * kHv);
  return [] {
    rvvk::rmsnorm_gated(DType::kBF16, out.data(), kHv, x.data(), kHv, w.data(), g.data(), kHv,
                        kHeads, kHv, 1e-6f);
  };
}

std::function<void()> sigmoid_mul_case() {
  constexpr std::int64_t kHeads = 8, kHd = 256;
  static Rng rng;
  static auto x = random_bf16(kHeads * kHd, rng);
  static auto gate = random_bf16(kHeads * 2 * kHd, rng);
  return [] {
    rvvk::sigmoid_mul(DType::kBF16, x.data(), kHeads * kHd, x.data(), kHeads * kHd,
                      gate.data() + kHd, kHeads * 2 * kHd, 2 * kHd, 1, kHeads, kHd);
  };
}

std::function<void()> gated_delta_rule_case() {
  constexpr std::int64_t kK = 128, kV = 128;
  static Rng rng;
  static std::vector<float> state(kV * kK), q(kK), k(kK), v(kV), out(kV);
  static const bool filled = [] {
    for (float& x : state) x = 0.01f * rng.next();
    for (auto* vec : {&q, &k, &v}) {
      for (float& x : *vec) x = rng.next();
    }
    return true;
  }();
  (void)filled;
  static const float g = -0.05f, beta = 0.5f;
  return [] {
    rvvk::gated_delta_rule(state.data(), kK, q.data(), kK, k.data(), kK, v.data(), kV, &g,
                           &beta, out.data(), kV, 1, kK, kV, 0.088f);
  };
}

std::function<void()> causal_conv1d_case() {
  // The GDN layer's q, k, v channels (2 x 16 x 128 + 16 x 128 = 6144), one decode token.
  constexpr std::int64_t kC = 6144, kW = 4;
  static Rng rng;
  static std::vector<float> x(kC), hist((kW - 1) * kC), w(kW * kC), out(kC);
  static const bool filled = [] {
    for (auto* vec : {&x, &hist, &w}) {
      for (float& e : *vec) e = rng.next();
    }
    return true;
  }();
  (void)filled;
  return [] {
    rvvk::causal_conv1d(x.data(), kC, hist.data(), w.data(), kC, nullptr, out.data(), kC, 1, kC,
                        kW, true);
  };
}

// MoE routing of M tokens. kQwen3: Qwen3-30B-A3B's router (128 experts, top 8, softmax,
// renormalised, bf16 logits); otherwise DeepSeek-V3's (256 experts, sigmoid + correction
// bias, 8 groups by their top-2 sum, 4 kept, top 8, scaled by 2.5, fp32 logits).
template <int M, bool kQwen3>
std::function<void()> moe_routing_case() {
  constexpr std::int64_t E = kQwen3 ? 128 : 256, kTopk = 8;
  static Rng rng;
  static std::vector<std::uint16_t> logits16 = random_bf16(M * E, rng);
  static std::vector<float> logits32(M * E), bias(E), weights(M * kTopk);
  static std::vector<std::int32_t> ids(M * kTopk);
  for (float& x : logits32) x = rng.next();
  for (float& x : bias) x = 0.1f * rng.next();
  static rvvk::MoeTopkArgs a;
  a.experts = E;
  a.topk = kTopk;
  a.logits_dtype = kQwen3 ? DType::kBF16 : DType::kF32;
  a.logits = kQwen3 ? static_cast<const void*>(logits16.data()) : logits32.data();
  a.logits_stride = E;
  a.scoring = kQwen3 ? rvvk::MoeScoring::kSoftmax : rvvk::MoeScoring::kSigmoid;
  a.renormalize = true;
  if (!kQwen3) {
    a.bias = bias.data();
    a.num_groups = 8;
    a.topk_group = 4;
    a.group_score = rvvk::MoeGroupScore::kTop2Sum;
    a.scaling = 2.5f;
  }
  a.topk_weights = weights.data();
  a.weights_stride = kTopk;
  a.topk_ids = ids.data();
  a.ids_stride = kTopk;
  return [] { rvvk::moe_topk(a, 0, M); };
}

std::function<void()> rope_case() {
  // One decode token: 12 query heads and 2 KV heads of 128, full rotary, neox, bf16 cos/sin
  // table (SGLang converts it to the query's dtype), new outputs like rvv-ops' op.
  constexpr std::int64_t kMaxPos = 4096;
  static Rng rng;
  static auto q = random_bf16(kHq * kD, rng);
  static auto k = random_bf16(kHkv * kD, rng);
  static auto cache = random_bf16(kMaxPos * kD, rng);
  static std::vector<std::uint16_t> q_out(q.size()), k_out(k.size());
  static std::vector<std::int64_t> pos = {1234};
  static rvvk::RotaryArgs qa, ka;
  for (auto [a, x, out, heads] :
       {std::tuple{&qa, &q, &q_out, kHq}, std::tuple{&ka, &k, &k_out, kHkv}}) {
    a->heads = heads;
    a->head_size = a->rotary_dim = kD;
    a->neox = true;
    a->dtype = a->cache_dtype = DType::kBF16;
    a->x = x->data();
    a->out = out->data();
    a->x_stride_t = a->out_stride_t = heads * kD;
    a->x_stride_h = a->out_stride_h = kD;
    a->cos_sin_cache = cache.data();
    a->cache_stride = kD;
    a->positions = pos.data();
  }
  return [] {
    rvvk::rotary_embedding(qa, 0, 1);
    rvvk::rotary_embedding(ka, 0, 1);
  };
}

// Packs a random [n, k] weight of dtype `dt` (bf16, int8 or fp8 e4m3) for the running
// variant.
std::vector<std::uint32_t> packed_weight(DType dt, std::int64_t n, std::int64_t k) {
  static Rng rng;
  rvvk::PackedWeightHeader h;
  rvvk::pack_weight_layout(dt, n, k, &h);
  std::vector<std::uint32_t> packed(static_cast<std::size_t>(h.bytes + 3) / 4);
  if (dt == DType::kI8) {
    std::vector<std::int8_t> w(static_cast<std::size_t>(n * k));
    for (auto& v : w) v = static_cast<std::int8_t>(rng.next() * 127.0f);
    rvvk::pack_weight(h, w.data(), k, packed.data());
  } else if (dt == DType::kFP8E4M3) {
    // Random codes, the NaN codes (0x7f, 0xff) excepted.
    std::vector<std::uint8_t> w(static_cast<std::size_t>(n * k));
    for (auto& v : w) v = static_cast<std::uint8_t>(static_cast<int>(rng.next() * 127.0f) & 0xfe);
    rvvk::pack_weight(h, w.data(), k, packed.data());
  } else {
    const auto w = random_bf16(static_cast<std::size_t>(n * k), rng);
    rvvk::pack_weight(h, w.data(), k, packed.data());
  }
  return packed;
}

// One linear layer's data: x [M, K] random bf16, W [N, K] of dtype wdt packed
// for the running variant, y [M, N] bf16.
template <std::int64_t M, std::int64_t K, std::int64_t N>
struct Layer {
  Rng rng;
  std::vector<std::uint16_t> x = random_bf16(M * K, rng);
  std::vector<std::uint32_t> w;
  std::vector<std::uint16_t> y = std::vector<std::uint16_t>(M * N);
  explicit Layer(DType wdt) : w(packed_weight(wdt, N, K)) {}
  // The fields LinearArgs and Int8LinearArgs share: rows, the packed W, the output.
  template <class Args>
  void set(Args& a) {
    a.m = M;
    a.packed = w.data();
    a.out_dtype = DType::kBF16;
    a.out = y.data();
    a.out_stride = N;
  }
  std::int64_t tasks() const {
    return rvvk::linear_tasks(*reinterpret_cast<const rvvk::PackedWeightHeader*>(w.data()));
  }
};

// bf16 linear layer y[m, n] = x[m, k] @ W^T, single-threaded over every panel.
template <std::int64_t M, std::int64_t K, std::int64_t N>
std::function<void()> linear_case() {
  static Layer<M, K, N> d(DType::kBF16);
  static rvvk::LinearArgs a;
  d.set(a);
  a.x_dtype = DType::kBF16;
  a.x = d.x.data();
  a.x_stride = K;
  return [] { rvvk::linear(a, 0, d.tasks()); };
}

// W8A8 layer as int8_scaled_mm_with_quant runs it: quantise the bf16 row, int8 GEMM,
// per-token x per-channel scales, bf16 out.
template <std::int64_t M, std::int64_t K, std::int64_t N>
std::function<void()> w8a8_case() {
  static Layer<M, K, N> d(DType::kI8);
  static std::vector<std::int8_t> q(M * K);
  static std::vector<float> sa(M), sw(N, 0.01f);
  static rvvk::Int8LinearArgs a;
  d.set(a);
  a.a = q.data();
  a.a_stride = K;
  a.a_scales = sa.data();
  a.w_scales = sw.data();
  return [] {
    rvvk::quantize_int8_rows(DType::kBF16, d.x.data(), K, M, K, q.data(), K, sa.data());
    rvvk::int8_linear(a, 0, d.tasks());
  };
}

// Packs a random [n, k] INT4 weight with groups of g along k (nibbles 0..15) for the
// running variant.
std::vector<std::uint32_t> packed_int4_weight(std::int64_t n, std::int64_t k, std::int64_t g,
                                              Rng& rng) {
  rvvk::PackedInt4Header h;
  rvvk::pack_int4_weight_layout(n, k, g, &h);
  std::vector<std::uint32_t> packed(static_cast<std::size_t>(h.bytes + 3) / 4);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(n * k));
  for (auto& v : q) v = static_cast<std::uint8_t>(static_cast<int>((rng.next() + 1.0f) * 8.0f) & 15);
  rvvk::pack_int4_weight(h, q.data(), k, packed.data());
  return packed;
}

// Random zero points 0..15.
std::vector<std::uint8_t> random_zeros(std::size_t n, Rng& rng) {
  std::vector<std::uint8_t> z(n);
  for (auto& v : z) v = static_cast<std::uint8_t>(static_cast<int>((rng.next() + 1.0f) * 8.0f) & 15);
  return z;
}

// INT4 layer with groups of G along K (random nibbles, zero points 0..15): W4A8 as
// int4_scaled_mm_cpu runs it (quantise the bf16 rows, then the integer GEMM) or W4A16
// (bf16 rows, fp32 FMA), bf16 out.
template <std::int64_t M, std::int64_t K, std::int64_t N, std::int64_t G, bool kW4A8>
std::function<void()> int4_case() {
  static Rng rng;
  static std::vector<std::uint32_t> packed = packed_int4_weight(N, K, G, rng);
  static const rvvk::PackedInt4Header& h =
      *reinterpret_cast<const rvvk::PackedInt4Header*>(packed.data());
  constexpr std::int64_t groups = (K + G - 1) / G;
  static std::vector<std::uint8_t> zeros = random_zeros(groups * N, rng);
  static std::vector<float> scales(groups * N, 0.01f);
  static auto x = random_bf16(M * K, rng);
  static std::vector<std::uint16_t> y(M * N);
  static std::vector<std::int8_t> a8(M * K);
  static std::vector<float> sa(M);
  static rvvk::Int4LinearArgs a;
  a.m = M;
  a.packed = packed.data();
  a.scales = scales.data();
  a.zeros = zeros.data();
  a.out_dtype = DType::kBF16;
  a.out = y.data();
  a.out_stride = N;
  if constexpr (kW4A8) {
    a.a = a8.data();
    a.a_stride = K;
    a.a_scales = sa.data();
    return [] {
      rvvk::quantize_int8_rows(DType::kBF16, x.data(), K, M, K, a8.data(), K, sa.data());
      rvvk::int4_linear(a, 0, rvvk::int4_linear_tasks(h));
    };
  } else {
    a.x_dtype = DType::kBF16;
    a.x = x.data();
    a.x_stride = K;
    return [] { rvvk::int4_linear(a, 0, rvvk::int4_linear_tasks(h)); };
  }
}

// Bytes an INT4 layer streams per call: the packed nibbles, and each group's fp32 scale
// and uint8 zero point per channel.
constexpr std::int64_t int4_weight_bytes(std::int64_t k, std::int64_t n, std::int64_t g) {
  return k * n / 2 + (k + g - 1) / g * n * (4 + 1);
}

// FP8 W8A16 layer as fp8_scaled_mm_cpu runs it: bf16 x, fp8 e4m3 W with one scale per
// 128 k and channel (the op layer's expansion of 128 x 128 blocks), bf16 out.
constexpr std::int64_t kFp8BlockK = 128;
template <std::int64_t M, std::int64_t K, std::int64_t N>
std::function<void()> fp8w_case() {
  static Layer<M, K, N> d(DType::kFP8E4M3);
  static std::vector<float> scales(((K + kFp8BlockK - 1) / kFp8BlockK) * N, 0.01f);
  static rvvk::Fp8LinearArgs a;
  d.set(a);
  a.x_dtype = DType::kBF16;
  a.x = d.x.data();
  a.x_stride = K;
  a.scales = scales.data();
  a.block_k = kFp8BlockK;
  return [] { rvvk::fp8_linear(a, 0, d.tasks()); };
}

// Bytes an fp8 layer streams: the weight codes and the block scales.
constexpr std::int64_t fp8w_bytes(std::int64_t k, std::int64_t n) {
  return k * n + (k + kFp8BlockK - 1) / kFp8BlockK * n * 4;
}

// One Qwen3-30B-A3B MoE layer's experts (hidden 2048, 128 experts, top 8, expert
// intermediate 768) over M tokens, as SGLang runs it single-threaded: the router
// (moe_routing_case's: softmax, top 8, renormalised), then fused_experts_cpu's grouping
// and five stages. The experts run on fixed choices (not the router's), so that the
// weight bytes are known: token t chooses experts (t * 37 + j * 11) mod 128,
// j < 8 (distinct per token; 8 experts at M = 1, moe_active_experts(16) = 121 at M = 16).
// All experts share one packed weight (expert stride 0): the instruction counts are those
// of distinct weights, and packing 128 experts under emulation would take minutes.
constexpr std::int64_t kMoeH = 2048, kMoeE = 128, kMoeK = 8, kMoeI = 768;
constexpr std::int32_t moe_expert(std::int64_t t, std::int64_t j) {
  return static_cast<std::int32_t>((t * 37 + j * 11) % kMoeE);
}
constexpr std::int64_t moe_active_experts(std::int64_t m) {
  std::int64_t n = 0;
  for (std::int64_t e = 0; e < kMoeE; ++e) {
    bool hit = false;
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t j = 0; j < kMoeK; ++j) hit = hit || moe_expert(t, j) == e;
    n += hit;
  }
  return n;
}
// The experts' weight format: bf16; W8A8 (int8, channel scales); W4A8 (INT4 groups of
// kMoeGroup along K, scales and zero points); FP8 W8A16 (e4m3, kFp8BlockK x kFp8BlockK
// block scales, each expanded along N to one per channel as the op layer does).
enum class MoeFormat { kBF16, kW8A8, kW4A8, kFP8 };
constexpr std::int64_t kMoeGroup = 128;
// Rows of N scales (and zero points) per expert weight [N, K]: the kernel's moe_scale_rows.
constexpr std::int64_t moe_scale_rows(MoeFormat f, std::int64_t k) {
  switch (f) {
    case MoeFormat::kW8A8:
      return 1;
    case MoeFormat::kW4A8:
      return (k + kMoeGroup - 1) / kMoeGroup;
    case MoeFormat::kFP8:
      return (k + kFp8BlockK - 1) / kFp8BlockK;
    case MoeFormat::kBF16:
      break;
  }
  return 0;
}
// Bytes one expert weight [N, K] streams, counted as the dense cases count theirs (the
// quantised ones with their scales and zero points).
constexpr std::int64_t moe_layer_bytes(MoeFormat f, std::int64_t k, std::int64_t n) {
  switch (f) {
    case MoeFormat::kBF16:
      return k * n * 2;
    case MoeFormat::kW8A8:
      return k * n + n * 4;
    case MoeFormat::kW4A8:
      return int4_weight_bytes(k, n, kMoeGroup);
    case MoeFormat::kFP8:
      return fp8w_bytes(k, n);
  }
  return 0;
}
// Bytes of expert weights a call reads: each chosen expert's W13 and W2 once.
constexpr std::int64_t moe_weight_bytes(std::int64_t m, MoeFormat f) {
  return moe_active_experts(m) *
         (moe_layer_bytes(f, kMoeH, 2 * kMoeI) + moe_layer_bytes(f, kMoeI, kMoeH));
}

// Expert weight [n, k] of format f, packed for the running variant.
std::vector<std::uint32_t> moe_packed_weight(MoeFormat f, std::int64_t n, std::int64_t k,
                                             Rng& rng) {
  switch (f) {
    case MoeFormat::kW4A8:
      return packed_int4_weight(n, k, kMoeGroup, rng);
    case MoeFormat::kW8A8:
      return packed_weight(DType::kI8, n, k);
    case MoeFormat::kFP8:
      return packed_weight(DType::kFP8E4M3, n, k);
    case MoeFormat::kBF16:
      break;
  }
  return packed_weight(DType::kBF16, n, k);
}

// The layer in format f. The scales (and INT4 zero points) are per expert, for all 128:
// the kernel finds expert e's at e * scale rows * N (no stride to share them by).
template <std::int64_t M, MoeFormat f>
std::function<void()> moe_case() {
  constexpr bool kInt8Rows = f == MoeFormat::kW8A8 || f == MoeFormat::kW4A8;
  constexpr std::int64_t kRows13 = moe_scale_rows(f, kMoeH), kRows2 = moe_scale_rows(f, kMoeI);
  static Rng rng;
  static std::vector<std::uint32_t> w13 = moe_packed_weight(f, 2 * kMoeI, kMoeH, rng);
  static std::vector<std::uint32_t> w2 = moe_packed_weight(f, kMoeH, kMoeI, rng);
  static std::vector<float> s13(kMoeE * kRows13 * 2 * kMoeI, 0.01f),
      s2(kMoeE * kRows2 * kMoeH, 0.01f);
  static std::vector<std::uint8_t> z13, z2;
  if constexpr (f == MoeFormat::kW4A8) {
    z13 = random_zeros(s13.size(), rng);
    z2 = random_zeros(s2.size(), rng);
  }
  static auto x = random_bf16(M * kMoeH, rng);
  static std::vector<std::int32_t> ids(M * kMoeK);
  static std::vector<float> weights(M * kMoeK, 0.125f);
  for (std::int64_t t = 0; t < M; ++t)
    for (std::int64_t j = 0; j < kMoeK; ++j) ids[t * kMoeK + j] = moe_expert(t, j);
  constexpr std::int64_t A = M * kMoeK;
  static std::vector<std::int64_t> offsets(kMoeE + 1);
  static std::vector<std::int32_t> sorted(A), slot_of(A), active(kMoeE);
  static std::vector<std::uint16_t> xg(A * kMoeH), out(M * kMoeH);
  static std::vector<std::int8_t> xg_q(A * kMoeH), ic2_q(A * kMoeI);
  static std::vector<float> xg_s(A), ic1(A * 2 * kMoeI), ic2(A * kMoeI), ic2_s(A), y(A * kMoeH);
  static rvvk::MoeExpertsArgs a;
  a.tokens = M;
  a.topk = kMoeK;
  a.hidden = kMoeH;
  a.intermediate = kMoeI;
  a.x_dtype = DType::kBF16;
  a.x = x.data();
  a.x_stride = kMoeH;
  a.weights = weights.data();
  a.plan.offsets = offsets.data();
  a.plan.sorted_tokens = sorted.data();
  a.plan.slot_of = slot_of.data();
  a.plan.active = active.data();
  a.w13 = reinterpret_cast<const unsigned char*>(w13.data());
  a.w2 = reinterpret_cast<const unsigned char*>(w2.data());
  a.w13_stride = a.w2_stride = 0;
  a.w13_scales = s13.data();
  a.w2_scales = s2.data();
  if constexpr (f == MoeFormat::kFP8) a.w13_block_k = a.w2_block_k = kFp8BlockK;
  if constexpr (f == MoeFormat::kW4A8) {
    a.w13_zeros = z13.data();
    a.w2_zeros = z2.data();
  }
  a.out = out.data();
  a.out_stride = kMoeH;
  a.xg = kInt8Rows ? static_cast<void*>(xg_q.data()) : static_cast<void*>(xg.data());
  a.xg_scales = xg_s.data();
  a.ic1 = ic1.data();
  a.ic2 = ic2.data();
  a.ic2_q = ic2_q.data();
  a.ic2_scales = ic2_s.data();
  a.y = y.data();
  static const std::function<void()> route = moe_routing_case<static_cast<int>(M), true>();
  return [] {
    route();
    rvvk::moe_plan(ids.data(), M, kMoeK, kMoeE, &a.plan);
    for (rvvk::MoeStage st : {rvvk::MoeStage::kGather, rvvk::MoeStage::kGateUp,
                              rvvk::MoeStage::kAct, rvvk::MoeStage::kDown,
                              rvvk::MoeStage::kCombine}) {
      rvvk::moe_experts(a, st, 0, rvvk::moe_stage_tasks(a, st));
    }
  };
}

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> c = {
      {"decode_bf16_qwen2.5-1.5b",
       {"decode_attention", decode_case<DType::kBF16>, 0, decode_kv_bytes(2, false)}},
      {"decode_int8_qwen2.5-1.5b",
       {"decode_attention", decode_case<DType::kI8>, 0, decode_kv_bytes(1, true),
        "decode_bf16_qwen2.5-1.5b"}},
      {"extend_bf16_qwen2.5-1.5b", {"extend_attention", extend_case}},
      {"rmsnorm_bf16_1536", {"rmsnorm", rmsnorm_case}},
      {"silu_and_mul_bf16_8960", {"act_and_mul", silu_and_mul_case}},
      {"rope_neox_bf16_qwen2.5-1.5b", {"rotary_embedding", rope_case}},
      {"rmsnorm_gated_bf16_qwen3.5", {"rmsnorm_gated", rmsnorm_gated_case}},
      {"sigmoid_mul_bf16_qwen3.5", {"sigmoid_mul", sigmoid_mul_case}},
      {"gated_delta_rule_qwen3.5_head", {"gated_delta_rule", gated_delta_rule_case}},
      {"causal_conv1d_qwen3.5_m1", {"causal_conv1d", causal_conv1d_case}},
      {"moe_routing_qwen3-30b-a3b_m1", {"moe_topk", moe_routing_case<1, true>}},
      {"moe_routing_qwen3-30b-a3b_m16", {"moe_topk", moe_routing_case<16, true>}},
      {"moe_routing_deepseek-v3_m1", {"moe_topk", moe_routing_case<1, false>}},
      // Qwen2.5-1.5B's MLP up/gate projection at decode, and a prefill-sized square layer.
      {"linear_bf16_m1_k1536_n8960", {"linear", linear_case<1, 1536, 8960>, 1536 * 8960 * 2}},
      {"linear_bf16_m64_k1536_n1536", {"linear", linear_case<64, 1536, 1536>}},
      {"w8a8_m1_k1536_n8960", {"int8_linear", w8a8_case<1, 1536, 8960>, 1536 * 8960}},
      // INT4 (AWQ / GPTQ) at decode against W8A8 and bf16, and prefill-sized.
      {"w4a8_m1_k1536_n8960_g128",
       {"int4_linear", int4_case<1, 1536, 8960, 128, true>, int4_weight_bytes(1536, 8960, 128), 0,
        "w8a8_m1_k1536_n8960"}},
      {"w4a16_m1_k1536_n8960_g128",
       {"int4_linear", int4_case<1, 1536, 8960, 128, false>, int4_weight_bytes(1536, 8960, 128),
        0, "linear_bf16_m1_k1536_n8960"}},
      {"w4a8_m64_k1536_n1536_g128",
       {"int4_linear", int4_case<64, 1536, 1536, 128, true>, int4_weight_bytes(1536, 1536, 128)}},
      {"w4a16_m64_k1536_n1536_g128",
       {"int4_linear", int4_case<64, 1536, 1536, 128, false>, int4_weight_bytes(1536, 1536, 128),
        0, "linear_bf16_m64_k1536_n1536"}},
      {"fp8w_m1_k1536_n8960",
       {"fp8_linear", fp8w_case<1, 1536, 8960>, fp8w_bytes(1536, 8960), 0,
        "linear_bf16_m1_k1536_n8960"}},
      {"fp8w_m64_k1536_n8960",
       {"fp8_linear", fp8w_case<64, 1536, 8960>, fp8w_bytes(1536, 8960)}},
      // A Qwen3-30B-A3B MoE layer's experts at decode and at 16 tokens, bf16, W8A8, W4A8
      // and FP8, compared per weight byte with the dense layers of the same weight format.
      {"moe_bf16_qwen3-30b-a3b_m1",
       {"moe_experts", moe_case<1, MoeFormat::kBF16>, moe_weight_bytes(1, MoeFormat::kBF16), 0,
        "linear_bf16_m1_k1536_n8960"}},
      {"moe_bf16_qwen3-30b-a3b_m16",
       {"moe_experts", moe_case<16, MoeFormat::kBF16>, moe_weight_bytes(16, MoeFormat::kBF16)}},
      {"moe_w8a8_qwen3-30b-a3b_m1",
       {"moe_experts", moe_case<1, MoeFormat::kW8A8>, moe_weight_bytes(1, MoeFormat::kW8A8), 0,
        "w8a8_m1_k1536_n8960"}},
      {"moe_w4a8_qwen3-30b-a3b_m1",
       {"moe_experts", moe_case<1, MoeFormat::kW4A8>, moe_weight_bytes(1, MoeFormat::kW4A8), 0,
        "w4a8_m1_k1536_n8960_g128"}},
      {"moe_fp8_qwen3-30b-a3b_m1",
       {"moe_experts", moe_case<1, MoeFormat::kFP8>, moe_weight_bytes(1, MoeFormat::kFP8), 0,
        "fp8w_m1_k1536_n8960"}},
  };
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& [name, c] : cases()) {
      std::printf("%s %s %lld %lld %s\n", name.c_str(), c.kernel,
                  static_cast<long long>(c.weight_bytes), static_cast<long long>(c.kv_bytes),
                  c.baseline ? c.baseline : "-");
    }
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CASE REPS | --list\n", argv[0]);
    return 2;
  }
  const auto it = cases().find(argv[1]);
  if (it == cases().end()) {
    std::fprintf(stderr, "unknown case %s (see --list)\n", argv[1]);
    return 2;
  }
  if (*rvvk::variant_error()) {
    std::fprintf(stderr, "%s\n", rvvk::variant_error());
    return 2;
  }
  const int reps = std::atoi(argv[2]);
  const std::function<void()> call = it->second.setup();
  for (int r = 0; r < reps; ++r) call();
  std::printf("%s variant=%s reps=%d\n", argv[1], rvvk::active_variant(), reps);
  return 0;
}
