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
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "ops.h"
#include "packed_weight.h"

namespace rvv_ops {

// The helpers packed_weight.h declares (shared with moe.cpp).

// The rvv-kernels dtype of a weight: float (allow_float), int8 (allow_int8) or fp8 e4m3
// (allow_fp8) as the caller allows.
rvvk::DType weight_dtype(const char* op, const char* arg, const at::Tensor& t, bool allow_int8,
                         bool allow_float, bool allow_fp8) {
  const at::ScalarType st = t.scalar_type();
  if (allow_float && (st == at::kFloat || st == at::kBFloat16 || st == at::kHalf)) {
    return kernel_dtype(op, arg, t);
  }
  if (allow_int8 && st == at::kChar) return rvvk::DType::kI8;
  if (allow_fp8 && st == at::kFloat8_e4m3fn) return rvvk::DType::kFP8E4M3;
  std::string expected;
  if (allow_float) expected = "torch.float32, torch.bfloat16, torch.float16";
  if (allow_int8) expected += std::string(expected.empty() ? "" : ", ") + "torch.int8";
  if (allow_fp8) expected += std::string(expected.empty() ? "" : ", ") + "torch.float8_e4m3fn";
  TORCH_CHECK_TYPE(false, op, ": ", arg, " has dtype ", dtype_name(st), "; expected ", expected);
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

std::int64_t packed3_cols(const rvvk::PackedWeightHeader& h, std::int64_t elem) {
  std::int64_t cols = packed_cols(h, elem);
  while (h.n * cols * elem % 4 != 0) ++cols;
  return cols;
}

at::Tensor pack3(const char* op, const at::Tensor& weight, rvvk::DType dt) {
  const std::int64_t experts = weight.size(0), n = weight.size(1), k = weight.size(2);
  rvvk::PackedWeightHeader h;
  rvvk::pack_weight_layout(dt, n, k, &h);
  const std::int64_t cols = packed3_cols(h, weight.element_size());
  at::Tensor out = at::zeros({experts, n, cols}, weight.options());
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(out.data_ptr()) % 4 == 0, op,
              ": internal error: misaligned allocation");
  for (std::int64_t e = 0; e < experts; ++e) {
    at::Tensor w = weight[e];
    const std::int64_t stride = rows_of(w);
    rvvk::pack_weight(h, w.data_ptr(), stride, out[e].data_ptr());
  }
  return out;
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

namespace {

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

// fn(begin, end) over `tasks` weight panels of `panel` channels x k, m rows each, in chunks
// of at least kMinMacsPerTask multiply-adds.
template <class Fn>
void parallel_panels(std::int64_t tasks, std::int64_t k, std::int64_t panel, std::int64_t m,
                     const Fn& fn) {
  const std::int64_t macs = std::max<std::int64_t>(1, m * k * panel);
  const std::int64_t grain = std::max<std::int64_t>(1, kMinMacsPerTask / macs);
  at::parallel_for(0, tasks, grain, fn);
}

template <class Fn>
void parallel_panels(const rvvk::PackedWeightHeader& h, std::int64_t m, const Fn& fn) {
  parallel_panels(rvvk::linear_tasks(h), h.k, h.panel, m, fn);
}

// Every tensor argument of a linear op on the CPU.
void check_all_cpu(const char* op,
                   std::initializer_list<std::pair<const char*, const at::Tensor*>> args,
                   const std::optional<at::Tensor>& bias) {
  for (const auto& [arg, t] : args) check_cpu(op, arg, *t);
  if (bias) check_cpu(op, "bias", *bias);
}

// What a linear op's weight may hold.
enum class WeightKind { kFloat, kInt8, kFp8 };

// The weight side shared by the ops: mat2 (of `kind`) packed (is_vnni) or plain [N, K] with
// K = mat1.size(1), then bias [N]. Shared with the Meta kernels.
void check_weight_side(const char* op, const at::Tensor& mat1, const at::Tensor& mat2,
                       WeightKind kind, const std::optional<at::Tensor>& bias, bool is_vnni) {
  check_same_device(op, "mat2", mat2, "mat1", mat1);
  if (bias) check_same_device(op, "bias", *bias, "mat1", mat1);
  weight_dtype(op, "mat2", mat2, kind == WeightKind::kInt8, kind == WeightKind::kFloat,
               kind == WeightKind::kFp8);
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
  check_weight_side(op, mat1, mat2, WeightKind::kInt8, bias, is_vnni);
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

// The fields the rvvk linear argument structs (LinearArgs, Int8LinearArgs, Int4LinearArgs,
// Fp8LinearArgs) share: the packed weight, the bias (contiguous, after check_bias; undefined:
// none) and out [M, N] (contiguous).
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
  const rvvk::DType dt = weight_dtype("convert_weight_packed", "weight", probe, true, true, true);
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
  if (weight.dim() == 3) {  // expert-stacked MoE weights [E, N, K]: each expert packed
    TORCH_CHECK_VALUE(weight.sym_size(0) > 0 && weight.sym_size(1) > 0 &&
                          weight.sym_size(2) > 0,
                      op, ": weight (", describe(weight),
                      ") is empty; expected [E, N, K] with E, N, K >= 1");
  } else {
    check_weight_dims(op, "weight", weight);
  }
  const rvvk::DType dt = weight_dtype(op, "weight", weight, true, true, true);
  const bool stacked = weight.dim() == 3;
  if (meta) {
    // The packed width depends on N and K: a traced graph is specialised to them.
    const c10::SymInt n = weight.sym_size(stacked ? 1 : 0);
    const std::int64_t nn = n.guard_int(__FILE__, __LINE__);
    const std::int64_t k = weight.sym_size(stacked ? 2 : 1).guard_int(__FILE__, __LINE__);
    if (!stacked) {
      return at::empty_symint({n, packed_weight_cols(nn, k, weight.scalar_type())},
                              weight.options());
    }
    rvvk::PackedWeightHeader h;
    rvvk::pack_weight_layout(dt, nn, k, &h);
    return at::empty_symint({weight.sym_size(0), n, c10::SymInt(packed3_cols(h, weight.element_size()))},
                            weight.options());
  }
  return stacked ? pack3(op, weight, dt) : pack(op, weight, dt);
}

namespace {

at::Tensor weight_packed_linear_2d(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                                   const std::optional<at::Tensor>& bias, bool is_vnni) {
  const char* op = "weight_packed_linear";
  if (!meta) check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}}, bias);
  check_mat1(op, mat1, false);
  check_weight_side(op, mat1, mat2, WeightKind::kFloat, bias, is_vnni);
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

}  // namespace

// mat1 [..., K] as torch's linear takes it: the leading dimensions are flattened into rows
// (a view when mat1's rows are evenly strided, else a copy) and restored on the output.
at::Tensor weight_packed_linear(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                                const std::optional<at::Tensor>& bias, bool is_vnni) {
  TORCH_CHECK_VALUE(mat1.dim() >= 2, "weight_packed_linear: mat1 (", describe(mat1),
                    ") has ", mat1.dim(), " dimensions; expected [..., K] with at least 2");
  if (mat1.dim() == 2) return weight_packed_linear_2d(meta, mat1, mat2, bias, is_vnni);
  const std::int64_t k_dim = mat1.dim() - 1;
  at::Tensor rows = mat1.reshape_symint({-1, mat1.sym_size(k_dim)});
  at::Tensor out = weight_packed_linear_2d(meta, rows, mat2, bias, is_vnni);
  std::vector<c10::SymInt> shape(mat1.sym_sizes().begin(), mat1.sym_sizes().end() - 1);
  shape.push_back(out.sym_size(1));
  return out.view_symint(shape);
}

// Qwen2-MoE's shared-expert gate: out [M, N] = sigmoid(mat1 @ mat2^T + bias) * post_mul_mat,
// mat2 one output channel ([1, K], packed or plain), the gate [M, 1] kept in fp32 (never
// rounded to mat1's dtype), the product rounded once to mat1's dtype.
at::Tensor fused_linear_sigmoid_mul(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                                    const std::optional<at::Tensor>& bias, bool is_vnni,
                                    const at::Tensor& post_mul_mat) {
  const char* op = "fused_linear_sigmoid_mul";
  if (!meta) check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}, {"post_mul_mat", &post_mul_mat}}, bias);
  check_mat1(op, mat1, false);
  check_weight_side(op, mat1, mat2, WeightKind::kFloat, bias, is_vnni);
  TORCH_CHECK_VALUE(mat2.sym_size(0) == 1, op, ": mat2 (", describe(mat2), ") has N = ",
                    mat2.sym_size(0), " output channels; expected 1 (the gate is one value "
                    "per row: [1, K], or its packed form)");
  check_bias(op, bias, mat2.sym_size(0));
  check_same_device(op, "post_mul_mat", post_mul_mat, "mat1", mat1);
  check_same_dtype(op, "post_mul_mat", post_mul_mat, "mat1", mat1);
  check_2d(op, "post_mul_mat", post_mul_mat, "[M, N] (the output the gate scales)");
  TORCH_CHECK_VALUE(post_mul_mat.sym_size(0) == mat1.sym_size(0), op, ": post_mul_mat (",
                    describe(post_mul_mat), ") has ", post_mul_mat.sym_size(0),
                    " rows; expected mat1.size(0) = ", mat1.sym_size(0));
  if (meta) {
    return at::empty_symint({mat1.sym_size(0), post_mul_mat.sym_size(1)}, mat1.options());
  }
  const rvvk::DType xdt = kernel_dtype(op, "mat1", mat1);
  const rvvk::DType wdt = weight_dtype(op, "mat2", mat2, false, true);
  const auto [packed, h] = packed_weight(op, mat2, wdt, mat1.size(1), is_vnni);
  const at::Tensor b = bias ? bias->contiguous() : at::Tensor();
  at::Tensor x = mat1;
  const std::int64_t x_stride = rows_of(x);
  at::Tensor post = post_mul_mat;
  const std::int64_t post_stride = rows_of(post);
  const std::int64_t m = x.size(0), n = post.size(1);
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0) return out;
  // The gate: one fp32 value per row.
  at::Tensor gate = at::empty({m, 1}, x.options().dtype(at::kFloat));
  rvvk::LinearArgs args;
  args.m = m;
  args.x_dtype = xdt;
  args.x = x.data_ptr();
  args.x_stride = x_stride;
  set_weight_and_output(args, packed, b, gate);
  // One output channel: split the rows over threads instead of the (single) panel.
  parallel_rows(m, mat1.size(1) + n, [&](std::int64_t begin, std::int64_t end) {
    rvvk::LinearArgs a = args;
    a.m = end - begin;
    a.x = row_ptr(x, x_stride, begin);
    a.out = gate.data_ptr<float>() + begin;
    rvvk::linear(a, 0, rvvk::linear_tasks(h));
    if (n > 0) {
      rvvk::sigmoid_scale_rows(xdt, row_ptr(out, n, begin), n, row_ptr(post, post_stride, begin),
                               post_stride, gate.data_ptr<float>() + begin, end - begin, n);
    }
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

// ---------------------------------------------------------------------------------------
// Quantised weights: INT4 (AWQ / GPTQ) and FP8 W8A16.
namespace rvv_ops {
namespace {

// SGLang's CPUQuantAlgo.
constexpr std::int64_t kAwq = 0, kGptq = 1;

// AWQ's nibble order: column 8c + j of an int32 word c holds bits [4 * kAwqOrder[j], +4).
constexpr int kAwqOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

void check_int32(const char* op, const char* arg, const at::Tensor& t, const char* what) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, op, ": ", arg, " has dtype ",
                   dtype_name(t.scalar_type()), "; expected torch.int32 (", what, ")");
  TORCH_CHECK_VALUE(t.dim() == 2, op, ": ", arg, " is ", t.dim(), "-d (", describe(t),
                    "); expected a 2-D tensor ", what,
                    " (or, for expert-stacked MoE weights, 3-D with the experts first)");
}

// The shapes of an AWQ / GPTQ checkpoint's int4 tensors, checked.
struct Int4Shape {
  std::int64_t n = 0, k = 0, groups = 0, group_size = 0;
};

Int4Shape int4_shape(const char* op, const at::Tensor& qweight, const at::Tensor& qzeros,
                     const at::Tensor& scales, std::int64_t method) {
  TORCH_CHECK_VALUE(method == kAwq || method == kGptq, op, ": quant_method is ", method,
                    "; expected 0 (AWQ) or 1 (GPTQ)");
  const bool awq = method == kAwq;
  check_int32(op, "qweight", qweight,
              awq ? "AWQ's [K, N / 8] packed nibbles" : "GPTQ's [K / 8, N] packed nibbles");
  check_int32(op, "qzeros", qzeros, "[groups, N / 8] packed zero points");
  kernel_dtype(op, "scales", scales);
  TORCH_CHECK_VALUE(scales.dim() == 2, op, ": scales is ", scales.dim(), "-d (",
                    describe(scales), "); expected [groups, N]");
  Int4Shape s;
  s.k = awq ? qweight.size(0) : qweight.size(0) * 8;
  s.n = awq ? qweight.size(1) * 8 : qweight.size(1);
  s.groups = scales.size(0);
  TORCH_CHECK_VALUE(s.n > 0 && s.k > 0, op, ": qweight (", describe(qweight),
                    ") is empty; expected N >= 8 and K >= 1");
  TORCH_CHECK_VALUE(scales.size(1) == s.n, op, ": scales (", describe(scales), ") has ",
                    scales.size(1), " columns; expected N = ", s.n, " (from qweight ",
                    describe(qweight), ")");
  TORCH_CHECK_VALUE(s.groups >= 1 && s.k % s.groups == 0, op, ": scales (", describe(scales),
                    ") has ", s.groups, " groups, which do not divide K = ", s.k,
                    "; expected K / groups input channels per group");
  s.group_size = s.k / s.groups;
  TORCH_CHECK_VALUE(s.group_size % 2 == 0 || s.groups == 1, op, ": group size K / groups = ",
                    s.k, " / ", s.groups, " = ", s.group_size,
                    " is odd; expected an even group size (or one group)");
  TORCH_CHECK_VALUE(qzeros.size(0) == s.groups && qzeros.size(1) * 8 == s.n, op, ": qzeros (",
                    describe(qzeros), ") does not match [groups, N / 8] = [", s.groups, ", ",
                    s.n / 8, "]");
  return s;
}

// The nibble-per-byte weight q [N, K] and zero points [groups, N] (GPTQ's stored zero + 1,
// as SGLang reads GPTQ checkpoints) of an AWQ / GPTQ checkpoint.
std::pair<at::Tensor, at::Tensor> unpack_int4(const Int4Shape& s, const at::Tensor& qweight,
                                              const at::Tensor& qzeros, std::int64_t method) {
  const at::Tensor qw = qweight.contiguous(), qz = qzeros.contiguous();
  const auto* w = reinterpret_cast<const std::uint32_t*>(qw.data_ptr<std::int32_t>());
  const auto* z = reinterpret_cast<const std::uint32_t*>(qz.data_ptr<std::int32_t>());
  at::Tensor q = at::empty({s.n, s.k}, qweight.options().dtype(at::kByte));
  at::Tensor zeros = at::empty({s.groups, s.n}, qweight.options().dtype(at::kByte));
  std::uint8_t* qd = q.data_ptr<std::uint8_t>();
  std::uint8_t* zd = zeros.data_ptr<std::uint8_t>();
  const bool awq = method == kAwq;
  at::parallel_for(0, s.n, 64, [&](std::int64_t nb, std::int64_t ne) {
    for (std::int64_t j = nb; j < ne; ++j) {
      for (std::int64_t k = 0; k < s.k; ++k) {
        const std::uint32_t word = awq ? w[k * (s.n / 8) + j / 8] : w[(k / 8) * s.n + j];
        const int shift = awq ? 4 * kAwqOrder[j % 8] : 4 * static_cast<int>(k % 8);
        qd[j * s.k + k] = static_cast<std::uint8_t>((word >> shift) & 0xF);
      }
      for (std::int64_t g = 0; g < s.groups; ++g) {
        const std::uint32_t word = z[g * (s.n / 8) + j / 8];
        const int shift = awq ? 4 * kAwqOrder[j % 8] : 4 * static_cast<int>(j % 8);
        zd[g * s.n + j] = static_cast<std::uint8_t>(((word >> shift) & 0xF) + (awq ? 0 : 1));
      }
    }
  });
  return {q, zeros};
}

std::int64_t int4_packed_cols(const rvvk::PackedInt4Header& h) {
  return (h.bytes + h.n - 1) / h.n;
}

// w_zeros (uint8) / w_scales (fp32): [1, groups, N] as convert_weight_packed_scale_zp returns
// them, or [groups, N].
void check_group_table(const char* op, const char* arg, const at::Tensor& t, at::ScalarType st,
                       std::int64_t groups, std::int64_t n) {
  TORCH_CHECK_TYPE(t.scalar_type() == st, op, ": ", arg, " has dtype ",
                   dtype_name(t.scalar_type()), "; expected ", dtype_name(st),
                   " (as convert_weight_packed_scale_zp returns it)");
  const bool shape_ok = (t.dim() == 3 && t.size(0) == 1 && t.size(1) == groups &&
                         t.size(2) == n) ||
                        (t.dim() == 2 && t.size(0) == groups && t.size(1) == n);
  TORCH_CHECK_VALUE(shape_ok, op, ": ", arg, " (", describe(t), ") does not match [1, ", groups,
                    ", ", n, "] (groups x N of the packed weight w)");
}

// x [..., K] as rows [M, K].
at::Tensor rows_2d(const char* op, const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) >= 1, op, ": x (", describe(x),
                    ") has no input channels; expected [..., K] with K >= 1");
  return x.reshape({-1, x.size(-1)});
}

