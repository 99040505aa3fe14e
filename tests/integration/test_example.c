/* The example programs under examples/, run as a user would run them. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

/* The frames printed for stack number k ("stack K: ..." up to the next blank line). */
static char *stack_block(const char *out, int k)
{
	char head[32];

	snprintf(head, sizeof(head), "stack %d: ", k);
	const char *p = strstr(out, head);
	if (!p)
		return NULL;
	const char *end = strstr(p, "\n\n");
	return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

/* Percent of the samples in stack block b, and its leaf function. */
static double block_pct(const char *b, char *leaf, size_t n)
{
	double pct;
	char name[256];

	ASSERT_INT(sscanf(strchr(b, '(') + 1, "%lf%%", &pct), ==, 1);
	ASSERT_INT(sscanf(strchr(b, '\n') + 1, " %255s", name), ==, 1);
	snprintf(leaf, n, "%s", name);
	return pct;
}

static void check_split_stacks(const char *out)
{
	/* The hottest stack is split's hot path, leaf first. */
	char *b = ASSERT_NOT_NULL(stack_block(out, 1));
	const char *hot = strstr(b, "compute_hot"), *path = strstr(b, "path_hot"),
		   *run = strstr(b, "run"), *main_ = strstr(b, "main");
	ASSERT(hot && path && run && main_);
	ASSERT(hot < path && path < run && run < main_);
	ASSERT_CONTAINS(b, "[split]");
	ASSERT_CONTAINS(b, "split.c:");
	free(b);
	/* Stacks differ by the exact instruction of the leaf: summed over them, compute_hot
	 * has ~60% of the samples and compute_warm ~30%. */
	double hot_pct = 0, warm_pct = 0;
	char leaf[256];
	for (int k = 1; (b = stack_block(out, k)); k++) {
		double pct = block_pct(b, leaf, sizeof(leaf));
		if (strcmp(leaf, "compute_hot") == 0)
			hot_pct += pct;
		if (strcmp(leaf, "compute_warm") == 0)
			warm_pct += pct;
		free(b);
	}
	ASSERT_DOUBLE_NEAR(hot_pct, 60, 15);
	ASSERT_DOUBLE_NEAR(warm_pct, 30, 12);
}

TEST_TIMEOUT(example_record_stacks_launches_and_prints_symbolized_stacks, 120)
{
	struct test_output o;

	test_require_perf();
	test_runf(&o, 90, "%s -n 1000 -d 30 -o %s %s 2", test_example("record_stacks"),
		  test_path("ex.spool"), test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples written");
	check_split_stacks(o.out);
	test_output_free(&o);
}

TEST_TIMEOUT(example_record_stacks_attaches_to_a_pid_until_deadline, 120)
{
	const char *split[] = {test_prog("split"), "60", NULL};
	struct test_output o;

	test_require_perf();
	pid_t pid = test_spawn(split);
	test_runf(&o, 90, "%s -n 1000 -d 2 -o %s -p %d", test_example("record_stacks"),
		  test_path("ex2.spool"), (int)pid);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_INT(o.status, ==, 0);
	check_split_stacks(o.out);
	test_output_free(&o);
}
