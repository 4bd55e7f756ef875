#!/usr/bin/python3
"""Operations suite: build/cursor-oai between raw loopback clients
and the fake Cursor upstream (tests/fake/fake_cursor.py), checking what a person running the
server for real depends on:

  tunnel      a forwarder on another port in front of the server (ssh -L style): any port
              for the allowed names, foreign names still refused, --allow-host NAME:PORT pins
  metrics     GET /metrics (Prometheus text), protected like /v1/*, scraped while a stream
              runs and after: the counters move as they should
  at_once     /metrics and /status.json read the moment an answer is in: the request counted
  held_at_once  /metrics read the moment a tool-call answer is in: its parked run counted in
              run_held (OPS_HELD_AT_ONCE answers and streams, default 300)
  jsonlog     --log-format json: one JSON object per line, one per request, with its fields
  quota       the quota latch: a burst of retries after a usage-limit error makes one run
  forging     control characters in every client value that reaches a log: one line each
  stderr      a stderr pipe nobody reads: serving and SIGTERM still work, drops are counted

Every wait is bounded and the whole run is capped (OPS_BUDGET_S, default 240 s); every process
started here is killed at the end. Env: CURSOR_OAI_BIN (default build/cursor-oai), OPS_ONLY=a,b
runs only these sections, OPS_KEEP=1 keeps the temp dir. Prints `RESULT <passed> <failed>`
last."""

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

BUDGET_S = float(os.environ.get("OPS_BUDGET_S", "240"))
ONLY = set(x for x in os.environ.get("OPS_ONLY", "").split(",") if x)
T_START = time.time()
S = H.Suite("ops", limit=2000)
check, eq = S.check, S.eq
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (error|warn|info|debug) ")


def note(msg):
    print("     [%s] %s" % (S.section, msg), flush=True)


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def chat_body(model, content="hi", stream=False, **kw):
    b = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream}
    b.update(kw)
    return b


# ---------------------------------------------------------------------------------------------
# raw HTTP

def http(port, method, path, body=None, headers=None, timeout=15, host=None):
    """One request on a fresh connection -> (status, headers, body bytes); (0, {}, b"") when
    no answer came in time."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    body = body or b""
    h = ["%s %s HTTP/1.1" % (method, path), "Host: %s" % (host or "127.0.0.1:%d" % port),
         "Connection: close"]
    if method == "POST":
        h += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
    for k, v in (headers or {}).items():
        h.append("%s: %s" % (k, v))
    raw = ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + body
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return 0, {}, b""
    buf = b""
    end = time.time() + timeout
    try:
        s.sendall(raw)
        while time.time() < end:
            r, _, _ = select.select([s], [], [], max(0.01, end - time.time()))
            if not r:
                break
            d = s.recv(65536)
            if not d:
                break
            buf += d
    except OSError:
        pass
    finally:
        s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return 0, {}, b""
    hd = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hd[k.strip().lower()] = v.strip()
    if hd.get("transfer-encoding", "").lower() == "chunked":
        rest = H.dechunk(rest)
    return status, hd, rest


def metrics(port, key=None):
    """GET /metrics -> {(name, frozenset(labels)): value}, plus the raw text."""
    hd = {"Authorization": "Bearer " + key} if key else None
    st, h, b = http(port, "GET", "/metrics", headers=hd)
    out = {}
    if st != 200:
        return st, h, out, b.decode("utf-8", "replace")
    txt = b.decode("utf-8")
    for ln in txt.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', ln)
        if not m:
            out[("__bad__", ln)] = 1
            continue
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                      m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return st, h, out, txt


def mval(m, name, **labels):
    """Sum of the series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= set(ls))


def proxy_log(proxy):
    return H.tail(proxy.proc.log_path, 10 ** 8)


# ---------------------------------------------------------------------------------------------
# sections

