/* The accounting tables (src/export/acct.c) of spools written by hand: the window both
 * tables are given over, each CPU's time before it was first seen, and tasks whose pid
 * and tid the kernel gave again. Times in ms after the recording's start. */
#include <stdint.h>
#include <stdio.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "base/buf.h"
#include "export/acct.h"
#include "spool_fixture.h"

enum { MS = 1000000 };
static const uint64_t S0 = 1000000000;

static struct sonde_spool_writer *writer(struct buf *b)
{
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	return w;
}

static struct sonde_spool *finish(struct sonde_spool_writer *w, struct buf *b)
{
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	return ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
}

/* The recorder takes its start before it sets up its events: a loaded -a recording's
 * first switch came 0.8 s later, and that time, counted busy on every CPU whose first
 * switch took a task off, gave the CPU table 3.899 s where the rest of the summary had
 * 3.073. The window starts where the machine was first seen (a sample of spinner 90 on
 * CPU 0 at 510 ms), and a CPU is unknown until it is seen: CPU 0 runs the spinner from
 * its sample to its first switch (busy 510..520), CPU 1 is idle at its first switch (530)
 * but since when is not known (unknown 510..530). */
TEST(acct_cpu_time_starts_where_each_cpu_is_first_seen)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t spinner, worker;
	const struct sonde_spool_frame f = {0, 0x1234};

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 510 * MS, 90, 90, "spinner", &spinner));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 510 * MS, spinner, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 530 * MS, 91, 91, "worker", &worker));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 520 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 600 * MS, 0, 90, SONDE_OFFCPU_RUNNABLE},
		{S0 + 1000 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
	};
	const struct sonde_spool_switch cpu1[] = {
		{S0 + 530 * MS, 0, 91, SONDE_OFFCPU_RUNNABLE},
		{S0 + 900 * MS, 91, 0, SONDE_OFFCPU_SLEEPING},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 3));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 2));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.window_start_ns, ==, S0 + 510 * MS);
	ASSERT_UINT(a.window_end_ns, ==, S0 + 1000 * MS);
	ASSERT_UINT(a.n_cpus, ==, 2);
	/* CPU 0: busy 510..520 and 600..1000, idle 520..600 */
	ASSERT_UINT(a.cpus[0].busy_ns, ==, 410 * MS);
	ASSERT_UINT(a.cpus[0].idle_ns, ==, 80 * MS);
	ASSERT_UINT(a.cpus[0].unknown_ns, ==, 0);
	/* CPU 1: unknown 510..530, busy 530..900, idle 900..1000 */
	ASSERT_UINT(a.cpus[1].unknown_ns, ==, 20 * MS);
	ASSERT_UINT(a.cpus[1].busy_ns, ==, 370 * MS);
	ASSERT_UINT(a.cpus[1].idle_ns, ==, 100 * MS);
	/* the tasks' lives are within the same window */
	for (size_t i = 0; i < a.n_tasks; i++) {
		ASSERT_UINT(a.tasks[i].start_ns, >=, a.window_start_ns);
		ASSERT_UINT(a.tasks[i].end_ns, <=, a.window_end_ns);
	}
	sonde__acct_free(&a);

	/* over a wider window, CPU 1 is unknown from its start to its first switch */
	struct sonde_spool_cpu_time t;
	ASSERT_OK(sonde_spool__get_cpu_time(s, 1, S0 + 500 * MS, S0 + 1000 * MS, &t));
	ASSERT_UINT(t.unknown_ns, ==, 30 * MS);
	ASSERT_UINT(t.busy_ns + t.idle_ns + t.unknown_ns, ==, 500 * MS);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A task whose exit record went unseen (a loss) ends at its last switch-out, the one the
 * kernel reports an exited task's state in: a thread defined with its pid and tid after
 * that is another task. Q (70) runs 10..20 and leaves dead; a new Q is defined at 50 and
 * runs 50..80. Taken for one, the second's stays were nobody's. */
