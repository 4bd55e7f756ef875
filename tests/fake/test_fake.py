#!/usr/bin/python3
"""Self-test of the fake Cursor upstream: the codec against the spec's golden vectors, then the
running server (real TLS, max TLS 1.2 like BearSSL) driven by a tiny http.client client that plays
the proxy's part. Prints RESULT <passed> <failed>."""

import base64
import errno
import http.client
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pbwire as pb  # noqa: E402
from fake_cursor import VECTORS  # noqa: E402

PASS = FAIL = 0


def check(name, cond, detail=""):
    global PASS, FAIL
    if cond:
        PASS += 1
    else:
        FAIL += 1
        print("FAIL %s %s" % (name, detail), flush=True)
    return cond


def eq(name, got, exp):
    return check(name, got == exp, "\n   got: %r\n  want: %r" % (got, exp))


# ---------------------------------------------------------------------------------------------
# 1. codec vs vectors

def test_vectors():
    with open(os.path.join(VECTORS, "server_frames.json")) as f:
        frames = {x["name"]: x for x in json.load(f)["frames"]}
    kv = frames["kv_set_blob"]["agent_server_message"]["kvServerMessage"]["setBlobArgs"]
    det = pb.rpc_status(9, "Outdated client", [(pb.ERROR_DETAILS_TYPE, pb.error_details(
        30, "Update required", "Please update Cursor to continue.", is_expected=True))])
    built = {
        "text_delta": pb.envelope(pb.m_text("Hello")),
        "text_delta_utf8": pb.envelope(pb.m_text("w\u00f6rld \U0001f30d\n")),
        "heartbeat": pb.envelope(pb.m_heartbeat()),
        "turn_ended": pb.envelope(pb.m_turn_ended()),
        "token_delta": pb.envelope(pb.m_token_delta(17)),
        "thinking_delta": pb.envelope(pb.m_thinking("Let me think.")),
        "checkpoint": pb.envelope(pb.m_checkpoint([b'{"role":"system"}'], 1234, 200000)),
        "kv_set_blob": pb.envelope(pb.m_kv_set_blob(1, base64.b64decode(kv["blobId"]),
                                                    base64.b64decode(kv["blobData"]))),
        "kv_get_blob_unknown": pb.envelope(pb.m_kv_get_blob(2, b"\x11" * 32)),
        "exec_shell_stream": pb.envelope(pb.m_exec(1, "shell_stream", pb.a_shell(
            "ls -la", "/home/user/project", 30000), "exec-0001")),
        "exec_mcp": pb.envelope(pb.m_exec(2, "mcp", pb.a_mcp(
            "get_weather", {"location": "Tokyo", "days": 3}, "toolu_01ABC"), "exec-0002")),
        "exec_read": pb.envelope(pb.m_exec(3, "read", pb.a_read(
            "/home/user/project/README.md"), "exec-0003")),
        "tool_call_started_shell": pb.envelope(pb.m_tool_call(
            "started", "call-1", "shell", pb.a_shell("ls -la"), "toolu_01ABC")),
        "trailer_ok": pb.trailer(0),
        "trailer_usage_limit": pb.trailer(8, "You've hit your usage limit"),
        "trailer_error_details": pb.trailer(9, "Outdated client", det),
    }
    for name, fr in frames.items():
        if check("vector frame %s is built" % name, name in built):
            eq("vector frame " + name, built[name].hex(), fr["frame_hex"])
    # the e2e transcripts' frames too, where our builders cover them
    e2e_dir = os.path.join(VECTORS, "e2e")
    n = 0
    for fn in sorted(os.listdir(e2e_dir)):
        with open(os.path.join(e2e_dir, fn)) as f:
            d = json.load(f)
        for fr in d.get("server_frames_sent_in_order", []):
            m = fr.get("agent_server_message")
            if m is None:
                continue
            b = from_json(m)
            if b is not None:
                n += 1
                eq("%s frame %s" % (fn, fr.get("name")), pb.envelope(b).hex(), fr["frame_hex"])
    check("e2e frames covered", n >= 20, "only %d" % n)
    # checksum
    with open(os.path.join(VECTORS, "checksum.json")) as f:
        cvs = json.load(f)["vectors"]
    old = os.environ.get("TZ")
    for v in cvs:
        os.environ["TZ"] = v["process_tz"]
        time.tzset()
        eq("checksum bucket " + v["id"], pb.checksum_bucket_ms(v["now_epoch_ms"] / 1000),
           v["intermediate"]["bucket_start_epoch_ms"])
        eq("checksum " + v["id"], pb.checksum(v["token"], v["now_epoch_ms"] / 1000),
           v["expected_checksum"])
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()
    # client messages decode
    with open(os.path.join(VECTORS, "client_messages.json")) as f:
        cms = {v["id"]: v for v in json.load(f)["vectors"]}
    d = pb.dec_client_message(bytes.fromhex(cms["kv-set-result"]["hex"]))
    eq("decode kv-set-result", (d["type"], d["kind"], d["id"], d["error"]),
       ("kv_result", "set_blob_result", 1, None))
    d = pb.dec_client_message(bytes.fromhex(cms["kv-get-result-found"]["hex"]))
    eq("decode kv-get found", (d["kind"], d["id"], d["blob_data_hex"]),
       ("get_blob_result", 2, "616263"))
    d = pb.dec_client_message(bytes.fromhex(cms["kv-get-result-missing"]["hex"]))
    eq("decode kv-get missing", (d["kind"], d["id"], d["blob_data_hex"]),
       ("get_blob_result", 3, None))
    d = pb.dec_client_message(bytes.fromhex(cms["exec-stream-close"]["hex"]))
    eq("decode stream_close", (d["type"], d["kind"], d["id"]), ("exec_control", "stream_close", 2))
    d = pb.dec_client_message(bytes.fromhex(cms["exec-shell-success"]["hex"]))
    eq("decode shell result", (d["type"], d["result"], d["variant"]),
       ("exec_result", "shell_result", "success"))
    d = pb.dec_client_message(bytes.fromhex(cms["exec-mcp-success"]["hex"]))
    eq("decode mcp result", (d["result"], d["variant"]), ("mcp_result", "success"))
    d = pb.dec_client_message(bytes.fromhex(cms["resume-action"]["hex"]))
    eq("decode resume", (d["type"], d["kind"]), ("action", "resume"))
    for vid in ("bidi-append-seq0", "bidi-append-seq1"):
        v = cms[vid]
        ap = pb.dec_bidi_append(bytes.fromhex(v["hex"]))
        eq("decode " + vid, (ap["append_seqno"], ap["request_id"], ap["data_hex"]),
           (int(v["decoded"].get("appendSeqno", 0)), v["decoded"]["requestId"]["requestId"],
            v["decoded"]["data"]))
    v = cms["bidi-request-id-envelope"]
    eq("decode BidiRequestId envelope", len(pb.dec_bidi_request_id(pb.unenvelope(
        bytes.fromhex(v["hex"])))), 36)
    eq("empty envelope", pb.envelope(b"").hex(), cms["empty-envelope"]["hex"])
    for vid in ("value-schema", "value-empty-string", "value-null"):
        v = cms[vid]
        got = pb.value_to_json(bytes.fromhex(v["hex"]))
        exp = normalise_value(v["input_json"])
        eq("decode " + vid, got, exp)
    # the run request vector
    with open(os.path.join(VECTORS, "run_request.json")) as f:
        rr = json.load(f)["vectors"][0]
    hexkey = [k for k in rr if k.endswith("hex") and isinstance(rr[k], str)][0]
    d = pb.dec_client_message(bytes.fromhex(rr[hexkey]))
    js = json.dumps(rr)
    check("run request decodes", d["type"] == "run_request" and d["has_conversation_state"]
          and d["has_request_context"] and d["model_id"] in js and d["prompt"]
          and d["prompt"][:20] in js, str(d)[:300])
    eq("run request tools == mcp_tools", [t["tool_name"] for t in d["tools"]],
       [t["tool_name"] for t in d["mcp_tools"]])
    check("run request has one tool with a schema", len(d["tools"]) == 1
          and isinstance(d["tools"][0]["input_schema"], dict), str(d["tools"])[:300])
    # strict reader
    for bad, why in (("0a05616263", "length past end"), ("08", "truncated varint"),
                     ("08ffffffffffffffffffff01", "11-byte varint"), ("0b", "group"),
                     ("00", "field 0")):
        try:
            pb.parse(bytes.fromhex(bad))
            check("strict reader rejects " + why, False)
        except pb.PBError:
            check("strict reader rejects " + why, True)
    for body, why in (("0000000005616263", "short envelope"), ("0100000000", "flags 1"),
                      ("000000", "3 bytes")):
        try:
            pb.unenvelope(bytes.fromhex(body))
            check("unenvelope rejects " + why, False)
        except pb.PBError:
            check("unenvelope rejects " + why, True)
    # round trips
    for obj in ({"a": [1, 2.5, "x", None, True, False, {"b": {}}]}, [], "s", 3):
        eq("value round trip %r" % (obj,), pb.value_to_json(pb.enc_value(obj)), obj)
    for n in (0, 1, 127, 128, 300, 2 ** 32, 2 ** 63, 2 ** 64 - 1):
        eq("varint %d" % n, pb.dec_varint(pb.enc_varint(n), 0), (n, len(pb.enc_varint(n))))


