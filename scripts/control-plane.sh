#!/usr/bin/env bash
# Local Kubernetes control plane on 127.0.0.1 only: etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler of one release, built from Go modules by scripts/go-build.sh.
#
# Usage:
#   scripts/control-plane.sh up DIR                 start all four, state in DIR
#   scripts/control-plane.sh down DIR               stop them (TERM, then KILL); safe to repeat
#   scripts/control-plane.sh stop-apiserver DIR     stop kube-apiserver only
#   scripts/control-plane.sh start-apiserver DIR    start it again: same port, same flags
#   scripts/control-plane.sh restart-apiserver DIR  stop-apiserver + start-apiserver
#   scripts/control-plane.sh status DIR             print what runs (exit 1 if not all up)
#
# After `up`, `source DIR/env` exports KUBE_APISERVER_URL, KUBECONFIG (DIR/admin.kubeconfig),
# KUBE_BIN_DIR (the release's kubectl is KUBE_BIN_DIR/kubectl), the PIDs and ports, KUBE_CA_FILE,
# tokens and the front-proxy certificate paths. `up` returns once kube-apiserver is ready, the
# controller-manager and scheduler are healthy, and the controller-manager has created the
# `default` ServiceAccount of namespace `default`.
# Users (token file): admin/admintoken (group system:masters), user1/usertoken (no groups); the
# controller-manager and scheduler have their own users (system:kube-controller-manager,
# system:kube-scheduler), so RBAC's bootstrap roles apply to them as in a cluster.
#
# Env:
#   KUBE_VERSION             Kubernetes release (default: the one tools/go/kubernetes pins)
#   KUBE_BIN_DIR             a directory with the four Kubernetes binaries (default: go-build.sh)
#   ETCD_BIN                 etcd binary (default: built by go-build.sh)
#   KAR_READY_TIMEOUT        seconds to wait for each component (default 60)
#   KAR_STOP_TIMEOUT         seconds between TERM and KILL (default 5; 0 = KILL at once). kube-apiserver
#                            with open watches does not exit on TERM (waits ~60 s), so it gets KILLed.
#   KAR_APISERVER_EXTRA_ARGS extra kube-apiserver flags (whitespace-separated), saved at `up`
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
READY_TIMEOUT=${KAR_READY_TIMEOUT:-60}
STOP_TIMEOUT=${KAR_STOP_TIMEOUT:-5}
ADMIN_TOKEN=admintoken
USER1_TOKEN=usertoken
KCM_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
SCHEDULER_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

