/* Internal to src/unwind: the CFI section reader shared by the table builder (cfi.c) and
 * the ELF front end (cfi_elf.c). Not used elsewhere. */
#ifndef SONDE_UNWIND_CFI_PARSE_H
#define SONDE_UNWIND_CFI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A bounded byte reader: any read past end sets err and yields 0. */
struct cfi_rd {
	const uint8_t *p, *end;
	bool err;
};

/* The loadable segments of an image, to resolve DW_EH_PE_indirect pointers and to reject
 * FDEs for code that is not mapped executable (e.g. discarded sections left at address 0
 * in .debug_frame). */
struct cfi_load {
	uint64_t vaddr, memsz, offset, filesz;
	bool exec;
};
enum { CFI_MAX_LOADS = 16 };

struct cfi_image {
	const uint8_t *buf;
	size_t len;
	struct cfi_load loads[CFI_MAX_LOADS];
	unsigned n_loads;
};

/* One CFI section and the bases its pointer encodings may refer to. */
struct cfi_sec {
	const uint8_t *buf;
	size_t len;
	uint64_t vaddr;		     /* where buf is loaded (pcrel base) */
	uint64_t text_base;	     /* DW_EH_PE_textrel base, 0 when unknown */
	uint64_t data_base;	     /* DW_EH_PE_datarel base, 0 when unknown */
	bool debug_frame;	     /* .debug_frame layout (CIE ids, absolute CIE pointers) */
	const struct cfi_image *img; /* may be NULL */
};

uint8_t sonde__cfi_rd_u8(struct cfi_rd *r);
uint64_t sonde__cfi_rd_uleb(struct cfi_rd *r);
int64_t sonde__cfi_rd_sleb(struct cfi_rd *r);
/* Reads a pointer in DW_EH_PE encoding enc; false when the encoding is invalid or
 * unsupported, the bytes run out, or an indirect pointer cannot be resolved. */
bool sonde__cfi_rd_encoded(struct cfi_rd *r, const struct cfi_sec *s, uint8_t enc, uint64_t *out);
/* Reads 8 bytes at virtual address vaddr of the image; false when not in a file-backed
 * part of a loadable segment. */
bool sonde__cfi_image_read(const struct cfi_image *img, uint64_t vaddr, uint64_t *out);
/* True when [lo, hi) lies inside one executable segment (or the image has no segments). */
bool sonde__cfi_image_exec_range(const struct cfi_image *img, uint64_t lo, uint64_t hi);

/* An FDE located in a section: where its code starts and ends, where it is. */
struct cfi_fde_ref {
	uint64_t pc_begin, pc_end;
	uint32_t off; /* offset of the FDE in its section */
	uint8_t src;  /* index of its section in the builder */
};

/* Parses the FDE at offset off of s (with its CIE); fills pc range. False when malformed. */
bool sonde__cfi_fde_range(const struct cfi_sec *s, size_t off, uint64_t *pc_begin, uint64_t *pc_end);

/* Growable list of FDE references; returns -ENOMEM on allocation failure. */
struct cfi_fde_list {
	struct cfi_fde_ref *v;
	size_t n, cap;
};
int sonde__cfi_fde_list_add(struct cfi_fde_list *l, const struct cfi_fde_ref *f);

/* Appends every FDE of s (scanning entry by entry) to l; counts malformed ones in *bad. */
int sonde__cfi_scan_fdes(const struct cfi_sec *s, uint8_t src, struct cfi_fde_list *l, uint32_t *bad);

/* Builds a table from sections secs[0..n) and the FDE list (any order; lower src wins on
 * overlap). Consumes nothing; NULL and errno on failure. */
struct cfi_table;
struct cfi_table *sonde__cfi_table_build(const struct cfi_sec *secs, unsigned n, struct cfi_fde_list *l,
				  uint32_t bad_before, const struct cfi_image *img);
struct cfi_table_stats *sonde__cfi_table_stats_mut(struct cfi_table *t);
/* The same FDEs kept for lookups to run each at its first use (sonde__cfi_table_from_elf_lazy):
 * secs (at most CFI_LAZY_SECS) and img are copied, the bytes they point into must live as
 * long as the table, which frees owned (may be NULL) with itself. On success it owns owned;
 * NULL and errno on failure (owned is then the caller's still). */
enum { CFI_LAZY_SECS = 3 };
struct cfi_table *sonde__cfi_table_lazy(const struct cfi_sec *secs, unsigned n,
					struct cfi_fde_list *l, uint32_t bad_before,
					const struct cfi_image *img, void *owned);

#endif
