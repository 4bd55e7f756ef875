/* fz_imghdr.c - image headers from any bytes (coai_image_sniff: JPEG marker walk, PNG IHDR,
 * GIF screen, WebP VP8/VP8L/VP8X, BMP DIB header). Properties: no read outside the input (replay puts it in
 * an exactly sized heap block), dimensions are both known or both 0 and fit an int32, the
 * type agrees with the magic bytes, and a prefix never reports different dimensions than the
 * whole input once both know them. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t w = 7, h = 7, w2, h2;
    const char *m = coai_image_sniff(data, size, &w, &h), *m2;
    size_t half = size / 2;
    if ((w == 0) != (h == 0) || w > 0x7fffffffu || h > 0x7fffffffu) abort();
    if (!m && (w || h)) abort();
    if (m && strcmp(m, "image/png") == 0 && (size < 8 || data[0] != 0x89)) abort();
    if (m && strcmp(m, "image/jpeg") == 0 && (size < 3 || data[0] != 0xff || data[1] != 0xd8))
        abort();
    if (m && strcmp(m, "image/gif") == 0 && (size < 6 || data[0] != 'G')) abort();
    if (m && strcmp(m, "image/webp") == 0 && (size < 12 || data[0] != 'R')) abort();
    if (m && strcmp(m, "image/bmp") == 0 && (size < 26 || data[0] != 'B' || data[1] != 'M'))
        abort();
    m2 = coai_image_sniff(data, half, &w2, &h2);
    if (m2 && m2 != m) abort();
    if (m2 && w2 && (w2 != w || h2 != h)) abort();
    return 0;
}
