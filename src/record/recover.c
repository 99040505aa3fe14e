/* Process identity and liveness, thread refresh, and recovery from loss.
 *
 * A full ring drops records of every kind, side band included: a lost MMAP2 leaves a
 * module unknown (or a stale one in place), a lost COMM exec keeps the old executable's
 * modules, a lost FORK hides a child, a lost EXIT keeps a dead process alive. Every report
 * of loss opens a gap; a sweep closes the open gaps by reconciling the tables with /proc:
 *
 *   1. drain    every ring and process, in order, every record stamped before the sweep,
 *               so that no sample taken before it is resolved against the table the
 *               sweep is about to change
 *   2. for each tracked process (processes the sweep adds are visited too):
 *        dead?     (/proc start time, or fork time for a child) -> retire its modules
 *        exec?     /proc/PID/exe changed -> retire, the maps below redefine everything
 *        maps      exec mappings missing from the table are added, entries no mapping
 *                  covers any more are dropped
 *        children  with follow_children, /proc/PID/task/TID/children not yet tracked
 *        threads   attached processes get events on threads that have none
 *
 * Sweeps run at most every REC_SWEEP_INTERVAL_NS from poll, and whenever flush is called.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "proc/maps.h"
#include "proc/proc.h"
#include "record/recorder.h"

enum {
	/* A child's /proc start time and its fork record's time are taken a few instructions
	 * apart, but a preempted fork can stretch that: a pid cannot be reused that fast. */
	FORK_START_SLACK_TICKS = 5,
};

static uint64_t ns_per_tick(void)
{
	long hz = sysconf(_SC_CLK_TCK);

	return 1000000000ull / (uint64_t)(hz > 0 ? hz : 100);
}

uint64_t sonde__rec_boot_ticks(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) / ns_per_tick();
}

void sonde__rec_read_exe(pid_t pid, uint64_t *dev, uint64_t *ino)
{
	char path[64];
	struct stat st;
	pid_t tid;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	int err = stat(path, &st) < 0 ? -errno : 0;
	/* a main thread that ended first has none; a live thread of the process shows it */
	if (err == -ENOENT && sonde__proc_live_task(pid, &tid) == 0 && tid != pid) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d/exe", (int)pid, (int)tid);
		err = stat(path, &st) < 0 ? -errno : 0;
	}
	if (err) {
		*dev = *ino = 0;
		return;
	}
	*dev = st.st_dev;
	*ino = st.st_ino;
}

void sonde__rec_life_init(struct sonde_recorder *r)
{
	struct timespec boot;

	clock_gettime(CLOCK_BOOTTIME, &boot);
	r->life.boot_offset_ns = (int64_t)((uint64_t)boot.tv_sec * 1000000000ull +
					   (uint64_t)boot.tv_nsec - sonde__rec_mono_now());
}

void sonde__rec_life_configure(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	r->life.follow_children = o->follow_children;
	r->life.exec_check = o->exec_check;
	r->life.exec_check_ctx = o->exec_check_ctx;
}

void sonde__rec_life_follow_all(struct sonde_recorder *r)
{
	r->life.follow_children = true;
}

bool sonde__rec_follows_children(const struct sonde_recorder *r)
{
	return r->life.follow_children;
}

int sonde__rec_check_exec(struct sonde_recorder *r, struct rec_process *p)
{
	if (!r->life.exec_check || !p->attached || p->exited)
		return 0;
	if (r->life.exec_check(r->life.exec_check_ctx, p->pid))
		return 0;
	return sonde__rec_stop_process(r, p);
}

void sonde__rec_note_loss(struct sonde_recorder *r, uint64_t end_ns)
{
	r->sum.lifecycle_gaps++;
	r->life.gaps_open++;
	if (end_ns > r->life.loss_end_ns)
		r->life.loss_end_ns = end_ns;
}

uint64_t sonde__rec_loss_end(const struct sonde_recorder *r)
{
	return r->life.loss_end_ns;
}

bool sonde__rec_is_forked_at(const struct sonde_recorder *r, uint64_t fork_ns, uint64_t ticks)
{
	uint64_t fork_ticks = (uint64_t)((int64_t)fork_ns + r->life.boot_offset_ns) / ns_per_tick();

	return fork_ticks + FORK_START_SLACK_TICKS >= ticks &&
	       ticks + FORK_START_SLACK_TICKS >= fork_ticks;
}

