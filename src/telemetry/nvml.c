/* NVML through dlopen: the handful of NVML calls cinfer needs, declared here by their C ABI (every NVML enum is an
 * int, a device handle is a pointer, a return code 0 is success and 3 is "not supported"), so neither the NVML
 * header nor the library is needed to build. Required calls: nvmlInit_v2, nvmlShutdown, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID; every other call is optional and its field stays unset when the
 * library lacks it (old drivers) or answers NOT_SUPPORTED. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvret;
typedef void *nvdev;

#define NV_SUCCESS 0
#define NV_ERROR_NOT_SUPPORTED 3
#define NV_ERROR_NOT_FOUND 6
#define NV_MIG_ENABLE 1
#define NV_TEMPERATURE_GPU 0
#define NV_ECC_CORRECTED 0
#define NV_ECC_UNCORRECTED 1
#define NV_ECC_VOLATILE 0
#define NV_PCIE_TX 0
#define NV_PCIE_RX 1
#define NV_UUID_LEN 96
#define NV_MAX_MIG 8 /* MIG devices per GPU when nvmlDeviceGetMaxMigDeviceCount is missing (7 on every GPU so far) */

typedef struct {
    unsigned gpu, memory; /* percent */
} nv_utilization;
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nv_memory;

/* Calls whose failures are reported (once each). */
typedef enum {
    C_HANDLE,
    C_UUID,
    C_NAME,
    C_UTIL,
    C_MEMORY,
    C_TEMP,
    C_POWER,
    C_LIMIT,
    C_ENERGY,
    C_REASONS,
    C_ECC,
    C_PCIE,
    C_MIG_MODE,
    C_MIG_HANDLE,
    C_MIG_IDS,
    C_NUM
} call_id;
static const char *const call_names[C_NUM] = {"nvmlDeviceGetHandleByIndex_v2",
                                              "nvmlDeviceGetUUID",
                                              "nvmlDeviceGetName",
                                              "nvmlDeviceGetUtilizationRates",
                                              "nvmlDeviceGetMemoryInfo",
                                              "nvmlDeviceGetTemperature",
                                              "nvmlDeviceGetPowerUsage",
                                              "nvmlDeviceGetEnforcedPowerLimit",
                                              "nvmlDeviceGetTotalEnergyConsumption",
                                              "nvmlDeviceGetCurrentClocksEventReasons",
                                              "nvmlDeviceGetTotalEccErrors",
                                              "nvmlDeviceGetPcieThroughput",
                                              "nvmlDeviceGetMigMode",
                                              "nvmlDeviceGetMigDeviceHandleByIndex",
                                              "nvmlDeviceGetGpuInstanceId"};

/* Energy counter at the first sample of a device, so energy_j counts from then. */
typedef struct energy_base {
    char uuid[NV_UUID_LEN];
    unsigned long long mj;
} energy_base;

struct nvml {
    void *lib;
    char path[256];
    unsigned count;
    void (*warn)(const char *msg);
    unsigned warned; /* bit per call_id */
    energy_base *bases;
    size_t num_bases, cap_bases;

    nvret (*init)(void);
    nvret (*shutdown)(void);
    const char *(*error_string)(nvret);
    nvret (*get_count)(unsigned *);
    nvret (*handle_by_index)(unsigned, nvdev *);
    nvret (*get_uuid)(nvdev, char *, unsigned);
    nvret (*get_name)(nvdev, char *, unsigned);
    nvret (*utilization)(nvdev, nv_utilization *);
    nvret (*memory)(nvdev, nv_memory *);
    nvret (*temperature)(nvdev, int, unsigned *);
    nvret (*power)(nvdev, unsigned *);
    nvret (*power_limit)(nvdev, unsigned *);
    nvret (*energy)(nvdev, unsigned long long *);
    nvret (*clock_reasons)(nvdev, unsigned long long *);
    nvret (*ecc)(nvdev, int, int, unsigned long long *);
    nvret (*pcie)(nvdev, int, unsigned *);
    nvret (*mig_mode)(nvdev, unsigned *, unsigned *);
    nvret (*max_mig)(nvdev, unsigned *);
    nvret (*mig_handle)(nvdev, unsigned, nvdev *);
    nvret (*gi_id)(nvdev, unsigned *);
    nvret (*ci_id)(nvdev, unsigned *);
};

static const char *err_text(const nvml *n, nvret r) {
    const char *s = n->error_string ? n->error_string(r) : NULL;
    return s ? s : "unknown NVML error";
}

