"""Client tooling self-test: Node 24, Codex CLI, Claude Code and the current SDKs install from
the npm registry into build/clients (tests/e2e/clients.py), run headless in a fresh HOME, and
reach a loopback recorder -- and nothing else -- with the request shapes kept in
tests/e2e/fixtures. No proxy involved: this checks the tooling the Codex/Claude Code suites use.

Prints `RESULT <passed> <failed>` last; an install that fails counts as a failure.
  COAI_RECORD_FIXTURES=1 python3 tests/clients_test.py   also rewrites the fixture files
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import clients as C  # noqa: E402
import harness as H  # noqa: E402

S = H.Suite("clients", section=None, limit=3000)
check = S.check
FIX = os.path.join(C.HERE, "fixtures")


def workspace():
    d = tempfile.mkdtemp(prefix="ws-", dir=C.homes())
    subprocess.run(["git", "init", "-q", d], check=True)
    return d


def load_fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return json.load(f)


def shape(body):
    """The parts of a request that must stay stable between runs of the same client version."""
    return {k: (sorted(v) if isinstance(v, dict) else v) for k, v in body.items()
            if k in ("stream", "store", "include", "parallel_tool_calls", "tool_choice",
                     "reasoning")}


def test_install():
    C.ensure(log=print)
    r = C.run([C.NODE, "--version"], C.clean_env(C.fresh_home()), C.DIR, 30)
    v = r.text().strip()
    check("node from the npm registry is >= 22 (%s)" % v,
          r.rc == 0 and v.startswith("v") and int(v[1:].split(".")[0]) >= 22, r)
    r = C.run([C.NODE, C.CODEX, "--version"], C.clean_env(C.fresh_home()), C.DIR, 60)
    check("codex --version", r.rc == 0 and C.version("@openai/codex") in r.text(), r)
    r = C.run([C.CLAUDE, "--version"], C.clean_env(C.fresh_home()), C.DIR, 60)
    check("claude --version", r.rc == 0 and C.version("@anthropic-ai/claude-code") in r.text(),
          r)
    r = C.run([C.NODE, "-e", "import('openai').then(m=>import('@anthropic-ai/sdk').then(a=>"
               "console.log(typeof m.default, typeof a.default)))"],
              C.clean_env(C.fresh_home()), C.DIR, 60)
    check("openai and @anthropic-ai/sdk import under Node 24",
          r.rc == 0 and r.text().strip() == "function function", r)


def test_codex():
    for model, fx in (("cursor-model", "codex-%s-exec.json"),
                      ("gpt-5.5", "codex-%s-exec-gpt-5.5.json")):
        fx = fx % C.version("@openai/codex")
        rec = C.Recorder(text="hello from the recorder")
        try:
            r = C.run_codex(rec.base + "/v1", "Say hello.", workspace(), model=model, timeout=90)
        finally:
            rec.stop()
        ev = r.jsonl()
        msgs = [e["item"].get("text") for e in ev if e.get("type") == "item.completed"
                and e["item"].get("type") == "agent_message"]
        check("codex exec (%s) finishes with the recorder's answer" % model,
              r.rc == 0 and msgs == ["hello from the recorder"], r)
        reqs = rec.requests
        ok = len(reqs) == 1 and reqs[0]["method"] == "POST" and reqs[0]["path"] == "/v1/responses"
        check("codex (%s) sends exactly one POST /v1/responses" % model, ok,
              [(q["method"], q["path"]) for q in reqs])
        if not ok:
            continue
        b = reqs[0]["body"]
        check("codex request: bearer key from env_key, never logged in the fixture",
              reqs[0]["headers"].get("authorization") == "<redacted>", reqs[0]["headers"])
        check("codex request: stream, store false, model %s" % model,
              b.get("stream") is True and b.get("store") is False and b.get("model") == model, b)
        names = [t.get("name") or t.get("type") for t in b.get("tools", [])]
        check("codex request offers exec_command (%s)" % model, "exec_command" in names, names)
        if os.environ.get("COAI_RECORD_FIXTURES"):
            C._record_main("codex", os.path.join(FIX, fx), "Say hello.", model)
        else:
            old = load_fixture(fx)["requests"][0]["body"]
            check("codex request shape matches fixture %s" % fx,
                  shape(old) == shape(b) and [t.get("name") or t.get("type")
                                               for t in old.get("tools", [])] == names,
                  (shape(old), shape(b)))


def test_claude():
    fx = "claude-code-%s-print.json" % C.version("@anthropic-ai/claude-code")
    rec = C.Recorder(text="hello from the recorder")
    try:
        r = C.run_claude(rec.base, "Say hello.", workspace(), model="cursor-model", timeout=90)
    finally:
        rec.stop()
    res = [e for e in r.jsonl() if e.get("type") == "result"]
    check("claude -p finishes with the recorder's answer",
          r.rc == 0 and len(res) == 1 and res[0].get("result") == "hello from the recorder", r)
    posts = [q for q in rec.requests if q["method"] == "POST"]
    check("claude sends POST /v1/messages only (no telemetry, no other hosts)",
          posts and all(q["path"].split("?")[0] == "/v1/messages" for q in posts),
          [(q["method"], q["path"]) for q in rec.requests])
    if not posts:
        return
    b = posts[-1]["body"]
    check("claude request: x-api-key masked, model, stream, tools",
          posts[-1]["headers"].get("x-api-key") == "<redacted>" and b.get("model") ==
          "cursor-model" and b.get("stream") is True and isinstance(b.get("tools"), list), b)
    if os.environ.get("COAI_RECORD_FIXTURES"):
        C._record_main("claude", os.path.join(FIX, fx), "Say hello.")
    else:
        old = [q for q in load_fixture(fx)["requests"] if q["method"] == "POST"][-1]["body"]
        check("claude request shape matches fixture %s" % fx,
              sorted(old) == sorted(b) and [t.get("name") for t in old["tools"]] ==
              [t.get("name") for t in b["tools"]], (sorted(old), sorted(b)))


def main():
    try:
        test_install()
    except C.Unavailable as e:
        # CI has no other install step: a failed install is a failure, not a skip
        check("clients install from the npm registry", False, e)
        return S.result()
    S.sections([(t.__name__, t) for t in (test_codex, test_claude)], timed=False)
    if S.failed == 0:
        C.forget_homes()
    return S.result()


if __name__ == "__main__":
    sys.exit(main())
