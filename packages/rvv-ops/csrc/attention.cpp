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
#include <initializer_list>
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

// The arguments every attention op has, by role: the queries (`rows` of them: "batch" for
// decode, "tokens" for extend) with num_heads x head_dim, the two caches (and, for INT8,
// their scale buffers; else the per-tensor scales), the output, the new K/V (both or
// neither), the request tables and the scalar options. `n` holds the op's argument names,
// for the messages.
struct IoNames {
  const char *q, *rows, *k_cache, *v_cache, *out, *k_new, *v_new;
  const char* neither;  // what passing neither new K nor V means
};
struct Io {
  IoNames n;
  const at::Tensor& q;
  const at::Tensor& k_cache;
  const at::Tensor& v_cache;
  double k_scale, v_scale;     // per-tensor scales (fp8 caches)
  const at::Tensor* k_scales;  // INT8 ops: k_scale_buf / v_scale_buf; else null
  const at::Tensor* v_scales;
  const at::Tensor& out;
  const std::optional<at::Tensor>& k_new;
  const std::optional<at::Tensor>& v_new;
  const at::Tensor& req_to_token;
  const at::Tensor& req_pool_indices;
  const at::Tensor& seq_lens;
  const std::optional<at::Tensor>& sinks;
  double sm_scale, logit_cap;
  std::int64_t window;
  // extend_attention_cpu: the new K/V may have other heads than the cache, sgl-kernel's MLA
  // layout (a one-head latent cache, no cached prefix; see mla_new_heads).
  bool new_heads_may_differ = false;
};

// True when the new K/V are in sgl-kernel's MLA layout: they have other heads than the cache
// (check_io checked they divide the query heads). Every request's prefix must then be empty:
// attention runs over the new tokens only, with their heads.
bool mla_new_heads(const Io& io) {
  return io.new_heads_may_differ && io.k_new.has_value() &&
         io.k_new->sym_size(1) != io.k_cache.sym_size(1);
}

const at::Tensor* present(const std::optional<at::Tensor>& t) { return t ? &*t : nullptr; }

// The op's tensors for check_all_cpu and check_no_shared_memory, in this order: the output,
// `scratch` (written), the caches and scale buffers (written if `write`), the query, the new
// K/V, `loc` (the rows the op writes at, if any), the request tables, `lens` (the op's other
// length tensors) and the sinks.
std::vector<Named> io_tensors(const Io& io, std::initializer_list<Named> scratch, bool write,
                              Named loc, std::initializer_list<Named> lens) {
  std::vector<Named> t = {{io.n.out, &io.out, true}};
  t.insert(t.end(), scratch);
  t.insert(t.end(), {{io.n.k_cache, &io.k_cache, write},
                     {io.n.v_cache, &io.v_cache, write},
                     {"k_scale_buf", io.k_scales, write},
                     {"v_scale_buf", io.v_scales, write},
                     {io.n.q, &io.q, false},
                     {io.n.k_new, present(io.k_new), false},
                     {io.n.v_new, present(io.v_new), false},
                     loc,
                     {"req_to_token", &io.req_to_token, false},
                     {"req_pool_indices", &io.req_pool_indices, false},
                     {"seq_lens", &io.seq_lens, false}});
  t.insert(t.end(), lens);
  t.push_back({"sinks", present(io.sinks), false});
  return t;
}

