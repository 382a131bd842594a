// sgl_kernel::bmm_cpu, qkv_proj_with_rope and qkv_proj_with_rope_fused_weight: the ops of
// SGLang 0.5.23's CPU multi-head latent attention (models/deepseek_common/
// attention_forward_methods/forward_mla_fused_rope_cpu.py), composed from rvv-kernels'
// linear, int8 linear, FP8 linear, RMSNorm and RoPE kernels; no kernel of their own.
//
// bmm_cpu(out, mat1, mat2, is_vnni, scale): out[b] = mat1[b] @ mat2[b]^T for mat1 [B, M, K],
// mat2 [B, N, K] (packed by convert_weight_packed on the 3-D tensor when is_vnni, one packed
// weight per batch slice) and out [B, M, N]; out and mat1 may be strided views with a
// contiguous last dimension (SGLang passes transposes of [M, B, *] tensors); an out that
// shares memory with an input is computed into a new tensor and copied. With `scale` (a
// one-element fp32 tensor) mat2 is fp8 e4m3 and the product is scaled by it (per-tensor FP8
// W8A16). fp32 accumulation, one rounding to out's dtype.
//
// qkv_proj_with_rope: MLA's query / key preparation with the absorbed k-up projection, for
// hidden_states [T, hidden]:
//   qa = dtype(hidden @ q_a_proj^T)                       [T, q_lora_rank]
//   kv = dtype(hidden @ kv_a_proj^T)                      [T, kv_lora_rank + rope]
//   qa = dtype(rmsnorm(qa, q_a_layernorm_weight))
//   qb = dtype(qa @ q_b_proj^T) as [T, H, nope + rope]
//   q_input[:, h, :kv_lora_rank] = dtype(qb[:, h, :nope] @ w_kc[h]^T)   (w_kc [H, kv_lora, nope])
//   q_input[:, :, kv_lora_rank:] = rope(qb[:, :, nope:])
//   k_input[:, 0, :kv_lora_rank] = dtype(rmsnorm(kv[:, :kv_lora_rank], kv_a_layernorm_weight))
//   k_input[:, 0, kv_lora_rank:] = rope(kv[:, kv_lora_rank:])
//   v_input = k_input[..., :kv_lora_rank] (sgl-kernel: a view of k_input; here a copy with
//             that view's shape and strides, see mla_outputs)
// RoPE in the GPT-J layout (pairs 2j, 2j + 1; cos_sin_cache [max_position, rope]: cos half,
// then sin half), the rounding points those of sgl-kernel. W8A8 (use_int8_w8a8): the three
// projections are int8 with per-channel scales, their inputs quantised per row; w_kc stays
// float. FP8 W8A16 (use_fp8_w8a16): they are fp8 e4m3 with block scales (block_size).
// qkv_proj_with_rope_fused_weight takes q_a_proj and kv_a_proj as one weight (rows
// q_lora_rank + kv_lora_rank + rope; fp8 scales: each part's blocks) and the ranks
// explicitly. Both take w_kc in fp8 e4m3 with its per-tensor w_scale.
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "ops.h"
#include "packed_weight.h"

namespace rvv_ops {
namespace {

// The K a packed tensor's header claims, if it holds one (else `fallback`): lets the header
// be validated by packed_header before K is compared with a message of our own.
std::int64_t header_k(const at::Tensor& w, std::int64_t fallback) {
  if (!w.is_contiguous() || w.numel() * static_cast<std::int64_t>(w.element_size()) <
                                rvvk::kPackedWeightHeaderBytes) {
    return fallback;
  }
  rvvk::PackedWeightHeader h;
  std::memcpy(&h, w.data_ptr(), sizeof h);
  return h.magic == rvvk::kPackedWeightMagic ? h.k : fallback;
}

// The header of packed 2-D weight w, checked against it and against K = k (`k_what` names
// where k comes from).
rvvk::PackedWeightHeader checked_header(const char* op, const char* arg, const at::Tensor& w,
                                        rvvk::DType dt, std::int64_t k, const std::string& k_what) {
  const rvvk::PackedWeightHeader h = packed_header(op, arg, w, dt, header_k(w, k));
  TORCH_CHECK_VALUE(h.k == k, op, ": ", arg, " was packed for K = ", h.k,
                    " input channels; expected ", k_what, " = ", k);
  return h;
}

// A 2-D weight as the kernels read it: packed (is_vnni: w itself; else packed here).
struct Packed2 {
  at::Tensor packed;
  rvvk::PackedWeightHeader h;
};

Packed2 packed2(const char* op, const char* arg, const at::Tensor& w, rvvk::DType dt,
                std::int64_t k, const std::string& k_what, bool is_vnni) {
  Packed2 p;
  p.packed = is_vnni ? w : pack(op, w, dt);
  p.h = checked_header(op, arg, p.packed, dt, k, k_what);
  return p;
}

// A batch of weights [B, N, K] as the kernels read them: packed per slice (is_vnni: w is
// convert_weight_packed's 3-D result; else packed here). Every slice's header is the same.
struct Packed3 {
  at::Tensor packed;
  rvvk::PackedWeightHeader h;
  std::int64_t slice_bytes = 0;
  const char* slice(std::int64_t b) const {
    return static_cast<const char*>(packed.data_ptr()) + b * slice_bytes;
  }
};

Packed3 packed3(const char* op, const char* arg, const at::Tensor& w, rvvk::DType dt,
                std::int64_t k, const std::string& k_what, bool is_vnni) {
  Packed3 p;
  if (is_vnni) {
    TORCH_CHECK_VALUE(w.is_contiguous() &&
                          reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 4 == 0 &&
                          w.stride(0) * static_cast<std::int64_t>(w.element_size()) % 4 == 0,
                      op, ": ", arg, " (", describe(w),
                      ") is not contiguous with 4-byte aligned slices; expected the tensor "
                      "convert_weight_packed returns for the 3-D weight [B, N, K]");
    p.packed = w;
  } else {
    p.packed = pack3(op, w, dt);
  }
  p.slice_bytes = p.packed.stride(0) * static_cast<std::int64_t>(p.packed.element_size());
  p.h = checked_header(op, arg, p.packed[0], dt, k, k_what);
  for (std::int64_t b = 1; b < p.packed.size(0); ++b) {
    TORCH_CHECK_VALUE(
        std::memcmp(p.slice(0), p.slice(b), rvvk::kPackedWeightHeaderBytes) == 0, op, ": ",
        arg, "[", b, "] has a packed-weight header unlike ", arg,
        "[0]'s; expected every slice packed by one convert_weight_packed call");
  }
  return p;
}

// fn(begin, end) over `tasks` tasks of `macs` multiply-adds each, in chunks of at least
// kMinMacsPerTask.
template <class Fn>
void parallel_tasks(std::int64_t tasks, std::int64_t macs, const Fn& fn) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kMinMacsPerTask / std::max<std::int64_t>(macs, 1));
  at::parallel_for(0, tasks, grain, fn);
}

