#!/usr/bin/env bash
# KubeVirt's own components behind kube-api-rewriter sidecars, on a local control plane
# (scripts/control-plane.sh), with kwok simulating the Nodes. Built from Go modules by
# scripts/go-build.sh (kubevirt, kwok).
#
# Usage:
#   scripts/kubevirt.sh up DIR     DIR: a running control plane's directory; state in DIR/kubevirt
#   scripts/kubevirt.sh down DIR   stop what `up` started; safe to repeat
#
# `up` starts, in order:
#   - an admin sidecar (admin's kubeconfig, the KubeVirt rules), through which KubeVirt's CRDs
#     (printed by KubeVirt's own code) are applied, so kube-apiserver stores them renamed;
#   - namespace kubevirt and the KubeVirt CR kubevirt/kubevirt (useEmulation, the HotplugVolumes
#     feature gate), its status.phase Deployed (virt-operator, which would write it, does not run);
#   - kwok with the Nodes node-a and node-b, labelled and sized as virt-launcher Pods ask
#     (the schedulable label as stored under the rules, the devices.kubevirt.io resources);
#   - virt-controller behind a sidecar of its own (it speaks only kubevirt.io).
# Then `source DIR/kubevirt/env` exports KV_KUBECONFIG (admin through the admin sidecar:
# original names), the PIDs, ports and logs, and KUBEVIRT_NODES.
#
# Simulated: the Nodes and the Pods' containers (kwok); virt-handler is not run (it needs libvirt
# and a hypervisor): a test double takes its part where a case needs a VMI to run.
#
# Env:
#   KUBE_API_REWRITER_BIN  the sidecar binary (default: target/debug/kube-api-rewriter, built
#                          with cargo when missing)
#   KUBEVIRT_BIN_DIR       KubeVirt's binaries (default: scripts/go-build.sh kubevirt)
#   KWOK_DIR               kwok and its stages.yaml (default: scripts/go-build.sh kwok)
#   KUBEVIRT_NODE_LABELS   more labels for the Nodes, KEY=VALUE,... (what the VMs select on)
#   KAR_READY_TIMEOUT      seconds to wait for each component (default 60)
#   KAR_STOP_TIMEOUT       seconds between TERM and KILL (default 5)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
READY_TIMEOUT=${KAR_READY_TIMEOUT:-60}
STOP_TIMEOUT=${KAR_STOP_TIMEOUT:-5}
NODES="node-a node-b"
# The names virt-launcher Pods select on, as kube-apiserver stores them under the rules.
SCHEDULABLE_LABEL=kubevirt.internal.virtualization.deckhouse.io/schedulable

