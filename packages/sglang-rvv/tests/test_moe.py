"""The MoE hooks (:mod:`sglang_rvv.moe`), each scenario in a fresh interpreter (SGLang applies
hooks once per process and they patch its modules globally): Qwen2-MoE's shared-expert gate
in torch, expert selection through the routing ops, ``UnquantizedFusedMoEMethod`` through
``fused_experts_cpu``, against SGLang's own torch code and float64 references."""

from __future__ import annotations

import pytest
import torch
from sglang_rvv import moe
from test_plugin import _run


def test_rvv_ops_has_the_moe_ops() -> None:
    # The routing and fused-experts tests below need them; a build without them fails here.
    assert not moe.missing_ops(), f"the installed rvv-ops lacks {moe.missing_ops()}"


_GATE_SCRIPT = """
    import json, torch
    from sglang.srt.models import qwen2_moe
    torch.manual_seed(0)
    out = {}
    def case(dt, t):
        h = torch.randn(t, 72, dtype=dt)
        w = torch.randn(1, 72, dtype=dt) * 0.2
        s = torch.randn(t, 72, dtype=dt)
        f = torch.randn(t, 72, dtype=dt)
        ref = f.double() + torch.sigmoid(h.double() @ w.double().reshape(-1))[:, None] * s.double()
        return h, w, s, f, ref
    h, w, s, f, _ = case(torch.float32, 3)
    try:  # SGLang alone: the triton kernel, on a CPU
        qwen2_moe.fused_gate_sigmoid_mul_add(h, w.squeeze(0), s, f)
        out["without_plugin"] = "ran"
    except RuntimeError as exc:
        out["without_plugin"] = str(exc)
    from sglang.srt.plugins import load_plugins
    load_plugins()
    errs = {}
    for dt in (torch.float32, torch.bfloat16):
        for t in (1, 7):
            h, w, s, f, ref = case(dt, t)
            qwen2_moe.fused_gate_sigmoid_mul_add(h, w.squeeze(0), s, f)
            gated = qwen2_moe.fused_gate_sigmoid_mul(h, w.squeeze(0), s)
            errs[f"add-{dt}-{t}"] = float((f.double() - ref).abs().max())
            g64 = torch.sigmoid(h.double() @ w.double().reshape(-1))[:, None] * s.double()
            errs[f"mul-{dt}-{t}"] = float((gated.double() - g64).abs().max())
            out.setdefault("dtypes", []).append([str(f.dtype), str(gated.dtype)])
    out["errs"] = errs
    print(json.dumps(out))
"""


@pytest.mark.parametrize("layers", ["0", "1"])
def test_qwen2_moe_gate_runs_in_torch_on_the_cpu(layers: str) -> None:
    """What SGLang 0.5.23 does on a CPU without AMX (triton's driver lookup fails) and what
    the hook computes instead, with and without layer routing."""
    out, _ = _run(_GATE_SCRIPT, SGLANG_RVV_LAYERS=layers)
    assert "0 active drivers" in out["without_plugin"], out["without_plugin"]
    for name, err in out["errs"].items():
        bound = 1e-5 if "float32" in name else 0.05  # fp32 math, rounded once to the dtype
        assert err <= bound, f"{name}: {err}"
    for f_dtype, gated_dtype in out["dtypes"]:
        assert f_dtype == gated_dtype


def test_a_missing_op_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"torch.ops.sgl_kernel.no_such_moe_op is not defined"):
        moe._op("no_such_moe_op")


