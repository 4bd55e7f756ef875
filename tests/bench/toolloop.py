#!/usr/bin/python3
"""Tool-loop figure (issue 11): a five-step tool loop through cursor-oai against the fake
upstream, once with continuation on (held runs) and once with CURSOR_OAI_CONTINUATION=off, in
one run. For each: upstream runs started, bytes of prompt sent upstream (the run requests'
user messages) plus bytes of tool results sent as exec results, and the time from each
follow-up request to its first token. The fake models Cursor's run start-up with a fixed
delay (--startup-ms, default 1500 ms; the original's authors measured 3-6 s live), so the
numbers show what a held run saves, not live latencies. Both loops run over each transport
to Cursor (--transports, default both: HTTP/1.1 RunSSE + BidiAppend, and the HTTP/2 Run
stream), so the tool-result-to-next-token latency of a held run is shown side by side.
  tests/bench/toolloop.py [--steps 5] [--startup-ms 1500] [--result-kb 4] [--transports http1,h2]
Uses $CURSOR_OAI_BIN or build/cursor-oai. Prints a table; exit 0 when both loops finished."""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

if os.environ.get("CURSOR_OAI_BIN"):
    H.proxy_cmd = lambda: [os.path.abspath(os.environ["CURSOR_OAI_BIN"])]

