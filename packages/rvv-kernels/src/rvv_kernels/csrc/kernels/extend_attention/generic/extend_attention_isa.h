// Extend attention's ISA interface on the vector layer alone (portable, rvv,
// rvv_zvfh, x86_avx512): the generic fp32 products, no bf16 matrix path.
#pragma once

#include "extend_attention_fp32_products.h"
#include "extend_attention_no_bf16mm.h"
