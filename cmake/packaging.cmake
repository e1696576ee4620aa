# Debian packages: `cpack -G DEB` (or plain `cpack`) in a build directory makes three, one
# per install component, installing under /usr:
#   libddss0     (runtime)  libddss.so.<major> and its real file
#   libddss-dev  (dev)      ddss.h, the libddss.so link, ddss.pc, the CMake package, man 3 and 7
#   ddss-tools   (tools)    ddssrun, ddssd, ddss-info, ddss-bench and the programs it runs, man 1
# Installs without a component (the demos in apps/cache, checkpoint, reconfig) go in none.
#
# Dependencies: with dpkg-shlibdeps (dpkg-dev) each package depends on exactly the shared
# libraries its binaries load (libibverbs1 and librdmacm1 only when the verbs provider is
# built; the peer benchmarks add hiredis and Open MPI when they were built); without it,
# on the Debian 12 packages of the libraries this build links. -dev and the tools depend on
# the runtime package of the same version.
#
# Options (cache variables):
#   DDSS_PACKAGE_CONTACT   the Maintainer field
#
# The RPATH of the installed programs is $ORIGIN/../<libdir> (CMakeLists.txt): under /usr it
# points at /usr/<libdir>, where ld.so looks anyway.

set(DDSS_PACKAGE_CONTACT "DDSS maintainers <maintainers@ddss.invalid>" CACHE STRING
    "Maintainer of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddss)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${DDSS_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed data-sharing substrate over RDMA")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
# <name>_<version>_<arch>.deb, the Debian way.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libddss${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libddss-dev)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME ddss-tools)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)

set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "distributed data-sharing substrate over RDMA (shared library)
 DDSS lets the ranks of a group share segments of memory over RDMA (verbs) or TCP,
 with locks and a choice of coherence models. This package holds the library.")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "distributed data-sharing substrate over RDMA (development files)
 The header, the pkg-config file, the CMake package (find_package(ddss)) and the
 manual pages of the API (sections 3 and 7).")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "distributed data-sharing substrate over RDMA (launcher, daemon, tools)
 ddssrun starts the ranks of a group, ddssd is the node daemon of daemon mode,
 ddss-info reports what a host can do and which ranks of a group answer, and
 ddss-bench runs the benchmarks.")

set(ddss_pkg_same "${CPACK_DEBIAN_RUNTIME_PACKAGE_NAME} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${ddss_pkg_same}")
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${ddss_pkg_same}")
# ddss-bench plots with gnuplot; its peers subcommand compares against Redis.
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "gnuplot, redis-server")

find_program(DDSS_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(DDSS_FILE_PROGRAM file)
mark_as_advanced(DDSS_DPKG_SHLIBDEPS DDSS_FILE_PROGRAM)
if(DDSS_DPKG_SHLIBDEPS AND DDSS_FILE_PROGRAM)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # The programs that load libddss.so.N (ddss-hello): dpkg-shlibdeps finds it in the build
  # tree (it is in no installed package yet); the Depends on libddss0 above covers it.
  get_target_property(ddss_lib_dir ddss LIBRARY_OUTPUT_DIRECTORY)
  if(NOT ddss_lib_dir)
    set(ddss_lib_dir ${PROJECT_BINARY_DIR}/src)
  endif()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${ddss_lib_dir})
else()
  # The libraries src/CMakeLists.txt links (ddss_deps), by their Debian 12 packages.
  set(ddss_pkg_libs "libc6, libjemalloc2, liburcu8, libsodium23, libcurl4 (>= 7.66.0), libjson-c5")
  if(DDSS_HAVE_VERBS)
    string(APPEND ddss_pkg_libs ", libibverbs1, librdmacm1")
  endif()
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "${ddss_pkg_libs}")
  # The peer benchmarks (apps/peers), when built, load hiredis and Open MPI too.
  if(TARGET ddss-peers-bench)
    string(APPEND ddss_pkg_libs ", libhiredis0.14")
  endif()
  if(TARGET ddss-mpi-bench)
    string(APPEND ddss_pkg_libs ", libopenmpi3")
  endif()
  set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${ddss_pkg_same}, ${ddss_pkg_libs}")
endif()

include(CPack)
