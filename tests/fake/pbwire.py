"""Hand-written protobuf wire codec for the fake Cursor upstream (stdlib only).

Written from the spec (cursor-protocol.md, agent.proto) on purpose without sharing anything with
cursor_oai.h, so that the C encoder/decoder and this module check each other.

Three layers:
  * wire primitives: varints, tags, length-delimited fields, a strict schema-less reader;
  * builders for the AgentServerMessage frames a fake server sends (canonical proto3 encoding:
    fields in field-number order, default scalars omitted, as protobuf-es writes them), envelopes,
    gRPC-web trailers and Connect end-stream frames;
  * decoders that turn client bodies (BidiRequestId, BidiAppendRequest, AgentClientMessage) into
    plain dicts for recording and validation, plus the x-cursor-checksum computation (spec 3).
"""

import base64
import hashlib
import json
import struct
import time
import urllib.parse


class PBError(ValueError):
    """Malformed protobuf or envelope bytes."""


# ---------------------------------------------------------------------------------------------
# wire primitives

WT_VARINT, WT_I64, WT_LEN, WT_I32 = 0, 1, 2, 5


def enc_varint(n):
    """Unsigned LEB128; negative numbers are written as 64-bit two's complement (int32/int64)."""
    if n < 0:
        n += 1 << 64
    if n >= 1 << 64:
        raise PBError("varint out of range")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def dec_varint(buf, pos):
    """Returns (value, new_pos). At most 10 bytes; truncation is an error."""
    val = 0
    shift = 0
    for i in range(10):
        if pos >= len(buf):
            raise PBError("truncated varint")
        b = buf[pos]
        pos += 1
        val |= (b & 0x7F) << shift
        if not b & 0x80:
            if i == 9 and b > 1:
                raise PBError("varint overflows 64 bits")
            return val, pos
        shift += 7
    raise PBError("varint longer than 10 bytes")


def tag(fn, wt):
    if fn < 1 or fn > (1 << 29) - 1:
        raise PBError("bad field number %r" % fn)
    return enc_varint((fn << 3) | wt)


def _b(v):
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def f_varint(fn, v):
    """Varint field (uint32/int32/int64/bool/enum), always written."""
    return tag(fn, WT_VARINT) + enc_varint(int(v))


def f_bytes(fn, v):
    """Length-delimited field (string/bytes/sub-message), always written."""
    v = _b(v)
    return tag(fn, WT_LEN) + enc_varint(len(v)) + v


def f_double(fn, v):
    return tag(fn, WT_I64) + struct.pack("<d", float(v))


def o_varint(fn, v):
    """proto3 implicit-presence scalar: omitted when 0/False."""
    return f_varint(fn, v) if v else b""


def o_str(fn, v):
    """proto3 implicit-presence string/bytes: omitted when empty or None."""
    return f_bytes(fn, v) if v else b""


def parse(buf):
    """Strict schema-less reader: list of (field_number, wire_type, value).

    value is an int for varint/fixed fields, bytes for length-delimited ones. Groups (wire
    types 3/4), field number 0 and any truncation raise PBError."""
    buf = bytes(buf)
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = dec_varint(buf, pos)
        fn, wt = key >> 3, key & 7
        if fn == 0:
            raise PBError("field number 0")
        if wt == WT_VARINT:
            v, pos = dec_varint(buf, pos)
        elif wt == WT_I64:
            if pos + 8 > n:
                raise PBError("truncated fixed64")
            v = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wt == WT_LEN:
            ln, pos = dec_varint(buf, pos)
            if ln > n - pos:
                raise PBError("length %d exceeds remaining %d" % (ln, n - pos))
            v = buf[pos:pos + ln]
            pos += ln
        elif wt == WT_I32:
            if pos + 4 > n:
                raise PBError("truncated fixed32")
            v = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise PBError("unsupported wire type %d" % wt)
        out.append((fn, wt, v))
    return out


def fields_of(fields, fn, wt=None):
    r = [v for (f, w, v) in fields if f == fn and (wt is None or w == wt)]
    return r


def last(fields, fn, wt=None, default=None):
    """Last occurrence wins (protobuf merge semantics for singular fields)."""
    r = fields_of(fields, fn, wt)
    return r[-1] if r else default


def text(v):
    """Decode a string field strictly (proto3 strings must be valid UTF-8)."""
    if v is None:
        return None
    try:
        return bytes(v).decode("utf-8")
    except UnicodeDecodeError:
        raise PBError("string field is not valid UTF-8")


def int32(v):
    if v is None:
        return None
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


# ---------------------------------------------------------------------------------------------
# google.protobuf.Value

def enc_value(obj):
    """Canonical Value encoding (null -> null_value 0 written, since it is a oneof member)."""
    if obj is None:
        return f_varint(1, 0)
    if isinstance(obj, bool):
        return f_varint(4, 1 if obj else 0)
    if isinstance(obj, (int, float)):
        return f_double(2, obj)
    if isinstance(obj, (str, bytes)):
        return f_bytes(3, obj)
    if isinstance(obj, dict):
        return f_bytes(5, enc_struct(obj))
    if isinstance(obj, (list, tuple)):
        return f_bytes(6, b"".join(f_bytes(1, enc_value(x)) for x in obj))
    raise TypeError("cannot encode %r as Value" % (obj,))