log() { printf '[control-plane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit 2; }

# ---------------------------------------------------------------- helpers
ensure_tools() {
  local missing=()
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  if (( ${#missing[@]} > 0 )); then
    log "installing ${missing[*]}"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

port_in_use() {
  # Something listens on it (ss), or accepts connections on it (no ss).
  if command -v ss >/dev/null; then
    [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]] && return 0
  elif (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    return 0
  fi
  return 1
}

# free_port EXCLUDED...: a random free loopback port in 20000-32767 (below the ephemeral range).
free_port() {
  local p i
  for (( i = 0; i < 200; i++ )); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12768 ))
    [[ " $* " == *" $p "* ]] && continue
    port_in_use "$p" && continue
    echo "$p"
    return 0
  done
  die "no free port found"
}

# pid_alive PID NAME: running and its command line mentions NAME (before signalling a PID that
# may have been reused). While a process starts, its command line is briefly unreadable as
# bash execs it, so the start loops ask `kill -0` alone.
pid_alive() {
  [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"
}

read_pid() { if [[ -s $1 ]]; then cat "$1"; fi; }

# launch PIDFILE LOGFILE CMD...: start CMD in its own session, detached; the process writes its own PID.
launch() {
  local pidfile=$1 logfile=$2 i
  shift 2
  rm -f "$pidfile"
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
    </dev/null >>"$logfile" 2>&1 &
  for (( i = 0; i < 50; i++ )); do
    [[ -s $pidfile ]] && return 0
    sleep 0.1
  done
  die "process did not start: $*"
}

# stop_pid PIDFILE NAME
stop_pid() {
  local pidfile=$1 name=$2 pid i
  pid=$(read_pid "$pidfile")
  if ! pid_alive "$pid" "$name"; then
    rm -f "$pidfile"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for (( i = 0; i < STOP_TIMEOUT * 10; i++ )); do
    pid_alive "$pid" "$name" || break
    sleep 0.1
  done
  if pid_alive "$pid" "$name"; then
    log "$name (pid $pid) still alive after ${STOP_TIMEOUT}s, sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do
      pid_alive "$pid" "$name" || break
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
}

show_logs() {
  local f
  for f in "$DIR"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}.log; do
    [[ -f $f ]] || continue
    printf '\n===== last 30 lines of %s =====\n' "$f" >&2
    tail -n 30 "$f" >&2
  done
}

load_state() {
  [[ -f $DIR/state ]] || die "$DIR/state not found: run '$0 up $DIR' first"
  # shellcheck source=/dev/null
  source "$DIR/state"
}

write_env() {
  local apiserver_pid etcd_pid
  apiserver_pid=$(read_pid "$DIR/kube-apiserver.pid")
  etcd_pid=$(read_pid "$DIR/etcd.pid")
  {
    echo "# generated by scripts/control-plane.sh; source it"
    printf 'export KAR_DIR=%q\n' "$DIR"
    printf 'export KUBE_APISERVER_URL=%q\n' "https://127.0.0.1:$APISERVER_PORT"
    printf 'export KUBECONFIG=%q\n' "$DIR/admin.kubeconfig"
    printf 'export USER1_KUBECONFIG=%q\n' "$DIR/user1.kubeconfig"
    printf 'export APISERVER_PORT=%q\n' "$APISERVER_PORT"
    printf 'export APISERVER_PID=%q\n' "$apiserver_pid"
    printf 'export ETCD_CLIENT_PORT=%q\n' "$ETCD_CLIENT_PORT"
    printf 'export ETCD_PEER_PORT=%q\n' "$ETCD_PEER_PORT"
    printf 'export ETCD_URL=%q\n' "http://127.0.0.1:$ETCD_CLIENT_PORT"
    printf 'export ETCD_PID=%q\n' "$etcd_pid"
    printf 'export KUBE_CA_FILE=%q\n' "$DIR/pki/ca.crt"
    printf 'export ADMIN_TOKEN=%q\n' "$ADMIN_TOKEN"
    printf 'export USER1_TOKEN=%q\n' "$USER1_TOKEN"
    printf 'export FRONT_PROXY_CA_FILE=%q\n' "$DIR/pki/front-proxy-ca.crt"
    printf 'export FRONT_PROXY_CA_KEY=%q\n' "$DIR/pki/front-proxy-ca.key"
    printf 'export FRONT_PROXY_CLIENT_CERT=%q\n' "$DIR/pki/front-proxy-client.crt"
    printf 'export FRONT_PROXY_CLIENT_KEY=%q\n' "$DIR/pki/front-proxy-client.key"
    printf 'export CONTROLLER_MANAGER_PORT=%q\n' "$KCM_PORT"
    printf 'export CONTROLLER_MANAGER_PID=%q\n' "$(read_pid "$DIR/kube-controller-manager.pid")"
    printf 'export SCHEDULER_PORT=%q\n' "$SCHEDULER_PORT"
    printf 'export SCHEDULER_PID=%q\n' "$(read_pid "$DIR/kube-scheduler.pid")"
    printf 'export KUBE_BIN_DIR=%q\n' "$KUBE_BIN_DIR"
    printf 'export KUBE_VERSION=%q\n' "$KUBE_VERSION"
    printf 'export ETCD_BIN=%q\n' "$ETCD_BIN"
  } >"$DIR/env.tmp"
  mv "$DIR/env.tmp" "$DIR/env"
}

# ---------------------------------------------------------------- certificates
gen_pki() {
  local pki=$DIR/pki
  [[ -f $pki/.complete ]] && return 0
  log "generating certificates in $pki"
  rm -rf "$pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    exec 2>openssl.log
    # serving CA + kube-apiserver serving cert
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt -subj "/CN=kar-local-ca"
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
    printf '%s\n' \
      "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" >server.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out apiserver.crt
    # service-account signing key
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    # front-proxy CA + client cert (kube-apiserver -> aggregated API servers)
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout front-proxy-ca.key -out front-proxy-ca.crt \
      -subj "/CN=front-proxy-ca"
    openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
      -subj "/CN=front-proxy-client"
    printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" >client.ext
    openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
      -CAcreateserial -days 3650 -extfile client.ext -out front-proxy-client.crt
    chmod 644 ./*.crt sa.pub
  ) || { cat "$pki/openssl.log" >&2; die "openssl failed"; }
  touch "$pki/.complete"
}

write_kubeconfig() { # write_kubeconfig FILE USER TOKEN
  local ca
  ca=$(base64 -w0 <"$DIR/pki/ca.crt")
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kar-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@kar-local
  context:
    cluster: kar-local
    user: $2
current-context: $2@kar-local
EOF
  chmod 600 "$1"
}

# ---------------------------------------------------------------- processes
start_etcd() {
  log "starting etcd on 127.0.0.1:$ETCD_CLIENT_PORT (peer $ETCD_PEER_PORT)"
  launch "$DIR/etcd.pid" "$DIR/etcd.log" "$ETCD_BIN" \
    --name kar \
    --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kar=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state new \
    --logger zap --log-outputs stderr
  local i pid
  pid=$(read_pid "$DIR/etcd.pid")
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    if curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { show_logs; die "etcd exited"; }
    sleep 0.25
  done
  show_logs
  die "etcd not healthy after ${READY_TIMEOUT}s"
}

write_apiserver_args() {
  local pki=$DIR/pki
  local -a args=(
    "--etcd-servers=http://127.0.0.1:$ETCD_CLIENT_PORT"
    "--secure-port=$APISERVER_PORT"
    --bind-address=127.0.0.1
    --advertise-address=127.0.0.1
    "--cert-dir=$DIR/apiserver-certs"
    "--tls-cert-file=$pki/apiserver.crt"
    "--tls-private-key-file=$pki/apiserver.key"
    --service-account-issuer=https://kubernetes.default.svc
    "--service-account-key-file=$pki/sa.pub"
    "--service-account-signing-key-file=$pki/sa.key"
    "--token-auth-file=$DIR/tokens.csv"
    --authorization-mode=RBAC
    --service-cluster-ip-range=10.0.0.0/24
    --endpoint-reconciler-type=none
    "--requestheader-client-ca-file=$pki/front-proxy-ca.crt"
    --requestheader-allowed-names=front-proxy-client
    --requestheader-username-headers=X-Remote-User
    --requestheader-group-headers=X-Remote-Group
    --requestheader-extra-headers-prefix=X-Remote-Extra-
    "--proxy-client-cert-file=$pki/front-proxy-client.crt"
    "--proxy-client-key-file=$pki/front-proxy-client.key"
  )
  local extra
  # shellcheck disable=SC2206
  extra=(${KAR_APISERVER_EXTRA_ARGS:-})
  args+=("${extra[@]}")
  printf '%s\n' "${args[@]}" >"$DIR/kube-apiserver.args"
}

start_apiserver() {
  local -a args
  local pid i body t0=$SECONDS
  mapfile -t args <"$DIR/kube-apiserver.args"
  pid=$(read_pid "$DIR/kube-apiserver.pid")
  if pid_alive "$pid" kube-apiserver; then
    die "kube-apiserver already running (pid $pid)"
  fi
  pid_alive "$(read_pid "$DIR/etcd.pid")" etcd || die "etcd is not running; use '$0 up $DIR'"
  # The old listener may take a moment to go away after a stop.
  for (( i = 0; i < 50; i++ )); do
    port_in_use "$APISERVER_PORT" || break
    sleep 0.1
  done
  port_in_use "$APISERVER_PORT" && die "port $APISERVER_PORT is taken by another process"
  log "starting kube-apiserver on https://127.0.0.1:$APISERVER_PORT"
  printf '\n===== %s start =====\n' "$(date -Is)" >>"$DIR/kube-apiserver.log"
  launch "$DIR/kube-apiserver.pid" "$DIR/kube-apiserver.log" "$KUBE_BIN_DIR/kube-apiserver" "${args[@]}"
  pid=$(read_pid "$DIR/kube-apiserver.pid")
  write_env
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    body=$(curl -sS --max-time 2 --cacert "$DIR/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
      "https://127.0.0.1:$APISERVER_PORT/readyz" 2>/dev/null || true)
    if [[ $body == ok ]]; then
      log "kube-apiserver ready (pid $pid) after $(( SECONDS - t0 )) s"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { show_logs; die "kube-apiserver exited"; }
    sleep 0.25
  done
  show_logs
  die "kube-apiserver /readyz not ok after ${READY_TIMEOUT}s (last answer: ${body:-none})"
}

# wait_healthy NAME PORT: until https://127.0.0.1:PORT/healthz answers ok (an always-allowed path)
wait_healthy() {
  local name=$1 port=$2 pid i body t0=$SECONDS
  pid=$(read_pid "$DIR/$name.pid")
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    body=$(curl -sSk --max-time 2 "https://127.0.0.1:$port/healthz" 2>/dev/null || true)
    if [[ $body == ok ]]; then
      log "$name healthy (pid $pid) after $(( SECONDS - t0 )) s"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { show_logs; die "$name exited"; }
    sleep 0.25
  done
  show_logs
  die "$name /healthz not ok after ${READY_TIMEOUT}s (last answer: ${body:-none})"
}

start_controller_manager() {
  local pki=$DIR/pki
  log "starting kube-controller-manager on https://127.0.0.1:$KCM_PORT"
  launch "$DIR/kube-controller-manager.pid" "$DIR/kube-controller-manager.log" \
    "$KUBE_BIN_DIR/kube-controller-manager" \
    "--kubeconfig=$DIR/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 "--secure-port=$KCM_PORT" "--cert-dir=$DIR/kcm-certs" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    "--service-account-private-key-file=$pki/sa.key" \
    "--root-ca-file=$pki/ca.crt" \
    --service-cluster-ip-range=10.0.0.0/24 \
    "--controllers=*"
  wait_healthy kube-controller-manager "$KCM_PORT"
}

start_scheduler() {
  log "starting kube-scheduler on https://127.0.0.1:$SCHEDULER_PORT"
  launch "$DIR/kube-scheduler.pid" "$DIR/kube-scheduler.log" "$KUBE_BIN_DIR/kube-scheduler" \
    "--kubeconfig=$DIR/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 "--secure-port=$SCHEDULER_PORT" "--cert-dir=$DIR/scheduler-certs" \
    --leader-elect=false
  wait_healthy kube-scheduler "$SCHEDULER_PORT"
}

# The controller-manager's first visible work: namespace default's ServiceAccount.
wait_default_serviceaccount() {
  local i code t0=$SECONDS
  for (( i = 0; i < READY_TIMEOUT * 4; i++ )); do
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$DIR/pki/ca.crt" \
      -H "Authorization: Bearer $ADMIN_TOKEN" \
      "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default" 2>/dev/null || true)
    if [[ $code == 200 ]]; then
      log "ServiceAccount default/default exists after $(( SECONDS - t0 )) s"
      return 0
    fi
    sleep 0.25
  done
  show_logs
  die "the controller-manager created no default ServiceAccount within ${READY_TIMEOUT}s"
}

# ---------------------------------------------------------------- commands
cmd_up() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if [[ -f $DIR/state ]]; then
    # shellcheck source=/dev/null
    source "$DIR/state"
    if pid_alive "$(read_pid "$DIR/kube-apiserver.pid")" kube-apiserver \
       || pid_alive "$(read_pid "$DIR/etcd.pid")" etcd \
       || pid_alive "$(read_pid "$DIR/kube-controller-manager.pid")" kube-controller-manager \
       || pid_alive "$(read_pid "$DIR/kube-scheduler.pid")" kube-scheduler; then
      die "control plane in $DIR is already running; run '$0 down $DIR' first"
    fi
  fi
  ensure_tools
  if [[ -z ${ETCD_BIN:-} ]]; then
    ETCD_BIN=$("$SCRIPT_DIR/go-build.sh" etcd)/etcd
  fi
  KUBE_VERSION=${KUBE_VERSION:-}
  if [[ -z ${KUBE_BIN_DIR:-} ]]; then
    KUBE_BIN_DIR=$("$SCRIPT_DIR/go-build.sh" kubernetes ${KUBE_VERSION:+"$KUBE_VERSION"})
  fi
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [[ -x $KUBE_BIN_DIR/$b ]] || die "$b not found in $KUBE_BIN_DIR"
  done
  [[ -x $ETCD_BIN ]] || die "etcd binary not found: $ETCD_BIN"
  KUBE_VERSION=$("$KUBE_BIN_DIR/kube-apiserver" --version | awk '{ print $2 }')

  gen_pki
  printf '%s\n' "$ADMIN_TOKEN,admin,admin,\"system:masters\"" "$USER1_TOKEN,user1,user1" \
    "$KCM_TOKEN,system:kube-controller-manager,system:kube-controller-manager" \
    "$SCHEDULER_TOKEN,system:kube-scheduler,system:kube-scheduler" >"$DIR/tokens.csv"
  chmod 600 "$DIR/tokens.csv"

  ETCD_CLIENT_PORT=$(free_port)
  ETCD_PEER_PORT=$(free_port "$ETCD_CLIENT_PORT")
  APISERVER_PORT=$(free_port "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT")
  KCM_PORT=$(free_port "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT")
  SCHEDULER_PORT=$(free_port "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT")
  {
    printf 'ETCD_CLIENT_PORT=%q\n' "$ETCD_CLIENT_PORT"
    printf 'ETCD_PEER_PORT=%q\n' "$ETCD_PEER_PORT"
    printf 'APISERVER_PORT=%q\n' "$APISERVER_PORT"
    printf 'KCM_PORT=%q\n' "$KCM_PORT"
    printf 'SCHEDULER_PORT=%q\n' "$SCHEDULER_PORT"
    printf 'ETCD_BIN=%q\n' "$ETCD_BIN"
    printf 'KUBE_BIN_DIR=%q\n' "$KUBE_BIN_DIR"
    printf 'KUBE_VERSION=%q\n' "$KUBE_VERSION"
  } >"$DIR/state"
  write_apiserver_args
  write_kubeconfig "$DIR/admin.kubeconfig" admin "$ADMIN_TOKEN"
  write_kubeconfig "$DIR/user1.kubeconfig" user1 "$USER1_TOKEN"
  write_kubeconfig "$DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager "$KCM_TOKEN"
  write_kubeconfig "$DIR/kube-scheduler.kubeconfig" system:kube-scheduler "$SCHEDULER_TOKEN"

  rm -rf "$DIR/etcd-data"
  : >"$DIR/etcd.log"
  : >"$DIR/kube-apiserver.log"
  : >"$DIR/kube-controller-manager.log"
  : >"$DIR/kube-scheduler.log"
  # On any failure below, stop whatever was started.
  trap 'rc=$?; if (( rc != 0 )); then log "up failed, stopping"; stop_all; fi' EXIT
  start_etcd
  start_apiserver
  start_controller_manager
  start_scheduler
  wait_default_serviceaccount
  trap - EXIT
  write_env
  log "up: Kubernetes $KUBE_VERSION at https://127.0.0.1:$APISERVER_PORT; source $DIR/env"
}

stop_all() {
  stop_pid "$DIR/kube-scheduler.pid" kube-scheduler
  stop_pid "$DIR/kube-controller-manager.pid" kube-controller-manager
  stop_pid "$DIR/kube-apiserver.pid" kube-apiserver
  stop_pid "$DIR/etcd.pid" etcd
}

cmd_down() {
  if [[ ! -d $DIR ]]; then
    log "$DIR does not exist, nothing to stop"
    return 0
  fi
  DIR=$(cd "$DIR" && pwd)
  stop_all
  if [[ -f $DIR/state ]]; then
    # shellcheck source=/dev/null
    source "$DIR/state"
    write_env
  fi
  log "down: $DIR"
}

cmd_stop_apiserver() {
  DIR=$(cd "$DIR" && pwd)
  load_state
  stop_pid "$DIR/kube-apiserver.pid" kube-apiserver
  write_env
}

cmd_start_apiserver() {
  DIR=$(cd "$DIR" && pwd)
  load_state
  start_apiserver
  write_env
}

cmd_status() {
  DIR=$(cd "$DIR" && pwd)
  load_state
  local rc=0 etcd_pid api_pid
  etcd_pid=$(read_pid "$DIR/etcd.pid")
  api_pid=$(read_pid "$DIR/kube-apiserver.pid")
  if pid_alive "$etcd_pid" etcd; then echo "etcd: running pid $etcd_pid http://127.0.0.1:$ETCD_CLIENT_PORT"
  else echo "etcd: stopped"; rc=1; fi
  if pid_alive "$api_pid" kube-apiserver; then echo "kube-apiserver: running pid $api_pid https://127.0.0.1:$APISERVER_PORT"
  else echo "kube-apiserver: stopped"; rc=1; fi
  local name pid
  for name in kube-controller-manager kube-scheduler; do
    pid=$(read_pid "$DIR/$name.pid")
    if pid_alive "$pid" "$name"; then echo "$name: running pid $pid"
    else echo "$name: stopped"; rc=1; fi
  done
  return "$rc"
}

(( $# == 2 )) || usage
CMD=$1
DIR=$2
case $CMD in
  up) cmd_up ;;
  down) cmd_down ;;
  stop-apiserver) cmd_stop_apiserver ;;
  start-apiserver) cmd_start_apiserver ;;
  restart-apiserver) cmd_stop_apiserver; cmd_start_apiserver ;;
  status) cmd_status ;;
  *) usage ;;
esac
