#!/bin/sh
# build.sh - build, test and fuzz cursor-oai. Plain POSIX sh; prints every command it runs.
#
#   ./build.sh               release: fully static musl binary build/cursor-oai
#   ./build.sh arm64         the same for linux/arm64, cross-built: build/cursor-oai-arm64
#   ./build.sh test          ASan/UBSan unit tests, fuzz corpus replay, header and release
#                            checks, the arm64 binary under qemu-aarch64-static, e2e scripts
#   ./build.sh test-arm64    only test's arm64 step (release builds of both, then the checks)
#   ./build.sh debug         dynamic glibc -g -O0 build (for valgrind): build/cursor-oai-debug
#   ./build.sh fuzz [SECS]   libFuzzer every tests/fuzz/fz_*.c for SECS seconds each (default 60)
#   ./build.sh deps          install packages, fetch + verify + unpack deps, build BearSSL
#   ./build.sh bench [ARGS]  release build, then tests/bench.sh ARGS
#   ./build.sh bench-probe22 release build, then tests/bench/probe22.py (figures for big
#                            bodies, stalled BidiAppends and peak RSS; prints, judges nothing)
#   ./build.sh docker        release build, Debian's docker.io when missing (root), then
#                            tests/docker.sh (the container test that `test` runs last)
#   ./build.sh clean         remove build/ except the dependency cache build/deps
#
# Dependencies come from Debian's source archive, pinned by version and by the sha256 of the
# upstream tarball, and are cached in build/deps (env COAI_DEPS_DIR: another directory, which
# this script then owns). Missing Debian packages are installed when running as root.
# Env: COAI_VECTORS (test vectors, default ../shared/spec/vectors relative to the repo root),
#      COAI_TEST_TIMEOUT (seconds per test program, default 600).
set -eu

