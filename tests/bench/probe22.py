#!/usr/bin/python3
"""Figures for the second probe's items 1, 2 and 6 (issue 22), against the fake upstream.
A benchmark: it prints what it measured and passes no judgement (tests/heartbeats_limits_test.py
holds the bounds). Each figure comes from a proxy of its own:
  1. the largest bodies the caps allow: the proxy's CPU time (utime + stime from /proc) and
     wall time for one body of 32 MiB in 9,999 messages (the body and message caps: parsed,
     looked up, flattened, then refused by the 1 MiB prompt cap) and one of 500,000 JSON
     values (the value cap: parsed, refused by the message bound), with a remembered
     conversation so that every multi-message request looks its history up; then the same
     while small three-message requests go out back to back: the slowest of them bounds how
     long any lock they share was held;
  2. the BidiAppend endpoint stalls: how long a held run's tool results take while a
     heartbeat append hangs, and the longest silence a streaming client sees while the
     append that answers a KV request hangs (keepalive every 2 s, the call's deadline 15 s);
  3. eight concurrent worst-shape bodies (8 MB of empty messages each, 166,000 messages:
     refused by the message bound, after parsing): peak RSS (VmHWM) over the start, with the
     default 256 MiB in-flight budget and with 64 MiB.
  tests/bench/probe22.py [--rounds N]     (or ./build.sh bench-probe22)
Uses $CURSOR_OAI_BIN or build/cursor-oai; an ASan build inflates the RSS figures."""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402
import heartbeats_limits_test as P  # noqa: E402

if os.environ.get("CURSOR_OAI_BIN"):
    H.proxy_cmd = lambda: [os.path.abspath(os.environ["CURSOR_OAI_BIN"])]

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of the process, seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def big_body(kind):
    if kind == "bytes":
        # 9,999 messages (the bound is 10,000) filling the 32 MiB body cap
        n = 9999
        room = 32 * 1024 * 1024 - 200 - n * len('{"role":"user","content":""},')
        per = room // n
        return json.dumps({"model": "scenario:short", "messages": [
            {"role": "user", "content": "x" * per}] * n}, separators=(",", ":"))
    # about 500,000 JSON values (the value cap): 3 per message
    return json.dumps({"model": "scenario:short", "messages": [
        {"role": "user", "content": ""}] * 166600}, separators=(",", ":"))


