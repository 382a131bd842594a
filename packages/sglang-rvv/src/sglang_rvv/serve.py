"""``python -m sglang_rvv.serve``: SGLang with ``--attention-backend rvv``, ready to query.

Without ``--model-path`` it serves the bundled demo model (built on first use, see
:mod:`sglang_rvv.demo`; ``--demo-arch qwen2|llama|qwen3-moe|qwen2-moe`` picks one). Any other
argument is passed to ``sglang serve``. It sets SGLang's CPU mode
(``SGLANG_USE_CPU_ENGINE=1``), starts the server, waits (bounded, with progress) until
``/health`` answers, prints how to query it, and keeps serving until interrupted (Ctrl-C) or
until the server exits.

SGLang's own warm-up request runs (one short generation before ``/health`` answers): with
``--skip-server-warmup``, SGLang 0.5.23 posts its post-warm-up ``/freeze_gc`` before its HTTP
server listens and logs the refused connection as a traceback. The soft limit of open files
is raised (up to the hard limit) before the server starts: SGLang asks for 65535 itself and
cannot go above the hard limit either.

Stopping: the server runs in its own session and process group (SGLang spawns a scheduler and
a detokenizer into it). SIGINT, SIGTERM and SIGHUP to this wrapper send SIGTERM to the server
(SGLang drains its requests and stops its processes), and SIGKILL to the whole group after
:data:`STOP_GRACE` seconds or at a second stop signal. A wrapper killed outright (SIGKILL)
takes the server with it: on Linux the server is started with the parent-death signal
SIGKILL (``PR_SET_PDEATHSIG``), and SGLang gives its own children the same. ``--sleep-on-idle``
is passed unless ``--no-sleep-on-idle`` is given: without it SGLang's scheduler polls its
sockets and keeps a core busy while no request is in flight.

Tensor parallelism: with ``--tp-size N`` (times ``--pp-size`` and ``--dp-size``) more than the
host's NUMA nodes and ``SGLANG_CPU_OMP_THREADS_BIND`` unset, it sets that variable to the
cores it may run on split evenly among the ranks, and prints the value (SGLang refuses to
start without it; see :mod:`sglang_rvv.tp`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

DEFAULTS = {
    "--device": "cpu",
    "--attention-backend": "rvv",
    "--host": "127.0.0.1",
    "--port": "30000",
    "--max-total-tokens": "8192",
}


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _value(args: Sequence[str], flag: str) -> str:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return DEFAULTS[flag]


# SGLang's recommended entry point, ``sglang serve`` (its console script), run by this
# interpreter: under QEMU the console script's shebang cannot be executed, ``sys.executable``
# can. ``--model-type llm`` skips its diffusion-model detection.
SGLANG_SERVE = (
    "import sys; from sglang.cli.main import main; sys.argv[0] = 'sglang'; sys.exit(main())"
)


SLEEP_ON_IDLE = "--sleep-on-idle"
"""Passed by default: SGLang's scheduler then blocks (up to 1 s, woken by a request) on its
sockets when it has nothing to run, instead of polling them in a busy loop."""


def server_command(
    extra: Sequence[str], model_path: Path | None, *, sleep_on_idle: bool = True
) -> list[str]:
    """The ``sglang serve`` command line: our defaults, overridden by anything in ``extra``;
    ``--sleep-on-idle`` unless ``sleep_on_idle`` is false."""
    cmd = [sys.executable, "-c", SGLANG_SERVE, "serve", "--model-type", "llm"]
    if model_path is not None:
        cmd += ["--model-path", str(model_path)]
    for flag, value in DEFAULTS.items():
        if not _has(extra, flag):
            cmd += [flag, value]
    if sleep_on_idle and SLEEP_ON_IDLE not in extra:
        cmd.append(SLEEP_ON_IDLE)
    return cmd + list(extra)


RANK_FLAGS = (
    ("--tp-size", "--tensor-parallel-size"),
    ("--pp-size", "--pipeline-parallel-size"),
    ("--dp-size", "--data-parallel-size"),
)
"""SGLang's flags whose values multiply into the number of ranks (scheduler processes)."""


def ranks(args: Sequence[str]) -> int:
    """The number of ranks ``args`` asks SGLang for: tp x pp x dp (each 1 when not given)."""
    total = 1
    for names in RANK_FLAGS:
        for i, a in enumerate(args):
            for name in names:
                if a == name and i + 1 < len(args):
                    value = args[i + 1]
                elif a.startswith(name + "="):
                    value = a.split("=", 1)[1]
                else:
                    continue
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(f"{name} {value!r}: expected a positive integer")
                total *= int(value)
                break
    return total