cd "$(dirname "$0")"
ROOT=$(pwd)
BUILD=build
DEPS=${COAI_DEPS_DIR:-$ROOT/build/deps}
case $DEPS in /*) ;; *) DEPS=$ROOT/$DEPS ;; esac
JOBS=$(nproc 2>/dev/null || echo 2)
export PYTHONDONTWRITEBYTECODE=1 LC_ALL=C

# ---------------------------------------------------------------------------------------------
# Pins

CJSON_VER=1.7.19
CJSON_REVS="2"
CJSON_ORIG=cjson_1.7.19.orig.tar.gz
CJSON_SHA=7fa616e3046edfa7a28a32d5f9eacfd23f92900fe1f8ccd988c1662f30454562
NANOPB_VER=0.4.9.1
NANOPB_REVS="1 2"
NANOPB_ORIG=nanopb_0.4.9.1.orig.tar.gz
NANOPB_SHA=4575944a468718ef25f05eb01d994364650b581563089a9841986bb1e460eac3
BEARSSL_VER=0.6+dfsg.1
BEARSSL_REVS="3"
BEARSSL_ORIG=bearssl_0.6+dfsg.1.orig.tar.xz
BEARSSL_SHA=102a625bd8f6155260867a50c508df8d8c3f796985dd744df1a68e5cd1a79004

# What a release or debug build needs; test, fuzz and bench add the second list.
PACKAGES_BUILD="gcc libc6-dev make binutils xz-utils dpkg-dev musl-tools protobuf-compiler python3
python3-protobuf file ca-certificates debian-archive-keyring"
PACKAGES_TEST="clang libclang-rt-14-dev openssl zbar-tools python3-h2 chromium nginx
qemu-user-static"
PACKAGES="$PACKAGES_BUILD $PACKAGES_TEST"
# The linux/arm64 cross build (`arm64`, and `test`, which runs that binary under
# qemu-aarch64-static): Debian's cross compiler, and musl for arm64 through multiarch (it brings
# /usr/bin/aarch64-linux-musl-gcc, the cross compiler with musl's specs, as musl-gcc is for
# the native one). ensure_packages adds the arm64 architecture to dpkg for it.
PACKAGES_ARM64="gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu musl-dev:arm64"
A64_CC=aarch64-linux-musl-gcc
QEMU_A64=qemu-aarch64-static

SRC_LIST=/etc/apt/sources.list.d/cursor-oai-src.sources
PY=/usr/bin/python3

CJ=$DEPS/cjson-$CJSON_VER
NP=$DEPS/nanopb-$NANOPB_VER
BR=$DEPS/bearssl-$BEARSSL_VER
BR_MUSL=$DEPS/bearssl-$BEARSSL_VER-musl     # built with musl-gcc, for the static binary
BR_GCC=$DEPS/bearssl-$BEARSSL_VER-gcc       # built with gcc -g, for debug/test/fuzz builds
BR_MUSL_A64=$DEPS/bearssl-$BEARSSL_VER-musl-arm64   # the same as BR_MUSL, for linux/arm64

DEFS="-DPB_ENABLE_MALLOC -DPB_FIELD_32BIT -DCJSON_NESTING_LIMIT=64"
PROTOS="agent.proto aiserver.proto google/rpc/status.proto google/protobuf/struct.proto
google/protobuf/any.proto"
PB_C="proto/agent.pb.c proto/aiserver.pb.c proto/google/rpc/status.pb.c
proto/google/protobuf/struct.pb.c proto/google/protobuf/any.pb.c"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

# ---------------------------------------------------------------------------------------------
# Helpers

# Print a command (quoted where needed) the way `set -x` would, then run it.
show() {
    line=
    for a in "$@"; do
        case $a in
        '' | *[!A-Za-z0-9_./=:,+@%^-]*) a="'$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
        esac
        line="$line $a"
    done
    printf '+%s\n' "$line"
}
run() { show "$@"; "$@"; }
say() { printf '%s\n' "$*"; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

APT_UPDATED=0
apt_update_once() {
    [ "$APT_UPDATED" = 1 ] && return 0
    is_root || die "apt-get update needed but not running as root"
    # A mirror serving a dated snapshot can have an expired sid/trixie Release file (or the
    # clock is off). Only then retry without the expiry check: signatures are still verified,
    # and the source tarballs are pinned by sha256 anyway.
    if ! run apt-get update; then
        run apt-get -o Acquire::Check-Valid-Until=false update
    fi
    APT_UPDATED=1
}

ensure_packages() {
    missing=
    # shellcheck disable=SC2086
    show dpkg -s $PACKAGES
    for p in $PACKAGES; do
        dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    is_root || die "missing Debian packages:$missing (run as root: apt-get install$missing)"
    # arm64 packages (musl-dev:arm64) need the architecture in dpkg, then fresh package lists
    case $missing in *:arm64*)
        if ! dpkg --print-foreign-architectures | grep -qx arm64; then
            run dpkg --add-architecture arm64
            APT_UPDATED=0
        fi ;;
    esac
    apt_update_once
    # shellcheck disable=SC2086
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
}

# deb-src entries in a file of our own (apt-get update when they had to be written).
ensure_deb_src() {
    want="Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
    if [ -f "$SRC_LIST" ] && [ "$(cat "$SRC_LIST")" = "$want" ]; then return 0; fi
    is_root || die "Debian source packages needed: run once as root (writes $SRC_LIST)"
    printf '+ cat > %s <<EOF\n%s\nEOF\n' "$SRC_LIST" "$want"
    printf '%s\n' "$want" > "$SRC_LIST"
    APT_UPDATED=0
    apt_update_once
}

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# fetch_src PKG UPSTREAM_VERSION "REVISIONS" ORIG_FILE SHA256
# Unpacks into $DEPS/PKG-VERSION (Debian patches applied when the .dsc is available).
fetch_src() {
    pkg=$1 ver=$2 revs=$3 orig=$4 sum=$5
    dir=$DEPS/$pkg-$ver dl=$DEPS/dl
    if [ -f "$dir/.coai-ok" ] && [ "$(cat "$dir/.coai-ok")" = "$sum" ]; then return 0; fi
    run mkdir -p "$dl"
    dsc=
    for r in $revs; do
        if [ -f "$dl/${pkg}_$ver-$r.dsc" ] && [ -f "$dl/$orig" ]; then
            dsc=${pkg}_$ver-$r.dsc
            break
        fi
    done
    if [ -z "$dsc" ] && ! sha_ok "$dl/$orig" "$sum"; then
        # Our deb-src entries only when apt does not know the version yet (a machine may
        # already have equivalent ones; duplicates only make apt warn).
        show apt-cache showsrc "$pkg"
        if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q "^Version: $ver-"; then
            ensure_deb_src
            if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q "^Version: $ver-"; then
                apt_update_once
            fi
        fi
        for r in $revs; do
            # The mirror may lack the .dsc/.debian.tar.* of a revision while still serving the
            # shared orig tarball, so a failed download is not fatal; the sha256 check below is.
            if (cd "$dl" && run apt-get source --download-only "$pkg=$ver-$r"); then :; else
                say "note: apt-get source $pkg=$ver-$r did not fully succeed"
            fi
            if [ -f "$dl/${pkg}_$ver-$r.dsc" ]; then dsc=${pkg}_$ver-$r.dsc; break; fi
        done
    fi
    [ -f "$dl/$orig" ] || die "could not download $orig"
    show sha256sum "$dl/$orig"
    if ! sha_ok "$dl/$orig" "$sum"; then
        run rm -f "$dl/$orig"
        die "sha256 mismatch for $orig (expected $sum); file removed"
    fi
    run rm -rf "$dir" "$dir.tmp"
    if [ -n "$dsc" ]; then
        (cd "$dl" && run dpkg-source --no-copy -x "$dsc" "$dir.tmp")
    else
        say "note: no .dsc for $pkg $ver: unpacking the verified upstream tarball" \
            "without Debian patches"
        run mkdir -p "$dir.tmp"
        run tar -xf "$dl/$orig" -C "$dir.tmp" --strip-components=1
    fi
    printf '%s\n' "$sum" > "$dir.tmp/.coai-ok"
    run mv "$dir.tmp" "$dir"
}

# build_bearssl DEST CC CFLAGS [AR]: a private copy of the BearSSL tree, built with `make lib`.
build_bearssl() {
    dest=$1 cc=$2 cflags=$3 ar=${4:-ar}
    stamp="$BEARSSL_SHA $cc $cflags"
    if [ -f "$dest/.coai-ok" ] && [ "$(cat "$dest/.coai-ok")" = "$stamp" ] \
        && [ -f "$dest/build/libbearssl.a" ]; then return 0; fi
    run rm -rf "$dest"
    run cp -a "$BR" "$dest"
    run make -s -C "$dest" -j"$JOBS" CONF=Unix CC="$cc" AR="$ar" CFLAGS="$cflags" lib
    printf '%s\n' "$stamp" > "$dest/.coai-ok"
}

deps() {
    ensure_packages
    fetch_src cjson "$CJSON_VER" "$CJSON_REVS" "$CJSON_ORIG" "$CJSON_SHA"
    fetch_src nanopb "$NANOPB_VER" "$NANOPB_REVS" "$NANOPB_ORIG" "$NANOPB_SHA"
    fetch_src bearssl "$BEARSSL_VER" "$BEARSSL_REVS" "$BEARSSL_ORIG" "$BEARSSL_SHA"
}

bearssl_musl() {
    build_bearssl "$BR_MUSL" musl-gcc "-W -Wall -Os -ffunction-sections -fdata-sections"
}
bearssl_gcc() { build_bearssl "$BR_GCC" gcc "-W -Wall -O1 -g -fPIC"; }
bearssl_musl_a64() {
    build_bearssl "$BR_MUSL_A64" "$A64_CC" "-W -Wall -Os -ffunction-sections -fdata-sections" \
        aarch64-linux-gnu-ar
}

INC="-I. -Iproto -I$NP -I$CJ -I$BR/inc"
LIB_C="$NP/pb_common.c $NP/pb_encode.c $NP/pb_decode.c $CJ/cJSON.c"

# Regenerate proto/*.pb.[ch] into build/gen; returns 1 if the committed copies differ.
regen_protos() {
    run rm -rf "$BUILD/gen"
    run mkdir -p "$BUILD/gen"
    # shellcheck disable=SC2086
    if ! run "$PY" "$NP/generator/nanopb_generator.py" -q -I proto -D "$BUILD/gen" $PROTOS; then
        say "the nanopb generator failed"
        return 1
    fi
    stale=
    for f in $(cd "$BUILD/gen" && find . -type f -name '*.pb.[ch]' | sort); do
        cmp -s "$BUILD/gen/$f" "proto/$f" || stale="$stale proto/${f#./}"
    done
    for f in $(cd proto && find . -type f -name '*.pb.[ch]' | sort); do
        [ -f "$BUILD/gen/$f" ] || stale="$stale proto/${f#./}(not generated)"
    done
    if [ -n "$stale" ]; then
        say "generated code is stale:$stale (regenerated copies are in $BUILD/gen)"
        return 1
    fi
    say "generated code: proto/*.pb.[ch] match the regenerated copies"
}

# static_binary CC BEARSSL_BUILD OUT [FILE_ARCH]: the release binary, fully static, for the
# architecture CC compiles for (`file` must name FILE_ARCH when given).
static_binary() {
    scc=$1 sbr=$2 out=$3 arch=$4
    [ -f server.c ] || die "server.c not found"
    run mkdir -p "$BUILD"
    # No unwind tables: plain C that never unwinds (musl's thread cancellation does not
    # either); they cost 37 KB on x86-64 and 65 KB on arm64 (measured 2026-11-28).
    # shellcheck disable=SC2086
    run "$scc" -static -Os -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables \
        -fno-unwind-tables -Wl,--gc-sections -s $DEFS \
        -Iproto -I"$NP" -I"$CJ" -I"$BR/inc" server.c $PB_C $LIB_C "$sbr/build/libbearssl.a" \
        -lpthread -o "$out"
    run file "$out"
    file "$out" | grep -q 'statically linked' || die "$out is not static"
    [ -z "$arch" ] || file "$out" | grep -q "$arch" || die "$out is not an $arch binary"
    run ls -l "$out"
}

release() {
    bearssl_musl
    static_binary musl-gcc "$BR_MUSL" "$BUILD/cursor-oai" ""
}

# linux/arm64 on this x86-64 machine: Debian's cross compiler with musl for arm64, no emulation.
release_arm64() {
    bearssl_musl_a64
    static_binary "$A64_CC" "$BR_MUSL_A64" "$BUILD/cursor-oai-arm64" 'ARM aarch64'
}

debug() {
    [ -f server.c ] || die "server.c not found"
    bearssl_gcc
    run mkdir -p "$BUILD"
    # shellcheck disable=SC2086
    run gcc -g -O0 -Wall -Wextra $DEFS $INC server.c $PB_C $LIB_C "$BR_GCC/build/libbearssl.a" \
        -lpthread -lm -o "$BUILD/cursor-oai-debug"
}

# tests/docker.sh builds and runs the image, so CI needs a Docker engine. A fresh Debian
# machine has none: install Debian's docker.io (dockerd, containerd, runc) when dockerd is
# missing and this machine allows it (root, apt-get). tests/docker.sh starts dockerd itself and
# still prints "skipped: <reason>" where no engine can run (no privileges, no cgroups, ...).
# A failed install is not fatal here: that test then says why it skipped.
ensure_docker() {
    if command -v dockerd >/dev/null 2>&1; then return 0; fi
    if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
        say "note: dockerd is missing and docker.io cannot be installed here (needs root and" \
            "apt-get): tests/docker.sh will skip"
        return 0
    fi
    # apt_update_once exits on failure: run it in a subshell so that a failure only skips
    if ! (apt_update_once) || ! run env DEBIAN_FRONTEND=noninteractive apt-get install -y \
            --no-install-recommends docker.io; then
        say "note: installing docker.io failed: tests/docker.sh will skip"
    fi
}

# ---------------------------------------------------------------------------------------------
# Test mode

PASS=0
FAIL=0
SUMMARY=
FAILED_LOGS=
note() { SUMMARY="$SUMMARY$*
"; }
count() {   # count NAME PASSED FAILED [COMMENT]
    PASS=$((PASS + $2)); FAIL=$((FAIL + $3))
    note "$(printf '%-34s %5d passed, %d failed%s%s' "$1" "$2" "$3" "${SECS:+  [$SECS s]}" \
        "${4:+  ($4)}")"
    SECS=
}
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

# Last line of FILE if it is "RESULT p f"; sets RP/RF.
result_line() {
    RP= RF=
    last=$(tail -n 1 "$1" 2>/dev/null || true)
    case $last in "RESULT "*) ;; *) return 1 ;; esac
    # shellcheck disable=SC2086
    set -- $last
    [ $# = 3 ] && isnum "$2" && isnum "$3" || return 1
    RP=$2 RF=$3
}

show_log() {   # show_log FILE...: the tail of each, indented, for a failing program
    for lf in "$@"; do
        [ -s "$lf" ] || continue
        # the failed checks and the test-file lines of any traceback first: a section that
        # dies early prints its traceback above later checks, out of the tail's reach
        if grep -q '^FAIL' "$lf"; then
            say "---- $lf (failed checks; test lines of tracebacks)"
            grep -E '^FAIL|File ".*/tests/[^"]*", line' "$lf" | cut -c1-300 | head -n 30 \
                | sed 's/^/    /'
        fi
        say "---- $lf (last 40 lines)"
        tail -n 40 "$lf" | sed 's/^/    /'
    done
}

