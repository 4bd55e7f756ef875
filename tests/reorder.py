#!/usr/bin/env python3
"""reorder.py - put server.c's sections in the order of its MAP (a request's journey).

Usage:  python3 tests/reorder.py [IN] [OUT] [--build]
        IN defaults to server.c, OUT to IN (rewritten in place). --build also compiles OUT with
        gcc, clang and musl-gcc (-std=c99 -O2 -Wall -Wextra -Werror, as build.sh step 5b), each
        compiler that is installed; COAI_DEPS_DIR names the dependencies (default build/deps).

What it does, on any version of server.c (it finds things by name, never by line number):
  1. splits the file at its banner comments (three lines: ====, the title, ====) into
     sections, and each section into top-level items (a function, a struct, a #define, a
     variable, each with the comment and blank lines before it);
  2. builds the new sections of NEW_ORDER from the old ones (by title prefix; two old sections
     may merge into one), in order; an item keeps its old section and its place among the
     items around it, except the items MOVES names, which go to another section (before a
     named item, or to its end under a sub-heading); an item this script does not know stays
     where it was; an old section NEW_ORDER does not name is an error;
  3. drops the old stand-alone prototypes (a prototype without a comment of its own) and
     writes one generated Declarations section after State: `struct tag;` for the tags named
     above their definition, the types, macros and enums used above their own place (moved
     there whole with the block they stand in, in their old order; a struct also when gcc
     -fsyntax-only finds it incomplete where a member is reached), a prototype for every
     function used above its definition (its head, verbatim up to the body), then the
     variables used above their place (their initialisers may name functions);
  4. writes the MAP comment from NEW_ORDER;
  5. checks, and fails loudly (exit 1) when a check does not hold:
     - every section and every item MOVES names is found (and found once);
     - every item of the old file is in the new one, once: sorted(old lines) and
       sorted(new lines) differ only by generated lines (banners, the map, prototypes and
       `struct tag;` lines, the Declarations section's own comment) and by removed
       stand-alone prototypes;
     - nothing is used above its declaration, by the same analysis run on the result
       (a function above its definition has a prototype; a type, macro, variable is above
       every use), and gcc -fsyntax-only accepts it (so gcc and the dependencies are needed);
     - a second run on the result changes nothing;
     - with --build: the result compiles warning-free under each compiler.
REORDER_DEBUG=1 prints each round of the analysis and keeps the last candidate in
/tmp/reorder_debug.c. A run takes about a minute (a few gcc -fsyntax-only passes).
"""
import os
import re
import subprocess
import sys

BAN = "/* " + "=" * 72 + " */"

