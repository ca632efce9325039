/* System shared-memory registry: named, reference-counted windows of POSIX shared-memory objects. One mutex
 * guards the registered regions (a hash table of names beside the registration-order list); a region's open
 * descriptor lives until its last reference is dropped (see shm.h for the lifetime rules). Regions are never
 * mapped: the object's owner may shrink it at any time (ftruncate), and a mapping of the lost pages would fault
 * (SIGBUS) in whichever server thread touched it. pread/pwrite at the window's offset instead see the object's
 * current size: a shrunk object gives a short read, reported as a 400 naming the region. */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* shm_open */
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct shm_region {
    char *name, *key;
    uint64_t offset, byte_size; /* as registered */
    int fd;                     /* the object, open read/write; -1 before it is opened */
    _Atomic long refs;          /* the registry's (while registered) + one per request using it */
    shm_region *prev, *next;    /* registry list */
};

struct shm_registry {
    pthread_mutex_t lock;
    shm_region *head, *tail;    /* registration order */
    shm_region **slots;         /* open addressing on the name (linear probing, tombstones); NULL = empty */
    size_t cap, used;           /* used: live entries + tombstones; the table grows at half full */
    size_t count;               /* live entries */
    uint64_t seed;              /* random per registry: names cannot be chosen to collide */
};

/* A removed entry: probing goes on past it. */
static shm_region TOMBSTONE;

static void region_destroy(shm_region *g) {
    if (g->fd >= 0) close(g->fd);
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
    if (getrandom(&(*out)->seed, sizeof (*out)->seed, GRND_NONBLOCK) != (ssize_t)sizeof (*out)->seed)
        (*out)->seed = (uint64_t)(uintptr_t)*out ^ (uint64_t)time(NULL); /* no entropy yet: still not fixed */
    return 0;
}

void shm_registry_free(shm_registry *reg) {
    if (!reg) return;
    shm_unregister(reg, NULL);
    pthread_mutex_destroy(&reg->lock);
    free(reg->slots);
    free(reg);
}

/* FNV-1a of the name from a random start, folded so that the slot (the low bits) depends on every bit. */
static size_t name_hash(const shm_registry *reg, const char *s) {
    uint64_t h = 1469598103934665603u ^ reg->seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)(h ^ (h >> 29) ^ (h >> 47));
}

/* Caller holds the lock. Expected O(1): lookups on every infer request stay flat however many regions exist. */
static shm_region *find(shm_registry *reg, const char *name) {
    if (!reg->cap) return NULL;
    for (size_t i = name_hash(reg, name) & (reg->cap - 1);; i = (i + 1) & (reg->cap - 1)) {
        shm_region *g = reg->slots[i];
        if (!g) return NULL;
        if (g != &TOMBSTONE && !strcmp(g->name, name)) return g;
    }
}

/* Caller holds the lock; the slot for g's name is free or a tombstone. */
static void slot_put(const shm_registry *reg, shm_region **slots, size_t cap, shm_region *g) {
    size_t i = name_hash(reg, g->name) & (cap - 1);
    while (slots[i] && slots[i] != &TOMBSTONE) i = (i + 1) & (cap - 1);
    slots[i] = g;
}

/* Caller holds the lock. Makes room for one more entry (rebuilding without tombstones); -1 when out of memory. */
static int table_reserve(shm_registry *reg) {
    if ((reg->used + 1) * 2 <= reg->cap) return 0;
    size_t live = reg->count, cap = 16;
    while (cap < (live + 1) * 4) cap *= 2;
    shm_region **slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (shm_region *g = reg->head; g; g = g->next) slot_put(reg, slots, cap, g);
    free(reg->slots);
    reg->slots = slots;
    reg->cap = cap;
    reg->used = live;
    return 0;
}

/* Caller holds the lock; g is in the table. */
static void table_remove(shm_registry *reg, shm_region *g) {
    for (size_t i = name_hash(reg, g->name) & (reg->cap - 1);; i = (i + 1) & (reg->cap - 1))
        if (reg->slots[i] == g) {
            reg->slots[i] = &TOMBSTONE;
            return;
        }
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
    int rc = -1;
    if (g) g->fd = -1;
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
    int fd = g->fd = shm_open(key, O_RDWR | O_CLOEXEC, 0);
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
    g->offset = offset;
    g->byte_size = byte_size;
    atomic_init(&g->refs, 1);
    pthread_mutex_lock(&reg->lock);
    if (find(reg, name)) { /* registered by a concurrent request meanwhile */
        pthread_mutex_unlock(&reg->lock);
        serve_fail(e, SERVE_BAD_REQUEST, "system shared memory region '%s' is already registered (unregister it first)", name);
        goto done;
    }
    if (table_reserve(reg) != 0) {
        pthread_mutex_unlock(&reg->lock);
        serve_fail(e, SERVE_INTERNAL, "out of memory registering system shared memory region '%s'", name);
        goto done;
    }
    slot_put(reg, reg->slots, reg->cap, g);
    reg->used++;
    g->prev = reg->tail;
    if (reg->tail) reg->tail->next = g;
    else reg->head = g;
    reg->tail = g;
    reg->count++;
    pthread_mutex_unlock(&reg->lock);
    g = NULL;
    rc = 0;
done:
    if (g) region_destroy(g); /* closes the descriptor; a registered region keeps its own */
    return rc;
}