// out[b] (rows m, row stride out_stride, at out + b * out_batch elements) =
// x[b] @ W[b]^T for batches [0, batches): one task per (batch, panel). W[b] a float packed
// weight, or (fp8_scales: [1, N] fp32, one per-tensor scale repeated) an fp8 e4m3 one
// scaled per tensor (the FP8 kernel with one k block).
void batched_linear(const Packed3& w, std::int64_t batches, std::int64_t m, rvvk::DType x_dtype,
                    const char* x, std::int64_t x_stride, std::int64_t x_batch,
                    std::int64_t x_elem, rvvk::DType out_dtype, char* out,
                    std::int64_t out_stride, std::int64_t out_batch, std::int64_t out_elem,
                    const float* fp8_scales = nullptr) {
  if (batches == 0 || m == 0) return;
  const std::int64_t panels = rvvk::linear_tasks(w.h);
  parallel_tasks(batches * panels, m * w.h.k * w.h.panel, [&](std::int64_t begin,
                                                               std::int64_t end) {
    for (std::int64_t t = begin; t < end;) {
      const std::int64_t b = t / panels, p0 = t % panels;
      const std::int64_t p1 = std::min(panels, p0 + (end - t));
      if (fp8_scales != nullptr) {
        rvvk::Fp8LinearArgs a;
        a.m = m;
        a.x_dtype = x_dtype;
        a.x = x + b * x_batch * x_elem;
        a.x_stride = x_stride;
        a.packed = w.slice(b);
        a.scales = fp8_scales;
        a.block_k = w.h.k;
        a.out_dtype = out_dtype;
        a.out = out + b * out_batch * out_elem;
        a.out_stride = out_stride;
        rvvk::fp8_linear(a, p0, p1);
      } else {
        rvvk::LinearArgs a;
        a.m = m;
        a.x_dtype = x_dtype;
        a.x = x + b * x_batch * x_elem;
        a.x_stride = x_stride;
        a.packed = w.slice(b);
        a.out_dtype = out_dtype;
        a.out = out + b * out_batch * out_elem;
        a.out_stride = out_stride;
        rvvk::linear(a, p0, p1);
      }
      t += p1 - p0;
    }
  });
}

// ---------------------------------------------------------------------------------------
// bmm_cpu

constexpr const char* kBmm = "bmm_cpu";

void check_3d(const char* op, const char* arg, const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.dim() == 3, op, ": ", arg, " is ", t.dim(), "-d (", describe(t),
                    "); expected a 3-D tensor ", what);
}

// The checks of bmm_cpu shared with the Meta kernel.
void check_bmm(const at::Tensor& out, const at::Tensor& mat1, const at::Tensor& mat2,
               bool is_vnni, const std::optional<at::Tensor>& scale) {
  check_same_device(kBmm, "mat1", mat1, "out", out);
  check_same_device(kBmm, "mat2", mat2, "out", out);
  if (scale) check_same_device(kBmm, "scale", *scale, "out", out);
  check_3d(kBmm, "out", out, "[B, M, N]");
  check_3d(kBmm, "mat1", mat1, "[B, M, K]");
  check_3d(kBmm, "mat2", mat2,
           is_vnni ? "[B, N, X] (convert_weight_packed of a [B, N, K] weight)" : "[B, N, K]");
  kernel_dtype(kBmm, "mat1", mat1);
  check_same_dtype(kBmm, "out", out, "mat1", mat1);
  if (scale) {
    TORCH_CHECK_TYPE(mat2.scalar_type() == at::kFloat8_e4m3fn, kBmm, ": mat2 has dtype ",
                     dtype_name(mat2.scalar_type()),
                     "; expected torch.float8_e4m3fn when scale is given (FP8 W8A16)");
    TORCH_CHECK_TYPE(scale->scalar_type() == at::kFloat, kBmm, ": scale has dtype ",
                     dtype_name(scale->scalar_type()), "; expected torch.float32");
    TORCH_CHECK_VALUE(scale->sym_numel() == 1, kBmm, ": scale (", describe(*scale),
                      ") has ", scale->sym_numel(),
                      " elements; expected one per-tensor scale (a 0-d tensor)");
  } else {
    TORCH_CHECK_TYPE(mat2.scalar_type() != at::kFloat8_e4m3fn, kBmm,
                     ": mat2 has dtype torch.float8_e4m3fn but scale is None; expected the "
                     "per-tensor fp32 scale of the FP8 weight");
    weight_dtype(kBmm, "mat2", mat2, false, true);
  }
  const c10::SymInt& b = mat1.sym_size(0);
  TORCH_CHECK_VALUE(mat2.sym_size(0) == b && out.sym_size(0) == b, kBmm, ": out (",
                    describe(out), "), mat1 (", describe(mat1), ") and mat2 (", describe(mat2),
                    ") have batch sizes ", out.sym_size(0), ", ", b, ", ", mat2.sym_size(0),
                    "; expected one B");
  TORCH_CHECK_VALUE(out.sym_size(1) == mat1.sym_size(1), kBmm, ": out (", describe(out),
                    ") has M = ", out.sym_size(1), " rows; expected mat1.size(1) = ",
                    mat1.sym_size(1));
  TORCH_CHECK_VALUE(out.sym_size(2) == mat2.sym_size(1), kBmm, ": out (", describe(out),
                    ") has N = ", out.sym_size(2), " columns; expected mat2.size(1) = ",
                    mat2.sym_size(1));
  TORCH_CHECK_VALUE(mat1.sym_size(2) > 0 && mat2.sym_size(1) > 0, kBmm, ": mat1 (",
                    describe(mat1), ") and mat2 (", describe(mat2),
                    ") give K = ", mat1.sym_size(2), ", N = ", mat2.sym_size(1),
                    "; expected K >= 1 and N >= 1");
  if (!is_vnni) {
    TORCH_CHECK_VALUE(mat2.sym_size(2) == mat1.sym_size(2), kBmm, ": mat2 (", describe(mat2),
                      ") has K = ", mat2.sym_size(2), "; expected mat1.size(2) = ",
                      mat1.sym_size(2));
  }
}

