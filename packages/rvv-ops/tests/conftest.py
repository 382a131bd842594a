"""Shared options and fixtures of rvv-ops' tests.

``--rvv-ops-lengths=quick`` (or ``RVV_OPS_TEST_LENGTHS=quick``) runs the reference
comparisons on a subset of row lengths, for slow runs under emulation; the header and
the summary of the run say so. It also runs each mixture-of-experts reference shape in one
activation dtype, rotating over the shapes, which ``--rvv-ops-moe-dtypes=rotate`` (or
``RVV_OPS_TEST_MOE_DTYPES=rotate``) asks for alone. ``RVV_OPS_TEST_PYTHON`` is the command
(shell syntax) that starts a fresh Python for the subprocess tests: under qemu-user the emulated
Python cannot exec ``sys.executable`` itself, so tools/ops_riscv.py passes the QEMU
command line.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator

import pytest
import rvv_ops
from conformance.fixtures import active_variant

# Row lengths around the ones that matter: 1-3 (shorter than any vector), a prime, one
# below / at / above a power of two (vector tails at every VLEN and LMUL), SGLang-sized
# hidden dimensions.
ROW_LENGTHS = {
    "full": (1, 2, 3, 17, 255, 256, 257, 1536, 4095, 8192),
    "quick": (1, 3, 17, 256, 257, 4095),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rvv-ops-lengths",
        choices=sorted(ROW_LENGTHS),
        default=os.environ.get("RVV_OPS_TEST_LENGTHS", "full"),
        help="row lengths for the reference comparisons: full, or the quick subset "
        "(default: $RVV_OPS_TEST_LENGTHS or full)",
    )
    parser.addoption(
        "--rvv-ops-moe-dtypes",
        choices=("all", "rotate"),
        default=os.environ.get("RVV_OPS_TEST_MOE_DTYPES"),
        help="the MoE reference shapes in every dtype (all) or each in one, rotating "
        "(default: $RVV_OPS_TEST_MOE_DTYPES, else rotate with the quick lengths, all with "
        "the full ones)",
    )


def _moe_rotate(config: pytest.Config) -> bool:
    choice = config.getoption("--rvv-ops-moe-dtypes")
    if choice is None:
        return bool(config.getoption("--rvv-ops-lengths") == "quick")
    return bool(choice == "rotate")


def _lengths(config: pytest.Config) -> tuple[int, ...]:
    return ROW_LENGTHS[str(config.getoption("--rvv-ops-lengths"))]


def pytest_report_header(config: pytest.Config) -> list[str]:
    info = rvv_ops.build_info()
    cpu = info["cpu"]
    choice = config.getoption("--rvv-ops-lengths")
    return [
        f"rvv-ops {info['version']} for {info['target_arch']}, built against torch "
        f"{info['torch_version']}; variants compiled {info['compiled_variants']}, "
        f"supported {info['supported_variants']}, active {info['active_variant']}",
        f"cpu: has_v={cpu['has_v']} vlen={cpu['vlen']} zvfh={cpu['zvfh']} "
        f"zvfhmin={cpu['zvfhmin']} (from {cpu['source']})",
        f"row lengths ({choice}): {list(_lengths(config))}"
        + ("" if choice == "full" else f"; full set: {list(ROW_LENGTHS['full'])}"),
        "MoE reference shapes: "
        + ("each in one dtype, rotating" if _moe_rotate(config) else "in every dtype"),
    ]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if config.getoption("--rvv-ops-lengths") != "full":
        left_out = sorted(set(ROW_LENGTHS["full"]) - set(_lengths(config)))
        terminalreporter.write_line(
            f"rvv-ops: quick row-length set; lengths {left_out} were not compared "
            "(--rvv-ops-lengths=full runs them)",
            yellow=True,
        )
    moe = config.stash.get(_MOE_LEFT_OUT, 0)
    if moe:
        terminalreporter.write_line(
            f"rvv-ops: {moe} MoE reference cases in other dtypes of shapes that ran in one "
            "dtype were not run (--rvv-ops-moe-dtypes=all runs them)",
            yellow=True,
        )


# The mixture-of-experts reference tests (test_moe.py, test_moe_routing.py) take every shape
# in every dtype; the quick set runs each shape in one dtype, rotating over the shapes.
MOE_FILES = ("test_moe.py", "test_moe_routing.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _moe_rotate(config):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.name in MOE_FILES and "dtype" in params:
            others = "-".join(str(v) for k, v in sorted(params.items()) if k != "dtype")
            dtypes = ("torch.float32", "torch.bfloat16", "torch.float16")
            turn = sum(others.encode()) % len(dtypes)
            if str(params["dtype"]) != dtypes[turn]:
                left_out.append(item)
                continue
        kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
        config.stash[_MOE_LEFT_OUT] = len(left_out)


_MOE_LEFT_OUT = pytest.StashKey[int]()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cols" in metafunc.fixturenames:
        metafunc.parametrize("cols", _lengths(metafunc.config))
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", rvv_ops.build_info()["supported_variants"], indirect=True)


@pytest.fixture
def variant(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test with every kernel on one variant, then restores the previous one."""
    with active_variant(str(request.param)) as name:
        yield name


@pytest.fixture(scope="session")
def python_cmd() -> list[str]:
    """Command that starts a fresh Python like the one running the tests."""
    env = os.environ.get("RVV_OPS_TEST_PYTHON")
    return shlex.split(env) if env else [sys.executable]
