#!/usr/bin/env bash
# The proxy benchmark: one run prints, through the proxy and directly, side by side,
#   1. against the local control plane's kube-apiserver holding 10,000 VMs: LIST, 20,000-event watch;
#   2. against an in-memory upstream double: rewritten LIST MB/s, pass-through ratio, watch
#      events/s, added latency per small GET, the proxy's peak RSS for a 200 MB LIST;
#   3. against a kube-apiserver-like double (one chunk per event, many per write): a 20,000-event
#      watch and a 10,000-VM LIST, proxied vs direct, with the proxy's write syscalls per 1,000
#      events (an extra untimed run under `perf stat`, if perf and the syscall tracepoints are
#      available, splits them into socket writes and eventfd wake-ups and counts the double's
#      socket writes as the direct baseline) and CPU seconds per GB (for the LIST also the
#      client's and the double's, and the least time all that CPU allows on this machine's
#      cores); the delay a lone watch event sees.
# At the end it prints a Markdown report (for scripts/bench-report.sh).
#
# With --peer BIN, another sidecar binary that reads the same environment (KUBECONFIG,
# CLIENT_PROXY_ADDRESS/PORT, MONITORING_BIND_ADDRESS with /readyz or /healthz) runs every
# workload too, in the same run: LIST, watch, pass-through, a ConfigMap LIST the rules leave
# unchanged, small GETs (added median and p99), CPU per GB, peak RSS; a second report
# (report:proxy-peer) puts its figures beside the proxy's, or what it got wrong. The binary is
# the caller's: nothing here builds it.
#
# Usage: scripts/bench-proxy.sh [bench_proxy options]
#   --vms N (10000)  --events N (20000)  --list-mb N (200)  --double-events N (100000)
#   --gets N (2000)  --repeat N (3)  --concurrency N (32)  --skip-double
#   --burst-vms N (10000)  --lone-rounds N (20)  --only list,pass,unchanged,watch,get,burst
#   --peer BIN  --peer-name NAME (peer: the peer column's name, such as its version)
#   --ab-rounds N (or --ab: 10), with --peer: only the interleaved A/B mode (no control plane):
#     N rounds, the first binary alternating, each measuring per binary the CPU seconds per GB
#     of one rewritten --burst-vms LIST and the latency added to a small GET (median of 500 on
#     one keep-alive connection after 100 untimed, minus the same straight to the double); then
#     each round's figures and a table (report:proxy-ab) of the medians, min–max, relative
#     spread (max − min) / median, the difference of the medians in percent and whether it is
#     within max(5%, that spread). E.g. to compare a build with an older one:
#       scripts/bench-proxy.sh --peer /tmp/kar-before --peer-name before --ab-rounds 10
# Env: BENCH_SKIP_APISERVER=1 skips part 1 (no control plane).
#
# Release builds; everything binds 127.0.0.1; the control plane and the proxies it starts are
# stopped at the end. Needs what scripts/control-plane.sh needs, plus kubectl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
cargo build --locked --release -j2 -p kube-api-rewriter-proxy --bin kube-api-rewriter -p kube-api-rewriter-benches --bin bench_proxy >&2
TARGET=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

DIR=$(mktemp -d "${TMPDIR:-/tmp}/kar-bench.XXXXXX")
cleanup() {
  if [[ -f $DIR/state ]]; then
    KAR_STOP_TIMEOUT=2 "$ROOT/scripts/control-plane.sh" down "$DIR" >/dev/null 2>&1 || true
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT

SKIP_APISERVER=${BENCH_SKIP_APISERVER:-0}
for arg in "$@"; do
  case $arg in
    --ab | --ab-rounds) SKIP_APISERVER=1 ;; # the A/B mode measures the doubles only
  esac
done
KC=
if [[ $SKIP_APISERVER != 1 ]]; then
  "$ROOT/scripts/control-plane.sh" up "$DIR" >&2
  KC=$DIR/admin.kubeconfig
  KUBE_VERSION=$(source "$DIR/env" && echo "$KUBE_VERSION")
  export KUBE_VERSION
fi
"$TARGET/release/bench_proxy" \
  --proxy-bin "$TARGET/release/kube-api-rewriter" \
  --kubeconfig "$KC" \
  --crd "${BENCH_CRD:-$ROOT/testdata/kubevirt-crds/original/virtualmachines.yaml}" \
  --work-dir "$DIR" "$@"