// The tensors of Io, checked the same way for every op, each against the others' sizes.
void check_io(const char* op, const Io& io) {
  const IoNames& n = io.n;
  const at::Tensor &q = io.q, &k_cache = io.k_cache, &v_cache = io.v_cache, &out = io.out;
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
  attn::cache_dtype(op, n.k_cache, k_cache, q, io.k_scales != nullptr);
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
  if (io.k_scales != nullptr) {
    // k_scale_buf / v_scale_buf [T, Hkv] fp32: the INT8 caches' per-token, per-head scales.
    for (const auto& [arg, t] :
         {std::pair<const char*, const at::Tensor*>{"k_scale_buf", io.k_scales},
          {"v_scale_buf", io.v_scales}}) {
      on_q(arg, *t, 2, "[tokens, kv_heads]");
      TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                       dtype_name(t->scalar_type()), "; expected torch.float32");
      check_size(op, arg, *t, 0, tokens, "tokens, from the KV cache");
      check_size(op, arg, *t, 1, kv_heads, "kv_heads, from the KV cache");
    }
  } else {
    check_scalar(op, "k_scale", io.k_scale, true, false);
    check_scalar(op, "v_scale", io.v_scale, true, false);
  }

  on_q(n.out, out, 3, "[" + rows + ", num_heads, head_dim_v]");
  check_same_dtype(op, n.out, out, n.q, q);
  check_size(op, n.out, out, 0, batch, from_q);
  check_size(op, n.out, out, 1, heads, std::string("num_heads, from ") + n.q);
  check_size(op, n.out, out, 2, dim_v, std::string("head_dim_v, from ") + n.v_cache);

  const std::optional<at::Tensor>& k_new = io.k_new;
  const std::optional<at::Tensor>& v_new = io.v_new;
  TORCH_CHECK_VALUE(k_new.has_value() == v_new.has_value(), op, ": ", n.k_new, " is ",
                    k_new.has_value() ? "a tensor" : "None", " but ", n.v_new, " is ",
                    v_new.has_value() ? "a tensor" : "None", "; expected both", n.neither);
  if (k_new.has_value()) {
    const auto new_rows = [&](const char* arg, const at::Tensor& t, const char* cache,
                              const c10::SymInt& d, const char* dim_name, const char* dim_from) {
      on_q(arg, t, 3, "[" + rows + ", num_kv_heads, " + dim_name + "]");
      check_same_dtype(op, arg, t, n.q, q);
      check_size(op, arg, t, 0, batch, from_q);
      check_size(op, arg, t, 2, d, std::string(dim_name) + ", from " + dim_from);
    };
    new_rows(n.k_new, *k_new, n.k_cache, dim, "head_dim", n.q);
    new_rows(n.v_new, *v_new, n.v_cache, dim_v, "head_dim_v", n.v_cache);
    const c10::SymInt new_heads = k_new->sym_size(1);
    if (io.new_heads_may_differ && new_heads != kv_heads) {
      TORCH_CHECK_VALUE(new_heads >= 1 && heads % new_heads == 0, op, ": ", n.k_new,
                        " has shape ", k_new->sym_sizes(), ": ", new_heads, " KV heads; "
                        "expected the cache's ", kv_heads, " or (sgl-kernel's MLA layout, no "
                        "cached prefix) a number that divides the ", heads, " query heads");
      check_size(op, n.v_new, *v_new, 1, new_heads, std::string("num_kv_heads, from ") + n.k_new);
    } else {
      check_size(op, n.k_new, *k_new, 1, kv_heads, std::string("num_kv_heads, from ") + n.k_cache);
      check_size(op, n.v_new, *v_new, 1, kv_heads, std::string("num_kv_heads, from ") + n.v_cache);
    }
  }
}

// The scalar options and the sinks (one per query head).
void check_options(const char* op, const Io& io) {
  check_scalar(op, "sm_scale", io.sm_scale, false, false);
  check_scalar(op, "logit_cap", io.logit_cap, false, true);
  TORCH_CHECK_VALUE(io.window >= 0, op, ": sliding_window_size is ", io.window,
                    "; expected >= 0 (0: no window; W + 1 attends to the last W + 1 keys, "
                    "as SGLang passes layer.sliding_window_size + 1)");
  attn::check_sinks(op, io.sinks, io.q.sym_size(1), io.n.q, io.q);
}

// --------------------------------------------------------------------------------------
// CPU-only checks and helpers

// The shape of a layer's KV cache (after check_io).
struct CacheShape {
  rvvk::DType dtype = rvvk::DType::kF32;
  std::int64_t tokens = 0, kv_heads = 0, head_dim = 0, head_dim_v = 0;
};

// What the kernels take from check_io's tensors once their layout is checked: the caches'
// shape, the scale buffers' common token stride (INT8 only: the kernels take one for both)
// and the queries' dtype.
struct Layout {
  CacheShape c;
  std::int64_t scales_stride = 0;
  rvvk::DType dtype = rvvk::DType::kF32;
};

