/* Unit tests of the system shared-memory registry and the codec's shared-memory inputs and outputs: register
 * (page-unaligned offsets, errors), status JSON, acquire bounds, unregister while a reference is held (the mapping
 * stays readable and writable), and a request whose input is read from and output written to regions. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config_model.h"
#include "kserve_codec.h"
#include "shm.h"
#include "test_util.h"

static void check_msg(const serve_error *e, int code, const char *needle) {
    CHECK(e->code == code);
    if (!strstr(e->msg, needle)) {
        test_failures++;
        fprintf(stderr, "FAIL: error \"%s\" does not mention \"%s\"\n", e->msg, needle);
    }
}

/* A POSIX shm object of `size` bytes, mapped here; bytes are i % 251. */
static unsigned char *make_object(const char *key, size_t size) {
    shm_unlink(key);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    if (fd < 0) return NULL;
    CHECK(ftruncate(fd, (off_t)size) == 0);
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(p != MAP_FAILED);
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(i % 251);
    return p;
}

static void test_registry(const char *key) {
    unsigned char *obj = make_object(key, 3 * 4096);
    shm_registry *reg;
    serve_error e = {0};
    CHECK(shm_registry_create(&reg, &e) == 0);
    CHECK(shm_register(reg, "a", key, 4096 + 10, 100, &e) == 0); /* not page-aligned */
    CHECK(shm_register(reg, "b", key, 0, 3 * 4096, &e) == 0);
    CHECK(shm_count(reg) == 2);

    memset(&e, 0, sizeof e);
    CHECK(shm_register(reg, "a", key, 0, 1, &e) == -1);
    check_msg(&e, 400, "system shared memory region 'a' is already registered");
    memset(&e, 0, sizeof e);
    CHECK(shm_register(reg, "c", "/cinfer_no_such_key_xyz", 0, 1, &e) == -1);
    check_msg(&e, 400, "cannot open shared memory key '/cinfer_no_such_key_xyz': No such file or directory");
    memset(&e, 0, sizeof e);
    CHECK(shm_register(reg, "c", key, 3 * 4096 - 4, 5, &e) == -1);
    check_msg(&e, 400, "offset 12284 + byte_size 5 = 12289 runs past the end of key");
    memset(&e, 0, sizeof e);
    CHECK(shm_register(reg, "c", key, UINT64_MAX, 2, &e) == -1);
    check_msg(&e, 400, "overflows");
    memset(&e, 0, sizeof e);
    CHECK(shm_register(reg, "c", key, 0, 0, &e) == -1);
    check_msg(&e, 400, "byte_size must be at least 1");
    CHECK(shm_count(reg) == 2);

    json_t *st = shm_status_json(reg, NULL, &e);
    char *s = json_dumps(st, JSON_COMPACT);
    char want[256];
    snprintf(want, sizeof want, "[{\"name\":\"a\",\"key\":\"%s\",\"offset\":4106,\"byte_size\":100},"
                                "{\"name\":\"b\",\"key\":\"%s\",\"offset\":0,\"byte_size\":12288}]", key, key);
    CHECK(s && !strcmp(s, want));
    free(s);
    json_decref(st);
    memset(&e, 0, sizeof e);
    CHECK(shm_status_json(reg, "zz", &e) == NULL);
    check_msg(&e, 404, "Unable to find system shared memory region: 'zz'");

    /* acquire: offsets relative to the region, bounds checked */
    shm_region *g;
    void *addr;
    CHECK(shm_acquire(reg, "a", 0, 100, "input 'x'", &g, &addr, &e) == 0);
    CHECK(addr && *(unsigned char *)addr == (4096 + 10) % 251);
    memset(&e, 0, sizeof e);
    shm_region *g2;
    void *addr2;
    CHECK(shm_acquire(reg, "a", 60, 41, "input 'x'", &g2, &addr2, &e) == -1 && !g2 && !addr2);
    check_msg(&e, 400, "input 'x': shared_memory_offset 60 + shared_memory_byte_size 41 runs past the end of system "
                       "shared memory region 'a', which has 100 bytes");
    memset(&e, 0, sizeof e);
    CHECK(shm_acquire(reg, "a", UINT64_MAX, 2, "input 'x'", &g2, &addr2, &e) == -1);
    check_msg(&e, 400, "runs past the end");
    memset(&e, 0, sizeof e);
    CHECK(shm_acquire(reg, "nope", 0, 1, "output 'y'", &g2, &addr2, &e) == -1);
    check_msg(&e, 400, "output 'y': unable to find system shared memory region 'nope'");

    /* unregister while held: the name goes at once, the mapping stays until release */
    shm_unregister(reg, "a");
    shm_unregister(reg, "never");
    CHECK(shm_count(reg) == 1);
    CHECK(shm_register(reg, "a", key, 0, 8, &e) == 0); /* the name is free again */
    ((unsigned char *)addr)[99] = 0xAB;               /* still mapped: writes reach the object */
    CHECK(obj[4096 + 10 + 99] == 0xAB);
    shm_region_release(g);
    shm_region_release(NULL);

    CHECK(shm_acquire(reg, "b", 4096, 16, "input 'x'", &g, &addr, &e) == 0);
    shm_registry_free(reg); /* unregisters all; the held region outlives the registry */
    CHECK(*(unsigned char *)addr == 4096 % 251);
    shm_region_release(g);
    shm_registry_free(NULL);
    munmap(obj, 3 * 4096);
    shm_unlink(key);
}

