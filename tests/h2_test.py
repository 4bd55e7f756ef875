#!/usr/bin/python3
"""The HTTP/2 transport, end to end: build/cursor-oai against the fake upstream
speaking HTTP/2 (python3-h2), which checks the proxy's side of the protocol (flow control,
HPACK, stream limits, PING) and misbehaves on command. Each check here fails when the
behaviour it names is removed:
  mux        concurrent runs share one connection; past the server's stream limit a second
             connection opens (the fake records a stream over its limit as an error)
  goaway     GOAWAY in the middle of a run: the run finishes, the next one opens a new
             connection (a stream after GOAWAY is an error in the fake)
  rst        RST_STREAM in the middle of a run: an error for the client, no hang
  stall      one stream stalls while another on the same connection goes on
  window     a stream whose window stays closed: its run fails after the idle timeout, the
             others on the connection go on, and the proxy never overruns the window
  held_window  a held run's tool result that the window never lets out: it fails at the
             message's deadline (CURSOR_OAI_UPSTREAM_TIMEOUT) and the follow-up falls back to
             a fresh run; the others on the connection go on
  header_list  the server's SETTINGS_MAX_HEADER_LIST_SIZE: a head over it is never sent
  fallback   no h2 in ALPN / RST_STREAM at the start / GOAWAY at the start: the same request
             over HTTP/1.1 RunSSE + BidiAppend, remembered for the next runs, HTTP/2 again
             after CURSOR_OAI_H2_REPROBE; CURSOR_OAI_TRANSPORT=h2 forbids the fallback
  ping       the fake's PINGs are answered; the proxy PINGs a connection idle for 20 s
  doctor     `cursor-oai doctor` tries both transports and says which works
  fds        a run open over HTTP/2 costs the proxy one descriptor (the client's socket),
             none of its own: 10,000 streams fit in a 20,000-descriptor limit
  flood      a server that floods PINGs / empty SETTINGS without reading the acks
             (CVE-2019-9512/9515): the proxy's peak RSS grows by under 64 MB, it cuts the
             connection off (GOAWAY ENHANCE_YOUR_CALM) before the flood's 160 MB are out,
             and the run gets an error in its API's shape (502; Anthropic's api_error 500) saying
             the host flooded control frames
  io_thread  streaming runs that share a connection (a quiet companion run keeps them from
             being alone on it): the connection's I/O thread writes their text and thinking
             deltas (/metrics cursor_oai_h2_io_thread_reads_total rises; alone, it does not),
             and every dialect's streaming writer (Chat, Responses, Messages, Gemini) gives the
             events the same run gives alone; the hand-backs to the run's thread (a tool call,
             KV and request_context answered mid-answer, an error trailer, a bad frame, a
             heartbeat with more DATA right behind it) lose or reorder nothing; a client that
             does not read while 6 MB arrive gets every byte once, in order; a client that
             closes gets its upstream stream reset within 3 s, the other run goes on; a
             held run's follow-up (tool loop) streams its deltas from the I/O thread too
Prints `RESULT <passed> <failed>` last.   tests/h2_test.py [--only a,b]"""

import json
import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

# the product's default transport choice (HTTP/2, HTTP/1.1 as the fallback) for every proxy
# here, whatever pass of the suites this is
H.TRANSPORT = "auto"

S = H.Suite("h2", section=None, limit=1500)
check, eq = S.check, S.eq


