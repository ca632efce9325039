/* Minimal unit-test harness: CHECK records a failure with file and line and continues; main returns failures. */
#ifndef CINFER_TEST_UTIL_H
#define CINFER_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

static int test_failures = 0;
static int test_checks = 0;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        test_checks++;                                                                      \
        if (!(cond)) {                                                                      \
            test_failures++;                                                                \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
        }                                                                                   \
    } while (0)

/* Checks that the last error message contains `needle`. */
#define CHECK_ERROR_MENTIONS(needle)                                                        \
    do {                                                                                    \
        test_checks++;                                                                      \
        if (!strstr(cinfer_last_error(), (needle))) {                                       \
            test_failures++;                                                                \
            fprintf(stderr, "FAIL %s:%d: error \"%s\" does not mention \"%s\"\n", __FILE__, \
                    __LINE__, cinfer_last_error(), (needle));                               \
        }                                                                                   \
    } while (0)

#define TEST_MAIN_END()                                                                     \
    do {                                                                                    \
        printf("%d checks, %d failures\n", test_checks, test_failures);                     \
        return test_failures ? 1 : 0;                                                       \
    } while (0)

#endif