/* 1 on success; on failure other than NOT_SUPPORTED reports the call once. */
static int ok(nvml *n, nvret r, call_id c, const char *uuid) {
    if (r == NV_SUCCESS) return 1;
    if (r == NV_ERROR_NOT_SUPPORTED || (n->warned & (1u << c))) return 0;
    n->warned |= 1u << c;
    if (n->warn) {
        char msg[512];
        snprintf(msg, sizeof msg, "NVML: %s failed on %s: %s (code %d); the metric is left out (reported once)",
                 call_names[c], uuid && uuid[0] ? uuid : "a GPU", err_text(n, r), r);
        n->warn(msg);
    }
    return 0;
}

/* The energy counter at the first reading of `uuid` (recorded now when new); NULL when out of memory. */
static energy_base *energy_baseline(nvml *n, const char *uuid, unsigned long long mj) {
    for (size_t i = 0; i < n->num_bases; i++)
        if (!strcmp(n->bases[i].uuid, uuid)) return &n->bases[i];
    if (n->num_bases == n->cap_bases) {
        size_t cap = n->cap_bases ? 2 * n->cap_bases : 16;
        energy_base *b = realloc(n->bases, cap * sizeof *b);
        if (!b) return NULL;
        n->bases = b;
        n->cap_bases = cap;
    }
    energy_base *b = &n->bases[n->num_bases++];
    snprintf(b->uuid, sizeof b->uuid, "%s", uuid);
    b->mj = mj;
    return b;
}

/* Reads every optional field of one device (physical or MIG) into g (uuid already set). */
static void read_fields(nvml *n, nvdev d, nvml_gpu *g) {
    nv_utilization u;
    nv_memory m;
    unsigned x;
    unsigned long long y;
    if (n->utilization && ok(n, n->utilization(d, &u), C_UTIL, g->uuid)) {
        g->utilization = u.gpu / 100.0;
        g->memory_utilization = u.memory / 100.0;
        g->has |= NVML_HAS_UTILIZATION;
    }
    if (n->memory && ok(n, n->memory(d, &m), C_MEMORY, g->uuid)) {
        g->memory_total = m.total;
        g->memory_used = m.used;
        g->has |= NVML_HAS_MEMORY;
    }
    if (n->temperature && ok(n, n->temperature(d, NV_TEMPERATURE_GPU, &x), C_TEMP, g->uuid)) {
        g->temperature_c = x;
        g->has |= NVML_HAS_TEMPERATURE;
    }
    if (n->power && ok(n, n->power(d, &x), C_POWER, g->uuid)) {
        g->power_w = x / 1000.0;
        g->has |= NVML_HAS_POWER;
    }
    if (n->power_limit && ok(n, n->power_limit(d, &x), C_LIMIT, g->uuid)) {
        g->power_limit_w = x / 1000.0;
        g->has |= NVML_HAS_POWER_LIMIT;
    }
    if (n->energy && ok(n, n->energy(d, &y), C_ENERGY, g->uuid)) {
        energy_base *b = energy_baseline(n, g->uuid, y);
        if (b) {
            g->energy_j = y >= b->mj ? (y - b->mj) / 1000.0 : 0; /* the driver reloaded: counts restarted */
            if (y < b->mj) b->mj = y;
            g->has |= NVML_HAS_ENERGY;
        }
    }
    if (n->clock_reasons && ok(n, n->clock_reasons(d, &y), C_REASONS, g->uuid)) {
        g->clock_reasons = y;
        g->has |= NVML_HAS_CLOCK_REASONS;
    }
    if (n->ecc && ok(n, n->ecc(d, NV_ECC_CORRECTED, NV_ECC_VOLATILE, &y), C_ECC, g->uuid)) {
        g->ecc_corrected = y;
        g->has |= NVML_HAS_ECC_CORRECTED;
    }
    if (n->ecc && ok(n, n->ecc(d, NV_ECC_UNCORRECTED, NV_ECC_VOLATILE, &y), C_ECC, g->uuid)) {
        g->ecc_uncorrected = y;
        g->has |= NVML_HAS_ECC_UNCORRECTED;
    }
    if (n->pcie && ok(n, n->pcie(d, NV_PCIE_TX, &x), C_PCIE, g->uuid)) {
        g->pcie_tx_bps = (uint64_t)x * 1024;
        g->has |= NVML_HAS_PCIE_TX;
    }
    if (n->pcie && ok(n, n->pcie(d, NV_PCIE_RX, &x), C_PCIE, g->uuid)) {
        g->pcie_rx_bps = (uint64_t)x * 1024;
        g->has |= NVML_HAS_PCIE_RX;
    }
}

