"""The failures tests/fuzz found, each fixed and pinned here (run in every fuzz session).

1. rvv-attention's kernel path raises KernelUnavailableError for an INT8 cache without
   out_cache_loc and rows of q of no request with kv "shared" as well as "given";
   conformance.test_attention.kernel_rejects named "given" only. Fixed there (it names
   both, the one predicate the conformance suite and the fuzz generators use) and in the
   conformance matrix (the case "int8 shared gaps").
2. The conformance builder (conformance.cases.make_extend) gave rows of q of no request
   the pool's 5 spare cache rows in turn (row i: spare[i % 5]), so with enough such rows
   out_cache_loc named one cache row twice, and which write landed there depended on the
   order of the writes (the kernel path's cache differed from the expected one in 1 run of
   5). SGLang never names a row twice. Fixed in the builder: the pool has a spare row for
   every row of no request and each gets its own.
3. test_rotary.reference_rope could not take 0 tokens (its reshape inferred the head count
   with -1). Fixed there; the fuzz property compares 0 tokens against it too.
"""

from __future__ import annotations

import pytest
import rvv_attention as ra
import rvv_ops
import torch
from conformance.cases import ExtendCase, expected_extend_cache, make_extend, reference_extend
from conformance.reference import assert_matches
from conformance.test_attention import call_extend, check_cache, kernel_rejects
from test_attention_fuzz import extend_run
from test_rotary import cos_sin_cache, reference_rope

FOUND = ExtendCase(
    reqs=((0, 0), (0, 0), (0, 0), (0, 6), (0, 29)), heads=(3, 3), dims=(24, 24),
    dtype=torch.bfloat16, table=torch.int32, kv="write", causal=False, gaps=True,
)  # fmt: skip
"""The batch the suite found: 7 rows of q of no request (rows 0-3, 10, 40 and 41)."""


@pytest.mark.parametrize("kv", ["given", "shared"])
def test_kernel_path_rejects_int8_without_loc_and_gaps(kv: str) -> None:
    case = ExtendCase(
        reqs=((3, 2), (0, 4)), dims=(16, 16), cache="int8", kv=kv, gaps=True,
        dtype=torch.float32,
    )  # fmt: skip
    assert kernel_rejects(case)
    run = make_extend(case, 0, writes=False)
    with pytest.raises(ra.KernelUnavailableError, match="belong to no request"):
        call_extend(run)


def test_found_batch_names_each_cache_row_once() -> None:
    run = make_extend(FOUND, 0, writes=True)
    loc = run.args["out_cache_loc"]
    assert loc.numel() == 42 and len(set(loc.tolist())) == 42


def test_found_batch_writes_the_same_cache_every_time() -> None:
    for seed in range(5):
        run = extend_run(FOUND, seed)
        expected = expected_extend_cache(run)
        call_extend(run)
        check_cache(run.pool, expected)
        assert_matches(run.args["o_extend"], reference_extend(run), f"found, seed {seed}")


@pytest.mark.parametrize("shape", [(0, 4 * 64), (0, 4, 64)])
def test_rotary_embedding_of_no_tokens(shape: tuple[int, ...]) -> None:
    q = torch.zeros(shape)
    k = torch.zeros(shape[0], 64)
    cache = cos_sin_cache(32, torch.float32)
    pos = torch.zeros(0, dtype=torch.int64)
    q_out, k_out = rvv_ops.rotary_embedding(pos, q, k, 64, cache)
    for out, x in ((q_out, q), (k_out, k)):
        want = reference_rope(pos, x, 64, cache, True)
        assert want.shape == x.shape
        torch.testing.assert_close(out, want)
