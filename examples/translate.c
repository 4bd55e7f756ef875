/* translate.c - the cursor_oai.h API on one page, without sockets.
 *
 *   translate REQUEST.json UPSTREAM >client-body 2>upstream-bodies
 *
 * REQUEST.json is an OpenAI /v1/chat/completions body. UPSTREAM is what Cursor's RunSSE
 * answered: enveloped frames as they came over the wire (text_basic.upstream is one,
 * recorded by make_sample.py). The program prints
 *   stderr: the HTTP status and headers for the client, and every BidiAppend body the
 *           proxy POSTs upstream ("BidiAppend <seqno>: <hex>"): seqno 0 carries the run
 *           request, later ones the answers the upstream asked for (KV blobs here);
 *   stdout: the body the OpenAI client gets (SSE when "stream": true).
 * A real server (server.c) does the same with an HTTPS connection in place of the files.
 *
 * Build: see README.md (one C file plus the vendored header and its dependencies). */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"

#include <stdio.h>
#include <string.h>

/* Fixed ids, those of the recorded sample, so that the output can be compared with it.
 * A server makes fresh random v4 UUIDs (coai_uuid_format) for every run. */
#define REQUEST_ID "03030303-0303-4033-8033-030303030303"
#define MESSAGE_ID "04040404-0404-4044-8044-040404040404"
#define CONVERSATION_ID "05050505-0505-4055-8055-050505050505"
#define COMPLETION_ID "chatcmpl-020202020202402280220202"
#define CREATED 1768474032

static int read_file(const char *path, coai_buf *out)
{
    char chunk[4096];
    size_t n;
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) coai_buf_append(out, chunk, n);
    fclose(f);
    return out->err ? -1 : 0;
}

/* Every message for the upstream goes out as one BidiAppend POST with the next seqno.
 * Used directly for the run request, and by coai_reply as its opts.send callback. */
static int append(void *seqno, const unsigned char *msg, size_t n)
{
    coai_buf body = { 0 }, hex = { 0 };
    int64_t *seq = seqno;
    int rc = coai_encode_bidi_append(&body, msg, n, coai_str_c(REQUEST_ID), *seq);
    if (rc == 0) rc = coai_hex_append(&hex, body.data, body.len);
    if (rc == 0) fprintf(stderr, "BidiAppend %lld: %s\n", (long long)(*seq)++, (char *)hex.data);
    coai_buf_free(&body);
    coai_buf_free(&hex);
    return rc;
}

/* Send what the reply wrote: status and headers once they are final, then body bytes. */
static void flush(coai_reply *r, int *head_sent)
{
    if (!*head_sent && coai_reply_started(r)) {
        coai_buf head = { 0 };
        coai_reply_head(r, &head);
        fprintf(stderr, "HTTP %d\n%s", coai_reply_status(r), head.len ? (char *)head.data : "");
        coai_buf_free(&head);
        *head_sent = 1;
    }
    if (r->out.len) fwrite(r->out.data, 1, r->out.len, stdout);
    coai_buf_reset(&r->out);
}

int main(int argc, char **argv)
{
    coai_buf json = { 0 }, wire = { 0 }, run = { 0 };
    coai_chat_request req;
    coai_error err;
    coai_run_params p;
    coai_reply_opts o;
    coai_reply r;
    coai_frame_decoder dec;
    coai_msg m;
    int64_t seqno = 0;
    size_t off = 0;
    int rc = COAI_OK, head_sent = 0;

    memset(&req, 0, sizeof req);
    memset(&r, 0, sizeof r);
    memset(&dec, 0, sizeof dec);
    memset(&m, 0, sizeof m);
    if (argc != 3) {
        fprintf(stderr, "usage: %s REQUEST.json UPSTREAM\n", argv[0]);
        return 2;
    }
    if (read_file(argv[1], &json) < 0 || read_file(argv[2], &wire) < 0) return 1;

    /* 1. Validate the OpenAI request and flatten the conversation into one prompt. A bad
     *    request gets a 400 with an OpenAI error body. */
    if (coai_chat_request_parse(&req, (const char *)json.data, json.len, &err) < 0) {
        coai_buf e = { 0 };
        coai_error_write(&e, &err);
        fprintf(stderr, "HTTP %d\n", err.status);
        printf("%s\n", e.len ? (char *)e.data : "");
        coai_buf_free(&e);
        rc = 1;
        goto out;
    }

    /* 2. The run request (AgentClientMessage.run_request), BidiAppend seqno 0. A server
     *    first POSTs RunSSE with coai_encode_run_body() and reads its answer meanwhile. */
    memset(&p, 0, sizeof p);
    coai_chat_request_params(&req, &p);           /* prompt and tools */
    p.model_id = req.model;                       /* a server: coai_models_resolve() */
    p.message_id = coai_str_c(MESSAGE_ID);
    p.conversation_id = coai_str_c(CONVERSATION_ID);
    p.workspace = coai_str_c("/home/user/project");
    p.time_zone = coai_str_c("UTC");
    if (coai_encode_run_request(&run, &p) < 0 || append(&seqno, run.data, run.len) < 0) {
        rc = 1;
        goto out;
    }

    /* 3. The reply: one coai_reply turns upstream events into the client's response. */
    memset(&o, 0, sizeof o);
    coai_reply_opts_from_request(&o, &req);       /* stream, tools, usage, prompt */
    o.completion_id = coai_str_c(COMPLETION_ID);
    o.created = CREATED;
    o.model = p.model_id;
    if (!o.session_id.len) o.session_id = coai_str_c("0123456789ab");
    o.env = &p;                                   /* answers request-context execs */
    o.send = append;                              /* KV results, exec refusals ... */
    o.send_user = &seqno;
    if (coai_reply_init(&r, &o) < 0) {
        rc = 1;
        goto out;
    }

    /* 4. Upstream bytes -> frames -> messages -> client bytes, until the reply is done. */
    for (;;) {
        coai_frame f;
        size_t used = 0;
        int at_end = 0;
        coai_result fr = coai_frame_feed(&dec, wire.data + off, wire.len - off, &used, &f);
        off += used;
        if (fr == COAI_MORE) {                    /* all input read: the body ended */
            at_end = 1;
            fr = coai_frame_finish(&dec);         /* COAI_OK at a frame boundary */
            if (fr == COAI_OK) rc = coai_reply_feed_eof(&r);
        } else if (fr == COAI_OK && f.flags == COAI_FRAME_DATA) {
            fr = coai_msg_decode(&m, f.data, f.len);
            if (fr == COAI_OK) rc = coai_reply_feed_msg(&r, &m);
        } else if (fr == COAI_OK) {               /* gRPC-web trailer / Connect end-stream */
            coai_status st;
            if (f.flags == COAI_FRAME_TRAILER) coai_trailer_parse(f.data, f.len, &st);
            else coai_end_stream_parse(f.data, f.len, &st);
            rc = coai_reply_feed_status(&r, &st);
        }
        if (fr < 0) {                             /* garbage from upstream: a 502 */
            coai_error_set(&err, 502, "upstream_error", "upstream_error", NULL,
                           "bad upstream stream: %s", coai_result_str(fr));
            rc = coai_reply_feed_error(&r, &err);
        }
        flush(&r, &head_sent);
        if (rc != COAI_OK || at_end) break;
    }
    rc = rc == COAI_DONE ? 0 : 1;

out:
    coai_reply_free(&r);
    coai_msg_free(&m);
    coai_frame_decoder_free(&dec);
    coai_chat_request_free(&req);
    coai_buf_free(&json);
    coai_buf_free(&wire);
    coai_buf_free(&run);
    return rc;
}
