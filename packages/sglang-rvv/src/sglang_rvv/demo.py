"""The bundled demo models: a tiny Qwen2 and a tiny Llama, and two tiny mixture-of-experts
models (Qwen3-MoE without and Qwen2-MoE with a gated shared expert), made locally and
deterministically.

Nothing is downloaded. A byte-level BPE tokenizer is trained on a small built-in corpus, a
model with a few hundred thousand parameters is initialised with a fixed seed and trained for a
few hundred steps on the same corpus (so that greedy decoding produces recognisable text
rather than noise, and the top logit is rarely a near-tie), and both are saved in the Hugging
Face layout SGLang loads. ``python -m sglang_rvv.demo --out DIR [--arch ARCH]`` with ARCH one of
``qwen2``, ``llama`` (:data:`ARCHS`), ``qwen3-moe`` or ``qwen2-moe`` (:data:`MOE_ARCHS`).

The MoE models keep the dense ones' attention (hidden 64, 2 layers, 4 heads, 2 KV heads of 16)
and replace every MLP by experts:

- ``qwen3-moe`` (``Qwen3MoeForCausalLM``): 16 experts of intermediate size 44 (deliberately
  not a multiple of 16), top-2, renormalised (``norm_topk_prob``), no shared expert; Qwen3's
  q/k RMSNorm.
- ``qwen2-moe`` (``Qwen2MoeForCausalLM``): 8 experts of intermediate size 32, top-2, not
  renormalised, and a shared expert (intermediate 80) scaled by ``sigmoid`` of its own gate;
  q/k/v biases. Its sizes are multiples of 16 so that the int4 formats' groups and the fp8
  format's blocks (16) tile every expert weight, as SGLang's AWQ, GPTQ and FP8 MoE loaders
  require: it is the MoE model the ``awq``, ``gptq`` and ``fp8`` formats quantise.

They are trained like the dense ones, with transformers' load-balancing loss (so that the
tokens spread over the experts), and saved with one tensor per expert, as SGLang loads them.

``--quant FORMAT`` writes the same model quantised (:mod:`sglang_rvv.quant`: ``w8a8``, ``awq``,
``gptq``, ``fp8``, ``wna16``), and
``--dequantized`` with it that checkpoint's fp32 dequantised twin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ARCHS = ("qwen2", "llama")
"""The dense demo models (the default test matrix of tests/test_e2e.py)."""
MOE_ARCHS = ("qwen3-moe", "qwen2-moe")
"""The mixture-of-experts demo models (tests/test_e2e_moe.py)."""
ALL_ARCHS = ARCHS + MOE_ARCHS
FORMAT_VERSION = 1
"""Bumped whenever the recipe changes, so cached models are rebuilt."""
_ARCH_VERSION = {"qwen2-moe": 2}
"""Archs whose own recipe changed since (version 2 of qwen2-moe: experts and shared expert
sized in multiples of 16), so that only they are rebuilt."""


def format_version(arch: str) -> int:
    """The recipe version of ``arch``'s demo model (part of its cache directory's name)."""
    return _ARCH_VERSION.get(arch, FORMAT_VERSION)


_CORPUS = """\
The vector unit reads a whole row of the cache at once. A row is a list of numbers.
RISC-V is an open instruction set. Its vector extension lets one instruction work on many
numbers, and the same program runs on a machine with short vectors and on one with long ones.
The server answers each request with the next words of the text. Each request has a prompt.
A prompt is split into tokens, the tokens are turned into vectors, and the vectors pass
through the layers of the model one after another. Attention looks back at the earlier tokens
and decides which of them matter for the next one. The keys and values of the earlier tokens
are kept in a cache, so that they are computed once and read many times.
When two prompts start with the same words, the server keeps one copy of their shared prefix
in the radix cache and computes only what is new. Long prompts are cut into chunks and read
one chunk after another. Many requests are served at the same time in one batch.
The small board on the desk has eight cores and a vector unit of two hundred and fifty six
bits. It reads memory at about ten gigabytes per second, and that is what limits how fast it
can write the next word: every weight of the model is read once for each new token.
Once upon a time there was a little robot who liked to count. It counted the stars, the
trees, the birds and the bits. One day it found a long list of numbers and added them up,
eight at a time, then sixteen at a time, then all at once. The list was gone in a moment,
and the robot smiled, because a vector is a fine thing to have.
"""

_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus() -> str:
    """The training text (also used by tests to build prompts the model knows)."""
    return _CORPUS


def default_dir(arch: str = "qwen2") -> Path:
    """Where ``nox -s serve`` keeps the demo model: outside the clone, cached."""
    base = os.environ.get("RVV_SGLANG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rvv-sglang"
    )
    return Path(base) / "demo-models" / f"tiny-{arch}-v{format_version(arch)}"


def _train_tokenizer(out: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return fast


def _config(arch: str, vocab: int, bos: int, eos: int) -> Any:
    common: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=eos,
        torch_dtype="bfloat16",
    )
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    if arch == "qwen3-moe":
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(  # head_dim: hidden_size / heads = 16
            num_experts=16,
            num_experts_per_tok=2,
            moe_intermediate_size=44,
            norm_topk_prob=True,
            router_aux_loss_coef=0.01,
            **common,
        )
    if arch == "qwen2-moe":
        from transformers import Qwen2MoeConfig

        return Qwen2MoeConfig(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=80,
            norm_topk_prob=False,
            router_aux_loss_coef=0.01,
            **common,
        )
    from transformers import LlamaConfig

    return LlamaConfig(head_dim=16, **common)


def train(
    model: Any, ids: Any, *, steps: int, seq: int, seed: int, label: str, moe: bool = False
) -> float:
    """Trains ``model`` on random ``seq``-token windows of the token ids ``ids`` (batches of
    8, AdamW at 3e-3, windows drawn from a generator seeded with ``seed``), printing progress
    every 50 steps as ``label``; leaves it in eval mode and returns the last loss."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    loss = 0.0
    for step in range(steps):
        starts = torch.randint(0, ids.numel() - seq - 1, (8,), generator=gen)
        batch = torch.stack([ids[s : s + seq + 1] for s in starts.tolist()])
        # MoE: the loss includes the router's load-balancing term (router_aux_loss_coef)
        extra = {"output_router_logits": True} if moe else {}
        out = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone(), **extra).loss
        opt.zero_grad()
        out.backward()
        opt.step()
        loss = float(out.item())
        if step % 50 == 0 or step == steps - 1:
            print(f"  {label}: step {step + 1}/{steps} loss {loss:.3f}", flush=True)
    model.eval()
    return loss


