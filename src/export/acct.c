/* The accounting tables of a spool (acct.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/view.h>

#include "base/u64map.h"
#include "export/acct.h"
#include "export/profile.h"
#include "spool/runs.h"

struct build {
	const struct sonde_spool *s;
	struct sonde_spool_info info;
	const struct sonde_profile_spool_opts *f; /* NULL: no filter */
	bool narrowed; /* a time or CPU filter: rows are not whole lives */
	/* f as the readers' filters (include/sonde/view.h): by thread, by CPU and time */
	struct sonde_view_filter who, when;
	struct sonde_acct_task **by_thread; /* by spool thread id - 1; NULL: filtered out */
	/* by task index: */
	uint64_t *last_in;   /* the latest switch-in of its intervals */
	uint64_t *defined;   /* its first definition (the recorder's: at its fork, when seen) */
	uint64_t *first_rec; /* its first sample or switch-out (UINT64_MAX: none) */
	uint64_t *first_in;  /* its first stay's start by the switches (UINT64_MAX: none) */
	uint32_t *first_cpu; /* that stay's CPU */
	/* every interval's task index and switch-out, by task and time (sorted after
	 * add_intervals): where a stay whose switch-out went untraced ended at the latest */
	struct sonde_acct_wait *starts;
	size_t n_starts, cap_starts;
	size_t cap;
	struct u64map row_at; /* pid -> 1 + index of its row in a->rows */
	/* pid -> the last named definition of its main thread << 32 | of another of its
	 * threads (thread ids, 0: none), of every thread once the first row needs it */
	struct u64map named;
	bool named_all;
	struct sonde_acct *a;
};

/* Whether thread t passes the pid, tid and comm filters. */
static bool thread_kept(const struct build *b, const struct sonde_spool_thread *t)
{
	struct sonde_view_event e = {
		.sz = sizeof(e), .pid = t->pid, .tid = t->tid, .comm = t->comm};

	return sonde_view_filter__match(&b->who, &e) == 1;
}

/* Whether what t took at time_ns on cpu passes every filter. */
static bool kept(const struct build *b, const struct sonde_spool_thread *t, uint64_t time_ns,
		 uint32_t cpu)
{
	struct sonde_view_event e = {.sz = sizeof(e), .cpu = cpu, .time_ns = time_ns};

	return thread_kept(b, t) && sonde_view_filter__match(&b->when, &e) == 1;
}

/* Whether comm is only the decimal id, the recorder's name for a task it never saw named. */
static bool bare_id(const char *comm, uint32_t id)
{
	char dec[16];

	snprintf(dec, sizeof(dec), "%" PRIu32, id);
	return !strcmp(comm, dec);
}

/* The name of process t->pid: its main thread's last (after an exec, the new program's:
 * a renamed thread is defined again), else its other threads' last, else t's own. Never a
 * bare id when a name was seen (a recording made before the recorder kept exited tasks'
 * names defines a task seen after its exit by its id). */
static const char *process_comm(const struct build *b, const struct sonde_spool_thread *t)
{
	struct sonde_spool_thread m;
	const uint64_t *ids = sonde__u64map_get(&b->named, t->pid);
	uint32_t id = !ids ? 0 : *ids >> 32 ? (uint32_t)(*ids >> 32) : (uint32_t)*ids;

	return id && sonde_spool__get_thread(b->s, id, &m) == 0 ? m.comm : t->comm;
}

/* Fills b->named in one pass over the threads: 0 or -ENOMEM. */
static int name_processes(struct build *b)
{
	struct sonde_spool_thread m;

	for (uint32_t i = 1; i <= b->info.threads; i++) {
		if (sonde_spool__get_thread(b->s, i, &m) < 0 || bare_id(m.comm, m.tid))
			continue;
		uint64_t *ids = sonde__u64map_get(&b->named, m.pid);
		uint64_t was = ids ? *ids : 0;
		uint64_t now = m.tid == m.pid ? (uint64_t)i << 32 | (uint32_t)was
					      : (was & ~(uint64_t)UINT32_MAX) | i;
		if (ids)
			*ids = now;
		else if (sonde__u64map_put(&b->named, m.pid, now) < 0)
			return -ENOMEM;
	}
	b->named_all = true;
	return 0;
}

/* The row of process t->pid, added on first use; NULL when out of memory. */
static struct sonde_acct_row *row_of(struct build *b, const struct sonde_spool_thread *t)
{
	struct sonde_acct *a = b->a;
	const uint64_t *at = sonde__u64map_get(&b->row_at, t->pid);