def item1(tmp, fake, token, rounds):
    px = H.Proxy(tmp, "b-limits", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "60"})
    P.chat(px, {"model": "scenario:remember", "messages": [{"role": "user", "content": "a"}]})
    small_body = {"model": "scenario:short", "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "b"}]}
    idle = [P.chat(px, small_body)["t"] for _ in range(10)]
    print("item 1: a small 3-message request alone: median %.0f ms, slowest %.0f ms (10)"
          % (statistics.median(idle) * 1000, max(idle) * 1000))
    for kind in ("bytes", "values"):
        body = big_body(kind)
        for r in range(rounds):
            for with_small in (False, True):
                res, small = {}, []

                def send():
                    c0, t0 = cpu_s(px.proc.pid), time.time()
                    try:
                        st, b, _ = px.request("POST", "/v1/chat/completions", body,
                                              timeout=300)
                    except OSError as e:
                        st, b = 0, str(e).encode()
                    res.update(st=st, b=b[:110], wall=time.time() - t0,
                               cpu=cpu_s(px.proc.pid) - c0)

                th = threading.Thread(target=send)
                th.start()
                while with_small and th.is_alive():
                    small.append(P.chat(px, small_body, 120)["t"])
                th.join()
                if not with_small:
                    print("item 1: %-6s body %.1f MB alone: %s in %.2f s, proxy CPU %.2f s (%s)"
                          % (kind, len(body) / 1e6, res["st"], res["wall"], res["cpu"],
                             res["b"].decode(errors="replace")), flush=True)
                else:
                    print("item 1: %-6s body %.1f MB with %d small requests meanwhile: %s in "
                          "%.2f s; the small ones median %.0f ms, slowest %.0f ms"
                          % (kind, len(body) / 1e6, len(small), res["st"], res["wall"],
                             statistics.median(small) * 1000 if small else 0,
                             max(small) * 1000 if small else 0), flush=True)
    px.stop()


def item2(tmp, fake, token, secret):
    px = H.Proxy(tmp, "b-hb", fake.url(), fake.ca, token, extra_env={
        "CURSOR_OAI_UPSTREAM_TIMEOUT": "40", "CURSOR_OAI_HOLLOW_TIMEOUT": "60",
        "CURSOR_OAI_IDLE_TIMEOUT": "120"})
    k0 = len(P.runs_of(fake, "hb_stall"))
    msgs = [{"role": "user", "content": "read it"}]
    r1 = P.chat(px, {"model": "scenario:hb_stall", "messages": msgs, "tools": P.TOOLS})
    t0 = time.time()
    stalled = P.wait_stalled_heartbeat(fake, "hb_stall", k0, 60)
    r2 = P.chat(px, {"model": "scenario:hb_stall", "tools": P.TOOLS,
                     "messages": P.follow_up(msgs, r1, "The word is %s." % secret)}, 90)
    print("item 2: tool results while a heartbeat append hangs (its deadline 40 s; the stall "
          "seen after %.1f s): answered in %.0f ms (%s)"
          % (time.time() - t0 - r2["t"], r2["t"] * 1000,
             "held run" if r2["content"].startswith("GOT:")
             else "other: %r" % r2["content"][:60]) if stalled and r1["tool_calls"] else
          "item 2: the heartbeat stall was not reached (%r)" % r1["raw"][:100], flush=True)
    px.stop()
    px = H.Proxy(tmp, "b-kv", fake.url(), fake.ca, token, extra_env={
        "CURSOR_OAI_UPSTREAM_TIMEOUT": "15", "CURSOR_OAI_KEEPALIVE": "2",
        "CURSOR_OAI_IDLE_TIMEOUT": "120"})
    raw, times, total = P.timed_stream(px.port, {"model": "scenario:hb_kv_stall",
                                                 "stream": True, "messages": msgs}, 90)
    ts = [0.0] + [t for t, _ in times]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    print("item 2: stream while the KV answer's append hangs (keepalive 2 s, deadline 15 s): "
          "longest silence %.2f s, stream ended after %.1f s (%s)"
          % (max(gaps or [0]), total, "in-band error" if b'"error"' in raw else "no error"),
          flush=True)
    px.stop()


def item6(tmp, fake, token):
    body = json.dumps({"model": "scenario:short",
                       "messages": [{"role": "user", "content": ""}] * 166000},
                      separators=(",", ":"))
    for budget in (None, 64):
        env = {"CURSOR_OAI_IDLE_TIMEOUT": "60"}
        if budget:
            env["CURSOR_OAI_MAX_INFLIGHT_MB"] = str(budget)
        px = H.Proxy(tmp, "b-budget-%s" % budget, fake.url(), fake.ca, token, extra_env=env)
        base = P.vm_hwm_kib(px.proc.pid)
        c0 = cpu_s(px.proc.pid)
        stats = []

        def one():
            try:
                st, _, _ = px.request("POST", "/v1/chat/completions", body, timeout=300)
            except OSError:
                st = 0
            stats.append(st)

        t0 = time.time()
        th = [threading.Thread(target=one) for _ in range(8)]
        for t in th:
            t.start()
        for t in th:
            t.join(320)
        peak = P.vm_hwm_kib(px.proc.pid)
        print("item 6: 8 concurrent %.1f MB bodies of empty messages, in-flight budget %s: "
              "peak RSS %.0f MiB over a start of %.0f MiB, %.2f s, proxy CPU %.2f s, answers %s"
              % (len(body) / 1e6, "%d MiB" % budget if budget else "256 MiB (default)",
                 (peak - base) / 1024, base / 1024, time.time() - t0,
                 cpu_s(px.proc.pid) - c0, sorted(stats)), flush=True)
        px.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each item-1 body")
    a = ap.parse_args()
    if not os.path.exists(H.proxy_cmd()[0]):
        print("probe22: %s missing (build it first)" % H.proxy_cmd()[0])
        return 1
    tmp = tempfile.mkdtemp(prefix="coai-probe22-")
    ws = os.path.join(tmp, "workspace")
    os.makedirs(ws)
    secret = "otter-" + os.urandom(4).hex()
    with open(os.path.join(ws, "hello.txt"), "w") as f:
        f.write("The secret word is %s.\n" % secret)
    token = pb.make_jwt({"sub": "auth0|bench", "exp": int(time.time()) + 7200,
                         "type": "session"})
    print("probe22: %s, load average %s" % (H.proxy_cmd()[0],
                                            " ".join(open("/proc/loadavg").read().split()[:3])))
    try:
        fake = H.Fake(tmp, P.scenarios(ws), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False})
        item1(tmp, fake, token, a.rounds)
        item2(tmp, fake, token, secret)
        item6(tmp, fake, token)
    finally:
        H.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
