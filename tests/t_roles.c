/* t_roles.c - Cursor's native execs mapped to the client's tools by what each tool does,
 * read from its schema and description, not by its name (issue 31 item 2): tool sets of
 * agents nobody here uses (a write tool `create {path, file_text}`, a multi-path reader,
 * an editor with a command enum, shell-only clients taking `cmd`, `script`, a list of
 * commands), each exec kind to the right tool with the right arguments; tools whose names
 * say one thing and schemas another; the common agents' tools keep their roles; and the
 * sentence Cursor gets for an exec no tool can serve. The commands themselves run under
 * real bash in t_commands. */
#define CURSOR_OAI_IMPLEMENTATION
#include "cursor_oai.h"
#include "test.h"
#include <cJSON.h>

#define NT 16
static cJSON *sch[64];
static size_t nsch;

/* A tool: name, description, parameters (JSON text, or NULL for none) */
static coai_tool tool(const char *name, const char *desc, const char *params)
{
    coai_tool t;
    memset(&t, 0, sizeof t);
    t.name = coai_str_c(name);
    t.description = coai_str_c(desc ? desc : "");
    if (params) {
        cJSON *j = cJSON_Parse(params);
        if (!j) fprintf(stderr, "bad schema: %s\n", params);
        if (nsch < sizeof sch / sizeof sch[0]) sch[nsch++] = j;
        t.parameters = j;
    }
    return t;
}

static void role_is(const coai_tool *t, const char *want, int line)
{
    const char *got = coai_tool_role(t);
    CHECKF(want ? got && !strcmp(got, want) : got == NULL, "line %d: %.*s: role %s, want %s",
           line, (int)t->name.len, t->name.ptr, got ? got : "(none)", want ? want : "(none)");
}

/* Map ex with dialect d onto tools; want_tool NULL: not mapped. args compared exactly. */
static void map_is(coai_dialect d, const coai_exec *ex, const coai_tool *tools, size_t n,
                   const char *want_tool, const char *want_args, int line)
{
    coai_tool_call tc;
    int r;
    memset(&tc, 0, sizeof tc);
    r = coai__exec_map_of(d)(ex, tools, n, coai_str_c("/proxy/ws"), &tc);
    if (!want_tool) {
        CHECKF(r == 0, "line %d: r=%d %s", line, r, tc.args.data ? (char *)tc.args.data : "");
    } else {
        CHECKF(r == 1 && coai_str_eq(tools[tc.tool].name, want_tool), "line %d: r=%d tool %.*s",
               line, r, r == 1 ? (int)tools[tc.tool].name.len : 0,
               r == 1 ? tools[tc.tool].name.ptr : "");
        CHECKF(r == 1 && tc.args.len == strlen(want_args)
                   && !memcmp(tc.args.data, want_args, tc.args.len),
               "line %d: args %s\n  want %s", line, tc.args.data ? (char *)tc.args.data : "",
               want_args);
    }
    coai_buf_free(&tc.args);
}

static coai_exec exec_of(coai_exec_kind k, const char *path)
{
    coai_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.kind = k;
    ex.id = 5;
    ex.exec_id = coai_str_c("exec-5");
    if (path) {
        ex.path = coai_str_c(path);
        ex.has_path = 1;
    }
    return ex;
}

#define OBJ(props) "{\"type\":\"object\",\"properties\":{" props "}"
#define STR "{\"type\":\"string\"}"
#define STRS "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}"
#define CLOSED ",\"additionalProperties\":false}"

/* ---- roles ------------------------------------------------------------------------------ */

