// Extend attention on AVX512-BF16 (x86_avx512_bf16): bf16 q over a bf16 cache
// takes the bf16 matrix path with vdpbf16ps tile products; the rest the
// generic fp32 path.
#pragma once

#include "../generic/extend_attention_fp32_products.h"
#include "extend_attention_bf16mm_layout.h"
#include "extend_attention_tiles_dpbf16.h"
#include "extend_attention_bf16mm_task.h"
