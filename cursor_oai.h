/* cursor_oai.h - OpenAI chat API <-> Cursor Agent backend, in one header.
 *
 * Unofficial. Speaks Cursor's Agent protocol (Connect/gRPC-web framed protobuf:
 * RunSSE + BidiAppend) on one side and the OpenAI /v1/chat/completions shape on
 * the other. No sockets in here: bytes in, bytes out.
 *
 * [MANUAL: written last; see the part sections below for each API's contract.]
 *
 * ENABLING THE IMPLEMENTATION
 *   In exactly one .c file:
 *       #define CURSOR_OAI_IMPLEMENTATION
 *       #include "cursor_oai.h"
 *   Dependencies of the implementation: cJSON (cJSON.h), nanopb (pb.h, pb_encode.h,
 *   pb_decode.h, compiled with PB_ENABLE_MALLOC and PB_FIELD_32BIT), the generated
 *   proto/ *.pb.h files (put proto/ on the include path), and BearSSL (bearssl.h, for SHA-256).
 *
 * CONVENTIONS
 *   - coai_result: 0 is success, COAI_MORE (1) means "feed me more", COAI_DONE (2)
 *     means "finished"; errors are negative. coai_result_str() names each one.
 *   - Lengths are size_t. Strings are coai_str {ptr,len} views, never NUL-reliant.
 *   - Output goes into a coai_buf (a growable heap buffer with an optional cap).
 *   - Every byte from the network is untrusted: it never triggers an assert, an
 *     over-read, or an unbounded allocation; it yields a negative coai_result.
 */
#ifndef CURSOR_OAI_H
#define CURSOR_OAI_H

#include <stddef.h>
#include <stdint.h>

#define COAI_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Common                                                                   */
/* ======================================================================== */

typedef enum coai_result {
    COAI_OK = 0,
    COAI_MORE = 1,             /* need more input */
    COAI_DONE = 2,             /* finished; nothing more will come */
    COAI_ERR_NOMEM = -1,       /* allocation failed or a cap was hit */
    COAI_ERR_TOO_BIG = -2,     /* a length exceeds its limit */
    COAI_ERR_FRAME = -3,       /* bad envelope flags or framing */
    COAI_ERR_COMPRESSED = -4,  /* compressed envelope (flag 0x01): not supported */
    COAI_ERR_PROTO = -5,       /* malformed protobuf */
    COAI_ERR_JSON = -6,        /* malformed JSON */
    COAI_ERR_INVALID = -7,     /* well-formed but invalid input (see coai_error) */
    COAI_ERR_UTF8 = -8,        /* invalid UTF-8 where it is not allowed */
    COAI_ERR_HTTP = -9,        /* malformed HTTP */
    COAI_ERR_TRUNCATED = -10,  /* input ended inside a unit */
    COAI_ERR_STATE = -11,      /* API used in the wrong state (programmer error) */
    COAI_ERR_UPSTREAM = -12    /* the upstream reported an error (see coai_status) */
} coai_result;

const char *coai_result_str(int r);

typedef struct coai_str {
    const char *ptr;
    size_t len;
} coai_str;

#define COAI_STR_LIT(s) { (s), sizeof(s) - 1 }
coai_str coai_str_c(const char *s);       /* view of a NUL-terminated string (NULL -> empty) */
int coai_str_eq(coai_str a, const char *lit);

/* Growable byte buffer. Zero-init is an empty buffer; max = 0 means no cap.
 * On failure the buffer remembers it (err = 1) and later appends are no-ops. */
typedef struct coai_buf {
    unsigned char *data;   /* heap, owned; NUL-terminated after every append when cap allows */
    size_t len;            /* bytes used */
    size_t cap;            /* bytes allocated */
    size_t max;            /* 0 = unlimited, else appends that would exceed it fail */
    int err;               /* sticky: an append failed */
} coai_buf;

int coai_buf_reserve(coai_buf *b, size_t extra);              /* 0 ok, -1 fail */
int coai_buf_append(coai_buf *b, const void *p, size_t n);    /* 0 ok, -1 fail */
int coai_buf_puts(coai_buf *b, const char *s);
int coai_buf_putc(coai_buf *b, int c);
int coai_buf_printf(coai_buf *b, const char *fmt, ...);
void coai_buf_reset(coai_buf *b);                              /* len = 0, err = 0, keep memory */
void coai_buf_free(coai_buf *b);

/* Small encoders shared by every part. Each appends to `out`; 0 ok, -1 fail. */
int coai_hex_append(coai_buf *out, const void *p, size_t n);          /* lowercase */
int coai_base64_append(coai_buf *out, const void *p, size_t n, int url); /* url=1: base64url, no '=' */
/* Decode standard or url-safe base64, padding optional, whitespace rejected.
 * Returns the decoded length, or -1 on bad input or when out_cap is too small. */
long coai_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_cap);
/* Format 16 random bytes as a lowercase RFC 4122 v4 UUID (sets version/variant bits). */
void coai_uuid_format(char out[37], const unsigned char rnd[16]);

/* JSON writing, byte-compatible with JavaScript's JSON.stringify:
 * coai_json_str_append writes a quoted string; escapes '"', '\\', \b \f \n \r \t and
 * other control bytes as \u00xx (lowercase); non-ASCII stays raw UTF-8; '/' is not
 * escaped. Invalid UTF-8 (bad, overlong, surrogate or truncated sequences) becomes
 * U+FFFD, so the output is always valid UTF-8 and valid JSON.
 * coai_json_num_append writes the shortest text that reads back as the same double
 * (integers without ".0", 1e+21 style exponents as JavaScript does); NaN/Inf -> null. */
int coai_json_str_append(coai_buf *out, const char *s, size_t n);
int coai_json_num_append(coai_buf *out, double v);
/* Length of the longest prefix of s that is valid UTF-8 and does not end inside a
 * character. Used to hold back a split character until the next fragment. */
size_t coai_utf8_valid_prefix(const char *s, size_t n);

/* ======================================================================== */
/* PART:FRAMING api (envelopes, trailers, Connect end-stream)               */
/* ======================================================================== */

#ifndef COAI_MAX_FRAME
#define COAI_MAX_FRAME (16u * 1024u * 1024u)   /* largest envelope payload accepted */
#endif

enum {
    COAI_FRAME_DATA = 0x00,        /* protobuf message */
    COAI_FRAME_COMPRESSED = 0x01,  /* flag bit: compressed payload */
    COAI_FRAME_END_STREAM = 0x02,  /* Connect end-stream: JSON payload */
    COAI_FRAME_TRAILER = 0x80      /* gRPC-web trailer: header-block text */
};

/* Outcome of a trailer frame, a Connect end-stream frame or a google.rpc.Status.
 * Fixed-size fields: no allocation; text longer than a field is cut at a UTF-8
 * boundary. All text is valid UTF-8 without control characters. */
typedef struct coai_status {
    int code;                  /* gRPC status (0 OK, 8 RESOURCE_EXHAUSTED, 16 UNAUTHENTICATED..) */
    int error;                 /* aiserver.v1.ErrorDetails.Error value, 0 when none */
    const char *error_name;    /* static name such as "ERROR_OUTDATED_CLIENT", or NULL */
    int retryable;             /* CustomErrorDetails.is_retryable: -1 unknown, 0, 1 */
    char message[512];         /* grpc-message, percent-decoded (or Status.message) */
    char title[256];           /* CustomErrorDetails.title */
    char detail[1024];         /* CustomErrorDetails.detail (+ "key: value" additional info) */
} coai_status;
/* PART:FRAMING api end */

