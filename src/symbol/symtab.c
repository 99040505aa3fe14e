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

int sonde__symtab_add_plt(struct symtab *t, Elf *elf)
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
	/* two passes: the names' total size, then the names, so entries can point at them */
	size_t bytes = 0, added = 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = reloc_name(elf, rd, rela, i, dd, dsh.sh_link);
		if (name && !sonde__symtab_find(t, start + i * entsize))
			bytes += strlen(name) + sizeof("@plt");
	}
	char *names = bytes ? sonde__malloc(bytes) : NULL;
	struct sym_entry *v = bytes ? sonde__realloc(t->v, (t->n + n) * sizeof(*v)) : NULL;
	if (!bytes || !names || !v) {
		sonde__free(names);
		if (v)
			t->v = v;
		return bytes ? -ENOMEM : 0;
	}
	t->v = v;
	char *p = names;
	size_t old = t->n;
	for (size_t i = 0; i < n; i++) {
		uint64_t addr = start + i * entsize;
		const char *name = reloc_name(elf, rd, rela, i, dd, dsh.sh_link);
		struct symtab head = {t->v, old, NULL}; /* only the real symbols */
		if (!name || sonde__symtab_find(&head, addr))
			continue;
		int len = sprintf(p, "%s@plt", name);
		t->v[t->n++] = (struct sym_entry){.addr = addr, .end = addr + entsize, .name = p};
		p += len + 1;
		added++;
	}
	sonde__free(t->plt_names);
	t->plt_names = names;
	qsort(t->v, t->n, sizeof(*t->v), by_addr);
	return (int)added;
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
