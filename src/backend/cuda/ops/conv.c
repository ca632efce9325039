/* CUDA kernels of the conv family (host side): Conv, ConvTranspose, BatchNormalization and the pools.
 *
 * Conv runs cuDNN's cudnnConvolutionForward and ConvTranspose its cudnnConvolutionBackwardData. Conv's algorithm
 * is the v7 heuristics' choice; from batch CONV_TIMING_MIN_BATCH on, cudnnFindConvolutionForwardAlgorithmEx times
 * every algorithm on the node's own buffers at its first run (as PyTorch's cudnn.benchmark does) and the fastest
 * is taken (dnn_time_forward; CINFER_CUDNN_BENCHMARK=0 skips the timing; ConvTranspose takes the heuristics'). The heuristics' choice fits the
 * session workspace, a timed one up to x->large_workspace_bytes (through scratch); deterministic when the
 * session asks; float32 takes no TF32 tensor cores unless precision "tf32". cuDNN pads symmetrically: an
 * asymmetric Conv first copies X, padded by the difference, into scratch; a ConvTranspose whose pads cuDNN cannot
 * express computes the uncropped output in scratch and crops it. A Conv with a bias and the fused Relu
 * ("cinfer_fused_relu"/"cinfer_fused_add_relu", set by the graph optimiser) runs as one
 * cudnnConvolutionBiasActivationForward, the residual as its z input; otherwise bias, residual and Relu run in one
 * pass after cuDNN. Whatever cuDNN refuses (a dtype, a shape beyond its int range) runs the direct kernels of
 * kernels/conv.cu, as do int8/uint8, which the CPU stages through float32. BatchNormalization and the pools are
 * kernels/conv.cu's own.
 *
 * cuDNN descriptors and the chosen algorithm are cached per problem (dtype, dims, window, group, device) in a
 * process-wide table that only grows: entries are immutable once published, so any session thread may use them
 * without holding the lock. The window geometry is graph/shape/conv_params.h's, as the CPU kernels' is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kernels/conv.h"
#include "backend/cuda/kernels/movement.h"
#include "core/status.h"
#include "graph/shape/conv_params.h"
#include "graph/shape/movement_params.h"

static bool conv_dtype(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 ||
           t == CINFER_DTYPE_BFLOAT16 || t == CINFER_DTYPE_INT8 || t == CINFER_DTYPE_UINT8;
}

static bool dnn_dtype(cinfer_dtype t, cudnnDataType_t *out) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: *out = CUDNN_DATA_FLOAT; return true;
    case CINFER_DTYPE_DOUBLE: *out = CUDNN_DATA_DOUBLE; return true;
    case CINFER_DTYPE_FLOAT16: *out = CUDNN_DATA_HALF; return true;
    case CINFER_DTYPE_BFLOAT16: *out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
    }
}

static cinfer_status out_of_memory(const graph_node *n) {
    return core_error(CINFER_ERR_OUT_OF_MEMORY, "%s node '%s': cannot allocate device scratch memory", n->op_type,
                      n->name);
}

/* ---- cuDNN plans ---- */

/* Everything a plan depends on; compared with memcmp, so always zero-filled first. For ConvTranspose (transpose
 * set) the convolution is the forward one whose backward data it is: x is the ConvTranspose output (dx), y its
 * input (dy). */
typedef struct dnn_key {
    int device, dtype, transpose, nbdims, group;
    int tf32, deterministic; /* session choices: TF32 allowed for float32; deterministic algorithms only */
    int channels_last;       /* X, W and Y are [N, spatial..., C] (graph/layout.c); the dims below stay [N, C, ...] */
    int x[5], w[5], y[5];
    int pad[3], stride[3], dil[3];
    size_t workspace;
} dnn_key;

typedef struct dnn_plan {
    dnn_key key;
    bool supported; /* false: cuDNN takes no part (the direct kernel runs); remembered so it is not asked again */
    bool cached;    /* owned by the table; else the caller releases it after the call */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo; /* cudnnConvolutionFwdAlgo_t or cudnnConvolutionBwdDataAlgo_t */
    size_t ws_bytes;
    /* a timed algorithm whose workspace passes the session's: the heuristics' choice within it, on its own
     * descriptor (its math type may differ), for a session that cannot get the larger workspace */
    cudnnConvolutionDescriptor_t cd_small;
    int algo_small;
    size_t ws_small;
    /* conv + bias + z + Relu in one call (forward float types): its descriptors, and whether cuDNN took it */
    cudnnTensorDescriptor_t bd; /* the bias: [1, M, 1, 1(, 1)] */
    cudnnActivationDescriptor_t act, identity; /* Relu; none (conv + bias + z alone) */
    /* per activation: 0 untried, 1 works, -1 refused (the plain call and the pass after it run) */
    _Atomic int fused_state, identity_state;
} dnn_plan;

/* The node's buffers, for timing the algorithms on them (NULL: use the heuristics). */
typedef struct dnn_find_io {
    const void *x, *w;
    void *y;
} dnn_find_io;

#define DNN_SLOTS 2048 /* open addressing, kept at most half full */
#define DNN_MAX_PLANS (DNN_SLOTS / 2)
static dnn_plan *dnn_table[DNN_SLOTS];
static int dnn_count;
static pthread_mutex_t dnn_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const void *key, size_t size) {
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void dnn_plan_release(dnn_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->cd_small) cudnnDestroyConvolutionDescriptor(p->cd_small);
    p->cd_small = NULL;
    if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
    if (p->act) cudnnDestroyActivationDescriptor(p->act);
    if (p->identity) cudnnDestroyActivationDescriptor(p->identity);
    p->bd = NULL;
    p->act = p->identity = NULL;
    p->xd = p->yd = NULL;
    p->wd = NULL;
    p->cd = NULL;
}

/* A packed tensor of dims [N, C, spatial...], laid out so or (channels_last) as [N, spatial..., C]. */
static cudnnStatus_t dnn_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nbdims, const int *dims,
                                bool channels_last) {
    int strides[5];
    int s = 1;
    if (channels_last) {
        strides[1] = 1;
        s = dims[1];
        for (int i = nbdims - 1; i >= 2; i--) {
            strides[i] = s;
            s *= dims[i];
        }
        strides[0] = s;
    } else {
        for (int i = nbdims - 1; i >= 0; i--) {
            strides[i] = s;
            s *= dims[i];
        }
    }
    return cudnnSetTensorNdDescriptor(d, type, nbdims, dims, strides);
}

