/* fz_results.c - any bytes as a client's tool result (coai_exec_outcome_parse) for every
 * exec kind (a delete's size too), through every tool whose layout is read out (and the
 * trap flag), then encoded (coai_encode_exec_outcome, every step). The first byte picks
 * kind, tool and is_error; the rest is the result text. The views must lie inside the text or the rebuilt buffer, a
 * rebuilt text is never longer than the input, and every encoded message must walk as
 * protobuf. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include <stdlib.h>
#include <string.h>

static int inside(coai_str v, const char *p, size_t n, const coai_buf *own)
{
    if (!v.len) return 1;
    if (v.ptr >= p && v.ptr + v.len <= p + n) return 1;
    return own->data && v.ptr >= (const char *)own->data
           && v.ptr + v.len <= (const char *)own->data + own->len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const tools[] = { "exec_command", "shell", "apply_patch",
                                         "run_shell_command", "Bash", "bash", "Read", "read",
                                         "read_file", "other" };
    static const int kinds[] = { COAI_EXEC_SHELL, COAI_EXEC_SHELL_STREAM, COAI_EXEC_READ,
                                 COAI_EXEC_WRITE, COAI_EXEC_LS, COAI_EXEC_GREP, COAI_EXEC_MCP,
                                 COAI_EXEC_DELETE };
    coai_exec_outcome o;
    coai_exec_ref x;
    coai_buf b = { 0 };
    const char *text;
    size_t n;
    unsigned step, sel;
    int rc;
    if (size < 1) return 0;
    sel = data[0];
    text = (const char *)data + 1;
    n = size - 1;
    memset(&o, 0, sizeof o);
    memset(&x, 0, sizeof x);
    x.kind = kinds[sel % 8];
    x.id = 3;
    x.exec_id = coai_str_c("e3");
    x.path = coai_str_c("/w/notes.txt");
    x.command = coai_str_c("ls");
    x.exit_trap = (sel >> 7) & 1;
    {
        coai_str t;
        t.ptr = text;
        t.len = n;
        if (coai_exec_outcome_parse(&o, &x, coai_str_c(tools[(sel / 8) % 10]), t,
                                    (sel >> 6) & 1) != 0)
            abort();
    }
    if (!o.shape || !inside(o.out, text, n, &o.own_) || !inside(o.err, text, n, &o.own_)
        || o.own_.len > n + 1)
        abort();
    /* a delete's size: only from a success's output, never negative or past 2^53 */
    if (o.has_size && (x.kind != COAI_EXEC_DELETE || o.is_error || o.file_size < 0
                       || o.file_size > (int64_t)1 << 53 || !o.out.len))
        abort();
    for (step = 0; step < 8; step++) {
        coai_buf_reset(&b);
        rc = coai_encode_exec_outcome(&b, &x, &o, NULL, 0, 1, step);
        if (rc == COAI_DONE) break;
        if (rc != COAI_OK || b.err || !b.len) abort();
    }
    if (step == 8) abort();
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
    return 0;
}
