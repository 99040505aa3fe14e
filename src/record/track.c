/* Processes, threads and modules, as the side-band records change them, and the samples
 * that refer to them. Everything here runs in timestamp order (out of the perf stream). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "proc/maps.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "symbol/elfimg.h"

/* Thread tid of pid exits at exit_ns (what the recorder knows of it reaches `end`): its
 * off-CPU state ends (what that writes of it comes before its EXIT, which is written when
 * it is defined in the spool), and what it left is kept for the records of it that come
 * after its exit record (sonde__rec_thread_id writes them under the same spool thread). */
static int thread_exit(struct sonde_recorder *r, pid_t tid, pid_t pid, uint64_t exit_ns,
		       uint64_t end, bool exit_record)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);
	int err;

	if (!t)
		return 0;
	/* not through sonde__rec_time: an EXIT's time need not follow the records' */
	err = sonde__rec_offcpu_forget(r, t, end, exit_record ? exit_ns : 0);
	if (!err && t->defined && t->pid == pid)
		err = sonde_spool_writer__add_exit(r->spool, exit_ns, t->spool_id);
	if (t->pid != pid)
		t->defined = false; /* another process's thread: nothing of it is kept */
	sonde__tasks_thread_remove(&r->tasks, tid, exit_ns);
	return err ? sonde__rec_error(r, err) : 0;
}

int sonde__rec_thread_dead(struct sonde_recorder *r, pid_t tid, pid_t pid, uint64_t time)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);
	struct rec_gone_name *g = sonde__tasks_gone(&r->tasks, t, tid, pid);
	int err = 0;

	if (t && t->pid == pid && time >= t->since) {
		sonde__rec_close_thread_events(r, tid);
		if (g) {
			/* its records after its exit record: it has its EXIT */
			err = sonde__rec_offcpu_forget(r, t, time, 0);
			sonde__tasks_thread_remove(&r->tasks, tid, g->exit_ns);
		} else {
			err = thread_exit(r, tid, pid, time, time, false); /* that record lost */
		}
	}
	if ((g = sonde__tasks_gone(&r->tasks, NULL, tid, pid)))
		g->dead = true;
	return err ? sonde__rec_error(r, err) : 0;
}

int sonde__rec_process_gone(struct sonde_recorder *r, const struct rec_process *p,
			    const struct rec_tids_by_pid *by_pid)
{
	pid_t pid = p->pid;
	size_t n;
	const struct rec_pid_tid *tids = sonde__tids_of(by_pid, pid, &n);
	int err = 0;

	/* A thread exited after its last sighting, in a loss (outside one its exit record
	 * would be there): its life ends with the latest loss, when that ended after the
	 * sighting, the time since the sighting unknown (docs/record.md, "Accounting"). Not
	 * at the sweep, or at the end of the recording with no sweep ending it: a loaded
	 * recording that lost the exits of a workload's processes counted them 0.4 to 1.6 s
	 * longer than their wall time. Not at the sighting: a loaded recording stopped for
	 * 1.5 s (SIGSTOP) as a writer's last 0.47 s went by counted none of them, unknown or
	 * not. Not with the first loss after the sighting: a sleeping thread has no records
	 * between two losses, and a short loss, then the long one its exit was in, ended
	 * four lives 0.36 s early. A thread never seen is left as it was. */
	for (size_t i = 0; i < n && !err; i++) {
		struct rec_thread *t = sonde__tasks_thread(&r->tasks, tids[i].tid, false);
		if (!t || t->pid != pid || !t->seen_ns)
			continue;
		uint64_t end = sonde__rec_loss_end(r);
		if (end < t->seen_ns)
			end = t->seen_ns; /* no loss reported since: none to bound it */
		sonde__rec_close_thread_events(r, tids[i].tid);
		err = thread_exit(r, tids[i].tid, pid, end, end, false);
		/* Gone by the sweep (which drained every ring first): a record of the tid
		 * from now on is another task's, the pid given again with its fork lost (the
		 * threads the sweep reads from /proc for it hold no spool thread). */
		struct rec_gone_name *g = sonde__tasks_gone(&r->tasks, NULL, tids[i].tid, pid);
		if (g)
			g->dead = true;
	}
	return err;
}

