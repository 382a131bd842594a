"""rvv-attention: a framework-agnostic attention dispatcher over the RVV kernels.

Paged / indexed KV-cache attention (SGLang's data model) through rvv-ops' RVV kernels
where they can run, else a batched torch-native fallback, with the reason logged once
(logger ``rvv_attention``)::

    import rvv_attention as ra

    cache = ra.KVCache(k_buffer, v_buffer)
    ra.decode(q, cache, out, req_to_token, req_pool_indices, seq_lens, sm_scale=s,
              loc=loc, key=k, value=v)
    ra.extend(q, k, v, cache, out, req_to_token, req_pool_indices, seq_lens,
              extend_seq_lens, sm_scale=s, out_cache_loc=loc)
    ra.attention(q, k, v)                 # contiguous per-request K/V
    ra.select("decode", q_dtype=..., kv_dtype=..., head_dim=...)   # what would run, and why
    ra.capabilities()                     # CPU features and the kernel build
    ra.call_counts()                      # {"decode:kernel": n, ...} in this process
    ra.advise_huge_pages(k_buffer, v_buffer)   # KV cache on 2 MiB pages (Linux THP)

``RVV_ATTENTION_IMPL=auto|kernel|fallback`` overrides the choice. See the README.
"""

from __future__ import annotations

import threading

from rvv_attention._api import attention, call_counts, decode, extend
from rvv_attention._cache import KVCache, quantize_int8, write_rows
from rvv_attention._capabilities import Capabilities, detect
from rvv_attention._hugepages import HugePages, advise_huge_pages
from rvv_attention._scratch import DEFAULT_KV_HEADS_PER_TASK, ScratchPool, num_splits, scratch
from rvv_attention._select import (
    ENV_IMPL,
    FEATURES,
    Implementation,
    KernelUnavailableError,
    Selection,
    clear_cache,
    implementations,
    select,
)

__version__ = "0.1.0"

_caps: Capabilities | None = None
_caps_lock = threading.Lock()


def capabilities(*, refresh: bool = False) -> Capabilities:
    """The running machine's vector features and the installed kernel build (detected once).

    ``refresh=True`` detects again (e.g. after ``torch.set_num_threads``).
    """
    global _caps
    if _caps is None or refresh:
        with _caps_lock:
            if _caps is None or refresh:
                from rvv_attention import _kernel

                mod, err = _kernel.load()
                _caps = detect(
                    kernels=dict(mod.build_info()) if mod is not None else None,
                    kernels_error=err,
                )
    return _caps


__all__ = [
    "DEFAULT_KV_HEADS_PER_TASK",
    "ENV_IMPL",
    "FEATURES",
    "Capabilities",
    "HugePages",
    "Implementation",
    "KVCache",
    "KernelUnavailableError",
    "ScratchPool",
    "Selection",
    "__version__",
    "advise_huge_pages",
    "attention",
    "call_counts",
    "capabilities",
    "clear_cache",
    "decode",
    "extend",
    "implementations",
    "num_splits",
    "quantize_int8",
    "scratch",
    "select",
    "write_rows",
]