# The sections in their new order: (title, [old titles (prefixes) merged into it, in order],
# the map line). The map is written from this table, so it always says what the file does.
NEW_ORDER = [
    ("Limits and defaults", ["Limits and defaults"], None),
    ("State", ["State"], None),
    ("Declarations", [], None),
    ("Time, randomness, small helpers", ["Time, randomness, small helpers"], None),
    ("Listener", ["Listener"],
     "accept, the connection slots, 503 when full, shutdown"),
    ("Client sockets", ["Client sockets"],
     "send what it takes (fd_send_some), write all, read until: the client socket's loops"),
    ("Client connections: requests", ["Client connections: requests"],
     "read the head and body, route (serve_request), access log"),
    ("Models", ["Models"],
     "GET /v1/models; the host and transport facts a run needs (GetServerConfig)"),
    ("Usage", ["Usage"],
     "GET /usage: the plan and current-period usage (unary calls to Cursor)"),
    ("Status page", ["Status page"],
     "GET /, /status.json, /status.js, /status.css"),
    ("Chat requests", ["Chat requests"],
     "POST /v1/chat/completions, /v1/messages, /v1/responses, Gemini's generateContent:\n"
     "handle_chat, whose steps are listed there in order (parse and model, a held run to\n"
     "continue, a checkpoint to resume, the run request, the run and its fallbacks, the\n"
     "answer)"),
    ("Run engine", ["Run engine"],
     "struct run and its parts (in, up, fb, out, hb, held), and what runs it: run_flush,\n"
     "heartbeats, the watchdog; the transport seam tr_open / tr_send / tr_body / tr_close,\n"
     "the only way the engine reaches Cursor (tr_pick picks HTTP/2 or HTTP/1.1; a failure\n"
     "before the first byte falls back to HTTP/1.1: tr_fall_back); run_stream / run_frame:\n"
     "Cursor's messages -> coai_reply (the dialect's writer); over a shared HTTP/2\n"
     "connection its I/O thread writes text deltas itself (run_il_consume)"),
    ("Held runs", ["Held runs (issue 11)", "Held runs: the end of a response"],
     "a response with tool calls parks its run (run_finish, held_park, held_thread); the\n"
     "request with the results takes it over (held_claim, held_continue) or falls back"),
    ("Conversation memory", ["Conversation memory"],
     "Cursor's checkpoint per conversation (mem_store), resumed by the next turn (mem_find,\n"
     "chat_memory)"),
    ("Client connections: responses", ["Client connections: responses"],
     "send_response, stream_begin / stream_write: the bytes run_flush hands over go to the\n"
     "client"),
    ("Upstream TLS connections", ["Upstream TLS connections"],
     "HTTP/1.1: BearSSL sockets, the pool, spares, unary calls; the run's HTTP/1.1\n"
     "transport (run_start: RunSSE, run_append: BidiAppend)"),
    ("Trust anchors", ["Trust anchors"],
     "the CA bundle both transports verify Cursor with"),
    ("HTTP/2 connections", ["HTTP/2 connections"],
     "one multiplexed connection per host, its I/O thread, its streams (a parked reader's\n"
     "DATA to its consumer: h2s_body_il, h2c_il_run); TLS records leave the lock to be\n"
     "sent (h2c_flush_locked -> hc->wq -> h2c_send); the run's HTTP/2 transport\n"
     "(h2_run_start, h2_run_send: one Run stream)"),
    ("Credentials", ["Credentials: in-memory state", "Credentials: files"],
     "the token: memory, files, renewal (every upstream call)"),
    ("Metrics", ["Metrics"],
     "GET /metrics (Prometheus text)"),
    ("What Cursor sent that this version does not know", ["What Cursor sent"],
     "unknown fields and messages counted, the wire capture"),
    ("Logging", ["Logging"],
     "the log writer"),
    ("Configuration and command line", ["Configuration and command line"],
     "serve's settings"),
    ("Commands", ["Commands"],
     "login, logout, status, models, usage, doctor; main"),
]

# Items that leave their section: (item name, the new section it goes to, where). where is
# "before:NAME" (right before that item) or a sub-heading: then they go to the end of that
# section, under it. Moved items keep their old order. Each transport's run code goes beside
# its connection code.
H1_RUN = "/* ---- the run over HTTP/1.1: RunSSE + BidiAppend (TR_HTTP1) ---- */"
H2_RUN = "/* ---- the run over HTTP/2: one Run stream (TR_H2) ---- */"
MOVES = [
    # the parts of held runs and of conversation memory that sat in the run engine
    ("HELD_PARK_WAIT_MS", "Held runs", "before:held_park"),
    ("HELD_RUNS_CAP", "Held runs", "before:held_park"),
    ("held_live_add", "Held runs", "before:held_park"),
    ("held_live_del", "Held runs", "before:held_park"),
    ("held_live_unparked_locked", "Held runs", "before:held_park"),
    ("mem_entry", "Conversation memory", "before:mem_entry_free"),
    ("run_append", "Upstream TLS connections", H1_RUN),
    ("run_head_names", "Upstream TLS connections", H1_RUN),
    ("run_head_note_h1", "Upstream TLS connections", H1_RUN),
    ("run_start", "Upstream TLS connections", H1_RUN),
    ("up_readable", "Upstream TLS connections", H1_RUN),
    ("h2_run_send", "HTTP/2 connections", H2_RUN),
    ("h2_run_start", "HTTP/2 connections", H2_RUN),
]

DECL_TITLE = "Declarations"
DECL_SUB = "types used above their section, prototypes (generated)"
MERGED_TITLE = {
    "Held runs": "Held runs (issue 11): one upstream run for a whole tool loop",
    "Credentials": "Credentials: the token in memory, files, reloading, renewal",
}
DECL_NOTE = [
    "/* Generated by tests/reorder.py (run it again after adding a function or moving one): the struct",
    " * tags, then the types, macros and variables used above their own section, then a prototype",
    " * for each function used above its definition. The sections below are in the order of the",
    " * MAP at the top; this is what lets them be. */",
]
MAP_FIRST = " * MAP, in the order a request travels (each name is a section heading below: search for it)"
MAP_INTRO = [
    MAP_FIRST,
    " *",
]