void check_writable(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, op, ": ", arg, " (",
                    describe(t), ") has elements that share memory; expected a tensor that "
                    "can be written element by element");
}

// Whether the bytes a and b span intersect (then a written `a` may change a read `b`).
bool may_share(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto span = [](const at::Tensor& t) {
    const auto* p = static_cast<const char*>(t.data_ptr());
    std::int64_t last = 0;
    for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    return std::make_pair(p, p + (last + 1) * static_cast<std::int64_t>(t.element_size()));
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

void bmm_cpu(bool meta, at::Tensor& out, const at::Tensor& mat1, const at::Tensor& mat2,
             bool is_vnni, const std::optional<at::Tensor>& scale) {
  if (!meta) {
    check_cpu(kBmm, "out", out);
    check_cpu(kBmm, "mat1", mat1);
    check_cpu(kBmm, "mat2", mat2);
    if (scale) check_cpu(kBmm, "scale", *scale);
  }
  check_bmm(out, mat1, mat2, is_vnni, scale);
  if (meta) return;
  check_last_dim_contiguous(kBmm, "out", out);
  check_last_dim_contiguous(kBmm, "mat1", mat1);
  check_writable(kBmm, "out", out);
  const std::int64_t batches = mat1.size(0), m = mat1.size(1), k = mat1.size(2);
  if (batches == 0 || m == 0) return;
  // out sharing memory with an input: computed into a new tensor, then copied.
  if (may_share(out, mat1) || may_share(out, mat2)) {
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    bmm_cpu(false, tmp, mat1, mat2, is_vnni, scale);
    out.copy_(tmp);
    return;
  }
  const bool fp8 = scale.has_value();
  const rvvk::DType wdt =
      fp8 ? rvvk::DType::kFP8E4M3 : weight_dtype(kBmm, "mat2", mat2, false, true);
  const Packed3 w = packed3(kBmm, "mat2", mat2, wdt, k, "mat1.size(2)", is_vnni);
  const rvvk::DType dt = kernel_dtype(kBmm, "mat1", mat1);
  const std::int64_t elem = static_cast<std::int64_t>(mat1.element_size());
  const char* x = static_cast<const char*>(mat1.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  // A batch or row dimension of size 1 may carry any stride.
  const std::int64_t x_stride = m > 1 ? mat1.stride(1) : k;
  const std::int64_t o_stride = m > 1 ? out.stride(1) : w.h.n;
  // Per-tensor FP8: one scale for every channel.
  const at::Tensor scales =
      fp8 ? at::full({1, w.h.n}, scale->item<float>(), mat1.options().dtype(at::kFloat))
          : at::Tensor();
  batched_linear(w, batches, m, dt, x, x_stride, mat1.stride(0), elem, dt, o, o_stride,
                 out.stride(0), elem, fp8 ? scales.data_ptr<float>() : nullptr);
}

// ---------------------------------------------------------------------------------------
// qkv_proj_with_rope, qkv_proj_with_rope_fused_weight
namespace {

// The a-projection: two weights (qkv_proj_with_rope) or one fused (…_fused_weight).
struct AProj {
  const at::Tensor* q_a = nullptr;  // [q_lora, hidden] (packed: [q_lora, X])
  const at::Tensor* kv_a = nullptr;  // [kv_lora + rope, hidden]; null when fused
  const char* q_a_arg = "q_a_proj_weight";
  const char* kv_a_arg = "kv_a_proj_weight";
  const std::optional<at::Tensor>* q_a_scale = nullptr;
  const std::optional<at::Tensor>* kv_a_scale = nullptr;  // null when fused
  const char* q_a_scale_arg = "q_a_proj_scale";
  const char* kv_a_scale_arg = "kv_a_proj_scale";
};

// The MLA arguments shared by both ops.
struct MlaArgs {
  const at::Tensor* hidden = nullptr;
  AProj a;
  const at::Tensor* q_b = nullptr;
  const at::Tensor* w_kc = nullptr;
  const at::Tensor* q_a_ln = nullptr;
  const at::Tensor* kv_a_ln = nullptr;
  const at::Tensor* positions = nullptr;
  const at::Tensor* cos_sin = nullptr;
  double eps = 0;
  bool int8 = false, fp8 = false;
  const std::optional<at::Tensor>* q_b_scale = nullptr;
  const std::optional<at::Tensor>* w_scale = nullptr;
  bool is_vnni = true;
  at::OptionalIntArrayRef block_size;
};

// Dimensions, after the checks.
struct MlaDims {
  std::int64_t hidden = 0, q_lora = 0, kv_lora = 0, rope = 0, heads = 0, nope = 0;
};

// A size as a plain integer (a symbolic one is specialised: the weights' shapes are fixed).
std::int64_t dim_of(const at::Tensor& t, std::int64_t i) {
  return t.sym_size(i).guard_int(__FILE__, __LINE__);
}

void check_vector(const char* op, const char* arg, const at::Tensor& t, std::int64_t n,
                  const char* what) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.sym_size(0) == n, op, ": ", arg, " (", describe(t),
                    ") is not 1-D with ", n, " elements (", what, ")");
}

// A per-channel fp32 scale vector [n] or [n, 1].
void check_channel_scales(const char* op, const char* arg, const std::optional<at::Tensor>& s,
                          std::int64_t n, const char* which) {
  TORCH_CHECK_VALUE(s.has_value(), op, ": ", arg, " is None; expected the per-channel fp32 "
                    "scales of ", which, " (use_int8_w8a8=True)");
  TORCH_CHECK_TYPE(s->scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                   dtype_name(s->scalar_type()), "; expected torch.float32");
  TORCH_CHECK_VALUE(s->sym_numel() == n && (s->dim() == 1 || (s->dim() == 2 && s->sym_size(1) == 1)),
                    op, ": ", arg, " (", describe(*s), ") does not have ", n, " elements as [",
                    n, "] or [", n, ", 1] (one per output channel of ", which, ")");
}

// FP8 block scales: fp32 [rows, cols].
void check_block_scales(const char* op, const char* arg, const std::optional<at::Tensor>& s,
                        std::int64_t rows, std::int64_t cols, const char* what) {
  TORCH_CHECK_VALUE(s.has_value(), op, ": ", arg, " is None; expected the fp32 block scales "
                    "(use_fp8_w8a16=True)");
  TORCH_CHECK_TYPE(s->scalar_type() == at::kFloat, op, ": ", arg, " has dtype ",
                   dtype_name(s->scalar_type()), "; expected torch.float32");
  TORCH_CHECK_VALUE(s->dim() == 2 && s->sym_size(0) == rows && s->sym_size(1) == cols, op, ": ",
                    arg, " (", describe(*s), ") is not [", rows, ", ", cols, "] = [", what,
                    "]");
}

// w_kc: float, or fp8 e4m3 with the per-tensor w_scale.
void check_w_kc_dtype(const char* op, const MlaArgs& a) {
  const at::Tensor& w_kc = *a.w_kc;
  const bool has_scale = a.w_scale != nullptr && a.w_scale->has_value();
  if (!has_scale) {
    TORCH_CHECK_TYPE(w_kc.scalar_type() != at::kFloat8_e4m3fn, op,
                     ": w_kc has dtype torch.float8_e4m3fn but w_scale is None; expected its "
                     "per-tensor fp32 scale");
    weight_dtype(op, "w_kc", w_kc, false, true);
    return;
  }
  const at::Tensor& s = **a.w_scale;
  check_same_device(op, "w_scale", s, "hidden_states", *a.hidden);
  TORCH_CHECK_TYPE(w_kc.scalar_type() == at::kFloat8_e4m3fn, op, ": w_kc has dtype ",
                   dtype_name(w_kc.scalar_type()),
                   "; expected torch.float8_e4m3fn when w_scale is given");
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, op, ": w_scale has dtype ",
                   dtype_name(s.scalar_type()), "; expected torch.float32");
  TORCH_CHECK_VALUE(s.sym_numel() == 1, op, ": w_scale (", describe(s), ") has ", s.sym_numel(),
                    " elements; expected one per-tensor scale");
}

// A projection weight: dtype (float, int8 or fp8 by the mode), 2-D, N rows; plain ones [N, k].
void check_proj_weight(const char* op, const char* arg, const at::Tensor& w, std::int64_t n,
                       std::int64_t k, const char* k_what, const MlaArgs& a) {
  check_same_device(op, arg, w, "hidden_states", *a.hidden);
  weight_dtype(op, arg, w, a.int8, !a.int8 && !a.fp8, a.fp8);
  TORCH_CHECK_VALUE(w.dim() == 2, op, ": ", arg, " is ", w.dim(), "-d (", describe(w),
                    "); expected a 2-D weight", a.is_vnni ? " packed by convert_weight_packed" : "");
  TORCH_CHECK_VALUE(w.sym_size(0) == n, op, ": ", arg, " (", describe(w), ") has ",
                    w.sym_size(0), " output channels; expected ", n);
  if (!a.is_vnni) {
    TORCH_CHECK_VALUE(w.sym_size(1) == k, op, ": ", arg, " (", describe(w), ") has K = ",
                      w.sym_size(1), "; expected ", k_what, " = ", k);
  }
}

// The checks shared with the Meta kernels; `q_lora`, `kv_lora`, `rope` are given by the fused
// op (then checked against the tensors) or -1 (taken from the tensors).
MlaDims check_mla(const char* op, const MlaArgs& a, std::int64_t q_lora, std::int64_t kv_lora,
                  std::int64_t rope) {
  const at::Tensor& hidden = *a.hidden;
  TORCH_CHECK_VALUE(hidden.dim() == 2, op, ": hidden_states is ", hidden.dim(), "-d (",
                    describe(hidden), "); expected [tokens, hidden_size]");
  kernel_dtype(op, "hidden_states", hidden);
  TORCH_CHECK_VALUE(dim_of(hidden, 1) > 0, op, ": hidden_states (", describe(hidden),
                    ") has hidden_size 0; expected >= 1");
  TORCH_CHECK_VALUE(!(a.int8 && a.fp8), op, ": use_int8_w8a8 and use_fp8_w8a16 are both "
                    "True; expected at most one");
  if (a.fp8) {
    TORCH_CHECK_VALUE(a.block_size.has_value() && a.block_size->size() == 2 &&
                          (*a.block_size)[0] >= 1 && (*a.block_size)[1] >= 1,
                      op, ": block_size is ",
                      a.block_size.has_value() ? c10::str(*a.block_size) : std::string("None"),
                      "; expected [block_n, block_k], both >= 1 (use_fp8_w8a16=True)");
  }
  check_eps(op, a.eps);
  MlaDims d;
  
  d.hidden = dim_of(hidden, 1);
  const at::Tensor& w_kc = *a.w_kc;
  check_same_device(op, "w_kc", w_kc, "hidden_states", hidden);
  check_w_kc_dtype(op, a);
  check_3d(op, "w_kc", w_kc,
           a.is_vnni ? "[heads, kv_lora_rank, X] (convert_weight_packed of [heads, "
                       "kv_lora_rank, qk_nope_head_dim])"
                     : "[heads, kv_lora_rank, qk_nope_head_dim]");
  d.heads = dim_of(w_kc, 0);
  TORCH_CHECK_VALUE(d.heads > 0 && dim_of(w_kc, 1) > 0, op, ": w_kc (", describe(w_kc),
                    ") is empty; expected heads >= 1 and kv_lora_rank >= 1");
  if (kv_lora >= 0) {
    TORCH_CHECK_VALUE(dim_of(w_kc, 1) == kv_lora, op, ": w_kc (", describe(w_kc),
                      ") has kv_lora_rank ", dim_of(w_kc, 1), "; expected kv_lora_rank = ",
                      kv_lora);
  }
  d.kv_lora = dim_of(w_kc, 1);
  if (a.a.kv_a == nullptr) {  // fused: the ranks are given
    TORCH_CHECK_VALUE(q_lora > 0 && rope > 0, op, ": q_lora_rank is ", q_lora,
                      " and qk_rope_head_dim is ", rope, "; expected both >= 1");
    d.q_lora = q_lora;
    d.rope = rope;
  } else {
    const at::Tensor& kv_a = *a.a.kv_a;
    TORCH_CHECK_VALUE(kv_a.dim() == 2 && dim_of(kv_a, 0) > d.kv_lora, op, ": kv_a_proj_weight (",
                      describe(kv_a), ") has ", kv_a.dim() == 2 ? dim_of(kv_a, 0) : 0,
                      " output channels; expected kv_lora_rank + qk_rope_head_dim > "
                      "kv_lora_rank = ", d.kv_lora);
    TORCH_CHECK_VALUE(a.a.q_a->dim() == 2 && dim_of(*a.a.q_a, 0) > 0, op, ": q_a_proj_weight (",
                      describe(*a.a.q_a), ") is not a 2-D weight with q_lora_rank >= 1 rows");
    d.q_lora = dim_of(*a.a.q_a, 0);
    d.rope = dim_of(kv_a, 0) - d.kv_lora;
  }
  TORCH_CHECK_VALUE(d.rope % 2 == 0, op, ": qk_rope_head_dim is ", d.rope,
                    "; expected an even number (RoPE rotates pairs)");
  // The a-projection weights.
  if (a.a.kv_a == nullptr) {
    check_proj_weight(op, a.a.q_a_arg, *a.a.q_a, d.q_lora + d.kv_lora + d.rope, d.hidden,
                      "hidden_states.size(1)", a);
  } else {
    check_proj_weight(op, a.a.q_a_arg, *a.a.q_a, d.q_lora, d.hidden, "hidden_states.size(1)",
                      a);
    check_proj_weight(op, a.a.kv_a_arg, *a.a.kv_a, d.kv_lora + d.rope, d.hidden,
                      "hidden_states.size(1)", a);
  }
  // q_b_proj: [heads * (nope + rope), q_lora].
  const at::Tensor& q_b = *a.q_b;
  TORCH_CHECK_VALUE(q_b.dim() == 2 && dim_of(q_b, 0) % d.heads == 0 &&
                        dim_of(q_b, 0) / d.heads > d.rope,
                    op, ": q_b_proj_weight (", describe(q_b), ") does not have heads * "
                    "(qk_nope_head_dim + qk_rope_head_dim) output channels with heads = ",
                    d.heads, " (dim_of(w_kc, 0)), qk_rope_head_dim = ", d.rope,
                    " and qk_nope_head_dim >= 1");
  d.nope = dim_of(q_b, 0) / d.heads - d.rope;
  check_proj_weight(op, "q_b_proj_weight", q_b, dim_of(q_b, 0), d.q_lora, "q_lora_rank", a);
  if (!a.is_vnni) {
    TORCH_CHECK_VALUE(dim_of(w_kc, 2) == d.nope, op, ": w_kc (", describe(w_kc),
                      ") has qk_nope_head_dim ", dim_of(w_kc, 2),
                      "; expected q_b_proj_weight.size(0) / heads - qk_rope_head_dim = ",
                      d.nope);
  }
  // Scales.
  if (a.int8) {
    if (a.a.kv_a == nullptr) {
      check_channel_scales(op, a.a.q_a_scale_arg, *a.a.q_a_scale,
                           d.q_lora + d.kv_lora + d.rope, a.a.q_a_arg);
    } else {
      check_channel_scales(op, a.a.q_a_scale_arg, *a.a.q_a_scale, d.q_lora, a.a.q_a_arg);
      check_channel_scales(op, a.a.kv_a_scale_arg, *a.a.kv_a_scale, d.kv_lora + d.rope,
                           a.a.kv_a_arg);
    }
    check_channel_scales(op, "q_b_proj_scale", *a.q_b_scale, dim_of(q_b, 0), "q_b_proj_weight");
  }
  if (a.fp8) {
    const std::int64_t bn = (*a.block_size)[0], bk = (*a.block_size)[1];
    const auto blocks = [](std::int64_t n, std::int64_t b) { return (n + b - 1) / b; };
    const std::int64_t kb = blocks(d.hidden, bk);
    if (a.a.kv_a == nullptr) {
      check_block_scales(op, a.a.q_a_scale_arg, *a.a.q_a_scale,
                         blocks(d.q_lora, bn) + blocks(d.kv_lora + d.rope, bn), kb,
                         "ceil(q_lora_rank / block_n) + ceil((kv_lora_rank + qk_rope_head_dim) "
                         "/ block_n), ceil(hidden_size / block_k)");
    } else {
      check_block_scales(op, a.a.q_a_scale_arg, *a.a.q_a_scale, blocks(d.q_lora, bn), kb,
                         "ceil(q_lora_rank / block_n), ceil(hidden_size / block_k)");
      check_block_scales(op, a.a.kv_a_scale_arg, *a.a.kv_a_scale, blocks(d.kv_lora + d.rope, bn),
                         kb, "ceil((kv_lora_rank + qk_rope_head_dim) / block_n), "
                         "ceil(hidden_size / block_k)");
    }
    check_block_scales(op, "q_b_proj_scale", *a.q_b_scale, blocks(dim_of(q_b, 0), bn),
                       blocks(d.q_lora, bk), "ceil(q_b_proj_weight.size(0) / block_n), "
                       "ceil(q_lora_rank / block_k)");
  }
  // Norm weights, positions, cos/sin.
  check_same_device(op, "q_a_layernorm_weight", *a.q_a_ln, "hidden_states", hidden);
  check_same_device(op, "kv_a_layernorm_weight", *a.kv_a_ln, "hidden_states", hidden);
  check_same_dtype(op, "q_a_layernorm_weight", *a.q_a_ln, "hidden_states", hidden);
  check_same_dtype(op, "kv_a_layernorm_weight", *a.kv_a_ln, "hidden_states", hidden);
  check_vector(op, "q_a_layernorm_weight", *a.q_a_ln, d.q_lora, "q_lora_rank");
  check_vector(op, "kv_a_layernorm_weight", *a.kv_a_ln, d.kv_lora, "kv_lora_rank");
  const at::Tensor& pos = *a.positions;
  check_same_device(op, "positions", pos, "hidden_states", hidden);
  TORCH_CHECK_TYPE(pos.scalar_type() == at::kLong || pos.scalar_type() == at::kInt, op,
                   ": positions has dtype ", dtype_name(pos.scalar_type()),
                   "; expected torch.int64 or torch.int32");
  TORCH_CHECK_VALUE(pos.dim() == 1 && pos.sym_size(0) == hidden.sym_size(0), op, ": positions (",
                    describe(pos), ") is not 1-D with hidden_states.size(0) = ",
                    hidden.sym_size(0), " elements (one per token)");
  const at::Tensor& cs = *a.cos_sin;
  check_same_device(op, "cos_sin_cache", cs, "hidden_states", hidden);
  TORCH_CHECK_TYPE(cs.scalar_type() == hidden.scalar_type() || cs.scalar_type() == at::kFloat,
                   op, ": cos_sin_cache has dtype ", dtype_name(cs.scalar_type()),
                   "; expected hidden_states' dtype ", dtype_name(hidden.scalar_type()),
                   " or torch.float32");
  TORCH_CHECK_VALUE(cs.dim() == 2 && dim_of(cs, 1) == d.rope, op, ": cos_sin_cache (",
                    describe(cs), ") is not [max_position, qk_rope_head_dim = ", d.rope, "]");
  return d;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mla_outputs(const at::Tensor& hidden,
                                                           const MlaDims& d) {
  const c10::SymInt tokens = hidden.sym_size(0);
  const std::int64_t row = d.kv_lora + d.rope;
  at::Tensor q = at::empty_symint({tokens, d.heads, row}, hidden.options());
  at::Tensor k = at::empty_symint({tokens, 1, row}, hidden.options());
  // sgl-kernel returns k_input's first kv_lora_rank as v_input. A schema without alias
  // annotations must not return outputs that share memory (torch.compile, opcheck), so
  // v_input has that view's shape and strides over memory of its own (the same values).
  at::Tensor v = at::empty_symint({tokens, 1, row}, hidden.options()).narrow(-1, 0, d.kv_lora);
  return {q, k, v};
}

// One projection: out (row stride out_stride, dtype out_dt) = x @ W^T, float or W8A8
// (xq / xs: x quantised per row).
struct Proj {
  Packed2 w;
  at::Tensor scales;  // int8: fp32 [n]; fp8: fp32 [ceil(k / block_k), n] (contiguous)
  bool fp8 = false;
  std::int64_t block_k = 0;
};

void run_proj(const Proj& p, std::int64_t m, rvvk::DType x_dt, const void* x,
              std::int64_t x_stride, const std::int8_t* xq, const float* xs,
              rvvk::DType out_dt, void* out, std::int64_t out_stride) {
  if (m == 0) return;
  const rvvk::PackedWeightHeader& h = p.w.h;
  parallel_tasks(rvvk::linear_tasks(h), m * h.k * h.panel, [&](std::int64_t b, std::int64_t e) {
    if (p.fp8) {
      rvvk::Fp8LinearArgs a;
      a.m = m;
      a.x_dtype = x_dt;
      a.x = x;
      a.x_stride = x_stride;
      a.packed = p.w.packed.data_ptr();
      a.scales = p.scales.data_ptr<float>();
      a.block_k = p.block_k;
      a.out_dtype = out_dt;
      a.out = out;
      a.out_stride = out_stride;
      rvvk::fp8_linear(a, b, e);
    } else if (xq != nullptr) {
      rvvk::Int8LinearArgs a;
      a.m = m;
      a.a = xq;
      a.a_stride = h.k;
      a.a_scales = xs;
      a.packed = p.w.packed.data_ptr();
      a.w_scales = p.scales.data_ptr<float>();
      a.out_dtype = out_dt;
      a.out = out;
      a.out_stride = out_stride;
      rvvk::int8_linear(a, b, e);
    } else {
      rvvk::LinearArgs a;
      a.m = m;
      a.x_dtype = x_dt;
      a.x = x;
      a.x_stride = x_stride;
      a.packed = p.w.packed.data_ptr();
      a.out_dtype = out_dt;
      a.out = out;
      a.out_stride = out_stride;
      rvvk::linear(a, b, e);
    }
  });
}

// fp8: `parts` splits the weight's rows into blocks of rows with scale blocks of their own
// (the fused a-projection: q_lora_rank, then kv_lora_rank + rope), else one part.
Proj make_proj(const char* op, const char* arg, const at::Tensor& w,
               const std::optional<at::Tensor>* scale, std::int64_t k, const char* k_what,
               const MlaArgs& a, std::vector<std::int64_t> parts = {}) {
  Proj p;
  const rvvk::DType dt = weight_dtype(op, arg, w, a.int8, !a.int8 && !a.fp8, a.fp8);
  p.w = packed2(op, arg, w, dt, k, k_what, a.is_vnni);
  if (a.int8) p.scales = (*scale)->reshape({-1}).contiguous();
  if (a.fp8) {
    const std::int64_t bn = (*a.block_size)[0];
    p.fp8 = true;
    p.block_k = (*a.block_size)[1];
    if (parts.empty()) parts.push_back(p.w.h.n);
    std::vector<at::Tensor> expanded;
    std::int64_t row = 0;
    for (const std::int64_t n : parts) {
      const std::int64_t rows = (n + bn - 1) / bn;
      expanded.push_back(expand_block_scales((*scale)->narrow(0, row, rows), n, bn));
      row += rows;
    }
    p.scales = expanded.size() == 1 ? expanded[0] : at::cat(expanded, 1).contiguous();
  }
  return p;
}

// x [m, k] (row stride) quantised per row to int8 (q [m, k] contiguous, scales [m]).
std::pair<at::Tensor, at::Tensor> quantize_rows(rvvk::DType dt, const void* x,
                                                std::int64_t x_stride, std::int64_t m,
                                                std::int64_t k, std::int64_t elem,
                                                const at::TensorOptions& opts) {
  at::Tensor q = at::empty({m, k}, opts.dtype(at::kChar));
  at::Tensor s = at::empty({m}, opts.dtype(at::kFloat));
  if (m == 0) return {q, s};
  const char* base = static_cast<const char*>(x);
  parallel_rows(m, k, [&](std::int64_t b, std::int64_t e) {
    rvvk::quantize_int8_rows(dt, base + b * x_stride * elem, x_stride, e - b, k,
                             q.data_ptr<std::int8_t>() + b * k, k, s.data_ptr<float>() + b);
  });
  return {q, s};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mla_qkv(bool meta, const char* op,
                                                       const MlaArgs& a, std::int64_t q_lora,
                                                       std::int64_t kv_lora, std::int64_t rope) {
  if (!meta) {
    check_cpu(op, "hidden_states", *a.hidden);
    check_cpu(op, a.a.q_a_arg, *a.a.q_a);
    if (a.a.kv_a) check_cpu(op, a.a.kv_a_arg, *a.a.kv_a);
    check_cpu(op, "q_b_proj_weight", *a.q_b);
    check_cpu(op, "w_kc", *a.w_kc);
    check_cpu(op, "q_a_layernorm_weight", *a.q_a_ln);
    check_cpu(op, "kv_a_layernorm_weight", *a.kv_a_ln);
    check_cpu(op, "positions", *a.positions);
    check_cpu(op, "cos_sin_cache", *a.cos_sin);
  }
  const MlaDims d = check_mla(op, a, q_lora, kv_lora, rope);
  auto outs = mla_outputs(*a.hidden, d);
  if (meta) return outs;
  auto& [q_input, k_input, v_input] = outs;

  const std::int64_t tokens = a.hidden->size(0);
  const at::Tensor& cs = *a.cos_sin;
  TORCH_CHECK_VALUE(cs.stride(1) == 1, op, ": cos_sin_cache (", describe(cs),
                    ") has a last-dimension stride of ", cs.stride(1),
                    "; expected 1 (call .contiguous() first)");
  const at::Tensor pos = a.positions->to(at::kLong).contiguous();
  const std::int64_t* p = pos.data_ptr<std::int64_t>();
  for (std::int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK_VALUE(p[t] >= 0 && p[t] < cs.size(0), op, ": positions[", t, "] is ", p[t],
                      "; expected 0 <= position < cos_sin_cache.size(0) = ", cs.size(0));
  }
  // Weights (packed here when !is_vnni), before anything is computed.
  const std::int64_t a_cols = d.q_lora + d.kv_lora + d.rope;
  std::vector<std::pair<Proj, std::int64_t>> a_projs;  // (projection, first output column)
  if (a.a.kv_a == nullptr) {
    a_projs.emplace_back(make_proj(op, a.a.q_a_arg, *a.a.q_a, a.a.q_a_scale, d.hidden,
                                   "hidden_states.size(1)", a, {d.q_lora, d.kv_lora + d.rope}),
                         0);
  } else {
    a_projs.emplace_back(make_proj(op, a.a.q_a_arg, *a.a.q_a, a.a.q_a_scale, d.hidden,
                                   "hidden_states.size(1)", a),
                         0);
    a_projs.emplace_back(make_proj(op, a.a.kv_a_arg, *a.a.kv_a, a.a.kv_a_scale, d.hidden,
                                   "hidden_states.size(1)", a),
                         d.q_lora);
  }
  const Proj q_b = make_proj(op, "q_b_proj_weight", *a.q_b, a.q_b_scale, d.q_lora,
                             "q_lora_rank", a);
  const bool w_kc_fp8 = a.w_kc->scalar_type() == at::kFloat8_e4m3fn;
  const rvvk::DType w_kc_dt =
      w_kc_fp8 ? rvvk::DType::kFP8E4M3 : weight_dtype(op, "w_kc", *a.w_kc, false, true);
  const Packed3 w_kc = packed3(op, "w_kc", *a.w_kc, w_kc_dt, d.nope,
                               "q_b_proj_weight.size(0) / heads - qk_rope_head_dim", a.is_vnni);
  if (tokens == 0) return outs;

  at::Tensor hidden = *a.hidden;
  const std::int64_t h_stride = rows_of(hidden);
  const rvvk::DType dt = kernel_dtype(op, "hidden_states", hidden);
  const std::int64_t elem = static_cast<std::int64_t>(hidden.element_size());
  const std::int64_t m = tokens;
  const at::TensorOptions opts = hidden.options();

  // Stage 1: [qa | kv] = hidden @ [q_a_proj | kv_a_proj]^T, rounded to dtype.
  at::Tensor qkv_a = at::empty({m, a_cols}, opts);
  char* qkv = static_cast<char*>(qkv_a.data_ptr());
  at::Tensor hq, hs;
  if (a.int8) {
    std::tie(hq, hs) = quantize_rows(dt, hidden.data_ptr(), h_stride, m, d.hidden, elem, opts);
  }
  for (const auto& [proj, col] : a_projs) {
    run_proj(proj, m, dt, hidden.data_ptr(), h_stride,
             a.int8 ? hq.data_ptr<std::int8_t>() : nullptr,
             a.int8 ? hs.data_ptr<float>() : nullptr, dt, qkv + col * elem, a_cols);
  }

  // Stage 2: RMSNorm of qa (in place) and of kv's first kv_lora_rank (into k_input); RoPE of
  // kv's last qk_rope_head_dim (into k_input).
  const at::Tensor q_ln = a.q_a_ln->contiguous(), kv_ln = a.kv_a_ln->contiguous();
  const std::int64_t row = d.kv_lora + d.rope;
  char* k_out = static_cast<char*>(k_input.data_ptr());
  const float eps = static_cast<float>(a.eps);
  rvvk::RotaryArgs rope_base;
  rope_base.head_size = d.rope;
  rope_base.rotary_dim = d.rope;
  rope_base.neox = false;
  rope_base.dtype = dt;
  rope_base.cache_dtype = cs.scalar_type() == at::kFloat ? rvvk::DType::kF32 : dt;
  rope_base.cos_sin_cache = cs.data_ptr();
  rope_base.cache_stride = cs.stride(0);
  rope_base.positions = p;
  rvvk::RotaryArgs k_rope = rope_base;
  k_rope.heads = 1;
  k_rope.x = qkv + (d.q_lora + d.kv_lora) * elem;
  k_rope.x_stride_t = a_cols;
  k_rope.out = k_out + d.kv_lora * elem;
  k_rope.out_stride_t = row;
  parallel_rows(m, a_cols, [&](std::int64_t b, std::int64_t e) {
    rvvk::rmsnorm(dt, qkv + b * a_cols * elem, a_cols, qkv + b * a_cols * elem, a_cols,
                  q_ln.data_ptr(), e - b, d.q_lora, eps, 0.0f);
    rvvk::rmsnorm(dt, k_out + b * row * elem, row, qkv + (b * a_cols + d.q_lora) * elem,
                  a_cols, kv_ln.data_ptr(), e - b, d.kv_lora, eps, 0.0f);
    rvvk::rotary_embedding(k_rope, b, e);
  });

  // Stage 3: qb = qa @ q_b_proj^T, [m, heads, nope + rope].
  const std::int64_t qk_head = d.nope + d.rope;
  at::Tensor qb = at::empty({m, d.heads * qk_head}, opts);
  at::Tensor aq, as;
  if (a.int8) std::tie(aq, as) = quantize_rows(dt, qkv, a_cols, m, d.q_lora, elem, opts);
  run_proj(q_b, m, dt, qkv, a_cols, a.int8 ? aq.data_ptr<std::int8_t>() : nullptr,
           a.int8 ? as.data_ptr<float>() : nullptr, dt, qb.data_ptr(), d.heads * qk_head);

  // Stage 4: q_input[:, h, :kv_lora] = qb[:, h, :nope] @ w_kc[h]^T.
  char* q_out = static_cast<char*>(q_input.data_ptr());
  const char* qb_p = static_cast<const char*>(qb.data_ptr());
  const at::Tensor w_kc_scales =
      w_kc_fp8 ? at::full({1, w_kc.h.n}, (*a.w_scale)->item<float>(), opts.dtype(at::kFloat))
               : at::Tensor();
  batched_linear(w_kc, d.heads, m, dt, qb_p, d.heads * qk_head, qk_head, elem, dt, q_out,
                 d.heads * row, row, elem, w_kc_fp8 ? w_kc_scales.data_ptr<float>() : nullptr);

  // Stage 5: q_input[:, :, kv_lora:] = rope(qb[:, :, nope:]).
  rvvk::RotaryArgs q_rope = rope_base;
  q_rope.heads = d.heads;
  q_rope.x = qb_p + d.nope * elem;
  q_rope.x_stride_t = d.heads * qk_head;
  q_rope.x_stride_h = qk_head;
  q_rope.out = q_out + d.kv_lora * elem;
  q_rope.out_stride_t = d.heads * row;
  q_rope.out_stride_h = row;
  parallel_rows(m, d.heads * d.rope,
                [&](std::int64_t b, std::int64_t e) { rvvk::rotary_embedding(q_rope, b, e); });
  v_input.copy_(k_input.narrow(-1, 0, d.kv_lora));
  return outs;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> qkv_proj_with_rope(
    bool meta, const at::Tensor& hidden_states, const at::Tensor& q_a_proj_weight,
    const at::Tensor& q_b_proj_weight, const at::Tensor& kv_a_proj_weight,
    const at::Tensor& w_kc, const at::Tensor& q_a_layernorm_weight,
    const at::Tensor& kv_a_layernorm_weight, const at::Tensor& positions,
    const at::Tensor& cos_sin_cache, double eps, bool use_int8_w8a8, bool use_fp8_w8a16,
    const std::optional<at::Tensor>& q_a_proj_scale,
    const std::optional<at::Tensor>& q_b_proj_scale,
    const std::optional<at::Tensor>& kv_a_proj_scale, const std::optional<at::Tensor>& w_scale,
    bool is_vnni, at::OptionalIntArrayRef block_size) {
  MlaArgs a;
  a.hidden = &hidden_states;
  a.a.q_a = &q_a_proj_weight;
  a.a.kv_a = &kv_a_proj_weight;
  a.a.q_a_scale = &q_a_proj_scale;
  a.a.kv_a_scale = &kv_a_proj_scale;
  a.q_b = &q_b_proj_weight;
  a.w_kc = &w_kc;
  a.q_a_ln = &q_a_layernorm_weight;
  a.kv_a_ln = &kv_a_layernorm_weight;
  a.positions = &positions;
  a.cos_sin = &cos_sin_cache;
  a.eps = eps;
  a.int8 = use_int8_w8a8;
  a.fp8 = use_fp8_w8a16;
  a.q_b_scale = &q_b_proj_scale;
  a.w_scale = &w_scale;
  a.is_vnni = is_vnni;
  a.block_size = block_size;
  return mla_qkv(meta, "qkv_proj_with_rope", a, -1, -1, -1);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> qkv_proj_with_rope_fused_weight(
    bool meta, const at::Tensor& hidden_states, const at::Tensor& qkv_a_proj_weight,
    const at::Tensor& q_b_proj_weight, const at::Tensor& w_kc,
    const at::Tensor& q_a_layernorm_weight, const at::Tensor& kv_a_layernorm_weight,
    const at::Tensor& positions, const at::Tensor& cos_sin_cache, double eps,
    bool use_int8_w8a8, bool use_fp8_w8a16, const std::optional<at::Tensor>& qkv_a_proj_scale,
    const std::optional<at::Tensor>& q_b_proj_scale, const std::optional<at::Tensor>& w_scale,
    bool is_vnni, at::OptionalIntArrayRef block_size, std::int64_t q_lora_rank,
    std::int64_t kv_lora_rank, std::int64_t qk_rope_head_dim) {
  const char* op = "qkv_proj_with_rope_fused_weight";
  TORCH_CHECK_VALUE(q_lora_rank > 0 && kv_lora_rank > 0 && qk_rope_head_dim > 0, op,
                    ": q_lora_rank = ", q_lora_rank, ", kv_lora_rank = ", kv_lora_rank,
                    ", qk_rope_head_dim = ", qk_rope_head_dim, "; expected all >= 1");
  MlaArgs a;
  a.hidden = &hidden_states;
  a.a.q_a = &qkv_a_proj_weight;
  a.a.q_a_arg = "qkv_a_proj_weight";
  a.a.q_a_scale = &qkv_a_proj_scale;
  a.a.q_a_scale_arg = "qkv_a_proj_scale";
  a.q_b = &q_b_proj_weight;
  a.w_kc = &w_kc;
  a.q_a_ln = &q_a_layernorm_weight;
  a.kv_a_ln = &kv_a_layernorm_weight;
  a.positions = &positions;
  a.cos_sin = &cos_sin_cache;
  a.eps = eps;
  a.int8 = use_int8_w8a8;
  a.fp8 = use_fp8_w8a16;
  a.q_b_scale = &q_b_proj_scale;
  a.w_scale = &w_scale;
  a.is_vnni = is_vnni;
  a.block_size = block_size;
  return mla_qkv(meta, op, a, q_lora_rank, kv_lora_rank, qk_rope_head_dim);
}

}  // namespace rvv_ops
