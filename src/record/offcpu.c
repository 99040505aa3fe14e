/* Off-CPU intervals from perf_event alone (docs/record.md, "Off-CPU").
 *
 * sched:sched_switch is sampled at every hit, in the context of the thread leaving the
 * CPU: its user registers and stack (and kernel callchain) are those it blocked with, and
 * the tracepoint's raw data says how it left (prev_state) and who runs next (next_pid).
 * The sample is kept, not unwound, until the thread runs again: an interval shorter than
 * the threshold is then only counted, so the unwinding cost is paid for long intervals
 * only. The switch-in comes from two places:
 *  - per-CPU events (-a) see every switch of the CPU, so the sched_switch that names the
 *    thread as next_pid is its switch-in;
 *  - per-thread events (inherited) fire only in the recorded threads' own context, so
 *    that sched_switch is seen only when the thread before it is recorded too. The
 *    switch event also asks for PERF_RECORD_SWITCH (attr.context_switch), which the kernel
 *    writes into the thread's own events when it is switched back in.
 * Either closes the interval; the second to arrive finds nothing open. sched:sched_waking
 * (sched_wakeup on kernels without it) gives the waker and the wakeup time: per CPU it sees
 * every wakeup, per thread only those a recorded thread makes.
 *
 * A kernel may leave what happens in the idle task unrecorded (seen: a guest kernel whose
 * perf events on one CPU miss the idle task's sched_switch and the wakeups of its
 * interrupts). A thread woken onto that idle CPU is then seen running again, in a sample
 * of its own, with no switch-in seen: its wakeup, when seen, ends the interval (from an
 * idle CPU the woken thread runs at once), else that first sample does. With neither
 * (a run too short to be sampled), its wait is known up to the CPU's last traced switch
 * and unknown from there to its next switch-out.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "perf/tracefs.h"
#include "record/recorder.h"

/* The switch-out of a thread waiting for its switch-in: what its sample held. */
struct rec_offcpu {
	bool pending;
	bool lost; /* a loss since the switch-out: its end is unknown */
	/* switched out on its way out, after its exit record: stacked under [exiting] */
	bool exiting;
	uint32_t state;
	uint32_t cpu;
	uint32_t waker;
	uint64_t out_ns, wake_ns;
	uint64_t in_ns; /* where its last interval ended */
	uint64_t regs_abi;
	struct unwind_regs regs;
	uint32_t stack_len, callchain_nr;
	uint32_t copy;			/* the stack copy of the event that sampled it */
	uint64_t short_count, short_ns; /* not yet written */
	size_t cap;
	uint8_t *data; /* stack bytes, then the callchain */
};

/* One CPU's switches not yet written. */
struct rec_switches {
	uint32_t n;
	uint32_t flags; /* of the run being filled */
	bool known;	/* a switch was seen: next is who runs */
	uint32_t next;
	uint64_t last_ns; /* of that switch */
	/* The first sign since the last switch of another task than its next on the CPU (a
	 * record in its context, or its wakeup from the idle task, which runs it at once) */
	uint64_t sign_ns;
	struct sonde_spool_switch v[SONDE_SPOOL_SWITCHES_MAX];
};

enum { WAKING_STACK_BYTES = 8 }; /* the waking event needs no stack: the least allowed */

/* sched_switch's prev_state bits of a task that exited (the kernel's exit_state). */
enum { TASK_EXIT_DEAD = 0x10, TASK_EXIT_ZOMBIE = 0x20 };

static int read_format(const char *tracefs, const char *name, struct ftrace_format *f)
{
	char rel[128];
	struct buf b = BUF_INIT;

	snprintf(rel, sizeof(rel), "events/sched/%s/format", name);
	int err = sonde__tracefs_read(tracefs, rel, &b);
	if (!err)
		err = sonde__ftrace_format_parse((const char *)b.data, b.len, f);
	sonde__buf_free(&b);
	return err;
}

/* Copies field `name` of f into *out; -SONDE_E_FORMAT if it is missing or no integer. */
static int take_field(const struct ftrace_format *f, const char *name, struct ftrace_field *out)
{
	const struct ftrace_field *fd = sonde__ftrace_format_field(f, name);

	if (!fd || fd->kind != FTRACE_FIELD_INT) {
		sonde_error("off-CPU: sched:%s has no integer field %s", f->name, name);
		return -SONDE_E_FORMAT;
	}
	*out = *fd;
	return 0;
}

