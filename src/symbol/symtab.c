#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "symbol/symtab.h"

/* A candidate while building. Several names for one address are common (aliases,
 * ifuncs and their resolvers, assembly entry points); the one kept is the one libdwfl
 * (eu-addr2line, perf with libdw) reports: a sized symbol over a sizeless one, then
 * global over weak over local, then the first in the table. */
struct sym_cand {
	struct sym_entry e;
	uint64_t size;
	uint64_t sec_end; /* end of the containing section, bounds size-0 symbols */
	uint32_t index;	  /* position in the symbol table */
	uint8_t bind_rank;
};

static int cand_better(const struct sym_cand *a, const struct sym_cand *b)
{
	if ((a->size != 0) != (b->size != 0))
		return a->size != 0;
	if (a->bind_rank != b->bind_rank)
		return a->bind_rank < b->bind_rank;
	return a->index < b->index;
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct sym_cand *a = pa, *b = pb;

	if (a->e.addr != b->e.addr)
		return a->e.addr < b->e.addr ? -1 : 1;
	/* best first among equal addresses */
	if (cand_better(a, b))
		return -1;
	if (cand_better(b, a))
		return 1;
	return 0;
}

static int sym_wanted(Elf *elf, const GElf_Sym *sym, uint64_t *sec_end)
{
	int type = GELF_ST_TYPE(sym->st_info), bind = GELF_ST_BIND(sym->st_info);
	GElf_Shdr sh;
	Elf_Scn *scn;

	if (sym->st_shndx == SHN_UNDEF || sym->st_shndx >= SHN_LORESERVE || sym->st_value == 0)
		return 0;
	scn = elf_getscn(elf, sym->st_shndx);
	if (!scn || !gelf_getshdr(scn, &sh))
		return 0;
	*sec_end = sh.sh_addr + sh.sh_size;
	if (type == STT_FUNC || type == STT_GNU_IFUNC)
		return 1;
	/* Untyped global labels in code (hand-written assembly entry points) are functions
	 * too; local untyped ones are branch targets and mapping symbols. */
	return type == STT_NOTYPE && bind != STB_LOCAL && (sh.sh_flags & SHF_EXECINSTR);
}

static Elf_Scn *find_section(Elf *elf, uint32_t sh_type, GElf_Shdr *sh)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, sh) && sh->sh_type == sh_type)
			return scn;
	return NULL;
}

static size_t collect(Elf *elf, Elf_Data *d, const GElf_Shdr *sh, struct sym_cand *c, size_t max)
{
	size_t n = 0;

	for (size_t i = 1; i < max; i++) {
		GElf_Sym sym;
		uint64_t sec_end;
		if (!gelf_getsym(d, (int)i, &sym) || !sym_wanted(elf, &sym, &sec_end))
			continue;
		const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || !name[0])
			continue;
		int bind = GELF_ST_BIND(sym.st_info);
		c[n++] = (struct sym_cand){
			.e = {.addr = sym.st_value, .name = name},
			.size = sym.st_size,
			.sec_end = sec_end,
			.index = (uint32_t)i,
			.bind_rank = bind == STB_GLOBAL ? 0
				     : bind == STB_WEAK ? 1
							: 2,
		};
	}
	return n;
}

/* Sorts, keeps the best name per address, and gives every symbol its end: its size, or
 * for size 0 the next symbol's address (bounded by its section). */
static size_t finish(struct sym_cand *c, size_t n, struct sym_entry *out)
{
	size_t m = 0;

	qsort(c, n, sizeof(*c), cand_cmp);
	for (size_t i = 0; i < n; i++) {
		if (m && out[m - 1].addr == c[i].e.addr)
			continue;
		size_t next = i + 1;
		while (next < n && c[next].e.addr == c[i].e.addr)
			next++;
		uint64_t end = c[i].e.addr + c[i].size;
		if (!c[i].size) {
			end = next < n ? c[next].e.addr : c[i].sec_end;
			if (end > c[i].sec_end && c[i].sec_end > c[i].e.addr)
				end = c[i].sec_end;
			if (end <= c[i].e.addr)
				end = c[i].e.addr + 1;
		} else if (end < c[i].e.addr) {
			end = UINT64_MAX; /* overflowing size: clamp */
		}
		out[m] = c[i].e;
		out[m].end = end;
		m++;
	}
	return m;
}

