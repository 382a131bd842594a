"""Linear-layer ops (convert_weight_packed, weight_packed_linear, per_token_quant_int8_cpu,
int8_scaled_mm_cpu, int8_scaled_mm_with_quant) against independent torch references:
float64 GEMMs, an exact int64 sum for the int8 products, and SGLang's W8A8 reference
formula (``native_w8a8_per_token_matmul`` in ``sglang/test/cpu_test_utils.py``, rewritten
here) as a second opinion. Plus opcheck, thread-count independence and bad inputs.

Shapes: K and N in {1, 7, 16, 17, 255, 1536, 8960}, M in {1, 2, 5, 64, 300}, capped at a
budget of multiply-adds per case. Emulated runs (riscv64) and ``--rvv-ops-lengths=quick``
use a small budget (a quick subset, the rest reported as skipped);
``RVV_OPS_TEST_LINEAR=full`` runs the whole matrix anyway.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator

import pytest
import rvv_ops
import torch
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SIZES = (1, 7, 16, 17, 255, 1536, 8960)
ROWS = (1, 2, 5, 64, 300)
FULL_BUDGET = 2e7
QUICK_BUDGET = 3e5

LINEAR = torch.ops.sgl_kernel.weight_packed_linear.default
PACK = torch.ops.sgl_kernel.convert_weight_packed.default
QUANT = torch.ops.sgl_kernel.per_token_quant_int8_cpu.default
MM = torch.ops.sgl_kernel.int8_scaled_mm_cpu.default
MMQ = torch.ops.sgl_kernel.int8_scaled_mm_with_quant.default

# Half an ulp of the output dtype (rounding of the fp32 result), relative.
OUT_RTOL = {torch.float32: 2**-24, torch.bfloat16: 2**-8, torch.float16: 2**-11}
# Spacing of the output dtype's subnormals, where relative ulps get larger (fp16 < 6e-5).
SUBNORMAL = {dt: torch.finfo(dt).smallest_normal * torch.finfo(dt).eps for dt in OUT_RTOL}


def quick_mode(config: pytest.Config) -> tuple[bool, str]:
    if os.environ.get("RVV_OPS_TEST_LINEAR") == "full":
        return False, ""
    if platform.machine() == "riscv64":
        return True, "riscv64 (usually emulated): quick linear subset"
    if config.getoption("--rvv-ops-lengths") == "quick":
        return True, "--rvv-ops-lengths=quick: quick linear subset"
    return False, ""


def shapes() -> Iterator[tuple[int, int, int]]:
    for k in SIZES:
        for n in SIZES:
            for m in ROWS:
                if m * k * n <= FULL_BUDGET:
                    yield m, k, n


SHAPES = list(shapes())


def skip_big(
    config: pytest.Config, m: int, k: int, n: int, dtype: torch.dtype | None = None
) -> None:
    """In quick mode: only shapes within QUICK_BUDGET, and fp32 / fp16 only when tiny."""
    quick, why = quick_mode(config)
    macs = m * k * n
    if quick and (macs > QUICK_BUDGET or (dtype not in (None, torch.bfloat16) and macs > 2e4)):
        pytest.skip(f"{why} (RVV_OPS_TEST_LINEAR=full runs this case)")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def float_reference(x: Tensor, w: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """x @ w^T + bias in float64, and the magnitude sum |x| @ |w|^T + |bias|."""
    x64, w64 = x.double(), w.double()
    y = x64 @ w64.T
    mag = x64.abs() @ w64.abs().T
    if bias is not None:
        y = y + bias.double()
        mag = mag + bias.double().abs()
    return y, mag


def assert_linear_close(got: Tensor, ref: Tensor, mag: Tensor, k: int) -> None:
    # fp32 accumulation: each of the K multiply-adds and the bias add rounds once, an error
    # of at most (K + 1) * 2^-24 of the running magnitude; then one rounding to the output.
    tol = (k + 1) * 2.0**-24 * mag + OUT_RTOL[got.dtype] * ref.abs() + SUBNORMAL[got.dtype]
    err = (got.double() - ref).abs()
    bad = err > tol
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} outputs off; worst excess "
        f"{float((err - tol).max()):.3g} (K = {k}, {got.dtype})"
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("m", "k", "n"), SHAPES, ids=lambda v: str(v))
def test_weight_packed_linear(
    request: pytest.FixtureRequest, m: int, k: int, n: int, dtype: torch.dtype
) -> None:
    skip_big(request.config, m, k, n, dtype)
    g = gen(m * 1000003 + k * 101 + n)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / (k**0.5)).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype) if (m + k + n) % 2 else None
    packed = PACK(w)
    assert packed.dtype == dtype and packed.shape[0] == n
    got = LINEAR(x, packed, bias, True)
    assert got.dtype == dtype and got.shape == (m, n)
    ref, mag = float_reference(x, w, bias)
    assert_linear_close(got, ref, mag, k)
    if m * k * n <= QUICK_BUDGET:  # the unpacked path runs the same kernel: bit-exact
        assert torch.equal(LINEAR(x, w, bias, False), got)


@pytest.mark.parametrize(
    ("xdt", "wdt", "bdt"),
    [
        (torch.float32, torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.float32, torch.float32),
        (torch.float16, torch.bfloat16, torch.bfloat16),
        (torch.bfloat16, torch.bfloat16, torch.float32),
    ],
    ids=str,
)
def test_weight_packed_linear_mixed_dtypes(
    xdt: torch.dtype, wdt: torch.dtype, bdt: torch.dtype
) -> None:
    g = gen(7)
    m, k, n = 5, 255, 70
    x = torch.randn(m, k, generator=g).to(xdt)
    w = torch.randn(n, k, generator=g).to(wdt)
    bias = torch.randn(n, generator=g).to(bdt)
    got = rvv_ops.weight_packed_linear(x, rvv_ops.convert_weight_packed(w), bias)
    assert got.dtype == xdt
    ref, mag = float_reference(x, w, bias)
    assert_linear_close(got, ref, mag, k)


def test_weight_packed_linear_layouts() -> None:
    g = gen(11)
    base = torch.randn(9, 300, generator=g, dtype=torch.float32).to(torch.bfloat16)
    x = base[:, 7:263]  # strided rows
    w_big = torch.randn(40, 512, generator=g).to(torch.bfloat16)
    w = w_big[:, ::2]  # a non-contiguous weight: packed from a copy
    got = LINEAR(x, PACK(w), None, True)
    ref, mag = float_reference(x, w, None)
    assert_linear_close(got, ref, mag, 256)
    assert torch.equal(LINEAR(x.contiguous(), PACK(w.contiguous()), None, True), got)
    assert LINEAR(x[:0], PACK(w), None, True).shape == (0, 40)


@pytest.mark.parametrize("lead", [(1, 3), (2, 1, 5), (4, 0)], ids=str)
def test_weight_packed_linear_leading_dimensions(lead: tuple[int, ...]) -> None:
    """mat1 [..., K], as torch's linear takes it: the same rows as the 2-D call, shaped
    [..., N]; a non-contiguous 3-D view is copied first."""
    g = gen(17)
    x = torch.randn(*lead, 33, generator=g).to(torch.bfloat16)
    w = torch.randn(21, 33, generator=g).to(torch.bfloat16)
    bias = torch.randn(21, generator=g)
    got = LINEAR(x, PACK(w), bias, True)
    assert got.shape == (*lead, 21) and got.dtype == torch.bfloat16
    flat = LINEAR(x.reshape(-1, 33), PACK(w), bias, True)
    assert torch.equal(got.reshape(-1, 21), flat)
    if x.numel():
        t = x.transpose(0, 1)  # rows not evenly strided
        assert torch.equal(
            LINEAR(t, PACK(w), bias, True), LINEAR(t.contiguous(), PACK(w), bias, True)
        )
        ref, mag = float_reference(x.reshape(-1, 33), w, bias)
        assert_linear_close(flat, ref, mag, 33)


def test_threads_do_not_change_results() -> None:
    g = gen(13)
    x = torch.randn(7, 1536, generator=g).to(torch.bfloat16)
    w = torch.randn(1000, 1536, generator=g).to(torch.bfloat16)
    wq = torch.randint(-128, 128, (1000, 1536), generator=g, dtype=torch.int8)
    ws = torch.rand(1000, 1, generator=g) / 100
    packed, packed_q = PACK(w), PACK(wq)
    previous = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(
                (LINEAR(x, packed, None, True), MMQ(x, packed_q, ws, None, torch.float32, True))
            )
    finally:
        torch.set_num_threads(previous)
    for a, b in results[1:]:
        assert torch.equal(a, results[0][0]) and torch.equal(b, results[0][1])


# ---- int8 ----


def quant_reference(x: Tensor) -> tuple[Tensor, Tensor]:
    """SGLang's per_token_quant_int8, written out in fp32 (torch.round: half to even; torch
    evaluates ``127 / amax`` as ``127 * reciprocal(amax)``, and so do the kernels)."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1).clamp_min(1e-10)
    q = torch.round(xf * (127 / amax)[:, None]).clamp(-127, 127).to(torch.int8)
    return q, amax / 127


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", SIZES)
def test_per_token_quant_int8(k: int, dtype: torch.dtype) -> None:
    g = gen(k)
    x = (torch.randn(6, k, generator=g) * 4).to(dtype)
    x[2] = 0  # all zeros: scale 1e-10 / 127, q = 0 (SGLang's clamp_min)
    if k >= 3:  # exact .5 ties after scaling by 127 / 127 = 1: round half to even
        x[3] = torch.tensor([127.0, 2.5, -0.5] * (k // 3) + [0.0] * (k % 3)).to(dtype)
    q, s = QUANT(x)
    want_q, want_s = quant_reference(x)
    assert q.dtype == torch.int8 and q.shape == (6, k)
    assert s.dtype == torch.float32 and s.shape == (6,)
    assert torch.equal(s, want_s)
    assert torch.equal(q, want_q)
    assert float(s[2]) == pytest.approx(1e-10 / 127) and not q[2].any()
    if k >= 3:
        assert q[3, :3].tolist() == [127, 2, 0]
    # and it is a faithful quantisation: |q * scale - x| <= scale / 2
    assert ((q.float() * s[:, None] - x.float()).abs() <= s[:, None] * 0.5001).all()


def int8_reference(
    a: Tensor, w: Tensor, sa: Tensor, sw: Tensor, bias: Tensor | None, out: torch.dtype
) -> Tensor:
    """SGLang's W8A8 formula in fp32: (sa * (A @ W^T)) * sw + bias, the product exact."""
    acc = (a.long() @ w.long().T).float()  # exact int64, rounded once to fp32
    y = sa.view(-1, 1) * acc * sw.view(1, -1)
    if bias is not None:
        y = y + bias.float()
    return y.to(out)


@pytest.mark.parametrize(("m", "k", "n"), SHAPES, ids=lambda v: str(v))
def test_int8_scaled_mm(request: pytest.FixtureRequest, m: int, k: int, n: int) -> None:
    skip_big(request.config, m, k, n)
    g = gen(m * 7919 + k * 31 + n)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    packed = PACK(w)
    assert packed.dtype == torch.int8 and packed.shape[0] == n
    # Unit scales, fp32 out: the exact int64 sum rounded once to fp32.
    ones_m, ones_n = torch.ones(m), torch.ones(n, 1)
    got = MM(a, packed, ones_m, ones_n, None, torch.float32, True)
    exact = (a.long() @ w.long().T).double().float()
    assert torch.equal(got, exact)
    # Scales, bias and 16-bit outputs against SGLang's formula.
    out = DTYPES[(m + k + n) % 3]
    sa = torch.rand(m, 1, generator=g) / 50 + 1e-3
    sw = torch.rand(n, 1, generator=g) / 50 + 1e-3
    bias = torch.randn(n, generator=g) if (m + n) % 2 else None
    got = MM(a, packed, sa, sw, bias, out, True)
    want = int8_reference(a, w, sa, sw, bias, torch.float32)
    # The same fp32 operations in another association: a few fp32 ulps, then the output.
    tol = 4 * 2.0**-24 * want.abs() + OUT_RTOL[out] * want.abs() + SUBNORMAL[out]
    assert got.dtype == out and got.shape == (m, n)
    assert ((got.double() - want.double()).abs() <= tol.double()).all()
    if m * k * n <= QUICK_BUDGET:
        assert torch.equal(MM(a, w, sa, sw, bias, out, False), got)


def test_int8_extreme_sums_are_exact() -> None:
    # K = 8960 products of -128 * -128 (past int16 and fp32's 2^24), and 127 * -128.
    k = 8960
    for av, wv in ((-128, -128), (127, -128)):
        a = torch.full((3, k), av, dtype=torch.int8)
        w = torch.full((5, k), wv, dtype=torch.int8)
        w[1, 0] = 127
        got = MM(a, PACK(w), torch.ones(3), torch.ones(5), None, torch.float32, True)
        assert torch.equal(got, (a.long() @ w.long().T).double().float())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("m", "k", "n"), [(1, 1536, 8960), (5, 17, 255), (64, 255, 17), (300, 16, 7)]
)
def test_int8_scaled_mm_with_quant(
    request: pytest.FixtureRequest, m: int, k: int, n: int, dtype: torch.dtype
) -> None:
    skip_big(request.config, m, k, n)
    g = gen(m + k + n)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    sw = torch.rand(n, 1, generator=g) / 50 + 1e-3
    bias = torch.randn(n, generator=g).to(dtype)
    packed = PACK(w)
    got = MMQ(x, packed, sw, bias, dtype, True)
    q, s = QUANT(x)
    # Bit-identical to quantising then multiplying.
    assert torch.equal(got, MM(q, packed, s, sw, bias, dtype, True))
    # Second opinion: SGLang's reference formulas, with our own quantisation reference.
    want_q, want_s = quant_reference(x)
    want = int8_reference(want_q, w, want_s, sw, bias, dtype)
    tol = (
        4 * 2.0**-24 * want.double().abs()
        + 2 * OUT_RTOL[dtype] * want.double().abs()
        + SUBNORMAL[dtype]
    )
    assert ((got.double() - want.double()).abs() <= tol).all()
    # And close to the float layer it approximates (int8 error: ~1% of the magnitudes).
    dense = x.double() @ (w.double() * sw.double()).T + bias.double()
    # |x - q * scale| <= scale / 2 per element, summed against |w * sw|; then the output.
    bound = 0.5 * want_s.double()[:, None] * (w.double() * sw.double()).abs().sum(1)[None, :]
    tol = 1.01 * bound + 2 * OUT_RTOL[dtype] * dense.abs() + 1e-6
    assert ((got.double() - dense).abs() <= tol).all()


def test_wrappers_and_defaults() -> None:
    g = gen(5)
    x = torch.randn(3, 33, generator=g).to(torch.bfloat16)
    w = torch.randint(-127, 128, (9, 33), generator=g, dtype=torch.int8)
    sw = torch.rand(9, generator=g) / 50 + 1e-3
    packed = rvv_ops.convert_weight_packed(w)
    out = rvv_ops.int8_scaled_mm_with_quant(x, packed, sw)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 9)
    q, s = rvv_ops.per_token_quant_int8(x)
    assert torch.equal(out, rvv_ops.int8_scaled_mm(q, packed, s, sw, out_dtype=torch.bfloat16))
    assert torch.equal(
        rvv_ops.int8_scaled_mm(q, w, s, sw, out_dtype=torch.float32, is_packed=False),
        MM(q, packed, s, sw, None, torch.float32, True),
    )