TMO=${COAI_TEST_TIMEOUT:-600}

# run_exec LOGBASE CMD...: run from the repo root within the time limit; its output goes to
# LOGBASE.out and .err, its exit status to LOGBASE.rc and its seconds to LOGBASE.secs.
run_exec() {
    rl=$1; shift
    show "$@" ">$rl.out" "2>$rl.err"
    rrc=0 rt0=$(date +%s)
    timeout "$TMO" "$@" >"$rl.out" 2>"$rl.err" </dev/null || rrc=$?
    echo "$rrc" >"$rl.rc"
    echo $(( $(date +%s) - rt0 )) >"$rl.secs"
}

# run_tally NAME LOGBASE: count the RESULT line of what run_exec left in LOGBASE.*
run_tally() {
    name=$1 log=$2
    rc=$(cat "$log.rc" 2>/dev/null || echo "none")
    SECS=$(cat "$log.secs" 2>/dev/null || true)
    if result_line "$log.out"; then
        skip=$(grep -h '^skipped:' "$log.out" | head -n 1)
        if [ "$rc" != 0 ] && [ "$RF" = 0 ]; then
            count "$name" "$RP" 1 "exit status $rc"
        elif [ "$RP" = 0 ] && [ "$RF" = 0 ] && [ -z "$skip" ]; then
            # a program that checked nothing and did not say why must not pass quietly
            count "$name" 0 1 "ran no check and printed no 'skipped:' reason"
        else
            count "$name" "$RP" "$RF" "$skip"
        fi
    else
        count "$name" 0 1 "no RESULT line, exit status $rc"
    fi
    if [ "$rc" != 0 ] || [ "$RF" != 0 ]; then
        show_log "$log.err" "$log.out"
        FAILED_LOGS="$FAILED_LOGS$log.out|$name
"
    fi
}

