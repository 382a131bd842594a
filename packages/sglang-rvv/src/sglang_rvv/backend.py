"""``RVVAttnBackend``: SGLang's ``--attention-backend rvv``, running through rvv-attention.

Every decision between "a layer has q, k, v and a KV cache" and "a kernel runs" is
rvv-attention's: it runs the RVV kernels of rvv-ops where they apply and its torch-native
fallback (with the reason logged once) where they do not, e.g. cross-attention. This class
only translates SGLang's ``ForwardBatch`` / ``RadixAttention`` into rvv-attention's calls.

- K/V of the new tokens are written with the pool's own ``set_kv_buffer`` (which handles
  fp8 scaling and SGLang's SWA pools); in plain decode the kernel writes them itself, fused with
  the attention, as sgl-kernel's CPU backend does.
- Sliding-window layers over an SWA pool read ``req_to_token`` translated to the SWA pool's
  index space (once per forward pass).
- ``--enable-torch-compile`` is refused at start-up with a clear error: SGLang's CPU graph
  runner registers fake kernels for sgl-kernel's whole CPU op set, most of which rvv-ops does
  not define. The ``*_cpu_graph*`` hooks are implemented (and tested directly) for when it can.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import rvv_attention as ra
import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

from sglang_rvv import compat, kv_int8, layers

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger("sglang_rvv")

ENV_HUGE_PAGES = "SGLANG_RVV_HUGE_PAGES"
"""Set to 0 to leave the KV cache on the pages torch gave it (see :func:`kv_buffers`)."""

_KV_ATTRS = ("k_buffer", "v_buffer", "kv_buffer")
_SUB_POOLS = ("full_kv_pool", "swa_kv_pool")


def kv_buffers(pool: Any) -> list[torch.Tensor]:
    """The CPU tensors holding a KV pool's K/V rows (``k_buffer``/``v_buffer``/``kv_buffer``
    of the pool and of its full/SWA sub-pools), which the backend asks the kernel to back
    with huge pages: decode reads them a row at a time at random, so on 4 KiB pages nearly
    every row is a TLB miss."""
    out: list[torch.Tensor] = []
    for p in (pool, *(getattr(pool, n, None) for n in _SUB_POOLS)):
        if p is None:
            continue
        for name in _KV_ATTRS:
            v = getattr(p, name, None)
            items = v if isinstance(v, (list, tuple)) else [v]
            out += [t for t in items if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
    return out


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class RVVAttnBackend(AttentionBackend):  # type: ignore[misc]
    """SGLang attention backend over rvv-attention (RVV kernels, torch-native fallback)."""

    def __init__(self, model_runner: ModelRunner) -> None:
        super().__init__()
        self.device = model_runner.device
        if torch.device(self.device).type != "cpu":
            raise ValueError(
                f"attention backend 'rvv': device={self.device!r}; it runs on the CPU only "
                "(use --device cpu)"
            )
        server_args = getattr(model_runner, "server_args", None)
        if getattr(server_args, "enable_torch_compile", False):
            raise ValueError(
                "attention backend 'rvv': --enable-torch-compile is not supported: SGLang "
                "0.5.23's CPU graph runner registers fake kernels for all of sgl-kernel's CPU "
                "ops, some of which rvv-ops does not define (apply_multidimensional_rope_cpu, "
                "fused_qk_rmsnorm_sumsq_cpu, ...; docs/models.md lists them); run "
                "without --enable-torch-compile"
            )
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.use_sliding_window_kv_pool = (
            isinstance(self.token_to_kv_pool, SWAKVPool)
            and self.token_to_kv_pool.swa_layer_nums > 0
        )
        self.swa_out_cache_loc: torch.Tensor | None = None
        # This forward pass's req_to_token rows translated to the SWA pool (made on first use).
        self._swa_tables: tuple[torch.Tensor, torch.Tensor] | None = None
        self.max_extend_len = 0
        huge_pages = "off"
        if os.environ.get(ENV_HUGE_PAGES, "1") != "0":
            buffers = kv_buffers(self.token_to_kv_pool)
            hp = ra.advise_huge_pages(*buffers)
            total = sum(b.untyped_storage().nbytes() for b in buffers) >> 20
            huge_pages = f"{hp.collapsed >> 20} of {total} MiB" + (
                f" ({hp.reason})" if hp.reason else ""
            )
        logger.info("%s", startup_summary(model_runner, self.token_to_kv_pool, huge_pages))

    # ---------------------------------------------------------------- metadata

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        """Per forward pass: the longest extend and the SWA-translated write locations."""
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle():
            self.max_extend_len = 1
        elif forward_batch.extend_seq_lens_cpu is not None:
            self.max_extend_len = max(forward_batch.extend_seq_lens_cpu, default=0)
        elif forward_batch.extend_seq_lens is not None:
            lens = forward_batch.extend_seq_lens
            self.max_extend_len = int(lens.max()) if lens.numel() else 0
        else:
            self.max_extend_len = 0
        self._init_swa(forward_batch.out_cache_loc)

    def _init_swa(self, out_cache_loc: torch.Tensor | None) -> None:
        if self.use_sliding_window_kv_pool and out_cache_loc is not None:
            self.swa_out_cache_loc = self.token_to_kv_pool.translate_loc_from_full_to_swa(
                out_cache_loc
            )
        else:
            self.swa_out_cache_loc = None
        self._swa_tables = None

    def _is_swa_layer(self, layer_id: int) -> bool:
        return bool(
            self.use_sliding_window_kv_pool and self.token_to_kv_pool.layers_mapping[layer_id][1]
        )

    def _tables(
        self, layer: RadixAttention, forward_batch: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``req_to_token`` and ``req_pool_indices`` addressing this layer's KV buffer."""
        req_to_token = self.req_to_token_pool.req_to_token
        req_pool_indices = forward_batch.req_pool_indices
        if layer.is_cross_attention or not self._is_swa_layer(layer.layer_id):
            return req_to_token, req_pool_indices
        # An SWA layer's buffer has only swa_size rows: req_to_token holds full-pool indices.
        if self._swa_tables is not None:
            return self._swa_tables
        seq_lens = forward_batch.seq_lens
        longest = int(seq_lens.max()) if seq_lens.numel() else 0
        rows = req_to_token[req_pool_indices, :longest]
        translated = self.token_to_kv_pool.translate_loc_from_full_to_swa(rows).to(
            req_to_token.dtype
        )
        indices = torch.arange(translated.shape[0], dtype=torch.int64)
        self._swa_tables = (translated, indices)
        return self._swa_tables

    # ------------------------------------------------------------------- cache

    def _cache(self, layer: RadixAttention) -> ra.KVCache:
        k_buf = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        v_buf = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
        if k_buf.dtype == torch.int8:
            # --kv-cache-dtype int8: the pool's per-token scales come with the rows (and a
            # pool without them is an error there, not a guess).
            return kv_int8.layer_cache(self.token_to_kv_pool, layer.layer_id)
        return ra.KVCache(
            k_buf,
            v_buf,
            k_scale=_scale(getattr(layer, "k_scale_float", None)),
            v_scale=_scale(getattr(layer, "v_scale_float", None)),
        )

    def _write_kv(
        self,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        k: torch.Tensor,
        v: torch.Tensor,
        cache: ra.KVCache,
    ) -> None:
        loc = (
            forward_batch.encoder_out_cache_loc
            if layer.is_cross_attention
            else forward_batch.out_cache_loc
        )
        swa_loc = None if layer.is_cross_attention else self.swa_out_cache_loc
        if cache.k.dtype in _FP8:
            # SGLang's pool scales in place (``cache_k.div_(k_scale)``): hand it copies, the
            # caller's k / v must stay as given (extend attends with them after this write).
            if cache.k_scale != 1.0:
                k = k.clone()
            if cache.v_scale != 1.0:
                v = v.clone()
            self.token_to_kv_pool.set_kv_buffer(
                layer,
                KVWriteLoc(loc, swa_loc),
                k,
                v,
                k_scale=cache.k_scale,
                v_scale=cache.v_scale,
            )
        else:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(loc, swa_loc), k, v)

    def _write_loc(self, layer: RadixAttention, forward_batch: ForwardBatch) -> torch.Tensor:
        """The cache rows of this pass's new tokens in this layer's buffer (an SWA layer's
        are translated to the SWA pool's rows)."""
        if self._is_swa_layer(layer.layer_id):
            assert self.swa_out_cache_loc is not None
            return self.swa_out_cache_loc
        loc: torch.Tensor = forward_batch.out_cache_loc
        return loc

    def _prepare(
        self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q [tokens, Hq, D]``, a new ``out [tokens, Hq, Dv]`` and this layer's tables."""
        hq, _, d, dv = _heads(layer)
        q3 = q.reshape(-1, hq, d)
        out = q.new_empty((q3.shape[0], hq, dv))
        req_to_token, req_pool_indices = self._tables(layer, forward_batch)
        return q3, out, req_to_token, req_pool_indices

    # ----------------------------------------------------------------- forward

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Prefill / chunked prefill / prefix-cache hits: new tokens attend to prefix + selves."""
        hq, hkv, d, dv = _heads(layer)
        cache = self._cache(layer)
        out_cache_loc = None
        if save_kv_cache and k is not None and v is not None:
            if cache.kind == "int8" and not layer.is_cross_attention:
                # The INT8 op quantises the new tokens' K/V into these rows itself (values
                # and scales), so they are not written twice.
                out_cache_loc = self._write_loc(layer, forward_batch)
            else:
                self._write_kv(layer, forward_batch, k, v, cache)
        if layer.is_cross_attention:
            # k / v are the encoder tokens' (not one per query): cross-attention reads them,
            # like every encoder token, from the cache.
            k = v = None
        q3, out, req_to_token, req_pool_indices = self._prepare(q, layer, forward_batch)
        causal = not (layer.is_cross_attention or layer.attn_type == AttentionType.ENCODER_ONLY)
        # rvv-attention's window is one-sided (keys >= p - w): with a non-causal layer it
        # would still show every later key. No window there, as in SGLang's torch_native
        # backend (its triton backend uses |p - k| <= w, which rvv-attention cannot express).
        window = _window(layer) if causal else None
        ra.extend(
            q3,
            None if k is None else k.reshape(-1, hkv, d),
            None if v is None else v.reshape(-1, hkv, dv),
            cache,
            out,
            req_to_token,
            req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.extend_seq_lens,
            sm_scale=layer.scaling,
            extend_start_loc=forward_batch.extend_start_loc,
            out_cache_loc=out_cache_loc,
            max_extend_len=self.max_extend_len,
            causal=causal,
            sliding_window=window,
            **_options(layer, forward_batch, sinks),
        )
        layers.maybe_flush_stats()
        return out.view(-1, hq * dv)

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One new token per request attends to its whole cached context."""
        hq, hkv, d, dv = _heads(layer)
        cache = self._cache(layer)
        q3, out, req_to_token, req_pool_indices = self._prepare(q, layer, forward_batch)
        key = value = loc = None
        if save_kv_cache and k is not None and v is not None:
            fused = not layer.is_cross_attention and (
                cache.kind == "int8"
                or (cache.k.dtype == q.dtype and not self._is_swa_layer(layer.layer_id))
            )
            if fused:
                # The kernel writes the new token's K/V itself, in the same pass (INT8:
                # quantised, with their scales).
                key, value = k.reshape(-1, hkv, d), v.reshape(-1, hkv, dv)
                loc = self._write_loc(layer, forward_batch)
            else:
                self._write_kv(layer, forward_batch, k, v, cache)
        ra.decode(
            q3,
            cache,
            out,
            req_to_token,
            req_pool_indices,
            forward_batch.seq_lens,
            sm_scale=layer.scaling,
            loc=loc,
            key=key,
            value=value,
            sliding_window=_window(layer),
            **_options(layer, forward_batch, sinks),
        )
        layers.maybe_flush_stats()
        return out.view(-1, hq * dv)

    # --------------------------------------------------- CPU graph (torch.compile)

    def init_cpu_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
        """Nothing to preallocate: rvv-attention's scratch pool keeps stable storage."""

    def get_cpu_graph_seq_len_fill_value(self) -> int:
        """Padding requests of a captured graph get length 1 (one valid key: no NaN)."""
        return 1

    def init_forward_metadata_capture_cpu_graph(
        self,
        bs: int,
        num_tokens: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        out_cache_loc: torch.Tensor,
        encoder_lens: torch.Tensor | None,
        forward_mode: Any,
        spec_info: Any,
    ) -> None:
        """Metadata for a decode graph being captured (decode only, as SGLang captures)."""
        self.max_extend_len = 1
        self._init_swa(out_cache_loc)

    def support_triton(self) -> bool:
        """The rvv backend never needs triton (SGLang then takes its non-triton paths)."""
        return False


def _heads(layer: RadixAttention) -> tuple[int, int, int, int]:
    """Query heads, KV heads, QK head size and V head size of this rank's part of a layer."""
    return layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim, layer.v_head_dim


def _options(
    layer: RadixAttention, forward_batch: ForwardBatch, sinks: torch.Tensor | None
) -> dict[str, Any]:
    """The keyword arguments ``ra.decode`` and ``ra.extend`` share."""
    return {
        "logit_cap": float(layer.logit_cap or 0.0),
        "sinks": sinks,
        "cross_attention": bool(layer.is_cross_attention),
        "encoder_lens": forward_batch.encoder_lens,
    }


def _scale(value: float | None) -> float:
    return float(value) if value else 1.0


def _window(layer: RadixAttention) -> int | None:
    size = getattr(layer, "sliding_window_size", -1)
    return None if size is None or size < 0 else int(size)


# ------------------------------------------------------------------ start-up summary

Case = tuple[str, torch.dtype, torch.dtype, int, int, frozenset[str]]
"""(op, query dtype, KV dtype, head_dim, v_head_dim, rvv-attention features)."""


def attention_cases(model: Any, pool: Any, q_dtype: torch.dtype) -> Counter[Case]:
    """The decode and extend cases the model's attention layers will ask rvv-attention for,
    with how many layers ask each (features as ``ra.decode`` / ``ra.extend`` derive them)."""
    from sglang.srt.layers.radix_attention import RadixAttention

    cases: Counter[Case] = Counter()
    for layer in model.modules() if model is not None else ():
        if not isinstance(layer, RadixAttention):
            continue
        kv_dtype = pool.get_key_buffer(layer.layer_id).dtype
        _, _, d, dv = _heads(layer)
        features = set()
        if _window(layer):
            features.add("sliding_window")
        if layer.logit_cap and layer.logit_cap > 0:
            features.add("logit_cap")
        if layer.is_cross_attention:
            features |= {"cross_attention", "encoder_lens"}
        if kv_dtype in _FP8:
            features.add("fp8_kv")
        elif kv_dtype == torch.int8:
            features.add("int8_kv")
        if d != dv:
            features.add("mla")
        causal = not (layer.is_cross_attention or layer.attn_type == AttentionType.ENCODER_ONLY)
        cases["decode", q_dtype, kv_dtype, d, dv, frozenset(features)] += 1
        extend = features if causal else features | {"non_causal"}
        cases["extend", q_dtype, kv_dtype, d, dv, frozenset(extend)] += 1
    return cases


def fallback_summary(cases: Counter[Case]) -> str:
    """What rvv-attention will run on its torch fallback for ``cases``, and why ("none")."""
    falls = []
    for (op, q_dtype, kv_dtype, d, dv, features), n in cases.items():
        try:
            sel = ra.select(
                op, q_dtype=q_dtype, kv_dtype=kv_dtype, head_dim=d, v_head_dim=dv, features=features
            )
        except (ra.KernelUnavailableError, ValueError) as e:
            falls.append(f"{op} of {n} layers: error: {e}")
            continue
        if sel.impl.name != "kernel":
            falls.append(f"{op} of {n} layers: {sel.reason}")
    return "; ".join(falls) if falls else "none"


def startup_summary(model_runner: Any, pool: Any, huge_pages: str) -> str:
    """One line: the attention kernel variant, what falls back, the routed layers, the KV
    cache's huge pages and the compat rows active in this process."""
    caps = ra.capabilities()
    if caps.kernels is None:
        kernels = f"no RVV kernels ({caps.kernels_error})"
    else:
        vlen = f" VLEN {caps.vlen}" if caps.has_v else ""
        kernels = (
            f"kernels {caps.kernels.get('active_variant')}{vlen}"
            f"{' Zvfh' if caps.zvfh else ''}, {caps.threads} threads"
        )
    try:
        cases = attention_cases(getattr(model_runner, "model", None), pool, model_runner.dtype)
        fallback = fallback_summary(cases) if cases else "no attention layers found"
    except Exception as e:  # a summary must never stop the server from starting
        fallback = f"unknown ({type(e).__name__}: {e})"
    patched = ", ".join(p.rsplit(".", 1)[-1] for p in compat.ACTIVE) or "nothing"
    try:
        pool_size = kv_int8.pool_report(pool)
    except Exception as e:  # as above: the summary never stops the server
        pool_size = f"KV pool size unknown ({type(e).__name__}: {e})"
    return (
        f"sglang-rvv: attention rvv on {kernels} | torch fallback: {fallback} | "
        f"{layers.routing_summary()} | {pool_size} | KV cache on 2 MiB pages: {huge_pages} | "
        f"compat: {patched}"
    )
