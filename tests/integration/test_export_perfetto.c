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

/* Records `split SECONDS` at 999 Hz into out, again for longer when a loaded machine gave
 * it too little CPU for a 5-point check; returns the samples. */
static uint64_t record_split(const char *out)
{
	struct test_output o;
	struct sonde_spool_info in;
	int secs = 3;

	test_require_perf();
	for (int attempt = 0; attempt < 2; attempt++) {
		test_runf(&o, secs + 60, "%s record -q -F 999 -o %s -- %s %d", test_bin("sonde"),
			  out, test_prog("split"), secs);
		if (o.status != 0)
			FAIL("sonde record exited %d:\n%s%s", o.status, o.out, o.err);
		test_output_free(&o);
		struct sonde_spool *s = sonde_spool__open(out, NULL);
		if (!s)
			FAIL("%s: %s", out, sonde_strerror(errno));
		sonde_spool__get_info(s, &in);
		sonde_spool__close(s);
		if (in.samples >= 1200)
			break;
		secs = in.samples ? (int)(secs * 1200 / in.samples) + 1 : 30;
		secs = secs > 30 ? 30 : secs;
	}
	return in.samples;
}

static void decode_file(const char *path, struct pft_trace *t)
{
	size_t len;
	uint8_t *data = ASSERT_NOT_NULL((uint8_t *)test_read_file(path, &len));
	pft_decode(data, len, t);
	free(data);
}

static void check_split(const struct pft_trace *t, uint64_t samples)
{
	double pct[3];
	size_t total;

	pft_split(t, 0, pct, &total);
	printf("%zu samples: compute_hot %.1f%%, compute_warm %.1f%%, compute_cool %.1f%%\n", total,
	       pct[0], pct[1], pct[2]);
	ASSERT_UINT(total, ==, samples);
	ASSERT_DOUBLE_NEAR(pct[0], 60.0, 5.0);
	ASSERT_DOUBLE_NEAR(pct[1], 30.0, 5.0);
	ASSERT_DOUBLE_NEAR(pct[2], 10.0, 5.0);
}

TEST_TIMEOUT(export_perfetto_convert_split, 300)
{
	const char *spool = test_path("split.spool"), *trace = test_path("split.pftrace");
	struct test_output o;
	struct pft_trace t;

	uint64_t samples = record_split(spool);
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
	check_split(&t, samples);
	/* names for the UI: the process and its thread */
	ASSERT_CONTAINS(t.process_names, "=split\n");
	ASSERT_CONTAINS(t.thread_names, "=split\n");
	/* every leaf sits in a mapping named by its path */
	for (size_t i = 0; i < t.n_samples; i++) {
		if (t.samples[i].stack && strstr(t.samples[i].stack, "compute_hot"))
			ASSERT_CONTAINS(t.samples[i].leaf_mapping, "/split");
	}
	pft_free(&t);

	/* unsymbolized: the same stacks by address, no names */
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
