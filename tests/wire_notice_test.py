#!/usr/bin/python3
"""A product that notices when Cursor changes (unknown wire fields), against the fake Cursor.

The fake sends fields and oneof members this version's schema does not declare (at the top
of an AgentServerMessage, inside an InteractionUpdate and a TextDeltaUpdate, a TurnEndedUpdate
field, an unknown update kind, message kind, exec kind and query kind) and an error with a
Connect code and a detail type this version does not know. Checked: each is logged once (the
first time only), counted on /metrics, named on the status page and by `cursor-oai doctor`;
the answer is the same as without them; `doctor --capture FILE` writes a transcript with
shapes, sizes and timings but no prompt, answer, token or key.

Run from the repo root:  COAI_TEST_TRANSPORT=http1|h2 /usr/bin/python3 tests/wire_notice_test.py
Env: CURSOR_OAI_BIN (default build/cursor-oai). Prints `RESULT <passed> <failed>` last.
"""

import json
import os
import re
import subprocess
import sys
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402

S = H.Suite("wire_notice", limit=2000, below=True)
check, eq = S.check, S.eq

END = [{"op": "turn_ended", "tokens": [10, 2, 0, 0, 0]}, {"op": "trailer", "status": 0}]
PROMPT = "PROMPT-NEVER-IN-A-CAPTURE-" + os.urandom(4).hex()
ANSWER = "ANSWER-NEVER-IN-A-CAPTURE"

# (the words the log, the status page and doctor use, the /metrics labels)
KINDS = [
    ("AgentServerMessage message kind 47 (wire type 2)", 'message="AgentServerMessage",field="47"'),
    ("TextDeltaUpdate field 9 (wire type 0)", 'message="TextDeltaUpdate",field="9"'),
    ("InteractionUpdate update kind 40 (wire type 2)", 'message="InteractionUpdate",field="40"'),
    ("InteractionUpdate field 41 (wire type 0)", 'message="InteractionUpdate",field="41"'),
    ("AgentServerMessage message kind 50 (wire type 2)", 'message="AgentServerMessage",field="50"'),
    ("TurnEndedUpdate field 6 (wire type 0)", 'message="TurnEndedUpdate",field="6"'),
    ("ExecServerMessage exec kind 60 (wire type 2)", 'message="ExecServerMessage",field="60"'),
    ("InteractionQuery query kind 20 (wire type 2)", 'message="InteractionQuery",field="20"'),
]
ERROR_KINDS = [
    ('error code "brand_new_code"', 'message="error",field="code brand_new_code"'),
    ('error detail type "type.googleapis.com/google.rpc.BrandNew"',
     'message="error",field="detail type type.googleapis.com/google.rpc.BrandNew"'),
]
LOG_WORDS = "cursor sent something this version does not know: "


def scenarios():
    plain = [{"op": "text", "text": "Hello"}, {"op": "text", "text": " world"}]
    unknown = [
        {"op": "text", "text": "Hello", "unknown": [{"at": [], "field": 47, "wire": 2},
                                                    {"at": [1, 1], "field": 9, "wire": 0}]},
        {"op": "variant", "at": [1], "field": 40},
        {"op": "variant", "at": [], "field": 50},
        {"op": "text", "text": " world", "unknown": [{"at": [1], "field": 41, "wire": 0}]},
        {"op": "variant", "at": [2], "field": 60, "id": 9},
        {"op": "variant", "at": [7], "field": 20, "id": 3},
        {"op": "turn_ended", "tokens": [10, 2, 0, 0, 0],
         "unknown": [{"at": [1, 14], "field": 6, "wire": 0}]},
        {"op": "trailer", "status": 0}]
    tool = {"op": "exec", "kind": "mcp", "id": 1, "exec_id": "exec-cap-1",
            "tool_name": "doctor_probe", "args": {}, "tool_call_id": "toolu_cap1", "hold": True}
    answer = [{"op": "text", "text": ANSWER, "unknown": [{"at": [], "field": 47, "wire": 2}]}]
    return {
        "wn_plain": {"steps": plain + END},
        "wn_unknown": {"steps": unknown},
        # a frame that comes while the run is held (after the tool call's response ended) is
        # kept for the next response and fed to it then: counted once all the same
        "wn_held": {"steps": [
            dict(tool, tool_name="probe"),
            {"op": "text", "text": "while held ",
             "unknown": [{"at": [], "field": 48, "wire": 0}]},
            {"op": "await_results", "max_s": 60},
            {"op": "text", "text": "done"}] + END},
        "wn_error": {"steps": [
            {"op": "text", "text": "partial"},
            {"op": "end_stream", "json": {"error": {
                "code": "brand_new_code", "message": "something new",
                "details": [{"type": "type.googleapis.com/google.rpc.BrandNew",
                             "value": "AA=="}]}}}]},
        # doctor's probe turn gets a plain answer; its capture turn a tool call, and after
        # the tool's result (held run, or a new run with the history) the answer
        "wn_capture": {"when": [
            {"prompt_contains": "[Tool result for", "steps": answer + END},
            {"prompt_contains": "doctor_probe", "steps": [
                dict(tool, unknown=[{"at": [2, 11], "field": 30, "wire": 0}]),
                {"op": "await_results", "max_s": 60}] + answer + END}],
            "steps": [{"op": "text", "text": "OK"}] + END},
    }