	if (at)
		return &a->rows[*at - 1];
	if (!b->named_all && name_processes(b) < 0)
		return NULL;
	if (a->n_rows == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		struct sonde_acct_row *v = realloc(a->rows, cap * sizeof(*v));
		if (!v)
			return NULL;
		a->rows = v;
		b->cap = cap;
	}
	if (sonde__u64map_put(&b->row_at, t->pid, a->n_rows + 1) < 0)
		return NULL;
	struct sonde_acct_row *row = &a->rows[a->n_rows++];
	*row = (struct sonde_acct_row){.pid = t->pid};
	snprintf(row->comm, sizeof(row->comm), "%s", process_comm(b, t));
	return row;
}

static int by_total(const void *x, const void *y)
{
	const struct sonde_acct_row *p = x, *q = y;

	if (p->total != q->total)
		return p->total < q->total ? 1 : -1;
	return p->pid < q->pid ? -1 : p->pid > q->pid;
}

void sonde__acct_window(const struct sonde_spool *s, uint64_t *start, uint64_t *end)
{
	struct sonde_spool_info in;
	struct sonde_spool_offcpu o;
	uint64_t first = sonde_spool__first_switch_ns(s);

	sonde_spool__get_info(s, &in);
	/* with the CPUs' switches the machine was seen from its first switch or sample (the
	 * recording's start is taken before the recorder sets up its events, up to seconds
	 * earlier on a loaded machine) */
	*start = sonde_spool__switch_cpus(s) ? first : in.header.start_monotonic_ns;
	*end = sonde_spool__last_switch_ns(s);
	if (first < *start)
		*start = first;
	if (in.samples && in.first_time_ns < *start)
		*start = in.first_time_ns;
	if (in.samples && in.last_time_ns > *end)
		*end = in.last_time_ns;
	/* ... up to its last switch or sample: an interval still open when the recorder
	 * finished (later, on a loaded machine, by seconds) is clipped to that */
	if (sonde_spool__switch_cpus(s))
		return;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &o) == 0; i++)
		if (o.switch_in_ns > *end)
			*end = o.switch_in_ns;
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &o) == 0; i++)
		if (o.switch_in_ns > *end)
			*end = o.switch_in_ns;
	/* ... and its threads' exits: a thread ran from its last wait or sample to there */
	for (uint32_t i = 1; i <= in.threads; i++) {
		uint64_t exit_ns;
		if (sonde_spool__get_thread_exit(s, i, &exit_ns) == 0 && exit_ns > *end)
			*end = exit_ns;
	}
}

static struct sonde_acct_row *task_row(struct build *b, const struct sonde_acct_task *task);

/* The task of spool thread id, by thread id - 1 (NULL: filtered out). */
static struct sonde_acct_task *task_of(struct build *b, uint32_t id)
{
	return id && id <= b->info.threads ? b->by_thread[id - 1] : NULL;
}

static void seen_at(struct sonde_acct_task *k, uint64_t t)
{
	if (t < k->start_ns)
		k->start_ns = t;
}

/* Task k seen at t by a record of its own (a sample, a switch-out). */
static void record_at(struct build *b, struct sonde_acct_task *k, uint64_t t)
{
	uint64_t *first = &b->first_rec[k - b->a->tasks];

	seen_at(k, t);
	if (t < *first)
		*first = t;
}

static int by_pid_tid(const void *x, const void *y)
{
	const struct sonde_acct_task *p = x, *q = y;

	if (p->pid != q->pid)
		return p->pid < q->pid ? -1 : 1;
	if (p->tid != q->tid)
		return p->tid < q->tid ? -1 : 1;
	return p->start_ns < q->start_ns ? -1 : p->start_ns > q->start_ns;
}

/* When task k (first defined at k->start_ns) ended, if it had by time t: its EXIT, or,
 * its exit record lost, its last switch-out (the kernel reports an exited task's state in
 * it) that the switches saw in between. UINT64_MAX: not by then. */
static uint64_t ended_at(const struct build *b, const struct sonde_acct_task *k, uint64_t t)
{
	struct sonde_spool_run run;

	if (k->exited)
		return k->end_ns <= t ? k->end_ns : UINT64_MAX;
	for (uint64_t i = 0; sonde_spool__get_tid_run(b->s, k->tid, i, &run) == 0; i++) {
		if (run.start_ns > t)
			break; /* in the order of their starts */
		if ((run.state & ~(uint32_t)SONDE_SWITCH_INFERRED) == SONDE_SWITCH_EXITED &&
		    run.end_ns >= k->start_ns && run.end_ns <= t)
			return run.end_ns;
	}
	return UINT64_MAX;
}

/* Whether spool thread t (its EXIT at *exit_ns, when has_exit) is another task than k,
 * which has the same pid and tid: one the kernel gave the ids to after k ended (on a
 * machine forking thousands of tasks a second, pid_max comes round within seconds, and
 * taking both for one task counted the time between them as life no record covers: 29-45
 * % of the lives of loaded CI runs). A definition of k itself after its end (the recorder
 * writes one for a task it meets after its exit record, with that exit) has its EXIT by
 * then. */
