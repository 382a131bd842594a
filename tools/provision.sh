#!/usr/bin/env bash
# Idempotent provisioning of the RISC-V (RVV) cross toolchain and emulation harness.
#
# Usage: tools/provision.sh [COMPONENT...]     (default: all)
#
# Components:
#   toolchain  Debian 12 packages: clang-16/lld-16/llvm-16, the riscv64 GNU cross toolchain and
#              sysroot (/usr/riscv64-linux-gnu), cmake, ninja.                      (needs root)
#   qemu7      Debian 12's qemu-user (QEMU 7.2, TCG plugins): /usr/bin/qemu-riscv64 (needs root)
#   qemu10     QEMU 10 (static qemu-riscv64 from Debian 13's amd64 qemu-user .deb):
#              $CACHE/qemu10/bin/qemu-riscv64                          (no root needed)
#   plugin     the project's TCG plugin tools/qemu-plugin/insncount.c, built against
#              qemu-plugin.h of Debian 12's qemu source: $CACHE/plugin/libinsncount.so
#              (implies qemu7; needs root only to apt-get install gcc/libglib2.0-dev)
#   root       Debian 13 riscv64 userland (python3, torch, numpy, pytest, libtorch-dev, pip,
#              venv, libc6-dev, libstdc++-14-dev) unpacked at $CACHE/riscv64-root
#              (implies qemu10, used to verify it; no root needed)
#   sglang-root  the same plus the Debian packages SGLang needs on riscv64
#              (packages/sglang-rvv/requirements/riscv64-debian.txt, what
#              tools/install-riscv64.sh apt-installs on a board) at $CACHE/riscv64-sglang-root
#   sanitizers the sanitizer runtimes of `nox -s sanitize`: GCC 12's libasan and libubsan, g++
#                                                                              (needs root)
#   peers      what `nox -s bench-peers` builds llama.cpp with: clang-19 and lld-19 (ggml's RVV
#              code needs clang >= 19), g++ for the native driver (implies toolchain, whose
#              GNU as assembles ggml's inline assembly)                         (needs root)
#   all        all of the above except sglang-root and peers
#
# CACHE is ${RVV_SGLANG_CACHE:-$HOME/.cache/rvv-sglang}. Each component writes a stamp file
# $CACHE/stamps/COMPONENT.stamp recording what it installed; a rerun checks the stamp (and, for
# host packages, dpkg's database) and does nothing when the component is present.
# RVV_DEBIAN_MIRROR overrides the Debian mirror URI (default: read from /etc/apt/sources*).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RVV_SGLANG_CACHE:-$HOME/.cache/rvv-sglang}
STAMPS=$CACHE/stamps
LOGS=$CACHE/logs
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
HOST_SUITE=bookworm  # Debian 12: the host this script provisions
NEW_SUITE=trixie     # Debian 13: source of QEMU 10 and of the riscv64 root

export DEBIAN_FRONTEND=noninteractive
QEMU7=/usr/bin/qemu-riscv64
QEMU10=$CACHE/qemu10/bin/qemu-riscv64
ROOT=$CACHE/riscv64-root
SGLANG_ROOT=$CACHE/riscv64-sglang-root
SGLANG_DEBS_FILE=$HERE/../packages/sglang-rvv/requirements/riscv64-debian.txt
PLUGIN_SRC=$HERE/qemu-plugin/insncount.c
PLUGIN_SO=$CACHE/plugin/libinsncount.so
PLUGIN_HDR=$CACHE/plugin/include/qemu-plugin.h
CROSS_SYSROOT=/usr/riscv64-linux-gnu

TOOLCHAIN_PKGS=(clang-16 lld-16 llvm-16 g++-riscv64-linux-gnu libc6-dev-riscv64-cross
    libstdc++-12-dev-riscv64-cross libgomp1-riscv64-cross binutils-riscv64-linux-gnu
    cmake ninja-build make)
