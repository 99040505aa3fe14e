/* The recorder (src/record/offcpu.c, track.c) fed synthetic perf records on a recorder
 * state built by hand, its spool read back (and accounted, src/export/acct.c): a thread's
 * life when records are lost in the middle of it and its exit with them; the name of a
 * thread whose fork was never seen, and of the threads of a process nothing named. The
 * pids are above any pid_max, so /proc knows nothing of them; the one test of adopting a
 * process from /proc uses real ones. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <linux/perf_event.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "base/buf.h"
#include "export/acct.h"
#include "record/recorder.h"
#include "perf_fixture.h"
#include "proc/proc.h"

enum { P = 5000101, Q = 5000102, SWITCH_ID = 7, START = 1000, WINDOW_END = 20000 };

static int sink_write(void *ctx, const void *p, size_t n)
{
	struct buf *b = ctx;

	sonde__buf_append(b, p, n);
	return buf_error(b);
}

static uint64_t fixed_now(void *ctx)
{
	(void)ctx;
	return WINDOW_END;
}

/* sched_switch's raw record: common_type, then prev_pid, prev_state and next_pid at the
 * offsets the recorder is told below. */
struct raw_switch {
	uint16_t type;
	uint8_t pad[6];
	int32_t prev_pid;
	int32_t pad2;
	int64_t prev_state;
	int32_t next_pid;
};

static struct ftrace_field field(uint16_t offset, uint16_t size)
{
	return (struct ftrace_field){.offset = offset, .size = size, .is_signed = true,
				     .kind = FTRACE_FIELD_INT};
}

/* A recorder of one process, P (its thread P forked at START), off-CPU on, writing into b. */
static struct sonde_recorder *recorder(struct buf *b)
{
	struct sonde_recorder *r = ASSERT_NOT_NULL(calloc(1, sizeof(*r)));
	static const struct sonde_spool_header h = {1, START, 1000};

	r->spool = ASSERT_NOT_NULL(sonde_spool_writer__new(sink_write, b, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(r->spool));
	r->offcpu.on = true;
	r->offcpu.switch_id = SWITCH_ID;
	r->offcpu.waking_id = SWITCH_ID + 1;
	r->offcpu.prev_pid = field(offsetof(struct raw_switch, prev_pid), 4);
	r->offcpu.prev_state = field(offsetof(struct raw_switch, prev_state), 8);
	r->offcpu.next_pid = field(offsetof(struct raw_switch, next_pid), 4);
	r->last_time = START;
	sonde__rec_set_clock(r, fixed_now, NULL);
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, P, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, P, 1, P, 1, START));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, P, P, "worker", START, &(bool){0}));
	return r;
}

static void recorder_free(struct sonde_recorder *r, struct buf *b)
{
	sonde__rec_offcpu_release(r);
	sonde_spool_writer__free(r->spool);
	for (struct rec_thread *th = NULL; (th = sonde__tasks_next_thread(&r->tasks, th));)
		sonde__rec_offcpu_free(th->off);
	sonde__tasks_free(&r->tasks);
	sonde__buf_free(b);
	free(r);
}

/* The spool r wrote into b, finished (the recorder without an error), open. */
static struct sonde_spool *finished_spool(struct sonde_recorder *r, struct buf *b)
{
	ASSERT_OK(sonde_spool_writer__finish(r->spool));
	ASSERT_INT(r->first_error, ==, 0);
	return ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
}

/* A sched_switch of `prev` (of pid `pid`, 0 for the idle task) to `next` at time. */
static void switch_rec(struct sonde_recorder *r, uint32_t pid, int32_t prev, int64_t state,
		       int32_t next, uint64_t time)
{
	struct raw_switch raw = {.type = SWITCH_ID, .prev_pid = prev, .prev_state = state,
				 .next_pid = next};
	struct perf_rec rec = {.type = PERF_RECORD_SAMPLE, .has_id = true, .time = time,
			       .pid = pid, .tid = (uint32_t)prev};

	rec.sample.raw = (const uint8_t *)&raw;
	rec.sample.raw_size = sizeof(raw);
	ASSERT_INT(sonde__rec_offcpu_sample(r, &rec), ==, 1);
}

/* sched_waking's raw record: common_type, then the pid woken. */
struct raw_waking {
	uint16_t type;
	uint8_t pad[6];
	int32_t pid;
};

/* A sched_waking of `wakee` by `waker` (0: the idle task) at time. */
static void waking_rec(struct sonde_recorder *r, int32_t waker, int32_t wakee, uint64_t time)
{
	struct raw_waking raw = {.type = SWITCH_ID + 1, .pid = wakee};
	struct perf_rec rec = {.type = PERF_RECORD_SAMPLE, .has_id = true, .time = time,
			       .pid = (uint32_t)waker, .tid = (uint32_t)waker};

	r->offcpu.waking_pid = field(offsetof(struct raw_waking, pid), 4);
	rec.sample.raw = (const uint8_t *)&raw;
	rec.sample.raw_size = sizeof(raw);
	ASSERT_INT(sonde__rec_offcpu_sample(r, &rec), ==, 1);
}

/* A record in tid's context at time that is no switch (an on-CPU sample). */
static void sample_rec(struct sonde_recorder *r, uint32_t tid, uint64_t time)
{
	struct perf_rec rec = {.type = PERF_RECORD_SAMPLE, .has_id = true, .time = time,
			       .pid = tid, .tid = tid};

	ASSERT_OK(sonde__rec_offcpu_sample(r, &rec));
}

static const struct sonde_acct_task *task_of(const struct sonde_acct *a, uint32_t tid)
{
	for (size_t i = 0; i < a->n_tasks; i++)
		if (a->tasks[i].tid == tid)
			return &a->tasks[i];
	FAIL("no task %u", tid);
	return NULL;
}

/* What a sweep does with pid when it finds it dead: its threads, listed then, end. */
static int process_gone(struct sonde_recorder *r, pid_t pid)
{
	struct rec_tids_by_pid by_pid = {0};
	int err = sonde__tasks_tids_by_pid(&r->tasks, &by_pid);

	if (!err)
		err = sonde__rec_process_gone(r, sonde__tasks_process(&r->tasks, pid, false), &by_pid);
	sonde__tids_by_pid_free(&by_pid);
	return err;
}

