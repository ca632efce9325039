/* CPU kernel of Einsum: two-operand contractions as batched GEMM (OpenBLAS), everything else as a strided
 * sum of products over the contracted labels. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"
#include "graph/shape/misc_params.h"

#define PAR_MIN 4096 /* output elements x reduction length below which the generic loop stays on one thread */

cinfer_status cpu_run_einsum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* ---------------------------------------------------------------- generic strided loop */

/* out[o] = sum over contracted labels of prod_k op_k[...]; T is the storage type, A the accumulator.
 * Output rows along the last output label share one index decode; without contracted labels (transposes,
 * outer and elementwise products) a row is one strided loop. */
#define DEFINE_GENERIC(NAME, T, A)                                                                            \
    static void NAME(const misc_einsum *e, const tensor *in, int nops, const int64_t *ls, const int *red,      \
                     int nred, T *y, int64_t out_count, int64_t red_count) {                                  \
        int last = e->out_ndim > 0 ? e->out_label[e->out_ndim - 1] : -1;                                      \
        int64_t W = last >= 0 ? e->label_size[last] : 1, rows = W > 0 ? out_count / W : 0;                   \
        _Pragma("omp parallel for num_threads(cpu_num_threads()) if(out_count * red_count > PAR_MIN)")        \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            int64_t base[GRAPH_MAX_NODE_IO], lw[GRAPH_MAX_NODE_IO], off[GRAPH_MAX_NODE_IO];                   \
            for (int k = 0; k < nops; k++) {                                                                  \
                base[k] = 0;                                                                                  \
                lw[k] = last >= 0 ? ls[k * MISC_EINSUM_MAX_LABELS + last] : 0;                                \
            }                                                                                                 \
            int64_t rem = r;                                                                                  \
            for (int d = e->out_ndim - 2; d >= 0; d--) {                                                      \
                int l = e->out_label[d];                                                                      \
                int64_t i = rem % e->label_size[l];                                                           \
                rem /= e->label_size[l];                                                                      \
                for (int k = 0; k < nops; k++) base[k] += i * ls[k * MISC_EINSUM_MAX_LABELS + l];             \
            }                                                                                                 \
            T *yr = y + r * W;                                                                                \
            if (nred == 0 && nops == 1) {                                                                     \
                const T *p0 = (const T *)in[0].data + base[0];                                                \
                for (int64_t j = 0; j < W; j++) yr[j] = p0[j * lw[0]];                                        \
                continue;                                                                                     \
            }                                                                                                 \
            if (nred == 0 && nops == 2) {                                                                     \
                const T *p0 = (const T *)in[0].data + base[0], *p1 = (const T *)in[1].data + base[1];         \
                for (int64_t j = 0; j < W; j++) yr[j] = (T)((A)p0[j * lw[0]] * (A)p1[j * lw[1]]);            \
                continue;                                                                                     \
            }                                                                                                 \
            for (int64_t j = 0; j < W; j++) {                                                                 \
                for (int k = 0; k < nops; k++) off[k] = base[k] + j * lw[k];                                  \
                A acc = 0;                                                                                    \
                int64_t idx[MISC_EINSUM_MAX_LABELS] = {0};                                                    \
                for (int64_t rr = 0; rr < red_count; rr++) {                                                  \
                    A prod = 1;                                                                               \
                    for (int k = 0; k < nops; k++) prod *= (A)((const T *)in[k].data)[off[k]];                \
                    acc += prod;                                                                              \
                    /* odometer over the contracted labels, last fastest */                                   \
                    for (int q = nred - 1; q >= 0; q--) {                                                     \
                        int l = red[q];                                                                       \
                        for (int k = 0; k < nops; k++) off[k] += ls[k * MISC_EINSUM_MAX_LABELS + l];          \
                        if (++idx[q] < e->label_size[l]) break;                                               \
                        for (int k = 0; k < nops; k++) off[k] -= idx[q] * ls[k * MISC_EINSUM_MAX_LABELS + l]; \
                        idx[q] = 0;                                                                           \
                    }                                                                                         \
                }                                                                                             \
                yr[j] = (T)acc;                                                                               \
            }                                                                                                 \
        }                                                                                                     \
    }