/* ======================================================================== */
/* PART:CHECKSUM api (x-cursor-checksum, base64, hex, uuid, sha256 helpers) */
/* ======================================================================== */
/* PART:CHECKSUM api end */

/* ======================================================================== */
/* PART:ENCODE api (client messages: run request, BidiAppend, KV, exec)     */
/* ======================================================================== */

struct cJSON;

/* One OpenAI function tool, as it goes into a McpToolDefinition. */
typedef struct coai_tool {
    coai_str name;                      /* function.name (validated by the OPENAI part) */
    coai_str description;               /* empty = omitted */
    const struct cJSON *parameters;     /* JSON schema; NULL = {"type":"object","properties":{}} */
} coai_tool;

/* Everything that varies in a run request. Empty strings get the documented defaults. */
typedef struct coai_run_params {
    coai_str prompt;            /* UserMessage.text (flattened conversation) */
    coai_str model_id;          /* resolved model id -> ModelDetails.model_id */
    coai_str message_id;        /* UUID string for UserMessage.message_id */
    coai_str conversation_id;   /* UUID string for AgentRunRequest.conversation_id */
    coai_str workspace;         /* workspace path (workspace_paths, project_folder, MCP dirs) */
    coai_str time_zone;         /* IANA zone name, e.g. "UTC" */
    coai_str os_version;        /* default "darwin 24.0.0" (what the original sends) */
    coai_str shell;             /* default "/bin/zsh" (what the original sends) */
    const coai_tool *tools;     /* may be NULL when tool_count == 0 */
    size_t tool_count;
} coai_run_params;
/* PART:ENCODE api end */

/* ======================================================================== */
/* PART:DECODE api (AgentServerMessage -> plain C events)                   */
/* ======================================================================== */

/* Which ExecServerMessage args member arrived (values = protobuf field numbers). */
typedef enum coai_exec_kind {
    COAI_EXEC_NONE = 0,
    COAI_EXEC_SHELL = 2,
    COAI_EXEC_WRITE = 3,
    COAI_EXEC_DELETE = 4,
    COAI_EXEC_GREP = 5,
    COAI_EXEC_READ = 7,
    COAI_EXEC_LS = 8,
    COAI_EXEC_DIAGNOSTICS = 9,
    COAI_EXEC_REQUEST_CONTEXT = 10,
    COAI_EXEC_MCP = 11,
    COAI_EXEC_SHELL_STREAM = 14,
    COAI_EXEC_BACKGROUND_SHELL = 16,
    COAI_EXEC_LIST_MCP_RESOURCES = 17,
    COAI_EXEC_READ_MCP_RESOURCE = 18,
    COAI_EXEC_FETCH = 20,
    COAI_EXEC_RECORD_SCREEN = 21,
    COAI_EXEC_COMPUTER_USE = 22
} coai_exec_kind;

/* An exec request. Views point into storage owned by the coai_msg that holds it. */
typedef struct coai_exec {
    coai_exec_kind kind;
    uint32_t id;                /* echoed in results and stream_close */
    coai_str exec_id;           /* echoed when non-empty */
    coai_str command;           /* shell: command */
    coai_str cwd;               /* shell: working_directory */
    coai_str path;              /* read/write/ls/delete/grep: path */
    int has_path;               /* grep path / ls path present */
    coai_str content;           /* write: file_text */
    coai_str pattern;           /* grep: pattern */
    coai_str glob;              /* grep: glob (non-empty -> the "glob" tool) */
    coai_str url;               /* fetch: url */
    coai_str mcp_name;          /* mcp: name ("cursor-tools-<tool>") */
    coai_str tool_name;         /* mcp: tool_name */
    coai_str provider;          /* mcp: provider_identifier */
    coai_str tool_call_id;      /* shell/read/write/ls/grep/mcp tool_call_id when sent */
    coai_str args_json;         /* mcp: args as compact JSON, members in wire order */
} coai_exec;

typedef enum coai_msg_kind {
    COAI_MSG_NONE = 0,          /* nothing we act on (unknown or empty message) */
    COAI_MSG_TEXT,              /* text: assistant text delta */
    COAI_MSG_THINKING,          /* text: reasoning delta */
    COAI_MSG_THINKING_DONE,     /* value: thinking_duration_ms */
    COAI_MSG_TOKENS,            /* value: token_delta count */
    COAI_MSG_TOOL_STARTED,      /* tool, call_id */
    COAI_MSG_TOOL_COMPLETED,    /* tool, call_id */
    COAI_MSG_TOOL_PARTIAL,      /* tool, call_id, text = args_text_delta */
    COAI_MSG_HEARTBEAT,
    COAI_MSG_TURN_ENDED,
    COAI_MSG_STEP,              /* step_started / summaries / other informational updates */
    COAI_MSG_CHECKPOINT,        /* value = used_tokens, value2 = max_tokens (0 if absent) */
    COAI_MSG_EXEC,              /* exec */
    COAI_MSG_EXEC_ABORT,        /* id */
    COAI_MSG_KV_GET,            /* id, blob_id */
    COAI_MSG_KV_SET,            /* id, blob_id, blob_data */
    COAI_MSG_QUERY              /* id, query (InteractionQuery oneof field number) */
} coai_msg_kind;

/* One decoded AgentServerMessage. Zero-init before first use; views stay valid
 * until the next coai_msg_decode() on the same object or coai_msg_free(). */
typedef struct coai_msg {
    coai_msg_kind kind;
    coai_str text;              /* TEXT, THINKING, TOOL_PARTIAL */
    int64_t value;              /* TOKENS, THINKING_DONE, CHECKPOINT used_tokens */
    int64_t value2;             /* CHECKPOINT max_tokens */
    int tool;                   /* TOOL_*: ToolCall oneof field number (1 shell, 12 edit, ...) */
    coai_str call_id;           /* TOOL_* */
    uint32_t id;                /* KV id, EXEC_ABORT id, QUERY id */
    int query;                  /* QUERY: 2 web_search, 3 ask_question, 4 switch_mode, ... */
    coai_str blob_id;           /* KV_GET, KV_SET (raw bytes) */
    coai_str blob_data;         /* KV_SET (raw bytes) */
    coai_exec exec;             /* EXEC */
    void *priv_;                /* private decode storage */
    coai_buf scratch_;          /* private */
} coai_msg;
#ifndef COAI_MAX_VALUE_DEPTH
#define COAI_MAX_VALUE_DEPTH 64   /* JSON containers in McpArgs.args, the args object included */
#endif
#ifndef COAI_MAX_PB_FIELDS
#define COAI_MAX_PB_FIELDS 65536  /* fields in one decoded leaf message / members of one object */
#endif

