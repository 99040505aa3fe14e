/* The recorder's task model (tasks.h): processes in an array indexed by pid (a hash),
 * threads in an open-addressing hash on tid, what the threads that exited left, by tid. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/array.h"
#include "record/tasks.h"

void sonde__tasks_free(struct rec_tasks *ts)
{
	for (size_t i = 0; i < ts->n_procs; i++)
		sonde__modtable_free(&ts->procs[i].mods);
	sonde__free(ts->procs);
	sonde__u64map_free(&ts->proc_index);
	sonde__free(ts->threads);
	sonde__free(ts->gone);
	ts->procs = NULL;
	ts->threads = NULL;
	ts->gone = NULL;
	ts->n_procs = ts->cap_procs = ts->n_threads = ts->cap_threads = 0;
}

/* ---- processes ---- */

struct rec_process *sonde__tasks_process(struct rec_tasks *ts, pid_t pid, bool create)
{
	/* a sample looks up its process: a scan of every process the machine ran was a few
	 * per cent of recording -a */
	const uint64_t *at = sonde__u64map_get(&ts->proc_index, (uint32_t)pid);
	if (at)
		return &ts->procs[*at];
	if (!create)
		return NULL;
	if (sonde__array_grow(&ts->procs, &ts->cap_procs, ts->n_procs + 1, sizeof(*ts->procs), 8) <
		    0 ||
	    sonde__u64map_put(&ts->proc_index, (uint32_t)pid, ts->n_procs) < 0)
		return NULL;
	struct rec_process *p = &ts->procs[ts->n_procs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->serial = ++ts->serials;
	ts->procs_created++;
	return p;
}

struct rec_process *sonde__tasks_process_at(struct rec_tasks *ts, pid_t pid, uint64_t time,
					    bool create)
{
	struct rec_process *p = sonde__tasks_process(ts, pid, create);

	return p && time >= p->since ? p : NULL;
}

void sonde__tasks_process_reset(struct rec_tasks *ts, struct rec_process *p)
{
	/* Threads of the old process whose exit went unseen: their names and spool
	 * definitions must not carry over to threads of the new one. */
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(ts, t));) {
		if (t->pid != p->pid)
			continue;
		t->defined = false;
		t->own_events = false;
		t->root_gen = 0;
		t->announced = false;
		t->born_ns = 0;
		t->selected = false;
		t->comm[0] = 0;
		t->seen_ns = 0;
		t->counted_in = 0;
	}
	sonde__tasks_process_exec(ts, p); /* what counted in the old one counts no more */
	p->exited = false;
	p->attached = false;
	p->thread_only = false;
	p->selected = false;
	p->start_time = 0;
	p->fork_time = 0;
	p->attach_ticks = 0;
	p->exe_dev = p->exe_ino = 0;
	p->since = 0;
	p->exit_ns = 0;
	sonde__proc_resume(&p->stop); /* holds nothing by now; frees what it would */
	memset(&p->stop, 0, sizeof(p->stop));
}

void sonde__tasks_process_exec(struct rec_tasks *ts, struct rec_process *p)
{
	p->threads = 0;
	p->main_exited = false;
	p->serial = ++ts->serials; /* the threads counted before count no more */
}

struct rec_process *sonde__tasks_process_exit(struct rec_tasks *ts, pid_t pid, uint64_t time)
{
	struct rec_process *p = sonde__tasks_process_at(ts, pid, time, false);

	/* Idempotent: a liveness check may have marked it exited already, later. */
	if (p && (!p->exited || time < p->exit_ns))
		p->exit_ns = time;
	if (p)
		p->exited = true;
	return p;
}

void sonde__tasks_forget_exited(struct rec_tasks *ts)
{
	size_t k = 0;

	for (size_t i = 0; i < ts->n_procs; i++) {
		struct rec_process *p = &ts->procs[i];
		if (p->exited && !p->has_spool_modules) {
			sonde__modtable_free(&p->mods);
			sonde__u64map_del(&ts->proc_index, (uint32_t)p->pid);
			continue;
		}
		if (k != i) {
			ts->procs[k] = *p;
			*sonde__u64map_get(&ts->proc_index, (uint32_t)p->pid) = k;
		}
		k++;
	}
	ts->n_procs = k;
}