/* Id and one field of the tracepoint sched:name. */
static int tracepoint(const char *tracefs, const char *name, uint64_t *id, const char *field,
		      struct ftrace_field *out, struct ftrace_field *out2, const char *field2)
{
	struct ftrace_format f;
	int tp = sonde__perf_tracepoint_id(tracefs, "sched", name);

	if (tp < 0)
		return tp;
	*id = (uint64_t)tp;
	int err = read_format(tracefs, name, &f);
	if (err) {
		sonde_error("off-CPU: cannot read the format of sched:%s: %s", name,
			    sonde_strerror(err));
		return err;
	}
	err = take_field(&f, field, out);
	if (!err && field2)
		err = take_field(&f, field2, out2);
	sonde__ftrace_format_free(&f);
	return err;
}

int sonde__rec_offcpu_setup(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	char tracefs[TRACEFS_PATH_MAX];
	struct rec_offcpu_cfg *c = &r->offcpu;

	if (!o->off_cpu)
		return 0;
	c->min_ns = o->off_cpu_min_ns ? o->off_cpu_min_ns : SONDE_RECORD_OFF_CPU_MIN_DEFAULT;
	/* the BPF backend tracks the switches in the kernel: none of the events below */
	int err = sonde__rec_offcpu_bpf_choose(r, o);
	if (err < 0)
		return err;
	if (err > 0) {
		c->on = true;
		r->sum.off_cpu = 1;
		return 0;
	}
	err = sonde__tracefs_find(tracefs, sizeof(tracefs), true);
	if (err) {
		sonde_error("off-CPU recording needs tracefs (for the sched tracepoints): %s",
			    sonde_strerror(err));
		return err;
	}
	err = tracepoint(tracefs, "sched_switch", &c->switch_id, "prev_state", &c->prev_state,
			 &c->next_pid, "next_pid");
	if (err == -ENOENT || err == -ENODEV)
		sonde_error("off-CPU recording needs the sched:sched_switch tracepoint: %s",
			    sonde_strerror(err));
	if (!err)
		err = tracepoint(tracefs, "sched_switch", &c->switch_id, "prev_pid", &c->prev_pid,
				 NULL, NULL);
	if (err)
		return err;
	err = tracepoint(tracefs, "sched_waking", &c->waking_id, "pid", &c->waking_pid, NULL, NULL);
	if (err == -ENOENT)
		err = tracepoint(tracefs, "sched_wakeup", &c->waking_id, "pid", &c->waking_pid,
				 NULL, NULL);
	if (err) {
		sonde_error("off-CPU recording needs sched:sched_waking or sched_wakeup: %s",
			    sonde_strerror(err));
		return err;
	}
	c->on = true;
	r->cfg.raw = true;
	r->sum.off_cpu = 1;
	return 0;
}

static int open_one(struct sonde_recorder *r, struct perf_event_cfg *cfg, pid_t tid, size_t c,
		    bool on_exec, uint32_t gen)
{
	struct perf_event_attr a;

	sonde__perf_attr_fill(&a, cfg);
	int fd = sonde__perf_open(&a, tid, sonde__rec_cpu(r, c));
	if (fd < 0)
		return fd;
	int err = sonde__rec_add_event(r, fd, c, tid, on_exec, gen, cfg->stack_bytes);
	if (err)
		close(fd);
	return err;
}

int sonde__rec_offcpu_open(struct sonde_recorder *r, const struct perf_event_cfg *base, pid_t tid,
			   size_t c, bool on_exec, uint32_t gen)
{
	struct perf_event_cfg cfg = *base;

	if (!r->offcpu.on || r->offcpu.bpf)
		return 0;
	cfg.disabled = true;
	cfg.enable_on_exec = on_exec;
	cfg.side_tracepoint = r->offcpu.switch_id;
	/* per thread, the switch-in is only told by the thread's own events */
	cfg.context_switch = tid > 0;
	int err = open_one(r, &cfg, tid, c, on_exec, gen);
	if (err)
		return err;
	cfg.side_tracepoint = r->offcpu.waking_id;
	cfg.context_switch = false;
	cfg.stack_bytes = WAKING_STACK_BYTES;
	cfg.no_kernel_callchain = true;
	return open_one(r, &cfg, tid, c, on_exec, gen);
}

/* The off-CPU state of thread tid of process pid, made with create. A thread first seen
 * leaving the CPU (one preempted on its way out after its exit record removed it, say)
 * gets its process from the switch, sampled in its context: without it, its intervals and
 * short counts would be written under pid 0, a task of its own with no life. */