int sonde__rec_process_alive(struct sonde_recorder *r, struct rec_process *p)
{
	struct proc_stat st;
	bool same;

	if (p->exited)
		return 0;
	int err = sonde__proc_stat_read(p->pid, 0, &st);
	if (err && err != -ESRCH)
		return err;
	if (err || sonde__proc_stat_ended(&st)) {
		same = false;
	} else if (p->start_time) {
		same = st.start_time == p->start_time;
	} else if (p->fork_time) {
		same = sonde__rec_is_forked_at(r, p->fork_time, st.start_time);
		if (same)
			p->start_time = st.start_time;
	} else {
		/* Known only from its samples (its fork was lost before any sweep): the process
		 * now holding the pid is the best identity there is. */
		p->start_time = st.start_time;
		same = true;
	}
	if (same && p->thread_only) {
		/* the process runs on, but nothing of it is recorded once its threads ended */
		int alive = sonde__rec_threads_alive(r, p);
		if (alive < 0)
			return alive;
		same = alive;
	}
	if (!same) {
		/* retired by its exit record, or by the next sweep; its records still queued
		 * or in the rings were stamped before now */
		p->exited = true;
		p->exit_ns = sonde__rec_now(r);
	}
	return same;
}

int sonde__rec_threads_alive(struct sonde_recorder *r, const struct rec_process *p)
{
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));) {
		struct proc_stat st;
		if (t->pid != p->pid || !(t->own_events || t->announced))
			continue;
		int err = sonde__proc_stat_read(p->pid, t->tid, &st);
		if (err && err != -ESRCH)
			return err;
		if (!err && st.state != 'Z' && st.state != 'X')
			return 1;
	}
	return 0;
}

/* Threads whose events may be missing: no events of ours, no fork record, and started
 * before the process was attached (anything later inherited the events). */
static bool thread_needs_events(struct sonde_recorder *r, const struct rec_process *p, pid_t tid)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);
	struct proc_stat st;

	if (t && t->pid == p->pid && (t->own_events || t->announced))
		return false;
	if (sonde__proc_stat_read(p->pid, tid, &st) < 0 || st.state == 'Z' || st.state == 'X')
		return false;
	return st.start_time <= p->attach_ticks;
}

int sonde__rec_refresh_threads(struct sonde_recorder *r, struct rec_process *p)
{
	pid_t *tids;
	size_t n;
	int opened = 0, err = sonde__proc_list_tasks(p->pid, &tids, &n);

	if (err)
		return err;
	for (size_t i = 0; i < n && err >= 0; i++) {
		if (!thread_needs_events(r, p, tids[i]))
			continue;
		if (!sonde__tasks_thread_from_proc(&r->tasks, p, tids[i], p->since, NULL)) {
			err = -ENOMEM;
			break;
		}
		err = sonde__rec_open_thread_events(r, tids[i]);
		if (err == -ESRCH)
			err = 0; /* it exited meanwhile */
		else if (!err)
			opened++;
	}
	sonde__free(tids);
	r->sum.threads_refreshed += (uint64_t)opened;
	return err < 0 ? err : opened;
}

/* ---- maps ---- */

static bool is_anon(const char *path)
{
	return !*path || strcmp(path, "//anon") == 0 || strncmp(path, "[anon", 5) == 0;
}

/* Whether the table maps [pm->start, pm->end) to the same file at the same offsets. */
static bool table_covers(const struct rec_modtable *t, const struct proc_map *pm, const char *path)
{
	for (uint64_t a = pm->start; a < pm->end;) {
		const struct rec_module *m = sonde__modtable_find(t, a);
		if (!m)
			return false;
		bool anon = is_anon(path) && is_anon(m->path);
		if (!anon && m->pgoff + (a - m->start) != pm->pgoff + (a - pm->start))
			return false;
		if (!anon &&
		    (m->inode && pm->inode ? m->inode != pm->inode : strcmp(m->path, path) != 0))
			return false;
		a = m->end;
	}
	return true;
}

struct reconcile {
	struct sonde_recorder *r;
	size_t proc;
	uint64_t time;
	uint64_t (*ranges)[2]; /* the mappings /proc lists, in address order */
	size_t n, cap;
};

