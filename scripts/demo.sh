#!/bin/bash
# Set up a fresh machine and run the main demo: install dependencies, build, then start
# 4 ranks on this machine over the tcp provider, and measure the transport.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh" >/dev/null
echo "== 4 ranks share a named segment: one put and one get each (tcp provider) =="
"$build/apps/ddssrun" -n 4 --transport tcp "$build/apps/ddss-hello"
echo
echo "== transport latency next to a raw TCP ping-pong, same run =="
"$build/apps/ddssrun" -n 2 --transport tcp "$build/apps/ddss-tp-bench"
echo
echo "== get/put latency next to the raw transport read/write, same run =="
"$build/apps/ddssrun" -n 2 --transport tcp "$build/apps/ddss-seg-bench"
echo
echo "== lock schemes side by side: latency, cascades, throughput under contention =="
"$build/apps/ddssrun" -n 4 --transport tcp "$build/apps/ddss-lock-bench"
echo
echo "== coherence models: put/get latency per model next to raw read/write/atomic (Figure 4a) =="
"$build/apps/ddssrun" -n 2 --transport tcp "$build/apps/ddss-coh-bench"
echo
echo "== daemon mode: a ddssd per node, the same 4-rank demo as its clients =="
"$build/apps/ddssrun" -n 4 --transport tcp --daemon "$build/apps/ddss-hello"
echo
echo "== daemon mode: cost per call against direct mode, same run =="
"$build/apps/ddssrun" -n 2 --transport tcp --daemon "$build/apps/ddss-daemon-bench"
echo
echo "== checkpointing: random checkpoints into delta segments, restarts roll everyone back =="
"$build/apps/ddssrun" -n 4 --transport tcp "$build/apps/checkpoint/ddss-checkpoint"
echo
echo "== reconfiguration: agents move servers between overloaded sites (try_lock, write coherence) =="
"$build/apps/ddssrun" -n 4 --transport tcp "$build/apps/reconfig/ddss-reconfig"
echo
echo "== caching: version-coherence front-end caches vs asking the back-end over TCP (Fig. 5b) =="
"$build/apps/ddssrun" -n 3 --transport tcp "$build/apps/cache/ddss-cache"
