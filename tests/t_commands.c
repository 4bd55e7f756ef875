/* t_commands.c - the commands the proxy writes for a client's shell tool: every dialect's exec
 * mapping (OpenAI chat, Anthropic, Responses with each of Codex's shell styles, with and without apply_patch, Gemini) is fed hostile paths and
 * patterns, and each command it writes is run by real bash (/bin/bash) in a scratch
 * directory with canary files: nothing but the literal target may change. apply_patch
 * never gets a path or content it could read as more than it is; a split write's staging
 * directory refuses what is planted in it. */
#define _POSIX_C_SOURCE 200809L
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- the scratch directory ---------------------------------------------------------- */

static char base[256];          /* <base>/root is rebuilt for every command; <base>/out */
static char root[300], work[320], outf[300];
static int have_rg;

/* Run cmd with `bash -c` in dir, stdout to outf (stderr dropped): the exit status, or -1.
 * posix_spawn (no fork of this sanitized process); a first bash only changes directory. */
static int run_bash(const char *dir, const char *cmd)
{
    posix_spawn_file_actions_t fa;
    char *argv[7];
    pid_t pid;
    int st, rc;
    argv[0] = (char *)"bash";
    argv[1] = (char *)"-c";
    argv[2] = (char *)"cd -- \"$1\" || exit 126; exec /bin/bash -c \"$2\"";
    argv[3] = (char *)"bash";
    argv[4] = (char *)dir;
    argv[5] = (char *)cmd;
    argv[6] = NULL;
    if (posix_spawn_file_actions_init(&fa) != 0) return -1;
    posix_spawn_file_actions_addopen(&fa, 1, outf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    rc = posix_spawn(&pid, "/bin/bash", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static int put_file(const char *dir, const char *rel, const char *text, size_t n)
{
    char p[1024];
    int fd;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    if (write(fd, text, n) != (ssize_t)n) { close(fd); return -1; }
    return close(fd);
}

#define TARGET_TEXT "target line\n"

/* rm -r of p (symlinks removed, not followed) */
static void rm_tree(const char *p)
{
    struct stat st;
    if (lstat(p, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char c[2048];
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(c, sizeof c, "%s/%s", p, e->d_name);
            rm_tree(c);
        }
        if (d) closedir(d);
        rmdir(p);
    } else {
        unlink(p);
    }
}

/* root/ with outside.txt, work/ (the shell's cwd) with canary.txt, victim.txt and
 * sub/keep.txt, and the literal target key (relative to root) when given */
static int scratch(const char *key)
{
    char rm[400];
    rm_tree(root);
    if (mkdir(root, 0755) || mkdir(work, 0755)) return -1;
    snprintf(rm, sizeof rm, "%s/sub", work);
    if (mkdir(rm, 0755)) return -1;
    if (put_file(root, "outside.txt", "outside\n", 8) || put_file(work, "canary.txt", "c\n", 2)
        || put_file(work, "victim.txt", "v\n", 2) || put_file(work, "sub/keep.txt", "k\n", 2))
        return -1;
    if (key && put_file(root, key, TARGET_TEXT, sizeof TARGET_TEXT - 1)) return -1;
    return 0;
}

/* One line per entry under dir: escaped path, type, size, FNV-1a of the bytes (or the
 * link's target) */
static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ULL;
    size_t i;
    for (i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
    return h;
}

static void esc(coai_buf *b, const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x21 || *s == '%') coai_buf_printf(b, "%%%02x", (unsigned char)*s);
        else coai_buf_putc(b, *s);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void entry_line(coai_buf *line, const char *rel, char type, size_t size, uint64_t h)
{
    coai_buf_reset(line);
    esc(line, rel);
    coai_buf_printf(line, " %c %lu %016llx", type, (unsigned long)size, (unsigned long long)h);
    coai_buf_putc(line, 0);
}

static void walk(const char *dir, const char *rel, char ***v, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        char p[2048], r[2048];
        struct stat st;
        coai_buf line = { 0 };
        char type = '?';
        size_t size = 0;
        uint64_t h = 0;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        if (lstat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            type = 'd';
        } else if (S_ISLNK(st.st_mode)) {
            char t[1024];
            ssize_t k = readlink(p, t, sizeof t);
            type = 'l';
            h = fnv(t, k > 0 ? (size_t)k : 0);
        } else if (S_ISREG(st.st_mode)) {
            size_t len = 0;
            char *c = test_read_file(p, &len);
            type = 'f';
            size = len;
            h = fnv(c ? c : "", len);
            free(c);
        }
        entry_line(&line, r, type, size, h);
        *v = (char **)realloc(*v, (*n + 1) * sizeof **v);
        (*v)[(*n)++] = (char *)line.data;
        if (type == 'd') walk(p, r, v, n);
    }
    closedir(d);
}

/* The snapshot of root as one string (sorted lines); with drop, that entry left out; with
 * add, an entry for it (a regular file holding add_text) put in. malloc'd. */
static char *snapshot(const char *drop, const char *add, const char *add_text, size_t add_n)
{
    char **v = NULL;
    size_t n = 0, i;
    coai_buf out = { 0 }, key = { 0 };
    walk(root, "", &v, &n);
    if (drop || add) {
        esc(&key, drop ? drop : add);
        coai_buf_putc(&key, ' ');
        coai_buf_putc(&key, 0);
        for (i = 0; i < n; i++)
            if (!strncmp(v[i], (const char *)key.data, key.len - 1)) {
                free(v[i]);
                v[i] = v[--n];
                break;
            }
    }
    if (add) {
        coai_buf line = { 0 };
        entry_line(&line, add, 'f', add_n, fnv(add_text, add_n));
        v = (char **)realloc(v, (n + 1) * sizeof *v);
        v[n++] = (char *)line.data;
    }
    qsort(v, n, sizeof *v, cmp_str);
    for (i = 0; i < n; i++) { coai_buf_puts(&out, v[i]); coai_buf_putc(&out, '\n'); free(v[i]); }
    free(v);
    coai_buf_free(&key);
    coai_buf_putc(&out, 0);
    return (char *)out.data;
}

/* ---- the mappings ------------------------------------------------------------------- */

/* The last four: shell-only clients nobody here uses (issue 31 item 2), each the only tool
 * of its client, known by its schema alone */
enum { M_CHAT, M_ANTHROPIC, M_GEMINI, M_EXEC_COMMAND, M_SHELL_COMMAND, M_SHELL_ARRAY,
       M_EXEC_COMMAND_PATCH, M_PATCH_ONLY, M_RUN_CMD, M_RUN_COMMANDS, M_BASH_SCRIPT,
       M_EXECUTE_COMMAND, M_COUNT };
static const char *const m_name[M_COUNT] = { "chat bash", "anthropic Bash",
    "gemini run_shell_command", "responses exec_command", "responses shell_command",
    "responses shell (array)", "responses exec_command + apply_patch",
    "responses apply_patch alone", "chat run {cmd}", "anthropic run_commands {commands[]}",
    "gemini bash {script}", "responses execute_command {command, cwd}" };

static cJSON *p_cmd, *p_command, *p_array, *p_gemini, *p_run, *p_cmds, *p_script, *p_exec;
static coai_tool tools[M_COUNT][2];
static size_t tool_n[M_COUNT];

static void tools_init(void)
{
    p_cmd = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"},"
                        "\"workdir\":{\"type\":\"string\"}}}");
    p_command = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                            "\"string\"}}}");
    p_array = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                          "\"array\",\"items\":{\"type\":\"string\"}}}}");
    p_gemini = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                           "\"string\"},\"description\":{\"type\":\"string\"},\"dir_path\":"
                           "{\"type\":\"string\"}}}");
    p_run = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}},"
                        "\"required\":[\"cmd\"],\"additionalProperties\":false}");
    p_cmds = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"commands\":{\"type\":"
                         "\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"commands\"]}");
    p_script = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"script\":{\"type\":"
                           "\"string\",\"description\":\"bash script\"}}}");
    p_exec = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                         "\"string\"},\"cwd\":{\"type\":\"string\"}},\"required\":[\"command\"]}");
    memset(tools, 0, sizeof tools);
    tools[M_RUN_CMD][0].name = coai_str_c("run");
    tools[M_RUN_CMD][0].parameters = p_run;
    tools[M_RUN_COMMANDS][0].name = coai_str_c("run_commands");
    tools[M_RUN_COMMANDS][0].parameters = p_cmds;
    tools[M_BASH_SCRIPT][0].name = coai_str_c("bash");
    tools[M_BASH_SCRIPT][0].parameters = p_script;
    tools[M_EXECUTE_COMMAND][0].name = coai_str_c("execute_command");
    tools[M_EXECUTE_COMMAND][0].parameters = p_exec;
    tool_n[M_RUN_CMD] = tool_n[M_RUN_COMMANDS] = tool_n[M_BASH_SCRIPT] = 1;
    tool_n[M_EXECUTE_COMMAND] = 1;
    tools[M_CHAT][0].name = coai_str_c("bash");
    tools[M_CHAT][0].parameters = p_command;
    tools[M_ANTHROPIC][0].name = coai_str_c("Bash");
    tools[M_ANTHROPIC][0].parameters = p_command;
    tools[M_GEMINI][0].name = coai_str_c("run_shell_command");
    tools[M_GEMINI][0].parameters = p_gemini;
    tools[M_EXEC_COMMAND][0].name = coai_str_c("exec_command");
    tools[M_EXEC_COMMAND][0].parameters = p_cmd;
    tools[M_SHELL_COMMAND][0].name = coai_str_c("shell_command");
    tools[M_SHELL_COMMAND][0].parameters = p_command;
    tools[M_SHELL_ARRAY][0].name = coai_str_c("shell");
    tools[M_SHELL_ARRAY][0].parameters = p_array;
    tools[M_EXEC_COMMAND_PATCH][0] = tools[M_EXEC_COMMAND][0];
    tools[M_EXEC_COMMAND_PATCH][1].name = coai_str_c("apply_patch");
    tools[M_EXEC_COMMAND_PATCH][1].freeform = 1;
    tools[M_PATCH_ONLY][0] = tools[M_EXEC_COMMAND_PATCH][1];
    tool_n[M_CHAT] = tool_n[M_ANTHROPIC] = tool_n[M_GEMINI] = 1;
    tool_n[M_EXEC_COMMAND] = tool_n[M_SHELL_COMMAND] = tool_n[M_SHELL_ARRAY] = 1;
    tool_n[M_EXEC_COMMAND_PATCH] = 2;
    tool_n[M_PATCH_ONLY] = 1;
}

