#include "attention_checks.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstring>

namespace rvv_ops::attn {

void check_supported(const char* op, bool ok, const char* feature, const std::string& detail) {
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "rvv_ops: unsupported: ", feature, " (", op, ": ", detail,
                              "); use another attention backend for this layer");
}

void check_no_cross_attention(const char* op, bool is_cross_attention,
                              const std::optional<at::Tensor>& encoder_lens) {
  check_supported(op, !is_cross_attention, "cross-attention", "is_cross_attention=True");
  check_supported(op, !encoder_lens.has_value(), "cross-attention",
                  "encoder_lens is not None (encoder-decoder model)");
}

void check_dims(const char* op, const char* arg, const at::Tensor& t, std::int64_t dims,
                const std::string& layout, const char* ref_arg, const at::Tensor& ref) {
  check_same_device(op, arg, t, ref_arg, ref);
  TORCH_CHECK_VALUE(t.dim() == dims, op, ": ", arg, " is ", t.dim(), "-d (", describe(t),
                    "); expected ", dims, "-D ", layout);
}

void check_size(const char* op, const char* arg, const at::Tensor& t, std::int64_t d,
                const c10::SymInt& expected, const std::string& what) {
  TORCH_CHECK_VALUE(t.sym_size(d) == expected, op, ": ", arg, " has shape ", t.sym_sizes(),
                    "; expected size ", expected, " in dimension ", d, " (", what, ")");
}

rvvk::DType cache_dtype(const char* op, const char* arg, const at::Tensor& cache,
                        const at::Tensor& query, bool int8) {
  const at::ScalarType st = cache.scalar_type();
  if (int8) {
    TORCH_CHECK_TYPE(st == at::ScalarType::Char, op, ": ", arg, " has dtype ", dtype_name(st),
                     "; expected torch.int8");
    return rvvk::DType::kI8;
  }
  if (st == at::ScalarType::Float8_e4m3fn) return rvvk::DType::kFP8E4M3;
  if (st == at::ScalarType::Float8_e5m2) return rvvk::DType::kFP8E5M2;
  TORCH_CHECK_TYPE(st == query.scalar_type(), op, ": ", arg, " has dtype ", dtype_name(st),
                   "; expected the query's dtype ", dtype_name(query.scalar_type()),
                   ", torch.float8_e4m3fn or torch.float8_e5m2");
  return kernel_dtype(op, arg, cache);
}

void check_index(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& n,
                 const std::string& what, const char* ref_arg, const at::Tensor& ref) {
  check_same_device(op, arg, t, ref_arg, ref);
  const at::ScalarType st = t.scalar_type();
  TORCH_CHECK_TYPE(st == at::kInt || st == at::kLong, op, ": ", arg, " has dtype ",
                   dtype_name(st), "; expected torch.int32 or torch.int64");
  TORCH_CHECK_VALUE(t.dim() == 1 && t.sym_size(0) == n, op, ": ", arg, " has shape ",
                    t.sym_sizes(), "; expected [", n, "] (", what, ")");
}

void check_table(const char* op, const at::Tensor& req_to_token, const char* ref_arg,
                 const at::Tensor& ref) {
  check_dims(op, "req_to_token", req_to_token, 2, "[requests, max_context]", ref_arg, ref);
  const at::ScalarType st = req_to_token.scalar_type();
  TORCH_CHECK_TYPE(st == at::kInt || st == at::kLong, op, ": req_to_token has dtype ",
                   dtype_name(st), "; expected torch.int32 or torch.int64");
}

void check_scalar(const char* op, const char* arg, double x, bool positive, bool non_negative) {
  const float f = static_cast<float>(x);
  const bool finite = std::isfinite(x) && std::isfinite(f);
  if (positive) {
    TORCH_CHECK_VALUE(finite && f > 0.0f, op, ": ", arg, " is ", x,
                      "; expected a finite number > 0 (as fp32)");
  } else if (non_negative) {
    TORCH_CHECK_VALUE(finite && x >= 0.0, op, ": ", arg, " is ", x,
                      "; expected a finite number >= 0 (as fp32)");
  } else {
    TORCH_CHECK_VALUE(finite, op, ": ", arg, " is ", x, "; expected a finite number (as fp32)");
  }
}

void check_sinks(const char* op, const std::optional<at::Tensor>& sinks,
                 const c10::SymInt& heads, const char* ref_arg, const at::Tensor& ref) {
  if (!sinks.has_value()) return;
  const at::Tensor& s = *sinks;
  check_same_device(op, "sinks", s, ref_arg, ref);
  TORCH_CHECK_TYPE(at::isFloatingType(s.scalar_type()), op, ": sinks has dtype ",
                   dtype_name(s.scalar_type()), "; expected a floating-point dtype");
  TORCH_CHECK_VALUE(s.dim() == 1 && s.sym_size(0) == heads, op, ": sinks has shape ",
                    s.sym_sizes(), "; expected [", heads, "] (one logit per query head)");
}

void check_last_dim(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", arg, " (", describe(t),
                    ") has a last-dimension stride of ", t.stride(-1),
                    "; expected 1 (other dimensions may be strided)");
}

at::Tensor index_vector(const at::Tensor& t) { return t.to(at::kLong).contiguous(); }

