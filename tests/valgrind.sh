#!/bin/sh
# Memory check: build/cursor-oai-debug (dynamic, -g -O0) under valgrind through a short
# e2e-like run against the fake Cursor upstream (streaming and non-streaming chats, a tool call,
# a client disconnect, upstream errors), then SIGTERM; reports valgrind's "definitely lost" and
# error counts. Slow (about a minute), so ./build.sh test does NOT run it. Run it by hand:
#   tests/valgrind.sh              build the debug binary (./build.sh debug), then check it
#   tests/valgrind.sh --no-build   check the existing build/cursor-oai-debug
# Prints `RESULT <passed> <failed>` last; exit status 0 only when valgrind found nothing.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if ! command -v valgrind >/dev/null 2>&1; then
    echo "skipped: valgrind is not installed (apt-get install valgrind)"
    echo "RESULT 0 0"
    exit 0
fi
if [ "${1:-}" != "--no-build" ]; then
    log=$(mktemp /tmp/coai-valgrind-build.XXXXXX)
    if ! ./build.sh debug >"$log" 2>&1; then
        tail -30 "$log"
        echo "debug build failed"
        echo "RESULT 0 1"
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
fi
if [ ! -x build/cursor-oai-debug ]; then
    echo "build/cursor-oai-debug missing"; echo "RESULT 0 1"; exit 1
fi
exec timeout -k 10 900 "$PY" tests/faults/valgrind_run.py build/cursor-oai-debug