def enc_struct(d):
    return b"".join(f_bytes(1, o_str(1, k) + f_bytes(2, enc_value(v))) for k, v in d.items())


_MISSING = object()


def dec_value(buf):
    """Value -> Python object. An empty Value (no kind) returns _MISSING."""
    fl = parse(buf)
    for fn, wt, v in fl:  # first recognised member wins, like the spec's decoder
        if fn == 1 and wt == WT_VARINT:
            return None
        if fn == 2 and wt == WT_I64:
            d = struct.unpack("<d", struct.pack("<Q", v))[0]
            return int(d) if d.is_integer() and abs(d) < 2 ** 53 else d
        if fn == 3 and wt == WT_LEN:
            return text(v)
        if fn == 4 and wt == WT_VARINT:
            return v == 1
        if fn == 5 and wt == WT_LEN:
            return dec_struct(v)
        if fn == 6 and wt == WT_LEN:
            out = []
            for f2, w2, item in parse(v):
                if f2 == 1 and w2 == WT_LEN:
                    x = dec_value(item)
                    out.append(None if x is _MISSING else x)
            return out
    return _MISSING


def dec_struct(buf):
    out = {}
    for fn, wt, ent in parse(buf):
        if fn != 1 or wt != WT_LEN:
            continue
        ef = parse(ent)
        k = text(last(ef, 1, WT_LEN, b""))
        v = last(ef, 2, WT_LEN, b"")
        x = dec_value(v)
        if x is not _MISSING:
            out[k] = x
    return out


def value_to_json(buf):
    x = dec_value(buf)
    return None if x is _MISSING else x


# ---------------------------------------------------------------------------------------------
# envelopes, trailers, end-stream

FLAG_DATA, FLAG_COMPRESSED, FLAG_END_STREAM, FLAG_TRAILER = 0x00, 0x01, 0x02, 0x80


def envelope(payload, flags=FLAG_DATA):
    payload = _b(payload)
    return struct.pack(">BI", flags, len(payload)) + payload


def trailer(status=0, message=None, details=None, extra=None):
    """gRPC-web trailer frame. message is percent-encoded like grpc-message; details is the raw
    google.rpc.Status bytes (written as standard base64) or a ready base64 str."""
    lines = ["grpc-status: %d" % status]
    if message is not None:
        lines.append("grpc-message: " + urllib.parse.quote(message, safe=""))
    if details is not None:
        d = details if isinstance(details, str) else base64.b64encode(details).decode()
        lines.append("grpc-status-details-bin: " + d)
    for k, v in (extra or {}).items():
        lines.append("%s: %s" % (k, v))
    return envelope("".join(l + "\r\n" for l in lines), FLAG_TRAILER)


def end_stream(obj=None):
    """Connect end-stream frame (flags 0x02) with a JSON payload."""
    return envelope(json.dumps({} if obj is None else obj, separators=(",", ":")), FLAG_END_STREAM)


ERROR_DETAILS_TYPE = "type.googleapis.com/aiserver.v1.ErrorDetails"


def error_details(error_code, title="", detail="", is_retryable=None, is_expected=None,
                  additional_info=None, action_required=None):
    """aiserver.v1.ErrorDetails {1 error enum, 2 CustomErrorDetails, 3 optional is_expected}.
    action_required: CustomErrorDetails.analytics_metadata (10) {1 action_required}, as the
    live 2026 "Update Required" answer carries it."""
    cd = o_str(1, title) + o_str(2, detail)
    if is_retryable is not None:
        cd += f_varint(4, 1 if is_retryable else 0)
    for k, v in (additional_info or {}).items():
        cd += f_bytes(7, f_bytes(1, k) + f_bytes(2, v))
    if action_required is not None:
        cd += f_bytes(10, f_bytes(1, action_required))
    out = o_varint(1, error_code) + f_bytes(2, cd)
    if is_expected is not None:
        out += f_varint(3, 1 if is_expected else 0)
    return out


def rpc_status(code, message="", details=()):
    """google.rpc.Status {1 code, 2 message, 3 repeated Any{1 type_url, 2 value}}."""
    out = o_varint(1, code) + o_str(2, message)
    for type_url, value in details:
        out += f_bytes(3, f_bytes(1, type_url) + o_str(2, value))
    return out