static void test_roles_common_agents(void)
{
    /* Claude Code's tools, with their descriptions' first sentences */
    coai_tool t[NT];
    size_t i = 0;
    t[i++] = tool("Bash", "Executes a given bash command in a persistent shell session.",
                  OBJ("\"command\":" STR ",\"description\":" STR ",\"timeout\":{\"type\":"
                      "\"number\"}") ",\"required\":[\"command\"]}");
    t[i++] = tool("Read", "Reads a file from the local filesystem. You can access any file "
                  "directly by using this tool. To read a directory, use an ls command.",
                  OBJ("\"file_path\":" STR ",\"offset\":{\"type\":\"number\"},\"limit\":"
                      "{\"type\":\"number\"}") ",\"required\":[\"file_path\"]}");
    t[i++] = tool("Write", "Writes a file to the local filesystem.",
                  OBJ("\"file_path\":" STR ",\"content\":" STR) "}");
    t[i++] = tool("Edit", "Performs exact string replacements in files.",
                  OBJ("\"file_path\":" STR ",\"old_string\":" STR ",\"new_string\":" STR
                      ",\"replace_all\":{\"type\":\"boolean\"}") "}");
    t[i++] = tool("Glob", "- Fast file pattern matching tool that works with any codebase size",
                  OBJ("\"pattern\":" STR ",\"path\":" STR) ",\"required\":[\"pattern\"]}");
    t[i++] = tool("Grep", "A powerful search tool built on ripgrep",
                  OBJ("\"pattern\":" STR ",\"path\":" STR ",\"glob\":" STR ",\"output_mode\":"
                      "{\"type\":\"string\",\"enum\":[\"content\",\"files_with_matches\","
                      "\"count\"]}") ",\"required\":[\"pattern\"]}");
    t[i++] = tool("WebFetch", "- Fetches content from a specified URL and processes it using an "
                  "AI model", OBJ("\"url\":" STR ",\"prompt\":" STR) "}");
    t[i++] = tool("WebSearch", "- Allows Claude to search the web and use the results",
                  OBJ("\"query\":" STR ",\"allowed_domains\":" STRS) "}");
    t[i++] = tool("TodoWrite", "Use this tool to create and manage a structured task list",
                  OBJ("\"todos\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}") "}");
    t[i++] = tool("NotebookEdit", "Completely replaces the contents of a specific cell",
                  OBJ("\"notebook_path\":" STR ",\"new_source\":" STR) "}");
    t[i++] = tool("SlashCommand", "Execute a slash command within the main conversation",
                  OBJ("\"command\":" STR) "}");
    role_is(&t[0], "shell", __LINE__);
    role_is(&t[1], "read", __LINE__);
    role_is(&t[2], "write", __LINE__);
    role_is(&t[3], "edit", __LINE__);
    role_is(&t[4], "glob", __LINE__);
    role_is(&t[5], "grep", __LINE__);
    role_is(&t[6], "fetch", __LINE__);
    role_is(&t[7], NULL, __LINE__);            /* a web search is no grep */
    role_is(&t[8], NULL, __LINE__);
    role_is(&t[9], NULL, __LINE__);
    {
        /* a shell exec goes to Bash, not to SlashCommand (also a command string) */
        coai_exec ex = exec_of(COAI_EXEC_SHELL, NULL);
        ex.command = coai_str_c("ls");
        map_is(COAI_DIALECT_ANTHROPIC, &ex, t, i, "Bash",
               "{\"command\":\"ls\",\"description\":\"Execute shell command: ls\"}", __LINE__);
    }
    /* Codex: a view_image {path} reads no file; write_stdin runs no command */
    t[0] = tool("view_image", "Attach a local image (by filesystem path) to the conversation "
                "context for this turn.", OBJ("\"path\":" STR) CLOSED);
    t[1] = tool("write_stdin", "Writes characters to an existing unified exec session",
                OBJ("\"session_id\":{\"type\":\"number\"},\"chars\":" STR)
                ",\"required\":[\"session_id\"]}");
    role_is(&t[0], NULL, __LINE__);
    role_is(&t[1], NULL, __LINE__);
    /* OpenCode and Gemini CLI's listing tools */
    t[0] = tool("list", "Lists files and directories in a given path.",
                OBJ("\"path\":" STR ",\"ignore\":" STRS) "}");
    t[1] = tool("list_directory", "Lists the names of files and subdirectories directly within "
                "a specified directory path.", OBJ("\"dir_path\":" STR) ",\"required\":"
                "[\"dir_path\"]}");
    t[2] = tool("read_file", "Reads and returns the content of a specified file.",
                OBJ("\"absolute_path\":" STR ",\"offset\":{\"type\":\"number\"}")
                ",\"required\":[\"absolute_path\"]}");
    role_is(&t[0], "list", __LINE__);
    role_is(&t[1], "list", __LINE__);
    role_is(&t[2], "read", __LINE__);
}

/* The tools of real agents as they sent them (tests/e2e/fixtures: Claude Code, Codex,
 * Gemini CLI): the file tools and shells keep their roles, and none of their other tools
 * (agents, skills, workflows, web search, images, todos, tool search ...) takes one. */
