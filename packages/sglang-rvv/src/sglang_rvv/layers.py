"""Routing SGLang's CPU model layers to the ``torch.ops.sgl_kernel`` RVV ops of rvv-ops.

SGLang's CPU layers call the sgl_kernel ops only when ``cpu_has_amx_support()`` holds (an
Intel AMX CPU with sgl-kernel's CPU build): never on RISC-V, where they run their
``forward_native`` torch code. With routing on, AROUND hooks registered through SGLang's plugin
``HookRegistry`` (applied by SGLang in every process, after the plugins load and before the
model is built) make these methods call the RVV ops, with the arguments SGLang's own AMX
branch passes:

=============================================================  =================================
SGLang method                                                   RVV op
=============================================================  =================================
``layernorm.RMSNorm.forward_native``                            ``rmsnorm_cpu`` /
                                                                ``fused_add_rmsnorm_cpu``
``layernorm.GemmaRMSNorm.forward_native``                       ``gemma_rmsnorm_cpu`` /
                                                                ``gemma_fused_add_rmsnorm_cpu``
``layernorm.LayerNorm.forward_native``                          ``layernorm_cpu``
``activation.SiluAndMul.forward_native``                        ``silu_and_mul_cpu``
``activation.GeluAndMul.forward_native``                        ``gelu_and_mul_cpu`` /
                                                                ``gelu_tanh_and_mul_cpu``
``rotary_embedding.base.RotaryEmbedding.forward_native``        ``rotary_embedding_cpu``
``quantization.unquant.UnquantizedLinearMethod``                ``convert_weight_packed`` once at
(``process_weights_after_loading``, ``apply``)                  load, ``weight_packed_linear``
``quantization.w8a8_int8.W8A8Int8LinearMethod``                 ``convert_weight_packed`` (int8)
(``process_weights_after_loading``, ``apply``)                  once at load,
                                                                ``int8_scaled_mm_with_quant``
``moe.topk.fused_topk_native`` / ``grouped_topk`` /             ``topk_softmax_cpu`` /
``biased_grouped_topk`` (expert selection)                      ``topk_sigmoid_cpu`` /
                                                                ``grouped_topk_cpu`` /
                                                                ``biased_grouped_topk_cpu``
``quantization.unquant.UnquantizedFusedMoEMethod``              ``convert_weight_packed`` of the
(``process_weights_after_loading``, ``forward_native``)          3-D expert weights once at load,
                                                                ``fused_experts_cpu``
=============================================================  =================================

The MoE rows are :mod:`sglang_rvv.moe` (registered here when rvv-ops has the ops; what they
leave to SGLang's torch code is logged once and counted as ``fallback <what>``). That module
also makes Qwen2-MoE start on a CPU at all, routing on or off (its shared-expert gate is a
triton kernel in SGLang).

AWQ and GPTQ int4 checkpoints: SGLang uses its CPU quantisation configs (``AWQCPUConfig``,
``CPUGPTQConfig``, whose kernels call ``convert_weight_packed_scale_zp`` once at load and
``int4_scaled_mm_cpu``) only on AMX CPUs and otherwise picks the GPU ones, which cannot run on
a CPU. With routing on, a hook on ``quantization.get_quantization_config`` gives the CPU
configs on any CPU when rvv-ops has the INT4 ops (and lets these formats, FP8 and W8A8 take
``--dtype float32``, which the RVV ops serve); hooks on their kernels count the calls,
refuse GPTQ act-order (a ``g_idx`` that is not ``k // group_size``: SGLang's CPU kernel would
silently ignore it) and, with ``SGLANG_RVV_INT4_ACT=none``, run rvv-ops' W4A16
``int4_w4a16_mm_cpu`` (activations not quantised) instead of SGLang's W4A8 (``int8``, the
default).

Block-scaled FP8 checkpoints (``Fp8LinearMethod`` with ``weight_block_size``): SGLang's CPU
branch asserts AMX; with routing on the fp8 weight is packed once (``convert_weight_packed``)
and runs through ``fp8_scaled_mm_cpu`` (W8A16: activations stay in their dtype). Per-tensor
fp8 checkpoints keep SGLang's behaviour.

compressed-tensors' W8A8 int8 scheme (dynamic symmetric activations; per-channel or
per-tensor weight scales) is packed after SGLang's own processing and runs the same op (its
CUDA ``int8_scaled_mm`` otherwise).

compressed-tensors' WNA16 int4 scheme (``pack-quantized``: group or channel strategy,
symmetric or with zero points), which SGLang runs only through Marlin (CUDA): its
``weight_packed`` / ``weight_scale`` / ``weight_zero_point`` are rewritten in AWQ's int32
layout at load and packed once by ``convert_weight_packed_scale_zp``; the layers run W4A16
(``int4_w4a16_mm_cpu``) by default - the format's activations stay in 16 bits, which is what
SGLang's Marlin path computes - or W4A8 (``int4_scaled_mm_cpu``) with
``SGLANG_RVV_INT4_ACT=int8``. Act-order (``actorder: group``) and 8-bit weights are refused
with a clear error. compressed-tensors checks each scheme against the CUDA device's compute
capability, which fails on a CPU host; for the two schemes routed here the check passes
(hooks on ``CompressedTensorsConfig``).

SGLang's W8A8 int8 linear method refuses to load on a CPU without AMX or arm64 (its
``process_weights_after_loading`` asserts); with routing on, a W8A8 checkpoint loads and its
linear layers run SGLang's AMX arithmetic (per-token int8 activations, exact int32 sums,
``(acc * a_scale) * w_scale + bias``) in rvv-ops' W8A8 kernels.

A ``post_residual_addition`` is folded into the residual first, as SGLang's AMX branch does;
cases the ops do not cover exactly (a norm with ``variance_size_override``, fp32 residuals or
a weight of another dtype, tensors on another device, ...) go to SGLang's own method.

The switch is the environment variable ``SGLANG_RVV_LAYERS``: ``auto`` (default: on when the
CPU has the RISC-V vector extension), ``1`` (on, on any host: how tests prove the routing on
x86, where the ops run their AVX-512, AVX2 or portable C++ path), ``0`` (off). With
``SGLANG_RVV_LAYER_STATS=DIR`` every SGLang process writes its op-call counts (and the
attention backend's calls by implementation, see :func:`stats`) to ``DIR/<pid>.json`` (at
most once a second, and at exit).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("sglang_rvv")

CALLS: Counter[str] = Counter()
"""Op calls routed by the hooks in this process (op name -> count)."""

_LINEAR_OPS = ("convert_weight_packed", "weight_packed_linear", "int8_scaled_mm_with_quant")
_last_flush = 0.0
_enabled: bool | None = None
_routed: tuple[str, ...] = ()


def routing_requested() -> bool:
    """What ``SGLANG_RVV_LAYERS`` asks for (``auto``: the CPU has RVV)."""
    value = os.environ.get("SGLANG_RVV_LAYERS", "auto").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value != "auto":
        raise ValueError(f"SGLANG_RVV_LAYERS={value!r}: expected auto, 1 or 0")
    import rvv_attention

    return bool(rvv_attention.capabilities().has_v)


def linear_ops_available() -> bool:
    """True when the installed rvv-ops has the packed-weight GEMM ops."""
    import rvv_ops  # noqa: F401  (registers the ops)

    return all(hasattr(torch.ops.sgl_kernel, op) for op in _LINEAR_OPS)


def _count(op: str) -> None:
    CALLS[op] += 1
    maybe_flush_stats()


def maybe_flush_stats() -> None:
    """:func:`flush_stats`, at most once a second."""
    global _last_flush
    now = time.monotonic()
    if now - _last_flush >= 1.0:
        _last_flush = now
        flush_stats()


def stats() -> dict[str, int]:
    """This process's routed op calls, plus rvv-attention's calls by the implementation that
    ran, as ``attention <op>:<implementation>`` (e.g. ``attention decode:kernel``)."""
    import rvv_attention

    counts = dict(CALLS)
    counts.update({f"attention {k}": v for k, v in rvv_attention.call_counts().items()})
    return counts


def flush_stats() -> None:
    """Writes this process's :func:`stats` to ``$SGLANG_RVV_LAYER_STATS/<pid>.json`` if set."""
    target = os.environ.get("SGLANG_RVV_LAYER_STATS")
    if not target:
        return
    counts = stats()
    if not counts:
        return
    path = Path(target)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".{os.getpid()}.json.tmp"
    tmp.write_text(json.dumps(counts, sort_keys=True))
    tmp.replace(path / f"{os.getpid()}.json")


