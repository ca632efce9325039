# Fuzz targets (included from tests/CMakeLists.txt). Each target is one tests/fuzz/fuzz_<name>.c with a
# LLVMFuzzerTestOneInput: model (ONNX loader + run), npy (.npy reader), config (config.pbtxt parser) and kserve
# (KServe v2 JSON + binary infer request decoder). With CINFER_FUZZ (clang) they are libFuzzer binaries
# (scripts/fuzz.sh fuzzes them); otherwise they are linked with replay_main.c as fuzz_<name>_replay. Either
# way ctest replays the committed corpus tests/fuzz/corpus/<name>/ (seeds and crash regressions), label fuzz.
set(FUZZ_TARGETS model npy)
if(CINFER_SERVER AND TARGET PkgConfig::JANSSON)
  list(APPEND FUZZ_TARGETS config kserve)
endif()
foreach(name ${FUZZ_TARGETS})
  if(CINFER_FUZZ)
    set(exe fuzz_${name})
    add_executable(${exe} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${name}.c)
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer)
    set(replay_args -runs=0)
  else()
    set(exe fuzz_${name}_replay)
    add_executable(${exe} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${name}.c ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_main.c)
    set(replay_args)
  endif()
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  if(name STREQUAL "config" OR name STREQUAL "kserve")
    # only the server files under test (not the HTTP layer): the codec, shared memory and config.pbtxt
    set(serve ${PROJECT_SOURCE_DIR}/src/serve)
    target_sources(${exe} PRIVATE ${serve}/kserve_codec.c ${serve}/shm.c ${serve}/config_model.c ${serve}/config_text.c)
    target_include_directories(${exe} PRIVATE ${serve})
    target_link_libraries(${exe} PRIVATE cinfer_static PkgConfig::JANSSON Threads::Threads ${MATH_LIBRARY})
  else()
    target_link_libraries(${exe} PRIVATE cinfer_static)
  endif()
  if(name STREQUAL "config")
    target_compile_definitions(${exe} PRIVATE FUZZ_CONFIG_MODEL="${PROJECT_SOURCE_DIR}/examples/models/mlp.onnx")
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND ${exe} ${replay_args} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  # A fuzzed model may declare terabyte tensors: under ASan such allocations fail (NULL) and must be refused.
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS fuzz
                       ENVIRONMENT "ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1")
endforeach()
