/* Per-thread stack copies (docs/record.md, "Stack copy sizing"): a deep stack's copy grows
 * until its unwinds reach main again, a shallow one's shrinks, and switching the events of
 * every thread to resize them neither loses nor duplicates a sample. Per-process rings grow
 * after a loss. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/record.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "life_util.h"

/* The summary's "stack copies: MIN-MAX bytes per thread after N switches (G grown ...)"
 * line; false when there is none (no switch happened). */
static bool stack_line(const char *err, unsigned *min, unsigned *max, unsigned *switches,
		       unsigned *grown)
{
	const char *p = strstr(err, "stack copies: ");
	const char *g = p ? strstr(p, " switch") : NULL;

	return g &&
	       sscanf(p, "stack copies: %u-%u bytes per thread after %u", min, max, switches) ==
		       3 &&
	       sscanf(strchr(g, '(') ? strchr(g, '(') : "", "(%u grown", grown) == 1;
}

/* Records stack_depths SECONDS THREADS DEPTH with extra options; o keeps the outputs. */
static void record_depths(struct test_output *o, const char *spool, const char *opts,
			  const char *seconds, const char *threads, const char *depth)
{
	test_runf(o, 120, "%s record %s -o %s -- %s %s %s %s", test_bin("sonde"), opts, spool,
		  test_prog("stack_depths"), seconds, threads, depth);
	if (o->status != 0)
		FAIL("sonde record exited %d: %s", o->status, o->err);
}

/* 800 frames of about 64 bytes: beyond the first 32 KiB copy. Its first unwinds are cut by
 * the end of the copy, which doubles at once (to the 65528 bytes perf_event allows); from
 * then on the stacks reach main and _start again. */
TEST_EXCLUSIVE(stackcopy_deep_stack_grows_until_it_reaches_main, 150)
{
	const char *spool = test_path("deep.spool");
	unsigned min, max, switches, grown;
	struct test_output o;
	struct life_spool ls;
	uint64_t late = 0, late_whole = 0, early_cut = 0;

	test_require_perf();
	record_depths(&o, spool, "-F 999", "3", "0", "800");
	ASSERT(stack_line(o.err, &min, &max, &switches, &grown));
	ASSERT_UINT(grown, >=, 1);
	ASSERT_UINT(max, ==, 65528);
	test_output_free(&o);

	life_open(&ls, spool);
	ASSERT_UINT(ls.info.samples, >=, 100);
	uint64_t mid = ls.info.first_time_ns + (ls.info.last_time_ns - ls.info.first_time_ns) / 2;
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct sonde_spool_sample smp;
		struct life_sample s;
		uint32_t flags;
		ASSERT_OK(sonde_spool__get_sample(ls.s, i, &smp));
		int depth = life_sample_outer(&ls, i, &s, &flags);
		bool whole = !(flags & SONDE_SAMPLE_TRUNCATED) && life_find(&s, "main") >= 0 &&
			     depth > 800;
		if (smp.time_ns < mid) {
			early_cut += (flags & SONDE_SAMPLE_TRUNCATED) != 0;
			continue;
		}
		late++;
		late_whole += whole;
	}
	life_close(&ls);
	/* the retry path: cut stacks first, then whole ones */
	ASSERT_UINT(early_cut, >=, 1);
	ASSERT_UINT(late, >=, 50);
	ASSERT_UINT(late_whole * 100, >=, late * 98);
}

/* 400 frames of 160 bytes and more: deeper than the largest copy. Doubling to it makes
 * no stack whole, so the thread goes back to an 8 KiB copy (perf's default), its stacks
 * still marked truncated. */