def normalise_value(j):
    """The original writes "" and null as EMPTY Values (members disappear); mirror that."""
    if isinstance(j, dict):
        return {k: normalise_value(v) for k, v in j.items() if v is not None and v != ""}
    if isinstance(j, list):
        return [None if (x is None or x == "") else normalise_value(x) for x in j]
    if j == "":
        return None
    return j


def from_json(m):
    """proto3-JSON AgentServerMessage (as in the vectors) -> bytes via our builders."""
    if "interactionUpdate" in m:
        iu = m["interactionUpdate"]
        if "textDelta" in iu:
            return pb.m_text(iu["textDelta"].get("text", ""))
        if "heartbeat" in iu:
            return pb.m_heartbeat()
        if "turnEnded" in iu:
            return pb.m_turn_ended()
        if "tokenDelta" in iu:
            return pb.m_token_delta(iu["tokenDelta"].get("tokens", 0))
        if "thinkingDelta" in iu:
            return pb.m_thinking(iu["thinkingDelta"].get("text", ""))
        for key, comp in (("toolCallStarted", False), ("toolCallCompleted", True)):
            if key in iu:
                t = iu[key]
                (tool, body), = t["toolCall"].items()
                kind = {"shellToolCall": ("shell", "shell"), "readToolCall": ("read", "read"),
                        "lsToolCall": ("ls", "ls"), "grepToolCall": ("grep", "grep"),
                        "globToolCall": ("glob", None), "mcpToolCall": ("mcp", None),
                        "editToolCall": ("edit", None)}.get(tool)
                if kind is None or kind[1] is None or set(body) - {"args"}:
                    return None
                return pb.m_tool_call("s", t.get("callId", ""), kind[0], args_from_json(
                    kind[1], body.get("args", {})), t.get("modelCallId", ""), completed=comp)
        return None
    if "conversationCheckpointUpdate" in m:
        c = m["conversationCheckpointUpdate"]
        if set(c) - {"rootPromptMessagesJson", "tokenDetails"}:
            return None
        td = c.get("tokenDetails")
        return pb.m_checkpoint([base64.b64decode(x) for x in c.get("rootPromptMessagesJson", [])],
                               td.get("usedTokens") if td else None,
                               td.get("maxTokens") if td else None)
    if "kvServerMessage" in m:
        k = m["kvServerMessage"]
        if "setBlobArgs" in k:
            a = k["setBlobArgs"]
            return pb.m_kv_set_blob(k.get("id", 0), base64.b64decode(a.get("blobId", "")),
                                    base64.b64decode(a.get("blobData", "")))
        if "getBlobArgs" in k:
            return pb.m_kv_get_blob(k.get("id", 0), base64.b64decode(
                k["getBlobArgs"].get("blobId", "")))
    if "execServerMessage" in m:
        e = dict(m["execServerMessage"])
        eid = e.pop("id", 0)
        exid = e.pop("execId", "")
        (key, args), = e.items()
        kind = {"shellArgs": "shell", "shellStreamArgs": "shell_stream", "readArgs": "read",
                "lsArgs": "ls", "grepArgs": "grep", "writeArgs": "write", "mcpArgs": "mcp",
                "requestContextArgs": "request_context"}.get(key)
        if kind is None:
            return None
        b = args_from_json(kind, args)
        return None if b is None else pb.m_exec(eid, kind, b, exid)
    return None


def args_from_json(kind, a):
    if kind in ("shell", "shell_stream"):
        if set(a) - {"command", "workingDirectory", "timeout", "toolCallId"}:
            return None
        return pb.a_shell(a.get("command", ""), a.get("workingDirectory", ""),
                          a.get("timeout", 0), a.get("toolCallId", ""))
    if kind == "read":
        return pb.a_read(a.get("path", ""), a.get("toolCallId", ""))
    if kind == "ls":
        return pb.a_ls(a.get("path", ""), a.get("ignore", []), a.get("toolCallId", ""))
    if kind == "grep":
        return pb.a_grep(a.get("pattern", ""), a.get("path"), a.get("glob"),
                         a.get("outputMode"), a.get("toolCallId", ""))
    if kind == "write":
        return pb.a_write(a.get("path", ""), a.get("fileText", ""), a.get("toolCallId", ""),
                          a.get("returnFileContentAfterWrite", False))
    if kind == "mcp":
        return pb.a_mcp(a.get("toolName", ""), a.get("args", {}), a.get("toolCallId", ""),
                        a.get("providerIdentifier", ""), a.get("name", ""))
    if kind == "request_context":
        return pb.a_request_context(a.get("notesSessionId"), a.get("workspaceId"))
    return None


# ---------------------------------------------------------------------------------------------
# 2. the running server

class Fake:
    def __init__(self, tmp):
        self.tmp = tmp
        ready = os.path.join(tmp, "ready.json")
        self.log = open(os.path.join(tmp, "fake.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "fake_cursor.py"), "--cert-dir",
             os.path.join(tmp, "certs"), "--ready-file", ready,
             "--config", json.dumps({"append_wait_s": 3.0, "kv_wait_s": 3.0})],
            stdout=subprocess.DEVNULL, stderr=self.log)
        end = time.time() + 60
        while not os.path.exists(ready):
            if time.time() > end or self.proc.poll() is not None:
                raise RuntimeError("fake did not start")
            time.sleep(0.05)
        with open(ready) as f:
            self.info = json.load(f)
        self.port = self.info["port"]

    def ctl(self, path, body=None):
        url = "http://127.0.0.1:%d%s" % (self.info["control_port"], path)
        data = json.dumps(body).encode() if body is not None else None
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        try:
            self.ctl("/shutdown", {})
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def ctx_for(ca):
    c = ssl.create_default_context(cafile=ca)
    c.maximum_version = ssl.TLSVersion.TLSv1_2   # what BearSSL speaks
    return c