QEMU7_PKGS=(qemu-user)
# The native sanitizer builds are GCC's (the riscv64 one is UBSan in trap mode: no runtime).
SANITIZER_PKGS=(g++ libasan8 libubsan1)
# llama.cpp as a benchmark peer (tools/peers): clang-19 compiles ggml's RVV intrinsics.
PEERS_PKGS=(clang-19 lld-19 g++)
PLUGIN_PKGS=(gcc libc6-dev libglib2.0-dev pkg-config xz-utils)
# libopenblas0: recommended by libtorch2.6 (what a board user's apt install brings); without it
# apt settles for the reference BLAS.
ROOT_PKGS=(python3 python3-torch python3-numpy python3-pytest libtorch-dev python3-pip
    python3-venv libc6-dev libstdc++-14-dev libopenblas0)
# Bump when the way the root is assembled changes: forces a rebuild of the root.
ROOT_RECIPE=2

# ----------------------------------------------------------------------------- helpers
log() { printf '[provision] %s\n' "$*"; }
die() { printf '[provision] ERROR: %s\n' "$*" >&2; exit 1; }
now() { printf '%s' "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
is_root() { [ "$(id -u)" -eq 0 ]; }
sha() { sha256sum | cut -c1-16; }

# Run a command with its output going to $LOGS/NAME.log; on failure show the log's tail.
logged() {
    local name=$1; shift
    mkdir -p "$LOGS"
    if ! "$@" >"$LOGS/$name.log" 2>&1; then
        tail -n 30 "$LOGS/$name.log" >&2
        die "'$*' failed (full log: $LOGS/$name.log)"
    fi
}

stamp_ok() {  # NAME KEY: the stamp exists and was written for KEY
    [ -f "$STAMPS/$1.stamp" ] && [ "$(head -n 1 "$STAMPS/$1.stamp")" = "key: $2" ]
}
stamp_write() {  # NAME KEY; body on stdin
    mkdir -p "$STAMPS"
    { echo "key: $2"; echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; cat; } >"$STAMPS/$1.stamp.tmp"
    mv "$STAMPS/$1.stamp.tmp" "$STAMPS/$1.stamp"
}
stamp_summary() { sed -n 's/^summary: //p' "$STAMPS/$1.stamp" 2>/dev/null | head -n 1; }

# ----------------------------------------------------------------------------- host apt
APT_UPDATED=0
host_missing() {  # print the packages of "$@" that are not installed
    local p
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed \
            || printf '%s\n' "$p"
    done
}
host_install() {  # install missing host packages (apt-get update once, only when needed)
    local missing
    missing=$(host_missing "$@" | tr '\n' ' ')
    missing=${missing% }
    [ -z "$missing" ] && return 0
    is_root || die "Debian packages missing: $missing
    installing them needs root: run 'sudo $0 ${ARGS[*]}' or 'sudo apt-get install --no-install-recommends $missing'"
    if [ "$APT_UPDATED" = 0 ]; then
        log "  apt-get update (host)"
        logged apt-update-host apt-get update
        APT_UPDATED=1
    fi
    log "  apt-get install $missing"
    # shellcheck disable=SC2086
    logged "apt-install-host" \
        apt-get install -y --no-install-recommends $missing
}
host_versions() {  # "pkg version" lines for the stamp
    dpkg-query -W -f='installed: ${Package} ${Version}\n' "$@"
}

# ----------------------------------------------------------------------------- private apt
# "URI SUITE" for each enabled 'deb' entry in the host's APT sources (one-line and deb822).
host_apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" { i = 2
                 if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                 print $i, $(i + 1) }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'function flush(  n, m, a, b, U, S) {
                 if (types ~ /(^| )deb( |$)/ && enabled != "no") {
                     n = split(uris, U, " "); m = split(suites, S, " ")
                     for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) print U[a], S[b]
                 }
                 types = uris = suites = enabled = ""
             }
             /^[ \t]*#/ { next }
             /^[ \t]*$/ { flush(); next }
             { key = tolower($1); $1 = "" }
             key == "types:" { types = $0 }
             key == "uris:" { uris = $0 }
             key == "suites:" { suites = $0 }
             key == "enabled:" { enabled = tolower($1 $2) }
             END { flush() }' "$f"
    done
}
MIRROR=""
SECURITY_MIRROR=""
find_mirrors() {
    [ -n "$MIRROR" ] && return 0
    local entries
    entries=$(host_apt_entries | awk '$1 ~ /^https?:\/\// { sub(/\/+$/, "", $1); print $1, $2 }')
    MIRROR=${RVV_DEBIAN_MIRROR:-$(awk -v s="$HOST_SUITE" '$2 == s { print $1; exit }' <<<"$entries")}
    SECURITY_MIRROR=$(awk -v s="$HOST_SUITE-security" '$2 == s { print $1; exit }' <<<"$entries")
    [ -n "$MIRROR" ] || die "no Debian mirror for '$HOST_SUITE' found in /etc/apt/sources.list{,.d}; set RVV_DEBIAN_MIRROR"
    MIRROR=${MIRROR%/}
}