static const char *const FIXTURES[] = {
    "tests/e2e/fixtures/claude-code-2.1.331-print.json",
    "tests/e2e/fixtures/codex-0.169.0-task-gpt-5.5.json",
    "tests/e2e/fixtures/codex-0.169.0-exec.json",
    "tests/e2e/fixtures/gemini-cli-0.61.0-task.json", NULL };
static const char *const FIXTURE_ROLES[][2] = {
    { "Bash", "shell" }, { "Read", "read" }, { "Write", "write" }, { "Edit", "edit" },
    { "exec_command", "shell" }, { "list_directory", "list" }, { "read_file", "read" },
    { "grep_search", "grep" }, { "glob", "glob" }, { "write_file", "write" },
    { "run_shell_command", "shell" }, { NULL, NULL } };

static void fixture_walk(const cJSON *o, int *seen)
{
    const cJSON *c, *p;
    if (cJSON_IsObject(o)) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name");
        p = cJSON_GetObjectItemCaseSensitive(o, "input_schema");
        if (!p) p = cJSON_GetObjectItemCaseSensitive(o, "parameters");
        if (!p) p = cJSON_GetObjectItemCaseSensitive(o, "parametersJsonSchema");
        if (cJSON_IsString(n) && cJSON_IsObject(p)) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "description");
            const char *want = NULL;
            size_t k;
            coai_tool t;
            memset(&t, 0, sizeof t);
            t.name = coai_str_c(n->valuestring);
            t.description = coai_str_c(cJSON_IsString(d) ? d->valuestring : "");
            t.parameters = p;
            for (k = 0; FIXTURE_ROLES[k][0]; k++)
                if (!strcmp(FIXTURE_ROLES[k][0], n->valuestring)) want = FIXTURE_ROLES[k][1];
            role_is(&t, want, __LINE__);
            (*seen)++;
        }
    }
    cJSON_ArrayForEach(c, o) fixture_walk(c, seen);
}

static void test_roles_fixtures(void)
{
    size_t i;
    for (i = 0; FIXTURES[i]; i++) {
        size_t n = 0;
        char *txt = test_read_file(FIXTURES[i], &n);
        cJSON *j = txt ? cJSON_ParseWithLength(txt, n) : NULL;
        int seen = 0;
        CHECKF(j != NULL, "%s (run from the repository's root)", FIXTURES[i]);
        fixture_walk(j, &seen);
        CHECKF(seen >= 5, "%s: %d tools", FIXTURES[i], seen);
        cJSON_Delete(j);
        free(txt);
    }
}

static void test_roles_by_schema(void)
{
    coai_tool t;
    /* the schema decides, whatever the name says */
    t = tool("read_file", NULL, OBJ("\"command\":" STR) "}");
    role_is(&t, "shell", __LINE__);
    t = tool("bash", NULL, OBJ("\"path\":" STR ",\"content\":" STR) "}");
    role_is(&t, "write", __LINE__);
    t = tool("write", NULL, OBJ("\"url\":" STR) "}");
    role_is(&t, "fetch", __LINE__);
    t = tool("run", NULL, OBJ("\"cmd\":" STR) ",\"required\":[\"cmd\"]}");
    role_is(&t, "shell", __LINE__);
    t = tool("bash", NULL, OBJ("\"script\":" STR) "}");
    role_is(&t, "shell", __LINE__);
    t = tool("run_commands", NULL, OBJ("\"commands\":" STRS) "}");
    role_is(&t, "shell", __LINE__);
    t = tool("create", NULL, OBJ("\"path\":" STR ",\"file_text\":" STR) "}");
    role_is(&t, "write", __LINE__);
    t = tool("read_files", NULL, OBJ("\"paths\":" STRS) "}");
    role_is(&t, "read", __LINE__);
    t = tool("editor", NULL, OBJ("\"command\":{\"type\":\"string\",\"enum\":[\"view\",\"create\","
             "\"str_replace\",\"insert\"]},\"path\":" STR ",\"old_str\":" STR ",\"new_str\":"
             STR ",\"file_text\":" STR) "}");
    role_is(&t, "editor", __LINE__);
    t = tool("fs", "Deletes a file.", OBJ("\"target_file\":" STR) "}");
    role_is(&t, "delete", __LINE__);
    t = tool("fs", "Reads a file.", OBJ("\"target_file\":" STR) "}");
    role_is(&t, "read", __LINE__);
    t = tool("fs", "Lists a folder.", OBJ("\"folder\":" STR) "}");
    role_is(&t, "list", __LINE__);
    /* a path and something else it needs: not a reader */
    t = tool("read_lines", NULL, OBJ("\"path\":" STR ",\"session\":" STR) ",\"required\":"
             "[\"path\",\"session\"]}");
    role_is(&t, NULL, __LINE__);
    /* a query it needs a count for: no grep (Claude Code's ToolSearch) */
    t = tool("ToolSearch", "Fetches full schema definitions for deferred tools.",
             OBJ("\"query\":" STR ",\"max_results\":{\"type\":\"number\"}")
             ",\"required\":[\"query\",\"max_results\"]}");
    role_is(&t, NULL, __LINE__);
    /* nothing to go by */
    t = tool("get_weather", "Get the weather for a city.", OBJ("\"location\":" STR) "}");
    role_is(&t, NULL, __LINE__);
}

