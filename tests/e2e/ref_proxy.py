#!/usr/bin/python3
"""Reference stand-in for build/cursor-oai, used ONLY to validate the e2e harness itself before the
C binary exists (and to tell harness bugs from proxy bugs later):

    E2E_PROXY_CMD='["/usr/bin/python3", "tests/e2e/ref_proxy.py"]' tests/e2e_run.sh

It implements the same contract as the real binary in the simplest blocking way (one upstream
run per request, no pooling, no refresh): `serve --listen 127.0.0.1:PORT`, env CURSOR_API_URL,
SSL_CERT_FILE, CURSOR_ACCESS_TOKEN, CURSOR_CLIENT_VERSION, CURSOR_OAI_IDLE_TIMEOUT,
CURSOR_OAI_KEEPALIVE. Not a product: stdlib only, no limits worth the name."""

import http.client
import json
import math
import os
import select
import socket
import ssl
import sys
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fake"))
import pbwire as pb  # noqa: E402

API = urllib.parse.urlsplit(os.environ.get("CURSOR_API_URL", "https://api2.cursor.sh"))
TOKEN = os.environ.get("CURSOR_ACCESS_TOKEN", "")
VERSION = os.environ.get("CURSOR_CLIENT_VERSION", "cli-unknown")
IDLE = float(os.environ.get("CURSOR_OAI_IDLE_TIMEOUT", "300"))
KEEPALIVE = float(os.environ.get("CURSOR_OAI_KEEPALIVE", "15"))
CTX = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
CTX.maximum_version = ssl.TLSVersion.TLSv1_2
PORT = 0


class Fail(Exception):
    def __init__(self, status, message, etype="upstream_error", code=None, no_retry=False):
        Exception.__init__(self, message)
        self.status, self.message, self.etype, self.code = status, message, etype, code
        self.no_retry = no_retry


def up():
    return http.client.HTTPSConnection(API.hostname, API.port or 443, context=CTX, timeout=30)


def headers(rid, agent=True):
    h = {"authorization": "Bearer " + TOKEN,
         "content-type": "application/grpc-web+proto" if agent else "application/json",
         "user-agent": "connect-es/1.4.0", "x-cursor-checksum": pb.checksum(TOKEN),
         "x-cursor-client-version": VERSION, "x-cursor-client-type": "cli",
         "x-cursor-timezone": "UTC", "x-ghost-mode": "true", "x-request-id": rid}
    if agent:
        h["x-cursor-streaming"] = "true"
    return h


def tls_guard(fn):
    try:
        return fn()
    except ssl.SSLCertVerificationError as e:
        raise Fail(502, "upstream TLS verification failed: %s" % e.verify_message,
                   code="upstream_tls_verification_failed", no_retry=True)
    except (ssl.SSLError, OSError) as e:
        raise Fail(502, "upstream connection failed: %s" % e)


def models():
    def go():
        c = up()
        h = headers(str(uuid.uuid4()), False)
        h.update({"accept": "application/json", "connect-protocol-version": "1"})
        c.request("POST", "/aiserver.v1.AiService/GetUsableModels", body=b"{}", headers=h)
        r = c.getresponse()
        b = r.read()
        c.close()
        return json.loads(b).get("models", []) if r.status == 200 else []
    try:
        return tls_guard(go)
    except (Fail, ValueError):
        return []


def prompt_of(messages):
    def text(c):
        if isinstance(c, str):
            return c
        if isinstance(c, list):
            return "\n".join(p.get("text", "") for p in c if p.get("type") == "text")
        return ""
    parts = []
    sys_t = [text(m.get("content")) for m in messages if m.get("role") == "system"]
    if sys_t:
        parts.append("\n".join(sys_t))
    for m in messages:
        r, t = m.get("role"), text(m.get("content"))
        if r == "user":
            parts.append("User: " + t)
        elif r == "assistant" and m.get("tool_calls"):
            d = "\n".join("[Called tool: %s(%s)]" % (x["function"]["name"],
                                                      x["function"]["arguments"])
                          for x in m["tool_calls"])
            parts.append("Assistant: " + (t + "\n" + d if t else d))
        elif r == "assistant" and t:
            parts.append("Assistant: " + t)
        elif r == "tool":
            parts.append("[Tool result for %s]: %s" % (m.get("tool_call_id"), t))
    if any(m.get("role") == "tool" for m in messages):
        parts.append("\nBased on the tool results above, please continue your response:")
    return "\n\n".join(parts)


