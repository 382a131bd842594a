// Shared by the decode and extend softmax exp-range tests: the points x and the
// check of one head's output when its three keys score 0, -x and 0 and their
// value rows are e0, e1 and e2, so output element 1 is exp(-x) / (2 + exp(-x))
// and the softmax exp's relative error shows in it directly.
#pragma once

#include <cmath>
#include <vector>

#include "harness.h"

namespace rvvk_test {

// x from 0 to 100 in steps of 1/16, plus points around the cut-off (x > 87.33654:
// exp(-x) is below fp32's normal range and the kernels give exactly 0).
inline std::vector<double> exp_range_points() {
  std::vector<double> xs;
  for (int i = 0; i <= 1600; ++i) xs.push_back(i / 16.0);
  for (double x : {87.33, 87.3365, 87.337, 87.5, 87.7, 88.0, 1e4, 1e30}) xs.push_back(x);
  return xs;
}

// out: the head's output row (at least 3 elements), `heads` for the messages.
inline void check_exp_range_row(Context& ctx, long long heads, double x, const float* out) {
  const double e = std::exp(-x), want = e / (2.0 + e), got = out[1];
  if (static_cast<float>(-x) < -87.33654f) {
    CHECK_MSG(got == 0.0, "heads=%lld x=%.9g: got %.9g want exactly 0", heads, x, got);
  } else {
    // exp's polynomial (~1e-7), the fp32 sum and division; an absolute floor where
    // the output itself is subnormal (below 1.2e-38, x > 86.6).
    CHECK_MSG(std::fabs(got - want) <= want * 3e-7 + 1e-43,
              "heads=%lld x=%.9g: got %.9g want %.9g (rel %.3g)", heads, x, got, want,
              std::fabs(got - want) / want);
  }
  for (long long i : {0, 2})
    CHECK_MSG(std::fabs(out[i] - 1.0 / (2.0 + e)) <= 1e-6, "heads=%lld x=%.9g i=%lld: %.9g", heads,
              x, i, static_cast<double>(out[i]));
}

}  // namespace rvvk_test
