/* A module's ELF function symbols as a sorted address table. Internal.
 *
 * Built once per module from .symtab or .dynsym; lookups are a binary search and allocate
 * nothing. Names point into the ELF image, which must outlive the table.
 */
#ifndef SONDE_SYMBOL_SYMTAB_H
#define SONDE_SYMBOL_SYMTAB_H

#include <gelf.h>
#include <stddef.h>
#include <stdint.h>

struct sym_entry {
	uint64_t addr, end; /* [addr, end) */
	const char *name;
	const char *pretty; /* demangled name once computed, else NULL */
};

struct symtab {
	struct sym_entry *v;
	size_t n;
	char *plt_names; /* the "NAME@plt" strings of synthesized entries, owned */
};

/* Collects function symbols of the section of type sh_type (SHT_SYMTAB or SHT_DYNSYM).
 * Returns the number of symbols (0: no such section or no functions), or -ENOMEM. */
int sonde__symtab_build(struct symtab *t, Elf *elf, uint32_t sh_type);
/* Adds an entry "NAME@plt" for each PLT stub of elf that no symbol covers, as perf and
 * objdump name them. x86-64: the stubs of .plt, .plt.sec (IBT) and .plt.got are decoded
 * (the GOT slot their indirect jump reads) and named from the relocation of that slot,
 * JUMP_SLOT (.rela.plt) or GLOB_DAT (.rela.dyn). i386 and AArch64: the n-th stub past the
 * PLT header is named from the n-th .rela.plt (or .rel.plt) entry. Returns the number
 * added (0: no PLT, or another machine), or -ENOMEM. */
int sonde__symtab_add_plt(struct symtab *t, Elf *elf);
/* The symbol containing vaddr, or NULL. */
struct sym_entry *sonde__symtab_find(const struct symtab *t, uint64_t vaddr);
void sonde__symtab_free(struct symtab *t);

#endif