TEST_TIMEOUT(stackcopy_stack_deeper_than_any_copy_returns_to_8k, 150)
{
	const char *spool = test_path("deeper.spool");
	unsigned min, max, switches, grown;
	struct test_output o;

	test_require_perf();
	test_runf(&o, 120, "%s record -F 999 -o %s -- %s 3 400 160", test_bin("sonde"), spool,
		  test_prog("ladder"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT(stack_line(o.err, &min, &max, &switches, &grown));
	ASSERT_UINT(grown, >=, 1);
	ASSERT_UINT(switches, >=, 2);
	ASSERT_UINT(min, ==, 8192);
	ASSERT_UINT(max, ==, 8192);
	test_output_free(&o);
}

/* A shallow stack needs a few hundred bytes: its copy drops from 32 KiB to a few KiB
 * once its unwinds have shown it, and its stacks stay whole. Over 1 s of the program's
 * CPU time, not 2 s of the wall clock, of which a loaded machine once gave it 40 ms. */
TEST_TIMEOUT(stackcopy_shallow_stack_copy_shrinks, 150)
{
	const char *spool = test_path("shallow.spool");
	unsigned min, max, switches, grown;
	struct test_output o;
	struct life_spool ls;
	uint64_t whole = 0;

	test_require_perf();
	record_depths(&o, spool, "-F 999", "1cpu", "0", "1");
	ASSERT(stack_line(o.err, &min, &max, &switches, &grown));
	ASSERT_UINT(switches, >=, 1);
	ASSERT_UINT(max, <=, 8192);
	ASSERT_UINT(min, >=, 2048);
	ASSERT_UINT(grown, ==, 0);
	test_output_free(&o);

	life_open(&ls, spool);
	ASSERT_UINT(ls.info.samples, >=, 50);
	for (uint64_t i = 0; i < ls.info.samples; i++) {
		struct life_sample s;
		uint32_t flags;
		life_sample_outer(&ls, i, &s, &flags);
		whole += !(flags & SONDE_SAMPLE_TRUNCATED) && life_find(&s, "main") >= 0;
	}
	/* samples while the loader runs, before main, are the only others */
	ASSERT_UINT(whole * 100, >=, ls.info.samples * 97);
	life_close(&ls);
}

/* The machine's steal time so far, in seconds (/proc/stat's cpu line, USER_HZ ticks): the
 * time a hypervisor ran something else while a guest's task was on its CPU. */
static double steal_s(void)
{
	char *stat = ASSERT_NOT_NULL(test_read_file("/proc/stat", NULL));
	unsigned long long v[8] = {0};

	ASSERT_INT(sscanf(stat, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			  &v[3], &v[4], &v[5], &v[6], &v[7]),
		   ==, 8);
	free(stat);
	return (double)v[7] / sysconf(_SC_CLK_TCK);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Four busy threads sampled every millisecond of their CPU time (-c 1000000 of
 * cpu-clock): the switch that shrinks their copies replaces every thread's events while
 * they run. The samples match the program's CPU time (a thread left unsampled after the
 * switch would take a quarter off, a generation counted twice over the switch would add
 * its overlap), every thread is sampled after the switch, and no sample is there twice. */
TEST_EXCLUSIVE(stackcopy_switch_loses_and_duplicates_no_sample, 150)
{
	const char *spool = test_path("count.spool");
	unsigned min, max, switches, grown;
	struct test_output o;
	struct life_spool ls;
	double cpu = 0;

	test_require_perf();
	double steal = steal_s();
	record_depths(&o, spool, "-c 1000000", "3", "4", "3");
	steal = steal_s() - steal;
	ASSERT(stack_line(o.err, &min, &max, &switches, &grown));
	ASSERT_UINT(switches, >=, 1);
	const char *p = strstr(o.out, "stack_depths: ");
	ASSERT_NOT_NULL(p);
	ASSERT_INT(sscanf(p, "stack_depths: %lf s of CPU", &cpu), ==, 1);
	test_output_free(&o);

	life_open(&ls, spool);
	uint64_t n = ls.info.samples, *keys = calloc(n ? n : 1, sizeof(*keys));
	uint32_t tids[8] = {0};
	uint64_t late[8] = {0}, all[8] = {0};
	uint64_t last_quarter =
		ls.info.last_time_ns - (ls.info.last_time_ns - ls.info.first_time_ns) / 4;
	for (uint64_t i = 0; i < n; i++) {
		struct sonde_spool_sample smp;
		struct sonde_spool_thread th;
		ASSERT_OK(sonde_spool__get_sample(ls.s, i, &smp));
		ASSERT_OK(sonde_spool__get_thread(ls.s, smp.thread, &th));
		/* time and tid: the same sample written twice would repeat both */
		keys[i] = smp.time_ns * 131 + th.tid;
		for (int k = 0; k < 8; k++) {
			if (tids[k] && tids[k] != th.tid)
				continue;
			tids[k] = th.tid;
			all[k]++;
			late[k] += smp.time_ns >= last_quarter;
			break;
		}
	}
	life_close(&ls);
	qsort(keys, n, sizeof(*keys), cmp_u64);
	for (uint64_t i = 1; i < n; i++)
		ASSERT_UINT(keys[i], !=, keys[i - 1]);
	free(keys);
	/* the four busy threads, each still sampled in the last quarter of the recording
	 * (the switch comes after their first 20 samples): on a loaded machine they may get
	 * a small share of a CPU, never none for that long */
	int busy = 0;
	for (int k = 0; k < 8; k++) {
		if (all[k] < 40)
			continue;
		busy++;
		if (late[k] < 3)
			FAIL("thread %u: %llu samples, %llu in the last quarter", tids[k],
			     (unsigned long long)all[k], (unsigned long long)late[k]);
	}
	ASSERT_INT(busy, ==, 4);
	/* user-only sampling misses the program's (little) kernel time, and a period is
	 * counted only once complete: a few percent under CPU / period. cpu-clock's periods
	 * run on while a hypervisor steals the CPU from the thread on it, which the process's
	 * CPU time leaves out (paravirt steal accounting): at most the machine's steal over
	 * the run is added (a loaded guest's run had 6 % more samples than CPU time) */
	double expect = cpu * 1000, most = (cpu + steal) * 1000;
	ASSERT_UINT(n, >=, 500);
	if (n < expect * 0.85 || n > most * 1.03)
		FAIL("%llu samples for %.3f s of CPU and %.3f s stolen (%.0f to %.0f expected)",
		     (unsigned long long)n, cpu, steal, expect * 0.85, most * 1.03);
}

struct membuf {
	char *data;
	size_t len, cap;
};

static int mem_write(void *ctx, const void *buf, size_t len)
{
	struct membuf *m = ctx;

	if (m->len + len > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1 << 20;
		while (cap < m->len + len)
			cap *= 2;
		char *d = realloc(m->data, cap);
		if (!d)
			return -1;
		m->data = d;
		m->cap = cap;
	}
	memcpy(m->data + m->len, buf, len);
	m->len += len;
	return 0;
}

/* 16 busy threads of one process into the smallest rings: while the recorder stays away,
 * the kernel drops records; the rings are doubled (a switch of every thread's events into
 * new rings) until a second of polling loses nothing, within the bound of ring memory. */
TEST_TIMEOUT(stackcopy_process_rings_grow_after_loss, 150)
{
	const char *argv[] = {test_prog("spin_threads"), "16", "40", NULL};
	struct sonde_record_opts opts = {.sz = sizeof(opts),
					 .frequency = 999,
					 .ring_pages = 1,
					 .event = SONDE_RECORD_EVENT_CPU_CLOCK};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	struct membuf mem = {0};

	test_require_perf();
	pid_t pid = test_spawn(argv);
	test_await_threads(pid, 17); /* its threads started */
	struct sonde_recorder *r = ASSERT_NOT_NULL(
		sonde_recorder__attach_writer(pid, mem_write, &mem, SONDE_ATTACH_STOP, &opts));
	/* away for 0.3 s of its CPU time: rings of a few samples overflow. The kernel reports
	 * the loss with the first record it writes once there is room again: drain a few
	 * times. */
	test_await_cpu(pid, 0.3);
	for (int i = 0; i < 5; i++)
		ASSERT_INT(sonde_recorder__poll(r, 20, NULL), >=, 0);
	ASSERT_OK(sonde_recorder__flush(r));
	ASSERT_OK(sonde_recorder__summary(r, &sum));
	uint64_t first_loss = sum.lost_events + sum.lost_samples;
	ASSERT_UINT(first_loss, >, 0);

	/* then polled: each interval's losses, until one second loses nothing */
	bool quiet = false;
	double t0 = test_now();
	uint64_t before = first_loss, taken = 0;
	while (!quiet && test_now() - t0 < 30) {
		double t1 = test_now();
		taken = 0;
		while (test_now() - t1 < 1.0) {
			int n = sonde_recorder__poll(r, 50, NULL);
			ASSERT_INT(n, >=, 0);
			taken += (uint64_t)n;
		}
		ASSERT_OK(sonde_recorder__flush(r));
		ASSERT_OK(sonde_recorder__summary(r, &sum));
		uint64_t lost = sum.lost_events + sum.lost_samples;
		/* a second that sampled and lost nothing */
		quiet = lost == before && sum.ring_grows > 0 && taken >= 50;
		before = lost;
	}
	ASSERT_OK(sonde_recorder__finish(r, &sum));
	sonde_recorder__free(r);
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	free(mem.data);
	ASSERT(quiet);
	ASSERT_UINT(sum.ring_grows, >=, 1);
	ASSERT_UINT(sum.ring_bytes_total, <=, sum.ring_bytes_cap);
	ASSERT_UINT(sum.samples_written, >=, taken);
}