static int on_current_map(void *ctx, const struct proc_map *pm)
{
	struct reconcile *c = ctx;
	struct rec_process *p = sonde__tasks_proc_at(&c->r->tasks, c->proc);
	char path[4096];

	if (sonde__array_grow(&c->ranges, &c->cap, c->n + 1, sizeof(*c->ranges), 64) < 0)
		return -ENOMEM;
	c->ranges[c->n][0] = pm->start;
	c->ranges[c->n][1] = pm->end;
	c->n++;
	/* Every mapping counts as still there for drop_stale, executable or not: a JIT
	 * compiler flips its code pages between writable and executable, and a page that is
	 * writable at this moment still holds the code the table knows. Only executable ones
	 * are added. */
	if (!sonde__proc_map_is_code(pm))
		return 0;
	snprintf(path, sizeof(path), "%.*s", (int)pm->path_len, pm->path);
	if (table_covers(&p->mods, pm, path))
		return 0;
	struct rec_module m = {.start = pm->start,
			       .end = pm->end,
			       .pgoff = pm->pgoff,
			       .inode = pm->inode,
			       .path = path};
	c->r->sum.recovered_modules++;
	return sonde__rec_add_mapping(c->r, p, c->time, &m, pm->dev_major, pm->dev_minor);
}

static bool overlaps_any(const struct reconcile *c, uint64_t start, uint64_t end)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->ranges[i][0] < end && start < c->ranges[i][1])
			return true;
	return false;
}

/* Table entries that no current mapping overlaps were unmapped (munmap, dlclose) while
 * their record was lost; resolving through them could only misattribute. */
static int drop_stale(struct reconcile *c)
{
	struct rec_modtable *t = &sonde__tasks_proc_at(&c->r->tasks, c->proc)->mods;

	for (size_t i = 0; i < t->n;) {
		if (overlaps_any(c, t->m[i].start, t->m[i].end)) {
			i++;
			continue;
		}
		c->r->sum.stale_modules++;
		int err = sonde__modtable_remove(t, t->m[i].start, t->m[i].end);
		if (err)
			return err;
	}
	return 0;
}

static int reconcile_maps(struct sonde_recorder *r, size_t proc, uint64_t time)
{
	struct reconcile c = {.r = r, .proc = proc, .time = time};
	int err = sonde__proc_maps_read(sonde__tasks_proc_at(&r->tasks, proc)->pid, on_current_map, &c);

	if (!err)
		err = drop_stale(&c);
	sonde__free(c.ranges);
	return err;
}

/* A process running another executable than the one recorded missed its exec record. */
static int reconcile_exe(struct sonde_recorder *r, struct rec_process *p, uint64_t time)
{
	uint64_t dev, ino;
	int err = 0;

	sonde__rec_read_exe(p->pid, &dev, &ino);
	if (!ino)
		return 0;
	if (p->exe_ino && (dev != p->exe_dev || ino != p->exe_ino)) {
		r->sum.recovered_execs++;
		err = sonde__rec_retire(r, p, time);
		if (!err)
			err = sonde__rec_check_exec(r, p);
	}
	p->exe_dev = dev;
	p->exe_ino = ino;
	return err;
}

/* ---- descendants ---- */

static bool child_alive(struct sonde_recorder *r, struct rec_process *c,
			const struct proc_stat *st)
{
	(void)st; /* by (pid, start time) or fork time: a gone one is marked so */
	return sonde__rec_process_alive(r, c) == 1;
}

/* Starts tracking child pid of a followed process, unless it is tracked already. */
static int adopt_child(struct sonde_recorder *r, pid_t pid, uint64_t time)
{
	struct rec_process *c;
	struct proc_stat st;
	int err = sonde__rec_adopt_process(r, pid, time, child_alive, &st, &c);

	if (err <= 0)
		return err;
	/* Its start in monotonic time, a tick early: /proc rounds it down to a tick. */
	int64_t start_ns = (int64_t)(st.start_time * ns_per_tick()) - r->life.boot_offset_ns;
	start_ns -= (int64_t)ns_per_tick();
	c->since = start_ns > 0 ? (uint64_t)start_ns : 0;
	r->sum.recovered_processes++;
	/* Its maps are read when the sweep reaches it (it was appended to the table). */
	return 0;
}

static int discover_children(struct sonde_recorder *r, pid_t pid, uint64_t time)
{
	pid_t *kids;
	size_t n;
	int err = sonde__proc_list_children(pid, &kids, &n);

	if (err)
		return err == -ESRCH ? 0 : err;
	for (size_t i = 0; i < n && !err; i++)
		err = adopt_child(r, kids[i], time);
	sonde__free(kids);
	return err;
}

/* ---- the sweep ---- */

static void keep(int *first, int err)
{
	/* A process that exited, or that became unreadable (a setuid exec), is not a failure
	 * of the recording. */
	if (err && err != -ESRCH && err != -EACCES && err != -EPERM && !*first)
		*first = err;
}

