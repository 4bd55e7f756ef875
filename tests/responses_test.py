"""OpenAI Responses API end to end, as a user would: build/cursor-oai between the fake Cursor
upstream (tests/fake) and
  - the official `openai` npm SDK v7 (`responses.create`: non-stream, stream, a function tool
    round trip, previous_response_id + store + GET /v1/responses/{id}, errors), and
  - Codex CLI (`codex exec`, @openai/codex from npm) with a model provider whose base_url is
    cursor-oai and wire_api = "responses", in a temporary git workspace: a plain answer, a
    task where the model runs a shell command and then changes a file (once through Codex's
    shell tool, once through its apply_patch tool), a reasoning answer, and an error.
Clients come from build/clients (tests/e2e/clients.py installs them: Node 24 from npm).
Prints `RESULT <passed> <failed>` last.
  RESPONSES_ONLY=sdk,codex,raw   pick sections
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import clients as C  # noqa: E402
import harness as H  # noqa: E402
import pbwire as pb  # noqa: E402

S = H.Suite("responses", section=None, limit=4000)
check = S.check
MARK_A, MARK_B = "CONTENT-ALPHA-5d1", "CONTENT-BETA-9e4"
# 200 KiB of text with quotes: over the kernel's 128 KiB limit on one command-line argument
BIG_MARK = "BIG-WRITE-7f3"
BIG_TEXT = BIG_MARK + "\n" + "".join("line %05d: it's \"quoted\" $HOME `x` \\ %s\n" % (i, "z" * 40)
                                      for i in range(2600))


def fin(steps):
    return steps + [{"op": "turn_ended"}, {"op": "trailer", "status": 0}]


def scenarios(ws_hint, proxy_ws):
    # Codex's task: turn 1 runs `cat notes.txt`; once its output (MARK_A) is in the prompt
    # the model writes MARK_B into notes.txt; once that write is in the prompt it answers.
    task = {"when": [
        {"prompt_contains": MARK_B, "steps": fin([{"op": "text", "text": "Updated notes.txt."}])},
        {"prompt_contains": MARK_A, "steps": [
            {"op": "text", "text": "Now I change the file."},
            {"op": "exec", "kind": "write", "id": 2, "exec_id": "exec-write-0002",
             "path": "notes.txt", "file_text": MARK_B + "\nsecond line\n", "wait_reply": 1.0},
            {"op": "stall", "max_s": 30}]}],
        "steps": [
            {"op": "text", "text": "Let me look at the file."},
            {"op": "exec", "kind": "shell_stream", "id": 1, "exec_id": "exec-shell-0001",
             "command": "cat notes.txt", "cwd": proxy_ws, "timeout": 30000, "wait_reply": 1.0},
            {"op": "stall", "max_s": 30}]}
    # Codex compacts a long session itself (a normal request with its summary prompt) when
    # the provider is not OpenAI's; the session then goes on from the summary.
    compact = {"when": [
        {"prompt_contains": "CONTEXT CHECKPOINT COMPACTION", "steps": fin([
            {"op": "text", "text": "SUMMARY-42: the echo ran."}])},
        # OpenAI's provider: Codex's compaction_trigger, cursor-oai's summary request
        {"prompt_contains": "Context compaction:", "steps": fin([
            {"op": "text", "text": "SUMMARY-42: the echo ran."}])},
        {"prompt_contains": "SUMMARY-42", "steps": fin([
            {"op": "text", "text": "Finished after compaction."}])}],
        "steps": [
            {"op": "exec", "kind": "shell_stream", "id": 1, "exec_id": "exec-shell-0009",
             "command": "echo hi", "cwd": proxy_ws, "timeout": 30000, "wait_reply": 1.0},
            {"op": "stall", "max_s": 30}]}
    # A write over Linux's 128 KiB limit on one argument (MAX_ARG_STRLEN): once the write is
    # in the prompt the model answers.
    big = {"when": [
        {"prompt_contains": BIG_MARK, "steps": fin([{"op": "text", "text": "Wrote big.txt."}])}],
        "steps": [
            {"op": "exec", "kind": "write", "id": 3, "exec_id": "exec-write-0003",
             "path": "big.txt", "file_text": BIG_TEXT, "wait_reply": 1.0},
            {"op": "stall", "max_s": 60}]}
    return {
        "codex_task": task,
        "codex_big": big,
        # answers whether the run was given tools (compaction runs get none)
        "cmp_tools": {"when": [{"has_tools": True, "steps": fin([
            {"op": "text", "text": "TOOLS-SEEN"}])}],
            "steps": fin([{"op": "text", "text": "Summary: NO-TOOLS."}])},
        "codex_compact": compact,
        "rs_tools": {"when": [{"prompt_contains": "[Tool result for", "steps": fin([
            {"op": "text", "text": "The file says: done."}])}], "steps": [
            {"op": "text", "text": "Reading the file."},
            {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001",
             "path": os.path.join(ws_hint, "hello.txt"), "wait_reply": 1.0},
            {"op": "stall", "max_s": 30}]},
        "remember": {"when": [{"prompt_contains": "ALPHA-7731", "steps": fin([
            {"op": "text", "text": "I remember ALPHA-7731."}])}],
            "steps": fin([{"op": "text", "text": "Nothing to remember."}])},
        "quota": {"steps": [{"op": "trailer", "status": 8,
                             "message": "You've hit your usage limit"}]},
    }


# ---------------------------------------------------------------------------------------------
# compaction: POST /responses/compact and Codex's compaction_trigger item

COMPACT_TAG = "cursor-oai compaction summary v1\n"


def t_compact(proxy, fake):
    conv = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Build the parser. KEEP-ME-311"}]},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Parser built."}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command",
         "arguments": "{\"cmd\":\"ls\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.c"}]
    tools = [{"type": "function", "name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}]
    for path in ("/v1/responses/compact", "/responses/compact"):
        st, b, h = proxy.request("POST", path, {
            "model": "scenario:cmp_tools", "instructions": "You are Codex.", "input": conv,
            "tools": tools, "parallel_tool_calls": True})
        j = json.loads(b) if st == 200 else {}
        out = j.get("output") or []
        check("%s: a response.compaction object whose output is one compaction item with "
              "the run's answer as the summary, and usage" % path,
              st == 200 and j.get("object") == "response.compaction" and
              j.get("id", "").startswith("resp_") and len(out) == 1 and
              out[0].get("type") == "compaction" and
              out[0].get("encrypted_content", "") == COMPACT_TAG + "Summary: NO-TOOLS." and
              j.get("usage", {}).get("input_tokens", 0) > 0, (st, b[:600]))
        last = fake.runs()[-1] if fake.runs() else {}
        pr = last.get("prompt") or ""
        check("%s: the run got the whole conversation, then the request for a summary "
              "(and no tools: the answer above)" % path, "KEEP-ME-311" in pr and "a.c" in pr
              and pr.find("Context compaction:") > pr.find("a.c") > pr.find("KEEP-ME-311"),
              pr[-600:])
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:cmp_tools", "input": conv, "tools": tools, "stream": False})
    check("(control: the same conversation as a normal request does give the run tools)",
          st == 200 and b"TOOLS-SEEN" in b, (st, b[:300]))
    summary = out[0]["encrypted_content"] if out else COMPACT_TAG + "none"
    # Codex 0.169 (OpenAI's provider): a normal streamed request whose input ends in a
    # compaction_trigger item; it takes exactly one "compaction" output item
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:cmp_tools", "input": conv + [{"type": "compaction_trigger"}],
        "tools": tools, "stream": True, "store": False})
    ev = sse_events(b) if st == 200 else []
    done_items = [j["item"] for _, j in ev if j["type"] == "response.output_item.done"]
    fin_ = [j["response"] for _, j in ev if j["type"] == "response.completed"]
    check("compaction_trigger: the stream has exactly one output item, a compaction item "
          "with the summary, and response.completed lists it",
          st == 200 and [i["type"] for i in done_items] == ["compaction"] and
          done_items[0]["encrypted_content"] == COMPACT_TAG + "Summary: NO-TOOLS." and
          fin_ and fin_[0]["output"] == done_items and
          not any(j["type"].startswith("response.output_text") for _, j in ev),
          [j["type"] for _, j in ev] or (st, b[:400]))
    last = fake.runs()[-1] if fake.runs() else {}
    pr = last.get("prompt") or ""
    check("compaction_trigger: the run was asked for the summary after the conversation",
          pr.find("Context compaction:") > pr.find("KEEP-ME-311") >= 0, pr[-300:])
    # the summary sent back as the history: a user message the run sees
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:text_basic", "stream": False, "input": [
            {"type": "compaction", "encrypted_content": summary},
            {"type": "message", "role": "user", "content": "Go on."}]})
    pr = (fake.runs()[-1].get("prompt") or "") if fake.runs() else ""
    check("a compaction item sent back reaches the run as the summary of the conversation",
          st == 200 and "Summary of the conversation so far" in pr and
          summary[len(COMPACT_TAG):] in pr and "Go on." in pr, (st, b[:300], pr[-400:]))
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:text_basic", "input": [
            {"type": "compaction", "encrypted_content": "gAAAAABopaque"},
            {"type": "message", "role": "user", "content": "Go on."}]})
    j = json.loads(b) if b.startswith(b"{") else {}
    check("another server's (encrypted) compaction item: 400 in the Responses error shape",
          st == 400 and j.get("error", {}).get("param") == "input[0].encrypted_content" and
          "cursor-oai" in j["error"].get("message", ""), (st, b[:300]))
    st, b, h = proxy.request("POST", "/v1/responses/compact", {"model": "scenario:text_basic"})
    j = json.loads(b) if b.startswith(b"{") else {}
    check("/responses/compact without input: 400 in the Responses error shape",
          st == 400 and j.get("error", {}).get("type") == "invalid_request_error", (st, b[:300]))
    # a compaction_trigger request that carries the results of a call a held run waits for:
    # its summary needs a run of its own (continued on the held run, the summary request never
    # reaches Cursor and the held run's stall ends in a fallback)
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:codex_compact", "input": "Run echo.", "tools": tools,
        "stream": False})
    calls = [i for i in (json.loads(b).get("output") or []) if i.get("type") == "function_call"] \
        if st == 200 else []
    check("(held run for the compaction: a call of exec_command)", len(calls) == 1, (st, b[:300]))
    if calls:
        m0, n0 = continued(proxy), len(fake.runs())
        st, b, h = proxy.request("POST", "/v1/responses", {
            "model": "scenario:codex_compact", "tools": tools, "stream": True, "store": False,
            "input": [{"type": "message", "role": "user", "content": "Run echo."},
                      {k: calls[0][k] for k in ("type", "call_id", "name", "arguments")},
                      {"type": "function_call_output", "call_id": calls[0]["call_id"],
                       "output": "hi"},
                      {"type": "compaction_trigger"}]}, timeout=120)
        ev = sse_events(b) if st == 200 else []
        done_items = [j["item"] for _, j in ev if j["type"] == "response.output_item.done"]
        prompts = [q.get("prompt") or "" for q in fake.runs()[n0:]]
        check("compaction_trigger with a held run's tool results: not continued on the held "
              "run; a run of its own was asked for the summary and answered it",
              continued(proxy) == m0 and len(prompts) == 1 and "Context compaction:" in
              prompts[0] and [i["type"] for i in done_items] == ["compaction"] and
              done_items[0]["encrypted_content"] == COMPACT_TAG + "SUMMARY-42: the echo ran.",
              (continued(proxy) - m0, [p[-200:] for p in prompts],
               [j["type"] for _, j in ev] or (st, b[:400])))
    # the real Codex with OpenAI's own provider pointed at cursor-oai: its remote compaction
    # (compaction_trigger) when the session passes its token limit, then the session goes on
    # from the summary
    ws = workspace(None)
    home = C.fresh_home()
    ch = os.path.join(home, ".codex")
    os.makedirs(ch, exist_ok=True)
    with open(os.path.join(ch, "config.toml"), "w") as f:
        f.write('model = "scenario:codex_compact"\nmodel_provider = "openai"\n'
                'openai_base_url = "%s/v1"\ncheck_for_update_on_startup = false\n'
                'model_auto_compact_token_limit = 1000\n\n[analytics]\nenabled = false\n'
                % proxy.base)
    env = C.clean_env(home)
    env.update({"CODEX_HOME": ch, "OPENAI_API_KEY": "sk-test", "RUST_LOG": "error"})
    n0 = len(fake.runs())
    r = C.run([C.NODE, C.CODEX, "exec", "--json", "--skip-git-repo-check",
               "--dangerously-bypass-approvals-and-sandbox", "--color", "never", "Run echo."],
              env, ws, 240)
    prompts = [q.get("prompt") or "" for q in fake.runs()[n0:]]
    check("codex exec (OpenAI's provider): its remote compaction (compaction_trigger) runs "
          "through cursor-oai and the session goes on from the summary",
          r.rc == 0 and [i.get("text") for i in items(r, "agent_message")][-1:] ==
          ["Finished after compaction."] and any("Context compaction:" in p for p in prompts)
          and "SUMMARY-42" in prompts[-1], (r, [p[-200:] for p in prompts]))


def continued(proxy):
    """The proxy's count of held runs continued (/metrics)."""
    st, body, _ = proxy.get("/metrics")
    for ln in body.decode().splitlines():
        if ln.startswith('cursor_oai_continuation_events_total{event="run_continued"}'):
            return int(float(ln.rsplit(" ", 1)[-1]))
    return 0


