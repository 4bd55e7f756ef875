#!/usr/bin/env python3
"""lockwait.py - where a request's first-token time goes inside the proxy (bench only).

Usage:  python3 tests/bench/lockwait.py [--focus short64] [--rounds 8] [--keep DIR] [--src DIR]
        (after `./build.sh bench --help` built build/bench/loadgen; COAI_DEPS_DIR names the
        dependencies, default build/deps)

Builds an instrumented copy of server.c (release flags, in a temporary directory; the product
is untouched) and runs `bench.py --focus ROW` with it over HTTP/2 and HTTP/1.1. The copy:
  - stamps each request's phases with a microsecond clock and logs them when its first chunk
    goes out: request read -> handler -> run start (tr_open) -> HTTP/2 stream open (lock
    taken, head queued) -> run request sent -> response head -> first chunk written (over
    HTTP/1.1, from tr_open straight to the first chunk);
  - counts, per place in the source that takes an HTTP/2 connection's lock (hc->mu), how
    often, how long it waited for it and how long it held it (a condition wait on the lock
    ends a hold; the hold after it counts for the wait's line, its wake-up not as a wait).
Prints a table of the phases per transport (p50, p90, mean) and the lock places by total wait.
The patches find their places by text; when server.c moved on, the script says which one it
could not find."""
import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CLOCK = r'''
static int64_t lw_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
static __thread int64_t LW[8];
static __thread int64_t lw_t0;
static __thread int lw_line;
static int64_t lw_hold[20000], lw_wait[20000];
static long lw_n[20000];
static void lw_lock(pthread_mutex_t *m, int line)
{
    int64_t a = lw_us();
    pthread_mutex_lock(m);
    lw_t0 = lw_us();
    lw_line = line;
    __atomic_add_fetch(&lw_wait[line], lw_t0 - a, __ATOMIC_RELAXED);
}
static void lw_unlock(pthread_mutex_t *m)
{
    __atomic_add_fetch(&lw_hold[lw_line], lw_us() - lw_t0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&lw_n[lw_line], 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(m);
}
/* around a condition wait on the lock: the hold ends there and starts again after it */
static void lw_cw_before(void)
{
    __atomic_add_fetch(&lw_hold[lw_line], lw_us() - lw_t0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&lw_n[lw_line], 1, __ATOMIC_RELAXED);
}
static void lw_cw_after(int line)
{
    lw_t0 = lw_us();
    lw_line = line;
}
static void lw_dump(void)
{
    static int64_t last;
    int64_t now = lw_us();
    int i;
    if (now - last < 2000000) return;
    last = now;
    for (i = 0; i < 20000; i++)
        if (lw_n[i])
            fprintf(stderr, "LW lock %d %ld %lld %lld\n", i, lw_n[i], (long long)lw_hold[i],
                    (long long)lw_wait[i]);
}
'''

# (anchor, replacement): each anchor must be found exactly once
PATCHES = [
    ("static int64_t mono_ms(void)\n{", CLOCK + "static int64_t mono_ms(void)\n{"),
    ("    serve_begin(c);\n", "    memset(LW, 0, sizeof LW);\n    LW[0] = lw_us();\n    serve_begin(c);\n"),
    ("    x.r = run_new();\n", "    LW[1] = lw_us();\n    x.r = run_new();\n"),
    ("    char *token = malloc(SRV_TOKEN_MAX);\n    size_t tl;\n",
     "    char *token;\n    size_t tl;\n    LW[2] = lw_us();\n    token = malloc(SRV_TOKEN_MAX);\n"),
    ("    r->up.h2 = h2s_open(&r->up.host, hs, nh, fresh, &r->err);\n",
     "    r->up.h2 = h2s_open(&r->up.host, hs, nh, fresh, &r->err);\n    LW[3] = lw_us();\n"),
    ("    if (h2s_head(r->up.h2) < 0) {\n", "    LW[4] = lw_us();\n    if (h2s_head(r->up.h2) < 0) {\n"),
    ("    r->up.t_head = mono_ms();\n    if (r->up.h2->status != 200) {",
     "    r->up.t_head = mono_ms();\n    LW[5] = lw_us();\n    if (r->up.h2->status != 200) {"),
    ("            rc = stream_write(c, rp->out.data, rp->out.len);\n",
     "            rc = stream_write(c, rp->out.data, rp->out.len);\n"
     "            if (LW[0] && LW[2]) {\n"
     "                LW[6] = lw_us();\n"
     "                fprintf(stderr, \"LW phases %lld %lld %lld %lld %lld %lld\\n\",\n"
     "                        (long long)(LW[1] - LW[0]), (long long)(LW[2] - LW[1]),\n"
     "                        (long long)(LW[3] ? LW[3] - LW[2] : -1),\n"
     "                        (long long)(LW[3] ? LW[4] - LW[3] : -1),\n"
     "                        (long long)(LW[3] ? LW[5] - LW[4] : -1),\n"
     "                        (long long)(LW[6] - (LW[3] ? LW[5] : LW[2])));\n"
     "                LW[0] = 0;\n"
     "            }\n"),
    ("        h2c_feed_locked(hc, now);\n", "        h2c_feed_locked(hc, now);\n        lw_dump();\n"),
]

PHASES = ["request read -> handler", "handler -> run start", "run start -> stream open",
          "stream open -> request sent", "request sent -> response head",
          "head (HTTP/1.1: run start) -> first chunk"]