DEFINE_GENERIC(generic_f32, float, double)
DEFINE_GENERIC(generic_f64, double, double)
/* signed integers accumulate unsigned: wrapping, as two's-complement hardware does, without overflow UB */
DEFINE_GENERIC(generic_i32, int32_t, uint64_t)
DEFINE_GENERIC(generic_i64, int64_t, uint64_t)
DEFINE_GENERIC(generic_u32, uint32_t, uint64_t)
DEFINE_GENERIC(generic_u64, uint64_t, uint64_t)
DEFINE_GENERIC(generic_i8, int8_t, uint64_t)
DEFINE_GENERIC(generic_u8, uint8_t, uint64_t)
DEFINE_GENERIC(generic_i16, int16_t, uint64_t)
DEFINE_GENERIC(generic_u16, uint16_t, uint64_t)

/* ---------------------------------------------------------------- GEMM plan */

/* Labels of a two-operand contraction sorted into batch (both and output), m (A and output), n (B and
 * output) and k (both, summed). Anything else (diagonals, broadcasting, labels summed within one operand)
 * takes the generic loop. */
typedef struct gemm_plan {
    int nb, nm, nn, nk;
    int b[CINFER_MAX_DIMS], m[CINFER_MAX_DIMS], nl[CINFER_MAX_DIMS], k[CINFER_MAX_DIMS];
    int64_t B, M, N, K;
} gemm_plan;

static bool gemm_plan_build(const misc_einsum *e, const tensor *in, gemm_plan *g) {
    if (e->num_operands != 2) return false;
    int where[MISC_EINSUM_MAX_LABELS] = {0}; /* bit 0: in A, bit 1: in B, bit 2: in output */
    for (int op = 0; op < 2; op++)
        for (int d = 0; d < in[op].ndim; d++) {
            int l = e->op_label[op][d];
            if (where[l] & (1 << op)) return false; /* a diagonal */
            if (in[op].dims[d] != e->label_size[l]) return false; /* broadcasting */
            where[l] |= 1 << op;
        }
    for (int d = 0; d < e->out_ndim; d++) where[e->out_label[d]] |= 4;
    memset(g, 0, sizeof *g);
    g->B = g->M = g->N = g->K = 1;
    for (int d = 0; d < e->out_ndim; d++) {
        int l = e->out_label[d];
        if (where[l] == 7) g->b[g->nb++] = l, g->B *= e->label_size[l];
        else if (where[l] == 5) g->m[g->nm++] = l, g->M *= e->label_size[l];
        else if (where[l] == 6) g->nl[g->nn++] = l, g->N *= e->label_size[l];
        else return false;
    }
    for (int d = 0; d < in[0].ndim; d++) {
        int l = e->op_label[0][d];
        if (where[l] == 3) g->k[g->nk++] = l, g->K *= e->label_size[l];
        else if (where[l] == 1) return false; /* summed within A only */
    }
    for (int d = 0; d < in[1].ndim; d++)
        if (where[e->op_label[1][d]] == 2) return false;
    /* BLAS takes int sizes; tiny products (elementwise ones: m = n = k = 1) cost more in calls than in
     * arithmetic, the strided loop does them better */
    return g->B * g->M * g->N * g->K > 0 && g->M * g->N * g->K >= 32 && g->M <= INT_MAX && g->N <= INT_MAX &&
           g->K <= INT_MAX;
}

/* True when operand dims are exactly the label groups g1, g2, g3 in order (so it needs no packing). */
static bool layout_is(const misc_einsum *e, int op, const tensor *t, const int *g1, int n1, const int *g2, int n2,
                      const int *g3, int n3) {
    if (t->ndim != n1 + n2 + n3) return false;
    int d = 0;
    for (int i = 0; i < n1; i++) if (e->op_label[op][d++] != g1[i]) return false;
    for (int i = 0; i < n2; i++) if (e->op_label[op][d++] != g2[i]) return false;
    for (int i = 0; i < n3; i++) if (e->op_label[op][d++] != g3[i]) return false;
    return true;
}