int sonde__symtab_build(struct symtab *t, Elf *elf, uint32_t sh_type)
{
	GElf_Shdr sh;
	Elf_Scn *scn = find_section(elf, sh_type, &sh);
	struct sym_cand *c;
	Elf_Data *d;
	size_t max, n;

	t->v = NULL;
	t->n = 0;
	t->plt_names = NULL;
	if (!scn || sh.sh_type == SHT_NOBITS || !(d = elf_getdata(scn, NULL)))
		return 0;
	/* The count comes from the data libelf actually holds (bounded by the file), not
	 * from the header's claims. */
	max = d->d_size /
	      (gelf_getclass(elf) == ELFCLASS64 ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym));
	if (max < 2 || max > (1u << 26))
		return 0;
	c = sonde__malloc(max * sizeof(*c));
	if (!c)
		return -ENOMEM;
	n = collect(elf, d, &sh, c, max);
	if (n) {
		t->v = sonde__malloc(n * sizeof(*t->v));
		if (!t->v) {
			sonde__free(c);
			return -ENOMEM;
		}
		t->n = finish(c, n, t->v);
	}
	sonde__free(c);
	return (int)t->n;
}

static Elf_Scn *section_named(Elf *elf, const char *name, GElf_Shdr *sh)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(elf, &shstrndx) < 0)
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *n =
			gelf_getshdr(scn, sh) ? elf_strptr(elf, shstrndx, sh->sh_name) : NULL;
		if (n && !strcmp(n, name) && sh->sh_type != SHT_NOBITS)
			return scn;
	}
	return NULL;
}

/* Where the stubs are: [*start, *end) and the size of one, from the machine's layout. */
static int plt_layout(Elf *elf, uint64_t *start, uint64_t *end, uint64_t *entsize)
{
	GElf_Ehdr eh;
	GElf_Shdr sh;
	uint64_t header;

	if (!gelf_getehdr(elf, &eh))
		return -1;
	if (eh.e_machine == EM_X86_64 || eh.e_machine == EM_386)
		header = 16, *entsize = 16;
	else if (eh.e_machine == EM_AARCH64)
		header = 32, *entsize = 16;
	else
		return -1;
	/* with IBT the stubs called are in .plt.sec, one per entry, without a header */
	if (section_named(elf, ".plt.sec", &sh))
		header = 0;
	else if (!section_named(elf, ".plt", &sh))
		return -1;
	*start = sh.sh_addr + header;
	*end = sh.sh_addr + sh.sh_size;
	return *start < *end ? 0 : -1;
}

