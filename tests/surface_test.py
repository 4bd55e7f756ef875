#!/usr/bin/python3
"""surface_test.py - quota/usage (GET /v1/usage, `cursor-oai usage`, the status line), images
(data: URLs to SelectedImage), the request-field table (stop, max_tokens, response_format, ...)
and the strict request checks (unknown content parts, lone surrogates, duplicate keys), all
against build/cursor-oai with the fake Cursor upstream.

Run from the repo root; env CURSOR_OAI_BIN (default build/cursor-oai), E2E_NPM_DIR (the npm
clients tests/e2e_run.sh installs; default build/npm; the openai-SDK checks need it).
Prints RESULT p f last."""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

BIN = os.environ.get("CURSOR_OAI_BIN", os.path.join(H.ROOT, "build", "cursor-oai"))
NPM = os.environ.get("E2E_NPM_DIR", os.path.join(H.ROOT, "build", "npm"))
PASS = FAIL = 0


def check(name, cond, detail=""):
    global PASS, FAIL
    if cond:
        PASS += 1
        print("ok   " + name, flush=True)
    else:
        FAIL += 1
        print("FAIL %s %s" % (name, detail), flush=True)
    return bool(cond)


def eq(name, got, want):
    return check(name, got == want, "\n     got: %r\n    want: %r" % (got, want))


def jload(b):
    try:
        return json.loads(b)
    except (ValueError, TypeError):
        return None


def cli(proxy, args, timeout=20):
    p = subprocess.run([BIN] + args, env=proxy.env, capture_output=True, text=True,
                       timeout=timeout, cwd=proxy.cwd)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------------------------------------
# usage

def t_usage(fake, proxy):
    fake.ctl("/config", {"usage_shape": "plan", "usage_status": None, "plan_status": None})
    st, body, hd = proxy.get("/v1/usage")
    j = jload(body) or {}
    eq("GET /v1/usage plan: 200", st, 200)
    eq("usage: object", j.get("object"), "cursor.usage")
    eq("usage: plan", j.get("plan"), {"name": "Pro", "price": "$20/mo", "included_cents": 2000})
    eq("usage: resets_at", j.get("resets_at"), "2026-01-01T00:00:00Z")
    eq("usage: billing cycle", j.get("billing_cycle"),
       {"start": "2025-12-01T00:00:00Z", "end": "2026-01-01T00:00:00Z",
        "start_ms": 1764547200000, "end_ms": 1767225600000})
    inc = j.get("included") or {}
    eq("usage: included used/limit/remaining",
       (inc.get("used_cents"), inc.get("limit_cents"), inc.get("remaining_cents")),
       (1234, 2000, 766))
    eq("usage: on-demand", (j.get("on_demand") or {}).get("limit_cents"), 5000)
    eq("usage: limit_reached false", j.get("limit_reached"), False)
    eq("usage: content type", hd.get("content-type"), "application/json")

    rc, out, err = cli(proxy, ["usage", "--json"])
    eq("cursor-oai usage --json: exit 0", rc, 0)
    eq("cursor-oai usage --json = GET /v1/usage", jload(out), j)
    rc, out, err = cli(proxy, ["usage"])
    check("cursor-oai usage: human lines", rc == 0 and "Plan:           Pro ($20/mo)" in out
          and "$12.34 of $20.00 used (62%), $7.66 left" in out and "resets" in out, out + err)
    rc, out, err = cli(proxy, ["status"])
    lines = [ln for ln in out.splitlines() if ln.startswith("Usage: ")]
    check("status: one usage line", rc == 0 and len(lines) == 1
          and "$12.34 of $20.00 included usage used (62%), $7.66 left; resets 2026-01-01"
          in lines[0], out + err)

    fake.ctl("/config", {"usage_shape": "no_plan"})
    st, body, hd = proxy.get("/v1/usage")
    j = jload(body) or {}
    eq("usage no_plan: 200", st, 200)
    eq("usage no_plan: plan/included/limit_reached null",
       (j.get("plan"), j.get("included"), j.get("limit_reached")), (None, None, None))
    eq("usage no_plan: resets_at still known", j.get("resets_at"), "2026-01-01T00:00:00Z")
    rc, out, err = cli(proxy, ["usage"])
    check("cursor-oai usage no_plan: says the limit is unknown",
          rc == 0 and "Limit reached:  unknown" in out and "Plan:" not in out, out + err)

    fake.ctl("/config", {"usage_shape": "limit_hit"})
    st, body, hd = proxy.get("/v1/usage")
    j = jload(body) or {}
    eq("usage limit_hit: limit_reached true", (st, j.get("limit_reached")), (200, True))
    eq("usage limit_hit: message", j.get("message"), "You've hit your usage limit")
    rc, out, err = cli(proxy, ["status"])
    check("status limit_hit: LIMIT REACHED in the usage line",
          "LIMIT REACHED" in out and "Usage: $20.00 of $20.00" in out, out)

    fake.ctl("/config", {"usage_shape": "plan", "plan_status": 500})
    st, body, hd = proxy.get("/v1/usage")
    j = jload(body) or {}
    eq("usage, GetPlanInfo fails: still 200 with the plan unknown",
       (st, j.get("plan"), (j.get("included") or {}).get("used_cents")), (200, None, 1234))

    fake.ctl("/config", {"usage_status": 503, "plan_status": None})
    st, body, hd = proxy.get("/v1/usage")
    e = (jload(body) or {}).get("error") or {}
    eq("usage upstream 503 -> 503 OpenAI error", (st, e.get("code")),
       (503, "upstream_unavailable"))
    rc, out, err = cli(proxy, ["usage"])
    check("cursor-oai usage, upstream error: exit 1 with the reason",
          rc == 1 and "cannot read the usage" in err and "503" in err, out + err)
    rc, out, err = cli(proxy, ["status"])
    check("status, usage error: still exit 0, 'Usage: unavailable'",
          rc == 0 and "Usage: unavailable (" in out, out + err)
    fake.ctl("/config", {"usage_status": 500})
    st, body, hd = proxy.get("/v1/usage")
    eq("usage upstream 500 -> 502", st, 502)
    fake.ctl("/config", {"usage_status": None})
    errs = [e for e in fake.state().get("errors", []) if "usage" in json.dumps(e)
            or "plan" in json.dumps(e)]
    eq("fake saw no malformed dashboard request", errs, [])