def read_stats(directory: str | os.PathLike[str]) -> Counter[str]:
    """Sums the counts every process wrote to ``directory``."""
    total: Counter[str] = Counter()
    for file in Path(directory).glob("*.json"):
        total.update(json.loads(file.read_text()))
    return total


# ------------------------------------------------------------------------------- hooks
# AROUND hooks on the layers' ``forward_native``: fn(original, self, *args, **kwargs).
# ``forward_native`` is what SGLang's dispatch (``sglang.kernels.fused_op``) runs on a CPU
# without AMX, and what it falls back to everywhere; ``forward_cpu`` is taken only with AMX
# and sgl-kernel's CPU build, where these hooks do not matter. Anything the ops do not cover
# exactly goes to the original.

_sgl: Any = torch.ops.sgl_kernel


def _plain_rmsnorm(self: Any, x: torch.Tensor) -> bool:
    weight = getattr(self, "weight", None)
    return (
        x.device.type == "cpu"
        and isinstance(weight, torch.Tensor)
        and weight.dtype == x.dtype
        and x.dtype in _FLOAT_DTYPES
        and x.dim() >= 1
        and x.stride(-1) == 1
        and getattr(self, "has_weight", True)
        and getattr(self, "variance_size_override", None) is None
        and not getattr(self, "fp32_residual", False)
        and getattr(self, "override_orig_dtype", None) is None
        and not getattr(self, "cast_x_before_out_mul", False)
    )