/* Decode one AgentServerMessage (the payload of a 0x00 data envelope) into *m.
 * m must be zero-initialised before first use; it can be reused for every frame.
 * All views in *m point into storage owned by m (never into p) and stay valid until
 * the next coai_msg_decode() on m or coai_msg_free(m). Empty views are "" (never NULL).
 * Returns COAI_OK (m->kind says what arrived; COAI_MSG_NONE for an empty payload or
 * anything we do not act on), COAI_ERR_PROTO for malformed protobuf (never reads
 * outside [p, p+n)), COAI_ERR_TOO_BIG over COAI_MAX_PB_FIELDS, COAI_ERR_NOMEM.
 * After an error m->kind is COAI_MSG_NONE.
 *
 * Per kind:
 *   TEXT / THINKING      text (strlen of nanopb's copy: cut at an embedded NUL byte)
 *   THINKING_DONE        value = thinking_duration_ms
 *   TOKENS               value = token_delta.tokens
 *   TOOL_STARTED/_COMPLETED/_PARTIAL  call_id, tool (0 if absent), PARTIAL: text = args_text_delta
 *   STEP                 value = InteractionUpdate field number: 6 user_message_appended,
 *                        9 summary, 10 summary_started, 11 summary_completed,
 *                        12 shell_output_delta, 15 tool_call_delta, 16 step_started
 *                        (then value2 = step_id). Informational only.
 *   CHECKPOINT           value = used_tokens, value2 = max_tokens (0 when absent)
 *   EXEC                 exec.kind/id/exec_id plus the kind's fields (see coai_exec);
 *                        has_path: grep path / ls path present on the wire (even if "").
 *                        mcp: args_json = JSON.stringify of the args map as the original
 *                        builds it (JS object semantics: array-index keys first in numeric
 *                        order, a repeated key keeps its first place and its last value,
 *                        "" and "__proto__" keys dropped, empty Value -> member dropped /
 *                        null in a list, a leading UTF-8 BOM of a string is dropped like
 *                        TextDecoder does). Kinds without fields (request_context,
 *                        diagnostics, ...) only set kind/id/exec_id.
 *   EXEC_ABORT           id
 *   KV_GET / KV_SET      id, blob_id, KV_SET: blob_data (raw bytes, exact length)
 *   QUERY                id, query = InteractionQuery oneof field number (0 if none)
 * When a oneof member is repeated (never seen in practice) the last one wins. String
 * fields other than exec_id, blob_id, blob_data and args_json come from nanopb's
 * NUL-terminated copies, so they end at an embedded NUL byte. */
coai_result coai_msg_decode(coai_msg *m, const void *p, size_t n);
/* Free everything m owns; m is zero again afterwards (reusable). */
void coai_msg_free(coai_msg *m);
/* PART:DECODE api end */

/* ======================================================================== */
/* PART:HTTP api (request parser, chunked decoder, response parser, Host)   */
/* ======================================================================== */
/* PART:HTTP api end */

/* ======================================================================== */
/* PART:OPENAI api (request parse/validate, prompt, tool mapping, SSE)      */
/* ======================================================================== */
/* PART:OPENAI api end */

#ifdef __cplusplus
}
#endif
#endif /* CURSOR_OAI_H */

/* ************************************************************************ */
/*                              IMPLEMENTATION                              */
/* ************************************************************************ */
#if defined(CURSOR_OAI_IMPLEMENTATION) && !defined(COAI_IMPLEMENTATION_DONE)
#define COAI_IMPLEMENTATION_DONE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *coai_result_str(int r)
{
    switch (r) {
    case COAI_OK: return "ok";
    case COAI_MORE: return "more input needed";
    case COAI_DONE: return "done";
    case COAI_ERR_NOMEM: return "out of memory or over a size cap";
    case COAI_ERR_TOO_BIG: return "length over the limit";
    case COAI_ERR_FRAME: return "bad envelope framing";
    case COAI_ERR_COMPRESSED: return "compressed envelope not supported";
    case COAI_ERR_PROTO: return "malformed protobuf";
    case COAI_ERR_JSON: return "malformed JSON";
    case COAI_ERR_INVALID: return "invalid input";
    case COAI_ERR_UTF8: return "invalid UTF-8";
    case COAI_ERR_HTTP: return "malformed HTTP";
    case COAI_ERR_TRUNCATED: return "input ended early";
    case COAI_ERR_STATE: return "API misuse";
    case COAI_ERR_UPSTREAM: return "upstream error";
    }
    return "unknown result";
}

coai_str coai_str_c(const char *s)
{
    coai_str r;
    r.ptr = s ? s : "";
    r.len = s ? strlen(s) : 0;
    return r;
}

int coai_str_eq(coai_str a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && (n == 0 || memcmp(a.ptr, lit, n) == 0);
}

int coai_buf_reserve(coai_buf *b, size_t extra)
{
    size_t need, ncap;
    unsigned char *p;
    if (b->err) return -1;
    if (extra > (size_t)-1 - b->len - 1) { b->err = 1; return -1; }
    need = b->len + extra + 1;                      /* +1 keeps room for a NUL */
    if (b->max && need - 1 > b->max) { b->err = 1; return -1; }
    if (need <= b->cap) return 0;
    ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap = ncap > ((size_t)-1) / 2 ? need : ncap * 2;
    p = (unsigned char *)realloc(b->data, ncap);
    if (!p) { b->err = 1; return -1; }
    b->data = p;
    b->cap = ncap;
    return 0;
}

int coai_buf_append(coai_buf *b, const void *p, size_t n)
{
    if (coai_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int coai_buf_puts(coai_buf *b, const char *s) { return coai_buf_append(b, s, strlen(s)); }

int coai_buf_putc(coai_buf *b, int c)
{
    unsigned char ch = (unsigned char)c;
    return coai_buf_append(b, &ch, 1);
}

int coai_buf_printf(coai_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    char small[256];
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->err = 1; return -1; }
    if ((size_t)n < sizeof small) return coai_buf_append(b, small, (size_t)n);
    if (coai_buf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void coai_buf_reset(coai_buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->data) b->data[0] = 0;
}

void coai_buf_free(coai_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}

int coai_hex_append(coai_buf *out, const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)p;
    size_t i;
    if (n > ((size_t)-1) / 2 - 1 || coai_buf_reserve(out, n * 2)) return -1;
    for (i = 0; i < n; i++) {
        out->data[out->len++] = (unsigned char)digits[s[i] >> 4];
        out->data[out->len++] = (unsigned char)digits[s[i] & 15];
    }
    out->data[out->len] = 0;
    return 0;
}

int coai_base64_append(coai_buf *out, const void *p, size_t n, int url)
{
    const char *al = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                         : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)p;
    size_t i;
    if (n > ((size_t)-1) / 2 || coai_buf_reserve(out, (n + 2) / 3 * 4)) return -1;
    for (i = 0; i + 2 < n; i += 3) {
        unsigned long v = (unsigned long)s[i] << 16 | (unsigned long)s[i + 1] << 8 | s[i + 2];
        out->data[out->len++] = (unsigned char)al[v >> 18 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 12 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 6 & 63];
        out->data[out->len++] = (unsigned char)al[v & 63];
    }
    if (i < n) {
        unsigned long v = (unsigned long)s[i] << 16 | (i + 1 < n ? (unsigned long)s[i + 1] << 8 : 0);
        out->data[out->len++] = (unsigned char)al[v >> 18 & 63];
        out->data[out->len++] = (unsigned char)al[v >> 12 & 63];
        if (i + 1 < n) out->data[out->len++] = (unsigned char)al[v >> 6 & 63];
        else if (!url) out->data[out->len++] = '=';
        if (!url) out->data[out->len++] = '=';
    }
    out->data[out->len] = 0;
    return 0;
}

