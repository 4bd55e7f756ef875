#!/usr/bin/python3
"""upstream_messages_test.py - what Cursor asks and says since September 2026 (execs, queries, kv,
usage, error strings):
build/cursor-oai (or $CURSOR_OAI_BIN) against the fake upstream, which stalls a turn (heartbeats
only) when an exec 36, a precheck or an interaction query goes unanswered, sends the error
strings users saw live, and reports the turn's tokens in TurnEndedUpdate.

  exec      mcp_state_exec_args (36) -> McpStateExecResult.success with the request's tools,
            filtered by server_identifiers; prechecks 41-43 -> allowlisted no/yes/yes; subagent
            (28) -> a typed SubagentError; an exec without a tool (45, 52) -> a throw naming
            it; envelope fields 19 and 55 are not execs; a shell's description and hard
            timeout reach the client's tool
  query     interaction queries 2-14 answered (8 with an empty success; 9 approved; 10, 11,
            13, 14 refused with a reason)
  kv        set_blob without data acked; get_blob of a key that is not a 32-byte digest
  usage     TurnEndedUpdate's tokens (a live frame's) in OpenAI chat, Anthropic, Responses and
            Gemini usage: Cursor's input already counts the cached tokens
  errors    the live error strings -> status, code and Cursor's words
  live_errors  "parse binary: invalid end group tag" -> 400 naming the tool schema;
            "Conversation state is required" -> once more with the state's mode AGENT
  replay    Conversation data missing / blob missing -> a new conversation, replayed once

Env: CURSOR_OAI_BIN. Prints `RESULT <passed> <failed>` last.
  tests/upstream_messages_test.py [--only a,b] [--keep]"""

import json
import os
import subprocess
import sys
import threading
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402

S = H.Suite("upstream_messages", limit=1500)
check, eq = S.check, S.eq
END = H.END
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "Bash", "description": "Run a command",
                                            "parameters": {"type": "object", "properties": {
                                                "command": {"type": "string"},
                                                "timeout": {"type": "number"},
                                                "description": {"type": "string"}},
                                                "required": ["command"],
                                                "additionalProperties": False}}}]
# input, output, cache read, cache write, reasoning. The input and cache read of a live
# TurnEndedUpdate (late-autumn notes, item 1: input 11,490 / cache read 11,392): Cursor's input
# already contains the cached tokens, as OpenAI counts them
TOKENS = [11490, 40, 11392, 0, 25]
TOKENS_W = [24034, 612, 20014, 1500, 0]  # the second live frame's input and cache read + a write
TOKENS_OVER = [100, 10, 5000, 0, 0]      # a cache read over the input: raw figures, logged once


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def err_trailer(status, message, error=None, title="", detail="", retryable=None):
    st = {"op": "trailer", "status": status, "message": message}
    if error is not None:
        st["details"] = {"error": error, "title": title, "detail": detail,
                         "is_retryable": retryable}
    return [st]


