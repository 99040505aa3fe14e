# Shell helpers the bench scripts share (sourced).
TIMEFORMAT='%U %S'

# CPU seconds (user + system) of a command, its output discarded.
cpu() {
	local t
	t=$( { time "$@" >/dev/null 2>&1; } 2>&1 )
	awk -v t="$t" 'BEGIN { split(t, a, " "); printf "%.3f", a[1] + a[2] }'
}
