#!/usr/bin/python3
"""Held runs, heartbeats and the CLI's exec answers, end to end:
build/cursor-oai (or $CURSOR_OAI_BIN) between curl / plain HTTP / the openai SDK / OpenCode
and the fake upstream, which holds a run open after an exec, checks the results (type, order,
ids, stream_close), stalls like the live server when they are wrong, and can go hollow or
close a held run. Every fallback (held run -> fresh replayed run) has a check here that fails
when the fallback is removed. Prints `RESULT <passed> <failed>` last.
  tests/held_test.py [--only a,b] [--keep]
  sections: parity,held,ids,fallback,clients,fast,memory,watchdog,roles"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402

NPM = os.environ.get("E2E_NPM_DIR", os.path.join(H.ROOT, "build", "npm"))
NODE = shutil.which("node") or "node"
OPENCODE = os.path.join(NPM, "node_modules", ".bin", "opencode")
S = H.Suite("held")


# The suite scripts Cursor's native execs with tools present: its proxies run in cursor mode.
Proxy = H.cursor_mode_proxy


check, eq = S.check, S.eq
END, REPLAY, REPLAYED = H.END, H.REPLAY, H.REPLAYED


def read_exec(i, path, **kw):
    st = {"op": "exec", "kind": "read", "id": i, "exec_id": "exec-read-%04d" % i, "path": path,
          "hold": True}
    st.update(kw)
    return st


def roles_target(ws):
    return os.path.join(ws, "roles dir", "it's $(touch pwned).txt")


def scenarios(ws):
    f = os.path.join(ws, "hello.txt")
    hold_hb = {"op": "repeat", "n": 100000, "interval": 0.2, "steps": [{"op": "heartbeat"}]}
    return {
        # issue 10 item 4: a run nobody heartbeats stalls
        "p_heartbeat": {"steps": [{"op": "require_heartbeat", "within_s": 8},
                                  {"op": "text", "text": "alive"}] + END},
        # issue 10 item 5: execs no tool matches -> throw + stream_close, or the turn stalls
        # (mcp_state_exec_args wants its own result since 2026-09: upstream_messages_test.py)
        "p_unmapped": {"steps": [
            {"op": "exec", "kind": "delete", "id": 11, "exec_id": "exec-del-11",
             "args_hex": "0a022f78", "expect": "throw", "wait_reply": 3},
            {"op": "exec", "kind": "pi_read", "id": 12, "exec_id": "exec-pi-12",
             "args_hex": "0a0178", "expect": "throw", "wait_reply": 3},
            {"op": "exec", "kind": "computer_use", "id": 13, "expect": "throw", "wait_reply": 3},
            {"op": "text", "text": "carried on"}] + END},
        "p_kvmeta": {"steps": [
            {"op": "kv_set_blob", "id": 1, "data": "blob-x", "metadata_hex": "0a0474657374"},
            {"op": "kv_get_blob", "id": 2, "data_of": "blob-x", "expect": "blob-x",
             "metadata_hex": ""},
            {"op": "text", "text": "kv ok"}] + END},
        # issue 11: held runs
        "h_read": {"when": REPLAY, "steps": [
            {"op": "text", "text": "Reading."}, read_exec(1, f),
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "GOT:"}] + END},
        "h_shell": {"when": REPLAY, "steps": [
            {"op": "exec", "kind": "shell_stream", "id": 3, "exec_id": "exec-sh-3",
             "command": "cat hello.txt", "cwd": ws, "hold": True},
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 3, "prefix": "SHELL:"}] + END},
        "h_parallel": {"when": REPLAY, "steps": [
            read_exec(1, f),
            {"op": "exec", "kind": "grep", "id": 2, "exec_id": "exec-grep-2", "pattern": "secret",
             "path": ws, "hold": True},
            {"op": "exec", "kind": "ls", "id": 3, "exec_id": "exec-ls-3", "path": ws,
             "hold": True},
            {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "R1:"},
            {"op": "text_from_result", "id": 2, "prefix": " R2:"},
            {"op": "text_from_result", "id": 3, "prefix": " R3:"}] + END},
        "h_five": {"when": REPLAY, "steps": sum(
            [[read_exec(i, f), {"op": "await_results", "max_s": 60}] for i in range(1, 6)], [])
            + [{"op": "text", "text": "FIVE DONE"}] + END},
        # fallbacks
        "h_hollow": {"when": REPLAY, "steps": [read_exec(1, f),
                                               {"op": "await_results", "max_s": 60}, hold_hb]},
        "h_mistyped": {"when": REPLAY, "steps": [
            read_exec(1, f, expect_kind="shell_stream"), {"op": "await_results", "max_s": 60},
            {"op": "text", "text": "never"}] + END},
        "h_close": {"when": REPLAY, "steps": [read_exec(1, f), {"op": "sleep", "s": 0.3},
                                              {"op": "close"}]},
        # issue 24 item 7: turn_ended on a stream Cursor keeps open; a run that goes silent
        # or sends nothing but heartbeats (and checkpoints), also on a held run's follow-up
        "w_te_open": {"steps": [{"op": "text", "text": "done here"}, {"op": "turn_ended"},
                                hold_hb]},
        "w_silent": {"steps": [{"op": "text", "text": "partial"}, {"op": "sleep", "s": 60}]},
        "w_ckpt": {"steps": [{"op": "repeat", "n": 100000, "interval": 0.2, "steps": [
            {"op": "heartbeat"}, {"op": "checkpoint", "used_tokens": 10}]}]},
        "w_held_te_open": {"when": REPLAY, "steps": [
            read_exec(1, f), {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 1, "prefix": "GOT:"}, {"op": "turn_ended"},
            hold_hb]},
        "w_held_hb": {"when": REPLAY, "steps": [
            read_exec(1, f), {"op": "await_results", "max_s": 60},
            {"op": "text", "text": "working on it"}, hold_hb]},
        "w_held_silent": {"when": REPLAY, "steps": [
            read_exec(1, f), {"op": "await_results", "max_s": 60},
            {"op": "text", "text": "working on it"}, {"op": "sleep", "s": 60}]},
        # conversation memory: a checkpoint per turn; a resumed run reads the stored blob
        "m_chat": {"when": [{"resumed": True, "steps": [
            {"op": "kv_get_blob", "id": 5, "data_of": "turn-state", "expect": "turn-state"},
            {"op": "checkpoint", "root_prompt_messages_json": ['{"role":"user","n":2}'],
             "used_tokens": 900}, {"op": "echo"}] + END}],
            "steps": [{"op": "kv_set_blob", "id": 1, "data": "turn-state"},
                      {"op": "checkpoint", "root_prompt_messages_json": ['{"role":"user"}'],
                       "used_tokens": 800}, {"op": "echo"}] + END},
        "m_reject": {"when": [{"resumed": True, "steps": [
            {"op": "trailer", "status": 3, "message": "Conversation state is invalid"}]}],
            "steps": [{"op": "checkpoint"}, {"op": "echo"}] + END},
        # issue 31 item 2: a client whose one tool is run_commands {commands[]} writes, then
        # reads, through it (the commands the proxy writes for that shell)
        "r_shell_only": {"when": REPLAY, "steps": [
            {"op": "exec", "kind": "write", "id": 1, "exec_id": "exec-write-1",
             "path": roles_target(ws), "file_text": "roles-it's $(x)\nline 2\n", "hold": True},
            {"op": "await_results", "max_s": 60},
            read_exec(2, roles_target(ws)), {"op": "await_results", "max_s": 60},
            {"op": "text_from_result", "id": 2, "prefix": "READ:"}] + END},
        "m_missing": {"when": [{"resumed": True, "steps": [
            {"op": "kv_get_blob", "id": 9, "blob_id_hex": "22" * 32,
             "on_missing": "Connect error internal: Blob not found"},
            {"op": "echo"}] + END}],
            "steps": [{"op": "checkpoint"}, {"op": "echo"}] + END},
    }


TOOLS = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"},
                                                         "cwd": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "grep", "description": "Search",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"},
                                                         "path": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "list", "description": "List a directory",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


# a client that has nothing but a tool running a list of shell commands (issue 31 item 2)
RC_TOOLS = [{"type": "function", "function": {
    "name": "run_commands", "description": "Run shell commands in order",
    "parameters": {"type": "object", "properties": {"commands": {
        "type": "array", "items": {"type": "string"}}}, "required": ["commands"],
        "additionalProperties": False}}}]


def run_tool(ws, name, args):
    """What a client does with our tool calls (in the test workspace only)."""
    if name == "run_commands":
        return "".join(subprocess.run(["bash", "-c", c], cwd=ws, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, timeout=10).stdout.decode()
                       for c in args["commands"])
    if name == "read":
        with open(args["path"]) as f:
            return f.read()
    if name == "bash":
        return subprocess.run(args["command"], shell=True, cwd=args.get("cwd") or ws,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=10).stdout.decode()
    if name == "grep":
        out = []
        for fn in sorted(os.listdir(args.get("path") or ws)):
            p = os.path.join(args.get("path") or ws, fn)
            if os.path.isfile(p) and args["pattern"] in open(p).read():
                out.append(p)
        return "\n".join(out)
    if name == "list":
        return "\n".join(sorted(os.listdir(args.get("path") or ws)))
    return "unknown tool"


def chat(px, body, stream):
    """-> dict(status, content, tool_calls [{id,name,arguments}], finish, t)"""
    t0 = time.time()
    body = dict(body, stream=stream)
    if stream:
        st, hd, raw, _ = H.stream_chat(px.port, body, timeout=60)
        s = H.parse_sse(raw)
        return {"status": st, "content": s["content"], "tool_calls": s["tool_calls"],
                "finish": s["finish"], "errors": s["errors"], "bad": s["bad"],
                "t": time.time() - t0}
    st, raw, hd = px.request("POST", "/v1/chat/completions", body, timeout=60)
    try:
        j = json.loads(raw)
        m = j["choices"][0]["message"]
        return {"status": st, "content": m.get("content") or "", "finish":
                [j["choices"][0]["finish_reason"]], "errors": [], "bad": [],
                "tool_calls": [{"id": t["id"], "name": t["function"]["name"],
                                "arguments": t["function"]["arguments"]}
                               for t in m.get("tool_calls") or []], "t": time.time() - t0}
    except (ValueError, KeyError, IndexError, TypeError):
        return {"status": st, "content": "", "tool_calls": [], "finish": [], "errors": [raw],
                "bad": [], "t": time.time() - t0}


def follow_up(msgs, r, ws, results=None):
    """Append the assistant tool calls and the tool results (all, or the given ones)."""
    msgs = list(msgs)
    msgs.append({"role": "assistant", "content": r["content"] or None, "tool_calls": [
        {"id": t["id"], "type": "function",
         "function": {"name": t["name"], "arguments": t["arguments"]}}
        for t in r["tool_calls"]]})
    for t in r["tool_calls"]:
        if results is not None and t["id"] not in results:
            continue
        out = run_tool(ws, t["name"], json.loads(t["arguments"]))
        msgs.append({"role": "tool", "tool_call_id": t["id"], "content": out})
    return msgs


def continuation_events(px):
    """cursor_oai_continuation_events_total from /metrics: {event: value}."""
    st, body, _ = px.get("/metrics")
    out = {}
    for ln in body.decode().splitlines():
        if ln.startswith('cursor_oai_continuation_events_total{event="'):
            k = ln.split('"')[1]
            out[k] = int(float(ln.rsplit(" ", 1)[1]))
    return out


def runs_of(fake, scenario):
    return [r for r in fake.runs() if r["scenario"] == scenario]


def log_of(px):
    return open(px.proc.log_path, encoding="utf-8", errors="replace").read()


def logged(px, text, n=1):
    """The proxy logged text (at least n times); log lines are written by a queue, so wait a
    little for them."""
    return H.wait_for(lambda: log_of(px).count(text) >= n, 20)


def appends_of(run, typ, kind=None):
    return [a for a in run["appends"] if a["message"].get("type") == typ
            and (kind is None or a["message"].get("kind") == kind)]


def upstream_clean(fake, n0):
    errs = fake.state()["errors"][n0:]
    check("fake upstream saw no protocol/validation errors", not errs, errs[:5])


# ---------------------------------------------------------------------------------------------

def t_parity(tmp, fake, token, ws):
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "parity", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20"})
    t0 = time.time()
    r = chat(px, {"model": "scenario:p_heartbeat", "messages": [
        {"role": "user", "content": "hi"}]}, True)
    eq("a run held open past 5 s gets client heartbeats and goes on", r["content"], "alive")
    run = runs_of(fake, "p_heartbeat")[-1]
    hb = appends_of(run, "client_heartbeat")
    check("client_heartbeat appends arrived", len(hb) >= 1, run["appends"])
    if hb:
        first = hb[0]["t"] - run["appends"][0]["t"]
        check("first client_heartbeat about 5 s after the start (%.1f s)" % first,
              4.5 <= first <= 7.5)
    eq("seqnos 0, 1, 2 ... without gaps", [a["seqno"] for a in run["appends"]],
       list(range(len(run["appends"]))))
    check("the run did not stall", "stalled" not in run["stream"], run["stream"])
    del t0
    r = chat(px, {"model": "scenario:p_unmapped", "tools": TOOLS[:1], "messages": [
        {"role": "user", "content": "hi"}]}, False)
    eq("execs no tool matches (delete, pi_read, computer use): turn goes on",
       r["content"], "carried on")
    run = runs_of(fake, "p_unmapped")[-1]
    for i in (11, 12, 13):
        kinds = [(m.get("type"), m.get("kind")) for m in run["exec_replies"].get(str(i), [])]
        eq("exec %d answered throw then stream_close" % i, kinds,
           [("exec_control", "throw"), ("exec_control", "stream_close")])
    r = chat(px, {"model": "scenario:p_kvmeta", "messages": [
        {"role": "user", "content": "hi"}]}, True)
    eq("KV answers echo the server's metadata (field 4)", r["content"], "kv ok")
    run = runs_of(fake, "p_kvmeta")[-1]
    eq("set_blob_result metadata", run["kv_replies"]["1"].get("metadata_hex"), "0a0474657374")
    eq("get_blob_result metadata (empty, still present)",
       run["kv_replies"]["2"].get("metadata_hex"), "")
    upstream_clean(fake, n0)
    px.stop()


def loop(px, ws, model, stream, first_msg="go", pause=0.0, steps_max=8):
    """Drive a tool loop to its end: -> (responses, messages)."""
    msgs = [{"role": "user", "content": first_msg}]
    out = []
    for _ in range(steps_max):
        r = chat(px, {"model": model, "messages": msgs, "tools": TOOLS}, stream)
        out.append(r)
        if not r["tool_calls"]:
            break
        if pause:
            time.sleep(pause)
        msgs = follow_up(msgs, r, ws)
    return out, msgs


def t_held(tmp, fake, token, ws, secret):
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "held", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20", "CURSOR_OAI_HOLLOW_TIMEOUT": "10"})
    for stream in (False, True):
        k0 = len(runs_of(fake, "h_read"))
        rs, _ = loop(px, ws, "scenario:h_read", stream, pause=3.5)
        eq("stream=%s: read tool call, then the answer" % stream,
           [bool(r["tool_calls"]) for r in rs], [True, False])
        check("stream=%s: the held run answered with the tool output" % stream,
              rs[-1]["content"].startswith("GOT:") and secret in rs[-1]["content"], rs[-1])
        runs = runs_of(fake, "h_read")[k0:]
        eq("stream=%s: one upstream run for the loop" % stream, len(runs), 1)
        if runs:
            run = runs[0]
            res = run["exec_results"].get("1") or {}
            eq("stream=%s: read answered as read_result + stream_close" % stream,
               res.get("frames"), [["read_result", "success"], ["stream_close", None]])
            ehb = [a for a in appends_of(run, "exec_control", "heartbeat")
                   if a["message"].get("id") == 1]
            check("stream=%s: exec heartbeats for the pending exec while the client "
                  "worked" % stream, len(ehb) >= 1, [a["message"] for a in run["appends"]])
            check("stream=%s: local_execution_time_ms on the result (%s)" % (
                stream, res.get("local_execution_time_ms")),
                (res.get("local_execution_time_ms") or [0])[0] >= 3000)
            eq("stream=%s: seqnos without gaps" % stream, [a["seqno"] for a in run["appends"]],
               list(range(len(run["appends"]))))
            check("stream=%s: no ResumeAction on the held run" % stream,
                  not appends_of(run, "action", "resume"))
    # shell: the CLI's stream (start, stdout, exit, stream_close)
    rs, _ = loop(px, ws, "scenario:h_shell", True)
    check("shell_stream exec became a bash tool call", rs[0]["tool_calls"] and
          rs[0]["tool_calls"][0]["name"] == "bash", rs[0])
    check("shell output reached the held run", secret in rs[-1]["content"], rs[-1])
    run = runs_of(fake, "h_shell")[-1]
    eq("shell answered start, stdout, exit, stream_close",
       (run["exec_results"].get("3") or {}).get("frames"),
       [["shell_stream", "start"], ["shell_stream", "stdout"], ["shell_stream", "exit"],
        ["stream_close", None]])
    # parallel execs: one response with three tool calls, all answered in exec order
    for stream in (True, False):
        k0 = len(runs_of(fake, "h_parallel"))
        rs, _ = loop(px, ws, "scenario:h_parallel", stream)
        eq("stream=%s: three execs -> three parallel tool calls" % stream,
           [t["name"] for t in rs[0]["tool_calls"]], ["read", "grep", "list"])
        eq("stream=%s: finish tool_calls" % stream, rs[0]["finish"], ["tool_calls"])
        c = rs[-1]["content"]
        check("stream=%s: every result reached the run" % stream,
              secret in c and "R2:" in c and "hello.txt" in c.split("R3:")[-1], c)
        eq("stream=%s: one upstream run" % stream, len(runs_of(fake, "h_parallel")) - k0, 1)
    # a follow-up that answers only some of the calls: no continuation, a replay
    r = chat(px, {"model": "scenario:h_parallel", "messages": [
        {"role": "user", "content": "go"}], "tools": TOOLS}, False)
    msgs = follow_up([{"role": "user", "content": "go"}], r, ws,
                     results={r["tool_calls"][0]["id"]} if r["tool_calls"] else set())
    r2 = chat(px, {"model": "scenario:h_parallel", "messages": msgs, "tools": TOOLS}, False)
    eq("partial results: replayed, not continued", r2["content"], REPLAYED)
    check("logged why", logged(px, "do not answer every pending tool call"))
    # five steps: one run, each result sent once
    k0 = len(runs_of(fake, "h_five"))
    ev0 = continuation_events(px)
    rs, _ = loop(px, ws, "scenario:h_five", True)
    ev1 = continuation_events(px)
    eq("/metrics: five-step loop held five times and continued five times",
       (ev1.get("run_held", 0) - ev0.get("run_held", 0),
        ev1.get("run_continued", 0) - ev0.get("run_continued", 0)), (5, 5))
    eq("five-step loop: five tool calls then the answer", [bool(r["tool_calls"]) for r in rs],
       [True] * 5 + [False])
    eq("five-step loop: final text", rs[-1]["content"], "FIVE DONE")
    runs = runs_of(fake, "h_five")[k0:]
    eq("five-step loop: one upstream run", len(runs), 1)
    if runs:
        eq("five-step loop: each result sent once", len(appends_of(runs[0], "exec_result")), 5)
    upstream_clean(fake, n0)
    px.stop()


# issue 31 item 4: clients that rewrite the tool-call ids they were given
REWRITES = (("prefix call_<id>", lambda orig, k: "call_" + orig),
            ("wrap fc-<id>-1", lambda orig, k: "fc-%s-1" % orig),
            ("re-number tool_<n>", lambda orig, k: "tool_%d" % k))


def loop_rewritten(px, ws, model, stream, rw, steps_max=8):
    """A tool loop whose client answers each call under an id of its own (rw(orig, n)), and
    keeps that id in its history: -> responses."""
    msgs = [{"role": "user", "content": "go"}]
    out, n = [], 0
    for _ in range(steps_max):
        r = chat(px, {"model": model, "messages": msgs, "tools": TOOLS}, stream)
        out.append(r)
        if not r["tool_calls"]:
            break
        calls = []
        for t in r["tool_calls"]:
            calls.append(dict(t, id=rw(t["id"], n)))
            n += 1
        msgs = follow_up(msgs, dict(r, tool_calls=calls), ws)
    return out


def t_ids(tmp, fake, token, ws, secret):
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "ids", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20", "CURSOR_OAI_HOLLOW_TIMEOUT": "10"})
    for i, (name, rw) in enumerate(REWRITES):
        stream = i % 2 == 0
        k0 = len(runs_of(fake, "h_parallel"))
        rs = loop_rewritten(px, ws, "scenario:h_parallel", stream, rw)
        c = rs[-1]["content"]
        check("%s (stream=%s): three parallel calls, every result reached the held run"
              % (name, stream), len(rs) == 2 and secret in c and "R2:" in c and
              "hello.txt" in c.split("R3:")[-1], c)
        eq("%s (stream=%s): the loop on ONE Cursor run" % (name, stream),
           len(runs_of(fake, "h_parallel")) - k0, 1)
        k0 = len(runs_of(fake, "h_five"))
        rs = loop_rewritten(px, ws, "scenario:h_five", not stream, rw)
        eq("%s (stream=%s): five steps, each continued: the answer" % (name, not stream),
           ([bool(r["tool_calls"]) for r in rs], rs[-1]["content"]),
           ([True] * 5 + [False], "FIVE DONE"))
        eq("%s (stream=%s): the five-step loop on ONE Cursor run" % (name, not stream),
           len(runs_of(fake, "h_five")) - k0, 1)
    # re-numbered ids with results in another order than the calls: still paired by the
    # assistant message, each result to its own exec
    k0 = len(runs_of(fake, "h_parallel"))
    msgs = [{"role": "user", "content": "go"}]
    r = chat(px, {"model": "scenario:h_parallel", "messages": msgs, "tools": TOOLS}, False)
    calls = [dict(t, id="x%d" % (9 - k)) for k, t in enumerate(r["tool_calls"])]
    f = follow_up(msgs, dict(r, tool_calls=calls), ws)
    f = f[:2] + list(reversed(f[2:]))
    r2 = chat(px, {"model": "scenario:h_parallel", "messages": f, "tools": TOOLS}, False)
    c = r2["content"]
    check("re-numbered, results in reverse order: each result reached its own exec",
          secret in c.split("R2:")[0] and "hello.txt" in c.split("R3:")[-1], c)
    eq("... on ONE Cursor run", len(runs_of(fake, "h_parallel")) - k0, 1)
    upstream_clean(fake, n0)
    px.stop()


def t_fallback(tmp, fake, token, ws, secret):
    n0 = len(fake.state()["errors"])
    env = {"CURSOR_OAI_IDLE_TIMEOUT": "20", "CURSOR_OAI_HOLLOW_TIMEOUT": "2"}
    px = Proxy(tmp, "fb", fake.url(), fake.ca, token, extra_env=env)

    def two_steps(p, model, stream=False, pause=0.0):
        rs, _ = loop(p, ws, model, stream, pause=pause, steps_max=2)
        return rs

    # hollow: the run shows nothing after the results -> a fresh run replays
    for model, what in (("scenario:h_hollow", "hollow after the results"),
                        ("scenario:h_mistyped", "the server wanted another result type")):
        k0 = len(runs_of(fake, model.split(":")[1]))
        rs = two_steps(px, model, stream=True)
        eq("%s: the follow-up is answered by a replayed fresh run" % what,
           rs[-1]["content"], REPLAYED)
        check("%s: nothing reached the client before the fallback" % what,
              not rs[-1]["errors"] and rs[-1]["finish"] == ["stop"], rs[-1])
        eq("%s: two upstream runs" % what, len(runs_of(fake, model.split(":")[1])) - k0, 2)
    check("hollow fallback logged at info", logged(px, "no progress within "
                                                    "CURSOR_OAI_HOLLOW_TIMEOUT"))
    st = runs_of(fake, "h_mistyped")[-2]["stream"]
    check("mis-typed result: the fake stalled that run", "stalled" in st, st)
    # the upstream closed the held run
    rs = two_steps(px, "scenario:h_close", pause=1.0)
    eq("closed held run: replayed", rs[-1]["content"], REPLAYED)
    check("closed held run logged", H.wait_for(
        lambda: "Cursor closed the held run" in log_of(px)
        or "Cursor ended the run while it was held" in log_of(px), 20))
    px.stop()
    # the circuit breaker: after 3 hollow continuations runs are not held
    px = Proxy(tmp, "breaker", fake.url(), fake.ca, token, extra_env=env)
    for i in range(3):
        two_steps(px, "scenario:h_hollow")
    check("breaker: logged after 3 hollow continuations", logged(
        px, "hollow continuations in a row"))
    k0 = len(runs_of(fake, "h_read"))
    rs = two_steps(px, "scenario:h_read")
    eq("breaker open: the next tool loop replays (no held run)", rs[-1]["content"], REPLAYED)
    eq("breaker open: two runs", len(runs_of(fake, "h_read")) - k0, 2)
    px.stop()
    # TTL and cap
    px = Proxy(tmp, "ttl", fake.url(), fake.ca, token,
                 extra_env=dict(env, CURSOR_OAI_HELD_RUN_TTL="2", CURSOR_OAI_HELD_RUNS_MAX="1"))
    rs = two_steps(px, "scenario:h_read", pause=3.5)
    eq("TTL passed: replayed", rs[-1]["content"], REPLAYED)
    check("TTL release logged", logged(px, "CURSOR_OAI_HELD_RUN_TTL"))
    msgs_a = [{"role": "user", "content": "conversation A"}]
    ra = chat(px, {"model": "scenario:h_read", "messages": msgs_a, "tools": TOOLS}, False)
    rb, _ = loop(px, ws, "scenario:h_read", False, first_msg="conversation B")
    check("cap 1: the newer conversation continues on its held run",
          rb[-1]["content"].startswith("GOT:"), rb[-1])
    r = chat(px, {"model": "scenario:h_read", "messages": follow_up(msgs_a, ra, ws),
                  "tools": TOOLS}, False)
    eq("cap 1: the older held run was released, its follow-up replays", r["content"], REPLAYED)
    check("release logged", logged(px, "more than 1 held runs"))
    px.stop()
    # CURSOR_OAI_CONTINUATION=off: one fresh run per request, exactly as before
    px = Proxy(tmp, "off", fake.url(), fake.ca, token,
                 extra_env=dict(env, CURSOR_OAI_CONTINUATION="off"))
    k0 = len(runs_of(fake, "h_parallel"))
    rs = two_steps(px, "scenario:h_parallel", stream=True)
    eq("off: one tool call per response (as before)", len(rs[0]["tool_calls"]), 1)
    eq("off: the follow-up replays", rs[-1]["content"], REPLAYED)
    runs = runs_of(fake, "h_parallel")[k0:]
    eq("off: two upstream runs", len(runs), 2)
    H.wait_for(lambda: runs_of(fake, "h_parallel")[k0]["stream"].get("ended") != "running", 20)
    runs = runs_of(fake, "h_parallel")[k0:]
    check("off: the first run was closed, not held", runs and runs[0]["stream"].get("ended")
          in ("client_closed", "completed"), runs and runs[0]["stream"])
    check("off: no heartbeat kept it open", runs and not appends_of(runs[0], "exec_control",
                                                                    "heartbeat"))
    px.stop()
    # scale-out: the follow-up reaches an instance that does not hold the run
    pa = Proxy(tmp, "inst-a", fake.url(), fake.ca, token, extra_env=env)
    pb_ = Proxy(tmp, "inst-b", fake.url(), fake.ca, token, extra_env=env)
    msgs = [{"role": "user", "content": "two instances"}]
    r = chat(pa, {"model": "scenario:h_read", "messages": msgs, "tools": TOOLS}, True)
    r2 = chat(pb_, {"model": "scenario:h_read", "messages": follow_up(msgs, r, ws),
                    "tools": TOOLS}, True)
    eq("two instances: the other instance replays", r2["content"], REPLAYED)
    check("two instances: logged at info", logged(pb_, "no held run for these tool results on "
                                                 "this instance"))
    pa.stop()
    pb_.stop()
    upstream_clean(fake, n0)


def t_clients(tmp, fake, token, ws, secret):
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "clients", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20", "CURSOR_OAI_HOLLOW_TIMEOUT": "20"})
    # curl, streaming, two steps
    k0 = len(runs_of(fake, "h_read"))

    def curl(body):
        r = subprocess.run(["curl", "-sS", "-N", "-m", "60", px.base + "/v1/chat/completions",
                            "-H", "Content-Type: application/json", "-d", json.dumps(body)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=70)
        return H.parse_sse(r.stdout)
    msgs = [{"role": "user", "content": "curl"}]
    s = curl({"model": "scenario:h_read", "messages": msgs, "tools": TOOLS, "stream": True})
    ok = check("curl: tool call", s["tool_calls"] and s["finish"] == ["tool_calls"], s)
    if ok:
        r = {"content": s["content"], "tool_calls": s["tool_calls"]}
        s2 = curl({"model": "scenario:h_read", "messages": follow_up(msgs, r, ws),
                   "tools": TOOLS, "stream": True})
        check("curl: the follow-up continued the held run", secret in s2["content"]
              and s2["content"].startswith("GOT:"), s2)
        eq("curl: one upstream run", len(runs_of(fake, "h_read")) - k0, 1)
    # curl, Cursor's delete through the bash tool (wc -c < PATH && rm -- PATH). Cursor's turn
    # stalls on a delete_result success without file_size (a 0 is the same bytes; the fake
    # stalls like it): a result with no size (an empty tool message: a client that lost its
    # command's output) or an empty file's 0 goes as delete_result.error with a sentence
    gone = os.path.join(ws, "gone.txt")
    fake.ctl("/scenario", {"name": "h_del", "scenario": {"when": REPLAY, "steps": [
        {"op": "exec", "kind": "delete", "id": 1, "exec_id": "exec-del-1", "hold": True,
         "args_hex": "0a%02x" % len(gone.encode()) + gone.encode().hex()},
        {"op": "await_results", "max_s": 60},
        {"op": "text_from_fields", "id": 1, "template": "DEL {variant}: {error}"}] + END}})
    for what, text, lost, want in (
            ("size", "to be deleted\n", False, ("success", 14, "")),
            ("no output", "to be deleted\n", True, ("error", 0, "returned no output, neither "
                                                  "the file's size nor an error, so the "
                                                  "delete is not confirmed")),
            ("empty file", "", False, ("error", 0, "gone.txt was deleted (it was empty"))):
        with open(gone, "w") as fh:
            fh.write(text)
        k0 = len(runs_of(fake, "h_del"))
        msgs = [{"role": "user", "content": "delete it"}]
        s = curl({"model": "scenario:h_del", "messages": msgs, "tools": TOOLS, "stream": True})
        tc = s["tool_calls"][0] if s["tool_calls"] else {}
        if not check("curl delete, %s: a bash call running wc -c and rm" % what,
                     tc.get("name") == "bash" and "wc -c < " in tc.get("arguments", ""), s):
            continue
        r = {"content": s["content"], "tool_calls": s["tool_calls"]}
        if lost:
            msgs = follow_up(msgs, r, ws, results=set())
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": ""})
        else:
            msgs = follow_up(msgs, r, ws)
        s2 = curl({"model": "scenario:h_del", "messages": msgs, "tools": TOOLS, "stream": True})
        runs = runs_of(fake, "h_del")[k0:]
        f1 = ((runs[0]["exec_results"] if runs else {}).get("1") or {}).get("fields") or {}
        eq("curl delete, %s: Cursor got delete_result %s" % (what, want[0]),
           (f1.get("result"), f1.get("variant"), f1.get("file_size", 0)),
           ("delete_result", want[0], want[1]))
        check("curl delete, %s: ... whose text says so" % what, want[2] in f1.get("error", ""),
              f1)
        check("curl delete, %s: the turn went on (no stall, one run): %s" % (what, want[0]),
              len(runs) == 1 and "stalled" not in runs[0]["stream"]
              and s2["content"].startswith("DEL %s: " % want[0]), (s2, runs and runs[0]["stream"]))
    # the openai SDK: a three-step tool loop
    if os.path.isdir(os.path.join(NPM, "node_modules", "openai")):
        script = H.stage_script(os.path.join(HERE, "e2e", "sdk_toolloop.mjs"), NPM)
        fake.ctl("/scenario", {"name": "h_sdk3", "scenario": {"when": REPLAY, "steps": [
            read_exec(1, os.path.join(ws, "hello.txt")), {"op": "await_results"},
            read_exec(2, os.path.join(ws, "notes.txt")), {"op": "await_results"},
            read_exec(3, os.path.join(ws, "hello.txt")), {"op": "await_results"},
            {"op": "text_from_result", "id": 2, "prefix": "THREE:"}] + END}})
        k0 = len(runs_of(fake, "h_sdk3"))
        r = subprocess.run([NODE, script, px.base + "/v1", "scenario:h_sdk3"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, cwd=NPM)
        try:
            out = json.loads(r.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"fatal": r.stdout.decode()[-500:] + r.stderr.decode()[-800:]}
        eq("sdk: three tool steps then the answer", out.get("steps"), 3)
        check("sdk: the answer carries the second tool's output",
              "notes-" in (out.get("final") or ""), out)
        eq("sdk: one upstream run for the whole loop", len(runs_of(fake, "h_sdk3")) - k0, 1)
    else:
        print("skipped: openai npm package not installed (run tests/e2e_run.sh once)")
    # OpenCode: a task that needs several tools, on one held run
    if os.path.exists(OPENCODE):
        t_opencode(tmp, fake, px, ws, secret)
    else:
        print("skipped: opencode not installed (run tests/e2e_run.sh once)")
    upstream_clean(fake, n0)
    px.stop()


FINAL_OC = "OC-MULTI: read, globbed and searched."


def t_opencode(tmp, fake, px, ws, secret):
    f = os.path.join(ws, "hello.txt")
    fake.ctl("/scenario", {"name": "oc_multi", "scenario": {"when": [
        {"prompt_contains": "[Tool result for", "steps": [
            {"op": "text", "text": FINAL_OC + " (replayed)"}] + END},
        {"has_tools": False, "steps": [{"op": "text", "text": "title"}, {"op": "turn_ended"}]}],
        "steps": [
            {"op": "text", "text": "Working."}, read_exec(1, f),
            {"op": "await_results", "max_s": 90},
            {"op": "exec", "kind": "grep", "id": 2, "exec_id": "exec-glob-2", "pattern": "",
             "glob": "*.txt", "path": ws, "hold": True},
            {"op": "await_results", "max_s": 90},
            {"op": "exec", "kind": "grep", "id": 3, "exec_id": "exec-grep-3", "pattern": "secret",
             "path": ws, "hold": True},
            {"op": "await_results", "max_s": 90},
            {"op": "text", "text": FINAL_OC}] + END}})
    home = os.path.join(tmp, "oc-home")
    os.makedirs(home, exist_ok=True)
    cfg = {"$schema": "https://opencode.ai/config.json",
           "provider": {"coai": {"npm": "@ai-sdk/openai-compatible", "name": "cursor-oai",
                                 "options": {"baseURL": px.base + "/v1",
                                             "apiKey": "sk-local-test"},
                                 "models": {"scenario:oc_multi": {"name": "e2e"}}}},
           "model": "coai/scenario:oc_multi", "small_model": "coai/scenario:oc_multi"}
    with open(os.path.join(ws, "opencode.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "OPENCODE"))}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
                "XDG_CACHE_HOME": os.path.join(home, ".cache"),
                "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
                "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "PWD": ws, "NODE_PATH": os.path.join(NPM, "node_modules")})
    k0 = len(runs_of(fake, "oc_multi"))
    try:
        r = subprocess.run([OPENCODE, "run", "--print-logs", "-m", "coai/scenario:oc_multi",
                            "Read hello.txt, find the text files and search for the secret."],
                           cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=240, stdin=subprocess.DEVNULL)
        out, rc = r.stdout.decode("utf-8", "replace"), r.returncode
        err = r.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode(), (e.stderr or b"").decode(), "timeout"
    detail = "rc=%s\nstdout: %s\nstderr: %s" % (rc, out[-1500:], err[-2500:])
    eq("opencode: exit code", rc, 0) or print(detail)
    check("opencode: printed the final text of the held run", FINAL_OC in out
          and "(replayed)" not in out, detail)
    runs = [x for x in runs_of(fake, "oc_multi")[k0:] if x["appends"]
            and x["appends"][0]["message"].get("tools")]
    eq("opencode: one upstream run with tools for the whole task", len(runs), 1)
    if runs:
        res = runs[0]["exec_results"]
        eq("opencode: read, glob and grep results all typed right",
           [(res.get(k) or {}).get("ok") for k in ("1", "2", "3")], [True, True, True])
        check("opencode: its read output reached the run", secret in (res.get("1") or {}).get(
            "text", ""), res)


def turns(px, model, texts, stream, edit_first=None):
    """Send a conversation turn by turn (each request = history + the new user message).
    -> list of answers."""
    msgs, out = [], []
    for i, t in enumerate(texts):
        msgs.append({"role": "user", "content": t})
        body = {"model": model, "messages": msgs}
        if edit_first and i == len(texts) - 1:
            body = {"model": model, "messages": [dict(msgs[0], content=edit_first)] + msgs[1:]}
        r = chat(px, body, stream)
        out.append(r)
        msgs.append({"role": "assistant", "content": r["content"]})
    return out


def t_memory(tmp, fake, token, ws):
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "mem", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20"})
    for stream in (False, True):
        k0 = len(runs_of(fake, "m_chat"))
        rs = turns(px, "scenario:m_chat", ["first question", "second question", "third one"],
                   stream)
        eq("stream=%s: three answers" % stream, [r["content"] for r in rs],
           ["ECHO:first question", "ECHO:second question", "ECHO:third one"])
        runs = runs_of(fake, "m_chat")[k0:]
        eq("stream=%s: three runs" % stream, len(runs), 3)
        if len(runs) == 3:
            rr = [x["appends"][0]["message"] for x in runs]
            eq("stream=%s: the first run starts a new conversation" % stream,
               rr[0]["conversation_state_hex"], "")
            for i in (1, 2):
                eq("stream=%s: turn %d resumes from the previous checkpoint" % (stream, i + 1),
                   rr[i]["conversation_state_hex"], runs[i - 1]["checkpoints_sent"][-1])
                eq("stream=%s: turn %d keeps the conversation_id" % (stream, i + 1),
                   rr[i]["conversation_id"], rr[0]["conversation_id"])
            eq("stream=%s: only the new message goes upstream" % stream,
               [rr[1]["prompt"], rr[2]["prompt"]], ["second question", "third one"])
            eq("stream=%s: the stored blob goes along (pre_fetched_blobs)" % stream,
               len(rr[1]["pre_fetched_blobs"]), 1)
            eq("stream=%s: get_blob served from the remembered store" % stream,
               (runs[1]["kv_replies"].get("5") or {}).get("blob_data_hex"),
               b"turn-state".hex())
    # an edited history is not resumed
    k0 = len(runs_of(fake, "m_chat"))
    rs = turns(px, "scenario:m_chat", ["alpha", "beta"], False, edit_first="ALPHA (edited)")
    runs = runs_of(fake, "m_chat")[k0:]
    check("edited history: replayed in full, no checkpoint", len(runs) == 2 and not runs[1][
        "appends"][0]["message"]["conversation_state_hex"] and "ALPHA (edited)" in runs[1][
        "appends"][0]["message"]["prompt"], [x["appends"][0]["message"] for x in runs])
    # Cursor rejects the checkpoint / asks for a blob nobody has: replay, the client sees an
    # answer
    for model, what in (("m_reject", "checkpoint rejected"), ("m_missing", "missing blob")):
        k0 = len(runs_of(fake, model))
        rs = turns(px, "scenario:" + model, ["one", "two"], True)
        eq("%s: the second turn is still answered" % what, rs[-1]["content"], "ECHO:two")
        check("%s: no error reached the client" % what, not rs[-1]["errors"] and
              rs[-1]["status"] == 200, rs[-1])
        runs = runs_of(fake, model)[k0:]
        eq("%s: fresh, resumed, replayed" % what,
           [bool(x["appends"][0]["message"]["conversation_state_hex"]) for x in runs],
           [False, True, False])
        if len(runs) == 3:
            check("%s: the replay carries the whole history" % what,
                  "User: one" in runs[2]["appends"][0]["message"]["prompt"])
    check("resume failures logged at info", logged(px, "checkpoint resume of conversation", 2))
    ev = continuation_events(px)
    eq("/metrics: checkpoint resumes (2 per three-turn chat, 1 each for the rejected "
       "checkpoint and the missing blob) and resumes that fell back (those 2)",
       (ev.get("conversation_resumed"), ev.get("conversation_resume_failed")), (6, 2))
    check("/metrics: conversations stored", ev.get("conversation_stored", 0) >= 6, ev)
    px.stop()
    # another instance does not remember: it replays
    pa = Proxy(tmp, "mem-a", fake.url(), fake.ca, token)
    pb_ = Proxy(tmp, "mem-b", fake.url(), fake.ca, token)
    msgs = [{"role": "user", "content": "instance one"}]
    r = chat(pa, {"model": "scenario:m_chat", "messages": msgs}, False)
    msgs += [{"role": "assistant", "content": r["content"]},
             {"role": "user", "content": "instance two"}]
    k0 = len(runs_of(fake, "m_chat"))
    r2 = chat(pb_, {"model": "scenario:m_chat", "messages": msgs}, False)
    eq("two instances: answered", r2["content"], "ECHO:instance two")
    runs = runs_of(fake, "m_chat")[k0:]
    check("two instances: replayed, no checkpoint", len(runs) == 1 and not runs[0]["appends"][
        0]["message"]["conversation_state_hex"], runs and runs[0]["appends"][0]["message"])
    pa.stop()
    pb_.stop()
    px = Proxy(tmp, "mem-off", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_CONTINUATION": "off"})
    k0 = len(runs_of(fake, "m_chat"))
    turns(px, "scenario:m_chat", ["x", "y"], False)
    runs = runs_of(fake, "m_chat")[k0:]
    check("off: no checkpoint resume", len(runs) == 2 and not runs[1]["appends"][0][
        "message"]["conversation_state_hex"])
    px.stop()
    upstream_clean(fake, n0)


def read_until(sock, raw, until):
    """raw plus what the socket gives until `until` is in it (or EOF)."""
    while until not in raw:
        d = sock.recv(65536)
        if not d:
            break
        raw += d
    return raw


def raw_post(px, sock, body, until):
    """POST a chat body on an open socket; the bytes read until `until` (or EOF)."""
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (px.port, len(body)) + body)
    return read_until(sock, b"", until)


def t_fast(tmp, fake, token, ws, secret):
    """A client that sends its tool results the moment it has read the tool calls (streaming:
    at `data: [DONE]`, on a connection opened beforehand, as keep-alive pools do): the
    follow-up can reach the proxy before the run that asked for the results is parked. It
    must still continue that run, not replay the conversation."""
    steps = 100
    fake.ctl("/scenario", {"name": "h_fast", "scenario": {"when": REPLAY, "steps": sum(
        [[read_exec(i, os.path.join(ws, "hello.txt")), {"op": "await_results", "max_s": 60}]
         for i in range(1, steps + 1)], []) + [{"op": "text", "text": "FAST DONE"}] + END}})
    px = Proxy(tmp, "fast", fake.url(), fake.ca, token)
    k0 = len(runs_of(fake, "h_fast"))
    msgs = [{"role": "user", "content": "fast"}]
    n = 0
    final = None
    socks = []
    nxt = socket.create_connection(("127.0.0.1", px.port), timeout=30)
    try:
        for _ in range(steps + 1):
            sock, nxt = nxt, socket.create_connection(("127.0.0.1", px.port), timeout=30)
            socks.append(sock)
            body = json.dumps({"model": "scenario:h_fast", "messages": msgs, "tools": TOOLS,
                               "stream": True}).encode()
            raw = raw_post(px, sock, body, b"data: [DONE]")
            ev = H.parse_sse(H.dechunk(raw.partition(b"\r\n\r\n")[2]))
            if not ev["tool_calls"]:
                final = ev["content"] or raw[-300:]
                break
            n += 1
            msgs = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": t["id"], "type": "function",
                 "function": {"name": t["name"], "arguments": t["arguments"]}}
                for t in ev["tool_calls"]]}] + [
                {"role": "tool", "tool_call_id": t["id"], "content": secret}
                for t in ev["tool_calls"]]
    finally:
        for x in socks + [nxt]:
            x.close()
    eq("fast client: %d tool steps then the answer" % steps, (n, final), (steps, "FAST DONE"))
    eq("fast client: one upstream run for the whole loop (no follow-up replayed)",
       len(runs_of(fake, "h_fast")) - k0, 1)
    # The wait for a run to park has a fallback: a follow-up naming the handle of a run that
    # is still streaming, and then ends without asking for tools, waits only until that run
    # ends, then replays (not the full HELD_PARK_WAIT_MS, and never a hang).
    fake.ctl("/scenario", {"name": "h_live", "scenario": {"when": REPLAY, "steps": [
        {"op": "text", "text": "slow "}, {"op": "sleep", "s": 1.5},
        {"op": "text", "text": "end"}] + END}})
    body = json.dumps({"model": "scenario:h_live", "stream": True,
                       "messages": [{"role": "user", "content": "live"}]}).encode()
    sock = socket.create_connection(("127.0.0.1", px.port), timeout=30)
    raw = raw_post(px, sock, body, b'"id":"chatcmpl-')
    handle = raw.split(b'"id":"chatcmpl-', 1)[1][:24].decode()[-12:] if b"chatcmpl-" in raw \
        else "000000000000"
    call_id = "sess_%s__call_x" % handle
    t0 = time.time()
    r = chat(px, {"model": "scenario:h_live", "tools": TOOLS, "messages": [
        {"role": "user", "content": "live"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "read", "arguments": "{\"path\": \"x\"}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "result"}]}, False)
    waited = time.time() - t0
    raw = read_until(sock, raw, b"data: [DONE]")
    sock.close()
    eq("results for a live run that does not park: replayed", r["content"], REPLAYED)
    check("... after waiting for that run to end (about 1.5 s), well before the 5 s bound",
          1.0 <= waited < 4.0, "%.2f s" % waited)
    eq("... the live run itself answered in full",
       H.parse_sse(H.dechunk(raw.partition(b"\r\n\r\n")[2]))["content"], "slow end")
    px.stop()


def t_watchdog(tmp, fake, token, ws, secret):
    """turn_ended ends the response though Cursor keeps the stream open; no inbound frame for
    CURSOR_OAI_SILENCE_TIMEOUT, or only heartbeats/checkpoints for CURSOR_OAI_HEARTBEAT_TIMEOUT,
    fails the turn with an error that says which (set small here: 3 s and 5 s; the idle
    timeout is far away at 120 s, so only the new bounds can end these runs in time)."""
    n0 = len(fake.state()["errors"])
    px = Proxy(tmp, "watchdog", fake.url(), fake.ca, token, extra_env={
        "CURSOR_OAI_IDLE_TIMEOUT": "120", "CURSOR_OAI_SILENCE_TIMEOUT": "3",
        "CURSOR_OAI_HEARTBEAT_TIMEOUT": "5", "CURSOR_OAI_HOLLOW_TIMEOUT": "30"})
    try:
        for stream in (False, True):
            r = chat(px, {"model": "scenario:w_te_open", "messages": [
                {"role": "user", "content": "hi"}]}, stream)
            check("stream=%s: turn_ended on a stream kept open ends the response at once"
                  % stream, r["status"] == 200 and r["content"] == "done here"
                  and r["finish"] == ["stop"] and r["t"] < 3, r)
        silence = "not even a heartbeat (CURSOR_OAI_SILENCE_TIMEOUT is 3 s)"
        hbonly = "nothing but heartbeats and checkpoints for 5 s (CURSOR_OAI_HEARTBEAT_TIMEOUT"
        for model, want, lo, hi in (("scenario:stall_first", silence, 2.5, 10),
                                    ("scenario:w_silent", silence, 2.5, 10),
                                    ("scenario:heartbeats_only", hbonly, 4.5, 12),
                                    ("scenario:w_ckpt", hbonly, 4.5, 12)):
            for stream in (False, True):
                if stream:      # the raw answer: an error before any byte is a plain 504
                    t0 = time.time()
                    st, hd, raw, _ = H.stream_chat(px.port, {"model": model, "stream": True,
                                                             "messages": [{"role": "user",
                                                                           "content": "hi"}]},
                                                   timeout=60)
                    r = {"status": st, "t": time.time() - t0, "raw": raw[-600:]}
                    text = raw.decode("utf-8", "replace")
                else:
                    r = chat(px, {"model": model, "messages": [
                        {"role": "user", "content": "hi"}]}, stream)
                    text = str(r["errors"])
                check("stream=%s: %s fails in %.0f-%.0f s saying so (took %.1f s)"
                      % (stream, model, lo, hi, r["t"]), lo <= r["t"] <= hi and want in text
                      and (stream or r["status"] == 504), r)
        # a held run's follow-up (a non-streaming one that has shown nothing falls back to a
        # fresh run at CURSOR_OAI_HOLLOW_TIMEOUT instead: the fallback section tests that)
        for stream in (False, True):
            rs, _ = loop(px, ws, "scenario:w_held_te_open", stream, steps_max=2)
            check("stream=%s: held follow-up: turn_ended on an open stream ends it at once"
                  % stream, len(rs) == 2 and rs[-1]["content"].startswith("GOT:")
                  and rs[-1]["finish"] == ["stop"] and rs[-1]["t"] < 3, rs[-1:])
            for model, want in (("scenario:w_held_hb", hbonly),
                                ("scenario:w_held_silent", silence)):
                if not stream:
                    continue
                rs, _ = loop(px, ws, model, stream, steps_max=2)
                text = str(rs[-1]["errors"])
                check("stream=%s: held follow-up %s fails saying so (took %.1f s)"
                      % (stream, model, rs[-1]["t"]), len(rs) == 2 and want in text
                      and 2.5 <= rs[-1]["t"] <= 12, rs[-1:])
        check("the watchdog is logged", logged(px, "not even a heartbeat")
              and logged(px, "nothing but heartbeats and checkpoints"))
    finally:
        px.stop()
    r = subprocess.run([H.proxy_cmd()[0], "serve", "--listen", "127.0.0.1:0"],
                       env=dict(os.environ, CURSOR_OAI_SILENCE_TIMEOUT="0"),
                       capture_output=True, text=True, timeout=20)
    check("CURSOR_OAI_SILENCE_TIMEOUT=0 is refused naming it",
          r.returncode == 1 and "CURSOR_OAI_SILENCE_TIMEOUT" in r.stderr, r)
    upstream_clean(fake, n0)


def t_roles(tmp, fake, token, ws, secret):
    """issue 31 item 2: native execs mapped by role; a shell-only client writes and reads"""
    n0 = len(fake.state()["errors"])
    # the native execs are what this checks (caller-owned tool mode would keep them away)
    px = H.Proxy(tmp, "roles", fake.url(), fake.ca, token,
                 extra_env={"CURSOR_OAI_TOOL_MODE": "cursor", "CURSOR_OAI_IDLE_TIMEOUT": "20"})
    target = roles_target(ws)
    for stream in (False, True):
        if os.path.isdir(os.path.dirname(target)):
            shutil.rmtree(os.path.dirname(target))
        k0 = len(runs_of(fake, "r_shell_only"))
        msgs = [{"role": "user", "content": "write it, then read it"}]
        rs = []
        for _ in range(4):
            r = chat(px, {"model": "scenario:r_shell_only", "messages": msgs,
                          "tools": RC_TOOLS}, stream)
            rs.append(r)
            if not r["tool_calls"]:
                break
            msgs = follow_up(msgs, r, ws)
        names = [[t["name"] for t in r["tool_calls"]] for r in rs]
        eq("stream=%s: write and read became run_commands calls, then the answer" % stream,
           names, [["run_commands"], ["run_commands"], []])
        args = [json.loads(r["tool_calls"][0]["arguments"]) for r in rs if r["tool_calls"]]
        check("stream=%s: each call is {commands: [one command]}" % stream,
              all(list(a) == ["commands"] and len(a["commands"]) == 1 for a in args), args)
        got = open(target, encoding="utf-8").read() if os.path.isfile(target) else None
        eq("stream=%s: the file holds the written bytes at the literal path" % stream, got,
           "roles-it's $(x)\nline 2\n")
        check("stream=%s: nothing ran that the path spelled" % stream,
              not os.path.exists(os.path.join(ws, "pwned")))
        # (the fake's text of a read result: the path, then the content)
        check("stream=%s: the read's content reached Cursor" % stream,
              rs[-1]["content"] == "READ:%s\nroles-it's $(x)\nline 2\n" % target, rs[-1])
        runs = runs_of(fake, "r_shell_only")[k0:]
        eq("stream=%s: one upstream run for the loop" % stream, len(runs), 1)
        if runs:
            eq("stream=%s: write answered write_result success + stream_close" % stream,
               (runs[0]["exec_results"].get("1") or {}).get("frames"),
               [["write_result", "success"], ["stream_close", None]])
            eq("stream=%s: read answered read_result success + stream_close" % stream,
               (runs[0]["exec_results"].get("2") or {}).get("frames"),
               [["read_result", "success"], ["stream_close", None]])
    upstream_clean(fake, n0)
    px.stop()


def main():
    only, keep = S.options()
    if S.binary_missing():
        return 0
    tmp = S.make_tmp()
    secret = "lynx-" + os.urandom(4).hex()
    ws = S.workspace(secret)
    with open(os.path.join(ws, "notes.txt"), "w") as f:
        f.write("notes-%s\n" % secret)
    token = H.session_token("auth0|held")
    try:
        fake = H.Fake(tmp, scenarios(ws), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False})
        S.sections((("parity", lambda: t_parity(tmp, fake, token, ws)),
                    ("held", lambda: t_held(tmp, fake, token, ws, secret)),
                    ("ids", lambda: t_ids(tmp, fake, token, ws, secret)),
                    ("fallback", lambda: t_fallback(tmp, fake, token, ws, secret)),
                    ("clients", lambda: t_clients(tmp, fake, token, ws, secret)),
                    ("fast", lambda: t_fast(tmp, fake, token, ws, secret)),
                    ("memory", lambda: t_memory(tmp, fake, token, ws)),
                    ("watchdog", lambda: t_watchdog(tmp, fake, token, ws, secret)),
                    ("roles", lambda: t_roles(tmp, fake, token, ws, secret))), only)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    return S.finish(keep)


if __name__ == "__main__":
    threading.current_thread().name = "held_test"
    sys.exit(main())
