/* fz_shape.c - fuzz coai_pb_shape and coai_msg_unknowns (issue 30 item 3): arbitrary bytes as
 * an AgentServerMessage, an AgentClientMessage or a message of no known type. The redacted
 * shape must never carry a byte of the input: every run of letters in it is the name of a
 * message in the header's table, everything else is digits and the grammar's punctuation.
 * The first byte picks the type and the output cap. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

static int fz_is_name(const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < sizeof coai__known_msgs / sizeof coai__known_msgs[0]; i++)
        if (strlen(coai__known_msgs[i].name) == n && memcmp(coai__known_msgs[i].name, s, n) == 0)
            return 1;
    return 0;
}

static void fz_check_shape(const coai_buf *b, size_t start)
{
    const char *s = (const char *)b->data + start;
    size_t n = b->len - start, i = 0;
    while (i < n) {
        char c = s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
            size_t j = i;
            while (j < n && ((s[j] >= 'A' && s[j] <= 'Z') || (s[j] >= 'a' && s[j] <= 'z'))) j++;
            if (!fz_is_name(s + i, j - i)) __builtin_trap();
            if (j >= n || s[j] != '{') __builtin_trap();   /* a name opens a shape */
            i = j;
            continue;
        }
        if (!((c >= '0' && c <= '9') || c == '{' || c == '}' || c == '[' || c == ']'
              || c == '/' || c == '!' || c == '?' || c == '.' || c == ' '))
            __builtin_trap();
        i++;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const types[] = { "AgentServerMessage", "AgentClientMessage", NULL,
                                         "InteractionUpdate" };
    coai_unknown u[4], all[64];
    coai_buf b = { 0 };
    size_t k, k2, i, cap;
    coai_result r;
    unsigned char *copy;
    if (size < 1) return 0;
    cap = (data[0] >> 2) & 1 ? 64 : 0;
    copy = (unsigned char *)malloc(size - 1 ? size - 1 : 1);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    coai_buf_puts(&b, "x");             /* the shape appends: what was there stays */
    r = coai_pb_shape(&b, types[data[0] & 3], copy, size - 1, cap);
    if (r != COAI_OK && r != COAI_ERR_PROTO && r != COAI_ERR_NOMEM) __builtin_trap();
    if (!b.err) {
        if (b.data[0] != 'x') __builtin_trap();
        fz_check_shape(&b, 1);
        /* a capped shape stops soon after the cap: one field, a name and "..." at most */
        if (cap && b.len - 1 > cap + 120) __builtin_trap();
    }
    k = coai_msg_unknowns(copy, size - 1, u, 4);
    k2 = coai_msg_unknowns(copy, size - 1, all, 64);
    /* distinct while they fit; past max a repeat may count again */
    if (k2 <= 4 && k != k2) __builtin_trap();
    if (k < (k2 < 4 ? k2 : 4)) __builtin_trap();
    if (coai_msg_unknowns(copy, size - 1, NULL, 0) < k2) __builtin_trap();
    for (i = 0; i < (k < 4 ? k : 4); i++) {
        if (!u[i].message || !u[i].what || u[i].wire < 0 || u[i].wire > 5) __builtin_trap();
        if (u[i].message != all[i].message || u[i].field != all[i].field) __builtin_trap();
        if (u[i].name[0]) __builtin_trap();
    }
    coai_buf_free(&b);
    free(copy);
    return 0;
}
