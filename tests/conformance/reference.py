"""The one attention reference: SGLang's paged-attention semantics in fp64, and the
tolerance model every implementation is held to.

:func:`attention` is one request's attention written out from the definition: scores
``q . k * sm_scale`` in fp64, the logit cap ``cap * tanh(s / cap)``, the mask (causal,
offset by the request's prefix: the query at position p sees keys at positions <= p;
SGLang's sliding window of W: keys at positions >= p - W), the sinks (``exp(sink)`` joins
each softmax denominator), a plain softmax, then ``P . V``. GQA: query head h reads KV head
``h // (Hq / Hkv)``. A query that sees no key gets zeros (what every implementation returns
for a request of length 0).

Implementations get the same input values (the cache as dequantised by
:mod:`conformance.kvcache`) and compute in fp32 in another order (online softmax over key
blocks, split-KV merge, q scaled before the dot products, scales applied to scores rather
than to K, polynomial exp / tanh); then they round once to the output dtype.
"""

from __future__ import annotations

import math
from typing import Required, TypedDict, Unpack

import torch
from torch import Tensor

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-5, 2e-5),
    torch.bfloat16: (2**-8, 2e-5),
    torch.float16: (2**-11, 2e-5),
}
"""(rtol, atol) of an output against the fp64 reference, per output dtype. atol: the fp32
computation in another order with polynomial exp / tanh is a few fp32 ulps off for
outputs of order 1. rtol: the final rounding to the output dtype, up to half an ulp, i.e.
2^-8 (bf16) or 2^-11 (fp16) of the value (fp32: a few ulps of accumulation over 4k keys)."""

SAME_IMPL_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-6, 2e-6),
    torch.bfloat16: (2**-7, 1e-5),
    torch.float16: (2**-10, 1e-6),
}
"""(rtol, atol) between two implementations (rvv-attention's kernel and fallback paths):
both compute in fp32 and round once, so at most one output ulp apart (2^-7 bf16, 2^-10
fp16 relative), plus fp32 summation-order noise."""

P_ROUNDING_SIGMAS = 4 * 2**-8
"""p_rounding_slack's factor: 4 x 2^-8 (bf16's relative rounding) standard deviations."""


def window_of_ops(window: int) -> int | None:
    """SGLang's sliding window W for the ops' `sliding_window_size` argument (W + 1; 0:
    none), the convention of the cases' `window` field."""
    return window - 1 if window > 0 else None


def mask(q_pos: Tensor, keys: int, causal: bool, window: int | None) -> Tensor:
    """[M, keys]: which keys (positions 0..keys-1) each query row at q_pos sees; `window`
    is SGLang's W (None: none)."""
    k_pos = torch.arange(keys)
    allowed = torch.ones(q_pos.shape[0], keys, dtype=torch.bool)
    if causal:
        allowed &= k_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= k_pos[None, :] >= q_pos[:, None] - window
    return allowed


class Options(TypedDict, total=False):
    """The keyword arguments of :func:`probabilities`, :func:`attention` and
    :func:`p_rounding_slack`: sm_scale (required), causal (default True), window (SGLang's
    W; default None: none), logit_cap (default 0: none), sinks [Hq] (default None: none),
    allowed [M, L] (bool: a further mask, e.g. padding; default None: none)."""

    sm_scale: Required[float]
    causal: bool
    window: int | None
    logit_cap: float
    sinks: Tensor | None
    allowed: Tensor | None


