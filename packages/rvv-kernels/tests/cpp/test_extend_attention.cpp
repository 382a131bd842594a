// Extend attention on the conformance suite's kernel cases (head sizes, GQA
// ratios including 7 and MQA, prefix and extend lengths around the block sizes,
// mixed batches with empty requests over shuffled, strided cache rows, causal
// and not, logit cap, sliding windows, sinks, every cache and activation dtype:
// tests/conformance/kernel_cases.py), compared with the fp64 expected output
// each case file holds; and the softmax's exp read back through the kernel
// over its whole range.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "case_file.h"
#include "exp_range.h"
#include "harness.h"
#include "reference.h"

namespace {

// One case file: the kernel's tasks in uneven ranges, last range first, as a
// thread pool might run them, then compared (rows of no request must stay
// untouched). A case with rerun_k_cache / rerun_v_cache first runs every task
// over those contents in the same buffers: nothing of that call may leak into
// the checked one (the x86_amx variant keeps packed key blocks per thread).
void run_case(rvvk_test::Context& ctx, rvvk_test::CaseFile& f) {
  rvvk::ExtendAttentionArgs a;
  rvvk_test::read_common_args(a, f);
  a.max_extend_len = f.i64("max_extend_len");
  a.dtype = f.dtype("q");
  a.q = f.strided("q", a.q_stride_t, a.q_stride_h);
  a.k = f.strided("k", a.k_stride_t, a.k_stride_h);
  a.v = f.strided("v", a.v_stride_t, a.v_stride_h);
  f.strides("o", a.o_stride_t, a.o_stride_h);
  a.extend_seq_lens = f.ptr<const std::int64_t>("extend_seq_lens", "i64");
  a.extend_start_loc = f.ptr<const std::int64_t>("extend_start_loc", "i64");
  a.causal = f.i64("causal") != 0;
  ref::Buffer o = rvvk_test::nan_output(f);
  a.o = o.data();

  const std::int64_t n = rvvk::extend_attention_tasks(a);
  if (f.has("rerun_k_cache")) {
    std::vector<unsigned char>& k = f.at("k_cache").bytes;
    std::vector<unsigned char>& v = f.at("v_cache").bytes;
    const std::vector<unsigned char> k_bytes = k, v_bytes = v;
    const std::vector<unsigned char>& k_other = f.at("rerun_k_cache").bytes;
    const std::vector<unsigned char>& v_other = f.at("rerun_v_cache").bytes;
    std::copy(k_other.begin(), k_other.end(), k.begin());
    std::copy(v_other.begin(), v_other.end(), v.begin());
    rvvk::extend_attention(a, 0, n);
    std::copy(k_bytes.begin(), k_bytes.end(), k.begin());
    std::copy(v_bytes.begin(), v_bytes.end(), v.begin());
  }
  const std::int64_t cut1 = n / 3, cut2 = std::max(cut1, n - 1);
  rvvk::extend_attention(a, cut2, n);
  rvvk::extend_attention(a, cut1, cut2);
  rvvk::extend_attention(a, 0, cut1);
  rvvk_test::check_output(ctx, f, o, a.o_stride_t, a.o_stride_h, "");
}

}  // namespace

// One test per extend_attention_* group of the case index (the groups and what
// each aims at: tests/conformance/kernel_cases.py).
static const rvvk_test::RegisterCaseGroups extend_groups("extend_attention_", run_case);

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
      a.dtype = rvvk::DType::kF32;
      a.q = q.data();
      a.q_stride_t = heads * d;
      a.q_stride_h = d;
      a.k = k.data();
      a.v = v.data();
      a.k_stride_t = a.k_stride_h = a.v_stride_t = a.v_stride_h = d;
      a.o = o.data();
      a.o_stride_t = heads * d;
      a.o_stride_h = d;
      a.cache.dtype = rvvk::DType::kF32;
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