def die(msg):
    sys.stderr.write("reorder.py: FAILED: " + msg + "\n")
    if os.environ.get("REORDER_DEBUG"):
        import traceback; traceback.print_stack()
    sys.exit(1)


# ---- lexing: code with comments and strings blanked, line for line ----

def blank_code(text, open_lines=None):
    """text with comments replaced by spaces and string/char literals by "" / '' (newlines
    kept), so that offsets of lines are the same. open_lines (a set) gets the numbers of the
    lines whose end is inside a comment."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            e = text.find("*/", i + 2)
            if e < 0:
                die("unterminated comment")
            seg = text[i:e + 2]
            if open_lines is not None and "\n" in seg:
                l0 = text.count("\n", 0, i)
                open_lines.update(range(l0, l0 + seg.count("\n")))
            out.append(re.sub(r"[^\n]", " ", seg))
            i = e + 2
        elif text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e < 0 else e
            out.append(" " * (e - i))
            i = e
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            seg = text[i:j + 1]
            out.append(c + re.sub(r"[^\n]", " ", seg[1:-1]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_items(lines):
    """Top-level items of a list of lines: [(first, end)], end exclusive. An item is the
    comment/blank lines before it plus its code, up to the line where it ends (a ';' or a
    function body's '}' at depth 0, or a preprocessor line). #if ... #endif at the top
    level is one item."""
    open_lines = set()
    code = blank_code("\n".join(lines), open_lines).split("\n")
    items = []
    start = 0
    depth = 0
    pp = 0            # open #if's
    has_code = False
    cont = False      # preprocessor continuation line
    text_so_far = []
    for k, ln in enumerate(code):
        s = ln.strip()
        if cont or (depth == 0 and s.startswith("#")):
            cont = ln.rstrip().endswith("\\")
            if re.match(r"#\s*if", s):
                pp += 1
            elif re.match(r"#\s*endif", s):
                pp -= 1
            has_code = True
            if not cont and pp == 0 and depth == 0 and k not in open_lines:
                items.append((start, k + 1))
                start, has_code, text_so_far = k + 1, False, []
            continue
        for ch in ln:
            if ch in "({":
                depth += 1
            elif ch in ")}":
                depth -= 1
        if s:
            has_code = True
            text_so_far.append(ln)
        if depth == 0 and has_code and pp == 0 and k not in open_lines:
            t = s.rstrip()
            if t.endswith(";") or (t.endswith("}") and is_function("\n".join(text_so_far))):
                items.append((start, k + 1))
                start, has_code, text_so_far = k + 1, False, []
    if depth != 0 or pp != 0:
        die("unbalanced braces or #if in a section")
    if start < len(lines):
        items.append((start, len(lines)))    # trailing comments/blank lines
    return items


def top_level(code):
    """code with everything inside (), {}, [] removed (the brackets kept)."""
    out, d = [], 0
    for ch in code:
        if ch in "([{":
            if d == 0:
                out.append(ch)
            d += 1
        elif ch in ")]}":
            d -= 1
            if d == 0:
                out.append(ch)
        elif d == 0:
            out.append(ch)
    return "".join(out)


def is_function(code):
    t = " ".join(top_level(code).split())
    return bool(re.search(r"\w\s*\(\)\s*\{\}$", t)) and "=" not in t


class Item:
    def __init__(self, lines, section):
        self.lines = lines
        self.section = section
        self.code = blank_code("\n".join(lines))
        t = " ".join(top_level(self.code).split())
        self.kind, self.names = "none", []
        s = self.code.strip()
        if not s:
            self.kind = "blank"
        elif s.startswith("#"):
            m = re.match(r"#\s*define\s+(\w+)", s)
            self.kind = "macro" if m and "\n" not in s.strip() or m else "pp"
            self.names = [m.group(1)] if m else []
        elif is_function(self.code):
            self.kind = "fn"
            self.names = [re.search(r"(\w+)\s*\(\)\s*\{\}$", t).group(1)]
        elif re.search(r"^(static )?[\w\s\*]*\b(\w+)\s*\(\)\s*;$", t) and "=" not in t:
            self.kind = "proto"
            self.names = [re.search(r"(\w+)\s*\(\)\s*;$", t).group(1)]
        elif re.match(r"^(struct|enum|union)\s*\w*\s*\{\}\s*;$", t) or re.match(
                r"^(struct|union)\s+\w+\s*;$", t):
            self.kind = "type"
            m = re.match(r"^(?:struct|enum|union)\s+(\w+)", t)
            self.names = [m.group(1)] if m else []
            if t.startswith("enum"):
                body = s[s.index("{") + 1:s.rindex("}")]
                body = re.sub(r"\([^()]*\)", "", body)
                self.names += re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)", re.sub(r"=[^,]*", "", body))
            if re.match(r"^(struct|union)\s+\w+\s*;$", t):
                self.kind = "tagdecl"
        else:
            self.kind = "var"
            lhs = t.split("=")[0]
            fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", s.split("=")[0])
            if fp:
                self.names = [fp.group(1)]
            else:
                self.names = re.findall(r"(\w+)\s*(?:\[\])*\s*(?:[,;]|$)", lhs.rstrip(";").strip())
            m = re.match(r"^(?:static\s+)?(?:const\s+)?(?:struct|union|enum)\s+(\w+)\s*\{", s)
            if m:
                self.names.append(m.group(1))
            if re.match(r"^(?:static\s+)?(?:const\s+)?enum\s*\w*\s*\{", s):
                body = s[s.index("{") + 1:s.index("}")]
                self.names += re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)", re.sub(r"=[^,]*", "", body))
        self.uses = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"\b(struct|union)\s+\w+", " ", self.code)))
        self.tags = set(re.findall(r"\b(?:struct|union)\s+(\w+)", self.code))
        self.tagdefs = set(re.findall(r"\b(?:struct|union)\s+(\w+)\s*\{", self.code))

    def proto_text(self):
        """The head of a function definition, verbatim, as a prototype."""
        body = self.code.index("{", self.code.index(self.names[0]))
        # the head starts at the first code line of the item
        code_lines = self.code[:body].split("\n")
        first = next(i for i, ln in enumerate(code_lines) if ln.strip())
        head = "\n".join(self.lines[first:len(code_lines)])
        head = head[:len("\n".join(code_lines[first:]))] if False else head
        # cut at the body's '{' (on its own line for function bodies)
        hl = head.split("\n")
        hl[-1] = hl[-1][:len(code_lines[-1])].rstrip()
        while hl and not hl[-1].strip():
            hl.pop()
        return [ln.rstrip() for ln in hl[:-1]] + [hl[-1].rstrip() + ";"]


# ---- the file ----

def parse_file(text):
    L = text.split("\n")
    idx = [i for i in range(len(L) - 2) if L[i] == BAN and L[i + 2] == BAN and L[i + 1].startswith("/* ")]
    if not idx:
        die("no banner sections found")
    head = L[:idx[0]]
    secs = []
    for k, i in enumerate(idx):
        end = idx[k + 1] if k + 1 < len(idx) else len(L)
        title = L[i + 1][3:-2].strip()
        body = L[i + 3:end]
        secs.append((title, [Item(body[a:b], title) for a, b in split_items(body)]))
    return head, secs


def banner(title):
    if len(title) > 72:
        die("banner title too long: " + title)
    return [BAN, "/* " + title.ljust(72) + " */", BAN]


def new_map():
    import textwrap
    first = [t for t, _, d in NEW_ORDER if d is None]
    out = list(MAP_INTRO)
    out += [" *   " + ln for ln in textwrap.wrap(
        "First what all of it uses: " + ", ".join(first) + ". Then:", 95)]
    out.append(" *")
    for title, _, desc in NEW_ORDER:
        if desc is None:
            continue
        dl = textwrap.wrap(" ".join(desc.split()), 100 - 5 - 31)
        if len(title) <= 30:
            out.append(" *   " + title.ljust(31) + dl[0])
            out += [" *   " + " " * 31 + d for d in dl[1:]]
        else:
            out.append(" *   " + title)
            out += [" *   " + " " * 31 + d for d in dl]
    return out


def replace_map(head):
    try:
        a = head.index(MAP_FIRST)
    except ValueError:
        die("the MAP comment's first line is not in the file's opening comment")
    b = a + 1
    while b < len(head) and not head[b].startswith(" */"):
        b += 1
    if b == len(head):
        die("the MAP comment does not end")
    return head[:a] + new_map() + head[b:], head[a:b]


def collect(secs):
    """name -> [items] over all sections (functions and the rest)."""
    d = {}
    for _, its in secs:
        for it in its:
            for nm in it.names:
                d.setdefault(nm, []).append(it)
    return d


def assemble(head, old):
    """The new sections: [key, items, banner title]."""
    new = []
    byentry = dict((key, []) for key, _, _ in NEW_ORDER)
    for k, (t, its) in enumerate(old):
        hits = [key for key, sources, _ in NEW_ORDER
                if t.startswith(key) or any(t.startswith(src) for src in sources)]
        if len(hits) != 1:
            die("old section %r matches %d entries of NEW_ORDER (want 1): %s" % (t, len(hits), hits))
        byentry[hits[0]].append((k, t, its))
    for key, sources, _ in NEW_ORDER:
        got = byentry[key]
        def rank(x):
            m = [i for i, src in enumerate(sources) if x[1].startswith(src)]
            return (m[0] if m else len(sources), x[0])
        got.sort(key=rank)
        if key == DECL_TITLE:
            # a second run: what was hoisted stays; the generated lines are made again
            its = [it for _, _, sec in got for it in sec if it.kind in ("type", "var", "macro")]
            new.append([key, its, key + ": " + DECL_SUB])
            continue
        if not got:
            die("no section %r in the file (NEW_ORDER expects it)" % key)
        if len(sources) > 1 and not got[0][1].startswith(key) and len(got) != len(sources):
            die("section %r: found %s, expected one of each of %s"
                % (key, [x[1] for x in got], sources))
        title = MERGED_TITLE.get(key) or (got[0][1] if len(got) == 1 else None)
        if title is None:
            die("section %r: %d old sections and no merged title" % (key, len(got)))
        new.append([key, [it for _, _, sec in got for it in sec], title])
    # the moves
    fns = {}
    for key, its, _ in new:
        for it in its:
            if it.kind in ("fn", "var", "type", "macro"):
                for nm in it.names:
                    fns.setdefault(nm, []).append((it, key))
    keys = [k for k, _, _ in new]
    moved = []
    for name, dest, sub in MOVES:
        f = fns.get(name, [])
        if len(f) != 1:
            die("MOVES: %r is defined %d times (want once)" % (name, len(f)))
        if dest not in keys:
            die("MOVES: no section %r" % dest)
        if f[0][1] != dest:        # (already there: a second run)
            moved.append((f[0][0], dest, sub))
    ids = set(id(m[0]) for m in moved)
    for sec in new:
        sec[1] = [it for it in sec[1] if id(it) not in ids]
    bykey = dict((s[0], s) for s in new)
    for it, dest, sub in moved:
        lst = bykey[dest][1]
        if sub.startswith("before:"):
            at = [k for k, x in enumerate(lst) if sub[7:] in x.names and x.kind != "proto"]
            if len(at) != 1:
                die("MOVES: %r not found once in section %r" % (sub[7:], dest))
            lst.insert(at[0], it)
            continue
        # keep trailing blank lines of the section at its end
        tail = []
        while lst and lst[-1].kind == "blank":
            tail.insert(0, lst.pop())
        if sub and not any(sub in x.lines for x in lst):
            lst.append(Item(["", sub], dest))
        lst.append(it)
        lst += tail
    return new


def declared_before(order_items):
    """The analysis: for each item, which names (functions, types, macros, variables) it
    uses that are defined by a later item."""
    where = {}
    for pos, it in enumerate(order_items):
        if it.kind in ("fn", "var", "type", "macro"):
            for nm in it.names:
                where.setdefault(nm, pos)
    late = []
    for pos, it in enumerate(order_items):
        for nm in it.uses:
            p = where.get(nm)
            if p is not None and p > pos and not (it.kind == "fn" and nm == it.names[0]):
                late.append((nm, pos, p))
    return where, late


def late_uses(out):
    """The analysis on a whole file: [(name, kind of its definition, item using it)] for each
    name used above the item that defines it, where no prototype above covers it. A struct
    or union tag does not count (`struct tag;` declares every tag first); whether a struct is
    complete where a member is reached is the compiler's to say (compile_incomplete)."""
    _, secs = parse_file("\n".join(out))
    order = [it for _, its in secs for it in its]
    where, declared = {}, set()
    for pos, it in enumerate(order):
        if it.kind in ("fn", "var", "type", "macro"):
            for nm in it.names:
                where.setdefault(nm, pos)
    late = []
    for pos, it in enumerate(order):
        if it.kind == "proto":
            declared.add(it.names[0])
        for nm in it.uses:
            p = where.get(nm)
            if p is None or p <= pos or nm in declared or nm in order[p].tagdefs:
                continue
            if it.kind == "fn" and nm == it.names[0]:
                continue
            late.append((nm, order[p], it))
    return late


