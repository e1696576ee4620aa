#!/bin/bash
# Build from scratch and run the whole test suite with ctest: unit, integration (multi-rank
# over tcp) and, when an RDMA device or the rxe guest is available, the `rdma` tests.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build-test}
"$top/scripts/install-deps.sh"
rm -rf "$build"
BUILD_DIR=$build "$top/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure --timeout 900