def t_tunnel(tmp, fake, token):
    proxy = H.Proxy(tmp, "tunnel", fake.url(), fake.ca, token)
    fwd = H.Forwarder(proxy.port)
    try:
        # the README's headless advice: ssh -L 9000:127.0.0.1:18741 -> Host: localhost:9000
        for host in ("127.0.0.1:%d" % fwd.port, "localhost:%d" % fwd.port,
                     "[::1]:%d" % fwd.port, "localhost"):
            st, _, b = http(fwd.port, "GET", "/v1/models", host=host)
            eq("through a forwarder, Host: %s -> 200" % host, st, 200)
        st, _, b = http(fwd.port, "POST", "/v1/chat/completions",
                        chat_body("scenario:text_basic"))
        check("chat through the forwarder: 200 with the answer",
              st == 200 and "Hello, world" in ((jload(b) or {}).get("choices") or [{}])[0]
              .get("message", {}).get("content", ""), (st, b[:300]))
        for host in ("evil.example:%d" % fwd.port, "evil.example:%d" % proxy.port,
                     "localhost.evil.example:%d" % fwd.port, "127.0.0.1.nip.io:%d" % fwd.port):
            st, _, b = http(fwd.port, "GET", "/v1/models", host=host)
            check("foreign name %s still refused: 403 forbidden_host" % host,
                  st == 403 and b"forbidden_host" in b, (st, b[:200]))
        # Origin: same origin seen through the tunnel is fine; another local origin is not
        st, _, _ = http(fwd.port, "GET", "/v1/models", host="localhost:%d" % fwd.port,
                        headers={"Origin": "http://localhost:%d" % fwd.port})
        eq("Origin = the tunnel's own origin: 200", st, 200)
        st, _, b = http(fwd.port, "GET", "/v1/models", host="localhost:%d" % fwd.port,
                        headers={"Origin": "http://localhost:1"})
        check("Origin from another local port: 403 forbidden_origin",
              st == 403 and b"forbidden_origin" in b, (st, b[:200]))
    finally:
        fwd.stop()
        proxy.stop()
    # --allow-host NAME:PORT pins a name to one port; a bare NAME takes any port
    pin = H.free_port()
    proxy = H.Proxy(tmp, "pin", fake.url(), fake.ca, token,
                    args=["--allow-host", "box.test:%d" % pin, "--allow-host", "any.test"])
    try:
        eq("--allow-host box.test:%d: that port -> 200" % pin,
           http(proxy.port, "GET", "/health", host="box.test:%d" % pin)[0], 200)
        eq("... another port -> 403",
           http(proxy.port, "GET", "/health", host="box.test:%d" % proxy.port)[0], 403)
        eq("--allow-host any.test: any port -> 200",
           http(proxy.port, "GET", "/health", host="any.test:4242")[0], 200)
        eq("... foreign names still 403",
           http(proxy.port, "GET", "/health", host="other.test:%d" % pin)[0], 403)
    finally:
        proxy.stop()
    r = subprocess.run(H.proxy_cmd() + ["serve", "--allow-host", "box.test:99999"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=10)
    check("--allow-host with a bad port: exit 2 with a message",
          r.returncode == 2 and b"allow-host" in r.stderr, (r.returncode, r.stderr[-300:]))


def t_metrics(tmp, fake, token):
    key = "ops-client-key-0123456789"
    proxy = H.Proxy(tmp, "metrics", fake.url(), fake.ca, token,
                    extra_env={"CURSOR_OAI_API_KEY": key})
    auth = {"Authorization": "Bearer " + key}
    try:
        st, _, _, _ = metrics(proxy.port)
        eq("/metrics without the client key: 401", st, 401)
        st, hd, m0, txt = metrics(proxy.port, key)
        eq("/metrics with the key: 200", st, 200)
        check("text format content type", hd.get("content-type", "").startswith(
            "text/plain; version=0.0.4"), hd)
        check("every sample line parses", not [k for k in m0 if k[0] == "__bad__"],
              [k for k in m0 if k[0] == "__bad__"][:5])
        for fam in ("cursor_oai_requests_total", "cursor_oai_upstream_runs_total",
                    "cursor_oai_first_token_seconds", "cursor_oai_request_duration_seconds",
                    "cursor_oai_open_streams", "cursor_oai_held_runs",
                    "cursor_oai_pooled_connections", "cursor_oai_spare_connections",
                    "cursor_oai_upstream_handshakes_total", "cursor_oai_tokens_total",
                    "cursor_oai_credential_renewals_total", "cursor_oai_log_lines_dropped_total"):
            check("family %s is described" % fam, "# TYPE %s " % fam in txt)
        eq("no stream open at start", mval(m0, "cursor_oai_open_streams"), 0)
        # A spare is a connection no run has used yet. While the pool holds idle connections
        # none is opened (and a run takes the newest idle one, a spare first), so the
        # deterministic case is an upstream that closes each RunSSE after its run: the
        # proxy opens one spare for each connection closed that way, and nothing takes it.
        # (HTTP/1.1's pool; over HTTP/2 a run opens no pooled connection but its multiplexed
        # one, which stays open after the run: cursor_oai_h2_connections shows it.)
        if H.TRANSPORT == "h2":
            http(proxy.port, "POST", "/v1/chat/completions", chat_body("scenario:default"),
                 headers=auth)
            sp = H.wait_for(lambda: mval(metrics(proxy.port, key)[2],
                                         "cursor_oai_h2_connections") == 1, 20, 0.02)
            _, _, m0, _ = metrics(proxy.port, key)
            check("the run's HTTP/2 connection shows in cursor_oai_h2_connections", sp, m0)
        else:
            fake.ctl("/config", {"runsse_close": True})
            try:
                http(proxy.port, "POST", "/v1/chat/completions", chat_body("scenario:default"),
                     headers=auth)
                sp = H.wait_for(lambda: mval(metrics(proxy.port, key)[2],
                                             "cursor_oai_spare_connections") >= 1, 20, 0.02)
            finally:
                fake.ctl("/config", {"runsse_close": False})
            _, _, m0, _ = metrics(proxy.port, key)
            check("a spare upstream connection shows in cursor_oai_spare_connections",
                  sp and mval(m0, "cursor_oai_spare_connections") <= mval(
                      m0, "cursor_oai_pooled_connections"), m0)

        # a stream that takes a while: scraped while it runs
        res = {}

        def slow():
            res["r"] = H.stream_chat(proxy.port, chat_body("scenario:ops_slow", stream=True),
                                     timeout=30, raw_headers=["Authorization: Bearer " + key])
        th = threading.Thread(target=slow)
        th.start()
        mid = {}
        for _ in range(100):
            time.sleep(0.05)
            _, _, mid, _ = metrics(proxy.port, key)
            if mval(mid, "cursor_oai_open_streams") >= 1:
                break
        eq("during the stream: cursor_oai_open_streams 1", mval(mid, "cursor_oai_open_streams"),
           1)
        th.join(30)
        st = (res.get("r") or (0,))[0]
        eq("the slow stream ended 200", st, 200)
        for _ in range(3):
            st, _, b = http(proxy.port, "POST", "/v1/chat/completions",
                            chat_body("scenario:default"), headers=auth)
        eq("non-streaming chat 200", st, 200)
        http(proxy.port, "GET", "/v1/models", headers=auth)
        http(proxy.port, "GET", "/nope", headers=auth)
        st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                        chat_body("scenario:usage_limit"), headers=auth)
        eq("usage limit: 402 (Chat Completions)", st, 402)
        st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                        chat_body("scenario:default"))
        eq("chat without the key: 401", st, 401)
        st, _, b = http(proxy.port, "POST", "/v1/messages",
                        {"model": "scenario:default", "max_tokens": 50,
                         "messages": [{"role": "user", "content": "hi"}]}, headers=auth)
        eq("Anthropic messages: 200", st, 200)
        _, _, m1, txt1 = metrics(proxy.port, key)

        def d(name, **lb):
            return mval(m1, name, **lb) - mval(m0, name, **lb)
        R = "cursor_oai_requests_total"
        chat = dict(route="/v1/chat/completions", dialect="openai-chat")
        eq("requests: chat 200 +4", d(R, status="200", **chat), 4)
        eq("requests: chat 402 +1 (the usage limit)", d(R, status="402", **chat), 1)
        eq("requests: chat 401 +1", d(R, status="401", **chat), 1)
        eq("requests: /v1/models 200 +1", d(R, route="/v1/models", dialect="none", status="200"),
           1)
        eq("requests: unknown path -> route other, 404 +1", d(R, route="other", status="404"), 1)
        check("requests: /metrics counted", d(R, route="/metrics", status="200") >= 1)
        U = "cursor_oai_upstream_runs_total"
        eq("requests: /v1/messages, dialect anthropic, 200 +1",
           d(R, route="/v1/messages", dialect="anthropic", status="200"), 1)
        eq("upstream runs ok +5", d(U, outcome="ok"), 5)
        eq("upstream runs insufficient_quota +1", d(U, outcome="insufficient_quota"), 1)
        eq("first-token histogram: 4 answers",
           d("cursor_oai_first_token_seconds_count", dialect="openai-chat"), 4)
        # the slow stream sends its first text 1.2 s before its end: first tokens come sooner
        # than the ends by at least that much in sum, however loaded the machine is
        gap = d("cursor_oai_request_duration_seconds_sum", route="/v1/chat/completions") - d(
            "cursor_oai_first_token_seconds_sum", dialect="openai-chat")
        check("first token before the end: the slow stream's 1.2 s show (%.2f s)" % gap,
              gap >= 1.1, txt1[-3000:])
        eq("duration histogram: 6 chat requests",
           d("cursor_oai_request_duration_seconds_count", route="/v1/chat/completions"), 6)
        eq("tokens out for scenario:default: 4 x 5",
           d("cursor_oai_tokens_total", model="scenario:default", kind="out"), 20)
        eq("tokens in for scenario:default: 4 x (1234 - 5)",
           d("cursor_oai_tokens_total", model="scenario:default", kind="in"), 4 * 1229)
        check("at least one upstream TLS handshake (full or resumed)",
              mval(m1, "cursor_oai_upstream_handshakes_total", result="full")
              + mval(m1, "cursor_oai_upstream_handshakes_total", result="resumed") >= 1)
        check("pooled connections reported",
              ("cursor_oai_pooled_connections", frozenset()) in m1)
        eq("no stream open at the end", mval(m1, "cursor_oai_open_streams"), 0)
        # a model name a client made up: escaped label, bounded series
        evil = 'x"}\\\n' + "m" * 300
        http(proxy.port, "POST", "/v1/chat/completions", chat_body(evil), headers=auth)
        st, _, m2, txt2 = metrics(proxy.port, key)
        check("a hostile model name keeps the exposition parseable",
              st == 200 and not [k for k in m2 if k[0] == "__bad__"],
              [k for k in m2 if k[0] == "__bad__"][:3])
        # 300 made-up model names: the family stops at 256 label sets plus overflow="true"
        for i in range(300):
            http(proxy.port, "POST", "/v1/chat/completions", chat_body("made-up-%d" % i),
                 headers=auth)
        st, _, m3, _ = metrics(proxy.port, key)
        series = [ls for (n, ls) in m3 if n == "cursor_oai_tokens_total"]
        check("tokens_total keeps at most 257 label sets (%d)" % len(series),
              len(series) <= 257, len(series))
        check("... the rest is counted under overflow=\"true\"",
              mval(m3, "cursor_oai_tokens_total", overflow="true") > 0)
    finally:
        proxy.stop()
    # credential renewals: an expiring token renewed through an API key, and a failed one
    for name, creds, result in (
            ("renew-ok", {"apiKey": "key_ops_renew"}, "ok"),
            ("renew-bad", {"refreshToken": "rt_not_issued_by_the_fake"}, "failed")):
        home = os.path.join(tmp, "home-" + name)
        cdir = os.path.join(home, ".config", "cursor-oai")
        os.makedirs(cdir, exist_ok=True)
        exp = pb.make_jwt({"sub": "auth0|ops", "exp": int(time.time()) + 120,
                           "type": "session"})
        with open(os.path.join(cdir, "auth.json"), "w") as f:
            json.dump(dict(creds, accessToken=exp), f)
        os.chmod(cdir, 0o700)
        os.chmod(os.path.join(cdir, "auth.json"), 0o600)
        proxy = H.Proxy(tmp, name, fake.url(), fake.ca, "", extra_env={"CURSOR_ACCESS_TOKEN": ""})
        try:
            http(proxy.port, "POST", "/v1/chat/completions", chat_body("scenario:default"))
            _, _, m, _ = metrics(proxy.port)
            eq("credential renewal %s counted" % result,
               mval(m, "cursor_oai_credential_renewals_total", result=result), 1)
        finally:
            proxy.stop()