class Client:
    """Plays the proxy: RunSSE + BidiAppend with the headers of spec 2.1."""

    def __init__(self, fake, token):
        self.fake = fake
        self.token = token
        self.ctx = ctx_for(fake.info["ca"])
        self.append_conn = self.conn()

    def conn(self, port=None):
        return http.client.HTTPSConnection("localhost", port or self.fake.port, context=self.ctx,
                                           timeout=20)

    def headers(self, rid, ctype="application/grpc-web+proto", **over):
        h = {"authorization": "Bearer " + self.token, "content-type": ctype,
             "user-agent": "connect-es/1.4.0", "x-cursor-checksum": pb.checksum(self.token),
             "x-cursor-client-version": "cli-2026.10.01-e373342", "x-cursor-client-type": "cli",
             "x-cursor-timezone": "UTC", "x-ghost-mode": "true", "x-cursor-streaming": "true",
             "x-request-id": rid}
        for k, v in over.items():
            k = k.replace("_", "-")
            if v is None:
                h.pop(k, None)
            else:
                h[k] = v
        return h

    def append(self, rid, msg, seqno, hdr=None, raw=None):
        body = raw if raw is not None else pb.envelope(pb.c_bidi_append(msg, rid, seqno))
        self.append_conn.request("POST", "/aiserver.v1.BidiService/BidiAppend", body=body,
                                 headers=hdr or self.headers(rid))
        r = self.append_conn.getresponse()
        return r.status, r.read()

    def run(self, model, prompt="User: hi", tools=(), on_frame=None, delay_append=0.0,
            exec_reply=None):
        """Full run. Returns dict(status, frames=[(flags, payload)], text, events, error)."""
        rid = str(uuid.uuid4())
        c = self.conn()
        c.request("POST", "/agent.v1.AgentService/RunSSE",
                  body=pb.envelope(pb.c_bidi_request_id(rid)), headers=self.headers(rid))
        # the live order: the seqno-0 append only after the RunSSE head
        r = c.getresponse()
        out = {"rid": rid, "append_status": None, "frames": [], "text": "", "thinking": "",
               "events": [], "error": None, "seq": 1, "status": r.status,
               "t_headers": time.time()}
        if r.status != 200:
            out["body"] = r.read()
            c.close()
            return out
        if delay_append:
            time.sleep(delay_append)
        out["t_append"] = time.time()
        out["append_status"], _ = self.append(rid, pb.c_run_request(prompt, model, tools=tools),
                                              0)
        fr = pb.FrameReader()
        blobs = {}
        try:
            while True:
                d = r.read1(65536)
                if not d:
                    break
                for flags, payload in fr.feed(d):
                    out["frames"].append((flags, payload))
                    self._on(out, rid, flags, payload, blobs, exec_reply)
                    if on_frame and on_frame(out, c) == "stop":
                        c.close()
                        return out
        except (http.client.IncompleteRead, OSError, ssl.SSLError) as e:
            out["error"] = repr(e)
        out["leftover"] = fr.buf
        c.close()
        return out

    def _on(self, out, rid, flags, payload, blobs, exec_reply):
        if flags & 0x80:
            out["trailer"] = pb.parse_trailer(payload)
            out["events"].append("trailer")
            return
        if flags & 0x02:
            out["end_stream"] = json.loads(payload)
            out["events"].append("end_stream")
            return
        fl = pb.parse(payload)
        for fn, wt, v in fl:
            if fn == 1:
                (k, _, body), = pb.parse(v)
                if k == 1:
                    out["text"] += pb.text(pb.last(pb.parse(body), 1, 2, b""))
                    out["events"].append("text")
                elif k == 4:
                    out["thinking"] += pb.text(pb.last(pb.parse(body), 1, 2, b""))
                    out["events"].append("thinking")
                else:
                    out["events"].append({13: "heartbeat", 14: "turn_ended", 8: "token_delta",
                                          5: "thinking_completed", 2: "tool_call_started"}
                                         .get(k, "iu%d" % k))
            elif fn == 4:
                kv = pb.parse(v)
                kid = pb.last(kv, 1, 0, 0)
                sb = pb.last(kv, 3, 2)
                gb = pb.last(kv, 2, 2)
                if sb is not None:
                    a = pb.parse(sb)
                    blobs[pb.last(a, 1, 2, b"")] = pb.last(a, 2, 2, b"")
                    reply = pb.c_kv_set_result(kid)
                    out["events"].append("kv_set")
                else:
                    bid = pb.last(pb.parse(gb), 1, 2, b"")
                    reply = pb.c_kv_get_result(kid, blobs.get(bid))
                    out["events"].append("kv_get")
                st, _ = self.append(rid, reply, out["seq"])
                out["seq"] += 1
                out.setdefault("kv_reply_status", []).append(st)
            elif fn == 2:
                ex = pb.parse(v)
                out["events"].append("exec")
                out["exec"] = {"id": pb.last(ex, 1, 0, 0), "exec_id": pb.text(pb.last(
                    ex, 15, 2, b"")), "kinds": [f for f, w, _ in ex if f not in (1, 15)]}
                if exec_reply:
                    for m in exec_reply(out["exec"]):
                        st, _ = self.append(rid, m, out["seq"])
                        out["seq"] += 1
            elif fn == 3:
                out["events"].append("checkpoint")
            else:
                out["events"].append("asm%d" % fn)


def raw_post(fake, path, body, headers, port=None):
    c = http.client.HTTPSConnection("localhost", port or fake.port,
                                    context=ctx_for(fake.info["ca"]), timeout=10)
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    b = r.read()
    c.close()
    return r.status, b


def errors_since(fake, n0):
    return fake.ctl("/state")["errors"][n0:]


def test_server(tmp):
    fake = Fake(tmp)
    try:
        server_tests(fake)
        h2_tests(fake, Client(fake, pb.make_jwt({"sub": "t", "exp": int(time.time()) + 3600})))
    finally:
        fake.stop()


