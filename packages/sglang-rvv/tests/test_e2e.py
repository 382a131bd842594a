"""End to end: the demo models served by SGLang with ``--attention-backend rvv`` and with
``torch_native``, queried through the OpenAI-compatible HTTP API with the ``openai`` client.

Each server gets the same workload: 10 greedy prompts one after another (shared prefixes, so
the radix cache hits; long prompts, longer than ``--chunked-prefill-size 64``), the same
prompts as 16 concurrent requests, and a streamed request closed by the client after a few
chunks (an abort), after which the server must still answer correctly.

Each ``rvv`` server also scores a few corpus passages teacher-forced (``echo`` with
``logprobs``: the log-probability of every prompt token and the top-1 prediction at every
position, computed in prefill chunks of ``--chunked-prefill-size`` tokens, so later chunks read
the earlier ones from the KV cache). ``--kv-cache-dtype int8`` is compared with the same
weights over the model's own KV dtype on those positions (see ``test_int8_kv_*``).

Agreement criterion between two servers (bf16 model, different attention arithmetic): for
every prompt the first ``AGREE_TOKENS`` generated tokens are identical and their logprobs
differ by at most ``LOGPROB_BOUND`` nats; the number of fully identical completions is
reported. Servers are started one at a time (the machine has 2 cores).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sglang_rvv import demo, layers
from sglang_rvv.compat import quiet
from sglang_rvv.serve import server_command, stop_group, wait_healthy

MAX_TOKENS = 24
AGREE_TOKENS = 8
LOGPROB_BOUND = 0.1
CHUNK = 64
READY_TIMEOUT = 900.0
DTYPE = "bfloat16"
"""The servers' compute dtype (and so the default KV dtype): the demo models' config says
float32, which SGLang's ``--dtype auto`` would serve as float16."""


def _prompts() -> list[str]:
    lines = [ln for ln in demo.corpus().splitlines() if ln.strip()]
    shared = "The server answers each request with the next words of the text."
    long_a = " ".join(lines[:9])  # well over CHUNK tokens: chunked prefill
    long_b = " ".join(lines[4:14])
    return [
        "The vector unit reads",
        shared,
        shared + " Each request",
        shared + " Each request has a prompt. A prompt is",
        "When two prompts start with the same words,",
        "Once upon a time there was a little robot who",
        "RISC-V is an open",
        long_a,
        long_b,
        long_a + " The small board",
    ]


@dataclass
class Completion:
    text: str
    tokens: list[str]
    logprobs: list[float]
    cached_tokens: int = 0


@dataclass
class Scored:
    """One teacher-forced passage: per position after the first, the text's token, its
    log-probability, and the top-1 token with its log-probability."""

    tokens: list[str]
    logprobs: list[float]
    top1: list[str]
    top1_logprobs: list[float]


