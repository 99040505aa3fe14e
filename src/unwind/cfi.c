/* DWARF CFI: entries, pointer encodings, the CFA program interpreter and the compact table.
 *
 * A table is built once per module: every FDE's program (after its CIE's initial
 * instructions) is run to its end and each state is converted to a 16-byte row; equal
 * neighbouring rows are merged, and a CFI_CFA_NONE row marks the end of each FDE so that
 * gaps between functions do not inherit the rules of the function before them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/array.h"
#include "unwind/cfi.h"
#include "unwind/cfi_parse.h"
#include "unwind/unwind.h"

_Static_assert(sizeof(struct cfi_row) == 16, "cfi_row must stay 16 bytes");

struct cfi_table {
	uint64_t base;
	size_t n;
	struct cfi_row *rows;
	/* A bucket index over the rows, so that a lookup searches a few rows instead of all of
	 * them (the binary search over a large table was most of a warm unwind, in cache misses):
	 * bucket[k] is the last row whose pc is <= k << shift (0 if none), for k in 0..n_buckets
	 * (n_buckets + 1 entries). NULL when the table is small enough to search whole. */
	uint32_t *bucket;
	uint32_t n_buckets;
	uint8_t shift;
	struct cfi_table_stats stats;
	/* A lazy table (sonde__cfi_table_lazy): no rows of its own, but its FDEs, sorted,
	 * each run into rows at the first lookup within it; the bucket index is over their
	 * starts. It keeps the sections and the image they are read from. */
	struct lazy_fde *fdes;
	size_t n_fdes;
	struct cfi_sec secs[CFI_LAZY_SECS];
	struct cfi_image img;
	void *owned; /* the image's bytes, freed with the table */
	/* A lazy table's memo of the rows its lookups found, direct-mapped by a hash of the
	 * pc: a recording unwinds the same return addresses over and over, and a hit reads
	 * one slot where the search read the bucket index, the FDEs and the FDE's rows, cache
	 * misses one after the other. Allocated at the first lookup; NULL without memory. */
	struct memo *memo;
};

/* A pc a lookup found a row for (row NULL: an empty slot). */
struct memo {
	uint32_t pc;
	const struct cfi_row *row;
};
enum { MEMO_BITS = 10 };

/* An FDE of a lazy table: its code's range (relative to the table's base), where it is,
 * and once run, its rows (the last one the end marker at pc_end). */
struct lazy_fde {
	uint32_t pc, pc_end;
	uint32_t off;
	uint8_t src;
	uint8_t state; /* LAZY_* */
	uint16_t n;
	struct cfi_row *rows;
};
enum { LAZY_NEW = 0, LAZY_RUN = 1, LAZY_BAD = 2 };

/* ---- bounded reads ---------------------------------------------------------------- */

uint8_t sonde__cfi_rd_u8(struct cfi_rd *r)
{
	if (r->err || r->p >= r->end) {
		r->err = true;
		return 0;
	}
	return *r->p++;
}

