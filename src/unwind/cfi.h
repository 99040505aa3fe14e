/* DWARF call frame information (.eh_frame, .eh_frame_hdr, .debug_frame) compiled into a
 * compact, sorted, per-module unwind table. Internal to libsonde; x86-64 only.
 *
 * Why hand-written: libdw's dwarf_cfi_addrframe() interprets the CIE and FDE programs
 * again for every query and allocates a Dwarf_Frame each time. The recorder unwinds
 * millions of frames per second, so CFI is interpreted once into rows that a lookup finds
 * by binary search: a whole module at once, or (lazy tables, the recorder's) each FDE at
 * the first lookup within it.
 *
 * Every byte parsed here may come from a hostile binary mapped in the target process: all
 * reads are bounds checked, programs are bounded, and a malformed CIE or FDE only drops
 * that entry (counted in the stats), never the profiler.
 *
 * Addresses in a table are ELF virtual addresses of the module (what the symbol table and
 * the CFI use); the caller subtracts the module's load bias from runtime addresses.
 */
#ifndef SONDE_UNWIND_CFI_H
#define SONDE_UNWIND_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the canonical frame address (the caller's stack pointer) is computed at a pc. */
enum cfi_cfa_kind {
	CFI_CFA_NONE = 0,	 /* no CFI covers this pc */
	CFI_CFA_REG = 1,	 /* CFA = reg + off */
	CFI_CFA_DEREF = 2,	 /* CFA = *(reg + off): realigned stacks, signal frames */
	CFI_CFA_PLT = 3,	 /* CFA = rsp + off + ((rip & 15) >= arg ? 8 : 0): lazy PLT */
	CFI_CFA_UNSUPPORTED = 4, /* a CFA expression this unwinder does not evaluate */
};
#define CFI_CFA_KIND_MASK 0x0f
#define CFI_ROW_SIGNAL	  0x80 /* 'S' augmentation: the frame of a signal trampoline */

/* How one register of the caller is recovered. */
enum cfi_rule_kind {
	CFI_RULE_SAME = 0,	  /* unchanged (also: no rule given) */
	CFI_RULE_UNDEFINED = 1,	  /* not recoverable; for the return address: outermost frame */
	CFI_RULE_OFFSET = 2,	  /* saved at CFA + off * 8 */
	CFI_RULE_VAL_OFFSET = 3,  /* value is CFA + off * 8 */
	CFI_RULE_REGISTER = 4,	  /* value is in register off */
	CFI_RULE_AT_RSP = 5,	  /* saved at rsp + off * 8 (DW_OP_breg7 expressions: sigframes) */
	CFI_RULE_UNSUPPORTED = 6, /* an expression this unwinder does not evaluate */
};

/* The registers whose rules a row keeps. */
enum { CFI_COL_RA = 0, CFI_COL_RBP = 1, CFI_COL_RBX = 2, CFI_COLS = 3 };

#define CFI_RULE_BITS 3
#define CFI_RULE_MASK 7u
/* Bits 9-12 of cfi_row.rules: r12..r15 are not preserved by this frame (their rule is
 * anything but "same value"), so the caller's values are unknown. */
#define CFI_CLOBBER_SHIFT    9
#define CFI_ROW_RULE(row, c) (((row)->rules >> ((c)*CFI_RULE_BITS)) & CFI_RULE_MASK)

/* One row: the rules from pc up to the next row's pc. 16 bytes. */
struct cfi_row {
	uint32_t pc;	      /* relative to the table's base address */
	int32_t cfa_off;      /* CFA offset (REG, DEREF, PLT) */
	uint8_t cfa_reg;      /* DWARF register (REG, DEREF); for PLT the rip & 15 threshold */
	uint8_t cfa_kind;     /* enum cfi_cfa_kind | CFI_ROW_SIGNAL */
	uint16_t rules;	      /* enum cfi_rule_kind per CFI_COL_*, CFI_RULE_BITS each; clobbers */
	int8_t off[CFI_COLS]; /* per column: offset in 8-byte slots, or a register number */
	uint8_t pad;
};

/* Where a table's rows came from, and what was dropped. */
struct cfi_table_stats {
	uint32_t fdes;	       /* FDEs that contributed rows */
	uint32_t bad_entries;  /* malformed CIEs/FDEs or programs that were skipped */
	uint32_t overlapping;  /* FDEs dropped because an earlier one covers their start */
	uint32_t out_of_range; /* FDEs more than 4 GiB past the table's base */
	bool used_hdr;	       /* .eh_frame FDEs came from the .eh_frame_hdr search table */
	bool used_eh_frame, used_debug_frame;
};

struct cfi_table;

/* Builds the table of an ELF image (a file's bytes, or a vDSO image read from memory):
 * .eh_frame located through .eh_frame_hdr's search table when it is present and valid,
 * otherwise by scanning; plus .debug_frame of the image and, when debug is non-NULL, of a
 * separate debug file with the same layout (e.g. found by build-id). .eh_frame wins where
 * both cover a pc. The buffers are only read during the call. Returns NULL and sets errno
 * (ENOENT: no CFI at all, EINVAL: not an x86-64 ELF, ENOMEM) on failure. */
struct cfi_table *sonde__cfi_table_from_elf(const void *image, size_t len, const void *debug,
				     size_t debug_len);

/* The same table, built lazily: the FDEs are located and sorted now, and each one's
 * program is run into rows at the first lookup within its range (a recorder looks up a few
 * hundred functions of a binary of a hundred thousand). Lookups find what the eager table
 * finds, but for malformed input: an FDE that overlaps the start of one found malformed at
 * its first use is left out, where the eager build would have used it. The table takes the
 * image's bytes (a buffer from sonde__malloc) and frees them with itself; on failure they
 * are still the caller's. Row enumeration (sonde__cfi_table_rows) counts 0 rows for it. */
struct cfi_table *sonde__cfi_table_from_elf_lazy(void *image, size_t len);

/* Builds a table from raw .eh_frame bytes that are loaded at vaddr (for tests and
 * fuzzing); is_debug_frame selects the .debug_frame flavour. NULL and errno on failure. */
struct cfi_table *sonde__cfi_table_from_section(const void *buf, size_t len, uint64_t vaddr,
					 bool is_debug_frame);

/* Frees a table; NULL is fine. */
void sonde__cfi_table_free(struct cfi_table *t);

/* The row covering ELF virtual address vaddr, or NULL when no CFI covers it. O(log n); no
 * allocation, but for a lazy table's first lookup (its memo of found rows) and its first
 * lookup within an FDE (not thread-safe on a lazy table: it memoizes); the pointer stays
 * valid until the table is freed. */
const struct cfi_row *sonde__cfi_table_lookup(const struct cfi_table *t, uint64_t vaddr);

/* The table's base address (rows' pcs are relative to it), its row count and row i
 * (for tests and diagnostics), and its build statistics. */
uint64_t sonde__cfi_table_base(const struct cfi_table *t);
size_t sonde__cfi_table_rows(const struct cfi_table *t);
const struct cfi_row *sonde__cfi_table_row(const struct cfi_table *t, size_t i);
const struct cfi_table_stats *sonde__cfi_table_stats(const struct cfi_table *t);

#endif
