"""Everything sglang-rvv patches in SGLang 0.5.23 or torch, as one table: :data:`GAPS`.

Run at interpreter start by ``sglang_rvv.pth`` (``import sglang_rvv.compat``), before SGLang
or torch is imported, because SGLang reads some of it while its modules load, before its
plugins run. Each row is one gap: what is patched, why, when (every platform, or riscv64
only; and only where the gap is there) and the test that covers it. :func:`install` applies
the rows that hold on this machine through one import hook (:mod:`._finder`):

- a *stand-in* module is served only when nothing installed provides the module;
- a *wrap* or an *add* runs right after the module's own code, and changes it only if the
  gap is there;
- an *env* default is set only if the variable is unset.

:data:`ACTIVE` says what this process actually changed, and why. ``SGLANG_RVV_SHIMS=0``
turns the whole package off; ``SGLANG_RVV_RISCV64=1/0`` forces the riscv64 rows on/off
(default: on a riscv64 CPU). ``python -m sglang_rvv.compat`` prints the table.

What sglang-rvv adds to SGLang through SGLang's own extension points (the attention backend,
the layer-routing hooks, the riscv64 platform) is not patching and is not in this table.
This package imports only the standard library at start-up.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

from sglang_rvv.compat import _finder, sglang_checks, stand_ins, torch_gaps
from sglang_rvv.compat._finder import FINDER

Kind = Literal["stand-in", "wrap", "add", "env"]

ENV_OFF = "SGLANG_RVV_SHIMS"
ENV_RISCV64 = "SGLANG_RVV_RISCV64"
SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"

_SGL_KERNEL_FILE = Path(__file__).with_name("sgl_kernel.py")


_SGL_KERNEL_SUBMODULES = {"sgl_kernel.mamba": Path(__file__).with_name("sgl_kernel_mamba.py")}


def _sgl_kernel_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    if fullname == "sgl_kernel":
        # A package (empty __path__), so that `sgl_kernel.mamba` can be served.
        return importlib.util.spec_from_file_location(
            fullname, _SGL_KERNEL_FILE, submodule_search_locations=[]
        )
    sub = _SGL_KERNEL_SUBMODULES.get(fullname)
    if sub is None:
        return None  # sgl-kernel's other submodules (flash_attn, ...) are GPU code
    return importlib.util.spec_from_file_location(fullname, sub)


@dataclass(frozen=True)
class Gap:
    """One thing sglang-rvv patches (a row of the table)."""

    patched: str
    """What: a module, a function or attribute, or an environment variable."""
    kind: Kind
    target: str
    """The module served or patched, or the environment variable."""
    riscv64_only: bool
    condition: str
    """When, beyond the platform (the gap must be there)."""
    reason: str
    tests: tuple[str, ...]
    """``<file in tests/>::<test function>`` that cover it."""
    patch: Callable[[ModuleType], str | None] | None = None
    """wrap / add: fills the gap in the imported module; returns what it did, or None."""
    stand_in: Callable[[str], importlib.machinery.ModuleSpec | None] | None = None
    """stand-in: the spec for a module name (None: not stood in)."""
    value: str = ""
    """env: the default."""

    @property
    def where(self) -> str:
        return "riscv64" if self.riscv64_only else "every platform"


_TORCH26 = "torch 2.6 (Debian 13's, the only riscv64 torch) lacks it"
_NO_RISCV64_BUILD = "not installed (no riscv64 build exists)"
_RISCV64_STAND_INS = ("test_riscv64.py::test_stand_ins_in_the_simulation",)
_RISCV64_ENV = ("test_compat.py::test_riscv64_rows_in_a_fresh_interpreter",)
_TORCH_GAPS = ("test_riscv64.py::test_torch_gaps_are_filled_only_where_missing",)
_GUARDS = ("test_riscv64.py::test_symbolic_shapes_guards",)


def _stand_in(
    module: str,
    reason: str,
    tests: tuple[str, ...] = _RISCV64_STAND_INS,
    *,
    spec: Callable[[str], importlib.machinery.ModuleSpec | None] = stand_ins.spec,
    riscv64_only: bool = True,
    condition: str = _NO_RISCV64_BUILD,
) -> Gap:
    """A row that serves a stand-in for ``module`` (riscv64, no build exists: by default)."""
    return Gap(module, "stand-in", module, riscv64_only, condition, reason, tests, stand_in=spec)


def _patch(
    kind: Kind,
    target: str,
    name: str,
    patch: Callable[[ModuleType], str | None],
    condition: str,
    reason: str,
    tests: tuple[str, ...],
    *,
    riscv64_only: bool = True,
) -> Gap:
    """A row that wraps or adds ``target.name`` after ``target`` is imported."""
    return Gap(f"{target}.{name}", kind, target, riscv64_only, condition, reason, tests, patch)


def _env(variable: str, value: str, reason: str) -> Gap:
    """A riscv64 row that sets ``variable`` to ``value`` where it is unset."""
    return Gap(
        f"{variable}={value}", "env", variable, True, "unset", reason, _RISCV64_ENV, value=value
    )


GAPS: tuple[Gap, ...] = (
    _stand_in(
        "sgl_kernel",
        "SGLang's CPU mode imports sgl-kernel's Python module at module load (e.g. "
        "`assign_req_to_token_pool_cpu`), before plugins run, and it has no CPU or riscv64 "
        "build. The stand-in registers rvv-ops' `torch.ops.sgl_kernel` ops, implements the "
        "two helpers used while serving with torch, defines sgl-kernel's CPU tensor-parallel "
        "ops (`initialize`, `init_cpu_threads_env`, `shm_allreduce`, `shm_allgather`) on "
        "torch.distributed, and its speculative-decoding helpers raise NotImplementedError; "
        "its submodule `sgl_kernel.mamba` has the Gated DeltaNet wrappers "
        "(`causal_conv1d_fn_cpu`, `causal_conv1d_update_cpu`, `chunk_gated_delta_rule_cpu`) "
        "that Qwen3-Next / Qwen3.5 layers import",
        (
            "test_shim.py::test_shim_serves_sgl_kernel_and_registers_the_ops",
            "test_shim.py::test_a_real_sgl_kernel_wins",
            "test_shim.py::test_every_name_sglang_imports_in_cpu_mode_exists",
            "test_gdn_shim.py::test_sgl_kernel_mamba_names_sglang_imports",
            "test_tp.py::test_collectives_two_ranks_match_torch_distributed",
        ),
        spec=_sgl_kernel_spec,
        riscv64_only=False,
        condition="no `sgl_kernel` installed (a real one always wins)",
    ),
    _patch(
        "wrap",
        sglang_checks.COMMON,
        sglang_checks.AMX_CHECK,
        sglang_checks.wrap_amx_check,
        "answers False only while `sgl_kernel` is the stand-in (matters on AMX CPUs)",
        "rvv-ops defines `torch.ops.sgl_kernel.convert_weight_packed`, which SGLang takes "
        "as proof of sgl-kernel's CPU build: on an Intel AMX CPU it would then call dozens "
        "of sgl-kernel ops rvv-ops does not have",
        (
            "test_shim.py::test_sglang_does_not_take_the_stand_in_for_sgl_kernels_amx_build",
            "test_shim.py::test_a_real_sgl_kernel_keeps_sglangs_own_amx_check",
        ),
        riscv64_only=False,
    ),
    _env(
        "SGLANG_USE_CPU_ENGINE",
        "1",
        "no GPU on riscv64: SGLang's `is_cpu()` and platform discovery read it",
    ),
    _env(
        "USE_LIBUV",
        "0",
        "Debian's torch 2.6 has no libuv, and torch's TCP rendezvous (SGLang's scheduler "
        "initialises torch.distributed even for one process) asks for the libuv store",
    ),
    _patch(
        "wrap",
        sglang_checks.COMMON,
        "is_cpu",
        sglang_checks.wrap_is_cpu,
        "also true with `SGLANG_USE_CPU_ENGINE=1`",
        "SGLang's own `is_cpu()` accepts only x86-64 and arm64, and many modules evaluate "
        "it at import time",
        ("test_riscv64.py::test_is_cpu_patch",),
    ),
    _stand_in(
        "triton",
        "SGLang imports it unconditionally to define GPU kernels, none of which runs on "
        "the CPU engine; a stand-in kernel that is launched raises `StandInError`",
    ),
    _stand_in(
        "tvm_ffi",
        "SGLang imports it for its CUDA JIT kernels (apache-tvm-ffi is an sdist only)",
    ),
    _stand_in(
        "xgrammar",
        "SGLang's function-call parsers import it at module level (the detokenizer loads "
        "them); xgrammar is an sdist only. Grammar-constrained decoding through it is "
        "unavailable: the riscv64 platform defaults to `--grammar-backend none`",
    ),
    _patch(
        "add",
        "torch",
        "float8_e8m0fnu",
        torch_gaps.dtype_placeholder("float8_e8m0fnu", 1),
        _TORCH26,
        "SGLang's MoE and quantisation modules name the dtype (and its `itemsize`) at "
        "import; the placeholder equals no real dtype and cannot make a tensor",
        _TORCH_GAPS,
    ),
    _patch(
        "add",
        "torch",
        "float4_e2m1fn_x2",
        torch_gaps.dtype_placeholder("float4_e2m1fn_x2", 1),
        _TORCH26,
        "as `torch.float8_e8m0fnu`",
        _TORCH_GAPS,
    ),
    _patch(
        "wrap",
        "torch",
        "accelerator.current_accelerator",
        torch_gaps.current_accelerator,
        "torch's takes no `check_available` (torch 2.6)",
        "SGLang calls the torch 2.14 form `current_accelerator(check_available=...)`; "
        "torch 2.6's also raises when there is no accelerator",
        _TORCH_GAPS,
    ),
    _patch(
        "add",
        SYMBOLIC_SHAPES,
        "guard_or_false",
        torch_gaps.guard_or("guard_or_false", False),
        _TORCH26 + " (torch 2.7 API)",
        "SGLang's element-wise kernels module imports it; its MoE models import that "
        "module, and the HTTP server imports those. Same meaning: the boolean, or the "
        "default when it depends on data a tracer does not have",
        _GUARDS,
    ),
    _patch(
        "add",
        SYMBOLIC_SHAPES,
        "guard_or_true",
        torch_gaps.guard_or("guard_or_true", True),
        _TORCH26 + " (torch 2.7 API)",
        "as `guard_or_false`",
        _GUARDS,
    ),
)

ACTIVE: dict[str, str] = {}
"""What :func:`install` changed in this process: ``Gap.patched`` -> what was done and why."""

_installed = False


def enabled() -> bool:
    """False when ``SGLANG_RVV_SHIMS`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(ENV_OFF, "1").strip().lower() not in ("0", "false", "no", "off")


def riscv64() -> bool:
    """Whether the riscv64 rows apply: on a riscv64 CPU, or as ``SGLANG_RVV_RISCV64`` says
    (1/true/yes/on, 0/false/no/off)."""
    value = os.environ.get(ENV_RISCV64, "auto").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return platform.machine().lower() in ("riscv64", "riscv")


def _recording_patch(gap: Gap) -> Callable[[ModuleType], None]:
    assert gap.patch is not None
    patch = gap.patch

    def run(module: ModuleType) -> None:
        done = patch(module)
        if done:
            ACTIVE[gap.patched] = done

    run.__qualname__ = f"compat[{gap.patched}]"
    return run


def _recording_stand_in(gap: Gap) -> Callable[[str], importlib.machinery.ModuleSpec | None]:
    assert gap.stand_in is not None
    factory = gap.stand_in

    def spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
        found = factory(fullname)
        if found is not None:
            ACTIVE.setdefault(gap.patched, "stand-in: no real module installed")
        return found

    return spec


def install() -> None:
    """Applies the rows that hold here (once per process; nothing if :func:`enabled` is
    False)."""
    global _installed
    if _installed or not enabled():
        return
    _installed = True
    on_riscv64 = riscv64()
    for gap in GAPS:
        if gap.riscv64_only and not on_riscv64:
            continue
        if gap.kind == "env":
            if gap.target not in os.environ:
                os.environ[gap.target] = gap.value
                ACTIVE[gap.patched] = "was unset"
        elif gap.kind == "stand-in":
            FINDER.stand_in(gap.target, _recording_stand_in(gap))
        else:
            FINDER.after_import(gap.target, _recording_patch(gap))
    _finder.install()
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        from sglang_rvv.compat import quiet

        quiet.install()


def quiet_table() -> str:
    """The quieted SGLang messages (:mod:`.quiet`) as Markdown."""
    from sglang_rvv.compat import quiet

    rows = [
        "| message (start) | from | quieted | why it is harmless | test |",
        "|---|---|---|---|---|",
    ]
    for q in quiet.QUIET:
        how = "ignored" if q.kind == "warning" else "moved to DEBUG"
        rows.append(f"| `{q.message.strip()}` | `{q.source}` | {how} | {q.reason} | `{q.test}` |")
    return "\n".join(rows) + "\n"


def markdown_table(*, riscv64_only: bool = False) -> str:
    """The table as Markdown (the docs embed it; tests/test_compat.py checks they match)."""
    rows = [
        "| patched | how | where, when | why | test |",
        "|---|---|---|---|---|",
    ]
    for g in GAPS:
        if riscv64_only and not g.riscv64_only:
            continue
        tests = ", ".join(f"`{t}`" for t in g.tests)
        rows.append(
            f"| `{g.patched}` | {g.kind} | {g.where}: {g.condition} | {g.reason} | {tests} |"
        )
    return "\n".join(rows) + "\n"


__all__ = [
    "ACTIVE",
    "ENV_OFF",
    "ENV_RISCV64",
    "FINDER",
    "GAPS",
    "Gap",
    "enabled",
    "install",
    "markdown_table",
    "quiet_table",
    "riscv64",
    "stand_ins",
]