TEST(acct_an_exit_seen_in_the_switches_ends_the_task)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t first, second;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 70, 70, "true", &first));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 50 * MS, 70, 70, "true", &second));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 10 * MS, 0, 70, SONDE_OFFCPU_RUNNABLE},
		{S0 + 20 * MS, 70, 0, SONDE_SWITCH_EXITED},
		{S0 + 50 * MS, 0, 70, SONDE_OFFCPU_RUNNABLE},
		{S0 + 80 * MS, 70, 0, SONDE_SWITCH_EXITED},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 4));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.n_tasks, ==, 2);
	ASSERT(a.thread_task[first] != a.thread_task[second]);
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[first] - 1];
	ASSERT(k->exited);
	ASSERT_UINT(k->start_ns, ==, S0 + 10 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 20 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 10 * MS);
	k = &a.tasks[a.thread_task[second] - 1];
	ASSERT(k->exited);
	ASSERT_UINT(k->start_ns, ==, S0 + 50 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 80 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 30 * MS);
	for (size_t i = 0; i < a.n_tasks; i++) {
		ASSERT_UINT(a.tasks[i].unseen_ns, ==, 0);
		ASSERT_UINT(a.tasks[i].over_ns, ==, 0);
	}
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* An EXIT after the task's last switch-out was written by a recovery sweep, at the latest
 * the task can have ended (its exit record lost: the kernel writes one before the task's
 * last switch-out): the switch-out ends it. Q (70) runs 10..20 and leaves dead; its EXIT,
 * at the end of the loss that took the record, says 60. */
