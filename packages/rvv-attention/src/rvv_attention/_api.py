"""The public entry points: decode, extend, attention."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from rvv_attention import _fallback, _kernel
from rvv_attention._batch import Batch, DecodeBatch, ExtendBatch, exclusive_cumsum, kernel_window
from rvv_attention._cache import KVCache
from rvv_attention._select import (
    FALLBACK,
    CaseKey,
    KernelUnavailableError,
    Selection,
    demote,
    mode,
    note_fallback,
    select_key,
)

_CALLS: Counter[str] = Counter()

_B = TypeVar("_B", bound=Batch)


def call_counts() -> dict[str, int]:
    """Calls made in this process so far, as ``"<op>:<implementation>"`` -> count (for
    example ``{"decode:kernel": 120, "extend:fallback": 2}``): which implementation ran.
    Calls over an fp8 or int8 cache are also counted as ``"<op> <kind>_kv:<implementation>"``
    (``"decode int8_kv:kernel"``)."""
    return dict(_CALLS)


def _run(b: _B, kernel: Callable[[_B], None], fallback: Callable[[_B], None]) -> Selection:
    """Selects, runs the kernel (falling back if it rejects the case at run time) or the
    fallback on the checked call ``b``; returns the selection that ran."""
    op = b.OP
    q, cache = b.q, b.cache
    key = CaseKey(
        op,
        q.dtype,
        cache.dtype,
        int(cache.k.shape[2]),
        int(cache.v.shape[2]),
        frozenset(b.features()),
        q.device.type,
        mode(),
    )
    sel = select_key(key)
    if sel.impl.name == "kernel":
        try:
            kernel(b)
            _count(b, "kernel")
            return sel
        except _kernel.NotThisCall as e:
            if sel.mode == "kernel":
                raise KernelUnavailableError(
                    f"rvv_attention: RVV_ATTENTION_IMPL=kernel, but the kernel cannot run this "
                    f"{op} call: {e}"
                ) from e
            sel = Selection(FALLBACK, str(e), sel.mode)
        except NotImplementedError as e:
            if not str(e).startswith(_kernel.unsupported_prefix()):
                raise
            if sel.mode == "kernel":
                raise KernelUnavailableError(
                    f"rvv_attention: RVV_ATTENTION_IMPL=kernel, but the kernel rejected this "
                    f"{op} case: {e}"
                ) from e
            sel = demote(key, str(e))
    assert sel.reason is not None
    note_fallback(op, sel.reason)
    fallback(b)
    _count(b, sel.impl.name)
    return sel


def _count(b: _B, impl: str) -> None:
    _CALLS[f"{b.OP}:{impl}"] += 1
    if b.cache.kind != "float":
        _CALLS[f"{b.OP} {b.cache.kind}_kv:{impl}"] += 1


def decode(
    q: Tensor,
    cache: KVCache,
    out: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    *,
    sm_scale: float,
    loc: Tensor | None = None,
    key: Tensor | None = None,
    value: Tensor | None = None,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    sinks: Tensor | None = None,
    cross_attention: bool = False,
    encoder_lens: Tensor | None = None,
) -> Tensor:
    """Decode attention: one new query token per request over the paged KV cache.

    ``q [B, Hq, D]`` (fp32 / bf16 / fp16), ``out [B, Hq, Dv]`` of q's dtype (written and
    returned). If ``key [B, Hkv, D]`` / ``value [B, Hkv, Dv]`` are given they are first
    written at rows ``loc [B]`` (fp8 caches: ``key / k_scale`` cast; int8 caches: quantised
    per token and head, scales written alongside). Request ``b`` then attends to its
    ``seq_lens[b]`` positions (counting the new token): cache rows
    ``req_to_token[req_pool_indices[b], :seq_lens[b]]``; a request of length 0 gets zeros.

    ``sliding_window``: SGLang's ``sliding_window_size`` (None or < 0: none; ``w >= 0``: the
    query at position ``p`` sees keys at positions ``>= p - w``). ``logit_cap > 0``:
    ``cap * tanh(s / cap)``. ``sinks [Hq]``: ``exp(sink)`` joins each softmax denominator.
    ``cross_attention=True`` (needs ``encoder_lens [B]``): request ``b`` attends to the
    encoder tokens at positions ``[0, encoder_lens[b])`` of its table row, no mask.
    ``encoder_lens`` with self-attention: the decoder's keys are positions
    ``[encoder_lens[b], encoder_lens[b] + seq_lens[b])`` (``seq_lens`` excludes the encoder).
    Cross-attention runs in the fallback (the kernels do not have it).
    """
    batch = DecodeBatch(
        q=q, cache=cache, out=out, req_to_token=req_to_token, req_pool_indices=req_pool_indices,
        seq_lens=seq_lens, k=key, v=value, loc=loc, sm_scale=sm_scale, logit_cap=logit_cap,
        window=kernel_window(sliding_window), sinks=sinks, cross_attention=cross_attention,
        encoder_lens=encoder_lens,
    )  # fmt: skip
    if cache.tokens == 0:  # nothing to attend to (and no row a kernel could index)
        _fallback.decode(batch)
    else:
        _run(batch, _kernel.decode, _fallback.decode)
    return out


def extend(
    q: Tensor,
    k: Tensor | None,
    v: Tensor | None,
    cache: KVCache,
    out: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    *,
    sm_scale: float,
    extend_start_loc: Tensor | None = None,
    out_cache_loc: Tensor | None = None,
    max_extend_len: int | None = None,
    causal: bool = True,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    sinks: Tensor | None = None,
    cross_attention: bool = False,
    encoder_lens: Tensor | None = None,
) -> Tensor:
    """Extend (prefill) attention: new tokens over a cached prefix plus themselves.

    ``q [N, Hq, D]``; ``k [N, Hkv, D]`` / ``v [N, Hkv, Dv]`` in q's dtype, or both None
    (KV-shared layers: the new tokens' K/V are read from the cache, in q's dtype);
    ``out [N, Hq, Dv]`` (written and returned; rows of no request are left alone). Request
    ``b`` owns rows ``extend_start_loc[b] .. + extend_seq_lens[b]`` (default start: the
    exclusive cumsum of ``extend_seq_lens``) and has a prefix of
    ``seq_lens[b] - extend_seq_lens[b]`` cached tokens. New token ``i`` sees the prefix
    and, if ``causal``, new tokens ``0..i`` (all of them otherwise), within the window.

    ``out_cache_loc [N]``: k/v are first written into the cache at those rows (same policy
    as :func:`decode`); None: the caller has written them (for an int8 cache they are
    re-quantised into the rows ``req_to_token`` names for the new tokens, since the int8
    kernel writes what it attends with). The new tokens attend with k/v as given; the
    prefix is read from the cache. ``cross_attention=True``: each new token attends to the
    request's ``encoder_lens[b]`` encoder tokens (positions ``[0, encoder_lens[b])``, read
    from the cache, no mask). Other options as in :func:`decode`.
    """
    if extend_start_loc is None:
        extend_start_loc = exclusive_cumsum(extend_seq_lens)
    if max_extend_len is None:
        max_extend_len = int(extend_seq_lens.max()) if extend_seq_lens.numel() else 0
    batch = ExtendBatch(
        q=q, cache=cache, out=out, req_to_token=req_to_token, req_pool_indices=req_pool_indices,
        seq_lens=seq_lens, k=k, v=v, loc=out_cache_loc, sm_scale=sm_scale, logit_cap=logit_cap,
        window=kernel_window(sliding_window), sinks=sinks, cross_attention=cross_attention,
        encoder_lens=encoder_lens, extend_seq_lens=extend_seq_lens,
        extend_start_loc=extend_start_loc, max_extend_len=max_extend_len, causal=causal,
    )  # fmt: skip
    _run(batch, _kernel.extend, _fallback.extend)
    return out


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    sm_scale: float | None = None,
    causal: bool = True,
    attention_mask: Tensor | None = None,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """Attention over contiguous per-request K/V (no paged cache).

    ``q [B, Hq, Sq, D]``, ``k [B, Hkv, Skv, D]``, ``v [B, Hkv, Skv, Dv]`` of one float dtype;
    returns ``[B, Hq, Sq, Dv]``. The queries are the last ``Sq`` positions of the ``Skv``
    keys, so ``causal`` aligns the mask bottom-right (query ``i`` sees keys
    ``<= Skv - Sq + i``); ``sm_scale`` defaults to ``D ** -0.5``. Without
    ``attention_mask`` this runs :func:`extend` over an identity request table on a
    flattened view of k/v (the kernels where they can run); ``attention_mask`` (bool, True
    = attend, or additive float; broadcastable to ``[B, Hq, Sq, Skv]``) runs the
    torch-native path, combined with ``causal`` and the window.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"attention: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}; expected "
            "4-D [batch, heads, seq, dim]"
        )
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if k.shape[0] != b or v.shape[0] != b or v.shape[1] != hkv or v.shape[2] != skv:
        raise ValueError(
            f"attention: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} do not agree "
            "on batch, KV heads and key length"
        )
    if k.shape[3] != d:
        raise ValueError(f"attention: k has head_dim {k.shape[3]}; q has {d}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"attention: {hq} query heads are not a multiple of {hkv} KV heads")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"attention: q {q.dtype}, k {k.dtype}, v {v.dtype}; expected one dtype")
    if sq > skv:
        raise ValueError(
            f"attention: {sq} queries but {skv} keys; the queries must be the last Sq of the keys"
        )
    scale = float(sm_scale) if sm_scale is not None else d**-0.5
    dv = v.shape[3]
    if attention_mask is not None:
        return _dense(q, k, v, scale, causal, attention_mask, logit_cap, sliding_window, sinks)
    dev = q.device
    kf = k.transpose(1, 2).reshape(b * skv, hkv, d)
    vf = v.transpose(1, 2).reshape(b * skv, hkv, dv)
    qf = q.transpose(1, 2).reshape(b * sq, hq, d)
    out = torch.empty(b * sq, hq, dv, dtype=q.dtype, device=dev)
    table = torch.arange(b * skv, dtype=torch.int64, device=dev).view(b, skv)
    extend(
        qf,
        None,
        None,
        KVCache(kf, vf),
        out,
        table,
        torch.arange(b, dtype=torch.int64, device=dev),
        torch.full((b,), skv, dtype=torch.int64, device=dev),
        torch.full((b,), sq, dtype=torch.int64, device=dev),
        sm_scale=scale,
        max_extend_len=sq,
        causal=causal,
        logit_cap=logit_cap,
        sliding_window=sliding_window,
        sinks=sinks,
    )
    return out.view(b, sq, hq, dv).transpose(1, 2)


def _dense(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    causal: bool,
    mask: Tensor,
    logit_cap: float,
    sliding_window: int | None,
    sinks: Tensor | None,
) -> Tensor:
    """attention() with an explicit mask: the fallback's fp32 attention over the whole
    [B, Hq, Sq, Skv] score block, the mask combined with ``causal`` and the window."""
    b, hq, sq = q.shape[:3]
    skv = k.shape[2]
    pos = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
    j = torch.arange(skv, device=q.device)[None, :]
    allowed = j <= pos if causal else torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    w = kernel_window(sliding_window)
    if w:
        allowed &= j > pos - w
    bias = None
    if mask.dtype == torch.bool:
        allowed = allowed & mask
    else:
        bias = torch.broadcast_to(mask.to(torch.float32), (b, hq, sq, skv))
    o = _fallback.attend(
        q.transpose(1, 2).to(torch.float32),
        k.transpose(1, 2).to(torch.float32),
        v.transpose(1, 2).to(torch.float32),
        torch.broadcast_to(allowed, (b, hq, sq, skv)),
        sm_scale=scale,
        logit_cap=logit_cap,
        sinks=sinks,
        bias=bias,
    )
    return o.transpose(1, 2).to(q.dtype)
