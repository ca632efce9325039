/* CPU kernel of the internal ElementwiseChain op (graph/shape/elementwise_chain.h): each element loaded as float32,
 * taken through the program, stored in the output's type. */
#include <omp.h>

#include "backend/cpu/cpu_staging.h"
#include "backend/cpu/elementwise_internal.h"
#include "core/status.h"
#include "graph/shape/elementwise_chain.h"

#define CHAIN_BLOCK 1024 /* elements per step of the loop: in place, a block is read whole before it is written */

static inline float chain_load(const void *p, cinfer_dtype t, int64_t i) {
    return t == CINFER_DTYPE_FLOAT ? ((const float *)p)[i] : cpu_half_load(t, ((const uint16_t *)p)[i]);
}

cinfer_status cpu_run_elementwise_chain(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_in; (void)num_out;
    chain_program prog;
    CINFER_TRY(chain_program_read(n, &prog));
    const cinfer_dtype xt = in[0].dtype, yt = out[0].dtype;
    const void *x = in[0].data;
    void *y = out[0].data;
    const int64_t total = tensor_numel(&out[0]), blocks = (total + CHAIN_BLOCK - 1) / CHAIN_BLOCK;
#pragma omp parallel for num_threads(cpu_num_threads()) if (total > 65536)
    for (int64_t blk = 0; blk < blocks; blk++) {
        float v[CHAIN_BLOCK];
        const int64_t lo = blk * CHAIN_BLOCK, count = total - lo < CHAIN_BLOCK ? total - lo : CHAIN_BLOCK;
        for (int64_t i = 0; i < count; i++) v[i] = chain_apply(&prog, chain_load(x, xt, lo + i));
        if (yt == CINFER_DTYPE_FLOAT)
            memcpy((float *)y + lo, v, (size_t)count * sizeof(float));
        else
            for (int64_t i = 0; i < count; i++) ((uint16_t *)y)[lo + i] = cpu_half_store(yt, v[i]);
    }
    return CINFER_OK;
}
