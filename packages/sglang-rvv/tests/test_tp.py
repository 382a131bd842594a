"""Tensor parallelism: ``--tp-size 2`` against ``--tp-size 1`` with ``--attention-backend rvv``,
and the ``sgl_kernel`` stand-in's collectives.

The collectives (``torch.ops.sgl_kernel.shm_allreduce`` / ``shm_allgather`` / ``initialize``
/ ``init_cpu_threads_env``) run in two processes on a gloo process group and are compared with
``torch.distributed``'s own all-reduce and all-gather (several shapes, dtypes, dims,
non-contiguous views), plus the bad-input matrix.

End to end, per demo model: one ``--tp-size 1`` server (``sglang serve`` command line of
``sglang_rvv.serve``) and one ``--tp-size 2`` server started through
``python -m sglang_rvv.serve`` exactly as a user would on this 1-NUMA-node host (no
``SGLANG_CPU_OMP_THREADS_BIND``: the wrapper sets it), both fp32 with layer routing on
(``SGLANG_RVV_LAYERS=1``), greedy. The same prompts (one longer than
``--chunked-prefill-size``) are sent one after another, then all at once. Criterion: every
completion's token ids are identical between tp1 and tp2; the largest difference of the
chosen tokens' logprobs is printed (the tp2 all-reduce sums two partial products, so the
logits may differ in their last bits). Each tp2 rank (a scheduler process of its own) must
have run the RVV attention kernels and the routed linear and norm ops.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sglang_rvv import demo, serve, tp
from test_e2e import FIRST_ARCH_DEFAULT

WORLD = 2
MAX_TOKENS = 24
CHUNK = 64
READY_TIMEOUT = 900.0

# ----------------------------------------------------------------------- the collectives


def _data(rank: int, case: int, shape: tuple[int, ...], dtype: Any) -> Any:
    import torch

    gen = torch.Generator().manual_seed(1000 * case + rank)
    return (torch.randn(shape, generator=gen) * 4).to(dtype)


def _expect_error(kind: type[BaseException], fragment: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except kind as exc:
        assert fragment in str(exc), f"{kind.__name__} without {fragment!r}: {exc}"
        return
    except BaseException as exc:  # any other type is reported as the wrong one
        raise AssertionError(f"expected {kind.__name__} ({fragment!r}), got {exc!r}") from exc
    raise AssertionError(f"expected {kind.__name__} ({fragment!r}), nothing raised")


SHAPES = ((1,), (7,), (3, 5), (2, 3, 4), (0, 4), (4096,), (5, 257))


def collectives_worker(rank: int, port: int, out: Path) -> None:
    """One of the two ranks (run as ``python test_tp.py collectives RANK PORT OUT``)."""
    import sgl_kernel
    import torch
    import torch.distributed as dist

    assert getattr(sgl_kernel, "RVV_SHIM", False), "sgl_kernel is not sglang-rvv's stand-in"
    ops = torch.ops.sgl_kernel
    SUM = int(dist.ReduceOp.SUM)
    x = torch.ones(4)
    bad = 0
    # Before initialize, and before torch.distributed exists.
    _expect_error(
        RuntimeError, "initialize(size, rank) has not been called", ops.shm_allreduce, x, SUM
    )
    for size, r, fragment in ((0, 0, "size=0"), (2, 2, "rank=2"), (2, -1, "rank=-1")):
        _expect_error(ValueError, fragment, ops.initialize, size, r)
    bad += 4
    ops.initialize(WORLD, rank)
    _expect_error(RuntimeError, "torch.distributed is not initialized", ops.shm_allgather, x, 0)
    bad += 1
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    # Local checks: they raise on every rank before any collective starts.
    _expect_error(
        ValueError,
        f"reduce_op={int(dist.ReduceOp.MAX)}",
        ops.shm_allreduce,
        x,
        int(dist.ReduceOp.MAX),
    )
    _expect_error(ValueError, "dtype torch.int32", ops.shm_allreduce, x.to(torch.int32), SUM)
    _expect_error(ValueError, "dtype torch.float64", ops.shm_allgather, x.double(), 0)
    _expect_error(ValueError, "dim=2", ops.shm_allgather, torch.ones(2, 3), 2)
    _expect_error(ValueError, "dim=-3", ops.shm_allgather, torch.ones(2, 3), -3)
    _expect_error(ValueError, "0-dimensional", ops.shm_allgather, torch.tensor(1.0), 0)
    ops.initialize(3, rank)
    _expect_error(RuntimeError, "does not match", ops.shm_allreduce, x, SUM)
    ops.initialize(WORLD, rank)
    # init_cpu_threads_env: parsing, cores this process cannot use, and a real binding.
    allowed = sorted(os.sched_getaffinity(0))
    _expect_error(ValueError, "cpu_ids='x'", ops.init_cpu_threads_env, "x")
    _expect_error(ValueError, "is empty", ops.init_cpu_threads_env, "3-1")
    _expect_error(ValueError, "cannot run on", ops.init_cpu_threads_env, str(max(allowed) + 64))
    bad += 10
    core = allowed[rank % len(allowed)]
    said = ops.init_cpu_threads_env(f"{core}")
    assert f"cores [{core}]" in said, said
    assert os.sched_getaffinity(0) == {core} and torch.get_num_threads() == 1

    cases = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for case, shape in enumerate(SHAPES):
            data = _data(rank, case, shape, dtype)
            ours, ref = data.clone(), data.clone()
            ops.shm_allreduce(ours, SUM)
            dist.all_reduce(ref)
            assert torch.equal(ours, ref), f"allreduce {shape} {dtype}"
            # against the sum computed here from both ranks' data (one rounding for 2 ranks)
            total = sum(_data(r, case, shape, dtype).float() for r in range(WORLD))
            assert torch.equal(ours, total.to(dtype)), f"allreduce {shape} {dtype} vs sum"
            for dim in range(-len(shape), len(shape)):
                parts = [torch.empty_like(data) for _ in range(WORLD)]
                dist.all_gather(parts, data)
                got = ops.shm_allgather(data, dim)
                assert torch.equal(got, torch.cat(parts, dim)), f"allgather {shape} {dtype} {dim}"
                cases += 1
            cases += 1
        # non-contiguous: a transposed view, reduced in place, and gathered
        base = _data(rank, 99, (6, 5), dtype)
        view, ref = base.t(), base.t().contiguous()
        ops.shm_allreduce(view, SUM)
        dist.all_reduce(ref)
        assert torch.equal(view, ref) and torch.equal(base.t(), ref), f"non-contiguous {dtype}"
        parts = [torch.empty_like(ref) for _ in range(WORLD)]
        dist.all_gather(parts, ref)
        assert torch.equal(ops.shm_allgather(base.t(), 1), torch.cat(parts, 1))
        cases += 2
    dist.destroy_process_group()
    out.write_text(json.dumps({"rank": rank, "cases": cases, "bad_inputs": bad}))


def test_collectives_two_ranks_match_torch_distributed(tmp_path: Path) -> None:
    from test_e2e import _free_port

    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "collectives",
                str(r),
                str(port),
                str(tmp_path / f"{r}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(WORLD)
    ]
    outputs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    for r, (p, text) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"rank {r} failed:\n{text[-4000:]}"
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(WORLD)]
    print(f"[tp] collectives: {results}")
    per_dtype = len(SHAPES) + sum(2 * len(shape) for shape in SHAPES) + 2
    assert all(res["cases"] == 3 * per_dtype for res in results), results
    assert all(res["bad_inputs"] == 15 for res in results)


def test_ops_are_defined_once_with_sglangs_schemas() -> None:
    import sgl_kernel  # noqa: F401  (the stand-in registers the ops)
    import torch
    from sglang_rvv.compat import collectives

    assert collectives.register() == ()  # already defined: nothing redefined
    for name, schema in collectives.SCHEMAS.items():
        op = getattr(torch.ops.sgl_kernel, name).default
        assert str(op._schema) == f"sgl_kernel::{schema}", op._schema
    # Meta kernel: the gathered shape without data (torch.compile's fake tensors).
    meta = torch.ops.sgl_kernel.shm_allgather(torch.empty(3, 4, device="meta"), 0)
    assert meta.device.type == "meta" and tuple(meta.shape) == (3, 4)  # 1 rank recorded here


# ------------------------------------------------------------------ thread binding defaults


def test_default_threads_bind_splits_cores_evenly() -> None:
    assert tp.default_threads_bind(2, [0, 1]) == "0|1"
    assert tp.default_threads_bind(2, [0, 1, 2, 3, 4]) == "0,1,2|3,4"
    assert tp.default_threads_bind(3, [4, 5, 6, 7, 8, 9]) == "4,5|6,7|8,9"
    assert tp.default_threads_bind(1, [3, 1]) == "1,3"
    assert tp.default_threads_bind(3, [0, 1]) == "0|1|0"  # fewer cores than ranks: shared
    with pytest.raises(ValueError, match="ranks=0"):
        tp.default_threads_bind(0, [0])
    with pytest.raises(ValueError, match="cpus is empty"):
        tp.default_threads_bind(2, [])


def test_bind_needed_only_beyond_the_numa_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp, "numa_node_count", lambda root=tp.NUMA_NODES: 2)
    assert not tp.bind_needed(2, {})
    assert tp.bind_needed(3, {})
    assert not tp.bind_needed(3, {tp.BIND_ENV: "0|1|2"})


def test_numa_node_count(tmp_path: Path) -> None:
    for name in ("node0", "node1", "possible", "nodex"):
        (tmp_path / name).mkdir()
    assert tp.numa_node_count(tmp_path) == 2
    assert tp.numa_node_count(tmp_path / "absent") == 1


def test_serve_sets_the_binding_for_more_ranks_than_numa_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tp, "numa_node_count", lambda root=tp.NUMA_NODES: 1)
    assert serve.ranks(["--tp-size", "2"]) == 2
    assert serve.ranks(["--tensor-parallel-size=2", "--pp-size", "2", "--port", "1"]) == 4
    assert serve.ranks(["--port", "1"]) == 1
    with pytest.raises(ValueError, match="--tp-size '0'"):
        serve.ranks(["--tp-size", "0"])
    env: dict[str, str] = {}
    assert serve.default_threads_bind(["--tp-size", "1"], env) is None and env == {}
    value = serve.default_threads_bind(["--tp-size", "2"], env)
    assert value == env[tp.BIND_ENV] == tp.default_threads_bind(2)
    mine = {tp.BIND_ENV: "0|0"}
    assert serve.default_threads_bind(["--tp-size", "2"], mine) is None
    assert mine == {tp.BIND_ENV: "0|0"}


def test_the_hook_sets_the_binding_for_engine_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp, "numa_node_count", lambda root=tp.NUMA_NODES: 1)
    monkeypatch.delenv(tp.BIND_ENV, raising=False)
    tp.threads_binding(numa_index=0, world_size=1)
    assert tp.BIND_ENV not in os.environ
    tp.threads_binding(numa_index=1, world_size=2)
    assert os.environ[tp.BIND_ENV] == tp.default_threads_bind(2)
    monkeypatch.setenv(tp.BIND_ENV, "0|0")
    tp.threads_binding(numa_index=1, world_size=2)
    assert os.environ[tp.BIND_ENV] == "0|0"


def test_no_pynccl_for_cpu_groups() -> None:
    seen: dict[str, Any] = {}

    def init(
        self: object,
        group_ranks: list[list[int]],
        local_rank: int,
        use_pynccl: bool,
        use_custom_allreduce: bool,
        group_name: str = "",
    ) -> str:
        seen.update(pynccl=use_pynccl, custom=use_custom_allreduce, rank=local_rank)
        return "done"

    assert tp.no_pynccl_on_cpu(init, object(), [[0, 1]], 0, True, True) == "done"
    assert seen == {"pynccl": False, "custom": False, "rank": 0}
    tp.no_pynccl_on_cpu(
        init, object(), [[0, 1]], local_rank=1, use_pynccl=False, use_custom_allreduce=True
    )
    assert seen == {"pynccl": False, "custom": False, "rank": 1}


def test_masked_input_runs_uncompiled_when_compiling_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def eager(x: int, offset: int) -> int:
        calls.append("eager")
        if x < 0:
            raise ValueError(f"x={x}")
        return x - offset

    def compiled(x: int, offset: int) -> int:
        calls.append("compiled")
        return x - offset

    def broken(x: int, offset: int) -> int:
        calls.append("broken")
        raise ModuleNotFoundError("No module named 'setuptools.command'")

    compiled._torchdynamo_orig_callable = eager  # type: ignore[attr-defined]
    broken._torchdynamo_orig_callable = eager  # type: ignore[attr-defined]
    monkeypatch.setattr(tp, "_compile_failed", [])
    assert tp.masked_input(compiled, 7, offset=2) == 5 and calls == ["compiled"]
    assert tp.masked_input(broken, 7, offset=2) == 5 and calls[1:] == ["broken", "eager"]
    assert tp._compile_failed == ["ModuleNotFoundError: No module named 'setuptools.command'"]
    assert tp.masked_input(broken, 8, offset=2) == 6 and calls[3:] == ["eager"]  # no retry
    with pytest.raises(ValueError, match="x=-1"):  # the function's own errors still raise
        tp.masked_input(broken, -1, offset=2)
    # the hooked function is SGLang's compiled one (checked by name, so a renamed target fails)
    from sglang.srt.layers import vocab_parallel_embedding as vpe

    assert callable(getattr(vpe.get_masked_input_and_mask, "_torchdynamo_orig_callable", None))


# ------------------------------------------------------------------------------ end to end


@dataclass
class Generated:
    ids: list[int]
    logprobs: list[float]


@dataclass
class Served:
    sequential: list[Generated] = field(default_factory=list)
    concurrent: list[Generated] = field(default_factory=list)
    per_process: list[dict[str, int]] = field(default_factory=list)
    log: str = ""


def _prompts() -> list[str]:
    from test_e2e import _prompts as e2e_prompts

    return e2e_prompts()[:4] + e2e_prompts()[7:]  # 3 of them longer than CHUNK tokens


def _generate(url: str, prompt: str) -> Generated:
    body = {
        "text": prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS},
        "return_logprob": True,
    }
    req = urllib.request.Request(
        url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        out = json.loads(resp.read())
    lps = out["meta_info"]["output_token_logprobs"]
    return Generated(ids=[int(t[1]) for t in lps], logprobs=[float(t[0]) for t in lps])


def run(model: Path, tp_size: int, tmp: Path) -> Served:
    from test_e2e import _free_port

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.pop(tp.BIND_ENV, None)
    env.update(SGLANG_USE_CPU_ENGINE="1", SGLANG_RVV_LAYERS="1")
    stats_dir = tmp / f"stats-{model.name}-tp{tp_size}"
    env["SGLANG_RVV_LAYER_STATS"] = str(stats_dir)
    extra = [
        "--attention-backend", "rvv", "--port", str(port), "--chunked-prefill-size", str(CHUNK),
        "--random-seed", "0", "--dtype", "float32", "--tp-size", str(tp_size),
    ]  # fmt: skip
    if tp_size == 1:
        cmd = serve.server_command(extra, model)
    else:  # as a user would: the wrapper, which sets SGLANG_CPU_OMP_THREADS_BIND
        cmd = [sys.executable, "-m", "sglang_rvv.serve", "--model-path", str(model), *extra]
    log = tmp / f"server-{model.name}-tp{tp_size}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            try:
                serve.wait_healthy(url, proc, READY_TIMEOUT)
            except (RuntimeError, TimeoutError) as exc:
                tail = log.read_text(errors="replace")[-5000:]
                raise AssertionError(f"tp{tp_size} server did not start: {exc}\n{tail}") from exc
            print(f"[tp] {model.name} tp{tp_size}: ready in {time.monotonic() - started:.0f} s")
            res = Served()
            prompts = _prompts()
            res.sequential = [_generate(url, p) for p in prompts]
            with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
                res.concurrent = list(pool.map(lambda p: _generate(url, p), prompts))
            time.sleep(1.5)  # let the schedulers flush their op counts
            res.log = log.read_text(errors="replace")
        finally:
            serve.stop_group(proc)
    res.per_process = [json.loads(f.read_text()) for f in sorted(stats_dir.glob("*.json"))]
    return res


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("tp")
    cache: dict[tuple[str, int], Served] = {}

    def get(arch: str, tp_size: int) -> Served:
        if (arch, tp_size) not in cache:
            cache[arch, tp_size] = run(demo.ensure(arch), tp_size, tmp)
        return cache[arch, tp_size]

    yield get


RANK_OPS = (
    "attention decode:kernel",
    "attention extend:kernel",
    "weight_packed_linear",
    "rmsnorm_cpu",
)


@pytest.mark.parametrize("arch", FIRST_ARCH_DEFAULT)
def test_tp2_gives_the_tokens_of_tp1(served: Any, arch: str) -> None:
    one, two = served(arch, 1), served(arch, 2)
    worst = 0.0
    for what in ("sequential", "concurrent"):
        for i, (a, b) in enumerate(zip(getattr(one, what), getattr(two, what), strict=True)):
            assert len(a.ids) > 0
            assert a.ids == b.ids, f"{arch} {what} prompt {i}: tp1 {a.ids} != tp2 {b.ids}"
            worst = max([worst] + [abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)])
    n = len(one.sequential) + len(one.concurrent)
    print(
        f"[tp] {arch}: {n} completions, same token ids in tp1 and tp2; "
        f"max |logprob difference| {worst:.3g}"
    )


@pytest.mark.parametrize("arch", FIRST_ARCH_DEFAULT)
def test_every_rank_ran_the_rvv_kernels(served: Any, arch: str) -> None:
    for tp_size in (1, 2):
        ranks = [s for s in served(arch, tp_size).per_process if s.get("attention decode:kernel")]
        print(f"[tp] {arch} tp{tp_size} per-rank op calls: {ranks}")
        assert len(ranks) == tp_size, ranks
        for stats in ranks:
            assert all(stats.get(op, 0) > 0 for op in RANK_OPS), stats
            assert not [op for op in stats if op.endswith(":fallback")], stats


@pytest.mark.parametrize("arch", FIRST_ARCH_DEFAULT)
def test_tp2_startup_says_the_binding_and_is_clean(served: Any, arch: str) -> None:
    log = served(arch, 2).log
    assert "Traceback" not in log, log[-6000:]
    assert "Expected a cuda device" not in log
    said = [line for line in log.splitlines() if line.startswith("[serve] 2 ranks")]
    assert said and tp.BIND_ENV + "=" in said[0], log[:3000]
    print(f"[tp] {said[0]}")


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "collectives":
    collectives_worker(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
