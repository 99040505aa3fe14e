/* The Perfetto export: `sonde convert --format perfetto` and `sonde record -o x.pftrace` of
 * the reference program split, decoded packet by packet (tests/integration/pftrace_util.c
 * rebuilds each PerfSample's stack from the interned callstacks, frames and names). */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "acct_util.h"
#include "offcpu_util.h"
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
	/* every leaf sits in a mapping named by its path: split's, or the kernel's for a
	 * sample taken in the kernel (a timer interrupt, a page fault: its [kernel] leaf) */
	for (size_t i = 0; i < t.n_samples; i++) {
		const char *m = t.samples[i].leaf_mapping;
		if (t.samples[i].stack && strstr(t.samples[i].stack, "compute_hot") &&
		    !(m && !strcmp(m, "/kernel")))
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
	/* 1 s of split's own CPU time: about 500 samples however busy the machine */
	test_runf(&o, 120, "%s record -q -F 499 -o %s -- %s 1cpu", test_bin("sonde"), trace,
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

/* The state a thread is in after decoded sched event ev, as Trace Processor derives
 * thread_state from them: the prev_state of its switch-out, runnable from its waking,
 * running from its switch-in; -1 when ev does not concern tid. */
enum { ST_RUNNING = -2, ST_RUNNABLE = -3 };

static int64_t state_after(const struct pft_sched *ev, uint32_t tid)
{
	if (ev->waking)
		return ev->woken_pid == tid ? ST_RUNNABLE : -1;
	if (ev->prev_pid == tid)
		return ev->prev_state;
	if (ev->next_pid == tid)
		return ST_RUNNING;
	return -1;
}

/* The duration of the state tid entered at ts (the next event of that thread, on any
 * CPU, ends it), or UINT64_MAX when none ends it; fails unless an event put tid into
 * `state` at ts. */
static uint64_t state_duration(const struct pft_trace *t, uint32_t tid, uint64_t ts, int64_t state)
{
	uint64_t end = UINT64_MAX;
	bool found = false;

	for (size_t i = 0; i < t->n_sched; i++) {
		int64_t s = state_after(&t->sched[i], tid);
		if (s == -1)
			continue;
		if (t->sched[i].ts == ts && s == state)
			found = true;
		else if (t->sched[i].ts > ts && t->sched[i].ts < end)
			end = t->sched[i].ts;
	}
	if (!found)
		FAIL("no event puts tid %u into state %lld at %llu", tid, (long long)state,
		     (unsigned long long)ts);
	return end == UINT64_MAX ? end : end - ts;
}

/* A real --off-cpu recording of offcpu_split converted to Perfetto: every interval the
 * spool holds is on the timeline as its thread's sleep (S, or D) for exactly its duration
 * up to the wakeup, runnable from the wakeup to the switch-in, events in time order per
 * CPU, and its blocking stack is a PerfSample at the switch-out reaching main. */
TEST_EXCLUSIVE(export_perfetto_offcpu_recording_thread_states, 300)
{
	const char *spool = test_path("off.spool"), *trace = test_path("off.pftrace");
	struct test_output o;
	struct pft_trace t;
	static const int64_t bits[] = {0, 1, 2, 4}; /* R S D other, as TASK_* bits */

	test_require_perf();
	test_runf(&o, 120, "%s record -q --off-cpu -o %s -- %s 2 %s", test_bin("sonde"), spool,
		  test_prog("offcpu_split"), test_path("truth"));
	if (o.status != 0)
		FAIL("sonde record --off-cpu exited %d:\n%s%s", o.status, o.out, o.err);
	test_output_free(&o);
	test_runf(&o, 120, "%s convert %s -o %s", test_bin("sonde"), spool, trace);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_INT(t.missing_interned, ==, 0);

	/* per CPU, the events in file order are in time order, and the switches chain (each
	 * one's prev is the previous one's next), so Trace Processor's sched slices close */
	size_t switches = 0;
	for (size_t i = 0; i < t.n_sched; i++) {
		const struct pft_sched *prev = NULL;
		for (size_t j = i + 1; j < t.n_sched; j++)
			if (t.sched[j].cpu == t.sched[i].cpu)
				ASSERT_UINT(t.sched[j].ts, >=, t.sched[i].ts);
		if (t.sched[i].waking)
			continue;
		for (size_t j = i; j-- > 0 && !prev;)
			if (!t.sched[j].waking && t.sched[j].cpu == t.sched[i].cpu)
				prev = &t.sched[j];
		if (prev && prev->next_pid != t.sched[i].prev_pid)
			FAIL("cpu %u at %llu: a switch from %u after one to %u", t.sched[i].cpu,
			     (unsigned long long)t.sched[i].ts, t.sched[i].prev_pid,
			     prev->next_pid);
		switches++;
	}
	ASSERT_UINT(switches, >, 20);

	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	uint64_t n = sonde_spool__offcpu_count(s), checked = 0, asleep_ns = 0, slept_ns = 0;
	size_t stacks_to_main = 0, main_sleeps = 0;
	ASSERT_UINT(n, >, 20);
	for (uint64_t i = 0; i < n; i++) {
		struct sonde_spool_offcpu iv;
		struct sonde_spool_thread th;
		ASSERT_OK(sonde_spool__get_offcpu(s, i, &iv));
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (iv.cpu == SONDE_SPOOL_CPU_NONE)
			continue;
		bool woken = iv.wakeup_ns && iv.state != SONDE_OFFCPU_RUNNABLE;
		uint64_t until = woken ? iv.wakeup_ns : iv.switch_in_ns;
		uint64_t d = state_duration(&t, th.tid, iv.switch_out_ns, bits[iv.state]);
		if (iv.flags & SONDE_OFFCPU_OPEN)
			ASSERT(woken || d == UINT64_MAX);
		else
			ASSERT_UINT(d, ==, until - iv.switch_out_ns);
		if (woken && !(iv.flags & SONDE_OFFCPU_OPEN))
			ASSERT_UINT(state_duration(&t, th.tid, iv.wakeup_ns, ST_RUNNABLE), ==,
				    iv.switch_in_ns - iv.wakeup_ns);
		if (iv.state == SONDE_OFFCPU_SLEEPING && d != UINT64_MAX) {
			asleep_ns += until - iv.switch_out_ns;
			slept_ns += d;
		}
		/* the blocking stack at the switch-out */
		const struct pft_sample *bs = NULL;
		for (size_t k = 0; k < t.n_samples && !bs; k++)
			if (t.samples[k].ts == iv.switch_out_ns && t.samples[k].tid == th.tid)
				bs = &t.samples[k];
		if (!bs)
			FAIL("no PerfSample at the switch-out %llu of tid %u",
			     (unsigned long long)iv.switch_out_ns, th.tid);
		if (th.tid == th.pid && iv.state == SONDE_OFFCPU_SLEEPING) {
			main_sleeps++;
			stacks_to_main +=
				bs->stack && strstr(bs->stack, "main;") &&
				(strstr(bs->stack, ";nap;") || strstr(bs->stack, ";wait_pipe;"));
		}
		checked++;
	}
	sonde_spool__close(s);
	ASSERT_UINT(checked, >, 20);
	ASSERT_UINT(slept_ns, ==, asleep_ns);
	/* the main thread sleeps in nap or wait_pipe, called from main (a stack the unwinder
	 * could not finish may miss main): at least its 40 ms nap in every round it made
	 * (how many depends on the machine's load: 25 when idle) */
	char *truth = ASSERT_NOT_NULL(test_read_file(test_path("truth"), NULL));
	double rounds = offcpu_truth_value(truth, "rounds");
	free(truth);
	ASSERT(rounds >= 1);
	ASSERT_UINT(main_sleeps, >=, (size_t)rounds);
	ASSERT_UINT(stacks_to_main * 10, >=, main_sleeps * 9);
	pft_free(&t);
}

/* record --off-cpu -o x.pftrace converts the same way: the program's sleeps are on its
 * threads' timelines. */
TEST_TIMEOUT(export_perfetto_offcpu_record_by_extension, 300)
{
	const char *trace = test_path("off.pftrace");
	struct test_output o;
	struct pft_trace t;
	size_t asleep = 0, back_in = 0;

	test_require_perf();
	test_runf(&o, 120, "%s record -q --off-cpu -o %s -- %s 1 %s", test_bin("sonde"), trace,
		  test_prog("offcpu_split"), test_path("truth"));
	if (o.status != 0)
		FAIL("sonde record --off-cpu exited %d:\n%s%s", o.status, o.out, o.err);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_INT(t.missing_interned, ==, 0);
	ASSERT_INT(t.bundles, >, 0);
	for (size_t i = 0; i < t.n_sched; i++) {
		const struct pft_sched *e = &t.sched[i];
		asleep += !e->waking && e->prev_state == 1 && !strcmp(e->prev_comm, "offcpu_split");
		back_in += !e->waking && !strcmp(e->next_comm, "offcpu_split");
	}
	/* each round naps and waits on the pipe: several rounds in a second */
	ASSERT_UINT(asleep, >=, 6);
	ASSERT_UINT(back_in, >=, asleep - 1);
	pft_free(&t);
}

static int sched_ts_cmp(const void *a, const void *b)
{
	const struct pft_sched *x = *(const struct pft_sched *const *)a;
	const struct pft_sched *y = *(const struct pft_sched *const *)b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x < y ? -1 : x > y; /* file order among equal times */
}

/* The off-CPU time of tid on the trace's timeline: from each switch that takes it off a
 * CPU (alive) to the next that puts it on one. */
static uint64_t trace_offcpu_ns(const struct pft_sched *const *ev, size_t n, uint32_t tid)
{
	uint64_t out = 0, sum = 0;
	bool off = false;

	for (size_t i = 0; i < n; i++) {
		if (ev[i]->next_pid == tid && off) {
			sum += ev[i]->ts - out;
			off = false;
		}
		if (ev[i]->prev_pid == tid && ev[i]->prev_state != 0x10) {
			out = ev[i]->ts;
			off = true;
		}
	}
	return sum;
}

/* The same from the spool, as report --metric wall weighs it: every interval that ended
 * (stacked, unknown) and the short ones. */
static uint64_t spool_offcpu_ns(struct sonde_spool *s, uint32_t tid)
{
	uint64_t sum = 0;
	struct sonde_spool_thread th;

	for (uint64_t i = 0; i < sonde_spool__offcpu_count(s); i++) {
		struct sonde_spool_offcpu iv;
		ASSERT_OK(sonde_spool__get_offcpu(s, i, &iv));
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (th.tid == tid && !(iv.flags & SONDE_OFFCPU_OPEN))
			sum += iv.switch_in_ns - iv.switch_out_ns;
	}
	for (uint64_t i = 0; i < sonde_spool__unknown_count(s); i++) {
		struct sonde_spool_offcpu iv;
		ASSERT_OK(sonde_spool__get_unknown(s, i, &iv));
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		if (th.tid == tid && !(iv.flags & SONDE_OFFCPU_OPEN))
			sum += iv.switch_in_ns - iv.switch_out_ns;
	}
	for (uint64_t i = 0; i < sonde_spool__offcpu_short_count(s); i++) {
		struct sonde_spool_offcpu_short sh;
		ASSERT_OK(sonde_spool__get_offcpu_short(s, i, &sh));
		ASSERT_OK(sonde_spool__get_thread(s, sh.thread, &th));
		if (th.tid == tid)
			sum += sh.total_ns;
	}
	return sum;
}

/* An -a --off-cpu recording exported: the sched_switch events are those the kernel
 * delivered, so each CPU's timeline chains (every switch's prev is the previous one's
 * next: the idle task only where the CPU was idle), and each thread of the workload is
 * off the CPU on the timeline as long as the spool (what report --metric wall weighs)
 * says, within 1 %. The threads compared are those of the workload's own process (its
 * truth file's pid), not other copies of it that the machine ran meanwhile. */
static void switches_chain(const char *backend, const char *rings)
{
	const char *spool = test_path("sys.spool"), *trace = test_path("sys.pftrace");
	struct test_output o;
	struct pft_trace t;
	struct sonde_spool_account acct = {0};

	/* a low rate: a loss breaks the timeline where it falls and takes intervals, so a
	 * recording that lost records is taken again (at most 3 times) */
	struct sonde_spool *s = NULL;
	for (int attempt = 0; attempt < 3 && (!s || acct.lost_records); attempt++) {
		sonde_spool__close(s);
		test_runf(&o, 120,
			  "%s record -a --off-cpu --off-cpu-backend %s -F 99 %s -q -o %s -- %s 2 %s",
			  test_bin("sonde"), backend, rings, spool, test_prog("offcpu_split"),
			  test_path("truth"));
		if (o.status != 0)
			FAIL("sonde record -a --off-cpu exited %d:\n%s%s", o.status, o.out, o.err);
		test_output_free(&o);
		s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
		ASSERT_OK(sonde_spool__get_account(s, &acct));
	}
	acct_check_spool(spool, true);
	test_runf(&o, 120, "%s convert %s -o %s", test_bin("sonde"), spool, trace);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_INT(t.missing_interned, ==, 0);

	const struct pft_sched **ev = ASSERT_NOT_NULL(calloc(t.n_sched + 1, sizeof(*ev)));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t links = 0, broken = 0, idle_in = 0;
	for (long cpu = 0; cpu < cpus; cpu++) {
		size_t n = 0;
		for (size_t i = 0; i < t.n_sched; i++)
			if (!t.sched[i].waking && t.sched[i].cpu == (uint32_t)cpu)
				ev[n++] = &t.sched[i];
		qsort(ev, n, sizeof(*ev), sched_ts_cmp);
		printf("cpu %ld: %zu switches\n", cpu, n);
		ASSERT_UINT(n, >, 10);
		for (size_t i = 1; i < n; i++, links++) {
			idle_in += ev[i]->next_pid == 0;
			broken += ev[i]->prev_pid != ev[i - 1]->next_pid;
		}
	}
	printf("%zu links, %zu broken, %zu to idle; %llu records lost\n", links, broken, idle_in,
	       (unsigned long long)acct.lost_records);
	/* a lost record breaks at most the link it was */
	if (acct.lost_records)
		ASSERT_UINT(broken, <=, acct.lost_records);
	else
		ASSERT_UINT(broken, ==, 0);

	/* per thread of the workload, its off-CPU time on the timeline and in the spool */
	size_t n = 0, compared = 0;
	for (size_t i = 0; i < t.n_sched; i++)
		if (!t.sched[i].waking)
			ev[n++] = &t.sched[i];
	qsort(ev, n, sizeof(*ev), sched_ts_cmp);
	struct sonde_spool_info in;
	sonde_spool__get_info(s, &in);
	if (acct.lost_records) {
		printf("every recording lost records: thread times not compared\n");
		in.threads = 0;
		compared = 1;
	}
	/* its own workload's threads: the machine may run other copies of it, which start
	 * and end inside the recording */
	char *truth = ASSERT_NOT_NULL(test_read_file(test_path("truth"), NULL));
	uint32_t pid = (uint32_t)offcpu_truth_value(truth, "pid");
	free(truth);
	for (uint32_t id = 1; id <= in.threads; id++) {
		struct sonde_spool_thread th;
		ASSERT_OK(sonde_spool__get_thread(s, id, &th));
		if (th.pid != pid)
			continue;
		uint64_t want = spool_offcpu_ns(s, th.tid), got = trace_offcpu_ns(ev, n, th.tid);
		printf("tid %u: spool %.3f ms off the CPU, trace %.3f ms\n", th.tid, want / 1e6,
		       got / 1e6);
		if (want < 100000000)
			continue;
		ASSERT_UINT(got * 100, >=, want * 99);
		ASSERT_UINT(got * 100, <=, want * 101);
		compared++;
	}
	ASSERT_UINT(compared, >, 0);
	free(ev);
	sonde_spool__close(s);
	pft_free(&t);
}

TEST_TIMEOUT(export_perfetto_system_wide_switches_chain, 300)
{
	test_require_perf();
	/* large rings: the perf_event backend takes three records per switch */
	switches_chain("perf", "--ring-pages 4096");
}

/* The same with the BPF backend (the default where it is allowed), at its defaults: the
 * programs pass each CPU's switches on in batches of their own ring. */
TEST_TIMEOUT(export_perfetto_system_wide_switches_chain_bpf, 300)
{
	test_require_perf();
	offcpu_require_bpf();
	switches_chain("bpf", "");
}

/* Time a loss covered (an UNKNOWN record) is in the trace: a "[unknown: lost records]"
 * slice from its switch-out to its switch-in on a track of its thread's, so the timeline
 * shows where the thread's time is unknown; an off-CPU interval has none, and a second
 * loss of the same thread reuses the track. A written spool, so the times are exact. */
TEST(export_perfetto_unknown_time_is_a_slice)
{
	const char *spool = test_path("unk.spool"), *trace = test_path("unk.pftrace");
	const uint64_t ms = 1000000;
	const struct sonde_spool_offcpu lost[] = {
		{101 * ms, 151 * ms, 0, 0, 0, SONDE_OFFCPU_SLEEPING, 0, 0, 0},
		{160 * ms, 170 * ms, 0, 0, 1, SONDE_OFFCPU_BLOCKED, 0, 0, 0},
	};
	const uint64_t s0 = offcpu_write_napper_spool(spool, 78, lost, 2);

	struct test_output o;
	struct pft_trace t;
	test_runf(&o, 60, "%s convert --no-symbolize %s -o %s", test_bin("sonde"), spool, trace);
	if (o.status != 0)
		FAIL("convert exited %d:\n%s", o.status, o.err);
	test_output_free(&o);
	decode_file(trace, &t);
	ASSERT_UINT(t.n_tracks, ==, 1);
	ASSERT_UINT(t.tracks[0].pid, ==, 77);
	ASSERT_UINT(t.tracks[0].tid, ==, 78);
	ASSERT_STR_EQ(t.tracks[0].name, "[unknown: lost records]");
	ASSERT_UINT(t.n_events, ==, 4);
	const uint64_t at[4] = {s0 + 101 * ms, s0 + 151 * ms, s0 + 160 * ms, s0 + 170 * ms};
	for (size_t i = 0; i < 4; i++) {
		const struct pft_event *ev = &t.events[i];
		printf("event %zu: type %d at %.3f ms on %#" PRIx64 " %s\n", i, ev->type,
		       (ev->ts - s0) / 1e6, ev->track_uuid, ev->name);
		ASSERT_UINT(ev->track_uuid, ==, t.tracks[0].uuid);
		ASSERT_INT(ev->type, ==, i % 2 ? 2 : 1);
		ASSERT_UINT(ev->ts, ==, at[i]);
		if (ev->type == 1)
			ASSERT_STR_EQ(ev->name, "[unknown: lost records]");
	}
	/* the nap, a known wait, is a sample and sched events as before, not a slice */
	ASSERT_UINT(pft_samples_of(&t, 77), ==, 1);
	pft_free(&t);
}

/* A written -a --off-cpu spool of three threads on two CPUs (ms after the start):
 *   CPU 0: 1 idle->10, 2 10->20, 3 20->11, 4 11->idle, 5 idle->20, 6 20->10, 7 10->idle
 *   CPU 1: 1 idle->20, 8 20->idle
 * threads 10 and 11 of process 10 ("alpha", "alpha-w"), 20 of process 20 ("beta"); a sample
 * of each thread while it runs, 10's sleep from 2 to 6 woken by 20 at 5.5, and a loss
 * covering 20 from 6 to 9. Returns the start. */
static uint64_t write_filter_spool(const char *path)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1000000};
	const uint64_t s0 = h.start_monotonic_ns, ms = 1000000, us = 1000;
	const struct sonde_spool_frame f = {0, 0x1234};
	const struct sonde_spool_switch cpu0[] = {
		{s0 + 1 * ms, 0, 10, SONDE_OFFCPU_RUNNABLE},
		{s0 + 2 * ms, 10, 20, SONDE_OFFCPU_SLEEPING},
		{s0 + 3 * ms, 20, 11, SONDE_OFFCPU_RUNNABLE},
		{s0 + 4 * ms, 11, 0, SONDE_OFFCPU_SLEEPING},
		{s0 + 5 * ms, 0, 20, SONDE_OFFCPU_RUNNABLE},
		{s0 + 6 * ms, 20, 10, SONDE_OFFCPU_RUNNABLE},
		{s0 + 7 * ms, 10, 0, SONDE_OFFCPU_SLEEPING},
	};
	const struct sonde_spool_switch cpu1[] = {{s0 + 1 * ms, 0, 20, SONDE_OFFCPU_RUNNABLE},
						  {s0 + 8 * ms, 20, 0, SONDE_OFFCPU_SLEEPING}};
	uint32_t a, w, b;
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

	ASSERT_INT(fd, >=, 0);
	struct sonde_spool_writer *wr = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(wr));
	ASSERT_OK(sonde_spool_writer__add_thread(wr, s0, 10, 10, "alpha", &a));
	ASSERT_OK(sonde_spool_writer__add_thread(wr, s0, 10, 11, "alpha-w", &w));
	ASSERT_OK(sonde_spool_writer__add_thread(wr, s0, 20, 20, "beta", &b));
	ASSERT_OK(sonde_spool_writer__add_switches(wr, 0, 0, cpu0, 7));
	ASSERT_OK(sonde_spool_writer__add_switches(wr, 1, 0, cpu1, 2));
	const struct {
		uint64_t at;
		uint32_t thread, cpu;
	} smp[] = {{1500 * us, a, 0},
		   {2500 * us, b, 0},
		   {3500 * us, w, 0},
		   {4000 * us, b, 1},
		   {6500 * us, a, 0}};
	for (size_t i = 0; i < 5; i++)
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(wr, s0 + smp[i].at, smp[i].thread,
							     smp[i].cpu, &f, 1, 0));
	const struct sonde_spool_offcpu nap = {
		s0 + 2 * ms, s0 + 6 * ms, s0 + 5500 * us, a, 0, SONDE_OFFCPU_SLEEPING, 20, 0, 0};
	ASSERT_OK(sonde_spool_writer__add_offcpu(wr, &nap, &f, 1));
	const struct sonde_spool_offcpu lost = {s0 + 6 * ms,	       s0 + 9 * ms, 0, b, 0,
						SONDE_OFFCPU_SLEEPING, 0,	    0, 0};
	ASSERT_OK(sonde_spool_writer__add_unknown(wr, &lost, &f, 1));
	ASSERT_OK(sonde_spool_writer__finish(wr));
	sonde_spool_writer__free(wr);
	close(fd);
	return s0;
}

