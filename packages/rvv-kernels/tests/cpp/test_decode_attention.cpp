// Decode attention against a double-precision reference: head sizes, GQA
// ratios (including 7 and MQA), context lengths 0..4097, mixed batches over
// shuffled cache rows, logit cap, sliding window, sinks, splits, every dtype;
// and the softmax's exp read back through the kernel over its whole range.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "exp_range.h"
#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

struct Case {
  std::int64_t hq, hkv, d, dv;
  std::vector<std::int64_t> lens;
  DType q_dtype, kv_dtype;
  float cap = 0.0f;
  std::int64_t window = 0;
  bool sinks = false;
  std::int64_t splits = 4;
  bool r2t64 = false;
  // Cache rows padded by 3 (K) and 1 (V) elements, so bf16 rows start at odd
  // 2-byte offsets, or not padded (SGLang's pools: rows 4-byte aligned, which
  // the RVV form that reads bf16 rows in 32-bit pairs needs).
  bool padded = true;
};

void run_case(rvvk_test::Context& ctx, const Case& c, std::uint64_t seed) {
  ref::Rng rng(seed);
  const std::int64_t batch = static_cast<std::int64_t>(c.lens.size());
  const std::int64_t max_ctx = std::max<std::int64_t>(1, *std::max_element(c.lens.begin(), c.lens.end()));
  const std::int64_t total = std::accumulate(c.lens.begin(), c.lens.end(), std::int64_t{0}) + 5;
  // Cache rows handed out in a shuffled order, with a few unused rows.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(total));
  std::iota(rows.begin(), rows.end(), 0);
  for (std::size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.next() % i]);
  const std::int64_t kst = c.hkv * c.d + (c.padded ? 3 : 0), vst = c.hkv * c.dv + (c.padded ? 1 : 0);
  ref::Buffer k(c.kv_dtype, static_cast<std::size_t>(total * kst));
  ref::Buffer v(c.kv_dtype, static_cast<std::size_t>(total * vst));
  // Real cache values are stored * scale: int8 per (token, KV head), fp8 per tensor.
  const bool int8 = c.kv_dtype == DType::kI8;
  const bool fp8 = c.kv_dtype == DType::kFP8E4M3 || c.kv_dtype == DType::kFP8E5M2;
  const double range = int8 ? 127.0 : 1.0;
  for (std::size_t i = 0; i < k.size(); ++i) k.set(i, rng.uniform(-range, range));
  for (std::size_t i = 0; i < v.size(); ++i) v.set(i, rng.uniform(-range, range));
  std::vector<float> kscales(static_cast<std::size_t>(total * c.hkv)), vscales(kscales.size());
  for (float& x : kscales) x = static_cast<float>(rng.uniform(0.5, 1.5) / 127.0);
  for (float& x : vscales) x = static_cast<float>(rng.uniform(0.5, 1.5) / 127.0);
  const float kscale = fp8 ? 0.75f : 1.0f, vscale = fp8 ? 1.25f : 1.0f;
  auto kval = [&](std::int64_t row, std::int64_t kvh, std::int64_t i) {
    const double x = k.get(static_cast<std::size_t>(row * kst + kvh * c.d + i));
    return int8 ? x * kscales[static_cast<std::size_t>(row * c.hkv + kvh)] : x * kscale;
  };
  auto vval = [&](std::int64_t row, std::int64_t kvh, std::int64_t i) {
    const double x = v.get(static_cast<std::size_t>(row * vst + kvh * c.dv + i));
    return int8 ? x * vscales[static_cast<std::size_t>(row * c.hkv + kvh)] : x * vscale;
  };
  ref::Buffer q(c.q_dtype, static_cast<std::size_t>(batch * c.hq * c.d));
  for (std::size_t i = 0; i < q.size(); ++i) q.set(i, rng.uniform(-1, 1));
  // req_to_token rows in reverse request order, to make req_pool_indices matter.
  const std::int64_t r2t_stride = max_ctx + 2;
  std::vector<std::int64_t> r2t64(static_cast<std::size_t>((batch + 1) * r2t_stride), -1);
  std::vector<std::int64_t> pool(static_cast<std::size_t>(batch));
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    pool[static_cast<std::size_t>(b)] = batch - b;
    for (std::int64_t t = 0; t < c.lens[static_cast<std::size_t>(b)]; ++t)
      r2t64[static_cast<std::size_t>((batch - b) * r2t_stride + t)] = rows[next++];
  }
  std::vector<std::int32_t> r2t32(r2t64.begin(), r2t64.end());
  std::vector<float> sinks(static_cast<std::size_t>(c.hq));
  for (float& s : sinks) s = static_cast<float>(rng.uniform(-2, 2));

  rvvk::DecodeAttentionArgs a;
  a.batch = batch;
  a.num_heads = c.hq;
  a.num_kv_heads = c.hkv;
  a.head_dim = c.d;
  a.head_dim_v = c.dv;
  a.num_splits = c.splits;
  a.q_dtype = c.q_dtype;
  a.q = q.data();
  a.q_stride_b = c.hq * c.d;
  a.q_stride_h = c.d;
  a.cache.dtype = c.kv_dtype;
  a.cache.k = k.data();
  a.cache.k_stride_t = kst;
  a.cache.k_stride_h = c.d;
  a.cache.v = v.data();
  a.cache.v_stride_t = vst;
  a.cache.v_stride_h = c.dv;
  a.cache.k_scale = kscale;
  a.cache.v_scale = vscale;
  if (int8) {
    a.cache.k_scales = kscales.data();
    a.cache.v_scales = vscales.data();
    a.cache.scales_stride = c.hkv;
  }
  a.cache.req_to_token = c.r2t64 ? static_cast<const void*>(r2t64.data()) : r2t32.data();
  a.cache.req_to_token_int64 = c.r2t64;
  a.cache.req_to_token_stride = r2t_stride;
  a.req_pool_indices = pool.data();
  a.seq_lens = c.lens.data();
  ref::Buffer o(c.q_dtype, static_cast<std::size_t>(batch * c.hq * c.dv));
  a.o_dtype = c.q_dtype;
  a.o = o.data();
  a.o_stride_b = c.hq * c.dv;
  a.o_stride_h = c.dv;
  std::vector<float> partial(static_cast<std::size_t>(batch * c.hq * c.splits * (c.dv + 1)), NAN);
  a.partial = partial.data();
  a.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  a.logit_cap = c.cap;
  a.window = c.window;
  a.sinks = c.sinks ? sinks.data() : nullptr;

  // Tasks in two uneven ranges, as a thread pool would hand them out.
  const std::int64_t np = rvvk::decode_attention_partial_tasks(a);
  rvvk::decode_attention_partial(a, 0, np / 3);
  rvvk::decode_attention_partial(a, np / 3, np);
  const std::int64_t nm = rvvk::decode_attention_merge_tasks(a);
  rvvk::decode_attention_merge(a, 0, nm / 2);
  rvvk::decode_attention_merge(a, nm / 2, nm);

  const std::int64_t group = c.hq / c.hkv;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = c.lens[static_cast<std::size_t>(b)];
    const std::int64_t start = c.window > 0 ? std::max<std::int64_t>(0, len - c.window) : 0;
    for (std::int64_t h = 0; h < c.hq; ++h) {
      const std::int64_t kvh = h / group;
      std::vector<double> s;
      for (std::int64_t t = start; t < len; ++t) {
        const std::int64_t row = r2t64[static_cast<std::size_t>(pool[static_cast<std::size_t>(b)] * r2t_stride + t)];
        double dot = 0;
        for (std::int64_t i = 0; i < c.d; ++i)
          dot += q.get(static_cast<std::size_t>((b * c.hq + h) * c.d + i)) * kval(row, kvh, i);
        dot *= a.sm_scale;
        if (c.cap > 0) dot = c.cap * std::tanh(dot / c.cap);
        s.push_back(dot);
      }
      double mx = c.sinks ? sinks[static_cast<std::size_t>(h)] : -INFINITY;
      for (double x : s) mx = std::max(mx, x);
      double denom = c.sinks ? std::exp(sinks[static_cast<std::size_t>(h)] - mx) : 0.0;
      for (double& x : s) denom += (x = std::exp(x - mx));
      for (std::int64_t i = 0; i < c.dv; ++i) {
        double want = 0;
        for (std::size_t j = 0; j < s.size(); ++j) {
          const std::int64_t row = r2t64[static_cast<std::size_t>(pool[static_cast<std::size_t>(b)] * r2t_stride + start + static_cast<std::int64_t>(j))];
          want += s[j] * vval(row, kvh, i);
        }
        want = denom > 0 ? ref::round_to(c.q_dtype, want / denom) : 0.0;
        const double got = o.get(static_cast<std::size_t>((b * c.hq + h) * c.dv + i));
        // One unit in the last place of the output dtype, plus fp32 accumulation
        // and polynomial-exp error relative to |v| <= 1.
        const double tol = ref::ulp(c.q_dtype, std::fabs(want)) + 2e-5;
        CHECK_MSG(std::fabs(got - want) <= tol && !std::isnan(got),
                  "hq=%lld hkv=%lld d=%lld dv=%lld q=%s kv=%s cap=%g win=%lld sinks=%d splits=%lld "
                  "b=%lld len=%lld h=%lld i=%lld: got %.8g want %.8g",
                  (long long)c.hq, (long long)c.hkv, (long long)c.d, (long long)c.dv,
                  ref::name(c.q_dtype), ref::name(c.kv_dtype), c.cap, (long long)c.window, c.sinks,
                  (long long)c.splits, (long long)b, (long long)len, (long long)h, (long long)i, got,
                  want);
      }
    }
  }
}

}  // namespace