log() { printf '[kubevirt %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit 2; }

# shellcheck source=lib/procs.sh
source "$SCRIPT_DIR/lib/procs.sh"

# kubectl_cp ARGS...: kubectl straight to kube-apiserver (admin, stored names)
kubectl_cp() { "$KUBE_BIN_DIR/kubectl" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
# kubectl_kv ARGS...: kubectl through the admin sidecar (original names)
kubectl_kv() { "$KUBE_BIN_DIR/kubectl" --kubeconfig "$KV/admin-sidecar.kubeconfig" "$@"; }

# start_sidecar NAME: a kube-api-rewriter with admin's kubeconfig and the KubeVirt rules on a
# free loopback port; writes KV/NAME.kubeconfig for its client and waits for /readyz.
start_sidecar() {
  local name=$1 port mon i code
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  mon=$(free_port "${TAKEN[@]}"); TAKEN+=("$mon")
  log "starting sidecar $name on 127.0.0.1:$port"
  launch "$KV/$name.pid" "$KV/$name.log" env -u KUBERNETES_SERVICE_HOST \
    "KUBECONFIG=$CP/admin.kubeconfig" "RULES_PATH=$REPO/rules/kubevirt.yaml" \
    CLIENT_PROXY_ADDRESS=127.0.0.1 "CLIENT_PROXY_PORT=$port" \
    "MONITORING_BIND_ADDRESS=127.0.0.1:$mon" LOG_FORMAT=text LOG_LEVEL=info \
    "$REWRITER"
  cat >"$KV/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: sidecar, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: client, user: {}}]
contexts: [{name: sidecar, context: {cluster: sidecar, user: client}}]
current-context: sidecar
EOF
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$mon/readyz" || true)
    [[ $code == 200 ]] && break
    kill -0 "$(read_pid "$KV/$name.pid")" 2>/dev/null || { tail -n 20 "$KV/$name.log" >&2; die "sidecar $name exited"; }
    sleep 0.25
  done
  [[ $code == 200 ]] || die "sidecar $name: /readyz $code after ${READY_TIMEOUT}s"
  printf -v "SIDECAR_PORT_${name//-/_}" '%s' "$port"
  printf -v "SIDECAR_MON_${name//-/_}" '%s' "$mon"
}

apply_crds() {
  "$KUBEVIRT_BIN_DIR/kubevirt-crds" >"$KV/crds.yaml"
  log "applying KubeVirt's $(grep -c '^kind: CustomResourceDefinition' "$KV/crds.yaml") CRDs through the admin sidecar"
  # Server-side: the CRDs are too large for kubectl's last-applied annotation.
  kubectl_kv apply --server-side -f "$KV/crds.yaml" >/dev/null
  kubectl_kv wait --for condition=established --timeout="${READY_TIMEOUT}s" -f "$KV/crds.yaml" >/dev/null
}

create_kubevirt_cr() {
  kubectl_cp get namespace kubevirt >/dev/null 2>&1 || kubectl_cp create namespace kubevirt >/dev/null
  kubectl_kv apply -f - >/dev/null <<'EOF'
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec:
  configuration:
    developerConfiguration:
      useEmulation: true
      featureGates: [HotplugVolumes]
EOF
  kubectl_kv -n kubevirt patch kubevirt kubevirt --subresource=status --type=merge \
    -p '{"status":{"phase":"Deployed"}}' >/dev/null
}

start_kwok() {
  local n i ready
  log "starting kwok with Nodes $NODES"
  launch "$KV/kwok.pid" "$KV/kwok.log" "$KWOK_DIR/kwok" --config "$KWOK_DIR/stages.yaml" \
    --kubeconfig "$CP/admin.kubeconfig" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.0/24 --node-ip=10.244.0.1 \
    "--server-address=127.0.0.1:$(free_port "${TAKEN[@]}")"
  for n in $NODES; do
    kubectl_cp apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: $n, kubernetes.io/os: linux, type: kwok, $SCHEDULABLE_LABEL: "true"}
EOF
    if [[ -n ${KUBEVIRT_NODE_LABELS:-} ]]; then
      # shellcheck disable=SC2086
      kubectl_cp label --overwrite node "$n" ${KUBEVIRT_NODE_LABELS//,/ } >/dev/null
    fi
  done
  # kwok's node stage keeps the status it finds; the capacity is set once kwok has initialised
  # the Node (Ready).
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    ready=$(kubectl_cp get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}')
    [[ $ready == "True True " ]] && break
    kill -0 "$(read_pid "$KV/kwok.pid")" 2>/dev/null || { tail -n 20 "$KV/kwok.log" >&2; die "kwok exited"; }
    sleep 0.25
  done
  [[ $ready == "True True " ]] || die "kwok's Nodes not Ready after ${READY_TIMEOUT}s: ${ready:-none}"
  local res='"cpu":"16","memory":"64Gi","pods":"110","ephemeral-storage":"200Gi","devices.kubevirt.io/kvm":"1k","devices.kubevirt.io/tun":"1k","devices.kubevirt.io/vhost-net":"1k"'
  for n in $NODES; do
    kubectl_cp patch node "$n" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":{$res},\"allocatable\":{$res}}}" >/dev/null
  done
}

start_virt_controller() {
  local port i code
  start_sidecar virt-controller-sidecar
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  log "starting virt-controller"
  : >"$KV/virt-controller.log"
  launch "$KV/virt-controller.pid" "$KV/virt-controller.log" "$KUBEVIRT_BIN_DIR/virt-controller" \
    --kubeconfig "$KV/virt-controller-sidecar.kubeconfig" \
    --launcher-image virt-launcher:simulated --exporter-image virt-exportserver:simulated \
    --listen 127.0.0.1 --port "$port"
  # Its HTTPS endpoints wait for a certificate virt-operator would issue; it is ready once it
  # holds the Lease and has started its controllers (after its informers synced).
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    grep -q 'Starting VirtualMachine controller' "$KV/virt-controller.log" && return 0
    kill -0 "$(read_pid "$KV/virt-controller.pid")" 2>/dev/null || { tail -n 20 "$KV/virt-controller.log" >&2; die "virt-controller exited"; }
    sleep 0.25
  done
  tail -n 20 "$KV/virt-controller.log" >&2
  die "virt-controller started no controllers within ${READY_TIMEOUT}s"
}

write_env() {
  {
    echo "# generated by scripts/kubevirt.sh; source it"
    echo "export KUBEVIRT_DIR=$KV"
    echo "export KUBEVIRT_VERSION=$KUBEVIRT_VERSION"
    echo "export KV_KUBECONFIG=$KV/admin-sidecar.kubeconfig"
    echo "export KUBEVIRT_NODES='$NODES'"
    echo "export VIRT_CONTROLLER_LOG=$KV/virt-controller.log"
    echo "export VIRT_CONTROLLER_SIDECAR_LOG=$KV/virt-controller-sidecar.log"
    echo "export VIRT_CONTROLLER_SIDECAR_PORT=$SIDECAR_PORT_virt_controller_sidecar"
    echo "export ADMIN_SIDECAR_PORT=$SIDECAR_PORT_admin_sidecar"
    local p
    for p in admin-sidecar kwok virt-controller-sidecar virt-controller; do
      echo "export $(echo "${p//-/_}" | tr '[:lower:]' '[:upper:]')_PID=$(read_pid "$KV/$p.pid")"
    done
  } >"$KV/env"
}

cmd_up() {
  CP=$(cd "$1" && pwd)
  [[ -f $CP/env ]] || die "$CP/env not found: start the control plane first (scripts/control-plane.sh up $CP)"
  # shellcheck source=/dev/null
  source "$CP/env"
  KV=$CP/kubevirt
  if [[ -f $KV/env ]]; then
    local p name
    for p in admin-sidecar kwok virt-controller-sidecar virt-controller; do
      name=$p; [[ $p == *-sidecar ]] && name=kube-api-rewriter
      if pid_alive "$(read_pid "$KV/$p.pid")" "$name"; then
        die "KubeVirt in $KV is already running; run '$0 down $CP' first"
      fi
    done
  fi
  mkdir -p "$KV"
  REWRITER=${KUBE_API_REWRITER_BIN:-$REPO/target/debug/kube-api-rewriter}
  if [[ ! -x $REWRITER ]]; then
    log "building kube-api-rewriter"
    (cd "$REPO" && cargo build -q -p kube-api-rewriter-proxy --bin kube-api-rewriter) >&2
  fi
  KUBEVIRT_BIN_DIR=${KUBEVIRT_BIN_DIR:-$("$SCRIPT_DIR/go-build.sh" kubevirt)}
  KWOK_DIR=${KWOK_DIR:-$("$SCRIPT_DIR/go-build.sh" kwok)}
  # go-build.sh names the directory VERSION-HASH.
  KUBEVIRT_VERSION=$(basename "$KUBEVIRT_BIN_DIR"); KUBEVIRT_VERSION=${KUBEVIRT_VERSION%%-*}
  TAKEN=("$APISERVER_PORT")
  local t0=$SECONDS
  start_sidecar admin-sidecar
  apply_crds
  create_kubevirt_cr
  start_kwok
  start_virt_controller
  write_env
  log "up in $(( SECONDS - t0 )) s: KubeVirt $KUBEVIRT_VERSION behind the rewriter; source $KV/env"
}

cmd_down() {
  CP=$(cd "$1" && pwd)
  KV=$CP/kubevirt
  [[ -d $KV ]] || return 0
  stop_pid "$KV/virt-controller.pid" virt-controller
  stop_pid "$KV/kwok.pid" kwok
  stop_pid "$KV/virt-controller-sidecar.pid" kube-api-rewriter
  stop_pid "$KV/admin-sidecar.pid" kube-api-rewriter
}

(( $# == 2 )) || usage
case $1 in
  up) cmd_up "$2" ;;
  down) cmd_down "$2" ;;
  *) usage ;;
esac
