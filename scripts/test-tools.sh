#!/usr/bin/env bash
# Installs what the tests run beside cargo and the Go builds, from Debian's packages, when it is
# missing: curl and openssl. Needs root or sudo. Kubernetes and etcd are built from Go modules
# by scripts/go-build.sh.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if (( ${#need[@]} > 0 )); then
  sudo_() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
  echo "installing ${need[*]}" >&2
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
