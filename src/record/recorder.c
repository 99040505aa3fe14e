/* The recorder's public API and its drain pipeline:
 *
 *   1. drain   every ring into the perf stream (perf/stream.h): each record decoded once,
 *              what the recorder drops anyway dropped there, the rest queued per ring
 *   2. limit   the time up to which no ring can still deliver an older record
 *   3. process records up to the limit, in time order (merged across the rings): side
 *              band updates the process, thread and module tables; samples are unwound
 *              and written
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "record/recorder.h"

enum {
	DEFAULT_FREQ = 999,
};

uint64_t sonde__rec_mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sonde__rec_now(const struct sonde_recorder *r)
{
	return r->clock.now ? r->clock.now(r->clock.ctx) : sonde__rec_mono_now();
}

void sonde__rec_set_clock(struct sonde_recorder *r, rec_clock_fn now, void *ctx)
{
	r->clock = (struct rec_clock){now, now ? ctx : NULL};
}

static uint64_t wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int sonde__rec_error(struct sonde_recorder *r, int err)
{
	if (err && !r->first_error)
		r->first_error = err;
	return err;
}

void sonde__rec_context_error(struct sonde_recorder *r, int err, const char *what)
{
	sonde_warn("%s also failed: %s", what, sonde_strerror(err));
	if (!r->sum.context_errors++)
		r->sum.context_error = err;
}

uint64_t sonde__rec_time(struct sonde_recorder *r, uint64_t t)
{
	if (t < r->last_time)
		return r->last_time;
	r->last_time = t;
	return t;
}

int sonde_recorder__max_frequency(uint64_t *out)
{
	return sonde__perf_max_sample_rate(out);
}

/* The spool header's period: a cpu-clock period counts nanoseconds; a cycles period has
 * no fixed duration (0: unknown). */
static uint64_t sample_period_ns(const struct perf_event_cfg *c)
{
	if (c->kind == PERF_KIND_TRACEPOINT || c->dummy)
		return 0; /* hits have no duration; the dummy event never samples */
	if (c->period)
		return c->kind == PERF_KIND_CPU_CLOCK ? c->period : 0;
	return 1000000000ull / c->freq;
}

/* The tracepoint "GROUP:NAME" (or GROUP/NAME) as the sampling event: its id from tracefs,
 * each failure one error naming it. */
static int configure_tracepoint(struct sonde_recorder *r, const char *spec)
{
	char group[64], name[64];
	size_t g = strcspn(spec, ":/");

	if (!spec[g] || g == 0 || g >= sizeof(group) || strlen(spec + g + 1) >= sizeof(name) ||
	    !spec[g + 1]) {
		sonde_error("tracepoint '%s' is not GROUP:NAME", spec);
		return -EINVAL;
	}
	memcpy(group, spec, g);
	group[g] = 0;
	snprintf(name, sizeof(name), "%s", spec + g + 1);
	int id = sonde__perf_tracepoint_id(NULL, group, name);
	if (id == -ENOENT)
		sonde_error("unknown tracepoint %s:%s (tracefs has no events/%s/%s)", group, name,
			    group, name);
	else if (id == -ENODEV)
		sonde_error("tracepoint %s:%s: tracefs is not mounted (at /sys/kernel/tracing or "
			    "/sys/kernel/debug/tracing)",
			    group, name);
	else if (id == -EINVAL)
		sonde_error("tracepoint '%s' is not GROUP:NAME", spec);
	else if (id == -EACCES)
		sonde_error("tracepoint %s:%s: tracefs is not readable by this user "
			    "(/sys/kernel/tracing is root's unless its mode is changed)",
			    group, name);
	else if (id < 0)
		sonde_error("tracepoint %s:%s: cannot read its id from tracefs: %s", group, name,
			    sonde_strerror(id));
	if (id < 0)
		return id;
	r->cfg.kind = PERF_KIND_TRACEPOINT;
	r->cfg.tracepoint = (uint64_t)id;
	snprintf(r->sum.tracepoint, sizeof(r->sum.tracepoint), "%s:%s", group, name);
	return 0;
}

/* off_cpu with tracepoint sched:sched_switch: the switch-outs are the recording, with
 * every switch taken, so the recording's own event only carries the side band (a dummy
 * event, as perf does). Any other tracepoint, a filter or a period would take only some
 * switches, which the intervals cannot be built from. */
static int off_cpu_only(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	if (strcmp(o->tracepoint, "sched:sched_switch") != 0 &&
	    strcmp(o->tracepoint, "sched/sched_switch") != 0) {
		sonde_error("off-CPU recording samples sched:sched_switch or a CPU clock; it "
			    "cannot sample tracepoint %s",
			    o->tracepoint);
		return -EINVAL;
	}
	if (o->tracepoint_filter || o->sample_period) {
		sonde_error("an off-CPU-only recording (sched:sched_switch with off-CPU) takes "
			    "every switch: no %s",
			    o->tracepoint_filter ? "tracepoint filter" : "sample period");
		return -EINVAL;
	}
	r->cfg.dummy = true;
	return 0;
}

/* Validates options into the event configuration; *out receives them (fields the caller's
 * struct does not have are zero). */
/* Kernel time is sampled by default (not asked for with `kernel`) only up to this rate.
 * A CPU-clock sample costs microseconds (the user-stack copy above all), several times
 * that on a loaded machine, and the kernel re-arms the clock on its period's grid: at
 * 100 kHz (10 us) the next sample comes due while the last one's interrupt is still
 * returning, and in kernel mode it is taken too. The samples then sample each other and
 * the thread barely returns to its own code: `split 1` recorded at the kernel's maximum
 * beside two busy loops ran 5 to 100 s (1.7 million samples, most of them in the
 * interrupt's exit path), against 1 to 6 s with user space only. */
enum { KERNEL_TIME_MAX_HZ = 10000 };

/* Above KERNEL_TIME_MAX_HZ, the default kernel time is left out; said as a refusal would
 * be (kernel_time_error -ERANGE: the summary and the report name the rate). */
static void kernel_time_rate(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	uint64_t rate = o->frequency;

	if (!r->cfg.kernel_time || r->cfg.kernel || r->cfg.dummy || o->tracepoint)
		return;
	if (o->sample_period)
		rate = o->event == SONDE_RECORD_EVENT_CPU_CLOCK ? 1000000000ull / o->sample_period
								 : 0;
	if (rate <= KERNEL_TIME_MAX_HZ)
		return;
	sonde_info("kernel time not sampled at %llu Hz (above %u Hz the samples' own cost would "
		   "be sampled as kernel time); sampling user space only",
		   (unsigned long long)rate, (unsigned)KERNEL_TIME_MAX_HZ);
	r->cfg.kernel_time = false;
	sonde__rec_kernel_time_refused(r, -ERANGE);
}

