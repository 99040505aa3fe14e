#!/usr/bin/env bash
# Conversion speed: `sonde convert` of a spool of a million samples into each format, next
# to `perf script` (which symbolizes and prints every callchain) on a perf.data of the same
# workload recorded at the same rate for the same time. Both recordings are real
# (tests/progs/split, frame-pointer callchains); the million-sample spool is then made of
# the sonde recording's own stacks cycled by bench-convert-synth, since recording a million
# samples would take this shared 2-core machine many minutes. Costs are compared per
# sample; CPU time is user + system of the converting process.
#
# usage: bench/convert.sh [BUILD_DIR] [SAMPLES] [FREQ] [SECONDS]   (from the source tree,
#        after make)
set -euo pipefail
B=${1:-build/release}
N=${2:-1000000}
F=${3:-20000}
S=${4:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

"$B/sonde" record -q -F "$F" -o "$tmp/real.spool" -- "$B/progs/split" "$S"
perf record -q -g -F "$F" -o "$tmp/perf.data" -- "$B/progs/split" "$S" >/dev/null 2>&1
"$B/bench-convert-synth" "$tmp/real.spool" "$tmp/big.spool" "$N"
real_samples=$("$B/sonde" convert "$tmp/real.spool" -o - -f folded --no-symbolize |
	awk '{ n += $NF } END { print n + 0 }')
perf_samples=$(perf script -i "$tmp/perf.data" -F tid 2>/dev/null | wc -l)
perf_cpu=$(cpu perf script -i "$tmp/perf.data")

printf "workload: split %ss at %s Hz; perf.data: %d samples; sonde spool: %d samples " \
	"$S" "$F" "$perf_samples" "$N"
printf "(%s bytes, cycling the %d samples of the sonde recording)\n" \
	"$(stat -c %s "$tmp/big.spool")" "$real_samples"
awk -v c="$perf_cpu" -v n="$perf_samples" 'BEGIN {
	printf "%-30s %8.3f s CPU for %8d samples = %7.3f us/sample\n", "perf script", c, n, c / n * 1e6 }'
for fmt in pprof folded speedscope svg perfetto; do
	for opt in "" --no-symbolize; do
		c=$(cpu "$B/sonde" convert "$tmp/big.spool" -o "$tmp/out" --format "$fmt" $opt)
		awk -v name="convert $fmt $opt" -v c="$c" -v n="$N" -v pc="$perf_cpu" \
		    -v pn="$perf_samples" 'BEGIN {
			us = c / n * 1e6; pus = pc / pn * 1e6;
			printf "%-30s %8.3f s CPU for %8d samples = %7.3f us/sample", name, c, n, us;
			printf "  perf script / sonde: %.0fx\n", (us > 0 ? pus / us : 0) }'
	done
done
