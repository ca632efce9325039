/* GPU telemetry through NVML, loaded at run time with dlopen (no NVML header, no link-time dependency): one
 * sample of every visible GPU and MIG instance (utilisation, memory, temperature, power and limit, energy, clock
 * event ("throttle") reasons, volatile ECC counts, PCIe throughput). NVML absent, failing to initialise or seeing no
 * GPU means "no GPU telemetry", never an error; a call that answers NOT_SUPPORTED leaves its field unset. */
#ifndef TELEMETRY_NVML_H
#define TELEMETRY_NVML_H

#include <stddef.h>
#include <stdint.h>

/* Bits of nvml_gpu.has: which fields were read. */
enum {
    NVML_HAS_UTILIZATION = 1u << 0, /* utilization and memory_utilization */
    NVML_HAS_MEMORY = 1u << 1,      /* memory_total and memory_used */
    NVML_HAS_TEMPERATURE = 1u << 2,
    NVML_HAS_POWER = 1u << 3,
    NVML_HAS_POWER_LIMIT = 1u << 4,
    NVML_HAS_ENERGY = 1u << 5,
    NVML_HAS_CLOCK_REASONS = 1u << 6,
    NVML_HAS_ECC_CORRECTED = 1u << 7,
    NVML_HAS_ECC_UNCORRECTED = 1u << 8,
    NVML_HAS_PCIE_TX = 1u << 9,
    NVML_HAS_PCIE_RX = 1u << 10,
};

/* Clock event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*). */
enum {
    NVML_REASON_GPU_IDLE = 0x1,
    NVML_REASON_SW_POWER_CAP = 0x4,
    NVML_REASON_HW_SLOWDOWN = 0x8,
    NVML_REASON_SW_THERMAL = 0x20,
    NVML_REASON_HW_THERMAL = 0x40,
    NVML_REASON_HW_POWER_BRAKE = 0x80,
};

/* One physical GPU or one MIG instance. */
typedef struct nvml_gpu {
    char uuid[96]; /* "GPU-..." or, for a MIG instance, "MIG-..." */
    char name[96];
    int index;                 /* NVML index of the physical GPU (a MIG instance: its parent's) */
    int mig_gi, mig_ci;        /* GPU and compute instance ids of a MIG instance; -1 on a physical GPU */
    int mig_enabled;           /* physical GPU: 1 when MIG mode is on (its instances follow it in the sample) */
    unsigned has;              /* NVML_HAS_* */
    double utilization;        /* 0-1, share of time a kernel ran */
    double memory_utilization; /* 0-1, share of time device memory was read or written */
    uint64_t memory_total, memory_used; /* bytes */
    unsigned temperature_c;
    double power_w, power_limit_w;           /* current draw, enforced limit */
    double energy_j;                         /* consumed since nvml_open (since first seen for a later MIG instance) */
    uint64_t clock_reasons;                  /* NVML_REASON_* mask */
    uint64_t ecc_corrected, ecc_uncorrected; /* volatile counts (since the driver last loaded) */
    uint64_t pcie_tx_bps, pcie_rx_bps;       /* bytes per second (NVML's KB/s times 1024) */
} nvml_gpu;

typedef struct nvml nvml;

/* Loads NVML from `library` when it is non-NULL and non-empty (nothing else is tried), else from
 * "libnvidia-ml.so.1", initialises it and takes a first sample (the energy baselines). Returns NULL and a reason in
 * why[0..why_len) when the library is missing, lacks a required call, fails to initialise or sees no GPU.
 * `warn` (may be NULL) receives one line the first time each call fails with anything but NOT_SUPPORTED. */
nvml *nvml_open(const char *library, void (*warn)(const char *msg), char *why, size_t why_len);
/* nvmlShutdown and dlclose. NULL is a no-op. */
void nvml_close(nvml *n);
/* Number of GPUs NVML reports (all of them, before any visibility filter). */
unsigned nvml_device_count(const nvml *n);

/* Samples the GPUs selected by `visible` (the CUDA_VISIBLE_DEVICES syntax; NULL = all): each physical GPU, then,
 * when MIG mode is on, its MIG instances. *out gets a malloc'ed array of *count entries (free it); returns 0, or -1
 * when out of memory. Calls on one nvml must be serialised by the caller. */
int nvml_sample(nvml *n, const char *visible, nvml_gpu **out, size_t *count);

/* 1 when `visible` (CUDA_VISIBLE_DEVICES syntax: comma-separated NVML indices or GPU-/MIG- UUID prefixes, read up
 * to the first token that is neither, as CUDA does) selects this device. A physical GPU passes its uuid, its index
 * and parent_uuid NULL; a MIG instance passes its own uuid, its parent's index and its parent's uuid, so it is
 * selected by its own UUID or by its parent's index or UUID. NULL selects everything. (nvml_sample also keeps a
 * physical GPU when one of its MIG instances is selected.) Integer tokens are NVML indices, which are CUDA's
 * ordinals only under CUDA_DEVICE_ORDER=PCI_BUS_ID or on machines of identical GPUs. */
int nvml_visible(const char *visible, const char *uuid, int index, const char *parent_uuid);

#endif
