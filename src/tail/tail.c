/* The tail: follows a spool file as it grows.
 *
 * A poll is three phases:
 *   1. check  the file is not shorter than what was read (a rewritten spool cannot be
 *             followed)
 *   2. decode records from the buffer, reading bounded chunks of the file with pread when
 *             the buffer ends inside a record, until a limit or the end of what is visible;
 *             an incomplete record stays in the buffer for the next poll
 *   3. update the symbolizer (forgotten processes, shared images), punch consumed blocks
 *
 * Definitions are kept in arrays indexed by id - 1 (ids are dense, validated by the
 * decoder), so memory grows with distinct modules, frames, stacks and threads, never with
 * samples: a batch's samples and intervals are dropped at the next poll.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/opts.h"
#include "base/u64map.h"
#include "spool/keep.h"
#include "tail/tail.h"

enum {
	DEFAULT_RECORDS = 65536,
	DEFAULT_BYTES = 1 << 20,
	CHUNK = 256 * 1024,
	PUNCH_BLOCK = 4096,
};

struct tnode {
	uint32_t parent, frame;
};

/* One CPU's switches followed so far. */
struct tail_cpu {
	uint32_t cpu;
	struct sonde_spool_chain ch;
};

struct sonde_tail {
	int fd;
	int err; /* sticky */
	struct sonde_spool_decoder *dec;
	struct tail_image_provider images; /* image_fd NULL: none */

	uint8_t *buf; /* file bytes [file_pos - (len - pos), file_pos) */
	size_t pos, len, cap;
	uint64_t file_pos;

	bool punch;
	uint64_t punched; /* bytes [0, punched) were deallocated */

	bool have_header, ended;
	struct sonde_spool_header header;
	struct sonde_spool_module *modules;
	size_t n_modules, modules_cap;
	struct sonde_spool_frame *frames;
	size_t n_frames, frames_cap;
	struct tnode *nodes;
	size_t n_nodes, nodes_cap;
	struct sonde_spool_thread *threads;
	size_t n_threads, threads_cap;

	struct sonde_spool_sample *samples; /* the current batch */
	size_t n_samples, samples_cap;
	ARR(struct sonde_spool_offcpu) offcpu, unknown; /* its intervals */
	ARR(struct sonde_spool_offcpu_short) shorts;
	ARR(struct sonde_spool_run) runs; /* the stays its switches ended */
	/* the CPUs' switches followed so far, in the order of their first: kept by the CPUs
	 * present, not by the largest number (a file names any below 2^20) */
	struct tail_cpu *chains;
	size_t n_chains, chains_cap;
	struct u64map chain_at; /* CPU number -> 1 + its index in chains */
	/* each CPU's last switch time, by CPU number below n_cpus (sonde_tail_batch.switched) */
	uint64_t *switched;
	size_t n_cpus, switched_cap;
	bool switches; /* a SWITCHES record was read: the recording keeps them */
	uint32_t *invalid; /* pids invalidated by the current batch */
	size_t n_invalid, invalid_cap;

	struct sonde_symbolizer *sym; /* NULL until first used */
};

struct sonde_tail *sonde__tail_new_fd(int fd, const struct sonde_tail_opts *opts,
				      const struct tail_image_provider *images)
{
	struct sonde_tail_opts o = {0};
	struct sonde_tail *t;

	if (!OPTS_VALID(opts, sonde_tail_opts)) {
		close(fd);
		errno = EINVAL;
		return NULL;
	}
	OPTS_COPY(&o, opts);
	t = sonde__calloc(1, sizeof(*t));
	if (!t || !(t->dec = sonde_spool_decoder__new())) {
		int err = errno ? errno : ENOMEM;
		sonde__free(t);
		close(fd);
		errno = err;
		return NULL;
	}
	t->fd = fd;
	t->punch = o.punch_holes != 0;
	if (images)
		t->images = *images;
	if (o.symbolizer) {
		/* Created now: its options (and their strings) are only borrowed during this
		 * call. Without options it is created on first use. */
		t->sym = sonde_symbolizer__new(o.symbolizer);
		if (!t->sym) {
			int err = errno;
			sonde_tail__free(t);
			errno = err;
			return NULL;
		}
	}
	return t;
}

