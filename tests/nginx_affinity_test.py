#!/usr/bin/python3
"""Two cursor-oai instances behind nginx (session affinity), with examples/nginx-cursor-oai.conf
as it is (only its three addresses swapped for loopback ports), against the fake upstream.

- Each session header clients send (x-claude-code-session-id, session-id, session_id,
  conversation_id, thread-id) keeps a tool loop on the instance that holds its Cursor run, even
  when the follow-up comes from an address that nginx's address fallback would send elsewhere.
- A client with no session header is kept on one instance by its address (consistent hash).
- When a follow-up lands on the other instance anyway, the answer is still right (the replay
  path), and that instance's /metrics counts the fallback (no_held_run).

nginx is Debian's package (build.sh installs it with the test packages), run as a plain
process with its own prefix, pid, logs and temp directories under a temp dir, on loopback
ports. Run from the repo root:  /usr/bin/python3 tests/nginx_affinity_test.py
Prints `RESULT <passed> <failed>` last.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "e2e"))
sys.path.insert(0, HERE)
import harness as H  # noqa: E402
import held_test as HT  # noqa: E402  (the held-run scenarios, tools and tool runner)

NGINX = os.environ.get("NGINX", shutil.which("nginx") or "/usr/sbin/nginx")
EXAMPLE = os.path.join(H.ROOT, "examples", "nginx-cursor-oai.conf")
S = H.Suite("nginx_affinity", section=None, limit=1500, below=True)
check, eq = S.check, S.eq


def start_nginx(tmp, a_port, b_port):
    d = os.path.join(tmp, "nginx")
    os.makedirs(os.path.join(d, "logs"))
    # as root, nginx's workers run as nobody: they must reach the temp directories
    os.chmod(tmp, 0o755)
    os.chmod(d, 0o755)
    port = H.free_port()
    conf = open(EXAMPLE).read()
    for old, new in (("server 127.0.0.1:18741;", "server 127.0.0.1:%d;" % a_port),
                     ("server 127.0.0.1:18742;", "server 127.0.0.1:%d;" % b_port),
                     ("listen 127.0.0.1:8080;", "listen 127.0.0.1:%d;" % port),
                     ("# add_header X-Cursor-OAI-Instance", "add_header X-Cursor-OAI-Instance")):
        if conf.count(old) != 1:
            raise RuntimeError("%s: expected one %r" % (EXAMPLE, old))
        conf = conf.replace(old, new)
    with open(os.path.join(d, "cursor-oai.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write("daemon off;\nworker_processes 1;\npid %(d)s/nginx.pid;\n"
                "error_log %(d)s/logs/error.log info;\nevents { worker_connections 256; }\n"
                "http {\n  access_log %(d)s/logs/access.log;\n"
                "  client_body_temp_path %(d)s/client_body;\n  proxy_temp_path %(d)s/proxy;\n"
                "  fastcgi_temp_path %(d)s/fastcgi;\n  uwsgi_temp_path %(d)s/uwsgi;\n"
                "  scgi_temp_path %(d)s/scgi;\n  include %(d)s/cursor-oai.conf;\n}\n" % {"d": d})
    r = subprocess.run([NGINX, "-t", "-p", d, "-c", os.path.join(d, "nginx.conf"), "-e",
                        os.path.join(d, "logs", "error.log")], capture_output=True, text=True,
                       timeout=30)
    check("nginx -t accepts examples/nginx-cursor-oai.conf", r.returncode == 0, r.stderr)
    p = H.spawn([NGINX, "-p", d, "-c", os.path.join(d, "nginx.conf"), "-e",
                 os.path.join(d, "logs", "error.log")], os.path.join(d, "logs", "stderr.log"))
    ok = H.wait_for(lambda: p.poll() is not None or health(port, "127.0.0.1")[0] == 200, 20)
    if not ok or p.poll() is not None:
        raise RuntimeError("nginx did not start:\n" + H.tail(os.path.join(d, "logs",
                                                                         "error.log")))
    return p, port


def health(port, src):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(src, 0))
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("X-Cursor-OAI-Instance")
    except OSError as e:
        return 0, repr(e)


def chat(port, body, headers, src):
    """POST /v1/chat/completions through nginx from source address src ->
    dict(status, content, tool_calls, instance)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=90, source_address=(src, 0))
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers)
        c.request("POST", "/v1/chat/completions", json.dumps(body), h)
        r = c.getresponse()
        raw = r.read()
        inst = r.getheader("X-Cursor-OAI-Instance")
    finally:
        c.close()
    try:
        m = json.loads(raw)["choices"][0]["message"]
        return {"status": r.status, "content": m.get("content") or "", "instance": inst,
                "tool_calls": [{"id": t["id"], "name": t["function"]["name"],
                                "arguments": t["function"]["arguments"]}
                               for t in m.get("tool_calls") or []]}
    except (ValueError, KeyError, IndexError, TypeError):
        return {"status": r.status, "content": raw[:300], "tool_calls": [], "instance": inst}