# The failed checks of every failing program again, just above the summary: the logs above
# are far apart, and a reader of only the end of the output still sees which checks failed.
failed_digest() {
    [ -n "$FAILED_LOGS" ] || return 0
    say ""
    say "==== failed checks"
    printf '%s' "$FAILED_LOGS" | while IFS='|' read -r lf nm; do
        say "-- $nm"
        if grep -q '^FAIL' "$lf" 2>/dev/null; then
            grep '^FAIL' "$lf" | cut -c1-240 | head -n 12 | sed 's/^/    /'
        elif grep -q 'error:' "$lf" 2>/dev/null; then     # a compiler's (built)
            grep 'error:' "$lf" | cut -c1-240 | head -n 12 | sed 's/^/    /'
        else
            tail -n 3 "$lf" 2>/dev/null | cut -c1-240 | sed 's/^/    /'
        fi
    done
}

# run_prog NAME LOGBASE CMD...: run from the repo root, count its RESULT line.
run_prog() {
    pn=$1 pl=$2; shift 2
    run_exec "$pl" "$@"
    run_tally "$pn" "$pl"
}

# exec_suite LOGBASE SCRIPT [NAME=VALUE...]: run_exec of an end-to-end script through its
# interpreter (a lost executable bit must never skip a suite), with that environment.
exec_suite() {
    el=$1 es=$2; shift 2
    case $es in
    *.py) run_exec "$el" env "$@" "$PY" "$es" ;;
    *) if head -n 1 "$es" | grep -q bash; then run_exec "$el" env "$@" bash "$es"
       else run_exec "$el" env "$@" sh "$es"; fi ;;
    esac
}

cc_test() {    # cc_test OUT SRC...: strict C99 + sanitizers, linked with the test libs
    out=$1; shift
    # shellcheck disable=SC2086
    run gcc -std=c99 -g -O1 -Wall -Wextra -Werror $SAN $DEFS $INC "$@" $TLIBS \
        "$BR_GCC/build/libbearssl.a" -lm -lpthread -o "$out"
}

# in_lanes LIST BUILD: the programs LIST prints, one "OUT LOG SRC..." a line, each built by
# `BUILD OUT SRC...` with its diagnostics (stderr) in LOG and its exit status in LOG.rc, in
# $JOBS background lanes: lane k builds every $JOBS-th line from the k-th, one after another.
# The compiler is most of the unit-test steps' time, and these programs take about as long
# each (the header is most of every one), so the lanes end together. Returns when all have.
in_lanes() {
    il_pids="" il_k=0
    while [ "$il_k" -lt "$JOBS" ]; do
        (
            il_i=0
            "$1" | while read -r il_out il_log il_src; do
                if [ $((il_i % JOBS)) = "$il_k" ]; then
                    il_rc=0
                    # shellcheck disable=SC2086
                    "$2" "$il_out" $il_src 2>"$il_log" || il_rc=$?
                    echo "$il_rc" >"$il_log.rc"
                fi
                il_i=$((il_i + 1))
            done
        ) &
        il_pids="$il_pids $!"
        il_k=$((il_k + 1))
    done
    for p in $il_pids; do wait "$p" || true; done
}

