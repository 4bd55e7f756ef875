/* tests/pbwalk.h - test-only protobuf wire-format walkers (independent of the header's
 * writer). pbw_walk() checks that bytes are a well-formed sequence of fields;
 * pbw_value_matches() checks that bytes are the google.protobuf.Value the original
 * encoder would write for a cJSON tree (spec §6.2), computing the expected member
 * order on its own. Needs cJSON.h and <stdint.h>, <string.h>, <stdlib.h>. */
#ifndef COAI_PBWALK_H
#define COAI_PBWALK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbw_field {
    uint32_t num;
    int wire;
    uint64_t v;              /* varint / fixed value */
    const uint8_t *p;        /* length-delimited payload */
    size_t n;
} pbw_field;

/* Reads one varint; returns bytes used or 0 on error (truncated or > 10 bytes). */
static size_t pbw_varint(const uint8_t *p, size_t n, uint64_t *v)
{
    size_t i;
    *v = 0;
    for (i = 0; i < n && i < 10; i++) {
        if (i == 9 && p[i] > 1) return 0;
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) return i + 1;
    }
    return 0;
}

/* Reads the field at *pos; 1 ok, 0 end of input, -1 malformed. */
static int pbw_next(const uint8_t *p, size_t n, size_t *pos, pbw_field *f)
{
    uint64_t tag, len;
    size_t k;
    if (*pos >= n) return 0;
    k = pbw_varint(p + *pos, n - *pos, &tag);
    if (!k) return -1;
    *pos += k;
    f->num = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    f->p = NULL;
    f->n = 0;
    f->v = 0;
    if (f->num == 0 || (tag >> 3) > 0x1fffffff) return -1;
    switch (f->wire) {
    case 0:
        k = pbw_varint(p + *pos, n - *pos, &f->v);
        if (!k) return -1;
        *pos += k;
        return 1;
    case 1:
    case 5: {
        size_t w = f->wire == 1 ? 8 : 4, i;
        if (n - *pos < w) return -1;
        for (i = 0; i < w; i++) f->v |= (uint64_t)p[*pos + i] << (8 * i);
        *pos += w;
        return 1;
    }
    case 2:
        k = pbw_varint(p + *pos, n - *pos, &len);
        if (!k) return -1;
        *pos += k;
        if (len > n - *pos) return -1;
        f->p = p + *pos;
        f->n = (size_t)len;
        *pos += (size_t)len;
        return 1;
    default:
        return -1;           /* groups are never written by us */
    }
}

/* 1 if [p,n) is a well-formed sequence of fields (no groups, lengths in bounds). */
static int pbw_walk(const uint8_t *p, size_t n)
{
    size_t pos = 0;
    pbw_field f;
    int r;
    while ((r = pbw_next(p, n, &pos, &f)) == 1) {}
    return r == 0;
}

/* JavaScript array-index key test, written differently from the header's. */
static int pbw_is_index(const char *k, unsigned long *num)
{
    char back[32];
    char *end;
    unsigned long v;
    size_t i;
    if (!k || !*k || strlen(k) > 10) return 0;
    for (i = 0; k[i]; i++) if (k[i] < '0' || k[i] > '9') return 0;
    v = strtoul(k, &end, 10);
    snprintf(back, sizeof back, "%lu", v);
    if (strcmp(back, k) != 0 || v > 4294967294ul) return 0;
    *num = v;
    return 1;
}

static const char *pbw_key(const cJSON *c) { return c->string ? c->string : ""; }

static int pbw_value_matches(const uint8_t *p, size_t n, const cJSON *j, int depth);

