"""Process and protocol helpers for the end-to-end suite (stdlib only).

Everything started here is registered in PROCS and killed by cleanup() (atexit + SIGTERM/SIGINT),
and every wait is bounded."""

import argparse
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "fake"))
import certs  # noqa: E402
import pbwire as pb  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CLIENT_VERSION = "cli-2026.10.01-e373342"
PROCS = []


def stage_script(src, dst_dir):
    """Copy a Node script next to node_modules (ESM resolves packages from the script's own
    folder) and return its path. The copy is written under a name of its own and renamed over
    the destination, because test lanes run side by side and share the folder: a plain copy
    truncates the file another lane's node may be reading at that moment (an empty script, no
    output: one failed check in CI)."""
    dst = os.path.join(dst_dir, os.path.basename(src))
    tmp = "%s.%d.%d.tmp" % (dst, os.getpid(), threading.get_ident())
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return dst


def cleanup():
    for p in reversed(PROCS):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
    end = time.time() + 3
    for p in PROCS:
        try:
            p.wait(max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
    del PROCS[:]


atexit.register(cleanup)


def _sig(signum, frame):
    cleanup()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _sig)
signal.signal(signal.SIGINT, _sig)


def spawn(args, log_path, env=None, cwd=None, stderr=None, preexec_fn=None):
    """Start a process in its own process group (so the whole group can be killed); its
    stdout goes to log_path, and its stderr too unless stderr (a file descriptor) is given.
    preexec_fn: run in the child before the exec (e.g. a signal disposition it inherits)."""
    log = open(log_path, "wb")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT if stderr is None else stderr,
                         env=env, cwd=cwd, start_new_session=True, preexec_fn=preexec_fn)
    p.log_path = log_path
    log.close()
    PROCS.append(p)
    pf = os.environ.get("E2E_PIDFILE")
    if pf:  # lets tests/e2e_run.sh kill exactly what we started, even if we get SIGKILLed
        with open(pf, "a") as f:
            f.write("%d\n" % p.pid)
    return p


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
    if p in PROCS:
        PROCS.remove(p)


def tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            d = f.read()
        return d[-n:].decode("utf-8", "replace")
    except OSError:
        return ""


def wait_log(path, pred, timeout=20):
    """The text of a log file once pred(text) holds, or at the timeout: the proxy writes its
    log through a queue, a moment after what it reports (the answer may be out before)."""
    text = [""]

    def read():
        text[0] = tail(path, 10 ** 8)
        return pred(text[0])
    wait_for(read, timeout)
    return text[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(f, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = f()
            if v:
                return v
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(step)
    return None


# ---------------------------------------------------------------------------------------------
# a tunnel

class Forwarder:
    """A local TCP forwarder on its own port (what `ssh -L PORT:127.0.0.1:TARGET` does):
    bytes go through unchanged, so clients send Host: 127.0.0.1:PORT."""

    def __init__(self, target):
        self.target = target
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self):
        self.stopped = True
        self.ls.close()


# ---------------------------------------------------------------------------------------------
# the fake upstream

class Fake:
    def __init__(self, tmp, scenarios=None, token=None, config=None):
        self.dir = tmp
        cdir = os.path.join(tmp, "certs")
        if not os.path.exists(os.path.join(cdir, "server.pem")):
            certs.make_certs(cdir)
        ready = os.path.join(tmp, "fake-ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        args = [PY, os.path.join(ROOT, "tests", "fake", "fake_cursor.py"), "--cert-dir", cdir,
                "--ready-file", ready]
        if scenarios:
            sp = os.path.join(tmp, "scenarios.json")
            with open(sp, "w") as f:
                json.dump(scenarios, f)
            args += ["--scenarios", sp]
        if token:
            args += ["--token", token]
        if config:
            args += ["--config", json.dumps(config)]
        self.proc = spawn(args, os.path.join(tmp, "fake.log"))
        if not wait_for(lambda: os.path.exists(ready) or self.proc.poll() is not None, 60):
            raise RuntimeError("fake did not start:\n" + tail(self.proc.log_path))
        if self.proc.poll() is not None:
            raise RuntimeError("fake exited:\n" + tail(self.proc.log_path))
        with open(ready) as f:
            self.info = json.load(f)
        self.port = self.info["port"]
        self.ca = self.info["ca"]

    def url(self, which="port"):
        return "https://localhost:%d" % self.info[which]

    def ctl(self, path, body=None):
        url = "http://127.0.0.1:%d%s" % (self.info["control_port"], path)
        data = json.dumps(body).encode() if body is not None else None
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=15) as r:
            return json.loads(r.read())

    def state(self):
        return self.ctl("/state")

    def runs(self):
        return self.ctl("/runs")

    def stop(self):
        try:
            self.ctl("/shutdown", {})
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop(self.proc)


