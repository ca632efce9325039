/* The CUDA module as built links (ctest unit_cuda_module_links; no GPU needed): libcinfer_cuda.so loads with
 * RTLD_NOW after libcinfer.so, so it has no undefined symbol that libcinfer.so's public API or the system libraries
 * do not provide (it reaches engine internals only through the host table); its entry exists and returns a table of
 * this build's ABI and build id; and, handed a host of this build, an error the module sets (cudaGetDeviceCount
 * failing without a driver) arrives through the host's error function, the way the engine's error state gets it.
 *
 * Usage: test_cuda_module_links LIBCINFER_SO LIBCINFER_CUDA_SO; exits 77 (skipped) when the module was not built.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda_module.h"
#include "cinfer_build_id.h"
#include "test_util.h"

static char received[1024];
static int errors_received;

static cinfer_status record_error(cinfer_status code, const char *fmt, va_list ap) {
    vsnprintf(received, sizeof received, fmt, ap);
    errors_received++;
    return code;
}

int main(int argc, char **argv) {
    if (argc < 3 || !argv[2][0]) {
        printf("skipped: libcinfer_cuda.so was not built (configured without CUDA)\n");
        return 77;
    }
    void *engine = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!engine) {
        fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *module = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!module) { /* dlerror names the first symbol nothing provides */
        fprintf(stderr, "FAIL: cannot load %s with RTLD_NOW: %s\n", argv[2], dlerror());
        return 1;
    }
    cuda_module_entry_fn entry = (cuda_module_entry_fn)dlsym(module, CUDA_MODULE_ENTRY);
    CHECK(entry != NULL);
    if (!entry) return 1;

    /* A host of another build: the module still says who it is, so the engine can name both ids. */
    const cuda_module_host foreign = {CUDA_MODULE_ABI, "another-build", record_error, record_error};
    const cuda_module_api *api = entry(&foreign);
    CHECK(api != NULL);
    if (!api) return 1;
    CHECK(api->abi == CUDA_MODULE_ABI);
    CHECK(api->build_id && strcmp(api->build_id, CINFER_BUILD_ID) == 0);
    CHECK(api->device_count && api->backend_create && api->has_op);

    /* This build's host: taken into use, so the module's errors land in it. */
    const cuda_module_host host = {CUDA_MODULE_ABI, CINFER_BUILD_ID, record_error, record_error};
    CHECK(entry(&host) == api);
    int count = -1;
    cinfer_status st = api->device_count(&count);
    if (st == CINFER_OK) {
        printf("a CUDA driver is present (%d device(s)): the error hand-over is not exercised here\n", count);
    } else {
        CHECK(errors_received == 1);
        CHECK(received[0] != '\0');
        printf("module error through the host table: %s\n", received);
    }
    TEST_MAIN_END();
}
