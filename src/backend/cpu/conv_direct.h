/* The direct (implicit-GEMM) Conv kernel of conv_direct.c, as conv.c calls it. */
#ifndef CINFER_CPU_CONV_DIRECT_H
#define CINFER_CPU_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest kernel extent per spatial dim the direct kernel takes (the phase tables are fixed arrays). */
#define CONV_DIRECT_MAX_K 16

/* One group of a Conv in 3-D form (ranks 1-2 with leading size-1 dims). The padded input is split into
 * stride phases (plane (p0, p1, p2) holds the padded input at indices q*s + p), so every tap of every output
 * reads its input at a fixed offset from the output's own index: y[q] = sum_t w[t] * xs[q + off[t]], with
 * q = (od * hq + oh) * wq + ow running over one flat stream. Outputs with ow >= out[2] or oh >= out[1] fall
 * in the phase planes' margins and are dropped. */
typedef struct conv_direct {
    int64_t c, m;                 /* channels in, channels out (of one group) */
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3];
    int64_t q[3];                 /* phase plane dims */
    int nph[3];                   /* phases in use per dim */
    int64_t phval[3][CONV_DIRECT_MAX_K]; /* their phase values */
    int64_t plane;                /* q[0] * q[1] * q[2] */
    int64_t ntaps;                /* c * k0 * k1 * k2 */
    int64_t len;                  /* flat stream length: last valid output + 1 */
    int nv, nr;                   /* register tile: nv vectors, nr stream positions */
    int isa;
} conv_direct;

/* Plans one group; false when this build or CPU has no direct kernel or the shape does not suit it.
 * `work_ratio` receives (stream positions computed) / (outputs) for the caller's cost rule. */
bool conv_direct_plan(conv_direct *p, int64_t c, int64_t m, const int64_t in[3], const int64_t out[3],
                      const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t pb[3],
                      double *work_ratio);

/* Scratch: the phase-split input of one image and group (floats, with a tail margin) and the tap
 * offsets (int64, counted in floats). */
size_t conv_direct_input_floats(const conv_direct *p);
size_t conv_direct_offset_count(const conv_direct *p);

/* Fills the tap offsets, in W's order (c, kd, kh, kw). */
void conv_direct_offsets(const conv_direct *p, int64_t *toff);

/* y[m, out] = act(bias + conv) for one image and group: x holds the group's input channels, w its weights
 * [m, c, k0, k1, k2] as stored, bias its m biases (or NULL); xs is the phase-split scratch; act is
 * max(0, .) when relu. */
void conv_direct_run(const conv_direct *p, const float *x, const float *w, const float *bias, const int64_t *toff,
                     bool relu, float *xs, float *y, int threads);

#endif
