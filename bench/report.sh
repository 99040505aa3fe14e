#!/usr/bin/env bash
# Report speed: `sonde report` (the tables, --folded, and a --comm filter) of a spool of
# 400k samples, an
# older binary against this tree's, run interleaved (old, new, old, new...) so that the
# load of a shared machine weighs on both alike. The spool is a real recording of
# tests/progs/split cycled to N samples by bench-convert-synth (as bench/convert.sh
# does). CPU time is user + system of the report; the median of the runs is printed.
#
# usage: bench/report.sh OLD_SONDE [BUILD_DIR] [SAMPLES] [RUNS]   (from the source tree,
#        after make)
set -euo pipefail
OLD=$1
B=${2:-build/release}
N=${3:-400000}
R=${4:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

median() {
	sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

"$B/sonde" record -q -F 20000 -o "$tmp/real.spool" -- "$B/progs/split" 3
"$B/bench-convert-synth" "$tmp/real.spool" "$tmp/big.spool" "$N"
for args in "" "--folded" "--comm split"; do
	: >"$tmp/old"
	: >"$tmp/new"
	for _ in $(seq "$R"); do
		cpu "$OLD" report $args "$tmp/big.spool" >>"$tmp/old"
		echo >>"$tmp/old"
		cpu "$B/sonde" report $args "$tmp/big.spool" >>"$tmp/new"
		echo >>"$tmp/new"
	done
	o=$(median <"$tmp/old")
	n=$(median <"$tmp/new")
	awk -v a="report $args" -v o="$o" -v n="$n" -v r="$R" -v s="$N" 'BEGIN {
		printf "%-18s %d samples: old %.3f s, new %.3f s CPU (median of %d): new/old %.2fx\n",
		       a, s, o, n, r, (o > 0 ? n / o : 0) }'
done
