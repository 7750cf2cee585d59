#!/usr/bin/env bash
# Builds the Go programs the tests run, from Go modules, and caches them.
#
# Usage:
#   scripts/go-build.sh TOOL [VERSION]    prints the directory holding TOOL's binaries
#
# Each tool is a wrapper module under tools/go/TOOL/: go.mod and go.sum (committed, so a fresh
# machine verifies every module), any main package of its own, and build.env, which says what to
# build:
#   TOOL_VERSION            the version the wrapper pins
#   TOOL_BINARIES           "NAME=PACKAGE ..." pairs, each built as DIR/NAME
#   tool_ldflags VERSION    (function, optional) extra -ldflags, e.g. version stamps
#   tool_wrapper VERSION D  (function, optional) writes go.mod for another VERSION into D;
#                           without it only TOOL_VERSION can be built
#   tool_postbuild VERSION D (function, optional) adds files beside the binaries in D (data
#                           from the tool's own module, for example), run in the wrapper
#
# Binaries go to $CACHE/bin/TOOL/VERSION-HASH/, where HASH covers the wrapper's files and the Go
# version: a build happens once per version, and again only when the wrapper changes. One
# GOMODCACHE and GOCACHE ($CACHE/go/) serve every tool; one lock makes concurrent calls wait.
# CGO_ENABLED=0. A module the proxy refuses fails the build with its name, never a fallback.
#
# Env:
#   KAR_CACHE  cache root (default $HOME/.cache/kube-api-rewriter)
#   GO         the go binary (default: `go` on PATH, then /usr/local/go/bin/go); must be 1.26+
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KAR_CACHE:-$HOME/.cache/kube-api-rewriter}
GO_MIN_MINOR=26