struct sonde_tail *sonde_tail__open(const char *path, const struct sonde_tail_opts *opts)
{
	bool punch = OPTS_GET(opts, punch_holes, 0);
	int fd = open(path, (punch ? O_RDWR : O_RDONLY) | O_CLOEXEC);

	if (fd < 0) {
		int err = errno;
		sonde_error("cannot open %s: %s", path, strerror(err));
		errno = err;
		return NULL;
	}
	return sonde__tail_new_fd(fd, opts, NULL);
}

struct sonde_tail *sonde_tail__open_fd(int fd, const struct sonde_tail_opts *opts)
{
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (own < 0)
		return NULL;
	return sonde__tail_new_fd(own, opts, NULL);
}

void sonde__tail_drop_images(struct sonde_tail *t)
{
	t->images = (struct tail_image_provider){0};
}

void sonde_tail__free(struct sonde_tail *t)
{
	if (!t)
		return;
	if (t->images.gone)
		t->images.gone(t->images.ctx);
	for (size_t i = 0; i < t->n_modules; i++) {
		sonde__free((void *)t->modules[i].def.path);
		sonde__free((void *)t->modules[i].def.build_id);
	}
	for (size_t i = 0; i < t->n_threads; i++)
		sonde__free((void *)t->threads[i].comm);
	sonde__free(t->modules);
	sonde__free(t->frames);
	sonde__free(t->nodes);
	sonde__free(t->threads);
	sonde__free(t->samples);
	ARR_FREE(t->offcpu);
	ARR_FREE(t->unknown);
	ARR_FREE(t->shorts);
	ARR_FREE(t->runs);
	sonde__free(t->chains);
	sonde__u64map_free(&t->chain_at);
	sonde__free(t->switched);
	sonde__free(t->invalid);
	sonde__free(t->buf);
	sonde_symbolizer__free(t->sym);
	sonde_spool_decoder__free(t->dec);
	if (t->fd >= 0)
		close(t->fd);
	sonde__free(t);
}

static int fail(struct sonde_tail *t, int err)
{
	if (!t->err) {
		t->err = err;
		sonde_error("spool tail: %s at byte %llu", sonde_strerror(err),
			    (unsigned long long)sonde_spool_decoder__offset(t->dec));
	}
	return err;
}

/* ---- phase 3 helpers: the symbolizer ---- */

void sonde__tail_sym_module(const struct sonde_spool_module_def *d, struct sonde_sym_module *out)
{
	*out = (struct sonde_sym_module){
		.pid = d->pid,
		.flags = d->flags,
		.start = d->start,
		.end = d->end,
		.pgoff = d->pgoff,
		.dev = d->dev,
		.inode = d->inode,
		.build_id = d->build_id_len ? d->build_id : NULL,
		.build_id_len = d->build_id_len,
		.path = d->path,
	};
}

/* Hands the symbolizer the provider's exact image of module id, when it has one. */
static void share_image(struct sonde_tail *t, size_t id)
{
	const struct sonde_spool_module *m = &t->modules[id - 1];
	struct sonde_sym_module sm;

	if (!t->sym || !t->images.image_fd || !m->def.inode)
		return;
	int fd = t->images.image_fd(t->images.ctx, &m->def);
	if (fd < 0)
		return;
	sonde__tail_sym_module(&m->def, &sm);
	int err = sonde_symbolizer__add_image(t->sym, &sm, fd);
	if (err && err != -SONDE_E_LIMIT)
		sonde_debug("tail: image of %s not shared: %s", m->def.path, sonde_strerror(err));
}

static int invalidate(struct sonde_tail *t, uint32_t pid)
{
	for (size_t i = 0; i < t->n_invalid; i++)
		if (t->invalid[i] == pid)
			return 0;
	if (sonde__array_grow(&t->invalid, &t->invalid_cap, t->n_invalid + 1, sizeof(*t->invalid),
			      16) < 0)
		return -ENOMEM;
	t->invalid[t->n_invalid++] = pid;
	if (t->sym)
		sonde_symbolizer__forget_pid(t->sym, pid);
	return 0;
}

