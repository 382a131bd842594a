"""``--kv-cache-dtype int8``: the INT8 token-to-KV pool, its hooks, and the ``rvv`` backend over it.

Pool tests build :class:`Int8TokenToKVPool` (and SGLang's ``SWAKVPool`` of two of them)
directly with the keyword arguments SGLang's configurator passes. The reference for every
stored row is rvv-attention's INT8 policy recomputed here in fp64 (``absmax / 127`` per token
and head, round half to even, clamp to +-127). SGLang's own attention test kit then runs its
dense cases through the ``rvv`` backend with the kit's pool replaced by the INT8 one (the kit
writes K/V through ``set_kv_buffer``), against the kit's float reference with a tolerance
that covers INT8 rounding.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
import rvv_attention as ra
import torch
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import KVWriteLoc, MHATokenToKVPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.test.kits.attention_unittest.attention_methods import dense_attention as kit
from sglang_rvv import kv_int8, plugin
from sglang_rvv.backend import RVVAttnBackend
from sglang_rvv.kv_int8 import Int8TokenToKVPool

plugin.register()

HEADS, D = 3, 16


def make_pool(size: int = 64, layers: int = 2, heads: int = HEADS, **kw: Any) -> Int8TokenToKVPool:
    return Int8TokenToKVPool(
        size=size,
        page_size=1,
        dtype=torch.int8,
        head_num=heads,
        head_dim=D,
        layer_num=layers,
        device="cpu",
        enable_memory_saver=False,
        enable_alt_stream=False,
        **kw,
    )


def layer(i: int) -> Any:
    return SimpleNamespace(layer_id=i)


def expected_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The INT8 policy in fp64: (values, scales) for ``x [n, H, D]``."""
    xd = x.to(torch.float64)
    absmax = xd.abs().amax(dim=-1)
    scale = absmax / 127.0
    q = torch.where(
        scale[..., None] > 0, torch.round(xd / scale.clamp_min(1e-300)[..., None]), 0.0
    ).clamp(-127, 127)
    return q.to(torch.int8), scale.to(torch.float32)


