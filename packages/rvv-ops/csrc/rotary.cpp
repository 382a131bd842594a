// sgl_kernel::rotary_embedding_cpu, apply_rotary_pos_emb_cpu and
// multimodal_rotary_embedding_cpu on rvv-kernels.
//
// Returns new tensors (query_out, key_out) and leaves query and key untouched. sgl-kernel's
// CPU op rotates 2-D query/key in place and returns them: a schema without alias
// annotations does not allow that (torch.compile and opcheck assume fresh outputs), and
// SGLang's call sites use only the returned tensors.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>
#include <utility>

#include "common.h"
#include "ops.h"

namespace rvv_ops {
namespace {

constexpr const char* kOp = "rotary_embedding_cpu";

// query or key: [tokens, heads * head_size], [tokens, heads, head_size], or (as sgl-kernel's
// CPU op takes them) [batch, seq, heads, head_size] with positions holding batch * seq
// positions in row-major (batch, seq) order.
void check_heads_shape(const char* arg, const at::Tensor& t, const c10::SymInt& tokens,
                       std::int64_t head_size) {
  TORCH_CHECK_VALUE(t.dim() >= 2 && t.dim() <= 4, kOp, ": ", arg, " (", describe(t), ") is ",
                    t.dim(), "-d; expected [tokens, heads * head_size], "
                    "[tokens, heads, head_size] or [batch, seq, heads, head_size]");
  if (t.dim() == 4) {
    TORCH_CHECK_VALUE(t.sym_size(0) * t.sym_size(1) == tokens, kOp, ": ", arg, " (",
                      describe(t), ") has batch * seq = ", t.sym_size(0) * t.sym_size(1),
                      " tokens; expected positions.numel() = ", tokens);
  } else {
    TORCH_CHECK_VALUE(t.sym_size(0) == tokens, kOp, ": ", arg, " (", describe(t), ") has ",
                      t.sym_size(0), " tokens; expected positions.numel() = ", tokens);
  }
  if (t.dim() == 2) {
    TORCH_CHECK_VALUE(t.sym_size(1) % head_size == 0, kOp, ": ", arg, " (", describe(t),
                      ") has a last dimension of ", t.sym_size(1),
                      ", not a multiple of head_size = ", head_size);
  } else {
    TORCH_CHECK_VALUE(t.sym_size(-1) == head_size, kOp, ": ", arg, " (", describe(t),
                      ") has heads of size ", t.sym_size(-1), "; expected head_size = ",
                      head_size);
  }
}

// A 4-D query must come with a 4-D key of the same [batch, seq] (sgl-kernel reads both
// tensors' layout from query's rank), and a 4-D key with a 4-D query.
void check_batch_seq(const at::Tensor& query, const at::Tensor& key) {
  if (query.dim() != 4 && key.dim() != 4) return;
  TORCH_CHECK_VALUE(query.dim() == 4 && key.dim() == 4, kOp, ": query (", describe(query),
                    ") and key (", describe(key), ") are ", query.dim(), "-d and ", key.dim(),
                    "-d; expected both [batch, seq, heads, head_size] when either is 4-d");
  TORCH_CHECK_VALUE(query.sym_size(0) == key.sym_size(0) && query.sym_size(1) == key.sym_size(1),
                    kOp, ": key (", describe(key), ") has [batch, seq] = [", key.sym_size(0),
                    ", ", key.sym_size(1), "]; expected query's [", query.sym_size(0), ", ",
                    query.sym_size(1), "]");
}

// The checks shared with the Meta kernel (common.h).
rvvk::DType check_args(const at::Tensor& positions, const at::Tensor& query,
                       const at::Tensor& key, std::int64_t head_size,
                       const at::Tensor& cos_sin_cache) {
  check_same_device(kOp, "positions", positions, "query", query);
  check_same_device(kOp, "key", key, "query", query);
  check_same_device(kOp, "cos_sin_cache", cos_sin_cache, "query", query);
  TORCH_CHECK_TYPE(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt,
                   kOp, ": positions has dtype ", dtype_name(positions.scalar_type()),
                   "; expected torch.int64 or torch.int32");
  const rvvk::DType dtype = kernel_dtype(kOp, "query", query);
  check_same_dtype(kOp, "key", key, "query", query);
  TORCH_CHECK_TYPE(cos_sin_cache.scalar_type() == query.scalar_type() ||
                       cos_sin_cache.scalar_type() == at::kFloat,
                   kOp, ": cos_sin_cache has dtype ", dtype_name(cos_sin_cache.scalar_type()),
                   "; expected query's dtype ", dtype_name(query.scalar_type()),
                   " or torch.float32");
  TORCH_CHECK_VALUE(positions.dim() == 1, kOp, ": positions (", describe(positions), ") is ",
                    positions.dim(), "-d; expected a 1-D tensor of token positions");
  TORCH_CHECK_VALUE(head_size > 0, kOp, ": head_size is ", head_size, "; expected > 0");
  TORCH_CHECK_VALUE(cos_sin_cache.dim() == 2, kOp, ": cos_sin_cache (", describe(cos_sin_cache),
                    ") is ", cos_sin_cache.dim(), "-d; expected [max_position, rotary_dim]");
  const c10::SymInt rotary_dim = cos_sin_cache.sym_size(1);
  TORCH_CHECK_VALUE(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_size, kOp,
                    ": cos_sin_cache (", describe(cos_sin_cache), ") has rotary_dim ",
                    rotary_dim, "; expected an even number in [2, head_size = ", head_size,
                    "] (cos half, then sin half)");
  check_heads_shape("query", query, positions.sym_numel(), head_size);
  check_heads_shape("key", key, positions.sym_numel(), head_size);
  check_batch_seq(query, key);
  return dtype;
}

// Heads and strides of query or key, after check_heads_shape.
struct HeadsView {
  std::int64_t heads = 0, stride_t = 0, stride_h = 0;
};

void check_last_dim_contiguous(const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1, kOp, ": ", arg, " (", describe(t),
                    ") has a last-dimension stride of ", t.stride(-1),
                    "; expected 1 (call .contiguous() first)");
}

// t: 2-D or 3-D (a 4-D query or key is flattened to 3-D first).
HeadsView heads_view(const at::Tensor& t, std::int64_t head_size) {
  TORCH_INTERNAL_ASSERT(t.dim() == 2 || t.dim() == 3);
  HeadsView v;
  v.stride_t = t.stride(0);
  v.heads = t.dim() == 2 ? t.size(1) / head_size : t.size(1);
  v.stride_h = t.dim() == 2 ? head_size : t.stride(1);
  return v;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rotary_embedding_cpu(bool meta, const at::Tensor& positions,
                                                        const at::Tensor& query,
                                                        const at::Tensor& key,
                                                        std::int64_t head_size,
                                                        const at::Tensor& cos_sin_cache,
                                                        bool is_neox) {
  if (!meta) {
    check_cpu(kOp, "positions", positions);
    check_cpu(kOp, "query", query);
    check_cpu(kOp, "key", key);
    check_cpu(kOp, "cos_sin_cache", cos_sin_cache);
  }
  const rvvk::DType dtype = check_args(positions, query, key, head_size, cos_sin_cache);
  if (meta) {
    return {at::empty_symint(query.sym_sizes(), query.options()),
            at::empty_symint(key.sym_sizes(), key.options())};
  }
  TORCH_CHECK_VALUE(cos_sin_cache.stride(1) == 1, kOp, ": cos_sin_cache (",
                    describe(cos_sin_cache), ") has a last-dimension stride of ",
                    cos_sin_cache.stride(1), "; expected 1 (call .contiguous() first)");
  const std::int64_t rotary_dim = cos_sin_cache.size(1);
  const std::int64_t tokens = positions.numel();
  // [batch, seq, heads, head_size] is read as [batch * seq, heads, head_size]: a view when
  // batch and seq collapse into one token stride, else a copy (the op is out-of-place).
  check_last_dim_contiguous("query", query);
  check_last_dim_contiguous("key", key);
  const at::Tensor q_in = query.dim() == 4 ? query.flatten(0, 1) : query;
  const at::Tensor k_in = key.dim() == 4 ? key.flatten(0, 1) : key;
  const HeadsView q = heads_view(q_in, head_size);
  const HeadsView k = heads_view(k_in, head_size);

  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const std::int64_t* p = pos.data_ptr<std::int64_t>();
  const std::int64_t max_pos = cos_sin_cache.size(0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK_VALUE(p[t] >= 0 && p[t] < max_pos, kOp, ": positions[", t, "] is ", p[t],
                      "; expected 0 <= position < cos_sin_cache.size(0) = ", max_pos);
  }

  at::Tensor query_out = at::empty(query.sizes(), query.options());
  at::Tensor key_out = at::empty(key.sizes(), key.options());
  if (tokens == 0) return {query_out, key_out};

  rvvk::RotaryArgs base;
  base.head_size = head_size;
  base.rotary_dim = rotary_dim;
  base.neox = is_neox;
  base.dtype = dtype;
  base.cache_dtype =
      cos_sin_cache.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dtype;
  base.cos_sin_cache = cos_sin_cache.data_ptr();
  base.cache_stride = cos_sin_cache.stride(0);
  base.positions = p;
  // query or key (heads `v`, data x) into out, contiguous.
  const auto args_for = [&](const HeadsView& v, const at::Tensor& x, const at::Tensor& out) {
    rvvk::RotaryArgs a = base;
    a.heads = v.heads;
    a.x = x.data_ptr();
    a.x_stride_t = v.stride_t;
    a.x_stride_h = v.stride_h;
    a.out = out.data_ptr();
    a.out_stride_t = v.heads * head_size;
    a.out_stride_h = head_size;
    return a;
  };
  const rvvk::RotaryArgs qa = args_for(q, q_in, query_out);
  const rvvk::RotaryArgs ka = args_for(k, k_in, key_out);

  // One token of a small model is ~2K elements: threads only pay off for many tokens.
  parallel_rows(tokens, (q.heads + k.heads) * head_size, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rotary_embedding(qa, begin, end);
    rvvk::rotary_embedding(ka, begin, end);
  });
  return {query_out, key_out};
}

// apply_rotary_pos_emb_cpu: SGLang's apply_rotary_pos_emb with per-token cos/sin rows (its
// apply_rotary_pos_emb_native_eager: x * cos + rotate_half(x) * sin in fp32, rounded once),
// query [T, Hq, D] and key [T, Hk, D] (GQA: Hk may differ from Hq), cos and sin [T, D].
// Returns new contiguous tensors.
namespace {

constexpr const char* kApplyRope = "apply_rotary_pos_emb_cpu";

rvvk::DType check_apply_rope_args(const at::Tensor& query, const at::Tensor& key,
                                  const at::Tensor& cos, const at::Tensor& sin) {
  const char* op = kApplyRope;
  check_same_device(op, "key", key, "query", query);
  check_same_device(op, "cos", cos, "query", query);
  check_same_device(op, "sin", sin, "query", query);
  const rvvk::DType dtype = kernel_dtype(op, "query", query);
  check_same_dtype(op, "key", key, "query", query);
  kernel_dtype(op, "cos", cos);
  check_same_dtype(op, "sin", sin, "cos", cos);
  TORCH_CHECK_VALUE(query.dim() == 3, op, ": query (", describe(query), ") is ", query.dim(),
                    "-d; expected [tokens, heads, head_size]");
  TORCH_CHECK_VALUE(key.dim() == 3, op, ": key (", describe(key), ") is ", key.dim(),
                    "-d; expected [tokens, kv_heads, head_size]");
  TORCH_CHECK_VALUE(cos.dim() == 2, op, ": cos (", describe(cos), ") is ", cos.dim(),
                    "-d; expected [tokens, head_size]");
  TORCH_CHECK_VALUE(sin.dim() == 2, op, ": sin (", describe(sin), ") is ", sin.dim(),
                    "-d; expected [tokens, head_size]");
  const c10::SymInt tokens = query.sym_size(0);
  const c10::SymInt head_size = query.sym_size(2);
  TORCH_CHECK_VALUE(head_size % 2 == 0, op, ": query (", describe(query),
                    ") has an odd head_size ", head_size,
                    "; expected an even size (rotate_half pairs the two halves)");
  const std::pair<const char*, const at::Tensor*> others[] = {
      {"key", &key}, {"cos", &cos}, {"sin", &sin}};
  for (const auto& [arg, t] : others) {
    TORCH_CHECK_VALUE(t->sym_size(0) == tokens, op, ": ", arg, " (", describe(*t), ") has ",
                      t->sym_size(0), " tokens; expected query.size(0) = ", tokens);
    TORCH_CHECK_VALUE(t->sym_size(-1) == head_size, op, ": ", arg, " (", describe(*t),
                      ") has a last dimension of ", t->sym_size(-1),
                      "; expected query's head_size = ", head_size);
  }
  return dtype;
}

// The row stride of cos or sin, after a contiguous copy when its last dimension is not
// contiguous.
std::int64_t cos_rows(at::Tensor& t) {
  if (t.size(1) > 1 && t.stride(1) != 1) t = t.contiguous();
  return t.stride(0);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> apply_rotary_pos_emb_cpu(bool meta, const at::Tensor& query,
                                                            const at::Tensor& key,
                                                            const at::Tensor& cos,
                                                            const at::Tensor& sin) {
  const char* op = kApplyRope;
  if (!meta) {
    check_cpu(op, "query", query);
    check_cpu(op, "key", key);
    check_cpu(op, "cos", cos);
    check_cpu(op, "sin", sin);
  }
  const rvvk::DType dtype = check_apply_rope_args(query, key, cos, sin);
  if (meta) {
    return {at::empty_symint(query.sym_sizes(), query.options()),
            at::empty_symint(key.sym_sizes(), key.options())};
  }
  at::Tensor query_out = at::empty(query.sizes(), query.options());
  at::Tensor key_out = at::empty(key.sizes(), key.options());
  const std::int64_t tokens = query.size(0), head_size = query.size(2);
  if (tokens == 0 || head_size == 0) return {query_out, key_out};
  // Inputs are only read: a last dimension that is not contiguous is read from a copy.
  const at::Tensor q_in = query.stride(2) == 1 ? query : query.contiguous();
  const at::Tensor k_in = key.stride(2) == 1 ? key : key.contiguous();
  at::Tensor c = cos, s = sin;
  rvvk::RotaryPosEmbArgs base;
  base.head_size = head_size;
  base.dtype = dtype;
  base.cos_dtype = kernel_dtype(op, "cos", cos);
  base.cos_stride_t = cos_rows(c);
  base.sin_stride_t = cos_rows(s);
  base.cos = c.data_ptr();
  base.sin = s.data_ptr();
  const auto args_for = [&](const at::Tensor& x, const at::Tensor& out) {
    rvvk::RotaryPosEmbArgs a = base;
    a.heads = x.size(1);
    a.x = x.data_ptr();
    a.x_stride_t = x.stride(0);
    a.x_stride_h = x.stride(1);
    a.out = out.data_ptr();
    a.out_stride_t = out.stride(0);
    a.out_stride_h = out.stride(1);
    return a;
  };
  const rvvk::RotaryPosEmbArgs qa = args_for(q_in, query_out);
  const rvvk::RotaryPosEmbArgs ka = args_for(k_in, key_out);
  const std::int64_t per_token = (query.size(1) + key.size(1)) * head_size;
  parallel_rows(tokens, per_token, [&](std::int64_t begin, std::int64_t end) {
    rvvk::rotary_pos_emb(qa, begin, end);
    rvvk::rotary_pos_emb(ka, begin, end);
  });
  return {query_out, key_out};
}

// multimodal_rotary_embedding_cpu: M-RoPE (Qwen2-VL / Qwen3-VL / Qwen3.5), in place on
// query [T, Hq * head_size] and key [T, Hk * head_size]. positions [T]: the ordinary rotary
// embedding. positions [3, T] (temporal, height, width): element j < rotary_dim / 2 of the
// cos and sin halves comes from the cache row of positions[sel(j), t], where sel(j) is the
// section j falls in (mrope_section [t, h, w], consecutive), or, interleaved (Qwen3-VL), 1
// for j % 3 == 1 and j < 3 h, 2 for j % 3 == 2 and j < 3 w, else 0 (SGLang's
// apply_interleaved_rope). The op gathers those rows into a per-token table, then runs the
// rotary kernel on it.
namespace {

constexpr const char* kMrope = "multimodal_rotary_embedding_cpu";

void check_mrope_rows(const char* arg, const at::Tensor& t, const c10::SymInt& tokens,
                      std::int64_t head_size) {
  TORCH_CHECK_VALUE(t.dim() == 2, kMrope, ": ", arg, " (", describe(t), ") is ", t.dim(),
                    "-d; expected [tokens, heads * head_size]");
  TORCH_CHECK_VALUE(t.sym_size(0) == tokens, kMrope, ": ", arg, " (", describe(t), ") has ",
                    t.sym_size(0), " tokens; expected positions.size(-1) = ", tokens);
  TORCH_CHECK_VALUE(t.sym_size(1) % head_size == 0, kMrope, ": ", arg, " (", describe(t),
                    ") has a last dimension of ", t.sym_size(1),
                    ", not a multiple of head_size = ", head_size);
}

rvvk::DType check_mrope_args(const at::Tensor& positions, const at::Tensor& query,
                             const at::Tensor& key, std::int64_t head_size,
                             const at::Tensor& cos_sin_cache,
                             at::OptionalIntArrayRef mrope_section, bool interleaved) {
  const char* op = kMrope;
  check_same_device(op, "positions", positions, "query", query);
  check_same_device(op, "key", key, "query", query);
  check_same_device(op, "cos_sin_cache", cos_sin_cache, "query", query);
  TORCH_CHECK_TYPE(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt,
                   op, ": positions has dtype ", dtype_name(positions.scalar_type()),
                   "; expected torch.int64 or torch.int32");
  const rvvk::DType dtype = kernel_dtype(op, "query", query);
  check_same_dtype(op, "key", key, "query", query);
  TORCH_CHECK_TYPE(cos_sin_cache.scalar_type() == query.scalar_type() ||
                       cos_sin_cache.scalar_type() == at::kFloat,
                   op, ": cos_sin_cache has dtype ", dtype_name(cos_sin_cache.scalar_type()),
                   "; expected query's dtype ", dtype_name(query.scalar_type()),
                   " or torch.float32");
  TORCH_CHECK_VALUE(positions.dim() == 1 || (positions.dim() == 2 && positions.sym_size(0) == 3),
                    op, ": positions (", describe(positions),
                    ") is neither [tokens] nor [3, tokens] (temporal, height, width)");
  TORCH_CHECK_VALUE(head_size > 0, op, ": head_size is ", head_size, "; expected > 0");
  TORCH_CHECK_VALUE(cos_sin_cache.dim() == 2, op, ": cos_sin_cache (", describe(cos_sin_cache),
                    ") is ", cos_sin_cache.dim(), "-d; expected [max_position, rotary_dim]");
  const c10::SymInt rotary_dim = cos_sin_cache.sym_size(1);
  TORCH_CHECK_VALUE(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_size, op,
                    ": cos_sin_cache (", describe(cos_sin_cache), ") has rotary_dim ",
                    rotary_dim, "; expected an even number in [2, head_size = ", head_size,
                    "] (cos half, then sin half)");
  const c10::SymInt tokens = positions.sym_size(-1);
  check_mrope_rows("query", query, tokens, head_size);
  check_mrope_rows("key", key, tokens, head_size);
  if (positions.dim() == 2) {
    TORCH_CHECK_VALUE(mrope_section.has_value() && mrope_section->size() == 3, op,
                      ": mrope_section is ",
                      mrope_section.has_value() ? c10::str(*mrope_section) : std::string("None"),
                      "; expected three section sizes [t, h, w] with 2-D positions");
    std::int64_t sum = 0;
    for (const std::int64_t s : *mrope_section) {
      TORCH_CHECK_VALUE(s >= 0, op, ": mrope_section ", c10::str(*mrope_section),
                        " has a negative size");
      sum += s;
    }
    TORCH_CHECK_VALUE(interleaved || rotary_dim == 2 * sum, op, ": mrope_section ",
                      c10::str(*mrope_section), " sums to ", sum,
                      "; expected rotary_dim / 2 = ", rotary_dim / 2);
  }
  return dtype;
}

// Which of the three position rows element j < half of the cos/sin halves takes.
std::vector<std::int64_t> mrope_rows(at::IntArrayRef section, bool interleaved,
                                     std::int64_t half) {
  std::vector<std::int64_t> sel(static_cast<std::size_t>(half), 0);
  for (std::int64_t j = 0; j < half; ++j) {
    if (interleaved) {
      if (j % 3 == 1 && j < 3 * section[1]) sel[j] = 1;
      if (j % 3 == 2 && j < 3 * section[2]) sel[j] = 2;
    } else {
      sel[j] = j < section[0] ? 0 : j < section[0] + section[1] ? 1 : 2;
    }
  }
  return sel;
}

}  // namespace

void multimodal_rotary_embedding_cpu(bool meta, const at::Tensor& positions, at::Tensor& query,
                                     at::Tensor& key, std::int64_t head_size,
                                     const at::Tensor& cos_sin_cache,
                                     at::OptionalIntArrayRef mrope_section,
                                     bool mrope_interleaved, bool is_neox) {
  const char* op = kMrope;
  if (!meta) {
    check_cpu(op, "positions", positions);
    check_cpu(op, "query", query);
    check_cpu(op, "key", key);
    check_cpu(op, "cos_sin_cache", cos_sin_cache);
  }
  const rvvk::DType dtype = check_mrope_args(positions, query, key, head_size, cos_sin_cache,
                                             mrope_section, mrope_interleaved);
  if (meta) return;
  // query and key are written in place: walked as they are.
  TORCH_CHECK_VALUE(cos_sin_cache.stride(1) == 1, op, ": cos_sin_cache (",
                    describe(cos_sin_cache), ") has a last-dimension stride of ",
                    cos_sin_cache.stride(1), "; expected 1 (call .contiguous() first)");
  rvv_ops::check_last_dim_contiguous(op, "query", query);
  rvv_ops::check_last_dim_contiguous(op, "key", key);
  check_rows_disjoint(op, "query", query, query.stride(0));
  check_rows_disjoint(op, "key", key, key.stride(0));
  const std::int64_t tokens = positions.size(-1);
  const std::int64_t rotary_dim = cos_sin_cache.size(1), half = rotary_dim / 2;
  const std::int64_t max_pos = cos_sin_cache.size(0);
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const std::int64_t* p = pos.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < pos.numel(); ++i) {
    TORCH_CHECK_VALUE(p[i] >= 0 && p[i] < max_pos, op, ": positions",
                      positions.dim() == 2 ? c10::str("[", i / tokens, ", ", i % tokens, "]")
                                           : c10::str("[", i, "]"),
                      " is ", p[i], "; expected 0 <= position < cos_sin_cache.size(0) = ",
                      max_pos);
  }
  if (tokens == 0 || query.numel() + key.numel() == 0) return;

  rvvk::RotaryArgs base;
  base.head_size = head_size;
  base.rotary_dim = rotary_dim;
  base.neox = is_neox;
  base.dtype = dtype;
  base.cache_dtype = cos_sin_cache.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dtype;
  // 1-D positions index the cache; 2-D ones index a table gathered per token, row t.
  at::Tensor table;
  std::vector<std::int64_t> iota;
  if (positions.dim() == 1) {
    base.cos_sin_cache = cos_sin_cache.data_ptr();
    base.cache_stride = cos_sin_cache.stride(0);
    base.positions = p;
  } else {
    const std::vector<std::int64_t> sel = mrope_rows(*mrope_section, mrope_interleaved, half);
    table = at::empty({tokens, rotary_dim}, cos_sin_cache.options());
    const std::size_t esize = cos_sin_cache.element_size();
    const char* cache = static_cast<const char*>(cos_sin_cache.data_ptr());
    char* dst = static_cast<char*>(table.data_ptr());
    const std::int64_t cs = cos_sin_cache.stride(0);
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t j = 0; j < half; ++j) {
        const char* row = cache + p[sel[j] * tokens + t] * cs * static_cast<std::int64_t>(esize);
        char* out = dst + t * rotary_dim * static_cast<std::int64_t>(esize);
        std::memcpy(out + j * esize, row + j * esize, esize);
        std::memcpy(out + (half + j) * esize, row + (half + j) * esize, esize);
      }
    }
    iota.resize(static_cast<std::size_t>(tokens));
    std::iota(iota.begin(), iota.end(), std::int64_t{0});
    base.cos_sin_cache = table.data_ptr();
    base.cache_stride = rotary_dim;
    base.positions = iota.data();
  }
  const auto args_for = [&](at::Tensor& x) {
    rvvk::RotaryArgs a = base;
    a.heads = x.size(1) / head_size;
    a.x = x.data_ptr();
    a.out = x.data_ptr();
    a.x_stride_t = a.out_stride_t = x.stride(0);
    a.x_stride_h = a.out_stride_h = head_size;
    return a;
  };
  const rvvk::RotaryArgs qa = args_for(query);
  const rvvk::RotaryArgs ka = args_for(key);
  parallel_rows(tokens, query.size(1) + key.size(1), [&](std::int64_t begin, std::int64_t end) {
    rvvk::rotary_embedding(qa, begin, end);
    rvvk::rotary_embedding(ka, begin, end);
  });
}

}  // namespace rvv_ops
