// Variants without a bf16 matrix path for extend attention: every call takes
// the fp32 path.
#pragma once

#include "../extend_attention_common.h"

namespace rvvk::RVVK_NS {
namespace {

// Runs tasks [task_begin, task_end) on the bf16 matrix path if the variant has
// one and the call qualifies; false (nothing done) otherwise - here always.
inline bool run_bf16mm(const ExtendAttentionArgs& /*a*/, std::int64_t /*task_begin*/,
                       std::int64_t /*task_end*/) {
  return false;
}
}  // namespace
}  // namespace rvvk::RVVK_NS
