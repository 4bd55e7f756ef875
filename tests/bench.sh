#!/bin/sh
# tests/bench.sh - performance bench of cursor-oai against the fake upstream, loopback only.
# Normally run as `./build.sh bench [ARGS]` (release build first). Builds the load generator
# (tests/bench/loadgen.c, gcc -O2, glibc) into build/bench/ and runs tests/bench/bench.py,
# which prints a table and writes bench/results.json, then tests/bench/toolloop.py (the
# tool-loop figure: held runs on and off), then HTTP/2 against HTTP/1.1 in one table.
# Every run is answered by tests/bench/upstream.c (C, libnghttp2 + OpenSSL; the Python fake keeps
# the unary calls; bench.py --upstream fake: the fake answers everything), and the floors
# tests/bench/floor_h2.c / floor_h1.c are measured beside the proxy ("÷ floor" columns).
# bench.py measures the binary over HTTP/2 and in both HTTP/1.1 transport profiles side by
# side (connect, grpc-web) unless --compare or --one-profile. ARGS go to bench.py (--help),
# e.g.
#   ./build.sh bench --compare /path/to/older/cursor-oai --hold-big 9900
# Env: COAI_BENCH_PROXY  binary to measure (default build/cursor-oai)
#      COAI_DEPS_DIR     dependency cache (default build/deps), as for build.sh
set -eu
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
DEPS=${COAI_DEPS_DIR:-build/deps}
pick() { for d in "$@"; do [ -d "$d" ] && { printf '%s\n' "$d"; return 0; }; done; return 1; }
need() { echo "bench.sh: no $1 in $DEPS (run ./build.sh bench)" >&2; exit 1; }
NP=${COAI_BENCH_NP:-$(pick "$DEPS"/nanopb-[0-9]*)} || need nanopb
CJ=${COAI_BENCH_CJ:-$(pick "$DEPS"/cjson-[0-9]*)} || need cJSON
BR=${COAI_BENCH_BR:-$(pick "$DEPS"/bearssl-[0-9]*[0-9])} || need BearSSL
BRLIB=${COAI_BENCH_BRLIB:-$DEPS/$(basename "$BR")-gcc/build/libbearssl.a}
[ -f "$BRLIB" ] || { echo "bench.sh: $BRLIB missing (./build.sh bench builds it)" >&2; exit 1; }
mkdir -p build/bench
set -x
gcc -std=c99 -O2 -Wall -Wextra -DPB_ENABLE_MALLOC -DPB_FIELD_32BIT -DCJSON_NESTING_LIMIT=64 \
    -I. -Iproto -I"$NP" -I"$CJ" -I"$BR/inc" tests/bench/loadgen.c \
    proto/agent.pb.c proto/aiserver.pb.c proto/google/rpc/status.pb.c \
    proto/google/protobuf/struct.pb.c proto/google/protobuf/any.pb.c \
    "$NP/pb_common.c" "$NP/pb_encode.c" "$NP/pb_decode.c" "$CJ/cJSON.c" "$BRLIB" \
    -lpthread -lm -o build/bench/loadgen
# the C upstream and the two floors (issue 32): Debian's libnghttp2-dev and libssl-dev, bench only
for p in upstream floor_h2 floor_h1; do
    gcc -std=c99 -O2 -Wall -Wextra tests/bench/$p.c -lnghttp2 -lssl -lcrypto -o build/bench/$p
done
/usr/bin/python3 tests/bench/bench.py --loadgen build/bench/loadgen "$@"
case " $* " in *" --help "* | *" -h "*) exit 0 ;; esac
# the tool-loop figure (held runs on and off; also ./build.sh bench-toolloop on its own)
CURSOR_OAI_BIN=${COAI_BENCH_PROXY:-build/cursor-oai} /usr/bin/python3 tests/bench/toolloop.py \
    --json build/bench/toolloop.json
# both transports side by side, in one table (from bench/results.json and the tool loop)
case " $* " in
*" --compare "* | *" --one-profile "* | *" --out "*) ;;
*) /usr/bin/python3 tests/bench/bench.py --summary build/bench/toolloop.json ;;
esac
