/* Opening perf events on a process's threads, the per-CPU rings they share, and the
 * diagnosis of refusals. */
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "record/recorder.h"

/* The events part (r->ev): attach.c opens events and maps rings, resize.c switches
 * generations and grows rings; other files call these. */

size_t sonde__rec_n_cpus(const struct sonde_recorder *r)
{
	return r->ev.n_cpus;
}

int sonde__rec_cpu(const struct sonde_recorder *r, size_t idx)
{
	return r->ev.cpus[idx];
}

size_t sonde__rec_n_events(const struct sonde_recorder *r)
{
	return r->ev.n_events;
}

uint32_t sonde__rec_gen(const struct sonde_recorder *r)
{
	return r->ev.gen;
}

static int watch(struct sonde_recorder *r, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event e = {.events = events, .data.u64 = data};

	return epoll_ctl(r->ev.epfd, EPOLL_CTL_ADD, fd, &e) < 0 ? -errno : 0;
}

int sonde__rec_watch_fd(struct sonde_recorder *r, int fd, uint64_t data)
{
	return watch(r, fd, EPOLLIN, data);
}

int sonde__rec_watch_ring(struct sonde_recorder *r, int fd, size_t cpu_idx)
{
	/* paced, a ring is watched for its hang-up alone (events.h) */
	return watch(r, fd, r->ev.fill_bps ? 0 : EPOLLIN, cpu_idx);
}

/* The kernel part's refusals (r->kern): attach.c records them as it chooses the event. */

void sonde__rec_kernel_time_refused(struct sonde_recorder *r, int err)
{
	r->kern.kernel_time_error = err;
}

int sonde__rec_kernel_time_error(const struct sonde_recorder *r)
{
	return r->kern.kernel_time_error;
}

void sonde__rec_kernel_summary(const struct sonde_recorder *r, struct sonde_record_summary *s)
{
	s->kernel_error = r->kern.kernel_error;
	s->kernel_time_error = r->kern.kernel_time_error;
	s->cycles_error = r->kern.cycles_error;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int sonde__rec_select_cpus(struct sonde_recorder *r, const int *want, size_t n)
{
	int *sel = sonde__malloc(n * sizeof(*sel));

	if (!sel)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool online = false;
		for (size_t j = 0; j < r->ev.n_cpus && !online; j++)
			online = r->ev.cpus[j] == want[i];
		if (!online) {
			sonde_error("CPU %d is not online (online: %d-%d, %zu CPUs)", want[i],
				    r->ev.cpus[0], r->ev.cpus[r->ev.n_cpus - 1], r->ev.n_cpus);
			sonde__free(sel);
			return -EINVAL;
		}
		sel[i] = want[i];
	}
	qsort(sel, n, sizeof(*sel), cmp_int);
	sonde__free(r->ev.cpus);
	r->ev.cpus = sel;
	r->ev.n_cpus = n;
	return 0;
}

enum { STOP_TIMEOUT_MS = 5000 };

static bool machine_has_cpu_pmu(void)
{
	/* Hybrid CPUs expose cpu_core/cpu_atom instead of cpu. */
	return access("/sys/bus/event_source/devices/cpu", F_OK) == 0 ||
	       access("/sys/bus/event_source/devices/cpu_core", F_OK) == 0;
}

static int read_int_file(const char *path, long *out);

/* Kernel sampling refused: say so once, then go on with user frames only (if user
 * sampling is refused too, the next probe reports that as the error). */
static void kernel_denied(struct sonde_recorder *r, int err)
{
	long paranoid = -1;

	read_int_file("/proc/sys/kernel/perf_event_paranoid", &paranoid);
	if (r->cfg.kernel) {
		sonde_warn("kernel frames not recorded: kernel sampling denied (%s; "
			   "kernel.perf_event_paranoid is %ld, kernel frames need <= 1 or "
			   "CAP_PERFMON); recording user frames only",
			   strerror(-err), paranoid);
		r->kern.kernel_error = err;
	} else {
		/* Asked for by default, not by the user: the summary says it, no warning. */
		sonde_info("kernel time not visible: kernel sampling denied (%s; "
			   "kernel.perf_event_paranoid is %ld); sampling user space only",
			   strerror(-err), paranoid);
	}
	r->kern.kernel_time_error = err;
	r->cfg.kernel = false;
	r->cfg.kernel_time = false;
}

