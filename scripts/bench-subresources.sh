#!/usr/bin/env bash
# The subresources benchmark (not in CI): in one run, through the whole chain
#   client -> kube-apiserver (aggregator) -> virtualization-api -> rewriter sidecar -> fake virt-api
# and, as the baseline, straight to the TCP echo port the port-forward reaches:
#   1. console round trips of 32 bytes (p50, p99; the fake virt-api echoes the console),
#   2. port-forward throughput (MiB sent and echoed back at once).
# Ratios chain/direct are printed. The system is the demo's (scripts/demo.sh, release build),
# stopped at the end.
#
# Usage: scripts/bench-subresources.sh [ROUNDS (2000)] [MIB (256)]
# Env:   BENCH_DIR (default /tmp/kube-api-rewriter-bench-subresources), DEMO_PROFILE (release)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/kube-api-rewriter-bench-subresources}
trap 'rc=$?; DEMO_DIR=$DIR "$ROOT/scripts/demo.sh" stop; if [[ $rc == 0 ]]; then rm -rf "$DIR"; else echo "logs in $DIR" >&2; fi' EXIT
DEMO_DIR=$DIR DEMO_PROFILE=${DEMO_PROFILE:-release} KEEP=1 DEMO_SETUP_ONLY=1 "$ROOT/scripts/demo.sh" >&2
# shellcheck source=/dev/null
source "$DIR/demo.env"
echo "build: ${DEMO_PROFILE:-release}; $(nproc) CPUs; everything on 127.0.0.1"
"$VM_STREAM" bench "$KUBE_APISERVER_URL" "$KUBE_CA_FILE" "$ADMIN_TOKEN" "$DEMO_NS" "$DEMO_VM" "$ECHO_PORT" \
  "${1:-2000}" "${2:-256}"
