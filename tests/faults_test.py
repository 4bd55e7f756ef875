#!/usr/bin/python3
"""Bounded fault and soak suite (reliability notes section 4): build/cursor-oai between
raw loopback sockets and the fake Cursor upstream (tests/fake/fake_cursor.py), covering what the
e2e suite does not:

  upstream    RST mid-stream, RST during the TLS handshake, a TLS server that never answers,
              unknown / compressed frame flags, data after the trailer, Connect end-stream
              errors before and after output, an HTML 502 page, 1-byte TLS records, a UTF-8
              character split across two deltas, an 8 MiB delta, a 16 MiB + 1 frame
  client      pipelining, Expect: 100-continue, HTTP/1.0, half-close, CL+TE, a 40 MB
              Content-Length, 100,000-deep JSON, tool parameters nested 60 deep
  slow        slowloris (50 clients at 1 header byte/s) while others are served; a body that
              trickles then stalls
  cap         --max-conns 20 with 20 idle keep-alive connections held
  soak        10,000 client disconnects (fds, threads and RSS back to baseline)

Every wait is bounded and the whole run is capped (FAULTS_BUDGET_S, default 235 s); every
process started here is killed at the end. Env: CURSOR_OAI_BIN (default build/cursor-oai),
FAULTS_DISCONNECTS (default 10000), FAULTS_KEEP=1 keeps the temp dir, FAULTS_ONLY=a,b runs
only these sections (upstream, client, cap, slow, dead-upstream, soak).
Prints `RESULT <passed> <failed>` last."""

import http.client
import json
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

BUDGET_S = float(os.environ.get("FAULTS_BUDGET_S", "235"))
N_DISCONNECTS = int(os.environ.get("FAULTS_DISCONNECTS", "10000"))
MIB = 1024 * 1024
T_START = time.time()

# some sections run in threads of their own (S.section_run): each line carries its section
S = H.Suite("faults", limit=1500)
check, eq, note = S.check, S.eq, S.note


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def err_of(b):
    """The OpenAI error object of a JSON error body, else None."""
    j = jload(b)
    if isinstance(j, dict) and isinstance(j.get("error"), dict) and isinstance(
            j["error"].get("message"), str):
        return j["error"]
    return None


def chat_body(model, content="hi", stream=True, **kw):
    b = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream}
    b.update(kw)
    return b


def sse(proxy, model, content="hi", timeout=30, **kw):
    st, hd, b, _ = H.stream_chat(proxy.port, chat_body(model, content, True, **kw), timeout)
    return st, hd or {}, b, H.parse_sse(b) if st == 200 else None


def plain(proxy, model, content="hi", timeout=30, **kw):
    st, b, hd = proxy.request("POST", "/v1/chat/completions",
                              chat_body(model, content, False, **kw), timeout=timeout)
    return st, hd, b


