"""Typed wrappers over the attention ops, and their fake kernels.

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

import math

import torch
from torch import Tensor

_ACTIVATIONS = (torch.float32, torch.bfloat16, torch.float16)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_INDICES = (torch.int32, torch.int64)
_FP32_MAX = torch.finfo(torch.float32).max
_FP32_HALF_TINY = 2.0**-150  # this and smaller positive numbers round to fp32 0

UNSUPPORTED = "rvv_ops: unsupported: "
"""Prefix of the NotImplementedError messages for features the kernels do not have."""


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
    torch.ops.sgl_kernel.decode_attention_cpu.default(
        query,
        k_cache,
        v_cache,
        k_scale,
        v_scale,
        output,
        key,
        value,
        loc,
        attn_logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        sm_scale,
        logit_cap,
        False,
        window,
        None,
        sinks,
    )


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
    torch.ops.sgl_kernel.decode_attention_int8_cpu.default(
        query,
        k_cache,
        v_cache,
        k_scale_buf,
        v_scale_buf,
        output,
        key,
        value,
        loc,
        attn_logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        sm_scale,
        logit_cap,
        False,
        window,
        None,
        sinks,
    )


def _max_extend(extend_seq_lens: Tensor, max_len_extend: int | None) -> int:
    if max_len_extend is not None:
        return max_len_extend
    return int(extend_seq_lens.max()) if extend_seq_lens.numel() else 0


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
    torch.ops.sgl_kernel.extend_attention_cpu.default(
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        k_scale,
        v_scale,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        _max_extend(extend_seq_lens, max_len_extend),
        sm_scale,
        logit_cap,
        False,
        window,
        None,
        sinks,
        None,
        causal,
    )


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
    torch.ops.sgl_kernel.extend_attention_int8_cpu.default(
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        k_scale_buf,
        v_scale_buf,
        out_cache_loc,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        _max_extend(extend_seq_lens, max_len_extend),
        sm_scale,
        logit_cap,
        False,
        window,
        None,
        sinks,
        None,
        causal,
    )


# Fake kernels: the checks of attention.cpp that do not depend on memory layout or on
# index values, with the same exception types, so a bad call fails while tracing.


def _unsupported(op: str, ok: bool, feature: str, detail: str) -> None:
    if not ok:
        raise NotImplementedError(
            f"{UNSUPPORTED}{feature} ({op}: {detail}); use another attention backend for this layer"
        )


def _check_supported(
    op: str, is_cross_attention: bool, encoder_lens: Tensor | None, tree_mask: Tensor | None
) -> None:
    _unsupported(op, not is_cross_attention, "cross-attention", "is_cross_attention=True")
    _unsupported(
        op,
        encoder_lens is None,
        "cross-attention",
        "encoder_lens is not None (encoder-decoder model)",
    )
    _unsupported(
        op,
        tree_mask is None,
        "tree_mask",
        "a custom attention mask (speculative decoding with a token tree)",
    )


def _device(op: str, arg: str, t: Tensor, ref: Tensor, ref_arg: str) -> None:
    if t.device != ref.device:
        raise ValueError(
            f"{op}: {arg} is on device {t.device}; expected {ref_arg}'s device {ref.device}"
        )


def _dims(op: str, arg: str, t: Tensor, dims: int, layout: str) -> None:
    if t.dim() != dims:
        raise ValueError(f"{op}: {arg} is {t.dim()}-d; expected {dims}-D {layout}")


def _size(op: str, arg: str, t: Tensor, d: int, expected: int, what: str) -> None:
    if t.shape[d] != expected:
        raise ValueError(
            f"{op}: {arg} has shape {list(t.shape)}; expected size {expected} in dimension "
            f"{d} ({what})"
        )


def _dtype(op: str, arg: str, t: Tensor, allowed: tuple[torch.dtype, ...], what: str) -> None:
    if t.dtype not in allowed:
        raise TypeError(f"{op}: {arg} has dtype {t.dtype}; expected {what}")


def _same_dtype(op: str, arg: str, t: Tensor, ref_arg: str, ref: Tensor) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{op}: {arg} has dtype {t.dtype}; expected {ref_arg}'s dtype {ref.dtype}")


def _index(op: str, arg: str, t: Tensor, n: int, what: str) -> None:
    _dtype(op, arg, t, _INDICES, "torch.int32 or torch.int64")
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"{op}: {arg} has shape {list(t.shape)}; expected [{n}] ({what})")


def _scalar(
    op: str, arg: str, x: float, *, positive: bool = False, non_negative: bool = False
) -> None:
    finite = math.isfinite(x) and abs(x) <= _FP32_MAX
    if positive and not (finite and x > _FP32_HALF_TINY):
        raise ValueError(f"{op}: {arg} is {x}; expected a finite number > 0 (as fp32)")
    if non_negative and not (finite and x >= 0):
        raise ValueError(f"{op}: {arg} is {x}; expected a finite number >= 0 (as fp32)")
    if not finite:
        raise ValueError(f"{op}: {arg} is {x}; expected a finite number (as fp32)")


def _common_scalars(op: str, sm_scale: float, logit_cap: float, window: int) -> None:
    _scalar(op, "sm_scale", sm_scale)
    _scalar(op, "logit_cap", logit_cap, non_negative=True)
    if window < 0:
        raise ValueError(
            f"{op}: sliding_window_size is {window}; expected >= 0 (0: no window; W + 1 "
            "attends to the last W + 1 keys, as SGLang passes layer.sliding_window_size + 1)"
        )


def _sinks(op: str, sinks: Tensor | None, heads: int, ref: Tensor) -> None:
    if sinks is None:
        return
    _device(op, "sinks", sinks, ref, "the query")
    if not sinks.dtype.is_floating_point:
        raise TypeError(f"{op}: sinks has dtype {sinks.dtype}; expected a floating-point dtype")
    if sinks.dim() != 1 or sinks.shape[0] != heads:
        raise ValueError(
            f"{op}: sinks has shape {list(sinks.shape)}; expected [{heads}] "
            "(one logit per query head)"
        )


def _caches(
    op: str, q_arg: str, q: Tensor, k_arg: str, k: Tensor, v_arg: str, v: Tensor, int8: bool
) -> tuple[int, int, int, int]:
    """(T, Hkv, D, Dv) after the cache checks."""
    for arg, t in ((k_arg, k), (v_arg, v)):
        _device(op, arg, t, q, q_arg)
    _dims(op, k_arg, k, 3, "[tokens, kv_heads, head_dim]")
    _dims(op, v_arg, v, 3, "[tokens, kv_heads, head_dim_v]")
    if int8:
        _dtype(op, k_arg, k, (torch.int8,), "torch.int8")
    else:
        _dtype(
            op,
            k_arg,
            k,
            (q.dtype, *_FP8),
            f"the query's dtype {q.dtype}, torch.float8_e4m3fn or torch.float8_e5m2",
        )
    _same_dtype(op, v_arg, v, k_arg, k)
    tokens, kv_heads, dim = k.shape[0], k.shape[1], q.shape[2]
    _size(op, k_arg, k, 2, dim, f"head_dim, from {q_arg}")
    if kv_heads < 1 or q.shape[1] % kv_heads != 0:
        raise ValueError(
            f"{op}: {k_arg} has shape {list(k.shape)}: {kv_heads} KV heads; expected a number "
            f">= 1 that divides the {q.shape[1]} query heads of {q_arg}"
        )
    _size(op, v_arg, v, 0, tokens, f"tokens, from {k_arg}")
    _size(op, v_arg, v, 1, kv_heads, f"kv_heads, from {k_arg}")
    if v.shape[2] < 1:
        raise ValueError(f"{op}: {v_arg} has shape {list(v.shape)}; expected a head_dim_v >= 1")
    return tokens, kv_heads, dim, v.shape[2]


def _scale_bufs(
    op: str, k_scales: Tensor, v_scales: Tensor, tokens: int, kv_heads: int, ref: Tensor
) -> None:
    for arg, t in (("k_scale_buf", k_scales), ("v_scale_buf", v_scales)):
        _device(op, arg, t, ref, "the query")
        _dims(op, arg, t, 2, "[tokens, kv_heads]")
        _dtype(op, arg, t, (torch.float32,), "torch.float32")
        _size(op, arg, t, 0, tokens, "tokens, from the KV cache")
        _size(op, arg, t, 1, kv_heads, "kv_heads, from the KV cache")


def _scales(
    op: str,
    scales: tuple[float, float] | tuple[Tensor, Tensor],
    tokens: int,
    kv_heads: int,
    ref: Tensor,
) -> None:
    k_scale, v_scale = scales
    if isinstance(k_scale, Tensor) and isinstance(v_scale, Tensor):
        _scale_bufs(op, k_scale, v_scale, tokens, kv_heads, ref)
    else:
        _scalar(op, "k_scale", float(k_scale), positive=True)
        _scalar(op, "v_scale", float(v_scale), positive=True)


def _query(op: str, arg: str, q: Tensor, layout: str) -> None:
    _dims(op, arg, q, 3, layout)
    _dtype(op, arg, q, _ACTIVATIONS, "torch.float32, torch.bfloat16 or torch.float16")
    if q.shape[1] < 1 or q.shape[2] < 1:
        raise ValueError(
            f"{op}: {arg} has shape {list(q.shape)}; expected num_heads >= 1 and head_dim >= 1"
        )


def _new_kv(
    op: str,
    names: tuple[str, str],
    k: Tensor | None,
    v: Tensor | None,
    q: Tensor,
    q_arg: str,
    caches: tuple[str, str],
    rows: tuple[int, str],
    dims: tuple[int, int, int],
) -> None:
    """The new tokens' K/V: both or neither; `rows` = (count, "what, from where")."""
    if (k is None) != (v is None):
        raise ValueError(
            f"{op}: {names[0]} is {'None' if k is None else 'a tensor'} but {names[1]} is "
            f"{'None' if v is None else 'a tensor'}; expected both or neither"
        )
    if k is None or v is None:
        return
    kv_heads, dim, dim_v = dims
    for arg, t, cache, d, d_what in (
        (names[0], k, caches[0], dim, f"head_dim, from {q_arg}"),
        (names[1], v, caches[1], dim_v, f"head_dim_v, from {caches[1]}"),
    ):
        _device(op, arg, t, q, q_arg)
        _dims(op, arg, t, 3, "[tokens, num_kv_heads, head_dim]")
        _same_dtype(op, arg, t, q_arg, q)
        _size(op, arg, t, 0, rows[0], rows[1])
        _size(op, arg, t, 1, kv_heads, f"num_kv_heads, from {cache}")
        _size(op, arg, t, 2, d, d_what)


