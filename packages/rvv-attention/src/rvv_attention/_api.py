"""The public entry points: decode, extend, attention."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import torch
from torch import Tensor

from rvv_attention import _fallback, _kernel
from rvv_attention._cache import FLOAT_DTYPES, KVCache
from rvv_attention._select import (
    FALLBACK,
    KernelUnavailableError,
    Selection,
    demote,
    mode,
    note_fallback,
    select_key,
)

_INDEX = (torch.int32, torch.int64)

_CALLS: Counter[str] = Counter()


def call_counts() -> dict[str, int]:
    """Calls made in this process so far, as ``"<op>:<implementation>"`` -> count (for
    example ``{"decode:kernel": 120, "extend:fallback": 2}``): which implementation ran."""
    return dict(_CALLS)


class _NotThisCall(Exception):
    """The kernel cannot run this particular call (not the whole case): fall back once."""


def _window(sliding_window: int | None) -> int:
    """SGLang's ``sliding_window_size`` (None / < 0: none) -> the kernels' ``W + 1`` (0: none)."""
    if sliding_window is None or sliding_window < 0:
        return 0
    return int(sliding_window) + 1


def _check_common(
    op: str,
    q: Tensor,
    cache: KVCache,
    out: Tensor,
    sm_scale: float,
    logit_cap: float,
    sinks: Tensor | None,
    indices: dict[str, Tensor | None],
) -> None:
    if not isinstance(cache, KVCache):
        raise TypeError(f"{op}: cache must be an rvv_attention.KVCache; got {type(cache).__name__}")
    if q.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: q has dtype {q.dtype}; expected float32, bfloat16 or float16")
    if q.dim() != 3:
        raise ValueError(f"{op}: q has shape {list(q.shape)}; expected 3-D [tokens, heads, dim]")
    if cache.kind == "float" and cache.dtype != q.dtype:
        raise TypeError(
            f"{op}: the KV cache has dtype {cache.dtype} and q {q.dtype}; a float cache must "
            "have the query's dtype (or use fp8 / int8 storage)"
        )
    hq, d = q.shape[1], q.shape[2]
    if cache.k.shape[2] != d:
        raise ValueError(f"{op}: q has head_dim {d} but the K cache {cache.k.shape[2]}")
    if cache.kv_heads < 1 or hq % cache.kv_heads:
        raise ValueError(
            f"{op}: {hq} query heads are not a multiple of the cache's {cache.kv_heads} KV heads"
        )
    if out.dtype != q.dtype:
        raise TypeError(f"{op}: out has dtype {out.dtype}; expected q's dtype {q.dtype}")
    want = [q.shape[0], hq, int(cache.v.shape[2])]
    if list(out.shape) != want:
        raise ValueError(f"{op}: out has shape {list(out.shape)}; expected {want}")
    if not math.isfinite(sm_scale):
        raise ValueError(f"{op}: sm_scale is {sm_scale}; expected a finite number")
    if not (math.isfinite(logit_cap) and logit_cap >= 0):
        raise ValueError(f"{op}: logit_cap is {logit_cap}; expected a finite number >= 0")
    if sinks is not None and (sinks.dim() != 1 or sinks.shape[0] != hq):
        raise ValueError(f"{op}: sinks has shape {list(sinks.shape)}; expected [{hq}]")
    for name, t in indices.items():
        if t is not None and t.dtype not in _INDEX:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}; expected torch.int32 or int64")


def _common_features(
    op: str,
    cache: KVCache,
    sliding_window: int | None,
    sinks: Tensor | None,
    logit_cap: float,
    cross_attention: bool,
    encoder_lens: Tensor | None,
) -> tuple[int, set[str]]:
    """Checks that cross-attention has its encoder lengths; returns the kernels' window
    (:func:`_window`) and the features decode and extend share that this call uses (each
    op adds its own)."""
    if cross_attention and encoder_lens is None:
        raise ValueError(
            f"{op}: cross_attention=True needs encoder_lens (encoder tokens per request)"
        )
    window = _window(sliding_window)
    features: set[str] = set()
    if window:
        features.add("sliding_window")
    if sinks is not None:
        features.add("sinks")
    if logit_cap > 0:
        features.add("logit_cap")
    if cross_attention:
        features.add("cross_attention")
    if encoder_lens is not None:
        features.add("encoder_lens")
    if cache.kind != "float":
        features.add(f"{cache.kind}_kv")
    if cache.k.shape[2] != cache.v.shape[2]:
        features.add("mla")
    return window, features


def _run(
    op: str,
    q: Tensor,
    cache: KVCache,
    features: set[str],
    kernel_call: Callable[[], None],
    fallback_call: Callable[[], None],
) -> Selection:
    """Selects, runs the kernel (falling back if it rejects the case at run time) or the
    fallback; returns the selection that ran."""
    key = (
        op,
        q.dtype,
        cache.dtype,
        int(cache.k.shape[2]),
        int(cache.v.shape[2]),
        frozenset(features),
        q.device.type,
        mode(),
    )
    sel = select_key(key)
    if sel.impl.name == "kernel":
        try:
            kernel_call()
            _CALLS[f"{op}:kernel"] += 1
            return sel
        except _NotThisCall as e:
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
    fallback_call()
    _CALLS[f"{op}:{sel.impl.name}"] += 1
    return sel


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
    _check_common(
        "decode",
        q,
        cache,
        out,
        sm_scale,
        logit_cap,
        sinks,
        {
            "req_to_token": req_to_token,
            "req_pool_indices": req_pool_indices,
            "seq_lens": seq_lens,
            "loc": loc,
            "encoder_lens": encoder_lens,
        },
    )
    if (key is None) != (value is None):
        raise ValueError("decode: key and value must be given together (or neither)")
    if key is not None and loc is None:
        raise ValueError("decode: key/value were given without loc (the cache rows to write)")
    window, features = _common_features(
        "decode", cache, sliding_window, sinks, logit_cap, cross_attention, encoder_lens
    )
    if key is not None:
        features.add("kv_write")

    def kernel_call() -> None:
        use_loc = loc
        if use_loc is None:
            use_loc = torch.zeros(q.shape[0], dtype=torch.int64, device=q.device)
        _kernel.decode(
            q,
            cache,
            out,
            use_loc,
            req_to_token,
            req_pool_indices,
            seq_lens,
            sm_scale=sm_scale,
            key=key,
            value=value,
            logit_cap=logit_cap,
            window=window,
            sinks=sinks,
            threads=torch.get_num_threads(),
        )

    def fallback_call() -> None:
        _fallback.decode(
            q,
            cache,
            out,
            req_to_token,
            req_pool_indices,
            seq_lens,
            sm_scale=sm_scale,
            loc=loc,
            key=key,
            value=value,
            logit_cap=logit_cap,
            window=window,
            sinks=sinks,
            cross_attention=cross_attention,
            encoder_lens=encoder_lens,
        )

    if cache.tokens == 0:  # nothing to attend to (and no row a kernel could index)
        fallback_call()
        return out
    _run("decode", q, cache, features, kernel_call, fallback_call)
    return out


def _exclusive_cumsum(x: Tensor) -> Tensor:
    out = torch.zeros_like(x)
    if x.numel() > 1:
        out[1:] = torch.cumsum(x, 0)[:-1]
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
    _check_common(
        "extend",
        q,
        cache,
        out,
        sm_scale,
        logit_cap,
        sinks,
        {
            "req_to_token": req_to_token,
            "req_pool_indices": req_pool_indices,
            "seq_lens": seq_lens,
            "extend_seq_lens": extend_seq_lens,
            "extend_start_loc": extend_start_loc,
            "out_cache_loc": out_cache_loc,
            "encoder_lens": encoder_lens,
        },
    )
    if (k is None) != (v is None):
        raise ValueError("extend: k and v must be given together (or both None: KV-shared)")
    n, hkv = q.shape[0], cache.kv_heads
    if k is not None and v is not None:
        for name, t, d in (("k", k, cache.k.shape[2]), ("v", v, cache.v.shape[2])):
            if list(t.shape) != [n, hkv, d]:
                raise ValueError(
                    f"extend: {name} has shape {list(t.shape)}; expected {[n, hkv, int(d)]}"
                )
            if t.dtype != q.dtype:
                raise TypeError(f"extend: {name} has dtype {t.dtype}; expected q's {q.dtype}")
    if out_cache_loc is not None and list(out_cache_loc.shape) != [n]:
        raise ValueError(
            f"extend: out_cache_loc has shape {list(out_cache_loc.shape)}; expected [{n}]"
        )
    window, features = _common_features(
        "extend", cache, sliding_window, sinks, logit_cap, cross_attention, encoder_lens
    )
    if extend_start_loc is None:
        extend_start_loc = _exclusive_cumsum(extend_seq_lens)
    max_len = max_extend_len
    if max_len is None:
        max_len = int(extend_seq_lens.max()) if extend_seq_lens.numel() else 0
    if not causal:
        features.add("non_causal")
    if k is None:
        features.add("kv_shared")
    if out_cache_loc is not None and k is not None:
        features.add("kv_write")
    start_loc = extend_start_loc

    def kernel_call() -> None:
        ocl = out_cache_loc
        if cache.kind == "int8" and ocl is None:
            ocl = _new_token_rows(
                req_to_token, req_pool_indices, seq_lens, extend_seq_lens, start_loc, n
            )
        elif cache.kind != "int8" and ocl is not None and k is not None and v is not None:
            from rvv_attention._cache import write_rows

            write_rows(cache, ocl, k, v)
        _kernel.extend(
            q,
            k,
            v,
            cache,
            out,
            req_to_token,
            req_pool_indices,
            seq_lens,
            extend_seq_lens,
            start_loc,
            out_cache_loc=ocl,
            max_extend_len=max_len,
            sm_scale=sm_scale,
            causal=causal,
            logit_cap=logit_cap,
            window=window,
            sinks=sinks,
        )

    def fallback_call() -> None:
        _fallback.extend(
            q,
            k,
            v,
            cache,
            out,
            req_to_token,
            req_pool_indices,
            seq_lens,
            extend_seq_lens,
            start_loc,
            out_cache_loc=out_cache_loc,
            sm_scale=sm_scale,
            causal=causal,
            logit_cap=logit_cap,
            window=window,
            sinks=sinks,
            cross_attention=cross_attention,
            encoder_lens=encoder_lens,
        )

    _run("extend", q, cache, features, kernel_call, fallback_call)
    return out


def _new_token_rows(
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    extend_seq_lens: Tensor,
    extend_start_loc: Tensor,
    n: int,
) -> Tensor:
    """``out_cache_loc`` derived from the table: row ``start[b] + i`` -> the cache row of
    position ``prefix[b] + i``. Rows of q no request owns send this call to the fallback
    (the int8 kernel would write them somewhere)."""
    ext = extend_seq_lens.to(torch.int64)
    if int(ext.sum()) != n:
        raise _NotThisCall(
            "int8 cache, out_cache_loc=None and rows of q that belong to no request "
            "(the int8 kernel writes one cache row per row of q)"
        )
    ocl = torch.zeros(n, dtype=torch.int64, device=req_to_token.device)
    if n == 0:
        return ocl
    owner = torch.repeat_interleave(torch.arange(ext.numel(), device=ext.device), ext)
    first = extend_start_loc.to(torch.int64)
    offs = torch.arange(n, device=ext.device) - _exclusive_cumsum(ext)[owner]
    rows = first[owner] + offs
    pos = (seq_lens.to(torch.int64) - ext)[owner] + offs
    table = req_to_token[req_pool_indices.to(torch.int64)[owner]]
    pos_ok = (pos >= 0) & (pos < req_to_token.shape[1])
    if not bool(pos_ok.all()) or bool(((rows < 0) | (rows >= n)).any()):
        raise ValueError("extend: seq_lens / extend_start_loc reach outside req_to_token or q")
    ocl[rows] = table.gather(1, pos[:, None]).squeeze(1).to(torch.int64)
    return ocl


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
    """attention() with an explicit mask, in fp32 torch."""
    hq, sq = q.shape[1], q.shape[2]
    hkv, skv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = k.to(torch.float32).repeat_interleave(g, dim=1)
    vv = v.to(torch.float32).repeat_interleave(g, dim=1)
    s = torch.matmul(q.to(torch.float32), kk.transpose(-1, -2)) * scale
    if logit_cap > 0:
        s = torch.tanh(s / logit_cap) * logit_cap
    allowed = torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    pos = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
    j = torch.arange(skv, device=q.device)[None, :]
    if causal:
        allowed &= j <= pos
    w = _window(sliding_window)
    if w:
        allowed &= j > pos - w
    if mask.dtype == torch.bool:
        allowed = allowed & mask
    else:
        s = s + mask.to(torch.float32)
    s = s.masked_fill(~allowed, float("-inf"))
    mx = s.amax(dim=-1, keepdim=True)
    sink = None
    if sinks is not None:
        sink = sinks.to(torch.float32).view(1, hq, 1, 1)
        mx = torch.maximum(mx, sink)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    p = torch.exp(s - mx)
    denom = p.sum(-1, keepdim=True)
    if sink is not None:
        denom = denom + torch.exp(sink - mx)
    o = torch.matmul(p, vv)
    o = torch.where(denom > 0, o / torch.where(denom > 0, denom, 1.0), torch.zeros_like(o))
    return o.to(q.dtype)