/* Float32 takes TF32 tensor-core algorithms only when the session asked for precision "tf32". */
static bool math_allowed(const dnn_key *k, cudnnMathType_t m) {
    if (k->dtype != CINFER_DTYPE_FLOAT) return true;
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false; /* may run float32 data as float16: never */
    return k->tf32 || m != CUDNN_TENSOR_OP_MATH;
}

/* A convolution descriptor for k's window and groups (math type left at the default). */
static bool dnn_conv_descriptor(const dnn_key *k, cudnnConvolutionDescriptor_t *out) {
    cudnnDataType_t compute = k->dtype == CINFER_DTYPE_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (cudnnCreateConvolutionDescriptor(out) != CUDNN_STATUS_SUCCESS) return false;
    if (cudnnSetConvolutionNdDescriptor(*out, k->nbdims - 2, k->pad, k->stride, k->dil, CUDNN_CROSS_CORRELATION,
                                        compute) != CUDNN_STATUS_SUCCESS ||
        cudnnSetConvolutionGroupCount(*out, k->group) != CUDNN_STATUS_SUCCESS) {
        cudnnDestroyConvolutionDescriptor(*out);
        *out = NULL;
        return false;
    }
    return true;
}

/* Sets the plan's math type and algorithm to perf's when its real workspace fits in `limit` bytes. */
static bool dnn_try_algo(cuda_exec *x, dnn_plan *p, int algo, cudnnMathType_t math, size_t limit) {
    cinfer_dtype t = (cinfer_dtype)p->key.dtype;
    if ((t != CINFER_DTYPE_FLOAT || p->key.tf32) && cudnnSetConvolutionMathType(p->cd, math) != CUDNN_STATUS_SUCCESS)
        return false;
    size_t ws = 0;
    cudnnStatus_t st =
        p->key.transpose
            ? cudnnGetConvolutionBackwardDataWorkspaceSize(x->dnn, p->wd, p->yd, p->cd, p->xd,
                                                           (cudnnConvolutionBwdDataAlgo_t)algo, &ws)
            : cudnnGetConvolutionForwardWorkspaceSize(x->dnn, p->xd, p->wd, p->cd, p->yd,
                                                      (cudnnConvolutionFwdAlgo_t)algo, &ws);
    if (st != CUDNN_STATUS_SUCCESS || ws > limit) return false;
    p->algo = algo;
    p->ws_bytes = ws;
    return true;
}

/* The bias and activation (Relu; identity) descriptors of the fused call; left NULL (plain call) when cuDNN will
 * not make them. */