def _decode_fake(
    op: str,
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    scales: tuple[float, float] | tuple[Tensor, Tensor],
    output: Tensor,
    key: Tensor | None,
    value: Tensor | None,
    loc: Tensor,
    attn_logits: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    window: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
) -> None:
    _check_supported(op, is_cross_attention, encoder_lens, None)
    _query(op, "query", query, "[batch, num_heads, head_dim]")
    batch, heads = query.shape[0], query.shape[1]
    tokens, kv_heads, dim, dim_v = _caches(
        op, "query", query, "k_cache", k_cache, "v_cache", v_cache, isinstance(scales[0], Tensor)
    )
    _scales(op, scales, tokens, kv_heads, query)
    _device(op, "output", output, query, "query")
    _dims(op, "output", output, 3, "[batch, num_heads, head_dim_v]")
    _same_dtype(op, "output", output, "query", query)
    _size(op, "output", output, 0, batch, "batch, from query")
    _size(op, "output", output, 1, heads, "num_heads, from query")
    _size(op, "output", output, 2, dim_v, "head_dim_v, from v_cache")
    _new_kv(
        op,
        ("key", "value"),
        key,
        value,
        query,
        "query",
        ("k_cache", "v_cache"),
        (batch, "batch, from query"),
        (kv_heads, dim, dim_v),
    )
    for arg, t in (
        ("loc", loc),
        ("attn_logits", attn_logits),
        ("req_to_token", req_to_token),
        ("req_pool_indices", req_pool_indices),
        ("seq_lens", seq_lens),
    ):
        _device(op, arg, t, query, "query")
    _index(op, "loc", loc, batch, "batch, from query")
    _dtype(op, "attn_logits", attn_logits, (torch.float32,), "torch.float32")
    if attn_logits.dim() != 4 or (
        attn_logits.shape[0] != batch
        or attn_logits.shape[1] != heads
        or attn_logits.shape[2] < 1
        or attn_logits.shape[3] != dim_v + 1
    ):
        raise ValueError(
            f"{op}: attn_logits has shape {list(attn_logits.shape)}; expected [{batch}, "
            f"{heads}, num_kv_splits >= 1, {dim_v + 1}] = "
            "[batch, num_heads, num_kv_splits, head_dim_v + 1]"
        )
    _table(op, req_to_token)
    _index(op, "req_pool_indices", req_pool_indices, batch, "batch, from query")
    _index(op, "seq_lens", seq_lens, batch, "batch, from query")
    _common_scalars(op, sm_scale, logit_cap, window)
    _sinks(op, sinks, heads, query)


