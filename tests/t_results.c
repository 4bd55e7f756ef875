/* tests/t_results.c - tool results as Cursor's CLI reports them: each client's result
 * layout (recorded from the real programs: Codex 0.169.0, Claude Code 2.1.331, Qwen Code
 * 0.24.4, Kilo Code 7.7.7, OpenCode 1.18.33, with tests/e2e/clients.py's Recorder) read by
 * coai_exec_outcome_parse and sent by coai_encode_exec_outcome; what must stay untouched. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include "cJSON.h"
#include "pbwalk.h"

/* The last field num of a message (0 if absent). */
static int find(const uint8_t *p, size_t n, uint32_t num, pbw_field *out)
{
    size_t pos = 0;
    pbw_field f;
    int found = 0, r;
    while ((r = pbw_next(p, n, &pos, &f)) == 1)
        if (f.num == num) { *out = f; found = 1; }
    return r == 0 && found;
}

/* Follow a path of field numbers (length-delimited each but the last). */
static int path(const uint8_t *p, size_t n, const uint32_t *nums, size_t k, pbw_field *out)
{
    size_t i;
    pbw_field f;
    for (i = 0; i < k; i++) {
        if (!find(p, n, nums[i], &f)) return 0;
        p = f.p;
        n = f.n;
    }
    *out = f;
    return 1;
}

static int str_is(const pbw_field *f, const char *s)
{
    return f->wire == 2 && f->n == strlen(s) && memcmp(f->p, s, f->n) == 0;
}

static coai_exec_ref ref(int kind, const char *p, const char *cmd)
{
    coai_exec_ref x;
    memset(&x, 0, sizeof x);
    x.kind = kind;
    x.id = 4;
    x.exec_id = coai_str_c("e4");
    x.path = coai_str_c(p);
    x.command = coai_str_c(cmd);
    x.cwd = coai_str_c("/WORKSPACE");
    return x;
}

static int out_is(const coai_exec_outcome *o, const char *s)
{
    return o->out.len == strlen(s) && memcmp(o->out.ptr, s, o->out.len) == 0;
}

/* parse + encode step 0; returns the encoded bytes in b */
static void run(coai_buf *b, coai_exec_outcome *o, const coai_exec_ref *x, const char *tool,
                const char *text, int is_error, unsigned step)
{
    coai_buf_reset(b);
    CHECK(coai_exec_outcome_parse(o, x, coai_str_c(tool), coai_str_c(text), is_error) == 0);
    CHECK(coai_encode_exec_outcome(b, x, o, NULL, 0, 5, step) == COAI_OK && !b->err);
    CHECK(pbw_walk(b->data, b->len));
}

static const char CODEX_CAT[] =
    "Chunk ID: 1035b1\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
    "Original token count: 6\nOutput:\nfirst line\nsecond line\n";
static const char CODEX_FAIL[] =
    "Chunk ID: 07b0b2\nWall time: 0.0000 seconds\nProcess exited with code 3\n"
    "Original token count: 2\nOutput:\nout\nerr\n";
static const char QWEN_FAIL[] =
    "Command: echo out; echo err >&2; exit 3\nDirectory: (root)\nOutput: out\nerr\n"
    "Error: (none)\nExit Code: 3\nSignal: (none)\nProcess Group PGID: (none)";
static const char QWEN_OK[] =
    "Command: echo hello\nDirectory: (root)\nOutput: hello\nError: (none)\nExit Code: 0\n"
    "Signal: (none)\nProcess Group PGID: (none)";
static const char KILO_READ[] =
    "<path>/WORKSPACE/notes.txt</path>\n<type>file</type>\n<content>\n1: first line\n"
    "2: second line\n\n(End of file - total 2 lines)\n</content>";
static const char CLAUDE_READ[] = "1\tfirst line\n2\tsecond line\n3\t";

static const uint32_t READ_OK[] = { 2, 7, 1 };      /* exec_client_message.read_result.success */
static const uint32_t READ_ERR[] = { 2, 7, 2 };
static const uint32_t SHELL_OK[] = { 2, 2, 1 };
static const uint32_t SHELL_FAIL[] = { 2, 2, 2 };

static void check_read(coai_buf *b, const char *content, uint64_t lines, uint64_t size,
                       const char *what)
{
    pbw_field s, f;
    CHECKF(path(b->data, b->len, READ_OK, 3, &s), "%s: read success", what);
    if (!path(b->data, b->len, READ_OK, 3, &s)) return;
    CHECKF(*content ? find(s.p, s.n, 2, &f) && str_is(&f, content) : !find(s.p, s.n, 2, &f),
           "%s: content", what);
    CHECKF(lines ? find(s.p, s.n, 3, &f) && f.v == lines : !find(s.p, s.n, 3, &f),
           "%s: total_lines %llu", what, (unsigned long long)lines);
    CHECKF(size ? find(s.p, s.n, 4, &f) && f.v == size : !find(s.p, s.n, 4, &f),
           "%s: file_size %llu", what, (unsigned long long)size);
}

