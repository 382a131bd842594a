// sgl_kernel::decode_attention_cpu / extend_attention_cpu (SGLang's arguments) and their
// INT8-cache versions on rvv-kernels' attention kernels.
//
// Order of work in every op: all checks (nothing is written before the last one passed),
// then the KV-cache writes the op owns, then the kernels over task ranges with
// at::parallel_for (decode: every split first, handed out one at a time as threads take
// them, then the merge; extend: chunks handed out as threads take them). The caches are
// passed to the kernels with their element strides, never copied.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attention_checks.h"
#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

using attn::check_dims;
using attn::check_index;
using attn::check_range;
using attn::check_scalar;
using attn::check_size;
using attn::check_supported;
using attn::index_vector;
using attn::Named;

// --------------------------------------------------------------------------------------
// Checks that need only devices, dtypes, shapes and scalars: the CPU kernels and the Meta
// kernels run these. Sizes are SymInts (fake tensors may have symbolic shapes).

// The tensors every attention op has, checked the same way: the queries (`rows` of
// them: "batch" for decode, "tokens" for extend) with num_heads x head_dim, the two
// caches (and, for INT8, their scale buffers; else the per-tensor scales), the output,
// and the new K/V (both or neither), each against the others' sizes. `names` are the
// op's argument names, for the messages.
struct IoNames {
  const char *q, *rows, *k_cache, *v_cache, *out, *k_new, *v_new;
  const char* neither;  // what passing neither new K nor V means
};
void check_io(const char* op, const IoNames& n, const at::Tensor& q, const at::Tensor& k_cache,
              const at::Tensor& v_cache, double k_scale, double v_scale,
              const at::Tensor* k_scales, const at::Tensor* v_scales, const at::Tensor& out,
              const std::optional<at::Tensor>& k_new, const std::optional<at::Tensor>& v_new) {
  const std::string rows = n.rows;
  const std::string from_q = rows + ", from " + n.q;
  const auto on_q = [&](const char* arg, const at::Tensor& t, std::int64_t dims,
                        const std::string& layout) {
    check_dims(op, arg, t, dims, layout, n.q, q);
  };
  on_q(n.q, q, 3, "[" + rows + ", num_heads, head_dim]");
  kernel_dtype(op, n.q, q);
  const c10::SymInt batch = q.sym_size(0), heads = q.sym_size(1), dim = q.sym_size(2);
  TORCH_CHECK_VALUE(heads >= 1 && dim >= 1, op, ": ", n.q, " has shape ", q.sym_sizes(),
                    "; expected num_heads >= 1 and head_dim >= 1");

  // k_cache [T, Hkv, D] and v_cache [T, Hkv, Dv].
  on_q(n.k_cache, k_cache, 3, "[tokens, kv_heads, head_dim]");
  on_q(n.v_cache, v_cache, 3, "[tokens, kv_heads, head_dim_v]");
  attn::cache_dtype(op, n.k_cache, k_cache, q, k_scales != nullptr);
  check_same_dtype(op, n.v_cache, v_cache, n.k_cache, k_cache);
  const c10::SymInt tokens = k_cache.sym_size(0), kv_heads = k_cache.sym_size(1);
  check_size(op, n.k_cache, k_cache, 2, dim, std::string("head_dim, from ") + n.q);
  TORCH_CHECK_VALUE(kv_heads >= 1 && heads % kv_heads == 0, op, ": ", n.k_cache, " has shape ",
                    k_cache.sym_sizes(), ": ", kv_heads, " KV heads; expected a number >= 1 "
                    "that divides the ", heads, " query heads of ", n.q);
  check_size(op, n.v_cache, v_cache, 0, tokens, std::string("tokens, from ") + n.k_cache);
  check_size(op, n.v_cache, v_cache, 1, kv_heads, std::string("kv_heads, from ") + n.k_cache);
  const c10::SymInt dim_v = v_cache.sym_size(2);
  TORCH_CHECK_VALUE(dim_v >= 1, op, ": ", n.v_cache, " has shape ", v_cache.sym_sizes(),
                    "; expected a head_dim_v >= 1");
  if (k_scales != nullptr) {
    // k_scale_buf / v_scale_buf [T, Hkv] fp32: the INT8 caches' per-token, per-head scales.
    for (const auto& [arg, t] : {std::pair<const char*, const at::Tensor*>{"k_scale_buf", k_scales},
                                {"v_scale_buf", v_scales}}) {
      on_q(arg, *t, 2, "[tokens, kv_heads]");
      TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                       dtype_name(t->scalar_type()), "; expected torch.float32");
      check_size(op, arg, *t, 0, tokens, "tokens, from the KV cache");
      check_size(op, arg, *t, 1, kv_heads, "kv_heads, from the KV cache");
    }
  } else {
    check_scalar(op, "k_scale", k_scale, true, false);
    check_scalar(op, "v_scale", v_scale, true, false);
  }

  on_q(n.out, out, 3, "[" + rows + ", num_heads, head_dim_v]");
  check_same_dtype(op, n.out, out, n.q, q);
  check_size(op, n.out, out, 0, batch, from_q);
  check_size(op, n.out, out, 1, heads, std::string("num_heads, from ") + n.q);
  check_size(op, n.out, out, 2, dim_v, std::string("head_dim_v, from ") + n.v_cache);

  TORCH_CHECK_VALUE(k_new.has_value() == v_new.has_value(), op, ": ", n.k_new, " is ",
                    k_new.has_value() ? "a tensor" : "None", " but ", n.v_new, " is ",
                    v_new.has_value() ? "a tensor" : "None", "; expected both", n.neither);
  if (k_new.has_value()) {
    const auto new_rows = [&](const char* arg, const at::Tensor& t, const char* cache,
                              const c10::SymInt& d, const char* dim_name, const char* dim_from) {
      on_q(arg, t, 3, "[" + rows + ", num_kv_heads, " + dim_name + "]");
      check_same_dtype(op, arg, t, n.q, q);
      check_size(op, arg, t, 0, batch, from_q);
      check_size(op, arg, t, 1, kv_heads, std::string("num_kv_heads, from ") + cache);
      check_size(op, arg, t, 2, d, std::string(dim_name) + ", from " + dim_from);
    };
    new_rows(n.k_new, *k_new, n.k_cache, dim, "head_dim", n.q);
    new_rows(n.v_new, *v_new, n.v_cache, dim_v, "head_dim_v", n.v_cache);
  }
}

