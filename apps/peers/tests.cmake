# The peer benchmarks' smoke test (included by tests/CMakeLists.txt): run-peers.sh with few
# iterations. It passes when every program ran and printed its numbers (the targets are
# reported, not asserted), SKIPs (77) when redis-server is not installed, and fails on any
# error. The MPI part is skipped inside the script, with the reason, when mpirun cannot run.
if(TARGET ddss-peers-bench)
  add_test(NAME peers_bench_smoke
    COMMAND ${PROJECT_SOURCE_DIR}/apps/peers/run-peers.sh ${CMAKE_BINARY_DIR} --quick)
  set_tests_properties(peers_bench_smoke PROPERTIES LABELS integration TIMEOUT 180
    ENVIRONMENT "DDSS_LOG_LEVEL=warn;DDSSRUN=$<TARGET_FILE:ddssrun>;PEERS_BENCH=$<TARGET_FILE:ddss-peers-bench>"
    SKIP_RETURN_CODE 77 RUN_SERIAL TRUE) # it times things and keeps both cores busy: alone
  if(TARGET ddss-mpi-bench)
    set_property(TEST peers_bench_smoke APPEND PROPERTY
      ENVIRONMENT "MPI_BENCH=$<TARGET_FILE:ddss-mpi-bench>")
  endif()
endif()
# The same over verbs (label rdma): DDSS over an RDMA device, or inside the Soft-RoCE guest,
# against Redis on loopback TCP there. SKIPs (77) without a device or guest, or Redis.
if(TARGET ddss-peers-bench AND DDSS_HAVE_VERBS)
  add_test(NAME peers_bench_smoke_verbs
    COMMAND ${DDSS_RDMA_EXEC} ${PROJECT_SOURCE_DIR}/apps/peers/run-peers.sh ${CMAKE_BINARY_DIR}
            --quick --transport verbs)
  set_tests_properties(peers_bench_smoke_verbs PROPERTIES LABELS "rdma" TIMEOUT 300
    ENVIRONMENT "DDSS_LOG_LEVEL=warn" SKIP_RETURN_CODE 77 RESOURCE_LOCK rdma_device)
endif()
