/* The BPF off-CPU backend: user space (bpf/offcpu.bpf.c says what the kernel side does).
 *
 * The programs are loaded and attached when the recording is set up; recorded processes
 * go into their targets map as they are attached (system-wide: every process but the
 * recorder's own). Each long wait comes out of the ring buffer with the thread's user
 * registers, the used part of its user stack and the id of its switch-out's kernel stack;
 * it is queued in the recorder's perf stream (a source of its own) at its switch-in time,
 * as an event type no perf record has, so that it is unwound with the mappings its process
 * had then, between the perf records (an exit processed first would have retired them). Short waits stay in
 * the kernel, summed per thread, until the recording ends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "record/offcpu_bpf.h"
#include "record/recorder.h"

#ifndef SONDE_HAVE_BPF

bool sonde__rec_offcpu_bpf_built(void)
{
	return false;
}

int sonde__rec_offcpu_bpf_choose(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	snprintf(r->sum.offcpu_backend, sizeof(r->sum.offcpu_backend), "perf");
	if (o->off_cpu_backend == SONDE_OFFCPU_BACKEND_BPF) {
		sonde_error("off-CPU backend bpf: this sonde was built without it (no libbpf, "
			    "bpftool or kernel BTF at build time)");
		return -SONDE_E_UNSUPPORTED;
	}
	if (o->off_cpu_backend != SONDE_OFFCPU_BACKEND_PERF)
		snprintf(r->sum.offcpu_backend_why, sizeof(r->sum.offcpu_backend_why),
			 "bpf: not built in");
	return 0;
}

int sonde__rec_offcpu_bpf_target(struct sonde_recorder *r, pid_t pid, bool on_exec)
{
	return 0;
}

void sonde__rec_offcpu_bpf_arm(struct sonde_recorder *r)
{
}

int sonde__rec_offcpu_bpf_thread(struct sonde_recorder *r, pid_t tid)
{
	return 0;
}

int sonde__rec_offcpu_bpf_drain(struct sonde_recorder *r)
{
	return 0;
}

int sonde__rec_offcpu_bpf_record(struct sonde_recorder *r, const struct perf_rec *rec)
{
	return 0;
}

bool sonde__rec_offcpu_bpf_is_ring(uint64_t ev_data)
{
	return false;
}

void sonde__rec_offcpu_bpf_stop(struct sonde_recorder *r)
{
}

int sonde__rec_offcpu_bpf_finish(struct sonde_recorder *r)
{
	return 0;
}

void sonde__rec_offcpu_bpf_free(struct sonde_recorder *r)
{
}

bool sonde__rec_offcpu_bpf_sys_exit_attached(const struct sonde_recorder *r)
{
	return false;
}

size_t sonde__rec_offcpu_bpf_targets(const struct sonde_recorder *r)
{
	return 0;
}

#else /* SONDE_HAVE_BPF */

#include <sys/epoll.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>

#include "offcpu.h"
#include "offcpu.skel.h"

/* The stream event types of a wait and of an exiting thread's short totals: ones no perf
 * record has. */
enum { REC_BPF_WAIT = 0x5e01, REC_BPF_SHORTS = 0x5e02, REC_BPF_LOST = 0x5e03 };

/* A thread's span of long waits the ring had no room for, as the stream carries it. */
struct rec_bpf_lost {
	uint32_t tid, pad;
	struct sonde_bpf_lost v;
};
/* The rings, sized by the number of CPUs with -a (a power of two, at least and at most
 * these), at their least otherwise. The kernel maps every page of a ring into user space
 * when it is mapped, twice over (the data pages once more after the end, so that a record
 * that wraps reads whole): each byte of ring is two of RSS, used or not. User space is
 * woken at a quarter, and reads the rings at every poll and every 5 ms of a long batch,
 * but one record can hold it longer (the first unwind through a large binary builds its
 * CFI table): -a over pingpong on 2 CPUs beside a build, the summary's "at most ... held"
 * was 1.2 to 2.3 MiB of the 4 MiB waits ring and 0.2 to 0.3 of the 2 MiB switches ring.
 * Waits: a long wait is its registers and the used part of its stack, a few KiB, at most
 * 33 (about 1500 a second there, 4.5 MB/s); the least ring holds 120 of the largest.
 * Switches: 16 bytes each, a 2-CPU machine switching 100k times a second fills 1.6 MB/s;
 * above the quarter that lasts 0.9 s of delay before a batch is lost. */
enum {
	RING_WAITS_PER_CPU = 2 << 20,
	RING_WAITS_MIN = 4 << 20,
	RING_WAITS_MAX = 64 << 20,
	RING_SWITCHES_PER_CPU = 1 << 20,
	RING_SWITCHES_MIN = 2 << 20,
	RING_SWITCHES_MAX = 64 << 20,
};
/* Entries of the snaps map per CPU (33 KiB each, preallocated): the user states read at
 * switch-outs not in a system call, each kept until its thread's next switch-out, so one
 * per thread preempted and not yet run again, and one per CPU's running thread. */
#define SNAPS_PER_CPU	   64u
/* epoll data of the ring buffer in the recorder's set (rings use their index). */
#define REC_BPF_EPOLL_DATA UINT64_MAX

