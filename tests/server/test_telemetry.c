/* Unit tests of the telemetry layer: the /proc parsers and readers, CUDA_VISIBLE_DEVICES matching, NVML through
 * dlopen against the fake library built by the tests (argv[1]), and the latency histogram's bucketing. */
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "telemetry/nvml.h"
#include "telemetry/procstat.h"
#include "test_util.h"

static void test_proc_parsers(void) {
    procstat_cpu a, b;
    CHECK(procstat_parse_cpu("cpu  100 20 30 400 50 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", &a) == 0);
    CHECK(a.busy == 100 + 20 + 30 + 6 + 7 + 8);
    CHECK(a.total == a.busy + 400 + 50);
    CHECK(procstat_parse_cpu("intr 5\ncpu  200 20 30 500 50 6 7 8 0 0\n", &b) == 0); /* the line need not be first */
    CHECK(b.busy == a.busy + 100 && b.total == a.total + 200);
    CHECK(procstat_cpu_utilization(&a, &b) == 0.5);
    CHECK(procstat_cpu_utilization(&a, &a) == -1); /* no tick passed */
    CHECK(procstat_cpu_utilization(&b, &a) == -1); /* counters went back */
    CHECK(procstat_parse_cpu("cpu0 1 2 3 4\n", &a) == -1);
    CHECK(procstat_parse_cpu("cpu  1 2\n", &a) == -1);

    procstat_memory m;
    CHECK(procstat_parse_memory("MemTotal:       16000 kB\nMemFree:  10 kB\nMemAvailable:   4000 kB\n", &m) == 0);
    CHECK(m.total == 16000ull * 1024 && m.available == 4000ull * 1024);
    CHECK(procstat_parse_memory("MemTotal:       16000 kB\nMemFree:  10 kB\n", &m) == -1);

    procstat_self s;
    CHECK(procstat_parse_status("Name:\tx\nVmPeak:\t  999 kB\nVmSize:\t  900 kB\nVmHWM:\t 50 kB\nVmRSS:\t  40 kB\n",
                                &s) == 0);
    CHECK(s.virtual_bytes == 900ull * 1024 && s.resident_bytes == 40ull * 1024);
    CHECK(procstat_parse_status("Name:\tx\nVmSize:\t  900 kB\n", &s) == -1);
}

static void test_proc_readers(void) {
    procstat_cpu c;
    procstat_memory m;
    procstat_self s;
    CHECK(procstat_read_cpu(&c) == 0 && c.total > 0 && c.busy <= c.total);
    CHECK(procstat_read_memory(&m) == 0 && m.total > 0 && m.available <= m.total);
    CHECK(procstat_read_self(&s) == 0 && s.resident_bytes > 0 && s.resident_bytes <= s.virtual_bytes);
    volatile double x = 0; /* burn a little CPU so user time is visible */
    for (int i = 0; i < 20000000; i++) x += i;
    procstat_self s2;
    CHECK(procstat_read_self(&s2) == 0 && s2.user_s + s2.system_s > s.user_s + s.system_s);
}

#define G0 "GPU-11111111-2222-3333-4444-555555555555"
#define G1 "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
#define MA "MIG-11112222-3333-4444-5555-666677778888"
#define MB "MIG-99990000-aaaa-bbbb-cccc-ddddeeeeffff"

static void test_visible(void) {
    CHECK(nvml_visible(NULL, G0, 0, NULL));
    CHECK(nvml_visible("0", G0, 0, NULL));
    CHECK(!nvml_visible("0", G1, 1, NULL));
    CHECK(nvml_visible("1, 0", G0, 0, NULL));
    CHECK(nvml_visible("GPU-1111", G0, 0, NULL));
    CHECK(!nvml_visible("GPU-1111", G1, 1, NULL));
    CHECK(nvml_visible("GPU-aaaa", MA, 1, G1)); /* an instance through its parent's UUID */
    CHECK(nvml_visible("1", MB, 1, G1));        /* ... or its parent's index */
    CHECK(nvml_visible("MIG-9999", MB, 1, G1));
    CHECK(!nvml_visible("MIG-9999", MA, 1, G1));
    CHECK(!nvml_visible("MIG-9999", G1, 1, NULL));  /* a MIG token never names a physical GPU by itself */
    CHECK(!nvml_visible("0,bogus,1", G1, 1, NULL)); /* CUDA reads up to the first invalid token */
    CHECK(nvml_visible("0,bogus,1", G0, 0, NULL));
    CHECK(!nvml_visible("", G0, 0, NULL));
    CHECK(!nvml_visible("-1", G0, 0, NULL));
}

