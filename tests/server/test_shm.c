/* Unit tests of the system shared-memory registry and the codec's shared-memory inputs and outputs: register
 * (page-unaligned offsets, errors), status JSON, acquire bounds, unregister while a reference is held (the region
 * stays readable and writable), many regions (hashed lookups, unregister from the middle), an object shrunk by its
 * owner under a registered region (reads and writes refused with a 400 naming it, never a SIGBUS; fine again once
 * it is grown back), and a request whose input is read from and output written to regions. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
    unsigned char byte = 0;
    CHECK(shm_acquire(reg, "a", 0, 100, "input 'x'", &g, &e) == 0);
    CHECK(shm_region_read(g, 0, &byte, 1, "input 'x'", &e) == 0 && byte == (4096 + 10) % 251);
    memset(&e, 0, sizeof e);
    shm_region *g2;
    CHECK(shm_acquire(reg, "a", 60, 41, "input 'x'", &g2, &e) == -1 && !g2);
    check_msg(&e, 400, "input 'x': shared_memory_offset 60 + shared_memory_byte_size 41 runs past the end of system "
                       "shared memory region 'a', which has 100 bytes");
    memset(&e, 0, sizeof e);
    CHECK(shm_acquire(reg, "a", UINT64_MAX, 2, "input 'x'", &g2, &e) == -1);
    check_msg(&e, 400, "runs past the end");
    memset(&e, 0, sizeof e);
    CHECK(shm_acquire(reg, "nope", 0, 1, "output 'y'", &g2, &e) == -1);
    check_msg(&e, 400, "output 'y': unable to find system shared memory region 'nope'");

    /* unregister while held: the name goes at once, the mapping stays until release */
    shm_unregister(reg, "a");
    shm_unregister(reg, "never");
    CHECK(shm_count(reg) == 1);
    CHECK(shm_register(reg, "a", key, 0, 8, &e) == 0); /* the name is free again */
    byte = 0xAB;                                       /* still open: writes reach the object */
    CHECK(shm_region_write(g, 99, &byte, 1, "output 'y'", &e) == 0);
    CHECK(obj[4096 + 10 + 99] == 0xAB);
    shm_region_release(g);
    shm_region_release(NULL);

    CHECK(shm_acquire(reg, "b", 4096, 16, "input 'x'", &g, &e) == 0);
    shm_registry_free(reg); /* unregisters all; the held region outlives the registry */
    CHECK(shm_region_read(g, 4096, &byte, 1, "input 'x'", &e) == 0 && byte == 4096 % 251);
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

/* Resizes the object as its owner would (ftruncate), behind the server's back. */
static void resize_object(const char *key, off_t size) {
    int fd = shm_open(key, O_RDWR, 0);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(ftruncate(fd, size) == 0);
    close(fd);
}

/* Many regions: lookups, status and unregistering from the middle keep the registration order and find each one. */
static void test_many_regions(const char *key) {
    unsigned char *obj = make_object(key, 4096);
    shm_registry *reg;
    serve_error e = {0};
    CHECK(shm_registry_create(&reg, &e) == 0);
    enum { N = 3000 };
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "r%d", i);
        CHECK(shm_register(reg, name, key, (uint64_t)(i % 4000), 16, &e) == 0);
    }
    CHECK(shm_count(reg) == N);
    for (int i = 0; i < N; i += 2) { /* every other one goes: the table keeps tombstones, the list its order */
        snprintf(name, sizeof name, "r%d", i);
        shm_unregister(reg, name);
    }
    CHECK(shm_count(reg) == N / 2);
    int ok = 1;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "r%d", i);
        shm_region *g = NULL;
        serve_error e2 = {0};
        int rc = shm_acquire(reg, name, 0, 16, "input 'x'", &g, &e2);
        unsigned char b = 0;
        if (i % 2) ok &= rc == 0 && shm_region_read(g, 0, &b, 1, "input 'x'", &e2) == 0 && b == (unsigned char)(i % 4000 % 251);
        else ok &= rc == -1 && e2.code == 400;
        shm_region_release(g);
    }
    CHECK(ok);
    for (int i = 0; i < N; i += 2) { /* names are free again; they come after the survivors */
        snprintf(name, sizeof name, "r%d", i);
        CHECK(shm_register(reg, name, key, 0, 16, &e) == 0);
    }
    json_t *st = shm_status_json(reg, NULL, &e);
    CHECK(json_array_size(st) == N);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(st, 0), "name")), "r1"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(st, N / 2), "name")), "r0"));
    json_decref(st);
    st = shm_status_json(reg, "r2999", &e);
    CHECK(json_array_size(st) == 1);
    json_decref(st);
    shm_registry_free(reg);
    munmap(obj, 4096);
    shm_unlink(key);
}

/* The owner shrinks the object under a registered region: every read and write of the region is refused with a 400
 * naming the region (the server used to map regions and died of SIGBUS here); grown back, the region works again. */
