"""GGUF files with the shapes of Qwen2.5-1.5B and TinyLlama-1.1B and random weights.

    from peers import gguf_models
    info = gguf_models.write(path, "qwen2-1.5b", "q4_0", layers=2, vocab=4096, seed=0)

llama.cpp's side of the peer benchmark (tools/bench_peers.py) runs files written here: the
layer dimensions of the real model, a chosen layer count and vocabulary, random weights from
a fixed seed. Written with the ``gguf`` package (PyPI, 0.19.0) in a single streaming pass, one
tensor in memory at a time.

Architectures (:data:`ARCHS`):

* ``qwen2-1.5b``: Qwen2.5-1.5B as llama.cpp's ``qwen2`` - hidden 1536, 12 query / 2 KV heads
  of 128, MLP 8960, q/k/v biases, RoPE theta 1e6, RMSNorm eps 1e-6, 28 layers, vocabulary
  151,936, trained context 32,768. The real model ties the LM head to the embeddings; these
  files have an untied ``output.weight``, like the decoder tools/bench_e2e_riscv.py runs.
* ``tinyllama-1.1b``: TinyLlama-1.1B as ``llama`` - hidden 2048, 32 query / 4 KV heads of 64,
  MLP 5632, no biases, RoPE theta 1e4, eps 1e-5, 22 layers, vocabulary 32,000, context 2048,
  untied head (as the real model).

Tensor types (``qtype``, :data:`QTYPES`): every layer matrix (q, k, v, o, gate, up, down) in
``qtype`` - a "pure" file, as ``llama-quantize --pure`` writes; llama.cpp's default quantiser
mixes in other types for some tensors (e.g. Q5_K ``attn_v`` in IQ4_NL files of models with
4+ query heads per KV head). Norm weights and biases are F32, as llama.cpp's converter writes
them. ``token_embd`` and ``output`` follow what users' files have (:data:`HEAD_TYPES`):
F16/BF16/Q8_0 files as ``convert_hf_to_gguf.py --outtype`` writes them (both tensors in that
type); Q4_0, IQ4_NL and Q3_K files as ``llama-quantize`` writes them from an untied model
(``token_embd`` in the type, ``output`` Q6_K). ``output_type`` overrides the head's type.

Weights. Values ~ N(0, 0.02) (a trained model's scale) for the types ``gguf.quants`` can
quantise (F16, BF16, Q8_0, Q4_0): a seeded pool of POOL_BLOCKS blocks is quantised once per
type, and every tensor is a window of that periodic stream of blocks starting at a seeded
offset (the pool length is prime, so no two rows of a matrix start at the same block; writing
a 2-layer Qwen2.5-1.5B-shaped file takes seconds). IQ4_NL, Q3_K and Q6_K, which gguf 0.19.0
cannot quantise, are random bytes in ggml's block layout with positive, normal fp16 scales
chosen so that the weights are of the same order (~0.02): the instructions ggml's dot products
retire do not depend on the values. Norm weights are 1, biases N(0, 0.02), F32.

Tokenizer. A minimal vocabulary that llama.cpp's loader accepts: ``qwen2`` files have a
byte-level BPE (``gpt2``, pre-tokenizer ``qwen2``) vocabulary of the 256 byte tokens, one
merge, filler tokens ``t<i>`` and ``<|endoftext|>`` (last id; BOS and EOS); ``llama`` files
have a SentencePiece (``llama``) vocabulary ``<unk>``, ``<s>``, ``</s>``, the 256 ``<0xNN>``
byte tokens and fillers ``\u2581t<i>``. Benchmarks feed token ids, never text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

QT = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Arch:
    """A decoder's dimensions and the GGUF metadata llama.cpp needs for it."""

    name: str
    gguf_arch: str  # llama.cpp's architecture name
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    layers: int  # the real model's layer count (default of write)
    vocab: int  # the real model's vocabulary (default of write)
    context: int  # trained context length (metadata)
    rope_theta: float
    rms_eps: float
    qkv_bias: bool
    tokenizer: str  # tokenizer.ggml.model
    tokenizer_pre: str  # tokenizer.ggml.pre


