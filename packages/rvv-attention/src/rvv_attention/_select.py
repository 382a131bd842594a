"""Implementations described as data, and the selector that explains its choice."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from rvv_attention import _kernel

logger = logging.getLogger("rvv_attention")

ENV_IMPL = "RVV_ATTENTION_IMPL"
"""``auto`` (default), ``kernel`` (require the kernel; error if it cannot run a case) or
``fallback`` (always the torch-native implementation)."""
MODES = ("auto", "kernel", "fallback")

FEATURES = frozenset(
    {
        "sliding_window",  # a window (SGLang's sliding_window_size >= 0)
        "sinks",  # per-head sink logits
        "logit_cap",  # cap * tanh(s / cap)
        "cross_attention",  # attention to encoder tokens (cross_attention=True)
        "encoder_lens",  # an encoder-decoder batch: decoder keys start after encoder_lens
        "non_causal",  # extend without the causal mask
        "kv_shared",  # extend with k = v = None: new tokens' K/V read from the cache
        "kv_write",  # new K/V written into the cache by the call
        "fp8_kv",  # float8_e4m3fn / float8_e5m2 cache with per-tensor scales
        "int8_kv",  # int8 cache with per-(token, head) scales
        "mla",  # head_dim != v_head_dim (e.g. MLA's 576 / 512, V a view of K)
    }
)
"""Every feature name a case may carry."""

FLOAT_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})
KV_DTYPES = FLOAT_DTYPES | {torch.float8_e4m3fn, torch.float8_e5m2, torch.int8}


class CaseKey(NamedTuple):
    """What the choice of implementation depends on: the key of the selection cache."""

    op: str
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    head_dim: int
    v_head_dim: int
    features: frozenset[str]
    device: str
    """The device type (``cpu``, ...)."""
    mode: str
    """The :func:`mode` in force."""


class KernelUnavailableError(RuntimeError):
    """``RVV_ATTENTION_IMPL=kernel`` and the kernel cannot run this case (the message says why)."""


@dataclass(frozen=True)
class Implementation:
    """One attention implementation and what it supports, as data."""

    name: str
    """``kernel`` or ``fallback``."""
    description: str
    ops: frozenset[str]
    """``decode`` and/or ``extend``."""
    q_dtypes: frozenset[torch.dtype]
    kv_dtypes: frozenset[torch.dtype]
    """Cache storage dtypes; a float cache must also have the query's dtype."""
    head_dims: tuple[int, int]
    """Inclusive range of ``head_dim`` and ``v_head_dim``."""
    features: frozenset[str]
    """The subset of :data:`FEATURES` it handles."""
    devices: frozenset[str]
    """Device types (``cpu``, ...)."""
    available: Callable[[], str | None] = field(repr=False, compare=False)
    """None when it can run in this process, else why not."""

    def __repr__(self) -> str:
        return f"Implementation({self.name!r})"

    def rejects(self, case: CaseKey) -> str | None:
        """Why this implementation cannot run the case (a phrase naming it), or None."""
        op, q_dtype, kv_dtype, head_dim, v_head_dim, features, device, _ = case
        n = self.name
        if op not in self.ops:
            return f"the {n} has no {op}"
        if device not in self.devices:
            return f"the {n} runs on {', '.join(sorted(self.devices))}, not on device {device}"
        if q_dtype not in self.q_dtypes:
            return f"the {n} does not support query dtype {q_dtype}"
        if kv_dtype not in self.kv_dtypes:
            return f"the {n} does not support KV cache dtype {kv_dtype}"
        lo, hi = self.head_dims
        for what, d in (("head_dim", head_dim), ("v_head_dim", v_head_dim)):
            if not lo <= d <= hi:
                return f"the {n} does not support {what} {d} (supported: {lo}..{hi})"
        missing = sorted(features - self.features)
        if missing:
            return f"the {n} does not support {', '.join(missing)}"
        why = self.available()
        return None if why is None else f"the {n} is unavailable: {why}"


@dataclass(frozen=True)
class Selection:
    """What :func:`select` chose: the implementation and, for a fallback, the reason."""

    impl: Implementation
    reason: str | None
    """None when the kernel runs; otherwise why not (``RVV_ATTENTION_IMPL=fallback``, the
    kernel's missing feature, rvv_ops not importable, ...)."""
    mode: str = "auto"


def _kernel_available() -> str | None:
    _, err = _kernel.load()
    return err


