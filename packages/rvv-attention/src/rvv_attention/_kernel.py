"""The kernel implementation: rvv-ops' attention ops, loaded lazily."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from torch import Tensor

from rvv_attention._cache import KVCache
from rvv_attention._scratch import DEFAULT_KV_HEADS_PER_TASK, num_splits, scratch

_lock = threading.Lock()
_loaded: tuple[ModuleType | None, str | None] | None = None
_OPS = (
    "decode_attention",
    "decode_attention_int8",
    "extend_attention",
    "extend_attention_int8",
    "build_info",
)


def load() -> tuple[ModuleType | None, str | None]:
    """``(rvv_ops, None)``, or ``(None, why it cannot be used)``; imported once per process."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _import()
    return _loaded


def _import() -> tuple[ModuleType | None, str | None]:
    try:
        mod = importlib.import_module("rvv_ops")
    except Exception as e:  # ImportError, or whatever a broken build raises while loading
        return None, f"rvv_ops cannot be imported ({type(e).__name__}: {e})"
    missing = [name for name in _OPS if not hasattr(mod, name)]
    if missing:
        return None, f"rvv_ops {getattr(mod, '__version__', '?')} lacks {', '.join(missing)}"
    return mod, None


def reset() -> None:
    """Forgets the import result (tests)."""
    global _loaded, _per_task
    with _lock:
        _loaded = None
        _per_task = None


_per_task: int | None = None


def decode_kv_heads_per_task() -> int:
    """KV heads per decode stage-1 task of the loaded kernels (``build_info()``'s
    ``decode_kv_heads_per_task``), or ``DEFAULT_KV_HEADS_PER_TASK`` when rvv_ops cannot be
    loaded or does not report it; looked up once."""
    global _per_task
    if _per_task is None:
        info = build_info()
        value = info.get("decode_kv_heads_per_task") if info is not None else None
        _per_task = value if isinstance(value, int) and value >= 1 else DEFAULT_KV_HEADS_PER_TASK
    return _per_task


def build_info() -> dict[str, Any] | None:
    """``rvv_ops.build_info()`` or None."""
    mod, _ = load()
    return dict(mod.build_info()) if mod is not None else None


def _ops() -> ModuleType:
    mod, err = load()
    if mod is None:
        raise RuntimeError(err)
    return mod


def _op_for(
    ops: ModuleType, cache: KVCache, name: str
) -> tuple[Any, tuple[Tensor, ...], dict[str, float]]:
    """The op for this cache: ``name`` with the cache's ``k_scale`` / ``v_scale`` keywords
    (float and fp8 caches), or its ``_int8`` twin with the per-token scale buffers it takes
    after the caches."""
    if cache.kind == "int8":
        assert cache.k_scales is not None and cache.v_scales is not None
        return getattr(ops, f"{name}_int8"), (cache.k_scales, cache.v_scales), {}
    return getattr(ops, name), (), {"k_scale": cache.k_scale, "v_scale": cache.v_scale}


def decode(
    q: Tensor,
    cache: KVCache,
    out: Tensor,
    loc: Tensor,
    req_to_token: Tensor,
    req_pool_indices: Tensor,
    seq_lens: Tensor,
    *,
    sm_scale: float,
    key: Tensor | None,
    value: Tensor | None,
    logit_cap: float,
    window: int,
    sinks: Tensor | None,
    threads: int,
) -> None:
    """One decode step through ``decode_attention_cpu`` (or its int8 twin)."""
    ops = _ops()
    batch, heads = q.shape[0], q.shape[1]
    splits = num_splits(batch, cache.kv_heads, threads)  # for the loaded kernels' tasks
    logits = scratch.attn_logits(batch, heads, splits, int(cache.v.shape[2]), q.device)
    op, scales, scale_kw = _op_for(ops, cache, "decode_attention")
    op(
        q,
        cache.k,
        cache.v,
        *scales,
        out,
        loc,
        logits,
        req_to_token,
        req_pool_indices,
        seq_lens,
        sm_scale=sm_scale,
        key=key,
        value=value,
        **scale_kw,
        logit_cap=logit_cap,
        window=window,
        sinks=sinks,
    )


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
    extend_start_loc: Tensor,
    *,
    out_cache_loc: Tensor | None,
    max_extend_len: int,
    sm_scale: float,
    causal: bool,
    logit_cap: float,
    window: int,
    sinks: Tensor | None,
) -> None:
    """One extend step through ``extend_attention_cpu`` (or its int8 twin).

    The float op never writes the cache, so new K/V are written here first when
    ``out_cache_loc`` is given; the int8 op quantises and writes them itself.
    """
    ops = _ops()
    op, scales, scale_kw = _op_for(ops, cache, "extend_attention")
    if cache.kind == "int8":
        assert out_cache_loc is not None
        scales = (*scales, out_cache_loc)
    op(
        q,
        k,
        v,
        out,
        cache.k,
        cache.v,
        *scales,
        req_to_token,
        req_pool_indices,
        seq_lens,
        extend_seq_lens,
        extend_start_loc,
        sm_scale=sm_scale,
        **scale_kw,
        max_len_extend=max_extend_len,
        logit_cap=logit_cap,
        window=window,
        sinks=sinks,
        causal=causal,
    )


def unsupported_prefix() -> str:
    """The prefix of rvv_ops' NotImplementedError messages for features it lacks."""
    mod, _ = load()
    return str(getattr(mod, "UNSUPPORTED", "rvv_ops: unsupported: "))
