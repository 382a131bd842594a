"""sgl-kernel's CPU tensor-parallel ops, on ``torch.distributed``, for the ``sgl_kernel`` stand-in.

sgl-kernel's CPU build gives SGLang 0.5.23 four ops for tensor parallelism on CPUs, which its
start-up (``sglang.srt.distributed.bootstrap``) and its ``GroupCoordinator`` call on hosts it
takes for sgl-kernel's (an Intel AMX CPU or an arm64 one):

- ``init_cpu_threads_env(str cpu_ids) -> str``: binds this rank's threads to its cores;
- ``initialize(int size, int rank) -> ()``: the number of local ranks and this one's rank;
- ``shm_allreduce(Tensor(a!) data, int reduce_op) -> ()``: sums ``data`` over the ranks, in
  place;
- ``shm_allgather(Tensor data, int dim) -> Tensor``: the ranks' ``data`` concatenated along
  ``dim`` in rank order.

sgl-kernel implements the two collectives in shared memory. Here they run on
``torch.distributed``'s default process group (SGLang's world group, ``gloo`` on CPUs, created
after ``initialize`` and before the first collective), which must have ``size`` ranks with this
process as ``rank``. :func:`register` defines them as ``torch.ops.sgl_kernel.*`` (CPU and Meta
kernels) unless something already defined them. Bad input raises ValueError or RuntimeError
naming the argument, its value and what is expected.
"""

from __future__ import annotations

import os
from typing import Any, cast

import torch
import torch.distributed as dist

