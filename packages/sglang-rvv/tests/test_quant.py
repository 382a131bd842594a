"""The round-to-nearest quantisers of the quantised demo checkpoints (sglang_rvv.quant)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sglang_rvv import demo, quant


def test_w8a8_is_per_channel_symmetric_and_round_to_nearest() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(37, 53, generator=g) * torch.linspace(0.01, 3.0, 37)[:, None]
    w[5] = 0.0  # an all-zero channel
    q, s = quant.quantize_w8a8(w)
    assert q.dtype == torch.int8 and s.shape == (37, 1) and s.dtype == torch.float32
    assert int(q.abs().max()) == 127 and int(q.min()) >= -127
    assert bool((q[5] == 0).all()) and float(s[5]) == 1.0
    amax = w.abs().amax(dim=1, keepdim=True)
    nonzero = amax.squeeze(1) > 0
    assert torch.equal(s[nonzero], (amax / 127)[nonzero])
    # round to nearest: every element within half a step of its dequantised value
    err = (w - quant.dequantize_w8a8(q, s)).abs()
    assert bool((err <= s / 2 * (1 + 1e-6)).all())
    # and a different rounding of any element would be no closer
    assert bool(((w - (q.float() + 1) * s).abs() >= err - 1e-7).all())


def test_w8a8_refuses_what_is_not_a_matrix() -> None:
    with pytest.raises(ValueError, match=r"w has shape \(4,\); expected \[N, K\]"):
        quant.quantize_w8a8(torch.ones(4))


def test_only_decoder_linear_weights_are_quantised() -> None:
    names = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.1.input_layernorm.weight",
        "lm_head.weight",
    ]
    assert quant.quantised_names(names) == [names[1], names[3]]


def test_moe_experts_are_quantised_but_not_their_routers() -> None:
    names = [
        "model.layers.0.mlp.gate.weight",  # the router
        "model.layers.0.mlp.experts.0.gate_proj.weight",
        "model.layers.0.mlp.experts.15.down_proj.weight",
        "model.layers.1.mlp.shared_expert.up_proj.weight",
        "model.layers.1.mlp.shared_expert_gate.weight",
    ]
    assert quant.quantised_names(names) == names[1:4]
    with pytest.raises(ValueError, match=r"intermediate size \(44\) is not a multiple"):
        demo.ensure_quantized("qwen3-moe", "awq")
    with pytest.raises(ValueError, match=r"not written as compressed-tensors WNA16"):
        demo.ensure_quantized("qwen2-moe", "wna16")
    assert demo.moe_quant_refusal("qwen2-moe", "fp8") is None
    assert demo.moe_quant_refusal("qwen2", "wna16") is None


def test_write_refuses_unknown_formats_and_missing_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"fmt='int3': expected one of"):
        quant.write(tmp_path, tmp_path / "out", "int3")
    with pytest.raises(FileNotFoundError, match=r"no model\.safetensors"):
        quant.write(tmp_path, tmp_path / "out", "w8a8")


def test_demo_cli_checks_its_quant_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo.main(["--dequantized"])
    assert "--dequantized needs --quant" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        demo.main(["--quant", "nf4"])
    assert "--quant nf4: expected one of w8a8, awq, gptq, fp8, wna16" in capsys.readouterr().err


def test_int4_is_asymmetric_round_to_nearest_per_group() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(24, 48, generator=g)
    w[3, :16] = torch.rand(16, generator=g) + 0.5  # an all-positive group: zero 0
    q, zeros, scales = quant.quantize_int4(w, 16)
    assert q.shape == (24, 48) and zeros.shape == scales.shape == (3, 24)
    assert int(q.max()) <= 15 and scales.dtype == torch.float16
    assert int(zeros[0, 3]) == 0
    deq = quant.dequantize_int4(q, zeros, scales)
    step = scales.float().T.repeat_interleave(16, dim=1)
    assert bool(((w - deq).abs() <= step / 2 * (1 + 1e-3) + 1e-6).all())
    with pytest.raises(ValueError, match="K a multiple of group=16"):
        quant.quantize_int4(torch.ones(4, 20), 16)


def _nibble(words: torch.Tensor, shift: int) -> torch.Tensor:
    return (words.to(torch.int64) >> shift) & 0xF


def test_awq_and_gptq_layouts_hold_every_nibble_where_the_format_puts_it() -> None:
    g = torch.Generator().manual_seed(2)
    q = torch.randint(0, 16, (16, 32), generator=g, dtype=torch.uint8)
    zeros = torch.randint(1, 16, (2, 16), generator=g, dtype=torch.uint8)
    qw, qz = quant.pack_awq(q, zeros)
    assert qw.shape == (32, 2) and qz.shape == (2, 2) and qw.dtype == torch.int32
    order = (0, 4, 1, 5, 2, 6, 3, 7)
    for n in range(16):
        for k in range(32):
            assert int(_nibble(qw[k, n // 8], 4 * order[n % 8])) == int(q[n, k])
        assert int(_nibble(qz[1, n // 8], 4 * order[n % 8])) == int(zeros[1, n])
    qw, qz = quant.pack_gptq(q, zeros)
    assert qw.shape == (4, 16) and qz.shape == (2, 2)
    for n in range(16):
        for k in range(32):
            assert int(_nibble(qw[k // 8, n], 4 * (k % 8))) == int(q[n, k])
        assert int(_nibble(qz[0, n // 8], 4 * (n % 8))) == int(zeros[0, n]) - 1


@pytest.mark.parametrize("fmt", ["awq", "gptq"])
def test_int4_checkpoints_and_their_twins(fmt: str) -> None:
    import json

    from safetensors.torch import load_file

    path = demo.ensure_quantized("qwen2", fmt)
    config = json.loads((path / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == fmt and config["bits"] == 4
    assert config["group_size"] == quant.INT4_GROUP
    t = load_file(str(path / "model.safetensors"))
    base = "model.layers.1.mlp.down_proj"  # K = 176: 11 groups of 16
    assert t[f"{base}.scales"].shape == (11, 64) and t[f"{base}.scales"].dtype == torch.float16
    assert t[f"{base}.qzeros"].shape == (11, 8)
    assert t[f"{base}.qweight"].shape == ((176, 8) if fmt == "awq" else (22, 64))
    twin = load_file(
        str(demo.ensure_quantized("qwen2", fmt, dequantized=True) / "model.safetensors")
    )
    w = twin[f"{base}.weight"]
    assert w.shape == (64, 176) and w.dtype == torch.float32
    # the twin is the dequantised checkpoint: values on each group's grid
    s = t[f"{base}.scales"].float().T.repeat_interleave(16, dim=1)
    steps = w / s
    assert bool(((steps - steps.round()).abs() < 1e-3).all())


def test_fp8_is_block_scaled_e4m3_round_to_nearest() -> None:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(40, 70, generator=g) * 3
    w[16:32, 32:64] = 0.0  # an all-zero block: scale 1
    q, s = quant.quantize_fp8(w, (16, 32))
    assert q.dtype == torch.float8_e4m3fn and s.shape == (3, 3)
    assert float(s[1, 1]) == 1.0
    assert float(q.float().abs().max()) == 448.0  # the largest block element maps to 448
    deq = quant.dequantize_fp8(q, s, (16, 32))
    # e4m3 keeps 3 mantissa bits: round to nearest is within 2^-4 relative (or the
    # subnormal spacing 2^-9 of the block scale)
    full = s.repeat_interleave(16, 0)[:40].repeat_interleave(32, 1)[:, :70]
    assert bool(((w - deq).abs() <= w.abs() * 2**-4 + full * 2**-10).all())


def test_int4_symmetric_is_compressed_tensors_range_round_to_nearest() -> None:
    g = torch.Generator().manual_seed(4)
    w = torch.randn(24, 48, generator=g)
    w[3, 16:32] = 0.0  # an all-zero group: scale 1, q = 0
    q, zeros, scales = quant.quantize_int4_symmetric(w, 16)
    assert q.dtype == torch.uint8 and int(q.max()) <= 15
    assert bool((zeros == 8).all()) and zeros.shape == (3, 24) and scales.shape == (3, 24)
    assert scales.dtype == torch.float16 and float(scales[1, 3]) == 1.0
    s = scales.float().T.repeat_interleave(16, dim=1)
    amax = w.abs().reshape(24, 3, 16).amax(dim=2).T
    assert torch.equal(scales, torch.where(amax > 0, amax / 7.5, 1.0).to(torch.float16))
    # round to nearest in [-8, 7]: within half a step except where 7 clips (at most 1 step)
    err = (w - quant.dequantize_int4(q, zeros, scales)).abs()
    clipped = (q == 15) & (w / s > 7.5)
    assert bool((err[~clipped] <= s[~clipped] / 2 * (1 + 1e-3)).all())
    assert bool((err[clipped] <= s[clipped] * (1 + 1e-3)).all())
    with pytest.raises(ValueError, match=r"K a multiple of group=16"):
        quant.quantize_int4_symmetric(torch.ones(4, 20), 16)


def test_wna16_packing_is_compressed_tensors_pack_quantized() -> None:
    """pack_wna16 against compressed-tensors' own packer (pack_to_int32 of the signed values,
    zero points packed along N)."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    g = torch.Generator().manual_seed(5)
    q = torch.randint(0, 16, (16, 40), generator=g, dtype=torch.uint8)
    zeros = torch.randint(0, 16, (5, 16), generator=g, dtype=torch.uint8)
    packed, zp = quant.pack_wna16(q, zeros)
    assert packed.dtype == torch.int32 and packed.shape == (16, 5)
    assert zp is not None and zp.dtype == torch.int32 and zp.shape == (2, 5)
    assert torch.equal(packed, pack_to_int32((q.to(torch.int16) - 8).to(torch.int8), 4))
    signed_zeros = (zeros.T.to(torch.int16) - 8).to(torch.int8)
    assert torch.equal(zp, pack_to_int32(signed_zeros, 4, packed_dim=0))
    assert quant.pack_wna16(q)[1] is None
    with pytest.raises(ValueError, match=r"a multiple of 8"):
        quant.pack_wna16(q[:, :36])