def default_threads_bind(args: Sequence[str], env: dict[str, str]) -> str | None:
    """Sets ``SGLANG_CPU_OMP_THREADS_BIND`` in ``env`` to this process's cores split evenly
    among the ranks when SGLang would otherwise refuse to start (more ranks than NUMA nodes
    and the variable unset); returns the value set, or None."""
    from sglang_rvv import tp

    return tp.set_default_bind(ranks(args), env)


SGLANG_OPEN_FILES = 65535
"""The soft RLIMIT_NOFILE SGLang's start-up asks for."""


def raise_open_files_limit() -> int:
    """Raises this process's soft RLIMIT_NOFILE, which the server inherits, to
    :data:`SGLANG_OPEN_FILES` or the hard limit if that is lower (only root can raise a hard
    limit); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = SGLANG_OPEN_FILES if hard == resource.RLIM_INFINITY else min(SGLANG_OPEN_FILES, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Polls ``url/health`` until it answers 200; raises if the server dies or time runs out."""
    start = time.monotonic()
    last_note = 0.0
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            raise TimeoutError(f"{url}/health did not answer within {timeout:.0f} s")
        if elapsed - last_note >= 15:
            print(f"[serve] waiting for {url}/health ... {elapsed:.0f} s", flush=True)
            last_note = elapsed
        time.sleep(1)


STOP_GRACE = 15.0
"""Seconds the server gets to drain and stop after SIGTERM before its group is SIGKILLed."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals on which the wrapper stops the server (Ctrl-C, a process manager, a closed
terminal)."""

