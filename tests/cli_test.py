#!/usr/bin/python3
"""cli_test.py - the command-line contract of build/cursor-oai: exit codes, --help/--version,
the non-loopback guard (--allow-unauthenticated), CURSOR_OAI_ALLOW_HOSTS, and that the README's
configuration table and `serve --help` name the same flags and variables.

No upstream is needed: /health passes through the same Host/Origin guard as every route.
Run from the repo root; env CURSOR_OAI_BIN (default build/cursor-oai). Prints RESULT p f."""
import http.client
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import harness as H  # noqa: E402

S = H.Suite("cli", section=None)
check = S.check
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
TOKEN = "x.eyJleHAiOjQxMDI0NDQ4MDB9.y"


def env(**kw):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CURSOR_", "OPENAI_")) and k != "SSL_CERT_FILE"}
    e.update({"CURSOR_ACCESS_TOKEN": TOKEN, "SSL_CERT_FILE": SYSTEM_CA,
              "HOME": "/nonexistent", "XDG_CONFIG_HOME": "/nonexistent"})
    e.update(kw)
    return e


def run(args, timeout=10, **kw):
    """(exit status, stdout, stderr); a command still running after timeout seconds is
    killed and reported as status None (every caller expects it to exit by itself)."""
    try:
        p = subprocess.run(H.proxy_cmd() + args, env=env(**kw), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or "", "still running after %d s" % timeout
    return p.returncode, p.stdout, p.stderr


def start(name, args=(), host="127.0.0.1", **kw):
    """A server (the harness's Proxy) with Cursor's own address and the system CAs (it never
    needs the upstream here), or None when it did not become healthy (the reason is printed)."""
    try:
        return H.Proxy(S.tmp, name, "https://api2.cursor.sh", SYSTEM_CA, TOKEN, kw, args,
                       host=host)
    except RuntimeError as e:
        print(e)
        return None


def get_status(port, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/health", headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def stop(p):
    """Stop a server start() returned; its log."""
    if p is None:
        return ""
    p.stop()
    return H.tail(p.proc.log_path, 10 ** 7)


def t_basics():
    rc, out, _ = run(["--version"])
    check("--version exits 0", rc == 0, rc)
    check("--version names the dependencies",
          all(w in out for w in ("cursor-oai", "BearSSL", "cJSON", "nanopb")), out)
    rc, out, _ = run(["--help"])
    check("--help exits 0 and lists every command",
          rc == 0 and all(c in out for c in ("serve", "login", "logout", "status", "models")), out)
    for cmd in ("serve", "login", "logout", "status", "models"):
        rc, out, _ = run([cmd, "--help"])
        check("%s --help exits 0 with a usage line" % cmd, rc == 0 and "Usage:" in out, rc)
    for args, why in ((["frobnicate"], "unknown command"), (["serve", "--bogus"], "unknown option"),
                      (["serve", "--listen"], "missing value"),
                      (["serve", "--max-conns", "0"], "bad number"),
                      (["serve", "--log-level", "loud"], "bad level"),
                      (["serve", "--allow-unauthenticated=1"], "flag given a value")):
        rc, _, err = run(args)
        check("usage error (%s) exits 2 with a message" % why, rc == 2 and err.strip(), (rc, err))
    # Values that end up in upstream headers or addresses are checked, never passed on.
    rc, _, err = run(["serve", "--listen", "127.0.0.1:0"],
                     CURSOR_CLIENT_VERSION="cli-1\r\nX-Injected: 1")
    check("CURSOR_CLIENT_VERSION with CR/LF: exit 1 naming it",
          rc == 1 and "CURSOR_CLIENT_VERSION" in err, (rc, err))
    for url in ("http://api2.cursor.sh", "https://u@host", "https://host/a b", "https://host:0"):
        rc, _, err = run(["serve", "--listen", "127.0.0.1:0"], CURSOR_API_URL=url)
        check("CURSOR_API_URL=%r: exit 1 naming it" % url, rc == 1 and "CURSOR_API_URL" in err,
              (rc, err))
    p = start("tz", TZ="UTC\r\nX-Injected: 1")
    check("server with a malformed TZ starts", p is not None)
    log = stop(p)
    check("a malformed TZ is ignored with a warning, never sent on",
          "TZ is not a time-zone name" in log and "X-Injected" not in log, log[-400:])
    rc, _, err = run(["serve", "--listen", "127.0.0.1:0"], SSL_CERT_FILE="/nonexistent.pem")
    check("unreadable SSL_CERT_FILE: exit 1 naming the file", rc == 1 and "nonexistent" in err,
          (rc, err))


def t_version():
    """Every place that names the version takes it from COAI_VERSION (cursor_oai.h): the
    header's title line, --version and serve --help."""
    with open("cursor_oai.h") as f:
        hdr = f.read()
    m = re.search(r'^#define COAI_VERSION "([^"]+)"$', hdr, re.M)
    check("cursor_oai.h defines COAI_VERSION", m, "")
    if not m:
        return
    ver = m.group(1)
    title = hdr.split("\n", 1)[0]
    check("the header's title line ends in v<COAI_VERSION> (v%s)" % ver,
          re.search(r"\sv" + re.escape(ver) + r"$", title), title)
    named = sorted(set(re.findall(r"\bv(\d+\.\d+\.\d+[-a-z0-9.]*)", hdr)))
    check("the header names no other version (v<x.y.z>)", named == [ver], named)
    rc, out, _ = run(["--version"])
    check("--version's first line is 'cursor-oai %s'" % ver,
          rc == 0 and out.splitlines()[:1] == ["cursor-oai " + ver], out)
    rc, out, _ = run(["serve", "--help"])
    check("serve --help names the version: a line 'cursor-oai %s'" % ver,
          rc == 0 and "cursor-oai " + ver in out.splitlines(), out[:200])


def t_non_loopback():
    # Binding 0.0.0.0 in a test: only 127.0.0.1 is ever connected to.
    rc, out, err = run(["serve", "--listen", "0.0.0.0:0"])
    check("0.0.0.0 without a client key is refused (exit 2)", rc == 2, rc)
    check("the refusal names CURSOR_OAI_API_KEY and --allow-unauthenticated",
          "CURSOR_OAI_API_KEY" in err and "--allow-unauthenticated" in err, err)
    check("a refused configuration never says it is listening", "listening on" not in out + err)
    p = start("unauth", ["--allow-unauthenticated"], host="0.0.0.0")
    check("--allow-unauthenticated starts off loopback", p is not None)
    log = stop(p)
    check("... and warns that anyone reaching the port uses the account",
          "without a client key" in log, log[-300:])
    p = start("keyed", host="0.0.0.0", CURSOR_OAI_API_KEY="k-123456")
    check("0.0.0.0 with a client key starts", p is not None)
    log = stop(p)
    check("... without the warning", "without a client key" not in log, log[-300:])


def t_allow_hosts():
    p = start("hosts", ["--allow-host", "flag.example"],
              CURSOR_OAI_ALLOW_HOSTS=" cursor-oai.test, ,Proxy.Internal")
    check("server with CURSOR_OAI_ALLOW_HOSTS starts", p is not None)
    if p is None:
        return
    port = p.port
    for host, want in (("cursor-oai.test:%d" % port, 200), ("PROXY.internal:%d" % port, 200),
                       ("flag.example:%d" % port, 200), ("localhost:%d" % port, 200),
                       ("evil.example:%d" % port, 403), ("proxy.internal:1", 200),
                       ("cursor-oai.test.evil.com:%d" % port, 403)):
        got = get_status(port, {"Host": host})
        check("Host %s -> %d" % (host, want), got == want, got)
    for origin, want in (("http://proxy.internal:%d" % port, 200),
                         ("http://evil.example:%d" % port, 403), ("null", 403)):
        got = get_status(port, {"Origin": origin})
        check("Origin %s -> %d" % (origin, want), got == want, got)
    stop(p)
    # NAME:PORT pins a name to a port (issue 16); a port must be 1..65535
    for bad in ("a/b", "x.example:0", "x.example:65536", "x.example:", "u@h.example", "two words",
                ",".join("h%d.example" % i for i in range(17))):
        rc, _, err = run(["serve", "--listen", "127.0.0.1:0"], CURSOR_OAI_ALLOW_HOSTS=bad)
        check("CURSOR_OAI_ALLOW_HOSTS=%r is a usage error" % bad[:30],
              rc == 2 and "CURSOR_OAI_ALLOW_HOSTS" in err, (rc, err))


def t_readme_matches_help():
    """Every flag and variable of the README's configuration table is in `serve --help`,
    and every option `serve --help` lists is in the README."""
    with open("README.md", encoding="utf-8") as f:
        readme = f.read()
    m = re.search(r"## Configuration\n(.*?)\n## ", readme, re.S)
    check("README has a configuration section", m is not None)
    if not m:
        return
    table = m.group(1)
    names = set(re.findall(r"`(--[a-z-]+)", table)) | set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    _, helptext, _ = run(["serve", "--help"])
    missing = sorted(n for n in names if n not in helptext)
    check("README configuration names all appear in serve --help", not missing, missing)
    opts = set(re.findall(r"^\s+(--[a-z-]+)", helptext, re.M))
    undocumented = sorted(o for o in opts if o not in table and o != "--help")
    check("serve --help options all appear in the README table", not undocumented, undocumented)


def main():
    if S.binary_missing():
        return 0
    S.make_tmp()
    try:
        t_basics()
        t_version()
        t_non_loopback()
        t_allow_hosts()
        t_readme_matches_help()
    finally:
        code = S.finish()
    return code


if __name__ == "__main__":
    sys.exit(main())
