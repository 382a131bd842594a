"""Property-based differential tests of rvv-ops' elementwise ops: rmsnorm /
fused_add_rmsnorm, silu_and_mul / gelu_and_mul / gelu_tanh_and_mul and rotary_embedding,
against the references (and tolerances) rvv-ops' own tests hold them to
(packages/rvv-ops/tests: test_rmsnorm, test_activation, test_rotary; the conformance suite
covers attention only).

Hypothesis draws the shapes (0 and 1 rows, row lengths 1..3000 with odd ones, head counts
and head sizes, partial rotary dimensions), the dtype (fp32 / bf16 / fp16), eps, GPT-J or
neox rotary, int32 / int64 positions, and row-strided views (each row followed by unused
elements, and fused_add_rmsnorm on column slices).

Expectations:

- Outputs match the reference within its tolerance; inputs the op does not write are left
  as they were (fused_add_rmsnorm: ``input`` and ``residual`` hold the expected values).
- Rows are independent: a NaN, +-Inf or the largest finite value in one row (rmsnorm,
  fused_add_rmsnorm: one token) never changes another row's output; for the ``*_and_mul``
  ops a special value at element ``c`` of a row reaches only output element ``c mod d`` of
  that row; for rotary a special value in one token's head reaches only that token's head.
  What the poisoned row / element itself gets is not specified.
"""

from __future__ import annotations

import math
from typing import Any

import rvv_ops
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_activation import OPS as ACTIVATIONS
from test_activation import assert_matches as activation_matches
from test_activation import reference as activation_reference
from test_rmsnorm import TOLERANCES as RMS_TOLERANCES
from test_rmsnorm import reference_fused, reference_rmsnorm
from test_rotary import MAX_POS, cos_sin_cache, reference_rope
from test_rotary import TOLERANCES as ROPE_TOLERANCES
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SPECIALS = ("nan", "inf", "-inf", "max", "-max")
SEEDS = st.integers(0, 2**31 - 1)


def special(dtype: torch.dtype, kind: str) -> float:
    big = torch.finfo(dtype).max
    return {"inf": math.inf, "-inf": -math.inf, "max": big, "-max": -big, "nan": math.nan}[kind]


def values(shape: tuple[int, ...], dtype: torch.dtype, seed: int, pad: int) -> Tensor:
    """Random values of `shape` (times 3) in a row-strided view: each last-dimension row
    followed by `pad` unused elements (pad 0: contiguous)."""
    g = torch.Generator().manual_seed(seed)
    big = (torch.randn(*shape[:-1], shape[-1] + pad, generator=g) * 3.0).to(dtype)
    return big[..., : shape[-1]]