static uint32_t mapping_flags(const char *path, size_t *path_len)
{
	size_t n = strlen(path);
	static const char deleted[] = " (deleted)";

	*path_len = n;
	if (strcmp(path, "[vdso]") == 0)
		return SONDE_MODULE_EXEC | SONDE_MODULE_VDSO;
	if (!*path || strcmp(path, "//anon") == 0 || strncmp(path, "[anon", 5) == 0)
		return SONDE_MODULE_EXEC | SONDE_MODULE_JIT;
	if (n > sizeof(deleted) - 1 && strcmp(path + n - (sizeof(deleted) - 1), deleted) == 0)
		return SONDE_MODULE_EXEC | SONDE_MODULE_DELETED;
	return SONDE_MODULE_EXEC;
}

int sonde__rec_add_mapping(struct sonde_recorder *r, struct rec_process *p, uint64_t time,
			   const struct rec_module *m, uint32_t maj, uint32_t min)
{
	struct rec_module mod = *m;
	size_t path_len;
	const struct rec_build_id *b = NULL;

	mod.flags = mapping_flags(m->path, &path_len);
	mod.dev = m->inode ? makedev(maj, min) : 0;
	/* A deleted file is still reachable through map_files while the process lives. */
	if (m->inode)
		b = sonde__rec_build_id(r, p->pid, &mod); /* and the generation, when unknown */

	struct sonde_spool_module_def def = {
		.pid = (uint32_t)p->pid,
		.flags = mod.flags,
		.start = mod.start,
		.end = mod.end,
		.pgoff = mod.pgoff,
		.dev = mod.dev,
		.inode = mod.inode,
		.build_id = b && b->len ? b->id : NULL,
		.build_id_len = b ? b->len : 0,
		.path = mod.path,
	};
	int err = sonde_spool_writer__add_module(r->spool, sonde__rec_time(r, time), &def, &mod.id);
	if (err)
		return sonde__rec_error(r, err);
	p->has_spool_modules = true;
	err = sonde__modtable_insert(&p->mods, &mod);
	return err ? sonde__rec_error(r, err) : 0;
}

struct maps_ctx {
	struct sonde_recorder *r;
	struct rec_process *p;
	uint64_t time;
};

static int on_map(void *ctx, const struct proc_map *pm)
{
	struct maps_ctx *c = ctx;
	char path[4096];

	if (!sonde__proc_map_is_code(pm))
		return 0;
	snprintf(path, sizeof(path), "%.*s", (int)pm->path_len, pm->path);
	struct rec_module m = {.start = pm->start,
			       .end = pm->end,
			       .pgoff = pm->pgoff,
			       .inode = pm->inode,
			       .path = path};
	return sonde__rec_add_mapping(c->r, c->p, c->time, &m, pm->dev_major, pm->dev_minor);
}

int sonde__rec_read_maps(struct sonde_recorder *r, struct rec_process *p, uint64_t time)
{
	struct maps_ctx c = {r, p, time};

	return sonde__proc_maps_read(p->pid, on_map, &c);
}

int sonde__rec_retire(struct sonde_recorder *r, struct rec_process *p, uint64_t time)
{
	int err = 0;

	if (p->has_spool_modules)
		err = sonde_spool_writer__retire_process(r->spool, sonde__rec_time(r, time),
							 (uint32_t)p->pid);
	p->has_spool_modules = false;
	sonde__modtable_clear(&p->mods);
	return err ? sonde__rec_error(r, err) : 0;
}

/* The spool id of a thread, defining it on first use (and after a rename). A record of a
 * thread processed after its exit record (per-CPU events sample it on its way out; a wait
 * it was preempted in on the way out is written at its end) is the exited task's: it is
 * written under the spool thread the task had, or, when the task was never defined,
 * under one defined now and given the EXIT it would have had; never defined a second
 * time without an exit (docs/record.md, "Accounting"). */