def t_usage_key(tmp, fake, token):
    p = H.Proxy(tmp, "key", fake.url(), fake.ca, token, {"CURSOR_OAI_API_KEY": "sk-surface"})
    try:
        st, body, hd = p.get("/v1/usage")
        eq("GET /v1/usage without the API key: 401", st, 401)
        st, body, hd = p.get("/v1/usage", {"Authorization": "Bearer sk-surface"})
        eq("GET /v1/usage with the API key: 200", st, 200)
        st, body, hd = p.request("POST", "/v1/usage", {}, {"Authorization": "Bearer sk-surface"})
        eq("POST /v1/usage: 405", st, 405)
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------

def main():
    if not os.path.exists(BIN):
        print("skipped: %s missing (build it first)" % BIN)
        print("RESULT 0 0")
        return 0
    tmp = tempfile.mkdtemp(prefix="coai-surface-")
    token = pb.make_jwt({"sub": "auth0|surface", "exp": int(time.time()) + 7200,
                         "type": "session"})
    fake = proxy = None
    try:
        fake = H.Fake(tmp, {}, token)
        proxy = H.Proxy(tmp, "main", fake.url(), fake.ca, token)
        for name, fn in [("usage", lambda: t_usage(fake, proxy)),
                         ("usage-key", lambda: t_usage_key(tmp, fake, token))]:
            if os.environ.get("SURFACE_ONLY") and name not in os.environ["SURFACE_ONLY"].split(","):
                continue
            try:
                fn()
            except Exception:
                check("section %s ran without an exception" % name, False, traceback.format_exc())
    finally:
        if proxy:
            proxy.stop()
        if fake:
            fake.stop()
        H.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT %d %d" % (PASS, FAIL))
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