# apt_setup NAME ARCH: a private apt configuration under $CACHE/apt/NAME (own state, cache,
# etc; sources.list read from stdin). The lists are dropped when sources.list changes.
apt_setup() {
    local name=$1 arch=$2 d=$CACHE/apt/$1 sources
    sources=$(cat)
    mkdir -p "$d"/etc/apt.conf.d "$d"/etc/preferences.d "$d"/etc/sources.list.d \
        "$d"/state/lists/partial "$d"/cache/archives/partial "$d"/log "$d"/work
    [ -f "$d/state/status" ] || : >"$d/state/status"
    if [ ! -f "$d/etc/sources.list" ] || [ "$(cat "$d/etc/sources.list")" != "$sources" ]; then
        printf '%s\n' "$sources" >"$d/etc/sources.list"
        find "$d/state/lists" -maxdepth 1 -type f -delete
        rm -f "$d/state/updated"
    fi
    {
        echo "Dir::State \"$d/state/\";"
        echo "Dir::State::status \"$d/state/status\";"
        echo "Dir::Cache \"$d/cache/\";"
        echo "Dir::Etc \"$d/etc/\";"
        echo "Dir::Log \"$d/log/\";"
        # no on-disk binary caches (~80 MB each for a Debian 13 index); built in memory instead
        echo "Dir::Cache::pkgcache \"\";"
        echo "Dir::Cache::srcpkgcache \"\";"
        echo "APT::Architecture \"$arch\";"
        echo "APT::Architectures { \"$arch\"; };"
        echo "APT::Install-Recommends \"false\";"
        echo "APT::Install-Suggests \"false\";"
        echo "APT::Get::Assume-Yes \"true\";"
        echo "Acquire::Languages \"none\";"
        # as root apt would download as user _apt, who cannot enter a cache under /root
        if is_root; then echo "APT::Sandbox::User \"root\";"; fi
    } >"$d/apt.conf"
}
apt_in() { local name=$1; shift; APT_CONFIG="$CACHE/apt/$name/apt.conf" apt-get "$@"; }
apt_update_in() {  # update a private configuration unless its lists are less than a day old
    local name=$1 d=$CACHE/apt/$1
    if [ -n "$(find "$d/state/updated" -mmin -1440 2>/dev/null)" ]; then
        log "  apt lists of '$name' are less than a day old"
        return 0
    fi
    log "  apt-get update ($name)"
    logged "apt-update-$name" apt_in "$name" update
    touch "$d/state/updated"
}

# ----------------------------------------------------------------------------- components
DONE=" "
PRESENT=0
ensure() {  # run a component once per invocation, with timing
    local c=$1 t0
    case "$DONE" in *" $c "*) return 0 ;; esac
    t0=$(now)
    PRESENT=0
    "ensure_$c"
    DONE+="$c "
    [ "$PRESENT" = 1 ] || log "$c: done ($(elapsed "$t0") s)"
}
present() {  # NAME: report a component found installed
    log "$1: present ($(stamp_summary "$1"))"
    PRESENT=1
}