static struct rec_offcpu *state_of(struct sonde_recorder *r, pid_t pid, pid_t tid, bool create)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, create);

	if (!t)
		return NULL;
	if (!t->pid)
		t->pid = pid;
	if (!t->off && create)
		t->off = sonde__calloc(1, sizeof(*t->off));
	return t->off;
}

/* sched_switch's prev_state: the low byte holds the task state bits (TASK_REPORT and
 * the idle bit); above it the kernel marks a preemption. */
static uint32_t state_from(int64_t prev_state)
{
	uint64_t low = (uint64_t)prev_state & 0xff;

	if (low == 0)
		return SONDE_OFFCPU_RUNNABLE;
	if (low & 1)
		return SONDE_OFFCPU_SLEEPING;
	if (low & 2)
		return SONDE_OFFCPU_BLOCKED;
	return SONDE_OFFCPU_OTHER;
}

/* Whether the switch-out sample rec is of a thread on its way out: after its exit record
 * (the kernel writes it early in the exit, Linux 6.18: right after sched_process_exit,
 * before exit_mm tears the address space down; a sample of a task without memory then
 * carries no user registers). Only per-CPU events (-a) see such a switch: a thread's own
 * events end with its exit record. The thread may be back in the table meanwhile (a
 * sample of it on its way out defines it again, under the spool thread it had); a thread
 * whose exit was not seen (a kernel thread, say) is never taken for one. */
static bool released(struct sonde_recorder *r, const struct perf_rec *rec)
{
	return sonde__rec_thread_exiting(r, (pid_t)rec->pid, (pid_t)rec->tid, rec->time);
}

/* Keeps the switch-out sample of a recorded thread until its switch-in (exiting: the
 * thread is on its way out, released). */
static int keep_switch_out(struct sonde_recorder *r, const struct perf_rec *rec, int64_t prev,
			   bool exiting)
{
	const struct perf_sample *s = &rec->sample;
	struct rec_offcpu *o = state_of(r, (pid_t)rec->pid, (pid_t)rec->tid, true);

	if (!o)
		return sonde__rec_error(r, -ENOMEM);
	sonde__rec_thread_seen(r, (pid_t)rec->tid, rec->time);
	if (o->pending)
		r->sum.offcpu_dropped++; /* its switch-in was lost */
	o->lost = false;
	size_t need = s->stack_len + s->callchain_nr * 8;
	if (need > o->cap) {
		uint8_t *d = sonde__realloc(o->data, need);
		if (!d)
			return sonde__rec_error(r, -ENOMEM);
		o->data = d;
		o->cap = need;
	}
	if (s->stack_len)
		memcpy(o->data, s->stack, s->stack_len);
	if (s->callchain_nr)
		memcpy(o->data + s->stack_len, s->callchain, s->callchain_nr * 8);
	o->pending = true;
	o->exiting = exiting;
	o->state = state_from(prev);
	o->cpu = (r->layout.sample_type & PERF_SAMPLE_CPU) ? rec->cpu : SONDE_SPOOL_CPU_NONE;
	o->out_ns = rec->time;
	o->wake_ns = 0;
	o->waker = 0;
	o->regs_abi = s->regs_abi;
	o->regs = s->regs;
	o->stack_len = (uint32_t)s->stack_len;
	/* looked up now: the switch that closes its event forgets its id */
	o->copy = sonde__rec_event_copy(r, rec->id);
	o->callchain_nr = (uint32_t)s->callchain_nr;
	return 0;
}

/* System-wide, every CPU's switches are kept: sched_switch names who leaves and who comes
 * in, so the exports replay each CPU's real timeline (each switch's prev the previous
 * one's next, the idle task only where the CPU was idle) instead of guessing it from the
 * recorded threads' intervals. An empty run per CPU announces them before any interval.
 * Only when every process is recorded: a recording limited to some processes (a filter,
 * or a consumer's rights) must not name the others' tasks. */
bool sonde__rec_offcpu_keeps_switches(const struct sonde_recorder *r)
{
	return r->system_wide && sonde__rec_system_unfiltered(r);
}

/* The BPF backend knows each switch's CPU; perf_event's samples must carry it. */
static bool keeps_switches(const struct sonde_recorder *r)
{
	return sonde__rec_offcpu_keeps_switches(r) &&
	       (r->offcpu.bpf || (r->layout.sample_type & PERF_SAMPLE_CPU));
}