static uint64_t rd_fixed(struct cfi_rd *r, unsigned n)
{
	uint64_t v = 0;

	if (r->err || (size_t)(r->end - r->p) < n) {
		r->err = true;
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	return v;
}

uint64_t sonde__cfi_rd_uleb(struct cfi_rd *r)
{
	uint64_t v = 0;

	for (unsigned shift = 0;; shift += 7) {
		uint8_t b = sonde__cfi_rd_u8(r);
		if (r->err)
			return 0;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
		if (shift > 70) { /* over-long: not something a toolchain emits */
			r->err = true;
			return 0;
		}
	}
}

int64_t sonde__cfi_rd_sleb(struct cfi_rd *r)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;

	do {
		b = sonde__cfi_rd_u8(r);
		if (r->err)
			return 0;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (shift > 77) {
			r->err = true;
			return 0;
		}
	} while (b & 0x80);
	if (shift < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << shift;
	return (int64_t)v;
}

bool sonde__cfi_image_read(const struct cfi_image *img, uint64_t vaddr, uint64_t *out)
{
	for (unsigned i = 0; img && i < img->n_loads; i++) {
		const struct cfi_load *l = &img->loads[i];
		if (vaddr < l->vaddr || vaddr - l->vaddr >= l->filesz ||
		    l->filesz - (vaddr - l->vaddr) < 8)
			continue;
		uint64_t off = l->offset + (vaddr - l->vaddr);
		if (off < l->offset || off > img->len || img->len - off < 8)
			return false;
		memcpy(out, img->buf + off, 8);
		return true;
	}
	return false;
}

bool sonde__cfi_image_exec_range(const struct cfi_image *img, uint64_t lo, uint64_t hi)
{
	if (!img || !img->n_loads)
		return true;
	for (unsigned i = 0; i < img->n_loads; i++) {
		const struct cfi_load *l = &img->loads[i];
		if (l->exec && lo >= l->vaddr && hi >= lo && hi - l->vaddr <= l->memsz)
			return true;
	}
	return false;
}

/* DW_EH_PE_* */
enum {
	PE_ABSPTR = 0x00,
	PE_ULEB = 0x01,
	PE_UDATA2 = 0x02,
	PE_UDATA4 = 0x03,
	PE_UDATA8 = 0x04,
	PE_SLEB = 0x09,
	PE_SDATA2 = 0x0a,
	PE_SDATA4 = 0x0b,
	PE_SDATA8 = 0x0c,
	PE_PCREL = 0x10,
	PE_TEXTREL = 0x20,
	PE_DATAREL = 0x30,
	PE_INDIRECT = 0x80,
	PE_OMIT = 0xff,
};

static bool rd_value(struct cfi_rd *r, uint8_t fmt, uint64_t *v)
{
	switch (fmt) {
	case PE_ABSPTR:
	case PE_UDATA8:
	case PE_SDATA8:
		*v = rd_fixed(r, 8);
		break;
	case PE_ULEB:
		*v = sonde__cfi_rd_uleb(r);
		break;
	case PE_UDATA2:
		*v = rd_fixed(r, 2);
		break;
	case PE_UDATA4:
		*v = rd_fixed(r, 4);
		break;
	case PE_SLEB:
		*v = (uint64_t)sonde__cfi_rd_sleb(r);
		break;
	case PE_SDATA2:
		*v = (uint64_t)(int64_t)(int16_t)rd_fixed(r, 2);
		break;
	case PE_SDATA4:
		*v = (uint64_t)(int64_t)(int32_t)rd_fixed(r, 4);
		break;
	default:
		return false;
	}
	return !r->err;
}

bool sonde__cfi_rd_encoded(struct cfi_rd *r, const struct cfi_sec *s, uint8_t enc, uint64_t *out)
{
	uint64_t field = s->vaddr + (uint64_t)(r->p - s->buf), v;

	if (enc == PE_OMIT) {
		*out = 0;
		return true;
	}
	if (!rd_value(r, enc & 0x0f, &v))
		return false;
	switch (enc & 0x70) {
	case 0:
		break;
	case PE_PCREL:
		v += field;
		break;
	case PE_TEXTREL:
		if (!s->text_base)
			return false;
		v += s->text_base;
		break;
	case PE_DATAREL:
		if (!s->data_base)
			return false;
		v += s->data_base;
		break;
	default: /* funcrel and aligned are not used in CIEs, FDEs or .eh_frame_hdr */
		return false;
	}
	if ((enc & PE_INDIRECT) && !sonde__cfi_image_read(s->img, v, &v))
		return false;
	*out = v;
	return true;
}

/* ---- CIEs and FDEs ---------------------------------------------------------------- */

struct entry {
	const uint8_t *start; /* the length field */
	const uint8_t *body;  /* after the CIE id / CIE pointer */
	const uint8_t *end;
	bool is_cie;
	uint64_t cie_off; /* FDEs: offset of their CIE in the section */
};

/* Reads the entry header at off. Returns 1, 0 at a terminator / end of section, -1 when
 * malformed. */
static int entry_at(const struct cfi_sec *s, size_t off, struct entry *e)
{
	if (off >= s->len)
		return 0;
	struct cfi_rd r = {s->buf + off, s->buf + s->len, false};
	uint64_t len = rd_fixed(&r, 4), id;
	bool dwarf64 = len == 0xffffffffu;

	if (r.err)
		return -1;
	if (len == 0)
		return 0;
	if (dwarf64)
		len = rd_fixed(&r, 8);
	if (r.err || len > (uint64_t)(r.end - r.p) || len < (dwarf64 ? 8u : 4u))
		return -1;
	e->start = s->buf + off;
	e->end = r.p + len;
	const uint8_t *id_pos = r.p;
	id = rd_fixed(&r, dwarf64 ? 8 : 4);
	e->body = r.p;
	if (s->debug_frame) {
		e->is_cie = id == (dwarf64 ? ~(uint64_t)0 : 0xffffffffu);
		e->cie_off = id;
	} else {
		e->is_cie = id == 0;
		uint64_t pos = (uint64_t)(id_pos - s->buf);
		if (!e->is_cie && id > pos)
			return -1;
		e->cie_off = pos - id;
	}
	return 1;
}

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc, lsda_enc;
	bool aug_z, signal;
	const uint8_t *insns, *insns_end;
};

static bool parse_aug_data(struct cfi_rd *r, const struct cfi_sec *s, const char *aug,
			   struct cie *c)
{
	for (const char *a = aug + 1; *a; a++) {
		uint64_t ignored;
		switch (*a) {
		case 'L':
			c->lsda_enc = sonde__cfi_rd_u8(r);
			break;
		case 'R':
			c->fde_enc = sonde__cfi_rd_u8(r);
			break;
		case 'P': {
			uint8_t enc = sonde__cfi_rd_u8(r);
			/* The personality routine is not needed to unwind; an indirect one that
			 * points outside the image is fine, so read it without indirection. */
			if (r->err || !sonde__cfi_rd_encoded(r, s, enc & 0x7f, &ignored))
				return false;
			break;
		}
		case 'S':
			c->signal = true;
			break;
		default:
			return true; /* 'z' lets the rest be skipped */
		}
	}
	return !r->err;
}

