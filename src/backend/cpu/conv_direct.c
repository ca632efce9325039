/* Direct Conv for the CPU backend: implicit GEMM over a phase-split padded input, SIMD register tiles. */

/* Against im2col + sgemm this skips building the patch matrix and BLAS's packing of it: each tap of a
 * register tile is one unaligned vector load from the phase-split input (see conv_direct.h). The tile
 * kernels exist for AVX-512, AVX2+FMA and SSE2, picked at run time, since the build targets baseline
 * x86-64; other targets have none and conv.c keeps im2col. */
#include <string.h>

#include "backend/cpu/conv_direct.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define CONV_DIRECT_X86 1
#include <immintrin.h>
#endif

/* A tile kernel: dst[r * ld + j] = act(bias[r] + sum_t w[r * ldw + t] * src[toff[t] + j]) for r < MR,
 * j < NR (bias NULL: 0). W is read in its own layout, [channel][tap]: MR broadcast streams. */
typedef void (*tile_fn)(const float *src, const int64_t *toff, int64_t ntaps, const float *w, int64_t ldw,
                        const float *bias, int relu, float *dst, int64_t ld);

enum { ISA_NONE, ISA_SSE, ISA_AVX2, ISA_AVX512 };

#ifdef CONV_DIRECT_X86

/* One template for every ISA: MR x NV accumulators stay in registers across the tap loop (the loops over
 * r and v unroll completely), the weights come as scalar broadcasts. */
#define DEFINE_TILE(NAME, ATTR, VT, VL, LOAD, STORE, SET1, FMA, MAX, ZERO, MR, NV)                        \
    ATTR static void NAME(const float *src, const int64_t *toff, int64_t ntaps, const float *w, int64_t ldw, \
                          const float *bias, int relu, float *dst, int64_t ld) {                            \
        VT acc[MR][NV];                                                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < (MR); r++) {                                           \
            VT b = SET1(bias ? bias[r] : 0.0f);                                                            \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] = b;                          \
        }                                                                                                  \
        for (int64_t t = 0; t < ntaps; t++) {                                                              \
            const float *s = src + toff[t];                                                                \
            VT xv[NV];                                                                                     \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) xv[v] = LOAD(s + v * (VL));             \
            _Pragma("GCC unroll 8") for (int r = 0; r < (MR); r++) {                                       \
                VT wv = SET1(w[r * ldw + t]);                                                              \
                _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] = FMA(wv, xv[v], acc[r][v]); \
            }                                                                                              \
        }                                                                                                  \
        if (relu) {                                                                                        \
            VT z = ZERO();                                                                                 \
            _Pragma("GCC unroll 8") for (int r = 0; r < (MR); r++)                                         \
                _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) acc[r][v] = MAX(acc[r][v], z);      \
        }                                                                                                  \
        _Pragma("GCC unroll 8") for (int r = 0; r < (MR); r++)                                             \
            _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) STORE(dst + r * ld + v * (VL), acc[r][v]); \
    }