log() { printf '[go-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

(( $# >= 1 && $# <= 2 )) || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
TOOL=$1
WRAPPER=$REPO/tools/go/$TOOL
[[ -f $WRAPPER/build.env ]] || die "no tool '$TOOL' (no $WRAPPER/build.env); tools: $(cd "$REPO/tools/go" && echo */ | tr -d /)"

# ---------------------------------------------------------------- go
go_minor() { # go_minor BIN: the minor version of a go binary 1.x, or nothing
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 0
  [[ $v =~ ^go1\.([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
}
if [[ -n ${GO:-} ]]; then
  candidates=("$GO")
else
  candidates=()
  command -v go >/dev/null && candidates+=("$(command -v go)")
  [[ -x /usr/local/go/bin/go ]] && candidates+=(/usr/local/go/bin/go)
  (( ${#candidates[@]} > 0 )) || die "no go binary found (PATH or /usr/local/go/bin); Go 1.$GO_MIN_MINOR or newer is needed"
fi
GO_BIN=""
for c in "${candidates[@]}"; do
  m=$(go_minor "$c")
  if [[ -n $m ]] && (( m >= GO_MIN_MINOR )); then GO_BIN=$c; break; fi
done
[[ -n $GO_BIN ]] || die "Go 1.$GO_MIN_MINOR or newer is needed; found ${candidates[*]}: $("${candidates[0]}" version 2>&1 || echo 'does not run')"
GO_VERSION=$("$GO_BIN" env GOVERSION)

# ---------------------------------------------------------------- what to build
TOOL_VERSION="" TOOL_BINARIES=""
# shellcheck source=/dev/null
source "$WRAPPER/build.env"
[[ -n $TOOL_VERSION && -n $TOOL_BINARIES ]] || die "$WRAPPER/build.env sets no TOOL_VERSION or TOOL_BINARIES"
VERSION=${2:-$TOOL_VERSION}

# hash_files DIR: the wrapper's files (build.env among them; paths relative, so every checkout
# agrees) and the Go version, as one digest
hash_files() {
  { (cd "$1" && find . -type f ! -name '*.log' | LC_ALL=C sort | xargs sha256sum)
    echo "$GO_VERSION $VERSION"; } | sha256sum | cut -c1-12
}

export GOMODCACHE=$CACHE/go/mod
export GOCACHE=$CACHE/go/build
export GOFLAGS="-modcacherw -mod=readonly"
export CGO_ENABLED=0
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
mkdir -p "$GOMODCACHE" "$GOCACHE" "$CACHE/bin/$TOOL"

if [[ $VERSION == "$TOOL_VERSION" ]]; then
  SRC=$WRAPPER
else
  declare -F tool_wrapper >/dev/null || die "$TOOL builds only $TOOL_VERSION (its build.env has no tool_wrapper); asked for $VERSION"
  SRC=$CACHE/go/wrappers/$TOOL-$VERSION
fi

# modules_refused LOG: the module@version pairs the go command could not fetch
modules_refused() {
  grep -E '@v[0-9][^ :]*: (reading|verifying|unrecognized|invalid|not found|missing)' "$1" \
    | grep -oE '[A-Za-z0-9.~_/-]+@v[0-9][A-Za-z0-9.+~_-]*: (reading|verifying|unrecognized|invalid|not found|missing)' \
    | sed 's/: [a-z ]*$//' | sort -u | head -n 10 || true
}
go_fail() { # go_fail WHAT LOG
  local refused
  refused=$(modules_refused "$2")
  if [[ -n $refused ]]; then
    log "ERROR: $1: the module proxy refused $(echo $refused | sed 's/ /, /g')"
  else
    log "ERROR: $1 failed; last lines of $2:"
  fi
  tail -n 30 "$2" >&2
  exit 1
}

# A cached build answers at once, without the lock (the lock is for builds).
if [[ $SRC == "$WRAPPER" || -f $SRC/.complete ]]; then
  OUT=$CACHE/bin/$TOOL/$VERSION-$(hash_files "$SRC")
  if [[ -f $OUT/.complete ]]; then
    echo "$OUT"
    exit 0
  fi
fi

exec 9>"$CACHE/go/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/go/.lock; waiting"
  flock 9
fi

if [[ $SRC != "$WRAPPER" ]]; then
  # A wrapper for another version, generated the way the committed one was, then tidied.
  mkdir -p "$SRC"
  if [[ ! -f $SRC/.complete ]]; then
    log "writing a $TOOL wrapper for $VERSION in $SRC"
    find "$SRC" -mindepth 1 -delete
    cp -r "$WRAPPER/." "$SRC/"
    rm -f "$SRC/go.sum"
    tool_wrapper "$VERSION" "$SRC" >"$SRC/wrapper.log" 2>&1 || go_fail "writing the wrapper for $TOOL $VERSION" "$SRC/wrapper.log"
    (cd "$SRC" && GOFLAGS=-modcacherw "$GO_BIN" mod tidy) >>"$SRC/wrapper.log" 2>&1 || go_fail "go mod tidy for $TOOL $VERSION" "$SRC/wrapper.log"
    touch "$SRC/.complete"
  fi
fi

OUT=$CACHE/bin/$TOOL/$VERSION-$(hash_files "$SRC")
if [[ -f $OUT/.complete ]]; then
  echo "$OUT"
  exit 0
fi

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
LOG=$OUT.tmp/build.log
ldflags="-s -w"
if declare -F tool_ldflags >/dev/null; then ldflags+=" $(tool_ldflags "$VERSION")"; fi

start=$SECONDS
log "building $TOOL $VERSION with $GO_VERSION (log: $LOG)"
(cd "$SRC" && "$GO_BIN" mod download) >>"$LOG" 2>&1 || go_fail "downloading $TOOL's modules" "$LOG"
for pair in $TOOL_BINARIES; do
  name=${pair%%=*} pkg=${pair#*=}
  t=$SECONDS
  (cd "$SRC" && nice -n 5 "$GO_BIN" build -trimpath -ldflags "$ldflags" -o "$OUT.tmp/$name" "$pkg") >>"$LOG" 2>&1 \
    || go_fail "go build $pkg" "$LOG"
  log "  $name: $(( SECONDS - t )) s"
done
if declare -F tool_postbuild >/dev/null; then
  (cd "$SRC" && tool_postbuild "$VERSION" "$OUT.tmp") >>"$LOG" 2>&1 || go_fail "$TOOL's tool_postbuild" "$LOG"
fi
mv "$LOG" "$OUT.tmp/.build.log"
touch "$OUT.tmp/.complete"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
# Older builds of this version (from an earlier wrapper) are not used again.
for old in "$CACHE/bin/$TOOL/$VERSION"-*; do [[ $old == "$OUT" ]] || rm -rf "$old"; done
log "built $TOOL $VERSION in $(( SECONDS - start )) s: $OUT"
echo "$OUT"
