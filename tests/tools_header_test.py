#!/usr/bin/python3
"""Caller-owned tools (the allowed-tools header), against the fake Cursor.

CURSOR_OAI_TOOL_MODE=client (the default): a run whose request carries tools sends
x-cursor-agent-allowed-tools: mcp_tool_call,get_mcp_tools_tool_call on every call of the run
(RunSSE and each BidiAppend over HTTP/1.1, in both profiles; the Run over HTTP/2), and no run
without tools sends it (nor one whose tool_choice is "none"); CURSOR_OAI_TOOL_MODE=cursor never
sends it. The fake honours the header (a native exec step is refused loudly), so the tool loop
here is MCP only: an MCP call becomes a client tool call of that name with those arguments,
untranslated, on one Cursor run (held) also with parallel calls; its result goes back as the MCP
result (text; is_error; an image). A native exec that comes all the same (a step marked
"despite_header") is mapped as in cursor mode and counted: /metrics, logged once, the status
page, doctor ("Cursor honoured the tools header: yes/no"). A bad CURSOR_OAI_TOOL_MODE stops
the start with a clear error.

Run from the repo root:  COAI_TEST_TRANSPORT=http1|h2 /usr/bin/python3 tests/tools_header_test.py
Env: CURSOR_OAI_BIN (default build/cursor-oai). Prints `RESULT <passed> <failed>` last.
"""

import base64
import json
import os
import re
import struct
import subprocess
import sys
import traceback
import zlib

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402

S = H.Suite("tools_header", limit=2000, below=True)
check, eq = S.check, S.eq

HDR = "x-cursor-agent-allowed-tools"
VALUE = "mcp_tool_call,get_mcp_tools_tool_call"
METRIC = "cursor_oai_native_exec_despite_tools_header_total"
LOG_WORDS = "although the run asked for the client's tools only"
END = [{"op": "turn_ended", "tokens": [10, 2, 0, 0, 0]}, {"op": "trailer", "status": 0}]
# a fresh run that replays the history (what a follow-up falls back to): says so
REPLAY = [{"prompt_contains": "[Tool result for", "steps": [{"op": "text", "text": "REPLAYED"}]
           + END}]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "units": {"type": "string"}},
                   "required": ["city"]}}}
BASH = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
SHOT = {"name": "screenshot", "description": "Screenshot of a window",
        "input_schema": {"type": "object", "properties": {"window": {"type": "string"}}}}
ARGS = {"city": "Paris", "units": "metric", "nested": {"a": [1, 2, {"b": None}]}}


def mcp(eid, name, args, tcid):
    return {"op": "exec", "kind": "mcp", "id": eid, "exec_id": "exec-th-%d" % eid,
            "tool_name": name, "args": args, "tool_call_id": tcid, "hold": True}