# built NAME LOG: 0 when in_lanes built it (any diagnostics shown); else the compiler's
# output is shown, and listed again above the summary (failed_digest).
built() {
    if [ "$(cat "$2.rc" 2>/dev/null)" = 0 ]; then
        [ ! -s "$2" ] || { say "---- $2 (compiler output)"; sed 's/^/    /' "$2"; }
        return 0
    fi
    say "---- $2 (compiler output; exit status $(cat "$2.rc" 2>/dev/null || echo none))"
    sed 's/^/    /' "$2"
    FAILED_LOGS="$FAILED_LOGS$2|$1 (does not compile)
"
    return 1
}

# The programs of test_mode's steps 3 (unit tests) and 4 (fuzz targets over their corpora),
# for in_lanes.
test_programs() {
    for src in tests/t_*.c; do
        [ -f "$src" ] || continue
        name=$(basename "$src" .c)
        say "$T/$name $T/log/$name.cc $src"
    done
    for src in tests/fuzz/fz_*.c; do
        [ -f "$src" ] || continue
        stem=$(basename "$src" .c)
        say "$T/$stem $T/log/$stem.cc $src tests/fuzz/replay.c"
    done
}

# The unit tests cross-built for arm64 (plain C: no sanitizers), for in_lanes.
arm64_programs() {
    for src in tests/t_*.c; do
        [ -f "$src" ] || continue
        name=$(basename "$src" .c)
        say "$A/$name $A/log/$name.cc $src"
    done
}
cc_arm64() {   # cc_arm64 OUT SRC...: linked with the arm64 libraries
    out=$1; shift
    # shellcheck disable=SC2086
    run "$A64_CC" -static -std=c99 -O1 -Wall -Wextra -Werror $DEFS $INC "$@" $ALIBS \
        "$BR_MUSL_A64/build/libbearssl.a" -lm -lpthread -o "$out"
}

# 6c of test_mode: the linux/arm64 binary, run under qemu-aarch64-static (user-mode emulation,
# called directly: no binfmt registration). Its static/size/--version checks, the unit tests
# built by the cross compiler (plain C, so no sanitizers: those stay with the native pass) and
# tests/arm64_e2e.py once per transport to the fake.
arm64_mode_tests() {
    a0=$(date +%s)
    A=$T/arm64
    run mkdir -p "$A/lib" "$A/log"
    if run sh ./build.sh _release_arm64; then
        SECS=$(( $(date +%s) - a0 ))
        count "release build (arm64)" 1 0
    else
        count "release build (arm64)" 0 1
        return 0
    fi
    run_prog "check_static (arm64, qemu)" "$A/log/check_static" \
        sh tests/check_static.sh "$BUILD/cursor-oai-arm64" arm64
    s86=$(wc -c <"$BUILD/cursor-oai" 2>/dev/null || echo 0)
    sa64=$(wc -c <"$BUILD/cursor-oai-arm64")
    note "$(printf '%-34s x86-64 %d bytes (%d KiB), arm64 %d bytes (%d KiB); limit 700 KiB' \
        "release binary sizes" "$s86" $(( (s86 + 1023) / 1024 )) "$sa64" \
        $(( (sa64 + 1023) / 1024 )))"

    # The unit tests: the libraries once, then the programs in $JOBS lanes (in_lanes), then
    # each under the emulator.
    u0=$(date +%s)
    ALIBS=
    for src in $LIB_C $PB_C; do
        o=$A/lib/$(basename "$src" .c).o
        # shellcheck disable=SC2086
        run "$A64_CC" -std=c99 -O1 $DEFS $INC -c "$src" -o "$o"
        ALIBS="$ALIBS $o"
    done
    in_lanes arm64_programs cc_arm64
    say "arm64 unit tests compiled, $JOBS at a time: $(( $(date +%s) - u0 )) s"
    up=0 uf=0 ubad=
    for src in tests/t_*.c; do
        [ -f "$src" ] || continue
        name=$(basename "$src" .c)
        if ! built "$name (arm64)" "$A/log/$name.cc"; then
            uf=$((uf + 1)) ubad="$ubad $name(does not compile)"
            continue
        fi
        run_exec "$A/log/$name" "$QEMU_A64" "$A/$name"
        urc=$(cat "$A/log/$name.rc")
        if result_line "$A/log/$name.out" && [ "$urc" = 0 ] && [ "$RF" = 0 ]; then
            up=$((up + RP))
        else
            up=$((up + ${RP:-0})) uf=$((uf + ${RF:-0}))
            # a crash or a missing RESULT line counts as one failure, like run_tally's
            if [ "${RF:-0}" = 0 ]; then uf=$((uf + 1)); fi
            ubad="$ubad $name(exit status $urc)"
            show_log "$A/log/$name.err" "$A/log/$name.out"
        fi
    done
    SECS=$(( $(date +%s) - u0 ))
    count "t_*.c (arm64, qemu)" "$up" "$uf" "${ubad:+failing:$ubad}"

    run_prog "arm64_e2e.py (arm64, qemu)" "$A/log/e2e_http1" \
        env COAI_TEST_TRANSPORT=http1 "$PY" tests/arm64_e2e.py
    run_prog "arm64_e2e.py (arm64, qemu, HTTP/2)" "$A/log/e2e_h2" \
        env COAI_TEST_TRANSPORT=h2 "$PY" tests/arm64_e2e.py
    say "arm64 step: $(( $(date +%s) - a0 )) s"
}

