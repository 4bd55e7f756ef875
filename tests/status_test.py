#!/usr/bin/python3
"""The status page (GET /, /status.json), the version string and the route list, against the fake
Cursor upstream, with the page loaded in headless Chromium.

Run from the repo root:  /usr/bin/python3 tests/status_test.py
Env: CURSOR_OAI_BIN (default build/cursor-oai), CHROMIUM (default chromium). Prints
`RESULT <passed> <failed>` last. The screenshot is kept as build/status-page.png.

Chromium is Debian's package (build.sh installs it with the test packages). Without it the
browser checks fail when running as root (where build.sh would have installed it) and are
reported as skipped otherwise.
"""

import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import http.client

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness as H  # noqa: E402

S = H.Suite("status", section=None, limit=1500, below=True)
if S.binary_missing():
    sys.exit(0)
BIN = H.proxy_cmd()[0]      # for --version and the --help texts
check, eq = S.check, S.eq
KEY = "sk-status-" + os.urandom(8).hex()
HOSTILE = "<img src=x onerror=\"document.body.setAttribute('data-xss','1')\">"
PROMPT = "PROMPT-NEVER-SHOWN-" + os.urandom(4).hex()
CHROMIUM = os.environ.get("CHROMIUM", "chromium")


# what the page says new runs use, by the transport the suite's proxies are given
# (harness: CURSOR_OAI_TRANSPORT=COAI_TEST_TRANSPORT)
TRANSPORT_SHOWN = {"http1": "HTTP/1.1: RunSSE + BidiAppend (CURSOR_OAI_TRANSPORT=http1)",
                   "h2": "HTTP/2 (CURSOR_OAI_TRANSPORT=h2, no fallback)",
                   "auto": "HTTP/2 (HTTP/1.1 as the fallback)"}


def header_version():
    with open(os.path.join(ROOT, "cursor_oai.h")) as f:
        m = re.search(r'#define COAI_VERSION "([^"]+)"', f.read())
    return m.group(1)


def route_table():
    """(method, path) of every ROUTE_TABLE row in server.c, and route_of's body."""
    with open(os.path.join(ROOT, "server.c")) as f:
        src = f.read()
    start = src.index("ROUTE_TABLE[] = {")
    table = src[start:src.index("};", start)]
    rows = re.findall(r'\{\s*ROUTE_\w+,\s*"(GET|POST)",\s*"([^"]+)"', table)
    m = re.search(r"static int route_of\(coai_str path\)\n\{(.*?)\n\}", src, re.S)
    return rows, m.group(1) if m else ""