ARCHS: dict[str, Arch] = {
    "qwen2-1.5b": Arch(
        name="qwen2-1.5b", gguf_arch="qwen2", hidden=1536, heads=12, kv_heads=2, head_dim=128,
        ffn=8960, layers=28, vocab=151936, context=32768, rope_theta=1e6, rms_eps=1e-6,
        qkv_bias=True, tokenizer="gpt2", tokenizer_pre="qwen2",
    ),
    "tinyllama-1.1b": Arch(
        name="tinyllama-1.1b", gguf_arch="llama", hidden=2048, heads=32, kv_heads=4,
        head_dim=64, ffn=5632, layers=22, vocab=32000, context=2048, rope_theta=1e4,
        rms_eps=1e-5, qkv_bias=False, tokenizer="llama", tokenizer_pre="default",
    ),
}  # fmt: skip
"""The architectures :func:`write` knows, by name."""

QTYPES: dict[str, QT] = {
    "f16": QT.F16,
    "bf16": QT.BF16,
    "q8_0": QT.Q8_0,
    "q4_0": QT.Q4_0,
    "iq4_nl": QT.IQ4_NL,
    "q3_k": QT.Q3_K,
}
"""Types of the layer matrices (``qtype``), by name."""

OUTPUT_TYPES: dict[str, QT] = {**QTYPES, "q6_k": QT.Q6_K}
"""Types ``output_type`` may name (the layer types and Q6_K)."""

HEAD_TYPES: dict[str, tuple[str, str]] = {
    "f16": ("f16", "f16"),
    "bf16": ("bf16", "bf16"),
    "q8_0": ("q8_0", "q8_0"),
    "q4_0": ("q4_0", "q6_k"),
    "iq4_nl": ("iq4_nl", "q6_k"),
    "q3_k": ("q3_k", "q6_k"),
}
"""(token_embd type, output type) of each ``qtype``'s files, as users' files have them."""

FILE_TYPES: dict[str, gguf.LlamaFileType] = {
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "iq4_nl": gguf.LlamaFileType.MOSTLY_IQ4_NL,
    "q3_k": gguf.LlamaFileType.MOSTLY_Q3_K_S,
}
"""``general.file_type`` per ``qtype`` (Q3_K: Q3_K_S, whose layers are all Q3_K)."""

SIGMA = 0.02
"""Standard deviation of the random weights (and biases)."""
POOL_BLOCKS = 65521
"""Blocks in each type's random pool (a prime: see the module docstring)."""
MIN_VOCAB = 260
"""The smallest vocabulary the minimal tokenizers fit in (256 byte tokens + specials)."""

# fp16 scale ranges of the random-byte types: d x (the block's integer weights) ~ 0.02.
# Each scale is d x uniform(0.75, 1.5): fp16 normal numbers (>= 6.1e-5), no subnormals.
_IQ4_NL_D = 3e-4  # IQ4_NL: w = d * kvalues[q], |kvalues| ~ 60
_Q3_K_D = 6e-4  # Q3_K: w = d * (scale - 32) * q, 6-bit scales, q in -4..3
_Q6_K_D = 1e-4  # Q6_K: w = d * scale * (q - 32), int8 scales kept in 1..31


def _random_blocks(kind: QT, n: int, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """`n` random blocks of `kind` (IQ4_NL, Q3_K or Q6_K) as an (n, type size) byte array:
    random quant bits, positive finite fp16 scales (see the _*_D constants)."""
    size = gguf.GGML_QUANT_SIZES[kind][1]
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)

    def scale(d: float) -> npt.NDArray[np.uint8]:
        values = (d * rng.uniform(0.75, 1.5, size=n)).astype("<f2")
        return values.view(np.uint8).reshape(n, 2)

    if kind == QT.IQ4_NL:  # d, qs[16]
        blocks[:, 0:2] = scale(_IQ4_NL_D)
    elif kind == QT.Q3_K:  # hmask[32], qs[64], scales[12], d
        blocks[:, 108:110] = scale(_Q3_K_D)
    elif kind == QT.Q6_K:  # ql[128], qh[64], scales[16] (int8), d
        blocks[:, 192:208] = rng.integers(1, 32, size=(n, 16), dtype=np.uint8)
        blocks[:, 208:210] = scale(_Q6_K_D)
    else:
        raise ValueError(f"no random-byte layout for {kind.name}")
    return blocks