struct rec_offcpu_bpf {
	struct offcpu_bpf *skel;
	struct ring_buffer *rb;
	int rb_err; /* the first error of the ring buffer's callback */
	int src; /* its source in the recorder's perf stream, -1 before the first wait */
	bool stopped;
	bool sys_exit_refused; /* attaching sys_exit failed: snapshots stay (maybe_sys_exit) */
	/* -a over every process: each CPU's switches come in batches, numbered per CPU */
	bool switches;
	uint32_t ncpu;
	uint64_t *next_seq; /* per CPU: the batch number expected next */
};

bool sonde__rec_offcpu_bpf_built(void)
{
	return true;
}

static int libbpf_say(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[512];

	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	sonde_debug("libbpf: %s", line);
	return 0;
}

/* Effective capability bit `cap` of this process. */
static bool has_cap(unsigned cap)
{
	char line[256];
	unsigned long long eff = 0;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return (eff >> cap) & 1;
}

enum { CAP_SYS_ADMIN_BIT = 21, CAP_PERFMON_BIT = 38, CAP_BPF_BIT = 39 };

/* Why the BPF backend cannot run here, or NULL. */
static const char *refusal(const struct sonde_record_opts *o)
{
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		return "the kernel has no BTF (/sys/kernel/btf/vmlinux)";
	if (!has_cap(CAP_SYS_ADMIN_BIT) && !(has_cap(CAP_BPF_BIT) && has_cap(CAP_PERFMON_BIT)))
		return "it needs root, or CAP_BPF and CAP_PERFMON";
	return NULL;
}

static int on_wait(void *ctx, void *data, size_t size);
static int on_switches(void *ctx, void *data, size_t size);

static void attach_link(struct bpf_link **slot, struct bpf_link *l, int *err)
{
	if (!l) {
		if (!*err)
			*err = -errno;
		return;
	}
	*slot = l;
}

static int attach_all(struct rec_offcpu_bpf *b)
{
	struct offcpu_bpf *s = b->skel;
	int err = 0;

	attach_link(&s->links.sonde_switch, bpf_program__attach(s->progs.sonde_switch), &err);
	attach_link(&s->links.sonde_waking, bpf_program__attach(s->progs.sonde_waking), &err);
	attach_link(&s->links.sonde_wake_new, bpf_program__attach(s->progs.sonde_wake_new), &err);
	attach_link(&s->links.sonde_exit, bpf_program__attach(s->progs.sonde_exit), &err);
	attach_link(&s->links.sonde_fork, bpf_program__attach(s->progs.sonde_fork), &err);
	attach_link(&s->links.sonde_exec, bpf_program__attach(s->progs.sonde_exec), &err);
	attach_link(&s->links.sonde_fpu, bpf_program__attach(s->progs.sonde_fpu), &err);
	attach_link(&s->links.sonde_rseq, bpf_program__attach(s->progs.sonde_rseq), &err);
	return err;
}

/* A ring's size for ncpu CPUs: per_cpu each, within [min, max], a power of two. */
static uint32_t ring_bytes(uint32_t ncpu, uint32_t per_cpu, uint32_t min, uint32_t max)
{
	uint64_t want = (uint64_t)ncpu * per_cpu;
	uint32_t n = min;

	while (n < want && n < max)
		n *= 2;
	return n;
}

/* Opens, loads and attaches the programs for r. 0 or -errno. */
static int load(struct sonde_recorder *r, const struct sonde_record_opts *o,
		struct rec_offcpu_bpf *b)
{
	struct offcpu_bpf *s = offcpu_bpf__open();

