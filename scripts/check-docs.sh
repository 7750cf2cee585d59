#!/usr/bin/env bash
# Checks that the docs stay true to the tree (run by scripts/test.sh):
#   1. every repository path that ARCHITECTURE.md, the READMEs, CHANGELOG.md and docs/ name
#      exists: Markdown link targets, and `backticked` paths whose first part is a file or
#      directory at the top of the repository or beside the document;
#   2. no tracked file outside the captured test data points at the work tracker (a `#` and
#      digits, or the tracker's word for an entry followed by a number): code and docs say what
#      they do and why, not which ticket asked for it;
#   3. README.md stays under 16 KB.
# Prints one line per problem (file:line: what) and exits 1 when there is any.
#
# Usage: scripts/check-docs.sh [ROOT]   (default: this repository)
set -euo pipefail

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

if ((fail)); then
  exit 1
fi
echo "check-docs: $(wc -w <<<"$docs") documents; paths, tracker references and README size ok"