_ROUTING_SCRIPT = """
    import json, torch
    from sglang.srt.layers.moe import topk as T
    torch.manual_seed(0)
    native = T.fused_topk_native
    def same(a, b):
        (wa, ia), (wb, ib) = a, b
        dtypes = str(ia.dtype), str(wa.dtype)
        oa, ob = ia.long().sort(dim=-1), ib.long().sort(dim=-1)
        ids = bool((oa.values == ob.values).all())
        wa, wb = wa.double().gather(1, oa.indices), wb.double().gather(1, ob.indices)
        return ids, float((wa - wb).abs().max()), *dtypes
    cases = []
    for t, e, k in ((1, 8, 2), (5, 16, 2), (40, 60, 4), (3, 8, 8)):
        h = torch.randn(t, 32)
        g = torch.randn(t, e)
        bias = torch.randn(e) * 0.1
        for fn in ("softmax", "sigmoid"):
            for renorm in (False, True):
                for b in (None, bias):
                    cases.append((f"{fn}-t{t}-e{e}-k{k}-r{int(renorm)}-b{int(b is not None)}",
                                  (h, g, k, renorm, b, fn)))
    reference = {name: native(*a) for name, a in cases}
    # grouped top-k: float64 references of SGLang's grouped_topk_gpu / biased_grouped_topk_impl
    def grouped_ref(g, k, renorm, groups, topk_group, bias=None):
        g = g.double()
        scores = torch.sigmoid(g) if bias is not None else g.softmax(-1)
        choice = scores + bias.double() if bias is not None else scores
        t, e = g.shape
        per = choice.view(t, groups, -1)
        gs = per.topk(2, dim=-1)[0].sum(-1) if bias is not None else per.max(-1).values
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(topk_group, dim=-1)[1], 1)
        mask = keep.unsqueeze(-1).expand(t, groups, e // groups).reshape(t, e).bool()
        ids = choice.masked_fill(~mask, float("-inf")).topk(k, dim=-1)[1]
        w = scores.gather(1, ids)
        if renorm:
            w = w / w.sum(-1, keepdim=True)
        return w, ids
    grouped = []
    for t in (1, 6):
        g = torch.randn(t, 64)
        bias = torch.randn(64) * 0.1
        for renorm in (False, True):
            grouped.append((f"grouped-t{t}-r{int(renorm)}", g, renorm, None))
            grouped.append((f"biased-t{t}-r{int(renorm)}", g, renorm, bias))
    h_sp, g_sp = torch.randn(3, 32), torch.randn(3, 8)
    softplus = native(h_sp, g_sp, 2, True, None, "sqrtsoftplus")
    # (the plugin's hooks also rebind this script's module-level name ``native``)
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_rvv import layers
    res = {}
    for name, a in cases:
        res[name] = same(T.fused_topk_native(*a), reference[name])
    for name, g, renorm, bias in grouped:
        h = torch.randn(g.shape[0], 32)
        if bias is None:
            got = T.grouped_topk(h, g, 4, renorm, num_expert_group=8, topk_group=3)
        else:
            got = T.biased_grouped_topk(h, g, bias, 4, renorm, num_expert_group=8, topk_group=3)
        res[name] = same(got, grouped_ref(g, 4, renorm, 8, 3, bias))
    # a scoring function the ops do not have: SGLang's torch code, counted as a fallback
    got = T.fused_topk_native(h_sp, g_sp, 2, True, None, "sqrtsoftplus")
    res["sqrtsoftplus"] = same(got, softplus)
    print(json.dumps({"res": res, "calls": dict(layers.CALLS), "n": len(cases)}))
"""


def test_expert_selection_routes_to_the_routing_ops() -> None:
    out, err = _run(_ROUTING_SCRIPT, SGLANG_RVV_LAYERS="1")
    calls = out["calls"]
    for name, (ids_same, werr, id_dtype, w_dtype) in out["res"].items():
        assert ids_same, f"{name}: other experts chosen"
        assert werr <= 1e-5, f"{name}: weights differ by {werr}"
        if name != "sqrtsoftplus":  # the AMX branch's outputs: int32 ids, fp32 weights
            assert (id_dtype, w_dtype) == ("torch.int32", "torch.float32"), name
    assert calls.get("topk_softmax_cpu") == out["n"] // 2, calls
    assert calls.get("topk_sigmoid_cpu") == out["n"] // 2, calls
    assert calls.get("grouped_topk_cpu") == 4 and calls.get("biased_grouped_topk_cpu") == 4, calls
    assert calls.get("fallback expert selection") == 1, calls
    assert "scoring function 'sqrtsoftplus'" in err


