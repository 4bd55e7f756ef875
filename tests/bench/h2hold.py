#!/usr/bin/python3
"""A bench-only HTTP/2 agent host for `./build.sh bench --hold-big N`: many held Run streams.

The test fake (tests/fake/fake_cursor.py) gives every HTTP/2 stream a thread and checks every
message in depth; on a 2-core machine it cannot keep 10,000 Run streams open while the proxy
sends them 2,000 heartbeats a second (its PING answers came too late and the runs failed).
This host does one thing, for the memory-per-stream figure: it serves
`/agent.v1.AgentService/Run` over TLS + HTTP/2 on one asyncio loop (python3-h2, as the fake),
answers each Run request with one text delta ("held"), holds the stream open until POST
/release, then sends " done", the turn's end and Connect's end-stream message. It checks what
it can afford to check on every stream (path, content type, connect-protocol-version, a bearer
token, Connect envelopes that are neither compressed nor end-stream from the client), records
anything else as an error, PINGs each connection every --ping-s seconds and records the slowest
acknowledgement. The fake still serves every unary call; the proxy is pointed here with
CURSOR_OAI_AGENT_URL.

Control (plain HTTP on 127.0.0.1, the fake's shape): GET /state, POST /reset, POST /release,
POST /shutdown. Usage: h2hold.py --cert-dir DIR --info FILE [--max-streams 100]
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
CT = "application/connect+proto"
HELD = pb.envelope(pb.m_text("held"))
DONE = pb.envelope(pb.m_text(" done")) + pb.envelope(pb.m_turn_ended()) + pb.end_stream({})


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
                  "client_resets": 0, "released": 0}
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
            S.error("a connection without h2 in ALPN")
        self.h.initiate_connection()
        self.flush()
        if self.ping_s > 0:
            self.ticker = asyncio.get_running_loop().create_task(self.ping_loop())

    def connection_lost(self, exc):
        S.conns.discard(self)
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
            S.reset()
            S.active = sum(1 for c in S.conns for st in c.streams.values() if st.open)
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
    global STOP
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert-dir", required=True)
    ap.add_argument("--info", required=True)
    ap.add_argument("--max-streams", type=int, default=100)
    ap.add_argument("--ping-s", type=float, default=10.0)
    a = ap.parse_args()
    STOP = asyncio.Event()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(a.cert_dir, "server.pem"),
                        os.path.join(a.cert_dir, "server.key"))
    ctx.set_alpn_protocols(["h2"])
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