def server_tests(fake):
    now = int(time.time())
    tok = pb.make_jwt({"sub": "t", "exp": now + 3600})
    cl = Client(fake, tok)
    st = fake.ctl("/state")
    eq("fresh fake has no validation errors", st["errors"], [])

    # -- text scenario, TLS 1.2, KV answer, frames
    r = cl.run("scenario:text_basic")
    eq("text_basic status", r["status"], 200)
    eq("text_basic text", r["text"], "Hello, world! w\u00f6rld \U0001f30d")
    eq("text_basic events", r["events"], ["kv_set", "text", "heartbeat", "text", "token_delta",
                                          "text", "checkpoint", "turn_ended", "trailer"])
    eq("text_basic trailer", r.get("trailer"), {"grpc-status": "0"})
    eq("text_basic kv reply accepted", r.get("kv_reply_status"), [200])
    eq("text_basic clean end", (r["error"], r["leftover"]), (None, b""))
    st = fake.ctl("/state")
    eq("no validation errors after a correct run", st["errors"], [])
    check("TLS 1.2 negotiated", st["counters"].get("tls_version_TLSv1.2", 0) >= 1, str(st))
    runs = {x["request_id"]: x for x in fake.ctl("/runs")}
    run = runs[r["rid"]]
    eq("run recorded appends", [(a["seqno"], a["message"]["type"]) for a in run["appends"]],
       [(0, "run_request"), (1, "kv_result")])
    eq("run recorded kv reply", run["kv_replies"]["1"]["kind"], "set_blob_result")
    eq("run scenario", run["scenario"], "text_basic")

    # -- RunSSE answers its head before the seqno-0 append; an append that comes before the
    #    run is registered is lost and the run never starts
    r = cl.run("scenario:text_basic", delay_append=0.6)
    check("RunSSE head before the seqno-0 append", r["t_headers"] <= r["t_append"],
          "%f > %f" % (r["t_headers"], r["t_append"]))
    eq("delayed append run works", r["text"], "Hello, world! w\u00f6rld \U0001f30d")
    fake.ctl("/config", {"register_delay_s": 0.5})
    n0 = len(fake.ctl("/state")["errors"])
    rid = str(uuid.uuid4())
    c = cl.conn()
    c.request("POST", "/agent.v1.AgentService/RunSSE", body=pb.envelope(
        pb.c_bidi_request_id(rid)), headers=cl.headers(rid))
    st0, _ = cl.append(rid, pb.c_run_request("User: x", "scenario:text_basic"), 0)
    resp = c.getresponse()
    fr = pb.FrameReader()
    got = fr.feed(resp.read1(65536))
    c.close()
    eq("early append accepted (and lost)", st0, 200)
    eq("dropped run: heartbeats only", [pb.parse(p)[0][0] for _, p in got][:1], [1])
    check("dropped run: no text", not any(b"Hello" in p for _, p in got), got)
    errs = errors_since(fake, n0)
    check("dropped run recorded", any("before its RunSSE was registered" in e["error"]
                                      for e in errs), errs)
    runs = {x["request_id"]: x for x in fake.ctl("/runs")}
    eq("dropped run summary", (runs[rid]["dropped"], runs[rid]["stream"].get("ended")),
       (True, "dropped"))
    fake.ctl("/config", {"register_delay_s": 0.0})

    # -- keep-alive: the append connection carried several requests
    reqs = fake.ctl("/requests")
    conns = {q["conn"] for q in reqs if q["path"].endswith("BidiAppend")}
    eq("appends reused one keep-alive connection", len(conns), 1)
    rec = [q for q in reqs if q["path"].endswith("RunSSE")][0]
    eq("recorded RunSSE headers", rec["headers"]["x-cursor-client-type"], "cli")
    eq("recorded RunSSE request id", rec["decoded"]["request_id"], rec["headers"]["x-request-id"])

    # -- thinking, split bytes, kv get, echo, long
    r = cl.run("scenario:thinking")
    eq("thinking text", (r["thinking"], r["text"]), ("Let me think about it.",
                                                      "The answer is 42."))
    r = cl.run("scenario:split_bytes")
    eq("split frames reassemble", r["text"], "split \U0001f30d across many frames")
    r = cl.run("scenario:kv_get")
    eq("kv_get text", r["text"], "kv ok")
    n0 = len(fake.ctl("/state")["errors"])
    eq("kv_get: client answers checked", errors_since(fake, n0), [])
    r = cl.run("scenario:long:1000")
    eq("long:1000 frames", r["events"].count("text"), 1000)
    eq("long:1000 text", r["text"], "lorem ipsum " * 1000)
    fake.ctl("/scenario", {"name": "stamped", "scenario": {"steps": [
        {"op": "long", "n": 10, "batch": 3, "stamp": True, "interval": 0.01, "text": "x"},
        {"op": "turn_ended"}, {"op": "trailer", "status": 0}]}})
    t0 = time.monotonic_ns()
    r = cl.run("scenario:stamped")
    t1 = time.monotonic_ns()
    stamps = [int(p[2:]) for p in r["text"].split(";x")[:-1]]
    eq("stamped: 10 frames", (r["events"].count("text"), len(stamps)), (10, 10))
    eq("stamped: monotonic times within the run, batches of 3 paced apart",
       (all(t0 <= s <= t1 for s in stamps), len(set(stamps)), stamps[3] - stamps[0] >= 10 ** 7),
       (True, 4, True))
    r = cl.run("scenario:end_stream_error")
    eq("end-stream JSON frame", r.get("end_stream"), {"error": {"code": "internal",
                                                               "message": "boom"}})

    # -- concurrency: 20 echo runs at once, each gets its own answer
    res = {}
    # echo plus a short hold, so that the streams overlap however the threads are scheduled
    fake.ctl("/scenario", {"name": "echo_hold", "scenario": {"steps": [
        {"op": "echo", "pieces": 4}, {"op": "sleep", "s": 0.3}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]}})

    def one(i):
        c2 = Client(fake, tok)
        res[i] = c2.run("scenario:echo_hold", prompt="User: question number %d" % i)["text"]
    ths = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    [t.start() for t in ths]
    [t.join(30) for t in ths]
    eq("20 concurrent echo runs", [res.get(i) for i in range(20)],
       ["ECHO:question number %d" % i for i in range(20)])
    st = fake.ctl("/state")
    check("max_active_streams counted", st["max_active_streams"] >= 2, str(st))

    # -- control API: queued scenario for a normal model, registered scenario
    fake.ctl("/next_scenario", {"name": "echo"})
    r = cl.run("claude-4.5-sonnet", prompt="User: via queue")
    eq("queued scenario", r["text"], "ECHO:via queue")
    r = cl.run("claude-4.5-sonnet")
    eq("default scenario", r["text"], "Hello from fake Cursor.")
    fake.ctl("/scenario", {"name": "mine", "scenario": {"steps": [
        {"op": "text", "text": "custom"}, {"op": "turn_ended"}]}})
    r = cl.run("scenario:mine")
    eq("registered scenario", (r["text"], r["events"]), ("custom", ["text", "turn_ended"]))
    fake.ctl("/scenario", {"name": "branch", "scenario": {
        "when": [{"prompt_contains": "[Tool result for", "steps": [{"op": "text", "text": "B"}]},
                 {"has_tools": True, "steps": [{"op": "text", "text": "T"}]}],
        "steps": [{"op": "text", "text": "A"}]}})
    eq("branch default", cl.run("scenario:branch")["text"], "A")
    eq("branch tools", cl.run("scenario:branch", tools=["read"])["text"], "T")
    eq("branch tool result", cl.run("scenario:branch",
                                    prompt="[Tool result for x]: y")["text"], "B")

    # -- exec with the client's reply recorded
    def reply(ex):
        return [pb.c_read_result(ex["id"], ex["exec_id"], "/tmp/fake-workspace/hello.txt",
                                 "hello\n"), pb.c_stream_close(ex["id"])]
    fake.ctl("/scenario", {"name": "read_then_text", "scenario": {"steps": [
        {"op": "exec", "kind": "read", "id": 7, "exec_id": "exec-7", "path": "/x",
         "wait_reply": 3.0}, {"op": "text", "text": "done"}, {"op": "turn_ended"}]}})
    r = cl.run("scenario:read_then_text", exec_reply=reply)
    eq("exec frame", r.get("exec"), {"id": 7, "exec_id": "exec-7", "kinds": [7]})
    eq("text after exec reply", r["text"], "done")
    run = {x["request_id"]: x for x in fake.ctl("/runs")}[r["rid"]]
    got = [(m["type"], m.get("result") or m.get("kind"), m.get("variant"))
           for m in run["exec_replies"].get("7", [])]
    eq("exec replies recorded", got, [("exec_result", "read_result", "success"),
                                      ("exec_control", "stream_close", None)])

    # -- tool scenario: client hangs up after the exec (what the proxy does) -> disconnect seen
    st0 = fake.ctl("/state")["counters"]
    r = cl.run("scenario:tool_shell", on_frame=lambda o, c: "stop" if "exec" in o else None)
    eq("tool_shell exec", r.get("exec"), {"id": 1, "exec_id": "exec-7f3a-0001", "kinds": [14]})
    ok = wait_until(lambda: fake.ctl("/state")["counters"].get("disconnects_mid_stream", 0)
                    > st0.get("disconnects_mid_stream", 0), 5)
    check("fake sees the client hang up mid-stream", ok)
    ok = wait_until(lambda: fake.ctl("/state")["active_streams"] == 0, 5)
    check("active streams back to 0", ok)

    # -- stall + hang up
    r = cl.run("scenario:stall", on_frame=lambda o, c: "stop" if o["text"] else None)
    ok = wait_until(lambda: any(x["stream"].get("stall_result") == "closed"
                                for x in fake.ctl("/runs") if x["request_id"] == r["rid"]), 5)
    check("stall ends when the client hangs up", ok)

    # -- faults
    r = cl.run("scenario:usage_limit")
    tr = r.get("trailer", {})
    eq("usage limit trailer", (tr.get("grpc-status"), tr.get("grpc-message")),
       ("8", "You%27ve%20hit%20your%20usage%20limit"))
    det = base64.b64decode(r["trailer"]["grpc-status-details-bin"])
    sf = pb.parse(det)
    anyv = pb.parse(pb.last(sf, 3, 2))
    eq("usage limit details type", pb.text(pb.last(anyv, 1, 2)), pb.ERROR_DETAILS_TYPE)
    eq("usage limit details error", pb.last(pb.parse(pb.last(anyv, 2, 2)), 1, 0), 10)
    for sc, status, code in (("runsse_401", 401, "unauthenticated"),
                             ("runsse_500", 500, "internal")):
        fake.ctl("/config", {"runsse_scenario": sc})
        r = cl.run("scenario:text_basic")
        fake.ctl("/config", {"runsse_scenario": None})
        eq(sc + " status", (r["append_status"], r["status"]), (None, status))
        eq(sc + " body", json.loads(r["body"])["code"], code)
    for sc, status in (("append_401", 401), ("append_500", 500)):
        r = cl.run("scenario:" + sc)
        eq(sc + " status", (r["append_status"], r["status"]), (status, 200))
        eq(sc + " trailer", r.get("trailer", {}).get("grpc-status"),
           {401: "16", 500: "13"}[status])
    r = cl.run("scenario:append_401_kv")
    eq("append 401 on the kv reply", (r.get("kv_reply_status"), r["text"][:9]),
       ([401], "before kv"))
    r = cl.run("scenario:cut_frame")
    check("cut frame: body ends badly", r["error"] is not None or r["leftover"] != b"",
          str(r)[:300])
    check("cut frame: leftover partial frame", len(r["leftover"]) > 0, str(r["leftover"]))
    r = cl.run("scenario:cut_frame_clean_eof")
    eq("cut frame clean EOF: no transport error", r["error"], None)
    check("cut frame clean EOF: leftover", 0 < len(r["leftover"]) < 40, repr(r["leftover"]))
    r = cl.run("scenario:close_mid")
    check("close mid-stream: incomplete body", r["error"] is not None, str(r)[:200])
    # the 4 GiB frame never completes; look at the raw bytes instead
    c = cl.conn()
    rid = str(uuid.uuid4())
    c.request("POST", "/agent.v1.AgentService/RunSSE", body=pb.envelope(
        pb.c_bidi_request_id(rid)), headers=cl.headers(rid))
    resp = c.getresponse()
    cl.append(rid, pb.c_run_request("User: x", "scenario:huge_len_first"), 0)
    eq("huge length frame bytes", resp.read1(10)[:5].hex(), "00ffffffff")
    c.close()

    # -- transport/framing fault scenarios and listeners (tests/faults_test.py uses them)
    fault_tests(fake, cl)
    upstream_messages_tests(fake, cl)

    # -- GetUsableModels
    rid = str(uuid.uuid4())
    h = cl.headers(rid, ctype="application/json", x_cursor_streaming=None)
    h.update({"accept": "application/json", "connect-protocol-version": "1"})
    s, b = raw_post(fake, "/aiserver.v1.AiService/GetUsableModels", b"{}", h)
    eq("models status", s, 200)
    from fake_cursor import load_vector_model_ids
    ms = json.loads(b)["models"]
    eq("models match the vector", [m["displayModelId"] for m in ms][:5],
       [i for i, _ in load_vector_model_ids()])
    check("scenario models listed", "scenario:tool_read" in [m["modelId"] for m in ms])
    n0 = len(fake.ctl("/state")["errors"])
    s, b = raw_post(fake, "/aiserver.v1.AiService/GetUsableModels", b"{}",
                    dict(h, **{"content-type": "application/grpc-web+proto"}))
    eq("models wrong content type", s, 415)

    # -- validation: each must be rejected AND recorded
    n0 = len(fake.ctl("/state")["errors"])
    rid = str(uuid.uuid4())
    body = pb.envelope(pb.c_bidi_append(pb.c_run_request("User: x", "m"), rid, 0))
    path = "/aiserver.v1.BidiService/BidiAppend"
    expired = pb.make_jwt({"sub": "t", "exp": now - 10})
    cases = [
        ("no authorization", cl.headers(rid, authorization=None), body, 401),
        ("not bearer", cl.headers(rid, authorization="Basic abc"), body, 401),
        ("expired token", dict(cl.headers(rid), authorization="Bearer " + expired,
                               **{"x-cursor-checksum": pb.checksum(expired)}), body, 401),
        ("non-JWT token", dict(cl.headers(rid), authorization="Bearer abc",
                               **{"x-cursor-checksum": pb.checksum("abc")}), body, 401),
        ("wrong content type", cl.headers(rid, content_type="text/plain"), body, 415),
        ("Connect without connect-protocol-version", cl.headers(
            rid, content_type="application/proto"), body[5:], 400),
        ("connect+proto", cl.headers(rid, content_type="application/connect+proto"), body, 415),
        ("bad checksum", cl.headers(rid, x_cursor_checksum="paaotU1Zdbb62c77/494d097f"), body,
         400),
        ("old checksum", cl.headers(rid, x_cursor_checksum=pb.checksum(tok, time.time() - 3700)),
         body, 400),
        ("no checksum", cl.headers(rid, x_cursor_checksum=None), body, 400),
        ("no client version", cl.headers(rid, x_cursor_client_version=None), body, 400),
        ("client type", cl.headers(rid, x_cursor_client_type="ide"), body, 400),
        ("no ghost mode", cl.headers(rid, x_ghost_mode=None), body, 400),
        # no x-cursor-streaming is accepted: the CLI's HTTP/2 Run goes without it (late-autumn
        # notes section 3), and the live server rejects nothing for it
        ("upper-case request id", cl.headers(rid.upper()), body, 400),
        ("request id mismatch", cl.headers(str(uuid.uuid4())), body, 400),
        ("upper-case hex", cl.headers(rid), pb.envelope(pb.c_bidi_append(
            pb.c_run_request("User: x", "m"), rid, 0, hex_upper=True)), 400),
        ("unparseable message", cl.headers(rid), pb.envelope(
            pb.o_str(1, "0a05") + pb.f_bytes(2, pb.o_str(1, rid)) + pb.f_varint(3, 0)), 400),
        ("seqno omitted", cl.headers(rid), pb.envelope(
            pb.o_str(1, pb.c_run_request("User: x", "m").hex())
            + pb.f_bytes(2, pb.o_str(1, rid))), 400),
        ("envelope length lie", cl.headers(rid), body[:4] + bytes([body[4] + 1]) + body[5:],
         400),
        ("seqno 0 without conversation_state", cl.headers(rid), pb.envelope(pb.c_bidi_append(
            pb.c_run_request("User: x", "m", with_state=False), rid, 0)), 400),
        ("seqno 0 without request_context", cl.headers(rid), pb.envelope(pb.c_bidi_append(
            pb.c_run_request("User: x", "m", with_context=False), rid, 0)), 400),
        ("seqno 0 not a run request", cl.headers(rid), pb.envelope(pb.c_bidi_append(
            pb.c_kv_set_result(1), rid, 0)), 400),
        ("seqno starts at 1", cl.headers(rid), pb.envelope(pb.c_bidi_append(
            pb.c_kv_set_result(1), rid, 1)), 400),
    ]
    for name, hdr, b, want in cases:
        s, rb = raw_post(fake, path, b, hdr)
        eq("reject %s" % name, s, want)
        if want == 401:
            eq("reject %s body" % name, json.loads(rb).get("code"), "unauthenticated")
    errs = errors_since(fake, n0)
    eq("every rejection recorded as a validation error", len(errs), len(cases))
    # the same request id still works afterwards with a correct append
    s, _ = raw_post(fake, path, body, cl.headers(rid))
    eq("correct append after rejections", s, 200)
    s, _ = raw_post(fake, path, body, cl.headers(rid))
    eq("repeated seqno 0 rejected", s, 400)
    # RunSSE for a run whose append never comes
    n0 = len(fake.ctl("/state")["errors"])
    rid2 = str(uuid.uuid4())
    t0 = time.time()
    s, b = raw_post(fake, "/agent.v1.AgentService/RunSSE",
                    pb.envelope(pb.c_bidi_request_id(rid2)), cl.headers(rid2))
    check("RunSSE without append gives up after append_wait_s", s == 200 and
          b"grpc-status: 3" in b and 2.5 < time.time() - t0 < 10,
          "status %d after %.1fs: %r" % (s, time.time() - t0, b[-60:]))
    eq("missing append recorded", len(errors_since(fake, n0)), 1)
    s, _ = raw_post(fake, "/agent.v1.AgentService/RunSSE",
                    pb.envelope(pb.c_bidi_request_id(rid2)), cl.headers(rid2))
    eq("second RunSSE for one request id", s, 409)

    # -- auth endpoints
    fake.ctl("/config", {"poll_pending": 2})
    u = str(uuid.uuid4())
    ver = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    sts = []
    for _ in range(3):
        c = cl.conn()
        c.request("GET", "/auth/poll?uuid=%s&verifier=%s" % (u, ver),
                  headers={"content-type": "application/json"})
        rr = c.getresponse()
        sts.append((rr.status, rr.read()))
        c.close()
    eq("poll: 404, 404, 200", [x[0] for x in sts], [404, 404, 200])
    toks = json.loads(sts[2][1])
    check("poll tokens", set(toks) == {"accessToken", "refreshToken"}, str(toks))
    jh = {"content-type": "application/json", "authorization": "Bearer " + toks["refreshToken"]}
    c0 = fake.ctl("/state")["counters"].get("refresh_calls", 0)
    s, b = raw_post(fake, "/auth/refresh", b"{}", jh)
    eq("refresh ok", s, 200)
    s2, _ = raw_post(fake, "/auth/refresh", b"{}", jh)
    eq("rotated refresh token rejected", s2, 401)
    eq("refresh calls counted", fake.ctl("/state")["counters"]["refresh_calls"] - c0, 2)
    new = json.loads(b)
    fake.ctl("/config", {"accept_any_jwt": False})
    cl2 = Client(fake, new["accessToken"])
    eq("refreshed access token works", cl2.run("scenario:mine")["text"], "custom")
    cl3 = Client(fake, tok)
    r = cl3.run("scenario:mine")
    eq("unknown token rejected when accept_any_jwt is off", r["status"], 401)
    fake.ctl("/config", {"accept_any_jwt": True})
    s, b = raw_post(fake, "/auth/exchange_user_api_key", b"{}",
                    {"content-type": "application/json", "authorization": "Bearer key_abc"})
    eq("exchange ok", (s, sorted(json.loads(b))), (200, ["accessToken", "refreshToken"]))
    s, b = raw_post(fake, "/auth/exchange_user_api_key", b"{}",
                    {"content-type": "application/json", "authorization": "Bearer nope"})
    eq("exchange bad key", s, 401)
    s, _ = raw_post(fake, "/nope", b"{}", {})
    eq("unknown path", s, 404)
    # /oauth/token: the refresh token does not rotate; an unknown one means shouldLogout
    jc = {"content-type": "application/json"}
    ok_body = json.dumps({"grant_type": "refresh_token",
                          "client_id": "KbZUR41cY7W6zRSdpSUJ7I7mLYBKOCmB",
                          "refresh_token": new["refreshToken"]}).encode()
    s, b = raw_post(fake, "/oauth/token", ok_body, jc)
    s2, b2 = raw_post(fake, "/oauth/token", ok_body, jc)
    j1, j2 = json.loads(b), json.loads(b2)
    check("oauth/token twice with the same refresh token: two access tokens, no refresh token",
          s == s2 == 200 and j1["access_token"] and j2["access_token"] and not j1["shouldLogout"]
          and "refresh_token" not in j1, (s, s2, b2))
    s, b = raw_post(fake, "/oauth/token", ok_body.replace(new["refreshToken"].encode(), b"rt_x"),
                    jc)
    check("oauth/token unknown refresh token: shouldLogout", s == 200 and
          json.loads(b)["shouldLogout"] is True and not json.loads(b)["access_token"], b)
    n0 = len(fake.ctl("/state")["errors"])
    s, _ = raw_post(fake, "/oauth/token", ok_body.replace(b"KbZUR41", b"XbZUR41"), jc)
    eq("oauth/token wrong client_id: 401, recorded as an error",
       (s, len(errors_since(fake, n0)) > 0), (401, True))
    fake.ctl("/config", {"oauth_token_route": False, "auth_refresh_route": False})
    s, _ = raw_post(fake, "/oauth/token", ok_body, jc)
    s2, _ = raw_post(fake, "/auth/refresh", b"{}", jh)
    eq("oauth_token_route / auth_refresh_route off: 404 each", (s, s2), (404, 404))
    fake.ctl("/config", {"oauth_token_route": True, "auth_refresh_route": True})

    # -- wrong certificates
    for port, name in ((fake.info["wrong_host_port"], "wrong host"),
                       (fake.info["wrong_ca_port"], "wrong CA")):
        try:
            c = http.client.HTTPSConnection("localhost", port, context=ctx_for(fake.info["ca"]),
                                            timeout=5)
            c.request("GET", "/auth/poll")
            c.getresponse()
            check("%s rejected by a verifying client" % name, False)
        except ssl.SSLCertVerificationError as e:
            check("%s rejected by a verifying client" % name, True, str(e))
    good = ctx_for(fake.info["wrong_ca"])
    good.check_hostname = True
    c = http.client.HTTPSConnection("localhost", fake.info["wrong_ca_port"], context=good,
                                    timeout=5)
    c.request("GET", "/nope")
    eq("wrong-CA listener works with its own CA", c.getresponse().status, 404)
    st = fake.ctl("/state")["counters"]
    check("handshake failures counted", st.get("tls_handshake_failures", 0) >= 2, str(st))

    # -- reset
    fake.ctl("/reset", {})
    st = fake.ctl("/state")
    eq("reset clears", (st["errors"], st["n_requests"]), ([], 0))