/* P is sampled at 2000, sleeps 3000..5000, runs, and sleeps again from 6000; records are
 * lost up to 7000 (the kernel's LOST record). */
static void nap_run_nap_lost(struct sonde_recorder *r)
{
	struct perf_rec lost = {.type = PERF_RECORD_LOST, .time = 7000, .lost = {.lost = 40}};

	sample_rec(r, P, 2000);
	switch_rec(r, P, P, 1, 0, 3000); /* S */
	switch_rec(r, 0, 0, 0, P, 5000); /* the idle task leaves: P runs */
	switch_rec(r, P, P, 1, 0, 6000);
	ASSERT_OK(sonde__rec_process_record(r, &lost));
}

/* The sweep finds P gone, its exit unseen, and the machine goes on to WINDOW_END (another
 * task's sample there): the spool r wrote, accounted into *a. */
static struct sonde_spool *gone_then_accounted(struct sonde_recorder *r, struct buf *b,
					       struct sonde_acct *a)
{
	uint32_t q;

	ASSERT_OK(process_gone(r, P));
	ASSERT(!sonde__tasks_thread(&r->tasks, P, false));
	ASSERT_OK(sonde_spool_writer__add_thread(r->spool, WINDOW_END, Q, Q, "other", &q));
	ASSERT_OK(sonde_spool_writer__add_sample(r->spool, WINDOW_END, q, NULL, 0, 0));
	ASSERT_OK(sonde__rec_offcpu_finish(r));
	struct sonde_spool *s = finished_spool(r, b);
	ASSERT_OK(sonde__acct_build(s, NULL, a));
	ASSERT_UINT(a->window_end_ns, ==, WINDOW_END);
	return s;
}

/* P sleeps 3000..5000, runs, sleeps again from 6000; records are lost up to 7000 (its
 * switch-in with them); a sample at 8000 sees it running; it exits at about 9000, that
 * record lost too, in a loss not reported by the sweep that finds it gone. Its life ends
 * at 8000, its last sighting: no loss reported since bounds its exit, and ending it at
 * the sweep, or (with no EXIT at all) at the end of the recording, counted it far longer
 * than it lived (lives 0.4 to 1.6 s longer than their wall time in a loaded
 * bench/accounting.py run). The wait the loss cut is unknown, never dropped. */
TEST(record_lost_exit_ends_the_life_at_the_last_sighting)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct sonde_acct a;

	nap_run_nap_lost(r);
	sample_rec(r, P, 8000);
	ASSERT_UINT(sonde__tasks_thread(&r->tasks, P, false)->seen_ns, ==, 8000);
	struct sonde_spool *s = gone_then_accounted(r, &b, &a);
	const struct sonde_acct_task *t = task_of(&a, P);
	ASSERT_STR_EQ(t->comm, "worker");
	ASSERT(t->exited);
	ASSERT_UINT(t->start_ns, ==, START); /* its fork: defined at its creation */
	ASSERT_UINT(t->end_ns, ==, 8000);
	/* within what it lived (START to about 9000) */
	ASSERT_UINT(t->end_ns - t->start_ns, <=, 9000 - START);
	ASSERT_UINT(t->ns[SONDE_ACCT_S], ==, 2000);
	ASSERT_UINT(t->ns[SONDE_ACCT_UNKNOWN], ==, 2000); /* 6000..8000: cut by the loss */
	ASSERT_UINT(t->over_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);

	recorder_free(r, &b);
}

/* P sleeps 3000..5000, runs, and sleeps again from 6000. Records are lost up to 7000 (the
 * LOST record's time), then, after a stretch where P sleeps and has none, up to 9000, its
 * exit at about 8500 with them; the sweep after finds it gone. It exited somewhere after
 * its last sighting (its switch-out at 6000) and in a loss (outside one, its exit record
 * would be there), the latest ending at 9000: its life ends there, the time from 6000
 * unknown. Ended at its last sighting, its last 2.5 units went in no figure, unknown or
 * not (a loaded bench/accounting.py run stopped for 1.5 s as a writer exited: 0.47 s of
 * its 5 s life); ended with the first loss, at 7000, 1.5 of them. */
TEST(record_lost_exit_ends_the_life_with_the_latest_loss_after_its_last_sighting)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct perf_rec lost = {.type = PERF_RECORD_LOST, .time = 9000, .lost = {.lost = 40}};
	struct sonde_acct a;

	nap_run_nap_lost(r);
	ASSERT_OK(sonde__rec_process_record(r, &lost));
	ASSERT_UINT(sonde__rec_loss_end(r), ==, 9000);
	struct sonde_spool *s = gone_then_accounted(r, &b, &a);
	const struct sonde_acct_task *t = task_of(&a, P);
	ASSERT(t->exited);
	ASSERT_UINT(t->start_ns, ==, START);
	ASSERT_UINT(t->end_ns, ==, 9000);
	ASSERT_UINT(t->ns[SONDE_ACCT_S], ==, 2000);
	ASSERT_UINT(t->ns[SONDE_ACCT_UNKNOWN], ==, 3000); /* 6000..9000: the loss's */
	ASSERT_UINT(t->over_ns, ==, 0);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A sweep that finds a process gone ends only the threads it saw: one never seen has no
 * sighting to end at and is left as it was; and the exit record that comes after all (it
 * was still in a ring) ends nothing twice. */
TEST(record_lost_exit_leaves_unseen_threads)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);

	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, P, P, P + 1, P, 1500));
	sample_rec(r, P, 2000);
	ASSERT_OK(process_gone(r, P));
	ASSERT(!sonde__tasks_thread(&r->tasks, P, false));
	ASSERT_NOT_NULL(sonde__tasks_thread(&r->tasks, P + 1, false));
	struct perf_rec exit_rec = {.type = PERF_RECORD_EXIT, .time = 2500,
				    .task = {.pid = P, .ppid = 1, .tid = P, .ptid = 1}};
	ASSERT_OK(sonde__rec_process_record(r, &exit_rec));
	ASSERT_OK(sonde_spool_writer__finish(r->spool));
	ASSERT_INT(r->first_error, ==, 0);
	recorder_free(r, &b);
}