static bool parse_cie(const struct cfi_sec *s, const struct entry *e, struct cie *c)
{
	struct cfi_rd r = {e->body, e->end, false};
	uint8_t version = sonde__cfi_rd_u8(&r);
	const char *aug = (const char *)r.p;
	size_t aug_len = strnlen(aug, (size_t)(r.end - r.p));

	memset(c, 0, sizeof(*c));
	c->fde_enc = s->debug_frame ? PE_UDATA8 : PE_ABSPTR;
	c->lsda_enc = PE_OMIT;
	if (r.err || (version != 1 && version != 3 && version != 4) ||
	    aug_len == (size_t)(r.end - r.p))
		return false;
	r.p += aug_len + 1;
	if (aug[0] && aug[0] != 'z')
		return false; /* pre-'z' GCC augmentations ("eh") carry data we cannot size */
	if (version == 4) {
		uint8_t addr_size = sonde__cfi_rd_u8(&r), seg_size = sonde__cfi_rd_u8(&r);
		if (addr_size != 8 || seg_size != 0)
			return false;
	}
	c->code_align = sonde__cfi_rd_uleb(&r);
	c->data_align = sonde__cfi_rd_sleb(&r);
	c->ra_reg = version == 1 ? sonde__cfi_rd_u8(&r) : sonde__cfi_rd_uleb(&r);
	if (r.err || c->ra_reg >= UREG_COUNT || c->code_align == 0 || c->code_align > 0xffff ||
	    c->data_align < -0xffff || c->data_align > 0xffff)
		return false;
	if (aug[0] == 'z') {
		uint64_t n = sonde__cfi_rd_uleb(&r);
		if (r.err || n > (uint64_t)(r.end - r.p))
			return false;
		struct cfi_rd ar = {r.p, r.p + n, false};
		if (!parse_aug_data(&ar, s, aug, c))
			return false;
		c->aug_z = true;
		r.p += n;
	}
	c->insns = r.p;
	c->insns_end = r.end;
	return true;
}

struct fde {
	uint64_t pc_begin, pc_end;
	const uint8_t *insns, *insns_end;
};

static bool parse_fde(const struct cfi_sec *s, size_t off, struct cie *c, struct fde *f)
{
	struct entry e, ce;

	if (entry_at(s, off, &e) != 1 || e.is_cie || e.cie_off >= s->len)
		return false;
	if (entry_at(s, (size_t)e.cie_off, &ce) != 1 || !ce.is_cie || !parse_cie(s, &ce, c))
		return false;

	struct cfi_rd r = {e.body, e.end, false};
	uint64_t range;
	if (!sonde__cfi_rd_encoded(&r, s, c->fde_enc, &f->pc_begin))
		return false;
	/* The range is a length: same format, no base applied. */
	if (!rd_value(&r, c->fde_enc & 0x0f, &range))
		return false;
	f->pc_end = f->pc_begin + range;
	if (f->pc_end < f->pc_begin || range == 0)
		return false;
	if (c->aug_z) {
		uint64_t n = sonde__cfi_rd_uleb(&r);
		if (r.err || n > (uint64_t)(r.end - r.p))
			return false;
		r.p += n;
	}
	f->insns = r.p;
	f->insns_end = r.end;
	return true;
}

bool sonde__cfi_fde_range(const struct cfi_sec *s, size_t off, uint64_t *pc_begin, uint64_t *pc_end)
{
	struct cie c;
	struct fde f;

	if (!parse_fde(s, off, &c, &f))
		return false;
	*pc_begin = f.pc_begin;
	*pc_end = f.pc_end;
	return true;
}

int sonde__cfi_fde_list_add(struct cfi_fde_list *l, const struct cfi_fde_ref *f)
{
	if (sonde__array_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v), 256) < 0)
		return -ENOMEM;
	l->v[l->n++] = *f;
	return 0;
}

int sonde__cfi_scan_fdes(const struct cfi_sec *s, uint8_t src, struct cfi_fde_list *l, uint32_t *bad)
{
	size_t off = 0;
	struct entry e;
	int rc = 0;

	while (off < s->len && (rc = entry_at(s, off, &e)) == 1) {
		struct cfi_fde_ref f = {.off = (uint32_t)off, .src = src};
		if (off > UINT32_MAX)
			break;
		if (!e.is_cie) {
			if (sonde__cfi_fde_range(s, off, &f.pc_begin, &f.pc_end)) {
				if (sonde__cfi_fde_list_add(l, &f) < 0)
					return -ENOMEM;
			} else {
				(*bad)++;
			}
		}
		off = (size_t)(e.end - s->buf);
	}
	if (off < s->len && rc < 0)
		(*bad)++;
	return 0;
}

/* ---- the CFA program interpreter ------------------------------------------------- */

enum { STATE_STACK = 8 }; /* remember_state depth; GCC and clang use one or two levels */

struct rule {
	uint8_t kind; /* enum cfi_rule_kind */
	int64_t val;
};

struct cfa {
	uint8_t kind; /* enum cfi_cfa_kind */
	uint8_t reg;
	int64_t off;
};

struct state {
	struct cfa cfa;
	struct rule reg[UREG_COUNT];
};

struct builder {
	struct cfi_row *rows;
	size_t n, cap;
	uint64_t base;
	struct interp *in; /* one interpreter for every FDE of the table (~3 KiB) */
	bool oom;
};

struct interp {
	const struct cfi_sec *s;
	const struct cie *c;
	struct state cur, init;
	struct state stack[STATE_STACK];
	unsigned depth;
	uint64_t loc, end;
	struct builder *b; /* NULL while the CIE's initial instructions run */
};

/* DW_OP_* used by the expressions recognised below */
enum {
	OP_DEREF = 0x06,
	OP_AND = 0x1a,
	OP_PLUS = 0x22,
	OP_SHL = 0x24,
	OP_GE = 0x2a,
	OP_LIT0 = 0x30,
	OP_BREG0 = 0x70,
};

/* Recognises the CFA expressions compilers and linkers actually emit:
 *   DW_OP_breg<r> k; DW_OP_deref       CFA = *(r + k) (realigned stacks, glibc's
 *                                      __restore_rt: CFA = *(rsp + 160), the saved rsp)
 *   DW_OP_breg7 k; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit<B>; DW_OP_ge;
 *   DW_OP_lit3; DW_OP_shl; DW_OP_plus  the lazy-binding PLT: 8 more bytes are pushed from
 *                                      offset B of each 16-byte entry on
 * Anything else is marked unsupported (the unwinder falls back for that frame). */