	if (!s)
		return -errno;
	b->skel = s;
	/* -a filtered by pid alone: those and their children; filtered by thread or name as
	 * well: every process, the recorder keeps the selected ones */
	s->rodata->all_tasks = r->system_wide && !sonde__rec_system_pids_only(r);
	s->rodata->self_pid = (__u32)getpid();
	s->rodata->min_ns = r->offcpu.min_ns;
	uint32_t copy = r->cfg.stack_bytes;
	s->rodata->copy_bytes = copy > SONDE_BPF_STACK_MAX ? SONDE_BPF_STACK_MAX : copy;
	s->rodata->kernel_stacks = o->kernel;
	s->rodata->follow = r->system_wide || sonde__rec_follows_children(r);
	b->switches = sonde__rec_offcpu_keeps_switches(r);
	s->rodata->keep_switches = b->switches;
	s->rodata->gated = r->system_wide;
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	b->ncpu = (uint32_t)ncpu;
	/* -a: every process's long waits, while the recorder unwinds a batch */
	int err = bpf_map__set_max_entries(
		s->maps.waits, r->system_wide ? ring_bytes(b->ncpu, RING_WAITS_PER_CPU,
							   RING_WAITS_MIN, RING_WAITS_MAX)
					      : RING_WAITS_MIN);
	if (!err && b->switches)
		err = bpf_map__set_max_entries(s->maps.switches,
					       ring_bytes(b->ncpu, RING_SWITCHES_PER_CPU,
							  RING_SWITCHES_MIN, RING_SWITCHES_MAX));
	if (err)
		return err;
	/* a wakeup per quarter of the ring, as the perf rings' watermark */
	s->rodata->wake_bytes = bpf_map__max_entries(s->maps.waits) / 4;
	s->rodata->switch_wake_bytes = bpf_map__max_entries(s->maps.switches) / 4;
	b->next_seq = sonde__calloc((size_t)ncpu, sizeof(*b->next_seq));
	if (!b->next_seq)
		return -ENOMEM;
	err = bpf_map__set_max_entries(s->maps.scratch, (uint32_t)ncpu);
	/* the user states read at switch-outs: a few threads per CPU are off it at once */
	if (!err)
		err = bpf_map__set_max_entries(s->maps.snaps, SNAPS_PER_CPU * (uint32_t)ncpu);
	if (!err)
		err = offcpu_bpf__load(s);
	if (!err)
		err = attach_all(b);
	if (err)
		return err;
	b->rb = ring_buffer__new(bpf_map__fd(s->maps.waits), on_wait, r, NULL);
	if (!b->rb)
		return -errno;
	if (b->switches && ring_buffer__add(b->rb, bpf_map__fd(s->maps.switches), on_switches, r))
		return -errno;
	const pid_t *pids;
	size_t n_pids = sonde__rec_system_pids(r, &pids);
	for (size_t i = 0; !s->rodata->all_tasks && i < n_pids; i++) {
		__u32 key = (__u32)pids[i];
		__u8 v = 2;
		if (bpf_map__update_elem(s->maps.targets, &key, sizeof(key), &v, sizeof(v),
					 BPF_ANY) < 0)
			return -errno;
	}
	return sonde__rec_watch_fd(r, ring_buffer__epoll_fd(b->rb), REC_BPF_EPOLL_DATA);
}

static void destroy(struct rec_offcpu_bpf *b)
{
	if (!b)
		return;
	ring_buffer__free(b->rb);
	offcpu_bpf__destroy(b->skel);
	sonde__free(b->next_seq);
	sonde__free(b);
}

int sonde__rec_offcpu_bpf_choose(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	char *why = r->sum.offcpu_backend_why;
	size_t wsize = sizeof(r->sum.offcpu_backend_why);
	bool forced = o->off_cpu_backend == SONDE_OFFCPU_BACKEND_BPF;

	snprintf(r->sum.offcpu_backend, sizeof(r->sum.offcpu_backend), "perf");
	if (o->off_cpu_backend == SONDE_OFFCPU_BACKEND_PERF)
		return 0;
	const char *no = refusal(o);
	if (no) {
		if (forced) {
			sonde_error("off-CPU backend bpf: %s", no);
			return -EPERM;
		}
		snprintf(why, wsize, "bpf: %s", no);
		return 0;
	}
	libbpf_set_print(libbpf_say);
	struct rec_offcpu_bpf *b = sonde__calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->src = -1;
	int err = load(r, o, b);
	if (err) {
		destroy(b);
		if (forced) {
			sonde_error("off-CPU backend bpf: the kernel refused the programs: %s",
				    sonde_strerror(err));
			return err;
		}
		snprintf(why, wsize, "bpf: the kernel refused the programs: %s",
			 sonde_strerror(err));
		return 0;
	}
	r->offcpu.bpf = b;
	snprintf(r->sum.offcpu_backend, sizeof(r->sum.offcpu_backend), "bpf");
	if (!forced)
		snprintf(why, wsize, "perf: only where BPF is refused, or asked for");
	return 1;
}

void sonde__rec_offcpu_bpf_arm(struct sonde_recorder *r)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;

	if (b && b->skel->bss)
		b->skel->bss->armed = true;
}

int sonde__rec_offcpu_bpf_target(struct sonde_recorder *r, pid_t pid, bool on_exec)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;
	__u32 key = (__u32)pid;
	__u8 v = on_exec ? 1 : 2; /* 1: recorded from its exec on */

	if (!b)
		return 0;
	if (bpf_map__update_elem(b->skel->maps.targets, &key, sizeof(key), &v, sizeof(v),
				 BPF_ANY) < 0)
		return -errno;
	return 0;
}

int sonde__rec_offcpu_bpf_thread(struct sonde_recorder *r, pid_t tid)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;
	__u32 key = (__u32)tid;
	__u8 v = 1;

	if (!b)
		return 0;
	if (bpf_map__update_elem(b->skel->maps.threads, &key, sizeof(key), &v, sizeof(v),
				 BPF_ANY) < 0)
		return -errno;
	return 0;
}

/* The ring buffer's callback: a wait into the stream at its switch-in, an exiting thread's
 * short totals at its exit. */
