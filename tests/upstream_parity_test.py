#!/usr/bin/python3
"""upstream_parity_test.py - talking to Cursor as the 2026 Cursor CLI does (order, client version,
agent host, profile, transport, headers): build/cursor-oai against the fake upstream modelling what
the notes describe.

  order     the seqno-0 BidiAppend only after the RunSSE head (the fake loses an append that
            races ahead of the run's registration)
  version   x-cursor-client-version: built-in default, CURSOR_CLIENT_VERSION, the newest
            installed cursor-agent build (every id form); `status` and the log say which
  outdated  a version floor: "Update Required" (resource_exhausted + error 28) becomes the
            outdated-client error, never a rate limit
  agent     HTTP/1.1 runs on the base URL, not on GetServerConfig's HTTP/2-only agent host;
            CURSOR_OAI_AGENT_URL; a host that refuses HTTP/1.1 at the connection level (400
            "illegal request line", a close, HTTP/2 frames): retried on the base URL and
            remembered for CURSOR_OAI_H2ONLY_REPROBE, then tried again; the region answer
            of a wrong host
  profile   Connect first, grpc-web the fallback on 415/464, CURSOR_OAI_PROFILE; a model,
            quota or 5xx error never switches the profile (one run, at once)
  cap       the prompt-size cap
  doctor    `cursor-oai doctor`: all OK, agent host broken, outdated version floor
  cli       the new variables refused when malformed; doctor's usage
  headers   the run's header set per transport, as the CLI sends it (late-autumn notes §3)
  h2cfg     GetServerConfig's http2_config decides the transport; CURSOR_OAI_TRANSPORT wins;
            the status page and doctor say which decided

Env: CURSOR_OAI_BIN (default build/cursor-oai), PARITY_ONLY=a,b (sections above).
Prints `RESULT <passed> <failed>` last."""

import json
import os
import re
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

