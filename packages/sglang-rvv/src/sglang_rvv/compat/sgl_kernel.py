"""sglang-rvv's stand-in for sgl-kernel's ``sgl_kernel`` Python module in SGLang's CPU mode.

Served as ``sgl_kernel`` by :mod:`sglang_rvv.compat` (row ``sgl_kernel``) only when no real
``sgl_kernel`` is installed. Importing it registers the RVV ops (``torch.ops.sgl_kernel.*``,
from rvv-ops) and provides the Python-level helpers SGLang 0.5.23's CPU code imports by name
at module load:

- ``assign_req_to_token_pool_cpu`` and ``copy_all_layer_kv_cache_cpu``: used while serving;
  implemented here with torch (index copies; no Python loop over requests).
- the speculative-decoding helpers (``assign_extend_cache_locs_cpu``,
  ``assign_draft_cache_locs_contiguous_cpu``, ``rotate_input_ids_cpu``,
  ``fill_accept_out_cache_loc_cpu``, ``fill_bonus_tokens_cpu``,
  ``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``): importable so SGLang's
  modules load, but speculative decoding is not supported by sglang-rvv and calling one raises
  ``NotImplementedError`` saying so.

It also defines sgl-kernel's CPU tensor-parallel ops (``torch.ops.sgl_kernel.initialize``,
``init_cpu_threads_env``, ``shm_allreduce``, ``shm_allgather``) on ``torch.distributed``:
:mod:`sglang_rvv.compat.collectives`.
"""

from __future__ import annotations

import ctypes
from typing import Any, NoReturn

import rvv_ops  # noqa: F401  (registers torch.ops.sgl_kernel.*)
import torch

from sglang_rvv import op_stats
from sglang_rvv.compat import collectives

collectives.register()
op_stats.trace_ops()  # SGLANG_RVV_OP_STATS=1: before SGLang's model modules bind the ops

RVV_SHIM = True
"""Marks this module as sglang-rvv's stand-in (``getattr(sgl_kernel, "RVV_SHIM", False)``)."""


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """``req_to_token[req_pool_indices[i], start[i]:end[i]] = out_cache_loc[o_i : o_i + n_i]``.

    ``o_i`` is the sum of the earlier requests' lengths ``n = end - start``; in place.
    """
    if req_to_token.dim() != 2 or req_to_token.size(1) != pool_len:
        raise ValueError(
            f"assign_req_to_token_pool_cpu: req_to_token has shape {tuple(req_to_token.shape)}, "
            f"expected [rows, pool_len={pool_len}]"
        )
    lengths = (end_offset - start_offset).to(torch.int64)
    if lengths.numel() == 0:
        return
    if bool((lengths < 0).any()):
        raise ValueError(
            f"assign_req_to_token_pool_cpu: end_offset < start_offset in {lengths.tolist()}"
        )
    total = int(lengths.sum())
    if total == 0:
        return
    if out_cache_loc.numel() < total:
        raise ValueError(
            f"assign_req_to_token_pool_cpu: out_cache_loc has {out_cache_loc.numel()} entries, "
            f"the ranges need {total}"
        )
    rows = torch.repeat_interleave(req_pool_indices.to(torch.int64), lengths)
    firsts = torch.cumsum(lengths, 0) - lengths
    within = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(firsts, lengths)
    cols = torch.repeat_interleave(start_offset.to(torch.int64), lengths) + within
    if bool((cols >= pool_len).any()):
        raise ValueError(f"assign_req_to_token_pool_cpu: an end offset exceeds pool_len={pool_len}")
    req_to_token[rows, cols] = out_cache_loc[:total].to(req_to_token.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """For every buffer ``b`` (base address ``data_ptrs[b]``, row size ``strides[b]`` bytes),
    copies rows ``src_loc`` to rows ``tgt_loc``; all rows are read before any is written, so
    overlapping moves are safe."""
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError(
            f"copy_all_layer_kv_cache_cpu: tgt_loc has {tgt_loc.numel()} entries, "
            f"src_loc {src_loc.numel()}: expected the same number"
        )
    if tgt_loc.numel() == 0:
        return
    src = src_loc.to(torch.int64)
    tgt = tgt_loc.to(torch.int64)
    if bool((src < 0).any()) or bool((tgt < 0).any()):
        raise ValueError("copy_all_layer_kv_cache_cpu: negative row index")
    rows = int(torch.maximum(src.max(), tgt.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        size = rows * int(stride)
        raw = (ctypes.c_uint8 * size).from_address(int(ptr))
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        view[tgt] = view[src]  # advanced indexing reads a copy first


def _unsupported(name: str) -> Any:
    def fn(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name}: speculative decoding is not supported by sglang-rvv's CPU "
            "stand-in for sgl_kernel; run without --speculative-algorithm"
        )

    fn.__name__ = name
    fn.__qualname__ = name
    return fn


SPECULATIVE = (
    "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "rotate_input_ids_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "build_draft_decode_metadata_cpu",
)
"""Names importable for SGLang's module loads; each raises NotImplementedError when called."""

assign_extend_cache_locs_cpu = _unsupported("assign_extend_cache_locs_cpu")
assign_draft_cache_locs_contiguous_cpu = _unsupported("assign_draft_cache_locs_contiguous_cpu")
rotate_input_ids_cpu = _unsupported("rotate_input_ids_cpu")
fill_accept_out_cache_loc_cpu = _unsupported("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _unsupported("fill_bonus_tokens_cpu")
build_tree_kernel_efficient_cpu = _unsupported("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _unsupported("verify_tree_greedy_cpu")
build_draft_decode_metadata_cpu = _unsupported("build_draft_decode_metadata_cpu")
