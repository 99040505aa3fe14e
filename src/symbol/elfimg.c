#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "symbol/elfimg.h"

static void elfimg_lib_init(void)
{
	/* elf_version only records the caller's ELF version; calling it again is harmless. */
	elf_version(EV_CURRENT);
}

int sonde__elf_notes_build_id(const void *buf, size_t len, const uint8_t **id, size_t *id_len)
{
	const uint8_t *p = buf;
	size_t pos = 0;

	while (len - pos >= 12) {
		uint32_t namesz, descsz, type;
		memcpy(&namesz, p + pos, 4);
		memcpy(&descsz, p + pos + 4, 4);
		memcpy(&type, p + pos + 8, 4);
		pos += 12;
		/* Name and descriptor are each padded to 4 bytes (ELF64 notes in practice use 4
		 * too, which is what the GNU toolchain writes for NT_GNU_BUILD_ID). */
		size_t name_pad = ((size_t)namesz + 3) & ~(size_t)3;
		size_t desc_pad = ((size_t)descsz + 3) & ~(size_t)3;
		if (name_pad > len - pos || desc_pad > len - pos - name_pad)
			return -SONDE_E_FORMAT;
		if (type == NT_GNU_BUILD_ID && namesz == 4 && !memcmp(p + pos, "GNU", 4) &&
		    descsz > 0) {
			*id = p + pos + name_pad;
			*id_len = descsz;
			return 0;
		}
		pos += name_pad + desc_pad;
	}
	return -ENOENT;
}

int sonde__elf_debuglink_parse(const void *buf, size_t len, const char **name, uint32_t *crc)
{
	const char *p = buf;
	const char *nul = memchr(p, 0, len);

	if (!nul || nul == p)
		return -SONDE_E_FORMAT;
	size_t crc_off = ((size_t)(nul - p) + 1 + 3) & ~(size_t)3;
	if (crc_off > len || len - crc_off < 4)
		return -SONDE_E_FORMAT;
	memcpy(crc, p + crc_off, 4);
	*name = p;
	return 0;
}

int sonde__elf_file_crc32(int fd, uint32_t *crc)
{
	unsigned char buf[65536];
	uLong c = crc32(0, Z_NULL, 0);
	off_t off = 0;

	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		c = crc32(c, buf, (uInt)n);
		off += n;
	}
	*crc = (uint32_t)c;
	return 0;
}

static void elfimg_read_loads(struct elfimg *img)
{
	size_t n = 0;

	if (elf_getphdrnum(img->elf, &n) != 0)
		return;
	for (size_t i = 0; i < n && img->n_loads < ELFIMG_MAX_LOADS; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(img->elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		img->loads[img->n_loads++] = (struct elfimg_load){
			.offset = ph.p_offset,
			.filesz = ph.p_filesz,
			.vaddr = ph.p_vaddr,
			.memsz = ph.p_memsz,
			.flags = ph.p_flags,
		};
	}
}

/* Copies the build id of a notes blob (raw file bytes) into out; its length, 0 if none. */
static size_t notes_build_id(const Elf_Data *d, uint8_t *out, size_t cap)
{
	const uint8_t *id;
	size_t len;

	if (!d || !d->d_buf || sonde__elf_notes_build_id(d->d_buf, d->d_size, &id, &len) < 0)
		return 0;
	if (len > cap)
		len = cap;
	memcpy(out, id, len);
	return len;
}

size_t sonde__elf_build_id(Elf *e, uint8_t *out, size_t cap)
{
	size_t n = 0, len;

	if (elf_kind(e) != ELF_K_ELF)
		return 0;
	if (elf_getphdrnum(e, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;
			if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_NOTE)
				continue;
			Elf_Data *d = elf_getdata_rawchunk(e, (int64_t)ph.p_offset, ph.p_filesz,
							   ELF_T_BYTE);
			if ((len = notes_build_id(d, out, cap)))
				return len;
		}
	}
	for (Elf_Scn *scn = NULL; (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE &&
		    (len = notes_build_id(elf_rawdata(scn, NULL), out, cap)))
			return len;
	}
	return 0;
}

