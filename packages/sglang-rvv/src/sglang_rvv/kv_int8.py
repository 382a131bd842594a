"""``--kv-cache-dtype int8``: an INT8 KV cache with per-token, per-KV-head fp32 scales.

SGLang 0.5.23 has no ``int8`` KV-cache dtype. :func:`register` (called by the plugin in every
SGLang process, before arguments are parsed) adds it through SGLang's extension points:

hooks from SGLang's plugin ``HookRegistry`` (applied by SGLang after the plugins load, before
it parses arguments):

  - ``ServerArgs.add_cli_args``: ``int8`` joins the ``--kv-cache-dtype`` choices;

  - ``configure_kv_cache_dtype`` maps ``int8`` to ``torch.int8`` (SGLang raises on it);
  - ``KVCacheConfigurator._resolve_kv_pool_class`` answers ``kind="mha"`` with
    :class:`Int8TokenToKVPool` when the cache is INT8, at every site SGLang builds an MHA pool
    (standalone and both halves of an SWA pool), the
    way a platform's ``get_kv_pool_cls`` would;
  - ``KVCacheConfigurator.configure`` first refuses what the INT8 pool does not serve: any
    attention backend but ``rvv``, MLA models, hybrid linear-attention (mamba-style) models
    (SGLang's configurator for those does not count the scales), hierarchical cache, PD
    disaggregation, speculative decoding and the page-major / sharded layouts;
  - the pool configurators' bytes per token include the scales (``DefaultPoolConfigurator``
    and ``HybridSWAPoolConfigurator``), so ``--mem-fraction-static`` sizes the pool right;
  - ``check_server_args`` refuses another attention backend in the launcher already.

Storage: per layer ``k [rows, Hkv, D]`` / ``v [rows, Hkv, Dv]`` int8 and ``k_scales`` /
``v_scales [rows, Hkv]`` fp32, real value = stored * scale, written with rvv-attention's
INT8 policy (symmetric, ``absmax / 127``, one scale per token and KV head) whenever tokens
are stored, by :meth:`Int8TokenToKVPool.set_kv_buffer` or by the INT8 attention ops that
write the new tokens themselves. Rows are SGLang's token indices, so the radix cache's
prefix hits, chunked prefill and freed-then-reused rows need nothing else: a row's scales
live and die with its values.
"""

from __future__ import annotations

import logging
from typing import Any

import rvv_attention as ra
import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, unwrap_write_loc

from sglang_rvv import hooks

logger = logging.getLogger("sglang_rvv")

OPTION = "int8"
"""The ``--kv-cache-dtype`` value this module adds."""

BACKEND = "rvv"
"""The only attention backend that reads the INT8 pool."""

SCALE_BYTES = 4
"""fp32 scale per token, KV head and tensor (K and V)."""

_HOOKS_PREFIX = "sglang.srt"


