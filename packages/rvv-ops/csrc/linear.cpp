// sgl_kernel::convert_weight_packed, weight_packed_linear, per_token_quant_int8_cpu,
// int8_scaled_mm_cpu and int8_scaled_mm_with_quant on rvv-kernels' linear kernels.
//
// A packed weight is a tensor of the weight's dtype and shape [N, X]: its bytes hold
// rvvk::PackedWeightHeader (magic, version, dtype, N, K, panel width chosen from the
// packing CPU's VLEN, size) and the panels. Keeping dim 0 = N and the dtype lets SGLang's
// shape logic (its fake kernels read mat2.shape[0]) work unchanged. The ops read the
// header and refuse (ValueError) a tensor whose header does not match it or the inputs.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

// Multiply-adds per thread task below which threading costs more than it saves.
constexpr std::int64_t kMinMacsPerTask = 1 << 18;

rvvk::DType weight_dtype(const char* op, const char* arg, const at::Tensor& t, bool allow_int8,
                         bool allow_float) {
  const at::ScalarType st = t.scalar_type();
  if (allow_float && (st == at::kFloat || st == at::kBFloat16 || st == at::kHalf)) {
    return kernel_dtype(op, arg, t);
  }
  if (allow_int8 && st == at::kChar) return rvvk::DType::kI8;
  TORCH_CHECK_TYPE(false, op, ": ", arg, " has dtype ", dtype_name(st), "; expected ",
                   allow_float && allow_int8 ? "torch.float32, torch.bfloat16, torch.float16 "
                                               "or torch.int8"
                   : allow_float             ? "torch.float32, torch.bfloat16 or torch.float16"
                                             : "torch.int8");
  return rvvk::DType::kF32;
}

rvvk::DType float_dtype(at::ScalarType st) {
  return st == at::kFloat ? rvvk::DType::kF32
         : st == at::kBFloat16 ? rvvk::DType::kBF16
                               : rvvk::DType::kF16;
}

void check_2d(const char* op, const char* arg, const at::Tensor& t, const char* what) {
  check_cpu(op, arg, t);
  TORCH_CHECK_VALUE(t.dim() == 2, op, ": ", arg, " is ", t.dim(), "-d (", describe(t),
                    "); expected a 2-D tensor ", what);
}

// Row stride of a 2-D tensor with a contiguous last dimension; else a contiguous copy.
std::int64_t rows_of(at::Tensor& t) {
  if (t.size(1) > 1 && t.stride(1) != 1) t = t.contiguous();
  return t.size(0) > 1 ? t.stride(0) : t.size(1);
}

// Elements of the packed tensor [n, x] for a header: x = ceil(bytes / (n * elem)).
std::int64_t packed_cols(const rvvk::PackedWeightHeader& h, std::int64_t elem) {
  const std::int64_t row = h.n * elem;
  return (h.bytes + row - 1) / row;
}

at::Tensor pack(const char* op, const at::Tensor& weight, rvvk::DType dt) {
  at::Tensor w = weight;
  const std::int64_t stride = rows_of(w);
  rvvk::PackedWeightHeader h;
  rvvk::pack_weight_layout(dt, w.size(0), w.size(1), &h);
  // Zeros: the bytes past the panels (up to the end of the last row) are defined too.
  at::Tensor out = at::zeros({h.n, packed_cols(h, w.element_size())}, w.options());
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(out.data_ptr()) % 4 == 0, op,
              ": internal error: misaligned allocation");
  rvvk::pack_weight(h, w.data_ptr(), stride, out.data_ptr());
  return out;
}

void check_weight_dims(const char* op, const char* arg, const at::Tensor& w) {
  check_2d(op, arg, w, "[N, K] (output channels x input channels)");
  TORCH_CHECK_VALUE(w.size(0) > 0 && w.size(1) > 0, op, ": ", arg, " (", describe(w),
                    ") is empty; expected N >= 1 and K >= 1");
}

