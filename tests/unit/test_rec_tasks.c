/* The recorder's task model (src/record/tasks.c) fed synthetic side-band records: what a
 * recording names its samples after fork, exec, exit and pid reuse. The pids are above
 * any pid_max, so /proc knows none of them and every name comes from the records. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "record/tasks.h"

enum { P = 5000001, C = 5000002 };

/* COMM of thread tid of pid at time, as track.c's on_comm feeds it. */
static struct rec_thread *comm_rec(struct rec_tasks *ts, pid_t pid, pid_t tid, const char *comm,
				   uint64_t time)
{
	bool stale;

	return sonde__tasks_rename(ts, pid, tid, comm, time, &stale);
}

/* The name a sample of tid of pid at this point is written with. */
static const char *sample_name(struct rec_tasks *ts, pid_t pid, pid_t tid)
{
	struct rec_thread *t = sonde__tasks_thread(ts, tid, true);

	if (!t)
		return "(no memory)";
	sonde__tasks_name(ts, t, pid);
	return t->comm;
}

TEST(record_tasks_fork_and_exec_name_the_child)
{
	struct rec_tasks ts = {0};
	bool stale;

	ASSERT_NOT_NULL(sonde__tasks_process(&ts, P, true));
	ASSERT_NOT_NULL(sonde__tasks_fork(&ts, P, 1, P, 1, 0));
	ASSERT_NOT_NULL(comm_rec(&ts, P, P, "shell", 1));
	/* FORK of a new process: named as its creator, inheriting its events */
	struct rec_thread *c = sonde__tasks_fork(&ts, C, P, C, P, 10);
	ASSERT_NOT_NULL(c);
	ASSERT_STR_EQ(c->comm, "shell");
	ASSERT_INT(c->pid, ==, C);
	ASSERT(c->announced && !c->defined && !c->own_events);
	/* a COMM older than the fork is of an earlier thread with that tid */
	ASSERT(!sonde__tasks_rename(&ts, C, C, "ghost", 5, &stale));
	ASSERT(stale);
	ASSERT_STR_EQ(sample_name(&ts, C, C), "shell");
	/* exec: the new name, defined anew at the next sample */
	c = sonde__tasks_thread(&ts, C, false);
	c->defined = true;
	ASSERT_NOT_NULL(comm_rec(&ts, C, C, "make", 20));
	c = sonde__tasks_thread(&ts, C, false);
	ASSERT(!c->defined);
	ASSERT_STR_EQ(sample_name(&ts, C, C), "make");
	/* a thread the exec'd process creates is named after it, not after the shell */
	ASSERT_NOT_NULL(sonde__tasks_fork(&ts, C, C, C + 1, C, 30));
	ASSERT_STR_EQ(sample_name(&ts, C, C + 1), "make");
	ASSERT_STR_EQ(sample_name(&ts, P, P), "shell");
	ASSERT_UINT(ts.threads_created, ==, 3);
	sonde__tasks_free(&ts);
}

TEST(record_tasks_exit_keeps_the_name_for_later_samples)
{
	struct rec_tasks ts = {0};

	ASSERT_NOT_NULL(sonde__tasks_process(&ts, P, true));
	ASSERT_NOT_NULL(comm_rec(&ts, P, P + 7, "worker", 1));
	sonde__tasks_thread_remove(&ts, P + 7, 0);
	ASSERT(!sonde__tasks_thread(&ts, P + 7, false));
	/* a per-CPU event samples it on its way out, after its exit record */
	ASSERT_STR_EQ(sample_name(&ts, P, P + 7), "worker");
	/* a thread never named is its tid, never an empty name */
	char tid[16];
	snprintf(tid, sizeof(tid), "%d", P + 8);
	ASSERT_STR_EQ(sample_name(&ts, P, P + 8), tid);
	sonde__tasks_free(&ts);
}