# ---------------------------------------------------------------------------------------------
# the proxy under test

# The transport the proxies under test use to reach the fake: COAI_TEST_TRANSPORT=h2|http1|auto
# (build.sh test runs every suite once per transport). Unset: http1, the transport most
# suites' checks of the fake's records (RunSSE heads, BidiAppend seqnos) were written for;
# h2_test.py covers the product's default (auto: HTTP/2, HTTP/1.1 as the fallback).
TRANSPORT = os.environ.get("COAI_TEST_TRANSPORT") or "http1"
# The suffix of a run's recorded path in the fake: RunSSE on HTTP/1.1, the Run stream on HTTP/2
# (whose messages the fake records as the appends of HTTP/1.1, without BidiAppend calls)
RUN_PATH = "RunSSE" if TRANSPORT == "http1" else "/Run"


def proxy_cmd():
    """The proxy under test: E2E_PROXY_CMD (a JSON argv list: build.sh's ASan/UBSan pass,
    harness self-validation), else $CURSOR_OAI_BIN, else build/cursor-oai."""
    if os.environ.get("E2E_PROXY_CMD"):
        # relative paths are relative to the repo root (the proxy runs in a temp cwd)
        return [os.path.join(ROOT, a) if not os.path.isabs(a) and os.path.exists(
            os.path.join(ROOT, a)) else a for a in json.loads(os.environ["E2E_PROXY_CMD"])]
    if os.environ.get("CURSOR_OAI_BIN"):
        return [os.path.abspath(os.environ["CURSOR_OAI_BIN"])]
    return [os.path.join(ROOT, "build", "cursor-oai")]