def compile_incomplete(lines):
    """Struct tags the compiler finds incomplete where they are used (gcc -fsyntax-only)."""
    import tempfile
    d = tempfile.mkdtemp()
    path = os.path.join(d, "server.c")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    cmd = ["gcc", "-std=c99", "-fsyntax-only", "-fmax-errors=0"] + cc_includes() + [path]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
    except OSError:
        die("gcc is needed to find the structs that must be complete early")
    finally:
        pass
    if os.environ.get("REORDER_DEBUG"):
        with open("/tmp/reorder_debug.c", "w") as f:
            f.write("\n".join(lines))
    tags = set()
    for ln in r.stdout.split("\n"):
        if "error" in ln and ("incomplete" in ln or "undefined type" in ln
                              or "isn't known" in ln or "unknown size" in ln):
            found = re.findall(r"(?:struct|union)\s+(\w+)", ln)
            m = re.match(r".*?:(\d+):\d+: error", ln)
            if not found and m:       # "field 'x' has incomplete type": the line says which
                found = re.findall(r"(?:struct|union)\s+(\w+)", lines[int(m.group(1)) - 1])
            tags.update(found)
    os.unlink(path)
    os.rmdir(d)
    return tags, r.returncode, r.stdout


def build(text):
    head, old = parse_file(text)
    head, old_map = replace_map(head)
    new = assemble(head, old)
    # old stand-alone prototypes without a comment of their own go (made again below)
    removed = []
    for sec in new:
        keep = []
        for it in sec[1]:
            if it.kind == "proto" and "/*" not in "\n".join(it.lines):
                removed += [ln for ln in it.lines if ln.strip()]
                pre = [ln for ln in it.lines if not ln.strip()]
                if pre:
                    keep.append(Item(pre, sec[0]))
                continue
            keep.append(it)
        sec[1] = keep
    rank, n = {}, 0
    for _, its in old:
        for it in its:
            rank[id(it)] = n
            n += 1
    tagdecl = []
    di = [t for t, _, _ in NEW_ORDER].index(DECL_TITLE)
    hoisted, protos_of = list(new[di][1]), {}   # items in Declarations; function -> its item
    new[di][1] = []

    def render():
        hoisted.sort(key=lambda it: rank.get(id(it), -1))
        early = [it for it in hoisted if it.kind != "var"]
        late_vars = [it for it in hoisted if it.kind == "var"]
        protos = []
        fn_order = []
        for _, its, _ in new:
            fn_order += [it for it in its if it.kind == "fn" and it.names[0] in protos_of]
        for it in fn_order:
            protos += it.proto_text()
        decl = [""] + DECL_NOTE + [""] + tagdecl
        body = list(decl)
        for it in early:
            body += it.lines
        body += [""] + protos
        for it in late_vars:
            body += it.lines
        body += [""]
        out = list(head)
        for k, (t, its, btitle) in enumerate(new):
            out += banner(btitle)
            if k == di:
                out += body
                continue
            for it in its:
                out += it.lines
        return out, protos, decl

    def hoist(items):
        # with each item, the types, macros and variables written next to it (no blank line
        # between): a block of #defines or an enum and its table stays one block
        items = list(items)
        for sec in new:
            its = sec[1]
            for k, it in enumerate(its):
                if not any(it is x for x in items):
                    continue
                j = k
                while j + 1 < len(its) and its[j + 1].kind in ("macro", "type", "var") \
                        and its[j + 1].lines[0].strip() and its[j].lines[-1].strip():
                    j += 1
                    if not any(its[j] is x for x in items):
                        items.append(its[j])
                j = k
                while j > 0 and its[j - 1].kind in ("macro", "type", "var") \
                        and its[j].lines[0].strip():
                    j -= 1
                    if not any(its[j] is x for x in items):
                        items.append(its[j])
        ids = set(id(it) for it in items)
        for sec in new:
            keep = []
            for it in sec[1]:
                if id(it) not in ids:
                    keep.append(it)
                    continue
                # a sub-heading (/* ---- ... */) before the item heads what follows in its
                # section: it stays there
                k = 0
                while k < len(it.lines) and not it.lines[k].strip():
                    k += 1
                if k < len(it.lines) and it.lines[k].lstrip().startswith("/* ----"):
                    e = k
                    while "*/" not in it.lines[e]:
                        e += 1
                    e += 1
                    while e < len(it.lines) and not it.lines[e].strip():
                        e += 1
                    keep.append(Item(it.lines[:e], sec[0]))
                    rest = Item(it.lines[e:], it.section)
                    rank[id(rest)] = rank.get(id(it), -1)
                    items[[id(x) for x in items].index(id(it))] = rest
                    continue
            sec[1] = keep
        hoisted.extend(items)

    def owner(nm):
        for _, its, _ in new:
            for it in its:
                if it.kind in ("fn", "var", "type", "macro") and nm in it.names:
                    return it
        for it in hoisted:
            if nm in it.names:
                return it
        return None

    for rounds in range(50):
        out, protos, decl = render()
        changed = False
        want = tags_used_early(out)
        if want != tagdecl:
            tagdecl[:] = want
            changed = True
        hoist_now = []
        for nm, d, user in late_uses(out):
            if d.kind == "fn":
                if nm not in protos_of:
                    protos_of[nm] = d
                    changed = True
                continue
            it = owner(nm)
            if it is None:
                continue
            if any(it is h for h in hoisted):
                die("%r is used above it inside the Declarations section" % nm)
            if not any(it is h for h in hoist_now):
                hoist_now.append(it)
        if hoist_now:
            hoist(hoist_now)
            changed = True
        if os.environ.get("REORDER_DEBUG"):
            sys.stderr.write("round %d: %d prototypes, %d hoisted (+%s), %d tags\n" % (
                rounds, len(protos_of), len(hoisted), [x.names for x in hoist_now], len(tagdecl)))
        if changed:
            continue
        tags_bad, rc, msg = compile_incomplete(out)
        now = []
        for t in sorted(tags_bad):
            it = owner_tag(new, t)
            if it is None:
                if any(t in re.findall(r"(?:struct|union)\s+(\w+)\s*\{", h.code) for h in hoisted):
                    die("struct %s is hoisted but still incomplete where it is used" % t)
                die("struct %s: incomplete where used, and no definition found" % t)
            now.append(it)
        if now:
            hoist(now)
            continue
        if rc != 0:
            sys.stderr.write(msg[-3000:])
            die("gcc -fsyntax-only fails on the result for another reason")
        break
    else:
        die("no fixed point after 50 rounds")
    return out, dict(removed=removed, protos=protos, tagdecl=tagdecl, hoisted=hoisted,
                     old_map=old_map, new=new, decl=decl)


