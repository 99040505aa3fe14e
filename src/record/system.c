/* System-wide recording (sonde_recorder__attach_system): one event per CPU for every task,
 * the side band of every task from those same events, and /proc for the processes already
 * running when the recording starts (perf's synthesis step).
 *
 * Order at the start: the per-CPU events are opened, /proc is read, then sampling is
 * enabled (reading every process's mappings takes long enough that enabled rings would fill
 * meanwhile). A process whose first record is a sample (it started between the scan and
 * the enable, or its fork record was lost) has its mappings read from /proc then.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "record/recorder.h"
#include "record/stack.h"

int sonde_cpu_list__parse(const char *list, int **cpus, size_t *n)
{
	size_t len = list ? strlen(list) : 0, max = 1;
	int *c;

	for (size_t i = 0; i < len; i++)
		max += list[i] == ',';
	/* a range can name many CPUs: bound it by the largest CPU number the parser takes */
	max = max * 4096 < (1u << 20) ? max * 4096 : (1u << 20);
	if (!(c = sonde__malloc(max * sizeof(*c))))
		return -ENOMEM;
	int got = len ? sonde__perf_parse_cpu_list(list, len, c, max) : -SONDE_E_FORMAT;
	if (got <= 0) {
		sonde__free(c);
		return -EINVAL;
	}
	/* duplicates ("0,0-1") name a CPU once */
	size_t k = 0;
	for (int i = 0; i < got; i++) {
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = c[j] == c[i];
		if (!dup)
			c[k++] = c[i];
	}
	*cpus = c;
	*n = k;
	return 0;
}

/* The comm filter, copied: names the kernel can report (at most 15 bytes). */
static int configure_comms(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	if (!o->n_filter_comms)
		return 0;
	r->filt.filter_comms = sonde__calloc(o->n_filter_comms, sizeof(*r->filt.filter_comms));
	if (!r->filt.filter_comms)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_filter_comms; i++) {
		const char *c = o->filter_comms[i];
		if (!c || !c[0] || strlen(c) >= sizeof(r->filt.filter_comms[i])) {
			sonde_error("comm filter '%s': a command name has 1 to 15 bytes",
				    c ? c : "(null)");
			return -EINVAL;
		}
		memcpy(r->filt.filter_comms[i], c, strlen(c) + 1);
	}
	r->filt.n_filter_comms = o->n_filter_comms;
	return 0;
}

/* Events per CPU over every task, kept to the filters here: -a, or a launched command's
 * tree. */
static void per_cpu_events(struct sonde_recorder *r)
{
	r->system_wide = true;
	r->filt.self_pid = getpid();
	/* Every process is followed, forks included (the events are not inherited: the
	 * per-CPU events see every task anyway). */
	sonde__rec_life_follow_all(r);
	r->cfg.no_children = false;
	r->cfg.cpu_wide = true;
	/* one event per CPU samples every thread: one copy size for all */
	sonde__rec_fixed_copy(r);
}

int sonde__rec_system_configure(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	per_cpu_events(r);
	r->sum.system_wide = 1;
	if (o->n_cpus) {
		int err = sonde__rec_select_cpus(r, o->cpus, o->n_cpus);
		if (err)
			return err;
	}
	if (o->n_filter_pids) {
		r->filt.filter_pids = sonde__malloc(o->n_filter_pids * sizeof(*r->filt.filter_pids));
		if (!r->filt.filter_pids)
			return -ENOMEM;
		memcpy(r->filt.filter_pids, o->filter_pids, o->n_filter_pids * sizeof(pid_t));
		r->filt.n_filter_pids = o->n_filter_pids;
	}
	r->filt.process_check = o->process_check;
	r->filt.process_check_ctx = o->process_check_ctx;
	if (o->n_filter_tids) {
		r->filt.filter_tids = sonde__malloc(o->n_filter_tids * sizeof(*r->filt.filter_tids));
		if (!r->filt.filter_tids)
			return -ENOMEM;
		memcpy(r->filt.filter_tids, o->filter_tids, o->n_filter_tids * sizeof(pid_t));
		r->filt.n_filter_tids = o->n_filter_tids;
	}
	return configure_comms(r, o);
}

