// Extend attention against a double-precision reference: head sizes, GQA
// ratios (including 7 and MQA), prefix and extend lengths around the block
// sizes, mixed batches (one request with no new token) over shuffled, strided
// cache rows, causal and not, logit cap, sliding windows, sinks, every cache
// dtype (fp8 per-tensor and int8 per-token scales) and activation dtype, tasks
// run in uneven ranges and out of order. Shapes are chosen so that both ways
// the kernel computes scores (q transposed, or dot products for tasks with few
// query rows) and head sizes that are not multiples of its tiles run at every
// VLEN, and so that the whole file stays cheap under QEMU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "exp_range.h"
#include "harness.h"
#include "reference.h"

using rvvk::DType;

namespace {

struct Req {
  std::int64_t prefix, ext;
};

struct Case {
  std::int64_t hq, hkv, d, dv;
  std::vector<Req> reqs;
  DType dtype, kv_dtype;
  float cap = 0.0f;
  std::int64_t window = 0;
  bool sinks = false;
  bool causal = true;
  bool r2t64 = false;
  bool scaled = false;  // per-tensor scales on a 16/32-bit cache (K 0.5, V 2)
  // Run every task once over a cache holding other values first (the same
  // shapes and rows on the same thread): nothing of that call may leak into
  // the checked one (the x86_amx variant keeps packed key blocks per thread).
  bool rerun = false;
};

// Fills `buf` with random values in [-range, range] that are exact in its
// dtype: bf16 by truncating a float, fp16 as multiples of 2^-10 (encoded
// directly), fp8 by a search in a table of the codes' values, without the
// per-element search of Buffer::set (slow under QEMU).
void fill_random(ref::Buffer& buf, ref::Rng& rng, double range) {
  const std::size_t n = buf.size();
  if (buf.dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(rng.uniform(-range, range));
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const std::uint16_t h = static_cast<std::uint16_t>(u >> 16);
      std::memcpy(&buf.bytes[i * 2], &h, 2);
    }
  } else if (buf.dtype == DType::kF16 && range <= 1.0) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::int32_t>(std::lround(rng.uniform(-range, range) * 1024));
      std::uint32_t mag = static_cast<std::uint32_t>(k < 0 ? -k : k), h = 0;
      if (mag != 0) {
        int e = 0;  // mag = 1.m * 2^e, value = mag * 2^-10
        while ((mag >> (e + 1)) != 0) ++e;
        h = static_cast<std::uint32_t>(e - 10 + 15) << 10 | ((mag << (10 - e)) & 0x3ffu);
      }
      h |= k < 0 ? 0x8000u : 0u;
      const std::uint16_t h16 = static_cast<std::uint16_t>(h);
      std::memcpy(&buf.bytes[i * 2], &h16, 2);
    }
  } else if (buf.dtype == DType::kFP8E4M3 || buf.dtype == DType::kFP8E5M2) {
    // The non-negative codes up to `range` in increasing order; each value is
    // rounded to the nearest of them.
    std::vector<double> vals;
    std::vector<std::uint8_t> codes;
    for (int c = 0; c < 0x7f; ++c) {
      const auto code = static_cast<std::uint16_t>(c);
      const bool e4m3 = buf.dtype == DType::kFP8E4M3;
      const double v = e4m3 ? ref::decode_e4m3(code) : ref::decode_e5m2(code);
      if (v <= range) {
        vals.push_back(v);
        codes.push_back(static_cast<std::uint8_t>(c));
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const double x = rng.uniform(-range, range), a = std::fabs(x);
      const auto it = std::lower_bound(vals.begin(), vals.end(), a);
      auto k = static_cast<std::size_t>(it - vals.begin());
      if (k == vals.size() || (k > 0 && a - vals[k - 1] < vals[k] - a)) --k;
      buf.bytes[i] = static_cast<std::uint8_t>(codes[k] | (x < 0 ? 0x80 : 0));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) buf.set(i, rng.uniform(-range, range));
  }
}

