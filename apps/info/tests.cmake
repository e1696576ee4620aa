# ddss-info's tests (included by tests/CMakeLists.txt); apps/info/check.sh does the checks.
set(info_check sh ${PROJECT_SOURCE_DIR}/apps/info/check.sh)
# The local report: version, tcp usable, verbs usable or why not (this host's answer).
add_test(NAME info_report COMMAND ${info_check} report $<TARGET_FILE:ddss-info>
         ${PROJECT_VERSION} ${DDSS_HAVE_VERBS})
# The configuration: every DDSS_* variable src/ reads is listed (fails when one is added
# to the library but not to apps/info/info_config.c), with its source and validity.
add_test(NAME info_config_complete COMMAND ${info_check} config $<TARGET_FILE:ddss-info>
         ${PROJECT_SOURCE_DIR})
# --group: three ranks answer; a group with a rank that never starts gives up, bounded.
add_test(NAME info_group_tcp COMMAND ${info_check} group $<TARGET_FILE:ddssrun>
         $<TARGET_FILE:ddss-info> 3 tcp)
add_test(NAME info_group_missing_tcp COMMAND ${info_check} missing $<TARGET_FILE:ddssrun>
         $<TARGET_FILE:ddss-info>)
# --daemon: a daemon's totals count its clients' calls; no daemon, a clear error.
add_test(NAME info_daemon_tcp COMMAND ${info_check} daemon $<TARGET_FILE:ddssrun>
         $<TARGET_FILE:ddss-info> $<TARGET_FILE:ddss-hello>)
set_tests_properties(info_report info_config_complete info_group_tcp info_group_missing_tcp
  info_daemon_tcp PROPERTIES LABELS integration TIMEOUT 60 SKIP_RETURN_CODE 77)
set_tests_properties(info_group_tcp info_group_missing_tcp info_daemon_tcp PROPERTIES
  ENVIRONMENT "DDSS_LOG_LEVEL=warn")
# Next to an RDMA device, or in the Soft-RoCE guest with its two devices: both usable,
# with their capabilities, and --group over verbs across them.
if(DDSS_HAVE_VERBS)
  add_test(NAME info_rdma
    COMMAND ${DDSS_RDMA_EXEC} --two-devices ${info_check} guest $<TARGET_FILE:ddss-info>
            $<TARGET_FILE:ddssrun>)
  # The guest boots in 10 to 40 s (TCG, more on a loaded host); the checks take 10 to 20.
  set_tests_properties(info_rdma PROPERTIES LABELS "rdma" TIMEOUT 150
    ENVIRONMENT "DDSS_LOG_LEVEL=warn" SKIP_RETURN_CODE 77 RESOURCE_LOCK rdma_device)
endif()