void check_scalars(const char* op, double sm_scale, double logit_cap, std::int64_t window) {
  check_scalar(op, "sm_scale", sm_scale, false, false);
  check_scalar(op, "logit_cap", logit_cap, false, true);
  TORCH_CHECK_VALUE(window >= 0, op, ": sliding_window_size is ", window,
                    "; expected >= 0 (0: no window; W + 1 attends to the last W + 1 keys, "
                    "as SGLang passes layer.sliding_window_size + 1)");
}



// --------------------------------------------------------------------------------------
// CPU-only checks and helpers

// The shape of a layer's KV cache (after check_io).
struct CacheShape {
  rvvk::DType dtype = rvvk::DType::kF32;
  std::int64_t tokens = 0, kv_heads = 0, head_dim = 0, head_dim_v = 0;
};

// The layout checks of check_io's tensors; returns the caches' shape and the scale buffers'
// common token stride (INT8 only: the kernels take one for both).
std::pair<CacheShape, std::int64_t> check_io_layout(
    const char* op, const IoNames& n, const at::Tensor& q, const at::Tensor& k_cache,
    const at::Tensor& v_cache, const at::Tensor* k_scales, const at::Tensor* v_scales,
    const at::Tensor& out, const std::optional<at::Tensor>& k_new,
    const std::optional<at::Tensor>& v_new) {
  attn::check_last_dim(op, n.q, q);
  attn::check_last_dim(op, n.k_cache, k_cache);
  attn::check_last_dim(op, n.v_cache, v_cache);
  CacheShape c;
  c.dtype = attn::cache_dtype(op, n.k_cache, k_cache, q, k_scales != nullptr);
  c.tokens = k_cache.size(0);
  c.kv_heads = k_cache.size(1);
  c.head_dim = q.size(2);
  c.head_dim_v = v_cache.size(2);
  std::int64_t scales_stride = 0;
  if (k_scales != nullptr) {
    attn::check_last_dim(op, "k_scale_buf", *k_scales);
    attn::check_last_dim(op, "v_scale_buf", *v_scales);
    scales_stride = c.tokens > 1 ? k_scales->stride(0) : c.kv_heads;
    TORCH_CHECK_VALUE(c.tokens <= 1 || v_scales->stride(0) == scales_stride, op,
                      ": k_scale_buf and v_scale_buf have token strides ", k_scales->stride(0),
                      " and ", v_scales->stride(0), "; expected equal strides (the kernels "
                      "take one; e.g. two contiguous [tokens, kv_heads] tensors)");
  }
  attn::check_last_dim(op, n.out, out);
  attn::check_no_internal_overlap(op, n.out, out);
  if (k_new.has_value()) {
    attn::check_last_dim(op, n.k_new, *k_new);
    attn::check_last_dim(op, n.v_new, *v_new);
  }
  return {c, scales_stride};
}

rvvk::KvCache make_cache(const CacheShape& c, const at::Tensor& k_cache,
                         const at::Tensor& v_cache, double k_scale, double v_scale,
                         const at::Tensor* k_scales, const at::Tensor* v_scales,
                         std::int64_t scales_stride, const attn::TokenTable& table) {
  rvvk::KvCache kv;
  kv.dtype = c.dtype;
  kv.k = k_cache.const_data_ptr();
  kv.k_stride_t = k_cache.stride(0);
  kv.k_stride_h = k_cache.stride(1);
  kv.v = v_cache.const_data_ptr();
  kv.v_stride_t = v_cache.stride(0);
  kv.v_stride_h = v_cache.stride(1);
  // The per-tensor scales are fp8's (SGLang's set_kv_buffer applies them only to caches of
  // another dtype than the activations); INT8 caches carry per-token scales instead.
  const bool fp8 = c.dtype == rvvk::DType::kFP8E4M3 || c.dtype == rvvk::DType::kFP8E5M2;
  kv.k_scale = fp8 ? static_cast<float>(k_scale) : 1.0f;
  kv.v_scale = fp8 ? static_cast<float>(v_scale) : 1.0f;
  if (k_scales != nullptr) {
    kv.k_scales = k_scales->const_data_ptr<float>();
    kv.v_scales = v_scales->const_data_ptr<float>();
    kv.scales_stride = scales_stride;
  }
  kv.req_to_token = table.data;
  kv.req_to_token_int64 = table.int64;
  kv.req_to_token_stride = table.stride;
  return kv;
}

