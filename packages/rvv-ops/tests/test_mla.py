"""The multi-head latent attention ops (csrc/mla.cpp): bmm_cpu, qkv_proj_with_rope and
qkv_proj_with_rope_fused_weight against float64 references written here from torch ops
(matrix products, RMSNorm and GPT-J RoPE spelled out), rounding to the activations' dtype
where sgl-kernel does; SGLang 0.5.23's calling pattern (forward_mla_fused_rope_cpu.py);
bad inputs; torch.library.opcheck."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import rvv_ops
import torch
from bad_input import Bad, Cases
from rvv_ops import mla
from torch import Tensor

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# (atol, rtol) of outputs of size ~1 after a chain of products rounded at each step.
TOL = {
    torch.float32: (2e-4, 2e-4),
    torch.bfloat16: (4e-2, 2e-2),
    torch.float16: (6e-3, 4e-3),
}
BMM = torch.ops.sgl_kernel.bmm_cpu.default
QKV = torch.ops.sgl_kernel.qkv_proj_with_rope.default
FUSED = torch.ops.sgl_kernel.qkv_proj_with_rope_fused_weight.default


def pack(weight: Tensor) -> Tensor:
    return rvv_ops.convert_weight_packed(weight)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


# ---------------------------------------------------------------------------------------
# bmm_cpu


def bmm_ref(mat1: Tensor, mat2: Tensor, dtype: torch.dtype) -> Tensor:
    """out[b, m, n] = sum_k mat1[b, m, k] * mat2[b, n, k], float64, rounded once."""
    a, w = mat1.double(), mat2.double()
    out = (a.unsqueeze(2) * w.unsqueeze(1)).sum(-1)
    return out.to(dtype)


# (B, M, N, K): batch 1, empty, odd sizes, panel tails, DeepSeek-V2-Lite's w_vc shape
# (heads 16, kv_lora_rank 512 -> v_head_dim 128) scaled down.
BMM_SHAPES = [
    (1, 1, 1, 1),
    (1, 5, 17, 31),
    (3, 7, 33, 64),
    (5, 2, 128, 48),
    (16, 3, 32, 128),
    (3, 0, 16, 8),
    (0, 4, 16, 8),
]


def _sglang_views(
    b: int, m: int, n: int, k: int, x: Tensor, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor]:
    """SGLang's layout: out = [M, B * N] viewed [M, B, N] and transposed, mat1 a transposed
    [M, B, K] (forward_absorb_fused_mla_rope_cpu_core)."""
    output = torch.full((m, b * n), float("nan"), dtype=dtype)
    out = output.view(m, b, n).transpose(0, 1)
    mat1 = x.to(dtype).transpose(0, 1)  # [B, M, K], strided
    return output, out, mat1


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "plain"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", BMM_SHAPES, ids=str)
def test_bmm(shape: tuple[int, int, int, int], dtype: torch.dtype, packed: bool) -> None:
    b, m, n, k = shape
    g = _gen(b * 1000 + m * 100 + n + k)
    x = _randn(g, m, b, k).to(dtype)  # [M, B, K] as SGLang's attention output
    w = _randn(g, b, n, k, scale=k**-0.5).to(dtype)
    output, out, mat1 = _sglang_views(b, m, n, k, x, dtype)
    mat2 = pack(w) if packed and b > 0 else w
    mla.bmm(out, mat1, mat2, packed)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out, bmm_ref(mat1, w, dtype), atol=atol / 4, rtol=rtol / 2)
    assert output.shape == (m, b * n)


@pytest.mark.parametrize("fp8", [False, True], ids=["float", "fp8"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bmm_column_slices(dtype: torch.dtype, fp8: bool) -> None:
    """mat1 and out as column slices of wider [M, B, *] buffers, transposed (rows strided in
    both dimensions, as sgl-kernel's own CPU test takes them); sizes off the 32 grid."""
    g = _gen(17)
    b, m, n, k = 17, 11, 160, 96
    mat1 = _randn(g, m, b, k + 64).to(dtype).narrow(2, 0, k).transpose(0, 1)
    out = torch.full((m, b, n + 64), float("nan"), dtype=dtype).narrow(2, 0, n).transpose(0, 1)
    w = _randn(g, b, n, k, scale=k**-0.5)
    scale = None
    if fp8:
        w8 = (w * 64).to(torch.float8_e4m3fn)
        scale = torch.tensor([1 / 64])  # a one-element 1-D scale is accepted too
        w = w8.double() / 64
    mat2 = w8 if fp8 else w.to(dtype)
    BMM(out, mat1, pack(mat2), True, scale)
    want = bmm_ref(mat1, w if fp8 else mat2, dtype)
    torch.testing.assert_close(out, want, atol=TOL[dtype][0] / 4, rtol=TOL[dtype][1] / 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bmm_contiguous_and_mixed_weight_dtype(dtype: torch.dtype) -> None:
    g = _gen(7)
    mat1 = _randn(g, 4, 6, 40).to(dtype)
    w = _randn(g, 4, 24, 40, scale=0.2).to(torch.bfloat16)  # weight in another dtype
    out = torch.empty(4, 6, 24, dtype=dtype)
    BMM(out, mat1, pack(w), True, None)
    torch.testing.assert_close(out, bmm_ref(mat1, w, dtype), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "plain"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bmm_fp8(dtype: torch.dtype, packed: bool) -> None:
    g = _gen(11)
    b, m, n, k = 3, 5, 40, 72
    mat1 = _randn(g, b, m, k).to(dtype)
    w8 = (_randn(g, b, n, k) * 8).to(torch.float8_e4m3fn)
    scale = torch.tensor(0.01)
    out = torch.empty(b, m, n, dtype=dtype)
    mla.bmm(out, mat1, pack(w8) if packed else w8, packed, scale)
    ref = bmm_ref(mat1, w8.double() * 0.01, dtype)
    torch.testing.assert_close(out, ref, atol=TOL[dtype][0], rtol=TOL[dtype][1])


# ---------------------------------------------------------------------------------------
# qkv_proj_with_rope


@dataclass(frozen=True)
class Mla:
    """An MLA layer's shapes."""

    hidden: int
    q_lora: int
    kv_lora: int
    rope: int
    nope: int
    heads: int


# DeepSeek-style ranks scaled down (qk_rope_head_dim 64 as DeepSeek-V2-Lite), head counts
# that are not powers of two, odd sizes everywhere.
CONFIGS = {
    "v2-like": Mla(hidden=96, q_lora=48, kv_lora=64, rope=64, nope=32, heads=3),
    "odd": Mla(hidden=77, q_lora=33, kv_lora=45, rope=16, nope=19, heads=5),
    "one-head": Mla(hidden=40, q_lora=24, kv_lora=32, rope=8, nope=16, heads=1),
}


@dataclass
class Layer:
    """An MLA layer's tensors (float64 masters, plus those the ops take in `dtype`)."""

    cfg: Mla
    dtype: torch.dtype
    q_a: Tensor  # [q_lora, hidden]
    kv_a: Tensor  # [kv_lora + rope, hidden]
    q_b: Tensor  # [heads * (nope + rope), q_lora]
    w_kc: Tensor  # [heads, kv_lora, nope]
    q_ln: Tensor
    kv_ln: Tensor
    cos_sin: Tensor  # [max_pos, rope]
    eps: float = 1e-6

    def cast(self, t: Tensor) -> Tensor:
        return t.to(self.dtype)


def make_layer(cfg: Mla, dtype: torch.dtype, seed: int = 0) -> Layer:
    g = _gen(seed)
    max_pos = 50
    inv = 1.0 / (10000 ** (torch.arange(0, cfg.rope, 2, dtype=torch.float64) / cfg.rope))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    cos_sin = torch.cat([ang.cos(), ang.sin()], dim=-1)

    def w(*shape: int) -> Tensor:
        return _randn(g, *shape, scale=shape[-1] ** -0.5).to(dtype)

    return Layer(
        cfg,
        dtype,
        q_a=w(cfg.q_lora, cfg.hidden),
        kv_a=w(cfg.kv_lora + cfg.rope, cfg.hidden),
        q_b=w(cfg.heads * (cfg.nope + cfg.rope), cfg.q_lora),
        w_kc=w(cfg.heads, cfg.kv_lora, cfg.nope),
        q_ln=(1 + 0.1 * _randn(g, cfg.q_lora)).to(dtype),
        kv_ln=(1 + 0.1 * _randn(g, cfg.kv_lora)).to(dtype),
        cos_sin=cos_sin.to(dtype),
    )


def rmsnorm_ref(x: Tensor, w: Tensor, eps: float) -> Tensor:
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def rope_gptj_ref(x: Tensor, cos_sin: Tensor, positions: Tensor) -> Tensor:
    """x [T, ..., rope]: pairs (2j, 2j + 1) rotated by the angle of column j."""
    half = cos_sin.shape[-1] // 2
    cs = cos_sin.double()[positions]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (half,)
    cos, sin = cs[:, :half].reshape(shape), cs[:, half:].reshape(shape)
    x = x.double()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x2 * cos + x1 * sin
    return out


def matmul_t(x: Tensor, w: Tensor) -> Tensor:
    """x [M, K] @ w[N, K]^T in float64, written out."""
    return (x.double().unsqueeze(1) * w.double().unsqueeze(0)).sum(-1)


def quant_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8 (SGLang's per_token_quant_int8), float64."""
    x = x.double()
    amax = x.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    return torch.round(x * (127 / amax)).clamp(-127, 127), amax / 127


def proj_ref(x: Tensor, w: Tensor, ws: Tensor | None) -> Tensor:
    if ws is None:
        return matmul_t(x, w)
    q, s = quant_rows(x)
    return matmul_t(q, w) * s * ws.double().reshape(1, -1)


def qkv_ref(
    layer: Layer,
    hidden: Tensor,
    positions: Tensor,
    scales: dict[str, Tensor] | None = None,
    weights: dict[str, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """(q_input, k_input) in float64 from dtype-rounded stages, as sgl-kernel rounds."""
    c, dt = layer.cfg, layer.dtype
    ws = weights or {"q_a": layer.q_a, "kv_a": layer.kv_a, "q_b": layer.q_b}
    sc = scales or {}
    qa = proj_ref(hidden, ws["q_a"], sc.get("q_a")).to(dt)
    kv = proj_ref(hidden, ws["kv_a"], sc.get("kv_a")).to(dt)
    qa = rmsnorm_ref(qa, layer.q_ln, layer.eps).to(dt)
    kv_n = rmsnorm_ref(kv[:, : c.kv_lora], layer.kv_ln, layer.eps).to(dt)
    k_pe = rope_gptj_ref(kv[:, c.kv_lora :], layer.cos_sin, positions).to(dt)
    qb = proj_ref(qa, ws["q_b"], sc.get("q_b")).to(dt).view(-1, c.heads, c.nope + c.rope)
    q_nope = torch.stack(
        [matmul_t(qb[:, h, : c.nope], layer.w_kc[h]) for h in range(c.heads)], dim=1
    ).to(dt)
    q_pe = rope_gptj_ref(qb[:, :, c.nope :], layer.cos_sin, positions).to(dt)
    q = torch.cat([q_nope, q_pe], dim=-1)
    k = torch.cat([kv_n, k_pe], dim=-1).unsqueeze(1)
    return q, k


def _inputs(layer: Layer, tokens: int, seed: int = 1) -> tuple[Tensor, Tensor]:
    g = _gen(seed)
    hidden = _randn(g, tokens, layer.cfg.hidden).to(layer.dtype)
    positions = torch.randint(0, layer.cos_sin.shape[0], (tokens,), generator=g)
    return hidden, positions


def _check(layer: Layer, got: tuple[Tensor, Tensor, Tensor], want: tuple[Tensor, Tensor]) -> None:
    q, k, v = got
    c = layer.cfg
    atol, rtol = TOL[layer.dtype]
    assert q.dtype == k.dtype == v.dtype == layer.dtype
    torch.testing.assert_close(q, want[0], atol=atol, rtol=rtol)
    torch.testing.assert_close(k, want[1], atol=atol, rtol=rtol)
    assert v.shape == (k.shape[0], 1, c.kv_lora)
    # k_input[..., :kv_lora]'s shape and strides (as sgl-kernel's view), its own memory
    assert v.stride() == k[..., : c.kv_lora].stride()
    if k.numel():
        assert v.data_ptr() != k.data_ptr()
    torch.testing.assert_close(v, k[..., : c.kv_lora], atol=0, rtol=0)


def _packed_w_kc(w_kc: Tensor) -> Tensor:
    """SGLang's PackWeightMethod on w_kc: the loader keeps it [H, nope, kv_lora] (stride
    trick), PackWeightMethod transposes dims 1, 2 back and packs the 3-D view."""
    loaded = w_kc.transpose(1, 2).contiguous()  # [H, nope, kv_lora]
    return pack(loaded.transpose(1, 2))


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "plain"])
@pytest.mark.parametrize("tokens", [1, 7, 0])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", CONFIGS)
def test_qkv_proj_with_rope(cfg: str, dtype: torch.dtype, tokens: int, packed: bool) -> None:
    layer = make_layer(CONFIGS[cfg], dtype)
    hidden, positions = _inputs(layer, tokens)

    def p(t: Tensor) -> Tensor:
        return pack(t) if packed else t

    w_kc = _packed_w_kc(layer.w_kc) if packed else layer.w_kc
    got = mla.qkv_proj_with_rope(
        hidden,
        p(layer.q_a),
        p(layer.q_b),
        p(layer.kv_a),
        w_kc,
        layer.q_ln,
        layer.kv_ln,
        positions,
        layer.cos_sin,
        layer.eps,
        is_vnni=packed,
    )
    _check(layer, got, qkv_ref(layer, hidden, positions))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", CONFIGS)
def test_fused_weight_as_sglang_calls_it(cfg: str, dtype: torch.dtype) -> None:
    """forward_absorb_fused_mla_rope_cpu_prepare's 19 arguments, then _core's bmm_cpu on
    the attention output with w_vc, as SGLang 0.5.23 passes them."""
    c = CONFIGS[cfg]
    layer = make_layer(c, dtype, seed=3)
    hidden, positions = _inputs(layer, 6, seed=4)
    fused = pack(torch.cat([layer.q_a, layer.kv_a], dim=0))
    q, k, v = FUSED(
        hidden,
        fused,
        pack(layer.q_b),
        _packed_w_kc(layer.w_kc),
        layer.q_ln,
        layer.kv_ln,
        positions,
        layer.cos_sin,
        layer.eps,
        False,  # use_int8_w8a8
        False,  # use_fp8_w8a16
        None,
        None,
        None,  # w_scale
        True,  # is_vnni
        None,  # block_size
        c.q_lora,
        c.kv_lora,
        c.rope,
    )
    _check(layer, (q, k, v), qkv_ref(layer, hidden, positions))
    # _core: attn_output [M, H * kv_lora] -> bmm with w_vc [H, v_head, kv_lora].
    g = _gen(5)
    v_head = 24
    w_vc_loaded = _randn(g, c.heads, v_head, c.kv_lora, scale=c.kv_lora**-0.5).to(dtype)
    w_vc_loaded = w_vc_loaded.contiguous().transpose(1, 2)  # the loader's [H, kv_lora, v_head]
    w_vc = pack(w_vc_loaded.transpose(1, 2))  # PackWeightMethod
    attn_output = _randn(g, 6, c.heads * c.kv_lora).to(dtype).view(-1, c.heads, c.kv_lora)
    output = torch.empty([6, c.heads * v_head], dtype=dtype)
    attn_bmm_output = output.view([6, c.heads, v_head]).transpose_(0, 1)
    BMM(attn_bmm_output, attn_output.transpose(0, 1), w_vc, True, None)
    want = bmm_ref(attn_output.transpose(0, 1), w_vc_loaded.transpose(1, 2), dtype)
    torch.testing.assert_close(
        output.view(6, c.heads, v_head).transpose(0, 1),
        want,
        atol=TOL[dtype][0] / 4,
        rtol=TOL[dtype][1] / 2,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_strided_hidden_int32_positions_fp32_cache(dtype: torch.dtype) -> None:
    """hidden_states as a column slice (row stride > hidden), int32 positions and an fp32
    cos/sin cache with bf16 / fp16 activations: the same result as the plain call."""
    c = CONFIGS["v2-like"]
    layer = make_layer(c, dtype, seed=51)
    hidden, positions = _inputs(layer, 6, seed=52)
    wide = torch.zeros(6, c.hidden + 8, dtype=dtype)
    wide[:, 4 : 4 + c.hidden] = hidden
    args = (pack(layer.q_a), pack(layer.q_b), pack(layer.kv_a), _packed_w_kc(layer.w_kc))
    base = mla.qkv_proj_with_rope(
        hidden, *args, layer.q_ln, layer.kv_ln, positions, layer.cos_sin, layer.eps
    )
    got = mla.qkv_proj_with_rope(
        wide[:, 4 : 4 + c.hidden],
        *args,
        layer.q_ln,
        layer.kv_ln,
        positions.int(),
        layer.cos_sin.float(),
        layer.eps,
    )
    for g_t, b_t in zip(got, base, strict=True):
        torch.testing.assert_close(g_t, b_t, atol=0, rtol=0)
    layer.cos_sin = layer.cos_sin.float()
    _check(layer, got, qkv_ref(layer, hidden, positions))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_variant(variant: str, dtype: torch.dtype) -> None:
    """The fused op and bmm_cpu on each kernel variant this CPU runs (weights packed under
    it: its VLEN's panel width), FP8 w_kc included."""
    c = CONFIGS["odd"]
    layer = make_layer(c, dtype, seed=41)
    hidden, positions = _inputs(layer, 5, seed=42)
    w_kc = (layer.w_kc.double() / 0.004).to(torch.float8_e4m3fn)
    layer.w_kc = w_kc.double() * 0.004
    got = mla.qkv_proj_with_rope_fused_weight(
        hidden,
        pack(torch.cat([layer.q_a, layer.kv_a])),
        pack(layer.q_b),
        _packed_w_kc(w_kc),
        layer.q_ln,
        layer.kv_ln,
        positions,
        layer.cos_sin,
        layer.eps,
        c.q_lora,
        c.kv_lora,
        c.rope,
        w_scale=torch.tensor(0.004),
    )
    _check(layer, got, qkv_ref(layer, hidden, positions))
    g = _gen(43)
    _, out, mat1 = _sglang_views(c.heads, 5, 24, c.kv_lora, _randn(g, 5, c.heads, c.kv_lora), dtype)
    w = _randn(g, c.heads, 24, c.kv_lora, scale=c.kv_lora**-0.5).to(dtype)
    mla.bmm(out, mat1, pack(w))
    torch.testing.assert_close(
        out, bmm_ref(mat1, w, dtype), atol=TOL[dtype][0] / 4, rtol=TOL[dtype][1] / 2
    )


def _int8_weight(w: Tensor) -> tuple[Tensor, Tensor]:
    """Per-output-channel symmetric int8 of a float weight: (int8 [N, K], fp32 scales [N])."""
    w = w.double()
    s = w.abs().amax(-1).clamp_min(1e-10) / 127
    return torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8), s.float()


@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", ["v2-like", "odd"])
def test_int8_w8a8(cfg: str, dtype: torch.dtype, fused: bool) -> None:
    c = CONFIGS[cfg]
    layer = make_layer(c, dtype, seed=8)
    hidden, positions = _inputs(layer, 5, seed=9)
    q_a, q_a_s = _int8_weight(layer.q_a)
    kv_a, kv_a_s = _int8_weight(layer.kv_a)
    q_b, q_b_s = _int8_weight(layer.q_b)
    common = (layer.q_ln, layer.kv_ln, positions, layer.cos_sin, layer.eps)
    if fused:
        got = mla.qkv_proj_with_rope_fused_weight(
            hidden,
            pack(torch.cat([q_a, kv_a])),
            pack(q_b),
            _packed_w_kc(layer.w_kc),
            *common,
            c.q_lora,
            c.kv_lora,
            c.rope,
            use_int8_w8a8=True,
            qkv_a_proj_scale=torch.cat([q_a_s, kv_a_s]).view(-1, 1),
            q_b_proj_scale=q_b_s,
        )
    else:
        got = mla.qkv_proj_with_rope(
            hidden,
            pack(q_a),
            pack(q_b),
            pack(kv_a),
            _packed_w_kc(layer.w_kc),
            *common,
            use_int8_w8a8=True,
            q_a_proj_scale=q_a_s,
            q_b_proj_scale=q_b_s,
            kv_a_proj_scale=kv_a_s,
        )
    want = qkv_ref(
        layer,
        hidden,
        positions,
        scales={"q_a": q_a_s, "kv_a": kv_a_s, "q_b": q_b_s},
        weights={"q_a": q_a, "kv_a": kv_a, "q_b": q_b},
    )
    # Per-row quantisation may round a value the other way than the float64 reference.
    atol, rtol = TOL[dtype]
    q, k, _ = got
    torch.testing.assert_close(q, want[0], atol=max(atol, 2e-2), rtol=max(rtol, 2e-2))
    torch.testing.assert_close(k, want[1], atol=max(atol, 2e-2), rtol=max(rtol, 2e-2))


def _fp8_blocks(w: Tensor, bn: int, bk: int) -> tuple[Tensor, Tensor, Tensor]:
    """Block-scaled fp8 e4m3 of a float weight [N, K]: (fp8 [N, K], fp32 scales [ceil(N / bn),
    ceil(K / bk)], the dequantised weight in float64)."""
    w = w.double()
    n, k = w.shape
    nb, kb = -(-n // bn), -(-k // bk)
    s = torch.empty(nb, kb, dtype=torch.float64)
    for i in range(nb):
        for j in range(kb):
            s[i, j] = w[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk].abs().max().clamp_min(1e-6)
    s = (s / 448).float().double()
    full = s.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, s.float(), q.double() * full


@pytest.mark.parametrize("w_kc8", [False, True], ids=["w_kc float", "w_kc fp8"])
@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", ["v2-like", "odd"])
def test_fp8_w8a16(cfg: str, dtype: torch.dtype, fused: bool, w_kc8: bool) -> None:
    """Block-scaled FP8 projections (blocks that do not divide q_lora_rank in "odd": the fused
    scales keep each part's blocks), w_kc float or fp8 with its per-tensor w_scale."""
    c = CONFIGS[cfg]
    bn, bk = (16, 32) if cfg == "odd" else (32, 64)
    layer = make_layer(c, dtype, seed=12)
    hidden, positions = _inputs(layer, 4, seed=13)
    q_a, q_a_s, q_a_d = _fp8_blocks(layer.q_a, bn, bk)
    kv_a, kv_a_s, kv_a_d = _fp8_blocks(layer.kv_a, bn, bk)
    q_b, q_b_s, q_b_d = _fp8_blocks(layer.q_b, bn, bk)
    common = (layer.q_ln, layer.kv_ln, positions, layer.cos_sin, layer.eps)
    w_kc, w_scale = layer.w_kc, None
    if w_kc8:
        w_scale = torch.tensor(0.004)
        w_kc = (layer.w_kc.double() / 0.004).to(torch.float8_e4m3fn)
        layer.w_kc = w_kc.double() * 0.004  # the reference's w_kc
    if fused:
        got = mla.qkv_proj_with_rope_fused_weight(
            hidden,
            pack(torch.cat([q_a, kv_a])),
            pack(q_b),
            _packed_w_kc(w_kc),
            *common,
            c.q_lora,
            c.kv_lora,
            c.rope,
            qkv_a_proj_scale=torch.cat([q_a_s, kv_a_s]),
            q_b_proj_scale=q_b_s,
            use_fp8_w8a16=True,
            w_scale=w_scale,
            block_size=[bn, bk],
        )
    else:
        got = mla.qkv_proj_with_rope(
            hidden,
            pack(q_a),
            pack(q_b),
            pack(kv_a),
            _packed_w_kc(w_kc),
            *common,
            q_a_proj_scale=q_a_s,
            q_b_proj_scale=q_b_s,
            kv_a_proj_scale=kv_a_s,
            use_fp8_w8a16=True,
            w_scale=w_scale,
            block_size=[bn, bk],
        )
    want = qkv_ref(layer, hidden, positions, weights={"q_a": q_a_d, "kv_a": kv_a_d, "q_b": q_b_d})
    _check(layer, got, want)


# ---------------------------------------------------------------------------------------
# bad inputs

Z = torch.zeros


def _bmm_defaults() -> dict[str, Any]:
    return {
        "out": Z(2, 3, 16),
        "mat1": Z(2, 3, 8),
        "mat2": Z(2, 16, 8),
        "is_vnni": False,
        "scale": None,
    }


bmm = Cases(BMM, _bmm_defaults(), ("bmm_cpu",))


def _bmm_bad() -> list[Bad]:
    return [
        bmm(ValueError, ("mat1", "3-D"), mat1=Z(3, 8)),
        bmm(ValueError, ("out", "3-D"), out=Z(6, 16)),
        bmm(ValueError, ("mat2", "3-D"), mat2=Z(16, 8)),
        bmm(TypeError, ("mat1", "torch.int32"), mat1=Z(2, 3, 8, dtype=torch.int32)),
        bmm(TypeError, ("out", "torch.bfloat16"), out=Z(2, 3, 16, dtype=torch.bfloat16)),
        bmm(TypeError, ("mat2", "torch.int8"), mat2=Z(2, 16, 8, dtype=torch.int8)),
        bmm(ValueError, ("batch", "3"), mat2=Z(3, 16, 8)),
        bmm(ValueError, ("M = 4",), out=Z(2, 4, 16)),
        bmm(ValueError, ("N = 15",), out=Z(2, 3, 15)),
        bmm(ValueError, ("K = 9", "mat1.size(2) = 8"), mat2=Z(2, 16, 9)),
        bmm(ValueError, ("K = 0",), mat1=Z(2, 3, 0), mat2=Z(2, 16, 0)),
        bmm(TypeError, ("scale is None", "float8"), mat2=Z(2, 16, 8).to(torch.float8_e4m3fn)),
        bmm(TypeError, ("mat2", "float8_e4m3fn when scale"), scale=torch.tensor(1.0)),
        bmm(
            ValueError,
            ("scale", "2 elements"),
            mat2=Z(2, 16, 8).to(torch.float8_e4m3fn),
            scale=torch.ones(2),
        ),
        bmm(
            ValueError,
            ("convert_weight_packed",),
            mat2=Z(2, 16, 8),
            is_vnni=True,
            fake_too=False,
        ),
        bmm(
            ValueError,
            ("last-dimension stride",),
            out=Z(2, 16, 3).transpose(1, 2),
            fake_too=False,
        ),
        bmm(ValueError, ("share memory",), out=Z(2, 1, 16).expand(2, 3, 16), fake_too=False),
    ]


@pytest.mark.parametrize("case", _bmm_bad(), ids=lambda c: " ".join(c.words[1:]))
def test_bmm_bad_input(case: Bad) -> None:
    case.check()


def test_bmm_packed_for_other_k() -> None:
    out, mat1 = Z(2, 3, 16), Z(2, 3, 8)
    with pytest.raises(ValueError, match=r"packed for K = 9.*mat1.size\(2\) = 8"):
        BMM(out, mat1, pack(Z(2, 16, 9)), True, None)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "plain"])
def test_bmm_out_is_mat1(packed: bool) -> None:
    """out sharing memory with mat1: the result as if mat1 were read before out is written."""
    g = _gen(31)
    buf = _randn(g, 2, 3, 16).float()
    w = _randn(g, 2, 8, 8).float()
    want = bmm_ref(buf[..., :8].clone(), w, torch.float32)
    BMM(buf[..., :8], buf[..., :8], pack(w) if packed else w, packed, None)
    torch.testing.assert_close(buf[..., :8], want, atol=1e-5, rtol=1e-5)


def _qkv_defaults(cfg: Mla = CONFIGS["odd"]) -> dict[str, Any]:
    c = cfg
    return {
        "hidden": Z(4, c.hidden),
        "q_a": Z(c.q_lora, c.hidden),
        "q_b": Z(c.heads * (c.nope + c.rope), c.q_lora),
        "kv_a": Z(c.kv_lora + c.rope, c.hidden),
        "w_kc": Z(c.heads, c.kv_lora, c.nope),
        "q_ln": Z(c.q_lora),
        "kv_ln": Z(c.kv_lora),
        "positions": torch.zeros(4, dtype=torch.int64),
        "cos_sin": Z(10, c.rope),
        "eps": 1e-6,
        "int8": False,
        "fp8": False,
        "q_a_s": None,
        "q_b_s": None,
        "kv_a_s": None,
        "w_scale": None,
        "is_vnni": False,
        "block_size": None,
    }


qkv = Cases(QKV, _qkv_defaults(), ("qkv_proj_with_rope",))
C = CONFIGS["odd"]


def _qkv_bad() -> list[Bad]:
    return [
        qkv(ValueError, ("hidden_states", "1-d"), hidden=Z(C.hidden)),
        qkv(TypeError, ("hidden_states", "torch.int64"), hidden=Z(4, C.hidden).long()),
        qkv(ValueError, ("block_size is None", "use_fp8_w8a16"), fp8=True),
        qkv(ValueError, ("both True",), fp8=True, int8=True),
        qkv(ValueError, ("block_size is [16]",), fp8=True, block_size=[16]),
        qkv(TypeError, ("q_a_proj_weight", "torch.float8_e4m3fn"), fp8=True, block_size=[16, 16]),
        qkv(TypeError, ("w_kc", "w_scale is None"),
            w_kc=Z(C.heads, C.kv_lora, C.nope).to(torch.float8_e4m3fn)),
        qkv(ValueError, ("eps", "-1"), eps=-1.0),
        qkv(ValueError, ("w_kc", "2-d"), w_kc=Z(C.kv_lora, C.nope)),
        qkv(ValueError, ("w_kc", "qk_nope_head_dim 20"), w_kc=Z(C.heads, C.kv_lora, 20)),
        qkv(ValueError, ("kv_a_proj_weight", "kv_lora_rank"), kv_a=Z(C.kv_lora, C.hidden)),
        qkv(ValueError, ("qk_rope_head_dim is 15", "even"), kv_a=Z(C.kv_lora + 15, C.hidden),
            cos_sin=Z(10, 15)),
        qkv(ValueError, ("q_a_proj_weight", "K = 76"), q_a=Z(C.q_lora, C.hidden - 1)),
        qkv(ValueError, ("q_b_proj_weight", "heads = 5"), q_b=Z(C.heads * 40 + 1, C.q_lora)),
        qkv(ValueError, ("q_b_proj_weight", "K = 32", "q_lora_rank = 33"),
            q_b=Z(C.heads * (C.nope + C.rope), C.q_lora - 1)),
        qkv(TypeError, ("q_a_proj_weight", "torch.int8"), q_a=Z(C.q_lora, C.hidden).char()),
        qkv(TypeError, ("q_a_layernorm_weight", "torch.bfloat16"), q_ln=Z(C.q_lora).bfloat16()),
        qkv(ValueError, ("kv_a_layernorm_weight", "45 elements"), kv_ln=Z(C.kv_lora + 1)),
        qkv(TypeError, ("positions", "torch.float32"), positions=Z(4)),
        qkv(ValueError, ("positions", "hidden_states.size(0) = 4"), positions=Z(5).long()),
        qkv(ValueError, ("cos_sin_cache", "qk_rope_head_dim = 16"), cos_sin=Z(10, 18)),
        qkv(TypeError, ("cos_sin_cache", "torch.float16"), cos_sin=Z(10, C.rope).half()),
        qkv(ValueError, ("q_a_proj_scale is None", "use_int8_w8a8"), int8=True,
            q_a=Z(C.q_lora, C.hidden).char(), q_b=Z(C.heads * 35, C.q_lora).char(),
            kv_a=Z(C.kv_lora + C.rope, C.hidden).char()),
        qkv(ValueError, ("kv_a_proj_scale", "61 elements"), int8=True,
            q_a=Z(C.q_lora, C.hidden).char(), q_b=Z(C.heads * 35, C.q_lora).char(),
            kv_a=Z(C.kv_lora + C.rope, C.hidden).char(), q_a_s=Z(C.q_lora),
            q_b_s=Z(C.heads * 35), kv_a_s=Z(C.kv_lora)),
        qkv(TypeError, ("w_kc", "float8_e4m3fn when w_scale is given"),
            w_scale=torch.tensor(1.0)),
        qkv(ValueError, ("w_scale", "2 elements"), w_scale=torch.ones(2),
            w_kc=Z(C.heads, C.kv_lora, C.nope).to(torch.float8_e4m3fn)),
        qkv(ValueError, ("positions[2] is 10", "cos_sin_cache.size(0) = 10"),
            positions=torch.tensor([0, 1, 10, 2]), fake_too=False),
        qkv(ValueError, ("q_a_proj_weight", "packed-weight header"), is_vnni=True,
            w_kc=pack(Z(C.heads, C.kv_lora, C.nope)), fake_too=False),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _qkv_bad(), ids=lambda c: " ".join(c.words[1:]))
def test_qkv_bad_input(case: Bad) -> None:
    case.check()


def test_fused_bad_ranks() -> None:
    c = C
    args: list[Any] = list(_qkv_defaults().values())
    hidden, q_a, q_b, kv_a, w_kc, q_ln, kv_ln, pos, cs, eps = args[:10]
    fused = torch.cat([q_a, kv_a])
    base = (hidden, fused, q_b, w_kc, q_ln, kv_ln, pos, cs, eps, False, False, None, None, None,
            False, None)  # fmt: skip
    with pytest.raises(ValueError, match=r"qkv_a_proj_weight.*94 output channels; expected 93"):
        FUSED(*base, c.q_lora - 1, c.kv_lora, c.rope)
    with pytest.raises(ValueError, match=r"w_kc.*kv_lora_rank 45; expected kv_lora_rank = 44"):
        FUSED(*base, c.q_lora, c.kv_lora - 1, c.rope)
    with pytest.raises(ValueError, match="expected all >= 1"):
        FUSED(*base, 0, c.kv_lora, c.rope)
    with pytest.raises(ValueError, match="block_size is None"):
        FUSED(*base[:10], True, *base[11:], c.q_lora, c.kv_lora, c.rope)
    with pytest.raises(TypeError, match=r"w_kc has dtype torch.float8_e4m3fn but w_scale is None"):
        FUSED(*base[:3], w_kc.to(torch.float8_e4m3fn), *base[4:], c.q_lora, c.kv_lora, c.rope)
    with pytest.raises(TypeError, match=r"expected torch.float8_e4m3fn when w_scale is given"):
        FUSED(*base[:13], torch.tensor(1.0), *base[14:], c.q_lora, c.kv_lora, c.rope)


# ---------------------------------------------------------------------------------------
# opcheck


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_bmm(dtype: torch.dtype) -> None:
    g = _gen(21)
    b, m, n, k = 3, 4, 16, 24
    _, out, mat1 = _sglang_views(b, m, n, k, _randn(g, m, b, k), dtype)
    w = _randn(g, b, n, k).to(dtype)
    torch.library.opcheck(BMM, (out, mat1, pack(w), True, None))
    torch.library.opcheck(BMM, (torch.empty(b, m, n, dtype=dtype), mat1, w, False, None))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_qkv(dtype: torch.dtype) -> None:
    c = CONFIGS["odd"]
    layer = make_layer(c, dtype)
    hidden, positions = _inputs(layer, 3)
    torch.library.opcheck(
        QKV,
        (hidden, pack(layer.q_a), pack(layer.q_b), pack(layer.kv_a), _packed_w_kc(layer.w_kc),
         layer.q_ln, layer.kv_ln, positions, layer.cos_sin, layer.eps, False, False, None,
         None, None, None, True, None),
    )  # fmt: skip
    torch.library.opcheck(
        FUSED,
        (hidden, torch.cat([layer.q_a, layer.kv_a]), layer.q_b, layer.w_kc, layer.q_ln,
         layer.kv_ln, positions, layer.cos_sin, layer.eps, False, False, None, None, None,
         False, None, c.q_lora, c.kv_lora, c.rope),
    )  # fmt: skip


def _bytes(t: Tensor) -> Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _opcheck_fp8(op: Any, args: tuple[Any, ...]) -> None:
    """opcheck's schema test compares tensors with arithmetic torch lacks for fp8 on CPU:
    the other tests, and the inputs checked unchanged byte for byte here (out excepted)."""
    before = [_bytes(a).clone() for a in args[1:] if isinstance(a, Tensor)]
    torch.library.opcheck(
        op,
        args,
        test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"),
    )
    after = [_bytes(a) for a in args[1:] if isinstance(a, Tensor)]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))


def test_opcheck_fp8() -> None:
    c = CONFIGS["odd"]
    layer = make_layer(c, torch.bfloat16)
    hidden, positions = _inputs(layer, 3)
    q_a, q_a_s, _ = _fp8_blocks(layer.q_a, 16, 32)
    kv_a, kv_a_s, _ = _fp8_blocks(layer.kv_a, 16, 32)
    q_b, q_b_s, _ = _fp8_blocks(layer.q_b, 16, 32)
    w_kc = layer.w_kc.to(torch.float8_e4m3fn)
    scale = torch.tensor(0.5)
    _opcheck_fp8(
        FUSED,
        (hidden, pack(torch.cat([q_a, kv_a])), pack(q_b), _packed_w_kc(w_kc), layer.q_ln,
         layer.kv_ln, positions, layer.cos_sin, layer.eps, False, True,
         torch.cat([q_a_s, kv_a_s]), q_b_s, scale, True, [16, 32], c.q_lora, c.kv_lora, c.rope),
    )  # fmt: skip
    out = torch.empty(c.heads, 3, c.nope, dtype=torch.bfloat16)
    mat1 = torch.randn(c.heads, 3, c.kv_lora).bfloat16()
    _opcheck_fp8(BMM, (out, mat1, pack(w_kc.transpose(1, 2).contiguous()), True, scale))
