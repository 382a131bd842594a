"""The general plugin (backend registration) and the model-layer routing, each in a fresh
interpreter: SGLang loads plugins once per process and hooks patch its classes globally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from sglang_rvv import layers


def _run(code: str, **env: str) -> Any:
    """Runs ``code`` with SGLang in CPU mode; it prints one JSON line last."""
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


def test_sglang_loads_the_plugin_through_its_entry_point() -> None:
    out, _ = _run(
        """
        import json
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        f = ATTENTION_BACKENDS.get("rvv")
        print(json.dumps([f.__module__ if f else None, ATTENTION_BACKEND_CHOICES.count("rvv")]))
        """
    )
    assert out == ["sglang_rvv.plugin", 1]


@pytest.mark.parametrize("replace", ["0", "1"])
def test_an_existing_rvv_backend_is_not_replaced_silently(replace: str) -> None:
    out, err = _run(
        """
        import json, logging
        logging.basicConfig(level=logging.WARNING)
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        def foreign(runner):
            return None
        ATTENTION_BACKENDS["rvv"] = foreign
        from sglang_rvv import plugin
        plugin.register()
        plugin.register()
        print(json.dumps(ATTENTION_BACKENDS["rvv"].__module__))
        """,
        SGLANG_RVV_REPLACE_BACKEND=replace,
        SGLANG_RVV_LAYERS="0",
    )
    if replace == "1":
        assert out == "sglang_rvv.plugin"
    else:
        assert out == "__main__"
        assert "already registered by __main__; keeping it" in err


_LAYERS_SCRIPT = """
    import json, torch
    from sglang.srt.layers.layernorm import RMSNorm, GemmaRMSNorm, Gemma3RMSNorm
    from sglang.srt.layers.activation import SiluAndMul, GeluAndMul
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding
    torch.manual_seed(0)
    cases = []  # (name, module, args) ; args are cloned for every call
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(7, 96, dtype=dt)
        for cls in (RMSNorm, GemmaRMSNorm):
            m = cls(96, eps=1e-6).to(dt)
            m.weight.data.normal_()
            cases.append((f"{cls.__name__}-{dt}", m, (x,)))
            cases.append((f"{cls.__name__}-residual-{dt}", m, (x, torch.randn(7, 96, dtype=dt))))
        g3 = Gemma3RMSNorm(96, eps=1e-6).to(dt)
        g3.weight.data.normal_()
        cases.append((f"Gemma3RMSNorm-{dt}", g3, (x,)))
        cases.append((f"Gemma3RMSNorm-residual-{dt}", g3, (x, torch.randn(7, 96, dtype=dt))))
        cases.append((f"Gemma3RMSNorm-heads-{dt}", Gemma3RMSNorm(16).to(dt),
                      (torch.randn(3, 6, 16, dtype=dt),)))
        y = torch.randn(5, 2 * 48, dtype=dt)
        cases.append((f"silu-{dt}", SiluAndMul(), (y,)))
        for ap in ("none", "tanh"):
            cases.append((f"gelu-{ap}-{dt}", GeluAndMul(approximate=ap), (y,)))
        for neox in (True, False):
            rope = RotaryEmbedding(32, 16, 256, 10000, neox, dt)
            pos = torch.tensor([0, 5, 17, 255, 3])
            q, k = torch.randn(5, 6 * 32, dtype=dt), torch.randn(5, 2 * 32, dtype=dt)
            cases.append((f"rope-neox={neox}-{dt}", rope, (pos, q, k)))
    def run(m, args):
        out = m(*[a.clone() for a in args])
        return out if isinstance(out, tuple) else (out,)
    # SGLang's own torch code first (no plugin loaded yet), then the same modules routed.
    reference = [run(m, a) for _, m, a in cases]
    for _, m, _ in cases:
        m._forward_method = None  # SGLang caches the resolved method per instance
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_rvv import layers
    errs = {}
    for (name, m, a), ref in zip(cases, reference):
        got = run(m, a)
        errs[name] = max(float((g.float() - r.float()).abs().max()) for g, r in zip(got, ref))
    print(json.dumps({"enabled": layers._enabled, "calls": dict(layers.CALLS), "errs": errs}))
