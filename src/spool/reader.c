/* The whole-file spool reader: runs the decoder over a file or a buffer and keeps every
 * definition and sample for random access. A file is read in bounded chunks, exactly as a
 * live tail reader would: a record cut by the chunk boundary is retried with more bytes,
 * and one cut by the end of the file is the truncated tail, dropped and reported. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/spool_reader.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/u64map.h"
#include "spool/format.h"
#include "spool/keep.h"
#include "spool/runs.h"

enum { CHUNK = 1 << 20 };

struct rnode {
	uint32_t parent, frame;
};

/* One CPU's switches so far: its time between its first and its last switch. */
struct rcpu {
	uint32_t cpu;
	struct sonde_spool_chain ch;
	uint32_t first_prev;
	uint64_t first_ns;
	uint64_t first_sample; /* the time of its first sample + 1, 0 for none */
	struct sonde_spool_cpu_time t;
};

struct sonde_spool {
	struct sonde_spool_decoder *dec;
	struct sonde_spool_info info;
	struct sonde_spool_sample *samples;
	size_t samples_cap;
	struct sonde_spool_frame *frames;
	size_t frames_cap;
	struct rnode *nodes;
	size_t nodes_cap;
	struct sonde_spool_module *modules;
	size_t modules_cap;
	struct sonde_spool_thread *threads;
	size_t threads_cap;
	struct sonde_spool_offcpu *offcpu;
	size_t n_offcpu, offcpu_cap;
	struct sonde_spool_offcpu_short *shorts;
	size_t n_shorts, shorts_cap;
	struct sonde_spool_account account;
	bool has_account;
	uint32_t coverage; /* enum sonde_spool_offcpu_coverage */
	struct sonde_spool_offcpu *unknown;
	size_t n_unknown, unknown_cap;
	/* the CPUs with switches, in the order of their first, added up as they come: kept
	 * by the CPUs present, not by the largest number (a file names any below 2^20) */
	struct rcpu *cpus;
	size_t n_present, cpus_cap;
	struct u64map cpu_at; /* CPU number -> 1 + its index in cpus */
	uint32_t n_cpus;      /* 1 + the largest CPU number with switches */
	uint64_t last_switch_ns;
	/* each task's stays on a CPU by the switches, sorted by tid then start once the
	 * input ends */
	struct sonde_spool_run *runs;
	size_t n_runs, runs_cap;
	/* by run: the latest end of its task's runs up to it (a stay ended by an inferred
	 * switch can outlast the next ones), so that a search by end is one by this */
	uint64_t *runs_end_max;
	uint64_t *exit_ns; /* by thread id - 1: its EXIT's time + 1, 0 for none */
	size_t exit_cap;
};

static int add_run(struct sonde_spool *s, uint32_t tid, uint32_t cpu, uint64_t start,
		   uint64_t end, uint32_t state)
{
	if (sonde__array_grow(&s->runs, &s->runs_cap, s->n_runs + 1, sizeof(*s->runs), 256) < 0)
		return -ENOMEM;
	s->runs[s->n_runs++] = (struct sonde_spool_run){tid, cpu, start, end, state};
	return 0;
}

