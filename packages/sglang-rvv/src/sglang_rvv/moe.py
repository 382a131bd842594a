"""Mixture-of-experts layers of SGLang 0.5.23 on a CPU: routing, fused experts, the Qwen2-MoE
shared-expert gate.

On a CPU without AMX SGLang runs its MoE layers in torch: the router through
``topk.fused_topk_native`` (``fused_topk_torch_native``), ``grouped_topk`` and
``biased_grouped_topk`` (its GPU functions, in torch), the experts through
``UnquantizedFusedMoEMethod.forward_native`` (``moe_forward_native``: a Python loop over the
experts). Its AMX branch instead calls ``torch.ops.sgl_kernel``'s ``topk_softmax_cpu``,
``topk_sigmoid_cpu``, ``grouped_topk_cpu``, ``biased_grouped_topk_cpu`` and
``fused_experts_cpu`` on weights packed once at load. With layer routing on
(``SGLANG_RVV_LAYERS``, see :mod:`sglang_rvv.layers`) the AROUND hooks below make the CPU path
call rvv-ops' versions of these ops with the arguments SGLang's AMX branch passes:

==============================================================  ==================================
SGLang function or method                                       RVV op
==============================================================  ==================================
``moe.topk.fused_topk_native`` (softmax / sigmoid scores)       ``topk_softmax_cpu`` /
                                                                ``topk_sigmoid_cpu``
``moe.topk.grouped_topk`` (softmax)                             ``grouped_topk_cpu``
``moe.topk.biased_grouped_topk``                                ``biased_grouped_topk_cpu``
``quantization.unquant.UnquantizedFusedMoEMethod``              ``convert_weight_packed`` of the
(``process_weights_after_loading``, ``forward_native``)          3-D ``w13_weight`` / ``w2_weight``
                                                                once at load, ``fused_experts_cpu``
                                                                (``CPUQuantMethod.UNQUANT``)
``quantization.w8a8_int8.W8A8Int8MoEMethod``                    the same for int8 weights,
(``process_weights_after_loading``, ``apply``)                  ``fused_experts_cpu``
                                                                (``CPUQuantMethod.INT8_W8A8``)
``quantization.fp8.Fp8MoEMethod`` (block-scaled fp8;            the same for fp8 weights (block
``process_weights_after_loading``, ``apply``)                   scales to fp32),
                                                                ``fused_experts_cpu``
                                                                (``CPUQuantMethod.FP8_W8A16``)
``hardware_backend.cpu.quantization`` ``AWQIntelAMXMoEKernel``  SGLang's own calls of
/ ``GPTQIntelAMXMoEKernel`` (``process_weights_after_loading``,  ``convert_weight_packed_scale_zp``
``apply``)                                                      and ``fused_experts_cpu``
                                                                (``CPUQuantMethod.INT4_W4A8``),
                                                                counted; GPTQ act-order refused
==============================================================  ==================================

What the ops do not cover goes to SGLang's own code, and the reason is logged once per kind
and counted as ``fallback <what>`` in the layer stats: other scoring functions
(``sqrtsoftplus``), grouped top-k with sigmoid scores or a routed scaling factor applied on the
output, activations other than SiLU (and SwiGLU's alpha / clamp limit), weights that are not
fp32 / bf16 / fp16 CPU tensors. A hook whose op is missing from the installed rvv-ops is not
registered (a warning names the ops); if an op disappears after that, the call fails with a
clear message naming it.

SGLang runs W8A8 int8 MoE on a CPU only with AMX or on arm64 (elsewhere its path is a triton
kernel), and block-scaled FP8 MoE only with AMX (it asserts); with routing on both run
through the op on any CPU. AWQ and GPTQ experts: with routing on, SGLang's CPU quantisation
configs (:func:`sglang_rvv.layers.quantization_config`) pick its CPU int4 MoE kernels, which
call the ops themselves; they are W4A8 (activations quantised per token), whatever
``SGLANG_RVV_INT4_ACT`` says for the linear layers. The FP8 and INT4 hooks are registered
when the installed rvv-ops' ``fused_experts_cpu`` runs those methods
(``rvv_ops.moe.METHODS``). Not routed: ``shared_expert_cpu``, which SGLang calls only for
DeepSeek's shared expert (Qwen2-MoE's shared expert is an ordinary MLP, whose linear layers
and SiLU the dense hooks already route), per-tensor fp8 and MXFP4 experts.

Independently of routing, :data:`CPU_FIX_HOOKS` make Qwen2-MoE start on a CPU at all: SGLang
0.5.23 applies its shared expert's sigmoid gate with a triton kernel
(``fused_gate_sigmoid_mul_add``, in ``Qwen2MoeSparseMoeBlock.forward``) whenever that gate
is not an AMX-packed layer, so on any CPU without AMX the first forward fails in triton's
driver lookup ("0 active drivers"). The hooks compute the same thing in torch for CPU tensors
(in fp32, as the kernel does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger("sglang_rvv")

ROUTING_OPS = (
    "topk_softmax_cpu",
    "topk_sigmoid_cpu",
    "grouped_topk_cpu",
    "biased_grouped_topk_cpu",
)
EXPERT_OPS = ("convert_weight_packed", "fused_experts_cpu")
MOE_OPS = ROUTING_OPS + EXPERT_OPS

PACK_COUNT = "convert_weight_packed experts"
"""The stats key of a 3-D expert weight packed by ``convert_weight_packed`` (two per MoE
layer; the linear layers' packing counts as ``convert_weight_packed``)."""

UNQUANT = 0
"""SGLang's ``CPUQuantMethod.UNQUANT`` (``moe_comp_method`` of ``fused_experts_cpu``)."""
INT8_W8A8 = 1
"""SGLang's ``CPUQuantMethod.INT8_W8A8``."""
FP8_W8A16 = 2
"""SGLang's ``CPUQuantMethod.FP8_W8A16`` (block-scaled fp8 experts, activations unquantised)."""
INT4_W4A8 = 3
"""SGLang's ``CPUQuantMethod.INT4_W4A8`` (AWQ / GPTQ experts, activations int8 per token)."""

_PACKED = "_rvv_moe_packed"
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_warned: set[str] = set()


def _count(op: str) -> None:
    from sglang_rvv import layers

    layers._count(op)


def _op(name: str) -> Any:
    """``torch.ops.sgl_kernel.<name>``, or a RuntimeError naming what is missing."""
    import rvv_ops  # noqa: F401  (registers the ops)

    if not hasattr(torch.ops.sgl_kernel, name):
        raise RuntimeError(
            f"sglang-rvv: torch.ops.sgl_kernel.{name} is not defined: the installed rvv-ops "
            f"predates the MoE ops (needed: {', '.join(MOE_OPS)}); install a newer rvv-ops or "
            "set SGLANG_RVV_LAYERS=0"
        )
    return getattr(torch.ops.sgl_kernel, name)


def missing_ops() -> list[str]:
    """The MoE ops the installed rvv-ops lacks."""
    import rvv_ops  # noqa: F401  (registers the ops)

    return [op for op in MOE_OPS if not hasattr(torch.ops.sgl_kernel, op)]


def fallback(what: str, reason: str) -> None:
    """Counts a call left to SGLang's torch code as ``fallback <what>``; logs the reason once."""
    _count(f"fallback {what}")
    key = f"{what}: {reason}"
    if key not in _warned:
        _warned.add(key)
        logger.warning("sglang-rvv: %s stays on SGLang's torch code: %s", what, reason)


# ------------------------------------------------------------------------------- routing


def fused_topk_native(
    original: Callable[..., Any],
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    correction_bias: torch.Tensor | None = None,
    scoring_func: str = "softmax",
) -> Any:
    """``fused_topk_native`` (the router of ``TopK.forward_native``) through
    ``topk_softmax_cpu`` / ``topk_sigmoid_cpu`` as SGLang's ``fused_topk_cpu`` calls them
    (a correction bias in fp32)."""
    args = (hidden_states, gating_output, topk, renormalize, correction_bias, scoring_func)
    op = {"softmax": "topk_softmax_cpu", "sigmoid": "topk_sigmoid_cpu"}.get(scoring_func)
    if op is None:
        fallback("expert selection", f"scoring function {scoring_func!r}")
        return original(*args)
    if gating_output.device.type != "cpu":
        return original(*args)
    if correction_bias is not None and correction_bias.dtype != torch.float32:
        correction_bias = correction_bias.to(torch.float32)
    _count(op)
    return _op(op)(
        hidden_states=hidden_states,
        gating_output=gating_output,
        topk=topk,
        renormalize=renormalize,
        correction_bias=correction_bias,
    )


def grouped_topk(
    original: Callable[..., Any],
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float | None = None,
    apply_routed_scaling_factor_on_output: bool | None = False,
    scoring_func: str = "softmax",
) -> Any:
    """``grouped_topk`` through ``grouped_topk_cpu`` with the arguments of SGLang's
    ``grouped_topk_cpu`` (softmax scores, no scaling of the output)."""
    args = (
        hidden_states,
        gating_output,
        topk,
        renormalize,
        num_expert_group,
        topk_group,
        num_fused_shared_experts,
        routed_scaling_factor,
        apply_routed_scaling_factor_on_output,
        scoring_func,
    )
    if gating_output.device.type != "cpu":
        return original(*args)
    if scoring_func != "softmax" or apply_routed_scaling_factor_on_output:
        why = (
            f"scoring function {scoring_func!r}"
            if scoring_func != "softmax"
            else "the routed scaling factor applied on the output"
        )
        fallback("grouped expert selection", f"{why} (grouped_topk_cpu: softmax, unscaled)")
        return original(*args)
    _count("grouped_topk_cpu")
    return _op("grouped_topk_cpu")(
        hidden_states,
        gating_output,
        topk,
        renormalize,
        num_expert_group,
        topk_group,
        num_fused_shared_experts,
        routed_scaling_factor,
        num_token_non_padded=None,
    )


def biased_grouped_topk(
    original: Callable[..., Any],
    hidden_states: torch.Tensor,
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float | None = None,
    apply_routed_scaling_factor_on_output: bool | None = False,
) -> Any:
    """``biased_grouped_topk`` through ``biased_grouped_topk_cpu`` with the arguments of
    SGLang's ``biased_grouped_topk_cpu`` (the scaling factor only when applied on the
    output)."""
    if gating_output.device.type != "cpu":
        return original(
            hidden_states,
            gating_output,
            correction_bias,
            topk,
            renormalize,
            num_expert_group,
            topk_group,
            num_fused_shared_experts,
            routed_scaling_factor,
            apply_routed_scaling_factor_on_output,
        )
    _count("biased_grouped_topk_cpu")
    return _op("biased_grouped_topk_cpu")(
        hidden_states,
        gating_output,
        correction_bias,
        topk,
        renormalize,
        num_expert_group,
        topk_group,
        num_fused_shared_experts,
        routed_scaling_factor if apply_routed_scaling_factor_on_output else None,
        num_token_non_padded=None,
    )


# ------------------------------------------------------------------------- fused experts


def _tensor(layer: torch.nn.Module, name: str) -> torch.Tensor | None:
    value = getattr(layer, name, None)
    return value if isinstance(value, torch.Tensor) else None


def _unsupported(
    layer: torch.nn.Module, dtypes: tuple[torch.dtype, ...] = _FLOAT_DTYPES
) -> str | None:
    """Why ``fused_experts_cpu`` cannot run this MoE layer (weights of ``dtypes``), or None."""
    w13, w2 = getattr(layer, "w13_weight", None), getattr(layer, "w2_weight", None)
    if not isinstance(w13, torch.Tensor) or not isinstance(w2, torch.Tensor):
        return "no w13_weight / w2_weight tensors"
    if w13.device.type != "cpu" or w2.device.type != "cpu":
        return "weights not on the CPU"
    if w13.dim() != 3 or w2.dim() != 3 or w13.shape[0] != w2.shape[0]:
        return f"weights {tuple(w13.shape)} / {tuple(w2.shape)}: expected [E, 2I, H] / [E, H, I]"
    if w13.dtype not in dtypes or w2.dtype != w13.dtype:
        return f"weight dtypes {w13.dtype} / {w2.dtype}"
    if getattr(layer, "use_intel_amx_backend", False):
        return "packed by SGLang's AMX branch"
    cfg = getattr(layer, "moe_runner_config", None)
    activation = getattr(cfg, "activation", "silu")
    if activation != "silu":
        return f"activation {activation!r} (fused_experts_cpu here: silu)"
    if not getattr(cfg, "is_gated", True):
        return "a non-gated MLP"
    for name in ("gemm1_alpha", "gemm1_clamp_limit", "swiglu_limit"):
        if getattr(cfg, name, None) is not None:
            return f"{name} = {getattr(cfg, name)} (SwiGLU variants are not in fused_experts_cpu)"
    return None


def unquant_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """After SGLang's own processing, packs the 3-D ``w13_weight`` [E, 2I, H] and ``w2_weight``
    [E, H, I] once (``convert_weight_packed``, one panel layout per expert) and turns the
    biases to fp32, as SGLang's AMX branch does; marks the layer for
    :func:`unquant_forward`."""
    result = original(self, layer)
    if _pack_experts(layer, _FLOAT_DTYPES, "fused experts"):
        for name in ("w13_weight_bias", "w2_weight_bias"):
            bias = getattr(layer, name, None)
            if isinstance(bias, torch.Tensor):
                setattr(layer, name, torch.nn.Parameter(bias.data.float(), requires_grad=False))
    return result


def _pack_experts(layer: torch.nn.Module, dtypes: tuple[torch.dtype, ...], what: str) -> bool:
    """Packs ``w13_weight`` and ``w2_weight`` once and marks the layer, if
    ``fused_experts_cpu`` can run it; otherwise logs why (unless the weights are simply not on
    the CPU). Returns whether it packed."""
    why = _unsupported(layer, dtypes)
    if why is not None:
        if why != "weights not on the CPU":
            fallback(what, why)
        return False
    pack = _op("convert_weight_packed")
    for name in ("w13_weight", "w2_weight"):
        _count(PACK_COUNT)
        packed = pack(getattr(layer, name).data)
        setattr(layer, name, torch.nn.Parameter(packed, requires_grad=False))
    setattr(layer, _PACKED, True)
    return True


def unquant_forward(
    original: Callable[..., Any], self: Any, layer: torch.nn.Module, dispatch_output: Any
) -> Any:
    """``fused_experts_cpu`` for layers packed by :func:`unquant_process_weights`, called as
    SGLang's AMX branch of ``UnquantizedFusedMoEMethod.forward_cpu`` calls it."""
    if not getattr(layer, _PACKED, False):
        return original(self, layer, dispatch_output)
    cfg = self.moe_runner_config
    return _fused_experts(
        layer,
        dispatch_output,
        cfg,
        UNQUANT,
        (None, None),
        (getattr(layer, "w13_weight_bias", None), getattr(layer, "w2_weight_bias", None)),
        (cfg.gemm1_alpha, cfg.gemm1_clamp_limit),
    )


def _fused_experts(
    layer: torch.nn.Module,
    dispatch_output: Any,
    cfg: Any,
    method: int,
    scales: tuple[torch.Tensor | None, torch.Tensor | None],
    biases: tuple[torch.Tensor | None, torch.Tensor | None],
    alpha_limit: tuple[float | None, float | None],
    block_size: list[int] | None = None,
) -> Any:
    """``fused_experts_cpu`` on a packed layer, with the arguments of SGLang's AMX branches
    (router weights applied to the input first when the model asks, as
    ``apply_topk_weights_cpu`` does; int32 ids, fp32 weights), as a ``StandardCombineInput``.
    ``block_size``: the fp8 experts' [block_n, block_k]."""
    from sglang.srt.layers.moe.token_dispatcher import StandardCombineInput

    x = dispatch_output.hidden_states
    topk_weights, topk_ids, _ = dispatch_output.topk_output
    if cfg.apply_router_weight_on_input:  # SGLang's apply_topk_weights_cpu
        x = x * topk_weights.to(x.dtype)
        topk_weights = torch.ones_like(topk_weights, dtype=torch.float32)
    if topk_ids.dtype != torch.int32:  # SGLang's own router (a fallback) gives int64
        topk_ids = topk_ids.to(torch.int32)
    if topk_weights.dtype != torch.float32:
        topk_weights = topk_weights.to(torch.float32)
    _count("fused_experts_cpu")
    output = _op("fused_experts_cpu")(
        x,
        layer.w13_weight,
        layer.w2_weight,
        topk_weights,
        topk_ids,
        False,  # inplace (SGLang: "inplace should be False in fused_experts")
        method,
        scales[0],
        scales[1],
        None,  # w1_zero
        None,  # w2_zero
        block_size,
        biases[0],
        biases[1],
        alpha_limit[0],
        alpha_limit[1],
        True,  # is_vnni: packed by convert_weight_packed
        cfg.activation,
    )
    return StandardCombineInput(hidden_states=output)


def w8a8_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """W8A8 int8 experts (``W8A8Int8MoEMethod``, per-channel weight scales [E, N, 1]): after
    SGLang's own processing, the int8 ``w13_weight`` / ``w2_weight`` packed once for
    ``fused_experts_cpu`` (SGLang's path on a CPU without AMX or arm64 is a triton kernel)."""
    result = original(self, layer)
    if _pack_experts(layer, (torch.int8,), "W8A8 fused experts"):
        _fp32_scales(layer, ("w13_weight_scale", "w2_weight_scale"))
    return result


def _fp32_scales(layer: torch.nn.Module, names: tuple[str, str]) -> None:
    """Replaces the scale tensors ``names`` of a packed layer by contiguous fp32 parameters
    (what ``fused_experts_cpu`` reads)."""
    for name in names:
        scale = getattr(layer, name)
        value = scale.data.to(torch.float32).contiguous()
        setattr(layer, name, torch.nn.Parameter(value, requires_grad=False))


def w8a8_apply(
    original: Callable[..., Any], self: Any, layer: torch.nn.Module, dispatch_output: Any
) -> Any:
    """``fused_experts_cpu`` with ``CPUQuantMethod.INT8_W8A8`` (activations quantised per
    token inside the op) for layers packed by :func:`w8a8_process_weights`, as SGLang's AMX
    branch of ``W8A8Int8MoEMethod.apply`` calls it."""
    if not getattr(layer, _PACKED, False):
        return original(self, layer, dispatch_output)
    return _fused_experts(
        layer,
        dispatch_output,
        self.moe_runner_config,
        INT8_W8A8,
        (_tensor(layer, "w13_weight_scale"), _tensor(layer, "w2_weight_scale")),
        (None, None),
        (None, None),
    )


def quant_methods() -> tuple[int, ...]:
    """The ``CPUQuantMethod`` values the installed rvv-ops' ``fused_experts_cpu`` runs (an
    older rvv-ops runs UNQUANT and INT8_W8A8 only)."""
    import rvv_ops.moe

    methods: tuple[int, ...] = getattr(rvv_ops.moe, "METHODS", (UNQUANT, INT8_W8A8))
    return methods


def fp8_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """Block-scaled fp8 experts (``Fp8MoEMethod`` with ``weight_block_size``) on a CPU: the
    fp8 ``w13_weight`` / ``w2_weight`` packed once and the block scales
    (``w13_weight_scale_inv`` [E, ceil(2I / block_n), ceil(H / block_k)], likewise w2) turned
    to fp32, instead of SGLang's CPU branch, which asserts AMX. Anything else (per-tensor
    fp8, weights not on the CPU) goes to SGLang's method."""
    names = ("w13_weight_scale_inv", "w2_weight_scale_inv")
    if (
        not getattr(self, "block_quant", False)
        or getattr(self, "use_mxfp8", False)
        or any(_tensor(layer, n) is None for n in names)
        or not _pack_experts(layer, (torch.float8_e4m3fn,), "FP8 fused experts")
    ):
        return original(self, layer)
    _fp32_scales(layer, names)
    return None


def fp8_apply(
    original: Callable[..., Any], self: Any, layer: torch.nn.Module, dispatch_output: Any
) -> Any:
    """``fused_experts_cpu`` with ``CPUQuantMethod.FP8_W8A16`` for layers packed by
    :func:`fp8_process_weights`, as SGLang's AMX branch of ``Fp8MoEMethod.apply`` calls it."""
    if not getattr(layer, _PACKED, False):
        return original(self, layer, dispatch_output)
    return _fused_experts(
        layer,
        dispatch_output,
        self.moe_runner_config,
        FP8_W8A16,
        (_tensor(layer, "w13_weight_scale_inv"), _tensor(layer, "w2_weight_scale_inv")),
        (None, None),
        (None, None),
        list(self.quant_config.weight_block_size),
    )


def _check_experts_g_idx(layer: torch.nn.Module) -> None:
    """GPTQ experts with act-order (a ``w13_g_idx`` / ``w2_g_idx`` row that is not
    ``k // group_size``) are refused: the int4 kernels take contiguous groups only."""
    for which in ("w13", "w2"):
        g_idx, scales = _tensor(layer, f"{which}_g_idx"), _tensor(layer, f"{which}_scales")
        if g_idx is None or scales is None or g_idx.dim() != 2 or scales.dim() != 3:
            continue
        k, groups = g_idx.shape[1], scales.shape[1]
        if k == 0 or groups == 0 or k % groups:
            continue
        expected = (torch.arange(k, device=g_idx.device) // (k // groups)).expand_as(g_idx)
        if not torch.equal(g_idx.to(expected.dtype), expected):
            raise ValueError(
                f"sglang-rvv: this GPTQ checkpoint's experts use act-order ({which}_g_idx "
                f"permutes the {k} input channels among the {groups} groups); the CPU int4 "
                "kernels take contiguous groups only. Re-quantise without desc_act."
            )


def int4_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """AWQ / GPTQ experts (SGLang's CPU kernels ``AWQIntelAMXMoEKernel`` /
    ``GPTQIntelAMXMoEKernel``, which SGLang's CPU configs pick and which call
    ``convert_weight_packed_scale_zp`` on the 3-D weights and ``fused_experts_cpu`` with
    ``INT4_W4A8`` themselves, on any CPU): GPTQ act-order refused with a clear error, the
    two packings counted."""
    _check_experts_g_idx(layer)
    result = original(self, layer)
    for _ in range(2):
        _count(PACK_COUNT)
    return result


def int4_apply(
    original: Callable[..., Any], self: Any, layer: torch.nn.Module, dispatch_output: Any
) -> Any:
    """SGLang's own call of ``fused_experts_cpu`` (``INT4_W4A8``), counted."""
    _count("fused_experts_cpu")
    return original(self, layer, dispatch_output)


# ------------------------------------------------------- Qwen2-MoE's shared-expert gate


def _gated_shared(
    hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor
) -> torch.Tensor:
    """sigmoid(hidden_states @ gate_weight) * shared_output per token, in fp32 (the triton
    kernel's arithmetic)."""
    gate = torch.sigmoid(hidden_states.float() @ gate_weight.reshape(-1).float())
    return gate.unsqueeze(-1) * shared_output.float()


def _note_gate_fix() -> None:
    if "gate" not in _warned:
        _warned.add("gate")
        logger.info(
            "sglang-rvv: Qwen2-MoE's shared-expert gate (SGLang: a triton kernel) runs in torch "
            "on the CPU"
        )


def gate_sigmoid_mul_add(
    original: Callable[..., Any],
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    final_hidden_states: torch.Tensor,
) -> None:
    """``fused_gate_sigmoid_mul_add`` for CPU tensors: ``final_hidden_states +=
    sigmoid(hidden_states @ gate_weight) * shared_output`` (in place, summed in fp32)."""
    if hidden_states.device.type != "cpu":
        original(hidden_states, gate_weight, shared_output, final_hidden_states)
        return
    _note_gate_fix()
    out = _gated_shared(hidden_states, gate_weight, shared_output) + final_hidden_states.float()
    final_hidden_states.copy_(out)


def gate_sigmoid_mul(
    original: Callable[..., Any],
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
) -> Any:
    """``fused_gate_sigmoid_mul`` for CPU tensors (a new tensor of ``shared_output``'s dtype)."""
    if hidden_states.device.type != "cpu":
        return original(hidden_states, gate_weight, shared_output)
    _note_gate_fix()
    return _gated_shared(hidden_states, gate_weight, shared_output).to(shared_output.dtype)


_BASE = "sglang.srt.layers."
_TOPK = _BASE + "moe.topk."
_UNQUANT = _BASE + "quantization.unquant.UnquantizedFusedMoEMethod."
ROUTING_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_TOPK + "fused_topk_native", fused_topk_native),
    (_TOPK + "grouped_topk", grouped_topk),
    (_TOPK + "biased_grouped_topk", biased_grouped_topk),
)
_W8A8 = _BASE + "quantization.w8a8_int8.W8A8Int8MoEMethod."
EXPERT_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_UNQUANT + "process_weights_after_loading", unquant_process_weights),
    (_UNQUANT + "forward_native", unquant_forward),
    (_W8A8 + "process_weights_after_loading", w8a8_process_weights),
    (_W8A8 + "apply", w8a8_apply),
)
_FP8 = _BASE + "quantization.fp8.Fp8MoEMethod."
FP8_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_FP8 + "process_weights_after_loading", fp8_process_weights),
    (_FP8 + "apply", fp8_apply),
)
_CPU_QUANT = "sglang.srt.hardware_backend.cpu.quantization."
INT4_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = tuple(
    (f"{_CPU_QUANT}{mod}.{cls}.{meth}", hook)
    for mod, cls in (
        ("awq_kernels", "AWQIntelAMXMoEKernel"),
        ("gptq_kernels", "GPTQIntelAMXMoEKernel"),
    )
    for meth, hook in (
        ("process_weights_after_loading", int4_process_weights),
        ("apply", int4_apply),
    )
)
"""Registered with :data:`EXPERT_HOOKS` when the installed rvv-ops runs the method."""
_ELEMENTWISE = "sglang.kernels.ops.elementwise.elementwise."
CPU_FIX_HOOKS: tuple[tuple[str, Callable[..., Any], str], ...] = (
    (_ELEMENTWISE + "fused_gate_sigmoid_mul_add", gate_sigmoid_mul_add, "AROUND"),
    (_ELEMENTWISE + "fused_gate_sigmoid_mul", gate_sigmoid_mul, "AROUND"),
)
"""Registered whether or not layers are routed (:func:`register_cpu_fixes`). The targets are
the defining module's functions: SGLang's hook registry rebinds them in every module that
imported them already (``models.qwen2_moe``), and a later import takes the hooked ones; the
model module itself is not imported in processes that do not build a model."""


