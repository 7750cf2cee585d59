#!/usr/bin/env bash
# The whole system on an embedded control plane: a local etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (127.0.0.1 only) and, around it,
#   - virtualization-controller behind its kube-api-rewriter sidecar (KubeVirt's names renamed),
#   - KubeVirt's own virt-controller and virt-api, each behind its own rewriter sidecar (virt-api's
#     in webhook mode: it reviews every VM and VMI), on Nodes kwok simulates (scripts/kubevirt.sh),
#     with a virt-handler double starting the instances (no hypervisor),
#   - virtualization-api registered with the aggregator, reaching a FAKE virt-api (test double)
#     for the console and freeze, which need virt-handler, through its rewriter sidecar
#     (rules/virtualization-api.yaml: mutual TLS, its identity).
# A VirtualMachine is applied with kubectl and shown Running; its serial console is opened
# through kube-apiserver (typed into, the echo read back); it is frozen and unfrozen; then what
# each hop saw is printed. Simulated, and said on screen: the Nodes and Pods (kwok), virt-handler
# and, for the console and freeze, virt-api (test doubles).
#
# Usage: scripts/demo.sh            run the demo (stops everything at the end unless KEEP=1)
#        scripts/demo.sh stop       stop what a KEEP=1 run left
# Env:
#   DEMO_DIR      state directory (default /tmp/kube-api-rewriter-demo; wiped at start)
#   KEEP=1        leave everything running at the end ($DEMO_DIR/demo.env describes it)
#   DEMO_PROFILE  debug (default) or release
#   CARGO_BUILD_JOBS  parallel build jobs (default 2)
# On a fresh machine the first run builds Kubernetes, etcd, KubeVirt and kwok from Go modules once
# (scripts/go-build.sh, cached under ~/.cache/kube-api-rewriter), then the binaries with cargo;
# README.md says how long the first and later runs take. State and logs: $DEMO_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${DEMO_DIR:-/tmp/kube-api-rewriter-demo}
CP=$ROOT/scripts/control-plane.sh
PROFILE=${DEMO_PROFILE:-debug}
JOBS=${CARGO_BUILD_JOBS:-2}
SA=system:serviceaccount:d8-virtualization:virtualization-api
GROUP_PATH=/apis/subresources.virtualization.deckhouse.io/v1alpha2

# Bold headings on a terminal only: a log file gets plain text.
if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
note() { printf '   %s\n' "$*"; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_port EXCLUDED...: a free loopback port, not one of EXCLUDED (chosen, not yet bound), in
# 20000-32767: below the kernel's ephemeral range, so no outgoing connection takes it meanwhile.
free_port() {
  local p i
  for (( i = 0; i < 200; i++ )); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12768 ))
    [[ " $* " == *" $p "* ]] && continue
    port_free "$p" && { echo "$p"; return 0; }
  done
  echo "no free port" >&2
  return 1
}

stop_all() {
  if [[ -s $DIR/pids ]]; then
    local pid
    while read -r pid; do
      kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
    done <"$DIR/pids"
    for _ in $(seq 50); do
      local alive=0
      while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$DIR/pids"
      (( alive )) || break
      sleep 0.1
    done
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$DIR/pids"
    rm -f "$DIR/pids"
  fi
  if [[ -d $DIR/kubevirt ]]; then "$ROOT/scripts/kubevirt.sh" down "$DIR" >/dev/null 2>&1 || true; fi
  if [[ -f $DIR/state ]]; then "$CP" down "$DIR" >/dev/null 2>&1 || true; fi
}

if [[ ${1:-} == stop ]]; then
  stop_all
  exit 0
fi

cleanup() {
  local rc=$?
  if [[ ${KEEP:-0} == 1 && $rc == 0 ]]; then
    return
  fi
  say "stopping everything"
  stop_all
  [[ $rc == 0 ]] || echo "demo failed (exit $rc); logs in $DIR" >&2
}

mkdir -p "$DIR"
stop_all
rm -rf "$DIR"
mkdir -p "$DIR/pki"
trap cleanup EXIT

"$ROOT/scripts/test-tools.sh"

say "building the rewriter, virtualization-controller, virtualization-api and the doubles ($PROFILE)"
rel=()
[[ $PROFILE == release ]] && rel=(--release)
cargo build --locked -q -j"$JOBS" "${rel[@]}" --manifest-path "$ROOT/Cargo.toml" \
  -p kube-api-rewriter-proxy --bin kube-api-rewriter \
  -p virtualization-api --bin virtualization-api --example fake_virt_api --example vm_stream