static int by_tid_start(const void *a, const void *b)
{
	const struct sonde_spool_run *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

/* The end of input: the task each CPU's last switch brought in stays to the end, and the
 * runs are sorted for lookups by tid. */
static int finish_runs(struct sonde_spool *s)
{
	for (size_t c = 0; c < s->n_present; c++) {
		const struct sonde_spool_chain *ch = &s->cpus[c].ch;
		if (!ch->seen || !ch->last_next)
			continue;
		int err = add_run(s, ch->last_next, s->cpus[c].cpu, ch->last_ns, UINT64_MAX,
				  SONDE_OFFCPU_RUNNABLE);
		if (err)
			return err;
	}
	if (!s->n_runs)
		return 0;
	qsort(s->runs, s->n_runs, sizeof(*s->runs), by_tid_start);
	if (!(s->runs_end_max = sonde__malloc(s->n_runs * sizeof(*s->runs_end_max))))
		return -ENOMEM;
	for (size_t i = 0; i < s->n_runs; i++) {
		uint64_t end = s->runs[i].end_ns, before = s->runs_end_max[i ? i - 1 : 0];
		s->runs_end_max[i] = i && s->runs[i - 1].tid == s->runs[i].tid && before > end
					     ? before
					     : end;
	}
	return 0;
}

/* The index of tid's first run, or n_runs. */
static size_t first_run_of(const struct sonde_spool *s, uint32_t tid)
{
	size_t lo = 0, hi = s->n_runs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->runs[mid].tid < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t sonde__spool_tid_runs_ended_by(const struct sonde_spool *s, uint32_t tid, uint64_t t)
{
	size_t first = first_run_of(s, tid), lo = first;
	size_t hi = tid == UINT32_MAX ? s->n_runs : first_run_of(s, tid + 1);

	while (lo < hi) { /* the first whose latest end so far is after t */
		size_t mid = lo + (hi - lo) / 2;
		if (s->runs_end_max[mid] <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - first;
}

int sonde_spool__get_tid_run(const struct sonde_spool *s, uint32_t tid, uint64_t i,
			     struct sonde_spool_run *out)
{
	if (!s || !out)
		return -EINVAL;
	if (!s->n_cpus)
		return -ENOENT;
	size_t lo = first_run_of(s, tid);
	if (i >= s->n_runs - lo || s->runs[lo + i].tid != tid)
		return -ERANGE;
	*out = s->runs[lo + i];
	return 0;
}

/* CPU cpu's switches so far, or NULL when it has none. */
static struct rcpu *rcpu_of(const struct sonde_spool *s, uint32_t cpu)
{
	const uint64_t *at = sonde__u64map_get(&s->cpu_at, cpu);

	return at ? &s->cpus[*at - 1] : NULL;
}

/* CPU cpu's switches so far, added on its first: NULL when out of memory. */
static struct rcpu *rcpu_add(struct sonde_spool *s, uint32_t cpu)
{
	struct rcpu *c = rcpu_of(s, cpu);

	if (c)
		return c;
	if (sonde__array_grow(&s->cpus, &s->cpus_cap, s->n_present + 1, sizeof(*s->cpus), 16) < 0)
		return NULL;
	if (sonde__u64map_put(&s->cpu_at, cpu, s->n_present + 1) < 0)
		return NULL;
	s->cpus[s->n_present] = (struct rcpu){.cpu = cpu};
	if (cpu >= s->n_cpus)
		s->n_cpus = cpu + 1;
	return &s->cpus[s->n_present++];
}

static int keep_switches(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	uint32_t cpu = rec->switches.cpu;

	if (!rec->switches.n)
		return 0;
	struct rcpu *c = rcpu_add(s, cpu);
	if (!c)
		return -ENOMEM;
	for (size_t i = 0; i < rec->switches.n; i++) {
		const struct sonde_spool_switch *sw = &rec->switches.v[i];
		bool gap = i == 0 && (rec->switches.flags & SONDE_SWITCHES_GAP);
		if (!c->ch.seen) {
			c->first_ns = sw->time_ns;
			c->first_prev = sw->prev_tid;
		} else if (sw->time_ns >= c->ch.last_ns) {
			uint64_t d = sw->time_ns - c->ch.last_ns;
			/* after lost records, or before a switch the kernel did not trace (the
			 * recorder inferred it, at a time it could only estimate), who ran is
			 * not known: unknown, neither idle nor busy */
			if (gap || (sw->prev_state & SONDE_SWITCH_INFERRED))
				c->t.unknown_ns += d;
			else if (c->ch.last_next)
				c->t.busy_ns += d;
			else
				c->t.idle_ns += d;
		}
		/* prev's stay on the CPU ends here: from the CPU's previous switch (from the
		 * start when this is its first), unless records were lost in between */
		struct sonde_spool_run run;
		if (sonde__spool_chain_step(&c->ch, cpu, sw, gap, &run) &&
		    add_run(s, run.tid, cpu, run.start_ns, run.end_ns, run.state) < 0)
			return -ENOMEM;
		c->t.switches++;
		c->t.inferred += !!(sw->prev_state & SONDE_SWITCH_INFERRED);
		if (sw->time_ns > s->last_switch_ns)
			s->last_switch_ns = sw->time_ns;
	}
	return 0;
}

uint32_t sonde_spool__switch_cpus(const struct sonde_spool *s)
{
	return s ? s->n_cpus : 0;
}

uint64_t sonde_spool__first_switch_ns(const struct sonde_spool *s)
{
	uint64_t first = UINT64_MAX;

	for (size_t i = 0; s && i < s->n_present; i++)
		if (s->cpus[i].ch.seen && s->cpus[i].first_ns < first)
			first = s->cpus[i].first_ns;
	return first;
}

uint64_t sonde_spool__last_switch_ns(const struct sonde_spool *s)
{
	return s ? s->last_switch_ns : 0;
}

int sonde_spool__get_cpu_time(const struct sonde_spool *s, uint32_t cpu, uint64_t start_ns,
			      uint64_t end_ns, struct sonde_spool_cpu_time *out)
{
	if (!s || !out)
		return -EINVAL;
	const struct rcpu *c = rcpu_of(s, cpu);
	if (!c || !c->ch.seen)
		return -ENOENT;
	if (start_ns > c->first_ns || end_ns < c->ch.last_ns)
		return -ERANGE;
	*out = c->t;
	/* Before the CPU's first switch the task it takes off ran, but since when is not
	 * known: the CPU's events may have started after the window's (the recorder enables
	 * them one by one; the recording's start is taken before it sets them up). From its
	 * first sample (a task on it, since the idle task's are not kept) on, that task ran;
	 * before, the CPU is unknown (an idle CPU's time to its first switch with it). */
	uint64_t sampled = c->first_sample, seen = c->first_ns;
	if (sampled && sampled - 1 < c->first_ns && c->first_prev)
		seen = sampled - 1;
	if (seen < start_ns)
		seen = start_ns;
	out->unknown_ns += seen - start_ns;
	out->busy_ns += c->first_ns - seen;
	*(c->ch.last_next ? &out->busy_ns : &out->idle_ns) += end_ns - c->ch.last_ns;
	return 0;
}

static int keep_exit(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	size_t i = rec->exit.thread - 1, had = s->exit_cap;

	if (i >= s->exit_cap) {
		if (sonde__array_grow(&s->exit_ns, &s->exit_cap, i + 1, sizeof(*s->exit_ns), 256) <
		    0)
			return -ENOMEM;
		memset(s->exit_ns + had, 0, (s->exit_cap - had) * sizeof(*s->exit_ns));
	}
	/* the decoder refused UINT64_MAX, so time + 1 is never the 0 of "none" */
	s->exit_ns[i] = rec->exit.time_ns + 1;
	return 0;
}

int sonde_spool__get_thread_exit(const struct sonde_spool *s, uint32_t thread, uint64_t *time_ns)
{
	if (!s || !time_ns)
		return -EINVAL;
	if (thread == 0 || thread > s->info.threads)
		return -ERANGE;
	if (thread - 1 >= s->exit_cap || !s->exit_ns[thread - 1])
		return -ENOENT;
	*time_ns = s->exit_ns[thread - 1] - 1;
	return 0;
}

static int keep_module(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	struct sonde_spool_info *in = &s->info;

	if (sonde__array_grow(&s->modules, &s->modules_cap, (size_t)in->modules + 1,
			      sizeof(*s->modules), 256) < 0)
		return -ENOMEM;
	struct sonde_spool_module m;
	if (sonde__spool_keep_module(rec, &m))
		return -ENOMEM;
	s->modules[in->modules++] = m;
	return 0;
}

static int keep_thread(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	struct sonde_spool_info *in = &s->info;

	if (sonde__array_grow(&s->threads, &s->threads_cap, (size_t)in->threads + 1,
			      sizeof(*s->threads), 256) < 0)
		return -ENOMEM;
	char *comm = sonde__spool_dup_str(rec->thread.comm, rec->thread.comm_len);
	if (!comm)
		return -ENOMEM;
	s->threads[in->threads++] = (struct sonde_spool_thread){.pid = rec->thread.pid,
								.tid = rec->thread.tid,
								.time_ns = rec->thread.time_ns,
								.comm = comm};
	return 0;
}

/* The end of input: each CPU with switches gets its first sample, for
 * sonde_spool__get_cpu_time (samples name any CPU number; only those with switches need
 * it). Samples are in time order, so the first found is the first. */
static void note_first_samples(struct sonde_spool *s)
{
	uint32_t last = SONDE_SPOOL_CPU_NONE;

	for (uint64_t i = 0; s->n_present && i < s->info.samples; i++) {
		const struct sonde_spool_sample *smp = &s->samples[i];
		if (smp->cpu == last) /* most samples: this CPU's first is known */
			continue;
		last = smp->cpu;
		struct rcpu *c = rcpu_of(s, smp->cpu);
		if (c && !c->first_sample && smp->time_ns != UINT64_MAX)
			c->first_sample = smp->time_ns + 1;
	}
}

static int keep_sample(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	struct sonde_spool_info *in = &s->info;

	if (sonde__array_grow(&s->samples, &s->samples_cap, in->samples + 1, sizeof(*s->samples),
			      256) < 0)
		return -ENOMEM;
	s->samples[in->samples++] =
		(struct sonde_spool_sample){rec->sample.time_ns, rec->sample.thread,
					    rec->sample.stack, rec->sample.flags, rec->sample.cpu};
	if (in->samples == 1)
		in->first_time_ns = rec->sample.time_ns;
	in->last_time_ns = rec->sample.time_ns;
	return 0;
}

/* Keeps what one decoded record defines. The decoder has validated it; ids are dense, so
 * the arrays are indexed by id - 1. */
static int keep(struct sonde_spool *s, const struct sonde_spool_record *rec)
{
	struct sonde_spool_info *in = &s->info;

	switch (rec->type) {
	case SONDE_SPOOL_REC_HEADER:
		in->version_major = rec->header.major;
		in->version_minor = rec->header.minor;
		in->header = rec->header.h;
		return 0;
	case SONDE_SPOOL_REC_MODULE:
		return keep_module(s, rec);
	case SONDE_SPOOL_REC_FRAME:
		if (sonde__array_grow(&s->frames, &s->frames_cap, (size_t)in->frames + 1,
				      sizeof(*s->frames), 256) < 0)
			return -ENOMEM;
		s->frames[in->frames++] = rec->frame.frame;
		return 0;
	case SONDE_SPOOL_REC_NODE:
		if (sonde__array_grow(&s->nodes, &s->nodes_cap, (size_t)in->stacks + 1,
				      sizeof(*s->nodes), 256) < 0)
			return -ENOMEM;
		s->nodes[in->stacks++] = (struct rnode){rec->node.parent, rec->node.frame};
		return 0;
	case SONDE_SPOOL_REC_THREAD:
		return keep_thread(s, rec);
	case SONDE_SPOOL_REC_RETIRE:
		for (size_t i = 0; i < rec->retire.n_retired; i++) {
			struct sonde_spool_module *m = &s->modules[rec->retire.retired[i] - 1];
			m->retired = 1;
			m->retired_ns = rec->retire.time_ns;
		}
		return 0;
	case SONDE_SPOOL_REC_SAMPLE:
		return keep_sample(s, rec);
	case SONDE_SPOOL_REC_END:
		in->complete = 1;
		return 0;
	case SONDE_SPOOL_REC_OFFCPU:
		if (sonde__array_grow(&s->offcpu, &s->offcpu_cap, s->n_offcpu + 1,
				      sizeof(*s->offcpu), 256) < 0)
			return -ENOMEM;
		s->offcpu[s->n_offcpu++] = rec->offcpu;
		return 0;
	case SONDE_SPOOL_REC_OFFCPU_SHORT:
		if (sonde__array_grow(&s->shorts, &s->shorts_cap, s->n_shorts + 1,
				      sizeof(*s->shorts), 16) < 0)
			return -ENOMEM;
		s->shorts[s->n_shorts++] = rec->offcpu_short;
		return 0;
	case SONDE_SPOOL_REC_UNKNOWN:
		if (sonde__array_grow(&s->unknown, &s->unknown_cap, s->n_unknown + 1,
				      sizeof(*s->unknown), 16) < 0)
			return -ENOMEM;
		s->unknown[s->n_unknown++] = rec->offcpu;
		return 0;
	case SONDE_SPOOL_REC_ACCOUNT:
		s->account = rec->account;
		s->has_account = true;
		return 0;
	case SONDE_SPOOL_REC_SWITCHES:
		return keep_switches(s, rec);
	case SONDE_SPOOL_REC_EXIT:
		return keep_exit(s, rec);
	case SONDE_SPOOL_REC_COVERAGE:
		s->coverage = rec->coverage.flags;
		return 0;
	case SONDE_SPOOL_REC_OPTIONAL:
		return 0;
	}
	return -SONDE_E_FORMAT;
}

/* Decodes every complete record of buf; returns the bytes consumed or an error. */
static long feed(struct sonde_spool *s, const uint8_t *buf, size_t len)
{
	struct sonde_spool_record rec;
	size_t pos = 0;

	while (pos < len) {
		int r = sonde_spool_decoder__decode(s->dec, buf + pos, len - pos, &rec);
		if (r <= 0) {
			if (r < 0)
				return r;
			break;
		}
		int k = keep(s, &rec);
		if (k < 0)
			return k;
		pos += (size_t)r;
		s->info.valid_bytes = sonde_spool_decoder__offset(s->dec);
	}
	return (long)pos;
}

static struct sonde_spool *reader_new(void)
{
	struct sonde_spool *s = sonde__calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->dec = sonde_spool_decoder__new();
	if (!s->dec) {
		sonde__free(s);
		return NULL;
	}
	return s;
}

/* The end of input: what was not consumed is a partial final record. */
static int finish_input(struct sonde_spool *s, size_t leftover)
{
	if (!s->info.version_major)
		return -SONDE_E_EMPTY; /* not even a whole header: nothing was recorded */
	s->info.dropped_bytes = leftover;
	note_first_samples(s);
	return finish_runs(s);
}

static struct sonde_spool *fail(struct sonde_spool *s, int err, uint64_t *err_offset)
{
	/* the end of the last record kept: the offset of the one that failed, whether the
	 * decoder refused it or keeping it did (the decoder is then past it) */
	if (err_offset)
		*err_offset = s ? s->info.valid_bytes : 0;
	sonde_spool__close(s);
	errno = -err;
	return NULL;
}

struct sonde_spool *sonde_spool__open_mem(const void *buf, size_t len, uint64_t *err_offset)
{
	struct sonde_spool *s;
	long r;

	if (!buf && len)
		return fail(NULL, -EINVAL, err_offset);
	if (!(s = reader_new()))
		return fail(NULL, -ENOMEM, err_offset);
	r = feed(s, buf, len);
	if (r >= 0)
		r = finish_input(s, len - (size_t)r);
	if (r < 0)
		return fail(s, (int)r, err_offset);
	return s;
}

/* Reads fd to its end in CHUNK-sized steps, keeping only an incomplete record between
 * steps. */
static int read_all(struct sonde_spool *s, int fd)
{
	uint8_t *buf = sonde__malloc(CHUNK + SPOOL_MAX_RECORD + 64);
	size_t have = 0;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf + have, CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n == 0) {
			err = finish_input(s, have);
			break;
		}
		have += (size_t)n;
		long used = feed(s, buf, have);
		if (used < 0) {
			err = (int)used;
			break;
		}
		/* what is left is one incomplete record, at most a header or SPOOL_MAX_RECORD
		 * plus its framing, so the buffer never grows */
		memmove(buf, buf + used, have - (size_t)used);
		have -= (size_t)used;
	}
	sonde__free(buf);
	return err;
}

struct sonde_spool *sonde_spool__open(const char *path, uint64_t *err_offset)
{
	struct sonde_spool *s;
	int fd, err;

	if (!path)
		return fail(NULL, -EINVAL, err_offset);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(NULL, -errno, err_offset);
	s = reader_new();
	if (!s) {
		close(fd);
		return fail(NULL, -ENOMEM, err_offset);
	}
	err = read_all(s, fd);
	close(fd);
	if (err < 0)
		return fail(s, err, err_offset);
	return s;
}

void sonde_spool__close(struct sonde_spool *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->info.modules; i++) {
		sonde__free((void *)s->modules[i].def.path);
		sonde__free((void *)s->modules[i].def.build_id);
	}
	for (uint32_t i = 0; i < s->info.threads; i++)
		sonde__free((void *)s->threads[i].comm);
	sonde__free(s->modules);
	sonde__free(s->threads);
	sonde__free(s->samples);
	sonde__free(s->frames);
	sonde__free(s->nodes);
	sonde__free(s->offcpu);
	sonde__free(s->unknown);
	sonde__free(s->exit_ns);
	sonde__free(s->runs);
	sonde__free(s->runs_end_max);
	sonde__free(s->cpus);
	sonde__u64map_free(&s->cpu_at);
	sonde__free(s->shorts);
	sonde_spool_decoder__free(s->dec);
	sonde__free(s);
}

void sonde_spool__get_info(const struct sonde_spool *s, struct sonde_spool_info *info)
{
	*info = s->info;
}

int sonde_spool__get_sample(const struct sonde_spool *s, uint64_t i, struct sonde_spool_sample *out)
{
	if (i >= s->info.samples)
		return -ERANGE;
	*out = s->samples[i];
	return 0;
}

int sonde_spool__get_stack(const struct sonde_spool *s, uint32_t stack, uint32_t *frames,
			   size_t max)
{
	int depth = 0;

	if (stack > s->info.stacks)
		return -ERANGE;
	/* parents precede their children (checked by the decoder), so this ends, within
	 * SONDE_SPOOL_MAX_DEPTH steps */
	for (uint32_t n = stack; n; n = s->nodes[n - 1].parent) {
		if ((size_t)depth < max)
			frames[depth] = s->nodes[n - 1].frame;
		depth++;
	}
	return depth;
}

int sonde_spool__get_node(const struct sonde_spool *s, uint32_t stack, uint32_t *parent,
			  uint32_t *frame)
{
	if (stack == 0 || stack > s->info.stacks)
		return -ERANGE;
	*parent = s->nodes[stack - 1].parent;
	*frame = s->nodes[stack - 1].frame;
	return 0;
}

int sonde_spool__get_frame(const struct sonde_spool *s, uint32_t frame,
			   struct sonde_spool_frame *out)
{
	if (frame == 0 || frame > s->info.frames)
		return -ERANGE;
	*out = s->frames[frame - 1];
	return 0;
}

int sonde_spool__get_module(const struct sonde_spool *s, uint32_t module,
			    struct sonde_spool_module *out)
{
	if (module == 0 || module > s->info.modules)
		return -ERANGE;
	*out = s->modules[module - 1];
	return 0;
}

int sonde_spool__get_thread(const struct sonde_spool *s, uint32_t thread,
			    struct sonde_spool_thread *out)
{
	if (thread == 0 || thread > s->info.threads)
		return -ERANGE;
	*out = s->threads[thread - 1];
	return 0;
}

uint64_t sonde_spool__offcpu_count(const struct sonde_spool *s)
{
	return s->n_offcpu;
}

int sonde_spool__get_offcpu(const struct sonde_spool *s, uint64_t i, struct sonde_spool_offcpu *out)
{
	if (i >= s->n_offcpu)
		return -ERANGE;
	*out = s->offcpu[i];
	return 0;
}

uint64_t sonde_spool__unknown_count(const struct sonde_spool *s)
{
	return s->n_unknown;
}

int sonde_spool__get_unknown(const struct sonde_spool *s, uint64_t i, struct sonde_spool_offcpu *out)
{
	if (i >= s->n_unknown)
		return -ERANGE;
	*out = s->unknown[i];
	return 0;
}

uint32_t sonde_spool__offcpu_coverage(const struct sonde_spool *s)
{
	return s->coverage;
}

int sonde_spool__get_account(const struct sonde_spool *s, struct sonde_spool_account *out)
{
	if (!s->has_account)
		return -ENOENT;
	*out = s->account;
	return 0;
}

uint64_t sonde_spool__offcpu_short_count(const struct sonde_spool *s)
{
	return s->n_shorts;
}

int sonde_spool__get_offcpu_short(const struct sonde_spool *s, uint64_t i,
				  struct sonde_spool_offcpu_short *out)
{
	if (i >= s->n_shorts)
		return -ERANGE;
	*out = s->shorts[i];
	return 0;
}