static void dnn_fused_descriptors(dnn_plan *p, cudnnDataType_t type) {
    int dims[5] = {1, p->key.y[1], 1, 1, 1};
    if (cudnnCreateTensorDescriptor(&p->bd) != CUDNN_STATUS_SUCCESS ||
        dnn_tensor(p->bd, type, p->key.nbdims, dims, false) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateActivationDescriptor(&p->act) != CUDNN_STATUS_SUCCESS ||
        cudnnSetActivationDescriptor(p->act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateActivationDescriptor(&p->identity) != CUDNN_STATUS_SUCCESS ||
        cudnnSetActivationDescriptor(p->identity, CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 0.0) !=
            CUDNN_STATUS_SUCCESS) {
        if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
        if (p->act) cudnnDestroyActivationDescriptor(p->act);
        if (p->identity) cudnnDestroyActivationDescriptor(p->identity);
        p->bd = NULL;
        p->act = p->identity = NULL;
    }
}

/* The widest math type the key allows: tensor cores for half types, TF32 only with precision "tf32", none for
 * double. The heuristics ask under it, and so does timing. */
static cudnnMathType_t dnn_widest_math(const dnn_key *k) {
    if (k->dtype == CINFER_DTYPE_FLOAT) return k->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    return k->dtype == CINFER_DTYPE_DOUBLE ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
}

/* Convolutions with a smaller batch keep the heuristics' choice untimed (dnn_time_forward says why). */
#define CONV_TIMING_MIN_BATCH 16

/* CINFER_CUDNN_LOG=1: one stderr line per algorithm choice and per fallback to the heuristics' choice at run time
 * (which algorithm, how much workspace), to see what timing picked and what ran. */
static bool dnn_log_on(void) {
    const char *v = getenv("CINFER_CUDNN_LOG");
    return v && strcmp(v, "1") == 0;
}

/* CINFER_CUDNN_BENCHMARK=0 takes the heuristics' choice instead of timing (PyTorch's cudnn.benchmark = False):
 * quicker first runs, and a way to compare the two choices. */
static bool timing_wanted(void) {
    const char *v = getenv("CINFER_CUDNN_BENCHMARK");
    return !v || strcmp(v, "0") != 0;
}

/* CINFER_CONV_DIRECT=1 runs every Conv on the direct kernels, cuDNN left out: to check those paths (the ones a
 * convolution cuDNN refuses takes) on any model. */
static bool direct_only(void) {
    const char *v = getenv("CINFER_CONV_DIRECT");
    return v && strcmp(v, "1") == 0;
}

/* Times every forward algorithm on the node's buffers (Y is overwritten; the real call follows) and takes the
 * fastest. Only batches of CONV_TIMING_MIN_BATCH and more are timed: cuDNN times each call alone, launch gaps
 * included, which at small batches favours one-kernel algorithms that a CUDA graph replay then finds slower than
 * the heuristics' tensor-core ones (H200, ResNet-50 fp16: b1 2.17 ms timed against 0.955 ms by the heuristics;
 * b256 10,710 img/s timed against 3,370). Keeping the heuristics' choice unless timing beat it by 25% did not
 * work: it gave b1 1.99 ms and b256 4,084 img/s (bench/BENCHMARKS.md). The timing workspace is borrowed from the device's
 * cache and returned at once, so a session keeps only what the chosen algorithm needs. A timed choice that needs
 * more than the session workspace keeps the heuristics' one beside it (cd_small) for sessions that cannot get
 * that much. Timing synchronises, so it runs outside graph captures, in the device's exclusive section. False when
 * it cannot run or finds nothing allowed. */
static bool dnn_time_forward(cuda_exec *x, dnn_plan *p, const dnn_find_io *io, bool have_heuristic) {
    const dnn_key *k = &p->key;
    if (cuda_exec_capturing(x)) return false;
    const int h_algo = p->algo;
    const size_t h_ws = p->ws_bytes;
    cudnnMathType_t h_math = CUDNN_DEFAULT_MATH; /* the descriptor's math type before timing (the heuristics') */
    if (cudnnGetConvolutionMathType(p->cd, &h_math) != CUDNN_STATUS_SUCCESS) return false;
    /* Find times under the descriptor's math type: the heuristics may have left a non-tensor-core one there (their
     * in-workspace pick at b256 fp16 is IMPLICIT_GEMM with FMA math), and Find then never tried the tensor-core
     * algorithms (H200 ResNet-50 fp16 b256: 4,033 img/s against 9,591 when they were tried) */
    if (cudnnSetConvolutionMathType(p->cd, dnn_widest_math(k)) != CUDNN_STATUS_SUCCESS) return false;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    void *borrowed = k->workspace > x->workspace_bytes ? cuda_exec_temp_alloc(x, k->workspace) : NULL;
    void *ws = borrowed ? borrowed : x->workspace;
    size_t ws_bytes = borrowed ? k->workspace : (x->workspace_bytes < k->workspace ? x->workspace_bytes : k->workspace);
    cuda_exec_exclusive_begin(x);
    cudnnStatus_t st = cudnnFindConvolutionForwardAlgorithmEx(x->dnn, p->xd, io->x, p->wd, io->w, p->cd, p->yd, io->y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws,
                                                              ws_bytes);
    cuda_exec_exclusive_end(x);
    cuda_exec_temp_free(x, borrowed); /* Find waited for its runs: nothing of it is still queued */
    cudnnSetConvolutionMathType(p->cd, h_math); /* whatever timing left there, the chosen call sets its own */
    if (st != CUDNN_STATUS_SUCCESS) {
        (void)cudaGetLastError(); /* a refused timing leaves no fault behind; a real one shows in the next call */
        return false;
    }
    /* Half types take a tensor-core result when there is one: Find times each call alone on a GPU whose clocks
     * may still be rising, and at ResNet-50 fp16 b32 (H200) it ranked IMPLICIT_GEMM without tensor cores
     * (math 0) first for 13 of 53 convolutions, which then ran several times slower in the graph: 6.58 ms a batch
     * against 1.91 ms with the heuristics' tensor-core choices (bench/BENCHMARKS.md). */
    const bool half = k->dtype == CINFER_DTYPE_FLOAT16 || k->dtype == CINFER_DTYPE_BFLOAT16;
    const cudnnConvolutionFwdAlgoPerf_t *best = NULL;
    for (int pass = half ? 0 : 1; pass < 2 && !best; pass++)
        for (int i = 0; i < returned && !best; i++) { /* fastest first */
            const cudnnConvolutionFwdAlgoPerf_t *r = &perf[i];
            if (r->status != CUDNN_STATUS_SUCCESS || r->memory > ws_bytes || !math_allowed(k, r->mathType) ||
                (k->deterministic && r->determinism != CUDNN_DETERMINISTIC) ||
                (pass == 0 && r->mathType != CUDNN_TENSOR_OP_MATH))
                continue;
            best = r;
        }
    if (dnn_log_on())
        for (int i = 0; i < returned; i++)
            fprintf(stderr, "cinfer cudnn:   timed algo %d math %d status %d: %.3f ms, %zu B\n", (int)perf[i].algo,
                    (int)perf[i].mathType, (int)perf[i].status, perf[i].time, perf[i].memory);
    if (dnn_log_on())
        fprintf(stderr, "cinfer cudnn: conv x[%d,%d,%d,%d] w[%d,%d,%d,%d]: timed %d algorithms with %zu B of workspace "
                "(borrowed: %s): fastest algo %d math %d (%.3f ms, %zu B), heuristics' algo %d math %d (%zu B)\n", k->x[0],
                k->x[1], k->x[2], k->x[3], k->w[0], k->w[1], k->w[2], k->w[3], returned, ws_bytes,
                borrowed ? "yes" : "no", best ? (int)best->algo : -1, best ? (int)best->mathType : -1,
                best ? best->time : 0.0f, best ? best->memory : (size_t)0, h_algo, (int)h_math, h_ws);
    if (!best) return false;
    if (!dnn_try_algo(x, p, (int)best->algo, best->mathType, ws_bytes))
        return have_heuristic && dnn_try_algo(x, p, h_algo, h_math, ws_bytes); /* puts the heuristic's math type back */
    if (have_heuristic && p->ws_bytes > x->workspace_bytes && dnn_conv_descriptor(k, &p->cd_small)) {
        if ((k->dtype != CINFER_DTYPE_FLOAT || k->tf32) &&
            cudnnSetConvolutionMathType(p->cd_small, h_math) != CUDNN_STATUS_SUCCESS) {
            cudnnDestroyConvolutionDescriptor(p->cd_small);
            p->cd_small = NULL;
        } else {
            p->algo_small = h_algo;
            p->ws_small = h_ws;
        }
    }
    return true;
}

/* Builds the descriptors and picks an algorithm: the heuristics' order, deterministic ones first, then (forward,
 * io given) timing on io's buffers may replace it (dnn_time_forward). False when cuDNN has nothing. */
static bool dnn_plan_build(cuda_exec *x, dnn_plan *p, const dnn_find_io *io) {
    const dnn_key *k = &p->key;
    cinfer_dtype t = (cinfer_dtype)k->dtype;
    cudnnDataType_t type;
    /* the heuristics' choice fits the session workspace; timing may take more (dnn_time_forward) */
    const size_t limit = k->workspace < x->workspace_bytes ? k->workspace : x->workspace_bytes;
    if (!dnn_dtype(t, &type)) return false;
    if (cudnnCreateTensorDescriptor(&p->xd) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateTensorDescriptor(&p->yd) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateFilterDescriptor(&p->wd) != CUDNN_STATUS_SUCCESS ||
        !dnn_conv_descriptor(k, &p->cd))
        return false;
    if (dnn_tensor(p->xd, type, k->nbdims, k->x, k->channels_last) != CUDNN_STATUS_SUCCESS ||
        dnn_tensor(p->yd, type, k->nbdims, k->y, k->channels_last) != CUDNN_STATUS_SUCCESS ||
        cudnnSetFilterNdDescriptor(p->wd, type, k->channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, k->nbdims,
                                   k->w) != CUDNN_STATUS_SUCCESS)
        return false;
    if (cudnnSetConvolutionMathType(p->cd, dnn_widest_math(k)) != CUDNN_STATUS_SUCCESS) return false;
    /* the shapes must be the ones cuDNN derives, or it would read or write past them */
    int dims[5];
    if (cudnnGetConvolutionNdForwardOutputDim(p->cd, p->xd, p->wd, k->nbdims, dims) != CUDNN_STATUS_SUCCESS ||
        memcmp(dims, k->y, (size_t)k->nbdims * sizeof(int)) != 0)
        return false;
    int returned = 0;
    if (k->transpose) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (cudnnGetConvolutionBackwardDataAlgorithm_v7(x->dnn, p->wd, p->yd, p->cd, p->xd,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
                                                        perf) != CUDNN_STATUS_SUCCESS)
            return false;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < returned; i++) {
                const cudnnConvolutionBwdDataAlgoPerf_t *r = &perf[i];
                if (r->status != CUDNN_STATUS_SUCCESS || r->memory > limit || !math_allowed(k, r->mathType) ||
                    ((pass == 0 || k->deterministic) && r->determinism != CUDNN_DETERMINISTIC))
                    continue;
                if (dnn_try_algo(x, p, (int)r->algo, r->mathType, limit)) return true;
            }
    } else {
        if (t != CINFER_DTYPE_DOUBLE) dnn_fused_descriptors(p, type);
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        bool picked = false;
        if (cudnnGetConvolutionForwardAlgorithm_v7(x->dnn, p->xd, p->wd, p->cd, p->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                   &returned, perf) != CUDNN_STATUS_SUCCESS)
            returned = 0;
        for (int pass = 0; pass < 2 && !picked; pass++)
            for (int i = 0; i < returned && !picked; i++) {
                const cudnnConvolutionFwdAlgoPerf_t *r = &perf[i];
                if (r->status != CUDNN_STATUS_SUCCESS || r->memory > limit || !math_allowed(k, r->mathType) ||
                    ((pass == 0 || k->deterministic) && r->determinism != CUDNN_DETERMINISTIC))
                    continue;
                picked = dnn_try_algo(x, p, (int)r->algo, r->mathType, limit);
            }
        /* small batches time only when the heuristics found nothing within the session workspace */
        if (io && timing_wanted() && (k->x[0] >= CONV_TIMING_MIN_BATCH || !picked) && dnn_time_forward(x, p, io, picked))
            return true;
        return picked;
    }
    return false;
}

