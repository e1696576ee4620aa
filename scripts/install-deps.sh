#!/bin/bash
# Install exactly what DDSS needs to build, test and run its demos on Debian 12.
# Idempotent: does nothing when everything is present. Needs root (uses sudo if not root).
# The Soft-RoCE guest used by the `rdma` tests installs its own packages (scripts/rxe/setup).
set -euo pipefail
pkgs=(
  build-essential cmake pkg-config   # toolchain
  libibverbs-dev librdmacm-dev       # verbs provider (rdma-core)
  ibverbs-providers rdma-core        # rxe/siw user-space drivers, rdma tool
  libjemalloc-dev                    # the registered pool's allocator
  liburcu-dev                        # lock-free metadata
  libsodium-dev                      # group-secret authentication
  libcurl4-openssl-dev libjson-c-dev # coordinator mode: etcd v3 JSON gateway (src/coord)
  etcd-server etcd-client            # coordinator mode: its tests and ddssrun --coordinator
  libcunit1-dev                      # tests
  python3                            # launcher test helper
  iproute2                           # fault tests: network namespaces (ip netns)
  spin                               # lock protocol model checking
  redis-server libhiredis-dev        # peer benchmark: what users would pick instead
  openmpi-bin libopenmpi-dev         # peer benchmark: MPI one-sided RMA
  gnuplot-nox                        # benchmark plots
  clang                              # libFuzzer targets (scripts/fuzz.sh)
  man-db groff-base mandoc           # manual pages: man -l and mandoc lint (tests/man)
)
if dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
echo "install-deps: installed ${pkgs[*]}"
