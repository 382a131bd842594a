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
    assert "--quant nf4: expected one of w8a8" in capsys.readouterr().err
