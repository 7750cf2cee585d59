#!/usr/bin/env bash
# The proxy's load and fault suite at full size, against the real kube-apiserver:
# 1,000 watches while 100 objects change 10 times each, kube-apiserver killed and restarted
# under them, clients that stop reading, 5,000 idle and half-open connections, SIGTERM under
# load. Prints the figures (events compared, connections, peak RSS, CPU seconds, latencies).
#
#   scripts/load.sh                 # release build of the proxy and the driver
#   scripts/load.sh --watches 500   # other sizes: see `kar-load --help`
#   KAR_LOAD_PROFILE=dev scripts/load.sh   # debug builds (faster to build, slower to run)
#
# The short form runs in CI as `cargo test -p kube-api-rewriter-load`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
profile=${KAR_LOAD_PROFILE:-release}
dir=release
[[ $profile == dev ]] && dir=debug
KUBE_BIN_DIR=${KUBE_BIN_DIR:-$(scripts/go-build.sh kubernetes ${KUBE_VERSION:+"$KUBE_VERSION"})}
export KUBE_BIN_DIR
cargo build --locked -j2 --profile "$profile" -p kube-api-rewriter-proxy --bin kube-api-rewriter -p kube-api-rewriter-load --bin kar-load
export KUBE_API_REWRITER_BIN=$PWD/target/$dir/kube-api-rewriter
# The driver holds thousands of sockets: raise the soft open-file limit here too (it also
# raises its own, as the proxy does).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec "target/$dir/kar-load" "$@"