/* Case-sensitive prefix test, as CUDA matches UUID prefixes. */
static int has_prefix(const char *s, const char *p, size_t plen) {
    return s && strlen(s) >= plen && !strncmp(s, p, plen);
}

int nvml_visible(const char *visible, const char *uuid, int index, const char *parent_uuid) {
    if (!visible) return 1;
    const char *p = visible;
    for (;;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && p[len - 1] == ' ') len--;
        if (!len) return 0;
        if (!strncmp(p, "GPU-", 4) && len > 4) {
            if (has_prefix(parent_uuid ? parent_uuid : uuid, p, len)) return 1;
        } else if (!strncmp(p, "MIG-", 4) && len > 4) {
            if (parent_uuid && has_prefix(uuid, p, len)) return 1;
        } else {
            long k = 0;
            for (size_t i = 0; i < len; i++) {
                if (p[i] < '0' || p[i] > '9' || k > 100000) return 0; /* CUDA stops at the first invalid token */
                k = k * 10 + (p[i] - '0');
            }
            if (k == index) return 1;
        }
        if (!end) return 0;
        p = end + 1;
    }
}

/* Appends a zeroed entry to the growing array; NULL when out of memory. */
static nvml_gpu *push(nvml_gpu **a, size_t *n, size_t *cap) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        nvml_gpu *b = realloc(*a, c * sizeof *b);
        if (!b) return NULL;
        *a = b;
        *cap = c;
    }
    nvml_gpu *g = &(*a)[(*n)++];
    memset(g, 0, sizeof *g);
    g->mig_gi = g->mig_ci = -1;
    return g;
}

/* The MIG instances of physical GPU `parent` (entry `pi` of *a), appended when visible. Returns how many were
 * appended, or -1 when out of memory. */
static int sample_mig(nvml *n, nvdev d, const char *visible, nvml_gpu **a, size_t *cnt, size_t *cap, size_t pi) {
    unsigned max = NV_MAX_MIG;
    if (n->max_mig && n->max_mig(d, &max) != NV_SUCCESS) max = NV_MAX_MIG;
    int added = 0;
    for (unsigned i = 0; i < max; i++) {
        nvdev m;
        nvret r = n->mig_handle(d, i, &m);
        if (r == NV_ERROR_NOT_FOUND || r == NV_ERROR_NOT_SUPPORTED) continue; /* no instance at this index */
        if (!ok(n, r, C_MIG_HANDLE, (*a)[pi].uuid)) continue;
        char uuid[NV_UUID_LEN] = "";
        if (!ok(n, n->get_uuid(m, uuid, sizeof uuid), C_UUID, (*a)[pi].uuid)) continue;
        if (!nvml_visible(visible, uuid, (*a)[pi].index, (*a)[pi].uuid)) continue;
        nvml_gpu *g = push(a, cnt, cap);
        if (!g) return -1;
        const nvml_gpu *parent = &(*a)[pi]; /* after push: the array may have moved */
        snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        g->index = parent->index;
        unsigned id;
        if (n->gi_id && ok(n, n->gi_id(m, &id), C_MIG_IDS, uuid)) g->mig_gi = (int)id;
        if (n->ci_id && ok(n, n->ci_id(m, &id), C_MIG_IDS, uuid)) g->mig_ci = (int)id;
        if (!n->get_name || !ok(n, n->get_name(m, g->name, sizeof g->name), C_NAME, uuid)) g->name[0] = 0;
        read_fields(n, m, g);
        added++;
    }
    return added;
}