def tags_used_early(out):
    """`struct tag;` lines for the tags some item names above the tag's definition (in a
    parameter list such a tag would be local to it), in the order of their definitions."""
    _, secs = parse_file("\n".join(out))
    order = [it for _, its in secs for it in its if it.kind != "tagdecl"]
    first, defined = {}, []
    for pos, it in enumerate(order):
        for t in it.tags:
            first.setdefault(t, pos)
        for kw, t in re.findall(r"\b(struct|union)\s+(\w+)\s*\{", it.code):
            if t not in [d for _, d, _ in defined]:
                defined.append((kw, t, pos))
    return ["%s %s;" % (kw, t) for kw, t, pos in defined if first.get(t, pos) < pos]


def owner_tag(new, tag):
    for _, its, _ in new:
        for it in its:
            if re.search(r"\b(?:struct|union)\s+%s\s*\{" % tag, it.code):
                return it
    return None


def check_lines(old_text, out, info):
    from collections import Counter
    a = Counter(old_text.split("\n"))
    b = Counter(out)
    gone = a - b
    added = b - a
    allowed_gone = Counter(info["removed"]) + Counter(info["old_map"])
    def titles(L):
        return [L[i + 1] for i in range(len(L) - 2) if L[i] == BAN and L[i + 2] == BAN]
    allowed_gone += Counter(titles(old_text.split("\n")) + [BAN] * 200)
    allowed_add = Counter(info["protos"]) + Counter(info["tagdecl"]) + Counter(new_map())
    allowed_add += Counter(info["decl"]) + Counter(titles(out) + [BAN] * 200)
    allowed_add += Counter([H1_RUN, H2_RUN])
    # blank lines: a section's last blank line and a moved group's first may merge or split
    allowed_gone[""] += 20
    allowed_add[""] += 20
    bad_gone = gone - allowed_gone
    bad_add = added - allowed_add
    if bad_gone or bad_add:
        for ln in list(bad_gone.elements())[:20]:
            sys.stderr.write("  lost:  %r\n" % ln)
        for ln in list(bad_add.elements())[:20]:
            sys.stderr.write("  added: %r\n" % ln)
        die("sorted(old lines) and sorted(new lines) differ by more than the generated lines "
            "(%d lost, %d added)" % (sum(bad_gone.values()), sum(bad_add.values())))
    return sum(gone.values()), sum(added.values())


