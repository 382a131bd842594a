"""Tensor parallelism (``--tp-size N``) of SGLang's CPU engine with sglang-rvv.

SGLang 0.5.23 runs one scheduler process per rank; the ranks' attention heads and linear
layers are split by SGLang itself (the ``rvv`` backend reads each layer's per-rank head counts;
routed linears pack each rank's own shard). Three things stand in the way on a CPU host
without sgl-kernel's CPU build (a RISC-V board, or x86 with sglang-rvv's ``sgl_kernel``
stand-in), fixed here through SGLang's plugin ``HookRegistry`` (registered by
:func:`register`, in every SGLang process):

- SGLang builds a PyNccl communicator for each model-parallel group on its in-tree CPU
  platform whenever the caller does not choose (``use_pynccl`` defaults to "not NPU/XPU").
  With a CUDA-enabled torch build NCCL loads and the communicator then fails with "Expected a
  cuda device, but got: cpu". :func:`no_pynccl_on_cpu` turns ``use_pynccl`` off for groups on
  the CPU device; their all-reduce and all-gather then run on torch.distributed (gloo).
- With more ranks than NUMA nodes SGLang refuses to start unless
  ``SGLANG_CPU_OMP_THREADS_BIND`` lists each rank's cores. :func:`default_threads_bind`
  splits this process's cores evenly among the ranks; :func:`threads_binding` sets it (and
  logs it) when the user did not, and ``python -m sglang_rvv.serve`` sets it before the
  server starts and prints it.
- SGLang binds a rank's threads to its cores only through sgl-kernel's
  ``init_cpu_threads_env``, and only on hosts it takes for sgl-kernel's (Intel AMX, arm64).
  Elsewhere every rank would run torch's default thread count over all the cores.
  :func:`cpu_threads_env` binds the rank's process to its cores and sizes torch's thread pool
  to them there (:func:`sglang_rvv.compat.collectives.init_cpu_threads_env`).

- With ``tp_size > 1`` SGLang's vocabulary-parallel embedding masks the token ids through a
  ``torch.compile``-d helper (``get_masked_input_and_mask``, inductor backend), which needs a
  C++ compiler and Python's build tools at the first request. Debian's riscv64 torch runs on
  boards without them (the emulated root has neither): :func:`masked_input` then runs the
  helper's own Python code uncompiled (same integer results), and logs that once.

This module imports only the standard library at load (``serve`` uses it before SGLang runs).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from sglang_rvv import hooks

logger = logging.getLogger("sglang_rvv")

BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
NUMA_NODES = Path("/sys/devices/system/node")


def numa_node_count(root: Path = NUMA_NODES) -> int:
    """The host's NUMA nodes (``/sys/devices/system/node/node*``; 1 where that is absent)."""
    try:
        nodes = [p for p in root.iterdir() if p.name[4:].isdigit() and p.name.startswith("node")]
    except OSError:
        return 1
    return max(1, len(nodes))


def default_threads_bind(ranks: int, cpus: Sequence[int] | None = None) -> str:
    """A ``SGLANG_CPU_OMP_THREADS_BIND`` value that splits ``cpus`` (default: the cores this
    process may run on) into ``ranks`` contiguous groups, as evenly as they divide (the first
    groups get one core more). With fewer cores than ranks, ranks share cores round-robin."""
    if ranks < 1:
        raise ValueError(f"default_threads_bind: ranks={ranks}: expected at least 1")
    pool = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if not pool:
        raise ValueError("default_threads_bind: cpus is empty: expected at least one core")
    if len(pool) < ranks:
        groups = [[pool[r % len(pool)]] for r in range(ranks)]
    else:
        base, extra = divmod(len(pool), ranks)
        groups, start = [], 0
        for r in range(ranks):
            n = base + (1 if r < extra else 0)
            groups.append(pool[start : start + n])
            start += n
    return "|".join(",".join(str(c) for c in g) for g in groups)


def bind_needed(ranks: int, environ: Mapping[str, str] | None = None) -> bool:
    """True when SGLang would refuse ``ranks`` ranks: more ranks than NUMA nodes and no
    ``SGLANG_CPU_OMP_THREADS_BIND``."""
    env = os.environ if environ is None else environ
    return ranks > numa_node_count() and not env.get(BIND_ENV)


def set_default_bind(ranks: int, environ: MutableMapping[str, str]) -> str | None:
    """Sets ``SGLANG_CPU_OMP_THREADS_BIND`` in ``environ`` to :func:`default_threads_bind`
    when :func:`bind_needed`; returns the value set, or None."""
    if not bind_needed(ranks, environ):
        return None
    environ[BIND_ENV] = default_threads_bind(ranks)
    return environ[BIND_ENV]