/* A process the sweep found (its fork lost) has its main thread named now, before its
 * maps are read, not when its first sample is processed: by then it may have exec'd, and a
 * shell's child adopted before its exec, its samples stacked with the shell's modules read
 * here, was named after the program it went on to run. An exec between the two reads
 * comes as a COMM record, which renames it and retires the maps read here. */
static int name_with_its_maps(struct sonde_recorder *r, const struct rec_process *p)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, p->pid, true);

	if (!t)
		return -ENOMEM;
	sonde__tasks_name(&r->tasks, t, p->pid); /* unless it has one */
	return 0;
}

/* Steps of the sweep for the live process at index i. */
static int reconcile_process(struct sonde_recorder *r, size_t i, uint64_t time)
{
	int first = 0;

	keep(&first, reconcile_exe(r, sonde__tasks_proc_at(&r->tasks, i), time));
	keep(&first, name_with_its_maps(r, sonde__tasks_proc_at(&r->tasks, i)));
	keep(&first, reconcile_maps(r, i, time));
	/* A process attached by thread: only the children of its recorded threads have
	 * events, and /proc does not say which thread forked a child. */
	if (r->life.follow_children && !r->system_wide && !sonde__tasks_proc_at(&r->tasks, i)->thread_only)
		keep(&first, discover_children(r, sonde__tasks_proc_at(&r->tasks, i)->pid, time));
	/* The table may have grown: index again. */
	if (sonde__tasks_proc_at(&r->tasks, i)->attached && !sonde__tasks_proc_at(&r->tasks, i)->thread_only) {
		int n = sonde__rec_refresh_threads(r, sonde__tasks_proc_at(&r->tasks, i));
		keep(&first, n < 0 ? n : 0);
	}
	return first;
}

/* Process p, found dead by a sweep: its modules retire and its threads' lives end (a
 * process attached by thread runs on). by_pid lists the threads from the first dead
 * process of the sweep on (listed then: *listed). */
static int sweep_dead(struct sonde_recorder *r, struct rec_process *p, uint64_t time,
		      struct rec_tids_by_pid *by_pid, bool *listed)
{
	int first = 0;

	/* Dead with its modules still live: its exit record was lost. */
	r->sum.recovered_exits += p->has_spool_modules;
	keep(&first, sonde__rec_retire(r, p, time));
	if (p->thread_only)
		return first;
	if (!*listed) {
		int err = sonde__tasks_tids_by_pid(&r->tasks, by_pid);
		if (err)
			return err;
		*listed = true;
	}
	keep(&first, sonde__rec_process_gone(r, p, by_pid));
	return first;
}

static int sweep(struct sonde_recorder *r)
{
	int first = sonde__rec_drain(r);
	uint64_t gaps = r->life.gaps_open, time = sonde__rec_time(r, sonde__rec_now(r));
	struct rec_tids_by_pid by_pid = {0};
	bool listed = false;

	r->sum.recovery_sweeps++;
	for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++) {
		struct rec_process *p = sonde__tasks_proc_at(&r->tasks, i);
		int alive = sonde__rec_process_alive(r, p);
		if (alive < 0)
			keep(&first, alive);
		else if (!alive)
			keep(&first, sweep_dead(r, p, time, &by_pid, &listed));
		else
			keep(&first, reconcile_process(r, i, time));
	}
	sonde__tids_by_pid_free(&by_pid);
	if (r->system_wide) {
		/* Processes whose fork was lost: every one /proc lists that the table lacks. */
		keep(&first, sonde__rec_system_scan(r, 0));
		sonde__rec_forget_exited(r);
	}
	r->life.last_sweep = sonde__rec_now(r);
	if (first) {
		sonde_warn("recovery sweep: %s", sonde_strerror(first));
		return sonde__rec_error(r, first);
	}
	r->life.gaps_open -= gaps;
	r->life.loss_end_ns = 0;
	r->sum.gaps_recovered += gaps;
	return 0;
}

int sonde__rec_maybe_recover(struct sonde_recorder *r, bool force)
{
	if (force) {
		/* Losses the kernel has not written a record about yet. */
		uint64_t lost = sonde__rec_read_lost_counters(r);
		if (lost > r->life.lost_counted) {
			r->life.lost_counted = lost;
			sonde__rec_note_loss(r, sonde__rec_now(r));
		}
	}
	if (!r->life.gaps_open)
		return 0;
	if (!force && sonde__rec_now(r) - r->life.last_sweep < REC_SWEEP_INTERVAL_NS)
		return 0;
	return sweep(r);
}