at::Tensor int4_mm(bool meta, const char* op, const at::Tensor& x, const at::Tensor& w,
                   const at::Tensor& w_zeros, const at::Tensor& w_scales,
                   const std::optional<at::Tensor>& bias, bool w4a8) {
  if (!meta) {
    check_all_cpu(op, {{"x", &x}, {"w", &w}, {"w_zeros", &w_zeros}, {"w_scales", &w_scales}},
                  bias);
  }
  const rvvk::DType xdt = kernel_dtype(op, "x", x);
  check_same_device(op, "w", w, "x", x);
  if (bias) check_same_device(op, "bias", *bias, "x", x);
  TORCH_CHECK_VALUE(w_scales.dim() >= 2, op, ": w_scales (", describe(w_scales),
                    ") is not [1, groups, N]");
  if (meta) {
    std::vector<c10::SymInt> sizes(x.sym_sizes().begin(), x.sym_sizes().end());
    TORCH_CHECK_VALUE(!sizes.empty(), op, ": x is 0-d; expected [..., K]");
    sizes.back() = w_scales.sym_size(-1);
    return at::empty_symint(sizes, x.options());
  }
  const rvvk::PackedInt4Header h = int4_header(op, "w", w);
  const std::int64_t groups = rvvk::int4_groups(h);
  check_group_table(op, "w_zeros", w_zeros, at::kByte, groups, h.n);
  check_group_table(op, "w_scales", w_scales, at::kFloat, groups, h.n);
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == h.k, op, ": x (", describe(x), ") has K = ",
                    x.dim() >= 1 ? x.size(-1) : 0, "; the packed weight w was made for K = ",
                    h.k);
  check_bias(op, bias, h.n);
  const at::Tensor zeros = w_zeros.contiguous(), scales = w_scales.contiguous();
  const at::Tensor b = bias ? bias->contiguous() : at::Tensor();
  at::Tensor x2 = rows_2d(op, x);
  std::vector<std::int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  out_sizes.back() = h.n;
  at::Tensor out = at::empty({x2.size(0), h.n}, x.options());
  if (x2.size(0) > 0) {
    rvvk::Int4LinearArgs args;
    args.m = x2.size(0);
    at::Tensor q, qs;
    if (w4a8) {
      std::tie(q, qs) = per_token_quant_int8_cpu(false, x2);
      args.a = static_cast<const std::int8_t*>(q.data_ptr());
      args.a_stride = q.size(1);
      args.a_scales = qs.data_ptr<float>();
    } else {
      args.x_stride = rows_of(x2);
      args.x_dtype = xdt;
      args.x = x2.data_ptr();
    }
    args.scales = scales.data_ptr<float>();
    args.zeros = zeros.data_ptr<std::uint8_t>();
    set_weight_and_output(args, w, b, out);
    parallel_panels(rvvk::int4_linear_tasks(h), h.k, h.panel, args.m,
                    [&](std::int64_t begin, std::int64_t end) {
                      rvvk::int4_linear(args, begin, end);
                    });
  }
  return out.view(out_sizes);
}

}  // namespace

