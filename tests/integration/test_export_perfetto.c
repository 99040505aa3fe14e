/* The Perfetto export: `sonde convert --format perfetto` and `sonde record -o x.pftrace` of
 * the reference program split, decoded packet by packet (tests/integration/pftrace_util.c
 * rebuilds each PerfSample's stack from the interned callstacks, frames and names). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "pftrace_util.h"
#include "split_util.h"

/* Records `split SECONDS` at 999 Hz into out; returns the samples the spool holds. */
static uint64_t record_split(const char *out, int seconds)
{
	struct test_output o;
	struct sonde_spool_info in;

	test_runf(&o, seconds + 90, "%s record -q -F 999 -o %s -- %s %d", test_bin("sonde"), out,
		  test_prog("split"), seconds);
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

static void decode_file(const char *path, struct pft_trace *t)
{
	size_t len;
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(path, &len));
	pft_decode(data, len, t);
	free(data);
}

/* One recording of split converted to Perfetto: the trace holds the spool's samples with
 * the same leaves, sample for sample (the counts of `sonde report --folded` on the same
 * spool), whatever share of them each leaf got. */
static void convert_split_once(void *ctx, int seconds, struct split_counts *add)
{
	const char *spool = test_path("split.spool"), *trace = test_path("split.pftrace");
	uint64_t *samples = ctx;
	struct split_counts rep = {0};
	struct test_output o;
	struct pft_trace t;

	*samples = record_split(spool, seconds);
	split_add_spool(&rep, spool, "");
	ASSERT_UINT(rep.all, ==, *samples);
	test_runf(&o, 120, "%s convert %s -o %s", test_bin("sonde"), spool, trace);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.err, "");
	test_output_free(&o);
	decode_file(trace, &t);

	/* one profile sequence, the first a service would hand a producer */
	ASSERT_INT(t.n_seq_ids, ==, 1);
	ASSERT_UINT(t.seq_ids[0], ==, 2);
	ASSERT_INT(t.missing_interned, ==, 0);
	ASSERT_INT(t.defaults_packets, ==, 1);
	ASSERT_UINT(t.timebase_freq, ==, 999);
	ASSERT_INT(t.clock_id_default, ==, 3);
	pft_split(&t, 0, add);
	ASSERT_UINT(add->all, ==, rep.all);
	for (int k = 0; k < 3; k++)
		ASSERT_UINT(add->n[k], ==, rep.n[k]);
	/* names for the UI: the process and its thread */
	ASSERT_CONTAINS(t.process_names, "=split\n");
	ASSERT_CONTAINS(t.thread_names, "=split\n");
	/* every leaf sits in a mapping named by its path */
	for (size_t i = 0; i < t.n_samples; i++) {
		if (t.samples[i].stack && strstr(t.samples[i].stack, "compute_hot"))
			ASSERT_CONTAINS(t.samples[i].leaf_mapping, "/split");
	}
	pft_free(&t);
}

TEST_TIMEOUT(export_perfetto_convert_split, 300)
{
	static const struct split_judge judge = {.tolerance = 5.0, .min_samples = 1200};
	struct split_counts acc;
	struct test_output o;
	struct pft_trace t;
	uint64_t samples;

	test_require_perf();
	split_settle(&judge, convert_split_once, &samples, &acc, 1);
	const char *spool = test_path("split.spool"), *trace = test_path("split.pftrace");

	/* unsymbolized (the last recording): the same stacks by address, no names */
	test_runf(&o, 120, "%s convert --no-symbolize -f perfetto %s -o %s", test_bin("sonde"),
		  spool, trace);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_UINT(t.n_samples, ==, samples);
	ASSERT_INT(t.missing_interned, ==, 0);
	size_t named = 0, with_pc = 0;
	for (size_t i = 0; i < t.n_samples; i++) {
		named += t.samples[i].stack && strstr(t.samples[i].stack, "compute_") != NULL;
		with_pc += t.samples[i].leaf_rel_pc != 0;
	}
	ASSERT_UINT(named, ==, 0);
	ASSERT_UINT(with_pc * 10, >=, samples * 9);
	pft_free(&t);
}

TEST_TIMEOUT(export_perfetto_record_by_extension, 300)
{
	const char *trace = test_path("rec.pftrace");
	struct test_output o;
	struct pft_trace t;

	test_require_perf();
	test_runf(&o, 120, "%s record -q -F 499 -o %s -- %s 1", test_bin("sonde"), trace,
		  test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_UINT(t.n_samples, >, 20);
	ASSERT_INT(t.missing_interned, ==, 0);
	ASSERT_UINT(t.timebase_freq, ==, 499);
	size_t in_compute = 0;
	for (size_t i = 0; i < t.n_samples; i++)
		in_compute += t.samples[i].stack && strstr(t.samples[i].stack, ";compute_");
	ASSERT_UINT(in_compute * 2, >=, t.n_samples);
	pft_free(&t);
	/* the intermediate spool is gone */
	test_runf(&o, 10, "/bin/ls %s", test_tmpdir());
	ASSERT_STR_EQ(o.out, "rec.pftrace\n");
	test_output_free(&o);
}
