# The peer benchmarks' smoke test (included by tests/CMakeLists.txt): run-peers.sh with few
# iterations. It passes when every program ran and printed its numbers (the targets are
# reported, not asserted), SKIPs (77) when redis-server is not installed, and fails on any
# error. The MPI part is skipped inside the script, with the reason, when mpirun cannot run.
if(TARGET ddss-peers-bench)
  add_test(NAME peers_bench_smoke
    COMMAND ${PROJECT_SOURCE_DIR}/apps/peers/run-peers.sh ${CMAKE_BINARY_DIR} --quick)
  set_tests_properties(peers_bench_smoke PROPERTIES LABELS integration TIMEOUT 180
    ENVIRONMENT "DDSS_LOG_LEVEL=warn;DDSSRUN=$<TARGET_FILE:ddssrun>;PEERS_BENCH=$<TARGET_FILE:ddss-peers-bench>"
    SKIP_RETURN_CODE 77)
  if(TARGET ddss-mpi-bench)
    set_property(TEST peers_bench_smoke APPEND PROPERTY
      ENVIRONMENT "MPI_BENCH=$<TARGET_FILE:ddss-mpi-bench>")
  endif()
endif()
