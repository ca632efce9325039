# The CUDA backend module libcinfer_cuda.so: host C11 (src/backend/cuda/*.c, ops/*.c) plus kernels (kernels/*.cu).
# It links the shared engine (so it shares libcinfer's state when dlopened), cudart, cuBLASLt and cuDNN; the
# engine itself never links CUDA, so CPU-only runs do not pay for loading it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90) # H100/H200; override with -DCMAKE_CUDA_ARCHITECTURES=...
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64
             ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
  message(FATAL_ERROR "cuDNN not found (cudnn.h, libcudnn.so): install cuDNN 9 or configure with -DCINFER_CUDA=OFF")
endif()
message(STATUS "cinfer: cuDNN ${CUDNN_LIBRARY}, CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")

file(GLOB CINFER_CUDA_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.c ${PROJECT_SOURCE_DIR}/src/backend/cuda/ops/*.c
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/kernels/*.cu)
add_library(cinfer_cuda SHARED ${CINFER_CUDA_SOURCES})
target_include_directories(cinfer_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                           ${CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(cinfer_cuda PRIVATE cinfer_shared CUDA::cudart CUDA::cublasLt ${CUDNN_LIBRARY} ${CMAKE_DL_LIBS})
target_compile_options(cinfer_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fPIC -Xcompiler=-Wall>)
if(CINFER_WERROR)
  target_compile_options(cinfer_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
# cuDNN's folder differs between machines (the toolkit's lib/, PyTorch's venv on the GPU machine): LD_LIBRARY_PATH
# finds it there; the build folders here are on the RUNPATH.
get_filename_component(CUDNN_LIBRARY_DIR ${CUDNN_LIBRARY} DIRECTORY)
set_target_properties(cinfer_cuda PROPERTIES BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${CUDNN_LIBRARY_DIR};${CMAKE_BINARY_DIR}"
                      CUDA_SEPARABLE_COMPILATION OFF)
# The engine looks for the module beside libcinfer.so.
add_dependencies(cinfer cinfer_cuda)

# Allocator benchmark (bench/gpu/bench_alloc.c): drives the module's real per-device caching allocator.
add_executable(bench_alloc ${PROJECT_SOURCE_DIR}/bench/gpu/bench_alloc.c)
target_include_directories(bench_alloc PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(bench_alloc PRIVATE cinfer_cuda cinfer_shared CUDA::cudart)
set_target_properties(bench_alloc PROPERTIES BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${CUDNN_LIBRARY_DIR};${CMAKE_BINARY_DIR}")