// The header of a packed weight, checked against the tensor holding it and the inputs.
rvvk::PackedWeightHeader packed_header(const char* op, const char* arg, const at::Tensor& w,
                                       rvvk::DType dt, std::int64_t k) {
  check_2d(op, arg, w, "packed by convert_weight_packed");
  const char* hint = "; pass a tensor returned by convert_weight_packed, or is_vnni=False with "
                     "a plain [N, K] weight";
  TORCH_CHECK_VALUE(w.is_contiguous() && reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 4 == 0,
                    op, ": ", arg, " (", describe(w),
                    ") is not contiguous or not 4-byte aligned; expected the tensor returned by "
                    "convert_weight_packed");
  const std::int64_t nbytes = w.numel() * static_cast<std::int64_t>(w.element_size());
  TORCH_CHECK_VALUE(nbytes >= rvvk::kPackedWeightHeaderBytes, op, ": ", arg, " (", describe(w),
                    ") holds ", nbytes, " bytes, too few for a packed weight", hint);
  rvvk::PackedWeightHeader h;
  std::memcpy(&h, w.data_ptr(), sizeof h);
  TORCH_CHECK_VALUE(h.magic == rvvk::kPackedWeightMagic, op, ": ", arg, " (", describe(w),
                    ") does not start with a packed-weight header", hint);
  TORCH_CHECK_VALUE(h.version == rvvk::kPackedWeightVersion, op, ": ", arg,
                    " was packed in format version ", h.version, "; this build reads version ",
                    rvvk::kPackedWeightVersion, " (re-pack the weight)");
  const std::int64_t elem = rvvk::packed_element_bytes(dt);
  const bool layout_ok =
      h.layout == (dt == rvvk::DType::kBF16 ? rvvk::PackedLayout::kPairs
                                            : rvvk::PackedLayout::kRows);
  TORCH_CHECK_VALUE(
      h.dtype == dt && layout_ok && h.n == w.size(0) && h.k >= 1 && h.panel >= 1 &&
          h.k_padded == h.k + (h.k & 1) &&
          h.bytes == rvvk::kPackedWeightHeaderBytes +
                         rvvk::linear_tasks(h) * h.panel * h.k_padded * elem &&
          h.bytes <= nbytes,
      op, ": ", arg, " (", describe(w), ") has an inconsistent packed-weight header (n=", h.n,
      ", k=", h.k, ", panel=", h.panel, ", bytes=", h.bytes, ", dtype code ",
      static_cast<int>(h.dtype), "); it was changed after convert_weight_packed or is not one");
  TORCH_CHECK_VALUE(h.k == k, op, ": ", arg, " was packed for K = ", h.k,
                    " input channels; expected mat1.size(1) = ", k);
  return h;
}

std::optional<at::Tensor> checked_bias(const char* op, const std::optional<at::Tensor>& bias,
                                       std::int64_t n) {
  if (!bias) return std::nullopt;
  check_cpu(op, "bias", *bias);
  kernel_dtype(op, "bias", *bias);
  TORCH_CHECK_VALUE(bias->numel() == n && (bias->dim() == 1 || (bias->dim() == 2 && bias->size(0) == 1)),
                    op, ": bias (", describe(*bias), ") does not have N = ", n,
                    " elements as [N] or [1, N]");
  return bias->contiguous();
}

// A per-row or per-channel fp32 scale vector: [len] or [len, 1].
at::Tensor checked_scales(const char* op, const char* arg, const at::Tensor& s,
                          std::int64_t len, const char* what) {
  check_cpu(op, arg, s);
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                   dtype_name(s.scalar_type()), "; expected torch.float32");
  TORCH_CHECK_VALUE(s.numel() == len && (s.dim() == 1 || (s.dim() == 2 && s.size(1) == 1)), op,
                    ": ", arg, " (", describe(s), ") does not have ", len,
                    " elements as [", len, "] or [", len, ", 1] (", what, ")");
  return s.contiguous();
}

rvvk::DType out_kernel_dtype(const char* op, at::ScalarType st) {
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kBFloat16 || st == at::kHalf, op,
                   ": out_dtype is ", dtype_name(st),
                   "; expected torch.float32, torch.bfloat16 or torch.float16");
  return float_dtype(st);
}

