#!/usr/bin/env bash
# Loss at the default ring sizes: what `sonde record` loses, with no --ring-pages, in the two
# workloads the ring sizing is made for (docs/record.md, "Ring sizing"):
#
#   threads   sonde record -- progs/spin_threads 64 SECONDS: 64 threads busy at once, started
#             by the recorded program itself (per-thread events, one ring per CPU)
#   system    sonde record -a -d SECONDS while two progs/split run, never named (per-CPU
#             events; their first drains meet both busy processes at once)
#   offcpu    sonde record --off-cpu -- progs/pingpong SECONDS: two threads bouncing a byte
#             through pipes, every switch-out a record (the default backend; OFFCPU_BACKEND
#             in the environment passes --off-cpu-backend to sonde)
#
# With HOG (a number of threads), progs/spin_threads HOG runs beside every case for the
# whole bench: a second CPU-heavy job on the machine.
#
# Each repetition runs both, one after the other, and prints the records and samples each
# lost (its summary's loss line) and how many rings doubled after a loss; the closing lines
# give, per workload, the runs that lost anything and the median and largest loss. These are
# figures of a machine, not assertions: a recorder that another job starves for longer than
# its rings last loses records through no fault of the sizing, which shows as an odd run out
# of several, while a sizing that is too small loses in every run. Run it on a quiet machine
# to judge the sizing; the test suite checks only that losses are counted and recovered
# (system_loss_is_recovered_and_rings_grow, record_counts_lost_events).
#
# usage: bench/loss-at-defaults.sh [BUILD_DIR] [REPS] [SECONDS] [HOG]   (from the source
#        tree, after make; defaults build/release 5 4 0; needs root or perf_event_paranoid
#        <= 0 for the system-wide workload)
set -euo pipefail
B=${1:-build/release}
N=${2:-5}
S=${3:-4}
HOG=${4:-0}
tmp=$(mktemp -d)
busy=()
hog=()
cleanup() {
	[ ${#busy[@]} -eq 0 ] || kill -KILL "${busy[@]}" 2>/dev/null || true
	[ ${#hog[@]} -eq 0 ] || { kill -KILL "${hog[@]}" 2>/dev/null; wait "${hog[@]}" 2>/dev/null; } || true
	rm -rf "$tmp"
}
trap cleanup EXIT

for f in "$B/sonde" "$B/progs/spin_threads" "$B/progs/split" "$B/progs/pingpong"; do
	[ -x "$f" ] || { echo "loss-at-defaults: no $f (run make first)" >&2; exit 1; }
done

# "RECORDS SAMPLES GROWS" of one summary on stdin.
loss_of() {
	awk '
	/loss: [0-9]+ records and [0-9]+ samples lost/ {
		for (i = 1; i <= NF; i++)
			if ($i == "loss:") { r = $(i + 1); s = $(i + 4) }
	}
	/rings? doubled after a loss/ {
		for (i = 2; i <= NF; i++)
			if ($i ~ /^rings?$/ && $(i + 1) == "doubled") g = $(i - 1)
	}
	END { printf "%d %d %d\n", r, s, g }'
}

run() {
	local name=$1 rep=$2 err=$tmp/err
	shift 2
	if ! "$@" 2>"$err" >/dev/null; then
		echo "loss-at-defaults: $name: $* failed:" >&2
		cat "$err" >&2
		exit 1
	fi
	read -r records samples grows < <(loss_of <"$err")
	printf "%-8s run %d: %6d records %6d samples lost, %d rings doubled\n" \
		"$name" "$rep" "$records" "$samples" "$grows"
	echo "$name $((records + samples))" >>"$tmp/figures"
	rm -f "$tmp/t.spool"
}

echo "loss at the default ring sizes: $N runs of $S s each, $(nproc) CPUs," \
	"load $(cut -d' ' -f1-3 /proc/loadavg), ${HOG} busy threads beside"
if [ "$HOG" -gt 0 ]; then
	# long enough for every case of every run; killed at the end
	"$B/progs/spin_threads" "$HOG" $((N * (3 * S + 20) + 60)) >/dev/null & hog+=($!)
fi
offcpu_backend=()
[ -z "${OFFCPU_BACKEND:-}" ] || offcpu_backend=(--off-cpu-backend "$OFFCPU_BACKEND")
for rep in $(seq 1 "$N"); do
	run threads "$rep" "$B/sonde" record -o "$tmp/t.spool" -- "$B/progs/spin_threads" 64 "$S"
	"$B/progs/split" $((S + 30)) & busy+=($!)
	"$B/progs/split" $((S + 30)) & busy+=($!)
	sleep 0.3 # both running before the recorder reads /proc
	run system "$rep" "$B/sonde" record -a -d "$S" -o "$tmp/t.spool"
	kill -KILL "${busy[@]}" 2>/dev/null || true
	wait "${busy[@]}" 2>/dev/null || true
	busy=()
	run offcpu "$rep" "$B/sonde" record --off-cpu "${offcpu_backend[@]}" -o "$tmp/t.spool" \
		-- "$B/progs/pingpong" "$S"
done
for name in threads system offcpu; do
	awk -v n="$name" '$1 == n { print $2 }' "$tmp/figures" | sort -n | awk -v n="$name" '
	{ v[++k] = $1; lossy += $1 > 0 }
	END {
		med = k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
		printf "%-8s %d of %d runs lost records; lost per run: median %g, largest %d\n",
			n, lossy, k, med, v[k]
	}'
done