void run_case(rvvk_test::Context& ctx, const Case& c, std::uint64_t seed) {
  ref::Rng rng(seed);
  const std::int64_t batch = static_cast<std::int64_t>(c.reqs.size());
  std::int64_t total_prefix = 0, max_len = 1, max_ext = 0;
  for (const Req& r : c.reqs) {
    total_prefix += r.prefix;
    max_len = std::max(max_len, r.prefix + r.ext);
    max_ext = std::max(max_ext, r.ext);
  }

  // The prefix: cache rows handed out in a shuffled order, with unused rows,
  // padded (strided) rows. Real values are stored * scale: int8 per (token,
  // KV head), fp8 per tensor.
  const std::int64_t cache_rows = total_prefix + 5;
  std::vector<std::int64_t> rows(static_cast<std::size_t>(cache_rows));
  std::iota(rows.begin(), rows.end(), 0);
  for (std::size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.next() % i]);
  const std::int64_t kst = c.hkv * c.d + 3, vst = c.hkv * c.dv + 1;
  ref::Buffer kc(c.kv_dtype, static_cast<std::size_t>(cache_rows * kst));
  ref::Buffer vc(c.kv_dtype, static_cast<std::size_t>(cache_rows * vst));
  const bool int8 = c.kv_dtype == DType::kI8;
  const bool fp8 = c.kv_dtype == DType::kFP8E4M3 || c.kv_dtype == DType::kFP8E5M2;
  const double range = int8 ? 127.0 : 1.0;
  fill_random(kc, rng, range);
  fill_random(vc, rng, range);
  std::vector<float> kscales(static_cast<std::size_t>(cache_rows * c.hkv)), vscales(kscales.size());
  for (float& x : kscales) x = static_cast<float>(rng.uniform(0.5, 1.5) / 127.0);
  for (float& x : vscales) x = static_cast<float>(rng.uniform(0.5, 1.5) / 127.0);
  // Per-tensor scales apply to the cached K / V of every dtype but int8
  // (per-token scales): powers of two for the 16/32-bit ones when c.scaled.
  const float kscale = fp8 ? 0.75f : int8 || !c.scaled ? 1.0f : 0.5f;
  const float vscale = fp8 ? 1.25f : int8 || !c.scaled ? 1.0f : 2.0f;

  // req_to_token rows in reverse request order, to make req_pool_indices matter.
  const std::int64_t r2t_stride = max_len + 2;
  std::vector<std::int64_t> r2t64(static_cast<std::size_t>((batch + 1) * r2t_stride), -1);
  std::vector<std::int64_t> pool(static_cast<std::size_t>(batch));
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    pool[static_cast<std::size_t>(b)] = batch - b;
    for (std::int64_t t = 0; t < c.reqs[static_cast<std::size_t>(b)].prefix; ++t)
      r2t64[static_cast<std::size_t>((batch - b) * r2t_stride + t)] = rows[next++];
  }
  std::vector<std::int32_t> r2t32(r2t64.begin(), r2t64.end());

  // The new tokens: one unused row before each request's rows, padded strides.
  std::vector<std::int64_t> seq_lens, ext_lens, start_loc;
  std::int64_t tokens = 0;
  for (const Req& r : c.reqs) {
    seq_lens.push_back(r.prefix + r.ext);
    ext_lens.push_back(r.ext);
    start_loc.push_back(++tokens);
    tokens += r.ext;
  }
  tokens += 1;
  const std::int64_t qsh = c.d + 1, qst = c.hq * qsh + 3;
  const std::int64_t ksh = c.d, kst_new = c.hkv * c.d + 2;
  const std::int64_t vsh = c.dv, vst_new = c.hkv * c.dv + 1;
  const std::int64_t osh = c.dv + 2, ost = c.hq * osh + 1;
  ref::Buffer q(c.dtype, static_cast<std::size_t>(tokens * qst));
  ref::Buffer kn(c.dtype, static_cast<std::size_t>(tokens * kst_new));
  ref::Buffer vn(c.dtype, static_cast<std::size_t>(tokens * vst_new));
  fill_random(q, rng, 1.0);
  fill_random(kn, rng, 1.0);
  fill_random(vn, rng, 1.0);
  ref::Buffer o(c.dtype, static_cast<std::size_t>(tokens * ost));
  for (std::size_t i = 0; i < o.size(); ++i) o.set(i, NAN);
  std::vector<float> sinks(static_cast<std::size_t>(c.hq));
  for (float& s : sinks) s = static_cast<float>(rng.uniform(-2, 2));

  rvvk::ExtendAttentionArgs a;
  a.batch = batch;
  a.num_heads = c.hq;
  a.num_kv_heads = c.hkv;
  a.head_dim = c.d;
  a.head_dim_v = c.dv;
  a.max_extend_len = max_ext + (seed % 2 ? 33 : 0);  // more blocks than needed: no-op tasks
  a.dtype = c.dtype;
  a.q = q.data();
  a.q_stride_t = qst;
  a.q_stride_h = qsh;
  a.k = kn.data();
  a.k_stride_t = kst_new;
  a.k_stride_h = ksh;
  a.v = vn.data();
  a.v_stride_t = vst_new;
  a.v_stride_h = vsh;
  a.o = o.data();
  a.o_stride_t = ost;
  a.o_stride_h = osh;
  a.cache.dtype = c.kv_dtype;
  a.cache.k = kc.data();
  a.cache.k_stride_t = kst;
  a.cache.k_stride_h = c.d;
  a.cache.v = vc.data();
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
  a.seq_lens = seq_lens.data();
  a.extend_seq_lens = ext_lens.data();
  a.extend_start_loc = start_loc.data();
  a.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  a.logit_cap = c.cap;
  a.window = c.window;
  a.sinks = c.sinks ? sinks.data() : nullptr;
  a.causal = c.causal;

  const std::int64_t n = rvvk::extend_attention_tasks(a);
  if (c.rerun) {
    const std::vector<unsigned char> k_bytes = kc.bytes, v_bytes = vc.bytes;
    fill_random(kc, rng, 1.0);
    fill_random(vc, rng, 1.0);
    rvvk::extend_attention(a, 0, n);
    kc.bytes = k_bytes;
    vc.bytes = v_bytes;
  }
  // Tasks in uneven ranges, last range first, as a thread pool might run them.
  const std::int64_t cut1 = n / 3, cut2 = std::max(cut1, n - 1);
  rvvk::extend_attention(a, cut2, n);
  rvvk::extend_attention(a, cut1, cut2);
  rvvk::extend_attention(a, 0, cut1);

  // The reference, in double from the stored values.
  const std::int64_t group = c.hq / c.hkv;
  auto kval = [&](std::int64_t b, std::int64_t pos, std::int64_t kvh, std::int64_t i) {
    const Req& r = c.reqs[static_cast<std::size_t>(b)];
    if (pos >= r.prefix) {
      const std::int64_t t = start_loc[static_cast<std::size_t>(b)] + pos - r.prefix;
      return kn.get(static_cast<std::size_t>(t * kst_new + kvh * ksh + i));
    }
    const std::int64_t row =
        r2t64[static_cast<std::size_t>(pool[static_cast<std::size_t>(b)] * r2t_stride + pos)];
    const double x = kc.get(static_cast<std::size_t>(row * kst + kvh * c.d + i));
    return int8 ? x * kscales[static_cast<std::size_t>(row * c.hkv + kvh)] : x * kscale;
  };
  auto vval = [&](std::int64_t b, std::int64_t pos, std::int64_t kvh, std::int64_t i) {
    const Req& r = c.reqs[static_cast<std::size_t>(b)];
    if (pos >= r.prefix) {
      const std::int64_t t = start_loc[static_cast<std::size_t>(b)] + pos - r.prefix;
      return vn.get(static_cast<std::size_t>(t * vst_new + kvh * vsh + i));
    }
    const std::int64_t row =
        r2t64[static_cast<std::size_t>(pool[static_cast<std::size_t>(b)] * r2t_stride + pos)];
    const double x = vc.get(static_cast<std::size_t>(row * vst + kvh * c.dv + i));
    return int8 ? x * vscales[static_cast<std::size_t>(row * c.hkv + kvh)] : x * vscale;
  };
  ref::Buffer one(c.dtype, 1);
  std::vector<double> kd, vd, s;
  std::vector<double> want(static_cast<std::size_t>(c.dv)), qd(static_cast<std::size_t>(c.d));
  std::vector<double> spread(static_cast<std::size_t>(c.dv));
  // bf16 q over a bf16 cache: the x86_amx and x86_avx512_bf16 variants round
  // the softmax weights p to bf16 before P.V (as torch's CPU flash attention
  // does) and divide by the sum of the rounded p. That moves an output by
  // sum_j p_j d_j (v_j - o) / l with |d_j| <= 2^-8, independent roundings: the
  // tolerance allows 4 x 2^-8 x sqrt(sum_j p_j^2 (v_j - o)^2) / l (over 7
  // standard deviations; a bound for up to 16 keys). One key wrongly in or out
  // of a row of n similar weights moves o by ~|v_j - o| / n, this allowance is
  // ~0.6 |v - o| / sqrt(n) x 4 x 2^-8: still caught for n < ~500 on most columns
  // and on some for longer rows.
  const bool p_bf16 = c.dtype == DType::kBF16 && c.kv_dtype == DType::kBF16;
  for (std::int64_t b = 0; b < batch; ++b) {
    const Req& r = c.reqs[static_cast<std::size_t>(b)];
    const std::int64_t len = r.prefix + r.ext;
    for (std::int64_t kvh = 0; kvh < c.hkv; ++kvh) {
      // This request's keys and values of this KV head, as doubles.
      kd.resize(static_cast<std::size_t>(len * c.d));
      vd.resize(static_cast<std::size_t>(len * c.dv));
      for (std::int64_t pos = 0; pos < len; ++pos) {
        for (std::int64_t i = 0; i < c.d; ++i)
          kd[static_cast<std::size_t>(pos * c.d + i)] = kval(b, pos, kvh, i);
        for (std::int64_t i = 0; i < c.dv; ++i)
          vd[static_cast<std::size_t>(pos * c.dv + i)] = vval(b, pos, kvh, i);
      }
      for (std::int64_t e = 0; e < r.ext; ++e) {
        const std::int64_t qpos = r.prefix + e, t = start_loc[static_cast<std::size_t>(b)] + e;
        const std::int64_t lo = c.window > 0 ? std::max<std::int64_t>(0, qpos - c.window + 1) : 0;
        const std::int64_t hi = c.causal ? qpos + 1 : len;
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t h = kvh * group + g;
          for (std::int64_t i = 0; i < c.d; ++i)
            qd[static_cast<std::size_t>(i)] =
                q.get(static_cast<std::size_t>(t * qst + h * qsh + i));
          s.assign(static_cast<std::size_t>(hi - lo), 0.0);
          for (std::int64_t pos = lo; pos < hi; ++pos) {
            double dot = 0;
            const double* krow = kd.data() + pos * c.d;
            for (std::int64_t i = 0; i < c.d; ++i) dot += qd[static_cast<std::size_t>(i)] * krow[i];
            dot *= a.sm_scale;
            if (c.cap > 0) dot = c.cap * std::tanh(dot / c.cap);
            s[static_cast<std::size_t>(pos - lo)] = dot;
          }
          double mx = c.sinks ? sinks[static_cast<std::size_t>(h)] : -INFINITY;
          for (double x : s) mx = std::max(mx, x);
          double denom = c.sinks ? std::exp(sinks[static_cast<std::size_t>(h)] - mx) : 0.0;
          for (double& x : s) denom += (x = std::exp(x - mx));
          std::fill(want.begin(), want.end(), 0.0);
          for (std::int64_t pos = lo; pos < hi; ++pos) {
            const double p = s[static_cast<std::size_t>(pos - lo)];
            const double* vrow = vd.data() + pos * c.dv;
            for (std::int64_t i = 0; i < c.dv; ++i)
              want[static_cast<std::size_t>(i)] += p * vrow[i];
          }
          std::fill(spread.begin(), spread.end(), 0.0);
          if (p_bf16 && denom > 0) {
            for (std::int64_t pos = lo; pos < hi; ++pos) {
              const double p = s[static_cast<std::size_t>(pos - lo)];
              const double* vrow = vd.data() + pos * c.dv;
              for (std::int64_t i = 0; i < c.dv; ++i) {
                const double dv = p * (vrow[i] - want[static_cast<std::size_t>(i)] / denom);
                spread[static_cast<std::size_t>(i)] += dv * dv;
              }
            }
          }
          for (std::int64_t i = 0; i < c.dv; ++i) {
            one.set(0, denom > 0 ? want[static_cast<std::size_t>(i)] / denom : 0.0);
            const double w = one.get(0);  // rounded to the output dtype
            const double got = o.get(static_cast<std::size_t>(t * ost + h * osh + i));
            // One unit in the last place of the output dtype, plus fp32
            // accumulation and polynomial-exp error relative to |v| <= 1.
            const double spr = spread[static_cast<std::size_t>(i)];
            const double p_err = p_bf16 && denom > 0 ? 0x1p-6 * std::sqrt(spr) / denom : 0.0;
            const double tol = ref::ulp(c.dtype, std::fabs(w)) + 2e-5 + p_err;
            CHECK_MSG(std::fabs(got - w) <= tol && !std::isnan(got),
                      "hq=%lld hkv=%lld d=%lld dv=%lld %s kv=%s cap=%g win=%lld sinks=%d causal=%d "
                      "b=%lld prefix=%lld ext=%lld e=%lld h=%lld i=%lld: got %.8g want %.8g",
                      (long long)c.hq, (long long)c.hkv, (long long)c.d, (long long)c.dv,
                      ref::name(c.dtype), ref::name(c.kv_dtype), c.cap, (long long)c.window,
                      c.sinks, c.causal, (long long)b, (long long)r.prefix, (long long)r.ext,
                      (long long)e, (long long)h, (long long)i, got, w);
          }
        }
      }
    }
  }
  // Rows that are not new tokens of any request stay untouched.
  for (std::int64_t b = 0; b <= batch; ++b) {
    const std::int64_t t = b < batch ? start_loc[static_cast<std::size_t>(b)] - 1 : tokens - 1;
    for (std::int64_t i = 0; i < ost; ++i)
      CHECK_MSG(std::isnan(o.get(static_cast<std::size_t>(t * ost + i))),
                "token row %lld (no request's) was written", (long long)t);
  }
}

}  // namespace

