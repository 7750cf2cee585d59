#!/usr/bin/env bash
# Installs what the tests run beside cargo, from Debian's packages, when it is missing:
# kubectl (kubernetes-client), etcd (etcd-server), curl and openssl. Needs root or sudo.
# kube-apiserver itself is built and cached by scripts/kube-apiserver-build.sh.
set -euo pipefail
need=()
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if (( ${#need[@]} > 0 )); then
  sudo_() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
  echo "installing ${need[*]}" >&2
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