"""


def test_layers_route_to_the_rvv_ops_and_match_sglang_native() -> None:
    out, _ = _run(_LAYERS_SCRIPT, SGLANG_RVV_LAYERS="1")
    assert out["enabled"] is True
    calls = out["calls"]
    for op in (
        "rmsnorm_cpu",
        "fused_add_rmsnorm_cpu",
        "gemma_rmsnorm_cpu",
        "gemma_fused_add_rmsnorm_cpu",
        "gemma3_rmsnorm_cpu",
        "silu_and_mul_cpu",
        "gelu_and_mul_cpu",
        "gelu_tanh_and_mul_cpu",
        "rotary_embedding_cpu",
    ):
        assert calls.get(op, 0) > 0, f"{op} not called: {calls}"
    for name, e in out["errs"].items():
        # fp32: a few ulps; bf16: one or two bf16 ulps of O(1) values after rounding
        bound = 1e-4 if "float32" in name else 3.2e-2
        assert e <= bound, f"{name}: max |routed - SGLang's torch code| = {e} > {bound}"


@pytest.mark.parametrize("value", ["0", "auto"])
def test_layers_not_routed_when_off(value: str) -> None:
    # "auto" means: only on CPUs with the vector extension, which this x86 host lacks.
    out, _ = _run(_LAYERS_SCRIPT, SGLANG_RVV_LAYERS=value)
    assert out["enabled"] is False
    assert out["calls"] == {}


def test_linear_routing() -> None:
    code = """
        import json, torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang_rvv import layers
        from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
        torch.manual_seed(0)
        errs = {}
        for dt in (torch.float32, torch.bfloat16):
            for n, k, m in ((96, 64, 1), (17, 33, 5), (256, 128, 40)):
                layer = torch.nn.Module()
                meth = UnquantizedLinearMethod()
                meth.create_weights(layer, k, [n], k, n, dt)
                layer.weight.data.copy_(torch.randn(n, k, dtype=dt) / k**0.5)
                w = layer.weight.data.clone()
                meth.process_weights_after_loading(layer)
                x, bias = torch.randn(m, k, dtype=dt), torch.randn(n, dtype=dt)
                got = meth.apply(layer, x, bias)
                ref = (x.double() @ w.double().T + bias.double())
                errs[f"{dt}-{n}x{k}x{m}"] = float((got.double() - ref).abs().max())
        print(json.dumps({"calls": dict(layers.CALLS), "errs": errs,
                          "linear": layers.linear_ops_available()}))
    """
    out, err = _run(code, SGLANG_RVV_LAYERS="1")
    if not layers.linear_ops_available():
        # Without the GEMM ops in rvv-ops the linear layers must stay on torch, and say so.
        assert out["linear"] is False and "weight_packed_linear" not in out["calls"]
        assert "linear layers stay on torch" in err
        return
    assert out["calls"].get("convert_weight_packed", 0) == 6
    assert out["calls"].get("weight_packed_linear", 0) == 6
    for name, e in out["errs"].items():
        bound = 1e-4 if "float32" in name else 5e-2
        assert e <= bound, f"{name}: {e} > {bound}"


def test_w8a8_linear_routing() -> None:
    """SGLang's W8A8Int8LinearMethod, which asserts on a CPU without AMX or arm64, loads and
    runs through convert_weight_packed + int8_scaled_mm_with_quant with routing on: the
    result is SGLang's W8A8 arithmetic (per-token int8 activations, exact int32 sums)."""
    code = """
        import json, torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang_rvv import layers
        from sglang.srt.layers.quantization.w8a8_int8 import W8A8Int8Config, W8A8Int8LinearMethod
        torch.manual_seed(0)
        errs = {}
        for dt in (torch.bfloat16, torch.float16):
            for n, k, m in ((96, 64, 1), (17, 33, 5), (176, 64, 40)):
                layer = torch.nn.Module()
                meth = W8A8Int8LinearMethod(W8A8Int8Config({}))
                meth.create_weights(layer, k, [n], k, n, dt, weight_loader=None)
                layer.weight.data.copy_(torch.randint(-127, 128, (n, k), dtype=torch.int8))
                layer.weight_scale.data.copy_(torch.rand(n, 1) / 100 + 1e-3)
                w = layer.weight.data.double() * layer.weight_scale.data.double()
                meth.process_weights_after_loading(layer)
                x, bias = torch.randn(m, k, dtype=dt), torch.randn(n, dtype=dt)
                got = meth.apply(layer, x, bias)
                # reference: SGLang's per-token quantisation of x, exact products
                amax = x.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-10)
                xq = torch.round(x.float() * (127 / amax)).clamp(-127, 127).double()
                ref = (xq * (amax.double() / 127)) @ w.T + bias.double()
                scale = ref.abs().max().item()
                errs[f"{dt}-{n}x{k}x{m}"] = float((got.double() - ref).abs().max()) / scale
        print(json.dumps({"calls": dict(layers.CALLS), "errs": errs}))
    """
    out, _ = _run(code, SGLANG_RVV_LAYERS="1")
    assert out["calls"].get("convert_weight_packed", 0) == 6
    assert out["calls"].get("int8_scaled_mm_with_quant", 0) == 6
    for name, e in out["errs"].items():
        assert e <= 1e-2, f"{name}: {e} relative to the largest output"