/* Converts spool to trace with the filter options given, and decodes it. */
static void convert_filtered(const char *spool, const char *opts, struct pft_trace *t)
{
	const char *trace = test_path("filtered.pftrace");
	struct test_output o;

	test_runf(&o, 60, "%s convert --no-symbolize %s %s -o %s", test_bin("sonde"), opts, spool,
		  trace);
	if (o.status != 0)
		FAIL("convert %s exited %d:\n%s", opts, o.status, o.err);
	test_output_free(&o);
	decode_file(trace, t);
}

/* Each CPU's switches, as written, chain: a switch's prev is the previous one's next.
 * Returns how many switches cpu has; its (prev, next, ms after s0) into out. */
static size_t switches_of(const struct pft_trace *t, uint32_t cpu, uint64_t s0, uint32_t out[][3],
			  size_t cap)
{
	size_t n = 0;
	uint32_t last = UINT32_MAX;

	for (size_t i = 0; i < t->n_sched; i++) {
		const struct pft_sched *ev = &t->sched[i];
		if (ev->waking || ev->cpu != cpu)
			continue;
		printf("cpu %u at %.1f ms: %u -> %u\n", cpu, (ev->ts - s0) / 1e6, ev->prev_pid,
		       ev->next_pid);
		if (last != UINT32_MAX && ev->prev_pid != last)
			FAIL("cpu %u: a switch from %u after one to %u", cpu, ev->prev_pid, last);
		last = ev->next_pid;
		ASSERT_UINT(n, <, cap);
		out[n][0] = ev->prev_pid;
		out[n][1] = ev->next_pid;
		out[n][2] = (uint32_t)((ev->ts - s0) / 1000000);
		n++;
	}
	return n;
}