/* An on-CPU sample of thread tid of pid in the kernel at time (one [kernel] frame: no
 * callchain). */
static void thread_sample(struct sonde_recorder *r, uint32_t pid, uint32_t tid, uint64_t time)
{
	struct perf_rec rec = {.type = PERF_RECORD_SAMPLE, .has_id = true, .time = time,
			       .pid = pid, .tid = tid};

	rec.sample.ip = REC_KERNEL_START + 0x1000;
	ASSERT_OK(sonde__rec_process_record(r, &rec));
}

/* The same, of a main thread. */
static void kernel_sample(struct sonde_recorder *r, uint32_t tid, uint64_t time)
{
	thread_sample(r, tid, tid, time);
}

/* A process whose fork the recording never saw (before the /proc scan, or lost) is first
 * seen at its exec's COMM; its first sample, processed once it had left /proc (on a loaded
 * machine the first batch is processed seconds late), was written under its bare id, and
 * so was everything after its exit (`report --folded-roots thread` showed "ID-ID/ID" on
 * its exit path while other tables named it). Its one definition in the spool is named by
 * the COMM. */
TEST(record_exec_of_an_unseen_fork_is_written_under_its_name)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct perf_rec comm = {.type = PERF_RECORD_COMM, .time = 2000,
				.comm = {.pid = Q, .tid = Q, .comm = "sleep", .exec = true}};
	struct perf_rec exit_rec = {.type = PERF_RECORD_EXIT, .time = 6000,
				    .task = {.pid = Q, .ppid = 1, .tid = Q, .ptid = 1}};

	ASSERT_OK(sonde__rec_process_record(r, &comm));
	kernel_sample(r, Q, 3000);
	ASSERT_OK(sonde__rec_process_record(r, &exit_rec));
	/* sampled on its way out, after its exit record */
	kernel_sample(r, Q, 6500);
	ASSERT_UINT(r->sum.samples_written, ==, 2);
	struct sonde_spool *s = finished_spool(r, &b);
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	uint32_t defs = 0;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (t.tid != Q)
			continue;
		defs++;
		ASSERT_UINT(t.pid, ==, Q);
		ASSERT_STR_EQ(t.comm, "sleep");
	}
	/* one definition, the EXIT's: the sample after the exit is the same spool thread's */
	ASSERT_UINT(defs, ==, 1);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* The definitions of tid in the spool: their count; how many have an EXIT into *exits,
 * the last one's EXIT time (UINT64_MAX: none) into *exit_ns. */
static uint32_t definitions(const struct sonde_spool *s, uint32_t tid, uint64_t *exit_ns,
			    uint32_t *exits)
{
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	uint32_t defs = 0;

	*exit_ns = UINT64_MAX;
	*exits = 0;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (t.tid != tid)
			continue;
		defs++;
		*exit_ns = UINT64_MAX;
		if (sonde_spool__get_thread_exit(s, i, exit_ns) == 0)
			(*exits)++;
	}
	return defs;
}

/* Records of a task processed after its exit record belong to it: per-CPU events sample
 * it on its way out (do_exit), and a wait it was preempted in on the way out is written
 * at its end. Each used to define the task again, with no EXIT (in a system-wide
 * recording of 600 runs of /bin/true, 591 were in the spool and 320 had an EXIT), so
 * that readers counted it from there to the end of the recording. Q is sampled, waits
 * 2500..3000 (S), exits at 4000, is preempted at 4050, runs again at 4150, is sampled at
 * 4180 and leaves the CPU dead at 4200: one definition, one EXIT at 4000, its life to
 * 4150 (the end of the wait after its exit), each wait counted once. Q + 1 exits before
 * any record of it and is sampled after: defined once, with the EXIT it had; its tid
 * forked again later is a new task. */
