"""One decode or extend call as a record: built and checked once by the public entry point
(:mod:`rvv_attention._api`), then read by the kernel path and by the fallback."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from rvv_attention._cache import FLOAT_DTYPES, KVCache

_INDEX = (torch.int32, torch.int64)


def kernel_window(sliding_window: int | None) -> int:
    """SGLang's ``sliding_window_size`` (None / < 0: none) -> the kernels' ``W + 1`` (0: none)."""
    if sliding_window is None or sliding_window < 0:
        return 0
    return int(sliding_window) + 1


def exclusive_cumsum(x: Tensor) -> Tensor:
    """``[0, x[0], x[0] + x[1], ...]``: where each request's rows start when they are packed."""
    out = torch.zeros_like(x)
    if x.numel() > 1:
        out[1:] = torch.cumsum(x, 0)[:-1]
    return out


@dataclass(frozen=True, eq=False)
class Batch:
    """What a decode and an extend call share, checked when the record is built.

    ``k`` / ``v`` are the new tokens' K/V (decode's ``key`` / ``value``, extend's ``k`` /
    ``v``) and ``loc`` the cache rows they are written at first (decode's ``loc``, extend's
    ``out_cache_loc``), each None when not given. ``window`` is in the kernels' convention
    (:func:`kernel_window`).
    """

    q: Tensor
    cache: KVCache
    out: Tensor
    req_to_token: Tensor
    req_pool_indices: Tensor
    seq_lens: Tensor
    k: Tensor | None
    v: Tensor | None
    loc: Tensor | None
    sm_scale: float
    logit_cap: float
    window: int
    sinks: Tensor | None
    cross_attention: bool
    encoder_lens: Tensor | None

    OP: ClassVar[str]
    """The op's name, as the error messages start."""
    LOC: ClassVar[str]
    """The public name of ``loc``."""

    def __post_init__(self) -> None:
        self._check_common()
        self._check_kv()
        self._check_encoder()

    @property
    def writes(self) -> bool:
        """Whether new K/V are written into the cache before attending."""
        return self.k is not None and self.v is not None and self.loc is not None

    def features(self) -> set[str]:
        """The selection features this call uses (see ``_select.FEATURES``)."""
        features: set[str] = set()
        if self.window:
            features.add("sliding_window")
        if self.sinks is not None:
            features.add("sinks")
        if self.logit_cap > 0:
            features.add("logit_cap")
        if self.cross_attention:
            features.add("cross_attention")
        if self.encoder_lens is not None:
            features.add("encoder_lens")
        if self.cache.kind != "float":
            features.add(f"{self.cache.kind}_kv")
        if self.cache.k.shape[2] != self.cache.v.shape[2]:
            features.add("mla")
        if self.writes:
            features.add("kv_write")
        return features

    def _own_indices(self) -> dict[str, Tensor | None]:
        """The index tensors only this op takes, by public name."""
        return {}

    def _indices(self) -> dict[str, Tensor | None]:
        """Every index tensor by public name, in the order they are checked."""
        return {
            "req_to_token": self.req_to_token,
            "req_pool_indices": self.req_pool_indices,
            "seq_lens": self.seq_lens,
            **self._own_indices(),
            self.LOC: self.loc,
            "encoder_lens": self.encoder_lens,
        }

    def _check_common(self) -> None:
        op, q, cache, out = self.OP, self.q, self.cache, self.out
        if not isinstance(cache, KVCache):
            raise TypeError(
                f"{op}: cache must be an rvv_attention.KVCache; got {type(cache).__name__}"
            )
        if q.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{op}: q has dtype {q.dtype}; expected float32, bfloat16 or float16")
        if q.dim() != 3:
            raise ValueError(
                f"{op}: q has shape {list(q.shape)}; expected 3-D [tokens, heads, dim]"
            )
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
                f"{op}: {hq} query heads are not a multiple of the cache's {cache.kv_heads} KV "
                "heads"
            )
        if out.dtype != q.dtype:
            raise TypeError(f"{op}: out has dtype {out.dtype}; expected q's dtype {q.dtype}")
        want = [q.shape[0], hq, int(cache.v.shape[2])]
        if list(out.shape) != want:
            raise ValueError(f"{op}: out has shape {list(out.shape)}; expected {want}")
        if not math.isfinite(self.sm_scale):
            raise ValueError(f"{op}: sm_scale is {self.sm_scale}; expected a finite number")
        if not (math.isfinite(self.logit_cap) and self.logit_cap >= 0):
            raise ValueError(f"{op}: logit_cap is {self.logit_cap}; expected a finite number >= 0")
        sinks = self.sinks
        if sinks is not None and (sinks.dim() != 1 or sinks.shape[0] != hq):
            raise ValueError(f"{op}: sinks has shape {list(sinks.shape)}; expected [{hq}]")
        for name, t in self._indices().items():
            if t is not None and t.dtype not in _INDEX:
                raise TypeError(f"{op}: {name} has dtype {t.dtype}; expected torch.int32 or int64")
        self._check_request_counts()

    def _requests(self) -> tuple[int, str]:
        """How many requests the call holds, and what says so (for the error message)."""
        if self.seq_lens.dim() != 1:
            raise ValueError(
                f"{self.OP}: seq_lens has shape {list(self.seq_lens.shape)}; expected 1-D "
                "[requests]"
            )
        return int(self.seq_lens.shape[0]), "as seq_lens"

    def _check_request_counts(self) -> None:
        """The per-request tensors are 1-D with one entry per request."""
        n, source = self._requests()
        per_request = {"seq_lens": self.seq_lens, "req_pool_indices": self.req_pool_indices}
        per_request.update({k: t for k, t in self._own_indices().items() if t is not None})
        for name, t in per_request.items():
            if list(t.shape) != [n]:
                raise ValueError(
                    f"{self.OP}: {name} has shape {list(t.shape)}; expected [{n}] (one entry "
                    f"per request, {source})"
                )

    def _check_kv(self) -> None:
        """The new K/V's own rules (decode and extend differ)."""
        raise NotImplementedError

    def _check_encoder(self) -> None:
        op, enc = self.OP, self.encoder_lens
        if self.cross_attention and enc is None:
            raise ValueError(
                f"{op}: cross_attention=True needs encoder_lens (encoder tokens per request)"
            )
        if enc is not None and list(enc.shape) != [self.seq_lens.shape[0]]:
            raise ValueError(
                f"{op}: encoder_lens has shape {list(enc.shape)}; expected "
                f"[{self.seq_lens.shape[0]}] (one entry per request, as seq_lens)"
            )


