# Operations-kit tests (included from tests/CMakeLists.txt), label deploy: deploy/prometheus with promtool and a real
# Prometheus scraping a real server, deploy/k8s and deploy/kserve against the schemas of a pinned Kubernetes release,
# deploy/docker with hadolint and ldd/dpkg, and every metric the kit queries against a real cinfer-server's page (with
# the fake NVML of tests/server, so GPU series exist). Not in sanitizer builds: the checks are about the kit, and the
# package check must see the plain release binaries that the images ship. Tools: scripts/setup.sh --test.
if(TARGET cinfer-server AND TARGET fake_nvml AND NOT CINFER_SANITIZE)
  set(DEPLOY_ENV "${PY_ENV};CINFER_SERVER=$<TARGET_FILE:cinfer-server>;CINFER_FAKE_NVML=$<TARGET_FILE:fake_nvml>")
  if(TARGET cinfer_cuda)
    list(APPEND DEPLOY_ENV "CINFER_CUDA_LIB=$<TARGET_FILE:cinfer_cuda>")
  endif()
  foreach(suite prometheus prometheus_live grafana k8s docker metrics_exported)
    add_test(NAME deploy_${suite}
             COMMAND ${CINFER_PY} -m pytest -q -rs -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/deploy/test_${suite}.py)
    set_tests_properties(deploy_${suite} PROPERTIES LABELS deploy TIMEOUT 600 ENVIRONMENT "${DEPLOY_ENV}")
  endforeach()
endif()