struct sonde_symbolizer *sonde_tail__symbolizer(struct sonde_tail *t)
{
	if (t->sym)
		return t->sym;
	t->sym = sonde_symbolizer__new(NULL);
	for (size_t id = 1; t->sym && id <= t->n_modules; id++)
		share_image(t, id);
	return t->sym;
}

int sonde_tail__symbolize(struct sonde_tail *t, uint32_t frame, uint32_t pid,
			  struct sonde_sym_frame *out, size_t max)
{
	struct sonde_sym_module sm;

	if (!frame || frame > t->n_frames || !out || !max)
		return -EINVAL;
	if (!sonde_tail__symbolizer(t))
		return -errno;
	const struct sonde_spool_frame *f = &t->frames[frame - 1];
	if (!f->module)
		return sonde_symbolizer__symbolize_raw(t->sym, pid, f->addr, out, max);
	sonde__tail_sym_module(&t->modules[f->module - 1].def, &sm);
	return sonde_symbolizer__symbolize(t->sym, &sm, f->addr, out, max);
}

/* ---- phase 2: keeping what records define ---- */

static int keep_module(struct sonde_tail *t, const struct sonde_spool_record *rec,
		       struct sonde_tail_batch *b)
{
	if (sonde__array_grow(&t->modules, &t->modules_cap, t->n_modules + 1, sizeof(*t->modules),
			      64) < 0)
		return -ENOMEM;
	struct sonde_spool_module m;
	if (sonde__spool_keep_module(rec, &m))
		return -ENOMEM;
	t->modules[t->n_modules++] = m;
	b->new_modules++;
	share_image(t, t->n_modules);
	/* New JIT code: the process's perf map has grown, names read before may be stale. */
	if (m.def.flags & SONDE_MODULE_JIT)
		return invalidate(t, m.def.pid);
	return 0;
}

static int keep_thread(struct sonde_tail *t, const struct sonde_spool_record *rec,
		       struct sonde_tail_batch *b)
{
	if (sonde__array_grow(&t->threads, &t->threads_cap, t->n_threads + 1, sizeof(*t->threads),
			      64) < 0)
		return -ENOMEM;
	char *comm = sonde__spool_dup_str(rec->thread.comm, rec->thread.comm_len);
	if (!comm)
		return -ENOMEM;
	t->threads[t->n_threads++] = (struct sonde_spool_thread){.pid = rec->thread.pid,
								 .tid = rec->thread.tid,
								 .time_ns = rec->thread.time_ns,
								 .comm = comm};
	b->new_threads++;
	return 0;
}

static int keep_retire(struct sonde_tail *t, const struct sonde_spool_record *rec,
		       struct sonde_tail_batch *b)
{
	for (size_t i = 0; i < rec->retire.n_retired; i++) {
		struct sonde_spool_module *m = &t->modules[rec->retire.retired[i] - 1];
		m->retired = 1;
		m->retired_ns = rec->retire.time_ns;
	}
	b->retirements++;
	/* exec or exit: whatever the pid names next is another program. */
	return invalidate(t, rec->retire.pid);
}

static int keep_sample(struct sonde_tail *t, const struct sonde_spool_record *rec)
{
	if (sonde__array_grow(&t->samples, &t->samples_cap, t->n_samples + 1, sizeof(*t->samples),
			      256) < 0)
		return -ENOMEM;
	t->samples[t->n_samples++] =
		(struct sonde_spool_sample){rec->sample.time_ns, rec->sample.thread,
					    rec->sample.stack, rec->sample.flags, rec->sample.cpu};
	return 0;
}

/* CPU cpu's chain, added on its first switch (with room for its last switch time): NULL
 * when out of memory. */
static struct sonde_spool_chain *chain_of(struct sonde_tail *t, uint32_t cpu)
{
	const uint64_t *at = sonde__u64map_get(&t->chain_at, cpu);

