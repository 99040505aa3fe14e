/* The reference split program built -O2 -fomit-frame-pointer (progs/split-nofp: only CFI
 * can unwind it), recorded by `sonde record`: each leaf within 5 points of its 60/30/10 %
 * share of the CPU, and every one of its stacks complete, _start ... main -> run ->
 * path_X -> compute_X. (tests/integration/test_unwind_record.c compares the same stacks
 * with perf's --call-graph dwarf.) */
#include <stdlib.h>
#include <string.h>

#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"

static const char *const kinds[3] = {"hot", "warm", "cool"};

static uint64_t record(const char *spool, int seconds)
{
	struct test_output o;
	struct sonde_spool_info info;

	test_runf(&o, seconds + 60, "%s record -F 999 -o %s -- %s %d", test_bin("sonde"), spool,
		  test_prog("split-nofp"), seconds);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, " 0 by frame pointers");
	test_output_free(&o);
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	sonde_spool__get_info(s, &info);
	sonde_spool__close(s);
	return info.samples;
}

TEST_TIMEOUT(kernel_split_nofp_leaves_within_five_points, 300)
{
	const char *spool = test_path("nofp.spool");
	long good[3] = {0}, bad = 0, all = 0;
	char bad_example[512] = "";
	struct test_output o;

	test_require_perf();
	/* CPU time is what is sampled: on a loaded machine 4 s of wall time may give too few
	 * samples for a 5-point check (the standard error of a 60% share is 1.3 points at 1500
	 * samples), so record longer when needed. */
	uint64_t got = record(spool, 4);
	if (got < 1500) {
		int secs = (int)(4 * 1500 / (got ? got : 1)) + 1;
		record(spool, secs < 40 ? secs : 40);
	}
	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	char *save;
	for (char *l = strtok_r(o.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(l, ' ');
		if (!sp)
			continue;
		*sp = 0;
		long n = atol(sp + 1);
		all += n;
		for (int k = 0; k < 3; k++) {
			char leaf[32], chain[128];
			snprintf(leaf, sizeof(leaf), "compute_%s", kinds[k]);
			snprintf(chain, sizeof(chain), ";main;run;path_%s;compute_%s", kinds[k],
				 kinds[k]);
			if (!strstr(l, leaf))
				continue;
			if (strncmp(l, "_start;", 7) == 0 && strstr(l, chain)) {
				good[k] += n;
			} else {
				bad += n;
				snprintf(bad_example, sizeof(bad_example), "%s", l);
			}
		}
	}
	test_output_free(&o);
	long compute = good[0] + good[1] + good[2];
	printf("%ld samples, %ld in compute_*: %ld/%ld/%ld, %ld incomplete (%s)\n", all, compute,
	       good[0], good[1], good[2], bad, bad_example);
	ASSERT_INT(bad, ==, 0);
	ASSERT_INT(compute, >=, 300);
	/* Nearly all of split's time is in the leaves (the rest: startup, the time checks). */
	ASSERT_INT(compute * 100, >=, all * 95);
	static const double want[3] = {60.0, 30.0, 10.0};
	for (int k = 0; k < 3; k++)
		ASSERT_DOUBLE_NEAR(100.0 * good[k] / compute, want[k], 5.0);
}