/* ---- each exec kind onto the tool sets of agents nobody here uses ------------------------ */

static void test_map_editor_agent(void)
{
    /* read_files {paths[]}, editor {command enum, path, old_str, new_str, file_text},
     * run_commands {commands[]} */
    coai_tool t[3];
    coai_exec ex;
    coai_dialect d;
    t[0] = tool("read_files", "Read the contents of one or more files.",
                OBJ("\"paths\":" STRS) ",\"required\":[\"paths\"]" CLOSED);
    t[1] = tool("editor", "View, create and edit files.",
                OBJ("\"command\":{\"type\":\"string\",\"enum\":[\"view\",\"create\","
                    "\"str_replace\",\"insert\"]},\"path\":" STR ",\"old_str\":" STR
                    ",\"new_str\":" STR ",\"file_text\":" STR) ",\"required\":[\"command\","
                "\"path\"]" CLOSED);
    t[2] = tool("run_commands", "Run shell commands in order.",
                OBJ("\"commands\":" STRS) ",\"required\":[\"commands\"]" CLOSED);
    for (d = COAI_DIALECT_OPENAI_CHAT; d <= COAI_DIALECT_GEMINI; d = (coai_dialect)(d + 1)) {
        ex = exec_of(COAI_EXEC_READ, "/w/a.txt");
        map_is(d, &ex, t, 3, "read_files", "{\"paths\":[\"/w/a.txt\"]}", __LINE__);
        /* the editor reads when there is no reader */
        map_is(d, &ex, t + 1, 2, "editor", "{\"command\":\"view\",\"path\":\"/w/a.txt\"}",
               __LINE__);
        ex = exec_of(COAI_EXEC_WRITE, "/w/it's.txt");
        ex.content = coai_str_c("x\n");
        map_is(d, &ex, t, 3, "editor", "{\"command\":\"create\",\"path\":\"/w/it's.txt\","
               "\"file_text\":\"x\\n\"}", __LINE__);
        ex = exec_of(COAI_EXEC_SHELL, NULL);
        ex.command = coai_str_c("make test");
        map_is(d, &ex, t, 3, "run_commands", "{\"commands\":[\"make test\"]}", __LINE__);
        /* list, grep, glob, delete: through the shell, quoted */
        ex = exec_of(COAI_EXEC_LS, "-x");
        map_is(d, &ex, t, 3, "run_commands", "{\"commands\":[\"ls -la -- './-x'\"]}",
               __LINE__);
        ex = exec_of(COAI_EXEC_DELETE, "/w/it's.txt");
        map_is(d, &ex, t, 3, "run_commands", "{\"commands\":[\"wc -c < '/w/it'\\\\''s.txt' && "
               "rm -- '/w/it'\\\\''s.txt'\"]}", __LINE__);
    }
    d = COAI_DIALECT_ANTHROPIC;
    ex = exec_of(COAI_EXEC_GREP, "/w");
    ex.pattern = coai_str_c("-e TODO");
    map_is(d, &ex, t, 3, "run_commands", "{\"commands\":[\"grep -rnE -e '-e TODO' -- '/w'\"]}",
           __LINE__);
    ex.pattern = coai_str_c("");
    ex.glob = coai_str_c("src/*.c");
    map_is(d, &ex, t, 3, "run_commands", "{\"commands\":[\"find '/w' -type f -name '*.c'\"]}",
           __LINE__);
    /* a fetch: nothing takes a URL */
    ex = exec_of(COAI_EXEC_FETCH, NULL);
    ex.url = coai_str_c("https://example.com/");
    map_is(d, &ex, t, 3, NULL, NULL, __LINE__);
}