RVVK_TEST(extend_attention_head_sizes_and_gqa) {
  // Every head size with two of the GQA ratios, each ratio with three sizes.
  const std::int64_t dims[][2] = {{16, 16}, {64, 64}, {80, 80}, {96, 64}, {128, 128}, {256, 256}};
  const std::int64_t heads[][2] = {{12, 2}, {7, 1}, {4, 4}, {8, 1}};
  std::uint64_t seed = 10;
  for (int di = 0; di < 6; ++di)
    for (int k = 0; k < 2; ++k) {
      const auto& hd = heads[(2 * di + k + di / 2) % 4];
      run_case(ctx,
               Case{hd[0], hd[1], dims[di][0], dims[di][1], {{17, 20}, {0, 3}}, DType::kF32,
                    DType::kF32},
               ++seed);
    }
  // Head sizes that are not multiples of 8 (the kernel takes keys' elements in
  // tiles of 8 when the query rows span several vectors; 12 x 25 rows do at
  // every VLEN up to 1024).
  const std::int64_t odd[][2] = {{4, 6}, {36, 20}, {100, 36}};
  for (auto& dm : odd)
    run_case(ctx, Case{12, 1, dm[0], dm[1], {{10, 25}, {0, 3}}, DType::kBF16, DType::kBF16},
             ++seed);
}

