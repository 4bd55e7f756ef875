#!/usr/bin/python3
"""Coding agents doing real work through cursor-oai, end to end: build/cursor-oai
between the real programs and the fake Cursor upstream, which scripts the model. For each of
Claude Code, Codex, Qwen Code, Kilo Code, OpenCode, Cline's CLI and GitHub Copilot CLI (fresh
HOME, telemetry and update checks off, closed proxy: tests/e2e/clients.py), in each tool mode
(one proxy per mode, CURSOR_OAI_TOOL_MODE):

cursor mode: Cursor's native execs, mapped by the proxy to the client's tools
  rw      Cursor reads input.txt (the client's read tool), then writes out.txt with what the
          read result said (the client's write tool); the bytes on disk must be the input's
          bytes, and the read result the fake received must carry them with the right
          total_lines / file_size (no header, no line numbers)
  shell   a command whose output the answer quotes: the fake receives stdout, exit 0
  fail    a command that prints to stdout and stderr and exits 3: the fake receives exit
          code 3 (a shell failure) and the answer reports it
  usage   a Cursor usage limit: the client shows the limit message within 10 s
  big     Cursor writes big.txt, over 200 KiB (no trailing newline, quotes, `$`, UTF-8):
          the bytes on disk must be Cursor's, and the fake gets one write result with the
          right lines_created / file_size. Codex with a model it does not know offers no
          apply_patch: the write goes through exec_command (one string per call, Linux's
          128 KiB per argument), split by cursor-oai into several calls
  del     Cursor deletes a file through the client's tools: a delete result with its size
  (Cline and Copilot: rw, shell, fail, usage)

client mode: Cursor's model calls the client's own tools by their names with their own
arguments (MCP calls naming them: OWN_TOOLS, as each client sends them)
  rw      its read tool on input.txt (Cursor gets both lines), then its write tool for
          out.txt (the bytes on disk)
  shell   its shell tool: Cursor gets the output
  fail    its shell tool, exit 3: Cursor gets both output lines and the exit code 3
  (usage, big and del do not depend on the mode and run in cursor mode only; Claude Code and
  Codex run rw and fail here, Cline and Copilot all three; Qwen Code, Kilo Code and OpenCode
  rw and fail with AGENTS_CLIENT_ALL=1, slow starters left out of the default run)

Each task is one upstream run with continuation on (held runs): the answer is composed by the
fake from the results it received, so a result sent the old way fails here.
Prints `RESULT <passed> <failed>` last. AGENTS_ONLY=claude,codex,qwen,kilo,opencode,cline,copilot
picks clients; AGENTS_TASKS=rw,shell,fail,usage,big,del picks tasks; AGENTS_MODES=cursor,client
picks tool modes; AGENTS_VERBOSE=1 prints each client's output.
"""

import json
import os
import re
import sys
import tempfile
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
import harness as H  # noqa: E402
import clients as C  # noqa: E402

S = H.Suite("agents", section="", limit=3000)
check, eq = S.check, S.eq
KEY = "sk-agents-" + uuid.uuid4().hex[:8]
USAGE_LIMIT_S = 10.0
END = H.END


INPUT = "alpha line %s\nbeta: two\n"


def big_text(secret):
    """Over 200 KiB: quotes, `$`, backslashes and UTF-8 on every line, no trailing newline
    (and no trailing blanks: Claude Code's Write removes them from each line)."""
    lines = ["%05d %s it's \"q\" $HOME `x` \\ %% %s caf\u00e9 \u20ac \U0001f30d"
             % (i, secret, "z" * (i % 37)) for i in range(3200)]
    return "\n".join(lines)


