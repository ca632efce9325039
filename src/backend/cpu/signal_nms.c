/* CPU kernel of NonMaxSuppression (signal family), with onnxruntime's CPU semantics exactly:
 *  - per batch and class, the candidates are the boxes whose score is above score_threshold (strictly; all boxes when
 *    that input is absent), taken by score, highest first, ties by the lower box index;
 *  - a candidate is kept unless its IoU with a box already kept for the class is above iou_threshold (strictly);
 *    boxes that do not overlap (intersection width or height <= 0) never suppress; corners are ordered per axis
 *    (center_point_box 0: [y1, x1, y2, x2]) or derived from [x_center, y_center, width, height] (1), in float32
 *    (float16/bfloat16 inputs of half-precision sessions are read as float32);
 *  - at most max_output_boxes_per_class per class (absent or <= 0: no output); iou_threshold must lie in [0, 1].
 * The output [selected, 3] of (batch, class, box) is data-dependent (OP_FLAG_DATA_DEPENDENT): its buffer is sized by
 * the schema's bound and the actual count is written into out[0].dims[0]. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_staging.h"
#include "core/status.h"

typedef struct nms_box {
    float score;
    int64_t index;
    float y_min, x_min, y_max, x_max, area;
} nms_box;

/* Box i of boxes (float32, or a half type read as float32: half-precision sessions convert the model's floats). */
static void nms_box_init(nms_box *b, const tensor *boxes, int64_t i, bool center_point, float score, int64_t index) {
    float box[4];
    for (int k = 0; k < 4; k++) box[k] = (float)cpu_load_f64(boxes->data, boxes->dtype, i * 4 + k);
    b->score = score;
    b->index = index;
    if (!center_point) {
        b->x_min = box[1] <= box[3] ? box[1] : box[3];
        b->x_max = box[1] <= box[3] ? box[3] : box[1];
        b->y_min = box[0] <= box[2] ? box[0] : box[2];
        b->y_max = box[0] <= box[2] ? box[2] : box[0];
        b->area = (b->y_max - b->y_min) * (b->x_max - b->x_min);
    } else {
        float half_w = box[2] / 2, half_h = box[3] / 2;
        b->x_min = box[0] - half_w;
        b->x_max = box[0] + half_w;
        b->y_min = box[1] - half_h;
        b->y_max = box[1] + half_h;
        b->area = (b->y_max - b->y_min) * (b->x_max - b->x_min); /* from the corners, as the intersection is */
    }
}

static bool nms_suppresses(const nms_box *kept, const nms_box *c, float iou_threshold) {
    float ix_min = kept->x_min > c->x_min ? kept->x_min : c->x_min;
    float ix_max = kept->x_max < c->x_max ? kept->x_max : c->x_max;
    if (ix_max <= ix_min) return false;
    float iy_min = kept->y_min > c->y_min ? kept->y_min : c->y_min;
    float iy_max = kept->y_max < c->y_max ? kept->y_max : c->y_max;
    if (iy_max <= iy_min) return false;
    float inter = (ix_max - ix_min) * (iy_max - iy_min);
    if (inter <= 0.0f) return false;
    float iou = inter / (c->area + kept->area - inter);
    return iou > iou_threshold;
}

/* Stable merge sort by score, highest first: equal scores keep ascending box order. */
static void nms_sort(nms_box *a, nms_box *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2, i = 0, j = h, k = 0;
    nms_sort(a, tmp, h);
    nms_sort(a + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = a[j].score > a[i].score ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, sizeof *a * (size_t)n);
}

cinfer_status cpu_run_nms(const graph_node *n, const tensor *in, int num_in, tensor *out, int num_out) {
    (void)num_out;
    const tensor *boxes = &in[0], *scores = &in[1];
    int64_t batches = scores->dims[0], classes = scores->dims[1], count = scores->dims[2];
    bool center_point = graph_attr_int(n, "center_point_box", 0) == 1;
    int64_t max_per_class = 0;
    float iou_threshold = 0.0f, score_threshold = 0.0f;
    const int64_t room = out[0].dims[0]; /* the schema's bound */
    bool has_score_threshold = num_in > 4 && in[4].dtype != CINFER_DTYPE_UNDEFINED;
    if (num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED) {
        max_per_class = ((const int64_t *)in[2].data)[0];
        if (max_per_class < 0) max_per_class = 0;
    }
    if (num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED) {
        iou_threshold = (float)cpu_load_f64(in[3].data, in[3].dtype, 0);
        if (!(iou_threshold >= 0.0f && iou_threshold <= 1.0f))
            return core_error(CINFER_ERR_INVALID_ARGUMENT, "NonMaxSuppression node '%s': iou_threshold is %g, expected "
                              "a value in [0, 1]", n->name, (double)iou_threshold);
    }
    if (has_score_threshold) score_threshold = (float)cpu_load_f64(in[4].data, in[4].dtype, 0);
    out[0].dims[0] = 0;
    if (max_per_class == 0 || count == 0) return CINFER_OK;
    nms_box *cand = malloc(sizeof *cand * (size_t)count * 3);
    if (!cand) return core_error(CINFER_ERR_OUT_OF_MEMORY, "NonMaxSuppression node '%s': out of memory", n->name);
    nms_box *tmp = cand + count, *kept = cand + 2 * count;
    int64_t *y = out[0].data, selected = 0;
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t c = 0; c < classes; c++) {
            int64_t m = 0, num_kept = 0, first_score = (b * classes + c) * count;
            for (int64_t i = 0; i < count; i++) {
                float s = (float)cpu_load_f64(scores->data, scores->dtype, first_score + i);
                if (!has_score_threshold || s > score_threshold) nms_box_init(&cand[m++], boxes, b * count + i, center_point, s, i);
            }
            nms_sort(cand, tmp, m);
            for (int64_t i = 0; i < m && num_kept < max_per_class; i++) {
                bool keep = true;
                for (int64_t k = 0; k < num_kept && keep; k++) keep = !nms_suppresses(&kept[k], &cand[i], iou_threshold);
                if (!keep) continue;
                kept[num_kept++] = cand[i];
                if (selected >= room) { /* the schema's bound holds by construction; a guard all the same */
                    free(cand);
                    return core_error(CINFER_ERR_RUNTIME, "NonMaxSuppression node '%s': more selections than the "
                                      "output's %lld rows", n->name, (long long)room);
                }
                y[selected * 3] = b;
                y[selected * 3 + 1] = c;
                y[selected * 3 + 2] = cand[i].index;
                selected++;
            }
        }
    }
    free(cand);
    out[0].dims[0] = selected;
    return CINFER_OK;
}