void check_range(const char* op, const char* arg, const at::Tensor& v, std::int64_t lo,
                 std::int64_t hi, const std::string& what) {
  const std::int64_t* p = v.const_data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    TORCH_CHECK_VALUE(p[i] >= lo && p[i] < hi, op, ": ", arg, "[", i, "] is ", p[i],
                      "; expected ", what, " in [", lo, ", ", hi, ")");
  }
}

std::optional<at::Tensor> sinks_f32(const std::optional<at::Tensor>& sinks) {
  if (!sinks.has_value()) return std::nullopt;
  return sinks->to(at::kFloat).contiguous();
}

std::int64_t TokenTable::at(std::int64_t r, std::int64_t c) const {
  const std::int64_t i = r * stride + c;
  return int64 ? static_cast<const std::int64_t*>(data)[i]
               : static_cast<const std::int32_t*>(data)[i];
}

TokenTable token_table(const char* op, const at::Tensor& req_to_token) {
  check_last_dim(op, "req_to_token", req_to_token);
  TokenTable table;
  table.data = req_to_token.const_data_ptr();
  table.rows = req_to_token.size(0);
  table.cols = req_to_token.size(1);
  table.stride = req_to_token.stride(0);
  table.int64 = req_to_token.scalar_type() == at::kLong;
  return table;
}

namespace {
// Whether row[lo, hi) all lie in [0, tokens).
template <class T>
bool entries_in_range(const T* row, std::int64_t lo, std::int64_t hi, std::int64_t tokens) {
  // Unsigned compare: negative entries wrap to huge values.
  const auto limit = static_cast<std::uint64_t>(tokens);
  bool ok = true;
  for (std::int64_t pos = lo; pos < hi; ++pos)
    ok &= static_cast<std::uint64_t>(static_cast<std::int64_t>(row[pos])) < limit;
  return ok;
}
}  // namespace

void check_table_entries(const char* op, const TokenTable& table, std::int64_t b,
                         std::int64_t req, std::int64_t lo, std::int64_t hi,
                         std::int64_t tokens, const char* cache_arg) {
  if (hi <= lo) return;
  // One pass without branches over the entries (vectorised; a decode step reads one
  // entry per key, so this runs over every key of the batch), then the first bad entry.
  const std::int64_t off = req * table.stride;
  if (table.int64) {
    if (entries_in_range(static_cast<const std::int64_t*>(table.data) + off, lo, hi, tokens))
      return;
  } else if (entries_in_range(static_cast<const std::int32_t*>(table.data) + off, lo, hi,
                              tokens)) {
    return;
  }
  for (std::int64_t pos = lo; pos < hi; ++pos) {
    const std::int64_t row = table.at(req, pos);
    TORCH_CHECK_VALUE(row >= 0 && row < tokens, op, ": req_to_token[", req, ", ", pos, "] is ",
                      row, " (position ", pos, " of request ", b,
                      ", read by the kernel); expected a row of ", cache_arg, " in [0, ", tokens,
                      ")");
  }
}

namespace {

// [first byte, one past the last byte) that t's elements can touch; empty for no elements.
std::pair<std::uintptr_t, std::uintptr_t> byte_span(const at::Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  std::int64_t last = 0;
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.const_data_ptr());
  const auto esize = static_cast<std::uintptr_t>(t.element_size());
  return {begin, begin + (static_cast<std::uintptr_t>(last) + 1) * esize};
}

bool is_allowed(const char* a, const char* b,
                const std::vector<std::pair<const char*, const char*>>& allowed) {
  for (const auto& [x, y] : allowed) {
    if ((std::strcmp(a, x) == 0 && std::strcmp(b, y) == 0) ||
        (std::strcmp(a, y) == 0 && std::strcmp(b, x) == 0)) {
      return true;
    }
  }
  return false;
}

}  // namespace

void check_all_cpu(const char* op, const std::vector<Named>& args) {
  for (const Named& a : args) {
    if (a.t != nullptr && a.t->defined()) check_cpu(op, a.name, *a.t);
  }
}

void check_no_shared_memory(const char* op, const std::vector<Named>& args,
                            const std::vector<std::pair<const char*, const char*>>& allowed) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Named& a = args[i];
    if (a.t == nullptr || !a.t->defined()) continue;
    const auto sa = byte_span(*a.t);
    if (sa.first == sa.second) continue;
    for (std::size_t j = i + 1; j < args.size(); ++j) {
      const Named& b = args[j];
      if (!(a.written || b.written) || b.t == nullptr || !b.t->defined()) continue;
      if (is_allowed(a.name, b.name, allowed)) continue;
      const auto sb = byte_span(*b.t);
      const bool overlap = sb.first != sb.second && sa.first < sb.second && sb.first < sa.second;
      TORCH_CHECK_VALUE(!overlap, op, ": ", a.name, " (", describe(*a.t), ") and ", b.name, " (",
                        describe(*b.t), ") share memory; expected separate tensors, since ",
                        a.written ? a.name : b.name, " is written");
    }
  }
}

void check_no_internal_overlap(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, op, ": ", arg, " (",
                    describe(t), ") is written but its elements overlap in memory; expected a "
                    "tensor without repeated elements (not an expand()ed tensor)");
}

}  // namespace rvv_ops::attn
