/* What every unwinder consumes: a sample's user registers and its copy of the user stack.
 * Internal to libsonde. x86-64 only for now.
 *
 * Registers are indexed by their DWARF numbers so that CFI rules index them directly;
 * the recorder converts perf's PERF_SAMPLE_REGS_USER order into this one.
 */
#ifndef SONDE_UNWIND_UNWIND_H
#define SONDE_UNWIND_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "perf/regs.h"

/* A copy of user memory [start, start + len): start is the stack pointer at the sample.
 * reach, when not NULL, is raised to the end (offset from start) of the highest word read:
 * how much of the copy the walk needed, which the recorder sizes later copies by. */
struct unwind_stack {
	const uint8_t *data;
	size_t len;
	uint64_t start;
	size_t *reach;
};

/* At most this many frames per stack; a longer stack ends with a truncation mark. */
enum { UNWIND_MAX_FRAMES = 1024 };

/* Why a stack ended early (a sample's stack flags). */
enum unwind_end {
	UNWIND_END_COMPLETE = 0,      /* reached the outermost frame */
	UNWIND_END_COPY_WINDOW = 1,   /* the next frame lies beyond the copied stack */
	UNWIND_END_MAX_FRAMES = 2,    /* UNWIND_MAX_FRAMES reached */
	UNWIND_END_ERROR = 3,	      /* no way to continue (bad frame) */
};

/* Reads 8 bytes of the copied stack at user address addr; false when outside the copy. */
static inline bool unwind_stack_read(const struct unwind_stack *s, uint64_t addr, uint64_t *out)
{
	if (addr < s->start || addr - s->start > s->len || s->len - (addr - s->start) < 8)
		return false;
	__builtin_memcpy(out, s->data + (addr - s->start), 8);
	if (s->reach && addr - s->start + 8 > *s->reach)
		*s->reach = addr - s->start + 8;
	return true;
}

#endif