def content(body):
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def stream_content(px, model):
    st, _, raw, _ = H.stream_chat(px.port, {"model": model, "stream": True, "messages": [
        {"role": "user", "content": "hi"}]})
    ev = H.parse_sse(raw or b"")
    return st, ev["content"], ev["done"]


def log_count(px, words):
    with open(px.proc.log_path, errors="replace") as f:
        return f.read().count(words)


def metric(px, labels):
    st, body, _ = px.get("/metrics")
    m = re.search(r"^cursor_oai_wire_unknown_total\{%s\} (\d+)$" % re.escape(labels),
                  body.decode(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def t_messages(fake, px):
    st, body, _ = px.chat("scenario:wn_plain")
    want = content(body)
    eq("the plain run answers", (st, want), (200, "Hello world"))
    want_stream = stream_content(px, "scenario:wn_plain")
    for n in (1, 2):
        st, body, _ = px.chat("scenario:wn_unknown")
        eq("run %d with unknown fields and kinds: the same answer as without them" % n,
           (st, content(body)), (200, want))
    eq("streamed with unknown fields and kinds: the same answer as without them",
       stream_content(px, "scenario:wn_unknown"), want_stream)
    H.wait_for(lambda: log_count(px, KINDS[-1][0]) > 0, 5)
    for words, labels in KINDS:
        eq("logged once, the first time: %s" % words, log_count(px, LOG_WORDS + words), 1)
        eq("/metrics counts it per run: %s" % labels, metric(px, labels), 3)
    with open(px.proc.log_path, errors="replace") as f:
        line = [x for x in f if LOG_WORDS + KINDS[0][0] in x]
    check("the log line says how to report it",
          line and "please report it with 'cursor-oai doctor'" in line[0], line)


def t_errors(fake, px):
    for n in (1, 2):
        st, body, _ = px.chat("scenario:wn_error")
        check("run %d ending in an error this version does not know: still an error" % n,
              st >= 400, (st, body[:300]))
    for words, labels in ERROR_KINDS:
        eq("logged once: %s" % words, log_count(px, LOG_WORDS + words), 1)
        eq("/metrics: %s" % labels, metric(px, labels), 2)


def t_held(fake, px):
    words = "AgentServerMessage field 48 (wire type 0)"
    tools = [{"type": "function", "function": {"name": "probe", "description": "a probe",
                                               "parameters": {"type": "object",
                                                              "properties": {}}}}]
    msgs = [{"role": "user", "content": "use probe"}]
    st, body, _ = px.request("POST", "/v1/chat/completions", {
        "model": "scenario:wn_held", "stream": False, "tools": tools, "messages": msgs})
    try:
        m = json.loads(body)["choices"][0]["message"]
        call = m["tool_calls"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        check("held: the tool call comes back", False, body[:500])
        return
    # the frame after the tool call has been read (held, or before the run was parked)
    check("held: the frame after the tool call is read",
          H.wait_for(lambda: log_count(px, LOG_WORDS + words) > 0, 10), "")
    st, body, _ = px.request("POST", "/v1/chat/completions", {
        "model": "scenario:wn_held", "stream": False, "tools": tools, "messages": msgs + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "fine"}]})
    check("held: the follow-up answers", st == 200 and "done" in (content(body) or ""),
          body[:500])
    eq("held: logged once", log_count(px, LOG_WORDS + words), 1)
    eq("held: counted once, not again when the kept frame is fed to the next response",
       metric(px, 'message="AgentServerMessage",field="48"'), 1)


def t_status(fake, px):
    st, body, _ = px.get("/status.json")
    s = json.loads(body)
    text = s.get("wire_unknown") or ""
    for words, _ in KINDS + ERROR_KINDS:
        check("status.json names it: %s" % words, words in text, text)
    check("status.json counts them", "AgentServerMessage message kind 47 (wire type 2) (3)"
          in text, text)
    st, js, _ = px.get("/status.js")
    check("the status page says so in words", b"Cursor sent things this version does not know: "
          in js, js[-600:])


def doctor(fake, tmp, token, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    home = os.path.join(tmp, "home-doctor")
    os.makedirs(home, exist_ok=True)
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
                "CURSOR_ACCESS_TOKEN": token, "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION,
                "CURSOR_OAI_IDLE_TIMEOUT": "10", "CURSOR_OAI_TRANSPORT": H.TRANSPORT})
    r = subprocess.run(H.proxy_cmd() + ["doctor"] + args, env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=180)
    return r.returncode, r.stdout + r.stderr