RVVK_TEST(decode_attention_head_sizes_and_gqa) {
  // head sizes off the vector width (20 / 12: 8-lane tails on AVX2); groups of
  // 1 to 10 query heads per KV head (AVX2 takes up to 6 heads at a time, so 7,
  // 8, 9 and 10 split as 6 + 1, 6 + 2, 6 + 3 and 6 + 4 and 5 is its own form);
  // odd KV head counts (3, 5), whose last task has one KV head, not a pair
  const std::int64_t dims[][2] = {{16, 16}, {20, 12}, {64, 64}, {80, 80},
                                  {96, 64}, {128, 128}, {256, 256}};
  const std::int64_t heads[][2] = {{12, 2}, {7, 1}, {4, 4}, {8, 1}, {14, 2},
                                   {10, 2}, {9, 1}, {20, 2}, {15, 3}, {5, 5}};
  std::uint64_t seed = 10;
  for (auto& dm : dims)
    for (auto& hd : heads)
      run_case(ctx, Case{hd[0], hd[1], dm[0], dm[1], {17, 1, 70}, DType::kF32, DType::kF32}, ++seed);
  // A bf16 cache: x86_avx2 reads bf16 rows whose size is a multiple of 16 in
  // pairs (q and the P.V accumulators in pair order), others element-wise;
  // sizes of both kinds, K and V of different kinds, every per-step head count.
  const std::int64_t bf16_dims[][2] = {{20, 12}, {80, 80}, {96, 40}, {40, 96}};
  for (auto& dm : bf16_dims)
    for (auto& hd : {std::array<std::int64_t, 2>{12, 2}, {9, 1}, {10, 2}, {8, 2}, {8, 1}, {5, 1}})
      run_case(ctx, Case{hd[0], hd[1], dm[0], dm[1], {17, 1, 70}, DType::kF32, DType::kBF16},
               ++seed);
  // bf16 q over a bf16 cache: x86_avx512_bf16 takes q.k by bf16 dot products
  // where the head size is a multiple of 32 (up to 4 heads x 4 keys at a time,
  // so groups of 1 to 9 run every per-pass head count and key tails), and the
  // AVX-512 P.V reads bf16 V rows of whole 32s in pairs.
  const std::int64_t dot_dims[][2] = {{32, 32}, {64, 40}, {96, 64}, {128, 128}, {160, 96},
                                      {80, 80}, {256, 256}};
  for (auto& dm : dot_dims)
    for (auto& hd : {std::array<std::int64_t, 2>{12, 2}, {7, 1}, {5, 1}, {3, 1}, {1, 1},
                     {8, 1}, {18, 2}})
      run_case(ctx, Case{hd[0], hd[1], dm[0], dm[1], {17, 1, 70, 3}, DType::kBF16, DType::kBF16},
               ++seed);
}

