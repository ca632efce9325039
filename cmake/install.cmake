# Install rules: `cmake --install build --prefix P` puts the engine (libcinfer.so and libcinfer.a) in P/lib, its
# header in P/include/cinfer, the cinfer tool and cinfer-server in P/bin, the CUDA module (when built) in P/lib and
# a pkg-config file in P/lib/pkgconfig. The module sits beside libcinfer.so because that is where the engine looks
# for it (src/runtime/device.c); the programs find P/lib through a RUNPATH relative to themselves ($ORIGIN), so
# they run from any prefix without LD_LIBRARY_PATH and the prefix can be moved.
include(GNUInstallDirs)

file(RELATIVE_PATH CINFER_BIN_TO_LIB /${CMAKE_INSTALL_BINDIR} /${CMAKE_INSTALL_LIBDIR})
set(CINFER_PROGRAMS cinfer)
if(TARGET cinfer-server)
  list(APPEND CINFER_PROGRAMS cinfer-server)
endif()
# The OpenBLAS folder stays on every RUNPATH (see CMAKE_INSTALL_RPATH): the OpenMP variant, whatever the system's
# libopenblas.so.0 alternative points to.
set_target_properties(${CINFER_PROGRAMS} PROPERTIES INSTALL_RPATH "$ORIGIN/${CINFER_BIN_TO_LIB};${CMAKE_INSTALL_RPATH}")
install(TARGETS ${CINFER_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cinfer_shared cinfer_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/cinfer/cinfer.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cinfer)
if(TARGET cinfer_cuda)
  # It links no libcinfer (the engine hands it a table at load): the CUDA toolkit's and cuDNN's folders of the build
  # machine, as its BUILD_RPATH has them (elsewhere LD_LIBRARY_PATH finds them, as in the build tree).
  set_target_properties(cinfer_cuda PROPERTIES
                        INSTALL_RPATH "${CMAKE_INSTALL_RPATH};${CUDAToolkit_LIBRARY_DIR};${CUDNN_LIBRARY_DIR}")
  install(TARGETS cinfer_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# pkg-config: Libs for the shared library; Libs.private are what a static link of libcinfer.a adds (pkg-config
# --static): protobuf-c (the ONNX decoder), OpenBLAS's OpenMP variant (pinned by RUNPATH as above), OpenMP, libm,
# libdl, threads. protobuf-c goes in as a flag, not Requires.private, so linking the shared library does not need
# libprotobuf-c-dev's .pc file.
file(RELATIVE_PATH CINFER_PC_PREFIX_FROM_PCDIR /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" CINFER_PC_PREFIX_FROM_PCDIR "${CINFER_PC_PREFIX_FROM_PCDIR}")
get_filename_component(CINFER_OPENBLAS_DIR ${OPENBLAS_LIBRARY} DIRECTORY)
set(CINFER_PC_LIBS_PRIVATE -lprotobuf-c -L${CINFER_OPENBLAS_DIR} -Wl,-rpath,${CINFER_OPENBLAS_DIR} -lopenblas
    ${OpenMP_C_FLAGS} -lm)
foreach(lib ${CMAKE_DL_LIBS})
  list(APPEND CINFER_PC_LIBS_PRIVATE -l${lib})
endforeach()
list(APPEND CINFER_PC_LIBS_PRIVATE -pthread)
list(JOIN CINFER_PC_LIBS_PRIVATE " " CINFER_PC_LIBS_PRIVATE)
configure_file(${CMAKE_CURRENT_LIST_DIR}/cinfer.pc.in ${CMAKE_BINARY_DIR}/cinfer.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cinfer.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