TEST(record_records_after_an_exit_are_the_exited_task_s)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	const uint32_t Q1 = Q + 1;
	struct perf_rec exit_q = {.type = PERF_RECORD_EXIT,
				  .time = 4000,
				  .task = {.pid = Q, .ppid = P, .tid = Q, .ptid = P}};
	struct perf_rec exit_q1 = {.type = PERF_RECORD_EXIT,
				   .time = 5000,
				   .task = {.pid = Q1, .ppid = P, .tid = Q1, .ptid = P}};
	bool stale;

	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 1500));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q, Q, "true", 1600, &stale));
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q1, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q1, P, Q1, P, 1700));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q1, Q1, "true", 1800, &stale));

	kernel_sample(r, Q, 2000);
	switch_rec(r, Q, Q, 1, 0, 2500); /* S */
	switch_rec(r, 0, 0, 0, Q, 3000);
	ASSERT_OK(sonde__rec_process_record(r, &exit_q));
	switch_rec(r, Q, Q, 0, 0, 4050); /* preempted on its way out */
	switch_rec(r, 0, 0, 0, Q, 4150); /* the wait is written now, after the exit */
	kernel_sample(r, Q, 4180);
	switch_rec(r, Q, Q, 0x10, 0, 4200);		   /* EXIT_DEAD: its last switch-out */
	ASSERT_OK(sonde__rec_process_record(r, &exit_q1)); /* no record of it before */
	kernel_sample(r, Q1, 5100);
	kernel_sample(r, Q1, 5200);
	/* Q1's pid and tid start a new task */
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q1, P, Q1, P, 6000));
	kernel_sample(r, Q1, 6100);
	ASSERT_UINT(r->sum.samples_written, ==, 5);
	struct sonde_spool *s = finished_spool(r, &b);
	uint64_t exit_ns;
	uint32_t exits;
	ASSERT_UINT(definitions(s, Q, &exit_ns, &exits), ==, 1);
	ASSERT_UINT(exits, ==, 1);
	ASSERT_UINT(exit_ns, ==, 4000);
	/* the first task of Q1: defined at its first record, with its EXIT; the second: no
	 * exit yet */
	ASSERT_UINT(definitions(s, Q1, &exit_ns, &exits), ==, 2);
	ASSERT_UINT(exits, ==, 1);
	ASSERT_UINT(exit_ns, ==, UINT64_MAX);
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (t.tid == Q1 && t.time_ns < 6000) {
			ASSERT_STR_EQ(t.comm, "true");
			ASSERT_OK(sonde_spool__get_thread_exit(s, i, &exit_ns));
			ASSERT_UINT(exit_ns, ==, 5000);
		}
	}
	/* every sample of Q under its one thread */
	struct sonde_spool_sample smp;
	uint32_t q_thread = 0, q_samples = 0;
	for (uint64_t i = 0; sonde_spool__get_sample(s, i, &smp) == 0; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, smp.thread, &t));
		if (t.tid != Q)
			continue;
		ASSERT(!q_thread || q_thread == smp.thread);
		q_thread = smp.thread;
		q_samples++;
	}
	ASSERT_UINT(q_samples, ==, 2);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k = task_of(&a, Q);
	ASSERT_STR_EQ(k->comm, "true");
	ASSERT(k->exited);
	ASSERT_UINT(k->start_ns, ==, 1500); /* its fork */
	ASSERT_UINT(k->end_ns, ==, 4150); /* the wait after its exit ends inside its life */
	ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 500);
	ASSERT_UINT(k->ns[SONDE_ACCT_R], ==, 100);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A process nothing named (its fork came between the /proc scan and the enable, and it
 * left /proc before its first record was processed) is defined by its bare id, its main
 * thread's label alone: a thread it creates (its FORK seen) and one first seen at a
 * sample are defined by their own ids, not as "Q". Taken for a name, the main thread's
 * id made the process look named by a thread of it while its row was labelled by its id
 * (`record -a --off-cpu`'s acct_check_spool failed on it in a loaded run: "process N
 * labelled by its id though the spool names a thread of it"). */
TEST(record_an_unnamed_process_lends_its_id_to_no_thread)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct perf_rec fork_rec = {.type = PERF_RECORD_FORK, .time = 2500,
				    .task = {.pid = Q, .ppid = Q, .tid = Q + 1, .ptid = Q}};

	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	thread_sample(r, Q, Q, 2000);
	ASSERT_OK(sonde__rec_process_record(r, &fork_rec));
	thread_sample(r, Q, Q + 1, 3000);
	thread_sample(r, Q, Q + 2, 3500); /* its fork unseen too */
	ASSERT_UINT(r->sum.samples_written, ==, 3);
	struct sonde_spool *s = finished_spool(r, &b);
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	char dec[16];
	sonde_spool__get_info(s, &in);
	ASSERT_UINT(in.threads, ==, 3);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		snprintf(dec, sizeof(dec), "%u", t.tid);
		printf("thread %u: %u/%u \"%s\"\n", i, t.pid, t.tid, t.comm);
		ASSERT_UINT(t.pid, ==, Q);
		ASSERT_STR_EQ(t.comm, dec);
	}
	/* the report's row: labelled by its id, as nothing names it */
	struct sonde_acct a;
	snprintf(dec, sizeof(dec), "%u", Q);
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.n_rows, ==, 1);
	ASSERT_STR_EQ(a.rows[0].comm, dec);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A pid and tid the kernel gives to a new task after the first one's exit (pid_max comes
 * round within seconds on a machine forking thousands of tasks a second) are two tasks,
 * each its own life: Q is sampled at 2000 and exits at 3000; a new process Q is forked at
 * 6900, sampled at 7000, sleeps 7500..8000 and exits at 8500 (P is sampled at 9000, the
 * end of the window). Taken for one task, the 4000 between them was counted as life no
 * record covers (29-45 % of the lives of loaded CI runs, with no record lost). */
TEST(record_reused_ids_are_two_tasks)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct perf_rec exit_q = {.type = PERF_RECORD_EXIT,
				  .time = 3000,
				  .task = {.pid = Q, .ppid = P, .tid = Q, .ptid = P}};
	struct perf_rec exit_again = exit_q;
	bool stale;

	exit_again.time = 8500;
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 1500));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q, Q, "true", 1600, &stale));
	kernel_sample(r, Q, 2000);
	ASSERT_OK(sonde__rec_process_record(r, &exit_q));
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 6900));
	kernel_sample(r, Q, 7000);
	switch_rec(r, Q, Q, 1, 0, 7500); /* S */
	switch_rec(r, 0, 0, 0, Q, 8000);
	ASSERT_OK(sonde__rec_process_record(r, &exit_again));
	kernel_sample(r, P, 9000); /* the machine goes on */
	ASSERT_OK(sonde__rec_offcpu_finish(r));
	struct sonde_spool *s = finished_spool(r, &b);
	uint64_t exit_ns;
	uint32_t exits;
	ASSERT_UINT(definitions(s, Q, &exit_ns, &exits), ==, 2);
	ASSERT_UINT(exits, ==, 2);
	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k[2];
	size_t n = 0;
	for (size_t i = 0; i < a.n_tasks; i++)
		if (a.tasks[i].tid == Q && n < 2)
			k[n++] = &a.tasks[i];
	ASSERT_UINT(n, ==, 2);
	/* by start: the first lives from its fork, 1500..3000, its sample's period and 500
	 * before it that no record covers (this recording kept no CPU switches) */
	ASSERT(k[0]->exited && k[1]->exited);
	ASSERT_UINT(k[0]->start_ns, ==, 1500);
	ASSERT_UINT(k[0]->end_ns, ==, 3000);
	ASSERT_UINT(k[0]->ns[SONDE_ACCT_ON], ==, 1000);
	/* the second 6900..8500: its sample's period and its sleep, and 100 unseen */
	ASSERT_UINT(k[1]->start_ns, ==, 6900);
	ASSERT_UINT(k[1]->end_ns, ==, 8500);
	ASSERT_UINT(k[1]->ns[SONDE_ACCT_ON], ==, 1000);
	ASSERT_UINT(k[1]->ns[SONDE_ACCT_S], ==, 500);
	ASSERT_UINT(k[0]->unseen_ns, ==, 500);
	ASSERT_UINT(k[1]->unseen_ns, ==, 100);
	for (int i = 0; i < 2; i++)
		ASSERT_UINT(k[i]->over_ns, ==, 0);
	/* each spool thread maps to its own task: Q's two samples, one in each life */
	struct sonde_spool_sample smp;
	for (uint64_t i = 0; i < 2; i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT(&a.tasks[a.thread_task[smp.thread] - 1] == k[i]);
	}
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A thread forked in the recording is defined at its fork, where its life starts: the run
 * queue it waits in before its first switch-in is part of its life (runnable), and was in
 * none when the definition came with its first record. P creates thread P + 1 at 2500,
 * which is renamed at 2700, sampled at 3000, renamed again at 3200 and sampled at 3300:
 * its first definition is at 2500 under its name then, the second at its record, 3300 (a
 * rename may be another thread's doing while this one sleeps). */
TEST(record_a_forked_thread_is_defined_at_its_fork)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	const uint32_t T = P + 1;
	struct perf_rec fork_rec = {.type = PERF_RECORD_FORK, .time = 2500,
				    .task = {.pid = P, .ppid = P, .tid = T, .ptid = P}};
	struct perf_rec comm = {.type = PERF_RECORD_COMM, .time = 2700,
				.comm = {.pid = P, .tid = T, .comm = "pool-1"}};

	ASSERT_OK(sonde__rec_process_record(r, &fork_rec));
	ASSERT_OK(sonde__rec_process_record(r, &comm));
	thread_sample(r, P, T, 3000);
	comm.time = 3200;
	comm.comm.comm = "pool-2";
	ASSERT_OK(sonde__rec_process_record(r, &comm));
	thread_sample(r, P, T, 3300);
	ASSERT_UINT(r->sum.samples_written, ==, 2);
	struct sonde_spool *s = finished_spool(r, &b);
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	uint64_t at[2];
	const char *names[2];
	uint32_t defs = 0;
	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (t.tid != T)
			continue;
		ASSERT_UINT(defs, <, 2);
		at[defs] = t.time_ns;
		names[defs++] = t.comm;
	}
	ASSERT_UINT(defs, ==, 2);
	ASSERT_UINT(at[0], ==, 2500);
	ASSERT_STR_EQ(names[0], "pool-1");
	ASSERT_UINT(at[1], ==, 3300);
	ASSERT_STR_EQ(names[1], "pool-2");
	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	const struct sonde_acct_task *k = task_of(&a, T);
	ASSERT_UINT(k->start_ns, ==, 2500);
	ASSERT_STR_EQ(k->comm, "pool-2");
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* Processes a FORK or EXIT record of tid (of pid; its parent ppid/ptid) at time. */
static void task_record(struct sonde_recorder *r, uint32_t type, uint64_t time, uint32_t pid,
			uint32_t ppid, uint32_t tid, uint32_t ptid)
{
	struct perf_rec rec = {.type = type,
			       .time = time,
			       .task = {.pid = pid, .ppid = ppid, .tid = tid, .ptid = ptid}};

	ASSERT_OK(sonde__rec_process_record(r, &rec));
}