int nvml_sample(nvml *n, const char *visible, nvml_gpu **out, size_t *count) {
    nvml_gpu *a = NULL;
    size_t cnt = 0, cap = 0;
    *out = NULL;
    *count = 0;
    for (unsigned i = 0; i < n->count; i++) {
        nvdev d;
        char where[32];
        snprintf(where, sizeof where, "GPU %u", i);
        if (!ok(n, n->handle_by_index(i, &d), C_HANDLE, where)) continue;
        char uuid[NV_UUID_LEN] = "";
        if (!ok(n, n->get_uuid(d, uuid, sizeof uuid), C_UUID, where)) continue;
        unsigned cur = 0, pend = 0;
        int mig = n->mig_mode && n->mig_handle && ok(n, n->mig_mode(d, &cur, &pend), C_MIG_MODE, uuid) &&
                  cur == NV_MIG_ENABLE;
        int visible_gpu = nvml_visible(visible, uuid, (int)i, NULL);
        if (!visible_gpu && !mig) continue;
        size_t pi = cnt;
        nvml_gpu *g = push(&a, &cnt, &cap);
        if (!g) goto oom;
        snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        g->index = (int)i;
        g->mig_enabled = mig;
        if (!n->get_name || !ok(n, n->get_name(d, g->name, sizeof g->name), C_NAME, uuid)) g->name[0] = 0;
        read_fields(n, d, g);
        if (mig) {
            int added = sample_mig(n, d, visible, &a, &cnt, &cap, pi);
            if (added < 0) goto oom;
            if (!visible_gpu && added == 0) cnt = pi; /* neither the GPU nor any of its instances is visible */
        }
    }
    *out = a;
    *count = cnt;
    return 0;
oom:
    free(a);
    return -1;
}

/* dlsym into a function pointer of any type (POSIX guarantees the conversion works). */
#define SYM(field, name) (*(void **)&n->field = dlsym(n->lib, name))

nvml *nvml_open(const char *library, void (*warn)(const char *msg), char *why, size_t why_len) {
    const char *path = library && library[0] ? library : "libnvidia-ml.so.1";
    nvml *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    n->warn = warn;
    snprintf(n->path, sizeof n->path, "%s", path);
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "cannot load %s: %s", path, e ? e : "not found");
        free(n);
        return NULL;
    }
    const char *missing = NULL;
    if (!SYM(init, "nvmlInit_v2"))
        missing = "nvmlInit_v2";
    else if (!SYM(shutdown, "nvmlShutdown"))
        missing = "nvmlShutdown";
    else if (!SYM(get_count, "nvmlDeviceGetCount_v2"))
        missing = "nvmlDeviceGetCount_v2";
    else if (!SYM(handle_by_index, "nvmlDeviceGetHandleByIndex_v2"))
        missing = "nvmlDeviceGetHandleByIndex_v2";
    else if (!SYM(get_uuid, "nvmlDeviceGetUUID"))
        missing = "nvmlDeviceGetUUID";
    if (missing) {
        snprintf(why, why_len, "%s has no %s: not a usable NVML library", path, missing);
        dlclose(n->lib);
        free(n);
        return NULL;
    }
    SYM(error_string, "nvmlErrorString");
    SYM(get_name, "nvmlDeviceGetName");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
    SYM(temperature, "nvmlDeviceGetTemperature");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
    if (!SYM(clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons")) /* the name before driver 535 */
        SYM(clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    SYM(ecc, "nvmlDeviceGetTotalEccErrors");
    SYM(pcie, "nvmlDeviceGetPcieThroughput");
    SYM(mig_mode, "nvmlDeviceGetMigMode");
    SYM(max_mig, "nvmlDeviceGetMaxMigDeviceCount");
    SYM(mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex");
    SYM(gi_id, "nvmlDeviceGetGpuInstanceId");
    SYM(ci_id, "nvmlDeviceGetComputeInstanceId");
    nvret r = n->init();
    if (r != NV_SUCCESS) {
        snprintf(why, why_len, "nvmlInit_v2 failed: %s (code %d)", err_text(n, r), r);
        dlclose(n->lib);
        free(n);
        return NULL;
    }
    r = n->get_count(&n->count);
    if (r != NV_SUCCESS || n->count == 0) {
        if (r != NV_SUCCESS)
            snprintf(why, why_len, "nvmlDeviceGetCount_v2 failed: %s (code %d)", err_text(n, r), r);
        else
            snprintf(why, why_len, "NVML (%s) reports no GPU", path);
        nvml_close(n);
        return NULL;
    }
    nvml_gpu *first;
    size_t cnt;
    if (nvml_sample(n, NULL, &first, &cnt) != 0) { /* records every device's energy baseline */
        snprintf(why, why_len, "out of memory");
        nvml_close(n);
        return NULL;
    }
    free(first);
    return n;
}

void nvml_close(nvml *n) {
    if (!n) return;
    nvret r = n->shutdown();
    if (r != NV_SUCCESS && n->warn) {
        char msg[256];
        snprintf(msg, sizeof msg, "NVML: nvmlShutdown failed: %s (code %d)", err_text(n, r), r);
        n->warn(msg);
    }
    dlclose(n->lib);
    free(n->bases);
    free(n);
}

unsigned nvml_device_count(const nvml *n) { return n ? n->count : 0; }
