#!/usr/bin/python3
"""Fake Cursor upstream (spec Appendix A) for end-to-end tests. Python 3 standard library only.

Serves over real TLS on 127.0.0.1 (TLS 1.2 allowed, for BearSSL clients):
  POST /agent.v1.AgentService/RunSSE            gRPC-web or Connect framed, chunked streaming
  POST /aiserver.v1.BidiService/BidiAppend      gRPC-web unary, or Connect unary binary
  POST /aiserver.v1.AiService/GetUsableModels   Connect unary JSON
  POST /aiserver.v1.DashboardService/GetCurrentPeriodUsage, .../GetPlanInfo   Connect unary JSON
  POST /aiserver.v1.ServerConfigService/GetServerConfig   Connect unary JSON (agentUrlConfig)
  GET  /auth/poll, POST /oauth/token, POST /auth/refresh, POST /auth/exchange_user_api_key
and validates requests the way the real server would (auth, content type, checksum, the headers of
spec 2.1, request ids, append_seqno order, run request shape). Every request is recorded.
Two profiles (issue 10): grpc-web (application/grpc-web+proto both ways, trailers) and Connect
(RunSSE application/connect+proto with end-stream frames, BidiAppend application/proto); the
Connect profile needs connect-protocol-version: 1 and may omit x-cursor-checksum.
Start order as the live server has it: RunSSE registers its run and answers its 200 head at
once; the seqno-0 append must come after that (one that arrives earlier is lost, and the run
never starts: heartbeats only). A second TLS listener ("agent_port") is the agent host
GetServerConfig names by default; like the live *.api5.cursor.sh hosts it serves HTTP/2 only
and refuses an HTTP/1.1 request at the connection level (agent_http1: a 400 "illegal request
line", a close before any byte, or HTTP/2 SETTINGS + GOAWAY frames); with agent_http1 true it
serves the same API over HTTP/1.1. With agent_host_only a RunSSE elsewhere
ends at once with the region message. min_client_version rejects older x-cursor-client-version
values as outdated on every call; min_run_version (default 2026.10.01) on RunSSE/BidiAppend
only, with "Update Required" (resource_exhausted + error 28), as the live server gates runs.
A compressed outgoing frame is ignored (the run parks), as the live server does.

HTTP/2 (issue 23; python3-h2): both TLS listeners offer ALPN h2 (main: h2 + http/1.1 as api2;
agent: h2 only; HTTP/1.1 there is refused at the connection level as the api5 hosts do,
unless agent_http1 is true).
POST /agent.v1.AgentService/Run over HTTP/2 is one Connect bidi stream: the request body is the
client's messages (the run request first, then exec results, KV replies, heartbeats: what
BidiAppend carries on HTTP/1.1, checked the same way), the response the scenario's frames and a
Connect end-stream. Run over HTTP/1.1 gets 464 (the load balancer's answer). The fake checks
the client's side of HTTP/2 (flow-control violations, HPACK errors and too many streams are
protocol errors h2 raises: recorded; a PING not acknowledged within h2_ping_ack_s: recorded;
a new stream after our GOAWAY: recorded) and misbehaves on command: ops "goaway" and
"rst_stream", config h2_goaway_at_start, runsse_scenario with "h2_rst_at_start" or "h2_flood"
(once the response head is out: PINGs or empty SETTINGS written without reading the acks, up to
"bytes" / "max_s", then the connection is closed), a scenario with "h2_hold_window" (the stream's
receive window never reopens; the connection's does), and any stall/sleep step stalls one stream
while the others on the connection go on.

Tool ownership (issue 31; late-autumn notes N1): a run whose RunSSE / HTTP/2 Run carries
x-cursor-agent-allowed-tools without any native tool kind in it (cursor-oai's client mode sends
"mcp_tool_call,get_mcp_tools_tool_call") has no Cursor tools, as the live model then "sees the
caller's tools and none of Cursor's own". A scenario "exec" step of a native kind (NATIVE_EXECS:
shell, read, write, ls, grep, delete, fetch, ...) on such a run is not sent: the fake records a
validation error (S.error: the suite sees it in /state) and ends the run with a
failed_precondition error that names the step, so that nothing passes silently. A step with
"despite_header": true is sent anyway (Cursor ignoring the header). Without the header native
execs go out as always; "mcp" execs go out either way. The header's value is in /runs
("allowed_tools"), and every request's headers in /requests.

Behaviour per run comes from a scenario (a dict of steps, see SCENARIOS and run_steps()), chosen by
the run request's model id "scenario:<name>" (or "scenario:long:<N>"), else by a queue / default
set through the control API.

Control API: plain HTTP on 127.0.0.1:<control port> (JSON):
  GET  /state            counters, validation errors, active streams
  GET  /requests?since=N recorded requests (seq >= N)
  GET  /runs             per-run summaries (appends, scenario, how the stream ended)
  POST /reset            clear records, counters, errors and runs
  POST /scenario         {"name": n, "scenario": {...}} register a scenario
  POST /next_scenario    {"name": n} queue a scenario for the next run that does not pick one
  POST /config           merge into the config (see DEFAULT_CONFIG)
  POST /release          end every "hold" step waiting now (the bench's held streams)
  POST /shutdown

Fault listeners (plain TCP, no TLS; ports in the ready file): rst_handshake_port reads the
ClientHello and answers with a TCP RST; silent_port accepts and never sends a byte (it holds
the connection until the peer gives up, at most silent_max_s).

Usage: fake_cursor.py --cert-dir DIR [--ready-file F] [--scenarios JSON] [--token T ...]
       fake_cursor.py --selftest   (runs tests/fake/test_fake.py)
"""

import argparse
import base64
import hashlib
import json
import os
import re
import secrets
import select
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbwire as pb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.environ.get("COAI_VECTORS", os.path.join(HERE, "..", "..", "..", "shared", "spec",
                                                     "vectors"))
if not os.path.isdir(VECTORS):
    VECTORS = "/work/shared/spec/vectors"

PATH_RUNSSE = "/agent.v1.AgentService/RunSSE"
PATH_APPEND = "/aiserver.v1.BidiService/BidiAppend"
PATH_MODELS = "/aiserver.v1.AiService/GetUsableModels"
PATH_USAGE = "/aiserver.v1.DashboardService/GetCurrentPeriodUsage"
PATH_PLAN = "/aiserver.v1.DashboardService/GetPlanInfo"
PATH_SERVER_CONFIG = "/aiserver.v1.ServerConfigService/GetServerConfig"
CT_GRPCWEB = "application/grpc-web+proto"
CT_CONNECT = "application/connect+proto"     # Connect streaming (RunSSE, Connect profile)
CT_PROTO = "application/proto"               # Connect unary binary (BidiAppend, Connect profile)
REGION_MESSAGE = "This region is not available for your team"
CONNECT_CODES = ["ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded",
                 "not_found", "already_exists", "permission_denied", "resource_exhausted",
                 "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal",
                 "unavailable", "data_loss", "unauthenticated"]
VERSION_RE = re.compile(r"^(?:cli-)?(\d{4})\.(\d{2})\.(\d{2})-(?:(\d{2})-(\d{2})-(\d{2})-)?"
                        r"[0-9a-f]{4,40}(?:-lab)?$")
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
HEX_RE = re.compile(r"^(?:[0-9a-f]{2})*$")

DEFAULT_CONFIG = {
    "accept_any_jwt": True,        # any JWT with a future exp is a valid access token
    "require_checksum": True,
    "client_version": None,        # exact x-cursor-client-version required when set
    "append_wait_s": 15.0,         # RunSSE waits this long for the seqno-0 append
    "append_gap_s": 5.0,           # an append that overtook an earlier seqno waits this long
                                   # for the gap to fill, then is refused as out of order
    "kv_wait_s": 5.0,              # set_blob/get_blob answer deadline
    "stall_max_s": 600.0,          # "stall" op gives up after this
    "keepalive_idle_s": 120.0,     # idle keep-alive connection timeout
    "poll_pending": 2,             # /auth/poll answers 404 this many times per uuid
    "refresh_status": None,        # e.g. 401 to make /oauth/token and /auth/refresh fail
    "refresh_delay_s": 0.0,        # both renewal routes answer after this
    "oauth_token_route": True,     # False: /oauth/token answers 404
    "oauth_token_nul": False,      # True: /oauth/token's access_token holds a \u0000 escape
    "auth_refresh_route": True,    # False: /auth/refresh answers 404 (unconfirmed in 2026)
    "access_ttl_s": 3600,          # exp of issued access tokens
    "oauth_rotate": False,         # /oauth/token rotates too: a new refresh_token in the
                                   # answer, the used one invalid (late-autumn notes N16: "Cursor
                                   # sometimes rotates refresh_token"; not seen live)
    "rotate_refresh": True,        # /auth/refresh only: a used refresh token becomes invalid
                                   # (/oauth/token never rotates: notes autumn 2026, 5.7)
    "api_keys": None,              # list of accepted API keys (None: any "key_*" string)
    "models_status": None,         # HTTP status to fail GetUsableModels with
    "usage_shape": "plan",         # GetCurrentPeriodUsage answer: plan | no_plan | limit_hit
    "usage_status": None,          # HTTP status to fail GetCurrentPeriodUsage with
    "plan_status": None,           # HTTP status to fail GetPlanInfo with (None: 404 for no_plan)
    "usage_delay_s": 0.0,          # GetCurrentPeriodUsage answers after this (a slow dashboard)
    "list_scenarios": True,        # add "scenario:<name>" entries to the model list
    "default_scenario": "default",
    "silent_max_s": 120.0,         # silent_port gives up on a connection after this
    # Slow unary answers (issue 17): {"models" | "append0": {"mode": "silent" | "trickle" |
    # "interim" | "endless", "interval_s": s, "max_s": s}}. GetUsableModels / the seqno-0
    # BidiAppend then answer that way: nothing; a 200 head and one body byte per interval;
    # a 100 Continue head per interval; or a chunked body that never ends.
    "slow": None,
    "runsse_close": False,         # RunSSE answers "Connection: close" and closes after the run
    # --- live parity (issue 10) ---
    "register_delay_s": 0.0,       # RunSSE registers its run (and sends its 200 head) this
                                   # long after the request arrived; a seqno-0 append that
                                   # comes before registration is lost and the run never starts
    "runsse_scenario": None,       # scenario applied to every RunSSE before registration
                                   # (runsse_status / runsse_response / headers_stall): the
                                   # model is not known yet at that point
    "min_client_version": None,    # e.g. "2026.08.01-0000000": older x-cursor-client-version
    "min_run_version": "2026.10.01-0000000",   # the same for RunSSE/BidiAppend only (the live
                                   # server gates runs, not unary calls: autumn notes 5.2)
                                   # (or an unparsable one) is rejected as outdated
    "outdated_error": 28,          # 28: resource_exhausted + "Update Required" (2026 form);
                                   # 30: ERROR_OUTDATED_CLIENT, permission_denied (older form)
    "unsupported_profiles": [],    # "grpc-web" / "connect": refused on RunSSE/BidiAppend
    "unsupported_status": 415,     # ... with this status (464: what a load balancer answers)
    "agent_url": "agent",          # GetServerConfig's agentUrl/agentnUrl (None: the main
                                   # listener itself; "agent": the agent listener)
    "server_config": None,         # verbatim GetServerConfig JSON answer (overrides agent_url)
    "server_config_seq": [],       # answers used one per call first (then server_config ...)
    "server_config_status": None,  # HTTP status to fail GetServerConfig with
    "http2_config": None,          # GetServerConfig's http2_config (late-autumn notes N2): 0-4
                                   # (sent as the enum's name) or a verbatim JSON value
    # --- HTTP/2 (issue 23) ---
    "main_alpn": ["h2", "http/1.1"],  # ALPN of the main listener (api2 speaks both)
    "agent_alpn": ["h2"],          # ALPN of the agent listener (the api5 hosts: h2 only);
                                   # ["http/1.1"]: a host/middlebox without h2
    "agent_http1": "illegal",      # how the agent listener answers HTTP/1.1: refused at the
                                   # connection level as the live api5 hosts do, by "illegal"
                                   # (a 400 "illegal request line"; also False), "close" (no
                                   # byte), "h2" (SETTINGS + GOAWAY frames) or "464" (the load
                                   # balancer's answer); True: served
    "h2_max_streams": 100,         # SETTINGS_MAX_CONCURRENT_STREAMS of new connections
    "h2_ping_s": 10.0,             # the fake PINGs every connection this often (0: never)
    "h2_ping_ack_s": 10.0,         # ... and records an error when the ACK takes longer
    "h2_goaway_at_start": False,   # every new HTTP/2 connection sends GOAWAY(0) at once (a
                                   # number: GOAWAY with that error code, 13 HTTP_1_1_REQUIRED)
    "h2_max_header_list": 65536,   # SETTINGS_MAX_HEADER_LIST_SIZE of new connections (a
                                   # request head over it is a protocol error: python3-h2's)
    "agent_host_only": False,      # RunSSE anywhere but the agent listener: 200, then an OK
                                   # end with the region message and no frames, then close
}


# ---------------------------------------------------------------------------------------------
# scenarios

def _blob(text):
    return {"op": "kv_set_blob", "data": {"id": "1", "role": "user", "content": [
        {"type": "text", "text": text}]}}