/* P forks process Q at 2000, where an earlier process Q is still in the table (its exit
 * lost). The old one is reset; the new one's thread keeps what its fork gave it: P's name
 * and its birth. (The reset came after the thread was created, and took both: its first
 * sample read the name from /proc, which by then named the program the child had exec'd,
 * a shell's child sampled in the shell's code.) */
TEST(record_a_fork_over_a_stale_pid_keeps_its_name)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	bool stale;

	r->life.follow_children = true;
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 1100));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q, Q, "old", 1200, &stale));
	kernel_sample(r, Q, 1500);
	task_record(r, PERF_RECORD_FORK, 2000, Q, P, Q, P);
	kernel_sample(r, Q, 2500);
	ASSERT_UINT(r->sum.samples_written, ==, 2);
	struct sonde_spool *s = finished_spool(r, &b);
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;
	ASSERT_OK(sonde_spool__get_sample(s, 1, &smp));
	ASSERT_OK(sonde_spool__get_thread(s, smp.thread, &t));
	ASSERT_UINT(t.tid, ==, Q);
	ASSERT_STR_EQ(t.comm, "worker");
	ASSERT_UINT(t.time_ns, ==, 2000);
	ASSERT_OK(sonde_spool__get_sample(s, 0, &smp));
	ASSERT_OK(sonde_spool__get_thread(s, smp.thread, &t));
	ASSERT_STR_EQ(t.comm, "old");
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* The spool threads of tid, in order: their count, ids into ids[] (at most 4). */
static uint32_t threads_of(const struct sonde_spool *s, uint32_t tid, uint32_t *ids)
{
	struct sonde_spool_info in;
	struct sonde_spool_thread t;
	uint32_t n = 0;

	sonde_spool__get_info(s, &in);
	for (uint32_t i = 1; i <= in.threads; i++) {
		ASSERT_OK(sonde_spool__get_thread(s, i, &t));
		if (t.tid == tid && n < 4)
			ids[n++] = i;
	}
	return n;
}

/* A task's last switch-out (in an exit state) is the last of it: a later record of its tid
 * is another task's, one the kernel gave the pid to with its fork record lost. Q is
 * sampled at 2000; records are lost at 2500 (its exit record with them, and the fork of
 * the next Q); Q leaves the CPU dead at 3000, and the next Q is sampled at 4000 and
 * sleeps 4500..5000. Q + 1 exits at 2800 (that record seen), leaves the CPU dead at 3000,
 * and its tid's next owner, forked unseen, is sampled at 4100. Each was written under the
 * first task's spool thread (for Q + 1, as records of an exited task on its way out),
 * one life over both processes. */