void shm_unregister(shm_registry *reg, const char *name) {
    shm_region *gone = NULL;
    pthread_mutex_lock(&reg->lock);
    if (!name) {
        gone = reg->head;
        reg->head = reg->tail = NULL;
        reg->count = 0;
        if (reg->cap) memset(reg->slots, 0, reg->cap * sizeof *reg->slots);
        reg->used = 0;
    } else if ((gone = find(reg, name)) != NULL) { /* names are unique: one region at most */
        table_remove(reg, gone);
        if (gone->prev) gone->prev->next = gone->next;
        else reg->head = gone->next;
        if (gone->next) gone->next->prev = gone->prev;
        else reg->tail = gone->prev;
        gone->next = gone->prev = NULL;
        reg->count--;
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
    if (name) {
        shm_region *g = find(reg, name);
        if (g) json_array_append_new(a, region_json(g));
        found = g != NULL;
    } else {
        for (shm_region *g = reg->head; g; g = g->next) json_array_append_new(a, region_json(g));
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
    pthread_mutex_lock(&reg->lock);
    size_t n = reg->count;
    pthread_mutex_unlock(&reg->lock);
    return n;
}

int shm_acquire(shm_registry *reg, const char *name, uint64_t offset, uint64_t byte_size, const char *what,
                shm_region **out, serve_error *e) {
    *out = NULL;
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
    return 0;
}

const char *shm_region_name(const shm_region *g) { return g->name; }

/* The object's current size, to word a short transfer (the owner shrank it). */
static int64_t object_size(const shm_region *g) {
    struct stat st;
    return fstat(g->fd, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* Bytes the object holds from window offset `offset` on (0 when it ends before), for the error message. */
static uint64_t bytes_left(const shm_region *g, uint64_t offset, int64_t size) {
    uint64_t at = g->offset + offset;
    return size < 0 || (uint64_t)size <= at ? 0 : (uint64_t)size - at;
}

static int short_transfer(const shm_region *g, uint64_t offset, uint64_t bytes, const char *what, serve_error *e) {
    int64_t size = object_size(g);
    return serve_fail(e, SERVE_BAD_REQUEST, "shared memory region '%s' holds %" PRIu64 " bytes at offset %" PRIu64 ", the %s "
                                            "needs %" PRIu64 " (its object '%s' has %lld bytes now: it was shrunk after "
                                            "the region was registered)", g->name, bytes_left(g, offset, size), offset, what,
                      bytes, g->key, (long long)size);
}

int shm_region_read(const shm_region *g, uint64_t offset, void *dst, size_t bytes, const char *what, serve_error *e) {
    /* checked first so a shrunk object is refused before any byte is read; a shrink during the read is a short read */
    int64_t size = object_size(g);
    if (size < 0 || bytes_left(g, offset, size) < bytes) return short_transfer(g, offset, bytes, what, e);
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pread(g->fd, (unsigned char *)dst + done, bytes - done, (off_t)(g->offset + offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return serve_fail(e, SERVE_INTERNAL, "reading %s from shared memory region '%s' failed: %s", what, g->name,
                              strerror(errno));
        if (n == 0) return short_transfer(g, offset, bytes, what, e);
        done += (size_t)n;
    }
    return 0;
}

int shm_region_write(const shm_region *g, uint64_t offset, const void *src, size_t bytes, const char *what,
                     serve_error *e) {
    /* pwrite past the end would grow the object again: a shrunk object is refused instead (a shrink racing with
     * the write can at worst grow it back, never fault) */
    int64_t size = object_size(g);
    if (size < 0 || bytes_left(g, offset, size) < bytes) return short_transfer(g, offset, bytes, what, e);
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pwrite(g->fd, (const unsigned char *)src + done, bytes - done, (off_t)(g->offset + offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return serve_fail(e, SERVE_INTERNAL, "writing %s into shared memory region '%s' failed: %s", what, g->name,
                              n < 0 ? strerror(errno) : "nothing written");
        done += (size_t)n;
    }
    return 0;
}