_EXPERTS_SCRIPT = """
    import copy, json, torch
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    torch.manual_seed(0)
    def make(dt, e, h, i, activation="silu"):
        m = UnquantizedFusedMoEMethod()
        layer = torch.nn.Module()
        cfg = MoeRunnerConfig(activation=activation)
        layer.moe_runner_config, layer.num_experts = cfg, e
        m.create_weights(layer, num_experts=e, hidden_size=h, intermediate_size_per_partition=i,
                         params_dtype=dt, weight_loader=None)
        layer.w13_weight.data.copy_(torch.randn(e, 2 * i, h) * h ** -0.5)
        layer.w2_weight.data.copy_(torch.randn(e, h, i) * i ** -0.5)
        m.moe_runner_config = cfg
        return m, layer
    def route(t, e, k):
        logits = torch.randn(t, e)
        w, ids = torch.topk(logits.softmax(-1), k)
        return w, ids.to(torch.int32), logits
    def ref64(layer, x, w, ids):
        w13, w2 = layer.w13_weight.double(), layer.w2_weight.double()
        out = torch.zeros(x.shape, dtype=torch.float64)
        for t in range(x.shape[0]):
            for j in range(ids.shape[1]):
                g, u = (w13[ids[t, j]] @ x[t].double()).chunk(2)
                out[t] += w[t, j].double() * (w2[ids[t, j]] @ (torch.nn.functional.silu(g) * u))
        return out
    cases = []
    for dt in (torch.float32, torch.bfloat16):
        for e, h, i, k in ((8, 64, 44, 2), (16, 48, 20, 4), (1, 24, 12, 1)):
            m, layer = make(dt, e, h, i)
            plain = copy.deepcopy(layer)
            for t in (1, 5, 40):
                x = torch.randn(t, h, dtype=dt)
                w, ids, logits = route(t, e, k)
                if t == 40 and e == 8:  # expert 3 chosen by every token, 0-2 and 6-7 by none
                    ids[:, 0] = 3
                    ids[:, 1] = 4 + torch.arange(t, dtype=torch.int32) % 2
                cases.append((f"{dt}-e{e}-h{h}-i{i}-k{k}-t{t}", m, layer, plain, x, w, ids, logits))
    # SGLang's own torch code first (no plugin yet), then the same layers after loading
    def run(m, layer, x, w, ids, logits):
        d = StandardDispatchOutput(hidden_states=x, hidden_states_scale=None,
                                   topk_output=StandardTopKOutput(w, ids, logits))
        return m.apply(layer, d).hidden_states
    native = {c[0]: run(c[1], c[3], *c[4:]) for c in cases}
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_rvv import layers
    packed = set()
    res = {}
    for name, m, layer, plain, x, w, ids, logits in cases:
        if id(layer) not in packed:
            m._forward_method = None  # SGLang caches the resolved method per instance
            m.process_weights_after_loading(layer)
            packed.add(id(layer))
        got = run(m, layer, x, w, ids, logits)
        ref = ref64(plain, x, w, ids)
        scale = float(ref.abs().max())
        res[name] = [float((got.double() - ref).abs().max()) / scale,
                     float((native[name].double() - ref).abs().max()) / scale,
                     str(got.dtype), list(got.shape)]
    # an activation fused_experts_cpu does not take: SGLang's torch code, counted
    m, layer = make(torch.float32, 8, 32, 16, activation="gelu")
    plain = copy.deepcopy(layer)
    m.process_weights_after_loading(layer)
    x = torch.randn(3, 32)
    w, ids, logits = route(3, 8, 2)
    res["gelu"] = [float((run(m, layer, x, w, ids, logits) - run(m, plain, x, w, ids, logits))
                         .abs().max()), 0.0, "", []]
    print(json.dumps({"res": res, "calls": dict(layers.CALLS), "layers": len(packed),
                      "cases": len(cases)}))
"""


def test_unquantised_moe_runs_fused_experts_on_weights_packed_once() -> None:
    out, err = _run(_EXPERTS_SCRIPT, SGLANG_RVV_LAYERS="1")
    calls = out["calls"]
    for name, (ours, sglang, dtype, shape) in out["res"].items():
        if name == "gelu":
            assert ours == 0.0, "the gelu layer did not run SGLang's own code"
            continue
        # relative to the output's magnitude: fp32 rounding, or bf16 inputs / outputs
        bound = 1e-5 if "float32" in name else 2e-2
        assert ours <= bound, f"{name}: fused_experts_cpu off the fp64 reference by {ours}"
        print(f"{name}: ours {ours:.2e}, SGLang's torch code {sglang:.2e}")
        assert dtype == name.split("-")[0] and shape[0] == int(name.rsplit("t", 1)[1])
    assert calls.get(moe.PACK_COUNT) == 2 * out["layers"], calls
    assert calls.get("fused_experts_cpu") == out["cases"], calls
    assert calls.get("fallback fused experts") == 1, calls
    assert "activation 'gelu'" in err


