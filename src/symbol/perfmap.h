/* JIT symbol maps, /tmp/perf-PID.map, read with perf's rules. Internal.
 *
 * A line is "START SIZE NAME": START and SIZE in hex (a 0x prefix is accepted, as
 * strtoull base 16 does), separated by one character; NAME is the rest of the line,
 * spaces included. Lines whose name is shorter than 3 characters are skipped, as perf
 * skips them. When entries overlap, the later line wins over the part it covers (JITs
 * reuse code memory and append the new name). A size of 0 reaches to the next entry.
 *
 * The map is re-read when the file changes: appended lines are parsed incrementally, a
 * truncated or replaced file is parsed again from the start.
 */
#ifndef SONDE_SYMBOL_PERFMAP_H
#define SONDE_SYMBOL_PERFMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "symbol/strpool.h"

struct perfmap_entry {
	uint64_t start, end;
	const char *name;
};

struct perfmap {
	struct strpool names;
	struct perfmap_entry *lines; /* every entry in file order */
	size_t n_lines, cap_lines;
	size_t n_complete; /* lines from newline-terminated text (the rest is provisional) */
	struct perfmap_entry *segs; /* disjoint, sorted: the winner for each range */
	size_t n_segs;
	/* what was read of the file */
	uint64_t ino, dev;
	int64_t mtime_ns;
	uint64_t size;
	uint64_t parsed; /* bytes of complete lines consumed */
};

/* Parses lines from buf[0..len); only newline-terminated lines are consumed unless
 * at_eof (then a last unterminated line is parsed, but not counted as consumed, so that
 * it is read again once complete). Returns the bytes consumed, or -ENOMEM. Call
 * perfmap_index afterwards. */
ssize_t perfmap_parse(struct perfmap *pm, const char *buf, size_t len, int at_eof);
/* Rebuilds the lookup table from the parsed lines. 0 or -ENOMEM. */
int perfmap_index(struct perfmap *pm);
const struct perfmap_entry *perfmap_find(const struct perfmap *pm, uint64_t addr);
/* Brings pm up to date with the file at path (stat, then read what is new). 0 or -errno. */
int perfmap_refresh(struct perfmap *pm, const char *path);
/* Empties the map so the next refresh reads the file anew; names already handed out
 * stay valid (they live in the pool until perfmap_free). */
void perfmap_reset(struct perfmap *pm);
void perfmap_free(struct perfmap *pm);

#endif