static int switches_start(struct sonde_recorder *r)
{
	struct rec_offcpu_cfg *c = &r->offcpu;
	uint32_t n = 0;

	if (c->sw_started || !keeps_switches(r))
		return 0;
	for (size_t i = 0; i < sonde__rec_n_cpus(r); i++)
		if (sonde__rec_cpu(r, i) >= 0 && (uint32_t)sonde__rec_cpu(r, i) + 1 > n)
			n = (uint32_t)sonde__rec_cpu(r, i) + 1;
	c->sw = sonde__calloc(n ? n : 1, sizeof(*c->sw));
	if (!c->sw)
		return sonde__rec_error(r, -ENOMEM);
	c->n_sw = n;
	c->sw_started = true;
	for (size_t i = 0; i < sonde__rec_n_cpus(r); i++) {
		int cpu = sonde__rec_cpu(r, i);
		int err = cpu >= 0 ? sonde_spool_writer__add_switches(r->spool, (uint32_t)cpu, 0,
								      NULL, 0)
				   : 0;
		if (err)
			return sonde__rec_error(r, err);
	}
	return 0;
}

static int switches_flush(struct sonde_recorder *r, uint32_t cpu)
{
	struct rec_switches *b = &r->offcpu.sw[cpu];

	if (!b->n)
		return 0;
	int err = sonde_spool_writer__add_switches(r->spool, cpu, b->flags, b->v, b->n);
	b->n = b->flags = 0;
	return err ? sonde__rec_error(r, err) : 0;
}

/* A sign that tid runs (or is about to, woken by the idle task) on rec's CPU. */
static void switches_sign(struct sonde_recorder *r, const struct perf_rec *rec, uint32_t tid)
{
	/* not with the BPF backend: its switches are written as they are drained, ahead of
	 * the samples, which would sign a switch still to come */
	if (!keeps_switches(r) || r->offcpu.bpf || !r->offcpu.sw || rec->cpu >= r->offcpu.n_sw ||
	    !tid || tid == UINT32_MAX)
		return;
	struct rec_switches *b = &r->offcpu.sw[rec->cpu];
	if (b->known && !b->sign_ns && tid != b->next)
		b->sign_ns = rec->time;
}

/* Adds a switch of cpu at `time` (prev_state a SONDE_OFFCPU_* state or
 * SONDE_SWITCH_EXITED) to its run. */
static int switches_add(struct sonde_recorder *r, uint32_t cpu, uint64_t time, uint32_t prev_pid,
			uint32_t next, uint32_t prev_state)
{
	int err = switches_start(r);

	if (err || !r->offcpu.sw || cpu >= r->offcpu.n_sw)
		return err;
	struct rec_switches *b = &r->offcpu.sw[cpu];
	if (b->n && time < b->v[b->n - 1].time_ns) {
		r->sum.bad_records++; /* a CPU's records come in time order */
		return 0;
	}
	/* Another task than the one that came in leaves: the switch-out of that one went
	 * unrecorded (some kernels leave the idle task's, on some CPUs, or all of some
	 * tasks'). It is written as inferred, where this task came in by the intervals. */
	if (b->known && b->next != prev_pid) {
		struct rec_thread *t = sonde__tasks_thread(&r->tasks, (pid_t)prev_pid, false);
		uint64_t at = time;
		if (t && t->off && t->off->in_ns > b->last_ns && t->off->in_ns <= time)
			at = t->off->in_ns;
		else if (b->sign_ns && b->sign_ns <= time)
			at = b->sign_ns; /* another task's sign: the CPU was busy from there */
		b->v[b->n++] = (struct sonde_spool_switch){
			.time_ns = at,
			.prev_tid = b->next,
			.next_tid = prev_pid,
			/* the idle task is always runnable; another's state is not known */
			.prev_state = (b->next ? SONDE_OFFCPU_OTHER : SONDE_OFFCPU_RUNNABLE) |
				      SONDE_SWITCH_INFERRED};
		r->sum.offcpu_switches_inferred++;
		if (b->n == SONDE_SPOOL_SWITCHES_MAX && (err = switches_flush(r, cpu)))
			return err;
	}
	b->known = true;
	b->next = next;
	b->last_ns = time;
	b->sign_ns = 0;
	b->v[b->n++] = (struct sonde_spool_switch){
		.time_ns = time, .prev_tid = prev_pid, .next_tid = next, .prev_state = prev_state};
	return b->n == SONDE_SPOOL_SWITCHES_MAX ? switches_flush(r, cpu) : 0;
}