def raw_frames(cl, model, stop_after=None):
    """RunSSE for `model`, read the body without interpreting it.
    -> (status, [(flags, payload)], leftover bytes, transport error or None)"""
    c = cl.conn()
    rid = str(uuid.uuid4())
    c.request("POST", "/agent.v1.AgentService/RunSSE", body=pb.envelope(
        pb.c_bidi_request_id(rid)), headers=cl.headers(rid))
    r = c.getresponse()
    cl.append(rid, pb.c_run_request("User: x", model), 0)
    fr, frames, err = pb.FrameReader(), [], None
    try:
        while True:
            d = r.read1(65536)
            if not d:
                break
            frames += fr.feed(d)
            if stop_after and len(frames) >= stop_after:
                break
    except (http.client.IncompleteRead, OSError, ssl.SSLError) as e:
        err = e
    c.close()
    return r.status, frames, fr.buf, err


def fault_tests(fake, cl):
    # RST mid-stream. Python's TLS layer reports a reset as a plain EOF, so read the plaintext
    # through TLS and then watch the raw descriptor for ECONNRESET.
    rid = str(uuid.uuid4())
    body = pb.envelope(pb.c_bidi_request_id(rid))
    h = dict(cl.headers(rid), host="localhost", **{"content-length": str(len(body))})
    s = cl.ctx.wrap_socket(socket.create_connection(("127.0.0.1", fake.port), timeout=10),
                           server_hostname="localhost")
    s.sendall(("POST /agent.v1.AgentService/RunSSE HTTP/1.1\r\n" + "".join(
        "%s: %s\r\n" % kv for kv in h.items()) + "\r\n").encode() + body)
    got, how = b"", None
    while b"\r\n\r\n" not in got:      # the RunSSE head first, then the append
        d = s.recv(65536)
        if not d:
            break
        got += d
    cl.append(rid, pb.c_run_request("User: x", "scenario:rst_mid"), 0)
    while b"partial answer" not in got:
        d = s.recv(65536)
        if not d:
            break
        got += d
    end = time.time() + 5
    try:
        while time.time() < end:
            if select.select([s.fileno()], [], [], 0.2)[0] and not os.read(s.fileno(), 65536):
                how = "eof"
                break
    except OSError as e:
        how = e.errno
    s.close()
    check("rst_mid: text before the reset", b"partial answer" in got, got[-80:])
    eq("rst_mid: the connection ends with a TCP RST", how, errno.ECONNRESET)
    fake.ctl("/config", {"runsse_scenario": "html_502"})
    r = cl.run("scenario:text_basic")
    fake.ctl("/config", {"runsse_scenario": None})
    eq("html_502 status", r["status"], 502)
    check("html_502 body is HTML", r["body"].startswith(b"<html>") and len(r["body"]) > 400,
          r["body"][:80])
    st, frames, left, err = raw_frames(cl, "scenario:unknown_flag")
    eq("unknown flag frame sent as is", frames[0], (4, bytes.fromhex("0a070a0568656c6c6f")))
    eq("unknown flag: rest of the stream", [f for f, _ in frames[1:]], [0, 0x80])
    st, frames, left, err = raw_frames(cl, "scenario:data_after_trailer")
    eq("data after trailer: frame order", [f for f, _ in frames], [0, 0x80, 0])
    eq("data after trailer: clean end", (left, err), (b"", None))
    st, frames, left, err = raw_frames(cl, "scenario:emoji_split_frames")
    eq("emoji split across two text deltas", [p for f, p in frames[:2]],
       [pb.m_text(b"a\xf0\x9f"), pb.m_text(b"\x8c\x8db")])
    st, frames, left, err = raw_frames(cl, "scenario:end_stream_quota_first")
    eq("end-stream error first", [(f, json.loads(p)["error"]["code"]) for f, p in frames],
       [(2, "resource_exhausted")])
    st, frames, left, err = raw_frames(cl, "scenario:frame_over_cap", stop_after=1)
    eq("over-cap frame sent in full", [(f, len(p), p.count(0)) for f, p in frames],
       [(0, 16 * 1024 * 1024 + 1, 16 * 1024 * 1024 + 1)])
    fake.ctl("/scenario", {"name": "big", "scenario": {"steps": [
        {"op": "text", "text": "ab", "repeat": 3}, {"op": "turn_ended"}]}})
    eq("text repeat", cl.run("scenario:big")["text"], "ababab")
    # RST during the TLS handshake
    n0 = fake.ctl("/state")["counters"].get("rst_handshake_resets", 0)
    try:
        c = http.client.HTTPSConnection("localhost", fake.info["rst_handshake_port"],
                                        context=ctx_for(fake.info["ca"]), timeout=5)
        c.request("GET", "/")
        check("rst_handshake listener fails the handshake", False)
    except (ConnectionResetError, ssl.SSLError) as e:
        check("rst_handshake listener fails the handshake", True, repr(e))
    check("rst_handshake counted", wait_until(lambda: fake.ctl("/state")["counters"].get(
        "rst_handshake_resets", 0) > n0, 5))
    # silent listener: accepts, never answers, notices when the peer leaves
    s = socket.create_connection(("127.0.0.1", fake.info["silent_port"]), timeout=5)
    s.sendall(b"\x16\x03\x01hello")
    s.settimeout(0.5)
    try:
        got = s.recv(10)
    except socket.timeout:
        got = None
    eq("silent listener sends nothing", got, None)
    s.close()
    check("silent listener saw the peer leave", wait_until(lambda: [
        h for h in fake.ctl("/state")["counters"].get("silent_held", [])
        if h["end"] == "closed" and h["bytes_in"] == 8], 5))