int sonde__rec_choose_event(struct sonde_recorder *r, pid_t pid, enum sonde_record_event want)
{
	struct perf_event_attr a;
	bool try_cycles = want == SONDE_RECORD_EVENT_CYCLES ||
			  (want == SONDE_RECORD_EVENT_AUTO && machine_has_cpu_pmu());

	r->kern.cycles_error = 0;
	if (r->cfg.kind != PERF_KIND_TRACEPOINT) /* chosen by the options already */
		r->cfg.kind = try_cycles ? PERF_KIND_CYCLES : PERF_KIND_CPU_CLOCK;
	r->cfg.read_lost = true;
	for (;;) {
		/* A probe on the target's first CPU: it answers both "does this event exist here"
		 * and "may we profile this process" before anything is stopped. */
		sonde__perf_attr_fill(&a, &r->cfg);
		a.disabled = 1;
		a.enable_on_exec = 0;
		int fd = sonde__perf_open(&a, pid, r->ev.cpus[0]);
		if (fd >= 0) {
			const char *filter = sonde__rec_tracepoint_filter(r);
			int err = filter ? sonde__perf_set_filter(fd, filter) : 0;
			close(fd);
			if (err) {
				sonde_error(
					"tracepoint %s: the kernel refused the filter \"%s\": %s",
					r->sum.tracepoint, filter,
					sonde_strerror(err));
				r->ev.event_error_said = true;
			}
			return err;
		}
		if (fd == -EINVAL && r->cfg.read_lost) {
			r->cfg.read_lost = false; /* a kernel before 6.0 */
			continue;
		}
		/* A tracepoint always samples in the kernel: refused, it is refused whole. */
		if ((r->cfg.kernel || r->cfg.kernel_time) && (fd == -EACCES || fd == -EPERM) &&
		    r->cfg.kind != PERF_KIND_TRACEPOINT) {
			kernel_denied(r, fd);
			continue;
		}
		if (r->cfg.kind == PERF_KIND_CYCLES && sonde__perf_err_is_unsupported(fd)) {
			sonde_info("cycles event unavailable (%s), using cpu-clock", strerror(-fd));
			r->kern.cycles_error = fd;
			r->cfg.kind = PERF_KIND_CPU_CLOCK;
			r->cfg.read_lost = true;
			continue;
		}
		return fd;
	}
}

static int read_int_file(const char *path, long *out)
{
	FILE *f = fopen(path, "re");
	int ok = f && fscanf(f, "%ld", out) == 1;

	if (f)
		fclose(f);
	return ok ? 0 : -ENOENT;
}

static bool have_cap(int cap)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

void sonde__rec_explain_event_error(struct sonde_recorder *r, pid_t pid, int err)
{
	long paranoid = -1;

	if (r->ev.event_error_said)
		return;
	if (r->cfg.kind == PERF_KIND_TRACEPOINT && (err == -EACCES || err == -EPERM)) {
		read_int_file("/proc/sys/kernel/perf_event_paranoid", &paranoid);
		sonde_error("permission denied: tracepoint %s samples in the kernel, which needs "
			    "kernel.perf_event_paranoid <= 1 (it is %ld) or CAP_PERFMON",
			    r->sum.tracepoint, paranoid);
		return;
	}
	sonde__rec_explain_perf_error(pid, err);
}