static bool another_task(const struct build *b, const struct sonde_acct_task *k,
			 const struct sonde_spool_thread *t, bool has_exit, uint64_t exit_ns)
{
	uint64_t end = ended_at(b, k, t->time_ns);

	return end != UINT64_MAX && !(has_exit && exit_ns <= end);
}

/* One task per kernel task of the threads that pass the thread filters: the spool threads
 * of one pid and tid (a rename defines the thread again) up to another task's
 * (another_task); named by its last definition, started at its first, ended by its last
 * EXIT. */
static int make_tasks(struct build *b)
{
	struct sonde_acct *a = b->a;
	struct sonde_spool_thread t;
	uint32_t n = b->info.threads;
	struct u64map latest = U64MAP_INIT; /* pid << 32 | tid -> its latest task's index */
	int err = -ENOMEM;

	b->by_thread = calloc(n ? n : 1, sizeof(*b->by_thread));
	a->tasks = calloc(n ? n : 1, sizeof(*a->tasks));
	uint32_t *idx = calloc(n ? n : 1, sizeof(*idx)); /* thread id - 1 -> task index */
	uint32_t *moved = calloc(n ? n : 1, sizeof(*moved));
	if (!b->by_thread || !a->tasks || !idx || !moved)
		goto out;
	for (uint32_t i = 1; i <= n; i++) {
		if (sonde_spool__get_thread(b->s, i, &t) < 0 || !thread_kept(b, &t)) {
			idx[i - 1] = UINT32_MAX;
			continue;
		}
		uint64_t key = (uint64_t)t.pid << 32 | t.tid;
		uint64_t *k = sonde__u64map_get(&latest, key), exit_ns;
		bool has_exit = sonde_spool__get_thread_exit(b->s, i, &exit_ns) == 0;
		if (!k || another_task(b, &a->tasks[*k], &t, has_exit, exit_ns)) {
			a->tasks[a->n_tasks] = (struct sonde_acct_task){
				.pid = t.pid, .tid = t.tid, .start_ns = UINT64_MAX};
			if (sonde__u64map_put(&latest, key, a->n_tasks++) < 0)
				goto out;
			k = sonde__u64map_get(&latest, key);
		}
		struct sonde_acct_task *task = &a->tasks[*k];
		if (!task->comm || !bare_id(t.comm, t.tid))
			task->comm = t.comm; /* never a name seen before for the bare id */
		seen_at(task, t.time_ns);
		if (has_exit && (!task->exited || exit_ns > task->end_ns)) {
			task->exited = true;
			task->end_ns = exit_ns;
		}
		idx[i - 1] = (uint32_t)*k;
	}
	/* sorted, then each thread pointed at its task */
	for (size_t k = 0; k < a->n_tasks; k++)
		a->tasks[k].over_ns = k; /* the index before sorting, for a moment */
	if (a->n_tasks)
		qsort(a->tasks, a->n_tasks, sizeof(*a->tasks), by_pid_tid);
	for (size_t k = 0; k < a->n_tasks; k++) {
		moved[a->tasks[k].over_ns] = (uint32_t)k;
		a->tasks[k].over_ns = 0;
	}
	for (uint32_t i = 0; i < n; i++)
		b->by_thread[i] = idx[i] == UINT32_MAX ? NULL : &a->tasks[moved[idx[i]]];
	err = 0;
out:
	sonde__u64map_free(&latest);
	free(moved);
	free(idx);
	return err;
}

/* Each on-CPU sample weighs the sample period, on its process's row and its CPU. */
static int add_samples(struct build *b)
{
	struct sonde_acct *a = b->a;
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;

	for (uint64_t i = 0; sonde_spool__get_sample(b->s, i, &smp) == 0; i++) {
		struct sonde_acct_task *task = task_of(b, smp.thread);
		if (!task)
			continue;
		record_at(b, task, smp.time_ns);
		if (sonde_spool__get_thread(b->s, smp.thread, &t) < 0 ||
		    !kept(b, &t, smp.time_ns, smp.cpu))
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_ON] += a->period_ns;
		task->ns[SONDE_ACCT_ON] += a->period_ns;
		task->sampled_ns += a->period_ns;
		uint32_t c = smp.cpu < SONDE_ACCT_MAX_CPU ? smp.cpu : SONDE_ACCT_MAX_CPU;
		a->cpu_ns[c] += a->period_ns;
		if (c < SONDE_ACCT_MAX_CPU && c >= a->cpu_max)
			a->cpu_max = c + 1;
	}
	return 0;
}

/* The BPF backend's unknown interval spans the waits of a thread its ring had no room for
 * and the stays between them, which the switches (a ring of their own) kept: counted
 * twice, they made a thread's parts 1.3 s more than its 5 s life. Stays are in the order
 * of their starts; a stay ended by an inferred switch can overlap the next ones, whose
 * common time counts once (it was counted twice, and the interval's unknown part, its
 * length less this, went below zero). */
