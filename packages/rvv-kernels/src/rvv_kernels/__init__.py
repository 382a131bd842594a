"""rvv-kernels: RVV 1.0 intrinsic kernels for LLM inference, as C++ sources.

This package ships the kernels' sources and their CMake build description; it
contains no compiled code and does not depend on torch. Consumers (rvv-ops)
build the kernels with their own toolchain, natively or cross for riscv64::

    find_package(rvv_kernels CONFIG REQUIRED
                 PATHS "${RVV_KERNELS_CMAKE_DIR}")  # = rvv_kernels.get_cmake_dir()
    target_link_libraries(my_target PRIVATE rvv_kernels::rvv_kernels)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "get_cmake_dir", "get_include", "get_source_dir"]
__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent


def get_source_dir() -> Path:
    """Directory holding the C++ sources (``include/``, ``kernels/``, ``runtime/``)."""
    return _HERE / "csrc"


def get_include() -> Path:
    """Directory to add to the include path for ``#include "rvvk/rvvk.h"``."""
    return get_source_dir() / "include"


def get_cmake_dir() -> Path:
    """Directory holding ``rvv_kernelsConfig.cmake``, for ``find_package(rvv_kernels)``."""
    return _HERE / "cmake"