def test_moe_hooks_are_listed_only_for_ops_rvv_ops_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moe, "missing_ops", lambda: list(moe.MOE_OPS))
    assert moe.routed_hooks() == []
    monkeypatch.setattr(moe, "missing_ops", lambda: ["grouped_topk_cpu"])

    def names() -> list[str]:
        """Each hook's target as function (routing) or Class.method."""
        parts = [t.split(".") for t, _ in moe.routed_hooks()]
        return [p[-1] if p[-2] == "topk" else f"{p[-2]}.{p[-1]}" for p in parts]

    base = [
        "fused_topk_native",
        "biased_grouped_topk",
        "UnquantizedFusedMoEMethod.process_weights_after_loading",
        "UnquantizedFusedMoEMethod.forward_native",
        "W8A8Int8MoEMethod.process_weights_after_loading",
        "W8A8Int8MoEMethod.apply",
    ]
    quantised = [
        f"{cls}.{meth}"
        for cls in ("Fp8MoEMethod", "AWQIntelAMXMoEKernel", "GPTQIntelAMXMoEKernel")
        for meth in ("process_weights_after_loading", "apply")
    ]
    assert moe.quant_methods() == (0, 1, 2, 3)  # the installed rvv-ops runs all four
    assert names() == base + quantised
    # an older rvv-ops, whose fused_experts_cpu runs only UNQUANT and INT8_W8A8
    monkeypatch.setattr(moe, "quant_methods", lambda: (0, 1))
    assert names() == base
    assert torch.ops.sgl_kernel is not None


_QUANT_MOE_CHECK = """
            for t in (1, 5, 40):
                x = torch.randn(t, h, dtype=dt)
                logits = torch.randn(t, e)
                w, ids = torch.topk(logits.softmax(-1), k)
                d = StandardDispatchOutput(hidden_states=x, hidden_states_scale=None,
                    topk_output=StandardTopKOutput(w, ids.to(torch.int32), logits))
                got = m.apply(layer, d).hidden_states
                ref = torch.zeros(t, h, dtype=torch.float64)
                for a in range(t):
                    for j in range(k):
                        g, u = (w13[ids[a, j]] @ x[a].double()).chunk(2)
                        act = torch.nn.functional.silu(g) * u
                        ref[a] += w[a, j].double() * (w2[ids[a, j]] @ act)
                res[f"{dt}-e{e}-t{t}"] = [float((got.double() - ref).abs().max() / ref.abs().max()),
                                         str(got.dtype)]
    print(json.dumps({"res": res, "calls": dict(layers.CALLS)}))
"""
"""The tail of the quantised-experts scripts: with ``m``, ``layer`` (processed), the
dequantised fp64 weights ``w13`` / ``w2`` and the case's ``dt, e, h, k``, 1 / 5 / 40 tokens
through ``m.apply`` against fp64 with unquantised activations; prints the relative errors
and the layer stats."""


_W8A8_SCRIPT = (
    """
    import json, torch
    from sglang.srt.layers.quantization.w8a8_int8 import W8A8Int8Config, W8A8Int8MoEMethod
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_rvv import layers
    torch.manual_seed(0)
    def quant(w):  # per output channel, symmetric
        s = w.abs().amax(dim=-1, keepdim=True) / 127
        return torch.round(w / s).clamp(-127, 127).to(torch.int8), s.float()
    res = {}
    for dt in (torch.float32, torch.bfloat16):
        for e, h, i, k in ((8, 64, 44, 2), (16, 48, 20, 4)):
            m = W8A8Int8MoEMethod(W8A8Int8Config({}))
            layer = torch.nn.Module()
            cfg = MoeRunnerConfig(activation="silu")
            layer.moe_runner_config, layer.num_experts = cfg, e
            m.create_weights(layer, num_experts=e, hidden_size=h,
                             intermediate_size_per_partition=i, params_dtype=dt,
                             weight_loader=None)
            q13, s13 = quant(torch.randn(e, 2 * i, h) * h ** -0.5)
            q2, s2 = quant(torch.randn(e, h, i) * i ** -0.5)
            layer.w13_weight.data.copy_(q13); layer.w13_weight_scale.data.copy_(s13)
            layer.w2_weight.data.copy_(q2); layer.w2_weight_scale.data.copy_(s2)
            m.moe_runner_config = cfg
            m.process_weights_after_loading(layer)
            w13, w2 = q13.double() * s13.double(), q2.double() * s2.double()
"""
    + _QUANT_MOE_CHECK
)


