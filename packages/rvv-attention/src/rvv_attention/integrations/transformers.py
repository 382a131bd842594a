"""Hugging Face transformers: ``attn_implementation="rvv"``.

After :func:`register`, a model loaded or built with ``attn_implementation="rvv"`` runs its
attention through :func:`rvv_attention.attention`: the RVV kernels where they can run
(no explicit mask: a single sequence or an unpadded batch), the torch-native path with
the mask transformers built otherwise. Training-time dropout is handed to transformers'
own ``sdpa`` function (rvv-attention is for inference).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

import rvv_attention as ra

NAME = "rvv"
"""The ``attn_implementation`` name :func:`register` uses by default."""


def rvv_attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' attention-function signature over :func:`rvv_attention.attention`.

    ``query [B, Hq, Sq, D]``, ``key`` / ``value [B, Hkv, Skv, D]``; returns
    ``([B, Sq, Hq, Dv], None)``. Honours ``sliding_window`` (transformers' convention: a
    query sees that many keys, itself included), ``softcap`` (logit cap) and ``s_aux``
    (per-head sinks) from the layer's keyword arguments.
    """
    if (dropout > 0.0 and module.training) or kwargs.get("position_bias") is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out: tuple[Tensor, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
        return out
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    q_len, kv_len = query.shape[2], key.shape[2]
    if attention_mask is None and causal and 1 < q_len < kv_len:
        # transformers leaves out the mask here only for a prefill into an empty static
        # cache: the queries are the first q_len positions (upper-left alignment).
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    window = kwargs.get("sliding_window")
    softcap = kwargs.get("softcap")
    sinks = kwargs.get("s_aux")
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool and mask.dim() == 4:
        mask = mask.to(torch.float32)
    out_t = ra.attention(
        query,
        key,
        value,
        sm_scale=scaling,
        causal=causal and q_len > 1 and mask is None,
        attention_mask=mask,
        logit_cap=float(softcap) if softcap else 0.0,
        # With a mask, transformers has already put the window into it.
        sliding_window=int(window) - 1 if window and mask is None else None,
        sinks=sinks,
    )
    return out_t.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> None:
    """Registers ``name`` (default ``"rvv"``) with transformers' ``AttentionInterface``,
    and with ``AttentionMaskInterface`` (transformers >= 4.53 builds masks per attention
    implementation; ``rvv`` takes the ``sdpa`` masks: boolean, or None when causal alone
    suffices, which lets the kernels run)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, rvv_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # older transformers: masks do not depend on the implementation
        return
    AttentionMaskInterface.register(name, sdpa_mask)