def test_wna16_checkpoint_and_its_twin() -> None:
    """The written checkpoint is what compressed-tensors reads: its config parses as a
    pack-quantized W4A16 group scheme, and its own decompression of a layer gives the
    dequantised twin's weight exactly."""
    import json

    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors.torch import load_file

    path = demo.ensure_quantized("qwen2", "wna16")
    config = QuantizationConfig.model_validate(
        json.loads((path / "config.json").read_text())["quantization_config"]
    )
    assert config.format == "pack-quantized" and config.ignore == ["lm_head"]
    scheme = config.config_groups["group_0"]
    assert scheme.input_activations is None and scheme.weights is not None
    weights = scheme.weights
    assert (weights.num_bits, weights.type, weights.strategy) == (4, "int", "group")
    assert weights.symmetric and weights.group_size == quant.INT4_GROUP
    t = load_file(str(path / "model.safetensors"))
    twin = load_file(
        str(demo.ensure_quantized("qwen2", "wna16", dequantized=True) / "model.safetensors")
    )
    assert str(t["lm_head.weight"].dtype) == "torch.float32"  # not quantised
    for base, shape in (
        ("model.layers.1.mlp.down_proj", (64, 176)),
        ("model.layers.0.self_attn.o_proj", (64, 64)),
    ):
        state = {k.rsplit(".", 1)[1]: v for k, v in t.items() if k.startswith(base + ".")}
        assert sorted(state) == ["weight_packed", "weight_scale", "weight_shape"]
        assert state["weight_packed"].shape == (shape[0], shape[1] // 8)
        assert state["weight_scale"].shape == (shape[0], shape[1] // quant.INT4_GROUP)
        assert state["weight_shape"].tolist() == list(shape)
        state["weight_scale"] = state["weight_scale"].float()  # fp32 output, as the twin
        w = PackedQuantizationCompressor.decompress(state, scheme)["weight"]
        assert torch.equal(w, twin[f"{base}.weight"])
