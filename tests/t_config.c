/* t_config.c - values from flags, env and files: host:port, the upstream URL, header
 * values (no CR/LF injection), time-zone names, --allow-host names. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"

static int split(const char *in, const char *def, const char *host, const char *port)
{
    char h[64], p[8];
    memset(h, 0xaa, sizeof h);
    memset(p, 0xaa, sizeof p);
    if (coai_hostport_split(coai_str_c(in), h, sizeof h, p, sizeof p, def) != 0) return !host;
    return host && strcmp(h, host) == 0 && strcmp(p, port) == 0;
}

static void test_hostport(void)
{
    CHECK(split("127.0.0.1:18741", NULL, "127.0.0.1", "18741"));
    CHECK(split("localhost:0", NULL, "localhost", "0"));
    CHECK(split("[::1]:8080", NULL, "::1", "8080"));
    CHECK(split("[::1]", "443", "::1", "443"));
    CHECK(split("example.com", "443", "example.com", "443"));
    CHECK(split("0.0.0.0:00080", NULL, "0.0.0.0", "80"));
    CHECK(split(":18741", NULL, "", "18741"));             /* empty host: all interfaces */
    CHECK(split("example.com", NULL, NULL, NULL));         /* no port and no default */
    CHECK(split("::1", "443", NULL, NULL));                /* bare IPv6 */
    CHECK(split("a:1:2", NULL, NULL, NULL));
    CHECK(split("host:65536", NULL, NULL, NULL));
    CHECK(split("host:-1", NULL, NULL, NULL));
    CHECK(split("host:", NULL, NULL, NULL));
    CHECK(split("host:123456", NULL, NULL, NULL));
    CHECK(split("host:8x", NULL, NULL, NULL));
    CHECK(split("[::1]x", NULL, NULL, NULL));
    CHECK(split("[::1", "1", NULL, NULL));
    CHECK(split("[evil.com]:1", NULL, NULL, NULL));        /* brackets hold an IPv6 address */
    CHECK(split("a b:1", NULL, NULL, NULL));
    CHECK(split("user@host:1", NULL, NULL, NULL));
    CHECK(split("", "1", NULL, NULL));
    {   /* host longer than the buffer is refused, not cut */
        char h[8], p[8];
        CHECK(coai_hostport_split(coai_str_c("abcdefgh:1"), h, sizeof h, p, sizeof p, NULL) == -1);
        CHECK(coai_hostport_split(coai_str_c("abcdefg:1"), h, sizeof h, p, sizeof p, NULL) == 0);
    }
    {   /* an embedded NUL is refused */
        coai_str s = { "a\0b:1", 5 };
        char h[8], p[8];
        CHECK(coai_hostport_split(s, h, sizeof h, p, sizeof p, NULL) == -1);
    }
}

