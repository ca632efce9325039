# The inference server: src/serve/*.c (KServe v2 over HTTP, Triton-layout model repository, config.pbtxt parser,
# per-model request queues and instance workers, statistics and Prometheus metrics) built as an object library,
# and the `cinfer-server` executable (tools/cinfer_server.c). It uses only the public C API (cinfer_shared).
# Dependencies are Debian packages found through pkg-config: libmicrohttpd-dev, libjansson-dev, zlib1g-dev.
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd>=0.9.71)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson>=2.11)
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)

# src/telemetry/ (NVML through dlopen, /proc readers) is built into the same object library; the server's
# metrics page is its only user.
file(GLOB CINFER_SERVE_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/serve/*.c ${PROJECT_SOURCE_DIR}/src/telemetry/*.c)
add_library(cinfer_serve OBJECT ${CINFER_SERVE_SOURCES})
target_include_directories(cinfer_serve PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src/serve)
target_include_directories(cinfer_serve PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(cinfer_serve PUBLIC PkgConfig::MHD PkgConfig::JANSSON PkgConfig::ZLIB Threads::Threads ${CMAKE_DL_LIBS})

add_executable(cinfer-server tools/cinfer_server.c $<TARGET_OBJECTS:cinfer_serve>)
target_include_directories(cinfer-server PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src/serve)
target_link_libraries(cinfer-server PRIVATE cinfer_shared PkgConfig::MHD PkgConfig::JANSSON PkgConfig::ZLIB
                      Threads::Threads ${MATH_LIBRARY} ${CMAKE_DL_LIBS})
