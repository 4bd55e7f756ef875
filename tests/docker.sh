#!/bin/bash
# Container test: build the image from the Dockerfile, check its size and user, and run it
# against the fake Cursor upstream (tests/fake/). Prints `RESULT <passed> <failed>` last;
# `skipped: <reason>` + `RESULT 0 0` when Docker is not usable here.
#   tests/docker.sh
# Env: COAI_DOCKER_BASE   builder base image (default cursor-oai/bookworm-base:local; a missing
#                         cursor-oai/* image is made with debootstrap + docker import, so no
#                         registry is needed)
#      COAI_DOCKER_KEEP=1 keep the built images (a rebuild then reuses the build cache)
#      COAI_DOCKER_BUILD_TIMEOUT  seconds for `docker build` (default 1800)
#      COAI_DOCKER_LOCK_WAIT      seconds to wait for another run of this test on the same
#                                 machine (default 1200; it would share or stop our dockerd)
#      COAI_DOCKER_ARM64=1        also build the image for linux/amd64 and linux/arm64 in one
#                                 command (docker buildx, else Debian's buildah; no emulation)
#                                 and check the binary in each (section 8)
# Everything it starts (containers, volumes, the fake, a dockerd it had to start) is removed
# again, also on failure or interrupt. The base image is kept.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BASE=${COAI_DOCKER_BASE:-cursor-oai/bookworm-base:local}
IMAGE=cursor-oai:test
STAGE_LABEL=org.cursor-oai.stage=build      # set on the builder stage by the Dockerfile
MAX_SIZE=$((2 * 1024 * 1024))
TAG=coai-test-$$
WORK=$ROOT/build/docker-test
KEY=test-client-key-$$-$RANDOM
CLIENT_VERSION=cli-2026.10.01-14929f9    # the newest build seen; not the default (the variable must reach the run)

PASS=0 FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() {   # check NAME CMD...: pass when CMD succeeds
    name=$1; shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}
skip() { echo "skipped: $*"; echo "RESULT 0 0"; exit 0; }
finish() {
    [ -n "${T_ALL:-}" ] && echo "docker test: $(( $(date +%s) - T_ALL )) s in all"
    echo "RESULT $PASS $FAIL"; [ "$FAIL" = 0 ] && exit 0; exit 1
}
d() { timeout -k 5 "${DT:-120}" docker "$@"; }   # every docker call is bounded

# ---------------------------------------------------------------------------------------------
# Cleanup: exactly what this run created.

DOCKERD_PID='' FAKE_PID='' CONTAINERS='' VOLUMES='' BUILT=0 BUILT_A64=0
IMAGE_A64=cursor-oai:test-arm64
# shellcheck disable=SC2317   # called from the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    for c in $CONTAINERS; do DT=30 d rm -f -v "$c" >/dev/null 2>&1; done
    for v in $VOLUMES; do DT=30 d volume rm -f "$v" >/dev/null 2>&1; done
    if [ "$BUILT_A64" = 1 ] && [ "${COAI_DOCKER_KEEP:-0}" != 1 ]; then
        DT=60 d rmi -f "$IMAGE_A64" >/dev/null 2>&1
    fi
    if [ "$BUILT" = 1 ] && [ "${COAI_DOCKER_KEEP:-0}" != 1 ]; then
        DT=60 d rmi -f "$IMAGE" >/dev/null 2>&1
        # The legacy builder leaves the builder stage as an untagged image (~1.5 GB with the
        # toolchain); the Dockerfile labels that stage so that only ours are removed.
        for i in $(DT=30 d images -q --filter dangling=true --filter "label=$STAGE_LABEL"); do
            DT=120 d rmi "$i" >/dev/null 2>&1
        done
    fi
    if [ -n "$FAKE_PID" ]; then
        kill -TERM -- "-$FAKE_PID" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$FAKE_PID" 2>/dev/null || break; sleep 0.3; done
        kill -KILL -- "-$FAKE_PID" 2>/dev/null
    fi
    if [ -n "$DOCKERD_PID" ]; then
        echo "stopping the dockerd this test started (pid $DOCKERD_PID)" >&2
        kill -TERM "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$DOCKERD_PID" 2>/dev/null
    fi
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# 1. A usable daemon

