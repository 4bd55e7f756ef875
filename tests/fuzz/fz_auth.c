/* fz_auth.c - JWT claims, credential JSON and the /oauth/token answer from arbitrary bytes. */
#define CURSOR_OAI_IMPLEMENTATION
#include "../../cursor_oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coai_jwt j;
    coai_creds c;
    coai_buf b = { 0 };
    coai_str tok;
    tok.ptr = (const char *)data;
    tok.len = size;
    if (coai_jwt_decode(tok, &j) == 0) {
        /* claims are NUL-terminated, valid UTF-8 prefixes */
        if (strlen(j.sub) >= sizeof j.sub || strlen(j.email) >= sizeof j.email) abort();
        if (coai_utf8_valid_prefix(j.sub, strlen(j.sub)) != strlen(j.sub)) abort();
    }
    (void)coai_token_expiring(tok, 1768474032, 300);
    if (coai_creds_parse((const char *)data, size, &c) == 0) {
        coai_creds parsed;
        if (coai_creds_format(&b, &c) != 0) abort();
        /* what we write must read back the same */
        if (coai_creds_parse((const char *)b.data, b.len, &parsed) != 0) abort();
        if ((c.access_token == NULL) != (parsed.access_token == NULL)) abort();
        if (c.access_token && strcmp(c.access_token, parsed.access_token) != 0) abort();
        coai_creds_free(&parsed);
        coai_creds_free(&c);
    }
    {
        /* the /oauth/token answer: tokens are visible ASCII, the flag 0 or 1 */
        int lo = 7;
        size_t i;
        if (coai_oauth_token_parse((const char *)data, size, &c, &lo) == 0) {
            for (i = 0; c.access_token && c.access_token[i]; i++)
                if ((unsigned char)c.access_token[i] < 0x21
                    || (unsigned char)c.access_token[i] > 0x7e) abort();
            if (c.api_key) abort();
        } else if (c.access_token || c.refresh_token) {
            abort();
        }
        if (lo != 0 && lo != 1) abort();
        coai_creds_free(&c);
    }
    coai_buf_free(&b);
    return 0;
}