@dataclass
class Results:
    sequential: list[Completion] = field(default_factory=list)
    concurrent: list[Completion] = field(default_factory=list)
    after_abort: Completion | None = None
    abort_chunks: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    scored: list[Scored] = field(default_factory=list)
    log: str = ""
    """The server's output up to the end of the workload (before it was stopped)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _complete(client: Any, prompt: str) -> Completion:
    resp = client.completions.create(
        model="default", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, logprobs=1
    )
    choice = resp.choices[0]
    lp = choice.logprobs
    details = getattr(resp.usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
    return Completion(
        text=choice.text,
        tokens=list(lp.tokens),
        logprobs=[float(x) for x in lp.token_logprobs],
        cached_tokens=cached,
    )


def _passages() -> list[str]:
    """Corpus passages for teacher forcing: together over 1,000 positions."""
    lines = [ln for ln in demo.corpus().splitlines() if ln.strip()]
    half = len(lines) // 2
    # the two halves as trained, and every line in reverse order (transitions never seen)
    return [" ".join(lines[:half]), " ".join(lines[half:]), " ".join(reversed(lines))]


def _score(client: Any, text: str) -> Scored:
    resp = client.completions.create(
        model="default", prompt=text, max_tokens=1, temperature=0, echo=True, logprobs=1
    )
    lp = resp.choices[0].logprobs
    n = int(resp.usage.prompt_tokens)
    tokens, logprobs, tops = lp.tokens[1:n], lp.token_logprobs[1:n], lp.top_logprobs[1:n]
    top1 = [max(t.items(), key=lambda kv: kv[1]) for t in tops]
    return Scored(
        tokens=list(tokens),
        logprobs=[float(x) for x in logprobs],
        top1=[t for t, _ in top1],
        top1_logprobs=[float(x) for _, x in top1],
    )


def _abort_one(url: str) -> int:
    """Streams a long completion and closes the connection after 3 chunks."""
    body = json.dumps(
        {
            "model": "default",
            "prompt": "Once upon a time",
            "max_tokens": 400,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
        }
    ).encode()
    req = urllib.request.Request(
        url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    chunks = 0
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp:
            if line.startswith(b"data:") and b"[DONE]" not in line:
                chunks += 1
                if chunks >= 3:
                    break
    return chunks


def run_server(
    model: Path,
    backend: str,
    *,
    routed: bool,
    tmp: Path,
    kv_cache_dtype: str = "auto",
    dtype: str = DTYPE,
    score: bool | None = None,
    env_extra: dict[str, str] | None = None,
) -> Results:
    """Starts a server, runs the module's workload on it and stops it. ``score`` (default: an
    ``rvv`` server without routing) also scores the teacher-forced passages."""
    import openai

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    env["SGLANG_RVV_LAYERS"] = "1" if routed else "0"
    env.update(env_extra or {})
    tag = "-".join(f"{k}={v}" for k, v in sorted((env_extra or {}).items()))
    name = (
        f"{model.name}-{backend}-{int(routed)}-{kv_cache_dtype}-{dtype}{'-' + tag if tag else ''}"
    )
    stats_dir = tmp / f"stats-{name}"
    env["SGLANG_RVV_LAYER_STATS"] = str(stats_dir)
    # serve.py's command line (CPU device, host, --max-total-tokens) plus ours.
    cmd = server_command(
        [
            "--attention-backend", backend,
            "--port", str(port),
            "--chunked-prefill-size", str(CHUNK),
            "--enable-cache-report",
            "--random-seed", "0",
            "--dtype", dtype,
            "--kv-cache-dtype", kv_cache_dtype,
        ],
        model,
    )  # fmt: skip
    log = tmp / f"server-{name}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            try:
                wait_healthy(url, proc, READY_TIMEOUT)
            except (RuntimeError, TimeoutError) as exc:
                tail = log.read_text(errors="replace")[-4000:]
                raise AssertionError(f"{backend} server did not start: {exc}\n{tail}") from exc
            print(f"[e2e] {model.name} {backend} routed={routed} kv={kv_cache_dtype}: ready in "
                  f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=300)
            res = Results()
            prompts = _prompts()
            res.sequential = [_complete(client, p) for p in prompts]
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                res.concurrent = list(
                    pool.map(lambda p: _complete(client, p), prompts + prompts[:6])
                )
            res.abort_chunks = _abort_one(url)
            res.after_abort = _complete(client, prompts[5])
            if score if score is not None else backend == "rvv" and not routed:
                res.scored = [_score(client, text) for text in _passages()]
            time.sleep(1.5)  # let the scheduler flush its op counts
            res.log = log.read_text(errors="replace")
        finally:
            stop_group(proc)
    layers.flush_stats()
    res.stats = dict(layers.read_stats(stats_dir)) if stats_dir.is_dir() else {}
    return res


def agree(a: Completion, b: Completion) -> tuple[bool, str]:
    """The criterion of the module docstring; returns (ok, explanation)."""
    n = min(AGREE_TOKENS, len(a.tokens), len(b.tokens))
    if n < AGREE_TOKENS:
        return False, f"too few tokens: {len(a.tokens)} / {len(b.tokens)}"
    if a.tokens[:n] != b.tokens[:n]:
        return False, f"tokens differ: {a.tokens[:n]} vs {b.tokens[:n]}"
    worst = max(abs(x - y) for x, y in zip(a.logprobs[:n], b.logprobs[:n], strict=True))
    if worst > LOGPROB_BOUND:
        return False, f"logprobs differ by {worst:.3f} > {LOGPROB_BOUND}"
    return True, f"max logprob difference {worst:.4f}"


@pytest.fixture(scope="module")
def tmp_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


FIRST_ARCH_DEFAULT = [
    a if a == demo.ARCHS[0] else pytest.param(a, marks=pytest.mark.e2e_full) for a in demo.ARCHS
]
"""The dense demo archs, the second marked ``e2e_full`` (``nox -s sglang-e2e``): it has the
first's attention shapes, so its INT8-KV and TP servers add little to the default run."""