static int switches_push(struct sonde_recorder *r, const struct perf_rec *rec, int64_t prev,
			 uint32_t next)
{
	int64_t prev_pid;

	/* the tracepoint's prev_pid, as its next_pid: the sample's tid is -1 for a task
	 * already unhashed on its way out */
	if (!sonde__ftrace_field_int(&r->offcpu.prev_pid, rec->sample.raw, rec->sample.raw_size,
				     &prev_pid))
		prev_pid = rec->tid;
	return switches_add(r, rec->cpu, rec->time, (uint32_t)prev_pid, next,
			    ((uint64_t)prev & (TASK_EXIT_DEAD | TASK_EXIT_ZOMBIE))
				    ? SONDE_SWITCH_EXITED
				    : state_from(prev));
}

int sonde__rec_offcpu_switches_begin(struct sonde_recorder *r)
{
	return switches_start(r);
}

int sonde__rec_offcpu_switch_seen(struct sonde_recorder *r, uint32_t cpu, uint64_t time,
				  uint32_t prev, uint32_t next, uint32_t prev_state)
{
	return keeps_switches(r) ? switches_add(r, cpu, time, prev, next, prev_state) : 0;
}

void sonde__rec_offcpu_switches_gap(struct sonde_recorder *r, uint32_t cpu)
{
	if (cpu >= r->offcpu.n_sw)
		return;
	struct rec_switches *b = &r->offcpu.sw[cpu];
	if (!switches_flush(r, cpu))
		b->flags = SONDE_SWITCHES_GAP;
	b->known = false; /* who runs is not known across the gap */
}

/* The interval of t ends at `in` (open: the recording ended first). */
static int close_interval(struct sonde_recorder *r, struct rec_thread *t, uint64_t in, bool open)
{
	struct rec_offcpu *o = t->off;
	uint64_t dur = in > o->out_ns ? in - o->out_ns : 0;
	pid_t pid = t->pid, tid = t->tid; /* t may move: the thread table can grow below */
	size_t n;
	uint32_t flags, id;
	bool unknown = o->lost;

	o->pending = o->lost = false;
	o->in_ns = in;
	if (unknown) {
		/* never counted as short: unknown time is written whatever its length */
		r->sum.offcpu_unknown++;
		r->sum.offcpu_unknown_ns += dur;
	} else if (dur < r->offcpu.min_ns) {
		o->short_count++;
		o->short_ns += dur;
		r->sum.offcpu_short++;
		r->sum.offcpu_short_ns += dur;
		return 0;
	}
	/* a thread on its way out needs no process: nothing of its user part is unwound (its
	 * process may be retired, its entry gone with -a, when it was the last thread) */
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);
	if (!p && !o->exiting) {
		r->sum.offcpu_dropped++;
		return 0;
	}
	struct perf_rec rec = {
		.type = PERF_RECORD_SAMPLE, .time = o->out_ns, .pid = pid, .tid = tid};
	rec.sample = (struct perf_sample){.regs_abi = o->exiting ? PERF_SAMPLE_REGS_ABI_NONE
								 : o->regs_abi,
					  .regs = o->regs,
					  .stack = o->data,
					  .stack_len = o->stack_len,
					  .callchain = o->data + o->stack_len,
					  .callchain_nr = o->callchain_nr};
	/* a long interval's stack sizes the thread's copy as a sample's does */
	int err = sonde__rec_sample_stack(r, p, &rec, o->copy, false, &n, &flags);
	/* one frame stands for the user state it no longer has, as the BPF backend's */
	if (!err && o->exiting)
		err = sonde__rec_exiting_frame(r, o->out_ns, &sonde__rec_frames(r)[n++]);
	if (!err)
		err = sonde__rec_thread_id(r, o->out_ns, pid, tid, &id);
	if (err)
		return err;
	if ((err = switches_start(r)))
		return err;
	struct sonde_spool_offcpu iv = {
		.switch_out_ns = o->out_ns,
		.switch_in_ns = o->out_ns + dur,
		.wakeup_ns =
			o->wake_ns >= o->out_ns && o->wake_ns <= o->out_ns + dur ? o->wake_ns : 0,
		.thread = id,
		.cpu = o->cpu,
		.state = o->state,
		.waker_tid = o->waker,
		.flags = flags | (open ? SONDE_OFFCPU_OPEN : 0)};
	return sonde__rec_offcpu_put(r, &iv, n, unknown, tid);
}