# ---- opcheck ----


def _opcheck_samples() -> list[tuple[str, object, tuple[object, ...]]]:
    g = gen(3)
    out: list[tuple[str, object, tuple[object, ...]]] = []
    for dt in DTYPES:
        w = torch.randn(20, 17, generator=g).to(dt)
        x = torch.randn(3, 17, generator=g).to(dt)
        out.append((f"pack {dt}", PACK, (w,)))
        out.append((f"linear {dt}", LINEAR, (x, PACK(w), torch.randn(20).to(dt), True)))
        out.append((f"linear unpacked {dt}", LINEAR, (x, w, None, False)))
        out.append((f"quant {dt}", QUANT, (x,)))
        wq = torch.randint(-128, 128, (20, 17), generator=g, dtype=torch.int8)
        out.append((f"mmq {dt}", MMQ, (x, PACK(wq), torch.rand(20, 1), None, dt, True)))
    a = torch.randint(-128, 128, (4, 17), generator=g, dtype=torch.int8)
    wq = torch.randint(-128, 128, (20, 17), generator=g, dtype=torch.int8)
    out.append(("pack int8", PACK, (wq,)))
    out.append(
        (
            "mm",
            MM,
            (a, PACK(wq), torch.rand(4), torch.rand(20), torch.randn(20), torch.bfloat16, True),
        )
    )
    out.append(
        (
            "mm unpacked",
            MM,
            (a, wq, torch.rand(4, 1), torch.rand(20, 1), None, torch.float16, False),
        )
    )
    out.append(
        ("linear 3-D", LINEAR, (torch.randn(2, 3, 16), PACK(torch.randn(8, 16)), None, True))
    )
    return out


