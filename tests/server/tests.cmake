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
                   --ignore=${CMAKE_CURRENT_SOURCE_DIR}/server/test_perf_analyzer.py)
  set_tests_properties(server_tests PROPERTIES LABELS server TIMEOUT 900
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>;CINFER_FAKE_NVML=$<TARGET_FILE:fake_nvml>")
  # perf_analyzer sweep (installed by scripts/perf_analyzer.sh --install; skipped when missing, except under CI)
  add_test(NAME server_perf_analyzer
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server/test_perf_analyzer.py)
  set_tests_properties(server_perf_analyzer PROPERTIES LABELS server TIMEOUT 300
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>")

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
