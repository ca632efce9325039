/* A stand-in CUDA module for test_cuda_module_handshake (built as fake_cuda_module/libfake_cuda_module.so by
 * tests/CMakeLists.txt, loaded through CINFER_CUDA_MODULE). Its identity comes from the environment, so one library
 * plays a module of this build, of another build and of another ABI: FAKE_MODULE_ABI (default CUDA_MODULE_ABI) and
 * FAKE_MODULE_BUILD_ID (default this build's id). device_count fails with a message set through the host table,
 * the way the real module's core_error does, so the test can read it back with cinfer_last_error(). */
#include <stdarg.h>
#include <stdlib.h>

#include "backend/cuda_module.h"
#include "cinfer_build_id.h"

static const cuda_module_host *engine;
static cuda_module_api table; /* filled by the entry: the identity is read from the environment then */

static cinfer_status fake_error(cinfer_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    engine->error_v(code, fmt, ap);
    va_end(ap);
    return code;
}

static cinfer_status fake_device_count(int *count) {
    *count = 0;
    return fake_error(CINFER_ERR_NOT_FOUND, "fake CUDA module: %d devices (build %s)", 0, table.build_id);
}

CUDA_MODULE_EXPORT const cuda_module_api *cinfer_cuda_module(const cuda_module_host *host) {
    const char *abi = getenv("FAKE_MODULE_ABI"), *build_id = getenv("FAKE_MODULE_BUILD_ID");
    table.abi = abi ? atoi(abi) : CUDA_MODULE_ABI;
    table.build_id = build_id ? build_id : CINFER_BUILD_ID;
    table.device_count = fake_device_count;
    engine = host;
    return &table;
}