cargo build --locked -q -j"$JOBS" "${rel[@]}" --manifest-path "$ROOT/Cargo.toml" \
  -p virtualization-controller --bin virtualization-controller --example virt_handler_double
TARGET=$(cargo metadata -q --format-version 1 --no-deps --manifest-path "$ROOT/Cargo.toml" |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN=$TARGET/$PROFILE
EX=$BIN/examples

say "starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 (state in $DIR)"
"$CP" up "$DIR"
# shellcheck source=/dev/null
source "$DIR/env"
ADMIN_KUBECONFIG=$KUBECONFIG
# The release's own kubectl, built beside the control plane.
export PATH=$KUBE_BIN_DIR:$PATH
k() { KUBECONFIG=$ADMIN_KUBECONFIG kubectl "$@"; }

# run NAME CMD...: start in its own session, output to $DIR/NAME.log, pid recorded.
run() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$DIR/$name.log" 2>&1 &
  echo $! >>"$DIR/pids"
}

wait_http() { # wait_http URL WHAT (up to 2 minutes: a loaded machine starts things slowly)
  for _ in $(seq 1200); do
    [[ $(curl -sk -o /dev/null -w '%{http_code}' "$1" || true) == 200 ]] && return 0
    sleep 0.1
  done
  echo "$2 did not get ready ($1); see $DIR" >&2
  return 1
}

# rewriter NAME KUBECONFIG [VAR=VALUE...]: a kube-api-rewriter sidecar; sets NAME_PORT.
rewriter() {
  local name=$1 kc=$2 port mon
  shift 2
  port=$(free_port)
  mon=$(free_port "$port")
  run "$name" env CLIENT_PROXY_ADDRESS=127.0.0.1 CLIENT_PROXY_PORT="$port" \
    MONITORING_BIND_ADDRESS="127.0.0.1:$mon" KUBECONFIG="$kc" LOG_FORMAT=text LOG_LEVEL=info \
    "$@" "$BIN/kube-api-rewriter"
  wait_http "http://127.0.0.1:$mon/readyz" "rewriter $name"
  printf -v "${name//-/_}_PORT" '%s' "$port"
  cat >"$DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: p, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: u, user: {}}]
contexts: [{name: p, context: {cluster: p, user: u}}]
current-context: p
EOF
}

say "KubeVirt: its CRDs through a rewriter (stored renamed), virt-controller and virt-api behind their own"
note "(simulated: kwok's Nodes and Pods, a virt-handler double and, below for the console, a FAKE virt-api)"
KUBE_API_REWRITER_BIN=$BIN/kube-api-rewriter "$ROOT/scripts/kubevirt.sh" up "$DIR" 2>&1 | sed 's/^/   /'
# shellcheck source=/dev/null
source "$DIR/kubevirt/env"
kv() { KUBECONFIG=$KV_KUBECONFIG kubectl "$@"; }
run virt-handler-double "$EX/virt_handler_double" "http://127.0.0.1:$VIRT_HANDLER_SIDECAR_PORT"
note "virt-controller $KUBEVIRT_VERSION -> rewriter :$VIRT_CONTROLLER_SIDECAR_PORT -> kube-apiserver; Nodes $KUBEVIRT_NODES (kwok)"
note "kube-apiserver -> rewriter :$VIRT_API_WEBHOOK_PORT (webhooks) -> virt-api $KUBEVIRT_VERSION :$VIRT_API_PORT -> rewriter :$VIRT_API_SIDECAR_PORT"

say "virtualization-controller behind its rewriter sidecar"
k apply -f "$ROOT/controller/crds" >/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=virtualization-controller \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$DIR/pki/webhook.key" -out "$DIR/pki/webhook.crt" 2>/dev/null
rewriter controller-sidecar "$ADMIN_KUBECONFIG"
HP=$(free_port)
MP=$(free_port "$HP")
WP=$(free_port "$HP" "$MP")
run virtualization-controller env KUBECONFIG="$DIR/controller-sidecar.kubeconfig" \
  HEALTH_PROBE_BIND_ADDRESS=127.0.0.1:"$HP" METRICS_BIND_ADDRESS=127.0.0.1:"$MP" \
  WEBHOOK_BIND_ADDRESS=127.0.0.1:"$WP" WEBHOOK_CERT_FILE="$DIR/pki/webhook.crt" \
  WEBHOOK_KEY_FILE="$DIR/pki/webhook.key" LOG_LEVEL=info "$BIN/virtualization-controller"