static int coai__b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

long coai_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_cap)
{
    unsigned long acc = 0;
    size_t o = 0, i, bits = 0;
    while (n > 0 && in[n - 1] == '=') n--;
    if (n % 4 == 1) return -1;
    for (i = 0; i < n; i++) {
        int v = coai__b64val((unsigned char)in[i]);
        if (v < 0) return -1;
        acc = (acc << 6 | (unsigned long)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= out_cap) return -1;
            out[o++] = (unsigned char)(acc >> bits & 0xff);
        }
    }
    return (long)o;
}

void coai_uuid_format(char out[37], const unsigned char rnd[16])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char b[16];
    int i, o = 0;
    memcpy(b, rnd, 16);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    for (i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = digits[b[i] >> 4];
        out[o++] = digits[b[i] & 15];
    }
    out[o] = 0;
}

/* Length of the UTF-8 sequence at s (1..4) if valid and complete, 0 if invalid,
 * -1 if valid so far but cut off by the end of input. */
static int coai__utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need, i;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c < 0xc2) return 0;
    if (c < 0xe0) need = 1;
    else if (c < 0xf0) { need = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c < 0xf5) { need = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return 0;
    for (i = 1; i <= need; i++) {
        if (i >= n) return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) return 0;
    }
    return (int)need + 1;
}

size_t coai_utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = coai__utf8_seq(p + i, n - i);
        if (k <= 0) break;
        i += (size_t)k;
    }
    return i;
}

int coai_json_str_append(coai_buf *out, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run;
    if (coai_buf_putc(out, '"')) return -1;
    while (i < n) {
        unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            run = i;
            while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
                run++;
            if (coai_buf_append(out, p + i, run - i)) return -1;
            i = run;
        } else if (c < 0x80) {
            char esc[7] = { '\\', 0, 0, 0, 0, 0, 0 };
            size_t len = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
                esc[4] = digits[c >> 4]; esc[5] = digits[c & 15];
                len = 6;
            }
            if (coai_buf_append(out, esc, len)) return -1;
            i++;
        } else {
            int k = coai__utf8_seq(p + i, n - i);
            if (k > 0) {
                if (coai_buf_append(out, p + i, (size_t)k)) return -1;
                i += (size_t)k;
            } else {
                /* One U+FFFD per maximal invalid subpart: skip the lead byte and any
                 * continuation bytes that cannot start a character. */
                if (coai_buf_append(out, "\xef\xbf\xbd", 3)) return -1;
                i++;
                while (i < n && p[i] >= 0x80 && p[i] < 0xc0 && k == 0) i++;
                if (k < 0) i = n;
            }
        }
    }
    return coai_buf_putc(out, '"');
}

int coai_json_num_append(coai_buf *out, double v)
{
    char tmp[40], res[48];
    int prec, exp10 = 0;
    char *e, *d;
    size_t nd = 0, i;
    char mant[24];
    int neg;
    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
        return coai_buf_puts(out, "null");
    if (v == 0) return coai_buf_puts(out, "0");   /* JS prints -0 as 0 too */
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* tmp = [-]D[.DDD]e[+-]XX: collect digits and the decimal exponent. */
    neg = tmp[0] == '-';
    e = strchr(tmp, 'e');
    if (!e) return coai_buf_puts(out, "null");
    exp10 = atoi(e + 1);
    for (d = tmp + neg; d < e; d++)
        if (*d >= '0' && *d <= '9' && nd < sizeof mant - 1) mant[nd++] = *d;
    while (nd > 1 && mant[nd - 1] == '0') nd--;
    mant[nd] = 0;
    i = 0;
    if (neg) res[i++] = '-';
    if (exp10 >= 21 || exp10 <= -7) {
        /* d[.ddd]e+X like JavaScript's Number.prototype.toString */
        res[i++] = mant[0];
        if (nd > 1) { res[i++] = '.'; memcpy(res + i, mant + 1, nd - 1); i += nd - 1; }
        i += (size_t)snprintf(res + i, sizeof res - i, "e%c%d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 >= 0) {
        size_t intd = (size_t)exp10 + 1, k;
        for (k = 0; k < intd; k++) res[i++] = k < nd ? mant[k] : '0';
        if (nd > intd) { res[i++] = '.'; memcpy(res + i, mant + intd, nd - intd); i += nd - intd; }
    } else {
        int z;
        res[i++] = '0'; res[i++] = '.';
        for (z = 0; z < -exp10 - 1; z++) res[i++] = '0';
        memcpy(res + i, mant, nd); i += nd;
    }
    return coai_buf_append(out, res, i);
}

/* ======================================================================== */
/* PART:FRAMING impl                                                        */
/* ======================================================================== */
/* PART:FRAMING impl end */

/* ======================================================================== */
/* PART:CHECKSUM impl                                                       */
/* ======================================================================== */
/* PART:CHECKSUM impl end */

/* ======================================================================== */
/* PART:ENCODE impl                                                         */
/* ======================================================================== */
/* PART:ENCODE impl end */

/* ======================================================================== */
/* PART:DECODE impl                                                         */
/* ======================================================================== */
#include "pb_decode.h"
#include "agent.pb.h"

/* One object member of McpArgs.args (or of a nested Struct), as read from the wire. */
typedef struct coai__ent {
    const pb_byte_t *key, *val;   /* raw key bytes; Value bytes (val NULL: no value) */
    size_t klen, vlen;
    size_t seq;                   /* wire position among the object's entries */
    size_t first;                 /* after grouping: seq of the key's first occurrence */
    size_t kofs, kjlen;           /* the key as JSON text in the object's key buffer */
    uint32_t idx;                 /* JS array index value when is_idx */
    int is_idx;
} coai__ent;

/* Private storage behind coai_msg.priv_: the one nanopb leaf struct decoded for the
 * current message (released on the next decode), plus what the callbacks collect. */
typedef struct coai__dec {
    const pb_msgdesc_t *desc;     /* type held in u (for pb_release), NULL if none */
    union {
        agent_v1_TextDeltaUpdate text;
        agent_v1_ThinkingDeltaUpdate thinking;
        agent_v1_ThinkingCompletedUpdate thinking_done;
        agent_v1_TokenDeltaUpdate tokens;
        agent_v1_ToolCallStartedUpdate started;
        agent_v1_ToolCallCompletedUpdate completed;
        agent_v1_PartialToolCallUpdate partial;
        agent_v1_StepStartedUpdate step;
        agent_v1_ShellArgs shell;
        agent_v1_WriteArgs write;
        agent_v1_DeleteArgs del;
        agent_v1_GrepArgs grep;
        agent_v1_ReadArgs read;
        agent_v1_LsArgs ls;
        agent_v1_McpArgs mcp;
        agent_v1_FetchArgs fetch;
        agent_v1_GetBlobArgs get_blob;
        agent_v1_SetBlobArgs set_blob;
        agent_v1_ConversationTokenDetails token_details;
        agent_v1_ExecServerAbort abort;
    } u;
    char *exec_id;                /* heap copy of ExecServerMessage.exec_id */
    size_t exec_id_len;
    /* Bounds of the leaf being decoded: a callback whose stream does not point inside
     * them was handed a scalar (wrong wire type) by nanopb. */
    const pb_byte_t *lo, *hi;
    int tool;                     /* ToolCall oneof field number seen by the callback */
    coai__ent *args;              /* McpArgs.args entries in wire order */
    size_t nargs, cargs;
    int cb_err;                   /* coai_result from inside a callback */
} coai__dec;

/* --- a small protobuf field reader on top of nanopb's stream API --- */

typedef struct coai__pbr {
    pb_istream_t s;
    const pb_byte_t *end;
} coai__pbr;

typedef struct coai__pbf {
    uint32_t num;
    pb_wire_type_t wt;
    uint64_t v;                   /* varint value or fixed64/fixed32 bits */
    const pb_byte_t *p;           /* length-delimited payload */
    size_t n;
} coai__pbf;

static void coai__pbr_init(coai__pbr *r, const pb_byte_t *p, size_t n)
{
    r->s = pb_istream_from_buffer(p, n);
    r->end = p + n;
}

/* 1: a field was read into *f; 0: end of message; -1: malformed (bad tag, field 0,
 * group or unknown wire type, varint over 10 bytes, length past the end). */
static int coai__pb_next(coai__pbr *r, coai__pbf *f)
{
    uint32_t tag, len;
    bool eof;
    if (r->s.bytes_left == 0) return 0;
    if (!pb_decode_tag(&r->s, &f->wt, &tag, &eof) || tag == 0) return -1;
    f->num = tag;
    f->v = 0;
    f->p = NULL;
    f->n = 0;
    switch (f->wt) {
    case PB_WT_VARINT:
        return pb_decode_varint(&r->s, &f->v) ? 1 : -1;
    case PB_WT_64BIT:
        return pb_decode_fixed64(&r->s, &f->v) ? 1 : -1;
    case PB_WT_32BIT: {
        uint32_t x;
        if (!pb_decode_fixed32(&r->s, &x)) return -1;
        f->v = x;
        return 1;
    }
    case PB_WT_STRING:
        if (!pb_decode_varint32(&r->s, &len) || len > r->s.bytes_left) return -1;
        f->p = r->end - r->s.bytes_left;
        f->n = len;
        return pb_read(&r->s, NULL, len) ? 1 : -1;
    default:
        return -1;
    }
}

/* Validate one message level and bound its field count before nanopb sees it: nanopb
 * skips over-long varints in unknown fields and grows repeated pointer fields one
 * element at a time, so unbounded repeats would cost quadratic time and much memory. */
static coai_result coai__pb_scan(const pb_byte_t *p, size_t n)
{
    coai__pbr r;
    coai__pbf f;
    size_t count = 0;
    int k;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0)
        if (++count > COAI_MAX_PB_FIELDS) return COAI_ERR_TOO_BIG;
    return k < 0 ? COAI_ERR_PROTO : COAI_OK;
}