RVVK_TEST(extend_attention_lengths) {
  // Every prefix length {0, 1, 17, 255, 256, 257} with several extend lengths
  // {1, 2, 17, 31, 32, 33, 100}, in two mixed batches (each with an empty request).
  const std::vector<Req> a = {{0, 1},    {1, 2},    {17, 17}, {255, 31},
                              {256, 32}, {257, 33}, {0, 100}, {3, 0}};
  const std::vector<Req> b = {{256, 17}, {0, 0},   {0, 33},  {257, 1},
                              {17, 100}, {1, 31}, {255, 2}, {0, 32}};
  std::uint64_t seed = 100;
  run_case(ctx, Case{2, 1, 16, 16, a, DType::kBF16, DType::kBF16}, ++seed);
  run_case(ctx, Case{3, 1, 16, 24, b, DType::kBF16, DType::kBF16, 0, 0, false, true, true}, ++seed);
  run_case(ctx, Case{2, 2, 24, 16, b, DType::kF32, DType::kF32, 0, 0, false, false}, ++seed);
  run_case(ctx, Case{2, 1, 16, 16, a, DType::kF16, DType::kI8, 0, 100, true, false, true}, ++seed);
}

RVVK_TEST(extend_attention_dtypes) {
  // Every activation dtype with every cache dtype; int32 and int64 req_to_token.
  const DType act[] = {DType::kF32, DType::kBF16, DType::kF16};
  const DType kv[] = {DType::kF32,     DType::kBF16,    DType::kF16,
                      DType::kFP8E4M3, DType::kFP8E5M2, DType::kI8};
  std::uint64_t seed = 200;
  bool r2t64 = false;
  for (DType ad : act)
    for (DType kd : kv) {
      run_case(ctx,
               Case{4, 2, 48, 40, {{40, 10}, {0, 5}, {20, 3}}, ad, kd, 0, 0, false, true, r2t64},
               ++seed);
      r2t64 = !r2t64;
    }
}

