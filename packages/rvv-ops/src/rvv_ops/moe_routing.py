"""Typed wrappers over the mixture-of-experts routing ops (csrc/moe_routing.cpp), as SGLang
0.5.23's CPU code calls them (``srt/layers/moe/topk.py``, ``srt/models/grok.py``).

Each returns ``(topk_weights, topk_ids)``: float32 and int32 ``[tokens, topk]``, the
experts with the highest selection value first; equal values go to the lowest expert id
(and, for groups, the lowest group id). ``gating_output`` holds the router logits
``[tokens, experts]`` (float32, bfloat16 or float16); ``hidden_states`` only gives the
token count (``[tokens, hidden_size]``). A ``correction_bias`` ``[experts]`` (float32,
bfloat16 or float16) changes only which experts are chosen: the weights are the unbiased
scores, as in SGLang. ``renormalize`` divides the chosen weights by their sum.

A wrong dtype raises TypeError, any other bad argument ValueError, naming the op, the
argument, its value and what was expected.
"""

from __future__ import annotations

import torch
from torch import Tensor


def topk_softmax(
    hidden_states: Tensor,
    gating_output: Tensor,
    topk: int,
    renormalize: bool,
    correction_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Top-k experts by ``softmax(gating_output)`` (``topk_softmax_cpu``)."""
    w, i = torch.ops.sgl_kernel.topk_softmax_cpu.default(
        hidden_states, gating_output, topk, renormalize, correction_bias
    )
    return w, i


def topk_sigmoid(
    hidden_states: Tensor,
    gating_output: Tensor,
    topk: int,
    renormalize: bool,
    correction_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Top-k experts by ``sigmoid(gating_output)`` (``topk_sigmoid_cpu``)."""
    w, i = torch.ops.sgl_kernel.topk_sigmoid_cpu.default(
        hidden_states, gating_output, topk, renormalize, correction_bias
    )
    return w, i


def grouped_topk(
    hidden_states: Tensor,
    gating_output: Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int,
    topk_group: int,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float | None = None,
    num_token_non_padded: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """DeepSeek-V2's grouped top-k (``grouped_topk_cpu``): softmax scores; the experts
    split into ``num_expert_group`` groups of consecutive ids, a group's value is its
    highest score, and the top-k is taken over the experts of the ``topk_group`` best
    groups. ``routed_scaling_factor`` is accepted and does not scale the weights (SGLang
    passes the model's factor while asserting it is not applied on the output).
    ``num_fused_shared_experts`` must be 0 and ``num_token_non_padded`` None."""
    w, i = torch.ops.sgl_kernel.grouped_topk_cpu.default(
        hidden_states,
        gating_output,
        topk,
        renormalize,
        num_expert_group,
        topk_group,
        num_fused_shared_experts,
        routed_scaling_factor,
        num_token_non_padded,
    )
    return w, i


def biased_grouped_topk(
    hidden_states: Tensor,
    gating_output: Tensor,
    correction_bias: Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int,
    topk_group: int,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float | None = None,
    num_token_non_padded: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """DeepSeek-V3's routing (``biased_grouped_topk_cpu``): sigmoid scores, chosen by
    score + ``correction_bias``; a group's value is the sum of its two highest biased
    scores. The weights are the unbiased scores (renormalised if asked), then multiplied
    by ``routed_scaling_factor`` when it is given (SGLang passes it only when it is to be
    applied). ``num_fused_shared_experts`` must be 0 and ``num_token_non_padded`` None."""
    w, i = torch.ops.sgl_kernel.biased_grouped_topk_cpu.default(
        hidden_states,
        gating_output,
        correction_bias,
        topk,
        renormalize,
        num_expert_group,
        topk_group,
        num_fused_shared_experts,
        routed_scaling_factor,
        num_token_non_padded,
    )
    return w, i


def fused_moe_router(
    moe_softcapping: float,
    hidden_states: Tensor,
    gating_output: Tensor,
    topk: int,
    renormalize: bool,
    correction_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Grok's fused router (``fused_moe_router_cpu``). ``gating_output`` is the router's
    weight ``[experts, hidden_size]`` (Grok passes ``self.gate.weight``), not logits:
    logits = ``hidden_states @ gating_output.T`` in fp32, soft-capped to
    ``moe_softcapping * tanh(logits / moe_softcapping)`` (0: none), plus
    ``correction_bias``; the weights are the softmax probabilities of those logits.
    ``hidden_states`` and the weight may each be float32, bfloat16 or float16."""
    w, i = torch.ops.sgl_kernel.fused_moe_router_cpu.default(
        moe_softcapping, hidden_states, gating_output, topk, renormalize, correction_bias
    )
    return w, i
