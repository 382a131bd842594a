// Decode attention on the conformance suite's kernel cases (head sizes, GQA
// ratios including 7 and MQA, context lengths 0..4097, mixed batches over
// shuffled cache rows, logit cap, sliding window, sinks, splits, every dtype:
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

// One case file: the kernel run once per split count of the case, its tasks in
// two uneven ranges as a thread pool would hand them out, then compared.
void run_case(rvvk_test::Context& ctx, rvvk_test::CaseFile& f) {
  rvvk::DecodeAttentionArgs a;
  rvvk_test::read_common_args(a, f);
  a.q_dtype = f.dtype("q");
  a.q = f.strided("q", a.q_stride_b, a.q_stride_h);
  a.o_dtype = f.dtype("o_dtype");
  f.strides("o", a.o_stride_b, a.o_stride_h);
  for (std::int64_t splits : f.i64s("splits")) {
    a.num_splits = splits;
    ref::Buffer o = rvvk_test::nan_output(f);
    a.o = o.data();
    std::vector<float> partial(
        static_cast<std::size_t>(a.batch * a.num_heads * splits * (a.head_dim_v + 1)), NAN);
    a.partial = partial.data();
    const std::int64_t np = rvvk::decode_attention_partial_tasks(a);
    rvvk::decode_attention_partial(a, 0, np / 3);
    rvvk::decode_attention_partial(a, np / 3, np);
    const std::int64_t nm = rvvk::decode_attention_merge_tasks(a);
    rvvk::decode_attention_merge(a, 0, nm / 2);
    rvvk::decode_attention_merge(a, nm / 2, nm);
    rvvk_test::check_output(ctx, f, o, a.o_stride_b, a.o_stride_h,
                            rvvk_test::fmt("splits=%lld", (long long)splits));
  }
}

}  // namespace

// One test per decode_attention_* group of the case index (the groups and what
// each aims at: tests/conformance/kernel_cases.py).
static const rvvk_test::RegisterCaseGroups decode_groups("decode_attention_", run_case);

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