void sonde__rec_explain_perf_error(pid_t pid, int err)
{
	long paranoid = -1, yama = -1;
	uid_t ruid = 0, euid = 0;
	bool perfmon = have_cap(38 /* CAP_PERFMON */) || have_cap(CAP_SYS_ADMIN);
	bool ptrace_cap = have_cap(CAP_SYS_PTRACE);

	if (err != -EACCES && err != -EPERM) {
		sonde_error("cannot open perf events on pid %d: %s", (int)pid, sonde_strerror(err));
		return;
	}
	read_int_file("/proc/sys/kernel/perf_event_paranoid", &paranoid);
	read_int_file("/proc/sys/kernel/yama/ptrace_scope", &yama);
	int uerr = sonde__proc_read_uids(pid, &ruid, &euid);
	if (uerr == 0 && euid != geteuid() && !ptrace_cap && !perfmon) {
		sonde_error("permission denied: pid %d belongs to uid %u; profiling another user's "
			    "process needs CAP_PERFMON or CAP_SYS_PTRACE "
			    "(kernel.perf_event_paranoid is %ld)",
			    (int)pid, (unsigned)euid, paranoid);
	} else if (yama >= 1 && !ptrace_cap) {
		sonde_error("permission denied on pid %d: kernel.yama.ptrace_scope is %ld "
			    "(/proc/sys/kernel/yama/ptrace_scope) and this process lacks "
			    "CAP_SYS_PTRACE",
			    (int)pid, yama);
	} else if (!perfmon) {
		sonde_error(
			"permission denied on pid %d: kernel.perf_event_paranoid is %ld "
			"(/proc/sys/kernel/perf_event_paranoid; user-space sampling needs <= 2) "
			"and this process lacks CAP_PERFMON",
			(int)pid, paranoid);
	} else {
		sonde_error("permission denied opening perf events on pid %d: %s", (int)pid,
			    sonde_strerror(err));
	}
}

/* Smallest ring holding two samples of the configured stack size, in pages. */
static unsigned min_ring_pages(const struct sonde_recorder *r)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), need = 2 * ((size_t)r->cfg.stack_bytes + 1024);
	unsigned pages = 1;

	while ((size_t)pages * page < need)
		pages *= 2;
	return pages;
}

/* Maps fd's ring as CPU cpu_idx's ring (or its replacement), watched by epoll. */
static int map_ring(struct sonde_recorder *r, struct perf_ring *ring, int fd, size_t cpu_idx,
		    unsigned pages, unsigned min)
{
	int err = sonde__perf_ring_map(ring, fd, r->ev.cpus[cpu_idx], pages, min);

	if (err) {
		sonde_error("cannot map a perf ring of %u pages: %s", pages, strerror(-err));
		return err;
	}
	if ((err = sonde__rec_watch_ring(r, fd, cpu_idx)) < 0) {
		sonde__perf_ring_unmap(ring);
		return err;
	}
	r->sum.ring_bytes_total += ring->map_len;
	return 0;
}

/* Routes event fd into its CPU's ring, creating the ring on first use; during a switch
 * that grows the ring, into its replacement. */
static int attach_to_ring(struct sonde_recorder *r, int fd, size_t cpu_idx)
{
	struct rec_ring *ring = &r->ev.rings[cpu_idx];

	if (r->ev.switching && ring->grow_pages) {
		if (ring->next_mapped)
			return sonde__perf_set_output(fd, ring->next.fd);
		int err = map_ring(r, &ring->next, fd, cpu_idx, ring->grow_pages, ring->grow_pages);
		ring->next_mapped = err == 0;
		return err;
	}
	if (ring->mapped)
		return sonde__perf_set_output(fd, ring->ring.fd);
	unsigned min = min_ring_pages(r), pages = r->ev.ring_pages < min ? min : r->ev.ring_pages;
	int err = map_ring(r, &ring->ring, fd, cpu_idx, pages, min);
	if (err)
		return err;
	ring->mapped = true;
	r->sum.ring_bytes = ring->ring.size;
	r->sum.rings++;
	return 0;
}