def build(out: Path, arch: str = "qwen2", *, steps: int = 300, seed: int = 0) -> Path:
    """Creates the demo model in ``out`` (replaced if present); returns ``out``."""
    import torch
    from transformers import (
        LlamaForCausalLM,
        Qwen2ForCausalLM,
        Qwen2MoeForCausalLM,
        Qwen3MoeForCausalLM,
    )

    if arch not in ALL_ARCHS:
        raise ValueError(f"arch={arch!r}: expected one of {ALL_ARCHS}")
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(out)
    vocab = len(tokenizer)
    cfg = _config(arch, vocab, tokenizer.bos_token_id, tokenizer.eos_token_id)
    torch.manual_seed(seed)
    classes: dict[str, Any] = {
        "qwen2": Qwen2ForCausalLM,
        "llama": LlamaForCausalLM,
        "qwen3-moe": Qwen3MoeForCausalLM,
        "qwen2-moe": Qwen2MoeForCausalLM,
    }
    moe = arch in MOE_ARCHS
    model = classes[arch](cfg).to(torch.float32)

    ids = torch.tensor(tokenizer(_CORPUS)["input_ids"], dtype=torch.long)
    loss = train(model, ids, steps=steps, seq=64, seed=seed, label=f"demo {arch}", moe=moe)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "rvv_sglang_demo.json").write_text(
        json.dumps(
            {
                "format_version": format_version(arch),
                "arch": arch,
                "seed": seed,
                "steps": steps,
                "final_loss": round(loss, 4),
                "generated_by": "sglang_rvv.demo",
            },
            indent=2,
        )
    )
    print(f"  demo {arch}: written to {out} in {time.monotonic() - started:.0f} s", flush=True)
    return out