static dnn_plan **dnn_slot_locked(const dnn_key *key) {
    uint64_t slot = key_hash(key, sizeof *key) & (DNN_SLOTS - 1);
    while (dnn_table[slot] && memcmp(&dnn_table[slot]->key, key, sizeof *key) != 0) slot = (slot + 1) & (DNN_SLOTS - 1);
    return &dnn_table[slot];
}

/* The plan for key (built on first use), or, once the table is full, one built in *tmp that the caller
 * releases. Check ->supported. NULL only when the memory cannot be had. The build runs outside the table's
 * lock: timing the algorithms waits for other threads' graph captures, which may be looking plans up. Two
 * threads may build one problem at once; the first to publish wins. */
static dnn_plan *dnn_plan_get(cuda_exec *x, const dnn_key *key, dnn_plan *tmp, const dnn_find_io *io) {
    pthread_mutex_lock(&dnn_lock);
    dnn_plan *p = *dnn_slot_locked(key);
    if (dnn_count >= DNN_MAX_PLANS) io = NULL; /* a plan built per call: no timing on every call */
    pthread_mutex_unlock(&dnn_lock);
    if (p) return p;
    dnn_plan *built = calloc(1, sizeof *built);
    if (!built) return NULL;
    memcpy(&built->key, key, sizeof *key); /* padding too: keys compare with memcmp */
    built->supported = dnn_plan_build(x, built, io);
    if (!built->supported) dnn_plan_release(built);
    pthread_mutex_lock(&dnn_lock);
    dnn_plan **slot = dnn_slot_locked(key);
    if (*slot) {
        p = *slot;
    } else if (dnn_count < DNN_MAX_PLANS) {
        built->cached = true;
        *slot = p = built;
        dnn_count++;
    }
    pthread_mutex_unlock(&dnn_lock);
    if (p == built) return p;
    if (!p) { /* table full: the caller uses and releases a copy */
        memcpy(tmp, built, sizeof *tmp);
        p = tmp;
    } else {
        dnn_plan_release(built);
    }
    free(built);
    return p;
}

/* Fills the key's tensor dims: [batch, channels, spatial...] with spatial taken from the 3-D form (its last two
 * dims for ranks 1 and 2). False when a dim or element count leaves cuDNN's int range. */
static bool dnn_dims(int *dst, int nbdims, int64_t batch, int64_t channels, const int64_t *sp3) {
    int64_t v[5] = {batch, channels, 0, 0, 0}, count = 1;
    for (int i = 2; i < nbdims; i++) v[i] = sp3[3 - (nbdims - i)];
    for (int i = 0; i < nbdims; i++) {
        count *= v[i];
        if (v[i] > INT32_MAX || count > INT32_MAX) return false;
        dst[i] = (int)v[i];
    }
    return true;
}

/* The window part of the key from 3-D values. */
static void dnn_window(dnn_key *k, const int64_t *pad3, const int64_t *stride3, const int64_t *dil3) {
    int nsp = k->nbdims - 2;
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        k->pad[i] = (int)pad3[j];
        k->stride[i] = (int)stride3[j];
        k->dil[i] = (int)dil3[j];
    }
}

static bool window_fits_int(const conv_geom *g) {
    for (int i = 0; i < 3; i++)
        if (g->k[i] > INT32_MAX || g->s[i] > INT32_MAX || g->d[i] > INT32_MAX || g->pb[i] > INT32_MAX ||
            g->pe[i] > INT32_MAX)
            return false;
    return true;
}

/* cuDNN's own refusals of a call (as opposed to a failing device) send the node to the direct kernel. */
static bool dnn_refused(cudnnStatus_t st) {
    return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED || CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM;
}

/* ---- Conv ---- */

/* Runs the convolution through cuDNN; *done false when cuDNN takes no part (the caller runs the direct kernel).
 * With a bias and relu, tries the fused call (Y = Relu(conv + bias + res)); *epilogue_done says it ran. */
