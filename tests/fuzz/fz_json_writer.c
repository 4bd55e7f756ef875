/* fz_json_writer.c - the common writers on arbitrary bytes.
 * Byte 0 picks the writer; the rest is its input. Beyond "no crash", every property that the
 * API promises is checked and a violation aborts:
 *   json string: output is valid UTF-8, parses as exactly one JSON string, and valid UTF-8
 *                input (without NUL) comes back unchanged;
 *   json number: the text reads back as the same double and is valid JSON;
 *   base64:      both alphabets round-trip through coai_base64_decode;
 *   decode:      coai_base64_decode never writes past out_cap;
 *   capped buf:  a coai_buf with a small max never grows past it. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"
#include "cJSON.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_json_string(const uint8_t *d, size_t n)
{
    coai_buf b = {0};
    cJSON *j;
    if (coai_json_str_append(&b, (const char *)d, n)) abort();
    if (coai_utf8_valid_prefix((const char *)b.data, b.len) != b.len) abort();
    j = cJSON_ParseWithLength((const char *)b.data, b.len);
    if (!j || !cJSON_IsString(j)) abort();
    if (coai_utf8_valid_prefix((const char *)d, n) == n && !memchr(d, 0, n) &&
        (strlen(j->valuestring) != n || memcmp(j->valuestring, d, n) != 0))
        abort();
    cJSON_Delete(j);
    coai_buf_free(&b);
}

static void check_json_number(const uint8_t *d, size_t n)
{
    coai_buf b = {0};
    double v;
    char *end;
    cJSON *j;
    if (n < sizeof v) return;
    memcpy(&v, d, sizeof v);
    if (coai_json_num_append(&b, v)) abort();
    j = cJSON_ParseWithLength((const char *)b.data, b.len);
    if (!j) abort();
    if (v == v && v - v == 0) {           /* finite: must read back exactly */
        if (strtod((const char *)b.data, &end) != v || *end) abort();
        if (!cJSON_IsNumber(j)) abort();
    } else if (!cJSON_IsNull(j)) {
        abort();
    }
    cJSON_Delete(j);
    coai_buf_free(&b);
}

static void check_base64(const uint8_t *d, size_t n)
{
    coai_buf b = {0};
    unsigned char *back = (unsigned char *)malloc(n + 1);
    int url;
    long got;
    if (!back) return;
    for (url = 0; url < 2; url++) {
        coai_buf_reset(&b);
        if (coai_base64_append(&b, d, n, url)) abort();
        got = coai_base64_decode((const char *)b.data, b.len, back, n);
        if (got < 0 || (size_t)got != n || (n && memcmp(back, d, n) != 0)) abort();
    }
    free(back);
    coai_buf_free(&b);
}

static void check_decode(const uint8_t *d, size_t n)
{
    size_t cap = n ? d[0] % 64 : 0;
    unsigned char *out = (unsigned char *)malloc(cap ? cap : 1);  /* exact: ASan sees overruns */
    long got;
    if (!out) return;
    got = coai_base64_decode(n ? (const char *)d + 1 : "", n ? n - 1 : 0, out, cap);
    if (got > (long)cap) abort();
    free(out);
}

static void check_capped(const uint8_t *d, size_t n)
{
    coai_buf b = {0};
    size_t i;
    char u[37];
    b.max = (n ? d[0] : 0) + 1u;   /* max 0 would mean "no cap" */
    for (i = 1; i < n; i += 7) {
        size_t len = n - i < 7 ? n - i : 7;
        switch (d[i] % 5) {
        case 0: coai_json_str_append(&b, (const char *)d + i, len); break;
        case 1: coai_hex_append(&b, d + i, len); break;
        case 2: coai_base64_append(&b, d + i, len, d[i] & 1); break;
        case 3: coai_buf_printf(&b, "%.*s", (int)len, (const char *)d + i); break;
        default:
            if (n - i >= 16) { coai_uuid_format(u, d + i); coai_buf_append(&b, u, 36); }
        }
        if (b.len > b.max) abort();
        if (b.err && (d[i] & 0x80)) coai_buf_reset(&b);
    }
    coai_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    switch (data[0] % 5) {
    case 0: check_json_string(data + 1, size - 1); break;
    case 1: check_json_number(data + 1, size - 1); break;
    case 2: check_base64(data + 1, size - 1); break;
    case 3: check_decode(data + 1, size - 1); break;
    default: check_capped(data + 1, size - 1); break;
    }
    return 0;
}
