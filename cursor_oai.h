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
/* PART:DECODE api end */

/* ======================================================================== */
/* PART:HTTP api (request parser, chunked decoder, response parser, Host)   */
/* ======================================================================== */
/* HTTP/1.1 for server.c: a strict request-head parser, an in-place chunked body
 * decoder, a bounded response-head parser for the upstream side, and the
 * security checks done before auth (Host allow-list against DNS rebinding,
 * Origin, JSON content type, constant-time key compare).
 *
 * Head parsers are stateless like picohttpparser: pass the whole data received
 * so far each time. They return the head length (> COAI_MORE) when the head is
 * complete, COAI_MORE when more bytes are needed, or a negative coai_result.
 * Every coai_str they fill points into the caller's buffer and stays valid while
 * that buffer does. A header that is absent has ptr == NULL; present but empty
 * has ptr != NULL and len 0.
 *
 * Request strictness (each error sets *status to the HTTP status to answer):
 *   400  bad request-line syntax; NUL/CTL/DEL in method, target, names or values;
 *        whitespace before a colon; empty name; obs-fold (a line starting with
 *        SP/HTAB); bare LF or CR without LF anywhere in the head (we do not accept
 *        bare LF line endings: no real client needs them and accepting them is a
 *        smuggling lever); no Host on HTTP/1.1; Host, Content-Length,
 *        Transfer-Encoding, Origin, Content-Type or Authorization sent twice;
 *        Content-Length not 1*DIGIT or over INT64_MAX ("-1", "1e3", "5, 5");
 *        Transfer-Encoding with Content-Length, on HTTP/1.0, or empty; a target
 *        that is not origin-form ("/...") or "*" with OPTIONS (absolute-form too)
 *   501  Transfer-Encoding other than exactly "chunked" (case-insensitive)
 *   414  request line over COAI_HTTP_MAX_LINE bytes (without CRLF)
 *   431  a header line over COAI_HTTP_MAX_LINE, more than COAI_HTTP_MAX_HEADERS
 *        headers, or a head (with its blank line) over COAI_HTTP_MAX_HEAD
 *   505  a well-formed version other than HTTP/1.0 or HTTP/1.1
 * Errors are returned as soon as the bytes that prove them have arrived, so a
 * prefix of the input gives COAI_MORE or the same error as the whole input.
 * Empty lines (CRLF) before the request line are skipped (RFC 9112 2.2). */

#ifndef COAI_HTTP_MAX_HEADERS
#define COAI_HTTP_MAX_HEADERS 100              /* header lines in one head; more -> 431 */
#endif
#ifndef COAI_HTTP_MAX_LINE
#define COAI_HTTP_MAX_LINE (8u * 1024u)        /* request line (-> 414) or a header line (-> 431) */
#endif
#ifndef COAI_HTTP_MAX_HEAD
#define COAI_HTTP_MAX_HEAD (32u * 1024u)       /* head incl. blank line (-> 431); <= INT_MAX */
#endif
#ifndef COAI_HTTP_MAX_BODY
#define COAI_HTTP_MAX_BODY (32u * 1024u * 1024u) /* request body cap server.c enforces (-> 413) */
#endif
#ifndef COAI_HTTP_MAX_CHUNK_LINE
#define COAI_HTTP_MAX_CHUNK_LINE 1024u         /* chunk-size line incl. extensions, without CRLF */
#endif
#ifndef COAI_HTTP_CHUNK_OVERHEAD_MIN
#define COAI_HTTP_CHUNK_OVERHEAD_MIN (100u * 1024u) /* framing bytes before the 80% flood rule */
#endif

typedef struct coai_http_header {
    coai_str name;              /* as sent (case kept); a token */
    coai_str value;             /* leading and trailing SP/HTAB removed */
} coai_http_header;

typedef struct coai_http_request {
    coai_str method;            /* token, case-sensitive ("POST") */
    coai_str target;            /* origin-form "/path?query", or "*" (OPTIONS only) */
    coai_str path;              /* target up to the first '?' */
    int minor_version;          /* 0 or 1 */
    coai_http_header headers[COAI_HTTP_MAX_HEADERS];
    size_t header_count;
    int64_t content_length;     /* -1 = no Content-Length */
    int chunked;                /* Transfer-Encoding: chunked (use coai_chunked_feed) */
    int keep_alive;             /* 1.1: unless "Connection: close"; 1.0: only with keep-alive */
    int expect_continue;        /* HTTP/1.1 with "Expect: 100-continue" */
    coai_str host;              /* Host value (ptr NULL when absent) */
    int host_count;             /* 0 or 1 after success (two Host lines -> 400) */
    coai_str origin;            /* Origin value (ptr NULL when absent) */
    coai_str content_type;      /* Content-Type value (ptr NULL when absent) */
    coai_str authorization;     /* Authorization value (ptr NULL when absent) */
} coai_http_request;