def scenarios():
    q = lambda i, k: {"op": "interaction_query", "id": i, "kind": k, "wait_reply": 5}
    return {
        "a_exec": {"steps": [
            {"op": "exec", "kind": "mcp_state", "id": 36, "exec_id": "exec-36",
             "expect": "mcp_state", "wait_reply": 5, "envelope": True},
            {"op": "exec", "kind": "mcp_state", "id": 37, "exec_id": "exec-37",
             "server_identifiers": ["cursor-tools"], "expect": "mcp_state", "wait_reply": 5},
            {"op": "exec", "kind": "mcp_state", "id": 38, "server_identifiers": ["github"],
             "expect": "mcp_state", "wait_reply": 5},
            {"op": "exec", "kind": "precheck_41", "id": 41, "exec_id": "exec-41",
             "args_hex": "0a0131", "expect": "precheck", "allowlisted": False,
             "wait_reply": 5, "envelope": True},
            {"op": "exec", "kind": "precheck_42", "id": 42, "expect": "precheck",
             "allowlisted": True, "wait_reply": 5},
            {"op": "exec", "kind": "precheck_43", "id": 43, "expect": "precheck",
             "allowlisted": True, "wait_reply": 5},
            {"op": "exec", "kind": "subagent", "id": 28, "args_hex": "0a0178",
             "expect": "subagent_error", "wait_reply": 5, "envelope": True},
            {"op": "exec", "kind": "pi_read", "id": 45, "args_hex": "0a0178", "expect": "throw",
             "wait_reply": 5},
            {"op": "exec", "kind": "mini_swe_agent_bash", "id": 52, "args_hex": "0a0178",
             "expect": "throw", "wait_reply": 5},
            {"op": "text", "text": "all answered"}] + END},
        "a_shell": {"steps": [
            {"op": "exec", "kind": "shell_stream", "id": 5, "exec_id": "exec-sh-5",
             "command": "make test", "cwd": "/w", "timeout_behavior": 2, "hard_timeout": 120000,
             "description": "Run the test suite", "close_stdin": True,
             "conversation_id": "conv-x", "request_id": "req-x", "envelope": True},
            {"op": "sleep", "s": 30}]},
        "a_query": {"steps": [q(2, "web_search"), q(3, "ask_question"), q(4, "switch_mode"),
                              q(5, "exa_search"), q(6, "exa_fetch"), q(7, "create_plan"),
                              q(8, "setup_vm_environment"), q(9, "web_fetch"),
                              q(12, "generate_image"), q(10, "pr_management"),
                              q(11, "mcp_auth"), q(13, "replace_env"), q(14, "connect_scm"),
                              {"op": "text", "text": "queries answered"}] + END},
        "a_kv": {"steps": [
            {"op": "kv_set_blob", "id": 1, "data": "stored-value"},
            {"op": "kv_set_blob", "id": 2, "blob_id_hex": "11" * 32, "data": ""},
            {"op": "kv_get_blob", "id": 3, "data_of": "stored-value", "expect": "stored-value"},
            {"op": "kv_get_blob", "id": 4, "blob_id_hex": b"notes/plan.md".hex(),
             "expect": "notes/plan.md", "on_missing": "failed_precondition: empty blob"},
            {"op": "text", "text": "kv ok"}] + END},
        # a held run (issue 11) whose continuation Cursor cannot find: the follow-up falls back
        # to a fresh run with the whole conversation (never a reset inside the held run)
        "a_held_lost": {"when": [{"prompt_contains": "[Tool result for", "steps": [
            {"op": "text", "text": "REPLAYED"}] + END}], "steps": [
            {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-1", "path": "/w/a.txt",
             "hold": True},
            {"op": "await_results", "max_s": 30},
            {"op": "trailer", "status": 13, "message": "Conversation data missing"}]},
        # errors whose words hold what doctor's advice once keyed on: its advice follows the
        # error's code and kind, never such words
        "a_words_invoice": {"steps": err_trailer(
            8, "You've hit your usage limit; the details are on your invoice")},
        "a_words_context": {"steps": err_trailer(
            4, "deadline passed while building request_context")},
        "a_words_464": {"steps": err_trailer(
            13, "the load balancer answered HTTP 464 to another client")},
        "a_words_h1": {"steps": err_trailer(13, "illegal request line in a tool's output")},
        "a_usage": {"steps": [{"op": "thinking", "text": "hmm"}, {"op": "text", "text": "Hi"},
                              {"op": "step_completed", "id": 1, "ms": 1834},
                              {"op": "turn_ended", "tokens": TOKENS},
                              {"op": "trailer", "status": 0}]},
        # late-autumn notes N15: a tool schema Cursor cannot read (YYE, live)
        "a_schema_tag": {"steps": err_trailer(
            13, "Connect error 502: parse binary: invalid end group tag")},
        # N7, C8: a server that wants ConversationStateStructure.mode = AGENT in the state
        "a_state": {"when": [{"state_mode_not": 1, "steps": err_trailer(
            3, "Conversation state is required [invalid_argument]")}],
            "steps": [{"op": "echo"}] + END},
        "a_state_always": {"steps": err_trailer(
            3, "Conversation state is required [invalid_argument]")},
        "a_usage_w": {"steps": [{"op": "text", "text": "Hi"},
                                {"op": "turn_ended", "tokens": TOKENS_W},
                                {"op": "trailer", "status": 0}]},
        "a_usage_over": {"steps": [{"op": "text", "text": "Hi"},
                                   {"op": "turn_ended", "tokens": TOKENS_OVER},
                                   {"op": "trailer", "status": 0}]},
    }


