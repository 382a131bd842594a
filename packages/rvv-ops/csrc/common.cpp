#include "common.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace rvv_ops {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kHalf: return "torch.float16";
    case at::kDouble: return "torch.float64";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kBool: return "torch.bool";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case at::ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case at::ScalarType::Float8_e4m3fnuz: return "torch.float8_e4m3fnuz";
    case at::ScalarType::Float8_e5m2fnuz: return "torch.float8_e5m2fnuz";
    default: return std::string("torch.") + c10::toString(t);
  }
}

std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  // Symbolic sizes (fake tensors) print as their expressions.
  s << "shape " << t.sym_sizes() << ", strides " << t.sym_strides() << ", "
    << dtype_name(t.scalar_type());
  return s.str();
}

void check_cpu(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), op, ": ", arg, " is on device ", t.device(),
                    "; expected a CPU tensor");
}

rvvk::DType kernel_dtype(const char* op, const char* arg, const at::Tensor& t) {
  const at::ScalarType st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kBFloat16 || st == at::kHalf, op, ": ", arg,
                   " has dtype ", dtype_name(st),
                   "; expected torch.float32, torch.bfloat16 or torch.float16");
  return st == at::kFloat ? rvvk::DType::kF32
         : st == at::kBFloat16 ? rvvk::DType::kBF16
                               : rvvk::DType::kF16;
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", arg, " has dtype ",
                   dtype_name(t.scalar_type()), "; expected ", ref_arg, "'s dtype ",
                   dtype_name(ref.scalar_type()));
}

void check_same_device(const char* op, const char* arg, const at::Tensor& t,
                       const char* ref_arg, const at::Tensor& ref) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", arg, " is on device ", t.device(),
                    "; expected ", ref_arg, "'s device ", ref.device());
}

void check_has_rows(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.dim() >= 1, op, ": ", arg, " is a 0-d tensor; expected at least 1 "
                    "dimension (the normalized one last)");
}

void check_weight_shape(const char* op, const at::Tensor& weight, const char* input_arg,
                        const at::Tensor& input) {
  TORCH_CHECK_VALUE(weight.dim() == 1, op, ": weight is ", weight.dim(), "-d (", describe(weight),
                    "); expected a 1-D tensor");
  TORCH_CHECK_VALUE(weight.sym_size(0) == input.sym_size(-1), op, ": weight has ",
                    weight.sym_size(0), " elements; expected ", input_arg, ".size(-1) = ",
                    input.sym_size(-1), " (", input_arg, ": ", describe(input), ")");
}

void check_last_dim_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", arg, " (", describe(t),
                    ") has a last-dimension stride of ", t.stride(-1),
                    "; expected 1 (contiguous rows; call .contiguous() first)");
}

void check_contiguous(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", arg, " (", describe(t),
                    ") is not contiguous; expected stride 1");
}

void check_eps(const char* op, double eps) {
  // The kernels take eps as fp32: a double that overflows it is as unusable as inf.
  TORCH_CHECK_VALUE(std::isfinite(eps) && std::isfinite(static_cast<float>(eps)) && eps >= 0, op,
                    ": eps is ", eps, "; expected a finite number >= 0 (as fp32)");
}

std::int64_t num_rows(const at::Tensor& t) {
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return rows;
}

std::optional<std::int64_t> row_stride(const at::Tensor& t) {
  const std::int64_t cols = t.size(-1);
  if (t.numel() == 0) return cols;
  // Walk the leading dimensions from the innermost out; size-1 dimensions do not move.
  std::optional<std::int64_t> stride;
  std::int64_t expected = 0;
  for (std::int64_t d = t.dim() - 2; d >= 0; --d) {
    const std::int64_t size = t.size(d);
    if (size == 1) continue;
    if (!stride) {
      stride = t.stride(d);
    } else if (t.stride(d) != expected) {
      return std::nullopt;
    }
    expected = t.stride(d) * size;
  }
  return stride.value_or(cols);
}

