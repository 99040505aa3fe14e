#include "record/stack.h"
#include "unwind/fp.h"

/* A return address must point into mapped code; anything else means the frame-pointer
 * chain went through code built without frame pointers and the walk must stop. */
static bool in_code(void *ctx, uint64_t pc)
{
	return modtable_find(ctx, pc) != NULL;
}

size_t record_unwind(const struct unwind_regs *regs, const struct unwind_stack *stack,
		     const struct rec_modtable *mods, struct sonde_spool_frame *frames, size_t max,
		     enum unwind_end *end)
{
	uint64_t pcs[UNWIND_MAX_FRAMES];

	if (max > UNWIND_MAX_FRAMES)
		max = UNWIND_MAX_FRAMES;
	size_t n = unwind_fp(regs, stack, in_code, (void *)mods, pcs, max, end);
	for (size_t i = 0; i < n; i++) {
		/* Callers hold return address - 1: still inside the call's module. */
		const struct rec_module *m = modtable_find(mods, pcs[i]);
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