RVVK_TEST(decode_attention_bf16_aligned_rows) {
  // bf16 caches with unpadded rows, as SGLang's pools have them: RVV reads these
  // rows in 32-bit pairs (even head sizes), q.k by gathers with the keys in lanes
  // (blocks of up to 64 keys in VLEN / 16 at a time) and both products for up to
  // 6 heads at a time, so groups of 1 to 10 run every pass size and remainder;
  // odd head sizes (the generic forms) and odd KV head counts too; fp32 and bf16 q.
  const std::int64_t dims[][2] = {{2, 2}, {20, 12}, {64, 64}, {80, 80}, {96, 40},
                                  {128, 128}, {256, 256}, {15, 15}, {576, 512}};
  const std::int64_t heads[][2] = {{12, 2}, {7, 1}, {4, 4}, {8, 1}, {1, 1}, {2, 1},
                                   {10, 2}, {9, 1}, {15, 3}, {5, 5}, {18, 2}};
  std::uint64_t seed = 500;
  for (auto& dm : dims)
    for (auto& hd : heads)
      for (DType qd : {DType::kF32, DType::kBF16}) {
        Case c{hd[0], hd[1], dm[0], dm[1], {17, 1, 70, 3}, qd, DType::kBF16};
        c.padded = false;
        run_case(ctx, c, ++seed);
      }
  for (std::int64_t len : {0, 1, 2, 63, 64, 65, 257, 1000})
    for (std::int64_t splits : {1, 3}) {
      Case c{12, 2, 128, 128, {len, 5}, DType::kBF16, DType::kBF16, 0, 0, false, splits};
      c.padded = false;
      run_case(ctx, c, ++seed);
    }
  Case f{7, 1, 64, 64, {0, 1, 200, 65}, DType::kBF16, DType::kBF16, 30.0f, 64, true, 3};
  f.padded = false;
  run_case(ctx, f, ++seed);
}

