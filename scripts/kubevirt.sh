#!/usr/bin/env bash
# KubeVirt's own components behind kube-api-rewriter sidecars, on a local control plane
# (scripts/control-plane.sh), with kwok simulating the Nodes. Built from Go modules by
# scripts/go-build.sh (kubevirt, kwok).
#
# Usage:
#   scripts/kubevirt.sh up DIR     DIR: a running control plane's directory; state in DIR/kubevirt
#   scripts/kubevirt.sh install DIR  instead of `up`: virt-operator installs KubeVirt (below)
#   scripts/kubevirt.sh down DIR   stop what `up` or `install` started; safe to repeat
#
# `up` starts, in order:
#   - an admin sidecar (admin's kubeconfig, the KubeVirt rules), through which KubeVirt's CRDs
#     (printed by KubeVirt's own code) are applied, so kube-apiserver stores them renamed;
#   - namespace kubevirt and the KubeVirt CR kubevirt/kubevirt (useEmulation, the HotplugVolumes
#     feature gate), its status.phase Deployed and the default architecture (virt-operator, which
#     would write them, does not run);
#   - kwok with the Nodes node-a and node-b, labelled and sized as virt-launcher Pods ask
#     (the schedulable label as stored under the rules, the devices.kubevirt.io resources);
#   - the service accounts KubeVirt's components run as (kubevirt-controller, kubevirt-apiserver,
#     kubevirt-handler; bound to cluster-admin here, where virt-operator would grant narrower
#     roles): virt-api's admission tells KubeVirt's own components from users by these names (a
#     VMI's status written by anyone else is put back);
#   - virt-api behind a sidecar in webhook mode: its TLS and the kubevirt-ca ConfigMap from a CA of
#     this script's, and virt-api's own webhook configurations (printed by KubeVirt's code)
#     applied through the admin sidecar, pointing at the sidecar's webhook listener, so
#     kube-apiserver sends renamed AdmissionReviews that the sidecar restores for virt-api;
#   - virt-api's subresources.kubevirt.io registered with the aggregator (an APIService, as
#     virt-operator makes), through which virt-controller hot-plugs volumes into instances;
#   - virt-controller behind a sidecar of its own (it speaks only kubevirt.io);
#   - a sidecar as kubevirt-handler for whatever takes virt-handler's part (a test double);
#   - one virt-handler Pod per Node (host network, so kwok gives it the Node's address,
#     127.0.0.1), where virt-api sends what it hands to virt-handler (freeze, unfreeze, ...):
#     virt-api calls https://127.0.0.1:VIRT_HANDLER_PORT with its client certificate, and
#     whatever listens there takes virt-handler's part, serving VIRT_HANDLER_CERT/KEY (CN
#     kubevirt.io:system:node:virt-handler, signed by KubeVirt's CA, as virt-api checks).
# Then `source DIR/kubevirt/env` exports KV_KUBECONFIG (admin through the admin sidecar:
# original names), the PIDs, ports and logs, KUBEVIRT_NODES, VIRT_HANDLER_SIDECAR_PORT (the
# kubevirt-handler sidecar, plain HTTP), and VIRT_API_PORT, VIRT_API_CA_FILE,
# VIRT_API_CLIENT_CERT/KEY (a client certificate of the requestheader CA virt-api trusts, for a
# caller that speaks to virt-api's subresources directly), and VIRT_HANDLER_PORT,
# VIRT_HANDLER_CERT, VIRT_HANDLER_KEY (where virt-api reaches virt-handler, and the
# certificate to serve there).
#
# `install` runs virt-operator the way a cluster does, behind a sidecar of its own (as
# kubevirt-operator): the admin sidecar applies KubeVirt's own CRD only; kwok; virt-operator's
# KubeVirt CR; virt-operator's install-strategy Job, whose command (virt-operator
# --dump-install-strategy, with the Job's environment) this script runs where a kubelet would
# (kwok runs no containers); from the install strategy it wrote, virt-operator creates KubeVirt's CRDs, RBAC,
# certificates, Services, webhook configurations, the APIService, and the Deployments and
# DaemonSet whose Pods kwok runs; `install` returns once the CR reports Deployed. Its webhooks
# and APIService point at Services, which nothing serves here: this control plane then takes no
# KubeVirt objects but the KubeVirt CR's status. `source DIR/kubevirt/env` exports
# KV_KUBECONFIG, VIRT_OPERATOR_LOG, VIRT_OPERATOR_SIDECAR_LOG and the PIDs.
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
COMPONENTS="admin-sidecar kwok virt-api-sidecar virt-api virt-controller-sidecar virt-controller virt-handler-sidecar"
INSTALL_COMPONENTS="admin-sidecar kwok virt-operator-sidecar virt-operator"
# The image virt-operator is told it runs as: its tag is the version it installs, its registry
# that of the images it names (kwok pulls none).
OPERATOR_IMAGE=registry.simulated/kubevirt/virt-operator
# The names virt-launcher Pods select on, as kube-apiserver stores them under the rules (on a
# cluster virt-handler's node labeller sets them): schedulable, and the q35 machine type virt-api
# gives a VM by default.
SCHEDULABLE_LABEL=kubevirt.internal.virtualization.deckhouse.io/schedulable
MACHINE_TYPE_LABEL=machine-type.node.virtualization.deckhouse.io/q35
# This machine's architecture as runtime.GOARCH names it: virt-api's default for VMs.
ARCH=$(uname -m); ARCH=${ARCH/x86_64/amd64}; ARCH=${ARCH/aarch64/arm64}

