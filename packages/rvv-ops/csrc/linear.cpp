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
#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>

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
  TORCH_CHECK_VALUE(w.sym_size(0) > 0 && w.sym_size(1) > 0, op, ": ", arg, " (", describe(w),
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

// bias: None, or N floats as [N] or [1, N].
void check_bias(const char* op, const std::optional<at::Tensor>& bias, const c10::SymInt& n) {
  if (!bias) return;
  kernel_dtype(op, "bias", *bias);
  TORCH_CHECK_VALUE(bias->sym_numel() == n &&
                        (bias->dim() == 1 || (bias->dim() == 2 && bias->sym_size(0) == 1)),
                    op, ": bias (", describe(*bias), ") does not have N = ", n,
                    " elements as [N] or [1, N]");
}

// A per-row or per-channel fp32 scale vector: [len] or [len, 1].
void check_scales(const char* op, const char* arg, const at::Tensor& s, const c10::SymInt& len,
                  const char* what) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                   dtype_name(s.scalar_type()), "; expected torch.float32");
  TORCH_CHECK_VALUE(s.sym_numel() == len && (s.dim() == 1 || (s.dim() == 2 && s.sym_size(1) == 1)),
                    op, ": ", arg, " (", describe(s), ") does not have ", len, " elements as [",
                    len, "] or [", len, ", 1] (", what, ")");
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

// Every tensor argument of a linear op on the CPU.
void check_all_cpu(const char* op,
                   std::initializer_list<std::pair<const char*, const at::Tensor*>> args,
                   const std::optional<at::Tensor>& bias) {
  for (const auto& [arg, t] : args) check_cpu(op, arg, *t);
  if (bias) check_cpu(op, "bias", *bias);
}

// The weight side shared by the ops: mat2 (`wdt`: its allowed dtype) packed (is_vnni) or
// plain [N, K] with K = mat1.size(1), then bias [N]. Shared with the Meta kernels.
void check_weight_side(const char* op, const at::Tensor& mat1, const at::Tensor& mat2,
                       bool int8, const std::optional<at::Tensor>& bias, bool is_vnni) {
  check_same_device(op, "mat2", mat2, "mat1", mat1);
  if (bias) check_same_device(op, "bias", *bias, "mat1", mat1);
  weight_dtype(op, "mat2", mat2, int8, !int8);
  if (is_vnni) {
    check_2d(op, "mat2", mat2, "packed by convert_weight_packed");
  } else {
    check_weight_dims(op, "mat2", mat2);
    TORCH_CHECK_VALUE(mat2.sym_size(1) == mat1.sym_size(1), op, ": mat2 (", describe(mat2),
                      ") has K = ", mat2.sym_size(1), "; expected mat1.size(1) = ",
                      mat1.sym_size(1));
  }
}

// mat1 [M, K] of float activations (`int8`: of int8), K >= 1.
void check_mat1(const char* op, const at::Tensor& mat1, bool int8) {
  check_2d(op, "mat1", mat1,
           int8 ? "[M, K] of int8" : "[M, K] (SGLang flattens leading dimensions first)");
  if (int8) {
    weight_dtype(op, "mat1", mat1, true, false);
  } else {
    kernel_dtype(op, "mat1", mat1);
  }
  TORCH_CHECK_VALUE(mat1.sym_size(1) > 0, op, ": mat1 (", describe(mat1),
                    ") has K = 0; expected K >= 1");
}

// The checks of int8_scaled_mm_cpu (scales1 given) and int8_scaled_mm_with_quant (not).
void check_int8_mm(const char* op, const at::Tensor& mat1, const at::Tensor& mat2,
                   const at::Tensor* scales1, const at::Tensor& scales2,
                   const std::optional<at::Tensor>& bias, at::ScalarType out_dtype, bool is_vnni) {
  check_mat1(op, mat1, scales1 != nullptr);
  if (scales1 != nullptr) {
    check_same_device(op, "scales1", *scales1, "mat1", mat1);
    check_scales(op, "scales1", *scales1, mat1.sym_size(0), "one per row of mat1");
  }
  check_same_device(op, "scales2", scales2, "mat1", mat1);
  out_kernel_dtype(op, out_dtype);
  check_weight_side(op, mat1, mat2, true, bias, is_vnni);
  check_scales(op, "scales2", scales2, mat2.sym_size(0), "one per output channel");
  check_bias(op, bias, mat2.sym_size(0));
}

