"""Greedy decode steps of a Qwen2.5-1.5B-shaped decoder: the guest side of bench_e2e_riscv.

Runs inside the emulated Debian 13 Python (torch 2.6, Python 3.13), started by
``tools/bench_e2e_riscv.py`` under QEMU with the insncount plugin; plain torch, ``rvv_ops``
and ``rvv_attention`` only (no SGLang, nothing from the host).

    python decode_step.py --mode torch-native|rvv|rvv-w8a8|rvv-w4a8|rvv-fp8 --tokens N
        [--out FILE] [shape]

Builds the model from a fixed seed (random bf16 weights; the same weights in every mode),
fills the first ``--context`` rows of each layer's K/V cache with random values (no prefill
is run), then decodes ``--tokens`` tokens for one request, greedily (argmax over the
vocabulary), starting from token 0 at position ``--context``. Modes:

* ``torch-native``: what SGLang runs without this project - torch's linear, RMSNorm,
  SiLU-and-mul and neox RoPE in plain torch ops (SGLang's ``forward_native`` formulas) and
  its ``torch_native`` attention: write K/V into the cache, gather the request's rows, one
  ``scaled_dot_product_attention`` per request (``enable_gqa``).
* ``rvv``: ``torch.ops.sgl_kernel`` ops: ``rmsnorm_cpu`` / ``fused_add_rmsnorm_cpu``,
  ``weight_packed_linear`` on weights packed once by ``convert_weight_packed``,
  ``rotary_embedding_cpu``, ``silu_and_mul_cpu``; attention by ``rvv_attention.decode``
  (which writes the new K/V and runs the decode kernel).
* ``rvv-w8a8``: as ``rvv``, with the q/k/v, o, gate/up and down projections in W8A8:
  int8 weights with per-output-channel scales (symmetric, amax / 127), packed once, and
  ``int8_scaled_mm_with_quant`` (per-token int8 quantisation of the activations, then the
  int8 GEMM). The LM head stays bf16 (``weight_packed_linear``), as in SGLang's W8A8
  checkpoints.
* ``rvv-w4a8``: the projections in INT4 as AWQ checkpoints hold them (asymmetric, groups of
  128 input channels, fp16 scales; written in AWQ's int32 layout and packed once by
  ``convert_weight_packed_scale_zp``), run by ``int4_scaled_mm_cpu`` (SGLang's W4A8:
  per-token int8 activations, exact int32 sums per group). LM head bf16.
* ``rvv-fp8``: the projections in block-scaled FP8 e4m3 (blocks of 128 x 128, scale = block
  amax / 448), packed once by ``convert_weight_packed``, run by ``fp8_scaled_mm_cpu``
  (W8A16). LM head bf16.

Marks for the insncount plugin: ``mark(n)`` right before the first token (n = 0) and after
each token n, so the host measures decode steps alone (see tools/qemu-plugin/insncount.c).

Prints progress lines (phases, per-token times) and, with ``--out``, writes
``{"mode", "tokens", "top", "seconds", "build_info"}`` as JSON; ``top`` has, per token, the
8 largest logits as ``[token, logit]`` (the lm_head's output in fp32, argmax order), taken
after the last mark, so the host can tell a near-tie from a real disagreement where modes
differ.
"""

# Not in the lint session's mypy list: it runs on the guest's torch 2.6 and imports the
# guest-installed rvv_ops / rvv_attention the way the emulated Python sees them; ruff
# checks it like every other file.

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[guest {time.monotonic() - T0:7.1f} s] {msg}", flush=True)


# The insncount plugin's mark: lseek(-1, MARK_MAGIC, label) fails with EBADF and nothing
# else; the plugin, when loaded, snapshots its counts under `label` (rvvtools'
# INSNCOUNT_MARK_MAGIC, repeated here: the guest imports nothing from the host).
MARK_MAGIC = 0x696E73636E74


def mark(label: int) -> None:
    try:
        os.lseek(-1, MARK_MAGIC, label)
    except OSError:
        return
    raise RuntimeError("lseek(-1, ...) succeeded; the insncount mark relies on EBADF")


# Length of the random pools weights are cut from (a prime: no two rows of a weight start at
# the same offset, since no row length is a multiple of it).
POOL = 1_000_003


