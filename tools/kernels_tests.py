"""Builds rvv-kernels' C++ test driver natively and for riscv64, and runs it.

The riscv64 build holds every variant (portable, rvv, rvv_zvfh). Each QEMU run tests the
variants whose behaviour that emulated CPU adds (``RVVK_TEST_VARIANTS``): portable (rv64gc,
no vector instruction, so the same at every VLEN) once, rvv at every VLEN, rvv_zvfh with
Zvfh at VLEN 256, and at VLEN 128 and 512 only the tests of the kernels with Zvfh code of
their own (int4 and fp8 linear): the portable variant's results do not depend on VLEN, so
testing it at every VLEN would only repeat its (slowest) runs. The extend cases sized for
the x86_amx tiles run at VLEN 256 only (``AMX_SIZED``). Each run prints one summary line
such as
``RVV vlen=256 zvfh=off: 36 passed, 0 failed``.

The attention tests take their cases, inputs and expected outputs from the conformance
suite (``tests/conformance/kernel_cases.py``, which needs torch): they are written once into
``<build-dir>/attention-cases`` and every run reads them there (``RVVK_CASES_DIR``; QEMU
user mode sees the host's files).

Usage: python tools/kernels_tests.py [--native-only] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # conformance

import rvvtools

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "packages" / "rvv-kernels"

# (VLEN, Zvfh, variants tested, test-name filters: any of them, () for all; "-name"
# excludes) of the runs under QEMU 10.
ZVFH_KERNEL_TESTS = ("int4_", "fp8_")
# The bf16 extend cases sized for the x86_amx variant's tiles (a third of an RVV run's time
# under QEMU): the RVV variants run their usual extend path on them, which the other extend
# groups cover at every VLEN, so they run at VLEN 256 only.
AMX_SIZED = "-extend_attention_bf16_blocks"
QEMU_RUNS: list[tuple[int, bool, str, tuple[str, ...]]] = [
    (128, False, "portable,rvv", (AMX_SIZED,)),
    (256, False, "rvv", ()),
    (512, False, "rvv", (AMX_SIZED,)),
    (1024, False, "rvv", (AMX_SIZED,)),
    (256, True, "rvv_zvfh", (AMX_SIZED,)),
    (128, True, "rvv_zvfh", ZVFH_KERNEL_TESTS),
    (512, True, "rvv_zvfh", ZVFH_KERNEL_TESTS),
]


def build(build_dir: Path, toolchain: Path | None) -> Path:
    """Configures and builds the test driver; returns its path."""
    cmd = [
        "cmake",
        "-S",
        str(KERNELS),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    if toolchain is not None:
        cmd.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
    subprocess.run(cmd, check=True)
    subprocess.run(["cmake", "--build", str(build_dir)], check=True)
    return build_dir / "rvvk_tests"


def write_cases(out_dir: Path) -> None:
    """Writes the attention case files (conformance.kernel_cases) into out_dir."""
    # Imported here: the module needs torch, which bench_kernels.py (importing build() from
    # this file) does not install.
    from conformance import kernel_cases

    start = time.monotonic()
    counts = kernel_cases.write_all(out_dir)
    print(
        f"--- attention cases: {sum(counts.values())} files in {out_dir} "
        f"in {time.monotonic() - start:.1f} s",
        flush=True,
    )


def run(label: str, cmd: list[str], cases: Path, variants: str = "") -> bool:
    """Runs one test binary invocation on the case files in `cases` (testing only `variants`,
    comma-separated, if given), then echoes its output; True when it passed."""
    start = time.monotonic()
    env = {**os.environ, "RVVK_TEST_VARIANTS": variants, "RVVK_CASES_DIR": str(cases)}
    result = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    print(
        f"--- {label}: {' '.join(cmd)}\n{result.stdout}"
        f"--- {label}: exit {result.returncode} in {time.monotonic() - start:.1f} s",
        flush=True,
    )
    return result.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native-only", action="store_true", help="skip the riscv64 build")
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=ROOT / "build" / "kernels",
        help="where to build (default: build/kernels)",
    )
    args = parser.parse_args(argv)

    cases = args.build_dir / "attention-cases"
    write_cases(cases)
    results: list[tuple[str, bool]] = []
    native = build(args.build_dir / "native", None)
    results.append(("native", run("native", [str(native)], cases)))

    if not args.native_only:
        rvvtools.provision(["toolchain", "qemu10"])
        cross = build(args.build_dir / "riscv64", rvvtools.toolchain_file())
        # One emulator per core: the runs are single-threaded and independent.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            futures = []
            for vlen, zvfh, variants, filters in QEMU_RUNS:
                label = f"qemu10 vlen={vlen} zvfh={'on' if zvfh else 'off'} ({variants})"
                if filters:
                    label += f" [{' '.join(filters)}]"
                cmd = [*rvvtools.qemu_cmd(vlen, zvfh), str(cross), *filters]
                futures.append((label, pool.submit(run, label, cmd, cases, variants)))
            results += [(label, f.result()) for label, f in futures]

    return summarise("kernels-tests", results)


def summarise(name: str, results: list[tuple[str, bool]]) -> int:
    """Prints how many of the labelled runs passed (naming the failed ones); the exit code."""
    failed = [label for label, ok in results if not ok]
    print(
        f"{name}: {len(results) - len(failed)} runs passed, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
