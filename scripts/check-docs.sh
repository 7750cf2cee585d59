#!/usr/bin/env bash
# Checks that the docs stay true to the tree (run by scripts/test.sh):
#   1. every repository path that ARCHITECTURE.md, the READMEs, CHANGELOG.md and docs/ name
#      exists: Markdown link targets, and `backticked` paths whose first part is a file or
#      directory at the top of the repository or beside the document;
#   2. no tracked file outside the captured test data points at the work tracker (a `#` and
#      digits, or the tracker's word for an entry followed by a number): code and docs say what
#      they do and why, not which ticket asked for it;
#   3. README.md stays under 16 KB;
#   4. every figure of README.md's headline is the cell of docs/benchmarks.md it says it quotes
#      (table › row › column; or that cell up to its first " ("), and the headline names the run
#      of each table it quotes as the table's stamp does (scripts/bench-headline.sh writes it);
#   5. ARCHITECTURE.md's crate diagram draws every path dependency among the workspace's crates
#      (and among the crates outside it that it names), as `cargo metadata` lists them, and no
#      other (needs cargo and jq).
# Prints one line per problem (file:line: what) and exits 1 when there is any.
#
# Usage: scripts/check-docs.sh [ROOT]   (default: this repository)
set -euo pipefail

# shellcheck source=lib/bench-tables.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-tables.sh"
ROOT=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
cd "$ROOT"
fail=0
problem() { echo "check-docs: $*" >&2; fail=1; }

docs=$(git ls-files --cached --others --exclude-standard -- 'ARCHITECTURE.md' 'CHANGELOG.md' '*README.md' 'docs/*.md' |
  grep -v '^testdata/' | sort -u)

