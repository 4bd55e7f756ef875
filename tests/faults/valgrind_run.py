#!/usr/bin/python3
"""Driver of tests/valgrind.sh: runs BIN (argv[1], a dynamic debug build) under valgrind
against the fake Cursor upstream, exercises the main paths, SIGTERMs it and reads valgrind's
summary. Prints `RESULT <passed> <failed>` last."""

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

PASS = FAIL = 0


def check(name, cond, detail=""):
    global PASS, FAIL
    if cond:
        PASS += 1
        print("ok   %s" % name, flush=True)
    else:
        FAIL += 1
        print("FAIL %s %s" % (name, str(detail)[:800]), flush=True)
    return bool(cond)


def body(model, content="hi", stream=True, **kw):
    b = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream}
    b.update(kw)
    return b


READ_TOOL = {"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"filePath": {"type": "string"}},
                   "required": ["filePath"]}}}


def exercise(p, fake):
    st, b, _ = p.request("POST", "/v1/chat/completions", body("scenario:text_basic",
                                                              stream=False))
    check("non-streaming chat", st == 200 and b"Hello, world" in b, (st, b[:200]))
    st, hd, raw, _ = H.stream_chat(p.port, body("scenario:thinking"), timeout=60)
    s = H.parse_sse(raw)
    check("streaming chat with reasoning", st == 200 and s["content"] == "The answer is 42."
          and s["reasoning"] and s["done"], (st, raw[:300]))
    st, hd, raw, _ = H.stream_chat(p.port, body("scenario:tool_read", "read hello.txt",
                                                tools=[READ_TOOL]), timeout=60)
    s = H.parse_sse(raw)
    check("tool call streamed", st == 200 and s["tool_calls"] and s["finish"] == ["tool_calls"],
          (st, raw[:400]))
    if s["tool_calls"]:
        tc = s["tool_calls"][0]
        msgs = [{"role": "user", "content": "read hello.txt"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": tc["id"], "type": "function",
                    "function": {"name": tc["name"], "arguments": tc["arguments"]}}]},
                {"role": "tool", "tool_call_id": tc["id"], "content": "done"}]
        st, b, _ = p.request("POST", "/v1/chat/completions", {
            "model": "scenario:tool_read", "messages": msgs, "tools": [READ_TOOL],
            "stream": False}, timeout=60)
        check("tool result round trip", st == 200 and b"The file says: done." in b,
              (st, b[:300]))
    H.stream_chat(p.port, body("scenario:slow"), timeout=60, stop_after_content=True)
    ths = [threading.Thread(target=H.stream_chat, args=(p.port, body("scenario:stall", str(i))),
                            kwargs={"timeout": 60, "stop_after_content": True})
           for i in range(10)]
    [t.start() for t in ths]
    [t.join(90) for t in ths]
    check("client disconnects mid-stream (1 + 10 in parallel): upstream closed",
          H.wait_for(lambda: fake.state()["active_streams"] == 0, 30))
    st, b, _ = p.request("POST", "/v1/chat/completions", body("scenario:runsse_500",
                                                              stream=False))
    check("upstream HTTP 500 -> 502", st == 502, (st, b[:200]))
    st, hd, raw, _ = H.stream_chat(p.port, body("scenario:cut_frame"), timeout=60)
    s = H.parse_sse(raw)
    check("upstream cut mid-frame -> SSE error + [DONE]", st == 200 and s["errors"] and
          s["done"], (st, raw[:300]))
    st, b, hd = p.request("POST", "/v1/chat/completions", body("scenario:usage_limit"))
    check("usage limit -> 429", st == 429, (st, b[:200]))
    st, b, _ = p.request("POST", "/v1/chat/completions", b'{"model": [', timeout=30)
    check("bad JSON -> 400", st == 400, (st, b[:200]))
    st, b, _ = p.request("GET", "/v1/models", timeout=60)
    check("/v1/models", st == 200, (st, b[:200]))
    st, hd, raw, _ = H.stream_chat(p.port, body("scenario:stall"), timeout=60)
    s = H.parse_sse(raw)
    check("idle timeout -> SSE error + [DONE]", st == 200 and s["errors"] and s["done"],
          (st, raw[:300]))


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        H.ROOT, "build", "cursor-oai-debug"))
    tmp = tempfile.mkdtemp(prefix="coai-valgrind-")
    vlog = os.path.join(tmp, "valgrind.log")
    os.environ["E2E_PROXY_CMD"] = json.dumps([
        "valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite",
        "--error-exitcode=99", "--track-origins=yes", "--log-file=" + vlog, binary])
    token = pb.make_jwt({"sub": "auth0|valgrind", "exp": int(time.time()) + 7200,
                         "type": "session"})
    rc = None
    try:
        fake = H.Fake(tmp, None, token, config={"client_version": H.CLIENT_VERSION,
                                                "accept_any_jwt": False})
        t0 = time.time()
        p = H.Proxy(tmp, "valgrind", fake.url(), fake.ca, token)
        print("     proxy under valgrind ready after %.1f s" % (time.time() - t0))
        exercise(p, fake)
        time.sleep(1)
        p.proc.send_signal(signal.SIGTERM)
        try:
            rc = p.proc.wait(120)
        except Exception:
            rc = None
        check("exits after SIGTERM (within 120 s)", rc is not None, rc)
        check("valgrind exit status is not the error code 99", rc not in (None, 99), rc)
    except Exception:
        import traceback
        check("valgrind run", False, traceback.format_exc())
    finally:
        H.cleanup()
        log = H.tail(vlog, 10 ** 7)
        m_err = re.search(r"ERROR SUMMARY: ([\d,]+) errors", log)
        m_def = re.search(r"definitely lost: ([\d,]+) bytes in ([\d,]+) blocks", log)
        m_ind = re.search(r"indirectly lost: ([\d,]+) bytes", log)
        m_pos = re.search(r"possibly lost: ([\d,]+) bytes", log)
        num = (lambda m, i=1: int(m.group(i).replace(",", "")) if m else None)
        print("     valgrind: exit %s; ERROR SUMMARY %s errors; definitely lost %s bytes in %s "
              "blocks; indirectly lost %s; possibly lost %s" % (
                  rc, num(m_err), num(m_def), num(m_def, 2), num(m_ind), num(m_pos)))
        i = log.find("HEAP SUMMARY")
        for line in (log[i:] if i >= 0 else log[-2000:]).splitlines():
            print("     | " + line)
        check("valgrind ERROR SUMMARY: 0 errors", num(m_err) == 0,
              "\n".join(log.splitlines()[-80:]))
        check("definitely lost: 0 bytes", num(m_def) in (None, 0), m_def and m_def.group(0))
        if FAIL:
            print("valgrind log kept in %s" % vlog)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        print("RESULT %d %d" % (PASS, FAIL), flush=True)
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