def req(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read(), dict((k.lower(), v) for k, v in r.getheaders())
    finally:
        c.close()


def chat(port, model, content="hi"):
    return req(port, "POST", "/v1/chat/completions", json.dumps(
        {"model": model, "messages": [{"role": "user", "content": content}]}),
        {"Authorization": "Bearer " + KEY})


def err_code(body):
    try:
        return json.loads(body)["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def chromium(tmp, name, url, extra):
    ud = os.path.join(tmp, "chrome-" + name)
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--user-data-dir=" + ud, "--virtual-time-budget=8000"] + extra + [url]
    return subprocess.run(args, capture_output=True, text=True, timeout=180)


# ---------------------------------------------------------------------------------------------

def t_version_and_routes(tmp, fake, token):
    ver = header_version()
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=10).stdout
    eq("--version's first line is 'cursor-oai <COAI_VERSION>'", out.splitlines()[0],
       "cursor-oai " + ver)
    check("the version is 0.3.0-dev (this wave)", ver == "0.3.0-dev", ver)
    rows, body = route_table()
    check("ROUTE_TABLE found in server.c, with the status page's routes",
          len(rows) >= 15 and ("GET", "/") in rows and ("GET", "/status.json") in rows, rows)
    check("route_of matches from ROUTE_TABLE only (no path literal of its own)",
          body and "ROUTE_TABLE" in body and '"/' not in body, body)
    helps = {}
    for args in (["serve", "--help"], ["--help"]):
        helps[" ".join(args)] = subprocess.run([BIN] + args, capture_output=True, text=True,
                                               timeout=10).stdout
    for name, text in helps.items():
        lines = text.splitlines()
        missing = [p for m, p in rows
                   if not any(re.match(r"\s+%s\s+%s(\s|$)" % (m, re.escape(p)), ln)
                              for ln in lines)]
        check("`cursor-oai %s` names every route of the table, with its method" % name,
              not missing, missing)
    # every listed path is answered by the server (not 404 unknown_url, not 405), and a path
    # outside the table is not: the table is what the router uses
    p = H.Proxy(tmp, "routes", fake.url(), fake.ca, token, extra_env={"CURSOR_OAI_API_KEY": KEY})
    try:
        bad = []
        auth = {"Authorization": "Bearer " + KEY}
        for m, path in rows:
            path = path.replace("{id}", "resp_0123456789abcdef")
            st, b, _ = req(p.port, m, path, "{}" if m == "POST" else None, auth)
            if (st == 404 and err_code(b) == "unknown_url") or st == 405:
                bad.append((m, path, st, b[:120]))
        check("the server answers every path of the table", not bad, bad)
        st, b, _ = req(p.port, "GET", "/v2/not-a-route", None, auth)
        check("a path outside the table: 404 unknown_url", st == 404
              and err_code(b) == "unknown_url", (st, b[:200]))
        log = H.tail(p.proc.log_path, 20000)
        check("the start-up line names the same version", ("cursor-oai %s listening" % ver) in log,
              log[:600])
    finally:
        p.stop()


def t_page_access(tmp, fake, token):
    """The key rules, the Host/Origin guard, the headers, the usage cache, no secrets."""
    p = H.Proxy(tmp, "access", fake.url(), fake.ca, token, extra_env={"CURSOR_OAI_API_KEY": KEY})
    try:
        for path in ("/", "/status.json", "/status.js"):
            st, b, _ = req(p.port, "GET", path)
            eq("API key set, no key: %s is 401" % path, st, 401)
        st, b, h = req(p.port, "GET", "/?key=wrong-" + KEY)
        check("a wrong ?key=: 401, no cookie", st == 401 and "set-cookie" not in h, (st, h))
        st, b, h = req(p.port, "GET", "/?key=" + KEY)
        ck = h.get("set-cookie", "")
        check("the right ?key=: 303 to / (the key leaves the address bar)",
              st == 303 and h.get("location") == "/", (st, h))
        check("  ... with an HttpOnly, SameSite=Strict cookie that is not the key",
              "HttpOnly" in ck and "SameSite=Strict" in ck and KEY not in ck
              and ck.startswith("cursor_oai_status="), ck)
        cookie = ck.split(";")[0]
        st, b, h = req(p.port, "GET", "/status.json", None, {"Cookie": cookie})
        eq("the cookie opens /status.json", st, 200)
        st, b, h = req(p.port, "GET", "/", None, {"Cookie": "a=b; " + cookie})
        eq("  ... and / (among other cookies)", st, 200)
        csp = h.get("content-security-policy", "")
        check("the page has a CSP: default-src 'self', script-src 'self' (no inline script)",
              "default-src 'self'" in csp and "script-src 'self'" in csp
              and "unsafe-inline" not in csp, csp)
        check("  ... nosniff, no-referrer, no framing", h.get("x-content-type-options") ==
              "nosniff" and h.get("referrer-policy") == "no-referrer"
              and "frame-ancestors 'none'" in csp, h)
        check("the page loads nothing from elsewhere (no http(s):// in HTML, script or style)",
              all(b"http://" not in req(p.port, "GET", x, None, {"Cookie": cookie})[1]
                  and b"https://" not in req(p.port, "GET", x, None, {"Cookie": cookie})[1]
                  for x in ("/", "/status.js", "/status.css")))
        check("no inline script in the page", b"<script>" not in b and b"onload" not in b, b[:300])
        st, b, _ = req(p.port, "GET", "/v1/models", None, {"Cookie": cookie})
        eq("the cookie does not open the API (/v1/models: 401)", st, 401)
        # the last digit changed to another one (setting it to a fixed "00" left the cookie
        # as it was whenever it ended in "00": 1 in 256 runs, seen once in a full run)
        forged = cookie[:-1] + ("1" if cookie[-1] != "1" else "2")
        st, b, _ = req(p.port, "GET", "/status.json", None, {"Cookie": forged})
        check("a forged cookie (last digit changed): 401", forged != cookie and st == 401,
              (st, forged[-4:], cookie[-4:]))
        # issue 29: the cookie lasts 12 hours, in the browser (Max-Age) and on the server
        # (its expiry is inside the MAC: "EXPIRY.hex HMAC-SHA256(key, text \\n EXPIRY)")
        check("  ... the cookie has Max-Age=43200 (12 h)", "Max-Age=43200" in ck, ck)

        def cookie_for(exp):
            mac = hmac.new(KEY.encode(), b"cursor-oai status page\n" + str(exp).encode(),
                           hashlib.sha256).hexdigest()
            return "cursor_oai_status=%d.%s" % (exp, mac)
        now = int(time.time())
        res = [req(p.port, "GET", "/status.json", None, {"Cookie": cookie_for(exp)})[0]
               for exp in (now + 3600, now - 5, now + 30 * 86400)]
        eq("a cookie made with the key: 200 while its expiry is ahead, 401 once it is past, "
           "401 for an expiry further ahead than 12 h", res, [200, 401, 401])
        st, b, _ = req(p.port, "GET", "/status.json", None, {"Authorization": "Bearer " + KEY})
        eq("Bearer <key> opens /status.json too (scripts)", st, 200)
        st, b, _ = req(p.port, "GET", "/", None, {"Cookie": cookie, "Host": "evil.example"})
        eq("Host guard (DNS rebinding): Host evil.example -> 403", st, 403)
        st, b, _ = req(p.port, "GET", "/status.json", None,
                       {"Cookie": cookie, "Origin": "http://evil.example"})
        eq("Origin guard: a foreign Origin -> 403", st, 403)
        st, b, _ = req(p.port, "POST", "/status.json", "{}", {"Cookie": cookie})
        eq("POST /status.json: 405 (nothing changes state)", st, 405)
        # the usage call is cached: many polls, at most one upstream call
        u0 = fake.state()["counters"].get("usage_calls", 0)
        for _ in range(12):
            req(p.port, "GET", "/status.json", None, {"Cookie": cookie})
        du = fake.state()["counters"].get("usage_calls", 0) - u0
        check("13 page polls cost at most one usage call (cached)", du <= 1, du)
        st, _, _ = chat(p.port, "scenario:default", PROMPT)
        st, b, _ = req(p.port, "GET", "/status.json", None, {"Cookie": cookie})
        check("status.json: no token, no API key, no prompt",
              token.encode() not in b and KEY.encode() not in b and PROMPT.encode() not in b)
        log = H.tail(p.proc.log_path, 200000)
        check("the key never reaches the log (?key= is not logged)", KEY not in log)
    finally:
        p.stop()


def t_browser(tmp, fake, token):
    p = H.Proxy(tmp, "page", fake.url(), fake.ca, token, extra_env={"CURSOR_OAI_API_KEY": KEY})
    try:
        st, _, _ = chat(p.port, "scenario:default", PROMPT)
        eq("a chat that works", st, 200)
        st, b, _ = chat(p.port, "scenario:usage_limit")
        failed_msg = json.loads(b)["error"]["message"] if st == 402 else None
        eq("a chat that fails (usage limit, 402)", st, 402)
        st, b, _ = chat(p.port, HOSTILE)
        check("a chat whose model name is an HTML element", st in (200, 400, 404), (st, b[:200]))
        n_err = 1 + (st >= 400)       # the usage limit, and the hostile name if it was refused

        def listed():
            # a request joins the page's list when the proxy logs it, which can be just after
            # the client has the whole answer (failed CI once, reading it at once)
            s2, b2, _ = req(p.port, "GET", "/status.json", None,
                            {"Authorization": "Bearer " + KEY})
            return b2 if b"img src=x" in b2 else None
        b = H.wait_for(listed, 10) or b""
        check("status.json escapes <, > and & (no raw '<' at all)", b"<" not in b
              and b"\\u003cimg src=x" in b, b[:300])
        j = json.loads(b)
        eq("status.json: the version", j["version"], header_version())
        if not shutil.which(CHROMIUM):
            if os.geteuid() == 0:
                check("chromium installed (build.sh installs it with the test packages)", False)
            else:
                print("skipped: %s not installed (browser checks)" % CHROMIUM)
            return
        url = "http://127.0.0.1:%d/?key=%s" % (p.port, KEY)
        r = chromium(tmp, "dom", url, ["--dump-dom"])
        dom = r.stdout
        check("chromium dumped the page", r.returncode == 0 and "<body" in dom,
              (r.returncode, r.stderr[-800:]))
        check("  ... the script ran and rendered (body data-loaded, after the ?key= redirect)",
              'data-loaded="1"' in dom, dom[:1500])
        check("  ... version shown", '<span id="version">%s</span>' % header_version() in dom)
        check("  ... who is logged in, expiry and renewal",
              "status@example.com (auth0|status_page)" in dom and "expires in" in dom
              and "CURSOR_ACCESS_TOKEN is used as is" in dom)
        check("  ... upstream: client version, transport, profile, agent host",
              H.CLIENT_VERSION in dom and TRANSPORT_SHOWN[H.TRANSPORT] in dom
              and re.search(r"<dt>profile</dt><dd>(grpc-web|connect)", dom)
              and "<dt>HTTP/1.1 run host</dt><dd>https://" in dom and "<dt>HTTP/2 agent host</dt>" in dom)
        m = re.search(r'<progress id="usage-bar" max="100" value="([0-9.]+)"', dom)
        check("  ... the usage bar has the period's figure (61.7% in the fake's plan)",
              m and abs(float(m.group(1)) - 61.7) < 0.05, m and m.group(0))
        check("  ... the models", "claude-4.5-sonnet" in dom and "gpt-5.1-codex" in dom)
        m = re.search(r"<dt>model API requests</dt><dd>(\d+)</dd>", dom)
        check("  ... live figures: 3 model API requests, %d answered with an error, p50/p95"
              % n_err, m and m.group(1) == "3"
              and "<dt>answered with an error</dt><dd>%d</dd>" % n_err in dom
              and re.search(r"first token p95</dt><dd>[0-9.]+ s", dom), dom[dom.find('id="live"'):][:700])
        check("  ... errors by kind: HTTP 402", "<li>HTTP 402: 1</li>" in dom)
        rows = re.findall(r"<tr( class=\"failed\")?>(.*?)</tr>", dom[dom.find('id="req-body"'):])
        fails = [x for c, x in rows if c and "scenario:usage_limit" in x]
        check("  ... the failed request with its status and Cursor's message",
              fails and "<td>402</td>" in fails[0] and failed_msg
              and failed_msg.replace("'", "&#39;") in fails[0].replace("'", "&#39;"),
              (failed_msg, rows))
        esc = HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        check("  ... the hostile model name shows as text", esc in dom, dom[-2500:])
        check("  ... and no <img> element came from it, its onerror never ran",
              "<img" not in dom and "data-xss" not in dom.split(esc)[0] + dom.split(esc)[-1])
        check("  ... no token, key or prompt in the DOM",
              token not in dom and KEY not in dom and PROMPT not in dom)
        # taken in this run's own folder and renamed into build/: both lanes (HTTP/1.1 and
        # HTTP/2) run this test side by side, and one must not delete the other's picture
        kept = os.path.join(ROOT, "build", "status-page.png")
        out = os.path.join(tmp, "status-page.png")
        r = chromium(tmp, "shot", url, ["--window-size=1100,1000", "--hide-scrollbars",
                                        "--screenshot=" + out])
        shot = r.returncode == 0 and os.path.exists(out) and os.path.getsize(out) > 10000
        if shot:
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            shutil.move(out, kept)
        check("a screenshot of the page is kept as build/status-page.png", shot,
              r.stderr[-500:])
        # the page without JavaScript's help: the JSON it polls is the same figures
        st, b, h = req(p.port, "GET", "/status.json", None, {"Authorization": "Bearer " + KEY})
        check("status.json is no-store", "no-store" in h.get("cache-control", ""), h)
    finally:
        p.stop()


def main():
    tmp = S.make_tmp()
    token = H.session_token("auth0|status_page", email="status@example.com")
    try:
        fake = H.Fake(tmp, None, token, config={"list_scenarios": False})
        S.sections([(t.__name__, lambda t=t: t(tmp, fake, token))
                    for t in (t_version_and_routes, t_page_access, t_browser)], timed=False)
    except Exception:
        check("suite setup", False, traceback.format_exc())
    return S.finish()


if __name__ == "__main__":
    sys.exit(main())
