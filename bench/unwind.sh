#!/bin/sh
# DWARF unwinding speed: sonde's unwinder replaying samples of split-nofp (-O2, no frame
# pointers) against perf unwinding a `perf record --call-graph dwarf` recording of the
# same program (perf report and perf script, which unwind every sample with libdw or
# libunwind; they also symbolize and sort, which sonde does elsewhere, so the ratio is an
# upper bound of the unwinding share).
#
# usage: bench/unwind.sh [BUILD_DIR] [SECONDS]     (run from the source tree, after make)
set -eu
B=${1:-build/release}
S=${2:-2}
FREQ=4000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$B/bench-unwind" "$B/progs/split-nofp" "$S" "$FREQ" | tee "$tmp/sonde.txt"
sonde_pass=$(awk '/^sonde_unwind_seconds_per_pass/{print $2}' "$tmp/sonde.txt")
sonde_samples=$(awk '/^samples/{print $2+0}' "$tmp/sonde.txt")

perf record -q --call-graph dwarf,16384 -F "$FREQ" -o "$tmp/perf.data" \
	"$B/progs/split-nofp" "$S" >/dev/null 2>&1
perf_samples=$(perf script -i "$tmp/perf.data" -F tid 2>/dev/null | wc -l)
# CPU time (task-clock, ms) of each perf run: comparable to sonde's thread CPU time on a
# shared machine.
cpu_ms() {
	perf stat -x, -e task-clock -o "$tmp/stat" "$@" >/dev/null 2>&1
	awk -F, '/task-clock/{print $1}' "$tmp/stat"
}
rep_ms=$(cpu_ms perf report -i "$tmp/perf.data" --stdio)
scr_ms=$(cpu_ms perf script -i "$tmp/perf.data")

awk -v sp="$sonde_pass" -v ss="$sonde_samples" -v ps="$perf_samples" -v rm="$rep_ms" \
    -v sm="$scr_ms" 'BEGIN {
	sonde = sp / ss; rep = rm / 1e3 / ps; scr = sm / 1e3 / ps;
	printf "perf report: %d samples in %.3f s CPU = %.1f us/sample\n", ps, rm / 1e3, rep * 1e6;
	printf "perf script: %d samples in %.3f s CPU = %.1f us/sample\n", ps, sm / 1e3, scr * 1e6;
	printf "sonde unwind: %.2f us/sample (CPU)\n", sonde * 1e6;
	printf "ratio perf report / sonde: %.1fx, perf script / sonde: %.1fx\n", rep / sonde, scr / sonde;
}'
