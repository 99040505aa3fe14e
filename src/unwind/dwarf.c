/* The DWARF CFI unwinder (see dwarf.h). One step computes the caller's registers from a
 * table row: CFA from the row's CFA rule, then the return address, rbp and rbx from theirs;
 * the caller's rsp is the CFA. Registers a call does not preserve (and r12-r15 when the
 * frame saved them) become unknown, so a later rule that needs them fails visibly instead
 * of using a stale value. */
#include <string.h>

#include <sonde/record.h>

#include "unwind/dwarf.h"
#include "unwind/fp.h"

enum step_result {
	STEP_OK,
	STEP_COMPLETE,	  /* outermost frame reached */
	STEP_COPY_WINDOW, /* needed memory beyond the end of the copy */
	STEP_FAIL,	  /* see *why */
};

struct frame {
	uint64_t r[UREG_COUNT];
	uint32_t valid;
	bool exact; /* pc was interrupted, not returned to: look it up as is */
};

#define BIT(r) (1u << (r))
/* Registers that survive a call (System V x86-64): rbx, rbp, rsp, r12-r15. */
#define CALLEE_SAVED (BIT(UREG_RBX) | BIT(UREG_RBP) | BIT(UREG_RSP) | 0xf000u)

static const char *const fallback_names[UNWIND_FB_COUNT] = {
	[UNWIND_FB_NO_MODULE] = "no-module",
	[UNWIND_FB_NO_CFI] = "no-cfi",
	[UNWIND_FB_NO_ROW] = "no-row",
	[UNWIND_FB_UNSUPPORTED] = "unsupported-rule",
	[UNWIND_FB_CFA_UNRECOVERABLE] = "cfa-unrecoverable",
	[UNWIND_FB_RA_UNRECOVERABLE] = "ra-unrecoverable",
	[UNWIND_FB_NO_ADVANCE] = "no-advance",
	[UNWIND_FB_SP_BACKWARDS] = "sp-backwards",
};

_Static_assert(UNWIND_FB_COUNT == SONDE_UNWIND_FALLBACKS, "the summary has one slot per reason");

const char *sonde__unwind_fallback_name(enum unwind_fallback r)
{
	return (unsigned)r < UNWIND_FB_COUNT ? fallback_names[r] : "unknown";
}

const char *sonde_recorder__unwind_fallback_name(unsigned i)
{
	return sonde__unwind_fallback_name((enum unwind_fallback)i);
}

/* Reading stack memory: beyond the end of the copy means the window was too small;
 * anything else (below the sampled rsp, misaligned past the end) is a bad address. */
static enum step_result read_stack(const struct unwind_stack *s, uint64_t addr, uint64_t *v)
{
	if (unwind_stack_read(s, addr, v))
		return STEP_OK;
	if (addr >= s->start && addr - s->start + 8 > s->len && addr - s->start < (1ull << 32))
		return STEP_COPY_WINDOW;
	return STEP_FAIL;
}

static bool reg_get(const struct frame *f, unsigned reg, uint64_t *v)
{
	if (reg >= UREG_COUNT || !(f->valid & BIT(reg)))
		return false;
	*v = f->r[reg];
	return true;
}

static enum step_result eval_cfa(const struct cfi_row *row, const struct frame *f,
				 const struct unwind_stack *s, uint64_t *cfa,
				 enum unwind_fallback *why)
{
	uint64_t base;

	*why = UNWIND_FB_CFA_UNRECOVERABLE;
	switch (row->cfa_kind & CFI_CFA_KIND_MASK) {
	case CFI_CFA_REG:
		if (!reg_get(f, row->cfa_reg, &base))
			return STEP_FAIL;
		*cfa = base + (uint64_t)(int64_t)row->cfa_off;
		return STEP_OK;
	case CFI_CFA_DEREF:
		if (!reg_get(f, row->cfa_reg, &base))
			return STEP_FAIL;
		return read_stack(s, base + (uint64_t)(int64_t)row->cfa_off, cfa);
	case CFI_CFA_PLT:
		if (!reg_get(f, UREG_RSP, &base))
			return STEP_FAIL;
		*cfa = base + (uint64_t)(int64_t)row->cfa_off +
		       ((f->r[UREG_RIP] & 15) >= row->cfa_reg ? 8 : 0);
		return STEP_OK;
	default:
		*why = UNWIND_FB_UNSUPPORTED;
		return STEP_FAIL;
	}
}