# ---------------------------------------------------------------------------------------------
# raw HTTP checks (no SDK): shapes the SDK does not look at

def sse_events(raw):
    ev = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = [l for l in block.split("\n") if l and not l.startswith(":")]
        if not lines:
            continue
        name = [l[7:] for l in lines if l.startswith("event: ")]
        data = [l[6:] for l in lines if l.startswith("data: ")]
        j = json.loads(data[0])
        ev.append((name[0] if name else None, j))
    return ev


def t_raw(proxy):
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:thinking", "input": "hi", "stream": True,
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"], "store": False, "metadata": {"k": "v"}})
    ev = sse_events(b) if st == 200 else []
    types = [j["type"] for _, j in ev]
    check("stream: event: names match data.type",
          ev and all(n == j["type"] for n, j in ev), ev[:3])
    check("stream: sequence_number 0,1,2,... in order",
          ev and [j.get("sequence_number") for _, j in ev] == list(range(len(ev))), types)
    want = ["response.created", "response.in_progress", "response.output_item.added",
            "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done", "response.output_item.done",
            "response.output_item.added", "response.content_part.added",
            "response.output_text.delta", "response.output_text.done",
            "response.content_part.done", "response.output_item.done", "response.completed"]
    check("stream: reasoning item then message item, semantic events", types == want, types)
    if ev:
        done = ev[-1][1]["response"]
        check("completed response: usage with cached and reasoning tokens, metadata echoed",
              done["status"] == "completed" and "cached_tokens" in
              done["usage"]["input_tokens_details"] and
              done["usage"]["output_tokens_details"]["reasoning_tokens"] > 0 and
              done.get("metadata") == {"k": "v"} and [o["type"] for o in done["output"]] ==
              ["reasoning", "message"], done)
        check("completed response: the tool fields OpenAI always echoes, with its defaults "
              "when none were given", done.get("tools") == [] and
              done.get("tool_choice") == "auto" and done.get("parallel_tool_calls") is True,
              {k: done.get(k) for k in ("tools", "tool_choice", "parallel_tool_calls")})
    # Codex-shaped request: developer messages, namespace + web_search tools, custom tool
    fx = C.HERE + "/fixtures/codex-%s-exec-gpt-5.5.json" % C.version("@openai/codex")
    body = json.load(open(fx))["requests"][0]["body"]
    body["model"] = "scenario:text_basic"
    st, b, h = proxy.request("POST", "/v1/responses", body)
    check("Codex's recorded request (developer messages, namespace, web_search, tool_search, "
          "custom apply_patch) is accepted", st == 200 and b"Hello, world" in b, (st, b[:500]))
    done = [j for _, j in sse_events(b) if j["type"] == "response.completed"] if st == 200 else []
    check("Codex's request: the response object echoes its tools, tool_choice and "
          "parallel_tool_calls as sent", done and done[0]["response"].get("tools") ==
          body["tools"] and done[0]["response"].get("tool_choice") == body.get("tool_choice",
          "auto") and done[0]["response"].get("parallel_tool_calls") ==
          body.get("parallel_tool_calls", True), done[0]["response"] if done else b[:300])
    # Codex's recorded three-turn task: function_call + function_call_output, custom_tool_call
    # + custom_tool_call_output as Codex sends them back
    fx = C.HERE + "/fixtures/codex-%s-task-gpt-5.5.json" % C.version("@openai/codex")
    reqs = json.load(open(fx))["requests"]
    res = []
    for q in reqs:
        body = dict(q["body"], model="scenario:rs_tools")
        st, b, h = proxy.request("POST", "/v1/responses", body)
        res.append((st, b"The file says: done." in b, b[-300:]))
    check("Codex's recorded task turns (tool calls and their outputs) are accepted and the "
          "outputs reach the prompt", [r[:2] for r in res] == [(200, False), (200, True),
                                                             (200, True)], res)
    st, b, h = proxy.request("POST", "/v1/responses", {"model": "m", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_file", "file_id": "x"}]}]})
    check("unsupported content part -> 400 with param",
          st == 400 and json.loads(b)["error"]["param"] == "input[0].content[0].type", b)
    st, b, h = proxy.request("POST", "/v1/responses", {"model": "m"})
    check("missing input -> 400", st == 400 and json.loads(b)["error"]["param"] == "input", b)
    st, b, h = proxy.get("/v1/responses/resp_unknown")
    check("GET unknown response -> 404 in OpenAI's shape",
          st == 404 and json.loads(b)["error"]["type"] == "invalid_request_error", b)
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:text_basic", "input": "hi", "store": False})
    rid = json.loads(b)["id"]
    st2, b2, _ = proxy.get("/v1/responses/" + rid)
    check("store: false is not kept (GET -> 404)", st == 200 and st2 == 404, b2)
    # the store is bounded: the newest 256 responses; the oldest goes first
    ids = []
    t0 = time.time()
    for i in range(257):
        st, b, h = proxy.request("POST", "/v1/responses", {
            "model": "scenario:text_basic", "input": "n%d" % i})
        ids.append(json.loads(b)["id"] if st == 200 else None)
    st0 = proxy.get("/v1/responses/" + str(ids[0]))[0]
    st1 = proxy.get("/v1/responses/" + str(ids[1]))[0]
    stn = proxy.get("/v1/responses/" + str(ids[-1]))[0]
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:text_basic", "input": "x", "previous_response_id": ids[0]})
    check("store keeps the newest 256: the 1st of 257 is gone (GET 404, previous_response_id "
          "400), the 2nd and the last are there (%.1f s)" % (time.time() - t0),
          None not in ids and (st0, st1, stn) == (404, 200, 200) and st == 400 and
          json.loads(b)["error"]["code"] == "previous_response_not_found", (st0, st1, stn, b))
    st, b, h = proxy.request("PUT", "/v1/responses", {"model": "m", "input": "x"})
    check("PUT /v1/responses -> 405 Allow: POST", st == 405 and h.get("allow") == "POST", h)


# ---------------------------------------------------------------------------------------------
# the openai SDK

def sdk(mode, base, params):
    r = C.run_node(os.path.join(HERE, "e2e", "sdk_responses.mjs"),
                   [mode, base, json.dumps(params)], timeout=90)
    for line in reversed(r.text().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"fatal": repr(r)}


def t_sdk(proxy, ws):
    base = proxy.base + "/v1"
    v = sdk("version", base, {})
    check("openai SDK %s on Node %s" % (v.get("version"), v.get("node")),
          v.get("version") == C.version("openai"), v)
    r = sdk("nonstream", base, {"model": "scenario:text_basic", "instructions": "Be brief."})
    check("SDK responses.create non-stream: output_text, status, usage",
          r.get("output_text") == "Hello, world! w\u00f6rld \U0001f30d" and
          r.get("status") == "completed" and r.get("id", "").startswith("resp_") and
          r.get("usage", {}).get("total_tokens", 0) > 0, r)
    r = sdk("stream", base, {"model": "scenario:thinking"})
    check("SDK responses.create stream: text, reasoning summary, completed",
          r.get("text") == "The answer is 42." and r.get("reasoning") ==
          "Let me think about it." and r.get("status") == "completed" and
          r.get("seqs") == list(range(len(r.get("seqs") or []))), r)
    r = sdk("tools", base, {"model": "scenario:rs_tools", "prompt": "What is in hello.txt?"})
    check("SDK function tool round trip (function_call -> function_call_output -> answer)",
          r.get("call", {}).get("name") == "read_file" and r["call"]["args"].get("path") ==
          os.path.join(ws, "hello.txt") and r.get("final_text") == "The file says: done.", r)
    r = sdk("previous", base, {"model": "scenario:remember", "first": "Remember ALPHA-7731.",
                               "second": "What did I ask you to remember?"})
    check("SDK previous_response_id carries the stored conversation",
          r.get("first") == "I remember ALPHA-7731." and
          r.get("second") == "I remember ALPHA-7731.", r)
    check("SDK responses.retrieve finds a stored response",
          r.get("retrieved") is True and r.get("retrieved_text") == "I remember ALPHA-7731.", r)
    m = r.get("missing") or {}
    check("SDK: unknown previous_response_id -> 400 previous_response_not_found",
          m.get("status") == 400 and m.get("code") == "previous_response_not_found", m)
    r = sdk("error", base, {"model": "scenario:quota"})
    check("SDK: quota before the first byte -> 429 insufficient_quota",
          r.get("status") == 429 and r.get("code") == "insufficient_quota", r)
    r = sdk("error", base, {"model": "scenario:cut_frame", "stream": True})
    check("SDK stream: failure after the first byte -> response.failed with the error",
          (r.get("types") or [""])[-1] == "response.failed" and
          (r.get("failed") or {}).get("code") == "upstream_truncated", r)


# ---------------------------------------------------------------------------------------------
# Codex CLI

def workspace(tmp):
    ws = tempfile.mkdtemp(prefix="codex-ws-", dir=C.homes())
    subprocess.run(["git", "init", "-q", ws], check=True)
    with open(os.path.join(ws, "notes.txt"), "w") as f:
        f.write(MARK_A + "\n")
    subprocess.run(["git", "-C", ws, "add", "notes.txt"], check=True)
    subprocess.run(["git", "-C", ws, "-c", "user.email=t@example.com", "-c", "user.name=t",
                    "commit", "-qm", "init"], check=True)
    return ws


def items(r, kind):
    return [e["item"] for e in r.jsonl() if e.get("type") == "item.completed"
            and e["item"].get("type") == kind]


def t_codex(proxy, fake, tmp, record):
    base = proxy.base + "/v1"
    ws = workspace(tmp)
    r = C.run_codex(base, "Say hello.", ws, model="scenario:text_basic", timeout=120)
    msgs = [i.get("text") for i in items(r, "agent_message")]
    check("codex exec: plain answer", r.rc == 0 and msgs == ["Hello, world! w\u00f6rld \U0001f30d"],
          r)
    done = [e for e in r.jsonl() if e.get("type") == "turn.completed"]
    check("codex exec: usage reported", done and done[0]["usage"].get("input_tokens", 0) > 0, r)

    # The task, with a model Codex does not know (no apply_patch offered): the write goes
    # through its shell tool.
    ws = workspace(tmp)
    r = C.run_codex(base, "Update the notes file as needed.", ws, model="scenario:codex_task",
                    timeout=180)
    cmds = items(r, "command_execution")
    with open(os.path.join(ws, "notes.txt")) as f:
        now = f.read()
    check("codex task (shell tool): Codex ran `cat notes.txt` and saw its output",
          any("cat notes.txt" in c.get("command", "") and MARK_A in c.get("aggregated_output", "")
              for c in cmds), r)
    check("codex task (shell tool): the file write ran through exec_command; workspace "
          "changed", now == MARK_B + "\nsecond line\n", (now, r))
    check("codex task (shell tool): final answer",
          r.rc == 0 and [i.get("text") for i in items(r, "agent_message")][-1:] ==
          ["Updated notes.txt."], r)
    st = subprocess.run(["git", "-C", ws, "status", "--porcelain"], capture_output=True, text=True)
    check("codex task: git shows notes.txt modified", st.stdout.strip() == "M notes.txt",
          st.stdout)

    # The same task with a model name Codex knows: it offers its freeform apply_patch tool
    # and the write arrives as a custom_tool_call patch.
    ws = workspace(tmp)
    r = C.run_codex(base, "Update the notes file as needed.", ws, model="gpt-5.5", timeout=180)
    with open(os.path.join(ws, "notes.txt")) as f:
        now = f.read()
    fc = items(r, "file_change")
    check("codex task (apply_patch): the write arrived as apply_patch; workspace changed",
          now == MARK_B + "\nsecond line\n" and fc, (now, r))
    check("codex task (apply_patch): final answer",
          r.rc == 0 and [i.get("text") for i in items(r, "agent_message")][-1:] ==
          ["Updated notes.txt."], r)

    ws = workspace(tmp)
    r = C.run_codex(base, "Run echo.", ws, model="scenario:codex_compact", timeout=180,
                    config_extra="model_auto_compact_token_limit = 1000\n")
    check("codex exec: a session over its token limit compacts through cursor-oai and goes on "
          "from the summary", r.rc == 0 and [i.get("text") for i in items(
              r, "agent_message")][-1:] == ["Finished after compaction."], r)

    ws = workspace(tmp)
    r = C.run_codex(base, "Think, then answer.", ws, model="scenario:thinking", timeout=120)
    rs = items(r, "reasoning")
    check("codex exec: reasoning shown as reasoning, then the answer",
          r.rc == 0 and rs and "Let me think about it." in rs[0].get("text", "") and
          [i.get("text") for i in items(r, "agent_message")] == ["The answer is 42."], r)

    ws = workspace(tmp)
    r = C.run_codex(base, "Say hello.", ws, model="scenario:quota", timeout=120)
    errs = [e for e in r.jsonl() if e.get("type") in ("error", "turn.failed")]
    txt = json.dumps(errs)
    check("codex exec: a quota error is reported as an error (exit status, message)",
          r.rc != 0 and errs and ("usage limit" in txt or "quota" in txt.lower()), r)

    ws = workspace(tmp)
    r = C.run_codex(base, "Say hello.", ws, model="scenario:cut_frame", timeout=120)
    errs = [e for e in r.jsonl() if e.get("type") in ("error", "turn.failed")]
    check("codex exec: a stream broken after the first byte is reported as that error "
          "(response.failed's message)",
          r.rc != 0 and errs and ("upstream ended the stream" if H.TRANSPORT == "h2" else
                                  "upstream closed the connection") in json.dumps(errs), r)
    if record:
        reqs = [q for q in fake.runs()]
        del reqs


def t_codex_big(proxy, fake, tmp):
    """A Cursor write of more than 128 KiB through Codex's apply_patch (a model name Codex
    knows). Its shell tool cannot take one: one exec_command is one argument (README). A
    client whose shell tool takes an argv (the array form) gets the write as several
    arguments, each under Linux's 128 KiB limit: its call is run here the way such a client
    runs it (execve of the argv) and must write the file byte for byte."""
    ws = tempfile.mkdtemp(prefix="argv-ws-", dir=tmp)
    st, b, h = proxy.request("POST", "/v1/responses", {
        "model": "scenario:codex_big", "stream": False, "input": "Write the big file.",
        "tools": [{"type": "function", "name": "shell", "parameters": {
            "type": "object", "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "workdir": {"type": "string"}}, "required": ["command"]}}]}, timeout=120)
    calls = [i for i in (json.loads(b).get("output") or []) if i.get("type") == "function_call"] \
        if st == 200 else []
    argv = json.loads(calls[0]["arguments"]).get("command") if len(calls) == 1 else None
    check("codex big write (shell, array form): one call of the shell tool whose argv "
          "carries every argument under 128 KiB", isinstance(argv, list) and argv and
          calls[0]["name"] == "shell" and all(isinstance(x, str) for x in argv) and
          max(len(x.encode()) for x in argv) < 128 * 1024, (st, b[:300]))
    try:
        ran = subprocess.run(argv, cwd=ws, capture_output=True, timeout=60) if argv else None
    except OSError as e:        # E2BIG: one argument over MAX_ARG_STRLEN
        ran = e
    path = os.path.join(ws, "big.txt")
    now = open(path).read() if os.path.exists(path) else None
    check("codex big write (shell, array form): the argv run as a client runs it writes all "
          "%d bytes" % len(BIG_TEXT), now == BIG_TEXT,
          (ran, None if now is None else (len(now), now[:80], now[-80:])))
    base = proxy.base + "/v1"
    for label, model in (("apply_patch", "gpt-5.5"),):
        ws = workspace(tmp)
        for _ in range(2):          # the write's run, and the one after its result
            fake.ctl("/next_scenario", {"name": "codex_big"})
        r = C.run_codex(base, "Write the big file.", ws, model=model, timeout=240)
        path = os.path.join(ws, "big.txt")
        now = open(path).read() if os.path.exists(path) else None
        check("codex big write (%s): all %d bytes of a write over 128 KiB reach the disk"
              % (label, len(BIG_TEXT)), now == BIG_TEXT,
              (None if now is None else (len(now), now[:80], now[-80:]), r))
        check("codex big write (%s): final answer" % label,
              r.rc == 0 and [i.get("text") for i in items(r, "agent_message")][-1:] ==
              ["Wrote big.txt."], r)


EXEC_TOOL = {"type": "function", "name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"},
                                     "yield_time_ms": {"type": "number"}},
    "required": ["cmd"], "additionalProperties": False}}


def eq(name, got, want):
    return check(name, got == want, "\n     got: %r\n    want: %r" % (got, want))


def codex_out(code, text=""):
    """Codex 0.169's exec_command result layout."""
    return ("Chunk ID: 5e1f\nWall time: 0.0123 seconds\nProcess exited with code %d\n"
            "Original token count: %d\nOutput:\n%s" % (code, len(text) // 4, text))


def t_split(proxy, fake, tmp):
    """A write over 128 KiB through exec_command (one string per call), over raw HTTP with
    Codex's request shapes: several calls in one response (parallel tool calls off too),
    each under the limit; run by bash they write the file; the results, sent back together,
    continue the held run, which gets ONE write result (the first failing call's error when
    one fails); the same results sent again (the held run is gone) replay in a fresh run."""
    fake.ctl("/scenario", {"name": "split_held", "scenario": {
        "when": [{"prompt_contains": "[Tool result for", "steps": [
            {"op": "text", "text": "REPLAYED"}, {"op": "turn_ended"},
            {"op": "trailer", "status": 0}]}],
        "steps": [
            {"op": "text", "text": "Writing."},
            {"op": "exec", "kind": "write", "id": 1, "exec_id": "exec-split-1",
             "path": "big.txt", "file_text": BIG_TEXT, "hold": True},
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_fields", "id": 1,
             "template": "SPLIT {variant} {lines_created} {file_size} ERR[{error}]"},
            {"op": "turn_ended"}, {"op": "trailer", "status": 0}]}})
    raw = BIG_TEXT.encode()
    nparts = (len(raw) + 65535) // 65536
    ws = tempfile.mkdtemp(prefix="split-ws-", dir=tmp)

    def first(parallel):
        n0 = len(fake.runs())
        st, b, h = proxy.request("POST", "/v1/responses", {
            "model": "scenario:split_held", "stream": False, "store": False,
            "input": [{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Write the big file."}]}],
            "tools": [EXEC_TOOL], "parallel_tool_calls": parallel}, timeout=120)
        out = json.loads(b).get("output") or [] if st == 200 else []
        return st, b, out, n0

    def follow(out, outputs):
        calls = [i for i in out if i.get("type") == "function_call"]
        inp = [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Write the big file."}]}]
        inp += [i for i in out if i.get("type") in ("message", "function_call")]
        inp += [{"type": "function_call_output", "call_id": c["call_id"], "output": o}
                for c, o in zip(calls, outputs)]
        st, txt = send(inp)
        return st, txt, inp

    def send(inp):
        st, b, h = proxy.request("POST", "/v1/responses", {
            "model": "scenario:split_held", "stream": False, "store": False, "input": inp,
            "tools": [EXEC_TOOL]}, timeout=120)
        txt = "".join(c.get("text", "") for i in (json.loads(b).get("output") or [])
                      if i.get("type") == "message" for c in i.get("content") or []) \
            if st == 200 else b[:300]
        return st, txt

    # parallel tool calls allowed and not: the calls go out together either way
    for parallel in (True, False):
        st, b, out, n0 = first(parallel)
        calls = [i for i in out if i.get("type") == "function_call"]
        args = [json.loads(c["arguments"]) for c in calls]
        check("split (parallel_tool_calls %s): %d exec_command calls in one response, each "
              "command under 128 KiB, distinct call ids" % (parallel, nparts),
              st == 200 and len(calls) == nparts and nparts >= 3
              and all(c["name"] == "exec_command" for c in calls)
              and all(len(a.get("cmd", "").encode()) < 100 * 1024 for a in args)
              and len(set(c["call_id"] for c in calls)) == nparts, (st, b[:400]))
        if len(calls) != nparts:
            return
        # run as Codex runs them: bash -lc <cmd>, one argument, in order
        outputs = []
        for a in args:
            p = subprocess.run(["bash", "-lc", a["cmd"]], cwd=ws, capture_output=True,
                               timeout=60)
            outputs.append(codex_out(p.returncode, (p.stdout + p.stderr).decode()))
        path = os.path.join(ws, "big.txt")
        got = open(path, "rb").read() if os.path.exists(path) else None
        check("split: run by bash, the calls write all %d bytes" % len(raw), got == raw,
              None if got is None else (len(got), got[:60]))
        os.unlink(path) if os.path.exists(path) else None
        st, txt, inp = follow(out, outputs)
        want = "SPLIT success %d %d ERR[]" % (BIG_TEXT.count("\n"), len(raw))
        eq("split: the results continue the held run; Cursor got one write result", (st, txt),
           (200, want))
        runs = [r for r in fake.runs()[n0:] if r["scenario"] == "split_held"]
        res = runs[0]["exec_results"] if runs else {}
        eq("split: one upstream run, one exec answered", (len(runs), sorted(res)), (1, ["1"]))
    # part 2 fails: its error is the write result
    st, b, out, n0 = first(True)
    outs = [codex_out(0)] * nparts
    outs[1] = codex_out(1, "base64: invalid input\n")
    st, txt, inp = follow(out, outs)
    check("split: a failing part: Cursor got the write error with its output", st == 200 and
          txt.startswith("SPLIT error") and "base64: invalid input" in txt
          and "ERR[]" not in txt, (st, txt))
    # results for only some of the calls (no API allows that, a client could still send
    # it): the held run does not take them, the conversation replays in a fresh run
    st, b, out2, n0 = first(True)
    st, txt, inp2 = follow(out2, [codex_out(0)])          # the first call's result only
    eq("split: results for one call of %d: replayed, not a held run's write result" % nparts,
       (st, txt), (200, "REPLAYED"))
    # the same results again: no held run for them now, a fresh run with the conversation
    n1 = len(fake.runs())
    st, txt = send(inp)
    runs = [r for r in fake.runs()[n1:] if r["scenario"] == "split_held"]
    prompt = (runs[0].get("prompt") if runs else "") or ""
    check("split: replayed in a fresh run whose prompt carries every call's result",
          (st, txt) == (200, "REPLAYED") and len(runs) == 1
          and all(c["call_id"] in prompt for c in out if c.get("type") == "function_call"),
          (st, txt, len(runs), prompt[:300]))


def main():
    only = set(x for x in os.environ.get("RESPONSES_ONLY", "").split(",") if x)
    try:
        C.ensure(log=print)
    except C.Unavailable as e:
        check("clients install from the npm registry", False, e)
        return S.result()
    tmp = S.make_tmp()
    ws = os.path.join(tmp, "workspace")
    os.makedirs(ws)
    with open(os.path.join(ws, "hello.txt"), "w") as f:
        f.write("done\n")
    token = pb.make_jwt({"sub": "auth0|e2e", "exp": int(time.time()) + 7200, "type": "session"})
    try:
        # Cursor runs commands in its workspace: the proxy's (its cwd, tmp/cwd-main)
        fake = H.Fake(tmp, scenarios(ws, os.path.join(tmp, "cwd-main")), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False,
                              "default_scenario": "codex_task"})
        # the scenarios send Cursor's native execs (shell, read, write, ...) with tools
        # present and check their mapping: cursor mode's (in client mode, the default, a run
        # with tools gets none; tests/tools_header_test.py covers it)
        proxy = H.Proxy(tmp, "main", fake.url(), fake.ca, token,
                        extra_env={"CURSOR_OAI_TOOL_MODE": "cursor"})
        S.sections((("raw", lambda: t_raw(proxy)), ("sdk", lambda: t_sdk(proxy, ws)),
                    ("codex", lambda: t_codex(proxy, fake, tmp, False)),
                    ("codex_big", lambda: t_codex_big(proxy, fake, tmp)),
                    ("split", lambda: t_split(proxy, fake, tmp)),
                    ("compact", lambda: t_compact(proxy, fake))), only, timed=False)
        errs = fake.state()["errors"]
        check("fake upstream saw no protocol errors", not errs, errs)
    finally:
        if S.failed == 0:
            C.forget_homes()
        code = S.finish()
    return code


if __name__ == "__main__":
    sys.exit(main())
