"""Test helpers: how to start a fresh Python, and rvv-attention's view of the conformance
suite's paged cache (tests/conformance: the one KV-cache builder and fp64 reference).

The numerics of decode / extend over the case matrix are tests/conformance/
test_attention.py's; the helpers here serve the API, selection and doctor tests.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import rvv_attention as ra
import torch
from torch import Tensor

try:
    import conformance  # noqa: F401  (on the path through the root pyproject.toml)
except ImportError:  # a fresh Python started by a test, outside pytest
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from conformance.kvcache import FP8, KvPool, gen, make_pool, raw
from conformance.reference import attention

EMULATED = platform.machine() == "riscv64"


def python_cmd() -> list[str]:
    """How to start a fresh Python (under qemu-user the emulated one cannot exec itself:
    tools/ops_riscv.py passes the QEMU command line in RVV_ATTENTION_TEST_PYTHON)."""
    cmd = os.environ.get("RVV_ATTENTION_TEST_PYTHON")
    return shlex.split(cmd) if cmd else [sys.executable]


def rows_of(t: Tensor, rows: Tensor) -> Tensor:
    """``t[rows]``; fp8 through uint8 (torch 2.6 cannot index fp8 tensors)."""
    return raw(t)[rows].view(t.dtype)


@dataclass
class Paged:
    """A conformance-suite pool as an rvv-attention KVCache plus SGLang's request table."""

    pool: KvPool
    cache: ra.KVCache
    req_to_token: Tensor
    req_pool_indices: Tensor


def make_paged(
    lens: list[int],
    *,
    kv_heads: int,
    head_dim: int,
    v_head_dim: int,
    dtype: torch.dtype,
    cache_dtype: torch.dtype | None = None,
    seed: int = 0,
) -> Paged:
    """conformance.kvcache.make_pool for requests of `lens` tokens (cache of q's dtype, or
    `cache_dtype`: fp8 or int8), int64 table."""
    kinds = {v: k for k, v in FP8.items()} | {torch.int8: "int8"}
    cache = "same" if cache_dtype in (None, dtype) else kinds[cache_dtype]
    pool = make_pool(
        gen(seed), tuple(lens), kv_heads=kv_heads, dims=(head_dim, v_head_dim), dtype=dtype,
        cache=cache, table=torch.int64,
    )  # fmt: skip
    kv = ra.KVCache(
        pool.k, pool.v, k_scale=pool.k_scale, v_scale=pool.v_scale, k_scales=pool.k_scales,
        v_scales=pool.v_scales,
    )  # fmt: skip
    return Paged(pool, kv, pool.req_to_token, pool.req_pool_indices)


def ref_decode(q: Tensor, p: Paged, seq_lens: list[int], *, sm_scale: float) -> Tensor:
    """The conformance reference (fp64 [B, Hq, Dv]) of a plain decode over `p`."""
    outs = []
    for b, n in enumerate(seq_lens):
        k, v = p.pool.keys(b, 0, n)
        outs.append(attention(q[b : b + 1], k, v, torch.tensor([n - 1]), sm_scale=sm_scale)[0])
    return torch.stack(outs)