int sonde__rec_add_event(struct sonde_recorder *r, int fd, size_t cpu_idx, pid_t tid, bool on_exec,
			 uint32_t gen, uint32_t stack_bytes)
{
	if (sonde__array_grow(&r->ev.events, &r->ev.cap_events, r->ev.n_events + 1, sizeof(*r->ev.events), 64) <
	    0)
		return -ENOMEM;
	int err = sonde__rec_note_event_id(r, fd, tid, gen, stack_bytes);
	if (!err)
		err = attach_to_ring(r, fd, cpu_idx);
	if (err)
		return err;
	r->ev.events[r->ev.n_events++] =
		(struct rec_event){fd, (int)cpu_idx, tid, on_exec, false, gen, stack_bytes};
	return 0;
}

void sonde__rec_event_remove(struct sonde_recorder *r, size_t i)
{
	struct rec_event *e = &r->ev.events[i];
	uint64_t lost;

	if (r->cfg.read_lost && sonde__perf_read_lost(e->fd, &lost) == 0)
		r->ev.closed_lost += lost;
	close(e->fd);
	*e = r->ev.events[--r->ev.n_events];
}

/* Closes the events of tid (every thread when tid is 0) opened from index `from` on. An
 * event that owns a ring stays open (the ring's mapping and the other events' output
 * depend on it), disabled for good. */
void sonde__rec_close_events_from(struct sonde_recorder *r, pid_t tid, size_t from)
{
	for (size_t i = from; i < r->ev.n_events;) {
		struct rec_event *e = &r->ev.events[i];
		struct rec_ring *ring = &r->ev.rings[e->ring];
		if (tid && e->tid != tid) {
			i++;
			continue;
		}
		if (ring->ring.fd == e->fd || (ring->next_mapped && ring->next.fd == e->fd)) {
			sonde__perf_disable(e->fd);
			e->retired = true;
			i++;
			continue;
		}
		sonde__rec_event_remove(r, i);
	}
}

int sonde__rec_open_thread(struct sonde_recorder *r, pid_t tid, bool on_exec, bool no_inherit,
			   uint32_t stack_bytes, uint32_t gen)
{
	struct perf_event_attr a;
	struct perf_event_cfg cfg = r->cfg;
	size_t first = r->ev.n_events;

	cfg.disabled = true;
	cfg.enable_on_exec = on_exec;
	cfg.no_inherit = no_inherit;
	cfg.stack_bytes = stack_bytes;
	sonde__perf_attr_fill(&a, &cfg);
	for (size_t c = 0; c < r->ev.n_cpus; c++) {
		int fd = sonde__rec_perf_open(r, &a, tid, r->ev.cpus[c]);
		if (fd == -ENODEV)
			continue; /* CPU went offline */
		int err = fd < 0 ? fd
				 : sonde__rec_add_event(r, fd, c, tid, on_exec, gen, stack_bytes);
		if (err && fd >= 0)
			close(fd);
		/* a switch-out's stack is unwound as a sample's: the same copy */
		if (!err)
			err = sonde__rec_offcpu_open(r, &cfg, tid, c, on_exec, gen);
		if (err) {
			sonde__rec_close_events_from(r, tid, first);
			return err;
		}
	}
	return 0;
}

/* One event per (thread, CPU), all disabled or armed for exec, of the current generation:
 * the thread's own. no_inherit: nothing the thread creates inherits them (a thread
 * attached alone, without follow_children). */
static int open_thread(struct sonde_recorder *r, pid_t tid, bool on_exec, bool no_inherit)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);
	uint32_t bytes = t ? sonde__rec_thread_stack_bytes(r, t) : r->cfg.stack_bytes;
	int err = sonde__rec_open_thread(r, tid, on_exec, no_inherit, bytes, r->ev.gen);

	/* looked up again: opening may have created entries */
	if (!err && (t = sonde__tasks_thread(&r->tasks, tid, false))) {
		t->own_events = true;
		t->root_gen = r->ev.gen;
		t->root_tid = tid;
		t->inheritors = false;
		t->window = 0;
	}
	return err;
}