/* ---- threads: open addressing with linear probing; tid 0 marks an empty slot ---- */

/* Whether comm is tid in decimal, what sonde__tasks_name gives a thread nothing named: a
 * label of that thread alone, no name for another (its creator's, its process's) to take. */
static bool bare_id(const char *comm, pid_t tid)
{
	char dec[16];

	snprintf(dec, sizeof(dec), "%d", (int)tid);
	return !strcmp(comm, dec);
}

/* t no longer counts in the threads of the process entry it counted in (if that is still
 * the entry of its pid). */
static void uncount(struct rec_tasks *ts, struct rec_thread *t)
{
	struct rec_process *p = t->counted_in ? sonde__tasks_process(ts, t->pid, false) : NULL;

	if (p && p->serial == t->counted_in && p->threads)
		p->threads--;
	t->counted_in = 0;
}

/* t, a thread of p from now on, counts in p's threads unless it is the main one. */
static void count(struct rec_tasks *ts, struct rec_thread *t, struct rec_process *p)
{
	if (t->counted_in == p->serial && t->pid == p->pid)
		return;
	uncount(ts, t);
	if (t->tid == p->pid)
		return;
	t->counted_in = p->serial;
	p->threads++;
}

static size_t slot_of(const struct rec_tasks *ts, pid_t tid)
{
	return ((uint32_t)tid * 2654435761u) & (ts->cap_threads - 1);
}

static int threads_grow(struct rec_tasks *ts)
{
	size_t old_cap = ts->cap_threads, cap = old_cap ? old_cap * 2 : 64;
	struct rec_thread *old = ts->threads, *nt = sonde__calloc(cap, sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	ts->threads = nt;
	ts->cap_threads = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].tid)
			continue;
		size_t s = slot_of(ts, old[i].tid);
		while (nt[s].tid)
			s = (s + 1) & (cap - 1);
		nt[s] = old[i];
	}
	sonde__free(old);
	return 0;
}

struct rec_thread *sonde__tasks_thread(struct rec_tasks *ts, pid_t tid, bool create)
{
	if (ts->cap_threads) {
		for (size_t s = slot_of(ts, tid);; s = (s + 1) & (ts->cap_threads - 1)) {
			if (ts->threads[s].tid == tid)
				return &ts->threads[s];
			if (!ts->threads[s].tid)
				break;
		}
	}
	if (!create || tid <= 0)
		return NULL;
	if ((ts->n_threads + 1) * 2 > ts->cap_threads && threads_grow(ts) < 0)
		return NULL;
	size_t s = slot_of(ts, tid);
	while (ts->threads[s].tid)
		s = (s + 1) & (ts->cap_threads - 1);
	memset(&ts->threads[s], 0, sizeof(ts->threads[s]));
	ts->threads[s].tid = tid;
	ts->n_threads++;
	ts->threads_created++;
	return &ts->threads[s];
}

struct rec_thread *sonde__tasks_next_thread(struct rec_tasks *ts, struct rec_thread *prev)
{
	size_t i = prev ? (size_t)(prev - ts->threads) + 1 : 0;

	for (; i < ts->cap_threads; i++)
		if (ts->threads[i].tid)
			return &ts->threads[i];
	return NULL;
}

static int pid_tid_cmp(const void *a, const void *b)
{
	const struct rec_pid_tid *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

int sonde__tasks_tids_by_pid(struct rec_tasks *ts, struct rec_tids_by_pid *x)
{
	x->n = 0;
	if (sonde__array_grow(&x->v, &x->cap, ts->n_threads, sizeof(*x->v), 64) < 0)
		return -ENOMEM;
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(ts, t));)
		x->v[x->n++] = (struct rec_pid_tid){t->pid, t->tid};
	if (x->n) /* v is NULL until a thread was listed */
		qsort(x->v, x->n, sizeof(*x->v), pid_tid_cmp);
	return 0;
}