class Proxy:
    """`cursor-oai serve` on a free port of `host` (loopback unless told: a suite that checks
    the non-loopback guard binds 0.0.0.0 and still connects to 127.0.0.1 only), reaching
    api_url with the CA file ca; up once /health answers 200, else RuntimeError. stderr: a
    file descriptor for the proxy's stderr (its log) instead of the log file; preexec_fn: see
    spawn(); env: the whole environment, used as it is instead of the one made here (a suite
    that makes its own HOME and credential files; api_url, ca, token and extra_env unused);
    wait: the seconds it has to become healthy."""

    def __init__(self, tmp, name, api_url, ca, token, extra_env=None, args=None,
                 host="127.0.0.1", stderr=None, preexec_fn=None, env=None, wait=15):
        self.port = free_port()
        self.cwd = os.path.join(tmp, "cwd-" + name)
        os.makedirs(self.cwd, exist_ok=True)
        if env is not None:
            self.home = env.get("HOME")
        else:
            self.home = os.path.join(tmp, "home-" + name)
            os.makedirs(self.home, exist_ok=True)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("CURSOR_", "OPENAI_"))}
            env.update({
                "HOME": self.home, "XDG_CONFIG_HOME": os.path.join(self.home, ".config"),
                "CURSOR_API_URL": api_url, "SSL_CERT_FILE": ca, "CURSOR_ACCESS_TOKEN": token,
                "CURSOR_CLIENT_VERSION": CLIENT_VERSION,
                "CURSOR_OAI_IDLE_TIMEOUT": "2", "CURSOR_OAI_KEEPALIVE": "1",
            })
            # the transport to Cursor for this pass of the suites (TRANSPORT)
            env["CURSOR_OAI_TRANSPORT"] = TRANSPORT
            env.update(extra_env or {})
        self.env = env
        self.token = token
        # The port free_port() saw free can be taken before the proxy binds it (the other
        # transport's lane runs the same suite at the same time, and any outgoing connection
        # may get it as its local port): then start again on another one.
        for attempt in range(5):
            cmd = proxy_cmd() + ["serve", "--listen", "%s:%d" % (host, self.port)] + list(
                args or [])
            self.proc = spawn(cmd, os.path.join(tmp, "proxy-%s.log" % name), env=env,
                              cwd=self.cwd, stderr=stderr, preexec_fn=preexec_fn)
            ok = wait_for(lambda: self.proc.poll() is not None
                          or self.get("/health")[0] == 200, wait)
            if (attempt == 4 or self.proc.poll() is None
                    or "cannot listen on" not in tail(self.proc.log_path)):
                break
            PROCS.remove(self.proc) if self.proc in PROCS else None
            self.port = free_port()
        if not ok or self.proc.poll() is not None:
            raise RuntimeError("proxy %s did not become healthy:\n%s"
                               % (name, tail(self.proc.log_path)))
        self.base = "http://127.0.0.1:%d" % self.port

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path, headers=None):
        c = self.conn(5)
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), dict((k.lower(), v) for k, v in r.getheaders())
        finally:
            c.close()

    def request(self, method, path, body=None, headers=None, timeout=30):
        c = self.conn(timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read(), dict((k.lower(), v) for k, v in r.getheaders())
        finally:
            c.close()

    def chat(self, model, content="hi", stream=False, timeout=30, **extra):
        body = {"model": model, "messages": [{"role": "user", "content": content}],
                "stream": stream}
        body.update(extra)
        return self.request("POST", "/v1/chat/completions", body, timeout=timeout)

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def fd_split(self, upstream_port):
        """(other fds, sockets connected to upstream_port). Pooled upstream connections
        are legitimate (up to the pool's cap); every other fd must return to baseline."""
        remote = {}
        for name in ("tcp", "tcp6"):
            try:
                with open("/proc/%d/net/%s" % (self.proc.pid, name)) as f:
                    next(f)
                    for line in f:
                        cols = line.split()
                        remote[cols[9]] = int(cols[2].rsplit(":", 1)[1], 16)
            except OSError:
                pass
        other = upstream = 0
        fd_dir = "/proc/%d/fd" % self.proc.pid
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and remote.get(link[8:-1]) == upstream_port:
                upstream += 1
            else:
                other += 1
        return other, upstream

    def status_field(self, name):
        """An integer field of /proc/<pid>/status (Threads, VmRSS and VmHWM in KiB), or -1."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
        return -1

    def threads(self):
        return self.status_field("Threads")

    def rss_kib(self):
        return self.status_field("VmRSS")

    def stop(self):
        stop(self.proc)


def cursor_mode_proxy(*a, **kw):
    """A Proxy with CURSOR_OAI_TOOL_MODE=cursor: for a suite that scripts Cursor's native execs
    (shell, read, write, ...) with tools present. In client mode (the default) a run with tools
    gets none, and the fake refuses such a step; tests/tools_header_test.py covers that mode."""
    kw["extra_env"] = dict(kw.get("extra_env") or {}, CURSOR_OAI_TOOL_MODE="cursor")
    return Proxy(*a, **kw)


# ---------------------------------------------------------------------------------------------
# SSE

def parse_sse(raw):
    """bytes -> {"events": [data strings], "comments": n, "chunks": [json], "done": bool,
    "errors": [error objects], "bad": [problems], "content", "reasoning", "tool_calls",
    "finish": [finish_reason values]}"""
    out = {"events": [], "comments": 0, "chunks": [], "done": False, "errors": [], "bad": [],
           "content": "", "reasoning": "", "tool_calls": [], "finish": [], "usage": None}
    try:
        txt = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        out["bad"].append("invalid UTF-8: %s" % e)
        txt = raw.decode("utf-8", "replace")
    for block in txt.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        datas = []
        for line in block.split("\n"):
            if line.startswith(":"):
                out["comments"] += 1
            elif line.startswith("data:"):
                datas.append(line[5:].lstrip(" "))
            elif line:
                out["bad"].append("unexpected line %r" % line[:80])
        if not datas:
            continue
        if len(datas) > 1:
            out["bad"].append("multi-line data event")
        d = "\n".join(datas)
        out["events"].append(d)
        if out["done"]:
            out["bad"].append("event after [DONE]: %r" % d[:80])
        if d == "[DONE]":
            out["done"] = True
            continue
        try:
            j = json.loads(d)
        except ValueError:
            out["bad"].append("non-JSON data %r" % d[:80])
            continue
        if "error" in j:
            out["errors"].append(j["error"])
            continue
        out["chunks"].append(j)
        if j.get("usage"):
            out["usage"] = j["usage"]
        for ch in j.get("choices", []):
            dl = ch.get("delta", {})
            if dl.get("content"):
                out["content"] += dl["content"]
            if dl.get("reasoning_content"):
                out["reasoning"] += dl["reasoning_content"]
            for tc in dl.get("tool_calls") or []:
                i = tc.get("index", 0)
                while len(out["tool_calls"]) <= i:
                    out["tool_calls"].append({"id": "", "name": "", "arguments": ""})
                t = out["tool_calls"][i]
                t["id"] += tc.get("id") or ""
                fn = tc.get("function") or {}
                t["name"] += fn.get("name") or ""
                t["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                out["finish"].append(ch["finish_reason"])
    if out["events"] and out["events"][-1] != "[DONE]":
        out["bad"].append("last event is not [DONE]")
    return out


CONTENT_RE = re.compile(rb'"content"\s*:\s*"[^"]')


def stream_chat(port, body, timeout=30, stop_after_content=False, raw_headers=None):
    """POST a streaming chat with a raw socket; returns (status, headers, body bytes, t_first).
    With stop_after_content the socket is closed as soon as a content chunk arrived."""
    b = json.dumps(body).encode()
    h = ["POST /v1/chat/completions HTTP/1.1", "Host: 127.0.0.1:%d" % port,
         "Content-Type: application/json", "Content-Length: %d" % len(b), "Connection: close"]
    h += raw_headers or []
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(("\r\n".join(h) + "\r\n\r\n").encode() + b)
        buf = b""
        end = time.time() + timeout
        while time.time() < end:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            if not d:
                break
            buf += d
            if stop_after_content and CONTENT_RE.search(buf):
                return None, None, buf, None
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
        hdrs = {}
        for l in lines[1:]:
            if ":" in l:
                k, v = l.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            rest = dechunk(rest)
        return status, hdrs, rest, None
    finally:
        s.close()


def dechunk(b):
    out = b""
    while True:
        line, sep, b = b.partition(b"\r\n")
        if not sep:
            return out
        try:
            n = int(line.split(b";")[0], 16)
        except ValueError:
            return out
        if n == 0:
            return out
        out += b[:n]
        b = b[n + 2:]


# ---------------------------------------------------------------------------------------------
# a test program's frame: its tally of checks, its temporary directory, its sections

END = [{"op": "turn_ended"}, {"op": "trailer", "status": 0}]    # a fake scenario's clean end
# a scenario's branch for a replayed conversation (a held run's fallback: a fresh run whose
# prompt carries the tool results)
REPLAYED = "REPLAYED: answered from the flattened history."
REPLAY = [{"prompt_contains": "[Tool result for", "steps": [
    {"op": "text", "text": REPLAYED}] + END}]


def session_token(sub, **claims):
    """A Cursor session JWT for the fake (two hours)."""
    c = {"sub": sub, "exp": int(time.time()) + 7200, "type": "session"}
    c.update(claims)
    return pb.make_jwt(c)


class Suite:
    """One test program: check() and eq() print a line per check and count it; finish()
    stops what the harness started and prints the `RESULT <passed> <failed>` line build.sh
    reads. section: the tag each line carries ("[name] "), None for none; limit: how much of a
    failure's detail is printed; below: the detail goes on its own indented lines.
    Checks may come from several threads at once: each line is printed whole and counted once,
    and a thread that runs a section of its own (section_run) tags its lines with it."""

    def __init__(self, name, section="-", limit=None, below=False):
        self.name = name
        self._section = section
        self._tls = threading.local()
        self.lock = threading.RLock()
        self.limit = limit
        self.below = below
        self.passed = self.failed = 0
        self.tmp = None

    @property
    def section(self):
        """This thread's section when it runs one (section_run), else the suite's."""
        return getattr(self._tls, "section", self._section)

    @section.setter
    def section(self, name):
        self._section = name
        if hasattr(self._tls, "section"):
            self._tls.section = name

    def check(self, name, cond, detail=""):
        tag = "" if self.section is None else "[%s] " % self.section
        with self.lock:
            if cond:
                self.passed += 1
                print("ok   %s%s" % (tag, name), flush=True)
                return bool(cond)
            self.failed += 1
            if self.below:
                print("FAIL %s%s" % (tag, name))
                if detail is not None:
                    print("     " + str(detail)[:self.limit].replace("\n", "\n     "))
                sys.stdout.flush()
            else:
                print("FAIL %s%s %s" % (tag, name, str(detail)[:self.limit]), flush=True)
        return bool(cond)

    def note(self, msg):
        """A line that is not a check (a measured figure), with the section's tag."""
        tag = "" if self.section is None else "[%s] " % self.section
        with self.lock:
            print("     %s%s" % (tag, msg), flush=True)

    def eq(self, name, got, want):
        if self.below:
            return self.check(name, got == want, "got %r, want %r" % (got, want))
        return self.check(name, got == want, "\n     got: %r\n    want: %r" % (got, want))

    def options(self):
        """The command line of a suite with sections: --only a,b and --keep (the temporary
        directory stays). Returns (only, keep)."""
        ap = argparse.ArgumentParser()
        ap.add_argument("--only", default="")
        ap.add_argument("--keep", action="store_true")
        a = ap.parse_args()
        return set(x for x in a.only.split(",") if x), a.keep

    def binary_missing(self):
        """True, after saying so, when the proxy under test is not built."""
        exe = proxy_cmd()[0]
        if os.path.exists(exe):
            return False
        print("skipped: %s missing (build it first)" % exe)
        print("RESULT 0 0", flush=True)
        return True

    def make_tmp(self, parent=None):
        self.tmp = tempfile.mkdtemp(prefix="coai-%s-" % self.name, dir=parent)
        return self.tmp

    def workspace(self, secret=None):
        """tmp/workspace; with a secret, hello.txt says it."""
        ws = os.path.join(self.tmp, "workspace")
        os.makedirs(ws)
        if secret is not None:
            with open(os.path.join(ws, "hello.txt"), "w") as f:
                f.write("The secret word is %s.\n" % secret)
        return ws

    def sections(self, table, only=(), timed=True):
        """Run (name, fn) in order, those named in `only` when it is not empty; a section
        that raises is one failed check. timed: each section's time is printed after it."""
        for name, fn in table:
            if only and name not in only:
                continue
            if self.section is None:
                print("--- %s" % name, flush=True)
            else:
                self.section = name
            self._run(name, fn, timed)

    def section_run(self, name, fn, timed=True):
        """Run one section in this thread, its lines tagged with its name, for suites that
        run sections in threads of their own: as sections() does for each of its table."""
        self._tls.section = name
        self._run(name, fn, timed)

    def _run(self, name, fn, timed):
        t0 = time.time()
        try:
            fn()
        except Exception:   # noqa: BLE001 - a crashed section is a failure
            self.check("section ran to the end" if self.section is not None
                       else "%s ran to the end" % name, False, traceback.format_exc())
        if timed:
            with self.lock:
                print("     [%s] section took %.1f s" % (name, time.time() - t0), flush=True)

    def result(self):
        print("RESULT %d %d" % (self.passed, self.failed), flush=True)
        return 0 if self.failed == 0 else 1

    def finish(self, keep=False):
        """cleanup(), then the temporary directory is removed, or kept (and named) when a
        check failed or `keep`; prints RESULT and returns the exit status."""
        cleanup()
        if self.tmp:
            if self.failed or keep:
                print("logs kept in %s" % self.tmp)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        return self.result()
