/* The CFI tables of the files a recording maps, shared by all its processes (keyed by file
 * identity, so a library mapped by a hundred processes is parsed once), each built the
 * first time a pc inside it is unwound. Internal to libsonde; not thread-safe.
 */
#ifndef SONDE_UNWIND_CACHE_H
#define SONDE_UNWIND_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind/dwarf.h"

/* One executable mapping, as the caller's module table knows it. */
struct unwind_mapping {
	pid_t pid;	     /* a process that maps it (to read map_files or the vDSO) */
	uint64_t start, end; /* [start, end) */
	uint64_t pgoff;	     /* file offset of start */
	uint64_t dev, inode; /* file identity; inode 0 for no file */
	uint32_t gen;	     /* the inode's generation (sonde__regfile_generation), 0: unknown */
	const char *path;    /* as in /proc/PID/maps */
	bool vdso;	     /* [vdso]: the image is read from the process's memory */
};

struct unwind_cache;

/* An empty cache. NULL and errno on failure. */
struct unwind_cache *sonde__unwind_cache_new(void);

/* Frees the cache and every table; NULL is fine. Tables handed out become invalid. */
void sonde__unwind_cache_free(struct unwind_cache *c);

/* The table and load bias for mapping m, building the file's table on first use (through
 * /proc/PID/map_files first, which reaches deleted and replaced files, then path; either
 * must have m's inode). out->table is NULL when the file has no usable CFI or cannot be
 * read; that is remembered and not retried. The table stays valid until the cache is
 * freed. Returns false only when the cache cannot allocate. */
bool sonde__unwind_cache_lookup(struct unwind_cache *c, const struct unwind_mapping *m,
			 struct unwind_module *out);

/* Tables built so far and files that had none (for summaries). */
void sonde__unwind_cache_counts(const struct unwind_cache *c, uint32_t *tables, uint32_t *without);

#endif
