"""tools/peers/gguf_models.py on tiny shapes, read back with the gguf package's reader.

Whether llama.cpp loads and runs these files is checked by ``tools/bench_peers.py --quick``
(it needs the llama.cpp build); here: tensor names, types, shapes, metadata, sizes per type,
the values' scale and determinism per seed. Needs ``gguf`` (0.19.0) and numpy.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from peers import gguf_models

QT = gguf.GGMLQuantizationType
# Small versions of the two architectures: rows of 256 values fit every block size (Q3_K,
# Q6_K: 256); grouped-query attention as in the real models.
TINY_QWEN = dataclasses.replace(
    gguf_models.ARCHS["qwen2-1.5b"], name="tiny-qwen2", hidden=256, heads=2, kv_heads=1,
    head_dim=128, ffn=512,
)  # fmt: skip
TINY_LLAMA = dataclasses.replace(
    gguf_models.ARCHS["tinyllama-1.1b"], name="tiny-llama", hidden=256, heads=4, kv_heads=2,
    head_dim=64, ffn=512,
)  # fmt: skip
VOCAB = 300
LAYERS = 2
# (block size, bytes per block) from ggml's block layouts (ggml-common.h), written out here
# rather than taken from gguf's table so that a wrong table would show.
BLOCKS = {
    QT.F32: (1, 4),
    QT.F16: (1, 2),
    QT.BF16: (1, 2),
    QT.Q8_0: (32, 34),
    QT.Q4_0: (32, 18),
    QT.IQ4_NL: (32, 18),
    QT.Q3_K: (256, 110),
    QT.Q6_K: (256, 210),
}
HEAD = {
    "f16": (QT.F16, QT.F16),
    "bf16": (QT.BF16, QT.BF16),
    "q8_0": (QT.Q8_0, QT.Q8_0),
    "q4_0": (QT.Q4_0, QT.Q6_K),
    "iq4_nl": (QT.IQ4_NL, QT.Q6_K),
    "q3_k": (QT.Q3_K, QT.Q6_K),
}


def field(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.get_field(key)
    assert f is not None, f"missing metadata {key}"
    return f.contents()


def expected_tensors(arch: gguf_models.Arch, qt: QT, embd: QT, out: QT) -> dict[str, Any]:
    """name -> (type, ggml shape ne0, ne1...) of a LAYERS-layer, VOCAB-token file."""
    h, q, kv = arch.hidden, arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    t: dict[str, Any] = {
        "token_embd.weight": (embd, [h, VOCAB]),
        "output_norm.weight": (QT.F32, [h]),
        "output.weight": (out, [h, VOCAB]),
    }
    for i in range(LAYERS):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (QT.F32, [h])
        t[b + "ffn_norm.weight"] = (QT.F32, [h])
        t[b + "attn_q.weight"] = (qt, [h, q])
        t[b + "attn_k.weight"] = (qt, [h, kv])
        t[b + "attn_v.weight"] = (qt, [h, kv])
        t[b + "attn_output.weight"] = (qt, [q, h])
        t[b + "ffn_gate.weight"] = (qt, [h, arch.ffn])
        t[b + "ffn_up.weight"] = (qt, [h, arch.ffn])
        t[b + "ffn_down.weight"] = (qt, [arch.ffn, h])
        if arch.qkv_bias:
            t[b + "attn_q.bias"] = (QT.F32, [q])
            t[b + "attn_k.bias"] = (QT.F32, [kv])
            t[b + "attn_v.bias"] = (QT.F32, [kv])
    return t


def nbytes(kind: QT, shape: list[int]) -> int:
    block, size = BLOCKS[kind]
    return int(np.prod(shape)) // block * size


@pytest.mark.parametrize("arch", [TINY_QWEN, TINY_LLAMA], ids=lambda a: a.name)
@pytest.mark.parametrize("qtype", list(HEAD))
def test_tensors_metadata_and_sizes(tmp_path: Path, arch: gguf_models.Arch, qtype: str) -> None:
    path = tmp_path / "m.gguf"
    info = gguf_models.write(path, arch, qtype, layers=LAYERS, vocab=VOCAB, context=640, seed=3)
    reader = gguf.GGUFReader(path)
    qt = gguf_models.QTYPES[qtype]
    want = expected_tensors(arch, qt, *HEAD[qtype])
    got = {t.name: (t.tensor_type, [int(x) for x in t.shape]) for t in reader.tensors}
    assert got == want
    for t in reader.tensors:
        assert int(t.n_bytes) == nbytes(t.tensor_type, [int(x) for x in t.shape]), t.name

    a = arch.gguf_arch
    assert field(reader, "general.architecture") == a
    assert field(reader, f"{a}.block_count") == LAYERS
    assert field(reader, f"{a}.embedding_length") == arch.hidden
    assert field(reader, f"{a}.feed_forward_length") == arch.ffn
    assert field(reader, f"{a}.attention.head_count") == arch.heads
    assert field(reader, f"{a}.attention.head_count_kv") == arch.kv_heads
    assert field(reader, f"{a}.context_length") == 640
    assert field(reader, f"{a}.rope.freq_base") == pytest.approx(arch.rope_theta)
    assert field(reader, f"{a}.attention.layer_norm_rms_epsilon") == pytest.approx(arch.rms_eps)
    assert field(reader, "general.file_type") == int(gguf_models.FILE_TYPES[qtype])
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    assert len(tokens) == len(set(tokens)) == len(types) == VOCAB
    assert field(reader, "tokenizer.ggml.model") == arch.tokenizer
    assert field(reader, "tokenizer.ggml.pre") == arch.tokenizer_pre
    bos, eos = (
        field(reader, "tokenizer.ggml.bos_token_id"),
        field(reader, "tokenizer.ggml.eos_token_id"),
    )
    assert types[bos] == types[eos] == gguf.TokenType.CONTROL
    if arch.tokenizer == "gpt2":
        assert len(field(reader, "tokenizer.ggml.merges")) >= 1
        assert "\u010a" in tokens  # the byte-level token of "\n" (byte 10 -> U+010A)
    else:
        assert tokens[:3] == ["<unk>", "<s>", "</s>"] and "<0x0A>" in tokens
        assert len(field(reader, "tokenizer.ggml.scores")) == VOCAB

    per_layer = sum(int(t.n_bytes) for t in reader.tensors if t.name.startswith("blk.0."))
    by_name = {t.name: int(t.n_bytes) for t in reader.tensors}
    assert info["weight_bytes_per_layer"] == per_layer
    assert info["output_bytes"] == by_name["output.weight"]
    assert info["token_embd_row_bytes"] * VOCAB == by_name["token_embd.weight"]
    assert info["weight_bytes_per_token"] == (
        LAYERS * per_layer
        + by_name["output_norm.weight"]
        + by_name["output.weight"]
        + by_name["token_embd.weight"] // VOCAB
    )
    assert info["file_bytes"] == path.stat().st_size > sum(by_name.values())
    assert info["types"]["layers"] == qtype
    assert (info["layers"], info["vocab"], info["context_length"]) == (LAYERS, VOCAB, 640)


@pytest.mark.parametrize("qtype", list(HEAD))
def test_values(tmp_path: Path, qtype: str) -> None:
    """Weights ~ N(0, 0.02) where gguf quantises the type; the random-byte types (IQ4_NL,
    Q3_K and the Q6_K head) finite and of that order; norms 1; biases ~ N(0, 0.02)."""
    path = tmp_path / "m.gguf"
    gguf_models.write(path, TINY_QWEN, qtype, layers=1, vocab=VOCAB, seed=0)
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64)
        assert np.isfinite(w).all(), t.name
        if t.name.endswith("norm.weight"):
            assert (w == 1).all(), t.name
        elif t.tensor_type in (QT.IQ4_NL, QT.Q3_K, QT.Q6_K):
            assert 0.005 < w.std() < 0.06, (t.name, w.std())
            # Block scales (the fp16 d of every block) are normal numbers.
            size = BLOCKS[t.tensor_type][1]
            at = {QT.IQ4_NL: 0, QT.Q3_K: 108, QT.Q6_K: 208}[t.tensor_type]
            blocks = np.asarray(t.data).reshape(-1, size)
            d = blocks[:, at : at + 2].copy().view("<f2").astype(np.float64)
            assert (d >= 2.0**-14).all() and np.isfinite(d).all(), t.name
        else:  # exact draws, fp16/bf16 rounding, or 8/4-bit quantisation of them
            assert abs(w.mean()) < 0.003 and 0.017 < w.std() < 0.023, (t.name, w.std())
    # Distinct rows: the pool is not repeated row by row.
    up = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    rows = np.asarray(up.data).reshape(int(up.shape[1]), -1)
    assert len({r.tobytes() for r in rows}) == len(rows)


def test_determinism(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    for path, seed in ((a, 7), (b, 7), (c, 8)):
        gguf_models.write(path, TINY_LLAMA, "q4_0", layers=1, vocab=VOCAB, seed=seed)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes() and a.stat().st_size == c.stat().st_size
    assert not list(tmp_path.glob("*.partial"))


def test_output_type_and_real_shape(tmp_path: Path) -> None:
    """output_type overrides the head's type; the real Qwen2.5-1.5B layer dimensions (one
    layer, small vocabulary) in Q4_0: 1536 x 8960 MLP matrices in 18-byte blocks of 32."""
    path = tmp_path / "m.gguf"
    info = gguf_models.write(
        path, "qwen2-1.5b", "q4_0", layers=1, vocab=512, seed=0, output_type="q8_0"
    )
    reader = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["output.weight"] == QT.Q8_0 and info["types"]["output"] == "q8_0"
    h, f, q, kv = 1536, 8960, 12 * 128, 2 * 128
    matrices = (q * h + 2 * kv * h + h * q + 3 * h * f) // 32 * 18
    assert info["weight_bytes_per_layer"] == matrices + 4 * (2 * h + q + 2 * kv)
    assert info["context_length"] == 32768 and field(reader, "qwen2.context_length") == 32768


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arch": "gpt-j", "qtype": "q4_0"}, "arch must be one of"),
        ({"arch": TINY_QWEN, "qtype": "q5_0"}, "qtype must be one of"),
        ({"arch": TINY_QWEN, "qtype": "q4_0", "output_type": "q2_k"}, "output_type must be"),
        ({"arch": TINY_QWEN, "qtype": "q4_0", "vocab": 100}, "vocab must be >= 260"),
        ({"arch": TINY_QWEN, "qtype": "q4_0", "layers": 0}, "layers must be >= 1"),
        (
            {"arch": dataclasses.replace(TINY_QWEN, hidden=128, head_dim=64), "qtype": "q3_k"},
            "not a whole number of Q3_K blocks",
        ),
    ],
)
def test_bad_input(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    path = tmp_path / "m.gguf"
    kwargs = {"layers": 1, "vocab": VOCAB, **kwargs}
    with pytest.raises(ValueError, match=match):
        gguf_models.write(path, **kwargs)
    assert not list(tmp_path.iterdir())
