/* The recorder's per-process module table and build-id reading. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "record/modules.h"

static struct rec_module mod(uint64_t start, uint64_t end, uint64_t pgoff, uint32_t id)
{
	return (struct rec_module){
		.start = start, .end = end, .pgoff = pgoff, .id = id, .path = "/lib/x.so"};
}

/* pc -> file offset through the table, or ~0 when unmapped. */
static uint64_t offset_of(const struct rec_modtable *t, uint64_t pc, uint32_t *id)
{
	const struct rec_module *m = sonde__modtable_find(t, pc);

	if (!m)
		return ~0ull;
	*id = m->id;
	return pc - m->start + m->pgoff;
}

TEST(record_modtable_replaces_overlapped_mappings)
{
	struct rec_modtable t = {0};
	uint32_t id = 0;

	ASSERT_OK(sonde__modtable_insert(&t, &(struct rec_module){0}));
	ASSERT_UINT(t.n, ==, 0); /* empty ranges are ignored */
	struct rec_module a = mod(0x1000, 0x5000, 0x10000, 1);
	ASSERT_OK(sonde__modtable_insert(&t, &a));
	struct rec_module b = mod(0x8000, 0x9000, 0, 2);
	ASSERT_OK(sonde__modtable_insert(&t, &b));
	ASSERT_UINT(offset_of(&t, 0x1000, &id), ==, 0x10000);
	ASSERT_UINT(id, ==, 1);
	ASSERT_UINT(offset_of(&t, 0x8fff, &id), ==, 0xfff);
	ASSERT_UINT(offset_of(&t, 0x5000, &id), ==, ~0ull);
	ASSERT_UINT(offset_of(&t, 0x9000, &id), ==, ~0ull);

	/* A mapping inside a: a is split, each side keeps its file offsets. */
	struct rec_module c = mod(0x2000, 0x3000, 0x99000, 3);
	ASSERT_OK(sonde__modtable_insert(&t, &c));
	ASSERT_UINT(t.n, ==, 4);
	ASSERT_UINT(offset_of(&t, 0x1fff, &id), ==, 0x10fff);
	ASSERT_UINT(id, ==, 1);
	ASSERT_UINT(offset_of(&t, 0x2000, &id), ==, 0x99000);
	ASSERT_UINT(id, ==, 3);
	ASSERT_UINT(offset_of(&t, 0x3000, &id), ==, 0x12000);
	ASSERT_UINT(id, ==, 1);

	/* One covering everything from 0x1800 to 0x8800: trims both ends, drops the middle. */
	struct rec_module d = mod(0x1800, 0x8800, 0, 4);
	ASSERT_OK(sonde__modtable_insert(&t, &d));
	ASSERT_UINT(t.n, ==, 3);
	ASSERT_UINT(offset_of(&t, 0x17ff, &id), ==, 0x107ff);
	ASSERT_UINT(offset_of(&t, 0x4000, &id), ==, 0x2800);
	ASSERT_UINT(id, ==, 4);
	ASSERT_UINT(offset_of(&t, 0x8800, &id), ==, 0x800);
	ASSERT_UINT(id, ==, 2);
	for (size_t i = 1; i < t.n; i++)
		ASSERT_UINT(t.m[i - 1].end, <=, t.m[i].start);

	struct rec_modtable copy = {0};
	ASSERT_OK(sonde__modtable_copy(&copy, &t));
	ASSERT_UINT(copy.n, ==, t.n);
	ASSERT_STR_EQ(copy.m[0].path, "/lib/x.so");
	sonde__modtable_clear(&t);
	ASSERT(!sonde__modtable_find(&t, 0x4000));
	sonde__modtable_free(&t);
	sonde__modtable_free(&copy);
	sonde__modtable_free(NULL);
}

TEST(record_build_id_of_this_binary)
{
	uint8_t id[32];
	int fd = open("/proc/self/exe", O_RDONLY);

	ASSERT(fd >= 0);
	int n = ASSERT_OK(sonde__read_build_id(fd, id, sizeof(id)));
	close(fd);
	/* gcc links with --build-id (sha1) by default on this platform. */
	ASSERT_INT(n, ==, 20);
	fd = open("/proc/self/status", O_RDONLY);
	ASSERT_INT(sonde__read_build_id(fd, id, sizeof(id)), ==, 0); /* not ELF: no build id */
	close(fd);
}
