#!/usr/bin/env bash
# Writes README.md's headline (the block between `<!-- headline -->` markers) from the tables
# in docs/benchmarks.md as they are now, so that it never says what no table says: each row
# quotes one cell of a table and names it (table › row › column), and the line above it names
# the run each quoted table comes from, as that table's stamp does. scripts/bench-report.sh runs
# it whenever it writes a table; scripts/check-docs.sh checks that every figure is still the
# cell it quotes. Measures nothing, and fails (changing nothing) when a row below finds no cell.
#
# Usage: scripts/bench-headline.sh [ROOT]   (default: this repository)
set -euo pipefail

# shellcheck source=lib/bench-tables.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-tables.sh"
ROOT=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
cd "$ROOT"
BENCH=docs/benchmarks.md

# The headline's rows, in order: `row MEASURE TABLE ROW COLUMN [lead]`. TABLE is the name in the
# table's `<!-- report:TABLE -->` marker; ROW a pattern (`*` for any text) for the row's first
# cell, or its first two joined by " / " where the first names several rows, so that a new
# run's sizes and versions need no new pattern; COLUMN the column's header. `lead` quotes the
# cell up to its first " (" (a median without the runs behind it).
rows() {
  row "engine: streamed restore of a LIST" \
    engine "LIST, *" "our rewrite"
  row "engine: that restore / serde's validating scan, interleaved" \
    engine "LIST, *" "rewrite / scan, interleaved (median of runs)" lead
  row "engine: the same, a WATCH" \
    engine "WATCH, *" "rewrite / scan, interleaved (median of runs)" lead
  row "engine: instructions per byte, restore / serde's scan" \
    instructions "LIST, *" "restore / scan"
  row "proxy: LIST from kube-apiserver, through the proxy / direct" \
    proxy "kube-apiserver v* / LIST of *" "proxy / direct"
  row "proxy: rewritten LIST as the client reads it, MB/s" \
    proxy "in-memory double / rewritten * LIST, MB/s*" "through the proxy"
  row "proxy: peak RSS with that LIST in flight" \
    proxy "in-memory double / proxy peak RSS with the * LIST*" "through the proxy"
  row "proxy: latency added to a small GET (median)" \
    proxy "in-memory double / GET of one VM, median*" "proxy / direct"
  row "proxy: write syscalls per 1,000 watch events, TLS upstream" \
    proxy "kube-apiserver-like double, TLS, HTTP/2 and HTTP/1.1 / write syscalls per 1,000 events*" "through the proxy"
  row "virtualization-api: console round trip, whole chain (p50)" \
    subresources "console round trip, * p50 *" "through the chain"
  row "virtualization-api: port-forward, whole chain" \
    subresources "port-forward, *" "through the chain"
  row "controller: VMs Running after one \`kubectl apply\`, sidecar" \
    vm200 "sidecar" "all Running after"
  row "controller: the same, the Layer embedded" \
    vm200 "embedded" "all Running after"
  row "dvcr: import of a raw image over http into DVCR" \
    dvcr "http → DVCR*" "throughput"
  row "load: proxy RSS idle / with the watches open" \
    load "proxy RSS before watches / with watches" "figure"
  row "load: watch events compared with direct watches" \
    load "events compared (proxy watches x events)" "figure"
  row "load: SIGTERM with LISTs and watches in flight" \
    load "SIGTERM" "figure"
}

esc() { printf '%s' "${1//|/\\|}"; }
table_rows=()
quoted=()
row() {
  local measure=$1 table=$2 pattern=$3 column=$4 how=${5:-whole} out cell figure key part
  if ! out=$(bench_cell "$BENCH" "$table" "$pattern" "$column" glob); then
    echo "bench-headline.sh: headline row \"$measure\": $BENCH: $out; change the row in $0" >&2
    exit 1
  fi
  IFS=$US read -r _ key cell <<<"$out"
  figure=$cell
  [[ $how == lead ]] && figure=${cell%% (*}
  if [[ -z $figure ]]; then
    echo "bench-headline.sh: headline row \"$measure\": $table › $key › $column is empty" >&2
    exit 1
  fi
  # check-docs.sh splits a quote at " › ".
  for part in "$table" "$key" "$column"; do
    if [[ $part == *" › "* ]]; then
      echo "bench-headline.sh: headline row \"$measure\": \"$part\" holds \" › \"" >&2
      exit 1
    fi
  done
  table_rows+=("| $(esc "$measure") | $(esc "$figure") | $(esc "$table › $key › $column") |")
  [[ " ${quoted[*]-} " == *" $table "* ]] || quoted+=("$table")
}
rows

# The runs behind the quoted tables, one group per run: `engine and proxy DATE, commit C, CPU`.
runs=()
names=()
for t in "${quoted[@]}"; do
  s=$(bench_stamp "$BENCH" "$t") || { echo "bench-headline.sh: table $t has no _Measured stamp" >&2; exit 1; }
  for ((i = 0; i < ${#runs[@]}; i++)); do
    [[ ${runs[i]} == "$s" ]] && break
  done
  if ((i == ${#runs[@]})); then
    runs+=("$s")
    names+=("$t")
  else
    names[i]+=" $t"
  fi
done
groups=()
for ((i = 0; i < ${#runs[@]}; i++)); do
  read -r -a ns <<<"${names[i]}"
  if ((${#ns[@]} == 1)); then
    list=${ns[0]}
  else
    list=$(IFS=,; echo "${ns[*]:0:${#ns[@]}-1}" | sed 's/,/, /g')" and ${ns[-1]}"
  fi
  groups+=("$list ${runs[i]}")
done

new=$(mktemp "${TMPDIR:-/tmp}/kar-headline.XXXXXX")
trap 'rm -f "$new"' EXIT
{
  echo "<!-- headline -->"
  echo "_Quoted from the tables of docs/benchmarks.md, each stamped there with its run: $(IFS=';'; echo "${groups[*]}" | sed 's/;/; /g')._"
  echo
  echo "| measure | figure | quoted from (table › row › column) |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${table_rows[@]}"
  echo
  echo "How each is measured, and every other figure: [docs/benchmarks.md](docs/benchmarks.md)."
  echo "<!-- /headline -->"
} > "$new"

grep -qxF -- "<!-- headline -->" README.md || { echo "bench-headline.sh: README.md has no <!-- headline --> block" >&2; exit 1; }
awk -v new="$new" '
  $0 == "<!-- headline -->" { while ((getline l < new) > 0) print l; skip = 1; next }
  skip && $0 == "<!-- /headline -->" { skip = 0; next }
  !skip { print }' README.md > README.md.tmp
mv README.md.tmp README.md
