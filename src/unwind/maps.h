/* The executable mappings of one process, each with a CFI table built lazily the first
 * time a pc in it is unwound. Internal to libsonde.
 *
 * Call order: sonde__unwind_maps_new, then sonde__unwind_maps_add (or sonde__unwind_maps_load_pid) for each
 * mapping, then any number of sonde__unwind_dwarf calls with sonde__unwind_maps_find as the module
 * lookup and the maps as its context, then sonde__unwind_maps_free. Not thread-safe.
 */
#ifndef SONDE_UNWIND_MAPS_H
#define SONDE_UNWIND_MAPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind/dwarf.h"

struct unwind_maps;

/* An empty set of mappings; pid (0 when none) selects /proc/PID/map_files/ to open files,
 * which reaches deleted or replaced binaries. NULL and errno on failure. */
struct unwind_maps *sonde__unwind_maps_new(pid_t pid);

/* Adds the executable mapping [start, end) of file offset pgoff of the file (dev, inode)
 * at path ("[vdso]": the vDSO, read from the process's memory). Its table is built on first
 * use (unwind/cache.h). Returns 0 or -errno. */
int sonde__unwind_maps_add(struct unwind_maps *m, uint64_t start, uint64_t end, uint64_t pgoff,
		    uint64_t dev, uint64_t inode, const char *path);

/* Adds every executable mapping of process pid from /proc/PID/maps (files and the vDSO).
 * Returns the number added or -errno. */
int sonde__unwind_maps_load_pid(struct unwind_maps *m, pid_t pid);

/* unwind_find_module_fn over the maps (ctx is the struct unwind_maps *). Builds the
 * mapping's table on first use; a mapping whose table cannot be built reports no CFI. */
bool sonde__unwind_maps_find(void *ctx, uint64_t pc, struct unwind_module *out);

/* Frees the maps and their tables; NULL is fine. */
void sonde__unwind_maps_free(struct unwind_maps *m);

#endif
