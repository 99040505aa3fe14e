/* /proc/PID/maps parsing. Internal.
 *
 * A line: "start-end perms offset major:minor inode   path", numbers in hex except the
 * inode. The path is everything after the inode's padding (it may contain spaces) and may
 * end in " (deleted)"; pseudo paths such as "[vdso]" are kept as they are.
 */
#ifndef SONDE_PROC_MAPS_H
#define SONDE_PROC_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_map {
	uint64_t start, end, pgoff, inode;
	uint32_t dev_major, dev_minor;
	bool read, write, exec, shared;
	const char *path; /* points into the parsed buffer; path_len bytes, not NUL-terminated */
	size_t path_len;
};

/* Whether m is executable code a module table keeps: any executable mapping but the
 * legacy [vsyscall] page (which no process runs code in and perf never reports). An
 * anonymous one (JIT code) is kept. */
bool sonde__proc_map_is_code(const struct proc_map *m);

/* Called for each mapping; a nonzero return stops the walk and is returned. */
typedef int (*proc_map_fn)(void *ctx, const struct proc_map *m);

/* Parses the text of a maps file (buf, len). Returns 0, the callback's nonzero value, or
 * -SONDE_E_FORMAT at the first malformed line (mappings before it have been reported). */
int sonde__proc_maps_parse(const char *buf, size_t len, proc_map_fn fn, void *ctx);
/* Reads /proc/PID/maps and parses it. */
int sonde__proc_maps_read(pid_t pid, proc_map_fn fn, void *ctx);

#endif
