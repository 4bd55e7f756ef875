#!/bin/sh
# End-to-end suite: build/cursor-oai between real clients (curl, openai npm, OpenCode) and the
# fake Cursor upstream. Prints `RESULT <passed> <failed>` as its last line.
#   tests/e2e_run.sh [--quick] [--only curl,sdk,opencode,tunnel,faults,tls,spare,load]
#                    [--harness-only]
#   tests/e2e_run.sh --install-only   only install the npm clients (build.sh test does this
#                                     before its two lanes start)
# Env: E2E_PROXY_CMD='["argv", "..."]' runs another proxy command instead of build/cursor-oai
# (used to validate the harness itself); E2E_TIMEOUT (seconds, default 1500).
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

harness_only=0 install_only=0
for a in "$@"; do
    [ "$a" = "--harness-only" ] && harness_only=1
    [ "$a" = "--install-only" ] && install_only=1
done
if [ $harness_only = 0 ] && [ -z "${E2E_PROXY_CMD:-}" ] && [ ! -x build/cursor-oai ]; then
    echo "skipped: build/cursor-oai missing (build it first)"
    echo "RESULT 0 0"
    exit 0
fi

# npm clients, exact versions in tests/e2e/package.json (+ lock),, cached in build/npm across runs.
NPM_DIR=build/npm
stamp=$(cat tests/e2e/package.json tests/e2e/package-lock.json | sha256sum | cut -c1-16)
if [ "$(cat "$NPM_DIR/.stamp" 2>/dev/null)" != "$stamp" ] || \
   [ ! -x "$NPM_DIR/node_modules/.bin/opencode" ]; then
    mkdir -p "$NPM_DIR"
    cp tests/e2e/package.json tests/e2e/package-lock.json "$NPM_DIR/"
    echo "installing npm clients into $NPM_DIR ..."
    if ! (cd "$NPM_DIR" &&
          timeout 900 npm install --no-audit --no-fund --no-save >npm-install.log 2>&1); then
        tail -20 "$NPM_DIR/npm-install.log"
        echo "npm install failed"
        echo "RESULT 0 1"
        exit 1
    fi
    echo "$stamp" > "$NPM_DIR/.stamp"
fi
if [ $install_only = 1 ]; then
    echo "npm clients ready in $NPM_DIR"
    exit 0
fi

work=$(mktemp -d /tmp/coai-e2e-run.XXXXXX)
pidfile="$work/pids"
resfile="$work/result"
: > "$pidfile"
pypid=""
cleanup() {
    [ -n "$pypid" ] && kill -TERM "$pypid" 2>/dev/null && sleep 1
    # every process the suite started runs in its own process group; kill exactly those
    for p in $(cat "$pidfile" 2>/dev/null); do kill -KILL -- "-$p" 2>/dev/null; done
    [ -n "$pypid" ] && kill -KILL "$pypid" 2>/dev/null
    rm -rf "$work"
}
trap 'cleanup; exit 130' INT TERM
E2E_PIDFILE="$pidfile" E2E_RESULT_FILE="$resfile" \
    timeout -k 10 "${E2E_TIMEOUT:-1500}" "$PY" tests/e2e/run_e2e.py "$@" &
pypid=$!
wait "$pypid"
rc=$?
pypid=""
if [ -s "$resfile" ]; then
    res=$(cat "$resfile")
else
    echo "suite did not finish (exit $rc)"
    res="RESULT 0 1"
fi
cleanup
echo "$res"
