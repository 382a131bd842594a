// Input checks and helpers shared by the ops.
//
// Every check names the op, the argument, the value it got and what was expected.
// TORCH_CHECK_TYPE raises TypeError in Python (wrong dtype), TORCH_CHECK_VALUE raises
// ValueError (everything else: device, shape, layout, eps).
//
// Each op checks in two parts. The checks that need only devices, dtypes, shapes and scalars
// are shared by the CPU kernel and the Meta kernel (fake tensors, torch.compile tracing);
// they read sizes as SymInts (sym_size), so they also run on tensors with symbolic shapes.
// The CPU kernel first checks that every tensor is on the CPU, then runs those, then the
// checks of memory layout and of index values, before it writes anything.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "rvvk/rvvk.h"

namespace rvv_ops {

// "shape [4, 8], strides [8, 1], torch.float32" - for error messages.
std::string describe(const at::Tensor& t);
// Python's name of a dtype ("torch.bfloat16", "torch.float8_e4m3fn").
std::string dtype_name(at::ScalarType t);

void check_cpu(const char* op, const char* arg, const at::Tensor& t);
// ValueError unless `t` is on the device of `ref` (named `ref_arg`).
void check_same_device(const char* op, const char* arg, const at::Tensor& t,
                       const char* ref_arg, const at::Tensor& ref);
// The rvv-kernels element type of `t`; TypeError unless fp32, bf16 or fp16.
rvvk::DType kernel_dtype(const char* op, const char* arg, const at::Tensor& t);
// TypeError unless `t` has the dtype of `ref` (named `ref_arg`).
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref);
// `t` is at least 1-D (rows of its last dimension).
void check_has_rows(const char* op, const char* arg, const at::Tensor& t);
// `weight` is 1-D with input.size(-1) elements.
void check_weight_shape(const char* op, const at::Tensor& weight, const char* input_arg,
                        const at::Tensor& input);
void check_eps(const char* op, double eps);

// Layout (CPU kernels only). `t`'s last dimension is contiguous (stride 1, or size <= 1).
void check_last_dim_contiguous(const char* op, const char* arg, const at::Tensor& t);
// `t` is contiguous.
void check_contiguous(const char* op, const char* arg, const at::Tensor& t);

// Number of rows of `t` seen as [rows, t.size(-1)].
std::int64_t num_rows(const at::Tensor& t);
// The element stride between consecutive rows when all dimensions but the last are
// flattened into one, or nullopt if they cannot be addressed with a single stride.
std::optional<std::int64_t> row_stride(const at::Tensor& t);
// A read-only input as rows with one stride: `t` itself when row_stride allows, else a
// contiguous copy (a layout the kernel cannot walk is copied rather than refused).
struct Rows {
  at::Tensor t;
  std::int64_t stride = 0;
};
Rows readable_rows(const at::Tensor& t);
// As row_stride, but ValueError (naming `arg`) when there is no single row stride.
std::int64_t require_row_stride(const char* op, const char* arg, const at::Tensor& t);
// ValueError if two rows of `t` (with row stride `stride`) share memory: it is written.
void check_rows_disjoint(const char* op, const char* arg, const at::Tensor& t,
                         std::int64_t stride);
// ValueError if `a` and `b` (row-strided, strides `sa` and `sb`) may share memory.
void check_no_overlap(const char* op, const char* a_arg, const at::Tensor& a, std::int64_t sa,
                      const char* b_arg, const at::Tensor& b, std::int64_t sb);

// Runs fn(begin, end) over row ranges, in parallel once a task gets enough elements:
// small tensors stay on the calling thread, where threading would cost more than it saves.
template <class F>
void parallel_rows(std::int64_t rows, std::int64_t cols, const F& fn) {
  constexpr std::int64_t kMinElementsPerTask = 32768;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kMinElementsPerTask / std::max<std::int64_t>(cols, 1));
  at::parallel_for(0, rows, grain, fn);
}

// Address of row `row` of a row-strided tensor.
inline char* row_ptr(const at::Tensor& t, std::int64_t stride, std::int64_t row) {
  return static_cast<char*>(t.data_ptr()) +
         row * stride * static_cast<std::int64_t>(t.element_size());
}

}  // namespace rvv_ops