/* Expected (key, value) list of an object in JS order, then compare with the Struct. */
static int pbw_struct_matches(const uint8_t *p, size_t n, const cJSON *obj, int depth)
{
    const cJSON *c, *d;
    const cJSON **keys = NULL;
    size_t nk = 0, cap = 0, i, pos = 0, at = 0;
    int ok = 1, r;
    pbw_field f;
    /* unique keys in order of first appearance */
    for (c = obj->child; c; c = c->next) {
        int dup = 0;
        for (d = obj->child; d != c; d = d->next)
            if (strcmp(pbw_key(d), pbw_key(c)) == 0) { dup = 1; break; }
        if (dup) continue;
        if (nk == cap) {
            cap = cap ? cap * 2 : 8;
            keys = (const cJSON **)realloc((void *)keys, cap * sizeof *keys);
            if (!keys) return 0;
        }
        keys[nk++] = c;
    }
    /* stable insertion sort: index keys first, ascending */
    for (i = 1; i < nk; i++) {
        const cJSON *x = keys[i];
        unsigned long xv = 0, yv = 0;
        size_t k = i;
        int xi = pbw_is_index(pbw_key(x), &xv);
        while (k > 0) {
            int yi = pbw_is_index(pbw_key(keys[k - 1]), &yv);
            if (xi && (!yi || yv > xv)) { keys[k] = keys[k - 1]; k--; }
            else break;
        }
        keys[k] = x;
    }
    while (ok && (r = pbw_next(p, n, &pos, &f)) == 1) {
        const cJSON *last = NULL;
        size_t ep = 0;
        pbw_field g;
        const uint8_t *key = NULL, *val = NULL;
        size_t keyn = 0, valn = 0;
        int seen_val = 0, seen_key = 0, rr;
        if (f.num != 1 || f.wire != 2 || at >= nk) { ok = 0; break; }
        while ((rr = pbw_next(f.p, f.n, &ep, &g)) == 1) {
            if (g.num == 1 && g.wire == 2 && !seen_key && !seen_val) {
                key = g.p; keyn = g.n; seen_key = 1;
            } else if (g.num == 2 && g.wire == 2 && !seen_val) {
                val = g.p; valn = g.n; seen_val = 1;
            } else {
                rr = -1;
                break;
            }
        }
        if (rr != 0 || !seen_val) { ok = 0; break; }
        /* the original omits an empty key */
        if (strlen(pbw_key(keys[at])) != keyn || (seen_key && keyn == 0) ||
            (keyn && memcmp(key, pbw_key(keys[at]), keyn) != 0)) { ok = 0; break; }
        for (c = obj->child; c; c = c->next)
            if (strcmp(pbw_key(c), pbw_key(keys[at])) == 0) last = c;
        if (!pbw_value_matches(val, valn, last, depth + 1)) { ok = 0; break; }
        at++;
    }
    if (ok && (pos != n || at != nk)) ok = 0;
    free((void *)keys);
    return ok;
}

/* 1 if Value bytes [p,n) are exactly what the original writes for j. */
static int pbw_value_matches(const uint8_t *p, size_t n, const cJSON *j, int depth)
{
    size_t pos = 0;
    pbw_field f;
    int r;
    if (!j || depth > 1000) return 0;
    if (cJSON_IsNull(j) || (cJSON_IsString(j) && (!j->valuestring || !*j->valuestring)))
        return n == 0;
    r = pbw_next(p, n, &pos, &f);
    if (r != 1 || pos != n) return 0;          /* exactly one field */
    if (cJSON_IsBool(j))
        return f.num == 4 && f.wire == 0 && f.v == (cJSON_IsTrue(j) ? 1u : 0u) && n == 2;
    if (cJSON_IsNumber(j)) {
        uint64_t bits;
        memcpy(&bits, &j->valuedouble, 8);
        return f.num == 2 && f.wire == 1 && f.v == bits;
    }
    if (cJSON_IsString(j))
        return f.num == 3 && f.wire == 2 && f.n == strlen(j->valuestring) &&
               memcmp(f.p, j->valuestring, f.n) == 0;
    if (cJSON_IsArray(j)) {
        const cJSON *c = j->child;
        size_t lp = 0;
        pbw_field g;
        if (f.num != 6 || f.wire != 2) return 0;
        while ((r = pbw_next(f.p, f.n, &lp, &g)) == 1) {
            if (g.num != 1 || g.wire != 2 || !c) return 0;
            if (!pbw_value_matches(g.p, g.n, c, depth + 1)) return 0;
            c = c->next;
        }
        return r == 0 && c == NULL;
    }
    if (cJSON_IsObject(j)) {
        if (f.num != 5 || f.wire != 2) return 0;
        return pbw_struct_matches(f.p, f.n, j, depth);
    }
    return 0;
}
#endif