static int on_wait(void *ctx, void *data, size_t size)
{
	struct sonde_recorder *r = ctx;
	struct rec_offcpu_bpf *b = r->offcpu.bpf;
	const struct sonde_bpf_wait *w = data;
	const struct sonde_bpf_exit_shorts *e = data;
	size_t head = offsetof(struct sonde_bpf_wait, stack);
	uint32_t kind = 0, type, len;
	uint64_t time;

	if (size >= sizeof(kind))
		memcpy(&kind, data, sizeof(kind));
	if (kind == SONDE_BPF_REC_WAIT && size >= head && size - head >= w->stack_len &&
	    w->stack_len <= SONDE_BPF_STACK_MAX) {
		type = REC_BPF_WAIT;
		time = w->in_ns;
		len = (uint32_t)(head + w->stack_len);
	} else if (kind == SONDE_BPF_REC_SHORTS && size >= sizeof(*e)) {
		type = REC_BPF_SHORTS;
		time = e->time_ns;
		len = sizeof(*e);
	} else {
		r->sum.bad_records++;
		return 0;
	}
	if (b->src < 0)
		b->src = sonde__perf_stream_add_source(r->stream);
	int err = b->src < 0 ? b->src
			     : sonde__perf_stream_push(r->stream, b->src, type, time, data, len);
	if (err && !b->rb_err)
		b->rb_err = err;
	return err;
}

/* The switches of one batch of cpu, numbered seq: a gap first when batches before it were
 * lost. The programs' states are the recorder's (SONDE_OFFCPU_*). */
static int keep_batch(struct sonde_recorder *r, struct rec_offcpu_bpf *b, uint32_t cpu,
		      uint64_t seq, const struct sonde_bpf_switch *v, uint32_t n)
{
	if (cpu >= b->ncpu || n > SONDE_BPF_SWITCH_BATCH) {
		r->sum.bad_records++;
		return 0;
	}
	if (seq != b->next_seq[cpu])
		sonde__rec_offcpu_switches_gap(r, cpu);
	b->next_seq[cpu] = seq + 1;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t ps = v[i].prev >> SONDE_BPF_STATE_SHIFT;
		uint32_t prev = v[i].prev & ((1u << SONDE_BPF_STATE_SHIFT) - 1);
		uint32_t st = ps == SONDE_BPF_EXITED	 ? SONDE_SWITCH_EXITED
			      : ps < SONDE_OFFCPU_STATES ? ps
							 : SONDE_OFFCPU_OTHER;
		/* as the recorder infers one: the idle task runnable, another's state unknown */
		if (ps == SONDE_BPF_INFERRED) {
			st = (prev ? SONDE_OFFCPU_OTHER : SONDE_OFFCPU_RUNNABLE) |
			     SONDE_SWITCH_INFERRED;
			r->sum.offcpu_switches_inferred++;
		}
		int err = sonde__rec_offcpu_switch_seen(r, cpu, v[i].time_ns, prev, v[i].next_tid,
							st);
		if (err)
			return err;
	}
	return 0;
}

/* The switches ring's callback: a full batch of one CPU, written to the spool at once (a
 * CPU's batches come in order, and the SWITCHES records are per CPU). */
static int on_switches(void *ctx, void *data, size_t size)
{
	struct sonde_recorder *r = ctx;
	struct rec_offcpu_bpf *b = r->offcpu.bpf;
	const struct sonde_bpf_switches *sw = data;

	if (size < sizeof(*sw)) {
		r->sum.bad_records++;
		return 0;
	}
	int err = keep_batch(r, b, sw->cpu, sw->seq, sw->v, sw->n);
	if (err && !b->rb_err)
		b->rb_err = err;
	return err;
}