// cache[rows[i], h, :] = src[i, h, :] for i < src.size(0) and every head; same dtype.
void copy_rows(const at::Tensor& cache, const at::Tensor& src, const at::Tensor& rows) {
  const std::int64_t n = src.size(0), heads = src.size(1);
  const std::size_t bytes = static_cast<std::size_t>(src.size(2) * src.element_size());
  const std::int64_t esize = static_cast<std::int64_t>(src.element_size());
  const std::int64_t* r = rows.const_data_ptr<std::int64_t>();
  auto* dst = static_cast<char*>(cache.data_ptr());
  const auto* from = static_cast<const char*>(src.const_data_ptr());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t h = 0; h < heads; ++h) {
      std::memcpy(dst + (r[i] * cache.stride(0) + h * cache.stride(1)) * esize,
                  from + (i * src.stride(0) + h * src.stride(1)) * esize, bytes);
    }
  }
}

// Writes new K or V rows into a cache the way SGLang's set_kv_buffer does: as they are
// when the cache has their dtype, else (src / scale).to(cache dtype) (fp8).
void write_rows(const at::Tensor& cache, const at::Tensor& src, double scale,
                const at::Tensor& rows) {
  if (src.size(0) == 0) return;
  if (cache.scalar_type() == src.scalar_type()) {
    copy_rows(cache, src, rows);
  } else {
    copy_rows(cache, src.div(scale).to(cache.scalar_type()), rows);
  }
}

// Symmetric INT8 quantisation of each (token, head) row of src [n, heads, dim]:
// scale = absmax / 127, q = clamp(round_half_even(x / scale), -127, 127) in fp32; an
// all-zero row gets scale 0 and zeros. Writes cache[rows[i], h, :] and scales[rows[i], h].
template <class T>
void quantize_rows_typed(const at::Tensor& cache, const at::Tensor& scales, const at::Tensor& src,
                         const at::Tensor& rows) {
  const std::int64_t n = src.size(0), heads = src.size(1), dim = src.size(2);
  const std::int64_t* r = rows.const_data_ptr<std::int64_t>();
  const T* from = src.const_data_ptr<T>();
  auto* q = static_cast<std::int8_t*>(cache.data_ptr());
  float* s = scales.data_ptr<float>();
  std::vector<float> x(static_cast<std::size_t>(dim));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* row = from + i * src.stride(0) + h * src.stride(1);
      float absmax = 0.0f;
      for (std::int64_t d = 0; d < dim; ++d) {
        x[static_cast<std::size_t>(d)] = static_cast<float>(row[d]);
        absmax = std::max(absmax, std::fabs(x[static_cast<std::size_t>(d)]));
      }
      const float scale = absmax / 127.0f;
      std::int8_t* out = q + r[i] * cache.stride(0) + h * cache.stride(1);
      for (std::int64_t d = 0; d < dim; ++d) {
        float v = scale > 0.0f ? std::nearbyint(x[static_cast<std::size_t>(d)] / scale) : 0.0f;
        // NaN (from non-finite inputs) becomes 0 rather than an undefined conversion.
        v = v == v ? std::clamp(v, -127.0f, 127.0f) : 0.0f;
        out[d] = static_cast<std::int8_t>(v);
      }
      s[r[i] * scales.stride(0) + h * scales.stride(1)] = scale;
    }
  }
}

void quantize_rows(const at::Tensor& cache, const at::Tensor& scales, const at::Tensor& src,
                   const at::Tensor& rows) {
  switch (src.scalar_type()) {
    case at::kFloat: return quantize_rows_typed<float>(cache, scales, src, rows);
    case at::kBFloat16: return quantize_rows_typed<c10::BFloat16>(cache, scales, src, rows);
    case at::kHalf: return quantize_rows_typed<c10::Half>(cache, scales, src, rows);
    default: TORCH_CHECK(false, "rvv_ops: quantize_rows: unexpected dtype");  // checked before
  }
}

// Runs fn(begin, end) over [0, tasks) in chunks of `chunk` tasks, handed out to
// at::parallel_for's threads one chunk at a time as they take them (not in equal static
// ranges: a thread slowed by other work, or by its rows' place in memory, takes fewer).
template <class Fn>
void run_as_taken(std::int64_t tasks, std::int64_t chunk, Fn&& fn) {
  const std::int64_t chunks = (tasks + chunk - 1) / chunk;
  const std::int64_t threads = std::min<std::int64_t>(at::get_num_threads(), chunks);
  std::atomic<std::int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](std::int64_t, std::int64_t) {
    for (;;) {
      const std::int64_t begin = next.fetch_add(chunk);
      if (begin >= tasks) break;
      fn(begin, std::min(tasks, begin + chunk));
    }
  });
}

// --------------------------------------------------------------------------------------
// Decode