TEST(record_a_task_s_last_switch_out_ends_its_spool_thread)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	const uint32_t Q1 = Q + 1;
	struct perf_rec lost = {.type = PERF_RECORD_LOST, .time = 2500, .lost = {.lost = 40}};
	struct perf_rec exit_q1 = {.type = PERF_RECORD_EXIT,
				   .time = 2800,
				   .task = {.pid = Q1, .ppid = P, .tid = Q1, .ptid = P}};
	bool stale;

	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 1500));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q, Q, "true", 1600, &stale));
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q1, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q1, P, Q1, P, 1500));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q1, Q1, "true", 1600, &stale));
	kernel_sample(r, Q, 2000);
	kernel_sample(r, Q1, 2100);
	ASSERT_OK(sonde__rec_process_record(r, &lost));
	ASSERT_OK(sonde__rec_process_record(r, &exit_q1));
	switch_rec(r, Q1, Q1, 0x10, 0, 2900); /* EXIT_DEAD */
	switch_rec(r, Q, Q, 0x20, 0, 3000);   /* EXIT_ZOMBIE */
	kernel_sample(r, Q, 4000);
	kernel_sample(r, Q1, 4100);
	switch_rec(r, Q, Q, 1, 0, 4500); /* S */
	switch_rec(r, 0, 0, 0, Q, 5000);
	ASSERT_OK(sonde__rec_offcpu_finish(r));
	struct sonde_spool *s = finished_spool(r, &b);
	uint32_t q[4], q1[4];
	uint64_t exit_ns;
	ASSERT_UINT(threads_of(s, Q, q), ==, 2);
	ASSERT_OK(sonde_spool__get_thread_exit(s, q[0], &exit_ns));
	ASSERT_UINT(exit_ns, ==, 3000); /* its last switch-out, the exit record lost */
	ASSERT_INT(sonde_spool__get_thread_exit(s, q[1], &exit_ns), ==, -ENOENT);
	ASSERT_UINT(threads_of(s, Q1, q1), ==, 2);
	ASSERT_OK(sonde_spool__get_thread_exit(s, q1[0], &exit_ns));
	ASSERT_UINT(exit_ns, ==, 2800);
	/* the samples: the first tasks' before the exits, the next ones' after */
	const uint32_t want[] = {q[0], q1[0], q[1], q1[1]};
	struct sonde_spool_sample smp;
	for (uint64_t i = 0; i < 4; i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.thread, ==, want[i]);
	}
	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT(a.thread_task[q[0]] != a.thread_task[q[1]]);
	ASSERT(a.thread_task[q1[0]] != a.thread_task[q1[1]]);
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[q[1]] - 1];
	ASSERT_UINT(k->start_ns, ==, 4000);
	ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 500);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A process a recovery sweep finds gone (its exit record lost) is another process's pid
 * from then on: the one /proc holds under it now, forked unseen (pid_max comes round
 * within seconds on a busy machine). Q is sampled at 2000 and the sweep ends it there;
 * the next Q is sampled at 4000 and 4100 and sleeps 4500..5000. Its records were written
 * under the first Q's spool thread (taken for an exited task's records on its way out),
 * the rest of the recording long. */
TEST(record_a_pid_a_sweep_found_gone_is_another_task_s_after)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	bool stale;

	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, Q, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&r->tasks, Q, P, Q, P, 1500));
	ASSERT_NOT_NULL(sonde__tasks_rename(&r->tasks, Q, Q, "true", 1600, &stale));
	kernel_sample(r, Q, 2000);
	ASSERT_OK(process_gone(r, Q));
	kernel_sample(r, Q, 4000);
	kernel_sample(r, Q, 4100);
	switch_rec(r, Q, Q, 1, 0, 4500); /* S */
	switch_rec(r, 0, 0, 0, Q, 5000);
	ASSERT_OK(sonde__rec_offcpu_finish(r));
	struct sonde_spool *s = finished_spool(r, &b);
	uint32_t q[4];
	uint64_t exit_ns;
	ASSERT_UINT(threads_of(s, Q, q), ==, 2);
	ASSERT_OK(sonde_spool__get_thread_exit(s, q[0], &exit_ns));
	ASSERT_UINT(exit_ns, ==, 2000);
	struct sonde_spool_sample smp;
	for (uint64_t i = 0; i < 3; i++) {
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.thread, ==, q[i ? 1 : 0]);
	}
	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT(a.thread_task[q[0]] != a.thread_task[q[1]]);
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[q[0]] - 1];
	ASSERT_UINT(k->end_ns, ==, 2000);
	k = &a.tasks[a.thread_task[q[1]] - 1];
	ASSERT_UINT(k->start_ns, ==, 4000);
	ASSERT_UINT(k->ns[SONDE_ACCT_S], ==, 500);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* Records are lost up to 2500; P, sampled at 2000, leaves the CPU at 3000 and is not seen
 * again: a sweep finds it gone, its exit unseen. No loss came after its switch-out, so its
 * life ends at that last sighting, and the wait it began there is no part of it: nothing
 * of its life is missing, and no wait is counted dropped (one was, and the recording said
 * it had dropped what no figure lacked). */
TEST(record_a_wait_begun_where_a_swept_life_ends_is_not_dropped)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct perf_rec lost = {.type = PERF_RECORD_LOST, .time = 2500, .lost = {.lost = 4}};
	struct sonde_acct a;

	kernel_sample(r, P, 2000);
	ASSERT_OK(sonde__rec_process_record(r, &lost));
	switch_rec(r, P, P, 1, 0, 3000); /* S */
	struct sonde_spool *s = gone_then_accounted(r, &b, &a);
	ASSERT_UINT(r->sum.offcpu_dropped, ==, 0);
	const struct sonde_acct_task *t = task_of(&a, P);
	ASSERT(t->exited);
	ASSERT_UINT(t->end_ns, ==, 3000);
	sonde__acct_free(&a);
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* -a -p P: the recording's liveness check (`record -p` asks it between polls) finds P gone
 * from /proc while its last records are still to be processed: those were stamped before
 * the check, and are P's. They were taken for another process's (counted as not recorded):
 * a `record -a -p` lost the end of its process, up to a poll's worth of samples. A record
 * stamped after the check is not P's. */
TEST(record_a_pid_filter_keeps_what_came_before_the_liveness_check)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	pid_t pids[] = {P};

	r->system_wide = true;
	r->filt.filter_pids = pids;
	r->filt.n_filter_pids = 1;
	ASSERT_NOT_NULL(sonde__tasks_process(&r->tasks, P, false))->selected = true;
	kernel_sample(r, P, 2000);
	/* P, above any pid_max, is not in /proc: gone, as of the clock's now (WINDOW_END) */
	ASSERT_INT(sonde_recorder__active_process_count(r), ==, 0);
	kernel_sample(r, P, 3000);
	kernel_sample(r, P, 4000);
	ASSERT_UINT(r->sum.samples_written, ==, 3);
	ASSERT_UINT(r->sum.unfollowed_samples, ==, 0);
	kernel_sample(r, P, WINDOW_END + 1000);
	ASSERT_UINT(r->sum.samples_written, ==, 3);
	ASSERT_UINT(r->sum.unfollowed_samples, ==, 1);
	r->filt.filter_pids = NULL;
	r->filt.n_filter_pids = 0;
	recorder_free(r, &b);
}

