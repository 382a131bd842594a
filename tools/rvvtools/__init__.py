"""Paths and commands of the project's RISC-V (RVV) build and emulation harness.

``tools/provision.sh`` installs everything (idempotently); this module is the one place the
noxfile and the test drivers take paths and command lines from.

Layout under :func:`cache_dir` (``$RVV_SGLANG_CACHE``, default ``~/.cache/rvv-sglang``)::

    qemu10/bin/qemu-riscv64   QEMU 10 (static, Debian 13): Zvfh, VLEN 128..1024, no plugins
    plugin/libinsncount.so    the project's TCG plugin, for QEMU 7.2 (/usr/bin/qemu-riscv64)
    riscv64-root/             Debian 13 riscv64 userland: python3.13, torch 2.6, numpy,
                              pytest, pip, venv, libtorch-dev, libstdc++ 14
    riscv64-sglang-root/      the same plus sglang-rvv's requirements/riscv64-debian.txt
    stamps/COMPONENT.stamp    what each component installed;  logs/, apt/: provisioning

Running the root's Python::

    cmd = qemu_cmd(256, sysroot=riscv_root()) + [str(riscv_root() / "usr/bin/python3"), ...]
    subprocess.run(cmd, env=guest_env(), check=True)

Always start ``riscv_root()/usr/bin/python3`` by its host path: Python then takes
``sys.prefix`` = ``<root>/usr`` and every file it creates lands inside the root or at the host
path given. (qemu-user looks each path up in the ``-L`` prefix first and falls back to the
host's, so a file created under a guest path such as ``/usr/local/...`` that does not yet exist
in the root would be created on the host.) The emulated Python cannot start other riscv64
programs: no binfmt_misc handler is registered (on purpose), so ``subprocess`` of
``sys.executable`` fails (``Exec format error``, or exit status 127), and so do ``ensurepip``,
pytest-xdist, multiprocessing's "spawn" and ProcessPoolExecutor (its resource tracker is a new
process); ``os.fork`` and a "fork" ``multiprocessing.Pool`` work; host (x86-64) programs run
natively.

Installing a riscv64 wheel (both seen to work with pip 25.1 in the root):

* into a venv (preferred: leaves the shared root untouched)::

      python3 -m venv --system-site-packages --without-pip VENV   # run by the root's python3
      VENV/bin/python3 -m pip install --no-index --no-deps --no-cache-dir WHEEL

  ``--without-pip`` is required (``ensurepip`` would exec the venv's python); the root's own
  pip, a system site package, then installs into ``VENV/lib/python3.13/site-packages``. Run
  ``VENV/bin/python3`` through qemu as above (``-L`` the root); torch etc. come from the root.
* into the root itself::

      python3 -m pip install --break-system-packages --no-index --no-deps --no-cache-dir WHEEL

  installs into ``<root>/usr/local/lib/python3.13/dist-packages`` (PEP 668 refuses it without
  ``--break-system-packages``); it stays until ``pip uninstall --break-system-packages`` or a
  rebuild of the root.

Building a torch extension against the root: CMake with ``toolchain_file()``,
``-DRVV_SYSROOT=<root>`` and ``find_package(Torch)`` (found in the root's
``usr/lib/riscv64-linux-gnu/cmake/Torch``; warns about kineto, harmless), linking the ``torch``
target; or plain flags: ``clang++-16 --target=riscv64-linux-gnu --sysroot=ROOT -march=rv64gcv
-fPIC -shared -fuse-ld=lld -std=c++17 -isystem ROOT/usr/include/torch/csrc/api/include
op.cpp -ltorch_cpu -lc10``. Load it in the emulated Python with ``torch.ops.load_library``.

Shared by the benchmarks: the plugin's marks of a run (:func:`read_marks`), counts per
token or call between two marks (:func:`counts_between`), the repeat check of identical runs
(:func:`agreeing`), the DLEN-128 cycle model (:func:`est_cycles`) and the comparison of two
runs' greedy tokens by their largest logits (:func:`first_difference`).
"""