int sonde__rec_open_thread_events(struct sonde_recorder *r, pid_t tid)
{
	size_t first = r->ev.n_events;
	int err = open_thread(r, tid, false, false);

	for (size_t i = first; !err && r->enabled && i < r->ev.n_events; i++)
		err = sonde__perf_enable(r->ev.events[i].fd);
	if (err)
		sonde__rec_close_events_from(r, tid, first);
	return err;
}

void sonde__rec_close_thread_events(struct sonde_recorder *r, pid_t tid)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);

	/* A long recording of a process that keeps starting threads would otherwise hold
	 * their fds until the end. Closing an event destroys the events inherited from it:
	 * while threads it created may still use them, the next switch closes it instead. */
	if (t && t->own_events && sonde__rec_can_close_root(r, t))
		sonde__rec_close_events_from(r, tid, 0);
}

uint64_t sonde__rec_read_lost_counters(struct sonde_recorder *r)
{
	uint64_t total = r->ev.closed_lost;

	if (!r->cfg.read_lost)
		return 0;
	/* Inherited events (threads created after attaching) are not included: this is a
	 * lower bound, which still catches losses the kernel had no chance to report. */
	for (size_t i = 0; i < r->ev.n_events; i++) {
		uint64_t lost;
		if (sonde__perf_read_lost(r->ev.events[i].fd, &lost) == 0)
			total += lost;
	}
	return total;
}

static int open_threads(struct sonde_recorder *r, struct rec_process *p)
{
	pid_t *tids;
	size_t n, opened = 0;
	int err = sonde__proc_list_tasks(p->pid, &tids, &n);

	if (err)
		return err;
	for (size_t i = 0; i < n && !err; i++) {
		if (!sonde__tasks_thread_from_proc(&r->tasks, p, tids[i], p->since, NULL)) {
			err = -ENOMEM;
			break;
		}
		err = open_thread(r, tids[i], false, false);
		if (err == -ESRCH) {
			/* exited meanwhile: no exit record will come for it (it had no events),
			 * so counted in its process, it kept the process from ending at the
			 * last exit record (until a sweep) */
			err = 0;
			sonde__tasks_thread_remove(&r->tasks, tids[i],
						   sonde__rec_time(r, sonde__rec_now(r)));
			continue;
		}
		opened += err == 0;
	}
	sonde__free(tids);
	p->attach_ticks = sonde__rec_boot_ticks();
	if (!err && opened == 0)
		err = -ESRCH;
	return err;
}

int sonde__rec_check_target(pid_t pid)
{
	struct proc_stat st;
	int err = sonde__proc_stat_read(pid, 0, &st);

	if (err == -ESRCH || (!err && sonde__proc_stat_ended(&st))) {
		sonde_error("no such process: %d", (int)pid);
		return -ESRCH;
	}
	if (!err && (st.flags & PROC_PF_KTHREAD)) {
		/* SIGSTOP and ptrace do not apply to it, and it never runs user code. */
		sonde_error("pid %d is a kernel thread (%s): it has no user stacks to sample",
			    (int)pid, st.comm);
		return -SONDE_E_UNSUPPORTED;
	}
	return 0; /* anything else is for the attach itself to report */
}

/* ptrace is refused (Yama ptrace_scope, no CAP_SYS_PTRACE, traced already): the process
 * is attached while it runs, which may miss a thread or mapping created meanwhile (and a
 * wait it is in: offcpu.attached_running). */
static void stop_denied(struct sonde_recorder *r, pid_t pid, int err)
{
	long scope = 0;

	r->offcpu.attached_running = true;

	if (read_int_file("/proc/sys/kernel/yama/ptrace_scope", &scope) < 0)
		scope = 0;
	sonde_warn("cannot stop pid %d while attaching (ptrace: %s%s); attaching it running",
		   (int)pid, strerror(-err), scope > 0 ? ", kernel.yama.ptrace_scope is set" : "");
}