wait_http "http://127.0.0.1:$HP/readyz" virtualization-controller
note "virtualization-controller -> rewriter :$controller_sidecar_PORT -> kube-apiserver"
# This control plane has no CSI snapshot CRDs: an optional API, said once in the log.
for _ in $(seq 50); do grep -q 'optional API not served' "$DIR/virtualization-controller.log" && break; sleep 0.1; done
note "optional APIs not served here (everything else runs; what waits is said in its conditions):"
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" <<<"$2"; }
grep 'optional API not served' "$DIR/virtualization-controller.log" | while read -r line; do
  note "   $(field resource "$line").$(field group "$line"): $(field message "$line" | sed 's/^optional API not served: //')"
done

say "virtualization-api, registered with the aggregator, reaching the FAKE virt-api through its rewriter"
P=$DIR/pki
ca() { openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$1" -keyout "$P/$1.key" -out "$P/$1.crt" 2>/dev/null; }
cert() { # cert NAME CN CA SAN
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$P/$1.key" -out "$P/$1.csr" 2>/dev/null
  printf '%s\n' "${4:+subjectAltName=$4}" "extendedKeyUsage=serverAuth,clientAuth" >"$P/$1.ext"
  openssl x509 -req -in "$P/$1.csr" -CA "$P/$3.crt" -CAkey "$P/$3.key" -CAcreateserial -days 1 \
    -extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
}
ca virtualization-ca
ca kubevirt-ca
cert serving virtualization-api virtualization-ca "DNS:virtualization-api.d8-virtualization.svc,DNS:localhost,IP:127.0.0.1"
cert proxy virtualization-api-proxy virtualization-ca ""
cert virt-api virt-api kubevirt-ca "DNS:localhost,IP:127.0.0.1"
run fake-virt-api "$EX/fake_virt_api" "$P/virt-api.crt" "$P/virt-api.key" "$P/virtualization-ca.crt" "$SA"
for _ in $(seq 100); do grep -q '^port=' "$DIR/fake-virt-api.log" 2>/dev/null && break; sleep 0.1; done
read -r VA_PORT ECHO_PORT < <(sed -n 's/^port=\([0-9]*\) echo_port=\([0-9]*\)$/\1 \2/p' "$DIR/fake-virt-api.log")
note "FAKE virt-api (test double) on https://localhost:$VA_PORT: mutual TLS, checks X-Remote-*, echoes the console"
cat >"$DIR/virt-api.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: virt-api, cluster: {server: "https://localhost:$VA_PORT", certificate-authority: "$P/kubevirt-ca.crt"}}]
users: [{name: proxy, user: {client-certificate: "$P/proxy.crt", client-key: "$P/proxy.key"}}]
contexts: [{name: c, context: {cluster: virt-api, user: proxy}}]
current-context: c
EOF
rewriter virt-api-sidecar "$DIR/virt-api.kubeconfig" RULES_PATH="$ROOT/rules/virtualization-api.yaml" \
  REMOTE_USER="$SA" REMOTE_GROUPS=system:serviceaccounts LOG_LEVEL=debug
note "rewriter :$virt_api_sidecar_PORT -> virt-api (ready: it follows virt-api's /readyz)"
k create namespace d8-virtualization >/dev/null
k apply -f "$ROOT/apiserver/deploy/serviceaccount.yaml" -f "$ROOT/apiserver/deploy/rbac.yaml" >/dev/null
TOKEN=$(k -n d8-virtualization create token virtualization-api --duration=2h)
cat >"$DIR/virtualization-api.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$KUBE_APISERVER_URL", certificate-authority: "$KUBE_CA_FILE"}}]
users: [{name: sa, user: {token: "$TOKEN"}}]
contexts: [{name: c, context: {cluster: c, user: sa}}]
current-context: c
EOF
API_PORT=$(free_port)
run virtualization-api env -u KUBERNETES_SERVICE_HOST KUBECONFIG="$DIR/virtualization-api.kubeconfig" RUST_LOG=info \
  "$BIN/virtualization-api" --bind-address=127.0.0.1 --secure-port="$API_PORT" \
  --tls-cert-file="$P/serving.crt" --tls-private-key-file="$P/serving.key" \
  --kubevirt-endpoint="http://127.0.0.1:$virt_api_sidecar_PORT"
wait_http "https://127.0.0.1:$API_PORT/readyz" virtualization-api
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: virtualization-api, namespace: d8-virtualization}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: $API_PORT, protocol: TCP, targetPort: $API_PORT}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha2.subresources.virtualization.deckhouse.io}
spec:
  group: subresources.virtualization.deckhouse.io
  version: v1alpha2
  groupPriorityMinimum: 999
  versionPriority: 15
  service: {name: virtualization-api, namespace: d8-virtualization, port: $API_PORT}
  caBundle: $(base64 -w0 "$P/virtualization-ca.crt")