static int by_addr(const void *pa, const void *pb)
{
	const struct sym_entry *a = pa, *b = pb;

	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* The dynamic symbol name of relocation i of data d (RELA when rela), or NULL. */
static const char *reloc_name(Elf *elf, Elf_Data *d, bool rela, size_t i, Elf_Data *syms,
			      size_t strtab)
{
	GElf_Rela ra;
	GElf_Rel r;
	GElf_Sym sym;
	uint64_t info;

	if (rela ? !gelf_getrela(d, (int)i, &ra) : !gelf_getrel(d, (int)i, &r))
		return NULL;
	info = rela ? ra.r_info : r.r_info;
	if (!gelf_getsym(
		    syms,
		    (int)(gelf_getclass(elf) == ELFCLASS64 ? GELF_R_SYM(info) : ELF32_R_SYM(info)),
		    &sym))
		return NULL;
	const char *name = elf_strptr(elf, strtab, sym.st_name);
	return name && name[0] ? name : NULL;
}

/* A stub found: where it is and the symbol it jumps to (a string of the ELF image). */
struct plt_stub {
	uint64_t addr, end;
	const char *name;
};

/* Appends "NAME@plt" entries for stubs[0..n) that no real symbol covers. Count added or
 * -ENOMEM. Two passes: the names' total size, then the names, so entries can point at
 * them. */
static int add_stubs(struct symtab *t, const struct plt_stub *stubs, size_t n)
{
	struct symtab head = {t->v, t->n, NULL}; /* only the real symbols */
	size_t bytes = 0, added = 0;

	for (size_t i = 0; i < n; i++)
		if (!sonde__symtab_find(&head, stubs[i].addr))
			bytes += strlen(stubs[i].name) + sizeof("@plt");
	if (!bytes)
		return 0;
	char *names = sonde__malloc(bytes);
	struct sym_entry *v = names ? sonde__realloc(t->v, (t->n + n) * sizeof(*v)) : NULL;
	if (!v) {
		sonde__free(names);
		return -ENOMEM;
	}
	t->v = v;
	head.v = v;
	char *p = names;
	for (size_t i = 0; i < n; i++) {
		if (sonde__symtab_find(&head, stubs[i].addr))
			continue;
		int len = sprintf(p, "%s@plt", stubs[i].name);
		t->v[t->n++] =
			(struct sym_entry){.addr = stubs[i].addr, .end = stubs[i].end, .name = p};
		p += len + 1;
		added++;
	}
	sonde__free(t->plt_names);
	t->plt_names = names;
	qsort(t->v, t->n, sizeof(*t->v), by_addr);
	return (int)added;
}

/* AArch64 and i386: the n-th stub past the header is the n-th .rela.plt (.rel.plt) entry. */
static int add_plt_by_index(struct symtab *t, Elf *elf)
{
	GElf_Shdr rsh, dsh;
	uint64_t start, end, entsize;
	bool rela = true;
	Elf_Scn *rscn = section_named(elf, ".rela.plt", &rsh), *dscn;
	Elf_Data *rd, *dd;

	if (!rscn) {
		rscn = section_named(elf, ".rel.plt", &rsh);
		rela = false;
	}
	if (!rscn || plt_layout(elf, &start, &end, &entsize) < 0 ||
	    !(dscn = elf_getscn(elf, rsh.sh_link)) || !gelf_getshdr(dscn, &dsh) ||
	    !(rd = elf_getdata(rscn, NULL)) || !(dd = elf_getdata(dscn, NULL)))
		return 0;
	size_t one = gelf_fsize(elf, rela ? ELF_T_RELA : ELF_T_REL, 1, EV_CURRENT);
	size_t n = one ? rd->d_size / one : 0, stubs = (size_t)((end - start) / entsize);
	if (n > stubs)
		n = stubs; /* a relocation table longer than the stubs: trust the stubs */
	if (!n || n > (1u << 20))
		return 0;
	struct plt_stub *v = sonde__malloc(n * sizeof(*v));
	size_t k = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *name = reloc_name(elf, rd, rela, i, dd, dsh.sh_link);
		uint64_t addr = start + i * entsize;
		if (name)
			v[k++] = (struct plt_stub){addr, addr + entsize, name};
	}
	int added = add_stubs(t, v, k);
	sonde__free(v);
	return added;
}

/* ---- x86-64: stubs decoded, as binutils' synthetic symbols are ----
 *
 * Every stub that calls a function is an indirect jump through its GOT slot,
 * `jmp *disp32(%rip)` (ff 25), after an endbr64 (f3 0f 1e fa) with IBT and behind a bnd
 * prefix (f2) with MPX. The slot names the function: a JUMP_SLOT relocation of .rela.plt
 * (stubs of .plt, or of .plt.sec with IBT) or a GLOB_DAT one of .rela.dyn (.plt.got: a
 * function whose address the program also loads from the GOT, with -z now or not). Lazy
 * .plt entries of an IBT binary and the PLT header jump elsewhere and are not stubs. */

struct got_name {
	uint64_t slot;
	const char *name;
};

static int by_slot(const void *pa, const void *pb)
{
	const struct got_name *a = pa, *b = pb;

	return a->slot < b->slot ? -1 : a->slot > b->slot;
}

/* JUMP_SLOT and GLOB_DAT relocations of RELA section scn with a named symbol, appended to
 * *v. 0 or -ENOMEM. */
static int collect_got_names(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct got_name **v,
			     size_t *n, size_t *cap)
{
	GElf_Shdr dsh;
	Elf_Scn *dscn = elf_getscn(elf, sh->sh_link);
	Elf_Data *rd = elf_getdata(scn, NULL), *dd;

	if (!dscn || !gelf_getshdr(dscn, &dsh) || !rd || !(dd = elf_getdata(dscn, NULL)))
		return 0;
	size_t count = rd->d_size / sizeof(Elf64_Rela);
	for (size_t i = 0; i < count && i < (1u << 20); i++) {
		GElf_Rela ra;
		if (!gelf_getrela(rd, (int)i, &ra))
			break;
		uint32_t type = (uint32_t)GELF_R_TYPE(ra.r_info);
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		const char *name = reloc_name(elf, rd, true, i, dd, dsh.sh_link);
		if (!name)
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			struct got_name *nv = sonde__realloc(*v, nc * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			*v = nv;
			*cap = nc;
		}
		(*v)[(*n)++] = (struct got_name){ra.r_offset, name};
	}
	return 0;
}