int sonde__rec_open_process(struct sonde_recorder *r, pid_t pid, enum sonde_attach_mode mode)
{
	struct proc_stat st;
	size_t first_event = r->ev.n_events;
	int err = sonde__proc_stat_read(pid, 0, &st);

	if (err)
		return err;
	if (sonde__proc_stat_ended(&st))
		return -ESRCH;
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, true);
	if (!p)
		return -ENOMEM;
	p->attached = true;
	p->exited = false;
	p->start_time = st.start_time;
	err = sonde__rec_offcpu_bpf_target(r, pid, mode == SONDE_ATTACH_ON_EXEC);
	if (err)
		return err;
	/* Its events are opened after this: every record of it is at least as recent. */
	p->since = sonde__rec_now(r);
	if (mode == SONDE_ATTACH_ON_EXEC) {
		/* Still a copy of the launcher: its mappings are replaced at exec. */
		struct rec_thread *t = sonde__tasks_thread(&r->tasks, pid, true);
		if (!t)
			return -ENOMEM;
		t->pid = pid;
		err = r->system_wide ? sonde__rec_system_take(r, p, false)
				     : open_thread(r, pid, true, false);
		p->attach_ticks = sonde__rec_boot_ticks();
		goto out;
	}
	sonde__rec_read_exe(p->pid, &p->exe_dev, &p->exe_ino);
	r->offcpu.attached_running |= mode != SONDE_ATTACH_STOP;
	if (mode == SONDE_ATTACH_STOP) {
		err = sonde__proc_stop(pid, st.start_time, STOP_TIMEOUT_MS, &p->stop);
		if (err == -EPERM || err == -EACCES) {
			stop_denied(r, pid, err);
			err = 0;
		}
		if (err)
			goto out;
	}
	err = r->system_wide ? sonde__rec_system_take(r, p, true) : open_threads(r, p);
	if (!err)
		err = sonde__rec_read_maps(r, p, sonde__rec_time(r, sonde__rec_now(r)));
out:
	if (err) {
		/* Nothing of it is recorded: it must not stay stopped, nor count as alive. */
		sonde__proc_resume(&p->stop);
		p->exited = true;
		sonde__rec_close_events_from(r, 0, first_event);
	}
	return err;
}

int sonde__rec_check_thread(pid_t tid, pid_t *pid)
{
	struct proc_stat st;
	int err = tid > 0 ? sonde__proc_read_tgid(tid, pid) : -ESRCH;

	if (!err)
		err = sonde__proc_stat_read(*pid, tid, &st);
	if (err == -ESRCH || (!err && (st.state == 'Z' || st.state == 'X'))) {
		sonde_error("no such thread: %d", (int)tid);
		return -ESRCH;
	}
	if (!err && (st.flags & PROC_PF_KTHREAD)) {
		sonde_error("tid %d is a kernel thread (%s): it has no user stacks to sample",
			    (int)tid, st.comm);
		return -SONDE_E_UNSUPPORTED;
	}
	return err;
}

/* Whether thread tid of p has events already (its own, or inherited from a thread of
 * ours that created it). */
static bool thread_recorded(struct sonde_recorder *r, const struct rec_process *p, pid_t tid)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);

	return t && t->pid == p->pid && (t->own_events || t->announced);
}

/* The process of a thread being attached: known already (1: alive), or made ready for it
 * (0). -errno. */
static int thread_target_process(struct sonde_recorder *r, pid_t pid, struct rec_process **out)
{
	struct proc_stat st;
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);
	int err = sonde__proc_stat_read(pid, 0, &st);

	if (err)
		return err;
	if (sonde__proc_stat_ended(&st))
		return -ESRCH;
	if (p && !p->exited && p->start_time == st.start_time) {
		*out = p;
		return 1;
	}
	if (p && (err = sonde__rec_process_reset(r, p, sonde__rec_time(r, sonde__rec_now(r)))))
		return err;
	if (!p && !(p = sonde__tasks_process(&r->tasks, pid, true)))
		return -ENOMEM;
	p->attached = true;
	p->thread_only = true;
	p->exited = false;
	p->start_time = st.start_time;
	p->since = sonde__rec_now(r);
	sonde__rec_read_exe(pid, &p->exe_dev, &p->exe_ino);
	*out = p;
	return 0;
}