/* Parse a request head from buf[0..len) (all bytes received so far). Returns the
 * head length (> COAI_MORE; the body or the next pipelined request starts there),
 * COAI_MORE, or COAI_ERR_HTTP / COAI_ERR_TOO_BIG with *status = 400, 414, 431, 501
 * or 505 (*status = 0 otherwise). The body cap (413) is the caller's to apply. */
int coai_http_parse_request(const char *buf, size_t len, coai_http_request *rq, int *status);

/* First header named `name` (case-insensitive); {NULL, 0} when there is none. */
coai_str coai_http_header_get(const coai_http_header *h, size_t n, const char *name);

/* Chunked body decoder. Zero-init; set max_body (0 = unlimited) before the first
 * feed. Each call decodes buf[0..len) in place: the payload bytes are moved to
 * buf[0..*out_len). *consumed is len on COAI_MORE; on COAI_DONE (last chunk and
 * trailers read) it is where the body ended, and buf[*consumed..len) belongs to
 * the next request. Trailers are checked and dropped. Errors (sticky):
 * COAI_ERR_HTTP (400) for bad or over-16-digit hex, bare LF, a missing CRLF after
 * the data, a chunk-size line over COAI_HTTP_MAX_CHUNK_LINE, trailers over
 * COAI_HTTP_MAX_HEAD, or framing overhead over COAI_HTTP_CHUNK_OVERHEAD_MIN and
 * above 80% of the bytes (a 1-byte-chunk flood); COAI_ERR_TOO_BIG (413) as soon as
 * a chunk size takes the declared total over max_body. On an error *consumed and
 * *out_len say how far decoding got. Splitting the input differently never
 * changes the result. */
typedef struct coai_chunked_decoder {
    size_t max_body;            /* 0 = unlimited; else payload bytes allowed */
    uint64_t total;             /* payload bytes declared by chunk sizes so far */
    uint64_t overhead;          /* framing bytes so far (sizes, CRLFs, extensions) */
    uint64_t remaining;         /* private: data bytes left in this chunk */
    size_t line_len;            /* private: bytes in the current size or trailer line */
    size_t trailer_len;         /* private: trailer bytes so far */
    int state;                  /* private */
    int digits;                 /* private: hex digits in this size line */
    int err;                    /* sticky error, 0 when none */
} coai_chunked_decoder;

coai_result coai_chunked_feed(coai_chunked_decoder *d, char *buf, size_t len,
                              size_t *consumed, size_t *out_len);

/* An upstream response head. Lenient where real servers vary (bare LF line
 * endings, a missing reason phrase, repeated identical Content-Length, control
 * bytes other than NUL in values) but bounded by the same limits. */
typedef struct coai_http_response {
    int status;                 /* 100..599 */
    int minor_version;          /* 0 or 1 */
    coai_str reason;            /* reason phrase, may be empty */
    coai_http_header headers[COAI_HTTP_MAX_HEADERS];
    size_t header_count;
    int64_t content_length;     /* -1 = none (or overridden by chunked); 0 when no_body */
    int chunked;                /* Transfer-Encoding: chunked */
    int keep_alive;             /* 0 when the connection must close after this response */
    int no_body;                /* 1xx, 204, 304: no body whatever the headers say */
    coai_str content_type;      /* Content-Type value (ptr NULL when absent) */
} coai_http_response;

/* Body framing: no_body (or a HEAD request) -> none; chunked -> coai_chunked_feed;
 * content_length >= 0 -> that many bytes; else read until close (keep_alive = 0).
 * Returns the head length (> COAI_MORE), COAI_MORE, COAI_ERR_HTTP (malformed, or a
 * Transfer-Encoding we cannot decode) or COAI_ERR_TOO_BIG (a limit). A 1xx head is
 * followed by another head. Chunked with Content-Length: chunked wins, keep_alive 0. */
int coai_http_parse_response(const char *buf, size_t len, coai_http_response *rs);