from __future__ import annotations

import datetime
import math
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DETERMINISM",
    "INSNCOUNT_MARK_MAGIC",
    "MARK_KEYS",
    "agreeing",
    "bf16_ulps",
    "cache_dir",
    "counts_between",
    "cpu_string",
    "cross_sysroot",
    "describe_difference",
    "est_cycles",
    "first_difference",
    "git_describe",
    "guest_env",
    "parse_insncount",
    "parse_insncount_marks",
    "plugin",
    "provision",
    "qemu7",
    "qemu10",
    "qemu_cmd",
    "read_marks",
    "riscv_root",
    "run_stamp",
    "toolchain_file",
]

COMPONENTS = (
    "toolchain",
    "qemu7",
    "qemu10",
    "plugin",
    "root",
    "all",
    "sglang-root",
    "sanitizers",
    "peers",
)
VLENS = (128, 256, 512, 1024)
INSNCOUNT_KEYS = ("total", "scalar", "vector", "vsetvl", "vmem")

_TOOLS = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Return the cache directory: ``$RVV_SGLANG_CACHE`` or ``~/.cache/rvv-sglang``."""
    env = os.environ.get("RVV_SGLANG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rvv-sglang"


def provision(components: list[str]) -> None:
    """Run ``tools/provision.sh`` for ``components`` (``[]`` means all).

    Fast when everything is present. Raises ``RuntimeError`` naming the failing step (the
    script prints what went wrong, e.g. that installing Debian packages needs root).
    """
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown components {unknown}; known: {list(COMPONENTS)}")
    script = _TOOLS / "provision.sh"
    proc = subprocess.run(["bash", str(script), *components], check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"provisioning {' '.join(components) or 'all'} failed (exit {proc.returncode}); "
            f"see the output above and the logs in {cache_dir() / 'logs'}"
        )


def qemu10() -> Path:
    """Return QEMU 10's ``qemu-riscv64`` (component ``qemu10``)."""
    return cache_dir() / "qemu10" / "bin" / "qemu-riscv64"


def qemu7() -> Path:
    """Return Debian 12's QEMU 7.2 ``qemu-riscv64``, which loads TCG plugins (``qemu7``)."""
    return Path("/usr/bin/qemu-riscv64")


def plugin() -> Path:
    """Return the instruction-counting TCG plugin for QEMU 7.2 (component ``plugin``)."""
    return cache_dir() / "plugin" / "libinsncount.so"


def riscv_root() -> Path:
    """Return the Debian 13 riscv64 root with Python and torch (component ``root``)."""
    return cache_dir() / "riscv64-root"


def riscv_sglang_root() -> Path:
    """Return :func:`riscv_root` plus the Debian packages SGLang needs (``sglang-root``)."""
    return cache_dir() / "riscv64-sglang-root"


def cross_sysroot() -> Path:
    """Return Debian 12's riscv64 cross sysroot (component ``toolchain``)."""
    return Path("/usr/riscv64-linux-gnu")


def toolchain_file() -> Path:
    """Return the CMake toolchain file for riscv64 Linux with clang-16 (in the repo)."""
    return _TOOLS / "cmake" / "riscv64-linux-clang.cmake"


def cpu_string(vlen: int, zvfh: bool = False, qemu: str = "10") -> str:
    """Return the ``-cpu`` value for RVV 1.0 with ``vlen`` bits (128..1024, a power of 2).

    ``zvfh`` adds fp16 scalar and vector arithmetic: ``zfh=true,zvfh=true`` for QEMU 10, which
    enforces Zvfh; ``Zfh=true`` for QEMU 7.2, which has no Zvfh property and allows fp16
    vector arithmetic whenever Zfh is on.
    """
    if vlen not in VLENS:
        raise ValueError(f"vlen must be one of {VLENS}, not {vlen}")
    if qemu == "10":
        return f"rv64,v=true,vlen={vlen}" + (",zfh=true,zvfh=true" if zvfh else "")
    if qemu == "7":
        return f"rv64,v=true,vlen={vlen},elen=64,vext_spec=v1.0" + (",Zfh=true" if zvfh else "")
    raise ValueError(f"qemu must be '10' or '7', not {qemu!r}")