ensure_toolchain() {
    local key missing
    key=$(printf '%s\n' "${TOOLCHAIN_PKGS[@]}" | sha)
    missing=$(host_missing "${TOOLCHAIN_PKGS[@]}")
    if [ -z "$missing" ] && stamp_ok toolchain "$key"; then
        present toolchain
        return 0
    fi
    log "toolchain: checking the Debian packages"
    host_install "${TOOLCHAIN_PKGS[@]}"
    # smoke test: clang-16 compiles and links RVV intrinsics for riscv64 Linux
    local tmp; tmp=$(mktemp -d)
    cat >"$tmp/t.c" <<'EOF'
#include <riscv_vector.h>
#include <stddef.h>
float sum(const float *x, size_t n) {
    vfloat32m1_t acc = __riscv_vfmv_v_f_f32m1(0.0f, 1);
    for (size_t vl; n > 0; n -= vl, x += vl) {
        vl = __riscv_vsetvl_e32m1(n);
        acc = __riscv_vfredusum_vs_f32m1_f32m1(__riscv_vle32_v_f32m1(x, vl), acc, vl);
    }
    return __riscv_vfmv_f_s_f32m1_f32(acc);
}
int main(void) { float x[3] = {1, 2, 3}; return sum(x, 3) == 6.0f ? 0 : 1; }
EOF
    logged toolchain-smoke clang-16 --target=riscv64-linux-gnu -march=rv64gcv -O2 -fuse-ld=lld \
        "$tmp/t.c" -o "$tmp/t"
    rm -rf "$tmp"
    local clangv; clangv=$(clang-16 --version | head -n 1)
    {
        echo "summary: $clangv, sysroot $CROSS_SYSROOT"
        host_versions "${TOOLCHAIN_PKGS[@]}"
    } | stamp_write toolchain "$key"
}

ensure_sanitizers() {
    local key missing
    key=$(printf '%s\n' "${SANITIZER_PKGS[@]}" | sha)
    missing=$(host_missing "${SANITIZER_PKGS[@]}")
    if [ -z "$missing" ] && stamp_ok sanitizers "$key"; then
        present sanitizers
        return 0
    fi
    log "sanitizers: checking the Debian packages"
    host_install "${SANITIZER_PKGS[@]}"
    {
        echo "summary: $(g++ --version | head -n 1), $(g++ -print-file-name=libasan.so)"
        host_versions "${SANITIZER_PKGS[@]}"
    } | stamp_write sanitizers "$key"
}

ensure_peers() {
    ensure toolchain
    local key missing
    key=$(printf '%s\n' "${PEERS_PKGS[@]}" | sha)
    missing=$(host_missing "${PEERS_PKGS[@]}")
    if [ -z "$missing" ] && stamp_ok peers "$key"; then
        present peers
        return 0
    fi
    log "peers: checking the Debian packages"
    host_install "${PEERS_PKGS[@]}"
    # smoke test: clang-19 compiles RVV intrinsics for riscv64 Linux and hands the assembly to
    # GNU as (what tools/peers/build.py does for ggml's C code)
    local tmp; tmp=$(mktemp -d)
    cat >"$tmp/t.c" <<'EOF'
#include <riscv_vector.h>
#include <stddef.h>
size_t vl16(size_t n) { return __riscv_vsetvl_e16m1(n); }
EOF
    logged peers-smoke clang-19 --target=riscv64-linux-gnu -march=rv64gcv -O2 \
        -fno-integrated-as -c "$tmp/t.c" -o "$tmp/t.o"
    rm -rf "$tmp"
    {
        echo "summary: $(clang-19 --version | head -n 1)"
        host_versions "${PEERS_PKGS[@]}"
    } | stamp_write peers "$key"
}

