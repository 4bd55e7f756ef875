#define _POSIX_C_SOURCE 200809L
/* t_qr.c - QR codes checked by an independent decoder (zbarimg, Debian's
 * zbar-tools, installed by build.sh) and the terminal renderer read back. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../cursor_oai.h"
#include "test.h"
#include <unistd.h>

static int write_pgm(const coai_qr *q, const char *path)
{
    FILE *f = fopen(path, "wb");
    int x, y, s = 3, qz = 4, w;
    if (!f) return -1;
    w = (q->size + 2 * qz) * s;
    fprintf(f, "P5\n%d %d\n255\n", w, w);
    for (y = 0; y < w; y++)
        for (x = 0; x < w; x++) {
            int mx = x / s - qz, my = y / s - qz;
            int dark = mx >= 0 && my >= 0 && mx < q->size && my < q->size
                       && q->modules[my * q->size + mx];
            fputc(dark ? 0 : 255, f);
        }
    return fclose(f);
}

/* Decode with zbarimg; returns a malloc'd string or NULL. */
static char *zbar_decode(const char *path)
{
    char cmd[512], *buf = (char *)malloc(4096);
    size_t n;
    FILE *p;
    snprintf(cmd, sizeof cmd, "zbarimg -q --raw -Sdisable -Sqrcode.enable %s 2>/dev/null", path);
    p = popen(cmd, "r");
    if (!p || !buf) { free(buf); if (p) pclose(p); return NULL; }
    n = fread(buf, 1, 4095, p);
    pclose(p);
    while (n > 0 && buf[n - 1] == '\n') n--;       /* zbarimg ends with a newline */
    buf[n] = 0;
    return buf;
}

static void test_roundtrip(void)
{
    char path[64], text[256];
    int len, seen[8] = { 0 }, versions[11] = { 0 }, distinct = 0, i;
    unsigned seed = 12345;
    snprintf(path, sizeof path, "/tmp/coai_qr_%d.pgm", (int)getpid());
    for (len = 1; len <= 213; len += (len < 20 ? 1 : 7)) {
        coai_qr q;
        char *got;
        for (i = 0; i < len; i++) {                 /* printable, URL-ish, varied */
            seed = seed * 1103515245u + 12345u;
            text[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~/?&="
                [(seed >> 16) % 70];
        }
        text[len] = 0;
        CHECKF(coai_qr_encode(&q, text, (size_t)len) == 0, "len %d", len);
        seen[q.mask] = 1;
        versions[q.version] = 1;
        if (write_pgm(&q, path) != 0) { CHECK(0); continue; }
        got = zbar_decode(path);
        CHECKF(got && strcmp(got, text) == 0, "len %d v%d mask %d: got '%s'", len, q.version,
               q.mask, got ? got : "(zbarimg failed)");
        free(got);
    }
    unlink(path);
    for (i = 0; i < 8; i++) distinct += seen[i];
    CHECKF(distinct >= 3, "only %d distinct masks chosen", distinct);
    for (i = 1; i <= 10; i++) CHECKF(versions[i], "version %d never used", i);
}

static void test_limits(void)
{
    char big[300];
    coai_qr q;
    memset(big, 'x', sizeof big);
    CHECK(coai_qr_encode(&q, big, 213) == 0 && q.version == 10 && q.size == 57);
    CHECK(coai_qr_encode(&q, big, 214) == -1);
    CHECK(coai_qr_encode(&q, "", 0) == 0 && q.version == 1 && q.size == 21);
}

static void test_render(void)
{
    /* Read the half-block rendering back into modules and compare. */
    coai_qr q;
    coai_buf b = { 0 };
    const char *url = "https://cursor.com/loginDeepControl?challenge=6oZqdX5MOLq_qBJ8vppAnT4fk6AP8U"
                      "iP9zX8-Rev_9A&uuid=20212223-2425-4627-a829-2a2b2c2d2e2f&mode=login"
                      "&redirectTarget=cli";
    const unsigned char *p;
    int row = -2, col, ok = 1, lines = 0;
    CHECK(coai_qr_encode(&q, url, strlen(url)) == 0);
    CHECK(coai_qr_render_utf8(&q, &b) == 0);
    p = b.data;
    while (p < b.data + b.len) {
        col = -2;
        while (*p != '\n') {
            int top, bot, x = col;
            if (p[0] == ' ') { top = 1; bot = 1; p += 1; }
            else if (p[0] == 0xe2 && p[1] == 0x96 && p[2] == 0x88) { top = 0; bot = 0; p += 3; }
            else if (p[0] == 0xe2 && p[1] == 0x96 && p[2] == 0x80) { top = 0; bot = 1; p += 3; }
            else if (p[0] == 0xe2 && p[1] == 0x96 && p[2] == 0x84) { top = 1; bot = 0; p += 3; }
            else { ok = 0; break; }
            if (x >= 0 && x < q.size && row >= 0 && row < q.size)
                ok &= top == q.modules[row * q.size + x];
            else ok &= top == 0;                    /* quiet zone is light */
            if (x >= 0 && x < q.size && row + 1 >= 0 && row + 1 < q.size)
                ok &= bot == q.modules[(row + 1) * q.size + x];
            else ok &= bot == 0;
            col++;
        }
        if (!ok) break;
        CHECKF(col == q.size + 2, "line width %d", col);
        p++;
        row += 2;
        lines++;
    }
    CHECK(ok);
    CHECK(lines == (q.size + 4 + 1) / 2);
    coai_buf_free(&b);
}

int main(void)
{
    test_limits();
    test_render();
    test_roundtrip();
    TEST_END();
}