void decode_impl(bool meta, const char* op, const at::Tensor& query, const at::Tensor& k_cache,
                 const at::Tensor& v_cache, double k_scale, double v_scale,
                 const at::Tensor* k_scales, const at::Tensor* v_scales,
                 const at::Tensor& output, const std::optional<at::Tensor>& key,
                 const std::optional<at::Tensor>& value, const at::Tensor& loc,
                 const at::Tensor& attn_logits, const at::Tensor& req_to_token,
                 const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                 double sm_scale, double logit_cap, bool is_cross_attention,
                 std::int64_t window, const std::optional<at::Tensor>& encoder_lens,
                 const std::optional<at::Tensor>& sinks) {
  const bool int8 = k_scales != nullptr;
  // The new token's K/V given (check_io: both or neither): written into the caches.
  const bool write = key.has_value();
  const at::Tensor none;
  const at::Tensor* no = nullptr;
  const std::vector<Named> tensors = {{"output", &output, true},
                                      {"attn_logits", &attn_logits, true},
                                      {"k_cache", &k_cache, write},
                                      {"v_cache", &v_cache, write},
                                      {"k_scale_buf", int8 ? k_scales : no, write},
                                      {"v_scale_buf", int8 ? v_scales : no, write},
                                      {"query", &query, false},
                                      {"key", key ? &*key : &none, false},
                                      {"value", value ? &*value : &none, false},
                                      {"loc", &loc, false},
                                      {"req_to_token", &req_to_token, false},
                                      {"req_pool_indices", &req_pool_indices, false},
                                      {"seq_lens", &seq_lens, false},
                                      {"sinks", sinks ? &*sinks : &none, false}};
  if (!meta) attn::check_all_cpu(op, tensors);
  {  // The checks that need only devices, dtypes, shapes (SymInts) and scalars.
    check_supported(op, !is_cross_attention, "cross-attention", "is_cross_attention=True");
    check_supported(op, !encoder_lens.has_value(), "cross-attention",
                    "encoder_lens is not None (encoder-decoder model)");
    check_io(op,
             {"query", "batch", "k_cache", "v_cache", "output", "key", "value",
              " (the new token's K/V, written at loc) or neither (already in the cache)"},
             query, k_cache, v_cache, k_scale, v_scale, k_scales, v_scales, output, key, value);
    const c10::SymInt batch = query.sym_size(0), heads = query.sym_size(1);
    const c10::SymInt dim_v = v_cache.sym_size(2);
    check_index(op, "loc", loc, batch, "batch, from query", "query", query);
    check_same_device(op, "attn_logits", attn_logits, "query", query);
    TORCH_CHECK_TYPE(attn_logits.scalar_type() == at::kFloat, op, ": attn_logits has dtype ",
                     dtype_name(attn_logits.scalar_type()), "; expected torch.float32");
    TORCH_CHECK_VALUE(attn_logits.dim() == 4 && attn_logits.sym_size(0) == batch &&
                          attn_logits.sym_size(1) == heads && attn_logits.sym_size(2) >= 1 &&
                          attn_logits.sym_size(3) == dim_v + 1,
                      op, ": attn_logits has shape ", attn_logits.sym_sizes(), "; expected [",
                      batch, ", ", heads, ", num_kv_splits >= 1, ", dim_v + 1,
                      "] = [batch, num_heads, num_kv_splits, head_dim_v + 1]");
    attn::check_table(op, req_to_token, "query", query);
    check_index(op, "req_pool_indices", req_pool_indices, batch, "batch, from query", "query",
                query);
    check_index(op, "seq_lens", seq_lens, batch, "batch, from query", "query", query);
    check_scalars(op, sm_scale, logit_cap, window);
    attn::check_sinks(op, sinks, heads, "query", query);
  }
  if (meta) return;

  const auto layout =
      check_io_layout(op, {"query", "batch", "k_cache", "v_cache", "output", "key", "value", ""},
                      query, k_cache, v_cache, k_scales, v_scales, output, key, value);
  const CacheShape& c = layout.first;
  const std::int64_t scales_stride = layout.second;
  const rvvk::DType q_dtype = kernel_dtype(op, "query", query);
  const std::int64_t batch = query.size(0), heads = query.size(1);
  if (write) {
    attn::check_no_internal_overlap(op, "k_cache", k_cache);
    attn::check_no_internal_overlap(op, "v_cache", v_cache);
  }
  TORCH_CHECK_VALUE(attn_logits.is_contiguous(), op, ": attn_logits (", describe(attn_logits),
                    ") is not contiguous; expected a contiguous scratch tensor");
  const std::int64_t splits = attn_logits.size(2);
  const attn::TokenTable table = attn::token_table(op, req_to_token);
  const at::Tensor loc64 = index_vector(loc);
  const at::Tensor rpi = index_vector(req_pool_indices);
  const at::Tensor lens = index_vector(seq_lens);
  const std::optional<at::Tensor> sinks32 = attn::sinks_f32(sinks);
  attn::check_no_shared_memory(
      op, tensors,
      // MLA pools keep V as a view of K's first head_dim_v elements (and SGLang passes
      // value = key[..., :head_dim_v]): V is written after K, with the same data.
      int8 ? std::vector<std::pair<const char*, const char*>>{}
           : std::vector<std::pair<const char*, const char*>>{{"k_cache", "v_cache"}});

  // Index values: everything the kernels or the writes will dereference.
  check_range(op, "loc", loc64, 0, c.tokens, "a row of k_cache");
  check_range(op, "req_pool_indices", rpi, 0, table.rows, "a row of req_to_token");
  const std::int64_t* lens_p = lens.const_data_ptr<std::int64_t>();
  const std::int64_t* rpi_p = rpi.const_data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = lens_p[b];
    const std::int64_t lo = write ? 1 : 0;
    TORCH_CHECK_VALUE(len >= lo && len <= table.cols, op, ": seq_lens[", b, "] is ", len,
                      "; expected a length in [", lo, ", ", table.cols,
                      "] (req_to_token.size(1))",
                      write ? "; with key given it counts the new token" : "");
    const std::int64_t start = window > 0 ? std::max<std::int64_t>(0, len - window) : 0;
    attn::check_table_entries(op, table, b, rpi_p[b], start, len, c.tokens, "k_cache");
  }

  if (batch == 0) return;
  if (write) {
    if (int8) {
      quantize_rows(k_cache, *k_scales, *key, loc64);
      quantize_rows(v_cache, *v_scales, *value, loc64);
    } else {
      write_rows(k_cache, *key, k_scale, loc64);
      write_rows(v_cache, *value, v_scale, loc64);
    }
  }

  rvvk::DecodeAttentionArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.head_dim_v = c.head_dim_v;
  a.num_splits = splits;
  a.q_dtype = q_dtype;
  a.q = query.const_data_ptr();
  a.q_stride_b = query.stride(0);
  a.q_stride_h = query.stride(1);
  a.cache = make_cache(c, k_cache, v_cache, k_scale, v_scale, k_scales, v_scales,
                       scales_stride, table);
  a.req_pool_indices = rpi_p;
  a.seq_lens = lens_p;
  a.o_dtype = q_dtype;
  a.o = output.data_ptr();
  a.o_stride_b = output.stride(0);
  a.o_stride_h = output.stride(1);
  a.partial = attn_logits.data_ptr<float>();
  a.sm_scale = static_cast<float>(sm_scale);
  a.logit_cap = static_cast<float>(logit_cap);
  a.window = window;
  a.sinks = sinks32 ? sinks32->const_data_ptr<float>() : nullptr;

  // Split tasks handed out one at a time as threads take them: tasks over randomly placed
  // rows take uneven times, so static halves leave one thread waiting.
  run_as_taken(rvvk::decode_attention_partial_tasks(a), 1,
               [&](std::int64_t begin, std::int64_t end) {
                 rvvk::decode_attention_partial(a, begin, end);
               });
  // A merge task reads num_splits x (head_dim_v + 1) floats: group small ones.
  const std::int64_t merge_grain = std::max<std::int64_t>(1, 8192 / (splits * (c.head_dim_v + 1)));
  at::parallel_for(0, rvvk::decode_attention_merge_tasks(a), merge_grain,
                   [&](std::int64_t begin, std::int64_t end) {
                     rvvk::decode_attention_merge(a, begin, end);
                   });
}

