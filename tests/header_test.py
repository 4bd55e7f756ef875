#!/usr/bin/python3
"""header_test.py - cursor_oai.h describes itself truly: the table of PARTs at its top lists
every part tagged in it (each "PART:NAME api" / "PART:NAME impl" section, with its "end"), in
the order of the API half, and the implementation order it states is the real one; the
manual (the header's opening comment) cites only the README or the header itself.

Reads files only (no binary, no network). Run from anywhere; prints RESULT p f last."""
import os
import re
import sys

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
    return T.result()


if __name__ == "__main__":
    sys.exit(main())
