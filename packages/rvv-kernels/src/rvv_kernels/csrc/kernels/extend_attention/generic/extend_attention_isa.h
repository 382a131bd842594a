// Extend attention's ISA interface on the vector layer alone (portable, rvv,
// rvv_zvfh, x86_avx512): the generic fp32 products, no bf16 matrix path.
#pragma once

#include "extend_attention_fp32.h"
#include "extend_attention_no_bf16mm.h"

namespace rvvk::RVVK_NS {
namespace {

using generic::pv_block;
using generic::qk_block;
}  // namespace
}  // namespace rvvk::RVVK_NS