def read_answer(r, kind):
    """The whole answer as a client reads it on a kept-alive connection: a JSON body, or a
    stream up to its [DONE] (read as it comes, not to the connection's end)."""
    if kind == "json":
        return r.read()
    buf = b""
    while b"data: [DONE]" not in buf:
        k = r.read1(65536)
        if not k:
            break
        buf += k
    return buf


def t_at_once(tmp, fake, token):
    """A client that reads /metrics or /status.json the moment it has its answer (the answer
    read by its length, or an SSE stream up to its end event, on a kept-alive connection, as
    SDKs read) finds that request counted and listed. N of each, on both kinds of answer."""
    import http.client
    n = int(os.environ.get("OPS_AT_ONCE", "150"))
    proxy = H.Proxy(tmp, "at-once", fake.url(), fake.ca, token)
    late = {"json": 0, "sse": 0}
    listed_late = 0
    try:
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        want = 0
        for i in range(n):
            for kind in ("json", "sse"):
                c.request("POST", "/v1/chat/completions", json.dumps(chat_body(
                    "scenario:default", "at-once %d" % i, stream=kind == "sse")),
                    {"Content-Type": "application/json"})
                r = c.getresponse()
                read_answer(r, kind)
                want += 1
                m = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
                m.request("GET", "/metrics")
                txt = m.getresponse().read().decode()
                m.close()
                got = sum(float(ln.rsplit(" ", 1)[1]) for ln in txt.splitlines()
                          if ln.startswith("cursor_oai_requests_total{")
                          and 'route="/v1/chat/completions"' in ln and 'status="200"' in ln)
                if got < want:
                    late[kind] += 1
                if kind == "sse":
                    r.read()                # the chunked terminator: the connection is reused
        c.close()
        for i in range(n // 5):
            model = "at-once-%d-%s" % (i, os.urandom(3).hex())
            c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            c.request("POST", "/v1/chat/completions", json.dumps(chat_body(model)),
                      {"Content-Type": "application/json"})
            c.getresponse().read()
            s2 = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            s2.request("GET", "/status.json")
            body = s2.getresponse().read().decode()
            s2.close()
            c.close()
            if model not in body:
                listed_late += 1
    finally:
        proxy.stop()
    eq("/metrics read the moment the answer is in: every request counted (%d answers, %d "
       "streams)" % (n, n), late, {"json": 0, "sse": 0})
    eq("/status.json read the moment the answer is in: every request listed (%d)" % (n // 5),
       listed_late, 0)


READ_TOOL = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def t_held_at_once(tmp, fake, token):
    """The same for run_held: a client that reads /metrics the moment it has a tool-call answer
    (whose run the proxy parks) finds the run counted, N times over answers and streams; and
    the counter ends equal to the runs the log says were held (none counted twice, none that
    was not parked)."""
    import http.client
    n = int(os.environ.get("OPS_HELD_AT_ONCE", "300"))
    # CURSOR_OAI_TOOL_MODE=cursor: the tool call is a native read exec (in client mode, the
    # default, a run with tools gets none; tests/tools_header_test.py covers it)
    proxy = H.Proxy(tmp, "held-at-once", fake.url(), fake.ca, token,
                    extra_env={"CURSOR_OAI_HELD_RUNS_MAX": "8", "CURSOR_OAI_TOOL_MODE": "cursor"})

    def held(port):
        m = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        m.request("GET", "/metrics")
        txt = m.getresponse().read().decode()
        m.close()
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in txt.splitlines()
                   if ln.startswith('cursor_oai_continuation_events_total{event="run_held"}'))

    late = {"json": 0, "sse": 0}
    no_tool = 0
    want = 0
    try:
        base = held(proxy.port)
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        for i in range(n):
            kind = "sse" if i % 2 else "json"
            c.request("POST", "/v1/chat/completions", json.dumps(dict(chat_body(
                "scenario:ops_held", "held at once %d %s" % (i, os.urandom(3).hex()),
                stream=kind == "sse"), tools=READ_TOOL)), {"Content-Type": "application/json"})
            r = c.getresponse()
            buf = read_answer(r, kind)
            if b"tool_calls" not in buf:
                no_tool += 1
            want += 1
            if held(proxy.port) - base < want:
                late[kind] += 1
            if kind == "sse":
                r.read()                    # the chunked terminator: the connection is reused
        c.close()
        logged = lambda: len(re.findall(r"run \S+ held for 1 tool call", proxy_log(proxy)))
        H.wait_for(lambda: logged() >= n, 15)
        final = held(proxy.port) - base
        parked = logged()
    finally:
        proxy.stop()
    eq("every answer asked for the tool (%d)" % n, no_tool, 0)
    eq("/metrics read the moment a tool-call answer is in: its run counted held (%d answers, "
       "%d streams)" % (n - n // 2, n // 2), late, {"json": 0, "sse": 0})
    eq("run_held equals the runs the log says were held", (final, parked), (n, n))


def t_jsonlog(tmp, fake, token):
    proxy = H.Proxy(tmp, "jsonlog", fake.url(), fake.ca, token, args=["--log-format", "json"])
    try:
        n0 = len(fake.runs())
        st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                        chat_body("scenario:text_basic"))
        eq("chat 200", st, 200)
        st, _, _, _ = H.stream_chat(proxy.port, chat_body("scenario:default", stream=True))
        eq("stream 200", st, 200)
        eq("a control byte in the target: 400", http(proxy.port, "GET", "/v1/x\x01y")[0], 400)
        http(proxy.port, "GET", "/v1/nothing")
        runs = fake.runs()[n0:]
        time.sleep(0.3)
    finally:
        proxy.stop()
    lines = [ln for ln in proxy_log(proxy).splitlines() if ln.strip()]
    objs = [jload(ln) for ln in lines]
    check("every log line is one JSON object", lines and all(isinstance(o, dict) for o in objs),
          [ln for ln, o in zip(lines, objs) if not isinstance(o, dict)][:3])
    objs = [o for o in objs if isinstance(o, dict)]
    check("every line has time, level, msg", all(
        re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o.get("time", "")) and
        o.get("level") in ("error", "warn", "info", "debug") and isinstance(o.get("msg"), str)
        for o in objs), objs[:3])
    reqs = [o for o in objs if o.get("msg") == "request"]
    reqs = reqs[1:]     # the harness's /health probe
    eq("one request object per request", len(reqs), 4)
    keys = {"time", "level", "msg", "method", "path", "route", "dialect", "status", "model",
            "duration_ms", "bytes", "run_id", "transport", "fallback"}
    check("request objects carry every field", all(set(o) == keys for o in reqs),
          [sorted(set(o) ^ keys) for o in reqs])
    if len(reqs) == 4:
        a, b, c, dd = reqs
        eq("chat: route, dialect, status, model", (a["route"], a["dialect"], a["status"],
                                                   a["model"]),
           ("/v1/chat/completions", "openai-chat", 200, "scenario:text_basic"))
        eq("chat and stream: run ids are the upstream request ids",
           [a["run_id"], b["run_id"]], [r["request_id"] for r in runs])
        check("durations and bytes are numbers", all(
            isinstance(o["duration_ms"], int) and isinstance(o["bytes"], int) and o["bytes"] > 0
            for o in (a, b)), (a, b))
        eq("fallback null", (a["fallback"], b["fallback"]), (None, None))
        want_tr = H.TRANSPORT if H.TRANSPORT != "auto" else "h2"
        eq("transport of each run as the harness set it; none for requests without a run",
           (a["transport"], b["transport"], c["transport"], dd["transport"]),
           (want_tr, want_tr, None, None))
        eq("malformed head: 400 logged with route other", (c["status"], c["route"],
                                                          c["run_id"]), (400, "other", None))
        eq("unknown path: 404, path as sent", (dd["status"], dd["path"]), (404, "/v1/nothing"))
    check("the access token is not in the log", token not in "\n".join(lines)
          and token.split(".")[1] not in "\n".join(lines))
    # a fallback shows in the log and in /metrics: the Connect profile refused -> grpc-web
    # (HTTP/1.1; the Run stream speaks Connect only, so over HTTP/2 the fallback taken is the
    # transport's own: every HTTP/2 connection refused at its start -> the run over HTTP/1.1,
    # with the product's default transport choice)
    h2 = H.TRANSPORT == "h2"
    kind = "http1" if h2 else "profile"
    fake.ctl("/config", {"h2_goaway_at_start": True} if h2
             else {"unsupported_profiles": ["connect"]})
    proxy = H.Proxy(tmp, "jsonlog-fb", fake.url(), fake.ca, token, args=["--log-format", "json"],
                    extra_env={"CURSOR_OAI_TRANSPORT": "auto"} if h2 else None)
    try:
        st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                        chat_body("scenario:text_basic"))
        eq("HTTP/2 refused at the start: the run answers over HTTP/1.1, 200" if h2 else
           "Connect refused upstream: the grpc-web profile answers, 200", st, 200)
        _, _, m, _ = metrics(proxy.port)
        eq("cursor_oai_fallbacks_total{kind=\"%s\"} 1" % kind,
           mval(m, "cursor_oai_fallbacks_total", kind=kind), 1)
        time.sleep(0.3)
    finally:
        fake.ctl("/config", {"h2_goaway_at_start": False, "unsupported_profiles": []})
        proxy.stop()
    fb = [o for o in (jload(ln) for ln in proxy_log(proxy).splitlines())
          if isinstance(o, dict) and o.get("msg") == "request"
          and o.get("route") == "/v1/chat/completions"]
    eq("the access log names the fallback", [o.get("fallback") for o in fb], [kind])
    # issue 29: U+0085 (NEL) and the other C1 controls, U+2028 and U+2029 are escaped in the
    # JSON log as in the text log; the raw characters are line ends to many log readers
    proxy = H.Proxy(tmp, "jsonlog-c1", fake.url(), fake.ca, token, args=["--log-format", "json"])
    try:
        http(proxy.port, "POST", "/v1/chat/completions",
             chat_body("auto\u0085nel\u009bcsi\u2028ls"))
        H.wait_for(lambda: "nel" in proxy_log(proxy), 20)
    finally:
        proxy.stop()
    raw = open(proxy.proc.log_path, "rb").read()
    check("JSON log: U+0085, U+009B and U+2028 escaped, never raw",
          b"\xc2\x85" not in raw and b"\xc2\x9b" not in raw and b"\xe2\x80\xa8" not in raw
          and b"\\u0085nel\\u009bcsi\\u2028ls" in raw,
          [ln for ln in raw.splitlines() if b"nel" in ln][:2])
    r = subprocess.run(H.proxy_cmd() + ["serve", "--log-format", "xml"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=10)
    eq("--log-format xml: exit 2", r.returncode, 2)


def t_quota(tmp, fake, token):
    for latch, want_runs in (("", 1), ("0", 6)):
        env = {"CURSOR_OAI_QUOTA_LATCH": latch} if latch else {}
        proxy = H.Proxy(tmp, "quota" + latch, fake.url(), fake.ca, token, extra_env=env)
        try:
            n0 = len([r for r in fake.runs() if r["scenario"] == "usage_limit"])
            t0 = time.time()
            answers = []
            for i in range(6):
                st, hd, b = http(proxy.port, "POST", "/v1/chat/completions",
                                 chat_body("scenario:usage_limit", stream=i % 2 == 1))
                answers.append((st, ((jload(b) or {}).get("error") or {}).get("code"),
                                hd.get("x-should-retry")))
            dt = time.time() - t0
            runs = len([r for r in fake.runs() if r["scenario"] == "usage_limit"]) - n0
            what = "latch %s" % (latch or "default (60 s)")
            eq("%s: all six answers 402 insufficient_quota, x-should-retry false" % what,
               set(answers), {(402, "insufficient_quota", "false")})
            eq("%s: upstream runs for the burst of 1 + 5 retries" % what, runs, want_runs)
            note("%s: six answers in %.0f ms" % (what, dt * 1000))
            if not latch:
                st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                                chat_body("scenario:default"))
                eq("another model is not latched: 200", st, 200)
                _, _, m, _ = metrics(proxy.port)
                eq("cursor_oai_quota_latched_total 5", mval(m, "cursor_oai_quota_latched_total"),
                   5)
        finally:
            proxy.stop()
    proxy = H.Proxy(tmp, "quota-short", fake.url(), fake.ca, token,
                    extra_env={"CURSOR_OAI_QUOTA_LATCH": "1"})
    try:
        n0 = len([r for r in fake.runs() if r["scenario"] == "usage_limit"])
        http(proxy.port, "POST", "/v1/chat/completions", chat_body("scenario:usage_limit"))
        time.sleep(1.3)
        http(proxy.port, "POST", "/v1/chat/completions", chat_body("scenario:usage_limit"))
        eq("CURSOR_OAI_QUOTA_LATCH=1: after 1.3 s Cursor is asked again",
           len([r for r in fake.runs() if r["scenario"] == "usage_limit"]) - n0, 2)
    finally:
        proxy.stop()