def qemu_cmd(
    vlen: int,
    zvfh: bool = False,
    *,
    qemu: str = "10",
    sysroot: Path | None = None,
    plugin_out: Path | None = None,
) -> list[str]:
    """Return the command prefix that runs a riscv64 program under QEMU user mode.

    ``sysroot`` is the ``-L`` prefix for the dynamic loader and libraries: default
    :func:`cross_sysroot` (programs built against Debian 12's cross packages); use
    :func:`riscv_root` for programs and libraries built against the Debian 13 root.
    ``plugin_out`` (QEMU 7.2 only) loads the insncount plugin, which writes one line
    ``insncount total=N scalar=N vector=N vsetvl=N vmem=N`` to that file at exit
    (read it with :func:`parse_insncount`). Append the program and its arguments.
    """
    binary = qemu10() if qemu == "10" else qemu7()
    cmd = [str(binary), "-L", str(sysroot or cross_sysroot()), "-cpu", cpu_string(vlen, zvfh, qemu)]
    if plugin_out is not None:
        if qemu != "7":
            raise ValueError("only QEMU 7.2 (qemu='7') loads TCG plugins")
        cmd += ["-plugin", f"{plugin()},outfile={plugin_out}"]
    return cmd


def make_guest_venv(venv: Path, qemu: Sequence[str], root: Path) -> list[str]:
    """Creates ``venv`` from ``root``'s Python 3.13 (``--system-site-packages``: torch, numpy
    etc. come from the root) and returns the command prefix that runs its python3 under
    ``qemu`` (a :func:`qemu_cmd` whose ``-L`` is ``root``). ``--without-pip``: ensurepip would
    exec the venv's python, which qemu-user cannot; the root's pip installs into it."""
    subprocess.run(
        [*qemu, str(root / "usr/bin/python3"), "-m", "venv", "--system-site-packages",
         "--without-pip", str(venv)],
        env=guest_env(), check=True,
    )  # fmt: skip
    return [*qemu, str(venv / "bin" / "python3")]


