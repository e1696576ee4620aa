# Linking from outside: install this build into a temporary prefix, build
# examples/outside/hello_outside.c against it with find_package(ddss) and with pkg-config,
# and run both under the installed ddssrun (examples/outside/check.sh). Needs every
# installed target built (a full build, as scripts/test.sh makes); SKIP in sanitizer builds.
add_test(NAME outside_link_tcp
  COMMAND sh ${PROJECT_SOURCE_DIR}/examples/outside/check.sh ${CMAKE_BINARY_DIR}
          ${PROJECT_SOURCE_DIR})
set_tests_properties(outside_link_tcp PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "CMAKE=${CMAKE_COMMAND};DDSS_LOG_LEVEL=warn" SKIP_RETURN_CODE 77)