RVVK_TEST(decode_attention_context_lengths) {
  std::uint64_t seed = 100;
  for (std::int64_t len : {0, 1, 2, 17, 63, 64, 65, 255, 256, 257, 1000, 4097})
    for (std::int64_t splits : {1, 3, 8})
      run_case(ctx, Case{6, 2, 64, 64, {len}, DType::kF32, DType::kBF16, 0, 0, false, splits},
               ++seed);
  run_case(ctx, Case{12, 2, 128, 128, {1, 2, 17, 255, 256, 257, 1000, 9}, DType::kBF16, DType::kBF16},
           ++seed);
}

RVVK_TEST(decode_attention_dtypes) {
  const DType types[] = {DType::kF32, DType::kBF16, DType::kF16};
  std::uint64_t seed = 200;
  for (DType qd : types)
    for (DType kd : types)
      for (bool r2t64 : {false, true})
        run_case(ctx, Case{6, 3, 48, 40, {33, 130}, qd, kd, 0, 0, false, 2, r2t64}, ++seed);
}

RVVK_TEST(decode_attention_quantised_caches) {
  std::uint64_t seed = 250;
  for (DType kd : {DType::kFP8E4M3, DType::kFP8E5M2, DType::kI8})
    for (DType qd : {DType::kF32, DType::kBF16, DType::kF16})
      run_case(ctx, Case{12, 2, 128, 128, {1, 77, 300}, qd, kd, 0, 0, false, 3}, ++seed);
  run_case(ctx, Case{7, 1, 80, 80, {5, 129}, DType::kBF16, DType::kI8, 20.0f, 50, true, 2}, ++seed);
}

