// Input checks of the attention ops (attention.cpp).
//
// As in common.h: every message names the op, the argument, the value it got and what was
// expected; TORCH_CHECK_TYPE raises TypeError (dtypes), TORCH_CHECK_VALUE ValueError
// (everything else). Features the kernels do not have raise NotImplementedError with a
// message starting "rvv_ops: unsupported: ", which a dispatcher can recognise to fall back.
//
// The first group needs only devices, dtypes, shapes (as SymInts) and scalars: the Meta
// kernels run it as well. The second reads strides, addresses and index values: CPU only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace rvv_ops::attn {

// NotImplementedError "rvv_ops: unsupported: <feature> (<op>: <detail>)" unless `ok`.
void check_supported(const char* op, bool ok, const char* feature, const std::string& detail);
// check_supported for cross-attention: neither `is_cross_attention` nor `encoder_lens`.
void check_no_cross_attention(const char* op, bool is_cross_attention,
                              const std::optional<at::Tensor>& encoder_lens);

// A tensor on `ref`'s device (`ref_arg` names it) of `dims` dimensions (`layout` names them,
// e.g. "[batch, heads, head_dim]").
void check_dims(const char* op, const char* arg, const at::Tensor& t, std::int64_t dims,
                const std::string& layout, const char* ref_arg, const at::Tensor& ref);
// t.size(d) == expected; `what` says where the expectation comes from.
void check_size(const char* op, const char* arg, const at::Tensor& t, std::int64_t d,
                const c10::SymInt& expected, const std::string& what);

// The kernels' dtype of a KV cache: query's dtype, or fp8 e4m3fn / e5m2 (`int8`: only int8).
rvvk::DType cache_dtype(const char* op, const char* arg, const at::Tensor& cache,
                        const at::Tensor& query, bool int8);

// A 1-D int32/int64 tensor of `n` elements (`what` names n) on `ref`'s device.
void check_index(const char* op, const char* arg, const at::Tensor& t, const c10::SymInt& n,
                 const std::string& what, const char* ref_arg, const at::Tensor& ref);
// req_to_token [requests, max_context], int32 or int64.
void check_table(const char* op, const at::Tensor& req_to_token, const char* ref_arg,
                 const at::Tensor& ref);

// A finite number, also as fp32; > 0 if `positive`, >= 0 if `non_negative`.
void check_scalar(const char* op, const char* arg, double x, bool positive, bool non_negative);

// sinks: None, or a floating-point [heads] tensor.
void check_sinks(const char* op, const std::optional<at::Tensor>& sinks,
                 const c10::SymInt& heads, const char* ref_arg, const at::Tensor& ref);

// ---- CPU only.

// `t`'s last dimension is contiguous; the others may have any strides.
void check_last_dim(const char* op, const char* arg, const at::Tensor& t);

// `t` (checked by check_index) as contiguous int64.
at::Tensor index_vector(const at::Tensor& t);
// Every v[i] in [lo, hi); `what` describes the range.
void check_range(const char* op, const char* arg, const at::Tensor& v, std::int64_t lo,
                 std::int64_t hi, const std::string& what);

// sinks (checked by check_sinks) as contiguous fp32.
std::optional<at::Tensor> sinks_f32(const std::optional<at::Tensor>& sinks);

// req_to_token (checked by check_table), entries contiguous along a row.
struct TokenTable {
  const void* data = nullptr;  // the tensor's elements (taken once: at() runs per entry)
  std::int64_t rows = 0, cols = 0, stride = 0;
  bool int64 = false;
  std::int64_t at(std::int64_t r, std::int64_t c) const;
};
TokenTable token_table(const char* op, const at::Tensor& req_to_token);
// Entries [lo, hi) of row `req` (read for request `b`) are rows of a cache of `tokens` rows.
void check_table_entries(const char* op, const TokenTable& table, std::int64_t b,
                         std::int64_t req, std::int64_t lo, std::int64_t hi,
                         std::int64_t tokens, const char* cache_arg);

// Tensors that must not share memory: every pair with a written member, except pairs in
// `allowed` (by name) and pairs of absent (undefined) tensors.
struct Named {
  const char* name;
  const at::Tensor* t;  // null or undefined: absent
  bool written;
};
// Every present tensor of `args` is a CPU tensor.
void check_all_cpu(const char* op, const std::vector<Named>& args);
void check_no_shared_memory(const char* op, const std::vector<Named>& args,
                            const std::vector<std::pair<const char*, const char*>>& allowed);
// A written tensor whose elements do not overlap each other (not an expand()ed tensor).
void check_no_internal_overlap(const char* op, const char* arg, const at::Tensor& t);

}  // namespace rvv_ops::attn
