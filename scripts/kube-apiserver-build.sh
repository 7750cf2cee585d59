#!/usr/bin/env bash
# Build kube-apiserver v1.20.2 from Debian bookworm's `kubernetes` source package
# and cache the binary outside the checkout.
#
#   scripts/kube-apiserver-build.sh          # prints the binary path on stdout
#
# Cache: ${KAR_CACHE:-$HOME/.cache/kube-api-rewriter}/kube-apiserver-v1.20.2/kube-apiserver
# If that binary exists and `--version` runs, the script exits at once.
# Needs root for apt-get (fresh Debian 12 machine is fine). Takes ~10 min cold on 2 cores.
#
# Env:
#   KAR_CACHE        cache root (default $HOME/.cache/kube-api-rewriter)
#   KAR_KEEP_BUILD=1 keep the build tree (source + Go build cache) after success
set -euo pipefail

K8S_VERSION=v1.20.2
K8S_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
K8S_BUILD_DATE=2021-01-13T13:20:00Z
DEB_SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2

CACHE_ROOT=${KAR_CACHE:-$HOME/.cache/kube-api-rewriter}
OUT_DIR=$CACHE_ROOT/kube-apiserver-$K8S_VERSION
BIN=$OUT_DIR/kube-apiserver
WORK=$OUT_DIR/build
SRC_DL=$OUT_DIR/debian-source
APT_SRC_FILE=/etc/apt/sources.list.d/kube-api-rewriter-deb-src.sources

