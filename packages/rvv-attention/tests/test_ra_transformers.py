"""transformers integration: tiny Llama and Qwen2 (random weights, fixed seeds, no
downloads); greedy generate() with attn_implementation="rvv" equals "sdpa"."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from rvv_attention import _kernel

try:
    import transformers
except ImportError as e:  # pragma: no cover - depends on the environment
    if platform.machine() != "riscv64":
        raise  # natively, attention-tests installs transformers: missing is an error
    pytest.skip(
        f"transformers is not installed in this emulated Python ({e}); tools/ops_riscv.py "
        "installs it unless --no-transformers was given",
        allow_module_level=True,
    )

from rvv_attention.integrations.transformers import register

register()

SIZES: dict[str, Any] = {
    "vocab_size": 96,
    "hidden_size": 84,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 7,  # GQA 7:1, not a power of two
    "num_key_value_heads": 1,
    "head_dim": 12,
    "max_position_embeddings": 128,
}


def _model(name: str) -> Any:
    torch.manual_seed(0)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SIZES)).eval()
    cfg = transformers.Qwen2Config(
        **{**SIZES, "num_attention_heads": 6, "num_key_value_heads": 2, "hidden_size": 72}
    )
    return transformers.Qwen2ForCausalLM(cfg).eval()


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Counts calls that reach the rvv-ops kernels."""
    calls: list[str] = []
    real = _kernel.extend

    def spy(*args: Any, **kwargs: Any) -> None:
        calls.append("extend")
        real(*args, **kwargs)

    monkeypatch.setattr(_kernel, "extend", spy)
    yield calls


def _generate(model: Any, impl: str, ids: torch.Tensor, mask: torch.Tensor, n: int) -> torch.Tensor:
    model.set_attn_implementation(impl)
    with torch.no_grad():
        out: torch.Tensor = model.generate(
            ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=0
        )
    return out


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_greedy_generate_matches_sdpa(name: str, kernel_calls: list[str]) -> None:
    model = _model(name)
    ids = torch.randint(1, SIZES["vocab_size"], (1, 11), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    want = _generate(model, "sdpa", ids, mask, 12)
    got = _generate(model, "rvv", ids, mask, 12)
    assert torch.equal(got, want), f"{got.tolist()} != {want.tolist()}"
    if _kernel.load()[0] is not None:
        # prefill + 11 decode steps per layer went through the kernels
        assert len(kernel_calls) >= 12 * SIZES["num_hidden_layers"]


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_padded_batch_matches_sdpa(name: str) -> None:
    model = _model(name)
    ids = torch.randint(1, SIZES["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: transformers passes a mask, the torch-native path runs
    assert torch.equal(
        _generate(model, "rvv", ids, mask, 6), _generate(model, "sdpa", ids, mask, 6)
    )


def test_logits_close_to_sdpa() -> None:
    model = _model("llama")
    ids = torch.randint(1, SIZES["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(5))
    outs = {}
    for impl in ("sdpa", "rvv"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            outs[impl] = model(ids).logits
    torch.testing.assert_close(outs["rvv"], outs["sdpa"], atol=2e-5, rtol=1e-4)