def check_order(out):
    """The same analysis on the result: every use below its declaration."""
    head, secs = parse_file("\n".join(out))
    bad = [(nm, d.section, u.section) for nm, d, u in late_uses(out)]
    if bad:
        die("used above its declaration: %s" % bad[:10])
    titles = [t for t, _ in secs]
    if len(titles) != len(NEW_ORDER) or not all(
            t.startswith(k) for t, (k, _, _) in zip(titles, NEW_ORDER)):
        die("sections of the result: %s" % titles)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/..


def cc_includes():
    """-I for cursor_oai.h (REORDER_REPO, else the directory of this script, else .) and the
    dependencies (COAI_DEPS_DIR, else build/deps there)."""
    repo = os.environ.get("REORDER_REPO") or (REPO if os.path.exists(
        os.path.join(REPO, "cursor_oai.h")) else os.getcwd())
    deps = os.environ.get("COAI_DEPS_DIR", os.path.join(repo, "build/deps"))
    if not os.path.isdir(os.path.join(deps, "bearssl-0.6+dfsg.1", "inc")):
        die("no dependencies in %s: set COAI_DEPS_DIR (e.g. /work/main/build/deps)" % deps)
    inc = ["-I" + repo, "-I" + os.path.join(repo, "proto")]
    for d in ("nanopb-0.4.9.1", "cjson-1.7.19", "bearssl-0.6+dfsg.1/inc"):
        inc.append("-I" + os.path.join(deps, d))
    return inc + ["-DPB_ENABLE_MALLOC", "-DPB_FIELD_32BIT", "-DCJSON_NESTING_LIMIT=64"]