static int apply_opts(struct sonde_recorder *r, const struct sonde_record_opts *opts,
		      struct sonde_record_opts *out)
{
	struct sonde_record_opts o = {.frequency = DEFAULT_FREQ};
	uint64_t max;

	if (!OPTS_VALID(opts, sonde_record_opts))
		return -EINVAL;
	OPTS_COPY(&o, opts);
	/* Children are followed unless the caller says no_follow_children; a caller built
	 * before that field existed said yes with follow_children (docs/api.md). */
	if (o.follow_children && o.no_follow_children) {
		sonde_error("follow_children and no_follow_children contradict each other");
		return -EINVAL;
	}
	if (!opts || OPTS_HAS(opts, no_follow_children))
		o.follow_children = !o.no_follow_children;
	*out = o;
	int err = sonde__perf_max_sample_rate(&max);
	if (err) {
		sonde_error("cannot read kernel.perf_event_max_sample_rate: %s", strerror(-err));
		return err;
	}
	if (o.frequency == SONDE_RECORD_FREQ_MAX)
		o.frequency = max;
	if (o.tracepoint_filter && !o.tracepoint) {
		sonde_error("a tracepoint filter needs a tracepoint");
		return -EINVAL;
	}
	if (o.tracepoint && o.off_cpu) {
		err = off_cpu_only(r, &o);
		if (err)
			return err;
	}
	if (r->cfg.dummy) {
		/* no on-CPU samples: neither frequency nor period applies */
	} else if (o.tracepoint) {
		err = configure_tracepoint(r, o.tracepoint);
		if (err)
			return err;
		if (o.tracepoint_filter && sonde__rec_set_tracepoint_filter(r, o.tracepoint_filter))
			return -ENOMEM;
	} else if (!o.sample_period && (o.frequency == 0 || o.frequency > max)) {
		sonde_error(
			"sampling frequency %llu Hz is out of range: the kernel maximum is %llu "
			"Hz (kernel.perf_event_max_sample_rate)",
			(unsigned long long)o.frequency, (unsigned long long)max);
		return -SONDE_E_RANGE;
	}
	if (o.stack_bytes > PERF_STACK_MAX) {
		sonde_error("stack size %u is too large: at most %u bytes", o.stack_bytes,
			    PERF_STACK_MAX);
		return -SONDE_E_RANGE;
	}
	if (o.ring_pages & (o.ring_pages - 1)) {
		sonde_error("ring size %u pages is not a power of two", o.ring_pages);
		return -SONDE_E_RANGE;
	}
	sonde__rec_unwind_fp_only(r, o.frame_pointers_only);
	sonde__rec_life_configure(r, &o);
	r->cfg.no_children = !o.follow_children;
	r->cfg.freq = o.frequency;
	r->cfg.period = o.sample_period;
	r->cfg.kernel = o.kernel;
	r->cfg.kernel_time = !o.user_only;
	kernel_time_rate(r, &o);
	int err_img = sonde__rec_images_configure(r, &o);
	if (err_img)
		return err_img;
	r->cfg.stack_bytes = o.stack_bytes ? (o.stack_bytes + 7) & ~7u : PERF_STACK_DEFAULT;
	r->ev.ring_pages = o.ring_pages;
	r->sum.frequency = r->cfg.period || r->cfg.kind == PERF_KIND_TRACEPOINT || r->cfg.dummy
				   ? 0
				   : r->cfg.freq;
	r->sum.stack_bytes = r->cfg.stack_bytes;
	r->sum.stack_bytes_min = r->sum.stack_bytes_max = r->cfg.stack_bytes;
	/* no size given: each thread's copy is sized by what its unwinds need (resize.c) */
	r->ev.adaptive = !o.stack_bytes;
	return (int)o.event;
}

enum {
	/* How long a ring must hold what its CPU samples while the recorder is not running:
	 * on a loaded machine a woken recorder can wait for dozens of busy threads' time
	 * slices before it drains (64 busy threads on 2 CPUs: about 150 ms). A system-wide
	 * recorder's first drains no longer meet every busy process's images at once (read
	 * with /proc, before sampling starts), and its drains keep up with an exec storm
	 * beside a busy machine in half of this (docs/record.md, "Ring sizing"). Rounded up
	 * to a power of two, a ring holds 200 to 400 ms. */
	RING_BUDGET_MS = 200,
	/* Bound of all rings together when no locked-memory limit applies (CAP_IPC_LOCK). */
	RING_CAP_BYTES = 256u << 20,
	/* Tracepoint hits a second a ring is sized for. */
	TRACEPOINT_RATE = 1000,
	/* The least a ring holds: the side band (a program's start maps a few dozen files;
	 * with -a, every process's) is all an off-CPU-only recording by the BPF backend
	 * writes there, its waits going through the programs' own ring. */
	RING_SIDE_BAND_BYTES = 1u << 20,
};

/* The locked memory perf rings may take without CAP_IPC_LOCK: perf_event_mlock_kb per
 * online CPU (the kernel's per-user allowance), plus RLIMIT_MEMLOCK. 0 when unbounded. */
static uint64_t ring_mlock_cap(size_t online)
{
	struct rlimit rl;
	long kb = 516;
	FILE *f;

	if (geteuid() == 0)
		return 0;
	if ((f = fopen("/proc/sys/kernel/perf_event_mlock_kb", "re"))) {
		if (fscanf(f, "%ld", &kb) != 1)
			kb = 516;
		fclose(f);
	}
	uint64_t cap = (uint64_t)kb * 1024 * online;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		cap += rl.rlim_cur;
	return cap;
}