def scenarios(ws, secret):
    inp, out = os.path.join(ws, "input.txt"), os.path.join(ws, "out.txt")
    sh = {"op": "exec", "kind": "shell_stream", "cwd": ws, "timeout": 30000, "hold": True}
    return {
        "ag_rw": {"steps": [
            {"op": "text", "text": "Reading input.txt."},
            {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-1", "path": inp,
             "hold": True},
            {"op": "await_results", "max_s": 120},
            {"op": "exec", "kind": "write", "id": 2, "exec_id": "exec-write-2", "path": out,
             "file_text_from": {"id": 1, "template": "{content}"}, "hold": True},
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_fields", "id": 1,
             "template": "RW-DONE read {total_lines} lines {file_size} bytes"}] + END},
        "ag_shell": {"steps": [
            dict(sh, id=1, exec_id="exec-sh-1", command="echo hello-%s" % secret),
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_fields", "id": 1,
             "template": "SHELL-OUT[{stdout}] EXIT[{exit_code}]"}] + END},
        "ag_fail": {"steps": [
            dict(sh, id=1, exec_id="exec-sh-1",
                 command="echo out-%s; echo err-%s >&2; exit 3" % (secret, secret)),
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_fields", "id": 1,
             "template": "FAILED EXIT[{exit_code}] {variant}"}] + END},
        "ag_big": {"steps": [
            {"op": "text", "text": "Writing big.txt."},
            {"op": "exec", "kind": "write", "id": 1, "exec_id": "exec-big-1",
             "path": os.path.join(ws, "big.txt"), "file_text": big_text(secret), "hold": True},
            {"op": "await_results", "max_s": 180},
            {"op": "text_from_fields", "id": 1,
             "template": "BIG-DONE {variant} {lines_created} lines {file_size} bytes"}] + END},
        "ag_del": {"steps": [
            {"op": "text", "text": "Deleting gone.txt."},
            # DeleteArgs {1 path}: the file's path, as Cursor sends it
            {"op": "exec", "kind": "delete", "id": 1, "exec_id": "exec-del-1",
             "args_hex": ("0a" + "%02x" % len(os.path.join(ws, "gone.txt").encode())
                          + os.path.join(ws, "gone.txt").encode().hex()), "hold": True},
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_fields", "id": 1, "template": "DEL-DONE {variant}"}] + END},
        "ag_usage": {"steps": [{"op": "trailer", "status": 8,
                                "message": "You've hit your usage limit",
                                "details": {"error": 10, "title": "Usage limit",
                                            "detail": "You've hit your usage limit"}}]},
    }


def _q(s):
    return "'" + s.replace("'", "'\\''") + "'"


# Each client's own tools (names and argument schemas as each sends them, recorded with
# tests/e2e/clients.py's Recorder): what Cursor's model calls as MCP tools in client mode.
# (read PATH, write PATH TEXT, run COMMAND) -> (tool name, arguments)
OWN_TOOLS = {
    "claude": {"read": lambda p: ("Read", {"file_path": p}),
               "write": lambda p, t: ("Write", {"file_path": p, "content": t}),
               "shell": lambda c: ("Bash", {"command": c, "description": "Run it"})},
    # Codex offers no file tools for a model it does not know: its one command tool
    "codex": {"read": lambda p: ("exec_command", {"cmd": "cat " + _q(p)}),
              "write": lambda p, t: ("exec_command",
                                     {"cmd": "printf %%s %s > %s" % (_q(t), _q(p))}),
              "shell": lambda c: ("exec_command", {"cmd": c})},
    "qwen": {"read": lambda p: ("read_file", {"file_path": p}),
             "write": lambda p, t: ("write_file", {"file_path": p, "content": t}),
             "shell": lambda c: ("run_shell_command", {"command": c})},
    "kilo": {"read": lambda p: ("read", {"filePath": p}),
             "write": lambda p, t: ("write", {"filePath": p, "content": t}),
             "shell": lambda c: ("bash", {"command": c, "description": "Run it"})},
    "cline": {"read": lambda p: ("read_files", {"files": [{"path": p}]}),
              "write": lambda p, t: ("editor", {"path": p, "new_text": t}),
              "shell": lambda c: ("run_commands", {"commands": [c]})},
    "copilot": {"read": lambda p: ("view", {"path": p}),
                "write": lambda p, t: ("create", {"path": p, "file_text": t}),
                "shell": lambda c: ("bash", {"command": c, "description": "Run it"})},
}
OWN_TOOLS["opencode"] = OWN_TOOLS["kilo"]
# OpenCode's and Kilo Code's bash give their model the command's output only (no exit code in
# the result text: what their model sees is what Cursor's gets in client mode)
NO_EXIT_IN_RESULT = ("kilo", "opencode")


def client_scenarios(ws, secret, name):
    """The same tasks in client mode: Cursor's model calls the client's own tools (MCP calls
    naming them, with their own arguments), each on one held run."""
    own = OWN_TOOLS[name]
    inp, out = os.path.join(ws, "input.txt"), os.path.join(ws, "out.txt")

    def mcp(i, call):
        tool, args = call
        return {"op": "exec", "kind": "mcp", "id": i, "exec_id": "exec-mcp-%d" % i,
                "tool_name": tool, "args": args, "tool_call_id": "toolu_ag%d" % i,
                "hold": True}
    return {
        "agc_rw": {"steps": [
            {"op": "text", "text": "Reading input.txt."},
            mcp(1, own["read"](inp)), {"op": "await_results", "max_s": 120},
            mcp(2, own["write"](out, INPUT % secret)), {"op": "await_results", "max_s": 120},
            {"op": "text_from_result", "id": 2, "prefix": "RW-DONE "}] + END},
        "agc_shell": {"steps": [
            mcp(1, own["shell"]("echo hello-%s" % secret)), {"op": "await_results", "max_s": 120},
            {"op": "text_from_result", "id": 1, "prefix": "SHELL-OUT "}] + END},
        "agc_fail": {"steps": [
            mcp(1, own["shell"]("echo out-%s; echo err-%s >&2; exit 3" % (secret, secret))),
            {"op": "await_results", "max_s": 120},
            {"op": "text_from_result", "id": 1, "prefix": "FAILED "}] + END},
    }


# ---------------------------------------------------------------------------------------------
# the clients

def _texts(o, out):
    """Every string under a "text" or "result" key of a JSON tree (an agent's answer)."""
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("text", "result") and isinstance(v, str):
                out.append(v)
            else:
                _texts(v, out)
    elif isinstance(o, list):
        for v in o:
            _texts(v, out)
    return out


def answer(r):
    """The client's visible answer text (its JSON output's text / result strings)."""
    out = []
    for line in r.text().splitlines():
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("type") == "assistant.message":
                out.append(str((ev.get("data") or {}).get("content")))   # Copilot CLI
            else:
                _texts(ev, out)
    try:
        _texts(json.loads(r.text()), out)          # Qwen Code: one JSON array
    except ValueError:
        pass
    return "\n".join(out)


def make_clients(proxy):
    root, v1 = proxy.base, proxy.base + "/v1"
    return {
        # Claude Code names Claude models; the fake's default scenario picks the task
        "claude": {"run": lambda prompt, ws, model, t: C.run_claude(
            root, prompt, ws, model="claude-sonnet-4-5-20250929", timeout=t, key=KEY),
            "by_default": True, "version": "@anthropic-ai/claude-code"},
        "codex": {"run": lambda prompt, ws, model, t: C.run_codex(
            v1, prompt, ws, model=model, timeout=t, key=KEY), "version": "@openai/codex"},
        "qwen": {"run": lambda prompt, ws, model, t: C.run_qwen(
            v1, prompt, ws, model=model, timeout=t, key=KEY), "version": "@qwen-code/qwen-code"},
        "kilo": {"run": lambda prompt, ws, model, t: C.run_kilo(
            v1, prompt, ws, model=model, timeout=t, key=KEY),
            "version": "@kilocode/cli-linux-x64"},
        "opencode": {"run": lambda prompt, ws, model, t: C.run_opencode(
            v1, prompt, ws, model=model, timeout=t, key=KEY), "version": None},
        "cline": {"run": lambda prompt, ws, model, t: C.run_cline(
            v1, prompt, ws, model=model, timeout=t, key=KEY), "version": "@cline/cli-linux-x64",
            "tasks": ("rw", "shell", "fail", "usage"), "client_tasks": ("rw", "shell", "fail")},
        "copilot": {"run": lambda prompt, ws, model, t: C.run_copilot(
            v1, prompt, ws, model=model, timeout=t, key=KEY),
            "version": "@github/copilot-linux-x64", "tasks": ("rw", "shell", "fail", "usage"),
            "client_tasks": ("rw", "shell", "fail")},
    }


def runs_of(fake, scenario, n0):
    return [r for r in fake.runs()[n0:] if r["scenario"] == scenario]


def qwen_lost_output(name, r):
    """1 when Qwen Code's own record of the task (its JSON output) shows a command result with
    no output at all. Qwen Code 0.24.4 (childProcessFallback in its shell service) settles a
    command on the child's exit event, before the pipe's last data is read: on a loaded
    machine a fast command's output is lost in the client itself (seen in CI: `echo` gave ''
    with exit 0). What the proxy did with the result is then not what is being tested."""
    if name != "qwen":
        return 0
    try:
        items = json.loads(r.text())
    except ValueError:
        return 0
    for ev in items if isinstance(items, list) else []:
        content = ((ev.get("message") or {}).get("content")) if isinstance(ev, dict) else None
        for c in content if isinstance(content, list) else []:
            # its display text: the output; with none, "" or "Command exited with code: N",
            # or the text the model gets ("Command: ...\nOutput: (empty)\n...", seen in CI)
            shown = str(c.get("content") or "").strip() if isinstance(c, dict) else "?"
            if isinstance(c, dict) and c.get("type") == "tool_result" and (
                    shown in ("", "(empty)") or "\nOutput: (empty)\n" in shown
                    or re.match(r"Command exited with code: \d+$", shown)):
                return 1
    return 0


def run_task_once_more(fake, cl, name, scenario, prompt, ws, again=None):
    """run_task, and once more when the client itself lost a command's output
    (qwen_lost_output); again() restores the workspace first. The second try counts."""
    r, runs = run_task(fake, cl, name, scenario, prompt, ws)
    if qwen_lost_output(name, r):
        print("     %s lost the command's output itself (its tool result is empty): once more"
              % name, flush=True)
        if again:
            again()
        r, runs = run_task(fake, cl, name, scenario, prompt, ws)
    return r, runs


def run_task(fake, cl, name, scenario, prompt, ws, timeout=240):
    n0 = len(fake.runs())
    if cl.get("by_default"):
        fake.ctl("/config", {"default_scenario": scenario})
    try:
        t0 = time.time()
        r = cl["run"](prompt, ws, "scenario:" + scenario, timeout)
        r.wall = time.time() - t0
    finally:
        if cl.get("by_default"):
            fake.ctl("/config", {"default_scenario": "default"})
    runs = runs_of(fake, scenario, n0)
    print("     %s %s: rc %s, %.1f s, %d upstream run(s)" % (name, scenario, r.rc, r.wall,
                                                          len(runs)), flush=True)
    if os.environ.get("AGENTS_VERBOSE"):
        print(r, flush=True)
    return r, runs


def t_client(name, cl, proxy, fake, tmp, secret, tasks):
    ws = tempfile.mkdtemp(prefix="ws-%s-" % name, dir=tmp)
    inp = os.path.join(ws, "input.txt")
    data = INPUT % secret
    with open(inp, "w") as f:
        f.write(data)
    sc = scenarios(ws, secret)
    for n, s in sc.items():
        fake.ctl("/scenario", {"name": n, "scenario": s})

    if "rw" in tasks:
        r, runs = run_task(fake, cl, name, "ag_rw", "Copy input.txt to out.txt.", ws)
        outp = os.path.join(ws, "out.txt")
        got = open(outp).read() if os.path.exists(outp) else None
        eq("rw: out.txt holds input.txt's bytes (written by the client's own tool)", got, data) \
            or print(r)
        eq("rw: one upstream run", len(runs), 1)
        eq("rw: cursor mode: the run named no allowed tools (Cursor's own tools stay)",
           runs[-1].get("allowed_tools") if runs else "no run", None)
        res = (runs[-1]["exec_results"] if runs else {})
        f1 = (res.get("1") or {}).get("fields") or {}
        eq("rw: the read result Cursor got: the file's bytes, total_lines, file_size",
           (f1.get("variant"), f1.get("content"), f1.get("total_lines"), f1.get("file_size")),
           ("success", data, 2, len(data.encode())))
        f2 = (res.get("2") or {}).get("fields") or {}
        eq("rw: the write result: lines_created, file_size",
           (f2.get("variant"), f2.get("lines_created"), f2.get("file_size")),
           ("success", 2, len(data.encode())))
        check("rw: the answer quotes what Cursor got", "RW-DONE read 2 lines %d bytes"
              % len(data.encode()) in answer(r), answer(r)[-800:] or r)

    if "shell" in tasks:
        r, runs = run_task_once_more(fake, cl, name, "ag_shell", "Say hello from the shell.", ws)
        eq("shell: one upstream run", len(runs), 1)
        f1 = ((runs[-1]["exec_results"] if runs else {}).get("1") or {}).get("fields") or {}
        want = "hello-%s" % secret
        check("shell: Cursor got the command's output as stdout and exit 0",
              f1.get("stdout", "").rstrip("\n") == want and f1.get("exit_code") == 0
              and f1.get("variant") == "success", f1)
        check("shell: the answer quotes the real output",
              "SHELL-OUT[%s" % want in answer(r) and "EXIT[0]" in answer(r),
              answer(r)[-800:] or r)

    if "fail" in tasks:
        r, runs = run_task_once_more(fake, cl, name, "ag_fail", "Run the failing command.", ws)
        eq("fail: one upstream run", len(runs), 1)
        f1 = ((runs[-1]["exec_results"] if runs else {}).get("1") or {}).get("fields") or {}
        both = f1.get("stdout", "") + f1.get("stderr", "")
        check("fail: Cursor got exit code 3 as a failure, with both output lines",
              f1.get("exit_code") == 3 and f1.get("variant") == "failure"
              and "out-%s" % secret in both and "err-%s" % secret in both
              and "Exit" not in both and "Chunk ID" not in both, f1)
        check("fail: the answer reports the real exit code",
              "FAILED EXIT[3] failure" in answer(r), answer(r)[-800:] or r)

    if "big" in tasks:
        data = big_text(secret)
        raw = data.encode()
        r, runs = run_task(fake, cl, name, "ag_big", "Write big.txt.", ws, timeout=300)
        p = os.path.join(ws, "big.txt")
        got = open(p, "rb").read() if os.path.exists(p) else None
        if got is not None and got != raw:
            open(p + ".want", "wb").write(raw)
            print("     kept %s and %s.want" % (p, p))
        check("big: big.txt holds Cursor's %d bytes" % len(raw), got == raw,
              (None if got is None else (len(got), got[:60], got[-60:]), r))
        eq("big: one upstream run", len(runs), 1)
        res = runs[-1]["exec_results"] if runs else {}
        f1 = (res.get("1") or {}).get("fields") or {}
        eq("big: one write result: success, lines_created, file_size",
           (f1.get("variant"), f1.get("lines_created"), f1.get("file_size"), sorted(res)),
           ("success", data.count("\n") + 1, len(raw), ["1"]))
        out = r.text().rstrip()
        if name == "qwen" and out.startswith("[") and not out.endswith("]"):
            # Qwen Code prints one JSON array at its exit, with the 249 KiB write in it, and
            # exits before a pipe takes it all: the answer is cut off (the fake's result and
            # the disk are checked above)
            print("     qwen: its JSON output was cut at %d bytes: the answer is not checked"
                  % len(r.text().encode()))
        else:
            check("big: the answer quotes what Cursor got", "BIG-DONE success %d lines %d "
                  "bytes" % (data.count("\n") + 1, len(raw)) in answer(r),
                  (answer(r)[-800:], r.text()[-1500:], r.err()[-1500:]))
        if name == "codex":
            # which tool Codex ran: exec_command, several calls, each under the limit
            cmds = []
            for line in r.text().splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                it = ev.get("item") or {}
                if ev.get("type") == "item.completed" and it.get("type") == "command_execution":
                    cmds.append(it.get("command") or "")
            parts = [c for c in cmds if "cursor-oai: write part" in c]
            check("big: Codex ran the write as %d exec_command calls, each under 128 KiB"
                  % len(parts), len(parts) == (len(raw) + 65535) // 65536
                  and all(len(c.encode()) < 128 * 1024 for c in parts),
                  [(len(c), c[:120]) for c in cmds])
            stray = [x for x in os.listdir(ws) if x.startswith(".cursor-oai-write")]
            eq("big: no staging directory left", stray, [])

    if "del" in tasks:
        # Cursor's delete through the shell tool (Codex refuses rm -f; the result is a
        # delete_result with the file's size, never an mcp_result, on which the turn stalls)
        gone = os.path.join(ws, "gone.txt")

        def make_gone():
            with open(gone, "w") as f:
                f.write("to be deleted %s\n" % secret)
        make_gone()
        size = os.path.getsize(gone)
        r, runs = run_task_once_more(fake, cl, name, "ag_del", "Delete gone.txt.", ws, make_gone)
        check("del: gone.txt is deleted (by the client's own tool)", not os.path.exists(gone), r)
        eq("del: one upstream run", len(runs), 1)
        res = (runs[-1]["exec_results"] if runs else {}).get("1") or {}
        f1 = res.get("fields") or {}
        eq("del: Cursor got a delete result: success, the file's size",
           (res.get("ok"), f1.get("variant"), f1.get("file_size")),
           (True, "success", size))
        check("del: the answer quotes it", "DEL-DONE success" in answer(r),
              answer(r)[-800:] or r)

    if "usage" in tasks:
        # a scenario of its own per client: the proxy's quota latch (per model) would answer
        # a second client without asking the fake
        fake.ctl("/scenario", {"name": "ag_usage_" + name, "scenario": sc["ag_usage"]})
        t0 = time.time()
        r, runs = run_task(fake, cl, name, "ag_usage_" + name, "Say hello.", ws, timeout=90)
        t_end = t0 + r.wall
        # from the request that met the limit to the client's exit with the message (the
        # program's own start-up, 30 s for Kilo Code on a loaded machine, is not the wait)
        wait = t_end - runs[0]["created"] if runs else r.wall
        txt = (r.text() + r.err()).lower()
        # Codex shows its own words for insufficient_quota: "Quota exceeded. Check your plan"
        shown = "usage limit" in txt or "quota exceeded" in txt
        check("usage: the limit message shows (%.1f s after the request, %d upstream run)"
              % (wait, len(runs)), shown and len(runs) == 1, r)
        check("usage: within %.0f s of the request (%.1f s; %.1f s with start-up)"
              % (USAGE_LIMIT_S, wait, r.wall), shown and wait <= USAGE_LIMIT_S, r)


ALLOWED_MCP = "mcp_tool_call,get_mcp_tools_tool_call"
EXIT3 = re.compile(r"(exit|return|status)\w*\W{0,3}(with\W{1,3})?(code|status)?\W{0,3}3\b", re.I)


def t_client_own(name, cl, fake, tmp, secret, tasks):
    """Client mode (CURSOR_OAI_TOOL_MODE=client): Cursor's model calls the client's own tools
    by their names with their arguments (MCP calls); what reached Cursor is the client tool's
    own result text."""
    ws = tempfile.mkdtemp(prefix="wsc-%s-" % name, dir=tmp)
    inp = os.path.join(ws, "input.txt")
    data = INPUT % secret
    with open(inp, "w") as f:
        f.write(data)
    for n, sc in client_scenarios(ws, secret, name).items():
        fake.ctl("/scenario", {"name": n, "scenario": sc})

    def res_of(runs, i):
        return (runs[-1]["exec_results"] if runs else {}).get(str(i)) or {}

    if "rw" in tasks:
        r, runs = run_task(fake, cl, name, "agc_rw", "Copy input.txt to out.txt.", ws)
        outp = os.path.join(ws, "out.txt")
        got = open(outp).read() if os.path.exists(outp) else None
        eq("rw: out.txt holds input.txt's bytes (the client's own write tool)", got, data) \
            or print(r)
        eq("rw: one upstream run", len(runs), 1)
        # what makes Cursor's model call the client's tools: the run's allowed-tools header
        eq("rw: the run allowed Cursor's model only MCP tools (x-cursor-agent-allowed-tools)",
           runs[-1].get("allowed_tools") if runs else None, ALLOWED_MCP)
        r1, r2 = res_of(runs, 1), res_of(runs, 2)
        check("rw: Cursor got the read tool's result as an MCP result with both lines",
              r1.get("ok") and r1.get("fields", {}).get("result") == "mcp_result"
              and "alpha line %s" % secret in r1.get("text", "")
              and "beta: two" in r1.get("text", ""), r1)
        check("rw: Cursor got the write tool's result as an MCP result",
              r2.get("ok") and r2.get("fields", {}).get("result") == "mcp_result", r2)
        check("rw: the answer came after both results", "RW-DONE" in answer(r),
              answer(r)[-800:] or r)

    if "shell" in tasks:
        r, runs = run_task_once_more(fake, cl, name, "agc_shell", "Say hello from the shell.",
                                     ws)
        eq("shell: one upstream run", len(runs), 1)
        r1 = res_of(runs, 1)
        check("shell: Cursor got the command's output in the MCP result",
              r1.get("ok") and "hello-%s" % secret in r1.get("text", ""), r1)
        check("shell: the answer quotes it", re.search(r"SHELL-OUT [^\n]*hello-%s" % secret,
                                                         answer(r)), answer(r)[-800:] or r)

    if "fail" in tasks:
        r, runs = run_task_once_more(fake, cl, name, "agc_fail", "Run the failing command.", ws)
        eq("fail: one upstream run", len(runs), 1)
        r1 = res_of(runs, 1)
        t1 = r1.get("text", "")
        code = name not in NO_EXIT_IN_RESULT
        check("fail: Cursor got both output lines%s in the MCP result"
              % (" and exit code 3" if code else " (the client's tool tells no exit code)"),
              r1.get("ok") and "out-%s" % secret in t1 and "err-%s" % secret in t1
              and (EXIT3.search(t1) or not code), r1)
        a = answer(r)
        check("fail: the answer quotes it", "FAILED " in a and "out-%s" % secret in a
              and (EXIT3.search(a[a.find("FAILED "):]) or not code), a[-800:] or r)


MODES = ("cursor", "client")
# client mode for the five agents tested since issue 25: fail has the shell's output as well;
# by default only for the two that start fast (Claude Code, Codex: 10-25 s for both tasks on a
# loaded machine, against 100-370 s for Qwen Code, OpenCode and Kilo Code), all five with
# AGENTS_CLIENT_ALL=1
CLIENT_TASKS = ("rw", "fail")
CLIENT_FAST = ("claude", "codex", "cline", "copilot")


def main():
    only = [x for x in os.environ.get("AGENTS_ONLY", "").split(",") if x]
    tasks = set(x for x in os.environ.get("AGENTS_TASKS", "rw,shell,fail,usage,big,del").split(",")
                if x)
    modes = [x for x in os.environ.get("AGENTS_MODES", ",".join(MODES)).split(",") if x]
    if S.binary_missing():
        return 0
    try:
        C.ensure()
    except C.Unavailable as e:
        check("clients install from the npm registry", False, e)
        return S.result()
    # under build/clients/homes: Codex refuses its helper links under /tmp
    tmp = S.make_tmp(C.homes())
    secret = "otter-" + uuid.uuid4().hex[:8]
    token = H.session_token("auth0|e2e")
    try:
        fake = H.Fake(tmp, {}, token, config={"client_version": H.CLIENT_VERSION})
        # one proxy per tool mode: cursor (Cursor's native execs mapped to the client's
        # tools) and client (Cursor's model calls the client's own tools)
        proxies = {m: H.Proxy(tmp, m, fake.url(), fake.ca, token,
                              extra_env={"CURSOR_OAI_API_KEY": KEY,
                                         "CURSOR_OAI_TOOL_MODE": m}) for m in modes}
        for mode in modes:
            clients = make_clients(proxies[mode])
            for name, cl in clients.items():
                if only and name not in only:
                    continue
                S.section = "%s/%s" % (name, mode)
                if name == "opencode" and not os.path.exists(C.OPENCODE):
                    check("OpenCode installed in build/npm (tests/e2e_run.sh installs it)", False,
                          C.OPENCODE)
                    continue
                if mode == "client" and name not in CLIENT_FAST \
                        and not os.environ.get("AGENTS_CLIENT_ALL"):
                    continue
                n0 = len(fake.state()["errors"])
                mine = tasks & set(cl.get("tasks") or tasks)
                try:
                    if mode == "cursor":
                        t_client(name, cl, proxies[mode], fake, tmp, secret, mine)
                    else:
                        # the tool mode decides nothing else: usage, big and del run once
                        t_client_own(name, cl, fake, tmp, secret,
                                     tasks & set(cl.get("client_tasks") or CLIENT_TASKS))
                except Exception:
                    check("section ran to the end", False, traceback.format_exc())
                errs = fake.state()["errors"][n0:]
                check("fake upstream saw no protocol/validation errors", not errs,
                      json.dumps(errs)[:2000])
        S.section = "final"
        for proxy in proxies.values():
            log = open(proxy.proc.log_path, "rb").read()
            check("the API key never appears in the proxy log", KEY.encode() not in log, "")
            check("proxy still running", proxy.proc.poll() is None, H.tail(proxy.proc.log_path))
    finally:
        H.cleanup()
    if S.failed == 0:
        C.forget_homes()
    return S.result()


if __name__ == "__main__":
    sys.exit(main())
