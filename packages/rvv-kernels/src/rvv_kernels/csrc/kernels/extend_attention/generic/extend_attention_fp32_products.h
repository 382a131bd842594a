// The generic fp32 products as the variant's qk_block / pv_block (every variant
// but x86_avx2, whose register-blocked forms wrap them; see x86_avx2/).
#pragma once

#include "extend_attention_fp32.h"

namespace rvvk::RVVK_NS {
namespace {

using generic::pv_block;
using generic::qk_block;
}  // namespace
}  // namespace rvvk::RVVK_NS
