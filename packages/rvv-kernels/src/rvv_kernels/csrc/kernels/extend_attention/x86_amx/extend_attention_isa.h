// Extend attention on AMX (x86_amx): bf16 q over a bf16 cache takes the bf16
// matrix path with AMX tile products; the rest the generic fp32 path.
#pragma once

#include "../generic/extend_attention_fp32_products.h"
#include "../x86_avx512_bf16/extend_attention_bf16mm_layout.h"
#include "extend_attention_tiles_amx.h"
#include "../x86_avx512_bf16/extend_attention_bf16mm_task.h"