/* Host allow-list: 1 when host is exactly localhost, 127.0.0.1, [::1] or one of
 * extra[0..n_extra) (case-insensitive, names without port), followed by nothing
 * or ":<port>" equal to port (port <= 0: any 1-5 digit port). Rejects an empty
 * host, ":1234", "localhost.evil.com", "localhost." and "user@localhost". */
int coai_http_host_allowed(coai_str host, const coai_str *extra, size_t n_extra, int port);

/* Origin allow-list: 1 for "http://" or "https://" + a host accepted by
 * coai_http_host_allowed (same port rule) with no path. "null", empty and
 * anything else -> 0. An absent Origin header is the caller's to allow. */
int coai_http_origin_allowed(coai_str origin, int port, const coai_str *extra, size_t n_extra);

/* 1 when a Content-Type is application/json (case-insensitive) with optional
 * parameters; a charset parameter must be utf-8. */
int coai_http_is_json(coai_str content_type);

/* Constant-time equality of two secrets: compares SHA-256 digests, so neither the
 * content nor the length of the expected key leaks through timing. 0 when either
 * is empty, so an empty configured key never matches. */
int coai_http_token_equal(coai_str a, coai_str b);

/* The token of "Bearer <token>" (scheme case-insensitive, spaces trimmed);
 * {NULL, 0} when the scheme is not Bearer or the token is empty. */
coai_str coai_http_bearer(coai_str authorization);
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
/* PART:DECODE impl end */

/* ======================================================================== */
/* PART:HTTP impl                                                           */
/* ======================================================================== */
#include <bearssl.h>

static int coai__http_tchar(unsigned char c)
{
    /* RFC 9110 tchar: ALPHA / DIGIT / "!#$%&'*+-.^_`|~" */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int coai__http_lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Case-insensitive equality of a view and a lowercase literal. */
static int coai__http_ieq(const char *p, size_t n, const char *lit)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (!lit[i] || coai__http_lower((unsigned char)p[i]) != (unsigned char)lit[i]) return 0;
    return lit[n] == 0;
}

static coai_str coai__http_str(const char *p, size_t n)
{
    coai_str s;
    s.ptr = p;
    s.len = n;
    return s;
}

static coai_str coai__http_trim(coai_str s)
{
    while (s.len && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) { s.ptr++; s.len--; }
    while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t')) s.len--;
    return s;
}

/* One line from buf[*pos..n). 1: content is [*pos, *end), *pos moves past the
 * terminator; 0: need more bytes; -1: bare LF (unless allowed) or CR without LF;
 * -2: the content is longer than max. */
static int coai__http_line(const char *buf, size_t n, size_t *pos, size_t *end, size_t max,
                           int bare_lf)
{
    size_t s = *pos, i;
    for (i = s; i < n; i++) {
        if (buf[i] == '\r' || buf[i] == '\n') break;
        if (i - s >= max) return -2;
    }
    if (i == n) return 0;
    if (buf[i] == '\n') {
        if (!bare_lf) return -1;
        *end = i;
        *pos = i + 1;
        return 1;
    }
    if (i + 1 >= n) return 0;
    if (buf[i + 1] != '\n') return -1;
    *end = i;
    *pos = i + 2;
    return 1;
}

/* Split one header line [s, e) into h. strict: CTL/DEL in the value is an error
 * (else only NUL is). Returns 0 or -1. */
static int coai__http_field(const char *buf, size_t s, size_t e, int strict, coai_http_header *h)
{
    size_t i = s, j;
    coai_str v;
    while (i < e && coai__http_tchar((unsigned char)buf[i])) i++;
    /* Also rejects obs-fold and "name :" (whitespace is not a tchar). */
    if (i == s || i == e || buf[i] != ':') return -1;
    v = coai__http_trim(coai__http_str(buf + i + 1, e - i - 1));
    for (j = 0; j < v.len; j++) {
        unsigned char c = (unsigned char)v.ptr[j];
        if (strict ? ((c < 0x20 && c != '\t') || c == 0x7f) : c == 0) return -1;
    }
    h->name = coai__http_str(buf + s, i - s);
    h->value = v;
    return 0;
}

/* Content-Length value: 1*DIGIT, or with list_ok a list of identical values
 * ("5, 5"). Returns the value or -1. */