SAMPLES = _opcheck_samples()


@pytest.mark.parametrize("sample", range(len(SAMPLES)), ids=[s[0] for s in SAMPLES])
def test_opcheck(sample: int) -> None:
    _, op, args = SAMPLES[sample]
    torch.library.opcheck(op, args)  # type: ignore[arg-type]


# ---- bad inputs ----


def test_errors_dtypes() -> None:
    w = torch.randn(8, 16)
    with pytest.raises(TypeError, match=r"convert_weight_packed: weight has dtype torch.float64"):
        PACK(w.double())
    with pytest.raises(TypeError, match=r"weight_packed_linear: mat1 has dtype torch.int32"):
        LINEAR(torch.ones(2, 16, dtype=torch.int32), PACK(w), None, True)
    with pytest.raises(TypeError, match=r"weight_packed_linear: mat2 has dtype torch.int8"):
        LINEAR(torch.randn(2, 16), PACK(w.to(torch.int8)), None, True)
    with pytest.raises(TypeError, match=r"int8_scaled_mm_cpu: mat1 has dtype torch.float32"):
        MM(
            torch.randn(2, 16),
            PACK(w.to(torch.int8)),
            torch.ones(2),
            torch.ones(8),
            None,
            torch.float32,
            True,
        )
    with pytest.raises(TypeError, match=r"out_dtype is torch.int32"):
        MMQ(torch.randn(2, 16), PACK(w.to(torch.int8)), torch.ones(8), None, torch.int32, True)
    with pytest.raises(TypeError, match=r"scales2 has dtype torch.float64"):
        MMQ(
            torch.randn(2, 16),
            PACK(w.to(torch.int8)),
            torch.ones(8).double(),
            None,
            torch.float32,
            True,
        )
    with pytest.raises(TypeError, match=r"per_token_quant_int8_cpu: A has dtype torch.int8"):
        QUANT(torch.ones(2, 3, dtype=torch.int8))