static void parse_cfa_expr(const uint8_t *p, size_t n, struct cfa *cfa)
{
	struct cfi_rd r = {p, p + n, false};
	uint8_t op = sonde__cfi_rd_u8(&r);
	int64_t off;

	cfa->kind = CFI_CFA_UNSUPPORTED;
	if (op < OP_BREG0 || op > OP_BREG0 + UREG_RIP)
		return;
	off = sonde__cfi_rd_sleb(&r);
	if (r.err || off < INT32_MIN || off > INT32_MAX)
		return;
	size_t rest = (size_t)(r.end - r.p);
	if (rest == 1 && r.p[0] == OP_DEREF) {
		*cfa = (struct cfa){CFI_CFA_DEREF, (uint8_t)(op - OP_BREG0), off};
		return;
	}
	if (op == OP_BREG0 + UREG_RSP && rest == 9 && r.p[0] == OP_BREG0 + UREG_RIP &&
	    r.p[1] == 0 && r.p[2] == OP_LIT0 + 15 && r.p[3] == OP_AND && r.p[4] >= OP_LIT0 &&
	    r.p[4] <= OP_LIT0 + 15 && r.p[5] == OP_GE && r.p[6] == OP_LIT0 + 3 &&
	    r.p[7] == OP_SHL && r.p[8] == OP_PLUS)
		*cfa = (struct cfa){CFI_CFA_PLT, (uint8_t)(r.p[4] - OP_LIT0), off};
}

/* DW_CFA_expression blocks: "DW_OP_breg7 k" (saved at rsp + k) is what signal trampolines
 * use for every register; other expressions are marked unsupported. */
static struct rule parse_reg_expr(const uint8_t *p, size_t n)
{
	struct cfi_rd r = {p, p + n, false};
	struct rule ru = {CFI_RULE_UNSUPPORTED, 0};

	if (sonde__cfi_rd_u8(&r) != OP_BREG0 + UREG_RSP)
		return ru;
	int64_t k = sonde__cfi_rd_sleb(&r);
	if (!r.err && r.p == r.end && k > -(1 << 20) && k < (1 << 20))
		ru = (struct rule){CFI_RULE_AT_RSP, k};
	return ru;
}

/* A factored operand; factors are at most 0xffff in magnitude (checked in parse_cie), so
 * the product cannot overflow once the operand is bounded. */
static int64_t factored(int64_t v, int64_t f, bool *ok)
{
	if (v > ((int64_t)1 << 40) || v < -((int64_t)1 << 40)) {
		*ok = false;
		return 0;
	}
	return v * f;
}

static uint8_t col_rule(const struct rule *ru, int8_t *off)
{
	*off = 0;
	switch (ru->kind) {
	case CFI_RULE_SAME:
	case CFI_RULE_UNDEFINED:
		return ru->kind;
	case CFI_RULE_OFFSET:
	case CFI_RULE_VAL_OFFSET:
	case CFI_RULE_AT_RSP:
		if (ru->val % 8 || ru->val / 8 < INT8_MIN || ru->val / 8 > INT8_MAX)
			return CFI_RULE_UNSUPPORTED;
		*off = (int8_t)(ru->val / 8);
		return ru->kind;
	case CFI_RULE_REGISTER:
		if (ru->val < 0 || ru->val >= UREG_COUNT)
			return CFI_RULE_UNSUPPORTED;
		*off = (int8_t)ru->val;
		return ru->kind;
	default:
		return CFI_RULE_UNSUPPORTED;
	}
}

static void to_row(const struct state *st, const struct cie *c, uint32_t pc, struct cfi_row *row)
{
	const unsigned cols[CFI_COLS] = {(unsigned)c->ra_reg, UREG_RBP, UREG_RBX};
	uint8_t kind = st->cfa.kind;

	memset(row, 0, sizeof(*row));
	row->pc = pc;
	if ((kind == CFI_CFA_REG || kind == CFI_CFA_DEREF) &&
	    (st->cfa.reg >= UREG_COUNT || st->cfa.off < INT32_MIN || st->cfa.off > INT32_MAX))
		kind = CFI_CFA_UNSUPPORTED;
	if (kind != CFI_CFA_UNSUPPORTED) {
		row->cfa_off = (int32_t)st->cfa.off;
		row->cfa_reg = st->cfa.reg;
	}
	row->cfa_kind = kind | (c->signal ? CFI_ROW_SIGNAL : 0);
	for (unsigned i = 0; i < CFI_COLS; i++)
		row->rules |= (uint16_t)(col_rule(&st->reg[cols[i]], &row->off[i])
					 << (i * CFI_RULE_BITS));
	for (unsigned r = 12; r <= 15; r++)
		if (st->reg[r].kind != CFI_RULE_SAME)
			row->rules |= (uint16_t)(1u << (CFI_CLOBBER_SHIFT + r - 12));
}

static bool same_rules(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->cfa_off == b->cfa_off && a->cfa_reg == b->cfa_reg && a->cfa_kind == b->cfa_kind &&
	       a->rules == b->rules && !memcmp(a->off, b->off, sizeof(a->off));
}

/* Appends a row; pcs never decrease. A row at the pc of the last one replaces it (e.g. the
 * next FDE starting where the previous one's end marker is). */