// --------------------------------------------------------------------------------------
// Extend

void extend_impl(bool meta, const char* op, const at::Tensor& q_extend,
                 const std::optional<at::Tensor>& k_extend,
                 const std::optional<at::Tensor>& v_extend, const at::Tensor& o_extend,
                 const at::Tensor& k_buffer, const at::Tensor& v_buffer, double k_scale,
                 double v_scale, const at::Tensor* k_scales, const at::Tensor* v_scales,
                 const at::Tensor* out_cache_loc, const at::Tensor& req_to_token,
                 const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                 const at::Tensor& extend_seq_lens, const at::Tensor& extend_start_loc,
                 std::int64_t max_len_extend, double sm_scale, double logit_cap,
                 bool is_cross_attention, std::int64_t window,
                 const std::optional<at::Tensor>& encoder_lens,
                 const std::optional<at::Tensor>& sinks,
                 const std::optional<at::Tensor>& tree_mask, bool is_causal) {
  const bool int8 = k_scales != nullptr;
  // k_extend / v_extend given (check_io: both or neither); the INT8 op then writes them
  // into the cache at out_cache_loc.
  const bool given = k_extend.has_value();
  const bool write = int8 && given;
  const at::Tensor none;
  const at::Tensor* no = nullptr;
  const std::vector<Named> tensors = {{"o_extend", &o_extend, true},
                                      {"k_buffer", &k_buffer, write},
                                      {"v_buffer", &v_buffer, write},
                                      {"k_scale_buf", int8 ? k_scales : no, write},
                                      {"v_scale_buf", int8 ? v_scales : no, write},
                                      {"q_extend", &q_extend, false},
                                      {"k_extend", k_extend ? &*k_extend : &none, false},
                                      {"v_extend", v_extend ? &*v_extend : &none, false},
                                      {"out_cache_loc", int8 ? out_cache_loc : no, false},
                                      {"req_to_token", &req_to_token, false},
                                      {"req_pool_indices", &req_pool_indices, false},
                                      {"seq_lens", &seq_lens, false},
                                      {"extend_seq_lens", &extend_seq_lens, false},
                                      {"extend_start_loc", &extend_start_loc, false},
                                      {"sinks", sinks ? &*sinks : &none, false}};
  if (!meta) attn::check_all_cpu(op, tensors);
  {  // The checks that need only devices, dtypes, shapes (SymInts) and scalars.
    check_supported(op, !is_cross_attention, "cross-attention", "is_cross_attention=True");
    check_supported(op, !encoder_lens.has_value(), "cross-attention",
                    "encoder_lens is not None (encoder-decoder model)");
    check_supported(op, !tree_mask.has_value(), "tree_mask",
                    "a custom attention mask (speculative decoding with a token tree)");
    check_io(op,
             {"q_extend", "tokens", "k_buffer", "v_buffer", "o_extend", "k_extend", "v_extend",
              ", or neither (the new tokens' K/V are then read from the cache)"},
             q_extend, k_buffer, v_buffer, k_scale, v_scale, k_scales, v_scales, o_extend,
             k_extend, v_extend);
    const auto on_q = [&](const char* arg, const at::Tensor& t, const c10::SymInt& n,
                          const char* what) {
      check_index(op, arg, t, n, what, "q_extend", q_extend);
    };
    if (out_cache_loc != nullptr) {
      on_q("out_cache_loc", *out_cache_loc, q_extend.sym_size(0), "tokens, from q_extend");
    }
    attn::check_table(op, req_to_token, "q_extend", q_extend);
    check_same_device(op, "seq_lens", seq_lens, "q_extend", q_extend);
    TORCH_CHECK_VALUE(seq_lens.dim() == 1, op, ": seq_lens has shape ", seq_lens.sym_sizes(),
                      "; expected [batch]");
    const c10::SymInt batch = seq_lens.sym_size(0);
    on_q("seq_lens", seq_lens, batch, "batch");
    on_q("req_pool_indices", req_pool_indices, batch, "batch, from seq_lens");
    on_q("extend_seq_lens", extend_seq_lens, batch, "batch, from seq_lens");
    on_q("extend_start_loc", extend_start_loc, batch, "batch, from seq_lens");
    TORCH_CHECK_VALUE(max_len_extend >= 0, op, ": max_len_extend is ", max_len_extend,
                      "; expected >= 0 (at least max(extend_seq_lens))");
    check_scalars(op, sm_scale, logit_cap, window);
    attn::check_sinks(op, sinks, q_extend.sym_size(1), "q_extend", q_extend);
  }
  if (meta) return;

  const auto layout = check_io_layout(
      op, {"q_extend", "tokens", "k_buffer", "v_buffer", "o_extend", "k_extend", "v_extend", ""},
      q_extend, k_buffer, v_buffer, k_scales, v_scales, o_extend, k_extend, v_extend);
  const CacheShape& c = layout.first;
  const std::int64_t scales_stride = layout.second;
  const rvvk::DType dtype = kernel_dtype(op, "q_extend", q_extend);
  const std::int64_t tokens = q_extend.size(0), heads = q_extend.size(1);
  if (write) {
    attn::check_no_internal_overlap(op, "k_buffer", k_buffer);
    attn::check_no_internal_overlap(op, "v_buffer", v_buffer);
  }
  const at::Tensor loc64 = int8 ? index_vector(*out_cache_loc) : at::Tensor();
  const attn::TokenTable table = attn::token_table(op, req_to_token);
  const std::int64_t batch = seq_lens.size(0);
  const at::Tensor lens = index_vector(seq_lens);
  const at::Tensor rpi = index_vector(req_pool_indices);
  const at::Tensor ext = index_vector(extend_seq_lens);
  const at::Tensor starts = index_vector(extend_start_loc);
  const std::optional<at::Tensor> sinks32 = attn::sinks_f32(sinks);
  attn::check_no_shared_memory(op, tensors, {});

  // Index values.
  if (int8) check_range(op, "out_cache_loc", loc64, 0, c.tokens, "a row of k_buffer");
  check_range(op, "req_pool_indices", rpi, 0, table.rows, "a row of req_to_token");
  const std::int64_t* lens_p = lens.const_data_ptr<std::int64_t>();
  const std::int64_t* rpi_p = rpi.const_data_ptr<std::int64_t>();
  const std::int64_t* ext_p = ext.const_data_ptr<std::int64_t>();
  const std::int64_t* start_p = starts.const_data_ptr<std::int64_t>();
  std::int64_t max_ext = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // (start, request) of rows
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = lens_p[b], n = ext_p[b], start = start_p[b];
    TORCH_CHECK_VALUE(len >= 0 && len <= table.cols, op, ": seq_lens[", b, "] is ", len,
                      "; expected a length in [0, ", table.cols, "] (req_to_token.size(1))");
    TORCH_CHECK_VALUE(n >= 0 && n <= len, op, ": extend_seq_lens[", b, "] is ", n,
                      "; expected a length in [0, seq_lens[", b, "] = ", len, "]");
    TORCH_CHECK_VALUE(start >= 0 && start <= tokens - n, op, ": extend_start_loc[", b, "] is ",
                      start, " with extend_seq_lens[", b, "] = ", n,
                      "; expected the request's rows within the ", tokens,
                      " rows of q_extend (0 <= start <= ", tokens - n, ")");
    max_ext = std::max(max_ext, n);
    if (n > 0) ranges.emplace_back(start, b);
    const std::int64_t prefix = len - n;
    const std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, prefix - window + 1) : 0;
    // Without k_extend the new tokens' K/V are gathered from the cache as well.
    attn::check_table_entries(op, table, b, rpi_p[b], lo, given ? prefix : len, c.tokens,
                              "k_buffer");
  }
  TORCH_CHECK_VALUE(max_len_extend >= max_ext, op, ": max_len_extend is ", max_len_extend,
                    "; expected >= max(extend_seq_lens) = ", max_ext);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    const auto [start, b] = ranges[i];
    const auto [prev_start, prev_b] = ranges[i - 1];
    TORCH_CHECK_VALUE(start >= prev_start + ext_p[prev_b], op, ": requests ", prev_b, " and ",
                      b, " share rows of q_extend (extend_start_loc ", prev_start, " and ",
                      start, ", extend_seq_lens ", ext_p[prev_b], " and ", ext_p[b],
                      "); expected disjoint row ranges");
  }

  if (write) {
    quantize_rows(k_buffer, *k_scales, *k_extend, loc64);
    quantize_rows(v_buffer, *v_scales, *v_extend, loc64);
  }

  // k_extend / v_extend None (KV-shared layers): the new tokens' K/V, dequantised to
  // q_extend's dtype, from cache positions prefix .. seq_len - 1.
  at::Tensor k_new, v_new;
  if (given) {
    k_new = *k_extend;
    v_new = *v_extend;
  } else {
    std::vector<std::int64_t> src, dst;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t prefix = lens_p[b] - ext_p[b];
      for (std::int64_t i = 0; i < ext_p[b]; ++i) {
        src.push_back(table.at(rpi_p[b], prefix + i));
        dst.push_back(start_p[b] + i);
      }
    }
    const auto opts = q_extend.options();
    k_new = at::zeros({tokens, c.kv_heads, c.head_dim}, opts);
    v_new = at::zeros({tokens, c.kv_heads, c.head_dim_v}, opts);
    if (!src.empty()) {
      const auto n = static_cast<std::int64_t>(src.size());
      const at::Tensor src_t = at::empty({n}, at::kLong);
      const at::Tensor dst_t = at::empty({n}, at::kLong);
      std::copy(src.begin(), src.end(), src_t.data_ptr<std::int64_t>());
      std::copy(dst.begin(), dst.end(), dst_t.data_ptr<std::int64_t>());
      auto dequant = [&](const at::Tensor& cache, double scale, const at::Tensor* scales) {
        // Gathered as bytes: torch (2.6) has no fp8 indexing kernels.
        const bool byte_view = cache.element_size() == 1 && cache.scalar_type() != at::kChar;
        at::Tensor rows = byte_view ? cache.view(at::kByte).index_select(0, src_t).view(
                                          cache.scalar_type())
                                    : cache.index_select(0, src_t);
        if (scales != nullptr) {
          rows = rows.to(at::kFloat).mul(scales->index_select(0, src_t).unsqueeze(-1));
        } else if (cache.scalar_type() != q_extend.scalar_type()) {
          rows = rows.to(at::kFloat).mul(scale);
        }
        return rows.to(q_extend.scalar_type());
      };
      k_new.index_copy_(0, dst_t, dequant(k_buffer, k_scale, k_scales));
      v_new.index_copy_(0, dst_t, dequant(v_buffer, v_scale, v_scales));
    }
  }

  if (batch == 0 || max_ext == 0) return;
  rvvk::ExtendAttentionArgs a;
  a.batch = batch;
  a.num_heads = heads;
  a.num_kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.head_dim_v = c.head_dim_v;
  a.max_extend_len = max_ext;
  a.dtype = dtype;
  a.q = q_extend.const_data_ptr();
  a.q_stride_t = q_extend.stride(0);
  a.q_stride_h = q_extend.stride(1);
  a.k = k_new.const_data_ptr();
  a.k_stride_t = k_new.stride(0);
  a.k_stride_h = k_new.stride(1);
  a.v = v_new.const_data_ptr();
  a.v_stride_t = v_new.stride(0);
  a.v_stride_h = v_new.stride(1);
  a.o = o_extend.data_ptr();
  a.o_stride_t = o_extend.stride(0);
  a.o_stride_h = o_extend.stride(1);
  a.cache = make_cache(c, k_buffer, v_buffer, k_scale, v_scale, k_scales, v_scales,
                       scales_stride, table);
  a.req_pool_indices = rpi_p;
  a.seq_lens = lens_p;
  a.extend_seq_lens = ext_p;
  a.extend_start_loc = start_p;
  a.sm_scale = static_cast<float>(sm_scale);
  a.logit_cap = static_cast<float>(logit_cap);
  a.window = window;
  a.sinks = sinks32 ? sinks32->const_data_ptr<float>() : nullptr;
  a.causal = is_causal;
  // Tasks handed out in chunks as threads take them: tasks differ in cost (causal query
  // blocks see more keys the later they are, requests differ in length), and a thread slowed
  // by other work takes fewer. A chunk is at most one request's KV head (its query blocks are
  // tasks in a row) and runs as one kernel call on one thread, which converts that KV head's
  // keys and values once for all the chunk's query blocks; chunks shrink so that every thread
  // gets at least two (one request with two KV heads on an 8-core board: chunks of 2 tasks).
  const std::int64_t tasks = rvvk::extend_attention_tasks(a);
  const std::int64_t kv_heads = a.batch * a.num_kv_heads;
  const std::int64_t threads = at::get_num_threads();
  const std::int64_t per_head = kv_heads > 0 ? std::max<std::int64_t>(1, tasks / kv_heads) : 1;
  const std::int64_t chunk = std::clamp<std::int64_t>(tasks / (2 * threads), 1, per_head);
  run_as_taken(tasks, chunk, [&](std::int64_t begin, std::int64_t end) {
    rvvk::extend_attention(a, begin, end);
  });
}

}  // namespace