def test_w8a8_moe_runs_fused_experts_int8() -> None:
    """W8A8 int8 experts (SGLang's CPU path without AMX is a triton kernel) through
    ``fused_experts_cpu`` with ``INT8_W8A8``, against the dequantised weights in fp64 with
    unquantised activations: the op quantises each token's activations to int8 (step
    amax / 127) before both GEMMs, a relative error of about 1% at most here."""
    out, _ = _run(_W8A8_SCRIPT, SGLANG_RVV_LAYERS="1")
    for name, (err, dtype) in out["res"].items():
        assert err <= 3e-2, f"{name}: {err}"
        assert dtype == name.split("-")[0]
    calls = out["calls"]
    assert calls.get(moe.PACK_COUNT) == 8 and calls.get("fused_experts_cpu") == 12, calls


_FP8_SCRIPT = (
    """
    import json, torch
    from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8MoEMethod
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang_rvv import layers
    torch.manual_seed(0)
    B = 16  # block_n = block_k
    def quant(w):  # per B x B block: scale = amax / 448
        e, n, k = w.shape
        blocks = w.reshape(e, n // B, B, k // B, B)
        s = blocks.abs().amax(dim=(2, 4)) / 448
        q = (blocks / s[:, :, None, :, None]).reshape(e, n, k).to(torch.float8_e4m3fn)
        full = s.repeat_interleave(B, 1).repeat_interleave(B, 2)
        return q, s.float(), q.double() * full.double()
    res = {}
    for dt in (torch.float32, torch.bfloat16):
        for e, h, i, k in ((8, 64, 48, 2), (16, 48, 32, 4)):
            m = Fp8MoEMethod(Fp8Config(is_checkpoint_fp8_serialized=True,
                                       weight_block_size=[B, B]))
            layer = torch.nn.Module()
            cfg = MoeRunnerConfig(activation="silu")
            layer.moe_runner_config, layer.num_experts = cfg, e
            layer.moe_tp_size = 1
            m.create_weights(layer, num_experts=e, hidden_size=h,
                             intermediate_size_per_partition=i, params_dtype=dt,
                             weight_loader=None)
            q13, s13, w13 = quant(torch.randn(e, 2 * i, h) * h ** -0.5)
            q2, s2, w2 = quant(torch.randn(e, h, i) * i ** -0.5)
            layer.w13_weight.data.copy_(q13); layer.w13_weight_scale_inv.data.copy_(s13)
            layer.w2_weight.data.copy_(q2); layer.w2_weight_scale_inv.data.copy_(s2)
            m.moe_runner_config = cfg
            m.process_weights_after_loading(layer)
"""
    + _QUANT_MOE_CHECK
)


def test_fp8_moe_runs_fused_experts_w8a16() -> None:
    """Block-scaled FP8 experts (SGLang's CPU branch asserts AMX) through ``fused_experts_cpu``
    with ``FP8_W8A16``: activations are not quantised, so the result is the dequantised
    weights' in fp32 arithmetic (one rounding to bf16 for bf16 activations)."""
    out, _ = _run(_FP8_SCRIPT, SGLANG_RVV_LAYERS="1")
    for name, (err, dtype) in out["res"].items():
        assert err <= (1e-5 if name.startswith("torch.float32") else 1e-2), f"{name}: {err}"
        assert dtype == name.split("-")[0]
    calls = out["calls"]
    assert calls.get(moe.PACK_COUNT) == 8 and calls.get("fused_experts_cpu") == 12, calls