/* Copies src into dst contiguous over `labels` (in that order), reading src through per-label strides:
 * rows of the last label, the rest decoded per row. */
static void pack(const void *src, const int64_t *ls, const int *labels, int nl, const int64_t *size, void *dst,
                 size_t es) {
    if (nl == 0) {
        memcpy(dst, src, es);
        return;
    }
    int64_t w = size[labels[nl - 1]], ws = ls[labels[nl - 1]], rows = 1;
    for (int i = 0; i < nl - 1; i++) rows *= size[labels[i]];
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * w > 65536)
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = 0;
        for (int i = nl - 2; i >= 0; i--) {
            int64_t s = size[labels[i]];
            off += (rem % s) * ls[labels[i]];
            rem /= s;
        }
        if (es == 4) {
            const float *from = (const float *)src + off;
            float *to = (float *)dst + r * w;
            for (int64_t j = 0; j < w; j++) to[j] = from[j * ws];
        } else {
            const double *from = (const double *)src + off;
            double *to = (double *)dst + r * w;
            for (int64_t j = 0; j < w; j++) to[j] = from[j * ws];
        }
    }
}

/* True when the output's labels are g1, g2, g3 in order. */
static bool out_is(const misc_einsum *e, const int *g1, int n1, const int *g2, int n2, const int *g3, int n3) {
    if (e->out_ndim != n1 + n2 + n3) return false;
    int d = 0;
    for (int i = 0; i < n1; i++) if (e->out_label[d++] != g1[i]) return false;
    for (int i = 0; i < n2; i++) if (e->out_label[d++] != g2[i]) return false;
    for (int i = 0; i < n3; i++) if (e->out_label[d++] != g3[i]) return false;
    return true;
}

/* Runs the plan for float32 (dbl false) or float64. `scratch` holds packed operands and the product. */
static void run_gemm(const misc_einsum *e, const tensor *in, const int64_t *ls, const gemm_plan *g, bool dbl,
                     void *y, char *scratch) {
    size_t es = dbl ? 8 : 4;
    const int64_t *size = e->label_size;
    /* A as [batch, m, k] (or [batch, k, m], transposed), B as [batch, k, n] (or [batch, n, k]) */
    const void *A = in[0].data, *Bp = in[1].data;
    bool ta = false, tb = false;
    if (layout_is(e, 0, &in[0], g->b, g->nb, g->m, g->nm, g->k, g->nk)) {
    } else if (layout_is(e, 0, &in[0], g->b, g->nb, g->k, g->nk, g->m, g->nm)) {
        ta = true;
    } else {
        int order[3 * CINFER_MAX_DIMS], c = 0;
        for (int i = 0; i < g->nb; i++) order[c++] = g->b[i];
        for (int i = 0; i < g->nm; i++) order[c++] = g->m[i];
        for (int i = 0; i < g->nk; i++) order[c++] = g->k[i];
        pack(in[0].data, ls, order, c, size, scratch, es);
        A = scratch;
        scratch += ((size_t)(g->B * g->M * g->K) * es + 63) & ~(size_t)63;
    }
    const int64_t *lsb = ls + MISC_EINSUM_MAX_LABELS;
    if (layout_is(e, 1, &in[1], g->b, g->nb, g->k, g->nk, g->nl, g->nn)) {
    } else if (layout_is(e, 1, &in[1], g->b, g->nb, g->nl, g->nn, g->k, g->nk)) {
        tb = true;
    } else {
        int order[3 * CINFER_MAX_DIMS], c = 0;
        for (int i = 0; i < g->nb; i++) order[c++] = g->b[i];
        for (int i = 0; i < g->nk; i++) order[c++] = g->k[i];
        for (int i = 0; i < g->nn; i++) order[c++] = g->nl[i];
        pack(in[1].data, lsb, order, c, size, scratch, es);
        Bp = scratch;
        scratch += ((size_t)(g->B * g->K * g->N) * es + 63) & ~(size_t)63;
    }
    /* the product lands in y directly when the output is [batch, m, n], or [batch, n, m] computed as
     * (A B)^T = B^T A^T */
    bool direct = out_is(e, g->b, g->nb, g->m, g->nm, g->nl, g->nn);
    bool swapped = !direct && out_is(e, g->b, g->nb, g->nl, g->nn, g->m, g->nm);
    void *C = direct || swapped ? y : scratch;
    int M = (int)g->M, N = (int)g->N, K = (int)g->K;
    int lda = ta ? M : K, ldb = tb ? K : N;
    for (int64_t b = 0; b < g->B; b++) {
        size_t ao = (size_t)(b * g->M * g->K), bo = (size_t)(b * g->K * g->N), co = (size_t)(b * g->M * g->N);
        if (swapped && dbl)
            cblas_dgemm(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, ta ? CblasNoTrans : CblasTrans, N, M, K, 1.0,
                        (const double *)Bp + bo, ldb, (const double *)A + ao, lda, 0.0, (double *)C + co, M);
        else if (swapped)
            cblas_sgemm(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, ta ? CblasNoTrans : CblasTrans, N, M, K, 1.0f,
                        (const float *)Bp + bo, ldb, (const float *)A + ao, lda, 0.0f, (float *)C + co, M);
        else if (dbl)
            cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0,
                        (const double *)A + ao, lda, (const double *)Bp + bo, ldb, 0.0, (double *)C + co, N);
        else
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                        (const float *)A + ao, lda, (const float *)Bp + bo, ldb, 0.0f, (float *)C + co, N);
    }
    if (direct || swapped) return;
    /* scatter [batch, m, n] into the output's label order */
    int64_t cs[MISC_EINSUM_MAX_LABELS] = {0}, s = 1;
    for (int i = g->nn - 1; i >= 0; i--) cs[g->nl[i]] = s, s *= size[g->nl[i]];
    for (int i = g->nm - 1; i >= 0; i--) cs[g->m[i]] = s, s *= size[g->m[i]];
    for (int i = g->nb - 1; i >= 0; i--) cs[g->b[i]] = s, s *= size[g->b[i]];
    int order[CINFER_MAX_DIMS];
    for (int d = 0; d < e->out_ndim; d++) order[d] = e->out_label[d];
    pack(C, cs, order, e->out_ndim, size, y, es);
}

