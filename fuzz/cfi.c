/* Fuzz target: CFI table building from hostile bytes, as an ELF image (with the same bytes
 * as its separate debug file) and as raw .eh_frame and .debug_frame sections, then lookups
 * at every row boundary and around it. Rows must come out sorted. The image is also built
 * as a lazy table, looked up at the eager table's rows (each FDE run at its first lookup
 * there), and unwound with. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#include "unwind/cfi.h"
#include "unwind/dwarf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool find_table(void *ctx, uint64_t pc, struct unwind_module *out)
{
	out->table = ctx;
	out->bias = 0;
	return ctx != NULL;
}

/* Unwinds with the input bytes as both the CFI and the copied stack. */
static void walk(const struct cfi_table *t, const uint8_t *data, size_t size)
{
	static uint64_t frames[64];
	struct unwind_regs regs = {0};
	struct unwind_stack s = {data, size, 0x7ff000000000};
	size_t n;

	for (size_t i = 0; i < sonde__cfi_table_rows(t) && i < 8; i++) {
		for (unsigned r = 0; r < UREG_COUNT; r++)
			regs.r[r] = s.start + (size / UREG_COUNT) * r;
		regs.r[UREG_RIP] = sonde__cfi_table_base(t) + sonde__cfi_table_row(t, i)->pc;
		regs.r[UREG_RSP] = s.start;
		regs.valid = (1u << UREG_COUNT) - 1 - (uint32_t)i;
		sonde__unwind_dwarf(&regs, &s, find_table, (void *)t, frames, 64, &n, NULL);
		if (n > 64)
			abort();
	}
}

static void probe(struct cfi_table *t, const uint8_t *data, size_t size)
{
	uint32_t prev = 0;

	if (!t)
		return;
	for (size_t i = 0; i < sonde__cfi_table_rows(t); i++) {
		const struct cfi_row *r = sonde__cfi_table_row(t, i);
		if (i && r->pc <= prev)
			abort(); /* rows must be strictly sorted */
		prev = r->pc;
		uint64_t pc = sonde__cfi_table_base(t) + r->pc;
		const struct cfi_row *l = sonde__cfi_table_lookup(t, pc);
		if (l && l != r)
			abort(); /* the row starting at pc is the one found there */
		sonde__cfi_table_lookup(t, pc - 1);
		sonde__cfi_table_lookup(t, pc + 1);
	}
	walk(t, data, size);
	sonde__cfi_table_free(t);
}

/* The lazy table of the image, looked up where the eager one has rows (and around them);
 * a row it finds must have the pc it is looked up at or below. */
static void probe_lazy(const uint8_t *data, size_t size)
{
	struct cfi_table *t = sonde__cfi_table_from_elf(data, size, NULL, 0);
	uint8_t *copy = sonde__malloc(size ? size : 1);
	struct cfi_table *lz;

	if (!copy) {
		sonde__cfi_table_free(t);
		return;
	}
	memcpy(copy, data, size);
	if (!(lz = sonde__cfi_table_from_elf_lazy(copy, size)))
		sonde__free(copy);
	for (size_t i = 0; t && lz && i < sonde__cfi_table_rows(t); i++) {
		uint64_t pc = sonde__cfi_table_base(t) + sonde__cfi_table_row(t, i)->pc;
		for (int d = -1; d <= 1; d++) {
			const struct cfi_row *r =
				sonde__cfi_table_lookup(lz, pc + (uint64_t)(int64_t)d);
			if (r && sonde__cfi_table_base(lz) + r->pc > pc + (uint64_t)(int64_t)d)
				abort();
		}
	}
	if (lz) {
		static uint64_t frames[64];
		struct unwind_regs regs = {0};
		struct unwind_stack s = {data, size, 0x7ff000000000};
		size_t n;
		for (unsigned r = 0; r < UREG_COUNT; r++)
			regs.r[r] = s.start + (size / UREG_COUNT) * r;
		regs.r[UREG_RIP] = sonde__cfi_table_base(lz);
		regs.r[UREG_RSP] = s.start;
		regs.valid = (1u << UREG_COUNT) - 1;
		sonde__unwind_dwarf(&regs, &s, find_table, lz, frames, 64, &n, NULL);
		if (n > 64)
			abort();
	}
	sonde__cfi_table_free(lz);
	sonde__cfi_table_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	probe_lazy(data, size);
	probe(sonde__cfi_table_from_elf(data, size, NULL, 0), data, size);
	probe(sonde__cfi_table_from_elf(data, size, data, size), data, size);
	probe(sonde__cfi_table_from_section(data, size, 0x1000, false), data, size);
	probe(sonde__cfi_table_from_section(data, size, 0x1000, true), data, size);
	return 0;
}