def register_cpu_fixes() -> bool:
    """Registers :data:`CPU_FIX_HOOKS` once per process; returns whether it did now."""
    from sglang_rvv import hooks

    return hooks.register_once(__name__, CPU_FIX_HOOKS)


def routed_hooks() -> list[tuple[str, Callable[..., Any]]]:
    """The routing and fused-experts hooks whose ops the installed rvv-ops has (a warning
    names the missing ones)."""
    missing = missing_ops()
    if missing:
        logger.warning(
            "sglang-rvv: the installed rvv-ops has no %s: %s stay on SGLang's torch code",
            " / ".join(missing),
            "MoE layers"
            if set(missing) & {"fused_experts_cpu", "topk_softmax_cpu"}
            else "some MoE routing functions",
        )
    hooks: list[tuple[str, Callable[..., Any]]] = []
    ops = {
        "fused_topk_native": ("topk_softmax_cpu", "topk_sigmoid_cpu"),
        "grouped_topk": ("grouped_topk_cpu",),
        "biased_grouped_topk": ("biased_grouped_topk_cpu",),
    }
    for target, hook in ROUTING_HOOKS:
        if not set(ops[target.rsplit(".", 1)[-1]]) & set(missing):
            hooks.append((target, hook))
    if not set(EXPERT_OPS) & set(missing):
        hooks += EXPERT_HOOKS
        methods = quant_methods()
        if FP8_W8A16 in methods:
            hooks += FP8_HOOKS
        if INT4_W4A8 in methods:
            hooks += INT4_HOOKS
    return hooks
