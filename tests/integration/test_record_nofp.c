/* The reference split program built -O2 -fomit-frame-pointer (progs/split-nofp: only CFI
 * can unwind it, but for its C runtime's code, split_assert_cfi_only), recorded by `sonde record`: each leaf within 5 points of its 60/30/10 %
 * share of the CPU, and every one of its stacks complete, _start ... main -> run ->
 * path_X -> compute_X. (tests/integration/test_unwind_record.c compares the same stacks
 * with perf's --call-graph dwarf.) */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../util.h"
#include "split_util.h"

static const char *const kinds[3] = {"hot", "warm", "cool"};

/* The summary sonde record printed (to free). */
static char *record(const char *spool, int seconds)
{
	struct test_output o;

	test_runf(&o, seconds + 60, "%s record -F 999 -o %s -- %s %d", test_bin("sonde"), spool,
		  test_prog("split-nofp"), seconds);
	ASSERT_INT(o.status, ==, 0);
	char *err = strdup(o.err);
	ASSERT(err != NULL);
	test_output_free(&o);
	return err;
}

/* One recording of split-nofp: every stack in compute_X complete, nearly all samples in
 * compute_*; adds the compute_X counts. */
static void record_nofp_once(void *ctx, int seconds, struct split_counts *add)
{
	const char *spool = test_path("nofp.spool");
	long bad = 0, compute = 0;
	char bad_example[512] = "";
	struct test_output o;

	char *summary = record(spool, seconds);
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	split_assert_cfi_only(summary, o.out);
	free(summary);
	char *save;
	for (char *l = strtok_r(o.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		if (!sp)
			continue;
		*sp = 0;
		long n = atol(sp + 1);
		add->all += (uint64_t)n;
		for (int k = 0; k < 3; k++) {
			char leaf[32], chain[128];
			snprintf(leaf, sizeof(leaf), "compute_%s", kinds[k]);
			snprintf(chain, sizeof(chain), ";main;run;path_%s;compute_%s", kinds[k],
				 kinds[k]);
			if (!strstr(l, leaf))
				continue;
			if (strncmp(l, "_start;", 7) == 0 && strstr(l, chain)) {
				add->n[k] += (uint64_t)n;
				compute += n;
			} else {
				bad += n;
				snprintf(bad_example, sizeof(bad_example), "%s", l);
			}
		}
	}
	test_output_free(&o);
	printf("%" PRIu64 " samples, %ld in compute_*, %ld incomplete (%s)\n", add->all, compute,
	       bad, bad_example);
	ASSERT_INT(bad, ==, 0);
	/* Nearly all of split's time is in the leaves (the rest: startup, the time checks). */
	ASSERT_INT(compute * 100, >=, (long)add->all * 95);
}

TEST_TIMEOUT(kernel_split_nofp_leaves_within_five_points, 300)
{
	/* CPU time is what is sampled: on a loaded machine 4 s of wall time may give too few
	 * samples for a 5-point check (the standard error of a 60% share is 1.3 points at 1500
	 * samples), and the shares stray (split_util.h): judged over recordings. */
	static const struct split_judge judge = {
		.tolerance = 5.0, .of_compute = true, .min_samples = 1500, .seconds = 4};
	struct split_counts acc;

	test_require_perf();
	split_settle(&judge, record_nofp_once, NULL, &acc, 1);
	ASSERT_UINT(acc.n[0] + acc.n[1] + acc.n[2], >=, 300);
}