def _rmsnorm_hook(prefix: str, doc: str) -> Callable[..., Any]:
    """The AROUND hook of an RMSNorm class's ``forward_native``, through
    ``<prefix>rmsnorm_cpu`` / ``<prefix>fused_add_rmsnorm_cpu``."""
    plain, fused = f"{prefix}rmsnorm_cpu", f"{prefix}fused_add_rmsnorm_cpu"

    def forward(
        original: Callable[..., Any],
        self: Any,
        x: torch.Tensor,
        residual: torch.Tensor | None = None,
        post_residual_addition: torch.Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if (
            args
            or any(v is not None for v in kwargs.values())
            or not _plain_rmsnorm(self, x)
            or (residual is not None and residual.dtype != x.dtype)
        ):
            return original(self, x, residual, post_residual_addition, *args, **kwargs)
        weight = self.weight.data
        if residual is not None:
            if post_residual_addition is not None:
                residual = residual + post_residual_addition
            _count(fused)
            getattr(_sgl, fused)(x, residual, weight, self.variance_epsilon)
            return x, residual
        _count(plain)
        return getattr(_sgl, plain)(x, weight, self.variance_epsilon)

    forward.__name__ = forward.__qualname__ = f"{prefix}rmsnorm_forward"
    forward.__doc__ = doc
    return forward


rmsnorm_forward = _rmsnorm_hook(
    "",
    "``RMSNorm.forward_native`` through ``rmsnorm_cpu`` / ``fused_add_rmsnorm_cpu`` "
    "(``quant_linear=None`` is the only extra argument taken).",
)
gemma_rmsnorm_forward = _rmsnorm_hook(
    "gemma_", "``GemmaRMSNorm.forward_native`` through the ``gemma_*rmsnorm_cpu`` ops."
)


def gemma3_rmsnorm_forward(
    original: Callable[..., Any], self: Any, x: torch.Tensor, residual: torch.Tensor | None = None
) -> Any:
    """``Gemma3RMSNorm.forward_native`` through ``gemma3_rmsnorm_cpu`` (``x / rms(x) * (1 +
    weight)`` in fp32, rounded once). With a residual, SGLang's native code first adds it in
    the activations' dtype (``residual = x + residual``) and normalises that sum: the same
    here, the sum in torch and its norm in the op."""
    weight = getattr(self, "weight", None)
    if (
        x.device.type != "cpu"
        or x.dtype not in _FLOAT_DTYPES
        or not isinstance(weight, torch.Tensor)
        or weight.dtype != x.dtype
        or x.dim() < 1
        or x.stride(-1) != 1
        or (residual is not None and (residual.dtype != x.dtype or residual.shape != x.shape))
    ):
        return original(self, x, residual)
    _count("gemma3_rmsnorm_cpu")
    if residual is None:
        return _sgl.gemma3_rmsnorm_cpu(x, weight.data, self.eps)
    residual = x + residual
    return _sgl.gemma3_rmsnorm_cpu(residual, weight.data, self.eps), residual


def rmsnorm_gated_forward(
    original: Callable[..., Any], self: Any, x: torch.Tensor, z: torch.Tensor | None = None
) -> Any:
    """The gated RMSNorm of Gated DeltaNet layers (``fla.layernorm_gated.RMSNorm.forward``:
    ``rmsnorm(x) * weight * silu(z)``) through ``fused_rmsnorm_gated_cpu``. SGLang calls that
    op itself only with sgl-kernel's AMX build, and otherwise runs a Triton kernel, which
    needs CUDA."""
    weight = getattr(self, "weight", None)
    if (
        z is None
        or x.device.type != "cpu"
        or x.dtype not in _FLOAT_DTYPES
        or z.dtype != x.dtype
        or z.shape != x.shape
        or not isinstance(weight, torch.Tensor)
        or weight.dtype != x.dtype
        or not getattr(self, "norm_before_gate", False)
        or getattr(self, "group_size", None) is not None
        or getattr(self, "activation", "swish") != "swish"
        or getattr(self, "bias", None) is not None
    ):
        return original(self, x, z)
    _count("fused_rmsnorm_gated_cpu")
    return _sgl.fused_rmsnorm_gated_cpu(x, weight.data, z, self.eps)


def layernorm_forward(original: Callable[..., Any], self: Any, x: torch.Tensor) -> Any:
    """``LayerNorm.forward_native`` through ``layernorm_cpu``."""
    weight = getattr(self, "weight", None)
    bias = getattr(self, "bias", None) if getattr(self, "use_bias", False) else None
    if (
        x.device.type != "cpu"
        or x.dtype not in _FLOAT_DTYPES
        or not isinstance(weight, torch.Tensor)
        or weight.dtype not in (x.dtype, torch.float32)
        or (bias is not None and bias.dtype != weight.dtype)
        or getattr(self, "elementwise_affine", True) is False
    ):
        return original(self, x)
    _count("layernorm_cpu")
    return _sgl.layernorm_cpu(
        x, weight.data, None if bias is None else bias.data, self.variance_epsilon
    )


def silu_and_mul_forward(original: Callable[..., Any], self: Any, x: torch.Tensor) -> Any:
    """``SiluAndMul.forward_native`` through ``silu_and_mul_cpu``."""
    if x.device.type != "cpu" or x.dtype not in _FLOAT_DTYPES or x.dim() < 1:
        return original(self, x)
    _count("silu_and_mul_cpu")
    return _sgl.silu_and_mul_cpu(x)


def gelu_and_mul_forward(original: Callable[..., Any], self: Any, x: torch.Tensor) -> Any:
    """``GeluAndMul.forward_native`` through ``gelu_and_mul_cpu`` / ``gelu_tanh_and_mul_cpu``."""
    approximate = getattr(self, "approximate", None)
    if x.device.type != "cpu" or x.dtype not in _FLOAT_DTYPES or approximate not in _GELU:
        return original(self, x)
    op = _GELU[approximate]
    _count(op)
    return getattr(_sgl, op)(x)


def rotary_forward(
    original: Callable[..., Any],
    self: Any,
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    offsets: torch.Tensor | None = None,
    fused_set_kv_buffer_arg: Any = None,
) -> Any:
    """``RotaryEmbedding.forward_native`` through ``rotary_embedding_cpu``."""
    cache = getattr(self, "cos_sin_cache", None)
    if (
        fused_set_kv_buffer_arg is not None
        or query.device.type != "cpu"
        or query.dtype not in _FLOAT_DTYPES
        or key is None
        or key.dtype != query.dtype
        or not isinstance(cache, torch.Tensor)
        or cache.dim() != 2
    ):
        return original(self, positions, query, key, offsets, fused_set_kv_buffer_arg)
    if offsets is not None:
        positions = positions + offsets
    if cache.dtype not in (query.dtype, torch.float32):
        cache = cache.to(torch.float32)
    _count("rotary_embedding_cpu")
    q, k = _sgl.rotary_embedding_cpu(
        positions.reshape(-1), query, key, self.head_size, cache, self.is_neox_style
    )
    return q.view(query.shape), k.view(key.shape)


_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_GELU = {"none": "gelu_and_mul_cpu", "tanh": "gelu_tanh_and_mul_cpu"}

_PACKED = "_rvv_packed_weight"
_GEMM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _cpu_weight(layer: torch.nn.Module, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor | None:
    """``layer.weight`` if it is a 2-D CPU tensor of one of ``dtypes`` that SGLang did not give
    to its AMX kernels, else None."""
    weight = getattr(layer, "weight", None)
    if (
        isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and weight.device.type == "cpu"
        and weight.dtype in dtypes
        and not getattr(layer, "use_intel_amx_backend", False)
    ):
        return weight
    return None


def _tensor(layer: torch.nn.Module, name: str) -> torch.Tensor | None:
    """``layer.<name>`` if it is a tensor, else None."""
    value = getattr(layer, name, None)
    return value if isinstance(value, torch.Tensor) else None


def _pack(
    layer: torch.nn.Module,
    weight: torch.Tensor,
    scale: str = "",
    scales: torch.Tensor | None = None,
) -> None:
    """Packs ``weight`` once (``convert_weight_packed``) as ``layer.weight``, stores
    ``scales`` (contiguous) as ``layer.<scale>`` if given, and marks the layer for the apply
    hooks."""
    packed = _sgl.convert_weight_packed(weight.data)
    _count("convert_weight_packed")
    layer.weight = torch.nn.Parameter(packed, requires_grad=False)
    if scale and scales is not None:
        setattr(layer, scale, torch.nn.Parameter(scales.contiguous(), requires_grad=False))
    setattr(layer, _PACKED, True)


def _on_rows(op: str, x: torch.Tensor, *args: Any) -> Any:
    """``op(x as [rows, K], *args)``, counted, viewed back to ``x``'s leading dimensions."""
    shape = x.shape
    _count(op)
    out = getattr(_sgl, op)(x.reshape(-1, shape[-1]), *args)
    return out.view(*shape[:-1], out.shape[-1])


def linear_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """After SGLang's own processing, packs a 2-D fp32/bf16/fp16 CPU weight once."""
    result = original(self, layer)
    weight = _cpu_weight(layer, _GEMM_DTYPES)
    if weight is not None:
        _pack(layer, weight)
    return result


def linear_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> Any:
    """``weight_packed_linear`` for layers packed by :func:`linear_process_weights`."""
    if not getattr(layer, _PACKED, False):
        return original(self, layer, x, bias)
    return _on_rows("weight_packed_linear", x, layer.weight, bias, True)


def w8a8_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """Packs a 2-D int8 CPU weight once (the W8A8 kernels' layout) instead of SGLang's CPU
    branch, which needs AMX or arm64; other devices and layouts go to SGLang's method."""
    weight, scale = _cpu_weight(layer, (torch.int8,)), _tensor(layer, "weight_scale")
    if weight is None or scale is None:
        return original(self, layer)
    _pack(layer, weight, "weight_scale", scale.data.to(torch.float32).reshape(-1))
    return None


def w8a8_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> Any:
    """``int8_scaled_mm_with_quant`` (per-token int8 activations) for layers packed by
    :func:`w8a8_process_weights`."""
    if not getattr(layer, _PACKED, False) or x.dtype not in _GEMM_DTYPES:
        return original(self, layer, x, bias)
    return _on_rows(
        "int8_scaled_mm_with_quant", x, layer.weight, layer.weight_scale, bias, x.dtype, True
    )


_INT4_OPS = ("convert_weight_packed_scale_zp", "int4_scaled_mm_cpu", "int4_w4a16_mm_cpu")
_INT4_FORMATS = ("awq", "gptq")


def int4_ops_available() -> bool:
    """True when the installed rvv-ops has the INT4 ops."""
    import rvv_ops  # noqa: F401  (registers the ops)

    return all(hasattr(torch.ops.sgl_kernel, op) for op in _INT4_OPS)


def int4_activations(default: str = "int8") -> str:
    """``SGLANG_RVV_INT4_ACT``: ``int8`` (W4A8, SGLang's AWQ / GPTQ CPU arithmetic) or
    ``none`` (W4A16); ``default`` when unset (``int8`` for AWQ / GPTQ, ``none`` for
    compressed-tensors WNA16)."""
    value = os.environ.get("SGLANG_RVV_INT4_ACT", default).strip().lower()
    if value not in ("int8", "none"):
        raise ValueError(f"SGLANG_RVV_INT4_ACT={value!r}: expected int8 or none")
    return value


_FP32_ACT_FORMATS = ("awq", "gptq", "fp8", "w8a8_int8", "compressed-tensors")
_with_fp32: dict[type, type] = {}


def _fp32_activations(cls: type) -> type:
    """A subclass of quantisation config ``cls`` that also accepts fp32 activations (the RVV
    ops take fp32, bf16 and fp16; SGLang's configs list what its GPU and AMX kernels take)."""
    if cls not in _with_fp32:

        def supported(_: Any) -> list[torch.dtype]:
            return [torch.float16, torch.bfloat16, torch.float32]

        _with_fp32[cls] = type(
            cls.__name__,
            (cls,),
            {
                "get_supported_act_dtypes": classmethod(supported),
                "__module__": cls.__module__,
                "__doc__": f"{cls.__doc__ or ''} (sglang-rvv: fp32 activations too)",
            },
        )
    return _with_fp32[cls]


def quantization_config(original: Callable[..., Any], quantization: str) -> Any:
    """SGLang's CPU config for ``awq`` / ``gptq`` on any CPU (SGLang picks it only with AMX);
    on a CPU, the quantised formats the RVV ops serve also accept ``--dtype float32``."""
    cls = original(quantization)
    from sglang.srt.utils import is_cpu

    if not is_cpu():
        return cls
    if quantization in _INT4_FORMATS:
        if not int4_ops_available():
            return cls
        from sglang.srt.layers.quantization import CPU_QUANTIZATION_METHODS

        cls = CPU_QUANTIZATION_METHODS[quantization]
    if quantization in _FP32_ACT_FORMATS:
        cls = _fp32_activations(cls)
    return cls


def _check_g_idx(layer: torch.nn.Module) -> None:
    g_idx = getattr(layer, "g_idx", None)
    scales = getattr(layer, "scales", None)
    if not isinstance(g_idx, torch.Tensor) or not isinstance(scales, torch.Tensor):
        return
    k = g_idx.numel()
    groups = scales.shape[0]
    if k == 0 or groups == 0 or k % groups:
        return
    expected = torch.arange(k, device=g_idx.device) // (k // groups)
    if not torch.equal(g_idx.to(expected.dtype), expected):
        raise ValueError(
            "sglang-rvv: this GPTQ checkpoint uses act-order (desc_act: g_idx permutes the "
            f"{k} input channels among the {groups} groups); the CPU int4 kernels take "
            "contiguous groups only. Re-quantise without desc_act (or with static groups)."
        )


def int4_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """SGLang's int4 packing (``convert_weight_packed_scale_zp``), counted; GPTQ act-order
    refused with a clear error."""
    _check_g_idx(layer)
    result = original(self, layer)
    _count("convert_weight_packed_scale_zp")
    return result


def int4_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> Any:
    """``int4_scaled_mm_cpu`` (W4A8), or ``int4_w4a16_mm_cpu`` with SGLANG_RVV_INT4_ACT=none."""
    if x.device.type != "cpu" or x.dtype not in _GEMM_DTYPES:
        return original(self, layer, x, bias)
    return _int4_mm(x, layer, ("qweight", "qzeros", "scales"), bias, "int8")


def _int4_mm(
    x: torch.Tensor,
    layer: torch.nn.Module,
    names: tuple[str, str, str],
    bias: torch.Tensor | None,
    default_act: str,
) -> torch.Tensor:
    """The INT4 GEMM on ``layer``'s weight, zero points and scales (attributes ``names``,
    packed by ``convert_weight_packed_scale_zp``), counted: ``int4_scaled_mm_cpu`` (W4A8) or
    ``int4_w4a16_mm_cpu`` as :func:`int4_activations` says (``default_act`` when
    SGLANG_RVV_INT4_ACT is unset)."""
    op = "int4_w4a16_mm_cpu" if int4_activations(default_act) == "none" else "int4_scaled_mm_cpu"
    _count(op)
    out: torch.Tensor = getattr(_sgl, op)(x, *(getattr(layer, n) for n in names), bias)
    return out


def ct_w8a8_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """compressed-tensors' W8A8 int8 scheme with dynamic symmetric activations (what SGLang's
    ``w8a8_int8`` computes): the [N, K] int8 weight packed once in the W8A8 kernels' layout
    with one fp32 scale per output channel (a per-tensor scale of each fused part is repeated
    over its channels: the kernels take per-channel scales, so nothing is requantised - SGLang's
    own requantisation goes through an fp8 CUDA helper). Static or asymmetric activation
    schemes keep SGLang's path."""
    widths = list(getattr(layer, "logical_widths", []) or [])
    weight, scale = _cpu_weight(layer, (torch.int8,)), _tensor(layer, "weight_scale")
    if (
        getattr(self, "is_static_input_scheme", True)
        or not getattr(self, "input_symmetric", False)
        or weight is None
        or scale is None
    ):
        return original(self, layer)
    n = weight.shape[0]
    scales = scale.data.to(torch.float32).reshape(-1)
    if scales.numel() != n:  # per tensor: one scale per fused part
        if len(widths) != scales.numel() or sum(widths) != n:
            return original(self, layer)
        scales = torch.repeat_interleave(scales, torch.tensor(widths))
    _pack(layer, weight, "weight_scale", scales)
    for unused in ("input_scale", "input_zero_point", "azp_adj"):  # as SGLang sets them
        setattr(layer, unused, None)
    return None


def ct_w8a8_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None,
) -> Any:
    """``int8_scaled_mm_with_quant`` for layers packed by :func:`ct_w8a8_process_weights`."""
    return w8a8_apply(lambda _s, lyr, xx, b: original(self, lyr, xx, b), self, layer, x, bias)


_INT4_PACKED = "_rvv_int4_packed"
_AWQ = 0
"""``quant_method`` of ``convert_weight_packed_scale_zp`` for AWQ's int32 layout."""


def _unpack_nibbles(words: torch.Tensor, dim: int) -> torch.Tensor:
    """int32 words holding eight 4-bit values each (low bits first) -> uint8 values 0..15,
    the eight of a word consecutive along ``dim`` (0 or 1) of a 2-D tensor."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    w = words.to(torch.int32)
    if dim == 1:
        nibbles = ((w.unsqueeze(2) >> shifts) & 0xF).reshape(w.shape[0], -1)
    else:
        nibbles = ((w.unsqueeze(1) >> shifts[:, None]) & 0xF).reshape(-1, w.shape[1])
    return nibbles.to(torch.uint8)


def _awq_words(v: torch.Tensor) -> torch.Tensor:
    """[R, C] values 0..15 -> AWQ's int32 [R, C / 8] (nibble order 0, 4, 1, 5, 2, 6, 3, 7)."""
    out = torch.zeros(v.shape[0], v.shape[1] // 8, dtype=torch.int64)
    for j, slot in enumerate((0, 4, 1, 5, 2, 6, 3, 7)):
        out |= v[:, j::8].to(torch.int64) << (4 * slot)
    return (out - ((out >> 31) << 32)).to(torch.int32)


def wna16_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """compressed-tensors' WNA16 int4 (pack-quantized) on a CPU: instead of SGLang's Marlin
    repacking (GPU only), the checkpoint's ``weight_packed`` int32 [N, K / 8] (values + 8 along
    K), ``weight_scale`` [N, G] and, if asymmetric, ``weight_zero_point`` int32 [N / 8, G]
    (zero point + 8 along N; symmetric: 8) are rewritten in AWQ's int32 layout (the only one
    of the op's two that holds every zero point 0..15) and packed once by
    ``convert_weight_packed_scale_zp``. Act-order (``weight_g_idx``) and 8-bit weights are
    refused with a clear error; other devices go to SGLang's method."""
    packed, scale = _tensor(layer, "weight_packed"), _tensor(layer, "weight_scale")
    if packed is None or scale is None or packed.device.type != "cpu":
        return original(self, layer)
    if getattr(self, "has_g_idx", False):
        raise ValueError(
            "sglang-rvv: this compressed-tensors WNA16 checkpoint uses act-order (actorder="
            "group: weight_g_idx permutes the input channels among the groups); the CPU int4 "
            "kernels take contiguous groups only. Re-quantise without actorder (or with "
            "actorder=weight, which keeps the groups contiguous)."
        )
    bits = 32 // int(getattr(self, "pack_factor", 8))
    if bits != 4:
        raise ValueError(
            f"sglang-rvv: compressed-tensors WNA16 with num_bits={bits}: the CPU kernels take "
            "4-bit weights only (num_bits=4)"
        )
    n, k = packed.shape[0], packed.shape[1] * 8
    groups = scale.shape[1] if scale.dim() == 2 else 0
    if scale.shape[0] != n or groups == 0 or k % groups or n % 8:
        raise ValueError(
            f"sglang-rvv: compressed-tensors WNA16 weight_packed {tuple(packed.shape)} and "
            f"weight_scale {tuple(scale.shape)}: expected weight_scale [N, G] with N = "
            f"{n} a multiple of 8 and G dividing K = {k}"
        )
    q = _unpack_nibbles(packed.data, 1)  # [N, K]
    if getattr(self, "symmetric", True):
        zeros = torch.full((groups, n), 8, dtype=torch.uint8)
    else:
        zp = _tensor(layer, "weight_zero_point")
        if zp is None or tuple(zp.shape) != (n // 8, groups):
            raise ValueError(
                "sglang-rvv: asymmetric compressed-tensors WNA16 needs weight_zero_point "
                f"int32 [N / 8, G] = [{n // 8}, {groups}], got "
                f"{None if zp is None else tuple(zp.shape)}"
            )
        zeros = _unpack_nibbles(zp.data, 0).T  # [G, N]
    w, z, s = _sgl.convert_weight_packed_scale_zp(
        _awq_words(q.T.contiguous()),
        _awq_words(zeros.contiguous()),
        scale.data.T.contiguous(),
        _AWQ,
    )
    _count("convert_weight_packed_scale_zp")
    for name, t in (("weight_packed", w), ("weight_zero_point", z), ("weight_scale", s)):
        setattr(layer, name, torch.nn.Parameter(t, requires_grad=False))
    setattr(layer, _INT4_PACKED, True)
    return None


def wna16_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None,
) -> Any:
    """``int4_w4a16_mm_cpu`` (W4A16, the default: the format's activations stay in 16-bit, as
    SGLang's Marlin path computes them), or ``int4_scaled_mm_cpu`` (W4A8) with
    ``SGLANG_RVV_INT4_ACT=int8``, for layers packed by :func:`wna16_process_weights`."""
    if not getattr(layer, _INT4_PACKED, False) or x.dtype not in _GEMM_DTYPES:
        return original(self, layer, x, bias)
    names = ("weight_packed", "weight_zero_point", "weight_scale")
    return _int4_mm(x, layer, names, bias, "none")


_ROUTED_CT_SCHEMES = ("CompressedTensorsW8A8Int8", "CompressedTensorsWNA16")
_CT_SCHEME = "_rvv_last_scheme"


def ct_scheme_from_parts(original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any) -> Any:
    """Records the scheme compressed-tensors just chose for a layer, for
    :func:`ct_check_scheme_supported` (cleared first: the checks made while choosing are not
    about it)."""
    setattr(self, _CT_SCHEME, None)
    scheme = original(self, *args, **kwargs)
    setattr(self, _CT_SCHEME, scheme)
    return scheme


def ct_check_scheme_supported(
    original: Callable[..., Any], self: Any, min_capability: int, error: bool = True
) -> Any:
    """compressed-tensors checks each layer's scheme against the CUDA device's compute
    capability, which fails on a host without CUDA; a scheme these hooks run on the CPU
    (W8A8 int8, WNA16) is supported there. Other schemes keep SGLang's check."""
    name = type(getattr(self, _CT_SCHEME, None)).__name__
    if (
        name in _ROUTED_CT_SCHEMES
        and not torch.cuda.is_available()
        and (name != "CompressedTensorsWNA16" or int4_ops_available())
    ):
        return True
    return original(self, min_capability, error)


_BASE = "sglang.srt.layers."
HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_BASE + "layernorm.RMSNorm.forward_native", rmsnorm_forward),
    (_BASE + "layernorm.GemmaRMSNorm.forward_native", gemma_rmsnorm_forward),
    (_BASE + "layernorm.LayerNorm.forward_native", layernorm_forward),
    (_BASE + "activation.SiluAndMul.forward_native", silu_and_mul_forward),
    (_BASE + "activation.GeluAndMul.forward_native", gelu_and_mul_forward),
    (_BASE + "rotary_embedding.base.RotaryEmbedding.forward_native", rotary_forward),
)
OPTIONAL_HOOKS: tuple[tuple[str, Callable[..., Any], str], ...] = (
    (_BASE + "layernorm.Gemma3RMSNorm.forward_native", gemma3_rmsnorm_forward,
     "gemma3_rmsnorm_cpu"),
    ("sglang.kernels.ops.attention.fla.layernorm_gated.RMSNorm.forward", rmsnorm_gated_forward,
     "fused_rmsnorm_gated_cpu"),
)  # fmt: skip
"""Hooks registered when the installed rvv-ops defines their op: (target, hook, op)."""
LINEAR_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (
        _BASE + "quantization.unquant.UnquantizedLinearMethod.process_weights_after_loading",
        linear_process_weights,
    ),
    (_BASE + "quantization.unquant.UnquantizedLinearMethod.apply", linear_apply),
    (
        _BASE + "quantization.w8a8_int8.W8A8Int8LinearMethod.process_weights_after_loading",
        w8a8_process_weights,
    ),
    (_BASE + "quantization.w8a8_int8.W8A8Int8LinearMethod.apply", w8a8_apply),
    (
        _BASE + "quantization.compressed_tensors.schemes.compressed_tensors_w8a8_int8."
        "CompressedTensorsW8A8Int8.process_weights_after_loading",
        ct_w8a8_process_weights,
    ),
    (
        _BASE + "quantization.compressed_tensors.schemes.compressed_tensors_w8a8_int8."
        "CompressedTensorsW8A8Int8.apply_weights",
        ct_w8a8_apply,
    ),
)


