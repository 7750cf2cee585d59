# The benchmark tables of docs/benchmarks.md, read (sourced; bash): scripts/bench-headline.sh
# quotes their cells into README.md's headline, and scripts/check-docs.sh checks those quotes.
# Cells are handed on separated by US (\037), never by tabs: a tab is whitespace to `read`, which
# would merge an empty cell into its neighbour.

US=$'\037'

# md_rows FILE [FIRST LAST]: the rows of the Markdown tables of FILE (only those between the
# lines FIRST and LAST, when given), one line per row: its line number, then its cells, trimmed
# and unescaped (`\|` is `|`), each after a US. Header rows are included, separator rows not.
md_rows() {
  awk -v first="${2-}" -v last="${3-}" -v us="$US" '
    BEGIN { on = (first == "") }
    first != "" && $0 == first { on = 1; next }
    last != "" && $0 == last { on = 0 }
    !on || !/^\|/ { next }
    /^\|( *:?-+:? *\|)+ *$/ { next }
    {
      s = $0
      gsub(/\\\|/, "\001", s)
      sub(/^\| */, "", s)
      sub(/ *\| *$/, "", s)
      n = split(s, c, / *\| */)
      out = NR
      for (i = 1; i <= n; i++) { gsub(/\001/, "|", c[i]); out = out us c[i] }
      print out
    }' "$1"
}

# bench_table FILE NAME: md_rows of the table between `<!-- report:NAME -->` markers.
bench_table() {
  md_rows "$1" "<!-- report:$2 -->" "<!-- /report:$2 -->"
}

# bench_cell FILE NAME ROW COLUMN [glob]: the cell of table NAME in row ROW, column COLUMN.
# A row is named by its first cell, or, where that names several rows, by its first two joined
# by " / " (`in-memory double / GET of one VM, median of 2000`); with `glob`, ROW is a pattern
# (`*` for any text). COLUMN is the column's header, exactly. Prints the cell's line number,
# the row's name and the cell, separated by US; or, when there is no such cell or more than one
# row matches, prints why and returns 1.
bench_cell() {
  local file=$1 name=$2 row=$3 column=$4 how=${5:-exact}
  local rows header c col=0 i k hits=0 hit=
  rows=$(bench_table "$file" "$name")
  if [[ -z $rows ]]; then
    echo "no table between <!-- report:$name --> markers"
    return 1
  fi
  IFS=$US read -r -a header <<<"${rows%%$'\n'*}"
  for ((i = 1; i < ${#header[@]}; i++)); do
    [[ ${header[i]} == "$column" ]] && col=$i
  done
  if ((col == 0)); then
    echo "table $name has no column \"$column\""
    return 1
  fi
  while IFS=$US read -r -a c; do
    for k in "${c[1]-}" "${c[1]-} / ${c[2]-}"; do
      if [[ $how == glob && $k == $row ]] || [[ $how != glob && $k == "$row" ]]; then
        hits=$((hits + 1))
        hit="${c[0]}$US$k$US${c[col]-}"
        break
      fi
    done
  done < <(tail -n +2 <<<"$rows")
  if ((hits != 1)); then
    echo "table $name has $((hits)) rows named \"$row\" (one expected)"
    return 1
  fi
  echo "$hit"
}

# bench_stamp FILE NAME: the run table NAME comes from, as `DATE, commit C, N cores (CPU)` (its
# stamp line without the time of day, the memory, the platform and the tool versions).
bench_stamp() {
  local s
  s=$(awk -v first="<!-- report:$2 -->" -v last="<!-- /report:$2 -->" '
    $0 == first { on = 1; next } $0 == last { on = 0 } on && /^_Measured / { print; exit }' "$1")
  [[ -n $s ]] || return 1
  sed -E 's/^_Measured ([0-9]{4}-[0-9]{2}-[0-9]{2}) [^,]*, commit ([^,]+), ([0-9]+ cores \(.*\)), [^()]*$/\1, commit \2, \3/' <<<"$s"
}
