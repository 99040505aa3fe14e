/* Fuzz target: arbitrary bytes as an ELF image (libelf elf_memory): segments, notes and
 * debuglink, both symbol tables, the DWARF index, and lookups at addresses taken from
 * the image itself, without crashing or reading out of bounds. */
#include <stddef.h>
#include <stdint.h>

#include "symbol/demangle.h"
#include "symbol/dwidx.h"
#include "symbol/elfimg.h"
#include "symbol/symtab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void probe(struct symtab *t, struct dwidx *dw, struct strpool *pool, uint64_t a)
{
	struct sym_entry *e = sonde__symtab_find(t, a);
	struct dw_result r;

	if (e && !e->pretty)
		e->pretty = sonde__sym_demangle(pool, e->name);
	if (dw && sonde__dwidx_lookup(dw, a, &r))
		for (size_t i = 0; i < r.n; i++)
			sonde__sym_demangle(pool, r.scopes[i]->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elfimg img;
	struct symtab st = {0}, dyn = {0};
	struct strpool pool = {0};
	struct dwidx *dw;
	uint64_t va;

	if (sonde__elfimg_open_mem(&img, data, size) < 0)
		return 0;
	sonde__symtab_build(&st, img.elf, SHT_SYMTAB);
	sonde__symtab_build(&dyn, img.elf, SHT_DYNSYM);
	sonde__symtab_add_plt(&dyn, img.elf); /* names from relocations, bounded by .plt */
	dw = sonde__dwidx_open(img.elf);
	for (size_t i = 0; i < img.n_loads; i++) {
		for (uint64_t d = 0; d < 0x400; d += 0x40)
			if (sonde__elfimg_off_to_vaddr(&img, img.loads[i].offset + d, &va) == 0)
				probe(&st, dw, &pool, va);
		if (sonde__elfimg_mapping_to_vaddr(&img, img.loads[i].offset, img.loads[i].offset + 8,
					    &va) == 0)
			probe(&dyn, dw, &pool, va);
	}
	for (size_t i = 0; i < st.n && i < 64; i++)
		probe(&st, dw, &pool, st.v[i].addr + 1);
	for (size_t i = 0; i < dyn.n && i < 64; i++)
		probe(&dyn, dw, &pool, dyn.v[i].addr);
	sonde__dwidx_close(dw);
	sonde__symtab_free(&dyn);
	sonde__symtab_free(&st);
	sonde__strpool_free(&pool);
	sonde__elfimg_close(&img);
	return 0;
}