void sonde__rec_size_rings(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), cap = ring_mlock_cap(r->ev.n_cpus);

	r->sum.ring_bytes_cap = cap ? cap : RING_CAP_BYTES;
	/* A ring holds a CPU's samples for RING_BUDGET_MS: per-thread events sample each
	 * thread only while it runs, and per-CPU events the CPU, so a CPU writes at most
	 * `frequency` samples a second either way. A sample is its stack copy, the registers,
	 * headers and, with kernel frames, the callchain. */
	uint64_t sample = r->cfg.stack_bytes + 256 + (r->cfg.kernel ? 8 * 128 : 0);
	/* samples a second: the frequency, or what a cpu-clock period (-c) amounts to */
	uint64_t rate = r->cfg.dummy ? 0 : r->cfg.freq;
	if (r->cfg.period && r->cfg.kind == PERF_KIND_CPU_CLOCK)
		rate = 1000000000ull / r->cfg.period + 1;
	/* the perf off-CPU backend's switch-outs share the rings, at the workload's rate */
	bool perf_offcpu = sonde__rec_offcpu_on(r) && !r->offcpu.bpf;
	bool clocked = rate && r->cfg.kind != PERF_KIND_TRACEPOINT &&
		       (!r->cfg.period || r->cfg.kind == PERF_KIND_CPU_CLOCK) && !perf_offcpu;
	r->ev.fill_bps = clocked ? rate * sample : 0;
	/* A tracepoint's rate is the workload's: sched_switch on a busy CPU runs to tens of
	 * thousands a second, so size for TRACEPOINT_RATE hits per period (a ring that loses
	 * grows with -a; -ring-pages overrides). */
	if (r->cfg.kind == PERF_KIND_TRACEPOINT)
		rate = TRACEPOINT_RATE / (r->cfg.period ? r->cfg.period : 1) + 1;
	/* the perf backend's switch-outs come on top of the clock's samples, at the rate
	 * threads block: a guess of a thousand a second (the loss accounting and, with -a,
	 * growing rings cover what a busier program does) */
	if (perf_offcpu)
		rate += 1000;
	if (o->ring_pages) {
		r->ev.ring_pages = o->ring_pages;
		return;
	}
	uint64_t want = rate * sample * RING_BUDGET_MS / 1000;
	if (want < RING_SIDE_BAND_BYTES)
		want = RING_SIDE_BAND_BYTES;
	/* the bound over all rings, each ring's meta page included */
	uint64_t per_ring = r->sum.ring_bytes_cap / (r->ev.n_cpus ? r->ev.n_cpus : 1);
	per_ring = per_ring > page ? per_ring - page : page;
	if (want > per_ring)
		want = per_ring;
	uint32_t pages = 1;
	while ((uint64_t)pages * 2 * page <= want && pages < (1u << 20))
		pages *= 2;
	/* one power of two above when that stays under the bound: sizes are never below
	 * the budget when the bound allows it */
	if ((uint64_t)pages * page < want && (uint64_t)pages * 2 * page <= per_ring)
		pages *= 2;
	r->ev.ring_pages = pages;
}

/* What the recorder would drop on reading a record, dropped before the stream copies
 * anything of it: records of a stale generation of events (sonde__rec_is_stale), samples
 * of the idle task and (system-wide) of the recorder itself, counted
 * as they would be; and the stacks of tracepoint samples whose stack is never used (every
 * wakeup, the idle task's and the recorder's switch-outs), which keep their raw data for
 * the off-CPU accounting. */
static enum perf_stream_keep stream_filter(void *ctx, const struct perf_rec *rec)
{
	struct sonde_recorder *r = ctx;

	if (sonde__rec_is_stale(r, rec)) {
		r->sum.duplicates_dropped++;
		return PERF_STREAM_DROP;
	}
	if (rec->type != PERF_RECORD_SAMPLE)
		return PERF_STREAM_KEEP;
	bool self = r->system_wide && sonde__rec_is_self(r, (pid_t)rec->pid);
	int off = sonde__rec_offcpu_keep(r, rec, self);
	if (off >= 0)
		return (enum perf_stream_keep)off;
	if (!rec->has_id || !rec->time || rec->pid == UINT32_MAX || rec->tid == UINT32_MAX)
		return PERF_STREAM_KEEP; /* counted where it is processed */
	if (rec->pid == 0) {
		r->sum.samples++;
		r->sum.idle_samples++;
		return PERF_STREAM_DROP;
	}
	if (self) {
		r->sum.samples++;
		r->sum.own_samples++;
		return PERF_STREAM_DROP;
	}
	return PERF_STREAM_KEEP;
}

/* Two stream sources per ring: its own, and that of the ring replacing it while a
 * generation switch grows it (resize.c swaps them). */
static int add_sources(struct sonde_recorder *r)
{
	for (size_t i = 0; i < r->ev.n_cpus; i++) {
		int a = sonde__perf_stream_add_source(r->stream);
		int b = a < 0 ? a : sonde__perf_stream_add_source(r->stream);
		if (b < 0)
			return b;
		r->ev.rings[i].src = a;
		r->ev.rings[i].next_src = b;
	}
	return 0;
}

static struct sonde_recorder *recorder_alloc(void)
{
	struct sonde_recorder *r = sonde__calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->ev.epfd = -1;
	r->ev.pace_fd = -1;
	r->out_fd = -1;
	r->ev.gen = 1;
	sonde__perf_event_layout(&r->layout);
	r->sum.sz = sizeof(r->sum);
	sonde__rec_life_init(r);
	if (sonde__perf_online_cpus(&r->ev.cpus, &r->ev.n_cpus) < 0 ||
	    !(r->ev.rings = sonde__calloc(r->ev.n_cpus, sizeof(*r->ev.rings))) ||
	    !(r->stream = sonde__perf_stream_new(&r->layout, stream_filter, r)) ||
	    add_sources(r) < 0 || (r->ev.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    sonde__rec_unwind_init(r) < 0) {
		sonde_recorder__free(r);
		return NULL;
	}
	return r;
}

/* With the event chosen: the decode layout, the summary's settings, the spool header. */
static int start_spool(struct sonde_recorder *r, sonde_spool_write_fn write, void *ctx)
{
	sonde__perf_event_layout_cfg(&r->layout, &r->cfg);
	sonde__perf_stream_set_layout(r->stream, &r->layout);
	r->sum.kernel_enabled = r->cfg.kernel;
	r->sum.kernel_time = r->cfg.kernel || r->cfg.kernel_time;
	snprintf(r->sum.event, sizeof(r->sum.event), "%s",
		 r->cfg.dummy ? "dummy" : sonde__perf_kind_name(r->cfg.kind));
	sonde__rec_kernel_summary(r, &r->sum);
	/* Wake the caller once a quarter of a ring is used, not at every sample: fewer
	 * wakeups, and a quarter of the time budget the ring was sized for (the caller also
	 * polls with a timeout). The kernel clamps the watermark to the ring actually mapped. */
	r->cfg.wakeup_bytes =
		(uint32_t)((uint64_t)r->ev.ring_pages * (uint64_t)sysconf(_SC_PAGESIZE) / 4);

	r->start_mono = sonde__rec_now(r);
	struct sonde_spool_header h = {.start_time_ns = wall_now(),
				       .start_monotonic_ns = r->start_mono,
				       .sample_period_ns = sample_period_ns(&r->cfg)};
	r->last_time = r->start_mono;
	r->spool = sonde_spool_writer__new(write, ctx, &h);
	if (!r->spool) {
		sonde_error("cannot write the spool header: %s", strerror(errno));
		return -errno;
	}
	return sonde__rec_offcpu_on(r) ? sonde_spool_writer__declare_offcpu(r->spool) : 0;
}

/* The outcome of attaching a thread as an error: it must be recorded to go on. */
static int thread_attached(pid_t tid, int out)
{
	if (out == SONDE_ATTACH_EXITED || out == -ESRCH)
		sonde_error("no such thread: %d (it exited while attaching)", (int)tid);
	else if (out == -EACCES || out == -EPERM)
		sonde__rec_explain_perf_error(tid, out);
	else if (out < 0 && out != -SONDE_E_UNSUPPORTED)
		sonde_error("cannot attach to tid %d: %s", (int)tid, sonde_strerror(out));
	if (out == SONDE_ATTACH_EXITED)
		return -ESRCH;
	return out < 0 ? out : 0;
}

/* attach() of opts.attach_thread: pid is the thread to record. */
static int attach_thread(struct sonde_recorder *r, pid_t tid, sonde_spool_write_fn write, void *ctx,
			 enum sonde_attach_mode mode, const struct sonde_record_opts *o, int want)
{
	pid_t pid;
	int err = sonde__rec_check_thread(tid, &pid);