/* Rings read one after another: a record the kernel writes into ring 0 after its read can
 * be older than one ring 1 holds. A sweep or a generation switch processes every record
 * stamped before it, in order: ring 1 holds P's sample at 9 ms, and P's sample at 8.5 ms
 * reaches ring 0 once ring 0 has been read (on the clock's first look after that). All
 * three samples are processed by the time the drain returns, each at its own time (one
 * processed after a newer one is written at the newer one's: the spool never goes back). */
struct late_ring {
	struct sring ring[2];
	bool written;
};

static uint64_t late_clock(void *ctx)
{
	struct late_ring *l = ctx;
	struct rb rec;

	if (!l->written && l->ring[0].meta.data_tail == l->ring[0].meta.data_head) {
		stream_sample(&rec, P, P, 8500000, 16, 0);
		sring_put(&l->ring[0], &rec);
		l->written = true;
	}
	return 10000000;
}

TEST(record_a_drain_orders_what_a_ring_read_first_receives_late)
{
	const struct perf_event_cfg kcfg = {.kernel = true};
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct late_ring l = {0};
	struct rb rec;

	sonde__perf_event_layout_cfg(&r->layout, &kcfg);
	r->stream = ASSERT_NOT_NULL(sonde__perf_stream_new(&r->layout, NULL, NULL));
	r->ev.n_cpus = 2;
	r->ev.rings = ASSERT_NOT_NULL(calloc(2, sizeof(*r->ev.rings)));
	for (int k = 0; k < 2; k++) {
		sring_init(&l.ring[k], 1 << 16, 0);
		r->ev.rings[k].ring = l.ring[k].ring;
		r->ev.rings[k].src = sonde__perf_stream_add_source(r->stream);
		r->ev.rings[k].mapped = true;
	}
	stream_sample(&rec, P, P, 1000000, 16, 0);
	sring_put(&l.ring[0], &rec);
	stream_sample(&rec, P, P, 9000000, 16, 0);
	sring_put(&l.ring[1], &rec);
	r->enabled = true;
	sonde__rec_set_clock(r, late_clock, &l);

	ASSERT_OK(sonde__rec_drain(r));
	ASSERT(l.written);
	ASSERT_UINT(r->sum.samples_written, ==, 3);
	struct sonde_spool *s = finished_spool(r, &b);
	static const uint64_t want[] = {1000000, 8500000, 9000000};
	for (uint64_t i = 0; i < 3; i++) {
		struct sonde_spool_sample smp;
		ASSERT_OK(sonde_spool__get_sample(s, i, &smp));
		ASSERT_UINT(smp.time_ns, ==, want[i]);
	}
	sonde_spool__close(s);
	sonde__perf_stream_free(r->stream);
	free(r->ev.rings);
	for (int k = 0; k < 2; k++)
		free(l.ring[k].data);
	recorder_free(r, &b);
}

/* -a: every switch of CPU 0 kept. A wait whose switch-in the kernel did not trace (seen: a
 * guest kernel that traces no switch-out of some kernel threads, the switch to the thread
 * among them) ends where the CPU's switches put the switch-in the recorder infers for it,
 * so that a trace replaying the switches shows the wait the spool has. Its wakeup ends it
 * only where the CPU was idle from before it, as an idle CPU runs the thread it wakes at
 * once: P woken at 3000 by the idle task is in at 3000. Woken at 5000 while A ran, which
 * then gave the CPU to K (whose switch-outs go untraced), P was first seen at 7000: in at
 * 7000 by the inferred switch K -> P, and its wait 4000..7000, not 4000..5000 (a loaded
 * CI run had a 14 ms run of other tasks put in P's run by the spool, in its wait by the
 * trace). */
TEST(record_a_wait_whose_switch_in_went_untraced_ends_at_the_switch_inferred)
{
	enum { A = 5000103, K = 5000104 };
	struct buf b = {0};
	struct sonde_recorder *r = recorder(&b);
	static int cpus[] = {0};

	r->system_wide = true;
	r->layout.sample_type |= PERF_SAMPLE_CPU;
	r->ev.cpus = cpus;
	r->ev.n_cpus = 1;
	switch_rec(r, P, P, 1, 0, 2000); /* S, to the idle task */
	waking_rec(r, 0, P, 3000);	 /* the idle task wakes it: 0 -> P untraced */
	sample_rec(r, P, 3500);
	switch_rec(r, P, P, 1, A, 4000); /* S */
	waking_rec(r, A, P, 5000);
	switch_rec(r, A, A, 0, K, 6000); /* then K -> P untraced */
	sample_rec(r, P, 7000);
	switch_rec(r, P, P, 1, A, 8000); /* S */
	ASSERT_OK(sonde__rec_offcpu_finish(r));
	ASSERT_UINT(r->sum.offcpu_switches_inferred, ==, 2);
	struct sonde_spool *s = finished_spool(r, &b);
	const uint64_t out[] = {2000, 4000}, in[] = {3000, 7000}, woke[] = {3000, 5000};
	const uint64_t left[] = {4000, 8000};
	/* P's, and A's preemption, and P's wait open at the end */
	ASSERT_UINT(sonde_spool__offcpu_count(s), ==, 4);
	for (uint64_t i = 0; i < 2; i++) {
		struct sonde_spool_offcpu iv;
		struct sonde_spool_thread th;
		struct sonde_spool_run run;
		ASSERT_OK(sonde_spool__get_offcpu(s, i, &iv));
		ASSERT_OK(sonde_spool__get_thread(s, iv.thread, &th));
		ASSERT_UINT(th.tid, ==, P);
		ASSERT_UINT(iv.switch_out_ns, ==, out[i]);
		ASSERT_UINT(iv.switch_in_ns, ==, in[i]);
		ASSERT_UINT(iv.wakeup_ns, ==, woke[i]);
		/* P's runs by the switches: from before the first switch, then each wait's */
		ASSERT_OK(sonde_spool__get_tid_run(s, P, i + 1, &run));
		ASSERT_UINT(run.start_ns, ==, iv.switch_in_ns);
		ASSERT_UINT(run.end_ns, ==, left[i]);
	}
	sonde_spool__close(s);
	recorder_free(r, &b);
}