static cinfer_status conv_cudnn(cuda_exec *x, const graph_node *n, const tensor *xt, const tensor *w, tensor *y,
                                int nsp, const conv_geom *g, int64_t group, const void *bias, const void *res,
                                bool relu, bool channels_last, bool *done, bool *epilogue_done) {
    *done = *epilogue_done = false;
    cudnnDataType_t type;
    if (!dnn_dtype(xt->dtype, &type) || !window_fits_int(g)) return CINFER_OK;
    /* cuDNN pads both sides alike: the common part stays with it, the rest is padded into scratch */
    int64_t common[3], lead[3], padded[3];
    bool pad_copy = false;
    for (int i = 0; i < 3; i++) {
        common[i] = g->pb[i] < g->pe[i] ? g->pb[i] : g->pe[i];
        lead[i] = g->pb[i] - common[i];
        padded[i] = g->in[i] + lead[i] + (g->pe[i] - common[i]);
        pad_copy |= padded[i] != g->in[i];
    }
    int64_t batch = xt->dims[0], c = xt->dims[1], m = y->dims[1];
    dnn_key key;
    memset(&key, 0, sizeof key);
    key.device = x->device;
    key.dtype = (int)xt->dtype;
    key.tf32 = x->allow_tf32 && xt->dtype == CINFER_DTYPE_FLOAT;
    key.deterministic = x->deterministic;
    key.nbdims = nsp == 3 ? 5 : 4;
    key.group = (int)group;
    key.channels_last = channels_last;
    if ((channels_last && pad_copy) || direct_only()) /* graph/layout.c takes symmetric pads only */
        return CINFER_OK;
    /* a large workspace where the memory allows (x->large_workspace_bytes), except when the padded copy
     * of X already holds the scratch buffer */
    size_t large = pad_copy ? 0 : x->large_workspace_bytes;
    key.workspace = large > x->workspace_bytes ? large : x->workspace_bytes;
    if (group > INT32_MAX || !dnn_dims(key.x, key.nbdims, batch, c, padded) ||
        !dnn_dims(key.w, key.nbdims, m, c / group, g->k) || !dnn_dims(key.y, key.nbdims, batch, m, g->out))
        return CINFER_OK;
    dnn_window(&key, common, g->s, g->d);
    const void *src = xt->data;
    cinfer_status st = CINFER_OK;
    if (pad_copy) {
        size_t bytes = (size_t)(batch * c * padded[0] * padded[1] * padded[2]) * cinfer_dtype_size(xt->dtype);
        void *buf = cuda_scratch(x, bytes > 0 ? bytes : 1);
        if (!buf) st = out_of_memory(n);
        conv_shift sh;
        for (int i = 0; i < 3; i++) {
            sh.src[i] = g->in[i];
            sh.dst[i] = padded[i];
            sh.off[i] = lead[i];
        }
        if (st == CINFER_OK)
            st = cuda_check_launch(n, "Conv pad", conv_launch_shift(xt->dtype, xt->data, buf, batch * c, sh, NULL, 1,
                                                                    x->stream));
        src = buf;
    }
    CINFER_TRY(st);
    dnn_find_io io = {src, w->data, y->data};
    dnn_plan tmp, *plan = dnn_plan_get(x, &key, &tmp, &io);
    if (!plan) return out_of_memory(n);
    if (!plan->supported) return CINFER_OK;
    /* the plan's algorithm, or the heuristics' one within the session workspace when its larger one cannot be had */
    cudnnConvolutionDescriptor_t cd = plan->cd;
    int algo = plan->algo;
    size_t ws_bytes = plan->ws_bytes;
    void *ws = ws_bytes > x->workspace_bytes ? cuda_scratch(x, ws_bytes) : x->workspace;
    if (!ws && plan->cd_small) {
        if (dnn_log_on())
            fprintf(stderr, "cinfer cudnn: conv x[%d,%d,%d,%d]: %zu B of workspace not to be had%s: the heuristics' algo %d "
                    "runs instead of algo %d\n", key.x[0], key.x[1], key.x[2], key.x[3], ws_bytes,
                    cuda_exec_capturing(x) ? " while capturing" : "", plan->algo_small, algo);
        cd = plan->cd_small;
        algo = plan->algo_small;
        ws_bytes = plan->ws_small;
        ws = x->workspace;
    }
    if (!ws) {
        if (!plan->cached) dnn_plan_release(plan);
        return out_of_memory(n);
    }
    /* conv + bias (+ residual) (+ Relu) in one call; without Relu through the identity activation, which cuDNN
     * takes with IMPLICIT_PRECOMP_GEMM only (the ResNet-50 projection shortcuts: 1.7 ms of bias passes at fp16 b256
     * on the H200 without it) */
    _Atomic int *state = relu ? &plan->fused_state : &plan->identity_state;
    cudnnActivationDescriptor_t act = relu ? plan->act : plan->identity;
    if (bias && plan->bd && act && *state >= 0) {
        float one = 1.0f, alpha2 = res ? 1.0f : 0.0f;
        cudnnStatus_t ds = cudnnConvolutionBiasActivationForward(
            x->dnn, &one, plan->xd, src, plan->wd, w->data, cd, (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, &alpha2,
            plan->yd, res ? res : y->data, plan->bd, bias, act, plan->yd, y->data);
        if (!dnn_refused(ds)) {
            *state = 1;
            st = cuda_check_cudnn(n, "cudnnConvolutionBiasActivationForward", ds);
            *done = *epilogue_done = true;
            if (!plan->cached) dnn_plan_release(plan);
            return st;
        }
        *state = -1; /* this configuration is not one cuDNN fuses: the plain call and a pass from now on */
    }
    {
        float one_f = 1.0f, zero_f = 0.0f;
        double one_d = 1.0, zero_d = 0.0;
        bool dbl = xt->dtype == CINFER_DTYPE_DOUBLE;
        cudnnStatus_t ds = cudnnConvolutionForward(x->dnn, dbl ? (const void *)&one_d : (const void *)&one_f,
                                                   plan->xd, src, plan->wd, w->data, cd,
                                                   (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes,
                                                   dbl ? (const void *)&zero_d : (const void *)&zero_f, plan->yd,
                                                   y->data);
        if (!dnn_refused(ds)) {
            st = cuda_check_cudnn(n, "cudnnConvolutionForward", ds);
            *done = true;
        }
    }
    if (!plan->cached) dnn_plan_release(plan);
    return st;
}

/* A contiguous copy of t (channels-last dims d0..d3) with its axes permuted by perm, into dst. */
static cinfer_status permute_4d(cuda_exec *x, const graph_node *n, void *dst, const void *src, const tensor *t,
                                const int *perm) {
    movement_view v;
    movement_view_permute(4, t->dims, perm, &v);
    return cuda_check_launch(n, "Conv layout copy",
                             movement_launch_view_copy(dst, src, cinfer_dtype_size(t->dtype), &v, x->stream));
}

/* A channels-last Conv cuDNN takes no part in (a size beyond its int range, asymmetric pads, CINFER_CONV_DIRECT):
 * X and W reordered channels-first into scratch, the direct kernel, Y reordered back, then the residual and Relu. */
static cinfer_status conv_channels_last_direct(cuda_exec *x, const graph_node *n, const tensor *xt, const tensor *w,
                                               tensor *y, const conv_geom *g, int64_t group, const void *bias,
                                               const void *res, bool relu) {
    static const int to_first[4] = {0, 3, 1, 2}, to_last[4] = {0, 2, 3, 1};
    const size_t es = cinfer_dtype_size(xt->dtype);
    const size_t xb = ((size_t)tensor_numel(xt) * es + 255) & ~(size_t)255, wb = ((size_t)tensor_numel(w) * es + 255) &
                                                                             ~(size_t)255;
    char *buf = cuda_scratch(x, xb + wb + (size_t)tensor_numel(y) * es);
    if (!buf) return out_of_memory(n);
    tensor yv; /* Y's channels-first dims [N, M, spatial] */
    conv_channels_first_view(y, &yv);
    const int64_t batch = xt->dims[0], c = xt->dims[3], m = y->dims[3];
    CINFER_TRY(permute_4d(x, n, buf, xt->data, xt, to_first));
    CINFER_TRY(permute_4d(x, n, buf + xb, w->data, w, to_first));
    CINFER_TRY(cuda_check_launch(n, "Conv direct", conv_launch_direct(xt->dtype, buf, buf + xb, bias, buf + xb + wb, batch,
                                                                      c, m, group, *g, relu && !res, x->stream)));
    CINFER_TRY(permute_4d(x, n, y->data, buf + xb + wb, &yv, to_last));
    if (!res) return CINFER_OK;
    return cuda_check_launch(n, "Conv residual", conv_launch_bias_act(xt->dtype, y->data, batch * g->out_size * m, m,
                                                                      1, NULL, false, relu, res, x->stream));
}

static cinfer_status run_conv(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                              int num_out) {
    (void)num_out;
    /* channels-last (graph/layout.c): the channels-first views carry the geometry, the data stays as it is */
    const bool last = conv_channels_last(n);
    tensor xv = in[0], wv = in[1], yv = out[0];
    if (last) {
        conv_channels_first_view(&in[0], &xv);
        conv_channels_first_view(&in[1], &wv);
        conv_channels_first_view(&out[0], &yv);
    }
    const tensor *xt = &xv, *w = &wv;
    const tensor *b = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    /* the fused residual Add (graph/fusion.c): Y = act(conv + B + R), R shaped like Y (the schema checked it) */
    const tensor *r = num_in > 3 && in[3].dtype != CINFER_DTYPE_UNDEFINED ? &in[3] : NULL;
    tensor *y = &yv;
    if (!conv_dtype(xt->dtype)) return cuda_unsupported_dtype(n, xt->dtype);
    if (w->dtype != xt->dtype || (b && b->dtype != xt->dtype) || y->dtype != xt->dtype || (r && r->dtype != xt->dtype))
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "Conv node '%s': X, W, B and Y must share one dtype", n->name);
    conv_geom g;
    int64_t group;
    CINFER_TRY(conv_compute_conv(n, xt, w, b, y, "CUDA", &g, &group));
    const int nsp = xt->ndim - 2;
    int64_t batch = xt->dims[0], c = xt->dims[1], m = y->dims[1];
    const bool relu = graph_attr_int(n, r ? "cinfer_fused_add_relu" : "cinfer_fused_relu", 0) != 0;
    const void *res = r ? r->data : NULL;
    const int64_t out_size = g.out_size;
    if (batch * m * out_size == 0) return CINFER_OK;
    const void *bias = b ? b->data : NULL;
    /* the bias + Relu pass: planes of one channel each, or channels-last one element per plane */
    const int64_t planes = last ? batch * m * out_size : batch * m, plane_size = last ? 1 : out_size;
#define BIAS_PASS(fill) \
    conv_launch_bias_act(xt->dtype, y->data, planes, m, plane_size, bias, fill, relu, res, x->stream)
    if (c == 0 || g.in_size == 0) /* no input taps: Y is the bias */
        return cuda_check_launch(n, "Conv bias fill", BIAS_PASS(true));
    bool done = false, epilogue_done = false;
    CINFER_TRY(conv_cudnn(x, n, xt, w, y, nsp, &g, group, bias, res, relu, last, &done, &epilogue_done));
    if (done) {
        if (epilogue_done || (!bias && !relu && !res)) return CINFER_OK;
        return cuda_check_launch(n, "Conv bias/residual/Relu", BIAS_PASS(false));
    }
#undef BIAS_PASS
    if (last) return conv_channels_last_direct(x, n, &in[0], &in[1], &out[0], &g, group, bias, res, relu);
    CINFER_TRY(cuda_check_launch(n, "Conv direct", conv_launch_direct(xt->dtype, xt->data, w->data, bias, y->data, batch,
                                                                      c, m, group, g, relu && !res, x->stream)));
    if (!res) return CINFER_OK;
    return cuda_check_launch(n, "Conv residual", conv_launch_bias_act(xt->dtype, y->data, batch * m, m, out_size, NULL,
                                                                      false, relu, res, x->stream));
}

/* ---- ConvTranspose ---- */

/* Runs the transposed convolution through cuDNN's backward data, bias included; *done false when cuDNN takes no
 * part. When the begin pads give exactly the output's extent cuDNN writes Y itself; otherwise it writes the
 * uncropped result (no pads: extent s * (in - 1) + dilated kernel) to scratch, and a crop copies Y out of it. */
static cinfer_status conv_transpose_cudnn(cuda_exec *x, const graph_node *n, const tensor *xt, const tensor *w,
                                          const void *bias, tensor *y, int nsp, const conv_geom *g, int64_t group,
                                          bool *done) {
    *done = false;
    cudnnDataType_t type;
    if (!dnn_dtype(xt->dtype, &type) || !window_fits_int(g)) return CINFER_OK;
    bool direct = true;
    int64_t full[3], zero[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        int64_t dk = (g->k[i] - 1) * g->d[i] + 1, num = g->out[i] + 2 * g->pb[i] - dk;
        direct = direct && g->pb[i] >= 0 && num >= 0 && num / g->s[i] + 1 == g->in[i];
        full[i] = g->s[i] * (g->in[i] - 1) + dk;
    }
    int64_t batch = xt->dims[0], c = xt->dims[1], m = y->dims[1];
    dnn_key key;
    memset(&key, 0, sizeof key);
    key.device = x->device;
    key.dtype = (int)xt->dtype;
    key.tf32 = x->allow_tf32 && xt->dtype == CINFER_DTYPE_FLOAT;
    key.deterministic = x->deterministic;
    key.transpose = 1;
    key.nbdims = nsp == 3 ? 5 : 4;
    key.group = (int)group;
    key.workspace = x->workspace_bytes;
    if (group > INT32_MAX || !dnn_dims(key.x, key.nbdims, batch, m, direct ? g->out : full) ||
        !dnn_dims(key.w, key.nbdims, c, m / group, g->k) || !dnn_dims(key.y, key.nbdims, batch, c, g->in))
        return CINFER_OK;
    dnn_window(&key, direct ? g->pb : zero, g->s, g->d);
    dnn_plan tmp, *plan = dnn_plan_get(x, &key, &tmp, NULL);
    if (!plan) return out_of_memory(n);
    if (!plan->supported) return CINFER_OK;
    cinfer_status st = CINFER_OK;
    void *dst = y->data;
    if (!direct) {
        size_t bytes = (size_t)(batch * m * full[0] * full[1] * full[2]) * cinfer_dtype_size(xt->dtype);
        dst = cuda_scratch(x, bytes > 0 ? bytes : 1);
        if (!dst) st = out_of_memory(n);
    }
    if (st == CINFER_OK) {
        float one_f = 1.0f, zero_f = 0.0f;
        double one_d = 1.0, zero_d = 0.0;
        bool dbl = xt->dtype == CINFER_DTYPE_DOUBLE;
        cudnnStatus_t ds = cudnnConvolutionBackwardData(
            x->dnn, dbl ? (const void *)&one_d : (const void *)&one_f, plan->wd, w->data, plan->yd, xt->data, plan->cd,
            (cudnnConvolutionBwdDataAlgo_t)plan->algo, x->workspace, plan->ws_bytes,
            dbl ? (const void *)&zero_d : (const void *)&zero_f, plan->xd, dst);
        if (!dnn_refused(ds)) {
            st = cuda_check_cudnn(n, "cudnnConvolutionBackwardData", ds);
            *done = true;
        }
    }
    if (st == CINFER_OK && *done) {
        if (direct) {
            if (bias)
                st = cuda_check_launch(n, "ConvTranspose bias",
                                       conv_launch_bias_act(xt->dtype, y->data, batch * m, m, g->out_size, bias,
                                                            false, false, NULL, x->stream));
        } else {
            conv_shift sh;
            for (int i = 0; i < 3; i++) {
                sh.src[i] = full[i];
                sh.dst[i] = g->out[i];
                sh.off[i] = -g->pb[i];
            }
            st = cuda_check_launch(n, "ConvTranspose crop",
                                   conv_launch_shift(xt->dtype, dst, y->data, batch * m, sh, bias, m, x->stream));
        }
    }
    if (!plan->cached) dnn_plan_release(plan);
    return st;
}

static cinfer_status run_conv_transpose(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                        int num_out) {
    (void)num_out;
    const tensor *xt = &in[0], *w = &in[1];
    const tensor *b = num_in > 2 && in[2].dtype != CINFER_DTYPE_UNDEFINED ? &in[2] : NULL;
    tensor *y = &out[0];
    if (!conv_dtype(xt->dtype)) return cuda_unsupported_dtype(n, xt->dtype);
    if (w->dtype != xt->dtype || (b && b->dtype != xt->dtype) || y->dtype != xt->dtype)
        return core_error(CINFER_ERR_INVALID_ARGUMENT, "ConvTranspose node '%s': X, W, B and Y must share one dtype",
                          n->name);
    conv_geom g;
    int64_t group;
    CINFER_TRY(conv_compute_conv(n, xt, w, b, y, "CUDA", &g, &group));
    const int nsp = xt->ndim - 2;
    int64_t batch = xt->dims[0], c = xt->dims[1], m = y->dims[1];
    const int64_t out_size = g.out_size;
    if (batch * m * out_size == 0) return CINFER_OK;
    const void *bias = b ? b->data : NULL;
    if (c == 0 || g.in_size == 0) /* no input: Y is the bias */
        return cuda_check_launch(n, "ConvTranspose bias fill",
                                 conv_launch_bias_act(xt->dtype, y->data, batch * m, m, out_size, bias, true, false,
                                                      NULL, x->stream));
    bool done = false;
    CINFER_TRY(conv_transpose_cudnn(x, n, xt, w, bias, y, nsp, &g, group, &done));
    if (done) return CINFER_OK;
    return cuda_check_launch(n, "ConvTranspose direct",
                             conv_launch_transpose_direct(xt->dtype, xt->data, w->data, bias, y->data, batch, c, m,
                                                          group, g, x->stream));
}

/* ---- BatchNormalization ---- */

static bool float_dtype(cinfer_dtype t) {
    return t == CINFER_DTYPE_FLOAT || t == CINFER_DTYPE_DOUBLE || t == CINFER_DTYPE_FLOAT16 ||
           t == CINFER_DTYPE_BFLOAT16;
}

static cinfer_status run_batchnorm(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                   int num_out) {
    const tensor *xt = &in[0];
    if (num_in < 5 || xt->ndim < 2)
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "BatchNormalization node '%s': needs X of rank >= 2 and 4 parameters", n->name);
    if (!conv_dtype(xt->dtype) || out[0].dtype != xt->dtype) return cuda_unsupported_dtype(n, xt->dtype);
    int64_t batch = xt->dims[0], c = xt->dims[1], total = tensor_numel(xt);
    int64_t size = batch * c > 0 ? total / (batch * c) : 0;
    for (int i = 1; i < 5; i++)
        if (!float_dtype(in[i].dtype) || tensor_numel(&in[i]) != c)
            return core_error(CINFER_ERR_INVALID_ARGUMENT,
                              "BatchNormalization node '%s': input %d must be a float type and hold %lld values",
                              n->name, i, (long long)c);
    bool training = n->opset >= 14 ? graph_attr_int(n, "training_mode", 0) != 0 : false;
    if (n->opset < 14)
        for (int j = 1; j < num_out; j++)
            if (out[j].data)
                return core_error(CINFER_ERR_UNSUPPORTED,
                                  "BatchNormalization node '%s': training outputs of BatchNormalization-9 are not "
                                  "supported",
                                  n->name);
    void *run_mean = num_out > 1 ? out[1].data : NULL, *run_var = num_out > 2 ? out[2].data : NULL;
    if (training && ((run_mean && (tensor_numel(&out[1]) != c || out[1].dtype != in[3].dtype)) ||
                     (run_var && (tensor_numel(&out[2]) != c || out[2].dtype != in[3].dtype))))
        return core_error(CINFER_ERR_INVALID_ARGUMENT,
                          "BatchNormalization node '%s': running mean/var outputs must hold %lld values of the mean's "
                          "dtype",
                          n->name, (long long)c);
    if (c == 0 || (total == 0 && !training)) return CINFER_OK;
    conv_bn_params bp = {
        .scale = in[1].data, .bias = in[2].data, .mean = in[3].data, .var = in[4].data,
        .scale_t = in[1].dtype, .bias_t = in[2].dtype, .mean_t = in[3].dtype, .var_t = in[4].dtype,
        .eps = graph_attr_float(n, "epsilon", 1e-5f), .momentum = graph_attr_float(n, "momentum", 0.9f),
        .channels = c,
    };
    double *table = cuda_scratch(x, (size_t)(2 * c) * sizeof(double));
    if (!table) return out_of_memory(n);
    if (training)
        CINFER_TRY(cuda_check_launch(n, "BatchNormalization statistics",
                                     conv_launch_bn_train(xt->dtype, xt->data, batch, size, bp, table, run_mean,
                                                          run_var, x->stream)));
    else
        CINFER_TRY(cuda_check_launch(n, "BatchNormalization coefficients",
                                     conv_launch_bn_table(xt->dtype, bp, table, x->stream)));
    return cuda_check_launch(n, "BatchNormalization",
                             conv_launch_bn_apply(xt->dtype, xt->data, out[0].data, total, c, size, table, x->stream));
}