def t_forging(tmp, fake, token):
    proxy = H.Proxy(tmp, "forging", fake.url(), fake.ca, token, args=["--log-level", "debug"])
    # (no NUL: a JSON string with \u0000 is refused before anything is logged about it)
    evil = "\r\nX-Evil: 1\n2026-01-01T00:00:00Z info forged\x1b[2J\x7f\u0085"
    sent = 1        # the harness's /health probe
    try:
        # model name (streaming and not), prompt and a tool name at debug level
        http(proxy.port, "POST", "/v1/chat/completions", chat_body("auto" + evil))
        http(proxy.port, "POST", "/v1/chat/completions", chat_body("my-model" + evil,
                                                                    stream=True))
        http(proxy.port, "POST", "/v1/chat/completions",
             chat_body("scenario:default", "line one" + evil + "line two"))
        http(proxy.port, "POST", "/v1/chat/completions", chat_body(
            "scenario:default", tools=[{"type": "function", "function": {
                "name": "t" + evil, "parameters": {"type": "object"}}}]))
        http(proxy.port, "POST", "/v1/chat/completions", chat_body(
            "scenario:default", tools=[{"type": "function", "function": {
                "name": "ok_tool", "description": evil, "parameters": {"type": "object"}}}]))
        sent += 5
        # path and header values: raw bytes the HTTP parser may or may not accept
        for path in ("/v1/models\x1b[31m", "/v1/mo%0d%0aX-Evil:%201", "/x\x7fy"):
            http(proxy.port, "GET", path)
            sent += 1
        for hv in ("a\x1b[2Jb", "v\x7f", "caf\u00e9\u0085"):
            http(proxy.port, "GET", "/v1/models", headers={"User-Agent": hv, "X-Test": hv})
            sent += 1
        st, _, _ = http(proxy.port, "POST", "/v1/chat/completions",
                        chat_body("auto", stream=True),
                        headers={"Authorization": "Bearer x\x1bz"})
        sent += 1
        time.sleep(0.3)
    finally:
        proxy.stop()
    log = proxy_log(proxy)
    lines = log.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    bad = [ln for ln in lines if not TS_RE.match(ln)]
    check("every log line starts with a timestamp and a level (no forged line)", not bad,
          bad[:5])
    check("no raw control character in the log (ESC, NUL, DEL, CR, C1)",
          not re.search("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]", log),
          [ln for ln in lines if re.search("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]", ln)][:3])
    access = [ln for ln in lines if re.match(TS_RE.pattern + r"(GET|POST|-) ", ln)]
    eq("one access-log line per request", len(access), sent)
    check("the forged text stays inside its line, escaped",
          any("\\r\\nX-Evil: 1\\n2026-01-01T00:00:00Z info forged\\x1b[2J\\x7f\\u0085" in ln
              for ln in access), [ln for ln in access if "X-Evil" in ln][:2])
    check("the prompt at debug level is escaped too",
          any("line one\\r\\nX-Evil" in ln for ln in lines if " debug " in ln))