def tool_call_of(ex, tools):
    """ExecServerMessage fields -> (name, arguments) or None."""
    for fn, wt, v in pb.parse(ex):
        if wt != 2:
            continue
        a = pb.parse(v)
        s = lambda n: pb.text(pb.last(a, n, 2, b"")) or ""  # noqa: E731
        if fn in (2, 14):
            name, args = "bash", {"command": s(1), "description": "Execute shell command: "
                                  + s(1)[:60]}
            if s(2):
                args["cwd"] = s(2)
        elif fn == 7:
            name, args = "read", {"filePath": s(1)}
        elif fn == 8:
            name, args = "list", {"path": s(1)}
        elif fn == 5:
            name, args = ("glob", {"pattern": s(3), "path": s(2)}) if s(3) else (
                "grep", {"pattern": s(1), "path": s(2)})
        elif fn == 3:
            name, args = "write", {"filePath": s(1), "content": s(2)}
        elif fn == 11:
            name, args = s(5), {}
            for f2, w2, ent in a:
                if f2 == 2:
                    e = pb.parse(ent)
                    args[pb.text(pb.last(e, 1, 2, b""))] = pb.value_to_json(pb.last(e, 2, 2, b""))
        else:
            continue
        return (name, json.dumps(args, separators=(",", ":"))) if name in tools else None
    return None


