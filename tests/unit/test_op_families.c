/* Unit test of the op family list (graph/op_families.h) against the registry, the CPU kernel tables and the source
 * trees, so family names cannot drift apart again:
 *   - every registered op names a family of the list, and every family has ops;
 *   - every CPU kernel row sits in its op's family table (the backends look kernels up there);
 *   - graph/shape/, backend/cpu/, backend/cuda/ops/ and backend/cuda/kernels/ each have every family's file, and
 *     every file there is a family's (<family> or <family>_<part>) or one of the tree's few shared files;
 *   - a part that splits the CUDA host side (ops/<family>_<part>.c) has the same name in cpu/ and kernels/.
 * Usage: test_op_families <source dir> (ctest passes the project's). */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cpu/cpu_kernels.h"
#include "graph/op_schema.h"
#include "test_util.h"

/* ---- the registry and the CPU tables ---- */

static void test_family_names(void) {
    for (int f = 0; f < OP_FAMILY_COUNT; f++) {
        const char *name = op_family_name((op_family)f);
        CHECK(name != NULL && name[0] != '\0');
        if (!name) continue;
        /* a file stem: lower-case letters only, since '_' separates a family from its part */
        for (const char *c = name; *c; c++) CHECK(*c >= 'a' && *c <= 'z');
        for (int g = 0; g < f; g++) CHECK(strcmp(name, op_family_name((op_family)g)) != 0);
    }
    CHECK(op_family_name(OP_FAMILY_COUNT) == NULL);
}

static void test_registry_families(void) {
    int ops_per_family[OP_FAMILY_COUNT] = {0};
    size_t count = op_schema_count();
    CHECK(count > 0);
    for (size_t i = 0; i < count; i++) {
        const op_schema *s = op_schema_at(i);
        op_family f = op_schema_family(s);
        if (f >= OP_FAMILY_COUNT || !op_family_name(f)) {
            test_failures++;
            fprintf(stderr, "FAIL: registered op %s names no family of graph/op_families.h\n", s->op_type);
            continue;
        }
        ops_per_family[f]++;
        /* one row per op name, so the name alone finds the family */
        CHECK(op_schema_find("", s->op_type) == s);
    }
    for (int f = 0; f < OP_FAMILY_COUNT; f++) {
        test_checks++;
        if (ops_per_family[f] == 0) {
            test_failures++;
            fprintf(stderr, "FAIL: family %s has no registered op\n", op_family_name((op_family)f));
        }
    }
    op_schema stray = {0};
    CHECK(op_schema_family(&stray) == OP_FAMILY_COUNT);
}

static const cpu_kernel *const cpu_tables[OP_FAMILY_COUNT] = {
#define CPU_TABLE_ENTRY(ID, name) [OP_FAMILY_##ID] = cpu_##name##_kernels,
    OP_FAMILIES(CPU_TABLE_ENTRY)
#undef CPU_TABLE_ENTRY
};

static void test_cpu_tables(void) {
    for (int f = 0; f < OP_FAMILY_COUNT; f++) {
        for (const cpu_kernel *k = cpu_tables[f]; k->op_type; k++) {
            const op_schema *s = op_schema_find("", k->op_type);
            op_family sf = s ? op_schema_family(s) : OP_FAMILY_COUNT;
            test_checks++;
            if (sf != (op_family)f) {
                test_failures++;
                fprintf(stderr, "FAIL: CPU kernel %s is in cpu_%s_kernels but its schema is in family %s\n",
                        k->op_type, op_family_name((op_family)f), s ? op_family_name(sf) : "(no schema)");
            }
        }
    }
}

/* ---- the source trees ---- */

typedef struct source_tree {
    const char *dir;              /* under src/ */
    const char *family_exts[3];   /* every family has <family><ext> for each of these */
    const char *allowed_exts[4];  /* the extensions the tree's files may have */
    const char *shared_files[5];  /* the tree's files that are no family's (each must exist) */
} source_tree;

static const source_tree trees[] = {
    {"graph/shape", {".c"}, {".c", ".h"}, {"shape_common.c"}},
    {"backend/cpu", {".c"}, {".c", ".h"}, {"cpu_backend.c", "cpu_kernels.h", "cpu_staging.h"}},
    {"backend/cuda/ops", {".c"}, {".c", ".h"}, {NULL}},
    {"backend/cuda/kernels",
     {".cu", ".h"},
     {".cu", ".cuh", ".h"},
     {"common.cuh", "kernel_types.h", "index_check.h", "debug_fault.cu", "debug_fault.h"}},
};
enum { TREE_SHAPE, TREE_CPU, TREE_CUDA_OPS, TREE_CUDA_KERNELS };