/* Stops tid alone (mode STOP) and opens its events. 0 or -errno. */
static int open_target_thread(struct sonde_recorder *r, struct rec_process *p, pid_t tid,
			      enum sonde_attach_mode mode)
{
	r->offcpu.attached_running |= mode != SONDE_ATTACH_STOP;
	if (mode == SONDE_ATTACH_STOP) {
		int err = sonde__proc_stop_thread(p->pid, tid, p->start_time, STOP_TIMEOUT_MS,
						  &p->stop);
		if (err == -EPERM || err == -EACCES)
			stop_denied(r, tid, err);
		else if (err)
			return err;
	}
	if (!sonde__tasks_thread_from_proc(&r->tasks, p, tid, sonde__rec_now(r), NULL))
		return -ENOMEM;
	return open_thread(r, tid, false, !sonde__rec_follows_children(r));
}

int sonde__rec_open_thread_target(struct sonde_recorder *r, pid_t tid, enum sonde_attach_mode mode)
{
	struct rec_process *p = NULL;
	pid_t pid;
	size_t first_event = r->ev.n_events;
	int err = sonde__rec_check_thread(tid, &pid);

	if (err)
		return err;
	int known = thread_target_process(r, pid, &p);
	if (known < 0)
		return known;
	if (known && (!p->thread_only || thread_recorded(r, p, tid)))
		return SONDE_ATTACH_ALREADY; /* every thread of it, or this one, has events */
	err = sonde__rec_offcpu_bpf_thread(r, tid);
	if (!err)
		err = open_target_thread(r, p, tid, mode);
	/* The whole process's mappings: the thread runs its process's code, and mappings
	 * made later by threads without events are not reported to ours. */
	if (!err && !known)
		err = sonde__rec_read_maps(r, p, sonde__rec_time(r, sonde__rec_now(r)));
	if (!err && !known)
		p->attach_ticks = sonde__rec_boot_ticks();
	if (!err)
		return SONDE_ATTACH_ATTACHED;
	/* nothing of it is recorded: it must not stay stopped */
	sonde__proc_resume(&p->stop);
	sonde__rec_close_events_from(r, tid, first_event);
	if (!known)
		p->exited = true;
	return err;
}

int sonde__rec_enable_all(struct sonde_recorder *r, bool enable)
{
	int first = 0;

	for (size_t i = 0; i < r->ev.n_events; i++) {
		if (r->ev.events[i].retired || (enable && r->ev.events[i].armed_on_exec))
			continue;
		int err = enable ? sonde__perf_enable(r->ev.events[i].fd)
				 : sonde__perf_disable(r->ev.events[i].fd);
		if (err && !first)
			first = err;
	}
	if (enable)
		sonde__rec_offcpu_bpf_arm(r); /* its programs start with the events */
	return first;
}

int sonde__rec_stop_process(struct sonde_recorder *r, struct rec_process *p)
{
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));) {
		if (t->pid == p->pid) {
			sonde__rec_close_events_from(r, t->tid, 0);
			t->own_events = false;
		}
	}
	sonde__rec_close_events_from(r, p->pid, 0);
	sonde__proc_resume(&p->stop);
	int err = sonde__rec_retire(r, p, sonde__rec_time(r, sonde__rec_now(r)));
	p->attached = false;
	p->exited = true;
	/* records still queued or in the rings are of the process it no longer is */
	p->since = UINT64_MAX;
	return err;
}


void sonde__rec_exec_seen(struct sonde_recorder *r, pid_t pid)
{
	for (size_t i = 0; i < r->ev.n_events; i++)
		if (r->ev.events[i].tid == pid)
			r->ev.events[i].armed_on_exec = false;
}

void sonde__rec_reconcile_lost(struct sonde_recorder *r)
{
	uint64_t total = sonde__rec_read_lost_counters(r);

	if (total > r->sum.lost_events)
		r->sum.lost_events = total;
}