def _pool(kind: QT, seed: int) -> npt.NDArray[np.uint8]:
    """POOL_BLOCKS blocks of `kind` as a (POOL_BLOCKS, type size) byte array, from `seed`."""
    rng = np.random.default_rng([seed, int(kind)])
    block, size = gguf.GGML_QUANT_SIZES[kind]
    if kind in (QT.IQ4_NL, QT.Q3_K, QT.Q6_K):
        return _random_blocks(kind, POOL_BLOCKS, rng)
    values = rng.standard_normal(POOL_BLOCKS * block, dtype=np.float32) * np.float32(SIGMA)
    if kind == QT.F16:
        data = values.astype("<f2").view(np.uint8)
    else:
        data = np.asarray(gguf.quants.quantize(values.reshape(1, -1), kind), dtype=np.uint8)
    return np.ascontiguousarray(data.reshape(POOL_BLOCKS, size))


def _window(pool: npt.NDArray[np.uint8], start: int, n: int) -> npt.NDArray[np.uint8]:
    """Blocks start, start + 1, ..., start + n - 1 of `pool` repeated without end."""
    out = np.empty((n, pool.shape[1]), dtype=np.uint8)
    pos, at = 0, start % len(pool)
    while pos < n:
        take = min(n - pos, len(pool) - at)
        out[pos : pos + take] = pool[at : at + take]
        pos, at = pos + take, 0
    return out


def type_bytes(kind: QT, rows: int, cols: int) -> int:
    """Bytes of a ``rows`` x ``cols`` matrix (``cols`` along the rows, ggml's ne0) of `kind`."""
    block, size = gguf.GGML_QUANT_SIZES[kind]
    if cols % block:
        raise ValueError(f"a row of {cols} values is not a whole number of {kind.name} blocks")
    return rows * cols // block * size


@dataclass(frozen=True)
class _Tensor:
    name: str
    kind: QT  # F32 for norms and biases
    shape: tuple[int, ...]  # numpy order: (rows, cols) or (n,)
    role: str  # "norm", "bias" or "matrix"


def _tensors(arch: Arch, layers: int, vocab: int, embd: QT, out: QT, qt: QT) -> list[_Tensor]:
    """The file's tensors in llama.cpp's names, in the order the converter writes them."""
    h, kv = arch.hidden, arch.kv_heads * arch.head_dim
    q = arch.heads * arch.head_dim
    tensors = [_Tensor("token_embd.weight", embd, (vocab, h), "matrix")]
    for i in range(layers):
        b = f"blk.{i}."
        tensors.append(_Tensor(b + "attn_norm.weight", QT.F32, (h,), "norm"))
        for proj, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            tensors.append(_Tensor(b + proj + ".weight", qt, (rows, h), "matrix"))
            if arch.qkv_bias:
                tensors.append(_Tensor(b + proj + ".bias", QT.F32, (rows,), "bias"))
        tensors += [
            _Tensor(b + "attn_output.weight", qt, (h, q), "matrix"),
            _Tensor(b + "ffn_norm.weight", QT.F32, (h,), "norm"),
            _Tensor(b + "ffn_gate.weight", qt, (arch.ffn, h), "matrix"),
            _Tensor(b + "ffn_up.weight", qt, (arch.ffn, h), "matrix"),
            _Tensor(b + "ffn_down.weight", qt, (h, arch.ffn), "matrix"),
        ]
    tensors.append(_Tensor("output_norm.weight", QT.F32, (h,), "norm"))
    tensors.append(_Tensor("output.weight", out, (vocab, h), "matrix"))
    return tensors


def _nbytes(t: _Tensor) -> int:
    if t.kind == QT.F32:
        return 4 * t.shape[0]
    return type_bytes(t.kind, t.shape[0], t.shape[1])