template <class Fn>
void parallel_panels(const rvvk::PackedWeightHeader& h, std::int64_t m, const Fn& fn) {
  const std::int64_t tasks = rvvk::linear_tasks(h);
  const std::int64_t macs = std::max<std::int64_t>(1, m * h.k * h.panel);
  const std::int64_t grain = std::max<std::int64_t>(1, kMinMacsPerTask / macs);
  at::parallel_for(0, tasks, grain, fn);
}

// int8 GEMM of a [M, K] int8 tensor with row stride a_stride and its row scales.
at::Tensor int8_mm(const char* op, const at::Tensor& a, std::int64_t a_stride,
                   const at::Tensor& a_scales, const at::Tensor& mat2,
                   const at::Tensor& scales2, const std::optional<at::Tensor>& bias,
                   at::ScalarType out_dtype, bool is_vnni) {
  const rvvk::DType odt = out_kernel_dtype(op, out_dtype);
  weight_dtype(op, "mat2", mat2, true, false);
  at::Tensor packed = is_vnni ? mat2 : at::Tensor();
  if (!is_vnni) {
    check_weight_dims(op, "mat2", mat2);
    TORCH_CHECK_VALUE(mat2.size(1) == a.size(1), op, ": mat2 (", describe(mat2), ") has K = ",
                      mat2.size(1), "; expected mat1.size(1) = ", a.size(1));
    packed = pack(op, mat2, rvvk::DType::kI8);
  }
  const rvvk::PackedWeightHeader h =
      packed_header(op, "mat2", packed, rvvk::DType::kI8, a.size(1));
  const at::Tensor ws = checked_scales(op, "scales2", scales2, h.n, "one per output channel");
  const std::optional<at::Tensor> b = checked_bias(op, bias, h.n);
  at::Tensor out = at::empty({a.size(0), h.n}, a.options().dtype(out_dtype));
  if (a.size(0) == 0) return out;
  rvvk::Int8LinearArgs args;
  args.m = a.size(0);
  args.a = static_cast<const std::int8_t*>(a.data_ptr());
  args.a_stride = a_stride;
  args.a_scales = a_scales.data_ptr<float>();
  args.packed = packed.data_ptr();
  args.w_scales = ws.data_ptr<float>();
  if (b) {
    args.bias_dtype = float_dtype(b->scalar_type());
    args.bias = b->data_ptr();
  }
  args.out_dtype = odt;
  args.out = out.data_ptr();
  args.out_stride = h.n;
  parallel_panels(h, args.m, [&](std::int64_t begin, std::int64_t end) {
    rvvk::int8_linear(args, begin, end);
  });
  return out;
}

}  // namespace

at::Tensor convert_weight_packed(const at::Tensor& weight) {
  const char* op = "convert_weight_packed";
  check_weight_dims(op, "weight", weight);
  return pack(op, weight, weight_dtype(op, "weight", weight, true, true));
}

std::int64_t packed_weight_cols(std::int64_t n, std::int64_t k, at::ScalarType dtype) {
  const char* op = "packed_weight_cols";
  TORCH_CHECK_VALUE(n > 0 && k > 0, op, ": n = ", n, ", k = ", k, "; expected both >= 1");
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const rvvk::DType dt = weight_dtype(op, "dtype", probe, true, true);
  rvvk::PackedWeightHeader h;
  rvvk::pack_weight_layout(dt, n, k, &h);
  return packed_cols(h, rvvk::packed_element_bytes(dt));
}

