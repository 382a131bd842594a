"""tools/k1_model.py on synthetic records, against values computed by hand.

The expected numbers are worked out in the comments from the shapes (Qwen2.5-1.5B: hidden
1536, 12 / 2 heads of 128, MLP 8960; TinyLlama-1.1B: hidden 2048, 32 / 4 heads of 64, MLP
5632) and ggml's block sizes, not by calling the code under test.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import k1_model

# Qwen2.5-1.5B layer: q, o 1536 x 1536 (2 x 2,359,296), k, v 256 x 1536 (2 x 393,216),
# gate, up, down 8960 x 1536 (3 x 13,762,560) = 46,792,704 weights, 23,040 output channels
# (1536 + 256 + 256 + 1536 + 8960 + 8960 + 1536); 2 norms of 1536 + q/k/v biases 2048 = 5120
# small values.
QWEN_BF16_LAYER = 46_792_704 * 2 + 5120 * 2  # 93,595,648
QWEN_W8A8_LAYER = 46_792_704 + 23_040 * 4 + 5120 * 2  # 46,895,104
# INT4 in groups of 128 (every K of the layer is a multiple of 128): half a byte a weight and
# 4 + 1 bytes (scale, zero point) per 128 weights; FP8: a byte a weight and an fp32 scale per
# 128.
QWEN_W4A8_LAYER = 46_792_704 // 2 + 46_792_704 // 128 * 5 + 5120 * 2  # 25,234,432
QWEN_FP8_LAYER = 46_792_704 + 46_792_704 // 128 * 4 + 5120 * 2  # 48,265,216
# TinyLlama layer: q, o 2 x 4,194,304, k, v 2 x 524,288, gate/up/down 3 x 11,534,336 =
# 44,040,192 weights; IQ4_NL 18 bytes per 32 = 24,772,608; 2 f32 norms of 2048 = 16,384.
TINY_IQ4NL_LAYER = 24_772_608 + 16_384  # 24,788,992
TINY_F16_LAYER = 88_080_384 + 16_384  # 88,096,768


def test_layer_bytes() -> None:
    assert k1_model.layer_bytes(k1_model.QWEN, k1_model.OUR_TYPES["rvv"]) == QWEN_BF16_LAYER
    assert k1_model.layer_bytes(k1_model.QWEN, k1_model.OUR_TYPES["rvv-w8a8"]) == (QWEN_W8A8_LAYER)
    assert k1_model.layer_bytes(k1_model.QWEN, k1_model.OUR_TYPES["rvv-w4a8"]) == QWEN_W4A8_LAYER
    assert k1_model.layer_bytes(k1_model.QWEN, k1_model.OUR_TYPES["rvv-fp8"]) == QWEN_FP8_LAYER
    tiny = k1_model.TINYLLAMA
    assert k1_model.layer_bytes(tiny, k1_model.llama_types("iq4_nl")) == TINY_IQ4NL_LAYER
    assert k1_model.layer_bytes(tiny, k1_model.llama_types("f16")) == TINY_F16_LAYER


def test_token_bytes_qwen_bf16_decode() -> None:
    got = k1_model.token_bytes(
        k1_model.QWEN, k1_model.OUR_TYPES["rvv"], layers=28, vocab=151936, context=512
    )
    # 28 layers; head 151,936 x 1536 x 2; K/V: 28 layers x (K+V: 2 x 2 heads x 128 x 2 B =
    # 1024 B) x (512 read + 1 written); embedding row 1536 x 2.
    assert got["layers"] == 28 * QWEN_BF16_LAYER == 2_620_678_144
    assert got["head"] == 466_747_392
    assert got["kv"] == 14_708_736
    assert got["embed"] == 3072
    assert got["total"] == 3_102_137_344


def test_token_bytes_prefill_reads_weights_once_per_prompt() -> None:
    got = k1_model.token_bytes(
        k1_model.TINYLLAMA, k1_model.llama_types("f16"), layers=22, vocab=32000, context=0,
        prompt=128,
    )  # fmt: skip
    # 22 x 88,096,768 / 128; head 32000 x 2048 x 2 / 128; one K/V row written per layer
    # (2 x 4 x 64 x 2 B = 1024 B); embedding row 2048 x 2.
    assert got["layers"] == 15_141_632
    assert got["head"] == 1_024_000
    assert got["kv"] == 22_528
    assert got["total"] == 15_141_632 + 1_024_000 + 22_528 + 4096
    with pytest.raises(ValueError, match="prompt=0"):
        k1_model.token_bytes(k1_model.QWEN, k1_model.OUR_TYPES["rvv"], layers=1, vocab=1,
                             context=0, prompt=0)  # fmt: skip


def test_split_and_projection_of_costs() -> None:
    # cost = 100 + 30 x layers + 2 x vocab
    points = {(1, 4096): 8322.0, (2, 4096): 8352.0, (1, 16384): 32898.0}
    sp = k1_model.split(points)
    assert (sp.per_layer, sp.per_row, sp.fixed) == (30.0, 2.0, 100.0)
    assert sp.at(28, 151936) == (304_812.0, "per-row extrapolation")
    assert sp.at(5, 4096) == (8442.0, "measured vocabulary")  # 8322 + 4 x 30
    # A run at the full vocabulary, 5 above the line, is used as measured.
    points[(1, 151936)] = 304_007.0
    assert k1_model.split(points).at(28, 151936) == (304_817.0, "measured vocabulary")
    # and it is left out of the per-row part when asked to
    assert k1_model.split(points, exclude_vocab=151936).per_row == 2.0


def test_split_needs_two_layer_counts() -> None:
    with pytest.raises(ValueError, match="two layer counts"):
        k1_model.split({(1, 4096): 1.0, (1, 8192): 2.0})
    one_vocab = k1_model.split({(1, 32000): 50.0, (2, 32000): 80.0})
    assert one_vocab.per_row is None
    assert one_vocab.at(22, 32000) == (680.0, "measured vocabulary")
    with pytest.raises(ValueError, match="no run at vocabulary 151936"):
        one_vocab.at(28, 151936)


def test_timing() -> None:
    # 1.6e9 cycles = 1 s on one core; 10.7e9 bytes = 1 s at 10.7 GB/s.
    t1 = k1_model.timing(1.6e9, 10.7e9, 1)
    assert t1["compute_ms"] == pytest.approx(1000.0)
    assert t1["memory_ms"] == pytest.approx(1000.0)
    t4 = k1_model.timing(1.6e9, 10.7e9, 4)
    assert t4["compute_ms"] == pytest.approx(250.0)
    assert t4["time_ms"] == pytest.approx(1000.0)  # memory-bound
    assert t4["sum_ms"] == pytest.approx(1250.0)
    assert t4["tokens_per_s"] == pytest.approx(1.0)
    t8 = k1_model.timing(3.2e9 * 8, 10.7e8, 8)
    assert t8["time_ms"] == pytest.approx(2000.0)  # compute-bound: 25.6e9 / (1.6e9 x 8)
    with pytest.raises(ValueError, match="threads=9"):
        k1_model.timing(1.0, 1.0, 9)


def peer(kind: str, qtype: str, layers: int, cycles: float, **extra: Any) -> dict[str, Any]:
    return {"peer": "llama.cpp", "kind": kind, "arch": "tinyllama-1.1b", "qtype": qtype,
            "vlen": 256, "layers": layers, "vocab": 32000, "insns_per_token": cycles,
            "est_cycles_per_token": cycles, **extra}  # fmt: skip


def test_check_against_published() -> None:
    peers = [
        peer("decode", "iq4_nl", 1, 50e6, context=32, prompt_tokens=None),
        peer("decode", "iq4_nl", 2, 80e6, context=32),
        peer("decode", "iq4_nl", 1, 1e9, context=512),  # a farther context: not used
        peer("decode", "iq4_nl", 1, 1e9, context=32, vlen=128),  # another VLEN: not used
    ]
    chk = k1_model.check(peers)
    assert chk["checked"] == 1
    iq4 = chk["points"][0]
    assert iq4["label"].startswith("IQ4_NL decode")
    # 50e6 + 21 x 30e6 = 680e6 cycles; / (1.6e9 x 8 threads) = 53.125 ms.
    assert iq4["cycles_per_token"] == 680e6
    assert iq4["compute_ms"] == pytest.approx(53.125)
    # 22 x 24,788,992 + head 32000 x 2048 x 210/256 (Q6_K) = 53,760,000 + K/V 22 x 1024 x 33
    # = 743,424 + embedding row 2048 x 18/32 = 1152 -> 599,862,400 B / 10.7 GB/s.
    assert iq4["bytes_per_token"] == 599_862_400
    assert iq4["memory_ms"] == pytest.approx(56.06190654)
    assert iq4["predicted_tokens_per_s"] == pytest.approx(17.83742405)
    assert iq4["log_ratio"] == pytest.approx(math.log(17.83742405 / 7.94))
    assert chk["error"] == pytest.approx(abs(iq4["log_ratio"]))
    assert iq4["tokens_per_s"] == 7.94  # the published figure stays in the row
    assert chk["time_ratio_range"] == pytest.approx([17.83742405 / 7.94] * 2)
    assert all(p["predicted_tokens_per_s"] is None for p in chk["points"][1:])
    # unchecked points still state their memory floor: F16 pp128 16,192,256 B (see below)
    assert chk["points"][3]["memory_floor_ms"] == pytest.approx(1.513294953)
    assert k1_model.check([])["error"] is None


def test_check_prefill_matches_prompt_length() -> None:
    peers = [
        peer("prefill", "f16", 1, 4e6, prompt_tokens=128),
        peer("prefill", "f16", 2, 6e6, prompt_tokens=128),
        peer("prefill", "f16", 2, 9e9, prompt_tokens=64),  # another prompt: not used
        peer("matvec", "f16", 2, 9e9, arch=None),  # not a token: not used
    ]
    f16 = next(p for p in k1_model.check(peers)["points"] if p["qtype"] == "f16")
    assert f16["how"] == "measured vocabulary"
    # a record naming a Q8_0 head: 32000 x 2048 x 34/32 / 128 = 544,000 B instead of F16's
    # 1,024,000
    peers[0]["model"] = {"types": {"output": "q8_0"}}
    q8_head = next(p for p in k1_model.check(peers)["points"] if p["qtype"] == "f16")
    assert q8_head["bytes_per_token"] == 16_192_256 - 1_024_000 + 544_000
    # 4e6 + 21 x 2e6 = 46e6 cycles / 12.8e9 = 3.59375 ms; bytes 16,192,256 / 10.7e9 =
    # 1.51329 ms -> compute-bound, 278.26 tokens/s.
    assert f16["cycles_per_token"] == 46e6
    assert f16["bytes_per_token"] == 16_192_256
    assert f16["time_ms"] == pytest.approx(3.59375)
    assert f16["predicted_tokens_per_s"] == pytest.approx(278.2608696)


def ours(mode: str, layers: int, vocab: int, cycles: float) -> dict[str, Any]:
    return {"mode": mode, "vlen": 256, "layers": layers, "vocab": vocab, "context": 512,
            "insns_per_token": cycles / 2, "est_cycles_per_token": cycles}  # fmt: skip


def test_project_with_error_band() -> None:
    # cycles = 1e5 + 3.3e7 x layers + 1000 x vocab; the full-vocabulary run is 1% above it.
    line = {(1, 4096): 37_196_000.0, (2, 4096): 70_196_000.0, (1, 16384): 49_484_000.0}
    recs = [ours("rvv", lay, voc, c) for (lay, voc), c in line.items()]
    recs.append(ours("rvv", 1, 151936, 185_036_000.0 * 1.01))
    rows = k1_model.project(recs, threads=[8], error=math.log(2))
    assert [r["mode"] for r in rows] == ["rvv"]  # no rvv-w8a8 records: no row
    (row,) = rows
    # measured full vocabulary: 1e5 + 3.3e7 + 151,936,000 = 185,036,000, x 1.01 =
    # 186,886,360; + 27 x 3.3e7 = 1,077,886,360 cycles
    assert row["how"] == "measured vocabulary"
    assert row["cycles_per_token"] == pytest.approx(1_077_886_360.0)
    assert row["insns_per_token"] == pytest.approx(1_077_886_360.0 / 2)
    # the line's prediction at 28 layers: 1e5 + 924e6 + 151,936,000 = 1,076,036,000
    ext = row["extrapolation_check"]
    assert ext["extrapolated"] == pytest.approx(1_076_036_000.0)
    assert ext["ratio"] == pytest.approx(1_076_036_000.0 / 1_077_886_360.0)
    # compute 1,077,886,360 / 12.8e9 = 84.2099 ms; memory 3,102,137,344 B = 289.9193 ms
    assert row["compute_ms"] == pytest.approx(84.20987188)
    assert row["memory_ms"] == pytest.approx(289.9193779)
    assert row["time_ms"] == pytest.approx(289.9193779)
    assert row["time_ms_band"] == pytest.approx([144.959689, 579.8387558])
    assert row["cycles_split"]["per_vocab_row"] == pytest.approx(1000.0)


def test_project_reports_modes_it_cannot_split() -> None:
    rows = k1_model.project([ours("rvv-w8a8", 1, 4096, 1.0)], threads=[1])
    assert [sorted(r) for r in rows] == [["missing", "mode", "model"]]
    assert rows[0]["mode"] == "rvv-w8a8"
    assert "two layer counts" in rows[0]["missing"]


def test_cli_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours_file, out = tmp_path / "ours.json", tmp_path / "k1.json"
    ours_file.write_text(json.dumps([
        ours("rvv-w8a8", 1, 4096, 2e7), ours("rvv-w8a8", 2, 4096, 3.5e7),
        ours("rvv-w8a8", 1, 16384, 2e7 + 12288 * 800),
    ]))  # fmt: skip
    assert k1_model.main(["--ours", str(ours_file), "--peers", str(tmp_path / "none.json"),
                          "--out", str(out), "--threads", "8"]) == 0  # fmt: skip
    rep = json.loads(out.read_text())
    (row,) = rep["projections"]
    # 2e7 - 4096 x 800 - 1.5e7 fixed; full: 1,723,200 + 28 x 1.5e7 + 151,936 x 800
    assert row["cycles_per_token"] == pytest.approx(1_723_200 + 420e6 + 121_548_800)
    assert row["how"] == "per-row extrapolation"
    assert rep["check"]["error"] is None
    assert "model error: not checked" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        k1_model.main(["--threads", "16", "--out", str(out)])


def test_check_prefill_at_one_small_vocabulary_and_nearest_decode_context() -> None:
    peers = [
        peer("prefill", "f16", 1, 4e6, prompt_tokens=128, vocab=4096, context=128),
        peer("prefill", "f16", 2, 6e6, prompt_tokens=128, vocab=4096, context=128),
        # Q3_K decode at context 64 with two vocabularies: 1e6 + 2e7 x L + 100 x V
        peer("decode", "q3_k", 1, 21_409_600.0, vocab=4096, context=64),
        peer("decode", "q3_k", 2, 41_409_600.0, vocab=4096, context=64),
        peer("decode", "q3_k", 1, 22_638_400.0, vocab=16384, context=64),
    ]
    points = {p["qtype"]: p for p in k1_model.check(peers)["points"]}
    assert points["f16"]["cycles_per_token"] == 46e6  # 4e6 + 21 x 2e6, head difference ignored
    assert points["f16"]["how"] == "vocabulary 4096 (head once per prompt)"
    q3 = points["q3_k"]
    # 1e6 + 22 x 2e7 + 32000 x 100 = 444,200,000 cycles, counted at context 64
    assert q3["cycles_per_token"] == pytest.approx(444_200_000.0)
    assert q3["how"] == "per-row extrapolation"
    assert q3["counted_context"] == 64
    # bytes at the published context 32: 22 x (44,040,192 x 110/256 + 16,384) + head
    # 32000 x 2048 x 210/256 + K/V 22 x 1024 x 33 + embedding 2048 x 110/256
    assert q3["bytes_per_token"] == pytest.approx(
        22 * (18_923_520 + 16_384) + 53_760_000 + 743_424 + 880
    )


def test_project_llama_cpp_qwen_types() -> None:
    def rec(layers: int, vocab: int, cycles: float, **kw: Any) -> dict[str, Any]:
        return {**peer("decode", "q8_0", layers, cycles, arch="qwen2-1.5b", vocab=vocab,
                       context=512), **kw}  # fmt: skip

    peers = [
        rec(1, 4096, 10_096_000.0),  # 1e6 + 5e6 x L + 1000 x V
        rec(2, 4096, 15_096_000.0),
        rec(1, 16384, 22_384_000.0),
        rec(1, 4096, 1.0, arch="tinyllama-1.1b"),  # another model: not used
    ]
    (row,) = k1_model.project([], peers, threads=[8])
    assert row["mode"] == "llama.cpp q8_0"
    # 1e6 + 28 x 5e6 + 151,936 x 1000 = 292,936,000 cycles
    assert row["cycles_per_token"] == pytest.approx(292_936_000.0)
    # Q8_0 34 B per 32 weights: 28 x (46,792,704 x 1.0625 + 5120 x 4) + head 151,936 x
    # 1536 x 1.0625 (Q8_0 files keep the head in Q8_0) + K/V (f16) 28 x 1024 x 513 + 1632
    expected = 28 * (49_717_248 + 20_480) + 247_959_552 + 14_708_736 + 1632
    assert row["bytes_per_token"]["total"] == pytest.approx(expected)