ensure_qemu7() {
    local key missing
    key="$(printf '%s\n' "${QEMU7_PKGS[@]}" | sha) $(dpkg-query -W -f='${Version}' qemu-user 2>/dev/null || true)"
    missing=$(host_missing "${QEMU7_PKGS[@]}")
    if [ -z "$missing" ] && [ -x "$QEMU7" ] && stamp_ok qemu7 "$key"; then
        present qemu7
        return 0
    fi
    log "qemu7: checking the Debian package"
    host_install "${QEMU7_PKGS[@]}"
    key="$(printf '%s\n' "${QEMU7_PKGS[@]}" | sha) $(dpkg-query -W -f='${Version}' qemu-user)"
    local v; v=$("$QEMU7" --version | head -n 1)
    case "$v" in *"version 7."*) ;; *) die "unexpected $QEMU7: $v" ;; esac
    { echo "summary: $v ($QEMU7)"; host_versions "${QEMU7_PKGS[@]}"; } | stamp_write qemu7 "$key"
}

ensure_qemu10() {
    local key="$NEW_SUITE-amd64-qemu-user"
    if [ -x "$QEMU10" ] && stamp_ok qemu10 "$key"; then
        present qemu10
        return 0
    fi
    log "qemu10: fetching Debian 13's amd64 qemu-user"
    find_mirrors
    apt_setup trixie-amd64 amd64 <<<"deb [signed-by=$KEYRING] $MIRROR $NEW_SUITE main"
    apt_update_in trixie-amd64
    local work=$CACHE/apt/trixie-amd64/work
    rm -f "$work"/qemu-user_*.deb
    (cd "$work" && logged apt-download-qemu10 apt_in trixie-amd64 download qemu-user)
    local deb; deb=$(ls "$work"/qemu-user_*.deb)
    local tmp=$CACHE/qemu10.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp/bin"
    dpkg-deb -x "$deb" "$tmp/pkg"
    mv "$tmp/pkg/usr/bin/qemu-riscv64" "$tmp/bin/qemu-riscv64"
    rm -rf "$tmp/pkg"
    local v; v=$("$tmp/bin/qemu-riscv64" --version | head -n 1)
    case "$v" in *"version 10."*) ;; *) die "unexpected QEMU from $deb: $v" ;; esac
    rm -rf "$CACHE/qemu10"
    mv "$tmp" "$CACHE/qemu10"
    rm -f "$deb"
    {
        echo "summary: $v ($QEMU10)"
        echo "from: $(basename "$deb") ($MIRROR $NEW_SUITE main)"
    } | stamp_write qemu10 "$key"
}

fetch_plugin_header() {  # qemu-plugin.h of the source package of the installed qemu-user
    local srcver
    srcver=$(dpkg-query -W -f='${source:Version}' qemu-user)
    log "  fetching qemu-plugin.h from Debian's qemu $srcver source package"
    find_mirrors
    {
        echo "deb-src [signed-by=$KEYRING] $MIRROR $HOST_SUITE main"
        echo "deb-src [signed-by=$KEYRING] $MIRROR $HOST_SUITE-updates main"
        if [ -n "$SECURITY_MIRROR" ]; then
            echo "deb-src [signed-by=$KEYRING] $SECURITY_MIRROR $HOST_SUITE-security main"
        fi
    } | apt_setup bookworm-src amd64
    apt_update_in bookworm-src
    local work=$CACHE/apt/bookworm-src/work
    rm -rf "$work"/qemu_*
    if ! (cd "$work" && logged apt-source-qemu apt_in bookworm-src source --download-only "qemu=$srcver"); then
        log "  qemu=$srcver not in the index; taking the newest qemu source"
        (cd "$work" && logged apt-source-qemu apt_in bookworm-src source --download-only qemu)
    fi
    local orig; orig=$(ls "$work"/qemu_*.orig.tar.*)
    mkdir -p "$(dirname "$PLUGIN_HDR")"
    tar -xOf "$orig" --wildcards '*/include/qemu/qemu-plugin.h' >"$PLUGIN_HDR.tmp"
    grep -q 'QEMU_PLUGIN_VERSION' "$PLUGIN_HDR.tmp" || die "no qemu-plugin.h in $orig"
    mv "$PLUGIN_HDR.tmp" "$PLUGIN_HDR"
    basename "$(ls "$work"/qemu_*.dsc)" >"$PLUGIN_HDR.source"
    rm -rf "$work"/qemu_*
}

