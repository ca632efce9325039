/* CPU kernel of the internal ElementwiseChain op (graph/shape/elementwise_chain.h): blocks of the tensor small
 * enough to stay in L1 are loaded as float32 and taken through the program one step at a time, each step a loop
 * the compiler vectorises; the unary steps run the very loops of the single ops (cpu_unary_f32_loop), so a float32
 * chain gives the unfused ops' results bit for bit. */
#include <omp.h>

#include "backend/cpu/cpu_staging.h"
#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"
#include "graph/shape/elementwise_chain.h"

#define CHAIN_BLOCK 1024 /* elements per block (4 KiB of float32) */

typedef struct chain_plan {
    chain_program prog;
    un_fn unary[CHAIN_MAX_STEPS];
    un_params params[CHAIN_MAX_STEPS];
} chain_plan;

/* v[0, n) through every step, in place. */
static void chain_block(const chain_plan *c, float *restrict v, int64_t n) {
    for (int s = 0; s < c->prog.num_steps; s++) {
        const float a = c->prog.a[s], b = c->prog.b[s];
        switch (c->prog.op[s]) {
        case CHAIN_ADD: for (int64_t i = 0; i < n; i++) v[i] = v[i] + a; break;
        case CHAIN_SUB: for (int64_t i = 0; i < n; i++) v[i] = v[i] - a; break;
        case CHAIN_RSUB: for (int64_t i = 0; i < n; i++) v[i] = a - v[i]; break;
        case CHAIN_MUL: for (int64_t i = 0; i < n; i++) v[i] = v[i] * a; break;
        case CHAIN_DIV: for (int64_t i = 0; i < n; i++) v[i] = v[i] / a; break;
        case CHAIN_RDIV: for (int64_t i = 0; i < n; i++) v[i] = a / v[i]; break;
        case CHAIN_CLIP:
            for (int64_t i = 0; i < n; i++) {
                float x = v[i] < a ? a : v[i];
                v[i] = x > b ? b : x;
            }
            break;
        default: c->unary[s](v, v, n, &c->params[s]); break;
        }
    }
}

static inline float chain_load(const void *p, cinfer_dtype t, int64_t i) {
    return t == CINFER_DTYPE_FLOAT ? ((const float *)p)[i] : cpu_half_load(t, ((const uint16_t *)p)[i]);
}

cinfer_status cpu_run_elementwise_chain(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    chain_plan c;
    CINFER_TRY(chain_program_read(n, &c.prog));
    memset(c.params, 0, sizeof c.params);
    for (int s = 0; s < c.prog.num_steps; s++) {
        const char *op = chain_unary_op_type(c.prog.op[s]);
        c.unary[s] = op ? cpu_unary_f32_loop(op) : NULL;
        c.params[s].alpha = c.prog.a[s];
        if (op && !c.unary[s])
            return core_error(CINFER_ERR_RUNTIME, "%s node '%s': no float32 loop for step %d (%s)", n->op_type, n->name,
                              s, op);
    }
    const cinfer_dtype xt = in[0].dtype, yt = out[0].dtype;
    const void *x = in[0].data;
    void *y = out[0].data;
    const int64_t total = tensor_numel(&out[0]), blocks = (total + CHAIN_BLOCK - 1) / CHAIN_BLOCK;
#pragma omp parallel for num_threads(cpu_num_threads()) if (total > 65536)
    for (int64_t blk = 0; blk < blocks; blk++) {
        float buf[CHAIN_BLOCK];
        const int64_t lo = blk * CHAIN_BLOCK, count = total - lo < CHAIN_BLOCK ? total - lo : CHAIN_BLOCK;
        /* a float32 output is worked on where it lies; y may be x (same element size: the block is read first) */
        float *v = yt == CINFER_DTYPE_FLOAT ? (float *)y + lo : buf;
        if (xt == CINFER_DTYPE_FLOAT) {
            if (v != (const float *)x + lo) memmove(v, (const float *)x + lo, (size_t)count * sizeof(float));
        } else {
            for (int64_t i = 0; i < count; i++) v[i] = chain_load(x, xt, lo + i);
        }
        chain_block(&c, v, count);
        if (v == buf)
            for (int64_t i = 0; i < count; i++) ((uint16_t *)y)[lo + i] = cpu_half_store(yt, v[i]);
    }
    return CINFER_OK;
}
