"""Gemini API end to end, as a user would: build/cursor-oai between the fake Cursor upstream
(tests/fake) and
  wire    raw HTTP: generateContent, streamGenerateContent (?alt=sse and the JSON array),
          countTokens, GET /v1beta/models[/{model}], functionCall parts with ids, thought parts,
          usageMetadata, the key as x-goog-api-key or ?key=, Google's error shape (400, 401,
          404, the usage limit Gemini CLI gives up on at once), Gemini CLI's recorded task
          requests (tests/e2e/fixtures/gemini-cli-<version>-task.json) accepted
  gemini  Gemini CLI itself (`gemini -p`, @google/gemini-cli from npm, GOOGLE_GEMINI_BASE_URL =
          cursor-oai, fresh HOME, no network, telemetry and update checks off) in a temp
          workspace, each task on ONE upstream run (held runs): read a file then write one
          (what Cursor got for the read is the file's bytes; the written file is checked on
          disk), a shell command whose answer quotes its real output, a failing command whose
          exit code reaches Cursor as the real one, and a usage limit shown within 10 s.
  stable  the same API on Google's stable path (/v1/models/{model}:generateContent,
          :streamGenerateContent, :countTokens, GET /v1/models[/{model}] with a Google key),
          OpenAI's /v1/models beside it (a Bearer key), and unknown URLs under /v1beta/ and
          /v1/ from a Google client answered 404 NOT_FOUND in Google's error shape
Prints `RESULT <passed> <failed>` last.  GEMINI_ONLY=wire,stable,gemini picks sections.
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import clients as C  # noqa: E402
import harness as H  # noqa: E402

S = H.Suite("gemini", section=None, limit=4000)
check = S.check
KEY = "gm-local-" + uuid.uuid4().hex[:8]
FIX = os.path.join(HERE, "e2e", "fixtures")
END = H.END


def scenarios(ws, secret):
    notes, out = os.path.join(ws, "notes.txt"), os.path.join(ws, "out.txt")
    hold = {"wait_reply": 1.0, "hold": True}
    return {
        # read notes.txt, then write out.txt, on one run (await_results: the held run)
        "gm_rw": {"steps": [
            {"op": "thinking", "text": "Read first."},
            {"op": "text", "text": "Reading notes.txt."},
            dict({"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001",
                  "path": notes}, **hold),
            {"op": "await_results", "max_s": 90},
            dict({"op": "exec", "kind": "write", "id": 2, "exec_id": "exec-write-0002",
                  "path": out, "file_text": "COPIED-%s\nline two\n" % secret}, **hold),
            {"op": "await_results", "max_s": 90},
            {"op": "text", "text": "Copied notes.txt into out.txt."}] + END},
        "gm_shell": {"steps": [
            dict({"op": "exec", "kind": "shell_stream", "id": 1, "exec_id": "exec-sh-0001",
                  "command": "printf 'hello-%s\\nsecond line\\n'" % secret, "cwd": ws,
                  "timeout": 30000}, **hold),
            {"op": "await_results", "max_s": 90},
            {"op": "outcome_from_result", "id": 1, "prefix": "The command said: "}] + END},
        "gm_fail": {"steps": [
            dict({"op": "exec", "kind": "shell", "id": 1, "exec_id": "exec-sh-0002",
                  "command": "echo about-to-fail; exit 3", "cwd": ws, "timeout": 30000},
                 **hold),
            {"op": "await_results", "max_s": 90},
            {"op": "outcome_from_result", "id": 1, "prefix": "It failed: "}] + END},
        "gm_tool": {"steps": [
            {"op": "text", "text": "Listing."},
            {"op": "exec", "kind": "ls", "id": 1, "exec_id": "exec-ls-0001", "path": ws,
             "wait_reply": 1.0},
            {"op": "stall", "max_s": 30}]},
        "gm_usage": {"steps": [{"op": "trailer", "status": 8,
                                "message": "You've hit your usage limit",
                                "details": {"error": 10, "title": "Usage limit",
                                            "detail": "You've hit your usage limit"}}]},
        # the same for Gemini CLI (its own model name: the wire section's request latched
        # gm_usage, and this one must meet the upstream's error, not the latch)
        "gm_usage_cli": {"steps": [{"op": "trailer", "status": 8,
                                    "message": "You've hit your usage limit",
                                    "details": {"error": 10, "title": "Usage limit",
                                                "detail": "You've hit your usage limit"}}]},
        # Cursor silent for a while before the answer: keepalives go out meanwhile
        "gm_slow": {"steps": [{"op": "text", "text": "Thinking slowly."},
                              {"op": "sleep", "s": 3.5},
                              {"op": "text", "text": " Done after the pause."}] + END},
        "gm_rate": {"steps": [{"op": "trailer", "status": 8, "message": "rate limited",
                               "details": {"error": 8, "title": "Rate limited",
                                           "detail": "Too many requests"}}]},
    }


def run_prompt(run):
    for a in run.get("appends", []):
        if a.get("seqno") == 0:
            return a["message"].get("prompt") or ""
    return ""


def runs_by(fake, name):
    return [r for r in fake.runs() if r.get("scenario") == name]


# ---------------------------------------------------------------------------------------------
# raw HTTP

def req(proxy, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
              headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, data, hd


def gm(proxy, model, action, body, query="", key=KEY, headers=None):
    h = {"x-goog-api-key": key} if key else {}
    h.update(headers or {})
    return req(proxy, "POST", "/v1beta/models/%s:%s%s" % (model, action, query), body, h)


def user(text):
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


def sse(raw):
    out = []
    for block in raw.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
        block = block.strip()
        if block.startswith("data: "):
            out.append(json.loads(block[6:]))
    return out


def parts_of(chunks):
    return [p for c in chunks for cand in c.get("candidates", [])
            for p in cand.get("content", {}).get("parts", [])]


def t_wire(proxy, fake, ws):
    st, b, h = gm(proxy, "scenario:text_basic", "generateContent", user("hi"))
    j = json.loads(b) if st == 200 else {}
    cand = (j.get("candidates") or [{}])[0]
    um = j.get("usageMetadata", {})
    check("generateContent: one response with text, finishReason STOP, usageMetadata, "
          "modelVersion, responseId",
          st == 200 and cand.get("content", {}).get("role") == "model" and
          "".join(p.get("text", "") for p in cand["content"]["parts"]) ==
          "Hello, world! w\u00f6rld \U0001f30d" and cand.get("finishReason") == "STOP" and
          um.get("totalTokenCount") == um.get("promptTokenCount", 0) +
          um.get("candidatesTokenCount", 0) + um.get("thoughtsTokenCount", 0) and
          um.get("promptTokenCount", 0) > 0 and j.get("modelVersion") and j.get("responseId"),
          (st, b[:600]))
    st, b, h = gm(proxy, "scenario:thinking", "streamGenerateContent", user("think"), "?alt=sse")
    ch = sse(b) if st == 200 else []
    ps = parts_of(ch)
    check("streamGenerateContent?alt=sse: text/event-stream, thought parts then text, the last "
          "chunk has finishReason and usage with thoughtsTokenCount",
          st == 200 and h.get("content-type", "").startswith("text/event-stream") and
          "".join(p["text"] for p in ps if p.get("thought")) == "Let me think about it." and
          "".join(p["text"] for p in ps if not p.get("thought")) == "The answer is 42." and
          ch[-1]["candidates"][0].get("finishReason") == "STOP" and
          ch[-1]["usageMetadata"].get("thoughtsTokenCount", 0) > 0, (st, b[:800]))
    st, b, h = gm(proxy, "scenario:gm_slow", "streamGenerateContent", user("hi"), "?alt=sse")
    check("SSE keepalives while Cursor is silent are bare CRLFs between events (Gemini's SDK "
          "reads '^\\s*data: ' and would stop at an SSE comment)",
          st == 200 and b"}\r\n\r\n\r\n" in b and b": keepalive" not in b and
          "".join(p.get("text", "") for p in parts_of(sse(b))) ==
          "Thinking slowly. Done after the pause.", (st, b[:600]))
    st, b, h = gm(proxy, "scenario:text_basic", "streamGenerateContent", user("hi"))
    arr = json.loads(b) if st == 200 else None
    check("streamGenerateContent without alt=sse: one JSON array of responses "
          "(application/json)",
          st == 200 and h.get("content-type", "").startswith("application/json") and
          isinstance(arr, list) and "".join(p.get("text", "") for p in parts_of(arr)) ==
          "Hello, world! w\u00f6rld \U0001f30d" and arr[-1]["candidates"][0]["finishReason"] ==
          "STOP", (st, b[:600]))
    # a function call: Gemini CLI's recorded tools, an ls exec -> list_directory
    fx = os.path.join(FIX, "gemini-cli-%s-task.json" % C.version("@google/gemini-cli"))
    rec = json.load(open(fx))["requests"]
    body = dict(rec[0]["body"], contents=[{"role": "user", "parts": [{"text": "list"}]}])
    st, b, h = gm(proxy, "scenario:gm_tool", "streamGenerateContent", body, "?alt=sse")
    ch = sse(b) if st == 200 else []
    calls = [p["functionCall"] for p in parts_of(ch) if "functionCall" in p]
    check("a Cursor ls exec -> functionCall list_directory {dir_path} with an id, finishReason "
          "STOP", st == 200 and len(calls) == 1 and calls[0]["name"] == "list_directory" and
          calls[0]["args"] == {"dir_path": ws} and calls[0].get("id", "").startswith("sess_") and
          ch[-1]["candidates"][0]["finishReason"] == "STOP", (st, b[:800]))
    # Gemini CLI's recorded task turns are accepted and their results reach the prompt
    res = []
    for q in rec:
        st, b, h = gm(proxy, "scenario:echo", "streamGenerateContent", q["body"], "?alt=sse")
        res.append(st)
    p = run_prompt(fake.runs()[-1]) if fake.runs() else ""
    check("Gemini CLI's recorded requests (tools with parametersJsonSchema, functionCall + "
          "functionResponse, thoughtSignature) are accepted; results reach the prompt",
          res == [200] * len(rec) and "[Called tool: run_shell_command(" in p and
          "Exit Code: 3" in p, (res, p[-800:]))
    # model names: a Gemini name the account lacks runs on Cursor's auto (Gemini CLI's
    # default and its side tasks ask for those); one it has (gemini-3-pro) is used as is
    got = []
    for name in ("gemini-2.5-flash-lite", "gemini-3-pro"):
        st, b, h = gm(proxy, name, "generateContent", user("hi"))
        got.append((st, fake.runs()[-1].get("model_id") if fake.runs() else None))
    check("model names: gemini-2.5-flash-lite (not the account's) -> auto (the fake's "
          "'default'); gemini-3-pro (the account's) as is",
          got == [(200, "default"), (200, "gemini-3-pro")], got)
    st, b, h = gm(proxy, "scenario:text_basic", "countTokens", user("hello there"))
    check("countTokens -> totalTokens", st == 200 and json.loads(b).get("totalTokens", 0) > 0, b)
    st, b, h = gm(proxy, "scenario:text_basic", "countTokens",
                  {"generateContentRequest": dict(user("hello there"), model="models/x")})
    check("countTokens with generateContentRequest", st == 200 and
          json.loads(b).get("totalTokens", 0) > 0, b)
    st, b, h = req(proxy, "GET", "/v1beta/models", headers={"x-goog-api-key": KEY})
    ms = json.loads(b).get("models", []) if st == 200 else []
    check("GET /v1beta/models: models/<id> with token limits and generation methods",
          ms and all(m["name"].startswith("models/") and m["inputTokenLimit"] > 0 and
                     "generateContent" in m["supportedGenerationMethods"] for m in ms), b[:400])
    if ms:
        one = ms[0]["name"]
        st, b, h = req(proxy, "GET", "/v1beta/" + one + "?key=" + KEY)
        check("GET /v1beta/models/{model} (key as ?key=)", st == 200 and
              json.loads(b).get("name") == one, (st, b[:300]))
    st, b, h = req(proxy, "GET", "/v1beta/models/no-such-model", headers={"x-goog-api-key": KEY})
    e = json.loads(b).get("error", {}) if b else {}
    check("unknown model -> 404 NOT_FOUND in Google's shape",
          st == 404 and e.get("code") == 404 and e.get("status") == "NOT_FOUND", (st, b))
    # keys and errors
    st, b, h = gm(proxy, "scenario:text_basic", "generateContent", user("hi"), key="wrong")
    e = json.loads(b).get("error", {})
    check("wrong x-goog-api-key -> 401 UNAUTHENTICATED {error:{code,message,status}}",
          st == 401 and e.get("code") == 401 and e.get("status") == "UNAUTHENTICATED" and
          e.get("message"), (st, b))
    st, b, h = gm(proxy, "scenario:text_basic", "generateContent", user("hi"),
                  query="?key=" + KEY, key=None)
    check("the key as ?key= works", st == 200, (st, b[:200]))
    st, b, h = gm(proxy, "scenario:text_basic", "generateContent", {"contents": []})
    e = json.loads(b).get("error", {})
    check("empty contents -> 400 INVALID_ARGUMENT naming contents",
          st == 400 and e.get("status") == "INVALID_ARGUMENT" and "contents" in e.get("message"),
          (st, b))
    st, b, h = gm(proxy, "scenario:text_basic", "generateContent",
                  {"contents": [{"role": "model", "parts": [{"functionResponse": {
                      "name": "x", "response": {}}}]}]})
    check("a functionResponse in a model content -> 400", st == 400, (st, b))
    # issue 29: Google's 400s before any run (each used to run, or to run cut short)
    nruns = len(fake.runs())
    bad = []
    for what, model, body in [
            ("a %00 in the URL's model", "%00", user("hi")),
            ("a CR LF in the URL's model", "a%0d%0aX", user("hi")),
            ("allowedFunctionNames naming an undeclared function", "scenario:text_basic",
             dict(user("hi"), tools=[{"functionDeclarations": [{"name": "read"}]}],
                  toolConfig={"functionCallingConfig": {"mode": "ANY",
                                                        "allowedFunctionNames": ["rm"]}})),
            ("a string responseSchema", "scenario:text_basic",
             dict(user("hi"), generationConfig={"responseMimeType": "application/json",
                                                "responseSchema": "x"})),
            ("an unknown responseMimeType", "scenario:text_basic",
             dict(user("hi"), generationConfig={"responseMimeType": "text/csv"}))]:
        st, b, h = gm(proxy, model, "generateContent", body)
        try:
            e = json.loads(b).get("error", {})
        except ValueError:
            e = {}
        if st != 400 or e.get("status") != "INVALID_ARGUMENT":
            bad.append((what, st, b[:300]))
    check("Google's 400 INVALID_ARGUMENT, no upstream run: a control byte in the URL's model "
          "(it was cut there), allowedFunctionNames naming no declared function (the tools "
          "vanished), a non-object responseSchema (a late 502), an unknown responseMimeType",
          not bad and len(fake.runs()) == nruns, (bad, len(fake.runs()) - nruns))
    st, b, h = gm(proxy, "scenario:text_basic", "fooContent", user("hi"))
    check("an unknown action -> a NOT_FOUND error in Google's shape (405: the path names a "
          "model, which only GET reads)", st in (404, 405) and json.loads(b)["error"]["status"]
          == "NOT_FOUND", (st, b))
    t0 = time.time()
    st, b, h = gm(proxy, "scenario:gm_usage", "streamGenerateContent", user("hi"), "?alt=sse")
    e = json.loads(b).get("error", {}) if st != 200 else {}
    types = [d.get("@type", "") for d in e.get("details", [])]
    check("usage limit -> 429 RESOURCE_EXHAUSTED with 'limit: 0' in the message, ErrorInfo and "
          "QuotaFailure details, x-should-retry: false",
          st == 429 and e.get("status") == "RESOURCE_EXHAUSTED" and
          "limit: 0" in e.get("message", "") and "usage limit" in e.get("message", "") and
          any(t.endswith("ErrorInfo") for t in types) and
          any(t.endswith("QuotaFailure") for t in types) and
          h.get("x-should-retry") == "false", (st, b, h))
    st, b, h = gm(proxy, "scenario:gm_rate", "generateContent", user("hi"))
    e = json.loads(b).get("error", {}) if st != 200 else {}
    check("a rate limit -> 429 with RetryInfo (retryDelay) and no 'limit: 0'",
          st == 429 and "limit: 0" not in e.get("message", "") and
          any(d.get("retryDelay") for d in e.get("details", [])), (st, b))


# ---------------------------------------------------------------------------------------------
# the stable path (/v1)

def gerr(st, b):
    """(status, error.code, error.status) of a Google-shaped error answer, else (st, None)."""
    try:
        e = json.loads(b)["error"]
        return st, e.get("code"), e.get("status"), isinstance(e.get("message"), str)
    except (ValueError, KeyError, TypeError):
        return st, None, None, False


def t_stable(proxy, fake):
    def g1(model, action, body, query="", headers=None):
        h = {"x-goog-api-key": KEY}
        h.update(headers or {})
        return req(proxy, "POST", "/v1/models/%s:%s%s" % (model, action, query), body, h)
    n0 = len(fake.runs())
    st, b, h = g1("scenario:text_basic", "generateContent", user("hi"))
    j = json.loads(b) if st == 200 else {}
    cand = (j.get("candidates") or [{}])[0]
    check("POST /v1/models/{model}:generateContent: a Gemini response (text, STOP, usage)",
          st == 200 and "".join(p.get("text", "") for p in cand.get("content", {})
                                .get("parts", [])) == "Hello, world! w\u00f6rld \U0001f30d"
          and cand.get("finishReason") == "STOP" and j.get("usageMetadata"), (st, b[:400]))
    check("... on one Cursor run", len(fake.runs()) == n0 + 1, len(fake.runs()) - n0)
    st, b, h = g1("scenario:thinking", "streamGenerateContent", user("think"), "?alt=sse")
    ps = parts_of(sse(b)) if st == 200 else []
    check("POST /v1/models/{model}:streamGenerateContent?alt=sse: SSE with thought and text",
          st == 200 and h.get("content-type", "").startswith("text/event-stream") and
          "".join(p["text"] for p in ps if not p.get("thought")) == "The answer is 42.",
          (st, b[:400]))
    st, b, h = g1("scenario:text_basic", "streamGenerateContent", user("hi"))
    arr = json.loads(b) if st == 200 else None
    check("... without alt=sse: a JSON array", isinstance(arr, list) and
          arr[-1]["candidates"][0]["finishReason"] == "STOP", (st, b[:300]))
    st, b, h = g1("scenario:text_basic", "countTokens", user("hello there"))
    check("POST /v1/models/{model}:countTokens -> totalTokens",
          st == 200 and json.loads(b).get("totalTokens", 0) > 0, (st, b[:300]))
    st, b, h = req(proxy, "GET", "/v1/models", headers={"x-goog-api-key": KEY})
    ms = json.loads(b).get("models", []) if st == 200 else []
    check("GET /v1/models with x-goog-api-key: Gemini's list (models/<id>, methods)",
          ms and all(m["name"].startswith("models/") and "generateContent" in
                     m["supportedGenerationMethods"] for m in ms), (st, b[:300]))
    st, b, h = req(proxy, "GET", "/v1/models?key=" + KEY)
    check("GET /v1/models?key=: Gemini's list", st == 200 and "models" in json.loads(b),
          (st, b[:300]))
    st, b, h = req(proxy, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
    j = json.loads(b) if st == 200 else {}
    check("GET /v1/models with a Bearer key: still OpenAI's list",
          j.get("object") == "list" and j.get("data") and "models" not in j, (st, b[:300]))
    if ms:
        one = ms[0]["name"]
        st, b, h = req(proxy, "GET", "/v1/" + one, headers={"x-goog-api-key": KEY})
        check("GET /v1/models/{model} with a Google key: that model in Gemini's shape",
              st == 200 and json.loads(b).get("name") == one, (st, b[:300]))
        oid = j["data"][0]["id"] if j.get("data") else "x"
        st, b, h = req(proxy, "GET", "/v1/models/" + oid,
                       headers={"Authorization": "Bearer " + KEY})
        o = json.loads(b) if st == 200 else {}
        check("GET /v1/models/{model} with a Bearer key: OpenAI's model object",
              o.get("id") == oid and o.get("object") == "model", (st, b[:300]))
    st, b, h = req(proxy, "GET", "/v1/models/no-such-model", headers={"x-goog-api-key": KEY})
    check("GET /v1/models/<unknown> with a Google key: 404 NOT_FOUND in Google's shape",
          gerr(st, b) == (404, 404, "NOT_FOUND", True), (st, b[:300]))
    # unknown URLs under either prefix: Google's error shape
    for method, path, hd in (
            ("POST", "/v1/models/scenario:text_basic:embedContent", {"x-goog-api-key": KEY}),
            ("POST", "/v1/models/scenario:text_basic:embedContent",
             {"Authorization": "Bearer " + KEY}),
            ("GET", "/v1/cachedContents", {"x-goog-api-key": KEY}),
            ("GET", "/v1/files?key=" + KEY, {}),
            ("POST", "/v1beta/models/x:batchEmbedContents", {"x-goog-api-key": KEY}),
            ("GET", "/v1beta/tunedModels", {"x-goog-api-key": KEY})):
        st, b, h = req(proxy, method, path, {} if method == "POST" else None, hd)
        check("%s %s (%s): 404 {error:{code:404,message,status:NOT_FOUND}}"
              % (method, path.split("?")[0], ",".join(hd) or "?key="),
              gerr(st, b) == (404, 404, "NOT_FOUND", True), (st, b[:300]))
    # an OpenAI client's unknown URL under /v1 keeps OpenAI's shape
    st, b, h = req(proxy, "GET", "/v1/no-such-thing", headers={"Authorization": "Bearer " + KEY})
    e = json.loads(b).get("error", {}) if b else {}
    check("an OpenAI client's unknown /v1 URL: 404 in OpenAI's shape (code unknown_url)",
          st == 404 and e.get("code") == "unknown_url" and e.get("type"), (st, b[:300]))


# ---------------------------------------------------------------------------------------------
# Gemini CLI

def workspace(secret):
    ws = tempfile.mkdtemp(prefix="gemini-ws-", dir=C.homes())
    subprocess.run(["git", "init", "-q", ws], check=True)
    with open(os.path.join(ws, "notes.txt"), "w") as f:
        f.write("secret %s\nsecond line\n" % secret)
    return ws


def answer(r):
    try:
        return json.loads(r.text()).get("response")
    except ValueError:
        return None


def t_gemini(proxy, fake, tmp):
    ver = C.version("@google/gemini-cli")
    secret = uuid.uuid4().hex[:10]
    ws = workspace(secret)
    r = C.run_gemini(proxy.base, "Say hello.", ws, model="scenario:text_basic", key=KEY)
    check("gemini %s -p: a plain answer" % ver,
          r.rc == 0 and answer(r) == "Hello, world! w\u00f6rld \U0001f30d", r)

    # 1. read then write, one held run
    for name, sc in scenarios(ws, secret).items():
        fake.ctl("/scenario", {"name": name, "scenario": sc})
    # 0. keepalives in the SSE stream do not stall Gemini CLI's parser
    r = C.run_gemini(proxy.base, "Take your time.", ws, model="scenario:gm_slow", key=KEY)
    check("gemini -p: an answer with keepalives in between (Cursor silent 3.5 s)",
          r.rc == 0 and answer(r) == "Thinking slowly. Done after the pause.", r)
    k0 = len(runs_by(fake, "gm_rw"))
    r = C.run_gemini(proxy.base, "Copy notes.txt into out.txt.", ws, model="scenario:gm_rw",
                     key=KEY, timeout=240)
    outp = os.path.join(ws, "out.txt")
    body = open(outp, "rb").read() if os.path.exists(outp) else None
    check("gemini task (read then write): final answer",
          r.rc == 0 and (answer(r) or "").endswith("Copied notes.txt into out.txt."), r)
    check("gemini task: write_file put the bytes on disk", body ==
          ("COPIED-%s\nline two\n" % secret).encode(), body)
    runs = runs_by(fake, "gm_rw")[k0:]
    check("gemini task: one upstream run for read + write (held)", len(runs) == 1,
          [x.get("request_id") for x in runs])
    er = (runs[-1].get("exec_results") or {}) if runs else {}
    rd = (er.get("1") or {}).get("outcome") or {}
    check("what Cursor got for the read: the file's bytes, total_lines 2, file_size",
          rd.get("content") == "secret %s\nsecond line\n" % secret and
          rd.get("total_lines") == 2 and rd.get("file_size") == len(rd.get("content", "")),
          er)
    check("the write's result reached Cursor as a write_result success",
          (er.get("2") or {}).get("frames", [[None]])[0][:2] == ["write_result", "success"], er)

    # 2. a shell command: the answer quotes its real output
    k0 = len(runs_by(fake, "gm_shell"))
    r = C.run_gemini(proxy.base, "Run the greeting command.", ws, model="scenario:gm_shell",
                     key=KEY, timeout=240)
    runs = runs_by(fake, "gm_shell")[k0:]
    oc = ((runs[-1].get("exec_results") or {}).get("1") or {}).get("outcome", {}) if runs else {}
    check("gemini shell task: Cursor got stdout and exit code 0 as the CLI reports them "
          "(Gemini CLI's 'Output: ... Process Group PGID' framing removed)",
          oc.get("exit_code") == 0 and oc.get("stdout", "").rstrip("\n") ==
          "hello-%s\nsecond line" % secret, oc)
    check("gemini shell task: the answer quotes the command's real output, one upstream run",
          r.rc == 0 and ("hello-%s" % secret) in (answer(r) or "") and len(runs) == 1,
          (len(runs), r))

    # 3. a failing command: its real exit code reaches Cursor and the answer
    k0 = len(runs_by(fake, "gm_fail"))
    r = C.run_gemini(proxy.base, "Run the failing command.", ws, model="scenario:gm_fail",
                     key=KEY, timeout=240)
    runs = runs_by(fake, "gm_fail")[k0:]
    oc = ((runs[-1].get("exec_results") or {}).get("1") or {}).get("outcome", {}) if runs else {}
    check("gemini failing shell: Cursor got exit code 3 (not 1) and the output",
          oc.get("exit_code") == 3 and "about-to-fail" in oc.get("stdout", ""), oc)
    check("gemini failing shell: the answer reports exit 3, one upstream run",
          r.rc == 0 and "exit=3" in (answer(r) or "") and len(runs) == 1, (len(runs), r))

    # 4. a usage limit is shown within 10 s (no retries)
    k0 = len(runs_by(fake, "gm_usage_cli"))
    r = C.run_gemini(proxy.base, "Say hello.", ws, model="scenario:gm_usage_cli", key=KEY,
                     timeout=120)
    txt = r.text() + r.err()
    n = len(runs_by(fake, "gm_usage_cli")) - k0
    check("gemini: a usage limit from the upstream is shown within 10 s, no retry (%.1f s, %d "
          "upstream run)" % (r.secs, n),
          r.rc != 0 and r.secs < 10 and "usage limit" in txt and n == 1, r)


def main():
    only = set(x for x in os.environ.get("GEMINI_ONLY", "").split(",") if x)
    try:
        C.ensure(log=print)
    except C.Unavailable as e:
        check("clients install from the npm registry", False, e)
        return S.result()
    tmp = S.make_tmp()
    ws = S.workspace()
    token = H.session_token("auth0|e2e")
    try:
        fake = H.Fake(tmp, scenarios(ws, "wire"), token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False})
        # the scenarios send Cursor's native execs (ls, read, write, shell) with tools present
        # and check their mapping: cursor mode's (in client mode, the default, a run with
        # tools gets none; tests/tools_header_test.py covers it)
        proxy = H.Proxy(tmp, "main", fake.url(), fake.ca, token,
                        extra_env={"CURSOR_OAI_API_KEY": KEY, "CURSOR_OAI_IDLE_TIMEOUT": "20",
                                   "CURSOR_OAI_TOOL_MODE": "cursor"})
        S.sections((("wire", lambda: t_wire(proxy, fake, ws)),
                    ("stable", lambda: t_stable(proxy, fake)),
                    ("gemini", lambda: t_gemini(proxy, fake, tmp))), only, timed=False)
        errs = fake.state()["errors"]
        check("fake upstream saw no protocol errors", not errs, errs)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    if S.failed == 0:
        C.forget_homes()
    return S.finish()


if __name__ == "__main__":
    sys.exit(main())