def metrics(px):
    """{'continued': n, 'held': n, 'no_held_run': n, 'requests': n} of one instance."""
    st, body, _ = px.get("/metrics")
    out = {"continued": 0, "held": 0, "no_held_run": 0, "requests": 0}
    for ln in body.decode().splitlines():
        v = ln.rsplit(" ", 1)[-1]
        if ln.startswith('cursor_oai_continuation_events_total{event="run_continued"}'):
            out["continued"] = int(float(v))
        elif ln.startswith('cursor_oai_continuation_events_total{event="run_held"}'):
            out["held"] = int(float(v))
        elif ln.startswith('cursor_oai_fallbacks_total{kind="no_held_run"}'):
            out["no_held_run"] = int(float(v))
        elif ln.startswith("cursor_oai_requests_total{") and 'route="/v1/chat/completions"' in ln:
            out["requests"] += int(float(v))
    return out


def loop_two_steps(port, ws, headers, src1, src2):
    """First request (a read tool call) from src1, the tool result from src2: -> (r1, r2)."""
    msgs = [{"role": "user", "content": "go"}]
    body = {"model": "scenario:h_read", "messages": msgs, "tools": HT.TOOLS}
    r1 = chat(port, body, headers, src1)
    if not r1["tool_calls"]:
        return r1, None
    msgs = HT.follow_up(msgs, r1, ws)
    r2 = chat(port, dict(body, messages=msgs), headers, src2)
    return r1, r2


