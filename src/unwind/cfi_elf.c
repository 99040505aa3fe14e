/* The ELF front end of the CFI table builder: finds .eh_frame (through .eh_frame_hdr when it
 * is valid, or PT_GNU_EH_FRAME when the image has no section headers, as images read from
 * memory may not), .debug_frame of the image and of a separate debug file, and hands the
 * FDEs to sonde__cfi_table_build. libelf locates sections; the CFI bytes are parsed in cfi.c. */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "unwind/cfi.h"
#include "unwind/cfi_parse.h"

#ifndef PT_GNU_EH_FRAME
#define PT_GNU_EH_FRAME 0x6474e550
#endif

struct elf_in {
	Elf *e;
	const uint8_t *buf;
	size_t len;
	struct cfi_image img;
	struct cfi_sec eh, hdr, dbg;
	uint64_t hdr_phdr_vaddr, hdr_phdr_size; /* PT_GNU_EH_FRAME, when present */
};

static int elf_in_open(struct elf_in *in, const void *buf, size_t len)
{
	GElf_Ehdr eh;
	size_t nph;

	memset(in, 0, sizeof(*in));
	in->buf = buf;
	in->len = len;
	in->img.buf = buf;
	in->img.len = len;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	/* elf_memory takes a non-const pointer; with a read-only image of our own byte order
	 * libelf does not write to it. */
	in->e = elf_memory((char *)buf, len);
	if (!in->e || elf_kind(in->e) != ELF_K_ELF || gelf_getclass(in->e) != ELFCLASS64 ||
	    !gelf_getehdr(in->e, &eh) || eh.e_machine != EM_X86_64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB)
		return -EINVAL;
	if (elf_getphdrnum(in->e, &nph) < 0)
		nph = 0;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(in->e, (int)i, &ph))
			continue;
		if (ph.p_type == PT_GNU_EH_FRAME) {
			in->hdr_phdr_vaddr = ph.p_vaddr;
			in->hdr_phdr_size = ph.p_memsz;
		}
		if (ph.p_type != PT_LOAD || in->img.n_loads == CFI_MAX_LOADS)
			continue;
		in->img.loads[in->img.n_loads++] = (struct cfi_load){
			ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, (ph.p_flags & PF_X) != 0};
	}
	return 0;
}

/* The bytes of a section, decompressing SHF_COMPRESSED ones; false when it has none. */
static bool section_bytes(struct elf_in *in, Elf_Scn *scn, const GElf_Shdr *sh, const uint8_t **p,
			  size_t *n)
{
	if (sh->sh_type == SHT_NOBITS || sh->sh_size == 0)
		return false;
	if (sh->sh_flags & SHF_COMPRESSED) {
		Elf_Data *d;
		if (elf_compress(scn, 0, 0) < 0 || !(d = elf_getdata(scn, NULL)) || !d->d_buf)
			return false;
		*p = d->d_buf;
		*n = d->d_size;
		return true;
	}
	if (sh->sh_offset > in->len || in->len - sh->sh_offset < sh->sh_size)
		return false;
	*p = in->buf + sh->sh_offset;
	*n = sh->sh_size;
	return true;
}

static void find_sections(struct elf_in *in)
{
	size_t shstrndx;
	uint64_t got = 0, text = 0;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(in->e, &shstrndx) < 0)
		return;
	while ((scn = elf_nextscn(in->e, scn))) {
		GElf_Shdr sh;
		const char *name;
		struct cfi_sec *s = NULL;
		if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(in->e, shstrndx, sh.sh_name)))
			continue;
		if (!strcmp(name, ".eh_frame"))
			s = &in->eh;
		else if (!strcmp(name, ".eh_frame_hdr"))
			s = &in->hdr;
		else if (!strcmp(name, ".debug_frame"))
			s = &in->dbg;
		else if (!strcmp(name, ".got"))
			got = sh.sh_addr;
		else if (!strcmp(name, ".text"))
			text = sh.sh_addr;
		if (s && section_bytes(in, scn, &sh, &s->buf, &s->len)) {
			s->vaddr = sh.sh_addr;
			s->img = &in->img;
		}
	}
	in->eh.text_base = text;
	in->eh.data_base = got; /* datarel in .eh_frame is GOT-relative where it is used */
	in->hdr.data_base = in->hdr.vaddr;
	in->hdr.text_base = text;
	in->dbg.debug_frame = true;
}