static int warnings;
static char last_warning[512];
static void count_warning(const char *msg) {
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

static const nvml_gpu *find(const nvml_gpu *g, size_t n, const char *uuid) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(g[i].uuid, uuid)) return &g[i];
    return NULL;
}

static void test_nvml(const char *fake) {
    char why[512] = "";
    CHECK(nvml_open("/nonexistent/libnvidia-ml.so.1", NULL, why, sizeof why) == NULL);
    CHECK(strstr(why, "cannot load /nonexistent/libnvidia-ml.so.1") != NULL);
    CHECK(nvml_open("libc.so.6", NULL, why, sizeof why) == NULL); /* loads, but is no NVML */
    CHECK(strstr(why, "has no nvmlInit_v2") != NULL);

    nvml *n = nvml_open(fake, count_warning, why, sizeof why);
    CHECK(n != NULL);
    if (!n) {
        fprintf(stderr, "nvml_open(%s): %s\n", fake, why);
        return;
    }
    CHECK(nvml_device_count(n) == 2);
    CHECK(warnings == 1); /* the first sample: temperature of the first MIG instance, NO_PERMISSION */
    CHECK(strstr(last_warning, "nvmlDeviceGetTemperature failed on " MA ": Insufficient Permissions (code 4)") != NULL);
    nvml_gpu *g;
    size_t cnt;
    CHECK(nvml_sample(n, NULL, &g, &cnt) == 0);
    CHECK(cnt == 4);
    CHECK(warnings == 1); /* reported once */
    if (cnt == 4) {
        CHECK(!strcmp(g[0].uuid, G0) && !strcmp(g[1].uuid, G1) && !strcmp(g[2].uuid, MA) && !strcmp(g[3].uuid, MB));
        const nvml_gpu *a = &g[0];
        CHECK(!strcmp(a->name, "NVIDIA Fake H200") && a->index == 0 && a->mig_gi == -1 && a->mig_ci == -1 &&
              !a->mig_enabled);
        CHECK(a->has ==
              (NVML_HAS_UTILIZATION | NVML_HAS_MEMORY | NVML_HAS_TEMPERATURE | NVML_HAS_POWER | NVML_HAS_POWER_LIMIT |
               NVML_HAS_ENERGY | NVML_HAS_CLOCK_REASONS | NVML_HAS_PCIE_TX | NVML_HAS_PCIE_RX));
        CHECK(a->utilization == 0.37 && a->memory_utilization == 0.12);
        CHECK(a->memory_total == 150323855360ull && a->memory_used == 2147483648ull);
        CHECK(a->temperature_c == 41 && a->power_w == 123.456 && a->power_limit_w == 700.0);
        CHECK(a->energy_j == 250.0); /* 5250000 mJ now, 5000000 mJ at open */
        CHECK(a->clock_reasons == (NVML_REASON_GPU_IDLE | NVML_REASON_SW_POWER_CAP));
        CHECK(a->pcie_tx_bps == 1000u * 1024 && a->pcie_rx_bps == 2500u * 1024);
        const nvml_gpu *b = &g[1];
        CHECK(b->mig_enabled && b->index == 1 && b->mig_gi == -1);
        CHECK(!(b->has & (NVML_HAS_UTILIZATION | NVML_HAS_PCIE_TX | NVML_HAS_PCIE_RX)));
        CHECK((b->has & NVML_HAS_ECC_CORRECTED) && (b->has & NVML_HAS_ECC_UNCORRECTED));
        CHECK(b->ecc_corrected == 7 && b->ecc_uncorrected == 0); /* volatile, not aggregate (which would be +1000) */
        CHECK(b->energy_j == 100.0 && b->power_w == 250.0 && b->temperature_c == 55);
        CHECK(b->clock_reasons == (NVML_REASON_HW_THERMAL | NVML_REASON_HW_POWER_BRAKE));
        const nvml_gpu *ma = &g[2], *mb = &g[3];
        CHECK(ma->has == NVML_HAS_MEMORY && mb->has == NVML_HAS_MEMORY);
        CHECK(ma->index == 1 && ma->mig_gi == 1 && ma->mig_ci == 0 && mb->mig_gi == 2 && mb->mig_ci == 0);
        CHECK(ma->memory_total == 42949672960ull && ma->memory_used == 1073741824ull);
        CHECK(!strcmp(mb->name, "NVIDIA Fake A100 MIG 2g.20gb") && mb->memory_total == 21474836480ull &&
              mb->memory_used == 0);
    }
    free(g);

    static const struct {
        const char *visible;
        const char *uuids[4];
    } cases[] = {
        {"0", {G0}},
        {"1", {G1, MA, MB}},
        {"GPU-aaaa", {G1, MA, MB}},
        {"MIG-9999", {G1, MB}}, /* the parent is kept for its whole-GPU figures */
        {"GPU-1111,MIG-1111", {G0, G1, MA}},
        {"bogus", {NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(nvml_sample(n, cases[c].visible, &g, &cnt) == 0);
        size_t want = 0;
        while (want < 4 && cases[c].uuids[want]) want++;
        CHECK(cnt == want);
        for (size_t i = 0; i < want && i < cnt; i++) CHECK(find(g, cnt, cases[c].uuids[i]) == &g[i]);
        free(g);
    }
    nvml_close(n);
    nvml_close(NULL);

    setenv("FAKE_NVML_COUNT", "0", 1);
    CHECK(nvml_open(fake, NULL, why, sizeof why) == NULL);
    CHECK(strstr(why, "reports no GPU") != NULL);
    unsetenv("FAKE_NVML_COUNT");
    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    CHECK(nvml_open(fake, NULL, why, sizeof why) == NULL);
    CHECK(strstr(why, "nvmlInit_v2 failed: Driver Not Loaded (code 9)") != NULL);
    unsetenv("FAKE_NVML_INIT_FAIL");
}

static void test_histogram(void) {
    stats_model s;
    CHECK(stats_model_init(&s, 4) == 0);
    stats_record_success(&s, 10000, 1000, 20000, 4000, 25000); /* total exactly 25 us: the first bucket */
    stats_record_success(&s, 30000, 2000, 3000, 4000, 25001);  /* just above */
    stats_record_success(&s, 0, 0, 0, 0, 10000000000ull + 1);  /* above 10 s: +Inf only */
    uint64_t cum[STATS_HIST_BOUNDS + 1], sum;
    stats_hist_snapshot(&s.request_hist, cum, &sum);
    CHECK(stats_hist_bounds_us[0] == 25 && stats_hist_bounds_us[STATS_HIST_BOUNDS - 1] == 10000000);
    CHECK(cum[0] == 1 && cum[1] == 2 && cum[STATS_HIST_BOUNDS - 1] == 2 && cum[STATS_HIST_BOUNDS] == 3);
    CHECK(sum == 25000 + 25001 + 10000000000ull + 1);
    for (size_t b = 1; b <= STATS_HIST_BOUNDS; b++) CHECK(cum[b] >= cum[b - 1]);
    stats_hist_snapshot(&s.queue_hist, cum, &sum);
    CHECK(cum[0] == 2 && cum[1] == 3 && sum == 40000); /* 10 us, 30 us, 0 */
    stats_hist_snapshot(&s.compute_hist, cum, &sum);
    CHECK(cum[0] == 3 && sum == 25000 + 9000);   /* 25 us, 9 us, 0: all in the first bucket */
    stats_record_failure(&s, STATS_OTHER, 5000); /* failures stay out of the histograms */
    stats_hist_snapshot(&s.request_hist, cum, &sum);
    CHECK(cum[STATS_HIST_BOUNDS] == 3);
    stats_model_destroy(&s);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_serve_telemetry PATH-OF-FAKE-libnvidia-ml.so\n");
        return 2;
    }
    test_proc_parsers();
    test_proc_readers();
    test_visible();
    test_nvml(argv[1]);
    test_histogram();
    TEST_MAIN_END();
}
