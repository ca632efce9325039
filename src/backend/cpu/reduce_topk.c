/* CPU kernel of TopK: per row along the axis, a bounded heap of the K best (value, index) pairs. */
#include <stdlib.h>

#include "backend/cpu/reduce_internal.h"
#include "graph/shape/reduce_params.h"

/* Order: by value (NaN above everything, as numpy sorts it), ties by the lower index first. The heap
 * keeps its worst entry at the root so a better candidate replaces it in O(log K); heapsort then lays
 * the K entries out best first. */
#define DEFINE_TOPK(NAME, T, ISNAN)                                                                           \
    typedef struct NAME##_entry {                                                                             \
        T v;                                                                                                  \
        int64_t i;                                                                                            \
    } NAME##_entry;                                                                                           \
    static inline bool NAME##_better(NAME##_entry a, NAME##_entry b, bool largest) {                          \
        bool an = ISNAN(a.v), bn = ISNAN(b.v);                                                                \
        bool gt = (a.v > b.v) || (an && !bn), lt = (a.v < b.v) || (bn && !an);                                \
        bool eq = !gt && !lt;                                                                                 \
        return (largest ? gt : lt) || (eq && a.i < b.i);                                                      \
    }                                                                                                         \
    static void NAME##_sift_down(NAME##_entry *h, int64_t size, int64_t k, bool largest) {                     \
        for (;;) {                                                                                            \
            int64_t l = 2 * k + 1, r = l + 1, w = k;                                                          \
            if (l < size && NAME##_better(h[w], h[l], largest)) w = l;                                        \
            if (r < size && NAME##_better(h[w], h[r], largest)) w = r;                                        \
            if (w == k) return;                                                                               \
            NAME##_entry t = h[k];                                                                            \
            h[k] = h[w];                                                                                      \
            h[w] = t;                                                                                         \
            k = w;                                                                                            \
        }                                                                                                     \
    }                                                                                                         \
    /* Offers entry e to the heap of `*size` <= k entries. */                                              \
    static inline void NAME##_offer(NAME##_entry *h, int64_t *size, int64_t k, NAME##_entry e, bool largest) { \
        if (*size < k) {                                                                                      \
            int64_t c = (*size)++;                                                                            \
            h[c] = e;                                                                                         \
            while (c > 0 && NAME##_better(h[(c - 1) / 2], h[c], largest)) {                                   \
                NAME##_entry t = h[c];                                                                        \
                h[c] = h[(c - 1) / 2];                                                                        \
                h[(c - 1) / 2] = t;                                                                           \
                c = (c - 1) / 2;                                                                              \
            }                                                                                                 \
        } else if (NAME##_better(e, h[0], largest)) {                                                         \
            h[0] = e;                                                                                         \
            NAME##_sift_down(h, *size, 0, largest);                                                           \
        }                                                                                                     \
    }                                                                                                         \
    static cinfer_status NAME(const graph_node *n, const T *x, T *vals, int64_t *idx, int64_t outer,          \
                              int64_t len, int64_t inner, int64_t k, bool largest) {                          \
        int64_t rows = outer * inner;                                                                         \
        bool oom = false;                                                                                     \
        _Pragma("omp parallel num_threads(cpu_num_threads()) if(rows * len > CPU_RED_PAR_MIN && rows > 1)")   \
        {                                                                                                     \
            NAME##_entry *h = malloc(sizeof(NAME##_entry) * (size_t)k);                                       \
            if (!h) {                                                                                         \
                _Pragma("omp atomic write") oom = true;                                                       \
            }                                                                                                 \
            _Pragma("omp for schedule(static)")                                                               \
            for (int64_t row = 0; row < rows; row++) {                                                        \
                if (!h) continue;                                                                             \
                int64_t o = row / inner, i = row % inner;                                                     \
                const T *xr = x + o * len * inner + i;                                                        \
                int64_t size = 0, j = 0;                                                                      \
                while (j < len) {                                                                             \
                    int64_t end = j + 1;                                                                      \
                    /* full heap over a contiguous row: skip 16 values at once when none beats the root */    \
                    if (size == k && inner == 1 && j + 16 <= len && !ISNAN(h[0].v)) {                         \
                        T thr = h[0].v;                                                                       \
                        int hit = 0;                                                                          \
                        if (largest)                                                                          \
                            for (int l = 0; l < 16; l++) hit |= !(xr[j + l] <= thr);                          \
                        else                                                                                  \
                            for (int l = 0; l < 16; l++) hit |= xr[j + l] < thr;                              \
                        if (!hit) {                                                                           \
                            j += 16;                                                                          \
                            continue;                                                                         \
                        }                                                                                     \
                        end = j + 16;                                                                         \
                    }                                                                                         \
                    for (; j < end; j++) NAME##_offer(h, &size, k, (NAME##_entry){xr[j * inner], j}, largest); \
                }                                                                                             \
                for (int64_t s = size - 1; s > 0; s--) {                                                      \
                    NAME##_entry t = h[0];                                                                    \
                    h[0] = h[s];                                                                              \
                    h[s] = t;                                                                                 \
                    NAME##_sift_down(h, s, 0, largest);                                                       \
                }                                                                                             \
                T *vr = vals + o * k * inner + i;                                                             \
                int64_t *ir = idx ? idx + o * k * inner + i : NULL;                                           \
                for (int64_t j = 0; j < k; j++) {                                                             \
                    vr[j * inner] = h[j].v;                                                                   \
                    if (ir) ir[j * inner] = h[j].i;                                                           \
                }                                                                                             \
            }                                                                                                 \
            free(h);                                                                                          \
        }                                                                                                     \
        if (oom)                                                                                              \
            return core_error(CINFER_ERR_OUT_OF_MEMORY, "TopK node '%s': out of memory for %lld entries",     \
                              n->name, (long long)k);                                                         \
        return CINFER_OK;                                                                                     \
    }