TEST(acct_a_last_switch_out_before_the_exit_a_sweep_wrote_ends_the_task)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t q;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 70, 70, "true", &q));
	ASSERT_OK(sonde_spool_writer__add_exit(w, S0 + 60 * MS, q));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 10 * MS, 0, 70, SONDE_OFFCPU_RUNNABLE},
		{S0 + 20 * MS, 70, 0, SONDE_SWITCH_EXITED},
		{S0 + 90 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 3));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.n_tasks, ==, 1);
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[q] - 1];
	ASSERT(k->exited);
	ASSERT_UINT(k->end_ns, ==, S0 + 20 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 10 * MS);
	ASSERT_UINT(k->unseen_ns, ==, 0);
	ASSERT_UINT(k->over_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* The BPF backend writes the waits its ring had no room for as one unknown span per
 * thread, from the first one's switch-out to the last one's switch-in; the switches (a
 * ring of their own) kept the stays in between, which are on-CPU time, not unknown. T
 * (80), on CPU 0 from 10, leaves at 20; its waits 20..30, 40..50 and 70..90 were lost
 * (unknown 20..90), its stays 30..40 on CPU 0 and 50..70 on CPU 1 kept; it runs from 90
 * to 100, when it sleeps to the end (120). Its life, 10..120: on 10 + 10 + 20 + 10,
 * unknown 40 (its 70 less 30 of stays), sleeping 20, nothing counted twice. */
TEST(acct_stays_within_a_lost_span_are_on_cpu_not_unknown)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t t;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 80, 80, "waiter", &t));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 10 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 20 * MS, 80, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 30 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 40 * MS, 80, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 90 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 100 * MS, 80, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 120 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
	};
	const struct sonde_spool_switch cpu1[] = {
		{S0 + 10 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
		{S0 + 50 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 70 * MS, 80, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 120 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 7));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 4));
	struct sonde_spool_offcpu lost = {.switch_out_ns = S0 + 20 * MS,
					  .switch_in_ns = S0 + 90 * MS,
					  .thread = t,
					  .cpu = 0,
					  .state = SONDE_OFFCPU_OTHER};
	ASSERT_OK(sonde_spool_writer__add_unknown(w, &lost, NULL, 0));
	struct sonde_spool_offcpu nap = {.switch_out_ns = S0 + 100 * MS,
					 .switch_in_ns = S0 + 120 * MS,
					 .thread = t,
					 .cpu = 0,
					 .state = SONDE_OFFCPU_SLEEPING,
					 .flags = SONDE_OFFCPU_OPEN};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &nap, NULL, 0));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[t] - 1];
	ASSERT_UINT(k->start_ns, ==, S0 + 10 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 120 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 50 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_UNKNOWN], ==, 40 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 20 * MS);
	ASSERT_UINT(k->over_ns, ==, 0);
	ASSERT_UINT(k->unseen_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A task whose switch-out the kernel did not trace: X (80) runs on CPU 0 from 10 and
 * leaves it untraced at 20; Y (90) comes in untraced and leaves at 50, where the recorder
 * infers X -> Y (who left, when, is not known) and the stay of X on CPU 0 reads 10..50.
 * X meanwhile ran on CPU 1 from 30 to 40, slept to 60 (a wait) and ran to 100. Its stays
 * overlap (CPU 0's to 50, CPU 1's from 30) and the one on CPU 0 its wait (from 40): X is on
 * one CPU at a time and off all of them in a wait, so its on-CPU time is 10..40 and 60..100,
 * 70 ms, and its parts add up to its life, 90 ms (before: 110, 20 ms counted twice). A
 * second task Z (81) is the same without the wait: its stay ended by an inferred switch
 * is cut where its next stay starts. */
TEST(acct_a_stay_ended_by_an_inferred_switch_counts_no_time_twice)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t x, z;
	const uint32_t inferred = SONDE_OFFCPU_OTHER | SONDE_SWITCH_INFERRED;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 80, 80, "x", &x));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 81, 81, "z", &z));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 10 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 50 * MS, 80, 90, inferred},
		{S0 + 50 * MS, 90, 81, SONDE_OFFCPU_SLEEPING},
		{S0 + 70 * MS, 81, 0, inferred},
		{S0 + 100 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
	};
	const struct sonde_spool_switch cpu1[] = {
		{S0 + 10 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
		{S0 + 30 * MS, 0, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 40 * MS, 80, 81, SONDE_OFFCPU_SLEEPING},
		{S0 + 60 * MS, 81, 80, SONDE_OFFCPU_RUNNABLE},
		{S0 + 100 * MS, 80, 0, SONDE_OFFCPU_SLEEPING},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 5));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 5));
	struct sonde_spool_offcpu nap = {.switch_out_ns = S0 + 40 * MS,
					 .switch_in_ns = S0 + 60 * MS,
					 .thread = x,
					 .cpu = 1,
					 .state = SONDE_OFFCPU_SLEEPING};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &nap, NULL, 0));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[x] - 1];
	ASSERT_UINT(k->start_ns, ==, S0 + 10 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 100 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 70 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 20 * MS);
	ASSERT_UINT(k->over_ns, ==, 0);
	ASSERT_UINT(k->unseen_ns, ==, 0);
	/* Z: CPU 0 50..70 (its end inferred), CPU 1 40..60: on 40..70 */
	k = &a.tasks[a.thread_task[z] - 1];
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 30 * MS);
	ASSERT_UINT(k->over_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A task's stays within a span, found by the first to end after its start: T (81) runs
 * 10..20, 30..40, ..., 110..120 on CPU 0. Each span's stays, at either end of the list and
 * past it (a search that doubled past the last stay once found none within 105..130). */
TEST(acct_stays_within_finds_each_stay_by_its_end)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	struct sonde_spool_switch cpu0[13];
	uint32_t t;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 81, 81, "runner", &t));
	for (int i = 0; i < 6; i++) {
		cpu0[2 * i] = (struct sonde_spool_switch){S0 + (10 + 20 * i) * MS, 0, 81,
							  SONDE_OFFCPU_RUNNABLE};
		cpu0[2 * i + 1] = (struct sonde_spool_switch){S0 + (20 + 20 * i) * MS, 81, 0,
							      SONDE_OFFCPU_SLEEPING};
	}
	cpu0[12] = (struct sonde_spool_switch){S0 + 200 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 13));
	struct sonde_spool *s = finish(w, &b);
	static const struct {
		uint64_t from, to, on;
	} spans[] = {{0, 200, 60},   {105, 130, 10}, {119, 200, 1}, {125, 200, 0}, {0, 5, 0},
		     {15, 35, 10},  {40, 50, 0},    {55, 95, 20},  {20, 30, 0},  {0, 11, 1}};
	for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++)
		ASSERT_UINT(sonde__acct_stays_within(s, 81, S0 + spans[i].from * MS,
						     S0 + spans[i].to * MS),
			    ==, spans[i].on * MS);
	ASSERT_UINT(sonde__acct_stays_within(s, 82, S0, S0 + 200 * MS), ==, 0);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* Stays that overlap (one ended by an inferred switch outlasts the next ones) count their
 * common time once, and are found whatever their order by end: R (81) on CPU 0 1..2,
 * 3..4, 5..6 and 10..50 (ended by an inferred switch), on CPU 1 30..40 and 60..100. Its
 * stays within 0..100 are 83 ms (93 counted 30..40 twice, which made a lost span's
 * unknown part wrap below zero), within 45..55 the end of the inferred one, 5 ms (a
 * search by end started past it, after 30..40). */
