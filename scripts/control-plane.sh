#!/usr/bin/env bash
# Local Kubernetes control plane on 127.0.0.1 only: etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler of one release. Runs `kar-env` (the crate kube-api-rewriter-env, env/),
# built on first use; `scripts/control-plane.sh --help` says more.
#
# Usage:
#   scripts/control-plane.sh up DIR                 start all four, state in DIR
#   scripts/control-plane.sh down DIR               stop them (TERM, then KILL); safe to repeat
#   scripts/control-plane.sh stop-apiserver DIR     stop kube-apiserver only
#   scripts/control-plane.sh start-apiserver DIR    start it again: same port, same flags
#   scripts/control-plane.sh restart-apiserver DIR  stop-apiserver + start-apiserver
#   scripts/control-plane.sh status DIR             print what runs (exit 1 if not all up)
#   scripts/control-plane.sh env DIR                print DIR/env
#
# After `up`, `source DIR/env` exports KUBE_APISERVER_URL, KUBECONFIG, KUBE_BIN_DIR, the PIDs and
# ports, KUBE_CA_FILE, tokens and the front-proxy certificate paths.
#
# Env: KUBE_VERSION, KUBE_BIN_DIR, ETCD_BIN, KAR_READY_TIMEOUT, KAR_STOP_TIMEOUT,
# KAR_APISERVER_EXTRA_ARGS (see --help); CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec cargo run --manifest-path "$ROOT/Cargo.toml" --locked -q -p kube-api-rewriter-env --bin kar-env -- "$@"
