"""``RVVAttnBackend`` on hand-built SGLang ``ForwardBatch``es over real SGLang pools.

Every case puts known K/V into real ``MHATokenToKVPool`` / ``ReqToTokenPool`` (or
``SWAKVPool``) objects at scattered cache rows, runs the backend, and checks:

- the output against an independent reference: float64 ``softmax(q k^T * scale) v`` per
  request and query over the K/V the test itself put in the cache (causal mask, window,
  logit cap), with GQA done by repeating KV heads;
- where SGLang's ``TorchNativeAttnBackend`` supports the case, the output against it on an
  identical copy of the batch;
- the KV cache afterwards: the new tokens' rows hold exactly what was written (fp8: the
  pool's ``(x / scale).to(fp8)``), every other row is unchanged;
- the inputs q / k / v are not modified.

The reference is the conformance suite's (conformance.reference.attention, fp64) over the
K/V the test itself put in the cache, with its tolerance model (conformance.reference
TOLERANCES, plus p_rounding_slack for bf16 extends over a bf16 cache). It dequantizes fp8
rows exactly, so fp8 cases use the same tolerances. Comparisons between two runs (rvv vs
``torch_native``, chunked vs one-shot prefill) use ``TOL``: fp32 1e-4, bf16 2e-2 (one bf16
rounding of O(1) outputs on each side, and ``torch_native`` rounds p to bf16 in its own
way; SGLang's own kit uses 3e-2). Only against ``torch_native`` (which attends extend
tokens with their fp8-rounded K/V, where rvv-attention uses the K/V as given) fp8 gets the
looser ``FP8_NATIVE_ATOL`` (half an fp8 step of the largest |V|), and ``torch_native``
itself is then checked against the reference over the fp8 values.

SGLang runs in CPU mode here: this folder's ``conftest.py`` sets ``SGLANG_USE_CPU_ENGINE=1``
before any sglang import. Run by ``nox -s sglang-tests``.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import rvv_attention as ra
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang_rvv.backend import RVVAttnBackend

from conformance.reference import (
    assert_matches,
    attention,
    p_rounding_slack,
    rounds_p,
)

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
# half an fp8 step (e4m3: 2^-4, e5m2: 2^-3 relative) of |V| <= 4 (N(0, 1) data)
FP8_NATIVE_ATOL = {torch.float8_e4m3fn: 0.25, torch.float8_e5m2: 0.5}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
DTYPES = [torch.bfloat16, torch.float32]
DTYPE_IDS = ["bf16", "fp32"]


# --------------------------------------------------------------------------- bench


@dataclass
class Bench:
    """Real SGLang pools + a fake model runner + what the test put in the cache."""

    hq: int
    hkv: int
    d: int
    dv: int
    dtype: torch.dtype
    kv_dtype: torch.dtype
    seed: int = 0
    size: int = 512
    max_reqs: int = 8
    max_ctx: int = 128
    layer_num: int = 1
    swa_layer_ids: tuple[int, ...] = ()
    runner: SimpleNamespace = field(init=False)
    free: list[int] = field(init=False)
    # (layer_id, req row) -> list of fp64 (k [Hkv, D], v [Hkv, Dv]) per position
    truth: dict[tuple[int, int], list[tuple[torch.Tensor, torch.Tensor]]] = field(init=False)
    gen: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed)
        r2t = ReqToTokenPool(
            size=self.max_reqs,
            max_context_len=self.max_ctx,
            device="cpu",
            enable_memory_saver=False,
        )
        shape = {
            "size": self.size,
            "page_size": 1,
            "dtype": self.kv_dtype,
            "head_num": self.hkv,
            "head_dim": self.d,
            "v_head_dim": self.dv,
            "device": "cpu",
            "enable_alt_stream": False,
        }
        if self.swa_layer_ids:
            full_ids = [i for i in range(self.layer_num) if i not in self.swa_layer_ids]
            kv = SWAKVPool(
                size_swa=self.size,
                swa_attention_layer_ids=list(self.swa_layer_ids),
                full_attention_layer_ids=full_ids,
                **shape,
            )
            # full row i -> SWA row (i * 7) % size + 1: a scrambled injection; the last
            # entry is the sentinel SGLang's allocator keeps for index -1.
            mapping = torch.zeros(self.size + 2, dtype=torch.int64)
            idx = torch.arange(1, self.size + 1)
            mapping[idx] = (idx * 7) % self.size + 1
            kv.register_mapping(mapping)
        else:
            kv = MHATokenToKVPool(layer_num=self.layer_num, enable_memory_saver=False, **shape)
        self.runner = SimpleNamespace(device="cpu", req_to_token_pool=r2t, token_to_kv_pool=kv)
        # Row 0 is SGLang's padding slot: never handed out. Scattered order.
        self.free = list(range(1, self.size + 1))
        random.Random(self.seed).shuffle(self.free)
        self.truth = {}

    # ------------------------------------------------------------------ helpers
    @property
    def pool(self):
        return self.runner.token_to_kv_pool

    @property
    def req_to_token(self) -> torch.Tensor:
        return self.runner.req_to_token_pool.req_to_token

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.gen) * scale).to(self.dtype)

    def layer(self, layer_id: int = 0, k_scale: float | None = None, **kw) -> RadixAttention:
        layer = RadixAttention(
            num_heads=self.hq,
            head_dim=self.d,
            scaling=self.d**-0.5,
            num_kv_heads=self.hkv,
            layer_id=layer_id,
            v_head_dim=self.dv,
            **kw,
        )
        layer.k_scale_float = k_scale
        layer.v_scale_float = None if k_scale is None else 2.0 * k_scale
        return layer

    def stored(self, x: torch.Tensor, scale: float | None) -> torch.Tensor:
        """What a row of the cache holds for x, back in fp64 (fp8: scaled, rounded)."""
        if self.kv_dtype in FP8:
            s = scale or 1.0
            return (x.double() / s).to(self.kv_dtype).double() * s
        return x.to(self.kv_dtype).double()

    def alloc(self, n: int) -> list[int]:
        out, self.free = self.free[:n], self.free[n:]
        assert len(out) == n, "bench pool exhausted"
        return out

    def populate(self, layer: RadixAttention, rows: list[int], lens: list[int]) -> None:
        """Cached prefixes: ``lens[i]`` tokens of request row ``rows[i]``, written through
        the pool (as SGLang's earlier forward passes would have)."""
        for row, n in zip(rows, lens, strict=True):
            key = (layer.layer_id, row)
            self.truth.setdefault(key, [])
            start = len(self.truth[key])
            if n == 0:
                continue
            locs = self.alloc(n)
            self.req_to_token[row, start : start + n] = torch.tensor(locs, dtype=torch.int32)
            k, v = self.randn(n, self.hkv, self.d), self.randn(n, self.hkv, self.dv)
            self.write(layer, torch.tensor(locs), k, v)
            for i in range(n):
                self.truth[key].append(
                    (self.stored(k[i], layer.k_scale_float), self.stored(v[i], layer.v_scale_float))
                )

    def write(self, layer: RadixAttention, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc

        swa_loc = None
        if isinstance(self.pool, SWAKVPool):
            swa_loc = self.pool.translate_loc_from_full_to_swa(loc)
        kw = {}
        if self.kv_dtype in FP8:
            kw = dict(k_scale=layer.k_scale_float, v_scale=layer.v_scale_float)
        self.pool.set_kv_buffer(layer, KVWriteLoc(loc, swa_loc), k.clone(), v.clone(), **kw)

    def _batch(self, mode, layer, rows, new_lens):
        """A batch of requests ``rows``, ``new_lens[i]`` new tokens after each one's cached
        prefix (``truth``) on newly allocated rows: the ForwardBatch, the prefix lengths,
        and random q / k / v for the new tokens."""
        prefix = [len(self.truth.get((layer.layer_id, r), [])) for r in rows]
        locs: list[int] = []
        for row, p, n in zip(rows, prefix, new_lens, strict=True):
            new = self.alloc(n)
            self.req_to_token[row, p : p + n] = torch.tensor(new, dtype=torch.int32)
            locs += new
        seq = [p + n for p, n in zip(prefix, new_lens, strict=True)]
        total = len(locs)
        fb = ForwardBatch(
            forward_mode=mode,
            batch_size=len(rows),
            input_ids=torch.zeros(total, dtype=torch.int64),
            req_pool_indices=torch.tensor(rows, dtype=torch.int64),
            seq_lens=torch.tensor(seq, dtype=torch.int64),
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            out_cache_loc=torch.tensor(locs, dtype=torch.int64),
            seq_lens_sum=sum(seq),
            positions=torch.cat([torch.arange(p, s) for p, s in zip(prefix, seq, strict=True)]),
        )
        q = self.randn(total, self.hq * self.d)
        k = self.randn(total, self.hkv, self.d)
        v = self.randn(total, self.hkv, self.dv)
        return fb, prefix, q, k, v

    def extend_batch(self, layer, rows, extend_lens):
        """An EXTEND batch: the requests' cached prefixes (``truth``) plus new tokens."""
        fb, prefix, q, k, v = self._batch(ForwardMode.EXTEND, layer, rows, extend_lens)
        fb.extend_prefix_lens = torch.tensor(prefix, dtype=torch.int32)
        fb.extend_prefix_lens_cpu = list(prefix)
        fb.extend_seq_lens = torch.tensor(extend_lens, dtype=torch.int32)
        fb.extend_seq_lens_cpu = list(extend_lens)
        fb.extend_start_loc = torch.tensor(
            [sum(extend_lens[:i]) for i in range(len(rows))], dtype=torch.int32
        )
        fb.extend_num_tokens = len(q)
        return fb, q, k, v

    def decode_batch(self, layer, rows):
        """A DECODE batch: one new token per request after its cached prefix."""
        fb, _, q, k, v = self._batch(ForwardMode.DECODE, layer, rows, [1] * len(rows))
        return fb, q, k, v

    def record_new(self, layer, fb, k, v, *, quantized: bool) -> list[tuple[int, int]]:
        """Adds a batch's new tokens to ``truth`` (as stored, or as given when not
        ``quantized``); returns (row, first new position) per request."""
        rows = fb.req_pool_indices.tolist()
        lens = [1] * len(rows) if fb.forward_mode.is_decode() else fb.extend_seq_lens.tolist()
        firsts, i = [], 0
        for row, n in zip(rows, lens, strict=True):
            key = (layer.layer_id, row)
            self.truth.setdefault(key, [])
            firsts.append((row, len(self.truth[key])))
            for _ in range(n):
                if quantized:
                    kk = self.stored(k[i], layer.k_scale_float)
                    vv = self.stored(v[i], layer.v_scale_float)
                else:
                    kk, vv = k[i].double(), v[i].double()
                self.truth[key].append((kk, vv))
                i += 1
        return firsts

    def snapshot(self, layer_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.pool.get_key_buffer(layer_id)
        v = self.pool.get_value_buffer(layer_id)
        if k.dtype in FP8:
            return k.view(torch.uint8).clone(), v.view(torch.uint8).clone()
        return k.clone(), v.clone()


def reference(
    bench: Bench,
    layer,
    fb,
    q,
    *,
    causal=True,
    window=None,
    cap=0.0,
    new_exact=None,
    sinks=None,
    fn=attention,
):
    """The conformance reference (``fn``: attention, or p_rounding_slack) over
    ``bench.truth``: each query at its absolute position, ``window`` SGLang's W; ``sinks``
    [Hq]: exp(sink) joins each softmax denominator. Returns [tokens, Hq * Dv] fp64."""
    rows = fb.req_pool_indices.tolist()
    seq = fb.seq_lens.tolist()
    qlens = [1] * len(rows) if fb.forward_mode.is_decode() else fb.extend_seq_lens.tolist()
    q3 = q.view(-1, bench.hq, bench.d)
    out = torch.zeros(q3.shape[0], bench.hq, bench.dv, dtype=torch.float64)
    t = 0
    for row, s, n in zip(rows, seq, qlens, strict=True):
        entries = bench.truth[(layer.layer_id, row)][:s]
        if new_exact is not None:  # extend: new tokens attend with K/V as given
            entries = entries[: s - n] + new_exact[row]
        keys = torch.stack([e[0] for e in entries])
        vals = torch.stack([e[1] for e in entries])
        out[t : t + n] = fn(
            q3[t : t + n], keys, vals, torch.arange(s - n, s), sm_scale=layer.scaling,
            causal=causal, window=window, logit_cap=cap, sinks=sinks,
        )  # fmt: skip
        t += n
    return out.view(-1, bench.hq * bench.dv)


def check_reference(out, bench: Bench, layer, fb, q, what, **kw):
    """out against the conformance reference (keyword arguments: :func:`reference`'s) with
    the suite's tolerances; bf16 extends over a bf16 cache get p_rounding_slack (the
    x86_amx / x86_avx512_bf16 extend kernels round p to bf16)."""
    expected = reference(bench, layer, fb, q, **kw)
    slack = None
    same_cache = bench.kv_dtype == bench.dtype
    if not fb.forward_mode.is_decode() and same_cache and rounds_p(bench.dtype, "same"):
        slack = reference(bench, layer, fb, q, fn=p_rounding_slack, **kw)
    assert_matches(out, expected, what, slack)
    return expected


def run(backend_cls, bench, layer, fb, q, k, v, *, save=True, **kw):
    backend = backend_cls(bench.runner)
    backend.init_forward_metadata(fb)
    fwd = backend.forward_decode if fb.forward_mode.is_decode() else backend.forward_extend
    return fwd(q, k, v, layer, fb, save_kv_cache=save, **kw)


def assert_close(actual, expected, dtype, what=""):
    """Two runs' outputs within TOL (rvv vs torch_native, chunked vs one-shot)."""
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(
        actual.double(), expected.double(), atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}"
    )


def assert_cache_after(bench, before, layer, fb, k, v):
    """New rows hold exactly what the pool writes for k / v; every other row is unchanged."""
    kb, vb = bench.snapshot(layer.layer_id)
    loc = fb.out_cache_loc
    if isinstance(bench.pool, SWAKVPool) and bench.pool.layers_mapping[layer.layer_id][1]:
        loc = bench.pool.translate_loc_from_full_to_swa(loc)
    mask = torch.ones(kb.shape[0], dtype=torch.bool)
    mask[loc] = False
    assert torch.equal(kb[mask], before[0][mask]), "K cache rows outside out_cache_loc changed"
    assert torch.equal(vb[mask], before[1][mask]), "V cache rows outside out_cache_loc changed"
    if bench.kv_dtype in FP8:
        ek = (k.double() / (layer.k_scale_float or 1.0)).to(bench.kv_dtype).view(torch.uint8)
        ev = (v.double() / (layer.v_scale_float or 1.0)).to(bench.kv_dtype).view(torch.uint8)
    else:
        ek, ev = k.to(bench.kv_dtype), v.to(bench.kv_dtype)
    assert torch.equal(kb[loc], ek.reshape(kb[loc].shape)), "K cache rows at out_cache_loc"
    assert torch.equal(vb[loc], ev.reshape(vb[loc].shape)), "V cache rows at out_cache_loc"


def twin(**kw) -> tuple[Bench, Bench]:
    """Two identical benches (same seed): one for rvv, one for torch_native."""
    return Bench(**kw), Bench(**kw)


def check_case(
    kw,
    prefix_lens,
    extend_lens=None,
    *,
    layer_kw=None,
    k_scale=None,
    native=True,
    window=None,
    cap=0.0,
    causal=True,
):
    """Builds twin benches, runs rvv (and torch_native) on one extend or decode batch,
    checks output, cache and inputs. Returns the rvv output."""
    layer_kw = layer_kw or {}
    outs = {}
    for name, bench in zip(("rvv", "torch_native"), twin(**kw), strict=True):
        if name == "torch_native" and not native:
            break
        layer = bench.layer(k_scale=k_scale, **layer_kw)
        rows = list(range(1, len(prefix_lens) + 1))
        bench.populate(layer, rows, prefix_lens)
        if extend_lens is None:
            fb, q, k, v = bench.decode_batch(layer, rows)
        else:
            fb, q, k, v = bench.extend_batch(layer, rows, extend_lens)
        inputs = (q.clone(), k.clone(), v.clone())
        before = bench.snapshot(layer.layer_id)
        cls = RVVAttnBackend if name == "rvv" else TorchNativeAttnBackend
        out = run(cls, bench, layer, fb, q, k, v)
        assert out.shape == (q.shape[0], bench.hq * bench.dv) and out.dtype == bench.dtype
        if name == "rvv":
            for a, b in zip((q, k, v), inputs, strict=True):
                assert torch.equal(a, b), "the backend modified its q / k / v inputs"
            assert_cache_after(bench, before, layer, fb, *inputs[1:])
            new_exact = None
            if extend_lens is not None:
                firsts = bench.record_new(layer, fb, inputs[1], inputs[2], quantized=True)
                new_exact = {}
                i = 0
                for (row, _), n in zip(firsts, extend_lens, strict=True):
                    new_exact[row] = [
                        (inputs[1][j].double(), inputs[2][j].double()) for j in range(i, i + n)
                    ]
                    i += n
            else:
                bench.record_new(layer, fb, inputs[1], inputs[2], quantized=True)
            check_reference(
                out, bench, layer, fb, inputs[0], "rvv vs fp64 reference", causal=causal,
                window=window, cap=cap, new_exact=new_exact,
            )  # fmt: skip
            # all keys as stored (what torch_native attends with)
            from_cache = reference(bench, layer, fb, inputs[0], causal=causal, window=window)
        outs[name] = out
    if "torch_native" in outs:
        native = outs["torch_native"]
        if kw["kv_dtype"] in FP8 and extend_lens is not None:
            # torch_native reads the new tokens back from the fp8 cache: it matches the
            # reference over the stored values; rvv (new K/V as given) is near it.
            assert_close(native, from_cache, kw["dtype"], "torch_native vs fp64 (fp8 K/V)")
            torch.testing.assert_close(
                outs["rvv"].double(),
                native.double(),
                atol=FP8_NATIVE_ATOL[kw["kv_dtype"]],
                rtol=0,
            )
        else:
            assert_close(outs["rvv"], native, kw["dtype"], "rvv vs torch_native")
    return outs["rvv"]


def geom(dtype, hq=6, hkv=2, d=40, dv=None, kv_dtype=None, **extra):
    return dict(hq=hq, hkv=hkv, d=d, dv=dv or d, dtype=dtype, kv_dtype=kv_dtype or dtype, **extra)


# --------------------------------------------------------------------------- tests


@pytest.fixture(autouse=True)
def _auto_impl(monkeypatch):
    """rvv-attention's default selection unless a test asks for more (``impl``)."""
    monkeypatch.setenv("RVV_ATTENTION_IMPL", "auto")


@pytest.fixture(params=["kernel", "fallback"])
def impl(request, monkeypatch):
    """Each numeric case twice: ``kernel`` (a silent fallback would raise instead) and
    ``fallback`` (rvv-attention's torch-native path, which serves what kernels reject)."""
    monkeypatch.setenv("RVV_ATTENTION_IMPL", request.param)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("heads", [(6, 2), (5, 1), (4, 4)], ids=["gqa3", "mqa5", "mha"])
def test_decode_mixed_lengths(dtype, heads, impl):
    """Decode with context lengths 1 (no prefix: only the new token) .. 64, GQA 6:2 (a
    ratio of 3), MQA 5:1 and MHA; the kernel writes the new K/V itself (fused path)."""
    check_case(geom(dtype, *heads), [0, 1, 6, 31, 63])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_extend_prefix_cache_hits(dtype, impl):
    """Extend with radix-cache hits of various lengths (0, 5, 16, 3) and new lengths
    (4, 1, 7, 9), new tokens at scattered cache rows."""
    check_case(geom(dtype), [0, 5, 16, 3], [4, 1, 7, 9])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_extend_head_dims_differ(dtype, impl):
    """head_dim != v_head_dim (e.g. 24 / 16): K and V of different widths."""
    check_case(geom(dtype, hq=4, hkv=2, d=24, dv=16), [3, 0], [5, 2], native=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_chunked_prefill_then_decode(dtype, impl):
    """One 23-token prompt prefilled in two chunks (13, then 10 with the first chunk as
    its prefix), then a decode step: equal to a one-shot 23-token prefill and to the
    fp64 reference at each step."""
    kw = geom(dtype, hq=6, hkv=2, d=32)
    chunked = Bench(**kw)
    layer = chunked.layer()
    prompt_q = chunked.randn(23, chunked.hq * chunked.d)
    prompt_k = chunked.randn(23, chunked.hkv, chunked.d)
    prompt_v = chunked.randn(23, chunked.hkv, chunked.dv)
    outs = []
    for lo, hi in ((0, 13), (13, 23)):
        fb, _, _, _ = chunked.extend_batch(layer, [3], [hi - lo])
        assert fb.extend_prefix_lens.tolist() == [lo]
        before = chunked.snapshot()
        q, k, v = prompt_q[lo:hi], prompt_k[lo:hi], prompt_v[lo:hi]
        out = run(RVVAttnBackend, chunked, layer, fb, q, k, v)
        assert_cache_after(chunked, before, layer, fb, k, v)
        chunked.record_new(layer, fb, k, v, quantized=True)
        check_reference(out, chunked, layer, fb, q, f"chunk {lo}:{hi}")
        outs.append(out)

    whole = Bench(**kw)
    fb, _, _, _ = whole.extend_batch(layer, [3], [23])
    one_shot = run(RVVAttnBackend, whole, layer, fb, prompt_q, prompt_k, prompt_v)
    assert_close(torch.cat(outs), one_shot, dtype, "chunked vs one-shot prefill")

    fb, q, k, v = chunked.decode_batch(layer, [3])
    out = run(RVVAttnBackend, chunked, layer, fb, q, k, v)
    chunked.record_new(layer, fb, k, v, quantized=True)
    assert fb.seq_lens.tolist() == [24]
    check_reference(out, chunked, layer, fb, q, "decode after chunks")


@pytest.mark.parametrize("kv_dtype", FP8, ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("k_scale", [None, 0.5], ids=["unscaled", "scaled"])
@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_fp8_kv_cache(dtype, mode, k_scale, kv_dtype, impl):
    """fp8 KV pools (SGLang's --kv-cache-dtype fp8_e4m3 / fp8_e5m2) with and without
    per-tensor scales on the layer (k_scale_float = 0.5, v_scale_float = 1.0: exact
    powers of two, so the pool's bf16 division and a fp64 one round alike). torch_native
    ignores the scales, so it is compared only unscaled."""
    kw = geom(dtype, kv_dtype=kv_dtype)
    ext = [3, 6, 1] if mode == "extend" else None
    check_case(kw, [7, 0, 12], ext, k_scale=k_scale, native=k_scale is None)


@pytest.mark.parametrize("window", [1, 4, 9])
@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sliding_window_layer(dtype, mode, window, impl):
    """layer.sliding_window_size = w on a plain pool: the query at position p sees keys at
    positions p - w .. p (SGLang's rule: w + 1 keys at most). RadixAttention turns a
    window of 0 into -1 (none), so the smallest real window is 1."""
    ext = [5, 3, 8] if mode == "extend" else None
    check_case(
        geom(dtype), [2, 11, 20], ext, layer_kw=dict(sliding_window_size=window), window=window
    )


@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_swa_pool(dtype, mode, impl):
    """SGLang's hybrid SWAKVPool: layer 0 full attention, layer 1 sliding window (w = 4)
    in the SWA sub-pool, whose rows are a scrambled translation of the full rows. Rows of
    tokens that left the window are evicted the way SGLang's allocator does (mapped to
    SWA row 0) and row 0 holds large garbage: reading it would show."""
    w = 4
    kw = geom(dtype, layer_num=2, swa_layer_ids=(1,))
    ext = [3, 5] if mode == "extend" else None
    for layer_id, window in ((0, None), (1, w)):
        outs = {}
        for name, bench in zip(("rvv", "torch_native"), twin(**kw), strict=True):
            layer_kw = {} if window is None else dict(sliding_window_size=window)
            layer = bench.layer(layer_id=layer_id, **layer_kw)
            bench.populate(layer, [1, 2], [9, 14])
            if ext is None:
                fb, q, k, v = bench.decode_batch(layer, [1, 2])
            else:
                fb, q, k, v = bench.extend_batch(layer, [1, 2], ext)
            if window is not None:
                # evict what no query of this batch can see
                mapping = bench.pool.full_to_swa_index_mapping
                for row, s, n in zip([1, 2], fb.seq_lens.tolist(), ext or [1, 1], strict=True):
                    first_visible = max(0, s - n - w)
                    mapping[bench.req_to_token[row, :first_visible].long()] = 0
                bench.pool.swa_kv_pool.k_buffer[0][0] = 1e4
                bench.pool.swa_kv_pool.v_buffer[0][0] = -1e4
            before = bench.snapshot(layer_id)
            cls = RVVAttnBackend if name == "rvv" else TorchNativeAttnBackend
            kk, vv = k.clone(), v.clone()
            out = run(cls, bench, layer, fb, q, kk, vv)
            if name == "rvv":
                assert_cache_after(bench, before, layer, fb, k, v)
                bench.record_new(layer, fb, k, v, quantized=True)
                check_reference(out, bench, layer, fb, q, f"layer {layer_id}", window=window)
            outs[name] = out
        if window is None:  # torch_native's SWA rows: gathered without the window
            assert_close(outs["rvv"], outs["torch_native"], dtype, "rvv vs torch_native")


@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_logit_cap(dtype, mode, impl):
    """layer.logit_cap = 3 with large logits (q scaled x4): the capped result must match
    the reference and differ clearly from the uncapped one (so the cap is really used).
    torch_native has no logit cap: not compared."""
    kw = geom(dtype, hq=4, hkv=2, d=32)
    ext = [4, 2] if mode == "extend" else None
    bench = Bench(**kw)
    layer = bench.layer(logit_cap=3.0)
    bench.populate(layer, [1, 2], [10, 5])
    if ext is None:
        fb, q, k, v = bench.decode_batch(layer, [1, 2])
    else:
        fb, q, k, v = bench.extend_batch(layer, [1, 2], ext)
    q = (q.float() * 4).to(dtype)
    out = run(RVVAttnBackend, bench, layer, fb, q, k, v)
    firsts = bench.record_new(layer, fb, k, v, quantized=True)
    assert firsts
    capped = check_reference(out, bench, layer, fb, q, "capped", cap=3.0)
    uncapped = reference(bench, layer, fb, q)
    assert (capped - uncapped).abs().max() > 0.1, "test inputs do not exercise the cap"


@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sinks_and_window(dtype, mode, impl):
    """Attention sinks (gpt-oss: per-head logits passed as ``sinks=``, fp32) with a window
    of 6: against the reference; a second check that the sinks really change the result.
    torch_native has no sinks: not compared."""
    bench = Bench(**geom(dtype, hq=6, hkv=2, d=32))
    layer = bench.layer(sliding_window_size=6)
    bench.populate(layer, [1, 2, 3], [0, 4, 13])
    if mode == "decode":
        fb, q, k, v = bench.decode_batch(layer, [1, 2, 3])
    else:
        fb, q, k, v = bench.extend_batch(layer, [1, 2, 3], [3, 1, 8])
    sinks = torch.linspace(-1.0, 2.0, bench.hq, dtype=torch.float32)
    out = run(RVVAttnBackend, bench, layer, fb, q, k, v, sinks=sinks)
    bench.record_new(layer, fb, k, v, quantized=True)
    expected = check_reference(out, bench, layer, fb, q, "sinks", window=6, sinks=sinks)
    assert (expected - reference(bench, layer, fb, q, window=6)).abs().max() > 0.05


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_long_contexts(dtype, impl):
    """Contexts of several hundred tokens (the decode kernels split the KV range): decode
    at lengths 1 and 700, then an extend of 200 tokens after a 300-token prefix."""
    kw = geom(dtype, hq=4, hkv=2, d=32, size=1400, max_ctx=1024)
    check_case(kw, [699, 0], native=False)
    check_case(kw, [300], [200], native=False)


def test_idle_batch():
    """An IDLE batch (a DP rank with nothing to run): metadata and forward do nothing."""
    bench = Bench(**geom(torch.bfloat16))
    backend = RVVAttnBackend(bench.runner)
    fb = ForwardBatch(
        forward_mode=ForwardMode.IDLE,
        batch_size=0,
        input_ids=torch.zeros(0, dtype=torch.int64),
        req_pool_indices=torch.zeros(0, dtype=torch.int64),
        seq_lens=torch.zeros(0, dtype=torch.int64),
        out_cache_loc=torch.zeros(0, dtype=torch.int64),
        seq_lens_sum=0,
    )
    before = bench.snapshot()
    backend.init_forward_metadata(fb)
    layer = bench.layer()
    q = torch.zeros(0, bench.hq * bench.d, dtype=torch.bfloat16)
    out = backend.forward(q, None, None, layer, fb)
    assert out.shape == (0, bench.hq * bench.dv)
    after = bench.snapshot()
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


@pytest.mark.parametrize("kv", ["given", "none"])
@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_save_kv_cache_false(dtype, mode, kv, impl):
    """save_kv_cache=False: the caller has written the new tokens' K/V already; the
    backend must not write anything (the cache stays bitwise equal). ``kv="none"``: k = v =
    None as well (KV-shared layers: the new tokens' K/V are read from the cache)."""
    kw = geom(dtype)
    ext = [4, 1] if mode == "extend" else None
    outs = {}
    for name, bench in zip(("rvv", "torch_native"), twin(**kw), strict=True):
        layer = bench.layer()
        bench.populate(layer, [1, 2], [6, 0])
        if ext is None:
            fb, q, k, v = bench.decode_batch(layer, [1, 2])
        else:
            fb, q, k, v = bench.extend_batch(layer, [1, 2], ext)
        bench.write(layer, fb.out_cache_loc, k, v)
        bench.record_new(layer, fb, k, v, quantized=True)
        before = bench.snapshot()
        cls = RVVAttnBackend if name == "rvv" else TorchNativeAttnBackend
        if kv == "none":
            k = v = None
        out = run(cls, bench, layer, fb, q, k, v, save=False)
        after = bench.snapshot()
        assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
        if name == "rvv":
            check_reference(out, bench, layer, fb, q, "vs fp64 reference")
        outs[name] = out
    assert_close(outs["rvv"], outs["torch_native"], dtype, "rvv vs torch_native")


@pytest.mark.parametrize("window", [None, 3], ids=["nowindow", "window3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_encoder_only_layer(dtype, window, impl):
    """attn_type=ENCODER_ONLY: bidirectional extend (every token sees all of its request);
    runs in the kernel (non-causal is a kernel feature). With a window on the layer (as
    embedding_gemma2's) the result is torch_native's: no window (rvv-attention's one-sided
    window would let a token see all later tokens but only w earlier ones)."""
    layer_kw = dict(attn_type=AttentionType.ENCODER_ONLY)
    if window is not None:
        layer_kw["sliding_window_size"] = window
    check_case(geom(dtype), [0, 0], [7, 12], layer_kw=layer_kw, causal=False)


def _cross_attention_setup(dtype):
    """A decoder request with 6 / 9 encoder tokens at positions [0, enc) of its table
    row and 3 / 2 decoder tokens after them (SGLang's encoder-decoder layout)."""
    bench = Bench(**geom(dtype, hq=4, hkv=2, d=16))
    cross = bench.layer(layer_id=0, is_cross_attention=True)
    enc = [6, 9]
    bench.populate(cross, [1, 2], enc)
    dec = [3, 2]
    for row, e, n in zip([1, 2], enc, dec, strict=True):
        bench.req_to_token[row, e : e + n] = torch.tensor(bench.alloc(n), dtype=torch.int32)
    return bench, cross, enc, dec


def _cross_extend_batch(bench, rows, n, enc, encoder_out_cache_loc):
    """A cross-attention EXTEND batch: ``n[i]`` new tokens (no prefix) of request
    ``rows[i]``, which has ``enc[i]`` encoder tokens; the new tokens on new cache rows."""
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=len(rows),
        input_ids=torch.zeros(sum(n), dtype=torch.int64),
        req_pool_indices=torch.tensor(rows),
        seq_lens=torch.tensor(n),
        out_cache_loc=torch.tensor(bench.alloc(sum(n))),
        seq_lens_sum=sum(n),
        encoder_lens=torch.tensor(enc),
        encoder_out_cache_loc=encoder_out_cache_loc,
    )
    fb.extend_seq_lens = torch.tensor(n)
    fb.extend_prefix_lens = torch.zeros(len(rows), dtype=torch.int64)
    fb.extend_seq_lens_cpu = n
    return fb


def _cross_reference(bench, layer, q, rows, enc, qlens):
    """The conformance reference for cross-attention: each query sees its request's
    encoder tokens (positions [0, enc)), no mask."""
    q3 = q.view(-1, bench.hq, bench.d)
    outs, t = [], 0
    for row, e, n in zip(rows, enc, qlens, strict=True):
        entries = bench.truth[(layer.layer_id, row)][:e]
        keys = torch.stack([x[0] for x in entries])
        vals = torch.stack([x[1] for x in entries])
        q_pos = torch.zeros(n, dtype=torch.long)
        outs.append(
            attention(q3[t : t + n], keys, vals, q_pos, sm_scale=layer.scaling, causal=False)
        )
        t += n
    return torch.cat(outs).view(-1, bench.hq * bench.dv)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cross_attention_fallback_reason_logged_once(dtype, caplog):
    """A cross-attention layer (decode then extend, k = v = None: the encoder K/V are
    cached) runs in rvv-attention's torch-native fallback; the reason is logged once
    per op on logger ``rvv_attention`` however often it runs, and the result matches
    the reference and torch_native."""
    ra.clear_cache()  # forget reasons logged by earlier tests
    bench, cross, enc, dec = _cross_attention_setup(dtype)
    rows = [1, 2]
    records = []
    with caplog.at_level(logging.INFO, logger="rvv_attention"):
        for _ in range(3):
            b = len(rows)
            fb = ForwardBatch(
                forward_mode=ForwardMode.DECODE,
                batch_size=b,
                input_ids=torch.zeros(b, dtype=torch.int64),
                req_pool_indices=torch.tensor(rows),
                seq_lens=torch.tensor(dec),
                out_cache_loc=torch.tensor(bench.alloc(b)),
                seq_lens_sum=sum(dec),
                encoder_lens=torch.tensor(enc),
                encoder_out_cache_loc=torch.zeros(0, dtype=torch.int64),
            )
            q = bench.randn(b, bench.hq * bench.d)
            before = bench.snapshot()
            out = run(RVVAttnBackend, bench, cross, fb, q, None, None)
            assert all(torch.equal(a, c) for a, c in zip(before, bench.snapshot(), strict=True))
            assert_matches(out, _cross_reference(bench, cross, q, rows, enc, [1, 1]), "x")
            native = run(TorchNativeAttnBackend, bench, cross, fb, q, None, None)
            assert_close(out, native, dtype, "cross decode vs torch_native")

            n = [2, 3]
            fb = _cross_extend_batch(bench, rows, n, enc, torch.zeros(0, dtype=torch.int64))
            q = bench.randn(sum(n), bench.hq * bench.d)
            out = run(RVVAttnBackend, bench, cross, fb, q, None, None)
            assert_matches(out, _cross_reference(bench, cross, q, rows, enc, n), "x ext")
            native = run(TorchNativeAttnBackend, bench, cross, fb, q, None, None)
            assert_close(out, native, dtype, "cross extend vs torch_native")
        records = [r for r in caplog.records if r.name == "rvv_attention"]
    texts = sorted(r.getMessage() for r in records)
    assert texts == [
        "decode: using the torch-native fallback: the kernel does not support "
        "cross_attention, encoder_lens",
        "extend: using the torch-native fallback: the kernel does not support "
        "cross_attention, encoder_lens",
    ], texts
    assert all(r.levelno == logging.INFO for r in records)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cross_attention_extend_with_encoder_kv(dtype):
    """A cross-attention extend that brings the encoder tokens' K/V (an encoder-decoder
    model's first pass, e.g. mllama): k / v have one row per encoder token, not per query;
    they are written at encoder_out_cache_loc and attended from the cache."""
    outs = {}
    enc, n, rows = [6, 9], [2, 3], [1, 2]
    benches = twin(**geom(dtype, hq=4, hkv=2, d=16))
    for name, bench in zip(("rvv", "torch_native"), benches, strict=True):
        cross = bench.layer(is_cross_attention=True)
        enc_locs: list[int] = []
        for row, e in zip(rows, enc, strict=True):
            locs = bench.alloc(e)
            enc_locs += locs
            bench.req_to_token[row, :e] = torch.tensor(locs, dtype=torch.int32)
        ek = bench.randn(sum(enc), bench.hkv, bench.d)
        ev = bench.randn(sum(enc), bench.hkv, bench.dv)
        fb = _cross_extend_batch(bench, rows, n, enc, torch.tensor(enc_locs))
        q = bench.randn(sum(n), bench.hq * bench.d)
        before = bench.snapshot()
        cls = RVVAttnBackend if name == "rvv" else TorchNativeAttnBackend
        outs[name] = run(cls, bench, cross, fb, q, ek.clone(), ev.clone())
        if name == "rvv":
            enc_fb = SimpleNamespace(out_cache_loc=fb.encoder_out_cache_loc)
            assert_cache_after(bench, before, cross, enc_fb, ek, ev)
            i = 0
            for row, e in zip(rows, enc, strict=True):
                bench.truth[(0, row)] = [(ek[j].double(), ev[j].double()) for j in range(i, i + e)]
                i += e
            expected = _cross_reference(bench, cross, q, rows, enc, n)
            assert_matches(outs[name], expected, "cross extend vs fp64 reference")
    assert_close(outs["rvv"], outs["torch_native"], dtype, "rvv vs torch_native")


@pytest.mark.parametrize("mode", ["decode", "extend"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_encoder_decoder_self_attention(dtype, mode):
    """The decoder's self-attention in an encoder-decoder batch (encoder_lens set): its keys
    are positions [encoder_lens, encoder_lens + seq_lens) of the table row (SGLang's
    layout; rvv-attention's fallback). Reference: fp64 over those cache rows after the
    write."""
    enc, rows, prefix = [6, 9], [1, 2], [3, 0]
    n = [1, 1] if mode == "decode" else [2, 4]
    seq = [p + m for p, m in zip(prefix, n, strict=True)]
    outs = {}
    benches = twin(**geom(dtype, hq=4, hkv=2, d=16))
    for name, bench in zip(("rvv", "torch_native"), benches, strict=True):
        layer = bench.layer()
        for row, e, s in zip(rows, enc, seq, strict=True):
            bench.req_to_token[row, : e + s] = torch.tensor(bench.alloc(e + s), dtype=torch.int32)
        kb, vb = bench.pool.get_key_buffer(0), bench.pool.get_value_buffer(0)
        kb.copy_(bench.randn(*kb.shape))
        vb.copy_(bench.randn(*vb.shape))
        locs = []
        for row, e, s, m in zip(rows, enc, seq, n, strict=True):
            locs += bench.req_to_token[row, e + s - m : e + s].tolist()
        fb = ForwardBatch(
            forward_mode=ForwardMode.DECODE if mode == "decode" else ForwardMode.EXTEND,
            batch_size=2,
            input_ids=torch.zeros(sum(n), dtype=torch.int64),
            req_pool_indices=torch.tensor(rows),
            seq_lens=torch.tensor(seq),
            out_cache_loc=torch.tensor(locs),
            seq_lens_sum=sum(seq),
            encoder_lens=torch.tensor(enc),
        )
        if mode == "extend":
            fb.extend_seq_lens = torch.tensor(n)
            fb.extend_prefix_lens = torch.tensor(prefix)
            fb.extend_seq_lens_cpu = n
        q = bench.randn(sum(n), bench.hq * bench.d)
        k, v = bench.randn(sum(n), bench.hkv, bench.d), bench.randn(sum(n), bench.hkv, bench.dv)
        before = bench.snapshot()
        cls = RVVAttnBackend if name == "rvv" else TorchNativeAttnBackend
        outs[name] = run(cls, bench, layer, fb, q, k.clone(), v.clone())
        if name == "rvv":
            assert_cache_after(bench, before, layer, fb, k, v)
            for row, e, s in zip(rows, enc, seq, strict=True):
                cache_rows = bench.req_to_token[row, e : e + s].long()
                bench.truth[(0, row)] = [(kb[i].double(), vb[i].double()) for i in cache_rows]
            check_reference(outs[name], bench, layer, fb, q, "enc-dec self-attention vs fp64")
    assert_close(outs["rvv"], outs["torch_native"], dtype, "rvv vs torch_native")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_kernel_selected_for_plain_cases(dtype):
    """The plain decoder cases above are meant to exercise the kernels, not the fallback:
    rvv-attention selects the kernel for them (with a reason if it does not)."""
    for op in ("decode", "extend"):
        for kv in (dtype, *FP8):
            feats = {"kv_write"} | ({"fp8_kv"} if kv in FP8 else set())
            sel = ra.select(op, q_dtype=dtype, kv_dtype=kv, head_dim=40, features=feats)
            assert sel.impl.name == "kernel", (op, kv, sel.reason)


def test_rejects_non_cpu_device():
    """The backend runs on the CPU only and says so at construction."""
    runner = SimpleNamespace(device="cuda", req_to_token_pool=None, token_to_kv_pool=None)
    with pytest.raises(ValueError, match="runs on the CPU only"):
        RVVAttnBackend(runner)


# ------------------------------------------------------------------ CPU graph hooks


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cpu_graph_hooks_match_eager(dtype, impl):
    """SGLang's CPU graph runner: init_cpu_graph_state, the seq-len fill value for padded
    requests, init_forward_metadata_capture_cpu_graph, then a decode forward on a batch
    padded the way the runner pads it (req_pool_indices 0, out_cache_loc 0, seq_lens =
    fill value): the real requests' outputs equal the eager path's; the padded ones are
    finite; the only rows written besides out_cache_loc are the padding slot's."""
    kw = geom(dtype)
    prefix = [4, 0, 17]
    eager_bench, graph_bench = twin(**kw)
    results = []
    for mode, bench in (("eager", eager_bench), ("graph", graph_bench)):
        layer = bench.layer()
        bench.populate(layer, [1, 2, 3], prefix)
        fb, q, k, v = bench.decode_batch(layer, [1, 2, 3])
        backend = RVVAttnBackend(bench.runner)
        if mode == "eager":
            backend.init_forward_metadata(fb)
            out = backend.forward_decode(q, k, v, layer, fb)
            results.append(out)
            continue
        max_bs = 5
        backend.init_cpu_graph_state(max_bs, max_bs)
        fill = backend.get_cpu_graph_seq_len_fill_value()
        assert fill >= 1, "padded requests need at least one key (else 0/0 in softmax)"
        pad = max_bs - 3
        req_pool_indices = torch.cat([fb.req_pool_indices, torch.zeros(pad, dtype=torch.int64)])
        seq_lens = torch.cat([fb.seq_lens, torch.full((pad,), fill, dtype=torch.int64)])
        out_cache_loc = torch.cat([fb.out_cache_loc, torch.zeros(pad, dtype=torch.int64)])
        gfb = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=max_bs,
            input_ids=torch.zeros(max_bs, dtype=torch.int64),
            req_pool_indices=req_pool_indices,
            seq_lens=seq_lens,
            out_cache_loc=out_cache_loc,
            seq_lens_sum=int(seq_lens.sum()),
            positions=torch.zeros(max_bs, dtype=torch.int64),
        )
        backend.init_forward_metadata_capture_cpu_graph(
            max_bs,
            max_bs,
            req_pool_indices,
            seq_lens,
            out_cache_loc,
            None,
            ForwardMode.DECODE,
            None,
        )
        before = bench.snapshot()
        gq = torch.cat([q, bench.randn(pad, bench.hq * bench.d)])
        gk = torch.cat([k, bench.randn(pad, bench.hkv, bench.d)])
        gv = torch.cat([v, bench.randn(pad, bench.hkv, bench.dv)])
        out = backend.forward_decode(gq, gk, gv, layer, gfb)
        assert torch.isfinite(out).all()
        after = bench.snapshot()
        changed = (after[0] != before[0]).flatten(1).any(1) | (after[1] != before[1]).flatten(
            1
        ).any(1)
        allowed = set(fb.out_cache_loc.tolist()) | {0}
        assert set(changed.nonzero().flatten().tolist()) <= allowed
        # a replay: same shapes, new values copied into the captured tensors
        out2 = backend.forward_decode(gq, gk, gv, layer, gfb)
        assert torch.equal(out, out2)
        results.append(out[:3])
    # Bit-identical where the padded batch splits the keys as many ways as the eager one
    # (rvv_attention.num_splits depends on the batch size); else the splits' partial results
    # merge in another order, which may change the last bits of fp32 sums.
    threads = torch.get_num_threads()
    same_splits = ra.num_splits(3, kw["hkv"], threads) == ra.num_splits(5, kw["hkv"], threads)
    tol = 0.0 if same_splits else {torch.float32: 1e-5, torch.float16: 1e-3}.get(dtype, 8e-3)
    torch.testing.assert_close(results[1], results[0], atol=tol, rtol=tol)


# ------------------------------------------------------------------ KV cache pages


def _whole_pages(t: torch.Tensor) -> int:
    s = t.untyped_storage()
    page = 2 << 20
    return max(0, (s.data_ptr() + s.nbytes()) // page * page - -(-s.data_ptr() // page) * page)


@pytest.mark.parametrize("swa", [False, True], ids=["mha", "swa"])
def test_backend_puts_kv_cache_on_huge_pages(swa, monkeypatch):
    """At construction the backend asks for 2 MiB pages under every K/V buffer of the pool
    (and of SWA's sub-pools) - decode reads rows at random, so 4 KiB pages cost a TLB miss
    per row; the contents stay as they were. SGLANG_RVV_HUGE_PAGES=0 leaves them alone."""
    from rvv_attention._hugepages import huge_bytes, thp_mode
    from sglang_rvv.backend import ENV_HUGE_PAGES, kv_buffers

    kw = geom(torch.bfloat16, d=128, size=20000, layer_num=2)
    if swa:
        kw["swa_layer_ids"] = (1,)
    bench = Bench(**kw)
    buffers = kv_buffers(bench.pool)
    assert len(buffers) == 4, [tuple(b.shape) for b in buffers]  # K and V of 2 layers
    for b in buffers:
        b.copy_(torch.randn(b.shape, generator=bench.gen).to(b.dtype))
    before = [b.clone() for b in buffers]

    # With the switch off the backend does not advise anything. (Whether the buffers are on
    # huge pages already is up to where the allocator put them: memory an earlier test
    # advised can be handed out again and collapsed by khugepaged at any time, so the page
    # state itself says nothing here - CI once saw 36 MiB huge in the second case.)
    calls: list[int] = []
    real_advise = ra.advise_huge_pages

    def spy(*tensors: torch.Tensor) -> ra.HugePages:
        calls.append(len(tensors))
        return real_advise(*tensors)

    monkeypatch.setattr(ra, "advise_huge_pages", spy)
    monkeypatch.setenv(ENV_HUGE_PAGES, "0")
    RVVAttnBackend(bench.runner)
    assert calls == []

    monkeypatch.delenv(ENV_HUGE_PAGES)
    RVVAttnBackend(bench.runner)
    assert calls == [4]  # once, with every K and V buffer
    for b, want in zip(buffers, before, strict=True):
        assert torch.equal(b, want)
        # this machine (Linux 6.1+, THP madvise/always) collapses every whole 2 MiB page
        assert thp_mode() in ("madvise", "always")
        assert huge_bytes(b) >= _whole_pages(b) > 0, (huge_bytes(b), _whole_pages(b))