	if (!err) /* off-CPU as for a process: it was left out here, silently */
		err = sonde__rec_offcpu_setup(r, o);
	if (err)
		return err;
	err = sonde__rec_choose_event(r, tid, want);
	if (err) {
		if (err == -ESRCH)
			sonde_error("no such thread: %d", (int)tid);
		else
			sonde__rec_explain_perf_error(tid, err);
		return err;
	}
	sonde__rec_size_rings(r, o);
	err = start_spool(r, write, ctx);
	if (!err)
		err = thread_attached(tid, sonde__rec_open_thread_target(r, tid, mode));
	return err ? err : sonde_recorder__enable(r);
}

static int attach(struct sonde_recorder *r, pid_t pid, sonde_spool_write_fn write, void *ctx,
		  enum sonde_attach_mode mode, const struct sonde_record_opts *opts)
{
	struct sonde_record_opts o;
	int want = apply_opts(r, opts, &o);

	if (want < 0)
		return want;
	if (mode > SONDE_ATTACH_RUNNING || want > SONDE_RECORD_EVENT_CPU_CLOCK ||
	    (o.attach_thread && mode == SONDE_ATTACH_ON_EXEC))
		return -EINVAL;
	if (o.attach_thread)
		return attach_thread(r, pid, write, ctx, mode, &o, want);
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH)) {
		sonde_error("no such process: %d", (int)pid);
		return -ESRCH;
	}
	int err = sonde__rec_check_target(pid);
	if (!err)
		err = sonde__rec_offcpu_setup(r, &o);
	/* A launched command recorded off CPU only, its switches tracked by the BPF
	 * programs: its side band comes from per-CPU events kept to its tree (system.c) */
	bool tree = !err && mode == SONDE_ATTACH_ON_EXEC && r->cfg.dummy && r->offcpu.bpf &&
		    sonde__rec_follows_children(r) && !o.exec_check;
	if (tree)
		err = sonde__rec_system_launched(r, pid);
	if (err)
		return err;
	/* probed on a live thread: a main thread that ended first takes no event */
	pid_t probe = pid;
	sonde__proc_live_task(pid, &probe);
	err = sonde__rec_choose_event(r, tree ? -1 : probe, want);
	if (err) {
		if (err == -ESRCH)
			sonde_error("no such process: %d", (int)pid);
		else
			sonde__rec_explain_event_error(r, pid, err);
		return err;
	}
	sonde__rec_size_rings(r, &o);
	err = start_spool(r, write, ctx);
	if (!err && tree)
		err = sonde__rec_system_open(r);
	if (err)
		return err;
	err = sonde__rec_open_process(r, pid, mode);
	if (err == -EACCES || err == -EPERM)
		sonde__rec_explain_perf_error(pid, err);
	else if (err == -ESRCH)
		sonde_error("no such process: %d (it exited while attaching)", (int)pid);
	else if (err)
		sonde_error("cannot attach to pid %d: %s", (int)pid, sonde_strerror(err));
	/* per-CPU events are enabled now: the command is still in its launcher, which records
	 * nothing of it before its exec (the programs wait for it) */
	if (!err && (mode != SONDE_ATTACH_ON_EXEC || tree))
		err = sonde_recorder__enable(r);
	else if (!err)
		r->enabled = true; /* the kernel enables the events at exec */
	return err;
}

/* A constructor's outcome: r, or NULL with r freed and errno set from err. */
static struct sonde_recorder *made_or_free(struct sonde_recorder *r, int err)
{
	if (!err)
		return r;
	sonde_recorder__free(r);
	errno = err == -SONDE_E_RANGE ? ERANGE : err <= -SONDE_E_BASE ? EIO : -err;
	return NULL;
}

static struct sonde_recorder *attach_or_free(struct sonde_recorder *r, pid_t pid,
					     sonde_spool_write_fn write, void *ctx,
					     enum sonde_attach_mode mode,
					     const struct sonde_record_opts *opts)
{
	return made_or_free(r, attach(r, pid, write, ctx, mode, opts));
}

struct sonde_recorder *sonde_recorder__attach_writer(pid_t pid, sonde_spool_write_fn write,
						     void *ctx, enum sonde_attach_mode mode,
						     const struct sonde_record_opts *opts)
{
	struct sonde_recorder *r = recorder_alloc();

	if (!r)
		return NULL;
	return attach_or_free(r, pid, write, ctx, mode, opts);
}

/* A recorder for the constructors that take a path, its spool file created or truncated
 * (r->out_fd). *created says whether this call made the file: a failure after this
 * removes only such a file, never a device, a FIFO, a symlink or a file the caller
 * pointed it at. NULL with errno set (said) on failure. */
static struct sonde_recorder *recorder_with_output(const char *path, bool *created)
{
	struct sonde_recorder *r = recorder_alloc();

	if (!r)
		return NULL;
	/* O_EXCL creates only where nothing is, not even a dangling symlink: what it made is
	 * this call's to remove, with no window for another to put something there */
	r->out_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	*created = r->out_fd >= 0;
	if (r->out_fd < 0 && errno == EEXIST)
		r->out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (r->out_fd >= 0)
		return r;
	int err = errno;
	sonde_error("cannot create %s: %s", path, strerror(err));
	sonde_recorder__free(r);
	errno = err;
	return NULL;
}

/* A constructor that opened path failed (errno says why): nothing was recorded, so no
 * half-written file of its own is left behind. */
