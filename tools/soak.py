"""A bounded soak of the SGLang server: the demo model with ``--attention-backend rvv`` and
layer routing (``SGLANG_RVV_LAYERS=1``), kept busy by a load client on loopback.

``python tools/soak.py --minutes 10 --requests 3000`` (``nox -s soak``); the sglang-tests
session runs a 1-minute variant (packages/sglang-rvv/tests/test_soak.py). Run with the
Python that has SGLang and sglang-rvv installed.

The load: ``--streams`` (32) client threads send requests from a plan drawn with a fixed
seed until ``--requests`` have been sent or ``--minutes`` have passed, whichever first, then
wait for the ones in flight. Every request goes to ``/v1/completions``:

- valid requests, greedy: prompt lengths 1..``--max-prompt`` (2,000) tokens, log-uniform
  (short and long prompts equally often per decade); half of them start with one of four
  shared prefixes (so the radix cache hits); half are sent as token ids, half as text; random
  ``max_tokens`` (mostly 1..64, some up to 256), a third with ``ignore_eos``;
- 10% streamed and aborted mid-stream: the client closes the connection after 1..8 chunks;
- 5% streamed to the end (their time to first token is measured);
- 5% invalid (:data:`INVALID`: a parameter out of range or of the wrong type, a prompt or a
  prompt + ``max_tokens`` over the context, an empty body, bad JSON, ...).

Assertions (any failure is listed in the report and fails the run): no 5xx, dropped
connection, non-JSON answer or missing tokens (``finish_reason`` "length" with fewer than
``max_tokens`` tokens, or fewer with ``ignore_eos``) for a valid request; each invalid
request answered with the status of its kind (a 4xx, except SGLang's documented exception in
:func:`_invalid_kinds`) and a message naming the problem; the server alive and idle at the end
(``/flush_cache`` succeeds: no request left behind by the aborts) with no traceback or ERROR
line in its log; the RSS growth bound (:func:`rss_bound`); and the replay: a 5% sample of the
valid, not aborted requests (drawn with the seed, sent non-streamed with ``logprobs: 2``) is
replayed one at a time against a second server, ``--attention-backend torch_native`` without
routing, and must give the same greedy tokens; a differing token is accepted only at a near-tie
(:data:`NEAR_TIE`), and counted. Both servers run ``--dtype float32``.

Writes ``--out`` (default build/soak.json).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sglang_rvv import demo
from sglang_rvv.serve import (
    group_members,
    raise_open_files_limit,
    server_command,
    stop_group,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 900.0
REQUEST_TIMEOUT = 600.0
"""Seconds a client waits for one answer: requests queue when the KV pool is full."""

CONTEXT = 4096
"""The demo model's context (``max_position_embeddings``)."""


NEAR_TIE = 1e-3
"""Nats: a greedy token may differ between the servers only where the two best candidates'
log-probabilities are this close on both servers. fp32 logits of the two attention backends
(and of different batch compositions) differ by about 1e-5 nats on the demo model, so a
wider gap than this is a real difference."""

RSS_BOUND_MIB = 64.0


def rss_bound() -> int:
    """Bytes the server's RSS may grow between the end of the first block and the end of the
    last. After the first block the server is warm: the KV pool is preallocated, the radix
    cache is full and evicting (its pool is far smaller than the tokens a block sends), and
    the allocators have seen the largest batches (prompt lengths come from one distribution
    throughout). What remains is allocator noise, some 20 MiB up or down; a leak of 64 KiB
    per request over a block of 1,000 requests exceeds the bound."""
    return int(RSS_BOUND_MIB * 2**20)


@dataclass(frozen=True)
class Invalid:
    """One kind of invalid request: the body, the status SGLang must answer and a pattern
    its error message must match (naming the problem)."""

    name: str
    body: bytes
    status: int
    message: str


def _json(**fields: Any) -> bytes:
    return json.dumps({"model": "default", **fields}).encode()