_CACHE: dict[tuple[str, str, bool, str], Results] = {}


@pytest.fixture(scope="module")
def served(tmp_module: Path) -> Iterator[Any]:
    def get(arch: str, backend: str, routed: bool = False, kv: str = "auto") -> Results:
        key = (arch, backend, routed, kv)
        if key not in _CACHE:
            _CACHE[key] = run_server(
                demo.ensure(arch), backend, routed=routed, tmp=tmp_module, kv_cache_dtype=kv
            )
        return _CACHE[key]

    yield get


def _compare(x: Results, y: Results, what: str) -> None:
    problems = []
    identical = 0
    for i, (a, b) in enumerate(zip(x.sequential, y.sequential, strict=True)):
        ok, why = agree(a, b)
        identical += a.tokens == b.tokens
        if not ok:
            problems.append(f"prompt {i}: {why}")
    print(f"[e2e] {what}: {identical}/{len(x.sequential)} completions token-identical")
    assert not problems, f"{what}: " + "; ".join(problems)


@pytest.mark.parametrize("arch", demo.ARCHS)
def test_rvv_matches_torch_native(served: Any, arch: str) -> None:
    _compare(served(arch, "rvv"), served(arch, "torch_native"), f"{arch} rvv vs torch_native")


@pytest.mark.parametrize(
    ("arch", "backend", "kv"),
    [
        (arch, backend, kv)
        if kv == "auto" or arch == demo.ARCHS[0]
        else pytest.param(arch, backend, kv, marks=pytest.mark.e2e_full)
        for arch in demo.ARCHS
        for backend, kv in (("rvv", "auto"), ("torch_native", "auto"), ("rvv", "int8"))
    ],
)
def test_workload_is_consistent(served: Any, arch: str, backend: str, kv: str) -> None:
    res = served(arch, backend, kv=kv)
    prompts = _prompts()
    # The demo model learned its corpus: greedy decoding continues it.
    assert "memory at about ten gigabytes" in res.sequential[0].text
    # Shared prefixes hit the radix cache.
    assert res.sequential[2].cached_tokens > 0 and res.sequential[3].cached_tokens > 0
    # Batched (concurrent) requests give what the same prompts gave one at a time.
    for i, c in enumerate(res.concurrent):
        ok, why = agree(c, res.sequential[i % len(prompts)])
        assert ok, f"concurrent request {i}: {why}"
    # The aborted request left the server healthy and correct.
    assert res.abort_chunks == 3
    assert res.after_abort is not None
    ok, why = agree(res.after_abort, res.sequential[5])
    assert ok, f"after the abort: {why}"


