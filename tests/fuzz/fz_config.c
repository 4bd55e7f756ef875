/* fz_config.c - host:port, https URLs, header values, zone and host names, cursor-agent build
 * ids and GetServerConfig answers from any bytes.
 * Properties: outputs stay inside their buffers and NUL-terminated; what is accepted as a
 * header value, zone name, host or URL part can never split an HTTP header; a parsed build
 * id compares equal to itself and "cli-" + it parses the same. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void no_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_str in;
    coai_url u;
    char host[64], port[8];
    size_t i;
    in.ptr = (const char *)data;
    in.len = size;
    if (coai_hostport_split(in, host, sizeof host, port, sizeof port, "443") == 0) {
        if (strlen(host) >= sizeof host || strlen(port) > 5 || atoi(port) > 65535) abort();
        no_ctl(host);
    }
    if (coai_url_parse_https(in, &u) == 0) {
        if (!u.host[0] || !u.port[0] || atoi(u.port) < 1) abort();
        no_ctl(u.host);
        no_ctl(u.authority);
        no_ctl(u.prefix);
        if (u.prefix[0] && (u.prefix[0] != '/' || u.prefix[strlen(u.prefix) - 1] == '/')) abort();
    }
    if (coai_header_value_ok(in))
        for (i = 0; i < size; i++)
            if (data[i] == '\r' || data[i] == '\n' || data[i] == 0) abort();
    if (coai_tz_name_ok(in))
        for (i = 0; i < size; i++)
            if (data[i] <= ' ' || data[i] == ':' || data[i] >= 0x7f) abort();
    {
        coai_cli_version v, w;
        coai_url au;
        if (coai_cli_version_parse(in, &v) == 0) {
            char buf[80];
            if (strlen(v.hash) < 4 || strlen(v.hash) > 40 || v.month < 1 || v.month > 12)
                abort();
            if (coai_cli_version_cmp(&v, &v) != 0) abort();
            if (size < 60 && (size < 4 || memcmp(data, "cli-", 4) != 0)) {
                memcpy(buf, "cli-", 4);
                memcpy(buf + 4, data, size);
                in.ptr = buf;
                in.len = size + 4;
                if (coai_cli_version_parse(in, &w) != 0 || coai_cli_version_cmp(&v, &w) != 0)
                    abort();
                in.ptr = (const char *)data;
                in.len = size;
            }
        }
        if (coai_server_config_agent_url((const char *)data, size, (int)(size & 1), &au) == 0) {
            if (!au.host[0]) abort();
            no_ctl(au.host);
            no_ctl(au.authority);
            no_ctl(au.prefix);
        }
    }
    if (coai_host_name_ok(in))
        for (i = 0; i < size; i++)
            if (data[i] <= ' ' || data[i] >= 0x7f || data[i] == '/') abort();
    return 0;
}