def test_torch_compile_is_refused_clearly() -> None:
    from types import SimpleNamespace

    from sglang_rvv.backend import RVVAttnBackend

    runner = SimpleNamespace(device="cpu", server_args=SimpleNamespace(enable_torch_compile=True))
    with pytest.raises(ValueError, match="--enable-torch-compile is not supported"):
        RVVAttnBackend(runner)  # type: ignore[arg-type]


def test_startup_summary_names_what_falls_back_and_why() -> None:
    from collections import Counter

    import torch
    from sglang_rvv.backend import fallback_summary

    bf16 = torch.bfloat16
    plain = frozenset({"kv_write"})
    cross = frozenset({"cross_attention", "encoder_lens"})
    assert fallback_summary(Counter({("decode", bf16, bf16, 64, 64, plain): 4})) == "none"
    summary = fallback_summary(
        Counter(
            {
                ("decode", bf16, bf16, 64, 64, plain): 4,
                ("extend", bf16, bf16, 64, 64, cross): 3,
            }
        )
    )
    assert summary == (
        "extend of 3 layers: the kernel does not support cross_attention, encoder_lens"
    )


def test_int4_and_fp8_linear_routing() -> None:
    """With routing on: SGLang's CPU configs for awq / gptq on this (non-AMX) CPU, fp32
    activations accepted; SGLang's AWQ / GPTQ CPU kernels pack through
    convert_weight_packed_scale_zp and run int4_scaled_mm_cpu (or int4_w4a16_mm_cpu with
    SGLANG_RVV_INT4_ACT=none); GPTQ act-order is refused; a block-fp8 layer runs
    fp8_scaled_mm_cpu. Results against the dequantised weight in float64."""
    code = """
        import json, types, torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang_rvv import layers, quant
        from sglang.srt.layers.quantization import get_quantization_config
        from sglang.srt.hardware_backend.cpu.quantization.awq_kernels import (
            AWQIntelAMXLinearKernel)
        from sglang.srt.hardware_backend.cpu.quantization.gptq_kernels import (
            GPTQIntelAMXLinearKernel)
        cfgs = {q: get_quantization_config(q) for q in ("awq", "gptq", "fp8", "w8a8_int8")}
        out = {"configs": {q: [c.__mro__[1].__name__,
                               torch.float32 in c.get_supported_act_dtypes()]
                           for q, c in cfgs.items()}}
        torch.manual_seed(0)
        n, k = 48, 64
        w = torch.randn(n, k) / 8
        q, zeros, scales = quant.quantize_int4(w, 16)
        ref_w = quant.dequantize_int4(q, zeros, scales).double()
        x = torch.randn(5, k)
        errs = {}
        for name, kernel, pack, zmin in (("awq", AWQIntelAMXLinearKernel, quant.pack_awq, 0),
                                         ("gptq", GPTQIntelAMXLinearKernel, quant.pack_gptq, 1)):
            q, zeros, scales = quant.quantize_int4(w, 16, zero_min=zmin)
            ref = x.double() @ quant.dequantize_int4(q, zeros, scales).double().T
            layer = torch.nn.Module()
            qw, qz = pack(q, zeros)
            for attr, t in (("qweight", qw), ("qzeros", qz), ("scales", scales.float())):
                setattr(layer, attr, torch.nn.Parameter(t, requires_grad=False))
            layer.g_idx = torch.nn.Parameter(torch.arange(k, dtype=torch.int32) // 16,
                                             requires_grad=False)
            kern = kernel(types.SimpleNamespace())
            kern.process_weights_after_loading(layer)
            errs[name] = float((kern.apply(layer, x, None).double() - ref).abs().max())
            if name == "gptq":
                bad = torch.nn.Module()
                for attr, t in (("qweight", qw), ("qzeros", qz), ("scales", scales.float())):
                    setattr(bad, attr, torch.nn.Parameter(t, requires_grad=False))
                bad.g_idx = torch.nn.Parameter(torch.arange(k, dtype=torch.int32).flip(0) // 16,
                                               requires_grad=False)
                try:
                    kern.process_weights_after_loading(bad)
                    out["act_order"] = "accepted"
                except ValueError as e:
                    out["act_order"] = str(e)
        import os
        os.environ["SGLANG_RVV_INT4_ACT"] = "none"
        errs["awq_w4a16"] = float((AWQIntelAMXLinearKernel(None).apply(layer, x, None).double()
                                   - ref).abs().max())
        from sglang.srt.layers.quantization.fp8 import Fp8LinearMethod
        w8, s8 = quant.quantize_fp8(w, (16, 32))
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(w8, requires_grad=False)
        layer.weight_scale_inv = torch.nn.Parameter(s8, requires_grad=False)
        meth = Fp8LinearMethod.__new__(Fp8LinearMethod)
        meth.block_quant = True
        meth.quant_config = types.SimpleNamespace(weight_block_size=[16, 32])
        meth.process_weights_after_loading(layer)
        ref8 = x.double() @ quant.dequantize_fp8(w8, s8, (16, 32)).double().T
        errs["fp8"] = float((meth.apply(layer, x, None).double() - ref8).abs().max())
        out["errs"] = errs
        out["calls"] = dict(layers.CALLS)
        print(json.dumps(out))
    """
    out, _ = _run(code, SGLANG_RVV_LAYERS="1")
    assert out["configs"] == {
        "awq": ["AWQCPUConfig", True],
        "gptq": ["CPUGPTQConfig", True],
        "fp8": ["Fp8Config", True],
        "w8a8_int8": ["W8A8Int8Config", True],
    }
    assert "act-order" in out["act_order"] and "g_idx" in out["act_order"]
    # W4A16 and FP8 are the dequantised weight in fp32; W4A8 adds int8 activation rounding
    # (at most half a step, amax / 254, per element: well under 5% of the outputs' size).
    assert out["errs"]["awq_w4a16"] < 1e-4 and out["errs"]["fp8"] < 1e-4, out["errs"]
    assert out["errs"]["awq"] < 5e-2 and out["errs"]["gptq"] < 5e-2, out["errs"]
    calls = out["calls"]
    assert calls.get("convert_weight_packed_scale_zp") == 2
    assert calls.get("int4_scaled_mm_cpu") == 2 and calls.get("int4_w4a16_mm_cpu") == 1
    assert calls.get("fp8_scaled_mm_cpu") == 1 and calls.get("convert_weight_packed") == 1


