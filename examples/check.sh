#!/bin/sh
# Build examples/translate.c exactly as examples/README.md tells a project to vendor the
# header (only the copied files, the documented flags), run it on the recorded sample and
# compare with what the original client sent and showed. One test: prints RESULT 1 0 or 0 1.
#   examples/check.sh OUTDIR NANOPB_DIR CJSON_DIR BEARSSL_DIR BEARSSL_LIB
# Env: CC (default gcc), CFLAGS (extra flags, e.g. sanitizers). Run from the repo root.
set -u
[ $# = 5 ] || { echo "usage: $0 OUTDIR NANOPB_DIR CJSON_DIR BEARSSL_DIR BEARSSL_LIB"; exit 2; }
out=$1 np=$2 cj=$3 br=$4 brlib=$5
v=$out/vendor
fail() { echo "FAIL: $*"; echo "RESULT 0 1"; exit 1; }

rm -rf "$out"
mkdir -p "$v" || fail "mkdir $v"
# What README.md says to copy.
cp cursor_oai.h "$v/" || fail "copy the header"
for f in $(cd proto && find . -name '*.pb.[ch]'); do
    # shellcheck disable=SC2015
    mkdir -p "$v/proto/${f%/*}" && cp "proto/$f" "$v/proto/$f" || fail "copy proto/$f"
done
for f in pb.h pb_common.h pb_common.c pb_encode.h pb_encode.c pb_decode.h pb_decode.c; do
    cp "$np/$f" "$v/" || fail "copy nanopb $f"
done
cp "$cj/cJSON.h" "$cj/cJSON.c" "$v/" || fail "copy cJSON"

DEFS="-DPB_ENABLE_MALLOC -DPB_FIELD_32BIT -DCJSON_NESTING_LIMIT=64"
INC="-I$v -I$v/proto -I$br/inc"
# Third-party and generated sources: no -Werror (their warnings are not ours to fix).
objs=
for src in $(find "$v" -name '*.c' | sort); do
    o=$out/$(basename "$src" .c).o
    echo "+ ${CC:-gcc} -std=c99 ... -c $src"
    # shellcheck disable=SC2086
    ${CC:-gcc} -std=c99 ${CFLAGS:-} $DEFS $INC -c "$src" -o "$o" || fail "$src does not compile"
    objs="$objs $o"
done
# shellcheck disable=SC2086
set -- ${CC:-gcc} -std=c99 -Wall -Wextra -pedantic -Werror ${CFLAGS:-} $DEFS $INC \
    examples/translate.c $objs "$brlib" -lm -o "$out/translate"
echo "+ $*"
"$@" || fail "examples/translate.c does not compile"

echo "+ $out/translate examples/text_basic.request.json examples/text_basic.upstream"
"$out/translate" examples/text_basic.request.json examples/text_basic.upstream \
    >"$out/stdout" 2>"$out/stderr"
rc=$?
sed 's/^/    stderr| /' "$out/stderr"
sed 's/^/    stdout| /' "$out/stdout"
[ "$rc" = 0 ] || fail "exit status $rc"

# The upstream side: every BidiAppend body byte for byte as the original client sent it.
grep '^BidiAppend ' examples/text_basic.expected >"$out/want-appends"
grep '^BidiAppend ' "$out/stderr" >"$out/got-appends"
cmp -s "$out/want-appends" "$out/got-appends" \
    || fail "BidiAppend bodies differ from examples/text_basic.expected"
grep -q '^Content-Type: text/event-stream' "$out/stderr" || fail "no SSE content type"

# The client side: SSE with the recorded text, a stop, and [DONE] last.
/usr/bin/python3 - "$out/stdout" examples/text_basic.expected <<'EOF' || fail "SSE check"
import json, sys
body = open(sys.argv[1], encoding="utf-8").read()
want = [l for l in open(sys.argv[2], encoding="utf-8") if l.startswith("content: ")][0]
want = json.loads(want[len("content: "):])
assert body.endswith("\n\n"), "events end with a blank line"
events = [b for b in body.split("\n\n") if b]
assert all(e.startswith("data: ") and "\n" not in e for e in events), "one data line each"
assert events[-1] == "data: [DONE]", "[DONE] is last"
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(c["delta"].get("content") or "" for k in chunks for c in k["choices"])
assert text == want, (text, want)
assert [c["finish_reason"] for k in chunks for c in k["choices"] if c["finish_reason"]] \
    == ["stop"], "one finish_reason stop"
print("SSE: %d events, content %s, finish stop, [DONE]" % (len(events), json.dumps(text)))
EOF
echo "RESULT 1 0"