uint64_t sonde__acct_stays_within(const struct sonde_spool *s, uint32_t tid, uint64_t from,
				  uint64_t to)
{
	struct sonde_spool_run run;
	uint64_t on = 0, covered = from;

	if (!tid)
		return 0;
	for (uint64_t i = sonde__spool_tid_runs_ended_by(s, tid, from);
	     sonde_spool__get_tid_run(s, tid, i, &run) == 0; i++) {
		if (run.start_ns >= to)
			break;
		uint64_t a = run.start_ns > covered ? run.start_ns : covered;
		uint64_t z = run.end_ns < to ? run.end_ns : to;
		if (z > a) {
			on += z - a;
			covered = z;
		}
	}
	return on;
}

/* An interval weighs its length, in the state the thread left the CPU in up to its
 * wakeup and runnable from there (waiting for a CPU), as a scheduler's own accounting
 * has it; one a loss cut (unknown) is unknown throughout, but for the thread's stays on
 * the CPUs within it (sonde__acct_stays_within), which are on-CPU time. */
static int add_intervals(struct build *b, bool unknown)
{
	struct sonde_spool_offcpu o;
	struct sonde_spool_thread t;

	for (uint64_t i = 0;; i++) {
		if ((unknown ? sonde_spool__get_unknown(b->s, i, &o)
			     : sonde_spool__get_offcpu(b->s, i, &o)) < 0)
			return 0;
		struct sonde_acct_task *task = task_of(b, o.thread);
		if (!task)
			continue;
		record_at(b, task, o.switch_out_ns);
		if (b->n_starts == b->cap_starts) {
			size_t cap = b->cap_starts ? 2 * b->cap_starts : 256;
			struct sonde_acct_wait *v = realloc(b->starts, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			b->starts = v;
			b->cap_starts = cap;
		}
		b->starts[b->n_starts++] =
			(struct sonde_acct_wait){(uint32_t)(task - b->a->tasks), o.switch_out_ns};
		uint64_t *last = &b->last_in[task - b->a->tasks]; /* clipped below */
		if (o.switch_in_ns > *last)
			*last = o.switch_in_ns;
		if (sonde_spool__get_thread(b->s, o.thread, &t) < 0 ||
		    !kept(b, &t, o.switch_out_ns, o.cpu))
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		if (o.switch_in_ns > b->a->window_end_ns) /* clipped to the window */
			o.switch_in_ns = o.switch_out_ns > b->a->window_end_ns ? o.switch_out_ns
									   : b->a->window_end_ns;
		uint64_t until = o.switch_in_ns;
		if (!unknown && o.state != SONDE_OFFCPU_RUNNABLE && o.wakeup_ns &&
		    o.wakeup_ns >= o.switch_out_ns && o.wakeup_ns <= o.switch_in_ns) {
			until = o.wakeup_ns;
			row->ns[SONDE_ACCT_R] += o.switch_in_ns - o.wakeup_ns;
			task->ns[SONDE_ACCT_R] += o.switch_in_ns - o.wakeup_ns;
		}
		int col = unknown ? SONDE_ACCT_UNKNOWN : SONDE_ACCT_R + (int)o.state;
		uint64_t len = until - o.switch_out_ns;
		if (unknown)
			len -= sonde__acct_stays_within(b->s, task->tid, o.switch_out_ns, until);
		row->ns[col] += len;
		task->ns[col] += len;
	}
}

/* Short intervals: by thread only (they have no time nor CPU), as the metrics count them. */
static int add_shorts(struct build *b)
{
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_thread t;

	for (uint64_t i = 0; sonde_spool__get_offcpu_short(b->s, i, &sh) == 0; i++) {
		struct sonde_acct_task *task = task_of(b, sh.thread);
		if (!task || sonde_spool__get_thread(b->s, sh.thread, &t) < 0)
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_SHORT] += sh.total_ns;
		task->ns[SONDE_ACCT_SHORT] += sh.total_ns;
	}
	return 0;
}

/* Whether on-CPU time at [from, to) on cpu passes the CPU and time filters: the part of
 * it that does, into *from and *to (false: none). */
static bool clip_kept(const struct build *b, uint32_t cpu, uint64_t *from, uint64_t *to)
{
	struct sonde_view_filter cpus = b->when;
	struct sonde_view_event e = {.sz = sizeof(e), .cpu = cpu};

	cpus.time_range = 0;
	if (sonde_view_filter__match(&cpus, &e) != 1)
		return false;
	if (b->when.time_range) {
		uint64_t lo = b->when.time_from_ns, hi = b->when.time_to_ns;
		if (*from < lo)
			*from = lo >= *to ? *to : lo;
		if (hi && *to > hi)
			*to = hi <= *from ? *from : hi;
	}
	return *from < *to;
}

