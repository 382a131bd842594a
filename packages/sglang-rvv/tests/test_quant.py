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
    assert "--quant nf4: expected one of w8a8, awq, gptq, fp8" in capsys.readouterr().err


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