static coai_dialect m_dialect(int m)
{
    return m == M_CHAT || m == M_RUN_CMD ? COAI_DIALECT_OPENAI_CHAT
           : m == M_ANTHROPIC || m == M_RUN_COMMANDS ? COAI_DIALECT_ANTHROPIC
           : m == M_GEMINI || m == M_BASH_SCRIPT ? COAI_DIALECT_GEMINI : COAI_DIALECT_RESPONSES;
}

/* The command text in a shell tool's arguments: cmd, command, script, or in an array the
 * script of ["bash", "-lc", script] or the first of a list of commands */
static const cJSON *cmd_of(const cJSON *j)
{
    const cJSON *c = cJSON_GetObjectItem(j, "cmd");
    if (!c) c = cJSON_GetObjectItem(j, "command");
    if (!c) c = cJSON_GetObjectItem(j, "script");
    if (!c) c = cJSON_GetObjectItem(j, "commands");
    if (cJSON_IsArray(c)) {
        const cJSON *a0 = cJSON_GetArrayItem(c, 0);
        c = cJSON_GetArraySize(c) == 3 && cJSON_IsString(a0) && !strcmp(a0->valuestring, "bash")
            ? cJSON_GetArrayItem(c, 2) : cJSON_GetArraySize(c) == 1 ? a0 : NULL;
    }
    return c;
}

