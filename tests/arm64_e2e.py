#!/usr/bin/python3
"""The linux/arm64 release binary, end to end: build/cursor-oai-arm64 run under
Debian's qemu-user-static (qemu-aarch64-static called directly, no binfmt) against the fake
upstream: one chat not streamed and one streamed, and one held tool loop (a read exec held
open, its result sent on the same run) each way. The transport to the fake is the harness's
COAI_TEST_TRANSPORT (http1 or h2): build.sh runs this suite once per transport.

It is not an *_test.py suite: the two lanes of `./build.sh test` run those against the
x86-64 binary; this one runs in build.sh's arm64 step only. A missing arm64 binary or a missing
emulator is a failure here, not a skip: the step exists to test that binary.
Env: COAI_ARM64_BIN (default build/cursor-oai-arm64), COAI_QEMU_AARCH64 (default
qemu-aarch64-static on PATH). Prints `RESULT <passed> <failed>` last.
  tests/arm64_e2e.py [--keep]"""

import json
import os
import shutil
import sys
import threading
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402

S = H.Suite("arm64", section=None, limit=600)
check, eq = S.check, S.eq
HELLO = "Hello from fake Cursor."     # the fake's answer to a plain chat
EM_AARCH64 = 183                      # ELF e_machine of AArch64

TOOLS = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def elf_machine(path):
    """(ELF class, e_machine) of a little-endian ELF file, or None."""
    try:
        with open(path, "rb") as f:
            h = f.read(20)
    except OSError:
        return None
    if len(h) < 20 or h[:4] != b"\x7fELF" or h[5] != 1:
        return None
    return h[4], int.from_bytes(h[18:20], "little")


def chat(px, body, stream):
    """-> dict(status, content, tool_calls [{id, name, arguments}], finish, bad)"""
    body = dict(body, stream=stream)
    if stream:
        st, _, raw, _ = H.stream_chat(px.port, body, timeout=120)
        s = H.parse_sse(raw)
        return {"status": st, "content": s["content"], "tool_calls": s["tool_calls"],
                "finish": s["finish"], "bad": s["bad"] + s["errors"]
                + ([] if s["done"] else ["no [DONE]"])}
    st, raw, _ = px.request("POST", "/v1/chat/completions", body, timeout=120)
    try:
        j = json.loads(raw)
        m = j["choices"][0]["message"]
        return {"status": st, "content": m.get("content") or "", "bad": [],
                "finish": [j["choices"][0]["finish_reason"]],
                "tool_calls": [{"id": t["id"], "name": t["function"]["name"],
                                "arguments": t["function"]["arguments"]}
                               for t in m.get("tool_calls") or []]}
    except (ValueError, KeyError, IndexError, TypeError):
        return {"status": st, "content": "", "tool_calls": [], "finish": [],
                "bad": [raw[:300]]}