def test_compressed_tensors_w8a8_routing() -> None:
    """compressed-tensors' W8A8 int8 scheme (dynamic symmetric activations), per-channel and
    per-tensor weight scales (one per fused part, repeated over its channels), through
    int8_scaled_mm_with_quant."""
    code = """
        import json, torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from compressed_tensors.quantization import QuantizationStrategy
        from sglang_rvv import layers
        from sglang.srt.layers.quantization.compressed_tensors.schemes import (
            compressed_tensors_w8a8_int8 as ct)
        torch.manual_seed(0)
        errs = {}
        for strategy in (QuantizationStrategy.CHANNEL, QuantizationStrategy.TENSOR):
            n, k, parts = 48, 64, [32, 16]
            scheme = ct.CompressedTensorsW8A8Int8(strategy, False, True)
            layer = torch.nn.Module()
            scheme.create_weights(layer, parts, k, torch.bfloat16, weight_loader=lambda *a: None)
            layer.weight.data.copy_(torch.randint(-127, 128, (n, k), dtype=torch.int8))
            if strategy == QuantizationStrategy.CHANNEL:
                layer.weight_scale.data.copy_(torch.rand(n, 1) / 100 + 1e-3)
                w = layer.weight.data.double() * layer.weight_scale.data.double()
            else:
                layer.weight_scale.data.copy_(torch.tensor([0.01, 0.02]))
                per_row = torch.tensor([0.01] * 32 + [0.02] * 16, dtype=torch.float64)
                w = layer.weight.data.double() * per_row[:, None]
            scheme.process_weights_after_loading(layer)
            x = torch.randn(5, k, dtype=torch.bfloat16)
            got = scheme.apply_weights(layer, x, None)
            amax = x.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-10)
            xq = torch.round(x.float() * (127 / amax)).clamp(-127, 127).double()
            ref = (xq * (amax.double() / 127)) @ w.T
            errs[str(strategy)] = float((got.double() - ref).abs().max() / ref.abs().max())
        print(json.dumps({"errs": errs, "calls": dict(layers.CALLS)}))
    """
    out, _ = _run(code, SGLANG_RVV_LAYERS="1")
    assert out["calls"].get("int8_scaled_mm_with_quant") == 2, out
    assert out["calls"].get("convert_weight_packed") == 2, out
    for name, e in out["errs"].items():
        assert e <= 2e-2, f"{name}: {e}"