int sonde__rec_thread_id(struct sonde_recorder *r, uint64_t time, pid_t pid, pid_t tid,
			 uint32_t *id)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, true);

	if (!t)
		return sonde__rec_error(r, -ENOMEM);
	if (t->defined && t->pid == pid) {
		*id = t->spool_id;
		return 0;
	}
	struct rec_gone_name *g = sonde__tasks_gone(&r->tasks, t, tid, pid);
	if (g && g->spool_id) {
		t->pid = pid;
		memcpy(t->comm, g->comm, sizeof(t->comm));
		t->spool_id = g->spool_id;
		t->defined = true;
		*id = t->spool_id;
		return 0;
	}
	sonde__tasks_name(&r->tasks, t, pid);
	/* a task forked in the recording is defined at its creation, where its life starts
	 * (the run queue it waits in before its first switch-in is part of it) */
	uint64_t at = t->born_ns ? t->born_ns : sonde__rec_time(r, time);
	t->born_ns = 0;
	int err = sonde_spool_writer__add_thread(r->spool, at, (uint32_t)pid, (uint32_t)tid,
						 t->comm, &t->spool_id);
	if (!err && g) {
		/* not through sonde__rec_time: it exited before this record */
		err = sonde_spool_writer__add_exit(r->spool, g->exit_ns, t->spool_id);
		g->spool_id = t->spool_id;
	}
	if (err)
		return sonde__rec_error(r, err);
	t->defined = true;
	*id = t->spool_id;
	return 0;
}

bool sonde__rec_thread_exiting(struct sonde_recorder *r, pid_t pid, pid_t tid, uint64_t time)
{
	const struct rec_gone_name *g = sonde__tasks_gone(
		&r->tasks, sonde__tasks_thread(&r->tasks, tid, false), tid, pid);

	if (!g || time < g->exit_ns)
		return false;
	/* recorded: written to the spool, or kept in the table only if recorded (with a
	 * filter decided at each record, comm or process check, every task is kept) */
	return g->spool_id || !r->system_wide || sonde__rec_system_unfiltered(r) ||
	       (sonde__rec_system_pids_only(r) && !sonde__rec_system_checks_processes(r));
}

/* A module covering the kernel half of the address space, pid 0, with pgoff = start so
 * that frame offsets are the kernel addresses; defined in the spool on first use into
 * *id (0 until then). */
static int kernel_space_module(struct sonde_recorder *r, uint64_t time, const char *path,
			       uint32_t *id)
{
	if (*id)
		return 0;
	struct sonde_spool_module_def def = {
		.flags = SONDE_MODULE_EXEC | SONDE_MODULE_KERNEL,
		.start = REC_KERNEL_START,
		.end = UINT64_MAX,
		.pgoff = REC_KERNEL_START,
		.path = path,
	};
	int err = sonde_spool_writer__add_module(r->spool, sonde__rec_time(r, time), &def, id);
	return err ? sonde__rec_error(r, err) : 0;
}

/* The one module all kernel frames refer to. */
static int kernel_module(struct sonde_recorder *r, uint64_t time, uint32_t *id)
{
	int err = kernel_space_module(r, time, "[kernel.kallsyms]", &r->kern.kernel_module);

	*id = r->kern.kernel_module;
	return err;
}

/* Kernel time without kernel frames: a sample taken in the kernel, with no callchain, is
 * one frame of a module named "[kernel]" (readers name its frames so, docs/spool.md)
 * below the user stack the thread entered the kernel with; the frame keeps the sampled
 * kernel pc. */
static int kernel_leaf(struct sonde_recorder *r, const struct perf_rec *rec, size_t *n)
{
	*n = 0;
	if (rec->sample.ip < REC_KERNEL_START)
		return 0;
	int err = kernel_space_module(r, rec->time, "[kernel]", &r->kern.kernel_leaf_module);
	if (err)
		return err;
	sonde__rec_frames(r)[0].module = r->kern.kernel_leaf_module;
	sonde__rec_frames(r)[0].addr = rec->sample.ip;
	r->sum.kernel_samples++;
	*n = 1;
	return 0;
}

int sonde__rec_exiting_frame(struct sonde_recorder *r, uint64_t time, struct sonde_spool_frame *f)
{
	int err = kernel_space_module(r, time, "[exiting]", &r->kern.exiting_module);

	f->module = r->kern.exiting_module;
	f->addr = REC_KERNEL_START; /* no address: the module's first offset */
	return err;
}

/* The sample's kernel callchain into the frames (sonde__rec_frames), innermost first: the
 * sampled pc exactly, callers as return address minus one (as the user frames). Context
 * markers are skipped; the user part (which the events exclude) would end the walk.
 * Returns the count. */
