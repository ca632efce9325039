/* The engine's CUDA module loader (src/runtime/device.c) through the public API (ctest unit_cuda_module_handshake;
 * no GPU needed): a module of another build or another ABI is refused with a message naming both values, a library
 * without the entry is refused, and a module of this build is used, an error it sets reading back through
 * cinfer_last_error(). The module is fake_cuda_module.c, its identity set per case through the environment;
 * tests/CMakeLists.txt puts a fake libcuda.so.1 on LD_LIBRARY_PATH, since the loader looks for the driver first.
 * Each case runs in a child process of its own: the engine loads the module once per process.
 *
 * Usage: test_cuda_module_handshake FAKE_MODULE_SO NOT_A_MODULE_SO
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda_module.h"
#include "cinfer/cinfer.h"
#include "cinfer_build_id.h"
#include "test_util.h"

#define MAX_NEEDLES 4

typedef struct handshake_case {
    const char *name;
    const char *module;                /* CINFER_CUDA_MODULE */
    const char *abi, *build_id;        /* FAKE_MODULE_ABI, FAKE_MODULE_BUILD_ID; NULL leaves them unset */
    cinfer_status status;              /* what cinfer_cuda_device_count returns */
    const char *needles[MAX_NEEDLES]; /* what its message must contain */
} handshake_case;

/* In a child: loads the module as the engine does and checks the outcome; the exit status is the verdict. */
static int run_case(const handshake_case *c) {
    setenv("CINFER_CUDA_MODULE", c->module, 1);
    if (c->abi) setenv("FAKE_MODULE_ABI", c->abi, 1);
    if (c->build_id) setenv("FAKE_MODULE_BUILD_ID", c->build_id, 1);
    int count = -1;
    cinfer_status st = cinfer_cuda_device_count(&count);
    printf("%s: %s: %s\n", c->name, cinfer_status_name(st), cinfer_last_error());
    CHECK(st == c->status);
    for (int i = 0; i < MAX_NEEDLES && c->needles[i]; i++) CHECK_ERROR_MENTIONS(c->needles[i]);
    fflush(stdout);
    return test_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FAKE_MODULE_SO NOT_A_MODULE_SO\n", argv[0]);
        return 2;
    }
    const char *fake = argv[1], *not_module = argv[2];
    char abis[64];
    snprintf(abis, sizeof abis, "module ABI %d, engine ABI %d", CUDA_MODULE_ABI - 1, CUDA_MODULE_ABI);
    char older_abi[16];
    snprintf(older_abi, sizeof older_abi, "%d", CUDA_MODULE_ABI - 1);
    const handshake_case cases[] = {
        {"another build", fake, NULL, "another-build", CINFER_ERR_UNSUPPORTED,
         {fake, "is from another build", "module build id another-build", "engine build id " CINFER_BUILD_ID}},
        {"another ABI", fake, older_abi, NULL, CINFER_ERR_UNSUPPORTED, {fake, "of another version", abis}},
        {"no entry", not_module, NULL, NULL, CINFER_ERR_UNSUPPORTED, {not_module, "is not a cinfer CUDA module"}},
        {"this build", fake, NULL, NULL, CINFER_ERR_NOT_FOUND, {"fake CUDA module: 0 devices (build " CINFER_BUILD_ID ")"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) _exit(run_case(&cases[i]));
        int status = 0;
        test_checks++;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            test_failures++;
            fprintf(stderr, "FAIL case '%s'\n", cases[i].name);
        }
    }
    TEST_MAIN_END();
}
