#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, unit, fixture, property and
# end-to-end tests (the end-to-end ones start a real etcd, kube-apiserver, controller-manager and
# scheduler on loopback through scripts/control-plane.sh; a missing one fails the run, it never
# skips). KUBE_VERSION runs them on another Kubernetes release, built the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
jobs="${CARGO_BUILD_JOBS:-2}"

step() { printf '\n==> %s\n' "$*" >&2; }

step "test tools (curl, openssl, gcc, make and the rest from Debian when missing)"
scripts/test-tools.sh

step "Kubernetes ${KUBE_VERSION:-(pinned release)} and etcd, from Go modules (cached builds)"
KUBE_BIN_DIR="$(scripts/go-build.sh kubernetes ${KUBE_VERSION:+"$KUBE_VERSION"})"
ETCD_BIN="$(scripts/go-build.sh etcd)/etcd"
export KUBE_BIN_DIR ETCD_BIN
"$KUBE_BIN_DIR/kube-apiserver" --version >&2

step "KubeVirt (virt-api, virt-controller, their CRDs and webhooks), kwok and kube-rbac-proxy, from Go modules (cached builds)"
KUBEVIRT_BIN_DIR="$(scripts/go-build.sh kubevirt)"
KWOK_DIR="$(scripts/go-build.sh kwok)"
KUBE_RBAC_PROXY_BIN="$(scripts/go-build.sh kube-rbac-proxy)/kube-rbac-proxy"
export KUBEVIRT_BIN_DIR KWOK_DIR KUBE_RBAC_PROXY_BIN

step "the repository stands alone (nothing refers to the material beside it)"
# Spelled in two pieces so that this line does not match itself.
beside="..""/shared"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  refs=$(git grep -n -F "$beside" -- . || true)
else
  refs=$(grep -rn -F "$beside" --exclude-dir=target --exclude-dir=.git . || true)
fi
if [[ -n $refs ]]; then
  printf '%s\n' "$refs" >&2
  echo "files above refer to $beside; copy what they need into the repository" >&2
  exit 1
fi

step "the docs name paths that exist, no tracker references, a short README"
scripts/check-docs.sh

step "cargo fmt --check"
cargo fmt --all -- --check
cargo fmt --manifest-path examples/kubevirt-operator/Cargo.toml -- --check

step "cargo clippy --all-targets -D warnings"
cargo clippy --locked -j"$jobs" --workspace --all-targets -- -D warnings

step "core builds without tokio, hyper or tower (sans-I/O boundary)"
if cargo tree -p kube-api-rewriter -e normal --prefix none | grep -E '^(tokio|hyper|tower|h2) ' ; then
  echo "the core crate must not depend on an async runtime or HTTP stack" >&2
  exit 1
fi

step "the proxy spells every deadline in one place (rewriter/proxy/src/deadlines.rs)"
# A duration literal anywhere else in the proxy's code (unit tests, at the end of each file
# after `#[cfg(test)]`, aside) is a deadline someone will not find.
literals=$(find rewriter/proxy/src -name '*.rs' ! -path rewriter/proxy/src/deadlines.rs -print0 |
  xargs -0 awk '/^#\[cfg\(test\)\]/ { nextfile }
    /Duration::(from_(secs|millis|micros|nanos|secs_f32|secs_f64|mins|hours)|new)\([[:space:]]*[0-9]/ {
      print FILENAME ":" FNR ": " $0 }')
if [[ -n $literals ]]; then
  printf '%s\n' "$literals" >&2
  echo "the durations above belong in rewriter/proxy/src/deadlines.rs (Deadlines)" >&2
  exit 1
fi

step "modules side by side import no cycle: core, controller, proxy, env (tools/module-cycles)"
# A crate joins by its directory on the last line.
cycles=(--locked -j"$jobs" --manifest-path tools/module-cycles/Cargo.toml --target-dir "${CARGO_TARGET_DIR:-target}")
cargo fmt --manifest-path tools/module-cycles/Cargo.toml -- --check
cargo clippy "${cycles[@]}" --all-targets -- -D warnings
cargo test "${cycles[@]}" -q
cargo run "${cycles[@]}" -q -- rewriter/core controller rewriter/proxy env

step "library crates choose no Kubernetes version; the Layer carries no server stack"
for lib in kube-api-rewriter kube-api-rewriter-layer; do
  if cargo tree -p "$lib" -e normal,build --prefix none | grep -E '^(k8s-openapi|kube|kube-client|hyper|hyper-util|clap|prometheus-client|notify|tracing-subscriber) '; then
    echo "$lib must not depend on the crates above" >&2
    exit 1
  fi
done

step "the TLS crate carries only TLS: no Kubernetes, HTTP or CLI stack"
if cargo tree -p kube-api-rewriter-tls -e normal,build --prefix none | grep -E '^(k8s-openapi|kube|kube-client|hyper|hyper-util|tower|clap|prometheus-client|tracing-subscriber|kube-api-rewriter|kube-api-rewriter-layer) '; then
  echo "kube-api-rewriter-tls must not depend on the crates above" >&2
  exit 1
fi

step "cargo doc (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked -j"$jobs" --workspace --no-deps

step "cargo build --examples (the end-to-end tests run the tower-layer example)"
cargo build --locked -j"$jobs" --workspace --examples

step "cargo test --workspace"
cargo test --locked -j"$jobs" --workspace --all-targets
cargo test --locked -j"$jobs" --workspace --doc

step "differential harness: the proxy against itself (no difference), and without rules (every case showing a renamed name differs)"
cargo build --locked -j"$jobs" -p kube-api-rewriter-testkit --bin sidecar_diff -p kube-api-rewriter-proxy --bin kube-api-rewriter
bin_dir="${CARGO_TARGET_DIR:-target}/debug"
empty_rules="$(mktemp)"
printf 'rules: {}\n' >"$empty_rules"
"$bin_dir/sidecar_diff" --a "$bin_dir/kube-api-rewriter" --b "$bin_dir/kube-api-rewriter" --expect same
"$bin_dir/sidecar_diff" --a "$bin_dir/kube-api-rewriter" --b "$bin_dir/kube-api-rewriter" \
  --b-env "RULES_PATH=$empty_rules" --expect renamed-differ
rm -f "$empty_rules"

step "example operator outside the workspace (its own k8s-openapi version, the Layer by path)"
# Built into the workspace's target directory, so the dependencies both share compile once.
example=(--manifest-path examples/kubevirt-operator/Cargo.toml --target-dir target)
cargo clippy --locked -j"$jobs" "${example[@]}" --all-targets -- -D warnings
cargo test --locked -j"$jobs" "${example[@]}"
