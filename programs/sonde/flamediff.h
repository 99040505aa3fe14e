/* Differential profiles from folded stacks: `sonde report --diff` and `sonde convert --diff`.
 *
 * Two folded profiles ("outer;...;inner COUNT" lines) are merged stack by stack, as Brendan
 * Gregg's difffolded.pl does, with the first profile's counts scaled to the second's total
 * (difffolded -n) so that recordings of different lengths compare. The flame graph is drawn
 * from the second profile (its widths), each frame colored by how its own (self) samples
 * changed: red grew, blue shrank, white unchanged, as flamegraph.pl colors a differential
 * graph.
 */
#ifndef SONDE_CLI_FLAMEDIFF_H
#define SONDE_CLI_FLAMEDIFF_H

#include <stddef.h>
#include <stdint.h>

struct diff_stack {
	char *text;  /* "outer;...;inner" */
	double a, b; /* samples in the first profile (scaled) and in the second */
};

struct flame_diff {
	struct diff_stack *v;
	size_t n;
	uint64_t total_a, total_b; /* samples of each, before scaling */
};

/* Merges two folded texts (NUL-terminated; read only). 0 or -errno (-EINVAL: a line that
 * is not "STACK COUNT"). */
int flame_diff_build(struct flame_diff *d, const char *folded_a, const char *folded_b);
void flame_diff_free(struct flame_diff *d);
/* Writes the differential flame graph as a standalone SVG (the same zoom and search as
 * `sonde convert -o x.svg`). 0 or -errno. */
int flame_diff_write_svg(const struct flame_diff *d, int fd, const char *title);

#endif