# ------------------------------------------------------------------------------------- hooks


CUDA_COMMUNICATORS = ("use_pynccl", "use_custom_allreduce")
"""``GroupCoordinator`` flags turned off for groups on the CPU: PyNccl and the custom
all-reduce (CUDA IPC buffers; on the CPU SGLang tries it, fails and logs a warning)."""


def no_pynccl_on_cpu(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND ``GroupCoordinator.__init__``: :data:`CUDA_COMMUNICATORS` off for a group on
    the CPU."""
    from sglang.srt.distributed import parallel_state

    bound = inspect.signature(original).bind(*args, **kwargs)
    local_rank = bound.arguments.get("local_rank", 0)
    if parallel_state._group_coordinator_device(local_rank).type == "cpu":
        for flag in CUDA_COMMUNICATORS:
            if bound.arguments.get(flag):
                bound.arguments[flag] = False
    return original(*bound.args, **bound.kwargs)


def threads_binding(*, numa_index: int, world_size: int) -> None:
    """BEFORE ``numa_utils.init_threads_binding``: sets ``SGLANG_CPU_OMP_THREADS_BIND`` to
    :func:`default_threads_bind` when SGLang would otherwise refuse ``world_size`` ranks."""
    value = set_default_bind(world_size, os.environ)
    if value is None:
        return None
    logger.warning(
        "sglang-rvv: %d ranks on %d NUMA node(s) and %s unset: set it to %r (this process's "
        "cores split evenly among the ranks; set it yourself to choose)",
        world_size,
        numa_node_count(),
        BIND_ENV,
        value,
    )
    return None


def cpu_threads_env(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND ``bootstrap._init_cpu_threads_env``: where SGLang does not bind the rank's
    threads (no AMX, not arm64), binds them to the rank's cores itself, then runs SGLang's."""
    from sglang.srt.distributed import bootstrap

    bound = inspect.signature(original).bind(*args, **kwargs)
    cpuids = bound.arguments.get("local_omp_cpuid")
    sglang_binds = bool(getattr(bootstrap, "_is_cpu_amx_available", False)) or bool(
        getattr(bootstrap, "_is_cpu_arm64", False)
    )
    parallel = bootstrap.get_parallel()
    ranks = parallel.dp_size * parallel.tp_size * parallel.pp_size
    if cpuids and not sglang_binds and ranks > 1:
        from sglang_rvv.compat import collectives

        logger.info("sglang-rvv: %s", collectives.init_cpu_threads_env(str(cpuids)))
    return original(*bound.args, **bound.kwargs)


_compile_failed: list[str] = []
"""Why SGLang's compiled helper could not be compiled in this process (empty: it could)."""


def masked_input(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND ``vocab_parallel_embedding.get_masked_input_and_mask`` (``torch.compile``-d):
    when compiling it fails (inductor without a usable C++ compiler or its build tools), its
    own Python code runs uncompiled from then on in this process. Errors of the function
    itself are not hidden: the uncompiled call raises them again."""
    eager = getattr(original, "_torchdynamo_orig_callable", None)
    if eager is None:
        return original(*args, **kwargs)
    if not _compile_failed:
        try:
            return original(*args, **kwargs)
        except Exception as exc:  # any compile failure; the eager call re-raises real errors
            result = eager(*args, **kwargs)
            first_line = (str(exc).splitlines() or [""])[0][:200]
            _compile_failed.append(f"{type(exc).__name__}: {first_line}")
            logger.warning(
                "sglang-rvv: torch.compile could not build SGLang's get_masked_input_and_mask "
                "(vocabulary-parallel embedding; %s): it runs uncompiled",
                _compile_failed[0],
            )
            return result
    return eager(*args, **kwargs)


_PS = "sglang.srt.distributed.parallel_state."
HOOKS: tuple[hooks.Hook, ...] = (
    (_PS + "GroupCoordinator.__init__", no_pynccl_on_cpu, "AROUND"),
    ("sglang.srt.utils.numa_utils.init_threads_binding", threads_binding, "BEFORE"),
    ("sglang.srt.distributed.bootstrap._init_cpu_threads_env", cpu_threads_env, "AROUND"),
    (
        "sglang.srt.layers.vocab_parallel_embedding.get_masked_input_and_mask",
        masked_input,
        "AROUND",
    ),
)
"""(target, hook, HookType name) registered by :func:`register`."""


def register() -> None:
    """Registers :data:`HOOKS` with SGLang (idempotent; every SGLang process)."""
    hooks.register_once(__name__, HOOKS)
