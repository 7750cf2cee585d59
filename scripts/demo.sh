#!/usr/bin/env bash
# The rewriter on an embedded default: a local etcd + kube-apiserver v1.20.2 (127.0.0.1 only),
# the kube-api-rewriter proxy in front of it with the built-in KubeVirt rules, the original
# KubeVirt CRDs and one VirtualMachine applied through the proxy, and the same VM shown both
# ways: through the proxy (kubevirt.io) and straight from kube-apiserver (renamed).
#
# Usage: scripts/demo.sh
# Env:
#   DEMO_DIR   state directory (default /tmp/kube-api-rewriter-demo; wiped at start)
#   KEEP=1     leave the control plane and the proxy running at the end
#   CARGO_BUILD_JOBS  parallel build jobs (default 2)
# On a fresh machine the first run installs etcd/Go from Debian and builds kube-apiserver once
# (cached under ~/.cache/kube-api-rewriter).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${DEMO_DIR:-/tmp/kube-api-rewriter-demo}
CRDS=${DEMO_CRDS:-$ROOT/testdata/kubevirt-crds/original-k8s-1.20}
CP=$ROOT/scripts/control-plane.sh
RENAMED=internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io

"$ROOT/scripts/test-tools.sh"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p i
  for (( i = 0; i < 200; i++ )); do
    p=$(( 33000 + (RANDOM * 32768 + RANDOM) % 7000 ))
    [[ " $* " == *" $p "* ]] && continue
    port_free "$p" && { echo "$p"; return 0; }
  done
  echo "no free port" >&2
  return 1
}

stop_all() {
  if [[ -s $DIR/proxy.pid ]]; then
    local pid
    pid=$(cat "$DIR/proxy.pid")
    if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q kube-api-rewriter; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/proxy.pid"
  fi
  if [[ -f $DIR/state ]]; then "$CP" down "$DIR" >/dev/null 2>&1 || true; fi
}

cleanup() {
  local rc=$?
  if [[ ${KEEP:-0} == 1 && $rc == 0 ]]; then
    return
  fi
  say "stopping the proxy, kube-apiserver and etcd"
  stop_all
  [[ $rc == 0 ]] || echo "demo failed (exit $rc); logs in $DIR" >&2
}

# A previous KEEP=1 run in the same directory: stop it first.
mkdir -p "$DIR"
stop_all
rm -rf "$DIR"
mkdir -p "$DIR"
trap cleanup EXIT

if [[ ! -f $CRDS/virtualmachines.yaml ]]; then
  # No fixtures next to the checkout: an embedded, schema-less VirtualMachine CRD.
  echo "note: $CRDS not found, using an embedded minimal VirtualMachine CRD" >&2
  CRDS=$DIR/crds
  mkdir -p "$CRDS"
  cat >"$CRDS/virtualmachines.yaml" <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: virtualmachines.kubevirt.io