def rand_kv(n: int, heads: int = HEADS, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(n, heads, D, generator=g) * torch.linspace(0.1, 4.0, n)[:, None, None]
    v = torch.randn(n, heads, D, generator=g)
    return k.to(torch.bfloat16), v.to(torch.bfloat16)


# ------------------------------------------------------------------------------ option


def test_int8_is_a_kv_cache_dtype_choice():
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.server_args import ServerArgs

    HookRegistry.apply_hooks()  # as SGLang's load_plugins() does after register()
    kv_int8.register()  # idempotent
    for _ in range(2):  # each parser SGLang builds gets the choice, once
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        args = parser.parse_args(["--model-path", "m", "--kv-cache-dtype", "int8"])
        assert args.kv_cache_dtype == "int8"
        (action,) = [a for a in parser._actions if a.dest == "kv_cache_dtype"]
        assert list(action.choices).count("int8") == 1 and "auto" in action.choices
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-path", "m", "--kv-cache-dtype", "int4"])


def test_configure_kv_cache_dtype_maps_int8_and_passes_the_rest_through():
    calls = []

    def original(**kw: Any) -> Any:
        calls.append(kw)
        return None, torch.bfloat16

    common = {"model": None, "model_dtype": torch.bfloat16, "is_dflash": False}
    got = kv_int8.configure_kv_cache_dtype(
        original, server_args_kv_cache_dtype="int8", is_draft_worker=False, **common
    )
    assert got == ("int8", torch.int8) and not calls
    got = kv_int8.configure_kv_cache_dtype(
        original, server_args_kv_cache_dtype="auto", is_draft_worker=False, **common
    )
    assert got == (None, torch.bfloat16) and len(calls) == 1


def test_the_hooks_are_registered_with_sglang():
    from sglang.srt.plugins.hook_registry import HookRegistry

    for target, hook, _ in kv_int8.HOOKS:
        assert any(h is hook for _, h, _ in HookRegistry._hooks[target]), target


# ------------------------------------------------------------------------------- pool


def test_buffers_and_size_report_include_the_scales():
    pool = make_pool(size=64, layers=2)
    rows = 64 + 1  # SGLang's padded slot 0
    for i in range(2):
        assert pool.get_key_buffer(i).dtype == torch.int8
        assert list(pool.get_key_buffer(i).shape) == [rows, HEADS, D]
        assert list(pool.get_key_scales(i).shape) == [rows, HEADS]
        assert pool.get_value_scales(i).dtype == torch.float32
    k_bytes, v_bytes = pool.get_kv_size_bytes()
    assert k_bytes == v_bytes == 2 * rows * HEADS * (D + 4)
    assert pool.bytes_per_token() == 2 * HEADS * (2 * D + 8)
    report = kv_int8.pool_report(pool)
    assert f"{k_bytes + v_bytes} bytes" in report and "int8" in report


def test_pool_is_about_half_of_bf16_at_head_size_128():
    """Same tokens, layers and heads as a Qwen2.5-1.5B layer pair (2 KV heads, D = 128): the
    INT8 pool's own size report is (128 + 4) / 256 = 0.516 of SGLang's bf16 pool's."""
    geometry = dict(
        size=4096, page_size=1, head_num=2, head_dim=128, layer_num=2, device="cpu",
        enable_memory_saver=False, enable_alt_stream=False,
    )  # fmt: skip
    int8 = Int8TokenToKVPool(dtype=torch.int8, **geometry)
    bf16 = MHATokenToKVPool(dtype=torch.bfloat16, **geometry)
    ratio = sum(int8.get_kv_size_bytes()) / sum(bf16.get_kv_size_bytes())
    assert ratio == pytest.approx((128 + 4) / 256, abs=1e-9)


def test_store_read_round_trip_scales_per_token_and_head():
    pool = make_pool()
    k, v = rand_kv(7)
    loc = torch.tensor([5, 9, 1, 30, 31, 2, 63])
    pool.set_kv_buffer(layer(1), loc, k, v)
    kq, ks = expected_int8(k)
    vq, vs = expected_int8(v)
    assert torch.equal(pool.get_key_buffer(1)[loc], kq)
    assert torch.equal(pool.get_value_buffer(1)[loc], vq)
    torch.testing.assert_close(pool.get_key_scales(1)[loc], ks, rtol=1e-6, atol=0)
    torch.testing.assert_close(pool.get_value_scales(1)[loc], vs, rtol=1e-6, atol=0)
    # dequantised within half a step of the value it came from
    back = pool.get_key_buffer(1)[loc].float() * pool.get_key_scales(1)[loc][..., None]
    assert ((back - k.float()).abs() <= ks[..., None] / 2 + 1e-6).all()
    # nothing else written: the other layer and the other rows are still zero
    others = torch.ones(65, dtype=torch.bool)
    others[loc] = False
    assert not pool.get_key_buffer(1)[others].any() and not pool.get_key_scales(1)[others].any()
    assert not pool.get_key_buffer(0).any() and not pool.get_value_scales(0).any()


def test_zero_rows_get_scale_zero_and_integer_inputs_are_refused():
    pool = make_pool()
    z = torch.zeros(2, HEADS, D)
    pool.set_kv_buffer(layer(0), torch.tensor([3, 4]), z, z)
    assert not pool.get_key_scales(0).any() and not pool.get_key_buffer(0).any()
    with pytest.raises(TypeError, match="expected floating-point"):
        pool.set_kv_buffer(layer(0), torch.tensor([3]), z[:1].to(torch.int8), z[:1])
    with pytest.raises(ValueError, match=r"expected torch\.int8"):
        Int8TokenToKVPool(
            size=8, page_size=1, dtype=torch.bfloat16, head_num=1, head_dim=D, layer_num=1,
            device="cpu", enable_memory_saver=False,
        )  # fmt: skip


def test_an_int8_cache_without_scales_is_an_error_not_a_guess():
    plain = MHATokenToKVPool(
        size=8, page_size=1, dtype=torch.int8, head_num=1, head_dim=D, layer_num=1,
        device="cpu", enable_memory_saver=False, enable_alt_stream=False,
    )  # fmt: skip
    with pytest.raises(TypeError, match="keeps no per-token scales"):
        kv_int8.layer_cache(plain, 0)
    with pytest.raises(ValueError, match="k_scales is required"):
        ra.KVCache(plain.get_key_buffer(0), plain.get_value_buffer(0))


def _decode_reference(cache: ra.KVCache, q: torch.Tensor, rows: list[list[int]]) -> torch.Tensor:
    """fp64 attention of each request's query over its dequantised rows (GQA)."""
    outs = []
    for b, r in enumerate(rows):
        kk = cache.k[r].double() * cache.k_scales[r].double()[..., None]  # type: ignore[index]
        vv = cache.v[r].double() * cache.v_scales[r].double()[..., None]  # type: ignore[index]
        group = q.shape[1] // kk.shape[1]
        kk, vv = kk.repeat_interleave(group, 1), vv.repeat_interleave(group, 1)
        s = torch.einsum("hd,thd->ht", q[b].double(), kk) * D**-0.5
        outs.append(torch.einsum("ht,thd->hd", s.softmax(-1), vv))
    return torch.stack(outs)


def test_prefix_rows_are_reused_with_their_scales():
    """Two requests whose tables share prefix rows (a radix-cache hit) read the same
    quantised rows and scales; decode through rvv-attention matches the dequantised
    reference for both."""
    pool = make_pool(size=64, layers=1)
    k, v = rand_kv(12, seed=3)
    prefix = [10, 11, 12, 13, 14, 15, 16, 17]
    own_a, own_b = [20, 21], [40, 41]
    pool.set_kv_buffer(layer(0), torch.tensor(prefix + own_a + own_b), k, v)
    cache = kv_int8.layer_cache(pool, 0)
    table = torch.zeros(2, 16, dtype=torch.int32)
    table[0, :10] = torch.tensor(prefix + own_a)
    table[1, :10] = torch.tensor(prefix + own_b)
    q = torch.randn(2, 2 * HEADS, D, generator=torch.Generator().manual_seed(1))
    out = torch.empty(2, 2 * HEADS, D)
    ra.decode(q, cache, out, table, torch.tensor([0, 1]), torch.tensor([10, 10]), sm_scale=D**-0.5)
    want = _decode_reference(cache, q, [prefix + own_a, prefix + own_b])
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


def test_freed_rows_are_reallocated_and_rewritten_with_fresh_scales():
    pool = make_pool(size=16, layers=1)
    alloc = TokenToKVPoolAllocator(16, torch.int8, "cpu", pool, need_sort=True)
    first = alloc.alloc(16)
    assert first is not None and alloc.alloc(1) is None  # full
    k, v = rand_kv(16, seed=4)
    pool.set_kv_buffer(layer(0), first, k * 50, v * 50)  # large values: large scales
    alloc.free(first[:6])
    again = alloc.alloc(6)
    assert again is not None and set(again.tolist()) == set(first[:6].tolist())
    k2, v2 = rand_kv(6, seed=5)
    pool.set_kv_buffer(layer(0), again, k2, v2)
    kq, ks = expected_int8(k2)
    assert torch.equal(pool.get_key_buffer(0)[again], kq)
    torch.testing.assert_close(pool.get_key_scales(0)[again], ks, rtol=1e-6, atol=0)
    kept = first[6:]
    torch.testing.assert_close(
        pool.get_key_scales(0)[kept], expected_int8(k[6:] * 50)[1], rtol=1e-6, atol=0
    )


def test_cpu_copy_round_trip_keeps_the_scales():
    pool = make_pool(size=32, layers=2)
    k, v = rand_kv(5, seed=6)
    loc = torch.tensor([3, 7, 8, 20, 31])
    for i in range(2):
        pool.set_kv_buffer(layer(i), loc, k, v)
    saved = [t.clone() for t in (*pool.k_buffer, *pool.k_scales, *pool.v_scales)]
    copy = pool.get_cpu_copy(loc)
    for t in (*pool.k_buffer, *pool.v_buffer, *pool.k_scales, *pool.v_scales):
        t.zero_()
    pool.load_cpu_copy(copy, loc)
    for a, b in zip((*pool.k_buffer, *pool.k_scales, *pool.v_scales), saved, strict=True):
        assert torch.equal(a, b)


def make_swa_pool() -> SWAKVPool:
    pool = SWAKVPool(
        size=48,
        size_swa=16,
        page_size=1,
        dtype=torch.int8,
        head_num=HEADS,
        head_dim=D,
        swa_attention_layer_ids=[0, 2],
        full_attention_layer_ids=[1],
        device="cpu",
        token_to_kv_pool_class=Int8TokenToKVPool,
        enable_memory_saver=False,
    )
    pool.full_to_swa_index_mapping = torch.arange(48 + 2) % 17  # full row -> SWA row
    return pool


def test_swa_pool_halves_are_int8_and_writes_land_at_translated_rows():
    pool = make_swa_pool()
    assert isinstance(pool.full_kv_pool, Int8TokenToKVPool)
    assert isinstance(pool.swa_kv_pool, Int8TokenToKVPool)
    loc = torch.tensor([20, 21, 33])
    swa_loc = pool.translate_loc_from_full_to_swa(loc)
    assert swa_loc.tolist() == [3, 4, 16]
    k, v = rand_kv(3, seed=7)
    pool.set_kv_buffer(layer(2), KVWriteLoc(loc, swa_loc), k, v)  # SWA layer 2 = SWA half #1
    pool.set_kv_buffer(layer(1), KVWriteLoc(loc, swa_loc), k, v)  # full layer 1
    kq, ks = expected_int8(k)
    swa = kv_int8.layer_cache(pool, 2)
    full = kv_int8.layer_cache(pool, 1)
    assert swa.k.data_ptr() == pool.swa_kv_pool.get_key_buffer(1).data_ptr()
    assert torch.equal(swa.k[swa_loc], kq) and torch.equal(full.k[loc], kq)
    torch.testing.assert_close(swa.k_scales[swa_loc], ks, rtol=1e-6, atol=0)  # type: ignore[index]
    torch.testing.assert_close(full.k_scales[loc], ks, rtol=1e-6, atol=0)  # type: ignore[index]
    assert not kv_int8.layer_cache(pool, 0).k.any()  # the other SWA layer is untouched
    k_bytes, _ = pool.get_kv_size_bytes()
    assert k_bytes == (49 * 1 + 17 * 2) * HEADS * (D + 4)


# ---------------------------------------------------------------------- accounting


def test_bytes_per_token_of_the_configurator_match_the_pool(monkeypatch):
    """The hooked ``DefaultPoolConfigurator._compute_cell_size`` adds exactly the scales'
    bytes to SGLang's ``heads * (D + Dv) * layers * 1`` for INT8."""
    monkeypatch.setattr(kv_int8, "_parallel_sizes", lambda: (1, 1))
    layers = 4
    cfg = SimpleNamespace(get_num_kv_heads=lambda tp, dcp=1: HEADS)
    kvc = SimpleNamespace(kv_cache_dtype=torch.int8, use_mla_backend=False, model_config=cfg)
    sglang_part = HEADS * (D + D) * layers * 1
    cell = kv_int8.default_cell_size(sglang_part, None, kvc, layers)
    assert cell == make_pool(layers=layers).bytes_per_token()
    bf16 = SimpleNamespace(kv_cache_dtype=torch.bfloat16, use_mla_backend=False, model_config=cfg)
    assert kv_int8.default_cell_size(123, None, bf16, layers) == 123


def test_swa_configurator_bytes_include_the_scales(monkeypatch):
    monkeypatch.setattr(kv_int8, "_parallel_sizes", lambda: (1, 1))
    cfg = SimpleNamespace(get_num_kv_heads=lambda tp: 4, get_swa_num_kv_heads=lambda tp: 2)
    kvc = SimpleNamespace(kv_cache_dtype=torch.int8, use_mla_backend=False, model_config=cfg)
    recomputed = []
    conf = SimpleNamespace(
        _full_per_token=4 * 2 * D,
        _swa_per_token=2 * 2 * D,
        _recompute_cell_size=lambda: recomputed.append(True),
    )
    kv_int8.swa_cell_sizes(None, conf, kvc)
    assert conf._full_per_token == 4 * (2 * D + 8) and conf._swa_per_token == 2 * (2 * D + 8)
    assert recomputed == [True]


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize("backends", [("torch_native", "torch_native"), ("rvv", "intel_amx")])
def test_other_attention_backends_are_refused(backends):
    with pytest.raises(ValueError, match=r"--kv-cache-dtype int8 needs --attention-backend rvv"):
        kv_int8.check_backends(backends)
    kv_int8.check_backends(("rvv", "rvv"))


def test_configure_refuses_what_the_int8_pool_does_not_serve(monkeypatch):
    monkeypatch.setattr(kv_int8, "_attention_backends", lambda: ("rvv", "rvv"))
    sa = SimpleNamespace(enable_hierarchical_cache=True, disaggregation_mode="null")
    kvc = SimpleNamespace(kv_cache_dtype=torch.int8, use_mla_backend=True, server_args=sa)
    with pytest.raises(ValueError, match=r"MLA models.*--enable-hierarchical-cache"):
        kv_int8.check_configuration(kvc)
    fine = SimpleNamespace(kv_cache_dtype=torch.int8, use_mla_backend=False, server_args=None)
    assert kv_int8.check_configuration(fine) is None
    monkeypatch.setattr(kv_int8, "_attention_backends", lambda: ("torch_native", "rvv"))
    with pytest.raises(ValueError, match="'torch_native' cannot read"):
        kv_int8.check_configuration(fine)
    bf16 = SimpleNamespace(kv_cache_dtype=torch.bfloat16)
    assert kv_int8.check_configuration(bf16) is None
    monkeypatch.setattr(kv_int8, "_attention_backends", lambda: ("rvv",))
    hybrid = SimpleNamespace(
        kv_cache_dtype=torch.int8, use_mla_backend=False, server_args=None, mambaish_config=object()
    )
    with pytest.raises(ValueError, match=r"does not support hybrid linear-attention"):
        kv_int8.check_configuration(hybrid)


# ------------------------------------------------------- SGLang's kit over the INT8 pool

INT8_TOL = (1e-2, 1e-2)
"""bf16 model, INT8 K/V (each element within scale / 2 = absmax / 254 of its value): on the
kit's inputs the largest output error is about 4e-3, against outputs of up to 1."""


def _int8_pool(**kw: Any) -> Int8TokenToKVPool:
    kw["dtype"] = torch.int8
    return Int8TokenToKVPool(**kw)


def _kit_cases() -> list:
    swa = kit.make_swa_no_prefix_input_config_cases("rvv")
    swa += kit.make_swa_prefix_input_config_cases("rvv")
    return [pytest.param(c, id=c.name) for c in (*kit.make_dense_cases("rvv"), *swa)]


@pytest.mark.parametrize("case", _kit_cases())
def test_sglang_kit_dense_cases_over_the_int8_pool(case, monkeypatch):
    """The kit's 12 dense extend/decode cases (prefixes, GQA, several batch shapes) and its
    sliding-window extend cases through the ``rvv`` backend over the INT8 pool, the INT8
    kernels only (no fallback)."""
    monkeypatch.setattr(kit, "MHATokenToKVPool", _int8_pool)
    monkeypatch.setenv("RVV_ATTENTION_IMPL", "kernel")
    before = ra.call_counts()
    with torch.inference_mode():
        fixture = kit.build_dense_attention_fixture(
            _NoSkip(), case, dtype=torch.bfloat16, device="cpu", loc_layout="shuffled_pages"
        )
        assert isinstance(fixture.backend, RVVAttnBackend)
        assert isinstance(fixture.runner.token_to_kv_pool, Int8TokenToKVPool)
        actual = kit.run_dense_fixture_eager(fixture)
        expected = kit.expected_dense_fixture_output(fixture)
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual.float(), expected.float(), atol=INT8_TOL[0], rtol=INT8_TOL[1])
    after = ra.call_counts()
    ran = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert sum(n for k, n in ran.items() if k.endswith(":kernel")) > 0, ran
    assert not any(n for k, n in ran.items() if k.endswith(":fallback")), ran


class _NoSkip:
    def skipTest(self, reason: str) -> None:
        pytest.fail(f"the kit could not build the backend: {reason}")
