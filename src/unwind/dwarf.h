/* The DWARF CFI unwinder: walks a sample's user stack from its registers and its copy of
 * the stack (the target is never stopped or read), using per-module CFI tables
 * (unwind/cfi.h), and falls back to frame pointers for a frame only when CFI is missing
 * or fails, counting every fallback by reason. Internal to libsonde; x86-64 only.
 *
 * Frame convention (include/sonde/spool.h): frames[0] is the sampled pc itself; every other
 * frame is its return address minus one, so that it falls inside the call instruction and
 * symbolizes to the call site (a return address may be the first byte of the next
 * function, after a noreturn call). The one exception is a frame interrupted by a signal
 * (the caller of a signal trampoline such as glibc's __restore_rt): its pc was not pushed
 * by a call, so it is stored exact, and looked up exact.
 *
 * Nothing here allocates; the module lookup callback may (e.g. to build a table lazily).
 */
#ifndef SONDE_UNWIND_DWARF_H
#define SONDE_UNWIND_DWARF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/cfi.h"
#include "unwind/unwind.h"

/* What the unwinder needs to know about the module mapping a pc. */
struct unwind_module {
	const struct cfi_table *table; /* NULL: the module has no usable CFI */
	uint64_t bias;		       /* runtime address minus ELF virtual address */
};

/* Finds the module that maps pc (a runtime address). Returns false when no module does.
 * Called once per frame: it must be fast once warm. */
typedef bool (*unwind_find_module_fn)(void *ctx, uint64_t pc, struct unwind_module *out);

/* Why a frame was unwound with frame pointers instead of CFI. */
enum unwind_fallback {
	UNWIND_FB_NO_MODULE,   /* no module maps the pc (JIT code, unmapped, garbage) */
	UNWIND_FB_NO_CFI,      /* the module has no unwind data */
	UNWIND_FB_NO_ROW,      /* the module's CFI does not cover the pc */
	UNWIND_FB_UNSUPPORTED, /* a CFA or return-address rule this unwinder cannot evaluate */
	UNWIND_FB_CFA_UNRECOVERABLE, /* the CFA's register is unknown or its memory is not copied */
	UNWIND_FB_RA_UNRECOVERABLE,  /* the return address slot is not in the copied stack */
	UNWIND_FB_NO_ADVANCE,	     /* the step left pc and stack pointer unchanged */
	UNWIND_FB_SP_BACKWARDS,	     /* the step moved the stack pointer down */
	UNWIND_FB_COUNT
};

/* Counters a caller accumulates over many stacks (never reset by the unwinder). */
struct unwind_stats {
	uint64_t stacks;		     /* sonde__unwind_dwarf calls */
	uint64_t frames;		     /* frames written */
	uint64_t cfi_steps;		     /* frames reached through CFI */
	uint64_t fp_steps;		     /* frames reached through frame pointers */
	uint64_t fallbacks[UNWIND_FB_COUNT]; /* CFI steps that fell back, by reason */
	uint64_t ends[UNWIND_END_ERROR + 1]; /* stacks by enum unwind_end */
};

/* Name of a fallback reason, for summaries ("no-module", "no-cfi", ...). */
const char *sonde__unwind_fallback_name(enum unwind_fallback r);

/* Unwinds one stack into frames[0..max) (max is capped at UNWIND_MAX_FRAMES), setting *n.
 * Returns why the walk ended: COMPLETE when the outermost frame was reached (its return
 * address rule is undefined, or a zero return address / frame pointer ends the chain);
 * COPY_WINDOW when the next frame's data lies beyond the copied stack (the stack is
 * truncated, not complete); MAX_FRAMES when frames are full and the stack goes on; ERROR
 * when neither CFI nor frame pointers can find a sane caller. stats may be NULL. */
enum unwind_end sonde__unwind_dwarf(const struct unwind_regs *regs, const struct unwind_stack *stack,
			     unwind_find_module_fn find, void *ctx, uint64_t *frames, size_t max,
			     size_t *n, struct unwind_stats *stats);

#endif