# Is $2 (a path named in document $1) in the tree? Relative to the document, then to the root.
exists() {
  local dir p=${2%/}
  dir=$(dirname "$1")
  p=${p%%#*}
  [[ -z $p || -e $dir/$p || -e $p ]]
}

# Should a backticked span be read as a repository path? Only a plain relative path whose first
# part exists at the top or beside the document (`rules/kubevirt.yaml`, `src/main.rs`): API
# paths, media types, label keys and build outputs (`target/...`) are not files of the tree.
path_like() {
  local doc=$1 s=$2 first
  [[ $s =~ ^[A-Za-z0-9_.][A-Za-z0-9_./-]*$ && $s == */* && $s != *..* ]] || return 1
  first=${s%%/*}
  [[ $first != target && $first != . ]] || return 1
  [[ -e $first || -e $(dirname "$doc")/$first ]]
}

for doc in $docs; do
  [[ -f $doc ]] || continue
  n=0
  in_code=0
  while IFS= read -r line; do
    n=$((n + 1))
    # Fenced code blocks hold commands and examples, not references to the tree.
    if [[ $line =~ ^[[:space:]]*\`\`\` ]]; then
      in_code=$((1 - in_code))
      continue
    fi
    [[ $in_code == 1 ]] && continue
    # Link targets: [text](target), not URLs or anchors.
    while read -r t; do
      [[ -z $t || $t == *://* || $t == mailto:* || $t == \#* ]] && continue
      exists "$doc" "$t" || problem "$doc:$n: link to $t, which does not exist"
    done < <(grep -oE '\]\([^)[:space:]]+\)' <<<"$line" | sed -E 's/^\]\((.*)\)$/\1/')
    # Backticked paths.
    while read -r t; do
      [[ -z $t ]] && continue
      path_like "$doc" "$t" || continue
      exists "$doc" "$t" || problem "$doc:$n: \`$t\` does not exist"
    done < <(grep -oE '`[^`]+`' <<<"$line" | tr -d '`')
  done < "$doc"
done

# Tracker references: `#` and digits (not `&#NN;`, `{:#?}`, `$#`), or the word and a number.
while IFS= read -r hit; do
  problem "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): names a tracker entry: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//' | cut -c1-100)"
done < <(git ls-files --cached --others --exclude-standard |
  grep -vE '^(testdata/|fuzz/corpus/|scripts/check-docs\.sh$)|(\.lock|go\.sum)$' |
  while read -r f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
  xargs -0 grep -nIE '(^|[^&A-Za-z0-9_/{$])#[0-9]+\b|\b[Ii]ssues? #?[0-9]+\b' 2>/dev/null || true)

size=$(wc -c < README.md)
if ((size >= 16384)); then
  problem "README.md: $size bytes; it stays under 16 KB (details go to docs/)"
fi

# 4. The README's headline quotes docs/benchmarks.md.
headline() {
  local rows c line figure q t rest row col out at cell stamp_line runs group names n run s
  local -A quoted=() named=()
  if ! grep -qxF '<!-- headline -->' README.md; then
    problem "README.md: no <!-- headline --> block"
    return
  fi
  # The rows after the header: measure, figure, quote.
  rows=$(md_rows README.md '<!-- headline -->' '<!-- /headline -->' | tail -n +2)
  [[ -n $rows ]] || problem "README.md: the headline has no rows"
  while IFS=$US read -r -a c; do
    [[ -n ${c[0]-} ]] || continue
    line=${c[0]} figure=${c[2]-} q=${c[3]-}
    rest=${q#* › }
    if [[ $q != *" › "* || $rest != *" › "* || ${rest#* › } == *" › "* ]]; then
      problem "README.md:$line: headline row quotes no table › row › column: \"$q\""
      continue
    fi
    t=${q%% › *} row=${rest% › *} col=${rest##* › }
    quoted[$t]=$line
    if ! out=$(bench_cell docs/benchmarks.md "$t" "$row" "$col"); then
      problem "README.md:$line: headline quotes $q, which docs/benchmarks.md does not have: $out"
      continue
    fi
    IFS=$US read -r at _ cell <<<"$out"
    if [[ -z $figure || ($cell != "$figure" && $cell != "$figure ("*) ]]; then
      problem "README.md:$line: headline figure \"$figure\" is not in the table it quotes: docs/benchmarks.md:$at ($q) says \"$cell\""
    fi
  done <<<"$rows"
  # The runs: `_Quoted from ...: engine and proxy DATE, commit C, CPU; load DATE, ..._`.
  stamp_line=$(awk '$0 == "<!-- headline -->" { on = 1 } on && /^_Quoted from / { print NR; exit }' README.md)
  if [[ -z $stamp_line ]]; then
    problem "README.md: the headline does not say which runs its tables come from (a _Quoted from ..._ line)"
    return
  fi
  runs=$(sed -n "${stamp_line}p" README.md | sed -E 's/^[^:]*: //; s/\._$//')
  while IFS= read -r group; do
    if [[ ! $group =~ ^(.+)\ ([0-9]{4}-[0-9]{2}-[0-9]{2},\ commit\ .+)$ ]]; then
      problem "README.md:$stamp_line: headline run \"$group\" is not TABLES DATE, commit C, MACHINE"
      continue
    fi
    names=${BASH_REMATCH[1]} run=${BASH_REMATCH[2]}
    for n in ${names//,/ }; do
      [[ $n == and ]] && continue
      named[$n]=1
      s=$(bench_stamp docs/benchmarks.md "$n") || s="no stamp"
      [[ $s == "$run" ]] ||
        problem "README.md:$stamp_line: headline says table $n is from $run, but its stamp in docs/benchmarks.md says $s"
    done
  done < <(sed 's/; /\n/g' <<<"$runs")
  for t in "${!quoted[@]}"; do
    [[ -n ${named[$t]-} ]] || problem "README.md:$stamp_line: headline quotes table $t (line ${quoted[$t]}) but does not name its run"
  done
}
headline

# 5. ARCHITECTURE.md's crate diagram against cargo metadata. Each line with arrows is read as
# lists of crate directories between them (`a, b ─► c ─► d`); notes in brackets are dropped.
trim() {
  local s=${1#"${1%%[![:space:]]*}"}
  printf '%s' "${s%"${s##*[![:space:]]}"}"
}
crates() {
  local doc=ARCHITECTURE.md start n line item i a b e dir name meta root
  local -a parts from to
  local -A member=() outside=() named=() drawn=() real=() pkg=()
  if ! command -v jq >/dev/null || ! command -v cargo >/dev/null; then
    problem "$doc: the crate diagram is checked with cargo and jq; install them (scripts/test-tools.sh installs jq)"
    return
  fi
  root=$(pwd -P)/
  start=$(awk '/^## Crates$/ { h = 1; next } h && /^```/ { print NR; exit }' "$doc")
  if [[ -z $start ]]; then
    problem "$doc: no crate diagram (a fenced block after \"## Crates\")"
    return
  fi
  # Workspace members, by directory.
  if ! meta=$(cargo metadata --offline --no-deps --format-version 1); then
    problem "$doc: cargo metadata failed, so the crate diagram is not checked"
    return
  fi
  while IFS=$'\t' read -r dir name; do
    member[$dir]=1
    pkg[$dir]=$name
  done < <(jq -r --arg root "$root" '.packages[] | [(.manifest_path | ltrimstr($root) | rtrimstr("/Cargo.toml")), .name] | @tsv' <<<"$meta")

  # What the diagram draws.
  n=$start
  while IFS= read -r line; do
    n=$((n + 1))
    [[ $line == '```'* ]] && break
    [[ $line == *►* ]] || continue
    while [[ $line =~ \([^()]*\) ]]; do line=${line/"${BASH_REMATCH[0]}"/}; done
    line=${line//─►/$US─$US}
    line=${line//┄►/$US┄$US}
    IFS=$US read -r -a parts <<<"$line"
    for ((i = 0; i + 2 < ${#parts[@]}; i += 2)); do
      IFS=, read -r -a from <<<"${parts[i]}"
      IFS=, read -r -a to <<<"${parts[i + 2]}"
      for a in "${from[@]}"; do
        for b in "${to[@]}"; do
          a=$(trim "$a") b=$(trim "$b")
          for item in "$a" "$b"; do
            named[$item]=1
            if [[ -z ${member[$item]-} && -z ${outside[$item]-} ]]; then
              if [[ $item != *" "* && -n $item && -f $item/Cargo.toml ]]; then
                outside[$item]=1
              elif [[ $item == *" "* || -z $item ]] || ! compgen -G "$item" >/dev/null; then
                problem "$doc:$n: the crate diagram has \"$item\" where a crate's directory (or a path of the tree) belongs"
              fi
            fi
          done
          if [[ -n ${member[$a]-}${outside[$a]-} && -n ${member[$b]-}${outside[$b]-} ]]; then
            drawn["$a ${parts[i + 1]}► $b"]=$n
          fi
        done
      done
    done
  done < <(tail -n +$((start + 1)) "$doc")

  # What cargo metadata lists: path dependencies between those crates, ─► when any is a normal
  # or build dependency, ┄► when all are dev-dependencies.
  for dir in "${!outside[@]}"; do
    if ! meta+=$'\n'$(cargo metadata --offline --no-deps --format-version 1 --manifest-path "$dir/Cargo.toml"); then
      problem "$doc: cargo metadata failed for $dir, so the crate diagram is not checked"
      return
    fi
  done
  while IFS=$'\t' read -r user dep kind; do
    [[ -n ${member[$dep]-}${outside[$dep]-} && -n ${member[$user]-}${outside[$user]-} ]] || continue
    if [[ $kind != dev ]]; then
      real["$dep ─► $user"]=1
      unset 'real[$dep ┄► $user]'
    elif [[ -z ${real["$dep ─► $user"]-} ]]; then
      real["$dep ┄► $user"]=1
    fi
  done < <(jq -r --arg root "$root" '.packages[] | (.manifest_path | ltrimstr($root) | rtrimstr("/Cargo.toml")) as $me
      | .dependencies[] | select(.path) | [$me, (.path | ltrimstr($root)), (.kind // "normal")] | @tsv' <<<"$meta")

  while IFS= read -r e; do
    [[ -n $e ]] || continue
    [[ -n ${drawn[$e]-} ]] || problem "$doc:$start: the crate diagram misses $e (cargo metadata: ${e##* } depends on ${e%% *}$([[ $e == *┄►* ]] && echo ", in its tests only"))"
  done < <(printf '%s\n' "${!real[@]}" | sort)
  while IFS= read -r e; do
    [[ -n $e ]] || continue
    [[ -n ${real[$e]-} ]] || problem "$doc:${drawn[$e]}: the crate diagram draws $e, which cargo metadata does not list"
  done < <(printf '%s\n' "${!drawn[@]}" | sort)
  while IFS= read -r dir; do
    [[ -n $dir ]] || continue
    [[ -n ${named[$dir]-} ]] || problem "$doc:$start: the crate diagram leaves out the workspace crate $dir (${pkg[$dir]})"
  done < <(printf '%s\n' "${!member[@]}" | sort)
}
crates

if ((fail)); then
  exit 1
fi
echo "check-docs: $(wc -w <<<"$docs") documents; paths, tracker references, README size, headline quotes and crate diagram ok"
