"""Loading rvv_ops/_C.so safely, and the introspection ops it defines."""

from __future__ import annotations

import importlib
import json
import os
import platform
from pathlib import Path
from types import ModuleType
from typing import TypedDict, cast

import torch

LIBRARY = Path(__file__).resolve().with_name("_C.so")


class CpuInfo(TypedDict):
    """The running CPU's vector features, detected at run time by rvv-kernels."""

    has_v: bool
    vlen: int
    zvfh: bool
    zvfhmin: bool
    zvfbfmin: bool
    avx2: bool
    """x86-64: AVX2, FMA and F16C usable (the ``x86_avx2`` variant can run)."""
    avx512: bool
    """x86-64: AVX-512 F/BW/VL/DQ usable (the ``x86_avx512`` variant can run)."""
    avx512_bf16: bool
    """x86-64: those and AVX512-BF16 (the ``x86_avx512_bf16`` variant can run)."""
    amx_bf16: bool
    """x86-64: AMX tiles with bf16 and AVX512-BF16 usable, tile data allowed to this
    process (the ``x86_amx`` variant can run)."""
    source: str


class BuildInfo(TypedDict):
    """What ``build_info()`` returns."""

    version: str
    """rvv-ops' version."""
    target_arch: str
    """The machine the library was compiled for (``platform.machine()`` there)."""
    torch_version: str
    """The torch version whose headers the library was compiled against."""
    compiled_variants: list[str]
    """rvv-kernels variants compiled in, least capable first."""
    supported_variants: list[str]
    """The compiled variants this CPU can run."""
    active_variant: str
    """The variant the kernels dispatch to now."""
    variant_error: str
    """Why ``RVVK_VARIANT`` could not be honoured; empty when it was (or is unset)."""
    decode_kv_heads_per_task: int
    """KV heads one stage-1 task of the split-KV decode covers (rvv-kernels'
    ``kDecodeKvHeadsPerTask``): the decode runs ``batch * ceil(kv_heads / this) *
    num_splits`` tasks, which a caller choosing ``num_splits`` needs to know."""
    cpu: CpuInfo


def load_library() -> None:
    """Loads _C.so once, after checking that it fits this process.

    Raises ImportError if the library was built for another machine or torch
    version, if another library already defines one of its ops, or if
    ``RVVK_VARIANT`` names a kernel variant that cannot be used.
    """
    info = _generated()
    check_build_matches(str(info.TORCH_VERSION), str(info.TARGET_ARCH))
    if os.path.realpath(LIBRARY) not in torch.ops.loaded_libraries:
        _check_no_existing_definitions()
        torch.ops.load_library(str(LIBRARY))  # type: ignore[no-untyped-call]
    error = build_info()["variant_error"]
    if error:
        raise ImportError(
            f"rvv_ops: {error}; rvv_ops does not run with a variant other than the one "
            "requested. Unset RVVK_VARIANT or set it to one of the supported variants: "
            f"{', '.join(build_info()['supported_variants'])}."
        )


def check_build_matches(built_torch: str, built_arch: str) -> None:
    """ImportError unless a library built for `built_arch` against torch `built_torch` fits
    this machine and the installed torch (same major.minor: torch's C++ ABI changes between
    minor versions)."""
    machine = platform.machine()
    if built_arch != machine:
        raise ImportError(
            f"rvv_ops: {LIBRARY} was built for {built_arch}, but this machine is {machine}. "
            f"Install the rvv-ops wheel built for {machine}."
        )
    if _major_minor(built_torch) != _major_minor(torch.__version__):
        raise ImportError(
            f"rvv_ops: {LIBRARY} was built against torch {built_torch}, but torch "
            f"{torch.__version__} is installed; torch's C++ ABI changes between minor versions. "
            "Rebuild rvv-ops against this torch "
            "(`pip install --no-build-isolation --force-reinstall --no-deps packages/rvv-ops`) "
            f"or install torch {_major_minor(built_torch)}.x."
        )


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _generated() -> ModuleType:
    """rvv_ops/_build_info.py, which the build generates next to _C.so."""
    try:
        return importlib.import_module("rvv_ops._build_info")
    except ModuleNotFoundError:
        raise ImportError(
            f"rvv_ops: {LIBRARY.parent / '_build_info.py'} is missing: this is a source tree, "
            "not a built package. Install it with "
            "`pip install --no-build-isolation packages/rvv-ops`."
        ) from None


def defined_ops() -> tuple[str, ...]:
    """Every op _C.so defines ("sgl_kernel::rmsnorm_cpu", ...): the names of csrc/ops.def,
    which the build writes into _build_info.py."""
    return tuple(str(name) for name in _generated().DEFINED_OPS)


def _check_no_existing_definitions() -> None:
    # A definition that already exists when the library loads makes torch throw inside its
    # static initializers, which aborts the process.
    for name in defined_ops():
        try:
            handle = torch._C._dispatch_find_schema_or_throw(name, "")
        except RuntimeError:
            continue
        raise ImportError(
            f"rvv_ops: the op {name} is already defined in this process ({handle.debug()}), "
            "by another library: a CUDA or CPU build of sgl-kernel, or a second copy of rvv-ops. "
            f"Loading {LIBRARY} as well would abort the process, so it was not loaded. "
            "Use one provider of SGLang's sgl_kernel CPU ops per process."
        )


def build_info() -> BuildInfo:
    """Describes the build and the running CPU.

    Returns a dict with the rvv-ops ``version``, the ``target_arch`` and
    ``torch_version`` the library was built for, the rvv-kernels variants
    (``compiled_variants``, ``supported_variants`` by this CPU, ``active_variant``),
    ``variant_error`` (why ``RVVK_VARIANT`` was not honoured, else empty),
    ``decode_kv_heads_per_task`` (KV heads per stage-1 task of the decode) and
    ``cpu`` (``has_v``, ``vlen`` in bits, ``zvfh``, ``zvfhmin``, ``zvfbfmin``, ``avx2``,
    ``avx512``, ``avx512_bf16`` and ``amx_bf16`` on x86-64, and the ``source`` the extension
    bits came from).
    """
    from rvv_ops import __version__

    native = json.loads(torch.ops.rvv_ops.build_info.default())
    return cast(
        BuildInfo,
        {"version": __version__, "target_arch": str(_generated().TARGET_ARCH), **native},
    )


def set_variant(name: str) -> None:
    """Switches every kernel to the rvv-kernels variant ``name`` (process-wide).

    For tests and benchmarks; by default the best variant the CPU supports runs.
    Raises ValueError unless ``name`` is in ``build_info()["supported_variants"]``.
    """
    torch.ops.rvv_ops.set_variant.default(name)