def _byte_level_alphabet() -> list[str]:
    """GPT-2's byte-level BPE alphabet: the character standing for each byte 0..255
    (printable Latin-1 bytes stand for themselves, the others for code points 256 + i)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _add_tokenizer(w: gguf.GGUFWriter, arch: Arch, vocab: int) -> None:
    """The minimal vocabulary of `vocab` tokens described in the module docstring."""
    tt = gguf.TokenType
    w.add_tokenizer_model(arch.tokenizer)
    w.add_tokenizer_pre(arch.tokenizer_pre)
    if arch.tokenizer == "gpt2":
        alphabet = _byte_level_alphabet()
        fillers = [f"t{i}" for i in range(vocab - len(alphabet) - 1)]
        tokens = [*alphabet, *fillers, "<|endoftext|>"]
        types = [tt.NORMAL] * (vocab - 1) + [tt.CONTROL]
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges([f"{alphabet[ord('t')]} {alphabet[ord('0')]}"])
        w.add_bos_token_id(vocab - 1)
        w.add_eos_token_id(vocab - 1)
        w.add_add_bos_token(False)
    elif arch.tokenizer == "llama":
        special = ["<unk>", "<s>", "</s>"]
        byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
        fillers = [f"\u2581t{i}" for i in range(vocab - len(special) - len(byte_tokens))]
        w.add_token_list([*special, *byte_tokens, *fillers])
        w.add_token_types(
            [tt.UNKNOWN, tt.CONTROL, tt.CONTROL] + [tt.BYTE] * 256 + [tt.NORMAL] * len(fillers)
        )
        w.add_token_scores([0.0] * (len(special) + 256) + [-float(i) for i in range(len(fillers))])
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
    else:
        raise ValueError(f"no minimal vocabulary for tokenizer {arch.tokenizer!r}")


def _resolve(name: str, table: dict[str, QT], what: str) -> QT:
    if name not in table:
        raise ValueError(f"{what} must be one of {sorted(table)}, not {name!r}")
    return table[name]


def write(
    path: str | os.PathLike[str],
    arch: str | Arch,
    qtype: str,
    *,
    layers: int | None = None,
    vocab: int | None = None,
    context: int | None = None,
    seed: int = 0,
    output_type: str | None = None,
) -> dict[str, Any]:
    """Writes a GGUF model file with `arch`'s dimensions and random weights to `path`.

    `arch`: a name in :data:`ARCHS` or an :class:`Arch` (tests use small ones). `qtype`: the
    layer matrices' type (:data:`QTYPES`). `layers`, `vocab`, `context`: the layer count,
    vocabulary and trained context length (metadata ``context_length``; default the real
    model's). `seed`: the same seed writes the same bytes. `output_type`: the LM head's type
    (default :data:`HEAD_TYPES`). The file is written to a temporary name beside `path` and
    renamed, so a stopped run leaves no partial model.

    Returns a description for benchmark records: ``arch``, ``gguf_arch``, ``qtype``,
    ``layers``, ``vocab``, ``context_length`` (the metadata's), ``seed``, ``dims`` (hidden,
    heads, kv_heads, head_dim, ffn), ``types`` (per role), ``file_bytes``,
    ``weight_bytes_per_layer`` (every tensor of one layer), ``output_bytes`` (the LM head),
    ``output_norm_bytes``, ``token_embd_bytes`` and ``token_embd_row_bytes``, and
    ``weight_bytes_per_token`` (what a decoded token reads: every layer, the final norm, the
    LM head and one embedding row).
    """
    a = arch if isinstance(arch, Arch) else ARCHS.get(arch)
    if a is None:
        raise ValueError(f"arch must be one of {sorted(ARCHS)} or an Arch, not {arch!r}")
    qt = _resolve(qtype, QTYPES, "qtype")
    embd_name, out_name = HEAD_TYPES[qtype]
    out_name = output_type if output_type is not None else out_name
    out = _resolve(out_name, OUTPUT_TYPES, "output_type")
    embd = QTYPES[embd_name]
    n_layers = a.layers if layers is None else layers
    n_vocab = a.vocab if vocab is None else vocab
    n_ctx = a.context if context is None else context
    if n_layers < 1:
        raise ValueError(f"layers must be >= 1, not {n_layers}")
    if n_vocab < MIN_VOCAB:
        raise ValueError(
            f"vocab must be >= {MIN_VOCAB} (the byte tokens and specials), not {n_vocab}"
        )
    if n_ctx < 1:
        raise ValueError(f"context must be >= 1, not {n_ctx}")
    if a.hidden != a.heads * a.head_dim:
        raise ValueError(f"{a.name}: hidden {a.hidden} != heads {a.heads} x head_dim {a.head_dim}")
    tensors = _tensors(a, n_layers, n_vocab, embd, out, qt)
    for t in tensors:
        _nbytes(t)  # raises if a row is not a whole number of blocks

    dest = Path(path)
    tmp = dest.with_name(dest.name + ".partial")
    w = gguf.GGUFWriter(tmp, a.gguf_arch)
    w.add_name(f"{a.name} shape, random weights (seed {seed})")
    w.add_file_type(int(FILE_TYPES[qtype]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(n_ctx)
    w.add_embedding_length(a.hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.rms_eps)
    w.add_vocab_size(n_vocab)
    _add_tokenizer(w, a, n_vocab)
    for t in tensors:
        if t.kind == QT.F32:
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), _nbytes(t))
        else:
            size = gguf.GGML_QUANT_SIZES[t.kind]
            byte_shape = (t.shape[0], t.shape[1] // size[0] * size[1])
            w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), _nbytes(t), raw_dtype=t.kind)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for data in _tensor_data(tensors, seed):
            w.write_tensor_data(data)
    finally:
        w.close()
    tmp.replace(dest)

    per_layer = sum(_nbytes(t) for t in tensors if t.name.startswith("blk.0."))
    by_name = {t.name: t for t in tensors}
    embd_bytes = _nbytes(by_name["token_embd.weight"])
    head_bytes = _nbytes(by_name["output.weight"])
    norm_bytes = _nbytes(by_name["output_norm.weight"])
    return {
        "arch": a.name,
        "gguf_arch": a.gguf_arch,
        "qtype": qtype,
        "layers": n_layers,
        "vocab": n_vocab,
        "context_length": n_ctx,
        "seed": seed,
        "dims": {k: getattr(a, k) for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn")},
        "types": {
            "layers": qtype,
            "token_embd": embd_name,
            "output": out_name,
            "norms": "f32",
            "biases": "f32" if a.qkv_bias else None,
        },
        "file_bytes": dest.stat().st_size,
        "weight_bytes_per_layer": per_layer,
        "output_bytes": head_bytes,
        "output_norm_bytes": norm_bytes,
        "token_embd_bytes": embd_bytes,
        "token_embd_row_bytes": embd_bytes // n_vocab,
        "weight_bytes_per_token": n_layers * per_layer
        + norm_bytes
        + head_bytes
        + embd_bytes // n_vocab,
    }


def _tensor_data(tensors: list[_Tensor], seed: int) -> Iterator[npt.NDArray[Any]]:
    """Each tensor's data in file order: windows of the per-type pools at offsets drawn from
    `seed`; norms ones, biases N(0, SIGMA)."""
    rng = np.random.default_rng([seed, 0x6767])
    pools: dict[QT, npt.NDArray[np.uint8]] = {}
    for t in tensors:
        start = int(rng.integers(0, POOL_BLOCKS))
        if t.role == "norm":
            yield np.ones(t.shape, dtype=np.float32)
        elif t.role == "bias":
            yield (rng.standard_normal(t.shape, dtype=np.float32) * np.float32(SIGMA))
        else:
            if t.kind not in pools:
                pools[t.kind] = _pool(t.kind, seed)
            block, size = gguf.GGML_QUANT_SIZES[t.kind]
            rows, cols = t.shape
            blocks = _window(pools[t.kind], start, rows * cols // block)
            yield blocks.reshape(rows, cols // block * size)