/* A task whose fork the recording never saw (it came before the recording's scan of /proc,
 * or was lost) is first seen at its exec's COMM; its first sample, processed after it left
 * /proc, is named by that COMM, and so is what comes after its exit. It used to be written
 * under its bare id: the COMM left the thread without a process, and the sample took it
 * for another process's thread and dropped the name. */
TEST(record_tasks_exec_of_an_unseen_fork_names_its_samples)
{
	struct rec_tasks ts = {0};

	ASSERT_NOT_NULL(sonde__tasks_process(&ts, C, true));
	struct rec_thread *t = comm_rec(&ts, C, C, "sleep", 10);
	ASSERT_NOT_NULL(t);
	ASSERT_INT(t->pid, ==, C);
	ASSERT_STR_EQ(sample_name(&ts, C, C), "sleep");
	/* a sample after its exit record */
	sonde__tasks_thread_remove(&ts, C, 0);
	ASSERT_STR_EQ(sample_name(&ts, C, C), "sleep");
	/* a thread renamed before any other record of it is named so too */
	ASSERT_NOT_NULL(comm_rec(&ts, C, C + 1, "worker", 20));
	ASSERT_STR_EQ(sample_name(&ts, C, C + 1), "worker");
	/* the tid was another process's (its exit unseen): the COMM makes it C's */
	ASSERT_NOT_NULL(sonde__tasks_fork(&ts, P, P, P + 1, P, 30));
	sonde__tasks_thread(&ts, P + 1, false)->selected = true;
	t = comm_rec(&ts, C, P + 1, "reused", 40);
	ASSERT(t->pid == C && !t->selected);
	ASSERT_STR_EQ(sample_name(&ts, C, P + 1), "reused");
	sonde__tasks_free(&ts);
}

/* On a machine forking thousands of tasks a second, a long-lived task's open interval is
 * written at the end, after its exit and many others: it keeps its name still. A thread
 * never named is named as its process; another process's thread with that tid is not. */
TEST(record_tasks_names_survive_many_exits)
{
	struct rec_tasks ts = {0};
	enum { EXITS = 5000 };

	ASSERT_NOT_NULL(sonde__tasks_process(&ts, P, true));
	ASSERT_NOT_NULL(comm_rec(&ts, P, P, "long_lived", 1));
	sonde__tasks_thread_remove(&ts, P, 0);
	for (pid_t i = 1; i <= EXITS; i++) {
		ASSERT_NOT_NULL(comm_rec(&ts, C + i, C + i, "true", 2));
		sonde__tasks_thread_remove(&ts, C + i, 0);
	}
	ASSERT_STR_EQ(sample_name(&ts, P, P), "long_lived");
	ASSERT_STR_EQ(sample_name(&ts, C + EXITS, C + EXITS), "true");
	/* a thread of P that no record named (it died before the recording read /proc) */
	ASSERT_STR_EQ(sample_name(&ts, P, P + 1), "long_lived");
	/* tid P again, but of another process: not long_lived's name */
	sonde__tasks_thread_remove(&ts, P, 0);
	char tid[16];
	snprintf(tid, sizeof(tid), "%d", P);
	ASSERT_STR_EQ(sample_name(&ts, C, P), tid);
	sonde__tasks_free(&ts);
}