/* At the end, the programs detached: what each CPU's batch still holds. */
static int keep_last_batches(struct sonde_recorder *r, struct rec_offcpu_bpf *b)
{
	__u32 zero = 0;
	int first = 0;

	if (!b->switches)
		return 0;
	struct sonde_bpf_switches *v = sonde__calloc(b->ncpu, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (!bpf_map__lookup_elem(b->skel->maps.batch, &zero, sizeof(zero), v,
				  b->ncpu * sizeof(*v), 0))
		for (uint32_t c = 0; c < b->ncpu && !first; c++)
			first = v[c].n ? keep_batch(r, b, c, v[c].seq, v[c].v, v[c].n) : 0;
	sonde__free(v);
	return first;
}

/* Takes every entry out of map m (key: tid; values of vsize bytes) into take(r, b, tid,
 * value), in batches: the keys of a batch first, since deleting while walking restarts the
 * walk. Stops at take's first error. */
typedef int take_fn(struct sonde_recorder *r, struct rec_offcpu_bpf *b, uint32_t tid,
		    const void *v);

static int take_map(struct sonde_recorder *r, struct rec_offcpu_bpf *b, struct bpf_map *m,
		    size_t vsize, take_fn *take)
{
	uint32_t keys[256], key;
	uint64_t v[8];
	size_t n;
	int err = 0;

	if (vsize > sizeof(v))
		return -EINVAL;
	do {
		n = 0;
		for (void *prev = NULL;
		     n < 256 && !bpf_map__get_next_key(m, prev, &key, sizeof(key));
		     prev = &keys[n - 1])
			keys[n++] = key;
		for (size_t i = 0; i < n && !err; i++)
			if (!bpf_map__lookup_and_delete_elem(m, &keys[i], sizeof(keys[i]), v, vsize,
							     0))
				err = take(r, b, keys[i], v);
	} while (!err && n == 256);
	return err;
}

/* A lost span into the stream, at its end: taken before the ring is read, so that a span
 * lost before this drain is in the stream with the records read in it (a span ends where
 * its last wait did, as those records do). */
static int take_lost(struct sonde_recorder *r, struct rec_offcpu_bpf *b, uint32_t tid,
		     const void *v)
{
	struct rec_bpf_lost l = {.tid = tid};

	memcpy(&l.v, v, sizeof(l.v));
	if (b->src < 0)
		b->src = sonde__perf_stream_add_source(r->stream);
	return b->src < 0 ? b->src
			  : sonde__perf_stream_push(r->stream, b->src, REC_BPF_LOST, l.v.to_ns, &l,
						    sizeof(l));
}

/* An exited thread's short totals the ring had no room for into the stream, at its exit:
 * the ring's record, as it would have come. */
static int take_exit_shorts(struct sonde_recorder *r, struct rec_offcpu_bpf *b, uint32_t tid,
			    const void *v)
{
	(void)b;
	(void)tid;
	return on_wait(r, (void *)v, sizeof(struct sonde_bpf_exit_shorts));
}

/* sys_exit, once a recorded thread without a restartable sequence blocked in a system call:
 * not before, as a program there slows every system call of the machine, and glibc's threads
 * have one (bpf/offcpu.bpf.c). Until it is attached, and should the kernel refuse it, the
 * user state of such a thread is read at its switch-out. */
static void maybe_sys_exit(struct rec_offcpu_bpf *b)
{
	struct offcpu_bpf *s = b->skel;

	if (s->links.sonde_sys_exit || b->sys_exit_refused ||
	    !__atomic_load_n(&s->bss->want_sys_exit, __ATOMIC_RELAXED))
		return;
	struct bpf_link *l = bpf_program__attach(s->progs.sonde_sys_exit);
	if (!l) {
		sonde_debug("off-CPU: sys_exit refused (%s): the waits of threads without a "
			    "restartable sequence keep the user state of their switch-out",
			    strerror(errno));
		b->sys_exit_refused = true;
		return;
	}
	s->links.sonde_sys_exit = l;
	__atomic_store_n(&s->bss->sys_exit_on, true, __ATOMIC_RELEASE);
}

bool sonde__rec_offcpu_bpf_sys_exit_attached(const struct sonde_recorder *r)
{
	return r->offcpu.bpf && r->offcpu.bpf->skel->links.sonde_sys_exit;
}

size_t sonde__rec_offcpu_bpf_targets(const struct sonde_recorder *r)
{
	size_t n = 0;
	__u32 key, next;

	if (!r->offcpu.bpf)
		return 0;
	const struct bpf_map *m = r->offcpu.bpf->skel->maps.targets;
	for (const void *at = NULL; bpf_map__get_next_key(m, at, &next, sizeof(next)) == 0;
	     at = &key) {
		key = next;
		n++;
	}
	return n;
}

int sonde__rec_offcpu_bpf_drain(struct sonde_recorder *r)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;

	if (!b || !b->rb)
		return 0;
	maybe_sys_exit(b);
	int lerr = take_map(r, b, b->skel->maps.lost, sizeof(struct sonde_bpf_lost), take_lost);
	if (!lerr)
		lerr = take_map(r, b, b->skel->maps.exit_lost, sizeof(struct sonde_bpf_exit_shorts),
				take_exit_shorts);
	int n = ring_buffer__consume(b->rb);
	int err = lerr ? lerr : b->rb_err;
	b->rb_err = 0;
	return err ? err : n < 0 ? n : 0;
}

bool sonde__rec_offcpu_bpf_is_ring(uint64_t ev_data)
{
	return ev_data == REC_BPF_EPOLL_DATA;
}

/* The kernel stack of wait w into ips (SONDE_BPF_KSTACK_MAX), its number of frames: the
 * scheduler's frames of its switch-out down to the first frame of the stack read at its
 * switch-in, then that stack. Those frames are the same return addresses, the thread not
 * having run between; when the scheduler's frames go deeper than the switch-out kept,
 * the stack read at the switch-in alone, without them. */
static uint32_t kernel_stack(const struct sonde_bpf_wait *w, uint64_t *ips)
{
	uint32_t ns = w->nsched < SONDE_BPF_SCHED_FRAMES ? w->nsched : SONDE_BPF_SCHED_FRAMES;
	uint32_t nk = w->knr < SONDE_BPF_KSTACK_MAX ? w->knr : SONDE_BPF_KSTACK_MAX;
	uint32_t k = 0, n = 0;

	while (nk && !w->kips[nk - 1])
		nk--;
	if (!nk)
		k = ns; /* no stack read at the switch-in: the switch-out's frames alone */
	else
		while (k < ns && w->sched[k] != w->kips[0])
			k++;
	if (k == ns && nk)
		k = 0;
	for (uint32_t i = 0; i < k && w->sched[i]; i++)
		ips[n++] = w->sched[i];
	for (uint32_t i = 0; i < nk && n < SONDE_BPF_KSTACK_MAX; i++)
		ips[n++] = w->kips[i];
	return n;
}

/* The spool thread an interval of tid (of pid) from `time` goes under, into *id; with -a
 * over every process, the switch sequence announced first (sonde__rec_offcpu_switches_begin),
 * so that readers take the switches from it. 0 or the recorder's error. */