static void test_codex(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_READ, "/WORKSPACE/notes.txt", "");
    pbw_field s, f;
    memset(&o, 0, sizeof o);
    /* a read mapped onto exec_command (cat): the header is not file content */
    run(&b, &o, &x, "exec_command", CODEX_CAT, 0, 0);
    CHECK(!strcmp(o.shape, "codex-exec") && o.has_exit && o.exit_code == 0);
    check_read(&b, "first line\nsecond line\n", 2, 23, "codex cat");
    /* ... and a cat that fails is a read error */
    run(&b, &o, &x, "exec_command",
        "Wall time: 0.0012 seconds\nProcess exited with code 1\nOutput:\n"
        "cat: nope: No such file or directory\n", 0, 0);
    CHECK(path(b.data, b.len, READ_ERR, 3, &s) && find(s.p, s.n, 2, &f)
          && str_is(&f, "cat: nope: No such file or directory\n"));
    /* a shell: the real exit code, failure variant, output as stdout */
    x = ref(COAI_EXEC_SHELL, "", "echo out; echo err >&2; exit 3");
    run(&b, &o, &x, "exec_command", CODEX_FAIL, 0, 0);
    CHECK(path(b.data, b.len, SHELL_FAIL, 3, &s));
    CHECK(find(s.p, s.n, 3, &f) && f.v == 3);
    CHECK(find(s.p, s.n, 5, &f) && str_is(&f, "out\nerr\n"));
    CHECK(find(s.p, s.n, 1, &f) && str_is(&f, "echo out; echo err >&2; exit 3"));
    /* shell_stream: start, stdout, exit{3}, stream_close */
    x.kind = COAI_EXEC_SHELL_STREAM;
    run(&b, &o, &x, "exec_command", CODEX_FAIL, 0, 1);
    {
        static const uint32_t so[] = { 2, 14, 1, 1 }, ex[] = { 2, 14, 3, 1 };
        CHECK(path(b.data, b.len, so, 4, &f) && str_is(&f, "out\nerr\n"));
        run(&b, &o, &x, "exec_command", CODEX_FAIL, 0, 2);
        CHECK(path(b.data, b.len, ex, 4, &f) && f.v == 3);
        run(&b, &o, &x, "exec_command", CODEX_FAIL, 0, 3);
        CHECK(b.len && b.data[0] == 0x2a);                  /* stream_close */
    }
    /* a running session: no exit code, the output */
    x.kind = COAI_EXEC_SHELL;
    run(&b, &o, &x, "exec_command", "Chunk ID: ab\nWall time: 10.0021 seconds\n"
        "Process running with session ID 7\nOriginal token count: 1\nOutput:\nx\n", 0, 0);
    CHECK(!o.has_exit && out_is(&o, "x\n") && path(b.data, b.len, SHELL_OK, 3, &s));
    /* the older shell layout and apply_patch's */
    run(&b, &o, &x, "shell", "Exit code: 2\nWall time: 0.1 seconds\nOutput:\nno\n", 0, 0);
    CHECK(o.has_exit && o.exit_code == 2 && out_is(&o, "no\n"));
    x = ref(COAI_EXEC_WRITE, "/WORKSPACE/n.txt", "");
    x.write_lines = 2;
    x.write_size = 4;
    run(&b, &o, &x, "apply_patch", "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. "
        "Updated the following files:\nA n.txt\n", 0, 0);
    {
        static const uint32_t w[] = { 2, 3, 1 };
        CHECK(path(b.data, b.len, w, 3, &s) && find(s.p, s.n, 2, &f) && f.v == 2
              && find(s.p, s.n, 3, &f) && f.v == 4);
    }
    /* strict: a header out of order, a missing line, another tool: untouched */
    x = ref(COAI_EXEC_SHELL, "", "cat f");
    run(&b, &o, &x, "exec_command", "Wall time: 0.0 seconds\nOutput:\nx\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw") && out_is(&o, "Wall time: 0.0 seconds\nOutput:\nx\n"));
    run(&b, &o, &x, "exec_command", "Process exited with code 3\nWall time: 0.0 seconds\n"
        "Output:\nx\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw") && !o.has_exit);
    run(&b, &o, &x, "bash", CODEX_FAIL, 0, 0);
    CHECK(!strcmp(o.shape, "raw") && path(b.data, b.len, SHELL_OK, 3, &s));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