/* Decode a fixed-shape leaf message with nanopb into d->u (already zeroed). */
static coai_result coai__leaf(coai__dec *d, const pb_msgdesc_t *desc, const coai__pbf *f)
{
    pb_istream_t s;
    coai_result r = coai__pb_scan(f->p, f->n);
    if (r) return r;
    d->desc = desc;
    d->lo = f->p;
    d->hi = f->p + f->n;
    d->cb_err = 0;
    s = pb_istream_from_buffer(f->p, f->n);
    if (!pb_decode(&s, desc, &d->u)) return d->cb_err ? (coai_result)d->cb_err : COAI_ERR_PROTO;
    return COAI_OK;
}

/* The bytes a callback's stream covers, if they lie inside the leaf (buffer streams
 * keep their read position in state); NULL when nanopb passed a copied scalar. */
static const pb_byte_t *coai__cb_bytes(const coai__dec *d, const pb_istream_t *s)
{
    uintptr_t at = (uintptr_t)s->state, lo = (uintptr_t)d->lo, hi = (uintptr_t)d->hi;
    if (at < lo || at > hi || s->bytes_left > hi - at) return NULL;
    return (const pb_byte_t *)s->state;
}

/* ToolCall: keep only its oneof field number (the first tag); never decode the
 * member, whose results can hold trees of any depth. */
static bool coai__tool_cb(pb_istream_t *s, const pb_field_t *field, void **arg)
{
    coai__dec *d = (coai__dec *)*arg;
    pb_wire_type_t wt;
    uint32_t tag;
    bool eof;
    (void)field;
    if (coai__cb_bytes(d, s) && s->bytes_left > 0) {
        if (!pb_decode_tag(s, &wt, &tag, &eof)) return false;
        d->tool = (int)tag;
    }
    return pb_read(s, NULL, s->bytes_left);
}

/* McpArgs.args entry {1: key, 2: Value}: record the spans; rendered after pb_decode. */
static bool coai__args_cb(pb_istream_t *s, const pb_field_t *field, void **arg)
{
    coai__dec *d = (coai__dec *)*arg;
    const pb_byte_t *p = coai__cb_bytes(d, s);
    coai__pbr r;
    coai__pbf f;
    coai__ent e;
    int k;
    (void)field;
    if (!p) return pb_read(s, NULL, s->bytes_left);   /* not length-delimited: ignored */
    memset(&e, 0, sizeof e);
    coai__pbr_init(&r, p, s->bytes_left);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1 && f.wt == PB_WT_STRING) { e.key = f.p; e.klen = f.n; }
        if (f.num == 2 && f.wt == PB_WT_STRING) { e.val = f.p; e.vlen = f.n; }
    }
    if (k < 0) return false;
    if (e.klen > 0) {
        if (d->nargs >= COAI_MAX_PB_FIELDS) { d->cb_err = COAI_ERR_TOO_BIG; return false; }
        if (d->nargs == d->cargs) {
            size_t nc = d->cargs ? d->cargs * 2 : 16;
            coai__ent *na = (coai__ent *)realloc(d->args, nc * sizeof *na);
            if (!na) { d->cb_err = COAI_ERR_NOMEM; return false; }
            d->args = na;
            d->cargs = nc;
        }
        e.seq = d->nargs;
        d->args[d->nargs++] = e;
    }
    return pb_read(s, NULL, s->bytes_left);
}

/* --- google.protobuf.Value -> JSON, as the original's JavaScript decoder does it --- */

static coai_result coai__json_object(coai__ent *e, size_t n, int depth, coai_buf *out);

/* TextDecoder drops one leading byte order mark. */
static void coai__strip_bom(const pb_byte_t **p, size_t *n)
{
    if (*n >= 3 && (*p)[0] == 0xef && (*p)[1] == 0xbb && (*p)[2] == 0xbf) { *p += 3; *n -= 3; }
}

/* The first recognised member of a Value: 1 varint null, 2 double, 3 string, 4 varint
 * bool, 5 Struct, 6 ListValue. 1 found, 0 none (undefined), negative coai_result. */
static int coai__value_pick(const pb_byte_t *p, size_t n, coai__pbf *pick)
{
    coai__pbr r;
    coai__pbf f;
    int k, found = 0;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (found) continue;
        if (((f.num == 1 || f.num == 4) && f.wt == PB_WT_VARINT) ||
            (f.num == 2 && f.wt == PB_WT_64BIT) ||
            ((f.num == 3 || f.num == 5 || f.num == 6) && f.wt == PB_WT_STRING)) {
            *pick = f;
            found = 1;
        }
    }
    return k < 0 ? COAI_ERR_PROTO : found;
}