TOOLS = [{"type": "function", "function": {
    "name": "read", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def scenario(ws, steps, startup_ms):
    def ex(i):
        return {"op": "exec", "kind": "read", "id": i, "exec_id": "exec-read-%04d" % i,
                "path": os.path.join(ws, "f%d.txt" % i), "hold": True}
    start = [{"op": "sleep", "s": startup_ms / 1000.0}]
    final = [{"op": "text", "text": "LOOP DONE"}, {"op": "turn_ended"},
             {"op": "trailer", "status": 0}]
    full = list(start)
    for i in range(1, steps + 1):
        full += [{"op": "text", "text": "step %d" % i}, ex(i), {"op": "await_results",
                                                                "max_s": 120}]
    full += final
    # a replayed conversation (continuation off) goes on from the last result it carries
    when = []
    for i in range(steps, 0, -1):
        rest = [{"op": "text", "text": "step %d" % (i + 1)}, ex(i + 1),
                {"op": "await_results", "max_s": 120}] if i < steps else final
        when.append({"prompt_contains": "call_execread%04d]" % i, "steps": start + rest})
    return {"when": when, "steps": full}


def post_stream(port, body, timeout=120):
    """POST a streaming chat; -> (body bytes, seconds to the first content/tool-call chunk)."""
    import socket
    b = json.dumps(body).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
            "application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (port, len(b))).encode()
    t0 = time.time()
    first = None
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    buf = b""
    try:
        s.sendall(head + b)
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
            if first is None and (b'"content":"' in buf or b'"tool_calls"' in buf):
                first = time.time() - t0
    finally:
        s.close()
    _, _, rest = buf.partition(b"\r\n\r\n")
    return H.dechunk(rest), first if first is not None else time.time() - t0


def loop(px, ws, steps):
    msgs = [{"role": "user", "content": "Read the files one by one."}]
    ttft = []
    for n in range(steps + 1):
        raw, first = post_stream(px.port, {"model": "scenario:bench_loop", "messages": msgs,
                                           "tools": TOOLS, "stream": True})
        s = H.parse_sse(raw)
        if n > 0:
            ttft.append(first)
        if not s["tool_calls"]:
            return s["content"], ttft
        msgs.append({"role": "assistant", "content": s["content"] or None, "tool_calls": [
            {"id": t["id"], "type": "function", "function": {"name": t["name"],
                                                              "arguments": t["arguments"]}}
            for t in s["tool_calls"]]})
        for t in s["tool_calls"]:
            with open(json.loads(t["arguments"])["path"]) as f:
                msgs.append({"role": "tool", "tool_call_id": t["id"], "content": f.read()})
    return None, ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--startup-ms", type=int, default=1500)
    ap.add_argument("--result-kb", type=int, default=4)
    ap.add_argument("--transports", default="http1,h2",
                    help="comma-separated CURSOR_OAI_TRANSPORT values to run (http1, h2)")
    ap.add_argument("--json", help="also write the rows to this file (bench.py --summary)")
    a = ap.parse_args()
    transports = [t for t in a.transports.split(",") if t]
    for t in transports:
        if t not in ("http1", "h2"):
            ap.error("--transports: %r is not http1 or h2" % t)
    tmp = tempfile.mkdtemp(prefix="coai-toolloop-")
    ws = os.path.join(tmp, "ws")
    os.makedirs(ws)
    for i in range(1, a.steps + 2):
        with open(os.path.join(ws, "f%d.txt" % i), "w") as f:
            f.write(("file %d line of text\n" % i) * (a.result_kb * 1024 // 22 + 1))
    token = pb.make_jwt({"sub": "auth0|bench", "exp": int(time.time()) + 7200})
    rows, ok = [], True
    try:
        fake = H.Fake(tmp, {"bench_loop": scenario(ws, a.steps, a.startup_ms)}, token)
        for tr, mode in [(t, m) for t in transports for m in ("on", "off")]:
            px = H.Proxy(tmp, tr + "-" + mode, fake.url(), fake.ca, token,
                         # the loop's steps are Cursor's native reads, mapped onto the
                         # client's read tool: the cursor tool mode
                         extra_env={"CURSOR_OAI_TOOL_MODE": "cursor",
                                    "CURSOR_OAI_CONTINUATION": mode,
                                    "CURSOR_OAI_TRANSPORT": tr,
                                    "CURSOR_OAI_IDLE_TIMEOUT": "120"})
            n0 = len(fake.runs())
            final, ttft = loop(px, ws, a.steps)
            runs = [r for r in fake.runs()[n0:] if r["scenario"] == "bench_loop"]
            prompt = sum(len((r["appends"][0]["message"].get("prompt") or "").encode())
                         for r in runs if r["appends"])
            results = sum(len(("\n".join(x.get("strings") or [])).encode())
                          for r in runs for x in (ap_["message"] for ap_ in r["appends"])
                          if x.get("type") == "exec_result")
            used = set(r.get("transport") for r in runs)
            ok = ok and final == "LOOP DONE" and used == {tr}
            rows.append((tr, mode, len(runs), prompt, results, ttft, final, used))
            px.stop()
        fake.stop()
    finally:
        H.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("tool loop: %d steps, %d KiB per tool result, modeled run start-up %d ms"
          % (a.steps, a.result_kb, a.startup_ms))
    print("%-9s %-14s %6s %14s %14s %28s %10s" % ("transport", "continuation", "runs",
                                                   "prompt bytes", "result bytes",
                                                   "follow-up TTFT (median/max)", "finished"))
    for tr, mode, n, prompt, results, ttft, final, used in rows:
        med = statistics.median(ttft) if ttft else 0
        print("%-9s %-14s %6d %14d %14d %20.0f / %5.0f ms %10s" % (
            tr, mode, n, prompt, results, med * 1000, (max(ttft) if ttft else 0) * 1000,
            "yes" if final == "LOOP DONE" else "NO"))
        if used != {tr}:
            print("  the fake saw these transports instead of %s: %s" % (tr, sorted(
                str(u) for u in used)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"transport": tr, "continuation": mode, "runs": n, "prompt_bytes": prompt,
                        "result_bytes": results, "ttft_ms": [x * 1000 for x in ttft],
                        "finished": final == "LOOP DONE"}
                       for tr, mode, n, prompt, results, ttft, final, used in rows], f)
    print("(TTFT: from sending a follow-up with tool results to its first content or tool-call "
          "chunk; prompt bytes: user messages of the run requests; result bytes: tool output "
          "sent as exec results on a held run)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