// The header of a packed int4 weight (convert_weight_packed_scale_zp's first result),
// checked against the tensor holding it.
rvvk::PackedInt4Header int4_header(const char* op, const char* arg, const at::Tensor& w) {
  const char* hint = "; pass the first tensor returned by convert_weight_packed_scale_zp";
  TORCH_CHECK_VALUE(w.scalar_type() == at::kByte && w.dim() == 2 && w.is_contiguous() &&
                        reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 4 == 0,
                    op, ": ", arg, " (", describe(w), ") is not a contiguous 4-byte aligned 2-D uint8 "
                    "tensor", hint);
  const std::int64_t nbytes = w.numel();
  TORCH_CHECK_VALUE(nbytes >= rvvk::kPackedWeightHeaderBytes, op, ": ", arg, " (", describe(w),
                    ") holds ", nbytes, " bytes, too few for a packed int4 weight", hint);
  rvvk::PackedInt4Header h;
  std::memcpy(&h, w.data_ptr(), sizeof h);
  TORCH_CHECK_VALUE(h.magic == rvvk::kPackedInt4Magic, op, ": ", arg, " (", describe(w),
                    ") does not start with a packed int4 header", hint);
  TORCH_CHECK_VALUE(h.version == rvvk::kPackedInt4Version, op, ": ", arg, " was packed in int4 format "
                    "version ", h.version, "; this build reads version ",
                    rvvk::kPackedInt4Version, " (re-pack the weight)");
  TORCH_CHECK_VALUE(
      h.n == w.size(0) && h.k >= 1 && h.panel >= 1 && h.group_size >= 1 &&
          h.k_padded == h.k + (h.k & 1) &&
          (h.group_size % 2 == 0 || h.group_size >= h.k) &&
          h.bytes == rvvk::kPackedWeightHeaderBytes +
                         rvvk::int4_linear_tasks(h) * h.panel * (h.k_padded / 2) &&
          h.bytes <= nbytes,
      op, ": ", arg, " (", describe(w), ") has an inconsistent packed int4 header (n=", h.n, ", k=",
      h.k, ", group_size=", h.group_size, ", panel=", h.panel, ", bytes=", h.bytes,
      "); it was changed after convert_weight_packed_scale_zp or is not one");
  return h;
}