NAMESPACE = "sgl_kernel"
SCHEMAS = {
    "init_cpu_threads_env": "init_cpu_threads_env(str cpu_ids) -> str",
    "initialize": "initialize(int size, int rank) -> ()",
    "shm_allreduce": "shm_allreduce(Tensor(a!) data, int reduce_op) -> ()",
    "shm_allgather": "shm_allgather(Tensor data, int dim) -> Tensor",
}
"""The ops' schemas, as SGLang 0.5.23 calls them."""

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The dtypes the collectives take (those SGLang sends to them: ``is_shm_available``)."""

REDUCE_OP_SUM = int(cast(Any, dist.ReduceOp.SUM))
"""The one ``reduce_op`` accepted (sgl-kernel's shared-memory all-reduce only sums)."""

_state: dict[str, int] = {}


def parse_cpu_ids(cpu_ids: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]`` (SGLang's ``SGLANG_CPU_OMP_THREADS_BIND`` entries)."""
    cpus: list[int] = []
    for part in cpu_ids.split(","):
        part = part.strip()
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError(
                f"init_cpu_threads_env: cpu_ids={cpu_ids!r}: expected comma-separated core "
                "numbers and ranges such as '0-3,8'"
            )
        lo, hi = int(first), int(last) if sep else int(first)
        if hi < lo:
            raise ValueError(f"init_cpu_threads_env: cpu_ids={cpu_ids!r}: range {part!r} is empty")
        cpus.extend(range(lo, hi + 1))
    return sorted(set(cpus))


def init_cpu_threads_env(cpu_ids: str) -> str:
    """Binds this process to the cores ``cpu_ids`` (``"0-3,8"``) and sizes torch's intra-op
    thread pool to them; returns a line saying so. sgl-kernel pins each OpenMP thread to one
    core; this pins the process to the set, and torch's pool to its size."""
    cpus = parse_cpu_ids(cpu_ids)
    allowed = sorted(os.sched_getaffinity(0))
    missing = [c for c in cpus if c not in allowed]
    if missing:
        raise ValueError(
            f"init_cpu_threads_env: cpu_ids={cpu_ids!r} names cores {missing} this process "
            f"cannot run on: expected a subset of {allowed}"
        )
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(len(cpus))
    return f"pid {os.getpid()}: bound to cores {cpus}, {len(cpus)} torch threads"


def initialize(size: int, rank: int) -> None:
    """Records the number of ranks ``size`` and this process's ``rank`` (checked against the
    default process group at the first collective)."""
    if size < 1:
        raise ValueError(f"initialize: size={size}: expected at least 1 rank")
    if not 0 <= rank < size:
        raise ValueError(f"initialize: rank={rank}: expected 0 <= rank < size={size}")
    _state.update(size=size, rank=rank)


def _check_group(op: str) -> None:
    if not _state:
        raise RuntimeError(
            f"{op}: torch.ops.sgl_kernel.initialize(size, rank) has not been called in this process"
        )
    if not dist.is_initialized():
        raise RuntimeError(
            f"{op}: torch.distributed is not initialized: the collective runs on its default "
            "process group (SGLang creates it at start-up)"
        )
    size, rank = dist.get_world_size(), dist.get_rank()
    if (size, rank) != (_state["size"], _state["rank"]):
        raise RuntimeError(
            f"{op}: initialize(size={_state['size']}, rank={_state['rank']}) does not match "
            f"torch.distributed's default group (world size {size}, rank {rank})"
        )


def _check_tensor(op: str, data: torch.Tensor) -> None:
    if data.device.type != "cpu":
        raise ValueError(f"{op}: data is on {data.device}: expected a CPU tensor")
    if data.dtype not in DTYPES:
        raise ValueError(
            f"{op}: data has dtype {data.dtype}: expected one of "
            f"{', '.join(str(d) for d in DTYPES)}"
        )


def shm_allreduce(data: torch.Tensor, reduce_op: int) -> None:
    """Sums ``data`` over the ranks, in place (``reduce_op`` must be ``ReduceOp.SUM``)."""
    if reduce_op != REDUCE_OP_SUM:
        raise ValueError(
            f"shm_allreduce: reduce_op={reduce_op}: expected {REDUCE_OP_SUM} "
            "(torch.distributed.ReduceOp.SUM), the only reduction supported"
        )
    _check_tensor("shm_allreduce", data)
    _check_group("shm_allreduce")
    if data.is_contiguous():
        dist.all_reduce(data, op=dist.ReduceOp.SUM)
    else:
        buffer = data.contiguous()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        data.copy_(buffer)


def _gathered_shape(op: str, data: torch.Tensor, dim: int, size: int) -> tuple[int, list[int]]:
    if data.dim() == 0:
        raise ValueError(f"{op}: data is 0-dimensional: expected at least 1 dimension")
    if not -data.dim() <= dim < data.dim():
        raise ValueError(
            f"{op}: dim={dim}: expected -{data.dim()} <= dim < {data.dim()} for data of shape "
            f"{tuple(data.shape)}"
        )
    dim %= data.dim()
    shape = list(data.shape)
    shape[dim] *= size
    return dim, shape


def shm_allgather(data: torch.Tensor, dim: int) -> torch.Tensor:
    """The ranks' ``data`` (the same shape on every rank) concatenated along ``dim``, in rank
    order."""
    _check_tensor("shm_allgather", data)
    _check_group("shm_allgather")
    dim, _ = _gathered_shape("shm_allgather", data, dim, _state["size"])
    parts = [
        torch.empty_like(data, memory_format=torch.contiguous_format) for _ in range(_state["size"])
    ]
    dist.all_gather(parts, data.contiguous())
    return torch.cat(parts, dim)


def _allreduce_meta(data: torch.Tensor, reduce_op: int) -> None:
    return None


def _allgather_meta(data: torch.Tensor, dim: int) -> torch.Tensor:
    size = _state.get("size", 1)
    _, shape = _gathered_shape("shm_allgather", data, dim, size)
    return data.new_empty(shape)


_LIBRARY: torch.library.Library | None = None


def _defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"{NAMESPACE}::{name}", "")
    except RuntimeError:
        return False
    return True


def register() -> tuple[str, ...]:
    """Defines the ops of :data:`SCHEMAS` not yet defined in this process (idempotent);
    returns the names it defined."""
    global _LIBRARY
    todo = [name for name in SCHEMAS if not _defined(name)]
    if not todo:
        return ()
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    kernels = {
        "init_cpu_threads_env": ((init_cpu_threads_env, "CompositeExplicitAutograd"),),
        "initialize": ((initialize, "CompositeExplicitAutograd"),),
        "shm_allreduce": ((shm_allreduce, "CPU"), (_allreduce_meta, "Meta")),
        "shm_allgather": ((shm_allgather, "CPU"), (_allgather_meta, "Meta")),
    }
    for name in todo:
        _LIBRARY.define(SCHEMAS[name])  # type: ignore[no-untyped-call]
        for fn, key in kernels[name]:
            _LIBRARY.impl(name, fn, key)  # type: ignore[no-untyped-call]
    return tuple(todo)