static int kernel_frames(struct sonde_recorder *r, const struct perf_rec *rec, size_t *n)
{
	const struct perf_sample *s = &rec->sample;
	struct sonde_spool_frame *frames = sonde__rec_frames(r);
	uint32_t mod = 0;

	*n = 0;
	for (uint64_t i = 0; i < s->callchain_nr && *n < REC_KERNEL_MAX_FRAMES; i++) {
		uint64_t ip;
		memcpy(&ip, s->callchain + i * 8, 8);
		if (ip == PERF_CONTEXT_USER)
			break;
		if (ip >= (uint64_t)PERF_CONTEXT_MAX || ip < REC_KERNEL_START)
			continue;
		if (!mod) {
			int err = kernel_module(r, rec->time, &mod);
			if (err)
				return err;
		}
		frames[*n].module = mod;
		frames[*n].addr = *n ? ip - 1 : ip;
		(*n)++;
	}
	r->sum.kernel_frames += *n;
	return 0;
}

/* sample_process of a system-wide recording: every process but the recorder's own (or the
 * filtered ones). A process first seen through a sample (its fork and mappings fell in no
 * ring, or were lost) is read from /proc now. */
static struct rec_process *system_sample_process(struct sonde_recorder *r,
						 const struct perf_rec *rec)
{
	pid_t pid = (pid_t)rec->pid;

	if (sonde__rec_is_self(r, pid)) {
		r->sum.own_samples++;
		return NULL;
	}
	if (!sonde__rec_system_allowed(r, pid)) {
		r->sum.unfollowed_samples++;
		return NULL;
	}
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);
	bool limited = sonde__rec_system_limited(r);
	if (!p && !limited) {
		if (sonde__rec_system_adopt(r, pid, 0, rec->time) < 0)
			return NULL;
		p = sonde__tasks_process(&r->tasks, pid, false);
		if (!p && (p = sonde__tasks_process(&r->tasks, pid, true)))
			p->exited = false; /* gone already: its samples keep raw addresses */
	}
	if (!p || rec->time < p->since || (limited && p->exited && rec->time > p->exit_ns) ||
	    !sonde__rec_system_selects(r, p, (pid_t)rec->tid)) {
		r->sum.unfollowed_samples++;
		return NULL;
	}
	return p;
}

struct rec_process *sonde__rec_sample_process(struct sonde_recorder *r, const struct perf_rec *rec)
{
	if (!rec->has_id || rec->pid == UINT32_MAX || rec->tid == UINT32_MAX || !rec->time) {
		r->sum.samples_missing_ids++;
		return NULL;
	}
	if (rec->pid == 0) {
		r->sum.idle_samples++;
		return NULL;
	}
	if (r->system_wide)
		return system_sample_process(r, rec);
	struct rec_process *p =
		sonde__tasks_process(&r->tasks, (pid_t)rec->pid, sonde__rec_follows_children(r));
	if (!p || rec->time < p->since) {
		/* Not recorded, or of an earlier process with this pid, retired already. */
		r->sum.unfollowed_samples++;
		return NULL;
	}
	return p;
}

int sonde__rec_sample_stack(struct sonde_recorder *r, struct rec_process *p,
			    const struct perf_rec *rec, uint32_t copy, bool want_leaf, size_t *n,
			    uint32_t *flags)
{
	const struct perf_sample *s = &rec->sample;
	enum unwind_end end = UNWIND_END_COMPLETE;
	size_t nu = 0, nk = 0;
	int err = kernel_frames(r, rec, &nk);
	bool leaf = false;

	if (!err && nk)
		r->sum.kernel_samples++;
	else if (!err && want_leaf && !(r->layout.sample_type & PERF_SAMPLE_CALLCHAIN))
		leaf = !(err = kernel_leaf(r, rec, &nk)) && nk;
	if (err)
		return err;
	size_t reach = 0;
	if (s->regs_abi != PERF_SAMPLE_REGS_ABI_NONE) {
		struct unwind_stack st = {s->stack, s->stack_len, s->regs.r[UREG_RSP], &reach};
		nu = sonde__rec_unwind_user(r, p->pid, &p->mods, &s->regs, &st, nk, &end);
	}
	*n = nu + nk;
	*flags = nk ? SONDE_SAMPLE_KERNEL : 0;
	/* A sample in the kernel without kernel frames does not size the copy: most are taken
	 * as a thread starts or ends (clone, exit, its first page faults), with a user stack
	 * far shallower than its code's, and a thousand short-lived threads would each be
	 * given a smaller copy, their events reopened for it. */
	if (sonde__rec_adaptive(r) && s->regs_abi != PERF_SAMPLE_REGS_ABI_NONE && !leaf)
		sonde__rec_stack_learn(r, sonde__tasks_thread(&r->tasks, (pid_t)rec->tid, false), copy,
				       s->stack_len, end, reach);
	if (end == UNWIND_END_COPY_WINDOW || end == UNWIND_END_MAX_FRAMES) {
		*flags |= SONDE_SAMPLE_TRUNCATED;
		r->sum.truncated_stacks++;
	} else if (end == UNWIND_END_ERROR) {
		r->sum.unwind_errors++;
	}
	return 0;
}