static coai_result coai__json_struct(const pb_byte_t *p, size_t n, int depth, coai_buf *out)
{
    coai__pbr r, er;
    coai__pbf f, ef;
    coai__ent *e = NULL, *ne;
    size_t cnt = 0, cap = 0;
    coai_result res;
    int k, ek;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        coai__ent x;
        if (f.num != 1 || f.wt != PB_WT_STRING) continue;
        memset(&x, 0, sizeof x);
        coai__pbr_init(&er, f.p, f.n);
        while ((ek = coai__pb_next(&er, &ef)) > 0) {
            if (ef.num == 1 && ef.wt == PB_WT_STRING) { x.key = ef.p; x.klen = ef.n; }
            if (ef.num == 2 && ef.wt == PB_WT_STRING) { x.val = ef.p; x.vlen = ef.n; }
        }
        if (ek < 0) { k = -1; break; }
        if (x.klen == 0) continue;
        if (cnt >= COAI_MAX_PB_FIELDS) { free(e); return COAI_ERR_TOO_BIG; }
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            ne = (coai__ent *)realloc(e, cap * sizeof *e);
            if (!ne) { free(e); return COAI_ERR_NOMEM; }
            e = ne;
        }
        x.seq = cnt;
        e[cnt++] = x;
    }
    res = k < 0 ? COAI_ERR_PROTO : coai__json_object(e, cnt, depth, out);
    free(e);
    return res;
}

static coai_result coai__json_value(const coai__pbf *f, int depth, coai_buf *out);

static coai_result coai__json_list(const pb_byte_t *p, size_t n, int depth, coai_buf *out)
{
    coai__pbr r;
    coai__pbf f, pick;
    int k, got, any = 0;
    coai_result res;
    if (coai_buf_putc(out, '[')) return COAI_ERR_NOMEM;
    coai__pbr_init(&r, p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 1 || f.wt != PB_WT_STRING) continue;
        if (any && coai_buf_putc(out, ',')) return COAI_ERR_NOMEM;
        any = 1;
        got = coai__value_pick(f.p, f.n, &pick);
        if (got < 0) return (coai_result)got;
        /* JSON.stringify writes an undefined array element as null */
        if (!got) { if (coai_buf_puts(out, "null")) return COAI_ERR_NOMEM; continue; }
        if ((res = coai__json_value(&pick, depth, out)) != COAI_OK) return res;
    }
    if (k < 0) return COAI_ERR_PROTO;
    return coai_buf_putc(out, ']') ? COAI_ERR_NOMEM : COAI_OK;
}

/* depth = number of JSON containers already open around this value. */
static coai_result coai__json_value(const coai__pbf *f, int depth, coai_buf *out)
{
    const pb_byte_t *p = f->p;
    size_t n = f->n;
    double d;
    switch (f->num) {
    case 1: return coai_buf_puts(out, "null") ? COAI_ERR_NOMEM : COAI_OK;
    case 2:
        memcpy(&d, &f->v, sizeof d);
        return coai_json_num_append(out, d) ? COAI_ERR_NOMEM : COAI_OK;
    case 3:
        coai__strip_bom(&p, &n);
        return coai_json_str_append(out, (const char *)p, n) ? COAI_ERR_NOMEM : COAI_OK;
    case 4: return coai_buf_puts(out, f->v == 1 ? "true" : "false") ? COAI_ERR_NOMEM : COAI_OK;
    default:
        if (depth >= COAI_MAX_VALUE_DEPTH) return COAI_ERR_PROTO;
        return f->num == 5 ? coai__json_struct(p, n, depth + 1, out)
                           : coai__json_list(p, n, depth + 1, out);
    }
}

/* Order of a JS object's keys: array indices ascending, then the other keys by the
 * position of their first assignment. Sort 1 groups equal keys by wire position. */
