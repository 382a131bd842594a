// Decode attention's ISA interface for variants without products of their own
// (portable): the generic forms.
#pragma once

#include "decode_attention_generic.h"

namespace rvvk::RVVK_NS {
namespace {

using IsaScratch = generic::Scratch;
template <class TQ, class TKV>
using Products = generic::Products<TQ, TKV>;
}  // namespace
}  // namespace rvvk::RVVK_NS