/* The GOT slot stub bytes b (len) at addr jump through, or 0. */
static uint64_t stub_slot(const uint8_t *b, size_t len, uint64_t addr)
{
	static const uint8_t endbr64[4] = {0xf3, 0x0f, 0x1e, 0xfa};
	size_t at = len >= 4 && !memcmp(b, endbr64, 4) ? 4 : 0;

	if (at < len && b[at] == 0xf2)
		at++; /* bnd */
	if (at + 6 > len || b[at] != 0xff || b[at + 1] != 0x25)
		return 0;
	int32_t disp;
	memcpy(&disp, b + at + 2, 4);
	return addr + at + 6 + (uint64_t)(int64_t)disp;
}

static const char *got_lookup(const struct got_name *v, size_t n, uint64_t slot)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].slot < slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && v[lo].slot == slot ? v[lo].name : NULL;
}

/* The stubs of PLT section `name`, appended to *out. 0 or -ENOMEM. */
static int decode_plt_section(Elf *elf, const char *name, const struct got_name *got, size_t n_got,
			      struct plt_stub **out, size_t *n, size_t *cap)
{
	GElf_Shdr sh;
	Elf_Scn *scn = section_named(elf, name, &sh);
	Elf_Data *d = scn ? elf_getdata(scn, NULL) : NULL;

	if (!d || !d->d_buf)
		return 0;
	/* .plt.got has 8-byte entries without IBT, 16 with; the others 16 */
	uint64_t ent = sh.sh_entsize == 8 || sh.sh_entsize == 16 ? sh.sh_entsize : 16;
	size_t size = d->d_size < sh.sh_size ? d->d_size : (size_t)sh.sh_size;
	for (size_t off = 0; off + ent <= size && off < (1u << 24); off += ent) {
		uint64_t addr = sh.sh_addr + off;
		const char *fn = got_lookup(got, n_got,
					    stub_slot((const uint8_t *)d->d_buf + off, ent, addr));
		if (!fn)
			continue;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			struct plt_stub *nv = sonde__realloc(*out, nc * sizeof(*nv));
			if (!nv)
				return -ENOMEM;
			*out = nv;
			*cap = nc;
		}
		(*out)[(*n)++] = (struct plt_stub){addr, addr + ent, fn};
	}
	return 0;
}

static int add_plt_x86_64(struct symtab *t, Elf *elf)
{
	static const char *const sections[] = {".plt", ".plt.sec", ".plt.got"};
	struct got_name *got = NULL;
	struct plt_stub *stubs = NULL;
	size_t n_got = 0, cap_got = 0, n = 0, cap = 0;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	int err = 0;

	while (!err && (scn = elf_nextscn(elf, scn)))
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA)
			err = collect_got_names(elf, scn, &sh, &got, &n_got, &cap_got);
	if (!err && n_got)
		qsort(got, n_got, sizeof(*got), by_slot);
	for (size_t i = 0; !err && n_got && i < 3; i++)
		err = decode_plt_section(elf, sections[i], got, n_got, &stubs, &n, &cap);
	int added = err ? err : add_stubs(t, stubs, n);
	sonde__free(stubs);
	sonde__free(got);
	return added;
}

int sonde__symtab_add_plt(struct symtab *t, Elf *elf)
{
	GElf_Ehdr eh;

	if (!gelf_getehdr(elf, &eh))
		return 0;
	if (eh.e_machine == EM_X86_64 && gelf_getclass(elf) == ELFCLASS64)
		return add_plt_x86_64(t, elf);
	return add_plt_by_index(t, elf);
}

struct sym_entry *sonde__symtab_find(const struct symtab *t, uint64_t vaddr)
{
	size_t lo = 0, hi = t->n;

	/* the last symbol starting at or below vaddr */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->v[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* A small symbol nested in a larger one (an alias or a local entry point) may be the
	 * nearest start without containing vaddr: look back a few entries for the enclosing
	 * one. */
	for (size_t i = lo, k = 0; i > 0 && k < 8; i--, k++)
		if (vaddr < t->v[i - 1].end)
			return &t->v[i - 1];
	return NULL;
}

void sonde__symtab_free(struct symtab *t)
{
	if (!t)
		return;
	sonde__free(t->v);
	sonde__free(t->plt_names);
	t->v = NULL;
	t->n = 0;
	t->plt_names = NULL;
}