/* Maps vaddr to the image's file bytes up to the end of the file-backed part of its
 * segment. */
static bool image_span(const struct cfi_image *img, uint64_t vaddr, const uint8_t **p, size_t *n)
{
	for (unsigned i = 0; i < img->n_loads; i++) {
		const struct cfi_load *l = &img->loads[i];
		if (vaddr < l->vaddr || vaddr - l->vaddr >= l->filesz)
			continue;
		uint64_t off = l->offset + (vaddr - l->vaddr), end = l->offset + l->filesz;
		if (end < l->offset || end > img->len || off >= end)
			return false;
		*p = img->buf + off;
		*n = (size_t)(end - off);
		return true;
	}
	return false;
}

/* No section headers (stripped, or an image read from memory): .eh_frame_hdr comes from
 * PT_GNU_EH_FRAME and .eh_frame from its eh_frame_ptr, up to the end of its segment. */
static void sections_from_phdrs(struct elf_in *in)
{
	struct cfi_sec *h = &in->hdr;
	uint64_t eh_ptr;

	if (in->eh.buf || !in->hdr_phdr_vaddr ||
	    !image_span(&in->img, in->hdr_phdr_vaddr, &h->buf, &h->len))
		return;
	if (h->len > in->hdr_phdr_size)
		h->len = (size_t)in->hdr_phdr_size;
	h->vaddr = in->hdr_phdr_vaddr;
	h->data_base = h->vaddr;
	h->img = &in->img;
	struct cfi_rd r = {h->buf, h->buf + h->len, false};
	if (sonde__cfi_rd_u8(&r) != 1)
		return;
	uint8_t enc = sonde__cfi_rd_u8(&r);
	r.p += 2;
	if (r.p > r.end || !sonde__cfi_rd_encoded(&r, h, enc, &eh_ptr))
		return;
	if (image_span(&in->img, eh_ptr, &in->eh.buf, &in->eh.len)) {
		in->eh.vaddr = eh_ptr;
		in->eh.img = &in->img;
	}
}

static unsigned table_entry_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case 0x02:
	case 0x0a:
		return 2;
	case 0x03:
	case 0x0b:
		return 4;
	case 0x00:
	case 0x04:
	case 0x0c:
		return 8;
	default:
		return 0; /* leb128 cannot form a binary search table */
	}
}

/* The FDEs listed in .eh_frame_hdr's search table. Returns 0 when the table was valid and
 * used, 1 when it is absent or invalid (the caller scans .eh_frame), -ENOMEM. */
static int hdr_fdes(const struct cfi_sec *h, const struct cfi_sec *eh, struct cfi_fde_list *l,
		    uint32_t *bad)
{
	struct cfi_rd r;
	uint64_t eh_ptr, count, prev = 0;
	size_t n0 = l->n;
	uint32_t bad0 = *bad;

	/* An image without .eh_frame_hdr leaves h->buf NULL: no reader over it, since even
	 * NULL + 0 is undefined. */
	if (!h->buf || !eh->buf)
		return 1;
	r = (struct cfi_rd){h->buf, h->buf + h->len, false};
	if (sonde__cfi_rd_u8(&r) != 1)
		return 1;
	uint8_t ptr_enc = sonde__cfi_rd_u8(&r), count_enc = sonde__cfi_rd_u8(&r), table_enc = sonde__cfi_rd_u8(&r);
	unsigned sz = table_entry_size(table_enc);
	if (r.err || !sz || table_enc == 0xff || count_enc == 0xff ||
	    !sonde__cfi_rd_encoded(&r, h, ptr_enc, &eh_ptr) || eh_ptr != eh->vaddr ||
	    !sonde__cfi_rd_encoded(&r, h, count_enc, &count) || count > (uint64_t)(r.end - r.p) / (2 * sz))
		return 1;
	for (uint64_t i = 0; i < count; i++) {
		struct cfi_fde_ref f = {.src = 0};
		uint64_t init, addr, b, e;
		if (!sonde__cfi_rd_encoded(&r, h, table_enc, &init) ||
		    !sonde__cfi_rd_encoded(&r, h, table_enc, &addr) || init < prev || addr < eh->vaddr ||
		    addr - eh->vaddr >= eh->len)
			goto invalid;
		prev = init;
		f.off = (uint32_t)(addr - eh->vaddr);
		if (!sonde__cfi_fde_range(eh, f.off, &b, &e) || b != init) {
			(*bad)++;
			continue;
		}
		f.pc_begin = b;
		f.pc_end = e;
		if (sonde__cfi_fde_list_add(l, &f) < 0)
			return -ENOMEM;
	}
	return 0;
invalid:
	l->n = n0;
	*bad = bad0;
	return 1;
}