def t_stderr(tmp, fake, token):
    """stderr is a pipe nobody reads. Before: ~1,100 lines filled it, every connection then
    blocked in write() holding its slot, and SIGTERM could not stop the process."""
    rfd, wfd = os.pipe()
    try:
        proxy = H.Proxy(tmp, "stderr", fake.url(), fake.ca, token, stderr=wfd)
    except RuntimeError as e:
        check("server with an unread stderr started", False, e)
        os.close(rfd)
        return
    finally:
        os.close(wfd)
    p, port = proxy.proc, proxy.port
    pipe_cap = 0
    try:
        import fcntl
        pipe_cap = fcntl.fcntl(rfd, 1032)     # F_GETPIPE_SZ
    except (OSError, ImportError):
        pass
    try:
        # pipelined keep-alive requests: one access-log line each (~75 bytes)
        per, total, answered, stalled = 500, 30000, 0, None
        t0 = time.time()
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        req = ("GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port).encode() * per
        mark = b'{"status":"ok"'
        tail = b""
        while answered < total and time.time() - T_START < BUDGET_S - 40:
            s.sendall(req)
            want = answered + per
            end = time.time() + 5
            while answered < want:
                r, _, _ = select.select([s], [], [], max(0.01, end - time.time()))
                if not r:
                    break
                d = s.recv(1 << 20)
                if not d:
                    break
                answered += (tail + d).count(mark)      # each answer counted once
                tail = (tail + d)[-(len(mark) - 1):]
            if answered < want:
                stalled = answered
                break
        s.close()
        note("%d requests answered in %.1f s with nobody reading stderr (pipe %d bytes)"
             % (answered, time.time() - t0, pipe_cap))
        check("every request answered although stderr is full (stalled after %s)" % stalled,
              stalled is None and answered >= total, answered)
        t1 = time.time()
        st = http(port, "GET", "/health", timeout=5)[0]
        eq("a new client is still served (%.0f ms)" % ((time.time() - t1) * 1000), st, 200)
        _, _, m, _ = metrics(port)
        dropped = mval(m, "cursor_oai_log_lines_dropped_total")
        check("dropped lines are counted in /metrics (%d)" % dropped, dropped > 0, dropped)
        # now read the pipe: the writer catches up and says how many lines it dropped
        got = b""
        end = time.time() + 10
        while time.time() < end and b"dropped" not in got:
            r, _, _ = select.select([rfd], [], [], 0.5)
            if r:
                got += os.read(rfd, 1 << 20)
        check("once stderr is read again, the log says how many lines were dropped",
              re.search(rb"\d+ log line\(s\) dropped", got), got[-300:])
        # fill it again, then SIGTERM with nobody reading: the process must still exit
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        for _ in range(6):
            s.sendall(req)
            time.sleep(0.05)
        time.sleep(0.5)
        s.close()
        t2 = time.time()
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            pass
        check("SIGTERM ends the process with stderr full (%.1f s)" % (time.time() - t2),
              p.poll() is not None, "still running after 15 s")
    finally:
        proxy.stop()
        os.close(rfd)


def ops_scenarios():
    return {
        "ops_slow": {"steps": [
            {"op": "text", "text": "first"}, {"op": "sleep", "s": 1.2},
            {"op": "text", "text": " second"}, {"op": "token_delta", "tokens": 2},
            {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
        # a read the client is asked to run: the run waits for its result (held_at_once)
        "ops_held": {"steps": [
            {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001",
             "path": "/nonexistent/ops.txt", "hold": True},
            {"op": "await_results", "max_s": 120}, {"op": "text", "text": "never"}] + H.END}}


def on_alarm(signum, frame):
    raise TimeoutError("ops suite over its %d s budget" % BUDGET_S)


def main():
    if S.binary_missing():
        return 0
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(BUDGET_S))
    tmp = S.make_tmp()
    token = pb.make_jwt({"sub": "auth0|ops", "exp": int(time.time()) + 7200, "type": "session"})
    try:
        fake = H.Fake(tmp, ops_scenarios(), token, config={"client_version": H.CLIENT_VERSION})
        S.sections([(name, lambda fn=fn: fn(tmp, fake, token)) for name, fn in (
            ("tunnel", t_tunnel), ("metrics", t_metrics), ("at_once", t_at_once),
            ("held_at_once", t_held_at_once), ("jsonlog", t_jsonlog), ("quota", t_quota),
            ("forging", t_forging), ("stderr", t_stderr))], ONLY)
        S.section = "final"
        errs = fake.state()["errors"]
        check("fake upstream saw no protocol/validation errors", not errs, errs[:5])
    except Exception:
        S.section = "setup"
        check("suite ran", False, traceback.format_exc())
    finally:
        H.cleanup()
        signal.alarm(0)
        S.section = "final"
        note("total %.1f s" % (time.time() - T_START))
        code = S.finish(bool(os.environ.get("OPS_KEEP")))
    return code


if __name__ == "__main__":
    sys.exit(main())