static void test_url(void)
{
    coai_url u;
    CHECK(coai_url_parse_https(coai_str_c("https://api2.cursor.sh"), &u) == 0);
    CHECK(!strcmp(u.host, "api2.cursor.sh") && !strcmp(u.port, "443")
          && !strcmp(u.authority, "api2.cursor.sh") && !strcmp(u.prefix, ""));
    CHECK(coai_url_parse_https(coai_str_c("HTTPS://localhost:8443/base//"), &u) == 0);
    CHECK(!strcmp(u.host, "localhost") && !strcmp(u.port, "8443")
          && !strcmp(u.authority, "localhost:8443") && !strcmp(u.prefix, "/base"));
    CHECK(coai_url_parse_https(coai_str_c("https://[::1]:9/"), &u) == 0);
    CHECK(!strcmp(u.host, "::1") && !strcmp(u.authority, "[::1]:9") && !strcmp(u.prefix, ""));
    CHECK(coai_url_parse_https(coai_str_c("http://api2.cursor.sh"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https:///x"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://u:p@host"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host:0"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host?x=1"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host/p?x"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host/p#f"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host/a b"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("https://host/a\r\nX: y"), &u) == -1);
    CHECK(coai_url_parse_https(coai_str_c("ftp://host"), &u) == -1);
}

static void test_values(void)
{
    CHECK(coai_header_value_ok(coai_str_c("cli-2025.11.25-d5b3271")));
    CHECK(coai_header_value_ok(coai_str_c("a b")));
    CHECK(!coai_header_value_ok(coai_str_c("cli\r\nX-Evil: 1")));
    CHECK(!coai_header_value_ok(coai_str_c("cli\n")));
    CHECK(!coai_header_value_ok(coai_str_c("")));
    CHECK(!coai_header_value_ok(coai_str_c(" lead")));
    CHECK(!coai_header_value_ok(coai_str_c("trail ")));
    CHECK(!coai_header_value_ok(coai_str_c("caf\xc3\xa9")));
    CHECK(!coai_header_value_ok(coai_str_c("del\x7f")));
    CHECK(coai_tz_name_ok(coai_str_c("Europe/Berlin")));
    CHECK(coai_tz_name_ok(coai_str_c("Asia/Kathmandu")));
    CHECK(coai_tz_name_ok(coai_str_c("Etc/GMT+5")));
    CHECK(coai_tz_name_ok(coai_str_c("America/Port-au-Prince")));
    CHECK(coai_tz_name_ok(coai_str_c("UTC")));
    CHECK(!coai_tz_name_ok(coai_str_c("UTC\r\nZ: 1")));
    CHECK(!coai_tz_name_ok(coai_str_c("/usr/share/zoneinfo/UTC")));
    CHECK(!coai_tz_name_ok(coai_str_c("../etc/passwd")));
    CHECK(!coai_tz_name_ok(coai_str_c("Europe/Ber lin")));
    CHECK(!coai_tz_name_ok(coai_str_c("")));
    CHECK(coai_host_name_ok(coai_str_c("cursor-oai.test")));
    CHECK(coai_host_name_ok(coai_str_c("[::1]")));
    CHECK(coai_host_name_ok(coai_str_c("Proxy.Internal")));
    CHECK(!coai_host_name_ok(coai_str_c("a/b")));
    CHECK(!coai_host_name_ok(coai_str_c("x.example:80")));
    CHECK(!coai_host_name_ok(coai_str_c("u@h.example")));
    CHECK(!coai_host_name_ok(coai_str_c("two words")));
    CHECK(!coai_host_name_ok(coai_str_c("[::1")));
    CHECK(!coai_host_name_ok(coai_str_c("")));
    {
        char big[300];
        memset(big, 'a', sizeof big);
        CHECK(coai_host_name_ok((coai_str){ big, 253 }));
        CHECK(!coai_host_name_ok((coai_str){ big, 254 }));
        CHECK(coai_header_value_ok((coai_str){ big, 300 }));
    }
}

/* CURSOR_OAI_TOOL_MODE and the allowed-tools header of a run (issue 31 item 1). */
static void test_tool_mode(void)
{
    coai_tool_mode m = (coai_tool_mode)77;
    coai_str n = coai_str_c("x"), v = coai_str_c("y");
    CHECK(coai_tool_mode_parse(coai_str_c(NULL), &m) == 0 && m == COAI_TOOLS_CLIENT);
    m = (coai_tool_mode)77;
    CHECK(coai_tool_mode_parse(coai_str_c(""), &m) == 0 && m == COAI_TOOLS_CLIENT);
    CHECK(coai_tool_mode_parse(coai_str_c("client"), &m) == 0 && m == COAI_TOOLS_CLIENT);
    CHECK(coai_tool_mode_parse(coai_str_c("cursor"), &m) == 0 && m == COAI_TOOLS_CURSOR);
    m = (coai_tool_mode)77;
    CHECK(coai_tool_mode_parse(coai_str_c("Cursor"), &m) == -1 && m == (coai_tool_mode)77);
    CHECK(coai_tool_mode_parse(coai_str_c("clients"), &m) == -1);
    CHECK(coai_tool_mode_parse(coai_str_c("client "), &m) == -1);
    CHECK(coai_tool_mode_parse(coai_str_c("mcp"), &m) == -1);
    {   /* an embedded NUL is not "client" */
        coai_str s = { "clien\0", 6 };
        CHECK(coai_tool_mode_parse(s, &m) == -1);
    }
    /* client mode with tools: the header, exactly */
    CHECK(coai_run_tools_header(COAI_TOOLS_CLIENT, 1, &n, &v) == 1);
    CHECK(n.len == 28 && memcmp(n.ptr, "x-cursor-agent-allowed-tools", 28) == 0);
    CHECK(v.len == 37 && memcmp(v.ptr, "mcp_tool_call,get_mcp_tools_tool_call", 37) == 0);
    CHECK(coai_run_tools_header(COAI_TOOLS_CLIENT, 40, NULL, NULL) == 1);
    /* no tools (none sent, or tool_choice "none"), or cursor mode: none, empty views */
    CHECK(coai_run_tools_header(COAI_TOOLS_CLIENT, 0, &n, &v) == 0 && n.len == 0 && v.len == 0);
    n = coai_str_c("x");
    CHECK(coai_run_tools_header(COAI_TOOLS_CURSOR, 3, &n, &v) == 0 && n.len == 0 && v.len == 0);
    CHECK(coai_run_tools_header(COAI_TOOLS_CURSOR, 0, NULL, NULL) == 0);
    /* which execs are Cursor's own tool calls (counted when they come despite the header) */
    CHECK(coai_exec_is_native_tool(COAI_EXEC_SHELL));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_SHELL_STREAM));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_READ));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_WRITE));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_DELETE));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_LS));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_GREP));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_FETCH));
    CHECK(coai_exec_is_native_tool(COAI_EXEC_SUBAGENT));
    CHECK(coai_exec_is_native_tool(45) && coai_exec_is_native_tool(52));
    CHECK(!coai_exec_is_native_tool(COAI_EXEC_MCP));
    CHECK(!coai_exec_is_native_tool(COAI_EXEC_REQUEST_CONTEXT));
    CHECK(!coai_exec_is_native_tool(COAI_EXEC_MCP_STATE));
    CHECK(!coai_exec_is_native_tool(COAI_EXEC_LIST_MCP_RESOURCES));
    CHECK(!coai_exec_is_native_tool(42) && !coai_exec_is_native_tool(44));
    CHECK(!coai_exec_is_native_tool(53) && !coai_exec_is_native_tool(0));
    CHECK(!coai_exec_is_native_tool(-1) && !coai_exec_is_native_tool(60));
}

int main(void)
{
    test_hostport();
    test_url();
    test_values();
    test_tool_mode();
    TEST_END();
}