def test_errors_shapes_and_headers() -> None:
    w = torch.randn(8, 16)
    packed = PACK(w)
    with pytest.raises(ValueError, match=r"weight is 1-d .*expected a 2-D tensor"):
        PACK(torch.randn(16))
    with pytest.raises(ValueError, match=r"is empty; expected N >= 1 and K >= 1"):
        PACK(torch.randn(0, 16))
    with pytest.raises(
        ValueError, match=r"was packed for K = 16 input channels; expected mat1.size\(1\) = 15"
    ):
        LINEAR(torch.randn(2, 15), packed, None, True)
    with pytest.raises(ValueError, match=r"does not start with a packed-weight header"):
        LINEAR(torch.randn(2, 16), w, None, True)
    with pytest.raises(ValueError, match=r"mat2 .* has K = 16; expected mat1.size\(1\) = 15"):
        LINEAR(torch.randn(2, 15), w, None, False)
    with pytest.raises(ValueError, match=r"mat1 .* has 1 dimensions; expected \[\.\.\., K\]"):
        LINEAR(torch.randn(16), packed, None, True)
    with pytest.raises(ValueError, match=r"bias .* does not have N = 8 elements"):
        LINEAR(torch.randn(2, 16), packed, torch.randn(9), True)
    tampered = packed.clone()
    tampered.view(torch.uint8).view(-1)[32] ^= 1  # bytes 32..39: the panel width
    with pytest.raises(ValueError, match=r"inconsistent packed-weight header"):
        LINEAR(torch.randn(2, 16), tampered, None, True)
    with pytest.raises(ValueError, match=r"not contiguous or not 4-byte aligned"):
        LINEAR(torch.randn(2, 16), packed.t(), None, True)
    # A float packing read as int8 (and vice versa) is refused by its header's dtype.
    packed_q = PACK(w.to(torch.int8))
    with pytest.raises(ValueError, match=r"inconsistent packed-weight header"):
        MM(
            torch.ones(2, 16, dtype=torch.int8),
            packed.view(torch.int8)[:, : packed_q.shape[1]].contiguous(),
            torch.ones(2),
            torch.ones(8),
            None,
            torch.float32,
            True,
        )
    with pytest.raises(ValueError, match=r"scales1 .* does not have 2 elements"):
        MM(
            torch.ones(2, 16, dtype=torch.int8),
            packed_q,
            torch.ones(3),
            torch.ones(8),
            None,
            torch.float32,
            True,
        )
    with pytest.raises(ValueError, match=r"scales2 .* does not have 8 elements"):
        MMQ(torch.randn(2, 16), packed_q, torch.ones(8, 2), None, torch.float32, True)