/* A process lives until its last thread ends, not its main one. P starts thread T (its
 * fork at 2500); P's main thread exits first, at 3000 (pthread_exit), and T at 5000: P
 * ends there, its modules kept until then for T's stacks (it used to end at 3000, its
 * modules retired under T's last waits). Q, one thread, ends with it; R's thread exits
 * before its main one, which ends R; S's second thread exec's, and S ends with the one
 * thread that leaves. */
TEST(record_a_process_lives_until_its_last_thread)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	const uint32_t T = P + 1, R = P + 10;

	sonde__rec_life_follow_all(r); /* Q and R are P's descendants */
	task_record(r, PERF_RECORD_FORK, 2500, P, P, T, P);
	ASSERT_UINT(sonde__tasks_process(&r->tasks, P, false)->threads, ==, 1);
	task_record(r, PERF_RECORD_EXIT, 3000, P, 1, P, 1);
	struct rec_process *p = sonde__tasks_process(&r->tasks, P, false);
	ASSERT(!p->exited && p->main_exited);
	task_record(r, PERF_RECORD_EXIT, 5000, P, 1, T, P);
	p = sonde__tasks_process(&r->tasks, P, false);
	ASSERT(p->exited);
	ASSERT_UINT(p->threads, ==, 0);

	/* one thread: its exit ends the process */
	task_record(r, PERF_RECORD_FORK, 5500, Q, P, Q, T);
	ASSERT_UINT(sonde__tasks_process(&r->tasks, Q, false)->threads, ==, 0);
	task_record(r, PERF_RECORD_EXIT, 6000, Q, P, Q, T);
	ASSERT(sonde__tasks_process(&r->tasks, Q, false)->exited);

	/* a thread that ends before the main one: the main one ends the process */
	task_record(r, PERF_RECORD_FORK, 6500, R, Q, R, Q);
	task_record(r, PERF_RECORD_FORK, 6600, R, R, R + 1, R);
	ASSERT_UINT(sonde__tasks_process(&r->tasks, R, false)->threads, ==, 1);
	task_record(r, PERF_RECORD_EXIT, 7000, R, R, R + 1, R);
	struct rec_process *q = sonde__tasks_process(&r->tasks, R, false);
	ASSERT(!q->exited && !q->main_exited);
	ASSERT_UINT(q->threads, ==, 0);
	task_record(r, PERF_RECORD_EXIT, 7500, R, Q, R, Q);
	ASSERT(sonde__tasks_process(&r->tasks, R, false)->exited);

	/* an exec in another thread than the main one: the kernel ends the main one (its
	 * EXIT) and every other, and the exec'ing thread takes the main one's tid (no EXIT
	 * of its old tid): the process is one thread, which ends it */
	const uint32_t S = P + 20;
	task_record(r, PERF_RECORD_FORK, 8000, S, R, S, R);
	task_record(r, PERF_RECORD_FORK, 8100, S, S, S + 1, S);
	task_record(r, PERF_RECORD_EXIT, 8500, S, R, S, R);
	ASSERT(sonde__tasks_process(&r->tasks, S, false)->main_exited);
	struct perf_rec exec = {.type = PERF_RECORD_COMM, .misc = PERF_RECORD_MISC_COMM_EXEC,
				.time = 8600,
				.comm = {.pid = S, .tid = S, .comm = "newprog", .exec = true}};
	ASSERT_OK(sonde__rec_process_record(r, &exec));
	q = sonde__tasks_process(&r->tasks, S, false);
	ASSERT(!q->exited && !q->main_exited);
	ASSERT_UINT(q->threads, ==, 0);
	task_record(r, PERF_RECORD_EXIT, 9000, S, R, S, R);
	ASSERT(sonde__tasks_process(&r->tasks, S, false)->exited);
	ASSERT_INT(r->first_error, ==, 0);
	recorder_free(r, &b);
}

static bool never_same(struct sonde_recorder *r, struct rec_process *p, const struct proc_stat *st)
{
	(void)r;
	(void)p;
	(void)st;
	return false;
}

/* A child that exits with 2 GiB of memory to tear down: the kernel marks it exiting
 * first, and /proc lists it until it is reaped. Returns its pid once /proc shows it in its
 * exit (a tenth of a second or more of teardown here, on this machine and in CI). */
static pid_t exiting_child(void)
{
	size_t size = (size_t)2 << 30;

	fflush(NULL);
	pid_t pid = fork();
	ASSERT_INT(pid, >=, 0);
	if (pid == 0) {
		void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		_exit(m == MAP_FAILED ? 2 : 0);
	}
	struct proc_stat st;
	for (double end = test_now() + 60;;) {
		ASSERT(test_now() < end);
		ASSERT_OK(sonde__proc_stat_read(pid, 0, &st));
		if (sonde__proc_stat_ended(&st)) {
			int status = 0;
			waitpid(pid, &status, 0);
			FAIL("the child ended with status %#x, never seen in its exit", status);
		}
		if (st.flags & PROC_PF_EXITING)
			return pid;
		sched_yield();
	}
}

/* A process whose last thread is in its exit is not adopted (a sweep's scan of /proc lists
 * it until it is reaped): adopted, it got a second life in the recorder's tables, its
 * thread a second definition, and its waits during the exit counted twice once a later
 * sweep ended that life. A live process is. */
TEST_TIMEOUT(rec_adopt_skips_a_process_in_its_exit, 120)
{
	struct buf b = BUF_INIT;
	struct sonde_recorder *r = recorder(&b);
	struct rec_process *p;
	struct proc_stat st;

	pid_t pid = exiting_child();
	ASSERT_INT(sonde__rec_adopt_process(r, pid, START, never_same, &st, &p), ==, 0);
	ASSERT(sonde__tasks_process(&r->tasks, pid, false) == NULL);
	ASSERT_INT(waitpid(pid, NULL, 0), ==, pid);
	ASSERT_INT(sonde__rec_adopt_process(r, getpid(), START, never_same, &st, &p), ==, 1);
	ASSERT(p != NULL && p->pid == getpid());
	recorder_free(r, &b);
}