static void drop_output(const char *path, bool created)
{
	int err = errno;

	if (created)
		unlink(path);
	errno = err;
}

struct sonde_recorder *sonde_recorder__attach(pid_t pid, const char *path,
					      enum sonde_attach_mode mode,
					      const struct sonde_record_opts *opts)
{
	bool created;
	struct sonde_recorder *r = recorder_with_output(path, &created);

	if (!r)
		return NULL;
	r = attach_or_free(r, pid, sonde_spool_writer__write_fd, (void *)(intptr_t)r->out_fd, mode,
			   opts);
	if (!r)
		drop_output(path, created);
	return r;
}

/* Why a system-wide event was refused, in one line. */
static void explain_system_error(int err)
{
	long paranoid = -1;
	FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");

	if (f) {
		if (fscanf(f, "%ld", &paranoid) != 1)
			paranoid = -1;
		fclose(f);
	}
	if (err == -EACCES || err == -EPERM)
		sonde_error("permission denied: recording every process needs CAP_PERFMON (or "
			    "root) or kernel.perf_event_paranoid <= 0 (it is %ld)",
			    paranoid);
	else
		sonde_error("cannot open system-wide perf events: %s", sonde_strerror(err));
}

static int attach_system(struct sonde_recorder *r, sonde_spool_write_fn write, void *ctx,
			 const struct sonde_record_opts *opts)
{
	struct sonde_record_opts o;
	int want = apply_opts(r, opts, &o);

	if (want < 0)
		return want;
	if (want > SONDE_RECORD_EVENT_CPU_CLOCK)
		return -EINVAL;
	int err = sonde__rec_system_configure(r, &o);
	if (!err && (err = sonde__rec_offcpu_setup(r, &o)))
		return err;
	if (!err)
		err = sonde__rec_choose_event(r, -1, want);
	if (err) {
		if (err != -EINVAL && err != -ENOMEM && !r->ev.event_error_said)
			explain_system_error(err);
		return err;
	}
	sonde__rec_size_rings(r, &o);
	err = start_spool(r, write, ctx);
	if (!err)
		err = sonde__rec_system_open(r);
	if (err) {
		explain_system_error(err);
		return err;
	}
	/* /proc is read before sampling starts, as perf does: reading every process's
	 * mappings takes a while, during which enabled rings would fill. A process started in
	 * between is read from /proc at its first sample. */
	err = sonde__rec_system_scan(r, r->start_mono);
	if (err) {
		/* a filtered thread that does not exist, or a kernel thread: said already */
		if (err != -ESRCH && err != -SONDE_E_UNSUPPORTED)
			sonde_error("cannot read the running processes: %s", sonde_strerror(err));
		return err;
	}
	return sonde_recorder__enable(r);
}

struct sonde_recorder *sonde_recorder__attach_system_writer(sonde_spool_write_fn write, void *ctx,
							    const struct sonde_record_opts *opts)
{
	struct sonde_recorder *r = recorder_alloc();

	return r ? made_or_free(r, attach_system(r, write, ctx, opts)) : NULL;
}

struct sonde_recorder *sonde_recorder__attach_system(const char *path,
						     const struct sonde_record_opts *opts)
{
	bool created;
	struct sonde_recorder *r = recorder_with_output(path, &created);

	if (!r)
		return NULL;
	r = made_or_free(r, attach_system(r, sonde_spool_writer__write_fd,
					  (void *)(intptr_t)r->out_fd, opts));
	if (!r)
		drop_output(path, created);
	return r;
}

int sonde_recorder__attach_process(struct sonde_recorder *r, pid_t pid, enum sonde_attach_mode mode)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (r->finished)
		return -SONDE_E_STATE;
	if (r->system_wide && !sonde__rec_system_launched_tree(r))
		return -EINVAL; /* every process is recorded already */
	if (mode > SONDE_ATTACH_RUNNING)
		return -EINVAL;
	if (p && !p->exited) {
		int alive = sonde__proc_is_alive(pid, p->start_time);
		if (alive < 0)
			return alive;
		if (alive)
			return SONDE_ATTACH_ALREADY;
	}
	if (p) {
		/* The pid now names another process: start over with it. */
		int err = sonde__rec_process_reset(r, p, sonde__rec_time(r, sonde__rec_now(r)));
		if (err)
			return err;
	}
	int err = sonde__rec_check_target(pid);
	if (err == -ESRCH)
		return SONDE_ATTACH_EXITED;
	if (err)
		return err;
	err = sonde__rec_open_process(r, pid, mode);
	if (err == -ESRCH)
		return SONDE_ATTACH_EXITED;
	if (err == -EACCES || err == -EPERM)
		sonde__rec_explain_perf_error(pid, err);
	else if (err)
		sonde_error("cannot attach to pid %d: %s", (int)pid, sonde_strerror(err));
	if (!err && mode != SONDE_ATTACH_ON_EXEC)
		err = sonde_recorder__enable(r);
	return err ? err : SONDE_ATTACH_ATTACHED;
}

int sonde_recorder__attach_thread(struct sonde_recorder *r, pid_t tid, enum sonde_attach_mode mode)
{
	if (r->finished)
		return -SONDE_E_STATE;
	if ((r->system_wide && !sonde__rec_system_launched_tree(r)) ||
	    mode == SONDE_ATTACH_ON_EXEC || mode > SONDE_ATTACH_RUNNING)
		return -EINVAL;
	if (r->system_wide) {
		int err = sonde__rec_system_take_thread(r, tid);
		return err == -ESRCH ? SONDE_ATTACH_EXITED : err ? err : SONDE_ATTACH_ATTACHED;
	}
	int out = sonde__rec_open_thread_target(r, tid, mode);
	if (out == -ESRCH)
		return SONDE_ATTACH_EXITED;
	if (out != SONDE_ATTACH_ATTACHED) {
		if (out < 0)
			thread_attached(tid, out);
		return out;
	}
	int err = sonde_recorder__enable(r);
	return err ? err : SONDE_ATTACH_ATTACHED;
}

int sonde_recorder__detach_process(struct sonde_recorder *r, pid_t pid)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (r->finished)
		return -SONDE_E_STATE;
	if (r->system_wide)
		return -EINVAL; /* every process is recorded already */
	if (!p || !p->attached || p->exited)
		return -EINVAL;
	return sonde__rec_stop_process(r, p);
}

int sonde_recorder__epoll_fd(const struct sonde_recorder *r)
{
	return r->ev.epfd;
}

