# Server tests (included from tests/CMakeLists.txt). Label server: pytest drives the real cinfer-server binary
# with tritonclient.http, raw HTTP and perf_analyzer. Label unit: C tests of the config.pbtxt parser, the KServe codec
# and the shared-memory registry.
if(TARGET cinfer-server)
  # A fake NVML (canned values, NOT_SUPPORTED answers, a GPU in MIG mode): test_metrics.py points the server at it
  # with CINFER_NVML_LIBRARY; test_serve_telemetry loads it directly.
  add_library(fake_nvml SHARED server/fake_nvml.c)
  set_target_properties(fake_nvml PROPERTIES OUTPUT_NAME nvidia-ml LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fake_nvml)
  add_executable(test_serve_telemetry server/test_telemetry.c $<TARGET_OBJECTS:cinfer_serve>)
  target_include_directories(test_serve_telemetry PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/serve
                             ${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/unit)
  target_link_libraries(test_serve_telemetry PRIVATE cinfer_shared PkgConfig::MHD PkgConfig::JANSSON PkgConfig::ZLIB
                        Threads::Threads ${MATH_LIBRARY} ${CMAKE_DL_LIBS})
  add_dependencies(test_serve_telemetry fake_nvml)
  add_test(NAME unit_serve_telemetry COMMAND test_serve_telemetry $<TARGET_FILE:fake_nvml>)
  set_tests_properties(unit_serve_telemetry PROPERTIES LABELS unit)

  add_test(NAME server_tests
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server
                   --ignore=${CMAKE_CURRENT_SOURCE_DIR}/server/test_perf_analyzer.py
                   --ignore=${CMAKE_CURRENT_SOURCE_DIR}/server/test_soak.py --ignore=${CMAKE_CURRENT_SOURCE_DIR}/server/test_valgrind.py
                   --ignore=${CMAKE_CURRENT_SOURCE_DIR}/server/test_load_change.py)
  # RUN_SERIAL: the batching tests measure what batches form under concurrency; other suites on the same two cores
  # would starve the client and the server alike and make that measure noise.
  set_tests_properties(server_tests PROPERTIES RUN_SERIAL ON LABELS server TIMEOUT 900
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>;CINFER_FAKE_NVML=$<TARGET_FILE:fake_nvml>")
  # perf_analyzer sweep (installed by scripts/perf_analyzer.sh --install; skipped when missing, except under CI)
  add_test(NAME server_perf_analyzer
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server/test_perf_analyzer.py)
  set_tests_properties(server_perf_analyzer PROPERTIES LABELS server TIMEOUT 300
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>")

  # Load under change (test_load_change.py): a minute of inferences on three models while two threads reload,
  # unload and load them
  add_test(NAME server_load_change
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server/test_load_change.py)
  set_tests_properties(server_load_change PROPERTIES RUN_SERIAL ON LABELS server TIMEOUT 600
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>")

  # Soak (bench/soak/soak.py): perf_analyzer load plus repeated load/unload of a second model; 2 minutes here,
  # 30 s without the RSS bound in the sanitizer build (docs/security.md, bench/BENCHMARKS.md)
  if(CINFER_SANITIZE)
    set(CINFER_SOAK_ENV "CINFER_SOAK_SECONDS=30;CINFER_SOAK_RSS_BOUND_MIB=off")
  else()
    set(CINFER_SOAK_ENV "CINFER_SOAK_SECONDS=120")
  endif()
  add_test(NAME server_soak
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server/test_soak.py)
  set_tests_properties(server_soak PROPERTIES LABELS server TIMEOUT 600
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>;${CINFER_SOAK_ENV}")
  # valgrind memcheck over a short server run: only in a build without sanitizers (they cannot run together)
  if(NOT CINFER_SANITIZE)
    add_test(NAME server_valgrind
             COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server/test_valgrind.py)
    set_tests_properties(server_valgrind PROPERTIES LABELS server TIMEOUT 600
                         ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>")
  endif()

  foreach(module config codec shm batcher)
    add_executable(test_serve_${module} server/test_${module}.c $<TARGET_OBJECTS:cinfer_serve>)
    target_include_directories(test_serve_${module} PRIVATE ${PROJECT_SOURCE_DIR}/src/serve ${PROJECT_SOURCE_DIR}/include
                               ${CMAKE_CURRENT_SOURCE_DIR}/unit)
    target_link_libraries(test_serve_${module} PRIVATE cinfer_shared PkgConfig::MHD PkgConfig::JANSSON PkgConfig::ZLIB
                          Threads::Threads ${MATH_LIBRARY})
    add_test(NAME unit_serve_${module} COMMAND test_serve_${module})
    set_tests_properties(unit_serve_${module} PROPERTIES LABELS unit)
  endforeach()
endif()