/* Adds id to a filter's list unless it is there. 0 or -ENOMEM. */
static int filter_add(pid_t **ids, size_t *n, pid_t id)
{
	for (size_t i = 0; i < *n; i++)
		if ((*ids)[i] == id)
			return 0;
	pid_t *more = sonde__realloc(*ids, (*n + 1) * sizeof(*more));
	if (!more)
		return -ENOMEM;
	more[(*n)++] = id;
	*ids = more;
	return 0;
}

int sonde__rec_system_launched(struct sonde_recorder *r, pid_t pid)
{
	per_cpu_events(r);
	r->filt.launched = true;
	return filter_add(&r->filt.filter_pids, &r->filt.n_filter_pids, pid);
}

bool sonde__rec_system_launched_tree(const struct sonde_recorder *r)
{
	return r->filt.launched;
}

int sonde__rec_system_open(struct sonde_recorder *r)
{
	struct perf_event_attr a;
	struct perf_event_cfg cfg = r->cfg;

	cfg.disabled = true;
	sonde__perf_attr_fill(&a, &cfg);
	for (size_t c = 0; c < sonde__rec_n_cpus(r); c++) {
		int fd = sonde__rec_perf_open(r, &a, -1, sonde__rec_cpu(r, c));
		if (fd == -ENODEV)
			continue; /* went offline since it was listed */
		int err = fd < 0 ? fd
				 : sonde__rec_add_event(r, fd, c, -1, false, sonde__rec_gen(r),
							r->cfg.stack_bytes);
		if (err && fd >= 0)
			close(fd);
		if (!err)
			err = sonde__rec_offcpu_open(r, &r->cfg, -1, c, false, sonde__rec_gen(r));
		if (err)
			return err;
	}
	return sonde__rec_n_events(r) ? 0 : -ENODEV;
}

static bool filtered_in(const struct sonde_recorder *r, pid_t pid)
{
	for (size_t i = 0; i < r->filt.n_filter_pids; i++)
		if (r->filt.filter_pids[i] == pid)
			return true;
	return false;
}

bool sonde__rec_system_pids_only(const struct sonde_recorder *r)
{
	return r->filt.filter_pids && !r->filt.filter_tids && !r->filt.filter_comms;
}

size_t sonde__rec_system_pids(const struct sonde_recorder *r, const pid_t **pids)
{
	*pids = r->filt.filter_pids;
	return r->filt.n_filter_pids;
}

bool sonde__rec_system_limited(const struct sonde_recorder *r)
{
	return (r->filt.n_filter_pids || r->filt.n_filter_tids) && !r->filt.n_filter_comms;
}

static bool comm_selected(struct sonde_recorder *r, struct rec_thread *t, pid_t pid)
{
	/* named by COMM records and forks as they came, in time order with the samples; a
	 * thread first seen at this sample is named from /proc */
	if (!t->comm[0] && sonde__proc_read_comm(pid, t->tid, t->comm, sizeof(t->comm)) < 0)
		return false;
	for (size_t i = 0; i < r->filt.n_filter_comms; i++)
		if (!strcmp(r->filt.filter_comms[i], t->comm))
			return true;
	return false;
}

bool sonde__rec_system_selects(struct sonde_recorder *r, const struct rec_process *p, pid_t tid)
{
	if (!r->filt.n_filter_pids && !r->filt.n_filter_tids && !r->filt.n_filter_comms)
		return true;
	if (p->selected)
		return true;
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, r->filt.n_filter_comms != 0);
	if (t && t->pid != p->pid) {
		/* the tid was another process's thread, whose exit went unseen */
		t->pid = p->pid;
		t->selected = false;
		t->comm[0] = 0;
	}
	if (t && t->selected)
		return true;
	return t && r->filt.n_filter_comms && comm_selected(r, t, p->pid);
}

enum { CHECK_ALLOWED = 1, CHECK_REFUSED = 2 };

bool sonde__rec_system_allowed(struct sonde_recorder *r, pid_t pid)
{
	if (!r->filt.process_check)
		return true;
	uint64_t *v = sonde__u64map_get(&r->filt.checked, (uint64_t)pid);
	if (v)
		return *v == CHECK_ALLOWED;
	bool ok = r->filt.process_check(r->filt.process_check_ctx, pid);
	/* out of memory: asked again at its next record, never let through unasked */
	sonde__u64map_put(&r->filt.checked, (uint64_t)pid, ok ? CHECK_ALLOWED : CHECK_REFUSED);
	if (!ok)
		r->sum.processes_refused++;
	return ok;
}

