/* Frame-pointer unwinding over a sample's copied stack. Internal.
 *
 * With frame pointers, each frame starts with the caller's saved rbp at [rbp] and the
 * return address at [rbp + 8]. The walk reads only the copied stack (unwind_stack_read),
 * so it can never fault, and it requires frame pointers to grow strictly towards the
 * stack base, so it always terminates.
 */
#ifndef SONDE_UNWIND_FP_H
#define SONDE_UNWIND_FP_H

#include <stddef.h>
#include <stdint.h>

#include "unwind/unwind.h"

/* Optional plausibility check of a return address (e.g. "inside an executable mapping");
 * a return address it rejects ends the walk with UNWIND_END_ERROR. */
typedef bool (*unwind_pc_check_fn)(void *ctx, uint64_t pc);

/* Walks the frame-pointer chain from regs (RIP and RBP must be valid). pcs[0] receives the
 * sampled pc; each caller frame receives its return address minus one, so that it falls
 * inside the call instruction. At most max frames (max <= UNWIND_MAX_FRAMES is usual).
 * Returns the number of frames and sets *end to why the walk stopped. */
size_t sonde__unwind_fp(const struct unwind_regs *regs, const struct unwind_stack *stack,
		 unwind_pc_check_fn check, void *ctx, uint64_t *pcs, size_t max,
		 enum unwind_end *end);

#endif
