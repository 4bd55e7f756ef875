#!/usr/bin/python3
"""Performance bench of cursor-oai (run by tests/bench.sh, i.e. ./build.sh bench).

Starts the fake Cursor upstream (tests/fake, TLS on 127.0.0.1) and the proxy, then drives both
with build/bench/loadgen: every latency figure is measured through the proxy AND straight
against the fake (the floor: what the proxy itself does upstream) in the same run. Prints a
table and writes bench/results.json. Loopback only; bounded in time (about 1-2 minutes).
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402

DELTAS = 2000           # text deltas per long answer
PACED = 200             # stamped deltas per paced answer
PACE_S = 0.002          # gap between paced deltas
HOLD_S = 12.0           # how long a held stream stays open upstream
CLK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

SCENARIOS = {
    # as fast as the fake can: pre-encoded frames, 64 per write (the fake's "long" op)
    "bench_long": {"steps": [{"op": "long", "n": DELTAS, "text": "lorem ipsum "},
                             {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # one delta per write, 2 ms apart, each carrying the fake's send time
    "bench_paced": {"steps": [{"op": "long", "n": PACED, "batch": 1, "stamp": True,
                               "interval": PACE_S, "text": "x"},
                              {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # a stream that stays open: one delta, then quiet, then the end
    "bench_hold": {"steps": [{"op": "text", "text": "held"}, {"op": "sleep", "s": HOLD_S},
                             {"op": "text", "text": " done"}, {"op": "turn_ended"},
                             {"op": "trailer", "status": 0}]},
}

# (target, original) per metric key, for the table and results.json
TARGETS = {
    "added_ttfb_p50_ms": ("< 0.3 ms", "~3.0 ms"),
    "added_per_chunk_ms": ("<= 0.02 ms", "0.07 ms"),
    "cpu_ms_per_answer": ("< 2 ms", "19 ms"),
    "max_streams": ("1000, 0 errors", "-"),
    "rss_per_stream_kb": ("< 128 KB", "(143-96)/64 = 734 KB"),
    "idle_rss_kb": ("< 2 MB", "96 MB"),
    "rss_64_kb": ("-", "143 MB"),
    "startup_ms": ("< 10 ms", "330 ms"),
    "binary_kb": ("< 1 MB", "-"),
}


def pct(xs, p):
    """Nearest-rank percentile of a list (None when empty)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / float(CLK)   # utime + stime (fields 14, 15)