TEST(acct_stays_within_counts_overlapping_stays_once)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	const uint32_t inferred = SONDE_OFFCPU_OTHER | SONDE_SWITCH_INFERRED;
	uint32_t t;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 1 * MS, 81, 81, "r", &t));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 1 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 2 * MS, 81, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 3 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 4 * MS, 81, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 5 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 6 * MS, 81, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 10 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 50 * MS, 81, 90, inferred},
		{S0 + 55 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 100 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
	};
	const struct sonde_spool_switch cpu1[] = {
		{S0 + 1 * MS, 0, 0, SONDE_OFFCPU_RUNNABLE},
		{S0 + 30 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 40 * MS, 81, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 60 * MS, 0, 81, SONDE_OFFCPU_RUNNABLE},
		{S0 + 100 * MS, 81, 0, SONDE_OFFCPU_SLEEPING},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 10));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 5));
	struct sonde_spool *s = finish(w, &b);

	ASSERT_UINT(sonde__acct_stays_within(s, 81, S0, S0 + 100 * MS), ==, 83 * MS);
	ASSERT_UINT(sonde__acct_stays_within(s, 81, S0 + 45 * MS, S0 + 55 * MS), ==, 5 * MS);
	ASSERT_UINT(sonde__acct_stays_within(s, 81, S0 + 35 * MS, S0 + 45 * MS), ==, 10 * MS);
	ASSERT_UINT(sonde__acct_stays_within(s, 81, S0 + 50 * MS, S0 + 60 * MS), ==, 0);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A task is runnable from its creation to its first switch-in (the scheduler puts a new
 * task on a run queue at once), and its life starts at its creation: the recorder defines
 * a task it saw forked at its fork. Threads of P (90): C (91), created at 100, waits
 * while P runs, comes in at 130 and leaves dead at 150: 30 runnable, 20 on CPU, nothing
 * unseen (the wait was 30 unseen, or, with C defined at its first record, in no life).
 * D (92), created at 200, is first seen by a sample at 210 on CPU 1, where no switch
 * brought it in (lost): its first stays went unseen, and 200..210 is not called
 * runnable. */
TEST(acct_a_new_task_is_runnable_from_its_creation_to_its_first_switch_in)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t p, c, d;
	const struct sonde_spool_frame f = {0, 0x1234};

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 90, 90, "sh", &p));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 10 * MS, p, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 100 * MS, 90, 91, "sh", &c));
	ASSERT_OK(sonde_spool_writer__add_exit(w, S0 + 149 * MS, c));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 200 * MS, 90, 92, "sh", &d));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 210 * MS, d, 1, &f, 1, 0));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 130 * MS, 90, 91, SONDE_OFFCPU_RUNNABLE},
		{S0 + 150 * MS, 91, 90, SONDE_SWITCH_EXITED},
		{S0 + 300 * MS, 90, 0, SONDE_OFFCPU_SLEEPING},
	};
	const struct sonde_spool_switch cpu1[] = {
		{S0 + 10 * MS, 93, 0, SONDE_OFFCPU_SLEEPING},
		{S0 + 220 * MS, 92, 0, SONDE_OFFCPU_SLEEPING}, /* after lost records */
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 3));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, cpu1, 1));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, SONDE_SWITCHES_GAP, cpu1 + 1, 1));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[c] - 1];
	ASSERT(k->exact_on && k->exited);
	ASSERT_UINT(k->start_ns, ==, S0 + 100 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 150 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_R], ==, 30 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 20 * MS);
	ASSERT_UINT(k->unseen_ns, ==, 0);
	ASSERT_UINT(k->over_ns, ==, 0);
	k = &a.tasks[a.thread_task[d] - 1];
	ASSERT_UINT(k->start_ns, ==, S0 + 200 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_R], ==, 0);
	ASSERT_UINT(k->unseen_ns, >=, 10 * MS);
	/* the process's row: C's wait is runnable there too */
	ASSERT_UINT(a.n_rows, ==, 1);
	ASSERT_UINT(a.rows[0].ns[SONDE_ACCT_R], ==, 30 * MS);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}