command -v docker >/dev/null 2>&1 || skip "docker is not installed (apt-get install docker.io)"
mkdir -p build
T_ALL=$(date +%s)
# One run per machine at a time (other checkouts too): a second run would use, and then stop,
# the dockerd the first one started, and both tag cursor-oai:test.
if command -v flock >/dev/null 2>&1; then
    exec 9>/tmp/cursor-oai-docker-test.lock
    if ! flock -n 9; then
        echo "waiting for another tests/docker.sh on this machine" \
             "(lock /tmp/cursor-oai-docker-test.lock)"
        t0=$(date +%s)
        if ! flock -w "${COAI_DOCKER_LOCK_WAIT:-1200}" 9; then
            bad "another tests/docker.sh held the lock for ${COAI_DOCKER_LOCK_WAIT:-1200} s"
            finish
        fi
        echo "got the lock after $(( $(date +%s) - t0 )) s"
    fi
fi
if ! DT=20 d info >/dev/null 2>&1; then
    [ -z "${DOCKER_HOST:-}" ] || skip "DOCKER_HOST=$DOCKER_HOST does not answer"
    command -v dockerd >/dev/null 2>&1 \
        || skip "no Docker daemon reachable and dockerd not installed"
    [ "$(id -u)" = 0 ] || skip "no Docker daemon reachable (and not root: cannot start dockerd)"
    echo "starting dockerd (log build/dockerd.log)"
    setsid dockerd >build/dockerd.log 2>&1 </dev/null &
    DOCKERD_PID=$!
    for _ in $(seq 1 30); do
        DT=5 d info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 1
    done
    if ! DT=5 d info >/dev/null 2>&1; then
        tail -n 15 build/dockerd.log
        skip "dockerd did not become ready within 30 s (build/dockerd.log)"
    fi
fi
echo "docker server $(DT=10 d version -f '{{.Server.Version}}' 2>/dev/null)"

# ---------------------------------------------------------------------------------------------
# 2. The builder base image, without a registry