def fp8_process_weights(original: Callable[..., Any], self: Any, layer: torch.nn.Module) -> Any:
    """Block-quantised fp8 weights on a CPU: packed once (``convert_weight_packed``) instead
    of SGLang's CPU branch, which needs AMX; anything else goes to SGLang's method."""
    weight = _cpu_weight(layer, (torch.float8_e4m3fn,))
    scale = _tensor(layer, "weight_scale_inv")
    if not getattr(self, "block_quant", False) or weight is None or scale is None:
        return original(self, layer)
    _pack(layer, weight, "weight_scale_inv", scale.data.to(torch.float32))
    return None


def fp8_apply(
    original: Callable[..., Any],
    self: Any,
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> Any:
    """``fp8_scaled_mm_cpu`` (W8A16) for layers packed by :func:`fp8_process_weights`."""
    if not getattr(layer, _PACKED, False) or not isinstance(x, torch.Tensor):
        return original(self, layer, x, bias)
    block = list(self.quant_config.weight_block_size)
    return _on_rows(
        "fp8_scaled_mm_cpu", x, layer.weight, layer.weight_scale_inv, block, bias, x.dtype, True
    )


FP8_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (
        _BASE + "quantization.fp8.Fp8LinearMethod.process_weights_after_loading",
        fp8_process_weights,
    ),
    (_BASE + "quantization.fp8.Fp8LinearMethod.apply", fp8_apply),
)
_CPU_QUANT = "sglang.srt.hardware_backend.cpu.quantization."
QUANT_CONFIG_HOOK: tuple[str, Callable[..., Any]] = (
    _BASE + "quantization.get_quantization_config",
    quantization_config,
)
INT4_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    *(
        (f"{_CPU_QUANT}{mod}.{cls}.{meth}", hook)
        for mod, cls in (
            ("awq_kernels", "AWQIntelAMXLinearKernel"),
            ("gptq_kernels", "GPTQIntelAMXLinearKernel"),
        )
        for meth, hook in (
            ("process_weights_after_loading", int4_process_weights),
            ("apply", int4_apply),
        )
    ),
)


