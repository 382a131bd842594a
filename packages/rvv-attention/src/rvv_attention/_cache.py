"""The KV cache description and the INT8 / fp8 write policy shared by both implementations."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


@dataclass(frozen=True, eq=False)
class KVCache:
    """One layer's KV cache in SGLang's layout: ``k [T, Hkv, D]``, ``v [T, Hkv, Dv]``.

    Storage dtypes:

    - the query's float dtype (fp32, bf16 or fp16): values as they are;
    - ``torch.float8_e4m3fn`` / ``torch.float8_e5m2``: real value = stored * ``k_scale``
      (``v_scale``), one float per tensor;
    - ``torch.int8``: real value = stored * ``k_scales`` (``v_scales``), fp32 ``[T, Hkv]``,
      one scale per token and KV head. The scales are required: an INT8 cache without them
      is a ValueError, never a guess.

    ``v`` may be a view of ``k`` (MLA: the value is the first ``Dv`` elements of the key).
    The tensors are referenced, never copied; writes go into them in place.
    """

    k: Tensor
    v: Tensor
    k_scale: float = 1.0
    v_scale: float = 1.0
    k_scales: Tensor | None = None
    v_scales: Tensor | None = None

    def __post_init__(self) -> None:
        k, v = self.k, self.v
        if not isinstance(k, Tensor) or not isinstance(v, Tensor):
            raise TypeError(
                f"KVCache: k and v must be tensors; got {type(k).__name__} and {type(v).__name__}"
            )
        if k.dim() != 3 or v.dim() != 3:
            raise ValueError(
                f"KVCache: k has shape {list(k.shape)} and v {list(v.shape)}; expected "
                "k [tokens, kv_heads, head_dim] and v [tokens, kv_heads, head_dim_v]"
            )
        if k.shape[0] != v.shape[0] or k.shape[1] != v.shape[1]:
            raise ValueError(
                f"KVCache: k has shape {list(k.shape)} and v {list(v.shape)}; expected the same "
                "number of tokens and KV heads"
            )
        if k.dtype != v.dtype:
            raise TypeError(f"KVCache: k has dtype {k.dtype} and v {v.dtype}; expected the same")
        allowed = (*FLOAT_DTYPES, *FP8_DTYPES, torch.int8)
        if k.dtype not in allowed:
            raise TypeError(
                f"KVCache: dtype {k.dtype} is not a KV-cache dtype; expected one of "
                f"{', '.join(str(d) for d in allowed)}"
            )
        for name in ("k_scale", "v_scale"):
            x = float(getattr(self, name))
            if not (math.isfinite(x) and x > 0):
                raise ValueError(f"KVCache: {name} is {x}; expected a finite number > 0")
        if k.dtype == torch.int8:
            for name in ("k_scales", "v_scales"):
                s = getattr(self, name)
                if s is None:
                    raise ValueError(
                        f"KVCache: {name} is required for an int8 cache (fp32 [tokens, kv_heads],"
                        " real value = stored * scale); none was given"
                    )
                if not isinstance(s, Tensor) or s.dtype != torch.float32:
                    raise TypeError(
                        f"KVCache: {name} must be a torch.float32 tensor; got "
                        f"{getattr(s, 'dtype', type(s).__name__)}"
                    )
                if list(s.shape) != [k.shape[0], k.shape[1]]:
                    raise ValueError(
                        f"KVCache: {name} has shape {list(s.shape)}; expected "
                        f"[{k.shape[0]}, {k.shape[1]}] ([tokens, kv_heads], from k)"
                    )
                if s.device != k.device:
                    raise ValueError(f"KVCache: {name} is on {s.device}; k is on {k.device}")
        else:
            for name in ("k_scales", "v_scales"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"KVCache: {name} applies to int8 caches only; this cache is {k.dtype}"
                    )
        if v.device != k.device:
            raise ValueError(f"KVCache: v is on {v.device}; k is on {k.device}")

    @property
    def dtype(self) -> torch.dtype:
        """The storage dtype of ``k`` and ``v``."""
        return self.k.dtype

    @property
    def kind(self) -> str:
        """``"float"``, ``"fp8"`` or ``"int8"``."""
        if self.k.dtype == torch.int8:
            return "int8"
        if self.k.dtype in FP8_DTYPES:
            return "fp8"
        return "float"

    @property
    def tokens(self) -> int:
        """Rows of the cache (``T``)."""
        return int(self.k.shape[0])

    @property
    def kv_heads(self) -> int:
        """KV heads (``Hkv``)."""
        return int(self.k.shape[1])


def quantize_int8(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row symmetric INT8 quantisation of ``x [..., D]``: the INT8 KV policy.

    ``scale = absmax / 127``; stored = ``clamp(round_half_even(x / scale), -127, 127)``,
    computed in fp32; an all-zero row gets scale 0 and zeros. Returns ``(int8 [..., D],
    fp32 scales [...])``. This is rvv-ops' policy, so both implementations write the same
    bytes.
    """
    xf = x.to(torch.float32)
    scale = xf.abs().amax(dim=-1) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe.unsqueeze(-1)).clamp_(-127, 127)
    q = torch.where(scale.unsqueeze(-1) > 0, q, torch.zeros_like(q))
    return q.to(torch.int8), scale