static int interval_thread(struct sonde_recorder *r, uint64_t time, uint32_t pid, uint32_t tid,
			   uint32_t *id)
{
	int err = sonde__rec_thread_id(r, time, (pid_t)pid, (pid_t)tid, id);

	if (!err && r->offcpu.bpf->switches)
		err = sonde__rec_offcpu_switches_begin(r);
	return err;
}

/* Whether what the programs wrote of thread tid of pid at `time` (n waits, or short ones)
 * is the recording's: a recorded thread's on its way out (*exiting: after its exit record,
 * its process retired by then when it was the last thread, the process entry gone with
 * -a -p), or one of a process the recording takes (*p). Else those n are counted dropped
 * where the programs record the recording's targets only; where they record every task
 * and the recording's filters choose (by name, by a process check), they are another
 * process's (sample_process counts them as such), none lost. */
static bool wait_owner(struct sonde_recorder *r, uint64_t time, uint32_t pid, uint32_t tid,
		       uint64_t n, struct rec_process **p, bool *exiting)
{
	struct perf_rec rec = {
		.type = PERF_RECORD_SAMPLE, .time = time, .pid = pid, .tid = tid, .has_id = true};

	*p = NULL;
	*exiting = sonde__rec_thread_exiting(r, (pid_t)pid, (pid_t)tid, time);
	if (*exiting || (*p = sonde__rec_sample_process(r, &rec)))
		return true;
	if (!r->system_wide || sonde__rec_system_pids_only(r) || sonde__rec_system_unfiltered(r))
		r->sum.offcpu_dropped += n;
	return false;
}

/* Writes one wait: its stack unwound as the perf backend's switch-out samples are; a wait of
 * a thread on its way out (after its exit record, or with its memory released) has an
 * [exiting] frame for its user part. */
static int write_wait(struct sonde_recorder *r, const struct sonde_bpf_wait *w, size_t stack_len,
		      bool open)
{
	uint64_t ips[SONDE_BPF_KSTACK_MAX];
	uint32_t nk = 0, flags, id;
	struct rec_process *p;
	bool gone;
	size_t n;

	if (!wait_owner(r, w->out_ns, w->pid, w->tid, 1, &p, &gone))
		return 0;
	struct perf_rec rec = {.type = PERF_RECORD_SAMPLE,
			       .time = w->out_ns,
			       .pid = w->pid,
			       .tid = w->tid,
			       .has_id = true};
	if (r->cfg.kernel)
		nk = kernel_stack(w, ips);
	rec.sample.callchain = (const uint8_t *)ips;
	rec.sample.callchain_nr = nk;
	/* an exiting thread's user state is never used again (with its memory released there
	 * is none): one frame stands for it, in the user frames' room */
	bool exiting = w->exiting || gone;
	bool user = w->regs_ok && !exiting;
	rec.sample.regs_abi = user ? PERF_SAMPLE_REGS_ABI_64 : PERF_SAMPLE_REGS_ABI_NONE;
	for (unsigned i = 0; user && i < SONDE_BPF_NREGS && i < UREG_COUNT; i++) {
		rec.sample.regs.r[i] = w->regs[i];
		rec.sample.regs.valid |= 1u << i;
	}
	rec.sample.stack = w->stack;
	rec.sample.stack_len = stack_len;
	int err = sonde__rec_sample_stack(r, p, &rec, r->cfg.stack_bytes, false, &n, &flags);
	if (!err && exiting)
		err = sonde__rec_exiting_frame(r, w->out_ns, &sonde__rec_frames(r)[n++]);
	if (!err)
		err = interval_thread(r, w->out_ns, w->pid, w->tid, &id);
	if (err)
		return err;
	struct sonde_spool_offcpu iv = {
		.switch_out_ns = w->out_ns,
		.switch_in_ns = w->in_ns,
		.wakeup_ns = w->wake_ns >= w->out_ns && w->wake_ns <= w->in_ns ? w->wake_ns : 0,
		.thread = id,
		.cpu = w->cpu,
		.state = w->state,
		.waker_tid = w->waker,
		.flags = flags | (open ? SONDE_OFFCPU_OPEN : 0)};
	bool unknown = w->unknown == SONDE_BPF_UNSEEN_UNKNOWN;
	if (w->unknown)
		r->sum.offcpu_unseen_switch_ins++;
	if (unknown) {
		/* as the perf backend's switch-ins not traced, but written unknown */
		r->sum.offcpu_unknown++;
		r->sum.offcpu_unknown_ns += w->in_ns - w->out_ns;
	}
	return sonde__rec_offcpu_put(r, &iv, n, unknown, (pid_t)w->tid);
}

/* Writes the short totals v of thread tid, at time: under the task that had the tid then.
 * 0 or the recorder's error. */
static int write_short(struct sonde_recorder *r, uint64_t time, uint32_t tid,
		       const struct sonde_bpf_short *v)
{
	struct rec_process *p;
	uint32_t id;
	bool gone;

	if (!v->count || !wait_owner(r, time, v->pid, tid, v->count, &p, &gone))
		return 0;
	r->sum.offcpu_short += v->count;
	r->sum.offcpu_short_ns += v->ns;
	int err = sonde__rec_thread_id(r, time, (pid_t)v->pid, (pid_t)tid, &id);
	if (!err) {
		struct sonde_spool_offcpu_short sh = {id, r->offcpu.min_ns, v->count, v->ns};
		err = sonde_spool_writer__add_offcpu_short(r->spool, &sh);
	}
	return err ? sonde__rec_error(r, err) : 0;
}

