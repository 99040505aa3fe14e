#include "unwind/fp.h"

size_t sonde__unwind_fp(const struct unwind_regs *regs, const struct unwind_stack *stack,
		 unwind_pc_check_fn check, void *ctx, uint64_t *pcs, size_t max,
		 enum unwind_end *end)
{
	const uint32_t need = 1u << UREG_RIP | 1u << UREG_RBP;
	size_t n = 0;

	*end = UNWIND_END_ERROR;
	if (max == 0 || (regs->valid & need) != need)
		return 0;
	pcs[n++] = regs->r[UREG_RIP];
	uint64_t fp = regs->r[UREG_RBP];
	/* Below the stack pointer there are no live frames: an rbp there is not a frame
	 * pointer (code built without them uses rbp as a general register). */
	uint64_t low = (regs->valid & 1u << UREG_RSP) ? regs->r[UREG_RSP] : stack->start;

	for (;;) {
		uint64_t next_fp, ret;

		if (fp == 0) {
			*end = UNWIND_END_COMPLETE; /* the outermost frame clears rbp (_start) */
			return n;
		}
		if (fp < low || fp % 8) {
			*end = UNWIND_END_ERROR;
			return n;
		}
		if (!unwind_stack_read(stack, fp, &next_fp) ||
		    !unwind_stack_read(stack, fp + 8, &ret)) {
			*end = UNWIND_END_COPY_WINDOW;
			return n;
		}
		if (ret == 0) {
			*end = UNWIND_END_COMPLETE;
			return n;
		}
		if (check && !check(ctx, ret)) {
			*end = UNWIND_END_ERROR;
			return n;
		}
		if (n == max) {
			*end = UNWIND_END_MAX_FRAMES;
			return n;
		}
		pcs[n++] = ret - 1;
		if (next_fp == 0) {
			*end = UNWIND_END_COMPLETE;
			return n;
		}
		if (next_fp <= fp) {
			*end = UNWIND_END_ERROR;
			return n;
		}
		fp = next_fp;
	}
}