def compile_all(path):
    inc = cc_includes()
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"]
    ran = 0
    for cc in ("gcc", "clang", "musl-gcc"):
        if subprocess.call(["sh", "-c", "command -v " + cc], stdout=subprocess.DEVNULL) != 0:
            print("reorder.py: %s not installed, skipped" % cc)
            continue
        cmd = [cc] + flags + inc + ["-c", path, "-o", "/dev/null"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-4000:])
            die("%s does not compile the result" % cc)
        print("reorder.py: %s -std=c99 -O2 -Wall -Wextra -Werror: ok" % cc)
        ran += 1
    if not ran:
        die("no compiler found")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    inp = args[0] if args else "server.c"
    outp = args[1] if len(args) > 1 else inp
    text = open(inp).read()
    out, info = build(text)
    gone, added = check_lines(text, out, info)
    check_order(out)
    # idempotent: a second run changes nothing but the (same) generated lines
    out2, _ = build("\n".join(out))
    if out2 != out:
        import difflib
        sys.stderr.write("\n".join(list(difflib.unified_diff(out, out2, lineterm=""))[:60]) + "\n")
        die("a second run does not give the same file")
    with open(outp, "w") as f:
        f.write("\n".join(out))
    print("reorder.py: %s -> %s: %d sections, %d lines (was %d); %d prototypes generated, "
          "%d old stand-alone prototype lines dropped, %d items hoisted to Declarations; "
          "sorted lines equal but for %d generated lines added and %d removed"
          % (inp, outp, len(NEW_ORDER), len(out), len(text.split("\n")),
             sum(1 for p in info["protos"] if p.endswith(";")), len(info["removed"]),
             len(info["hoisted"]), added, gone))
    if "--build" in sys.argv:
        compile_all(outp)


if __name__ == "__main__":
    main()
