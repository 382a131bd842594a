"""Process lifecycle of the main job, ``python -m sglang_rvv.serve``.

Four wrappers serve the demo model on their own ports; they are started together (each start
is mostly single-threaded Python; together they take less time than one after another) and
each is then stopped by one signal: SIGINT, SIGTERM, SIGHUP (the wrapper stops the server's
process group) and SIGKILL (the server dies with its parent). After each, no live process of
the server's session may remain within :data:`STOP_BOUND` seconds; zombies are counted as gone
(they hold no memory, CPU or port; reaping them is their new parent's business). The server's
session is the one its process group lives in (``start_new_session``), so a process that left
the group for another group of the session is still found. Before the signals, one server's
idle CPU over :data:`IDLE_WINDOW` seconds, summed over its whole session from
``/proc/<pid>/stat``, must stay below :data:`IDLE_BOUND` of one core (the ``--sleep-on-idle``
default).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sglang_rvv import demo
from sglang_rvv.serve import SLEEP_ON_IDLE, proc_stat, server_command

STOP_BOUND = 30.0
"""Seconds after the signal by which the server's session must be empty (issue 41)."""
IDLE_WINDOW = 10.0
IDLE_BOUND = 0.10
"""Fraction of one core an idle server may use (issue 41)."""
READY_TIMEOUT = 900.0
SIGNALS = {s.name: s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Served:
    wrapper: subprocess.Popen[bytes]
    log: Path
    server: int = 0
    """The server's pid, which is also its process group and session id."""
    tree: tuple[tuple[int, str], ...] = ()
    """(pid, start time) of every live process of the server's session once it was ready."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_members(sid: int) -> dict[int, list[str]]:
    """The live (not zombie) processes of session ``sid``: pid -> ``/proc/<pid>/stat`` fields."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[0] not in "ZX" and int(fields[3]) == sid:
                found[int(entry.name)] = fields
    return found


def left_over(served: Served) -> list[str]:
    """What is still alive of the server: its session's processes and any recorded process of
    its tree (same pid and start time)."""
    left = {pid: f"pid {pid} in session {served.server}" for pid in session_members(served.server)}
    for pid, started in served.tree:
        fields = proc_stat(pid)
        if fields is not None and fields[0] not in "ZX" and fields[19] == started:
            left.setdefault(pid, f"pid {pid} of the server's tree")
    return sorted(left.values())


def _session_ticks(sid: int) -> dict[int, int]:
    return {pid: int(f[11]) + int(f[12]) for pid, f in session_members(sid).items()}


def _wait_ready(served: Served, deadline: float) -> None:
    while True:
        text = served.log.read_text(errors="replace")
        if not served.server and (m := re.search(r"\[serve\] server pid (\d+)", text)):
            served.server = int(m.group(1))
        if "[serve] ready: " in text:
            return
        if served.wrapper.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"the wrapper did not get ready (exit code {served.wrapper.poll()}):\n"
                + text[-4000:]
            )
        time.sleep(1)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    tmp = tmp_path_factory.mktemp("lifecycle")
    demo.ensure("qwen2")
    started: dict[str, Served] = {}
    try:
        for name in SIGNALS:
            log = tmp / f"serve-{name}.log"
            with open(log, "wb") as out:
                cmd = [sys.executable, "-m", "sglang_rvv.serve", "--port", str(_free_port())]
                wrapper = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            started[name] = Served(wrapper, log)
        begin = time.monotonic()
        for served in started.values():
            _wait_ready(served, begin + READY_TIMEOUT)
            served.tree = tuple(
                (pid, fields[19]) for pid, fields in session_members(served.server).items()
            )
        print(f"[lifecycle] {len(started)} servers ready in {time.monotonic() - begin:.0f} s")
        yield started
    finally:
        for served in started.values():
            if served.wrapper.poll() is None:
                served.wrapper.kill()
                served.wrapper.wait()
            if served.server:
                for pid in session_members(served.server):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def test_server_command_sleeps_on_idle_by_default() -> None:
    model = Path("/models/m")
    assert server_command([], model).count(SLEEP_ON_IDLE) == 1
    assert server_command([SLEEP_ON_IDLE], model).count(SLEEP_ON_IDLE) == 1
    assert SLEEP_ON_IDLE not in server_command([], model, sleep_on_idle=False)


def test_idle_server_uses_under_a_tenth_of_a_core(servers: dict[str, Served]) -> None:
    served = servers["SIGINT"]
    before = _session_ticks(served.server)
    start = time.monotonic()
    time.sleep(IDLE_WINDOW)
    after = _session_ticks(served.server)
    elapsed = time.monotonic() - start
    used = sum(t - before.get(pid, 0) for pid, t in after.items()) / CLOCK_TICKS
    share = used / elapsed
    print(f"[lifecycle] idle server: {used:.2f} s CPU in {elapsed:.1f} s ({share:.1%} of a core)")
    assert share < IDLE_BOUND, f"{share:.1%} of a core over {elapsed:.1f} s while idle"


@pytest.mark.parametrize("name", list(SIGNALS))
def test_signal_to_the_wrapper_leaves_no_server_process(
    servers: dict[str, Served], name: str
) -> None:
    served = servers[name]
    # The server runs with its scheduler and detokenizer in its own session.
    assert len(served.tree) >= 3, served.tree
    assert served.server in dict(served.tree)
    assert served.wrapper.poll() is None
    sent = time.monotonic()
    served.wrapper.send_signal(SIGNALS[name])
    while (left := left_over(served)) and time.monotonic() - sent < STOP_BOUND:
        time.sleep(0.5)
    assert not left, f"{STOP_BOUND:.0f} s after {name} to the wrapper: {left}"
    code = served.wrapper.wait(timeout=STOP_BOUND)
    log = served.log.read_text(errors="replace")
    print(f"[lifecycle] {name}: server session empty after {time.monotonic() - sent:.1f} s")
    if name == "SIGKILL":
        assert code == -signal.SIGKILL
    else:
        assert code == 0, log[-4000:]
        assert f"[serve] stopped by {name}: stopping the server" in log