/* What the mapping made of ex: -1 failed, 0 not mapped (*why: tc.refusal), 1 a command
 * (*cmd, malloc'd), 2 an apply_patch patch (*cmd: its input, malloc'd). */
static int map(int m, const coai_exec *ex, char **cmd, const char **why)
{
    coai_tool_call tc;
    cJSON *j, *c;
    int r;
    *cmd = NULL;
    *why = NULL;
    memset(&tc, 0, sizeof tc);
    tc.salt = 0x0123456789abcdefULL;
    r = coai__exec_map_of(m_dialect(m))(ex, tools[m], tool_n[m], coai_str_c("/proxy/ws"), &tc);
    if (r <= 0) { *why = tc.refusal; coai_buf_free(&tc.args); return r; }
    j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
    if (coai_str_eq(tools[m][tc.tool].name, "apply_patch")) {
        c = cJSON_GetObjectItem(j, "input");
        r = 2;
    } else {
        c = (cJSON *)cmd_of(j);
        r = 1;
    }
    if (cJSON_IsString(c)) *cmd = strdup(c->valuestring);
    else r = -1;
    cJSON_Delete(j);
    coai_buf_free(&tc.args);
    return r;
}

/* A patch whose only directives are its own: Begin, one Add/Delete File, End; every other
 * line a "+" line (and no line break but LF) */
static int patch_is_plain(const char *p)
{
    int directives = 0;
    const char *s = p;
    if (strchr(p, '\r')) return 0;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        const char *t = s;
        while (t < s + n && (*t == ' ' || *t == '\t')) t++;
        if (n && (size_t)(t - s) < n && !strncmp(t, "***", 3)) directives++;
        else if (n && *s != '+') return 0;
        s += n + (e ? 1 : 0);
    }
    return directives == 3;
}

/* ---- hostile paths ------------------------------------------------------------------ */

typedef struct hostile {
    const char *path;
    size_t len;                 /* 0: strlen */
    int patch_hazard;           /* apply_patch must not carry it */
} hostile;

static const hostile H[] = {
    { "it's.txt", 0, 0 },
    { "$(touch pwned).txt", 0, 0 },
    { "`touch pwned`.txt", 0, 0 },
    { "a\nb.txt", 0, 1 },
    { "a\rb.txt", 0, 1 },
    { "x.txt\n*** Delete File: victim.txt", 0, 1 },
    { "gone.txt\n*** Add File: planted.sh", 0, 1 },
    { "-delete", 0, 0 },
    { "--help", 0, 0 },
    { "-rf", 0, 0 },
    { "-", 0, 0 },
    { "!", 0, 0 },
    { "(", 0, 0 },
    { ")", 0, 0 },
    { ",", 0, 0 },
    { "*", 0, 0 },
    { "sp ace.txt", 0, 0 },
    { " lead.txt", 0, 1 },
    { "trail.txt ", 0, 1 },
    { "*** End Patch", 0, 1 },
    { "tab\there", 0, 1 },
    { "\xc3\xbcn\xc3\xaf\xf0\x9f\x98\x80.txt", 0, 0 },
    { "line\xe2\x80\xa8sep.txt", 0, 1 },
    { "../x.txt", 0, 0 },
    { "$HOME", 0, 0 },
    { "~", 0, 0 },
    { "a\\b", 0, 0 },
    { "nul\0x.txt", 9, 0 },
};
#define NH (sizeof H / sizeof H[0])