void sonde__rec_system_forget(struct sonde_recorder *r, pid_t pid)
{
	sonde__u64map_del(&r->filt.checked, (uint64_t)pid);
}

static bool filter_tracks(struct sonde_recorder *r, pid_t pid, pid_t parent)
{
	if (!sonde__rec_system_limited(r) || filtered_in(r, pid))
		return true;
	/* Known already (a filtered process, or a descendant of one). */
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);
	if (p && !p->exited)
		return true;
	struct rec_process *pp = parent > 0 ? sonde__tasks_process(&r->tasks, parent, false) : NULL;
	return pp && !pp->exited;
}

bool sonde__rec_system_tracks(struct sonde_recorder *r, pid_t pid, pid_t parent)
{
	if (pid == r->filt.self_pid)
		return false;
	return filter_tracks(r, pid, parent) && sonde__rec_system_allowed(r, pid);
}

/* The names of pid's threads, so that a thread that exits before its first sample is
 * processed still has one. */
static int synthesize_threads(struct sonde_recorder *r, struct rec_process *p)
{
	pid_t *tids;
	size_t n;
	int err = sonde__proc_list_tasks(p->pid, &tids, &n);

	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (!sonde__tasks_thread_from_proc(&r->tasks, p, tids[i], p->since, NULL)) {
			err = -ENOMEM;
			break;
		}
	}
	sonde__free(tids);
	return err;
}

/* The entry is that process: not exited, of the same start time (or of an unknown one). */
static bool same_start(struct sonde_recorder *r, struct rec_process *p, const struct proc_stat *st)
{
	(void)r;
	return !p->exited && (!p->start_time || p->start_time == st->start_time);
}

int sonde__rec_system_adopt(struct sonde_recorder *r, pid_t pid, uint64_t since, uint64_t time)
{
	struct proc_stat st;
	struct rec_process *p;

	if (!sonde__rec_system_allowed(r, pid))
		return 0; /* nothing of it is read */
	int err = sonde__rec_adopt_process(r, pid, time, same_start, &st, &p);
	if (err <= 0)
		return err;
	p->since = since;
	if (st.flags & PROC_PF_KTHREAD) {
		/* a kernel thread: one thread, named in the stat just read, and no user space
		 * (most of a machine's processes: 61 of 68 on an idle VM) */
		r->sum.processes_synthesized++;
		return sonde__tasks_thread_from_proc(&r->tasks, p, pid, since, st.comm) ? 0 : -ENOMEM;
	}
	err = synthesize_threads(r, p);
	if (!err)
		err = sonde__rec_read_maps(r, p, time);
	if (!err && st.state == 'R' && !r->enabled)
		sonde__rec_unwind_warm(r, p->pid, &p->mods);
	if (err == -ESRCH || err == -EACCES) {
		/* exited meanwhile, or a process whose maps we may not read (then its samples
		 * keep raw addresses) */
		err = 0;
	}
	r->sum.processes_synthesized++;
	return err;
}

/* A filtered process (or a descendant of one): every thread of it is recorded, and the
 * BPF off-CPU programs track it (they add the children forked from now on themselves; one
 * forked before, found in /proc, they would never see), unless it was attached, which
 * made it their target (a launched command's from its exec on). 0 or -errno. */
static int select_process(struct sonde_recorder *r, pid_t pid)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (!p)
		return 0;
	p->selected = true;
	return p->attached ? 0 : sonde__rec_offcpu_bpf_target(r, pid, false);
}

int sonde__rec_system_take(struct sonde_recorder *r, struct rec_process *p, bool running)
{
	int err = filter_add(&r->filt.filter_pids, &r->filt.n_filter_pids, p->pid);

	if (err)
		return err;
	p->selected = true;
	return running ? synthesize_threads(r, p) : 0;
}

/* Adds the filtered processes' descendants that exist already, depth first. */
static int adopt_descendants(struct sonde_recorder *r, pid_t pid, uint64_t since, uint64_t time,
			     int depth)
{
	pid_t *kids;
	size_t n;
	int err = depth > 64 ? 0 : sonde__proc_list_children(pid, &kids, &n);

	if (err || depth > 64)
		return err == -ESRCH ? 0 : err;
	for (size_t i = 0; i < n && !err; i++) {
		err = sonde__rec_system_adopt(r, kids[i], since, time);
		if (!err)
			err = select_process(r, kids[i]);
		if (!err)
			err = adopt_descendants(r, kids[i], since, time, depth + 1);
	}
	sonde__free(kids);
	return err;
}