	if (at)
		return &t->chains[*at - 1].ch;
	if (cpu >= t->n_cpus) {
		if (sonde__array_grow(&t->switched, &t->switched_cap, (size_t)cpu + 1,
				      sizeof(*t->switched), 16) < 0)
			return NULL;
		memset(t->switched + t->n_cpus, 0, (cpu + 1 - t->n_cpus) * sizeof(*t->switched));
		t->n_cpus = cpu + 1;
	}
	if (sonde__array_grow(&t->chains, &t->chains_cap, t->n_chains + 1, sizeof(*t->chains),
			      16) < 0)
		return NULL;
	if (sonde__u64map_put(&t->chain_at, cpu, t->n_chains + 1) < 0)
		return NULL;
	t->chains[t->n_chains] = (struct tail_cpu){.cpu = cpu};
	return &t->chains[t->n_chains++].ch;
}

/* Follows the CPU's chain over a run of its switches: the stays they end go into the
 * batch. 0 or -errno / -SONDE_E_*. */
static int keep_switches(struct sonde_tail *t, const struct sonde_spool_record *rec)
{
	uint32_t cpu = rec->switches.cpu;

	t->switches = true;
	if (!rec->switches.n)
		return 0;
	struct sonde_spool_chain *ch = chain_of(t, cpu);
	if (!ch)
		return -ENOMEM;
	for (size_t i = 0; i < rec->switches.n; i++) {
		const struct sonde_spool_switch *sw = &rec->switches.v[i];
		struct sonde_spool_run run;
		if (sonde__spool_chain_step(ch, cpu, sw,
					    i == 0 && (rec->switches.flags & SONDE_SWITCHES_GAP),
					    &run)) {
			struct sonde_spool_run *q = ARR_PUSH(t->runs);
			if (!q)
				return -ENOMEM;
			*q = run;
		}
	}
	t->switched[cpu] = ch->last_ns;
	return 0;
}

static int by_cpu(const void *a, const void *b)
{
	const struct sonde_spool_run *x = a, *y = b;

	return x->cpu < y->cpu ? -1 : x->cpu > y->cpu;
}

/* The END record: the task each CPU's last switch brought in stays to the end. */
static int keep_end(struct sonde_tail *t)
{
	size_t first = t->runs.n;

	t->ended = true;
	for (size_t i = 0; i < t->n_chains; i++) {
		const struct sonde_spool_chain *c = &t->chains[i].ch;
		if (!c->seen || !c->last_next)
			continue;
		struct sonde_spool_run *q = ARR_PUSH(t->runs);
		if (!q)
			return -ENOMEM;
		*q = (struct sonde_spool_run){c->last_next, t->chains[i].cpu, c->last_ns,
					      UINT64_MAX, SONDE_OFFCPU_RUNNABLE};
	}
	/* CPU by CPU, as the batch says, where the chains are in the order of their first */
	if (t->runs.n - first > 1)
		qsort(t->runs.v + first, t->runs.n - first, sizeof(*t->runs.v), by_cpu);
	return 0;
}

/* Appends record x to the batch's array a (an ARR of its type): 0, or -ENOMEM. */
#define KEEP_IN(a, x) (ARR_PUSH(a) ? ((a).v[(a).n - 1] = (x)), 0 : -ENOMEM)

