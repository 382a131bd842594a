"""The paged KV cache in SGLang's layout, as every conformance test builds it.

A layer's K and V caches (``[tokens, kv_heads, dim]``; bf16 / fp16 / fp32, fp8 with a
per-tensor scale, or int8 with per-token, per-head scales), the request table
``req_to_token`` and ``req_pool_indices``. The builder scatters each request's positions
over shuffled cache rows, leaves spare table rows and columns at -1 (never read) and hands
out strided cache views, so an implementation that assumes contiguity or reads outside a
request fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
"""The fp8 cache kinds (a case's ``cache`` field) and their dtypes."""

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Bit-exact equality, NaNs and fp8 included (torch.equal takes neither)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = _BITS[a.element_size()]
    return torch.equal(a.view(bits), b.view(bits))


def raw(t: Tensor) -> Tensor:
    """fp8 tensors as uint8 (a view): torch 2.6 (the riscv64 root's) has no fp8 indexing."""
    return t.view(torch.uint8) if t.dtype in FP8.values() else t


def dequantize(cache: Tensor, rows: Tensor, scale: float, scales: Tensor | None) -> Tensor:
    """fp64 values of cache rows `rows` (fp8: times the per-tensor scale; int8: times the
    per-token, per-head scales)."""
    x = raw(cache)[rows].view(cache.dtype).double()
    if cache.dtype in FP8.values():
        return x * scale
    if cache.dtype == torch.int8:
        assert scales is not None
        return x * scales[rows].double().unsqueeze(-1)
    return x


def quantize_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """SGLang's INT8 KV quantisation of rows x [..., dim]: scale = absmax / 127 (fp32),
    values round-half-even(x / scale) clamped to [-127, 127]; an all-zero row gets scale 0
    and zeros."""
    x = x.float()
    scale = x.abs().amax(dim=-1) / 127
    q = torch.where(
        scale[..., None] > 0,
        (x / scale[..., None]).round().clamp(-127, 127),
        torch.zeros_like(x),
    )
    return q.to(torch.int8), scale


def store(x: Tensor, cache_dtype: torch.dtype, scale: float) -> Tensor:
    """What SGLang's set_kv_buffer stores for x in a (non-int8) cache of `cache_dtype`."""
    return x if x.dtype == cache_dtype else (x / scale).to(cache_dtype)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> Tensor:
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def strided(t: Tensor, pad: int) -> Tensor:
    """t's values in a tensor whose last dimension is followed by `pad` unused elements, so
    every other stride differs from a contiguous tensor's."""
    if pad == 0:
        return t
    big = torch.zeros(*t.shape[:-1], t.shape[-1] + pad, dtype=t.dtype)
    big[..., : t.shape[-1]] = t
    return big[..., : t.shape[-1]]


@dataclass
class KvPool:
    """A layer's KV cache and request table in SGLang's layout."""

    k: Tensor
    v: Tensor
    k_scale: float
    v_scale: float
    k_scales: Tensor | None  # int8 only
    v_scales: Tensor | None
    req_to_token: Tensor
    req_pool_indices: Tensor

    def rows(self, b: int, lo: int, hi: int) -> Tensor:
        """Cache rows of request b's positions lo..hi-1."""
        return self.req_to_token[int(self.req_pool_indices[b]), lo:hi].long()

    def keys(self, b: int, lo: int, hi: int) -> tuple[Tensor, Tensor]:
        """fp64 K and V of request b's positions lo..hi-1, as the cache holds them now."""
        rows = self.rows(b, lo, hi)
        return (
            dequantize(self.k, rows, self.k_scale, self.k_scales),
            dequantize(self.v, rows, self.v_scale, self.v_scales),
        )

    def snapshot(self) -> dict[str, Tensor]:
        """Copies of the caches (and int8 scales), under the ops' argument names."""
        out = {"k_cache": self.k.clone(), "v_cache": self.v.clone()}
        if self.k_scales is not None and self.v_scales is not None:
            out["k_scale_buf"], out["v_scale_buf"] = self.k_scales.clone(), self.v_scales.clone()
        return out


def make_pool(
    g: torch.Generator,
    lens: tuple[int, ...],
    *,
    kv_heads: int,
    dims: tuple[int, int],
    dtype: torch.dtype,
    cache: str,
    table: torch.dtype,
    mla: bool = False,
    pad: int = 8,
    spare: int = 5,
) -> KvPool:
    """Caches for requests of `lens` tokens: `spare` rows more than needed, each request's
    positions on shuffled rows, spare table rows and columns (holding -1: never read),
    strided cache views. `cache`: "same" (the query dtype), "e4m3", "e5m2" or "int8";
    `mla`: V is a view of K's first dims[1] elements (SGLang's MLA pool)."""
    dim, dim_v = dims
    total = sum(lens)
    tokens = total + spare
    width = max(lens, default=0) + 3
    requests = len(lens) + 2

    def values(d: int, scale: float) -> Tensor:
        x = torch.randn(tokens, kv_heads, d, generator=g)
        if cache == "int8":
            return torch.randint(-127, 128, (tokens, kv_heads, d), generator=g, dtype=torch.int8)
        if cache in FP8:
            return (x / scale).to(FP8[cache])
        return x.to(dtype)

    # an MLA pool is one buffer: one scale for K and its V prefix
    k_scale, v_scale = (0.5, 0.5 if mla else 0.25) if cache in FP8 else (1.0, 1.0)
    k = strided(values(dim, k_scale), pad)
    if mla:
        v = k[..., :dim_v]
    else:
        layers = torch.stack([values(dim_v, v_scale), values(dim_v, v_scale)])
        v = layers[1]  # one layer of a [layers, tokens, heads, dim_v] buffer
    k_scales = v_scales = None
    if cache == "int8":
        k_scales = torch.rand(tokens, kv_heads, generator=g) * 0.02 + 0.005
        v_scales = torch.rand(tokens, kv_heads, generator=g) * 0.02 + 0.005
    req_to_token = torch.full((requests, width), -1, dtype=table)
    pool_indices = torch.randperm(requests, generator=g)[: len(lens)]
    rows = torch.randperm(tokens, generator=g)[:total]
    start = 0
    for b, n in enumerate(lens):
        req_to_token[pool_indices[b], :n] = rows[start : start + n].to(table)
        start += n
    return KvPool(k, v, k_scale, v_scale, k_scales, v_scales, req_to_token, pool_indices)


def spare_rows(pool: KvPool) -> Tensor:
    """Cache rows no request's table entry points at."""
    used = torch.zeros(pool.k.shape[0], dtype=torch.bool)
    used[pool.req_to_token[pool.req_to_token >= 0].long()] = True
    return torch.nonzero(~used)[:, 0]
