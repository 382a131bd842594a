"""The model matrix: tiny random checkpoints of the architectures users run on small boards.

Each entry builds, with transformers and no download, a two-layer model with the family's
real layer structure (head sizes, GQA ratios that are not powers of two, tied embeddings,
sliding windows, soft-caps, QK norms, MLA ranks, RoPE scaling as the family uses it), the
demo tokenizer, a fixed seed and a short training run on the demo corpus so that greedy
decoding is not decided by near-ties. ``test_model_matrix.py`` serves each one with
``--attention-backend rvv`` and layer routing and with ``torch_native`` and compares greedy
tokens; ``nox -s model-coverage`` renders the results into ``docs/models.md``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_rvv import demo

FORMAT_VERSION = 1
SLIDING_WINDOW = 24
"""Tokens in the sliding-window layers' window: shorter than the long prompts (and than the
chunked-prefill size the test serves with), so both paths are crossed."""


@dataclass(frozen=True)
class Arch:
    name: str
    """The matrix's name for the family (a directory name)."""
    family: str
    """What users run (the checkpoints this tiny config imitates)."""
    config: Callable[[dict[str, Any]], Any]
    """Builds the transformers config from the common arguments."""
    features: str
    """The structural features the config exercises (for the report)."""
    server_args: tuple[str, ...] = ()
    """SGLang flags both servers need for this family on a CPU."""
    revision: int = 1
    """Bumped when the entry's config changes: its cached checkpoint is then rebuilt."""


def _common(vocab: int, bos: int, eos: int) -> dict[str, Any]:
    return dict(
        vocab_size=vocab,
        hidden_size=96,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,  # GQA ratio 3
        head_dim=16,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=bos,
        initializer_range=0.05,
    )


def _llama32(c: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 256,
    }
    return LlamaConfig(**{**c, "tie_word_embeddings": True, "rope_scaling": rope})


def _smollm2(c: dict[str, Any]) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(**{**c, "num_attention_heads": 3, "num_key_value_heads": 1,
                          "head_dim": 32, "tie_word_embeddings": True})  # fmt: skip


def _qwen25(c: dict[str, Any]) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(**{**c, "tie_word_embeddings": True})


def _qwen3(c: dict[str, Any]) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(**{**c, "tie_word_embeddings": True})


def _qwen35(c: dict[str, Any]) -> Any:
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        **{**c, "num_hidden_layers": 4},
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        partial_rotary_factor=0.25,
        full_attention_interval=4,  # Qwen3.5's published configs carry it; SGLang reads it
    )


def _gemma2(c: dict[str, Any]) -> Any:
    from transformers import Gemma2Config

    return Gemma2Config(
        **{**c, "tie_word_embeddings": True},
        sliding_window=SLIDING_WINDOW,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=16,
        hidden_activation="gelu_pytorch_tanh",
        hidden_act="gelu_pytorch_tanh",  # Gemma 2's published configs carry both names
    )


def _gemma3(c: dict[str, Any]) -> Any:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        **{**c, "tie_word_embeddings": True},
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=16,
        rope_local_base_freq=10000.0,
        hidden_activation="gelu_pytorch_tanh",
    )


def _phi3(c: dict[str, Any]) -> Any:
    from transformers import Phi3Config

    return Phi3Config(**{**c, "partial_rotary_factor": 0.75, "tie_word_embeddings": False})


def _mistral(c: dict[str, Any]) -> Any:
    from transformers import MistralConfig

    return MistralConfig(**c, sliding_window=SLIDING_WINDOW)


def _olmo2(c: dict[str, Any]) -> Any:
    from transformers import Olmo2Config

    return Olmo2Config(**c)


def _granite(c: dict[str, Any]) -> Any:
    from transformers import GraniteConfig

    return GraniteConfig(
        **{**c, "tie_word_embeddings": True},
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        attention_multiplier=0.0625,
        logits_scaling=8.0,
    )


def _glm4(c: dict[str, Any]) -> Any:
    from transformers import Glm4Config

    return Glm4Config(**c, partial_rotary_factor=0.5, attention_bias=True)


def _deepseek_v2_lite(c: dict[str, Any]) -> Any:
    from transformers import DeepseekV2Config

    return DeepseekV2Config(
        **{**c, "num_key_value_heads": 6, "intermediate_size": 160},
        q_lora_rank=None,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=16,
        v_head_dim=16,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        topk_method="greedy",
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
        # keys DeepSeek-V2-Lite's published config carries (SGLang reads moe_layer_freq)
        moe_layer_freq=1,
        scoring_func="softmax",
        aux_loss_alpha=0.001,
        seq_aux=True,
        ep_size=1,
        # YaRN as DeepSeek-V2-Lite's config has it (SGLang's CPU MLA RoPE requires a scaling)
        rope_scaling={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
        },
    )


