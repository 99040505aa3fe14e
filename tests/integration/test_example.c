/* The example programs under examples/, run as a user would run them. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "split_util.h"

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

/* Samples in stack block b, and its leaf function (of the program's own frames). */
static uint64_t block_samples(const char *b, char *leaf, size_t n)
{
	unsigned long long samples;
	char name[256];

	ASSERT_INT(sscanf(b, "stack %*d: %llu samples", &samples), ==, 1);
	const char *line = strchr(b, '\n') + 1;
	ASSERT_INT(sscanf(line, " %255s", name), ==, 1);
	/* time in the kernel (sampled by default) is a [kernel] frame below the function
	 * that called into it: that function is the leaf of the program's own code */
	if (!strcmp(name, "[kernel]") && strchr(line, '\n'))
		ASSERT_INT(sscanf(strchr(line, '\n') + 1, " %255s", name), ==, 1);
	snprintf(leaf, n, "%s", name);
	return samples;
}

/* Checks the stacks record_stacks printed (out, err) for its spool, and adds their samples
 * to c: the hottest stack is split's hot path, and summed over the stacks of each leaf the
 * samples are those the spool's folded stacks count. */
static void check_split_stacks(const char *out, const char *err, const char *spool,
			       struct split_counts *c)
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
	/* Stacks differ by the exact instruction of the leaf: summed over them, each
	 * compute_X has the samples the spool has in it. */
	struct split_counts printed = {0}, folded = {0};
	unsigned long long written;
	char leaf[256];
	ASSERT_INT(sscanf(err, "%llu samples written", &written), ==, 1);
	printed.all = written;
	for (int k = 1; (b = stack_block(out, k)); k++) {
		uint64_t n = block_samples(b, leaf, sizeof(leaf));
		for (int i = 0; i < 3; i++) {
			char fn[32];
			snprintf(fn, sizeof(fn), "compute_%s", split_kinds[i]);
			if (strcmp(leaf, fn) == 0)
				printed.n[i] += n;
		}
		free(b);
	}
	split_add_spool(&folded, spool, "");
	ASSERT_UINT(printed.all, ==, folded.all);
	for (int i = 0; i < 3; i++)
		ASSERT_UINT(printed.n[i], ==, folded.n[i]);
	split_add(c, &printed);
}

static void launch_once(void *ctx, int seconds, struct split_counts *add)
{
	struct test_output o;

	test_runf(&o, 90, "%s -n 1000 -d 30 -o %s %s %d", test_example("record_stacks"),
		  test_path("ex.spool"), test_prog("split"), seconds);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples written");
	check_split_stacks(o.out, o.err, test_path("ex.spool"), add);
	test_output_free(&o);
}

static void attach_once(void *ctx, int seconds, struct split_counts *add)
{
	const char *split[] = {test_prog("split"), "60", NULL};
	struct test_output o;

	pid_t pid = test_spawn(split);
	test_runf(&o, 90, "%s -n 1000 -d %d -o %s -p %d", test_example("record_stacks"), seconds,
		  test_path("ex2.spool"), (int)pid);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT_INT(o.status, ==, 0);
	check_split_stacks(o.out, o.err, test_path("ex2.spool"), add);
	test_output_free(&o);
}

/* compute_hot has ~60% of the samples and compute_warm ~30%, within 12 points (over
 * recordings, split_util.h). */
static const struct split_judge judge = {.tolerance = 12.0, .seconds = 2};

TEST_TIMEOUT(example_record_stacks_launches_and_prints_symbolized_stacks, 300)
{
	struct split_counts acc;

	test_require_perf();
	split_settle(&judge, launch_once, NULL, &acc, 1);
}

TEST_TIMEOUT(example_record_stacks_attaches_to_a_pid_until_deadline, 300)
{
	struct split_counts acc;

	test_require_perf();
	split_settle(&judge, attach_once, NULL, &acc, 1);
}

/* The options the example zero-initializes record what the command forks, as `sonde
 * record` does: a shell running split (and then something else, so that it forks rather
 * than exec's) gives split's stacks, not "0 samples written". */
TEST_TIMEOUT(example_record_stacks_records_the_children_of_a_command, 120)
{
	char script[1024];
	struct test_output o;

	test_require_perf();
	snprintf(script, sizeof(script), "%s 1cpu; true", test_prog("split"));
	const char *argv[] = {test_example("record_stacks"), "-d", "60", "-o",
			      test_path("kids.spool"), "sh", "-c", script, NULL};
	test_run(&o, 90, argv);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples written");
	ASSERT_CONTAINS(o.out, "compute_hot");
	test_output_free(&o);
}