def probabilities(q: Tensor, k: Tensor, q_pos: Tensor, **options: Unpack[Options]) -> Tensor:
    """fp64 softmax weights [Hq, M, L] of q [M, Hq, D] over k [L, Hkv, D] (scaled, capped,
    masked, the sinks in the denominator); rows that see no key are zeros. `options`: see
    :class:`Options` (`allowed` is ANDed into the mask)."""
    sm_scale = options["sm_scale"]
    logit_cap = options.get("logit_cap", 0.0)
    sinks, allowed = options.get("sinks"), options.get("allowed")
    hq, hkv = q.shape[1], k.shape[1]
    # GQA without repeating K: query head h = g * group + j reads KV head g; qh is
    # [Hkv, group * M, D]
    qh = q.double().movedim(0, 1).reshape(hkv, hq // hkv * q.shape[0], q.shape[2])
    kh = k.double().movedim(0, 1)  # [Hkv, L, D]
    scores = (qh @ kh.transpose(1, 2)).view(hq, q.shape[0], k.shape[0]) * sm_scale
    if logit_cap > 0.0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    seen = mask(q_pos, k.shape[0], options.get("causal", True), options.get("window"))
    if allowed is not None:
        seen &= allowed
    scores = scores.masked_fill(~seen, -math.inf)
    if sinks is not None:
        sink = sinks.double()[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return probs.nan_to_num(0.0)


def attention(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, **options: Unpack[Options]) -> Tensor:
    """fp64 attention of one request: q [M, Hq, D] at positions q_pos [M] over k [L, Hkv, D]
    and v [L, Hkv, Dv] at positions 0..L-1; returns [M, Hq, Dv]. `options`: see
    :class:`Options`."""
    return over_values(probabilities(q, k, q_pos, **options), v).movedim(1, 0)


def over_values(probs: Tensor, v: Tensor) -> Tensor:
    """probs [Hq, M, L] times v [L, Hkv, Dv] per head (GQA: head h reads KV head h //
    group): [Hq, M, Dv] fp64."""
    hq, m, keys = probs.shape
    hkv = v.shape[1]
    vh = v.double().movedim(0, 1)  # [Hkv, L, Dv]
    return (probs.reshape(hkv, hq // hkv * m, keys) @ vh).view(hq, m, v.shape[2])


def p_rounding_slack(
    q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, **options: Unpack[Options]
) -> Tensor:
    """What rounding the softmax weights to bf16 before P.V may move each output of
    :func:`attention` (same arguments) by, [M, Hq, Dv] fp32.

    With bf16 q over a bf16 cache the x86_amx and x86_avx512_bf16 kernels do that, as
    torch's CPU flash attention does, and divide by the sum of the rounded weights: an
    output o moves by sum_j P_j d_j (v_j - o), P the normalised weights, |d_j| <= 2^-8
    independent roundings. Allowed: 4 x 2^-8 x sqrt(sum_j P_j^2 (v_j - o)^2), over 7
    standard deviations of that sum."""
    probs = probabilities(q, k, q_pos, **options)
    o = over_values(probs, v)
    p2 = probs * probs
    # sum_j P_j^2 (v_j - o)^2, expanded
    v64 = v.double()
    spread = over_values(p2, v64 * v64) - 2 * o * over_values(p2, v64)
    spread += o * o * p2.sum(-1, keepdim=True)
    return (P_ROUNDING_SIGMAS * spread.clamp_min(0.0).sqrt()).movedim(1, 0).float()


def rounds_p(q_dtype: torch.dtype, cache: str) -> bool:
    """Whether an implementation may round p to bf16 (bf16 q over a bf16 cache: "same")."""
    return q_dtype == torch.bfloat16 and cache == "same"


def allowed_error(
    expected: Tensor,
    dtype: torch.dtype,
    slack: Tensor | None = None,
    tolerances: dict[torch.dtype, tuple[float, float]] = TOLERANCES,
) -> Tensor:
    """fp64 per-element error an output of `dtype` may have against `expected`:
    ``atol + rtol |expected| + slack`` with `tolerances` of that dtype (NaNs count as 0)."""
    rtol, atol = tolerances[dtype]
    allowed = atol + rtol * expected.double().abs().nan_to_num(0.0)
    if slack is not None:
        allowed = allowed + slack.double().nan_to_num(0.0)
    return allowed


def assert_matches(
    actual: Tensor,
    expected: Tensor,
    what: str = "",
    slack: Tensor | None = None,
    tolerances: dict[torch.dtype, tuple[float, float]] = TOLERANCES,
) -> None:
    """actual within `tolerances` (of actual's dtype) of expected, elementwise
    ``|a - e| <= atol + rtol |e| + slack``; NaNs must be at the same places."""
    a, e = actual.double(), expected.double()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)}, expected {tuple(e.shape)}"
    assert torch.equal(a.isnan(), e.isnan()), f"{what}: NaNs at other places"
    err = (a - e).abs().nan_to_num(0.0)
    allowed = allowed_error(e, actual.dtype, slack, tolerances)
    bad = err > allowed
    if bad.any():
        i = tuple(int(x) for x in bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ by more than "
            f"atol + rtol |expected| + slack; first at {i}: got {float(a[i])}, expected "
            f"{float(e[i])}, allowed {float(allowed[i])} (max error {float(err.max()):.3g})"
        )