static int coai__ent_cmp_key(const void *a, const void *b)
{
    const coai__ent *x = (const coai__ent *)a, *y = (const coai__ent *)b;
    size_t m;
    int c;
    if (x->is_idx != y->is_idx) return x->is_idx ? -1 : 1;
    if (x->is_idx) {
        if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    } else {
        m = x->kjlen < y->kjlen ? x->kjlen : y->kjlen;
        c = memcmp(x->key, y->key, m);            /* key points at the JSON text here */
        if (c) return c;
        if (x->kjlen != y->kjlen) return x->kjlen < y->kjlen ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int coai__ent_same_key(const coai__ent *x, const coai__ent *y)
{
    return x->kjlen == y->kjlen && memcmp(x->key, y->key, x->kjlen) == 0;
}

static int coai__ent_cmp_pos(const void *a, const void *b)
{
    const coai__ent *x = (const coai__ent *)a, *y = (const coai__ent *)b;
    if (x->is_idx != y->is_idx) return x->is_idx ? -1 : 1;
    if (x->is_idx) return x->idx < y->idx ? -1 : x->idx > y->idx;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Write the object whose entries (non-empty raw keys, wire order) are e[0..n). */
static coai_result coai__json_object(coai__ent *e, size_t n, int depth, coai_buf *out)
{
    coai_buf kb = { 0 };
    coai_result res = COAI_OK;
    size_t i, j, k;
    int any = 0;
    if (depth > COAI_MAX_VALUE_DEPTH) return COAI_ERR_PROTO;
    /* Keys as JSON text (what the decoded JS string serialises to), so keys that decode
     * to the same string (e.g. two different invalid sequences -> U+FFFD) are equal. */
    for (i = 0; i < n; i++) {
        const pb_byte_t *kp = e[i].key;
        size_t kn = e[i].klen;
        coai__strip_bom(&kp, &kn);
        e[i].kofs = kb.len;
        if (coai_json_str_append(&kb, (const char *)kp, kn)) { res = COAI_ERR_NOMEM; goto done; }
        e[i].kjlen = kb.len - e[i].kofs;
    }
    for (i = 0, k = 0; i < n; i++) {
        const char *t = (const char *)kb.data + e[i].kofs + 1;   /* inside the quotes */
        size_t tl = e[i].kjlen - 2, d;
        uint64_t v = 0;
        /* "" (a BOM-only key) is dropped by `if (key)`; "__proto__" sets the prototype
         * instead of creating a member, so JSON.stringify never shows it. */
        if (tl == 0 || (tl == 9 && memcmp(t, "__proto__", 9) == 0)) continue;
        e[i].is_idx = 0;
        if (tl <= 10 && (tl == 1 || t[0] != '0')) {
            for (d = 0; d < tl && t[d] >= '0' && t[d] <= '9'; d++)
                v = v * 10 + (uint64_t)(t[d] - '0');
            if (d == tl && v <= 4294967294u) { e[i].is_idx = 1; e[i].idx = (uint32_t)v; }
        }
        e[i].key = (const pb_byte_t *)kb.data + e[i].kofs;   /* from here: the JSON key */
        e[k++] = e[i];
    }
    n = k;
    if (n > 1) {
        qsort(e, n, sizeof *e, coai__ent_cmp_key);
        /* one entry per key: the last assignment's value at the first one's place */
        for (i = 0, k = 0; i < n; i = j) {
            size_t first = e[i].seq;
            for (j = i + 1; j < n && coai__ent_same_key(&e[i], &e[j]); j++)
                ;
            e[j - 1].first = first;
            e[k++] = e[j - 1];
        }
        n = k;
        qsort(e, n, sizeof *e, coai__ent_cmp_pos);
    }
    if (coai_buf_putc(out, '{')) { res = COAI_ERR_NOMEM; goto done; }
    for (i = 0; i < n; i++) {
        coai__pbf pick;
        int got = e[i].val ? coai__value_pick(e[i].val, e[i].vlen, &pick) : 0;
        if (got < 0) { res = (coai_result)got; goto done; }
        if (!got) continue;                    /* undefined: JSON.stringify skips it */
        if ((any && coai_buf_putc(out, ',')) || coai_buf_append(out, e[i].key, e[i].kjlen) ||
            coai_buf_putc(out, ':')) { res = COAI_ERR_NOMEM; goto done; }
        any = 1;
        if ((res = coai__json_value(&pick, depth, out)) != COAI_OK) goto done;
    }
    if (coai_buf_putc(out, '}')) res = COAI_ERR_NOMEM;
done:
    coai_buf_free(&kb);
    return res;
}

/* --- the message walk --- */

static void coai__dec_release(coai__dec *d)
{
    if (d->desc) pb_release(d->desc, &d->u);
    d->desc = NULL;
    memset(&d->u, 0, sizeof d->u);
    free(d->exec_id);
    d->exec_id = NULL;
    d->exec_id_len = 0;
    d->nargs = 0;
    d->tool = 0;
    d->cb_err = 0;
}

static coai_str coai__bytes_view(const pb_bytes_array_t *b)
{
    coai_str r;
    r.ptr = b ? (const char *)b->bytes : "";
    r.len = b ? b->size : 0;
    return r;
}

static void coai__msg_clear(coai_msg *m)
{
    coai_str e = { "", 0 };
    void *priv = m->priv_;
    coai_buf scratch = m->scratch_;
    memset(m, 0, sizeof *m);
    m->priv_ = priv;
    m->scratch_ = scratch;
    m->text = m->call_id = m->blob_id = m->blob_data = e;
    m->exec.exec_id = m->exec.command = m->exec.cwd = m->exec.path = e;
    m->exec.content = m->exec.pattern = m->exec.glob = m->exec.url = e;
    m->exec.mcp_name = m->exec.tool_name = m->exec.provider = e;
    m->exec.tool_call_id = m->exec.args_json = e;
}

static coai_result coai__interaction(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 };
    int k, have = 0;
    coai_result res;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num < 1 || f.num > 16) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        mem = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    switch (mem.num) {
    case 1:
        if ((res = coai__leaf(d, agent_v1_TextDeltaUpdate_fields, &mem)) != COAI_OK) return res;
        m->text = coai_str_c(d->u.text.text);
        m->kind = COAI_MSG_TEXT;
        break;
    case 4:
        res = coai__leaf(d, agent_v1_ThinkingDeltaUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->text = coai_str_c(d->u.thinking.text);
        m->kind = COAI_MSG_THINKING;
        break;
    case 5:
        res = coai__leaf(d, agent_v1_ThinkingCompletedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->value = d->u.thinking_done.thinking_duration_ms;
        m->kind = COAI_MSG_THINKING_DONE;
        break;
    case 8:
        if ((res = coai__leaf(d, agent_v1_TokenDeltaUpdate_fields, &mem)) != COAI_OK) return res;
        m->value = d->u.tokens.tokens;
        m->kind = COAI_MSG_TOKENS;
        break;
    case 2:
        d->u.started.tool_call.funcs.decode = coai__tool_cb;
        d->u.started.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_ToolCallStartedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.started.call_id);
        m->kind = COAI_MSG_TOOL_STARTED;
        break;
    case 3:
        d->u.completed.tool_call.funcs.decode = coai__tool_cb;
        d->u.completed.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_ToolCallCompletedUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.completed.call_id);
        m->kind = COAI_MSG_TOOL_COMPLETED;
        break;
    case 7:
        d->u.partial.tool_call.funcs.decode = coai__tool_cb;
        d->u.partial.tool_call.arg = d;
        res = coai__leaf(d, agent_v1_PartialToolCallUpdate_fields, &mem);
        if (res != COAI_OK) return res;
        m->call_id = coai_str_c(d->u.partial.call_id);
        m->text = coai_str_c(d->u.partial.args_text_delta);
        m->kind = COAI_MSG_TOOL_PARTIAL;
        break;
    case 13: m->kind = COAI_MSG_HEARTBEAT; break;
    case 14: m->kind = COAI_MSG_TURN_ENDED; break;
    case 16:
        if ((res = coai__leaf(d, agent_v1_StepStartedUpdate_fields, &mem)) != COAI_OK) return res;
        m->value2 = (int64_t)d->u.step.step_id;
        m->value = 16;
        m->kind = COAI_MSG_STEP;
        break;
    default:                          /* 6, 9, 10, 11, 12, 15: informational */
        m->value = mem.num;
        m->kind = COAI_MSG_STEP;
        break;
    }
    m->tool = d->tool;
    return COAI_OK;
}

static int coai__exec_member(uint32_t num)
{
    switch (num) {
    case 2: case 3: case 4: case 5: case 7: case 8: case 9: case 10: case 11: case 14:
    case 16: case 17: case 18: case 20: case 21: case 22:
        return 1;
    }
    return 0;
}

static coai_result coai__exec(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 }, xid = { 0 };
    coai_exec *x = &m->exec;
    int k, have = 0, have_xid = 0;
    coai_result res = COAI_OK;
    uint32_t id = 0;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            id = (uint32_t)f.v;
        } else if (f.num == 15) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            xid = f;
            have_xid = 1;
        } else if (coai__exec_member(f.num)) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            mem = f;
            have = 1;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;        /* no exec we know: nothing to act on */
    switch (mem.num) {
    case COAI_EXEC_SHELL:
    case COAI_EXEC_SHELL_STREAM:
        if ((res = coai__leaf(d, agent_v1_ShellArgs_fields, &mem)) != COAI_OK) return res;
        x->command = coai_str_c(d->u.shell.command);
        x->cwd = coai_str_c(d->u.shell.working_directory);
        x->tool_call_id = coai_str_c(d->u.shell.tool_call_id);
        break;
    case COAI_EXEC_WRITE:
        if ((res = coai__leaf(d, agent_v1_WriteArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.write.path);
        x->has_path = d->u.write.path != NULL;
        x->content = coai_str_c(d->u.write.file_text);
        x->tool_call_id = coai_str_c(d->u.write.tool_call_id);
        break;
    case COAI_EXEC_DELETE:
        if ((res = coai__leaf(d, agent_v1_DeleteArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.del.path);
        x->has_path = d->u.del.path != NULL;
        x->tool_call_id = coai_str_c(d->u.del.tool_call_id);
        break;
    case COAI_EXEC_GREP:
        if ((res = coai__leaf(d, agent_v1_GrepArgs_fields, &mem)) != COAI_OK) return res;
        x->pattern = coai_str_c(d->u.grep.pattern);
        x->path = coai_str_c(d->u.grep.path);
        x->has_path = d->u.grep.path != NULL;
        x->glob = coai_str_c(d->u.grep.glob);
        x->tool_call_id = coai_str_c(d->u.grep.tool_call_id);
        break;
    case COAI_EXEC_READ:
        if ((res = coai__leaf(d, agent_v1_ReadArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.read.path);
        x->has_path = d->u.read.path != NULL;
        x->tool_call_id = coai_str_c(d->u.read.tool_call_id);
        break;
    case COAI_EXEC_LS:
        if ((res = coai__leaf(d, agent_v1_LsArgs_fields, &mem)) != COAI_OK) return res;
        x->path = coai_str_c(d->u.ls.path);
        x->has_path = d->u.ls.path != NULL;
        x->tool_call_id = coai_str_c(d->u.ls.tool_call_id);
        break;
    case COAI_EXEC_FETCH:
        if ((res = coai__leaf(d, agent_v1_FetchArgs_fields, &mem)) != COAI_OK) return res;
        x->url = coai_str_c(d->u.fetch.url);
        x->tool_call_id = coai_str_c(d->u.fetch.tool_call_id);
        break;
    case COAI_EXEC_MCP:
        d->u.mcp.args.funcs.decode = coai__args_cb;
        d->u.mcp.args.arg = d;
        if ((res = coai__leaf(d, agent_v1_McpArgs_fields, &mem)) != COAI_OK) return res;
        x->mcp_name = coai_str_c(d->u.mcp.name);
        x->tool_call_id = coai_str_c(d->u.mcp.tool_call_id);
        x->provider = coai_str_c(d->u.mcp.provider_identifier);
        x->tool_name = coai_str_c(d->u.mcp.tool_name);
        res = coai__json_object(d->args, d->nargs, 1, &m->scratch_);
        if (res != COAI_OK) return res;
        x->args_json.ptr = (const char *)m->scratch_.data;
        x->args_json.len = m->scratch_.len;
        break;
    default:                          /* request_context, diagnostics, ...: kind only */
        break;
    }
    if (have_xid && xid.n > 0) {
        d->exec_id = (char *)malloc(xid.n + 1);
        if (!d->exec_id) return COAI_ERR_NOMEM;
        memcpy(d->exec_id, xid.p, xid.n);
        d->exec_id[xid.n] = 0;
        d->exec_id_len = xid.n;
        x->exec_id.ptr = d->exec_id;
        x->exec_id.len = xid.n;
    }
    x->kind = (coai_exec_kind)mem.num;
    x->id = id;
    m->kind = COAI_MSG_EXEC;
    return COAI_OK;
}

static coai_result coai__kv(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 };
    int k, have = 0;
    coai_result res;
    uint32_t id = 0;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            id = (uint32_t)f.v;
        } else if (f.num == 2 || f.num == 3) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            mem = f;
            have = 1;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    if (mem.num == 2) {
        if ((res = coai__leaf(d, agent_v1_GetBlobArgs_fields, &mem)) != COAI_OK) return res;
        m->blob_id = coai__bytes_view(d->u.get_blob.blob_id);
        m->kind = COAI_MSG_KV_GET;
    } else {
        if ((res = coai__leaf(d, agent_v1_SetBlobArgs_fields, &mem)) != COAI_OK) return res;
        m->blob_id = coai__bytes_view(d->u.set_blob.blob_id);
        m->blob_data = coai__bytes_view(d->u.set_blob.blob_data);
        m->kind = COAI_MSG_KV_SET;
    }
    m->id = id;
    return COAI_OK;
}

static coai_result coai__checkpoint(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f;
    pb_istream_t s;
    coai_result res;
    int k;
    d->desc = agent_v1_ConversationTokenDetails_fields;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 5) continue;     /* the rest is conversation state we do not keep */
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        if ((res = coai__pb_scan(f.p, f.n)) != COAI_OK) return res;
        /* a repeated sub-message merges into the previous one */
        s = pb_istream_from_buffer(f.p, f.n);
        if (!pb_decode_ex(&s, agent_v1_ConversationTokenDetails_fields, &d->u.token_details,
                          PB_DECODE_NOINIT))
            return COAI_ERR_PROTO;
    }
    if (k < 0) return COAI_ERR_PROTO;
    m->value = d->u.token_details.used_tokens;
    m->value2 = d->u.token_details.max_tokens;
    m->kind = COAI_MSG_CHECKPOINT;
    return COAI_OK;
}

static coai_result coai__control(coai_msg *m, coai__dec *d, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f, mem = { 0 };
    int k, have = 0;
    coai_result res;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num != 1) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        mem = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    if ((res = coai__leaf(d, agent_v1_ExecServerAbort_fields, &mem)) != COAI_OK) return res;
    m->id = d->u.abort.id;
    m->kind = COAI_MSG_EXEC_ABORT;
    return COAI_OK;
}

