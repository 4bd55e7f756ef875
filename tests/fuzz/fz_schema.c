/* fz_schema.c - arbitrary bytes -> cJSON -> coai_encode_value -> the output must be
 * well-formed protobuf and exactly the Value the original would write (checked by
 * an independent walker, tests/pbwalk.h). Containers deeper than
 * COAI_MAX_VALUE_DEPTH must give COAI_ERR_TOO_BIG and leave the buffer unchanged. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"
#include "cJSON.h"
#include "../pbwalk.h"

static int fz_depth(const cJSON *j)
{
    const cJSON *c;
    int d = 0, k;
    if (!cJSON_IsArray(j) && !cJSON_IsObject(j)) return 0;
    for (c = j->child; c; c = c->next)
        if ((k = fz_depth(c)) > d) d = k;
    return d + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_buf b = { 0 };
    cJSON *j;
    int r, deep;
    if (size > 64 * 1024) return 0;
    j = cJSON_ParseWithLength((const char *)data, size);
    if (!j) return 0;
    deep = fz_depth(j) > COAI_MAX_VALUE_DEPTH;
    coai_buf_puts(&b, "P");
    r = coai_encode_value(&b, j);
    if (deep) {
        if (r != COAI_ERR_TOO_BIG || b.len != 1) abort();
    } else {
        if (r != COAI_OK) abort();
        if (!pbw_walk(b.data + 1, b.len - 1)) abort();
        if (!pbw_value_matches(b.data + 1, b.len - 1, j, 0)) abort();
    }
    if (b.data[0] != 'P') abort();
    coai_buf_free(&b);
    cJSON_Delete(j);
    return 0;
}
