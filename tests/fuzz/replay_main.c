/* Replays inputs through a fuzz target without libFuzzer: each argument is a file or a folder of files, each
 * file one input to LLVMFuzzerTestOneInput. ctest uses it to run the committed seed corpora and crash
 * regressions in every build (plain, ASan), and scripts/fuzz.sh uses it for the llvm-cov coverage variant. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s'\n", path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading '%s'\n", path);
        return -1;
    }
    /* the input in an allocation of exactly its size, as libFuzzer gives it, so over-reads are caught */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    if (getenv("FUZZ_VERBOSE")) printf("%s\n", path);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays `path` (a file, or every regular file of a folder in name order). Returns the count, -1 on error. */
static long replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: '%s' does not exist\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path) == 0 ? 1 : -1;
    DIR *d = opendir(path);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        if (count >= 0 && stat(full, &st) == 0 && S_ISREG(st.st_mode)) count = replay_file(full) == 0 ? count + 1 : -1;
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        long n = replay_path(argv[i]);
        if (n < 0) return 1;
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input files found\n");
        return 1;
    }
    printf("replayed %ld inputs without a crash\n", total);
    return 0;
}