RVVK_TEST(extend_attention_quantised_caches) {
  std::uint64_t seed = 250;
  run_case(ctx, Case{12, 2, 128, 128, {{77, 10}, {300, 1}}, DType::kBF16, DType::kFP8E4M3}, ++seed);
  run_case(ctx, Case{4, 2, 64, 64, {{77, 10}, {300, 2}}, DType::kF16, DType::kFP8E5M2}, ++seed);
  run_case(ctx, Case{4, 2, 64, 64, {{77, 10}, {300, 2}}, DType::kBF16, DType::kI8}, ++seed);
  run_case(ctx, Case{7, 1, 80, 80, {{5, 35}, {129, 3}}, DType::kBF16, DType::kI8, 20.0f, 50, true},
           ++seed);
}

RVVK_TEST(extend_attention_features) {
  // Windows {none, 1, 5, 64} x {sinks or not} x {causal or not}, the logit cap
  // {none, 1.5, 30} rotating over them, plus every cap with window and sinks.
  // (Tasks with few query rows compute scores by dot products, the others with
  // q transposed: both run here.)
  std::uint64_t seed = 300;
  const std::vector<Req> reqs = {{0, 35}, {20, 33}, {0, 0}, {70, 3}};
  const float caps[] = {0.0f, 1.5f, 30.0f};
  int n = 0;
  for (std::int64_t window : {0, 1, 5, 64})
    for (int mode = 0; mode < 4; ++mode, ++n)
      run_case(ctx,
               Case{3, 1, 16, 16, reqs, DType::kBF16, DType::kBF16, caps[n % 3], window,
                    (mode & 1) != 0, (mode & 2) == 0},
               ++seed);
  for (float cap : caps)
    run_case(ctx, Case{6, 2, 32, 32, reqs, DType::kBF16, DType::kBF16, cap, 5, true, true}, ++seed);
  // One head per group and D = 64: the blocks of 32 tokens take the
  // transposed-q path and the tails of up to 6 tokens the dot-product path, at
  // every VLEN.
  const std::vector<Req> tails = {{0, 34}, {20, 6}, {0, 0}, {70, 3}};
  n = 0;
  for (std::int64_t window : {0, 5})
    for (int mode = 0; mode < 4; ++mode, ++n)
      run_case(ctx,
               Case{2, 2, 64, 64, tails, DType::kBF16, DType::kBF16, caps[n % 3], window,
                    (mode & 1) != 0, (mode & 2) == 0},
               ++seed);
}