/* With the CPUs' switches, each task's on-CPU time is its stays on the CPUs over its life
 * (the samples only say where in its code it was); its life starts at its first stay if
 * that comes first, and an exit ends it with the stay the exit was in. The rows' on-CPU
 * time is then their tasks'. */
static int by_start(const void *x, const void *y)
{
	const struct sonde_acct_task *const *p = x, *const *q = y;

	return (*p)->start_ns < (*q)->start_ns ? -1 : (*p)->start_ns > (*q)->start_ns;
}

static int by_task_then_time(const void *x, const void *y)
{
	const struct sonde_acct_wait *p = x, *q = y;

	if (p->task != q->task)
		return p->task < q->task ? -1 : 1;
	return p->out_ns < q->out_ns ? -1 : p->out_ns > q->out_ns;
}

void sonde__acct_waits_sort(struct sonde_acct_wait *w, size_t n)
{
	if (n)
		qsort(w, n, sizeof(*w), by_task_then_time);
}

/* The first switch-out of task's waits at or after t (UINT64_MAX: none). */
static uint64_t next_wait(const struct sonde_acct_wait *w, size_t n, uint32_t task, uint64_t t)
{
	size_t lo = 0, hi = n; /* the first entry not before (task, t) */

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (w[mid].task < task || (w[mid].task == task && w[mid].out_ns < t))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && w[lo].task == task ? w[lo].out_ns : UINT64_MAX;
}

bool sonde__acct_stay_once(const struct sonde_acct_wait *w, size_t n, uint32_t task, bool inferred,
			   uint64_t *from, uint64_t *to, uint64_t *covered)
{
	if (inferred) {
		uint64_t next = next_wait(w, n, task, *from);
		if (*to > next)
			*to = next;
	}
	if (*from < *covered)
		*from = *covered;
	if (*from >= *to)
		return false;
	*covered = *to;
	return true;
}

static int add_runs(struct build *b)
{
	struct sonde_acct *a = b->a;
	struct sonde_spool_run run;
	struct u64map claimed = U64MAP_INIT; /* tid + 1 -> its stays from then on are free */
	struct sonde_acct_task **order = calloc(a->n_tasks ? a->n_tasks : 1, sizeof(*order));

	if (!order)
		return -ENOMEM;
	/* a tid's stays go to one task at a time, the first seen (by its other records)
	 * until its exit: a tid reused, or defined twice, is not counted twice */
	for (size_t k = 0; k < a->n_tasks; k++)
		order[k] = &a->tasks[k];
	if (a->n_tasks)
		qsort(order, a->n_tasks, sizeof(*order), by_start);
	for (size_t k = 0; k < a->n_tasks; k++) {
		struct sonde_acct_task *task = order[k];
		if (!task->tid || sonde_spool__get_tid_run(b->s, task->tid, 0, &run) == -ENOENT)
			continue; /* the idle task's stays are the CPUs' idle time */
		uint64_t *had = sonde__u64map_get(&claimed, (uint64_t)task->tid + 1);
		uint64_t free_from = had ? *had : 0;
		if (free_from == UINT64_MAX)
			continue; /* another task has them to the end */
		task->exact_on = true;
		bool done = false; /* its last switch-out found */
		for (uint64_t i = 0; sonde_spool__get_tid_run(b->s, task->tid, i, &run) == 0; i++) {
			uint64_t from = run.start_ns ? run.start_ns : a->window_start_ns;
			if (from < free_from)
				continue;
			uint64_t to = run.end_ns == UINT64_MAX ? a->window_end_ns : run.end_ns;
			if (task->exited && from > task->end_ns && done)
				break; /* a later task with the same tid */
			seen_at(task, from);
			if (b->first_in[task - a->tasks] == UINT64_MAX) {
				b->first_in[task - a->tasks] = from;
				b->first_cpu[task - a->tasks] = run.cpu;
			}
			bool last = (run.state & ~(uint32_t)SONDE_SWITCH_INFERRED) ==
				    SONDE_SWITCH_EXITED;
			if (!task->exited && last) {
				/* its exit record went unseen; its last switch-out ends it */
				task->exited = done = true;
				task->end_ns = to;
				break;
			}
			if (task->exited && !done && last && to < task->end_ns) {
				/* its last switch-out before its EXIT: a sweep wrote that one, its
				 * exit record lost, at the latest the task can have ended (the
				 * kernel writes an exit record before the task's last switch-out) */
				task->end_ns = to;
				done = true;
				break;
			}
			/* after its exit record a task still runs to its last switch-out (and
			 * may be preempted on the way) */
			if (task->exited && !done && to > task->end_ns) {
				task->end_ns = to;
				done = last;
			}
		}
		if (task->start_ns < free_from)
			task->start_ns = free_from;
		if (sonde__u64map_put(&claimed, (uint64_t)task->tid + 1,
				      task->exited ? task->end_ns : UINT64_MAX) < 0) {
			sonde__u64map_free(&claimed);
			free(order);
			return -ENOMEM;
		}
	}
	sonde__u64map_free(&claimed);
	free(order);
	sonde__acct_waits_sort(b->starts, b->n_starts);
	for (size_t k = 0; k < a->n_tasks; k++) {
		struct sonde_acct_task *task = &a->tasks[k];
		uint64_t on = 0, kept_on = 0, covered = 0;
		uint64_t end = task->exited ? task->end_ns : a->window_end_ns;
		if (!task->exact_on)
			continue;
		for (uint64_t i = 0; sonde_spool__get_tid_run(b->s, task->tid, i, &run) == 0; i++) {
			uint64_t from = run.start_ns ? run.start_ns : a->window_start_ns;
			uint64_t to = run.end_ns == UINT64_MAX ? a->window_end_ns : run.end_ns;
			/* counted once, an inferred end at the next wait (sonde__acct_stay_once):
			 * its next stay elsewhere, or the time before the CPU's first switch */
			if (!sonde__acct_stay_once(b->starts, b->n_starts, (uint32_t)k,
						   run.state & SONDE_SWITCH_INFERRED, &from, &to, &covered))
				continue;
			if (from < task->start_ns)
				from = task->start_ns;
			if (to > end)
				to = end;
			if (from >= to)
				continue;
			on += to - from;
			if (clip_kept(b, run.cpu, &from, &to))
				kept_on += to - from;
		}
		/* the samples' estimate gives way to the switches' measure */
		struct sonde_acct_row *row = task_row(b, task);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_ON] += kept_on - task->sampled_ns;
		task->ns[SONDE_ACCT_ON] = on;
	}
	return 0;
}

