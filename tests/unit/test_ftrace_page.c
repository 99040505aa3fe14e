/* The ring page parser on pages built by hand: each event header type, the lost-events
 * flag and count, and pages that lie. */
#include "../test.h"
#include "../util.h"
#include "probes/ftrace_page.h"

struct page {
	uint8_t b[4096];
	size_t len; /* bytes of data written */
};

static void put32(struct page *p, uint32_t v)
{
	memcpy(p->b + 16 + p->len, &v, 4);
	p->len += 4;
}

static void header(struct page *p, uint32_t type_len, uint32_t delta)
{
	put32(p, type_len | delta << 5);
}

static void finish(struct page *p, uint64_t ts, uint64_t flags)
{
	uint64_t commit = p->len | flags;
	memcpy(p->b, &ts, 8);
	memcpy(p->b + 8, &commit, 8);
}

struct seen {
	uint64_t ts[16];
	size_t len[16];
	uint32_t first[16];
	int n;
};

static int record(void *ctx, uint64_t ts, const uint8_t *data, size_t len)
{
	struct seen *s = ctx;
	if (s->n < 16) {
		s->ts[s->n] = ts;
		s->len[s->n] = len;
		s->first[s->n] = 0;
		if (len >= 4)
			memcpy(&s->first[s->n], data, 4);
	}
	s->n++;
	return 0;
}

TEST(ftrace_page_event_types)
{
	struct ftrace_page_layout l;
	struct ftrace_page_info info;
	struct page p = {0};
	struct seen s = {0};

	sonde__ftrace_page_layout_default(&l);
	header(&p, 2, 10), put32(&p, 0xaaaa), put32(&p, 1); /* 8-byte event at +10 */
	header(&p, 30, 5), put32(&p, 1);		    /* extend by (1 << 27) + 5 */
	header(&p, 1, 0), put32(&p, 0xbbbb);		    /* 4-byte event */
	header(&p, 29, 1), put32(&p, 8), put32(&p, 0);	    /* discarded: array[0] counts itself */
	header(&p, 0, 7), put32(&p, 12), put32(&p, 0xcccc), put32(&p, 2); /* long form */
	header(&p, 31, 3), put32(&p, 2); /* absolute (2 << 27) | 3 */
	header(&p, 1, 1), put32(&p, 0xdddd);
	header(&p, 29, 0); /* the rest is empty */
	finish(&p, 1000, 0);
	ASSERT_INT(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, record, &s), ==, 4);
	ASSERT_INT(s.n, ==, 4);
	ASSERT_UINT(s.ts[0], ==, 1010);
	ASSERT_UINT(s.first[0], ==, 0xaaaa);
	ASSERT_UINT(s.len[0], ==, 8);
	ASSERT_UINT(s.ts[1], ==, 1010 + (1ULL << 27) + 5);
	ASSERT_UINT(s.first[1], ==, 0xbbbb);
	ASSERT_UINT(s.ts[2], ==, 1010 + (1ULL << 27) + 5 + 7);
	ASSERT_UINT(s.len[2], ==, 8);
	ASSERT_UINT(s.first[2], ==, 0xcccc);
	ASSERT_UINT(s.ts[3], ==, (2ULL << 27) + 3 + 1);
	ASSERT(!info.lost_events);
}

TEST(ftrace_page_lost_events)
{
	struct ftrace_page_layout l;
	struct ftrace_page_info info;
	struct page p = {0};
	uint64_t count = 1234;

	sonde__ftrace_page_layout_default(&l);
	header(&p, 1, 0), put32(&p, 1);
	memcpy(p.b + 16 + p.len, &count, 8);
	/* As the kernel writes it: (1 << 31) is an int, sign-extended into local_t. */
	finish(&p, 5, (uint64_t)(int64_t)(int)(1U << 31) | (1 << 30));
	ASSERT_INT(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), ==, 1);
	ASSERT(info.lost_events);
	ASSERT(info.lost_count_set);
	ASSERT_UINT(info.lost_count, ==, 1234);
	ASSERT_UINT(info.data_len, ==, 8);
	/* Flag without the stored count (no room after the data). */
	finish(&p, 5, (uint64_t)(int64_t)(int)(1U << 31));
	ASSERT_INT(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), ==, 1);
	ASSERT(info.lost_events);
	ASSERT(!info.lost_count_set);
}

