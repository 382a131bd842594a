"""The kernel implementation: rvv-ops' attention ops, loaded lazily."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from rvv_attention._batch import Batch, DecodeBatch, ExtendBatch, exclusive_cumsum
from rvv_attention._cache import write_rows
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


def _op_for(b: Batch, name: str) -> tuple[Any, tuple[Tensor, ...], dict[str, Any]]:
    """The op for this call's cache, the caches as it takes them and the keyword arguments
    decode and extend both take from the call: ``name`` with the cache's ``k_scale`` /
    ``v_scale`` keywords (float and fp8 caches), or its ``_int8`` twin, which takes the
    per-token scale buffers after the caches."""
    ops, cache = _ops(), b.cache
    options: dict[str, Any] = {
        "sm_scale": b.sm_scale,
        "logit_cap": b.logit_cap,
        "window": b.window,
        "sinks": b.sinks,
    }
    if cache.kind == "int8":
        assert cache.k_scales is not None and cache.v_scales is not None
        caches = (cache.k, cache.v, cache.k_scales, cache.v_scales)
        return getattr(ops, f"{name}_int8"), caches, options
    options.update(k_scale=cache.k_scale, v_scale=cache.v_scale)
    return getattr(ops, name), (cache.k, cache.v), options


class NotThisCall(Exception):
    """The kernel cannot run this particular call (not the whole case): fall back once."""


def decode(b: DecodeBatch) -> None:
    """One decode step through ``decode_attention_cpu`` (or its int8 twin)."""
    op, caches, options = _op_for(b, "decode_attention")
    q, cache = b.q, b.cache
    batch, heads = q.shape[0], q.shape[1]
    # The split count follows the loaded kernels' tasks.
    splits = num_splits(batch, cache.kv_heads, torch.get_num_threads())
    logits = scratch.attn_logits(batch, heads, splits, int(cache.v.shape[2]), q.device)
    # The op takes a loc even when it writes nothing.
    loc = b.loc if b.loc is not None else torch.zeros(batch, dtype=torch.int64, device=q.device)
    op(q, *caches, b.out, loc, logits, *_requests(b), key=b.k, value=b.v, **options)


def extend(b: ExtendBatch) -> None:
    """One extend step through ``extend_attention_cpu`` (or its int8 twin).

    The float op never writes the cache, so new K/V are written here first when
    ``out_cache_loc`` is given. The int8 op quantises and writes them itself, into
    ``out_cache_loc`` or, without it, the rows ``req_to_token`` names for the new tokens
    (:func:`_new_token_rows`).
    """
    op, caches, options = _op_for(b, "extend_attention")
    if b.cache.kind == "int8":
        caches = (*caches, b.loc if b.loc is not None else _new_token_rows(b))
    elif b.writes:
        assert b.loc is not None and b.k is not None and b.v is not None
        write_rows(b.cache, b.loc, b.k, b.v)
    op(
        b.q,
        b.k,
        b.v,
        b.out,
        *caches,
        *_requests(b),
        b.extend_seq_lens,
        b.extend_start_loc,
        max_len_extend=b.max_extend_len,
        causal=b.causal,
        **options,
    )


def _requests(b: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """The request table arguments both ops take, in their order."""
    return b.req_to_token, b.req_pool_indices, b.seq_lens


def _new_token_rows(b: ExtendBatch) -> Tensor:
    """``out_cache_loc`` derived from the table: row ``start[b] + i`` -> the cache row of
    position ``prefix[b] + i``. Rows of q no request owns send this call to the fallback
    (the int8 kernel would write them somewhere)."""
    n = b.q.shape[0]
    ext = b.extend_seq_lens.to(torch.int64)
    if int(ext.sum()) != n:
        raise NotThisCall(
            "int8 cache, out_cache_loc=None and rows of q that belong to no request "
            "(the int8 kernel writes one cache row per row of q)"
        )
    table = b.req_to_token
    ocl = torch.zeros(n, dtype=torch.int64, device=table.device)
    if n == 0:
        return ocl
    owner = torch.repeat_interleave(torch.arange(ext.numel(), device=ext.device), ext)
    first = b.extend_start_loc.to(torch.int64)
    offs = torch.arange(n, device=ext.device) - exclusive_cumsum(ext)[owner]
    rows = first[owner] + offs
    pos = (b.seq_lens.to(torch.int64) - ext)[owner] + offs
    own_rows = table[b.req_pool_indices.to(torch.int64)[owner]]
    pos_ok = (pos >= 0) & (pos < table.shape[1])
    if not bool(pos_ok.all()) or bool(((rows < 0) | (rows >= n)).any()):
        raise ValueError("extend: seq_lens / extend_start_loc reach outside req_to_token or q")
    ocl[rows] = own_rows.gather(1, pos[:, None]).squeeze(1).to(torch.int64)
    return ocl


def unsupported_prefix() -> str:
    """The prefix of rvv_ops' NotImplementedError messages for features it lacks."""
    mod, _ = load()
    return str(getattr(mod, "UNSUPPORTED", "rvv_ops: unsupported: "))