/* The span of long waits of one thread that the ring had no room for: written as its
 * unknown time, with no stack (docs/record.md, "Accounting"). 0 or the recorder's error. */
static int write_lost(struct sonde_recorder *r, const struct rec_bpf_lost *l)
{
	struct rec_process *p;
	uint32_t id;
	bool gone;

	if (l->v.to_ns < l->v.from_ns) {
		r->sum.offcpu_dropped += l->v.n;
		return 0;
	}
	if (!wait_owner(r, l->v.from_ns, l->v.pid, l->tid, l->v.n, &p, &gone))
		return 0;
	int err = interval_thread(r, l->v.from_ns, l->v.pid, l->tid, &id);
	if (err)
		return err;
	struct sonde_spool_offcpu iv = {.switch_out_ns = l->v.from_ns,
					.switch_in_ns = l->v.to_ns,
					.thread = id,
					.state = SONDE_OFFCPU_OTHER};
	r->sum.offcpu_unknown++;
	r->sum.offcpu_unknown_ns += l->v.to_ns - l->v.from_ns;
	return sonde__rec_offcpu_put(r, &iv, 0, true, (pid_t)l->tid);
}

int sonde__rec_offcpu_bpf_record(struct sonde_recorder *r, const struct perf_rec *rec)
{
	size_t head = offsetof(struct sonde_bpf_wait, stack);

	if (!r->offcpu.bpf ||
	    (rec->type != REC_BPF_WAIT && rec->type != REC_BPF_SHORTS && rec->type != REC_BPF_LOST))
		return 0;
	if (rec->type == REC_BPF_LOST) {
		struct rec_bpf_lost l;
		if (rec->sample.raw_size < sizeof(l)) {
			r->sum.bad_records++;
		} else {
			memcpy(&l, rec->sample.raw, sizeof(l));
			sonde__rec_error(r, write_lost(r, &l));
		}
		return 1;
	}
	/* the stream's copy is 8-aligned, as the records' 64-bit fields need */
	if (rec->type == REC_BPF_SHORTS) {
		const struct sonde_bpf_exit_shorts *e = (const void *)rec->sample.raw;
		if (rec->sample.raw_size < sizeof(*e))
			r->sum.bad_records++;
		else
			write_short(r, e->time_ns, e->tid, &e->v);
		return 1;
	}
	if (rec->sample.raw_size < head) {
		r->sum.bad_records++;
		return 1;
	}
	const struct sonde_bpf_wait *w = (const void *)rec->sample.raw;
	size_t stack_len = rec->sample.raw_size - head;
	if (stack_len > w->stack_len)
		stack_len = w->stack_len;
	sonde__rec_error(r, write_wait(r, w, stack_len, false));
	return 1;
}

void sonde__rec_offcpu_bpf_stop(struct sonde_recorder *r)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;

	if (!b || b->stopped)
		return;
	offcpu_bpf__detach(b->skel);
	b->stopped = true;
}

/* Adds one wait of ns to tid's short totals (the programs detached: nothing races). */
static void add_short(struct rec_offcpu_bpf *b, __u32 tid, __u32 pid, uint64_t ns)
{
	struct sonde_bpf_short v = {.pid = pid};

	bpf_map__lookup_elem(b->skel->maps.shorts, &tid, sizeof(tid), &v, sizeof(v), 0);
	v.count++;
	v.ns += ns;
	bpf_map__update_elem(b->skel->maps.shorts, &tid, sizeof(tid), &v, sizeof(v), BPF_ANY);
}

/* Runs the iterator that takes what the threads' storage holds (the programs detached):
 * their short totals into the shorts map, their waits still open into the open map, with
 * the kernel stacks of those not ended into the kframes map. 0 or -errno. */
static int open_waits(struct rec_offcpu_bpf *b)
{
	char buf[64];
	ssize_t n = 0;

	struct bpf_link *l = bpf_program__attach_iter(b->skel->progs.sonde_open_waits, NULL);
	int fd = l ? bpf_iter_create(bpf_link__fd(l)) : -1;
	int err = fd < 0 ? -errno : 0;
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		;
	if (!err && n < 0)
		err = -errno;
	if (fd >= 0)
		close(fd);
	bpf_link__destroy(l);
	return err;
}

/* The waits still open at the end: those long enough are written open, with their kernel
 * stack alone (their user stack is read only when they end), the others counted short;
 * those that ended but whose thread did not get back to user space are written closed,
 * with their kernel stack. */
