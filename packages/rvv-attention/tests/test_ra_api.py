"""KVCache validation, bad inputs, the INT8 policy, the scratch pool and attention()."""

from __future__ import annotations

import math

import pytest
import rvv_attention as ra
import torch
from conformance.kvcache import quantize_int8
from conformance.reference import assert_matches, attention
from ra_testing import make_paged, rows_of
from rvv_attention import _kernel
from torch import Tensor

# -- KVCache ------------------------------------------------------------------------------


def test_int8_cache_without_scales_names_the_argument() -> None:
    k = torch.zeros(4, 2, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match="k_scales is required for an int8 cache"):
        ra.KVCache(k, k.clone())
    with pytest.raises(ValueError, match="v_scales is required for an int8 cache"):
        ra.KVCache(k, k.clone(), k_scales=torch.ones(4, 2))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"k_scales": torch.ones(4, 2, dtype=torch.float16)}, TypeError, r"torch\.float32"),
        ({"k_scales": torch.ones(4, 3)}, ValueError, r"expected \[4, 2\]"),
    ],
)
def test_int8_scale_checks(kwargs: dict[str, Tensor], exc: type[Exception], match: str) -> None:
    k = torch.zeros(4, 2, 8, dtype=torch.int8)
    with pytest.raises(exc, match=match):
        ra.KVCache(k, k.clone(), **{"v_scales": torch.ones(4, 2), **kwargs})


def test_kvcache_checks() -> None:
    k = torch.zeros(4, 2, 8)
    with pytest.raises(ValueError, match="same number of tokens"):
        ra.KVCache(k, torch.zeros(5, 2, 8))
    with pytest.raises(TypeError, match="expected the same"):
        ra.KVCache(k, torch.zeros(4, 2, 8, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="not a KV-cache dtype"):
        ra.KVCache(k.to(torch.int32), k.to(torch.int32))
    with pytest.raises(ValueError, match=r"k_scale is 0\.0"):
        ra.KVCache(k, k, k_scale=0.0)
    with pytest.raises(ValueError, match="applies to int8 caches only"):
        ra.KVCache(k, k, k_scales=torch.ones(4, 2))
    with pytest.raises(ValueError, match="expected k"):
        ra.KVCache(torch.zeros(4, 8), torch.zeros(4, 8))
    c = ra.KVCache(k, k[:, :, :4])  # MLA: V a view of K
    assert c.kind == "float" and c.tokens == 4 and c.kv_heads == 2
    with pytest.raises(AttributeError):
        c.k_scale = 2.0  # type: ignore[misc]


# -- INT8 / fp8 write policy ----------------------------------------------------------------


def test_quantize_int8_policy() -> None:
    x = torch.randn(5, 3, 17, generator=torch.Generator().manual_seed(0))
    x[1, 2] = 0.0  # an all-zero row: scale 0, zeros
    x[2, 0, 3] = 0.5 * x[2, 0].abs().max() / 127 * 3  # a tie candidate after scaling
    q, s = ra.quantize_int8(x)
    qr, sr = quantize_int8(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert torch.equal(q, qr) and torch.equal(s, sr)
    assert float(s[1, 2]) == 0.0 and not q[1, 2].any()
    assert int(q.abs().max()) == 127


def test_round_half_even() -> None:
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5]])  # scale 1: stored = round(x)
    q, s = ra.quantize_int8(x)
    assert float(s[0]) == 1.0
    assert q[0].tolist() == [127, 0, 2, 2, 0, -2]