SCEN = {
    "slow_echo": {"steps": [{"op": "sleep", "s": 1.5}, {"op": "echo"}, {"op": "turn_ended"},
                            {"op": "trailer", "status": 0}]},
    "goaway_mid": {"steps": [{"op": "text", "text": "before "}, {"op": "goaway"},
                             {"op": "sleep", "s": 0.5}, {"op": "text", "text": "after"},
                             {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "rst_mid": {"steps": [{"op": "text", "text": "partial "}, {"op": "sleep", "s": 0.3},
                          {"op": "rst_stream", "error": 2}]},
    "stall_one": {"steps": [{"op": "text", "text": "stalling"}, {"op": "sleep", "s": 30},
                            {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "rst_start": {"h2_rst_at_start": 7},
    "rst_start_h11": {"h2_rst_at_start": 13},
    # issue 29: frames that break HTTP/2 (written raw by the fake)
    "bad_stream_mid": {"steps": [{"op": "text", "text": "partial "}, {"op": "sleep", "s": 0.3},
                                 {"op": "h2_bad_frame", "kind": "stream"}]},
    "bad_conn_start": {"steps": [{"op": "h2_bad_frame", "kind": "conn"}]},
    "hold_window": {"h2_hold_window": True},
    # a held run (a read, then the results awaited) whose stream window stays closed once its
    # run request is in: a tool result bigger than what is left of the window never goes out
    "held_window": {"h2_hold_window": True, "when": [
        {"prompt_contains": "[Tool result for", "steps": [
            {"op": "text", "text": "REPLAYED"}, {"op": "turn_ended"},
            {"op": "trailer", "status": 0}]}],
        "steps": [{"op": "text", "text": "Reading."},
                  {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001",
                   "path": "/tmp/held-window.txt", "hold": True},
                  {"op": "await_results", "max_s": 120},
                  {"op": "text_from_result", "id": 1, "prefix": "GOT:"},
                  {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    # one delta, then quiet until POST /release (the bench's held streams)
    "held_quiet": {"steps": [{"op": "text", "text": "held"}, {"op": "hold", "max_s": 90},
                             {"op": "text", "text": " done"}, {"op": "turn_ended"},
                             {"op": "trailer", "status": 0}]},
    "quick": {"steps": [{"op": "text", "text": "quick answer"}, {"op": "turn_ended"},
                        {"op": "trailer", "status": 0}]},
    # once the Run's response head is out, 160 MB of PINGs / empty SETTINGS and no reading
    "flood_ping": {"h2_flood": {"frame": "ping", "bytes": 160 << 20, "max_s": 30}},
    "flood_settings": {"h2_flood": {"frame": "settings", "bytes": 160 << 20, "max_s": 30}},
}


def content(body):
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def err_code(body):
    try:
        return json.loads(body)["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def errors(fake, n0=0):
    return fake.state()["errors"][n0:]


def h2_handshakes(c):
    return c.get("alpn_main_h2", 0) + c.get("alpn_agent_h2", 0)


def counters(fake):
    return fake.state()["counters"]


def reset(fake, **cfg):
    fake.ctl("/reset", {})
    base = {"main_alpn": ["h2", "http/1.1"], "agent_alpn": ["h2"], "h2_max_streams": 100,
            "h2_goaway_at_start": False, "runsse_scenario": None, "h2_ping_s": 10.0,
            "h2_ping_ack_s": 10.0, "h2_max_header_list": 65536}
    base.update(cfg)
    fake.ctl("/config", base)


def transports(fake):
    return [r.get("transport") for r in fake.runs()]


def log_lines(px, needle, want=None):
    """Lines of the proxy's log with needle (waiting up to 20 s for one with want: the
    access log line is written after the response)."""
    out = []

    def read():
        out[:] = []
        try:
            with open(px.proc.log_path, errors="replace") as f:
                out.extend(l for l in f if needle in l)
        except OSError:
            pass
        return want is None or any(want in l for l in out)
    H.wait_for(read, 20)
    return out


def run_conns(fake, n=1):
    """The fake's connection ids that carried Run streams since the last reset (waiting up
    to 10 s for n Run requests to be recorded: the fake records one when its stream ends)."""
    def runs():
        return [r for r in fake.ctl("/requests?since=0")
                if r.get("path") == "/agent.v1.AgentService/Run"]
    H.wait_for(lambda: len(runs()) >= n, 10)
    return sorted({r["conn"] for r in runs()})


def par(fns):
    out = [None] * len(fns)

    def one(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # recorded as the result
            out[i] = e
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


# ---------------------------------------------------------------------------------------------

def t_mux(fake, px):
    reset(fake)
    res = par([lambda i=i: px.chat("scenario:slow_echo", "mux %d" % i, timeout=60)
               for i in range(8)])
    eq("mux: 8 concurrent runs answer 200", [r[0] for r in res], [200] * 8)
    eq("mux: each gets its own answer", [content(r[1]) for r in res],
       ["ECHO:mux %d" % i for i in range(8)])
    c = counters(fake)
    eq("mux: all 8 on HTTP/2", transports(fake), ["h2"] * 8)
    eq("mux: one HTTP/2 connection for all of them", len(run_conns(fake, 8)), 1)
    check("mux: streams ran concurrently on it", c.get("h2_max_streams_per_conn", 0) >= 4, c)
    check("mux: at most one HTTP/2 handshake for all of them",
          h2_handshakes(c) <= 1, h2_handshakes(c))
    eq("mux: no protocol errors", errors(fake), [])
    # the server allows 2 streams per connection: 6 runs need 3 connections, never a third
    # stream on one (the fake records that as TooManyStreams)
    reset(fake, h2_max_streams=2)
    px2 = H.Proxy(fake.dir, "limit", fake.url(), fake.ca, TOKEN)
    try:
        res = par([lambda i=i: px2.chat("scenario:slow_echo", "lim %d" % i, timeout=60)
                   for i in range(6)])
        eq("limit: 6 concurrent runs answer 200", [r[0] for r in res], [200] * 6)
        c = counters(fake)
        check("limit: more connections opened past SETTINGS_MAX_CONCURRENT_STREAMS=2",
              len(run_conns(fake, 6)) >= 3, run_conns(fake))
        check("limit: never more than 2 streams on a connection",
              c.get("h2_max_streams_per_conn", 0) <= 2, c.get("h2_max_streams_per_conn"))
        eq("limit: no protocol errors", errors(fake), [])
    finally:
        px2.stop()


def t_goaway(fake, px):
    reset(fake)
    st, body, _ = px.chat("scenario:goaway_mid", "g")
    eq("goaway: the run that saw GOAWAY finishes", (st, content(body)), (200, "before after"))
    st, body, _ = px.chat("scenario:quick", "next")
    eq("goaway: the next run answers", (st, content(body)), (200, "quick answer"))
    c = counters(fake)
    eq("goaway: the next run went to a new connection", len(run_conns(fake, 2)), 2)
    eq("goaway: the proxy ended its side of the finished stream (END_STREAM)",
       [r["stream"].get("client_end") for r in fake.runs()], ["end_stream", "end_stream"])
    eq("goaway: the fake sent one GOAWAY", c.get("h2_goaway_sent"), 1)
    eq("goaway: no stream after GOAWAY, no protocol errors", errors(fake), [])


def t_rst(fake, px):
    reset(fake)
    t0 = time.time()
    st, hd, raw, _ = H.stream_chat(px.port, {"model": "scenario:rst_mid", "stream": True,
                                             "messages": [{"role": "user", "content": "r"}]},
                                   timeout=30)
    ev = H.parse_sse(raw)
    check("rst: the streamed part arrived", "partial" in ev["content"], ev)
    check("rst: RST_STREAM mid-run ends the stream with an error event", len(ev["errors"]) == 1
          and "RST_STREAM" in (ev["errors"][0].get("message") or ""), ev["errors"])
    check("rst: no hang (%.1f s)" % (time.time() - t0), time.time() - t0 < 10)
    eq("rst: not retried over HTTP/1.1 once bytes reached the client", transports(fake), ["h2"])
    st, body, _ = px.chat("scenario:quick", "after rst")
    eq("rst: the connection serves the next run", (st, content(body)), (200, "quick answer"))
    eq("rst: ... on the same connection", len(run_conns(fake, 2)), 1)


def t_bad_frames(fake, px):
    """issue 29: a server that breaks HTTP/2 is reported as that: upstream_protocol_error, and
    a stream the proxy reset itself is not called the server's reset or refusal."""
    reset(fake)
    st, hd, raw, _ = H.stream_chat(px.port, {"model": "scenario:bad_stream_mid", "stream": True,
                                             "messages": [{"role": "user", "content": "b"}]},
                                   timeout=30)
    ev = H.parse_sse(raw)
    e = ev["errors"][0] if len(ev["errors"]) == 1 else {}
    check("bad frame on the stream mid-run: an error event coded upstream_protocol_error that "
          "says the proxy reset the stream (not that the server did)",
          "partial" in ev["content"] and e.get("code") == "upstream_protocol_error"
          and "the proxy reset the stream (RST_STREAM PROTOCOL_ERROR)" in e.get("message", ""),
          ev["errors"])
    st, body, _ = px.chat("scenario:quick", "after the bad frame")
    eq("bad frame on the stream: the next run answers", (st, content(body)),
       (200, "quick answer"))
    # a connection error before any answer, HTTP/2 forced (no fallback to hide it)
    reset(fake)
    p2 = H.Proxy(fake.dir, "badconn", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "h2"})
    try:
        st, body, _ = p2.chat("scenario:bad_conn_start", "c")
        try:
            e = json.loads(body).get("error", {})
        except ValueError:
            e = {}
        check("a connection-level protocol error before the answer: 502 upstream_protocol_error "
              "(not upstream_unreachable) naming it", st == 502
              and e.get("code") == "upstream_protocol_error"
              and "HTTP/2 protocol error by the server" in e.get("message", ""), (st, body[:400]))
    finally:
        p2.stop()


def t_stall(fake, px):
    reset(fake)
    out = {}

    def stalled():
        t = time.time()
        out["a"] = H.stream_chat(px.port, {"model": "scenario:stall_one", "stream": True,
                                          "messages": [{"role": "user", "content": "a"}]},
                                 timeout=60)
        out["ta"] = time.time() - t
    th = threading.Thread(target=stalled)
    th.start()
    time.sleep(1.0)
    t = time.time()
    res = [px.chat("scenario:quick", "b%d" % i) for i in range(3)]
    tb = time.time() - t
    eq("stall: runs next to a stalled stream answer", [(r[0], content(r[1])) for r in res],
       [(200, "quick answer")] * 3)
    check("stall: ... without waiting for it (%.1f s)" % tb, tb < 5)
    th.join(60)
    ev = H.parse_sse(out["a"][2])
    check("stall: the stalled run ends with the idle timeout, not a hang",
          ev["errors"] and out["ta"] < 30, (ev["errors"], out.get("ta")))
    c = counters(fake)
    eq("stall: all on one HTTP/2 connection", len(run_conns(fake, 4)), 1)
    eq("stall: no protocol errors", errors(fake), [])


def t_window(fake, px):
    # the stream's receive window stays closed from its first byte: a prompt bigger than
    # the 65,535-byte initial window can never be sent whole
    reset(fake, runsse_scenario="hold_window")
    big = "W" * 200000
    out = {}

    def blocked():
        t = time.time()
        out["r"] = px.chat("scenario:quick", big, timeout=60)
        out["t"] = time.time() - t
    th = threading.Thread(target=blocked)
    th.start()
    # the scenario applies to the streams opened while it is set: clear it only once the
    # blocked run's stream has taken it (a fixed sleep lost that race on a loaded machine:
    # the stream opened after the reset and was answered 200)
    held = H.wait_for(lambda: counters(fake).get("h2_hold_window_streams", 0) >= 1, 30)
    fake.ctl("/config", {"runsse_scenario": None})
    check("window: the blocked run's stream was opened with its window held", held,
          counters(fake))
    st, body, _ = px.chat("scenario:quick", "small")
    eq("window: a run next to a blocked stream answers", (st, content(body)),
       (200, "quick answer"))
    th.join(60)
    st = out["r"][0]
    check("window: the blocked run fails (504) instead of hanging or overrunning the window",
          st == 504 and out["t"] < 30, (st, out["r"][1][:300], out.get("t")))
    c = counters(fake)
    eq("window: one connection", len(run_conns(fake, 2)), 1)
    eq("window: no flow-control violation or other protocol error", errors(fake), [])


READ_TOOL = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def t_held_window(fake):
    """A held run's tool result blocked by a stream window that stays closed: sending it
    fails at the message's deadline (CURSOR_OAI_UPSTREAM_TIMEOUT, as a BidiAppend call over
    HTTP/1.1), said in the log, and the follow-up falls back to a fresh run; never a hang,
    and the connection's other streams go on meanwhile."""
    reset(fake)
    # CURSOR_OAI_TOOL_MODE=cursor: the scenario's tool call is a native read exec (in client
    # mode, the default, a run with tools gets none; tests/tools_header_test.py covers it)
    px = H.Proxy(fake.dir, "heldwin", fake.url(), fake.ca, TOKEN, extra_env={
        "CURSOR_OAI_TRANSPORT": "h2", "CURSOR_OAI_UPSTREAM_TIMEOUT": "4",
        "CURSOR_OAI_HOLLOW_TIMEOUT": "60", "CURSOR_OAI_IDLE_TIMEOUT": "120",
        "CURSOR_OAI_TOOL_MODE": "cursor"})
    try:
        msgs = [{"role": "user", "content": "read it"}]
        st, b, _ = px.request("POST", "/v1/chat/completions", {
            "model": "scenario:held_window", "messages": msgs, "tools": READ_TOOL}, timeout=60)
        m = (json.loads(b).get("choices") or [{}])[0].get("message", {}) if st == 200 else {}
        calls = m.get("tool_calls") or []
        if not check("held window: the held run asked for a read", st == 200 and calls,
                     (st, b[:300])):
            return
        msgs = msgs + [{"role": "assistant", "content": m.get("content"), "tool_calls": calls}]
        msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "R" * 200000}
                 for c in calls]
        held0 = counters(fake).get("h2_hold_window_bytes", 0)
        out = {}

        def follow():
            t = time.time()
            out["r"] = px.request("POST", "/v1/chat/completions", {
                "model": "scenario:held_window", "messages": msgs, "tools": READ_TOOL},
                timeout=90)
            out["t"] = time.time() - t
        th = threading.Thread(target=follow)
        th.start()
        # the result's first 30 KB are in the held window: the rest of it waits for window
        blocked = H.wait_for(lambda: counters(fake).get("h2_hold_window_bytes", 0) - held0
                             >= 30000, 30)
        check("held window: the tool result filled the stream's held window", blocked,
              counters(fake))
        t = time.time()
        st2, b2, _ = px.chat("scenario:quick", "next to it", timeout=30)
        t2 = time.time() - t
        pending = "r" not in out
        check("held window: a run next to the blocked result answers at once (%.1f s)" % t2,
              (st2, content(b2)) == (200, "quick answer") and t2 < 3 and pending,
              (st2, b2[:200], t2, pending))
        th.join(90)
        r = out.get("r") or (0, b"", {})
        eq("held window: the follow-up falls back to a fresh run (the replayed history)",
           (r[0], content(r[1])), (200, "REPLAYED"))
        check("held window: ... once the result's deadline (4 s) passed, not a hang (%.1f s)"
              % out.get("t", -1), 3.5 <= out.get("t", 99) < 15, out.get("t"))
        lines = log_lines(px, "sending a tool result failed", "window")
        check("held window: the log says the window stayed closed and that it falls back",
              any("flow-control window" in l and "falling back to a fresh run" in l
                  for l in lines), lines)
        eq("held window: one connection for all the runs", len(run_conns(fake, 3)), 1)
        eq("held window: no protocol error", errors(fake), [])
    finally:
        px.stop()


def t_header_list(fake):
    """The server's SETTINGS_MAX_HEADER_LIST_SIZE: a request head over it never goes out
    (the fake, as python3-h2 does, takes one as a protocol error of the connection). With
    HTTP/2 forced the run fails at once naming the limit; with the default choice it goes
    over HTTP/1.1 instead; a head within the limit is sent as before."""
    reset(fake, h2_max_header_list=600)
    px = H.Proxy(fake.dir, "hlist", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "h2"})
    try:
        t = time.time()
        st, b, _ = px.chat("scenario:quick", "x", timeout=30)
        dt = time.time() - t
        msg = ""
        try:
            msg = json.loads(b)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        print("     [header_list] forced HTTP/2: %d after %.1f s: %s" % (st, dt, b[:300]))
        check("header list: forced HTTP/2, a head over the server's limit: 502 at once (%.1f s)"
              % dt, st == 502 and dt < 5, (st, b[:300]))
        check("header list: ... the message names the limit and both sizes",
              "SETTINGS_MAX_HEADER_LIST_SIZE" in msg and "600" in msg, msg)
        eq("header list: ... nothing over the limit reached the server", errors(fake), [])
    finally:
        px.stop()
    px = H.Proxy(fake.dir, "hlist-auto", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "auto"})
    try:
        st, b, _ = px.chat("scenario:quick", "y", timeout=30)
        eq("header list: the default transport choice answers over HTTP/1.1",
           (st, content(b), transports(fake)[-1:]), (200, "quick answer", ["http1"]))
        eq("header list: ... nothing over the limit reached the server", errors(fake), [])
    finally:
        px.stop()
    # a limit the head fits in: HTTP/2 as usual
    reset(fake, h2_max_header_list=4096)
    px = H.Proxy(fake.dir, "hlist-fits", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "h2"})
    try:
        st, b, _ = px.chat("scenario:quick", "z", timeout=30)
        eq("header list: a head within the limit goes over HTTP/2",
           (st, content(b), transports(fake)[-1:]), (200, "quick answer", ["h2"]))
        eq("header list: ... no protocol error", errors(fake), [])
    finally:
        px.stop()
    reset(fake)


def t_fallback(fake):
    # 1. no h2 in ALPN: the request goes over HTTP/1.1, and so do the next ones
    reset(fake, main_alpn=["http/1.1"], agent_alpn=["http/1.1"])
    px = H.Proxy(fake.dir, "fb-alpn", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_H2_REPROBE": "10"})
    try:
        # HTTP/1.1 for 10 s after the failure: room for the checks below on a loaded machine
        # (with 4 s, the remembered-choice checks could outlast the window)
        st, body, _ = px.chat("scenario:quick", "alpn")
        t_failed = time.time()      # the HTTP/2 failure came before this answer
        eq("fallback alpn: the request is answered", (st, content(body)), (200, "quick answer"))
        eq("fallback alpn: over HTTP/1.1", transports(fake), ["http1"])
        check("fallback alpn: the access log says fallback=http1",
              any("fallback=http1" in l and "transport=http1" in l
                  for l in log_lines(px, "POST /v1/chat/completions", "fallback=http1")),
              log_lines(px, "POST /v1/chat/completions"))
        fake.ctl("/config", {"main_alpn": ["h2", "http/1.1"], "agent_alpn": ["h2"]})
        h0 = h2_handshakes(counters(fake))
        st, body, _ = px.chat("scenario:quick", "remembered")
        eq("fallback alpn: the choice is remembered: the next run goes straight to HTTP/1.1",
           (st, transports(fake)[-1], h2_handshakes(counters(fake)) - h0),
           (200, "http1", 0))
        tr = json.loads(px.get("/status.json")[1])["upstream"]["transport"]
        check("fallback alpn: the status page says HTTP/1.1 for now, why, and when HTTP/2 "
              "comes back", tr.startswith("HTTP/1.1: RunSSE + BidiAppend for ")
              and "then HTTP/2 again (HTTP/2 failed: " in tr, tr)
        time.sleep(max(0.0, t_failed + 10.5 - time.time()))    # the 10 s are over
        st, body, _ = px.chat("scenario:quick", "reprobe")
        eq("fallback alpn: after CURSOR_OAI_H2_REPROBE HTTP/2 is tried again",
           (st, transports(fake)[-1]), (200, "h2"))
        # read once, right after the answer: the proxy counts a run before its last byte
        want = ['cursor_oai_transport_runs_total{transport="%s"}' % t for t in ("h2", "http1")]
        m = px.get("/metrics")[1].decode()
        eq("fallback alpn: ... and the status page says HTTP/2 again",
           json.loads(px.get("/status.json")[1])["upstream"]["transport"],
           "HTTP/2 (HTTP/1.1 as the fallback)")
        check("metrics: runs by transport", all(w in m for w in want),
              [l for l in m.splitlines() if "transport" in l])
        check("metrics: the fallback is counted", 'kind="http1"' in m)
    finally:
        px.stop()
    # 2. RST_STREAM (REFUSED_STREAM) at the start
    reset(fake, runsse_scenario="rst_start")
    px = H.Proxy(fake.dir, "fb-rst", fake.url(), fake.ca, TOKEN)
    try:
        st, body, _ = px.chat("scenario:quick", "rst at start")
        eq("fallback rst: answered over HTTP/1.1", (st, content(body), transports(fake)[-1]),
           (200, "quick answer", "http1"))
        check("fallback rst: the HTTP/2 attempts were reset at the start (one retry on a new "
              "connection for REFUSED_STREAM)", counters(fake).get("h2_rst_at_start") in (1, 2),
              counters(fake))
    finally:
        px.stop()
    # 2b. RST_STREAM HTTP_1_1_REQUIRED at the start (late-autumn notes N15): the 464 path,
    # HTTP/1.1 at once (no second HTTP/2 try on a new connection, as for REFUSED_STREAM)
    reset(fake, runsse_scenario="rst_start_h11")
    px = H.Proxy(fake.dir, "fb-rst-h11", fake.url(), fake.ca, TOKEN)
    try:
        st, body, _ = px.chat("scenario:quick", "rst h11 at start")
        eq("fallback HTTP_1_1_REQUIRED (RST_STREAM): answered over HTTP/1.1, one HTTP/2 try",
           (st, content(body), transports(fake), counters(fake).get("h2_rst_at_start")),
           (200, "quick answer", ["h2", "http1"], 1))
        tr = json.loads(px.get("/status.json")[1])["upstream"]["transport"]
        check("fallback HTTP_1_1_REQUIRED: the status page names it", "HTTP_1_1_REQUIRED" in tr,
              tr)
    finally:
        px.stop()
    # 2c. GOAWAY HTTP_1_1_REQUIRED on every new connection
    reset(fake, h2_goaway_at_start=13)
    px = H.Proxy(fake.dir, "fb-goaway-h11", fake.url(), fake.ca, TOKEN)
    try:
        st, body, _ = px.chat("scenario:quick", "goaway h11 at start")
        eq("fallback HTTP_1_1_REQUIRED (GOAWAY): answered over HTTP/1.1",
           (st, content(body), transports(fake)), (200, "quick answer", ["http1"]))
        eq("fallback HTTP_1_1_REQUIRED (GOAWAY): no stream was opened after it", errors(fake), [])
    finally:
        px.stop()
    # 3. GOAWAY at the start of every new connection
    reset(fake, h2_goaway_at_start=True)
    px = H.Proxy(fake.dir, "fb-goaway", fake.url(), fake.ca, TOKEN)
    try:
        st, body, _ = px.chat("scenario:quick", "goaway at start")
        eq("fallback goaway: answered over HTTP/1.1", (st, content(body), transports(fake)[-1:]),
           (200, "quick answer", ["http1"]))
        eq("fallback goaway: no stream was opened after the GOAWAY", errors(fake), [])
    finally:
        px.stop()
    # 4. forced HTTP/2: no fallback, a clear error
    reset(fake, main_alpn=["http/1.1"], agent_alpn=["http/1.1"])
    px = H.Proxy(fake.dir, "forced", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "h2"})
    try:
        st, body, _ = px.chat("scenario:quick", "forced")
        eq("forced h2: no fallback: 502 upstream_no_h2", (st, err_code(body)),
           (502, "upstream_no_h2"))
        eq("forced h2: no HTTP/1.1 run", transports(fake), [])
    finally:
        px.stop()
    # 5. forced HTTP/1.1
    reset(fake)
    px = H.Proxy(fake.dir, "forced1", fake.url(), fake.ca, TOKEN,
                 extra_env={"CURSOR_OAI_TRANSPORT": "http1"})
    try:
        st, body, _ = px.chat("scenario:quick", "http1")
        eq("forced http1: RunSSE + BidiAppend", (st, transports(fake)), (200, ["http1"]))
        eq("forced http1: no HTTP/2 connection", counters(fake).get("h2_connections"), None)
    finally:
        px.stop()


def doctor(fake, env):
    import subprocess
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    home = os.path.join(fake.dir, "home-doctor")
    os.makedirs(home, exist_ok=True)
    e.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
              "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
              "CURSOR_ACCESS_TOKEN": TOKEN, "CURSOR_OAI_IDLE_TIMEOUT": "3"})
    e.update(env)
    r = subprocess.run(H.proxy_cmd() + ["doctor"], env=e, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def t_doctor(fake):
    reset(fake)
    rc, out = doctor(fake, {})
    check("doctor: both transports tried and named",
          rc == 0 and "OK   run (HTTP/2)" in out and "HTTP/2 works, HTTP/1.1 works" in out
          and "runs use HTTP/2" in out, out)
    reset(fake, main_alpn=["http/1.1"], agent_alpn=["http/1.1"])
    rc, out = doctor(fake, {})
    check("doctor: no h2 in ALPN: HTTP/2 fails, HTTP/1.1 works, runs use HTTP/1.1",
          rc == 0 and "WARN run (HTTP/2)" in out and "did not choose HTTP/2" in out
          and "HTTP/2 FAILED, HTTP/1.1 works" in out and "runs use HTTP/1.1" in out, out)
    rc, out = doctor(fake, {"CURSOR_OAI_TRANSPORT": "h2"})
    check("doctor: forced HTTP/2 without h2: fails with the advice", rc == 1
          and "FAIL run (HTTP/2)" in out and "CURSOR_OAI_TRANSPORT=h2" in out, out)
    reset(fake)


def t_ping(fake):
    reset(fake, h2_ping_s=0.5, h2_ping_ack_s=3.0)
    px = H.Proxy(fake.dir, "ping", fake.url(), fake.ca, TOKEN)
    try:
        H.stream_chat(px.port, {"model": "scenario:stall_one", "stream": True,
                                "messages": [{"role": "user", "content": "p"}]}, timeout=30)
        c = counters(fake)
        check("ping: the fake's PINGs were answered", c.get("h2_ping_acks", 0) >= 2, c)
        eq("ping: none left unanswered", errors(fake), [])
        # the proxy's own PING after 20 s of silence on an idle connection
        fake.ctl("/config", {"h2_ping_s": 0})
        time.sleep(1.0)
        p0 = counters(fake).get("h2_pings_received", 0)
        H.wait_for(lambda: counters(fake).get("h2_pings_received", 0) > p0, 26, step=0.5)
        check("ping: the proxy PINGs a connection idle for 20 s",
              counters(fake).get("h2_pings_received", 0) > p0, counters(fake))
    finally:
        px.stop()


def t_fds(fake):
    reset(fake)
    px = H.Proxy(fake.dir, "fds", fake.url(), fake.ca, TOKEN)
    n, out, ths = 20, {}, []

    def fds():
        return len(os.listdir("/proc/%d/fd" % px.proc.pid))

    def one(i):
        out[i] = H.stream_chat(px.port, {"model": "scenario:held_quiet", "stream": True,
                                         "messages": [{"role": "user", "content": "f%d" % i}]},
                               timeout=120)

    def start(i):
        t = threading.Thread(target=one, args=(i,))
        t.start()
        ths.append(t)

    def active():
        return fake.state()["active_streams"]
    try:
        # the first run opens the connection (its socket, its I/O thread's wake pipe)
        start(0)
        ok = H.wait_for(lambda: active() >= 1, 30)
        check("fds: the first held stream is open at the fake", ok, fake.state())
        time.sleep(0.5)
        f0 = fds()
        for i in range(1, n + 1):
            start(i)
        ok = H.wait_for(lambda: active() >= n + 1, 60)
        check("fds: %d more held streams open at the fake" % n, ok, fake.state())
        H.wait_for(lambda: fds() - f0 >= n, 10)
        time.sleep(0.5)
        f1 = fds()
        check("fds: %d held HTTP/2 streams cost the proxy %d descriptors (one each: the "
              "client's socket)" % (n, f1 - f0), n <= f1 - f0 <= n + 2, (f0, f1))
    finally:
        fake.ctl("/release", {})
        for t in ths:
            t.join(60)
        px.stop()
    eq("fds: every held stream ended with its answer",
       sorted(H.parse_sse(out.get(i, (0, 0, b""))[2])["content"] for i in range(n + 1)),
       ["held done"] * (n + 1))
    eq("fds: all on one HTTP/2 connection", len(run_conns(fake, n + 1)), 1)
    eq("fds: no protocol errors", errors(fake), [])


def t_agent_url(fake):
    """CURSOR_OAI_AGENT_URL forces the HTTP/2 Run host too, not only HTTP/1.1's: with
    GetServerConfig naming a host where nothing listens, forced HTTP/2 fails without it and
    answers with it, the Run stream on the host it names."""
    dead = "https://localhost:1"
    reset(fake, server_config={"agentUrlConfig": {"agentUrl": dead, "agentnUrl": dead}})
    got = {}
    for name, env in (("without", {}), ("with", {"CURSOR_OAI_AGENT_URL": fake.url("agent_port")})):
        px = H.Proxy(fake.dir, "agent_url_" + name, fake.url(), fake.ca, TOKEN,
                     extra_env=dict(env, CURSOR_OAI_TRANSPORT="h2"))
        try:
            got[name] = px.chat("scenario:slow_echo", "agent url " + name, timeout=60)
        finally:
            px.stop()
    check("agent_url: forced HTTP/2 to the host GetServerConfig names (nothing listens): an "
          "error", got["without"][0] >= 500, got["without"][:2])
    eq("agent_url: with CURSOR_OAI_AGENT_URL: 200 and the answer",
       (got["with"][0], content(got["with"][1])), (200, "ECHO:agent url with"))
    H.wait_for(lambda: len(run_conns(fake, 1)) >= 1, 10)
    runs = [r for r in fake.ctl("/requests?since=0")
            if r.get("path") == "/agent.v1.AgentService/Run"]
    eq("agent_url: the Run stream went to the host it names, over HTTP/2",
       [(r.get("listener"), r.get("h2")) for r in runs], [("agent", True)])
    reset(fake, server_config=None)


def vm_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def t_flood(fake):
    for kind, api in (("ping", "chat"), ("settings", "messages")):
        reset(fake, runsse_scenario="flood_" + kind)
        px = H.Proxy(fake.dir, "flood_" + kind, fake.url(), fake.ca, TOKEN,
                     extra_env={"CURSOR_OAI_TRANSPORT": "h2",
                                # the run waits as long as the flood may last
                                "CURSOR_OAI_IDLE_TIMEOUT": "60"})
        try:
            hwm0 = vm_kb(px.proc.pid, "VmHWM")
            if api == "chat":
                st, body, _ = px.chat("scenario:quick", "flood " + kind, timeout=90)
            else:
                st, body, _ = px.request("POST", "/v1/messages", {
                    "model": "scenario:quick", "max_tokens": 100,
                    "messages": [{"role": "user", "content": "flood " + kind}]}, timeout=90)
            grew = (vm_kb(px.proc.pid, "VmHWM") - hwm0) // 1024
        finally:
            px.stop()
        # the fake's flood ends once its writes fail (or at its bytes / max_s)
        H.wait_for(lambda: counters(fake).get("h2_flood_cut")
                   or counters(fake).get("h2_flood_done"), 40)
        c = counters(fake)
        try:
            j = json.loads(body)
        except ValueError:
            j = {}
        msg = (j.get("error") or {}).get("message", "") if isinstance(j, dict) else ""
        shape = (isinstance(j.get("error"), dict) and "code" in j["error"]) if api == "chat" \
            else (j.get("type") == "error" and isinstance(j.get("error"), dict)
                  and j["error"].get("type") == "api_error")
        # Anthropic's shape answers every upstream failure with api_error 500 (README)
        eq("flood %s: the run is a %s" % (kind, "502" if api == "chat" else "500 api_error"),
           st, 502 if api == "chat" else 500)
        check("flood %s: in the %s API's error shape, saying the host flooded control frames "
              "and that the proxy sent ENHANCE_YOUR_CALM" % (kind, api),
              shape and "flooded control frames" in msg and "ENHANCE_YOUR_CALM" in msg, body)
        if api == "chat":
            # the host answered and then broke HTTP/2's bounds: a protocol error, never
            # "unreachable" (the reason is coded where the connection fails, not read back
            # from its message)
            eq("flood %s: coded upstream_protocol_error" % kind,
               ((j.get("error") or {}).get("code") if isinstance(j, dict) else None),
               "upstream_protocol_error")
        check("flood %s: the proxy's peak RSS grew by under 64 MB (%d MB)" % (kind, grew),
              grew < 64, grew)
        check("flood %s: the proxy cut the connection off before the flood's 160 MB were "
              "out (%.1f MB sent)" % (kind, c.get("h2_flood_bytes", 0) / 1048576.0),
              c.get("h2_flood_cut") == 1 and not c.get("h2_flood_done")
              and c.get("h2_flood_bytes", 0) < 160 << 20, c)
    reset(fake)


# ---------------------------------------------------------------------------------------------
# io_thread: the deltas of a streaming run that shares its connection are written to the
# client by the connection's I/O thread (server.c h2s_body_il, run_il_consume); anything else
# is handed back to the run's thread. Each output here is compared with the same scenario run
# alone on its connection (the stream's own thread reads it: the path as before), and the
# /metrics counters show the I/O thread's consumer really ran.

IL_GAP = 0.05       # between deltas: the run's thread is asleep (parked) when the next arrives


def il_paced(kind, texts, gap=IL_GAP):
    out = []
    for t in texts:
        out += [{"op": kind, "text": t}, {"op": "sleep", "s": gap}]
    return out


IL_TEXT = ["Hello", ", w\u00f6rld", " \U0001f30d", " one", " two", " three", " four", " end."]
IL_THINK = ["Let me", " think", " about", " it."]
IL_FILE = "/tmp/coai-il-held.txt"
IL_BIG = ["%04d:" % i + "z" * 1995 + "\n" for i in range(3000)]   # 6 MB of deltas: more
# than the proxy's socket buffer (tcp_wmem at most 4 MB) and the client's take
IL_WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
IL_SCEN = {
    # the companion: one delta, then quiet (no frame: nothing for the I/O thread to consume)
    "il_comp": {"steps": [{"op": "text", "text": "companion"}, {"op": "sleep", "s": 60}]
                + H.END},
    "il_tick": {"steps": [{"op": "text", "text": "companion"}]
                + [x for _ in range(5) for x in ({"op": "sleep", "s": 0.2},
                                                  {"op": "text", "text": "tick"})]
                + [{"op": "sleep", "s": 60}] + H.END},
    "il_text": {"steps": il_paced("text", IL_TEXT) + [{"op": "token_delta", "tokens": 7}]
                + H.END},
    "il_think": {"steps": il_paced("thinking", IL_THINK)
                 + [{"op": "thinking_completed", "ms": 120}] + il_paced("text", IL_TEXT[:4])
                 + H.END},
    "il_tool": {"steps": il_paced("text", IL_TEXT[:5]) + [
        {"op": "exec", "kind": "mcp", "id": 2, "exec_id": "exec-il-2", "tool_name": "get_weather",
         "args": {"city": "Oslo"}, "tool_call_id": "call_il_1"}, {"op": "stall", "max_s": 20}]},
    "il_kv": {"steps": il_paced("text", IL_TEXT[:4]) + [
        {"op": "kv_set_blob", "id": 1, "data": "blob-il"},
        {"op": "kv_get_blob", "id": 2, "data_of": "blob-il", "expect": "blob-il"},
        {"op": "exec", "kind": "request_context", "id": 6, "exec_id": "exec-il-6",
         "wait_reply": 2.0}] + il_paced("text", IL_TEXT[4:]) + H.END},
    "il_trailer": {"steps": il_paced("text", IL_TEXT[:4]) + [
        {"op": "trailer", "status": 13, "message": "il boom"}]},
    "il_badframe": {"steps": il_paced("text", IL_TEXT[:4]) + [
        {"op": "raw", "hex": "00ffffffff0a0a0a0a0a"}, {"op": "stall", "max_s": 20}]},
    # many large deltas, then quiet until /release: a client that does not read fills its socket
    # (in batches of 20, 10 ms apart: the run's thread parks between them, also when a
    # sanitizer slows it down, so the I/O thread is the one that finds the socket full)
    "il_big": {"steps": [x for i, t in enumerate(IL_BIG) for x in (
        [{"op": "text", "text": t}] + ([{"op": "sleep", "s": 0.01}] if i % 20 == 19 else []))]
               + [{"op": "hold", "max_s": 30}] + H.END},
    # a frame the I/O thread hands back (a heartbeat) with more DATA right behind it, before
    # the run's thread has woken to take it
    "il_race": {"steps": [x for i in range(60) for x in (
        {"op": "text", "text": "a%d " % i}, {"op": "sleep", "s": 0.01}, {"op": "heartbeat"},
        {"op": "text", "text": "b%d " % i}, {"op": "text", "text": "c%d " % i},
        {"op": "text", "text": "d%d " % i})] + H.END},
    "il_long": {"steps": il_paced("text", ["d%d " % i for i in range(300)]) + H.END},
    "il_other": {"steps": il_paced("text", ["o%d " % i for i in range(30)]) + H.END},
    "il_held": {"when": H.REPLAY, "steps": [
        {"op": "text", "text": "Reading."},
        {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001", "path": IL_FILE,
         "hold": True},
        {"op": "await_results", "max_s": 30},
        {"op": "text_from_result", "id": 1, "prefix": "GOT:"}, {"op": "sleep", "s": IL_GAP}]
        + il_paced("text", ["f%d " % i for i in range(10)]) + H.END},
}

IL_DIALECTS = {
    "chat": ("/v1/chat/completions", lambda m, t: {
        "model": m, "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": t}]}, {}),
    "responses": ("/v1/responses", lambda m, t: {"model": m, "stream": True, "input": t}, {}),
    "messages": ("/v1/messages", lambda m, t: {
        "model": m, "stream": True, "max_tokens": 1024,
        "messages": [{"role": "user", "content": t}]}, {"anthropic-version": "2023-06-01"}),
    "gemini": (None, lambda m, t: {"contents": [{"role": "user", "parts": [{"text": t}]}]}, {}),
}
# values that differ from one response to the next: ids, times
IL_VOLATILE = {"id", "created", "created_at", "system_fingerprint", "responseId", "createTime",
               "response_id", "item_id", "completed_at"}


def il_counts(px):
    """(reads, handbacks): cursor_oai_h2_io_thread_{reads,handbacks}_total from /metrics."""
    st, b, _ = px.get("/metrics")
    got = {}
    for line in b.decode("utf-8", "replace").splitlines():
        for k in ("reads", "handbacks"):
            if line.startswith("cursor_oai_h2_io_thread_%s_total " % k):
                got[k] = float(line.split()[1])
    return got.get("reads", -1.0), got.get("handbacks", -1.0)


def il_norm(v):
    if isinstance(v, dict):
        return {k: ("<v>" if k in IL_VOLATILE else il_norm(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [il_norm(x) for x in v]
    return v


def il_events(raw):
    """SSE bytes -> [(event name, data with ids and times masked)] and problems."""
    out, bad = [], []
    try:
        txt = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return [], ["invalid UTF-8: %s" % e]
    for block in txt.replace("\r\n", "\n").split("\n\n"):
        ev, data = None, None
        for line in block.split("\n"):
            if line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                d = line[5:].strip()
                try:
                    data = il_norm(json.loads(d))
                except ValueError:
                    data = d
            elif line and not line.startswith(":"):
                bad.append(line[:80])
        if ev is not None or data is not None:
            out.append((ev, data))
    return out, bad


def il_same(lab, got, want):
    """got == want, or the first event that differs."""
    i = next((i for i in range(max(len(got), len(want)))
              if i >= len(got) or i >= len(want) or got[i] != want[i]), None)
    check("%s: the events equal the run's alone (ids and times aside)" % lab, i is None,
          None if i is None else "%d vs %d events; #%d: got %r want %r" % (
              len(got), len(want), i, got[i] if i < len(got) else None,
              want[i] if i < len(want) else None))


def il_text(evs):
    """The text and the thinking of a normalised event list, whatever the dialect."""
    s = json.dumps([d for _, d in evs])
    return s


def il_post(port, path, body, headers=None, rcvbuf=None, pause=None, close_after=None,
            timeout=40):
    """POST on a raw socket; (status, dechunked body). pause: a function awaited (bounded)
    once the head and some body arrived, before reading on (the socket unread meanwhile);
    close_after: close the socket once the body holds that many content deltas."""
    b = json.dumps(body).encode()
    h = ["POST %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port,
         "Content-Type: application/json", "Content-Length: %d" % len(b), "Connection: close"]
    h += ["%s: %s" % kv for kv in (headers or {}).items()]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    buf = b""
    try:
        s.sendall(("\r\n".join(h) + "\r\n\r\n").encode() + b)
        end = time.time() + timeout
        paused = pause is None
        while time.time() < end:
            try:
                d = s.recv(1024 if not paused else 65536)
            except socket.timeout:
                break
            if not d:
                break
            buf += d
            if not paused and b"\r\n\r\n" in buf and len(buf.partition(b"\r\n\r\n")[2]) > 0:
                paused = True
                pause()
            if close_after is not None and buf.count(b'"content":"') >= close_after:
                return None, buf
    finally:
        s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    first = head.split(b"\r\n")[0].split()
    status = int(first[1]) if len(first) > 1 else 0
    if b"transfer-encoding: chunked" in head.lower():
        rest = H.dechunk(rest)
    return status, rest


def il_stream(px, dialect, model, text="hi", extra=None, **kw):
    path, mk, hd = IL_DIALECTS[dialect]
    if path is None:
        path = "/v1beta/models/%s:streamGenerateContent?alt=sse" % model
    body = mk(model, text)
    body.update(extra or {})
    return il_post(px.port, path, body, hd, **kw)


class IlCompanion:
    """A streaming run kept open on the proxy's HTTP/2 connection (its scenario: il_comp,
    quiet after one delta; il_tick, five more deltas 0.2 s apart first)."""

    def __init__(self, px, fake, scen):
        self.fake, self.scen = fake, scen
        self.seen = threading.Event()
        self.ticks = 0
        self.sock = socket.create_connection(("127.0.0.1", px.port), timeout=90)
        b = json.dumps({"model": "scenario:" + scen, "stream": True,
                        "messages": [{"role": "user", "content": "companion"}]}).encode()
        self.sock.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                           % (px.port, len(b))).encode() + b)
        self.th = threading.Thread(target=self._read)
        self.th.start()
        self.ok = self.seen.wait(20)

    def _read(self):
        buf = b""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    return
                buf += d
                self.ticks = buf.count(b"tick")
                if b"companion" in buf:
                    self.seen.set()
        except OSError:
            return

    def stop(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.th.join(10)


class IlCompanions:
    """Two streaming runs kept open and quiet on the proxy's HTTP/2 connection, so that the
    runs started next to them are never alone on it and the connection's I/O thread reads
    it. The first, alone when it starts, reads the connection itself (it leads) until its
    current wait ends (at most a second); the second's five deltas after its first show the
    I/O thread has the read role once one of them is consumed there (reads_total rises)."""

    def __init__(self, px, fake):
        self.fake = fake
        r0, _ = il_counts(px)
        self.a = IlCompanion(px, fake, "il_comp")
        self.b = IlCompanion(px, fake, "il_tick") if self.a.ok else None
        self.ok = bool(self.b and self.b.ok and H.wait_for(
            lambda: il_counts(px)[0] > r0 and self.b.ticks >= 5, 20))

    def stop(self):
        for c in (self.a, self.b):
            if c:
                c.stop()
        # their upstream streams are gone (reset by the proxy) before the next run: that one
        # may be alone on the connection again
        H.wait_for(lambda: not any(r["stream"].get("ended") in (None, "running")
                                   for r in il_run_of(self.fake, "il_comp")
                                   + il_run_of(self.fake, "il_tick")), 10)


def il_proxy(fake, name):
    return H.Proxy(fake.dir, name, fake.url(), fake.ca, TOKEN, extra_env={
        "CURSOR_OAI_TRANSPORT": "h2", "CURSOR_OAI_IDLE_TIMEOUT": "120",
        "CURSOR_OAI_SILENCE_TIMEOUT": "120", "CURSOR_OAI_HOLLOW_TIMEOUT": "60"})


def il_one(px, dialect, model, extra=None):
    """One streaming run: (status, events, SSE problems, reads, handbacks)."""
    r0, h0 = il_counts(px)
    st, raw = il_stream(px, dialect, model, extra=extra)
    r1, h1 = il_counts(px)
    ev, bad = il_events(raw)
    return st, ev, bad, r1 - r0, h1 - h0


def il_run_of(fake, scen):
    return [r for r in fake.runs() if r.get("scenario") == scen]


def il_cases():
    """(dialect, scenario, extra request fields): 1. every dialect's streaming writer with
    text and thinking deltas; 2. what only the run's thread does, after deltas the I/O thread
    wrote (the tool call last: its held run stays on the connection)."""
    out = [(d, scen, None) for d in ("chat", "responses", "messages", "gemini")
           for scen in ("il_text", "il_think")]
    return out + [("chat", "il_race", None), ("chat", "il_kv", None),
                  ("chat", "il_trailer", None), ("messages", "il_trailer", None),
                  ("chat", "il_badframe", None), ("messages", "il_badframe", None),
                  ("chat", "il_tool", {"tools": IL_WEATHER})]


def il_outputs(fake, px):
    """Each case alone on the connection (its own thread reads: the path as before), then
    next to the companions (the I/O thread writes its deltas): the same events."""
    alone = [il_one(px, d, "scenario:" + scen, extra) for d, scen, extra in il_cases()]
    comps = IlCompanions(px, fake)
    try:
        check("io_thread: the companion runs stream, the I/O thread reads their connection",
              comps.ok)
        shared = [il_one(px, d, "scenario:" + scen, extra) for d, scen, extra in il_cases()]
        il_slow_client(fake, px)
        il_close(fake, px)
    finally:
        comps.stop()
    for (d, scen, extra), a, b in zip(il_cases(), alone, shared):
        lab = "io_thread %s %s" % (d, scen)
        st0, ev0, bad0, dr0, _ = a
        st1, ev1, bad1, dr, dh = b
        eq("%s: 200 both times, well-formed SSE" % lab, (st0, st1, bad0, bad1),
           (200, 200, [], []))
        eq("%s: alone, its own thread read it (reads +%d)" % (lab, dr0), dr0, 0)
        if scen in ("il_text", "il_think"):
            check("%s: the I/O thread wrote the deltas (reads +%d)" % (lab, dr), dr >= 4,
                  (dr, dh))
        else:
            # (an error trailer ends the HTTP/2 stream: that goes to the run's thread directly)
            check("%s: the I/O thread wrote deltas, then woke the run's thread (reads +%d, "
                  "handbacks +%d)" % (lab, dr, dh),
                  dr >= 2 and (dh >= 1 or scen == "il_trailer"), (dr, dh))
        il_same(lab, ev1, ev0)
        if scen in ("il_text", "il_think"):
            blob = il_text(ev0)
            check("%s: ... which hold every delta" % lab, all(
                json.dumps(t)[1:-1] in blob for t in
                (IL_TEXT if scen == "il_text" else IL_THINK + IL_TEXT[:4])), blob[:600])
            continue
        blob = il_text(ev1)
        if scen == "il_race":
            got = "".join(((x or {}).get("choices") or [{}])[0].get("delta", {}).get("content")
                          or "" for _, x in ev1 if isinstance(x, dict))
            eq("%s: every delta, also those right behind a handed-back frame" % lab, got,
               "".join("a%d b%d c%d d%d " % (i, i, i, i) for i in range(60)))
        if scen == "il_kv":
            want = "".join(IL_TEXT)
            got = "".join(((x or {}).get("choices") or [{}])[0].get("delta", {}).get("content")
                          or "" for _, x in ev1 if isinstance(x, dict))
            eq("%s: every delta, before and after the KV and request_context the proxy "
               "answered" % lab, got, want)
            runs = il_run_of(fake, "il_kv")
            check("%s: the fake got the KV and exec answers" % lab, len(runs) >= 2 and all(
                r.get("kv_replies") and r.get("exec_replies") for r in runs[-2:]),
                [(r.get("kv_replies"), r.get("exec_replies")) for r in runs])
        elif scen == "il_trailer":
            check("%s: the deltas, then the error in the dialect's shape" % lab,
                  "il boom" in blob and json.dumps(IL_TEXT[3])[1:-1] in blob
                  and (('"type": "error"' in blob) if d == "messages" else
                       ('"error": {' in blob)), blob[-600:])
        elif scen == "il_badframe":
            check("%s: the deltas, then upstream_protocol_error 'bad upstream framing'" % lab,
                  "bad upstream framing" in blob and json.dumps(IL_TEXT[3])[1:-1] in blob,
                  blob[-600:])
        elif scen == "il_tool":
            calls = [c for _, x in ev1 if isinstance(x, dict)
                     for c in ((x.get("choices") or [{}])[0].get("delta", {})
                               .get("tool_calls") or [])]
            fins = [((x.get("choices") or [{}])[0]).get("finish_reason") for _, x in ev1
                    if isinstance(x, dict) and x.get("choices")]
            check("%s: the deltas, then the tool call get_weather {city: Oslo}, finish "
                  "tool_calls" % lab, json.dumps(IL_TEXT[4])[1:-1] in blob and calls
                  and calls[0].get("function", {}).get("name") == "get_weather"
                  and json.loads("".join(c.get("function", {}).get("arguments") or ""
                                         for c in calls) or "{}") == {"city": "Oslo"}
                  and "tool_calls" in fins, (calls, fins))


def il_slow_client(fake, px):
    """3. a client that does not read while 6 MB of deltas arrive: its socket fills, the
    I/O thread leaves the rest in c->wpend and wakes the run's thread; every byte arrives,
    in order, once"""
    seen = {}
    r0, h0 = il_counts(px)

    def pause():
        # the client reads nothing until the I/O thread handed the stream back (only a
        # full socket does that while text deltas arrive), then Cursor ends the answer
        seen["wake"] = H.wait_for(lambda: il_counts(px)[1] > h0, 20)
        seen["reads"] = il_counts(px)[0] - r0
        # the client reads on; the fake's hold is released once it has begun (after the
        # last delta)
        rel.start()
    rel = threading.Thread(target=lambda: H.wait_for(
        lambda: fake.ctl("/release", {}).get("h2_streams", 0) >= 1, 30, step=0.2))
    st, raw = il_stream(px, "chat", "scenario:il_big", rcvbuf=4096, pause=pause,
                        timeout=60)
    if rel.is_alive():
        rel.join(30)
    ev = H.parse_sse(raw)
    check("slow client: the I/O thread wrote deltas, then handed the stream back while the "
          "client did not read (reads +%s)" % seen.get("reads"),
          seen.get("wake") and seen.get("reads", 0) >= 1, seen)
    eq("slow client: 200, well-formed", (st, ev["bad"], ev["done"]), (200, [], True))
    want = "".join(IL_BIG)
    got = ev["content"]
    i = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
    check("slow client: every delta arrived, in order, once (%d of %d chars)"
          % (len(got), len(want)), got == want,
          "first difference at %s: %r" % (i, got[i - 10:i + 40] if i is not None else got[-60:]))


def il_close(fake, px):
    """4. a client that closes while the I/O thread writes its deltas: the stream is reset
    at once, the other run on the connection goes on"""
    out = {}
    resets0 = counters(fake).get("h2_client_resets", 0)
    th = threading.Thread(target=lambda: out.update(
        other=il_stream(px, "chat", "scenario:il_other", timeout=40)))
    th.start()
    r0, _ = il_counts(px)
    st, _ = il_stream(px, "chat", "scenario:il_long", close_after=6)
    t0 = time.time()
    reads = il_counts(px)[0] - r0
    gone = H.wait_for(lambda: any(r["stream"].get("ended") == "client_closed"
                                  for r in il_run_of(fake, "il_long")), 10)
    dt = time.time() - t0
    th.join(40)
    check("close: the I/O thread was writing the deltas (reads +%d)" % reads, reads >= 3, reads)
    check("close: the upstream stream of the closed run was cancelled within 3 s (%.2f s)" % dt,
          gone and dt < 3, il_run_of(fake, "il_long"))
    check("close: ... with RST_STREAM", counters(fake).get("h2_client_resets", 0) > resets0,
          counters(fake))
    st, raw = out.get("other") or (0, b"")
    ev = H.parse_sse(raw)
    eq("close: the other run on the connection answered whole",
       (st, ev["content"], ev["finish"], ev["bad"]),
       (200, "".join("o%d " % i for i in range(30)), ["stop"], []))


def il_held(fake):
    """5. a held run (tool loop) over HTTP/2 next to a companion: the follow-up's deltas are
    written by the I/O thread"""
    px = H.cursor_mode_proxy(fake.dir, "ilheld", fake.url(), fake.ca, TOKEN, extra_env={
        "CURSOR_OAI_TRANSPORT": "h2", "CURSOR_OAI_IDLE_TIMEOUT": "120",
        "CURSOR_OAI_SILENCE_TIMEOUT": "120", "CURSOR_OAI_HOLLOW_TIMEOUT": "60"})
    comp = None
    try:
        comp = IlCompanions(px, fake)
        check("held: the companion runs stream, the I/O thread reads their connection",
              comp.ok)
        msgs = [{"role": "user", "content": "read it"}]
        st, b, _ = px.request("POST", "/v1/chat/completions", {
            "model": "scenario:il_held", "messages": msgs, "tools": READ_TOOL}, timeout=60)
        m = (json.loads(b).get("choices") or [{}])[0].get("message", {}) if st == 200 else {}
        calls = m.get("tool_calls") or []
        if not check("held: the run asked for a read", st == 200 and calls, (st, b[:300])):
            return
        msgs = msgs + [{"role": "assistant", "content": m.get("content"), "tool_calls": calls}]
        msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "IL-SECRET"}
                 for c in calls]
        r0, _ = il_counts(px)
        st, raw = il_post(px.port, "/v1/chat/completions", {
            "model": "scenario:il_held", "messages": msgs, "tools": READ_TOOL, "stream": True})
        reads = il_counts(px)[0] - r0
        ev = H.parse_sse(raw)
        want = "".join("f%d " % i for i in range(10))
        check("held: the follow-up streamed the result and every delta after it",
              st == 200 and ev["content"].startswith("GOT:") and "IL-SECRET" in ev["content"]
              and ev["content"].endswith(want) and ev["finish"] == ["stop"] and not ev["bad"],
              (st, ev["content"], ev["finish"], ev["bad"]))
        check("held: ... its deltas written by the I/O thread (reads +%d)" % reads, reads >= 8,
              reads)
        eq("held: one upstream run for the loop (held, not replayed)",
           len(il_run_of(fake, "il_held")), 1)
    finally:
        if comp:
            comp.stop()
        px.stop()


def t_io_thread(fake):
    for k, v in IL_SCEN.items():
        fake.ctl("/scenario", {"name": k, "scenario": v})
    reset(fake)
    px = il_proxy(fake, "iothread")
    try:
        il_outputs(fake, px)
        eq("io_thread: no protocol errors", errors(fake), [])
    finally:
        px.stop()
    il_held(fake)
    eq("io_thread held: no protocol errors", errors(fake), [])


TOKEN = None


def main():
    global TOKEN
    only, keep = S.options()
    tmp = S.make_tmp()
    TOKEN = pb.make_jwt({"sub": "auth0|h2", "exp": int(time.time()) + 7200, "type": "session"})
    fake = px = None
    try:
        fake = H.Fake(tmp, SCEN, TOKEN)
        fake.dir = tmp
        px = H.Proxy(tmp, "main", fake.url(), fake.ca, TOKEN,
                     extra_env={"CURSOR_OAI_TRANSPORT": "auto"})
        S.sections([("mux", lambda: t_mux(fake, px)), ("goaway", lambda: t_goaway(fake, px)),
                    ("rst", lambda: t_rst(fake, px)), ("stall", lambda: t_stall(fake, px)),
                    ("bad_frames", lambda: t_bad_frames(fake, px)),
                    ("window", lambda: t_window(fake, px)),
                    ("held_window", lambda: t_held_window(fake)),
                    ("header_list", lambda: t_header_list(fake)),
                    ("fallback", lambda: t_fallback(fake)), ("ping", lambda: t_ping(fake)),
                    ("doctor", lambda: t_doctor(fake)), ("fds", lambda: t_fds(fake)),
                    ("agent_url", lambda: t_agent_url(fake)),
                    ("flood", lambda: t_flood(fake)),
                    ("io_thread", lambda: t_io_thread(fake))], only)
    finally:
        if px:
            px.stop()
        if fake:
            fake.stop()
        code = S.finish(keep)
    return code


if __name__ == "__main__":
    sys.exit(main())