def proc_status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="coai-bench-")
        self.res = {"runs": {}, "notes": []}
        self.proxy = None
        self.fake = None

    # -- processes ---------------------------------------------------------------------------

    def start_fake(self):
        now = int(time.time())
        self.token = H.pb.make_jwt({"sub": "auth0|bench", "time": str(now), "exp": now + 86400,
                                    "type": "session", "iss": "https://authentication.cursor.sh"})
        self.fake = H.Fake(self.tmp, scenarios=SCENARIOS, token=self.token)
        self.fake_pid = self.fake.info["pid"]

    def proxy_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                    "CURSOR_API_URL": self.fake.url(), "SSL_CERT_FILE": self.fake.ca,
                    "CURSOR_ACCESS_TOKEN": self.token, "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION,
                    "CURSOR_OAI_IDLE_TIMEOUT": "60", "TZ": "UTC"})
        return env

    def start_proxy(self):
        self.port = H.free_port()
        args = [self.a.proxy, "serve", "--listen", "127.0.0.1:%d" % self.port,
                "--max-conns", "2048"]
        self.proxy = H.spawn(args, os.path.join(self.tmp, "proxy.log"), env=self.proxy_env(),
                             cwd=self.tmp)
        ok = H.wait_for(lambda: self.proxy.poll() is not None or self.health(), 15)
        if not ok or self.proxy.poll() is not None:
            raise RuntimeError("proxy did not start:\n" + H.tail(self.proxy.log_path))

    def health(self):
        c = H.http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            c.request("GET", "/health")
            return c.getresponse().status == 200
        finally:
            c.close()

    def loadgen(self, mode, *extra, timeout=300, on_ready=None):
        args = [self.a.loadgen, mode] + [str(x) for x in extra]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = {}

        def watch():
            for line in p.stderr:
                line = line.decode("utf-8", "replace")
                if line.startswith("READY") and on_ready:
                    f = line.split()
                    ready.update(on_ready(int(f[1]), int(f[2]), float(f[3])))
                elif line.strip():
                    sys.stderr.write("loadgen: " + line)
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            out = p.stdout.read()       # stderr belongs to watch()
            p.wait()
        finally:
            timer.cancel()
        if p.returncode == -9:
            raise RuntimeError("loadgen %s timed out" % mode)
        t.join(5)
        if p.returncode != 0:
            raise RuntimeError("loadgen %s failed (%d)" % (mode, p.returncode))
        r = json.loads(out)
        r["errors"].pop("_", None)
        r.update(ready)
        return r

    # -- measurements ------------------------------------------------------------------------

    def run_streams(self, kind, model, conc, count, expect):
        """One loadgen run with the CPU of every process and the fake's counters around it."""
        self.fake.ctl("/reset", {})
        cpu_p0, cpu_f0, cpu_l0 = proc_cpu_s(self.proxy.pid), proc_cpu_s(self.fake_pid), \
            children_cpu_s()
        t0 = time.time()
        if kind == "proxy":
            r = self.loadgen("proxy", "--port", self.port, "--model", model, "--conc", conc,
                             "--count", count, "--expect", expect)
        else:
            r = self.loadgen("direct", "--port", self.fake.port, "--model", model,
                             "--conc", conc, "--count", count, "--expect", expect,
                             "--ca", self.fake.ca, "--token", self.token)
        wall = time.time() - t0
        st = self.fake.state()
        c = st["counters"]
        ok = [s for s in r["streams"] if s[2] >= 0]
        lists = {"ttfb": [s[1] / 1000.0 for s in ok if s[1] >= 0],
                 "head": [s[0] / 1000.0 for s in ok if s[0] >= 0],
                 "total": [s[2] / 1000.0 for s in ok],
                 "lat": [x / 1e6 for x in r["lat_ns"]]}
        out = {
            "kind": kind, "model": model, "conc": conc, "count": count,
            "errors": r["errors"], "n_errors": sum(r["errors"].values()),
            "fake_validation_errors": len(st["errors"]),
            "wall_s": r["wall_us"] / 1e6,
            "events": sum(s[3] for s in r["streams"]),
            "bytes": sum(s[4] for s in r["streams"]),
            "handshakes": c.get("tls_handshakes_main", 0),
            "upstream_requests": c.get("requests", 0),
            "models_calls": c.get("models_calls", 0),
            "proxy_cpu_s": proc_cpu_s(self.proxy.pid) - cpu_p0 if kind == "proxy" else None,
            "fake_cpu_s": proc_cpu_s(self.fake_pid) - cpu_f0,
            "loadgen_cpu_s": children_cpu_s() - cpu_l0,
            "wall_outer_s": wall,
        }
        out["streams_per_s"] = count / out["wall_s"]
        out["mb_per_s"] = out["bytes"] / out["wall_s"] / 1e6
        for k, v in lists.items():
            out[k + "_p50_ms"] = pct(v, 50)
            out[k + "_p99_ms"] = pct(v, 99)
        return out

    def hold(self, n):
        """n streams open at once through the proxy: errors, VmRSS while they are all open."""
        self.fake.ctl("/reset", {})
        time.sleep(0.3)
        rss0 = proc_status(self.proxy.pid, "VmRSS")

        def on_ready(ok, failed, secs):
            time.sleep(0.2)
            return {"ready": ok, "failed_before_ready": failed, "ramp_s": secs,
                    "rss_kb": proc_status(self.proxy.pid, "VmRSS"),
                    "threads": proc_status(self.proxy.pid, "Threads"),
                    "fds": len(os.listdir("/proc/%d/fd" % self.proxy.pid)),
                    "fake_active": self.fake.state()["active_streams"]}
        r = self.loadgen("hold", "--port", self.port, "--model", "scenario:bench_hold",
                         "--conc", n, "--expect", 2, timeout=HOLD_S + 180, on_ready=on_ready)
        st = self.fake.state()
        out = {"n": n, "rss_before_kb": rss0, "errors": r["errors"],
               "n_errors": sum(r["errors"].values()), "ready": r.get("ready"),
               "ramp_s": r.get("ramp_s"), "rss_kb": r.get("rss_kb"),
               "threads": r.get("threads"), "fds": r.get("fds"),
               "fake_active": r.get("fake_active"),
               "fake_max_active": st["max_active_streams"],
               "fake_validation_errors": len(st["errors"]),
               "handshakes": st["counters"].get("tls_handshakes_main", 0)}
        if out["rss_kb"] is not None:
            out["rss_per_stream_kb"] = (out["rss_kb"] - rss0) / float(n)
        return out

    def startup(self):
        env = self.proxy_env()
        port = H.free_port()
        p = subprocess.run([self.a.loadgen, "startup", "--bin", self.a.proxy, "--port",
                            str(port), "--count", str(self.a.startup_runs)],
                           stdout=subprocess.PIPE, env=env, timeout=120, check=True)
        runs = json.loads(p.stdout)["runs"]
        return {"runs": runs,
                "listen_p50_ms": pct([x["listen_us"] / 1000.0 for x in runs], 50),
                "health_p50_ms": pct([x["health_us"] / 1000.0 for x in runs], 50),
                "health_max_ms": max(x["health_us"] / 1000.0 for x in runs),
                "rss_kb": pct([x["rss_kb"] for x in runs], 50)}

    # -- the whole bench ---------------------------------------------------------------------

    def run(self):
        a, R = self.a, self.res
        R["machine"] = {"cpus": os.cpu_count(), "cpu": cpu_model(), "kernel": platform.release(),
                        "python": platform.python_version(), "loadavg_start": loadavg()}
        if R["machine"]["loadavg_start"] > 0.5:
            say("note: load average %.2f before the bench: other work on this machine skews "
                "the figures" % R["machine"]["loadavg_start"])
        R["proxy_binary"] = a.proxy
        R["binary_bytes"] = os.path.getsize(a.proxy)
        R["params"] = {"deltas": DELTAS, "paced_deltas": PACED, "pace_s": PACE_S,
                       "hold_s": HOLD_S, "n1": a.n1, "n64": a.n64, "hold": a.hold}
        self.start_fake()
        say("fake upstream on 127.0.0.1:%d (pid %d)" % (self.fake.port, self.fake_pid))
        R["startup"] = self.startup()
        say("start-up: listening after %.2f ms, first /health answered after %.2f ms (p50 of %d)"
            % (R["startup"]["listen_p50_ms"], R["startup"]["health_p50_ms"], a.startup_runs))
        self.start_proxy()
        time.sleep(0.5)
        R["idle_rss_kb"] = proc_status(self.proxy.pid, "VmRSS")
        say("proxy on 127.0.0.1:%d (pid %d), idle VmRSS %d KB"
            % (self.port, self.proxy.pid, R["idle_rss_kb"]))
        # warm-up: model list cached, pools filled, pages touched
        self.run_streams("proxy", "scenario:bench_long", 1, 5, DELTAS)
        self.run_streams("direct", "scenario:bench_long", 1, 5, DELTAS)
        runs = R["runs"]
        for conc, n in ((1, a.n1), (64, a.n64)):
            for kind in ("direct", "proxy"):
                key = "%s_long_c%d" % (kind, conc)
                runs[key] = self.run_streams(kind, "scenario:bench_long", conc, n, DELTAS)
                say("%-18s %s" % (key, brief(runs[key])))
        for kind in ("direct", "proxy"):
            key = "%s_paced_c1" % kind
            runs[key] = self.run_streams(kind, "scenario:bench_paced", 1, a.paced, PACED)
            say("%-18s %s" % (key, brief(runs[key])))
        R["idle_rss_after_load_kb"] = proc_status(self.proxy.pid, "VmRSS")
        R["hold"] = {}
        for n in sorted({64, a.hold}):
            R["hold"][str(n)] = h = self.hold(n)
            say("hold %-5d errors %s, ramp %.1f s, VmRSS %s KB (before %d KB), %s threads, "
                "fake saw %s open" % (n, h["errors"] or 0, h["ramp_s"] or -1, h["rss_kb"],
                                      h["rss_before_kb"], h["threads"], h["fake_active"]))
        R["idle_rss_end_kb"] = proc_status(self.proxy.pid, "VmRSS")
        self.summarize()

    def summarize(self):
        R, runs = self.res, self.res["runs"]
        d1, p1 = runs["direct_long_c1"], runs["proxy_long_c1"]
        d64, p64 = runs["direct_long_c64"], runs["proxy_long_c64"]
        dp, pp = runs["direct_paced_c1"], runs["proxy_paced_c1"]
        big = R["hold"][str(self.a.hold)]
        s = {
            "added_ttfb_p50_ms": p1["ttfb_p50_ms"] - d1["ttfb_p50_ms"],
            "added_ttfb_p99_ms": p1["ttfb_p99_ms"] - d1["ttfb_p99_ms"],
            "added_ttfb_p50_ms_c64": p64["ttfb_p50_ms"] - d64["ttfb_p50_ms"],
            "added_per_chunk_ms": pp["lat_p50_ms"] - dp["lat_p50_ms"],
            "added_per_chunk_p99_ms": pp["lat_p99_ms"] - dp["lat_p99_ms"],
            "added_per_chunk_fullspeed_ms": (p1["total_p50_ms"] - d1["total_p50_ms"]) / DELTAS,
            "cpu_ms_per_answer": 1000.0 * p1["proxy_cpu_s"] / p1["count"],
            "cpu_ms_per_answer_c64": 1000.0 * p64["proxy_cpu_s"] / p64["count"],
            "handshakes_per_request_c1": p1["handshakes"] / float(p1["count"]),
            "handshakes_per_request_c64": p64["handshakes"] / float(p64["count"]),
            "max_streams": big["ready"] if big["n_errors"] == 0 else 0,
            "max_streams_errors": big["n_errors"],
            "rss_per_stream_kb": big.get("rss_per_stream_kb"),
            "rss_per_stream_kb_64": R["hold"]["64"].get("rss_per_stream_kb"),
            "rss_64_kb": R["hold"]["64"]["rss_kb"],
            "idle_rss_kb": R["idle_rss_kb"],
            "startup_ms": R["startup"]["health_p50_ms"],
            "binary_kb": R["binary_bytes"] / 1024.0,
            "streams_per_s": max(p1["streams_per_s"], p64["streams_per_s"]),
            "mb_per_s": max(p1["mb_per_s"], p64["mb_per_s"]),
        }
        R["summary"] = s
        R["targets"] = {k: {"target": t, "original": o} for k, (t, o) in TARGETS.items()}
        R["verdict"] = {
            "added_ttfb_p50_ms": s["added_ttfb_p50_ms"] < 0.3,
            "added_per_chunk_ms": s["added_per_chunk_ms"] <= 0.02,
            "cpu_ms_per_answer": s["cpu_ms_per_answer"] < 2.0,
            "max_streams": s["max_streams"] >= 1000 and s["max_streams_errors"] == 0,
            "rss_per_stream_kb": (s["rss_per_stream_kb"] or 1e9) < 128,
            "idle_rss_kb": s["idle_rss_kb"] < 2048,
            "startup_ms": s["startup_ms"] < 10,
            "binary_kb": s["binary_kb"] < 1024,
        }

    def table(self):
        R, runs, s, v = self.res, self.res["runs"], self.res["summary"], self.res["verdict"]
        m = R["machine"]
        L = []
        L.append("cursor-oai bench: %d CPUs (%s), Linux %s, loopback, fake upstream in Python %s"
                 % (m["cpus"], m["cpu"], m["kernel"], m["python"]))
        L.append("%d-delta answers; floor = the same RunSSE + BidiAppend run straight against "
                 "the fake (BearSSL, kept-alive connections)" % DELTAS)
        L.append("load average at start %.2f (anything else running skews the figures)"
                 % m["loadavg_start"])
        L.append("")
        L.append("%-40s %12s %12s %8s" % ("latency (ms)", "direct", "proxy", "ratio"))

        def row(name, key, dk, pk):
            dv, pv = runs[dk][key], runs[pk][key]
            L.append("%-40s %12.3f %12.3f %8.2f" % (name, dv, pv, pv / dv if dv else 0))
        for c in (1, 64):
            dk, pk = "direct_long_c%d" % c, "proxy_long_c%d" % c
            row("first token p50, %d stream%s" % (c, "s" if c > 1 else ""), "ttfb_p50_ms", dk,
                pk)
            row("first token p99, %d stream%s" % (c, "s" if c > 1 else ""), "ttfb_p99_ms", dk,
                pk)
            row("whole stream p50, %d stream%s" % (c, "s" if c > 1 else ""), "total_p50_ms", dk,
                pk)
            row("whole stream p99, %d stream%s" % (c, "s" if c > 1 else ""), "total_p99_ms", dk,
                pk)
        row("per-delta latency p50 (paced)", "lat_p50_ms", "direct_paced_c1", "proxy_paced_c1")
        row("per-delta latency p99 (paced)", "lat_p99_ms", "direct_paced_c1", "proxy_paced_c1")
        L.append("")
        L.append("%-40s %12s %12s" % ("throughput", "direct", "proxy"))
        for c in (1, 64):
            d, p = runs["direct_long_c%d" % c], runs["proxy_long_c%d" % c]
            L.append("%-40s %12.1f %12.1f" % ("streams/s, %d at a time" % c, d["streams_per_s"],
                                              p["streams_per_s"]))
            L.append("%-40s %12.2f %12.2f" % ("MB/s of response body, %d at a time" % c,
                                              d["mb_per_s"], p["mb_per_s"]))
            L.append("%-40s %12s %12s" % (
                "CPU s: fake / proxy / loadgen, %d at a time" % c, "",
                "%.2f/%.2f/%.2f" % (p["fake_cpu_s"], p["proxy_cpu_s"], p["loadgen_cpu_s"])))
        L.append("")
        L.append("%-40s %14s %14s %22s %s" % ("summary", "measured", "target", "original",
                                              "verdict"))

        def srow(name, val, key, fmt):
            t, o = TARGETS.get(key, ("-", "-"))
            ok = v.get(key)
            L.append("%-40s %14s %14s %22s %s" % (name, fmt % val if val is not None else "-",
                                                  t, o, "-" if ok is None else
                                                  ("ok" if ok else "MISSED")))
        srow("added first token p50 (1 stream)", s["added_ttfb_p50_ms"], "added_ttfb_p50_ms",
             "%.3f ms")
        srow("added first token p99 (1 stream)", s["added_ttfb_p99_ms"], "-", "%.3f ms")
        srow("added first token p50 (64 streams)", s["added_ttfb_p50_ms_c64"], "-", "%.3f ms")
        srow("added latency per delta p50 (paced)", s["added_per_chunk_ms"],
             "added_per_chunk_ms", "%.3f ms")
        srow("added time per delta, full speed", s["added_per_chunk_fullspeed_ms"], "-",
             "%.4f ms")
        srow("proxy CPU per answer (1 at a time)", s["cpu_ms_per_answer"], "cpu_ms_per_answer",
             "%.2f ms")
        srow("proxy CPU per answer (64 at a time)", s["cpu_ms_per_answer_c64"], "-", "%.2f ms")
        srow("streams held at once, errors", "%d, %d" % (s["max_streams"],
                                                        s["max_streams_errors"]),
             "max_streams", "%s")
        srow("VmRSS per open stream (%d open)" % self.a.hold, s["rss_per_stream_kb"],
             "rss_per_stream_kb", "%.1f KB")
        srow("VmRSS per open stream (64 open)", s["rss_per_stream_kb_64"], "-", "%.1f KB")
        srow("VmRSS with 64 open streams", (s["rss_64_kb"] or 0) / 1024.0, "rss_64_kb", "%.2f MB")
        srow("idle VmRSS (fresh)", s["idle_rss_kb"], "idle_rss_kb", "%d KB")
        srow("idle VmRSS (after the load)", R["idle_rss_end_kb"], "-", "%d KB")
        srow("start-up: exec -> /health answered", s["startup_ms"], "startup_ms", "%.2f ms")
        srow("binary size", s["binary_kb"], "binary_kb", "%.0f KB")
        srow("upstream TLS handshakes per request, 1", s["handshakes_per_request_c1"], "-",
             "%.3f")
        srow("upstream TLS handshakes per request, 64", s["handshakes_per_request_c64"], "-",
             "%.3f")
        srow("saturation: streams/s", s["streams_per_s"], "-", "%.1f")
        srow("saturation: MB/s of SSE", s["mb_per_s"], "-", "%.2f")
        errs = {k: r["errors"] for k, r in runs.items() if r["n_errors"]}
        errs.update({"hold_%s" % k: h["errors"] for k, h in R["hold"].items() if h["n_errors"]})
        val = sum(r["fake_validation_errors"] for r in runs.values())
        L.append("")
        L.append("stream errors: %s; fake validation errors: %d"
                 % (json.dumps(errs) if errs else "none", val))
        return "\n".join(L)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def brief(r):
    return ("ttfb p50 %.3f p99 %.3f ms, total p50 %.2f p99 %.2f ms, %.1f streams/s, "
            "%d handshakes, errors %s%s" % (
                r["ttfb_p50_ms"] or -1, r["ttfb_p99_ms"] or -1, r["total_p50_ms"] or -1,
                r["total_p99_ms"] or -1, r["streams_per_s"], r["handshakes"],
                r["errors"] or 0, (", per-delta p50 %.3f ms" % r["lat_p50_ms"])
                if r.get("lat_p50_ms") is not None else ""))


def say(s):
    print(s, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loadgen", default=os.path.join(ROOT, "build", "bench", "loadgen"))
    ap.add_argument("--proxy", default=os.environ.get("COAI_BENCH_PROXY")
                    or os.path.join(ROOT, "build", "cursor-oai"))
    ap.add_argument("--n1", type=int, default=200, help="answers one at a time (default 200)")
    ap.add_argument("--n64", type=int, default=640, help="answers 64 at a time (default 640)")
    ap.add_argument("--paced", type=int, default=5, help="paced answers (default 5)")
    ap.add_argument("--hold", type=int, default=1000, help="streams held at once (default 1000)")
    ap.add_argument("--startup-runs", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results.json"))
    a = ap.parse_args()
    a.proxy = os.path.abspath(a.proxy)
    b = Bench(a)
    t0 = time.time()
    try:
        b.run()
    finally:
        H.cleanup()
    b.res["bench_seconds"] = time.time() - t0
    print()
    tab = b.table()
    print(tab)
    b.res["table"] = tab.split("\n")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(b.res, f, indent=1, sort_keys=True)
    print("\nwrote %s (%.0f s)" % (os.path.relpath(a.out, ROOT), b.res["bench_seconds"]))


if __name__ == "__main__":
    main()