static int64_t coai__http_clen(coai_str v, int list_ok)
{
    int64_t val = -1, cur;
    size_t i = 0;
    for (;;) {
        size_t start = i;
        cur = 0;
        while (i < v.len && v.ptr[i] >= '0' && v.ptr[i] <= '9') {
            int d = v.ptr[i] - '0';
            if (cur > (INT64_MAX - d) / 10) return -1;
            cur = cur * 10 + d;
            i++;
        }
        if (i == start || (val >= 0 && cur != val)) return -1;
        val = cur;
        while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t')) i++;
        if (i == v.len) return val;
        if (!list_ok || v.ptr[i] != ',') return -1;
        i++;
        while (i < v.len && (v.ptr[i] == ' ' || v.ptr[i] == '\t')) i++;
    }
}

/* Connection header tokens -> bit 1 "close", bit 2 "keep-alive". */
static int coai__http_conn(coai_str v)
{
    int f = 0;
    size_t i = 0;
    while (i <= v.len) {
        size_t s = i;
        coai_str t;
        while (i < v.len && v.ptr[i] != ',') i++;
        t = coai__http_trim(coai__http_str(v.ptr + s, i - s));
        if (coai__http_ieq(t.ptr, t.len, "close")) f |= 1;
        else if (coai__http_ieq(t.ptr, t.len, "keep-alive")) f |= 2;
        i++;
    }
    return f;
}

/* State shared by the two head parsers. */
typedef struct coai__http_head {
    coai_http_header *hdr;
    size_t count;
    coai_str te, cl, host, origin, ctype, auth;
    int n_te, n_cl, n_host, n_origin, n_ctype, n_auth, conn, expect;
} coai__http_head;

static void coai__http_note(coai__http_head *st, const coai_http_header *h)
{
    const char *p = h->name.ptr;
    size_t n = h->name.len;
    if (coai__http_ieq(p, n, "host")) { st->host = h->value; st->n_host++; }
    else if (coai__http_ieq(p, n, "content-length")) {
        /* Identical repeats are folded into a list so one check covers both. */
        if (st->n_cl++ && (h->value.len != st->cl.len ||
                           memcmp(h->value.ptr, st->cl.ptr, st->cl.len) != 0))
            st->cl.len = 0;                 /* different values: make it invalid */
        else
            st->cl = h->value;
    }
    else if (coai__http_ieq(p, n, "transfer-encoding")) { st->te = h->value; st->n_te++; }
    else if (coai__http_ieq(p, n, "connection")) st->conn |= coai__http_conn(h->value);
    else if (coai__http_ieq(p, n, "expect")) {
        if (coai__http_ieq(h->value.ptr, h->value.len, "100-continue")) st->expect = 1;
    }
    else if (coai__http_ieq(p, n, "origin")) { st->origin = h->value; st->n_origin++; }
    else if (coai__http_ieq(p, n, "content-type")) { st->ctype = h->value; st->n_ctype++; }
    else if (coai__http_ieq(p, n, "authorization")) { st->auth = h->value; st->n_auth++; }
}

/* Header lines from *pos to the blank line. 1 done, 0 more, else an HTTP status
 * (400 syntax, 431 limits). */
static int coai__http_fields(const char *buf, size_t n, size_t *pos, int strict,
                             coai__http_head *st)
{
    for (;;) {
        size_t s = *pos, e;
        int r;
        if (s < n && buf[s] != '\r' && buf[s] != '\n' && st->count == COAI_HTTP_MAX_HEADERS)
            return 431;
        r = coai__http_line(buf, n, pos, &e, COAI_HTTP_MAX_LINE, !strict);
        if (r == 0) return 0;
        if (r == -1) return 400;
        if (r == -2) return 431;
        if (e == s) return 1;
        if (coai__http_field(buf, s, e, strict, &st->hdr[st->count])) return 400;
        coai__http_note(st, &st->hdr[st->count]);
        st->count++;
    }
}

static coai_str coai__http_none(void) { return coai__http_str(NULL, 0); }