if ! DT=20 d image inspect "$BASE" >/dev/null 2>&1; then
    # Only a name of ours is made here; any other base must exist or be pullable.
    case $BASE in cursor-oai/*) ;; *)
        DT=600 d pull "$BASE" >/dev/null 2>&1 || skip "base image $BASE not found, no pull" ;;
    esac
    [ "$(id -u)" = 0 ] || skip "no base image $BASE and not root (debootstrap needs root)"
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "+ apt-get install debootstrap"
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends \
            debootstrap >build/debootstrap.log 2>&1 \
            || { timeout 300 apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
                 timeout 600 apt-get install -y --no-install-recommends debootstrap \
                 >>build/debootstrap.log 2>&1; } \
            || { tail -n 15 build/debootstrap.log; bad "install debootstrap"; finish; }
    fi
    echo "+ debootstrap --variant=minbase bookworm build/docker-rootfs (log build/debootstrap.log)"
    rm -rf build/docker-rootfs
    t0=$(date +%s)
    if timeout 1800 debootstrap --variant=minbase bookworm build/docker-rootfs \
            http://deb.debian.org/debian >>build/debootstrap.log 2>&1 \
        && tar -C build/docker-rootfs -c . | DT=600 d import - "$BASE" >/dev/null; then
        ok "base image $BASE made with debootstrap ($(( $(date +%s) - t0 )) s)"
        rm -rf build/docker-rootfs
    else
        tail -n 15 build/debootstrap.log
        bad "base image with debootstrap"
        finish
    fi
fi

# ---------------------------------------------------------------------------------------------
# 3. Build

echo "+ docker build --build-arg BUILDER_IMAGE=$BASE -t $IMAGE . (log build/docker-build.log)"
t0=$(date +%s)
BUILT=1
if DT=${COAI_DOCKER_BUILD_TIMEOUT:-1800} d build --build-arg "BUILDER_IMAGE=$BASE" -t "$IMAGE" . \
        >build/docker-build.log 2>&1; then
    ok "docker build ($(( $(date +%s) - t0 )) s)"
else
    tail -n 30 build/docker-build.log
    bad "docker build ($(( $(date +%s) - t0 )) s)"
    finish
fi

size=$(DT=20 d image inspect -f '{{.Size}}' "$IMAGE")
echo "image size: $size bytes ($(( (size + 1023) / 1024 )) KiB)"
check "image is at most 2 MiB ($size bytes)" test "$size" -le "$MAX_SIZE"

user=$(DT=20 d image inspect -f '{{.Config.User}}' "$IMAGE")
case $user in '' | 0 | 0:* | root | root:*) bad "image user is non-root (got '$user')" ;;
*) ok "image user is non-root ($user)" ;; esac
cfg=$(DT=20 d image inspect -f '{{json .Config.Env}} {{json .Config.Volumes}}' "$IMAGE")
what="image: XDG_CONFIG_HOME=/config, /config volume"
case $cfg in *'"XDG_CONFIG_HOME=/config"'*'"/config":'*) ok "$what" ;; *) bad "$what ($cfg)" ;; esac

# ---------------------------------------------------------------------------------------------
# 4. Refuses a non-loopback listen without a client key. Default (bridge) network: the
#    container's 0.0.0.0 is its own namespace, nothing on the host is exposed.

CONTAINERS="$CONTAINERS $TAG-open"
rc=0
out=$(DT=60 d run --name "$TAG-open" -e CURSOR_OAI_LISTEN=0.0.0.0:18741 "$IMAGE" 2>&1) || rc=$?
# shellcheck disable=SC2001
echo "$out" | sed 's/^/    | /'
check "refuses 0.0.0.0 without CURSOR_OAI_API_KEY (exit $rc)" test "$rc" -ne 0
case $out in *CURSOR_OAI_API_KEY*) ok "... and says why" ;; *) bad "... and says why" ;; esac

# ---------------------------------------------------------------------------------------------
# 5. The fake upstream on the host (TLS with a throwaway CA)

rm -rf "$WORK"
mkdir -p "$WORK"
CURSOR_KEY=key_docker_$$_$RANDOM    # the fake accepts any key_* API key
setsid "$PY" tests/fake/fake_cursor.py --cert-dir "$WORK/certs" --ready-file "$WORK/ready.json" \
    --config "{\"client_version\": \"$CLIENT_VERSION\"}" >"$WORK/fake.log" 2>&1 </dev/null &
FAKE_PID=$!
for _ in $(seq 1 300); do
    [ -f "$WORK/ready.json" ] && break
    kill -0 "$FAKE_PID" 2>/dev/null || break
    sleep 0.2
done
if [ ! -f "$WORK/ready.json" ]; then
    tail -n 20 "$WORK/fake.log"
    bad "fake upstream started"
    finish
fi
jget() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
FAKE_PORT=$(jget "$WORK/ready.json" port)
FAKE_CTL=$(jget "$WORK/ready.json" control_port)
chmod 0644 "$WORK/certs/ca.pem"   # read by uid 10001 inside the container
PORT=$("$PY" -c '
import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# ---------------------------------------------------------------------------------------------
# 6. Log in into a /config volume with one container, serve from it with another: host
#    network, loopback listen, client key, no token in the environment.

VOL=$TAG-config
VOLUMES="$VOLUMES $VOL"
UPSTREAM=(-e "CURSOR_API_URL=https://localhost:$FAKE_PORT" -e "SSL_CERT_FILE=/ca/ca.pem"
          -e "CURSOR_CLIENT_VERSION=$CLIENT_VERSION" -v "$WORK/certs/ca.pem:/ca/ca.pem:ro")
CONTAINERS="$CONTAINERS $TAG-login"
rc=0
out=$(printf '%s\n' "$CURSOR_KEY" | DT=60 d run -i --name "$TAG-login" --network host \
      "${UPSTREAM[@]}" -v "$VOL:/config" "$IMAGE" login --api-key - 2>&1) || rc=$?
# shellcheck disable=SC2001
echo "$out" | sed 's/^/    | /'
check "login --api-key - in a container: exit 0 (got $rc)" test "$rc" = 0
mp=$(DT=10 d volume inspect -f '{{.Mountpoint}}' "$VOL")
perm=$(stat -c '%u %a' "$mp" "$mp/cursor-oai" "$mp/cursor-oai/auth.json" 2>/dev/null | xargs)
check "volume: /config, cursor-oai/, auth.json owned by 10001, modes 700 700 600 (got '$perm')" \
    test "$perm" = "10001 700 10001 700 10001 600"
ACCESS=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["accessToken"])' \
         "$mp/cursor-oai/auth.json" 2>/dev/null)
check "auth.json holds an access token" test -n "$ACCESS"
ACCESS=${ACCESS:-no-token-found}

CONTAINERS="$CONTAINERS $TAG"
if ! DT=60 d run -d --name "$TAG" --network host "${UPSTREAM[@]}" -v "$VOL:/config" \
        -e CURSOR_OAI_LISTEN="127.0.0.1:$PORT" -e CURSOR_OAI_API_KEY="$KEY" \
        "$IMAGE" >/dev/null; then
    bad "container started"
    finish
fi
BASEURL=http://127.0.0.1:$PORT
up=0
for _ in $(seq 1 100); do
    curl -fsS -m 2 "$BASEURL/health" >/dev/null 2>&1 && { up=1; break; }
    [ "$(DT=10 d inspect -f '{{.State.Running}}' "$TAG" 2>/dev/null)" = true ] || break
    sleep 0.1
done
if [ "$up" != 1 ]; then
    DT=20 d logs "$TAG" 2>&1 | tail -n 20
    bad "container answers /health"
    finish
fi
ok "container answers /health"

# The process: uid/gid from the host's /proc (no `id` in a scratch image).
pid=$(DT=10 d inspect -f '{{.State.Pid}}' "$TAG")
uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status" 2>/dev/null)
gids=$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status" 2>/dev/null)
check "process runs as uid 10001 (Uid: $uids; Gid: $gids)" \
    test "$uids" = "10001 10001 10001 10001" -a "$gids" = "10001 10001 10001 10001"
check "process has XDG_CONFIG_HOME=/config" \
    sh -c "tr '\\0' '\\n' </proc/$pid/environ | grep -qx XDG_CONFIG_HOME=/config"

# HTTP checks
H=(-sS -m 30 -o "$WORK/body" -w '%{http_code}')
AUTH=(-H "Authorization: Bearer $KEY")
code=$(curl "${H[@]}" "${AUTH[@]}" "$BASEURL/v1/models")
check "GET /v1/models with the key: 200 (got $code)" test "$code" = 200
check "... lists models" "$PY" -c '
import json, sys; d = json.load(open(sys.argv[1]))
assert d["object"] == "list" and len(d["data"]) > 0 and all(m["id"] for m in d["data"])' \
    "$WORK/body"

chat() {   # chat STREAM [curl args...]
    body="{\"model\":\"auto\",\"stream\":$1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
    shift
    curl "${H[@]}" "$@" -H 'Content-Type: application/json' -d "$body" \
        "$BASEURL/v1/chat/completions"
}
code=$(chat true "${AUTH[@]}")
check "streaming chat with the key: 200 (got $code)" test "$code" = 200
check "... SSE text 'Hello from fake Cursor.', ends with data: [DONE]" "$PY" -c '
import json, sys
t = open(sys.argv[1], encoding="utf-8").read()
ev = [b[5:].strip() for b in t.split("\n\n") if b.startswith("data:")]
text = "".join(c["delta"].get("content") or "" for e in ev[:-1]
               for c in json.loads(e)["choices"])
assert ev[-1] == "[DONE]" and text == "Hello from fake Cursor.", (text, ev[-1:])' "$WORK/body"

code=$(chat false "${AUTH[@]}")
check "non-streaming chat with the key: 200 (got $code)" test "$code" = 200
check "... chat.completion with the text" "$PY" -c '
import json, sys; d = json.load(open(sys.argv[1]))
assert d["object"] == "chat.completion"
assert d["choices"][0]["message"]["content"] == "Hello from fake Cursor."' "$WORK/body"

code=$(chat false)
check "chat without the key: 401 (got $code)" test "$code" = 401
code=$(chat false -H "Authorization: Bearer wrong-$KEY")
check "chat with a wrong key: 401 (got $code)" test "$code" = 401

check "the fake saw two runs and no invalid request" "$PY" -c '
import json, sys, urllib.request
s = json.load(urllib.request.urlopen("http://127.0.0.1:%s/state" % sys.argv[1], timeout=10))
assert s["errors"] == [] and s["n_runs"] == 2, (s["errors"], s["n_runs"])' "$FAKE_CTL"
logs=$(DT=20 d logs "$TAG-login" 2>&1; DT=20 d logs "$TAG" 2>&1)
case $logs in
*"$CURSOR_KEY"* | *"${ACCESS#*.}"* | *"$KEY"*) bad "no key or token in the container logs" ;;
*) ok "no key or token in the container logs" ;;
esac

# docker stop: SIGTERM reaches PID 1 (the proxy) and it exits by itself, well before the
# 10 s SIGKILL.
t0=$(date +%s)
DT=30 d stop -t 10 "$TAG" >/dev/null
dt=$(( $(date +%s) - t0 ))
ec=$(DT=10 d inspect -f '{{.State.ExitCode}}' "$TAG")
check "docker stop: exits on SIGTERM in ${dt} s with status $ec" test "$dt" -lt 9 -a "$ec" != 137

# ---------------------------------------------------------------------------------------------
# 7. The image as documented: bridge network, 0.0.0.0 inside, port published on the host's
#    loopback only (no upstream needed for /health, the key and the Host checks).

CONTAINERS="$CONTAINERS $TAG-pub"
if DT=60 d run -d --name "$TAG-pub" -p "127.0.0.1::18741" -e CURSOR_OAI_API_KEY="$KEY" \
        "$IMAGE" serve --allow-host cursor-oai.test >/dev/null 2>"$WORK/pub.err"; then
    hp=$(DT=10 d port "$TAG-pub" 18741/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n 1)
    code=000
    for _ in $(seq 1 50); do
        code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/health")
        [ "$code" = 200 ] && break
        sleep 0.2
    done
    check "published port 127.0.0.1:$hp -> 18741: /health 200 (got $code)" test "$code" = 200
    code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hp/v1/models")
    check "published port: /v1/models without the key: 401 (got $code)" test "$code" = 401
    # Other containers reach it by a name: --allow-host (given after the image name).
    code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H 'Host: cursor-oai.test:18741' \
        "http://127.0.0.1:$hp/health")
    check "Host: cursor-oai.test (--allow-host): 200 (got $code)" test "$code" = 200
    code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H 'Host: evil.example:18741' \
        "http://127.0.0.1:$hp/health")
    check "Host: evil.example: 403 (got $code)" test "$code" = 403
else
    cat "$WORK/pub.err"
    bad "container with a published port started"
fi

# ---------------------------------------------------------------------------------------------
# 8. Both architectures from the Dockerfile (COAI_DOCKER_ARM64=1): the build stage runs on this
#    machine and cross-compiles for the target (./build.sh arm64), so building needs no
#    emulation. With docker buildx: `docker buildx build --platform linux/arm64 --load`. Without
#    it (Debian bookworm has no docker-buildx package): Debian's buildah, which reads the same
#    Dockerfile with the same BUILDPLATFORM/TARGETARCH arguments, builds linux/amd64 and
#    linux/arm64 in ONE command into a manifest list, as `docker buildx build --platform
#    linux/amd64,linux/arm64` does. The arm64 image cannot run here without binfmt emulation:
#    each binary is copied out and checked with tests/check_static.sh (static, its
#    architecture, size, --version; the arm64 one under qemu-aarch64-static).

check_static_out() {   # check_static_out LABEL FILE [arm64]
    rc=0
    out=$(sh tests/check_static.sh "$2" ${3:-} 2>&1) || rc=$?
    # shellcheck disable=SC2001
    echo "$out" | sed 's/^/    | /'
    check "$1: /cursor-oai passes tests/check_static.sh ${3:-}" test "$rc" = 0
}

A64_LOG=build/docker-build-arm64.log
if [ "${COAI_DOCKER_ARM64:-0}" = 1 ] && DT=20 d buildx version >/dev/null 2>&1; then
    echo "+ docker buildx build --platform linux/arm64 --load" \
         "--build-arg BUILDER_IMAGE=$BASE -t $IMAGE_A64 . (log $A64_LOG)"
    t0=$(date +%s)
    BUILT_A64=1
    if DT=${COAI_DOCKER_BUILD_TIMEOUT:-1800} d buildx build --platform linux/arm64 --load \
            --build-arg "BUILDER_IMAGE=$BASE" -t "$IMAGE_A64" . >"$A64_LOG" 2>&1; then
        ok "arm64 image: docker buildx build ($(( $(date +%s) - t0 )) s)"
        arch=$(DT=20 d image inspect -f '{{.Os}}/{{.Architecture}}' "$IMAGE_A64")
        check "arm64 image: platform linux/arm64 (got $arch)" test "$arch" = linux/arm64
        CONTAINERS="$CONTAINERS $TAG-a64"
        rm -f "$WORK/cursor-oai-arm64"
        if DT=30 d create --name "$TAG-a64" --platform linux/arm64 "$IMAGE_A64" >/dev/null 2>&1 \
            && DT=30 d cp "$TAG-a64:/cursor-oai" "$WORK/cursor-oai-arm64" >/dev/null; then
            check_static_out "arm64 image" "$WORK/cursor-oai-arm64" arm64
        else
            bad "arm64 image: /cursor-oai copied out of a container"
        fi
    else
        tail -n 30 "$A64_LOG"
        bad "arm64 image: docker buildx build ($(( $(date +%s) - t0 )) s)"
    fi
elif [ "${COAI_DOCKER_ARM64:-0}" = 1 ]; then
    if ! command -v buildah >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "+ apt-get install buildah (docker buildx is not installed)"
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q buildah \
            >build/buildah-install.log 2>&1 || tail -n 5 build/buildah-install.log
    fi
    if ! command -v buildah >/dev/null 2>&1; then
        bad "two-architecture image: neither docker buildx nor buildah is installed"
    else
        b() { timeout -k 5 "${DT:-120}" buildah "$@"; }
        MULTI=localhost/cursor-oai:test-multi-$$
        : >"$A64_LOG"
        # buildah keeps its own image store: the builder base comes over from dockerd.
        if ! b inspect --type image "docker.io/$BASE" >/dev/null 2>&1; then
            DT=600 b pull -q "docker-daemon:$BASE" >/dev/null 2>>"$A64_LOG"
        fi
        before=$(b images -a -q --no-trunc 2>/dev/null | sort)
        echo "+ buildah build --platform linux/amd64,linux/arm64 --manifest $MULTI" \
             "--build-arg BUILDER_IMAGE=docker.io/$BASE . (log $A64_LOG)"
        t0=$(date +%s)
        if DT=${COAI_DOCKER_BUILD_TIMEOUT:-1800} b build --platform linux/amd64,linux/arm64 \
                --manifest "$MULTI" --build-arg "BUILDER_IMAGE=docker.io/$BASE" . \
                >>"$A64_LOG" 2>&1; then
            ok "two-architecture image: one buildah build ($(( $(date +%s) - t0 )) s)"
            plats=$(b manifest inspect "$MULTI" | "$PY" -c 'import json,sys
print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"]
                      for m in json.load(sys.stdin)["manifests"])))')
            check "two-architecture image: the manifest list holds linux/amd64 and linux/arm64" \
                test "$plats" = "linux/amd64 linux/arm64"
            new=$(b images -q --no-trunc | sort -u | comm -13 <(echo "$before") -)
            for arch in amd64 arm64; do
                id='' c='' user=''
                for i in $new; do
                    [ "$(b inspect --type image -f '{{.OCIv1.Architecture}}' "$i" 2>/dev/null)" = "$arch" ] \
                        && { id=$i; break; }
                done
                rm -f "$WORK/cursor-oai-image-$arch"
                [ -n "$id" ] && c=$(b from -q "$id" 2>/dev/null) && mnt=$(b mount "$c" 2>/dev/null) \
                    && cp "$mnt/cursor-oai" "$WORK/cursor-oai-image-$arch" \
                    && user=$(b inspect --type image -f '{{.OCIv1.Config.User}}' "$id")
                [ -n "$c" ] && { b umount "$c" >/dev/null 2>&1; b rm "$c" >/dev/null 2>&1; }
                if [ -f "$WORK/cursor-oai-image-$arch" ]; then
                    check "$arch image: runs as 10001:10001 (got $user)" test "$user" = 10001:10001
                    check_static_out "$arch image" "$WORK/cursor-oai-image-$arch" \
                        "$([ "$arch" = arm64 ] && echo arm64)"
                else
                    bad "$arch image: /cursor-oai copied out of the image"
                fi
                rm -f "$WORK/cursor-oai-image-$arch"
            done
        else
            tail -n 30 "$A64_LOG"
            bad "two-architecture image: one buildah build ($(( $(date +%s) - t0 )) s)"
        fi
        # Remove exactly what this build added (the manifest list, the per-architecture images
        # and their intermediate layers), and keep the base.
        b manifest rm "$MULTI" >/dev/null 2>&1
        for id in $(b images -a -q --no-trunc 2>/dev/null | sort | comm -13 <(echo "$before") -); do
            b rmi -f "$id" >/dev/null 2>&1
        done
    fi
fi

finish