static coai_str h_path(const hostile *h)
{
    coai_str s;
    s.ptr = h->path;
    s.len = h->len ? h->len : strlen(h->path);
    return s;
}

/* the literal target relative to root: work/PATH, or PATH's ../ taken away */
static void h_key(const hostile *h, char *key, size_t cap)
{
    if (!strncmp(h->path, "../", 3)) snprintf(key, cap, "%s", h->path + 3);
    else snprintf(key, cap, "work/%s", h->path);
}

enum { K_READ, K_LS, K_GREP, K_GLOB, K_DELETE, K_WRITE, K_COUNT };
static const char *const k_name[K_COUNT] = { "read", "ls", "grep", "glob", "delete", "write" };

#define WRITE_TEXT "it's $(touch pwned) `touch pwned` \\ %s\r\n*** Delete File: victim.txt\nend"

static void exec_of(coai_exec *ex, int k, coai_str path)
{
    static const coai_exec_kind kinds[K_COUNT] = { COAI_EXEC_READ, COAI_EXEC_LS, COAI_EXEC_GREP,
        COAI_EXEC_GREP, COAI_EXEC_DELETE, COAI_EXEC_WRITE };
    memset(ex, 0, sizeof *ex);
    ex->kind = kinds[k];
    ex->id = 7;
    ex->exec_id = coai_str_c("exec-7");
    ex->path = path;
    ex->has_path = 1;
    if (k == K_GREP) ex->pattern = coai_str_c("target");
    if (k == K_GLOB) ex->glob = coai_str_c("**/*");
    if (k == K_WRITE) ex->content = coai_str_c(WRITE_TEXT);
}

/* Which (mapping, kind) pairs write a command (the others have no such mapping) */
static int m_has(int m, int k)
{
    /* a shell tool does every file exec (issue 31 item 2: chat did only deletes, the
     * Messages and Gemini APIs no reads or writes) */
    if (m == M_PATCH_ONLY) return k == K_DELETE || k == K_WRITE;
    return 1;
}

/* Every mapping, every kind, every hostile path: the command's effect under real bash is
 * exactly the literal target's, or the exec is refused with a sentence. */
static void test_hostile_paths(void)
{
    size_t i;
    int m, k;
    for (i = 0; i < NH; i++) {
        const hostile *h = &H[i];
        coai_str path = h_path(h);
        int nul = memchr(path.ptr, 0, path.len) != NULL;
        char key[512];
        h_key(h, key, sizeof key);
        for (m = 0; m < M_COUNT; m++)
            for (k = 0; k < K_COUNT; k++) {
                coai_exec ex;
                char *cmd = NULL, *before = NULL, *want = NULL, *after;
                const char *why;
                int r, rc;
                if (!m_has(m, k)) continue;
                exec_of(&ex, k, path);
                r = map(m, &ex, &cmd, &why);
                if (nul) {
                    /* no argument can carry a NUL: refused, with a sentence for Cursor
                     * (apply_patch alone: the patch refusal) */
                    CHECKF(r == 0 && why
                               && strstr(why, m == M_PATCH_ONLY ? "apply_patch" : "NUL"),
                           "%s %s path #%lu: r=%d %s",
                           m_name[m], k_name[k], (unsigned long)i, r, cmd ? cmd : "");
                    free(cmd);
                    continue;
                }
                if (m == M_PATCH_ONLY) {
                    /* apply_patch alone: a plain patch, or (for a path or content it could
                     * read as more) a refusal saying so */
                    if (h->patch_hazard || k == K_WRITE) {
                        CHECKF(r == 0 && why && strstr(why, "apply_patch"),
                               "%s %s path #%lu: r=%d %s", m_name[m], k_name[k],
                               (unsigned long)i, r, cmd ? cmd : "");
                    } else {
                        CHECKF(r == 2 && cmd && patch_is_plain(cmd), "%s %s path #%lu: %s",
                               m_name[m], k_name[k], (unsigned long)i, cmd ? cmd : "");
                    }
                    free(cmd);
                    continue;
                }
                if (m == M_EXEC_COMMAND_PATCH && k == K_DELETE && !h->patch_hazard) {
                    CHECKF(r == 2 && cmd && patch_is_plain(cmd), "%s path #%lu: %s",
                           m_name[m], (unsigned long)i, cmd ? cmd : "");
                    free(cmd);
                    continue;
                }
                /* a command (for apply_patch's client: the write's content has a CR, and
                 * the hazards go to the shell too) */
                CHECKF(r == 1 && cmd, "%s %s path #%lu: r=%d", m_name[m], k_name[k],
                       (unsigned long)i, r);
                if (r != 1 || !cmd) { free(cmd); continue; }
                if (!strncmp(cmd, "rg ", 3) && !have_rg) { free(cmd); continue; }
                if (scratch(k == K_WRITE ? NULL : key) != 0) {
                    CHECKF(0, "scratch %s", root);
                    free(cmd);
                    continue;
                }
                before = snapshot(NULL, NULL, NULL, 0);
                if (k == K_DELETE) want = snapshot(key, NULL, NULL, 0);
                else if (k == K_WRITE) want = snapshot(NULL, key, WRITE_TEXT, strlen(WRITE_TEXT));
                else want = strdup(before);
                rc = run_bash(work, cmd);
                after = snapshot(NULL, NULL, NULL, 0);
                CHECKF(rc == 0, "%s %s path #%lu: exit %d: %s", m_name[m], k_name[k],
                       (unsigned long)i, rc, cmd);
                CHECKF(want && after && !strcmp(want, after),
                       "%s %s path #%lu: %s\nwanted:\n%s\ngot:\n%s", m_name[m], k_name[k],
                       (unsigned long)i, cmd, want, after);
                if (k == K_READ) {        /* cat read the literal target */
                    size_t n = 0;
                    char *o = test_read_file(outf, &n);
                    CHECKF(o && n == sizeof TARGET_TEXT - 1 && !memcmp(o, TARGET_TEXT, n),
                           "%s read path #%lu: %s", m_name[m], (unsigned long)i, cmd);
                    free(o);
                }
                free(before);
                free(want);
                free(after);
                free(cmd);
            }
    }
}