static int on_sample(struct sonde_recorder *r, const struct perf_rec *rec)
{
	size_t n = 0;
	uint32_t tid_id = 0, flags;

	r->sum.samples++;
	struct rec_process *p = sonde__rec_sample_process(r, rec);
	if (!p)
		return 0;
	int err = sonde__rec_sample_stack(r, p, rec, sonde__rec_event_copy(r, rec->id), true, &n,
					  &flags);
	if (err)
		return err;
	if (n == 0) {
		r->sum.empty_stacks++;
		return 0;
	}
	err = sonde__rec_thread_id(r, rec->time, (pid_t)rec->pid, (pid_t)rec->tid, &tid_id);
	if (err)
		return err;
	sonde__rec_thread_seen(r, (pid_t)rec->tid, rec->time);
	err = sonde_spool_writer__add_sample_cpu(
		r->spool, sonde__rec_time(r, rec->time), tid_id,
		(r->layout.sample_type & PERF_SAMPLE_CPU) ? rec->cpu : SONDE_SPOOL_CPU_NONE,
		sonde__rec_frames(r), n, flags);
	if (err)
		return sonde__rec_error(r, err);
	r->sum.samples_written++;
	return 0;
}

static int on_mmap2(struct sonde_recorder *r, const struct perf_rec *rec)
{
	const struct perf_mmap2 *m = &rec->mmap2;

	if (!(m->prot & PROT_EXEC) || !m->filename || m->addr + m->len < m->addr)
		return 0;
	if (r->system_wide && !sonde__rec_system_tracks(r, (pid_t)m->pid, 0))
		return 0;
	struct rec_process *p = sonde__tasks_process(&r->tasks, (pid_t)m->pid, true);
	if (!p)
		return sonde__rec_error(r, -ENOMEM);
	if (!sonde__tasks_process_at(&r->tasks, p->pid, rec->time, false))
		return 0; /* of an earlier process with this pid */
	struct rec_module mod = {.start = m->addr,
				 .end = m->addr + m->len,
				 .pgoff = m->pgoff,
				 .inode = m->has_build_id ? 0 : m->ino,
				 .gen = m->has_build_id ? 0 : (uint32_t)m->ino_generation,
				 .path = m->filename};
	return sonde__rec_add_mapping(r, p, rec->time, &mod, m->maj, m->min);
}

/* An exec in a system-wide recording with a process check: asked again, since the new
 * program may run with other credentials (set-user-ID) or be non-dumpable. A process
 * refused now is retired. 1 to go on with the record, 0 when refused, or -errno. */
static int system_exec_check(struct sonde_recorder *r, const struct perf_rec *rec)
{
	pid_t pid = (pid_t)rec->comm.pid;

	sonde__rec_system_forget(r, pid);
	if (sonde__rec_is_self(r, pid) || sonde__rec_system_allowed(r, pid))
		return 1;
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);
	if (p && !p->exited && rec->time >= p->since)
		return sonde__rec_stop_process(r, p);
	return 0;
}

/* An exec leaves its process one thread, under the process's id. A thread other than
 * the main one that execs takes the main thread's id: the kernel writes the other
 * threads' exits and the main one's, but none for the exec'ing thread's own id, which
 * ends here, and the task under the main id from here on is not the main thread that
 * exited, but a new definition (its samples went under the exited main thread's spool
 * thread, its exit written twice, its new name lost, and its old id counted alive to the
 * end). Threads whose exit record was lost end here too. */