test_mode() {
    T=$BUILD/test
    run rm -rf "$T"
    run mkdir -p "$T/lib" "$T/log"
    export COAI_VECTORS="${COAI_VECTORS:-../shared/spec/vectors}"
    [ -d "$COAI_VECTORS" ] || say "warning: COAI_VECTORS=$COAI_VECTORS is not a directory"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

    # 1. Generated code is current.
    if regen_protos; then count "proto regeneration" 1 0; else count "proto regeneration" 0 1; fi

    # 2. Dependency + generated objects, ASan/UBSan (third-party code: no -Werror).
    bearssl_gcc
    TLIBS=
    for src in $LIB_C $PB_C; do
        o=$T/lib/$(basename "$src" .c).o
        # shellcheck disable=SC2086
        run gcc -std=c99 -g -O1 $SAN $DEFS $INC -c "$src" -o "$o"
        TLIBS="$TLIBS $o"
    done

    # 3. Unit test programs. They and step 4's fuzz targets are compiled first, $JOBS at a
    #    time (in_lanes), then run one after another as before.
    c0=$(date +%s)
    in_lanes test_programs cc_test
    say "unit and fuzz programs compiled, $JOBS at a time: $(( $(date +%s) - c0 )) s"
    for src in tests/t_*.c; do
        [ -f "$src" ] || continue
        name=$(basename "$src" .c)
        if built "$name" "$T/log/$name.cc"; then
            run_prog "$name" "$T/log/$name" "$T/$name"
        else
            count "$name" 0 1 "does not compile"
        fi
    done

    # 4. Fuzz corpora replayed through each target; each corpus file is one test.
    for src in tests/fuzz/fz_*.c; do
        [ -f "$src" ] || continue
        stem=$(basename "$src" .c)
        name=${stem#fz_}
        corpus=tests/fuzz/corpus/$name
        if ! built "$stem" "$T/log/$stem.cc"; then
            count "$stem (replay)" 0 1 "does not compile"; continue
        fi
        nfiles=$(find "$corpus" -type f 2>/dev/null | wc -l)
        if [ "$nfiles" = 0 ]; then count "$stem (replay)" 0 1 "no corpus in $corpus"; continue; fi
        log=$T/log/$stem
        show "$T/$stem" "$corpus" ">$log.out" "2>$log.err"
        rc=0
        timeout "$TMO" "$T/$stem" "$corpus" >"$log.out" 2>"$log.err" </dev/null || rc=$?
        if [ "$rc" = 0 ] && result_line "$log.out" && [ "$RF" = 0 ] && [ "$RP" = "$nfiles" ]; then
            count "$stem (replay)" "$RP" 0
        else
            # Something failed: replay file by file so each input gets its own verdict.
            show_log "$log.err"
            p=0 f=0 bad=
            for cf in $(find "$corpus" -type f | sort); do
                show "$T/$stem" "$cf"
                if timeout "$TMO" "$T/$stem" "$cf" >/dev/null 2>&1 </dev/null; then p=$((p + 1))
                else f=$((f + 1)); bad="$bad $(basename "$cf")"; fi
            done
            count "$stem (replay)" "$p" "$f" "failing:$bad"
        fi
    done

    # 5. The header alone, C99 pedantic, with and without the implementation.
    for cc in gcc clang; do
        for impl in 0 1; do
            tu=$T/hdr_${cc}_$impl.c
            {
                [ "$impl" = 1 ] && printf '#define CURSOR_OAI_IMPLEMENTATION\n'
                printf '#include "cursor_oai.h"\n'
            } >"$tu"
            what="header alone ($cc, impl=$impl)"
            # shellcheck disable=SC2086
            if run "$cc" -std=c99 -Wall -Wextra -pedantic -Werror $DEFS $INC -c "$tu" -o "$tu.o"
            then count "$what" 1 0; else count "$what" 0 1; fi
        done
    done

    # 5b. server.c with every warning as an error, for each compiler it is built with (the
    #     release build itself compiles third-party code too, so it cannot use -Werror).
    for cc in gcc clang musl-gcc "$A64_CC"; do
        command -v "$cc" >/dev/null 2>&1 || { count "server.c -Werror ($cc)" 0 1 "$cc missing"; continue; }
        # shellcheck disable=SC2086
        if run "$cc" -std=c99 -O2 -Wall -Wextra -Werror $DEFS -Iproto -I"$NP" -I"$CJ" \
            -I"$BR/inc" -c server.c -o "$T/server_$cc.o"
        then count "server.c -Werror ($cc)" 1 0; else count "server.c -Werror ($cc)" 0 1; fi
    done

    # 6. Release binary: builds, is static, answers --version. A child process, so that
    #    `set -e` stays in force inside it (it is ignored in an `if` condition).
    if run sh ./build.sh _release; then
        count "release build" 1 0
        run_prog "check_static" "$T/log/check_static" sh tests/check_static.sh "$BUILD/cursor-oai"
    else
        count "release build" 0 1
    fi

    # 6c. The linux/arm64 binary under qemu-aarch64-static (arm64_mode_tests above).
    arm64_mode_tests

    # 6b. The vendoring example: examples/translate.c built from copied files only, as
    #     examples/README.md says, and run on its recorded sample (one test).
    if [ -f examples/check.sh ]; then
        run_prog "examples/translate.c" "$T/log/examples" env CFLAGS="$SAN" sh examples/check.sh \
            "$T/examples" "$NP" "$CJ" "$BR_GCC" "$BR_GCC/build/libbearssl.a"
    fi

    # 7. End-to-end scripts against the release binary, each once per transport to Cursor
    #    (tests/e2e/harness.py, COAI_TEST_TRANSPORT): HTTP/1.1 (RunSSE + BidiAppend) here, and
    #    HTTP/2 (the Run stream) in a second lane beside it. The suites mostly wait on
    #    sockets, timers and the fake, so two lanes on two cores take little more than one;
    #    they share no port (each proxy and fake binds its own), no temporary directory and no
    #    client HOME (tests/e2e/clients.py: one directory per process). The HTTP/2 lane runs
    #    in reverse order, so the two passes of one suite never run at once. Not in the
    #    HTTP/2 lane: h2_test.py (the product's own choice between the two transports) and
    #    docker.sh (the image runs with that default choice, HTTP/2 first).
    export CURSOR_OAI_BIN="$BUILD/cursor-oai"
    ensure_docker
    # Both npm client sets before the lanes start: a suite early in one lane must never find
    # them half-installed by the other lane (it would skip its client checks). A failure here
    # is not counted on its own: the suites that need the clients fail and say why.
    run_exec "$T/log/npm_clients" sh tests/e2e_run.sh --install-only
    [ "$(cat "$T/log/npm_clients.rc")" = 0 ] || { say "note: npm clients for e2e_run.sh:"; \
        show_log "$T/log/npm_clients.out"; }
    run_exec "$T/log/agent_clients" "$PY" tests/e2e/clients.py install
    [ "$(cat "$T/log/agent_clients.rc")" = 0 ] || { say "note: agent CLIs (build/clients):"; \
        show_log "$T/log/agent_clients.out"; }
    H2_SUITES=
    for s in tests/e2e_*.sh tests/*_test.py; do
        case $s in tests/h2_test.py) continue ;; esac
        [ -f "$s" ] && H2_SUITES="$s $H2_SUITES"
    done
    (
        for s in $H2_SUITES; do
            exec_suite "$T/log/h2_$(basename "$s")" "$s" COAI_TEST_TRANSPORT=h2
        done
    ) &
    h2_lane=$!
    # tests/docker.sh builds and runs the image; it prints "skipped: <reason>" when no
    # docker daemon can be used (it starts dockerd itself when installed and root).
    # tests/fake/test_fake.py checks the fake itself (that it refuses and stalls where Cursor
    # would): it needs no proxy, so it runs once, in this lane.
    for s in tests/e2e_*.sh tests/*_test.py tests/fake/test_fake.py tests/docker.sh; do
        [ -f "$s" ] || continue
        name=$(basename "$s")
        exec_suite "$T/log/$name" "$s" COAI_TEST_TRANSPORT=http1
        run_tally "$name" "$T/log/$name"
    done
    t_wait=$(date +%s)
    wait "$h2_lane" || true
    say "HTTP/2 lane: waited $(( $(date +%s) - t_wait )) s for it after the HTTP/1.1 lane"
    for s in $H2_SUITES; do
        run_tally "$(basename "$s") (HTTP/2)" "$T/log/h2_$(basename "$s")"
    done

    # 8. The run engine under ASan/UBSan: server.c built with the sanitizers (glibc), then the
    #    held-run, quota/images/fields and HTTP/2 suites again against it. A report aborts the
    #    proxy, and the suite fails with it.
    # shellcheck disable=SC2086
    if run gcc -std=c99 -g -O1 $SAN $DEFS -Iproto -I"$NP" -I"$CJ" -I"$BR/inc" server.c $PB_C \
        $LIB_C "$BR_GCC/build/libbearssl.a" -lpthread -lm -o "$T/cursor-oai-asan"; then
        asan_saved=$ASAN_OPTIONS
        export E2E_PROXY_CMD="[\"$T/cursor-oai-asan\"]"
        export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
        for s in held_test.py quota_images_fields_test.py h2_test.py; do
            run_prog "$s (ASan/UBSan server)" "$T/log/asan_$s" "$PY" "tests/$s"
        done
        # held runs over HTTP/2: the holder, heartbeats and tool results on a Run stream
        run_prog "held_test.py (ASan/UBSan server, HTTP/2)" "$T/log/asan_h2_held_test.py" \
            env COAI_TEST_TRANSPORT=h2 "$PY" tests/held_test.py
        unset E2E_PROXY_CMD
        export ASAN_OPTIONS="$asan_saved"
    else
        count "server.c ASan/UBSan build" 0 1
    fi

    failed_digest
    say ""
    say "==== summary"
    printf '%s' "$SUMMARY"
    say "$PASS passed, $FAIL failed"
    [ "$FAIL" = 0 ]
}

# ---------------------------------------------------------------------------------------------
# Fuzz mode

fuzz_mode() {
    secs=${1:-60}
    isnum "$secs" || die "fuzz: SECONDS must be a number"
    F=$BUILD/fuzz
    run mkdir -p "$F/lib" "$F/bin" "$F/artifacts"
    bearssl_gcc
    FLIBS=
    for src in $LIB_C $PB_C; do
        o=$F/lib/$(basename "$src" .c).o
        # shellcheck disable=SC2086
        run clang -g -O1 -fsanitize=fuzzer-no-link,address,undefined $DEFS $INC -c "$src" -o "$o"
        FLIBS="$FLIBS $o"
    done
    status=0 report=
    for src in tests/fuzz/fz_*.c; do
        [ -f "$src" ] || continue
        stem=$(basename "$src" .c)
        name=${stem#fz_}
        # shellcheck disable=SC2086
        run clang -std=c99 -g -O1 -Wall -Wextra -fsanitize=fuzzer,address,undefined \
            -fno-sanitize-recover=undefined $DEFS $INC "$src" $FLIBS \
            "$BR_GCC/build/libbearssl.a" -lm -lpthread -o "$F/bin/$stem"
        run mkdir -p "$F/$name"
        if [ -d "tests/fuzz/corpus/$name" ]; then
            run cp -R "tests/fuzz/corpus/$name/." "$F/$name/"
        fi
        dict=
        [ -f "tests/fuzz/$name.dict" ] && dict=-dict=tests/fuzz/$name.dict
        log=$F/$stem.log
        rc=0
        show "$F/bin/$stem" -max_total_time="$secs" -timeout=20 -print_final_stats=1 \
            -artifact_prefix="$F/artifacts/$stem-" $dict "$F/$name" "2>$log"
        # shellcheck disable=SC2086
        "$F/bin/$stem" -max_total_time="$secs" -timeout=20 -print_final_stats=1 \
            -artifact_prefix="$F/artifacts/$stem-" $dict "$F/$name" 2>"$log" || rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
        if [ -z "$eps" ]; then
            eps=$(sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
        fi
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
        files=$(find "$F/$name" -type f | wc -l)
        line="$stem: ${execs:-?} execs, ${eps:-?} exec/s, ${cov:-cov: ?}, corpus $files files"
        if [ "$rc" = 0 ]; then line="$line, ok"; else
            status=1
            line="$line, FAILED (exit $rc; log $log; artifacts $F/artifacts/$stem-*)"
            grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -n 5 \
                | sed 's/^/    /'
        fi
        say "$line"
        report="$report$line
"
    done
    say ""
    say "==== fuzz summary (${secs}s per target)"
    printf '%s' "$report"
    return "$status"
}

# ---------------------------------------------------------------------------------------------

mode=${1:-release}
[ $# -gt 0 ] && shift
case $mode in
release) PACKAGES=$PACKAGES_BUILD; deps
    regen_protos || say "warning: committed generated code differs"; release ;;
_release) release ;;   # internal: used by test mode after deps
arm64) PACKAGES="$PACKAGES_BUILD $PACKAGES_ARM64"; deps
    regen_protos || say "warning: committed generated code differs"; release_arm64 ;;
_release_arm64) release_arm64 ;;   # internal: used by test mode after deps
test-arm64)   # only test's arm64 step (6c), after the x86-64 release build it compares sizes with
    PACKAGES="$PACKAGES_BUILD $PACKAGES_ARM64 qemu-user-static python3-h2"; deps
    T=$BUILD/test-arm64
    run rm -rf "$T"
    export COAI_VECTORS="${COAI_VECTORS:-../shared/spec/vectors}"
    release
    arm64_mode_tests
    failed_digest
    printf '%s' "$SUMMARY"
    say "$PASS passed, $FAIL failed"
    [ "$FAIL" = 0 ]
    ;;
debug) PACKAGES=$PACKAGES_BUILD; deps
    regen_protos || say "warning: committed generated code differs"; debug ;;
test) PACKAGES="$PACKAGES $PACKAGES_ARM64"; deps; test_mode ;;
fuzz) deps; fuzz_mode "$@" ;;
deps) PACKAGES="$PACKAGES $PACKAGES_ARM64"; deps; bearssl_musl; bearssl_gcc; bearssl_musl_a64
    say "dependencies ready in $DEPS" ;;
bench)
    if [ ! -f tests/bench.sh ]; then
        say "bench: not yet available (tests/bench.sh is missing)"
        exit 1
    fi
    deps; release; bearssl_gcc
    # the bench's C upstream and floors (tests/bench/upstream.c, floor_h*.c) only: the product
    # stays dependency-free
    PACKAGES="libnghttp2-dev libssl-dev"; ensure_packages
    # the load generator links the glibc BearSSL build and the same nanopb/cJSON sources
    export COAI_BENCH_NP="$NP" COAI_BENCH_CJ="$CJ" COAI_BENCH_BR="$BR"
    export COAI_BENCH_BRLIB="$BR_GCC/build/libbearssl.a"
    if [ -x tests/bench.sh ]; then run ./tests/bench.sh "$@"; else run sh tests/bench.sh "$@"; fi
    ;;
bench-toolloop)   # held runs vs one run per request, five-step tool loop, both transports (tests/bench/toolloop.py)
    deps; release
    CURSOR_OAI_BIN="$BUILD/cursor-oai" run "$PY" tests/bench/toolloop.py "$@"
    ;;
bench-probe22)    # the second probe's figures: big bodies, stalled appends, peak RSS (tests/bench/probe22.py)
    deps; release
    CURSOR_OAI_BIN="$BUILD/cursor-oai" run "$PY" tests/bench/probe22.py "$@"
    ;;
docker)
    deps; release; ensure_docker
    T=$BUILD/test
    run mkdir -p "$T/log"
    export CURSOR_OAI_BIN="$BUILD/cursor-oai"
    t0=$(date +%s)
    run_prog "docker.sh" "$T/log/docker.sh" bash tests/docker.sh
    say "tests/docker.sh took $(( $(date +%s) - t0 )) s"
    printf '%s' "$SUMMARY"
    [ "$FAIL" = 0 ]
    ;;
clean)
    if [ -d "$BUILD" ]; then
        run find "$BUILD" -mindepth 1 -maxdepth 1 ! -name deps -exec rm -rf {} +
    fi
    say "kept the dependency cache $DEPS (rm -rf it to refetch)"
    ;;
-h | --help | help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' ;;
*) die "unknown mode '$mode' (release, arm64, test, debug, fuzz [SECS], deps, bench, clean)" ;;
esac