/* Recovers one register of the caller by its column's rule. */
static enum step_result eval_rule(const struct cfi_row *row, unsigned col, const struct frame *f,
				  const struct unwind_stack *s, uint64_t cfa, uint64_t *v)
{
	int64_t off = (int64_t)row->off[col] * 8;
	uint64_t rsp;

	switch (CFI_ROW_RULE(row, col)) {
	case CFI_RULE_SAME:
		return reg_get(f,
			       col == CFI_COL_RA    ? UREG_RIP
			       : col == CFI_COL_RBP ? UREG_RBP
						    : UREG_RBX,
			       v)
			       ? STEP_OK
			       : STEP_FAIL;
	case CFI_RULE_UNDEFINED:
		return STEP_COMPLETE;
	case CFI_RULE_OFFSET:
		return read_stack(s, cfa + (uint64_t)off, v);
	case CFI_RULE_VAL_OFFSET:
		*v = cfa + (uint64_t)off;
		return STEP_OK;
	case CFI_RULE_REGISTER:
		return reg_get(f, (unsigned)row->off[col], v) ? STEP_OK : STEP_FAIL;
	case CFI_RULE_AT_RSP:
		if (!reg_get(f, UREG_RSP, &rsp))
			return STEP_FAIL;
		return read_stack(s, rsp + (uint64_t)off, v);
	default:
		return STEP_FAIL;
	}
}

/* The caller of frame f by the row, into *out (another frame than f). Only registers a
 * call preserves are carried over: the others are invalid in *out, whatever it held. No
 * frame is copied whole: the unwinder spent most of its own time doing so, in stores its
 * loads then had to wait for. */
static enum step_result cfi_step(const struct cfi_row *row, const struct frame *f,
				 struct frame *out, const struct unwind_stack *s,
				 enum unwind_fallback *why)
{
	uint64_t cfa, ra, v;
	enum step_result r = eval_cfa(row, f, s, &cfa, why);
	uint32_t valid;

	if (r != STEP_OK)
		return r;
	r = eval_rule(row, CFI_COL_RA, f, s, cfa, &ra);
	if (r != STEP_OK) {
		*why = CFI_ROW_RULE(row, CFI_COL_RA) == CFI_RULE_UNSUPPORTED
			       ? UNWIND_FB_UNSUPPORTED
			       : UNWIND_FB_RA_UNRECOVERABLE;
		return r;
	}
	valid = f->valid & CALLEE_SAVED & ~(((uint32_t)row->rules >> CFI_CLOBBER_SHIFT) << 12);
	valid &= ~(BIT(UREG_RBP) | BIT(UREG_RBX));
	for (unsigned i = 12; i <= UREG_R15; i++)
		out->r[i] = f->r[i];
	if (eval_rule(row, CFI_COL_RBP, f, s, cfa, &v) == STEP_OK) {
		out->r[UREG_RBP] = v;
		valid |= BIT(UREG_RBP);
	}
	if (eval_rule(row, CFI_COL_RBX, f, s, cfa, &v) == STEP_OK) {
		out->r[UREG_RBX] = v;
		valid |= BIT(UREG_RBX);
	}
	out->r[UREG_RSP] = cfa;
	out->r[UREG_RIP] = ra;
	out->valid = valid | BIT(UREG_RSP) | BIT(UREG_RIP);
	out->exact = (row->cfa_kind & CFI_ROW_SIGNAL) != 0;
	return STEP_OK;
}

/* The frame-pointer step, used only when CFI cannot unwind this frame: fp.c's walk, asked
 * for one caller, validates the frame pointer ([rbp] is the caller's rbp, [rbp + 8] the
 * return address; rbp at or above rsp, aligned, inside the copy). One step rather than the
 * rest of the chain, so that CFI resumes at the caller: a frame without CFI inside code
 * built without frame pointers costs one frame of guesswork, not the rest of the stack. */
struct fp_check {
	unwind_find_module_fn find;
	void *ctx;
};

/* A frame-pointer return address must be inside a mapping; anything else means the chain
 * went through a frame whose rbp is not a frame pointer. */
static bool fp_plausible(void *vctx, uint64_t pc)
{
	struct fp_check *c = vctx;
	struct unwind_module m;

	return c->find(c->ctx, pc - 1, &m);
}

/* The caller of frame f by its frame pointer, into *out (another frame than f). */
static enum step_result fp_step(const struct frame *f, struct frame *out,
				const struct unwind_stack *s, unwind_find_module_fn find, void *ctx)
{
	struct fp_check check = {find, ctx};
	struct unwind_regs regs;
	uint64_t pcs[2], saved_rbp;
	enum unwind_end end;

	memcpy(regs.r, f->r, sizeof(regs.r));
	regs.valid = f->valid;
	if (sonde__unwind_fp(&regs, s, fp_plausible, &check, pcs, 2, &end) == 2 &&
	    unwind_stack_read(s, f->r[UREG_RBP], &saved_rbp)) {
		out->valid = f->valid & (BIT(UREG_RSP) | BIT(UREG_RIP) | BIT(UREG_RBP));
		out->r[UREG_RSP] = f->r[UREG_RBP] + 16;
		out->r[UREG_RBP] = saved_rbp;
		out->r[UREG_RIP] = pcs[1] + 1;
		out->exact = false;
		return STEP_OK;
	}
	return end == UNWIND_END_COMPLETE      ? STEP_COMPLETE
	       : end == UNWIND_END_COPY_WINDOW ? STEP_COPY_WINDOW
					       : STEP_FAIL;
}