// The layout checks of check_io's tensors; the caches must not overlap themselves if the op
// writes them (`write`).
Layout check_io_layout(const char* op, const Io& io, bool write) {
  const IoNames& n = io.n;
  attn::check_last_dim(op, n.q, io.q);
  attn::check_last_dim(op, n.k_cache, io.k_cache);
  attn::check_last_dim(op, n.v_cache, io.v_cache);
  Layout l;
  CacheShape& c = l.c;
  c.dtype = attn::cache_dtype(op, n.k_cache, io.k_cache, io.q, io.k_scales != nullptr);
  c.tokens = io.k_cache.size(0);
  c.kv_heads = io.k_cache.size(1);
  c.head_dim = io.q.size(2);
  c.head_dim_v = io.v_cache.size(2);
  if (io.k_scales != nullptr) {
    const at::Tensor &k_scales = *io.k_scales, &v_scales = *io.v_scales;
    attn::check_last_dim(op, "k_scale_buf", k_scales);
    attn::check_last_dim(op, "v_scale_buf", v_scales);
    l.scales_stride = c.tokens > 1 ? k_scales.stride(0) : c.kv_heads;
    TORCH_CHECK_VALUE(c.tokens <= 1 || v_scales.stride(0) == l.scales_stride, op,
                      ": k_scale_buf and v_scale_buf have token strides ", k_scales.stride(0),
                      " and ", v_scales.stride(0), "; expected equal strides (the kernels "
                      "take one; e.g. two contiguous [tokens, kv_heads] tensors)");
  }
  attn::check_last_dim(op, n.out, io.out);
  attn::check_no_internal_overlap(op, n.out, io.out);
  if (io.k_new.has_value()) {
    attn::check_last_dim(op, n.k_new, *io.k_new);
    attn::check_last_dim(op, n.v_new, *io.v_new);
  }
  l.dtype = kernel_dtype(op, n.q, io.q);
  if (write) {
    attn::check_no_internal_overlap(op, n.k_cache, io.k_cache);
    attn::check_no_internal_overlap(op, n.v_cache, io.v_cache);
  }
  return l;
}

// The request tables and index vectors (int64, contiguous) after their checks, and the
// sinks as fp32.
struct Indices {
  attn::TokenTable table;
  at::Tensor loc, rpi, lens;
  std::optional<at::Tensor> sinks;
  const std::int64_t* rpi_p() const { return rpi.const_data_ptr<std::int64_t>(); }
  const std::int64_t* lens_p() const { return lens.const_data_ptr<std::int64_t>(); }
};

// Checks `tensors` (io_tensors) for shared memory except the pairs `allowed`, then the rows
// the op writes at (`loc`, named `loc_name`; null if none) and req_pool_indices.
Indices check_indices(const char* op, const Io& io, const Layout& l,
                      const std::vector<Named>& tensors,
                      const std::vector<std::pair<const char*, const char*>>& allowed,
                      const char* loc_name, const at::Tensor* loc) {
  Indices x;
  x.table = attn::token_table(op, io.req_to_token);
  if (loc != nullptr) x.loc = index_vector(*loc);
  x.rpi = index_vector(io.req_pool_indices);
  x.lens = index_vector(io.seq_lens);
  x.sinks = attn::sinks_f32(io.sinks);
  attn::check_no_shared_memory(op, tensors, allowed);
  if (loc != nullptr) {
    check_range(op, loc_name, x.loc, 0, l.c.tokens, std::string("a row of ") + io.n.k_cache);
  }
  check_range(op, "req_pool_indices", x.rpi, 0, x.table.rows, "a row of req_to_token");
  return x;
}

rvvk::KvCache make_cache(const Io& io, const Layout& l, const attn::TokenTable& table) {
  rvvk::KvCache kv;
  kv.dtype = l.c.dtype;
  kv.k = io.k_cache.const_data_ptr();
  kv.k_stride_t = io.k_cache.stride(0);
  kv.k_stride_h = io.k_cache.stride(1);
  kv.v = io.v_cache.const_data_ptr();
  kv.v_stride_t = io.v_cache.stride(0);
  kv.v_stride_h = io.v_cache.stride(1);
  // The per-tensor scales are fp8's (SGLang's set_kv_buffer applies them only to caches of
  // another dtype than the activations); INT8 caches carry per-token scales instead.
  const bool fp8 = kv.dtype == rvvk::DType::kFP8E4M3 || kv.dtype == rvvk::DType::kFP8E5M2;
  kv.k_scale = fp8 ? static_cast<float>(io.k_scale) : 1.0f;
  kv.v_scale = fp8 ? static_cast<float>(io.v_scale) : 1.0f;
  if (io.k_scales != nullptr) {
    kv.k_scales = io.k_scales->const_data_ptr<float>();
    kv.v_scales = io.v_scales->const_data_ptr<float>();
    kv.scales_stride = l.scales_stride;
  }
  kv.req_to_token = table.data;
  kv.req_to_token_int64 = table.int64;
  kv.req_to_token_stride = table.stride;
  return kv;
}