const struct rec_pid_tid *sonde__tids_of(const struct rec_tids_by_pid *x, pid_t pid, size_t *n)
{
	size_t lo = 0, hi = x->n;

	while (lo < hi) { /* the first entry of pid or above */
		size_t mid = lo + (hi - lo) / 2;
		if (x->v[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (hi = lo; hi < x->n && x->v[hi].pid == pid; hi++)
		;
	*n = hi - lo;
	return *n ? &x->v[lo] : NULL;
}

void sonde__tids_by_pid_free(struct rec_tids_by_pid *x)
{
	if (!x)
		return;
	sonde__free(x->v);
	*x = (struct rec_tids_by_pid){0};
}

struct rec_thread *sonde__tasks_thread_from_proc(struct rec_tasks *ts, struct rec_process *p,
						 pid_t tid, uint64_t since, const char *comm)
{
	struct rec_thread *t = sonde__tasks_thread(ts, tid, true);

	if (!t)
		return NULL;
	count(ts, t, p);
	t->pid = p->pid;
	t->defined = false;
	t->announced = false;
	t->since = since;
	t->born_ns = 0;
	t->seen_ns = 0;
	if (comm)
		snprintf(t->comm, sizeof(t->comm), "%s", comm);
	else if (sonde__proc_read_comm(p->pid, tid, t->comm, sizeof(t->comm)) < 0)
		t->comm[0] = 0;
	return t;
}

struct rec_thread *sonde__tasks_fork(struct rec_tasks *ts, pid_t pid, pid_t ppid, pid_t tid,
				     pid_t ptid, uint64_t time)
{
	struct rec_thread *t = sonde__tasks_thread(ts, tid, true);

	if (!t)
		return NULL;
	struct rec_process *p = sonde__tasks_process_at(ts, pid, time, false);
	if (p)
		count(ts, t, p);
	else
		uncount(ts, t);
	t->pid = pid;
	t->defined = false;
	t->announced = true;
	t->own_events = false;
	t->since = time;
	t->born_ns = time;
	t->seen_ns = 0;
	/* Looked up after the insertion, which may have moved the table. */
	const struct rec_thread *parent = sonde__tasks_thread(ts, ptid, false);
	/* system-wide filters: what a filtered thread creates is recorded too */
	t->selected = parent && parent->selected && parent->pid == ppid;
	snprintf(t->comm, sizeof(t->comm), "%s",
		 parent && !bare_id(parent->comm, parent->tid) ? parent->comm : "");
	return t;
}

struct rec_thread *sonde__tasks_rename(struct rec_tasks *ts, pid_t pid, pid_t tid,
				       const char *comm, uint64_t time, bool *stale)
{
	struct rec_thread *t = sonde__tasks_thread(ts, tid, true);

	*stale = false;
	if (!t)
		return NULL;
	if (time < t->since) {
		*stale = true; /* of an earlier thread with this tid */
		return NULL;
	}
	/* A thread first seen here (its fork came before the recording, or was lost) is
	 * pid's: left without a process, its first sample took it for another process's
	 * thread and dropped this name, and once the task had left /proc it was written
	 * under its bare id. A tid that was another process's (its exit unseen) is pid's
	 * from now on, unselected as sonde__rec_system_selects leaves such a thread. */
	if (t->pid != pid) {
		if (t->pid)
			t->selected = false;
		uncount(ts, t);
		t->pid = pid;
	}
	/* A new name is a new spool thread from the next sample on. */
	snprintf(t->comm, sizeof(t->comm), "%s", comm ? comm : "");
	t->defined = false;
	return t;
}

int sonde__tasks_threads_of(const struct rec_tasks *ts, pid_t pid, pid_t except, pid_t **tids,
			    size_t *n)
{
	size_t k = 0, cap = 0;

	*tids = NULL;
	*n = 0;
	for (size_t i = 0; i < ts->cap_threads; i++) {
		const struct rec_thread *t = &ts->threads[i];
		if (!t->tid || t->pid != pid || t->tid == except)
			continue;
		if (sonde__array_grow(tids, &cap, k + 1, sizeof(**tids), 8) < 0) {
			sonde__free(*tids);
			*tids = NULL;
			return -ENOMEM;
		}
		(*tids)[k++] = t->tid;
	}
	*n = k;
	return 0;
}

void sonde__tasks_thread_remove(struct rec_tasks *ts, pid_t tid, uint64_t exit_ns)
{
	struct rec_thread *t = sonde__tasks_thread(ts, tid, false);

	if (!t)
		return;
	uncount(ts, t);
	bool keep = t->comm[0] || t->defined;
	if (keep && !ts->gone)
		ts->gone = sonde__calloc(REC_GONE_NAMES, sizeof(*ts->gone));
	if (keep && ts->gone) {
		struct rec_gone_name *g = &ts->gone[(uint32_t)tid % REC_GONE_NAMES];
		g->tid = tid;
		g->pid = t->pid;
		g->spool_id = t->defined ? t->spool_id : 0;
		g->exit_ns = exit_ns;
		g->dead = false;
		memcpy(g->comm, t->comm, sizeof(g->comm));
	}
	/* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
	size_t mask = ts->cap_threads - 1, i = (size_t)(t - ts->threads), j = i;
	ts->threads[i].tid = 0;
	for (;;) {
		j = (j + 1) & mask;
		if (!ts->threads[j].tid)
			break;
		size_t home = slot_of(ts, ts->threads[j].tid);
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			ts->threads[i] = ts->threads[j];
			ts->threads[j].tid = 0;
			i = j;
		}
	}
	ts->n_threads--;
}

struct rec_gone_name *sonde__tasks_gone(struct rec_tasks *ts, const struct rec_thread *t, pid_t tid,
					pid_t pid)
{
	struct rec_gone_name *g = ts->gone ? &ts->gone[(uint32_t)tid % REC_GONE_NAMES] : NULL;

	if (!g || g->tid != tid || g->pid != pid || g->dead || (t && t->since > g->exit_ns))
		return NULL;
	return g;
}

/* The name thread tid of pid had when it exited, if it is kept: into comm, true. (Of
 * another process's thread with that tid, pid reused, it is not its name.) */
static bool gone_name(struct rec_tasks *ts, pid_t tid, pid_t pid, char *comm, size_t size)
{
	const struct rec_gone_name *g = sonde__tasks_gone(ts, NULL, tid, pid);

	if (!g)
		return false;
	snprintf(comm, size, "%s", g->comm);
	return true;
}

/* The name thread tid of pid is known by, live or exited: into comm, true. Its bare id
 * is none: written for it alone, it made another thread of an unnamed process look named
 * (a thread of process P defined as "P", and the process's row labelled by its id though
 * the spool named a thread of it). */
static bool known_name(struct rec_tasks *ts, pid_t tid, pid_t pid, char *comm, size_t size)
{
	const struct rec_thread *t = sonde__tasks_thread(ts, tid, false);

	if (t && t->pid == pid && t->comm[0])
		snprintf(comm, size, "%s", t->comm);
	else if (sonde__proc_read_comm(pid, tid, comm, size) < 0 &&
		 !gone_name(ts, tid, pid, comm, size))
		return false;
	return !bare_id(comm, tid);
}

void sonde__tasks_name(struct rec_tasks *ts, struct rec_thread *t, pid_t pid)
{
	if (t->pid != pid) {
		/* The tid was another process's thread (its exit lost): not its name either. */
		uncount(ts, t);
		t->pid = pid;
		t->comm[0] = 0;
	}
	/* Never a bare id when a name was seen: a thread sampled after its exit record is
	 * named as it was then; one never named, as its process. */
	if (t->comm[0])
		return;
	if (sonde__proc_read_comm(pid, t->tid, t->comm, sizeof(t->comm)) == 0 ||
	    gone_name(ts, t->tid, pid, t->comm, sizeof(t->comm)))
		return;
	char comm[sizeof(t->comm)];
	if (t->tid != pid && known_name(ts, pid, pid, comm, sizeof(comm)))
		memcpy(t->comm, comm, sizeof(comm));
	else
		snprintf(t->comm, sizeof(t->comm), "%d", (int)t->tid);
}
