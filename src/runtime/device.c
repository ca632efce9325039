/* Devices beyond the CPU: loads the CUDA backend module on first use and serves the public device API.
 *
 * Without the NVIDIA driver (libcuda.so.1) the module is not loaded at all. The module (libcinfer_cuda.so) is looked
 * for in CINFER_CUDA_MODULE, then beside the libcinfer.so this code runs from, then on the loader's search path. It
 * is handed the host table (backend/cuda_module.h) and refused unless its ABI number and build id are this
 * engine's. A program must use the shared engine for CUDA: the module is looked for beside libcinfer.so.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_module.h"
#include "cinfer_build_id.h"
#include "core/status.h"

#define MODULE_FILE "libcinfer_cuda.so"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const cuda_module_api *module;
static char load_failure[1024];

/* What the module shares with the engine rather than copies (backend/cuda_module.h). */
static const cuda_module_host host = {
    .abi = CUDA_MODULE_ABI,
    .build_id = CINFER_BUILD_ID,
    .error_v = core_error_v,
    .error_prefix_v = core_error_prefix_v,
};

/* Folder of the shared object holding this function, or false when it is the main program (static link). */
static bool engine_library_dir(char *dir, size_t size) {
    Dl_info info;
    if (!dladdr((void *)engine_library_dir, &info) || !info.dli_fname) return false;
    const char *slash = strrchr(info.dli_fname, '/');
    const char *base = slash ? slash + 1 : info.dli_fname;
    if (strncmp(base, "libcinfer.so", 12) != 0) return false;
    size_t len = slash ? (size_t)(slash - info.dli_fname) : 0;
    if (len + 1 > size) return false;
    memcpy(dir, info.dli_fname, len);
    dir[len] = '\0';
    if (len == 0) snprintf(dir, size, ".");
    return true;
}

static void load_module(void) {
    char dir[PATH_MAX], path[PATH_MAX + 32];
    /* No NVIDIA driver, no GPU: say so without mapping the module, whose CUDA libraries cost ~150 MiB of resident
     * memory and tens of milliseconds to load (a CPU-only server asking "any GPUs?" must stay small). */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(load_failure, sizeof load_failure, "CUDA is not usable here: no NVIDIA driver (%s)", dlerror());
        return;
    }
    dlclose(driver); /* the module's CUDA runtime loads it again */
    if (!engine_library_dir(dir, sizeof dir)) {
        snprintf(load_failure, sizeof load_failure,
                 "the CUDA backend needs the shared libcinfer.so (this program links the engine statically)");
        return;
    }
    const char *env = getenv("CINFER_CUDA_MODULE");
    void *h = NULL;
    const char *name = NULL; /* what was loaded, for the messages below */
    char tried[900] = "";
    if (env && env[0]) {
        h = dlopen(name = env, RTLD_NOW | RTLD_LOCAL);
        if (!h) snprintf(tried, sizeof tried, "%s", dlerror());
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, MODULE_FILE);
        h = dlopen(name = path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(tried, sizeof tried, "%s", dlerror());
            h = dlopen(name = MODULE_FILE, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!h) {
        snprintf(load_failure, sizeof load_failure,
                 "the CUDA backend module is not available (%s); build with nvcc present (CINFER_CUDA=ON) or set "
                 "CINFER_CUDA_MODULE", tried[0] ? tried : dlerror());
        return;
    }
    cuda_module_entry_fn entry = (cuda_module_entry_fn)dlsym(h, CUDA_MODULE_ENTRY);
    const cuda_module_api *api = entry ? entry(&host) : NULL;
    bool refused = true;
    if (!api) {
        snprintf(load_failure, sizeof load_failure, "%s is not a cinfer CUDA module (no %s table)", name,
                 CUDA_MODULE_ENTRY);
    } else if (api->abi != CUDA_MODULE_ABI) { /* read alone: another ABI may not have build_id where this one does */
        snprintf(load_failure, sizeof load_failure,
                 "%s is a cinfer CUDA module of another version (module ABI %d, engine ABI %d): use the "
                 "libcinfer_cuda.so built with this libcinfer.so", name, api->abi, CUDA_MODULE_ABI);
    } else if (!api->build_id || strcmp(api->build_id, CINFER_BUILD_ID) != 0) {
        snprintf(load_failure, sizeof load_failure,
                 "%s is from another build (module build id %s, engine build id %s): use the libcinfer_cuda.so "
                 "built with this libcinfer.so", name, api->build_id ? api->build_id : "<none>", CINFER_BUILD_ID);
    } else {
        refused = false;
    }
    if (refused) {
        dlclose(h);
        return;
    }
    module = api; /* kept loaded for the life of the process: CUDA contexts cannot be unloaded safely */
}

const cuda_module_api *device_cuda_module(void) {
    pthread_once(&load_once, load_module);
    if (!module) core_error(CINFER_ERR_UNSUPPORTED, "%s", load_failure);
    return module;
}

bool device_parse_cuda(const char *device, int *ordinal, bool *valid) {
    if (strncmp(device, "cuda", 4) != 0) return false;
    const char *rest = device + 4;
    *ordinal = 0;
    *valid = true;
    if (*rest == '\0') return true;
    if (*rest != ':' || rest[1] == '\0') {
        *valid = false;
        return true;
    }
    char *end;
    long n = strtol(rest + 1, &end, 10);
    if (*end || n < 0 || n > 1 << 16) *valid = false;
    *ordinal = (int)n;
    return true;
}

cinfer_status cinfer_cuda_device_count(int *count) {
    if (!count) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_cuda_device_count: count is NULL");
    *count = 0;
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->device_count(count);
}

cinfer_status cinfer_cuda_device_info(int device, cinfer_device_info *out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_cuda_device_info: out is NULL");
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->device_info(device, out);
}

cinfer_status cinfer_cuda_memory_stats(int device, cinfer_memory_stats *out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_cuda_memory_stats: out is NULL");
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->memory_stats(device, out);
}

cinfer_status cinfer_cuda_set_memory_limit(int device, size_t bytes, double fraction) {
    if (fraction < 0 || fraction > 1)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "memory limit fraction %g is not in (0, 1]", fraction);
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->set_memory_limit(device, bytes, fraction);
}

cinfer_status cinfer_cuda_empty_cache(int device) {
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->empty_cache(device);
}

cinfer_status cinfer_cuda_host_alloc(int device, size_t bytes, void **out) {
    if (!out) return core_error(CINFER_ERR_INVALID_ARGUMENT, "cinfer_cuda_host_alloc: out is NULL");
    *out = NULL;
    const cuda_module_api *m = device_cuda_module();
    if (!m) return CINFER_ERR_UNSUPPORTED;
    return m->host_alloc(device, bytes, out);
}

void cinfer_cuda_host_free(int device, void *p) {
    const cuda_module_api *m = p ? device_cuda_module() : NULL;
    if (m) m->host_free(device, p);
}