BIN = H.proxy_cmd()[0]     # for the commands run here (status, doctor, --help)
ONLY = [x for x in os.environ.get("PARITY_ONLY", "").split(",") if x]
DEFAULT_VERSION = "cli-2026.10.01-e373342"
S = H.Suite("upstream_parity", section=None, limit=1500)
check, eq = S.check, S.eq


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def content(b):
    try:
        return jload(b)["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None


def err(b):
    return (jload(b) or {}).get("error") or {}


class Env:
    """One fake for the whole file; proxies come and go per check."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.token = pb.make_jwt({"sub": "auth0|parity", "email": "parity@example.com",
                                  "exp": int(time.time()) + 7200})
        self.fake = H.Fake(tmp, None, self.token, {"append_wait_s": 5.0})
        self.n = 0

    def proxy(self, env=None, home_setup=None):
        self.n += 1
        name = "p%d" % self.n
        extra = {"CURSOR_OAI_IDLE_TIMEOUT": "3"}
        extra.update(env or {})
        p = H.Proxy(self.tmp, name, self.fake.url(), self.fake.ca, self.token,
                    extra_env=extra) if home_setup is None else None
        if home_setup is not None:
            home = os.path.join(self.tmp, "home-" + name)
            os.makedirs(home, exist_ok=True)
            home_setup(home)
            p = H.Proxy(self.tmp, name, self.fake.url(), self.fake.ca, self.token,
                        extra_env=extra)
        return p

    def config(self, **kw):
        self.fake.ctl("/config", kw)

    def reset_config(self):
        self.config(register_delay_s=0.0, min_client_version=None, unsupported_profiles=[],
                    agent_url="agent", server_config=None, server_config_status=None,
                    server_config_seq=[], unsupported_status=415,
                    agent_http1="illegal", min_run_version="2026.10.01-0000000",
                    agent_host_only=False, runsse_scenario=None, outdated_error=28,
                    http2_config=None, agent_alpn=["h2"])

    def settle(self):
        # the fake records a run when its handler returns, which may be just after the
        # proxy answered the client (and after the stream left active_streams; over HTTP/2
        # after the client's END_STREAM, which a doctor sends as it exits): wait until every
        # request it has counted ("requests", at the start of its handler) is recorded (the
        # HTTP/1.1 refusals of an HTTP/2-only host are recorded without that count)
        def settled():
            s = self.fake.ctl("/state")
            c = s["counters"]
            refused = sum(v for k, v in c.items() if k.startswith("http1_refused_"))
            return s["active_streams"] == 0 and c.get("requests", 0) + refused <= s["n_requests"]
        H.wait_for(settled, 10)

    def requests_since(self, n0):
        self.settle()
        return self.fake.ctl("/requests?since=%d" % n0)

    def nreq(self):
        # settled first: a run of the previous check recorded after this count would be
        # counted as the next check's
        self.settle()
        return self.fake.ctl("/state")["n_requests"]

    def errors(self):
        return self.fake.ctl("/state")["errors"]


def chat(p, model="auto", text="hi", stream=False, timeout=30):
    return p.chat(model, text, stream=stream, timeout=timeout)


# ---------------------------------------------------------------------------------------------

def t_order(E):
    """The fake registers each run 0.5 s after its RunSSE arrived: an append sent before the
    RunSSE head is lost and the run never starts (today's binary waits into its idle timeout)."""
    E.config(register_delay_s=0.5)
    p = E.proxy()
    try:
        e0 = len(E.errors())
        t0 = time.time()
        st, b, _ = chat(p)
        eq("order: answer although the run registers late", (st, content(b)),
           (200, "Hello from fake Cursor."))
        check("order: the run waited for the registration", time.time() - t0 >= 0.5)
        errs = [e for e in E.errors()[e0:] if "registered" in e.get("error", "")]
        eq("order: no append before the RunSSE head", errs, [])
        st, hd, b, s = H.stream_chat(p.port, {"model": "auto", "stream": True, "messages": [
            {"role": "user", "content": "hi"}]}, 30)
        check("order: streaming too", st == 200 and H.parse_sse(b)["content"]
              == "Hello from fake Cursor.", (st, b[:300]))
    finally:
        p.stop()
        E.reset_config()


def t_order_cost(E):
    """What waiting for the RunSSE head costs: mean time to a complete answer over 30
    sequential requests (register delay 0), as a figure for the report."""
    p = E.proxy()
    try:
        chat(p)
        ts = []
        for _ in range(30):
            t0 = time.time()
            st, b, _ = chat(p)
            ts.append(time.time() - t0)
            if st != 200:
                break
        ts.sort()
        print("     order-cost: %d requests, median %.1f ms, mean %.1f ms (%s)"
              % (len(ts), ts[len(ts) // 2] * 1000, sum(ts) / len(ts) * 1000, BIN), flush=True)
        check("order-cost: 30 answers", len(ts) == 30)
    finally:
        p.stop()


def versions_of(E, n0, paths=("RunSSE", "BidiAppend", "/Run", "GetUsableModels",
                               "GetServerConfig")):
    out = {}
    for q in E.requests_since(n0):
        for k in paths:
            if q["path"].endswith(k):
                out.setdefault(k, set()).add(q["headers"].get("x-cursor-client-version"))
    return out


def t_version(E):
    # built-in default, on every upstream call
    n0 = E.nreq()
    p = E.proxy({"CURSOR_CLIENT_VERSION": ""})
    try:
        st, b, _ = chat(p)
        eq("version: default run works", st, 200)
        v = versions_of(E, n0)
        # HTTP/2: the Run stream, on the agent host GetServerConfig names
        eq("version: the built-in default on every call",
           {k: sorted(x) for k, x in v.items()},
           {k: [DEFAULT_VERSION] for k in (
               ("/Run", "GetUsableModels", "GetServerConfig") if H.TRANSPORT == "h2"
               else ("RunSSE", "BidiAppend", "GetUsableModels"))})
        pat = r"client version %s \(built-in default\)" % re.escape(DEFAULT_VERSION)
        log = H.wait_log(p.proc.log_path, lambda t: re.search(pat, t))
        check("version: start-up log names value and source", re.search(pat, log), log[-600:])
    finally:
        p.stop()

    # the newest installed cursor-agent build, in every id form
    def agent_dirs(names):
        def setup(home):
            d = os.path.join(home, ".local", "share", "cursor-agent", "versions")
            for n in names:
                os.makedirs(os.path.join(d, n), exist_ok=True)
        return setup
    for names, want, why in (
            (["2025.11.25-d5b3271", "2026.06.12-01-15-52-7244546", "2026.10.15-03-04-05-abcdef1-lab",
              "2026.10.15-aaaaaaa", "not-a-version", "2026.11.01-e373342.tmp"],
             "cli-2026.10.15-03-04-05-abcdef1-lab", "timestamped -lab id newest"),
            (["2026.10.02-fa0c06e-lab", "2026.08.31-4057e58"], "cli-2026.10.02-fa0c06e-lab",
             "-lab id"),
            (["2026.10.09-4057e58", "2026.06.12-19-59-36-f6aba9a"], "cli-2026.10.09-4057e58",
             "plain id"),
            (["2025.11.25-d5b3271", "2026.09.28-64d2043"], DEFAULT_VERSION,
             "older install: the built-in one")):
        n0 = E.nreq()
        p = E.proxy({"CURSOR_CLIENT_VERSION": ""}, home_setup=agent_dirs(names))
        try:
            st, b, _ = chat(p)
            v = versions_of(E, n0)
            eq("version: %s -> %s" % (why, want), (st, sorted(set().union(*v.values()))),
               (200, [want]))
            src = "installed cursor-agent" if want != DEFAULT_VERSION else "built-in default"
            line = "client version %s (%s" % (want, src)
            log = H.wait_log(p.proc.log_path, lambda t: line in t)
            check("version: log says %s (%s)" % (src, why), line in log, log[-600:])
        finally:
            p.stop()

    # CURSOR_CLIENT_VERSION wins; a bare build id gets "cli-"
    for val, want in (("cli-2026.10.05-9a7762b", "cli-2026.10.05-9a7762b"),
                      ("2026.10.05-9a7762b", "cli-2026.10.05-9a7762b"),
                      ("2026.10.05-01-02-03-9a7762b-lab", "cli-2026.10.05-01-02-03-9a7762b-lab")):
        n0 = E.nreq()
        p = E.proxy({"CURSOR_CLIENT_VERSION": val},
                    home_setup=agent_dirs(["2026.10.20-e373342"]))
        try:
            st, b, _ = chat(p)
            v = versions_of(E, n0)
            eq("version: CURSOR_CLIENT_VERSION=%s" % val, (st, sorted(set().union(*v.values()))),
               (200, [want]))
        finally:
            p.stop()

    # `status` says the value and where it came from
    home = os.path.join(E.tmp, "home-status")
    os.makedirs(os.path.join(home, ".local", "share", "cursor-agent", "versions",
                             "2026.10.15-d2fe57e"), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": E.fake.url(), "SSL_CERT_FILE": E.fake.ca,
                "CURSOR_ACCESS_TOKEN": E.token})
    r = subprocess.run([BIN, "status"], env=env, capture_output=True, text=True, timeout=60)
    check("version: status names value and source", r.returncode == 0 and
          "Client version: cli-2026.10.15-d2fe57e (installed cursor-agent" in r.stdout,
          (r.returncode, r.stdout, r.stderr))
    env["CURSOR_CLIENT_VERSION"] = "cli-2026.09.18-9a7762b"
    r = subprocess.run([BIN, "status"], env=env, capture_output=True, text=True, timeout=60)
    check("version: status with CURSOR_CLIENT_VERSION",
          "Client version: cli-2026.09.18-9a7762b (CURSOR_CLIENT_VERSION)" in r.stdout,
          r.stdout)


def t_outdated(E):
    # the fake gates runs as the live server does: older than cli-2026.10.01 -> "Update
    # Required"; the built-in default passes (cli-2026.08.11 did not)
    E.config(min_client_version="2026.08.01-0000000")
    p = E.proxy({"CURSOR_CLIENT_VERSION": ""})
    try:
        st, b, _ = chat(p)
        eq("outdated: the default version passes the run gate (2026-10-01)", (st, content(b)),
           (200, "Hello from fake Cursor."))
    finally:
        p.stop()
    E.reset_config()
    n0 = E.nreq()
    p = E.proxy({"CURSOR_CLIENT_VERSION": "cli-2026.09.28-64d2043"})
    try:
        st, b, _ = chat(p)
        e = err(b)
        eq("outdated: a cli-2026.09.28 run -> the outdated-client error from one run",
           (st, e.get("code"), profile_of(E, n0)), (502, "outdated_client", ["connect"]))
        check("outdated: Cursor's words (Update Required) and the hint",
              "Update Required" in e.get("message", "")
              and "CURSOR_CLIENT_VERSION" in e.get("message", ""), e)
        eq("outdated: unary calls are not gated", p.request("GET", "/v1/models")[0], 200)
    finally:
        p.stop()
    # a floor above it: the outdated-client error with its hint, never a rate/quota message
    for style in (28, 30):
        E.config(min_client_version="2026.12.01-0000000", outdated_error=style)
        p = E.proxy({"CURSOR_CLIENT_VERSION": ""})
        try:
            for stream in (False, True):
                if stream:
                    st, hd, b, _ = H.stream_chat(p.port, {"model": "auto", "stream": True,
                                                          "messages": [{"role": "user",
                                                                        "content": "hi"}]}, 30)
                    hd = hd or {}
                else:
                    st, b, hd = chat(p)
                e = err(b)
                name = "outdated (error %d, stream=%s)" % (style, stream)
                eq(name + ": 502 outdated_client", (st, e.get("code")), (502, "outdated_client"))
                check(name + ": hint names CURSOR_CLIENT_VERSION",
                      "CURSOR_CLIENT_VERSION" in e.get("message", ""), e)
                check(name + ": not a rate or quota message",
                      "rate limit" not in e.get("message", "").lower()
                      and "usage limit" not in e.get("message", "").lower()
                      and "retry-after" not in hd, (e, hd))
            st, b, hd = p.request("GET", "/v1/models")
            if style == 28:
                eq("outdated: /v1/models too", (st, err(b).get("code")), (502, "outdated_client"))
        finally:
            p.stop()
    E.reset_config()


def listeners_of(E, n0):
    out = {}
    for q in E.requests_since(n0):
        k = q["path"].rsplit("/", 1)[1]
        out.setdefault(k, set()).add(q["listener"])
    return {k: sorted(v) for k, v in out.items()}


def runsse_listeners(E, n0):
    return [(q["listener"], q.get("status") if str(q.get("status", "")).startswith("http1")
             else "ok") for q in E.requests_since(n0) if q.get("path", "").endswith("RunSSE")]


def poll_runsse(E, p, first, timeout=90):
    """Chats until a RunSSE's first try is `first` (a listener, or a (listener, status) pair)
    (timeout: None): its listeners, the answer and when it ran."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        n0 = E.nreq()
        t = time.time()
        st, b, _ = chat(p)
        ls = runsse_listeners(E, n0)
        if ls and (ls[0] == first or ls[0][0] == first):
            return ls, (st, content(b)), t
        time.sleep(0.3)
    return None


def t_reprobe(E, agent_url, secs):
    E.config(agent_http1="illegal")
    n0 = E.nreq()
    p = E.proxy({"CURSOR_OAI_AGENT_URL": agent_url, "CURSOR_OAI_H2ONLY_REPROBE": str(secs)})
    try:
        t0 = time.time()
        st, b, _ = chat(p)
        eq("reprobe: the forced host refuses HTTP/1.1 -> the base URL",
           (st, content(b), runsse_listeners(E, n0)),
           (200, "Hello from fake Cursor.", [("agent", "http1_refused:illegal"), ("main", "ok")]))
        n1 = E.nreq()
        t1 = time.time()
        st, b, _ = chat(p)
        if time.time() - t0 < secs - 0.5:       # a loaded machine may need longer than secs
            eq("reprobe: within the interval, straight to the base URL",
               (st, runsse_listeners(E, n1)), (200, [("main", "ok")]))
        else:
            print("     (the interval passed before the second chat ended: %.1f s; its check "
                  "is left out)" % (time.time() - t1), flush=True)
        got = poll_runsse(E, p, "agent")
        check("reprobe: after %d s the host is tried again" % secs, got is not None)
        if got:
            ls, ans, t = got
            eq("reprobe: refused again -> the base URL, the client still answered",
               (ls, ans), ([("agent", "http1_refused:illegal"), ("main", "ok")],
                           (200, "Hello from fake Cursor.")))
            check("reprobe: ... not before the interval", t - t0 >= secs, t - t0)
        said = lambda t: ("again after a re-probe" in t
                          and "for the next %d s, then it is tried again" % secs in t)
        log = H.wait_log(p.proc.log_path, said)
        check("reprobe: the log says so", said(log), log[-1200:])
        # the host serves HTTP/1.1 now: after the interval it gets the runs back (a spare
        # connection the proxy opened while the host still refused may be refused once more:
        # the fake decides when it accepts, then one more interval passes)
        E.config(agent_http1=True)
        got = poll_runsse(E, p, ("agent", "ok"), timeout=120)
        check("reprobe: a host that serves HTTP/1.1 by then is used again", got is not None
              and got[0] == [("agent", "ok")] and got[1] == (200, "Hello from fake Cursor."),
              got)
        m = p.request("GET", "/metrics")[1].decode()
        n = re.search(r'cursor_oai_fallbacks_total\{kind="http2_only_host"\} (\d+)', m)
        check("reprobe: each refusal is a counted fallback", n and int(n.group(1)) >= 2,
              [l for l in m.splitlines() if "fallback" in l])
    finally:
        p.stop()


def t_agent(E):
    agent_url = "https://localhost:%d" % E.fake.info["agent_port"]
    # The fake's GetServerConfig names its agent listener, which (like the live *.api5 hosts)
    # serves HTTP/2 only: HTTP/1.1 runs belong on the base URL and never go there.
    n0 = E.nreq()
    p = E.proxy()
    try:
        for stream in (False, True):
            if stream:
                st, hd, b, _ = H.stream_chat(p.port, {"model": "auto", "stream": True,
                                                      "messages": [{"role": "user",
                                                                    "content": "hi"}]}, 30)
                got = H.parse_sse(b)["content"] if st == 200 else b
            else:
                st, b, _ = chat(p)
                got = content(b)
            eq("agent: answer over HTTP/1.1 on the base URL (stream=%s)" % stream, (st, got),
               (200, "Hello from fake Cursor."))
        ls = listeners_of(E, n0)
        eq("agent: RunSSE/BidiAppend on the base URL, nothing to the HTTP/2-only agent host",
           (ls.get("RunSSE"), ls.get("BidiAppend"), ls.get("GetUsableModels")),
           (["main"], ["main"], ["main"]))
        eq("agent: the agent host refused nothing (never asked)",
           E.fake.ctl("/state")["counters"].get("http1_refused_agent", 0), 0)
        log = H.wait_log(p.proc.log_path, lambda t: "HTTP/1.1 runs to the base URL" in t)
        check("agent: the start-up log says where HTTP/1.1 runs go",
              "HTTP/1.1 runs to the base URL" in log, log[-600:])
    finally:
        p.stop()
    # CURSOR_OAI_AGENT_URL forces a host; one that refuses HTTP/1.1 at the connection level is
    # left for the base URL before anything reached the client, and remembered
    for mode, how in (("illegal", "illegal request line"), ("close", "a close before any byte"),
                      ("h2", "HTTP/2 frames"), ("464", "a 464")):
        E.config(agent_http1=mode)
        n0 = E.nreq()
        p = E.proxy({"CURSOR_OAI_AGENT_URL": agent_url})
        try:
            t0 = time.time()
            st, b, _ = chat(p)
            eq("agent: forced host refuses HTTP/1.1 (%s) -> answered via the base URL" % mode,
               (st, content(b)), (200, "Hello from fake Cursor."))
            check("agent: ... at once (%s)" % mode, time.time() - t0 < 8, time.time() - t0)
            eq("agent: RunSSE refused on the agent host, then on the base URL (%s)" % mode,
               runsse_listeners(E, n0), [("agent", "http1_refused:" + mode), ("main", "ok")])
            hs = [q["headers"] for q in E.requests_since(n0)
                  if q.get("path", "").endswith("RunSSE")]
            check("agent: the retry keeps x-original-request-id, with a new x-request-id (%s)"
                  % mode, len(hs) == 2 and hs[0].get("x-original-request-id")
                  == hs[1].get("x-original-request-id") == hs[0].get("x-request-id")
                  != hs[1].get("x-request-id"), hs)
            n1 = E.nreq()
            st, hd, b, _ = H.stream_chat(p.port, {"model": "auto", "stream": True, "messages": [
                {"role": "user", "content": "hi"}]}, 30)
            eq("agent: the HTTP/2-only host is remembered: straight to the base URL (%s)" % mode,
               (st, H.parse_sse(b)["content"] if st == 200 else b, runsse_listeners(E, n1)),
               (200, "Hello from fake Cursor.", [("main", "ok")]))
            pat = (r"localhost:%d serves HTTP/2 only \(it answered an HTTP/1\.1 request with "
                   r"[^)]*%s" % (E.fake.info["agent_port"], re.escape(how)))
            log = H.wait_log(p.proc.log_path, lambda t: re.search(pat, t))
            check("agent: the log says the host serves HTTP/2 only and how (%s)" % mode,
                  re.search(pat, log), log[-1200:])
            m = p.request("GET", "/metrics")[1].decode()
            check("agent: the fallback is counted (%s)" % mode,
                  'cursor_oai_fallbacks_total{kind="http2_only_host"} 1' in m,
                  [l for l in m.splitlines() if "fallback" in l])
        finally:
            p.stop()
    # a forced host that serves HTTP/1.1 is used (GetServerConfig is not asked)
    E.config(agent_http1=True)
    n0 = E.nreq()
    p = E.proxy({"CURSOR_OAI_AGENT_URL": agent_url})
    try:
        st, b, _ = chat(p)
        eq("agent: CURSOR_OAI_AGENT_URL", (st, content(b)), (200, "Hello from fake Cursor."))
        ls = listeners_of(E, n0)
        eq("agent: forced host used, no GetServerConfig",
           (ls.get("RunSSE"), ls.get("BidiAppend"), ls.get("GetServerConfig")),
           (["agent"], ["agent"], None))
    finally:
        p.stop()
    # ... remembered for CURSOR_OAI_H2ONLY_REPROBE seconds only (short here), then tried again:
    # refused again, it is remembered again; serving HTTP/1.1 by then, it gets the runs back
    t_reprobe(E, agent_url, 6)
    E.reset_config()
    # a host that ends every run at once without an answer: the region problem, named, one run
    E.config(agent_host_only=True)
    n0 = E.nreq()
    p = E.proxy()
    try:
        for stream in (False, True):
            if stream:
                st, hd, b, _ = H.stream_chat(p.port, {"model": "auto", "stream": True,
                                                      "messages": [{"role": "user",
                                                                    "content": "hi"}]}, 30)
            else:
                st, b, _ = chat(p)
            e = err(b)
            eq("agent: a host that ends the run at once -> 502 naming the region (stream=%s)"
               % stream, (st, e.get("code")), (502, "upstream_wrong_region"))
            check("agent: the message names the region problem and the host",
                  "region" in e.get("message", "") and "localhost" in e.get("message", ""), e)
        eq("agent: one run per request, on the base URL", runsse_listeners(E, n0),
           [("main", "ok"), ("main", "ok")])
    finally:
        p.stop()
    E.reset_config()


def profile_of(E, n0, path=H.RUN_PATH):
    return [q.get("profile") for q in E.requests_since(n0) if q["path"].endswith(path)]


def t_profile(E):
    # the default is Connect: application/connect+proto RunSSE, application/proto BidiAppend
    n0 = E.nreq()
    e0 = len(E.errors())
    p = E.proxy()
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("profile: Connect by default, end to end (KV reply, text)", (st, content(b)),
           (200, "Hello, world! w\u00f6rld \U0001f30d"))
        qs = E.requests_since(n0)
        rs = [q for q in qs if q["path"].endswith("RunSSE")]
        ap = [q for q in qs if q["path"].endswith("BidiAppend")]
        eq("profile: Connect headers on RunSSE",
           [(q["headers"].get("content-type"), q["headers"].get("connect-protocol-version"),
             "x-cursor-checksum" in q["headers"]) for q in rs],
           [("application/connect+proto", "1", False)])
        eq("profile: Connect BidiAppends (seqno 0 + KV reply)",
           [(q["headers"].get("content-type"), q["decoded"]["append_seqno"]) for q in ap],
           [("application/proto", 0), ("application/proto", 1)])
        hk = [q["headers"].get("x-blob-encryption-key") for q in rs + ap]
        check("profile: x-blob-encryption-key (32 random bytes as hex) on RunSSE and every "
              "BidiAppend", len(set(hk)) == 1 and re.match(r"^[0-9a-f]{64}$", hk[0] or ""), hk)
        eq("profile: x-original-request-id on RunSSE and every BidiAppend: the run's id",
           [q["headers"].get("x-original-request-id") for q in rs + ap],
           [rs[0]["headers"].get("x-request-id")] * len(rs + ap))
        n1 = E.nreq()
        chat(p, "scenario:text_basic")
        q2 = [q for q in E.requests_since(n1) if q["path"].endswith(("RunSSE", "BidiAppend"))]
        check("profile: one blob key per process, a new original id per request",
              q2 and all(q["headers"].get("x-blob-encryption-key") == hk[0] for q in q2)
              and q2[0]["headers"].get("x-original-request-id") not in (
                  None, rs[0]["headers"].get("x-original-request-id")), q2[:1])
        eq("profile: nothing compressed (no content-encoding, no compressed flag)",
           ([q for q in rs + ap if q["headers"].get("content-encoding")
             or q["headers"].get("connect-content-encoding")
             or (q["headers"].get("content-type", "").startswith("application/connect")
                 and int(q["body_hex"][:2], 16) & 1)],
            E.fake.ctl("/state")["counters"].get("compressed_appends", 0)), ([], 0))
        st, b, hd = chat(p, "scenario:usage_limit")
        eq("profile: Connect end-stream error mapped", (st, err(b).get("code")),
           (402, "insufficient_quota"))
        st, hd, b, _ = H.stream_chat(p.port, {"model": "scenario:thinking", "stream": True,
                                              "messages": [{"role": "user",
                                                            "content": "hi"}]}, 30)
        s = H.parse_sse(b) if st == 200 else {}
        eq("profile: Connect streaming", (st, s.get("content"), s.get("reasoning")),
           (200, "The answer is 42.", "Let me think about it."))
        eq("profile: no validation errors", E.errors()[e0:], [])
    finally:
        p.stop()
    # grpc-web forced: the tested fallback (the vectors' byte format)
    n0 = E.nreq()
    p = E.proxy({"CURSOR_OAI_PROFILE": "grpc-web"})
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("profile: grpc-web end to end (KV reply, text)", (st, content(b)),
           (200, "Hello, world! w\u00f6rld \U0001f30d"))
        eq("profile: grpc-web used", (profile_of(E, n0), sorted(set(profile_of(
            E, n0, "BidiAppend")))), (["grpc-web"], ["grpc-web"]))
    finally:
        p.stop()
    # Connect with JSON BidiAppends (the other encoding one peer uses)
    n0 = E.nreq()
    e0 = len(E.errors())
    p = E.proxy({"CURSOR_OAI_PROFILE": "connect", "CURSOR_OAI_CONNECT_APPEND": "json"})
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("profile: Connect + JSON BidiAppend end to end (KV reply, text)", (st, content(b)),
           (200, "Hello, world! w\u00f6rld \U0001f30d"))
        ap = [q for q in E.requests_since(n0) if q["path"].endswith("BidiAppend")]
        eq("profile: JSON BidiAppends", [(q["headers"].get("content-type"),
                                          q["decoded"]["append_seqno"]) for q in ap],
           [("application/json", 0), ("application/json", 1)])
        k2 = ap[0]["headers"].get("x-blob-encryption-key") if ap else None
        check("profile: another process, another blob key", k2 and k2 != hk[0], (k2, hk[0]))
        eq("profile: no validation errors (JSON)", E.errors()[e0:], [])
    finally:
        p.stop()
    # fallback: a server that answers 415 to Connect
    E.config(unsupported_profiles=["connect"])
    n0 = E.nreq()
    p = E.proxy()
    try:
        st, b, _ = chat(p)
        eq("profile: 415 on Connect -> retried with grpc-web", (st, content(b)),
           (200, "Hello from fake Cursor."))
        eq("profile: first Connect, then grpc-web", profile_of(E, n0), ["connect", "grpc-web"])
        n1 = E.nreq()
        st, b, _ = chat(p)
        eq("profile: the working profile is remembered", (st, profile_of(E, n1)),
           (200, ["grpc-web"]))
        log = H.wait_log(p.proc.log_path, lambda t: "retrying with grpc-web" in t)
        check("profile: the switch is logged", "retrying with grpc-web" in log, log[-800:])
    finally:
        p.stop()
    # the same with the load balancer's 464
    E.config(unsupported_status=464)
    n0 = E.nreq()
    p = E.proxy()
    try:
        st, b, _ = chat(p)
        eq("profile: 464 on Connect -> retried with grpc-web", (st, content(b),
                                                               profile_of(E, n0)),
           (200, "Hello from fake Cursor.", ["connect", "grpc-web"]))
    finally:
        p.stop()
    E.config(unsupported_status=415)
    # forced Connect against that server: no fallback, a clear error
    p = E.proxy({"CURSOR_OAI_PROFILE": "connect"})
    try:
        st, b, _ = chat(p)
        check("profile: CURSOR_OAI_PROFILE=connect does not fall back", st == 502 and
              "415" in err(b).get("message", ""), (st, b[:300]))
    finally:
        p.stop()
    # the reverse: grpc-web refused, Connect works
    E.config(unsupported_profiles=["grpc-web"])
    p = E.proxy({"CURSOR_OAI_PROFILE": "grpc-web"})
    try:
        st, b, _ = chat(p)
        check("profile: forced grpc-web against a Connect-only server fails clearly",
              st == 502 and "415" in err(b).get("message", ""), (st, b[:300]))
    finally:
        p.stop()
    n0 = E.nreq()
    p = E.proxy()
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("profile: Connect-only server: answered", (st, content(b)),
           (200, "Hello, world! w\u00f6rld \U0001f30d"))
        eq("profile: only Connect asked", profile_of(E, n0), ["connect"])
    finally:
        p.stop()
    E.reset_config()
    # ordinary upstream errors never switch the profile: one run, Cursor's words, at once
    p = E.proxy()
    try:
        for stream in (False, True):
            n0 = E.nreq()
            t0 = time.time()
            if stream:
                st, hd, b, _ = H.stream_chat(p.port, {"model": "scenario:deprecated_model",
                                                      "stream": True, "messages": [
                                                          {"role": "user", "content": "hi"}]}, 30)
                m = re.search(rb'\{"error":.*\}', b or b"")
                e = err(m.group(0)) if m else {}
            else:
                st, b, _ = chat(p, "scenario:deprecated_model")
                e = err(b)
            took = time.time() - t0
            name = "profile: deprecated model (grpc-status 3 + ERROR_DEPRECATED, stream=%s)" % stream
            eq(name + ": 404 model_not_found", (st, e.get("code")), (404, "model_not_found"))
            check(name + ": Cursor's words in the message",
                  "claude-3.5-sonnet is deprecated" in e.get("message", ""), e)
            eq(name + ": exactly one run", profile_of(E, n0), ["connect"])
            check(name + ": at once", took < 5, took)
        for scen, cfg, want in (("scenario:usage_limit", {}, 402),
                                ("auto", {"runsse_scenario": "runsse_500"}, None)):
            E.config(**cfg)
            n0 = E.nreq()
            st, b, _ = chat(p, scen)
            E.config(runsse_scenario=None)
            check("profile: %s%s -> an error, never the other profile" % (scen, cfg or ""),
                  st >= 400 and (want is None or st == want)
                  and set(profile_of(E, n0)) == {"connect"}, (st, b[:300], profile_of(E, n0)))
    finally:
        p.stop()
    E.reset_config()
    # an outdated-client answer about the version alone: one run, the version error
    E.config(min_client_version="2026.12.01-0000000")
    n0 = E.nreq()
    p = E.proxy({"CURSOR_CLIENT_VERSION": ""})
    try:
        st, b, _ = chat(p)
        eq("profile: outdated answer -> the version error from one run, no profile switch",
           (st, err(b).get("code"), profile_of(E, n0)),
           (502, "outdated_client", ["connect"]))
    finally:
        p.stop()
    E.reset_config()


def t_cap(E):
    n0 = E.nreq()
    p = E.proxy({"CURSOR_OAI_MAX_PROMPT_BYTES": "2000"})
    try:
        st, b, hd = chat(p, text="x" * 1900)
        eq("cap: under the cap", st, 200)
        # the fake records a run when its stream ends, which may be after the answer (on
        # HTTP/2 the stream closes last): wait for that record before counting from here
        H.wait_for(lambda: [q for q in E.requests_since(n0) if q["path"].endswith(
            H.RUN_PATH)], 10)
        n1 = E.nreq()
        st, b, hd = chat(p, text="y" * 2100)
        e = err(b)
        eq("cap: over the cap -> 400 context_length_exceeded", (st, e.get("code")),
           (400, "context_length_exceeded"))
        check("cap: the message names the size and the cap",
              re.search(r"\b2\d{3}-byte prompt", e.get("message", "")) and "2000" in
              e.get("message", ""), e)
        eq("cap: nothing sent upstream", [q["path"] for q in E.requests_since(n1)
                                          if "Run" in q["path"] or "Bidi" in q["path"]], [])
    finally:
        p.stop()
    del n0


def doctor(E, env=None, args=()):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    home = os.path.join(E.tmp, "home-doctor")
    os.makedirs(home, exist_ok=True)
    e.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
              "CURSOR_API_URL": E.fake.url(), "SSL_CERT_FILE": E.fake.ca,
              "CURSOR_ACCESS_TOKEN": E.token, "CURSOR_OAI_IDLE_TIMEOUT": "3",
              "CURSOR_OAI_TRANSPORT": H.TRANSPORT})
    e.update(env or {})
    r = subprocess.run([BIN, "doctor"] + list(args), env=e, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def line(out, prefix):
    return [l for l in out.splitlines() if l.startswith(prefix)]


def t_doctor(E):
    secrets = (E.token, E.token.split(".")[1])
    aport = E.fake.info["agent_port"]
    # all OK
    rc, out = doctor(E)
    print("     doctor (all OK):\n" + "\n".join("       " + l for l in out.splitlines()),
          flush=True)
    eq("doctor: all OK exits 0", rc, 0)
    for step in ("credentials", "GetServerConfig", "GetUsableModels", "run (connect)"):
        check("doctor: %s OK" % step, line(out, "OK   " + step), out)
    check("doctor: reports client version and hosts", "Client version: " + DEFAULT_VERSION in out
          and "Base URL:       https://localhost:%d" % E.fake.port in out, out)
    check("doctor: reports the HTTP version, host and profile of the run",
          "Transport:      HTTP/1.1: RunSSE + BidiAppend (CURSOR_OAI_TRANSPORT=http1)" in out
          and "HTTP/1.1 runs:  https://localhost:%d (the base URL)" % E.fake.port in out
          and any("HTTP/1.1 to https://localhost:%d" % E.fake.port in l
                  for l in line(out, "OK   run (connect)"))
          and "transport profile connect" in out, out)
    check("doctor: GetServerConfig's host is named as the HTTP/2 agent host",
          any("HTTP/2 agent host https://localhost:%d" % aport in l
              for l in line(out, "OK   GetServerConfig")), out)
    check("doctor: each step timed", len(re.findall(r"\(\s*\d+ ms\)", out)) >= 4, out)
    check("doctor: never prints a token", not any(x in out for x in secrets))
    check("doctor: the run answered", "answered \"Hello from fake Cursor.\"" in out, out)
    # a forced host that serves HTTP/2 only: named in those words, the run on the base URL
    rc, out = doctor(E, {"CURSOR_OAI_AGENT_URL": "https://localhost:%d" % aport})
    print("     doctor (HTTP/2-only host):\n" + "\n".join("       " + l
                                                          for l in out.splitlines()), flush=True)
    eq("doctor: HTTP/2-only forced host: the run still works (exit 0)", rc, 0)
    check("doctor: HTTP/2-only forced host: named in those words, with what to do",
          any("localhost:%d serves HTTP/2 only" % aport in l and "illegal request line" in l
              for l in line(out, "WARN agent host")) and "unset CURSOR_OAI_AGENT_URL" in out,
          out)
    check("doctor: HTTP/2-only forced host: the run went to the base URL",
          any("HTTP/1.1 to https://localhost:%d" % E.fake.port in l
              for l in line(out, "OK   run (connect)")), out)
    # the base URL itself serves HTTP/2 only: nowhere left to go, said in those words
    rc, out = doctor(E, {"CURSOR_API_URL": "https://localhost:%d" % aport})
    check("doctor: an HTTP/2-only base URL: the runs fail naming it, with what to do",
          rc == 1 and all("localhost:%d serves HTTP/2 only" % aport in l
                          and "upstream_http2_only" in l for l in line(out, "FAIL run"))
          and len(line(out, "FAIL run")) == 2 and "set CURSOR_API_URL to a host that serves "
          "HTTP/1.1" in out and not line(out, "     -> run with --verbose"), out)
    # the forced host is down
    dead = H.free_port()
    rc, out = doctor(E, {"CURSOR_OAI_AGENT_URL": "https://localhost:%d" % dead})
    print("     doctor (agent host down):\n" + "\n".join("       " + l for l in out.splitlines()),
          flush=True)
    eq("doctor: agent host down exits 1", rc, 1)
    check("doctor: agent host down: both profiles tried and failed",
          line(out, "FAIL run (grpc-web)") and line(out, "FAIL run (connect)"), out)
    check("doctor: agent host down: the verdict names the unreachable host",
          re.search(r"cannot reach https://localhost:%d" % dead, out), out)
    # a host that ends the run at once: the region problem
    E.config(agent_host_only=True)
    rc, out = doctor(E)
    eq("doctor: wrong region exits 1", rc, 1)
    check("doctor: wrong region: the verdict names the region problem",
          "upstream_wrong_region" in out and "does not serve your account's region" in out, out)
    E.reset_config()
    # an outdated version floor
    E.config(min_client_version="2026.12.01-0000000")
    rc, out = doctor(E)
    print("     doctor (outdated):\n" + "\n".join("       " + l for l in out.splitlines()),
          flush=True)
    eq("doctor: outdated floor exits 1", rc, 1)
    check("doctor: outdated: models step fails naming it",
          any("outdated" in l for l in line(out, "FAIL GetUsableModels")), out)
    check("doctor: outdated: the runs fail as outdated_client",
          any("outdated_client" in l for l in line(out, "FAIL run")), out)
    check("doctor: outdated: the advice names CURSOR_CLIENT_VERSION and the version used",
          ("refuses the client version %s as outdated" % DEFAULT_VERSION) in out
          and "CURSOR_CLIENT_VERSION" in out, out)
    E.reset_config()
    # an old CURSOR_CLIENT_VERSION: only runs are gated
    rc, out = doctor(E, {"CURSOR_CLIENT_VERSION": "cli-2026.09.28-64d2043"})
    check("doctor: an old version: the run fails as outdated, with the advice",
          rc == 1 and line(out, "OK   GetUsableModels")
          and any("outdated_client" in l for l in line(out, "FAIL run (connect)"))
          and "refuses the client version cli-2026.09.28-64d2043 as outdated" in out, out)
    # only grpc-web works
    E.config(unsupported_profiles=["connect"])
    rc, out = doctor(E)
    print("     doctor (Connect refused):\n" + "\n".join("       " + l
                                                         for l in out.splitlines()), flush=True)
    eq("doctor: Connect refused, grpc-web works -> exit 0", rc, 0)
    check("doctor: connect FAIL naming the refused profile, grpc-web OK",
          line(out, "FAIL run (connect)") and "Cursor refused the connect profile" in out
          and line(out, "OK   run (grpc-web)") and "CURSOR_OAI_PROFILE=grpc-web" in out, out)
    E.reset_config()
    # not logged in
    rc, out = doctor(E, {"CURSOR_ACCESS_TOKEN": ""})
    check("doctor: not logged in -> exit 1, advice to log in",
          rc == 1 and line(out, "FAIL credentials") and "cursor-oai login" in out, out)


def t_cli(E):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    base.update({"HOME": E.tmp, "SSL_CERT_FILE": E.fake.ca, "CURSOR_ACCESS_TOKEN": E.token})
    for var, val in (("CURSOR_OAI_PROFILE", "grpc"), ("CURSOR_OAI_AGENT_URL", "http://x"),
                     ("CURSOR_OAI_MAX_PROMPT_BYTES", "0"), ("CURSOR_OAI_MAX_PROMPT_BYTES", "1k"),
                     ("CURSOR_OAI_CONNECT_APPEND", "xml")):
        try:
            r = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0"],
                               env=dict(base, **{var: val}), capture_output=True, text=True,
                               timeout=10)
            got = (r.returncode, r.stderr)
        except subprocess.TimeoutExpired:
            got = (None, "still serving after 10 s")
        check("cli: %s=%s is refused naming it" % (var, val), got[0] == 1 and var in got[1],
              got)
    r = subprocess.run([BIN, "doctor", "--help"], env=base, capture_output=True, text=True,
                       timeout=20)
    check("cli: doctor --help", r.returncode == 0 and "Usage: cursor-oai doctor" in r.stdout, r)
    r = subprocess.run([BIN, "doctor", "--bogus"], env=base, capture_output=True, text=True,
                       timeout=20)
    eq("cli: doctor with an unknown option", r.returncode, 2)
    r = subprocess.run([BIN, "--help"], env=base, capture_output=True, text=True, timeout=20)
    check("cli: --help lists doctor", "cursor-oai doctor" in r.stdout, r.stdout)


# The header set of a run as the CLI sends it (late-autumn notes N6 and section 3), without the
# pseudo-headers (the fake records HTTP/2's :authority as host). The proxy never reads a
# compressed frame, so it sends no connect-accept-encoding; it compresses nothing either.
RUN_HEADERS_H2 = ["authorization", "connect-protocol-version", "content-type", "host",
                  "user-agent", "x-blob-encryption-key", "x-cursor-client-type",
                  "x-cursor-client-version", "x-ghost-mode", "x-original-request-id",
                  "x-request-id"]


def t_headers(E):
    """The run's header set per transport: x-original-request-id and x-blob-encryption-key on
    both; x-cursor-streaming on RunSSE only (not on BidiAppend, not on the HTTP/2 Run)."""
    n0 = E.nreq()
    e0 = len(E.errors())
    p = E.proxy()
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("headers: the run answers", (st, content(b)),
           (200, "Hello, world! w\u00f6rld \U0001f30d"))
        qs = E.requests_since(n0)
        runs = [q for q in qs if q["path"].endswith(H.RUN_PATH)]
        ap = [q for q in qs if q["path"].endswith("BidiAppend")]
        check("headers: one run", len(runs) == 1, [q["path"] for q in qs])
        h = runs[0]["headers"] if runs else {}
        check("headers (%s): x-original-request-id = the run's x-request-id, on the run and "
              "every BidiAppend" % H.TRANSPORT, all(
                  q["headers"].get("x-original-request-id") == h.get("x-request-id") is not None
                  for q in runs + ap), [q["headers"] for q in runs + ap])
        check("headers (%s): x-blob-encryption-key (64 hex) on the run and every BidiAppend"
              % H.TRANSPORT, all(re.match(r"^[0-9a-f]{64}$", q["headers"].get(
                  "x-blob-encryption-key") or "") for q in runs + ap),
              [q["headers"].get("x-blob-encryption-key") for q in runs + ap])
        check("headers (%s): no connect-accept-encoding, no (connect-)content-encoding, no te"
              % H.TRANSPORT, not any(k in q["headers"] for q in runs + ap for k in (
                  "connect-accept-encoding", "connect-content-encoding", "content-encoding",
                  "te")), [q["headers"] for q in runs + ap])
        if H.TRANSPORT == "h2":
            eq("headers (h2): the Run's header set is the CLI's (no x-cursor-streaming)",
               sorted(h), RUN_HEADERS_H2)
        else:
            eq("headers (http1): x-cursor-streaming on RunSSE only, not on BidiAppend",
               ([q["headers"].get("x-cursor-streaming") for q in runs],
                [q["headers"].get("x-cursor-streaming") for q in ap]),
               (["true"], [None] * len(ap)))
        eq("headers: no validation errors", E.errors()[e0:], [])
    finally:
        p.stop()
    # doctor names the header set its run sent (names only, never a value)
    rc, out = doctor(E)
    step = "OK   Run headers" if H.TRANSPORT == "h2" else "OK   RunSSE headers"
    ln = line(out, step)
    check("doctor: the %s line lists the names the run sent, no values" % step[5:],
          ln and "x-original-request-id" in ln[0] and "x-blob-encryption-key" in ln[0]
          and ("x-cursor-streaming" in ln[0]) == (H.TRANSPORT != "h2")
          and E.token not in out and "Bearer" not in ln[0], out)


def run_transports(E, n0):
    """The transport of each run since n0: "http1" (RunSSE) or "h2" (Run)."""
    return ["http1" if q["path"].endswith("RunSSE") else "h2" for q in E.requests_since(n0)
            if q["path"].endswith(("RunSSE", "/Run"))]


def t_h2cfg(E):
    """GetServerConfig's http2_config decides the transport as the SDK obeys it (1, 3:
    HTTP/1.1; 2, 4: HTTP/2 without the fallback); CURSOR_OAI_TRANSPORT still wins; the status
    page and doctor say which decided."""
    auto = {"CURSOR_OAI_TRANSPORT": "auto"}
    for v, want in ((1, "http1"), (3, "http1"), (2, "h2"), (4, "h2")):
        name = ["", "FORCE_ALL_DISABLED", "FORCE_ALL_ENABLED", "FORCE_BIDI_DISABLED",
                "FORCE_BIDI_ENABLED"][v]
        E.config(http2_config=v)
        n0 = E.nreq()
        p = E.proxy(auto)
        try:
            st, b, _ = chat(p, "scenario:text_basic")
            eq("http2_config=%s: the run goes over %s" % (name, want),
               (st, run_transports(E, n0)), (200, [want]))
            tr = jload(p.get("/status.json")[1])["upstream"]["transport"]
            check("http2_config=%s: the status page says the server config decided" % name,
                  "server config http2_config=" + name in tr, tr)
        finally:
            p.stop()
        rc, out = doctor(E, auto)
        check("http2_config=%s: doctor says the transport and that the server config decided"
              % name, any(("HTTP/1.1" if want == "http1" else "HTTP/2") in l
                          and "(server config http2_config=%s)" % name in l
                          for l in line(out, "OK   transport")), out)
    # FORCE_ALL_ENABLED: no fallback to HTTP/1.1 when HTTP/2 fails (an agent host without h2)
    E.config(http2_config=2, agent_alpn=["http/1.1"], agent_http1=True)
    n0 = E.nreq()
    p = E.proxy(auto)
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        check("http2_config=FORCE_ALL_ENABLED and HTTP/2 fails: an error, no HTTP/1.1 run",
              st >= 500 and "http1" not in run_transports(E, n0), (st, b[:300]))
    finally:
        p.stop()
    E.config(http2_config=None, agent_alpn=["h2"], agent_http1="illegal")
    # CURSOR_OAI_TRANSPORT wins over the server config
    E.config(http2_config=1)
    n0 = E.nreq()
    p = E.proxy({"CURSOR_OAI_TRANSPORT": "h2"})
    try:
        st, b, _ = chat(p, "scenario:text_basic")
        eq("CURSOR_OAI_TRANSPORT=h2 wins over http2_config=FORCE_ALL_DISABLED",
           (st, run_transports(E, n0)), (200, ["h2"]))
    finally:
        p.stop()
    rc, out = doctor(E, {"CURSOR_OAI_TRANSPORT": "h2"})
    check("doctor: the transport was decided by CURSOR_OAI_TRANSPORT",
          any("(CURSOR_OAI_TRANSPORT)" in l for l in line(out, "OK   transport")), out)
    # no http2_config: the default
    E.config(http2_config=None)
    rc, out = doctor(E, auto)
    check("doctor: without http2_config the default decides (HTTP/2 with the fallback)",
          any("HTTP/2" in l and "(default" in l for l in line(out, "OK   transport")), out)
    E.reset_config()


SECTIONS = [("order", t_order), ("order-cost", t_order_cost), ("version", t_version),
            ("outdated", t_outdated), ("agent", t_agent), ("profile", t_profile),
            ("cap", t_cap), ("doctor", t_doctor), ("cli", t_cli), ("headers", t_headers),
            ("h2cfg", t_h2cfg)]

# Sections about HTTP/1.1 runs only (RunSSE + BidiAppend), with no HTTP/2 counterpart here
H2_NONE = {
    "order": "the seqno-0 BidiAppend racing the RunSSE head (on HTTP/2 the run request is "
             "the Run stream's own first message)",
    "order-cost": "what waiting for the RunSSE head costs (as above)",
    "agent": "HTTP/1.1 runs kept off the HTTP/2-only agent host (HTTP/2 runs go to it; "
             "h2_test covers the fallback between the two)",
    "profile": "grpc-web and Connect on RunSSE/BidiAppend (the Run stream speaks Connect "
               "only; tests/ops_test.py checks the HTTP/2 fallback instead)",
    "doctor": "the HTTP/1.1 doctor's run per profile (h2_test checks the doctor over HTTP/2)",
}


def main():
    tmp = S.make_tmp()
    E = None
    try:
        E = Env(tmp)
        if H.TRANSPORT == "h2":
            skip = [k for k in H2_NONE if not ONLY or k in ONLY]
            if skip:
                print("skipped: over HTTP/2, HTTP/1.1-only sections %s" % ", ".join(skip))
                for k in skip:
                    print("     %s: %s" % (k, H2_NONE[k]), flush=True)
        for name, fn in SECTIONS:
            if ONLY and name not in ONLY:
                continue
            if H.TRANSPORT == "h2" and name in H2_NONE:
                continue
            print("== %s" % name, flush=True)
            try:
                fn(E)
            except Exception:
                traceback.print_exc()
                check("%s: ran to the end" % name, False)
                E.reset_config()
    finally:
        if E:
            E.fake.stop()
        code = S.finish(keep=bool(os.environ.get("PARITY_KEEP")))
    return code


if __name__ == "__main__":
    sys.exit(main())
