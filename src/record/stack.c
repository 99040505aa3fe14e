#include "record/stack.h"

struct unwind_mapping sonde__record_unwind_mapping(pid_t pid, const struct rec_module *m)
{
	return (struct unwind_mapping){.pid = pid,
				       .start = m->start,
				       .end = m->end,
				       .pgoff = m->pgoff,
				       .dev = m->dev,
				       .inode = m->inode,
				       .path = m->path,
				       .vdso = (m->flags & SONDE_MODULE_VDSO) != 0};
}

bool sonde__record_find_module(void *vctx, uint64_t pc, struct unwind_module *out)
{
	struct rec_find_ctx *c = vctx;
	const struct rec_module *m = sonde__modtable_find(c->mods, pc);

	if (!m)
		return false;
	if (m != c->last) {
		struct unwind_mapping um = sonde__record_unwind_mapping(c->pid, m);
		/* without a cache (frame pointers only) no module has CFI: the unwinder
		 * walks frame pointers through every frame */
		if (!c->cache || !sonde__unwind_cache_lookup(c->cache, &um, &c->last_mod))
			c->last_mod.table = NULL;
		c->last = m;
	}
	*out = c->last_mod;
	return true;
}

size_t sonde__record_unwind(const struct unwind_regs *regs, const struct unwind_stack *stack,
		     const struct rec_modtable *mods, struct unwind_cache *cache, pid_t pid,
		     struct unwind_stats *stats, struct sonde_spool_frame *frames, size_t max,
		     enum unwind_end *end)
{
	uint64_t pcs[UNWIND_MAX_FRAMES];
	struct rec_find_ctx ctx = {.mods = mods, .cache = cache, .pid = pid};
	size_t n;

	if (max > UNWIND_MAX_FRAMES)
		max = UNWIND_MAX_FRAMES;
	*end = sonde__unwind_dwarf(regs, stack, sonde__record_find_module, &ctx, pcs, max, &n,
				   stats);
	for (size_t i = 0; i < n; i++) {
		/* Callers hold return address - 1: still inside the call's module. */
		const struct rec_module *m = sonde__modtable_find(mods, pcs[i]);
		if (m) {
			frames[i].module = m->id;
			frames[i].addr = pcs[i] - m->start + m->pgoff;
		} else {
			frames[i].module = 0;
			frames[i].addr = pcs[i];
		}
	}
	return n;
}