def ensure(arch: str = "qwen2", out: Path | None = None) -> Path:
    """The demo model's directory, building it first if it is missing or out of date."""
    target = out or default_dir(arch)
    stamp = target / "rvv_sglang_demo.json"
    if stamp.is_file():
        try:
            meta = json.loads(stamp.read_text())
        except ValueError:
            meta = {}
        if meta.get("format_version") == format_version(arch) and meta.get("arch") == arch:
            return target
    return build(target, arch)


def quant_dir(arch: str, fmt: str, *, dequantized: bool = False) -> Path:
    """Where the quantised demo model (or its dequantised twin) is cached."""
    base = default_dir(arch)
    return base.with_name(f"{base.name}-{fmt}{'-dequant-fp32' if dequantized else ''}")


MOE_QUANT: dict[str, tuple[str, ...]] = {
    "qwen3-moe": ("w8a8",),
    "qwen2-moe": ("w8a8", "awq", "gptq", "fp8"),
}
"""The formats each MoE demo model is quantised in (experts included)."""


def moe_quant_refusal(arch: str, fmt: str) -> str | None:
    """Why the MoE demo model ``arch`` is not written in format ``fmt``, or None (also None
    for the dense models)."""
    if arch not in MOE_ARCHS or fmt in MOE_QUANT[arch]:
        return None
    if fmt == "wna16":
        return (
            "the MoE demo models are not written as compressed-tensors WNA16 (SGLang's WNA16 "
            "MoE scheme runs GPU kernels only); use awq or gptq"
        )
    return (
        f"{arch}'s expert intermediate size (44) is not a multiple of the {fmt} format's "
        f"group / block (16), which SGLang's {fmt} MoE loader needs; use qwen2-moe"
    )


def ensure_quantized(
    arch: str = "qwen2", fmt: str = "w8a8", *, dequantized: bool = False, out: Path | None = None
) -> Path:
    """The demo model quantised in ``fmt`` (or its dequantised twin), written from the demo
    model (built first if needed) when missing or older than it."""
    from sglang_rvv import quant

    why = moe_quant_refusal(arch, fmt)
    if why:
        raise ValueError(f"arch={arch!r} with fmt={fmt!r}: {why}")
    src = ensure(arch)
    target = out or quant_dir(arch, fmt, dequantized=dequantized)
    stamp = target / "rvv_sglang_quant.json"
    want = {
        "source_format_version": format_version(arch),
        "arch": arch,
        "quant": fmt,
        "dequantized": dequantized,
        "quant_version": quant.VERSION,
    }
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == want:
                return target
        except ValueError:
            pass
    quant.write(src, target, fmt, dequantized=dequantized)
    stamp.write_text(json.dumps(want, indent=2))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_rvv.demo", description=__doc__)
    parser.add_argument("--arch", choices=ALL_ARCHS, default="qwen2", help="model family")
    parser.add_argument("--out", type=Path, help="target directory (default: the cache)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument(
        "--quant", help="write the model quantised in this format (w8a8, awq, gptq, fp8, wna16)"
    )
    parser.add_argument(
        "--dequantized", action="store_true", help="with --quant: its fp32 dequantised twin"
    )
    args = parser.parse_args(argv)
    if args.dequantized and not args.quant:
        parser.error("--dequantized needs --quant")
    if args.quant:
        from sglang_rvv import quant

        if args.quant not in quant.FORMATS:
            parser.error(f"--quant {args.quant}: expected one of {', '.join(quant.FORMATS)}")
        if args.force:
            stamp = args.out or quant_dir(args.arch, args.quant, dequantized=args.dequantized)
            (stamp / "rvv_sglang_quant.json").unlink(missing_ok=True)
        path = ensure_quantized(args.arch, args.quant, dequantized=args.dequantized, out=args.out)
    elif args.force:
        path = build(args.out or default_dir(args.arch), args.arch)
    else:
        path = ensure(args.arch, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