static coai_result coai__query(coai_msg *m, const coai__pbf *top)
{
    coai__pbr r;
    coai__pbf f;
    int k;
    coai__pbr_init(&r, top->p, top->n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num == 1) {
            if (f.wt != PB_WT_VARINT) return COAI_ERR_PROTO;
            m->id = (uint32_t)f.v;
        } else if (f.num >= 2 && f.num <= 6) {
            if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
            m->query = (int)f.num;
        }
    }
    if (k < 0) return COAI_ERR_PROTO;
    m->kind = COAI_MSG_QUERY;
    return COAI_OK;
}

coai_result coai_msg_decode(coai_msg *m, const void *p, size_t n)
{
    coai__dec *d = (coai__dec *)m->priv_;
    coai__pbr r;
    coai__pbf f, top = { 0 };
    int k, have = 0;
    coai_result res = COAI_OK;
    if (d) coai__dec_release(d);
    coai_buf_reset(&m->scratch_);
    coai__msg_clear(m);
    if (n == 0) return COAI_OK;
    if (!p) return COAI_ERR_STATE;
    if (!d) {
        d = (coai__dec *)calloc(1, sizeof *d);
        if (!d) return COAI_ERR_NOMEM;
        m->priv_ = d;
    }
    coai__pbr_init(&r, (const pb_byte_t *)p, n);
    while ((k = coai__pb_next(&r, &f)) > 0) {
        if (f.num < 1 || f.num > 7 || f.num == 6) continue;
        if (f.wt != PB_WT_STRING) return COAI_ERR_PROTO;
        top = f;
        have = 1;
    }
    if (k < 0) return COAI_ERR_PROTO;
    if (!have) return COAI_OK;
    switch (top.num) {
    case 1: res = coai__interaction(m, d, &top); break;
    case 2: res = coai__exec(m, d, &top); break;
    case 3: res = coai__checkpoint(m, d, &top); break;
    case 4: res = coai__kv(m, d, &top); break;
    case 5: res = coai__control(m, d, &top); break;
    default: res = coai__query(m, &top); break;
    }
    if (res != COAI_OK) {
        coai__dec_release(d);
        coai_buf_reset(&m->scratch_);
        coai__msg_clear(m);
    }
    return res;
}

void coai_msg_free(coai_msg *m)
{
    coai__dec *d = (coai__dec *)m->priv_;
    if (d) {
        coai__dec_release(d);
        free(d->args);
        free(d);
    }
    coai_buf_free(&m->scratch_);
    memset(m, 0, sizeof *m);
}
/* PART:DECODE impl end */

/* ======================================================================== */
/* PART:HTTP impl                                                           */
/* ======================================================================== */
/* PART:HTTP impl end */

/* ======================================================================== */
/* PART:OPENAI impl                                                         */
/* ======================================================================== */
/* PART:OPENAI impl end */

#endif /* CURSOR_OAI_IMPLEMENTATION */