// mat2 as a packed weight (packed here when !is_vnni) and its header, checked against K.
std::pair<at::Tensor, rvvk::PackedWeightHeader> packed_weight(const char* op,
                                                              const at::Tensor& mat2,
                                                              rvvk::DType dt, std::int64_t k,
                                                              bool is_vnni) {
  const at::Tensor packed = is_vnni ? mat2 : pack(op, mat2, dt);
  return {packed, packed_header(op, "mat2", packed, dt, k)};
}

// The fields rvvk::LinearArgs and Int8LinearArgs share: the packed weight, the bias
// (contiguous, after check_bias; undefined: none) and out [M, N] (contiguous).
template <class Args>
void set_weight_and_output(Args& args, const at::Tensor& packed, const at::Tensor& bias,
                           const at::Tensor& out) {
  args.packed = packed.data_ptr();
  if (bias.defined()) {
    args.bias_dtype = float_dtype(bias.scalar_type());
    args.bias = bias.data_ptr();
  }
  args.out_dtype = float_dtype(out.scalar_type());
  args.out = out.data_ptr();
  args.out_stride = out.size(1);
}

// int8 GEMM of a [M, K] int8 tensor with row stride a_stride and its row scales, after
// check_int8_mm.
at::Tensor int8_mm(const char* op, const at::Tensor& a, std::int64_t a_stride,
                   const at::Tensor& a_scales, const at::Tensor& mat2,
                   const at::Tensor& scales2, const std::optional<at::Tensor>& bias,
                   at::ScalarType out_dtype, bool is_vnni) {
  const auto [packed, h] = packed_weight(op, mat2, rvvk::DType::kI8, a.size(1), is_vnni);
  const at::Tensor ws = scales2.contiguous();
  const at::Tensor b = bias ? bias->contiguous() : at::Tensor();
  at::Tensor out = at::empty({a.size(0), h.n}, a.options().dtype(out_dtype));
  if (a.size(0) == 0) return out;
  rvvk::Int8LinearArgs args;
  args.m = a.size(0);
  args.a = static_cast<const std::int8_t*>(a.data_ptr());
  args.a_stride = a_stride;
  args.a_scales = a_scales.data_ptr<float>();
  args.w_scales = ws.data_ptr<float>();
  set_weight_and_output(args, packed, b, out);
  parallel_panels(h, args.m, [&](std::int64_t begin, std::int64_t end) {
    rvvk::int8_linear(args, begin, end);
  });
  return out;
}

// Elements per row of the packed tensor for an [n, k] weight of `dtype` on this CPU.
std::int64_t packed_weight_cols(std::int64_t n, std::int64_t k, at::ScalarType dtype) {
  const at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(dtype));
  const rvvk::DType dt = weight_dtype("convert_weight_packed", "weight", probe, true, true);
  rvvk::PackedWeightHeader h;
  rvvk::pack_weight_layout(dt, n, k, &h);
  return packed_cols(h, rvvk::packed_element_bytes(dt));
}

at::Tensor linear_out_meta(const at::Tensor& mat1, const at::Tensor& mat2,
                           at::ScalarType dtype) {
  return at::empty_symint({mat1.sym_size(0), mat2.sym_size(0)}, mat1.options().dtype(dtype));
}

}  // namespace