def _invalid_kinds(long_ids: list[int], vocab: int) -> list[Invalid]:
    over_context = (long_ids * (CONTEXT // len(long_ids) + 2))[: CONTEXT + 10]
    return [
        Invalid("max_tokens<0", _json(prompt="The", max_tokens=-1), 400, r"max_tokens"),
        Invalid("temperature<0", _json(prompt="The", temperature=-0.5), 400, r"temperature"),
        Invalid("top_p>1", _json(prompt="The", top_p=1.5), 400, r"top_p"),
        Invalid("top_k=0", _json(prompt="The", top_k=0), 400, r"top_k"),
        Invalid("min_p>1", _json(prompt="The", min_p=2.0), 400, r"min_p"),
        Invalid(
            "frequency_penalty>2",
            _json(prompt="The", frequency_penalty=3.0),
            400,
            r"frequency_penalty",
        ),
        Invalid("max_tokens:str", _json(prompt="The", max_tokens="ten"), 400, r"max_tokens"),
        Invalid("temperature:str", _json(prompt="The", temperature="hot"), 400, r"temperature"),
        Invalid("prompt:object", _json(prompt={"text": "The"}), 400, r"prompt"),
        Invalid("prompt:missing", _json(max_tokens=4), 400, r"prompt"),
        Invalid(
            "prompt>context",
            _json(prompt=over_context, max_tokens=4),
            400,
            r"longer than the model's context length",
        ),
        Invalid(
            "prompt+max_tokens>context",
            _json(prompt=long_ids[:2000], max_tokens=CONTEXT),
            400,
            r"exceeds the model's maximum context length",
        ),
        # sglang_rvv.validate's check (SGLang 0.5.23's server dies on these without it).
        Invalid(
            "prompt id>=vocab",
            _json(prompt=[5, vocab + 1000], max_tokens=4),
            400,
            rf"token id {vocab + 1000}, outside the model's vocabulary",
        ),
        Invalid(
            "prompt id<0",
            _json(prompt=[-2, 5], max_tokens=4),
            400,
            r"token id -2, outside the model's vocabulary",
        ),
        Invalid(
            "max_tokens=0", _json(prompt="The", max_tokens=0), 400, r"max_tokens must be positive"
        ),
        Invalid("prompt empty", _json(prompt="", max_tokens=4), 400, r"Prompt cannot be empty"),
        Invalid("prompt []", _json(prompt=[], max_tokens=4), 400, r"Prompt cannot be empty"),
        Invalid("model:int", json.dumps({"model": 5, "prompt": "The"}).encode(), 400, r"'model'"),
        Invalid("stop:int", _json(prompt="The", stop=5), 400, r"'stop'"),
        # SGLang 0.5.23 refuses n=0 with a message that does not name n (its range() call
        # in the OpenAI layer fails): expected as it is.
        Invalid("n=0", _json(prompt="The", n=0, max_tokens=4), 400, r"range\(\) arg 3"),
        # SGLang 0.5.23 accepts a negative logprobs (OpenAI allows 0..5) and answers without
        # top logprobs: expected as it is, a 200 with a completion.
        Invalid(
            "logprobs<0", _json(prompt="The", logprobs=-1, max_tokens=4), 200, r"text_completion"
        ),
        Invalid("empty body", b"", 400, r"'loc': \('body',\)"),
        Invalid("bad JSON", b'{"model": "default", "prompt": "The', 400, r"JSON decode error"),
    ]


@dataclass
class Plan:
    """One request of the plan."""

    index: int
    kind: str
    """"valid", "stream" (streamed to the end), "abort" (streamed, closed after
    ``abort_after`` chunks) or "invalid"."""
    body: bytes
    max_tokens: int = 0
    ignore_eos: bool = False
    abort_after: int = 0
    sample: bool = False
    invalid: Invalid | None = None


@dataclass
class Outcome:
    index: int
    kind: str
    ok: bool
    latency: float
    ttft: float | None = None
    status: int = 0
    problem: str = ""
    tokens: list[str] = field(default_factory=list)
    top: list[dict[str, float]] = field(default_factory=list)
    cached_tokens: int = 0
    finish_reason: str = ""


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return min(high, max(low, int(math.exp(rng.uniform(math.log(low), math.log(high + 1))))))


def make_plan(tokenizer: Any, count: int, seed: int, max_prompt: int) -> Iterator[Plan]:
    """``count`` requests drawn with ``seed`` (see the module docstring)."""
    rng = random.Random(seed)
    lines = [ln for ln in demo.corpus().splitlines() if ln.strip()]
    ids: list[int] = tokenizer.encode(" ".join(lines))
    # A text longer than any prompt: the corpus' lines in shuffled orders, so that windows
    # at different offsets differ.
    stream: list[int] = []
    while len(stream) < 2 * max_prompt + CONTEXT:
        rng.shuffle(lines)
        stream += tokenizer.encode(" ".join(lines) + " ")
    prefixes = [stream[o : o + n] for o, n in ((0, 24), (300, 128), (900, 512), (1700, 1024))]
    kinds = _invalid_kinds(ids, len(tokenizer))
    invalid = 0
    for index in range(count):
        roll = rng.random()
        if roll < 0.05:
            # In turn, so that every kind comes once in the first len(kinds) invalid requests.
            bad = kinds[invalid % len(kinds)]
            invalid += 1
            yield Plan(index, "invalid", bad.body, invalid=bad)
            continue
        kind = "abort" if roll < 0.15 else "stream" if roll < 0.20 else "valid"
        length = _log_uniform(rng, 1, max_prompt)
        prompt: list[int] = []
        if rng.random() < 0.5:
            prompt = list(rng.choice(prefixes)[:length])
        start = rng.randrange(len(stream) - length)
        prompt += stream[start : start + length - len(prompt)]
        if kind == "abort":
            max_tokens, ignore_eos = rng.randint(64, 256), True
        else:
            big = rng.random() < 0.1
            max_tokens = rng.randint(65, 256) if big else rng.randint(1, 64)
            ignore_eos = rng.random() < 1 / 3
        sample = kind != "abort" and rng.random() < 0.05
        if sample:
            kind = "valid"
        fields: dict[str, Any] = {
            "prompt": prompt if rng.random() < 0.5 else tokenizer.decode(prompt),
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": ignore_eos,
        }
        if kind != "valid":
            fields["stream"] = True
        if sample:
            fields["logprobs"] = 2
        yield Plan(
            index,
            kind,
            _json(**fields),
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            abort_after=rng.randint(1, 8) if kind == "abort" else 0,
            sample=sample,
        )


def _post(port: int, body: bytes, timeout: float) -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def _check_completion(plan: Plan, data: Any, out: Outcome) -> None:
    choice = data["choices"][0]
    usage = data.get("usage") or {}
    n = int(usage.get("completion_tokens", -1))
    out.finish_reason = str(choice.get("finish_reason"))
    details = usage.get("prompt_tokens_details") or {}
    out.cached_tokens = int(details.get("cached_tokens") or 0)
    if out.finish_reason not in ("stop", "length"):
        out.problem = f"finish_reason {out.finish_reason!r}"
    elif n < 1 or n > plan.max_tokens:
        out.problem = f"{n} completion tokens for max_tokens {plan.max_tokens}"
    elif (plan.ignore_eos or out.finish_reason == "length") and n != plan.max_tokens:
        out.problem = (
            f"{n} completion tokens, finish_reason {out.finish_reason}, for max_tokens "
            f"{plan.max_tokens} (ignore_eos {plan.ignore_eos})"
        )
    if plan.sample:
        lp = choice.get("logprobs") or {}
        out.tokens = list(lp.get("tokens") or [])
        out.top = [dict(t or {}) for t in lp.get("top_logprobs") or []]
        if len(out.tokens) != n and not out.problem:
            out.problem = f"{len(out.tokens)} tokens in logprobs, {n} in usage"


def send(port: int, plan: Plan) -> Outcome:
    """Sends one planned request and checks its answer (never raises)."""
    out = Outcome(plan.index, plan.kind, ok=False, latency=0.0)
    start = time.monotonic()
    conn: http.client.HTTPConnection | None = None
    try:
        conn, resp = _post(port, plan.body, REQUEST_TIMEOUT)
        out.status = resp.status
        if plan.invalid is not None:
            text = resp.read().decode(errors="replace")
            out.latency = time.monotonic() - start
            if resp.status != plan.invalid.status:
                out.problem = f"status {resp.status} (wanted {plan.invalid.status}): {text[:300]}"
            elif not re.search(plan.invalid.message, text):
                out.problem = f"message does not match {plan.invalid.message!r}: {text[:300]}"
            out.ok = not out.problem
            return out
        if resp.status != 200:
            out.problem = f"status {resp.status}: {resp.read()[:300]!r}"
            return out
        if plan.kind == "valid":
            data = json.loads(resp.read())
            out.latency = time.monotonic() - start
            _check_completion(plan, data, out)
            out.ok = not out.problem
            return out
        chunks, done, finish = 0, False, ""
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            event = json.loads(payload)
            if "error" in event:
                out.problem = f"error event: {payload[:300]!r}"
                return out
            if out.ttft is None:
                out.ttft = time.monotonic() - start
            chunks += 1
            finish = str((event.get("choices") or [{}])[0].get("finish_reason") or finish)
            if plan.kind == "abort" and chunks >= plan.abort_after:
                break
        out.latency = time.monotonic() - start
        out.finish_reason = finish
        if plan.kind == "abort" and chunks < plan.abort_after:
            out.problem = f"stream ended after {chunks} of {plan.abort_after} chunks"
        elif plan.kind == "stream" and (not done or finish not in ("stop", "length")):
            out.problem = f"stream of {chunks} chunks, [DONE] {done}, finish_reason {finish!r}"
        out.ok = not out.problem
        return out
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as exc:
        out.problem = f"{type(exc).__name__}: {exc}"
        return out
    finally:
        out.latency = out.latency or time.monotonic() - start
        if conn is not None:
            # An abort: closing the socket mid-stream is what a client that goes away does.
            conn.close()


def server_rss(pgid: int, field: str = "VmRSS") -> int:
    """Bytes: the sum of ``field`` (``VmRSS``, or ``RssAnon``: its private anonymous part)
    in ``/proc/<pid>/status`` over the live processes of process group ``pgid``. VmRSS counts
    the shared libraries once per process; RssAnon is where a leak shows."""
    total = 0
    for pid in group_members(pgid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        m = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
        if m:
            total += int(m.group(1)) * 1024
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One SGLang server of the demo model in its own session (serve.py's command line),
    output to ``log``; :meth:`wait` until it answers. A context manager that stops its whole
    process group."""

    def __init__(self, model: Path, backend: str, routed: bool, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backend = backend
        self.log = log
        self.startup = 0.0
        env = dict(os.environ)
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        env["SGLANG_RVV_LAYERS"] = "1" if routed else "0"
        cmd = server_command(
            [
                "--attention-backend", backend,
                "--port", str(self.port),
                "--dtype", "float32",
                "--random-seed", "0",
                "--enable-cache-report",
            ],
            model,
        )  # fmt: skip
        raise_open_files_limit()
        log.parent.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait(self) -> None:
        """Returns once ``/health`` answers; raises with the log's tail if it does not."""
        try:
            wait_healthy(self.url, self.proc, READY_TIMEOUT)
        except (RuntimeError, TimeoutError) as exc:
            tail = self.log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{self.backend} server did not start: {exc}\n{tail}") from exc
        self.startup = time.monotonic() - self._started
        print(f"[soak] {self.backend} server ready in {self.startup:.0f} s", flush=True)

    def rss(self) -> tuple[int, int]:
        """(VmRSS, RssAnon) of the server's process group, bytes."""
        return server_rss(self.proc.pid), server_rss(self.proc.pid, "RssAnon")

    def get(self, path: str, method: str = "GET") -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        finally:
            conn.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc)


@dataclass
class Load:
    """What the load phase recorded."""

    outcomes: list[Outcome]
    plans: dict[int, Plan]
    seconds: float
    rss_start: tuple[int, int]
    rss_by_count: list[tuple[int, int, int]]
    """(completed requests, VmRSS, RssAnon) after every ``RSS_STEP`` completions and at the
    end."""


RSS_STEP = 10


def run_load(
    server: Server, plans: Iterator[Plan], *, streams: int, minutes: float, requests: int
) -> Load:
    """``streams`` threads sending from ``plans`` until ``requests`` are sent or ``minutes``
    have passed; waits for the requests in flight."""
    lock = threading.Lock()
    outcomes: list[Outcome] = []
    sent: dict[int, Plan] = {}
    rss_by_count: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + minutes * 60
    rss_start = server.rss()

    def next_plan() -> Plan | None:
        with lock:
            if len(sent) >= requests or time.monotonic() >= deadline:
                return None
            plan = next(plans, None)
            if plan is not None:
                sent[plan.index] = plan
            return plan

    def worker() -> None:
        while (plan := next_plan()) is not None:
            out = send(server.port, plan)
            with lock:
                outcomes.append(out)
                if len(outcomes) % RSS_STEP == 0:
                    rss_by_count.append((len(outcomes), *server.rss()))
                if len(outcomes) % 250 == 0:
                    bad = sum(not o.ok for o in outcomes)
                    print(f"[soak] {len(outcomes)} done, {bad} failed", flush=True)

    start = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    rss_by_count.append((len(outcomes), *server.rss()))
    return Load(outcomes, sent, seconds, rss_start, rss_by_count)


def _top2(top: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(top.items(), key=lambda kv: -kv[1])[:2]


def compare(a: Outcome, b: Outcome) -> tuple[str, str]:
    """``("same" | "near-tie" | "differ", explanation)`` for the rvv answer ``a`` and the
    torch_native answer ``b`` of one request: the same tokens, or the same up to a first
    difference at a near-tie of both servers (after which the continuations may differ)."""
    n = min(len(a.tokens), len(b.tokens))
    for i in range(n):
        if a.tokens[i] == b.tokens[i]:
            continue
        why = []
        for name, out in (("rvv", a), ("torch_native", b)):
            best = _top2(out.top[i]) if i < len(out.top) else []
            toks = {t for t, _ in best}
            gap = best[0][1] - best[1][1] if len(best) == 2 else math.inf
            why.append(f"{name} top-2 {best}")
            if {a.tokens[i], b.tokens[i]} != toks or gap > NEAR_TIE:
                return "differ", f"token {i}: {a.tokens[i]!r} vs {b.tokens[i]!r}; " + ", ".join(why)
        return "near-tie", f"token {i}: " + ", ".join(why)
    if len(a.tokens) != len(b.tokens):
        return "differ", f"{len(a.tokens)} vs {len(b.tokens)} tokens, same up to {n}"
    return "same", ""


def replay(server: Server, plans: list[Plan], load: dict[int, Outcome]) -> dict[str, Any]:
    """The sampled requests one at a time against ``server``, compared with the soak's answers."""
    counts = {"same": 0, "near-tie": 0, "differ": 0, "failed": 0}
    notes: list[str] = []
    for plan in plans:
        b = send(server.port, plan)
        if not b.ok:
            counts["failed"] += 1
            notes.append(f"request {plan.index} on {server.backend}: {b.problem}")
            continue
        verdict, why = compare(load[plan.index], b)
        counts[verdict] += 1
        if why:
            notes.append(f"request {plan.index} {verdict}: {why}")
    return {**counts, "requests": len(plans), "notes": notes}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _log_errors(log: Path) -> list[str]:
    text = log.read_text(errors="replace")
    return [ln for ln in text.splitlines() if "Traceback" in ln or " ERROR " in ln][:50]


def soak(
    *,
    minutes: float,
    requests: int,
    streams: int = 32,
    seed: int = 0,
    max_prompt: int = 2000,
    block: int = 1000,
    out: Path = ROOT / "build" / "soak.json",
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Runs the soak; writes and returns the report. ``report["failures"]`` lists every
    failed assertion (empty: passed)."""
    from transformers import AutoTokenizer

    model = demo.ensure("qwen2")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    logs = out.parent / (out.stem + "-logs")
    failures: list[str] = []
    with contextlib.ExitStack() as stack:
        # Both start at once (their start-ups overlap); the reference idles during the load.
        rvv = stack.enter_context(Server(model, "rvv", True, logs / "rvv.log"))
        ref = stack.enter_context(Server(model, "torch_native", False, logs / "torch_native.log"))
        rvv.wait()
        ref.wait()
        load = run_load(
            rvv,
            make_plan(tokenizer, requests, seed, max_prompt),
            streams=streams,
            minutes=minutes,
            requests=requests,
        )
        alive = rvv.proc.poll() is None
        health = rvv.get("/health")[0] if alive else None
        flush = rvv.get("/flush_cache", "POST") if alive else (None, "server exited")
        rss_end = rvv.rss()
        stop_group(rvv.proc)
        outcomes = sorted(load.outcomes, key=lambda o: o.index)
        by_index = {o.index: o for o in outcomes}
        sample = [load.plans[o.index] for o in outcomes if load.plans[o.index].sample and o.ok]
        progress(f"[soak] replaying {len(sample)} sampled requests on torch_native")
        comparison = replay(ref, sample, by_index)
    rvv_log_errors = _log_errors(logs / "rvv.log")
    done = len(outcomes)
    # "Thousand": the first and last blocks of min(block, a third of the run) requests.
    blk = max(1, min(block, done // 3))
    first = next((r for r in load.rss_by_count if r[0] >= blk), load.rss_by_count[-1])
    last = load.rss_by_count[-1]
    bound = rss_bound()

    for o in outcomes:
        if not o.ok:
            failures.append(f"request {o.index} ({o.kind}): {o.problem}")
    if health != 200:
        failures.append(f"/health after the load answered {health} (server exited?)")
    if flush[0] != 200:
        failures.append(f"/flush_cache after the load: {flush[0]} {flush[1].strip()!r}")
    if last[1] - first[1] > bound:
        failures.append(
            f"RSS grew by {(last[1] - first[1]) / 2**20:.1f} MiB between the first and the "
            f"last block of {blk} requests (bound {bound / 2**20:.1f} MiB)"
        )
    if rvv_log_errors:
        failures.append(f"the server log has error lines: {rvv_log_errors[:5]}")
    if comparison["differ"] or comparison["failed"]:
        failures += [n for n in comparison["notes"] if " near-tie" not in n]

    def of(kind: str) -> list[Outcome]:
        return [o for o in outcomes if o.kind == kind]

    valid = of("valid")
    report: dict[str, Any] = {
        "config": {
            "minutes": minutes,
            "requests": requests,
            "streams": streams,
            "seed": seed,
            "max_prompt": max_prompt,
            "dtype": "float32",
            "server": "rvv, SGLANG_RVV_LAYERS=1",
            "reference": "torch_native, SGLANG_RVV_LAYERS=0",
        },
        "requests": {
            "sent": done,
            "ok": sum(o.ok for o in outcomes),
            "valid": len(valid),
            "streamed": len(of("stream")),
            "aborted": len(of("abort")),
            "invalid": len(of("invalid")),
            "invalid_kinds": len(_invalid_kinds([0], 1)),
            "invalid_by_kind": _count(load.plans[o.index].invalid for o in of("invalid")),
            "failed": sum(not o.ok for o in outcomes),
            "with_cached_prefix": sum(o.cached_tokens > 0 for o in valid),
        },
        "seconds": round(load.seconds, 1),
        "requests_per_s": round(done / load.seconds, 2) if load.seconds else None,
        "latency_s": {
            "p50": _round(_pct([o.latency for o in valid if o.ok], 50)),
            "p99": _round(_pct([o.latency for o in valid if o.ok], 99)),
        },
        "ttft_s": {
            "p50": _round(_pct([o.ttft for o in of("stream") if o.ttft is not None], 50)),
            "p99": _round(_pct([o.ttft for o in of("stream") if o.ttft is not None], 99)),
        },
        "rss_mib": {
            "start": _mib(load.rss_start[0]),
            "after_first_block": _mib(first[1]),
            "after_last_block": _mib(last[1]),
            "at_stop": _mib(rss_end[0]),
            "block_requests": blk,
            "growth": _mib(last[1] - first[1]),
            "bound": _mib(bound),
            "anon_start": _mib(load.rss_start[1]),
            "anon_after_first_block": _mib(first[2]),
            "anon_after_last_block": _mib(last[2]),
            "series": [
                (c, _mib(r), _mib(a)) for c, r, a in load.rss_by_count[:: max(1, done // 300)]
            ],
        },
        "bounds": {
            "rss_growth_mib": RSS_BOUND_MIB,
            "near_tie_nats": NEAR_TIE,
        },
        "sample": {k: v for k, v in comparison.items()},
        "startup_s": {"rvv": round(rvv.startup, 1), "torch_native": round(ref.startup, 1)},
        "server_log_errors": rvv_log_errors,
        "failures": failures,
        "outcomes": [asdict(o) | {"tokens": len(o.tokens), "top": None} for o in outcomes],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def _count(items: Iterator[Invalid | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        if item is not None:
            counts[item.name] = counts.get(item.name, 0) + 1
    return counts


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def summary(report: dict[str, Any]) -> str:
    """The report's figures in a few lines."""
    r, s = report["requests"], report["sample"]
    rss = report["rss_mib"]
    return (
        f"[soak] {r['sent']} requests in {report['seconds']} s ({report['requests_per_s']}/s): "
        f"{r['ok']} ok, {r['failed']} failed; {r['valid']} valid, {r['streamed']} streamed, "
        f"{r['aborted']} aborted, {r['invalid']} invalid; {r['with_cached_prefix']} radix hits\n"
        f"[soak] latency p50 {report['latency_s']['p50']} s p99 {report['latency_s']['p99']} s; "
        f"ttft p50 {report['ttft_s']['p50']} s p99 {report['ttft_s']['p99']} s\n"
        f"[soak] RSS MiB start {rss['start']}, after first {rss['block_requests']} "
        f"{rss['after_first_block']}, after last {rss['after_last_block']} (growth "
        f"{rss['growth']}, bound {rss['bound']})\n"
        f"[soak] sample vs torch_native: {s['same']} same, {s['near-tie']} near-tie, "
        f"{s['differ']} differ, {s['failed']} failed of {s['requests']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="time budget of the load")
    parser.add_argument("--requests", type=int, default=3000, help="request budget")
    parser.add_argument("--streams", type=int, default=32, help="concurrent client streams")
    parser.add_argument("--seed", type=int, default=0, help="seed of the request plan")
    parser.add_argument("--max-prompt", type=int, default=2000, help="longest prompt (tokens)")
    parser.add_argument(
        "--block", type=int, default=1000, help="requests per RSS block (at most a third)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "soak.json")
    args = parser.parse_args(argv)
    report = soak(
        minutes=args.minutes,
        requests=args.requests,
        streams=args.streams,
        seed=args.seed,
        max_prompt=args.max_prompt,
        block=args.block,
        out=args.out,
    )
    print(summary(report))
    for f in report["failures"][:50]:
        print(f"[soak] FAILED: {f}")
    print(f"[soak] wrote {args.out}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