@dataclass(frozen=True, eq=False)
class DecodeBatch(Batch):
    """A decode call: one query row per request."""

    OP: ClassVar[str] = "decode"
    LOC: ClassVar[str] = "loc"

    def _requests(self) -> tuple[int, str]:
        return int(self.q.shape[0]), "as q's rows"

    def _check_kv(self) -> None:
        if (self.k is None) != (self.v is None):
            raise ValueError("decode: key and value must be given together (or neither)")
        if self.k is not None and self.loc is None:
            raise ValueError("decode: key/value were given without loc (the cache rows to write)")


@dataclass(frozen=True, eq=False)
class ExtendBatch(Batch):
    """An extend call: request ``b`` owns the rows ``extend_start_loc[b] ..
    + extend_seq_lens[b]`` of q. ``extend_start_loc`` and ``max_extend_len`` hold the
    values the call used (the public defaults already applied)."""

    extend_seq_lens: Tensor
    extend_start_loc: Tensor
    max_extend_len: int
    causal: bool

    OP: ClassVar[str] = "extend"
    LOC: ClassVar[str] = "out_cache_loc"

    def _own_indices(self) -> dict[str, Tensor | None]:
        return {"extend_seq_lens": self.extend_seq_lens, "extend_start_loc": self.extend_start_loc}

    def _check_kv(self) -> None:
        k, v, q, cache = self.k, self.v, self.q, self.cache
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
        if self.loc is not None and list(self.loc.shape) != [n]:
            raise ValueError(
                f"extend: out_cache_loc has shape {list(self.loc.shape)}; expected [{n}]"
            )

    def features(self) -> set[str]:
        features = super().features()
        if not self.causal:
            features.add("non_causal")
        if self.k is None:
            features.add("kv_shared")
        return features
