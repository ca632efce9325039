# The CUDA backend module libcinfer_cuda.so: host C11 (src/backend/cuda/*.c, ops/*.c) plus kernels (kernels/*.cu).
# It binds to the engine only through the host table the engine hands it at load (src/backend/cuda_module.h): it
# links its own copy of the stateless internals (cinfer_internals) and of the caching allocator (src/alloc/), not
# libcinfer.so, and links cudart, cuBLASLt and cuDNN; the engine itself never links CUDA, so CPU-only runs do not pay
# for loading it.
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
# The module's code but its entry (the hand-over, which only the module itself has): bench_alloc links it too.
set(CINFER_CUDA_ENTRY ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_module_entry.c)
list(REMOVE_ITEM CINFER_CUDA_SOURCES ${CINFER_CUDA_ENTRY})
add_library(cinfer_cuda_objects OBJECT ${CINFER_CUDA_SOURCES} ${PROJECT_SOURCE_DIR}/src/alloc/caching_allocator.c)
target_include_directories(cinfer_cuda_objects PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                           ${CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(cinfer_cuda_objects PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fPIC -Xcompiler=-Wall>)
if(CINFER_WERROR)
  target_compile_options(cinfer_cuda_objects PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endif()
# Host C hidden like the engine's; the .cu objects keep their flags (the version script localises them all the same).
set_target_properties(cinfer_cuda_objects PROPERTIES C_VISIBILITY_PRESET hidden
                      CUDA_SEPARABLE_COMPILATION OFF)
set(CINFER_CUDA_LINK CUDA::cudart CUDA::cublasLt ${CUDNN_LIBRARY} ${MATH_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS})

add_library(cinfer_cuda SHARED ${CINFER_CUDA_ENTRY} $<TARGET_OBJECTS:cinfer_cuda_objects> $<TARGET_OBJECTS:cinfer_internals>)
target_include_directories(cinfer_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                           ${CMAKE_BINARY_DIR}/build_id ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(cinfer_cuda PRIVATE ${CINFER_CUDA_LINK})
# Exports its entry alone (cmake/cinfer_cuda.map); --no-undefined makes a reference to an engine internal a link
# error here rather than a dlopen failure on a GPU machine.
target_link_options(cinfer_cuda PRIVATE LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/cinfer_cuda.map
                    LINKER:--no-undefined)
set_property(TARGET cinfer_cuda APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/cinfer_cuda.map)
set_target_properties(cinfer_cuda PROPERTIES C_VISIBILITY_PRESET hidden LINKER_LANGUAGE CUDA)
# cuDNN's folder differs between machines (the toolkit's lib/, PyTorch's venv on the GPU machine): LD_LIBRARY_PATH
# finds it there; the build folders here are on the RUNPATH.
get_filename_component(CUDNN_LIBRARY_DIR ${CUDNN_LIBRARY} DIRECTORY)
set_target_properties(cinfer_cuda PROPERTIES BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${CUDNN_LIBRARY_DIR};${CMAKE_BINARY_DIR}")
# The engine looks for the module beside libcinfer.so.
add_dependencies(cinfer cinfer_cuda)

# Allocator benchmark (bench/gpu/bench_alloc.c): drives the module's real per-device caching allocator, linking the
# module's code directly; with no engine to hand it a host table, the engine's error state (src/core/status.c) stands
# in for the module's entry.
add_executable(bench_alloc ${PROJECT_SOURCE_DIR}/bench/gpu/bench_alloc.c ${PROJECT_SOURCE_DIR}/src/core/status.c
               $<TARGET_OBJECTS:cinfer_cuda_objects> $<TARGET_OBJECTS:cinfer_internals>)
target_include_directories(bench_alloc PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(bench_alloc PRIVATE ${CINFER_CUDA_LINK})
set_target_properties(bench_alloc PROPERTIES LINKER_LANGUAGE CUDA
                      BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR};${CUDNN_LIBRARY_DIR};${CMAKE_BINARY_DIR}")
