#include <errno.h>

#include "base/alloc.h"
#include "record/recorder.h"
#include "record/stack.h"

/* The recorder's unwind part (r->unw): only this file reads its fields. */

int sonde__rec_unwind_init(struct sonde_recorder *r)
{
	r->unw.unwind_cache = sonde__unwind_cache_new();
	return r->unw.unwind_cache ? 0 : -ENOMEM;
}

void sonde__rec_unwind_free(struct sonde_recorder *r)
{
	sonde__unwind_cache_free(r->unw.unwind_cache);
	r->unw.unwind_cache = NULL;
}

void sonde__rec_unwind_fp_only(struct sonde_recorder *r, bool on)
{
	r->unw.frame_pointers_only = on;
}

struct sonde_spool_frame *sonde__rec_frames(struct sonde_recorder *r)
{
	return r->unw.frames;
}

/* The CFI tables, or NULL when only frame pointers are walked. */
static struct unwind_cache *cfi_cache(const struct sonde_recorder *r)
{
	return r->unw.frame_pointers_only ? NULL : r->unw.unwind_cache;
}

size_t sonde__rec_unwind_user(struct sonde_recorder *r, pid_t pid, const struct rec_modtable *mods,
			      const struct unwind_regs *regs, const struct unwind_stack *st,
			      size_t skip, enum unwind_end *end)
{
	return sonde__record_unwind(regs, st, mods, cfi_cache(r), pid, &r->unw.unwind_stats,
				    r->unw.frames + skip, UNWIND_MAX_FRAMES, end);
}

void sonde__rec_unwind_warm(struct sonde_recorder *r, pid_t pid, const struct rec_modtable *mods)
{
	struct unwind_cache *cache = cfi_cache(r);
	struct unwind_module out;

	for (size_t i = 0; cache && i < mods->n; i++) {
		struct unwind_mapping um = sonde__record_unwind_mapping(pid, &mods->m[i]);
		if (!sonde__unwind_cache_lookup(cache, &um, &out))
			return;
	}
}

void sonde__rec_unwind_summary(const struct sonde_recorder *r, struct sonde_record_summary *s)
{
	s->unwind_cfi_frames = r->unw.unwind_stats.cfi_steps;
	s->unwind_fp_frames = r->unw.unwind_stats.fp_steps;
	for (unsigned i = 0; i < SONDE_UNWIND_FALLBACKS; i++)
		s->unwind_fallbacks[i] = r->unw.unwind_stats.fallbacks[i];
}

struct unwind_mapping sonde__record_unwind_mapping(pid_t pid, const struct rec_module *m)
{
	return (struct unwind_mapping){.pid = pid,
				       .start = m->start,
				       .end = m->end,
				       .pgoff = m->pgoff,
				       .dev = m->dev,
				       .inode = m->inode,
				       .gen = m->gen,
				       .path = m->path,
				       .vdso = (m->flags & SONDE_MODULE_VDSO) != 0};
}

bool sonde__record_find_module(void *vctx, uint64_t pc, struct unwind_module *out)
{
	struct rec_find_ctx *c = vctx;
	/* modules do not overlap: the last one found, when it holds pc, is the one */
	const struct rec_module *m = c->last && pc >= c->last->start && pc < c->last->end
					     ? c->last
					     : sonde__modtable_find(c->mods, pc);

	if (!m)
		return false;
	c->last = m;
	/* without a cache (frame pointers only) no module has CFI: the unwinder walks frame
	 * pointers through every frame */
	out->table = NULL;
	out->bias = 0;
	if (!c->cache)
		return true;
	if (m->unw_cache != c->cache) {
		struct unwind_mapping um = sonde__record_unwind_mapping(c->pid, m);
		struct unwind_module u;
		if (!sonde__unwind_cache_lookup(c->cache, &um, &u))
			return true; /* out of memory: no CFI this time, asked again next time */
		/* the table is logically const: the entry only remembers what the cache said */
		struct rec_module *memo = (struct rec_module *)m;
		memo->unw = u;
		memo->unw_cache = c->cache;
	}
	*out = m->unw;
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
	const struct rec_module *m = NULL;
	for (size_t i = 0; i < n; i++) {
		/* Callers hold return address - 1: still inside the call's module. Consecutive
		 * frames are mostly in one module. */
		if (!m || pcs[i] < m->start || pcs[i] >= m->end)
			m = sonde__modtable_find(mods, pcs[i]);
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