at::Tensor expand_block_scales(const at::Tensor& scales, std::int64_t n, std::int64_t block_n) {
  // One scale per (k block, output channel): the kernel reads a vector of channels at once.
  const std::int64_t nb = scales.size(-2), kb = scales.size(-1);
  const std::int64_t batches = scales.dim() == 3 ? scales.size(0) : 1;
  const at::Tensor sc = scales.to(at::kFloat).contiguous();
  at::Tensor expanded = scales.dim() == 3 ? at::empty({batches, kb, n}, sc.options())
                                          : at::empty({kb, n}, sc.options());
  const float* src = sc.data_ptr<float>();
  float* dst = expanded.data_ptr<float>();
  for (std::int64_t e = 0; e < batches; ++e) {
    for (std::int64_t b = 0; b < kb; ++b) {
      for (std::int64_t j = 0; j < n; ++j) {
        dst[(e * kb + b) * n + j] = src[(e * nb + j / block_n) * kb + b];
      }
    }
  }
  return expanded;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convert_weight_packed_scale_zp(
    bool meta, const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales,
    std::int64_t quant_method) {
  const char* op = "convert_weight_packed_scale_zp";
  if (!meta) {
    check_all_cpu(op, {{"qweight", &qweight}, {"qzeros", &qzeros}, {"scales", &scales}},
                  std::nullopt);
  }
  // Expert-stacked MoE weights [E, ...]: every expert's tensors have expert 0's shapes and
  // are packed alike, each into its slice of [E, N, X] (X rounded so that every slice
  // starts 4-byte aligned).
  const bool stacked = qweight.dim() == 3;
  std::int64_t experts = 1;
  if (stacked) {
    experts = qweight.size(0);
    for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor*>{"qzeros", &qzeros},
                                 {"scales", &scales}}) {
      TORCH_CHECK_VALUE(t->dim() == 3 && t->size(0) == experts, op, ": ", arg, " (",
                        describe(*t), ") is not 3-D with ", experts,
                        " experts first; expected it stacked like qweight (",
                        describe(qweight), ")");
    }
    TORCH_CHECK_VALUE(experts >= 1, op, ": qweight (", describe(qweight),
                      ") has no experts; expected [E, ...] with E >= 1");
  }
  const Int4Shape s = stacked ? int4_shape(op, qweight[0], qzeros[0], scales[0], quant_method)
                              : int4_shape(op, qweight, qzeros, scales, quant_method);
  rvvk::PackedInt4Header h;
  rvvk::pack_int4_weight_layout(s.n, s.k, s.group_size, &h);
  std::int64_t cols = int4_packed_cols(h);
  if (stacked) {
    while (s.n * cols % 4 != 0) ++cols;
  }
  const at::TensorOptions u8 = qweight.options().dtype(at::kByte);
  const at::TensorOptions f32 = scales.options().dtype(at::kFloat);
  const std::vector<std::int64_t> packed_shape =
      stacked ? std::vector<std::int64_t>{experts, s.n, cols} : std::vector<std::int64_t>{s.n, cols};
  if (meta) {
    return {at::empty(packed_shape, u8), at::empty({experts, s.groups, s.n}, u8),
            at::empty({experts, s.groups, s.n}, f32)};
  }
  at::Tensor packed = at::zeros(packed_shape, u8);
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(packed.data_ptr()) % 4 == 0, op,
              ": internal error: misaligned allocation");
  at::Tensor zeros = at::empty({experts, s.groups, s.n}, u8);
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto [q, z] = stacked ? unpack_int4(s, qweight[e], qzeros[e], quant_method)
                                : unpack_int4(s, qweight, qzeros, quant_method);
    rvvk::pack_int4_weight(h, q.data_ptr<std::uint8_t>(), s.k,
                           static_cast<unsigned char*>(packed.data_ptr()) + e * s.n * cols);
    zeros[e].copy_(z);
  }
  return {packed, zeros, scales.to(at::kFloat).contiguous().view({experts, s.groups, s.n})};
}