def close(actual: Tensor, expected: Tensor, tolerances: dict[torch.dtype, tuple[float, float]]):  # type: ignore[no-untyped-def]
    rtol, atol = tolerances[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


ROWS = st.integers(0, 5)
COLS = st.one_of(st.integers(1, 40), st.integers(41, 3000))
PADS = st.sampled_from((0, 0, 1, 7))


@given(rows=ROWS, cols=COLS, dtype=st.sampled_from(DTYPES), pad=PADS, seed=SEEDS,
       eps=st.sampled_from((0.0, 1e-6, 1e-5, 0.1)))  # fmt: skip
def test_rmsnorm(rows: int, cols: int, dtype: torch.dtype, pad: int, seed: int, eps: float) -> None:
    x = values((rows, cols), dtype, seed, pad)
    w = (1.0 + 0.5 * values((cols,), torch.float32, seed + 1, 0)).to(dtype)
    before = x.clone()
    close(rvv_ops.rmsnorm(x, w, eps), reference_rmsnorm(x, w, eps), RMS_TOLERANCES)
    assert torch.equal(x, before)


@given(rows=ROWS, cols=COLS, dtype=st.sampled_from(DTYPES), seed=SEEDS, slices=st.booleans())
def test_fused_add_rmsnorm(
    rows: int, cols: int, dtype: torch.dtype, seed: int, slices: bool
) -> None:
    # slices: input and residual as column slices of one buffer each (one row stride)
    pad = 5 if slices else 0
    x, r = values((rows, cols), dtype, seed, pad), values((rows, cols), dtype, seed + 2, pad)
    w = (1.0 + 0.5 * values((cols,), torch.float32, seed + 1, 0)).to(dtype)
    want_x, want_r = reference_fused(x, r, w, 1e-6)
    rvv_ops.fused_add_rmsnorm(x, r, w, 1e-6)
    assert torch.equal(r, want_r)
    close(x, want_x, RMS_TOLERANCES)


@given(rows=st.integers(2, 5), cols=COLS, dtype=st.sampled_from(DTYPES), seed=SEEDS,
       kind=st.sampled_from(SPECIALS), data=st.data())  # fmt: skip
def test_rmsnorm_rows_are_independent(
    rows: int, cols: int, dtype: torch.dtype, seed: int, kind: str, data: Any
) -> None:
    x = values((rows, cols), dtype, seed, 0)
    w = (1.0 + 0.5 * values((cols,), torch.float32, seed + 1, 0)).to(dtype)
    r = data.draw(st.integers(0, rows - 1), label="row")
    x[r, data.draw(st.integers(0, cols - 1), label="col")] = special(dtype, kind)
    rest = [i for i in range(rows) if i != r]
    close(rvv_ops.rmsnorm(x, w)[rest], reference_rmsnorm(x, w, 1e-6)[rest], RMS_TOLERANCES)
    res = values((rows, cols), dtype, seed + 2, 0)
    want_x, want_r = reference_fused(x, res, w, 1e-6)
    rvv_ops.fused_add_rmsnorm(x, res, w, 1e-6)
    assert torch.equal(res[rest], want_r[rest])
    close(x[rest], want_x[rest], RMS_TOLERANCES)


@given(name=st.sampled_from(sorted(ACTIVATIONS)), rows=ROWS, d=COLS,
       dtype=st.sampled_from(DTYPES), pad=PADS, seed=SEEDS)  # fmt: skip
def test_activation_and_mul(
    name: str, rows: int, d: int, dtype: torch.dtype, pad: int, seed: int
) -> None:
    x = values((rows, 2 * d), dtype, seed, pad)
    before = x.clone()
    out = ACTIVATIONS[name][1](x)
    activation_matches(out, activation_reference(name, x), x)
    assert torch.equal(x, before)


@given(name=st.sampled_from(sorted(ACTIVATIONS)), rows=st.integers(1, 4), d=COLS,
       dtype=st.sampled_from(DTYPES), seed=SEEDS, kind=st.sampled_from(SPECIALS),
       data=st.data())  # fmt: skip
def test_activation_special_stays_in_its_element(
    name: str, rows: int, d: int, dtype: torch.dtype, seed: int, kind: str, data: Any
) -> None:
    x = values((rows, 2 * d), dtype, seed, 0)
    r = data.draw(st.integers(0, rows - 1), label="row")
    c = data.draw(st.integers(0, 2 * d - 1), label="col")
    x[r, c] = special(dtype, kind)
    out, want = ACTIVATIONS[name][1](x), activation_reference(name, x)
    # the poisoned output element set aside (0 in both), the rest compared as they are
    out[r, c % d] = want[r, c % d] = 0
    x[r, c] = 0  # the tolerance scales with |gate * up|; the special value is not compared
    activation_matches(out, want, x)


@st.composite
def rope_shapes(draw: st.DrawFn) -> dict[str, Any]:
    head_size = draw(st.sampled_from((2, 4, 6, 16, 34, 64, 80, 128, 256)))
    rotary_dim = 2 * draw(st.integers(1, head_size // 2))
    return {
        "tokens": draw(st.integers(0, 6)),
        "heads": (draw(st.integers(1, 12)), draw(st.integers(1, 4))),
        "head_size": head_size,
        "rotary_dim": rotary_dim,
        "three_d": draw(st.booleans()),
        "pad": draw(PADS),
        "neox": draw(st.booleans()),
        "pos_dtype": draw(st.sampled_from((torch.int32, torch.int64))),
        "cache_fp32": draw(st.booleans()),
    }


def rope_inputs(s: dict[str, Any], dtype: torch.dtype, seed: int) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, MAX_POS, (s["tokens"],), generator=g).to(s["pos_dtype"])
    qk = []
    for i, heads in enumerate(s["heads"]):
        if s["three_d"]:
            x = values((s["tokens"], heads, s["head_size"]), dtype, seed + i, s["pad"])
        else:
            x = values((s["tokens"], heads * s["head_size"]), dtype, seed + i, s["pad"])
        qk.append(x)
    cache = cos_sin_cache(s["rotary_dim"], torch.float32 if s["cache_fp32"] else dtype)
    return pos, qk[0], qk[1], cache


@given(s=rope_shapes(), dtype=st.sampled_from(DTYPES), seed=SEEDS)
def test_rotary_embedding(s: dict[str, Any], dtype: torch.dtype, seed: int) -> None:
    pos, q, k, cache = rope_inputs(s, dtype, seed)
    before = q.clone(), k.clone()
    q_out, k_out = rvv_ops.rotary_embedding(pos, q, k, s["head_size"], cache, s["neox"])
    for out, x in ((q_out, q), (k_out, k)):
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
        close(out, reference_rope(pos, x, s["head_size"], cache, s["neox"]), ROPE_TOLERANCES)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


@given(s=rope_shapes(), dtype=st.sampled_from(DTYPES), seed=SEEDS,
       kind=st.sampled_from(SPECIALS), data=st.data())  # fmt: skip
def test_rotary_special_stays_in_its_head(
    s: dict[str, Any], dtype: torch.dtype, seed: int, kind: str, data: Any
) -> None:
    s = {**s, "tokens": max(s["tokens"], 1), "three_d": True}
    pos, q, k, cache = rope_inputs(s, dtype, seed)
    t = data.draw(st.integers(0, s["tokens"] - 1), label="token")
    h = data.draw(st.integers(0, q.shape[1] - 1), label="head")
    q[t, h, data.draw(st.integers(0, s["head_size"] - 1), label="element")] = special(dtype, kind)
    q_out, k_out = rvv_ops.rotary_embedding(pos, q, k, s["head_size"], cache, s["neox"])
    want = reference_rope(pos, q, s["head_size"], cache, s["neox"])
    keep = torch.ones(q.shape[:2], dtype=torch.bool)
    keep[t, h] = False
    close(q_out[keep], want[keep], ROPE_TOLERANCES)
    close(k_out, reference_rope(pos, k, s["head_size"], cache, s["neox"]), ROPE_TOLERANCES)