_CT = _BASE + "quantization.compressed_tensors."
_WNA16 = _CT + "schemes.compressed_tensors_wNa16.CompressedTensorsWNA16."
WNA16_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_WNA16 + "process_weights_after_loading", wna16_process_weights),
    (_WNA16 + "apply_weights", wna16_apply),
)
CT_CONFIG_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (
        _CT + "compressed_tensors.CompressedTensorsConfig._get_scheme_from_parts",
        ct_scheme_from_parts,
    ),
    (
        _CT + "compressed_tensors.CompressedTensorsConfig._check_scheme_supported",
        ct_check_scheme_supported,
    ),
)


def maybe_enable() -> bool:
    """Registers the hooks if routing is requested (idempotent); returns whether it is on."""
    global _enabled, _routed
    if _enabled is not None:
        return _enabled
    _enabled = routing_requested()
    if not _enabled:
        return False
    import rvv_ops  # noqa: F401  (registers the ops)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks = list(HOOKS)
    hooks += [(t, h) for t, h, op in OPTIONAL_HOOKS if hasattr(torch.ops.sgl_kernel, op)]
    if linear_ops_available():
        hooks += LINEAR_HOOKS
        hooks.append(QUANT_CONFIG_HOOK)
        hooks += CT_CONFIG_HOOKS
        if int4_ops_available():
            int4_activations()  # a bad SGLANG_RVV_INT4_ACT fails at start-up
            hooks += INT4_HOOKS + WNA16_HOOKS
        if hasattr(torch.ops.sgl_kernel, "fp8_scaled_mm_cpu"):
            hooks += FP8_HOOKS
        from sglang_rvv import moe

        hooks += moe.routed_hooks()
    else:
        logger.warning(
            "sglang-rvv: the installed rvv-ops has no %s: linear layers stay on torch",
            " / ".join(_LINEAR_OPS),
        )
    from sglang_rvv import op_stats

    for target, hook in hooks:
        HookRegistry.register(target, op_stats.counted_hook(target, hook), HookType.AROUND)
    atexit.register(flush_stats)
    configs = {QUANT_CONFIG_HOOK[0], *(t for t, _ in CT_CONFIG_HOOKS)}
    _routed = tuple(dict.fromkeys(t.rsplit(".", 2)[-2] for t, _ in hooks if t not in configs))
    return True


def routing_summary() -> str:
    """Which SGLang layers this process routes to the RVV ops, or why none (one phrase)."""
    if _enabled:
        return f"layers on RVV ops: {', '.join(_routed)}"
    value = os.environ.get("SGLANG_RVV_LAYERS", "auto").strip().lower()
    why = "this CPU has no RVV; SGLANG_RVV_LAYERS=1 routes them" if value == "auto" else ""
    return f"layers on SGLang's torch code (SGLANG_RVV_LAYERS={value}{': ' + why if why else ''})"
