#!/usr/bin/env bash
# Runs the benchmarks once and copies what they print into the docs, so that each table there
# comes from one run on one commit:
#   - each benchmark's report (a Markdown table between `<!-- report:NAME -->` markers, stamped
#     with date, commit and machine) replaces the block of the same name in docs/benchmarks.md;
#   - then scripts/bench-headline.sh writes README.md's headline afresh from the tables now in
#     docs/benchmarks.md (those of this run and those kept), each figure quoting its cell.
# Not in CI: a full run takes about half an hour on 2 cores, and figures need a quiet machine.
#
# Usage: scripts/bench-report.sh [--only engine,instructions,proxy,subresources,vm200,dvcr,load] [--logs DIR] [--from DIR]
#                               [--peer BIN [--peer-name NAME]]
#   --only   run these benchmarks only (their blocks are replaced, the others kept)
#   --logs   keep each benchmark's whole output in DIR (default: a temporary directory)
#   --from   run nothing: copy the reports of an earlier run's --logs DIR into this checkout's
#            docs (a run from a clean clone at a fixed commit, while this one moves on)
#   --peer   the proxy benchmark measures this sidecar binary too (scripts/bench-proxy.sh
#            --peer); its comparison table replaces the `report:proxy-peer` block as well
# Commit first: the commit the reports name is the checkout's, marked `+changes` when the
# tracked files differ from it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ALL=engine,instructions,proxy,subresources,vm200,dvcr,load
only=$ALL
logs=
from=
peer_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --logs) logs=${2:?--logs needs a directory}; shift 2 ;;
    --from) from=${2:?--from needs a directory}; shift 2 ;;
    --peer) peer_args+=(--peer "${2:?--peer needs a binary}"); shift 2 ;;
    --peer-name) peer_args+=(--peer-name "${2:?--peer-name needs a name}"); shift 2 ;;
    *) echo "bench-report.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for b in ${only//,/ }; do
  [[ ,$ALL, == *,$b,* ]] || { echo "bench-report.sh: unknown benchmark $b (one of $ALL)" >&2; exit 2; }
done
want() { [[ ,$only, == *,$1,* ]]; }
step() { echo "==> $1 ($(date -u +%H:%M:%S), output in $logs/$1.log)" >&2; }
ran=()
if [[ -n $from ]]; then
  logs=$from
  for b in ${only//,/ }; do
    [[ -f $logs/$b.log ]] || { echo "bench-report.sh: $logs/$b.log is missing" >&2; exit 1; }
    ran+=("$b")
  done
  only=norun
fi
if [[ -z $logs ]]; then
  logs=$(mktemp -d "${TMPDIR:-/tmp}/kar-bench-report.XXXXXX")
fi
mkdir -p "$logs"
if [[ $only != norun && -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "bench-report.sh: warning: the tree differs from HEAD; the reports say +changes" >&2
fi
# One commit for every report of the run, even if the checkout moves on meanwhile.
if [[ -z ${BENCH_STAMP_COMMIT:-} ]]; then
  BENCH_STAMP_COMMIT=$(git rev-parse --short=12 HEAD)
  [[ -n $(git status --porcelain --untracked-files=no) ]] && BENCH_STAMP_COMMIT+=+changes
fi
export BENCH_STAMP_COMMIT
TARGET=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

if want engine; then
  step engine
  cargo bench --locked -j2 -p kube-api-rewriter-benches --bench engine > "$logs/engine.criterion.log" 2>&1
  cargo run --locked -q --release -j2 -p kube-api-rewriter-benches --bin engine_report -- "$TARGET/criterion" > "$logs/engine.log"
  ran+=(engine)
fi
if want instructions; then
  step instructions
  scripts/bench-instructions.sh > "$logs/instructions.log"
  ran+=(instructions)
fi
if want proxy; then
  step proxy
  scripts/bench-proxy.sh ${peer_args[@]+"${peer_args[@]}"} > "$logs/proxy.log"
  ran+=(proxy)
fi
if want subresources; then
  step subresources
  scripts/bench-subresources.sh > "$logs/subresources.log"
  ran+=(subresources)
fi
if want vm200; then
  step vm200
  cargo bench --locked -j2 -p virtualization-controller --bench vm200 > "$logs/vm200.log"
  ran+=(vm200)
fi
if want dvcr; then
  step dvcr
  cargo bench --locked -j2 -p virtualization-dvcr --bench import > "$logs/dvcr.log"
  ran+=(dvcr)
fi
if want load; then
  step load
  scripts/load.sh > "$logs/load.log"
  ran+=(load)
fi

# Prints the lines of FILE between `<!-- KIND:NAME -->` and `<!-- /KIND:NAME -->`, markers included.
block() {
  awk -v first="<!-- $2:$3 -->" -v last="<!-- /$2:$3 -->" '
    $0 == first { on = 1 } on { print } $0 == last { on = 0 }' "$1"
}
# Replaces in FILE the lines from OPEN to CLOSE (markers included) with the lines of NEW.
splice() {
  local file=$1 first=$2 last=$3 new=$4
  grep -qxF -- "$first" "$file" || { echo "bench-report.sh: $file has no $first block" >&2; exit 1; }
  awk -v first="$first" -v last="$last" -v new="$new" '
    $0 == first { while ((getline l < new) > 0) print l; skip = 1; next }
    skip && $0 == last { skip = 0; next }
    !skip { print }' "$file" > "$file.tmp"
  mv "$file.tmp" "$file"
}

for b in "${ran[@]}"; do
  block "$logs/$b.log" report "$b" > "$logs/$b.report.md"
  [[ -s $logs/$b.report.md ]] || { echo "bench-report.sh: $b printed no report (see $logs/$b.log)" >&2; exit 1; }
  splice docs/benchmarks.md "<!-- report:$b -->" "<!-- /report:$b -->" "$logs/$b.report.md"
  # A peer's comparison, when the run measured one.
  block "$logs/$b.log" report "$b-peer" > "$logs/$b-peer.report.md"
  if [[ -s $logs/$b-peer.report.md ]]; then
    splice docs/benchmarks.md "<!-- report:$b-peer -->" "<!-- /report:$b-peer -->" "$logs/$b-peer.report.md"
  fi
done

if [[ $only == norun ]]; then
  only=$(IFS=,; echo "${ran[*]}")
fi
scripts/bench-headline.sh
echo "bench-report.sh: docs/benchmarks.md${only:+ ($only)} and README.md's headline updated; logs in $logs" >&2