static int write_open(struct sonde_recorder *r, struct rec_offcpu_bpf *b, uint64_t end)
{
	struct bpf_map *m = b->skel->maps.open;
	struct sonde_bpf_wait w;
	struct sonde_bpf_start s;
	__u32 key, next, *prev = NULL;
	int first = 0;

	while (!bpf_map__get_next_key(m, prev, &next, sizeof(next))) {
		key = next;
		prev = &key;
		if (bpf_map__lookup_elem(m, &key, sizeof(key), &s, sizeof(s), 0))
			continue;
		/* ended, its user state not read yet: written without it */
		bool ended = s.capture && s.in_ns >= s.out_ns;
		uint64_t in = ended ? s.in_ns : end;
		if (in < s.out_ns)
			continue;
		if (in - s.out_ns < r->offcpu.min_ns) {
			/* short so far: counted short, as the perf backend counts it */
			add_short(b, key, s.pid, in - s.out_ns);
			continue;
		}
		memset(&w, 0, offsetof(struct sonde_bpf_wait, stack));
		w.out_ns = s.out_ns;
		w.in_ns = in;
		w.wake_ns = s.wake_ns;
		w.pid = s.pid;
		w.tid = key;
		w.waker = s.waker;
		w.state = s.state;
		w.cpu = s.cpu;
		w.exiting = s.exiting;
		w.nsched = s.nsched;
		memcpy(w.sched, s.sched, sizeof(w.sched));
		if (s.knr && !bpf_map__lookup_elem(b->skel->maps.kframes, &key, sizeof(key), w.kips,
						   sizeof(w.kips), 0))
			w.knr = s.knr;
		int err = write_wait(r, &w, 0, !ended);
		if (err && !first)
			first = err;
	}
	return first;
}

/* The short totals of the threads alive at the end. */
static int write_shorts(struct sonde_recorder *r, struct rec_offcpu_bpf *b)
{
	struct bpf_map *m = b->skel->maps.shorts;
	struct sonde_bpf_short v;
	__u32 key, next, *prev = NULL;
	int first = 0;

	while (!bpf_map__get_next_key(m, prev, &next, sizeof(next))) {
		key = next;
		prev = &key;
		if (bpf_map__lookup_elem(m, &key, sizeof(key), &v, sizeof(v), 0))
			continue;
		int err = write_short(r, r->last_time, key, &v);
		if (err && !first)
			first = err;
	}
	return first;
}

static void read_stats(struct sonde_recorder *r, struct rec_offcpu_bpf *b)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t sum[SONDE_BPF_NSTATS] = {0};

	if (ncpu <= 0)
		return;
	uint64_t *v = sonde__calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return;
	for (__u32 k = 0; k < SONDE_BPF_NSTATS; k++) {
		if (bpf_map__lookup_elem(b->skel->maps.stats, &k, sizeof(k), v,
					 (size_t)ncpu * sizeof(*v), 0))
			continue;
		for (int c = 0; c < ncpu; c++)
			if (k == SONDE_BPF_WAITS_HIGH || k == SONDE_BPF_SWITCHES_HIGH)
				sum[k] = v[c] > sum[k] ? v[c] : sum[k];
			else
				sum[k] += v[c];
	}
	sonde__free(v);
	r->sum.offcpu_ring_waits_bytes = bpf_map__max_entries(b->skel->maps.waits);
	r->sum.offcpu_ring_waits_high = sum[SONDE_BPF_WAITS_HIGH];
	r->sum.offcpu_ring_switches_bytes = bpf_map__max_entries(b->skel->maps.switches);
	r->sum.offcpu_ring_switches_high = sum[SONDE_BPF_SWITCHES_HIGH];
	r->sum.offcpu_switches += sum[SONDE_BPF_SWITCHES];
	r->sum.offcpu_wakeups += sum[SONDE_BPF_WAKEUPS];
	/* lost to full maps, or to a full ring buffer with no room in the lost map to keep
	 * their span (the others are written as unknown time): as the perf backend's losses */
	r->sum.offcpu_dropped += sum[SONDE_BPF_LOST_UNSPANNED] + sum[SONDE_BPF_SHORT_FULL] +
				 sum[SONDE_BPF_START_FULL];
	if (sum[SONDE_BPF_LOST])
		r->sum.lost_events += sum[SONDE_BPF_LOST];
	/* switches the ring had no room for: a gap in their CPU's sequence */
	r->sum.lost_events += sum[SONDE_BPF_SWITCHES_LOST] * SONDE_BPF_SWITCH_BATCH;
}

int sonde__rec_offcpu_bpf_finish(struct sonde_recorder *r)
{
	struct rec_offcpu_bpf *b = r->offcpu.bpf;

	if (!b)
		return 0;
	sonde__rec_offcpu_bpf_stop(r);
	int err = keep_last_batches(r, b);
	int oerr = open_waits(b);
	if (oerr)
		sonde_error("off-CPU: the waits still open and the short waits' totals cannot be "
			    "read: %s",
			    sonde_strerror(oerr));
	else
		oerr = write_open(r, b, sonde__rec_time(r, sonde__rec_now(r)));
	if (!err)
		err = oerr;
	int serr = write_shorts(r, b);
	read_stats(r, b);
	return err ? err : serr;
}

void sonde__rec_offcpu_bpf_free(struct sonde_recorder *r)
{
	destroy(r->offcpu.bpf);
	r->offcpu.bpf = NULL;
}

#endif /* SONDE_HAVE_BPF */
