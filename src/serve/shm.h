/* System shared memory (Triton's extension): a registry of named regions, each a window [offset, offset +
 * byte_size) of a POSIX shared-memory object (shm_open key) mapped read/write into the server. Inference
 * requests read inputs from and write outputs to these windows instead of carrying the bytes in HTTP.
 *
 * Lifetime: a region is reference-counted. The registry holds one reference while the region is registered;
 * every request that uses the region holds one more from parsing until its response is sent. Unregistering
 * removes the name at once (the name may be registered again straight away) and the mapping is unmapped
 * when the last request using it lets go, so a queued or running request never sees its memory vanish. */
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
/* Unregisters every region (mappings still used by requests are unmapped when those finish) and frees the
 * registry. Call it after the requests that could still acquire regions are gone. NULL is a no-op. */
void shm_registry_free(shm_registry *reg);

/* Opens the POSIX shared-memory object `key` (shm_open, read/write), checks that [offset, offset + byte_size)
 * lies inside it, maps that window and registers it as `name`. Errors (400) name the region and the key: the
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

/* Looks up `name`, checks that [offset, offset + byte_size) lies inside the region, takes a reference and sets
 * *addr to the first byte of that range. `what` names the user of the range in errors ("input 'x'"). Errors
 * are 400: unknown region, or a range that overflows the region (offset, size and region size given). */
int shm_acquire(shm_registry *reg, const char *name, uint64_t offset, uint64_t byte_size, const char *what,
                shm_region **out, void **addr, serve_error *e);
/* Drops a reference from shm_acquire; the last one unmaps. NULL is a no-op. */
void shm_region_release(shm_region *region);

#endif