static int keep(struct sonde_tail *t, const struct sonde_spool_record *rec,
		struct sonde_tail_batch *b)
{
	switch (rec->type) {
	case SONDE_SPOOL_REC_HEADER:
		t->header = rec->header.h;
		t->have_header = true;
		return 0;
	case SONDE_SPOOL_REC_MODULE:
		return keep_module(t, rec, b);
	case SONDE_SPOOL_REC_FRAME:
		if (sonde__array_grow(&t->frames, &t->frames_cap, t->n_frames + 1,
				      sizeof(*t->frames), 256) < 0)
			return -ENOMEM;
		t->frames[t->n_frames++] = rec->frame.frame;
		b->new_frames++;
		return 0;
	case SONDE_SPOOL_REC_NODE:
		if (sonde__array_grow(&t->nodes, &t->nodes_cap, t->n_nodes + 1, sizeof(*t->nodes),
				      256) < 0)
			return -ENOMEM;
		t->nodes[t->n_nodes++] = (struct tnode){rec->node.parent, rec->node.frame};
		b->new_stacks++;
		return 0;
	case SONDE_SPOOL_REC_THREAD:
		return keep_thread(t, rec, b);
	case SONDE_SPOOL_REC_RETIRE:
		return keep_retire(t, rec, b);
	case SONDE_SPOOL_REC_SAMPLE:
		return keep_sample(t, rec);
	case SONDE_SPOOL_REC_END:
		return t->ended ? 0 : keep_end(t);
	case SONDE_SPOOL_REC_SWITCHES:
		return keep_switches(t, rec);
	case SONDE_SPOOL_REC_OFFCPU:
		return KEEP_IN(t->offcpu, rec->offcpu);
	case SONDE_SPOOL_REC_UNKNOWN:
		return KEEP_IN(t->unknown, rec->offcpu);
	case SONDE_SPOOL_REC_OFFCPU_SHORT:
		return KEEP_IN(t->shorts, rec->offcpu_short);
	case SONDE_SPOOL_REC_OPTIONAL:
	case SONDE_SPOOL_REC_ACCOUNT:
	case SONDE_SPOOL_REC_EXIT:
	case SONDE_SPOOL_REC_COVERAGE:
		return 0;
	}
	return -SONDE_E_FORMAT;
}

/* Decodes buffered records until the buffer ends inside one or *left reaches 0. */
static int decode_buffered(struct sonde_tail *t, size_t *left, struct sonde_tail_batch *b)
{
	struct sonde_spool_record rec;

	while (*left && t->pos < t->len) {
		int n = sonde_spool_decoder__decode(t->dec, t->buf + t->pos, t->len - t->pos, &rec);
		if (n < 0)
			return n;
		if (n == 0)
			break;
		int err = keep(t, &rec, b);
		if (err)
			return err;
		t->pos += (size_t)n;
		b->records++;
		b->bytes += (uint64_t)n;
		(*left)--;
	}
	return 0;
}

/* Appends at most want bytes of the file to the buffer. Returns bytes read, 0 at the end. */
static ssize_t read_more(struct sonde_tail *t, size_t want)
{
	if (t->pos) {
		/* Keep only the unconsumed part: the buffer stays about one chunk big. */
		memmove(t->buf, t->buf + t->pos, t->len - t->pos);
		t->len -= t->pos;
		t->pos = 0;
	}
	if (sonde__array_grow(&t->buf, &t->cap, t->len + want, 1, CHUNK) < 0)
		return -ENOMEM;
	ssize_t n;
	do
		n = pread(t->fd, t->buf + t->len, want, (off_t)t->file_pos);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	t->len += (size_t)n;
	t->file_pos += (uint64_t)n;
	return n;
}

static int check_size(struct sonde_tail *t)
{
	struct stat st;

	if (fstat(t->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < t->file_pos) {
		sonde_error("spool tail: the file shrank from at least %llu to %llu bytes (it was "
			    "truncated or rewritten)",
			    (unsigned long long)t->file_pos, (unsigned long long)st.st_size);
		t->err = -SONDE_E_SHRUNK;
		return t->err;
	}
	return 0;
}

/* Deallocates whole blocks that hold consumed records only. */
static void punch_consumed(struct sonde_tail *t)
{
	uint64_t upto = sonde_spool_decoder__offset(t->dec) / PUNCH_BLOCK * PUNCH_BLOCK;

	if (!t->punch || upto <= t->punched)
		return;
	if (fallocate(t->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)t->punched,
		      (off_t)(upto - t->punched)) < 0) {
		sonde_warn("spool tail: cannot punch holes in the spool (%s); keeping its blocks",
			   strerror(errno));
		t->punch = false;
		return;
	}
	t->punched = upto;
}

int sonde_tail__poll(struct sonde_tail *t, size_t max_records, size_t max_bytes,
		     struct sonde_tail_batch *out)
{
	struct sonde_tail_batch b = {0};
	size_t left = max_records ? max_records : DEFAULT_RECORDS;
	size_t budget = max_bytes ? max_bytes : DEFAULT_BYTES;
	int err = t->err ? t->err : check_size(t);