log() { printf '[kube-apiserver-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

binary_ok() { [[ -x $BIN ]] && "$BIN" --version >/dev/null 2>&1; }

if binary_ok; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$OUT_DIR"
# Serialise concurrent builds (tests/CI may start several at once).
exec 9>"$OUT_DIR/.lock"
if ! flock -n 9; then
  log "another build holds $OUT_DIR/.lock, waiting for it"
  flock 9
fi
if binary_ok; then
  echo "$BIN"
  exit 0
fi

# ---------------------------------------------------------------- apt
run_as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

need_pkgs=()
for p in golang-go etcd-server rsync golang-github-modern-go-reflect2-dev openssl curl git make ca-certificates; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    need_pkgs+=("$p")
  fi
done
if [[ ! -x /usr/bin/kubectl ]] && ! command -v kubectl >/dev/null 2>&1; then
  need_pkgs+=(kubernetes-client)
fi

orig_tarball() { compgen -G "$SRC_DL/kubernetes_*.orig.tar.gz" | head -n1 || true; }

need_source=0
[[ -n $(orig_tarball) ]] || need_source=1

has_deb_src() {
  grep -Eqs '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources
}

write_deb_src() {
  # Copy URIs/Suites/Signed-By from the first deb822 stanza of debian.sources
  # (the bookworm main archive); fall back to deb.debian.org.
  local uris="" suites="" signed=""
  local f=/etc/apt/sources.list.d/debian.sources
  if [[ -r $f ]]; then
    uris=$(awk '/^URIs:/{sub(/^URIs:[ \t]*/,""); print; exit}' "$f")
    suites=$(awk '/^Suites:/{sub(/^Suites:[ \t]*/,""); print; exit}' "$f")
    signed=$(awk '/^Signed-By:/{sub(/^Signed-By:[ \t]*/,""); print; exit}' "$f")
  fi
  : "${uris:=http://deb.debian.org/debian}"
  : "${suites:=bookworm bookworm-updates}"
  : "${signed:=/usr/share/keyrings/debian-archive-keyring.gpg}"
  log "adding deb-src entry $APT_SRC_FILE ($uris $suites)"
  run_as_root tee "$APT_SRC_FILE" >/dev/null <<EOF
Types: deb-src
URIs: $uris
Suites: $suites
Components: main
Signed-By: $signed
EOF
}

if (( ${#need_pkgs[@]} > 0 || need_source )); then
  export DEBIAN_FRONTEND=noninteractive
  if (( need_source )) && ! has_deb_src; then
    write_deb_src
  fi
  log "apt-get update"
  run_as_root apt-get update -qq >&2
  if (( ${#need_pkgs[@]} > 0 )); then
    log "apt-get install ${need_pkgs[*]}"
    run_as_root apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
  fi
  if (( need_source )); then
    log "apt-get source --download-only kubernetes=$DEB_SRC_VERSION (34 MB)"
    mkdir -p "$SRC_DL"
    (cd "$SRC_DL" && apt-get source -qq --download-only "kubernetes=$DEB_SRC_VERSION" >&2)
  fi
fi

ORIG=$(orig_tarball)
[[ -n $ORIG ]] || die "kubernetes orig tarball not found in $SRC_DL"
[[ -d $REFLECT2_SRC ]] || die "$REFLECT2_SRC missing (golang-github-modern-go-reflect2-dev)"
command -v go >/dev/null || die "go not found after installing golang-go"

# ---------------------------------------------------------------- source tree
export GOPATH=$WORK/gopath
export GOCACHE=$WORK/gocache
export GO111MODULE=off
export GOFLAGS=
export CGO_ENABLED=0
export GOTOOLCHAIN=local
KROOT=$GOPATH/src/k8s.io/kubernetes
LOG=$WORK/build.log

if [[ ! -f $WORK/.unpacked ]]; then
  log "unpacking $(basename "$ORIG")"
  rm -rf "$KROOT"
  mkdir -p "$KROOT"
  tar -xzf "$ORIG" -C "$KROOT" --strip-components=1
  [[ -f $KROOT/cmd/kube-apiserver/apiserver.go ]] || die "unexpected tarball layout in $ORIG"

  # Vendored reflect2 1.0.1 makes kube-apiserver panic (mapiterinit) with Go >= 1.18.
  log "replacing vendor/github.com/modern-go/reflect2 with Debian's $(dpkg-query -W -f='${Version}' golang-github-modern-go-reflect2-dev 2>/dev/null || echo copy)"
  rm -rf "$KROOT/vendor/github.com/modern-go/reflect2"
  mkdir -p "$KROOT/vendor/github.com/modern-go/reflect2"
  rsync -a --exclude='*_test.go' --exclude='.git*' --exclude='test*/' \
    "$REFLECT2_SRC/" "$KROOT/vendor/github.com/modern-go/reflect2/"

  log "git init (hack/ scripts expect a repository)"
  (
    cd "$KROOT"
    git init -q
    git -c user.name=kar -c user.email=kar@localhost -c commit.gpgsign=false add -A
    git -c user.name=kar -c user.email=kar@localhost -c commit.gpgsign=false \
      commit -q --no-verify -m "kubernetes $K8S_VERSION (Debian $DEB_SRC_VERSION orig)"
  )
  touch "$WORK/.unpacked"
fi

export KUBE_GIT_VERSION=$K8S_VERSION
export KUBE_GIT_TREE_STATE=clean
export KUBE_GIT_COMMIT=$K8S_COMMIT
export KUBE_GIT_MAJOR=1
export KUBE_GIT_MINOR=20

: >"$LOG"
fail() {
  log "ERROR: $1 failed; last lines of $LOG:"
  tail -n 40 "$LOG" >&2
  exit 1
}

if [[ ! -f $WORK/.generated ]]; then
  log "make generated_files (~2 min; log: $LOG)"
  start=$SECONDS
  (cd "$KROOT" && nice -n 10 make generated_files) >>"$LOG" 2>&1 || fail "make generated_files"
  log "make generated_files done in $((SECONDS - start)) s"
  touch "$WORK/.generated"
fi

ldflags=""
for pkg in k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/component-base/version \
           k8s.io/client-go/pkg/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
  ldflags+=" -X $pkg.gitCommit=$K8S_COMMIT"
  ldflags+=" -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$K8S_BUILD_DATE"
  ldflags+=" -X $pkg.gitMajor=1"
  ldflags+=" -X $pkg.gitMinor=20"
done

log "go build ./cmd/kube-apiserver (~6 min cold on 2 cores; log: $LOG)"
start=$SECONDS
(
  cd "$KROOT"
  nice -n 10 go build -o "$BIN.tmp" -ldflags "-s -w$ldflags" ./cmd/kube-apiserver
) >>"$LOG" 2>&1 || fail "go build"
log "go build done in $((SECONDS - start)) s"

"$BIN.tmp" --version >&2 || die "built binary does not run"
mv -f "$BIN.tmp" "$BIN"

if [[ ${KAR_KEEP_BUILD:-0} != 1 ]]; then
  log "removing build tree $WORK (set KAR_KEEP_BUILD=1 to keep it)"
  chmod -R u+w "$WORK" 2>/dev/null || true
  rm -rf "$WORK"
fi

log "cached $BIN"
echo "$BIN"
