#!/bin/sh
# tests/check_static.sh [BIN] - the release binary is fully static and answers --version.
# Prints "RESULT <passed> <failed>" last. BIN defaults to $CURSOR_OAI_BIN, then build/cursor-oai.
set -u
bin=${1:-${CURSOR_OAI_BIN:-build/cursor-oai}}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

if [ -x "$bin" ]; then ok "$bin exists"; else bad "$bin missing or not executable"; fi
desc=$(file -b "$bin" 2>&1)
case $desc in
*"statically linked"* | *"static-pie linked"*) ok "file: $desc" ;;
*) bad "file does not say statically linked: $desc" ;;
esac
lddout=$(ldd "$bin" 2>&1)
case $lddout in
*"not a dynamic executable"* | *"statically linked"*) ok "ldd: $lddout" ;;
*) bad "ldd lists dynamic dependencies: $lddout" ;;
esac
rc=0
ver=$("$bin" --version 2>&1) || rc=$?
if [ "$rc" = 0 ]; then ok "--version exits 0"; else bad "--version exit status $rc"; fi
if printf '%s\n' "$ver" | grep -Eq '[0-9]+\.[0-9]+'; then ok "--version prints a version: $ver"
else bad "--version output has no version number: $ver"; fi
echo "RESULT $pass $fail"
[ "$fail" = 0 ]