/* A task the recording saw created (defined at its fork, before any record of it) waited
 * in a run queue from there to its first switch-in: runnable, as the scheduler has a new
 * task (wake_up_new_task), where its life started at that switch-in and the wait was in
 * none. Only where that switch-in is its first record: a sample or switch-out before it
 * means its first stays went unseen (lost), and the time stays unknown. */
static int add_queued(struct build *b)
{
	struct sonde_acct *a = b->a;

	for (size_t k = 0; k < a->n_tasks; k++) {
		struct sonde_acct_task *task = &a->tasks[k];
		uint64_t from = b->defined[k], to = b->first_in[k];
		if (!task->exact_on || to == UINT64_MAX || from >= to || to > b->first_rec[k])
			continue;
		if (from < a->window_start_ns)
			from = a->window_start_ns;
		if (to > a->window_end_ns)
			to = a->window_end_ns;
		if (from >= to)
			continue;
		task->ns[SONDE_ACCT_R] += to - from;
		if (!clip_kept(b, b->first_cpu[k], &from, &to))
			continue;
		struct sonde_acct_row *row = task_row(b, task);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_R] += to - from;
	}
	return 0;
}

/* The row of task's process. */
static struct sonde_acct_row *task_row(struct build *b, const struct sonde_acct_task *task)
{
	struct sonde_spool_thread t = {.pid = task->pid, .tid = task->tid, .comm = task->comm};

	return row_of(b, &t);
}

/* Whether every switch-out of the recorded threads is in the spool (the off-CPU
 * coverage, with nothing dropped): a task's life that no wait covers was on the CPU. */
static bool waits_complete(const struct sonde_spool *s)
{
	struct sonde_spool_account acct;

	if (!(sonde_spool__offcpu_coverage(s) & SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT))
		return false;
	return sonde_spool__get_account(s, &acct) < 0 || acct.offcpu_dropped == 0;
}

bool sonde__acct_offcpu_recorded(const struct sonde_spool *s)
{
	struct sonde_spool_info in;

	/* the writer declares off-CPU recording in the header's version, 2.1 (docs/spool.md),
	 * before the first record: a recording whose threads never waited says so too */
	sonde_spool__get_info(s, &in);
	return in.version_major > 2 || (in.version_major == 2 && in.version_minor >= 1);
}

bool sonde__acct_weights_known(const struct sonde_spool *s)
{
	return sonde_spool__switch_cpus(s) || waits_complete(s);
}

/* Each task's life less its parts: unseen, or over when the parts exceed it. Where every
 * wait is known, the unseen part is on-CPU time: a thread is on the CPU, or waiting, or
 * unknown (a loss), so what the samples did not count (the ones a late timer skipped: a
 * vCPU the host did not run, one in ten of a CPU burner's samples on a loaded guest) is
 * its stays less their samples. Its on-CPU time is then exact, as with the switches. */