/* At most max_bytes of ring into the stream; *more (may be NULL): it holds more. */
static int drain_ring_some(struct sonde_recorder *r, struct rec_ring *ring, size_t max_bytes,
			   bool *more)
{
	struct perf_stream_drained d;
	int err = sonde__perf_stream_drain_some(r->stream, ring->src, &ring->ring, max_bytes, more,
						&d);

	r->sum.bad_records += d.bad;
	/* a full ring: the recorder may grow it (system.c) */
	if (d.lost)
		ring->lost_seen = true;
	return err;
}

int sonde__rec_drain_ring_last(struct sonde_recorder *r, struct rec_ring *ring)
{
	int err = drain_ring_some(r, ring, SIZE_MAX, NULL);
	int uerr = sonde__perf_stream_unborrow(r->stream, ring->src);

	return err ? err : uerr;
}

/* Step 1: the published records of every ring into the stream, at most max_bytes of each
 * (SIZE_MAX: all); *more (may be NULL): a ring holds more. */
static int drain_rings_some(struct sonde_recorder *r, size_t max_bytes, bool *more)
{
	int first = sonde__rec_offcpu_bpf_drain(r);

	for (size_t i = 0; i < r->ev.n_cpus; i++) {
		bool left = false;
		if (!r->ev.rings[i].mapped)
			continue;
		int err = drain_ring_some(r, &r->ev.rings[i], max_bytes, &left);
		if (err && !first)
			first = err;
		if (more)
			*more |= left;
	}
	return first;
}

static int drain_rings(struct sonde_recorder *r)
{
	return drain_rings_some(r, SIZE_MAX, NULL);
}

/* While a long batch is processed (unwinding, the first look at a large binary), the rings
 * keep filling: every DRAIN_EVERY_NS they are emptied into the stream again (a stack the
 * stream reads in place holds no more than an eighth of its ring). What is queued then is
 * newer than the limit being processed (no ring can deliver anything older), so the order
 * is kept. The queue is bounded: past STREAM_CAP_BYTES the rings are left to the kernel
 * (which then counts losses). */
enum { DRAIN_EVERY_NS = 5000000, STREAM_CAP_BYTES = 256u << 20 };

static int drain_rings(struct sonde_recorder *r);

static void drain_meanwhile(struct sonde_recorder *r, uint64_t *last)
{
	uint64_t now = sonde__rec_now(r);

	if (now - *last < DRAIN_EVERY_NS || sonde__perf_stream_bytes(r->stream) > STREAM_CAP_BYTES)
		return;
	*last = now;
	sonde__rec_error(r, drain_rings(r));
}

/* Steps 2 and 3. */
static int process_until(struct sonde_recorder *r, uint64_t limit, struct sonde_record_poll *pr)
{
	const struct perf_rec *rec;
	uint64_t last_drain = sonde__rec_now(r);
	unsigned n = 0;

	while ((rec = sonde__perf_stream_pop(r->stream, limit))) {
		if (sonde__rec_offcpu_bpf_record(r, rec))
			continue; /* a wait of the BPF backend, written */
		uint64_t samples = r->sum.samples, lost = r->sum.lost_events;
		int err = sonde__rec_process_record(r, rec);
		pr->samples += r->sum.samples - samples;
		pr->lost_events += r->sum.lost_events - lost;
		if (err)
			return err;
		/* rec is not used past this point: a drain may reuse its place. Not when
		 * everything is being released (the final drain): what is drained would be
		 * released in the same loop, which a busy machine could then keep going. */
		if ((++n & 31) == 0 && limit != UINT64_MAX)
			drain_meanwhile(r, &last_drain);
	}
	return 0;
}

/* What a drain reads of each ring before it processes what that released: the records it
 * decoded are still in the caches when they are unwound (drained whole, the unwinder's reads
 * of a 10 kHz -a recording's stacks missed them: a fifth of its CPU), and the ring space the
 * samples' stacks are read in goes back to the kernel a batch at a time. */
enum { DRAIN_BATCH_BYTES = 256u << 10 };

static int drain_and_process(struct sonde_recorder *r, bool final, struct sonde_record_poll *pr)
{
	uint64_t floor = sonde__rec_now(r) - REC_REORDER_SLACK_NS;
	int err = 0, perr = 0;
	bool more;

	if (final) {
		/* everything goes: nothing may stay behind in a ring */
		err = sonde__rec_error(r, drain_rings(r));
		perr = process_until(r, UINT64_MAX, pr);
		return err ? err : perr;
	}
	/* a batch of each ring, then what it released, until every ring is read or as many
	 * batches have gone as the fullest ring held at the start (rings a busy machine keeps
	 * refilling do not keep the poll here); a ring read in part stands for its newest
	 * record read in the release limit, so the order is kept */
	uint64_t budget = 0; /* the most a ring held */
	for (size_t i = 0; i < r->ev.n_cpus; i++) {
		uint64_t held = r->ev.rings[i].mapped ? sonde__perf_ring_pending(&r->ev.rings[i].ring)
						      : 0;
		if (held > budget)
			budget = held;
	}
	do {
		more = false;
		err = sonde__rec_error(r, drain_rings_some(r, DRAIN_BATCH_BYTES, &more));
		perr = process_until(r, sonde__perf_stream_limit(r->stream, floor), pr);
		budget = budget > DRAIN_BATCH_BYTES ? budget - DRAIN_BATCH_BYTES : 0;
	} while (more && budget && !err && !perr);
	return err ? err : perr;
}

/* Everything stamped before now, processed in order. While the events run, the rings are
 * read one after another, and a record written into a ring after its read can be older
 * than what a ring read later holds (a child's fork, a sample before an exec, against the
 * exec's comm): what the reorder floor allows goes first, then, once a record stamped
 * at the start can no longer be on its way (a short wait at most: processing usually
 * outlasts the slack), the rings are read again and everything up to the start goes.
 * Once the events are disabled, everything queued goes. */
int sonde__rec_drain(struct sonde_recorder *r)
{
	struct sonde_record_poll pr = {0};
	uint64_t start = sonde__rec_now(r);

	if (!r->enabled)
		return drain_and_process(r, true, &pr);
	int err = drain_and_process(r, false, &pr);
	uint64_t now = sonde__rec_now(r);
	if (now < start + REC_REORDER_SLACK_NS) {
		/* the whole slack, whatever signal comes meanwhile */
		struct timespec left = {0, (long)(start + REC_REORDER_SLACK_NS - now)};
		while (nanosleep(&left, &left) < 0 && errno == EINTR)
			;
	}
	int again = sonde__rec_error(r, drain_rings(r));
	int perr = process_until(r, start, &pr);
	return err ? err : again ? again : perr;
}

