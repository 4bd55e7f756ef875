#!/usr/bin/python3
"""A bench-only agent host for `./build.sh bench --hold-big N`: many held runs, both transports.

The test fake (tests/fake/fake_cursor.py) gives every stream a thread and checks every message
in depth; on a 2-core machine it cannot keep 10,000 runs open while the proxy sends them 2,000
heartbeats a second (over HTTP/2 its PING answers came too late and the runs failed; over
HTTP/1.1 it ran at load 1,400 and lost 113 of 9,000). This host does one thing, for the
memory-per-stream figure, on one asyncio loop with TLS (the fake's certificates):
- HTTP/2 (python3-h2, as the fake): `/agent.v1.AgentService/Run`, the run request and the
  heartbeats as Connect messages on the request body;
- HTTP/1.1, the Connect profile: `RunSSE` (a chunked Connect stream) and `BidiAppend` (Connect
  unary binary; the run request is the first append of a request id, heartbeats the others).
Each run gets one text delta ("held") once its run request is in, stays open until POST
/release, then gets " done", the turn's end and Connect's end-stream message. The host checks
what it can afford to check on every request (path, content type, connect-protocol-version, a
bearer token, x-request-id, Connect envelopes neither compressed nor end-stream from the
client), records anything else as an error, PINGs each HTTP/2 connection every --ping-s seconds
and records the slowest acknowledgement. The fake still serves every other call; the proxy is
pointed here with CURSOR_OAI_AGENT_URL.

Control (plain HTTP on 127.0.0.1, the fake's shape): GET /state, POST /reset, POST /release,
POST /shutdown. Usage: holdhost.py --cert-dir DIR --info FILE [--max-streams 100]
"""
import argparse
import asyncio
import json
import os
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fake"))
import pbwire as pb  # noqa: E402

RUN_PATH = "/agent.v1.AgentService/Run"
RUNSSE_PATH = "/agent.v1.AgentService/RunSSE"
APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"
CT = "application/connect+proto"
CT_UNARY = "application/proto"
HELD = pb.envelope(pb.m_text("held"))
DONE = pb.envelope(pb.m_text(" done")) + pb.envelope(pb.m_turn_ended()) + pb.end_stream({})
ANSWER = None       # --answer-deltas N: every run answered at once (N deltas, the end), no hold


class State:
    def __init__(self):
        self.conns = set()
        self.reset()

    def reset(self):
        self.active = 0
        self.max_active = 0
        self.errors = []
        self.c = {"tls_handshakes": 0, "tls_handshake_failures": 0, "runs": 0,
                  "messages": 0, "message_bytes": 0, "pings_sent": 0, "ping_acks": 0,
                  "client_resets": 0, "released": 0, "http1_connections": 0, "appends": 0}
        self.h1_runs = {}            # x-request-id -> H1Conn holding its RunSSE
        self.ping_ack_max_s = 0.0

    def error(self, why):
        if len(self.errors) < 200:
            self.errors.append(why)

    def snapshot(self):
        return {"active_streams": self.active, "max_active_streams": self.max_active,
                "errors": list(self.errors), "counters": dict(self.c),
                "connections": len(self.conns), "ping_ack_max_s": round(self.ping_ack_max_s, 3)}


S = State()


class Stream:
    __slots__ = ("sid", "buf", "answered", "held", "open")

    def __init__(self, sid):
        self.sid = sid
        self.buf = b""
        self.answered = False
        self.held = False
        self.open = True