def scenarios():
    return {
        "th_plain": {"steps": [{"op": "text", "text": "Hello"}] + END},
        "th_mcp": {"when": REPLAY, "steps": [
            {"op": "text", "text": "Checking."}, mcp(1, "get_weather", ARGS, "toolu_th1"),
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "RESULT:"}] + END},
        "th_parallel": {"when": REPLAY, "steps": [
            mcp(1, "get_weather", {"city": "Paris"}, "toolu_p1"),
            mcp(2, "get_weather", {"city": "Oslo"}, "toolu_p2"),
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "A:"},
            {"op": "text_from_result", "id": 2, "prefix": " B:"}] + END},
        "th_shot": {"when": REPLAY, "steps": [
            mcp(1, "screenshot", {"window": "main"}, "toolu_s1"),
            {"op": "await_results", "max_s": 60},
            {"op": "images_from_result", "id": 1},
            {"op": "text_from_result", "id": 1, "prefix": " TEXT:"}] + END},
        "th_native": {"when": REPLAY, "steps": [
            {"op": "exec", "kind": "shell", "id": 1, "exec_id": "exec-th-sh", "command": "ls",
             "hold": True},
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "SHELL:"}] + END},
        "th_despite": {"when": REPLAY, "steps": [
            {"op": "exec", "kind": "shell", "id": 1, "exec_id": "exec-th-d", "command": "ls",
             "hold": True, "despite_header": True},
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "SHELL:"}] + END},
        # doctor's probe: a native exec despite the header (no tool of doctor's matches it:
        # the proxy answers it itself), then the answer
        "th_doctor_despite": {"steps": [
            {"op": "exec", "kind": "shell", "id": 1, "exec_id": "exec-th-doc", "command": "ls",
             "despite_header": True, "wait_reply": 10},
            {"op": "text", "text": "OK"}] + END},
    }


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def chat(px, model, tools, msgs, stream=False, **extra):
    body = {"model": model, "stream": stream, "messages": msgs}
    if tools is not None:
        body["tools"] = tools
    body.update(extra)
    if stream:
        st, _, raw, _ = H.stream_chat(px.port, body, timeout=60)
        ev = H.parse_sse(raw or b"")
        calls = [{"id": t["id"], "type": "function",
                  "function": {"name": t["name"], "arguments": t["arguments"]}}
                 for t in ev["tool_calls"]]
        return st, {"content": ev["content"], "tool_calls": calls, "errors": ev["errors"],
                    "bad": ev["bad"]}
    st, b, _ = px.request("POST", "/v1/chat/completions", body, timeout=60)
    j = jload(b) or {}
    try:
        m = j["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return st, {"content": None, "tool_calls": [], "raw": b[:600]}
    return st, {"content": m.get("content"), "tool_calls": m.get("tool_calls") or [],
                "raw": b[:600]}


def run_calls(fake, n0):
    """Requests since n0 grouped by run (x-request-id): {rid: [(path tail, headers)]}."""
    out = {}
    for q in fake.ctl("/requests?since=%d" % n0):
        p = q["path"]
        if not p.endswith(("/RunSSE", "/BidiAppend", "/Run")):
            continue
        rid = q["headers"].get("x-request-id")
        out.setdefault(rid, []).append((p.rsplit("/", 1)[1], q["headers"]))
    return out


def nreq(fake):
    st = fake.ctl("/requests?since=0")
    return (st[-1]["seq"] + 1) if st else 0


def runs_of(fake, scen):
    return [r for r in fake.runs() if r.get("scenario") == scen]


def metric(px):
    st, body, _ = px.get("/metrics")
    m = re.search(r"^%s (\d+)$" % METRIC, body.decode(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def log_count(px, words):
    with open(px.proc.log_path, errors="replace") as f:
        return f.read().count(words)


def header_values(calls):
    return [(kind, h.get(HDR)) for kind, h in calls]


def recorded(fake, n0, start):
    """[(call, header value)] of the runs since n0, once the fake has recorded the run's
    start (HTTP/2: the Run is recorded when its stream ends, a moment after the answer)."""
    H.wait_for(lambda: any(k == start for v in run_calls(fake, n0).values() for k, _ in v), 10)
    return [c for v in run_calls(fake, n0).values() for c in header_values(v)]


def t_headers(fake, px, label):
    """Which calls carry the header, in client mode."""
    # with tools: a held MCP loop; every call of the run carries the header
    n0, k0 = nreq(fake), len(runs_of(fake, "th_mcp"))
    msgs = [{"role": "user", "content": "weather in Paris?"}]
    st, r = chat(px, "scenario:th_mcp", [WEATHER], msgs)
    calls = r["tool_calls"]
    ok = check("%s: with tools, an MCP call comes back as the client's tool call" % label,
               st == 200 and len(calls) == 1 and r["content"] == "Checking.", (st, r))
    if ok:
        tc = calls[0]
        eq("%s: the call has the tool's own name" % label, tc["function"]["name"],
           "get_weather")
        eq("%s: its arguments are Cursor's, untranslated" % label,
           jload(tc["function"]["arguments"]), ARGS)
        msgs += [{"role": "assistant", "content": None, "tool_calls": calls},
                 {"role": "tool", "tool_call_id": tc["id"], "content": "sunny, 21 C"}]
        st, r = chat(px, "scenario:th_mcp", [WEATHER], msgs)
        eq("%s: the result goes back as the MCP result, on the same (held) run" % label,
           (st, r["content"]), (200, "RESULT:sunny, 21 C"))
        rs = runs_of(fake, "th_mcp")
        eq("%s: one Cursor run for the whole loop" % label, len(rs) - k0, 1)
        eq("%s: the result arrived as an MCP success, not an error" % label,
           [(x["exec_results"].get("1") or {}).get("mcp_is_error") for x in rs[-1:]], [False])
    start = "Run" if H.TRANSPORT == "h2" else "RunSSE"
    flat = recorded(fake, n0, start)
    check("%s: the run's %s carries %s: %s" % (label, start, HDR, VALUE),
          any(k == start and v == VALUE for k, v in flat), flat)
    check("%s: every call of the run carries it (%s)" % (label, ", ".join(
        sorted({k for k, _ in flat}))), flat and all(v == VALUE for _, v in flat), flat)
    if H.TRANSPORT == "http1":
        check("%s: BidiAppend calls were made, with the header" % label,
              sum(1 for k, v in flat if k == "BidiAppend" and v == VALUE) >= 2, flat)

    # without tools: no header anywhere
    n0 = nreq(fake)
    st, r = chat(px, "scenario:th_plain", None, [{"role": "user", "content": "hi"}])
    flat = recorded(fake, n0, start)
    eq("%s: without tools the answer is as before" % label, (st, r["content"]), (200, "Hello"))
    check("%s: without tools no call carries the header" % label,
          flat and all(v is None for _, v in flat), flat)
    # tools with tool_choice "none": the run gets no tools, so no header either
    n0 = nreq(fake)
    st, r = chat(px, "scenario:th_plain", [WEATHER], [{"role": "user", "content": "hi"}],
                 tool_choice="none")
    flat = recorded(fake, n0, start)
    check("%s: tools with tool_choice none: no header" % label,
          st == 200 and flat and all(v is None for _, v in flat), (st, flat))


def t_client(fake, px):
    t_headers(fake, px, "client mode")
    # streamed, parallel MCP calls: two tool calls in one response, both results on one run
    k0 = len(runs_of(fake, "th_parallel"))
    msgs = [{"role": "user", "content": "weather twice"}]
    st, r = chat(px, "scenario:th_parallel", [WEATHER], msgs, stream=True)
    calls = r["tool_calls"]
    if check("parallel: two MCP calls -> two tool calls in one streamed response",
             st == 200 and len(calls) == 2, (st, r)):
        eq("parallel: names and arguments as Cursor sent them",
           [(c["function"]["name"], jload(c["function"]["arguments"])) for c in calls],
           [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})])
        msgs += [{"role": "assistant", "content": None, "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sun"},
                 {"role": "tool", "tool_call_id": calls[1]["id"], "content": "snow"}]
        st, r = chat(px, "scenario:th_parallel", [WEATHER], msgs, stream=True)
        eq("parallel: both results reach the held run", (st, r["content"]), (200, "A:sun B:snow"))
        eq("parallel: one Cursor run", len(runs_of(fake, "th_parallel")) - k0, 1)
    # a native exec step: the fake (as Cursor with the header) has no such tool: loud
    e0 = len(fake.state().get("errors") or [])
    st, r = chat(px, "scenario:th_native", [BASH], [{"role": "user", "content": "run ls"}])
    errs = (fake.state().get("errors") or [])[e0:]
    check("client mode: the fake refuses a native exec step loudly (the client sees an error)",
          st >= 400 and "despite_header" in str(r.get("raw")), (st, r))
    check("client mode: ... and records it as a validation error",
          len(errs) == 1 and "native shell exec" in errs[0]["error"], errs)
    fake.ctl("/reset", {})
    eq("client mode: nothing came despite the header so far: /metrics 0", metric(px), 0)
    st, b, _ = px.get("/status.json")
    t = (jload(b) or {}).get("tools") or {}
    eq("status.json: client mode, honoured", (t.get("mode"), t.get("honoured"),
                                              t.get("native_despite_header")),
       ("client", True, 0))
    check("status.json: says so in words",
          (t.get("text") or "").startswith("Cursor honoured the tools header: yes"), t)


def t_despite(fake, px):
    """Cursor ignores the header: the native exec is mapped as in cursor mode, and counted."""
    for n in (1, 2):
        msgs = [{"role": "user", "content": "run ls"}]
        st, r = chat(px, "scenario:th_despite", [BASH], msgs)
        calls = r["tool_calls"]
        if not check("despite %d: the shell exec still becomes the client's bash call" % n,
                     st == 200 and len(calls) == 1 and calls[0]["function"]["name"] == "bash"
                     and (jload(calls[0]["function"]["arguments"]) or {}).get("command")
                     == "ls", (st, r)):
            continue
        msgs += [{"role": "assistant", "content": None, "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.txt"}]
        st, r = chat(px, "scenario:th_despite", [BASH], msgs)
        check("despite %d: its result reaches Cursor (held run)" % n,
              st == 200 and (r["content"] or "").startswith("SHELL:")
              and "a.txt" in r["content"], (st, r))
        eq("despite %d: counted on /metrics (%s)" % (n, METRIC), metric(px), n)
    eq("despite: logged once, the first time", log_count(px, LOG_WORDS), 1)
    st, b, _ = px.get("/status.json")
    t = (jload(b) or {}).get("tools") or {}
    eq("status.json: not honoured, with the count", (t.get("honoured"),
                                                     t.get("native_despite_header")), (False, 2))
    check("status.json: in words, with the count",
          (t.get("text") or "").startswith("Cursor honoured the tools header: no (2 native "
                                           "execs"), t)
    st, js, _ = px.get("/status.js")
    check("the status page shows it", b"tools-text" in js and b"s.tools.text" in js, js[-400:])
    eq("despite: no validation errors in the fake", fake.state().get("errors"), [])


def make_png(w, h):
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def t_results(fake, px):
    """MCP results through the Messages API: is_error, and an image."""
    def messages(body):
        st, b, _ = px.request("POST", "/v1/messages", body,
                              headers={"anthropic-version": "2023-06-01"}, timeout=60)
        return st, jload(b) or {}

    png = make_png(5, 4)
    for is_error in (True, False):
        fake.ctl("/reset", {})
        msgs = [{"role": "user", "content": "look"}]
        st, j = messages({"model": "scenario:th_shot", "max_tokens": 100, "messages": msgs,
                          "tools": [SHOT]})
        uses = [c for c in j.get("content") or [] if c.get("type") == "tool_use"]
        if not check("messages (is_error %s): the MCP call is a tool_use of that name"
                     % is_error, st == 200 and len(uses) == 1 and uses[0]["name"] == "screenshot"
                     and uses[0]["input"] == {"window": "main"}, (st, j)):
            continue
        msgs += [{"role": "assistant", "content": j["content"]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                               "is_error": is_error, "content": [
                                                   {"type": "text", "text": "the window"},
                                                   {"type": "image", "source": {
                                                       "type": "base64", "media_type": "image/png",
                                                       "data": base64.b64encode(png).decode()}}]}]}]
        st, j = messages({"model": "scenario:th_shot", "max_tokens": 100, "messages": msgs,
                          "tools": [SHOT]})
        text = "".join(c.get("text", "") for c in j.get("content") or [] if c.get("type") == "text")
        eq("messages (is_error %s): text and image as McpResult content, on the held run"
           % is_error, (st, text), (200, "IMAGES:1 image/png 5x4 %dB TEXT:the window" % len(png)))
        rs = runs_of(fake, "th_shot")
        eq("messages (is_error %s): one run; McpSuccess.is_error %s" % (is_error, is_error),
           [(x["exec_results"].get("1") or {}).get("mcp_is_error") for x in rs], [is_error])


