// Packed weights of the linear ops (linear.cpp), shared with the mixture-of-experts ops
// (moe.cpp): dtype checks, packing (2-D [N, K] and expert-stacked 3-D [E, N, K]) and the
// checked header of a packed tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "rvvk/rvvk.h"

namespace rvv_ops {

// Multiply-adds per thread task below which threading costs more than it saves.
inline constexpr std::int64_t kMinMacsPerTask = 1 << 18;

// The rvv-kernels dtype of a weight: float (allow_float), int8 (allow_int8) or fp8 e4m3
// (allow_fp8) as the caller allows; TypeError otherwise.
rvvk::DType weight_dtype(const char* op, const char* arg, const at::Tensor& t, bool allow_int8,
                         bool allow_float, bool allow_fp8 = false);
// kF32, kBF16 or kF16 for float32, bfloat16 or float16.
rvvk::DType float_dtype(at::ScalarType st);
// ValueError unless t is 2-D (`what` describes the expected shape).
void check_2d(const char* op, const char* arg, const at::Tensor& t, const char* what);
// Row stride of a 2-D tensor with a contiguous last dimension; else t becomes a contiguous
// copy.
std::int64_t rows_of(at::Tensor& t);
// Elements per row of the packed tensor [n, x] of a header.
std::int64_t packed_cols(const rvvk::PackedWeightHeader& h, std::int64_t elem);
// The same for one expert of a packed [E, n, x] tensor: rounded up so that every expert's
// slice starts 4-byte aligned.
std::int64_t packed3_cols(const rvvk::PackedWeightHeader& h, std::int64_t elem);
// Packs a [N, K] weight into [N, packed_cols] (dtype kept).
at::Tensor pack(const char* op, const at::Tensor& weight, rvvk::DType dt);
// Packs each expert of a [E, N, K] weight: [E, N, packed3_cols], expert e's packed weight
// in slice e.
at::Tensor pack3(const char* op, const at::Tensor& weight, rvvk::DType dt);
// ValueError unless w is a non-empty 2-D [N, K] weight.
void check_weight_dims(const char* op, const char* arg, const at::Tensor& w);
// The header of the 2-D packed tensor w, checked against w and against K = k (ValueError
// when it does not match, naming `arg`).
rvvk::PackedWeightHeader packed_header(const char* op, const char* arg, const at::Tensor& w,
                                       rvvk::DType dt, std::int64_t k);

// The header of a packed int4 weight w (a 2-D [N, X] uint8 tensor as
// convert_weight_packed_scale_zp returns it, or one expert's slice of the 3-D form),
// checked against w (ValueError naming `arg`).
rvvk::PackedInt4Header int4_header(const char* op, const char* arg, const at::Tensor& w);
// SGLang's FP8 block scales [ceil(N / block_n), ceil(K / block_k)] (or [E, ...] of them;
// fp32 or bf16, checked by the caller) as the kernels read them: one fp32 scale per
// (k block, output channel), [ceil(K / block_k), N] (or [E, ...]).
at::Tensor expand_block_scales(const at::Tensor& scales, std::int64_t n, std::int64_t block_n);

}  // namespace rvv_ops
