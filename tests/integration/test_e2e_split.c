/* The foundation's end-to-end acceptance: `sonde record` of the reference program split,
 * then `sonde report` on the spool it wrote.
 *
 *  - the report attributes compute_hot/warm/cool within 5 points of 60/30/10, and every
 *    sample in them reaches main through run and the matching path_* function;
 *  - a 10 s recording at 999 Hz costs at most 64 bytes per sample;
 *  - a truncated copy is reported with a warning, a corrupted one is refused in one line.
 */
#include <stdbool.h>
#include <unistd.h>

#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "split_util.h"

/* Records `split SECONDS` at 999 Hz into out, user space only (the tables' self counts
 * take the compute functions as leaves; a sample in the kernel, a timer interrupt or a
 * page fault, would put a [kernel] leaf under them); returns the samples it holds. */
static uint64_t record_split(const char *out, int seconds)
{
	struct test_output o;
	struct sonde_spool_info in;

	test_require_perf();
	test_runf(&o, seconds + 60, "%s record --no-kernel -F 999 -o %s -- %s %d",
		  test_bin("sonde"), out, test_prog("split"), seconds);
	if (o.status != 0)
		FAIL("sonde record exited %d:\n%s%s", o.status, o.out, o.err);
	test_output_free(&o);
	struct sonde_spool *s = sonde_spool__open(out, NULL);
	if (!s)
		FAIL("%s: %s", out, sonde_strerror(errno));
	sonde_spool__get_info(s, &in);
	sonde_spool__close(s);
	return in.samples;
}

/* Self and total percentages and samples of `function` in the report table titled `title`
 * ("by self samples" or "by total samples"); fails when the function is not in it. */
static void pcts(const char *report, const char *title, const char *function, double *self,
		 double *total, uint64_t n[2])
{
	char needle[128];
	const char *table = strstr(report, title);
	const char *end = table ? strstr(table, "\n\n") : NULL;

	if (!table || !end)
		FAIL("no table '%s' in:\n%s", title, report);
	snprintf(needle, sizeof(needle), "  %s [", function);
	const char *hit = strstr(table, needle);
	if (!hit || hit > end)
		FAIL("%s is not in the table '%s':\n%s", function, title, report);
	const char *line = hit;
	while (line > table && line[-1] != '\n')
		line--;
	unsigned long long a, b;
	ASSERT_INT(sscanf(line, " %lf%% %llu %lf%% %llu", self, &a, total, &b), ==, 4);
	n[0] = a;
	n[1] = b;
}

static uint64_t report_samples(const char *report)
{
	const char *p = strstr(report, ": ");
	unsigned long long n;

	ASSERT(p && sscanf(p + 2, "%llu samples", &n) == 1);
	return n;
}

/* Checks the folded stacks: wherever compute_X is on a stack, its callers are exactly
 * "main;run;path_X" (only start-up frames such as __libc_start_main may be above main).
 * Returns the samples in compute_* and, in *all, every sample. */