def msg_content(b):
    j = jload(b) or {}
    try:
        return j["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None


def norm_chunks(s):
    """Parsed SSE -> the chunk list without per-response ids and timestamps."""
    out = []
    for c in s["chunks"]:
        c = dict(c)
        for k in ("id", "created", "model"):
            c.pop(k, None)
        out.append(c)
    return out


# ---------------------------------------------------------------------------------------------
# raw HTTP over a socket

class Raw:
    """One client socket with a receive buffer and bounded reads."""

    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.port = port
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.s.sendall(data if isinstance(data, bytes) else data.encode())

    def _recv(self, deadline):
        left = deadline - time.time()
        if left <= 0 or self.eof:
            return False
        r, _, _ = select.select([self.s], [], [], left)
        if not r:
            return False
        try:
            d = self.s.recv(65536)
        except OSError:
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def read_until(self, marker, timeout):
        end = time.time() + timeout
        while marker not in self.buf:
            if not self._recv(end):
                return False
        return True

    def read_eof(self, timeout):
        end = time.time() + timeout
        while self._recv(end):
            pass
        return self.eof

    def response(self, timeout=30):
        """Next response -> (status, headers, body), or (0, {}, b"") on EOF/timeout.
        Handles interim 1xx, Content-Length, chunked and close-delimited bodies."""
        end = time.time() + timeout
        while True:
            if not self.read_until(b"\r\n\r\n", end - time.time()):
                return 0, {}, b""
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
            hd = {"_status_line": lines[0]}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hd[k.strip().lower()] = v.strip()
            if 100 <= status < 200:
                continue
            break
        if "content-length" in hd:
            n = int(hd["content-length"])
            while len(self.buf) < n and self._recv(end):
                pass
            body, self.buf = self.buf[:n], self.buf[n:]
        elif hd.get("transfer-encoding", "").lower() == "chunked":
            while not re.search(rb"(^|\r\n)0\r\n\r\n", self.buf) and self._recv(end):
                pass
            m = re.search(rb"(^|\r\n)0\r\n\r\n", self.buf)
            cut = m.end() if m else len(self.buf)
            body, self.buf = H.dechunk(self.buf[:cut]), self.buf[cut:]
        else:
            while self._recv(end):
                pass
            body, self.buf = self.buf, b""
        return status, hd, body

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def req_bytes(method, path, port, body=b"", headers=(), version="HTTP/1.1", cl=True):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    h = ["%s %s %s" % (method, path, version), "Host: 127.0.0.1:%d" % port]
    if body or method == "POST":
        h.append("Content-Type: application/json")
        if cl:
            h.append("Content-Length: %d" % len(body))
    h += list(headers)
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


# ---------------------------------------------------------------------------------------------
# scenarios registered by this suite (the named fault scenarios live in the fake)

ONE_BYTE_STEPS = [
    {"op": "text", "text": "Hello"}, {"op": "heartbeat"},
    {"op": "thinking", "text": "pondering \u00e9"}, {"op": "thinking_completed", "ms": 5},
    {"op": "text", "text": ", w\u00f6rld \U0001f30d and \u4e2d\u6587"},
    {"op": "token_delta", "tokens": 7}, {"op": "text", "text": " end."},
    {"op": "checkpoint", "used_tokens": 99, "max_tokens": 1000}, {"op": "turn_ended"},
    {"op": "trailer", "status": 0}]
BIG = "0123456789abcdef"
BIG_REPEAT = 8 * MIB // len(BIG)
HTML_TAIL = "END-OF-HTML-PAGE-MARKER"


def suite_scenarios():
    html = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>"
            "502 Bad Gateway</h1></center>\r\n<!-- a comment -->\r\n"
            + "<p>The server is temporarily unable to service your request.</p>\r\n" * 12
            + "<p>" + HTML_TAIL + "</p></body></html>\r\n")
    return {
        "one_byte_whole": {"steps": ONE_BYTE_STEPS},
        "one_byte_split": {"steps": [dict(s, split=1) for s in ONE_BYTE_STEPS]},
        "html_502_tail": {"runsse_response": {"status": 502, "content_type": "text/html",
                                              "body": html}},
        "html_200": {"runsse_response": {"status": 200, "content_type": "text/html",
                                         "body": "<html><body>Checking your browser..."
                                                 "</body></html>"}},
        "unknown_flag_after": {"steps": [
            {"op": "text", "text": "partial"}, {"op": "raw_frame", "flags": 4,
                                                "payload_hex": "0a070a0568656c6c6f"},
            {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
        "compressed_after": {"steps": [
            {"op": "text", "text": "partial"}, {"op": "raw_frame", "flags": 1,
                                                "payload_hex": "0a020a00"},
            {"op": "stall", "max_s": 30}]},
        "end_stream_auth_first": {"steps": [{"op": "end_stream", "json": {"error": {
            "code": "unauthenticated", "message": "token expired"}}}]},
        "end_stream_internal_first": {"steps": [{"op": "end_stream", "json": {"error": {
            "code": "internal", "message": "boom"}}}]},
        "big_delta": {"steps": [{"op": "text", "text": BIG, "repeat": BIG_REPEAT},
                                {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
        "over_cap_after": {"steps": [
            {"op": "text", "text": "partial"},
            {"op": "raw_frame", "flags": 0, "pad": 16 * MIB + 1}, {"op": "stall", "max_s": 30}]},
        "deep_tools": {"steps": [{"op": "text", "text": "deep ok"}, {"op": "turn_ended"},
                                 {"op": "trailer", "status": 0}]},
        "halfclose": {"steps": [{"op": "text", "text": "half"}, {"op": "stall", "max_s": 20}]},
        "bodystall": {"steps": [{"op": "text", "text": "never"}, {"op": "turn_ended"},
                                {"op": "trailer", "status": 0}]},
    }


# ---------------------------------------------------------------------------------------------
# upstream faults

def in_band(what, st, s, partial):
    """A failure after output: 200, the partial text, one error event, [DONE], never stop."""
    eq(what + ": 200 (output already streamed)", st, 200)
    if s is None:
        return
    eq(what + ": partial text delivered", s["content"], partial)
    check(what + ": one SSE error event, then [DONE], never a clean stop",
          len(s["errors"]) == 1 and s["done"] and "stop" not in s["finish"] and not s["bad"], s)


def before_output(what, st, hd, b, want, code=None):
    """A failure before output: a real HTTP status with an OpenAI JSON error."""
    e = err_of(b)
    ok = st in (want if isinstance(want, tuple) else (want,))
    check("%s -> %s (got %s)" % (what, want, st), ok, b[:300])
    check(what + ": OpenAI JSON error, application/json", e is not None and hd.get(
        "content-type", "").startswith("application/json"), (hd, b[:300]))
    if code and e:
        eq(what + ": error code", e.get("code"), code)
    return e or {}


def t_html_pages(proxy, fake):
    fake.ctl("/config", {"runsse_scenario": "html_502_tail"})
    st, hd, b, s = sse(proxy, "scenario:text_basic")
    fake.ctl("/config", {"runsse_scenario": None})
    e = before_output("HTML 502 page from the upstream", st, hd, b, 502)
    m = e.get("message", "")
    check("HTML 502: short message (<= 300 chars)", 0 < len(m) <= 300, len(m))
    check("HTML 502: no control characters", not re.search(r"[\x00-\x1f\x7f]", m), repr(m))
    check("HTML 502: page cut to an excerpt (tail not passed through)", HTML_TAIL not in m
          and HTML_TAIL.encode() not in b, repr(m))
    check("HTML 502: no raw markup passed through (reliability #27)",
          not re.search(r"<[a-zA-Z!/]", m), repr(m))
    check("HTML 502: the page's text is kept", "502 Bad Gateway" in m, repr(m))
    note("HTML 502 message: %r" % m)
    fake.ctl("/config", {"runsse_scenario": "html_200"})
    st, hd, b, s = sse(proxy, "scenario:text_basic")
    e = before_output("200 text/html page instead of gRPC-web", st, hd, b, 502)
    note("200 text/html message: %r" % e.get("message"))
    fake.ctl("/config", {"runsse_scenario": None})


def t_upstream(proxy, fake):
    # TCP RST in the middle of a stream
    st, hd, b, s = sse(proxy, "scenario:rst_mid")
    in_band("upstream RST mid-stream", st, s, "partial answer")
    if s:
        note("RST mid-stream error event: %s" % json.dumps(s["errors"][:1])[:300])
    st, hd, b = plain(proxy, "scenario:rst_mid")
    before_output("upstream RST mid-stream, non-streaming", st, hd, b, 502)

    # frame flags
    st, hd, b, s = sse(proxy, "scenario:unknown_flag")
    e = before_output("unknown frame flag first", st, hd, b, 502, "upstream_protocol_error")
    note("unknown flag: %s" % e.get("message"))
    st, hd, b, s = sse(proxy, "scenario:unknown_flag_after")
    in_band("unknown frame flag after text", st, s, "partial")
    st, hd, b, s = sse(proxy, "scenario:compressed_flag")
    e = before_output("compressed flag first", st, hd, b, 502, "upstream_protocol_error")
    note("compressed flag: %s" % e.get("message"))
    st, hd, b, s = sse(proxy, "scenario:compressed_after")
    in_band("compressed flag after text", st, s, "partial")

    # data after the trailer: the answer ends at the trailer, nothing follows [DONE]
    st, hd, b, s = sse(proxy, "scenario:data_after_trailer")
    eq("data after trailer: 200", st, 200)
    if s:
        eq("data after trailer: text up to the trailer only", s["content"], "ok")
        check("data after trailer: well-formed, [DONE] last, one terminal event",
              s["done"] and not s["bad"] and len(s["finish"]) + len(s["errors"]) == 1, s)
        note("data after trailer: finish %s errors %s" % (s["finish"], s["errors"][:1]))
    st, hd, b = plain(proxy, "scenario:data_after_trailer")
    check("data after trailer, non-streaming: 200 'ok' or a JSON error",
          (st == 200 and msg_content(b) == "ok") or (st >= 500 and err_of(b)), (st, b[:300]))

    # Connect end-stream errors
    for stream in (True, False):
        tag = " (stream=%s)" % stream
        if stream:
            st, hd, b, s = sse(proxy, "scenario:end_stream_quota_first")
        else:
            st, hd, b = plain(proxy, "scenario:end_stream_quota_first")
        # a usage limit to a Chat Completions client is a 402 (issue 25 item 6)
        e = before_output("end-stream resource_exhausted first" + tag, st, hd, b, 402)
        eq("end-stream quota: type" + tag, e.get("type"), "insufficient_quota")
        eq("end-stream quota: x-should-retry false" + tag, hd.get("x-should-retry"), "false")
    st, hd, b, s = sse(proxy, "scenario:end_stream_auth_first")
    before_output("end-stream unauthenticated first", st, hd, b, 401)
    st, hd, b, s = sse(proxy, "scenario:end_stream_internal_first")
    e = before_output("end-stream internal first", st, hd, b, 502)
    check("end-stream internal: message carries the upstream text",
          "boom" in e.get("message", ""), e)
    st, hd, b, s = sse(proxy, "scenario:end_stream_error")
    in_band("end-stream error after text", st, s, "partial")
    st, hd, b = plain(proxy, "scenario:end_stream_error")
    before_output("end-stream error after text, non-streaming", st, hd, b, 502)

    # HTML error pages. A RunSSE-level answer is decided before the run request (and its model)
    # arrives, so it is selected with the fake's runsse_scenario config: on a fake and proxy
    # of their own, since other sections run beside this one.
    tmp2 = os.path.join(os.path.dirname(proxy.home), "html")
    os.makedirs(tmp2, exist_ok=True)
    fake2 = H.Fake(tmp2, suite_scenarios(), proxy.token)
    proxy2 = H.Proxy(tmp2, "html", fake2.url(), fake2.ca, proxy.token)
    try:
        t_html_pages(proxy2, fake2)
    finally:
        proxy2.stop()
        fake2.stop()

    # 1-byte TLS records: same output as the unsplit stream
    st1, _, b1, s1 = sse(proxy, "scenario:one_byte_whole")
    st2, _, b2, s2 = sse(proxy, "scenario:one_byte_split")
    eq("1-byte upstream records: statuses", (st1, st2), (200, 200))
    if s1 and s2:
        check("unsplit reference stream is clean", s1["done"] and not s1["bad"] and
              not s1["errors"] and s1["finish"] == ["stop"], s1)
        eq("1-byte upstream records: identical chunks", norm_chunks(s2), norm_chunks(s1))
        eq("1-byte upstream records: content", s2["content"],
           "Hello, w\u00f6rld \U0001f30d and \u4e2d\u6587 end.")
    _, _, p1 = plain(proxy, "scenario:one_byte_whole")
    _, _, p2 = plain(proxy, "scenario:one_byte_split")
    eq("1-byte upstream records, non-streaming: same message", msg_content(p2), msg_content(p1))

    # a 4-byte emoji split across two text deltas
    st, hd, b, s = sse(proxy, "scenario:emoji_split_frames")
    if s:
        eq("emoji split across two deltas: reassembled", s["content"], "a\U0001f30db")
        check("emoji split: no U+FFFD, valid UTF-8", "\ufffd" not in s["content"] and
              b"\xef\xbf\xbd" not in b and not s["bad"], s)
    st, hd, b = plain(proxy, "scenario:emoji_split_frames")
    eq("emoji split, non-streaming", msg_content(b), "a\U0001f30db")

    # one 8 MiB text delta
    time.sleep(0.3)
    rss0, hwm0 = proxy.rss_kib(), proxy.status_field("VmHWM")
    t0 = time.time()
    st, hd, b, s = sse(proxy, "scenario:big_delta", timeout=60)
    dt = time.time() - t0
    hwm1 = proxy.status_field("VmHWM")
    want = BIG * BIG_REPEAT
    check("8 MiB single delta: delivered complete and clean", st == 200 and s and
          s["content"] == want and s["done"] and not s["errors"] and not s["bad"],
          (st, s and len(s["content"]), s and s["errors"]))
    time.sleep(0.5)
    rss1 = proxy.rss_kib()
    note("8 MiB delta: %.1fs; RSS %d -> %d KiB, peak (VmHWM) %d -> %d KiB" % (
        dt, rss0, rss1, hwm0, hwm1))
    check("8 MiB delta: peak memory bounded (< 80 MiB above the previous peak)",
          hwm1 - max(hwm0, rss0) < 80 * 1024, (hwm0, hwm1))
    check("8 MiB delta: memory returned afterwards (RSS within 4 MiB)",
          rss1 - rss0 < 4 * 1024, (rss0, rss1))

    # frames over the 16 MiB cap
    t0 = time.time()
    st, hd, b, s = sse(proxy, "scenario:frame_over_cap")
    before_output("16 MiB + 1 frame first", st, hd, b, 502, "upstream_protocol_error")
    check("16 MiB + 1 frame rejected at its header (< 5 s)", time.time() - t0 < 5,
          time.time() - t0)
    st, hd, b, s = sse(proxy, "scenario:over_cap_after")
    in_band("16 MiB + 1 frame after text", st, s, "partial")

    # RST during the TLS handshake / a TLS server that never answers: separate proxies,
    # see t_dead_upstreams (run in the background)


def t_dead_upstreams(tmp, fake, token):
    """Upstreams that fail below HTTP. The silent one costs the connect timeout (10 s)."""
    p = H.Proxy(tmp, "rst", "https://localhost:%d" % fake.info["rst_handshake_port"], fake.ca,
                token)
    try:
        for stream in (True, False):
            t0 = time.time()
            if stream:
                st, hd, b, s = sse(p, "claude-4.5-sonnet", timeout=30)
            else:
                st, hd, b = plain(p, "claude-4.5-sonnet", timeout=30)
            dt = time.time() - t0
            e = before_output("RST during the TLS handshake (stream=%s)" % stream, st, hd, b,
                              502)
            # fast: not the 10 s connect timeout a silent upstream costs (the margin is for a
            # loaded machine)
            check("RST in handshake: fails fast (< 6 s)", dt < 6, dt)
            check("RST in handshake: the message names the TLS stage",
                  re.search(r"tls|handshake", e.get("message", ""), re.I), e)
            note("RST in handshake: %.2fs %s" % (dt, e.get("message")))
        # The fake counts a reset after it has sent it: the proxy may have answered first.
        H.wait_for(lambda: fake.state()["counters"].get("rst_handshake_resets", 0) >= 2, 15)
        c = fake.state()["counters"]
        check("fake reset the handshakes", c.get("rst_handshake_resets", 0) >= 2, c)
    finally:
        p.stop()

    p = H.Proxy(tmp, "silent", "https://localhost:%d" % fake.info["silent_port"], fake.ca,
                token)
    res = {}

    def go(name, method, path, body):
        t0 = time.time()
        try:
            st, b, hd = p.request(method, path, body, timeout=60)
        except OSError as e:
            st, b = 0, repr(e).encode()
        res[name] = (st, b, time.time() - t0)
    try:
        ths = [threading.Thread(target=go, args=("chat", "POST", "/v1/chat/completions",
                                                 chat_body("claude-4.5-sonnet", stream=False))),
               threading.Thread(target=go, args=("models", "GET", "/v1/models", None))]
        [t.start() for t in ths]
        [t.join(70) for t in ths]
        for name, (st, b, dt) in sorted(res.items()):
            e = err_of(b) or {}
            check("silent TLS upstream, %s: 504/502 with a JSON error" % name,
                  st in (502, 504) and e, (st, b[:300]))
            check("silent TLS upstream, %s: message names the handshake" % name,
                  re.search(r"tls|handshake|timed out", e.get("message", ""), re.I), e)
            note("silent TLS upstream, %s: %s after %.1fs: %s" % (name, st, dt,
                                                                  e.get("message")))
            # UP_CONNECT_TIMEOUT_MS is 10 s (TCP connect + TLS handshake)
            check("silent TLS upstream, %s: fails within the 10 s handshake timeout "
                  "(+2 s slack)" % name, dt <= 12, "%.1fs" % dt)
        held = fake.state()["counters"].get("silent_held", [])
        check("silent upstream: the proxy closed each stuck handshake", held and all(
            h["end"] in ("closed", "reset") and h["held_s"] <= 12 for h in held), held)
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# client-side protocol abuse

def t_client(proxy, fake):
    port = proxy.port
    # pipelining: four requests in one write, answered in order
    r = Raw(port)
    try:
        r.send(req_bytes("GET", "/health", port)
               + req_bytes("POST", "/v1/chat/completions", port,
                           chat_body("scenario:text_basic", "p1", True))
               + req_bytes("POST", "/v1/chat/completions", port,
                           chat_body("scenario:echo", "pipelined two", False))
               + req_bytes("GET", "/v1/models", port, headers=["Connection: close"]))
        got = [r.response(20) for _ in range(4)]
        eq("pipelined: four answers in order", [g[0] for g in got], [200, 200, 200, 200])
        s = H.parse_sse(got[1][2])
        eq("pipelined: the stream in the middle is complete", (s["content"], s["done"]),
           ("Hello, world! w\u00f6rld \U0001f30d", True))
        eq("pipelined: the non-streaming answer", msg_content(got[2][2]),
           "ECHO:pipelined two")
        check("pipelined: models list last", (jload(got[3][2]) or {}).get("object") == "list",
              got[3][2][:200])
        check("pipelined: closed after Connection: close", r.read_eof(5))
    finally:
        r.close()

    # Expect: 100-continue answered at once
    body = json.dumps(chat_body("scenario:echo", "expect test", False)).encode()
    r = Raw(port)
    try:
        t0 = time.time()
        r.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n"
               "Expect: 100-continue\r\n\r\n" % (port, len(body)))
        ok = r.read_until(b"\r\n\r\n", 3)
        dt = time.time() - t0
        check("Expect: 100-continue answered within 2 s", ok and r.buf.startswith(
            b"HTTP/1.1 100") and dt < 2, (dt, r.buf[:80]))
        note("100 Continue after %.1f ms" % (dt * 1000))
        r.send(body)
        st, hd, b = r.response(20)
        eq("Expect: 100-continue: the request completes", (st, msg_content(b)),
           (200, "ECHO:expect test"))
    finally:
        r.close()

    # HTTP/1.0 client: Content-Length answers, streams without chunked encoding, then close
    r = Raw(port)
    try:
        r.send(req_bytes("POST", "/v1/chat/completions", port,
                         chat_body("scenario:echo", "http10 plain", False), version="HTTP/1.0"))
        st, hd, b = r.response(20)
        eq("HTTP/1.0 non-streaming", (st, msg_content(b)), (200, "ECHO:http10 plain"))
        check("HTTP/1.0: HTTP/1.x status line with Content-Length",
              hd.get("_status_line", "").startswith("HTTP/1.") and "content-length" in hd, hd)
        check("HTTP/1.0: connection closed after the answer", r.read_eof(5))
    finally:
        r.close()
    r = Raw(port)
    try:
        r.send(req_bytes("POST", "/v1/chat/completions", port,
                         chat_body("scenario:text_basic", "http10 stream", True),
                         version="HTTP/1.0"))
        st, hd, b = r.response(20)
        s = H.parse_sse(b)
        check("HTTP/1.0 stream: no chunked encoding", "chunked" not in hd.get(
            "transfer-encoding", "").lower(), hd)
        eq("HTTP/1.0 stream: complete SSE until close", (st, s["content"], s["done"], s["bad"]),
           (200, "Hello, world! w\u00f6rld \U0001f30d", True, []))
    finally:
        r.close()

    # request then shutdown(SHUT_WR)
    r = Raw(port)
    try:
        r.send(req_bytes("GET", "/health", port))
        r.s.shutdown(socket.SHUT_WR)
        st, hd, b = r.response(5)
        eq("half-close after GET /health: still answered", st, 200)
    finally:
        r.close()
    before = {x["request_id"] for x in fake.runs()}
    for stream in (False, True):
        r = Raw(port)
        try:
            r.send(req_bytes("POST", "/v1/chat/completions", port,
                             chat_body("scenario:halfclose", "hc", stream)))
            r.s.shutdown(socket.SHUT_WR)
            done = r.read_eof(15)
            # By design (server.c client_gone): a half-close while the proxy waits on the
            # upstream counts as the client leaving; the run is cancelled, nothing is sent.
            # On a loaded machine this thread may be descheduled between send() and
            # shutdown(): the stream can then have begun ("half") before the half-close,
            # and it must end cut off (no [DONE]) rather than complete.
            cut = (stream and r.buf.startswith(b"HTTP/1.1 200") and b"[DONE]" not in r.buf
                   and not r.buf.endswith(b"0\r\n\r\n"))
            check("half-close after a chat (stream=%s): closed without an answer (by design)"
                  % stream, done and (r.buf == b"" or cut), (done, r.buf[:300]))
        finally:
            r.close()

    # A client that is gone before its run starts gets no run at all (issue 17: the check
    # right before starting); one that leaves later has its run cancelled.
    def hc_runs():
        # the run is cancelled while its RunSSE head is awaited (before the run request, so
        # the fake never learns the model) or later; or it never started at all
        rs = [x["stream"] for x in fake.runs() if x["request_id"] not in before
              and x["scenario"] in ("halfclose", None)]
        return ["ok"] if all(x.get("ended") in (
            "client_closed", "client_closed_before_append") for x in rs) else None
    time.sleep(0.5)
    check("half-close: no upstream run left running (none started, or cancelled)",
          H.wait_for(hc_runs, 20), [x["stream"] for x in fake.runs()
                                   if x["request_id"] not in before])

    # CL + TE
    r = Raw(port)
    try:
        body = json.dumps(chat_body("scenario:echo", "x", False)).encode()
        r.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" % (port, len(body))).encode()
               + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        st, hd, b = r.response(5)
        eq("Content-Length + Transfer-Encoding -> 400", st, 400)
        check("CL+TE: JSON error and Connection: close", err_of(b) and hd.get(
            "connection", "").lower() == "close", (hd, b[:200]))
    finally:
        r.close()

    # 40 MB Content-Length: 413 before any body byte is sent
    r = Raw(port)
    try:
        t0 = time.time()
        r.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Content-Type: application/json\r\nContent-Length: 40000000\r\n\r\n"
                % port).encode())
        st, hd, b = r.response(5)
        dt = time.time() - t0
        eq("Content-Length 40000000 -> 413 without the body", st, 413)
        # at once: not after waiting for a body that never comes (30 s between reads)
        check("413 at once (< 3 s)", dt < 3, dt)
        check("413: JSON error, Connection: close", err_of(b) and hd.get(
            "connection", "").lower() == "close", (hd, b[:200]))
    finally:
        r.close()

    # ... and a client that sends the whole 40 MB body before it reads (http.client, most
    # SDKs) still reads the 413: the proxy drains what comes after its answer for a moment
    # (a lingering close) instead of resetting the connection under the upload
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        t0 = time.time()
        c.request("POST", "/v1/chat/completions", body=b"x" * 40000000,
                  headers={"Content-Type": "application/json"})
        rs = c.getresponse()
        got = (rs.status, err_of(rs.read()) is not None)
    except OSError as e:
        got = repr(e)
    finally:
        c.close()
    note("40 MB upload answered 413 early: %r after %.2f s" % (got, time.time() - t0))
    eq("a 40 MB upload reads the 413 (not a connection reset)", got, (413, True))

    # 100,000-deep JSON
    deep = ('{"model":"scenario:echo","messages":' + "[" * 100000 + "]" * 100000
            + ',"stream":false}').encode()
    t0 = time.time()
    st, b, hd = proxy.request("POST", "/v1/chat/completions", deep, timeout=10)
    dt = time.time() - t0
    eq("100,000-deep JSON -> 400", st, 400)
    # quick: work linear in the depth (a quadratic parse of 200,000 brackets takes minutes);
    # 3 s leaves room for the sanitizer build on a loaded machine
    check("100,000-deep JSON: quick (< 3 s) JSON error", dt < 3 and err_of(b), (dt, b[:200]))
    note("deep JSON: %.0f ms: %s" % (dt * 1000, (err_of(b) or {}).get("message")))

    # tools[0].function.parameters nested 60 deep: forwarded intact
    def nest(d):
        return {"type": "string", "description": "leaf"} if d == 1 else {
            "type": "object", "properties": {"n%d" % d: nest(d - 1)}} if d % 2 == 0 else {
            "anyOf": [nest(d - 1)]}

    def depth(v):
        if isinstance(v, dict):
            return 1 + max([depth(x) for x in v.values()] + [0])
        if isinstance(v, list):
            return 1 + max([depth(x) for x in v] + [0])
        return 0
    def deepen(v, want):
        while depth(v) < want:
            v = {"type": "object", "properties": {"w": v}} if want - depth(v) >= 2 else {
                "not": v}
        return v
    params = deepen(nest(20), 60)
    tool = {"type": "function", "function": {"name": "deep_tool", "description": "deep",
                                             "parameters": params}}
    st, b, hd = proxy.request("POST", "/v1/chat/completions", chat_body(
        "scenario:deep_tools", "deep", False, tools=[tool]), timeout=20)
    eq("tool parameters nested %d deep: 200" % depth(params), (st, msg_content(b)),
       (200, "deep ok"))
    sent = None
    for run in fake.runs():
        if run["scenario"] != "deep_tools":
            continue
        for a in run["appends"]:
            m = a["message"]
            for t in (m.get("tools") or []) + (m.get("mcp_tools") or []):
                if "deep_tool" in (t.get("name") or "") + (t.get("tool_name") or ""):
                    sent = t.get("input_schema")
    eq("tool parameters forwarded intact (as decoded by the fake)", sent, params)
    # the whole document one level over the cJSON limit (64): a clean 400
    over = deepen(params, 61)
    st, b, hd = proxy.request("POST", "/v1/chat/completions", chat_body(
        "scenario:deep_tools", "deep", False, tools=[{"type": "function", "function": {
            "name": "deep_tool", "parameters": over}}]), timeout=20)
    check("parameters 61 deep (document over the limit): 400 with a JSON error",
          st == 400 and err_of(b), (st, b[:200]))


# ---------------------------------------------------------------------------------------------
# slowloris and a stalled body (on their own proxy, run in the background)

def t_slow(tmp, fake, token):
    p = H.Proxy(tmp, "slow", fake.url(), fake.ca, token)
    try:
        _t_slow(p, fake)
    finally:
        p.stop()


def _t_slow(p, fake):
    port = p.port
    n_slow = 50
    slow_line = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
    socks = []
    for _ in range(n_slow):
        socks.append(Raw(port, timeout=5))
    t_first = time.time()
    sent = {i: 0 for i in range(n_slow)}
    answered = {}
    normal = []
    stop = threading.Event()

    def normal_clients():
        i = 0
        while not stop.is_set():
            t0 = time.time()
            try:
                if i % 2:
                    st, b, hd = p.request("GET", "/health", timeout=10)
                    ok = st == 200
                else:
                    st, hd, b = plain(p, "scenario:echo", "during slowloris %d" % i, timeout=10)
                    ok = st == 200 and msg_content(b) == "ECHO:during slowloris %d" % i
            except OSError as e:
                ok, st = False, repr(e)
            normal.append((ok, time.time() - t0, st))
            i += 1
            stop.wait(0.3)
    nt = threading.Thread(target=normal_clients)
    nt.start()

    # body that trickles, then stalls (> 30 s of silence on the body)
    bs = Raw(port, timeout=5)
    body = json.dumps(chat_body("scenario:bodystall", "x" * 200, False)).encode()
    bs.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
             "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
             % (port, len(body))).encode())
    body_sent = 0
    t_body_last = None
    body_res = None

    end = time.time() + 45
    tick = 0
    while time.time() < end and (len(answered) < n_slow or body_res is None):
        # slow clients: one header byte per second each
        if tick % 10 == 0:
            for i, r in enumerate(socks):
                if i in answered or sent[i] >= len(slow_line):
                    continue
                try:
                    r.send(slow_line[sent[i]:sent[i] + 1])
                    sent[i] += 1
                except OSError:
                    answered.setdefault(i, (time.time() - t_first, "send failed", b""))
        # the body trickles (4 bytes every 0.5 s for 2 s), then stops
        if body_sent < 16 and tick % 5 == 0:
            bs.send(body[body_sent:body_sent + 4])
            body_sent += 4
            t_body_last = time.time()
        rl = [r.s for i, r in enumerate(socks) if i not in answered]
        if body_res is None:
            rl.append(bs.s)
        rr, _, _ = select.select(rl, [], [], 0.1)
        for s in rr:
            if s is bs.s:
                st, hd, b = bs.response(2)
                body_res = (time.time() - t_body_last, st, hd, b)
                continue
            i = [k for k, r in enumerate(socks) if r.s is s][0]
            st, hd, b = socks[i].response(2)
            answered[i] = (time.time() - t_first, st, hd)
        tick += 1
    stop.set()
    nt.join(15)
    for r in socks:
        r.close()
    bs.close()

    sts = sorted(set(a[1] for a in answered.values()), key=str)
    times = [a[0] for a in answered.values()]
    eq("slowloris: all %d slow clients answered 408" % n_slow,
       (len(answered), sts), (n_slow, [408]))
    if times:
        note("slowloris: 408 after %.1f..%.1f s (header timeout 15 s)" % (min(times), max(times)))
        check("slowloris: 408 at the 15 s header deadline (14-20 s)",
              14 <= min(times) and max(times) <= 20, (min(times), max(times)))
    check("slowloris: 408s carry Connection: close", all(
        a[2].get("connection", "").lower() == "close" for a in answered.values()
        if isinstance(a[2], dict)), [a[2] for a in list(answered.values())[:2]])
    lat = [x[1] for x in normal]
    check("slowloris: >= 20 normal requests served meanwhile, all correct",
          len(normal) >= 20 and all(x[0] for x in normal), [x for x in normal if not x[0]][:5])
    if lat:
        note("normal requests during slowloris: %d, latency max %.0f ms, mean %.0f ms" % (
            len(lat), max(lat) * 1000, sum(lat) / len(lat) * 1000))
        check("slowloris: normal requests stay fast (max < 2 s)", max(lat) < 2, max(lat))

    if body_res is None:
        check("stalled body: answered", False, "no answer within the bound")
    else:
        dt, st, hd, b = body_res
        note("stalled body: %s %.1f s after the last body byte" % (st, dt))
        eq("stalled body -> 408", st, 408)
        check("stalled body: after the 30 s body idle timeout (29-36 s)", 29 <= dt <= 36, dt)
        check("stalled body: JSON error, Connection: close", err_of(b) and hd.get(
            "connection", "").lower() == "close", (hd, b[:200]))
        check("stalled body: the upstream was never contacted",
              not [x for x in fake.runs() if x["scenario"] == "bodystall"])


# ---------------------------------------------------------------------------------------------
# --max-conns 20

def h2_conns(p):
    """The proxy's open HTTP/2 connections to Cursor (its /metrics gauge)."""
    m = re.search(rb"^cursor_oai_h2_connections (\d+)", p.get("/metrics")[1], re.M)
    return int(m.group(1)) if m else 0


def t_cap(tmp, fake, token):
    p = H.Proxy(tmp, "cap", fake.url(), fake.ca, token, args=["--max-conns", "20"])
    held = []
    try:
        # the readiness probe's connection must be gone (its slot freed) before the 20 are
        # counted: the first held connection asks /metrics until it is the only one
        r = Raw(p.port)
        held.append((r, 0))

        def alone():
            r.send(req_bytes("GET", "/metrics", p.port))
            m = re.search(rb"^cursor_oai_client_connections (\d+)", r.response(5)[2], re.M)
            return m and int(m.group(1)) == 1
        check("cap: the readiness probe's connection is gone", H.wait_for(alone, 20, 0.1))
        r.send(req_bytes("GET", "/health", p.port))
        held[0] = (r, r.response(5)[0])
        for i in range(19):
            r = Raw(p.port)
            r.send(req_bytes("GET", "/health", p.port))
            held.append((r, r.response(5)[0]))
        eq("20 keep-alive connections served", [h[1] for h in held], [200] * 20)
        over = []
        for i in range(5):
            r = Raw(p.port)
            t0 = time.time()
            r.send(req_bytes("GET", "/health", p.port) if i % 2 else req_bytes(
                "POST", "/v1/chat/completions", p.port, chat_body("scenario:echo", "over")))
            st, hd, b = r.response(5)
            over.append((st, time.time() - t0, hd.get("retry-after"), (err_of(b) or {}).get(
                "code")))
            r.close()
        eq("connections 21-25 -> 503", [o[0] for o in over], [503] * 5)
        # at once, not when a slot frees (none does: waiting would end at the 5 s read
        # timeout); 2 s leaves room for a loaded machine
        check("503 answered at once (< 2 s)", all(o[1] < 2 for o in over), over)
        check("503 carries Retry-After and an OpenAI error", all(
            o[2] and o[3] for o in over), over)
        note("over the cap: %s" % [(o[0], "%.0fms" % (o[1] * 1000), o[2], o[3]) for o in over])
        # the held connections still work at the cap
        res = []
        for r, _ in held[:5]:
            r.send(req_bytes("GET", "/health", p.port))
            res.append(r.response(5)[0])
        eq("held connections keep working at the cap", res, [200] * 5)
        # free five slots: /health answers again
        for r, _ in held[:5]:
            r.close()
        held = held[5:]
        t0 = time.time()
        ok = H.wait_for(lambda: p.get("/health")[0] == 200, 20, 0.05)
        check("/health answers once slots are free", ok, time.time() - t0)
        note("/health back %.0f ms after freeing slots" % ((time.time() - t0) * 1000))
        for r, _ in held:
            r.close()
        held = []
        st, hd, b, s = sse(p, "scenario:echo", "after the cap")
        check("server responsive after the cap: a streamed chat", st == 200 and s and
              s["content"] == "ECHO:after the cap" and s["done"], (st, b[:200]))
        # an open HTTP/2 connection to Cursor keeps its I/O thread (the counterpart of a pooled
        # HTTP/1.1 connection, which has none): those are the baseline beyond the main two
        n2 = h2_conns(p)
        ok = H.wait_for(lambda: p.threads() <= 2 + n2, 20, 0.1)
        check("connection threads gone after the clients left", ok, (p.threads(), n2))
    finally:
        for r, _ in held:
            r.close()
        p.stop()


# ---------------------------------------------------------------------------------------------
# soak: client disconnects

def t_soak(tmp, fake, token, deadline):
    p = H.Proxy(tmp, "soak", fake.url(), fake.ca, token)
    try:
        _t_soak(p, fake, deadline)
    finally:
        p.stop()


def _t_soak(p, fake, deadline):
    errs = []
    par = 32

    def one(i):
        try:
            if i % 10 == 9:
                # non-streaming: leave while the proxy waits for the upstream's answer
                r = Raw(p.port)
                r.send(req_bytes("POST", "/v1/chat/completions", p.port,
                                 chat_body("scenario:stall", "ns%d" % i, False)))
                time.sleep(0.02)
                r.close()
            else:
                H.stream_chat(p.port, chat_body("scenario:stall", "s%d" % i), timeout=20,
                              stop_after_content=True)
        except OSError as e:
            errs.append(repr(e))

    def batch(n, t_end):
        done = 0
        with ThreadPoolExecutor(par) as ex:
            for start in range(0, n, 1000):
                if time.time() > t_end:
                    break
                list(ex.map(one, range(start, min(n, start + 1000))))
                done = min(n, start + 1000)
        return done
    batch(300, deadline)                                    # warm-up: steady state
    H.wait_for(lambda: fake.state()["active_streams"] == 0, 10)
    time.sleep(1.0)
    other0, pooled0 = p.fd_split(fake.port)
    th0, rss0 = p.threads(), p.rss_kib()
    c0 = fake.state()["counters"].get("disconnects_mid_stream", 0)
    t0 = time.time()
    # two halves, with the RSS in between in the note
    n = batch(N_DISCONNECTS // 2, deadline)
    H.wait_for(lambda: fake.state()["active_streams"] == 0, 30)
    H.wait_for(lambda: p.fd_split(fake.port)[0] <= other0 and p.threads() <= th0, 20, 0.2)
    rss_half = p.rss_kib()
    n += batch(N_DISCONNECTS - N_DISCONNECTS // 2, deadline)
    dt = time.time() - t0
    n_stream = n - n // 10
    check("%d disconnects ran (%d streaming, %d non-streaming) within the budget"
          % (N_DISCONNECTS, n_stream, n // 10), n == N_DISCONNECTS and not errs,
          "%d done; errors %s" % (n, errs[:5]))
    ok = H.wait_for(lambda: fake.state()["active_streams"] == 0, 30)
    check("every upstream stream was closed", ok, fake.state()["active_streams"])
    got = fake.state()["counters"].get("disconnects_mid_stream", 0) - c0
    check("fake saw the streaming runs cancelled mid-stream", got >= n_stream * 0.99,
          "%d of %d" % (got, n_stream))
    H.wait_for(lambda: p.fd_split(fake.port)[0] <= other0 and p.threads() <= th0, 20, 0.2)
    other1, pooled1 = p.fd_split(fake.port)
    th1, rss1, hwm = p.threads(), p.rss_kib(), p.status_field("VmHWM")
    note("%d disconnects in %.1f s (%.0f/s, %d parallel clients)" % (n, dt, n / dt, par))
    note("fds other %d -> %d, pooled upstream %d -> %d; threads %d -> %d; "
         "RSS %d -> %d -> %d KiB (peak %d KiB)" % (other0, other1, pooled0, pooled1, th0, th1,
                                                   rss0, rss_half, rss1, hwm))
    check("non-upstream fds back to baseline", other1 <= other0, (other0, other1))
    # a pooled socket per parallel client at most, plus the spares (UP_SPARE_PAR connects
    # under way, UP_SPARE_MIN kept ready): more would mean sockets kept past their run
    check("pooled upstream sockets bounded by the parallel clients plus spares (%d)" % (par + 5),
          pooled1 <= par + 5, pooled1)
    check("threads back to baseline", th1 <= th0, (th0, th1))
    # The allocator keeps and returns memory in steps of a few MiB after a burst (seen: the
    # same binary ends 0.7 to 3.4 MiB above its baseline, in either half), so the bound is
    # 6 MiB: a leak of about 630 bytes per disconnect would cross it.
    check("RSS within 6 MiB of the baseline after %d disconnects" % n, rss1 - rss0 <= 6144,
          (rss0, rss_half, rss1))
    st, hd, b, s = sse(p, "scenario:echo", "after the soak")
    check("proxy still serves after the soak", st == 200 and s and
          s["content"] == "ECHO:after the soak", (st, b[:200]))


# ---------------------------------------------------------------------------------------------

def run_section(name, fn, *a):
    S.section_run(name, lambda: fn(*a))


def on_alarm(signum, frame):
    with S.lock:
        S.section = "budget"
        check("the suite within FAULTS_BUDGET_S=%.0f s" % BUDGET_S, False, "over it")
        S.result()
    H.cleanup()
    os._exit(1)


def want(name):
    only = [x for x in os.environ.get("FAULTS_ONLY", "").split(",") if x]
    return not only or name in only


def main():
    if S.binary_missing():
        return 0
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(BUDGET_S))
    tmp = S.make_tmp()
    token = pb.make_jwt({"sub": "auth0|faults", "exp": int(time.time()) + 7200,
                         "type": "session"})
    try:
        fake = H.Fake(tmp, suite_scenarios(), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False,
                              "silent_max_s": 60.0})
        proxy = H.Proxy(tmp, "main", fake.url(), fake.ca, token)
        # the long waits (header/body/handshake timeouts) run beside the quick sections
        bg = [threading.Thread(target=run_section, args=("slow", t_slow, tmp, fake, token)),
              threading.Thread(target=run_section, args=("dead-upstream", t_dead_upstreams,
                                                         tmp, fake, token))]
        bg = [t for t in bg if want(t._args[0])]
        [t.start() for t in bg]
        if want("upstream"):
            run_section("upstream", t_upstream, proxy, fake)
        if want("client"):
            run_section("client", t_client, proxy, fake)
        if want("cap"):
            run_section("cap", t_cap, tmp, fake, token)
        [t.join(max(1, BUDGET_S - (time.time() - T_START) - 5)) for t in bg]
        S.section = "main"
        check("main proxy still running", proxy.proc.poll() is None, H.tail(proxy.proc.log_path))
        if want("soak"):
            run_section("soak", t_soak, tmp, fake, token, T_START + BUDGET_S - 25)
        S.section = "final"
        errs = fake.state()["errors"]
        check("fake upstream saw no protocol/validation errors", not errs, errs[:5])
        logs = "".join(H.tail(os.path.join(tmp, f), 10 ** 8) for f in os.listdir(tmp)
                       if f.startswith("proxy-"))
        check("access token never appears in proxy logs", token not in logs and
              token.split(".")[1] not in logs)
    except Exception:
        S.section = "setup"
        check("suite ran", False, traceback.format_exc())
    finally:
        H.cleanup()
        signal.alarm(0)
        note("total %.1f s" % (time.time() - T_START))
        code = S.finish(bool(os.environ.get("FAULTS_KEEP")))
    return code


if __name__ == "__main__":
    sys.exit(main())
