// Decode attention's ISA interface on AVX-512 without AVX512-BF16 (x86_avx512).
#pragma once

#include "decode_attention_x86_avx512.h"

namespace rvvk::RVVK_NS {
namespace {

using IsaScratch = x86::Scratch;
template <class TQ, class TKV>
using Products = x86::Products<x86::NoDot, TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