at::Tensor weight_packed_linear(const at::Tensor& mat1, const at::Tensor& mat2,
                                const std::optional<at::Tensor>& bias, bool is_vnni) {
  const char* op = "weight_packed_linear";
  check_2d(op, "mat1", mat1, "[M, K] (SGLang flattens leading dimensions first)");
  const rvvk::DType xdt = kernel_dtype(op, "mat1", mat1);
  check_cpu(op, "mat2", mat2);
  const rvvk::DType wdt = weight_dtype(op, "mat2", mat2, false, true);
  TORCH_CHECK_VALUE(mat1.size(1) > 0, op, ": mat1 (", describe(mat1),
                    ") has K = 0; expected K >= 1");
  at::Tensor packed = mat2;
  if (!is_vnni) {
    check_weight_dims(op, "mat2", mat2);
    TORCH_CHECK_VALUE(mat2.size(1) == mat1.size(1), op, ": mat2 (", describe(mat2),
                      ") has K = ", mat2.size(1), "; expected mat1.size(1) = ", mat1.size(1));
    packed = pack(op, mat2, wdt);
  }
  const rvvk::PackedWeightHeader h = packed_header(op, "mat2", packed, wdt, mat1.size(1));
  const std::optional<at::Tensor> b = checked_bias(op, bias, h.n);
  at::Tensor x = mat1;
  const std::int64_t x_stride = rows_of(x);
  at::Tensor out = at::empty({x.size(0), h.n}, x.options());
  if (x.size(0) == 0) return out;
  rvvk::LinearArgs args;
  args.m = x.size(0);
  args.x_dtype = xdt;
  args.x = x.data_ptr();
  args.x_stride = x_stride;
  args.packed = packed.data_ptr();
  if (b) {
    args.bias_dtype = float_dtype(b->scalar_type());
    args.bias = b->data_ptr();
  }
  args.out_dtype = xdt;
  args.out = out.data_ptr();
  args.out_stride = h.n;
  parallel_panels(h, args.m, [&](std::int64_t begin, std::int64_t end) {
    rvvk::linear(args, begin, end);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> per_token_quant_int8_cpu(const at::Tensor& A) {
  const char* op = "per_token_quant_int8_cpu";
  check_2d(op, "A", A, "[M, K]");
  const rvvk::DType dt = kernel_dtype(op, "A", A);
  at::Tensor x = A;
  const std::int64_t stride = rows_of(x);
  const std::int64_t m = x.size(0), k = x.size(1);
  at::Tensor q = at::empty({m, k}, x.options().dtype(at::kChar));
  at::Tensor s = at::empty({m}, x.options().dtype(at::kFloat));
  if (m == 0) return {q, s};
  parallel_rows(m, k, [&](std::int64_t begin, std::int64_t end) {
    rvvk::quantize_int8_rows(dt, row_ptr(x, stride, begin), stride, end - begin, k,
                             static_cast<std::int8_t*>(q.data_ptr()) + begin * k, k,
                             s.data_ptr<float>() + begin);
  });
  return {q, s};
}

at::Tensor int8_scaled_mm_cpu(const at::Tensor& mat1, const at::Tensor& mat2,
                              const at::Tensor& scales1, const at::Tensor& scales2,
                              const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                              bool is_vnni) {
  const char* op = "int8_scaled_mm_cpu";
  check_2d(op, "mat1", mat1, "[M, K] of int8");
  weight_dtype(op, "mat1", mat1, true, false);
  check_cpu(op, "mat2", mat2);
  TORCH_CHECK_VALUE(mat1.size(1) > 0, op, ": mat1 (", describe(mat1),
                    ") has K = 0; expected K >= 1");
  const at::Tensor s1 = checked_scales(op, "scales1", scales1, mat1.size(0), "one per row of mat1");
  at::Tensor a = mat1;
  const std::int64_t stride = rows_of(a);
  return int8_mm(op, a, stride, s1, mat2, scales2, bias, out_dtype, is_vnni);
}

at::Tensor int8_scaled_mm_with_quant(const at::Tensor& mat1, const at::Tensor& mat2,
                                     const at::Tensor& scales2,
                                     const std::optional<at::Tensor>& bias,
                                     at::ScalarType out_dtype, bool is_vnni) {
  const char* op = "int8_scaled_mm_with_quant";
  check_2d(op, "mat1", mat1, "[M, K] (SGLang flattens leading dimensions first)");
  kernel_dtype(op, "mat1", mat1);
  check_cpu(op, "mat2", mat2);
  TORCH_CHECK_VALUE(mat1.size(1) > 0, op, ": mat1 (", describe(mat1),
                    ") has K = 0; expected K >= 1");
  // Validate the weight side before quantising, so bad arguments fail fast.
  weight_dtype(op, "mat2", mat2, true, false);
  out_kernel_dtype(op, out_dtype);
  auto [q, s] = per_token_quant_int8_cpu(mat1);
  return int8_mm(op, q, mat1.size(1), s, mat2, scales2, bias, out_dtype, is_vnni);
}

}  // namespace rvv_ops