static void push_row(struct builder *b, const struct cfi_row *row)
{
	if (b->n && b->rows[b->n - 1].pc == row->pc)
		b->n--;
	if (b->n && same_rules(&b->rows[b->n - 1], row))
		return;
	if (sonde__array_grow(&b->rows, &b->cap, b->n + 1, sizeof(*b->rows), 1024) < 0) {
		b->oom = true;
		return;
	}
	b->rows[b->n++] = *row;
}

/* Closes the current row at the new location (clamped to the FDE's end). */
static void advance_to(struct interp *in, uint64_t loc)
{
	if (loc > in->end || loc < in->loc)
		loc = in->end;
	if (in->b && loc > in->loc) {
		struct cfi_row row;
		to_row(&in->cur, in->c, (uint32_t)(in->loc - in->b->base), &row);
		push_row(in->b, &row);
	}
	in->loc = loc;
}

static void set_rule(struct interp *in, uint64_t reg, uint8_t kind, int64_t val, bool ok)
{
	if (reg >= UREG_COUNT)
		return; /* vector and other registers do not matter for unwinding */
	in->cur.reg[reg] = (struct rule){ok ? kind : (uint8_t)CFI_RULE_UNSUPPORTED, val};
}

static void set_cfa(struct interp *in, uint64_t reg, int64_t off, bool ok)
{
	if (!ok || reg >= UREG_COUNT)
		in->cur.cfa = (struct cfa){CFI_CFA_UNSUPPORTED, 0, 0};
	else
		in->cur.cfa = (struct cfa){CFI_CFA_REG, (uint8_t)reg, off};
}

static bool rd_block(struct cfi_rd *r, const uint8_t **p, size_t *n)
{
	uint64_t len = sonde__cfi_rd_uleb(r);

	if (r->err || len > (uint64_t)(r->end - r->p))
		return false;
	*p = r->p;
	*n = (size_t)len;
	r->p += len;
	return true;
}

/* The operations that take operands beyond the opcode byte (0x05..0x2f). */
static bool run_extended(struct interp *in, struct cfi_rd *r, uint8_t op)
{
	const struct cie *c = in->c;
	bool ok = true;
	uint64_t reg = 0, a;
	const uint8_t *blk;
	size_t n;

	if (op != 0x0e && op != 0x13 && op != 0x0f && op != 0x2e)
		reg = sonde__cfi_rd_uleb(r);
	switch (op) {
	case 0x05: /* offset_extended */
		set_rule(in, reg, CFI_RULE_OFFSET,
			 factored((int64_t)(sonde__cfi_rd_uleb(r) & INT64_MAX), c->data_align, &ok), ok);
		break;
	case 0x06: /* restore_extended */
		if (reg < UREG_COUNT)
			in->cur.reg[reg] = in->init.reg[reg];
		break;
	case 0x07: /* undefined */
		set_rule(in, reg, CFI_RULE_UNDEFINED, 0, true);
		break;
	case 0x08: /* same_value */
		set_rule(in, reg, CFI_RULE_SAME, 0, true);
		break;
	case 0x09: /* register */
		a = sonde__cfi_rd_uleb(r);
		set_rule(in, reg, CFI_RULE_REGISTER, (int64_t)(a & 0xffff), a < UREG_COUNT);
		break;
	case 0x0c: /* def_cfa */
		set_cfa(in, reg, (int64_t)(sonde__cfi_rd_uleb(r) & INT64_MAX), true);
		break;
	case 0x0d: /* def_cfa_register: keeps the offset */
		set_cfa(in, reg, in->cur.cfa.off, in->cur.cfa.kind == CFI_CFA_REG);
		break;
	case 0x0e: /* def_cfa_offset */
		a = sonde__cfi_rd_uleb(r);
		set_cfa(in, in->cur.cfa.reg, (int64_t)(a & INT64_MAX),
			in->cur.cfa.kind == CFI_CFA_REG);
		break;
	case 0x0f: /* def_cfa_expression */
		if (!rd_block(r, &blk, &n))
			return false;
		parse_cfa_expr(blk, n, &in->cur.cfa);
		break;
	case 0x10: /* expression */
	case 0x16: /* val_expression */
		if (!rd_block(r, &blk, &n))
			return false;
		if (reg < UREG_COUNT)
			in->cur.reg[reg] = op == 0x10 ? parse_reg_expr(blk, n)
						      : (struct rule){CFI_RULE_UNSUPPORTED, 0};
		break;
	case 0x11: /* offset_extended_sf */
		set_rule(in, reg, CFI_RULE_OFFSET, factored(sonde__cfi_rd_sleb(r), c->data_align, &ok),
			 ok);
		break;
	case 0x12: /* def_cfa_sf */
		set_cfa(in, reg, factored(sonde__cfi_rd_sleb(r), c->data_align, &ok), ok);
		break;
	case 0x13: /* def_cfa_offset_sf */
		a = (uint64_t)factored(sonde__cfi_rd_sleb(r), c->data_align, &ok);
		set_cfa(in, in->cur.cfa.reg, (int64_t)a, ok && in->cur.cfa.kind == CFI_CFA_REG);
		break;
	case 0x14: /* val_offset */
		set_rule(in, reg, CFI_RULE_VAL_OFFSET,
			 factored((int64_t)(sonde__cfi_rd_uleb(r) & INT64_MAX), c->data_align, &ok), ok);
		break;
	case 0x15: /* val_offset_sf */
		set_rule(in, reg, CFI_RULE_VAL_OFFSET, factored(sonde__cfi_rd_sleb(r), c->data_align, &ok),
			 ok);
		break;
	case 0x2e: /* GNU_args_size: only matters to exception handling */
		sonde__cfi_rd_uleb(r);
		break;
	case 0x2f: /* GNU_negative_offset_extended */
		a = sonde__cfi_rd_uleb(r) & INT64_MAX;
		set_rule(in, reg, CFI_RULE_OFFSET, -factored((int64_t)a, c->data_align, &ok), ok);
		break;
	default:
		return false;
	}
	return !r->err;
}