def test_compressed_tensors_wna16_routing() -> None:
    """compressed-tensors' WNA16 int4 (pack-quantized) scheme, symmetric and asymmetric with
    groups of 16, and channel strategy (one group of all K): the checkpoint tensors written by
    sglang_rvv.quant.pack_wna16, checked first against compressed-tensors' own decompression,
    converted once through convert_weight_packed_scale_zp and run by int4_w4a16_mm_cpu (the
    default), or int4_scaled_mm_cpu with SGLANG_RVV_INT4_ACT=int8; act-order and 8-bit
    weights refused; the capability check that needs CUDA passes for the routed schemes."""
    code = """
        import json, os, torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from compressed_tensors.compressors.pack_quantized.base import (
            PackedQuantizationCompressor)
        from compressed_tensors.quantization import QuantizationScheme
        from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import (
            CompressedTensorsConfig)
        from sglang.srt.layers.quantization.compressed_tensors.schemes.compressed_tensors_wNa16 \\
            import CompressedTensorsWNA16
        from sglang_rvv import layers, quant
        torch.manual_seed(0)
        n, k, parts = 48, 64, [32, 16]
        w = torch.randn(n, k) / 8
        x = torch.randn(5, k)
        # groups of only positive / only negative weights: asymmetric zero points 0 and 15
        w_edge = w.clone()
        w_edge[:8, :16] = w_edge[:8, :16].abs()
        w_edge[8:16, 16:32] = -w_edge[8:16, 16:32].abs()
        out = {"errs": {}, "ct": {}}
        for name, strategy, group, sym in (("group_sym", "group", 16, True),
                                           ("group_asym", "group", 16, False),
                                           ("channel_sym", "channel", None, True)):
            g = group or k
            if sym:
                q, zeros, scales = quant.quantize_int4_symmetric(w, g)
            else:
                q, zeros, scales = quant.quantize_int4(w_edge, g)
                out["zero_range"] = [int(zeros.min()), int(zeros.max())]
            ref_w = quant.dequantize_int4(q, zeros, scales)
            packed, zp = quant.pack_wna16(q, None if sym else zeros)
            state = {"weight_packed": packed, "weight_scale": scales.T.float().contiguous(),
                     "weight_shape": torch.tensor([n, k])}
            if zp is not None:
                state["weight_zero_point"] = zp
            args = {"num_bits": 4, "type": "int", "symmetric": sym, "strategy": strategy,
                    "group_size": group}
            ct_w = PackedQuantizationCompressor.decompress(
                state, QuantizationScheme(targets=["Linear"], weights=args))["weight"]
            out["ct"][name] = bool(torch.equal(ct_w, ref_w))
            cfg = CompressedTensorsConfig.from_config({
                "quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"g": {"targets": ["Linear"], "weights": args}}})
            scheme = cfg._get_scheme_from_parts(cfg.target_scheme_map["Linear"]["weights"],
                                                None, "pack-quantized")
            assert isinstance(scheme, CompressedTensorsWNA16), scheme
            out["supported"] = cfg._check_scheme_supported(scheme.get_min_capability())
            layer = torch.nn.Module()
            scheme.create_weights(layer, n, k, parts, k, torch.float32,
                                  weight_loader=lambda *a: None)
            for attr, t in state.items():
                getattr(layer, attr).data.copy_(t)
            scheme.process_weights_after_loading(layer)
            ref = x.double() @ ref_w.double().T
            assert scheme.symmetric == sym
            os.environ.pop("SGLANG_RVV_INT4_ACT", None)
            out["errs"][name] = float((scheme.apply_weights(layer, x, None).double() - ref)
                                      .abs().max())
            os.environ["SGLANG_RVV_INT4_ACT"] = "int8"
            out["errs"][name + "_w4a8"] = float(
                (scheme.apply_weights(layer, x, None).double() - ref).abs().max())
        refused = {}
        for what, ctor in (("act_order", lambda: CompressedTensorsWNA16(
                               "group", 4, 16, True, actorder="group")),
                           ("bits8", lambda: CompressedTensorsWNA16("group", 8, 16, True))):
            scheme = ctor()
            layer = torch.nn.Module()
            scheme.create_weights(layer, n, k, parts, k, torch.float32,
                                  weight_loader=lambda *a: None)
            try:
                scheme.process_weights_after_loading(layer)
                refused[what] = "accepted"
            except ValueError as e:
                refused[what] = str(e)
        out["refused"] = refused
        # the capability check for the other routed scheme (W8A8 int8) and one not routed
        # (W8A8 fp8), which keeps SGLang's checks (they need CUDA)
        checks = {}
        for what, fmt, typ in (("w8a8_int8", "int-quantized", "int"),
                               ("w8a8_fp8", "float-quantized", "float")):
            args = {"num_bits": 8, "type": typ, "symmetric": True, "strategy": "channel"}
            act = {**args, "strategy": "token", "dynamic": True}
            cfg = CompressedTensorsConfig.from_config({
                "quant_method": "compressed-tensors", "format": fmt,
                "config_groups": {"g": {"targets": ["Linear"], "weights": args,
                                        "input_activations": act}}})
            target = cfg.target_scheme_map["Linear"]
            try:
                scheme = cfg._get_scheme_from_parts(target["weights"],
                                                    target["input_activations"], fmt)
                checks[what] = [type(scheme).__name__,
                                cfg._check_scheme_supported(scheme.get_min_capability())]
            except RuntimeError as e:
                checks[what] = ["RuntimeError", str(e)]
        out["checks"] = checks
        out["calls"] = dict(layers.CALLS)
        print(json.dumps(out))
    """
    out, _ = _run(code, SGLANG_RVV_LAYERS="1")
    # pack_wna16 writes what compressed-tensors itself decompresses to the dequantised weight
    assert out["ct"] == {"group_sym": True, "group_asym": True, "channel_sym": True}
    assert out["supported"] is True and out["zero_range"] == [0, 15]
    # W4A16 is the dequantised weight in fp32; W4A8 adds int8 activation rounding (as above)
    for name in out["ct"]:
        assert out["errs"][name] < 1e-4, out["errs"]
        assert out["errs"][name + "_w4a8"] < 5e-2, out["errs"]
    assert "act-order" in out["refused"]["act_order"], out["refused"]
    assert "num_bits=8" in out["refused"]["bits8"], out["refused"]
    checks = out["checks"]
    assert checks["w8a8_int8"] == ["CompressedTensorsW8A8Int8", True], checks
    assert checks["w8a8_fp8"][0] == "RuntimeError" and "NVIDIA" in checks["w8a8_fp8"][1]
    calls = out["calls"]
    assert calls.get("convert_weight_packed_scale_zp") == 3, calls
    assert calls.get("int4_w4a16_mm_cpu") == 3 and calls.get("int4_scaled_mm_cpu") == 3, calls