	if (!OPTS_OUT_VALID(out))
		return -EINVAL;
	if (err)
		return err;
	t->n_samples = 0;
	t->offcpu.n = t->unknown.n = t->shorts.n = t->runs.n = 0;
	t->n_invalid = 0;
	for (;;) {
		err = decode_buffered(t, &left, &b);
		if (err)
			return fail(t, err);
		/* The byte bound holds once a record came: a poll that spent it inside one
		 * reads on until that one is whole, so that 0 means nothing new (a caller
		 * polling until 0, as at a recording's end, stopped inside a record larger
		 * than the bound with the rest unread). */
		if (!left || (!budget && b.records))
			break;
		ssize_t n = read_more(t, budget && budget < CHUNK ? budget : CHUNK);
		if (n < 0)
			return fail(t, (int)n);
		if (n == 0)
			break;
		budget -= (size_t)n < budget ? (size_t)n : budget;
	}
	punch_consumed(t);
	b.samples = t->samples;
	b.n_samples = t->n_samples;
	b.invalidated_pids = t->invalid;
	b.n_invalidated = t->n_invalid;
	b.offcpu = t->offcpu.v;
	b.n_offcpu = t->offcpu.n;
	b.unknown = t->unknown.v;
	b.n_unknown = t->unknown.n;
	b.shorts = t->shorts.v;
	b.n_shorts = t->shorts.n;
	b.runs = t->runs.v;
	b.n_runs = t->runs.n;
	b.switched = t->switched;
	b.n_switched = (uint32_t)t->n_cpus;
	b.switches = t->switches;
	b.offset = sonde_spool_decoder__offset(t->dec);
	b.pending = t->len - t->pos;
	b.ended = t->ended;
	if (out && out->sz >= sizeof(size_t)) {
		b.sz = out->sz;
		memcpy(out, &b, out->sz < sizeof(b) ? out->sz : sizeof(b));
	}
	return b.records > INT32_MAX ? INT32_MAX : (int)b.records;
}

uint64_t sonde_tail__offset(const struct sonde_tail *t)
{
	return sonde_spool_decoder__offset(t->dec);
}

int sonde_tail__header(const struct sonde_tail *t, struct sonde_spool_header *out)
{
	if (!t->have_header)
		return -EAGAIN;
	*out = t->header;
	return 0;
}

/* ---- definitions ---- */

int sonde_tail__get_node(const struct sonde_tail *t, uint32_t stack, uint32_t *parent,
			 uint32_t *frame)
{
	if (!stack || stack > t->n_nodes)
		return -ERANGE;
	*parent = t->nodes[stack - 1].parent;
	*frame = t->nodes[stack - 1].frame;
	return 0;
}

int sonde_tail__get_stack(const struct sonde_tail *t, uint32_t stack, uint32_t *frames, size_t max)
{
	int depth = 0;

	if (stack > t->n_nodes)
		return -ERANGE;
	/* Parents have smaller ids (the decoder checked), so the walk ends. */
	while (stack) {
		const struct tnode *n = &t->nodes[stack - 1];
		if ((size_t)depth < max)
			frames[depth] = n->frame;
		depth++;
		stack = n->parent;
	}
	return depth;
}

int sonde_tail__get_frame(const struct sonde_tail *t, uint32_t frame, struct sonde_spool_frame *out)
{
	if (!frame || frame > t->n_frames)
		return -ERANGE;
	*out = t->frames[frame - 1];
	return 0;
}

int sonde_tail__get_module(const struct sonde_tail *t, uint32_t module,
			   struct sonde_spool_module *out)
{
	if (!module || module > t->n_modules)
		return -ERANGE;
	*out = t->modules[module - 1];
	return 0;
}

int sonde_tail__get_thread(const struct sonde_tail *t, uint32_t thread,
			   struct sonde_spool_thread *out)
{
	if (!thread || thread > t->n_threads)
		return -ERANGE;
	*out = t->threads[thread - 1];
	return 0;
}