def test_routed_layers_same_outputs_and_op_calls(served: Any) -> None:
    routed = served("qwen2", "rvv", True)
    _compare(routed, served("qwen2", "rvv"), "qwen2 rvv with layer routing vs without")
    expected = {"rmsnorm_cpu", "fused_add_rmsnorm_cpu", "silu_and_mul_cpu", "rotary_embedding_cpu"}
    if layers.linear_ops_available():
        expected |= {"convert_weight_packed", "weight_packed_linear"}
    counts = routed.stats
    print(f"[e2e] routed op calls: {counts}")
    assert all(counts.get(op, 0) > 0 for op in expected), f"op calls {counts}, wanted {expected}"
    # Without routing, nothing goes through the hooks; in both, attention ran the kernels
    # (rvv-attention's call counts, which sglang-rvv writes next to the routed ops).
    unrouted = served("qwen2", "rvv").stats
    assert not [op for op in unrouted if not op.startswith("attention ")], unrouted
    for stats in (counts, unrouted):
        assert stats.get("attention decode:kernel", 0) > 0, stats
        assert stats.get("attention extend:kernel", 0) > 0, stats
        assert not [op for op in stats if op.endswith(":fallback")], stats


SUMMARY = "sglang-rvv: attention rvv on "


@pytest.mark.parametrize("routed", [False, True])
def test_startup_log_is_clean_and_says_what_runs_where(served: Any, routed: bool) -> None:
    import rvv_ops

    log = served("qwen2", "rvv", routed).log
    assert "Traceback" not in log, log[-6000:]
    summary = [line for line in log.splitlines() if SUMMARY in line]
    assert len(summary) == 1, f"expected one start-up summary line, got {summary}"
    line = summary[0]
    print(f"[e2e] {line}")
    assert f"kernels {rvv_ops.build_info()['active_variant']}" in line
    assert "torch fallback: none" in line
    assert ("layers on RVV ops: RMSNorm" in line) is routed
    assert "compat: " in line and "sgl_kernel" in line
    # The SGLang messages sglang-rvv quiets on the CPU engine (each with its reason).
    for q in quiet.QUIET:
        assert q.test.endswith(test_startup_log_is_clean_and_says_what_runs_where.__name__)
        assert q.message not in log, f"{q.message!r} ({q.source}) is still in the log"


def test_serve_raises_the_open_files_limit() -> None:
    # In a child with a low soft limit: raised to SGLang's 65535, or to the hard limit.
    code = (
        "import resource\n"
        "from sglang_rvv import serve\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, soft), hard))\n"
        "print(serve.raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0],"
        " hard)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    returned, soft, hard = (int(x) for x in res.stdout.split())
    expected = 65535 if hard == resource.RLIM_INFINITY else min(65535, hard)
    assert returned == soft == expected


# ------------------------------------------------------------------- --kv-cache-dtype int8

INT8_POSITIONS = 500
"""Teacher-forced positions compared per model (at least)."""
INT8_TOP1 = 0.98
"""Share of those positions whose top-1 token agrees with the model's own KV dtype."""
INT8_LOGPROB_BOUND = 0.25
"""Largest difference (nats) of a text token's log-probability, INT8 vs the model's KV dtype."""


@pytest.mark.parametrize("arch", FIRST_ARCH_DEFAULT)
def test_int8_kv_agrees_with_the_models_kv_dtype(served: Any, arch: str) -> None:
    """Same weights, ``--kv-cache-dtype int8`` vs the default: the first token of every
    prompt, and teacher-forced top-1 tokens and log-probabilities over >= 500 positions."""
    q, ref = served(arch, "rvv", kv="int8"), served(arch, "rvv")
    first = [
        f"prompt {i}: {a.tokens[:1]} vs {b.tokens[:1]}"
        for i, (a, b) in enumerate(zip(q.sequential, ref.sequential, strict=True))
        if not a.tokens or a.tokens[:1] != b.tokens[:1]
    ]
    assert not first, "first tokens differ: " + "; ".join(first)
    identical = sum(a.tokens == b.tokens for a, b in zip(q.sequential, ref.sequential, strict=True))
    positions = same_top1 = 0
    worst = worst_top1 = 0.0
    for a, b in zip(q.scored, ref.scored, strict=True):
        assert a.tokens == b.tokens
        positions += len(a.tokens)
        same_top1 += sum(x == y for x, y in zip(a.top1, b.top1, strict=True))
        worst = max([worst, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))])
        worst_top1 = max(
            [
                worst_top1,
                *(abs(x - y) for x, y in zip(a.top1_logprobs, b.top1_logprobs, strict=True)),
            ]
        )
    print(
        f"[e2e] {arch} int8 KV vs default KV: first tokens {len(q.sequential)}/"
        f"{len(q.sequential)}, completions identical {identical}/{len(q.sequential)}, "
        f"teacher-forced top-1 {same_top1}/{positions} ({same_top1 / positions:.4f}), "
        f"max |logprob diff| text token {worst:.4f}, top-1 token {worst_top1:.4f}"
    )
    assert positions >= INT8_POSITIONS
    assert same_top1 / positions >= INT8_TOP1
    assert worst <= INT8_LOGPROB_BOUND