def _table(op: str, req_to_token: Tensor) -> None:
    _dims(op, "req_to_token", req_to_token, 2, "[requests, max_context]")
    _dtype(op, "req_to_token", req_to_token, _INDICES, "torch.int32 or torch.int64")


def _extend_fake(
    op: str,
    q_extend: Tensor,
    k_extend: Tensor | None,
    v_extend: Tensor | None,
    o_extend: Tensor,
    k_buffer: Tensor,
    v_buffer: Tensor,
    scales: tuple[float, float] | tuple[Tensor, Tensor],
    out_cache_loc: Tensor | None,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    window: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
    tree_mask: Tensor | None,
) -> None:
    _check_supported(op, is_cross_attention, encoder_lens, tree_mask)
    _query(op, "q_extend", q_extend, "[tokens, num_heads, head_dim]")
    tokens, heads = q_extend.shape[0], q_extend.shape[1]
    cache_tokens, kv_heads, dim, dim_v = _caches(
        op,
        "q_extend",
        q_extend,
        "k_buffer",
        k_buffer,
        "v_buffer",
        v_buffer,
        isinstance(scales[0], Tensor),
    )
    _scales(op, scales, cache_tokens, kv_heads, q_extend)
    _device(op, "o_extend", o_extend, q_extend, "q_extend")
    _dims(op, "o_extend", o_extend, 3, "[tokens, num_heads, head_dim_v]")
    _same_dtype(op, "o_extend", o_extend, "q_extend", q_extend)
    _size(op, "o_extend", o_extend, 0, tokens, "tokens, from q_extend")
    _size(op, "o_extend", o_extend, 1, heads, "num_heads, from q_extend")
    _size(op, "o_extend", o_extend, 2, dim_v, "head_dim_v, from v_buffer")
    _new_kv(
        op,
        ("k_extend", "v_extend"),
        k_extend,
        v_extend,
        q_extend,
        "q_extend",
        ("k_buffer", "v_buffer"),
        (tokens, "tokens, from q_extend"),
        (kv_heads, dim, dim_v),
    )
    if out_cache_loc is not None:
        _device(op, "out_cache_loc", out_cache_loc, q_extend, "q_extend")
        _index(op, "out_cache_loc", out_cache_loc, tokens, "tokens, from q_extend")
    for arg, t in (
        ("req_to_token", req_to_token),
        ("req_pool_indices", req_pool_indices),
        ("seq_lens", seq_lens),
        ("extend_seq_lens", extend_seq_lens),
        ("extend_start_loc", extend_start_loc),
    ):
        _device(op, arg, t, q_extend, "q_extend")
    _table(op, req_to_token)
    if seq_lens.dim() != 1:
        raise ValueError(f"{op}: seq_lens has shape {list(seq_lens.shape)}; expected [batch]")
    batch = seq_lens.shape[0]
    _index(op, "seq_lens", seq_lens, batch, "batch")
    _index(op, "req_pool_indices", req_pool_indices, batch, "batch, from seq_lens")
    _index(op, "extend_seq_lens", extend_seq_lens, batch, "batch, from seq_lens")
    _index(op, "extend_start_loc", extend_start_loc, batch, "batch, from seq_lens")
    if max_len_extend < 0:
        raise ValueError(
            f"{op}: max_len_extend is {max_len_extend}; expected >= 0 "
            "(at least max(extend_seq_lens))"
        )
    _common_scalars(op, sm_scale, logit_cap, window)
    _sinks(op, sinks, heads, q_extend)