static void drop_hung_up(struct sonde_recorder *r, const struct epoll_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		if (sonde__rec_offcpu_bpf_is_ring(ev[i].data.u64) ||
		    ev[i].data.u64 == REC_PACE_EPOLL_DATA)
			continue;
		struct rec_ring *ring = &r->ev.rings[ev[i].data.u64];
		/* A ring whose events all ended stays readable forever: stop waiting on it (its
		 * remaining records are still drained). */
		if ((ev[i].events & (EPOLLHUP | EPOLLERR)) && !ring->hup) {
			epoll_ctl(r->ev.epfd, EPOLL_CTL_DEL, ring->ring.fd, NULL);
			ring->hup = true;
		}
	}
}

/* Paced drains (events.h): the timer, made at the first poll, runs every quarter of what
 * the smallest ring holds at the rate the rings were sized for (a ring grown or replaced
 * changes it); its expirations are taken at each poll, so that a caller waiting on the
 * recorder's epoll fd is not woken again for the same. 0 or -errno. */
static int pace(struct sonde_recorder *r)
{
	uint64_t least = UINT64_MAX, x;

	if (!r->ev.fill_bps)
		return 0;
	for (size_t i = 0; i < r->ev.n_cpus; i++) {
		const struct rec_ring *ring = &r->ev.rings[i];
		if (ring->mapped && ring->ring.size < least)
			least = ring->ring.size;
		if (ring->next_mapped && ring->next.size < least)
			least = ring->next.size;
	}
	if (least == UINT64_MAX)
		return 0;
	uint64_t ns = least * 1000000000ull / r->ev.fill_bps / 4;
	if (ns < 1000000)
		ns = 1000000;
	if (r->ev.pace_fd < 0) {
		struct epoll_event e = {.events = EPOLLIN, .data.u64 = REC_PACE_EPOLL_DATA};
		r->ev.pace_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (r->ev.pace_fd < 0 || epoll_ctl(r->ev.epfd, EPOLL_CTL_ADD, r->ev.pace_fd, &e) < 0)
			return -errno;
	} else if (read(r->ev.pace_fd, &x, sizeof(x)) < 0 && errno != EAGAIN) {
		return -errno;
	}
	if (ns == r->ev.pace_ns)
		return 0;
	struct timespec every = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
	struct itimerspec its = {.it_interval = every, .it_value = every};
	if (timerfd_settime(r->ev.pace_fd, 0, &its, NULL) < 0)
		return -errno;
	r->ev.pace_ns = ns;
	return 0;
}

int sonde_recorder__poll(struct sonde_recorder *r, int timeout_ms, struct sonde_record_poll *out)
{
	struct sonde_record_poll pr = {0};
	struct epoll_event ev[16];

	if (r->finished)
		return -SONDE_E_STATE;
	if (!OPTS_OUT_VALID(out))
		return -EINVAL;
	int perr = sonde__rec_error(r, pace(r));
	if (perr)
		return perr;
	if (timeout_ms != 0) {
		int n = epoll_wait(r->ev.epfd, ev, 16, sonde__rec_regen_wait_ms(r, timeout_ms));
		if (n < 0 && errno != EINTR)
			return -errno;
		drop_hung_up(r, ev, n);
	}
	int err = drain_and_process(r, false, &pr);
	if (r->system_wide)
		sonde__rec_grow_rings(r);
	else if (!err)
		err = sonde__rec_maybe_regen(r);
	if (!err)
		err = sonde__rec_maybe_recover(r, false);
	if (!err)
		err = sonde__rec_error(r, sonde__rec_live_push(r));
	if (out && out->sz >= sizeof(size_t)) {
		pr.sz = out->sz;
		memcpy(out, &pr, out->sz < sizeof(pr) ? out->sz : sizeof(pr));
	}
	return err ? err : (int)(pr.samples > INT32_MAX ? INT32_MAX : pr.samples);
}

int sonde_recorder__flush(struct sonde_recorder *r)
{
	struct sonde_record_poll pr = {0};

	if (r->finished)
		return -SONDE_E_STATE;
	int err = drain_and_process(r, false, &pr);
	if (!err)
		err = sonde__rec_maybe_recover(r, true);
	/* The writer is flushed whatever happened before. */
	int ferr = sonde_spool_writer__flush(r->spool);
	return sonde__rec_error(r, err ? err : ferr);
}

bool sonde_recorder__has_pending_events(const struct sonde_recorder *r)
{
	if (sonde__perf_stream_count(r->stream) > 0)
		return true;
	for (size_t i = 0; i < r->ev.n_cpus; i++)
		if (r->ev.rings[i].mapped && sonde__perf_ring_pending(&r->ev.rings[i].ring) > 0)
			return true;
	return false;
}

int sonde_recorder__enable(struct sonde_recorder *r)
{
	if (r->finished)
		return -SONDE_E_STATE;
	int err = sonde__rec_enable_all(r, true);
	if (err)
		sonde_error("cannot enable sampling: %s", sonde_strerror(err));
	for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++) {
		int rerr = sonde__proc_resume(&sonde__tasks_proc_at(&r->tasks, i)->stop);
		if (!rerr || rerr == -ESRCH)
			continue; /* a process that died while stopped needs no resuming */
		if (err) {
			sonde__rec_context_error(r, rerr,
						 "resuming a process stopped for attaching");
		} else {
			sonde_error("cannot resume pid %d: %s", (int)sonde__tasks_proc_at(&r->tasks, i)->pid,
				    strerror(-rerr));
			err = rerr;
		}
	}
	r->enabled = err == 0;
	return err;
}

int sonde_recorder__disable(struct sonde_recorder *r)
{
	r->enabled = false;
	return sonde__rec_enable_all(r, false);
}

int sonde_recorder__summary(const struct sonde_recorder *r, struct sonde_record_summary *out)
{
	struct sonde_record_summary s = r->sum;

	if (!out || out->sz < sizeof(size_t))
		return -EINVAL;
	s.sz = out->sz;
	if (r->start_mono)
		s.duration_ns = sonde__rec_now(r) - r->start_mono;
	if (r->finished)
		s.duration_ns = r->sum.duration_ns;
	sonde__rec_unwind_summary(r, &s);
	s.files_refused = sonde__rec_images_refused(r);
	uint64_t procs, threads;
	sonde__tasks_created(&r->tasks, &procs, &threads);
	s.processes = (uint32_t)procs;
	s.threads = (uint32_t)threads;
	memcpy(out, &s, out->sz < sizeof(s) ? out->sz : sizeof(s));
	return 0;
}

int sonde_recorder__process_is_active(struct sonde_recorder *r, pid_t pid)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (!p)
		return -EINVAL;
	return sonde__rec_process_alive(r, p);
}