RVVK_TEST(decode_attention_features) {
  std::uint64_t seed = 300;
  for (float cap : {0.0f, 1.5f, 30.0f})
    for (std::int64_t window : {0, 1, 5, 64, 300})
      for (bool sinks : {false, true})
        run_case(ctx, Case{7, 1, 64, 64, {0, 1, 200, 65}, DType::kBF16, DType::kBF16, cap, window, sinks, 3},
                 ++seed);
}

RVVK_TEST(decode_attention_mla_shape) {
  run_case(ctx, Case{16, 1, 576, 512, {1, 300}, DType::kBF16, DType::kBF16, 0, 0, false, 4}, 400);
}

RVVK_TEST(decode_attention_softmax_exp_range) {
  // The softmax's exp over its whole range, as for extend: each head sees three keys with
  // scores 0, -x and 0 and value rows e0, e1 and e2, so output element 1 is
  // exp(-x) / (2 + exp(-x)) and exp's relative error shows in it directly. x from 0 to 100
  // in steps of 1/16 plus points around the cut-off (x > 87.33654: exactly 0). Many heads of
  // one KV head and 3 heads; one split, so the keys share one softmax block.
  constexpr std::int64_t d = 16;
  const std::vector<double> xs = rvvk_test::exp_range_points();
  std::vector<float> cache_k(3 * d, 0.0f), cache_v(3 * d, 0.0f);
  cache_k[0 * d + 0] = cache_v[0 * d + 0] = 1.0f;  // row 0: key e0, value e0
  cache_k[1 * d + 1] = cache_v[1 * d + 1] = 1.0f;  // row 1: key e1, value e1
  cache_k[2 * d + 0] = cache_v[2 * d + 2] = 1.0f;  // row 2: key e0, value e2
  const std::int64_t r2t[3] = {0, 1, 2}, pool[1] = {0}, lens[1] = {3};
  for (std::int64_t heads : {48, 3}) {
    for (std::size_t x0 = 0; x0 < xs.size(); x0 += static_cast<std::size_t>(heads)) {
      std::vector<float> q(static_cast<std::size_t>(heads * d), 0.0f);
      std::vector<float> o(static_cast<std::size_t>(heads * d), -1.0f);
      std::vector<float> partial(static_cast<std::size_t>(heads * (d + 1)), NAN);
      for (std::int64_t h = 0; h < heads; ++h)
        q[static_cast<std::size_t>(h * d + 1)] =
            -static_cast<float>(xs[std::min(xs.size() - 1, x0 + static_cast<std::size_t>(h))]);
      rvvk::DecodeAttentionArgs a;
      a.batch = 1;
      a.num_heads = heads;
      a.num_kv_heads = 1;
      a.head_dim = a.head_dim_v = d;
      a.q = q.data();
      a.q_stride_b = heads * d;
      a.q_stride_h = d;
      a.cache.k = cache_k.data();
      a.cache.v = cache_v.data();
      a.cache.k_stride_t = a.cache.k_stride_h = a.cache.v_stride_t = a.cache.v_stride_h = d;
      a.cache.req_to_token = r2t;
      a.cache.req_to_token_int64 = true;
      a.cache.req_to_token_stride = 3;
      a.req_pool_indices = pool;
      a.seq_lens = lens;
      a.o = o.data();
      a.o_stride_b = heads * d;
      a.o_stride_h = d;
      a.partial = partial.data();
      a.sm_scale = 1.0f;
      rvvk::decode_attention_partial(a, 0, rvvk::decode_attention_partial_tasks(a));
      rvvk::decode_attention_merge(a, 0, rvvk::decode_attention_merge_tasks(a));
      for (std::int64_t h = 0; h < heads && x0 + static_cast<std::size_t>(h) < xs.size(); ++h) {
        rvvk_test::check_exp_range_row(ctx, static_cast<long long>(heads),
                                       xs[x0 + static_cast<std::size_t>(h)], o.data() + h * d);
      }
    }
  }
}