def main():
    _, keep = S.options()
    binp = os.path.abspath(os.environ.get("COAI_ARM64_BIN")
                           or os.path.join(H.ROOT, "build", "cursor-oai-arm64"))
    qemu = os.environ.get("COAI_QEMU_AARCH64") or shutil.which("qemu-aarch64-static")
    print("transport to the fake: %s" % H.TRANSPORT)
    if not check("emulator qemu-aarch64-static found (Debian: qemu-user-static)",
                 qemu and os.access(qemu, os.X_OK), qemu):
        return S.result()
    eq("%s is a 64-bit AArch64 ELF (./build.sh arm64)" % os.path.relpath(binp, H.ROOT),
       elf_machine(binp), (2, EM_AARCH64))
    if not os.path.exists(binp):
        return S.result()
    # The harness starts every proxy with this argv (+ serve --listen ...).
    os.environ["E2E_PROXY_CMD"] = json.dumps([os.path.abspath(qemu), binp])

    tmp = S.make_tmp()
    secret = "heron-" + os.urandom(4).hex()
    ws = S.workspace(secret)
    hello = os.path.join(ws, "hello.txt")
    token = H.session_token("auth0|arm64")
    scenarios = {"held_read": {"when": H.REPLAY, "steps": [
        {"op": "text", "text": "Reading."},
        {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001", "path": hello,
         "hold": True},
        {"op": "await_results", "max_s": 60},
        {"op": "text_from_result", "id": 1, "prefix": "GOT:"}] + H.END}}
    try:
        fake = H.Fake(tmp, scenarios, token,
                      config={"client_version": H.CLIENT_VERSION, "accept_any_jwt": False})
        # generous timeouts: every instruction of the proxy is emulated
        px = H.Proxy(tmp, "arm64", fake.url(), fake.ca, token,
                     # the tool loop is a native read mapped onto the client's read tool
                     extra_env={"CURSOR_OAI_IDLE_TIMEOUT": "30",
                                "CURSOR_OAI_TOOL_MODE": "cursor"})
        exe = os.path.realpath("/proc/%d/exe" % px.proc.pid)
        eq("the proxy process is the emulator running the arm64 binary",
           exe, os.path.realpath(qemu))
        st, body, _ = px.get("/health")
        eq("GET /health: 200", st, 200)

        for stream in (False, True):
            r = chat(px, {"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
                     stream)
            eq("chat stream=%s: 200" % stream, r["status"], 200)
            eq("chat stream=%s: the fake's answer" % stream, r["content"], HELLO)
            eq("chat stream=%s: finish stop, well-formed" % stream, (r["finish"], r["bad"]),
               (["stop"], []))

        for stream in (False, True):
            n0 = len([x for x in fake.runs() if x["scenario"] == "held_read"])
            msgs = [{"role": "user", "content": "read hello.txt"}]
            body = {"model": "scenario:held_read", "messages": msgs, "tools": TOOLS}
            r1 = chat(px, body, stream)
            calls = r1["tool_calls"]
            eq("tool loop stream=%s: a read tool call for hello.txt" % stream,
               [(t["name"], json.loads(t["arguments"] or "{}").get("path")) for t in calls],
               [("read", hello)])
            eq("tool loop stream=%s: finish tool_calls" % stream, r1["finish"], ["tool_calls"])
            if not calls:
                continue
            with open(hello) as f:
                out = f.read()
            msgs = msgs + [
                {"role": "assistant", "content": r1["content"] or None, "tool_calls": [
                    {"id": t["id"], "type": "function",
                     "function": {"name": t["name"], "arguments": t["arguments"]}}
                    for t in calls]},
                {"role": "tool", "tool_call_id": calls[0]["id"], "content": out}]
            r2 = chat(px, dict(body, messages=msgs), stream)
            check("tool loop stream=%s: the held run answered with the file's text" % stream,
                  r2["status"] == 200 and r2["content"].startswith("GOT:")
                  and secret in r2["content"], r2)
            runs = [x for x in fake.runs() if x["scenario"] == "held_read"][n0:]
            eq("tool loop stream=%s: one upstream run (held, not replayed)" % stream,
               len(runs), 1)
            if runs:
                eq("tool loop stream=%s: the result went as read_result + stream_close"
                   % stream, (runs[0]["exec_results"].get("1") or {}).get("frames"),
                   [["read_result", "success"], ["stream_close", None]])
        eq("every run used the transport %s" % H.TRANSPORT,
           sorted(set(x["transport"] for x in fake.runs())), [H.TRANSPORT])
        errs = fake.state()["errors"]
        check("the fake saw no protocol or validation error", not errs, errs[:5])
        px.stop()
        fake.stop()
    except Exception:   # noqa: BLE001 - a crash is one failed check
        check("suite ran to the end", False, traceback.format_exc())
    return S.finish(keep)


if __name__ == "__main__":
    threading.current_thread().name = "arm64_e2e"
    sys.exit(main())
