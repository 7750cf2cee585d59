# Processes on loopback for the scripts that start them (sourced; bash). The sourcing script
# defines log and die, and STOP_TIMEOUT (seconds between TERM and KILL).

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