def chat(px, body, stream=False):
    body = dict(body, stream=stream)
    if stream:
        st, hd, raw, _ = H.stream_chat(px.port, body, timeout=60)
        return st, H.parse_sse(raw), raw
    st, raw, hd = px.request("POST", "/v1/chat/completions", body, timeout=60)
    return st, jload(raw) or {}, raw


def runs_of(fake, scenario):
    return [r for r in fake.runs() if r["scenario"] == scenario]


def upstream_clean(fake, n0):
    errs = fake.state()["errors"][n0:]
    check("fake upstream saw no protocol/validation errors", not errs, errs[:5])


def t_exec(fake, px):
    n0 = len(fake.state()["errors"])
    st, j, raw = chat(px, {"model": "scenario:a_exec", "tools": TOOLS,
                           "messages": [{"role": "user", "content": "hi"}]})
    eq("exec 36, prechecks 41-43 and an unknown exec answered: the turn goes on",
       (st, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
       (200, "all answered"))
    run = (runs_of(fake, "a_exec") or [{}])[-1]
    eq("exec 36 (no filter), 36 for cursor-tools, 36 for another server, prechecks 41 (shell: "
       "not allowlisted), 42 (MCP) and 43 (web fetch) allowlisted, 28 a SubagentError",
       run.get("exec_checks"), {"36": "ok", "37": "ok", "38": "ok", "41": "ok", "42": "ok",
                                "43": "ok", "28": "ok"})
    rep = run.get("exec_replies", {}).get("36") or [{}]
    srv = (rep[0].get("servers") or [{}])[0]
    eq("exec 36: one server cursor-tools, ready, with the request's two tools",
       (srv.get("server_name"), srv.get("server_identifier"), srv.get("status"),
        [t["tool_name"] for t in srv.get("tools") or []]),
       ("Cursor Tools", "cursor-tools", "ready", ["get_weather", "Bash"]))
    eq("exec 36 for another server only: success with no server",
       (run.get("exec_replies", {}).get("38") or [{}])[0].get("servers"), [])
    sa = run.get("exec_replies", {}).get("28") or [{}]
    eq("subagent exec 28 (with envelope fields 19 and 55): subagent_result.error with a "
       "reason, then stream_close",
       [(m.get("type"), m.get("result") or m.get("kind"), m.get("variant")) for m in sa],
       [("exec_result", "subagent_result", "error"), ("exec_control", "stream_close", None)])
    check("the subagent error says to do the task with the provided tools",
          "provided tools" in "".join(sa[0].get("strings") or []), sa[0])
    for eid, name in (("45", "pi_read_args"), ("52", "mini_swe_agent_bash_args")):
        rep = run.get("exec_replies", {}).get(eid) or [{}]
        eq("exec %s (%s): throw naming it, then stream_close" % (eid, name),
           [(m.get("type"), m.get("kind"), name in (m.get("error") or "")) for m in rep],
           [("exec_control", "throw", True), ("exec_control", "stream_close", False)])
    check("the run did not stall", "stalled" not in run.get("stream", {}), run.get("stream"))
    upstream_clean(fake, n0)
    # a shell's description and hard timeout reach a client tool that takes them
    st, j, raw = chat(px, {"model": "scenario:a_shell", "tools": TOOLS,
                           "messages": [{"role": "user", "content": "test it"}]})
    calls = ((j.get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or [{}]
    fn = calls[0].get("function") or {}
    eq("shell exec with description (15) and hard_timeout (14): Bash tool call",
       (st, fn.get("name"), jload(fn.get("arguments"))),
       (200, "Bash", {"command": "make test", "description": "Run the test suite",
                      "timeout": 120000}))


def t_query(fake, px):
    n0 = len(fake.state()["errors"])
    st, j, raw = chat(px, {"model": "scenario:a_query",
                           "messages": [{"role": "user", "content": "hi"}]}, stream=True)
    eq("interaction queries 2-14 answered: the turn goes on", (st, j["content"]),
       (200, "queries answered"))
    run = (runs_of(fake, "a_query") or [{}])[-1]
    got = {k: (v or {}).get("kind") for k, v in (run.get("query_replies") or {}).items()}
    eq("each query answered with its own kind", got,
       {"2": "web_search", "3": "ask_question", "4": "switch_mode", "5": "exa_search",
        "6": "exa_fetch", "7": "create_plan", "8": "setup_vm_environment", "9": "web_fetch",
        "12": "generate_image", "10": "pr_management", "11": "mcp_auth", "13": "replace_env",
        "14": "connect_scm"})
    qr = run.get("query_replies") or {}
    eq("typed outcomes: web fetch approved (Cursor fetches, nothing runs here); PR management, "
       "MCP auth, SCM connect rejected; env replacement failed",
       {k: (qr.get(k) or {}).get("outcome") for k in ("9", "10", "11", "13", "14")},
       {"9": "approved", "10": "rejected", "11": "rejected", "13": "failure",
        "14": "rejected"})
    reasons = [(qr.get(k) or {}).get("reason") or "" for k in ("10", "11", "13", "14")]
    check("each refusal has a reason a model can read",
          all("cursor-oai" in r and "Carry on" in r for r in reasons), reasons)
    eq("setup_vm_environment acked with an empty success",
       ((run.get("query_replies") or {}).get("8") or {}).get("body_hex"), "0a00")
    upstream_clean(fake, n0)


def t_kv(fake, px):
    n0 = len(fake.state()["errors"])
    st, j, raw = chat(px, {"model": "scenario:a_kv",
                           "messages": [{"role": "user", "content": "hi"}]})
    eq("set_blob without data acked; get_blob of a non-digest key gets the key back",
       (st, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
       (200, "kv ok"))
    run = (runs_of(fake, "a_kv") or [{}])[-1]
    kr = run.get("kv_replies") or {}
    eq("set_blob without data: set_blob_result, no error",
       ((kr.get("2") or {}).get("kind"), (kr.get("2") or {}).get("error")),
       ("set_blob_result", None))
    eq("get_blob 'notes/plan.md': the key as data", (kr.get("4") or {}).get("blob_data_hex"),
       b"notes/plan.md".hex())
    upstream_clean(fake, n0)


def t_usage(fake, px):
    inp, out, cr, cw, rs = TOKENS
    for stream in (False, True):
        body = {"model": "scenario:a_usage", "messages": [{"role": "user", "content": "hi"}]}
        if stream:
            body["stream_options"] = {"include_usage": True}
            st, hd, raw, _ = H.stream_chat(px.port, dict(body, stream=True), timeout=60)
            u = None
            for ln in raw.decode().split("\n"):
                if ln.startswith("data: {"):
                    ev = json.loads(ln[6:])
                    if ev.get("usage"):
                        u = ev["usage"]
        else:
            st, j, raw = chat(px, body)
            u = j.get("usage")
        eq("OpenAI chat usage (%s): Cursor's counts, cached and reasoning tokens"
           % ("stream" if stream else "non-stream"),
           (st, u),
           (200, {"prompt_tokens": inp, "completion_tokens": out,
                  "total_tokens": inp + out,
                  "prompt_tokens_details": {"cached_tokens": cr},
                  "completion_tokens_details": {"reasoning_tokens": rs}}))
    st, raw, hd = px.request("POST", "/v1/messages", {
        "model": "scenario:a_usage", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}]})
    u = (jload(raw) or {}).get("usage")
    eq("Anthropic usage: input without the cached parts (11,490 - 11,392), cache read and "
       "creation", (st, u),
       (200, {"input_tokens": inp - cr - cw, "cache_creation_input_tokens": cw,
              "cache_read_input_tokens": cr, "output_tokens": out}))
    st, raw, hd = px.request("POST", "/v1/responses", {
        "model": "scenario:a_usage", "store": False, "input": "hi"})
    u = (jload(raw) or {}).get("usage") or {}
    eq("Responses usage: input_tokens_details.cached_tokens, output_tokens_details."
       "reasoning_tokens", (st, u.get("input_tokens"), u.get("input_tokens_details"),
                            u.get("output_tokens"), u.get("output_tokens_details")),
       (200, inp, {"cached_tokens": cr}, out, {"reasoning_tokens": rs}))
    st, raw, hd = px.request("POST", "/v1beta/models/scenario:a_usage:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    u = (jload(raw) or {}).get("usageMetadata") or {}
    eq("Gemini usageMetadata: promptTokenCount = input, cachedContentTokenCount = cache read",
       (st, u.get("promptTokenCount"), u.get("cachedContentTokenCount"),
        u.get("totalTokenCount")), (200, inp, cr, inp + out))
    # a cache write too: Anthropic's input is what neither the read nor the write covers
    inp, out, cr, cw, rs = TOKENS_W
    st, j, raw = chat(px, {"model": "scenario:a_usage_w",
                           "messages": [{"role": "user", "content": "hi"}]})
    u = j.get("usage") or {}
    eq("OpenAI chat usage with a cache write: prompt_tokens = input, cached = cache read",
       (st, u.get("prompt_tokens"), (u.get("prompt_tokens_details") or {}).get("cached_tokens")),
       (200, inp, cr))
    st, raw, hd = px.request("POST", "/v1/messages", {
        "model": "scenario:a_usage_w", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}]})
    u = (jload(raw) or {}).get("usage")
    eq("Anthropic usage with a cache write: input - cache read - cache write", (st, u),
       (200, {"input_tokens": inp - cr - cw, "cache_creation_input_tokens": cw,
              "cache_read_input_tokens": cr, "output_tokens": out}))
    # a server that counts the other way: raw figures, Anthropic's input 0, logged once
    inp, out, cr, cw, rs = TOKENS_OVER
    for _ in range(2):
        st, j, raw = chat(px, {"model": "scenario:a_usage_over",
                               "messages": [{"role": "user", "content": "hi"}]})
    u = j.get("usage") or {}
    eq("cache read over the input: OpenAI chat keeps the raw figures",
       (st, u.get("prompt_tokens"), (u.get("prompt_tokens_details") or {}).get("cached_tokens")),
       (200, inp, cr))
    st, raw, hd = px.request("POST", "/v1/messages", {
        "model": "scenario:a_usage_over", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}]})
    u = (jload(raw) or {}).get("usage") or {}
    eq("cache read over the input: Anthropic input_tokens never below 0",
       (st, u.get("input_tokens"), u.get("cache_read_input_tokens")), (200, 0, cr))
    log = H.wait_for(lambda: open(px.proc.log_path, errors="replace").read().count(
        "larger than the turn's input") or None, 10)
    eq("cache read over the input: logged once for three runs", log, 1)


