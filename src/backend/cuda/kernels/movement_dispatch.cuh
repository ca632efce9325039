// Dtype dispatch for the movement family's launchers (CUDA C++ only): a generic lambda gets a type tag, so
// kernel launches with <<<grid, block, 0, stream>>> can sit inside without the preprocessor splitting them
// at their commas (which the CUDA_DISPATCH_* macros of common.cuh would do).
#ifndef CINFER_CUDA_KERNELS_MOVEMENT_DISPATCH_CUH
#define CINFER_CUDA_KERNELS_MOVEMENT_DISPATCH_CUH

#include "backend/cuda/kernels/common.cuh"

namespace cinfer_cuda {
namespace movement {

template <typename T> struct type_tag {
    using type = T;
};

// Element size only: f(type_tag<unsigned integer of that width>).
template <typename F> cudaError_t dispatch_by_size(size_t elem_size, F &&f) {
    switch (elem_size) {
    case 1: return f(type_tag<uint8_t>{});
    case 2: return f(type_tag<uint16_t>{});
    case 4: return f(type_tag<uint32_t>{});
    case 8: return f(type_tag<uint64_t>{});
    default: return cudaErrorInvalidValue;
    }
}

// By size like dispatch_by_size, plus 16-byte units (uint4) for copies widened to vector loads and stores.
template <typename F> cudaError_t dispatch_copy_unit(size_t unit, F &&f) {
    if (unit == 16) return f(type_tag<uint4>{});
    return dispatch_by_size(unit, f);
}

// Index tensors: int32 or int64.
template <typename F> cudaError_t dispatch_index(bool is_64, F &&f) {
    return is_64 ? f(type_tag<int64_t>{}) : f(type_tag<int32_t>{});
}

// Every numeric dtype (not bool); cudaErrorInvalidValue for others.
template <typename F> cudaError_t dispatch_numeric(cinfer_dtype t, F &&f) {
    switch (t) {
    case CINFER_DTYPE_FLOAT: return f(type_tag<float>{});
    case CINFER_DTYPE_DOUBLE: return f(type_tag<double>{});
    case CINFER_DTYPE_FLOAT16: return f(type_tag<__half>{});
    case CINFER_DTYPE_BFLOAT16: return f(type_tag<__nv_bfloat16>{});
    case CINFER_DTYPE_INT8: return f(type_tag<int8_t>{});
    case CINFER_DTYPE_INT16: return f(type_tag<int16_t>{});
    case CINFER_DTYPE_INT32: return f(type_tag<int32_t>{});
    case CINFER_DTYPE_INT64: return f(type_tag<int64_t>{});
    case CINFER_DTYPE_UINT8: return f(type_tag<uint8_t>{});
    case CINFER_DTYPE_UINT16: return f(type_tag<uint16_t>{});
    case CINFER_DTYPE_UINT32: return f(type_tag<uint32_t>{});
    case CINFER_DTYPE_UINT64: return f(type_tag<uint64_t>{});
    default: return cudaErrorInvalidValue;
    }
}

}  // namespace movement
}  // namespace cinfer_cuda

#endif