int sonde__rec_offcpu_put(struct sonde_recorder *r, const struct sonde_spool_offcpu *iv, size_t n,
			  bool unknown, pid_t tid)
{
	struct sonde_spool_frame *frames = sonde__rec_frames(r);
	int err = unknown ? sonde_spool_writer__add_unknown(r->spool, iv, frames, n)
			  : sonde_spool_writer__add_offcpu(r->spool, iv, frames, n);

	if (err == -EINVAL) {
		/* a frame in a module retired while the thread was off the CPU: the interval
		 * is dropped, the recording goes on */
		sonde_debug("off-CPU interval of tid %d dropped: a frame in a retired module",
			    (int)tid);
		r->sum.offcpu_dropped++;
		return 0;
	}
	if (err)
		return sonde__rec_error(r, err);
	r->sum.offcpu_intervals++;
	return 0;
}

static int switch_in(struct sonde_recorder *r, pid_t tid, uint64_t time)
{
	struct rec_thread *t = tid > 0 ? sonde__tasks_thread(&r->tasks, tid, false) : NULL;

	if (t && time > t->seen_ns)
		t->seen_ns = time; /* it comes in: alive then */
	if (!t || !t->off || !t->off->pending || time < t->off->out_ns)
		return 0;
	return close_interval(r, t, time, false);
}

/* tid leaves `cpu` at `time`, its switch-in, wakeup and run all unseen: it came in after
 * the CPU's last traced switch (which did not bring it in) at a time not known. Its wait
 * is written up to that switch, as it was off every CPU until then (a switch-out of it
 * elsewhere would have ended it), and from there to `time` as unknown. */
static int switch_in_unknown(struct sonde_recorder *r, pid_t tid, uint32_t cpu, uint64_t time)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);
	struct rec_offcpu *o = t->off;
	uint64_t from = o->out_ns;
	const struct rec_switches *b =
		r->offcpu.sw && cpu < r->offcpu.n_sw ? &r->offcpu.sw[cpu] : NULL;

	if (b && b->known && b->last_ns > from && b->last_ns < time)
		from = b->last_ns;
	r->sum.offcpu_unseen_switch_ins++;
	if (from > o->out_ns) {
		int err = close_interval(r, t, from, false);
		if (err)
			return err;
		/* the same wait goes on, its end unknown (t may have moved) */
		t = sonde__tasks_thread(&r->tasks, tid, false);
		o->pending = true;
		o->out_ns = from;
		o->wake_ns = 0;
	}
	o->lost = true;
	return close_interval(r, t, time, false);
}

/* Whether the wakeup at wake_ns put tid on `cpu` at once, as far as the CPU's switches
 * say: with them kept, only when the CPU was idle from before the wakeup (an idle CPU runs
 * the thread it wakes at once); a task that came in after the wakeup, or one running
 * across it, kept tid off the CPU for a time not known (seen: a guest kernel that traces
 * no switch-out of some kernel threads, the switch to tid among them). */
static bool woken_in(const struct sonde_recorder *r, uint32_t cpu, uint64_t wake_ns)
{
	if (!keeps_switches(r) || !r->offcpu.sw || cpu >= r->offcpu.n_sw)
		return true;
	const struct rec_switches *b = &r->offcpu.sw[cpu];

	return !b->known || (!b->next && b->last_ns < wake_ns);
}

/* tid is seen on the CPU at `time`: an interval still open lost its switch-in. It ends
 * at its wakeup when that was seen and put it on the CPU (woken_in); else at `time`, late
 * by no more than the gap between the thread's records, unless `time` is the thread
 * leaving the CPU again, when the gap is all of its run: its end is unknown then. Either
 * way where the switch the recorder infers for the CPU puts it (switches_add). */
static int seen_running(struct sonde_recorder *r, pid_t tid, uint32_t cpu, uint64_t time,
			bool leaving)
{
	struct rec_thread *t = tid > 0 ? sonde__tasks_thread(&r->tasks, tid, false) : NULL;

	if (t && time > t->seen_ns)
		t->seen_ns = time; /* a record in its context: it runs */
	if (!t || !t->off || !t->off->pending || time <= t->off->out_ns)
		return 0;
	struct rec_offcpu *o = t->off;
	if (o->lost) /* unknown from its switch-out to now */
		return close_interval(r, t, time, false);
	uint64_t in = o->wake_ns > o->out_ns && o->wake_ns <= time && woken_in(r, cpu, o->wake_ns)
			      ? o->wake_ns
			      : time;
	if (in == time && leaving)
		return switch_in_unknown(r, tid, cpu, time);
	r->sum.offcpu_unseen_switch_ins++;
	return close_interval(r, t, in, false);
}