spec:
  group: kubevirt.io
  names: {kind: VirtualMachine, listKind: VirtualMachineList, plural: virtualmachines, singular: virtualmachine,
          shortNames: [vm, vms], categories: [all]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    additionalPrinterColumns:
    - {jsonPath: .metadata.creationTimestamp, name: Age, type: date}
    - {jsonPath: .status.printableStatus, name: Status, type: string}
EOF
fi

say "building kube-api-rewriter"
cargo build -q -j"${CARGO_BUILD_JOBS:-2}" --manifest-path "$ROOT/Cargo.toml" -p kube-api-rewriter-proxy --bin kube-api-rewriter
BIN=$ROOT/target/debug/kube-api-rewriter

say "starting etcd + kube-apiserver v1.20.2 on 127.0.0.1 (state in $DIR)"
"$CP" up "$DIR"
# shellcheck source=/dev/null
source "$DIR/env"
UPSTREAM_KUBECONFIG=$KUBECONFIG

PORT=$(free_port)
MON=$(free_port "$PORT")
say "starting the proxy on http://127.0.0.1:$PORT (metrics/health on 127.0.0.1:$MON)"
CLIENT_PROXY_ADDRESS=127.0.0.1 CLIENT_PROXY_PORT=$PORT MONITORING_BIND_ADDRESS=127.0.0.1:$MON \
  KUBECONFIG=$UPSTREAM_KUBECONFIG LOG_FORMAT=text LOG_LEVEL=info \
  setsid "$BIN" </dev/null >"$DIR/proxy.log" 2>&1 &
echo $! >"$DIR/proxy.pid"
for _ in $(seq 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MON/readyz" || true) == 200 ]] && break
  sleep 0.1
done
cat >"$DIR/proxy.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rewriter
  cluster: {server: "http://127.0.0.1:$PORT"}
users:
- name: rewriter
  user: {}
contexts:
- name: rewriter
  context: {cluster: rewriter, user: rewriter}
current-context: rewriter
EOF
proxy() { KUBECONFIG=$DIR/proxy.kubeconfig kubectl "$@"; }
direct() { KUBECONFIG=$UPSTREAM_KUBECONFIG kubectl "$@"; }

say "applying the original KubeVirt CRDs through the proxy"
for f in virtualmachines virtualmachineinstances kubevirt; do
  if [[ -f $CRDS/$f.yaml ]]; then proxy apply -f "$CRDS/$f.yaml"; fi
done
for _ in $(seq 150); do
  [[ $(proxy get crd virtualmachines.kubevirt.io -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) == True ]] \
    && proxy get vm >/dev/null 2>&1 && break
  sleep 0.2
done

say "applying a kubevirt.io/v1 VirtualMachine through the proxy"
proxy create -f - <<'EOF'
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: demo-vm
  namespace: default
  labels:
    kubevirt.io/created-by: demo
  annotations:
    kubevirt.io/latest-observed-api-version: v1
  finalizers:
  - kubevirt.io/virtualMachineControllerFinalize
spec:
  running: false
  template:
    spec:
      domain:
        devices: {}
        resources: {requests: {memory: 64Mi}}
EOF

say "CRDs: through the proxy | in kube-apiserver"
paste <(proxy get crd -o name | sed 's|.*/||') <(direct get crd -o name | sed 's|.*/||') | column -t -s $'\t'

say "kubectl get vm                      (through the proxy)"
proxy get vm
say "kubectl get $RENAMED   (kube-apiserver directly)"
direct get "$RENAMED"

fields='apiVersion: {.apiVersion}{"\n"}kind: {.kind}{"\n"}labels: {.metadata.labels}{"\n"}annotations: {.metadata.annotations}{"\n"}finalizers: {.metadata.finalizers}{"\n"}'
say "the same VM, key fields side by side"
paste <(printf 'THROUGH THE PROXY (kubevirt.io)\n'; proxy get vm demo-vm -o "jsonpath=$fields") \
      <(printf 'IN KUBE-APISERVER (renamed)\n'; direct get "$RENAMED" demo-vm -o "jsonpath=$fields") |
  awk -F'\t' '{ printf "%-58s | %s\n", $1, $2 }'

# Let the demo VM go away cleanly (no controller runs here to remove its finalizer).
proxy patch vm demo-vm --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null

say "keep using it"
cat <<EOF
  export KUBECONFIG=$DIR/proxy.kubeconfig           # kubectl through the proxy (kubevirt.io names)
  kubectl get vm,vmi -A;  kubectl api-resources --api-group=kubevirt.io
  KUBECONFIG=$UPSTREAM_KUBECONFIG kubectl get $RENAMED -A   # what kube-apiserver holds
  curl -s http://127.0.0.1:$MON/metrics | grep kube_api_rewriter_   # metrics; proxy log: $DIR/proxy.log
EOF
if [[ ${KEEP:-0} == 1 ]]; then
  cat <<EOF
  Left running (KEEP=1). Stop with:
    kill $(cat "$DIR/proxy.pid"); $CP down $DIR
EOF
else
  echo "  (run with KEEP=1 to leave it running)"
fi
