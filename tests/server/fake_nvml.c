/* A fake libnvidia-ml.so for the metrics tests (built by tests/server/tests.cmake, loaded by cinfer-server through
 * CINFER_NVML_LIBRARY). Canned values that test_metrics.py checks exactly:
 *   GPU 0 "GPU-11111111-2222-3333-4444-555555555555": everything supported except ECC (NOT_SUPPORTED), MIG mode
 *         NOT_SUPPORTED; energy 5000000 mJ at the first reading, 5250000 mJ afterwards (250 J since start).
 *   GPU 1 "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee": MIG mode on; utilisation and PCIe NOT_SUPPORTED (as on a real
 *         GPU in MIG mode); energy 1000000 then 1100000 mJ (100 J). MIG instances at indices 0 and 2 (index 1 is
 *         empty: NOT_FOUND), each with memory, UUID, name and GPU/compute instance ids; everything else
 *         NOT_SUPPORTED, except temperature on the first instance, which fails with NO_PERMISSION (logged once).
 * Only the pre-535 name nvmlDeviceGetCurrentClocksThrottleReasons is exported, so the fallback is exercised.
 * Environment: FAKE_NVML_INIT_FAIL=1 makes nvmlInit_v2 fail (driver not loaded); FAKE_NVML_COUNT=N reports N GPUs
 * (0-2); FAKE_NVML_TRACE=FILE appends "init" and "shutdown" lines to FILE. Test code: globals are fine here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
#define OK 0
#define UNINITIALIZED 1
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define NO_PERMISSION 4
#define NOT_FOUND 6
#define DRIVER_NOT_LOADED 9

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct fake_dev {
    const char *uuid, *name;
    int supported_util, supported_pcie, supported_ecc, mig_capable, mig_on, is_mig;
    unsigned util_gpu, util_mem, temp, power_mw, limit_mw;
    int temp_error; /* returned instead of the temperature when nonzero */
    unsigned long long mem_total, mem_used, energy_first, energy_later, reasons, ecc_corr, ecc_uncorr;
    unsigned pcie_tx, pcie_rx, gi, ci;
    int energy_reads;
    struct fake_dev *mig[3]; /* by MIG index; NULL = none there */
} fake_dev;

static fake_dev mig_a = {.uuid = "MIG-11112222-3333-4444-5555-666677778888",
                         .name = "NVIDIA Fake A100 MIG 3g.40gb",
                         .is_mig = 1,
                         .mem_total = 42949672960ull,
                         .mem_used = 1073741824ull,
                         .gi = 1,
                         .ci = 0,
                         .temp_error = NO_PERMISSION};
static fake_dev mig_b = {.uuid = "MIG-99990000-aaaa-bbbb-cccc-ddddeeeeffff",
                         .name = "NVIDIA Fake A100 MIG 2g.20gb",
                         .is_mig = 1,
                         .mem_total = 21474836480ull,
                         .mem_used = 0,
                         .gi = 2,
                         .ci = 0};
static fake_dev gpus[2] = {
    {.uuid = "GPU-11111111-2222-3333-4444-555555555555",
     .name = "NVIDIA Fake H200",
     .supported_util = 1,
     .supported_pcie = 1,
     .util_gpu = 37,
     .util_mem = 12,
     .temp = 41,
     .power_mw = 123456,
     .limit_mw = 700000,
     .mem_total = 150323855360ull,
     .mem_used = 2147483648ull,
     .energy_first = 5000000,
     .energy_later = 5250000,
     .reasons = 0x1 | 0x4,
     .pcie_tx = 1000,
     .pcie_rx = 2500},
    {.uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
     .name = "NVIDIA Fake A100",
     .supported_ecc = 1,
     .mig_capable = 1,
     .mig_on = 1,
     .temp = 55,
     .power_mw = 250000,
     .limit_mw = 400000,
     .mem_total = 85899345920ull,
     .mem_used = 12884901888ull,
     .energy_first = 1000000,
     .energy_later = 1100000,
     .reasons = 0x40 | 0x80,
     .ecc_corr = 7,
     .ecc_uncorr = 0,
     .mig = {&mig_a, NULL, &mig_b}},
};
static int initialised;

static void trace(const char *what) {
    const char *path = getenv("FAKE_NVML_TRACE");
    if (!path || !path[0]) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", what);
    fclose(f);
}