def main():
    if S.binary_missing():
        return 0
    if not os.access(NGINX, os.X_OK):
        if os.geteuid() == 0:
            check("nginx installed (build.sh installs it with the test packages)", False, NGINX)
        else:
            print("skipped: nginx not installed")
        return S.result()
    tmp = S.make_tmp()
    secret = "otter-" + os.urandom(4).hex()
    ws = S.workspace(secret)
    token = H.session_token("auth0|multi")
    try:
        fake = H.Fake(tmp, HT.scenarios(ws), token, config={"client_version": H.CLIENT_VERSION})
        n0 = len(fake.state()["errors"])
        # held_test's scenarios: Cursor's native execs (read, ...) with tools present, which
        # is cursor mode (in client mode, the default, a run with tools gets none;
        # tests/tools_header_test.py covers it)
        env = {"CURSOR_OAI_IDLE_TIMEOUT": "30", "CURSOR_OAI_TOOL_MODE": "cursor"}
        a = H.Proxy(tmp, "a", fake.url(), fake.ca, token, extra_env=env)
        b = H.Proxy(tmp, "b", fake.url(), fake.ca, token, extra_env=env)
        name = {"127.0.0.1:%d" % a.port: "a", "127.0.0.1:%d" % b.port: "b"}
        inst = {"a": a, "b": b}
        ngx, port = start_nginx(tmp, a.port, b.port)

        # which instance each client address goes to without a session header
        by_addr = {}
        for i in range(1, 61):
            src = "127.0.0.%d" % i
            st, up = health(port, src)
            if st == 200 and up in name:
                by_addr[src] = name[up]
        again = {src: name.get(health(port, src)[1]) for src in list(by_addr)[:10]}
        check("without a session header, an address always goes to the same instance",
              all(by_addr[s] == v for s, v in again.items()), (by_addr, again))
        addrs = {"a": [s for s, v in by_addr.items() if v == "a"],
                 "b": [s for s, v in by_addr.items() if v == "b"]}
        check("nginx spreads addresses over both instances (consistent hash)",
              addrs["a"] and addrs["b"], by_addr)
        if not (addrs["a"] and addrs["b"]):
            return S.finish()

        def other(x):
            return "b" if x == "a" else "a"

        # 1. session headers: the follow-up comes from an address hashed to the other instance
        for hdr in ("x-claude-code-session-id", "session-id", "session_id", "conversation_id",
                    "thread-id"):
            m0 = {k: metrics(v) for k, v in inst.items()}
            runs0 = len(HT.runs_of(fake, "h_read"))
            sid = str(uuid.uuid4())
            r1, r2 = loop_two_steps(port, ws, {hdr: sid}, addrs["a"][0], addrs["b"][0])
            x = name.get(r1["instance"])
            check("%s: the first request asks for a tool" % hdr,
                  r1["status"] == 200 and r1["tool_calls"], r1)
            if not r2:
                continue
            y = name.get(r2["instance"])
            eq("%s: the follow-up (from an address hashed elsewhere) reaches the same instance"
               % hdr, y, x)
            check("%s: the held run answered with the tool output" % hdr,
                  r2["status"] == 200 and r2["content"].startswith("GOT:")
                  and secret in r2["content"], r2)
            eq("%s: one upstream run for the loop" % hdr,
               len(HT.runs_of(fake, "h_read")) - runs0, 1)
            # read once: the proxy counts a run before the answer's last byte goes out
            m1 = {k: metrics(v) for k, v in inst.items()}
            if x in inst:
                eq("%s: /metrics of %s: held once, continued once, no fallback" % (hdr, x),
                   (m1[x]["held"] - m0[x]["held"], m1[x]["continued"] - m0[x]["continued"],
                    m1[x]["no_held_run"] - m0[x]["no_held_run"]), (1, 1, 0))
                eq("%s: /metrics of %s: no request" % (hdr, other(x)),
                   m1[other(x)]["requests"] - m0[other(x)]["requests"], 0)

        # 2. no session header, one address: the address hash keeps the loop on one instance
        for side in ("a", "b"):
            m0 = metrics(inst[side])
            runs0 = len(HT.runs_of(fake, "h_read"))
            src = addrs[side][0]
            r1, r2 = loop_two_steps(port, ws, {}, src, src)
            check("no session header, address %s: both requests on %s, the held run answered"
                  % (src, side), r2 and name.get(r1["instance"]) == side
                  and name.get(r2["instance"]) == side and secret in r2["content"], (r1, r2))
            m1 = metrics(inst[side])
            eq("  ... one upstream run, continued on %s" % side,
               (len(HT.runs_of(fake, "h_read")) - runs0, m1["continued"] - m0["continued"]),
               (1, 1))

        # 3. no session header and the client's address changes between the two requests:
        #    the follow-up lands on the instance without the run and is replayed
        for first in ("a", "b"):
            second = other(first)
            m0 = {k: metrics(v) for k, v in inst.items()}
            runs0 = len(fake.runs())
            r1, r2 = loop_two_steps(port, ws, {}, addrs[first][0], addrs[second][0])
            check("no affinity (%s, then %s): the follow-up is answered correctly by replaying "
                  "the conversation" % (first, second), r2 and r2["status"] == 200
                  and name.get(r2["instance"]) == second and r2["content"] == HT.REPLAYED,
                  (r1, r2))
            # read once: run_held is counted before the answer's last byte goes out too
            m1 = {k: metrics(v) for k, v in inst.items()}
            eq("  ... /metrics of %s: fallbacks_total{kind=no_held_run} +1, nothing continued"
               % second, (m1[second]["no_held_run"] - m0[second]["no_held_run"],
                          m1[second]["continued"] - m0[second]["continued"]), (1, 0))
            eq("  ... /metrics of %s: the run it holds was not continued" % first,
               (m1[first]["held"] - m0[first]["held"],
                m1[first]["continued"] - m0[first]["continued"]), (1, 0))
            eq("  ... two upstream runs (the held one and the replay)", len(fake.runs()) - runs0,
               2)
            st, body, _ = inst[second].get("/status.json")
            fb = {f["kind"]: f["count"] for f in json.loads(body)["live"]["fallbacks"]} \
                if st == 200 else {}
            check("  ... the status page of %s lists the fallback" % second,
                  fb.get("no_held_run", 0) >= 1, (st, fb))

        errs = fake.state()["errors"][n0:]
        check("the fake upstream saw no protocol errors", not errs, errs[:5])
        log = H.tail(os.path.join(tmp, "nginx", "logs", "error.log"), 20000)
        check("nginx logged no upstream error", "upstream" not in log or "[error]" not in log,
              log[-1500:])
        H.stop(ngx)
    except Exception as e:  # noqa: BLE001 - a crash is a failure
        import traceback
        traceback.print_exc()
        check("suite ran to the end", False, repr(e))
    return S.finish()


if __name__ == "__main__":
    sys.exit(main())
