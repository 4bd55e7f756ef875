#!/usr/bin/python3
"""Performance bench of cursor-oai (run by tests/bench.sh, i.e. ./build.sh bench).

Starts the fake Cursor upstream (tests/fake, TLS on 127.0.0.1) and the proxy three times:
over HTTP/2 (CURSOR_OAI_TRANSPORT=h2, the default: one Run stream per answer on a shared
connection) and over HTTP/1.1 RunSSE + BidiAppend in each transport profile
(CURSOR_OAI_PROFILE=connect, the HTTP/1.1 default, and grpc-web), side by side; or with
--compare a second proxy binary instead (each with its defaults), or with --one-profile the
proxy once; all measured in the same run, then drives them with build/bench/loadgen. The default shapes are realistic: one text delta per gRPC-web frame per
HTTP chunk per TLS record per write, unpaced and paced; 64 deltas per write only as a secondary
line. Each figure is measured with the fake keeping RunSSE connections alive ("keep") and
closing each after its run ("close", the fake's runsse_close). Every latency is also measured
straight against the fake (the floor, "direct") in the same run. System calls per delta come
from strace -c -f attached to the proxy for one extra answer. Prints a table and writes
bench/results.json. Loopback only; bounded in time (6-10 minutes, the big hold included).
"keep"/"close" only change the fake's HTTP/1.1 connections (an HTTP/2 run ends its stream).
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402

DELTAS = 2000           # text deltas per answer (unpaced and paced at 1 stream)
PACE1_S = 0.0005        # paced, 1 stream: one delta every 0.5 ms (a 2,000-delta answer: 1 s)
PACED64 = 200           # paced, 64 streams: deltas per answer ...
PACE64_S = 0.010        # ... one every 10 ms each (a model-like 100 tokens/s; 6,400 deltas/s)
HOLD_S = 300.0          # the longest a held stream stays open upstream (the bench releases
                        # them all once it has measured them open)
CLK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def hold_scenario(secs):
    """a stream that stays open: one delta, then quiet (the fake's "hold": no byte, one
    poll or Event per stream) until the bench's POST /release (or secs), then the end"""
    return {"steps": [{"op": "text", "text": "held"}, {"op": "hold", "max_s": secs},
                      {"op": "text", "text": " done"}, {"op": "turn_ended"},
                      {"op": "trailer", "status": 0}]}


def raise_nofile(want):
    """Soft and hard RLIMIT_NOFILE up to want (raising the hard limit needs root or
    CAP_SYS_RESOURCE; bounded by fs.nr_open); the fake, the proxies and the load generator
    inherit it. Returns the limits in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:
            want = min(want, int(f.read()))
    except (OSError, ValueError):
        pass
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
        except (ValueError, OSError):
            pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


SCENARIOS = {
    # realistic: one delta per frame per HTTP chunk per TLS record per write, as fast as the
    # fake can write them
    "bench_unpaced": {"steps": [{"op": "long", "n": DELTAS, "batch": 1, "interval": 0,
                                 "stamp": True, "text": "lorem"},
                                {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # realistic and paced: one delta per write, each carrying the fake's send time
    "bench_paced1": {"steps": [{"op": "long", "n": DELTAS, "batch": 1, "stamp": True,
                                "interval": PACE1_S, "text": "x"},
                               {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "bench_paced64": {"steps": [{"op": "long", "n": PACED64, "batch": 1, "stamp": True,
                                 "interval": PACE64_S, "text": "x"},
                                {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # first-token figures: many short answers (20 deltas, one per write)
    "bench_short": {"steps": [{"op": "long", "n": 20, "batch": 1, "interval": 0, "text": "s"},
                              {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # the old shape (secondary line): 64 pre-encoded frames per write
    "bench_long64": {"steps": [{"op": "long", "n": DELTAS, "text": "lorem ipsum "},
                               {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "bench_hold": hold_scenario(HOLD_S),
}

# targets of issue 15 (realistic shapes, 2-core machine, loopback)
TARGETS = {
    "cpu_us_per_delta_paced_c1": ("<= 12 us", lambda v: v <= 12),
    "cpu_us_per_delta_paced_c64": ("<= 12 us", lambda v: v <= 12),
    "cpu_ms_per_answer_unpaced_c1": ("<= 5 ms", lambda v: v <= 5),
    "syscalls_per_delta_paced": ("<= 3", lambda v: v <= 3),
    "added_ttfb_p50_ms_c1": ("< 1 ms", lambda v: v < 1),
    "added_ttfb_p50_ms_c64": ("< 5 ms", lambda v: v < 5),
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


def upstream_sockets(pid, ports):
    """TCP connections of process pid whose remote port is one of ports (the fake's
    listeners): the upstream connections the proxy holds. Read from /proc, so nothing the
    fake's counters reset can change it."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    n = 0
    for tab in ("/proc/%d/net/tcp" % pid, "/proc/%d/net/tcp6" % pid):
        try:
            with open(tab) as f:
                next(f)
                for line in f:
                    x = line.split()
                    if x[9] in inodes and x[3] == "01" and int(x[2].rsplit(":", 1)[1], 16) in ports:
                        n += 1
        except OSError:
            pass
    return n


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class HoldHost:
    """tests/bench/holdhost.py: the agent host of the big hold, HTTP/2 and HTTP/1.1 (Connect)
    on one asyncio loop instead of the fake's thread per stream; the control calls of H.Fake."""

    def __init__(self, tmp, cert_dir):
        self.info_path = os.path.join(tmp, "holdhost.json")
        self.proc = H.spawn([H.PY, os.path.join(HERE, "holdhost.py"), "--cert-dir", cert_dir,
                             "--info", self.info_path], os.path.join(tmp, "holdhost.log"))
        if not H.wait_for(lambda: os.path.exists(self.info_path) or self.proc.poll() is not None,
                          20) or not os.path.exists(self.info_path):
            raise RuntimeError("holdhost did not start:\n" + H.tail(self.proc.log_path))
        with open(self.info_path) as f:
            self.info = json.load(f)
        self.port = self.info["port"]

    def url(self):
        return "https://localhost:%d" % self.port

    # the fake's control calls: they need only self.info["control_port"]
    ctl = H.Fake.ctl
    state = H.Fake.state


def upstream_args(scenarios):
    """tests/bench/upstream.c's --scenario options for the bench's scenarios: N deltas of TEXT,
    every INTERVAL_US, stamped or not, BATCH per write; or a held run."""
    out = []
    for name, sc in sorted(scenarios.items()):
        steps = sc["steps"]
        if any(x["op"] == "hold" for x in steps):
            out += ["--scenario", "%s=hold" % name]
            continue
        lg = [x for x in steps if x["op"] == "long"][0]
        out += ["--scenario", "%s=%d,%d,%d,%s,%d" % (
            name, lg["n"], int(round(float(lg.get("interval", 0)) * 1e6)),
            1 if lg.get("stamp") else 0, lg.get("text", "x").replace(",", " "),
            max(1, min(64, int(lg.get("batch", 64)))))]
    return out