static bool run_program(struct interp *in, const uint8_t *p, const uint8_t *end)
{
	struct cfi_rd r = {p, end, false};
	uint64_t a;

	while (r.p < r.end && !r.err) {
		uint8_t op = sonde__cfi_rd_u8(&r);
		switch (op >> 6) {
		case 1: /* advance_loc */
			advance_to(in, in->loc + (op & 0x3f) * in->c->code_align);
			continue;
		case 2: { /* offset */
			bool ok = true;
			int64_t off = factored((int64_t)(sonde__cfi_rd_uleb(&r) & INT64_MAX),
					       in->c->data_align, &ok);
			set_rule(in, op & 0x3f, CFI_RULE_OFFSET, off, ok);
			continue;
		}
		case 3: /* restore */
			if ((op & 0x3f) < UREG_COUNT)
				in->cur.reg[op & 0x3f] = in->init.reg[op & 0x3f];
			continue;
		}
		switch (op) {
		case 0x00: /* nop */
			break;
		case 0x01: /* set_loc */
			if (!sonde__cfi_rd_encoded(&r, in->s, in->c->fde_enc, &a) || a < in->loc)
				return false;
			advance_to(in, a);
			break;
		case 0x02: /* advance_loc1, 2, 4 */
		case 0x03:
		case 0x04:
			a = rd_fixed(&r, op == 0x02 ? 1 : op == 0x03 ? 2 : 4);
			advance_to(in, in->loc + a * in->c->code_align);
			break;
		case 0x0a: /* remember_state */
			if (in->depth == STATE_STACK)
				return false;
			in->stack[in->depth++] = in->cur;
			break;
		case 0x0b: /* restore_state (the CFA too, as GCC means it) */
			if (in->depth == 0)
				return false;
			in->cur = in->stack[--in->depth];
			break;
		default:
			if (!run_extended(in, &r, op))
				return false;
		}
	}
	return !r.err;
}

/* ---- building and looking up tables ---------------------------------------------- */

/* Runs one FDE into b. On failure b is left as it was. */
static bool run_fde(struct builder *b, const struct cfi_sec *s, size_t off)
{
	struct cie c;
	struct fde f;
	struct interp *in;
	size_t n0 = b->n;
	struct cfi_row last0 = n0 ? b->rows[n0 - 1] : (struct cfi_row){0};
	bool ok;

	if (!parse_fde(s, off, &c, &f) || f.pc_begin < b->base || f.pc_end - b->base > UINT32_MAX)
		return false;
	/* The builder's interpreter, ~3 KiB with the state stack: kept off the stack, and
	 * allocated once per table rather than per FDE. Only what the programs may read before
	 * writing is reset: a remembered state is written before it is read. */
	if (!b->in && !(b->in = sonde__malloc(sizeof(*b->in)))) {
		b->oom = true;
		return false;
	}
	in = b->in;
	in->s = s;
	in->c = &c;
	in->loc = f.pc_begin;
	in->end = f.pc_end;
	in->depth = 0;
	in->b = NULL;
	memset(&in->cur, 0, sizeof(in->cur));
	memset(&in->init, 0, sizeof(in->init)); /* a CIE's DW_CFA_restore reads it */
	in->cur.cfa.kind = CFI_CFA_UNSUPPORTED;
	ok = run_program(in, c.insns, c.insns_end) && in->loc == f.pc_begin && in->depth == 0;
	if (ok) {
		in->init = in->cur;
		in->b = b;
		ok = run_program(in, f.insns, f.insns_end);
	}
	if (ok) {
		struct cfi_row end = {.pc = (uint32_t)(f.pc_end - b->base),
				      .cfa_kind = CFI_CFA_NONE};
		advance_to(in, f.pc_end);
		push_row(b, &end);
	}
	if (!ok || b->oom) {
		b->n = n0;
		if (n0)
			b->rows[n0 - 1] = last0;
	}
	return ok;
}

static int fde_cmp(const void *pa, const void *pb)
{
	const struct cfi_fde_ref *a = pa, *b = pb;

	if (a->pc_begin != b->pc_begin)
		return a->pc_begin < b->pc_begin ? -1 : 1;
	if (a->src != b->src)
		return a->src < b->src ? -1 : 1;
	return a->off < b->off ? -1 : a->off > b->off;
}

/* Sorts the FDE list by fde_cmp. A list read from .eh_frame_hdr's table alone is sorted
 * already (the table is, and its reader checks it): a pass finds that and skips the sort,
 * three quarters of the time a system-wide start spent indexing the running processes'
 * images (libc's qsort is a merge sort, n log n on sorted input too). */
static void sort_fdes(struct cfi_fde_list *l)
{
	for (size_t i = 1; i < l->n; i++)
		if (fde_cmp(&l->v[i - 1], &l->v[i]) > 0) {
			qsort(l->v, l->n, sizeof(*l->v), fde_cmp);
			return;
		}
}

/* Index n sorted pcs (the first at pc0, one every stride bytes) by pc >> shift, the shift
 * chosen so that there are at most half as many buckets as pcs (the index costs at most 2
 * bytes per entry, against 16 for a row). Tables of a few cache lines are searched whole.
 * Without memory for it, lookups search whole. */