ensure_plugin() {
    ensure qemu7
    local key
    key="$(sha <"$PLUGIN_SRC") $(dpkg-query -W -f='${source:Version}' qemu-user)"
    if [ -f "$PLUGIN_SO" ] && [ -z "$(host_missing "${PLUGIN_PKGS[@]}")" ] \
        && stamp_ok plugin "$key"; then
        present plugin
        return 0
    fi
    log "plugin: building $PLUGIN_SO"
    host_install "${PLUGIN_PKGS[@]}"
    local srcver; srcver=$(dpkg-query -W -f='${source:Version}' qemu-user)
    if [ ! -f "$PLUGIN_HDR" ] || ! grep -q "_${srcver#*:}.dsc" "$PLUGIN_HDR.source" 2>/dev/null; then
        fetch_plugin_header
    fi
    # shellcheck disable=SC2046
    logged plugin-build gcc -O2 -Wall -Wextra -Wno-unused-parameter -shared -fPIC \
        -I"$(dirname "$PLUGIN_HDR")" $(pkg-config --cflags glib-2.0) \
        "$PLUGIN_SRC" -o "$PLUGIN_SO.tmp"
    mv "$PLUGIN_SO.tmp" "$PLUGIN_SO"
    # smoke test: count the instructions of the riscv64 dynamic loader printing its help
    local smoke="" out; out=$(mktemp)
    if [ -x "$CROSS_SYSROOT/lib/ld-linux-riscv64-lp64d.so.1" ]; then
        "$QEMU7" -L "$CROSS_SYSROOT" -cpu rv64,v=true,vlen=128,elen=64,vext_spec=v1.0 \
            -plugin "$PLUGIN_SO,outfile=$out" -d plugin \
            "$CROSS_SYSROOT/lib/ld-linux-riscv64-lp64d.so.1" --help >/dev/null 2>&1 || true
        smoke=$(cat "$out")
        rm -f "$out"
        case "$smoke" in "insncount total="*) ;; *) die "plugin smoke test printed '$smoke'" ;; esac
        log "  smoke test (ld.so --help): $smoke"
    fi
    {
        echo "summary: $PLUGIN_SO for $("$QEMU7" --version | head -n 1)"
        echo "header: $PLUGIN_HDR from $(cat "$PLUGIN_HDR.source")"
        echo "smoke: ${smoke:-not run (no $CROSS_SYSROOT)}"
    } | stamp_write plugin "$key"
}

# Make the links that update-alternatives would have made (maintainer scripts don't run):
# ALTS lists "PRIORITY LINK PATH" gathered from the postinst scripts.
apply_alternatives() {
    local root=$1 alts=$2 prio link path seen=" "
    sort -k2,2 -k1,1nr "$alts" | while read -r prio link path; do
        case "$seen" in *" $link "*) continue ;; esac
        [ -e "$root$path" ] || continue
        seen+="$link "
        if [ ! -e "$root$link" ] && [ ! -L "$root$link" ]; then
            mkdir -p "$(dirname "$root$link")"
            ln -sr "$root$path" "$root$link"
            echo "alternative: $link -> $path"
        fi
    done
}