/* Live processes other than `except` (0: none excepted), stopping at the first when
 * any_only. Count or -errno. */
static int count_alive(struct sonde_recorder *r, pid_t except, bool any_only)
{
	int n = 0;

	for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++) {
		struct rec_process *p = sonde__tasks_proc_at(&r->tasks, i);
		if (p->exited || (except && p->pid == except))
			continue;
		int alive = sonde__rec_process_alive(r, p);
		if (alive < 0)
			return alive;
		n += alive;
		if (n && any_only)
			break;
	}
	return n;
}

int sonde_recorder__has_active_processes_except(struct sonde_recorder *r, pid_t pid)
{
	int n = count_alive(r, pid > 0 ? pid : -1, true);

	return n < 0 ? n : n > 0;
}

int sonde_recorder__active_process_count(struct sonde_recorder *r)
{
	return count_alive(r, 0, false);
}

int sonde_recorder__refresh_threads(struct sonde_recorder *r, pid_t pid)
{
	struct rec_process *p = sonde__tasks_process(&r->tasks, pid, false);

	if (r->finished)
		return -SONDE_E_STATE;
	if (!p || !p->attached) {
		sonde_error("refresh_threads: pid %d is not attached to this recording", (int)pid);
		return -EINVAL;
	}
	int alive = sonde__rec_process_alive(r, p);
	if (alive < 0)
		return alive;
	if (!alive)
		return SONDE_REFRESH_EXITED;
	if (p->thread_only)
		return SONDE_REFRESH_REFRESHED; /* only its attached threads are recorded */
	int n = sonde__rec_refresh_threads(r, p);
	if (n == -ESRCH)
		return SONDE_REFRESH_EXITED;
	return n < 0 ? n : SONDE_REFRESH_REFRESHED;
}

static void keep_first(struct sonde_recorder *r, int *first, int err, const char *what)
{
	if (!err)
		return;
	if (!*first)
		*first = err;
	else
		sonde__rec_context_error(r, err, what);
}

int sonde_recorder__finish(struct sonde_recorder *r, struct sonde_record_summary *out)
{
	struct sonde_record_poll pr = {0};
	int first = r->first_error;

	if (r->finished)
		return -SONDE_E_STATE;
	keep_first(r, &first, sonde_recorder__disable(r), "disabling events");
	sonde__rec_offcpu_bpf_stop(r);
	for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++)
		keep_first(r, &first, sonde__proc_resume(&sonde__tasks_proc_at(&r->tasks, i)->stop),
			   "resuming a stopped process");
	keep_first(r, &first, drain_and_process(r, true, &pr), "the final drain");
	/* The events are disabled, so nothing more can be lost: a gap still open (a loss
	 * while the rings were drained for the last time, after the last sweep) is closed
	 * now, and the spool ends with the processes as they really are. */
	keep_first(r, &first, sonde__rec_maybe_recover(r, true), "the final recovery sweep");
	keep_first(r, &first, sonde__rec_offcpu_bpf_finish(r), "the BPF off-CPU waits");
	keep_first(r, &first, sonde__rec_offcpu_finish(r), "ending the off-CPU intervals");
	sonde__rec_reconcile_lost(r);
	sonde__rec_images_save(r);
	/* The off-CPU recording tracks every switch-out of the threads it records from their
	 * start (a launched command's exec, a stopped process's attach): a thread's time no
	 * wait covers was on the CPU. Not with -a (threads asleep when it started), nor for a
	 * process attached running; with the perf backend, only when no record was lost (a
	 * lost switch-out is a wait nobody knows of; the BPF backend's are unknown spans). */
	bool every_switch_out = r->offcpu.bpf || (!r->sum.lost_events && !r->sum.lost_samples);
	uint32_t coverage = SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT;
	if (r->offcpu.on && every_switch_out &&
	    (!r->system_wide || sonde__rec_system_launched_tree(r)) && !r->offcpu.attached_running)
		keep_first(r, &first, sonde_spool_writer__add_offcpu_coverage(r->spool, coverage),
			   "writing the off-CPU coverage");
	/* What the recording could not see, for the readers to say (after the losses the
	 * kernel never reported are counted). */
	struct sonde_spool_account acct = {
		.kernel_time = r->sum.kernel_time ? 1 : 0,
		.kernel_error = r->sum.kernel_time ? 0 : (uint32_t)-sonde__rec_kernel_time_error(r),
		.lost_records = r->sum.lost_events,
		.lost_samples = r->sum.lost_samples,
		.offcpu_dropped = r->sum.offcpu_dropped,
	};
	keep_first(r, &first, sonde_spool_writer__add_account(r->spool, &acct),
		   "writing the recording's account");
	/* Flushing is attempted whatever happened before. */
	keep_first(r, &first, sonde_spool_writer__finish(r->spool), "flushing the spool");
	if (r->out_fd >= 0) {
		if (close(r->out_fd) < 0)
			keep_first(r, &first, -errno, "closing the spool file");
		r->out_fd = -1;
	}
	r->sum.duration_ns = sonde__rec_now(r) - r->start_mono;
	r->finished = true;
	if (out)
		keep_first(r, &first, sonde_recorder__summary(r, out), "the summary");
	return first;
}

void sonde_recorder__free(struct sonde_recorder *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ev.n_events; i++) {
		if (!r->finished)
			sonde__perf_disable(r->ev.events[i].fd);
	}
	for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++)
		sonde__proc_resume(&sonde__tasks_proc_at(&r->tasks, i)->stop);
	for (size_t i = 0; r->ev.rings && i < r->ev.n_cpus; i++) {
		if (r->ev.rings[i].mapped)
			sonde__perf_ring_unmap(&r->ev.rings[i].ring);
		if (r->ev.rings[i].next_mapped)
			sonde__perf_ring_unmap(&r->ev.rings[i].next);
	}
	for (size_t i = 0; i < r->ev.n_events; i++)
		close(r->ev.events[i].fd);
	sonde__rec_offcpu_bpf_free(r);
	if (r->ev.pace_fd >= 0)
		close(r->ev.pace_fd);
	if (r->ev.epfd >= 0)
		close(r->ev.epfd);
	if (r->out_fd >= 0)
		close(r->out_fd);
	sonde__rec_live_free(r);
	sonde_spool_writer__free(r->spool);
	sonde__perf_stream_free(r->stream);
	sonde__rec_track_free(r);
	sonde__rec_offcpu_release(r);
	sonde__rec_filters_free(r);
	sonde__rec_unwind_free(r);
	sonde__free(r->ev.events);
	sonde__free(r->ev.ids);
	sonde__free(r->ev.rings);
	sonde__free(r->ev.cpus);
	sonde__free(r);
}