class UpstreamC:
    """tests/bench/upstream.c (build/bench/upstream): the agent host of every run in C, HTTP/2
    and HTTP/1.1 (Connect and gRPC-web), one epoll thread; the fake keeps the unary calls. The
    control calls of H.Fake (the same shape)."""

    def __init__(self, tmp, cert_dir, binary, scenarios):
        self.info_path = os.path.join(tmp, "upstream.json")
        self.proc = H.spawn([binary, "--cert-dir", cert_dir, "--info", self.info_path]
                            + upstream_args(scenarios), os.path.join(tmp, "upstream.log"))
        if not H.wait_for(lambda: os.path.exists(self.info_path) or self.proc.poll() is not None,
                          20) or not os.path.exists(self.info_path):
            raise RuntimeError("upstream did not start:\n" + H.tail(self.proc.log_path))
        with open(self.info_path) as f:
            self.info = json.load(f)
        self.port = self.info["port"]
        self.pid = self.info["pid"]

    def url(self):
        return "https://localhost:%d" % self.port

    ctl = H.Fake.ctl
    state = H.Fake.state


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="coai-bench-")
        self.res = {"runs": {}, "notes": []}
        self.proxies = {}           # label -> Popen (with .port)
        self.label_env = {}         # label -> extra environment of that proxy
        self.fake = None
        self.holdhost = None
        self.up = None              # UpstreamC with --upstream c
        self.floors = []            # labels of the floor proxies started

    # -- processes ---------------------------------------------------------------------------

    def start_fake(self):
        now = int(time.time())
        self.token = H.pb.make_jwt({"sub": "auth0|bench", "time": str(now), "exp": now + 86400,
                                    "type": "session", "iss": "https://authentication.cursor.sh"})
        sc = dict(SCENARIOS)
        sc["bench_hold_big"] = hold_scenario(self.a.hold_big_s)
        self.fake = H.Fake(self.tmp, scenarios=sc, token=self.token)
        self.fake_pid = self.fake.info["pid"]
        # the fake PINGs every HTTP/2 connection; with 10,000 streams held on two cores its
        # own interpreter can take longer than the usual 10 s to see an answer
        self.fake.ctl("/config", {"h2_ping_ack_s": 60.0})
        if self.a.upstream == "c":
            self.up = UpstreamC(self.tmp, os.path.join(self.fake.dir, "certs"), self.a.upstream_bin,
                                sc)
            say("C upstream (every run) on 127.0.0.1:%d (pid %d); the fake answers the unary "
                "calls" % (self.up.port, self.up.pid))

    def start_floor(self, label, binary):
        """A floor proxy (tests/bench/floor_h1.c, floor_h2.c) in front of the C upstream."""
        port = H.free_port()
        p = H.spawn([binary, "--listen", str(port), "--upstream-port", str(self.up.port),
                     "--ca", self.fake.ca, "--token", self.token],
                    os.path.join(self.tmp, "%s.log" % label))
        p.port = port
        ok = H.wait_for(lambda: p.poll() is not None or self._connects(port), 15)
        if not ok or p.poll() is not None:
            raise RuntimeError("%s did not start:\n%s" % (label, H.tail(p.log_path)))
        self.proxies[label] = p
        self.floors.append(label)
        return p

    def _connects(self, port):
        import socket
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return True
        except OSError:
            return False

    def fake_ports(self):
        return {v for k, v in self.fake.info.items() if k.endswith("port") and
                isinstance(v, int) and k != "control_port"}

    def proxy_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                    "CURSOR_API_URL": self.fake.url(), "SSL_CERT_FILE": self.fake.ca,
                    "CURSOR_ACCESS_TOKEN": self.token, "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION,
                    "CURSOR_OAI_IDLE_TIMEOUT": "3600", "TZ": "UTC",
                    # the held streams are quiet upstream (no heartbeats) for up to
                    # --hold-big-s: not the run watchdog's business here (over HTTP/2
                    # the fake sends heartbeats on them)
                    "CURSOR_OAI_SILENCE_TIMEOUT": "3600",
                    "CURSOR_OAI_HEARTBEAT_TIMEOUT": "3600"})
        if self.up:                 # every run to the C upstream, the unary calls to the fake
            env["CURSOR_OAI_AGENT_URL"] = self.up.url()
        return env

    def start_proxy(self, label, path):
        port = H.free_port()
        args = [path, "serve", "--listen", "127.0.0.1:%d" % port, "--max-conns", "30000"]
        env = self.proxy_env()
        env.update(self.label_env.get(label, {}))
        p = H.spawn(args, os.path.join(self.a.proxy_log_dir or self.tmp, "proxy-%s.log" % label),
                    env=env, cwd=self.tmp)
        p.port = port
        ok = H.wait_for(lambda: p.poll() is not None or self.health(port), 15)
        if not ok or p.poll() is not None:
            raise RuntimeError("proxy did not start:\n" + H.tail(p.log_path))
        self.proxies[label] = p
        return p

    def health(self, port):
        c = H.http.client.HTTPConnection("127.0.0.1", port, timeout=5)
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

    def set_close(self, close):
        self.fake.ctl("/config", {"runsse_close": bool(close)})
        if self.up:
            self.up.ctl("/config", {"runsse_close": bool(close)})

    # -- measurements ------------------------------------------------------------------------

    def run_streams(self, label, scenario, conc, count, expect):
        """One loadgen run (label "direct" = straight against the fake, else through that
        proxy) with the CPU of every process and the fake's counters around it."""
        self.fake.ctl("/reset", {})
        if self.up:
            self.up.ctl("/reset", {})
        p = self.proxies.get(label)
        cpu_p0, cpu_f0, cpu_l0 = proc_cpu_s(p.pid) if p else 0, proc_cpu_s(self.fake_pid), \
            children_cpu_s()
        cpu_u0 = proc_cpu_s(self.up.pid) if self.up else 0
        la = loadavg()
        t0 = time.time()
        model = "scenario:" + scenario
        if p:
            r = self.loadgen("proxy", "--port", p.port, "--model", model, "--conc", conc,
                             "--count", count, "--expect", expect)
        else:
            r = self.loadgen("direct", "--port", self.up.port if self.up else self.fake.port,
                             "--model", model,
                             "--conc", conc, "--count", count, "--expect", expect,
                             "--ca", self.fake.ca, "--token", self.token)
        wall = time.time() - t0
        cpu_u = proc_cpu_s(self.up.pid) - cpu_u0 if self.up else None
        st = self.fake.state()
        c = dict(st["counters"])
        if self.up:                 # the runs' host: its handshakes and requests count
            ust = self.up.state()
            for k in ("tls_handshakes", "requests"):
                c[k] = c.get(k, 0) + ust["counters"].get(k, 0)
            st["errors"] = st["errors"] + ust["errors"]
        ok = [x for x in r["streams"] if x[2] >= 0]
        lists = {"ttfb": [x[1] / 1000.0 for x in ok if x[1] >= 0],
                 "head": [x[0] / 1000.0 for x in ok if x[0] >= 0],
                 "total": [x[2] / 1000.0 for x in ok],
                 "lat": [x / 1e6 for x in r["lat_ns"]]}
        out = {
            "label": label, "scenario": scenario, "conc": conc, "count": count,
            "loadavg": la,
            "errors": r["errors"], "n_errors": sum(r["errors"].values()),
            "fake_validation_errors": len(st["errors"]),
            "wall_s": r["wall_us"] / 1e6,
            "deltas": sum(x[3] for x in r["streams"]),
            "bytes": sum(x[4] for x in r["streams"]),
            "handshakes": c.get("tls_handshakes", 0),     # every listener (h2: the agent's)
            "upstream_requests": c.get("requests", 0),
            "proxy_cpu_s": proc_cpu_s(p.pid) - cpu_p0 if p else None,
            "fake_cpu_s": proc_cpu_s(self.fake_pid) - cpu_f0,
            "upstream_cpu_s": cpu_u,
            "upstream_cores": cpu_u / wall if cpu_u is not None and wall > 0 else None,
            "loadgen_cpu_s": children_cpu_s() - cpu_l0,
            "wall_outer_s": wall,
        }
        out["handshakes_per_request"] = out["handshakes"] / float(count)
        if p:
            out["cpu_ms_per_answer"] = 1000.0 * out["proxy_cpu_s"] / count
            out["cpu_us_per_delta"] = 1e6 * out["proxy_cpu_s"] / max(1, out["deltas"])
        for k, v in lists.items():
            out[k + "_p50_ms"] = pct(v, 50)
            out[k + "_p99_ms"] = pct(v, 99)
        return out

    def strace_run(self, label, scenario, count, expect):
        """System calls of the proxy per delta: strace -c -f attached for one run."""
        p = self.proxies[label]
        out = os.path.join(self.tmp, "strace-%s-%s.txt" % (label, scenario))
        self.fake.ctl("/reset", {})
        st = subprocess.Popen(["strace", "-c", "-f", "-q", "-o", out, "-p", str(p.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)             # attached to every thread
        try:
            r = self.loadgen("proxy", "--port", p.port, "--model", "scenario:" + scenario,
                             "--conc", 1, "--count", count, "--expect", expect)
        finally:
            st.send_signal(2)
            st.wait(30)
        calls = {}
        with open(out) as f:
            for line in f:
                x = line.split()
                if len(x) >= 5 and x[-1] != "total" and x[0][0].isdigit() and x[3].isdigit():
                    calls[x[-1]] = int(x[3])
        deltas = sum(x[3] for x in r["streams"])
        total = sum(calls.values())
        return {"label": label, "scenario": scenario, "count": count, "deltas": deltas,
                "errors": r["errors"], "calls": calls, "total_calls": total,
                "per_delta": total / float(max(1, deltas)),
                "per_delta_by_call": {k: v / float(max(1, deltas)) for k, v in
                                      sorted(calls.items(), key=lambda kv: -kv[1])}}

    def hold(self, label, n, scenario, up=None, dwell=0.0):
        """n streams open at once through the proxy: errors, VmRSS while they are all open.
        up: the upstream that holds the streams (the fake unless given); dwell: seconds they
        stay open after that first measure, measured again at the end (every run's heartbeat
        then runs: one message per stream every 5 s, and the upstream's PINGs)."""
        p = self.proxies[label]
        up = up or self.fake
        # the last hold's streams gone at the fake (it waits a little for each client's
        # END_STREAM) before its counters restart
        H.wait_for(lambda: up.state()["active_streams"] <= 0, 60)
        up.ctl("/reset", {})
        time.sleep(0.3)
        rss0 = proc_status(p.pid, "VmRSS")
        threads0 = proc_status(p.pid, "Threads")
        fds0 = len(os.listdir("/proc/%d/fd" % p.pid))

        def on_ready(ok, failed, secs):
            time.sleep(0.2)
            # the proxy first: a fake busy with 10,000 streams may be slow to answer
            m = {"ready": ok, "failed_before_ready": failed, "ramp_s": secs,
                 "rss_kb": proc_status(p.pid, "VmRSS"),
                 "threads": proc_status(p.pid, "Threads"),
                 "fds": len(os.listdir("/proc/%d/fd" % p.pid)),
                 "upstream_conns": upstream_sockets(p.pid, self.fake_ports() | {up.port})}
            if dwell > 0:
                u0, c0 = up.state(), proc_cpu_s(p.pid)
                time.sleep(dwell)
                u1, c1 = up.state(), proc_cpu_s(p.pid)
                m["dwell"] = {"s": dwell, "rss_kb": proc_status(p.pid, "VmRSS"),
                              "threads": proc_status(p.pid, "Threads"),
                              "fds": len(os.listdir("/proc/%d/fd" % p.pid)),
                              "active": u1["active_streams"]}
                for k in ("messages", "pings_sent", "ping_acks"):
                    m["dwell"][k] = u1["counters"].get(k, 0) - u0["counters"].get(k, 0)
                m["dwell"]["ping_ack_max_s"] = u1.get("ping_ack_max_s")
                m["dwell"]["proxy_cpu_pct"] = 100.0 * (c1 - c0) / dwell
            for i in range(8):
                try:
                    if "fake_active" not in m:
                        m["fake_active"] = up.state()["active_streams"]
                    up.ctl("/release", {})   # measured: every held stream ends now
                    break
                except OSError as e:
                    say("hold %s_%d: the fake's control port: %s (try %d of 8)"
                        % (label, n, e, i + 1))
            return m
        r = self.loadgen("hold", "--port", p.port, "--model", "scenario:" + scenario,
                         "--conc", n, "--expect", 2, "--ramp", self.a.ramp,
                         timeout=self.a.hold_big_s + 600, on_ready=on_ready)
        st = H.wait_for(up.state, 120) or {"max_active_streams": None, "errors": [],
                                           "counters": {}}
        out = {"label": label, "n": n, "rss_before_kb": rss0, "errors": r["errors"],
               "n_errors": sum(r["errors"].values()), "ready": r.get("ready"),
               "ramp_s": r.get("ramp_s"), "rss_kb": r.get("rss_kb"),
               "threads_before": threads0, "fds_before": fds0,
               "threads": r.get("threads"), "fds": r.get("fds"),
               "fake_active": r.get("fake_active"),
               "fake_max_active": st["max_active_streams"],
               "fake_validation_errors": len(st["errors"]),
               "fake_tls_failures": st["counters"].get("tls_handshake_failures", 0),
               "handshakes": st["counters"].get("tls_handshakes", 0),
               "upstream_conns": r.get("upstream_conns"),
               "upstream": "holdhost" if up is not self.fake else "fake",
               "big": scenario == "bench_hold_big",
               "dwell": r.get("dwell"),
               "loadavg": loadavg()}
        if up is not self.fake:
            out["upstream_state"] = st
        if out["rss_kb"] is not None:
            out["rss_per_stream_kb"] = (out["rss_kb"] - rss0) / float(n)
            out["threads_per_stream"] = (out["threads"] - threads0) / float(n)
            out["fds_per_stream"] = (out["fds"] - fds0) / float(n)
        d = out["dwell"]
        if d:
            d["rss_per_stream_kb"] = (d["rss_kb"] - rss0) / float(n)
            d["threads_per_stream"] = (d["threads"] - threads0) / float(n)
            d["fds_per_stream"] = (d["fds"] - fds0) / float(n)
            d["messages_per_s"] = d["messages"] / d["s"]
        return out

    def ttfb_fast(self):
        """First token through the proxy over HTTP/2 and HTTP/1.1 (connect) with the runs
        answered by holdhost.py --answer-deltas 20 (one asyncio loop, no fake in the run path):
        how much of HTTP/2's slower first token at 64 streams is the proxy's. Prints only."""
        a = self.a
        self.start_fake()
        cdir = os.path.join(self.fake.dir, "certs")
        info = os.path.join(self.tmp, "answerhost.json")
        H.spawn([H.PY, os.path.join(HERE, "holdhost.py"), "--cert-dir", cdir, "--info", info,
                 "--answer-deltas", "20"], os.path.join(self.tmp, "answerhost.log"))
        if not H.wait_for(lambda: os.path.exists(info), 20):
            raise RuntimeError("holdhost --answer-deltas did not start")
        with open(info) as f:
            url = "https://localhost:%d" % json.load(f)["port"]
        self.label_env = {"h2": {"CURSOR_OAI_TRANSPORT": "h2", "CURSOR_OAI_AGENT_URL": url},
                          "connect": {"CURSOR_OAI_TRANSPORT": "http1",
                                      "CURSOR_OAI_PROFILE": "connect",
                                      "CURSOR_OAI_AGENT_URL": url}}
        for lb in ("h2", "connect"):
            self.start_proxy(lb, a.proxy)
        time.sleep(0.3)
        say("first token, 20-delta answers from holdhost (load %.2f at the start)" % loadavg())
        for conc, count in ((1, a.short1), (8, a.short64), (64, a.short64), (64, a.short64)):
            for lb in ("h2", "connect"):
                p = self.proxies[lb]
                c0 = proc_cpu_s(p.pid)
                r = self.loadgen("proxy", "--port", p.port, "--model", "auto", "--conc", conc,
                                 "--count", count, "--expect", 20)
                cpu = proc_cpu_s(p.pid) - c0
                tt = [x[1] / 1000.0 for x in r["streams"] if x[2] >= 0 and x[1] >= 0]
                say("%-8s %2d at once, %4d answers: first token p50 %7.2f ms, p99 %7.2f ms, "
                    "errors %s, proxy CPU %.2f ms per answer, load %.2f"
                    % (lb, conc, count, pct(tt, 50) or -1, pct(tt, 99) or -1,
                       r["errors"] or 0, 1000.0 * cpu / count, loadavg()))

    def startup(self, path):
        env = self.proxy_env()
        port = H.free_port()
        p = subprocess.run([self.a.loadgen, "startup", "--bin", path, "--port",
                            str(port), "--count", str(self.a.startup_runs)],
                           stdout=subprocess.PIPE, env=env, timeout=120, check=True)
        runs = json.loads(p.stdout)["runs"]
        return {"runs": runs,
                "listen_p50_ms": pct([x["listen_us"] / 1000.0 for x in runs], 50),
                "health_p50_ms": pct([x["health_us"] / 1000.0 for x in runs], 50),
                "health_max_ms": max(x["health_us"] / 1000.0 for x in runs),
                "rss_kb": pct([x["rss_kb"] for x in runs], 50)}

    # -- the whole bench ---------------------------------------------------------------------

    def go_rounds(self, every, name, cb, scenario, conc, count, expect, key):
        """An answer row (one run does not settle any of them: CPU is read in 10 ms ticks, the
        upstream and loadgen share the 2 cores): --row-rounds runs per label, the labels interleaved in each round (at 64 each warmed
        at 64 first: a pool and the upstream in steady state); the run with the median `key`
        (first token for the direct label, which has no proxy CPU) stands for the row, its
        rounds' figures beside it. One run of 64 streams moves by up to 2x, of 1 by ~10 %."""
        got = {lb: [] for lb in every}
        for i in range(self.a.row_rounds):
            for lb in every:
                if i == 0 and conc == 64:
                    self.run_streams(lb, "bench_long64", 64, 64, DELTAS)
                got[lb].append(self.run_streams(lb, scenario, conc, count, expect))
        for lb in every:
            k = key if got[lb][0].get(key) is not None else "ttfb_p50_ms"
            rs = sorted(got[lb], key=lambda r: r.get(k) or 0)
            r = dict(rs[(len(rs) - 1) // 2])
            r["rounds_" + k] = [x.get(k) for x in got[lb]]
            self.res["runs"]["%s_%s_%s" % (lb, name, cb)] = r
            say("%-34s %s; median of %d: %s" % ("%s_%s_%s" % (lb, name, cb), brief(r), len(rs),
                                                " ".join("%.2f" % (x or 0) for x in
                                                         r["rounds_" + k])))

    def go(self, key, label, scenario, conc, count, expect):
        self.res["runs"][key] = r = self.run_streams(label, scenario, conc, count, expect)
        say("%-34s %s" % (key, brief(r)))
        return r

    def run(self):
        a, R = self.a, self.res
        # HTTP/1.1 holds two sockets per stream in the proxy (client, upstream) and the
        # fake one per stream plus its BidiAppend connections: room for 10,000 and more
        nofile = raise_nofile(4 * max(a.hold, a.hold_big) + 4096)
        R["machine"] = {"cpus": os.cpu_count(), "cpu": cpu_model(), "kernel": platform.release(),
                        "python": platform.python_version(), "loadavg_start": loadavg(),
                        "nofile": nofile}
        if R["machine"]["loadavg_start"] > 0.5:
            say("note: load average %.2f before the bench: other work on this machine skews "
                "the figures" % R["machine"]["loadavg_start"])
        if a.compare:
            labels = [("new", a.proxy), ("old", a.compare)]
        elif a.one_profile:
            labels = [("new", a.proxy)]
        else:       # the same binary over HTTP/2 and in each HTTP/1.1 transport profile
            labels = [("h2", a.proxy), ("connect", a.proxy), ("grpcweb", a.proxy)]
            if a.hold_only or a.no_grpcweb:     # h2 and connect only
                labels = labels[:2]
            self.label_env = {"h2": {"CURSOR_OAI_TRANSPORT": "h2"},
                              "connect": {"CURSOR_OAI_TRANSPORT": "http1",
                                          "CURSOR_OAI_PROFILE": "connect"},
                              "grpcweb": {"CURSOR_OAI_TRANSPORT": "http1",
                                          "CURSOR_OAI_PROFILE": "grpc-web"}}
        R["labels"] = [lb for lb, _ in labels]
        R["label_env"] = self.label_env
        R["proxy_binaries"] = dict(labels)
        R["binary_bytes"] = {k: os.path.getsize(v) for k, v in labels}
        R["params"] = {"deltas": DELTAS, "pace1_s": PACE1_S, "paced64": PACED64,
                       "pace64_s": PACE64_S, "hold_s": HOLD_S, "n1": a.n1, "paced": a.paced,
                       "n64": a.n64, "hold": a.hold, "hold_big": a.hold_big, "ramp": a.ramp}
        self.start_fake()
        say("fake upstream on 127.0.0.1:%d (pid %d)" % (self.fake.port, self.fake_pid))
        R["startup"] = self.startup(a.proxy)
        say("start-up: listening after %.2f ms, first /health answered after %.2f ms (p50 of %d)"
            % (R["startup"]["listen_p50_ms"], R["startup"]["health_p50_ms"], a.startup_runs))
        for label, path in labels:
            p = self.start_proxy(label, path)
            time.sleep(0.3)
            R.setdefault("idle_rss_kb", {})[label] = proc_status(p.pid, "VmRSS")
            say("proxy %s on 127.0.0.1:%d (pid %d), idle VmRSS %d KB"
                % (label, p.port, p.pid, R["idle_rss_kb"][label]))
        if self.up and not a.hold_only and not a.no_floors:
            for fl, fb in (("floor_h2", a.floor_h2), ("floor_h1", a.floor_h1)):
                if fb and os.path.exists(fb):
                    p = self.start_floor(fl, fb)
                    say("floor %s on 127.0.0.1:%d (pid %d)" % (fl, p.port, p.pid))
        R["floors"] = list(self.floors)
        R["upstream"] = "c" if self.up else "fake"
        R["strace"] = {}
        if a.focus:
            self.focus(labels)
            return
        if not a.hold_only:
            self.answers(labels)
        R["hold"] = {}
        for lb, _ in labels:
            sizes = [(64, "bench_hold"), (a.hold, "bench_hold")] if a.hold > 0 else []
            if a.hold_big and (lb == labels[0][0] or lb == "connect"):
                n = a.hold_big
                # HTTP/1.1: a client and an upstream (RunSSE) socket per stream, and the
                # BidiAppend connections their heartbeats use (one per stream every 5 s:
                # 2,000 a second at 10,000 streams; 1,000 descriptors left for them, and
                # 1,000 for the rest, found short at 9,900: 19,992 in use). Over HTTP/2 a
                # stream costs the client's socket only.
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                if self.label_env.get(lb, {}).get("CURSOR_OAI_TRANSPORT") == "http1":
                    cap = (hard - 2000) // 2 // 100 * 100
                    why = ("HTTP/1.1 holds two sockets per stream (client, RunSSE) and the "
                           "heartbeats' BidiAppend connections; the hard RLIMIT_NOFILE is %d "
                           "(2,000 left for the rest)" % hard)
                else:
                    cap = (hard - 1000) // 100 * 100
                    why = ("an HTTP/2 stream holds the client's socket; the hard "
                           "RLIMIT_NOFILE is %d (1,000 left for the rest)" % hard)
                if n > cap:
                    say("hold %s: %d streams instead of %d: %s" % (lb, cap, n, why))
                    R["notes"].append("%s: --hold-big capped at %d by RLIMIT_NOFILE"
                                      % (lb, cap))
                    n = cap
                sizes.append((n, "bench_hold_big"))
            for n, sc in sizes:
                k = "%s_%d" % (lb, n)
                plb, up = lb, self.up
                le = self.label_env.get(lb, {})
                if self.up:
                    pass            # the C upstream holds every run
                elif sc == "bench_hold_big" and a.big_upstream == "holdhost" and (
                        le.get("CURSOR_OAI_TRANSPORT", "h2") == "h2"
                        or le.get("CURSOR_OAI_PROFILE") == "connect"):
                    # the fake cannot keep this many runs (holdhost.py says why): it still
                    # answers the unary calls, the runs go to holdhost
                    if not self.holdhost:
                        self.holdhost = HoldHost(self.tmp, os.path.join(self.fake.dir, "certs"))
                        say("holdhost (the big hold's agent host) on 127.0.0.1:%d"
                            % self.holdhost.port)
                    up, plb = self.holdhost, lb + "_big"
                    self.label_env[plb] = dict(le, CURSOR_OAI_AGENT_URL=self.holdhost.url())
                    if plb not in self.proxies:
                        self.start_proxy(plb, dict(labels)[lb])
                        time.sleep(0.3)
                R["hold"][k] = h = self.hold(plb, n, sc, up,
                                             a.hold_big_dwell if up is not None and
                                             sc == "bench_hold_big" else 0.0)
                say("hold %-10s errors %s, ramp %.1f s, VmRSS %s KB (before %d KB), %s threads, "
                    "%s fds, fake saw %s open (max %s), %s upstream connections, %d handshakes, "
                    "load %.2f"
                    % (k, h["errors"] or 0, h["ramp_s"] or -1, h["rss_kb"], h["rss_before_kb"],
                       h["threads"], h["fds"], h["fake_active"], h["fake_max_active"],
                       h["upstream_conns"], h["handshakes"], h["loadavg"]))
                if "upstream_state" in h:
                    u = h["upstream_state"]
                    say("hold %-10s holdhost: %d runs on %d connections, %d messages from the "
                        "proxy, %d PINGs answered of %d sent (slowest %.3f s), errors %s"
                        % (k, u["counters"]["runs"], u["counters"]["tls_handshakes"],
                           u["counters"]["messages"], u["counters"]["ping_acks"],
                           u["counters"]["pings_sent"], u["ping_ack_max_s"],
                           u["errors"][:3] or 0))
                d = h.get("dwell")
                if d:
                    say("hold %-10s after %.0f s more: %d still open, VmRSS %.1f KB, %.2f threads, "
                        "%.2f descriptors per stream; %.0f messages/s from the proxy; PINGs "
                        "answered %d of %d (slowest %.3f s); proxy CPU %.1f %%"
                        % (k, d["s"], d["active"], d["rss_per_stream_kb"],
                           d["threads_per_stream"], d["fds_per_stream"], d["messages_per_s"],
                           d["ping_acks"], d["pings_sent"], d["ping_ack_max_s"] or 0,
                           d["proxy_cpu_pct"]))
        R["idle_rss_end_kb"] = {lb: proc_status(self.proxies[lb].pid, "VmRSS")
                                for lb, _ in labels}
        self.summarize(labels)

    def answers(self, labels):
        """The answer figures (CPU, first token, latency, system calls) for every label."""
        a, R = self.a, self.res
        R["profiles_seen"] = {}
        for lb, _ in labels if not self.up else ():     # the fake records the profile
            self.run_streams(lb, "bench_short", 1, 1, 20)     # resets the fake first
            time.sleep(0.3)     # the fake records a RunSSE when its handler returns
            R["profiles_seen"][lb] = sorted({q.get("profile") or "-" for q in self.fake.ctl(
                "/requests?since=0") if q["path"].endswith(("RunSSE", "BidiAppend"))})
            say("proxy %s: RunSSE/BidiAppend profiles seen upstream: %s"
                % (lb, ", ".join(R["profiles_seen"][lb])))
        for close in (0, 1):
            self.set_close(close)
            cb = "close" if close else "keep"
            # the floors are measured with kept-alive upstream connections only
            every = ["direct"] + [l for l, _ in labels] + (self.floors if not close else [])
            for lb in every:    # warm-up: model list cached, pools filled, pages touched
                self.run_streams(lb, "bench_unpaced", 1, 3, DELTAS)
            self.go_rounds(every, "unpaced_c1", cb, "bench_unpaced", 1, a.n1, DELTAS,
                           "cpu_ms_per_answer")
            self.go_rounds(every, "short_c1", cb, "bench_short", 1, a.short1, 20, "ttfb_p50_ms")
            self.go_rounds(every, "short_c64", cb, "bench_short", 64, a.short64, 20,
                           "ttfb_p50_ms")
            self.go_rounds(every, "paced_c1", cb, "bench_paced1", 1, a.paced, DELTAS,
                           "cpu_us_per_delta")
            self.go_rounds(every, "paced_c64", cb, "bench_paced64", 64, a.n64, PACED64,
                           "cpu_us_per_delta")
            self.go_rounds(every[1:], "unpaced_c64", cb, "bench_unpaced", 64, 64, DELTAS,
                           "cpu_ms_per_answer")
        self.set_close(0)
        every = ["direct"] + [l for l, _ in labels]
        for lb in every:
            self.go("%s_long64_c1_keep" % lb, lb, "bench_long64", 1, a.n1 * 2, DELTAS)
        if not a.no_strace and shutil.which("strace"):
            for close in (0, 1):
                self.set_close(close)
                cb = "close" if close else "keep"
                for lb, _ in labels:
                    for sc in ("bench_paced1", "bench_unpaced"):
                        k = "%s_%s_%s" % (lb, sc[6:], cb)
                        R["strace"][k] = x = self.strace_run(lb, sc, 1, DELTAS)
                        say("strace %-24s %.2f system calls per delta: %s" % (
                            k, x["per_delta"], ", ".join("%s %.2f" % kv for kv in
                                                         list(x["per_delta_by_call"].items())[:5])))
            self.set_close(0)

    FOCUS = {"paced64": ("bench_paced64", 64, "n64", PACED64),
             "paced1": ("bench_paced1", 1, "paced", DELTAS),
             "unpaced1": ("bench_unpaced", 1, "n1", DELTAS),
             "unpaced64": ("bench_unpaced", 64, None, DELTAS),
             "short64": ("bench_short", 64, "short64", 20),
             "short1": ("bench_short", 1, "short1", 20)}

    def focus(self, labels):
        """--focus ROW: that row only (kept-alive upstream), --rounds times for every label
        and floor, the labels interleaved in each round; prints each round and the median."""
        a, R = self.a, self.res
        sc, conc, cnt, expect = self.FOCUS[a.focus]
        count = getattr(a, cnt) if cnt else 64
        self.set_close(0)
        every = ["direct"] + [l for l, _ in labels] + list(self.floors)
        for lb in every:
            self.run_streams(lb, "bench_long64" if conc > 1 else sc, conc, conc,
                             DELTAS if conc > 1 else expect)
        got = {lb: [] for lb in every}
        for i in range(a.rounds):
            for lb in every:
                r = self.go("%s_%s_r%d" % (lb, a.focus, i), lb, sc, conc, count, expect)
                got[lb].append(r)
        R["focus"] = {}
        for lb in every:
            cpu = sorted(x["cpu_us_per_delta"] for x in got[lb]
                         if x.get("cpu_us_per_delta") is not None)
            ttfb = sorted(x["ttfb_p50_ms"] for x in got[lb] if x.get("ttfb_p50_ms") is not None)
            R["focus"][lb] = {"cpu_us_per_delta": cpu, "ttfb_p50_ms": ttfb}
            say("focus %-9s %-9s CPU us/delta median %s (%s); first token p50 median %s ms"
                % (a.focus, lb, "%.1f" % statistics.median(cpu) if cpu else "-",
                   " ".join("%.1f" % v for v in cpu),
                   "%.2f" % statistics.median(ttfb) if ttfb else "-"))

    def summarize(self, labels):
        R, runs = self.res, self.res["runs"]
        R["summary"] = {}
        for lb, _ in labels:
            s = R["summary"][lb] = {}
            for cb in (("keep", "close") if runs else ()):     # none with --hold-only
                u1, p1, p64, u64 = (runs["%s_%s_%s" % (lb, x, cb)] for x in
                                    ("unpaced_c1", "paced_c1", "paced_c64", "unpaced_c64"))
                d1, dp1, dp64 = (runs["direct_%s_%s" % (x, cb)] for x in
                                 ("unpaced_c1", "paced_c1", "paced_c64"))
                s["cpu_us_per_delta_paced_c1_" + cb] = p1["cpu_us_per_delta"]
                s["cpu_us_per_delta_paced_c64_" + cb] = p64["cpu_us_per_delta"]
                s["cpu_ms_per_answer_unpaced_c1_" + cb] = u1["cpu_ms_per_answer"]
                s["cpu_ms_per_answer_unpaced_c64_" + cb] = u64["cpu_ms_per_answer"]
                s1, s64 = (runs["%s_short_c%d_%s" % (lb, c, cb)] for c in (1, 64))
                ds1, ds64 = (runs["direct_short_c%d_%s" % (c, cb)] for c in (1, 64))
                s["ttfb_p50_ms_c1_" + cb] = s1["ttfb_p50_ms"]
                s["ttfb_p50_ms_c64_" + cb] = s64["ttfb_p50_ms"]
                s["added_ttfb_p50_ms_c1_" + cb] = s1["ttfb_p50_ms"] - ds1["ttfb_p50_ms"]
                s["added_ttfb_p99_ms_c1_" + cb] = s1["ttfb_p99_ms"] - ds1["ttfb_p99_ms"]
                s["added_ttfb_p50_ms_c64_" + cb] = s64["ttfb_p50_ms"] - ds64["ttfb_p50_ms"]
                s["added_ttfb_p99_ms_c64_" + cb] = s64["ttfb_p99_ms"] - ds64["ttfb_p99_ms"]
                s["handshakes_per_request_short_c1_" + cb] = s1["handshakes_per_request"]
                s["handshakes_per_request_short_c64_" + cb] = s64["handshakes_per_request"]
                if d1:
                    s["floor_client_cpu_us_per_delta_paced_" + cb] = \
                        1e6 * dp1["loadgen_cpu_s"] / max(1, dp1["deltas"])
                s["added_per_delta_p50_ms_" + cb] = p1["lat_p50_ms"] - dp1["lat_p50_ms"]
                s["added_per_delta_p99_ms_" + cb] = p1["lat_p99_ms"] - dp1["lat_p99_ms"]
                s["handshakes_per_request_c1_" + cb] = u1["handshakes_per_request"]
                s["handshakes_per_request_c64_" + cb] = p64["handshakes_per_request"]
                k = "%s_paced1_%s" % (lb, cb)
                if k in R["strace"]:
                    s["syscalls_per_delta_paced_" + cb] = R["strace"][k]["per_delta"]
                    s["syscalls_per_delta_unpaced_" + cb] = \
                        R["strace"]["%s_unpaced_%s" % (lb, cb)]["per_delta"]
            if runs:
                s["cpu_ms_per_answer_long64_c1"] = \
                    runs["%s_long64_c1_keep" % lb]["cpu_ms_per_answer"]
                s["added_ttfb_p50_ms_long64_c1"] = (
                    runs["%s_long64_c1_keep" % lb]["ttfb_p50_ms"]
                    - runs["direct_long64_c1_keep"]["ttfb_p50_ms"])
            for key, h in R["hold"].items():
                if key.startswith(lb + "_"):
                    n = h["n"]
                    if h.get("big"):    # its own rows: the n may differ per transport (caps)
                        s["hold_big"] = "%d of %d open, %d errors" % (
                            h["fake_max_active"] or 0, n, h["n_errors"])
                        s["hold_big_ok"] = h["n_errors"] == 0 and h["fake_max_active"] == n
                        s["handshakes_big"] = h["handshakes"]
                        d = h.get("dwell") or {}
                        s["dwell_rss_per_stream_kb_big"] = d.get("rss_per_stream_kb")
                        s["dwell_threads_per_stream_big"] = d.get("threads_per_stream")
                        s["dwell_messages_per_s_big"] = d.get("messages_per_s")
                        s["dwell_proxy_cpu_pct_big"] = d.get("proxy_cpu_pct")
                        n = "big"
                    else:
                        s["hold_%d" % n] = "%d open, %d errors" % (h["fake_max_active"] or 0,
                                                                   h["n_errors"])
                        s["hold_%d_ok" % n] = h["n_errors"] == 0 and h["fake_max_active"] == n
                    n = str(n)
                    s["rss_per_stream_kb_%s" % n] = h.get("rss_per_stream_kb")
                    s["threads_per_stream_%s" % n] = h.get("threads_per_stream")
                    s["fds_per_stream_%s" % n] = h.get("fds_per_stream")
                    s["ramp_s_%s" % n] = h.get("ramp_s")
                    s["upstream_conns_%s" % n] = h.get("upstream_conns")
                    s["handshakes_per_stream_%s" % n] = h["handshakes"] / float(h["n"])
            s["idle_rss_kb"] = R["idle_rss_kb"][lb]
            s["binary_kb"] = R["binary_bytes"][lb] / 1024.0
        R["upstream_busy"] = sorted(k for k, r in runs.items()
                                    if (r.get("upstream_cores") or 0) > 0.5)
        for fl in self.floors:      # the floors: the keep figures only
            s = R["summary"][fl] = {}
            u1, p1, p64, u64, s1, s64 = (runs.get("%s_%s_keep" % (fl, x)) for x in (
                "unpaced_c1", "paced_c1", "paced_c64", "unpaced_c64", "short_c1", "short_c64"))
            ds1, ds64 = runs.get("direct_short_c1_keep"), runs.get("direct_short_c64_keep")
            if p1:
                s["cpu_us_per_delta_paced_c1_keep"] = p1["cpu_us_per_delta"]
            if p64:
                s["cpu_us_per_delta_paced_c64_keep"] = p64["cpu_us_per_delta"]
            if u1:
                s["cpu_ms_per_answer_unpaced_c1_keep"] = u1["cpu_ms_per_answer"]
            if u64:
                s["cpu_ms_per_answer_unpaced_c64_keep"] = u64["cpu_ms_per_answer"]
            if s1:
                s["ttfb_p50_ms_c1_keep"] = s1["ttfb_p50_ms"]
            if s64:
                s["ttfb_p50_ms_c64_keep"] = s64["ttfb_p50_ms"]
            if s1 and ds1:
                s["added_ttfb_p50_ms_c1_keep"] = s1["ttfb_p50_ms"] - ds1["ttfb_p50_ms"]
            if s64 and ds64:
                s["added_ttfb_p50_ms_c64_keep"] = s64["ttfb_p50_ms"] - ds64["ttfb_p50_ms"]
        for lb in list(R["summary"]):
            for x in ("paced_c1", "paced_c64", "unpaced_c1", "unpaced_c64"):
                r = runs.get("%s_%s_keep" % (lb, x))
                if r and r.get("upstream_cores") is not None:
                    R["summary"][lb]["upstream_cores_%s_keep" % x] = r["upstream_cores"]
        s = R["summary"][labels[0][0]]
        R["verdict"] = {}
        for k, (t, f) in TARGETS.items():
            for cb in ("keep", "close"):
                v = s.get(k + "_" + cb)
                if v is not None:
                    R["verdict"][k + "_" + cb] = {"value": v, "target": t, "ok": bool(f(v))}
        R["startup_ms"] = R["startup"]["health_p50_ms"]

    def table(self):
        R, runs = self.res, self.res["runs"]
        m = R["machine"]
        labels = [lb for lb in R["summary"].keys() if lb not in R.get("floors", ())]
        L = []
        L.append("cursor-oai bench: %d CPUs (%s), Linux %s, loopback, fake upstream in Python %s"
                 % (m["cpus"], m["cpu"], m["kernel"], m["python"]))
        L.append("realistic shapes: one delta per frame per HTTP chunk per TLS record per write; "
                 "%d-delta answers unpaced and paced every %.1f ms (1 stream), %d-delta answers "
                 "every %.0f ms (64 streams)" % (DELTAS, PACE1_S * 1e3, PACED64, PACE64_S * 1e3))
        if R.get("label_env"):
            L.append("columns: the same binary per transport profile (%s); profiles seen "
                     "upstream: %s" % (", ".join("%s = %s" % (k, " ".join(
                         "%s=%s" % kv for kv in v.items())) for k, v in R["label_env"].items()),
                         json.dumps(R.get("profiles_seen"))))
        L.append("keep = the fake keeps RunSSE connections alive; close = it closes each after "
                 "its run. added = proxy - direct (BearSSL client straight to the fake, same run)")
        L.append("first token: 20-delta answers (100 one at a time, 256 64 at a time, after a "
                 "64-stream warm-up); the proxy's time includes its whole start: RunSSE, BidiAppend, "
                 "RunSSE headers")
        L.append("load average at start %.2f; per-run load averages in results.json"
                 % m["loadavg_start"])
        L.append("")
        w = max([9] + [len(lb) + 6 for lb in labels])
        hdr = "%-46s" % "figure"
        for lb in labels:
            hdr += " %*s %*s" % (w, lb + " keep", w, lb + " close")
        hdr += "  target"
        L.append(hdr)
        rows = [
            ("proxy CPU per delta, paced, 1 stream (us)", "cpu_us_per_delta_paced_c1", "%.1f"),
            ("proxy CPU per delta, paced, 64 streams (us)", "cpu_us_per_delta_paced_c64",
             "%.1f"),
            ("proxy CPU per answer, unpaced, 1 (ms)", "cpu_ms_per_answer_unpaced_c1", "%.2f"),
            ("proxy CPU per answer, unpaced, 64 (ms)", "cpu_ms_per_answer_unpaced_c64", "%.2f"),
            ("system calls per delta, paced", "syscalls_per_delta_paced", "%.2f"),
            ("system calls per delta, unpaced", "syscalls_per_delta_unpaced", "%.2f"),
            ("added first token p50, 1 stream (ms)", "added_ttfb_p50_ms_c1", "%.3f"),
            ("added first token p99, 1 stream (ms)", "added_ttfb_p99_ms_c1", "%.3f"),
            ("added first token p50, 64 streams (ms)", "added_ttfb_p50_ms_c64", "%.3f"),
            ("added first token p99, 64 streams (ms)", "added_ttfb_p99_ms_c64", "%.3f"),
            ("added latency per delta p50, paced (ms)", "added_per_delta_p50_ms", "%.3f"),
            ("added latency per delta p99, paced (ms)", "added_per_delta_p99_ms", "%.3f"),
            ("first token p50, 1 stream (ms)", "ttfb_p50_ms_c1", "%.3f"),
            ("first token p50, 64 streams (ms)", "ttfb_p50_ms_c64", "%.3f"),
            ("upstream handshakes per request, 1", "handshakes_per_request_short_c1", "%.3f"),
            ("upstream handshakes per request, 64", "handshakes_per_request_short_c64",
             "%.3f"),
            ("floor: direct client CPU per delta, paced (us)",
             "floor_client_cpu_us_per_delta_paced", "%.1f"),
        ]
        for name, key, fmt in rows:
            line = "%-46s" % name
            for lb in labels:
                for cb in ("keep", "close"):
                    v = R["summary"][lb].get(key + "_" + cb)
                    line += " %*s" % (w, fmt % v if v is not None else "-")
            t = TARGETS.get(key)
            line += "  " + (t[0] if t else "")
            L.append(line)
        L.append("")
        L.append("%-46s" % "secondary / other" + "".join(" %*s" % (2 * w + 1, lb)
                                                         for lb in labels))

        def orow(name, key, fmt):
            L.append("%-46s" % name + "".join(
                " %*s" % (2 * w + 1, fmt % R["summary"][lb][key]
                          if R["summary"][lb].get(key) is not None else "-") for lb in labels))
        orow("CPU per answer, 64 deltas per write, 1 (ms)", "cpu_ms_per_answer_long64_c1", "%.2f")
        orow("added first token, 64 per write, 1 (ms)", "added_ttfb_p50_ms_long64_c1", "%.3f")
        for n in hold_sizes(R):
            at = "all" if n == "big" else n
            orow("streams held at once (%s)" % ("big hold" if n == "big" else n), "hold_" + n,
                 "%s")
            orow("VmRSS per open stream, %s open (KB)" % at, "rss_per_stream_kb_" + n, "%.1f")
            orow("proxy threads per open stream, %s open" % at, "threads_per_stream_" + n,
                 "%.2f")
            orow("proxy descriptors per open stream, %s open" % at, "fds_per_stream_" + n,
                 "%.2f")
            orow("seconds to open all %s" % ("of them" if n == "big" else n), "ramp_s_" + n,
                 "%.1f")
            orow("upstream TLS connections, %s open" % at, "upstream_conns_" + n, "%s")
            orow("TLS handshakes per stream, %s open" % at, "handshakes_per_stream_" + n,
                 "%.3f")
            if n == "big":
                orow("TLS handshakes during the big hold",
                     "handshakes_big", "%s")
                orow("VmRSS per stream, %.0f s later (KB)" % self.a.hold_big_dwell,
                     "dwell_rss_per_stream_kb_big", "%.1f")
                orow("proxy threads per stream, %.0f s later" % self.a.hold_big_dwell,
                     "dwell_threads_per_stream_big", "%.2f")
                orow("heartbeats a second upstream, then", "dwell_messages_per_s_big", "%.0f")
                orow("proxy CPU, then (% of one core)", "dwell_proxy_cpu_pct_big", "%.1f")
        orow("idle VmRSS (KB)", "idle_rss_kb", "%d")
        orow("binary size (KB)", "binary_kb", "%.0f")
        L.append("start-up: exec -> /health answered %.2f ms (p50)" % R["startup_ms"])
        L.append("")
        if R.get("upstream_busy"):
            L.append("upstream over half a core (its figures say less about the proxy): %s"
                     % ", ".join(R["upstream_busy"]))
        for k, v in R["verdict"].items():
            if not v["ok"]:
                L.append("MISSED: %s = %.3f (target %s)" % (k, v["value"], v["target"]))
        errs = {k: r["errors"] for k, r in runs.items() if r["n_errors"]}
        errs.update({"hold_%s" % k: h["errors"] for k, h in R["hold"].items() if h["n_errors"]})
        val = sum(r["fake_validation_errors"] for r in runs.values())
        L.append("stream errors: %s; fake validation errors: %d"
                 % (json.dumps(errs) if errs else "none", val))
        return "\n".join(L)


def transport_table(res, loops):
    """The two transports side by side (issue 23): the h2 and connect columns of a default
    run's results.json, and the held-run row of toolloop.py --json."""
    S = res.get("summary", {})
    h2, h1 = S.get("h2"), S.get("connect")
    if h2 is None or h1 is None:
        return "(no HTTP/2 and HTTP/1.1 columns in these results: --compare or --one-profile)"
    L = ["", "HTTP/2 against HTTP/1.1 (the same binary, CURSOR_OAI_TRANSPORT=h2 / http1 "
         "with the connect profile; keep = the fake keeps HTTP/1.1 connections alive)",
         "%-58s %20s %20s" % ("figure", "HTTP/2", "HTTP/1.1")]

    def f(v, fmt):
        return fmt % v if v is not None else "-"

    def row(name, key, fmt, keys=("keep",)):
        a = " / ".join(f(h2.get(key + ("_" + k if k else "")), fmt) for k in keys)
        b = " / ".join(f(h1.get(key + ("_" + k if k else "")), fmt) for k in keys)
        L.append("%-58s %20s %20s" % (name, a, b))
    row("added first token p50, 1 stream (ms)", "added_ttfb_p50_ms_c1", "%.2f")
    row("added first token p50, 64 streams (ms)", "added_ttfb_p50_ms_c64", "%.2f")
    row("proxy CPU per delta, paced, 1 / 64 streams (us)", "cpu_us_per_delta_paced", "%.1f",
        ("c1_keep", "c64_keep"))
    row("proxy CPU per 2,000-delta answer, unpaced, 1 / 64 (ms)", "cpu_ms_per_answer_unpaced",
        "%.2f", ("c1_keep", "c64_keep"))
    row("system calls per delta, paced / unpaced", "syscalls_per_delta", "%.2f",
        ("paced_keep", "unpaced_keep"))
    row("upstream handshakes per request, 1 / 64 (keep)", "handshakes_per_request_short",
        "%.2f", ("c1_keep", "c64_keep"))
    row("upstream handshakes per request, 1 / 64 (close)", "handshakes_per_request_short",
        "%.2f", ("c1_close", "c64_close"))
    med = {}
    for x in loops or []:
        if x["continuation"] == "on" and x["ttft_ms"]:
            med[x["transport"]] = sorted(x["ttft_ms"])[len(x["ttft_ms"]) // 2]
    L.append("%-58s %20s %20s" % ("tool result -> next token, held run, median (ms)",
                                  f(med.get("h2"), "%.1f"), f(med.get("http1"), "%.1f")))
    for n in hold_sizes(res):
        if n != "big" and int(n) < 1000:
            continue
        row("streams held at once, %s: open / errors" % ("the big hold" if n == "big" else n),
            "hold_" + n, "%s", ("",))
        row("  VmRSS per stream (KB)", "rss_per_stream_kb_" + n, "%.1f", ("",))
        row("  threads per stream", "threads_per_stream_" + n, "%.2f", ("",))
        row("  descriptors per stream", "fds_per_stream_" + n, "%.2f", ("",))
        row("  upstream TLS connections", "upstream_conns_" + n, "%s", ("",))
        row("  seconds to open them all", "ramp_s_" + n, "%.1f", ("",))
        if n == "big":
            row("  TLS handshakes during the hold", "handshakes_big", "%s", ("",))
            row("  VmRSS per stream with heartbeats running (KB)", "dwell_rss_per_stream_kb_big",
                "%.1f", ("",))
            row("  heartbeats a second upstream", "dwell_messages_per_s_big", "%.0f", ("",))
    L.append("load average at the start %.2f (2 cores shared with other work: absolute times "
             "are noisy)" % res["machine"]["loadavg_start"])
    return "\n".join(L)


def floor_table(res):
    """Issue 32's table: each transport beside its floor (tests/bench/floor_h2.c on libnghttp2,
    floor_h1.c on plain sockets + OpenSSL, both in front of the same C upstream), the ratios, the
    targets, and the upstream's own CPU."""
    S = res.get("summary", {})
    h2, h1 = S.get("h2"), S.get("connect")
    f2, f1 = S.get("floor_h2", {}), S.get("floor_h1", {})
    if h2 is None or h1 is None:
        return ""

    def f(v, fmt):
        return fmt % v if v is not None else "-"

    def ratio(a, b):
        return a / b if a is not None and b not in (None, 0) else None
    L = ["", "Per transport against its floor (keep-alive upstream; upstream: %s)"
         % ("tests/bench/upstream.c" if res.get("upstream") == "c" else "the Python fake"),
         "%-44s %8s %8s %8s %8s %8s %8s %8s  %s" % (
             "figure", "HTTP/2", "floor", "÷ floor", "HTTP/1.1", "floor", "÷ floor", "h2÷h1",
             "issue 32 target (h2)")]
    rows = [
        ("proxy CPU per delta, paced, 1 stream (us)", "cpu_us_per_delta_paced_c1_keep", "%.1f",
         "<= h1, <= 1.15x floor", lambda r, rf: r <= 1.0 and (rf is None or rf <= 1.15)),
        ("proxy CPU per delta, paced, 64 streams (us)", "cpu_us_per_delta_paced_c64_keep",
         "%.1f", "<= 0.8x h1, <= 1.15x floor",
         lambda r, rf: r <= 0.8 and (rf is None or rf <= 1.15)),
        ("proxy CPU per 2,000-delta answer, unpaced, 1 (ms)", "cpu_ms_per_answer_unpaced_c1_keep",
         "%.2f", "<= 1.2x h1", lambda r, rf: r <= 1.2),
        ("proxy CPU per 2,000-delta answer, unpaced, 64 (ms)",
         "cpu_ms_per_answer_unpaced_c64_keep", "%.2f", "", None),
        # first token through each (20-delta answers); "added" subtracts the same direct run
        # from HTTP/2 and HTTP/1.1, so h2 <= h1 reads the same on either
        ("first token p50, 1 stream (ms)", "ttfb_p50_ms_c1_keep", "%.2f", "<= h1",
         lambda r, rf: r <= 1.0),
        ("first token p50, 64 streams (ms)", "ttfb_p50_ms_c64_keep", "%.2f", "<= h1",
         lambda r, rf: r <= 1.0),
        ("added first token p50, 1 stream (ms)", "added_ttfb_p50_ms_c1_keep", "%.2f", "", None),
        ("added first token p50, 64 streams (ms)", "added_ttfb_p50_ms_c64_keep", "%.2f", "", None),
    ]
    for name, key, fmt, target, ok in rows:
        a, b, fa, fb = h2.get(key), h1.get(key), f2.get(key), f1.get(key)
        r, ra, rb = ratio(a, b), ratio(a, fa), ratio(b, fb)
        if "added" in key:
            r = ra = rb = None      # an added time can be at or under zero: no ratio
            verdict = ""
        else:
            verdict = ("ok" if ok(r, ra) else "MISSED") if ok and r is not None else ""
        L.append("%-44s %8s %8s %8s %8s %8s %8s %8s  %s %s" % (
            name, f(a, fmt), f(fa, fmt), f(ra, "%.2fx"), f(b, fmt), f(fb, fmt), f(rb, "%.2fx"),
            f(r, "%.2fx"), target, verdict))
    for n in hold_sizes(res):
        if n != "big" and int(n) < 1000:
            continue
        a, b = h2.get("rss_per_stream_kb_" + n), h1.get("rss_per_stream_kb_" + n)
        L.append("%-44s %8s %8s %8s %8s %8s %8s %8s  %s" % (
            "VmRSS per held stream, %s (KB)" % ("the big hold" if n == "big" else n),
            f(a, "%.1f"), "", "", f(b, "%.1f"), "", "", f(ratio(a, b), "%.2fx"), "<= 50 KB"))
    L.append("%-44s %8s %8s %8s %8s" % (
        "upstream CPU, paced 1 / 64, unpaced 1 / 64 (cores)", "", "", "", ""))
    for lb, s_ in (("HTTP/2", h2), ("HTTP/1.1", h1), ("floor_h2", f2), ("floor_h1", f1)):
        L.append("  %-10s %s" % (lb, " / ".join(f(s_.get("upstream_cores_%s_keep" % x), "%.2f")
                                               for x in ("paced_c1", "paced_c64", "unpaced_c1",
                                                         "unpaced_c64"))))
    busy = res.get("upstream_busy")
    L.append("runs whose upstream used more than half a core: %s"
             % (", ".join(busy) if busy else "none"))
    las = [r["loadavg"] for r in res.get("runs", {}).values() if "loadavg" in r]
    L.append("load average: %.2f at the start, %.2f-%.2f at the runs' starts (2 cores shared)"
             % (res["machine"]["loadavg_start"], min(las) if las else 0, max(las) if las else 0))
    return "\n".join(L)


def hold_sizes(res):
    """The hold rows of a results.json: "64", "1000", ... then "big" (--hold-big)."""
    hs = res.get("hold", {}).values()
    return [str(n) for n in sorted({h["n"] for h in hs if not h.get("big")})] + \
        (["big"] if any(h.get("big") for h in hs) else [])


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
    return ("ttfb p50 %.3f p99 %.3f ms, total p50 %.1f ms, %d handshakes, errors %s%s%s, "
            "load %.2f" % (
                r["ttfb_p50_ms"] or -1, r["ttfb_p99_ms"] or -1, r["total_p50_ms"] or -1,
                r["handshakes"], r["errors"] or 0,
                (", per-delta p50 %.3f ms" % r["lat_p50_ms"])
                if r.get("lat_p50_ms") is not None else "",
                (", CPU %.1f us/delta %.2f ms/answer" % (r["cpu_us_per_delta"],
                                                          r["cpu_ms_per_answer"]))
                if r.get("cpu_us_per_delta") is not None else "", r["loadavg"])
            + ("" if r.get("upstream_cores") is None else ", upstream CPU %.2f cores%s" % (
                r["upstream_cores"], " UPSTREAM OVER HALF A CORE" if r["upstream_cores"] > 0.5
                else "")))


def say(s):
    print(s, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loadgen", default=os.path.join(ROOT, "build", "bench", "loadgen"))
    ap.add_argument("--proxy", default=os.environ.get("COAI_BENCH_PROXY")
                    or os.path.join(ROOT, "build", "cursor-oai"))
    ap.add_argument("--compare", default=os.environ.get("COAI_BENCH_COMPARE"),
                    help="a second proxy binary measured in the same run (e.g. the previous "
                    "release)")
    ap.add_argument("--one-profile", action="store_true",
                    help="measure the proxy in its default profile only (not connect and "
                    "grpc-web side by side)")
    ap.add_argument("--n1", type=int, default=20, help="unpaced answers one at a time")
    ap.add_argument("--n64", type=int, default=128, help="paced answers 64 at a time")
    ap.add_argument("--paced", type=int, default=5, help="paced answers one at a time")
    ap.add_argument("--short1", type=int, default=100,
                    help="short answers one at a time (first-token figures)")
    ap.add_argument("--short64", type=int, default=256,
                    help="short answers 64 at a time (first-token figures)")
    ap.add_argument("--hold", type=int, default=1000,
                    help="streams held at once (default 1000; 64 are held first; 0: no holds)")
    ap.add_argument("--hold-big", type=int, default=10000,
                    help="also hold this many streams at once over HTTP/2 and HTTP/1.1 "
                    "(Connect), each capped by RLIMIT_NOFILE (default 10000; 0: skip)")
    ap.add_argument("--hold-big-s", type=float, default=600.0,
                    help="the longest each held stream stays open upstream (the bench ends "
                    "them once measured)")
    ap.add_argument("--big-upstream", choices=("holdhost", "fake"), default="holdhost",
                    help="who holds --hold-big's runs over HTTP/2 and HTTP/1.1 (Connect): "
                    "tests/bench/holdhost.py (default: one asyncio loop) or the test fake (a "
                    "thread per stream: too slow for 10,000 on 2 cores)")
    ap.add_argument("--hold-big-dwell", type=float, default=30.0,
                    help="with holdhost: keep the big hold open this many seconds more and "
                    "measure again (heartbeats and PINGs running)")
    ap.add_argument("--ramp", type=int, default=200,
                    help="hold: at most this many streams starting at a time")
    ap.add_argument("--hold-only", action="store_true",
                    help="only the holds (64, --hold, --hold-big streams open), over HTTP/2 and "
                    "HTTP/1.1 (connect): memory, connections and handshakes per stream")
    ap.add_argument("--focus", choices=sorted(Bench.FOCUS),
                    help="only this row (kept-alive upstream), --rounds times per label and "
                    "floor, interleaved; prints every round and the median (for A/B work)")
    ap.add_argument("--rounds", type=int, default=5, help="with --focus: rounds")
    ap.add_argument("--row-rounds", type=int, default=3,
                    help="runs of each answer row per label, interleaved; the median one is "
                    "kept")
    ap.add_argument("--no-strace", action="store_true", help="skip the system call counts")
    ap.add_argument("--ttfb-fast", action="store_true",
                    help="only: first token over HTTP/2 and HTTP/1.1 with holdhost.py answering "
                    "the runs (no fake in the run path), 1, 8 and 64 at once (--short1, --short64 "
                    "answers); prints figures")
    ap.add_argument("--upstream", choices=("c", "fake"), default="c",
                    help="who answers the runs: tests/bench/upstream.c (default; the fake keeps "
                    "the unary calls) or the Python fake (the bench before issue 32)")
    ap.add_argument("--upstream-bin", default=os.path.join(ROOT, "build", "bench", "upstream"))
    ap.add_argument("--floor-h2", default=os.path.join(ROOT, "build", "bench", "floor_h2"))
    ap.add_argument("--floor-h1", default=os.path.join(ROOT, "build", "bench", "floor_h1"))
    ap.add_argument("--no-grpcweb", action="store_true",
                    help="measure HTTP/2 and HTTP/1.1 (Connect) only, not the grpc-web profile")
    ap.add_argument("--no-floors", action="store_true",
                    help="do not measure the floor proxies (tests/bench/floor_h1.c, floor_h2.c)")
    ap.add_argument("--startup-runs", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results.json"))
    ap.add_argument("--proxy-log-dir", default=None,
                    help="keep each proxy's log here (proxy-LABEL.log; tests/bench/lockwait.py "
                    "reads its instrumented proxy's)")
    ap.add_argument("--summary", metavar="TOOLLOOP_JSON",
                    help="measure nothing: print HTTP/2 against HTTP/1.1 from --out and "
                    "toolloop.py --json's file (tests/bench.sh does, after both)")
    a = ap.parse_args()
    if a.summary:
        with open(a.out) as f:
            res = json.load(f)
        loops = None
        if os.path.exists(a.summary):
            with open(a.summary) as f:
                loops = json.load(f)
        print(transport_table(res, loops))
        print(floor_table(res))
        return
    a.proxy = os.path.abspath(a.proxy)
    if a.compare:
        a.compare = os.path.abspath(a.compare)
    b = Bench(a)
    if a.ttfb_fast:
        try:
            b.ttfb_fast()
        finally:
            H.cleanup()
        return
    t0 = time.time()
    try:
        b.run()
    finally:
        H.cleanup()
    b.res["bench_seconds"] = time.time() - t0
    if a.focus:
        return
    print()
    tab = b.table()
    print(tab)
    b.res["table"] = tab.split("\n")
    ft = floor_table(b.res)
    print(ft)
    b.res["floor_table"] = ft.split("\n")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(b.res, f, indent=1, sort_keys=True)
    print("\nwrote %s (%.0f s)" % (os.path.relpath(a.out, ROOT), b.res["bench_seconds"]))


if __name__ == "__main__":
    main()
