/* One opened ELF image (a module's file, a separate debug file, or bytes in memory) and
 * the facts the symbolizer needs from it: its PT_LOAD segments (to turn a recorded file
 * offset into a virtual address), its build id and its .gnu_debuglink. Internal.
 *
 * The image is mapped privately (libelf ELF_C_READ_MMAP, or a private copy of a memory
 * buffer), so names that point into it stay valid until sonde__elfimg_close, and no file
 * descriptor is held.
 */
#ifndef SONDE_SYMBOL_ELFIMG_H
#define SONDE_SYMBOL_ELFIMG_H

#include <gelf.h>
#include <stddef.h>
#include <stdint.h>

#include "base/regfile.h"

enum { ELFIMG_MAX_BUILD_ID = 64, ELFIMG_MAX_LOADS = 32 };
/* The cap on an image or debug file opened by path. libelf maps it, which costs address
 * space rather than memory, but a file bigger than any real binary or debug file is
 * refused before it is mapped. */
#define ELFIMG_MAX_BYTES (4ull << 30)

struct elfimg_load {
	uint64_t offset, filesz, vaddr, memsz;
	uint32_t flags; /* PF_* */
};

struct elfimg {
	Elf *elf;
	void *mem;     /* private copy for images opened from memory; NULL otherwise */
	uint16_t type; /* ET_EXEC, ET_DYN, ... */
	size_t n_loads;
	struct elfimg_load loads[ELFIMG_MAX_LOADS];
	uint8_t build_id[ELFIMG_MAX_BUILD_ID];
	size_t build_id_len;
	char debuglink[256]; /* "" when none */
	uint32_t debuglink_crc;
	int has_debug_info; /* has a .debug_info section with contents */
	uint64_t file_size;
};

/* Opens the image behind fd (the caller keeps and may close fd afterwards). 0 or -errno /
 * -SONDE_E_FORMAT. On failure *img is left closed. */
int sonde__elfimg_open_fd(struct elfimg *img, int fd);
/* Opens a private copy of buf[0..len). Same results. */
int sonde__elfimg_open_mem(struct elfimg *img, const void *buf, size_t len);
/* Opens the file at path with sonde__regfile_open's rules (follow as trusted says, the cap
 * ELFIMG_MAX_BYTES, refusals counted in refusals, which may be NULL). */
int sonde__elfimg_open_path(struct elfimg *img, const char *path, bool trusted,
		     struct regfile_refusals *refusals);
/* The rules for an image or debug file at path. */
struct regfile_rules sonde__elfimg_rules(bool trusted, struct regfile_refusals *refusals);
void sonde__elfimg_close(struct elfimg *img);

/* File offset -> virtual address through the PT_LOAD segment containing it. 0 or
 * -SONDE_E_RANGE. Images without program headers (relocatable files) map 1:1. */
int sonde__elfimg_off_to_vaddr(const struct elfimg *img, uint64_t off, uint64_t *vaddr);

/* For a separate debug file standing in for a missing image: its segments keep their
 * addresses but not their file offsets, so the offset is placed through the recorded
 * mapping instead (file offset pgoff mapped at the page of the one executable segment).
 * 0 or -SONDE_E_RANGE. */
int sonde__elfimg_mapping_to_vaddr(const struct elfimg *img, uint64_t pgoff, uint64_t off,
			    uint64_t *vaddr);

/* The build id of an ELF image, the one reader of build-id notes: the NT_GNU_BUILD_ID
 * note of its PT_NOTE segments (the loaded notes identify the mapped image), else of its
 * SHT_NOTE sections (a separate debug file). Copies at most cap bytes into out and returns
 * how many, 0 when there is none. */
size_t sonde__elf_build_id(Elf *e, uint8_t *out, size_t cap);

/* Parsers of untrusted section bytes, exposed for tests and fuzzing. */
/* Finds an NT_GNU_BUILD_ID note in a notes blob; 0 (filling id and id_len), or -SONDE_E_FORMAT /
 * -ENOENT. */
int sonde__elf_notes_build_id(const void *buf, size_t len, const uint8_t **id, size_t *id_len);
/* Parses .gnu_debuglink contents: a NUL-terminated file name, padding to 4, a CRC32.
 * 0 or -SONDE_E_FORMAT. name points into buf. */
int sonde__elf_debuglink_parse(const void *buf, size_t len, const char **name, uint32_t *crc);
/* CRC32 of a file's contents as .gnu_debuglink defines it (zlib's crc32). 0 or -errno. */
int sonde__elf_file_crc32(int fd, uint32_t *crc);

#endif
