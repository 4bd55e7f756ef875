#!/usr/bin/python3
"""Credentials, login and renewal tests for cursor-oai (spec 13, 14; reliability.md 3.3, 3.4 and
scenarios 35-42), against the fake Cursor upstream (tests/fake/fake_cursor.py).

Run from the repo root:  /usr/bin/python3 tests/auth_test.py
Env: CURSOR_OAI_BIN (default build/cursor-oai). Prints `RESULT <passed> <failed>` last.

Every process started here runs in its own process group and is killed at the end (atexit,
SIGINT/SIGTERM, and a global alarm); every wait is bounded; everything listens on 127.0.0.1.

How a failing credential write is produced (we run as root, where chmod does not stop writes):
a 64 KiB tmpfs is mounted on the cursor-oai config directory and filled up, so writing the
temporary file fails with ENOSPC. Without root (no mount) those checks are reported as skipped.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402  (process registry, fake wrapper, SSE parser)
pb = H.pb

S = H.Suite("auth", section=None, limit=1500, below=True)
if S.binary_missing():
    sys.exit(0)

SUITE_TIMEOUT = int(os.environ.get("AUTH_TEST_TIMEOUT", "900"))
OUTPUTS = []        # (name, text) of every stdout/stderr/log we captured
TOKENS = set()      # every secret used or issued: none may appear in OUTPUTS
MOUNTS = []


def check(name, cond, detail=None):
    """S.check, with no detail line unless one is given."""
    return S.check(name, cond, detail)


eq = S.eq


def skip(name, why):
    print("skip %s: %s" % (name, why))


def on_alarm(signum, frame):
    check("suite within %d s" % SUITE_TIMEOUT, False)
    final_cleanup()
    S.result()
    os._exit(1)


def final_cleanup():
    H.cleanup()
    for m in reversed(MOUNTS):
        subprocess.call(["umount", "-l", m], stderr=subprocess.DEVNULL)
    del MOUNTS[:]


# ---------------------------------------------------------------------------------------------
# environment, processes

TMP = S.make_tmp()
FAKE = None
N_ENV = [0]


def jwt(exp_in, sub="auth0|user_test", email=None):
    p = {"sub": sub, "exp": int(time.time()) + exp_in, "type": "session"}
    if email:
        p["email"] = email
    t = pb.make_jwt(p)
    TOKENS.add(t)
    return t


def rt(name):
    t = "rt_test_%s_%s" % (name, os.urandom(6).hex())
    TOKENS.add(t)
    return t


def new_env(name, api_url=None, extra=None):
    """A fresh HOME/XDG_CONFIG_HOME and the upstream settings; nothing from the caller's
    CURSOR_* environment leaks in."""
    N_ENV[0] += 1
    home = os.path.join(TMP, "h%02d-%s" % (N_ENV[0], name))
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CURSOR_", "OPENAI_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "CURSOR_API_URL": api_url or FAKE.url(), "SSL_CERT_FILE": FAKE.ca,
                "CURSOR_CLIENT_VERSION": H.CLIENT_VERSION, "CURSOR_OAI_LOGIN_DELAY_SCALE": "0.01",
                "CURSOR_OAI_IDLE_TIMEOUT": "5", "CURSOR_OAI_KEEPALIVE": "1"})
    env.update(extra or {})
    return env


def ours_dir(env):
    return os.path.join(env["XDG_CONFIG_HOME"], "cursor-oai")


def ours_path(env):
    return os.path.join(ours_dir(env), "auth.json")


def agent_path(env):
    return os.path.join(env["XDG_CONFIG_HOME"], "cursor", "auth.json")


def write_creds(path, access, refresh=None, api_key=None, mode=0o600):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    d = {"accessToken": access}
    if refresh:
        d["refreshToken"] = refresh
    if api_key:
        d["apiKey"] = api_key
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
    os.chmod(path, mode)


def read_creds(path):
    with open(path) as f:
        d = json.load(f)
    for k in ("accessToken", "refreshToken", "apiKey"):
        if d.get(k):
            TOKENS.add(d[k])
    return d


def file_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def cli(name, args, env, timeout=40, stdin=None):
    """Run one cursor-oai command; returns (rc, stdout, stderr)."""
    try:
        r = subprocess.run(H.proxy_cmd() + args, env=env, cwd=TMP, input=stdin, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
        out, err, rc = r.stdout.decode("utf-8", "replace"), r.stderr.decode(
            "utf-8", "replace"), r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode(
            "utf-8", "replace"), "timeout"
    OUTPUTS.append(("cli %s %s stdout" % (name, args[:1]), out))
    OUTPUTS.append(("cli %s %s stderr" % (name, args[:1]), err))
    return rc, out, err


class Srv(H.Proxy):
    """cursor-oai serve (the harness's Proxy) with the given environment: its own HOME and
    credential files, and no token unless the environment has one."""

    def __init__(self, name, env):
        # the transport of this pass (HTTP/1.1 unless COAI_TEST_TRANSPORT says otherwise): the
        # checks below read the tokens the fake recorded on RunSSE and BidiAppend
        env.setdefault("CURSOR_OAI_TRANSPORT", H.TRANSPORT)
        H.Proxy.__init__(self, TMP, name, None, None, None, env=env, wait=20)
        self.log = self.proc.log_path

    def chat(self, model="auto", **kw):
        return H.Proxy.chat(self, model, **kw)

    def health(self):
        st, b, _ = self.get("/health")
        return json.loads(b) if st == 200 else {}

    def logtext(self):
        return H.tail(self.log, 10 ** 7)

    def stop(self):
        H.stop(self.proc)
        OUTPUTS.append(("proxy log " + self.log, self.logtext()))


def jerr(body):
    try:
        return json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        return {}


def chat_text(st, body, stream):
    if st != 200:
        return None
    if stream:
        s = H.parse_sse(body)
        return s["content"] if s["done"] and not s["errors"] else None
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------
# fake upstream helpers

# /auth/refresh is absent by default here (unconfirmed on the 2026 server): a browser login is
# renewed through /oauth/token (notes autumn 2026, 5.7); t_oauth_fallback turns it back on.
FAKE_DEFAULTS = {"accept_any_jwt": True, "poll_pending": 2, "refresh_status": None,
                 "refresh_delay_s": 0.0, "rotate_refresh": True, "oauth_rotate": False,
                 "api_keys": None,
                 "oauth_token_route": True, "auth_refresh_route": False,
                 "models_status": None, "access_ttl_s": 3600, "default_scenario": "default"}


def harvest():
    """Every bearer the fake saw (access tokens, refresh tokens, API keys) and every PKCE
    verifier goes into TOKENS."""
    for r in FAKE.ctl("/requests?since=0"):
        a = (r.get("headers") or {}).get("authorization", "")
        if a.startswith("Bearer ") and len(a) > 15:
            TOKENS.add(a[7:])
        q = r.get("query") or ""
        for part in q.split("&"):
            if part.startswith("verifier=") and len(part) > 20:
                TOKENS.add(part[9:])


def fake_reset(**cfg):
    harvest()
    FAKE.ctl("/reset", {})
    c = dict(FAKE_DEFAULTS)
    c.update(cfg)
    FAKE.ctl("/config", c)


def counters():
    return FAKE.state()["counters"]


def count(name):
    return counters().get(name, 0)


def reqs(path_suffix, n=0):
    """Recorded requests to a path. The fake records a request when its handler returns, which
    for RunSSE can be just after the proxy answered its client: wait (bounded) for n of them."""
    end = time.time() + 15
    while True:
        got = [r for r in FAKE.ctl("/requests?since=0") if r["path"].endswith(path_suffix)]
        if len(got) >= n or time.time() > end:
            return got
        time.sleep(0.05)


def bearer_of(r):
    return (r.get("headers") or {}).get("authorization", "")[7:]


# ---------------------------------------------------------------------------------------------
# tests: login

def t_login_browser_flow():
    fake_reset(poll_pending=3)
    env = new_env("login")
    bindir = os.path.join(env["HOME"], "bin")
    os.makedirs(bindir)
    marker = os.path.join(env["HOME"], "xdg-open.args")
    with open(os.path.join(bindir, "xdg-open"), "w") as f:
        f.write("#!/bin/sh\nprintf '%%s\\n' \"$#\" \"$@\" > '%s'\n" % marker)
    os.chmod(os.path.join(bindir, "xdg-open"), 0o755)
    env["PATH"] = bindir + ":" + env.get("PATH", "/usr/bin:/bin")
    env["DISPLAY"] = ":99"
    # a pre-existing, too open config directory must end up 0700; umask 000 must not matter
    os.makedirs(ours_dir(env), mode=0o755)
    os.chmod(ours_dir(env), 0o755)
    old_umask = os.umask(0)
    try:
        rc, out, err = cli("login", ["login", "--no-browser"], env)
    finally:
        os.umask(old_umask)
    eq("login: exit 0 after 3 pending polls", rc, 0)
    eq("login: exactly 4 polls (404 x3, then tokens)", count("poll_calls"), 4)
    polls = reqs("/auth/poll")
    check("login: polls are GET with content-type application/json",
          polls and all(p["method"] == "GET" and p["headers"].get("content-type") ==
                        "application/json" for p in polls), polls[:1])
    url_line = [l.strip() for l in out.splitlines()
                if l.strip().startswith("https://cursor.com/loginDeepControl?")]
    check("login: prints the login URL", len(url_line) == 1, out[:500])
    uuid = polls[0]["query"].split("uuid=")[1].split("&")[0] if polls else "?"
    check("login: URL carries the polled uuid, mode=login, redirectTarget=cli",
          url_line and ("uuid=%s&" % uuid) in url_line[0] and "challenge=" in url_line[0]
          and url_line[0].endswith("&mode=login&redirectTarget=cli"), (url_line, uuid))
    qr_rows = [l for l in out.splitlines() if l and set(l) <= set(u"\u2580\u2584\u2588 ")]
    check("login: prints a QR code (>= 20 rows of half blocks)", len(qr_rows) >= 20, out[:300])
    check("login: no browser with --no-browser (even with DISPLAY)", not os.path.exists(marker))
    p = ours_path(env)
    check("login: credentials file written", os.path.exists(p))
    if os.path.exists(p):
        eq("login: file mode 0600 (umask 000)", stat.S_IMODE(os.stat(p).st_mode), 0o600)
        eq("login: directory mode 0700 (was 0755)", stat.S_IMODE(os.stat(ours_dir(env)).st_mode),
           0o700)
        d = read_creds(p)
        check("login: file has accessToken and refreshToken",
              d.get("accessToken", "").count(".") == 2 and d.get("refreshToken"), list(d))
        eq("login: no temporary files left", [n for n in os.listdir(ours_dir(env))
                                             if n != "auth.json" and n != "auth.json.lock"], [])
    check("login: says who logged in and where", "Logged in as auth0|fake_" in out
          and p in out, out[-400:])
    # the same again without --no-browser: xdg-open gets the URL as its only argument
    fake_reset(poll_pending=0)
    rc, out2, err2 = cli("login-browser", ["login"], env)
    eq("login with DISPLAY: exit 0", rc, 0)
    url2 = [l.strip() for l in out2.splitlines() if l.strip().startswith("https://cursor.com/")]
    # the browser is started and not waited for: its marker can come after login returned

    def marker_args():
        a = open(marker).read().splitlines() if os.path.exists(marker) else []
        return a if len(a) >= 2 else []
    H.wait_for(marker_args, 20)
    args = marker_args()
    check("login with DISPLAY: xdg-open ran with exactly one argument, the URL",
          url2 and args == ["1", url2[0]], (args, url2))
    # no display: no browser even without --no-browser
    os.unlink(marker) if os.path.exists(marker) else None
    del env["DISPLAY"]
    fake_reset(poll_pending=0)
    rc, out3, _ = cli("login-nodisplay", ["login"], env)
    time.sleep(0.5)             # as long as a started browser could take to show up
    check("login without a display: no browser", rc == 0 and not os.path.exists(marker))


def t_login_ctrl_c():
    fake_reset(poll_pending=100000)
    env = new_env("ctrlc", extra={"CURSOR_OAI_LOGIN_DELAY_SCALE": "0.2"})
    log = os.path.join(TMP, "login-ctrlc.log")
    p = H.spawn(H.proxy_cmd() + ["login", "--no-browser"], log, env=env, cwd=TMP)
    H.wait_for(lambda: count("poll_calls") >= 2, 15)
    t0 = time.time()
    os.kill(p.pid, signal.SIGINT)
    try:
        rc = p.wait(10)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    dt = time.time() - t0
    H.stop(p)
    text = H.tail(log, 10 ** 6)
    OUTPUTS.append(("login ctrl-c", text))
    eq("Ctrl-C during login: exit 130", rc, 130)
    # promptly, not when the login ends (it would poll on: the fake answers pending); 6 s of
    # the 10 s wait leaves room for a loaded machine
    check("Ctrl-C during login: stops within 6 s", dt < 6, dt)
    check("Ctrl-C during login: says nothing was saved", "cancelled" in text, text[-300:])
    check("Ctrl-C during login: no credentials file, no temporary file",
          not os.path.exists(ours_path(env)) and (not os.path.isdir(ours_dir(env)) or not [
              n for n in os.listdir(ours_dir(env)) if "tmp" in n]))


def t_login_errors():
    fake_reset()
    closed = H.free_port()
    env = new_env("pollerr", api_url="https://localhost:%d" % closed)
    t0 = time.time()
    rc, out, err = cli("login-unreachable", ["login", "--no-browser"], env)
    eq("login, upstream unreachable: exit 1", rc, 1)
    check("login, unreachable: gives up after 3 consecutive errors", err.count(
        "login poll failed") == 3 and "giving up" in err, err[-600:])
    check("login, unreachable: quick with the delay scale", time.time() - t0 < 15)
    check("login, unreachable: nothing written", not os.path.exists(ours_path(env)))
    rc, out, err = cli("login-badscale", ["login"], dict(
        env, CURSOR_OAI_LOGIN_DELAY_SCALE="7"))
    eq("login: bad CURSOR_OAI_LOGIN_DELAY_SCALE is a usage error", rc, 2)
    rc, out, err = cli("login-badarg", ["login", "--bogus"], env)
    eq("login: unknown option is a usage error", rc, 2)


def t_api_key_login():
    fake_reset()
    env = new_env("apikey")
    key = "key_" + os.urandom(8).hex()
    TOKENS.add(key)
    rc, out, err = cli("login-key", ["login", "--api-key", key], env)
    eq("login --api-key: exit 0", rc, 0)
    eq("login --api-key: one exchange call", count("exchange_calls"), 1)
    ex = reqs("/auth/exchange_user_api_key")
    check("login --api-key: POST with Bearer <key>, JSON content type, body {}",
          ex and ex[0]["method"] == "POST" and bearer_of(ex[0]) == key
          and ex[0]["headers"].get("content-type") == "application/json"
          and ex[0]["body_hex"] == "{}".encode().hex(), ex[:1])
    d = read_creds(ours_path(env)) if os.path.exists(ours_path(env)) else {}
    check("login --api-key: file holds the tokens and the key",
          d.get("accessToken") and d.get("refreshToken") and d.get("apiKey") == key, list(d))
    rc, out, err = cli("status-key", ["status"], env)
    check("status after key login: renewal by API key exchange",
          rc == 0 and "API key" in out, out)
    # from standard input, and from CURSOR_API_KEY
    env2 = new_env("apikey-stdin")
    rc, out, err = cli("login-key-stdin", ["login", "--api-key", "-"], env2,
                       stdin=(key + "\n").encode())
    check("login --api-key - (stdin): exit 0 and key saved", rc == 0 and read_creds(
        ours_path(env2)).get("apiKey") == key, err[-300:])
    env3 = new_env("apikey-env", extra={"CURSOR_API_KEY": key})
    rc, out, err = cli("login-key-env", ["login"], env3)
    check("login with CURSOR_API_KEY: exit 0 and key saved", rc == 0 and read_creds(
        ours_path(env3)).get("apiKey") == key, err[-300:])
    # a key the upstream refuses
    env4 = new_env("apikey-bad")
    bad = "nokey_" + os.urandom(8).hex()
    TOKENS.add(bad)
    rc, out, err = cli("login-key-bad", ["login", "--api-key", bad], env4)
    check("login with a rejected key: exit 1, says rejected, nothing saved",
          rc == 1 and "rejected" in err and not os.path.exists(ours_path(env4)), (rc, err))
    # renewal of a stored key is an exchange, not /oauth/token nor /auth/refresh
    fake_reset()
    env5 = new_env("apikey-renew")
    write_creds(ours_path(env5), jwt(60), rt("unused"), api_key=key)
    srv = Srv("apikey-renew", env5)
    try:
        st, b, _ = srv.chat()
        eq("expiring token with a stored API key: chat 200", st, 200)
        eq("  ... renewed by one exchange call", (count("exchange_calls"), count("oauth_calls"),
                                                 count("refresh_calls")), (1, 0, 0))
        d = read_creds(ours_path(env5))
        check("  ... the key stays stored with the new tokens", d.get("apiKey") == key)
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------
# tests: status, logout, models

def t_status():
    fake_reset()
    env = new_env("status")
    rc, out, err = cli("status-none", ["status"], env)
    check("status, not logged in: exit 1 and says so", rc == 1 and "Not logged in" in out
          and "cursor-oai login" in out, (rc, out))
    tok = jwt(3 * 86400 + 120, sub="auth0|status_user", email="user@example.com")
    write_creds(ours_path(env), tok, rt("status"))
    rc, out, err = cli("status-ok", ["status"], env)
    eq("status, logged in: exit 0", rc, 0)
    check("status: who (email and sub)", "user@example.com (auth0|status_user)" in out, out)
    check("status: expiry in human terms", "expires in 3 days" in out, out)
    check("status: which file", ours_path(env) in out, out)
    check("status: upstream accepts the token (GetUsableModels)",
          "accepts the token" in out and count("models_calls") == 1, out)
    eq("status: no renewal for a token valid for days", count("oauth_calls"), 0)
    # expired two hours ago, nothing to renew with: rejected
    env2 = new_env("status-expired")
    write_creds(ours_path(env2), jwt(-(2 * 3600 + 120)))
    rc, out, err = cli("status-expired", ["status"], env2)
    check("status, expired token: 'expired 2 hours ago'", "expired 2 hours ago" in out, out)
    check("status, expired token: rejected upstream, exit 1, login hint",
          rc == 1 and "rejected" in out and "cursor-oai login" in out, (rc, out))
    # the upstream refuses a token that looks fine
    fake_reset(accept_any_jwt=False)
    rc, out, err = cli("status-rejected", ["status"], env)
    check("status, token refused by the upstream: exit 1", rc == 1 and "rejected" in out,
          (rc, out))
    fake_reset()
    # CURSOR_ACCESS_TOKEN wins
    env3 = new_env("status-env", extra={"CURSOR_ACCESS_TOKEN": jwt(7200)})
    write_creds(ours_path(env3), jwt(7200), rt("ignored"))
    rc, out, err = cli("status-env", ["status"], env3)
    check("status with CURSOR_ACCESS_TOKEN: says so, exit 0",
          rc == 0 and "CURSOR_ACCESS_TOKEN (environment)" in out, (rc, out))
    # cursor-agent's file, read only
    env4 = new_env("status-agent")
    write_creds(agent_path(env4), jwt(7200, sub="auth0|agent_user"), rt("agent"))
    before = file_bytes(agent_path(env4))
    rc, out, err = cli("status-agent", ["status"], env4)
    check("status with only cursor-agent's file: uses it, read only",
          rc == 0 and agent_path(env4) in out and "read only" in out
          and "auth0|agent_user" in out, (rc, out))
    eq("status: cursor-agent's file untouched", file_bytes(agent_path(env4)), before)
    # a file others can read: warning
    env5 = new_env("status-mode")
    write_creds(ours_path(env5), jwt(7200), rt("mode"), mode=0o644)
    rc, out, err = cli("status-mode", ["status"], env5)
    check("status: warns about a group/world readable file", rc == 0
          and "readable by others" in err and "0644" in err, (rc, err))
    # a symlink in place of the file is refused
    env6 = new_env("status-link")
    target = os.path.join(env6["HOME"], "elsewhere.json")
    write_creds(target, jwt(7200), rt("link"))
    os.makedirs(ours_dir(env6), mode=0o700)
    os.symlink(target, ours_path(env6))
    rc, out, err = cli("status-link", ["status"], env6)
    check("status: a symlinked credentials file is refused (O_NOFOLLOW)",
          rc == 1 and "symbolic link" in err, (rc, out, err))


def t_status_renews():
    fake_reset()
    env = new_env("status-renew")
    old = jwt(90)
    r0 = rt("status-renew")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    rc, out, err = cli("status-renew", ["status"], env)
    d = read_creds(ours_path(env))
    check("status with a token expiring in 90 s: renews it first (one refresh), exit 0",
          rc == 0 and count("oauth_calls") == 1 and "renewed" in out
          and d["accessToken"] != old, (rc, out, err))


def t_logout():
    fake_reset()
    env = new_env("logout")
    write_creds(ours_path(env), jwt(7200), rt("logout"))
    write_creds(agent_path(env), jwt(7200), rt("agent-logout"))
    agent_before = file_bytes(agent_path(env))
    rc, out, err = cli("logout", ["logout"], env)
    check("logout: exit 0, says what was removed", rc == 0 and "Removed %s" % ours_path(env)
          in out, (rc, out))
    check("logout: our file is gone", not os.path.exists(ours_path(env)))
    eq("logout: cursor-agent's file untouched", file_bytes(agent_path(env)), agent_before)
    check("logout: mentions cursor-agent's login left alone", agent_path(env) in out, out)
    rc, out, err = cli("logout-again", ["logout"], env)
    check("logout with nothing to remove: exit 0, says so", rc == 0 and "No cursor-oai login"
          in out, (rc, out))


def t_models_cli():
    fake_reset()
    env = new_env("models")
    rc, out, err = cli("models-none", ["models"], env)
    check("models, not logged in: exit 1", rc == 1 and "not logged in" in err, (rc, err))
    write_creds(ours_path(env), jwt(7200), rt("models"))
    rc, out, err = cli("models", ["models"], env)
    eq("models: exit 0", rc, 0)
    lines = out.splitlines()
    check("models: table header ID NAME ALIASES CONTEXT", lines and lines[0].split() == [
        "ID", "NAME", "ALIASES", "CONTEXT"], lines[:1])
    row = [l for l in lines if l.startswith("sonnet-4.5 ")]
    check("models: sonnet-4.5 row: display name, alias, context 200000", row and
          "Claude 4.5 Sonnet" in row[0] and "claude-4.5-sonnet" in row[0]
          and row[0].split()[-1] == "200000", row)
    row = [l for l in lines if l.startswith("auto ")]
    check("models: auto row lists its modelId 'default' as another name, 128000",
          row and "default" in row[0] and row[0].split()[-1] == "128000", row)
    row = [l for l in lines if l.startswith("gemini-3-pro ")]
    check("models: gemini-3-pro context 1048576", row and row[0].split()[-1] == "1048576", row)


# ---------------------------------------------------------------------------------------------
# tests: renewal in the server

def t_refresh_before_expiry():
    fake_reset()
    env = new_env("proactive")
    old = jwt(120)
    r0 = rt("proactive")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    srv = Srv("proactive", env)
    try:
        st, b, _ = srv.chat()
        eq("token expiring in 2 min: chat 200", st, 200)
        eq("  ... exactly one /oauth/token call, none to /auth/refresh",
           (count("oauth_calls"), count("refresh_calls")), (1, 0))
        rf = reqs("/oauth/token")
        body = json.loads(bytes.fromhex(rf[0]["body_hex"])) if rf else {}
        check("  ... POST /oauth/token, JSON {grant_type refresh_token, Cursor's client_id, "
              "refresh_token}, no bearer", rf and rf[0]["method"] == "POST"
              and body == {"grant_type": "refresh_token",
                           "client_id": "KbZUR41cY7W6zRSdpSUJ7I7mLYBKOCmB", "refresh_token": r0}
              and "authorization" not in (rf[0].get("headers") or {}), rf[:1])
        d = read_creds(ours_path(env))
        runs = reqs(H.RUN_PATH, 1)
        check("  ... RunSSE used the new token (the fake's recorded Authorization)",
              runs and all(bearer_of(r) == d["accessToken"] != old for r in runs),
              [bearer_of(r)[:20] for r in runs])
        check("  ... new access token saved with the same refresh token (it does not rotate)",
              d["accessToken"] != old and d["refreshToken"] == r0, list(d))
        eq("  ... file mode still 0600", stat.S_IMODE(os.stat(ours_path(env)).st_mode), 0o600)
        st, b, _ = srv.chat()
        check("  ... next chat: no further refresh", st == 200 and count("oauth_calls") == 1)
        eq("  ... /health credentials ok", srv.health().get("credentials"), "ok")
    finally:
        srv.stop()


def t_oauth_rotated():
    """/oauth/token that returns a new refresh_token (late-autumn notes N16: "Cursor sometimes
    rotates refresh_token"; the used one is then spent): it is saved in auth.json, and the next
    renewal uses it."""
    fake_reset(oauth_rotate=True, access_ttl_s=90)
    env = new_env("rotated")
    old = jwt(90)
    r0 = rt("rotated")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    srv = Srv("rotated", env)
    try:
        st, b, _ = srv.chat()
        # each renewed token lives 90 s, so the proxy renews again before it expires
        check("rotating /oauth/token: chat 200 after a renewal", st == 200
              and count("oauth_calls") >= 1, (st, count("oauth_calls")))
        d = read_creds(ours_path(env))
        check("  ... the new refresh token is saved in auth.json (the old one is spent)",
              d.get("refreshToken") not in (None, r0)
              and d.get("refreshToken", "").startswith("rt_") and d["accessToken"] != old,
              list(d))
        eq("  ... file mode still 0600", stat.S_IMODE(os.stat(ours_path(env)).st_mode), 0o600)
        r1 = d.get("refreshToken")
        # the new access token expires within 2 minutes too: the next chat renews again, with
        # the token the last renewal returned (a spent one gets shouldLogout: the chat fails)
        st, b, _ = srv.chat()
        rf = reqs("/oauth/token")
        sent = [json.loads(bytes.fromhex(q["body_hex"])).get("refresh_token") for q in rf]
        d2 = read_creds(ours_path(env))
        check("  ... every renewal sends the token the one before returned, and works",
              st == 200 and len(sent) >= 2 and sent[0] == r0 and r1 in sent[1:]
              and len(set(sent)) == len(sent) and d2.get("refreshToken") not in sent,
              (st, sent, d2.get("refreshToken")))
    finally:
        srv.stop()


def t_refresh_on_401():
    fake_reset()
    env = new_env("on401")
    old = jwt(7200)
    r0 = rt("on401")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    srv = Srv("on401", env)
    try:
        st, _, _ = srv.get("/v1/models")      # cache the list while the token is accepted
        eq("401 case: model list cached first", st, 200)
        FAKE.ctl("/config", {"accept_any_jwt": False, "valid_tokens": []})
        for stream in (False, True):
            st, b, _ = srv.chat(stream=stream)
            check("upstream rejects the token (401): chat stream=%s still answers 200 with "
                  "text" % stream, chat_text(st, b, stream) == "Hello from fake Cursor.",
                  (st, b[:300]))
        eq("  ... exactly one refresh call", count("oauth_calls"), 1)
        runs = reqs(H.RUN_PATH, 3)
        d = read_creds(ours_path(env))
        check("  ... first RunSSE with the old token, retried with the new one",
              len(runs) == 3 and bearer_of(runs[0]) == old and runs[0]["status"] == 401
              and bearer_of(runs[1]) == d["accessToken"] and runs[1]["status"] == 200,
              [(bearer_of(r)[:12], r["status"]) for r in runs])
    finally:
        srv.stop()


def t_single_flight():
    fake_reset()
    env = new_env("flight")
    old = jwt(7200)
    r0 = rt("flight")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    srv = Srv("flight", env)
    try:
        srv.get("/v1/models")
        FAKE.ctl("/config", {"accept_any_jwt": False, "valid_tokens": [],
                             "refresh_delay_s": 0.5})
        res = [None] * 50

        def one(i):
            try:
                st, b, _ = srv.chat(content="flight %d" % i, timeout=60)
                res[i] = chat_text(st, b, False)
            except Exception as e:  # noqa: BLE001 - reported below
                res[i] = repr(e)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(50)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(90)
        ok = sum(1 for r in res if r == "Hello from fake Cursor.")
        eq("50 concurrent requests with a rejected token: all 50 succeed", ok, 50)
        eq("  ... exactly 1 refresh call (single flight)", count("oauth_calls"), 1)
    finally:
        srv.stop()
    # the same at the moment of expiry (proactive): 20 requests, one refresh
    fake_reset(refresh_delay_s=0.5)
    env = new_env("flight2")
    r0 = rt("flight2")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), jwt(100), r0)
    srv = Srv("flight2", env)
    try:
        res = [None] * 20

        def two(i):
            try:
                res[i] = srv.chat(content="f %d" % i, timeout=60)[0]
            except Exception as e:  # noqa: BLE001
                res[i] = repr(e)
        ts = [threading.Thread(target=two, args=(i,)) for i in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(90)
        eq("20 concurrent requests with an expiring token: all 200", res, [200] * 20)
        eq("  ... exactly 1 refresh call", count("oauth_calls"), 1)
    finally:
        srv.stop()


def t_refresh_rejected():
    fake_reset(refresh_status=401)
    env = new_env("rejected")
    old = jwt(-30)
    r0 = rt("rejected")
    write_creds(ours_path(env), old, r0)
    before = file_bytes(ours_path(env))
    srv = Srv("rejected", env)
    try:
        st, b, h = srv.chat()
        e = jerr(b)
        eq("refresh rejected: 401", st, 401)
        eq("  ... type authentication_error, code upstream_auth_expired",
           (e.get("type"), e.get("code")), ("authentication_error", "upstream_auth_expired"))
        check("  ... message tells to run `cursor-oai login`", "cursor-oai login" in
              e.get("message", ""), e)
        eq("  ... x-should-retry: false", h.get("x-should-retry"), "false")
        st2, b2, _ = srv.chat(stream=True)
        eq("  ... streaming request: a real 401 too", st2, 401)
        eq("  ... backoff: no second refresh call", count("oauth_calls"), 1)
        eq("  ... credentials file untouched", file_bytes(ours_path(env)), before)
        check("  ... /health shows it", "rejected" in srv.health().get("credentials", ""),
              srv.health())
    finally:
        srv.stop()


def t_refresh_unreachable():
    fake_reset(refresh_status=503)
    env = new_env("unreach")
    old = jwt(-30)
    r0 = rt("unreach")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    before = file_bytes(ours_path(env))
    srv = Srv("unreach", env)
    try:
        st, b, h = srv.chat()
        eq("refresh answers 503: client gets a retryable 503", st, 503)
        check("  ... Retry-After set, no x-should-retry:false", h.get("retry-after") and
              h.get("x-should-retry") != "false", h)
        eq("  ... old credentials kept (file identical)", file_bytes(ours_path(env)), before)
        st, b, h = srv.chat()
        eq("  ... the next request tries again (2 refresh calls)", (st, count("oauth_calls")),
           (503, 2))
        FAKE.ctl("/config", {"refresh_status": None})
        st, b, h = srv.chat()
        eq("  ... once the endpoint is back, the kept refresh token works: 200", st, 200)
        check("  ... and the new tokens are saved", file_bytes(ours_path(env)) != before)
    finally:
        srv.stop()
    # a refresh URL on a closed port (the whole upstream is down): 503 too, file kept
    closed = H.free_port()
    env = new_env("unreach2", api_url="https://localhost:%d" % closed)
    write_creds(ours_path(env), jwt(-30), rt("unreach2"))
    before = file_bytes(ours_path(env))
    srv = Srv("unreach2", env)
    try:
        st, b, h = srv.chat()
        check("refresh endpoint unreachable (closed port): 503 upstream_unavailable",
              st == 503 and jerr(b).get("code") == "upstream_unavailable", (st, b[:300]))
        eq("  ... file identical", file_bytes(ours_path(env)), before)
    finally:
        srv.stop()
    # a proactive renewal that fails does not stop a token that is still valid
    fake_reset(refresh_status=503)
    env = new_env("unreach3")
    old = jwt(120)
    write_creds(ours_path(env), old, rt("unreach3"))
    srv = Srv("unreach3", env)
    try:
        st, b, h = srv.chat()
        runs = reqs(H.RUN_PATH, 1)
        check("early renewal fails, token still valid for 2 min: chat 200 with the old token",
              st == 200 and runs and bearer_of(runs[0]) == old, (st, b[:200]))
    finally:
        srv.stop()


def t_after_stream_401():
    fake_reset()
    env = new_env("midstream")
    r0 = rt("midstream")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), jwt(7200), r0)
    srv = Srv("midstream", env)
    try:
        st, b, _ = srv.chat(model="scenario:append_401_kv", stream=True)
        s = H.parse_sse(b)
        check("401 after text was streamed: 200 + partial text + error event + [DONE]",
              st == 200 and s["content"] == "before kv" and len(s["errors"]) == 1
              and s["done"], (st, s))
        eq("  ... no replay: one run, no refresh during it", (len(reqs(H.RUN_PATH, 1)),
                                                            count("oauth_calls")), (1, 0))
        st, b, _ = srv.chat()
        eq("  ... the next request renews first (1 refresh) and succeeds",
           (st, count("oauth_calls")), (200, 1))
    finally:
        srv.stop()


def t_persist_failure():
    if os.geteuid() != 0:
        skip("persist failure", "needs root to mount a tmpfs")
        return
    fake_reset()
    env = new_env("diskfull")
    d = ours_dir(env)
    os.makedirs(d, mode=0o700)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", d],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not check("tmpfs mounted on the config directory (to make writes fail)",
                 r.returncode == 0, r.stdout):
        return
    MOUNTS.append(d)
    try:
        old = jwt(120)
        r0 = rt("diskfull")
        FAKE.ctl("/config", {"refresh_tokens": [r0]})
        write_creds(ours_path(env), old, r0)
        before = file_bytes(ours_path(env))
        fd = os.open(os.path.join(d, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 1024)
        except OSError:
            pass
        os.close(fd)
        # prove the file system really refuses new data now
        fd = os.open(os.path.join(d, "probe"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, b"x" * 512)
            full = False
        except OSError:
            full = True
        os.close(fd)
        os.unlink(os.path.join(d, "probe"))
        check("the tmpfs is full (writes fail with ENOSPC)", full)
        srv = Srv("diskfull", env)
        try:
            st, b, _ = srv.chat()
            eq("disk full while saving renewed tokens: chat still 200", st, 200)
            eq("  ... one refresh call", count("oauth_calls"), 1)
            eq("  ... old file byte-identical", file_bytes(ours_path(env)), before)
            eq("  ... old file still 0600", stat.S_IMODE(os.stat(ours_path(env)).st_mode), 0o600)
            eq("  ... no temporary file left", sorted(n for n in os.listdir(d)
                                                      if n not in ("filler", "auth.json.lock")),
               ["auth.json"])
            # the log's writer thread may write the line just after the answer: wait for it
            H.wait_for(lambda: "cannot save credentials" in srv.logtext(), 10)
            log = srv.logtext()
            check("  ... a loud log line naming the file and the error", "cannot save "
                  "credentials" in log and "No space left" in log and "memory only" in log,
                  log[-800:])
            eq("  ... /health says not persisted", srv.health().get("credentials"),
               "not persisted")
            st, b, _ = srv.chat()
            runs = reqs(H.RUN_PATH, 2)
            check("  ... next chat uses the in-memory token, no second refresh",
                  st == 200 and count("oauth_calls") == 1 and len(runs) == 2
                  and bearer_of(runs[1]) == bearer_of(runs[0]) != old,
                  [bearer_of(x)[:12] for x in runs])
            # space comes back: the kept tokens are saved on a later request
            os.unlink(os.path.join(d, "filler"))
            time.sleep(5.3)
            st, b, _ = srv.chat()
            saved = read_creds(ours_path(env)) if st == 200 else {}
            check("  ... once there is space again, a later request saves the renewed tokens",
                  len(runs) == 2 and saved.get("accessToken") == bearer_of(runs[1]) != old
                  and saved.get("refreshToken") == r0, (st, list(saved)))
            eq("  ... /health ok again", srv.health().get("credentials"), "ok")
            before = file_bytes(ours_path(env))
        finally:
            srv.stop()
        # login into a full disk
        fd = os.open(os.path.join(d, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 1024)
        except OSError:
            pass
        os.close(fd)
        key = "key_" + os.urandom(6).hex()
        TOKENS.add(key)
        rc, out, err = cli("login-diskfull", ["login", "--api-key", key], env)
        check("login onto a full disk: exit 1 with the reason, old file intact",
              rc == 1 and "No space left" in err and file_bytes(ours_path(env)) == before,
              (rc, err))
    finally:
        subprocess.call(["umount", "-l", d])
        MOUNTS.remove(d)


def t_pickup_login():
    fake_reset()
    env = new_env("pickup")
    srv = Srv("pickup", env)
    try:
        st, b, _ = srv.chat()
        check("no credentials: chat 401 telling to run `cursor-oai login`",
              st == 401 and "cursor-oai login" in jerr(b).get("message", ""), (st, b[:300]))
        eq("  ... /health credentials missing", srv.health().get("credentials"), "missing")
        key = "key_" + os.urandom(6).hex()
        TOKENS.add(key)
        rc, out, err = cli("login-pickup", ["login", "--api-key", key], env)
        eq("  ... login while serving: exit 0", rc, 0)
        got = H.wait_for(lambda: srv.chat()[0] == 200, 20, step=0.3)
        check("  ... the running server picks the login up without a restart", got)
        st, _, _ = srv.chat(model="sonnet-4.5")
        runs = FAKE.runs()
        check("  ... and fetches the model list again (the failure without credentials is "
              "not kept): sonnet-4.5 -> claude-4.5-sonnet", st == 200 and runs
              and runs[-1]["model_id"] == "claude-4.5-sonnet", [r["model_id"] for r in runs])
        rc, out, err = cli("logout-pickup", ["logout"], env)
        gone = H.wait_for(lambda: srv.chat()[0] == 401, 20, step=0.3)
        check("  ... and a logout too (401 again)", gone)
        # a browser login into the same running server
        fake_reset(poll_pending=1)
        rc, out, err = cli("login-pickup2", ["login", "--no-browser"], env)
        got = H.wait_for(lambda: srv.chat()[0] == 200, 20, step=0.3)
        check("  ... a browser login is picked up as well", rc == 0 and got)
    finally:
        srv.stop()
    # CURSOR_ACCESS_TOKEN overrides the files
    fake_reset()
    envtok = jwt(7200)
    env = new_env("envwins", extra={"CURSOR_ACCESS_TOKEN": envtok})
    write_creds(ours_path(env), jwt(7200), rt("envwins"))
    srv = Srv("envwins", env)
    try:
        st, _, _ = srv.chat()
        runs = reqs(H.RUN_PATH, 1)
        check("CURSOR_ACCESS_TOKEN overrides the credentials file", st == 200 and runs
              and bearer_of(runs[0]) == envtok)
    finally:
        srv.stop()
    # only cursor-agent's file: read only; its browser login is renewed in memory through
    # /oauth/token, whose refresh token does not rotate (notes autumn 2026, 5.7), so
    # cursor-agent's own login stays usable; neither file is written
    fake_reset()
    env = new_env("agentfile")
    r0 = rt("agentfile")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    old = jwt(60)
    write_creds(agent_path(env), old, r0)
    before = file_bytes(agent_path(env))
    srv = Srv("agentfile", env)
    try:
        st, _, _ = srv.chat()
        runs = reqs(H.RUN_PATH, 1)
        eq("cursor-agent's file with an expiring token: chat 200", st, 200)
        eq("  ... renewed by one /oauth/token call, never /auth/refresh",
           (count("oauth_calls"), count("refresh_calls")), (1, 0))
        check("  ... RunSSE used the renewed token", runs and bearer_of(runs[-1]) not in ("", old),
              [bearer_of(r)[:12] for r in runs])
        eq("  ... cursor-agent's file untouched", file_bytes(agent_path(env)), before)
        check("  ... nothing written to our file", not os.path.exists(ours_path(env)))
        st, _, _ = srv.chat()
        check("  ... next chat: 200, no second renewal", st == 200 and count("oauth_calls") == 1,
              (st, count("oauth_calls")))
        eq("  ... /health credentials ok", srv.health().get("credentials"), "ok")
        H.wait_for(lambda: "in memory only" in srv.logtext(), 10)     # the log's writer thread
        check("  ... the log says in memory only", "in memory only" in srv.logtext(),
              srv.logtext()[-600:])
        # cursor-agent logs in again while we serve: its new file replaces our in-memory token
        newer = jwt(7200)
        write_creds(agent_path(env), newer, r0)
        got = H.wait_for(lambda: srv.chat()[0] == 200 and bearer_of(reqs(H.RUN_PATH)[-1]) == newer,
                         5, step=0.3)
        check("  ... a new cursor-agent login on disk is picked up", got)
    finally:
        srv.stop()
    rc, out, err = cli("status-agent-renew", ["status"], env)
    check("status with cursor-agent's file: renewal in memory only through /oauth/token",
          "in memory only" in out and "/oauth/token" in out, out)
    # /oauth/token answers 404: cursor-agent's login is not renewed through /auth/refresh,
    # which may rotate (and so spend) cursor-agent's refresh token
    fake_reset(oauth_token_route=False, auth_refresh_route=True)
    env = new_env("agentfile404")
    r0 = rt("agentfile404")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(agent_path(env), jwt(-60), r0)
    before = file_bytes(agent_path(env))
    srv = Srv("agentfile404", env)
    try:
        st, b, _ = srv.chat()
        msg = jerr(b).get("message", "")
        check("cursor-agent's login, /oauth/token 404: 401 naming cursor-agent login, "
              "/auth/refresh never called", st == 401 and "cursor-agent login" in msg
              and count("refresh_calls") == 0 and count("oauth_calls") == 1,
              (st, msg, count("refresh_calls")))
        eq("  ... cursor-agent's file untouched", file_bytes(agent_path(env)), before)
    finally:
        srv.stop()


def t_oauth_fallback():
    """/oauth/token answers 404: our own login falls back to /auth/refresh (spec 14.3), and its
    rotated refresh token is saved."""
    fake_reset(oauth_token_route=False, auth_refresh_route=True)
    env = new_env("fallback")
    old = jwt(90)
    r0 = rt("fallback")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), old, r0)
    srv = Srv("fallback", env)
    try:
        st, b, _ = srv.chat()
        eq("/oauth/token 404: chat 200 through /auth/refresh", st, 200)
        eq("  ... one /oauth/token call, then one /auth/refresh call",
           (count("oauth_calls"), count("refresh_calls")), (1, 1))
        rf = reqs("/auth/refresh")
        check("  ... /auth/refresh is POST {} with Bearer <refresh token>",
              rf and bearer_of(rf[0]) == r0 and rf[0]["body_hex"] == "{}".encode().hex(), rf[:1])
        d = read_creds(ours_path(env))
        check("  ... the rotated pair is saved", d["accessToken"] != old and d["refreshToken"]
              != r0, list(d))
    finally:
        srv.stop()
    # both routes answer 404: a retryable 503, nothing lost
    fake_reset(oauth_token_route=False, auth_refresh_route=False)
    env = new_env("fallback2")
    write_creds(ours_path(env), jwt(-60), rt("fallback2"))
    before = file_bytes(ours_path(env))
    srv = Srv("fallback2", env)
    try:
        st, b, h = srv.chat()
        check("both renewal routes 404: 503 naming /auth/refresh, file kept",
              st == 503 and "/auth/refresh" in jerr(b).get("message", "")
              and file_bytes(ours_path(env)) == before, (st, b[:300]))
    finally:
        srv.stop()


def t_oauth_nul():
    """issue 29: an /oauth/token answer whose access_token holds a \\u0000 escape is refused as
    auth.json's is (it was cut there and logged as renewed): 401 naming the escape, the file left
    as it is, nothing logged as renewed."""
    fake_reset(oauth_token_nul=True)
    env = new_env("oauthnul")
    r0 = rt("oauthnul")
    FAKE.ctl("/config", {"refresh_tokens": [r0]})
    write_creds(ours_path(env), jwt(-60), r0)
    before = file_bytes(ours_path(env))
    srv = Srv("oauthnul", env)
    try:
        st, b, h = srv.chat()
        e = jerr(b)
        check("/oauth/token with a \\u0000 in the access token: 401 naming the escape, one call",
              st == 401 and "u0000" in e.get("message", "") and count("oauth_calls") == 1,
              (st, e, count("oauth_calls")))
        eq("  ... file untouched", file_bytes(ours_path(env)), before)
        log = open(srv.log, encoding="utf-8", errors="replace").read()
        check("  ... nothing logged as renewed, the failure names the escape",
              "access token renewed" not in log and "u0000" in log, log[-600:])
    finally:
        srv.stop()
        fake_reset()


def t_oauth_revoked():
    """shouldLogout: true (a revoked refresh token): 401 telling to log in again, no retry, the
    file left as it is, no second call within the backoff."""
    fake_reset()
    env = new_env("revoked")
    write_creds(ours_path(env), jwt(-60), rt("revoked-unknown"))
    before = file_bytes(ours_path(env))
    srv = Srv("revoked", env)
    try:
        st, b, h = srv.chat()
        e = jerr(b)
        check("/oauth/token says shouldLogout: 401 upstream_auth_expired, 'revoked', "
              "'log in again'", st == 401 and e.get("code") == "upstream_auth_expired"
              and "revoked" in e.get("message", "") and "Log in again" in e.get("message", "")
              and "cursor-oai login" in e.get("message", ""), (st, e))
        eq("  ... x-should-retry: false", h.get("x-should-retry"), "false")
        st, b, h = srv.chat()
        eq("  ... a second request: 401, no second call (backoff)", (st, count("oauth_calls")),
           (401, 1))
        eq("  ... file untouched", file_bytes(ours_path(env)), before)
        check("  ... /health shows it", "rejected" in srv.health().get("credentials", ""),
              srv.health())
    finally:
        srv.stop()
    rc, out, err = cli("doctor-revoked", ["doctor"], env)
    check("doctor names the revoked login and says to log in again",
          rc != 0 and "revoked" in out and "cursor-oai login" in out, (rc, out[-800:]))


# ---------------------------------------------------------------------------------------------
# tests: models cache and unknown models

def t_models_cache():
    fake_reset()
    env = new_env("mcache", extra={"CURSOR_OAI_MODELS_TTL": "2"})
    write_creds(ours_path(env), jwt(7200), rt("mcache"))
    srv = Srv("mcache", env)
    try:
        st, b, _ = srv.get("/v1/models")
        eq("/v1/models: 200", st, 200)
        data = json.loads(b).get("data", []) if st == 200 else []
        keys = {"id", "object", "created", "owned_by", "context_length", "max_output_tokens"}
        check("/v1/models: entries have id, object, created, owned_by, context_length, "
              "max_output_tokens", data and all(set(m) == keys for m in data), data[:1])
        son = [m for m in data if m["id"] == "sonnet-4.5"]
        check("/v1/models: sonnet-4.5 owned_by anthropic, 200000/64000", son and (
            son[0]["owned_by"], son[0]["context_length"], son[0]["max_output_tokens"]) == (
            "anthropic", 200000, 64000), son)
        srv.get("/v1/models")
        srv.chat()
        eq("models cache: 2 lists + 1 chat -> 1 GetUsableModels call", count("models_calls"), 1)
        FAKE.ctl("/config", {"models_status": 500})
        time.sleep(2.3)
        st, b2, _ = srv.get("/v1/models")
        ids = [m["id"] for m in json.loads(b2).get("data", [])] if st == 200 else None
        check("stale-while-revalidate: after the TTL the last good list is served at once",
              st == 200 and ids == [m["id"] for m in data], (st, b2[:200]))
        # the new list is fetched in the background (issue 17): wait for that call to end
        end = time.time() + 20
        while time.time() < end and count("models_calls") < 2:
            time.sleep(0.05)
        time.sleep(0.3)
        eq("  ... the upstream was asked again in the background (2 calls)",
           count("models_calls"), 2)
        st, b2, _ = srv.get("/v1/models")
        ids = [m["id"] for m in json.loads(b2).get("data", [])] if st == 200 else None
        check("stale-while-error: the refresh failed -> last good list still served",
              st == 200 and ids == [m["id"] for m in data], (st, b2[:200]))
        st, _, _ = srv.get("/v1/models")
        eq("  ... a failure is not retried at once (still 2 calls)", (st, count(
            "models_calls")), (200, 2))
    finally:
        srv.stop()
    fake_reset(models_status=500)
    env = new_env("mcache2")
    write_creds(ours_path(env), jwt(7200), rt("mcache2"))
    srv = Srv("mcache2", env)
    try:
        st, b, _ = srv.get("/v1/models")
        e = jerr(b)
        check("never a good list: /v1/models 502 with the reason (not an empty list)",
              st == 502 and e.get("message") and "data" not in json.loads(b), (st, b[:300]))
        st, b, _ = srv.chat(model="sonnet-4.5")
        runs = FAKE.runs()
        check("  ... chat still works, the model name passes through", st == 200 and runs
              and runs[-1]["model_id"] == "sonnet-4.5", (st, [r["model_id"] for r in runs]))
    finally:
        srv.stop()


def t_unknown_model():
    fake_reset()
    FAKE.ctl("/scenario", {"name": "reject_model", "scenario": {"steps": [
        {"op": "trailer", "status": 5, "message": "model not found",
         "details": {"error": 5, "title": "Bad model", "detail": "no such model"}}]}})
    env = new_env("unknown")
    write_creds(ours_path(env), jwt(7200), rt("unknown"))
    srv = Srv("unknown", env)
    try:
        for stream in (False, True):
            FAKE.ctl("/next_scenario", {"name": "reject_model"})
            st, b, _ = srv.chat(model="my-private-model", stream=stream)
            e = jerr(b)
            check("unknown model rejected upstream: 404 model_not_found (stream=%s)" % stream,
                  st == 404 and e.get("code") == "model_not_found" and e.get("param") ==
                  "model", (st, b[:300]))
        runs = FAKE.runs()
        check("  ... the unknown name was passed through to the upstream",
              runs and all(r["model_id"] == "my-private-model" for r in runs),
              [r["model_id"] for r in runs])
        st, b, _ = srv.chat(model="claude-4.5-sonnet")
        runs = FAKE.runs()
        check("an alias resolves to its modelId upstream", st == 200
              and runs[-1]["model_id"] == "claude-4.5-sonnet", [r["model_id"] for r in runs])
    finally:
        srv.stop()


def t_help():
    env = new_env("help")
    rc, out, err = cli("help", ["--help"], env)
    check("--help lists login, logout, status, models", rc == 0 and all(
        ("cursor-oai %s" % c) in out for c in ("login", "logout", "status", "models")), out)
    for c in ("login", "logout", "status", "models"):
        rc, out, err = cli("help-" + c, [c, "--help"], env)
        check("%s --help: exit 0 with a Usage line" % c, rc == 0 and out.startswith(
            "Usage: cursor-oai %s" % c), out[:200])
    rc, out, err = cli("help-login2", ["login", "--help"], env)
    check("login --help documents xdg-open, --no-browser and CURSOR_OAI_LOGIN_DELAY_SCALE",
          "xdg-open" in out and "--no-browser" in out and "CURSOR_OAI_LOGIN_DELAY_SCALE" in out)


# ---------------------------------------------------------------------------------------------

def t_no_secrets():
    harvest()
    toks = sorted(t for t in TOKENS if len(t) >= 8)
    leaks = []
    for name, text in OUTPUTS:
        for t in toks:
            needles = [t]
            if t.count(".") == 2:
                needles.append(t.split(".")[1])     # the JWT payload alone
            for n in needles:
                if len(n) >= 8 and n in text:
                    leaks.append((name, n[:16] + "..."))
    check("no token, refresh token, API key or verifier in any captured output "
          "(%d secrets x %d outputs)" % (len(toks), len(OUTPUTS)),
          not leaks and toks and OUTPUTS, leaks[:10])


TESTS = [t_help, t_login_browser_flow, t_login_ctrl_c, t_login_errors, t_api_key_login,
         t_status, t_status_renews, t_logout, t_models_cli, t_refresh_before_expiry,
         t_oauth_rotated,
         t_refresh_on_401, t_single_flight, t_refresh_rejected, t_refresh_unreachable,
         t_after_stream_401, t_persist_failure, t_pickup_login, t_oauth_fallback, t_oauth_revoked,
         t_oauth_nul, t_models_cache, t_unknown_model, t_no_secrets]


def main():
    global FAKE
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SUITE_TIMEOUT)
    only = set(a for a in sys.argv[1:] if not a.startswith("-"))
    try:
        FAKE = H.Fake(TMP)
        S.sections([(t.__name__, t) for t in TESTS
                    if not only or t.__name__ in only or t is t_no_secrets], timed=False)
    finally:
        final_cleanup()
        signal.alarm(0)
    return S.finish()


if __name__ == "__main__":
    sys.exit(main())