static uint32_t pc_at(const uint8_t *pc0, size_t stride, size_t i)
{
	uint32_t pc;

	memcpy(&pc, pc0 + i * stride, sizeof(pc));
	return pc;
}

static void build_buckets(struct cfi_table *t, const uint8_t *pc0, size_t stride, size_t n)
{
	enum { MIN_ROWS = 64 };
	uint32_t span = pc_at(pc0, stride, n - 1);
	unsigned shift = 4;

	if (n < MIN_ROWS)
		return;
	while (shift < 31 && (span >> shift) + 1 > n / 2)
		shift++;
	uint32_t nb = (span >> shift) + 1;
	uint32_t *bk = sonde__malloc(((size_t)nb + 1) * sizeof(*bk));
	if (!bk)
		return;
	size_t i = 0;
	for (uint32_t k = 0; k <= nb; k++) {
		uint64_t start = (uint64_t)k << shift;
		while (i + 1 < n && pc_at(pc0, stride, i + 1) <= start)
			i++;
		bk[k] = (uint32_t)i;
	}
	t->bucket = bk;
	t->n_buckets = nb;
	t->shift = (uint8_t)shift;
}

/* The last of n sorted pcs (as build_buckets) that is <= pc, through the bucket index; 0
 * when none is (the caller checks). */
static size_t search_pcs(const struct cfi_table *t, const uint8_t *pc0, size_t stride, size_t n,
			 uint32_t pc)
{
	size_t lo = 0, hi = n;

	if (t->bucket) {
		uint32_t k = pc >> t->shift;
		if (k < t->n_buckets) {
			/* the last entry <= pc is between the last entry <= the bucket's start and
			 * the last entry <= the next bucket's start */
			lo = t->bucket[k];
			hi = (size_t)t->bucket[k + 1] + 1;
		} else {
			lo = t->bucket[t->n_buckets];
		}
	}
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (pc_at(pc0, stride, mid) <= pc)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

struct cfi_table *sonde__cfi_table_build(const struct cfi_sec *secs, unsigned n, struct cfi_fde_list *l,
				  uint32_t bad_before, const struct cfi_image *img)
{
	struct cfi_table *t = sonde__calloc(1, sizeof(*t));
	struct builder b = {0};
	uint64_t last_end = 0;
	bool have_base = false;

	if (!t)
		return NULL;
	t->stats.bad_entries = bad_before;
	sort_fdes(l);
	for (size_t i = 0; i < l->n && !b.oom; i++) {
		const struct cfi_fde_ref *f = &l->v[i];
		if (f->src >= n || !sonde__cfi_image_exec_range(img, f->pc_begin, f->pc_end)) {
			t->stats.out_of_range++;
			continue;
		}
		if (have_base && f->pc_begin < last_end) {
			t->stats.overlapping++;
			continue;
		}
		if (!have_base)
			b.base = f->pc_begin;
		if (f->pc_end - b.base > UINT32_MAX) {
			t->stats.out_of_range++;
			continue;
		}
		if (!run_fde(&b, &secs[f->src], f->off)) {
			t->stats.bad_entries++;
			continue;
		}
		have_base = true;
		last_end = f->pc_end;
		t->stats.fdes++;
	}
	sonde__free(b.in);
	if (b.oom || !b.n) {
		sonde__free(b.rows);
		sonde__free(t);
		errno = b.oom ? ENOMEM : ENOENT;
		return NULL;
	}
	t->base = b.base;
	t->n = b.n;
	t->rows = sonde__realloc(b.rows, b.n * sizeof(*b.rows));
	if (!t->rows)
		t->rows = b.rows;
	build_buckets(t, (const uint8_t *)&t->rows[0].pc, sizeof(*t->rows), t->n);
	return t;
}

struct cfi_table *sonde__cfi_table_from_section(const void *buf, size_t len, uint64_t vaddr,
					 bool is_debug_frame)
{
	struct cfi_sec s = {.buf = buf, .len = len, .vaddr = vaddr, .debug_frame = is_debug_frame};
	struct cfi_fde_list l = {0};
	struct cfi_table *t = NULL;
	uint32_t bad = 0;

	if (!buf && len) {
		errno = EINVAL;
		return NULL;
	}
	if (sonde__cfi_scan_fdes(&s, 0, &l, &bad) < 0)
		errno = ENOMEM;
	else
		t = sonde__cfi_table_build(&s, 1, &l, bad, NULL);
	if (t)
		t->stats.used_eh_frame = !is_debug_frame,
		t->stats.used_debug_frame = is_debug_frame;
	sonde__free(l.v);
	return t;
}

void sonde__cfi_table_free(struct cfi_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_fdes; i++)
		sonde__free(t->fdes[i].rows);
	sonde__free(t->fdes);
	sonde__free(t->owned);
	sonde__free(t->rows);
	sonde__free(t->bucket);
	sonde__free(t->memo);
	sonde__free(t);
}

/* Runs a lazy table's FDE into its rows. False when it is malformed (it stays so) or
 * without memory (tried again at the next lookup). */
static bool lazy_run(const struct cfi_table *t, struct lazy_fde *f)
{
	struct builder b = {.base = t->base};
	bool ok = run_fde(&b, &t->secs[f->src], f->off);

	sonde__free(b.in);
	if (b.oom || (ok && (!b.n || b.n > UINT16_MAX))) {
		sonde__free(b.rows);
		if (!b.oom)
			f->state = LAZY_BAD;
		return false;
	}
	if (!ok) {
		sonde__free(b.rows);
		f->state = LAZY_BAD;
		return false;
	}
	f->rows = sonde__realloc(b.rows, b.n * sizeof(*b.rows));
	if (!f->rows)
		f->rows = b.rows;
	f->n = (uint16_t)b.n;
	f->state = LAZY_RUN;
	return true;
}