def _decode_attention_fake(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k_scale: float,
    v_scale: float,
    output: Tensor,
    key: Tensor | None,
    value: Tensor | None,
    loc: Tensor,
    attn_logits: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
) -> None:
    _decode_fake(
        "decode_attention_cpu",
        query,
        k_cache,
        v_cache,
        (k_scale, v_scale),
        output,
        key,
        value,
        loc,
        attn_logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        sm_scale,
        logit_cap,
        is_cross_attention,
        sliding_window_size,
        encoder_lens,
        sinks,
    )


def _decode_attention_int8_fake(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    k_scale_buf: Tensor,
    v_scale_buf: Tensor,
    output: Tensor,
    key: Tensor | None,
    value: Tensor | None,
    loc: Tensor,
    attn_logits: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
) -> None:
    _decode_fake(
        "decode_attention_int8_cpu",
        query,
        k_cache,
        v_cache,
        (k_scale_buf, v_scale_buf),
        output,
        key,
        value,
        loc,
        attn_logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        sm_scale,
        logit_cap,
        is_cross_attention,
        sliding_window_size,
        encoder_lens,
        sinks,
    )


def _extend_attention_fake(
    q_extend: Tensor,
    k_extend: Tensor | None,
    v_extend: Tensor | None,
    o_extend: Tensor,
    k_buffer: Tensor,
    v_buffer: Tensor,
    k_scale: float,
    v_scale: float,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
    tree_mask: Tensor | None,
    is_causal: bool,
) -> None:
    _extend_fake(
        "extend_attention_cpu",
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        (k_scale, v_scale),
        None,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        max_len_extend,
        sm_scale,
        logit_cap,
        is_cross_attention,
        sliding_window_size,
        encoder_lens,
        sinks,
        tree_mask,
    )


def _extend_attention_int8_fake(
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
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Tensor | None,
    sinks: Tensor | None,
    tree_mask: Tensor | None,
    is_causal: bool,
) -> None:
    _extend_fake(
        "extend_attention_int8_cpu",
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        (k_scale_buf, v_scale_buf),
        out_cache_loc,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        max_len_extend,
        sm_scale,
        logit_cap,
        is_cross_attention,
        sliding_window_size,
        encoder_lens,
        sinks,
        tree_mask,
    )


_fakes_registered = False


def register_attention_fakes() -> None:
    """Registers the attention ops' fake kernels (once per process)."""
    global _fakes_registered
    if _fakes_registered:
        return
    torch.library.register_fake("sgl_kernel::decode_attention_cpu", _decode_attention_fake)
    torch.library.register_fake(
        "sgl_kernel::decode_attention_int8_cpu", _decode_attention_int8_fake
    )
    torch.library.register_fake("sgl_kernel::extend_attention_cpu", _extend_attention_fake)
    torch.library.register_fake(
        "sgl_kernel::extend_attention_int8_cpu", _extend_attention_int8_fake
    )
    _fakes_registered = True