def test_gated_rmsnorm_routes_to_the_op() -> None:
    """fla's gated RMSNorm (Qwen3.5's GDN output norm) runs a Triton kernel on a CPU without
    sgl-kernel's AMX build; routed, it runs fused_rmsnorm_gated_cpu: rmsnorm(x) * w * silu(z)
    against float64."""
    out, _ = _run(
        """
        import json, torch
        from sglang.kernels.ops.attention.fla.layernorm_gated import RMSNorm
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang_rvv import layers
        torch.manual_seed(0)
        errs = {}
        for dt in (torch.float32, torch.bfloat16):
            m = RMSNorm(48, eps=1e-6).to(dt)
            m.weight.data.normal_()
            x, z = torch.randn(5, 48, dtype=dt), torch.randn(5, 48, dtype=dt)
            got = m(x, z)
            xd, zd, w = x.double(), z.double(), m.weight.double()
            ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            ref = ref * zd * torch.sigmoid(zd)
            errs[str(dt)] = float((got.double() - ref).abs().max())
        print(json.dumps({"calls": dict(layers.CALLS), "errs": errs}))
        """,
        SGLANG_RVV_LAYERS="1",
    )
    assert out["calls"].get("fused_rmsnorm_gated_cpu", 0) == 2, out
    assert out["errs"]["torch.float32"] <= 1e-5 and out["errs"]["torch.bfloat16"] <= 5e-2, out
