# Server tests (included from tests/CMakeLists.txt). Label server: pytest drives the real cinfer-server binary
# with tritonclient.http and raw HTTP. Label unit: C tests of the config.pbtxt parser and the KServe codec.
if(TARGET cinfer-server)
  add_test(NAME server_tests
           COMMAND ${CINFER_PY} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/server)
  set_tests_properties(server_tests PROPERTIES LABELS server TIMEOUT 900
                       ENVIRONMENT "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>")

  foreach(module config codec)
    add_executable(test_serve_${module} server/test_${module}.c $<TARGET_OBJECTS:cinfer_serve>)
    target_include_directories(test_serve_${module} PRIVATE ${PROJECT_SOURCE_DIR}/src/serve ${PROJECT_SOURCE_DIR}/include
                               ${CMAKE_CURRENT_SOURCE_DIR}/unit)
    target_link_libraries(test_serve_${module} PRIVATE cinfer_shared PkgConfig::MHD PkgConfig::JANSSON PkgConfig::ZLIB
                          Threads::Threads ${MATH_LIBRARY})
    add_test(NAME unit_serve_${module} COMMAND test_serve_${module})
    set_tests_properties(unit_serve_${module} PROPERTIES LABELS unit)
  endforeach()
endif()
