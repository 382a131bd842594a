"""``python -m sglang_rvv.serve``: SGLang with ``--attention-backend rvv``, ready to query.

Without ``--model-path`` it serves the bundled demo model (built on first use, see
:mod:`sglang_rvv.demo`). Any other argument is passed to ``sglang serve``. It sets
SGLang's CPU mode (``SGLANG_USE_CPU_ENGINE=1``), starts the server, waits (bounded, with
progress) until ``/health`` answers, prints how to query it, and keeps serving until
interrupted (Ctrl-C) or until the server exits.

SGLang's own warm-up request runs (one short generation before ``/health`` answers): with
``--skip-server-warmup``, SGLang 0.5.23 posts its post-warm-up ``/freeze_gc`` before its HTTP
server listens and logs the refused connection as a traceback. The soft limit of open files
is raised (up to the hard limit) before the server starts: SGLang asks for 65535 itself and
cannot go above the hard limit either.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

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


def server_command(extra: Sequence[str], model_path: Path | None) -> list[str]:
    """The ``sglang serve`` command line: our defaults, overridden by anything in ``extra``."""
    cmd = [sys.executable, "-c", SGLANG_SERVE, "serve", "--model-type", "llm"]
    if model_path is not None:
        cmd += ["--model-path", str(model_path)]
    for flag, value in DEFAULTS.items():
        if not _has(extra, flag):
            cmd += [flag, value]
    return cmd + list(extra)


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


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGTERM to the server process, which drains requests and stops its own scheduler and
    detokenizer (SIGINT would end it with the KeyboardInterrupt's traceback; a signal to its
    children first would make it report them as crashed), then SIGKILL to whatever of its
    process group is left after ``grace``."""
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_rvv.serve",
        description=__doc__,
        epilog="Unknown arguments go to sglang serve unchanged.",
    )
    parser.add_argument("--model-path", help="a model directory (default: the demo model)")
    parser.add_argument(
        "--demo-arch", choices=("qwen2", "llama"), default="qwen2", help="which demo model"
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=900, help="seconds to wait for /health"
    )
    parser.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="send one completion, print it, stop the server and exit (a smoke test)",
    )
    args, extra = parser.parse_known_args(argv)

    if args.model_path:
        model: Path | None = Path(args.model_path)
    else:
        from sglang_rvv import demo

        print(f"[serve] demo model ({args.demo_arch}) ...", flush=True)
        model = demo.ensure(args.demo_arch)
    env = dict(os.environ)
    env.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    raise_open_files_limit()
    cmd = server_command(extra, model)
    url = f"http://{_value(cmd, '--host')}:{_value(cmd, '--port')}"
    print("[serve] sglang " + " ".join(cmd[cmd.index("serve") :]), flush=True)
    # Its own process group: SGLang spawns schedulers and a detokenizer, stopped together.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
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
    except KeyboardInterrupt:
        return 0
    finally:
        stop_group(proc)


if __name__ == "__main__":
    sys.exit(main())