def _paged_attention(
    name: str,
    description: str,
    *,
    features: frozenset[str],
    devices: frozenset[str],
    available: Callable[[], str | None],
) -> Implementation:
    """An implementation of both ops over SGLang's paged cache; the kernel and the fallback
    take every query and KV dtype and any head size, and differ in features and devices."""
    return Implementation(
        name=name,
        description=description,
        ops=frozenset({"decode", "extend"}),
        q_dtypes=FLOAT_DTYPES,
        kv_dtypes=KV_DTYPES,
        head_dims=(1, 1 << 16),
        features=features,
        devices=devices,
        available=available,
    )


KERNEL = _paged_attention(
    "kernel",
    "rvv-ops' RVV attention kernels (torch.ops.sgl_kernel.*_attention_*cpu)",
    features=FEATURES - {"cross_attention", "encoder_lens"},
    devices=frozenset({"cpu"}),
    available=_kernel_available,
)

FALLBACK = _paged_attention(
    "fallback",
    "torch-native, batched (padded gather + masked fp32 matmuls)",
    features=FEATURES,
    devices=frozenset({"cpu", "cuda", "mps", "xpu"}),
    available=lambda: None,
)

_IMPLEMENTATIONS = (KERNEL, FALLBACK)


def implementations() -> tuple[Implementation, ...]:
    """Every implementation, in order of preference."""
    return _IMPLEMENTATIONS


def mode() -> str:
    """The ``RVV_ATTENTION_IMPL`` mode (``auto`` if unset); ValueError for anything else."""
    value = os.environ.get(ENV_IMPL, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(
            f"{ENV_IMPL}={value!r}; expected one of {', '.join(MODES)} "
            "(auto: kernel where it can run, else fallback; kernel: require the kernel; "
            "fallback: always torch-native)"
        )
    return value


_cache: dict[CaseKey, Selection] = {}
_logged: set[str] = set()
_log_lock = threading.Lock()


def select(
    op: str,
    *,
    q_dtype: torch.dtype,
    kv_dtype: torch.dtype,
    head_dim: int,
    v_head_dim: int | None = None,
    features: Iterable[str] = frozenset(),
    device: str = "cpu",
) -> Selection:
    """Chooses the implementation for a case (cached per distinct case and mode).

    ``op`` is ``"decode"`` or ``"extend"``; ``features`` is a subset of :data:`FEATURES`.
    The kernel is chosen when it supports the case and rvv_ops imports; otherwise the
    fallback, with the reason (logged once per distinct reason on the ``rvv_attention``
    logger when a call uses it). With ``RVV_ATTENTION_IMPL=kernel`` a case the kernel
    cannot run raises :class:`KernelUnavailableError`; with ``fallback`` the fallback is
    always chosen.
    """
    feats = features if isinstance(features, frozenset) else frozenset(features)
    vd = head_dim if v_head_dim is None else v_head_dim
    return select_key(CaseKey(op, q_dtype, kv_dtype, head_dim, vd, feats, device, mode()))


def select_key(key: CaseKey) -> Selection:
    """:func:`select` for a prepared key: one dict lookup once the case has been seen."""
    hit = _cache.get(key)
    if hit is not None:
        return hit
    op, feats, m = key.op, key.features, key.mode
    if op not in ("decode", "extend"):
        raise ValueError(f"select: op is {op!r}; expected 'decode' or 'extend'")
    unknown = sorted(feats - FEATURES)
    if unknown:
        raise ValueError(
            f"select: unknown feature(s) {', '.join(unknown)}; known: {', '.join(sorted(FEATURES))}"
        )
    if m == "fallback":
        sel = Selection(FALLBACK, f"{ENV_IMPL}=fallback", m)
    else:
        why = KERNEL.rejects(key)
        if why is None:
            sel = Selection(KERNEL, None, m)
        elif m == "kernel":
            raise KernelUnavailableError(
                f"rvv_attention: {ENV_IMPL}=kernel, but the kernel cannot run this {op} case: "
                f"{why}. Unset {ENV_IMPL} (or set it to auto) to use the torch-native fallback."
            )
        else:
            sel = Selection(FALLBACK, why, m)
    _cache[key] = sel
    return sel


def note_fallback(op: str, reason: str) -> None:
    """Logs a fallback reason once per distinct (op, reason)."""
    text = f"{op}: using the torch-native fallback: {reason}"
    if text in _logged:
        return
    with _log_lock:
        if text in _logged:
            return
        _logged.add(text)
    logger.info(text)


def demote(key: CaseKey, reason: str) -> Selection:
    """Records that the kernel rejected a case at run time: later calls go to the fallback."""
    new = Selection(FALLBACK, f"the kernel rejected the case: {reason}", key.mode)
    _cache[key] = new
    return new


def clear_cache() -> None:
    """Forgets cached selections and logged reasons (tests; after changing the environment)."""
    _cache.clear()
    with _log_lock:
        _logged.clear()
