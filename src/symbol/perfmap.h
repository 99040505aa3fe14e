/* JIT symbol maps, /tmp/perf-PID.map, read with perf's rules. Internal.
 *
 * A line is "START SIZE NAME": START and SIZE in hex (a 0x prefix is accepted, as
 * strtoull base 16 does), separated by one character; NAME is the rest of the line,
 * spaces included. Lines whose name is shorter than 3 characters are skipped, as perf
 * skips them. When entries overlap, the later line wins over the part it covers (JITs
 * reuse code memory and append the new name). A size of 0 reaches to the next entry.
 *
 * The map is re-read when the file changes: appended lines are parsed incrementally, a
 * truncated or replaced file is parsed again from the start. The file is read in pieces
 * of PERFMAP_MAX_LINE bytes, so no buffer of the file's size is ever held; a longer line
 * is skipped. Anyone can create /tmp/perf-PID.map for any pid, so the file is opened
 * with sonde__regfile_open's rules (base/regfile.h): a regular file, no symbolic link, at most
 * PERFMAP_MAX_BYTES, owned by root or by the process's user (docs/symbolize.md).
 */
#ifndef SONDE_SYMBOL_PERFMAP_H
#define SONDE_SYMBOL_PERFMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/regfile.h"
#include "symbol/strpool.h"

enum {
	PERFMAP_MAX_BYTES = 64 << 20, /* a bigger file is refused, not read */
	PERFMAP_MAX_LINE = 64 << 10,  /* the read size, and the longest line kept */
};

/* What identifies one state of the file: changed (written, replaced, chown'ed), it is
 * looked at again. */
struct perfmap_file {
	uint64_t ino, dev, size;
	int64_t mtime_ns, ctime_ns;
};

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
	struct perfmap_file read; /* what was read of the file */
	uint64_t parsed;	  /* bytes of complete lines consumed */
	/* The file last refused, and why: it is not opened (or counted) again until it
	 * changes. */
	struct perfmap_file refused;
	int refused_err;
};

/* Parses lines from buf[0..len); only newline-terminated lines are consumed unless
 * at_eof (then a last unterminated line is parsed, but not counted as consumed, so that
 * it is read again once complete). Returns the bytes consumed, or -ENOMEM. Call
 * sonde__perfmap_index afterwards. */
ssize_t sonde__perfmap_parse(struct perfmap *pm, const char *buf, size_t len, int at_eof);
/* Source of the file's bytes for sonde__perfmap_read: up to len bytes at offset off into buf;
 * returns the count, 0 at the end, or -errno. */
typedef ssize_t (*perfmap_read_fn)(void *ctx, char *buf, size_t len, uint64_t off);
/* Parses what is new, from pm->parsed up to size, reading piece bytes at a time (a line
 * of piece bytes or more is skipped; an unterminated last one is kept up to piece bytes),
 * then indexes. The file reader's loop, separate so that it can be fuzzed with small
 * pieces. 0, -ENOMEM, or the read's -errno. */
int sonde__perfmap_read(struct perfmap *pm, perfmap_read_fn fill, void *ctx, uint64_t size, size_t piece);
/* Rebuilds the lookup table from the parsed lines. 0 or -ENOMEM. */
int sonde__perfmap_index(struct perfmap *pm);
const struct perfmap_entry *sonde__perfmap_find(const struct perfmap *pm, uint64_t addr);
/* Brings pm up to date with pid's map at path (lstat, then read what is new), opened by
 * sonde__regfile_open's rules: no symbolic link, at most PERFMAP_MAX_BYTES, owned by root or by
 * the user pid runs as (looked up each time the file is opened anew; when pid is gone,
 * the caller's euid, as perf does). Refusals are counted in refusals (may be NULL). 0, or
 * a -errno of sonde__regfile_open or pread (what was read before stays). */
int sonde__perfmap_refresh(struct perfmap *pm, const char *path, pid_t pid,
		    struct regfile_refusals *refusals);
/* Empties the map so the next refresh reads the file anew; names already handed out
 * stay valid (they live in the pool until sonde__perfmap_free). */
void sonde__perfmap_reset(struct perfmap *pm);
void sonde__perfmap_free(struct perfmap *pm);

#endif
