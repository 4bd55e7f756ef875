/* tests/fuzz/replay.c - a plain main() for libFuzzer targets, used by `./build.sh test`.
 * Usage: replay PATH...   (each PATH is a file or a directory of files, not recursive)
 * Runs LLVMFuzzerTestOneInput once per file, in sorted order, on an exactly sized heap copy
 * so that ASan sees any over-read. Prints "RESULT <files run> <files unreadable>" last.
 * A crash ends the process; build.sh then replays file by file to name the culprit. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#if defined(__GNUC__)
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
#endif

static int ran, bad;

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL, *p;
    size_t len = 0, cap = 0, n;
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); bad++; return; }
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            p = (unsigned char *)realloc(buf, cap);
            if (!p) { fprintf(stderr, "replay: out of memory on %s\n", path); bad++; goto out; }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) { fprintf(stderr, "replay: read error on %s\n", path); bad++; goto out; }
    /* Exact-size copy: a read one byte past the input hits the ASan redzone. */
    p = (unsigned char *)malloc(len ? len : 1);
    if (!p) { fprintf(stderr, "replay: out of memory on %s\n", path); bad++; goto out; }
    if (len) memcpy(p, buf, len);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(p, len);
    free(p);
    ran++;
out:
    free(buf);
    fclose(f);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL, **np;
    size_t count = 0, cap = 0, i;
    if (!d) { fprintf(stderr, "replay: cannot open directory %s\n", dir); bad++; return; }
    while ((e = readdir(d)) != NULL) {
        size_t need;
        if (e->d_name[0] == '.') continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            np = (char **)realloc(names, cap * sizeof *names);
            if (!np) { bad++; break; }
            names = np;
        }
        need = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[count] = (char *)malloc(need)) == NULL) { bad++; break; }
        snprintf(names[count], need, "%s/%s", dir, e->d_name);
        count++;
    }
    closedir(d);
    if (count) qsort(names, count, sizeof *names, cmp_str);
    for (i = 0; i < count; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) replay_file(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    int i;
#if defined(__GNUC__)
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
#endif
    for (i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such path %s\n", argv[i]);
            bad++;
        } else if (S_ISDIR(st.st_mode)) replay_dir(argv[i]);
        else replay_file(argv[i]);
    }
    printf("RESULT %d %d\n", ran, bad);
    return bad ? 1 : 0;
}