static unsigned device_count(void) {
    const char *c = getenv("FAKE_NVML_COUNT");
    int n = c && c[0] ? atoi(c) : 2;
    return n < 0 ? 0 : n > 2 ? 2 : (unsigned)n;
}

nvmlReturn_t nvmlInit_v2(void) {
    const char *f = getenv("FAKE_NVML_INIT_FAIL");
    if (f && !strcmp(f, "1")) return DRIVER_NOT_LOADED;
    initialised = 1;
    trace("init");
    return OK;
}

nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return UNINITIALIZED;
    initialised = 0;
    trace("shutdown");
    return OK;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NO_PERMISSION: return "Insufficient Permissions";
    case NOT_FOUND: return "Not Found";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialised) return UNINITIALIZED;
    *count = device_count();
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, fake_dev **dev) {
    if (!initialised) return UNINITIALIZED;
    if (index >= device_count()) return INVALID_ARGUMENT;
    *dev = &gpus[index];
    return OK;
}

static nvmlReturn_t copy_string(const char *s, char *out, unsigned len) {
    if (!out || strlen(s) + 1 > len) return INVALID_ARGUMENT;
    strcpy(out, s);
    return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(fake_dev *d, char *uuid, unsigned len) { return copy_string(d->uuid, uuid, len); }
nvmlReturn_t nvmlDeviceGetName(fake_dev *d, char *name, unsigned len) { return copy_string(d->name, name, len); }

nvmlReturn_t nvmlDeviceGetUtilizationRates(fake_dev *d, nvmlUtilization_t *u) {
    if (!d->supported_util) return NOT_SUPPORTED;
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(fake_dev *d, nvmlMemory_t *m) {
    m->total = d->mem_total;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(fake_dev *d, int sensor, unsigned *t) {
    if (sensor != 0) return INVALID_ARGUMENT;
    if (d->temp_error) return d->temp_error;
    if (d->is_mig) return NOT_SUPPORTED;
    *t = d->temp;
    return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(fake_dev *d, unsigned *mw) {
    if (d->is_mig) return NOT_SUPPORTED;
    *mw = d->power_mw;
    return OK;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(fake_dev *d, unsigned *mw) {
    if (d->is_mig) return NOT_SUPPORTED;
    *mw = d->limit_mw;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(fake_dev *d, unsigned long long *mj) {
    if (d->is_mig) return NOT_SUPPORTED;
    *mj = d->energy_reads++ ? d->energy_later : d->energy_first;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(fake_dev *d, unsigned long long *reasons) {
    if (d->is_mig) return NOT_SUPPORTED;
    *reasons = d->reasons;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(fake_dev *d, int type, int counter, unsigned long long *n) {
    if (!d->supported_ecc) return NOT_SUPPORTED;
    if (counter != 0 && counter != 1) return INVALID_ARGUMENT;
    if (type == 0)
        *n = d->ecc_corr;
    else if (type == 1)
        *n = d->ecc_uncorr;
    else
        return INVALID_ARGUMENT;
    if (counter == 1) *n += 1000; /* aggregate counts differ, so reading the wrong counter shows */
    return OK;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(fake_dev *d, int counter, unsigned *kbps) {
    if (!d->supported_pcie) return NOT_SUPPORTED;
    if (counter == 0)
        *kbps = d->pcie_tx;
    else if (counter == 1)
        *kbps = d->pcie_rx;
    else
        return INVALID_ARGUMENT;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigMode(fake_dev *d, unsigned *current, unsigned *pending) {
    if (!d->mig_capable) return NOT_SUPPORTED;
    *current = *pending = (unsigned)d->mig_on;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(fake_dev *d, unsigned *count) {
    if (!d->mig_capable) return NOT_SUPPORTED;
    *count = 3;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(fake_dev *d, unsigned index, fake_dev **mig) {
    if (!d->mig_capable || !d->mig_on) return NOT_SUPPORTED;
    if (index >= 3) return INVALID_ARGUMENT;
    if (!d->mig[index]) return NOT_FOUND;
    *mig = d->mig[index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(fake_dev *d, unsigned *id) {
    if (!d->is_mig) return NOT_SUPPORTED;
    *id = d->gi;
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(fake_dev *d, unsigned *id) {
    if (!d->is_mig) return NOT_SUPPORTED;
    *id = d->ci;
    return OK;
}