def err_of(px, model, text="hi"):
    st, j, raw = chat(px, {"model": model, "messages": [{"role": "user", "content": text}]})
    return st, (j.get("error") or {})


def t_errors(fake, px):
    n0 = len(fake.state()["errors"])
    runs0 = len(fake.runs())
    cases = [
        ("geo block (ERROR_OPENAI, internal)", "scenario:live_geo_internal", 403,
         "unsupported_region", "not available in your country or region"),
        ("geo block (permission_denied)", "scenario:live_geo_denied", 403, "unsupported_region",
         "Model not available in your region"),
        ("High Load: 429 suggesting another model", "scenario:live_high_load", 429,
         "model_overloaded", "high demand for Cursor Grok 4.5"),
        ("unpaid invoice: 402 with the text", "scenario:live_unpaid_invoice", 402,
         "insufficient_quota", "unpaid invoice"),
        ("model channel not available: retryable 503", "scenario:live_channel_down", 503,
         "upstream_unavailable", "model channel not available"),
        ("permission_denied for the client identity: the client-version error",
         "scenario:live_identity_denied", 502, "outdated_client", "Unsupported client version"),
        ("bare resource_exhausted on a small request: the model is not on the plan",
         "scenario:live_bare_exhausted", 400, "model_not_available", "plan"),
        ("deadline_exceeded 'Timeout waiting for next item.': the request_context answer",
         "scenario:live_next_item", 504, "upstream_timeout", "request_context"),
    ]
    for name, model, status, code, words in cases:
        st, e = err_of(px, model)
        check("%s -> %d %s" % (name, status, code),
              st == status and e.get("code") == code and words in (e.get("message") or ""),
              (st, e))
    st, raw, hd = px.request("POST", "/v1/chat/completions", {
        "model": "scenario:live_geo_internal", "messages": [{"role": "user", "content": "x"}]})
    eq("geo block: x-should-retry: false", hd.get("x-should-retry"), "false")
    # High Load is not a usage limit: a second request asks Cursor again (no latch)
    before = len(runs_of(fake, "live_high_load"))
    st, e = err_of(px, "scenario:live_high_load")
    eq("High Load again: a new upstream run, not a latched answer",
       (st, len(runs_of(fake, "live_high_load")) - before), (429, 1))
    st, raw, hd = px.request("POST", "/v1/chat/completions", {
        "model": "scenario:live_channel_down", "messages": [{"role": "user", "content": "x"}]})
    check("model channel down: Retry-After, no x-should-retry: false",
          hd.get("retry-after") and hd.get("x-should-retry") != "false", hd)
    # a bare resource_exhausted on a large conversation is the context limit
    st, e = err_of(px, "scenario:live_bare_exhausted", "word " * 110000)
    eq("bare resource_exhausted on a ~140k-token conversation: context_length_exceeded",
       (st, e.get("code")), (400, "context_length_exceeded"))
    del runs0
    upstream_clean(fake, n0)