RVVK_TEST(extend_attention_mla_shape) {
  run_case(ctx, Case{16, 1, 576, 512, {{20, 9}, {0, 2}}, DType::kBF16, DType::kBF16}, 400);
}

RVVK_TEST(extend_attention_bf16_blocks) {
  // bf16 q with a bf16 cache at head sizes that are multiples of 32 (the
  // x86_amx variant's tile path; the others run their usual path): prefixes
  // around the 64-key blocks, extends around the 32-token tasks, query rows
  // per task not a multiple of the 16-row tiles (GQA 6 and 7), and the
  // features that act on the scores.
  const std::vector<Req> reqs = {{0, 1},  {1, 31}, {63, 32}, {64, 33},
                                 {65, 2}, {0, 0},  {130, 70}, {0, 97}};
  std::uint64_t seed = 500;
  run_case(ctx, Case{12, 2, 128, 128, reqs, DType::kBF16, DType::kBF16}, ++seed);
  run_case(ctx, Case{7, 1, 64, 96, reqs, DType::kBF16, DType::kBF16, 0, 0, false, false}, ++seed);
  run_case(ctx, Case{6, 3, 96, 64, reqs, DType::kBF16, DType::kBF16, 30.0f, 40, true, true, true},
           ++seed);
  run_case(ctx, Case{5, 5, 32, 32, reqs, DType::kBF16, DType::kBF16, 0, 1, false, true}, ++seed);
  // The same tasks over other cache contents just before: one request and KV
  // head, so every task of both calls reads the same whole block of 128 keys.
  Case again{6, 1, 128, 128, {{200, 40}}, DType::kBF16, DType::kBF16};
  again.rerun = true;
  run_case(ctx, again, ++seed);
  // Per-tensor cache scales (the x86_amx variant leaves these to the fp32 path).
  run_case(ctx,
           Case{12, 2, 128, 128, reqs, DType::kBF16, DType::kBF16, 0, 0, false, true, false, true},
           ++seed);
  run_case(ctx, Case{4, 2, 64, 64, reqs, DType::kF32, DType::kF32, 0, 0, false, true, true, true},
           ++seed);
}