static int close_tasks(struct build *b)
{
	struct sonde_acct *a = b->a;
	bool complete = waits_complete(b->s);

	for (size_t k = 0; k < a->n_tasks; k++) {
		struct sonde_acct_task *task = &a->tasks[k];
		uint64_t sum = 0;
		if (task->start_ns == UINT64_MAX || task->start_ns < a->window_start_ns)
			task->start_ns = a->window_start_ns;
		if (task->start_ns > a->window_end_ns) /* seen after the machine was */
			task->start_ns = a->window_end_ns;
		/* a wait written after the exit (preempted on the way out) ended when the task
		 * ran again: its life goes on at least to there, though the switches that
		 * followed went unseen (a loss) */
		if (task->exited && b->last_in[k] > task->end_ns)
			task->end_ns = b->last_in[k];
		if (!task->exited || task->end_ns > a->window_end_ns)
			task->end_ns = a->window_end_ns;
		if (task->end_ns < task->start_ns)
			task->end_ns = task->start_ns;
		for (int c = 0; c < SONDE_ACCT_COLS; c++)
			sum += task->ns[c];
		uint64_t life = task->end_ns - task->start_ns;
		task->unseen_ns = life > sum ? life - sum : 0;
		task->over_ns = sum > life ? sum - life : 0;
		if (complete && !task->exact_on && !b->narrowed) {
			struct sonde_acct_row *row = task_row(b, task);
			if (!row)
				return -ENOMEM;
			row->ns[SONDE_ACCT_ON] += task->unseen_ns;
			task->ns[SONDE_ACCT_ON] += task->unseen_ns;
			task->unseen_ns = 0;
			task->exact_on = true;
		}
		/* what no record covers is unknown, however the rest was measured (samples x
		 * period miss what a late timer skipped, a loss what it took); in a recording
		 * without off-CPU data it is the thread's every wait, which a row of samples
		 * alone leaves out (the report says so) */
		if (!task->unseen_ns || b->narrowed || (!task->exact_on && !a->offcpu))
			continue;
		struct sonde_acct_row *row = task_row(b, task);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_UNKNOWN] += task->unseen_ns;
	}
	return 0;
}

/* Each CPU's busy, idle and unknown time by its switches, over the window. */
static int add_cpus(struct build *b)
{
	struct sonde_acct *a = b->a;
	uint32_t n = sonde_spool__switch_cpus(b->s);

	if (!n)
		return 0;
	a->cpus = calloc(n, sizeof(*a->cpus));
	if (!a->cpus)
		return -ENOMEM;
	for (uint32_t c = 0; c < n; c++) {
		struct sonde_spool_cpu_time t;
		if (sonde_spool__get_cpu_time(b->s, c, a->window_start_ns, a->window_end_ns, &t) <
		    0)
			continue;
		a->cpus[a->n_cpus++] = (struct sonde_acct_cpu){c, t.busy_ns, t.idle_ns,
							       t.unknown_ns};
	}
	return 0;
}

static void build_free(struct build *b)
{
	sonde__u64map_free(&b->row_at);
	sonde__u64map_free(&b->named);
	free(b->starts);
	free(b->by_thread);
	free(b->last_in);
	free(b->defined);
	free(b->first_rec);
	free(b->first_in);
	free(b->first_cpu);
}

int sonde__acct_build(const struct sonde_spool *s, const struct sonde_profile_spool_opts *f,
		      struct sonde_acct *out)
{
	struct build b = {.s = s, .f = f, .a = out};
	int err;

