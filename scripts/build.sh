#!/bin/bash
# Configure and build DDSS into ${BUILD_DIR:-build} (extra arguments go to cmake).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
cmake -S "$top" -B "$build" -DDDSS_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
