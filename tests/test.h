/* tests/test.h - the tiny harness every tests/t_*.c uses.
 * Each CHECK counts; a test program ends with TEST_END(), which prints
 * "RESULT <passed> <failed>" (read by build.sh) and returns non-zero on failure. */
#ifndef COAI_TEST_H
#define COAI_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TEST_UNUSED __attribute__((unused))
#else
#define TEST_UNUSED
#endif

static int test_passed_, test_failed_;

#define CHECK(cond) do { \
        if (cond) test_passed_++; \
        else { test_failed_++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

#define CHECKF(cond, ...) do { \
        if (cond) test_passed_++; \
        else { test_failed_++; fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
               fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
    } while (0)

#define CHECK_MEM(a, alen, b, blen) CHECKF((alen) == (blen) && memcmp((a), (b), (alen)) == 0, \
        "length %zu vs %zu", (size_t)(alen), (size_t)(blen))

#define TEST_END() do { \
        printf("RESULT %d %d\n", test_passed_, test_failed_); \
        return test_failed_ ? 1 : 0; \
    } while (0)

/* Path of a file under the shared vectors (env COAI_VECTORS or ../shared/spec/vectors). */
TEST_UNUSED static const char *test_vec_path(const char *name)
{
    static char buf[4096];
    const char *dir = getenv("COAI_VECTORS");
    snprintf(buf, sizeof buf, "%s/%s", dir && *dir ? dir : "../shared/spec/vectors", name);
    return buf;
}

/* Read a whole file into a malloc'd NUL-terminated buffer, or NULL. */
TEST_UNUSED static char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        p = (char *)malloc((size_t)n + 1);
        if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
        if (p) { p[n] = 0; if (len) *len = (size_t)n; }
    }
    fclose(f);
    return p;
}

/* Decode lowercase/uppercase hex into a malloc'd buffer; returns NULL on bad hex. */
TEST_UNUSED static unsigned char *test_unhex(const char *hex, size_t *out_len)
{
    size_t n = strlen(hex), i;
    unsigned char *p;
    if (n % 2) return NULL;
    p = (unsigned char *)malloc(n / 2 + 1);
    if (!p) return NULL;
    for (i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) { free(p); return NULL; }
        p[i] = (unsigned char)v;
    }
    *out_len = n / 2;
    return p;
}
#endif