def test_int8_kv_ran_the_int8_kernels_and_nothing_fell_back(served: Any) -> None:
    res = served("qwen2", "rvv", kv="int8")
    stats = res.stats
    print(f"[e2e] int8 KV op calls: {stats}")
    assert stats.get("attention decode int8_kv:kernel", 0) > 0, stats
    assert stats.get("attention extend int8_kv:kernel", 0) > 0, stats
    assert not [op for op in stats if op.endswith(":fallback")], stats
    # chunked prefill and radix-cache hits ran over the INT8 cache
    assert res.sequential[2].cached_tokens > 0 and res.sequential[3].cached_tokens > 0
    summary = [line for line in res.log.splitlines() if SUMMARY in line]
    assert len(summary) == 1 and "torch fallback: none" in summary[0], summary


_POOL = re.compile(r"KV pool (\w+): (\d+) bytes \(K \d+, V \d+\) for (\d+) tokens")


@pytest.mark.parametrize("arch", FIRST_ARCH_DEFAULT)
def test_int8_kv_pool_is_about_half_of_the_default(served: Any, arch: str) -> None:
    """For the same ``--max-total-tokens``, the pool's own size report: INT8 values plus fp32
    scales per token and head, i.e. ``(D + 4) / (2 D)`` of bf16's (0.52 at D = 128; the demo
    models' D = 16 gives 0.625)."""
    pools = {}
    for kv in ("int8", "auto"):
        found = _POOL.findall(served(arch, "rvv", kv=kv).log)
        assert len(found) == 1, found
        pools[kv] = (found[0][0], int(found[0][1]), int(found[0][2]))
    config = json.loads((demo.ensure(arch) / "config.json").read_text())
    d = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    (q_dtype, q_bytes, q_tokens), (r_dtype, r_bytes, r_tokens) = pools["int8"], pools["auto"]
    assert q_dtype == "int8" and q_tokens == r_tokens
    element = torch_element_size(r_dtype)
    expected = (d + 4) / (d * element)
    print(
        f"[e2e] {arch} KV pool for {q_tokens} tokens: int8 {q_bytes} bytes, {r_dtype} "
        f"{r_bytes} bytes, ratio {q_bytes / r_bytes:.4f} (expected {expected:.4f})"
    )
    assert abs(q_bytes / r_bytes - expected) < 0.005


def torch_element_size(name: str) -> int:
    import torch

    return int(torch.empty(0, dtype=getattr(torch, name)).element_size())


def test_int8_kv_with_another_backend_fails_at_startup(tmp_module: Path) -> None:
    cmd = server_command(
        ["--attention-backend", "torch_native", "--kv-cache-dtype", "int8",
         "--port", str(_free_port())],
        demo.ensure("qwen2"),
    )  # fmt: skip
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "--kv-cache-dtype int8 needs --attention-backend rvv" in out, out[-3000:]
    assert "'torch_native'" in out
