#!/usr/bin/python3
"""header_test.py - cursor_oai.h describes itself truly: the table of PARTs at its top lists
every part tagged in it (each "PART:NAME api" / "PART:NAME impl" section, with its "end"), in
the order of the API half, and the implementation order it states is the real one; the
manual (the header's opening comment) cites only the README or the header itself.

The manual's toy fifth dialect ("Adding a dialect") is spliced into a copy of the header at
its ADD-DIALECT marks, compiled (C99, -Wall -Wextra -pedantic -Werror) and run: a request
goes through its row (parser, writer, the table's accessors).

Reads files and runs gcc (no proxy binary, no network). Run from anywhere; prints RESULT p f last."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import harness as H  # noqa: E402

T = H.Suite("header", section=None, below=True)
check, eq = T.check, T.eq


def manual(src):
    """The opening comment: from the first line to the first line that is ' */'."""
    m = re.match(r"/\*.*?\n \*/\n", src, re.S)
    return m.group(0) if m else ""


def table(man):
    """(names in the table's order, the stated implementation order)."""
    m = re.search(r"\n \* PARTS \([^)]*\)\n((?: \*   .*\n)+)", man)
    if not m:
        return [], []
    names = []
    rest = m.group(1)
    for line in rest.splitlines():
        t = re.match(r" \*   ([A-Z][A-Z0-9]+)\s{2,}\S", line)
        if t:
            names.append(t.group(1))
    im = re.search(r"The implementation half has them in this order:(.*?)\.\n", rest, re.S)
    impl = re.findall(r"[A-Z][A-Z0-9]+", im.group(1).replace(" *", " ")) if im else []
    return names, impl


def sections(src, half):
    """[(name, start line, end line or None)] of the "PART:NAME half" sections in order."""
    out = []
    for i, line in enumerate(src.splitlines(), 1):
        m = re.match(r"/\* PART:([A-Z][A-Z0-9]+) %s(?: |\*/|\()" % half, line)
        if m and " %s end " % half not in line:
            out.append([m.group(1), i, None])
        e = re.match(r"/\* PART:([A-Z][A-Z0-9]+) %s end \*/" % half, line)
        if e:
            for s in reversed(out):
                if s[0] == e.group(1) and s[2] is None:
                    s[2] = i
                    break
            else:
                out.append([e.group(1), None, i])
    return out


TOY_MAIN = r"""
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <stdio.h>
static int fails;
static int no_send(void *user, const unsigned char *data, size_t n)
{
    (void)user; (void)data; (void)n;
    return 0;
}
#define CHECK(what, cond) do { if (cond) printf("ok   %s\n", what); \
                               else { printf("FAIL %s\n", what); fails++; } } while (0)
int main(void)
{
    static const char body[] = "{\"model\":\"m1\",\"prompt\":\"hello\"}";
    const coai_dialect_info *di = coai_dialect_get(COAI_DIALECT_PLAIN);
    coai_request req;
    coai_error err;
    coai_reply_opts o;
    coai_reply r;
    coai_msg m;
    coai_buf eb = { 0 };
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK("toy: the table has its row", di && strcmp(di->name, "plain") == 0
          && strcmp(di->id_prefix, "txt-") == 0 && di->id_hex == 24);
    CHECK("toy: the dialects after it are not", coai_dialect_get(COAI_DIALECT_COUNT_) == NULL);
    memset(&err, 0, sizeof err);
    CHECK("toy: its parser takes the body",
          coai_request_parse(&req, COAI_DIALECT_PLAIN, body, sizeof body - 1, &err) == 0);
    CHECK("toy: the neutral request", req.dialect == COAI_DIALECT_PLAIN
          && req.message_count == 1 && req.model.len == 2 && memcmp(req.model.ptr, "m1", 2) == 0
          && strstr((const char *)req.prompt.data, "hello") != NULL);
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &req);
    o.completion_id = coai_str_c("txt-0");
    o.send = no_send;
    o.model = req.model;
    if (coai_reply_init(&r, &o) != 0) {
        printf("FAIL toy: a reply to it starts\nRESULT 0 1\n");
        return 1;
    }
    CHECK("toy: a reply to it starts", 1);
    memset(&m, 0, sizeof m);
    m.kind = COAI_MSG_TEXT;
    m.text = coai_str_c("hi there");
    coai_reply_feed_msg(&r, &m);
    m.kind = COAI_MSG_TURN_ENDED;
    m.text = coai_str_c("");
    coai_reply_feed_msg(&r, &m);
    CHECK("toy: its writer answers", r.out.len == 9 && memcmp(r.out.data, "hi there\n", 9) == 0);
    coai_reply_free(&r);
    coai_request_free(&req);
    CHECK("toy: a body without a prompt is a 400 naming the parameter",
          coai_request_parse(&req, COAI_DIALECT_PLAIN, "{}", 2, &err) == COAI_ERR_INVALID
          && err.status == 400 && err.param && strcmp(err.param, "prompt") == 0);
    coai_request_free(&req);
    coai_error_write_as(&eb, &err, COAI_DIALECT_PLAIN);
    CHECK("toy: errors in OpenAI's shape when the row names none",
          eb.len && strstr((const char *)eb.data, "\"error\":{\"message\"") != NULL);
    coai_buf_free(&eb);
    printf("RESULT %d %d\n", 8 - fails, fails);
    return fails != 0;
}
"""


def toy_dialect(src):
    """The manual's example blocks: {"enum": text, "row": text, "part": text}."""
    man = manual(src)
    out = {}
    for name, nxt in (("enum", "row"), ("row", "part"), ("part", "end")):
        m = re.search(r"\n \*   \[ADD-DIALECT %s\]\n(.*?)\n \*   \[ADD-DIALECT %s\]"
                      % (name, nxt), man, re.S)
        if m:
            out[name] = "\n".join(ln[3:] if ln.startswith(" * ") else ln[2:]
                                  for ln in m.group(1).splitlines()) + "\n"
    return out


def t_toy_dialect(src):
    """Splice the toy dialect in at the marks, compile, run."""
    blocks = toy_dialect(src)
    check("the manual's 'Adding a dialect' has the toy dialect's enum, row and part",
          sorted(blocks) == ["enum", "part", "row"], sorted(blocks))
    marks = {"enum": "    /* ADD-DIALECT: enum */\n", "row": "    /* ADD-DIALECT: row */\n",
             "part": "/* ADD-DIALECT: part */\n"}
    for k, mark in marks.items():
        check("the header has its ADD-DIALECT %s mark once" % k, src.count(mark) == 1,
              src.count(mark))
    if sorted(blocks) != ["enum", "part", "row"] or any(src.count(v) != 1 for v in marks.values()):
        return
    spliced = src
    for k, mark in marks.items():
        spliced = spliced.replace(mark, mark + blocks[k])
    deps = os.environ.get("COAI_DEPS_DIR") or os.path.join(H.ROOT, "build", "deps")
    np_, cj = os.path.join(deps, "nanopb-0.4.9.1"), os.path.join(deps, "cjson-1.7.19")
    br = os.path.join(deps, "bearssl-0.6+dfsg.1")
    cc = shutil.which("gcc") or shutil.which("cc")
    check("gcc and the dependencies are there (COAI_DEPS_DIR)", cc and os.path.isdir(np_)
          and os.path.isdir(cj) and os.path.isdir(br), (cc, deps))
    if not (cc and os.path.isdir(np_) and os.path.isdir(cj) and os.path.isdir(br)):
        return
    defs = ["-DPB_ENABLE_MALLOC", "-DPB_FIELD_32BIT", "-DCJSON_NESTING_LIMIT=64"]
    inc = ["-I" + os.path.join(H.ROOT, "proto"), "-I" + np_, "-I" + cj,
           "-I" + os.path.join(br, "inc")]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "cursor_oai.h"), "w", encoding="utf-8") as f:
            f.write(spliced)
        with open(os.path.join(tmp, "toy.c"), "w", encoding="utf-8") as f:
            f.write(TOY_MAIN)
        c = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-O0"]
                           + defs + ["-I" + tmp] + inc + ["-c", os.path.join(tmp, "toy.c"),
                                                        "-o", os.path.join(tmp, "toy.o")],
                           capture_output=True, text=True, timeout=300)
        check("the header with the toy dialect compiles (C99, pedantic, -Werror)",
              c.returncode == 0, c.stderr[-3000:])
        if c.returncode:
            return
        libs = [os.path.join(np_, f) for f in ("pb_common.c", "pb_encode.c", "pb_decode.c")]
        libs += [os.path.join(cj, "cJSON.c")]
        libs += [os.path.join(H.ROOT, "proto", f) for f in (
            "agent.pb.c", "aiserver.pb.c", "google/rpc/status.pb.c",
            "google/protobuf/struct.pb.c", "google/protobuf/any.pb.c")]
        bearssl = [a for a in (os.path.join(deps, "bearssl-0.6+dfsg.1-gcc", "build",
                                            "libbearssl.a"),
                               os.path.join(br, "build", "libbearssl.a")) if os.path.exists(a)]
        l = subprocess.run([cc, "-std=c99", "-O0", "-w"] + defs + inc
                           + [os.path.join(tmp, "toy.o")] + libs + bearssl[:1]
                           + ["-lm", "-lpthread", "-o", os.path.join(tmp, "toy")],
                           capture_output=True, text=True, timeout=300)
        check("the toy dialect's program links", l.returncode == 0, l.stderr[-3000:])
        if l.returncode:
            return
        r = subprocess.run([os.path.join(tmp, "toy")], capture_output=True, text=True,
                           timeout=60)
        for line in r.stdout.splitlines():
            if line.startswith("ok   ") or line.startswith("FAIL "):
                check(line[5:], line.startswith("ok"), r.stdout[-2000:])
        check("the toy dialect's program ran to its end", r.returncode == 0
              and "RESULT 8 0" in r.stdout, (r.returncode, r.stdout[-500:], r.stderr[-500:]))


