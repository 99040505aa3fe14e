/* The frame-pointer unwinder over synthetic stacks. */
#include <string.h>

#include "../test.h"
#include "unwind/fp.h"

enum { BASE = 0x7ffc0000 };

struct fake_stack {
	uint64_t words[64];
	struct unwind_stack s;
	struct unwind_regs regs;
};

static void put(struct fake_stack *f, uint64_t addr, uint64_t v)
{
	f->words[(addr - BASE) / 8] = v;
}

/* main -> run -> path -> leaf: three saved frames above the leaf's sp. */
static void build(struct fake_stack *f)
{
	memset(f, 0, sizeof(*f));
	f->s.data = (const uint8_t *)f->words;
	f->s.len = sizeof(f->words);
	f->s.start = BASE;
	f->regs.r[UREG_RIP] = 0x401100;
	f->regs.r[UREG_RSP] = BASE;
	f->regs.r[UREG_RBP] = BASE + 0x10;
	f->regs.valid = 1u << UREG_RIP | 1u << UREG_RSP | 1u << UREG_RBP;
	put(f, BASE + 0x10, BASE + 0x40);
	put(f, BASE + 0x18, 0x401200); /* return into path */
	put(f, BASE + 0x40, BASE + 0x80);
	put(f, BASE + 0x48, 0x401300); /* return into run */
	put(f, BASE + 0x80, 0);
	put(f, BASE + 0x88, 0x401400); /* return into main */
}

TEST(record_fp_unwind_walks_the_chain)
{
	struct fake_stack f;
	uint64_t pcs[16];
	enum unwind_end end;

	build(&f);
	size_t n = sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end);
	ASSERT_UINT(n, ==, 4);
	ASSERT_INT(end, ==, UNWIND_END_COMPLETE);
	ASSERT_UINT(pcs[0], ==, 0x401100); /* the sampled pc as is */
	ASSERT_UINT(pcs[1], ==, 0x4011ff); /* callers: return address - 1 */
	ASSERT_UINT(pcs[2], ==, 0x4012ff);
	ASSERT_UINT(pcs[3], ==, 0x4013ff);
}

TEST(record_fp_unwind_stops_at_bad_frames)
{
	struct fake_stack f;
	uint64_t pcs[16];
	enum unwind_end end;

	/* A saved frame pointer that does not move towards the base: a loop. */
	build(&f);
	put(&f, BASE + 0x40, BASE + 0x10);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end), ==, 3);
	ASSERT_INT(end, ==, UNWIND_END_ERROR);

	/* A frame beyond the copied window. */
	build(&f);
	put(&f, BASE + 0x40, BASE + 0x1000);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end), ==, 3);
	ASSERT_INT(end, ==, UNWIND_END_COPY_WINDOW);

	/* The last word of the window: the return address would be outside it. */
	build(&f);
	put(&f, BASE + 0x40, BASE + sizeof(f.words) - 8);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end), ==, 3);
	ASSERT_INT(end, ==, UNWIND_END_COPY_WINDOW);

	/* rbp below the stack pointer is not a frame pointer. */
	build(&f);
	f.regs.r[UREG_RBP] = BASE - 0x100;
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end), ==, 1);
	ASSERT_INT(end, ==, UNWIND_END_ERROR);

	/* Without rbp there is nothing to walk. */
	build(&f);
	f.regs.valid &= ~(1u << UREG_RBP);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 16, &end), ==, 0);
	ASSERT_INT(end, ==, UNWIND_END_ERROR);
}

TEST(record_fp_unwind_limits_frames)
{
	struct fake_stack f;
	uint64_t pcs[16];
	enum unwind_end end;

	build(&f);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, NULL, NULL, pcs, 2, &end), ==, 2);
	ASSERT_INT(end, ==, UNWIND_END_MAX_FRAMES);
	ASSERT_UINT(pcs[1], ==, 0x4011ff);
}

static bool only_low_code(void *ctx, uint64_t pc)
{
	return pc < *(uint64_t *)ctx;
}

TEST(record_fp_unwind_checks_return_addresses)
{
	struct fake_stack f;
	uint64_t pcs[16], limit = 0x401300;
	enum unwind_end end;

	build(&f);
	ASSERT_UINT(sonde__unwind_fp(&f.regs, &f.s, only_low_code, &limit, pcs, 16, &end), ==, 2);
	ASSERT_INT(end, ==, UNWIND_END_ERROR);
}