// The entry points (ops.h): the CPU kernels, and with meta = true the Meta kernels.

void decode_attention_cpu(bool meta, const at::Tensor& query, at::Tensor& k_cache,
                          at::Tensor& v_cache, double k_scale, double v_scale,
                          at::Tensor& output, const std::optional<at::Tensor>& key,
                          const std::optional<at::Tensor>& value, const at::Tensor& loc,
                          at::Tensor& attn_logits, const at::Tensor& req_to_token,
                          const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                          double sm_scale, double logit_cap, bool is_cross_attention,
                          std::int64_t sliding_window_size,
                          const std::optional<at::Tensor>& encoder_lens,
                          const std::optional<at::Tensor>& sinks) {
  decode_impl(meta, "decode_attention_cpu", query, k_cache, v_cache, k_scale, v_scale, nullptr,
              nullptr, output, key, value, loc, attn_logits, req_to_token, req_pool_indices,
              seq_lens, sm_scale, logit_cap, is_cross_attention, sliding_window_size,
              encoder_lens, sinks);
}

void decode_attention_int8_cpu(bool meta, const at::Tensor& query, at::Tensor& k_cache,
                               at::Tensor& v_cache, at::Tensor& k_scale_buf,
                               at::Tensor& v_scale_buf, at::Tensor& output,
                               const std::optional<at::Tensor>& key,
                               const std::optional<at::Tensor>& value, const at::Tensor& loc,
                               at::Tensor& attn_logits, const at::Tensor& req_to_token,
                               const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                               double sm_scale, double logit_cap, bool is_cross_attention,
                               std::int64_t sliding_window_size,
                               const std::optional<at::Tensor>& encoder_lens,
                               const std::optional<at::Tensor>& sinks) {
  decode_impl(meta, "decode_attention_int8_cpu", query, k_cache, v_cache, 1.0, 1.0,
              &k_scale_buf, &v_scale_buf, output, key, value, loc, attn_logits, req_to_token,
              req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attention,
              sliding_window_size, encoder_lens, sinks);
}