def write_rows(cache: KVCache, loc: Tensor, key: Tensor, value: Tensor) -> None:
    """Writes ``key [n, Hkv, D]`` / ``value [n, Hkv, Dv]`` at rows ``loc [n]`` of the cache.

    Float caches get the values cast to the cache dtype, fp8 caches ``key / k_scale`` cast
    (as SGLang's ``set_kv_buffer``), INT8 caches the per-(token, head) quantisation of
    :func:`quantize_int8` with the scales written to the same rows. Duplicate rows: the last
    one wins. If ``v`` is a view of ``k`` (MLA), K is written last so it wins where they
    overlap, as in the kernels.
    """
    idx = loc.to(torch.int64)
    if cache.kind == "int8":
        assert cache.k_scales is not None and cache.v_scales is not None
        vq, vs = quantize_int8(value)
        kq, ks = quantize_int8(key)
        _put(cache.v, idx, vq)
        _put(cache.v_scales, idx, vs)
        _put(cache.k, idx, kq)
        _put(cache.k_scales, idx, ks)
        return
    if cache.kind == "fp8":
        vw = (value.to(torch.float32) / cache.v_scale).to(cache.dtype)
        kw = (key.to(torch.float32) / cache.k_scale).to(cache.dtype)
    else:
        vw, kw = value.to(cache.dtype), key.to(cache.dtype)
    _put(cache.v, idx, vw)
    _put(cache.k, idx, kw)


def _bits(t: Tensor) -> Tensor:
    """fp8 tensors as uint8 (torch 2.6, Debian 13's, cannot index fp8 tensors)."""
    return t.view(torch.uint8) if t.dtype in FP8_DTYPES else t


def rows_of(t: Tensor, rows: Tensor) -> Tensor:
    """``t[rows]`` for any cache dtype, fp8 included."""
    return _bits(t)[rows].view(t.dtype)


def _put(dst: Tensor, idx: Tensor, src: Tensor) -> None:
    # A Python loop keeps "last duplicate wins" exact (index_copy_ leaves it unspecified);
    # duplicates are rare (CPU-graph padding), so the vectorised path handles the rest.
    if idx.numel() == 0:
        return
    dst, src = _bits(dst), _bits(src)
    uniq = torch.unique(idx)
    if uniq.numel() == idx.numel():
        dst[idx] = src
        return
    for i in range(idx.numel()):
        dst[int(idx[i])] = src[i]


def dequantize(cache: KVCache, rows: Tensor) -> tuple[Tensor, Tensor]:
    """fp32 K and V of the cache rows ``rows`` (any shape): ``[*rows.shape, Hkv, D/Dv]``."""
    k = rows_of(cache.k, rows).to(torch.float32)
    v = rows_of(cache.v, rows).to(torch.float32)
    if cache.kind == "int8":
        assert cache.k_scales is not None and cache.v_scales is not None
        k = k * cache.k_scales[rows].unsqueeze(-1)
        v = v * cache.v_scales[rows].unsqueeze(-1)
    elif cache.kind == "fp8":
        k = k * cache.k_scale
        v = v * cache.v_scale
    return k, v
