/* DWARF unwinding in the recorder, end to end: `sonde record` on split-nofp (-O2, no frame
 * pointers, so only CFI can unwind it) gives every compute_* sample its whole chain
 * _start ... main -> run -> path_X -> compute_X, and the same call paths, in about the same
 * proportions, as `perf record --call-graph dwarf` read back with `perf script`. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "split_util.h"

static const char *const kinds[3] = {"hot", "warm", "cool"};

struct tally {
	long total;   /* samples whose leaf is a compute_* function */
	long good[3]; /* ... with the full expected chain, by kind */
	long bad;     /* ... with anything else */
	char bad_example[512];
};

/* Accounts one stack given outermost first as "a;b;c" (inline frames included). */
static void account(struct tally *t, const char *stack)
{
	for (int k = 0; k < 3; k++) {
		char leaf[32], chain[128];
		snprintf(leaf, sizeof(leaf), "compute_%s", kinds[k]);
		if (!strstr(stack, leaf))
			continue;
		t->total++;
		snprintf(chain, sizeof(chain), ";main;run;path_%s;compute_%s", kinds[k], kinds[k]);
		if (strncmp(stack, "_start;", 7) == 0 && strstr(stack, chain)) {
			t->good[k]++;
		} else {
			t->bad++;
			snprintf(t->bad_example, sizeof(t->bad_example), "%s", stack);
		}
		return;
	}
}

/* sonde report --folded: "outer;...;inner COUNT" lines. */
static void tally_folded(struct tally *t, char *text)
{
	char *save;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		long count = atol(sp + 1);
		for (long i = 0; i < count; i++)
			account(t, line);
	}
}

/* perf script: a header line per sample, then one "addr sym+off (dso)" line per frame,
 * innermost first, then a blank line. */
static void tally_perf_script(struct tally *t, char *text)
{
	char stack[4096], frames[64][64];
	int n = 0;
	char *save;

	for (char *line = strtok_r(text, "\n", &save);; line = strtok_r(NULL, "\n", &save)) {
		bool frame = line && (line[0] == '\t' || line[0] == ' ');
		if (frame && n < 64) {
			char addr[32], sym[256];
			if (sscanf(line, "%31s %255s", addr, sym) == 2) {
				sym[strcspn(sym, "+")] = 0;
				snprintf(frames[n++], sizeof(frames[0]), "%.63s", sym);
			}
			continue;
		}
		if (n) {
			stack[0] = 0;
			for (int i = n - 1; i >= 0; i--) {
				strncat(stack, frames[i], sizeof(stack) - strlen(stack) - 2);
				if (i)
					strcat(stack, ";");
			}
			account(t, stack);
			n = 0;
		}
		if (!line)
			break;
	}
}

/* perf from PATH (test_run needs a path; linux-perf is in scripts/packages). */
static const char *perf_path(void)
{
	static char buf[512];
	const char *path = getenv("PATH");
	char dirs[2048];
	char *save;

	snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/usr/sbin", path ? path : "");
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(buf, sizeof(buf), "%s/perf", d);
		if (access(buf, X_OK) == 0)
			return buf;
	}
	FAIL("perf is not installed (package linux-perf)");
}

TEST_TIMEOUT(unwind_record_split_nofp_stacks_complete_like_perf, 240)
{
	struct test_output o;

	if (geteuid() != 0)
		SKIP("needs perf_event_open on a child: run as root");
	const char *spool = test_path("nofp.spool");
	/* split runs for wall time, and cpu-clock samples only while it runs: 5 s leaves
	 * enough samples for the comparison even on a heavily loaded machine. */
	test_runf(&o, 60, "%s record -F 499 -o %s -- %s 5", test_bin("sonde"), spool,
		  test_prog("split-nofp"));
	ASSERT_INT(o.status, ==, 0);
	printf("%s", o.err);
	char *summary = strdup(o.err);
	ASSERT(summary != NULL);
	test_output_free(&o);

	test_runf(&o, 60, "%s report --folded %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	split_assert_cfi_only(summary, o.out);
	free(summary);
	struct tally sonde = {0};
	tally_folded(&sonde, o.out);
	test_output_free(&o);

	const char *pdata = test_path("perf.data");
	const char *perf = perf_path();
	test_runf(&o, 60, "%s record -q -F 499 --call-graph dwarf -o %s %s 5", perf, pdata,
		  test_prog("split-nofp"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	test_runf(&o, 120, "%s script -i %s -F comm,tid,time,ip,sym", perf, pdata);
	ASSERT_INT(o.status, ==, 0);
	struct tally peer = {0};
	tally_perf_script(&peer, o.out);
	test_output_free(&o);

	printf("sonde: %ld compute samples, %ld/%ld/%ld complete, %ld other (%s)\n", sonde.total,
	       sonde.good[0], sonde.good[1], sonde.good[2], sonde.bad, sonde.bad_example);
	printf("perf:  %ld compute samples, %ld/%ld/%ld complete, %ld other (%s)\n", peer.total,
	       peer.good[0], peer.good[1], peer.good[2], peer.bad, peer.bad_example);
	/* Every sonde stack is complete, from _start through main, run, path_X to compute_X. */
	ASSERT_INT(sonde.total, >=, 100);
	ASSERT_INT(sonde.bad, ==, 0);
	/* perf agrees on the paths (it may lose a few stacks of its own). */
	ASSERT_INT(peer.total, >=, 100);
	ASSERT_INT(peer.bad * 20, <=, peer.total);
	for (int k = 0; k < 3; k++) {
		double a = (double)sonde.good[k] / sonde.total,
		       b = (double)peer.good[k] / peer.total;
		printf("compute_%s: sonde %.2f perf %.2f\n", kinds[k], a, b);
		ASSERT(sonde.good[k] > 0);
		ASSERT_DOUBLE_NEAR(a, b, 0.12);
	}
}

/* A stack copy too small for the whole stack: samples are marked truncated (the summary
 * counts them), never passed off as complete. */
TEST_TIMEOUT(unwind_record_small_copy_window_marks_truncated, 120)
{
	struct test_output o;
	unsigned long long samples = 0, written = 0, lost = 0, lost_records = 0, empty = 0,
			   truncated = 0;

	if (geteuid() != 0)
		SKIP("needs perf_event_open on a child: run as root");
	/* 2 s of its CPU time: as many samples on a loaded machine as on a quiet one */
	test_runf(&o, 60, "%s record -F 499 --stack-size 64 -o %s -- %s 2cpu", test_bin("sonde"),
		  test_path("small.spool"), test_prog("split-nofp"));
	ASSERT_INT(o.status, ==, 0);
	printf("%s", o.err);
	const char *p = strstr(o.err, "sonde record: ");
	ASSERT(p && sscanf(p, "sonde record: %llu samples (%llu written; %llu samples and %llu records lost)",
			   &samples, &written, &lost, &lost_records) == 4);
	p = strstr(o.err, " empty, ");
	ASSERT(p != NULL);
	while (p > o.err && p[-1] != ' ')
		p--;
	ASSERT(sscanf(p, "%llu empty, %llu truncated", &empty, &truncated) == 2);
	ASSERT_UINT(written, >=, 20);
	/* 64 bytes hold a few frames at most: every stack is cut, but for the odd sample
	 * taken at the first instructions of the dynamic loader, whose stack is short. */
	ASSERT_UINT(truncated + 2, >=, written);
	ASSERT_UINT(truncated, >, 0);
	test_output_free(&o);
}