static int exec_ends_other_threads(struct sonde_recorder *r, struct rec_thread *t,
				   const struct perf_rec *rec)
{
	const struct perf_comm *c = &rec->comm;
	pid_t *tids;
	size_t n;
	int err = sonde__tasks_threads_of(&r->tasks, (pid_t)c->pid, (pid_t)c->tid, &tids, &n);

	if (err)
		return sonde__rec_error(r, err);
	if (sonde__tasks_gone(&r->tasks, t, (pid_t)c->tid, (pid_t)c->pid))
		t->since = rec->time; /* another task than the one that exited with this id */
	uint64_t exit_ns = sonde__rec_time(r, rec->time);
	for (size_t i = 0; i < n && !err; i++)
		err = thread_exit(r, tids[i], (pid_t)c->pid, exit_ns, r->last_time, true);
	sonde__free(tids);
	return err;
}

static int on_comm(struct sonde_recorder *r, const struct perf_rec *rec)
{
	const struct perf_comm *c = &rec->comm;

	if (r->system_wide && c->exec && sonde__rec_system_checks_processes(r)) {
		int go_on = system_exec_check(r, rec);
		if (go_on <= 0)
			return go_on;
	}
	if (r->system_wide && !sonde__rec_system_tracks(r, (pid_t)c->pid, 0))
		return 0;
	bool stale;
	struct rec_thread *t = sonde__tasks_rename(&r->tasks, (pid_t)c->pid, (pid_t)c->tid,
						   c->comm, rec->time, &stale);
	if (!t)
		return stale ? 0 : sonde__rec_error(r, -ENOMEM);
	/* an exec'ing thread is seen here, running: its next definition is dated here (a
	 * launched program's main thread, seen first at its exec, was defined at its first
	 * wait or sample, its life cut short by that much: 0.57 s of a ping-pong's 2). Not a
	 * rename, which another thread may write (pthread_setname_np, /proc/TID/comm) while
	 * this one sleeps: dated there, a first switch-in after it read as a run queue wait
	 * from its creation (acct.c, add_queued). */
	if (c->exec && !t->born_ns)
		t->born_ns = rec->time;
	if (c->exec) {
		sonde__rec_exec_seen(r, (pid_t)c->pid);
		struct rec_process *p = sonde__tasks_process(&r->tasks, (pid_t)c->pid, true);
		if (!p)
			return sonde__rec_error(r, -ENOMEM);
		if (rec->time < p->since)
			return 0;
		int err = exec_ends_other_threads(r, t, rec);
		if (err)
			return err;
		sonde__tasks_process_exec(&r->tasks, p);
		/* Another executable from now on: the next sweep learns which. */
		p->exe_dev = p->exe_ino = 0;
		err = sonde__rec_retire(r, p, rec->time);
		return err ? err : sonde__rec_check_exec(r, p);
	}
	return 0;
}

int sonde__rec_process_reset(struct sonde_recorder *r, struct rec_process *p, uint64_t time)
{
	int err = sonde__rec_retire(r, p, time);

	sonde__tasks_process_reset(&r->tasks, p);
	return err;
}

int sonde__rec_adopt_process(struct sonde_recorder *r, pid_t pid, uint64_t time,
			     rec_same_process_fn *same, struct proc_stat *st,
			     struct rec_process **out)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	*out = NULL;
	if (sonde__proc_stat_read(pid, 0, st) < 0 || sonde__proc_stat_ended(st))
		return 0; /* gone already */
	/* Its last thread is in its exit, which the recorder has processed or will: adopted
	 * now (a sweep's scan of /proc, which lists it until it is reaped), the process got
	 * a second life in the tables, and its waits while its memory is torn down could go
	 * under a second spool definition of its thread, counted twice. It never runs user
	 * code again. */
	if ((st->flags & PROC_PF_EXITING) && st->threads <= 1)
		return 0;
	if (p && same(r, p, st))
		return 0;
	if (p) {
		int err = sonde__rec_process_reset(r, p, time);
		if (err)
			return err;
	} else if (!(p = sonde__tasks_process(&r->tasks, pid, true))) {
		return -ENOMEM;
	}
	p->start_time = st->start_time;
	p->exe_dev = p->exe_ino = 0;
	if (!(st->flags & PROC_PF_KTHREAD)) /* which has none */
		sonde__rec_read_exe(pid, &p->exe_dev, &p->exe_ino);
	*out = p;
	return 1;
}

