"""torch.library.opcheck on samples of every attention op.

opcheck runs each op for real several times (so the ops must be idempotent: decode writes
the same K/V again) and through FakeTensor / AOT autograd with dynamic shapes, checking the
schema (what is written, what aliases), the Meta kernels and the autograd registration.
"""

from __future__ import annotations

from typing import Any

import pytest
import rvv_ops  # noqa: F401  (registers the ops)
import torch
from conformance.cases import DecodeCase, ExtendCase, make_decode, make_extend
from test_attention import skip_unless_quick

ALL_UTILS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)

SAMPLES: dict[str, tuple[Any, bool]] = {  # name -> (case, in the quick subset)
    "decode bf16 window sinks": (
        DecodeCase(lens=(3, 20), dims=(32, 16), window=8, sinks=torch.float32),
        True,
    ),
    "decode fp32 e4m3 cap, key None": (
        DecodeCase(lens=(1, 9), dtype=torch.float32, cache="e4m3", write=False, logit_cap=4.0),
        False,
    ),
    "decode int8": (DecodeCase(lens=(5, 2), heads=(6, 2), cache="int8"), True),
    "extend bf16 sinks": (ExtendCase(reqs=((2, 3), (0, 4)), sinks=torch.bfloat16), True),
    "extend fp16 e5m2 not causal, k_extend None": (
        ExtendCase(
            reqs=((4, 2), (1, 5)), dtype=torch.float16, cache="e5m2", kv="shared", causal=False
        ),
        False,
    ),
    "extend int8 window": (ExtendCase(reqs=((6, 3), (0, 2)), cache="int8", window=4), True),
}


@pytest.mark.parametrize("sample", SAMPLES)
def test_opcheck(request: pytest.FixtureRequest, sample: str) -> None:
    case, quick = SAMPLES[sample]
    skip_unless_quick(request.config, quick)
    run = make_decode(case) if isinstance(case, DecodeCase) else make_extend(case)
    args = tuple(run.args[a.name] for a in run.op._schema.arguments)
    utils = ALL_UTILS
    if case.cache in ("e4m3", "e5m2"):
        # test_schema compares tensors with arithmetic that torch has no fp8 kernels for
        # ("mul_cpu_reduced_float" not implemented for 'Float8_e5m2'); the reference tests
        # check bit for bit what the ops write into (and leave alone in) fp8 caches.
        utils = tuple(u for u in ALL_UTILS if u != "test_schema")
    torch.library.opcheck(run.op, args, test_utils=utils)