def guest_env(base: Mapping[str, str] | None = None, *, bytecode: bool = True) -> dict[str, str]:
    """Return ``base`` (default ``os.environ``) made fit for the emulated Python.

    qemu-user hands the host environment to the guest, so the host's Python settings
    (PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, VIRTUAL_ENV, ...) are dropped and
    PYTHONNOUSERSITE=1 is set: the root's Python uses its own paths only. With ``bytecode``
    PYTHONDONTWRITEBYTECODE is dropped too, so the guest caches compiled modules (in the
    root, and next to the sources it imports): compiling torch's modules under emulation
    costs more than importing it (~50 s against ~20 s).
    """
    env = dict(os.environ if base is None else base)
    keep = {"PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "PYTHONNOUSERSITE"}
    if not bytecode:
        keep.add("PYTHONDONTWRITEBYTECODE")
    for key in list(env):
        if (key.startswith("PYTHON") and key not in keep) or key == "VIRTUAL_ENV":
            del env[key]
    env["PYTHONNOUSERSITE"] = "1"
    return env


_INSNCOUNT = re.compile(r"^insncount((?: \w+=\d+)+)\s*$", re.MULTILINE)


def parse_insncount(path: str | os.PathLike[str]) -> dict[str, int]:
    """Parse the plugin's output file into ``{"total": N, "scalar": N, "vector": N, ...}``."""
    text = Path(path).read_text()
    match = _INSNCOUNT.search(text)
    if match is None:
        raise ValueError(f"no 'insncount ...' line in {path}")
    counts = {k: int(v) for k, v in (item.split("=") for item in match.group(1).split())}
    missing = [k for k in INSNCOUNT_KEYS if k not in counts]
    if missing:
        raise ValueError(f"{path}: insncount line lacks {missing}")
    return counts


_INSNCOUNT_MARK = re.compile(r"^insncount-mark label=(\d+)((?: \w+=\d+)+)\s*$", re.MULTILINE)
INSNCOUNT_MARK_MAGIC = 0x696E73636E74
"""The offset of the plugin's mark call: ``os.lseek(-1, INSNCOUNT_MARK_MAGIC, label)``."""


def parse_insncount_marks(path: str | os.PathLike[str]) -> list[tuple[int, dict[str, int]]]:
    """The plugin's marks in ``path``, in the order the guest took them: a list of
    ``(label, counts)`` with the counts keyed as :func:`parse_insncount`'s (counted from the
    start of the run up to the mark's syscall)."""
    marks = []
    for match in _INSNCOUNT_MARK.finditer(Path(path).read_text()):
        counts = {k: int(v) for k, v in (item.split("=") for item in match.group(2).split())}
        missing = [k for k in INSNCOUNT_KEYS if k not in counts]
        if missing:
            raise ValueError(f"{path}: insncount mark {match.group(1)} lacks {missing}")
        marks.append((int(match.group(1)), counts))
    return marks


def read_marks(path: str | os.PathLike[str], last: int, what: str) -> dict[int, dict[str, int]]:
    """The plugin's marks of one run, by label: labels must be exactly ``0..last`` and carry
    every key of :data:`MARK_KEYS` (the EMUL buckets the cycle model needs). Raises
    RuntimeError naming `what` (the run) otherwise."""
    marks = parse_insncount_marks(path)
    labels = [label for label, _ in marks]
    if labels != list(range(last + 1)):
        raise RuntimeError(
            f"{what}: the plugin recorded marks {labels}, expected 0..{last} "
            "(a plugin built before marks existed? tools/provision.sh plugin rebuilds it)"
        )
    missing = [k for k in MARK_KEYS if k not in marks[0][1]]
    if missing:
        raise RuntimeError(f"the insncount plugin predates EMUL counting (no {missing})")
    return dict(marks)


def counts_between(
    end: Mapping[str, int], start: Mapping[str, int], units: float
) -> dict[str, float]:
    """The counts of :data:`MARK_KEYS` between two marks, divided by `units` (the tokens or
    calls between them)."""
    return {k: (end[k] - start[k]) / units for k in MARK_KEYS}


def agreeing(runs: Sequence[dict[str, float]], what: str) -> dict[str, float]:
    """The first of the per-unit counts of identical runs, after checking that every run's
    total is positive and that they agree within :data:`DETERMINISM` (else RuntimeError
    naming `what`)."""
    totals = [r["total"] for r in runs]
    if min(totals) <= 0 or max(totals) > min(totals) * (1 + DETERMINISM):
        raise RuntimeError(
            f"{what}: instructions per unit of identical runs {totals} are not positive or "
            f"differ by more than {DETERMINISM:.1%}"
        )
    return runs[0]


# ------------------------------------------------------------------------------ cycle model

DLEN = 128
"""Datapath width (bits) of the in-order core the cycle estimate models (SpacemiT X60)."""
EMUL_BUCKETS = {
    "emul_8th": 0.125,
    "emul_4th": 0.25,
    "emul_half": 0.5,
    "emul1": 1.0,
    "emul2": 2.0,
    "emul4": 4.0,
    "emul8": 8.0,
}
"""The insncount plugin's EMUL buckets and the EMUL each stands for."""
MARK_KEYS = (*INSNCOUNT_KEYS, *EMUL_BUCKETS, "vtype_unknown")
"""The counts the benchmarks take from every mark: the plugin's classes, EMUL buckets and
vector instructions of unknown vtype."""
DETERMINISM = 0.01
"""How far per-unit counts of identical runs may differ (seen: ~0.05% for a decode step in
the emulated Python, whose allocations and hashing vary a little from run to run)."""


def est_cycles(counts: Mapping[str, float], vlen: int) -> float:
    """Estimated cycles of insncount ``counts`` at ``vlen`` on an in-order, dual-issue core
    with a DLEN-bit datapath (an estimate, not a measurement): a scalar instruction costs
    1/2 cycle, ``vsetvl*`` 1 cycle, any other vector instruction ``max(1, EMUL x VLEN /
    DLEN)`` cycles, EMUL from the plugin's histogram (the largest register group it reads
    or writes). Memory stalls, branch mispredictions and real pipelines are not modelled."""
    cycles = counts["scalar"] / 2 + counts["vsetvl"]
    for key, emul in EMUL_BUCKETS.items():
        cycles += counts[key] * max(1.0, emul * vlen / DLEN)
    return cycles


def git_describe() -> str:
    """The project checkout's commit (``-dirty``: with uncommitted changes), for benchmark
    records; "unknown" outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "-C", str(_TOOLS.parent), "describe", "--always", "--dirty"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_stamp() -> dict[str, str]:
    """``{"git", "date_utc"}``: the checkout (git_describe) and the time now, to the second,
    in UTC; the benchmarks put it in their records when a run starts."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"git": git_describe(), "date_utc": now}


# ---------------------------------------------------------------- greedy tokens compared
# (bench-e2e-riscv records them, bench-report prints them)


def bf16_ulps(gap: float, at: float) -> float:
    """`gap` in units of bf16's spacing at magnitude `at` (8 significant bits)."""
    if at == 0.0:
        return math.inf if gap else 0.0
    return gap / 2.0 ** (math.floor(math.log2(abs(at))) - 7)


def first_difference(
    top: list[list[list[float]]], native_top: list[list[list[float]]]
) -> dict[str, Any] | None:
    """Where a mode's greedy tokens first differ from torch-native's (the histories before
    that token are the same, so the logits compare): both runs' largest logits there, and
    for each run's token its rank among the other run's logits and how far below that run's
    top logit it is, in bf16 spacings at the top logit (None: not among the logits kept)."""

    def place(token: int, ranked: list[list[float]]) -> dict[str, Any] | None:
        top_logit = ranked[0][1]
        for rank, (t, logit) in enumerate(ranked, 1):
            if int(t) == token:
                below = bf16_ulps(top_logit - logit, top_logit)
                return {"rank": rank, "below_top_bf16": round(below, 2)}
        return None

    for i, (mine, ref) in enumerate(zip(top, native_top, strict=True)):
        if int(mine[0][0]) == int(ref[0][0]):
            continue
        return {
            "token": i + 1,
            "mode_top": mine,
            "torch_native_top": ref,
            "mode_token_in_torch_native": place(int(mine[0][0]), ref),
            "torch_native_token_in_mode": place(int(ref[0][0]), mine),
        }
    return None


def describe_difference(mode: str, d: dict[str, Any]) -> str:
    """One line on a first_difference record."""

    def where(token: int, other: str, kept: int, p: dict[str, Any] | None) -> str:
        if p is None:
            return f"{token}, not among {other}'s {kept} largest logits"
        below = p["below_top_bf16"]
        return f"{token}, {other}'s #{p['rank']}, {below:g} bf16 spacings below its top"

    mode_top, native_top = d["mode_top"], d["torch_native_top"]
    mine, ref = int(mode_top[0][0]), int(native_top[0][0])
    mine_where = where(mine, "torch-native", len(native_top), d["mode_token_in_torch_native"])
    ref_where = where(ref, mode, len(mode_top), d["torch_native_token_in_mode"])
    return f"token {d['token']}: {mode} chose {mine_where}; torch-native chose {ref_where}"