@pytest.mark.parametrize("mode", ["kernel", "fallback"])
def test_int8_and_fp8_writes_are_the_same_bytes(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both implementations write the bytes of the conformance suite's INT8 / fp8 policy
    (tests/conformance checks them over the whole case matrix)."""
    monkeypatch.setenv(ra.ENV_IMPL, mode)
    for cache_dtype in (torch.int8, torch.float8_e4m3fn, torch.float8_e5m2):
        p = make_paged(
            [3, 4],
            kv_heads=2,
            head_dim=8,
            v_head_dim=8,
            dtype=torch.bfloat16,
            cache_dtype=cache_dtype,
        )
        key = torch.randn(2, 2, 8).to(torch.bfloat16) * 3
        loc = torch.stack(
            [p.req_to_token[p.req_pool_indices[0], 2], p.req_to_token[p.req_pool_indices[1], 3]]
        )
        ra.decode(
            torch.randn(2, 4, 8).to(torch.bfloat16),
            p.cache,
            torch.zeros(2, 4, 8, dtype=torch.bfloat16),
            p.req_to_token,
            p.req_pool_indices,
            torch.tensor([3, 4]),
            sm_scale=0.3,
            loc=loc,
            key=key,
            value=key,
        )
        if cache_dtype == torch.int8:
            qr, sr = quantize_int8(key)
            assert torch.equal(rows_of(p.cache.k, loc), qr)
            assert p.cache.k_scales is not None and torch.equal(p.cache.k_scales[loc], sr)
        else:
            want = (key.float() / p.cache.k_scale).to(cache_dtype)
            got = rows_of(p.cache.k, loc).view(torch.uint8)
            assert torch.equal(got, want.view(torch.uint8))


# -- bad inputs ---------------------------------------------------------------------------


def _decode_args() -> dict[str, object]:
    p = make_paged([3, 4], kv_heads=2, head_dim=8, v_head_dim=8, dtype=torch.float32)
    return {
        "q": torch.randn(2, 4, 8),
        "cache": p.cache,
        "out": torch.zeros(2, 4, 8),
        "req_to_token": p.req_to_token,
        "req_pool_indices": p.req_pool_indices,
        "seq_lens": torch.tensor([3, 4]),
        "sm_scale": 0.3,
    }


@pytest.mark.parametrize("mode", ["auto", "fallback"])
@pytest.mark.parametrize(
    ("change", "exc", "match"),
    [
        ({"q": torch.randn(2, 4, 8, dtype=torch.float64)}, TypeError, "q has dtype"),
        ({"q": torch.randn(2, 4, 8).to(torch.bfloat16)}, TypeError, "must\\s+have the query's"),
        ({"q": torch.randn(2, 3, 8)}, ValueError, "not a multiple"),
        ({"q": torch.randn(2, 4, 7)}, ValueError, "head_dim 7"),
        ({"out": torch.zeros(2, 4, 7)}, ValueError, "out has shape"),
        ({"out": torch.zeros(2, 4, 8, dtype=torch.float16)}, TypeError, "out has dtype"),
        ({"sm_scale": math.nan}, ValueError, "sm_scale is nan"),
        ({"logit_cap": -1.0}, ValueError, "logit_cap is -1.0"),
        ({"sinks": torch.zeros(3)}, ValueError, "sinks has shape"),
        ({"seq_lens": torch.tensor([3.0, 4.0])}, TypeError, "seq_lens has dtype"),
        ({"key": torch.randn(2, 2, 8)}, ValueError, "given together"),
        ({"key": torch.randn(2, 2, 8), "value": torch.randn(2, 2, 8)}, ValueError, "without loc"),
        ({"cross_attention": True}, ValueError, "needs encoder_lens"),
        (
            {"cross_attention": True, "encoder_lens": torch.tensor([1, 2, 3])},
            ValueError,
            r"encoder_lens has shape \[3\]; expected \[2\] \(one entry per request",
        ),
        ({"encoder_lens": torch.tensor(1)}, ValueError, r"encoder_lens has shape \[\]"),
        (
            {"seq_lens": torch.tensor([3])},
            ValueError,
            r"seq_lens has shape \[1\]; expected \[2\] \(one entry per request, as q's rows",
        ),
        ({"seq_lens": torch.tensor([], dtype=torch.int64)}, ValueError, "seq_lens has shape"),
        ({"req_pool_indices": torch.tensor([[0, 1]])}, ValueError, "req_pool_indices has shape"),
        ({"cache": "not a cache"}, TypeError, "must be an rvv_attention.KVCache"),
        ({"req_pool_indices": torch.tensor([0, 99])}, ValueError, "req_pool_indices"),
        ({"seq_lens": torch.tensor([3, 40])}, ValueError, "req_to_token"),
        (
            {
                "key": torch.randn(2, 2, 8),
                "value": torch.randn(2, 2, 8),
                "loc": torch.tensor([0, 999]),
            },
            ValueError,
            "loc",
        ),
        (
            {
                "key": torch.randn(2, 2, 8),
                "value": torch.randn(2, 2, 8),
                "loc": torch.tensor([0, 1]),
                "seq_lens": torch.tensor([3, 40]),
            },
            ValueError,
            "req_to_token",
        ),
    ],
)
def test_decode_bad_inputs(
    mode: str,
    change: dict[str, object],
    exc: type[Exception],
    match: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, mode)
    args = {**_decode_args(), **change}
    before = args["cache"].k.clone() if isinstance(args["cache"], ra.KVCache) else None
    with pytest.raises(exc, match=match):
        ra.decode(**args)  # type: ignore[arg-type]
    if before is not None:
        assert isinstance(args["cache"], ra.KVCache)
        assert torch.equal(args["cache"].k, before), "a failed call wrote the cache"


def test_table_entry_outside_cache_is_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for mode in ("auto", "fallback"):
        monkeypatch.setenv(ra.ENV_IMPL, mode)
        ra.clear_cache()
        args = _decode_args()
        table = args["req_to_token"]
        assert isinstance(table, Tensor)
        table = table.clone()
        table[args["req_pool_indices"][0], 0] = 10_000  # type: ignore[index]
        args["req_to_token"] = table
        with pytest.raises(ValueError, match="10000"):
            ra.decode(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["auto", "fallback"])
def test_decode_with_key_needs_nonempty_lengths(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, mode)
    args = _decode_args()
    args.update(
        seq_lens=torch.tensor([0, 4]),
        loc=torch.tensor([0, 1]),
        key=torch.randn(2, 2, 8),
        value=torch.randn(2, 2, 8),
    )
    with pytest.raises(ValueError, match="counts the new token"):
        ra.decode(**args)  # type: ignore[arg-type]


def test_extend_bad_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    p = make_paged([4], kv_heads=1, head_dim=8, v_head_dim=8, dtype=torch.float32)
    base = {
        "q": torch.randn(2, 2, 8),
        "k": torch.randn(2, 1, 8),
        "v": torch.randn(2, 1, 8),
        "cache": p.cache,
        "out": torch.zeros(2, 2, 8),
        "req_to_token": p.req_to_token,
        "req_pool_indices": p.req_pool_indices,
        "seq_lens": torch.tensor([4]),
        "extend_seq_lens": torch.tensor([2]),
        "sm_scale": 0.3,
    }
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"v": None}, ValueError, "given together"),
        ({"k": torch.randn(3, 1, 8)}, ValueError, "k has shape"),
        ({"k": torch.randn(2, 1, 8).to(torch.float16)}, TypeError, "k has dtype"),
        ({"out_cache_loc": torch.tensor([1])}, ValueError, "out_cache_loc has shape"),
        ({"extend_seq_lens": torch.tensor([5])}, ValueError, "extend_seq_lens"),
        ({"cross_attention": True}, ValueError, "needs encoder_lens"),
        ({"encoder_lens": torch.tensor([0, 2])}, ValueError, r"encoder_lens has shape \[2\]"),
        ({"seq_lens": torch.tensor(4)}, ValueError, r"seq_lens has shape \[\]; expected 1-D"),
        (
            {"extend_seq_lens": torch.tensor([2, 0])},
            ValueError,
            r"extend_seq_lens has shape \[2\]; expected \[1\] \(one entry per request, as seq_lens",
        ),
        ({"req_pool_indices": torch.tensor([0, 1])}, ValueError, "req_pool_indices has shape"),
    ]
    for mode in ("auto", "fallback"):
        monkeypatch.setenv(ra.ENV_IMPL, mode)
        ra.clear_cache()
        for change, exc, match in cases:
            with pytest.raises(exc, match=match):
                ra.extend(**{**base, **change})  # type: ignore[arg-type]


@pytest.mark.parametrize("cross", [False, True], ids=["decoder-self", "cross"])
def test_encoder_lens_in_decode_and_extend(cross: bool) -> None:
    """An encoder-decoder batch: decode and an extend of one new token per request see the
    same keys, as the reference does: the encoder tokens [0, encoder_lens) (cross-attention)
    or the decoder's [encoder_lens, encoder_lens + seq_lens) (self-attention)."""
    enc, dec = [4, 0, 7], [2, 6, 1]
    p = make_paged([e + d for e, d in zip(enc, dec, strict=True)], kv_heads=2, head_dim=8,
                   v_head_dim=8, dtype=torch.float32)  # fmt: skip
    q = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    r2t, rpi = p.req_to_token, p.req_pool_indices
    lens, encoder_lens = torch.tensor(dec), torch.tensor(enc)
    decoded = ra.decode(q, p.cache, torch.zeros(3, 4, 8), r2t, rpi, lens, sm_scale=0.3,
                        cross_attention=cross, encoder_lens=encoder_lens)  # fmt: skip
    extended = ra.extend(q, None, None, p.cache, torch.zeros(3, 4, 8), r2t, rpi, lens,
                         torch.ones(3, dtype=torch.int64), sm_scale=0.3, cross_attention=cross,
                         encoder_lens=encoder_lens)  # fmt: skip
    for b in range(3):
        lo, hi = (0, enc[b]) if cross else (enc[b], enc[b] + dec[b])
        k, v = p.pool.keys(b, lo, hi)
        ref = attention(q[b : b + 1], k, v, torch.tensor([hi - lo - 1]), sm_scale=0.3,
                        causal=False)  # fmt: skip
        assert_matches(decoded[b : b + 1], ref)
        assert_matches(extended[b : b + 1], ref)


# -- scratch ------------------------------------------------------------------------------


def test_scratch_pool_is_stable() -> None:
    pool = ra.ScratchPool()
    a = pool.attn_logits(2, 8, 4, 64, "cpu")
    b = pool.attn_logits(2, 8, 4, 64, "cpu")
    c = pool.attn_logits(3, 8, 4, 64, "cpu")
    assert a is b and a.data_ptr() == b.data_ptr()
    assert c.data_ptr() != a.data_ptr()
    assert a.shape == (2, 8, 4, 65) and a.dtype == torch.float32 and a.is_contiguous()
    assert len(pool) == 2 and pool.nbytes() == (2 + 3) * 8 * 4 * 65 * 4
    pool.clear()
    assert len(pool) == 0


def test_decode_uses_the_pool_with_stable_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    mod, _ = _kernel.load()
    assert mod is not None
    real = mod.decode_attention

    def spy(*args: object, **kwargs: object) -> None:
        logits = args[5]
        assert isinstance(logits, Tensor)
        seen.append(logits.data_ptr())
        real(*args, **kwargs)

    monkeypatch.setattr(mod, "decode_attention", spy)
    for _ in range(3):
        args = _decode_args()
        ra.decode(**args)  # type: ignore[arg-type]
    assert len(seen) == 3 and len(set(seen)) == 1
    splits = ra.num_splits(2, 2, torch.get_num_threads())
    assert ra.scratch.attn_logits(2, 4, splits, 8, "cpu").data_ptr() == seen[0]


@pytest.mark.parametrize(
    ("batch", "kv_heads", "threads", "splits"),
    # stage-1 tasks = batch * ceil(kv_heads / 2) * splits, about two per thread
    [
        (1, 1, 1, 2),
        (1, 2, 8, 16),
        (1, 3, 8, 8),
        (1, 1, 64, 16),
        (64, 8, 8, 1),
        (3, 2, 2, 2),
        (4, 2, 2, 1),
        (1, 2, 2, 4),
        (2, 5, 4, 2),
    ],
)
def test_num_splits(batch: int, kv_heads: int, threads: int, splits: int) -> None:
    assert ra.num_splits(batch, kv_heads, threads) == splits
    assert ra.num_splits(batch, kv_heads, threads, kv_heads_per_task=2) == splits


@pytest.mark.parametrize(
    ("batch", "kv_heads", "threads", "per_task", "splits"),
    [(1, 2, 2, 1, 2), (2, 8, 4, 1, 1), (1, 8, 8, 4, 8), (1, 5, 8, 4, 8), (3, 5, 2, 3, 1)],
)
def test_num_splits_per_task(
    batch: int, kv_heads: int, threads: int, per_task: int, splits: int
) -> None:
    assert ra.num_splits(batch, kv_heads, threads, kv_heads_per_task=per_task) == splits


def test_num_splits_follows_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    info = _kernel.build_info()
    assert info is not None, "rvv_ops must be importable here"
    assert _kernel.decode_kv_heads_per_task() == info["decode_kv_heads_per_task"]
    # Kernels that take 4 KV heads per task: the default follows them.
    _kernel.reset()
    monkeypatch.setattr(_kernel, "build_info", lambda: {**info, "decode_kv_heads_per_task": 4})
    assert ra.num_splits(1, 8, 8) == 8  # 2 groups of 4 heads: 8 splits for 2 tasks a thread
    # Without kernels (or a build that does not say), DEFAULT_KV_HEADS_PER_TASK.
    _kernel.reset()
    monkeypatch.setattr(_kernel, "build_info", lambda: None)
    assert _kernel.decode_kv_heads_per_task() == ra.DEFAULT_KV_HEADS_PER_TASK == 2
    with pytest.raises(ValueError, match="kv_heads_per_task=0; expected >= 1"):
        ra.num_splits(1, 2, 2, kv_heads_per_task=0)


# -- attention() ---------------------------------------------------------------------------


def _ref_dense(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    mask: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """The conformance reference per batch entry: queries at the last Sq positions
    (bottom-right causal alignment), the boolean mask [B or 1, 1, Sq, Skv] ANDed in."""
    sq, skv = q.shape[2], k.shape[2]
    outs = []
    for bi in range(q.shape[0]):
        allowed = None if mask is None else mask[bi if mask.shape[0] > 1 else 0, 0]
        o = attention(
            q[bi].movedim(0, 1), k[bi].movedim(0, 1), v[bi].movedim(0, 1),
            torch.arange(skv - sq, skv), sm_scale=q.shape[-1] ** -0.5, causal=causal,
            window=window, allowed=allowed,
        )  # fmt: skip
        outs.append(o.movedim(1, 0))
    return torch.stack(outs)


@pytest.mark.parametrize("impl_mode", ["auto", "fallback"])
@pytest.mark.parametrize(
    ("b", "hq", "hkv", "sq", "skv", "causal", "window"),
    [
        (2, 6, 2, 5, 9, True, None),
        (1, 7, 1, 1, 13, True, None),
        (3, 4, 4, 6, 6, False, None),
        (2, 6, 3, 8, 8, True, 2),
    ],
)
def test_attention_matches_reference(
    impl_mode: str,
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    skv: int,
    causal: bool,
    window: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ra.ENV_IMPL, impl_mode)
    g = torch.Generator().manual_seed(sq * 31 + skv)
    q = torch.randn(b, hq, sq, 16, generator=g)
    k = torch.randn(b, hkv, skv, 16, generator=g)
    v = torch.randn(b, hkv, skv, 16, generator=g)
    out = ra.attention(q, k, v, causal=causal, sliding_window=window)
    assert out.shape == (b, hq, sq, 16)
    ref = _ref_dense(q, k, v, causal=causal, window=window)
    assert_matches(out, ref)


def test_attention_with_mask() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 3, 8, generator=g)
    k = torch.randn(2, 2, 7, 8, generator=g)
    v = torch.randn(2, 2, 7, 8, generator=g)
    mask = torch.ones(2, 1, 3, 7, dtype=torch.bool)
    mask[0, :, :, :2] = False  # left padding of the first sequence
    out = ra.attention(q, k, v, causal=True, attention_mask=mask)
    ref = _ref_dense(q, k, v, causal=True, mask=mask)
    assert_matches(out, ref)
    additive = torch.zeros(2, 1, 3, 7).masked_fill(~mask, -math.inf)
    out2 = ra.attention(q, k, v, causal=True, attention_mask=additive)
    torch.testing.assert_close(out2, out, atol=1e-6, rtol=1e-6)


def test_attention_bad_shapes() -> None:
    q = torch.randn(1, 4, 3, 8)
    with pytest.raises(ValueError, match="4-D"):
        ra.attention(q[0], q[0], q[0])
    with pytest.raises(ValueError, match="the last Sq"):
        ra.attention(q, torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))
    with pytest.raises(ValueError, match="not a multiple"):
        ra.attention(q, torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8))