def patch(src):
    for old, new in PATCHES:
        if src.count(old) != 1:
            sys.exit("lockwait.py: server.c changed: %r found %d times"
                     % (old.strip()[:60], src.count(old)))
        src = src.replace(old, new)
    out = []
    for n, line in enumerate(src.split("\n")):
        for m in ("hc->mu", "s->hc->mu"):
            line = line.replace("pthread_mutex_lock(&%s)" % m, "lw_lock(&%s, %d)" % (m, n + 1))
            line = line.replace("pthread_mutex_unlock(&%s)" % m, "lw_unlock(&%s)" % m)
        line = re.sub(r"((?:cond_wait_ms|pthread_cond_wait)\([^;]*&hc->mu[^;]*\));",
                      r"{ lw_cw_before(); \1; lw_cw_after(%d); }" % (n + 1), line)
        out.append(line)
    return "\n".join(out)


def build(tmp, src_dir):
    deps = os.environ.get("COAI_DEPS_DIR") or os.path.join(ROOT, "build", "deps")
    np_ = glob.glob(os.path.join(deps, "nanopb-*"))[0]
    cj = glob.glob(os.path.join(deps, "cjson-*"))[0]
    br = [d for d in glob.glob(os.path.join(deps, "bearssl-*")) if not d.endswith(("-musl", "-gcc"))][0]
    lib = glob.glob(os.path.join(deps, "bearssl-*-musl", "build", "libbearssl.a"))[0]
    for f in ("cursor_oai.h", "proto"):
        s, d = os.path.join(src_dir, f), os.path.join(tmp, f)
        shutil.copytree(s, d) if os.path.isdir(s) else shutil.copy(s, d)
    with open(os.path.join(src_dir, "server.c")) as f:
        src = patch(f.read())
    with open(os.path.join(tmp, "server.c"), "w") as f:
        f.write(src)
    pb = [os.path.join("proto", p) for p in ("agent.pb.c", "aiserver.pb.c", "google/rpc/status.pb.c",
                                              "google/protobuf/struct.pb.c", "google/protobuf/any.pb.c")]
    out = os.path.join(tmp, "cursor-oai-lockwait")
    cmd = (["musl-gcc", "-static", "-Os", "-DPB_ENABLE_MALLOC", "-DPB_FIELD_32BIT",
            "-DCJSON_NESTING_LIMIT=64", "-Iproto", "-I" + np_, "-I" + cj, "-I" + os.path.join(br, "inc"),
            "server.c"] + pb + [os.path.join(np_, x) for x in ("pb_common.c", "pb_encode.c", "pb_decode.c")]
           + [os.path.join(cj, "cJSON.c"), lib, "-lpthread", "-o", out])
    subprocess.run(cmd, cwd=tmp, check=True)
    return out, src.split("\n")


def func_of(lines, n):
    """The function line n (1-based) is in: the nearest definition above it."""
    for i in range(n - 1, -1, -1):
        m = re.match(r"static [^=;]*?\**(\w+)\(", lines[i])
        if m:
            return m.group(1)
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--focus", default="short64")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--keep", help="keep the instrumented build and the logs here")
    ap.add_argument("--src", default=ROOT, help="the sources to instrument (a checkout of another "
                    "commit, for a before and after)")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="coai-lockwait-")
    os.makedirs(tmp, exist_ok=True)
    binary, lines = build(tmp, a.src)
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--loadgen",
           os.path.join(ROOT, "build", "bench", "loadgen"), "--proxy", binary, "--no-grpcweb",
           "--no-floors", "--no-strace", "--hold", "0", "--hold-big", "0", "--focus", a.focus,
           "--rounds", str(a.rounds), "--proxy-log-dir", tmp, "--out",
           os.path.join(tmp, "results.json")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    for line in r.stdout.splitlines() + r.stderr.splitlines():
        if line.startswith("focus "):
            print(line)
    if r.returncode:
        sys.exit("bench.py failed:\n" + r.stderr[-2000:])
    for label, name in (("h2", "HTTP/2"), ("connect", "HTTP/1.1")):
        path = os.path.join(tmp, "proxy-%s.log" % label)
        rows = [list(map(int, l.split()[2:])) for l in open(path) if l.startswith("LW phases ")]
        print("\n%s: %d requests, microseconds (the instrumented build: not the release's figures)"
              % (name, len(rows)))
        for i, ph in enumerate(PHASES):
            v = sorted(x[i] for x in rows if x[i] >= 0)
            if v:
                print("  %-44s p50 %7d  p90 %7d  mean %7d" % (ph, v[len(v) // 2],
                                                           v[int(len(v) * 0.9)], statistics.mean(v)))
        tot = sorted(sum(y for y in x if y > 0) for x in rows)
        if tot:
            print("  %-44s p50 %7d  p90 %7d" % ("total, request read -> first chunk",
                                                tot[len(tot) // 2], tot[int(len(tot) * 0.9)]))
    last = {}
    for l in open(os.path.join(tmp, "proxy-h2.log")):
        if l.startswith("LW lock "):
            p = l.split()
            last[int(p[2])] = tuple(map(int, p[3:6]))
    nstreams = sum(1 for l in open(os.path.join(tmp, "proxy-h2.log")) if l.startswith("LW phases "))
    print("\nHTTP/2 connection lock (hc->mu) by place, until the last dump (every 2 s): "
          "acquisitions, total wait, total hold, microseconds")
    for n, (cnt, hold, wait) in sorted(last.items(), key=lambda kv: -kv[1][2])[:14]:
        cw = " (after a condition wait)" if "lw_cw_after(%d)" % n in lines[n - 1] else ""
        print("  line %5d %-24s n %7d  wait %9d  hold %9d%s" % (n, func_of(lines, n), cnt, wait,
                                                              hold, cw))
    print("  total wait %d us over %d streams" % (sum(v[2] for v in last.values()), nstreams))
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
