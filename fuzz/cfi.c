/* Fuzz target: CFI table building from hostile bytes, as an ELF image (with the same bytes
 * as its separate debug file) and as raw .eh_frame and .debug_frame sections, then lookups
 * at every row boundary and around it. Rows must come out sorted. */
#include <stdint.h>
#include <stdlib.h>

#include "unwind/cfi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void probe(struct cfi_table *t)
{
	uint32_t prev = 0;

	if (!t)
		return;
	for (size_t i = 0; i < cfi_table_rows(t); i++) {
		const struct cfi_row *r = cfi_table_row(t, i);
		if (i && r->pc <= prev)
			abort(); /* rows must be strictly sorted */
		prev = r->pc;
		uint64_t pc = cfi_table_base(t) + r->pc;
		const struct cfi_row *l = cfi_table_lookup(t, pc);
		if (l && l != r)
			abort(); /* the row starting at pc is the one found there */
		cfi_table_lookup(t, pc - 1);
		cfi_table_lookup(t, pc + 1);
	}
	cfi_table_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	probe(cfi_table_from_elf(data, size, NULL, 0));
	probe(cfi_table_from_elf(data, size, data, size));
	probe(cfi_table_from_section(data, size, 0x1000, false));
	probe(cfi_table_from_section(data, size, 0x1000, true));
	return 0;
}