static void on_waking(struct sonde_recorder *r, const struct perf_rec *rec, pid_t wakee)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, wakee, false);

	if (!t || !t->off || !t->off->pending || t->off->wake_ns)
		return;
	t->off->wake_ns = rec->time;
	t->off->waker = rec->tid;
	r->sum.offcpu_wakeups++;
}

int sonde__rec_offcpu_sample(struct sonde_recorder *r, const struct perf_rec *rec)
{
	const struct perf_sample *s = &rec->sample;
	uint16_t type = 0;
	int64_t v, prev;

	bool raw = s->raw && s->raw_size >= sizeof(type);
	if (raw)
		memcpy(&type, s->raw, sizeof(type));
	if (rec->has_id && rec->pid != 0 && (!raw || type != r->offcpu.switch_id))
		switches_sign(r, rec, rec->tid);
	/* a sample is taken in the context of the thread on the CPU */
	int err = rec->has_id ? seen_running(r, (pid_t)rec->tid, rec->cpu, rec->time,
					     raw && type == r->offcpu.switch_id)
			      : 0;
	if (err || !raw)
		return err;
	if (type == r->offcpu.waking_id) {
		if (sonde__ftrace_field_int(&r->offcpu.waking_pid, s->raw, s->raw_size, &v)) {
			on_waking(r, rec, (pid_t)v);
			if (rec->pid == 0)
				switches_sign(r, rec, (uint32_t)v);
		}
		return 1;
	}
	if (type != r->offcpu.switch_id)
		return 0;
	if (!sonde__ftrace_field_int(&r->offcpu.next_pid, s->raw, s->raw_size, &v) ||
	    !sonde__ftrace_field_int(&r->offcpu.prev_state, s->raw, s->raw_size, &prev)) {
		r->sum.bad_records++;
		return 1;
	}
	if (keeps_switches(r) && (err = switches_push(r, rec, prev, (uint32_t)v)))
		return err;
	/* the next thread's switch-in first: it may be recorded when this one is not */
	err = switch_in(r, (pid_t)v, rec->time);
	if (err)
		return err;
	r->sum.offcpu_switches++;
	/* the idle task leaving the CPU is no thread's interval (nor an idle sample) */
	if (rec->pid == 0)
		return 1;
	bool exiting = released(r, rec);
	if (!exiting && !sonde__rec_sample_process(r, rec))
		return 1;
	/* A task's last switch-out, from do_task_dead once it has exited (its exit record is
	 * processed already, unless it was lost): it never runs again, so this is no wait.
	 * The kernel reports its exit state there, EXIT_ZOMBIE or EXIT_DEAD. */
	if ((uint64_t)prev & (TASK_EXIT_DEAD | TASK_EXIT_ZOMBIE)) {
		r->sum.offcpu_exits++;
		err = sonde__rec_thread_dead(r, (pid_t)rec->tid, (pid_t)rec->pid, rec->time);
		return err ? err : 1;
	}
	err = keep_switch_out(r, rec, prev, exiting);
	return err ? err : 1;
}

int sonde__rec_offcpu_switch(struct sonde_recorder *r, const struct perf_rec *rec)
{
	if (!rec->has_id || (rec->misc & PERF_RECORD_MISC_SWITCH_OUT))
		return 0;
	return switch_in(r, (pid_t)rec->tid, rec->time);
}

/* A loss may have taken the switch-in of any interval still open: each becomes unknown
 * from its switch-out to the thread's next sighting (a record of it in its own context, a
 * switch-in, its exit or the end), and is written so (an UNKNOWN record), never dropped:
 * the report shows that time as unknown. */
void sonde__rec_offcpu_loss(struct sonde_recorder *r)
{
	for (struct rec_thread *t = NULL; r->offcpu.on && (t = sonde__tasks_next_thread(&r->tasks, t));) {
		struct rec_offcpu *o = t->off;
		if (o && o->pending)
			o->lost = true;
	}
	/* each CPU's run so far is written; the next one starts after a gap, unless the BPF
	 * backend delivers the switches: they come through its own ring, numbered, which
	 * says where it lost any (keep_batch), and none went through the perf ring that lost */
	if (r->offcpu.bpf)
		return;
	for (uint32_t cpu = 0; cpu < r->offcpu.n_sw; cpu++)
		sonde__rec_offcpu_switches_gap(r, cpu);
}