/* A recording of one thread without the CPUs' switches (the BPF backend launched): T lives
 * 0..100 ms, is sampled twice (a timer the host delayed skipped the rest of its 50 ms on
 * the CPU) and sleeps 30..80 ms. Where the spool says every switch-out was tracked and
 * nothing dropped, T's life that no wait covers was on the CPU: 50 ms, spread over its two
 * samples (25 ms each); otherwise only the samples' 2 ms are on-CPU and 48 ms unknown. */
static struct sonde_spool *one_sleeper(struct buf *b, uint32_t coverage, uint64_t dropped,
				       uint32_t *t)
{
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));
	const struct sonde_spool_frame f = {0, 0x1234};

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 90, 90, "sleeper", t));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 10 * MS, *t, 0, &f, 1, 0));
	ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 20 * MS, *t, 0, &f, 1, 0));
	const struct sonde_spool_offcpu iv = {.switch_out_ns = S0 + 30 * MS,
					      .switch_in_ns = S0 + 80 * MS,
					      .thread = *t,
					      .cpu = 0,
					      .state = SONDE_OFFCPU_SLEEPING};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, &f, 1));
	ASSERT_OK(sonde_spool_writer__add_exit(w, S0 + 100 * MS, *t));
	if (coverage)
		ASSERT_OK(sonde_spool_writer__add_offcpu_coverage(w, coverage));
	const struct sonde_spool_account acct = {.kernel_time = 1, .offcpu_dropped = dropped};
	ASSERT_OK(sonde_spool_writer__add_account(w, &acct));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	return ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
}

TEST(acct_every_switch_out_tracked_makes_the_rest_on_cpu)
{
	for (int c = 0; c < 3; c++) {
		struct buf b = BUF_INIT;
		uint32_t t;
		/* 0: tracked; 1: no coverage record; 2: tracked, but a wait was dropped */
		struct sonde_spool *s = one_sleeper(
			&b, c == 1 ? 0 : SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT, c == 2, &t);
		bool complete = c == 0;
		ASSERT_UINT(sonde_spool__offcpu_coverage(s), ==,
			    c == 1 ? 0 : SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT);
		ASSERT(sonde__acct_weights_known(s) == complete);

		struct sonde_acct a;
		ASSERT_OK(sonde__acct_build(s, NULL, &a));
		const struct sonde_acct_task *k = &a.tasks[a.thread_task[t] - 1];
		ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 50 * MS);
		ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, complete ? 50 * MS : 2 * MS);
		ASSERT_UINT(k->unseen_ns, ==, complete ? 0 : 48 * MS);
		ASSERT(k->exact_on == complete);
		ASSERT_UINT(a.rows[0].ns[SONDE_ACCT_ON], ==, k->ns[SONDE_ACCT_ON]);
		/* a row is its task's life: what neither the samples nor the waits cover is
		 * unknown (the on-CPU time a late timer skipped, or a wait lost) */
		ASSERT_UINT(a.rows[0].ns[SONDE_ACCT_UNKNOWN], ==, complete ? 0 : 48 * MS);
		ASSERT_UINT(a.rows[0].total, ==, 100 * MS);
		sonde__acct_free(&a);

		struct sonde_acct_weights wt;
		ASSERT_OK(sonde__acct_weights(s, &wt));
		ASSERT_UINT(wt.n_samples, ==, 2);
		for (int i = 0; i < 2; i++)
			ASSERT_UINT(wt.sample_ns[i], ==, complete ? 25 * MS : MS);
		sonde__acct_weights_free(&wt);
		sonde_spool__close(s);
		sonde__buf_free(&b);
	}
}