/* The memo slot of pc; NULL when there is no memo (without memory for it). */
static struct memo *memo_slot(const struct cfi_table *t, uint32_t pc)
{
	/* the table is logically const: the memo only remembers what lookups found */
	struct cfi_table *mt = (struct cfi_table *)t;

	if (!t->memo && !(mt->memo = sonde__calloc(1u << MEMO_BITS, sizeof(*t->memo))))
		return NULL;
	return &t->memo[(pc * 0x9e3779b1u) >> (32 - MEMO_BITS)];
}

static const struct cfi_row *lazy_lookup(const struct cfi_table *t, uint32_t pc)
{
	struct memo *m = memo_slot(t, pc);

	if (m && m->row && m->pc == pc)
		return m->row;
	size_t i = search_pcs(t, (const uint8_t *)&t->fdes[0].pc, sizeof(*t->fdes), t->n_fdes, pc);
	/* the table is logically const: running an FDE only memoizes what it says */
	struct lazy_fde *f = &t->fdes[i];

	if (pc < f->pc || pc >= f->pc_end || f->state == LAZY_BAD)
		return NULL;
	if (f->state == LAZY_NEW && !lazy_run(t, f))
		return NULL;
	size_t lo = 0, hi = f->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (f->rows[mid].pc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	const struct cfi_row *r = &f->rows[lo];
	if (r->pc > pc || (r->cfa_kind & CFI_CFA_KIND_MASK) == CFI_CFA_NONE)
		return NULL;
	/* an FDE's rows stay where they are until the table is freed */
	if (m)
		*m = (struct memo){.pc = pc, .row = r};
	return r;
}

const struct cfi_row *sonde__cfi_table_lookup(const struct cfi_table *t, uint64_t vaddr)
{
	if (!t || vaddr < t->base || vaddr - t->base > UINT32_MAX)
		return NULL;
	uint32_t pc = (uint32_t)(vaddr - t->base);
	if (t->n_fdes)
		return lazy_lookup(t, pc);
	if (!t->n)
		return NULL;
	size_t lo = search_pcs(t, (const uint8_t *)&t->rows[0].pc, sizeof(*t->rows), t->n, pc);
	const struct cfi_row *rows = t->rows;
	if (rows[lo].pc > pc || (rows[lo].cfa_kind & CFI_CFA_KIND_MASK) == CFI_CFA_NONE)
		return NULL;
	return &rows[lo];
}

struct cfi_table *sonde__cfi_table_lazy(const struct cfi_sec *secs, unsigned n,
					struct cfi_fde_list *l, uint32_t bad_before,
					const struct cfi_image *img, void *owned)
{
	struct cfi_table *t;
	uint64_t last_end = 0;
	size_t k = 0;

	if (n > CFI_LAZY_SECS || !(t = sonde__calloc(1, sizeof(*t)))) {
		errno = ENOMEM;
		return NULL;
	}
	t->stats.bad_entries = bad_before;
	sort_fdes(l);
	if (l->n && !(t->fdes = sonde__malloc(l->n * sizeof(*t->fdes)))) {
		sonde__free(t);
		errno = ENOMEM;
		return NULL;
	}
	/* The FDEs an eager build would run, but for those it would find malformed: an FDE
	 * covering the start of the one before it is dropped here even when that one turns out
	 * malformed, where the eager build would have run it. */
	for (size_t i = 0; i < l->n; i++) {
		const struct cfi_fde_ref *f = &l->v[i];
		if (f->src >= n || !sonde__cfi_image_exec_range(img, f->pc_begin, f->pc_end)) {
			t->stats.out_of_range++;
			continue;
		}
		if (k && f->pc_begin < last_end) {
			t->stats.overlapping++;
			continue;
		}
		if (!k)
			t->base = f->pc_begin;
		if (f->pc_end - t->base > UINT32_MAX || f->pc_end <= f->pc_begin) {
			t->stats.out_of_range++;
			continue;
		}
		t->fdes[k++] = (struct lazy_fde){.pc = (uint32_t)(f->pc_begin - t->base),
						 .pc_end = (uint32_t)(f->pc_end - t->base),
						 .off = f->off,
						 .src = f->src};
		last_end = f->pc_end;
	}
	if (!k) {
		sonde__free(t->fdes);
		sonde__free(t);
		errno = ENOENT;
		return NULL;
	}
	t->n_fdes = k;
	t->stats.fdes = (uint32_t)k;
	if (img)
		t->img = *img;
	for (unsigned i = 0; i < n; i++) {
		t->secs[i] = secs[i];
		if (secs[i].img)
			t->secs[i].img = &t->img;
	}
	t->owned = owned;
	build_buckets(t, (const uint8_t *)&t->fdes[0].pc, sizeof(*t->fdes), k);
	return t;
}

uint64_t sonde__cfi_table_base(const struct cfi_table *t)
{
	return t->base;
}

size_t sonde__cfi_table_rows(const struct cfi_table *t)
{
	return t->n;
}

const struct cfi_row *sonde__cfi_table_row(const struct cfi_table *t, size_t i)
{
	return i < t->n ? &t->rows[i] : NULL;
}

const struct cfi_table_stats *sonde__cfi_table_stats(const struct cfi_table *t)
{
	return &t->stats;
}

struct cfi_table_stats *sonde__cfi_table_stats_mut(struct cfi_table *t)
{
	return &t->stats;
}
