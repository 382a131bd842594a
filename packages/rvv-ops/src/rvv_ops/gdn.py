"""Typed wrappers over Gated DeltaNet's ops (csrc/gdn.cpp), the linear attention of
Qwen3-Next and Qwen3.5, with the names and arguments of sgl-kernel's CPU ops that SGLang
0.5.23's ``srt/layers/attention/linear/`` code calls:

- ``causal_conv1d_fwd_cpu`` / ``causal_conv1d_update_cpu``: the short depthwise causal
  convolution (prefill / decode) with each request's conv state;
- ``fused_sigmoid_gating_delta_rule_update_cpu``: one decode step of the gated delta rule;
- ``chunk_gated_delta_rule_cpu``: the gated delta rule over packed prefill sequences.

States are updated in place. Every computation is in fp32 (inputs fp32, bf16 or fp16). A
wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected; state indices are checked before anything is
written.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_conv1d_fwd(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    conv_states: Tensor | None,
    query_start_loc: Tensor | None,
    cache_indices: Tensor | None,
    has_initial_state: Tensor | None,
    silu_activation: bool,
    pad_slot_id: int = -1,
    is_vnni: bool = False,
) -> Tensor:
    """Depthwise causal convolution of packed (or batched) sequences.

    ``x`` is ``[dim, total_tokens]`` with ``query_start_loc`` (int32/int64 ``[batch + 1]``
    offsets; tokens past the last offset give 0) or ``[batch, dim, seqlen]`` without;
    ``weight`` ``[dim, width]`` (``is_vnni``: sgl-kernel's ``causal_conv1d_weight_pack``
    layout, bf16/fp16, width 4); ``bias`` ``[dim]`` or None. For sequence ``i`` the history
    is ``conv_states[cache_indices[i]]`` (``[slots, dim, width - 1]``, oldest first) when
    ``has_initial_state[i]``, else zeros; ``out[:, t] = act(bias + sum_w weight[:, w] *
    window[t + w])``, act = SiLU if ``silu_activation``. The slot then holds the sequence's
    last ``width - 1`` inputs (after its history). A slot equal to ``pad_slot_id`` has no
    state. Returns a tensor of ``x``'s shape, strides and dtype.
    """
    out: Tensor = torch.ops.sgl_kernel.causal_conv1d_fwd_cpu.default(
        x,
        weight,
        bias,
        conv_states,
        query_start_loc,
        cache_indices,
        has_initial_state,
        silu_activation,
        pad_slot_id,
        is_vnni,
    )
    return out


def causal_conv1d_update(
    x: Tensor,
    conv_states: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    silu_activation: bool,
    cache_seqlens: Tensor | None = None,
    conv_state_indices: Tensor | None = None,
    pad_slot_id: int = -1,
    is_vnni: bool = False,
) -> Tensor:
    """One decode step (or ``seqlen`` steps) of the causal convolution after the state.

    ``x`` is ``[batch, dim]`` or ``[batch, dim, seqlen]``; row ``i`` continues slot
    ``conv_state_indices[i]`` (default ``i``) of ``conv_states`` ``[slots, dim, width - 1]``,
    which then holds its last ``width - 1`` inputs. ``cache_seqlens`` (a circular state)
    must be None, as in sgl-kernel's CPU op. Returns a tensor of ``x``'s shape and dtype.
    """
    out: Tensor = torch.ops.sgl_kernel.causal_conv1d_update_cpu.default(
        x,
        conv_states,
        weight,
        bias,
        silu_activation,
        cache_seqlens,
        conv_state_indices,
        pad_slot_id,
        is_vnni,
    )
    return out


def fused_sigmoid_gating_delta_rule_update(
    A_log: Tensor,
    dt_bias: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    initial_state_source: Tensor,
    initial_state_indices: Tensor,
    cu_seqlens: Tensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> Tensor:
    """Decode step of the gated delta rule with the gates computed in the op.

    ``q``, ``k`` ``[seq_len, batch, heads, K]``, ``v`` ``[seq_len, batch, v_heads, V]``
    (``v_heads`` a multiple of ``heads``), ``a``, ``b`` ``[batch, v_heads]``, ``A_log``,
    ``dt_bias`` ``[v_heads]``; ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta =
    sigmoid(b)``. Batch entry ``i``'s tokens continue the fp32 state
    ``initial_state_source[initial_state_indices[i]]`` (``[slots, v_heads, V, K]``, updated
    in place; a negative index: a zero state, not written). ``cu_seqlens`` ``[batch + 1]``
    is checked for shape only (each batch entry is one sequence). Returns ``[batch,
    seq_len, v_heads, V]`` in ``q``'s dtype.
    """
    out: Tensor = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu.default(
        A_log,
        dt_bias,
        q,
        k,
        v,
        a,
        b,
        initial_state_source,
        initial_state_indices,
        cu_seqlens,
        use_qk_l2norm_in_kernel,
        softplus_beta,
        softplus_threshold,
    )
    return out


def chunk_gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor,
    output_final_state: bool,
    cu_seqlens: Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: Tensor,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule over packed prefill sequences.

    ``query``, ``key`` ``[1, tokens, heads, K]``, ``value`` ``[1, tokens, v_heads, V]``,
    ``g`` (log decay) and ``beta`` ``[1, tokens, v_heads]``; sequence ``i`` is tokens
    ``cu_seqlens[i]:cu_seqlens[i + 1]`` and continues the fp32 state
    ``initial_state[initial_state_indices[i]]`` (``[slots, v_heads, V, K]``, updated in
    place; a negative index: a zero state, not written). ``head_first`` must be False.
    Computed token by token (the recurrent form of the chunked algorithm). Returns
    ``(output [1, tokens, v_heads, V] in query's dtype, final states [num_seqs, v_heads,
    V, K] fp32)`` (no rows if not ``output_final_state``).
    """
    out, final = torch.ops.sgl_kernel.chunk_gated_delta_rule_cpu.default(
        query,
        key,
        value,
        g,
        beta,
        initial_state,
        output_final_state,
        cu_seqlens,
        head_first,
        use_qk_l2norm_in_kernel,
        initial_state_indices,
        eps,
    )
    return out, final


def fused_qkvzba_split_reshape_cat_contiguous(
    mixed_qkvz: Tensor,
    mixed_ba: Tensor,
    num_heads_qk: int,
    num_heads_v: int,
    head_qk: int,
    head_v: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Qwen3.5's GDN input projections split: ``mixed_qkvz [tokens, q | k | v | z]`` and
    ``mixed_ba [tokens, b | a]`` -> new tensors ``(mixed_qkv [tokens, q | k | v], z [tokens,
    num_heads_v, head_v], b [tokens, num_heads_v], a [tokens, num_heads_v])``.

    Calls ``torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu``.
    """
    op = torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu.default
    qkv, z, b, a = op(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)
    return qkv, z, b, a
