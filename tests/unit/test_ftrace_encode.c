/* The bundle encoder on hand-built records: typed fields, generic fields, compact_sched
 * columns, and no allocation once warm. */
#include "../test.h"
#include "base/pb.h"
#include "probes/ftrace_encode.h"

static const char switch_fmt[] =
	"name: sched_switch\nID: 372\nformat:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
	"\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	"\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
	"\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
	"\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n"
	"\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
	"\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n";

static const char odd_fmt[] = "name: odd_event\nID: 9\nformat:\n"
			      "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
			      "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
			      "\tfield:__data_loc char[] msg;\toffset:8;\tsize:4;\tsigned:0;\n"
			      "\tfield:s32 delta;\toffset:12;\tsize:4;\tsigned:1;\n";

static void desc(struct ftrace_event_desc *d, const char *text, const char *group, bool compact)
{
	struct ftrace_format f;

	ASSERT_OK(sonde__ftrace_format_parse(text, strlen(text), &f));
	snprintf(f.group, sizeof(f.group), "%s", group);
	sonde__ftrace_desc_init(d, &f, compact);
}

static void switch_rec(uint8_t rec[64], int prev, int next, const char *next_comm)
{
	int32_t prio = -2;
	int64_t state = 1;

	memset(rec, 0, 64);
	memcpy(rec + 4, &prev, 4);
	memcpy(rec + 8, "prev", 4);
	memcpy(rec + 24, &prev, 4);
	memcpy(rec + 28, &prio, 4);
	memcpy(rec + 32, &state, 8);
	memcpy(rec + 40, next_comm, strlen(next_comm));
	memcpy(rec + 56, &next, 4);
	memcpy(rec + 60, &prio, 4);
}

/* Finds field num's first occurrence in m; returns false if absent. */
static bool field(struct pb_reader m, uint32_t num, struct pb_field *out)
{
	while (sonde__pb_next(&m, out) > 0)
		if (out->num == num)
			return true;
	return false;
}

TEST(ftrace_encode_typed_and_generic)
{
	struct ftrace_event_desc sw, odd;
	struct ftrace_bundle b = {0};
	uint8_t rec[64];
	struct pb_field f, g, h;

	desc(&sw, switch_fmt, "sched", false);
	desc(&odd, odd_fmt, "test", false);
	ASSERT(sw.known != NULL);
	ASSERT(odd.known == NULL);
	sonde__ftrace_bundle_begin(&b, 3, true, 0);
	switch_rec(rec, 10, 20, "next");
	ASSERT_INT(sonde__ftrace_bundle_add(&b, &sw, 1000, rec, sizeof(rec), true), ==, 0);
	ASSERT_INT(sonde__ftrace_desc_pid(&sw, rec, sizeof(rec)), ==, 20);
	uint8_t o[32] = {0};
	uint32_t loc = 16 | 5u << 16;
	int32_t delta = -7;
	memcpy(o + 8, &loc, 4);
	memcpy(o + 12, &delta, 4);
	memcpy(o + 16, "hello", 5);
	ASSERT_INT(sonde__ftrace_bundle_add(&b, &odd, 2000, o, sizeof(o), true), ==, 0);
	ASSERT_INT(sonde__ftrace_bundle_add(&b, &odd, 2000, o, sizeof(o), false), ==, 1);
	ASSERT_INT(sonde__ftrace_bundle_add(&b, &sw, 1000, rec, 20, true), ==, 1); /* short */
	sonde__ftrace_bundle_error(&b, 3000, 15);
	ASSERT(sonde__ftrace_bundle_worth(&b));
	ASSERT_OK(sonde__ftrace_bundle_finish(&b));

	struct pb_reader pkt = pb_reader_init(b.out.data, b.out.len);
	ASSERT(field(pkt, 1, &f)); /* ftrace_events */
	ASSERT(field(pb_sub(&f), 1, &g) && g.u == 3);
	ASSERT(field(pb_sub(&f), 3, &g) && g.u == 1);
	ASSERT(field(pb_sub(&f), 8, &g)); /* error */
	ASSERT(field(pb_sub(&g), 1, &h) && h.u == 3000);
	ASSERT(field(pb_sub(&g), 2, &h) && h.u == 15);
	struct pb_reader bundle = pb_sub(&f);
	int events = 0;
	while (sonde__pb_next(&bundle, &g) > 0) {
		if (g.num != 2)
			continue;
		events++;
		if (events == 1) {
			ASSERT(field(pb_sub(&g), 1, &h) && h.u == 1000);
			ASSERT(field(pb_sub(&g), 2, &h) && h.u == 10);
			ASSERT(field(pb_sub(&g), 4, &h)); /* sched_switch */
			struct pb_field x;
			ASSERT(field(pb_sub(&h), 5, &x) && x.len == 4 && !memcmp(x.ptr, "next", 4));
			ASSERT(field(pb_sub(&h), 6, &x) && x.u == 20);
			ASSERT(field(pb_sub(&h), 3, &x) && (int64_t)x.u == -2);
		} else {
			ASSERT(field(pb_sub(&g), 327, &h)); /* generic */
			struct pb_field x, y;
			ASSERT(field(pb_sub(&h), 1, &x) && x.len == 9);
			struct pb_reader fields = pb_sub(&h);
			int n = 0;
			while (sonde__pb_next(&fields, &x) > 0) {
				if (x.num != 2)
					continue;
				n++;
				if (n == 1)
					ASSERT(field(pb_sub(&x), 3, &y) && y.len == 5 &&
					       !memcmp(y.ptr, "hello", 5));
				else
					ASSERT(field(pb_sub(&x), 4, &y) && (int64_t)y.u == -7);
			}
			ASSERT_INT(n, ==, 2);
		}
	}
	ASSERT_INT(events, ==, 2);
	sonde__ftrace_bundle_free(&b);
	sonde__ftrace_desc_free(&sw);
	sonde__ftrace_desc_free(&odd);
}