/* A recording without --off-cpu holds no waits at all: a row there is its task's samples
 * (4 ms of a 100 ms life), not 96 ms unknown, and the tables say the recording has no
 * off-CPU data. The same samples in a recording made with --off-cpu whose thread never
 * waited long enough to be written leave the rest of its life unknown: there, time no
 * record covers is time the recording did not see. */
TEST(acct_a_recording_without_off_cpu_is_its_samples)
{
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	const struct sonde_spool_frame f = {0, 0x1234};

	for (int declared = 0; declared < 2; declared++) {
		struct buf b = BUF_INIT;
		struct sonde_spool_writer *w =
			ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
		uint32_t t;
		if (declared)
			ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
		ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 90, 90, "spinner", &t));
		for (int i = 0; i < 4; i++)
			ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + (10 + i) * MS, t, 0,
								     &f, 1, 0));
		ASSERT_OK(sonde_spool_writer__add_exit(w, S0 + 100 * MS, t));
		struct sonde_spool *s = finish(w, &b);

		ASSERT(sonde__acct_offcpu_recorded(s) == declared);
		struct sonde_acct a;
		ASSERT_OK(sonde__acct_build(s, NULL, &a));
		ASSERT(a.offcpu == declared);
		ASSERT_UINT(a.n_rows, ==, 1);
		ASSERT_UINT(a.rows[0].ns[SONDE_ACCT_ON], ==, 4 * MS);
		ASSERT_UINT(a.rows[0].ns[SONDE_ACCT_UNKNOWN], ==, declared ? 96 * MS : 0);
		ASSERT_UINT(a.rows[0].total, ==, declared ? 100 * MS : 4 * MS);
		/* the task's own figures say what is unseen either way */
		ASSERT_UINT(a.tasks[0].unseen_ns, ==, 96 * MS);
		sonde__acct_free(&a);
		sonde_spool__close(s);
		sonde__buf_free(&b);
	}
}

/* A row per process, named after its main thread's last named definition, else another of
 * its threads' last, never a bare id but for a process that has no other name; with many
 * processes, whose rows and names are found by pid. */
TEST(acct_rows_are_named_after_each_process)
{
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	const struct sonde_spool_frame f = {0, 0x1234};
	enum { MANY = 300 };
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	uint32_t t[MANY + 6], n = 0;
	char comm[16];

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 10, 10, "a", &t[n++]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 10, 11, "w1", &t[n++]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 20, 21, "x", &t[n++]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 20, 22, "y", &t[n++]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 20, 20, "20", &t[n++]));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 30, 30, "30", &t[n++]));
	for (uint32_t i = 0; i < MANY; i++) {
		snprintf(comm, sizeof(comm), "p%u", i);
		ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 1000 + i, 1000 + i, comm, &t[n]));
		ASSERT_OK(sonde_spool_writer__add_thread(w, S0, 1000 + i, 5000 + i, "w", &t[n]));
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + MS, t[n], 0, &f, 1, 0));
	}
	uint32_t renamed;
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 2 * MS, 10, 10, "a2", &renamed));
	for (uint32_t i = 0; i < 6; i++)
		ASSERT_OK(sonde_spool_writer__add_sample_cpu(w, S0 + 3 * MS, t[i], 0, &f, 1, 0));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.n_rows, ==, MANY + 3);
	for (size_t i = 0; i < a.n_rows; i++) {
		const struct sonde_acct_row *r = &a.rows[i];
		uint64_t samples = 1;
		snprintf(comm, sizeof(comm), "p%u", r->pid - 1000);
		if (r->pid == 10)
			snprintf(comm, sizeof(comm), "a2"), samples = 2;
		else if (r->pid == 20)
			snprintf(comm, sizeof(comm), "y"), samples = 3;
		else if (r->pid == 30)
			snprintf(comm, sizeof(comm), "30");
		ASSERT_STR_EQ(r->comm, comm);
		ASSERT_UINT(r->ns[SONDE_ACCT_ON], ==, samples * MS);
	}
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}
