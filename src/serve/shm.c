/* System shared-memory registry: named, reference-counted mappings of POSIX shared-memory objects. One mutex
 * guards the list of registered regions; a region's mapping lives until its last reference is dropped (see
 * shm.h for the lifetime rules). Offsets need not be page-aligned: the mapping starts at the page below the
 * offset and the region's base points at the offset inside it. */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct shm_region {
    char *name, *key;
    uint64_t offset, byte_size; /* as registered */
    void *map;                  /* mmap result (page-aligned, below base) */
    size_t map_len;
    unsigned char *base;        /* the byte at `offset` of the object */
    _Atomic long refs;          /* the registry's (while registered) + one per request using it */
    shm_region *next;           /* registry list */
};

struct shm_registry {
    pthread_mutex_t lock;
    shm_region *head;           /* registration order */
};

static void region_destroy(shm_region *g) {
    if (g->map) munmap(g->map, g->map_len);
    free(g->name);
    free(g->key);
    free(g);
}

void shm_region_release(shm_region *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) region_destroy(g);
}

int shm_registry_create(shm_registry **out, serve_error *e) {
    *out = calloc(1, sizeof **out);
    if (!*out) return serve_fail(e, SERVE_INTERNAL, "out of memory creating the shared-memory registry");
    pthread_mutex_init(&(*out)->lock, NULL);
    return 0;
}

void shm_registry_free(shm_registry *reg) {
    if (!reg) return;
    shm_unregister(reg, NULL);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

/* Caller holds the lock. */
static shm_region *find(shm_registry *reg, const char *name) {
    for (shm_region *g = reg->head; g; g = g->next)
        if (!strcmp(g->name, name)) return g;
    return NULL;
}

int shm_register(shm_registry *reg, const char *name, const char *key, uint64_t offset, uint64_t byte_size,
                 serve_error *e) {
    if (!name[0]) return serve_fail(e, SERVE_BAD_REQUEST, "a system shared memory region needs a name");
    if (!key[0]) return serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': 'key' is empty", name);
    if (byte_size == 0)
        return serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': byte_size must be at least 1", name);
    if (offset > UINT64_MAX - byte_size)
        return serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': offset %" PRIu64 " + byte_size %" PRIu64
                                                " overflows", name, offset, byte_size);
    shm_region *g = calloc(1, sizeof *g);
    int fd = -1, rc = -1;
    if (!g || !(g->name = strdup(name)) || !(g->key = strdup(key))) {
        serve_fail(e, SERVE_INTERNAL, "out of memory registering system shared memory region '%s'", name);
        goto done;
    }
    pthread_mutex_lock(&reg->lock);
    int taken = find(reg, name) != NULL;
    pthread_mutex_unlock(&reg->lock);
    if (taken) {
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s' is already registered (unregister it first)", name);
        goto done;
    }
    fd = shm_open(key, O_RDWR, 0);
    if (fd < 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': cannot open shared memory key '%s': %s", name,
                   key, strerror(errno));
        goto done;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': cannot stat key '%s': %s", name, key,
                   strerror(errno));
        goto done;
    }
    if (st.st_size < 0 || offset + byte_size > (uint64_t)st.st_size) {
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': offset %" PRIu64 " + byte_size %" PRIu64
                                         " = %" PRIu64 " runs past the end of key '%s', which has %lld bytes", name, offset,
                   byte_size, offset + byte_size, key, (long long)st.st_size);
        goto done;
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = offset / page * page;
    if (offset + byte_size - start > SIZE_MAX) {
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s' is too large to map", name);
        goto done;
    }
    g->map_len = (size_t)(offset + byte_size - start);
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s': cannot map %zu bytes of key '%s': %s", name,
                   g->map_len, key, strerror(errno));
        goto done;
    }
    g->base = (unsigned char *)g->map + (offset - start);
    g->offset = offset;
    g->byte_size = byte_size;
    atomic_init(&g->refs, 1);
    pthread_mutex_lock(&reg->lock);
    if (find(reg, name)) { /* registered by a concurrent request meanwhile */
        pthread_mutex_unlock(&reg->lock);
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s' is already registered (unregister it first)", name);
        goto done;
    }
    shm_region **tail = &reg->head;
    while (*tail) tail = &(*tail)->next;
    *tail = g;
    pthread_mutex_unlock(&reg->lock);
    g = NULL;
    rc = 0;
done:
    if (fd >= 0) close(fd); /* the mapping stays valid without the descriptor */
    if (g) region_destroy(g);
    return rc;
}

void shm_unregister(shm_registry *reg, const char *name) {
    shm_region *gone = NULL;
    pthread_mutex_lock(&reg->lock);
    for (shm_region **p = &reg->head; *p;) {
        shm_region *g = *p;
        if (!name || !strcmp(g->name, name)) {
            *p = g->next;
            g->next = gone;
            gone = g;
        } else {
            p = &g->next;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    while (gone) {
        shm_region *next = gone->next;
        gone->next = NULL;
        shm_region_release(gone); /* the registry's reference; requests may still hold theirs */
        gone = next;
    }
}

static json_t *region_json(const shm_region *g) {
    return json_pack("{s:s, s:s, s:I, s:I}", "name", g->name, "key", g->key, "offset", (json_int_t)g->offset,
                     "byte_size", (json_int_t)g->byte_size);
}

json_t *shm_status_json(shm_registry *reg, const char *name, serve_error *e) {
    json_t *a = json_array();
    if (!a) {
        serve_fail(e, SERVE_INTERNAL, "out of memory");
        return NULL;
    }
    int found = 0;
    pthread_mutex_lock(&reg->lock);
    for (shm_region *g = reg->head; g; g = g->next)
        if (!name || !strcmp(g->name, name)) {
            json_array_append_new(a, region_json(g));
            found = 1;
        }
    pthread_mutex_unlock(&reg->lock);
    if (name && !found) {
        json_decref(a);
        serve_fail(e, SERVE_NOT_FOUND, "Unable to find system shared memory region: '%s'", name);
        return NULL;
    }
    return a;
}

size_t shm_count(shm_registry *reg) {
    size_t n = 0;
    pthread_mutex_lock(&reg->lock);
    for (shm_region *g = reg->head; g; g = g->next) n++;
    pthread_mutex_unlock(&reg->lock);
    return n;
}

int shm_acquire(shm_registry *reg, const char *name, uint64_t offset, uint64_t byte_size, const char *what,
                shm_region **out, void **addr, serve_error *e) {
    *out = NULL;
    *addr = NULL;
    pthread_mutex_lock(&reg->lock);
    shm_region *g = find(reg, name);
    if (!g) {
        pthread_mutex_unlock(&reg->lock);
        return serve_fail(e, SERVE_BAD_REQUEST, "%s: unable to find system shared memory region '%s' (register it with "
                                                "POST /v2/systemsharedmemory/region/%s/register)", what, name, name);
    }
    if (offset > g->byte_size || byte_size > g->byte_size - offset) {
        uint64_t size = g->byte_size;
        pthread_mutex_unlock(&reg->lock);
        return serve_fail(e, SERVE_BAD_REQUEST, "%s: shared_memory_offset %" PRIu64 " + shared_memory_byte_size %" PRIu64
                                                " runs past the end of system shared memory region '%s', which has %" PRIu64
                                                " bytes", what, offset, byte_size, name, size);
    }
    atomic_fetch_add(&g->refs, 1);
    pthread_mutex_unlock(&reg->lock);
    *out = g;
    *addr = g->base + offset;
    return 0;
}