static const char *source_dir;

static bool file_exists(const char *tree_dir, const char *stem, const char *ext) {
    char path[4096];
    snprintf(path, sizeof path, "%s/src/%s/%s%s", source_dir, tree_dir, stem, ext);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The family a file stem belongs to ("reduce" or "reduce_topk" -> OP_FAMILY_REDUCE), or OP_FAMILY_COUNT. */
static op_family family_of_stem(const char *stem) {
    size_t len = strcspn(stem, "_");
    if (stem[len] == '_' && stem[len + 1] == '\0') return OP_FAMILY_COUNT; /* "reduce_": no part */
    for (int f = 0; f < OP_FAMILY_COUNT; f++) {
        const char *name = op_family_name((op_family)f);
        if (strlen(name) == len && strncmp(stem, name, len) == 0) return (op_family)f;
    }
    return OP_FAMILY_COUNT;
}

static bool in_list(const char *const *list, size_t n, const char *s) {
    for (size_t i = 0; i < n && list[i]; i++)
        if (strcmp(list[i], s) == 0) return true;
    return false;
}

static void test_tree(const source_tree *t) {
    /* every family has its file */
    for (int f = 0; f < OP_FAMILY_COUNT; f++)
        for (size_t e = 0; e < 3 && t->family_exts[e]; e++) {
            test_checks++;
            if (!file_exists(t->dir, op_family_name((op_family)f), t->family_exts[e])) {
                test_failures++;
                fprintf(stderr, "FAIL: src/%s has no %s%s for family %s\n", t->dir, op_family_name((op_family)f),
                        t->family_exts[e], op_family_name((op_family)f));
            }
        }
    /* the shared list names files that are there */
    for (size_t i = 0; i < 5 && t->shared_files[i]; i++) {
        test_checks++;
        if (!file_exists(t->dir, t->shared_files[i], "")) {
            test_failures++;
            fprintf(stderr, "FAIL: src/%s/%s is listed as shared but is missing\n", t->dir, t->shared_files[i]);
        }
    }
    /* every file is a family's or shared */
    char path[4096];
    snprintf(path, sizeof path, "%s/src/%s", source_dir, t->dir);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    if (!d) {
        fprintf(stderr, "cannot read %s\n", path);
        return;
    }
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        files++;
        test_checks++;
        if (in_list(t->shared_files, 5, e->d_name)) continue;
        const char *dot = strrchr(e->d_name, '.');
        char stem[256];
        size_t len = dot ? (size_t)(dot - e->d_name) : strlen(e->d_name);
        if (!dot || !in_list(t->allowed_exts, 4, dot) || len >= sizeof stem) {
            test_failures++;
            fprintf(stderr, "FAIL: src/%s/%s: not a source file this tree holds\n", t->dir, e->d_name);
            continue;
        }
        memcpy(stem, e->d_name, len);
        stem[len] = '\0';
        op_family f = family_of_stem(stem);
        if (f == OP_FAMILY_COUNT) {
            test_failures++;
            fprintf(stderr,
                    "FAIL: src/%s/%s belongs to no op family: name it <family>[_<part>] after graph/op_families.h, "
                    "or list it among the tree's shared files in this test\n",
                    t->dir, e->d_name);
            continue;
        }
        /* a part of the CUDA host side is a part of the CPU kernels and of the CUDA kernels too */
        if (t == &trees[TREE_CUDA_OPS] && strchr(stem, '_') && strcmp(dot, ".c") == 0) {
            test_checks++;
            if (!file_exists(trees[TREE_CPU].dir, stem, ".c") ||
                !file_exists(trees[TREE_CUDA_KERNELS].dir, stem, ".cu")) {
                test_failures++;
                fprintf(stderr, "FAIL: src/%s/%s: the part needs src/%s/%s.c and src/%s/%s.cu of the same name\n",
                        t->dir, e->d_name, trees[TREE_CPU].dir, stem, trees[TREE_CUDA_KERNELS].dir, stem);
            }
        }
    }
    closedir(d);
    CHECK(files > 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <source dir>\n", argv[0]);
        return 2;
    }
    source_dir = argv[1];
    test_family_names();
    test_registry_families();
    test_cpu_tables();
    for (size_t i = 0; i < sizeof trees / sizeof trees[0]; i++) test_tree(&trees[i]);
    TEST_MAIN_END();
}