/* Finds the row for the frame's pc; false with *why when there is none. */
static const struct cfi_row *find_row(const struct frame *f, unwind_find_module_fn find, void *ctx,
				      enum unwind_fallback *why)
{
	uint64_t pc = f->r[UREG_RIP] - (f->exact ? 0 : 1);
	struct unwind_module m;
	const struct cfi_row *row;

	if (!find(ctx, pc, &m)) {
		*why = UNWIND_FB_NO_MODULE;
		return NULL;
	}
	if (!m.table) {
		*why = UNWIND_FB_NO_CFI;
		return NULL;
	}
	row = sonde__cfi_table_lookup(m.table, pc - m.bias);
	if (!row)
		*why = UNWIND_FB_NO_ROW;
	return row;
}

/* A step must move up the stack: rsp grows (a signal frame may jump anywhere, e.g. off a
 * sigaltstack), and pc and rsp do not both stay. */
static bool sane(const struct frame *prev, const struct frame *next, bool signal,
		 enum unwind_fallback *why)
{
	if (next->r[UREG_RSP] == prev->r[UREG_RSP] && next->r[UREG_RIP] == prev->r[UREG_RIP]) {
		*why = UNWIND_FB_NO_ADVANCE;
		return false;
	}
	if (!signal && next->r[UREG_RSP] <= prev->r[UREG_RSP]) {
		*why = UNWIND_FB_SP_BACKWARDS;
		return false;
	}
	return true;
}

/* One step from *f to its caller, written to *next (another frame than f): CFI first,
 * frame pointers when CFI fails. */
static enum step_result step(const struct frame *f, struct frame *next,
			     const struct unwind_stack *s, unwind_find_module_fn find, void *ctx,
			     struct unwind_stats *st)
{
	enum unwind_fallback why;
	const struct cfi_row *row = find_row(f, find, ctx, &why);
	enum step_result r;

	if (row) {
		r = cfi_step(row, f, next, s, &why);
		if (r == STEP_COMPLETE || r == STEP_COPY_WINDOW)
			return r;
		if (r == STEP_OK && sane(f, next, (row->cfa_kind & CFI_ROW_SIGNAL) != 0, &why)) {
			st->cfi_steps++;
			return STEP_OK;
		}
	}
	st->fallbacks[why]++;
	r = fp_step(f, next, s, find, ctx);
	if (r != STEP_OK)
		return r;
	if (!sane(f, next, false, &why))
		return STEP_FAIL;
	st->fp_steps++;
	return STEP_OK;
}

enum unwind_end sonde__unwind_dwarf(const struct unwind_regs *regs, const struct unwind_stack *stack,
			     unwind_find_module_fn find, void *ctx, uint64_t *frames, size_t max,
			     size_t *n, struct unwind_stats *stats)
{
	struct unwind_stats dummy = {0};
	/* the frame being unwound and its caller, which trade places at each step */
	struct frame two[2], *f = &two[0], *caller = &two[1], *t;
	enum unwind_end end = UNWIND_END_COMPLETE;
	size_t k = 0;

	if (!stats)
		stats = &dummy;
	if (max > UNWIND_MAX_FRAMES)
		max = UNWIND_MAX_FRAMES;
	stats->stacks++;
	memcpy(f->r, regs->r, sizeof(f->r));
	f->valid = regs->valid & ((1u << UREG_COUNT) - 1);
	f->exact = true;
	memset(caller, 0, sizeof(*caller));
	if (!(f->valid & BIT(UREG_RIP)) || max == 0) {
		end = max == 0 ? UNWIND_END_MAX_FRAMES : UNWIND_END_ERROR;
		goto out;
	}
	frames[k++] = f->r[UREG_RIP];
	for (;;) {
		enum step_result r = step(f, caller, stack, find, ctx, stats);
		if (r == STEP_OK) {
			t = f;
			f = caller;
			caller = t;
		}
		if (r == STEP_OK && f->r[UREG_RIP] == 0)
			r = STEP_COMPLETE; /* a zero return address ends the chain */
		if (r != STEP_OK) {
			end = r == STEP_COMPLETE      ? UNWIND_END_COMPLETE
			      : r == STEP_COPY_WINDOW ? UNWIND_END_COPY_WINDOW
						      : UNWIND_END_ERROR;
			break;
		}
		if (k == max) {
			end = UNWIND_END_MAX_FRAMES;
			break;
		}
		frames[k++] = f->r[UREG_RIP] - (f->exact ? 0 : 1);
	}
out:
	*n = k;
	stats->frames += k;
	stats->ends[end]++;
	return end;
}