at::Tensor convert_weight_packed(bool meta, const at::Tensor& weight) {
  const char* op = "convert_weight_packed";
  if (!meta) check_cpu(op, "weight", weight);
  check_weight_dims(op, "weight", weight);
  const rvvk::DType dt = weight_dtype(op, "weight", weight, true, true);
  if (meta) {
    // The packed width depends on N and K: a traced graph is specialised to them.
    const c10::SymInt n = weight.sym_size(0);
    const std::int64_t cols = packed_weight_cols(
        n.guard_int(__FILE__, __LINE__), weight.sym_size(1).guard_int(__FILE__, __LINE__),
        weight.scalar_type());
    return at::empty_symint({n, cols}, weight.options());
  }
  return pack(op, weight, dt);
}

at::Tensor weight_packed_linear(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                                const std::optional<at::Tensor>& bias, bool is_vnni) {
  const char* op = "weight_packed_linear";
  if (!meta) check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}}, bias);
  check_mat1(op, mat1, false);
  check_weight_side(op, mat1, mat2, false, bias, is_vnni);
  check_bias(op, bias, mat2.sym_size(0));
  if (meta) return linear_out_meta(mat1, mat2, mat1.scalar_type());
  const rvvk::DType xdt = kernel_dtype(op, "mat1", mat1);
  const rvvk::DType wdt = weight_dtype(op, "mat2", mat2, false, true);
  const auto [packed, h] = packed_weight(op, mat2, wdt, mat1.size(1), is_vnni);
  const at::Tensor b = bias ? bias->contiguous() : at::Tensor();
  at::Tensor x = mat1;
  const std::int64_t x_stride = rows_of(x);
  at::Tensor out = at::empty({x.size(0), h.n}, x.options());
  if (x.size(0) == 0) return out;
  rvvk::LinearArgs args;
  args.m = x.size(0);
  args.x_dtype = xdt;
  args.x = x.data_ptr();
  args.x_stride = x_stride;
  set_weight_and_output(args, packed, b, out);
  parallel_panels(h, args.m, [&](std::int64_t begin, std::int64_t end) {
    rvvk::linear(args, begin, end);
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> per_token_quant_int8_cpu(bool meta, const at::Tensor& A) {
  const char* op = "per_token_quant_int8_cpu";
  if (!meta) check_cpu(op, "A", A);
  check_2d(op, "A", A, "[M, K]");
  const rvvk::DType dt = kernel_dtype(op, "A", A);
  if (meta) {
    return {at::empty_symint(A.sym_sizes(), A.options().dtype(at::kChar)),
            at::empty_symint({A.sym_size(0)}, A.options().dtype(at::kFloat))};
  }
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

at::Tensor int8_scaled_mm_cpu(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                              const at::Tensor& scales1, const at::Tensor& scales2,
                              const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                              bool is_vnni) {
  const char* op = "int8_scaled_mm_cpu";
  if (!meta) {
    check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}, {"scales1", &scales1},
                       {"scales2", &scales2}}, bias);
  }
  check_int8_mm(op, mat1, mat2, &scales1, scales2, bias, out_dtype, is_vnni);
  if (meta) return linear_out_meta(mat1, mat2, out_dtype);
  at::Tensor a = mat1;
  const std::int64_t stride = rows_of(a);
  return int8_mm(op, a, stride, scales1.contiguous(), mat2, scales2, bias, out_dtype, is_vnni);
}

at::Tensor int8_scaled_mm_with_quant(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                                     const at::Tensor& scales2,
                                     const std::optional<at::Tensor>& bias,
                                     at::ScalarType out_dtype, bool is_vnni) {
  const char* op = "int8_scaled_mm_with_quant";
  if (!meta) check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}, {"scales2", &scales2}}, bias);
  // Everything is checked before quantising, so bad arguments fail fast.
  check_int8_mm(op, mat1, mat2, nullptr, scales2, bias, out_dtype, is_vnni);
  if (meta) return linear_out_meta(mat1, mat2, out_dtype);
  auto [q, s] = per_token_quant_int8_cpu(false, mat1);
  return int8_mm(op, q, mat1.size(1), s, mat2, scales2, bias, out_dtype, is_vnni);
}

}  // namespace rvv_ops