	*out = (struct sonde_acct){0};
	sonde_spool__get_info(s, &b.info);
	sonde__prof_view_filters(f, b.info.header.start_monotonic_ns, &b.who, &b.when);
	out->period_ns = b.info.header.sample_period_ns;
	out->cpu_ns = calloc(SONDE_ACCT_MAX_CPU + 1, sizeof(*out->cpu_ns));
	if (!out->cpu_ns)
		return -ENOMEM;
	b.narrowed = f && (f->n_cpus || f->time_range);
	out->offcpu = sonde__acct_offcpu_recorded(s);
	sonde__acct_window(s, &out->window_start_ns, &out->window_end_ns);
	if ((err = make_tasks(&b)) < 0)
		goto fail;
	size_t n = out->n_tasks + 1;
	b.last_in = calloc(n, sizeof(*b.last_in));
	b.defined = malloc(n * sizeof(*b.defined));
	b.first_rec = malloc(n * sizeof(*b.first_rec));
	b.first_in = malloc(n * sizeof(*b.first_in));
	b.first_cpu = calloc(n, sizeof(*b.first_cpu));
	if (!b.last_in || !b.defined || !b.first_rec || !b.first_in || !b.first_cpu) {
		err = -ENOMEM;
		goto fail;
	}
	for (size_t k = 0; k < out->n_tasks; k++) {
		b.defined[k] = out->tasks[k].start_ns; /* by its definitions alone so far */
		b.first_rec[k] = b.first_in[k] = UINT64_MAX;
	}
	if ((err = add_samples(&b)) < 0 || (err = add_intervals(&b, false)) < 0 ||
	    (err = add_intervals(&b, true)) < 0 || (err = add_shorts(&b)) < 0 ||
	    (err = add_runs(&b)) < 0 || (err = add_queued(&b)) < 0 || (err = close_tasks(&b)) < 0 ||
	    (err = add_cpus(&b)) < 0)
		goto fail;
	out->thread_task = calloc((size_t)b.info.threads + 1, sizeof(*out->thread_task));
	if (!out->thread_task) {
		err = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 1; i <= b.info.threads; i++)
		if (b.by_thread[i - 1])
			out->thread_task[i] = (uint32_t)(b.by_thread[i - 1] - out->tasks) + 1;
	build_free(&b);
	for (size_t k = 0; k < out->n_tasks; k++)
		out->exact_on |= out->tasks[k].exact_on;
	for (size_t i = 0; i < out->n_rows; i++)
		for (int c = 0; c < SONDE_ACCT_COLS; c++) {
			out->rows[i].total += out->rows[i].ns[c];
			out->all[c] += out->rows[i].ns[c];
			out->all_total += out->rows[i].ns[c];
		}
	if (out->n_rows)
		qsort(out->rows, out->n_rows, sizeof(*out->rows), by_total);
	return 0;
fail:
	build_free(&b);
	sonde__acct_free(out);
	return err;
}

void sonde__acct_free(struct sonde_acct *a)
{
	free(a->rows);
	free(a->cpu_ns);
	free(a->cpus);
	free(a->tasks);
	free(a->thread_task);
	*a = (struct sonde_acct){0};
}

int sonde__acct_weights(const struct sonde_spool *s, struct sonde_acct_weights *out)
{
	struct sonde_spool_info in;
	struct sonde_spool_sample smp;
	struct sonde_acct a;
	uint32_t *first_thread = NULL;
	uint64_t *n = NULL, *k = NULL;
	int err;

	*out = (struct sonde_acct_weights){0};
	sonde_spool__get_info(s, &in);
	if ((err = sonde__acct_build(s, NULL, &a)) < 0)
		return err;
	err = -ENOMEM;
	out->n_samples = in.samples;
	out->sample_ns = calloc(in.samples ? in.samples : 1, sizeof(*out->sample_ns));
	const uint32_t *task_of_thread = a.thread_task;
	n = calloc(a.n_tasks + 1, sizeof(*n)); /* samples per task */
	k = calloc(a.n_tasks + 1, sizeof(*k)); /* of those, weighed so far */
	first_thread = calloc(a.n_tasks + 1, sizeof(*first_thread));
	if (!out->sample_ns || !n || !k || !first_thread)
		goto out;
	for (uint32_t i = in.threads; i >= 1; i--)
		if (task_of_thread[i])
			first_thread[task_of_thread[i] - 1] = i;
	for (uint64_t i = 0; sonde_spool__get_sample(s, i, &smp) == 0; i++)
		if (smp.thread <= in.threads && task_of_thread[smp.thread])
			n[task_of_thread[smp.thread] - 1]++;
	for (uint64_t i = 0; sonde_spool__get_sample(s, i, &smp) == 0; i++) {
		uint32_t t = smp.thread <= in.threads ? task_of_thread[smp.thread] : 0;
		const struct sonde_acct_task *task = t ? &a.tasks[t - 1] : NULL;
		out->sample_ns[i] = in.header.sample_period_ns;
		if (!task || !task->exact_on)
			continue;
		uint64_t on = task->ns[SONDE_ACCT_ON], c = n[t - 1];
		out->sample_ns[i] = on / c + (k[t - 1]++ < on % c);
		out->exact = true;
	}
	for (size_t i = 0; i < a.n_tasks; i++) {
		const struct sonde_acct_task *task = &a.tasks[i];
		if (!task->exact_on || n[i] || !task->ns[SONDE_ACCT_ON] || !first_thread[i])
			continue;
		struct sonde_acct_unsampled *u =
			realloc(out->unsampled, (out->n_unsampled + 1) * sizeof(*u));
		if (!u)
			goto out;
		out->unsampled = u;
		u[out->n_unsampled++] =
			(struct sonde_acct_unsampled){first_thread[i], task->pid, task->tid,
						      task->start_ns, task->ns[SONDE_ACCT_ON]};
		out->exact = true;
	}
	err = 0;
out:
	free(first_thread);
	free(n);
	free(k);
	sonde__acct_free(&a);
	if (err)
		sonde__acct_weights_free(out);
	return err;
}

void sonde__acct_weights_free(struct sonde_acct_weights *w)
{
	free(w->sample_ns);
	free(w->unsampled);
	*w = (struct sonde_acct_weights){0};
}