static void test_claude(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_READ, "/WORKSPACE/notes.txt", "");
    pbw_field s, f;
    memset(&o, 0, sizeof o);
    run(&b, &o, &x, "Read", CLAUDE_READ, 0, 0);
    CHECK(!strcmp(o.shape, "claude-read"));
    check_read(&b, "first line\nsecond line\n", 2, 23, "claude read");
    run(&b, &o, &x, "Read", "     1\tno newline\n     2\tat the end", 0, 0);
    check_read(&b, "no newline\nat the end", 2, 21, "claude padded read");
    run(&b, &o, &x, "Read", "     1\xe2\x86\x92" "arrow\n     2\xe2\x86\x92", 0, 0);
    check_read(&b, "arrow\n", 1, 6, "claude arrow read");
    run(&b, &o, &x, "Read", "1\tone\n2\ttwo\n\n<system-reminder>\nWhenever you read a file, "
        "consider whether it is malware.\n</system-reminder>\n", 0, 0);
    check_read(&b, "one\ntwo", 2, 7, "claude read + reminder");
    /* through cursor-oai, Claude Code 2.1.331 appends its token reminder and trims the
     * last line's tab (recorded by tests/agents_test.py) */
    run(&b, &o, &x, "Read", "1\talpha line x\n2\tbeta: two\n3\n\n<system-reminder>\n"
        "<total_tokens>14989863 tokens left</total_tokens>\n</system-reminder>", 0, 0);
    check_read(&b, "alpha line x\nbeta: two\n", 2, 23, "claude read + token reminder");
    run(&b, &o, &x, "Read", "1\ta\n2", 0, 0);
    check_read(&b, "a\n", 1, 2, "claude read, bare last number");
    run(&b, &o, &x, "Read", "1", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "Read", "<system-reminder>Warning: the file exists but the contents are "
        "empty.</system-reminder>", 0, 0);
    check_read(&b, "", 0, 0, "claude empty file");
    /* not the view: numbers not from 1, a gap, mixed separators, no separator */
    run(&b, &o, &x, "Read", "2\ta\n3\tb\n", 0, 0);
    check_read(&b, "2\ta\n3\tb\n", 2, 8, "numbers from 2");
    run(&b, &o, &x, "Read", "1\ta\n3\tb\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "Read", "1\ta\n2\xe2\x86\x92" "b\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "Read", "1 a\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    /* a read_file tool's bytes are never a line-number view */
    run(&b, &o, &x, "read_file", CLAUDE_READ, 0, 0);
    check_read(&b, CLAUDE_READ, 3, 29, "read_file keeps its bytes");
    /* an error result stays an error */
    run(&b, &o, &x, "Read", "File does not exist. Note: your current working directory is "
        "/WORKSPACE.", 1, 0);
    CHECK(path(b.data, b.len, READ_ERR, 3, &s));
    /* Bash: the error result carries the exit code */
    x = ref(COAI_EXEC_SHELL, "", "echo out; echo err >&2; exit 3");
    run(&b, &o, &x, "Bash", "Exit code 3\nout\nerr", 1, 0);
    CHECK(o.has_exit && o.exit_code == 3 && out_is(&o, "out\nerr"));
    CHECK(path(b.data, b.len, SHELL_FAIL, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 3
          && find(s.p, s.n, 5, &f) && str_is(&f, "out\nerr") && !find(s.p, s.n, 6, &f));
    run(&b, &o, &x, "Bash", "Exit code 3\nout\n\n<system-reminder>\n<total_tokens>9 tokens "
        "left</total_tokens>\n</system-reminder>", 1, 0);
    CHECK(o.exit_code == 3 && out_is(&o, "out"));
    run(&b, &o, &x, "Bash", "hello-x\n\n<system-reminder>\n<total_tokens>14989867 tokens left"
        "</total_tokens>\n</system-reminder>", 0, 0);
    CHECK(!strcmp(o.shape, "claude-bash") && out_is(&o, "hello-x") && !o.has_exit
          && path(b.data, b.len, SHELL_OK, 3, &s) && find(s.p, s.n, 5, &f)
          && str_is(&f, "hello-x"));
    run(&b, &o, &x, "Bash", "Exit code 127", 1, 0);
    CHECK(o.has_exit && o.exit_code == 127 && o.out.len == 0);
    run(&b, &o, &x, "Bash", "hello", 0, 0);
    CHECK(!strcmp(o.shape, "raw") && path(b.data, b.len, SHELL_OK, 3, &s)
          && find(s.p, s.n, 5, &f) && str_is(&f, "hello"));
    /* an error without the code: a failure with exit 1 and the text as stderr */
    run(&b, &o, &x, "Bash", "Command timed out after 2m 0.0s", 1, 0);
    CHECK(!strcmp(o.shape, "raw") && path(b.data, b.len, SHELL_FAIL, 3, &s)
          && find(s.p, s.n, 3, &f) && f.v == 1 && find(s.p, s.n, 6, &f));
    /* a first line naming the code counts in a success result too (the generic rule: any
     * client's first or last line "Exit code N"); a line in the middle does not */
    run(&b, &o, &x, "Bash", "Exit code 3\nx", 0, 0);
    CHECK(!strcmp(o.shape, "exit-line") && o.has_exit && o.exit_code == 3 && out_is(&o, "x"));
    run(&b, &o, &x, "Bash", "a\nExit code 3\nx", 0, 0);
    CHECK(!strcmp(o.shape, "raw") && !o.has_exit);
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

static void test_qwen(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_SHELL, "", "echo out; echo err >&2; exit 3");
    pbw_field s, f;
    memset(&o, 0, sizeof o);
    run(&b, &o, &x, "run_shell_command", QWEN_FAIL, 0, 0);
    CHECK(!strcmp(o.shape, "qwen-shell") && o.has_exit && o.exit_code == 3);
    CHECK(path(b.data, b.len, SHELL_FAIL, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 3
          && find(s.p, s.n, 5, &f) && str_is(&f, "out\nerr"));
    run(&b, &o, &x, "run_shell_command", QWEN_OK, 0, 0);
    CHECK(o.exit_code == 0 && out_is(&o, "hello") && path(b.data, b.len, SHELL_OK, 3, &s));
    run(&b, &o, &x, "run_shell_command", "Command: true\nDirectory: (root)\nOutput: (empty)\n"
        "Error: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: 12\n\nnote", 0, 0);
    CHECK(o.has_exit && o.out.len == 0);
    /* a multi-line command, output with an "Error: " line of its own */
    run(&b, &o, &x, "run_shell_command", "Command: a\nb\nDirectory: sub\nOutput: Error: x\ny\n"
        "Error: (none)\nExit Code: 1\nSignal: (none)\nProcess Group PGID: (none)", 0, 0);
    CHECK(o.exit_code == 1 && out_is(&o, "Error: x\ny"));
    /* killed by a signal: no code */
    run(&b, &o, &x, "run_shell_command", "Command: a\nDirectory: (root)\nOutput: (empty)\n"
        "Error: (none)\nExit Code: (none)\nSignal: 9\nProcess Group PGID: (none)", 0, 0);
    CHECK(!strcmp(o.shape, "qwen-shell") && !o.has_exit);
    /* a timeout message and half a layout: untouched */
    run(&b, &o, &x, "run_shell_command", "Command timed out after 5ms before it could complete."
        " There was no output before it timed out.", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "run_shell_command", "Command: a\nDirectory: (root)\nOutput: x\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    /* a read through read_file: its bytes as they are; its not-found text is an error */
    x = ref(COAI_EXEC_READ, "/WORKSPACE/notes.txt", "");
    run(&b, &o, &x, "read_file", "first line\nsecond line\n", 0, 0);
    check_read(&b, "first line\nsecond line\n", 2, 23, "qwen read");
    run(&b, &o, &x, "read_file", "File not found: /WORKSPACE/notes.txt", 0, 0);
    CHECK(o.is_error && path(b.data, b.len, READ_ERR, 3, &s) && find(s.p, s.n, 2, &f)
          && str_is(&f, "File not found: /WORKSPACE/notes.txt"));
    run(&b, &o, &x, "read_file", "File not found: /WORKSPACE/other.txt", 0, 0);
    check_read(&b, "File not found: /WORKSPACE/other.txt", 1, 36, "another path: content");
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

static void test_opencode_kilo(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_READ, "/WORKSPACE/notes.txt", "");
    pbw_field s, f;
    memset(&o, 0, sizeof o);
    run(&b, &o, &x, "read", KILO_READ, 0, 0);
    CHECK(!strcmp(o.shape, "opencode-read") && o.has_total && o.total_lines == 2);
    check_read(&b, "first line\nsecond line\n", 2, 23, "kilo read");
    run(&b, &o, &x, "read", "<path>/WORKSPACE/e</path>\n<type>file</type>\n<content>\n\n\n"
        "(End of file - total 0 lines)\n</content>", 0, 0);
    CHECK(!strcmp(o.shape, "opencode-read"));
    check_read(&b, "", 0, 0, "empty file");
    run(&b, &o, &x, "read", "<path>/w/a</path>\n<type>file</type>\n<content>\n1: \n2: 5: x\n\n"
        "(Showing lines 1-2 of 9. Use offset=3 to continue.)\n</content>", 0, 0);
    CHECK(o.truncated && o.total_lines == 9 && out_is(&o, "\n5: x\n"));
    CHECK(path(b.data, b.len, READ_OK, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 9
          && find(s.p, s.n, 6, &f) && f.v == 1);
    /* strict: a wrong number, a missing footer, a directory listing */
    run(&b, &o, &x, "read", "<path>/w/a</path>\n<type>file</type>\n<content>\n2: a\n\n"
        "(End of file - total 1 lines)\n</content>", 0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "read", "<path>/w/a</path>\n<type>file</type>\n<content>\n1: a\n</content>",
        0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    run(&b, &o, &x, "read", "<path>/w</path>\n<type>directory</type>\n<entries>\na\n</entries>",
        0, 0);
    CHECK(!strcmp(o.shape, "raw"));
    /* a file that starts with "Output:" read by a read tool stays as it is */
    run(&b, &o, &x, "read", "Output:\nx\n", 0, 0);
    check_read(&b, "Output:\nx\n", 2, 10, "Output: file");
    run(&b, &o, &x, "read", "File not found: /WORKSPACE/notes.txt", 0, 0);
    CHECK(o.is_error);
    /* bash: OpenCode and Kilo Code report no exit code: the output, success */
    x = ref(COAI_EXEC_SHELL, "", "echo out; echo err >&2; exit 3");
    run(&b, &o, &x, "bash", "out\nerr\n", 0, 0);
    CHECK(!strcmp(o.shape, "raw") && !o.has_exit && path(b.data, b.len, SHELL_OK, 3, &s));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* The raw path is what coai_encode_exec_answer always wrote. */
static void test_raw_same(void)
{
    static const int kinds[] = { COAI_EXEC_SHELL, COAI_EXEC_SHELL_STREAM, COAI_EXEC_READ,
                                 COAI_EXEC_LS, COAI_EXEC_GREP, COAI_EXEC_MCP };
    coai_buf a = { 0 }, b = { 0 };
    coai_exec_outcome o;
    size_t i;
    unsigned step;
    int e, ra, rb;
    memset(&o, 0, sizeof o);
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        for (e = 0; e < 2; e++)
            for (step = 0; step < 6; step++) {
                coai_exec_ref x = ref(kinds[i], "/w/f", "ls");
                coai_buf_reset(&a);
                coai_buf_reset(&b);
                ra = coai_encode_exec_answer(&a, &x, coai_str_c("a\nb\n"), e, 3, step);
                coai_exec_outcome_parse(&o, &x, coai_str_c("some_tool"), coai_str_c("a\nb\n"), e);
                rb = coai_encode_exec_outcome(&b, &x, &o, NULL, 0, 3, step);
                CHECKF(ra == rb && a.len == b.len && !memcmp(a.data, b.data, a.len),
                       "kind %d error %d step %u", kinds[i], e, step);
            }
    coai_exec_outcome_free(&o);
    coai_buf_free(&a);
    coai_buf_free(&b);
}

/* An MCP exec (the caller-owned mode: Cursor's model called the client's tool by its own
 * name) gets the client's text as it is, whatever the tool is called: a shell tool's exit
 * code line stays in the text, is_error as the client said. */
static void test_mcp_untranslated(void)
{
    static const struct { const char *tool, *text; int is_error; } v[] = {
        { "exec_command", "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 3\n"
          "Output:\nout-x\nerr-x\n", 0 },
        { "shell", "{\"output\":\"x\",\"metadata\":{\"exit_code\":3}}", 0 },
        { "run_shell_command", "Command: false\nDirectory: (root)\nOutput: (empty)\n"
          "Error: (none)\nExit Code: 3\n", 1 },
        { "anything", "out\nexit code: 3\n", 1 },
    };
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_MCP, "", "");
    size_t i;
    memset(&o, 0, sizeof o);
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        coai_str got;
        run(&b, &o, &x, v[i].tool, v[i].text, v[i].is_error, 0);
        got = o.is_error && o.err.len ? o.err : o.out;
        CHECKF(o.is_error == v[i].is_error && !o.has_exit && got.len == strlen(v[i].text)
               && !memcmp(got.ptr, v[i].text, got.len), "%zu %s: error %d text '%.*s'", i,
               v[i].tool, o.is_error, (int)got.len, got.ptr);
    }
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* A file read done through the client's shell tool (Copilot's view not taken): the shell's
 * trailing code line is not file content; the file's own last newline stays. */
static void test_read_via_shell(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_READ, "/w/a.txt", "");
    memset(&o, 0, sizeof o);
    x.via_shell = 1;
    run(&b, &o, &x, "bash", "alpha\nbeta\n<shellId: 0 completed with exit code 0>", 0, 0);
    CHECKF(!o.is_error && out_is(&o, "alpha\nbeta\n"), "'%.*s'", (int)o.out.len, o.out.ptr);
    run(&b, &o, &x, "bash", "cat: /w/a.txt: No such file\n<shellId: 0 completed with exit "
        "code 1>", 0, 0);
    CHECK(o.is_error && o.has_exit && o.exit_code == 1);
    x.via_shell = 0;                       /* a read tool's content is never cut */
    run(&b, &o, &x, "view", "alpha\nexit code: 0\n", 0, 0);
    CHECK(out_is(&o, "alpha\nexit code: 0\n"));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* Cline's layout: the result a JSON array of one {"query", "result", "success"} object. */
static void test_json_array(void)
{
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_SHELL, "", "echo hi");
    memset(&o, 0, sizeof o);
    run(&b, &o, &x, "run_commands",
        "[{\"query\":\"echo hi\",\"result\":\"hi\\n\",\"success\":true}]", 0, 0);
    CHECKF(!o.is_error && out_is(&o, "hi\n"), "success: '%.*s'", (int)o.out.len, o.out.ptr);
    run(&b, &o, &x, "run_commands", "[{\"query\":\"x\",\"result\":\"[Command exited with "
        "code 3]\\nout\\n\\n[stderr]\\nerr\\n\",\"success\":false}]", 0, 0);
    CHECKF(o.is_error && o.has_exit && o.exit_code == 3, "fail: error %d code %d", o.is_error,
           o.exit_code);
    x = ref(COAI_EXEC_READ, "/w/a.txt", "");
    run(&b, &o, &x, "read_files",
        "[{\"query\":\"/w/a.txt\",\"result\":\"alpha\\nbeta\\n\",\"success\":true}]", 0, 0);
    CHECKF(!o.is_error && out_is(&o, "alpha\nbeta\n"), "read: '%.*s'", (int)o.out.len,
           o.out.ptr);
    /* two elements, or no "result": the text as it is */
    run(&b, &o, &x, "read_files", "[{\"result\":\"a\"},{\"result\":\"b\"}]", 0, 0);
    CHECK(out_is(&o, "[{\"result\":\"a\"},{\"result\":\"b\"}]"));
    run(&b, &o, &x, "read_files", "[1, 2]\n", 0, 0);
    CHECK(out_is(&o, "[1, 2]\n"));
    /* an MCP result stays as the client wrote it */
    x = ref(COAI_EXEC_MCP, "", "");
    run(&b, &o, &x, "run_commands", "[{\"result\":\"a\"}]", 0, 0);
    CHECK(out_is(&o, "[{\"result\":\"a\"}]"));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

static int send_nothing(void *u, const unsigned char *m, size_t n)
{
    (void)u; (void)m; (void)n;
    return 0;
}

/* A reply in dialect d whose client offers the one tool t, and an exec message m to feed it */
static void reply_with_tool(coai_reply *r, coai_reply_opts *op, const coai_tool *t,
                            coai_dialect d, coai_msg *m)
{
    memset(op, 0, sizeof *op);
    op->dialect = d;
    op->completion_id = coai_str_c("chatcmpl-1");
    op->model = coai_str_c("m");
    op->tools = t;
    op->tool_count = 1;
    op->session_id = coai_str_c("030303030303");
    op->send = send_nothing;
    coai_reply_init(r, op);
    memset(m, 0, sizeof *m);
    m->kind = COAI_MSG_EXEC;
}

/* The bash tool of an OpenAI-chat client (OpenCode, Kilo Code: no exit code in the result)
 * runs Cursor's command under COAI_EXIT_TRAP; the result's last line gives the code. */
static void test_exit_trap(void)
{
    static const char *const names[] = { "bash", "Bash", "run_shell_command" };
    static const coai_dialect dl[] = { COAI_DIALECT_OPENAI_CHAT, COAI_DIALECT_ANTHROPIC };
    /* d: 0 chat, 1 anthropic, 2 chat with a bash that has no workdir */
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x;
    pbw_field s, f;
    size_t i, d;
    /* OpenCode's bash schema (1.18.33), as its requests carry it */
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                             "\"string\"},\"timeout\":{\"type\":\"number\"},\"workdir\":"
                             "{\"type\":\"string\"},\"description\":{\"type\":\"string\"}},"
                             "\"required\":[\"command\",\"description\"]}");
    memset(&o, 0, sizeof o);
    for (d = 0; d < 3; d++)
        for (i = 0; i < 3; i++) {
            coai_reply r;
            coai_reply_opts op;
            coai_tool t;
            coai_msg m;
            const coai_reply_call *calls;
            cJSON *args, *cmd;
            int want = d == 0 && i < 2;
            memset(&t, 0, sizeof t);
            t.name = coai_str_c(names[i]);
            t.parameters = sch;
            if (d == 2) t.parameters = NULL;    /* a bash without workdir: no trap */
            reply_with_tool(&r, &op, &t, dl[d == 2 ? 0 : d], &m);
            m.exec.kind = COAI_EXEC_SHELL_STREAM;
            m.exec.id = 2;
            m.exec.command = coai_str_c("echo 'a b'; exit 3");
            coai_reply_feed_msg(&r, &m);
            CHECKF(coai_reply_calls(&r, &calls) == 1, "%s dialect %d", names[i], (int)d);
            if (coai_reply_calls(&r, &calls) != 1) { coai_reply_free(&r); continue; }
            args = cJSON_ParseWithLength(calls[0].args.ptr, calls[0].args.len);
            cmd = cJSON_GetObjectItemCaseSensitive(args, "command");
            CHECKF(cJSON_IsString(cmd) && !strcmp(cmd->valuestring, want
                   ? COAI_EXIT_TRAP "\necho 'a b'; exit 3" : "echo 'a b'; exit 3"),
                   "%s dialect %d: %s", names[i], (int)d,
                   cJSON_IsString(cmd) ? cmd->valuestring : "?");
            CHECKF(calls[0].ref.exit_trap == want, "%s dialect %d flag", names[i], (int)d);
            cJSON_Delete(args);
            coai_reply_free(&r);
        }
    /* what the trap printed, recorded from OpenCode 1.18.33 / Kilo Code 7.7.7 */
    x = ref(COAI_EXEC_SHELL, "", "echo out; echo err >&2; exit 3");
    x.exit_trap = 1;
    run(&b, &o, &x, "bash", "out\nerr\n\n[exit code: 3]\n", 0, 0);
    CHECK(!strcmp(o.shape, "exit-trap") && o.exit_code == 3 && out_is(&o, "out\nerr\n"));
    CHECK(path(b.data, b.len, SHELL_FAIL, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 3);
    run(&b, &o, &x, "bash", "no newline\n[exit code: 0]\n", 0, 0);
    CHECK(o.exit_code == 0 && out_is(&o, "no newline") && path(b.data, b.len, SHELL_OK, 3, &s));
    run(&b, &o, &x, "bash", "\n[exit code: 0]\n", 0, 0);
    CHECK(o.has_exit && o.out.len == 0);
    /* not the trap's line last (output cut, a trap of the command's own): no code */
    run(&b, &o, &x, "bash", "[exit code: 0]\nmore\n", 0, 0);
    CHECK(!o.has_exit && !strcmp(o.shape, "raw"));
    run(&b, &o, &x, "bash", "x\n[exit code: 0]", 0, 0);
    CHECK(!o.has_exit);
    /* without the trap in the command, the same last line is a code all the same (the
     * generic rule); a line of that form before other output is not */
    x.exit_trap = 0;
    run(&b, &o, &x, "bash", "out\n\n[exit code: 3]\n", 0, 0);
    CHECK(o.has_exit && o.exit_code == 3 && out_is(&o, "out\n")
          && path(b.data, b.len, SHELL_FAIL, 3, &s));
    run(&b, &o, &x, "bash", "a\n[exit code: 3]\nmore\n", 0, 0);
    CHECK(!o.has_exit && path(b.data, b.len, SHELL_OK, 3, &s));
    cJSON_Delete(sch);
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* Issue 25 item 5: parameter names matched the way tool names are (case, '_', '-'), and a
 * tool's one required string parameter taken for its main argument. */
static void test_param_names(void)
{
    static const struct { const char *schema, *key; } rd[] = {
        { "{\"properties\":{\"filepath\":{\"type\":\"string\"}}}", "filepath" },
        { "{\"properties\":{\"file_path\":{\"type\":\"string\"}}}", "file_path" },
        { "{\"properties\":{\"filePath\":{\"type\":\"string\"}}}", "filePath" },
        { "{\"properties\":{\"path\":{\"type\":\"string\"}}}", "path" },
        { "{\"properties\":{\"FILE-PATH\":{\"type\":\"string\"}}}", "FILE-PATH" },
        { "{\"properties\":{\"File_Name\":{\"type\":\"string\"}}}", "File_Name" },
        /* a required string named for nothing, two required strings, a required number, a
         * string named for nothing and not required: since the roles of issue 31 no
         * argument is guessed (Copilot's read_agent {agent_id} is no reader), the tool is
         * not called (NULL) and Cursor gets the refusal sentence */
        { "{\"properties\":{\"target\":{\"type\":\"string\"},\"limit\":{\"type\":"
          "\"integer\"}},\"required\":[\"target\"]}", NULL },
        { "{\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"string\"}},"
          "\"required\":[\"a\",\"b\"]}", NULL },
        { "{\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}", NULL },
        { "{\"properties\":{\"target\":{\"type\":\"string\"}}}", NULL },
    };
    static const struct { const char *schema, *key; } sh[] = {
        { "{\"properties\":{\"Command\":{\"type\":\"string\"}}}", "Command" },
        { "{\"properties\":{\"CMD\":{\"type\":\"string\"}}}", "CMD" },
        { "{\"properties\":{\"script\":{\"type\":\"string\"},\"timeout\":{\"type\":"
          "\"integer\"}},\"required\":[\"script\"],\"additionalProperties\":false}",
          "script" },
    };
    size_t i;
    for (i = 0; i < sizeof rd / sizeof rd[0] + sizeof sh / sizeof sh[0]; i++) {
        int is_rd = i < sizeof rd / sizeof rd[0];
        size_t j = is_rd ? i : i - sizeof rd / sizeof rd[0];
        const char *schema = is_rd ? rd[j].schema : sh[j].schema;
        const char *key = is_rd ? rd[j].key : sh[j].key;
        coai_tool t;
        coai_exec ex;
        coai_tool_call tc;
        cJSON *sch = cJSON_Parse(schema), *args;
        memset(&t, 0, sizeof t);
        memset(&ex, 0, sizeof ex);
        memset(&tc, 0, sizeof tc);
        t.name = coai_str_c(is_rd ? "Read_File" : "bash");
        t.parameters = sch;
        ex.kind = is_rd ? COAI_EXEC_READ : COAI_EXEC_SHELL;
        ex.path = coai_str_c("/w/a.txt");
        ex.command = coai_str_c("ls");
        if (!key) {
            CHECKF(coai_exec_map(&ex, &t, 1, coai_str_c("/w"), &tc) == 0, "%s: not called",
                   schema);
            cJSON_Delete(sch);
            coai_buf_free(&tc.args);
            continue;
        }
        CHECKF(coai_exec_map(&ex, &t, 1, coai_str_c("/w"), &tc) == 1, "%s", schema);
        args = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
        CHECKF(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(args, key))
               && !strcmp(cJSON_GetObjectItemCaseSensitive(args, key)->valuestring,
                          is_rd ? "/w/a.txt" : "ls"),
               "%s -> %.*s (want %s)", schema, (int)tc.args.len, (const char *)tc.args.data, key);
        cJSON_Delete(args);
        cJSON_Delete(sch);
        coai_buf_free(&tc.args);
    }
}

/* Whether b is a delete_result.error{path p, error containing want} */
static int delete_error_says(const coai_buf *b, const char *p, const char *want)
{
    static const uint32_t bad[] = { 2, 4, 7 };
    pbw_field s, f;
    char t[512] = { 0 };
    if (!path(b->data, b->len, bad, 3, &s) || !find(s.p, s.n, 1, &f) || !str_is(&f, p)
        || !find(s.p, s.n, 2, &f) || f.n >= sizeof t)
        return 0;
    memcpy(t, f.p, f.n);
    return strstr(t, want) != NULL;
}

/* Cursor's delete through a shell tool (wc -c < PATH && rm -- PATH): a delete_result (field
 * 4, never an mcp_result: Cursor's turn waits for the delete's own result), success with the
 * size the command printed, else error{path, error}. A success without a size, or with 0
 * (Cursor's turn stalls on both), goes as error{path, text saying what happened}. */
static void test_delete(void)
{
    static const uint32_t ok[] = { 2, 4, 1 }, bad[] = { 2, 4, 7 }, mcp[] = { 2, 11 };
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_DELETE, "/WORKSPACE/gone.txt", "");
    pbw_field s, f;
    memset(&o, 0, sizeof o);
    run(&b, &o, &x, "exec_command", "Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with "
        "code 0\nOriginal token count: 1\nOutput:\n14\n", 0, 0);
    CHECK(!o.is_error && path(b.data, b.len, ok, 3, &s) && !path(b.data, b.len, mcp, 2, &f));
    CHECK(find(s.p, s.n, 1, &f) && str_is(&f, "/WORKSPACE/gone.txt"));
    CHECK(find(s.p, s.n, 2, &f) && str_is(&f, "/WORKSPACE/gone.txt"));
    CHECK(find(s.p, s.n, 3, &f) && f.v == 14);
    CHECK(o.has_size && o.file_size == 14);
    run(&b, &o, &x, "Bash", "     2048", 0, 0);          /* macOS wc pads with blanks */
    CHECK(o.has_size && o.file_size == 2048);
    CHECK(path(b.data, b.len, ok, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 2048);
    run(&b, &o, &x, "Bash", "\t 7\r\n", 0, 0);
    CHECK(o.has_size && o.file_size == 7);
    run(&b, &o, &x, "Bash", "0\n", 0, 0);                 /* an empty file */
    CHECK(o.has_size && o.file_size == 0 && !path(b.data, b.len, ok, 3, &s));
    CHECK(delete_error_says(&b, "/WORKSPACE/gone.txt", "gone.txt was deleted (it was empty"));
    /* the parse sets the size only for a number alone on its line, at most 2^53; without
     * one the delete is not sent as a success */
    {
        static const char *const none[] = { "", "\n", "deleted", "14abc\n", "-3\n", "1 4\n",
                                            "99999999999999999999999\n", "9007199254740993\n" };
        size_t i;
        for (i = 0; i < sizeof none / sizeof none[0]; i++) {
            run(&b, &o, &x, "Bash", none[i], 0, 0);
            CHECKF(!o.has_size && !o.is_error, "no size in %s", none[i]);
            CHECKF(!path(b.data, b.len, ok, 3, &s) && delete_error_says(
                       &b, "/WORKSPACE/gone.txt", i < 2 ? "returned no output, neither the "
                       "file's size nor an error, so the delete is not confirmed"
                       : "gone.txt was deleted; the client's tool did not report its size"),
                   "%s", none[i]);
        }
        run(&b, &o, &x, "Bash", "9007199254740992\n", 0, 0);
        CHECK(o.has_size && o.file_size == (int64_t)1 << 53);
        CHECK(path(b.data, b.len, ok, 3, &s) && find(s.p, s.n, 3, &f)
              && f.v == (uint64_t)1 << 53);
    }
    /* Codex's exec_command with exit code 0 and no output (the size lost): deleted */
    run(&b, &o, &x, "exec_command", "Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with "
        "code 0\nOriginal token count: 0\nOutput:\n", 0, 0);
    CHECK(!o.is_error && !o.has_size
          && delete_error_says(&b, "/WORKSPACE/gone.txt", "was deleted; the client's tool did "
                               "not report its size"));
    /* a missing file: the shell's failure is the delete's error */
    run(&b, &o, &x, "exec_command", "Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with "
        "code 1\nOriginal token count: 9\nOutput:\nbash: /WORKSPACE/gone.txt: No such file or "
        "directory\n", 0, 0);
    CHECK(o.is_error && !o.has_size && path(b.data, b.len, bad, 3, &s));
    CHECK(find(s.p, s.n, 1, &f) && str_is(&f, "/WORKSPACE/gone.txt"));
    {
        char t[256] = { 0 };
        CHECK(find(s.p, s.n, 2, &f) && f.n < sizeof t);
        memcpy(t, f.p, f.n < sizeof t - 1 ? f.n : sizeof t - 1);
        CHECK(strstr(t, "gone.txt: No such file or directory") != NULL);
    }
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* A delete in Chat Completions, whose clients have no delete tool (Qwen Code, Kilo Code,
 * OpenCode): their shell tool gets wc -c + rm (under the exit trap for OpenCode's and Kilo
 * Code's bash), and the trap's result is a delete_result with the size; no shell tool: no
 * call (the exec is refused). Before, every delete there was refused. */
static void test_chat_delete(void)
{
    static const char *const names[] = { "bash", "run_shell_command", "read" };
    static const uint32_t ok[] = { 2, 4, 1 }, bad[] = { 2, 4, 7 };
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x;
    pbw_field s, f;
    size_t i;
    cJSON *sch = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                             "\"string\"},\"workdir\":{\"type\":\"string\"}},"
                             "\"required\":[\"command\"]}");
    memset(&o, 0, sizeof o);
    for (i = 0; i < 3; i++) {
        coai_reply r;
        coai_reply_opts op;
        coai_tool t;
        coai_msg m;
        const coai_reply_call *calls;
        cJSON *args, *cmd;
        memset(&t, 0, sizeof t);
        t.name = coai_str_c(names[i]);
        t.parameters = i < 2 ? sch : NULL;
        reply_with_tool(&r, &op, &t, COAI_DIALECT_OPENAI_CHAT, &m);
        m.exec.kind = COAI_EXEC_DELETE;
        m.exec.id = 2;
        m.exec.path = coai_str_c("/w/gone.txt");
        coai_reply_feed_msg(&r, &m);
        if (i == 2) {
            CHECKF(coai_reply_calls(&r, &calls) == 0, "%s", names[i]);
            coai_reply_free(&r);
            continue;
        }
        CHECKF(coai_reply_calls(&r, &calls) == 1, "%s", names[i]);
        if (coai_reply_calls(&r, &calls) != 1) { coai_reply_free(&r); continue; }
        args = cJSON_ParseWithLength(calls[0].args.ptr, calls[0].args.len);
        cmd = cJSON_GetObjectItemCaseSensitive(args, "command");
        CHECKF(cJSON_IsString(cmd) && strstr(cmd->valuestring, "wc -c < '/w/gone.txt' && rm -- "
               "'/w/gone.txt'") != NULL && (i == 1) == !strstr(cmd->valuestring, COAI_EXIT_TRAP),
               "%s: %s", names[i], cJSON_IsString(cmd) ? cmd->valuestring : "?");
        CHECKF(calls[0].ref.kind == COAI_EXEC_DELETE && calls[0].ref.exit_trap == (i == 0),
               "%s", names[i]);
        cJSON_Delete(args);
        coai_reply_free(&r);
    }
    cJSON_Delete(sch);
    /* the trap's result (OpenCode, Kilo Code): the size; a failed rm: the delete's error */
    x = ref(COAI_EXEC_DELETE, "/w/gone.txt", "");
    x.exit_trap = 1;
    run(&b, &o, &x, "bash", "14\n\n[exit code: 0]\n", 0, 0);
    CHECK(!o.is_error && path(b.data, b.len, ok, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 14);
    run(&b, &o, &x, "bash", "bash: /w/gone.txt: No such file or directory\n\n[exit code: 1]\n",
        0, 0);
    CHECK(o.is_error && path(b.data, b.len, bad, 3, &s));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

/* Issue 31 item 3: the exit code of any client's result, in layouts no client here writes:
 * a first or last line naming it, any common phrasing, bracketed or tagged; a JSON object.
 * Each (text, is_error) -> (has code, code, output). */
static void test_generic_exit(void)
{
    static const struct { const char *text; int is_error, has, code; const char *out; } v[] = {
        /* trailers */
        { "hello\nexit code: 3", 0, 1, 3, "hello" },
        { "hello\nExit code 3\n", 0, 1, 3, "hello" },
        { "hello\n[exit code: 3]", 0, 1, 3, "hello" },
        { "hello\n[Exit Code 3]\n\n", 0, 1, 3, "hello" },
        { "hello\n<exit_code>3</exit_code>\n", 0, 1, 3, "hello" },
        { "hello\n<exitCode>3</exitCode>", 0, 1, 3, "hello" },
        { "hello\nProcess exited with code 3\n", 1, 1, 3, "hello" },
        { "hello\n(process exited with status 3)", 0, 1, 3, "hello" },
        { "hello\ncommand failed with exit code 3.", 0, 1, 3, "hello" },
        { "hello\nreturn code: 3", 0, 1, 3, "hello" },
        { "hello\nreturncode=3", 0, 1, 3, "hello" },
        { "hello\n(exit 3)", 0, 1, 3, "hello" },
        { "hello\n[rc=3]", 0, 1, 3, "hello" },
        { "hello\n\"exit_code\": 3", 0, 1, 3, "hello" },
        { "hello\n{\"exit_code\": 3}\n", 0, 1, 3, "hello" },
        { "hello\n**Exit status:** 3", 0, 1, 3, "hello" },
        { "hello\nEXIT_CODE=0", 0, 1, 0, "hello" },
        { "hello\nThe exit code is 3", 0, 1, 3, "hello" },
        { "line1\r\nline2\r\nexit code: 2\r\n", 0, 1, 2, "line1\r\nline2" },
        { "out\nexit code: -1", 0, 1, -1, "out" },
        /* after a session's / process's number (GitHub Copilot CLI's bash trailer) */
        { "hello\n<shellId: 0 completed with exit code 3>\n", 0, 1, 3, "hello" },
        { "hello\n[pid 4711] exited with status 1", 0, 1, 1, "hello" },
        { "hello\nsession 2: exit code 0", 0, 1, 0, "hello" },
        /* headers */
        { "Exit status: 4\nsome output\nmore", 0, 1, 4, "some output\nmore" },
        { "[exit code: 4]\nx\n", 1, 1, 4, "x\n" },
        { "<exit_code>0</exit_code>\nok", 0, 1, 0, "ok" },
        { "Return code 2", 1, 1, 2, "" },
        /* a whole JSON object */
        { "{\"stdout\": \"a\\nb\\n\", \"stderr\": \"\", \"exit_code\": 3}", 0, 1, 3, "a\nb\n" },
        { "{\"output\":\"x\",\"exitCode\":0}\n", 0, 1, 0, "x" },
        /* not a code: content */
        { "hello", 0, 0, 0, "hello" },
        { "a\nexit code 5 was expected\nb", 0, 0, 0, "a\nexit code 5 was expected\nb" },
        { "a\nExit code: 5\nb\n", 0, 0, 0, "a\nExit code: 5\nb\n" },
        { "#!/bin/sh\necho hi\nexit 3\n", 0, 0, 0, "#!/bin/sh\necho hi\nexit 3\n" },
        { "the tests exited with code 0 in CI", 0, 0, 0, "the tests exited with code 0 in CI" },
        { "results\ncode 3", 0, 0, 0, "results\ncode 3" },
        { "results\nstatus: 3", 0, 0, 0, "results\nstatus: 3" },
        { "x\nexit code: 3 (SIGQUIT)", 0, 0, 0, "x\nexit code: 3 (SIGQUIT)" },
        { "x\nexit code: 3 and 4", 0, 0, 0, "x\nexit code: 3 and 4" },
        { "x\nexit code: 3s", 0, 0, 0, "x\nexit code: 3s" },
        { "x\n<shellId: 0>", 0, 0, 0, "x\n<shellId: 0>" },
        { "x\nshellId: 0 completed", 0, 0, 0, "x\nshellId: 0 completed" },
        { "x\npid 7 pid 8 exit code 1", 0, 0, 0, "x\npid 7 pid 8 exit code 1" },
        { "x\nexit code 1 pid 8", 0, 0, 0, "x\nexit code 1 pid 8" },
        { "x\nid 7x exit code 1", 0, 0, 0, "x\nid 7x exit code 1" },
        { "x\nexit code: 99999999999999", 0, 0, 0, "x\nexit code: 99999999999999" },
        { "x\n<exit_code>3</return_code>", 0, 0, 0, "x\n<exit_code>3</return_code>" },
        { "x\nexit code: \xc3\xa9 3", 0, 0, 0, "x\nexit code: \xc3\xa9 3" },
        { "{\"exit_code\": 3}", 0, 1, 3, "" },       /* the code line alone: no output */
        { "{\"output\": \"x\", \"exit_code\": 1.5}", 0, 0, 0,
          "{\"output\": \"x\", \"exit_code\": 1.5}" },
    };
    coai_buf b = { 0 };
    coai_exec_outcome o;
    coai_exec_ref x = ref(COAI_EXEC_SHELL, "", "make test");
    size_t i;
    memset(&o, 0, sizeof o);
    for (i = 0; i < sizeof v / sizeof v[0]; i++) {
        run(&b, &o, &x, "run_commands", v[i].text, v[i].is_error, 0);
        CHECKF(o.has_exit == v[i].has && (!v[i].has || o.exit_code == v[i].code)
               && (v[i].is_error && !v[i].has ? o.err.len == strlen(v[i].out)
                   : out_is(&o, v[i].out)),
               "%zu: %s -> has %d code %d out '%.*s'", i, v[i].text, o.has_exit, o.exit_code,
               (int)o.out.len, o.out.ptr);
        CHECKF(o.is_error == (v[i].is_error || (v[i].has && v[i].code != 0)), "%zu error", i);
    }
    /* unknown text passes byte for byte, exit 0: the shell result's stdout is the text */
    {
        pbw_field s, f;
        run(&b, &o, &x, "run_commands", "a\nExit code: 5\nb\n", 0, 0);
        CHECK(path(b.data, b.len, SHELL_OK, 3, &s) && find(s.p, s.n, 5, &f)
              && str_is(&f, "a\nExit code: 5\nb\n") && !find(s.p, s.n, 3, &f));
        run(&b, &o, &x, "run_commands", "compiling\n[exit code: 3]\n", 0, 0);
        CHECK(path(b.data, b.len, SHELL_FAIL, 3, &s) && find(s.p, s.n, 3, &f) && f.v == 3
              && find(s.p, s.n, 5, &f) && str_is(&f, "compiling"));
    }
    /* a read tool's content is never cut, whatever its last line */
    x = ref(COAI_EXEC_READ, "/WORKSPACE/log.txt", "");
    run(&b, &o, &x, "read_files", "build log\nexit code: 3\n", 0, 0);
    CHECK(!o.has_exit && out_is(&o, "build log\nexit code: 3\n"));
    coai_exec_outcome_free(&o);
    coai_buf_free(&b);
}

int main(void)
{
    test_chat_delete();
    test_delete();
    test_codex();
    test_claude();
    test_qwen();
    test_opencode_kilo();
    test_raw_same();
    test_mcp_untranslated();
    test_json_array();
    test_read_via_shell();
    test_exit_trap();
    test_generic_exit();
    test_param_names();
    TEST_END();
}
