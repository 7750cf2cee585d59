#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, unit, fixture, property and
# end-to-end tests (the end-to-end ones start a real etcd + kube-apiserver on loopback through
# scripts/control-plane.sh; a missing kube-apiserver or etcd fails the run, it never skips).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
jobs="${CARGO_BUILD_JOBS:-2}"

step() { printf '\n==> %s\n' "$*" >&2; }

step "kube-apiserver v1.20.2 (cached build)"
KUBE_APISERVER_BIN="$(scripts/kube-apiserver-build.sh)"
export KUBE_APISERVER_BIN

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -D warnings"
cargo clippy -j"$jobs" --workspace --all-targets -- -D warnings

step "core builds without tokio, hyper or tower (sans-I/O boundary)"
if cargo tree -p kube-api-rewriter -e normal --prefix none | grep -E '^(tokio|hyper|tower|h2) ' ; then
  echo "the core crate must not depend on an async runtime or HTTP stack" >&2
  exit 1
fi

step "cargo build --examples (the end-to-end tests run the tower-layer example)"
cargo build -j"$jobs" --workspace --examples

step "cargo test --workspace"
cargo test -j"$jobs" --workspace --all-targets
cargo test -j"$jobs" --workspace --doc