static uint64_t check_folded(char *folded, uint64_t *all)
{
	static const char *const kinds[] = {"hot", "warm", "cool"};
	uint64_t in_compute = 0;

	*all = 0;
	for (char *line = strtok(folded, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		ASSERT(sp != NULL);
		*sp = 0;
		uint64_t n = strtoull(sp + 1, NULL, 10);
		*all += n;
		for (int k = 0; k < 3; k++) {
			char frame[32], path[96];
			snprintf(frame, sizeof(frame), "compute_%s", kinds[k]);
			snprintf(path, sizeof(path), "main;run;path_%s;compute_%s", kinds[k],
				 kinds[k]);
			const char *at = strstr(line, frame);
			if (!at || (at[strlen(frame)] != ';' && at[strlen(frame)] != 0))
				continue;
			const char *p = strstr(line, path);
			bool ok = p && p + strlen(path) - strlen(frame) == at &&
				  (p == line || p[-1] == ';');
			if (!ok)
				FAIL("%" PRIu64 " samples in %s do not come through %s: %s", n,
				     frame, path, line);
			in_compute += n;
		}
	}
	return in_compute;
}

/* Offset of the first sample record, found with the decoder. */
static uint64_t first_sample_offset(const char *data, size_t len)
{
	struct sonde_spool_decoder *d = ASSERT_NOT_NULL(sonde_spool_decoder__new());
	struct sonde_spool_record rec;
	size_t pos = 0;

	for (;;) {
		int r = sonde_spool_decoder__decode(d, data + pos, len - pos, &rec);
		ASSERT_INT(r, >, 0);
		if (rec.type == SONDE_SPOOL_REC_SAMPLE)
			break;
		pos += (size_t)r;
	}
	sonde_spool_decoder__free(d);
	return pos;
}

/* One recording of split and its reports: the tables say what the folded stacks of the same
 * spool count (self by --no-inline leaf, totals with inline frames shown), every sample in
 * compute_X comes through main;run;path_X, and nearly all are in compute_*. Adds the
 * --no-inline counts. */
static void report_split_once(void *ctx, int seconds, struct split_counts *add)
{
	const char *spool = test_path("split.spool");
	struct split_counts inl = {0};
	struct test_output o;
	double self, total;
	uint64_t n[2];

	record_split(spool, seconds);
	split_add_spool(add, spool, "--no-inline");
	split_add_spool(&inl, spool, "");
	/* inlined code (split's spin loop) belongs to the function it was inlined into */
	test_runf(&o, 120, "%s report --no-inline %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.err, "");
	uint64_t samples = report_samples(o.out);
	ASSERT_UINT(samples, ==, add->all);
	for (int k = 0; k < 3; k++) {
		char fn[32];
		snprintf(fn, sizeof(fn), "compute_%s", split_kinds[k]);
		pcts(o.out, "by self samples", fn, &self, &total, n);
		ASSERT_UINT(n[0], ==, add->n[k]);
		ASSERT_DOUBLE_NEAR(self, split_pct(add, k, false), 0.0051);
	}
	pcts(o.out, "by total samples", "main", &self, &total, n);
	ASSERT_DOUBLE_NEAR(total, 100.0, 2.0);
	test_output_free(&o);

	/* with inline frames shown, the same split appears in the totals */
	test_runf(&o, 120, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_UINT(inl.all, ==, samples);
	for (int k = 0; k < 3; k++) {
		char fn[32];
		snprintf(fn, sizeof(fn), "compute_%s", split_kinds[k]);
		pcts(o.out, "by total samples", fn, &self, &total, n);
		ASSERT_UINT(n[1], ==, inl.n[k]);
		ASSERT_DOUBLE_NEAR(total, split_pct(&inl, k, false), 0.0051);
		/* the same samples, whether inline frames are shown or not */
		ASSERT_UINT(inl.n[k], ==, add->n[k]);
	}
	test_output_free(&o);

	for (int no_inline = 0; no_inline <= 1; no_inline++) {
		test_runf(&o, 120, "%s report --folded%s %s", test_bin("sonde"),
			  no_inline ? " --no-inline" : "", spool);
		ASSERT_INT(o.status, ==, 0);
		uint64_t all, in_compute = check_folded(o.out, &all);
		ASSERT_UINT(all, ==, samples);
		/* the rest: the loop in run, clock_gettime, process start-up */
		ASSERT_UINT(in_compute * 100, >=, samples * 90);
		test_output_free(&o);
	}
}

TEST_TIMEOUT(e2e_split_report_attribution_and_damaged_copies, 300)
{
	struct test_output o;
	const char *spool = test_path("split.spool");
	/* The event counts CPU time: on a loaded machine split gets a fraction of its 4 s, and
	 * its shares stray (split_util.h): judged on 1500 samples or more (the standard error
	 * of a 60% share is 1.3 points at 1500 samples, 2.6 at 360), over recordings. */
	static const struct split_judge judge = {
		.tolerance = 5.0, .min_samples = 1500, .seconds = 4};
	struct split_counts acc;

	test_require_perf();
	split_settle(&judge, report_split_once, NULL, &acc, 1);
	ASSERT_UINT(acc.all, >=, 300);
	test_runf(&o, 120, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	uint64_t samples = report_samples(o.out);
	test_output_free(&o);

	/* a copy cut in the middle of its data: recovered, with the warning */
	size_t len;
	char *data = ASSERT_NOT_NULL(test_read_file(spool, &len));
	const char *cut = test_path("cut.spool");
	test_write_file(cut, data, len / 2 + 1);
	test_runf(&o, 120, "%s report %s", test_bin("sonde"), cut);
	ASSERT_INT(o.status, ==, 0);
	char want[512];
	snprintf(want, sizeof(want), "sonde report: %s: truncated at byte ", cut);
	ASSERT_CONTAINS(o.err, want);
	ASSERT_CONTAINS(o.err, "samples\n");
	ASSERT_CONTAINS(o.out, "compute_hot");
	uint64_t recovered = report_samples(o.out);
	ASSERT_UINT(recovered, >, samples / 4);
	ASSERT_UINT(recovered, <, samples);
	test_output_free(&o);

	/* a copy with a reserved bit set in its first sample record: refused at that byte */
	uint64_t at = first_sample_offset(data, len);
	data[at] |= 0x40;
	const char *bad = test_path("bad.spool");
	test_write_file(bad, data, len);
	test_runf(&o, 120, "%s report %s", test_bin("sonde"), bad);
	ASSERT_INT(o.status, ==, 1);
	snprintf(want, sizeof(want),
		 "sonde report: %s: corrupt spool: malformed data at byte %" PRIu64 "\n", bad, at);
	ASSERT_STR_EQ(o.err, want);
	ASSERT_STR_EQ(o.out, "");
	test_output_free(&o);
	free(data);
}

TEST_TIMEOUT(e2e_split_spool_size_per_sample, 240)
{
	struct test_output o;
	const char *spool = test_path("split10.spool");
	size_t len;

	record_split(spool, 10);
	char *data = ASSERT_NOT_NULL(test_read_file(spool, &len));
	free(data);
	test_runf(&o, 120, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	uint64_t samples = report_samples(o.out);
	test_output_free(&o);
	/* 999 Hz of CPU time: fewer when split gets less than a whole CPU */
	ASSERT_UINT(samples, >=, 200);
	double per = (double)len / (double)samples;
	printf("spool: %zu bytes, %" PRIu64 " samples, %.2f bytes per sample\n", len, samples, per);
	ASSERT(per <= 64.0);
}