# assemble_root NAME DIR PACKAGE...: a Debian 13 riscv64 userland with PACKAGE... (and what they
# depend on) unpacked at DIR, verified under QEMU 10, stamped as component NAME.
assemble_root() {
    local name=$1 ROOT=$2; shift 2
    local pkgs=("$@")
    ensure qemu10
    local key
    key=$(printf '%s\n' "${pkgs[@]}" "recipe $ROOT_RECIPE" | sha)
    if [ -x "$ROOT/usr/bin/python3" ] && stamp_ok "$name" "$key"; then
        present "$name"
        return 0
    fi
    log "$name: assembling a Debian 13 riscv64 root at $ROOT"
    find_mirrors
    apt_setup trixie-riscv64 riscv64 <<<"deb [signed-by=$KEYRING] $MIRROR $NEW_SUITE main"
    apt_update_in trixie-riscv64
    local t0; t0=$(now)
    log "  resolving and downloading ${pkgs[*]}"
    logged "apt-download-$name" apt_in trixie-riscv64 install --download-only "${pkgs[@]}"
    apt_in trixie-riscv64 autoclean >/dev/null 2>&1 || true  # drop .debs no longer in the index
    # the packages apt chose, as "name version" (the status file is empty: all are new)
    local inst archives=$CACHE/apt/trixie-riscv64/cache/archives
    inst=$(apt_in trixie-riscv64 install -s "${pkgs[@]}" 2>/dev/null \
        | awk '$1 == "Inst" { v = $3; gsub(/[()]/, "", v); print $2, v }')
    log "  $(wc -l <<<"$inst") packages downloaded ($(elapsed "$t0") s); unpacking"

    t0=$(now)
    local tmp=$ROOT.tmp pkg ver deb alts
    rm -rf "$tmp"
    mkdir -p "$tmp/usr/bin" "$tmp/usr/lib" "$tmp/usr/sbin"
    ln -s usr/bin "$tmp/bin"; ln -s usr/lib "$tmp/lib"; ln -s usr/sbin "$tmp/sbin"
    alts=$(mktemp)
    : >"$tmp.list"
    while read -r pkg ver; do
        deb=""
        for a in riscv64 all; do
            [ -f "$archives/${pkg}_${ver/:/%3a}_$a.deb" ] && deb=$archives/${pkg}_${ver/:/%3a}_$a.deb
        done
        [ -n "$deb" ] || die "no .deb for $pkg $ver in $archives"
        dpkg-deb -x "$deb" "$tmp"
        echo "$pkg $ver" >>"$tmp.list"
        # update-alternatives --install LINK NAME PATH PRIO [--slave LINK NAME PATH]...
        { dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./postinst 2>/dev/null || true; } \
            | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | grep -- '--install' | grep -v '\$' \
            | awk '{ for (i = 1; i <= NF; i++) {
                        if ($i == "--install") { prio = $(i + 4); print prio, $(i + 1), $(i + 3) }
                        if ($i == "--slave") print prio, $(i + 1), $(i + 3) } }' >>"$alts" \
            || true
    done <<<"$inst"
    for d in bin lib sbin; do
        [ -L "$tmp/$d" ] || die "unpacking replaced the $d -> usr/$d link"
    done
    apply_alternatives "$tmp" "$alts" >"$tmp.alternatives"
    rm -f "$alts"
    # An empty proc or sys in the root would hide the host's from the emulated programs
    # (qemu-user looks every path up in the -L prefix first).
    local d
    for d in proc sys dev run; do
        if [ -d "$tmp/$d" ] && [ -z "$(ls -A "$tmp/$d")" ]; then rmdir "$tmp/$d"; fi
    done
    rm -rf "$ROOT"
    mv "$tmp" "$ROOT"
    log "  unpacked ($(elapsed "$t0") s, $(du -sm "$ROOT" | cut -f1) MB)"
    sed 's/^/    /' "$tmp.alternatives"

    # verification under QEMU 10 (also fills the root's __pycache__ for the modules imported)
    t0=$(now)
    log "  verifying: import torch, numpy, pytest under QEMU 10 (about a minute)"
    local torchv pipv
    torchv=$(env -u PYTHONPATH -u PYTHONHOME -u PYTHONDONTWRITEBYTECODE -u VIRTUAL_ENV \
        "$QEMU10" -L "$ROOT" -cpu rv64,v=true,vlen=256 "$ROOT/usr/bin/python3" \
        -c 'import torch, numpy, pytest; print(torch.__version__)' 2>"$LOGS/$name-verify.log") \
        || { tail -n 20 "$LOGS/$name-verify.log" >&2; die "python3 in $ROOT cannot import torch"; }
    pipv=$(env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV "$QEMU10" -L "$ROOT" \
        -cpu rv64,v=true,vlen=256 "$ROOT/usr/bin/python3" -m pip --version 2>>"$LOGS/$name-verify.log") \
        || { tail -n 20 "$LOGS/$name-verify.log" >&2; die "pip does not run in $ROOT"; }
    log "  torch $torchv; ${pipv%% from *} ($(elapsed "$t0") s)"
    {
        echo "summary: $(wc -l <"$tmp.list") packages, python3 $(readlink "$ROOT/usr/bin/python3"), torch $torchv, ${pipv%% from *}"
        echo "requested: ${pkgs[*]}"
        echo "recipe: $ROOT_RECIPE"
        echo "from: $MIRROR $NEW_SUITE main (riscv64)"
        sed 's/^/    /' "$tmp.alternatives"
        sed 's/^/installed: /' "$tmp.list"
    } | stamp_write "$name" "$key"
    rm -f "$tmp.list" "$tmp.alternatives"
}