/* convert --pid/--tid/--comm/--cpu/--time -o x.pftrace keeps the chosen threads' tracks
 * (ProcessTree), samples and sched events on the chosen CPUs within the window; a switch
 * whose prev or next is left out shows the idle task there, so each CPU still chains, and
 * one of two tasks left out is not written; loss slices are clipped to the window. */
TEST(export_perfetto_filters_keep_threads_cpus_and_window)
{
	const char *spool = test_path("filt.spool");
	const uint64_t s0 = write_filter_spool(spool), ms = 1000000;
	uint32_t sw[16][3];
	struct pft_trace t;

	/* everything: 5 samples and the nap's, 7 + 2 switches, a waking, a loss slice */
	convert_filtered(spool, "", &t);
	ASSERT_UINT(t.n_samples, ==, 6);
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 7);
	ASSERT_UINT(switches_of(&t, 1, s0, sw, 16), ==, 2);
	ASSERT_UINT(t.n_events, ==, 2);
	pft_free(&t);

	/* process 10: its two threads, beta replaced by the idle task */
	convert_filtered(spool, "--pid 10", &t);
	ASSERT_UINT(t.n_samples, ==, 4); /* 1.5, 3.5, 6.5 and the nap at 2 */
	for (size_t i = 0; i < t.n_samples; i++)
		ASSERT_UINT(t.samples[i].pid, ==, 10);
	ASSERT_CONTAINS(t.thread_names, "10=alpha\n");
	ASSERT_CONTAINS(t.thread_names, "11=alpha-w\n");
	ASSERT(strstr(t.thread_names, "20=") == NULL);
	ASSERT(strstr(t.process_names, "20=") == NULL);
	const uint32_t want10[][3] = {{0, 10, 1}, {10, 0, 2}, {0, 11, 3},
				      {11, 0, 4}, {0, 10, 6}, {10, 0, 7}};
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 6);
	for (size_t i = 0; i < 6; i++)
		for (size_t k = 0; k < 3; k++)
			ASSERT_UINT(sw[i][k], ==, want10[i][k]);
	ASSERT_UINT(switches_of(&t, 1, s0, sw, 16), ==, 0);
	for (size_t i = 0; i < t.n_sched; i++) {
		const struct pft_sched *ev = &t.sched[i];
		ASSERT_UINT(ev->pid, !=, 20);
		ASSERT_UINT(ev->prev_pid, !=, 20);
		ASSERT_UINT(ev->next_pid, !=, 20);
		if (ev->waking) /* 10 woken by 20: the waker is not shown */
			ASSERT_UINT(ev->woken_pid, ==, 10);
	}
	ASSERT_UINT(t.n_tracks, ==, 0); /* the loss was beta's */
	ASSERT_UINT(t.n_events, ==, 0);
	pft_free(&t);

	/* --comm and --tid choose the same way */
	convert_filtered(spool, "--comm beta", &t);
	ASSERT_UINT(t.n_samples, ==, 2);
	ASSERT_UINT(pft_samples_of(&t, 20), ==, 2);
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 4); /* 2, 3, 5, 6 */
	ASSERT_UINT(switches_of(&t, 1, s0, sw, 16), ==, 2);
	ASSERT_UINT(t.n_events, ==, 2);
	pft_free(&t);
	convert_filtered(spool, "--tid 11", &t);
	ASSERT_UINT(t.n_samples, ==, 1);
	ASSERT_UINT(t.samples[0].tid, ==, 11);
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 2);
	ASSERT_UINT(sw[0][1], ==, 11);
	ASSERT_UINT(sw[1][0], ==, 11);
	pft_free(&t);

	/* CPU 1: its switches and samples only, every thread */
	convert_filtered(spool, "--cpu 1", &t);
	ASSERT_UINT(t.n_samples, ==, 1);
	ASSERT_UINT(t.samples[0].cpu, ==, 1);
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 0);
	ASSERT_UINT(switches_of(&t, 1, s0, sw, 16), ==, 2);
	ASSERT_UINT(t.n_events, ==, 0); /* the loss was on CPU 0 */
	pft_free(&t);

	/* 2.5 ms to 6.5 ms: the samples and switches within it (inclusive), the nap's waking
	 * and switch back in, the loss from 6 to 6.5 */
	convert_filtered(spool, "--time 0.0025,0.0065", &t);
	ASSERT_UINT(t.n_samples, ==, 4);
	for (size_t i = 0; i < t.n_samples; i++) {
		ASSERT_UINT(t.samples[i].ts, >=, s0 + 2500000);
		ASSERT_UINT(t.samples[i].ts, <=, s0 + 6500000);
	}
	ASSERT_UINT(switches_of(&t, 0, s0, sw, 16), ==, 4);
	ASSERT_UINT(sw[0][2], ==, 3);
	ASSERT_UINT(sw[3][2], ==, 6);
	ASSERT_UINT(switches_of(&t, 1, s0, sw, 16), ==, 0);
	size_t wakings = 0;
	for (size_t i = 0; i < t.n_sched; i++)
		wakings += t.sched[i].waking;
	ASSERT_UINT(wakings, ==, 1);
	ASSERT_UINT(t.n_events, ==, 2);
	ASSERT_UINT(t.events[0].ts, ==, s0 + 6 * ms);
	ASSERT_UINT(t.events[1].ts, ==, s0 + 6500000);
	pft_free(&t);
}