/* The request line [s, e): 0 ok or an HTTP status. */
static int coai__http_reqline(const char *buf, size_t s, size_t e, coai_http_request *rq)
{
    size_t i = s, t;
    const char *v;
    while (i < e && coai__http_tchar((unsigned char)buf[i])) i++;
    if (i == s || i == e || buf[i] != ' ') return 400;
    rq->method = coai__http_str(buf + s, i - s);
    t = ++i;
    while (i < e && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f) i++;
    if (i == t || i == e || buf[i] != ' ') return 400;
    rq->target = coai__http_str(buf + t, i - t);
    i++;
    if (e - i != 8) return 400;
    v = buf + i;
    if (memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        return 400;
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return 505;
    rq->minor_version = v[7] - '0';
    /* Only origin-form, or "*" for OPTIONS: absolute-form would let a request
     * name another host than the one Host checks. */
    if (rq->target.ptr[0] == '/') {
        for (t = 0; t < rq->target.len && rq->target.ptr[t] != '?'; t++) {}
        rq->path = coai__http_str(rq->target.ptr, t);
    } else if (rq->target.len == 1 && rq->target.ptr[0] == '*' &&
               coai_str_eq(rq->method, "OPTIONS")) {
        rq->path = rq->target;
    } else {
        return 400;
    }
    return 0;
}

int coai_http_parse_request(const char *buf, size_t len, coai_http_request *rq, int *status)
{
    size_t n = len < COAI_HTTP_MAX_HEAD ? len : COAI_HTTP_MAX_HEAD, pos = 0, s, e;
    coai__http_head st;
    int r, code;
    /* Not memset: the header array is large and only [0, header_count) is meaningful. */
    rq->method = rq->target = rq->path = coai__http_none();
    rq->minor_version = 0;
    rq->header_count = 0;
    rq->content_length = -1;
    rq->chunked = rq->keep_alive = rq->expect_continue = rq->host_count = 0;
    rq->host = rq->origin = rq->content_type = rq->authorization = coai__http_none();
    memset(&st, 0, sizeof st);
    st.hdr = rq->headers;
    *status = 0;
    for (;;) {
        s = pos;
        r = coai__http_line(buf, n, &pos, &e, COAI_HTTP_MAX_LINE, 0);
        if (r == 0) goto more;
        if (r == -1) { code = 400; goto fail; }
        if (r == -2) { code = 414; goto fail; }
        if (e > s) break;                   /* skip empty lines before the request line */
    }
    if ((code = coai__http_reqline(buf, s, e, rq)) != 0) goto fail;
    r = coai__http_fields(buf, n, &pos, 1, &st);
    rq->header_count = st.count;
    if (r == 0) goto more;
    if (r != 1) { code = r; goto fail; }

    code = 400;
    if (st.n_host > 1 || st.n_cl > 1 || st.n_te > 1 || st.n_origin > 1 || st.n_ctype > 1 ||
        st.n_auth > 1)
        goto fail;
    if (rq->minor_version == 1 && st.n_host == 0) goto fail;
    if (st.n_cl && (rq->content_length = coai__http_clen(st.cl, 0)) < 0) goto fail;
    if (st.n_te) {
        if (rq->minor_version == 0 || st.te.len == 0) goto fail;
        if (!coai__http_ieq(st.te.ptr, st.te.len, "chunked")) { code = 501; goto fail; }
        if (st.n_cl) goto fail;             /* TE + CL: a request smuggling signal */
        rq->chunked = 1;
    }
    if (st.n_host) rq->host = st.host;
    rq->host_count = st.n_host;
    if (st.n_origin) rq->origin = st.origin;
    if (st.n_ctype) rq->content_type = st.ctype;
    if (st.n_auth) rq->authorization = st.auth;
    rq->keep_alive = rq->minor_version == 1 ? !(st.conn & 1) : st.conn == 2;
    rq->expect_continue = rq->minor_version == 1 && st.expect;
    return (int)pos;
more:
    /* The head did not end within the first COAI_HTTP_MAX_HEAD bytes. */
    if (len >= COAI_HTTP_MAX_HEAD) { code = 431; goto fail; }
    return COAI_MORE;
fail:
    *status = code;
    return code == 414 || code == 431 ? COAI_ERR_TOO_BIG : COAI_ERR_HTTP;
}

coai_str coai_http_header_get(const coai_http_header *h, size_t n, const char *name)
{
    size_t i, k = strlen(name);
    for (i = 0; i < n; i++) {
        size_t j;
        if (h[i].name.len != k) continue;
        for (j = 0; j < k; j++)
            if (coai__http_lower((unsigned char)h[i].name.ptr[j]) !=
                coai__http_lower((unsigned char)name[j]))
                break;
        if (j == k) return h[i].value;
    }
    return coai__http_none();
}

int coai_http_parse_response(const char *buf, size_t len, coai_http_response *rs)
{
    size_t n = len < COAI_HTTP_MAX_HEAD ? len : COAI_HTTP_MAX_HEAD, pos = 0, s, e, i;
    coai__http_head st;
    const char *v;
    int r;
    rs->status = rs->minor_version = 0;
    rs->reason = rs->content_type = coai__http_none();
    rs->header_count = 0;
    rs->content_length = -1;
    rs->chunked = rs->keep_alive = rs->no_body = 0;
    memset(&st, 0, sizeof st);
    st.hdr = rs->headers;
    r = coai__http_line(buf, n, &pos, &e, COAI_HTTP_MAX_LINE, 1);
    if (r == 0) goto more;
    if (r == -1) return COAI_ERR_HTTP;
    if (r == -2) return COAI_ERR_TOO_BIG;
    /* "HTTP/1.x NNN[ reason]" */
    v = buf;
    if (e < 12 || memcmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1') || v[8] != ' ')
        return COAI_ERR_HTTP;
    rs->minor_version = v[7] - '0';
    for (i = 9; i < 12; i++) {
        if (v[i] < '0' || v[i] > '9') return COAI_ERR_HTTP;
        rs->status = rs->status * 10 + (v[i] - '0');
    }
    if (rs->status < 100 || rs->status > 599) return COAI_ERR_HTTP;
    s = 12;
    if (e > 12) {
        if (v[12] != ' ') return COAI_ERR_HTTP;
        s = 13;
    }
    for (i = s; i < e; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t') return COAI_ERR_HTTP;
    rs->reason = coai__http_str(v + s, e - s);
    r = coai__http_fields(buf, n, &pos, 0, &st);
    rs->header_count = st.count;
    if (r == 0) goto more;
    if (r == 431) return COAI_ERR_TOO_BIG;
    if (r != 1) return COAI_ERR_HTTP;

    if (st.n_cl && (rs->content_length = coai__http_clen(st.cl, 1)) < 0) return COAI_ERR_HTTP;
    rs->keep_alive = rs->minor_version == 1 ? !(st.conn & 1) : st.conn == 2;
    if (st.n_te) {
        /* Only plain chunked: any other coding we could not decode anyway. */
        if (st.n_te > 1 || !coai__http_ieq(st.te.ptr, st.te.len, "chunked"))
            return COAI_ERR_HTTP;
        rs->chunked = 1;
        if (st.n_cl) {                      /* RFC 9112 6.3: chunked wins, then close */
            rs->content_length = -1;
            rs->keep_alive = 0;
        }
    }
    rs->no_body = rs->status < 200 || rs->status == 204 || rs->status == 304;
    if (rs->no_body) {
        rs->content_length = 0;
        rs->chunked = 0;
    } else if (!rs->chunked && rs->content_length < 0) {
        rs->keep_alive = 0;                 /* body runs until close */
    }
    if (st.n_ctype) rs->content_type = st.ctype;
    return (int)pos;
more:
    return len >= COAI_HTTP_MAX_HEAD ? COAI_ERR_TOO_BIG : COAI_MORE;
}

enum {
    COAI__CH_SIZE = 0,      /* hex digits of the chunk size */
    COAI__CH_SIZE_WS,       /* BWS after the digits */
    COAI__CH_EXT,           /* chunk extensions after ';' */
    COAI__CH_SIZE_LF,       /* CR seen at the end of the size line */
    COAI__CH_DATA,
    COAI__CH_DATA_CR,
    COAI__CH_DATA_LF,
    COAI__CH_TRAILER,       /* inside a trailer line (line_len bytes so far) */
    COAI__CH_TRAILER_LF,
    COAI__CH_DONE
};

static int coai__http_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (unsigned char)coai__http_lower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The size line ended: check limits and pick the next state. 0 or an error. */
static coai_result coai__http_chunk_start(coai_chunked_decoder *d)
{
    if (d->overhead >= COAI_HTTP_CHUNK_OVERHEAD_MIN && d->overhead > 4 * d->total)
        return COAI_ERR_HTTP;               /* over 80% framing: a 1-byte chunk flood */
    if (d->remaining == 0) {
        d->state = COAI__CH_TRAILER;
        d->line_len = 0;
        return COAI_OK;
    }
    if (d->remaining > UINT64_MAX - d->total ||
        (d->max_body && d->total + d->remaining > (uint64_t)d->max_body))
        return COAI_ERR_TOO_BIG;
    d->total += d->remaining;
    d->state = COAI__CH_DATA;
    return COAI_OK;
}

coai_result coai_chunked_feed(coai_chunked_decoder *d, char *buf, size_t len,
                              size_t *consumed, size_t *out_len)
{
    size_t i = 0, out = 0;
    coai_result r = COAI_OK;
    *consumed = 0;
    *out_len = 0;
    if (d->err) return (coai_result)d->err;
    if (d->state == COAI__CH_DONE) return COAI_DONE;
    while (i < len && r == COAI_OK) {
        unsigned char c = (unsigned char)buf[i];
        int h;
        if (d->state == COAI__CH_DATA) {
            size_t k = len - i;
            if ((uint64_t)k > d->remaining) k = (size_t)d->remaining;
            memmove(buf + out, buf + i, k);
            out += k;
            i += k;
            d->remaining -= k;
            if (d->remaining == 0) d->state = COAI__CH_DATA_CR;
            continue;
        }
        i++;
        d->overhead++;
        switch (d->state) {
        case COAI__CH_SIZE:
            h = coai__http_hexval(c);
            if (h >= 0) {
                if (d->digits == 16) { r = COAI_ERR_HTTP; break; }
                d->remaining = d->remaining << 4 | (uint64_t)h;
                d->digits++;
                d->line_len++;
                break;
            }
            if (d->digits == 0) { r = COAI_ERR_HTTP; break; }
            d->state = COAI__CH_SIZE_WS;
            /* The first byte after the digits is handled like BWS. */
            /* fall through */
        case COAI__CH_SIZE_WS:
        case COAI__CH_EXT:
            if (c == '\r') { d->state = COAI__CH_SIZE_LF; break; }
            if (d->line_len++ >= COAI_HTTP_MAX_CHUNK_LINE) { r = COAI_ERR_HTTP; break; }
            if (d->state == COAI__CH_EXT) {
                if ((c < 0x20 && c != '\t') || c == 0x7f) r = COAI_ERR_HTTP;
            } else if (c == ';') {
                d->state = COAI__CH_EXT;
            } else if (c != ' ' && c != '\t') {
                r = COAI_ERR_HTTP;          /* includes bare LF */
            }
            break;
        case COAI__CH_SIZE_LF:
            if (c != '\n') { r = COAI_ERR_HTTP; break; }
            d->line_len = 0;
            d->digits = 0;
            r = coai__http_chunk_start(d);
            break;
        case COAI__CH_DATA_CR:
            if (c != '\r') r = COAI_ERR_HTTP;   /* runaway chunk: more data than declared */
            else d->state = COAI__CH_DATA_LF;
            break;
        case COAI__CH_DATA_LF:
            if (c != '\n') { r = COAI_ERR_HTTP; break; }
            d->state = COAI__CH_SIZE;
            d->remaining = 0;
            break;
        case COAI__CH_TRAILER:
            if (++d->trailer_len > COAI_HTTP_MAX_HEAD) { r = COAI_ERR_HTTP; break; }
            if (c == '\r') d->state = COAI__CH_TRAILER_LF;
            else if ((c < 0x20 && c != '\t') || c == 0x7f) r = COAI_ERR_HTTP;
            else d->line_len++;
            break;
        case COAI__CH_TRAILER_LF:
            if (++d->trailer_len > COAI_HTTP_MAX_HEAD || c != '\n') { r = COAI_ERR_HTTP; break; }
            if (d->line_len == 0) { d->state = COAI__CH_DONE; r = COAI_DONE; break; }
            d->line_len = 0;
            d->state = COAI__CH_TRAILER;
            break;
        default:
            r = COAI_ERR_STATE;
        }
    }
    *consumed = i;
    *out_len = out;
    if (r < 0) {
        d->err = r;
        return r;
    }
    return r == COAI_DONE ? COAI_DONE : COAI_MORE;
}

int coai_http_host_allowed(coai_str host, const coai_str *extra, size_t n_extra, int port)
{
    static const char *const local[] = { "localhost", "127.0.0.1", "[::1]" };
    size_t name_len, i;
    if (!host.ptr || host.len == 0) return 0;
    if (host.ptr[0] == '[') {
        for (name_len = 1; name_len < host.len && host.ptr[name_len] != ']'; name_len++) {}
        if (name_len == host.len) return 0;
        name_len++;
    } else {
        for (name_len = 0; name_len < host.len && host.ptr[name_len] != ':'; name_len++) {}
    }
    if (name_len == 0) return 0;
    if (name_len < host.len) {
        long p = 0;
        size_t nd = host.len - name_len - 1;
        if (host.ptr[name_len] != ':' || nd == 0 || nd > 5) return 0;
        for (i = name_len + 1; i < host.len; i++) {
            if (host.ptr[i] < '0' || host.ptr[i] > '9') return 0;
            p = p * 10 + (host.ptr[i] - '0');
        }
        if (port > 0 && p != port) return 0;
    }
    for (i = 0; i < sizeof local / sizeof local[0]; i++)
        if (coai__http_ieq(host.ptr, name_len, local[i])) return 1;
    for (i = 0; i < n_extra; i++) {
        size_t j;
        if (!extra[i].ptr || extra[i].len != name_len) continue;
        for (j = 0; j < name_len; j++)
            if (coai__http_lower((unsigned char)extra[i].ptr[j]) !=
                coai__http_lower((unsigned char)host.ptr[j]))
                break;
        if (j == name_len) return 1;
    }
    return 0;
}

int coai_http_origin_allowed(coai_str origin, int port, const coai_str *extra, size_t n_extra)
{
    size_t k, i;
    if (!origin.ptr) return 0;
    if (origin.len > 7 && coai__http_ieq(origin.ptr, 7, "http://")) k = 7;
    else if (origin.len > 8 && coai__http_ieq(origin.ptr, 8, "https://")) k = 8;
    else return 0;                          /* includes "null" and "" */
    for (i = k; i < origin.len; i++)
        if (origin.ptr[i] == '/' || origin.ptr[i] == '?' || origin.ptr[i] == '#' ||
            origin.ptr[i] == '@')
            return 0;
    return coai_http_host_allowed(coai__http_str(origin.ptr + k, origin.len - k), extra,
                                  n_extra, port);
}

int coai_http_is_json(coai_str ct)
{
    size_t i;
    if (!ct.ptr) return 0;
    ct = coai__http_trim(ct);
    if (ct.len < 16 || !coai__http_ieq(ct.ptr, 16, "application/json")) return 0;
    i = 16;
    for (;;) {
        size_t ns, ne, vs, ve;
        while (i < ct.len && (ct.ptr[i] == ' ' || ct.ptr[i] == '\t')) i++;
        if (i == ct.len) return 1;
        if (ct.ptr[i] != ';') return 0;
        i++;
        while (i < ct.len && (ct.ptr[i] == ' ' || ct.ptr[i] == '\t')) i++;
        if (i == ct.len) return 1;          /* tolerate a trailing ';' */
        ns = i;
        while (i < ct.len && coai__http_tchar((unsigned char)ct.ptr[i])) i++;
        ne = i;
        if (ne == ns || i == ct.len || ct.ptr[i] != '=') return 0;
        vs = ++i;
        if (i < ct.len && ct.ptr[i] == '"') {
            vs = ++i;
            while (i < ct.len && ct.ptr[i] != '"') {
                if ((unsigned char)ct.ptr[i] < 0x20 && ct.ptr[i] != '\t') return 0;
                i += ct.ptr[i] == '\\' ? 2 : 1;
            }
            if (i >= ct.len) return 0;
            ve = i++;
        } else {
            while (i < ct.len && coai__http_tchar((unsigned char)ct.ptr[i])) i++;
            ve = i;
            if (ve == vs) return 0;
        }
        if (coai__http_ieq(ct.ptr + ns, ne - ns, "charset") &&
            !coai__http_ieq(ct.ptr + vs, ve - vs, "utf-8"))
            return 0;
    }
}

int coai_http_token_equal(coai_str a, coai_str b)
{
    unsigned char da[32], db[32];
    unsigned diff = 0;
    br_sha256_context c;
    size_t i;
    if (!a.ptr || !b.ptr || a.len == 0 || b.len == 0) return 0;
    br_sha256_init(&c);
    br_sha256_update(&c, a.ptr, a.len);
    br_sha256_out(&c, da);
    br_sha256_init(&c);
    br_sha256_update(&c, b.ptr, b.len);
    br_sha256_out(&c, db);
    for (i = 0; i < 32; i++) diff |= (unsigned)(da[i] ^ db[i]);
    return diff == 0;
}

coai_str coai_http_bearer(coai_str authorization)
{
    coai_str s;
    if (!authorization.ptr) return coai__http_none();
    s = coai__http_trim(authorization);
    if (s.len < 8 || !coai__http_ieq(s.ptr, 6, "bearer") || (s.ptr[6] != ' ' && s.ptr[6] != '\t'))
        return coai__http_none();
    s = coai__http_trim(coai__http_str(s.ptr + 7, s.len - 7));
    return s.len ? s : coai__http_none();
}
/* PART:HTTP impl end */

/* ======================================================================== */
/* PART:OPENAI impl                                                         */
/* ======================================================================== */
/* PART:OPENAI impl end */

#endif /* CURSOR_OAI_IMPLEMENTATION */