_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process receives when the thread that forked it exits."""


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when this process dies, however it
    dies (Linux ``PR_SET_PDEATHSIG``; kept across ``exec``), or None where that does not exist.
    SIGKILL because a wrapper killed outright leaves nobody to escalate a slower signal; the
    server's scheduler and detokenizer have the same signal on the server's death (SGLang's
    ``kill_itself_when_parent_died``). The signal is tied to the forking thread, so the server
    is started from the main thread."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        # The parent may have died between fork and prctl: then nobody would signal us.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` is the state,
    ``[2]`` the process group, ``[3]`` the session, ``[11]``/``[12]`` utime/stime in clock
    ticks, ``[19]`` the start time), or None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(")") + 2 :].split()


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from ``/proc`` (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[0] not in "ZX" and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM to the server process, which drains requests and stops its own scheduler and
    detokenizer (SIGINT would end it with the KeyboardInterrupt's traceback; a signal to its
    children first would make it report them as crashed), then SIGKILL to whatever of its
    process group is left after ``grace`` seconds, and a short wait (on Linux) until the group
    is gone, so that its port is free when this returns."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    _kill_group(proc.pid, signal.SIGKILL)
    proc.wait()
    if sys.platform.startswith("linux"):
        deadline = time.monotonic() + 10
        while group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)


class StopRequested(BaseException):
    """Raised in the main thread when a stop signal arrives while the server runs (a
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopSignals:
    """Handlers for :data:`STOP_SIGNALS`: the first one raises :class:`StopRequested` (once a
    server is attached; a signal that arrives while it is being started is held until then),
    any later one SIGKILLs the server's group at once (an impatient user, or a process
    manager's follow-up signal)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.signum: int | None = None
        self.stopping = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            if self.proc is not None:
                _kill_group(self.proc.pid, signal.SIGKILL)
            return
        self.stopping = True
        self.signum = signum
        if self.proc is not None:
            raise StopRequested(signum)

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        """The server to stop; raises :class:`StopRequested` if a signal came while it started."""
        self.proc = proc
        if self.signum is not None:
            raise StopRequested(self.signum)

    def restore(self) -> None:
        """Puts the previous handlers back."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_rvv.serve",
        description=__doc__,
        epilog="Unknown arguments go to sglang serve unchanged.",
    )
    parser.add_argument("--model-path", help="a model directory (default: the demo model)")
    parser.add_argument(
        "--demo-arch",
        choices=("qwen2", "llama", "qwen3-moe", "qwen2-moe"),
        default="qwen2",
        help="which demo model (qwen3-moe, qwen2-moe: the mixture-of-experts ones; with the "
        "RVV MoE ops layer routing runs their experts in fused_experts_cpu)",
    )
    parser.add_argument(
        "--demo-quant",
        choices=("w8a8", "awq", "gptq", "fp8", "wna16"),
        help="serve the demo model quantised in this format (sglang_rvv.quant); its linear "
        "layers need the RVV ops, so SGLANG_RVV_LAYERS defaults to 1",
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=900, help="seconds to wait for /health"
    )
    parser.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="send one completion, print it, stop the server and exit (a smoke test)",
    )
    parser.add_argument(
        "--no-sleep-on-idle",
        action="store_true",
        help="do not pass --sleep-on-idle (SGLang's scheduler then polls, using a core, when idle)",
    )
    args, extra = parser.parse_known_args(argv)
    if args.model_path and args.demo_quant:
        parser.error("--demo-quant serves the demo model: drop --model-path")
    if args.demo_quant:
        from sglang_rvv import demo

        why = demo.moe_quant_refusal(args.demo_arch, args.demo_quant)
        if why:
            parser.error(f"--demo-quant {args.demo_quant} with --demo-arch {args.demo_arch}: {why}")

    env = dict(os.environ)
    if args.model_path:
        model: Path | None = Path(args.model_path)
    else:
        from sglang_rvv import demo

        what = f"{args.demo_arch}, {args.demo_quant}" if args.demo_quant else args.demo_arch
        print(f"[serve] demo model ({what}) ...", flush=True)
        if args.demo_quant:
            model = demo.ensure_quantized(args.demo_arch, args.demo_quant)
            env.setdefault("SGLANG_RVV_LAYERS", "1")
            print(f"[serve] SGLANG_RVV_LAYERS={env['SGLANG_RVV_LAYERS']}", flush=True)
        else:
            model = demo.ensure(args.demo_arch)
    env.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    raise_open_files_limit()
    cmd = server_command(extra, model, sleep_on_idle=not args.no_sleep_on_idle)
    bind = default_threads_bind(cmd, env)
    if bind is not None:
        from sglang_rvv import tp

        print(
            f"[serve] {ranks(cmd)} ranks, {tp.numa_node_count()} NUMA node(s): "
            f"SGLANG_CPU_OMP_THREADS_BIND={bind} (its cores split evenly among the ranks; set "
            "it yourself to choose)",
            flush=True,
        )
    url = f"http://{_value(cmd, '--host')}:{_value(cmd, '--port')}"
    print("[serve] sglang " + " ".join(cmd[cmd.index("serve") :]), flush=True)
    stop = StopSignals()
    try:
        # Its own session and process group: SGLang spawns a scheduler and a detokenizer,
        # stopped together; a Ctrl-C meant for the terminal's foreground group reaches only
        # this wrapper, which stops the server in order.
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=die_with_parent())
        try:
            print(f"[serve] server pid {proc.pid} (its process group)", flush=True)
            stop.attach(proc)
            return _serve(proc, url, model, cmd, args)
        except StopRequested as exc:
            with contextlib.suppress(OSError):  # e.g. SIGHUP: the terminal may be gone
                print(f"[serve] {exc}: stopping the server", flush=True)
            return 0
        finally:
            stop.stopping = True
            stop_group(proc)
    finally:
        stop.restore()


def _serve(
    proc: subprocess.Popen[bytes], url: str, model: Path | None, cmd: list[str], args: Any
) -> int:
    """Waits until the server is ready, prints how to query it, then serves until it exits
    (or, with ``--exit-when-ready``, sends one completion and returns)."""
    wait_healthy(url, proc, args.ready_timeout)
    print(
        f"\n[serve] ready: {url}  (model {model or 'see --model-path'}, attention backend "
        f"{_value(cmd, '--attention-backend')})\n"
        f"[serve] try:  curl -s {url}/v1/completions -H 'Content-Type: application/json' "
        '-d \'{"model": "default", "prompt": "The vector unit", "max_tokens": 16, '
        '"temperature": 0}\'\n'
        "[serve] Ctrl-C stops the server.\n",
        flush=True,
    )
    if args.exit_when_ready:
        request = {"model": "default", "prompt": "The vector unit", "max_tokens": 16}
        body = json.dumps({**request, "temperature": 0}).encode()
        req = urllib.request.Request(
            url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = json.loads(resp.read())["choices"][0]["text"]
        print(f"[serve] completion: {text!r}", flush=True)
        return 0
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