/* Hostile patterns and globs: option arguments, never options or shell text. */
static void test_hostile_patterns(void)
{
    static const char *const pats[] = { "-e", "--help", "-delete", "$(touch pwned)",
        "`touch pwned`", "it's", "a\nb", "-f/etc/passwd", "!", "(x)", "*", "--files", NULL };
    int m, p, g;
    for (m = 0; m < M_COUNT; m++) {
        if (!m_has(m, K_GREP) || m == M_PATCH_ONLY) continue;
        for (p = 0; pats[p]; p++)
            for (g = 0; g < 3; g++) {
                coai_exec ex;
                char *cmd = NULL, *before, *after;
                const char *why;
                int r, rc;
                memset(&ex, 0, sizeof ex);
                ex.kind = COAI_EXEC_GREP;
                ex.id = 8;
                if (g == 0) ex.pattern = coai_str_c(pats[p]);               /* a grep */
                else if (g == 1) ex.glob = coai_str_c(pats[p]);             /* a glob */
                else { ex.pattern = coai_str_c("x"); ex.glob = coai_str_c(pats[p]); }
                r = map(m, &ex, &cmd, &why);
                CHECKF(r == 1 && cmd, "%s pattern %s (%d): r=%d", m_name[m], pats[p], g, r);
                if (r != 1 || !cmd || (!strncmp(cmd, "rg ", 3) && !have_rg)) {
                    free(cmd);
                    continue;
                }
                CHECK(scratch(NULL) == 0);
                before = snapshot(NULL, NULL, NULL, 0);
                rc = run_bash(work, cmd);
                after = snapshot(NULL, NULL, NULL, 0);
                /* 0 found, 1 nothing found; 2 is a usage error (the pattern as an option) */
                CHECKF(rc == 0 || rc == 1, "%s: exit %d: %s", m_name[m], rc, cmd);
                CHECKF(!strcmp(before, after), "%s: %s changed the tree", m_name[m], cmd);
                free(before);
                free(after);
                free(cmd);
            }
    }
    /* a NUL in a pattern: refused */
    for (m = 0; m < M_COUNT; m++) {
        coai_exec ex;
        char *cmd;
        const char *why;
        int r;
        if (!m_has(m, K_GREP) || m == M_PATCH_ONLY) continue;
        memset(&ex, 0, sizeof ex);
        ex.kind = COAI_EXEC_GREP;
        ex.pattern.ptr = "a\0b";
        ex.pattern.len = 3;
        r = map(m, &ex, &cmd, &why);
        CHECKF(r == 0 && why && strstr(why, "NUL"), "%s: r=%d", m_name[m], r);
        free(cmd);
    }
}

/* The patch injections: a write to "x.txt\n*** Delete File: victim.txt" and a
 * delete of "gone.txt\n*** Add File: planted.sh": with a shell tool, a command that only
 * touches that one literal name (victim.txt stays, no planted.sh); with apply_patch alone,
 * a refusal; a CR in the content keeps it out of a patch too. */
