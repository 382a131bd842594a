#!/usr/bin/env bash
# Installs SGLang 0.5.23 with the RVV backend on a Debian 13 (trixie) riscv64 machine, e.g. a
# Banana Pi BPI-F3 (SpacemiT K1). Run from a clone of this repository, on the board:
#
#     tools/install-riscv64.sh [--venv DIR] [--wheels DIR]
#
#   --venv DIR    where to create the Python environment (default ~/.venvs/sglang-rvv)
#   --wheels DIR  take rvv-ops' riscv64 wheel from DIR (built on an x86 machine by
#                 `nox -s wheels-riscv64`, dist/) instead of compiling it here
#
# Steps (each is idempotent):
#  1. apt-get install Debian's python3-torch (2.6: the only riscv64 torch), its libtorch-dev
#     and a compiler (to build rvv-ops), and packages/sglang-rvv/requirements/riscv64-debian.txt
#     (what PyPI has no riscv64 wheel of). Needs sudo.
#  2. a venv with --system-site-packages (torch, numpy and those come from Debian);
#  3. pip install --no-deps of requirements/riscv64-pip.txt (PyPI: pure-Python and riscv64
#     wheels, the versions SGLang was tested with);
#  4. SGLang 0.5.23 as a pure-Python wheel (tools/sglang_riscv64.py sglang-wheel: PyPI's x86-64
#     wheel without its Rust extension modules), --no-deps (its metadata pulls CUDA packages);
#  5. rvv-kernels, rvv-ops (compiled here with clang against Debian's libtorch, or --wheels),
#     rvv-attention and sglang-rvv. sglang-rvv's start-up hook then supplies what SGLang lacks
#     on riscv64 (see docs/riscv64.md).
# It finishes by printing the commands that check the install and start a server.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
VENV=${HOME}/.venvs/sglang-rvv
WHEELS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --venv) VENV=$2; shift 2 ;;
        --wheels) WHEELS=$(cd "$2" && pwd); shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) echo "unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

log() { printf '[install-riscv64] %s\n' "$*"; }
die() { printf '[install-riscv64] ERROR: %s\n' "$*" >&2; exit 1; }

machine=$(uname -m)
[ "$machine" = riscv64 ] || log "warning: this is $machine, not riscv64: the result will not run here"
if [ -r /etc/os-release ]; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ "$codename" = trixie ] || log "warning: written for Debian 13 (trixie); this is '$codename'"
fi

REQ=$REPO/packages/sglang-rvv/requirements
mapfile -t DEBS < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$REQ/riscv64-debian.txt")
BASE_DEBS=(python3 python3-venv python3-pip python3-torch python3-numpy)
BUILD_DEBS=(libtorch-dev clang cmake ninja-build)
[ -n "$WHEELS" ] && BUILD_DEBS=()

log "1/5 Debian packages"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=()
for p in "${BASE_DEBS[@]}" "${BUILD_DEBS[@]}" "${DEBS[@]}"; do
    dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "  apt-get install ${missing[*]}"
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

log "2/5 venv $VENV (--system-site-packages)"
[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
PIP=("$VENV/bin/python" -m pip install --no-deps)

log "3/5 PyPI packages (requirements/riscv64-pip.txt)"
"${PIP[@]}" -r "$REQ/riscv64-pip.txt"
# rvv-ops is built without build isolation (against Debian's torch): its build backend
# (hatchling, with its dependencies) must be in the venv.
[ -n "$WHEELS" ] || "$VENV/bin/python" -m pip install hatchling

log "4/5 SGLang 0.5.23 without its x86 extension modules"
dist=$REPO/dist
sglang_whl=$("$VENV/bin/python" "$HERE/sglang_riscv64.py" sglang-wheel --out "$dist" | tail -n 1)
"${PIP[@]}" "$sglang_whl"

log "5/5 rvv-kernels, rvv-ops, rvv-attention, sglang-rvv"
"${PIP[@]}" "$REPO/packages/rvv-kernels"
if [ -n "$WHEELS" ]; then
    ops=$(ls "$WHEELS"/rvv_ops-*-linux_riscv64.whl 2>/dev/null | head -n 1)
    [ -n "$ops" ] || die "no rvv_ops-*-linux_riscv64.whl in $WHEELS"
    "${PIP[@]}" --force-reinstall "$ops"
else
    CC=clang CXX=clang++ "${PIP[@]}" --no-build-isolation --force-reinstall "$REPO/packages/rvv-ops"
fi
"${PIP[@]}" --force-reinstall "$REPO/packages/rvv-attention" "$REPO/packages/sglang-rvv"

cat <<EOF
[install-riscv64] done. Check and run:
    $VENV/bin/python -m rvv_attention          # CPU features, kernel build, what runs where
    $VENV/bin/python -m sglang_rvv.serve       # the demo model; --model-path DIR for a real one
    $VENV/bin/python -m sglang.launch_server --model-path DIR --device cpu   # rvv is the default
EOF