static void test_truncated(const char *key) {
    unsigned char *obj = make_object(key, 4096);
    munmap(obj, 4096); /* this process must not touch the pages either once they are gone */
    shm_registry *reg;
    serve_error e = {0};
    CHECK(shm_registry_create(&reg, &e) == 0);
    CHECK(shm_register(reg, "r", key, 100, 64, &e) == 0);
    shm_region *g;
    CHECK(shm_acquire(reg, "r", 8, 16, "input 'x'", &g, &e) == 0);
    unsigned char buf[16];
    resize_object(key, 0);
    CHECK(shm_region_read(g, 8, buf, sizeof buf, "input 'x'", &e) == -1);
    check_msg(&e, 400, "shared memory region 'r' holds 0 bytes at offset 8, the input 'x' needs 16");
    memset(&e, 0, sizeof e);
    CHECK(shm_region_write(g, 8, buf, sizeof buf, "output 'y'", &e) == -1);
    check_msg(&e, 400, "shared memory region 'r' holds 0 bytes at offset 8, the output 'y' needs 16");
    struct stat st;
    int fd = shm_open(key, O_RDONLY, 0);
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0); /* a refused write did not grow the object back */
    close(fd);
    resize_object(key, 120); /* 100 + 8 = 108: 12 bytes left where 16 are needed */
    memset(&e, 0, sizeof e);
    CHECK(shm_region_read(g, 8, buf, sizeof buf, "input 'x'", &e) == -1);
    check_msg(&e, 400, "shared memory region 'r' holds 12 bytes at offset 8, the input 'x' needs 16");
    CHECK(shm_region_read(g, 8, buf, 12, "input 'x'", &e) == 0); /* what is there can be read */
    resize_object(key, 4096);
    memset(buf, 0x5A, sizeof buf);
    memset(&e, 0, sizeof e);
    CHECK(shm_region_write(g, 8, buf, sizeof buf, "output 'y'", &e) == 0);
    memset(buf, 0, sizeof buf);
    CHECK(shm_region_read(g, 8, buf, sizeof buf, "input 'x'", &e) == 0 && buf[0] == 0x5A && buf[15] == 0x5A);
    shm_region_release(g);

    /* through the codec: an input read while binding, an output written while encoding */
    const char *ct = "name: \"m\" max_batch_size: 4 input [{name: \"x\" data_type: TYPE_FP32 dims: [2]}] "
                     "output [{name: \"y\" data_type: TYPE_FP32 dims: [2]}]";
    model_config c;
    CHECK(config_model_parse(ct, strlen(ct), "config.pbtxt", &c, &e) == 0);
    const char *js = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\",\"parameters\":{"
                     "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":8}}],"
                     "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":8,"
                     "\"shared_memory_offset\":32}}]}";
    kserve_infer_request r;
    cinfer_tensor t;
    int64_t batch;
    CHECK(kserve_parse_infer(js, strlen(js), -1, &r, &e) == 0);
    CHECK(kserve_resolve_shm(&r, reg, &e) == 0);
    resize_object(key, 0);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == -1);
    check_msg(&e, 400, "shared memory region 'r' holds 0 bytes at offset 0, the input 'x' needs 8");
    resize_object(key, 4096);
    memset(&e, 0, sizeof e);
    CHECK(kserve_bind_inputs(&r, &c, &t, &batch, &e) == 0); /* the same request binds once the object is back */
    float y[2] = {3.0f, 4.0f}, back[2] = {0};
    cinfer_tensor out = {.name = "y", .dtype = CINFER_DTYPE_FLOAT, .ndim = 2, .dims = {1, 2}, .data = y};
    char *body = NULL;
    size_t len, hl;
    resize_object(key, 100 + 32 + 4); /* half the output's range */
    CHECK(kserve_encode_response(&r, "m", "1", &out, 1, &body, &len, &hl, &e) == -1 && !body);
    check_msg(&e, 400, "shared memory region 'r' holds 4 bytes at offset 32, the output 'y' needs 8");
    resize_object(key, 4096);
    memset(&e, 0, sizeof e);
    CHECK(kserve_encode_response(&r, "m", "1", &out, 1, &body, &len, &hl, &e) == 0);
    free(body);
    CHECK(shm_acquire(reg, "r", 32, 8, "input 'x'", &g, &e) == 0);
    CHECK(shm_region_read(g, 32, back, 8, "input 'x'", &e) == 0 && back[0] == 3.0f && back[1] == 4.0f);
    shm_region_release(g);
    kserve_infer_request_free(&r);
    config_model_free(&c);
    shm_registry_free(reg);
    shm_unlink(key);
}

int main(void) {
    char key[64];
    snprintf(key, sizeof key, "/cinfer_unit_shm_%d", (int)getpid());
    test_registry(key);
    test_codec(key);
    test_many_regions(key);
    test_truncated(key);
    TEST_MAIN_END();
}