Rows readable_rows(const at::Tensor& t) {
  if (const std::optional<std::int64_t> stride = row_stride(t)) return {t, *stride};
  at::Tensor copy = t.contiguous();
  return {copy, copy.size(-1)};
}

std::int64_t require_row_stride(const char* op, const char* arg, const at::Tensor& t) {
  const std::optional<std::int64_t> stride = row_stride(t);
  TORCH_CHECK_VALUE(stride.has_value(), op, ": ", arg, " (", describe(t),
                    ") is written in place but its leading dimensions cannot be flattened "
                    "into rows with one stride; expected a tensor whose dimensions before the "
                    "last are contiguous with respect to each other (e.g. a row slice "
                    "x[..., :n] of a contiguous x)");
  return *stride;
}

void check_rows_disjoint(const char* op, const char* arg, const at::Tensor& t,
                         std::int64_t stride) {
  const std::int64_t rows = num_rows(t);
  TORCH_CHECK_VALUE(rows <= 1 || t.size(-1) == 0 || stride >= t.size(-1), op, ": ", arg, " (",
                    describe(t), ") is written in place but its rows overlap in memory (row "
                    "stride ", stride, " < row length ", t.size(-1), "); expected rows that "
                    "do not share elements (not an expand()ed tensor)");
}

namespace {

// Whether row-strided blocks a (rows ra, stride sa, element offset 0) and b (rows rb,
// stride sb, element offset delta) of `cols` elements per row share an element. Exact when
// the strides agree (or a block has one row); otherwise whether their spans intersect.
bool blocks_overlap(std::int64_t delta, std::int64_t ra, std::int64_t sa, std::int64_t rb,
                    std::int64_t sb, std::int64_t cols) {
  if (ra == 1) sa = sb;
  if (rb == 1) sb = sa;
  if (sa != sb || sa == 0) {
    const std::int64_t a_end = (ra - 1) * sa + cols;
    const std::int64_t b_end = delta + (rb - 1) * sb + cols;
    return delta < a_end && 0 < b_end;
  }
  // Row r of a starts at r*s, row q of b at delta + q*s: they overlap iff
  // |delta + m*s| < cols for some m = q - r in [-(ra-1), rb-1]. delta + m*s grows with m, so
  // only the two values nearest zero need checking.
  const std::int64_t s = sa;
  const std::int64_t lo = -(ra - 1), hi = rb - 1;
  const std::int64_t m0 = delta >= 0 ? -(delta / s) - (delta % s != 0) : (-delta) / s;
  for (std::int64_t m : {m0, m0 + 1}) {
    const std::int64_t mc = std::clamp(m, lo, hi);
    if (std::abs(delta + mc * s) < cols) return true;
  }
  return false;
}

}  // namespace

void check_no_overlap(const char* op, const char* a_arg, const at::Tensor& a, std::int64_t sa,
                      const char* b_arg, const at::Tensor& b, std::int64_t sb) {
  if (a.numel() == 0 || b.numel() == 0) return;
  if (!a.storage().is_alias_of(b.storage())) return;
  const std::int64_t esize = static_cast<std::int64_t>(a.element_size());
  const std::int64_t delta_bytes =
      static_cast<const char*>(b.data_ptr()) - static_cast<const char*>(a.data_ptr());
  // Element-misaligned aliasing (views of differently typed storage) is overlap in any case.
  const bool overlap =
      delta_bytes % esize != 0 ||
      blocks_overlap(delta_bytes / esize, num_rows(a), sa, num_rows(b), sb, a.size(-1));
  TORCH_CHECK_VALUE(!overlap, op, ": ", a_arg, " (", describe(a), ") and ", b_arg, " (",
                    describe(b), ") share memory; expected tensors that do not overlap, "
                    "since ", a_arg, " is written in place");
}

}  // namespace rvv_ops