EOF
for _ in $(seq 300); do k get --raw "$GROUP_PATH" >/dev/null 2>&1 && break; sleep 0.2; done
k get --raw "$GROUP_PATH" >/dev/null
note "kube-apiserver (aggregator) -> virtualization-api :$API_PORT -> rewriter :$virt_api_sidecar_PORT -> FAKE virt-api :$VA_PORT"
k get apiservice v1alpha2.subresources.virtualization.deckhouse.io

say "kubectl apply: a VirtualMachine"
k create namespace demo >/dev/null
k apply -f - <<'EOF'
apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachine
metadata: {name: demo-vm, namespace: demo}
spec:
  runPolicy: AlwaysOn
  cpu: {cores: 1, coreFraction: "50%"}
  memory: {size: 1Gi}
EOF
VM=virtualmachines.virtualization.deckhouse.io
for _ in $(seq 300); do
  [[ $(k -n demo get $VM demo-vm -o 'jsonpath={.status.phase}' 2>/dev/null) == Running ]] && break
  sleep 0.2
done
k -n demo get $VM demo-vm
note "what virt-controller sees, through its rewriter (KubeVirt's names):"
kv -n demo get vm,vmi,pods -o wide 2>&1 | sed 's/^/   /'
note "what kube-apiserver stores (renamed):"
k -n demo get internalvirtualizationvirtualmachineinstances.internal.virtualization.deckhouse.io 2>&1 | sed 's/^/   /'
[[ $(k -n demo get $VM demo-vm -o 'jsonpath={.status.phase}') == Running ]]

cat >"$DIR/demo.env" <<EOF
export KUBE_APISERVER_URL=$KUBE_APISERVER_URL KUBE_CA_FILE=$KUBE_CA_FILE ADMIN_TOKEN=$ADMIN_TOKEN
export DEMO_NS=demo DEMO_VM=demo-vm ECHO_PORT=$ECHO_PORT VM_STREAM=$EX/vm_stream
EOF
if [[ ${DEMO_SETUP_ONLY:-0} == 1 ]]; then exit 0; fi

say "typing into its serial console through kube-apiserver (WebSocket, plain.kubevirt.io)"
"$EX/vm_stream" console "$KUBE_APISERVER_URL" "$KUBE_CA_FILE" "$ADMIN_TOKEN" demo demo-vm "hello, demo-vm"
note "(the FAKE virt-api echoes the console: a real VM's serial console answers instead)"

say "freeze and unfreeze its filesystems"
echo '{}' >"$DIR/empty.json"
k replace --raw "$GROUP_PATH/namespaces/demo/virtualmachines/demo-vm/freeze?unfreezeTimeout=1m" -f "$DIR/empty.json" >/dev/null
echo "   frozen   (kubectl replace --raw .../virtualmachines/demo-vm/freeze?unfreezeTimeout=1m)"
k replace --raw "$GROUP_PATH/namespaces/demo/virtualmachines/demo-vm/unfreeze" -f "$DIR/empty.json" >/dev/null
echo "   unfrozen (kubectl replace --raw .../virtualmachines/demo-vm/unfreeze)"

sleep 0.5
say "what each hop saw"
note "1. kube-apiserver: the user admin (token), the aggregator forwards to virtualization-api"
note "2. virtualization-api (user from the front-proxy headers, SubjectAccessReview, VM phase):"
grep -E 'demo-vm/(console|freeze|unfreeze)' "$DIR/virtualization-api.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^.*(method=)/      \1/'
note "3. the rewriter sidecar (our group in, virt-api's out; identity set by it):"
grep -E 'demo-vm/(console|freeze|unfreeze)' "$DIR/virt-api-sidecar.log" | grep -v 'upgraded connection' |
  sed -E 's/^.*(method=)/      \1/' | head -6
note "4. the FAKE virt-api (test double):"
grep 'fake virt-api saw' "$DIR/fake-virt-api.log" | sed 's/^/      /'

say "keep using it"
cat <<EOF
  export KUBECONFIG=$ADMIN_KUBECONFIG
  kubectl -n demo get $VM;  kubectl get --raw $GROUP_PATH
  logs: $DIR/*.log
EOF
if [[ ${KEEP:-0} == 1 ]]; then
  echo "  Left running (KEEP=1). Stop with: DEMO_DIR=$DIR $0 stop"
else
  echo "  (run with KEEP=1 to leave it running)"
fi