#define FISNAN(v) ((v) != (v))
#define NONAN(v) ((void)(v), false)
DEFINE_TOPK(topk_f32, float, FISNAN)
DEFINE_TOPK(topk_f64, double, FISNAN)
DEFINE_TOPK(topk_i8, int8_t, NONAN)
DEFINE_TOPK(topk_u8, uint8_t, NONAN)
DEFINE_TOPK(topk_i16, int16_t, NONAN)
DEFINE_TOPK(topk_u16, uint16_t, NONAN)
DEFINE_TOPK(topk_i32, int32_t, NONAN)
DEFINE_TOPK(topk_u32, uint32_t, NONAN)
DEFINE_TOPK(topk_i64, int64_t, NONAN)
DEFINE_TOPK(topk_u64, uint64_t, NONAN)

cinfer_status cpu_run_topk(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    cinfer_dtype dt = in[0].dtype;
    if (cpu_red_is_half(dt)) return cpu_run_as_float(n, in, num_in, out, num_out, cpu_run_topk);
    reduce_topk t;
    CINFER_TRY(reduce_compute_topk(n, in, num_in, &out[0], &t));
    const int64_t k = t.k, outer = t.rows.outer, len = t.rows.len, inner = t.rows.inner;
    if (k == 0 || outer * inner == 0) return CINFER_OK;
    const bool largest = t.largest;
    int64_t *idx = num_out > 1 && out[1].data ? out[1].data : NULL;
    void *v = out[0].data;
    const void *x = in[0].data;
    switch (dt) {
    case CINFER_DTYPE_FLOAT: return topk_f32(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_DOUBLE: return topk_f64(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_INT8: return topk_i8(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_UINT8: return topk_u8(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_INT16: return topk_i16(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_UINT16: return topk_u16(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_INT32: return topk_i32(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_UINT32: return topk_u32(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_INT64: return topk_i64(n, x, v, idx, outer, len, inner, k, largest);
    case CINFER_DTYPE_UINT64: return topk_u64(n, x, v, idx, outer, len, inner, k, largest);
    default: return cpu_unsupported_dtype(n, dt);
    }
}