static void test_codec(const char *key) {
    unsigned char *obj = make_object(key, 4096);
    float x[2] = {1.5f, -2.0f};
    memcpy(obj + 3, x, sizeof x); /* unaligned: the codec copies it for the engine */
    shm_registry *reg;
    serve_error e = {0};
    CHECK(shm_registry_create(&reg, &e) == 0);
    CHECK(shm_register(reg, "in", key, 0, 64, &e) == 0);
    CHECK(shm_register(reg, "out", key, 1024, 64, &e) == 0);
    const char *ct = "name: \"m\" max_batch_size: 4 input [{name: \"x\" data_type: TYPE_FP32 dims: [2]}] "
                     "output [{name: \"y\" data_type: TYPE_FP32 dims: [2]}, {name: \"z\" data_type: TYPE_FP32 dims: [-1]}]";
    model_config c;
    serve_error err = {0};
    CHECK(config_model_parse(ct, strlen(ct), "config.pbtxt", &c, &err) == 0);
    const char *js = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"parameters\":{"
                     "\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8,\"shared_memory_offset\":3}}],"
                     "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\",\"shared_memory_byte_size\":8,"
                     "\"shared_memory_offset\":4,\"binary_data\":false}},{\"name\":\"z\",\"parameters\":{\"binary_data\":true}}]}";
    kserve_infer_request r;
    cinfer_tensor t;
    int64_t batch;
    CHECK(kserve_parse_infer(js, strlen(js), -1, &r, &e) == 0);
    CHECK(r.inputs[0].data == NULL && r.inputs[0].shm.region && r.outputs[0].shm.byte_size == 8);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == -1); /* not resolved: an internal error, never a crash */
    check_msg(&e, 500, "was not resolved");
    memset(&e, 0, sizeof e);
    CHECK(kserve_resolve_shm(&r, reg, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == 0 && batch == 1);
    CHECK(((const float *)t.data)[0] == 1.5f && ((const float *)t.data)[1] == -2.0f);
    shm_unregister(reg, NULL); /* the request holds its regions */
    float y[2] = {7.0f, 8.0f}, z[3] = {1, 2, 3};
    cinfer_tensor outs[2] = {{.name = "y", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 2}, .data = y},
                             {.name = "z", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 3}, .data = z}};
    char *body;
    size_t len, hl;
    CHECK(kserve_encode_response(&r, "m", "1", outs, 2, &body, &len, &hl, &e) == 0);
    CHECK(!memcmp(obj + 1024 + 4, y, 8));
    const char *head = "{\"model_name\":\"m\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\","
                       "\"shape\":[1,2]},{\"name\":\"z\",\"datatype\":\"FP32\",\"shape\":[1,3],\"parameters\":"
                       "{\"binary_data_size\":12}}]}";
    CHECK(hl == strlen(head) && len == hl + 12 && !memcmp(body, head, hl) && !memcmp(body + hl, z, 12));
    free(body);
    /* an output larger than its range (dynamic dims: found after the run) */
    outs[0].dims[1] = 3;
    memset(&e, 0, sizeof e);
    CHECK(kserve_encode_response(&r, "m", "1", outs, 2, &body, &len, &hl, &e) == -1);
    check_msg(&e, 400, "output 'y' of model 'm' has 12 bytes, more than its shared_memory_byte_size of 8 in region 'out'");
    kserve_infer_request_free(&r);

    /* sizes fixed by the config are checked when binding, before any run */
    CHECK(shm_register(reg, "out", key, 0, 64, &e) == 0);
    const char *small = "{\"inputs\":[{\"name\":\"x\",\"shape\":[3,2],\"datatype\":\"FP32\",\"data\":[1,2,3,4,5,6]}],"
                        "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\",\"shared_memory_byte_size\":20}}]}";
    CHECK(kserve_parse_infer(small, strlen(small), -1, &r, &e) == 0);
    CHECK(kserve_resolve_shm(&r, reg, &e) == 0);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == -1);
    check_msg(&e, 400, "output 'y' of model 'm' needs 24 bytes but its shared_memory_byte_size is 20");
    kserve_infer_request_free(&r);

    /* parse errors */
    struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"parameters\":{\"shared_memory_region\":\"in\"}}]}",
         "input 'x': shared_memory_region 'in' needs shared_memory_byte_size"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"parameters\":{\"shared_memory_region\":7,"
         "\"shared_memory_byte_size\":8}}]}", "input 'x': shared_memory_region must be a non-empty string"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,2],\"parameters\":{"
         "\"shared_memory_offset\":8}}]}", "input 'x': shared_memory_offset is given without shared_memory_region"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"y\","
         "\"parameters\":{\"shared_memory_region\":\"out\"}}]}", "output 'y': shared_memory_region 'out' needs shared_memory_byte_size"},
        {"{\"parameters\":{\"shared_memory_region\":\"in\"},\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
         "\"data\":[1,2]}]}", "request parameter 'shared_memory_region' belongs in the parameters of an input"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        CHECK(kserve_parse_infer(bad[i].json, strlen(bad[i].json), -1, &r, &e) == -1);
        check_msg(&e, 400, bad[i].needle);
    }
    config_model_free(&c);
    shm_registry_free(reg);
    munmap(obj, 4096);
    shm_unlink(key);
}

int main(void) {
    char key[64];
    snprintf(key, sizeof key, "/cinfer_unit_shm_%d", (int)getpid());
    test_registry(key);
    test_codec(key);
    TEST_MAIN_END();
}
