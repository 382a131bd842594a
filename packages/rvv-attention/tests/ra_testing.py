"""Test helpers: paged-cache builders and an independent fp64 reference.

The reference works from the logical data (per request, per head, per key) in float64,
with none of the package's code: its own dequantisation, its own INT8 quantiser and
fp8 cast, explicit masks, a plain softmax. Both implementations are compared with it.
"""

from __future__ import annotations

import math
import os
import platform
import shlex
import sys
from dataclasses import dataclass

import rvv_attention as ra
import torch
from torch import Tensor

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def set_row(t: Tensor, row: int, x: Tensor) -> None:
    """``t[row] = x``; fp8 through uint8 views (torch 2.6)."""
    if t.dtype in FP8:
        t.view(torch.uint8)[row] = x.view(torch.uint8)
    else:
        t[row] = x


def rows_of(t: Tensor, rows: Tensor) -> Tensor:
    """``t[rows]``; fp8 through uint8 (torch 2.6 cannot index fp8 tensors)."""
    if t.dtype in FP8:
        return t.view(torch.uint8)[rows].view(t.dtype)
    return t[rows]


EMULATED = platform.machine() == "riscv64"


def python_cmd() -> list[str]:
    """How to start a fresh Python (under qemu-user the emulated one cannot exec itself:
    tools/ops_riscv.py passes the QEMU command line in RVV_ATTENTION_TEST_PYTHON)."""
    cmd = os.environ.get("RVV_ATTENTION_TEST_PYTHON")
    return shlex.split(cmd) if cmd else [sys.executable]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """assert_close tolerances vs the fp64 reference: the output is rounded once to
    ``dtype`` (half an ulp: 2^-9 bf16, 2^-12 fp16), plus fp32 accumulation error."""
    if dtype == torch.bfloat16:
        return {"atol": 1e-2, "rtol": 2**-7}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2**-10}
    return {"atol": 2e-5, "rtol": 1e-4}


def same_impl_tolerance(dtype: torch.dtype) -> dict[str, float]:
    """Kernel vs fallback: both fp32 then one rounding, so one output ulp at most."""
    if dtype == torch.bfloat16:
        return {"atol": 1e-5, "rtol": 2**-7}
    if dtype == torch.float16:
        return {"atol": 1e-6, "rtol": 2**-10}
    return {"atol": 2e-6, "rtol": 2e-6}


def quantize_int8_ref(x: Tensor) -> tuple[Tensor, Tensor]:
    """The INT8 policy written out independently: per row absmax/127, round half to even."""
    xf = x.to(torch.float32)
    rows = xf.reshape(-1, xf.shape[-1])
    qs, ss = [], []
    for r in rows:
        amax = float(r.abs().max()) if r.numel() else 0.0
        scale = torch.tensor(amax, dtype=torch.float32) / 127.0
        if float(scale) == 0.0:
            qs.append(torch.zeros_like(r, dtype=torch.int8))
        else:
            qs.append(torch.clamp(torch.round(r / scale), -127, 127).to(torch.int8))
        ss.append(scale)
    q = torch.stack(qs).reshape(xf.shape) if qs else torch.zeros(xf.shape, dtype=torch.int8)
    s = torch.stack(ss).reshape(xf.shape[:-1]) if ss else torch.zeros(xf.shape[:-1])
    return q, s


def store(x: Tensor, cache: ra.KVCache, which: str) -> tuple[Tensor, Tensor | None]:
    """What writing real values ``x`` into ``cache`` stores (and the INT8 scales)."""
    if cache.dtype == torch.int8:
        return quantize_int8_ref(x)
    if cache.dtype in FP8:
        scale = cache.k_scale if which == "k" else cache.v_scale
        return (x.to(torch.float32) / scale).to(cache.dtype), None
    return x.to(cache.dtype), None


def real(cache: ra.KVCache, which: str, rows: Tensor) -> Tensor:
    """fp64 real values of cache rows."""
    t = rows_of(cache.k if which == "k" else cache.v, rows).to(torch.float64)
    if cache.dtype == torch.int8:
        sc = cache.k_scales if which == "k" else cache.v_scales
        assert sc is not None
        return t * sc[rows].to(torch.float64).unsqueeze(-1)
    if cache.dtype in FP8:
        return t * (cache.k_scale if which == "k" else cache.v_scale)
    return t


@dataclass
class Paged:
    """A paged cache plus SGLang's request table for some requests."""

    cache: ra.KVCache
    req_to_token: Tensor
    req_pool_indices: Tensor
    lens: list[int]
    """Tokens per request held in the table (positions 0..lens[b]-1 are valid)."""


def make_paged(
    lens: list[int],
    *,
    kv_heads: int,
    head_dim: int,
    v_head_dim: int,
    dtype: torch.dtype,
    cache_dtype: torch.dtype | None = None,
    seed: int = 0,
    index_dtype: torch.dtype = torch.int64,
    mla_view: bool = False,
) -> Paged:
    """Random cache rows scattered over a larger cache; table rows permuted, unused
    table entries -1 (nothing may read them)."""
    g = torch.Generator().manual_seed(seed)
    cache_dtype = cache_dtype or dtype
    total = sum(lens)
    tokens = total + 5
    width = (max(lens) if lens else 0) + 3
    rows = torch.randperm(tokens, generator=g)
    k_real = torch.randn(tokens, kv_heads, head_dim, generator=g)
    v_real = torch.randn(tokens, kv_heads, v_head_dim, generator=g) * 0.5
    if cache_dtype == torch.int8:
        kq, ks = quantize_int8_ref(k_real)
        vq, vs = quantize_int8_ref(v_real)
        cache = ra.KVCache(kq, vq, k_scales=ks, v_scales=vs)
    elif cache_dtype in FP8:
        kscale, vscale = 0.5, 0.25
        cache = ra.KVCache(
            (k_real / kscale).to(cache_dtype),
            (v_real / vscale).to(cache_dtype),
            k_scale=kscale,
            v_scale=vscale,
        )
    elif mla_view:
        assert v_head_dim <= head_dim
        k = k_real.to(dtype)
        cache = ra.KVCache(k, k[:, :, :v_head_dim])
    else:
        cache = ra.KVCache(k_real.to(dtype), v_real.to(dtype))
    n_req = len(lens)
    pool = n_req + 2
    table = torch.full((pool, width), -1, dtype=index_dtype)
    perm = torch.randperm(pool, generator=g)[:n_req]
    off = 0
    for b, n in enumerate(lens):
        table[perm[b], :n] = rows[off : off + n].to(index_dtype)
        off += n
    return Paged(cache, table, perm.to(index_dtype), list(lens))


