"""tools/peers/build.py's pure parts: the sdist check, the cache key, the flags, the
assembler wrapper. Hermetic and fast: nothing is downloaded or built here (the build and the
driver under QEMU are checked by ``peers.build.selftest()``, which ``bench_peers.py --quick``
runs)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOOLS))

from peers import build  # noqa: E402


def test_check_sha256_names_file_and_digests(tmp_path: Path) -> None:
    f = tmp_path / "x.tar.gz"
    f.write_bytes(b"not the sdist")
    got = hashlib.sha256(b"not the sdist").hexdigest()
    with pytest.raises(RuntimeError) as err:
        build.check_sha256(f)
    msg = str(err.value)
    assert str(f) in msg and got in msg and build.SDIST_SHA256 in msg
    build.check_sha256(f, got)  # the right digest passes


def test_ensure_source_refuses_a_cached_tarball_with_another_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RVV_SGLANG_CACHE", str(tmp_path))
    sdist = tmp_path / "peers" / "sdist" / build.SDIST_FILE
    sdist.parent.mkdir(parents=True)
    sdist.write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="does not match the pinned"):
        build.ensure_source()
    assert not (tmp_path / "peers" / "src").exists()


def test_build_key_depends_on_target_and_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_rv, key_nat = build.build_key("riscv64"), build.build_key("native")
    assert key_rv != key_nat
    assert key_rv == build.build_key("riscv64")
    assert len(key_rv) == 16 and int(key_rv, 16) >= 0
    changed = tmp_path / "driver.cpp"
    changed.write_text(build.DRIVER_SRC.read_text() + "// changed\n")
    monkeypatch.setattr(build, "DRIVER_SRC", changed)
    assert build.build_key("riscv64") != key_rv


def test_cmake_args_riscv64() -> None:
    args = build.cmake_args("riscv64", Path("/src"), Path("/b"))
    for flag in (
        "-DGGML_RVV=ON",
        "-DGGML_RV_ZVFH=ON",
        "-DGGML_RV_ZFH=ON",
        "-DGGML_OPENMP=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_CPU_RISCV64_SPACEMIT=OFF",
        "-DCMAKE_C_COMPILER=clang-19",
        "-DCMAKE_SYSTEM_PROCESSOR=riscv64",
    ):
        assert flag in args, flag
    cflags = next(a for a in args if a.startswith("-DCMAKE_C_FLAGS="))
    cxxflags = next(a for a in args if a.startswith("-DCMAKE_CXX_FLAGS="))
    # C (ggml's inline assembly) goes through the GNU as wrapper; C++ keeps clang's assembler
    assert "-fno-integrated-as" in cflags and "-B/b/as-wrapper/" in cflags
    assert "-fno-integrated-as" not in cxxflags and "--target=riscv64-linux-gnu" in cxxflags
    assert any("-static" in a for a in args if a.startswith("-DCMAKE_EXE_LINKER_FLAGS="))


def test_cmake_args_native_has_no_cross_flags() -> None:
    args = build.cmake_args("native", Path("/src"), Path("/b"))
    assert "-DGGML_OPENMP=OFF" in args
    assert not any("riscv" in a.lower() for a in args)


@pytest.mark.parametrize("bad", ["x86", "", "RISCV64"])
def test_bad_target(bad: str) -> None:
    with pytest.raises(ValueError, match="target must be one of"):
        build.build_key(bad)  # type: ignore[arg-type]


def test_as_wrapper_drops_zvfh_only(tmp_path: Path) -> None:
    # a fake GNU as that records its arguments and the assembly it was given
    fake = tmp_path / "fake-as"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do echo "arg $a"; done\neval last=\\${$#}\ncat "$last"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    wrapper = tmp_path / "as"
    wrapper.write_text(build.as_wrapper(str(fake)))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    src = tmp_path / "x.s"
    src.write_text(
        '\t.attribute\t5, "rv64i2p1_m2p0_v1p0_zfh1p0_zvfh1p0_zvfhmin1p0_zvl128b1p0"\n'
        "\tvfwmacc.vv\tv8, v10, v11\n"
    )
    march = "rv64gcv_zfh_zvfh_zicbop_zihintpause"
    out = subprocess.run(
        [str(wrapper), "-mabi", "lp64d", "-march", march, "-o", "x.o", str(src)],
        capture_output=True, text=True, check=True, env={**os.environ},
    ).stdout  # fmt: skip
    assert "arg rv64gcv_zfh_zicbop_zihintpause" in out
    assert '"rv64i2p1_m2p0_v1p0_zfh1p0_zvl128b1p0"' in out
    assert "vfwmacc.vv\tv8, v10, v11" in out
    assert "zvfh" not in out
    assert src.read_text().count("zvfh") == 2  # the input file is left alone
