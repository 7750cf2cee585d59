#!/usr/bin/env bash
# Instructions per byte of the engine under callgrind, which do not move with the host's load:
# the streamed restore of a generated LIST and WATCH body (`stream_list`), beside our validating
# skip and serde_json's `IgnoredAny` scan of the same bytes (`skip_json`). Prints a Markdown
# report between `<!-- report:instructions -->` markers, stamped with date, commit and machine.
# Not in CI: valgrind runs the engine about 50 times slower than the hardware.
#
# Usage: scripts/bench-instructions.sh [MB]   (body size, default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-10}
command -v valgrind >/dev/null || { echo "bench-instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --locked -q --release -j2 -p kube-api-rewriter-benches --bin gen_list --bin stream_list --bin skip_json
TARGET=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=$TARGET/release
work=$(mktemp -d "${TMPDIR:-/tmp}/kar-instructions.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bin/gen_list" "$mb" "$work/list.json" >&2
"$bin/gen_list" --watch "$mb" "$work/watch.json" >&2

# Instructions callgrind counted for one run of the command (its input on stdin).
count() {
  local input=$1; shift
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$@" < "$input" > /dev/null 2> "$work/cg.log" \
    || { cat "$work/cg.log" >&2; exit 1; }
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/cg.log"
}
# The instructions of one run less those of a run on an empty body of the same kind, so that
# start-up (the rules' parse) is not spread over the bytes.
per_byte() { awk -v n="$1" -v z="$2" -v b="$3" 'BEGIN { printf "%.2f", (n - z) / b }'; }

printf '{"kind":"List","items":[]}' > "$work/empty-list.json"
printf '' > "$work/empty-watch.json"
rows=()
for kind in list watch; do
  body=$work/$kind.json
  bytes=$(stat -c %s "$body")
  flag=; skip_flag=
  [[ $kind == watch ]] && { flag=--watch; skip_flag=--ndjson; }
  restore=$(count "$body" "$bin/stream_list" $flag)
  restore0=$(count "$work/empty-$kind.json" "$bin/stream_list" $flag)
  ours=$(count /dev/null "$bin/skip_json" ours $skip_flag "$body")
  ours0=$(count /dev/null "$bin/skip_json" ours $skip_flag "$work/empty-$kind.json")
  serde=$(count /dev/null "$bin/skip_json" serde $skip_flag "$body")
  serde0=$(count /dev/null "$bin/skip_json" serde $skip_flag "$work/empty-$kind.json")
  r=$(per_byte "$restore" "$restore0" "$bytes")
  o=$(per_byte "$ours" "$ours0" "$bytes")
  s=$(per_byte "$serde" "$serde0" "$bytes")
  ratio=$(awk -v r="$r" -v s="$s" 'BEGIN { printf "%.2f", r / s }')
  label=LIST; [[ $kind == watch ]] && label=WATCH
  rows+=("| $label, $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB | $s | $o | $r | $ratio |")
done

commit=${BENCH_STAMP_COMMIT:-$(git rev-parse --short=12 HEAD)$([[ -n $(git status --porcelain --untracked-files=no) ]] && echo +changes)}
cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
echo "<!-- report:instructions -->"
echo "_Measured $(date -u '+%Y-%m-%d %H:%M') UTC, commit $commit, $(nproc) cores ($cpu), $(uname -m) $(uname -s | tr '[:upper:]' '[:lower:]'), valgrind $(valgrind --version | sed 's/valgrind-//')._"
echo
echo "| body | serde_json \`IgnoredAny\` scan | our validating skip | our restore | restore / scan |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "Instructions per byte counted by callgrind, start-up (a run on an empty body) subtracted; the restore streamed in 256 KiB reads by \`stream_list\`, the scans by \`skip_json\`."
echo "<!-- /report:instructions -->"