at::Tensor int4_scaled_mm_cpu(bool meta, const at::Tensor& x, const at::Tensor& w,
                              const at::Tensor& w_zeros, const at::Tensor& w_scales,
                              const std::optional<at::Tensor>& bias) {
  return int4_mm(meta, "int4_scaled_mm_cpu", x, w, w_zeros, w_scales, bias, true);
}

at::Tensor int4_w4a16_mm_cpu(bool meta, const at::Tensor& x, const at::Tensor& w,
                             const at::Tensor& w_zeros, const at::Tensor& w_scales,
                             const std::optional<at::Tensor>& bias) {
  return int4_mm(meta, "int4_w4a16_mm_cpu", x, w, w_zeros, w_scales, bias, false);
}

at::Tensor fp8_scaled_mm_cpu(bool meta, const at::Tensor& mat1, const at::Tensor& mat2,
                             const at::Tensor& scales2, at::IntArrayRef block_size,
                             const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                             bool is_vnni) {
  const char* op = "fp8_scaled_mm_cpu";
  if (!meta) check_all_cpu(op, {{"mat1", &mat1}, {"mat2", &mat2}, {"scales2", &scales2}}, bias);
  check_mat1(op, mat1, false);
  check_same_device(op, "scales2", scales2, "mat1", mat1);
  out_kernel_dtype(op, out_dtype);
  check_weight_side(op, mat1, mat2, WeightKind::kFp8, bias, is_vnni);
  TORCH_CHECK_VALUE(block_size.size() == 2 && block_size[0] >= 1 && block_size[1] >= 1, op,
                    ": block_size is ", block_size,
                    "; expected [block_n, block_k], both >= 1");
  TORCH_CHECK_TYPE(scales2.scalar_type() == at::kFloat, op, ": scales2 has dtype ",
                   dtype_name(scales2.scalar_type()), "; expected torch.float32");
  check_bias(op, bias, mat2.sym_size(0));
  if (meta) return linear_out_meta(mat1, mat2, out_dtype);
  const std::int64_t n = mat2.size(0), k = mat1.size(1);
  const std::int64_t bn = block_size[0], bk = block_size[1];
  const std::int64_t nb = (n + bn - 1) / bn, kb = (k + bk - 1) / bk;
  TORCH_CHECK_VALUE(scales2.dim() == 2 && scales2.size(0) == nb && scales2.size(1) == kb, op,
                    ": scales2 (", describe(scales2), ") does not match [ceil(N / block_n), "
                    "ceil(K / block_k)] = [", nb, ", ", kb, "] for N = ", n, ", K = ", k,
                    ", block_size [", bn, ", ", bk, "]");
  const auto [packed, h] = packed_weight(op, mat2, rvvk::DType::kFP8E4M3, k, is_vnni);
  const at::Tensor expanded = expand_block_scales(scales2, n, bn);
  const at::Tensor b = bias ? bias->contiguous() : at::Tensor();
  at::Tensor x = mat1;
  const std::int64_t x_stride = rows_of(x);
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(out_dtype));
  if (x.size(0) == 0) return out;
  rvvk::Fp8LinearArgs args;
  args.m = x.size(0);
  args.x_dtype = kernel_dtype(op, "mat1", x);
  args.x = x.data_ptr();
  args.x_stride = x_stride;
  args.scales = expanded.data_ptr<float>();
  args.block_k = bk;
  set_weight_and_output(args, packed, b, out);
  parallel_panels(h, args.m, [&](std::int64_t begin, std::int64_t end) {
    rvvk::fp8_linear(args, begin, end);
  });
  return out;
}

}  // namespace rvv_ops
