/* fz_json_values.c - coai_json_values (the count of JSON values a body holds, taken before
 * parsing it, for the in-flight budget and COAI_MAX_JSON_VALUES) on any bytes.
 * Properties: never reads past the input; at most one value per input byte (plus the top
 * one); for input that cJSON parses (nesting within its limit) the count is exactly the
 * number of items in the tree, so neither the budget nor the cap can be dodged by a body's
 * shape. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fz_items(const cJSON *j)
{
    size_t n = 1;
    const cJSON *c;
    for (c = j->child; c; c = c->next) n += fz_items(c);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = (char *)malloc(size + 1);
    size_t n;
    cJSON *j;
    if (!copy) return 0;
    memcpy(copy, data, size);          /* an exact-size heap copy: ASan sees any overread */
    copy[size] = 0;
    n = coai_json_values(copy, size);
    if (n > size + 1) abort();
    j = cJSON_ParseWithLength(copy, size);
    if (j && n != fz_items(j)) abort();
    cJSON_Delete(j);
    free(copy);
    return 0;
}