/* ---------------------------------------------------------------- kernel */

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* One contraction: a parsed equation over its operands (the node's, or two of them in a chain). */
typedef struct einsum_step {
    misc_einsum *e;
    bool gemm;
    gemm_plan g;
    int64_t out_count;
} einsum_step;

static size_t gemm_scratch_bytes(const gemm_plan *g, size_t es) {
    return align64((size_t)(g->B * g->M * g->K) * es) + align64((size_t)(g->B * g->K * g->N) * es) +
           align64((size_t)(g->B * g->M * g->N) * es);
}

/* Runs one step into y; ops hold work-type data (float for the half types). */
static cinfer_status run_step(const graph_node *n, const einsum_step *st, const tensor *ops, cinfer_dtype wt, void *y,
                              char *scratch) {
    const misc_einsum *e = st->e;
    int nops = e->num_operands;
    int64_t *ls = malloc(sizeof(int64_t) * MISC_EINSUM_MAX_LABELS * (size_t)nops);
    if (!ls) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
    for (int k = 0; k < nops; k++) misc_einsum_label_strides(e, &ops[k], k, ls + (size_t)k * MISC_EINSUM_MAX_LABELS);
    if (st->gemm) {
        run_gemm(e, ops, ls, &st->g, wt == CINFER_DTYPE_DOUBLE, y, scratch);
    } else {
        bool in_out[MISC_EINSUM_MAX_LABELS] = {false};
        for (int d = 0; d < e->out_ndim; d++) in_out[e->out_label[d]] = true;
        int red[MISC_EINSUM_MAX_LABELS], nred = 0;
        int64_t red_count = 1;
        for (int l = 0; l < e->num_labels; l++) {
            bool used = false;
            for (int k = 0; k < nops && !used; k++)
                for (int d = 0; d < e->op_ndim[k]; d++) used |= e->op_label[k][d] == l;
            if (!in_out[l] && used) red[nred++] = l, red_count *= e->label_size[l];
        }
        int64_t oc = st->out_count;
        switch (wt) {
        case CINFER_DTYPE_FLOAT: generic_f32(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_DOUBLE: generic_f64(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_INT32: generic_i32(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_INT64: generic_i64(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_UINT32: generic_u32(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_UINT64: generic_u64(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_INT8: generic_i8(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_UINT8: generic_u8(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_INT16: generic_i16(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        case CINFER_DTYPE_UINT16: generic_u16(e, ops, nops, ls, red, nred, y, oc, red_count); break;
        default: break;
        }
    }
    free(ls);
    return CINFER_OK;
}

/* Splits an equation over three or more operands into a chain of pairwise contractions, left to right:
 * each intermediate keeps the labels a later operand or the output still needs (so a chain of matrix
 * products costs products, not one loop over every label at once). Returns false when an intermediate
 * would exceed the rank limit (the caller then runs the whole equation as one loop). */
static bool plan_chain(const misc_einsum *e, einsum_step *steps) {
    int nops = e->num_operands;
    signed char cur[CINFER_MAX_DIMS];
    int cur_n = e->op_ndim[0];
    for (int d = 0; d < cur_n; d++) cur[d] = e->op_label[0][d];
    for (int k = 1; k < nops; k++) {
        misc_einsum *s = steps[k - 1].e;
        s->num_operands = 2;
        s->num_labels = e->num_labels;
        memcpy(s->label_size, e->label_size, sizeof e->label_size);
        s->op_ndim[0] = cur_n;
        memcpy(s->op_label[0], cur, (size_t)cur_n);
        s->op_ndim[1] = e->op_ndim[k];
        memcpy(s->op_label[1], e->op_label[k], (size_t)e->op_ndim[k]);
        if (k == nops - 1) {
            s->out_ndim = e->out_ndim;
            memcpy(s->out_label, e->out_label, (size_t)e->out_ndim);
            break;
        }
        bool needed[MISC_EINSUM_MAX_LABELS] = {false}, kept[MISC_EINSUM_MAX_LABELS] = {false};
        for (int d = 0; d < e->out_ndim; d++) needed[e->out_label[d]] = true;
        for (int j = k + 1; j < nops; j++)
            for (int d = 0; d < e->op_ndim[j]; d++) needed[e->op_label[j][d]] = true;
        s->out_ndim = 0;
        for (int op = 0; op < 2; op++)
            for (int d = 0; d < s->op_ndim[op]; d++) {
                int l = s->op_label[op][d];
                if (!needed[l] || kept[l]) continue;
                if (s->out_ndim >= CINFER_MAX_DIMS) return false;
                kept[l] = true;
                s->out_label[s->out_ndim++] = (signed char)l;
            }
        cur_n = s->out_ndim;
        memcpy(cur, s->out_label, (size_t)cur_n);
    }
    return true;
}

/* Sums labels that only operand k has (and the output lacks) and collapses its repeated labels, before
 * the operands meet: 'ab,cd->' then costs two sums instead of a loop over all four labels. The reduced
 * operand lands in a fresh buffer (returned for freeing) and e->op_label[k] follows it. */
static cinfer_status reduce_operand(const graph_node *n, misc_einsum *e, tensor *ops, int k, cinfer_dtype wt,
                                    void **buffer) {
    int uses[MISC_EINSUM_MAX_LABELS] = {0}; /* how many operands (other than k) or the output use a label */
    for (int j = 0; j < e->num_operands; j++) {
        if (j == k) continue;
        bool seen[MISC_EINSUM_MAX_LABELS] = {false};
        for (int d = 0; d < e->op_ndim[j]; d++) seen[e->op_label[j][d]] = true;
        for (int l = 0; l < e->num_labels; l++) uses[l] += seen[l];
    }
    for (int d = 0; d < e->out_ndim; d++) uses[e->out_label[d]]++;
    misc_einsum *sub = malloc(sizeof *sub);
    if (!sub) return core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
    sub->num_operands = 1;
    sub->num_labels = e->num_labels;
    memcpy(sub->label_size, e->label_size, sizeof e->label_size);
    sub->op_ndim[0] = e->op_ndim[k];
    memcpy(sub->op_label[0], e->op_label[k], (size_t)e->op_ndim[k]);
    /* the kept labels, once each, in operand order; a broadcast (size-1) dim keeps its size */
    bool kept[MISC_EINSUM_MAX_LABELS] = {false}, work = false;
    int64_t dims[CINFER_MAX_DIMS], count = 1;
    sub->out_ndim = 0;
    for (int d = 0; d < e->op_ndim[k]; d++) {
        int l = e->op_label[k][d];
        if (uses[l] == 0 || kept[l]) {
            work = true;
            continue;
        }
        kept[l] = true;
        dims[sub->out_ndim] = ops[k].dims[d];
        sub->out_label[sub->out_ndim++] = (signed char)l;
        count *= ops[k].dims[d];
    }
    if (!work) {
        free(sub);
        return CINFER_OK;
    }
    /* a broadcast dim stays 1 in the reduced operand: misc_einsum_label_strides gives it stride 0 again later */
    int64_t saved[MISC_EINSUM_MAX_LABELS];
    memcpy(saved, sub->label_size, sizeof saved);
    for (int d = 0; d < sub->out_ndim; d++) sub->label_size[sub->out_label[d]] = dims[d];
    void *dst = malloc((size_t)(count > 0 ? count : 1) * cinfer_dtype_size(wt));
    cinfer_status st = CINFER_OK;
    if (!dst) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
    } else {
        einsum_step step = {.e = sub, .gemm = false, .out_count = count};
        for (int d = 0; d < sub->op_ndim[0]; d++) { /* reading: sizes as the operand has them */
            int l = sub->op_label[0][d];
            if (!kept[l]) sub->label_size[l] = saved[l];
        }
        st = run_step(n, &step, &ops[k], wt, dst, NULL);
    }
    if (st == CINFER_OK) {
        ops[k].data = dst;
        ops[k].dtype = wt;
        ops[k].ndim = sub->out_ndim;
        for (int d = 0; d < sub->out_ndim; d++) ops[k].dims[d] = dims[d];
        e->op_ndim[k] = sub->out_ndim;
        memcpy(e->op_label[k], sub->out_label, (size_t)sub->out_ndim);
        *buffer = dst;
    } else {
        free(dst);
    }
    free(sub);
    return st;
}

cinfer_status cpu_run_einsum(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    cinfer_dtype t = in[0].dtype;
    bool half = cpu_is_half(t);
    switch (t) {
    case CINFER_DTYPE_FLOAT: case CINFER_DTYPE_DOUBLE: case CINFER_DTYPE_FLOAT16: case CINFER_DTYPE_BFLOAT16:
    case CINFER_DTYPE_INT32: case CINFER_DTYPE_INT64: case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
    case CINFER_DTYPE_INT8: case CINFER_DTYPE_UINT8: case CINFER_DTYPE_INT16: case CINFER_DTYPE_UINT16: break;
    default: return cpu_unsupported_dtype(n, t);
    }
    cinfer_dtype wt = half ? CINFER_DTYPE_FLOAT : t; /* the type the arithmetic runs in */
    size_t es = cinfer_dtype_size(wt);
    tensor *y = &out[0];
    int64_t out_count = tensor_numel(y);
    int nsteps = num_in > 2 ? num_in - 1 : 1;
    misc_einsum *e = malloc(sizeof *e * (size_t)(1 + (num_in > 2 ? nsteps : 0)));
    einsum_step *steps = calloc((size_t)nsteps, sizeof *steps);
    /* buffers to free: widened half operands, reduced operands, the float result */
    void **mem = calloc(2 * (size_t)num_in + 1, sizeof *mem);
    int nmem = 0;
    tensor ops[GRAPH_MAX_NODE_IO];
    cinfer_status st = CINFER_OK;
    if (!e || !steps || !mem) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
        goto done;
    }
    st = misc_parse_einsum(n, in, num_in, e);
    if (st != CINFER_OK || out_count == 0) goto done;

    for (int k = 0; k < num_in; k++) ops[k] = in[k];
    if (half) { /* widen the operands to float */
        for (int k = 0; k < num_in; k++) {
            int64_t cnt = tensor_numel(&in[k]);
            float *f = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof(float));
            if (!f) {
                st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
                goto done;
            }
            mem[nmem++] = f;
            cpu_convert_half_to_float(in[k].dtype, in[k].data, f, cnt);
            ops[k].data = f;
            ops[k].dtype = CINFER_DTYPE_FLOAT;
        }
    }
    if (num_in > 1)
        for (int k = 0; k < num_in; k++) {
            void *buf = NULL;
            st = reduce_operand(n, e, ops, k, wt, &buf);
            if (st != CINFER_OK) goto done;
            if (buf) mem[nmem++] = buf;
        }

    /* the plan: one step, or a chain of pairs */
    bool chain = false;
    if (num_in > 2) {
        for (int k = 0; k < nsteps; k++) steps[k].e = e + 1 + k;
        chain = plan_chain(e, steps);
    }
    if (!chain) {
        nsteps = 1;
        steps[0].e = e;
    }
    size_t scratch_bytes = 0;
    for (int k = 0; k < nsteps; k++) {
        einsum_step *s = &steps[k];
        tensor pair[2];
        const tensor *sops = ops;
        if (chain) { /* operand shapes of the pair: the intermediate so far, then the next input */
            pair[0] = ops[0];
            if (k > 0) {
                pair[0].ndim = s->e->op_ndim[0];
                for (int d = 0; d < pair[0].ndim; d++) pair[0].dims[d] = e->label_size[s->e->op_label[0][d]];
            }
            pair[1] = ops[k + 1];
            sops = pair;
        }
        s->out_count = 1;
        for (int d = 0; d < s->e->out_ndim; d++) s->out_count *= e->label_size[s->e->out_label[d]];
        s->gemm = (wt == CINFER_DTYPE_FLOAT || wt == CINFER_DTYPE_DOUBLE) && gemm_plan_build(s->e, sops, &s->g);
        if (s->gemm && gemm_scratch_bytes(&s->g, es) > scratch_bytes) scratch_bytes = gemm_scratch_bytes(&s->g, es);
    }
    char *scratch = scratch_bytes ? cpu_scratch(scratch_bytes) : NULL;
    if (scratch_bytes && !scratch) {
        st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory for scratch", n->name);
        goto done;
    }
    void *result = y->data;
    if (half) {
        result = malloc((size_t)out_count * sizeof(float));
        if (!result) {
            st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
            goto done;
        }
        mem[nmem++] = result;
    }
    if (!chain) {
        st = run_step(n, &steps[0], ops, wt, result, scratch);
    } else {
        tensor cur = ops[0];
        void *prev = NULL;
        for (int k = 0; k < nsteps && st == CINFER_OK; k++) {
            einsum_step *s = &steps[k];
            void *dst = result;
            if (k < nsteps - 1) {
                dst = malloc((size_t)(s->out_count > 0 ? s->out_count : 1) * es);
                if (!dst) {
                    st = core_error(CINFER_ERR_OUT_OF_MEMORY, "Einsum node '%s': out of memory", n->name);
                    break;
                }
            }
            tensor pair[2] = {cur, ops[k + 1]};
            st = run_step(n, s, pair, wt, dst, scratch);
            free(prev);
            prev = k < nsteps - 1 ? dst : NULL;
            cur.dtype = wt;
            cur.data = dst;
            cur.ndim = s->e->out_ndim;
            for (int d = 0; d < cur.ndim; d++) cur.dims[d] = e->label_size[s->e->out_label[d]];
        }
        free(prev);
    }
    if (st == CINFER_OK && half) cpu_convert_float_to_half(t, result, y->data, out_count);
done:
    for (int k = 0; mem && k < nmem; k++) free(mem[k]);
    free(mem);
    free(e);
    free(steps);
    return st;
}