/* ---- MaxPool, AveragePool, LpPool ---- */

static cinfer_status run_pool(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out, int num_out, int kind) {
    const tensor *xt = &in[0];
    tensor *y = &out[0];
    if (!conv_dtype(xt->dtype) || y->dtype != xt->dtype) return cuda_unsupported_dtype(n, xt->dtype);
    conv_geom g;
    conv_pool pool;
    if (conv_channels_last(n)) { /* graph/layout.c: Max and Average, no Indices */
        tensor xv, yv;
        conv_channels_first_view(xt, &xv);
        conv_channels_first_view(y, &yv);
        CINFER_TRY(conv_compute_pool(n, &xv, &yv, 1, "CUDA", &g, &pool));
        return cuda_check_launch(n, n->op_type,
                                 conv_launch_pool_nhwc(xt->dtype, kind, xt->data, y->data, xv.dims[0], xv.dims[1], g,
                                                       pool.include_pad, x->stream));
    }
    CINFER_TRY(conv_compute_pool(n, in, out, num_out, "CUDA", &g, &pool));
    int64_t *idx = num_out > 1 && out[1].data ? out[1].data : NULL;
    int64_t planes = xt->dims[0] * xt->dims[1];
    if (planes * g.out_size == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             conv_launch_pool(xt->dtype, kind, xt->data, y->data, kind == CONV_POOL_MAX ? idx : NULL,
                                              planes, g, pool.include_pad, pool.p, pool.col_major, x->stream));
}