SCENARIOS = {
    # plain answer; also the fallback for models that do not name a scenario
    "default": {"steps": [
        _blob("state"), {"op": "text", "text": "Hello"}, {"op": "heartbeat"},
        {"op": "text", "text": " from fake Cursor."}, {"op": "token_delta", "tokens": 5},
        {"op": "checkpoint", "used_tokens": 1234, "max_tokens": 200000}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]},
    "text_basic": {"steps": [
        _blob("state"), {"op": "text", "text": "Hello"}, {"op": "heartbeat"},
        {"op": "text", "text": ", world"}, {"op": "token_delta", "tokens": 3},
        {"op": "text", "text": "! w\u00f6rld \U0001f30d"},
        {"op": "checkpoint", "used_tokens": 1234, "max_tokens": 200000}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]},
    # unique answer per prompt, for concurrency tests
    "echo": {"steps": [{"op": "echo", "pieces": 4}, {"op": "turn_ended"},
                       {"op": "trailer", "status": 0}]},
    "thinking": {"steps": [
        _blob("state"), {"op": "thinking", "text": "Let me think"}, {"op": "heartbeat"},
        {"op": "thinking", "text": " about it."}, {"op": "thinking_completed", "ms": 120},
        {"op": "text", "text": "The answer is 42."}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]},
    "split_bytes": {"steps": [
        {"op": "text", "text": "split \U0001f30d across", "split": 1},
        {"op": "batch", "steps": [{"op": "text", "text": " many"}, {"op": "heartbeat"},
                                  {"op": "text", "text": " frames"}]},
        {"op": "raw", "hex": "0000000000"},  # zero-length data frame: valid, empty
        {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "kv_get": {"steps": [
        {"op": "kv_set_blob", "id": 1, "data": "blob-one"},
        {"op": "kv_get_blob", "id": 2, "data_of": "blob-one", "expect": "blob-one"},
        {"op": "kv_get_blob", "id": 3, "blob_id_hex": "11" * 32, "expect": None},
        {"op": "text", "text": "kv ok"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "kv_fallback": {"steps": [
        {"op": "kv_set_blob", "id": 1, "data": {"id": "1", "role": "assistant", "content": [
            {"type": "text", "text": "Stored answer from a blob."}]}},
        {"op": "heartbeat"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "tool_read": {"when": [{"prompt_contains": "[Tool result for", "steps": [
        {"op": "text", "text": "The file says: done."}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]}], "steps": [
        _blob("state"), {"op": "text", "text": "Reading the file."},
        {"op": "tool_call", "tool": "read", "call_id": "call-read-1",
         "args": {"path": "/tmp/fake-workspace/hello.txt"}},
        {"op": "exec", "kind": "read", "id": 1, "exec_id": "exec-read-0001",
         "path": "/tmp/fake-workspace/hello.txt", "wait_reply": 2.0},
        {"op": "stall", "max_s": 30}]},
    "tool_shell": {"steps": [
        {"op": "exec", "kind": "shell_stream", "id": 1, "exec_id": "exec-7f3a-0001",
         "command": "ls -la", "cwd": "/tmp", "timeout": 30000, "wait_reply": 2.0},
        {"op": "stall", "max_s": 30}]},
    "tool_mcp": {"steps": [
        {"op": "exec", "kind": "mcp", "id": 2, "exec_id": "exec-0002", "tool_name": "get_weather",
         "args": {"location": "Tokyo", "days": 3}, "tool_call_id": "toolu_01ABC",
         "wait_reply": 2.0},
        {"op": "stall", "max_s": 30}]},
    "tool_grep": {"steps": [
        {"op": "exec", "kind": "grep", "id": 3, "exec_id": "exec-0003", "pattern": "TODO",
         "path": "/tmp", "wait_reply": 2.0}, {"op": "stall", "max_s": 30}]},
    "tool_glob": {"steps": [
        {"op": "exec", "kind": "grep", "id": 3, "exec_id": "exec-0003", "pattern": "",
         "glob": "*.c", "path": "/tmp", "wait_reply": 2.0}, {"op": "stall", "max_s": 30}]},
    "tool_ls": {"steps": [
        {"op": "exec", "kind": "ls", "id": 4, "exec_id": "exec-0004", "path": "/tmp",
         "wait_reply": 2.0}, {"op": "stall", "max_s": 30}]},
    "tool_write": {"steps": [
        {"op": "exec", "kind": "write", "id": 5, "exec_id": "exec-0005",
         "path": "/tmp/fake-out.txt", "file_text": "hi\n", "wait_reply": 2.0},
        {"op": "stall", "max_s": 30}]},
    "interaction_query": {"steps": [
        {"op": "interaction_query", "id": 7, "kind": "ask_question", "wait_reply": 2.0},
        {"op": "text", "text": "after the question"}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]},
    "request_context": {"steps": [
        {"op": "exec", "kind": "request_context", "id": 6, "exec_id": "exec-0006",
         "wait_reply": 1.0},
        {"op": "text", "text": "after request context"}, {"op": "turn_ended"},
        {"op": "trailer", "status": 0}]},
    # faults
    "usage_limit": {"steps": [{"op": "trailer", "status": 8,
                               "message": "You've hit your usage limit",
                               "details": {"error": 10, "title": "Usage limit",
                                           "detail": "You've hit your usage limit"}}]},
    "usage_limit_after_text": {"steps": [
        {"op": "text", "text": "partial"},
        {"op": "trailer", "status": 8, "message": "You've hit your usage limit"}]},
    # a retired model: grpc-status 3 + ERROR_DEPRECATED (40), Cursor's own words in the details
    "deprecated_model": {"steps": [{"op": "trailer", "status": 3,
                                    "message": "Model deprecated",
                                    "details": {"error": 40, "title": "Model deprecated",
                                                "detail": "claude-3.5-sonnet is deprecated. "
                                                          "Please switch to a newer model.",
                                                "is_expected": True}}]},
    "outdated_client": {"steps": [{"op": "trailer", "status": 9, "message": "Outdated client",
                                   "details": {"error": 30, "title": "Update required",
                                               "detail": "Please update Cursor to continue.",
                                               "is_expected": True}}]},
    "end_stream_error": {"steps": [{"op": "text", "text": "partial"},
                                   {"op": "end_stream", "json": {"error": {
                                       "code": "internal", "message": "boom"}}}]},
    "end_stream_ok": {"steps": [{"op": "text", "text": "ok"}, {"op": "end_stream", "json": {}}]},
    "runsse_401": {"runsse_status": {"status": 401, "code": "unauthenticated",
                                     "message": "Not logged in"}},
    "runsse_500": {"runsse_status": {"status": 500, "code": "internal",
                                     "message": "internal error"}},
    "append_401": {"append_status": {"status": 401, "code": "unauthenticated",
                                     "message": "Not logged in", "seqno": 0}},
    "append_500": {"append_status": {"status": 500, "code": "internal",
                                     "message": "internal error", "seqno": 0}},
    "append_401_kv": {"append_status": {"status": 401, "code": "unauthenticated",
                                        "message": "expired", "seqno": 1},
                      "steps": [{"op": "text", "text": "before kv"},
                                {"op": "kv_set_blob", "id": 1, "data": "x"},
                                {"op": "text", "text": "after kv"}, {"op": "turn_ended"},
                                {"op": "trailer", "status": 0}]},
    "cut_frame": {"steps": [{"op": "text", "text": "partial answer"},
                            {"op": "cut", "text": "this frame is cut in the middle"},
                            {"op": "close"}]},
    "cut_frame_clean_eof": {"steps": [{"op": "text", "text": "partial answer"},
                                      {"op": "cut", "text": "this frame is cut"},
                                      {"op": "end"}]},
    "eof_no_trailer": {"steps": [{"op": "text", "text": "partial answer"}, {"op": "end"}]},
    "close_mid": {"steps": [{"op": "text", "text": "partial answer"}, {"op": "close"}]},
    "huge_len": {"steps": [{"op": "text", "text": "partial"},
                           {"op": "raw", "hex": "00ffffffff0a0a0a0a0a"}, {"op": "stall",
                                                                         "max_s": 30}]},
    "huge_len_first": {"steps": [{"op": "raw", "hex": "00ffffffff0a0a0a0a0a"},
                                 {"op": "stall", "max_s": 30}]},
    "compressed_flag": {"steps": [{"op": "raw_frame", "flags": 1, "payload_hex": "0a020a00"},
                                  {"op": "stall", "max_s": 30}]},
    "stall": {"steps": [{"op": "text", "text": "partial answer"}, {"op": "stall"}]},
    "stall_first": {"steps": [{"op": "stall"}]},
    "stall_headers": {"headers_stall": True},
    "heartbeats_only": {"steps": [{"op": "repeat", "n": 100000, "interval": 0.2,
                                   "steps": [{"op": "heartbeat"}]}]},
    "slow": {"steps": [{"op": "repeat", "n": 600, "interval": 0.05,
                        "steps": [{"op": "text", "text": "tick "}]},
                       {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "grpc_status_16": {"steps": [{"op": "trailer", "status": 16, "message": "Unauthenticated"}]},
    # transport and framing faults (tests/faults_test.py)
    "rst_mid": {"steps": [{"op": "text", "text": "partial answer"}, {"op": "sleep", "s": 0.1},
                          {"op": "close", "rst": True}]},
    "html_502": {"runsse_response": {
        "status": 502, "content_type": "text/html",
        "body": "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
                "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>"
                "\r\n</body>\r\n</html>\r\n" + "<!-- padding -->\r\n" * 40}},
    "unknown_flag": {"steps": [{"op": "raw_frame", "flags": 4, "payload_hex": "0a070a0568656c6c6f"},
                               {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "data_after_trailer": {"steps": [{"op": "text", "text": "ok"}, {"op": "trailer", "status": 0},
                                     {"op": "text", "text": "late"}, {"op": "end"}]},
    "emoji_split_frames": {"steps": [{"op": "text", "text_hex": "61f09f"},
                                     {"op": "text", "text_hex": "8c8d62"}, {"op": "turn_ended"},
                                     {"op": "trailer", "status": 0}]},
    "end_stream_quota_first": {"steps": [{"op": "end_stream", "json": {"error": {
        "code": "resource_exhausted", "message": "You've hit your usage limit"}}}]},
    "frame_over_cap": {"steps": [{"op": "raw_frame", "flags": 0, "pad": 16 * 1024 * 1024 + 1},
                                 {"op": "stall", "max_s": 30}]},
    # --- the errors users saw live since 2026-08 (notes 2026-autumn §4), Cursor's own words ---
    "live_geo_internal": {"steps": [{"op": "trailer", "status": 13, "message":
        "This model is not available in your country or region", "details": {
            "error": 13, "title": "", "detail": "This model is not available in your country "
                                                "or region"}}]},
    "live_geo_denied": {"steps": [{"op": "trailer", "status": 7, "message":
        "Model not available in your region", "details": {"error": 29, "title": "",
                                                          "detail": ""}}]},
    "live_high_load": {"steps": [{"op": "trailer", "status": 8, "message": "High Load",
                                  "details": {"error": 41, "title": "High Load", "detail":
                                      "We're experiencing high demand for Cursor Grok 4.5. "
                                      "Please switch to Auto or try again later."}}]},
    "live_unpaid_invoice": {"steps": [{"op": "trailer", "status": 8, "message":
        "You have an unpaid invoice. Please pay it to continue.", "details": {
            "error": 50, "title": "", "detail": "You have an unpaid invoice. Please pay it to "
                                                "continue."}}]},
    "live_channel_down": {"steps": [{"op": "trailer", "status": 14, "message":
        "ERROR_PROVIDER_ERROR: model channel not available", "details": {
            "error": 0, "title": "", "detail": "model channel not available",
            "is_retryable": True}}]},
    "live_identity_denied": {"steps": [{"op": "trailer", "status": 7, "message":
        "Unsupported client version for this endpoint"}]},
    "live_bare_exhausted": {"steps": [{"op": "trailer", "status": 8}]},
    "live_next_item": {"steps": [{"op": "heartbeat"}, {"op": "heartbeat"},
                                 {"op": "trailer", "status": 4,
                                  "message": "Timeout waiting for next item."}]},
    # the server lost the conversation: the first run of the scenario fails, the next answers
    "live_conv_missing": {"when": [{"attempt": 1, "steps": [
        {"op": "trailer", "status": 13, "message": "Conversation data missing"}]}],
        "steps": [{"op": "echo"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "live_blob_missing": {"when": [{"attempt": 1, "steps": [
        {"op": "trailer", "status": 5, "message": "blob missing"}]}],
        "steps": [{"op": "echo"}, {"op": "turn_ended"}, {"op": "trailer", "status": 0}]},
    "live_conv_missing_always": {"steps": [
        {"op": "trailer", "status": 13, "message": "Conversation data missing"}]},
}


def long_scenario(n, text="lorem ipsum "):
    return {"steps": [{"op": "long", "n": n, "text": text}, {"op": "turn_ended"},
                      {"op": "trailer", "status": 0}]}


# ---------------------------------------------------------------------------------------------
# model list (vectors/e2e/scenario_models.json + the README's modelId/displayModelId pairs)

BASE_MODELS = [
    {"modelId": "default", "displayModelId": "auto", "displayName": "Auto",
     "displayNameShort": "Auto", "aliases": [], "thinkingDetails": None, "maxMode": False},
    {"modelId": "claude-4.5-sonnet", "displayModelId": "sonnet-4.5",
     "displayName": "Claude 4.5 Sonnet", "displayNameShort": "Sonnet 4.5",
     "aliases": ["claude-4.5-sonnet"], "maxMode": False},
    {"modelId": "claude-4.5-sonnet-thinking", "displayModelId": "sonnet-4.5-thinking",
     "displayName": "Claude 4.5 Sonnet (thinking)", "displayNameShort": "Sonnet 4.5 Thinking",
     "aliases": [], "thinkingDetails": {}, "maxMode": False},
    {"modelId": "gpt-5.1-codex", "displayModelId": "gpt-5.1-codex", "displayName": "GPT-5.1 Codex",
     "displayNameShort": "GPT-5.1 Codex", "aliases": [], "maxMode": False},
    {"modelId": "gemini-3-pro", "displayModelId": "gemini-3-pro", "displayName": "Gemini 3 Pro",
     "displayNameShort": "Gemini 3 Pro", "aliases": [], "maxMode": False},
]
for _m in BASE_MODELS:
    if _m.get("thinkingDetails", 0) is None:
        del _m["thinkingDetails"]


def load_vector_model_ids():
    """The /v1/models ids the original produced from this list, in order (for cross-checks)."""
    with open(os.path.join(VECTORS, "e2e", "scenario_models.json")) as f:
        d = json.load(f)
    body = json.loads(d["openai_response"]["body"])
    return [(m["id"], m["owned_by"]) for m in body["data"]]


# ---------------------------------------------------------------------------------------------
# shared state

class Run:
    def __init__(self, rid):
        self.rid = rid
        self.cond = threading.Condition()
        self.appends = []          # decoded appends in arrival order
        self.next_seqno = 0
        self.run_request = None    # summary of the seqno-0 message
        self.append_error = None   # (status, code, message) if an append was rejected
        self.h2_reject = None      # (code, message): a Run message rejected (HTTP/2), the
                                   # stream ends with that error
        self.scenario_name = None
        self.scenario = None
        self.runsse_count = 0
        self.created = time.time()
        self.stream = {}           # how the RunSSE stream went
        self.exec_replies = {}
        self.exec_results = {}     # held execs: {"ok", "why", "text", "frames"} per exec id
        self.checkpoints_sent = [] # ConversationStateStructure bytes (hex) of each checkpoint
        self.kv_replies = {}
        self.exec_checks = {}      # exec id -> "ok" or why an exec 36 / precheck answer failed
        self.query_replies = {}    # query id -> the interaction_response (None: unanswered)
        self.attempt = 0           # this run is the n-th run of its scenario (1-based)
        self.registered = False    # the RunSSE registered the run (its 200 head went out)
        self.dropped = False       # a seqno-0 append came before registration: never starts
        self.profile = None        # "grpc-web" or "connect" (RunSSE content type)
        self.transport = "http1"   # "h2": one Run stream on HTTP/2
        self.allowed_tools = None  # x-cursor-agent-allowed-tools of the RunSSE / Run

    def summary(self):
        return {"request_id": self.rid, "scenario": self.scenario_name, "created": self.created,
                "model_id": (self.run_request or {}).get("model_id"),
                "appends": [{k: v for k, v in a.items() if k != "message_hex"}
                            for a in self.appends],
                "append_error": self.append_error, "runsse_count": self.runsse_count,
                "registered": self.registered, "dropped": self.dropped,
                "profile": self.profile, "transport": self.transport,
                "allowed_tools": self.allowed_tools,
                "stream": dict(self.stream),
                "exec_replies": {str(k): v for k, v in self.exec_replies.items()},
                "exec_results": dict(self.exec_results),
                "checkpoints_sent": list(self.checkpoints_sent),
                "kv_replies": {str(k): v for k, v in self.kv_replies.items()},
                "exec_checks": dict(self.exec_checks),
                "query_replies": dict(self.query_replies), "attempt": self.attempt,
                "conversation_id": (self.run_request or {}).get("conversation_id"),
                "conversation_state_hex":
                    (self.run_request or {}).get("conversation_state_hex"),
                "prompt": (self.run_request or {}).get("prompt"),
                "client_supports_inline_images":
                    (self.run_request or {}).get("client_supports_inline_images")}


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.config = dict(DEFAULT_CONFIG)
        self.scenarios = json.loads(json.dumps(SCENARIOS))
        self.next_scenarios = []
        self.valid_tokens = set()
        self.refresh_tokens = set()
        self.poll_counts = {}
        self.stop = threading.Event()
        self.ports = {}
        # "hold" steps (the bench's held streams): POST /release ends them all at once
        self.hold_gen = 0
        self.release_pipe = os.pipe()   # readable once released: each waiter polls it
        self.held = set()               # Events of the HTTP/2 streams in a hold step
        self.reset()

    def release_holds(self):
        """End every "hold" step waiting now (POST /release). A new pipe serves the next
        holds; the old one stays readable (and open: a waiter may be about to poll it)."""
        with self.lock:
            self.hold_gen += 1
            w = self.release_pipe[1]
            self.release_pipe = os.pipe()
            held, self.held = self.held, set()
        os.write(w, b"x")
        for ev in held:
            ev.set()
        return len(held)

    def reset(self):
        with self.lock:
            self.counters = {}
            self.requests = []
            self.errors = []
            self.runs = {}
            self.attempts = {}         # scenario name -> runs that picked it since the reset
            self.active_streams = 0
            self.max_active_streams = 0
            self.open_connections = 0
            self.seq = 0

    def count(self, name, n=1):
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def error(self, msg, **kw):
        """A validation error: something the real server would reject or a protocol rule the
        client broke. Tests assert this list stays empty."""
        e = {"t": time.time(), "error": msg}
        e.update(kw)
        with self.lock:
            self.errors.append(e)
        sys.stderr.write("fake_cursor: VALIDATION %s %s\n" % (msg, kw if kw else ""))

    def record(self, rec):
        with self.lock:
            rec["seq"] = self.seq
            self.seq += 1
            self.requests.append(rec)

    def run(self, rid):
        with self.lock:
            r = self.runs.get(rid)
            if r is None:
                r = self.runs[rid] = Run(rid)
            return r

    def stream_delta(self, d):
        with self.lock:
            self.active_streams += d
            self.max_active_streams = max(self.max_active_streams, self.active_streams)

    def snapshot(self):
        with self.lock:
            return {"counters": dict(self.counters), "errors": list(self.errors),
                    "n_requests": len(self.requests), "active_streams": self.active_streams,
                    "max_active_streams": self.max_active_streams,
                    "open_connections": self.open_connections, "n_runs": len(self.runs)}


S = State()


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 over one (TLS) connection

class PeerClosed(Exception):
    pass


class Conn:
    MAX_HEAD = 64 * 1024
    MAX_BODY = 64 * 1024 * 1024

    def __init__(self, sock, cid, listener):
        self.sock = sock
        self.cid = cid
        self.listener = listener
        self.rbuf = b""
        self.wlock = threading.Lock()
        self.closed = False
        self.close_notify = False   # end the connection with a TLS close_notify

    def _recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            d = self.sock.recv(65536)
        except (ssl.SSLError, OSError) as e:
            if isinstance(e, socket.timeout):
                raise
            raise PeerClosed(str(e))
        if not d:
            raise PeerClosed("eof")
        self.rbuf += d

    def read_request(self):
        """-> dict or None on a clean close between requests."""
        idle = S.config["keepalive_idle_s"]
        while b"\r\n\r\n" not in self.rbuf:
            if len(self.rbuf) > self.MAX_HEAD:
                raise ValueError("request head too large")
            try:
                self._recv(idle if not self.rbuf else 30)
            except PeerClosed:
                if self.rbuf:
                    S.error("connection closed in the middle of a request head", conn=self.cid)
                return None
            except socket.timeout:
                return None
        head, self.rbuf = self.rbuf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ValueError("bad request line %r" % lines[0])
        method, target, version = parts
        headers, order = {}, []
        for l in lines[1:]:
            if ":" not in l or l[:1] in (" ", "\t"):
                raise ValueError("bad header line %r" % l)
            k, v = l.split(":", 1)
            k = k.strip().lower()
            v = v.strip()
            order.append(k)
            headers[k] = headers[k] + ", " + v if k in headers else v
        body = b""
        te = headers.get("transfer-encoding", "").lower()
        if te:
            if te != "chunked" or "content-length" in headers:
                raise ValueError("unsupported transfer-encoding %r" % te)
            body = self._read_chunked()
        elif "content-length" in headers:
            cl = headers["content-length"]
            if not cl.isdigit() or int(cl) > self.MAX_BODY:
                raise ValueError("bad content-length %r" % cl)
            body = self._read_exact(int(cl))
        u = urllib.parse.urlsplit(target)
        return {"method": method, "target": target, "path": u.path, "query": u.query,
                "version": version, "headers": headers, "header_order": order, "body": body}

    def _read_exact(self, n):
        while len(self.rbuf) < n:
            self._recv(30)
        d, self.rbuf = self.rbuf[:n], self.rbuf[n:]
        return d

    def _read_line(self):
        while b"\r\n" not in self.rbuf:
            if len(self.rbuf) > 4096:
                raise ValueError("chunk header too long")
            self._recv(30)
        l, self.rbuf = self.rbuf.split(b"\r\n", 1)
        return l

    def _read_chunked(self):
        out = b""
        while True:
            size = int(self._read_line().split(b";")[0].strip(), 16)
            if size == 0:
                while self._read_line():
                    pass
                return out
            out += self._read_exact(size)
            if self._read_exact(2) != b"\r\n":
                raise ValueError("bad chunk terminator")
            if len(out) > self.MAX_BODY:
                raise ValueError("chunked body too large")

    def send(self, data):
        with self.wlock:
            try:
                self.sock.settimeout(30)
                self.sock.sendall(data)
            except (ssl.SSLError, OSError) as e:
                self.closed = True
                raise PeerClosed(str(e))

    def respond(self, status, body=b"", ctype="application/json", extra=None, close=False):
        if isinstance(body, str):
            body = body.encode()
        h = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Status")),
             "Content-Type: " + ctype, "Content-Length: %d" % len(body)]
        for k, v in (extra or {}).items():
            h.append("%s: %s" % (k, v))
        if close:
            h.append("Connection: close")
        self.send(("\r\n".join(h) + "\r\n\r\n").encode() + body)

    def start_chunked(self, status=200, ctype=CT_GRPCWEB, close=False):
        self.send(("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n%s\r\n"
                   % (status, REASONS.get(status, "Status"), ctype,
                      "Connection: close\r\n" if close else "")).encode())

    def chunk(self, data):
        if data:
            self.send(b"%x\r\n" % len(data) + data + b"\r\n")

    def end_chunked(self):
        self.send(b"0\r\n\r\n")

    def peer_closed(self):
        """Non-destructive check whether the client closed (or reset) the connection."""
        if self.closed:
            return True
        try:
            # poll, not select: select() refuses descriptors >= 1024 (a 1,000-stream bench)
            pl = select.poll()
            pl.register(self.sock, select.POLLIN)
            r = pl.poll(0)
        except (OSError, ValueError):
            return True
        if not r:
            return False
        try:
            self.sock.settimeout(0.0)
            d = self.sock.recv(4096)
        except ssl.SSLWantReadError:
            return False
        except (ssl.SSLError, OSError):
            self.closed = True
            return True
        finally:
            try:
                self.sock.settimeout(30)
            except OSError:
                pass
        if not d:
            self.closed = True
            return True
        self.rbuf += d
        S.error("client sent data while a response was streaming", conn=self.cid)
        return False

    def wait(self, seconds, cond=None, pred=None):
        return wait_peer(self, seconds, cond, pred)

    def idle(self, left):
        """wait_peer's sleep when no condition is given: up to `left` seconds."""
        if left > 0.05:
            # a long quiet wait (a held stream): sleep in poll() until the peer closes or
            # sends, instead of waking every 50 ms (1,000 held streams waking 20 times a
            # second keep the interpreter busy and starve new TLS handshakes past the
            # proxy's 10 s connect deadline)
            try:
                pl = select.poll()
                pl.register(self.sock, select.POLLIN)
                pl.poll(min(30.0, left) * 1000)
            except (OSError, ValueError):
                time.sleep(0.05)
        else:
            time.sleep(left)

    def hold(self, seconds):
        """A "hold" step: quiet until POST /release, the peer closes or `seconds` pass, in
        one poll() on the socket and the release pipe (10,000 held streams cost nothing
        until they end). Returns 'closed', 'released' or 'timeout'."""
        end = time.time() + seconds
        with S.lock:
            gen, rel = S.hold_gen, S.release_pipe[0]
        while S.hold_gen == gen:
            if self.peer_closed():
                return "closed"
            left = end - time.time()
            if left <= 0 or S.stop.is_set():
                return "timeout"
            try:
                pl = select.poll()
                pl.register(self.sock, select.POLLIN)
                pl.register(rel, select.POLLIN)
                pl.poll(min(30.0, left) * 1000)
            except (OSError, ValueError):
                time.sleep(0.05)
        return "released"

    def abort(self, close_notify=False, rst=False):
        self.closed = True
        if rst:
            rst_close(self.sock)
            return
        try:
            if close_notify and isinstance(self.sock, ssl.SSLSocket):
                self.sock.settimeout(2)
                self.sock = self.sock.unwrap()
            self.sock.shutdown(socket.SHUT_RDWR)
        except (ssl.SSLError, OSError):
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def wait_peer(peer, seconds, cond=None, pred=None):
    """A run script's wait on a Conn or an H2Stream: sleep up to `seconds`, waking early when
    the peer closes or pred() is true (evaluated under `cond` when given; without `cond` the
    transport's own idle() sleeps). Returns 'closed', 'pred' or 'timeout'."""
    end = time.time() + seconds
    while True:
        if pred is not None:
            if cond is not None:
                with cond:
                    ok = pred()
            else:
                ok = pred()
            if ok:
                return "pred"
        if peer.peer_closed():
            return "closed"
        left = end - time.time()
        if left <= 0 or S.stop.is_set():
            return "timeout"
        if cond is not None:
            with cond:
                cond.wait(min(0.05, left))
        else:
            peer.idle(left)


def first_message_problems(msg, what):
    """What the live server refuses in a run's first message (`what` names it): anything but
    a run request, or one without a conversation state, request context or model id."""
    if msg.get("type") != "run_request":
        return ["%s is %s, not run_request" % (what, msg.get("type"))]
    bad = []
    if not msg["has_conversation_state"]:
        bad.append("run_request without conversation_state (field 1)")
    if not msg["has_request_context"]:
        bad.append("user_message_action without request_context")
    if not msg["model_id"]:
        bad.append("run_request without model_details.model_id")
    return bad


def start_run_head(conn, run, ctype, close=False):
    """The run stream's 200 head (either transport). A client that resets or closes the stream
    before the head goes out (the proxy cancelling a run whose own client left right after it
    started) cancelled the run at its start: recorded as that, not left blank (a blank
    run.stream reads as a run still running)."""
    try:
        conn.start_chunked(200, ctype, close=close)
    except PeerClosed:
        with run.cond:
            appended = run.next_seqno > 0
        run.stream["ended"] = "client_closed" if appended else "client_closed_before_append"
        raise


def stream_peer_closed(ctx, e):
    """A run's stream (either transport) the client closed: recorded on run.stream."""
    run = ctx.run
    if run.stream.get("ended") in (None, "running"):
        run.stream["ended"] = "client_closed"
    run.stream["closed_at_step"] = ctx.step
    run.stream["close_reason"] = str(e)
    S.count("disconnects")
    if not ctx.turn_ended:
        S.count("disconnects_mid_stream")


def stream_done(ctx):
    """A run's stream is over, however it ended: what was sent, on run.stream."""
    S.stream_delta(-1)
    ctx.run.stream["frames_sent"] = ctx.frames
    ctx.run.stream["bytes_sent"] = ctx.bytes
    ctx.run.stream["turn_ended_sent"] = ctx.turn_ended


def rst_close(sock):
    """Close with SO_LINGER 0: the peer gets a TCP RST instead of a FIN (a crashed server,
    a middlebox killing the connection)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized",
           403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
           415: "Unsupported Media Type", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def connect_error(conn, status, code, message, close=False):
    conn.respond(status, json.dumps({"code": code, "message": message}), close=close)
    return status


# ---------------------------------------------------------------------------------------------
# validation helpers

def token_ok(tok):
    if not tok:
        return False, "missing token"
    if tok in S.valid_tokens:
        p = pb.jwt_payload(tok)
        if p and isinstance(p.get("exp"), (int, float)) and p["exp"] <= time.time():
            return False, "token expired"
        return True, ""
    if S.config["accept_any_jwt"]:
        p = pb.jwt_payload(tok)
        if not p:
            return False, "token is not a JWT"
        if not isinstance(p.get("exp"), (int, float)):
            return False, "token has no exp"
        if p["exp"] <= time.time():
            return False, "token expired"
        return True, ""
    return False, "unknown token"


def bearer(req):
    a = req["headers"].get("authorization")
    if a is None:
        return None, "missing authorization header"
    if not a.startswith("Bearer ") or not a[7:].strip():
        return None, "authorization is not 'Bearer <token>'"
    return a[7:], ""


def version_key(v):
    m = VERSION_RE.match(v or "")
    if not m:
        return None
    return tuple(int(x) if x else 0 for x in m.groups())


def outdated_body(use_connect_details=True):
    """(connect code, message, ErrorDetails bytes) of an outdated-client rejection."""
    if int(S.config["outdated_error"]) == 30:
        return "permission_denied", "Outdated client", pb.error_details(
            30, "Outdated Client Error", "Please update Cursor to continue.", is_expected=True)
    return "resource_exhausted", "Error", pb.error_details(
        28, "Update Required", "Your version of Cursor is no longer supported. Please update.",
        is_expected=True, action_required="payment")


def connect_error_details(code, message, details):
    """A Connect error object with one aiserver.v1.ErrorDetails (unpadded base64)."""
    return {"code": code, "message": message, "details": [{
        "type": "aiserver.v1.ErrorDetails",
        "value": base64.b64encode(details).decode().rstrip("=")}]}


def client_outdated(req, run=False):
    """The version floor of every call (min_client_version), and for runs (RunSSE and
    BidiAppend) also min_run_version."""
    got = version_key(req["headers"].get("x-cursor-client-version", ""))
    for floor in (S.config["min_client_version"], S.config["min_run_version"] if run else None):
        if floor and (got is None or got < version_key(floor)):
            return True
    return False


def request_profile(req, agent):
    """grpc-web / connect from the content type of an agent call; None for anything else."""
    ct = req["headers"].get("content-type", "").split(";")[0].strip().lower()
    if not agent:
        return None
    if ct == CT_GRPCWEB:
        return "grpc-web"
    if ct == (CT_CONNECT if req["path"] in (PATH_RUNSSE, "/agent.v1.AgentService/Run")
              else CT_PROTO):
        return "connect"
    if ct == "application/json" and req["path"] == PATH_APPEND:
        return "connect"        # Connect JSON BidiAppend (one peer's HTTP/1.1 form)
    return None


def check_common(conn, req, rec, agent):
    """auth -> content type (profile) -> checksum -> required headers. Returns an HTTP status
    if the request was rejected (response already sent), else None."""
    h = req["headers"]
    tok, why = bearer(req)
    if tok is None:
        S.error("rejected: " + why, path=req["path"])
        return connect_error(conn, 401, "unauthenticated", why)
    ok, why = token_ok(tok)
    if not ok:
        S.error("rejected: " + why, path=req["path"])
        return connect_error(conn, 401, "unauthenticated", why)
    ct = h.get("content-type", "")
    prof = request_profile(req, agent)
    rec["profile"] = prof
    if agent and prof is None or not agent and ct.split(";")[0].strip().lower() \
            != "application/json":
        S.error("rejected: content-type %r" % ct, path=req["path"])
        return connect_error(conn, 415, "unknown", "unsupported content-type %r" % ct)
    if prof in (S.config["unsupported_profiles"] or []):
        # a test marked this profile unsupported: what a server without it answers; not a
        # validation error of the client
        S.count("profile_rejected_" + prof)
        st = int(S.config["unsupported_status"])
        if st != 415:
            conn.respond(st, b"", ctype="text/plain")
            return st
        return connect_error(conn, 415, "unknown", "unsupported content-type %r" % ct)
    if prof == "connect" and h.get("connect-protocol-version") != "1":
        S.error("rejected: Connect request without connect-protocol-version: 1",
                path=req["path"])
        return connect_error(conn, 400, "invalid_argument", "missing connect-protocol-version")
    # The current CLI (Connect) sends no checksum and the live server accepts that; one that
    # is sent must still be right.
    if S.config["require_checksum"] and (prof != "connect" or "x-cursor-checksum" in h):
        cs = h.get("x-cursor-checksum")
        acc = pb.checksum_accepted(tok)
        if cs not in acc:
            S.error("rejected: x-cursor-checksum %r not in %s" % (cs, sorted(acc)),
                    path=req["path"])
            return connect_error(conn, 400, "invalid_argument", "invalid checksum")
    missing = []
    cv = h.get("x-cursor-client-version", "")
    if not cv or (S.config["client_version"] and cv != S.config["client_version"]):
        missing.append("x-cursor-client-version=%r" % cv)
    if h.get("x-cursor-client-type") != "cli":
        missing.append("x-cursor-client-type=%r" % h.get("x-cursor-client-type"))
    if h.get("x-ghost-mode") not in ("true", "false"):
        missing.append("x-ghost-mode=%r" % h.get("x-ghost-mode"))
    # x-cursor-streaming is not required: the CLI sends it on RunSSE only and its HTTP/2 Run
    # goes without (late-autumn notes N6, section 3); the headers are recorded for the tests
    rid = h.get("x-request-id", "")
    if not UUID_RE.match(rid):
        missing.append("x-request-id=%r (want a lowercase UUID v4)" % rid)
    if "host" not in h:
        missing.append("host")
    if missing:
        S.error("rejected: bad headers: " + ", ".join(missing), path=req["path"])
        return connect_error(conn, 400, "invalid_argument", "bad headers: " + ", ".join(missing))
    rec["token_sha"] = hashlib.sha256(tok.encode()).hexdigest()[:8]
    return None


# ---------------------------------------------------------------------------------------------
# endpoints

def append_reply(conn, prof, as_json=False):
    if as_json:
        conn.respond(200, b"{}")                  # empty BidiAppendResponse, Connect JSON
    elif prof == "connect":
        conn.respond(200, b"", ctype=CT_PROTO)    # empty BidiAppendResponse
    else:
        conn.respond(200, pb.envelope(b"") + pb.trailer(0), ctype=CT_GRPCWEB)


def h_append(conn, req, rec):
    st = check_common(conn, req, rec, True)
    if st:
        return st
    prof = rec["profile"]
    if client_outdated(req, run=True):
        code, msg, det = outdated_body()
        S.count("outdated_rejections")
        conn.respond(429 if code == "resource_exhausted" else 403,
                     json.dumps(connect_error_details(code, msg, det)))
        return 429
    enc = req["headers"].get("content-encoding") or req["headers"].get("grpc-encoding") or ""
    if (enc and enc.lower() != "identity") or (prof == "grpc-web" and req["body"][:1]
                                                and req["body"][0] & 1):
        # a compressed message: the live server ignores it (a live report: gzip "is ignored
        # ... and the turn parks"); acknowledged, never delivered
        S.error("compressed BidiAppend (%s): ignored, the run parks"
                % (enc or "grpc-web compressed flag"))
        S.count("compressed_appends")
        if prof == "grpc-web":
            conn.respond(200, pb.envelope(b"") + pb.trailer(0), ctype=CT_GRPCWEB)
        else:
            conn.respond(200, b"", ctype=CT_PROTO)
        return 200
    try:
        if req["headers"].get("content-type", "").split(";")[0].strip() == "application/json":
            # Connect JSON: {"data": hex, "requestId": {"requestId"}, "appendSeqno": "N"}
            # (proto3 JSON: int64 as a string, 0 may be omitted)
            j = json.loads(req["body"])
            if not isinstance(j, dict) or not isinstance(j.get("requestId"), dict):
                raise pb.PBError("not a BidiAppendRequest JSON object")
            seq = j.get("appendSeqno", "0")
            if not isinstance(seq, str) or not seq.isdigit():
                raise pb.PBError("appendSeqno %r is not an int64 string" % (seq,))
            ap = {"data_hex": j.get("data"), "request_id": j["requestId"].get("requestId"),
                  "append_seqno": int(seq)}
            rec["append_json"] = True
        else:
            # grpc-web: an envelope; Connect unary: the bare message
            payload = pb.unenvelope(req["body"]) if prof == "grpc-web" else req["body"]
            ap = pb.dec_bidi_append(payload)
    except (pb.PBError, ValueError) as e:
        S.error("BidiAppend body: %s" % e)
        return connect_error(conn, 400, "invalid_argument", "bad body: %s" % e)
    rec["decoded"] = dict(ap, data_hex=None, data_hex_len=len(ap["data_hex"] or ""))
    rid = ap["request_id"]
    if rid != req["headers"].get("x-request-id"):
        S.error("BidiAppendRequest.request_id %r != x-request-id %r"
                % (rid, req["headers"].get("x-request-id")))
        return connect_error(conn, 400, "invalid_argument", "request id mismatch")
    if ap["append_seqno"] is None:
        S.error("BidiAppendRequest without append_seqno (must be written even when 0)")
        return connect_error(conn, 400, "invalid_argument", "missing append_seqno")
    data = ap["data_hex"]
    if data is None or not data or not HEX_RE.match(data):
        S.error("BidiAppendRequest.data is not lowercase hex", sample=(data or "")[:40])
        return connect_error(conn, 400, "invalid_argument", "data is not lowercase hex")
    try:
        msg = pb.dec_client_message(bytes.fromhex(data))
    except (pb.PBError, ValueError) as e:
        S.error("AgentClientMessage does not parse: %s" % e)
        return connect_error(conn, 400, "invalid_argument", "bad AgentClientMessage: %s" % e)
    rec["decoded"]["message"] = msg
    run = S.run(rid)
    seq = ap["append_seqno"]
    with run.cond:
        if run.profile and prof != run.profile:
            S.error("BidiAppend profile %s differs from the run's %s" % (prof, run.profile),
                    request_id=rid)
        if seq > run.next_seqno:
            # Appends are independent unary calls that carry their seqno; a later one can
            # overtake an earlier one still on its way (a peer sends heartbeats
            # fire-and-forget, cursor-2026-clients.md 2). The run takes them in seqno order:
            # this one waits for the gap to fill, and a gap that never fills is an error.
            end = time.time() + S.config["append_gap_s"]
            S.count("appends_overtaking")
            while seq > run.next_seqno and time.time() < end:
                run.cond.wait(min(0.05, max(0.0, end - time.time())))
        if seq != run.next_seqno:
            S.error("append_seqno %d out of order (expected %d)" % (seq, run.next_seqno),
                    request_id=rid)
            return connect_error(conn, 400, "invalid_argument", "append_seqno out of order")
        if seq == 0:
            bad = first_message_problems(msg, "seqno 0")
            if bad:
                for b in bad:
                    S.error(b, request_id=rid)
                return connect_error(conn, 400, "invalid_argument", "; ".join(bad))
            if run.dropped:
                S.error("append_seqno 0 repeated for a dropped run", request_id=rid)
                return connect_error(conn, 400, "invalid_argument", "append_seqno out of order")
            if not run.registered:
                # The append raced ahead of the RunSSE's registration: the server has no run
                # to give it to and loses it (cursor-2026-clients.md 7.1); the run never
                # starts.
                run.dropped = True
                S.count("runs_dropped")
                S.error("seqno-0 append before its RunSSE was registered: run dropped",
                        request_id=rid)
                run.cond.notify_all()
                append_reply(conn, prof, rec.get("append_json"))
                return 200
            run.run_request = msg
            check_images(run)
            pick_scenario(run)
        elif msg.get("type") == "run_request":
            S.error("run_request at append_seqno %d" % seq, request_id=rid)
        run.next_seqno = seq + 1
        entry = {"seqno": seq, "t": time.time(), "message": msg, "message_hex": data}
        fail = (run.scenario or {}).get("append_status")
        if fail and int(fail.get("seqno", 0)) == seq:
            entry["rejected_with"] = fail["status"]
            run.append_error = (fail["status"], fail.get("code", "internal"),
                                fail.get("message", ""))
        run.appends.append(entry)
        run.cond.notify_all()
    if fail and int(fail.get("seqno", 0)) == seq:
        return connect_error(conn, fail["status"], fail.get("code", "internal"),
                             fail.get("message", ""))
    stall = (run.scenario or {}).get("append_stall")
    if stall and seq >= int(stall.get("min_seqno", 1)) and (
            not stall.get("types") or msg.get("type") in stall["types"]
            or "%s/%s" % (msg.get("type"), msg.get("kind")) in stall["types"]):
        # The append was taken (the run has it), but its answer does not come: a stalled
        # BidiAppend endpoint or connection, until the client gives up.
        S.count("appends_stalled")
        entry["stalled"] = True
        r = conn.wait(float(stall.get("s", 300)))
        entry["stall_result"] = r
        if r == "closed":
            return 499
    if seq == 0:
        slow = slow_answer(conn, "append0")
        if slow is not None:
            return slow
    append_reply(conn, prof, rec.get("append_json"))
    return 200


def image_facts(data):
    """(mime, width, height, problem) from the bytes, decoded here independently of the proxy:
    PNG chunks with CRCs and the zlib image data inflated to exactly height * (1 + width * bpp)
    bytes; GIF/JPEG/WebP by magic and header."""
    import struct
    import zlib
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        pos, w, h, idat, bpp = 8, None, None, b"", None
        while pos + 12 <= len(data):
            ln, = struct.unpack(">I", data[pos:pos + 4])
            typ, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + ln]
            crc, = struct.unpack(">I", data[pos + 8 + ln:pos + 12 + ln] or b"\0\0\0\0")
            if len(body) != ln or zlib.crc32(typ + body) & 0xffffffff != crc:
                return "image/png", w, h, "bad chunk %r" % typ
            if typ == b"IHDR":
                w, h, depth, color = struct.unpack(">IIBB", body[:10])
                bpp = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color, 0) * max(1, depth // 8)
            elif typ == b"IDAT":
                idat += body
            elif typ == b"IEND":
                break
            pos += 12 + ln
        try:
            raw = zlib.decompress(idat)
        except zlib.error as e:
            return "image/png", w, h, "IDAT does not inflate: %s" % e
        if w is None or len(raw) != h * (1 + w * bpp):
            return "image/png", w, h, "pixel data is %d bytes" % len(raw)
        return "image/png", w, h, None
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg", None, None, None
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif", data[6] | data[7] << 8, data[8] | data[9] << 8, None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", None, None, None
    if data[:2] == b"BM" and len(data) >= 26:
        # BMP (allowed since 2026: png/jpeg/gif/webp/bmp, notes 2026-autumn §5.8)
        dib, = struct.unpack("<I", data[14:18])
        if dib == 12:
            w, h = struct.unpack("<HH", data[18:22])
        else:
            w, h = struct.unpack("<ii", data[18:26])
        return "image/bmp", w, abs(h), None
    return None, None, None, "not an image Cursor takes"


def check_images(run):
    """What the real server would refuse: blob ids it never saw ("Image not found"), empty or
    non-image data, a mime type that does not match the bytes, wrong dimensions."""
    for i, im in enumerate(run.run_request.get("images") or []):
        if "unexpected_field" in im:
            S.error("SelectedContext field %d is not selected_images" % im["unexpected_field"],
                    request_id=run.rid)
            continue
        if im["has_blob_id"] or im["has_blob_id_with_data"]:
            S.error("image %d uses a blob id: Image not found" % i, request_id=run.rid)
        data = im.pop("_data", None)    # raw bytes stay out of the JSON records
        if not data:
            S.error("image %d has no data (field 8)" % i, request_id=run.rid)
            continue
        mime, w, h, problem = image_facts(data)
        if problem:
            S.error("image %d: %s" % (i, problem), request_id=run.rid)
        if im["mime_type"] != mime:
            S.error("image %d: mime_type %r but the bytes are %r" % (i, im["mime_type"], mime),
                    request_id=run.rid)
        if w is not None and (im["width"], im["height"]) not in ((w, h), (None, None)):
            S.error("image %d: dimension %sx%s but the image is %dx%d"
                    % (i, im["width"], im["height"], w, h), request_id=run.rid)
        if not UUID_RE.match(im["uuid"]):
            S.error("image %d: uuid %r is not a UUID" % (i, im["uuid"]), request_id=run.rid)


def images_text(run):
    """The echo_images answer: what arrived, so a client can check it end to end. Cursor
    ignores inline image data unless the run request sets client_supports_inline_images (19)
    (notes 2026-autumn §5.8): without it the model sees no image."""
    ims = run.run_request.get("images") or []
    if ims and not run.run_request.get("client_supports_inline_images"):
        return "IMAGES 0: ignored (%d inline, client_supports_inline_images not set)" % len(ims)
    parts = []
    for im in ims:
        parts.append("%s %sx%s %sB sha256:%s" % (im.get("mime_type"), im.get("width"),
                                                im.get("height"), im.get("data_len"),
                                                (im.get("data_sha256") or "-")[:16]))
    return "IMAGES %d: %s" % (len(ims), "; ".join(parts))


def pick_scenario(run):
    model = run.run_request.get("model_id") or ""
    name = None
    if model.startswith("scenario:"):
        name = model[len("scenario:"):]
    else:
        with S.lock:
            if S.next_scenarios:
                name = S.next_scenarios.pop(0)
        if name is None:
            name = S.config["default_scenario"]
    run.scenario_name = name
    with S.lock:
        S.attempts[name] = S.attempts.get(name, 0) + 1
        run.attempt = S.attempts[name]
    if name.startswith("long:") and name[5:].isdigit():
        run.scenario = long_scenario(int(name[5:]))
    elif name in S.scenarios:
        run.scenario = S.scenarios[name]
    else:
        S.error("unknown scenario %r" % name, request_id=run.rid)
        run.scenario = {"steps": [{"op": "trailer", "status": 5,
                                   "message": "unknown scenario " + name}]}


def runsse_end(conn, prof, status=0, message=None, details=None):
    """The last frame of a RunSSE in the run's profile: a gRPC-web trailer, or a Connect
    end-stream JSON (details: ErrorDetails bytes)."""
    if prof == "connect":
        if status == 0:
            return pb.end_stream({})
        err = {"code": CONNECT_CODES[status] if 0 < status < len(CONNECT_CODES) else "unknown",
               "message": message or ""}
        if details is not None:
            err = dict(connect_error_details(err["code"], err["message"], details))
        return pb.end_stream({"error": err})
    det = None
    if details is not None:
        det = pb.rpc_status(status, message or "", [(pb.ERROR_DETAILS_TYPE, details)])
    return pb.trailer(status, message, det)


def h_runsse(conn, req, rec):
    st = check_common(conn, req, rec, True)
    if st:
        return st
    prof = rec["profile"]
    ctype = CT_CONNECT if prof == "connect" else CT_GRPCWEB
    try:
        rid = pb.dec_bidi_request_id(pb.unenvelope(req["body"]))
    except pb.PBError as e:
        S.error("RunSSE body: %s" % e)
        return connect_error(conn, 400, "invalid_argument", "bad body: %s" % e)
    rec["decoded"] = {"request_id": rid}
    if rid != req["headers"].get("x-request-id"):
        S.error("BidiRequestId %r != x-request-id %r" % (rid, req["headers"].get("x-request-id")))
        return connect_error(conn, 400, "invalid_argument", "request id mismatch")
    run = S.run(rid)
    with run.cond:
        run.runsse_count += 1
        if run.runsse_count > 1:
            S.error("second RunSSE for request id %s" % rid)
            return connect_error(conn, 409, "already_exists", "duplicate request id")
        run.profile = prof
        run.allowed_tools = req["headers"].get("x-cursor-agent-allowed-tools")
    if client_outdated(req, run=True):
        # decided before the run exists: a stream that ends at once with the error
        code, msg, det = outdated_body()
        S.count("outdated_rejections")
        run.stream["ended"] = "outdated_client"
        conn.start_chunked(200, ctype)
        conn.chunk(runsse_end(conn, prof, CONNECT_CODES.index(code), msg, det))
        conn.end_chunked()
        return 200
    if S.config["agent_host_only"] and conn.listener != "agent":
        # the wrong regional host: HTTP 200, no frame, an OK end naming the region, close
        S.count("region_rejections")
        run.stream["ended"] = "wrong_region"
        conn.start_chunked(200, ctype)
        if prof == "connect":
            conn.chunk(pb.end_stream({"metadata": {"x-cursor-message": [REGION_MESSAGE]}}))
        else:
            conn.chunk(pb.trailer(0, REGION_MESSAGE))
        conn.end_chunked()
        conn.abort()
        return 200
    # RunSSE-level behaviour is decided before the run request (and its model) arrives.
    pre = S.config["runsse_scenario"]
    sc0 = S.scenarios.get(pre, {}) if pre else {}
    if sc0.get("headers_stall"):
        run.stream["ended"] = "headers_stall"
        r = conn.wait(float(sc0.get("max_s", S.config["stall_max_s"])))
        run.stream["stall_result"] = r
        if r == "closed":
            S.count("disconnects")
            S.count("disconnects_mid_stream")
        conn.abort()
        return 0
    raw = sc0.get("runsse_response")
    if raw:   # any status / content type / body, e.g. a proxy's or CDN's HTML error page
        conn.respond(int(raw["status"]), raw.get("body", ""),
                     ctype=raw.get("content_type", "text/html"), close=bool(raw.get("close")))
        return int(raw["status"])
    fail = sc0.get("runsse_status")
    if fail:
        return connect_error(conn, fail["status"], fail.get("code", "internal"),
                             fail.get("message", ""))
    # Register the run (after the configured delay), then answer with the 200 head at once:
    # the client sends the seqno-0 append only after seeing it.
    delay = float(S.config["register_delay_s"])
    if delay and conn.wait(delay) == "closed":
        run.stream["ended"] = "client_closed_before_register"
        return 0
    with run.cond:
        run.registered = True
        run.cond.notify_all()
    close = bool(S.config["runsse_close"])
    start_run_head(conn, run, ctype, close)
    S.count("streams_started")
    S.stream_delta(1)
    ctx = StreamCtx(conn, run)
    try:
        r = conn.wait(S.config["append_wait_s"], run.cond, lambda: run.next_seqno > 0 or
                      run.append_error is not None or run.dropped)
        if r == "closed":
            run.stream["ended"] = "client_closed_before_append"
            S.count("runsse_closed_before_append")
            raise PeerClosed("closed before the append")
        if run.dropped:
            # the run request was lost: the stream stays open with heartbeats only
            run.stream["ended"] = "dropped"
            while conn.wait(1.0) != "closed":
                if time.time() - run.created > S.config["stall_max_s"]:
                    break
                _send(ctx, pb.envelope(pb.m_heartbeat()))
            raise PeerClosed("dropped run given up")
        if r == "timeout":
            S.error("no append_seqno 0 within %.1fs for %s" % (S.config["append_wait_s"], rid))
            conn.chunk(runsse_end(conn, prof, 3, "no run request arrived"))
            conn.end_chunked()
            run.stream["ended"] = "no_append"
            return 200
        if run.append_error is not None:
            status, code, msg = run.append_error
            conn.chunk(runsse_end(conn, prof, CONNECT_CODES.index(code)
                                  if code in CONNECT_CODES else 2, msg))
            conn.end_chunked()
            run.stream["ended"] = "append_rejected"
            return 200
        sc = run.scenario or {}
        rec["scenario"] = run.scenario_name
        for k in ("runsse_status", "runsse_response", "headers_stall"):
            if sc.get(k):
                S.error("scenario %r decides the RunSSE answer: select it with the "
                        "runsse_scenario config, not the model" % run.scenario_name,
                        request_id=rid)
        steps = select_steps(sc, run.run_request, run.attempt)
        run.stream["ended"] = "running"
        run_steps(ctx, steps)
        if not ctx.finished:
            conn.end_chunked()
            ctx.finished = True
        if close:
            # handle_conn ends the connection after this request, with a close_notify as a
            # server that answered "Connection: close" does (an unclean close would also
            # make OpenSSL drop the TLS session from its cache)
            conn.closed = True
            conn.close_notify = True
        run.stream["ended"] = "completed"
        S.count("streams_completed")
    except PeerClosed as e:
        stream_peer_closed(ctx, e)
        conn.abort()
    finally:
        stream_done(ctx)
    return 200


def select_steps(sc, rr, attempt=None):
    prompt = (rr or {}).get("prompt") or ""
    has_tools = bool((rr or {}).get("tools") or (rr or {}).get("mcp_tools"))
    for w in sc.get("when", []):
        if "prompt_contains" in w and w["prompt_contains"] not in prompt:
            continue
        if "has_tools" in w and bool(w["has_tools"]) != has_tools:
            continue
        # resumed: the run request carries a non-empty conversation_state (a checkpoint)
        resumed = bool((rr or {}).get("conversation_state_hex"))
        if "resumed" in w and bool(w["resumed"]) != resumed:
            continue
        # attempt: the n-th run of this scenario since the last reset (1-based)
        if "attempt" in w and int(w["attempt"]) != (attempt or 0):
            continue
        # state_mode_not: the conversation_state does not set ConversationStateStructure.mode
        # (10) to this value: what a server that wants "mode: AGENT" on a first turn refuses
        # with "Conversation state is required" (late-autumn notes N7, C8)
        if "state_mode_not" in w:
            cs = bytes.fromhex((rr or {}).get("conversation_state_hex") or "")
            try:
                mode = pb.last(pb.parse(cs), 10, pb.WT_VARINT)
            except Exception:
                mode = None
            if mode == int(w["state_mode_not"]):
                continue
        return w.get("steps", [])
        return w.get("steps", [])
    return sc.get("steps", SCENARIOS["default"]["steps"])


class StreamCtx:
    def __init__(self, conn, run):
        self.conn = conn
        self.run = run
        self.step = 0
        self.frames = 0
        self.bytes = 0
        self.turn_ended = False
        self.finished = False
        self.append_cursor = len(run.appends)
        self.pending = []          # execs held for the client (op "exec" with "hold")
        self.exec_cursor = None    # appends index when the last exec was sent


def _send(ctx, data, split=0):
    if split:
        for i in range(0, len(data), split):
            ctx.conn.chunk(data[i:i + split])
    else:
        ctx.conn.chunk(data)
    ctx.bytes += len(data)


def build_frame(st, run):
    """One step -> frame bytes (or None if the op is not a plain frame). A step may carry
    "unknown": [{"at": [field numbers], "field": N, "wire": W}, ...]: fields this product's
    schema does not declare, added to its message where `at` leads (a data frame only)."""
    return with_unknown(st, _build_frame(st, run))


def with_unknown(st, fr):
    """fr (a data frame, or None) with the step's "unknown" fields added."""
    if fr is not None and st.get("unknown") and fr[:1] == b"\x00":
        msg = fr[5:]
        for u in st["unknown"]:
            msg = pb.add_unknown(msg, list(u.get("at", [])), int(u["field"]),
                                 int(u.get("wire", 0)))
        fr = pb.envelope(msg)
    return fr


def _build_frame(st, run):
    op = st["op"]
    if op == "variant":
        # a oneof member the product does not know: {"at": [1], "field": 40} is an
        # InteractionUpdate kind 40; "id" sets field 1 (ExecServerMessage, InteractionQuery)
        return pb.envelope(pb.m_variant(list(st.get("at", [])), int(st["field"]),
                                        bytes.fromhex(st.get("body_hex", "")),
                                        st.get("id")))
    if op == "images_text":     # what arrived in selected_context (see images_text())
        return pb.envelope(pb.m_text(images_text(run)))
    if op == "text":
        # text_hex: raw bytes (e.g. half of a UTF-8 character); repeat: one big delta
        t = bytes.fromhex(st["text_hex"]) if "text_hex" in st else st["text"]
        return pb.envelope(pb.m_text(t * int(st.get("repeat", 1))))
    if op == "thinking":
        return pb.envelope(pb.m_thinking(st["text"]))
    if op == "thinking_completed":
        return pb.envelope(pb.m_thinking_completed(int(st.get("ms", 0))))
    if op == "token_delta":
        return pb.envelope(pb.m_token_delta(int(st.get("tokens", 1))))
    if op == "heartbeat":
        return pb.envelope(pb.m_heartbeat())
    if op == "turn_ended":
        # tokens: [input, output, cache_read, cache_write, reasoning] (2026 TurnEndedUpdate)
        return pb.envelope(pb.m_turn_ended(st.get("tokens")))
    if op == "step_completed":
        return pb.envelope(pb.m_step_completed(int(st.get("id", 1)), int(st.get("ms", 0))))
    if op == "step_started":
        return pb.envelope(pb.m_step_started(int(st.get("id", 1))))
    if op == "checkpoint":
        return pb.envelope(pb.m_checkpoint(
            [x.encode() if isinstance(x, str) else bytes(x)
             for x in st.get("root_prompt_messages_json", ['{"role":"system"}'])],
            st.get("used_tokens"), st.get("max_tokens"),
            st.get("pending_tool_calls", ())))
    if op in ("tool_call", "tool_call_completed"):
        return pb.envelope(pb.m_tool_call("started", st.get("call_id", "call-1"), st["tool"],
                                          exec_args(dict(st.get("args", {}),
                                                         kind=tool_kind(st["tool"]))),
                                          st.get("model_call_id", ""),
                                          completed=(op == "tool_call_completed")))
    if op == "partial_tool_call":
        return pb.envelope(pb.m_partial_tool_call(st.get("call_id", "call-1"), st["delta"]))
    if op == "exec_abort":
        return pb.envelope(pb.m_exec_abort(int(st.get("id", 1))))
    if op == "interaction_query" and not st.get("wait_reply"):   # else run_step waits
        return pb.envelope(pb.m_interaction_query(int(st.get("id", 1)),
                                                  st.get("kind", "web_search")))
    if op == "trailer" and run is not None and run.profile == "connect":
        # the same outcome as a Connect end-stream frame
        d = st.get("details")
        det = None
        if isinstance(d, dict):
            det = pb.error_details(int(d.get("error", 0)), d.get("title", ""),
                                   d.get("detail", ""), d.get("is_retryable"),
                                   d.get("is_expected"), d.get("additional_info"),
                                   d.get("action_required"))
        return runsse_end(None, "connect", int(st.get("status", 0)), st.get("message"), det)
    if op == "trailer":
        d = st.get("details")
        det = None
        if isinstance(d, dict):
            det = pb.rpc_status(int(st.get("status", 0)), st.get("message", ""), [(
                pb.ERROR_DETAILS_TYPE, pb.error_details(
                    int(d.get("error", 0)), d.get("title", ""), d.get("detail", ""),
                    d.get("is_retryable"), d.get("is_expected"), d.get("additional_info"),
                    d.get("action_required")))])
        elif isinstance(d, str):
            det = d
        return pb.trailer(int(st.get("status", 0)), st.get("message"), det, st.get("extra"))
    if op == "end_stream":
        return pb.end_stream(st.get("json"))
    if op == "raw":
        return bytes.fromhex(st["hex"])
    if op == "raw_frame":
        # pad: that many zero bytes after payload_hex (an oversized frame sent in full)
        payload = bytes.fromhex(st.get("payload_hex", "")) + bytes(int(st.get("pad", 0)))
        ln = st.get("length", len(payload))
        return bytes([st.get("flags", 0)]) + int(ln).to_bytes(4, "big") + payload
    return None


def tool_kind(tool):
    return {"shell": "shell", "read": "read", "ls": "ls", "grep": "grep", "glob": "grep",
            "mcp": "mcp", "edit": "write", "delete": "read"}.get(tool, "read")


def exec_args(st):
    k = st["kind"]
    if k in ("shell", "shell_stream"):
        return pb.a_shell(st.get("command", ""), st.get("cwd", ""), int(st.get("timeout", 0)),
                          st.get("tool_call_id", ""), int(st.get("timeout_behavior", 0)),
                          int(st.get("hard_timeout", 0)), st.get("description", ""),
                          bool(st.get("close_stdin")), st.get("conversation_id", ""),
                          st.get("request_id", ""))
    if k == "mcp_state":
        return pb.a_mcp_state(st.get("server_identifiers", ()))
    if k == "read":
        return pb.a_read(st.get("path", ""), st.get("tool_call_id", ""))
    if k == "ls":
        return pb.a_ls(st.get("path", ""), st.get("ignore", ()), st.get("tool_call_id", ""))
    if k == "grep":
        return pb.a_grep(st.get("pattern", ""), st.get("path"), st.get("glob"),
                         st.get("output_mode"), st.get("tool_call_id", ""))
    if k == "write":
        return pb.a_write(st.get("path", ""), st.get("file_text", ""), st.get("tool_call_id", ""),
                          bool(st.get("return_content", False)))
    if k == "mcp":
        args = dict(st.get("args", {}))
        # raw bytes (invalid UTF-8 included) for string values: {"key": "hex"}
        args.update({a: bytes.fromhex(v) for a, v in st.get("args_raw_hex", {}).items()})
        return pb.a_mcp(st["tool_name"], args, st.get("tool_call_id", ""),
                        st.get("provider_identifier", "cursor-tools"))
    if k == "request_context":
        return pb.a_request_context(st.get("notes_session_id"), st.get("workspace_id"))
    if k in pb.EXEC_FIELD or isinstance(k, int):
        return bytes.fromhex(st.get("args_hex", ""))
    raise ValueError("unknown exec kind %r" % k)


def new_appends(ctx):
    a = ctx.run.appends[ctx.append_cursor:]
    return a


def wait_append(ctx, pred, timeout):
    """Wait until an append after the cursor satisfies pred; returns it or None."""
    found = []

    def check():
        for a in ctx.run.appends[ctx.append_cursor:]:
            if pred(a["message"]):
                found.append(a)
                return True
        return False
    r = ctx.conn.wait(timeout, ctx.run.cond, lambda: check() or ctx.run.h2_reject is not None)
    if r == "closed":
        raise PeerClosed("closed while waiting for an append")
    if ctx.run.h2_reject is not None and not found:
        raise H2Rejected()
    return found[0] if found else None


class H2Rejected(Exception):
    """A message on an HTTP/2 Run stream was rejected: the stream ends with the error."""


def stall(ctx, why, max_s=None):
    """What the live server does when the exec/stream protocol is not satisfied (notes §4):
    heartbeats only, never another word, until the client gives up."""
    run = ctx.run
    run.stream["stalled"] = why
    S.count("stalls")
    sys.stderr.write("fake_cursor: run %s stalls: %s\n" % (run.rid, why))
    end = time.time() + float(max_s or S.config["stall_max_s"])
    while time.time() < end:
        _send(ctx, pb.envelope(pb.m_heartbeat()))
        if ctx.conn.wait(1.0) == "closed":
            raise PeerClosed("closed during a stall (%s)" % why)
    ctx.finished = True
    ctx.conn.abort()


# result type the CLI sends for each exec kind (then stream_close)
CLI_RESULT = {"shell": "shell_result", "read": "read_result", "write": "write_result",
              "ls": "ls_result", "grep": "grep_result", "mcp": "mcp_result",
              "delete": "delete_result", "fetch": "fetch_result"}


def check_exec_answer(p, msgs):
    """The CLI's answer to one exec (notes §1): '' when right, else what is wrong."""
    kind, eid, xid = p["kind"], p["id"], p["exec_id"]
    if not msgs or msgs[-1].get("type") != "exec_control" or msgs[-1].get("kind") != "stream_close":
        return "no stream_close after the result"
    body = msgs[:-1]
    for m in body:
        if m.get("type") != "exec_result":
            return "%s before stream_close" % m.get("type")
        if m.get("exec_id") != xid:
            return "exec_id %r on a result frame (want %r)" % (m.get("exec_id"), xid)
    if kind == "shell_stream":
        seq = [(m.get("result"), m.get("variant")) for m in body]
        if not seq or seq[0] != ("shell_stream", "start"):
            return "shell_stream answer does not begin with start: %r" % (seq,)
        if seq[-1] != ("shell_stream", "exit"):
            return "shell_stream answer does not end with exit: %r" % (seq,)
        mid = seq[1:-1]
        if any(x not in (("shell_stream", "stdout"), ("shell_stream", "stderr")) for x in mid):
            return "unexpected frames inside a shell stream: %r" % (seq,)
        return ""
    want = CLI_RESULT.get(kind)
    if len(body) != 1:
        return "%d result frames (want one %s)" % (len(body), want)
    if body[0].get("result") != want:
        return "mis-typed result %r for a %s exec (want %s)" % (body[0].get("result"), kind,
                                                                 want)
    if want == "delete_result" and body[0].get("variant") == "success" \
            and not (body[0].get("fields") or {}).get("file_size"):
        # notes 2026-autumn §4: a delete result with file_size 0 stalls the turn. A 0 and no
        # file_size are the same bytes, and nothing tells an empty file's genuine 0 apart
        # from a size nobody reported, so every success without a size stalls here.
        return "delete_result success without file_size (0 stalls the live turn)"
    return ""


def result_text(msgs):
    out = []
    for m in msgs:
        if m.get("type") != "exec_result" or m.get("variant") not in (
                "stdout", "stderr", "success", "error", "failure"):
            continue
        if m.get("mcp_items") is not None:        # an MCP success: its text items
            out.extend(it["text"] or "" for it in m["mcp_items"] if "text" in it)
        else:
            out.extend(m.get("strings") or [])
    return "\n".join(x for x in out if x)


def result_outcome(msgs):
    """What the CLI reported about a shell or read exec, field by field: exit_code, stdout,
    stderr (shell_result or the shell_stream frames), content, total_lines, file_size (read).
    {} for other kinds."""
    out = {}
    for m in msgs:
        if m.get("shell"):
            out.update(m["shell"])
        if m.get("read"):
            out.update(m["read"])
        if m.get("result") == "shell_stream" and m.get("variant") in ("stdout", "stderr"):
            out[m["variant"]] = out.get(m["variant"], "") + m.get("data", "")
        if m.get("exit"):
            out["exit_code"] = m["exit"]["code"]
    return out


def result_fields(msgs):
    """The typed fields of one exec's answer (pbwire.RESULT_FIELDS), a shell stream's frames
    joined: stdout / stderr concatenated, exit_code from its exit frame; plus "variant" (the
    result's success / failure / error) and "result"."""
    out = {}
    for m in msgs:
        if m.get("type") != "exec_result":
            continue
        f = m.get("fields") or {}
        if m.get("result") == "shell_stream":
            for k in ("stdout", "stderr"):
                if k in f:
                    out[k] = out.get(k, "") + f[k]
            if m.get("variant") == "exit":
                out["exit_code"] = (m.get("exit") or {}).get("code", 0)
                out["variant"] = "success" if out["exit_code"] == 0 else "failure"
        else:
            out.update(f)
            out["variant"] = m.get("variant")
        out["result"] = m.get("result")
    return out


class _Blank(dict):
    def __missing__(self, k):
        return ""


def from_result(run, spec):
    """spec {"id": N, "template": "...{field}..."}: the template filled from exec N's result
    fields (result_fields; a missing field is empty). How the scripted model "reads" a
    result: what it writes or answers next is built from what the proxy sent."""
    res = run.exec_results.get(str(int(spec.get("id", 1))), {})
    return spec.get("template", "{content}").format_map(_Blank(res.get("fields") or {}))


def result_images(msgs):
    """McpImageContent items of an MCP result, each checked as the live server would check
    an image it cannot read (the same facts as selected images): [{mime_type, bytes, problem}]."""
    out = []
    for m in msgs:
        for it in m.get("mcp_items") or []:
            if "image_hex" not in it:
                continue
            data = bytes.fromhex(it["image_hex"])
            mime, w, h, problem = image_facts(data)
            if not problem and it["mime_type"] and it["mime_type"] != mime:
                problem = "mime_type %r but the bytes are %r" % (it["mime_type"], mime)
            out.append({"mime_type": it["mime_type"], "bytes": len(data), "width": w,
                        "height": h, "problem": problem})
    return out


def await_results(ctx, max_s, hb_s):
    """Wait (server heartbeats every hb_s) for the answers to every held exec, in exec order.
    Anything the CLI would not send -> the turn stalls, as the live server's does."""
    run = ctx.run
    pend = list(ctx.pending)
    ctx.pending = []
    end = time.time() + max_s
    run.stream["held"] = run.stream.get("held", 0) + 1
    S.count("held_waits")
    def all_closed():
        closed = set()
        for p in pend:
            for a in run.appends[p["cursor"]:]:
                m = a["message"]
                if m.get("type") == "exec_control" and m.get("kind") == "stream_close" \
                        and m.get("id") == p["id"]:
                    closed.add(p["id"])
        return all(p["id"] in closed for p in pend)
    while True:
        w = ctx.conn.wait(hb_s, run.cond, all_closed)
        if w == "pred":
            break
        if w == "closed":
            raise PeerClosed("closed while waiting for tool results")
        if time.time() > end:
            return stall(ctx, "results for %s never completed" % [p["id"] for p in pend])
        _send(ctx, pb.envelope(pb.m_heartbeat()))
    # every exec got its stream_close: check each answer and their order
    order = []
    with run.cond:
        start = min(p["cursor"] for p in pend)
        msgs = [a["message"] for a in run.appends[start:]]
    ids = {p["id"] for p in pend}
    for m in msgs:
        if m.get("type") in ("exec_result", "exec_control") and m.get("kind") != "heartbeat" \
                and m.get("id") in ids:
            if not order or order[-1] != m.get("id"):
                order.append(m.get("id"))
    if order != [p["id"] for p in pend]:
        return stall(ctx, "results not in exec order: %r" % order)
    for p in pend:
        mine = [m for m in msgs if m.get("type") in ("exec_result", "exec_control")
                and m.get("kind") != "heartbeat" and m.get("id") == p["id"]]
        why = check_exec_answer(p, mine)
        run.exec_results[str(p["id"])] = {"ok": not why, "why": why, "text": result_text(mine),
                                          "mcp_is_error": any(m.get("mcp_is_error")
                                                              for m in mine),
                                          "fields": result_fields(mine),
                                          "images": result_images(mine),
                                          "outcome": result_outcome(mine),
                                          "frames": [(m.get("result") or m.get("kind"),
                                                      m.get("variant")) for m in mine],
                                          "local_execution_time_ms": [
                                              m.get("local_execution_time_ms") for m in mine
                                              if m.get("type") == "exec_result"]}
        if why:
            return stall(ctx, "exec %d: %s" % (p["id"], why))
    if any(m.get("type") == "action" and m.get("kind") == "resume" for m in msgs):
        return stall(ctx, "ResumeAction on a held run")
    S.count("held_results_ok")


def exec_replies(ctx, eid, wait_s):
    """The client's answers to exec eid (results and controls, in order) until its
    stream_close or wait_s; kept in run.exec_replies."""
    got = []

    def done(m):
        if m.get("type") in ("exec_result", "exec_control") and m.get("id") == eid:
            if m not in got:
                got.append(m)
            return m.get("type") == "exec_control" and m.get("kind") == "stream_close"
        return False
    wait_append(ctx, done, wait_s)
    ctx.run.exec_replies[eid] = got
    return got


def exec_expect_throw(ctx, eid, wait_s):
    """An exec the client cannot run: the CLI sends throw{id} then stream_close{id}; the
    live server waits (heartbeats only) for anything else (notes §1, §4)."""
    got = exec_replies(ctx, eid, wait_s)
    kinds = [(m.get("type"), m.get("kind")) for m in got]
    if kinds != [("exec_control", "throw"), ("exec_control", "stream_close")]:
        stall(ctx, "exec %d answered with %r, not throw + stream_close" % (eid, kinds))
    else:
        S.count("exec_throws_ok")


def exec_expect_result(ctx, st, eid, wait_s):
    """mcp_state_exec_args (36) wants McpStateExecResult.success{servers}, the precheck
    variants (41-43) a result of their own number (empty, or {allowlisted}), subagent_args
    (28) SubagentResult.error{reason}, each then stream_close; anything
    else (a throw, silence) leaves the turn waiting: heartbeats only (notes 2026-autumn §4,
    §5.3-5.4; a throw on 36 leaves the model's MCP tools "unavailable")."""
    run = ctx.run
    got = exec_replies(ctx, eid, wait_s)
    kinds = [(m.get("type"), m.get("result") or m.get("kind")) for m in got]
    fn = pb.EXEC_FIELD[st["kind"]] if isinstance(st["kind"], str) else int(st["kind"])
    want = pb.EXEC_RESULT_NAMES.get(fn)
    why = ""
    if kinds != [("exec_result", want), ("exec_control", "stream_close")]:
        why = "answered with %r, not %s + stream_close" % (kinds, want)
    elif st["expect"] == "empty_result" and got[0].get("result_hex") != "":
        why = "precheck result is not empty: %r" % got[0].get("result_hex")
    elif st["expect"] == "precheck":
        # {1 allowlisted}: empty is "no" (notes 2026-late-autumn N13); a script says which
        # answer it takes: an unexpected one would take the live run down another path
        # (an approval), so the fake waits there
        want_hex = "0801" if st.get("allowlisted") else ""
        if got[0].get("result_hex") != want_hex:
            why = "precheck answered %r, want allowlisted=%s (%r)" % (
                got[0].get("result_hex"), bool(st.get("allowlisted")), want_hex)
    elif st["expect"] == "subagent_error":
        # SubagentResult.error{2 error}: a reason the model reads (N5)
        if got[0].get("variant") != "error" or not "".join(got[0].get("strings") or []):
            why = "subagent_result is not an error with a reason: %r" % got[0]
    elif st["expect"] == "mcp_state":
        servers = got[0].get("servers")
        tools = [t["tool_name"] for t in run.run_request.get("mcp_tools") or []]
        ids = st.get("server_identifiers") or []
        want_srv = bool(tools) and (not ids or "cursor-tools" in ids)
        if servers is None:
            why = "McpStateExecResult without success"
        elif not want_srv and servers:
            why = "servers listed that were not asked for: %r" % servers
        elif want_srv and (len(servers) != 1 or servers[0]["server_identifier"] != "cursor-tools"
                           or servers[0]["status"] != "ready"
                           or [t["tool_name"] for t in servers[0]["tools"]] != tools):
            why = "servers %r do not list the run's tools %r as one ready server" % (servers,
                                                                                     tools)
    run.exec_checks[str(eid)] = why or "ok"
    if why:
        S.error("exec %d: %s" % (eid, why), request_id=run.rid)
        stall(ctx, "exec %d: %s" % (eid, why))
    else:
        S.count("exec_results_ok")


# Cursor's own tool calls (exec kinds) that an allowed-tools header without them hides
NATIVE_EXECS = {"shell", "shell_stream", "read", "write", "delete", "ls", "grep", "diagnostics",
                "background_shell_spawn", "fetch", "computer_use", "subagent", "pi_read",
                "mini_swe_agent_bash"}


def native_hidden(run):
    """The run's allowed-tools header leaves out every native tool kind."""
    v = run.allowed_tools
    if v is None:
        return False
    kinds = {k.strip() for k in v.split(",") if k.strip()}
    return not any(k not in ("mcp_tool_call", "get_mcp_tools_tool_call") for k in kinds)


def run_steps(ctx, steps):
    for st in steps:
        if ctx.finished:
            return
        if ctx.run.h2_reject is not None:
            raise H2Rejected()
        run_step(ctx, st)
        ctx.step += 1


def run_step(ctx, st):
    op = st["op"]
    conn, run = ctx.conn, ctx.run
    fr = build_frame(st, run)
    if fr is not None and op == "checkpoint":
        run.checkpoints_sent.append(pb.last(pb.parse(fr[5:]), 3, pb.WT_LEN).hex())
    if fr is not None:
        _send(ctx, fr, int(st.get("split", 0)))
        ctx.frames += 1
        if op == "turn_ended":
            ctx.turn_ended = True
        return
    if op == "batch":
        data = b"".join(build_frame(s, run) for s in st["steps"])
        _send(ctx, data, int(st.get("split", 0)))
        ctx.frames += len(st["steps"])
        return
    if op == "burst":
        # n text frames, each in its own HTTP chunk and so its own TLS record, written with
        # TCP_CORK set: the records reach the client together, in one segment when they fit
        n, t = int(st["n"]), st.get("text", "b")
        raw = conn.sock
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        except OSError:
            pass
        try:
            for i in range(n):
                _send(ctx, pb.envelope(pb.m_text("%s%d;" % (t, i))), int(st.get("split", 0)))
                ctx.frames += 1
        finally:
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            except OSError:
                pass
        return
    if op == "echo":
        prompt = (run.run_request or {}).get("prompt") or ""
        i = prompt.rfind("User: ")
        msg = "ECHO:" + (prompt[i + 6:] if i >= 0 else prompt)
        n = max(1, int(st.get("pieces", 1)))
        size = max(1, -(-len(msg) // n))
        for j in range(0, len(msg), size):
            _send(ctx, pb.envelope(pb.m_text(msg[j:j + size])))
            ctx.frames += 1
        return
    if op == "long":
        n, t, batch = int(st["n"]), st.get("text", "x"), max(1, int(st.get("batch", 64)))
        if st.get("stamp") or st.get("interval"):
            # Paced and/or stamped: each frame's text starts with "@T<ns>;", the fake's
            # CLOCK_MONOTONIC (time.monotonic_ns) when its batch was written, so a client on
            # this host can measure per-frame latency (the bench does).
            interval, sent = float(st.get("interval", 0)), 0
            while sent < n:
                k = min(batch, n - sent)
                if st.get("stamp"):
                    one = pb.envelope(pb.m_text("@T%d;%s" % (time.monotonic_ns(), t)))
                else:
                    one = pb.envelope(pb.m_text(t))
                _send(ctx, one * k)
                sent += k
                ctx.frames += k
                if interval and sent < n and ctx.conn.wait(interval) == "closed":
                    raise PeerClosed("closed during a paced answer")
            return
        one = pb.envelope(pb.m_text(t))
        full, rest = divmod(n, batch)
        blk = one * batch
        for _ in range(full):
            _send(ctx, blk)
        if rest:
            _send(ctx, one * rest)
        ctx.frames += n
        return
    if op == "cut":
        fr = pb.envelope(pb.m_text(st.get("text", "cut")))
        keep = int(st.get("keep", len(fr) // 2))
        _send(ctx, fr[:keep])
        return
    if op in ("kv_set_blob", "kv_get_blob"):
        kv_id = int(st.get("id", 1))
        if op == "kv_set_blob":
            data = st.get("data", "")
            data = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
            data = data.encode()
            bid = bytes.fromhex(st["blob_id_hex"]) if "blob_id_hex" in st else \
                hashlib.sha256(data).digest()
            meta = bytes.fromhex(st["metadata_hex"]) if "metadata_hex" in st else None
            fr = pb.envelope(pb.m_kv_set_blob(kv_id, bid, data, meta))
            kind = "set_blob_result"
        else:
            if "data_of" in st:
                bid = hashlib.sha256(st["data_of"].encode()).digest()
            else:
                bid = bytes.fromhex(st.get("blob_id_hex", "00" * 32))
            meta = bytes.fromhex(st["metadata_hex"]) if "metadata_hex" in st else None
            fr = pb.envelope(pb.m_kv_get_blob(kv_id, bid, meta))
            kind = "get_blob_result"
        ctx.append_cursor = len(run.appends)
        _send(ctx, fr)
        ctx.frames += 1
        if not st.get("wait", True):
            return
        a = wait_append(ctx, lambda m: m.get("type") == "kv_result" and m.get("id") == kv_id,
                        float(st.get("timeout", S.config["kv_wait_s"])))
        if a is None:
            S.error("no %s for kv id %d" % (kind, kv_id), request_id=run.rid)
            return
        m = a["message"]
        run.kv_replies[kv_id] = m
        if "metadata_hex" in st and m.get("metadata_hex") != st["metadata_hex"]:
            # OMR echoes KvServerMessage field 4; a client that drops it is not the CLI
            S.error("kv id %d: metadata %r not echoed (got %r)"
                    % (kv_id, st["metadata_hex"], m.get("metadata_hex")), request_id=run.rid)
        if m.get("kind") != kind:
            S.error("kv id %d answered with %s, expected %s" % (kv_id, m.get("kind"), kind),
                    request_id=run.rid)
        elif kind == "set_blob_result" and m.get("error"):
            S.error("set_blob_result carries an error: %s" % m["error"], request_id=run.rid)
        elif kind == "get_blob_result" and st.get("on_missing") and m.get("blob_data_hex") is None:
            # the live server aborts a run whose blob the client cannot serve (notes §3)
            ctx.finished = True
            _send(ctx, pb.trailer(13, st["on_missing"]))
            conn.end_chunked()
            run.stream["missing_blob"] = True
            return
        elif kind == "get_blob_result" and "expect" in st:
            exp = st["expect"]
            got = m.get("blob_data_hex")
            exp_hex = exp.encode().hex() if exp is not None else None
            if got != exp_hex:
                S.error("get_blob_result for kv id %d: got %r expected %r"
                        % (kv_id, got, exp_hex), request_id=run.rid)
        return
    if op == "exec" and st["kind"] in NATIVE_EXECS and native_hidden(run) \
            and not st.get("despite_header"):
        # the run asked for the caller's tools only: the live model has no native tool to
        # call. Loud, never silent: a validation error and an error end of the run.
        why = ("scenario step %d: a native %s exec on a run whose x-cursor-agent-allowed-tools "
               "is %r (Cursor's model has no such tool; mark the step \"despite_header\" to "
               "send it anyway)" % (ctx.step, st["kind"], run.allowed_tools))
        S.error(why, request_id=run.rid)
        S.count("native_execs_refused")
        run.stream["native_refused"] = why
        _send(ctx, build_frame({"op": "trailer", "status": 9,
                                "message": "fake_cursor: " + why}, run))
        ctx.frames += 1
        ctx.finished = True
        return
    if op == "exec":
        eid = int(st.get("id", 1))
        if st["kind"] in NATIVE_EXECS and native_hidden(run):
            S.count("native_execs_despite_header")
        if "file_text_from" in st:          # a write whose text comes from an earlier result
            st = dict(st, file_text=from_result(run, st["file_text_from"]))
        fr = with_unknown(st, pb.envelope(pb.m_exec(eid, st["kind"], exec_args(st),
                                                    st.get("exec_id", ""),
                                                    envelope=bool(st.get("envelope")))))
        ctx.append_cursor = len(run.appends)
        ctx.exec_cursor = ctx.append_cursor
        if st.get("hold"):
            # the client runs this one as a tool: "await_results" waits for its answer
            # expect_kind: the server wants another result type than the exec's (a test of
            # what happens when the answer is mis-typed: the turn stalls)
            ctx.pending.append({"id": eid, "kind": st.get("expect_kind", st["kind"]),
                                "exec_id": st.get("exec_id", ""), "cursor": len(run.appends)})
        _send(ctx, fr, int(st.get("split", 0)))
        ctx.frames += 1
        if st.get("expect") == "throw":
            exec_expect_throw(ctx, eid, float(st.get("wait_reply", 5)))
            return
        if st.get("expect") in ("mcp_state", "empty_result", "precheck", "subagent_error"):
            exec_expect_result(ctx, st, eid, float(st.get("wait_reply", 5)))
            return
        wr = st.get("wait_reply")
        if not wr:
            return
        replies = []
        run.exec_replies[eid] = replies

        def done(m):
            if m.get("type") in ("exec_result", "exec_control") and m.get("id") == eid:
                if m not in replies:
                    replies.append(m)
                return m.get("type") == "exec_control"
            return False
        wait_append(ctx, done, float(wr))
        return
    if op == "interaction_query" and st.get("wait_reply"):
        # Cursor's own CLI answers every query; check the proxy answers it with a
        # response of the same kind (an empty one is all the spec's schema allows).
        qid, kind = int(st.get("id", 1)), st.get("kind", "web_search")
        ctx.append_cursor = len(run.appends)
        _send(ctx, pb.envelope(pb.m_interaction_query(qid, kind)))
        ctx.frames += 1
        a = wait_append(ctx, lambda m: m.get("type") == "interaction_response"
                        and m.get("id") == qid, float(st["wait_reply"]))
        run.query_replies[str(qid)] = a["message"] if a else None
        if a is None:
            # live: an unanswered query hangs the stream (notes 2026-autumn §5.5)
            S.error("no interaction_response for query id %d" % qid, request_id=run.rid)
            return stall(ctx, "interaction query %d (%s) never answered" % (qid, kind))
        elif a["message"].get("kind") != kind:
            S.error("interaction_response for query id %d has kind %r, expected %r"
                    % (qid, a["message"].get("kind"), kind), request_id=run.rid)
            return stall(ctx, "interaction query %d answered with the wrong kind" % qid)
        elif kind == "setup_vm_environment" and a["message"].get("body_hex") != "0a00":
            S.error("setup_vm_environment answered %r, not {success {}}"
                    % a["message"].get("body_hex"), request_id=run.rid)
            return stall(ctx, "setup_vm_environment not acked with success")
        elif kind in pb.QUERY_OUTCOMES and a["message"].get("outcome") is None:
            # a response with a typed outcome (notes 2026-late-autumn N3) left empty is
            # neither yes nor no: the server waits for one (heartbeats only)
            S.error("%s answered with an empty response (no outcome)" % kind,
                    request_id=run.rid)
            return stall(ctx, "interaction query %d (%s) answered without an outcome"
                         % (qid, kind))
        else:
            S.count("interaction_responses")
        return
    if op == "await_results":
        await_results(ctx, float(st.get("max_s", 120)), float(st.get("heartbeat_s", 1.0)))
        return
    if op == "text_from_fields":
        _send(ctx, pb.envelope(pb.m_text(from_result(run, st))))
        ctx.frames += 1
        return
    if op == "text_from_result":
        res = run.exec_results.get(str(int(st.get("id", 1))), {})
        _send(ctx, pb.envelope(pb.m_text(st.get("prefix", "") + res.get("text", ""))))
        ctx.frames += 1
        return
    if op == "outcome_from_result":
        # the model's answer from what the CLI reported field by field (shell: exit code and
        # stdout; read: content), so a client's answer shows what reached Cursor
        res = run.exec_results.get(str(int(st.get("id", 1))), {})
        oc = res.get("outcome") or {}
        txt = st.get("prefix", "") + "exit=%s stdout=%s stderr=%s" % (
            oc.get("exit_code"), json.dumps(oc.get("stdout")), json.dumps(oc.get("stderr")))
        _send(ctx, pb.envelope(pb.m_text(txt)))
        ctx.frames += 1
        return
    if op == "images_from_result":
        # what arrived as McpImageContent, so a client can check it end to end
        res = run.exec_results.get(str(int(st.get("id", 1))), {})
        ims = res.get("images") or []
        txt = "IMAGES:%d" % len(ims) + "".join(
            " %s %sx%s %dB%s" % (i["mime_type"], i["width"] or 0, i["height"] or 0, i["bytes"],
                                 " BAD(%s)" % i["problem"] if i["problem"] else "")
            for i in ims)
        _send(ctx, pb.envelope(pb.m_text(txt)))
        ctx.frames += 1
        return
    if op == "require_heartbeat":
        # The 2026 CLI sends client_heartbeat every 5 s; a run nobody heartbeats is dropped
        # (here: stalls on server heartbeats only).
        end = time.time() + float(st.get("within_s", 7))
        while time.time() < end:
            if any(a["message"].get("type") == "client_heartbeat" for a in run.appends):
                S.count("client_heartbeats_seen")
                return
            _send(ctx, pb.envelope(pb.m_heartbeat()))
            if ctx.conn.wait(0.5) == "closed":
                raise PeerClosed("closed while waiting for a client heartbeat")
        stall(ctx, "no client_heartbeat within %.0fs" % float(st.get("within_s", 7)))
        return
    if op == "flood":
        # one pre-built batch of frames written again and again (as fast as TLS goes) until
        # the peer closes or max_s passes: a flood the proxy cannot outrun
        one = b"".join(build_frame(s, run) for s in st["steps"]) * int(st.get("batch", 1))
        end = time.time() + float(st.get("max_s", 30))
        while time.time() < end:
            _send(ctx, one)
            ctx.frames += len(st["steps"]) * int(st.get("batch", 1))
        return
    if op == "sleep":
        if ctx.conn.wait(float(st.get("s", 0.1))) == "closed":
            raise PeerClosed("closed during sleep")
        return
    if op == "hold":
        # quiet (no byte, no heartbeat) until POST /release or max_s: the bench's held streams
        r = ctx.conn.hold(float(st.get("max_s", 600)))
        if r == "closed":
            raise PeerClosed("closed during hold")
        S.count("holds_" + r)
        return
    if op == "stall":
        # A script that stalls after an exec was written for one run per request: when tool
        # results arrive on the run (a client holding it), it cannot go on, so it ends with
        # an error, and the client is expected to replay the conversation in a fresh run.
        # Results count from the exec before the stall: a client that answers at once
        # (within that exec's wait_reply window) sends them before this step starts.
        start = ctx.exec_cursor if ctx.exec_cursor is not None else len(run.appends)
        r = ctx.conn.wait(float(st.get("max_s", S.config["stall_max_s"])), run.cond,
                          lambda: any(a["message"].get("type") == "exec_result"
                                      for a in run.appends[start:]))
        run.stream["stall_result"] = r
        if r == "closed":
            raise PeerClosed("closed during stall")
        if r == "pred":
            run.stream["ended_on_results"] = True
            S.count("stalls_ended_by_results")
            _send(ctx, pb.trailer(9, "scripted run: no continuation after tool results"))
            conn.end_chunked()
            ctx.finished = True
        return
    if op == "wait_append":
        wait_append(ctx, lambda m: True, float(st.get("timeout", 5)))
        return
    if op == "repeat":
        for _ in range(int(st["n"])):
            run_steps(ctx, st["steps"])
            if st.get("interval"):
                if ctx.conn.wait(float(st["interval"])) == "closed":
                    raise PeerClosed("closed during repeat")
        return
    if op == "close":
        ctx.finished = True
        run.stream["script_closed"] = True
        conn.abort(close_notify=bool(st.get("tls_close_notify")), rst=bool(st.get("rst")))
        if st.get("rst"):
            S.count("rst_sent")
        return
    if op == "goaway":
        # HTTP/2: GOAWAY on the run's connection (last_stream_id: this stream unless "below"),
        # the run itself goes on; on HTTP/1.1 nothing to do
        if isinstance(conn, H2Stream):
            conn.hc.goaway(int(st.get("error", 0)), conn.sid - 2 if st.get("below") else None)
            run.stream["goaway"] = True
        return
    if op == "h2_bad_frame":
        # HTTP/2 only: a frame that breaks the protocol, written raw (the h2 library would
        # refuse to): "stream" = WINDOW_UPDATE with increment 0 on the run's stream (a stream
        # error: the client resets the stream), "conn" = DATA on stream 0 (a connection error)
        ctx.finished = True
        run.stream["h2_bad_frame"] = st.get("kind", "stream")
        if isinstance(conn, H2Stream):
            if st.get("kind", "stream") == "conn":
                frame = bytes.fromhex("000000000000000000")
            else:
                frame = bytes.fromhex("00000408000000000000000000")
                frame = frame[:5] + conn.sid.to_bytes(4, "big") + frame[9:]
            S.count("h2_bad_frames")
            conn.hc.raw(frame)
            conn.done = True
        else:
            conn.abort(rst=True)
        return
    if op == "rst_stream":
        # HTTP/2: RST_STREAM of the run's stream (INTERNAL_ERROR by default); on HTTP/1.1 a
        # reset connection, the nearest thing
        ctx.finished = True
        run.stream["rst_stream"] = True
        if isinstance(conn, H2Stream):
            conn.hc.reset_stream(conn.sid, int(st.get("error", 2)))
            conn.done = True
        else:
            conn.abort(rst=True)
        return
    if op == "end":
        conn.end_chunked()
        ctx.finished = True
        return
    raise ValueError("unknown op %r" % op)


def slow_answer(conn, what):
    """The configured slow answer for `what` ("models", "append0"), or None when none is set.
    Ends by closing the connection; records how long it lasted (counter slow_<what>_ms)."""
    spec = (S.config.get("slow") or {}).get(what)
    if not spec:
        return None
    mode, iv = spec.get("mode"), float(spec.get("interval_s", 1.0))
    t0 = time.time()
    end = t0 + float(spec.get("max_s", 30.0))
    S.count("slow_" + what)
    try:
        if mode == "silent":
            conn.wait(end - time.time())
        elif mode == "trickle":
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000000\r\n\r\n")
            while time.time() < end:
                conn.send(b" ")
                if conn.wait(min(iv, max(0.0, end - time.time()))) == "closed":
                    break
        elif mode == "interim":
            while time.time() < end:
                conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                if conn.wait(min(iv, max(0.0, end - time.time()))) == "closed":
                    break
        elif mode == "endless":
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            blk = b" " * 65536
            while time.time() < end:
                conn.chunk(blk)
                S.count("slow_%s_bytes" % what, len(blk))
        else:
            raise ValueError("unknown slow mode %r" % mode)
    except PeerClosed:
        pass
    with S.lock:
        S.counters["slow_%s_ms" % what] = int((time.time() - t0) * 1000)
    conn.abort()
    return 0


def h_models(conn, req, rec):
    st = check_common(conn, req, rec, False)
    if st:
        return st
    try:
        body = json.loads(req["body"] or b"null")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError as e:
        S.error("GetUsableModels body is not a JSON object: %s" % e)
        return connect_error(conn, 400, "invalid_argument", "bad JSON body")
    S.count("models_calls")
    if client_outdated(req):
        code, msg, det = outdated_body()
        conn.respond(429 if code == "resource_exhausted" else 403,
                     json.dumps(connect_error_details(code, msg, det)))
        return 429
    slow = slow_answer(conn, "models")
    if slow is not None:
        return slow
    if S.config["models_status"]:
        return connect_error(conn, int(S.config["models_status"]), "internal", "models failed")
    models = json.loads(json.dumps(BASE_MODELS))
    if S.config["list_scenarios"]:
        for name in sorted(S.scenarios):
            models.append({"modelId": "scenario:" + name, "displayModelId": "scenario:" + name,
                           "displayName": "Scenario " + name, "aliases": []})
    conn.respond(200, json.dumps({"models": models}))
    return 200


def h_server_config(conn, req, rec):
    st = check_common(conn, req, rec, False)
    if st:
        return st
    try:
        body = json.loads(req["body"] or b"null")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError as e:
        S.error("GetServerConfig body is not a JSON object: %s" % e)
        return connect_error(conn, 400, "invalid_argument", "bad JSON body")
    S.count("server_config_calls")
    if client_outdated(req):
        code, msg, det = outdated_body()
        conn.respond(429 if code == "resource_exhausted" else 403,
                     json.dumps(connect_error_details(code, msg, det)))
        return 429
    if S.config["server_config_status"]:
        return connect_error(conn, int(S.config["server_config_status"]), "internal",
                             "server config failed")
    with S.lock:
        seq = S.config.get("server_config_seq") or []
        nxt = seq.pop(0) if seq else None
    if nxt is not None:
        conn.respond(200, json.dumps(nxt))
        return 200
    if S.config["server_config"] is not None:
        conn.respond(200, json.dumps(S.config["server_config"]))
        return 200
    url = S.config["agent_url"]
    if url is None:
        url = "https://localhost:%d" % S.ports["port"]
    elif url == "agent":
        url = "https://localhost:%d" % S.ports["agent_port"]
    ans = {"agentUrlConfig": {"agentUrl": url, "agentnUrl": url}, "chatConfig": {},
           "isDevDoNotUseForSecretThingsBecauseCanBeSpoofedByUsersWithProxies": False}
    if S.config["http2_config"] is not None:
        # GetServerConfigResponse.http2_config (field 7): Connect JSON writes the enum's name
        v = S.config["http2_config"]
        ans["http2Config"] = ("HTTP2_CONFIG_" + HTTP2_CONFIG[v]) if isinstance(v, int) \
            and 0 <= v < len(HTTP2_CONFIG) else v
    conn.respond(200, json.dumps(ans))
    return 200


HTTP2_CONFIG = ["UNSPECIFIED", "FORCE_ALL_DISABLED", "FORCE_ALL_ENABLED", "FORCE_BIDI_DISABLED",
                "FORCE_BIDI_ENABLED"]


# Dashboard answers as Connect JSON (int64 as strings, cents as numbers), in the shapes
# recorded live by usage-meter projects (shared notes: cursor-upstream-extras.md section 2.2).
CYCLE_START_MS = 1764547200000     # 2025-12-01T00:00:00Z
CYCLE_END_MS = 1767225600000       # 2026-01-01T00:00:00Z
USAGE_SHAPES = {
    "plan": {"billingCycleStart": str(CYCLE_START_MS), "billingCycleEnd": str(CYCLE_END_MS),
             "planUsage": {"totalSpend": 1234, "includedSpend": 1234, "bonusSpend": 0,
                           "remaining": 766, "limit": 2000, "autoPercentUsed": 40,
                           "apiPercentUsed": 75, "totalPercentUsed": 61.7},
             "spendLimitUsage": {"totalSpend": 0, "individualLimit": 5000, "individualUsed": 0,
                                 "individualRemaining": 5000, "limitType": "user"},
             "displayThreshold": 200, "enabled": True,
             "displayMessage": "You've used 62% of your usage limit",
             "autoBucketModels": ["default", "composer-1"]},
    # a free account: no planUsage limit, no spend limit, no plan info
    "no_plan": {"billingCycleStart": str(CYCLE_START_MS), "billingCycleEnd": str(CYCLE_END_MS),
                "enabled": False},
    "limit_hit": {"billingCycleStart": str(CYCLE_START_MS), "billingCycleEnd": str(CYCLE_END_MS),
                  "planUsage": {"totalSpend": 2000, "includedSpend": 2000, "remaining": 0,
                                "limit": 2000, "totalPercentUsed": 100},
                  "enabled": True,
                  "displayMessage": "You've hit your usage limit"},
}
PLAN_INFO = {"planInfo": {"planName": "Pro", "includedAmountCents": 2000, "price": "$20/mo",
                          "billingCycleEnd": str(CYCLE_END_MS),
                          "planOwner": "PLAN_OWNER_STRIPE"}}


def _dash_request(conn, req, rec, what):
    """Connect unary JSON with an empty request message, as the real service takes it."""
    st = check_common(conn, req, rec, False)
    if st:
        return st
    if req["headers"].get("connect-protocol-version") != "1":
        S.error("%s without connect-protocol-version: 1" % what)
        return connect_error(conn, 400, "invalid_argument", "missing connect-protocol-version")
    try:
        body = json.loads(req["body"] or b"null")
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError as e:
        S.error("%s body is not a JSON object: %s" % (what, e))
        return connect_error(conn, 400, "invalid_argument", "bad JSON body")
    if body:
        S.error("%s request has members %s (the request message has no fields)"
                % (what, sorted(body)))
        return connect_error(conn, 400, "invalid_argument", "unknown request fields")
    S.count(what + "_calls")
    return None


def h_usage(conn, req, rec):
    st = _dash_request(conn, req, rec, "usage")
    if st:
        return st
    if S.config["usage_delay_s"]:
        time.sleep(float(S.config["usage_delay_s"]))
    if S.config["usage_status"]:
        code = {401: "unauthenticated", 403: "permission_denied", 404: "not_found",
                429: "resource_exhausted", 503: "unavailable"}.get(int(S.config["usage_status"]),
                                                                     "internal")
        # 404: a server without the dashboard route answers not_found
        return connect_error(conn, int(S.config["usage_status"]), code,
                             "no such route" if code == "not_found" else "usage failed")
    shape = USAGE_SHAPES.get(S.config["usage_shape"])
    if shape is None:
        S.error("unknown usage_shape %r" % S.config["usage_shape"])
        return connect_error(conn, 500, "internal", "unknown usage shape")
    conn.respond(200, json.dumps(shape))
    return 200


def h_plan(conn, req, rec):
    st = _dash_request(conn, req, rec, "plan")
    if st:
        return st
    status = S.config["plan_status"]
    if status is None and S.config["usage_shape"] == "no_plan":
        status = 404
    if status:
        return connect_error(conn, int(status), "not_found" if int(status) == 404 else "internal",
                             "no plan")
    conn.respond(200, json.dumps(PLAN_INFO))
    return 200


def issue_tokens():
    now = int(time.time())
    at = pb.make_jwt({"sub": "auth0|fake_" + secrets.token_hex(4), "time": str(now),
                      "exp": now + int(S.config["access_ttl_s"]), "type": "session",
                      "iss": "https://authentication.cursor.sh"})
    rt = "rt_" + secrets.token_hex(16)
    with S.lock:
        S.valid_tokens.add(at)
        S.refresh_tokens.add(rt)
    return {"accessToken": at, "refreshToken": rt}


def h_poll(conn, req, rec):
    q = urllib.parse.parse_qs(req["query"])
    uuid = (q.get("uuid") or [""])[0]
    verifier = (q.get("verifier") or [""])[0]
    S.count("poll_calls")
    if not UUID_RE.match(uuid) or not re.match(r"^[A-Za-z0-9_-]{43}$", verifier):
        S.error("auth/poll with bad uuid/verifier", uuid=uuid, verifier_len=len(verifier))
        return connect_error(conn, 400, "invalid_argument", "bad uuid or verifier")
    with S.lock:
        n = S.poll_counts.get(uuid, 0)
        S.poll_counts[uuid] = n + 1
    if n < int(S.config["poll_pending"]):
        return connect_error(conn, 404, "not_found", "pending")
    conn.respond(200, json.dumps(issue_tokens()))
    return 200


def _auth_post(conn, req, what):
    ct = req["headers"].get("content-type", "")
    if ct.split(";")[0].strip().lower() != "application/json":
        S.error("%s: content-type %r" % (what, ct))
        return None, connect_error(conn, 415, "unknown", "unsupported content-type")
    tok, why = bearer(req)
    if tok is None:
        S.error("%s: %s" % (what, why))
        return None, connect_error(conn, 401, "unauthenticated", why)
    return tok, None


OAUTH_CLIENT_ID = "KbZUR41cY7W6zRSdpSUJ7I7mLYBKOCmB"


def h_oauth_token(conn, req, rec):
    """A browser login's renewal as Cursor's IDE does it (notes autumn 2026, 5.7; upstream-extras
    2.1): JSON {grant_type: "refresh_token", client_id, refresh_token} -> {access_token, id_token,
    shouldLogout}. The refresh token does not rotate and is not sent back; an unknown (revoked)
    one gets shouldLogout: true."""
    S.count("oauth_calls")
    if not S.config["oauth_token_route"]:
        conn.respond(404, "Not Found", ctype="text/plain")
        return 404
    ct = req["headers"].get("content-type", "")
    if ct.split(";")[0].strip().lower() != "application/json":
        S.error("oauth/token: content-type %r" % ct)
        return connect_error(conn, 415, "unknown", "unsupported content-type")
    try:
        body = json.loads(req["body"].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        S.error("oauth/token: body is not a JSON object")
        conn.respond(400, json.dumps({"error": "invalid_request"}))
        return 400
    if body.get("grant_type") != "refresh_token":
        S.error("oauth/token: grant_type %r" % body.get("grant_type"))
        conn.respond(400, json.dumps({"error": "unsupported_grant_type"}))
        return 400
    if body.get("client_id") != OAUTH_CLIENT_ID:
        S.error("oauth/token: client_id %r" % body.get("client_id"))
        conn.respond(401, json.dumps({"error": "invalid_client"}))
        return 401
    rt = body.get("refresh_token")
    if not isinstance(rt, str) or not rt:
        S.error("oauth/token: no refresh_token")
        conn.respond(400, json.dumps({"error": "invalid_request"}))
        return 400
    if S.config["refresh_delay_s"]:
        time.sleep(float(S.config["refresh_delay_s"]))
    if S.config["refresh_status"]:
        return connect_error(conn, int(S.config["refresh_status"]), "unauthenticated",
                             "refresh failed")
    with S.lock:
        ok = rt in S.refresh_tokens
    if not ok:
        conn.respond(200, json.dumps({"access_token": "", "id_token": "", "shouldLogout": True}))
        return 200
    pair = issue_tokens()
    at = pair["accessToken"]
    if S.config["oauth_token_nul"]:
        at = at[:10] + "\x00" + at[10:]      # json.dumps writes it as \u0000
    ans = {"access_token": at, "id_token": "idt_" + secrets.token_hex(8),
           "shouldLogout": False}
    if S.config["oauth_rotate"]:
        ans["refresh_token"] = pair["refreshToken"]
        with S.lock:
            S.refresh_tokens.discard(rt)
    else:
        with S.lock:
            S.refresh_tokens.discard(pair["refreshToken"])   # never handed out
    conn.respond(200, json.dumps(ans))
    return 200


def h_refresh(conn, req, rec):
    S.count("refresh_calls")
    if not S.config["auth_refresh_route"]:
        conn.respond(404, "Not Found", ctype="text/plain")
        return 404
    tok, st = _auth_post(conn, req, "auth/refresh")
    if st:
        return st
    if S.config["refresh_delay_s"]:
        time.sleep(float(S.config["refresh_delay_s"]))
    if S.config["refresh_status"]:
        return connect_error(conn, int(S.config["refresh_status"]), "unauthenticated",
                             "refresh failed")
    with S.lock:
        ok = tok in S.refresh_tokens
        if ok and S.config["rotate_refresh"]:
            S.refresh_tokens.discard(tok)
    if not ok:
        return connect_error(conn, 401, "unauthenticated", "invalid refresh token")
    conn.respond(200, json.dumps(issue_tokens()))
    return 200


def h_exchange(conn, req, rec):
    S.count("exchange_calls")
    tok, st = _auth_post(conn, req, "auth/exchange_user_api_key")
    if st:
        return st
    keys = S.config["api_keys"]
    if (keys is not None and tok not in keys) or (keys is None and not tok.startswith("key_")):
        return connect_error(conn, 401, "unauthenticated", "invalid api key")
    conn.respond(200, json.dumps(issue_tokens()))
    return 200



# ---------------------------------------------------------------------------------------------
# HTTP/2 (issue 23): agent.v1.AgentService/Run as one Connect bidi stream per run

PATH_RUN = "/agent.v1.AgentService/Run"


def h_run_http1(conn, req, rec):
    """The bidi Run over HTTP/1.1: the load balancer's incompatible-protocol answer."""
    S.count("run_over_http1")
    conn.respond(464, b"", ctype="text/plain")
    return 464


class H2Stream:
    """One server stream of an H2Conn, with the interface of Conn that the run scripts use
    (chunk, end_chunked, wait, peer_closed, abort, respond)."""

    def __init__(self, hc, sid, headers):
        self.hc = hc
        self.sid = sid
        self.cid = hc.cid
        self.listener = hc.listener
        self.sock = hc.sock
        self.headers = headers
        self.body = b""              # request body bytes not parsed yet
        self.ended = False           # the client ended its side (END_STREAM)
        self.reset = False           # the client reset the stream (or the connection died)
        self.head_sent = False
        self.done = False            # our side is ended
        self.closed = False
        self.close_notify = False
        self.hold_window = False     # "a window that stays closed": no stream WINDOW_UPDATE
        self.on_message = None       # callback(bytes) for each request message
        self.run = None
        self.hold_ev = None          # set when a "hold" step must look again (reset, release)

    # --- the Conn interface
    def _head(self, status=200, ctype=CT_CONNECT, end=False):
        self.hc.send_headers(self.sid, [(":status", str(status)), ("content-type", ctype)], end)
        self.head_sent = True
        if end:
            self.done = True

    def respond(self, status, body=b"", ctype="application/json", extra=None, close=False):
        if isinstance(body, str):
            body = body.encode()
        self.hc.send_headers(self.sid, [(":status", str(status)), ("content-type", ctype)]
                             + [(k.lower(), str(v)) for k, v in (extra or {}).items()],
                             not body)
        self.head_sent = True
        if body:
            self.hc.send_data(self, body, True)
        self.done = True

    def start_chunked(self, status=200, ctype=CT_CONNECT, close=False):
        self._head(status, ctype)

    def chunk(self, data):
        if not data:
            return
        if not self.head_sent:
            self._head()
        self.hc.send_data(self, data, False)

    def end_chunked(self):
        if self.done:
            return
        if not self.head_sent:
            self._head()
        self.hc.send_data(self, b"", True)
        self.done = True

    def send(self, data):
        self.chunk(data)

    def peer_closed(self):
        return self.reset or self.hc.dead

    def wait(self, seconds, cond=None, pred=None):
        return wait_peer(self, seconds, cond, pred)

    def idle(self, left):
        """wait_peer's sleep when no condition is given: until the connection's thread
        signals a frame (a reset, the connection's end), at most a second."""
        with self.hc.cond:
            if not self.peer_closed():
                self.hc.cond.wait(min(1.0, left))

    def hold(self, seconds):
        """A "hold" step: quiet until POST /release, a reset or `seconds` pass, waiting on an
        Event of its own (not the connection's condition, which every frame read wakes: 100
        held streams per connection woken by each client heartbeat starve the interpreter)."""
        end = time.time() + seconds
        ev = self.hold_ev = threading.Event()
        with S.lock:
            gen = S.hold_gen
            S.held.add(ev)
        try:
            while S.hold_gen == gen:
                if self.peer_closed():
                    return "closed"
                left = end - time.time()
                if left <= 0 or S.stop.is_set():
                    return "timeout"
                ev.wait(min(30.0, left))
            return "released"
        finally:
            with S.lock:
                S.held.discard(ev)

    def wake_hold(self):
        ev = self.hold_ev
        if ev is not None:
            ev.set()

    def abort(self, close_notify=False, rst=False):
        """A script's "close": on HTTP/2 the stream is reset (INTERNAL_ERROR); the other
        streams of the connection go on."""
        self.closed = True
        if not self.done:
            self.hc.reset_stream(self.sid, 2)
            self.done = True


class H2Conn:
    def __init__(self, sock, cid, listener):
        import h2.config
        import h2.connection
        import h2.settings
        self.sock = sock
        self.cid = cid
        self.listener = listener
        cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h = h2.connection.H2Connection(config=cfg)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.streams = {}
        self.dead = False
        self.goaway_sent = None       # last_stream_id of the GOAWAY we sent
        self.goaway_seen = False      # the client acked the PING sent after it
        self.ping_out = {}            # opaque -> time sent
        self.max_open = 0
        self.h.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: int(S.config["h2_max_streams"]),
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: int(S.config["h2_max_header_list"])})
        self.h.initiate_connection()
        self.flush()

    def flush(self):
        with self.lock:
            d = self.h.data_to_send()
            if not d or self.dead:
                return
            try:
                self.sock.settimeout(30)
                self.sock.sendall(d)
            except (ssl.SSLError, OSError):
                self.die("send failed")

    def die(self, why):
        with self.cond:
            if not self.dead:
                self.dead = True
                self.why = why
            for st in self.streams.values():
                st.reset = True
                st.wake_hold()
            self.cond.notify_all()

    def send_headers(self, sid, headers, end):
        with self.lock:
            if self.dead or sid not in self.streams or self.streams[sid].reset:
                raise PeerClosed("stream %d gone" % sid)
            self.h.send_headers(sid, headers, end_stream=end)
            self.flush()

    def send_data(self, st, data, end):
        """DATA within the peer's windows: waits (lock released) for WINDOW_UPDATE."""
        import h2.exceptions
        off = 0
        while True:
            with self.cond:
                while True:
                    if self.dead or st.reset:
                        raise PeerClosed("stream %d gone" % st.sid)
                    left = len(data) - off
                    try:
                        win = self.h.local_flow_control_window(st.sid)
                    except h2.exceptions.StreamClosedError:
                        raise PeerClosed("stream %d closed" % st.sid)
                    n = min(left, win, self.h.max_outbound_frame_size)
                    if n > 0 or left == 0:
                        break
                    S.count("h2_send_blocked_on_window")
                    self.cond.wait(1.0)
                last = off + n == len(data)
                self.h.send_data(st.sid, data[off:off + n], end_stream=end and last)
                off += n
                self.flush()
                if last:
                    return

    def raw(self, frame):
        """Bytes written as they are after what the h2 library has queued (a frame it would
        never write itself)."""
        with self.lock:
            d = self.h.data_to_send() + frame
            try:
                self.sock.settimeout(30)
                self.sock.sendall(d)
            except (ssl.SSLError, OSError):
                self.die("send failed")

    def reset_stream(self, sid, code):
        with self.lock:
            try:
                self.h.reset_stream(sid, error_code=code)
            except Exception:
                pass
            self.flush()
            st = self.streams.get(sid)
            if st:
                st.reset = True
                st.wake_hold()
            self.cond.notify_all()

    def goaway(self, code=0, last=None):
        """GOAWAY written as raw bytes (h2's close_connection would end every stream at once:
        a real server lets the streams up to last_stream_id finish), then a PING: once its
        ACK is back the client has read the GOAWAY, and a new stream after that is its bug
        (one sent before it could not know)."""
        from hyperframe.frame import GoAwayFrame
        with self.lock:
            if last is None:
                last = max(self.streams) if self.streams else 0
            f = GoAwayFrame(0)
            f.last_stream_id = last
            f.error_code = code
            d = self.h.data_to_send() + f.serialize()
            self.goaway_sent = last
            try:
                self.sock.settimeout(30)
                self.sock.sendall(d)
            except (ssl.SSLError, OSError):
                self.die("send failed")
            self.h.ping(b"goaway!!")
            self.flush()
        S.count("h2_goaway_sent")

    def flood(self, cfg):
        """CVE-2019-9512/9515 from the server's side: frames the client must ack (PING, or
        empty SETTINGS), written as raw bytes while holding the lock, so the reader thread
        reads at most once meanwhile (it needs the lock to go on): the acks pile up at the
        client. Ends at cfg["bytes"] or cfg["max_s"], or when the client cuts the connection
        off; then the connection is closed either way. Returns the bytes written."""
        if cfg.get("frame", "ping") == "ping":
            one = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"flood!!!"
        else:
            one = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        chunk = one * (65536 // len(one))
        limit = int(cfg.get("bytes", 64 << 20))
        end = time.time() + float(cfg.get("max_s", 20))
        sent, cut = 0, False
        with self.lock:
            self.flush()
            while sent < limit and time.time() < end and not self.dead:
                try:
                    self.sock.settimeout(max(0.1, end - time.time()))
                    self.sock.sendall(chunk)
                except socket.timeout:
                    break                      # the client stopped reading: max_s is up
                except (ssl.SSLError, OSError):
                    cut = True                 # the client closed the connection
                    break
                sent += len(chunk)
        S.count("h2_flood_bytes", sent)
        S.count("h2_flood_cut" if cut else "h2_flood_done")
        self.die("flood over")
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return sent

    def ping(self):
        with self.lock:
            op = secrets.token_bytes(8)
            self.ping_out[op] = time.time()
            self.h.ping(op)
            self.flush()

    def serve(self):
        import h2.events
        import h2.exceptions
        S.count("h2_connections")
        if S.config["h2_goaway_at_start"]:
            # True: NO_ERROR; a number: that error code (13: HTTP_1_1_REQUIRED)
            v = S.config["h2_goaway_at_start"]
            self.goaway(0 if v is True else int(v), 0)
        ping_s = float(S.config["h2_ping_s"])
        next_ping = time.time() + ping_s
        while not self.dead and not S.stop.is_set():
            now = time.time()
            for op, t in list(self.ping_out.items()):
                if now - t > float(S.config["h2_ping_ack_s"]):
                    S.error("h2: PING left unanswered for %.0fs" % (now - t), conn=self.cid)
                    del self.ping_out[op]
            ping_s = float(S.config["h2_ping_s"])      # the config may change meanwhile
            if ping_s > 0 and now >= next_ping:
                self.ping()
                next_ping = now + ping_s
            # wait in poll(), not in a socket timeout: writers set the socket's timeout
            try:
                if not self.sock.pending():
                    pl = select.poll()
                    pl.register(self.sock, select.POLLIN)
                    if not pl.poll(500):
                        continue
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ssl.SSLWantReadError:
                continue
            except (ssl.SSLError, OSError, ValueError) as e:
                self.die(str(e))
                break
            if not d:
                self.die("eof")
                break
            with self.cond:
                try:
                    events = self.h.receive_data(d)
                except h2.exceptions.ProtocolError as e:
                    # a flow-control violation, an HPACK error, too many streams...: what
                    # the real server answers with a GOAWAY; for the tests, the client's bug
                    S.error("h2 protocol error from the client: %s: %s"
                            % (type(e).__name__, e), conn=self.cid)
                    S.count("h2_protocol_errors")
                    try:
                        self.h.close_connection(error_code=1)
                    except Exception:
                        pass
                    self.flush()
                    self.die("protocol error")
                    break
                # PING and SETTINGS acks first (h2 queued them in receive_data): what the
                # events below cost (a message decoded per client heartbeat: 2,000 a second
                # with 10,000 streams held) must not make a live peer look dead
                if any(isinstance(ev, (h2.events.PingReceived, h2.events.RemoteSettingsChanged))
                       for ev in events):
                    self.flush()
                for ev in events:
                    self.event(ev)
                self.flush()
                self.cond.notify_all()
        self.die("closed")

    def event(self, ev):
        import h2.events
        if isinstance(ev, h2.events.RequestReceived):
            if self.goaway_sent is not None and ev.stream_id > self.goaway_sent:
                if self.goaway_seen:
                    S.error("h2: new stream %d after GOAWAY(last_stream_id=%d)"
                            % (ev.stream_id, self.goaway_sent), conn=self.cid)
                S.count("h2_refused_after_goaway")
                self.h.reset_stream(ev.stream_id, error_code=7)
                return
            st = H2Stream(self, ev.stream_id, dict(ev.headers))
            st.header_order = [k for k, _ in ev.headers]
            self.streams[ev.stream_id] = st
            # a window held "from the first byte" is decided here, on the connection's own
            # thread: the stream's thread starts later, and DATA read before then would
            # already have been acknowledged (the window reopened) on a loaded machine
            pre = S.config["runsse_scenario"]
            if (urllib.parse.urlsplit(st.headers.get(":path", "")).path == PATH_RUN
                    and pre and S.scenarios.get(pre, {}).get("h2_hold_window")):
                st.hold_window = True
                S.count("h2_hold_window_streams")
            opened = sum(1 for s in self.streams.values() if not (s.done and (s.ended or s.reset)))
            self.max_open = max(self.max_open, opened)
            with S.lock:
                S.counters["h2_max_streams_per_conn"] = max(
                    S.counters.get("h2_max_streams_per_conn", 0), opened)
            S.count("h2_streams")
            threading.Thread(target=h2_stream_main, args=(st,), daemon=True).start()
        elif isinstance(ev, h2.events.DataReceived):
            st = self.streams.get(ev.stream_id)
            n = ev.flow_controlled_length
            if st is None:
                return
            st.body += ev.data
            if st.hold_window:
                # keep the stream window closed but the connection's open: the others go on
                if n:
                    self.h.increment_flow_control_window(n)
                    S.count("h2_hold_window_bytes", n)
            elif n:
                self.h.acknowledge_received_data(n, ev.stream_id)
            if st.on_message:
                st.on_message()
        elif isinstance(ev, h2.events.StreamEnded):
            st = self.streams.get(ev.stream_id)
            if st:
                st.ended = True
                if st.on_message:
                    st.on_message()
        elif isinstance(ev, h2.events.StreamReset):
            st = self.streams.get(ev.stream_id)
            if st:
                st.reset = True
                st.wake_hold()
                S.count("h2_client_resets")
        elif isinstance(ev, h2.events.PingAckReceived):
            if ev.ping_data == b"goaway!!":
                self.goaway_seen = True
            self.ping_out.pop(ev.ping_data, None)
            S.count("h2_ping_acks")
        elif isinstance(ev, h2.events.PingReceived):
            S.count("h2_pings_received")
        elif isinstance(ev, h2.events.SettingsAcknowledged):
            # our SETTINGS took effect: from now on a request head over our
            # MAX_HEADER_LIST_SIZE is refused (python3-h2 applies it only when the value
            # changes, and ours was the initial one)
            self.h.decoder.max_header_list_size = int(
                self.h.local_settings.max_header_list_size)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            S.count("h2_goaway_received")
            self.die("GOAWAY from the client")


def h2_stream_main(st):
    h = st.headers
    req = {"method": h.get(":method", ""), "target": h.get(":path", ""),
           "path": urllib.parse.urlsplit(h.get(":path", "")).path, "query": "",
           "version": "HTTP/2", "headers": {k: v for k, v in h.items() if not k.startswith(":")},
           "header_order": st.header_order, "body": b""}
    # check_common wants a host: HTTP/2 carries it as :authority
    if ":authority" in h:
        req["headers"]["host"] = h[":authority"]
    rec = {"t": time.time(), "conn": st.cid, "listener": st.listener, "h2": True,
           "stream_id": st.sid, "method": req["method"], "path": req["path"], "query": "",
           "headers": req["headers"], "header_order": st.header_order, "body_len": 0,
           "body_hex": None}
    S.count("requests")
    S.count("requests " + req["path"])
    S.count("h2_requests")
    status = None
    try:
        if req["path"] == PATH_RUN and req["method"] == "POST":
            status = h2_run(st, req, rec)
        elif req["path"] in ROUTES and ROUTES[req["path"]][1] not in (h_runsse, h_append):
            # unary calls over HTTP/2: the whole body first
            end = time.time() + 30
            while not st.ended and not st.peer_closed() and time.time() < end:
                with st.hc.cond:
                    st.hc.cond.wait(0.2)
            req["body"] = st.body
            status = ROUTES[req["path"]][1](st, req, rec)
        else:
            status = connect_error(st, 404, "unimplemented", "no such path on this host")
    except PeerClosed:
        status = 0
    except Exception as e:
        traceback.print_exc()
        S.error("fake internal error (h2): %r" % e, path=req["path"])
        status = 500
        st.hc.reset_stream(st.sid, 2)
    rec["status"] = status
    S.record(rec)
    if not st.done and not st.reset:
        st.end_chunked()


def h2_message(st, run, rid, payload):
    """One AgentClientMessage from the Run request body: what a BidiAppend carries on
    HTTP/1.1, with the same checks (the first is the run request)."""
    try:
        msg = pb.dec_client_message(payload)
    except (pb.PBError, ValueError) as e:
        S.error("AgentClientMessage does not parse: %s" % e, request_id=rid)
        return False
    with run.cond:
        seq = run.next_seqno
        if seq == 0:
            bad = first_message_problems(msg, "first Run message")
            if bad:
                for b in bad:
                    S.error(b, request_id=rid)
                run.append_error = (400, "invalid_argument", "; ".join(bad))
                run.cond.notify_all()
                return False
            run.run_request = msg
            check_images(run)
            pick_scenario(run)
            st.hold_window = st.hold_window or bool((run.scenario or {}).get("h2_hold_window"))
        elif msg.get("type") == "run_request":
            S.error("run_request as Run message %d" % seq, request_id=rid)
        run.next_seqno = seq + 1
        entry = {"seqno": seq, "t": time.time(), "message": msg, "message_hex": payload.hex(),
                 "h2": True}
        # append_status: what HTTP/1.1 answers to that BidiAppend; on the Run stream the
        # server ends the stream with the error instead (a bidi stream's only way to refuse
        # one of its messages), and the message is not taken
        fail = (run.scenario or {}).get("append_status")
        if fail and int(fail.get("seqno", 0)) == seq:
            entry["rejected_with"] = fail["status"]
            run.h2_reject = (fail.get("code", "internal"), fail.get("message", ""))
            S.count("h2_messages_rejected")
            run.appends.append(entry)
            run.cond.notify_all()
            return True
        run.appends.append(entry)
        run.cond.notify_all()
    return True


def h2_run(st, req, rec):
    st_ = check_common(st, req, rec, True)
    if st_:
        return st_
    prof = rec["profile"]
    if prof != "connect":
        S.error("Run over HTTP/2 with content type %r" % req["headers"].get("content-type"))
        return connect_error(st, 415, "unknown", "Run speaks application/connect+proto")
    rid = req["headers"].get("x-request-id", "")
    run = S.run(rid)
    with run.cond:
        run.runsse_count += 1
        if run.runsse_count > 1:
            S.error("second Run for request id %s" % rid)
            return connect_error(st, 409, "already_exists", "duplicate request id")
        run.profile = prof
        run.transport = "h2"
        run.allowed_tools = req["headers"].get("x-cursor-agent-allowed-tools")
    rec["decoded"] = {"request_id": rid}
    parse_err = []

    def on_message():
        # under hc.cond: cut whole envelopes off the body
        while len(st.body) >= 5:
            flags = st.body[0]
            n = int.from_bytes(st.body[1:5], "big")
            if len(st.body) < 5 + n:
                break
            payload, st.body = st.body[5:5 + n], st.body[5 + n:]
            if flags & 0x02:
                # a client end-stream message: clients do not send one
                S.error("client sent a Connect end-stream frame on Run", request_id=rid)
                continue
            if flags & 0x01:
                S.error("compressed message on Run (the CLI never compresses)", request_id=rid)
                continue
            if not h2_message(st, run, rid, payload):
                parse_err.append(1)
        if st.ended and st.body:
            S.error("Run request body ends inside a message", request_id=rid)
            st.body = b""
    st.on_message = on_message
    with st.hc.cond:
        on_message()
    if client_outdated(req, run=True):
        code, msg, det = outdated_body()
        S.count("outdated_rejections")
        run.stream["ended"] = "outdated_client"
        st.start_chunked(200, CT_CONNECT)
        st.chunk(runsse_end(st, prof, CONNECT_CODES.index(code), msg, det))
        st.end_chunked()
        return 200
    if S.config["agent_host_only"] and st.listener != "agent":
        S.count("region_rejections")
        run.stream["ended"] = "wrong_region"
        st.start_chunked(200, CT_CONNECT)
        st.chunk(pb.end_stream({"metadata": {"x-cursor-message": [REGION_MESSAGE]}}))
        st.end_chunked()
        return 200
    pre = S.config["runsse_scenario"]
    sc0 = S.scenarios.get(pre, {}) if pre else {}
    if sc0.get("h2_rst_at_start") is not None:
        # RST_STREAM before any answer (REFUSED_STREAM by default)
        S.count("h2_rst_at_start")
        run.stream["ended"] = "rst_at_start"
        st.hc.reset_stream(st.sid, int(sc0["h2_rst_at_start"]))
        return 0
    if sc0.get("headers_stall"):
        run.stream["ended"] = "headers_stall"
        st.wait(float(sc0.get("max_s", S.config["stall_max_s"])))
        st.abort()
        return 0
    raw = sc0.get("runsse_response")
    if raw:
        st.respond(int(raw["status"]), raw.get("body", ""),
                   ctype=raw.get("content_type", "text/html"))
        return int(raw["status"])
    fail = sc0.get("runsse_status")
    if fail:
        return connect_error(st, fail["status"], fail.get("code", "internal"),
                             fail.get("message", ""))
    with run.cond:
        run.registered = True
        run.cond.notify_all()
    start_run_head(st, run, CT_CONNECT)
    if sc0.get("h2_flood"):
        run.stream["ended"] = "flood"
        st.hc.flood(sc0["h2_flood"])
        return 200
    S.count("streams_started")
    S.stream_delta(1)
    ctx = StreamCtx(st, run)
    try:
        r = st.wait(S.config["append_wait_s"], run.cond,
                    lambda: run.next_seqno > 0 or run.append_error is not None)
        if r == "closed":
            run.stream["ended"] = "client_closed_before_append"
            raise PeerClosed("closed before the run request")
        if r == "timeout":
            S.error("no run request within %.1fs for %s" % (S.config["append_wait_s"], rid))
            st.chunk(runsse_end(st, prof, 3, "no run request arrived"))
            st.end_chunked()
            run.stream["ended"] = "no_append"
            return 200
        if run.append_error is not None:
            status, code, msg = run.append_error
            st.chunk(runsse_end(st, prof, CONNECT_CODES.index(code)
                                if code in CONNECT_CODES else 2, msg))
            st.end_chunked()
            run.stream["ended"] = "append_rejected"
            return 200
        sc = run.scenario or {}
        rec["scenario"] = run.scenario_name
        steps = select_steps(sc, run.run_request, run.attempt)
        run.stream["ended"] = "running"
        try:
            run_steps(ctx, steps)
        except H2Rejected:
            code, msg = run.h2_reject
            st.chunk(runsse_end(st, prof, CONNECT_CODES.index(code)
                                if code in CONNECT_CODES else 2, msg))
            ctx.finished = True
            st.end_chunked()
            run.stream["ended"] = "message_rejected"
            return 200
        if not ctx.finished:
            st.end_chunked()
            ctx.finished = True
        run.stream["ended"] = "completed"
        S.count("streams_completed")
        # the client ends its side once it has read the end: wait a little for it
        st.wait(5.0, st.hc.cond, lambda: st.ended or st.reset)
        run.stream["client_end"] = "end_stream" if st.ended else "reset" if st.reset \
            else "none"
    except PeerClosed as e:
        stream_peer_closed(ctx, e)
    finally:
        stream_done(ctx)
    return 200


def serve_h2(sock, cid, listener):
    hc = H2Conn(sock, cid, listener)
    try:
        hc.serve()
    finally:
        try:
            sock.close()
        except OSError:
            pass


ROUTES = {
    PATH_RUN: ("POST", h_run_http1),
    PATH_RUNSSE: ("POST", h_runsse),
    PATH_APPEND: ("POST", h_append),
    PATH_MODELS: ("POST", h_models),
    PATH_USAGE: ("POST", h_usage),
    PATH_PLAN: ("POST", h_plan),
    PATH_SERVER_CONFIG: ("POST", h_server_config),
    "/auth/poll": ("GET", h_poll),
    "/oauth/token": ("POST", h_oauth_token),
    "/auth/refresh": ("POST", h_refresh),
    "/auth/exchange_user_api_key": ("POST", h_exchange),
}


def alpn_ctx(ctx, listener):
    """The listener's context with the ALPN list the config gives it now (cached)."""
    key = "main_alpn" if listener == "main" else "agent_alpn" if listener == "agent" else None
    if key is None or not S.config.get(key):
        return ctx
    protos = tuple(S.config[key])
    c = _ALPN_CTX.get((id(ctx), protos))
    if c is None:
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.minimum_version = ssl.TLSVersion.TLSv1_2
        c.load_cert_chain(*ctx._coai_cert)
        c.set_alpn_protocols(list(protos))
        _ALPN_CTX[(id(ctx), protos)] = c
    return c


_ALPN_CTX = {}


CONN_IDS = __import__("itertools").count(1)


def handle_conn(raw, addr, listener, ctx):
    S.count("connections_accepted")
    S.count("connections_accepted_" + listener)
    with S.lock:
        S.open_connections += 1
        cid = next(CONN_IDS)         # unique for the process, across /reset
    raw.settimeout(10)
    try:
        # as real servers do: without it a kept-alive stream's first small write waits for the
        # client's delayed ACK (Nagle), up to 40 ms
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
    try:
        try:
            sock = alpn_ctx(ctx, listener).wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as e:
            S.count("tls_handshake_failures")
            S.count("tls_handshake_failures_" + listener)
            with S.lock:
                S.counters.setdefault("tls_failure_reasons", [])
                S.counters["tls_failure_reasons"] = (S.counters["tls_failure_reasons"]
                                                     + [str(e)[:200]])[-20:]
            try:
                raw.close()
            except OSError:
                pass
            return
        S.count("tls_handshakes")
        S.count("tls_handshakes_" + listener)
        if sock.session_reused:
            S.count("tls_resumed_" + listener)
        t_accept = time.time()
        S.count("tls_version_" + str(sock.version()))
        alpn = sock.selected_alpn_protocol()
        S.count("alpn_%s_%s" % (listener, alpn or "none"))
        if alpn == "h2":
            serve_h2(sock, cid, listener)
            return
        conn = Conn(sock, cid, listener)
        mode = S.config["agent_http1"]
        if listener == "agent" and mode is not True:
            # the agent hosts speak HTTP/2 only and refuse HTTP/1.1 at the connection level
            refuse_http1(conn, mode or "illegal", listener, t_accept)
            return
        while not S.stop.is_set():
            try:
                req = conn.read_request()
            except (ValueError, PeerClosed) as e:
                if not isinstance(e, PeerClosed):
                    S.error("malformed HTTP request: %s" % e, conn=cid)
                    try:
                        conn.respond(400, json.dumps({"code": "invalid_argument",
                                                      "message": str(e)}), close=True)
                    except PeerClosed:
                        pass
                break
            if req is None:
                break
            rec = {"t": time.time(), "conn": cid, "listener": listener,
                   "conn_age_s": time.time() - t_accept,
                   "method": req["method"], "path": req["path"], "query": req["query"],
                   "headers": req["headers"], "header_order": req["header_order"],
                   "body_len": len(req["body"]),
                   "body_hex": req["body"].hex() if len(req["body"]) <= 65536 else None}
            S.count("requests")
            S.count("requests " + req["path"])
            route = ROUTES.get(req["path"])
            status = None
            try:
                if route is None:
                    status = connect_error(conn, 404, "unimplemented", "no such path")
                elif route[0] != req["method"]:
                    status = connect_error(conn, 405, "unimplemented", "method not allowed")
                else:
                    status = route[1](conn, req, rec)
            except PeerClosed:
                status = 0
            except Exception as e:  # a bug in the fake: record loudly, keep serving
                traceback.print_exc()
                S.error("fake internal error: %r" % e, path=req["path"])
                status = 500
                try:
                    connect_error(conn, 500, "internal", "fake bug", close=True)
                except PeerClosed:
                    pass
            rec["status"] = status
            S.record(rec)
            if conn.closed or req["headers"].get("connection", "").lower() == "close" \
                    or req["version"] == "HTTP/1.0":
                break
        conn.abort(close_notify=conn.close_notify)
    finally:
        with S.lock:
            S.open_connections -= 1
        S.count("connections_closed")


H2_SETTINGS = bytes([0, 0, 6, 4, 0, 0, 0, 0, 0]) + struct.pack(">HI", 3, 100)


def h2_goaway(debug):
    """An HTTP/2 GOAWAY frame on stream 0: last stream 0, PROTOCOL_ERROR, debug text."""
    payload = struct.pack(">II", 0, 1) + debug
    return struct.pack(">I", len(payload))[1:] + bytes([7, 0, 0, 0, 0, 0]) + payload


def refuse_http1(conn, mode, listener, t_accept):
    """An HTTP/2-only host (the live *.api5.cursor.sh agent hosts) given an HTTP/1.1 request:
    refused at the connection level, then the connection is closed. Recorded like a request
    (status "http1_refused:<mode>"), counted as http1_refused_<listener>. mode: "illegal"
    (a 400 "illegal request line"), "close" (no byte), "h2" (SETTINGS + GOAWAY) or "464" (the
    load balancer's incompatible-protocol status, an empty body, as reported live)."""
    try:
        req = conn.read_request()
    except (ValueError, PeerClosed):
        req = None
    except socket.timeout:
        req = None
    rec = {"t": time.time(), "conn": conn.cid, "listener": listener,
           "conn_age_s": time.time() - t_accept, "status": "http1_refused:" + mode}
    if req:
        rec.update({"method": req["method"], "path": req["path"], "query": req["query"],
                    "headers": req["headers"], "header_order": req["header_order"],
                    "body_len": len(req["body"]), "body_hex": None})
    else:
        rec.update({"method": None, "path": "", "headers": {}, "body_len": 0})
    S.count("http1_refused_" + listener)
    S.record(rec)
    try:
        if mode == "illegal":
            conn.send(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
                      b"content-length: 20\r\nconnection: close\r\n\r\nillegal request line")
        elif mode == "h2":
            conn.send(H2_SETTINGS + h2_goaway(b"illegal request line"))
        elif mode == "464":     # the AWS load balancer in front of the agent hosts
            conn.send(b"HTTP/1.1 464 \r\nserver: awselb/2.0\r\ncontent-length: 0\r\n"
                      b"connection: close\r\n\r\n")
    except PeerClosed:
        pass
    conn.abort(close_notify=True)


def make_ctx(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx._coai_cert = (cert, key)
    return ctx


def serve_tls(name, ctx, port=0):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1024)

    def loop():
        while not S.stop.is_set():
            try:
                c, a = ls.accept()
            except OSError:
                if S.stop.is_set():
                    return
                time.sleep(0.05)
                continue
            threading.Thread(target=handle_conn, args=(c, a, name, ctx), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return ls, ls.getsockname()[1]


def h_rst_handshake(c):
    """Read the ClientHello, then reset the connection in the middle of the handshake."""
    c.settimeout(10)
    try:
        S.count("rst_handshake_hello_bytes", len(c.recv(4096)))
    except OSError:
        pass
    rst_close(c)
    S.count("rst_handshake_resets")


def h_silent(c):
    """Accept TCP and never answer (a TLS server that hangs): hold until the peer leaves."""
    t0 = time.time()
    end = t0 + float(S.config["silent_max_s"])
    got = 0
    how = "timeout"
    c.settimeout(0.2)
    while time.time() < end and not S.stop.is_set():
        try:
            d = c.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            how = "reset"
            break
        if not d:
            how = "closed"
            break
        got += len(d)
    try:
        c.close()
    except OSError:
        pass
    with S.lock:
        S.counters["silent_done"] = S.counters.get("silent_done", 0) + 1
        S.counters.setdefault("silent_held", [])
        S.counters["silent_held"] = (S.counters["silent_held"] + [
            {"held_s": round(time.time() - t0, 2), "bytes_in": got, "end": how}])[-50:]


def serve_raw(name, handler):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(256)

    def loop():
        while not S.stop.is_set():
            try:
                c, _ = ls.accept()
            except OSError:
                if S.stop.is_set():
                    return
                time.sleep(0.05)
                continue
            S.count("connections_accepted_" + name)
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return ls, ls.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# control API

class Ctl(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, obj, status=200):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path == "/state":
            return self._json(S.snapshot())
        if u.path == "/requests":
            since = int((q.get("since") or ["0"])[0])
            with S.lock:
                reqs = [r for r in S.requests if r["seq"] >= since]
            return self._json(reqs)
        if u.path == "/runs":
            with S.lock:
                runs = list(S.runs.values())
            return self._json([r.summary() for r in runs])
        if u.path == "/config":
            return self._json({"config": S.config, "scenarios": sorted(S.scenarios)})
        self._json({"error": "not found"}, 404)

    def do_POST(self):
        try:
            body = self._body()
        except ValueError:
            return self._json({"error": "bad json"}, 400)
        if self.path == "/reset":
            S.reset()
            return self._json({"ok": True})
        if self.path == "/scenario":
            S.scenarios[body["name"]] = body["scenario"]
            return self._json({"ok": True})
        if self.path == "/next_scenario":
            with S.lock:
                S.next_scenarios.append(body["name"])
            return self._json({"ok": True})
        if self.path == "/config":
            unknown = [k for k in body if k not in DEFAULT_CONFIG and k not in (
                "valid_tokens", "refresh_tokens")]
            if unknown:
                return self._json({"error": "unknown config keys %s" % unknown}, 400)
            for k, v in body.items():
                if k == "valid_tokens":
                    S.valid_tokens = set(v)
                elif k == "refresh_tokens":
                    S.refresh_tokens = set(v)
                else:
                    S.config[k] = v
            return self._json({"ok": True})
        if self.path == "/release":
            return self._json({"ok": True, "h2_streams": S.release_holds()})
        if self.path == "/shutdown":
            self._json({"ok": True})
            S.stop.set()
            return
        self._json({"error": "not found"}, 404)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cert-dir", help="directory made by certs.py (created when missing)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--ready-file")
    ap.add_argument("--scenarios", help="JSON file {name: scenario} to add")
    ap.add_argument("--token", action="append", default=[], help="valid access token")
    ap.add_argument("--refresh-token", action="append", default=[])
    ap.add_argument("--config", help="JSON object merged into the config")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    if a.selftest:
        import subprocess
        return subprocess.call([sys.executable, os.path.join(HERE, "test_fake.py")])
    if not a.cert_dir:
        ap.error("--cert-dir is required")
    import certs
    cp = certs.paths(a.cert_dir)
    if not os.path.exists(cp["server_cert"]):
        cp = certs.make_certs(a.cert_dir)
    # The fake's model table must be the one of the vector file (same ids, same order).
    vec = [i for i, _ in load_vector_model_ids()]
    mine = [m["displayModelId"] for m in BASE_MODELS]
    if vec != mine:
        sys.stderr.write("fake_cursor: model table %s differs from vector %s\n" % (mine, vec))
        return 2
    if a.scenarios:
        with open(a.scenarios) as f:
            S.scenarios.update(json.load(f))
    if a.config:
        S.config.update(json.loads(a.config))
    S.valid_tokens.update(a.token)
    S.refresh_tokens.update(a.refresh_token)
    listeners = {}
    _, listeners["port"] = serve_tls("main", make_ctx(cp["server_cert"], cp["server_key"]),
                                     a.port)
    # a second host for RunSSE/BidiAppend, named by GetServerConfig (agent_url "agent")
    _, listeners["agent_port"] = serve_tls("agent", make_ctx(cp["server_cert"], cp["server_key"]))
    _, listeners["wrong_host_port"] = serve_tls(
        "wronghost", make_ctx(cp["wronghost_cert"], cp["wronghost_key"]))
    _, listeners["wrong_ca_port"] = serve_tls(
        "wrongca", make_ctx(cp["wrongca_cert"], cp["wrongca_key"]))
    _, listeners["rst_handshake_port"] = serve_raw("rst_handshake", h_rst_handshake)
    _, listeners["silent_port"] = serve_raw("silent", h_silent)
    S.ports = listeners
    ctl = ThreadingHTTPServer(("127.0.0.1", a.control_port), Ctl)
    ctl.daemon_threads = True
    threading.Thread(target=ctl.serve_forever, daemon=True).start()
    info = dict(listeners, control_port=ctl.server_address[1], pid=os.getpid(), ca=cp["ca"],
                wrong_ca=cp["wrong_ca"], cert_dir=a.cert_dir)
    line = json.dumps(info)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line)
        os.rename(tmp, a.ready_file)
    print(line, flush=True)
    try:
        while not S.stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    ctl.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