/* A thread created by a recorded thread of a process attached by thread (-t) while a
 * generation switch was under way (its fork is older than the cut): the switch, which
 * did not know it, gave it nothing, and the events it inherited may be the old
 * generation's, closed since. It gets its own now. */
static int adopt_switch_child(struct sonde_recorder *r, const struct rec_process *owner,
			      pid_t tid, uint64_t time, bool own)
{
	if (own || !owner || !owner->thread_only || !sonde__rec_before_cut(r, time))
		return 0;
	int err = sonde__rec_open_thread_events(r, tid);
	return err == -ESRCH ? 0 : sonde__rec_error(r, err); /* exited meanwhile: nothing */
}

static int on_fork(struct sonde_recorder *r, const struct perf_rec *rec)
{
	const struct perf_task *f = &rec->task;
	bool new_process = f->pid != f->ppid;

	/* Without follow_children, children have no events: their fork is only a record of
	 * the parent's, and nothing of theirs is tracked. */
	if (new_process && !sonde__rec_follows_children(r))
		return 0;
	if (r->system_wide && new_process)
		sonde__rec_system_forget(r, (pid_t)f->pid); /* a new process: asked anew */
	/* A thread attached alone without follow_children: its new threads have no events. */
	struct rec_process *owner = sonde__tasks_process(&r->tasks, (pid_t)f->pid, false);
	if (!new_process && !sonde__rec_follows_children(r) && owner && owner->thread_only)
		return 0;
	if (r->system_wide && !sonde__rec_system_tracks(r, (pid_t)f->pid, (pid_t)f->ppid))
		return 0;
	/* A new process: an entry of its pid is either the process itself, found by a
	 * recovery sweep before this record was processed, or an earlier process whose exit
	 * went unseen (lost), which must lend it neither modules nor threads. That one is
	 * reset before the new thread exists: reset after, it took the thread's name (which
	 * its first sample, processed after its exec, then read from /proc: a shell's child
	 * sampled in the shell's code named after the program it went on to run), its birth
	 * and its selection with the old process's threads. */
	struct rec_process *child =
		new_process ? sonde__tasks_process(&r->tasks, (pid_t)f->pid, false) : NULL;
	bool swept = child && !child->exited && child->start_time &&
		     sonde__rec_is_forked_at(r, rec->time, child->start_time);
	if (child && !swept) {
		int err = sonde__rec_process_reset(r, child, rec->time);
		if (err)
			return err;
	}
	/* A switch may have given it events of its own before this record was processed. */
	const struct rec_thread *was = sonde__tasks_thread(&r->tasks, (pid_t)f->tid, false);
	bool own = was && was->own_events && was->pid == (pid_t)f->pid &&
		   was->root_gen == sonde__rec_gen(r);
	struct rec_thread *t = sonde__tasks_fork(&r->tasks, (pid_t)f->pid, (pid_t)f->ppid,
						 (pid_t)f->tid, (pid_t)f->ptid, rec->time);
	if (!t)
		return sonde__rec_error(r, -ENOMEM);
	t->own_events = own;
	bool parent_selected = t->selected;
	if (!own)
		sonde__rec_inherit(r, t, (pid_t)f->ptid);
	if (!new_process) /* a new thread of a known process */
		return adopt_switch_child(r, owner, (pid_t)f->tid, rec->time, own);

	/* Looked up again: the table may have moved since. */
	child = sonde__tasks_process(&r->tasks, (pid_t)f->pid, !swept);
	if (!child)
		return sonde__rec_error(r, -ENOMEM);
	if (swept) {
		child->fork_time = rec->time;
		return 0;
	}
	/* It starts with a copy of its parent's mappings. */
	child->fork_time = rec->time;
	child->since = rec->time;
	struct rec_process *pp = sonde__tasks_process(&r->tasks, (pid_t)f->ppid, false);
	child->selected = parent_selected || (pp && pp->selected);
	if (!pp)
		return 0;
	child->exe_dev = pp->exe_dev;
	child->exe_ino = pp->exe_ino;
	for (size_t i = 0; i < pp->mods.n; i++) {
		int err =
			sonde__rec_add_mapping(r, child, rec->time, &pp->mods.m[i],
					       major(pp->mods.m[i].dev), minor(pp->mods.m[i].dev));
		if (err)
			return err;
	}
	return 0;
}

