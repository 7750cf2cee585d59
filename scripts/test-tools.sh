#!/usr/bin/env bash
# Installs what the tests run beside cargo and the Go builds, from Debian's packages, when it is
# missing: curl, openssl, docker-registry (DVCR), qemu-utils (qemu-img), apache2-utils
# (htpasswd), gcc and make (the proxy's allocator, jemalloc, is C built by cargo), and jq
# (scripts/check-docs.sh reads `cargo metadata` with it). Needs root or sudo. Kubernetes and
# etcd are built from Go modules by scripts/go-build.sh.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v jq >/dev/null 2>&1 || need+=(jq)
if (( ${#need[@]} > 0 )); then
  sudo_() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
  echo "installing ${need[*]}" >&2
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