RVVK_TEST(extend_attention_softmax_exp_range) {
  // The softmax's exp over its whole range: each head's query token sees three keys with
  // scores 0 (cached), -x (cached) and 0 (its own) and value rows e0, e1 and e2, so
  // output element 1 is exp(-x) / (2 + exp(-x)) and exp's relative error shows in it
  // directly. x from 0 to 100 in steps of 1/16 plus points around the cut-off, where
  // exp(-x) is below fp32's normal range (x > 87.33654) the kernels give exactly 0.
  // Many heads of one KV head (q transposed) and 3 heads (dot products).
  constexpr std::int64_t d = 16;
  const std::vector<double> xs = rvvk_test::exp_range_points();
  for (std::int64_t heads : {48, 3}) {
    for (std::size_t x0 = 0; x0 < xs.size(); x0 += static_cast<std::size_t>(heads)) {
      std::vector<float> cache_k(3 * d, 0.0f), cache_v(3 * d, 0.0f);
      cache_k[1 * d + 0] = 1.0f;  // row 1 (position 0): key e0, value e0
      cache_v[1 * d + 0] = 1.0f;
      cache_k[2 * d + 1] = 1.0f;  // row 2 (position 1): key e1, value e1
      cache_v[2 * d + 1] = 1.0f;
      std::vector<float> k(d, 0.0f), v(d, 0.0f);  // the new token: key e0, value e2
      k[0] = 1.0f;
      v[2] = 1.0f;
      std::vector<float> q(static_cast<std::size_t>(heads * d), 0.0f);
      std::vector<float> o(static_cast<std::size_t>(heads * d), -1.0f);
      for (std::int64_t h = 0; h < heads; ++h)
        q[static_cast<std::size_t>(h * d + 1)] =
            -static_cast<float>(xs[std::min(xs.size() - 1, x0 + static_cast<std::size_t>(h))]);
      const std::int64_t r2t[2] = {1, 2}, pool[1] = {0}, lens[1] = {3}, ext[1] = {1}, loc[1] = {0};
      rvvk::ExtendAttentionArgs a;
      a.batch = 1;
      a.num_heads = heads;
      a.num_kv_heads = 1;
      a.head_dim = a.head_dim_v = d;
      a.max_extend_len = 1;
      a.dtype = DType::kF32;
      a.q = q.data();
      a.q_stride_t = heads * d;
      a.q_stride_h = d;
      a.k = k.data();
      a.v = v.data();
      a.k_stride_t = a.k_stride_h = a.v_stride_t = a.v_stride_h = d;
      a.o = o.data();
      a.o_stride_t = heads * d;
      a.o_stride_h = d;
      a.cache.dtype = DType::kF32;
      a.cache.k = cache_k.data();
      a.cache.v = cache_v.data();
      a.cache.k_stride_t = a.cache.k_stride_h = a.cache.v_stride_t = a.cache.v_stride_h = d;
      a.cache.req_to_token = r2t;
      a.cache.req_to_token_int64 = true;
      a.cache.req_to_token_stride = 2;
      a.req_pool_indices = pool;
      a.seq_lens = lens;
      a.extend_seq_lens = ext;
      a.extend_start_loc = loc;
      a.sm_scale = 1.0f;
      rvvk::extend_attention(a, 0, rvvk::extend_attention_tasks(a));
      for (std::int64_t h = 0; h < heads && x0 + static_cast<std::size_t>(h) < xs.size(); ++h) {
        rvvk_test::check_exp_range_row(ctx, static_cast<long long>(heads),
                                       xs[x0 + static_cast<std::size_t>(h)], o.data() + h * d);
      }
    }
  }
}