class Run:
    """One upstream run; yields ('text'|'reasoning'|'tool'|'end'|'tick', value)."""

    def __init__(self, model, prompt, tools):
        self.rid = str(uuid.uuid4())
        self.tools = tools
        self.seq = 0
        self.blobs = {}
        msg = pb.c_run_request(prompt, model, str(uuid.uuid4()), str(uuid.uuid4()), tools,
                               cwd=os.getcwd())

        def start():
            self.a = up()
            self.a.request("POST", "/agent.v1.AgentService/RunSSE", headers=headers(self.rid),
                           body=pb.envelope(pb.c_bidi_request_id(self.rid)))
            self.b = up()
            self.append(msg)
            status, body = self.read_head()
            if status != 200:
                raise Fail(401 if status == 401 else 502, "SSE stream failed: %d - %s"
                           % (status, body[:200].decode("utf-8", "replace")))
        tls_guard(start)

    # The RunSSE body is read straight from the TLS socket (select + pending) so that waiting
    # for data with a timeout never corrupts a buffered HTTP reader.
    def recv(self, timeout):
        s = self.a.sock
        if s.pending() == 0:
            r, _, _ = select.select([s], [], [], timeout)
            if not r:
                raise socket.timeout()
        s.settimeout(30)
        return s.recv(65536)

    def read_head(self):
        self.raw = b""
        while b"\r\n\r\n" not in self.raw:
            d = self.recv(30)
            if not d:
                raise Fail(502, "upstream closed before the response headers")
            self.raw += d
        head, self.raw = self.raw.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hd = dict((l.split(":", 1)[0].strip().lower(), l.split(":", 1)[1].strip())
                  for l in lines[1:] if ":" in l)
        self.chunked = hd.get("transfer-encoding", "").lower() == "chunked"
        self.left = None if self.chunked else int(hd.get("content-length", "-1"))
        self.eof = False
        body = b""
        if status != 200:
            end = time.time() + 5
            while not self.eof and time.time() < end:
                try:
                    body += self.read_body(5)
                except (socket.timeout, OSError, Fail):
                    break
        return status, body

    def read_body(self, timeout):
        """Next decoded body bytes; b"" at the end of the body."""
        while True:
            if self.eof:
                return b""
            if not self.chunked:
                if self.raw:
                    d, self.raw = self.raw, b""
                    return d
                d = self.recv(timeout)
                if not d:
                    self.eof = True
                return d
            if self.left is None or self.left == 0:
                if self.left == 0:
                    if len(self.raw) < 2:
                        self._more(timeout)
                        continue
                    self.raw = self.raw[2:]
                    self.left = None
                    continue
                if b"\r\n" not in self.raw:
                    self._more(timeout)
                    continue
                line, self.raw = self.raw.split(b"\r\n", 1)
                n = int(line.split(b";")[0], 16)
                if n == 0:
                    self.eof = True
                    return b""
                self.left = n
            if not self.raw:
                self._more(timeout)
                continue
            d = self.raw[:self.left]
            self.raw = self.raw[len(d):]
            self.left -= len(d)
            return d

    def _more(self, timeout):
        d = self.recv(timeout)
        if not d:
            raise Fail(502, "upstream connection closed mid-body", code="upstream_truncated")
        self.raw += d

    def append(self, msg):
        self.b.request("POST", "/aiserver.v1.BidiService/BidiAppend", headers=headers(self.rid),
                       body=pb.envelope(pb.c_bidi_append(msg, self.rid, self.seq)))
        self.seq += 1
        r = self.b.getresponse()
        body = r.read()
        if r.status != 200:
            raise Fail(401 if r.status == 401 else 502, "BidiAppend failed: %d - %s"
                       % (r.status, body[:200].decode("utf-8", "replace")))

    def close(self):
        for c in (getattr(self, "a", None), getattr(self, "b", None)):
            if c is not None:
                try:
                    if c.sock is not None:
                        c.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()

    def events(self):
        buf = b""
        last = time.time()
        while True:
            try:
                d = self.read_body(KEEPALIVE)
            except socket.timeout:
                if time.time() - last >= IDLE:
                    raise Fail(504, "upstream idle for %gs" % IDLE, code="upstream_timeout")
                yield "tick", None
                continue
            except (OSError, ValueError) as e:
                raise Fail(502, "upstream stream broken: %r" % e, code="upstream_truncated")
            if not d:
                raise Fail(502, "upstream ended the stream without finishing the turn",
                           code="upstream_truncated")
            last = time.time()
            buf += d
            while len(buf) >= 5:
                flags, ln = buf[0], int.from_bytes(buf[1:5], "big")
                if ln > 16 << 20:
                    raise Fail(502, "upstream frame of %d bytes exceeds the limit" % ln,
                               code="upstream_protocol_error")
                if flags not in (0, 2, 0x80):
                    raise Fail(502, "upstream frame flags 0x%02x" % flags,
                               code="upstream_protocol_error")
                if len(buf) - 5 < ln:
                    break
                payload, buf = buf[5:5 + ln], buf[5 + ln:]
                if flags == 0x80:
                    t = pb.parse_trailer(payload)
                    st = int(t.get("grpc-status", "0"))
                    msg = urllib.parse.unquote(t.get("grpc-message", ""))
                    if st == 8:
                        raise Fail(429, "You've hit your usage limit", "insufficient_quota",
                                   "insufficient_quota", True)
                    if st == 16:
                        raise Fail(401, msg, "authentication_error")
                    if st:
                        raise Fail(502, "%s (grpc-status %d)" % (msg, st))
                    continue
                if flags == 2:
                    j = json.loads(payload or b"{}")
                    if j.get("error"):
                        raise Fail(502, "upstream error: %s" % j["error"].get("message"))
                    yield "end", None
                    return
                for ev in self.frame(payload):
                    yield ev
                    if ev[0] in ("end", "tool"):
                        return

    def frame(self, payload):
        for fn, wt, v in pb.parse(payload):
            if fn == 1 and wt == 2:
                for k, _, body in pb.parse(v):
                    if k == 1:
                        yield "text", pb.text(pb.last(pb.parse(body), 1, 2, b""))
                    elif k == 4:
                        yield "reasoning", pb.text(pb.last(pb.parse(body), 1, 2, b""))
                    elif k == 14:
                        yield "end", None
            elif fn == 4 and wt == 2:
                kv = pb.parse(v)
                kid = pb.last(kv, 1, 0, 0)
                sb, gb = pb.last(kv, 3, 2), pb.last(kv, 2, 2)
                if sb is not None:
                    a = pb.parse(sb)
                    self.blobs[pb.last(a, 1, 2, b"")] = pb.last(a, 2, 2, b"")
                    self.append(pb.c_kv_set_result(kid))
                elif gb is not None:
                    self.append(pb.c_kv_get_result(kid, self.blobs.get(
                        pb.last(pb.parse(gb), 1, 2, b""))))
            elif fn == 2 and wt == 2:
                tc = tool_call_of(v, self.tools)
                if tc:
                    yield "tool", tc


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, status, obj, extra=None):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b)

    def err(self, status, msg, etype="invalid_request_error", code=None, extra=None):
        self.send_json(status, {"error": {"message": msg, "type": etype, "param": None,
                                          "code": code}}, extra)

    def host_ok(self):
        h = (self.headers.get("Host") or "").lower()
        if h in ("127.0.0.1:%d" % PORT, "localhost:%d" % PORT, "127.0.0.1", "localhost"):
            return True
        self.err(403, "forbidden host", code="forbidden_host")
        return False

    def do_GET(self):
        if not self.host_ok():
            return
        p = self.path.split("?")[0]
        if p in ("/health", "/"):
            return self.send_json(200, {"status": "ok"})
        if p in ("/v1/models", "/models"):
            now = int(time.time())
            data = []
            for m in models():
                n = (m.get("displayName") or "").lower()
                o = ("anthropic" if any(x in n for x in ("claude", "opus", "sonnet")) else
                     "openai" if "gpt" in n else "google" if "gemini" in n else
                     "xai" if "grok" in n else "cursor")
                data.append({"id": m.get("displayModelId") or m.get("modelId"),
                             "object": "model", "created": now, "owned_by": o})
            return self.send_json(200, {"object": "list", "data": data})
        if p in ("/v1/chat/completions", "/chat/completions"):
            return self.err(405, "method not allowed", extra={"Allow": "POST"})
        self.err(404, "Unknown endpoint: GET " + p, code="unknown_url")

    def do_POST(self):
        if not self.host_ok():
            return
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        p = self.path.split("?")[0]
        if p not in ("/v1/chat/completions", "/chat/completions"):
            return self.err(404 if p not in ("/v1/models", "/health") else 405, "unknown")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            return self.err(415, "Content-Type must be application/json")
        try:
            req = json.loads(raw)
            msgs = req["messages"]
            assert isinstance(msgs, list) and msgs
        except (ValueError, KeyError, AssertionError, TypeError):
            return self.err(400, "Invalid JSON body")
        resolve = {}
        for m in models():
            for k in [m.get("modelId"), m.get("displayModelId")] + (m.get("aliases") or []):
                if k:
                    resolve[k] = m.get("modelId") or m.get("displayModelId")
        model = resolve.get(req.get("model") or "auto", req.get("model") or "auto")
        tools = [t["function"]["name"] for t in req.get("tools") or []]
        prompt = prompt_of(msgs)
        stream = bool(req.get("stream"))
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        state = {"committed": False, "content": "", "reasoning": ""}

        def chunk(delta, finish=None, **kw):
            c = {"id": cid, "object": "chat.completion.chunk", "created": created,
                 "model": model, "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]}
            c.update(kw)
            self.wfile.write(b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n")
            self.wfile.flush()

        def commit():
            if stream and not state["committed"]:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                chunk({"role": "assistant"})
            state["committed"] = True

        run = None
        try:
            run = Run(model, prompt, tools)
            for kind, val in run.events():
                if kind == "tick":
                    if state["committed"] and stream:
                        self.wfile.write(b": keepalive\n\n")
                        self.wfile.flush()
                    continue
                if kind in ("text", "reasoning") and val:
                    state[{"text": "content", "reasoning": "reasoning"}[kind]] += val
                    if stream:
                        commit()
                        chunk({"content" if kind == "text" else "reasoning_content": val})
                elif kind == "tool":
                    tid = "call_" + uuid.uuid4().hex[:12]
                    if stream:
                        commit()
                        chunk({"tool_calls": [{"index": 0, "id": tid, "type": "function",
                                               "function": {"name": val[0],
                                                            "arguments": val[1]}}]})
                        chunk({}, "tool_calls")
                        self.wfile.write(b"data: [DONE]\n\n")
                    else:
                        self.send_json(200, {"id": cid, "object": "chat.completion",
                                             "created": created, "model": model, "choices": [{
                                                 "index": 0, "message": {
                                                     "role": "assistant", "content": None,
                                                     "tool_calls": [{"id": tid, "type": "function",
                                                                     "function": {
                                                                         "name": val[0],
                                                                         "arguments": val[1]}}]},
                                                 "finish_reason": "tool_calls"}]})
                    return
                elif kind == "end":
                    break
            usage = {"prompt_tokens": math.ceil(len(prompt) / 4),
                     "completion_tokens": math.ceil(len(state["content"]) / 4)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if stream:
                commit()
                chunk({}, "stop", usage=usage)
                self.wfile.write(b"data: [DONE]\n\n")
            else:
                msg = {"role": "assistant", "content": state["content"]}
                if state["reasoning"]:
                    msg["reasoning_content"] = state["reasoning"]
                self.send_json(200, {"id": cid, "object": "chat.completion", "created": created,
                                     "model": model, "choices": [{"index": 0, "message": msg,
                                                                  "finish_reason": "stop"}],
                                     "usage": usage})
        except Fail as e:
            if state["committed"] and stream:
                self.wfile.write(b"data: " + json.dumps({"error": {
                    "message": e.message, "type": e.etype, "param": None, "code": e.code}})
                    .encode() + b"\n\ndata: [DONE]\n\n")
            else:
                self.err(e.status, e.message, e.etype, e.code,
                         {"x-should-retry": "false"} if e.no_retry else None)
        except (BrokenPipeError, ConnectionResetError):
            pass  # client went away; closing the run cancels the upstream
        finally:
            if run is not None:
                run.close()


def main():
    global PORT
    if len(sys.argv) < 4 or sys.argv[1] != "serve" or sys.argv[2] != "--listen":
        sys.exit("usage: ref_proxy.py serve --listen 127.0.0.1:PORT")
    host, port = sys.argv[3].rsplit(":", 1)
    PORT = int(port)
    srv = ThreadingHTTPServer((host, PORT), H)
    srv.daemon_threads = True
    srv.request_queue_size = 512
    srv.serve_forever()


if __name__ == "__main__":
    main()