def t_cursor_mode(fake, tmp, token):
    px = H.Proxy(tmp, "cursor-mode", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "10", "CURSOR_OAI_TOOL_MODE": "cursor"})
    try:
        fake.ctl("/reset", {})
        n0 = nreq(fake)
        msgs = [{"role": "user", "content": "run ls"}]
        st, r = chat(px, "scenario:th_native", [BASH], msgs)
        calls = r["tool_calls"]
        if check("cursor mode: a native shell exec becomes the client's bash call, as before",
                 st == 200 and len(calls) == 1 and calls[0]["function"]["name"] == "bash",
                 (st, r)):
            msgs += [{"role": "assistant", "content": None, "tool_calls": calls},
                     {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.txt"}]
            st, r = chat(px, "scenario:th_native", [BASH], msgs)
            check("cursor mode: its result reaches Cursor on the held run",
                  st == 200 and "a.txt" in (r["content"] or ""), (st, r))
        flat = recorded(fake, n0, "Run" if H.TRANSPORT == "h2" else "RunSSE")
        check("cursor mode: no call carries the header, with tools",
              flat and all(v is None for _, v in flat), flat)
        eq("cursor mode: nothing counted", metric(px), 0)
        st, b, _ = px.get("/status.json")
        t = (jload(b) or {}).get("tools") or {}
        eq("cursor mode: status.json", (t.get("mode"), t.get("honoured")), ("cursor", None))
        eq("cursor mode: no validation errors in the fake", fake.state().get("errors"), [])
    finally:
        px.stop()


def t_grpcweb(fake, tmp, token):
    """HTTP/1.1 only: the gRPC-web profile's RunSSE and BidiAppend carry it too."""
    if H.TRANSPORT != "http1":
        return
    px = H.Proxy(tmp, "grpcweb", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "10", "CURSOR_OAI_PROFILE": "grpc-web"})
    try:
        fake.ctl("/reset", {})
        t_headers(fake, px, "grpc-web")
    finally:
        px.stop()


def t_bad_mode(tmp, fake, token):
    for bad in ("native", "Client", "mcp"):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
        env.update({"HOME": tmp, "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
                    "CURSOR_ACCESS_TOKEN": token, "CURSOR_OAI_TOOL_MODE": bad})
        r = subprocess.run(H.proxy_cmd() + ["serve", "--listen", "127.0.0.1:%d" % H.free_port()],
                           env=env, cwd=tmp, capture_output=True, text=True, timeout=20)
        check("CURSOR_OAI_TOOL_MODE=%s: the start fails with a clear error" % bad,
              r.returncode != 0 and "CURSOR_OAI_TOOL_MODE must be client or cursor"
              in r.stderr, (r.returncode, r.stderr[-500:]))


def doctor(fake, tmp, token, args, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    home = os.path.join(tmp, "home-doctor")
    os.makedirs(home, exist_ok=True)
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
                "CURSOR_ACCESS_TOKEN": token, "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION,
                "CURSOR_OAI_IDLE_TIMEOUT": "10", "CURSOR_OAI_TRANSPORT": H.TRANSPORT})
    env.update(extra or {})
    r = subprocess.run(H.proxy_cmd() + ["doctor"] + args, env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=180)
    return r.returncode, r.stdout + r.stderr