static int packed_count(struct pb_reader cs, uint32_t num, uint64_t *first, uint64_t *second)
{
	struct pb_field f;
	int n = 0;
	uint64_t v;

	while (sonde__pb_next(&cs, &f) > 0) {
		if (f.num != num)
			continue;
		struct pb_reader p = pb_sub(&f);
		while (sonde__pb_packed_next(&p, &v) > 0) {
			if (n == 0)
				*first = v;
			if (n == 1)
				*second = v;
			n++;
		}
	}
	return n;
}

TEST(ftrace_encode_compact_sched_and_warm_allocation)
{
	struct ftrace_event_desc sw;
	struct ftrace_bundle b = {0};
	uint8_t rec[64];
	struct pb_field f, g;
	uint64_t a, c;

	desc(&sw, switch_fmt, "sched", true);
	ASSERT_INT(sw.compact, ==, FTRACE_COMPACT_SWITCH);
	void *data[13] = {0};
	size_t cap[13] = {0};
	for (int round = 0; round < 20; round++) {
		sonde__ftrace_bundle_begin(&b, 0, false, 0);
		for (int i = 0; i < 500; i++) {
			switch_rec(rec, 1, 100 + i % 3, i % 2 ? "odd" : "even");
			ASSERT_INT(
				sonde__ftrace_bundle_add(&b, &sw, 5000 + (uint64_t)i * 10, rec, 64, true),
				==, 0);
		}
		ASSERT_OK(sonde__ftrace_bundle_finish(&b));
		/* After a few rounds the buffers have their size: no more allocation. */
		for (int i = 0; i < 11; i++) {
			if (round == 5)
				data[i] = b.col[i].data, cap[i] = b.col[i].cap;
			if (round > 5)
				ASSERT(b.col[i].data == data[i] && b.col[i].cap == cap[i]);
		}
		if (round == 5)
			data[11] = b.out.data, cap[11] = b.out.cap, data[12] = b.interned.data,
			cap[12] = b.interned.cap;
		if (round > 5)
			ASSERT(b.out.data == data[11] && b.out.cap == cap[11] &&
			       b.interned.data == data[12] && b.interned.cap == cap[12]);
	}
	struct pb_reader pkt = pb_reader_init(b.out.data, b.out.len);
	ASSERT(field(pkt, 1, &f));
	ASSERT(!field(pb_sub(&f), 2, &g)); /* no typed events */
	ASSERT(field(pb_sub(&f), 4, &g));
	struct pb_reader cs = pb_sub(&g);
	ASSERT_INT(packed_count(cs, 1, &a, &c), ==, 500); /* switch_timestamp */
	ASSERT_UINT(a, ==, 5000);
	ASSERT_UINT(c, ==, 10);				  /* delta */
	ASSERT_INT(packed_count(cs, 3, &a, &c), ==, 500); /* next_pid */
	ASSERT_UINT(a, ==, 100);
	ASSERT_UINT(c, ==, 101);
	ASSERT_INT(packed_count(cs, 6, &a, &c), ==, 500); /* next_comm_index */
	ASSERT_UINT(a, ==, 0);
	ASSERT_UINT(c, ==, 1);
	int strings = 0;
	struct pb_reader t = cs;
	while (sonde__pb_next(&t, &f) > 0)
		strings += f.num == 5;
	ASSERT_INT(strings, ==, 2); /* "even", "odd" */
	sonde__ftrace_bundle_free(&b);
	sonde__ftrace_desc_free(&sw);
}