static void test_patch_injection(void)
{
    coai_exec ex;
    char *cmd;
    const char *why;
    int r;
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.path = coai_str_c("x.txt\n*** Delete File: victim.txt");
    ex.content = coai_str_c("hello\n");
    r = map(M_EXEC_COMMAND_PATCH, &ex, &cmd, &why);
    CHECKF(r == 1 && cmd, "r=%d %s", r, cmd ? cmd : "");
    if (r == 1 && cmd && scratch(NULL) == 0) {
        char *want = snapshot(NULL, "work/x.txt\n*** Delete File: victim.txt", "hello\n", 6);
        char *after;
        CHECK(run_bash(work, cmd) == 0);
        after = snapshot(NULL, NULL, NULL, 0);
        CHECKF(!strcmp(want, after), "%s\n%s", want, after);
        free(want);
        free(after);
    }
    free(cmd);
    r = map(M_PATCH_ONLY, &ex, &cmd, &why);
    CHECKF(r == 0 && why && strstr(why, "apply_patch"), "r=%d %s", r, cmd ? cmd : "");
    free(cmd);
    ex.kind = COAI_EXEC_DELETE;
    ex.path = coai_str_c("gone.txt\n*** Add File: planted.sh\n+#!/bin/sh");
    r = map(M_PATCH_ONLY, &ex, &cmd, &why);
    CHECKF(r == 0 && why, "r=%d %s", r, cmd ? cmd : "");
    free(cmd);
    r = map(M_EXEC_COMMAND_PATCH, &ex, &cmd, &why);
    CHECKF(r == 1 && cmd, "r=%d", r);
    free(cmd);
    /* a plain path with content holding a CR: not a patch (a reader splitting on CR would
     * see "*** Delete File: victim.txt" as a line of its own) */
    ex.kind = COAI_EXEC_WRITE;
    ex.path = coai_str_c("plain.txt");
    ex.content = coai_str_c("a\r*** Delete File: victim.txt\n");
    r = map(M_EXEC_COMMAND_PATCH, &ex, &cmd, &why);
    CHECKF(r == 1, "r=%d %s", r, cmd ? cmd : "");
    free(cmd);
    r = map(M_PATCH_ONLY, &ex, &cmd, &why);
    CHECKF(r == 0 && why, "r=%d %s", r, cmd ? cmd : "");
    free(cmd);
    /* a plain path and plain content: still apply_patch, as before */
    ex.content = coai_str_c("one\ntwo\n");
    r = map(M_EXEC_COMMAND_PATCH, &ex, &cmd, &why);
    CHECKF(r == 2 && cmd && patch_is_plain(cmd), "r=%d %s", r, cmd ? cmd : "");
    free(cmd);
}

/* ---- the split write's staging directory ---------------------------------------------- */

/* The command of call k of a split write through exec_command, with salt */
static char *part_of(const coai_exec *ex, unsigned k, uint64_t salt, unsigned *parts)
{
    coai_tool_call tc;
    cJSON *j;
    char *c = NULL;
    memset(&tc, 0, sizeof tc);
    tc.part = k;
    tc.salt = salt;
    if (coai_responses_exec_map(ex, tools[M_EXEC_COMMAND], 1, coai_str_c(""), &tc) == 1) {
        j = cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len);
        if (cJSON_IsString(cJSON_GetObjectItem(j, "cmd")))
            c = strdup(cJSON_GetObjectItem(j, "cmd")->valuestring);
        cJSON_Delete(j);
    }
    *parts = tc.parts;
    coai_buf_free(&tc.args);
    return c;
}

/* The staging directory a part's command names (s="$d/NAME"), as work/NAME (the target is
 * in work/) */
static void stage_of(const char *cmd, char *out, size_t cap)
{
    const char *s = cmd ? strstr(cmd, "s=\"$d/") : NULL, *e = s ? strchr(s + 6, '"') : NULL;
    if (!s || !e) { snprintf(out, cap, "%s/none", work); return; }
    snprintf(out, cap, "%s/%.*s", work, (int)(e - s - 6), s + 6);
}

static int file_is(const char *path, const char *text)
{
    size_t n = 0;
    char *c = test_read_file(path, &n);
    int ok = c && n == strlen(text) && !memcmp(c, text, n);
    free(c);
    return ok;
}