static void test_map_other_agents(void)
{
    coai_tool t[4];
    coai_exec ex;
    /* a write tool called create, a multi-path reader, a delete tool and a fetcher */
    t[0] = tool("create", "Create a new file with the given text.",
                OBJ("\"path\":" STR ",\"file_text\":" STR) ",\"required\":[\"path\","
                "\"file_text\"]}");
    t[1] = tool("open_files", NULL, OBJ("\"file_paths\":" STRS) "}");
    t[2] = tool("trash", "Removes a file.", OBJ("\"file\":" STR) "}");
    t[3] = tool("http_get", "Fetches a URL and returns its body.", OBJ("\"url\":" STR) "}");
    ex = exec_of(COAI_EXEC_WRITE, "/w/a.txt");
    ex.content = coai_str_c("hello");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 4, "create",
           "{\"path\":\"/w/a.txt\",\"file_text\":\"hello\"}", __LINE__);
    ex = exec_of(COAI_EXEC_READ, "/w/a.txt");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 4, "open_files", "{\"file_paths\":[\"/w/a.txt\"]}",
           __LINE__);
    ex = exec_of(COAI_EXEC_DELETE, "/w/a.txt");
    map_is(COAI_DIALECT_ANTHROPIC, &ex, t, 4, "trash", "{\"file\":\"/w/a.txt\"}", __LINE__);
    ex = exec_of(COAI_EXEC_FETCH, NULL);
    ex.url = coai_str_c("https://example.com/a");
    map_is(COAI_DIALECT_GEMINI, &ex, t, 4, "http_get", "{\"url\":\"https://example.com/a\"}",
           __LINE__);
    /* no list tool and no shell: refused */
    ex = exec_of(COAI_EXEC_LS, "/w");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 4, NULL, NULL, __LINE__);

    /* shell-only clients: run {cmd} (closed), bash {script}, execute_command {command, cwd} */
    t[0] = tool("run", NULL, OBJ("\"cmd\":" STR) ",\"required\":[\"cmd\"]" CLOSED);
    t[1] = tool("bash", "Run a bash script.", OBJ("\"script\":" STR) CLOSED);
    t[2] = tool("execute_command", "Execute a CLI command on the system.",
                OBJ("\"command\":" STR ",\"cwd\":" STR) ",\"required\":[\"command\"]" CLOSED);
    ex = exec_of(COAI_EXEC_SHELL, NULL);
    ex.command = coai_str_c("echo hi");
    ex.cwd = coai_str_c("/w");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 1, "run", "{\"cmd\":\"echo hi\"}", __LINE__);
    map_is(COAI_DIALECT_ANTHROPIC, &ex, t + 1, 1, "bash", "{\"script\":\"echo hi\"}", __LINE__);
    map_is(COAI_DIALECT_RESPONSES, &ex, t + 2, 1, "execute_command",
           "{\"command\":\"echo hi\",\"cwd\":\"/w\"}", __LINE__);
    ex = exec_of(COAI_EXEC_READ, "/w/$(x).txt");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 1, "run", "{\"cmd\":\"cat -- '/w/$(x).txt'\"}",
           __LINE__);
    map_is(COAI_DIALECT_GEMINI, &ex, t + 1, 1, "bash", "{\"script\":\"cat -- '/w/$(x).txt'\"}",
           __LINE__);
    map_is(COAI_DIALECT_RESPONSES, &ex, t + 2, 1, "execute_command",
           "{\"command\":\"cat -- '/w/$(x).txt'\"}", __LINE__);
    ex = exec_of(COAI_EXEC_WRITE, "-a.txt");
    ex.content = coai_str_c("it's\n");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 1, "run", "{\"cmd\":\"mkdir -p -- \\\"$(dirname -- "
           "'./-a.txt')\\\" && printf '%s' 'it'\\\\''s\\n' > './-a.txt'\"}", __LINE__);
    ex = exec_of(COAI_EXEC_LS, NULL);
    ex.has_path = 0;
    map_is(COAI_DIALECT_ANTHROPIC, &ex, t + 1, 1, "bash", "{\"script\":\"ls -la -- '.'\"}",
           __LINE__);
    /* a NUL in a path: refused with the quoting layer's sentence */
    {
        coai_tool_call tc;
        memset(&tc, 0, sizeof tc);
        ex = exec_of(COAI_EXEC_READ, NULL);
        ex.path.ptr = "a\0b";
        ex.path.len = 3;
        CHECK(coai__exec_map_of(COAI_DIALECT_OPENAI_CHAT)(&ex, t, 1, coai_str_c(""), &tc) == 0
              && tc.refusal && strstr(tc.refusal, "NUL"));
        coai_buf_free(&tc.args);
    }
}