def table_rows(p: Paged, b: int, start: int, stop: int) -> Tensor:
    return p.req_to_token[p.req_pool_indices[b], start:stop].to(torch.int64)


def ref_softmax_attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    sm_scale: float,
    logit_cap: float,
    sink: float | None,
) -> Tensor:
    """fp64: one query vector ``q [D]`` over keys ``k [L, D]``, values ``v [L, Dv]``."""
    if k.shape[0] == 0:
        return torch.zeros(v.shape[-1], dtype=torch.float64)
    s = (k @ q) * sm_scale
    if logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    m = float(s.max())
    if sink is not None:
        m = max(m, sink)
    w = torch.exp(s - m)
    denom = float(w.sum()) + (math.exp(sink - m) if sink is not None else 0.0)
    return (w @ v) / denom


def ref_decode(
    q: Tensor,
    p: Paged,
    seq_lens: list[int],
    *,
    sm_scale: float,
    logit_cap: float = 0.0,
    window: int | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """fp64 ``[B, Hq, Dv]`` from the cache as it is (after any write). ``window`` is
    SGLang's sliding_window_size (None: none)."""
    b_n, hq, _ = q.shape
    hkv = p.cache.kv_heads
    out = torch.zeros(b_n, hq, p.cache.v.shape[2], dtype=torch.float64)
    for b in range(b_n):
        n = seq_lens[b]
        lo = 0 if window is None or window < 0 else max(0, n - 1 - window)
        rows = table_rows(p, b, lo, n)
        k, v = real(p.cache, "k", rows), real(p.cache, "v", rows)
        for h in range(hq):
            kvh = h // (hq // hkv)
            out[b, h] = ref_softmax_attend(
                q[b, h].to(torch.float64),
                k[:, kvh],
                v[:, kvh],
                sm_scale=sm_scale,
                logit_cap=logit_cap,
                sink=None if sinks is None else float(sinks[h]),
            )
    return out


def ref_extend(
    q: Tensor,
    k_new: Tensor | None,
    v_new: Tensor | None,
    p: Paged,
    seq_lens: list[int],
    ext_lens: list[int],
    starts: list[int],
    *,
    sm_scale: float,
    causal: bool = True,
    logit_cap: float = 0.0,
    window: int | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """fp64 ``[N, Hq, Dv]`` (rows of no request are NaN). New tokens' K/V: ``k_new`` /
    ``v_new`` as given, or (None) the cache's real values rounded to q's dtype."""
    n_rows, hq, _ = q.shape
    hkv = p.cache.kv_heads
    dv = p.cache.v.shape[2]
    out = torch.full((n_rows, hq, dv), float("nan"), dtype=torch.float64)
    for b in range(len(seq_lens)):
        s_len, e_len = seq_lens[b], ext_lens[b]
        prefix = s_len - e_len
        rows = table_rows(p, b, 0, s_len)
        k = real(p.cache, "k", rows)
        v = real(p.cache, "v", rows)
        if k_new is not None and v_new is not None:
            k[prefix:] = k_new[starts[b] : starts[b] + e_len].to(torch.float64)
            v[prefix:] = v_new[starts[b] : starts[b] + e_len].to(torch.float64)
        else:
            k[prefix:] = k[prefix:].to(q.dtype).to(torch.float64)
            v[prefix:] = v[prefix:].to(q.dtype).to(torch.float64)
        for i in range(e_len):
            pos = prefix + i
            hi = pos + 1 if causal else s_len
            lo = 0 if window is None or window < 0 else max(0, pos - window)
            for h in range(hq):
                kvh = h // (hq // hkv)
                out[starts[b] + i, h] = ref_softmax_attend(
                    q[starts[b] + i, h].to(torch.float64),
                    k[lo:hi, kvh],
                    v[lo:hi, kvh],
                    sm_scale=sm_scale,
                    logit_cap=logit_cap,
                    sink=None if sinks is None else float(sinks[h]),
                )
    return out


def clone_cache(c: ra.KVCache) -> ra.KVCache:
    """A deep copy (a V view of K stays a view of the copy)."""
    k = c.k.clone()
    if c.v.data_ptr() == c.k.data_ptr() and c.v.shape[2] <= c.k.shape[2]:
        v = k[:, :, : c.v.shape[2]]
    else:
        v = c.v.clone()
    return ra.KVCache(
        k,
        v,
        k_scale=c.k_scale,
        v_scale=c.v_scale,
        k_scales=None if c.k_scales is None else c.k_scales.clone(),
        v_scales=None if c.v_scales is None else c.v_scales.clone(),
    )


def with_cache(p: Paged, cache: ra.KVCache) -> Paged:
    return Paged(cache, p.req_to_token, p.req_pool_indices, p.lens)