class Int8TokenToKVPool(MHATokenToKVPool):  # type: ignore[misc]
    """SGLang's MHA token-to-KV pool storing K/V as int8 with fp32 scales per token and head.

    Built by SGLang's configurator with the keyword arguments of ``MHATokenToKVPool`` and
    ``dtype=torch.int8``. Everything about addressing (rows, pages, the padded slot, SWA
    translation, freeing) is the base class's; this class adds the scale buffers, writes
    quantised rows with their scales, and counts the scales in the pool's size.
    """

    k_scales: list[torch.Tensor]
    v_scales: list[torch.Tensor]

    def _create_buffers(self) -> None:
        if self.dtype != torch.int8:
            raise ValueError(
                f"Int8TokenToKVPool: dtype={self.dtype}; expected torch.int8 "
                f"(--kv-cache-dtype {OPTION})"
            )
        if self.kv_cache_layout != "nhd" or self.post_capture_active:
            raise ValueError(
                f"--kv-cache-dtype {OPTION}: the INT8 pool supports SGLang's plain NHD layout "
                f"only; got layout {self.kv_cache_layout!r}, post-capture "
                f"{self.post_capture_active} (unset SGLANG_USE_HND_KVCACHE)"
            )
        if self.is_quantized_kv_cache:
            raise ValueError(
                f"--kv-cache-dtype {OPTION}: the INT8 pool takes no SGLang KV quant method; "
                f"got {type(self.quant_method).__name__}"
            )
        super()._create_buffers()
        rows = self.size + self.page_size
        self.k_scales = [self._scale_buffer(rows) for _ in range(self.layer_num)]
        self.v_scales = [self._scale_buffer(rows) for _ in range(self.layer_num)]

    def _scale_buffer(self, rows: int) -> torch.Tensor:
        return torch.zeros((rows, self.head_num), dtype=torch.float32, device=self.device)

    def _local(self, layer_id: int) -> int:
        return layer_id - int(self.start_layer)

    def get_key_scales(self, layer_id: int) -> torch.Tensor:
        """fp32 ``[rows, Hkv]`` scales of layer ``layer_id``'s K rows."""
        return self.k_scales[self._local(layer_id)]

    def get_value_scales(self, layer_id: int) -> torch.Tensor:
        """fp32 ``[rows, Hkv]`` scales of layer ``layer_id``'s V rows."""
        return self.v_scales[self._local(layer_id)]

    def layer_cache(self, layer_id: int) -> ra.KVCache:
        """Layer ``layer_id``'s rows and scales as rvv-attention's cache description."""
        return ra.KVCache(
            self.get_key_buffer(layer_id),
            self.get_value_buffer(layer_id),
            k_scales=self.get_key_scales(layer_id),
            v_scales=self.get_value_scales(layer_id),
        )

    def set_kv_buffer(
        self,
        layer: Any,
        loc_info: Any,
        cache_k: torch.Tensor,
        cache_v: torch.Tensor,
        k_scale: float | None = None,
        v_scale: float | None = None,
        layer_id_override: int | None = None,
        dcp_kv_mask: torch.Tensor | None = None,
    ) -> None:
        """Quantises ``cache_k [n, Hkv, D]`` / ``cache_v [n, Hkv, Dv]`` (any float dtype) per
        token and head and writes values and scales at rows ``loc``. ``k_scale`` /
        ``v_scale`` (per-tensor fp8 checkpoint scales) do not apply: the scales are computed
        from the values."""
        if dcp_kv_mask is not None:
            raise NotImplementedError(
                f"--kv-cache-dtype {OPTION}: decode context parallelism (dcp_kv_mask) is not "
                "supported by the INT8 pool"
            )
        loc, _, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_override if layer_id_override is not None else layer.layer_id
        if not cache_k.is_floating_point() or not cache_v.is_floating_point():
            raise TypeError(
                f"Int8TokenToKVPool.set_kv_buffer: cache_k / cache_v are {cache_k.dtype} / "
                f"{cache_v.dtype}; expected floating-point K/V to quantise"
            )
        n = int(loc.numel())
        key = cache_k.reshape(n, self.head_num, self.head_dim)
        value = cache_v.reshape(n, self.head_num, self.v_head_dim)
        ra.write_rows(self.layer_cache(layer_id), loc, key, value)

    def get_kv_size_bytes(self) -> tuple[int, int]:
        k_bytes, v_bytes = super().get_kv_size_bytes()
        k_bytes += sum(t.numel() * t.element_size() for t in self.k_scales)
        v_bytes += sum(t.numel() * t.element_size() for t in self.v_scales)
        return int(k_bytes), int(v_bytes)

    def bytes_per_token(self) -> int:
        """K, V and their scales over all layers of this pool, for one token."""
        per_head = self.head_dim + self.v_head_dim + 2 * SCALE_BYTES
        return int(self.layer_num * self.head_num * per_head)

    def _clear_buffers(self) -> None:
        super()._clear_buffers()
        del self.k_scales
        del self.v_scales

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        super().move_kv_cache(tgt_loc, src_loc)
        if self.layer_num == 0 or tgt_loc.numel() == 0:
            return
        src, tgt = src_loc.to(torch.int64), tgt_loc.to(torch.int64)
        for scales in (*self.k_scales, *self.v_scales):
            scales[tgt] = scales[src]

    def get_cpu_copy(self, indices: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """The base class's CPU copy of the rows, plus their scales (retraction offload)."""
        kv = super().get_cpu_copy(indices, *args, **kwargs)
        idx = indices.to(torch.int64)
        pairs = zip(self.k_scales, self.v_scales, strict=True)
        scales = [(k[idx].cpu(), v[idx].cpu()) for k, v in pairs]
        return (kv, scales)

    def load_cpu_copy(
        self, kv_cache_cpu: Any, indices: torch.Tensor, *args: Any, **kw: Any
    ) -> None:
        kv, scales = kv_cache_cpu
        super().load_cpu_copy(kv, indices, *args, **kw)
        idx = indices.to(torch.int64)
        for (k_cpu, v_cpu), k, v in zip(scales, self.k_scales, self.v_scales, strict=True):
            k[idx] = k_cpu.to(k.device)
            v[idx] = v_cpu.to(v.device)


def layer_cache(pool: Any, layer_id: int) -> ra.KVCache:
    """Layer ``layer_id``'s INT8 cache in ``pool``: an :class:`Int8TokenToKVPool`, or an SGLang
    ``SWAKVPool`` whose halves are (its ``layers_mapping`` picks the half and local layer)."""
    mapping = getattr(pool, "layers_mapping", None)
    if mapping is not None and hasattr(pool, "full_kv_pool"):
        local, is_swa = mapping[layer_id]
        pool = pool.swa_kv_pool if is_swa else pool.full_kv_pool
        layer_id = local + int(pool.start_layer)
    if not isinstance(pool, Int8TokenToKVPool):
        raise TypeError(
            f"KV cache of layer {layer_id} is stored as int8 in a {type(pool).__name__}, which "
            "keeps no per-token scales; INT8 K/V without scales cannot be read "
            f"(--kv-cache-dtype {OPTION} builds an Int8TokenToKVPool)"
        )
    return pool.layer_cache(layer_id)


def pool_report(pool: Any) -> str:
    """The KV pool's size as its own accounting has it: bytes (K, V and scales), token rows
    and bytes per token. One line, for the start-up log."""
    k_bytes, v_bytes = _size(pool)
    rows = int(getattr(pool, "size", 0))
    dtype = str(getattr(pool, "dtype", "?")).replace("torch.", "")
    per_token = (k_bytes + v_bytes) / rows if rows else 0.0
    return (
        f"KV pool {dtype}: {k_bytes + v_bytes} bytes (K {k_bytes}, V {v_bytes}) for {rows} "
        f"tokens, {per_token:.1f} bytes/token"
    )


def _size(pool: Any) -> tuple[int, int]:
    size = pool.get_kv_size_bytes()
    if isinstance(size, tuple):
        return int(size[0]), int(size[1])
    return int(size), 0


# ------------------------------------------------------------------------------ hooks


def scale_bytes_per_token(kv_heads: int, layers: int) -> int:
    """Bytes of K and V scales one token takes over ``layers`` layers of ``kv_heads`` heads."""
    return 2 * SCALE_BYTES * kv_heads * layers


def _is_int8(kvc: Any) -> bool:
    return getattr(kvc, "kv_cache_dtype", None) == torch.int8


def configure_kv_cache_dtype(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``kv_cache_dtype.configure_kv_cache_dtype``: ``"int8"`` -> ``torch.int8``."""
    requested = kwargs.get("server_args_kv_cache_dtype")
    if kwargs.get("is_draft_worker") and kwargs.get("speculative_draft_kv_cache_dtype"):
        requested = kwargs["speculative_draft_kv_cache_dtype"]
    if requested == OPTION:
        return OPTION, torch.int8
    return original(*args, **kwargs)


def resolve_kv_pool_class(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``KVCacheConfigurator._resolve_kv_pool_class``: the INT8 pool for MHA."""
    cls = original(self, *args, **kwargs)
    kind = kwargs.get("kind", args[0] if args else None)
    if kind == "mha" and _is_int8(self):
        if cls is not MHATokenToKVPool:
            raise ValueError(
                f"--kv-cache-dtype {OPTION}: the MHA pool class is {cls.__name__} (a platform "
                "or layout choice); the INT8 pool replaces only SGLang's plain MHATokenToKVPool"
            )
        return Int8TokenToKVPool
    return cls


def check_configuration(self: Any, *args: Any, **kwargs: Any) -> None:
    """BEFORE ``KVCacheConfigurator.configure``: what the INT8 pool does not serve fails
    here, at start-up, naming the option."""
    if not _is_int8(self):
        return None
    check_backends(_attention_backends())
    problems = []
    if getattr(self, "use_mla_backend", False):
        problems.append("MLA models (their latent cache is not per-head K/V)")
    if getattr(self, "mambaish_config", None) is not None:
        # SGLang sizes a hybrid linear-attention pool (mamba / GDN state plus full-attention
        # K/V) with its own configurator, which this plugin does not extend with the scales.
        problems.append("hybrid linear-attention (mamba-style) models")
    sa = getattr(self, "server_args", None)
    flags = {
        "enable_hierarchical_cache": "--enable-hierarchical-cache",
        "enable_page_major_kv_layout": "--enable-page-major-kv-layout",
        "enable_kv_cache_sharding": "--enable-kv-cache-sharding",
    }
    for attr, flag in flags.items():
        if getattr(sa, attr, False):
            problems.append(flag)
    if getattr(sa, "disaggregation_mode", "null") not in (None, "null"):
        problems.append("PD disaggregation")
    if getattr(sa, "speculative_algorithm", None) not in (None, "", "NONE"):
        problems.append("speculative decoding")
    if problems:
        raise ValueError(
            f"--kv-cache-dtype {OPTION} does not support " + ", ".join(problems) + "; "
            "remove them or use --kv-cache-dtype auto"
        )
    return None


def check_backends(backends: tuple[str | None, ...]) -> None:
    """Raises unless every attention backend in ``backends`` is ``rvv``."""
    others = sorted({str(b) for b in backends if b != BACKEND})
    if others:
        raise ValueError(
            f"--kv-cache-dtype {OPTION} needs --attention-backend {BACKEND}; attention backend "
            f"{', '.join(repr(b) for b in others)} cannot read the INT8 KV cache (its "
            "per-token scales are sglang-rvv's)"
        )


def _attention_backends() -> tuple[str | None, ...]:
    from sglang.srt.runtime_context import attention_backends

    return tuple(attention_backends())


def check_server_args(result: Any, server_args: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``validation_hook.check_server_args`` (the launcher, before any process starts)."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolving_view

    cfg = resolving_view(server_args)
    if getattr(cfg, "kv_cache_dtype", None) == OPTION:
        check_backends(tuple(attention_backends_of(cfg)))
    return None


def default_cell_size(result: int, self: Any, kvc: Any, num_layers: int) -> int:
    """AFTER ``DefaultPoolConfigurator._compute_cell_size``: add the scales' bytes."""
    if not _is_int8(kvc) or kvc.use_mla_backend:
        return result
    tp, dcp = _parallel_sizes()
    heads = int(kvc.model_config.get_num_kv_heads(tp, dcp))
    return int(result) + scale_bytes_per_token(heads, num_layers)


def swa_cell_sizes(result: Any, self: Any, kvc: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``HybridSWAPoolConfigurator.__init__``: the scales in both halves' bytes/token."""
    if not _is_int8(kvc) or kvc.use_mla_backend:
        return None
    tp, _ = _parallel_sizes()
    cfg = kvc.model_config
    self._full_per_token += scale_bytes_per_token(int(cfg.get_num_kv_heads(tp)), 1)
    self._swa_per_token += scale_bytes_per_token(int(cfg.get_swa_num_kv_heads(tp)), 1)
    self._recompute_cell_size()
    return None


def _parallel_sizes() -> tuple[int, int]:
    from sglang.srt.runtime_context import get_parallel

    p = get_parallel()
    return int(p.attn_tp_size), int(getattr(p, "attn_dcp_size", 1))


def add_cli_choice(result: Any, parser: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER ``ServerArgs.add_cli_args``: ``int8`` joins ``--kv-cache-dtype``'s choices.

    SGLang derives the choices from its field declaration each time it builds the parser
    (the annotation is evaluated afresh), so they are extended on the parser it built."""
    for action in getattr(parser, "_actions", ()):
        if action.dest != "kv_cache_dtype":
            continue
        if action.choices is None:
            raise RuntimeError(
                "sglang-rvv: SGLang's --kv-cache-dtype declares no choices; cannot add "
                f"{OPTION!r} (SGLang version not supported)"
            )
        if OPTION not in action.choices:
            action.choices = [*action.choices, OPTION]
            action.help = (action.help or "") + (
                f' "{OPTION}" (sglang-rvv, --attention-backend {BACKEND} only): INT8 K/V with '
                "an fp32 scale per token and KV head."
            )
        return None
    raise RuntimeError("sglang-rvv: SGLang's parser has no --kv-cache-dtype to extend")


_KV = "sglang.srt.mem_cache"
HOOKS: tuple[hooks.Hook, ...] = (
    (f"{_KV}.kv_cache_dtype.configure_kv_cache_dtype", configure_kv_cache_dtype, "AROUND"),
    (
        f"{_KV}.kv_cache_configurator.KVCacheConfigurator._resolve_kv_pool_class",
        resolve_kv_pool_class,
        "AROUND",
    ),
    (f"{_KV}.kv_cache_configurator.KVCacheConfigurator.configure", check_configuration, "BEFORE"),
    (
        "sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator._compute_cell_size",
        default_cell_size,
        "AFTER",
    ),
    (
        "sglang.srt.model_executor.pool_configurator.HybridSWAPoolConfigurator.__init__",
        swa_cell_sizes,
        "AFTER",
    ),
    ("sglang.srt.arg_groups.validation_hook.check_server_args", check_server_args, "AFTER"),
    ("sglang.srt.server_args.ServerArgs.add_cli_args", add_cli_choice, "AFTER"),
)
"""(target, hook, HookType name) registered by :func:`register`."""


def register() -> None:
    """Registers :data:`HOOKS` with SGLang (idempotent; every SGLang process)."""
    hooks.register_once(__name__, HOOKS)
