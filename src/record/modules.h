/* The executable mappings of one process, for turning sampled pcs into (module, file
 * offset) frames and for telling code addresses from garbage while unwinding. Internal.
 *
 * Entries never overlap: a new mapping replaces whatever part of older ones it covers (as
 * mmap does). Each entry keeps the spool id of the module definition it came from, and the
 * file offset of its own start, so a pc translates the same way after a split.
 */
#ifndef SONDE_RECORD_MODULES_H
#define SONDE_RECORD_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind/dwarf.h"

struct unwind_cache;

struct rec_module {
	uint64_t start, end; /* [start, end) */
	uint64_t pgoff;	     /* file offset of start */
	uint32_t id;	     /* spool module id */
	uint32_t flags;	     /* enum sonde_spool_module_flags */
	uint64_t dev, inode;
	uint32_t gen;	  /* the inode's generation (sonde__regfile_generation), 0: unknown */
	const char *path; /* owned by the table (shared between the pieces of a split) */
	/* What unw_cache said of this entry (its CFI table and bias), remembered by
	 * sonde__record_find_module: a sample's first frame asked it anew, a hash lookup and
	 * a program-header walk, a twentieth of a -a recording's CPU per sample. A cache
	 * never drops a table, and the entry's mapping (start, pgoff, file) does not change
	 * while it is set: an insert or a trim that moves start clears it. */
	const struct unwind_cache *unw_cache; /* NULL: not asked */
	struct unwind_module unw;
};

struct rec_modtable {
	struct rec_module *m; /* sorted by start */
	size_t n, cap;
	char **paths; /* every path string the table owns */
	size_t n_paths, cap_paths;
};

/* Inserts a mapping (path is copied). 0 or -ENOMEM. */
int sonde__modtable_insert(struct rec_modtable *t, const struct rec_module *m);
/* Removes [start, end) (munmap: entries are trimmed or split). 0 or -ENOMEM. */
int sonde__modtable_remove(struct rec_modtable *t, uint64_t start, uint64_t end);
/* The entry containing pc, or NULL. */
const struct rec_module *sonde__modtable_find(const struct rec_modtable *t, uint64_t pc);
/* Drops every entry (exec, exit). */
void sonde__modtable_clear(struct rec_modtable *t);
/* Copies every entry of src into dst (fork). 0 or -ENOMEM. */
int sonde__modtable_copy(struct rec_modtable *dst, const struct rec_modtable *src);
void sonde__modtable_free(struct rec_modtable *t);

/* Inserts every executable file mapping of process pid and its vDSO, read from
 * /proc/PID/maps as the recorder reads them, with no spool ids: the table the unwinder's
 * tests and benchmark look modules up in. 0 or -errno. */
int sonde__modtable_load_pid(struct rec_modtable *t, pid_t pid);

/* The GNU build id of the ELF file open at fd (at most cap bytes), read by
 * sonde__elf_build_id. Length, 0 when the file has none or is not ELF, -errno. */
int sonde__read_build_id(int fd, uint8_t *out, size_t cap);

#endif
