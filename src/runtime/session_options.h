/* Private to the runtime: the options cinfer_session_create takes, parsed into one struct.
 *
 * One table in session_options.c gives each option its key, type, allowed values, default, documentation and the
 * field of session_options it fills. The parser, its error messages and the public listing
 * (cinfer_num_session_options / cinfer_session_option_info) all read that table, and the CLI's help and the
 * server's pass-through of cinfer_<key> config parameters read the listing, so an option is added in one place
 * and no caller checks values itself.
 */
#ifndef CINFER_RUNTIME_SESSION_OPTIONS_H
#define CINFER_RUNTIME_SESSION_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer/cinfer.h"

/* Option "precision"; the order is that of the option's value names in the table. fp32 (TF32 off), tf32 (float32
 * storage, TF32 tensor-core GEMMs and convolutions on GPUs), fp16 / bf16 (the model's half-precision copy; see
 * graph/precision.c). */
typedef enum session_precision {
    PRECISION_FP32,
    PRECISION_TF32,
    PRECISION_FP16,
    PRECISION_BF16,
} session_precision;

/* Option "gpu_wait"; the order is that of the option's value names in the table. */
typedef enum session_gpu_wait {
    GPU_WAIT_SPIN,
    GPU_WAIT_BLOCK,
} session_gpu_wait;

#define SESSION_MAX_DIMS 64 /* dim.NAME options one session takes */

/* Fields by type: bool options are bool, int options long, enum options int (the index of the value's name). */
typedef struct session_options {
    long threads;      /* 0: all cores */
    int precision;     /* session_precision */
    bool deterministic;
    bool cuda_graphs;
    int gpu_wait;      /* session_gpu_wait */
    bool profile;
    long guard_bytes;  /* 0: off */
    long copy_chunks;  /* 0: by size; 1: never split */
    bool timeline;
    long max_batch;    /* 0: not given (no capacity check) */
    size_t num_dims;   /* dim.NAME options in the order given (a repeated NAME: the last counts) */
    const char *dim_names[SESSION_MAX_DIMS]; /* NAME, pointing into the caller's key */
    long dim_values[SESSION_MAX_DIMS];
} session_options;

/* Fills *out with every option's default, then applies the given pairs in order (a repeated key: the last wins).
 * An unknown key, or a value the option does not take, fails with CINFER_ERR_INVALID_ARGUMENT naming the key and
 * the value and saying what the option takes (for an unknown key: every known one). */
cinfer_status session_options_parse(const char *const *keys, const char *const *values, size_t n,
                                    session_options *out);

#endif