// The fields DecodeAttentionArgs and ExtendAttentionArgs share, from the checked arguments.
template <class Args>
void set_common_args(Args& a, const Io& io, const Layout& l, const Indices& x) {
  a.batch = io.seq_lens.size(0);
  a.num_heads = io.q.size(1);
  a.num_kv_heads = l.c.kv_heads;
  a.head_dim = l.c.head_dim;
  a.head_dim_v = l.c.head_dim_v;
  a.q = io.q.const_data_ptr();
  a.o = io.out.data_ptr();
  a.cache = make_cache(io, l, x.table);
  a.req_pool_indices = x.rpi_p();
  a.seq_lens = x.lens_p();
  a.sm_scale = static_cast<float>(io.sm_scale);
  a.logit_cap = static_cast<float>(io.logit_cap);
  a.window = io.window;
  a.sinks = x.sinks ? x.sinks->const_data_ptr<float>() : nullptr;
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
  const Io io{{"query", "batch", "k_cache", "v_cache", "output", "key", "value",
               " (the new token's K/V, written at loc) or neither (already in the cache)"},
              query, k_cache, v_cache, k_scale, v_scale, k_scales, v_scales, output, key,
              value, req_to_token, req_pool_indices, seq_lens, sinks, sm_scale, logit_cap,
              window};
  // The new token's K/V given (check_io: both or neither): written into the caches.
  const bool write = key.has_value();
  const std::vector<Named> tensors =
      io_tensors(io, {{"attn_logits", &attn_logits, true}}, write, {"loc", &loc, false}, {});
  if (!meta) attn::check_all_cpu(op, tensors);
  {  // The checks that need only devices, dtypes, shapes (SymInts) and scalars.
    attn::check_no_cross_attention(op, is_cross_attention, encoder_lens);
    check_io(op, io);
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
    check_options(op, io);
  }
  if (meta) return;

  const Layout l = check_io_layout(op, io, write);
  TORCH_CHECK_VALUE(attn_logits.is_contiguous(), op, ": attn_logits (", describe(attn_logits),
                    ") is not contiguous; expected a contiguous scratch tensor");
  const Indices x = check_indices(
      op, io, l, tensors,
      // MLA pools keep V as a view of K's first head_dim_v elements (and SGLang passes
      // value = key[..., :head_dim_v]): V is written after K, with the same data.
      int8 ? std::vector<std::pair<const char*, const char*>>{}
           : std::vector<std::pair<const char*, const char*>>{{"k_cache", "v_cache"}},
      "loc", &loc);

  // Index values: everything the kernels or the writes will dereference.
  const std::int64_t batch = query.size(0);
  const std::int64_t* lens_p = x.lens_p();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = lens_p[b];
    const std::int64_t lo = write ? 1 : 0;
    TORCH_CHECK_VALUE(len >= lo && len <= x.table.cols, op, ": seq_lens[", b, "] is ", len,
                      "; expected a length in [", lo, ", ", x.table.cols,
                      "] (req_to_token.size(1))",
                      write ? "; with key given it counts the new token" : "");
    const std::int64_t start = window > 0 ? std::max<std::int64_t>(0, len - window) : 0;
    attn::check_table_entries(op, x.table, b, x.rpi_p()[b], start, len, l.c.tokens, "k_cache");
  }

  if (batch == 0) return;
  if (write) {
    if (int8) {
      quantize_rows(k_cache, *k_scales, *key, x.loc);
      quantize_rows(v_cache, *v_scales, *value, x.loc);
    } else {
      write_rows(k_cache, *key, k_scale, x.loc);
      write_rows(v_cache, *value, v_scale, x.loc);
    }
  }

  rvvk::DecodeAttentionArgs a;
  set_common_args(a, io, l, x);
  const std::int64_t splits = attn_logits.size(2);
  a.num_splits = splits;
  a.q_dtype = l.dtype;
  a.q_stride_b = query.stride(0);
  a.q_stride_h = query.stride(1);
  a.o_dtype = l.dtype;
  a.o_stride_b = output.stride(0);
  a.o_stride_h = output.stride(1);
  a.partial = attn_logits.data_ptr<float>();

  // Split tasks handed out one at a time as threads take them: tasks over randomly placed
  // rows take uneven times, so static halves leave one thread waiting.
  run_as_taken(rvvk::decode_attention_partial_tasks(a), 1,
               [&](std::int64_t begin, std::int64_t end) {
                 rvvk::decode_attention_partial(a, begin, end);
               });
  // A merge task reads num_splits x (head_dim_v + 1) floats: group small ones.
  const std::int64_t merge_grain =
      std::max<std::int64_t>(1, 8192 / (splits * (l.c.head_dim_v + 1)));
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
  const Io io{{"q_extend", "tokens", "k_buffer", "v_buffer", "o_extend", "k_extend", "v_extend",
               ", or neither (the new tokens' K/V are then read from the cache)"},
              q_extend, k_buffer, v_buffer, k_scale, v_scale, k_scales, v_scales, o_extend,
              k_extend, v_extend, req_to_token, req_pool_indices, seq_lens, sinks, sm_scale,
              logit_cap, window, !int8};
  // k_extend / v_extend given (check_io: both or neither); the INT8 op then writes them
  // into the cache at out_cache_loc.
  const bool given = k_extend.has_value();
  const bool write = int8 && given;
  const std::vector<Named> tensors =
      io_tensors(io, {}, write, {"out_cache_loc", out_cache_loc, false},
                 {{"extend_seq_lens", &extend_seq_lens, false},
                  {"extend_start_loc", &extend_start_loc, false}});
  if (!meta) attn::check_all_cpu(op, tensors);
  {  // The checks that need only devices, dtypes, shapes (SymInts) and scalars.
    attn::check_no_cross_attention(op, is_cross_attention, encoder_lens);
    check_supported(op, !tree_mask.has_value(), "tree_mask",
                    "a custom attention mask (speculative decoding with a token tree)");
    check_io(op, io);
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
    check_options(op, io);
  }
  if (meta) return;

  const Layout l = check_io_layout(op, io, write);
  const Indices x = check_indices(op, io, l, tensors, {}, "out_cache_loc", out_cache_loc);
  const bool mla = mla_new_heads(io);
  const std::int64_t tokens = q_extend.size(0);
  const std::int64_t batch = seq_lens.size(0);
  const attn::TokenTable& table = x.table;
  const at::Tensor ext = index_vector(extend_seq_lens);
  const at::Tensor starts = index_vector(extend_start_loc);
  const std::int64_t* lens_p = x.lens_p();
  const std::int64_t* rpi_p = x.rpi_p();
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
    TORCH_CHECK_VALUE(!mla || prefix == 0, op, ": request ", b, " has a cached prefix of ",
                      prefix, " tokens (seq_lens ", len, ", extend_seq_lens ", n, ") but k_extend "
                      "has ", k_extend->size(1), " KV heads and k_buffer ", k_buffer.size(1),
                      "; expected no prefix in this layout (sgl-kernel's MLA extend: the new "
                      "tokens attend to each other only) or k_extend with the cache's heads");
    const std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, prefix - window + 1) : 0;
    // Without k_extend the new tokens' K/V are gathered from the cache as well.
    attn::check_table_entries(op, table, b, rpi_p[b], lo, given ? prefix : len, l.c.tokens,
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
    quantize_rows(k_buffer, *k_scales, *k_extend, x.loc);
    quantize_rows(v_buffer, *v_scales, *v_extend, x.loc);
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
    k_new = at::zeros({tokens, l.c.kv_heads, l.c.head_dim}, opts);
    v_new = at::zeros({tokens, l.c.kv_heads, l.c.head_dim_v}, opts);
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
  set_common_args(a, io, l, x);
  a.max_extend_len = max_ext;
  a.dtype = l.dtype;
  a.q_stride_t = q_extend.stride(0);
  a.q_stride_h = q_extend.stride(1);
  a.k = k_new.const_data_ptr();
  a.k_stride_t = k_new.stride(0);
  a.k_stride_h = k_new.stride(1);
  a.v = v_new.const_data_ptr();
  a.v_stride_t = v_new.stride(0);
  a.v_stride_h = v_new.stride(1);
  a.o_stride_t = o_extend.stride(0);
  a.o_stride_h = o_extend.stride(1);
  if (mla) a.num_kv_heads = k_new.size(1);  // the cache is not read (no prefixes)
  a.extend_seq_lens = ext_p;
  a.extend_start_loc = start_p;
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