/* expands the ISA argument lists before DEFINE_TILE sees them */
#define TILE(...) DEFINE_TILE(__VA_ARGS__)
/* the panels of one ISA and width: 8 (AVX-512 only), 4, 2 and 1 channels */
#define TILES(PREFIX, ATTR, ARGS, NV)                                                                      \
    TILE(PREFIX##_4, ATTR, ARGS, 4, NV)                                                                    \
    TILE(PREFIX##_2, ATTR, ARGS, 2, NV)                                                                    \
    TILE(PREFIX##_1, ATTR, ARGS, 1, NV)

#define AVX512_ATTR __attribute__((target("avx512f")))
#define AVX512_ARGS __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_max_ps, \
                    _mm512_setzero_ps
TILE(avx512_w3_8, AVX512_ATTR, AVX512_ARGS, 8, 3)
TILES(avx512_w3, AVX512_ATTR, AVX512_ARGS, 3)
TILE(avx512_w1_8, AVX512_ATTR, AVX512_ARGS, 8, 1)
TILES(avx512_w1, AVX512_ATTR, AVX512_ARGS, 1)

#define AVX2_ATTR __attribute__((target("avx2,fma")))
#define AVX2_ARGS __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_max_ps, \
                  _mm256_setzero_ps
TILES(avx2_w3, AVX2_ATTR, AVX2_ARGS, 3)
TILES(avx2_w1, AVX2_ATTR, AVX2_ARGS, 1)

#define SSE_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define SSE_ARGS __m128, 4, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, SSE_FMA, _mm_max_ps, _mm_setzero_ps
TILES(sse_w3, , SSE_ARGS, 3)
TILES(sse_w1, , SSE_ARGS, 1)

/* Compile with -DCONV_DIRECT_ISA=1 (SSE) or 2 (AVX2) to test the narrower kernels on a wide machine. */
static int detect_isa(void) {
#ifdef CONV_DIRECT_ISA
    return CONV_DIRECT_ISA;
#else
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ISA_AVX2;
    return ISA_SSE;
#endif
}

#else
static int detect_isa(void) { return ISA_NONE; }
#endif

/* The kernels of one ISA and tile width: fn[i] takes 8 >> i channels (NULL where the ISA has none). */
typedef struct tile_set {
    int vl;
    tile_fn fn[4];
} tile_set;

static tile_set tiles_for(int isa, int nv) {
    tile_set t = {0, {NULL, NULL, NULL, NULL}};
#ifdef CONV_DIRECT_X86
    if (isa == ISA_AVX512 && nv == 3) t = (tile_set){16, {avx512_w3_8, avx512_w3_4, avx512_w3_2, avx512_w3_1}};
    if (isa == ISA_AVX512 && nv == 1) t = (tile_set){16, {avx512_w1_8, avx512_w1_4, avx512_w1_2, avx512_w1_1}};
    if (isa == ISA_AVX2 && nv == 3) t = (tile_set){8, {NULL, avx2_w3_4, avx2_w3_2, avx2_w3_1}};
    if (isa == ISA_AVX2 && nv == 1) t = (tile_set){8, {NULL, avx2_w1_4, avx2_w1_2, avx2_w1_1}};
    if (isa == ISA_SSE && nv == 3) t = (tile_set){4, {NULL, sse_w3_4, sse_w3_2, sse_w3_1}};
    if (isa == ISA_SSE && nv == 1) t = (tile_set){4, {NULL, sse_w1_4, sse_w1_2, sse_w1_1}};
#else
    (void)isa;
    (void)nv;
#endif
    return t;
}

static int cached_isa = -1;



/* The widest kernel that fits the `rem` channels left: index into tile_set.fn. */
static int panel_kernel(const tile_set *t, int64_t rem) {
    int i = 0;
    while (i < 3 && (!t->fn[i] || (8 >> i) > rem)) i++;
    return i;
}

bool conv_direct_plan(conv_direct *p, int64_t c, int64_t m, const int64_t in[3], const int64_t out[3],
                      const int64_t k[3], const int64_t s[3], const int64_t d[3], const int64_t pb[3],
                      double *work_ratio) {
    int isa = __atomic_load_n(&cached_isa, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = detect_isa();
        __atomic_store_n(&cached_isa, isa, __ATOMIC_RELAXED);
    }
    if (isa == ISA_NONE || c < 1 || m < 1) return false;
    memset(p, 0, sizeof *p);
    p->isa = isa;
    p->c = c;
    p->m = m;
    p->plane = 1;
    for (int i = 0; i < 3; i++) {
        if (k[i] > CONV_DIRECT_MAX_K || out[i] < 1) return false;
        p->in[i] = in[i];
        p->out[i] = out[i];
        p->k[i] = k[i];
        p->s[i] = s[i];
        p->d[i] = d[i];
        p->pb[i] = pb[i];
        p->q[i] = out[i] + (k[i] - 1) * d[i] / s[i];
        p->plane *= p->q[i];
        /* the distinct phases (k*d mod s) the taps of this dim read */
        for (int64_t kk = 0; kk < k[i]; kk++) {
            int64_t ph = kk * d[i] % s[i];
            int j = 0;
            while (j < p->nph[i] && p->phval[i][j] != ph) j++;
            if (j == p->nph[i]) p->phval[i][p->nph[i]++] = ph;
        }
    }
    p->ntaps = c * k[0] * k[1] * k[2];
    p->len = ((out[0] - 1) * p->q[1] + out[1] - 1) * p->q[2] + out[2];
    /* three vectors per tile reuse each weight broadcast three times; one vector wastes less of a short
     * stream's last tile: take the cheaper, one vector costing ~15% more per position */
    const int vl = tiles_for(isa, 3).vl;
    const int64_t cover3 = (p->len + 3 * vl - 1) / (3 * vl) * (3 * vl), cover1 = (p->len + vl - 1) / vl * vl;
    p->nv = (double)cover1 * 1.15 < (double)cover3 ? 1 : 3;
    p->nr = p->nv * vl;
    *work_ratio = (double)(p->nv == 1 ? cover1 : cover3) / (double)(out[0] * out[1] * out[2]);
    return true;
}

size_t conv_direct_input_floats(const conv_direct *p) {
    return (size_t)(p->c * p->nph[0] * p->nph[1] * p->nph[2] * p->plane) + (size_t)p->nr;
}

size_t conv_direct_offset_count(const conv_direct *p) { return (size_t)p->ntaps; }

static int phase_index(const conv_direct *p, int dim, int64_t kk) {
    int64_t ph = kk * p->d[dim] % p->s[dim];
    int j = 0;
    while (p->phval[dim][j] != ph) j++;
    return j;
}

void conv_direct_offsets(const conv_direct *p, int64_t *toff) {
    const int64_t k0 = p->k[0], k1 = p->k[1], k2 = p->k[2], ksize = k0 * k1 * k2;
    const int64_t nph = (int64_t)p->nph[0] * p->nph[1] * p->nph[2];
    /* taps in W's order (c, kd, kh, kw); channel 0's, then shifted by whole channels */
    for (int64_t kd = 0; kd < k0; kd++)
        for (int64_t kh = 0; kh < k1; kh++)
            for (int64_t kw = 0; kw < k2; kw++) {
                int64_t ph = ((int64_t)phase_index(p, 0, kd) * p->nph[1] + phase_index(p, 1, kh)) * p->nph[2] +
                             phase_index(p, 2, kw);
                int64_t shift = ((kd * p->d[0] / p->s[0]) * p->q[1] + kh * p->d[1] / p->s[1]) * p->q[2] +
                                kw * p->d[2] / p->s[2];
                toff[(kd * k1 + kh) * k2 + kw] = ph * p->plane + shift;
            }
    for (int64_t ci = 1; ci < p->c; ci++)
        for (int64_t t = 0; t < ksize; t++) toff[ci * ksize + t] = toff[t] + ci * nph * p->plane;
}

/* The indices i in [0, count) with 0 <= i*s + off < limit, as [*lo, *hi). */
static void valid_range(int64_t count, int64_t s, int64_t off, int64_t limit, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = count;
    if (off < 0) l = (-off + s - 1) / s;
    if (limit - off <= 0) h = 0;
    else if ((limit - off + s - 1) / s < h) h = (limit - off + s - 1) / s;
    if (l > count) l = count;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define DIRECT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DIRECT_CLONES
#endif

/* drow[e] = src[e * s] for e in [lo, hi), zeros elsewhere in [0, q2) (stride 2: a vector deinterleave) */
static DIRECT_CLONES void fill_row(float *drow, const float *src, int64_t lo, int64_t hi, int64_t q2, int64_t s) {
    for (int64_t e = 0; e < lo; e++) drow[e] = 0.0f;
    if (s == 1) memcpy(drow + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
    else if (s == 2)
        for (int64_t e = lo; e < hi; e++) drow[e] = src[2 * e];
    else
        for (int64_t e = lo; e < hi; e++) drow[e] = src[e * s];
    for (int64_t e = hi; e < q2; e++) drow[e] = 0.0f;
}

/* xs[c][phase][a][b][e] = x[c][a*s0 + p0 - pb0][b*s1 + p1 - pb1][e*s2 + p2 - pb2], 0 outside X; for the
 * (channel, phase) planes [cp0, cp1). */
static void fill_planes(const conv_direct *p, const float *x, float *xs, int64_t cp0, int64_t cp1) {
    const int64_t nph = (int64_t)p->nph[0] * p->nph[1] * p->nph[2];
    const int64_t q1 = p->q[1], q2 = p->q[2], in_size = p->in[0] * p->in[1] * p->in[2], s2 = p->s[2];
    for (int64_t cp = cp0; cp < cp1; cp++) {
        const int64_t ci = cp / nph, ph = cp % nph;
        const int64_t p0 = p->phval[0][ph / (p->nph[1] * p->nph[2])], p1 = p->phval[1][(ph / p->nph[2]) % p->nph[1]];
        const int64_t p2 = p->phval[2][ph % p->nph[2]];
        const float *xc = x + ci * in_size;
        float *dst = xs + cp * p->plane;
        int64_t lo, hi;
        valid_range(q2, s2, p2 - p->pb[2], p->in[2], &lo, &hi);
        for (int64_t a = 0; a < p->q[0]; a++) {
            const int64_t id = a * p->s[0] + p0 - p->pb[0];
            for (int64_t b = 0, ih = p1 - p->pb[1]; b < q1; b++, ih += p->s[1]) {
                float *drow = dst + (a * q1 + b) * q2;
                if (id < 0 || id >= p->in[0] || ih < 0 || ih >= p->in[1]) /* a padding row */
                    memset(drow, 0, (size_t)q2 * sizeof(float));
                else
                    fill_row(drow, xc + (id * p->in[1] + ih) * p->in[2] + p2 - p->pb[2], lo, hi, q2, s2);
            }
        }
    }
}

static void fill_phases(const conv_direct *p, const float *x, float *xs, int threads) {
    const int64_t cps = p->c * p->nph[0] * p->nph[1] * p->nph[2];
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (cps * p->plane >= ((int64_t)1 << 17))
    for (int64_t cp = 0; cp < cps; cp++) fill_planes(p, x, xs, cp, cp + 1);
}

/* Copies the valid outputs of a tile (stream positions q0 .. q0+nr) for `rows` channels into y. The
 * pieces are short (one output row at most): a plain loop beats a memcpy call. */
static void scatter_tile(const conv_direct *p, const float *tile, int64_t q0, int rows, float *y, int64_t out_size) {
    const int64_t q1 = p->q[1], q2 = p->q[2], nr = p->nr;
    for (int64_t j = 0; j < nr && q0 + j < p->len;) {
        const int64_t q = q0 + j, r = q / q2, e = q % q2;
        int64_t seg = q2 - e < nr - j ? q2 - e : nr - j;
        if (e < p->out[2] && r % q1 < p->out[1]) {
            const int64_t cnt = seg < p->out[2] - e ? seg : p->out[2] - e;
            float *dst = y + ((r / q1) * p->out[1] + r % q1) * p->out[2] + e;
            for (int i = 0; i < rows; i++)
                for (int64_t x = 0; x < cnt; x++) dst[i * out_size + x] = tile[i * nr + j + x];
        }
        j += seg;
    }
}

void conv_direct_run(const conv_direct *p, const float *x, const float *w, const float *bias, const int64_t *toff,
                     bool relu, float *xs, float *y, int threads) {
    const tile_set ts = tiles_for(p->isa, p->nv);
    const int64_t nr = p->nr, ntaps = p->ntaps, out_size = p->out[0] * p->out[1] * p->out[2];
    const int64_t total = (int64_t)(conv_direct_input_floats(p) - (size_t)nr);
    fill_phases(p, x, xs, threads);
    memset(xs + total, 0, (size_t)nr * sizeof(float)); /* the last tile reads up to nr - 1 past the planes */
    const int64_t tiles = (p->len + nr - 1) / nr;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (tiles * nr * p->m * ntaps >= ((int64_t)1 << 20))
    for (int64_t ti = 0; ti < tiles; ti++) {
        float tile[8 * 48] __attribute__((aligned(64)));
        const int64_t q0 = ti * nr, r = q0 / p->q[2], e = q0 % p->q[2];
        /* a tile wholly inside one output row is stored straight into y */
        const bool in_row = e + nr <= p->out[2] && r % p->q[1] < p->out[1];
        float *yq = y + ((r / p->q[1]) * p->out[1] + r % p->q[1]) * p->out[2] + e;
        for (int64_t m0 = 0; m0 < p->m;) {
            const int ki = panel_kernel(&ts, p->m - m0), rows = 8 >> ki;
            const float *wm = w + m0 * ntaps, *bm = bias ? bias + m0 : NULL;
            if (in_row) {
                ts.fn[ki](xs + q0, toff, ntaps, wm, ntaps, bm, relu, yq + m0 * out_size, out_size);
            } else {
                ts.fn[ki](xs + q0, toff, ntaps, wm, ntaps, bm, relu, tile, nr);
                scatter_tile(p, tile, q0, rows, y + m0 * out_size, out_size);
            }
            m0 += rows;
        }
    }
}
