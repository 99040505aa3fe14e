/* The recorder's single call into the unwinder: registers and stack copy in, spool frames
 * and the reason the walk ended out. Internal.
 *
 * DWARF CFI unwinding (unwind/dwarf.h) with the frame-pointer walk as its per-frame
 * fallback; the process's module table tells which file each pc belongs to, and the
 * recording's unwind cache holds each file's CFI table, built when a pc in it is first hit.
 */
#ifndef SONDE_RECORD_STACK_H
#define SONDE_RECORD_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sonde/spool.h>

#include "record/modules.h"
#include "unwind/cache.h"
#include "unwind/dwarf.h"

/* The unwinder's module lookup (unwind_find_module_fn) over a process's module table, with
 * the recording's table cache (NULL: no module has CFI, frame pointers walk every frame);
 * ctx is a struct rec_find_ctx whose first three fields are set and the rest zero. The
 * last module found is remembered, consecutive frames being mostly in the same one, so
 * the table must not change while a ctx is in use; each entry remembers what the cache
 * said of it (rec_module.unw_cache), so a table must not outlive the cache it was used
 * with. */
struct rec_find_ctx {
	const struct rec_modtable *mods;
	struct unwind_cache *cache;
	pid_t pid;
	const struct rec_module *last;
};
bool sonde__record_find_module(void *ctx, uint64_t pc, struct unwind_module *out);
/* What the unwind cache knows module m of process pid by. Borrows m's path. */
struct unwind_mapping sonde__record_unwind_mapping(pid_t pid, const struct rec_module *m);

/* Unwinds one sample of process pid into frames[0..max) (innermost first; callers as return
 * address minus one), each translated to (module id, file offset) when a module of mods
 * covers it, else (0, raw address). Counts CFI and fallback steps into stats. Returns the
 * number of frames and sets *end. */
size_t sonde__record_unwind(const struct unwind_regs *regs, const struct unwind_stack *stack,
		     const struct rec_modtable *mods, struct unwind_cache *cache, pid_t pid,
		     struct unwind_stats *stats, struct sonde_spool_frame *frames, size_t max,
		     enum unwind_end *end);

#endif