void extend_attention_cpu(bool meta, const at::Tensor& q_extend,
                          const std::optional<at::Tensor>& k_extend,
                          const std::optional<at::Tensor>& v_extend, at::Tensor& o_extend,
                          const at::Tensor& k_buffer, const at::Tensor& v_buffer,
                          double k_scale, double v_scale, const at::Tensor& req_to_token,
                          const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
                          const at::Tensor& extend_seq_lens,
                          const at::Tensor& extend_start_loc, std::int64_t max_len_extend,
                          double sm_scale, double logit_cap, bool is_cross_attention,
                          std::int64_t sliding_window_size,
                          const std::optional<at::Tensor>& encoder_lens,
                          const std::optional<at::Tensor>& sinks,
                          const std::optional<at::Tensor>& tree_mask, bool is_causal) {
  extend_impl(meta, "extend_attention_cpu", q_extend, k_extend, v_extend, o_extend, k_buffer,
              v_buffer, k_scale, v_scale, nullptr, nullptr, nullptr, req_to_token,
              req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend,
              sm_scale, logit_cap, is_cross_attention, sliding_window_size, encoder_lens,
              sinks, tree_mask, is_causal);
}

void extend_attention_int8_cpu(
    bool meta, const at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend,
    const std::optional<at::Tensor>& v_extend, at::Tensor& o_extend, at::Tensor& k_buffer,
    at::Tensor& v_buffer, at::Tensor& k_scale_buf, at::Tensor& v_scale_buf,
    const at::Tensor& out_cache_loc, const at::Tensor& req_to_token,
    const at::Tensor& req_pool_indices, const at::Tensor& seq_lens,
    const at::Tensor& extend_seq_lens, const at::Tensor& extend_start_loc,
    std::int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attention,
    std::int64_t sliding_window_size, const std::optional<at::Tensor>& encoder_lens,
    const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& tree_mask,
    bool is_causal) {
  extend_impl(meta, "extend_attention_int8_cpu", q_extend, k_extend, v_extend, o_extend,
              k_buffer, v_buffer, 1.0, 1.0, &k_scale_buf, &v_scale_buf, &out_cache_loc,
              req_to_token, req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc,
              max_len_extend, sm_scale, logit_cap, is_cross_attention, sliding_window_size,
              encoder_lens, sinks, tree_mask, is_causal);
}

}  // namespace rvv_ops
