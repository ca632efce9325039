/* System shared memory (Triton's extension): a registry of named regions, each a window [offset, offset +
 * byte_size) of a POSIX shared-memory object (shm_open key) held open read/write by the server. Inference
 * requests read inputs from and write outputs to these windows instead of carrying the bytes in HTTP.
 *
 * Regions are read and written with pread/pwrite, never mapped: the object's owner can shrink it (ftruncate) at
 * any moment, which would make a mapping fault (SIGBUS) and kill the server. A shrunk object instead gives a
 * 400 naming the region, the bytes it still holds and the bytes the input or output needs.
 *
 * Lifetime: a region is reference-counted. The registry holds one reference while the region is registered;
 * every request that uses the region holds one more from parsing until its response is sent. Unregistering
 * removes the name at once (the name may be registered again straight away) and the object is closed when
 * the last request using it lets go, so a queued or running request never loses its region. Lookups by name
 * are a hash table (expected O(1)), so neither many regions nor many requests make them slow. */
#ifndef SERVE_SHM_H
#define SERVE_SHM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "serve_error.h"

typedef struct shm_registry shm_registry;
typedef struct shm_region shm_region;

/* Returns 0, or -1 with a 500 error when out of memory. */
int shm_registry_create(shm_registry **out, serve_error *e);
/* Unregisters every region (objects still used by requests are closed when those finish) and frees the
 * registry. Call it after the requests that could still acquire regions are gone. NULL is a no-op. */
void shm_registry_free(shm_registry *reg);

/* Opens the POSIX shared-memory object `key` (shm_open, read/write), checks that [offset, offset + byte_size)
 * lies inside it, keeps it open and registers that window as `name`. Errors (400) name the region and the key: the
 * name is taken, the key cannot be opened (with the system's reason), the window is empty or runs past the
 * object's size (both sizes given). */
int shm_register(shm_registry *reg, const char *name, const char *key, uint64_t offset, uint64_t byte_size,
                 serve_error *e);
/* Unregisters `name`, or every region when name is NULL. Unknown names are not an error (Triton's rule). */
void shm_unregister(shm_registry *reg, const char *name);
/* Triton's status array: [{"name","key","offset","byte_size"}] for every region, or for `name` alone (404 when
 * it is not registered). New reference, or NULL with e set. */
json_t *shm_status_json(shm_registry *reg, const char *name, serve_error *e);
/* Number of registered regions. */
size_t shm_count(shm_registry *reg);

/* Looks up `name`, checks that [offset, offset + byte_size) lies inside the region and takes a reference.
 * `what` names the user of the range in errors ("input 'x'"). Errors are 400: unknown region, or a range that
 * overflows the region (offset, size and region size given). */
int shm_acquire(shm_registry *reg, const char *name, uint64_t offset, uint64_t byte_size, const char *what,
                shm_region **out, serve_error *e);
/* Drops a reference from shm_acquire; the last one closes the object. NULL is a no-op. */
void shm_region_release(shm_region *region);
const char *shm_region_name(const shm_region *region);

/* Copies `bytes` bytes at `offset` of the region's window into dst (pread: the one copy out of the region), or
 * from src into it (pwrite). The caller checked the range against the window (shm_acquire). The object's size
 * is checked first (fstat), so one shrunk by its owner is refused before anything moves; a shrink during the
 * copy is a short read, refused the same way. That error is 400: "shared memory region 'r' holds N bytes at
 * offset O, the input 'x' needs M (...)", with `what` = "input 'x'" / "output 'y'". A failing system call is
 * a 500 naming the region. Any number of threads may read and write one region at once. */
int shm_region_read(const shm_region *region, uint64_t offset, void *dst, size_t bytes, const char *what, serve_error *e);
int shm_region_write(const shm_region *region, uint64_t offset, const void *src, size_t bytes, const char *what,
                     serve_error *e);

#endif