SCHEMA_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "edit_graph", "parameters": {
        "type": "object", "properties": {"node": {"anyOf": [{"type": "string"},
                                                            {"$ref": "#/$defs/n"}]}},
        "$defs": {"n": {"type": "object"}}}}},
    {"type": "function", "function": {"name": "ls", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}]


def t_live_errors(fake, px):
    """The errors seen live that were misread (late-autumn notes N15, N7/C8)."""
    n0 = len(fake.state()["errors"])
    runs0 = len(runs_of(fake, "a_schema_tag"))
    # "parse binary: invalid end group tag": a 400 naming the tool Cursor could not take
    st, j, raw = chat(px, {"model": "scenario:a_schema_tag", "tools": SCHEMA_TOOLS,
                           "messages": [{"role": "user", "content": "hi"}]})
    e = j.get("error") or {}
    check("invalid end group tag: 400 invalid_tool_schema naming the one unusual schema "
          "(edit_graph: anyOf/$ref)", st == 400 and e.get("code") == "invalid_tool_schema"
          and '"edit_graph"' in (e.get("message") or "")
          and "invalid end group tag" in (e.get("message") or ""), (st, e))
    st, j, raw = chat(px, {"model": "scenario:a_schema_tag", "tools": SCHEMA_TOOLS[:1],
                           "messages": [{"role": "user", "content": "hi"}]})
    e = j.get("error") or {}
    check("invalid end group tag, one tool: 400 naming it", st == 400
          and e.get("code") == "invalid_tool_schema"
          and '"get_weather"' in (e.get("message") or ""), (st, e))
    st, j, raw = chat(px, {"model": "scenario:a_schema_tag", "tools": SCHEMA_TOOLS[::2],
                           "messages": [{"role": "user", "content": "hi"}]})
    e = j.get("error") or {}
    check("invalid end group tag, two plain tools: 400 saying one of the 2 tool schemas",
          st == 400 and e.get("code") == "invalid_tool_schema"
          and "one of the 2 tool schemas" in (e.get("message") or ""), (st, e))
    eq("invalid end group tag: never retried (one run per request)",
       len(runs_of(fake, "a_schema_tag")) - runs0, 3)
    # "Conversation state is required": once more with the state's mode AGENT
    st, j, raw = chat(px, {"model": "scenario:a_state",
                           "messages": [{"role": "user", "content": "state please"}]})
    eq("Conversation state is required: answered after one more run",
       (st, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
       (200, "ECHO:state please"))
    rs = runs_of(fake, "a_state")
    eq("... whose conversation_state sets mode AGENT (field 10 = 1); the first had none",
       [r.get("conversation_state_hex") for r in rs[-2:]], ["", "5001"])
    k0 = len(runs_of(fake, "a_state_always"))
    st, j, raw = chat(px, {"model": "scenario:a_state_always",
                           "messages": [{"role": "user", "content": "hi"}]})
    eq("Conversation state is required twice: 502 conversation_state_required after two runs",
       (st, (j.get("error") or {}).get("code"), len(runs_of(fake, "a_state_always")) - k0),
       (502, "conversation_state_required", 2))
    upstream_clean(fake, n0)


def t_replay(fake, px):
    n0 = len(fake.state()["errors"])
    msgs = [{"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"}]
    for scen, what in (("live_conv_missing", "Conversation data missing"),
                       ("live_blob_missing", "blob missing [not_found]")):
        fake.ctl("/reset", {})
        st, j, raw = chat(px, {"model": "scenario:" + scen, "messages": msgs})
        eq("%s: the client still gets its answer" % what,
           (st, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
           (200, "ECHO:second question"))
        rs = runs_of(fake, scen)
        eq("%s: two runs, the second a new conversation" % what,
           (len(rs), len(set(r.get("conversation_id") for r in rs))), (2, 2))
        if len(rs) == 2:
            eq("%s: the replay carries the full history" % what, rs[1].get("prompt"),
               rs[0].get("prompt"))
            check("%s: ... which has every message" % what,
                  "first answer" in (rs[1].get("prompt") or ""), rs[1].get("prompt"))
    # a held run's follow-up that Cursor lost: the fallback replays it in a fresh run
    read_tool = [{"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"filePath": {"type": "string"}}}}}]
    m1 = [{"role": "user", "content": "read it"}]
    st, j, raw = chat(px, {"model": "scenario:a_held_lost", "tools": read_tool, "messages": m1})
    calls = ((j.get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or []
    check("held run: a tool call first", st == 200 and len(calls) == 1, j)
    if calls:
        m2 = m1 + [{"role": "assistant", "content": None, "tool_calls": calls},
                   {"role": "tool", "tool_call_id": calls[0]["id"], "content": "file text"}]
        st, j, raw = chat(px, {"model": "scenario:a_held_lost", "tools": read_tool,
                               "messages": m2})
        eq("held run lost by Cursor after the results: the follow-up still gets its answer",
           (st, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
           (200, "REPLAYED"))
    fake.ctl("/reset", {})
    st, j, raw = chat(px, {"model": "scenario:live_conv_missing_always", "messages": msgs},
                      stream=True)
    ev = j
    eq("lost twice: replayed once only (two runs), then Cursor's words to the client",
       (st, len(runs_of(fake, "live_conv_missing_always"))), (502, 2))
    check("lost twice: the error says so", b"conversation_lost" in raw
          and b"Conversation data missing" in raw, raw[:400])
    del ev
    upstream_clean(fake, n0)


def t_doctor(fake, px, tmp, token):
    """`cursor-oai doctor --model M` names each failure in words a user can act on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_", "OPENAI_"))}
    home = os.path.join(tmp, "home-doctor")
    os.makedirs(home, exist_ok=True)
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": fake.url(), "SSL_CERT_FILE": fake.ca,
                "CURSOR_ACCESS_TOKEN": token, "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION,
                "CURSOR_OAI_IDLE_TIMEOUT": "5"})
    for scen, words in (("live_geo_denied", "in your country or region: try another model"),
                        ("live_high_load", "High Load): try another model"),
                        ("live_unpaid_invoice", "open invoice is paid"),
                        ("live_next_item", "answer to its first question"),
                        ("live_conv_missing_always", "replay as a new one failed too")):
        r = subprocess.run(H.proxy_cmd() + ["doctor", "--model", "scenario:" + scen], env=env,
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        check("doctor --model scenario:%s: exit 1, says what to do" % scen,
              r.returncode != 0 and words in out and token not in out, out[-1500:])
    # the same words inside other errors: the advice does not follow them
    for scen, words, not_words in (
            ("a_words_invoice", "plan's usage is used up", "open invoice"),
            ("a_words_context", "cannot reach", "first question"),
            ("a_words_464", "attach the output to a bug report", "refused the"),
            ("a_words_h1", "attach the output to a bug report", "serves HTTP/2 only")):
        r = subprocess.run(H.proxy_cmd() + ["doctor", "--model", "scenario:" + scen], env=env,
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        check("doctor --model scenario:%s: advice by the error's code and kind, not its words"
              % scen, r.returncode != 0 and words in out and not_words not in out, out[-1500:])


def t_unary(fake, px):
    fake.ctl("/config", {"usage_status": 404})
    st, body, hd = px.get("/v1/usage")
    e = (jload(body) or {}).get("error") or {}
    check("usage against a server without the dashboard route: names the call, not a model",
          st == 502 and e.get("code") == "upstream_not_found"
          and "GetCurrentPeriodUsage" in (e.get("message") or "")
          and "model" not in (e.get("message") or "").lower(), (st, e))
    p = subprocess.run(H.proxy_cmd() + ["usage"], env=px.env, capture_output=True, text=True,
                       timeout=30, cwd=px.cwd)
    check("cursor-oai usage: exit 1 naming GetCurrentPeriodUsage",
          p.returncode == 1 and "GetCurrentPeriodUsage" in p.stderr
          and "does not exist" not in p.stderr, p.stdout + p.stderr)
    fake.ctl("/config", {"usage_status": None})


def main():
    only, keep = S.options()
    if S.binary_missing():
        return 0
    tmp = S.make_tmp()
    token = H.session_token("auth0|autumn")
    try:
        fake = H.Fake(tmp, scenarios(), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False})
        px = H.Proxy(tmp, "autumn", fake.url(), fake.ca, token,
                     # each GET /v1/usage asks Cursor: the checks change its answer
                     extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "20", "CURSOR_OAI_USAGE_TTL": "0",
                                # the exec and replay scenarios send Cursor's native execs
                                # (shell, read, subagent, the Pi tools) with tools present:
                                # cursor mode (in client mode, the default, a run with tools
                                # gets none; tests/tools_header_test.py covers it)
                                "CURSOR_OAI_TOOL_MODE": "cursor"})
        S.sections((("exec", lambda: t_exec(fake, px)),
                    ("query", lambda: t_query(fake, px)),
                    ("kv", lambda: t_kv(fake, px)),
                    ("usage", lambda: t_usage(fake, px)),
                    ("errors", lambda: t_errors(fake, px)),
                    ("live_errors", lambda: t_live_errors(fake, px)),
                    ("replay", lambda: t_replay(fake, px)),
                    ("unary", lambda: t_unary(fake, px)),
                    ("doctor", lambda: t_doctor(fake, px, tmp, token))), only)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    return S.finish(keep)


if __name__ == "__main__":
    threading.current_thread().name = "upstream_messages_test"
    sys.exit(main())
