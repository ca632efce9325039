/* A stand-in for the NVIDIA driver library (built as fake_libcuda/libcuda.so.1 by tests/CMakeLists.txt): the engine
 * dlopens libcuda.so.1 before it looks for the CUDA module, so test_cuda_module_handshake puts this one on
 * LD_LIBRARY_PATH to reach the module loader on a machine without a driver. Nothing in it is ever called. */
int fake_libcuda_present(void) { return 1; }
