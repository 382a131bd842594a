"""Typed wrappers over the attention ops (csrc/attention.cpp).

The ops keep SGLang 0.5.23's argument lists (``torch.ops.sgl_kernel.decode_attention_cpu``
takes 19 arguments, ``extend_attention_cpu`` 22; see the README for the schemas); the
wrappers here name them and give the optional ones defaults.

Semantics shared by every op (SGLang's data model):

- The KV cache of a layer is ``k_cache [T, Hkv, D]`` and ``v_cache [T, Hkv, Dv]``; request
  ``b``'s key at position ``p`` is row ``req_to_token[req_pool_indices[b], p]``. Caches
  hold the query's dtype, fp8 (``torch.float8_e4m3fn`` / ``float8_e5m2``, real value =
  stored * ``k_scale`` / ``v_scale``) or, for the ``*_int8`` ops, ``torch.int8`` with one
  fp32 scale per token and KV head (real value = stored * scale).
- ``Hq`` query heads share ``Hkv`` KV heads (``Hq % Hkv == 0``); ``sm_scale`` multiplies
  the scores; ``logit_cap > 0`` replaces a score ``s`` by ``cap * tanh(s / cap)``;
  ``window > 0`` attends only to the ``window`` most recent keys up to the query's own
  position (SGLang passes ``layer.sliding_window_size + 1``; 0 = no window); ``sinks``
  (``[Hq]``) adds ``exp(sink)`` to each softmax denominator. Arithmetic is fp32.
- Everything is validated before anything is written: a wrong dtype raises TypeError,
  any other bad argument (device, shape, layout, an index out of range, a bad scalar)
  ValueError, naming the argument, its value and what was expected. Cross-attention and
  tree masks raise NotImplementedError whose message starts with ``"rvv_ops: unsupported: "``.
- Tensors need a contiguous last dimension; other strides are used as they are (the
  caches are never copied).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

UNSUPPORTED = "rvv_ops: unsupported: "
"""Prefix of the NotImplementedError messages for features the kernels do not have."""

# SGLang's arguments the wrappers do not expose: features the kernels do not have.
_NOT_EXPOSED = {"is_cross_attention": False, "encoder_lens": None, "tree_mask": None}
# SGLang's names of the wrappers' renamed parameters.
_RENAMED = {"sliding_window_size": "window", "is_causal": "causal"}


def _call(op: Any, args: dict[str, Any]) -> None:
    """Calls `op` with its schema's arguments taken by name from `args` (a wrapper's
    parameters, which carry the schema's names or those of _RENAMED), else from
    _NOT_EXPOSED. ``max_len_extend`` None becomes ``max(extend_seq_lens)``."""
    if "max_len_extend" in args and args["max_len_extend"] is None:
        lens = args["extend_seq_lens"]
        args = {**args, "max_len_extend": int(lens.max()) if lens.numel() else 0}
    names = [_RENAMED.get(a.name, a.name) for a in op._schema.arguments]
    op(*[args[n] if n in args else _NOT_EXPOSED[n] for n in names])


def decode_attention(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    output: Tensor,
    loc: Tensor,
    attn_logits: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    *,
    sm_scale: float,
    key: Tensor | None = None,
    value: Tensor | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    logit_cap: float = 0.0,
    window: int = 0,
    sinks: Tensor | None = None,
) -> None:
    """Decode attention: one new query token per request attends to its cached keys.

    Calls ``torch.ops.sgl_kernel.decode_attention_cpu``. ``query [B, Hq, D]`` (fp32,
    bf16 or fp16); ``output [B, Hq, Dv]`` of the query's dtype is written. If ``key``
    ``[B, Hkv, D]`` and ``value`` ``[B, Hkv, Dv]`` (query's dtype) are given they are
    first written into the caches at rows ``loc [B]`` (for fp8 caches as
    ``(key / k_scale).to(cache dtype)``, like SGLang's ``set_kv_buffer``); otherwise the
    new token must already be in the cache. Request ``b`` then attends to its
    ``seq_lens[b]`` positions (which count the new token). ``attn_logits`` is fp32
    scratch ``[B, Hq, num_splits, Dv + 1]``: the keys are split ``num_splits`` ways.
    ``req_to_token [R, max_context]``, ``loc``, ``req_pool_indices`` and ``seq_lens`` are
    int32 or int64. ``k_scale`` / ``v_scale`` (> 0) apply to fp8 caches only.
    Results do not depend on the number of threads.
    """
    _call(torch.ops.sgl_kernel.decode_attention_cpu.default, locals())


def decode_attention_int8(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k_scale_buf: Tensor,
    v_scale_buf: Tensor,
    output: Tensor,
    loc: Tensor,
    attn_logits: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    *,
    sm_scale: float,
    key: Tensor | None = None,
    value: Tensor | None = None,
    logit_cap: float = 0.0,
    window: int = 0,
    sinks: Tensor | None = None,
) -> None:
    """:func:`decode_attention` over INT8 caches.

    Calls ``torch.ops.sgl_kernel.decode_attention_int8_cpu``.

    ``k_cache [T, Hkv, D]`` / ``v_cache [T, Hkv, Dv]`` are ``torch.int8``;
    ``k_scale_buf`` / ``v_scale_buf`` are fp32 ``[T, Hkv]`` (one scale per token and KV
    head, the same token stride for both): real value = stored * scale. ``key`` / ``value``,
    when given, are quantised per (token, KV head) - ``scale = absmax / 127``, stored =
    ``clamp(round_half_even(x / scale), -127, 127)``, a zero row gets scale 0 - and written
    with their scales at rows ``loc`` before attending.
    """
    _call(torch.ops.sgl_kernel.decode_attention_int8_cpu.default, locals())


def extend_attention(
    q_extend: Tensor,
    k_extend: Tensor | None,
    v_extend: Tensor | None,
    o_extend: Tensor,
    k_buffer: Tensor,
    v_buffer: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    *,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    max_len_extend: int | None = None,
    logit_cap: float = 0.0,
    window: int = 0,
    sinks: Tensor | None = None,
    causal: bool = True,
) -> None:
    """Extend (prefill) attention over a cached prefix plus the new tokens.

    Calls ``torch.ops.sgl_kernel.extend_attention_cpu``. Request ``b`` has
    ``extend_seq_lens[b]`` new tokens, rows ``extend_start_loc[b] ...`` of
    ``q_extend [N, Hq, D]``, ``k_extend [N, Hkv, D]``, ``v_extend [N, Hkv, Dv]`` and
    ``o_extend [N, Hq, Dv]`` (written; rows of no request are left as they are), after a
    prefix of ``seq_lens[b] - extend_seq_lens[b]`` tokens read from the cache (not
    written here: SGLang writes the new tokens itself). New token ``i`` attends to the
    prefix and, if ``causal``, to new tokens ``0..i`` (all of them otherwise); a window
    keeps the keys at positions ``> pos(i) - window``. ``k_extend`` / ``v_extend`` None
    (KV-shared layers): the new tokens' K/V are read from the cache, dequantised to the
    query's dtype. ``max_len_extend`` (default: computed) must be at least
    ``max(extend_seq_lens)``.
    """
    _call(torch.ops.sgl_kernel.extend_attention_cpu.default, locals())


def extend_attention_int8(
    q_extend: Tensor,
    k_extend: Tensor | None,
    v_extend: Tensor | None,
    o_extend: Tensor,
    k_buffer: Tensor,
    v_buffer: Tensor,
    k_scale_buf: Tensor,
    v_scale_buf: Tensor,
    out_cache_loc: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    *,
    sm_scale: float,
    max_len_extend: int | None = None,
    logit_cap: float = 0.0,
    window: int = 0,
    sinks: Tensor | None = None,
    causal: bool = True,
) -> None:
    """:func:`extend_attention` over INT8 caches.

    Calls ``torch.ops.sgl_kernel.extend_attention_int8_cpu``.

    Caches and scale buffers as for :func:`decode_attention_int8`. When ``k_extend`` /
    ``v_extend`` are given they are quantised and written, with their scales, at rows
    ``out_cache_loc [N]`` (int32 or int64) of the caches; the attention then uses them as
    given (unquantised) for the new tokens and the INT8 cache for the prefix.
    """
    _call(torch.ops.sgl_kernel.extend_attention_int8_cpu.default, locals())