def h2_run(fake, cl, model, prompt="User: hi", port=None, n=1, conn=None):
    """The Run stream over HTTP/2 as the proxy speaks it (python3-h2 as the client):
    n concurrent runs on one connection. Returns [dict(status, frames, text, end)]."""
    import h2.connection
    import h2.config
    import h2.events
    ctx = ctx_for(fake.info["ca"])
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port or fake.info["agent_port"]), timeout=20)
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    if s.selected_alpn_protocol() != "h2":
        s.close()
        return [{"alpn": s.selected_alpn_protocol()}]
    h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                              header_encoding="utf-8"))
    h.initiate_connection()
    outs = {}
    for i in range(n):
        sid = h.get_next_available_stream_id()
        rid = str(uuid.uuid4())
        hd = [(":method", "POST"), (":scheme", "https"), (":authority", "localhost"),
              (":path", "/agent.v1.AgentService/Run")]
        hd += [(k, v) for k, v in cl.headers(rid, "application/connect+proto",
                                             connect_protocol_version="1").items()]
        h.send_headers(sid, hd)
        h.send_data(sid, pb.envelope(pb.c_run_request(prompt, model)))
        outs[sid] = {"rid": rid, "status": None, "body": b"", "frames": [], "text": "",
                     "end": None, "reset": None}
    s.sendall(h.data_to_send())
    left = set(outs)
    while left:
        d = s.recv(65536)
        if not d:
            break
        for ev in h.receive_data(d):
            o = outs.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                o["status"] = int(dict(ev.headers)[":status"])
            elif isinstance(ev, h2.events.DataReceived):
                o["body"] += ev.data
                h.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                h.end_stream(ev.stream_id)
                left.discard(ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                o["reset"] = ev.error_code
                left.discard(ev.stream_id)
        s.sendall(h.data_to_send())
    s.close()
    res = []
    for o in outs.values():
        fr = pb.FrameReader()
        for flags, payload in fr.feed(o["body"]):
            o["frames"].append((flags, payload))
            if flags & 0x02:
                o["end"] = json.loads(payload or b"{}")
        res.append(o)
    return res


def h2_tests(fake, cl):
    """Run over HTTP/2 on the agent host; HTTP/1.1 refused there; Run over HTTP/1.1 -> 464."""
    n0 = len(fake.ctl("/state")["errors"])
    out = h2_run(fake, cl, "scenario:echo", n=3)
    eq("h2: three Run streams on one connection answer 200", [o["status"] for o in out],
       [200, 200, 200])
    check("h2: each ends with a clean Connect end-stream",
          all(o["end"] == {} for o in out), [o["end"] for o in out])
    check("h2: frames arrive", all(len(o["frames"]) >= 4 for o in out),
          [len(o["frames"]) for o in out])
    runs = {r["request_id"]: r for r in fake.ctl("/runs")}
    check("h2: the fake saw the runs as h2 runs",
          all(runs.get(o["rid"], {}).get("transport") == "h2" for o in out))
    eq("h2: no validation errors", errors_since(fake, n0), [])
    # HTTP/1.1 on the agent host: refused at the connection level
    fake.ctl("/config", {"agent_http1": False})
    c = cl.conn(fake.info["agent_port"])
    try:
        c.request("POST", "/agent.v1.AgentService/RunSSE", body=b"", headers={})
        st = c.getresponse().status
    except (OSError, http.client.HTTPException):
        st = "closed"
    check("h2: HTTP/1.1 refused on the agent host", st in (400, "closed"), st)
    fake.ctl("/config", {"agent_http1": True})
    st, _ = raw_post(fake, "/agent.v1.AgentService/Run", b"", cl.headers(str(uuid.uuid4())))
    eq("h2: bidi Run over HTTP/1.1 -> 464", st, 464)
    # too many streams: the fake records the client's protocol error
    fake.ctl("/config", {"h2_max_streams": 2})
    n1 = len(fake.ctl("/state")["errors"])
    try:
        h2_run(fake, cl, "scenario:echo", n=3)
    except Exception:
        pass
    check("h2: a third stream over SETTINGS_MAX_CONCURRENT_STREAMS=2 is a recorded error",
          any("TooManyStreams" in e["error"] for e in errors_since(fake, n1)),
          errors_since(fake, n1))
    fake.ctl("/config", {"h2_max_streams": 100})
    fake.ctl("/reset", {})


def raw_tls_exchange(fake, port, data):
    """Send raw bytes over TLS to a listener; everything it answers until it closes."""
    s = ctx_for(fake.info["ca"]).wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                                      timeout=10),
                                             server_hostname="localhost")
    s.sendall(data)
    got = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except (ssl.SSLError, OSError):
        pass
    s.close()
    return got


