"""``sgl_kernel.mamba`` of the ``sgl_kernel`` stand-in: the Python wrappers SGLang 0.5.23's
CPU code imports for Gated DeltaNet layers (Qwen3-Next, Qwen3.5:
``srt/layers/attention/linear/gdn_backend.py``, ``kernels/gdn_triton.py``,
``kda_backend.py``), with sgl-kernel's names and signatures, calling rvv-ops' ops.

One difference from sgl-kernel's wrappers: those pass ``is_vnni=True`` because SGLang packs
the conv weights with ``causal_conv1d_weight_pack`` when the CPU has AMX; with the stand-in
SGLang takes no AMX path, the weights stay ``[dim, width]``, and these pass
``is_vnni=False``. Speculative decoding's target-verify arguments are refused with
NotImplementedError, as the stand-in's other speculative helpers are.
"""

from __future__ import annotations

from typing import Any

import rvv_ops  # noqa: F401  (registers torch.ops.sgl_kernel.*)
import torch
from torch import Tensor

RVV_SHIM = True


def causal_conv1d_fn_cpu(
    mixed_qkv_transposed: Tensor,
    conv_weights: Tensor,
    bias: Tensor | None,
    activation: str | None,
    conv_states: Tensor | None,
    has_initial_state: Tensor | None,
    cache_indices: Tensor | None,
    query_start_loc: Tensor | None,
    seq_lens_cpu: Any = None,
    block_table: Tensor | None = None,
) -> Tensor:
    """Prefill conv: ``mixed_qkv_transposed`` ``[dim, tokens]``, packed sequences at
    ``query_start_loc``; updates ``conv_states`` in place (``causal_conv1d_fwd_cpu``)."""
    if block_table is not None:
        raise NotImplementedError(
            "sgl_kernel.mamba.causal_conv1d_fn_cpu (rvv stand-in): block_table (a paged "
            "conv state) is not supported, as in sgl-kernel's CPU op"
        )
    out: Tensor = torch.ops.sgl_kernel.causal_conv1d_fwd_cpu(
        mixed_qkv_transposed,
        conv_weights,
        bias,
        conv_states,
        query_start_loc,
        cache_indices,
        has_initial_state,
        activation == "silu",
        -1,
        False,
    )
    return out


def causal_conv1d_update_cpu(
    mixed_qkv: Tensor,
    conv_states: Tensor,
    conv_weights: Tensor,
    bias: Tensor | None,
    activation: str | None,
    conv_state_indices: Tensor | None,
    intermediate_conv_window: Tensor | None = None,
    intermediate_state_indices: Tensor | None = None,
    retrieve_next_token: Tensor | None = None,
    retrieve_next_sibling: Tensor | None = None,
    retrieve_parent_token: Tensor | None = None,
) -> Tensor:
    """Decode conv: ``mixed_qkv`` ``[batch, dim]`` after each row's conv state
    (``causal_conv1d_update_cpu``); the state is updated in place."""
    if intermediate_conv_window is not None or intermediate_state_indices is not None:
        raise NotImplementedError(
            "sgl_kernel.mamba.causal_conv1d_update_cpu (rvv stand-in): speculative "
            "target-verify (intermediate_conv_window) is not supported"
        )
    out: Tensor = torch.ops.sgl_kernel.causal_conv1d_update_cpu(
        mixed_qkv,
        conv_states,
        conv_weights,
        bias,
        activation == "silu",
        None,
        conv_state_indices,
        -1,
        False,
    )
    return out


def chunk_gated_delta_rule_cpu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor,
    cu_seqlens: Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: Tensor | None = None,
) -> tuple[Tensor, Tensor, None]:
    """Prefill gated delta rule over packed sequences (``chunk_gated_delta_rule_cpu``):
    returns ``(output, final states, None)``; ``initial_state`` (SGLang's state pool) is
    updated in place at ``initial_state_indices`` (default: slot ``i`` for sequence ``i``)."""
    if initial_state_indices is None:
        initial_state_indices = torch.arange(cu_seqlens.numel() - 1, dtype=torch.int32)
    out, final = torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu(
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        True,
        cu_seqlens,
        head_first,
        use_qk_l2norm_in_kernel,
        initial_state_indices,
    )
    return out, final, None
