/* A sample's user registers, indexed by their DWARF numbers (x86-64). Internal to libsonde.
 *
 * The kernel interface (decode.c) converts perf's PERF_SAMPLE_REGS_USER order into this
 * one, so that the unwinders above it (src/unwind/) index CFI rules by register directly.
 * Defined here, in the kernel layer, so that decoding needs nothing of the unwinders.
 */
#ifndef SONDE_PERF_REGS_H
#define SONDE_PERF_REGS_H

#include <stdint.h>

enum unwind_dwarf_reg {
	UREG_RAX = 0,
	UREG_RDX = 1,
	UREG_RCX = 2,
	UREG_RBX = 3,
	UREG_RSI = 4,
	UREG_RDI = 5,
	UREG_RBP = 6,
	UREG_RSP = 7,
	UREG_R8 = 8,
	UREG_R15 = 15,
	UREG_RIP = 16, /* the return-address column */
	UREG_COUNT = 17,
};

struct unwind_regs {
	uint64_t r[UREG_COUNT];
	uint32_t valid; /* bit i set when r[i] is known */
};

#endif