def upstream_messages_tests(fake, cl):
    """Issue 24: the agent host serves HTTP/2 only; runs are version-gated; a deprecated model;
    compressed appends are ignored."""
    rid = str(uuid.uuid4())
    body = pb.envelope(pb.c_bidi_request_id(rid))
    req = ("POST /agent.v1.AgentService/RunSSE HTTP/1.1\r\nhost: localhost\r\n" + "".join(
        "%s: %s\r\n" % kv for kv in cl.headers(rid).items())
        + "content-length: %d\r\n\r\n" % len(body)).encode() + body
    port = fake.info["agent_port"]
    n0 = fake.ctl("/state")["counters"].get("http1_refused_agent", 0)
    got = raw_tls_exchange(fake, port, req)
    check("agent host: HTTP/1.1 refused with 400 illegal request line (default)",
          got.startswith(b"HTTP/1.1 400 ") and got.endswith(b"illegal request line"), got[:200])
    fake.ctl("/config", {"agent_http1": "close"})
    eq("agent host: HTTP/1.1 refused by a close before any byte", raw_tls_exchange(
        fake, port, req), b"")
    fake.ctl("/config", {"agent_http1": "h2"})
    got = raw_tls_exchange(fake, port, req)
    check("agent host: HTTP/1.1 answered with HTTP/2 SETTINGS + GOAWAY frames",
          len(got) >= 18 and got[3] == 4 and got[5:9] == b"\0\0\0\0"
          and got[9 + got[2]:][3:4] == b"\x07" and got.endswith(b"illegal request line"),
          got[:80])
    eq("agent host: refusals counted", fake.ctl("/state")["counters"].get(
        "http1_refused_agent", 0) - n0, 3)
    fake.ctl("/config", {"agent_http1": True})
    eq("agent host: with agent_http1 true it serves HTTP/1.1", raw_post(
        fake, "/aiserver.v1.AiService/GetUsableModels", b"{}", cl.headers(
            str(uuid.uuid4()), "application/json", connect_protocol_version="1",
            x_cursor_streaming=None), port=port)[0], 200)
    fake.ctl("/config", {"agent_http1": "illegal"})
    # runs older than cli-2026.10.01 get "Update Required"; unary calls are not gated
    old = cl.headers(str(uuid.uuid4()), x_cursor_client_version="cli-2026.09.28-64d2043")
    r = raw_post(fake, "/agent.v1.AgentService/RunSSE",
                 pb.envelope(pb.c_bidi_request_id(old["x-request-id"])), old)
    fr = pb.FrameReader().feed(r[1])
    tr = pb.parse_trailer(fr[-1][1]) if fr and fr[-1][0] & 0x80 else {}
    check("version gate: a cli-2026.09.28 run ends with resource_exhausted + Update Required",
          r[0] == 200 and tr.get("grpc-status") == "8"
          and b"Update Required" in base64.b64decode(tr.get("grpc-status-details-bin", "") +
                                                     "=="), (r, tr))
    eq("version gate: unary calls are not gated", raw_post(
        fake, "/aiserver.v1.AiService/GetUsableModels", b"{}", cl.headers(
            str(uuid.uuid4()), "application/json", connect_protocol_version="1",
            x_cursor_streaming=None, x_cursor_client_version="cli-2026.09.28-64d2043"))[0], 200)
    for v in ("cli-2026.10.01-e373342-lab", "cli-2026.10.02-01-15-52-7244546"):
        cl2 = Client(fake, cl.token)
        cl2.headers = (lambda h: lambda rid, ctype="application/grpc-web+proto", **o: h(
            rid, ctype, **dict({"x_cursor_client_version": v}, **o)))(cl.headers)
        eq("version gate: %s passes" % v, cl2.run("scenario:default")["text"],
           "Hello from fake Cursor.")
    # a deprecated model: grpc-status 3 + ERROR_DEPRECATED
    out = cl.run("scenario:deprecated_model")
    tr = out.get("trailer") or {}
    check("deprecated_model: grpc-status 3 with ERROR_DEPRECATED (40) details",
          tr.get("grpc-status") == "3" and base64.b64decode(
              tr.get("grpc-status-details-bin", "") + "==").find(b"deprecated") >= 0, out)
    # a compressed append is ignored: the run never starts (heartbeats only)
    e0 = len(fake.ctl("/state")["errors"])
    rid = str(uuid.uuid4())
    c = cl.conn()
    c.request("POST", "/agent.v1.AgentService/RunSSE",
              body=pb.envelope(pb.c_bidi_request_id(rid)), headers=cl.headers(rid))
    r = c.getresponse()
    msg = pb.envelope(pb.c_bidi_append(pb.c_run_request("User: hi", "scenario:default"), rid, 0))
    st, _ = cl.append(rid, None, 0, raw=bytes([1]) + msg[1:])
    c.close()
    check("compressed append: acknowledged, ignored, recorded as an error",
          r.status == 200 and st == 200 and any("compressed BidiAppend" in e.get("error", "")
                                                 for e in fake.ctl("/state")["errors"][e0:]),
          fake.ctl("/state")["errors"][e0:])
    fake.ctl("/reset", {})


def wait_until(f, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if f():
            return True
        time.sleep(0.05)
    return False


def main():
    test_vectors()
    with tempfile.TemporaryDirectory(prefix="fake-cursor-test-") as tmp:
        try:
            test_server(tmp)
        except Exception:
            import traceback
            traceback.print_exc()
            check("server tests ran to the end", False)
            try:
                print(open(os.path.join(tmp, "fake.log")).read()[-3000:])
            except OSError:
                pass
    print("RESULT %d %d" % (PASS, FAIL))
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
