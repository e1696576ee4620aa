# Linking from outside: install this build into a temporary prefix, build
# examples/outside/hello_outside.c against it with find_package(ddss) and with pkg-config,
# and run both under the installed ddssrun (examples/outside/check.sh). Needs every
# installed target built (a full build, as scripts/test.sh makes); SKIP in sanitizer builds.
add_test(NAME outside_link_tcp
  COMMAND sh ${PROJECT_SOURCE_DIR}/examples/outside/check.sh ${CMAKE_BINARY_DIR}
          ${PROJECT_SOURCE_DIR})
# `cmake --install` of one build tree writes its install_manifest.txt: one at a time (the
# lock install_tree, shared with man_install and package_deb) when ctest runs tests in parallel.
set_tests_properties(outside_link_tcp PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "CMAKE=${CMAKE_COMMAND};DDSS_LOG_LEVEL=warn" SKIP_RETURN_CODE 77
  RESOURCE_LOCK install_tree)

# The README's first program (examples/counter.c, target in examples/CMakeLists.txt):
# 3 ranks add 1000 each to one counter under its exclusive lock; rank 1 checks the total
# (3000) and the program fails otherwise. example_counter_installed_tcp builds it the
# README's way for an installed DDSS (cc counter.c $(pkg-config --cflags --libs ddss)) and
# runs it with the installed ddssrun (examples/counter_check.sh; needs a full build, as
# outside_link_tcp does; SKIP in sanitizer builds).
if(TARGET ddss-example-counter)
  ddss_rank_test(NAME example_counter_tcp TARGET ddss-example-counter RANKS 3 TRANSPORT tcp
                 LABELS integration TIMEOUT 30) # ddssrun's limit; ctest's is 30 s later: 60
endif()
add_test(NAME example_counter_installed_tcp
  COMMAND sh ${PROJECT_SOURCE_DIR}/examples/counter_check.sh ${CMAKE_BINARY_DIR}
          ${PROJECT_SOURCE_DIR})
set_tests_properties(example_counter_installed_tcp PROPERTIES LABELS integration TIMEOUT 60
  ENVIRONMENT "CMAKE=${CMAKE_COMMAND};DDSS_LOG_LEVEL=warn" SKIP_RETURN_CODE 77
  RESOURCE_LOCK install_tree)