class Conn(asyncio.Protocol):
    def __init__(self, max_streams, ping_s):
        cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h = h2.connection.H2Connection(config=cfg)
        self.h.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams})
        self.streams = {}
        self.pending = {}           # sid -> bytes waiting for window
        self.ping_s = ping_s
        self.pings = {}
        self.tr = None
        self.ticker = None

    # -- transport -------------------------------------------------------------------------

    def connection_made(self, tr):
        self.tr = tr
        S.conns.add(self)
        S.c["tls_handshakes"] += 1
        if tr.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
            # HTTP/1.1 (RunSSE + BidiAppend): the rest of this connection is H1's
            self.h1 = H1(tr)
            self.data_received = self.h1.data_received
            self.release = self.h1.release
            return
        self.h1 = None
        self.h.initiate_connection()
        self.flush()
        if self.ping_s > 0:
            self.ticker = asyncio.get_running_loop().create_task(self.ping_loop())

    def connection_lost(self, exc):
        S.conns.discard(self)
        if self.h1:
            self.h1.lost()
            return
        if self.ticker:
            self.ticker.cancel()
        for st in self.streams.values():
            self.close_stream(st)
        self.streams.clear()

    def flush(self):
        d = self.h.data_to_send()
        if d and self.tr and not self.tr.is_closing():
            self.tr.write(d)

    async def ping_loop(self):
        n = 0
        while True:
            await asyncio.sleep(self.ping_s)
            now = time.monotonic()
            for k, t in list(self.pings.items()):
                if now - t > 10:
                    S.error("a PING left unanswered for %.1f s" % (now - t))
                    del self.pings[k]
            n += 1
            k = n.to_bytes(8, "big")
            self.pings[k] = now
            self.h.ping(k)
            S.c["pings_sent"] += 1
            self.flush()

    # -- HTTP/2 ----------------------------------------------------------------------------

    def data_received(self, data):
        try:
            events = self.h.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            S.error("HTTP/2 protocol error from the proxy: %r" % e)
            self.flush()
            self.tr.close()
            return
        for ev in events:
            self.event(ev)
        self.flush()

    def event(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            hd = dict(ev.headers)
            why = None
            if hd.get(":path") != RUN_PATH:
                why = "path %r (this host serves Run only)" % hd.get(":path")
            elif hd.get("content-type") != CT:
                why = "content-type %r" % hd.get("content-type")
            elif hd.get("connect-protocol-version") != "1":
                why = "no connect-protocol-version: 1"
            elif not hd.get("authorization", "").startswith("Bearer "):
                why = "no bearer token"
            if why:
                S.error(why)
                self.h.send_headers(ev.stream_id, [(":status", "415"),
                                                   ("content-type", "text/plain")], end_stream=True)
                return
            self.streams[ev.stream_id] = Stream(ev.stream_id)
            S.c["runs"] += 1
            S.active += 1
            S.max_active = max(S.max_active, S.active)
        elif isinstance(ev, h2.events.DataReceived):
            if ev.flow_controlled_length:
                self.h.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            st = self.streams.get(ev.stream_id)
            if st:
                st.buf += ev.data
                self.messages(st)
        elif isinstance(ev, h2.events.StreamEnded):
            st = self.streams.get(ev.stream_id)
            if st and st.buf:
                S.error("a Run request body ends inside a message")
        elif isinstance(ev, h2.events.StreamReset):
            st = self.streams.pop(ev.stream_id, None)
            if st:
                S.c["client_resets"] += 1
                self.close_stream(st)
        elif isinstance(ev, h2.events.WindowUpdated):
            self.drain()
        elif isinstance(ev, h2.events.PingAckReceived):
            t = self.pings.pop(ev.ping_data, None)
            if t is not None:
                S.c["ping_acks"] += 1
                S.ping_ack_max_s = max(S.ping_ack_max_s, time.monotonic() - t)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.tr.close()

    def messages(self, st):
        while len(st.buf) >= 5:
            n = int.from_bytes(st.buf[1:5], "big")
            if len(st.buf) < 5 + n:
                return
            flags = st.buf[0]
            st.buf = st.buf[5 + n:]
            if flags & 0x03:
                S.error("a client message with flags 0x%02x on Run" % flags)
            S.c["messages"] += 1
            S.c["message_bytes"] += 5 + n
            if not st.answered:     # the run request: headers and the first delta
                st.answered = st.held = True
                self.h.send_headers(st.sid, [(":status", "200"), ("content-type", CT)])
                if ANSWER:
                    st.held = False
                    self.send(st, ANSWER, True)
                    self.close_stream(st)
                    del self.streams[st.sid]
                    return
                self.send(st, HELD, False)

    def send(self, st, data, end):
        self.pending[st.sid] = (self.pending.get(st.sid, (b"", False))[0] + data, end)
        self.drain()

    def drain(self):
        for sid in list(self.pending):
            data, end = self.pending[sid]
            try:
                while data:
                    n = min(len(data), self.h.local_flow_control_window(sid),
                            self.h.max_outbound_frame_size)
                    if n <= 0:
                        break
                    self.h.send_data(sid, data[:n])
                    data = data[n:]
                if data:
                    self.pending[sid] = (data, end)
                    continue
                if end:
                    self.h.end_stream(sid)
            except h2.exceptions.StreamClosedError:
                pass
            del self.pending[sid]
        self.flush()

    def release(self):
        for st in list(self.streams.values()):
            if st.held:
                st.held = False
                S.c["released"] += 1
                self.send(st, DONE, True)
                self.close_stream(st)
                del self.streams[st.sid]

    def close_stream(self, st):
        if st.open:
            st.open = False
            S.active -= 1


class H1:
    """One HTTP/1.1 connection: requests one after another (keep-alive), each a RunSSE whose
    answer stays open, or a BidiAppend answered at once."""

    def __init__(self, tr):
        self.tr = tr
        self.buf = b""
        self.run = None             # (request id, answered, held) of the RunSSE open here
        S.c["http1_connections"] += 1

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 65536:
                    self.fail("a request head over 64 KiB")
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                return self.fail("request line %r" % lines[0][:60])
            hd = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hd[k.strip().lower()] = v.strip()
            if "chunked" in hd.get("transfer-encoding", "").lower():
                return self.fail("a chunked request body (the proxy sends Content-Length)")
            n = int(hd.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + n:
                return
            body = self.buf[end + 4:end + 4 + n]
            self.buf = self.buf[end + 4 + n:]
            self.request(method, path, hd, body)
            if self.tr.is_closing():
                return

    def fail(self, why):
        S.error(why)
        self.tr.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.tr.close()

    def request(self, method, path, hd, body):
        rid = hd.get("x-request-id", "")
        why = None
        if method != "POST" or path not in (RUNSSE_PATH, APPEND_PATH):
            why = "%s %s (this host serves RunSSE and BidiAppend only)" % (method, path)
        elif hd.get("content-type") != (CT if path == RUNSSE_PATH else CT_UNARY):
            why = "content-type %r on %s" % (hd.get("content-type"), path)
        elif hd.get("connect-protocol-version") != "1":
            why = "no connect-protocol-version: 1"
        elif not hd.get("authorization", "").startswith("Bearer "):
            why = "no bearer token"
        elif not rid:
            why = "no x-request-id"
        if why:
            return self.fail(why)
        if path == RUNSSE_PATH:
            if self.run:
                return self.fail("a request on a connection whose RunSSE is still open")
            if rid in S.h1_runs:
                return self.fail("a second RunSSE for request id %s" % rid)
            try:
                got = pb.dec_bidi_request_id(pb.unenvelope(body))
            except pb.PBError as e:
                return self.fail("RunSSE body: %s" % e)
            if got != rid:
                return self.fail("RunSSE request id %r, header %r" % (got, rid))
            self.run = [rid, False, True]
            S.h1_runs[rid] = self
            S.c["runs"] += 1
            S.active += 1
            S.max_active = max(S.max_active, S.active)
            self.tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + CT.encode()
                          + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
            return
        try:
            ap = pb.dec_bidi_append(body)
        except pb.PBError as e:
            return self.fail("BidiAppend body: %s" % e)
        if ap["request_id"] != rid or ap["append_seqno"] is None:
            return self.fail("BidiAppendRequest request id %r / seqno %r (header %r)"
                             % (ap["request_id"], ap["append_seqno"], rid))
        self.tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + CT_UNARY.encode()
                      + b"\r\nContent-Length: 0\r\n\r\n")
        S.c["appends"] += 1
        S.c["messages"] += 1
        S.c["message_bytes"] += len(body)
        owner = S.h1_runs.get(rid)
        if owner and not owner.run[1]:      # the run request is in: the first delta
            owner.run[1] = True
            if ANSWER:
                owner.chunk(ANSWER)
                owner.tr.write(b"0\r\n\r\n")
                owner.lost()
                return
            owner.chunk(HELD)

    def chunk(self, data):
        if not self.tr.is_closing():
            self.tr.write(b"%x\r\n%s\r\n" % (len(data), data))

    def release(self):
        if self.run and self.run[1] and self.run[2]:
            self.run[2] = False
            S.c["released"] += 1
            self.chunk(DONE)
            self.tr.write(b"0\r\n\r\n")
            self.lost()

    def lost(self):
        if self.run:
            S.h1_runs.pop(self.run[0], None)
            S.active -= 1
            self.run = None


# -- control ---------------------------------------------------------------------------------

async def control(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        method, path = line.split(" ")[:2]
        n = 0
        for h in head.split(b"\r\n")[1:]:
            if h.lower().startswith(b"content-length:"):
                n = int(h.split(b":", 1)[1])
        if n:
            await reader.readexactly(n)
        code, out = 200, {}
        if path == "/state":
            out = S.snapshot()
        elif path == "/reset" and method == "POST":
            runs = S.h1_runs
            S.reset()
            S.h1_runs = runs
            S.active = sum(1 for c in S.conns if not c.h1 for st in c.streams.values()
                           if st.open) + len(runs)
        elif path == "/release" and method == "POST":
            for c in list(S.conns):
                c.release()
            out = {"released": S.c["released"]}
        elif path == "/shutdown" and method == "POST":
            asyncio.get_running_loop().call_later(0.1, STOP.set)
        else:
            code, out = 404, {"error": "no such control path"}
        body = json.dumps(out).encode()
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % (code, len(body)) + body)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


STOP = None


async def main():
    global STOP, ANSWER
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert-dir", required=True)
    ap.add_argument("--info", required=True)
    ap.add_argument("--max-streams", type=int, default=100)
    ap.add_argument("--ping-s", type=float, default=10.0)
    ap.add_argument("--answer-deltas", type=int, default=0,
                    help="answer every run at once with this many one-character deltas and the "
                    "end, instead of holding it (a first-token figure without the fake)")
    a = ap.parse_args()
    if a.answer_deltas > 0:
        ANSWER = b"".join(pb.envelope(pb.m_text("s")) for _ in range(a.answer_deltas)) + \
            pb.envelope(pb.m_turn_ended()) + pb.end_stream({})
    STOP = asyncio.Event()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(a.cert_dir, "server.pem"),
                        os.path.join(a.cert_dir, "server.key"))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    loop = asyncio.get_running_loop()

    def on_error(lp, c):
        if isinstance(c.get("exception"), (ssl.SSLError, ConnectionError)):
            S.c["tls_handshake_failures"] += 1
            return
        lp.default_exception_handler(c)
    loop.set_exception_handler(on_error)
    srv = await loop.create_server(lambda: Conn(a.max_streams, a.ping_s), "127.0.0.1", 0,
                                   ssl=ctx, backlog=4096)
    ctl = await asyncio.start_server(control, "127.0.0.1", 0)
    info = {"port": srv.sockets[0].getsockname()[1],
            "control_port": ctl.sockets[0].getsockname()[1], "pid": os.getpid()}
    tmp = a.info + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, a.info)
    await STOP.wait()
    srv.close()
    ctl.close()


if __name__ == "__main__":
    asyncio.run(main())