class FrameReader:
    """Incremental envelope splitter (for the self-test client)."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= 5:
            flags, ln = struct.unpack_from(">BI", self.buf, 0)
            if len(self.buf) - 5 < ln:
                break
            out.append((flags, self.buf[5:5 + ln]))
            self.buf = self.buf[5 + ln:]
        return out


def parse_trailer(payload):
    out = {}
    for line in payload.decode("utf-8", "replace").split("\n"):
        line = line.strip()
        if not line or ":" not in line:
            continue
        k, v = line.split(":", 1)
        out[k.strip().lower()] = v.strip()
    return out


# ---------------------------------------------------------------------------------------------
# AgentServerMessage builders (canonical encoding)

def _iu(fn, body):
    """AgentServerMessage{1: InteractionUpdate{fn: body}}."""
    return f_bytes(1, f_bytes(fn, body))


def m_text(t):
    return _iu(1, o_str(1, t))


def m_thinking(t):
    return _iu(4, o_str(1, t))


def m_thinking_completed(ms):
    return _iu(5, o_varint(1, ms))


def m_token_delta(n):
    return _iu(8, o_varint(1, n))


def m_heartbeat():
    return _iu(13, b"")


def m_turn_ended(tokens=None):
    """TurnEndedUpdate; tokens = [input, output, cache_read, cache_write, reasoning] (fields
    1-5, as the 2026 server sends them) or None for the bare 72 00."""
    body = b""
    for i, n in enumerate(tokens or ()):
        if n is not None:
            body += o_varint(i + 1, int(n))
    return _iu(14, body)


def m_step_completed(step_id, ms):
    return _iu(17, o_varint(1, step_id) + o_varint(2, ms))


def m_step_started(step_id):
    return _iu(16, o_varint(1, step_id))


TOOLCALL_FIELD = {"shell": 1, "delete": 3, "glob": 4, "grep": 5, "read": 8, "edit": 12, "ls": 13,
                  "mcp": 15, "apply_agent_diff": 22}


def m_tool_call(kind, call_id, tool, args=b"", model_call_id="", completed=False):
    """tool_call_started (2) / tool_call_completed (3): {1 call_id, 2 ToolCall{tool: {1 args}},
    3 model_call_id}. tool is a ToolCall field name or number; args are the raw Args bytes."""
    tf = TOOLCALL_FIELD[tool] if isinstance(tool, str) else int(tool)
    tc = f_bytes(tf, f_bytes(1, args) if args else b"")
    return _iu(3 if completed else 2, o_str(1, call_id) + f_bytes(2, tc) + o_str(3, model_call_id))


def m_partial_tool_call(call_id, args_text_delta, model_call_id=""):
    return _iu(7, o_str(1, call_id) + o_str(3, args_text_delta) + o_str(4, model_call_id))


def m_checkpoint(root_prompt_messages_json=(), used_tokens=None, max_tokens=None,
                 pending_tool_calls=(), turns=()):
    body = b"".join(f_bytes(1, x) for x in root_prompt_messages_json)
    body += b"".join(f_bytes(4, x) for x in pending_tool_calls)
    if used_tokens is not None or max_tokens is not None:
        body += f_bytes(5, o_varint(1, used_tokens or 0) + o_varint(2, max_tokens or 0))
    body += b"".join(f_bytes(8, x) for x in turns)
    return f_bytes(3, body)


def m_kv_set_blob(kv_id, blob_id, data, metadata=None):
    meta = f_bytes(4, metadata) if metadata is not None else b""
    return f_bytes(4, o_varint(1, kv_id) + f_bytes(3, o_str(1, blob_id) + o_str(2, data)) + meta)


def m_kv_get_blob(kv_id, blob_id, metadata=None):
    meta = f_bytes(4, metadata) if metadata is not None else b""
    return f_bytes(4, o_varint(1, kv_id) + f_bytes(2, o_str(1, blob_id)) + meta)


EXEC_FIELD = {"shell": 2, "write": 3, "delete": 4, "grep": 5, "read": 7, "ls": 8,
              "diagnostics": 9, "request_context": 10, "mcp": 11, "shell_stream": 14,
              "background_shell_spawn": 16, "fetch": 20, "computer_use": 22,
              "subagent": 28, "mcp_state": 36, "precheck_41": 41, "precheck_42": 42,
              "precheck_43": 43, "pi_read": 45, "mini_swe_agent_bash": 52}


def a_shell(command, working_directory="", timeout=0, tool_call_id="", timeout_behavior=0,
            hard_timeout=0, description="", close_stdin=False, conversation_id="",
            request_id=""):
    """ShellArgs; 13-23 as the 2026-10 server sends them."""
    return (o_str(1, command) + o_str(2, working_directory) + o_varint(3, timeout)
            + o_str(4, tool_call_id) + o_varint(13, timeout_behavior)
            + o_varint(14, hard_timeout) + o_str(15, description) + o_varint(17, close_stdin)
            + o_str(21, conversation_id) + o_str(23, request_id))


def a_mcp_state(server_identifiers=()):
    """McpStateExecArgs {1 repeated server_identifiers}."""
    return b"".join(f_bytes(1, x) for x in server_identifiers)


def a_write(path, file_text="", tool_call_id="", return_file_content_after_write=False):
    return (o_str(1, path) + o_str(2, file_text) + o_str(3, tool_call_id)
            + o_varint(4, return_file_content_after_write))


def a_grep(pattern, path=None, glob=None, output_mode=None, tool_call_id=""):
    out = o_str(1, pattern)
    if path is not None:
        out += f_bytes(2, path)
    if glob is not None:
        out += f_bytes(3, glob)
    if output_mode is not None:
        out += f_bytes(4, output_mode)
    return out + o_str(14, tool_call_id)


def a_read(path, tool_call_id=""):
    return o_str(1, path) + o_str(2, tool_call_id)


def a_ls(path, ignore=(), tool_call_id=""):
    return o_str(1, path) + b"".join(f_bytes(2, x) for x in ignore) + o_str(3, tool_call_id)


def a_mcp(tool_name, args=None, tool_call_id="", provider_identifier="cursor-tools", name=None):
    if name is None:
        name = provider_identifier + "-" + tool_name
    ent = b"".join(f_bytes(2, o_str(1, k) + f_bytes(2, enc_value(v)))
                   for k, v in (args or {}).items())
    return (o_str(1, name) + ent + o_str(3, tool_call_id) + o_str(4, provider_identifier)
            + o_str(5, tool_name))


def a_request_context(notes_session_id=None, workspace_id=None):
    out = b""
    if notes_session_id is not None:
        out += f_bytes(2, notes_session_id)
    if workspace_id is not None:
        out += f_bytes(3, workspace_id)
    return out


def m_exec(exec_id_num, kind, args, exec_id="", envelope=False):
    """ExecServerMessage {1 id, <kind field> args, 15 exec_id} in field-number order;
    envelope: also 19 span_context and 55 accept_hook_additional_contexts (2026-10)."""
    fn = EXEC_FIELD[kind] if isinstance(kind, str) else int(kind)
    parts = [(1, o_varint(1, exec_id_num)), (fn, f_bytes(fn, args)), (15, o_str(15, exec_id))]
    if envelope:
        parts += [(19, f_bytes(19, o_str(1, "trace-1") + o_str(2, "span-1"))),
                  (55, f_varint(55, 1))]
    parts.sort(key=lambda p: p[0])
    return f_bytes(2, b"".join(p[1] for p in parts))


def m_exec_abort(exec_id_num):
    return f_bytes(5, f_bytes(1, o_varint(1, exec_id_num)))


INTERACTION_QUERY_FIELD = {"web_search": 2, "ask_question": 3, "switch_mode": 4, "exa_search": 5,
                           "exa_fetch": 6, "create_plan": 7, "setup_vm_environment": 8,
                           "web_fetch": 9, "pr_management": 10, "mcp_auth": 11,
                           "generate_image": 12, "replace_env": 13, "connect_scm": 14}
# The typed outcomes of the responses that have one (notes 2026-late-autumn N3): kind ->
# {field: name}; those marked with a reason carry it as their field 1.
QUERY_OUTCOMES = {"setup_vm_environment": {1: "success"},
                  "web_fetch": {1: "approved", 2: "rejected"},
                  "pr_management": {3: "rejected"},
                  "mcp_auth": {1: "approved", 2: "rejected"},
                  "replace_env": {1: "success", 2: "failure"},
                  "connect_scm": {1: "approved", 2: "rejected", 3: "failed"}}


def m_interaction_query(qid, kind="web_search", body=b""):
    return f_bytes(7, o_varint(1, qid) + f_bytes(INTERACTION_QUERY_FIELD[kind], body))


# ---------------------------------------------------------------------------------------------
# client-side builders (used by the self-test client to play the proxy's part)

def c_bidi_request_id(request_id):
    return o_str(1, request_id)


def c_bidi_append(data_msg, request_id, seqno, hex_upper=False):
    h = bytes(data_msg).hex()
    if hex_upper:
        h = h.upper()
    return o_str(1, h) + f_bytes(2, o_str(1, request_id)) + f_varint(3, seqno)


def c_run_request(prompt, model_id, message_id="m-1", conversation_id="c-1", tools=(),
                  cwd="/tmp/work", tz="UTC", with_state=True, with_context=True):
    env = (o_str(1, "linux 6.1.0") + f_bytes(2, cwd) + o_str(3, "/bin/sh") + o_str(10, tz)
           + o_str(11, cwd))
    defs = b""
    for t in tools:
        defs += f_bytes(7, o_str(1, "cursor-tools-" + t) + f_bytes(3, enc_value(
            {"type": "object", "properties": {}})) + o_str(4, "cursor-tools") + o_str(5, t))
    ctx = f_bytes(4, env) + defs
    um = o_str(1, prompt) + o_str(2, message_id) + f_varint(4, 1)
    uma = f_bytes(1, um) + (f_bytes(2, ctx) if with_context else b"")
    rr = (f_bytes(1, b"") if with_state else b"") + f_bytes(2, f_bytes(1, uma))
    rr += f_bytes(3, o_str(1, model_id)) + o_str(5, conversation_id)
    return f_bytes(1, rr)


def c_kv_set_result(kv_id, error=None):
    res = f_bytes(1, o_str(1, error)) if error else b""
    return f_bytes(3, o_varint(1, kv_id) + f_bytes(3, res))


def c_kv_get_result(kv_id, data=None):
    return f_bytes(3, o_varint(1, kv_id) + f_bytes(2, f_bytes(1, data) if data is not None
                                                      else b""))


def c_read_result(exec_num, exec_id, path, content):
    succ = o_str(1, path) + o_str(2, content) + o_varint(3, content.count("\n") + 1)
    return f_bytes(2, o_varint(1, exec_num) + f_bytes(7, f_bytes(1, succ)) + o_str(15, exec_id))


def c_stream_close(exec_num):
    return f_bytes(5, f_bytes(1, o_varint(1, exec_num)))


# ---------------------------------------------------------------------------------------------
# decoders for client bodies

def unenvelope(body):
    """Exactly one flags-0 envelope whose length matches the body."""
    body = bytes(body)
    if len(body) < 5:
        raise PBError("body shorter than an envelope header (%d bytes)" % len(body))
    flags, ln = struct.unpack_from(">BI", body, 0)
    if flags != 0:
        raise PBError("request envelope flags 0x%02x (expected 0x00)" % flags)
    if ln != len(body) - 5:
        raise PBError("envelope length %d but %d payload bytes" % (ln, len(body) - 5))
    return body[5:]


def dec_bidi_request_id(payload):
    return text(last(parse(payload), 1, WT_LEN, b""))


def dec_bidi_append(payload):
    """-> {data_hex, request_id, append_seqno (None when absent), seqno_present}."""
    fl = parse(payload)
    data = last(fl, 1, WT_LEN)
    rid_msg = last(fl, 2, WT_LEN)
    seq = last(fl, 3, WT_VARINT)
    return {
        "data_hex": text(data) if data is not None else None,
        "request_id": dec_bidi_request_id(rid_msg) if rid_msg is not None else None,
        "append_seqno": int32(seq) if seq is not None else None,
    }


EXEC_RESULT_NAMES = {2: "shell_result", 3: "write_result", 4: "delete_result", 5: "grep_result",
                     7: "read_result", 8: "ls_result", 9: "diagnostics_result",
                     10: "request_context_result", 11: "mcp_result", 14: "shell_stream",
                     16: "background_shell_spawn_result", 20: "fetch_result",
                     28: "subagent_result", 36: "mcp_state_exec_result", 41: "precheck_41",
                     42: "precheck_42", 43: "precheck_43"}
RESULT_VARIANTS = {
    "shell_result": {1: "success", 2: "failure", 3: "timeout", 4: "rejected", 5: "spawn_error",
                     7: "permission_denied"},
    "read_result": {1: "success", 2: "error", 3: "rejected", 4: "file_not_found",
                    5: "permission_denied"},
    "write_result": {1: "success", 3: "permission_denied", 4: "no_space", 5: "error",
                     6: "rejected"},
    "ls_result": {1: "success", 2: "error", 3: "rejected"},
    "delete_result": {1: "success", 2: "file_not_found", 3: "not_file", 4: "permission_denied",
                      5: "file_busy", 6: "rejected", 7: "error"},
    "grep_result": {1: "success", 2: "error"},
    "subagent_result": {1: "success", 2: "error"},
    "mcp_result": {1: "success", 2: "error", 3: "rejected", 4: "permission_denied"},
    "request_context_result": {1: "success", 2: "error", 3: "rejected"},
    "shell_stream": {1: "stdout", 2: "stderr", 3: "exit", 4: "start", 5: "rejected",
                     6: "permission_denied"},
}


# (result, variant) -> {field number: (name, kind)} for the fields the CLI writes
_SHELL_BODY = {1: ("command", "str"), 2: ("cwd", "str"), 3: ("exit_code", "i32"),
               5: ("stdout", "str"), 6: ("stderr", "str")}
RESULT_FIELDS = {
    ("shell_result", "success"): _SHELL_BODY, ("shell_result", "failure"): _SHELL_BODY,
    ("read_result", "success"): {1: ("path", "str"), 2: ("content", "str"),
                                 3: ("total_lines", "i32"), 4: ("file_size", "i64"),
                                 6: ("truncated", "bool")},
    ("read_result", "error"): {1: ("path", "str"), 2: ("error", "str")},
    ("write_result", "success"): {1: ("path", "str"), 2: ("lines_created", "i32"),
                                  3: ("file_size", "i32")},
    ("write_result", "error"): {1: ("path", "str"), 2: ("error", "str")},
    ("delete_result", "success"): {1: ("path", "str"), 2: ("deleted_file", "str"),
                                   3: ("file_size", "i64")},
    ("delete_result", "error"): {1: ("path", "str"), 2: ("error", "str")},
    ("shell_stream", "stdout"): {1: ("stdout", "str")},
    ("shell_stream", "stderr"): {1: ("stderr", "str")},
}


def _strings(buf, depth=0):
    """Best-effort list of printable strings inside a sub-message (for recording only)."""
    out = []
    try:
        fl = parse(buf)
    except PBError:
        return out
    for fn, wt, v in fl:
        if wt != WT_LEN:
            continue
        try:
            s = v.decode("utf-8")
            if s and s.isprintable() or "\n" in s:
                out.append(s)
                continue
        except UnicodeDecodeError:
            pass
        if depth < 4:
            out.extend(_strings(v, depth + 1))
    return out


def _tool_defs(buf_list):
    out = []
    for d in buf_list:
        fl = parse(d)
        schema = last(fl, 3, WT_LEN)
        out.append({
            "name": text(last(fl, 1, WT_LEN, b"")),
            "description": text(last(fl, 2, WT_LEN, b"")),
            "provider_identifier": text(last(fl, 4, WT_LEN, b"")),
            "tool_name": text(last(fl, 5, WT_LEN, b"")),
            "input_schema": value_to_json(schema) if schema is not None else None,
        })
    return out


def dec_client_message(msg):
    """AgentClientMessage -> summary dict with a 'type' key. Raises PBError on malformed bytes."""
    fl = parse(msg)
    members = [(fn, v) for fn, wt, v in fl if wt == WT_LEN and fn in (1, 2, 3, 4, 5, 6, 7)]
    if not members:
        return {"type": "empty" if not fl else "unknown", "fields": [f for f, _, _ in fl]}
    fn, body = members[-1]
    if len(members) > 1:
        extra = {"oneof_members": [m[0] for m in members]}
    else:
        extra = {}
    if fn == 1:
        r = _dec_run_request(body)
    elif fn == 2:
        b = parse(body)
        r = {"type": "exec_result", "id": last(b, 1, WT_VARINT, 0),
             "exec_id": text(last(b, 15, WT_LEN, b"")),
             "local_execution_time_ms": last(b, 39, WT_VARINT)}
        res = [(f, v) for f, w, v in b if w == WT_LEN and f in EXEC_RESULT_NAMES]
        if res:
            f, v = res[-1]
            name = EXEC_RESULT_NAMES[f]
            r["result"] = name
            inner = parse(v)
            r["result_hex"] = v.hex()
            var = [(f2, v2) for f2, w2, v2 in inner if w2 == WT_LEN]
            if name == "mcp_state_exec_result":
                # McpStateExecResult{1 success{1 servers[{1 name, 2 identifier, 5 tools, 7 status}]}}
                r["servers"] = None
                ok = last(inner, 1, WT_LEN)
                if ok is not None:
                    r["servers"] = []
                    for sv in fields_of(parse(ok), 1, WT_LEN):
                        sf = parse(sv)
                        r["servers"].append({
                            "server_name": text(last(sf, 1, WT_LEN, b"")),
                            "server_identifier": text(last(sf, 2, WT_LEN, b"")),
                            "tools": _tool_defs(fields_of(sf, 5, WT_LEN)),
                            "status": text(last(sf, 7, WT_LEN, b""))})
            if var:
                r["variant"] = RESULT_VARIANTS.get(name, {}).get(var[-1][0], str(var[-1][0]))
                r["strings"] = _strings(var[-1][1])
                if name == "mcp_result" and r["variant"] == "success":
                    # McpSuccess{1 repeated content{1 text{1 text} | 2 image{1 data, 2 mime}},
                    # 2 is_error}
                    r["mcp_items"] = []
                    r["mcp_is_error"] = bool(last(parse(var[-1][1]), 2, WT_VARINT, 0))
                    for f2, w2, item in parse(var[-1][1]):
                        if f2 != 1 or w2 != WT_LEN:
                            continue
                        it = parse(item)
                        im = last(it, 2, WT_LEN)
                        if im is not None:
                            imf = parse(im)
                            r["mcp_items"].append({"image_hex": last(imf, 1, WT_LEN, b"").hex(),
                                                   "mime_type": text(last(imf, 2, WT_LEN, b""))})
                        else:
                            tx = last(it, 1, WT_LEN)
                            r["mcp_items"].append({"text": text(last(parse(tx), 1, WT_LEN, b""))
                                                   if tx is not None else None})
                if name == "shell_result" and r["variant"] in ("success", "failure"):
                    # ShellSuccess/ShellFailure{1 command, 2 cwd, 3 exit_code, 5 stdout,
                    # 6 stderr}: what a test checks against the command's real outcome
                    sf = parse(var[-1][1])
                    code = last(sf, 3, WT_VARINT, 0)
                    r["shell"] = {"exit_code": code - (1 << 64) if code >= 1 << 63 else code,
                                  "stdout": text(last(sf, 5, WT_LEN, b"")),
                                  "stderr": text(last(sf, 6, WT_LEN, b""))}
                if name == "read_result" and r["variant"] == "success":
                    # ReadSuccess{1 path, 2 content, 3 total_lines, 4 file_size}
                    rf = parse(var[-1][1])
                    r["read"] = {"content": text(last(rf, 2, WT_LEN, b"")),
                                 "total_lines": last(rf, 3, WT_VARINT, 0),
                                 "file_size": last(rf, 4, WT_VARINT, 0)}
                if name == "shell_stream" and r["variant"] in ("stdout", "stderr"):
                    r["data"] = text(last(parse(var[-1][1]), 1, WT_LEN, b""))
                # the typed fields Cursor's model reads (issue 25: results as the CLI sends them)
                ff = RESULT_FIELDS.get((name, r["variant"]))
                if ff:
                    vf = parse(var[-1][1])
                    r["fields"] = {}
                    for num, (fname, kind) in ff.items():
                        if kind == "str":
                            raw = last(vf, num, WT_LEN)
                            r["fields"][fname] = text(raw) if raw is not None else ""
                        else:
                            v = last(vf, num, WT_VARINT, 0)
                            if kind == "i32" and v >= 1 << 63:
                                v -= 1 << 64
                            r["fields"][fname] = v
                if name == "shell_stream" and r["variant"] == "exit":
                    ef = parse(var[-1][1])
                    r["exit"] = {"code": last(ef, 1, WT_VARINT, 0),
                                 "cwd": text(last(ef, 2, WT_LEN, b"")),
                                 "aborted": last(ef, 4, WT_VARINT, 0),
                                 "local_execution_time_ms": last(ef, 6, WT_VARINT)}
        else:
            r["result"] = None
    elif fn == 3:
        b = parse(body)
        r = {"type": "kv_result", "id": last(b, 1, WT_VARINT, 0)}
        sr = last(b, 3, WT_LEN)
        gr = last(b, 2, WT_LEN)
        md = last(b, 4, WT_LEN)
        r["metadata_hex"] = md.hex() if md is not None else None
        if sr is not None:
            e = last(parse(sr), 1, WT_LEN)
            r["kind"] = "set_blob_result"
            r["error"] = text(last(parse(e), 1, WT_LEN, b"")) if e is not None else None
        elif gr is not None:
            d = last(parse(gr), 1, WT_LEN)
            r["kind"] = "get_blob_result"
            r["blob_data_hex"] = d.hex() if d is not None else None
        else:
            r["kind"] = None
    elif fn == 4:
        b = parse(body)
        names = {1: "user_message", 2: "resume", 3: "cancel", 4: "summarize",
                 5: "shell_command", 6: "start_plan", 7: "execute_plan"}
        k = [f for f, w, v in b if w == WT_LEN]
        r = {"type": "action", "kind": names.get(k[-1], str(k[-1])) if k else None}
    elif fn == 5:
        b = parse(body)
        sc = last(b, 1, WT_LEN)
        th = last(b, 2, WT_LEN)
        if sc is not None:
            r = {"type": "exec_control", "kind": "stream_close",
                 "id": last(parse(sc), 1, WT_VARINT, 0)}
        elif th is not None:
            tf = parse(th)
            r = {"type": "exec_control", "kind": "throw", "id": last(tf, 1, WT_VARINT, 0),
                 "error": text(last(tf, 2, WT_LEN, b""))}
        elif last(b, 3, WT_LEN) is not None:
            r = {"type": "exec_control", "kind": "heartbeat",
                 "id": last(parse(last(b, 3, WT_LEN)), 1, WT_VARINT, 0)}
        else:
            r = {"type": "exec_control", "kind": None}
    elif fn == 7:
        r = {"type": "client_heartbeat"}
    else:
        b = parse(body)
        kinds = [k for k, f in INTERACTION_QUERY_FIELD.items() if last(b, f, WT_LEN) is not None]
        r = {"type": "interaction_response", "id": last(b, 1, WT_VARINT, 0),
             "kind": kinds[0] if len(kinds) == 1 else None}
        if r["kind"] is not None:
            body = last(b, INTERACTION_QUERY_FIELD[r["kind"]], WT_LEN)
            r["body_hex"] = body.hex()
            # the typed outcome ("approved", "rejected", ...; None: empty) and its reason
            oc = [(f2, v2) for f2, w2, v2 in parse(body) if w2 == WT_LEN]
            names = QUERY_OUTCOMES.get(r["kind"], {})
            r["outcome"] = names.get(oc[-1][0], str(oc[-1][0])) if oc else None
            r["reason"] = text(last(parse(oc[-1][1]), 1, WT_LEN, b"")) if oc else None
    r.update(extra)
    return r


def dec_selected_images(buf):
    """SelectedContext -> [SelectedImage summaries]; field numbers as in cursor-agent's schema
    (1 blob_id | 8 data | 9 blob_id_with_data, 2 uuid, 3 path, 4 dimension, 7 mime_type)."""
    out = []
    for fn, wt, v in parse(buf):
        if fn != 1 or wt != WT_LEN:
            out.append({"unexpected_field": fn})
            continue
        f = parse(v)
        dim = last(f, 4, WT_LEN)
        w = h = None
        if dim is not None:
            df = parse(dim)
            w, h = last(df, 1, WT_VARINT), last(df, 2, WT_VARINT)
        data = last(f, 8, WT_LEN)
        out.append({"uuid": text(last(f, 2, WT_LEN, b"")), "path": text(last(f, 3, WT_LEN, b"")),
                    "mime_type": text(last(f, 7, WT_LEN, b"")), "width": w, "height": h,
                    "_data": data, "data_len": len(data) if data is not None else None,
                    "data_sha256": hashlib.sha256(data).hexdigest() if data is not None else None,
                    "has_blob_id": last(f, 1, WT_LEN) is not None,
                    "has_blob_id_with_data": last(f, 9, WT_LEN) is not None,
                    "fields": sorted(set(x for x, _, _ in f))})
    return out


def _dec_run_request(body):
    rr = parse(body)
    r = {"type": "run_request",
         "has_conversation_state": last(rr, 1, WT_LEN) is not None,
         "model_id": None, "conversation_id": text(last(rr, 5, WT_LEN)),
         "action": None, "prompt": None, "message_id": None, "mode": None,
         "has_request_context": False, "env": None, "tools": [], "mcp_tools": [],
         "mcp_instructions": [], "has_mcp_file_system_options": last(rr, 6, WT_LEN) is not None}
    cs = last(rr, 1, WT_LEN)
    r["conversation_state_hex"] = cs.hex() if cs is not None else None
    r["client_supports_inline_images"] = last(rr, 19, WT_VARINT)
    r["pre_fetched_blobs"] = []
    for pf in fields_of(rr, 17, WT_LEN):
        pff = parse(pf)
        r["pre_fetched_blobs"].append({"id_hex": (last(pff, 1, WT_LEN, b"")).hex(),
                                       "value_len": len(last(pff, 2, WT_LEN, b""))})
    md = last(rr, 3, WT_LEN)
    if md is not None:
        r["model_id"] = text(last(parse(md), 1, WT_LEN, b""))
    act = last(rr, 2, WT_LEN)
    if act is not None:
        af = parse(act)
        uma = last(af, 1, WT_LEN)
        if last(af, 2, WT_LEN) is not None:
            r["action"] = "resume"
        if uma is not None:
            r["action"] = "user_message"
            uf = parse(uma)
            um = last(uf, 1, WT_LEN)
            if um is not None:
                mf = parse(um)
                r["prompt"] = text(last(mf, 1, WT_LEN, b""))
                r["message_id"] = text(last(mf, 2, WT_LEN, b""))
                r["mode"] = last(mf, 4, WT_VARINT, 0)
                sc = last(mf, 3, WT_LEN)
                r["has_selected_context"] = sc is not None
                r["images"] = dec_selected_images(sc) if sc is not None else []
            ctx = last(uf, 2, WT_LEN)
            if ctx is not None:
                r["has_request_context"] = True
                cf = parse(ctx)
                env = last(cf, 4, WT_LEN)
                if env is not None:
                    ef = parse(env)
                    r["env"] = {
                        "os_version": text(last(ef, 1, WT_LEN, b"")),
                        "workspace_paths": [text(x) for x in fields_of(ef, 2, WT_LEN)],
                        "shell": text(last(ef, 3, WT_LEN, b"")),
                        "time_zone": text(last(ef, 10, WT_LEN, b"")),
                        "project_folder": text(last(ef, 11, WT_LEN, b"")),
                    }
                r["tools"] = _tool_defs(fields_of(cf, 7, WT_LEN))
                for mi in fields_of(cf, 14, WT_LEN):
                    mf = parse(mi)
                    r["mcp_instructions"].append({
                        "server_name": text(last(mf, 1, WT_LEN, b"")),
                        "instructions": text(last(mf, 2, WT_LEN, b""))})
    mt = last(rr, 4, WT_LEN)
    if mt is not None:
        r["mcp_tools"] = _tool_defs(fields_of(parse(mt), 1, WT_LEN))
    return r


# ---------------------------------------------------------------------------------------------
# x-cursor-checksum (spec section 3)

def _b64url(b):
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def checksum_bucket_ms(now_s):
    """Half-hour bucket start in the process's local time zone (localtime -> minutes/30*30 ->
    mktime), in epoch milliseconds."""
    lt = time.localtime(int(now_s // 1))
    t = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, lt.tm_hour, lt.tm_min // 30 * 30, 0,
                     lt.tm_wday, lt.tm_yday, lt.tm_isdst))
    return int(t) * 1000


def checksum_for_bucket(token, bucket_ms):
    ts = bucket_ms // 1000000
    b = bytearray(ts.to_bytes(6, "big"))
    k = 0xA5
    for i in range(6):
        b[i] = ((b[i] ^ k) + i) & 0xFF
        k = b[i]
    parts = token.split(".")
    if len(parts) > 1 and parts[1]:
        h1 = hashlib.sha256(parts[1].encode()).hexdigest()[:8]
    else:
        h1 = "00000000"
    h2 = hashlib.sha256(token.encode()).hexdigest()[:8]
    return _b64url(bytes(b)) + h1 + "/" + h2


def checksum(token, now_s=None):
    if now_s is None:
        now_s = time.time()
    return checksum_for_bucket(token, checksum_bucket_ms(now_s))


def checksum_accepted(token, now_s=None):
    """Values accepted by the fake: current and previous half-hour bucket."""
    if now_s is None:
        now_s = time.time()
    return {checksum(token, now_s), checksum(token, now_s - 1800)}


# ---------------------------------------------------------------------------------------------
# JWT helpers

def jwt_payload(token):
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    seg = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        return json.loads(base64.urlsafe_b64decode(seg))
    except (ValueError, UnicodeDecodeError):
        return None


def make_jwt(payload):
    """Unsigned-looking fake JWT (the signature is not checked by anybody)."""
    def seg(o):
        return _b64url(json.dumps(o, separators=(",", ":")).encode())
    return seg({"alg": "HS256", "typ": "JWT"}) + "." + seg(payload) + "." + _b64url(
        b"fake-signature")


# ---- unknown content (issue 30 item 3: a product that notices when Cursor changes) ----

def f_unknown(fn, wt):
    """A field of any wire type with a harmless value: varint 7, fixed64/fixed32 zeros,
    length-delimited {1: 1} (parses as a message)."""
    if wt == WT_VARINT:
        return f_varint(fn, 7)
    if wt == WT_I64:
        return tag(fn, WT_I64) + bytes(8)
    if wt == WT_I32:
        return tag(fn, WT_I32) + bytes(4)
    return f_bytes(fn, f_varint(1, 1))


def encode(fields):
    """parse()'s list back to bytes (field order kept)."""
    out = b""
    for fn, wt, v in fields:
        if wt == WT_VARINT:
            out += f_varint(fn, v)
        elif wt == WT_LEN:
            out += f_bytes(fn, v)
        elif wt == WT_I64:
            out += tag(fn, WT_I64) + struct.pack("<Q", v)
        else:
            out += tag(fn, WT_I32) + struct.pack("<I", v)
    return out


def add_unknown(msg, at, fn, wt):
    """msg with one more field (fn, wt) in the sub-message reached through the field
    numbers `at` (each the last length-delimited occurrence; [] = msg itself), every
    enclosing length rewritten. A decoder that skips unknown fields reads the same."""
    if not at:
        return bytes(msg) + f_unknown(fn, wt)
    fields = parse(msg)
    for i in range(len(fields) - 1, -1, -1):
        f, w, v = fields[i]
        if f == at[0] and w == WT_LEN:
            fields[i] = (f, w, add_unknown(v, at[1:], fn, wt))
            return encode(fields)
    raise PBError("no field %d to add an unknown field into" % at[0])


def m_variant(at, fn, body=b"", id_field=None):
    """An AgentServerMessage whose innermost message (reached through the field numbers
    `at`) holds only the oneof member fn this schema does not know (body as its bytes), and
    the id field 1 = id_field when given (ExecServerMessage, InteractionQuery)."""
    inner = (f_varint(1, id_field) if id_field is not None else b"") + f_bytes(fn, body)
    for f in reversed(at):
        inner = f_bytes(f, inner)
    return inner