class Model:
    """Random weights of a Qwen2-style decoder; bf16 storage, the same for a given seed.

    Drawing ~100 M normal values under emulation takes minutes, so each weight matrix is a
    window of a periodic stream: one pool of POOL normal values per fan-in (scaled by
    1 / sqrt(fan-in)), drawn once from the seed, read on from where the previous weight
    stopped. Rows are distinct (shifted) sequences; the weights are the same in every mode.
    """

    def __init__(self, a: argparse.Namespace) -> None:
        g = torch.Generator().manual_seed(a.seed)
        h, i, d = a.hidden, a.intermediate, a.head_dim
        self.a = a
        self.q_size, self.kv_size = a.heads * d, a.kv_heads * d
        pools: dict[int, torch.Tensor] = {}
        cursor = [0]

        def w(n: int, k: int) -> torch.Tensor:
            if k not in pools:
                pools[k] = (torch.randn(POOL, generator=g) * (1.0 / math.sqrt(k))).to(
                    torch.bfloat16
                )
            start = cursor[0] % POOL
            cursor[0] += n * k + 1
            reps = (start + n * k) // POOL + 1
            return pools[k].repeat(reps)[start : start + n * k].view(n, k).clone()

        def v(n: int, scale: float, base: float = 0.0) -> torch.Tensor:
            return (base + torch.randn(n, generator=g) * scale).to(torch.bfloat16)

        self.embed = (torch.randn(a.vocab, h, generator=g) * 0.5).to(torch.bfloat16)
        # Untied LM head (Qwen2.5-1.5B ties it to the embedding; with random weights a tied
        # head would make every step predict its own input token).
        self.lm_head = w(a.vocab, h)
        self.layers = []
        for _ in range(a.layers):
            self.layers.append(
                {
                    "in_norm": v(h, 0.1, 1.0),
                    "qkv": w(self.q_size + 2 * self.kv_size, h),
                    "qkv_bias": v(self.q_size + 2 * self.kv_size, 0.1),
                    "o": w(h, self.q_size),
                    "post_norm": v(h, 0.1, 1.0),
                    "gate_up": w(2 * i, h),
                    "down": w(h, i),
                }
            )
        self.final_norm = v(h, 0.1, 1.0)
        # neox RoPE cache [max_position, head_dim]: cos half, then sin half (fp32), theta 1e6.
        max_pos = a.context + a.tokens + 1
        inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.arange(max_pos, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos_sin = torch.cat([ang.cos(), ang.sin()], dim=-1)
        # KV caches: rows 0 .. context-1 hold the (random) prompt; one request, identity table.
        rows = max_pos
        self.k_cache = []
        self.v_cache = []
        for _ in range(a.layers):
            self.k_cache.append(torch.zeros(rows, a.kv_heads, d, dtype=torch.bfloat16))
            self.v_cache.append(torch.zeros(rows, a.kv_heads, d, dtype=torch.bfloat16))
            self.k_cache[-1][: a.context] = torch.randn(a.context, a.kv_heads, d, generator=g)
            self.v_cache[-1][: a.context] = torch.randn(a.context, a.kv_heads, d, generator=g)
        self.req_to_token = torch.arange(rows, dtype=torch.int32)[None, :].contiguous()
        self.req_pool_indices = torch.zeros(1, dtype=torch.int64)


# ----------------------------------------------------------------------------- torch-native


def rmsnorm_native(
    x: torch.Tensor, w: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's RMSNorm.forward_native (with the residual add when given)."""
    dtype = x.dtype
    x = x.float()
    if residual is not None:
        x = x + residual.float()
    residual = x.to(dtype)
    var = x.pow(2).mean(dim=-1, keepdim=True)
    x = (x * torch.rsqrt(var + eps)).to(dtype) * w
    return x, residual


def rope_native(
    pos: torch.Tensor, x: torch.Tensor, cos_sin: torch.Tensor, heads: int, d: int
) -> torch.Tensor:
    """neox rotation in the query's dtype (SGLang's RotaryEmbedding.forward_native)."""
    cos, sin = cos_sin.index_select(0, pos).to(x.dtype).chunk(2, dim=-1)
    x = x.reshape(x.shape[0], heads, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def step_native(m: Model, token: int, pos: int) -> torch.Tensor:
    a = m.a
    d = a.head_dim
    positions = torch.tensor([pos], dtype=torch.int64)
    hidden = m.embed[token][None, :]
    residual: torch.Tensor | None = None
    for li, lw in enumerate(m.layers):
        hidden, residual = rmsnorm_native(hidden, lw["in_norm"], a.eps, residual)
        qkv = F.linear(hidden, lw["qkv"], lw["qkv_bias"])
        q, k, v = qkv.split([m.q_size, m.kv_size, m.kv_size], dim=-1)
        q = rope_native(positions, q, m.cos_sin, a.heads, d)
        k = rope_native(positions, k, m.cos_sin, a.kv_heads, d)
        # torch_native backend: set_kv_buffer, then per request gather + SDPA.
        m.k_cache[li][pos] = k[0]
        m.v_cache[li][pos] = v.reshape(a.kv_heads, d)
        tokens = m.req_to_token[0, : pos + 1].long()
        keys = m.k_cache[li][tokens].movedim(0, 1)[None]  # [1, Hkv, S, D]
        values = m.v_cache[li][tokens].movedim(0, 1)[None]
        out = F.scaled_dot_product_attention(
            q.movedim(0, 1)[None], keys, values, scale=d**-0.5, enable_gqa=True
        )  # [1, Hq, 1, D]
        attn = out[0].movedim(1, 0).reshape(1, m.q_size)
        hidden = F.linear(attn, lw["o"])
        hidden, residual = rmsnorm_native(hidden, lw["post_norm"], a.eps, residual)
        gate_up = F.linear(hidden, lw["gate_up"])
        half = gate_up.shape[-1] // 2
        hidden = F.linear(F.silu(gate_up[..., :half]) * gate_up[..., half:], lw["down"])
    hidden, _ = rmsnorm_native(hidden, m.final_norm, a.eps, residual)
    return F.linear(hidden, m.lm_head)[0].float()


# ----------------------------------------------------------------------------- rvv


INT4_GROUP = 128
FP8_BLOCK = [128, 128]
AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def awq_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [N, K] quantised to int4 (asymmetric per group of INT4_GROUP) in AWQ's layout:
    (qweight int32 [K, N / 8], qzeros int32 [G, N / 8], scales fp16 [G, N])."""
    n, k = w.shape
    wg = w.float().reshape(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = wg.amin(dim=2).clamp(max=0.0), wg.amax(dim=2).clamp(min=0.0)
    scale = ((hi - lo) / 15).clamp(min=1e-8).half().float()
    zero = torch.round(-lo / scale).clamp(0, 15)
    q = (torch.round(wg / scale[..., None]) + zero[..., None]).clamp(0, 15).reshape(n, k)

    def words(v: torch.Tensor) -> torch.Tensor:  # [R, N] -> int32 [R, N / 8]
        out = torch.zeros(v.shape[0], v.shape[1] // 8, dtype=torch.int64)
        for j, slot in enumerate(AWQ_ORDER):
            out |= v[:, j::8].to(torch.int64) << (4 * slot)
        return (out - ((out >> 31) << 32)).to(torch.int32)

    return words(q.T.contiguous()), words(zero.T.contiguous()), scale.T.contiguous().half()


def fp8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] (both multiples of the block) as e4m3 with fp32 block scales."""
    n, k = w.shape
    bn, bk = FP8_BLOCK
    blocks = w.float().reshape(n // bn, bn, k // bk, bk)
    scale = (blocks.abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).reshape(n, k).to(torch.float8_e4m3fn)
    return q, scale.contiguous()


class RvvModel:
    """The same weights prepared for the rvv ops: packed once (bf16, int8 + scales, int4
    + zero points and scales, or fp8 + block scales)."""

    def __init__(self, m: Model, weights: str) -> None:
        import rvv_attention as ra
        import rvv_ops  # noqa: F401  (registers torch.ops.sgl_kernel.*)

        self.m, self.weights, self.ra = m, weights, ra
        sel = ra.select("decode", q_dtype=torch.bfloat16, kv_dtype=torch.bfloat16, head_dim=128)
        log(f"rvv_attention.decode runs: {sel.impl.name} (reason: {sel.reason})")
        pack = torch.ops.sgl_kernel.convert_weight_packed
        self.layers = []
        for li, lw in enumerate(m.layers):
            entry = {}
            for name in ("qkv", "o", "gate_up", "down"):
                if weights == "w8a8":
                    wf = lw[name].float()
                    scale = wf.abs().amax(dim=1, keepdim=True).clamp_min(1e-10) / 127.0
                    q8 = torch.round(wf / scale).clamp(-127, 127).to(torch.int8)
                    entry[name] = ("w8a8", pack(q8), scale.contiguous())
                elif weights == "w4a8":
                    packed = torch.ops.sgl_kernel.convert_weight_packed_scale_zp(
                        *awq_weight(lw[name]), 0
                    )
                    entry[name] = ("w4a8", *packed)
                elif weights == "fp8":
                    q8, scale = fp8_weight(lw[name])
                    entry[name] = ("fp8", pack(q8), scale)
                else:
                    entry[name] = ("bf16", pack(lw[name]))
            self.layers.append(entry)
            log(f"packed layer {li} ({weights})")
        self.lm_head = pack(m.lm_head)
        self.caches = [ra.KVCache(k, v) for k, v in zip(m.k_cache, m.v_cache, strict=True)]

    def linear(self, x: torch.Tensor, entry: tuple, bias: torch.Tensor | None) -> torch.Tensor:
        kind, weight, *extra = entry
        ops = torch.ops.sgl_kernel
        if kind == "w8a8":
            return ops.int8_scaled_mm_with_quant(x, weight, extra[0], bias, torch.bfloat16, True)
        if kind == "w4a8":
            return ops.int4_scaled_mm_cpu(x, weight, extra[0], extra[1], bias)
        if kind == "fp8":
            return ops.fp8_scaled_mm_cpu(x, weight, extra[0], FP8_BLOCK, bias, x.dtype, True)
        return ops.weight_packed_linear(x, weight, bias, True)

    def step(self, token: int, pos: int) -> torch.Tensor:
        m, a, ops = self.m, self.m.a, torch.ops.sgl_kernel
        d = a.head_dim
        positions = torch.tensor([pos], dtype=torch.int64)
        loc = positions
        seq_lens = torch.tensor([pos + 1], dtype=torch.int64)
        hidden = m.embed[token][None, :].clone()  # the ops below write in place
        residual: torch.Tensor | None = None
        for li, (lw, pw) in enumerate(zip(m.layers, self.layers, strict=True)):
            if residual is None:
                residual = hidden
                hidden = ops.rmsnorm_cpu(hidden, lw["in_norm"], a.eps)
            else:
                ops.fused_add_rmsnorm_cpu(hidden, residual, lw["in_norm"], a.eps)
            qkv = self.linear(hidden, pw["qkv"], lw["qkv_bias"])
            q = qkv[:, : m.q_size]
            k = qkv[:, m.q_size : m.q_size + m.kv_size]
            v = qkv[:, m.q_size + m.kv_size :]
            q, k = ops.rotary_embedding_cpu(positions, q, k, d, m.cos_sin, True)
            out = torch.empty(1, a.heads, d, dtype=torch.bfloat16)
            self.ra.decode(
                q.view(1, a.heads, d),
                self.caches[li],
                out,
                m.req_to_token,
                m.req_pool_indices,
                seq_lens,
                sm_scale=d**-0.5,
                loc=loc,
                key=k.view(1, a.kv_heads, d),
                value=v.reshape(1, a.kv_heads, d),
            )
            hidden = self.linear(out.view(1, m.q_size), pw["o"], None)
            ops.fused_add_rmsnorm_cpu(hidden, residual, lw["post_norm"], a.eps)
            hidden = self.linear(ops.silu_and_mul_cpu(self.linear(hidden, pw["gate_up"], None)),
                                 pw["down"], None)  # fmt: skip
        ops.fused_add_rmsnorm_cpu(hidden, residual, m.final_norm, a.eps)
        return ops.weight_packed_linear(hidden, self.lm_head, None, True)[0].float()


MODE_WEIGHTS = {
    "torch-native": "",
    "rvv": "bf16",
    "rvv-w8a8": "w8a8",
    "rvv-w4a8": "w4a8",
    "rvv-fp8": "fp8",
}
TOP = 8  # logits kept per token for the host's comparison of modes


def top_logits(logits: torch.Tensor) -> list[list[float]]:
    """The TOP largest of one step's fp32 logits as [token, logit], in argmax order (the
    first is the greedy token; equal logits: the lower token first, as argmax picks)."""
    rest = logits.clone()
    out: list[list[float]] = []
    for _ in range(min(TOP, rest.numel())):
        t = int(rest.argmax())
        out.append([t, float(logits[t])])
        rest[t] = -math.inf
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=tuple(MODE_WEIGHTS), required=True)
    p.add_argument("--tokens", type=int, required=True, help="tokens to decode")
    p.add_argument("--out", help="JSON result file")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=8960)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    # One thread: the plugin's counts are exact for a single-threaded guest, and the
    # per-token work is the same whatever the thread count.
    torch.set_num_threads(1)
    log(f"torch {torch.__version__}, python {sys.version.split()[0]}, mode {a.mode}")
    build_info = None
    if a.mode != "torch-native":
        import rvv_ops

        build_info = rvv_ops.build_info()
        log(f"rvv_ops build: {build_info}")
    with torch.no_grad():
        model = Model(a)
        log(f"weights and a {a.context}-token random K/V cache ready ({a.layers} layers)")
        if a.mode == "torch-native":
            step = lambda t, p: step_native(model, t, p)  # noqa: E731
        else:
            step = RvvModel(model, MODE_WEIGHTS[a.mode]).step
        tokens: list[int] = []
        seconds: list[float] = []
        logits: list[torch.Tensor] = []
        token = 0
        mark(0)
        for n in range(a.tokens):
            start = time.monotonic()
            step_logits = step(token, a.context + n)
            token = int(step_logits.argmax())
            mark(n + 1)
            seconds.append(time.monotonic() - start)
            tokens.append(token)
            logits.append(step_logits)
            log(f"token {n + 1}/{a.tokens}: {token} ({seconds[-1]:.1f} s)")
        # After the last mark, so the plugin's counts leave it out.
        top = [top_logits(x) for x in logits]
    if a.out:
        result = {
            "mode": a.mode,
            "tokens": tokens,
            "top": top,
            "seconds": seconds,
            "build_info": build_info,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