static struct cfi_table *from_elf(const void *image, size_t len, const void *debug,
				  size_t debug_len, bool lazy)
{
	struct elf_in in, dbg;
	struct cfi_fde_list l = {0};
	struct cfi_table *t = NULL;
	uint32_t bad = 0;
	int rc, hdr_rc = 1;
	bool eager_owned = false; /* lazy was asked for, but the table is built: image is freed */

	memset(&dbg, 0, sizeof(dbg));
	rc = elf_in_open(&in, image, len);
	if (rc < 0)
		goto out;
	find_sections(&in);
	sections_from_phdrs(&in);
	if (debug && (rc = elf_in_open(&dbg, debug, debug_len)) == 0)
		find_sections(&dbg);
	rc = 0;
	dbg.dbg.img = &in.img;
	struct cfi_sec secs[3] = {in.eh, in.dbg, dbg.dbg};
	hdr_rc = hdr_fdes(&in.hdr, &in.eh, &l, &bad);
	if (hdr_rc > 0 && in.eh.buf)
		hdr_rc = sonde__cfi_scan_fdes(&in.eh, 0, &l, &bad) < 0 ? -ENOMEM : 1;
	if (hdr_rc < 0 || (in.dbg.buf && sonde__cfi_scan_fdes(&in.dbg, 1, &l, &bad) < 0) ||
	    (dbg.dbg.buf && sonde__cfi_scan_fdes(&dbg.dbg, 2, &l, &bad) < 0)) {
		rc = -ENOMEM;
		goto out;
	}
	/* A decompressed section is libelf's, freed below: such an image is built eagerly. */
	for (unsigned i = 0; i < 3 && lazy; i++)
		if (secs[i].buf && (secs[i].buf < (const uint8_t *)image ||
				    secs[i].buf + secs[i].len > (const uint8_t *)image + len))
			lazy = false, eager_owned = true;
	t = lazy ? sonde__cfi_table_lazy(secs, 3, &l, bad, &in.img, (void *)image)
		 : sonde__cfi_table_build(secs, 3, &l, bad, &in.img);
	if (t && eager_owned)
		sonde__free((void *)image);
	if (!t) {
		rc = -errno;
		goto out;
	}
	struct cfi_table_stats *st = sonde__cfi_table_stats_mut(t);
	st->used_hdr = hdr_rc == 0;
	st->used_eh_frame = in.eh.buf != NULL;
	st->used_debug_frame = in.dbg.buf || dbg.dbg.buf;
out:
	sonde__free(l.v);
	if (dbg.e)
		elf_end(dbg.e);
	if (in.e)
		elf_end(in.e);
	if (!t)
		errno = -rc;
	return t;
}

struct cfi_table *sonde__cfi_table_from_elf(const void *image, size_t len, const void *debug,
					    size_t debug_len)
{
	return from_elf(image, len, debug, debug_len, false);
}

struct cfi_table *sonde__cfi_table_from_elf_lazy(void *image, size_t len)
{
	return from_elf(image, len, NULL, 0, true);
}
