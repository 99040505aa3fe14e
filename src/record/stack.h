/* The recorder's single call into an unwinder: registers and stack copy in, spool frames
 * and the reason the walk ended out. Internal.
 *
 * Frame-pointer walking is what runs today; a CFI unwinder plugs in here, with the same
 * inputs (the process's module table tells it which file and offset each pc belongs to).
 */
#ifndef SONDE_RECORD_STACK_H
#define SONDE_RECORD_STACK_H

#include <stddef.h>

#include <sonde/spool.h>

#include "record/modules.h"
#include "unwind/unwind.h"

/* Unwinds one sample into frames[0..max) (innermost first; callers as return address minus
 * one), each translated to (module id, file offset) when a module of mods covers it, else
 * (0, raw address). Returns the number of frames and sets *end. */
size_t record_unwind(const struct unwind_regs *regs, const struct unwind_stack *stack,
		     const struct rec_modtable *mods, struct sonde_spool_frame *frames, size_t max,
		     enum unwind_end *end);

#endif
