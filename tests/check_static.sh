#!/bin/sh
# tests/check_static.sh [BIN [arm64]] - the release binary is fully static, at most 700 KiB,
# and answers --version. With `arm64`, BIN is the linux/arm64 build: `file` must say AArch64,
# and --version runs under Debian's qemu-aarch64-static (user mode, called directly).
# Prints "RESULT <passed> <failed>" last. BIN defaults to $CURSOR_OAI_BIN, then build/cursor-oai.
set -u
bin=${1:-${CURSOR_OAI_BIN:-build/cursor-oai}}
arch=${2:-}
max_kib=700     # the size the README promises room under, for every architecture
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

if [ -x "$bin" ]; then ok "$bin exists"; else bad "$bin missing or not executable"; fi
desc=$(file -b "$bin" 2>&1)
case $desc in
*"statically linked"* | *"static-pie linked"*) ok "file: $desc" ;;
*) bad "file does not say statically linked: $desc" ;;
esac
run=
if [ "$arch" = arm64 ]; then
    case $desc in *"ARM aarch64"*) ok "file: an AArch64 binary" ;;
    *) bad "file does not say ARM aarch64: $desc" ;; esac
    run=qemu-aarch64-static
fi
size=$(wc -c <"$bin" 2>/dev/null || echo 0)
size=$((size + 0))
if [ "$size" -gt 0 ] && [ "$size" -le $((max_kib * 1024)) ]; then
    ok "size $size bytes ($(( (size + 1023) / 1024 )) KiB) is at most $max_kib KiB"
else bad "size $size bytes is over $max_kib KiB (or the file is missing)"; fi
lddout=$(ldd "$bin" 2>&1)
case $lddout in
*"not a dynamic executable"* | *"statically linked"*) ok "ldd: $lddout" ;;
*) bad "ldd lists dynamic dependencies: $lddout" ;;
esac
rc=0
ver=$($run "$bin" --version 2>&1) || rc=$?
if [ "$rc" = 0 ]; then ok "--version exits 0"; else bad "--version exit status $rc"; fi
if printf '%s\n' "$ver" | grep -Eq '[0-9]+\.[0-9]+'; then ok "--version prints a version: $ver"
else bad "--version output has no version number: $ver"; fi
echo "RESULT $pass $fail"
[ "$fail" = 0 ]