TEST(ftrace_page_rejects_pages_that_lie)
{
	struct ftrace_page_layout l;
	struct ftrace_page_info info;
	struct page p = {0};

	sonde__ftrace_page_layout_default(&l);
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, 10, &info, NULL, NULL), -SONDE_E_TRUNCATED);
	finish(&p, 0, 5000); /* commit past the page */
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), -SONDE_E_TRUNCATED);
	p.len = 0, header(&p, 28, 0); /* 112 bytes of payload, 4 present */
	finish(&p, 0, 0);
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), -SONDE_E_FORMAT);
	p.len = 0, header(&p, 0, 0), put32(&p, 2); /* long form shorter than itself */
	finish(&p, 0, 0);
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), -SONDE_E_FORMAT);
	p.len = 0, header(&p, 29, 1), put32(&p, 4000); /* padding past the data */
	finish(&p, 0, 0);
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), -SONDE_E_FORMAT);
	p.len = 0, header(&p, 30, 0); /* time extend cut short */
	finish(&p, 0, 0);
	ASSERT_ERR(sonde__ftrace_page_parse(&l, p.b, sizeof(p.b), &info, NULL, NULL), -SONDE_E_FORMAT);
}

TEST(ftrace_page_layout_text)
{
	static const char hp[] = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
				 "\tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n"
				 "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
				 "\tfield: char data;\toffset:12;\tsize:4084;\tsigned:0;\n";
	struct ftrace_page_layout l;

	ASSERT_OK(sonde__ftrace_page_layout_parse(hp, sizeof(hp) - 1, &l));
	ASSERT_INT(l.commit_size, ==, 4);
	ASSERT_INT(l.data_offset, ==, 12);
	ASSERT_INT(l.page_size, ==, 4096);
	ASSERT_ERR(sonde__ftrace_page_layout_parse(hp, 40, &l), -SONDE_E_FORMAT);
	ASSERT_INT(l.data_offset, ==, 16); /* the defaults */
}

struct captured {
	uint64_t first, last;
	int n, backwards;
	uint16_t ids[2];
	int nids, other_ids;
};

static int captured_event(void *ctx, uint64_t ts, const uint8_t *data, size_t len)
{
	struct captured *c = ctx;
	uint16_t id = 0;

	if (len >= 2)
		memcpy(&id, data, 2);
	if (c->n == 0)
		c->first = ts;
	else if (ts < c->last)
		c->backwards++;
	if (!(c->nids > 0 && c->ids[0] == id) && !(c->nids > 1 && c->ids[1] == id)) {
		if (c->nids < 2)
			c->ids[c->nids++] = id;
		else
			c->other_ids++;
	}
	c->last = ts;
	c->n++;
	return 0;
}

/* Pages read from this project's development kernel (6.18, x86-64), kept as fuzz seeds:
 * fuzz/corpus/ftrace_page/ (one layout byte, then the page). sched_cpu* hold sched_switch
 * and sched_waking, lost_cpu0 sched_switch only, read after its buffer overflowed. */
TEST(ftrace_page_captured_pages)
{
	static const char *names[] = {"sched_cpu0", "sched_cpu1", "lost_cpu0"};
	struct ftrace_page_layout l;

	sonde__ftrace_page_layout_default(&l);
	for (int i = 0; i < 3; i++) {
		char rel[128];
		size_t len;
		snprintf(rel, sizeof(rel), "fuzz/corpus/ftrace_page/%s", names[i]);
		uint8_t *p = (uint8_t *)test_read_file(test_src_path(rel), &len);
		struct ftrace_page_info info;
		struct captured c = {0};
		ASSERT_NOT_NULL(p);
		ASSERT_INT(len, ==, 4097);
		int n = sonde__ftrace_page_parse(&l, p + 1, len - 1, &info, captured_event, &c);
		if (n < 0)
			FAIL("%s: %s", names[i], sonde_strerror(n));
		ASSERT_INT(n, >, 20);
		ASSERT_INT(c.backwards, ==, 0);
		ASSERT_INT(c.other_ids, ==, 0);
		ASSERT_INT(c.nids, ==, i == 2 ? 1 : 2);
		ASSERT_UINT(c.first, >=, info.timestamp);
		ASSERT(info.lost_events == (i == 2));
		free(p);
	}
}
