/* Pieces of the recorder's lifecycle tracking that need no process: the pid lists of
 * /proc/PID/task/TID/children, and dropping a range from a module table. */
#include <string.h>

#include <sonde/error.h>

#include "../test.h"
#include "proc/proc.h"
#include "record/modules.h"

TEST(life_parse_children_lists)
{
	pid_t p[4];

	ASSERT_INT(sonde__proc_parse_pid_list("", 0, p, 4), ==, 0);
	ASSERT_INT(sonde__proc_parse_pid_list("12 345 6 ", 9, p, 4), ==, 3);
	ASSERT_INT(p[0], ==, 12);
	ASSERT_INT(p[1], ==, 345);
	ASSERT_INT(p[2], ==, 6);
	ASSERT_INT(sonde__proc_parse_pid_list("1\n2\n", 4, p, 4), ==, 2);
	/* At most max; the rest is not read. */
	ASSERT_INT(sonde__proc_parse_pid_list("1 2 3 4 5 6", 11, p, 4), ==, 4);
	ASSERT_INT(p[3], ==, 4);
	/* Only the bytes given: "12" cut after its first digit. */
	ASSERT_INT(sonde__proc_parse_pid_list("12", 1, p, 4), ==, 1);
	ASSERT_INT(p[0], ==, 1);
	ASSERT_ERR(sonde__proc_parse_pid_list("1 x", 3, p, 4), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_parse_pid_list("0", 1, p, 4), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_parse_pid_list("-3", 2, p, 4), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_parse_pid_list("99999999999", 11, p, 4), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__proc_parse_pid_list("7,8", 3, p, 4), -SONDE_E_FORMAT);
}

TEST(life_modtable_remove_trims_and_splits)
{
	struct rec_modtable t = {0};
	struct rec_module a = {
		.start = 0x1000, .end = 0x9000, .pgoff = 0x100, .id = 1, .path = "a"};
	struct rec_module b = {.start = 0xa000, .end = 0xb000, .id = 2, .path = "b"};

	ASSERT_OK(sonde__modtable_insert(&t, &a));
	ASSERT_OK(sonde__modtable_insert(&t, &b));
	/* A hole in the middle of a: two pieces, the right one at the right file offset. */
	ASSERT_OK(sonde__modtable_remove(&t, 0x3000, 0x4000));
	ASSERT_UINT(t.n, ==, 3);
	ASSERT(sonde__modtable_find(&t, 0x3000) == NULL);
	ASSERT(sonde__modtable_find(&t, 0x3fff) == NULL);
	const struct rec_module *m = sonde__modtable_find(&t, 0x4000);
	ASSERT_NOT_NULL(m);
	ASSERT_UINT(m->pgoff, ==, 0x100 + 0x3000);
	ASSERT_UINT(m->id, ==, 1);
	/* Everything of b, and the tail of a. */
	ASSERT_OK(sonde__modtable_remove(&t, 0x8000, 0xc000));
	ASSERT(sonde__modtable_find(&t, 0xa000) == NULL);
	ASSERT(sonde__modtable_find(&t, 0x8000) == NULL);
	ASSERT_NOT_NULL(sonde__modtable_find(&t, 0x7fff));
	ASSERT_UINT(t.n, ==, 2);
	ASSERT_OK(sonde__modtable_remove(&t, 5, 5)); /* empty: nothing */
	ASSERT_UINT(t.n, ==, 2);
	sonde__modtable_free(&t);
}
