#!/usr/bin/python3
"""quota_images_fields_test.py - quota/usage (GET /v1/usage, `cursor-oai usage`, the status line),
images (data: URLs to SelectedImage), the request-field table (stop, max_tokens, response_format,
...) and the strict request checks (unknown content parts, lone surrogates, duplicate keys), all
against build/cursor-oai with the fake Cursor upstream.

Run from the repo root; env CURSOR_OAI_BIN (default build/cursor-oai), E2E_NPM_DIR (the npm
clients tests/e2e_run.sh installs; default build/npm; the openai-SDK checks need it).
Prints RESULT p f last."""
import base64
import json
import os
import struct
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import harness as H  # noqa: E402
from harness import pb  # noqa: E402

BIN = os.path.abspath(os.environ.get("CURSOR_OAI_BIN", os.path.join(H.ROOT, "build",
                                                                   "cursor-oai")))
NPM = os.environ.get("E2E_NPM_DIR", os.path.join(H.ROOT, "build", "npm"))
S = H.Suite("quota_images_fields", section=None)
check, eq = S.check, S.eq


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
       (j.get("object"), j.get("plan"), j.get("included"), j.get("limit_reached")),
       ("cursor.usage", None, None, None))
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
    check("fake answered the dashboard calls", fake.state().get("counters", {}).get("usage_calls",
                                                                                  0) >= 8)


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
# images