TEST(record_tasks_pid_reuse_separates_the_two_processes)
{
	struct rec_tasks ts = {0};
	struct rec_process *p = sonde__tasks_process(&ts, P, true);

	ASSERT_NOT_NULL(p);
	ASSERT_NOT_NULL(sonde__tasks_fork(&ts, P, P, P + 1, P, 10));
	ASSERT_NOT_NULL(comm_rec(&ts, P, P + 1, "old", 11));
	ASSERT(sonde__tasks_process_exit(&ts, P, 100) == p);
	ASSERT(p->exited);
	/* the pid names a new process from 200 on (a fork record, or /proc) */
	sonde__tasks_process_reset(&ts, p);
	p->since = 200;
	ASSERT(!p->exited);
	struct rec_thread *t = sonde__tasks_thread(&ts, P + 1, false);
	ASSERT_NOT_NULL(t);
	ASSERT_STR_EQ(t->comm, ""); /* not the old process's name */
	ASSERT(!t->defined && !t->announced);
	/* an MMAP2 or EXIT of the old one, processed late, changes nothing of the new one */
	ASSERT(!sonde__tasks_process_at(&ts, P, 150, true));
	ASSERT(!sonde__tasks_process_exit(&ts, P, 150));
	ASSERT(!p->exited);
	ASSERT(sonde__tasks_process_at(&ts, P, 250, false) == p);
	ASSERT_UINT(sonde__tasks_n_procs(&ts), ==, 1);
	/* exited and retired: dropped; exited with modules still defined: kept */
	struct rec_process *q = sonde__tasks_process(&ts, C, true);
	q->exited = true;
	q->has_spool_modules = true;
	ASSERT(sonde__tasks_process_exit(&ts, P, 300) == sonde__tasks_process(&ts, P, false));
	sonde__tasks_forget_exited(&ts);
	ASSERT_UINT(sonde__tasks_n_procs(&ts), ==, 1);
	ASSERT_INT(sonde__tasks_proc_at(&ts, 0)->pid, ==, C);
	ASSERT_UINT(ts.procs_created, ==, 2);
	sonde__tasks_free(&ts);
}

TEST(record_tasks_thread_table_survives_growth_and_removal)
{
	struct rec_tasks ts = {0};
	enum { N = 5000 };

	for (pid_t i = 1; i <= N; i++) {
		struct rec_thread *t = sonde__tasks_thread(&ts, P + i * 64, true);
		ASSERT_NOT_NULL(t);
		t->pid = i;
	}
	for (pid_t i = 1; i <= N; i += 3)
		sonde__tasks_thread_remove(&ts, P + i * 64, 0);
	size_t walked = 0;
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&ts, t));)
		walked++;
	ASSERT_UINT(walked, ==, N - (N + 2) / 3);
	for (pid_t i = 1; i <= N; i++) {
		const struct rec_thread *t = sonde__tasks_thread(&ts, P + i * 64, false);
		if (i % 3 == 1) {
			ASSERT(!t);
		} else {
			ASSERT_NOT_NULL(t);
			ASSERT_INT(t->pid, ==, i);
		}
	}
	sonde__tasks_free(&ts);
}

TEST(record_tasks_a_thread_from_proc_is_defined_afresh)
{
	struct rec_tasks ts = {0};
	struct rec_process *p = sonde__tasks_process(&ts, getpid(), true);
	pid_t tid = gettid();
	char comm[16] = "";
	FILE *f = fopen("/proc/self/comm", "r");

	ASSERT_NOT_NULL(f);
	ASSERT(fgets(comm, sizeof(comm), f));
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	/* whatever the tid was before (another process's thread, defined, announced) */
	struct rec_thread *t = sonde__tasks_thread(&ts, tid, true);
	t->pid = P;
	t->defined = t->announced = true;
	snprintf(t->comm, sizeof(t->comm), "stale");
	t = sonde__tasks_thread_from_proc(&ts, p, tid, 42, NULL);
	ASSERT_NOT_NULL(t);
	ASSERT_INT(t->pid, ==, getpid());
	ASSERT(!t->defined && !t->announced);
	ASSERT_UINT(t->since, ==, 42);
	ASSERT_STR_EQ(t->comm, comm);
	sonde__tasks_free(&ts);
}

/* The processes are found by pid through every growth of the table and every compaction
 * that drops the exited ones (which moves the others); a dropped pid is unknown after it
 * and a new process of that pid is a fresh entry. */