/* Process pid ends at time (the exit record of its last thread). */
static int process_exit(struct sonde_recorder *r, pid_t pid, uint64_t time)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (r->system_wide && (!p || time >= p->since))
		sonde__rec_system_forget(r, pid);
	if (!(p = sonde__tasks_process_exit(&r->tasks, pid, time)))
		return 0;
	/* Retiring is idempotent: a liveness check may have marked it exited already. */
	int err = sonde__rec_retire(r, p, time);
	if (r->system_wide)
		sonde__rec_forget_exited(r);
	return err;
}

static int on_exit_rec(struct sonde_recorder *r, const struct perf_rec *rec)
{
	const struct perf_task *e = &rec->task;
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, (pid_t)e->tid, false);

	/* The exit of an earlier thread or process with this id, processed after the id was
	 * reused (and attached again): it ends nothing of the new one. */
	if (t && rec->time < t->since)
		return 0;
	/* its life ends here (docs/record.md, "Accounting"): readers stop counting it but
	 * for the records of it that follow (written under the same spool thread) */
	uint64_t exit_ns = sonde__rec_time(r, rec->time);
	sonde__rec_close_thread_events(r, (pid_t)e->tid);
	int err = thread_exit(r, (pid_t)e->tid, (pid_t)e->pid, exit_ns, r->last_time, true);
	if (err)
		return err;
	/* A process ends with its last thread, which need not be its main one: a main thread
	 * that ends first (pthread_exit) leaves the others running, their waits and exits to
	 * come, stacked with the process's modules (it used to end the process there: its
	 * modules retired, its entry dropped with -a, the rest of its threads' stacks left
	 * unresolved; a sweep took it for gone, and `record -p` stopped). */
	struct rec_process *p = sonde__tasks_process_at(&r->tasks, (pid_t)e->pid, rec->time, false);
	if (e->pid != e->tid) {
		if (!p || !p->main_exited || p->threads)
			return 0;
	} else if (p && p->threads) {
		p->main_exited = true;
		return 0;
	}
	return process_exit(r, (pid_t)e->pid, rec->time);
}

int sonde__rec_process_record(struct sonde_recorder *r, const struct perf_rec *rec)
{
	if (sonde__rec_is_duplicate(r, rec)) {
		r->sum.duplicates_dropped++;
		return 0;
	}
	switch (rec->type) {
	case PERF_RECORD_SAMPLE: {
		int handled = sonde__rec_offcpu_on(r) ? sonde__rec_offcpu_sample(r, rec) : 0;
		return handled ? (handled < 0 ? handled : 0) : on_sample(r, rec);
	}
	case PERF_RECORD_SWITCH:
		return sonde__rec_offcpu_on(r) ? sonde__rec_offcpu_switch(r, rec) : 0;
	case PERF_RECORD_MMAP2:
		return on_mmap2(r, rec);
	case PERF_RECORD_COMM:
		return on_comm(r, rec);
	case PERF_RECORD_FORK:
		return on_fork(r, rec);
	case PERF_RECORD_EXIT:
		return on_exit_rec(r, rec);
	case PERF_RECORD_LOST:
		r->sum.lost_events += rec->lost.lost;
		sonde__rec_note_loss(r, rec->time);
		sonde__rec_offcpu_loss(r);
		return 0;
	case PERF_RECORD_LOST_SAMPLES:
		r->sum.lost_samples += rec->lost.lost;
		sonde__rec_note_loss(r, rec->time);
		sonde__rec_offcpu_loss(r);
		return 0;
	default:
		return 0;
	}
}

void sonde__rec_track_free(struct sonde_recorder *r)
{
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));)
		sonde__rec_offcpu_free(t->off);
	sonde__tasks_free(&r->tasks);
	sonde__rec_images_free(r);
}
