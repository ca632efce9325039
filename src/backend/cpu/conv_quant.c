/* CPU kernels of ConvInteger and QLinearConv: exact reference loops with int32 accumulation, 1-3 spatial dims. */
#include "backend/cpu/cpu_kernels.h"
#include "core/status.h"
#include "graph/shape/conv_params.h"

cinfer_status cpu_run_qconv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out);

/* t minus its zero point as int32: one value, or one per channel (e / per) % channels. */
static void widen(const tensor *t, const tensor *zp, int64_t per, int64_t channels, int32_t *dst) {
    int64_t count = tensor_numel(t);
    for (int64_t e = 0; e < count; e++)
        dst[e] = cpu_load_q8(t, e) - (zp ? cpu_load_q8(zp, cpu_qparam_at(zp, (e / per) % channels)) : 0);
}

/* One output plane's sums of (x - x_zero_point) * (w - w_zero_point) over the window (pads contribute nothing:
 * padding holds x's zero point), plus `bias`; unsigned, so int32 accumulation wraps rather than overflowing.
 * x: the group's cg input planes; w: the output channel's cg kernels. */
static void conv_plane(const conv_geom *g, const int32_t *x, const int32_t *w, int64_t cg, uint32_t bias,
                       uint32_t *acc) {
    for (int64_t o = 0; o < g->out_size; o++) acc[o] = bias;
    for (int64_t ic = 0; ic < cg; ic++) {
        const int32_t *xc = x + ic * g->in_size, *wc = w + ic * g->k_size;
        for (int64_t od = 0; od < g->out[0]; od++)
            for (int64_t oh = 0; oh < g->out[1]; oh++)
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    uint32_t sum = 0;
                    for (int64_t kd = 0; kd < g->k[0]; kd++) {
                        int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0];
                        if (id < 0 || id >= g->in[0]) continue;
                        for (int64_t kh = 0; kh < g->k[1]; kh++) {
                            int64_t ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
                            if (ih < 0 || ih >= g->in[1]) continue;
                            const int32_t *xr = xc + (id * g->in[1] + ih) * g->in[2];
                            const int32_t *wr = wc + (kd * g->k[1] + kh) * g->k[2];
                            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                int64_t iw = ow * g->s[2] - g->pb[2] + kw * g->d[2];
                                if (iw >= 0 && iw < g->in[2]) sum += (uint32_t)(xr[iw] * wr[kw]);
                            }
                        }
                    }
                    acc[(od * g->out[1] + oh) * g->out[2] + ow] += sum;
                }
    }
}

/* ConvInteger: Y (int32) = the plane sums. QLinearConv: the sums plus B, requantised with
 * x_scale * w_scale / y_scale (float) and y_zero_point. */
cinfer_status cpu_run_qconv(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    conv_quant q;
    conv_geom g;
    int64_t group;
    CINFER_TRY(conv_compute_quant(n, in, num_in, &q));
    CINFER_TRY(conv_compute_conv(n, q.x, q.w, q.bias, &out[0], "CPU", &g, &group));
    if (tensor_numel(&out[0]) == 0) return CINFER_OK;
    int64_t batch = q.x->dims[0], c = q.x->dims[1], m = q.w->dims[0], cg = c / group, mg = m / group;
    /* scratch: x and w widened to int32, and QLinearConv's int32 sums (ConvInteger sums straight into Y) */
    size_t nx = (size_t)tensor_numel(q.x), nw = (size_t)tensor_numel(q.w), ny = (size_t)tensor_numel(&out[0]);
    size_t x_words = (nx + 15) & ~(size_t)15, w_words = (nw + 15) & ~(size_t)15;
    int32_t *wx = cpu_scratch((x_words + w_words + (q.qlinear ? ny : 0) + 1) * 4);
    if (!wx)
        return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate the widened operands", n->op_type,
                          n->name);
    int32_t *ww = wx + x_words;
    uint32_t *sums = q.qlinear ? (uint32_t *)(ww + w_words) : out[0].data;
    widen(q.x, q.x_zp, 1, 1, wx);
    widen(q.w, q.w_zp, cg * g.k_size, m, ww);
    const int32_t *bias = q.bias ? q.bias->data : NULL;
    int64_t jobs = batch * m;
#pragma omp parallel for num_threads(cpu_num_threads()) if (jobs * g.out_size * cg * g.k_size > 65536)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t b = job / m, oc = job % m;
        const int32_t *xg = wx + (b * c + oc / mg * cg) * g.in_size;
        conv_plane(&g, xg, ww + oc * cg * g.k_size, cg, bias ? (uint32_t)bias[oc] : 0u, sums + job * g.out_size);
    }
    if (!q.qlinear) return CINFER_OK;
    float x_scale = *(const float *)q.x_scale->data, y_scale = *(const float *)q.y_scale->data;
    const float *w_scale = q.w_scale->data;
    int32_t y_zp = cpu_load_q8(q.y_zp, 0);
#pragma omp parallel for num_threads(cpu_num_threads()) if ((int64_t)ny > 65536)
    for (int64_t e = 0; e < (int64_t)ny; e++) {
        float scale = x_scale * w_scale[cpu_qparam_at(q.w_scale, e / g.out_size % m)] / y_scale;
        cpu_requantize_q8((int32_t)sums[e], scale, y_zp, out[0].data, out[0].dtype, e);
    }
    return CINFER_OK;
}