def make_png(w, h):
    """An RGB PNG made here (zlib + CRCs), so no image file or library is needed."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    raw = b"".join(b"\x00" + b"".join(bytes((x * 40 % 256, y * 60 % 256, 128)) for x in range(w))
                   for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def data_url(b, mime="image/png"):
    return "data:%s;base64,%s" % (mime, base64.b64encode(b).decode())


def make_bmp(w, h):
    """A 24-bit bottom-up BMP (BITMAPINFOHEADER), rows padded to 4 bytes."""
    row = (w * 3 + 3) & ~3
    pix = b"".join(bytes((x * 50 % 256, y * 70 % 256, 200)) * 1 for y in range(h)
                   for x in range(w))
    rows = b"".join(pix[y * w * 3:(y + 1) * w * 3] + b"\0" * (row - w * 3) for y in range(h))
    dib = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + len(rows), 0, 0, 54) + dib + rows


def expect_text(png):
    import hashlib
    return "image/png %dx%d %dB sha256:%s" % (struct.unpack(">I", png[16:20])[0],
                                              struct.unpack(">I", png[20:24])[0], len(png),
                                              hashlib.sha256(png).hexdigest()[:16])


def last_run_request(fake):
    runs = fake.runs()
    runs = runs.get("runs", runs) if isinstance(runs, dict) else runs
    for r in reversed(runs):
        for a in r.get("appends", []):
            m = a.get("message") or {}
            if m.get("type") == "run_request":
                return m
    return {}


def curl_chat(proxy, body, extra=()):
    p = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}",
                        "-H", "Content-Type: application/json", "--data-binary", "@-"]
                       + list(extra) + [proxy.base + "/v1/chat/completions"],
                       input=json.dumps(body).encode(), capture_output=True, timeout=60)
    out = p.stdout.decode("utf-8", "replace")
    body_text, _, code = out.rpartition("\n")
    return int(code or 0), body_text


def sdk(proxy, mode, params):
    if not os.path.isdir(os.path.join(NPM, "node_modules", "openai")):
        return None
    script = H.stage_script(os.path.join(H.HERE, "sdk_openai.mjs"), NPM)
    r = subprocess.run(["node", script, proxy.base + "/v1", mode, json.dumps(params)],
                       capture_output=True, text=True, timeout=90, cwd=NPM)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"fatal": "no JSON from node: " + r.stdout[-500:] + r.stderr[-1500:]}


def t_images(tmp, fake, proxy, token):
    png = make_png(3, 2)
    big = make_png(64, 48)
    errs0 = len(fake.state().get("errors", []))
    msgs = [{"role": "user", "content": [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": data_url(png), "detail": "low"}}]}]
    # curl, non-streaming
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": msgs})
    j = jload(text) or {}
    content = ((j.get("choices") or [{}])[0].get("message") or {}).get("content")
    eq("curl image: 200", code, 200)
    eq("curl image: Cursor got the PNG bytes, type and size", content,
       "IMAGES 1: " + expect_text(png))
    rr = last_run_request(fake)
    im = (rr.get("images") or [{}])[0]
    eq("run request: one SelectedImage with data (8), uuid, dimension, mime_type",
       (len(rr.get("images") or []), im.get("fields"), im.get("width"), im.get("height")),
       (1, [2, 4, 7, 8], 3, 2))
    eq("run request: the prompt has no marker for the current image", rr.get("prompt"),
       "User: What is in this image?")
    # issue 24 item 8: Cursor ignores inline image data unless the run request says the
    # client supports it (AgentRunRequest.client_supports_inline_images = 19)
    eq("run request with images: client_supports_inline_images (19) = true",
       rr.get("client_supports_inline_images"), 1)
    # BMP is one of the types Cursor takes (png/jpeg/gif/webp/bmp)
    bmp = make_bmp(4, 3)
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "bmp?"},
                                     {"type": "image_url", "image_url": {"url": data_url(
                                         bmp, "image/bmp")}}]}]})
    j = jload(text) or {}
    import hashlib
    eq("BMP image: accepted, Cursor got its bytes, type and size",
       (code, ((j.get("choices") or [{}])[0].get("message") or {}).get("content")),
       (200, "IMAGES 1: image/bmp 4x3 %dB sha256:%s" % (len(bmp),
                                                         hashlib.sha256(bmp).hexdigest()[:16])))
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": [
        {"role": "user", "content": "no image"}]})
    eq("run request without images: no client_supports_inline_images",
       last_run_request(fake).get("client_supports_inline_images"), None)
    # streaming, two images, curl
    msgs2 = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(png)}},
        {"type": "text", "text": "and"},
        {"type": "image_url", "image_url": {"url": data_url(big)}}]}]
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": msgs2,
                                   "stream": True}, ["-N"])
    ev = H.parse_sse(text.encode())
    eq("curl stream, two images: content", (code, ev["content"]),
       (200, "IMAGES 2: " + expect_text(png) + "; " + expect_text(big)))
    # earlier turn's image -> marker; only the newest user message's images are sent
    hist = [msgs[0], {"role": "assistant", "content": "A tiny picture."},
            {"role": "user", "content": [{"type": "text", "text": "Compare with this one"},
                                         {"type": "image_url",
                                          "image_url": {"url": data_url(big)}}]}]
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": hist})
    j = jload(text) or {}
    eq("history: only the newest message's image is sent",
       ((j.get("choices") or [{}])[0].get("message") or {}).get("content"),
       "IMAGES 1: " + expect_text(big))
    eq("history: the earlier image is a text marker", last_run_request(fake).get("prompt"),
       "User: What is in this image?\n[image omitted: attached to an earlier message]\n\n"
       "Assistant: A tiny picture.\n\nUser: Compare with this one")
    # remote URL: refused, never fetched
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": [
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": "http://127.0.0.1:9/x.png"}}]}]})
    e = (jload(text) or {}).get("error") or {}
    eq("remote image URL: 400 image_url_not_supported naming the part",
       (code, e.get("code"), e.get("param")),
       (400, "image_url_not_supported", "messages[0].content[0].image_url.url"))
    code, text = curl_chat(proxy, {"model": "scenario:echo_images", "messages": [
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": data_url(b"%PDF-1.4 x", "image/png")}}]}]})
    e = (jload(text) or {}).get("error") or {}
    eq("not an image: 400 invalid_image_format", (code, e.get("code")),
       (400, "invalid_image_format"))
    # openai SDK
    r = sdk(proxy, "stream", {"model": "scenario:echo_images", "messages": msgs})
    if r is None:
        print("skipped: openai SDK image checks (no npm clients in %s)" % NPM)
    else:
        eq("openai SDK stream image: content", r.get("content"), "IMAGES 1: " + expect_text(png))
        r = sdk(proxy, "nonstream", {"model": "scenario:echo_images", "messages": msgs2})
        eq("openai SDK non-stream two images: content", r.get("content"),
           "IMAGES 2: " + expect_text(png) + "; " + expect_text(big))
        r = sdk(proxy, "error", {"model": "scenario:echo_images", "maxRetries": 0, "messages": [
            {"role": "user", "content": [{"type": "input_audio",
                                          "input_audio": {"data": "AAAA", "format": "wav"}}]}]})
        eq("openai SDK audio part: BadRequestError 400", ((r or {}).get("error") or {}).get("status"),
           400)
    # the same through the other dialects (core): Anthropic base64 image, Responses input_image
    b64 = base64.b64encode(png).decode()
    st, body, hd = proxy.request("POST", "/v1/messages", {
        "model": "scenario:echo_images", "max_tokens": 100, "messages": [{"role": "user",
            "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": b64}},
                        {"type": "text", "text": "what is it?"}]}]})
    j = jload(body) or {}
    eq("Anthropic image block: Cursor got the PNG", (st, [c.get("text") for c in
                                                       j.get("content") or []]),
       (200, ["IMAGES 1: " + expect_text(png)]))
    st, body, hd = proxy.request("POST", "/v1/responses", {
        "model": "scenario:echo_images", "store": False, "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": data_url(big)},
            {"type": "input_text", "text": "and this?"}]}]})
    j = jload(body) or {}
    texts = [c.get("text") for it in j.get("output") or [] for c in it.get("content") or []]
    eq("Responses input_image: Cursor got the PNG", (st, texts),
       (200, ["IMAGES 1: " + expect_text(big)]))
    errs = fake.state().get("errors", [])[errs0:]
    eq("fake: every image decoded and matched its mime type and dimension", errs, [])
    # caps, configured by the environment
    p = H.Proxy(tmp, "caps", fake.url(), fake.ca, token,
                {"CURSOR_OAI_MAX_IMAGE_BYTES": "200", "CURSOR_OAI_MAX_IMAGES": "1"})
    try:
        st, body, hd = p.chat("scenario:echo_images", msgs[0]["content"])
        eq("cap: a small image within CURSOR_OAI_MAX_IMAGE_BYTES passes", st, 200)
        st, body, hd = p.chat("scenario:echo_images", [
            {"type": "image_url", "image_url": {"url": data_url(big)}}])
        e = (jload(body) or {}).get("error") or {}
        eq("cap: an image over CURSOR_OAI_MAX_IMAGE_BYTES -> 413 image_too_large",
           (st, e.get("code"), e.get("param")),
           (413, "image_too_large", "messages[0].content[0].image_url.url"))
        st, body, hd = p.chat("scenario:echo_images", msgs2[0]["content"][:1] * 2)
        e = (jload(body) or {}).get("error") or {}
        eq("cap: more images than CURSOR_OAI_MAX_IMAGES -> 400", (st, e.get("param")),
           (400, "messages[0].content"))
    finally:
        p.stop()
    rc, out, err = subprocess.run([BIN, "serve", "--listen", "127.0.0.1:0"],
                                  env=dict(proxy.env, CURSOR_OAI_MAX_IMAGES="0"),
                                  capture_output=True, text=True, timeout=20).returncode, "", ""
    eq("CURSOR_OAI_MAX_IMAGES=0 is a configuration error (exit 1)", rc, 1)


# ---------------------------------------------------------------------------------------------
# strict request checks (issue 16 probe findings)

FAKES = {}


# ---------------------------------------------------------------------------------------------
# images in tool results (Anthropic tool_result image blocks) on a held run

TOOL_IMG_END = [{"op": "turn_ended"}, {"op": "trailer", "status": 0}]
# a fresh run that replays the history (the fallback) answers with its selected images
TOOL_IMG_REPLAY = [{"prompt_contains": "[Tool result for", "steps": [{"op": "images_text"}]
                    + TOOL_IMG_END}]
TOOL_IMG_SCENARIOS = {
    "tool_img_mcp": {"when": TOOL_IMG_REPLAY, "steps": [
        {"op": "exec", "kind": "mcp", "id": 1, "exec_id": "exec-img-1", "tool_name": "screenshot",
         "args": {"window": "main"}, "tool_call_id": "toolu_img1", "hold": True},
        {"op": "await_results", "max_s": 60},
        {"op": "images_from_result", "id": 1},
        {"op": "text_from_result", "id": 1, "prefix": " TEXT:"}] + TOOL_IMG_END},
    "tool_img_read": {"when": TOOL_IMG_REPLAY, "steps": [
        {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-img-r1", "path": "/ws/shot.png",
         "hold": True},
        {"op": "await_results", "max_s": 60},
        {"op": "text", "text": "HELD"}] + TOOL_IMG_END},
}
SHOT = {"name": "screenshot", "description": "Screenshot of a window",
        "input_schema": {"type": "object", "properties": {"window": {"type": "string"}}}}
READ = {"name": "Read", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                         "required": ["file_path"]}}


def t_tool_images(fake, proxy):
    png = make_png(5, 4)
    b64 = base64.b64encode(png).decode()

    def messages(body):
        st, b, hd = proxy.request("POST", "/v1/messages", body,
                                  headers={"anthropic-version": "2023-06-01"}, timeout=60)
        return st, jload(b) or {}

    def loop(model, tool):
        k0 = len(runs_of_model(fake, model))
        msgs = [{"role": "user", "content": "look at it"}]
        st, j = messages({"model": model, "max_tokens": 100, "messages": msgs, "tools": [tool]})
        uses = [c for c in j.get("content") or [] if c.get("type") == "tool_use"]
        if not check("%s: a tool_use first" % model, st == 200 and len(uses) == 1
                     and j.get("stop_reason") == "tool_use", (st, j)):
            return None, None
        msgs += [{"role": "assistant", "content": j["content"]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                               "content": [
                                                   {"type": "text", "text": "the main window"},
                                                   {"type": "image", "source": {
                                                       "type": "base64", "media_type": "image/png",
                                                       "data": b64}}]}]}]
        st, j = messages({"model": model, "max_tokens": 100, "messages": msgs, "tools": [tool]})
        text = "".join(c.get("text", "") for c in j.get("content") or [] if c.get("type") == "text")
        return (st, text), len(runs_of_model(fake, model)) - k0

    got, runs = loop("scenario:tool_img_mcp", SHOT)
    if got:
        eq("MCP tool result with an image: McpImageContent on the held run",
           got, (200, "IMAGES:1 image/png 5x4 %dB TEXT:the main window" % len(png)))
        eq("MCP tool result with an image: one upstream run", runs, 1)
    # the same through the Responses API: function_call_output with an input_image part
    model = "scenario:tool_img_mcp"
    k0 = len(runs_of_model(fake, model))
    tool = {"type": "function", "name": "screenshot", "parameters": SHOT["input_schema"]}
    inp = [{"type": "message", "role": "user", "content": "look at it"}]
    st, b, hd = proxy.request("POST", "/v1/responses", {"model": model, "input": inp,
                                                        "tools": [tool]}, timeout=60)
    calls = [o for o in (jload(b) or {}).get("output") or [] if o.get("type") == "function_call"]
    if check("responses: a function_call first", st == 200 and len(calls) == 1, (st, b[:300])):
        inp += [calls[0], {"type": "function_call_output", "call_id": calls[0]["call_id"],
                           "output": [{"type": "input_text", "text": "the main window"},
                                      {"type": "input_image", "image_url": data_url(png)}]}]
        st, b, hd = proxy.request("POST", "/v1/responses", {"model": model, "input": inp,
                                                            "tools": [tool]}, timeout=60)
        j = jload(b) or {}
        text = "".join(c.get("text", "") for o in j.get("output") or [] if o.get("type") == "message"
                       for c in o.get("content") or [])
        eq("responses: function_call_output image as McpImageContent on the held run",
           (st, text), (200, "IMAGES:1 image/png 5x4 %dB TEXT:the main window" % len(png)))
        eq("responses: one upstream run", len(runs_of_model(fake, model)) - k0, 1)
    # a read exec's result has no place for an image: the turn goes to a fresh run, where the
    # image travels as a selected image
    got, runs = loop("scenario:tool_img_read", READ)
    if got:
        eq("read result with an image: fresh run with the image selected",
           got, (200, "IMAGES 1: " + expect_text(png)))
        eq("read result with an image: two upstream runs (held run given up)", runs, 2)
    def logged():
        with open(proxy.proc.log_path, errors="replace") as f:
            return "which only an MCP exec's result can carry; falling back" in f.read()
    check("the fallback is logged with its reason", H.wait_for(logged, 20))


def runs_of_model(fake, model):
    return [r for r in fake.runs() if r.get("scenario") == model[len("scenario:"):]]


def fake_of(proxy):
    return FAKES[proxy.port]


def t_strict(proxy):
    st, body, hd = proxy.chat("auto", [{"type": "text", "text": "hi"},
                                       {"type": "audio", "audio": {"data": "AA"}}])
    e = (jload(body) or {}).get("error") or {}
    eq("unknown content part: 400 naming part and index", (st, e.get("param")),
       (400, "messages[0].content[1].type"))
    check("unknown content part: message names the type", "'audio'" in (e.get("message") or ""),
          e)
    raw = ('{"model":"auto","stream":false,"messages":[{"role":"user","content":"A\\ud800B"}]}')
    st, body, hd = proxy.request("POST", "/v1/chat/completions", raw)
    eq("lone surrogate escape: accepted (200)", st, 200)
    rr = last_run_request(fake_of(proxy))
    eq("lone surrogate escape: becomes U+FFFD in the prompt", rr.get("prompt"), "User: A\ufffdB")
    raw = ('{"model":"auto","messages":[{"role":"user","content":"x"}],'
           '"messages":[{"role":"user","content":"y"}]}')
    st, body, hd = proxy.request("POST", "/v1/chat/completions", raw)
    e = (jload(body) or {}).get("error") or {}
    eq("duplicate key: 400 duplicate_key", (st, e.get("code")), (400, "duplicate_key"))
    check("duplicate key: the message names the key", "'messages'" in (e.get("message") or ""), e)

# ---------------------------------------------------------------------------------------------
# request fields (README: request fields)

FIELD_SCENARIOS = {
    "long_text": {"steps": [{"op": "text", "text": "lorem ipsum "}] * 40
                  + [{"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "split_end": {"steps": [{"op": "text", "text": "Hello E"}, {"op": "text", "text": "N"},
                            {"op": "text", "text": "D and the rest"}, {"op": "turn_ended"},
                            {"op": "trailer", "status": 0}]},
    "json_fenced": {"steps": [{"op": "text", "text": "```json\n{\"name\": "},
                              {"op": "text", "text": "\"Ada\", \"age\": 36}\n```"},
                              {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "json_prose": {"steps": [{"op": "text", "text": "Sure! Ada is 36."}, {"op": "turn_ended"},
                             {"op": "trailer", "status": 0}]},
    "two_execs": {"steps": [
        {"op": "exec", "kind": "mcp", "id": 1, "exec_id": "exec-1", "tool_name": "get_weather",
         "args": {"location": "Oslo"}, "tool_call_id": "toolu_1"},
        {"op": "exec", "kind": "mcp", "id": 2, "exec_id": "exec-2", "tool_name": "get_time",
         "args": {"zone": "UTC"}, "tool_call_id": "toolu_2"},
        {"op": "stall", "max_s": 30}]},
}

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
USER = [{"role": "user", "content": "Hi"}]


def t_fields(fake, proxy):
    # stop: emulated, even across deltas (curl, streaming)
    code, text = curl_chat(proxy, {"model": "scenario:split_end", "messages": USER,
                                   "stream": True, "stop": ["END"]}, ["-N"])
    ev = H.parse_sse(text.encode())
    eq("stop across deltas (stream): content cut before it", (code, ev["content"]),
       (200, "Hello "))
    eq("stop across deltas (stream): finish_reason stop, [DONE]", (ev["finish"], ev["done"]),
       (["stop"], True))
    r = sdk(proxy, "nonstream", {"model": "scenario:split_end", "messages": USER,
                                 "extra": {"stop": "D and"}})
    if r is not None:
        eq("stop (openai SDK, non-stream)", (r.get("content"), r.get("finish")),
           ("Hello EN", ["stop"]))
    # max_tokens / max_completion_tokens: emulated, finish_reason length
    st, body, hd = proxy.chat("scenario:long:200", max_tokens=5)
    j = jload(body) or {}
    ch = (j.get("choices") or [{}])[0]
    content = (ch.get("message") or {}).get("content") or ""
    eq("max_tokens 5: finish_reason length", (st, ch.get("finish_reason")), (200, "length"))
    check("max_tokens 5: at most 20 characters (the estimate: 4 per token)",
          0 < len(content) <= 20, repr(content))
    eq("max_tokens 5: usage.completion_tokens", (j.get("usage") or {}).get("completion_tokens"),
       5)
    code, text = curl_chat(proxy, {"model": "scenario:long:200", "messages": USER,
                                   "stream": True, "max_completion_tokens": 3}, ["-N"])
    ev = H.parse_sse(text.encode())
    check("max_completion_tokens 3 (stream): <= 12 characters, finish length",
          0 < len(ev["content"]) <= 12 and ev["finish"] == ["length"] and ev["done"], ev)
    # response_format: emulated by instruction, checked when not streaming
    r = sdk(proxy, "nonstream", {"model": "scenario:json_fenced", "messages": USER,
                                 "extra": {"response_format": {"type": "json_object"}}})
    if r is None:           # no SDK here: the same request over raw HTTP
        st, body, hd = proxy.chat("scenario:json_fenced", response_format={"type": "json_object"})
        r = {"content": (((jload(body) or {}).get("choices") or [{}])[0].get("message")
                         or {}).get("content")}
    eq("response_format json_object: fences removed, valid JSON",
       jload(r.get("content")), {"name": "Ada", "age": 36})
    rr = last_run_request(fake)
    check("response_format: the instruction reached the prompt",
          "[Output format: answer with exactly one JSON object" in (rr.get("prompt") or ""), rr)
    schema = {"type": "json_schema", "json_schema": {"name": "person", "schema": {
        "type": "object", "properties": {"name": {"type": "string"}},
        "required": ["name", "email"]}}}
    st, body, hd = proxy.chat("scenario:json_fenced", response_format=schema)
    e = (jload(body) or {}).get("error") or {}
    eq("json_schema: a missing required member is a 502 invalid_json_output",
       (st, e.get("code")), (502, "invalid_json_output"))
    check("json_schema: the message names the member", "'email'" in (e.get("message") or ""), e)
    st, body, hd = proxy.chat("scenario:json_prose", response_format={"type": "json_object"})
    e = (jload(body) or {}).get("error") or {}
    eq("json_object: prose is a 502, not bad JSON as success", (st, e.get("code")),
       (502, "invalid_json_output"))
    # refused fields
    for field, val in (("logprobs", True), ("top_logprobs", 3), ("n", 2)):
        st, body, hd = proxy.chat("auto", **{field: val})
        e = (jload(body) or {}).get("error") or {}
        eq("%s: 400 with param" % field, (st, e.get("param")), (400, field))
    # tool_choice named: only that tool reaches Cursor, and the prompt asks for it
    st, body, hd = proxy.chat("scenario:two_execs", tools=[WEATHER, TIME],
                              tool_choice={"type": "function", "function": {"name": "get_time"}})
    rr = last_run_request(fake)
    names = sorted(t.get("name") for t in rr.get("mcp_tools") or [])
    eq("tool_choice named: Cursor is offered that tool only", names, ["cursor-tools-get_time"])
    check("tool_choice named: the instruction is in the prompt",
          "[Instruction: answer by calling the tool get_time.]" in (rr.get("prompt") or ""), rr)
    st, body, hd = proxy.chat("auto", tools=[WEATHER],
                              tool_choice={"type": "function", "function": {"name": "nope"}})
    eq("tool_choice naming an unknown tool: 400", (st, ((jload(body) or {}).get("error") or {})
                                                   .get("param")), (400, "tool_choice"))
    # parallel_tool_calls false: at most one tool call (Cursor sends two execs here)
    st, body, hd = proxy.chat("scenario:two_execs", tools=[WEATHER, TIME],
                              parallel_tool_calls=False)
    calls = (((jload(body) or {}).get("choices") or [{}])[0].get("message") or {}).get(
        "tool_calls") or []
    eq("parallel_tool_calls false: exactly one tool call", [c["function"]["name"] for c in calls],
       ["get_weather"])
    # model: the name asked for; Cursor's id in x-cursor-model
    st, body, hd = proxy.chat("auto")
    eq("response model is the name asked for", (jload(body) or {}).get("model"), "auto")
    eq("x-cursor-model names Cursor's id", hd.get("x-cursor-model"), "default")
    r = sdk(proxy, "nonstream", {"model": "sonnet-4.5", "messages": USER})
    if r is not None:
        eq("openai SDK sees the model it asked for", r.get("model"), "sonnet-4.5")
    # the same emulations through the other dialects
    st, body, hd = proxy.request("POST", "/v1/messages", {
        "model": "scenario:split_end", "max_tokens": 100, "stop_sequences": ["END"],
        "messages": USER})
    j = jload(body) or {}
    eq("Anthropic stop_sequences: cut, stop_reason stop_sequence, the sequence named",
       (st, [c.get("text") for c in j.get("content") or []], j.get("stop_reason"),
        j.get("stop_sequence")), (200, ["Hello "], "stop_sequence", "END"))
    st, body, hd = proxy.request("POST", "/v1/messages", {
        "model": "scenario:long_text", "max_tokens": 4, "messages": USER})
    j = jload(body) or {}
    text = "".join(c.get("text") or "" for c in j.get("content") or [])
    check("Anthropic max_tokens 4: stop_reason max_tokens, <= 16 characters",
          st == 200 and j.get("stop_reason") == "max_tokens" and 0 < len(text) <= 16, j)
    st, body, hd = proxy.request("POST", "/v1/responses", {
        "model": "scenario:long:200", "store": False, "max_output_tokens": 4, "input": "Hi"})
    j = jload(body) or {}
    eq("Responses max_output_tokens: incomplete, reason max_output_tokens",
       (st, j.get("status"), (j.get("incomplete_details") or {}).get("reason")),
       (200, "incomplete", "max_output_tokens"))
    st, body, hd = proxy.request("POST", "/v1/messages", '{"model":"m","max_tokens":5,'
                                 '"max_tokens":6,"messages":[{"role":"user","content":"x"}]}')
    eq("Anthropic duplicate key: 400", st, 400)
    st, body, hd = proxy.request("POST", "/v1/messages/count_tokens", '{"model":"m",'
                                 '"messages":[{"role":"user","content":"x"}],"messages":[]}')
    eq("Anthropic count_tokens duplicate key: 400", st, 400)
    st, body, hd = proxy.request("POST", "/v1/messages/count_tokens", '{"model":"m",'
                                 '"messages":[{"role":"user","content":"A\\ud800B"}]}')
    eq("Anthropic count_tokens lone surrogate: accepted", st, 200)
    st, body, hd = proxy.request("POST", "/v1/responses", '{"model":"auto","store":false,'
                                 '"input":"A\\udc00B"}')
    eq("Responses lone surrogate: accepted", st, 200)
    eq("Responses lone surrogate: U+FFFD in the prompt", last_run_request(fake).get("prompt"),
       "User: A\ufffdB")
    st, body, hd = proxy.request("POST", "/v1/responses", '{"model":"auto","input":"x",'
                                 '"input":"y"}')
    eq("Responses duplicate key: 400 duplicate_key",
       (st, ((jload(body) or {}).get("error") or {}).get("code")), (400, "duplicate_key"))
    # ignored fields are accepted
    st, body, hd = proxy.chat("auto", temperature=0.1, top_p=0.5, seed=3, user="u",
                              metadata={"k": "v"}, presence_penalty=0, frequency_penalty=0)
    eq("temperature/top_p/seed/user/metadata: accepted (ignored)", st, 200)


# ---------------------------------------------------------------------------------------------
# custom (freeform) tools on Chat Completions (issue 31 item 5)

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+\"quoted\" line\n*** End Patch"
CUSTOM_SCENARIOS = {
    "custom_tool": {"steps": [
        {"op": "exec", "kind": "mcp", "id": 1, "exec_id": "exec-ct-1", "tool_name": "apply_patch",
         "args": {"input": PATCH}, "tool_call_id": "toolu_ct1", "hold": True},
        {"op": "await_results", "max_s": 60},
        {"op": "text_from_result", "id": 1, "prefix": "RESULT:"}] + TOOL_IMG_END},
}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "apply_patch",
                                            "description": "Apply a patch to files",
                                            "format": {"type": "text"}}}


def t_custom(fake, proxy):
    model = "scenario:custom_tool"

    def chat(body):
        st, b, hd = proxy.request("POST", "/v1/chat/completions", body, timeout=60)
        return st, b

    k0 = len(runs_of_model(fake, model))
    msgs = [{"role": "user", "content": "add a.txt"}]
    st, b = chat({"model": model, "messages": msgs, "tools": [CUSTOM_TOOL], "stream": True})
    deltas = [tc for ln in b.decode("utf-8", "replace").splitlines()
              if ln.startswith("data: {")
              for ch in json.loads(ln[6:]).get("choices", [])
              for tc in (ch.get("delta") or {}).get("tool_calls") or []]
    eq("streamed: a custom tool is accepted (200, not 400 'must be function')", st, 200)
    ok = (len(deltas) == 1 and deltas[0].get("type") == "custom" and
          deltas[0].get("custom") == {"name": "apply_patch", "input": PATCH} and
          "function" not in deltas[0])
    check("streamed: the call is a delta {type: custom, custom: {name, input: the raw text}}",
          ok, b[:800])
    if deltas:
        call = {"id": deltas[0].get("id"), "type": "custom", "custom": deltas[0].get("custom")}
        st, b = chat({"model": model, "messages": msgs + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "Patched a.txt"}],
            "tools": [CUSTOM_TOOL]})
        j = jload(b) or {}
        content = ((j.get("choices") or [{}])[0].get("message") or {}).get("content")
        eq("the custom call and its result back in the history: Cursor got the result",
           (st, content), (200, "RESULT:Patched a.txt"))
    eq("... the whole loop on ONE Cursor run", len(runs_of_model(fake, model)) - k0, 1)
    # the official openai SDK, non-streamed, its own message sent back as it returned it
    k0 = len(runs_of_model(fake, model))
    r = sdk(proxy, "custom", {"model": model, "prompt": "add a.txt", "result": "Done!"})
    if r is None:
        check("openai npm SDK installed (build/npm)", False, "run tests/e2e_run.sh --install-only")
        return
    tcs = (r.get("first") or {}).get("toolCalls") or []
    check("openai SDK: message.tool_calls[0] is {type: custom, custom: {name, input}}",
          len(tcs) == 1 and tcs[0].get("type") == "custom" and
          tcs[0].get("custom") == {"name": "apply_patch", "input": PATCH} and
          (r.get("first") or {}).get("finish") == "tool_calls", r)
    eq("openai SDK: the result reaches Cursor and the answer comes back, on one run",
       ((r.get("second") or {}).get("content"), len(runs_of_model(fake, model)) - k0),
       ("RESULT:Done!", 1))

# ---------------------------------------------------------------------------------------------

def main():
    if S.binary_missing():
        return 0
    tmp = S.make_tmp()
    token = pb.make_jwt({"sub": "auth0|surface", "exp": int(time.time()) + 7200,
                         "type": "session"})
    fake = proxy = None
    try:
        scen = {"echo_images": {"steps": [
            {"op": "images_text"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]}}
        scen.update(FIELD_SCENARIOS)
        scen.update(TOOL_IMG_SCENARIOS)
        scen.update(CUSTOM_SCENARIOS)
        fake = H.Fake(tmp, scen, token)
        # CURSOR_OAI_USAGE_TTL=0: each GET /v1/usage asks Cursor (the checks change the
        # fake's usage answer between GETs)
        # CURSOR_OAI_TOOL_MODE=cursor: tool-images sends a native read exec with tools present
        # and checks its fallback (in client mode, the default, a run with tools gets none;
        # tests/tools_header_test.py covers MCP results with images in that mode)
        proxy = H.Proxy(tmp, "main", fake.url(), fake.ca, token,
                        extra_env={"CURSOR_OAI_USAGE_TTL": "0", "CURSOR_OAI_TOOL_MODE": "cursor"})
        FAKES[proxy.port] = fake
        only = set(x for x in os.environ.get("SURFACE_ONLY", "").split(",") if x)
        S.sections([("usage", lambda: t_usage(fake, proxy)),
                    ("usage-key", lambda: t_usage_key(tmp, fake, token)),
                    ("images", lambda: t_images(tmp, fake, proxy, token)),
                    ("tool-images", lambda: t_tool_images(fake, proxy)),
                    ("strict", lambda: t_strict(proxy)),
                    ("fields", lambda: t_fields(fake, proxy)),
                    ("custom", lambda: t_custom(fake, proxy))], only, timed=False)
    finally:
        if proxy:
            proxy.stop()
        if fake:
            fake.stop()
        code = S.finish()
    return code


if __name__ == "__main__":
    sys.exit(main())