TEST(record_tasks_processes_found_by_pid_after_compaction)
{
	enum { N = 3000 };
	struct rec_tasks ts = {0};

	for (pid_t pid = 1; pid <= N; pid++) {
		struct rec_process *p = sonde__tasks_process(&ts, pid * 7, true);
		ASSERT_NOT_NULL(p);
		p->start_time = (uint64_t)pid;
	}
	ASSERT_UINT(sonde__tasks_n_procs(&ts), ==, N);
	for (pid_t pid = 1; pid <= N; pid++)
		if (pid % 3)
			ASSERT_NOT_NULL(sonde__tasks_process_exit(&ts, pid * 7, 0));
	sonde__tasks_forget_exited(&ts);
	ASSERT_UINT(sonde__tasks_n_procs(&ts), ==, N / 3);
	for (pid_t pid = 1; pid <= N; pid++) {
		struct rec_process *p = sonde__tasks_process(&ts, pid * 7, false);
		if (pid % 3) {
			ASSERT(p == NULL);
			continue;
		}
		ASSERT_NOT_NULL(p);
		ASSERT_INT(p->pid, ==, pid * 7);
		ASSERT_UINT(p->start_time, ==, (uint64_t)pid);
	}
	struct rec_process *again = sonde__tasks_process(&ts, 7, true);
	ASSERT_NOT_NULL(again);
	ASSERT_UINT(again->start_time, ==, 0);
	ASSERT_UINT(sonde__tasks_n_procs(&ts), ==, N / 3 + 1);
	ASSERT(sonde__tasks_process(&ts, 7, false) == again);
	sonde__tasks_free(&ts);
}

/* The threads listed by process: each pid's tids exactly (its main thread, the threads it
 * forked, one that a COMM moved to it from another process), none of another pid's, and
 * nothing for a pid with no threads, or from a table with none. */
TEST(record_tasks_threads_listed_by_process)
{
	enum { PIDS = 50, EACH = 7 };
	struct rec_tasks ts = {0};
	struct rec_tids_by_pid by_pid = {0};
	pid_t moved = P + PIDS * 100 + 1; /* forked by the last pid, renamed into the first */
	size_t n = 1;

	/* no threads yet: nothing listed */
	ASSERT_OK(sonde__tasks_tids_by_pid(&ts, &by_pid));
	ASSERT(!sonde__tids_of(&by_pid, P, &n));
	ASSERT_UINT(n, ==, 0);
	for (pid_t p = 0; p < PIDS; p++)
		for (pid_t k = 0; k < EACH; k++)
			ASSERT_NOT_NULL(sonde__tasks_fork(&ts, P + p * 100, P + p * 100,
							  P + p * 100 + k, P + p * 100, 1));
	ASSERT_NOT_NULL(sonde__tasks_fork(&ts, P + (PIDS - 1) * 100, P + (PIDS - 1) * 100, moved,
					  P + (PIDS - 1) * 100, 1));
	ASSERT_NOT_NULL(comm_rec(&ts, P, moved, "moved", 2));
	sonde__tasks_thread_remove(&ts, P + 100 + 3, 3);
	ASSERT_OK(sonde__tasks_tids_by_pid(&ts, &by_pid));
	for (pid_t p = 0; p < PIDS; p++) {
		const struct rec_pid_tid *v = sonde__tids_of(&by_pid, P + p * 100, &n);
		ASSERT_UINT(n, ==, EACH + (p == 0) - (p == 1));
		for (size_t i = 0; i < n; i++) {
			ASSERT_INT(v[i].pid, ==, P + p * 100);
			pid_t k = v[i].tid - (P + p * 100);
			if (v[i].tid != moved && (k < 0 || k >= EACH || (p == 1 && k == 3)))
				FAIL("pid %d lists tid %d", P + p * 100, v[i].tid);
			ASSERT_INT(sonde__tasks_thread(&ts, v[i].tid, false)->pid, ==, P + p * 100);
		}
	}
	n = 1;
	ASSERT(!sonde__tids_of(&by_pid, P + 50, &n));
	ASSERT_UINT(n, ==, 0);
	ASSERT(!sonde__tids_of(&by_pid, P + PIDS * 100, &n));
	ASSERT_UINT(n, ==, 0);
	sonde__tids_by_pid_free(&by_pid);
	sonde__tids_by_pid_free(&by_pid);
	sonde__tasks_free(&ts);
}