static cinfer_status run_maxpool(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    (void)num_in;
    return run_pool(x, n, in, out, num_out, CONV_POOL_MAX);
}
static cinfer_status run_avgpool(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                 int num_out) {
    (void)num_in;
    return run_pool(x, n, in, out, num_out, CONV_POOL_AVG);
}
static cinfer_status run_lppool(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,
                                int num_out) {
    (void)num_in;
    return run_pool(x, n, in, out, num_out, CONV_POOL_LP);
}

/* ---- global pools ---- */

static cinfer_status run_global_pool(cuda_exec *x, const graph_node *n, const tensor *in, tensor *out, int kind) {
    const tensor *xt = &in[0];
    if (!conv_dtype(xt->dtype) || out[0].dtype != xt->dtype) return cuda_unsupported_dtype(n, xt->dtype);
    int64_t planes, size;
    conv_pool pool;
    if (conv_channels_last(n)) { /* graph/layout.c: X [N, spatial..., C], Y [N, C, 1...] */
        tensor xv;
        conv_channels_first_view(xt, &xv);
        CINFER_TRY(conv_compute_global_pool(n, &xv, &out[0], &planes, &size, &pool));
        return cuda_check_launch(n, n->op_type,
                                 conv_launch_global_pool_nhwc(xt->dtype, kind, xt->data, out[0].data, xv.dims[0],
                                                              xv.dims[1], size, pool.p, x->stream));
    }
    CINFER_TRY(conv_compute_global_pool(n, xt, &out[0], &planes, &size, &pool));
    if (planes == 0) return CINFER_OK;
    return cuda_check_launch(n, n->op_type,
                             conv_launch_global_pool(xt->dtype, kind, xt->data, out[0].data, planes, size, pool.p,
                                                     x->stream));
}

#define DEFINE_GLOBAL_POOL(name, kind)                                                                           \
    static cinfer_status name(cuda_exec *x, const graph_node *n, const tensor *in, int num_in, tensor *out,      \
                              int num_out) {                                                                     \
        (void)num_in;                                                                                            \
        (void)num_out;                                                                                           \
        return run_global_pool(x, n, in, out, kind);                                                             \
    }
DEFINE_GLOBAL_POOL(run_global_avgpool, CONV_POOL_AVG)
DEFINE_GLOBAL_POOL(run_global_maxpool, CONV_POOL_MAX)
DEFINE_GLOBAL_POOL(run_global_lppool, CONV_POOL_LP)

const cuda_kernel cuda_conv_kernels[] = {
    {"Conv", run_conv},
    {"ConvTranspose", run_conv_transpose},
    {"BatchNormalization", run_batchnorm},
    {"MaxPool", run_maxpool},
    {"AveragePool", run_avgpool},
    {"LpPool", run_lppool},
    {"GlobalAveragePool", run_global_avgpool},
    {"GlobalMaxPool", run_global_maxpool},
    {"GlobalLpPool", run_global_lppool},
    {NULL, NULL},
};