MATRIX: tuple[Arch, ...] = (
    Arch("llama3.2", "Llama 3.2 1B/3B", _llama32, "GQA 6:2, tied embeddings, llama3 RoPE scaling"),
    Arch("smollm2", "SmolLM2", _smollm2, "Llama layers, MQA 3:1, head 32, tied embeddings"),
    Arch("qwen2.5", "Qwen2.5 0.5-3B", _qwen25, "QKV bias, GQA 6:2, tied embeddings"),
    Arch("qwen3", "Qwen3 0.6-4B", _qwen3, "QK RMSNorm, GQA 6:2, tied embeddings"),
    # SGLang's default Mamba radix-cache strategy (extra_buffer) needs state snapshots that
    # its CPU platform does not support; no_buffer needs the overlap scheduler off.
    Arch("qwen3.5", "Qwen3.5 (text)", _qwen35, "Gated DeltaNet + gated full attention, QK norm",
         ("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"),
         revision=2),
    Arch("gemma2", "Gemma 2 2B", _gemma2,
         "Gemma norms, sandwich norms, alternating sliding window, logit soft-caps", revision=2),
    Arch("gemma3", "Gemma 3 1B", _gemma3,
         "Gemma norms, QK norm, sliding window + global layers, local RoPE base"),
    Arch("phi3", "Phi-3.5 / Phi-4-mini", _phi3, "fused QKV and gate-up, partial rotary 0.75"),
    Arch("mistral", "Mistral 7B-style", _mistral, "sliding window on every layer"),
    Arch("olmo2", "OLMo 2 1B", _olmo2, "post-norms, QK RMSNorm over all heads"),
    Arch("granite", "Granite 3.x", _granite, "embedding, residual, attention, logit multipliers"),
    Arch("glm4", "GLM-4 9B-style", _glm4, "post-norms, partial rotary 0.5, QKV bias"),
    Arch("deepseek-v2-lite", "DeepSeek-V2-Lite", _deepseek_v2_lite,
         "MLA (kv_lora_rank 32, rope 16, YaRN), MoE 8 experts + shared, first layer dense",
         revision=3),
)  # fmt: skip
BY_NAME = {a.name: a for a in MATRIX}


def cache_dir(name: str) -> Path:
    return demo.default_dir("qwen2").parent / f"matrix-{name}-v{FORMAT_VERSION}"


def build(arch: Arch, out: Path, *, steps: int = 60, seed: int = 0) -> Path:
    """Writes the tiny checkpoint of ``arch`` to ``out``; returns ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    tok = demo._train_tokenizer(out)
    cfg = arch.config(_common(len(tok), tok.bos_token_id, tok.eos_token_id))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    ids = torch.tensor(tok(demo.corpus())["input_ids"], dtype=torch.long)
    loss = demo.train(model, ids, steps=steps, seq=48, seed=seed, label=f"matrix {arch.name}")
    model.config.dtype = torch.float32
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "rvv_sglang_matrix.json").write_text(
        json.dumps({"format_version": FORMAT_VERSION, "arch": arch.name,
                    "revision": arch.revision, "seed": seed, "steps": steps,
                    "final_loss": round(loss, 4)}, indent=2)
    )  # fmt: skip
    print(f"  matrix {arch.name}: built in {time.monotonic() - started:.0f} s, "
          f"loss {loss:.3f}", flush=True)  # fmt: skip
    return out


def ensure(name: str) -> Path:
    """The checkpoint of matrix entry ``name``, built first if missing or out of date."""
    arch = BY_NAME[name]
    target = cache_dir(name)
    stamp = target / "rvv_sglang_matrix.json"
    if stamp.is_file():
        try:
            meta = json.loads(stamp.read_text())
        except ValueError:
            meta = {}
        if (
            meta.get("format_version") == FORMAT_VERSION
            and meta.get("arch") == name
            and meta.get("revision", 1) == arch.revision
        ):
            return target
    return build(arch, target)


def prompts() -> list[str]:
    """8 prompts: short ones, shared prefixes, one past the sliding window and one crossing
    the chunked-prefill size (the test serves with ``--chunked-prefill-size 64``)."""
    lines = [ln for ln in demo.corpus().splitlines() if ln.strip()]
    shared = "The server answers each request with the next words of the text."
    return [
        "The vector unit reads",
        shared,
        shared + " Each request has a prompt. A prompt is",
        "Once upon a time there was a little robot who",
        "RISC-V is an open",
        " ".join(lines[2:5]),  # past the sliding window, inside one prefill chunk
        " ".join(lines[:9]),  # several prefill chunks
        " ".join(lines[4:14]),
    ]


def coverage_path() -> Path | None:
    value = os.environ.get("RVV_MODEL_COVERAGE")
    return Path(value) if value else None