ensure_root() { assemble_root root "$ROOT" "${ROOT_PKGS[@]}"; }

# Emulation only: python3-soundfile finds libsndfile with ctypes' find_library, which runs
# /sbin/ldconfig - a riscv64 program the emulated Python cannot exec - and then dlopens
# 'libsndfile.so', the symlink the -dev package ships. A board needs neither.
SGLANG_ROOT_EMULATION_PKGS=(libsndfile1-dev)

ensure_sglang-root() {
    [ -f "$SGLANG_DEBS_FILE" ] || die "missing $SGLANG_DEBS_FILE"
    local extra
    mapfile -t extra < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$SGLANG_DEBS_FILE")
    assemble_root sglang-root "$SGLANG_ROOT" "${ROOT_PKGS[@]}" "${extra[@]}" \
        "${SGLANG_ROOT_EMULATION_PKGS[@]}"
}

# ----------------------------------------------------------------------------- main
main() {
    [ $# -gt 0 ] || set -- all
    COMPONENTS=()
    for c in "$@"; do
        case "$c" in
            all) COMPONENTS+=(toolchain qemu7 qemu10 plugin root sanitizers) ;;
            toolchain | qemu7 | qemu10 | plugin | root | sglang-root | sanitizers | peers) COMPONENTS+=("$c") ;;
            -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
            *) die "unknown component '$c' (known: toolchain qemu7 qemu10 plugin root sglang-root sanitizers peers all)" ;;
        esac
    done

    if [ -r /etc/os-release ]; then
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [ "$codename" = "$HOST_SUITE" ] \
            || log "warning: this script targets Debian 12 ($HOST_SUITE); this host is '$codename'"
    fi

    mkdir -p "$CACHE" 2>/dev/null || die "cannot create the cache directory $CACHE"
    # serialize concurrent runs (e.g. parallel nox sessions) when the cache is writable
    if [ -w "$CACHE" ]; then
        exec 9>>"$CACHE/.lock"
        flock 9
    fi
    T0=$(now)
    log "cache: $CACHE; components: ${COMPONENTS[*]}"
    for c in "${COMPONENTS[@]}"; do ensure "$c"; done
    log "all requested components present ($(elapsed "$T0") s)"
}

# on one line, so that bash has read the whole script before running it (safe against edits)
ARGS=("$@"); main "$@"; exit $?