/* A filtered thread: its process read from /proc, the thread marked. "no such thread"
 * (-ESRCH) and kernel threads (-SONDE_E_UNSUPPORTED) are errors, logged. */
static int adopt_thread(struct sonde_recorder *r, pid_t tid, uint64_t since, uint64_t time)
{
	pid_t pid;
	int err = sonde__rec_check_thread(tid, &pid);

	if (!err)
		err = sonde__rec_system_adopt(r, pid, since, time);
	struct rec_thread *t = err ? NULL : sonde__tasks_thread(&r->tasks, tid, true);
	if (!err && !t)
		err = -ENOMEM;
	if (err)
		return err;
	t->pid = pid;
	t->selected = true;
	return 0;
}

int sonde__rec_system_take_thread(struct sonde_recorder *r, pid_t tid)
{
	uint64_t time = sonde__rec_time(r, sonde__rec_now(r));
	int err = filter_add(&r->filt.filter_tids, &r->filt.n_filter_tids, tid);

	if (!err)
		err = adopt_thread(r, tid, time, time);
	if (!err)
		err = sonde__rec_offcpu_bpf_thread(r, tid);
	/* adopted running: a wait it is in began unseen */
	r->offcpu.attached_running = true;
	return err;
}

int sonde__rec_system_scan(struct sonde_recorder *r, uint64_t since)
{
	uint64_t time = sonde__rec_time(r, sonde__rec_now(r));
	int err = 0;

	for (size_t i = 0; i < r->filt.n_filter_pids && !err; i++) {
		err = sonde__rec_system_adopt(r, r->filt.filter_pids[i], since, time);
		if (!err)
			err = select_process(r, r->filt.filter_pids[i]);
		if (!err)
			err = adopt_descendants(r, r->filt.filter_pids[i], since, time, 0);
	}
	for (size_t i = 0; i < r->filt.n_filter_tids && !err; i++)
		err = adopt_thread(r, r->filt.filter_tids[i], since, time);
	if (err || sonde__rec_system_limited(r))
		return err;
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	struct dirent *e;
	while (!err && (e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || pid == r->filt.self_pid)
			continue;
		err = sonde__rec_system_adopt(r, (pid_t)pid, since, time);
	}
	closedir(d);
	return err;
}

int sonde__rec_perf_open(struct sonde_recorder *r, struct perf_event_attr *a, pid_t pid, int cpu)
{
	int fd = sonde__perf_open(a, pid, cpu);

	if (fd < 0 || !r->filt.tracepoint_filter)
		return fd;
	int err = sonde__perf_set_filter(fd, r->filt.tracepoint_filter);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

const char *sonde__rec_tracepoint_filter(const struct sonde_recorder *r)
{
	return r->filt.tracepoint_filter;
}

bool sonde__rec_is_self(const struct sonde_recorder *r, pid_t pid)
{
	return pid == r->filt.self_pid;
}

bool sonde__rec_system_unfiltered(const struct sonde_recorder *r)
{
	return !r->filt.process_check && !r->filt.n_filter_pids && !r->filt.n_filter_tids &&
	       !r->filt.n_filter_comms;
}

bool sonde__rec_system_checks_processes(const struct sonde_recorder *r)
{
	return r->filt.process_check != NULL;
}

int sonde__rec_set_tracepoint_filter(struct sonde_recorder *r, const char *filter)
{
	sonde__free(r->filt.tracepoint_filter);
	r->filt.tracepoint_filter = sonde__strdup(filter);
	return r->filt.tracepoint_filter ? 0 : -ENOMEM;
}

void sonde__rec_filters_free(struct sonde_recorder *r)
{
	sonde__free(r->filt.filter_pids);
	sonde__free(r->filt.tracepoint_filter);
	sonde__u64map_free(&r->filt.checked);
	sonde__free(r->filt.filter_tids);
	sonde__free(r->filt.filter_comms);
}

void sonde__rec_forget_exited(struct sonde_recorder *r)
{
	sonde__tasks_forget_exited(&r->tasks);
}
