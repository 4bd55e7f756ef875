#!/usr/bin/python3
"""bounds_test.py - no hang and no unbounded memory (deadlines, caps, signals): build/cursor-oai
between raw loopback sockets
and the fake Cursor upstream (tests/fake/fake_cursor.py, real TLS), one check per item:

  models    a stale model list is served at once while GetUsableModels trickles (1); the
            background fetch ends at the overall call deadline; a cold-start request gives up
            after CURSOR_OAI_MODELS_WAIT; no run for clients that left while waiting; a flood
            of 1xx heads and an endless body are cut
  append    an endless seqno-0 BidiAppend answer ends at the call deadline (3)
  flood     a heartbeat flood: the idle timeout and the client check still run (3)
  body      a body trickled byte by byte ends at the body deadline (4); 400 rejected
            connections at once all read a 503 (4); idle keep-alive connections free their
            slots under pressure (4)
  signals   SIGHUP and SIGQUIT end streams with an error event and [DONE] (5)
  memory    a non-streaming answer over CURSOR_OAI_MAX_RESPONSE_MB -> 502 saying to stream
            (6); request bytes over CURSOR_OAI_MAX_INFLIGHT_MB -> 503 + Retry-After, and the
            peak RSS of one big request (7)
  model     a model name over 127 bytes -> 400 naming `model` (8)
  auth      cursor-agent's auth.json is never renewed; a NUL in a token; login through a
            symlinked config dir; a blank CURSOR_OAI_API_KEY; invalid UTF-8 in MCP
            arguments (9)

Each check prints the figure it measures. Deadlines are made short through the environment so
the whole suite stays bounded (ROBUST_BUDGET_S, default 200 s). Env: CURSOR_OAI_BIN (default
build/cursor-oai), ROBUST_ONLY=a,b runs only these sections, ROBUST_KEEP=1 keeps the temp dir.
Prints `RESULT <passed> <failed>` last."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
sys.path.insert(0, HERE)
import harness as H  # noqa: E402
from harness import pb  # noqa: E402
from faults_test import Raw, req_bytes, err_of, chat_body  # noqa: E402

BUDGET_S = float(os.environ.get("ROBUST_BUDGET_S", "200"))
MIB = 1024 * 1024
T_START = time.time()

# sections run in threads of their own (S.section_run): each line carries its section
S = H.Suite("bounds", limit=1200)
check, note = S.check, S.note


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def timed(f, *a, **kw):
    t0 = time.time()
    try:
        r = f(*a, **kw)
    except OSError as e:
        r = e
    return r, time.time() - t0


def plain(proxy, model, content="hi", timeout=20, **kw):
    """Non-streaming chat -> (status, body, headers); (0, repr, {}) when the socket failed."""
    try:
        return proxy.request("POST", "/v1/chat/completions",
                             chat_body(model, content, False, **kw), timeout=timeout)
    except OSError as e:
        return 0, repr(e).encode(), {}


def sse(proxy, model, content="hi", timeout=20, **kw):
    st, hd, b, _ = H.stream_chat(proxy.port, chat_body(model, content, True, **kw), timeout)
    return st, hd or {}, b, H.parse_sse(b) if st == 200 else None


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def new_proxy(tmp, fake, token, name, env=None, args=None):
    return H.Proxy(tmp, name, fake.url(), fake.ca, token, extra_env=env, args=args)


SCENARIOS = {
    "hold_window": {"h2_hold_window": True},
    # text, then heartbeats as fast as the fake can write them (no progress, no output)
    "hb_flood": {"steps": [
        {"op": "text", "text": "before the flood"},
        {"op": "flood", "steps": [{"op": "heartbeat"}], "batch": 8192, "max_s": 30}]},
    "hb_flood2": {"steps": [
        {"op": "text", "text": "before the flood"},
        {"op": "flood", "steps": [{"op": "heartbeat"}], "batch": 8192, "max_s": 30}]},
    "stall_after_text": {"steps": [{"op": "text", "text": "partial"},
                                   {"op": "stall", "max_s": 30}]},
    "big_answer": {"steps": [{"op": "text", "text": "0123456789abcdef", "repeat": MIB // 4},
                             {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "mcp_bad_utf8": {"steps": [
        {"op": "exec", "kind": "mcp", "id": 2, "exec_id": "exec-0002",
         "tool_name": "get_weather", "args": {"days": 3},
         "args_raw_hex": {"location": "546f6b796fff2063c3"}, "tool_call_id": "toolu_01XYZ"},
        {"op": "stall", "max_s": 10}]},
}


def set_slow(fake, **spec):
    fake.ctl("/config", {"slow": spec or None})


def counters(fake):
    return fake.state()["counters"]


# ---------------------------------------------------------------------------------------------
# 1. model list

def t_models(tmp, fake, token):
    env = {"CURSOR_OAI_MODELS_TTL": "1", "CURSOR_OAI_UPSTREAM_TIMEOUT": "3",
           "CURSOR_OAI_MODELS_WAIT": "2"}
    p = new_proxy(tmp, fake, token, "models", env)
    try:
        st, b, _ = p.get("/v1/models")
        check("warm-up: /v1/models 200", st == 200, b[:200])
        set_slow(fake, models={"mode": "trickle", "interval_s": 0.5, "max_s": 20})
        time.sleep(1.3)                       # the cached list is now stale
        c0 = counters(fake).get("slow_models", 0)
        with ThreadPoolExecutor(11) as ex:
            futs = [ex.submit(timed, plain, p, "scenario:default", timeout=10)
                    for _ in range(10)]
            futs.append(ex.submit(timed, p.request, "GET", "/v1/models", None, None, 10))
            res = [f.result() for f in futs]
        worst = max(dt for _, dt in res)
        note("stale list + GetUsableModels trickling 1 byte / 0.5 s: 10 chats and /v1/models "
             "answered, slowest %.2f s" % worst)
        check("stale-while-revalidate: 10 chats + /v1/models all 200 within 3 s",
              all(not isinstance(r, OSError) and r[0] == 200 for r, _ in res) and worst < 3,
              [(r[0] if not isinstance(r, OSError) else repr(r), round(dt, 2)) for r, dt in res])
        # the refresh itself ends at the overall deadline (3 s), not with the trickle (20 s)
        ok = H.wait_for(lambda: counters(fake).get("slow_models_ms"), 8)
        ms = counters(fake).get("slow_models_ms")
        note("trickled GetUsableModels cut after %s ms (CURSOR_OAI_UPSTREAM_TIMEOUT=3)" % ms)
        check("the trickling fetch ends at the overall deadline (< 4.5 s)",
              ok and ms < 4500, ms)
        check("  ... one fetch for all those requests",
              counters(fake).get("slow_models", 0) - c0 == 1,
              counters(fake).get("slow_models", 0) - c0)
        # a silent answer on a pooled connection: the call times out at its deadline and is
        # not sent again on a new connection (that would only double the wait)
        set_slow(fake, models={"mode": "silent", "max_s": 10})
        time.sleep(1.3)
        c0 = counters(fake).get("slow_models", 0)
        st, b, _ = p.get("/v1/models")
        time.sleep(4.5)
        n = counters(fake).get("slow_models", 0) - c0
        note("silent GetUsableModels on a pooled connection: %d request(s) in 4.5 s "
             "(CURSOR_OAI_UPSTREAM_TIMEOUT=3)" % n)
        check("a timed-out call is not retried (1 request), the stale list still served",
              n == 1 and st == 200, (n, st))
    finally:
        set_slow(fake)
        p.stop()

    # cold start, silent upstream list: the chat goes on without it after MODELS_WAIT
    set_slow(fake, models={"mode": "silent", "max_s": 20})
    p = new_proxy(tmp, fake, token, "models-cold", env)
    try:
        (st, b, _), dt = timed(plain, p, "scenario:default", timeout=15)
        note("cold start, silent GetUsableModels: chat answered after %.2f s" % dt)
        check("cold start: a chat waits at most CURSOR_OAI_MODELS_WAIT (2 s) for the list, "
              "then runs with the name as given", st == 200 and dt < 3.5, (st, dt, b[:200]))
        (st, b, _), dt = timed(p.request, "GET", "/v1/models", None, None, 15)
        e = err_of(b) or {}
        note("cold start, silent GetUsableModels: /v1/models %d after %.2f s: %s"
             % (st, dt, e.get("message")))
        check("cold start: /v1/models answers 504 within 4 s", st == 504 and dt < 4,
              (st, dt, b[:200]))
    finally:
        p.stop()

    # cold start, trickling list that ends after 4 s: 5 clients leave after 0.5 s
    set_slow(fake, models={"mode": "trickle", "interval_s": 0.5, "max_s": 4})
    env2 = dict(env, CURSOR_OAI_MODELS_WAIT="30", CURSOR_OAI_UPSTREAM_TIMEOUT="30")
    p = new_proxy(tmp, fake, token, "models-gone", env2)
    try:
        fake.ctl("/scenario", {"name": "gone_marker", "scenario": {"steps": [
            {"op": "text", "text": "x"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]}})
        socks = []
        for i in range(5):
            r = Raw(p.port)
            r.send(req_bytes("POST", "/v1/chat/completions", p.port,
                             chat_body("scenario:gone_marker", "gone %d" % i, False)))
            socks.append(r)
        time.sleep(0.5)
        for r in socks:
            r.close()
        time.sleep(6)                          # the list arrives (as a failure) after 4 s
        runs = [x for x in fake.runs() if x["scenario"] == "gone_marker"]
        note("5 clients left while the first model list was being fetched: %d run(s) started"
             % len(runs))
        check("no run is started for a client that left while waiting", len(runs) == 0,
              [x["stream"] for x in runs])
    finally:
        set_slow(fake)
        p.stop()

    # 1xx heads without end; a body without end
    for mode, what in (("interim", "100 Continue every 0.1 s"), ("endless", "an endless body")):
        set_slow(fake, models={"mode": mode, "interval_s": 0.1, "max_s": 20})
        p = new_proxy(tmp, fake, token, "models-" + mode,
                      dict(env, CURSOR_OAI_MODELS_WAIT="15", CURSOR_OAI_UPSTREAM_TIMEOUT="15"))
        try:
            (st, b, _), dt = timed(p.request, "GET", "/v1/models", None, None, 20)
            e = err_of(b) or {}
            note("GetUsableModels answering with %s: /v1/models %d after %.2f s: %s"
                 % (what, st, dt, e.get("message")))
            check("GetUsableModels with %s: 502 within 10 s (not the 15 s deadline)" % what,
                  st == 502 and dt < 10, (st, dt, b[:200]))
        finally:
            set_slow(fake)
            p.stop()


# ---------------------------------------------------------------------------------------------
# 3. BidiAppend deadline, heartbeat flood

def t_append(tmp, fake, token):
    if H.TRANSPORT == "h2":
        return t_append_h2(tmp, fake, token)
    set_slow(fake, append0={"mode": "trickle", "interval_s": 0.5, "max_s": 25})
    p = new_proxy(tmp, fake, token, "append", {"CURSOR_OAI_UPSTREAM_TIMEOUT": "3",
                                               "CURSOR_OAI_IDLE_TIMEOUT": "60"})
    try:
        (st, hd, b, s), dt = timed(sse, p, "scenario:default", timeout=15)
        e = err_of(b) or {}
        note("seqno-0 BidiAppend answer trickling: stream request got %d after %.2f s: %s"
             % (st, dt, e.get("message")))
        check("trickling BidiAppend answer: 504 at the overall deadline (3 s; < 10 s, the "
              "trickle lasts 25 s)", st == 504 and dt < 10, (st, dt, b[:300]))
    finally:
        set_slow(fake)
        p.stop()


def t_append_h2(tmp, fake, token):
    """HTTP/2 has no BidiAppend call: the run request is the Run stream's first message. Its
    counterpart of an append whose answer never ends is a stream whose window stays closed
    from the first byte, with a prompt bigger than the initial window: the run request can
    never go out whole, and the run ends at the call deadline."""
    fake.ctl("/config", {"runsse_scenario": "hold_window"})
    p = new_proxy(tmp, fake, token, "append", {"CURSOR_OAI_UPSTREAM_TIMEOUT": "3",
                                               "CURSOR_OAI_IDLE_TIMEOUT": "60"})
    try:
        (st, hd, b, s), dt = timed(sse, p, "scenario:default", "W" * 200000, timeout=20)
        e = err_of(b) or {}
        note("run request held by a closed HTTP/2 window: stream request got %d after %.2f s: "
             "%s" % (st, dt, e.get("message")))
        check("run request held by a closed HTTP/2 window: 504 at the overall deadline (3 s; "
              "< 10 s, the idle timeout is 60 s)", st == 504 and dt < 10, (st, dt, b[:300]))
        check("  ... the fake held that stream's window", counters(fake).get(
            "h2_hold_window_streams", 0) >= 1, counters(fake))
    finally:
        fake.ctl("/config", {"runsse_scenario": None})
        p.stop()


def t_flood(tmp, fake, token):
    p = new_proxy(tmp, fake, token, "flood", {"CURSOR_OAI_IDLE_TIMEOUT": "3",
                                              "CURSOR_OAI_KEEPALIVE": "60"})
    try:
        (st, hd, b, s), dt = timed(sse, p, "scenario:hb_flood", timeout=20)
        note("heartbeat flood, idle timeout 3 s: stream ended after %.2f s with %s"
             % (dt, json.dumps(s["errors"][:1]) if s else b[:100]))
        check("heartbeat flood: the idle timeout still ends the run (< 6 s), in-band error "
              "+ [DONE]", st == 200 and s and s["errors"] and s["done"] and dt < 6,
              (st, dt, s and s["errors"]))
        # the client leaves in the middle of a flood: the upstream connection must close
        r = Raw(p.port)
        r.send(req_bytes("POST", "/v1/chat/completions", p.port,
                         chat_body("scenario:hb_flood2", "x", True)))
        r.read_until(b"before the flood", 10)
        time.sleep(0.3)
        t0 = time.time()
        r.close()

        def ended():
            rs = [x["stream"] for x in fake.runs() if x["scenario"] == "hb_flood2"]
            return rs and rs[0].get("ended") not in (None, "running")
        ok = H.wait_for(ended, 10)
        dt = time.time() - t0
        note("heartbeat flood: the client left; upstream stream closed after %.2f s" % dt)
        check("heartbeat flood: a client that leaves is noticed within 2.5 s", ok and dt < 2.5,
              dt)
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# 4. slots

def t_body(tmp, fake, token):
    p = new_proxy(tmp, fake, token, "body", {"CURSOR_OAI_BODY_TIMEOUT": "3"})
    try:
        r = Raw(p.port, timeout=20)
        body = json.dumps(chat_body("scenario:default")).encode()
        r.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % (p.port, len(body))).encode())
        t0 = time.time()
        st = 0
        for i in range(len(body) - 1):      # one byte a second, never the last one
            r.send(body[i:i + 1])
            if r.read_until(b"\r\n\r\n", 1.0):
                break
            if time.time() - t0 > 10:
                break
        st, hd, b = r.response(timeout=1) if r.buf else (0, {}, b"")
        dt = time.time() - t0
        r.close()
        note("body trickled at 1 byte/s, CURSOR_OAI_BODY_TIMEOUT=3: %s after %.2f s" % (st, dt))
        check("a trickled body ends with 408 at the whole-body deadline (< 5 s)",
              st == 408 and dt < 5, (st, dt))
    finally:
        p.stop()


def t_reject(tmp, fake, token):
    p = new_proxy(tmp, fake, token, "reject", args=["--max-conns", "1"])
    hold = None
    try:
        # the one slot: a body that is still coming. The start-up health check's connection
        # may still hold the slot for a moment after its client closed it; `hold` is then
        # refused itself (seen once under load: the slot came free during the burst and one
        # client of it got a 200), so it is opened again until the proxy has seated it.
        def seat():
            nonlocal hold
            if hold is not None:
                hold._recv(time.time() + 0.05)      # refused meanwhile?
            if hold is None or hold.buf or hold.eof:
                if hold:
                    hold.close()
                hold = Raw(p.port)
                hold.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                           % p.port).encode())
            try:                # a probe is refused only once the slot is taken ...
                with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
                    s.sendall(req_bytes("GET", "/health", p.port))
                    if not s.recv(12).startswith(b"HTTP/1.1 503"):
                        return False
            except OSError:
                return False
            hold._recv(time.time() + 0.5)   # ... and `hold` must not have been refused
            return not hold.buf and not hold.eof
        check("the held request has the one slot (a probe gets 503, the held one does not)",
              H.wait_for(seat, 10, 0.1))
        n = 400
        socks = []
        t0 = time.time()
        for _ in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
                s.sendall(req_bytes("GET", "/health", p.port))
                socks.append(s)
            except OSError:
                socks.append(None)
        got = {"503": 0, "reset": 0, "other": 0}
        others = []
        for s in socks:
            if s is None:
                got["reset"] += 1
                continue
            data = b""
            try:
                s.settimeout(5)
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    data += d
            except OSError:
                pass
            s.close()
            if data.startswith(b"HTTP/1.1 503") and b"Retry-After" in data:
                got["503"] += 1
            elif not data:
                got["reset"] += 1
            else:
                got["other"] += 1
                others.append(data[:120])
        note("%d connections at once over --max-conns 1: %s (%.2f s)%s"
             % (n, got, time.time() - t0, " other: %r" % others[:3] if others else ""))
        check("past 256 concurrent rejections every client still reads a 503 with "
              "Retry-After", got["503"] == n, got)
    finally:
        if hold:
            hold.close()
        p.stop()


def t_keepalive(tmp, fake, token):
    p = new_proxy(tmp, fake, token, "keepalive", args=["--max-conns", "4"])
    conns = []
    try:
        for _ in range(4):
            c = p.conn(10)
            c.request("GET", "/health")
            c.getresponse().read()
            conns.append(c)
        t0 = time.time()
        ok = H.wait_for(lambda: p.get("/health")[0] == 200, 30, step=0.25)
        dt = time.time() - t0
        note("4 idle keep-alive connections on --max-conns 4: a new client served after "
             "%.2f s" % dt)
        check("idle keep-alive connections give their slots up under pressure (< 20 s, not "
              "75 s)", ok and dt < 20, dt)
    finally:
        for c in conns:
            c.close()
        p.stop()
    # without pressure the keep-alive connection stays usable
    p = new_proxy(tmp, fake, token, "keepalive2", args=["--max-conns", "64"])
    try:
        c = p.conn(10)
        c.request("GET", "/health")
        c.getresponse().read()
        time.sleep(3.5)
        try:
            c.request("GET", "/health")
            st = c.getresponse().status
        except (OSError, Exception) as e:  # noqa: B014
            st = repr(e)
        c.close()
        check("without slot pressure an idle keep-alive connection is kept (3.5 s)", st == 200,
              st)
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# 5. signals

def t_signals(tmp, fake, token):
    for sig in (signal.SIGHUP, signal.SIGQUIT):
        name = signal.Signals(sig).name
        p = new_proxy(tmp, fake, token, "sig-" + name, {"CURSOR_OAI_IDLE_TIMEOUT": "60"})
        try:
            res = {}

            def go():
                res["r"] = sse(p, "scenario:stall_after_text", timeout=30)
            th = threading.Thread(target=go)
            th.start()
            H.wait_for(lambda: any(x["scenario"] == "stall_after_text" and not x["stream"].get(
                "ended") for x in fake.runs()), 5)
            time.sleep(0.5)
            t0 = time.time()
            os.kill(p.proc.pid, sig)
            th.join(25)
            dt = time.time() - t0
            st, hd, b, s = res.get("r", (0, {}, b"", None))
            try:
                rc = p.proc.wait(15)
            except subprocess.TimeoutExpired:
                rc = None
            note("%s during a stream: stream ended after %.2f s with %s; exit status %s"
                 % (name, dt, json.dumps(s["errors"][:1]) if s else b[:80], rc))
            check("%s: the stream ends with an error event and [DONE], the server exits 0"
                  % name, st == 200 and s and s["errors"] and s["done"] and rc == 0,
                  (st, s and s["errors"], s and s["done"], rc, b[-200:]))
        finally:
            p.stop()


    # started under nohup (SIGHUP ignored): that choice stands
    try:
        p = H.Proxy(tmp, "nohup", fake.url(), fake.ca, token,
                    preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    except RuntimeError as e:
        check("under nohup (SIGHUP ignored by the parent) SIGHUP leaves the server running",
              False, e)
        return
    proc, port = p.proc, p.port
    try:
        def health():
            c = socket.create_connection(("127.0.0.1", port), timeout=2)
            c.sendall(req_bytes("GET", "/health", port))
            d = c.recv(100)
            c.close()
            return d.startswith(b"HTTP/1.1 200")
        up = H.wait_for(health, 10)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        check("under nohup (SIGHUP ignored by the parent) SIGHUP leaves the server running",
              up and proc.poll() is None and H.wait_for(health, 10), proc.poll())
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# 6, 7. memory

def t_memory(tmp, fake, token):
    p = new_proxy(tmp, fake, token, "replycap", {"CURSOR_OAI_MAX_RESPONSE_MB": "1"})
    try:
        h0 = hwm_kib(p.proc.pid)
        (st, b, hd), dt = timed(plain, p, "scenario:big_answer", timeout=30)
        e = err_of(b) or {}
        note("4 MiB non-streaming answer, CURSOR_OAI_MAX_RESPONSE_MB=1: %d after %.2f s, peak "
             "RSS %d -> %d KiB: %s" % (st, dt, h0, hwm_kib(p.proc.pid), e.get("message")))
        check("non-streaming answer over the cap: 502 that says to stream",
              st == 502 and "stream" in (e.get("message") or ""), (st, b[:300]))
        st, hd, b, s = sse(p, "scenario:big_answer", timeout=30)
        check("  ... the same answer streamed: 200, all of it",
              st == 200 and s and len(s["content"]) == 4 * MIB and s["done"],
              (st, s and len(s["content"])))
    finally:
        p.stop()

    p = new_proxy(tmp, fake, token, "budget", {"CURSOR_OAI_MAX_INFLIGHT_MB": "1"})
    hold = None
    try:
        # A holds 900,000 bytes of the 1 MiB budget while its body is still coming
        big = json.dumps(chat_body("scenario:default", "a" * 899000, False)).encode()
        hold = Raw(p.port, timeout=20)
        hold.send(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % (p.port, len(big))).encode() + big[:1000])
        # Nothing shows when the proxy has read A's head and reserved its body (no log line,
        # no metric), and on a loaded machine that can take longer than any fixed pause: a
        # B sent before it is rightly admitted (200, alone in the budget), so send B until
        # it meets the reservation, for at most 15 s (A's body deadline is further off)
        body_b = chat_body("scenario:default", "b" * 400000, False)
        tries, end = 0, time.time() + 15
        while True:
            time.sleep(0.3)
            tries += 1
            st, b, hd = p.request("POST", "/v1/chat/completions", body_b, timeout=10)
            if st != 200 or time.time() > end:
                break
        e = err_of(b) or {}
        note("1 MiB in-flight budget, 0.9 MB held: a 0.4 MB request got %d Retry-After %s "
             "(try %d): %s" % (st, hd.get("retry-after"), tries, e.get("message")))
        check("request bytes over the in-flight budget: 503 with Retry-After",
              st == 503 and hd.get("retry-after"), (st, hd, b[:200]))
        hold.send(big[1000:])
        st, hd, b = hold.response(timeout=20)
        check("  ... the request holding the budget completes (200)", st == 200, (st, b[:200]))
        # the budget is given back once the server has finished with the request, which can
        # be a moment after its client read the answer: a retry within the Retry-After second
        # (what a client is told to do) must get in
        for _ in range(5):
            st, b, hd = p.request("POST", "/v1/chat/completions", body_b, timeout=20)
            if st != 503:
                break
            time.sleep(0.25)
        check("  ... and once it is done the other one is admitted (200, within a second)",
              st == 200, (st, b[:200]))
    finally:
        if hold:
            hold.close()
        p.stop()

    # the cost of one big request: peak RSS growth over the body size
    p = new_proxy(tmp, fake, token, "rss", {"CURSOR_OAI_IDLE_TIMEOUT": "60",
                                            "CURSOR_OAI_MAX_PROMPT_BYTES": str(16 * MIB)})
    try:
        size = 4 * MIB
        body = chat_body("scenario:default", "x" * size, False)
        p.request("GET", "/health")
        h0 = hwm_kib(p.proc.pid)
        st, b, hd = p.request("POST", "/v1/chat/completions", body, timeout=60)
        h1 = hwm_kib(p.proc.pid)
        ratio = (h1 - h0) * 1024.0 / size
        note("one %d MiB request: peak RSS %d -> %d KiB, %.2f x the body (issue: about 5.7 x)"
             % (size // MIB, h0, h1, ratio))
        check("one big request costs at most 4 x its size in peak RSS (was 6 x)",
              st == 200 and ratio < 4.0, (st, ratio, b[:200]))
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# 8. model names

def t_model(tmp, fake, token, proxy):
    name = "\u00e9" * 64            # 128 bytes, 64 characters
    st, b, hd = plain(proxy, name)
    e = err_of(b) or {}
    note("model name of 128 bytes: %d %s param=%s" % (st, e.get("message"), e.get("param")))
    check("model name over 127 bytes: 400 naming `model`",
          st == 400 and e.get("param") == "model", (st, b[:300]))
    st, hd, b, s = sse(proxy, name)
    e = err_of(b) or {}
    check("  ... streaming too (400 before the stream starts)",
          st == 400 and e.get("param") == "model", (st, b[:300]))


# ---------------------------------------------------------------------------------------------
# 9. credentials and small things

def cli_env(home, fake, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
                "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION})
    env.update(extra or {})
    return env


def write_json(path, obj, raw=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(raw if raw is not None else json.dumps(obj).encode())
    os.chmod(path, 0o600)


def jwt(exp_in, sub="auth0|robust"):
    return pb.make_jwt({"sub": sub, "exp": int(time.time()) + exp_in, "type": "session"})


def t_auth(tmp, fake, token):
    # cursor-agent's file only, token expired: renewed in memory through /oauth/token (its
    # refresh token does not rotate), never through /auth/refresh, and its file is never written
    home = os.path.join(tmp, "home-agent")
    agent = os.path.join(home, ".config", "cursor", "auth.json")
    rt = "rt_robust_agent"
    fake.ctl("/config", {"refresh_tokens": [rt]})
    c0 = counters(fake).get("refresh_calls", 0)
    o0 = counters(fake).get("oauth_calls", 0)
    write_json(agent, {"accessToken": jwt(-60), "refreshToken": rt})
    before = open(agent, "rb").read()
    p = H.Proxy(tmp, "agent2", fake.url(), fake.ca, "", extra_env={
        "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config")})
    try:
        st, b, hd = plain(p, "scenario:default")
        e = err_of(b) or {}
        calls = counters(fake).get("refresh_calls", 0) - c0
        ocalls = counters(fake).get("oauth_calls", 0) - o0
        note("only cursor-agent's auth.json, token expired: %d, %d /oauth/token and %d "
             "/auth/refresh call(s): %s" % (st, ocalls, calls, e.get("message")))
        check("cursor-agent's expired login is renewed in memory by one /oauth/token call "
              "(chat 200), never by /auth/refresh", st == 200 and ocalls == 1 and calls == 0,
              (st, ocalls, calls, b[:300]))
        check("  ... cursor-agent's file untouched", open(agent, "rb").read() == before)
        check("  ... no file of ours written",
              not os.path.exists(os.path.join(home, ".config", "cursor-oai", "auth.json")))
    finally:
        p.stop()

    # a raw NUL inside a token: refused, never cut short
    home = os.path.join(tmp, "home-nul")
    ours = os.path.join(home, ".config", "cursor-oai", "auth.json")
    good = token
    raw = b'{"accessToken": "' + good.encode() + b'\x00garbage", "refreshToken": "rt_x"}'
    write_json(ours, None, raw)
    p = H.Proxy(tmp, "nul", fake.url(), fake.ca, "", extra_env={
        "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config")})
    try:
        st, b, hd = plain(p, "scenario:default")
        log = H.wait_log(p.proc.log_path, lambda t: "NUL" in t)
        note("auth.json with a NUL inside the access token: chat %d; log: %s"
             % (st, [ln for ln in log.splitlines() if "NUL" in ln][:1]))
        check("a NUL inside a token is refused (chat 401, the log says NUL), not cut short",
              st == 401 and "NUL" in log, (st, b[:200]))
    finally:
        p.stop()

    # login through a symlinked config directory that is not ours to chmod
    home = os.path.join(tmp, "home-link")
    shared = os.path.join(tmp, "shared-config")
    os.makedirs(shared)
    os.chmod(shared, 0o755)
    os.makedirs(os.path.join(home, ".config"))
    os.symlink(shared, os.path.join(home, ".config", "cursor-oai"))
    out = subprocess.run(H.proxy_cmd() + ["login", "--api-key", "key_robust"], env=cli_env(home, fake),
                         capture_output=True, text=True, timeout=30)
    mode = os.stat(shared).st_mode & 0o777
    note("login through a symlinked config dir: exit %d, target mode %o"
         % (out.returncode, mode))
    check("login leaves a symlinked config directory's mode alone (0755 stays 0755)",
          mode == 0o755, (mode, out.stdout[-300:], out.stderr[-300:]))
    check("  ... and the login is saved, mode 0600",
          out.returncode == 0 and os.path.exists(os.path.join(shared, "auth.json")) and
          os.stat(os.path.join(shared, "auth.json")).st_mode & 0o777 == 0o600, out.stderr)

    # a renewal call that hangs: the auth call has the same overall deadline
    home = os.path.join(tmp, "home-slowauth")
    ours = os.path.join(home, ".config", "cursor-oai", "auth.json")
    rt2 = "rt_robust_slowauth"
    fake.ctl("/config", {"refresh_tokens": [rt2], "refresh_delay_s": 12.0})
    write_json(ours, {"accessToken": jwt(-60), "refreshToken": rt2})
    p = H.Proxy(tmp, "slowauth", fake.url(), fake.ca, "", extra_env={
        "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "CURSOR_OAI_UPSTREAM_TIMEOUT": "3"})
    try:
        (st, b, hd), dt = timed(plain, p, "scenario:default", timeout=20)
        e = err_of(b) or {}
        note("token renewal answered after 12 s, CURSOR_OAI_UPSTREAM_TIMEOUT=3: %d after %.2f s:"
             " %s" % (st, dt, e.get("message")))
        check("a hanging renewal call (/oauth/token) ends at the overall deadline (3 s; 503 "
              "within 9 s, the renewal answers after 12 s)", st == 503 and dt < 9,
              (st, dt, b[:200]))
    finally:
        fake.ctl("/config", {"refresh_delay_s": 0.0})
        p.stop()

    # a blank client key
    port = H.free_port()
    env = cli_env(os.path.join(tmp, "home-blank"), fake, {"CURSOR_OAI_API_KEY": "  ",
                                                          "CURSOR_ACCESS_TOKEN": token})
    os.makedirs(env["HOME"], exist_ok=True)
    try:
        out = subprocess.run(H.proxy_cmd() + ["serve", "--listen", "127.0.0.1:%d" % port], env=env,
                             capture_output=True, text=True, timeout=5)
        rc, err = out.returncode, out.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = None, (e.stderr or b"").decode(errors="replace")
    note("CURSOR_OAI_API_KEY='  ': exit %s: %s" % (rc, err.strip()[-200:]))
    check("a blank CURSOR_OAI_API_KEY is refused with a message naming it",
          rc not in (None, 0) and "CURSOR_OAI_API_KEY" in err, (rc, err[-300:]))


def t_mcp(tmp, fake, token, proxy):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"},
                                         "days": {"type": "number"}}}}}]
    st, b, hd = plain(proxy, "scenario:mcp_bad_utf8", tools=tools)
    j = jload(b) or {}
    args = None
    try:
        args = j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    except (KeyError, IndexError, TypeError):
        pass
    note("MCP arguments with invalid UTF-8: %d %s" % (st, args if args else b[:200]))
    check("invalid UTF-8 in MCP arguments is repaired with U+FFFD (200, valid JSON)",
          st == 200 and args and "\ufffd" in (jload(args) or {}).get("location", ""),
          (st, b[:300]))


# ---------------------------------------------------------------------------------------------

def run_section(name, fn, *a):
    if ONLY and name not in ONLY:
        return
    S.section_run(name, lambda: fn(*a))


ONLY = [x for x in os.environ.get("ROBUST_ONLY", "").split(",") if x]


def on_alarm(signum, frame):
    S.section = "budget"
    check("suite within its %d s" % BUDGET_S, False, "over it")
    H.cleanup()
    S.result()
    os._exit(1)


def main():
    if S.binary_missing():
        return 0
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(BUDGET_S))
    tmp = S.make_tmp()
    token = pb.make_jwt({"sub": "auth0|robust", "exp": int(time.time()) + 7200,
                         "type": "session"})
    try:
        # Two fakes: sections that reconfigure slow answers get their own.
        # a big prompt takes the (Python) fake a while to decode on a loaded machine
        fake = H.Fake(tmp, SCENARIOS, token, config={"client_version": H.CLIENT_VERSION,
                                                     "append_wait_s": 60.0})
        tmp2 = os.path.join(tmp, "slowfake")
        os.makedirs(tmp2)
        slow = H.Fake(tmp2, SCENARIOS, token, config={"client_version": H.CLIENT_VERSION})
        # an idle timeout well above the harness's 2 s: the fake is one Python process, and
        # the parallel memory section keeps it busy decoding a 4 MiB prompt (seen: the mcp
        # section's exec frame came after 2 s, a 504)
        proxy = new_proxy(tmp, fake, token, "main", env={"CURSOR_OAI_IDLE_TIMEOUT": "20"})
        serial = [("models", t_models, tmp2, slow, token),
                  ("append", t_append, tmp2, slow, token)]
        par = [("flood", t_flood, tmp, fake, token), ("body", t_body, tmp, fake, token),
               ("reject", t_reject, tmp, fake, token),
               ("keepalive", t_keepalive, tmp, fake, token),
               ("signals", t_signals, tmp, fake, token),
               ("memory", t_memory, tmp, fake, token),
               ("model", t_model, tmp, fake, token, proxy),
               ("auth", t_auth, tmp, fake, token),
               ("mcp", t_mcp, tmp, fake, token, proxy)]
        bg = threading.Thread(target=lambda: [run_section(*x) for x in serial])
        bg.start()
        with ThreadPoolExecutor(3) as ex:
            list(ex.map(lambda x: run_section(*x), par))
        bg.join(max(1, BUDGET_S - (time.time() - T_START) - 5))
        S.section = "final"
        check("main proxy still running", proxy.proc.poll() is None,
              H.tail(proxy.proc.log_path))
    except Exception:
        S.section = "setup"
        check("suite ran", False, traceback.format_exc())
    finally:
        H.cleanup()
        signal.alarm(0)
        note("total %.1f s" % (time.time() - T_START))
        code = S.finish(bool(os.environ.get("ROBUST_KEEP")))
    return code


if __name__ == "__main__":
    sys.exit(main())