/* Writes t's short intervals counted since the last write. */
static int write_short(struct sonde_recorder *r, struct rec_thread *t)
{
	struct rec_offcpu *o = t->off;
	uint32_t id;

	if (!o || !o->short_count)
		return 0;
	int err = sonde__rec_thread_id(r, r->last_time, t->pid, t->tid, &id);
	if (err)
		return err;
	struct sonde_spool_offcpu_short s = {id, r->offcpu.min_ns, o->short_count, o->short_ns};
	err = sonde_spool_writer__add_offcpu_short(r->spool, &s);
	if (err)
		return sonde__rec_error(r, err);
	o->short_count = o->short_ns = 0;
	return 0;
}

int sonde__rec_offcpu_forget(struct sonde_recorder *r, struct rec_thread *t, uint64_t end,
			     uint64_t exit_ns)
{
	if (!t->off)
		return 0;
	int err = 0;
	if (t->off->pending && !t->off->lost && t->pid && exit_ns > t->off->out_ns) {
		/* it came back unseen (a switch-in the kernel did not trace) and ran to its
		 * exit: the wait ended before, when is not known */
		t->off->lost = true;
		r->sum.offcpu_unseen_switch_ins++;
		err = close_interval(r, t, exit_ns, false);
	} else if (t->off->pending && t->off->lost && t->pid && end > t->off->out_ns)
		err = close_interval(r, t, end, false); /* unknown up to its exit */
	else if (t->off->pending && (end > t->off->out_ns || !t->pid))
		r->sum.offcpu_dropped++; /* some of its life, which no figure will have */
	/* else its life ends where the wait began (a sweep found it gone, its last sighting
	 * that switch-out): nothing of the life is missing */
	if (!err && t->pid)
		err = write_short(r, t);
	sonde__rec_offcpu_free(t->off);
	t->off = NULL;
	return err;
}

void sonde__rec_offcpu_free(struct rec_offcpu *o)
{
	if (!o)
		return;
	sonde__free(o->data);
	sonde__free(o);
}

void sonde__rec_offcpu_release(struct sonde_recorder *r)
{
	sonde__free(r->offcpu.sw);
	r->offcpu.sw = NULL;
	r->offcpu.n_sw = 0;
}

int sonde__rec_offcpu_switches_push(struct sonde_recorder *r)
{
	for (uint32_t cpu = 0; cpu < r->offcpu.n_sw; cpu++) {
		int err = switches_flush(r, cpu);
		if (err)
			return err;
	}
	return 0;
}

uint64_t sonde__rec_offcpu_switches_pending(const struct sonde_recorder *r)
{
	uint64_t n = 0;

	for (uint32_t cpu = 0; cpu < r->offcpu.n_sw; cpu++)
		n += r->offcpu.sw[cpu].n;
	return n;
}

int sonde__rec_offcpu_finish(struct sonde_recorder *r)
{
	int first = 0;

	for (uint32_t cpu = 0; cpu < r->offcpu.n_sw; cpu++) {
		int err = switches_flush(r, cpu);
		if (err && !first)
			first = err;
	}
	uint64_t end = sonde__rec_time(r, sonde__rec_now(r));

	for (struct rec_thread *t = NULL; r->offcpu.on && (t = sonde__tasks_next_thread(&r->tasks, t));) {
		if (!t->off)
			continue;
		int err = t->off->pending ? close_interval(r, t, end, true) : 0;
		if (!err)
			err = write_short(r, t);
		if (err && !first)
			first = err;
	}
	return first;
}

bool sonde__rec_offcpu_on(const struct sonde_recorder *r)
{
	return r->offcpu.on;
}

int sonde__rec_offcpu_keep(const struct sonde_recorder *r, const struct perf_rec *rec, bool self)
{
	const struct perf_sample *s = &rec->sample;
	uint16_t type;

	if (!r->offcpu.on || !s->raw || s->raw_size < sizeof(type))
		return -1;
	memcpy(&type, s->raw, sizeof(type));
	/* every wakeup, the idle task's and the recorder's switch-outs: no stack is used */
	if (type == r->offcpu.waking_id ||
	    (type == r->offcpu.switch_id && (rec->pid == 0 || self)))
		return PERF_STREAM_HEADER;
	return type == r->offcpu.switch_id ? PERF_STREAM_KEEP : -1;
}