static void elfimg_scan_sections(struct elfimg *img)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(img->elf, &shstrndx) != 0)
		shstrndx = 0;
	while ((scn = elf_nextscn(img->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		const char *name = shstrndx ? elf_strptr(img->elf, shstrndx, sh.sh_name) : NULL;
		if (name && sh.sh_type == SHT_PROGBITS && !strcmp(name, ".gnu_debuglink")) {
			Elf_Data *d = elf_rawdata(scn, NULL);
			const char *link;
			uint32_t crc;
			if (d && d->d_buf &&
			    sonde__elf_debuglink_parse(d->d_buf, d->d_size, &link, &crc) == 0 &&
			    strlen(link) < sizeof(img->debuglink)) {
				strcpy(img->debuglink, link);
				img->debuglink_crc = crc;
			}
		} else if (name && sh.sh_type != SHT_NOBITS && sh.sh_size > 0 &&
			   (!strcmp(name, ".debug_info") || !strcmp(name, ".zdebug_info"))) {
			img->has_debug_info = 1;
		}
	}
}

static int elfimg_init(struct elfimg *img)
{
	GElf_Ehdr eh;

	if (elf_kind(img->elf) != ELF_K_ELF || !gelf_getehdr(img->elf, &eh)) {
		sonde__elfimg_close(img);
		return -SONDE_E_FORMAT;
	}
	img->type = eh.e_type;
	elfimg_read_loads(img);
	elfimg_scan_sections(img);
	img->build_id_len = sonde__elf_build_id(img->elf, img->build_id, sizeof(img->build_id));
	return 0;
}

int sonde__elfimg_open_fd(struct elfimg *img, int fd)
{
	struct stat st;

	memset(img, 0, sizeof(*img));
	elfimg_lib_init();
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -SONDE_E_FORMAT;
	img->file_size = (uint64_t)st.st_size;
	img->elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!img->elf)
		return -SONDE_E_FORMAT;
	/* Everything is read from the private mapping from now on; the caller may close fd. */
	elf_cntl(img->elf, ELF_C_FDDONE);
	return elfimg_init(img);
}

int sonde__elfimg_open_mem(struct elfimg *img, const void *buf, size_t len)
{
	memset(img, 0, sizeof(*img));
	elfimg_lib_init();
	/* libelf may write into a memory image (ELF_C_READ_MMAP_PRIVATE semantics, e.g. when
	 * decompressing sections), so it gets a private copy. */
	img->mem = sonde__malloc(len ? len : 1);
	if (!img->mem)
		return -ENOMEM;
	memcpy(img->mem, buf, len);
	img->file_size = len;
	img->elf = elf_memory(img->mem, len);
	if (!img->elf) {
		sonde__free(img->mem);
		img->mem = NULL;
		return -SONDE_E_FORMAT;
	}
	return elfimg_init(img);
}

struct regfile_rules sonde__elfimg_rules(bool trusted, struct regfile_refusals *refusals)
{
	return (struct regfile_rules){
		.what = "ELF file",
		.max_size = ELFIMG_MAX_BYTES,
		.follow = trusted,
		.refusals = refusals,
	};
}

int sonde__elfimg_open_path(struct elfimg *img, const char *path, bool trusted,
		     struct regfile_refusals *refusals)
{
	struct regfile_rules rules = sonde__elfimg_rules(trusted, refusals);
	int fd = sonde__regfile_open(path, &rules, NULL);
	int r;

	memset(img, 0, sizeof(*img));
	if (fd < 0)
		return fd;
	r = sonde__elfimg_open_fd(img, fd);
	close(fd);
	return r;
}

void sonde__elfimg_close(struct elfimg *img)
{
	if (!img)
		return;
	if (img->elf)
		elf_end(img->elf);
	sonde__free(img->mem);
	img->elf = NULL;
	img->mem = NULL;
}

int sonde__elfimg_mapping_to_vaddr(const struct elfimg *img, uint64_t pgoff, uint64_t off, uint64_t *vaddr)
{
	const struct elfimg_load *x = NULL;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	for (size_t i = 0; i < img->n_loads; i++) {
		if (!(img->loads[i].flags & PF_X))
			continue;
		if (x)
			return -SONDE_E_RANGE; /* several code segments: which one is ambiguous */
		x = &img->loads[i];
	}
	if (!x || off < pgoff || off - pgoff >= x->memsz + page)
		return -SONDE_E_RANGE;
	*vaddr = (x->vaddr & ~(page - 1)) + (off - pgoff);
	return 0;
}

int sonde__elfimg_off_to_vaddr(const struct elfimg *img, uint64_t off, uint64_t *vaddr)
{
	if (!img->n_loads && img->type == ET_REL) {
		*vaddr = off;
		return 0;
	}
	for (size_t i = 0; i < img->n_loads; i++) {
		const struct elfimg_load *l = &img->loads[i];
		/* A sampled address lies in the file-backed part of an executable segment; the
		 * bss tail (memsz > filesz) has no file offset to be recorded with. */
		if (off >= l->offset && off - l->offset < l->filesz) {
			*vaddr = off - l->offset + l->vaddr;
			return 0;
		}
	}
	return -SONDE_E_RANGE;
}
