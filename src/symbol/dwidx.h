/* A module's DWARF, indexed for fast address lookups. Internal.
 *
 * Built on libdw's dwarf_* interface directly rather than libdwfl: the symbolizer already
 * owns the ELF images (exact images from the image cache, debug files it found and
 * checked itself), and it needs a per-unit flattened table of function and inline scopes,
 * which libdwfl does not keep (dwarf_getscopes walks the unit's DIE tree on every call;
 * that walk is what makes address-by-address tools slow).
 *
 * Unit address ranges are read once when the index is opened; a unit's scope table is
 * built on the first lookup that lands in it. Lookups after that are binary searches
 * and allocate nothing.
 */
#ifndef SONDE_SYMBOL_DWIDX_H
#define SONDE_SYMBOL_DWIDX_H

#include <elfutils/libdw.h>
#include <stddef.h>
#include <stdint.h>

struct dwidx;

/* One function or inlined-call scope. */
struct dw_scope {
	uint64_t lo, hi;
	uint32_t parent; /* enclosing scope in the same unit, or DW_NONE */
	uint32_t call_line;
	const char *name;      /* linkage name if any (mangled), else DW_AT_name; may be NULL */
	const char *pretty;    /* display name once computed by the caller, else NULL */
	const char *call_file; /* for inlined scopes: where the call is, else NULL */
	uint8_t is_inline;
};

#define DW_NONE UINT32_MAX

/* The scopes containing one address, innermost first, ending with the real function. */
struct dw_result {
	struct dw_scope *scopes[64];
	size_t n;
	const char *file; /* the innermost position, from the line table; may be NULL */
	uint32_t line;
};

/* Opens an index over elf's DWARF. NULL when it has none (errno ENOENT) or on failure. */
struct dwidx *sonde__dwidx_open(Elf *elf);
/* Fills r for vaddr; returns 1 when some unit covers vaddr (r->n may still be 0, with
 * only a line), 0 when none does. */
int sonde__dwidx_lookup(struct dwidx *x, uint64_t vaddr, struct dw_result *r);
void sonde__dwidx_close(struct dwidx *x);

#endif