def t_doctor(fake, tmp, token):
    fake.ctl("/reset", {})
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:th_plain"])
    check("doctor, header honoured: 'Cursor honoured the tools header: yes'",
          rc == 0 and re.search(r"OK   tools +\(\s*\d+ ms\) Cursor honoured the tools header: yes \(0 native "
                                r"execs", out), out[-1500:])
    check("doctor: its run sent the header (the run's header names)", HDR in out, out[-1500:])
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:th_doctor_despite"])
    check("doctor, a native exec despite the header: 'no', with the count",
          rc == 0 and re.search(r"WARN tools +\(\s*\d+ ms\) Cursor honoured the tools header: no \(1 native "
                                r"exec came", out), out[-1500:])
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:th_plain"],
                     {"CURSOR_OAI_TOOL_MODE": "cursor"})
    check("doctor, cursor mode: the header is not sent, and says so",
          rc == 0 and "Cursor honoured the tools header: not sent (CURSOR_OAI_TOOL_MODE=cursor"
          in out and HDR not in out, out[-1500:])
    eq("doctor: no validation errors in the fake", fake.state().get("errors"), [])


def main():
    only, keep = S.options()
    if S.binary_missing():
        return 0
    tmp = S.make_tmp()
    token = H.session_token("auth0|tools_header")
    try:
        fake = H.Fake(tmp, scenarios(), token, config={"client_version": H.CLIENT_VERSION})
        px = H.Proxy(tmp, "client", fake.url(), fake.ca, token,
                     extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "10"})
        S.sections((("client", lambda: t_client(fake, px)),
                    ("results", lambda: t_results(fake, px)),
                    ("despite", lambda: t_despite(fake, px)),
                    ("cursor", lambda: t_cursor_mode(fake, tmp, token)),
                    ("grpcweb", lambda: t_grpcweb(fake, tmp, token)),
                    ("bad", lambda: t_bad_mode(tmp, fake, token)),
                    ("doctor", lambda: t_doctor(fake, tmp, token))), only)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    return S.finish(keep)


if __name__ == "__main__":
    sys.exit(main())