log() { printf '[kubevirt %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit 2; }

# shellcheck source=lib/procs.sh
source "$SCRIPT_DIR/lib/procs.sh"

# kubectl_cp ARGS...: kubectl straight to kube-apiserver (admin, stored names)
kubectl_cp() { "$KUBE_BIN_DIR/kubectl" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
# kubectl_kv ARGS...: kubectl through the admin sidecar (original names)
kubectl_kv() { "$KUBE_BIN_DIR/kubectl" --kubeconfig "$KV/admin-sidecar.kubeconfig" "$@"; }

# wait_ready NAME CHECK...: runs CHECK every 0.25 s until it succeeds; dies with the tail of
# KV/NAME.log when the process of KV/NAME.pid exits or READY_TIMEOUT passes.
wait_ready() {
  local name=$1 i
  shift
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    "$@" && return 0
    kill -0 "$(read_pid "$KV/$name.pid")" 2>/dev/null || { tail -n 20 "$KV/$name.log" >&2; die "$name exited"; }
    sleep 0.25
  done
  tail -n 20 "$KV/$name.log" >&2
  die "$name not ready within ${READY_TIMEOUT}s"
}

# http_ok URL [CURL_ARGS...]: whether URL answers 200.
http_ok() {
  local url=$1
  shift
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" || true) == 200 ]]
}

# kwok_nodes_ready: whether every Node of kwok's is Ready.
kwok_nodes_ready() {
  [[ $(kubectl_cp get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}') == "True True " ]]
}

# start_sidecar NAME [KUBECONFIG [ENV...]]: a kube-api-rewriter with the KubeVirt rules on a free
# loopback port, upstream as KUBECONFIG's user (default admin), with more environment ENV...;
# writes KV/NAME.kubeconfig for its client and waits for /readyz.
start_sidecar() {
  local name=$1 upstream=${2:-$CP/admin.kubeconfig} port mon
  shift; (( $# )) && shift
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  mon=$(free_port "${TAKEN[@]}"); TAKEN+=("$mon")
  log "starting sidecar $name on 127.0.0.1:$port"
  launch "$KV/$name.pid" "$KV/$name.log" env -u KUBERNETES_SERVICE_HOST "$@" \
    "KUBECONFIG=$upstream" "RULES_PATH=$REPO/rules/kubevirt.yaml" \
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
  wait_ready "$name" http_ok "http://127.0.0.1:$mon/readyz"
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
  # virt-operator would also record the default architecture, which virt-api's VMI admission
  # requires.
  kubectl_kv -n kubevirt patch kubevirt kubevirt --subresource=status --type=merge \
    -p "{\"status\":{\"phase\":\"Deployed\",\"defaultArchitecture\":\"$ARCH\"}}" >/dev/null
}

start_kwok() {
  local n
  log "starting kwok with Nodes $NODES"
  launch "$KV/kwok.pid" "$KV/kwok.log" "$KWOK_DIR/kwok" --config "$KWOK_DIR/stages.yaml" \
    --kubeconfig "$CP/admin.kubeconfig" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.0/24 --node-ip=127.0.0.1 \
    "--server-address=127.0.0.1:$(free_port "${TAKEN[@]}")"
  for n in $NODES; do
    kubectl_cp apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: $n, kubernetes.io/os: linux, kubernetes.io/arch: $ARCH, type: kwok, $SCHEDULABLE_LABEL: "true", $MACHINE_TYPE_LABEL: "true"}
EOF
    if [[ -n ${KUBEVIRT_NODE_LABELS:-} ]]; then
      # shellcheck disable=SC2086
      kubectl_cp label --overwrite node "$n" ${KUBEVIRT_NODE_LABELS//,/ } >/dev/null
    fi
  done
  # kwok's node stage keeps the status it finds; the capacity is set once kwok has initialised
  # the Node (Ready). Large enough for the benchmark's VMs of both modes (half a core each).
  wait_ready kwok kwok_nodes_ready
  local res='"cpu":"1k","memory":"4Ti","pods":"1k","ephemeral-storage":"10Ti","devices.kubevirt.io/kvm":"1k","devices.kubevirt.io/tun":"1k","devices.kubevirt.io/vhost-net":"1k"'
  for n in $NODES; do
    kubectl_cp patch node "$n" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":{$res},\"allocatable\":{$res}}}" >/dev/null
  done
}

# virt_handler_pods: a virt-handler Pod on each Node, as its DaemonSet would make, through the
# admin sidecar (its `kubevirt.io` label stored renamed, as virt-api looks for it). Host network:
# kwok gives it the Node's address, where virt-api calls virt-handler.
virt_handler_pods() {
  local n
  for n in $NODES; do
    kubectl_kv apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: virt-handler-$n
  namespace: kubevirt
  labels: {kubevirt.io: virt-handler}
spec:
  nodeName: $n
  hostNetwork: true
  containers: [{name: virt-handler, image: registry.simulated/kubevirt/virt-handler}]
EOF
  done
}

# service_account NAME: ServiceAccount kubevirt/NAME bound to cluster-admin, and
# KV/NAME.kubeconfig with a token of it (straight to kube-apiserver).
service_account() {
  local sa=$1 token ca
  kubectl_cp -n kubevirt create serviceaccount "$sa" --dry-run=client -o yaml | kubectl_cp apply -f - >/dev/null
  kubectl_cp create clusterrolebinding "kubevirt-$sa" --clusterrole=cluster-admin \
    "--serviceaccount=kubevirt:$sa" --dry-run=client -o yaml | kubectl_cp apply -f - >/dev/null
  token=$(kubectl_cp -n kubevirt create token "$sa" --duration=48h)
  ca=$(base64 -w0 <"$CP/pki/ca.crt")
  cat >"$KV/$sa.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kar-local, cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority-data: $ca}}]
users: [{name: $sa, user: {token: $token}}]
contexts: [{name: $sa, context: {cluster: kar-local, user: $sa}}]
current-context: $sa
EOF
  chmod 600 "$KV/$sa.kubeconfig"
}

# pki: KubeVirt's CA (the kubevirt-ca ConfigMap) and, signed by it, virt-api's serving
# certificate and that of its sidecar's webhook listener (127.0.0.1 and localhost).
pki() {
  local d=$KV/pki name
  mkdir -p "$d"
  if [[ ! -f $d/ca.crt ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=kubevirt-ca \
      -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:virt-api.kubevirt.svc\nextendedKeyUsage=serverAuth,clientAuth\n' >"$d/server.ext"
    for name in virt-api virt-api-webhook virt-handler; do
      local cn=$name.kubevirt.svc
      # virt-api accepts only this name from virt-handler.
      [[ $name == virt-handler ]] && cn=kubevirt.io:system:node:virt-handler
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" \
        -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
      openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 3650 -extfile "$d/server.ext" -out "$d/$name.crt" 2>/dev/null
    done
  fi
}

# kubevirt_ca_configmap: the kubevirt-ca ConfigMap (virt-operator's, where it runs) from pki's CA.
kubevirt_ca_configmap() {
  kubectl_cp -n kubevirt create configmap kubevirt-ca "--from-file=ca-bundle=$KV/pki/ca.crt" \
    --dry-run=client -o yaml | kubectl_cp apply -f - >/dev/null
}

start_virt_api() {
  local port wh
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  wh=$(free_port "${TAKEN[@]}"); TAKEN+=("$wh")
  VIRT_HANDLER_PORT=$(free_port "${TAKEN[@]}"); TAKEN+=("$VIRT_HANDLER_PORT")
  start_sidecar virt-api-sidecar "$KV/kubevirt-apiserver.kubeconfig" \
    "WEBHOOK_ADDRESS=https://127.0.0.1:$port" "WEBHOOK_CA_FILE=$KV/pki/ca.crt" \
    "WEBHOOK_CERT_FILE=$KV/pki/virt-api-webhook.crt" "WEBHOOK_KEY_FILE=$KV/pki/virt-api-webhook.key" \
    WEBHOOK_LISTEN_ADDRESS=127.0.0.1 "WEBHOOK_LISTEN_PORT=$wh"
  log "starting virt-api on 127.0.0.1:$port (its webhooks through the sidecar on 127.0.0.1:$wh)"
  : >"$KV/virt-api.log"
  # The handler certificate is virt-api's client certificate for virt-handler; virt-handler's port
  # (--console-server-port) is where it calls whatever takes virt-handler's part.
  launch "$KV/virt-api.pid" "$KV/virt-api.log" "$KUBEVIRT_BIN_DIR/virt-api" \
    --kubeconfig "$KV/virt-api-sidecar.kubeconfig" --listen 127.0.0.1 --port "$port" \
    --tls-cert-file "$KV/pki/virt-api.crt" --tls-key-file "$KV/pki/virt-api.key" \
    --handler-cert-file "$KV/pki/virt-api.crt" --handler-key-file "$KV/pki/virt-api.key" \
    --console-server-port "$VIRT_HANDLER_PORT" --ca-configmap-name kubevirt-ca
  # It serves TLS once its informers have synced and it holds its certificate.
  wait_ready virt-api http_ok "https://127.0.0.1:$port/apis/subresources.kubevirt.io/v1/healthz" \
    --cacert "$KV/pki/ca.crt"
  VIRT_API_PORT=$port
  VIRT_API_WEBHOOK_PORT=$wh
  "$KUBEVIRT_BIN_DIR/kubevirt-webhooks" -url "https://127.0.0.1:$wh" -ca-bundle "$KV/pki/ca.crt" \
    >"$KV/webhooks.yaml"
  log "applying virt-api's webhook configurations through the admin sidecar"
  kubectl_kv apply -f "$KV/webhooks.yaml" >/dev/null
  register_virt_api "$port"
}

# register_virt_api PORT: virt-api's group subresources.kubevirt.io with kube-apiserver's
# aggregator, as virt-operator registers it (an APIService; its Service here an ExternalName on
# loopback): virt-controller hot-plugs volumes into an instance through it.
register_virt_api() {
  local ca
  ca=$(base64 -w0 <"$KV/pki/ca.crt")
  kubectl_cp apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: virt-api, namespace: kubevirt}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: $1, protocol: TCP, targetPort: $1}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.subresources.kubevirt.io}
spec:
  group: subresources.kubevirt.io
  version: v1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service: {name: virt-api, namespace: kubevirt, port: $1}
  caBundle: $ca
EOF
  wait_ready virt-api apiservice_available v1.subresources.kubevirt.io
}

# apiservice_available NAME: whether the aggregator reports the APIService Available.
apiservice_available() {
  [[ $(kubectl_cp get apiservice "$1" -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null) == True ]]
}

start_virt_controller() {
  local port
  start_sidecar virt-controller-sidecar "$KV/kubevirt-controller.kubeconfig"
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  log "starting virt-controller"
  : >"$KV/virt-controller.log"
  # virt-controller exits when it cannot renew its Lease within the renew deadline (10 s by
  # default), and no kubelet restarts it here: the tests restart kube-apiserver, which takes up
  # to ~20 s on a loaded machine, so its deadline is longer.
  launch "$KV/virt-controller.pid" "$KV/virt-controller.log" "$KUBEVIRT_BIN_DIR/virt-controller" \
    --kubeconfig "$KV/virt-controller-sidecar.kubeconfig" \
    --launcher-image virt-launcher:simulated --exporter-image virt-exportserver:simulated \
    --leader-elect-lease-duration 90s --leader-elect-renew-deadline 60s \
    --listen 127.0.0.1 --port "$port"
  # Its HTTPS endpoints wait for a certificate virt-operator would issue; it is ready once it
  # holds the Lease and has started its controllers (after its informers synced).
  wait_ready virt-controller grep -q 'Starting VirtualMachine controller' "$KV/virt-controller.log"
}

# apply_kubevirt_crd: KubeVirt's own CRD (kubevirts.kubevirt.io), what a cluster applies with
# virt-operator's manifest; virt-operator creates the others.
apply_kubevirt_crd() {
  "$KUBEVIRT_BIN_DIR/kubevirt-crds" | awk '/^---/ { if (keep) print doc; doc = ""; keep = 0; next }
    { doc = doc $0 "\n" } /^  name: kubevirts\.kubevirt\.io$/ { keep = 1 }
    END { if (keep) print doc }' >"$KV/kubevirt-crd.yaml"
  grep -q 'name: kubevirts.kubevirt.io' "$KV/kubevirt-crd.yaml" || die "kubevirt-crds printed no kubevirts.kubevirt.io"
  log "applying KubeVirt's CRD kubevirts.kubevirt.io through the admin sidecar"
  kubectl_kv apply --server-side -f "$KV/kubevirt-crd.yaml" >/dev/null
  kubectl_kv wait --for condition=established --timeout="${READY_TIMEOUT}s" -f "$KV/kubevirt-crd.yaml" >/dev/null
}

# virt-operator's webhook server listens on 127.0.0.1:8444 (its port is fixed).
OPERATOR_WEBHOOK_PORT=8444

start_virt_operator() {
  local port wh
  wh=$(free_port "${TAKEN[@]}"); TAKEN+=("$wh")
  # Webhook mode, as Deckhouse runs it: kube-apiserver's reviews of KubeVirt CRs reach
  # virt-operator through the sidecar. Its listener starts with this script's certificate and
  # serves virt-operator's own once virt-operator has issued it (sync_operator_certificate).
  cp "$KV/pki/virt-api-webhook.crt" "$KV/pki/virt-operator-webhook.crt"
  cp "$KV/pki/virt-api-webhook.key" "$KV/pki/virt-operator-webhook.key"
  start_sidecar virt-operator-sidecar "$KV/kubevirt-operator.kubeconfig" \
    "WEBHOOK_ADDRESS=https://127.0.0.1:$OPERATOR_WEBHOOK_PORT" \
    "WEBHOOK_CERT_FILE=$KV/pki/virt-operator-webhook.crt" "WEBHOOK_KEY_FILE=$KV/pki/virt-operator-webhook.key" \
    WEBHOOK_LISTEN_ADDRESS=127.0.0.1 "WEBHOOK_LISTEN_PORT=$wh"
  OPERATOR_SIDECAR_WEBHOOK_PORT=$wh
  port=$(free_port "${TAKEN[@]}"); TAKEN+=("$port")
  log "starting virt-operator"
  : >"$KV/virt-operator.log"
  launch "$KV/virt-operator.pid" "$KV/virt-operator.log" env -u KUBERNETES_SERVICE_HOST \
    "VIRT_OPERATOR_IMAGE=$OPERATOR_IMAGE:$KUBEVIRT_VERSION" "$KUBEVIRT_BIN_DIR/virt-operator" \
    --kubeconfig "$KV/virt-operator-sidecar.kubeconfig" --listen 127.0.0.1 --port "$port"
  wait_ready virt-operator grep -q 'Started leading' "$KV/virt-operator.log"
}

# operator_certificate: whether virt-operator has made its CA (Secret kubevirt-ca); if so, the
# sidecar's webhook listener gets a certificate for 127.0.0.1 signed by it (the sidecar reloads
# changed files). On a cluster kube-apiserver calls the Service, whose name is in
# virt-operator's own certificate; here it calls the listener's address.
operator_certificate() {
  local d=$KV/pki crt key
  crt=$(kubectl_cp -n kubevirt get secret kubevirt-ca -o jsonpath='{.data.tls\.crt}' 2>/dev/null) || return 1
  key=$(kubectl_cp -n kubevirt get secret kubevirt-ca -o jsonpath='{.data.tls\.key}' 2>/dev/null) || return 1
  [[ -n $crt && -n $key ]] || return 1
  base64 -d <<<"$crt" >"$d/operator-ca.crt"
  base64 -d <<<"$key" >"$d/operator-ca.key"
  openssl x509 -req -in "$d/virt-api-webhook.csr" -CA "$d/operator-ca.crt" -CAkey "$d/operator-ca.key" \
    -CAcreateserial -days 30 -extfile "$d/server.ext" -out "$d/virt-operator-webhook.crt.new" 2>/dev/null
  mv "$d/virt-operator-webhook.crt.new" "$d/virt-operator-webhook.crt"
}

# kubevirt_cr: the KubeVirt CR for `install`, without the common instance types. virt-operator
# points its webhooks at Services;
# its own customizeComponents patches point virt-operator's at the sidecar's webhook listener
# (the caBundle is the kubevirt-ca virt-operator injects).
kubevirt_cr() {
  local base="https://127.0.0.1:$OPERATOR_SIDECAR_WEBHOOK_PORT" i path patch=""
  i=0
  for path in /kubevirt-validate-delete /kubevirt-validate-update /kubevirt-validate-create; do
    patch+="${patch:+,}{\"op\":\"replace\",\"path\":\"/webhooks/$i/clientConfig\",\"value\":{\"url\":\"$base$path\"}}"
    i=$(( i + 1 ))
  done
  cat <<EOF
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: kubevirt}
spec:
  configuration:
    developerConfiguration: {useEmulation: true}
    # virt-api's webhooks review them, and virt-api does not run in this mode.
    commonInstancetypesDeployment: {enabled: false}
  customizeComponents:
    patches:
      - resourceType: ValidatingWebhookConfiguration
        resourceName: virt-operator-validator
        type: json
        patch: '[$patch]'
EOF
}

# install_strategy_job_env: the environment of virt-operator's install-strategy Job, one
# NAME=VALUE a line (read through the admin sidecar: original names); fails until it exists.
install_strategy_job_env() {
  kubectl_kv -n kubevirt get jobs -l kubevirt.io/install-strategy -o \
    jsonpath='{range .items[0].spec.template.spec.containers[0].env[*]}{.name}={.value}{"\n"}{end}' \
    >"$KV/install-strategy-job.env" 2>/dev/null && grep -q '^TARGET_DEPLOYMENT_CONFIG=' "$KV/install-strategy-job.env"
}

# run_install_strategy_job: what the kubelet would run for virt-operator's install-strategy Job
# (kwok runs no containers): its command, virt-operator --dump-install-strategy, with its
# environment, through virt-operator's sidecar; it writes the install strategy ConfigMap.
run_install_strategy_job() {
  local -a jobenv
  wait_ready virt-operator install_strategy_job_env
  mapfile -t jobenv <"$KV/install-strategy-job.env"
  log "running virt-operator's install-strategy Job (virt-operator --dump-install-strategy)"
  env -u KUBERNETES_SERVICE_HOST "${jobenv[@]}" "$KUBEVIRT_BIN_DIR/virt-operator" \
    --kubeconfig "$KV/virt-operator-sidecar.kubeconfig" --dump-install-strategy \
    >"$KV/install-strategy-job.log" 2>&1 \
    || { tail -n 20 "$KV/install-strategy-job.log" >&2; die "the install-strategy Job's command failed"; }
}

# kubevirt_deployed: whether the KubeVirt CR reports Deployed.
kubevirt_deployed() {
  [[ $(kubectl_kv -n kubevirt get kubevirt kubevirt -o jsonpath='{.status.phase}' 2>/dev/null) == Deployed ]]
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
    echo "export VIRT_HANDLER_SIDECAR_PORT=$SIDECAR_PORT_virt_handler_sidecar"
    echo "export VIRT_API_PORT=$VIRT_API_PORT"
    echo "export VIRT_API_WEBHOOK_PORT=$VIRT_API_WEBHOOK_PORT"
    echo "export VIRT_API_SIDECAR_PORT=$SIDECAR_PORT_virt_api_sidecar"
    echo "export VIRT_API_CA_FILE=$KV/pki/ca.crt"
    echo "export VIRT_API_CLIENT_CERT=$FRONT_PROXY_CLIENT_CERT"
    echo "export VIRT_API_CLIENT_KEY=$FRONT_PROXY_CLIENT_KEY"
    echo "export VIRT_API_LOG=$KV/virt-api.log"
    echo "export VIRT_HANDLER_PORT=$VIRT_HANDLER_PORT"
    echo "export VIRT_HANDLER_CERT=$KV/pki/virt-handler.crt"
    echo "export VIRT_HANDLER_KEY=$KV/pki/virt-handler.key"
    echo "export VIRT_API_SIDECAR_LOG=$KV/virt-api-sidecar.log"
    local p
    for p in $COMPONENTS; do
      echo "export $(echo "${p//-/_}" | tr '[:lower:]' '[:upper:]')_PID=$(read_pid "$KV/$p.pid")"
    done
  } >"$KV/env"
}

# prepare DIR: the control plane's env, KV, the binaries; dies when KubeVirt already runs there.
prepare() {
  CP=$(cd "$1" && pwd)
  [[ -f $CP/env ]] || die "$CP/env not found: start the control plane first (scripts/control-plane.sh up $CP)"
  # shellcheck source=/dev/null
  source "$CP/env"
  KV=$CP/kubevirt
  if [[ -f $KV/env ]]; then
    local p name
    for p in $COMPONENTS $INSTALL_COMPONENTS; do
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
    (cd "$REPO" && cargo build --locked -q -p kube-api-rewriter-proxy --bin kube-api-rewriter) >&2
  fi
  KUBEVIRT_BIN_DIR=${KUBEVIRT_BIN_DIR:-$("$SCRIPT_DIR/go-build.sh" kubevirt)}
  KWOK_DIR=${KWOK_DIR:-$("$SCRIPT_DIR/go-build.sh" kwok)}
  # go-build.sh names the directory VERSION-HASH.
  KUBEVIRT_VERSION=$(basename "$KUBEVIRT_BIN_DIR"); KUBEVIRT_VERSION=${KUBEVIRT_VERSION%%-*}
  TAKEN=("$APISERVER_PORT")
}

cmd_up() {
  prepare "$1"
  local t0=$SECONDS
  start_sidecar admin-sidecar
  apply_crds
  create_kubevirt_cr
  start_kwok
  service_account kubevirt-controller
  service_account kubevirt-apiserver
  service_account kubevirt-handler
  pki
  kubevirt_ca_configmap
  start_virt_api
  start_virt_controller
  start_sidecar virt-handler-sidecar "$KV/kubevirt-handler.kubeconfig"
  virt_handler_pods
  write_env
  log "up in $(( SECONDS - t0 )) s: KubeVirt $KUBEVIRT_VERSION behind the rewriter; source $KV/env"
}

cmd_install() {
  prepare "$1"
  local t0=$SECONDS p
  start_sidecar admin-sidecar
  apply_kubevirt_crd
  # The rest of what virt-operator's release manifest holds besides its own Deployment and RBAC
  # (its ServiceAccount is bound to cluster-admin here).
  kubectl_kv apply -f - >/dev/null <<'EOF'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: kubevirt-cluster-critical}
value: 1000000000
globalDefault: false
description: "This priority class should be used for core kubevirt components only."
EOF
  kubectl_cp get namespace kubevirt >/dev/null 2>&1 || kubectl_cp create namespace kubevirt >/dev/null
  start_kwok
  # virt-operator places its Job and KubeVirt's Deployments on control-plane Nodes.
  kubectl_cp label --overwrite node node-a node-role.kubernetes.io/control-plane= >/dev/null
  service_account kubevirt-operator
  pki
  start_virt_operator
  log "creating the KubeVirt CR; virt-operator installs KubeVirt"
  kubevirt_cr | kubectl_kv apply -f - >/dev/null
  run_install_strategy_job
  wait_ready virt-operator operator_certificate
  READY_TIMEOUT=$(( READY_TIMEOUT * 3 )) wait_ready virt-operator kubevirt_deployed
  {
    echo "# generated by scripts/kubevirt.sh install; source it"
    echo "export KUBEVIRT_DIR=$KV"
    echo "export KUBEVIRT_VERSION=$KUBEVIRT_VERSION"
    echo "export KV_KUBECONFIG=$KV/admin-sidecar.kubeconfig"
    echo "export KUBEVIRT_NODES='$NODES'"
    echo "export VIRT_OPERATOR_LOG=$KV/virt-operator.log"
    echo "export VIRT_OPERATOR_SIDECAR_LOG=$KV/virt-operator-sidecar.log"
    for p in $INSTALL_COMPONENTS; do
      echo "export $(echo "${p//-/_}" | tr '[:lower:]' '[:upper:]')_PID=$(read_pid "$KV/$p.pid")"
    done
  } >"$KV/env"
  log "installed in $(( SECONDS - t0 )) s: virt-operator reports KubeVirt $KUBEVIRT_VERSION Deployed; source $KV/env"
}

cmd_down() {
  CP=$(cd "$1" && pwd)
  KV=$CP/kubevirt
  [[ -d $KV ]] || return 0
  # virt-api's webhooks fail closed: they go with it, so the control plane stays usable.
  if [[ -f $KV/webhooks.yaml && -f $CP/env ]]; then
    # shellcheck source=/dev/null
    source "$CP/env"
    kubectl_cp delete --ignore-not-found --wait=false -f "$KV/webhooks.yaml" >/dev/null 2>&1 || true
    kubectl_cp delete --ignore-not-found --wait=false apiservice v1.subresources.kubevirt.io >/dev/null 2>&1 || true
  fi
  stop_pid "$KV/virt-operator.pid" virt-operator
  stop_pid "$KV/virt-operator-sidecar.pid" kube-api-rewriter
  stop_pid "$KV/virt-handler-sidecar.pid" kube-api-rewriter
  stop_pid "$KV/virt-controller.pid" virt-controller
  stop_pid "$KV/virt-api.pid" virt-api
  stop_pid "$KV/virt-api-sidecar.pid" kube-api-rewriter
  stop_pid "$KV/kwok.pid" kwok
  stop_pid "$KV/virt-controller-sidecar.pid" kube-api-rewriter
  stop_pid "$KV/admin-sidecar.pid" kube-api-rewriter
}

(( $# == 2 )) || usage
case $1 in
  up) cmd_up "$2" ;;
  install) cmd_install "$2" ;;
  down) cmd_down "$2" ;;
  *) usage ;;
esac