def main():
    with open(os.path.join(H.ROOT, "cursor_oai.h"), encoding="utf-8") as f:
        src = f.read()
    man = manual(src)
    check("the header opens with its manual comment", len(man) > 1000, len(man))
    names, impl_order = table(man)
    check("the manual has a PARTS table", len(names) >= 10, names)
    check("the table names each part once", len(names) == len(set(names)), names)

    api = sections(src, "api")
    impl = sections(src, "impl")
    for half, secs in (("api", api), ("impl", impl)):
        bad = [s for s in secs if s[1] is None or s[2] is None or s[2] < s[1]]
        check("every PART:NAME %s section has its start and its end" % half, not bad, bad)
        check("the %s sections do not overlap" % half,
              all(a[2] is not None and b[1] is not None and a[2] < b[1]
                  for a, b in zip(secs, secs[1:])), secs)
    tagged = set(s[0] for s in api + impl)
    # any other mention of an unknown part, e.g. "(PART:FOO)" in prose
    mentioned = set(re.findall(r"PART:([A-Z][A-Z0-9]+)", src)) - {"NAME"}
    check("every tagged part is in the table", not (tagged - set(names)),
          sorted(tagged - set(names)))
    check("every part the header mentions (PART:NAME) is in the table",
          not (mentioned - set(names)), sorted(mentioned - set(names)))
    check("every part in the table is tagged in the header", not (set(names) - tagged),
          sorted(set(names) - tagged))
    eq("the API half's parts are in the table's order",
       [s[0] for s in api], [n for n in names if n in set(s[0] for s in api)])
    eq("the implementation order the table states is the real one",
       impl_order, [s[0] for s in impl])
    untagged = []
    # a boxed section title (a line of '=' above and below it) that is no PART tag
    lines = src.splitlines()
    for i in range(1, len(lines) - 1):
        if lines[i - 1].startswith("/* ====") and lines[i + 1].startswith("/* ====") \
                and "PART:" not in lines[i]:
            untagged.append((i + 1, lines[i].strip()))
    check("no boxed section of the header is untagged", not untagged, untagged)

    # The manual cites the README or the header itself, never a file that is not there.
    cited = sorted(set(re.findall(r"[\w./-]+\.md\b", man)) - {"README.md"})
    check("the manual cites no .md file but the README", not cited, cited)
    cited = sorted(set(re.findall(r"[\w./-]+\.md\b", src)) - {"README.md"})
    check("nowhere does the header cite a .md file but the README", not cited, cited)
    check("the manual cites no spec or notes section (spec §, notes §)",
          not re.search(r"\b(spec|notes)\b[^\n]{0,20}§|§\s*\d", man),
          re.findall(r".{0,30}§.{0,10}", man))
    check("nowhere does the header cite a spec or notes section (spec §, notes §)",
          not re.search(r"\b(spec|notes)\b[^\n]{0,20}§|§\s*\d", src),
          re.findall(r".{0,30}§.{0,10}", src)[:5])
    cited = re.findall(r".{0,30}\b(?:notes [A-Z]\d|notes 20\d\d|late-autumn notes|notes:)"
                       r".{0,10}", src)
    check("nowhere does the header cite the notes (not in the repository)", not cited, cited[:5])
    paths = set(re.findall(r"\b((?:tests|examples|proto)/[\w./*{}-]+)", man))
    missing = sorted(p for p in paths
                     if "*" not in p and "{" not in p and "<" not in p
                     and not os.path.exists(os.path.join(H.ROOT, p.rstrip(".,;:)"))))
    check("every repository path the manual names exists", not missing, missing)
    t_toy_dialect(src)
    return T.result()


if __name__ == "__main__":
    sys.exit(main())