def t_doctor(fake, tmp, token):
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:wn_plain"])
    check("doctor on a known wire: says nothing was unknown",
          rc == 0 and "nothing Cursor sent was unknown to this version" in out, out[-1500:])
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:wn_unknown"])
    check("doctor lists what Cursor sent that this version does not know",
          rc == 0 and "Cursor sent things this version does not know: " in out
          and all(w in out for w, _ in KINDS), out[-2000:])
    check("doctor says how to report it", "--capture FILE" in out, out[-1500:])


def t_capture(fake, tmp, token):
    path = os.path.join(tmp, "capture.txt")
    rc, out = doctor(fake, tmp, token, ["--model", "scenario:wn_capture", "--capture", path])
    check("doctor --capture: one tool call, then its result",
          rc == 0 and "written to %s: one tool call" % path in out, out[-1500:])
    try:
        with open(path) as f:
            cap = f.read()
    except OSError as e:
        check("doctor --capture wrote the file", False, e)
        return
    check("the capture file is readable by its owner only",
          os.stat(path).st_mode & 0o077 == 0, oct(os.stat(path).st_mode))
    check("the capture has a request head, with authorization left out",
          re.search(r"request  HTTP/", cap) and "authorization: <redacted, " in cap
          and "Bearer" not in cap, cap[:1500])
    check("the capture keeps harmless header values",
          "x-cursor-client-version: %s" % H.CLIENT_VERSION in cap
          and "content-type: application/" in cap, cap[:1500])
    for what, s in (("the token", token), ("the prompt's words", "doctor_probe tool once"),
                    ("the answer", ANSWER), ("the tool's result", "ready\""),
                    ("the tool's name", "doctor_probe\"")):
        check("the capture holds no %s" % what, s not in cap, cap[:3000])
    key = re.search(r"x-blob-encryption-key: (\S+)", cap)
    check("x-blob-encryption-key, when sent, is left out",
          key is None or key.group(1) == "<redacted,", cap[:1500])
    check("each message each way: shape, size, time",
          re.search(r"^\s+\d+ ms  C>S\s+\d+ bytes  AgentClientMessage\{1/2\[\d+\]AgentRunRequest\{",
                    cap, re.M)
          and re.search(r"^\s+\d+ ms  S>C\s+\d+ bytes  flags 0  AgentServerMessage\{2/2\[\d+\]"
                        r"ExecServerMessage\{", cap, re.M)
          and re.search(r"C>S\s+\d+ bytes  AgentClientMessage\{2/2\[\d+\]ExecClientMessage\{",
                        cap), cap[-3000:])
    check("a field this version does not know is marked, inside the message that has it",
          re.search(r"McpArgs\{[^}]*!30/0", cap) and "!47/2[" in cap, cap[-3000:])
    check("the turn's end is there", re.search(r"S>C\s+\d+ bytes  flags 0  AgentServerMessage"
                                               r"\{1/2\[\d+\]InteractionUpdate\{14/2\[\d+\]"
                                               r"TurnEndedUpdate\{", cap), cap[-1500:])


def main():
    only, keep = S.options()
    if S.binary_missing():
        return 0
    tmp = S.make_tmp()
    token = H.session_token("auth0|wire_notice")
    try:
        fake = H.Fake(tmp, scenarios(), token, config={"client_version": H.CLIENT_VERSION})
        px = H.Proxy(tmp, "notice", fake.url(), fake.ca, token,
                     extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "10"})
        S.sections((("messages", lambda: t_messages(fake, px)),
                    ("errors", lambda: t_errors(fake, px)),
                    ("held", lambda: t_held(fake, px)),
                    ("status", lambda: t_status(fake, px)),
                    ("doctor", lambda: t_doctor(fake, tmp, token)),
                    ("capture", lambda: t_capture(fake, tmp, token))), only)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    return S.finish(keep)


if __name__ == "__main__":
    sys.exit(main())