static void test_split_staging(void)
{
    coai_exec ex;
    coai_buf content = { 0 };
    char *c1, *c2, *c1b, st[700], p[900], target[700], outside[700];
    unsigned parts = 0, p2 = 0;
    struct stat sb;
    int rc;
    size_t i;
    for (i = 0; content.len < 100 * 1024; i++)
        coai_buf_printf(&content, "line %lu it's\n", (unsigned long)i);
    memset(&ex, 0, sizeof ex);
    ex.kind = COAI_EXEC_WRITE;
    ex.exec_id = coai_str_c("exec-split");
    ex.path = coai_str_c("big.txt");
    ex.content.ptr = (const char *)content.data;
    ex.content.len = content.len;
    c1 = part_of(&ex, 0, 0x1111222233334444ULL, &parts);
    c2 = part_of(&ex, 1, 0x1111222233334444ULL, &p2);
    c1b = part_of(&ex, 0, 0x5555666677778888ULL, &p2);
    CHECKF(parts == 2 && c1 && c2 && c1b, "%u parts", parts);
    if (!(parts == 2 && c1 && c2 && c1b)) goto done;
    /* the salt names the directory: the same for both calls of one write, another for
     * another salt */
    stage_of(c1, st, sizeof st);
    stage_of(c2, p, sizeof p);
    CHECK(!strcmp(st, p));
    stage_of(c1b, p, sizeof p);
    CHECK(strcmp(st, p) != 0);
    CHECK(strstr(st, "1111222233334444") != NULL);
    snprintf(target, sizeof target, "%s/big.txt", work);
    snprintf(outside, sizeof outside, "%s/outside.txt", root);
    /* both calls, nothing planted: the file */
    CHECK(scratch(NULL) == 0);
    CHECK(run_bash(work, c1) == 0 && run_bash(work, c2) == 0);
    CHECK(file_is(target, (const char *)content.data));
    CHECK(lstat(st, &sb) != 0);                                  /* no staging left */
    /* a planted $s/all symlink to a file elsewhere: refused, that file untouched, the
     * target not made (and not a symlink) */
    CHECK(scratch(NULL) == 0);
    CHECK(run_bash(work, c1) == 0);
    snprintf(p, sizeof p, "%s/all", st);
    CHECK(symlink(outside, p) == 0);
    rc = run_bash(work, c2);
    CHECKF(rc != 0, "exit %d", rc);
    CHECK(file_is(outside, "outside\n"));
    CHECK(lstat(target, &sb) != 0);
    /* a planted $s/all symlink to something that is not a regular file (/dev/null, which
     * noclobber lets bash write to): the joined file is no regular file, not renamed */
    CHECK(scratch(NULL) == 0);
    CHECK(run_bash(work, c1) == 0);
    CHECK(symlink("/dev/null", p) == 0);
    rc = run_bash(work, c2);
    CHECKF(rc != 0, "exit %d", rc);
    CHECK(lstat(target, &sb) != 0);
    /* a planted part: the joined bytes are not the write's, refused, no target */
    CHECK(scratch(NULL) == 0);
    CHECK(mkdir(st, 0700) == 0);
    snprintf(p, sizeof p, "%s/2", st);
    {
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && write(fd, "planted\n", 8) == 8);
        if (fd >= 0) close(fd);
    }
    rc = run_bash(work, c1);
    CHECKF(rc != 0, "exit %d", rc);
    CHECK(lstat(target, &sb) != 0);
    /* a planted part file ($s/1.tmp) where call 1 writes: noclobber refuses it, and the
     * file planted there keeps its bytes */
    CHECK(scratch(NULL) == 0);
    CHECK(mkdir(st, 0700) == 0);
    snprintf(p, sizeof p, "%s/1.tmp", st);
    {
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && write(fd, "x\n", 2) == 2);
        if (fd >= 0) close(fd);
    }
    rc = run_bash(work, c1);
    CHECKF(rc != 0, "exit %d", rc);
    CHECK(lstat(target, &sb) != 0);
    /* the staging path a symlink to a directory elsewhere: refused before anything is
     * written there */
    CHECK(scratch(NULL) == 0);
    snprintf(p, sizeof p, "%s/evil", root);
    CHECK(mkdir(p, 0700) == 0);
    CHECK(symlink(p, st) == 0);
    rc = run_bash(work, c1);
    CHECKF(rc != 0, "exit %d", rc);
    rc = run_bash(work, c2);
    CHECKF(rc != 0, "exit %d", rc);
    {
        DIR *d = opendir(p);
        struct dirent *e;
        int n = 0;
        while (d && (e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
        if (d) closedir(d);
        CHECKF(d && n == 0, "%d entries in the symlinked directory", n);
    }
    CHECK(lstat(target, &sb) != 0);
    /* the staging path a regular file: refused */
    CHECK(scratch(NULL) == 0);
    CHECK(put_file(work, st + strlen(work) + 1, "f\n", 2) == 0);
    CHECK(run_bash(work, c1) != 0);
    CHECK(file_is(st, "f\n"));
done:
    free(c1);
    free(c2);
    free(c1b);
    coai_buf_free(&content);
}

/* A write too big for one argument through each shell-only client (issue 31 item 2): the
 * split write's calls, each mapped by the client's dialect onto its one tool and run in
 * order by real bash, leave exactly the content at the literal (hostile) target and
 * nothing else; a NUL in the content goes as base64 the same way. */
static void test_split_shell_only(void)
{
    static const int ms[] = { M_RUN_CMD, M_RUN_COMMANDS, M_BASH_SCRIPT, M_EXECUTE_COMMAND,
                              M_CHAT, M_ANTHROPIC, M_GEMINI };
    static const char *const paths[] = { "-big it's $(touch pwned).txt", "sub/`x`\nb.txt",
                                         "nul.bin" };
    coai_buf content = { 0 };
    size_t i, mi, pi;
    for (i = 0; content.len < 200 * 1024; i++)
        coai_buf_printf(&content, "line %lu it's $(touch pwned) \\ %%s\r\n", (unsigned long)i);
    for (mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (pi = 0; pi < 3; pi++) {
            int m = ms[mi];
            coai_exec ex;
            coai_tool_call tc;
            char key[300], *want, *after;
            unsigned k, parts = 0;
            int ok = 1;
            memset(&ex, 0, sizeof ex);
            ex.kind = COAI_EXEC_WRITE;
            ex.id = 9;
            ex.exec_id = coai_str_c("exec-9");
            ex.path = coai_str_c(paths[pi]);
            ex.content.ptr = (const char *)content.data;
            ex.content.len = pi == 2 ? 1000 : content.len;
            if (pi == 2) content.data[500] = 0;                /* a NUL in a small write */
            snprintf(key, sizeof key, "work/%s", paths[pi]);
            CHECK(scratch(NULL) == 0);                         /* work/sub is there */
            want = snapshot(NULL, key, ex.content.ptr, ex.content.len);
            for (k = 0; ok && (k == 0 || k < parts); k++) {
                cJSON *j;
                const cJSON *c;
                int r, rc;
                memset(&tc, 0, sizeof tc);
                tc.part = k;
                tc.salt = 0xfeedULL + mi;
                r = coai__exec_map_of(m_dialect(m))(&ex, tools[m], tool_n[m],
                                                   coai_str_c("/proxy/ws"), &tc);
                if (k == 0) parts = tc.parts;
                j = r == 1 ? cJSON_ParseWithLength((const char *)tc.args.data, tc.args.len)
                           : NULL;
                c = cmd_of(j);
                CHECKF(r == 1 && cJSON_IsString(c), "%s %s part %u: r=%d %s", m_name[m],
                       paths[pi], k, r, tc.args.data ? (const char *)tc.args.data : "");
                if (r == 1 && cJSON_IsString(c)) {
                    rc = run_bash(work, c->valuestring);
                    CHECKF(rc == 0, "%s %s part %u: exit %d", m_name[m], paths[pi], k, rc);
                    if (rc != 0) ok = 0;
                } else {
                    ok = 0;
                }
                cJSON_Delete(j);
                coai_buf_free(&tc.args);
            }
            CHECKF(pi == 2 || parts >= 3, "%s: %u parts for 200 KiB", m_name[m], parts);
            after = snapshot(NULL, NULL, NULL, 0);
            CHECKF(want && after && !strcmp(want, after), "%s %s:\nwanted:\n%s\ngot:\n%s",
                   m_name[m], paths[pi], want, after);
            if (pi == 2) content.data[500] = 'x';
            free(want);
            free(after);
        }
    coai_buf_free(&content);
}

/* ---- the refusal reaches Cursor ------------------------------------------------------- */

static int sink_send(void *user, const unsigned char *msg, size_t n)
{
    coai_buf_append((coai_buf *)user, msg, n);
    return 0;
}

static int has_bytes(const coai_buf *b, const char *text)
{
    size_t i, n = strlen(text);
    for (i = 0; b->data && i + n <= b->len; i++)
        if (!memcmp(b->data + i, text, n)) return 1;
    return 0;
}

/* An exec the quoting layer or the patch rule refuses: Cursor gets a throw with the
 * sentence saying why, not "not available" */
static void test_refusal_sent(void)
{
    static const struct { int m; coai_exec_kind kind; const char *path; size_t len;
                          const char *says; } cases[] = {
        { M_ANTHROPIC, COAI_EXEC_DELETE, "a\0b", 3, "NUL byte" },
        { M_CHAT, COAI_EXEC_DELETE, "a\0b", 3, "NUL byte" },
        { M_EXEC_COMMAND, COAI_EXEC_READ, "a\0b", 3, "NUL byte" },
        { M_PATCH_ONLY, COAI_EXEC_DELETE, "x\n*** Add File: y", 0, "apply_patch" },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        coai_reply r;
        coai_reply_opts o;
        coai_buf out = { 0 };
        coai_msg msg;
        memset(&o, 0, sizeof o);
        o.dialect = m_dialect(cases[i].m);
        o.stream = 1;
        o.completion_id = coai_str_c("x");
        o.model = coai_str_c("m");
        o.tools = tools[cases[i].m];
        o.tool_count = tool_n[cases[i].m];
        o.session_id = coai_str_c("s");
        o.send = sink_send;
        o.send_user = &out;
        if (coai_reply_init(&r, &o) != 0) { CHECK(0); continue; }
        memset(&msg, 0, sizeof msg);
        msg.kind = COAI_MSG_EXEC;
        msg.exec.kind = cases[i].kind;
        msg.exec.id = 3;
        msg.exec.path.ptr = cases[i].path;
        msg.exec.path.len = cases[i].len ? cases[i].len : strlen(cases[i].path);
        msg.exec.has_path = 1;
        CHECK(coai_reply_feed_msg(&r, &msg) == COAI_OK);
        CHECKF(r.rejected == 1 && has_bytes(&out, cases[i].says), "case %lu", (unsigned long)i);
        coai_reply_free(&r);
        coai_buf_free(&out);
    }
}

/* ---- main ---------------------------------------------------------------------------- */

int main(void)
{
    char dir[] = "build/t_commands_XXXXXX", tdir[] = "/tmp/t_commands_XXXXXX";
    const char *b = mkdtemp(dir);
    if (!b) b = mkdtemp(tdir);
    if (!b) { fprintf(stderr, "no scratch directory\n"); return 1; }
    if (b[0] == '/') snprintf(base, sizeof base, "%s", b);
    else if (!getcwd(base, 200)) return 1;
    else snprintf(base + strlen(base), sizeof base - strlen(base), "/%s", b);
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(work, sizeof work, "%s/work", root);
    snprintf(outf, sizeof outf, "%s/out", base);
    have_rg = run_bash("/", "command -v rg") == 0;
    tools_init();
    test_hostile_paths();
    test_hostile_patterns();
    test_patch_injection();
    test_split_staging();
    test_split_shell_only();
    test_refusal_sent();
    rm_tree(base);
    cJSON_Delete(p_cmd);
    cJSON_Delete(p_command);
    cJSON_Delete(p_array);
    cJSON_Delete(p_gemini);
    cJSON_Delete(p_run);
    cJSON_Delete(p_cmds);
    cJSON_Delete(p_script);
    cJSON_Delete(p_exec);
    TEST_END();
}