/* ---- the sentence for an exec no tool serves ----------------------------------------- */

static void test_refusal(void)
{
    coai_tool t[3];
    coai_exec ex;
    coai_buf b = { 0 };
    t[0] = tool("editor", NULL, OBJ("\"action\":{\"type\":\"string\",\"enum\":[\"view\","
                "\"create\",\"str_replace\"]},\"path\":" STR ",\"file_text\":" STR) "}");
    t[1] = tool("get_weather", NULL, OBJ("\"location\":" STR) "}");
    t[2] = tool("lookup", NULL, OBJ("\"id\":" STR) "}");
    ex = exec_of(COAI_EXEC_LS, "/w");
    map_is(COAI_DIALECT_ANTHROPIC, &ex, t, 3, NULL, NULL, __LINE__);
    CHECK(coai_exec_refusal(&b, &ex, t, 3) == 0);
    CHECKF(b.data && strstr((char *)b.data, "This tool (ls_args) is not available here: none of "
                            "the client's tools can list a directory (its tools can: view, "
                            "create and edit files; and 2 other tools of its own). Do this step "
                            "with one of those tools") != NULL, "%s", b.data);
    coai_buf_reset(&b);
    ex = exec_of(COAI_EXEC_SHELL, NULL);
    ex.command = coai_str_c("ls");
    CHECK(coai_exec_refusal(&b, &ex, NULL, 0) == 0);
    CHECKF(b.data && strstr((char *)b.data, "none of the client's tools can run a shell command, "
                            "and it gave none. Answer from what you already know") != NULL, "%s",
           b.data);
    /* the editor's action enum serves reads and writes */
    ex = exec_of(COAI_EXEC_READ, "/w/a");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 3, "editor", "{\"action\":\"view\",\"path\":"
           "\"/w/a\"}", __LINE__);
    coai_buf_free(&b);
}

/* Copilot CLI's kind of tool set: a bash requiring a description, a list_bash that takes
 * nothing (no shell: it cannot take a command), a view of "files and directories" that
 * scores as a listing but reads when no reader is there. */
static void test_map_copilot_like(void)
{
    coai_tool t[3];
    coai_exec ex;
    coai_tool more[2];
    t[0] = tool("list_bash", "Lists the active shell sessions.", OBJ("") "}");
    t[1] = tool("view", "Tool for viewing files and directories.",
                OBJ("\"path\":" STR ",\"view_range\":{\"type\":\"array\"}") ","
                "\"required\":[\"path\"]}");
    t[2] = tool("bash", "Runs a command in a shell.",
                OBJ("\"command\":" STR ",\"description\":" STR ",\"shellId\":" STR)
                ",\"required\":[\"command\",\"description\"]}");
    role_is(&t[0], NULL, __LINE__);
    role_is(&t[2], "shell", __LINE__);
    ex = exec_of(COAI_EXEC_READ, "/w/a.txt");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 3, "view", "{\"path\":\"/w/a.txt\"}", __LINE__);
    ex = exec_of(COAI_EXEC_SHELL, NULL);
    ex.command = coai_str_c("ls");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, t, 2, NULL, NULL, __LINE__);   /* no bash: no shell */
    /* read_agent {agent_id} (required) is no reader: view still reads */
    more[0] = tool("read_agent", "Reads the output of a background agent.",
                   OBJ("\"agent_id\":" STR) ",\"required\":[\"agent_id\"]}");
    more[1] = t[1];
    role_is(&more[0], NULL, __LINE__);
    ex = exec_of(COAI_EXEC_READ, "/w/a.txt");
    map_is(COAI_DIALECT_OPENAI_CHAT, &ex, more, 2, "view", "{\"path\":\"/w/a.txt\"}", __LINE__);
}

int main(void)
{
    size_t i;
    test_roles_common_agents();
    test_roles_fixtures();
    test_roles_by_schema();
    test_map_editor_agent();
    test_map_other_agents();
    test_refusal();
    test_map_copilot_like();
    for (i = 0; i < nsch; i++) cJSON_Delete(sch[i]);
    TEST_END();
}
