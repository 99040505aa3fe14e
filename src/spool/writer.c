/* The spool writer: encodes records into a large output buffer and hands it to the
 * caller's write function in big chunks. Frames and stack nodes are interned in open
 * addressing hash tables (base/idmap.h), so once every frame and call path of a workload has been
 * seen, add_sample touches only memory it already owns. A known node is found by its
 * parent and its frame's (module, offset) in one lookup; only a new node looks up its frame. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/spool.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/buf.h"
#include "base/idmap.h"
#include "base/pb.h"
#include "spool/format.h"

/* Bytes buffered before the write function is called. */
enum { FLUSH_AT = 256 * 1024 };

/* An interning table: keys[id - 1] holds the (a, b) pair of id, and index (base/idmap.h)
 * finds the id of a pair. The frames' pairs are (module, offset), the nodes' (parent node
 * << 32 | module, offset): a node is its parent and its frame, and a frame is its (module,
 * offset), so a node's key names it as (parent, frame) would, without the frame's id. */
struct intern {
	struct intern_key {
		uint64_t a, b;
	} * keys;
	uint32_t n;
	size_t keys_cap;
	struct idmap index; /* hash of (a, b) -> id - 1 */
};

struct wmodule {
	uint32_t pid;
	bool live;
	uint32_t next_live; /* 1 + index of the next older live module of pid; 0: none */
	uint64_t lo, hi;    /* valid frame offsets [lo, hi) */
};

struct sonde_spool_writer {
	sonde_spool_write_fn write;
	void *ctx;
	struct buf out;
	int err; /* sticky: the first failure, returned by every later call */
	bool finished;
	bool pushed; /* the header has gone to the write function */
	bool offcpu; /* declared: the header says 2.1 */

	uint64_t last_time;
	uint32_t last_thread;
	uint32_t last_cpu; /* of the previous sample; SONDE_SPOOL_CPU_NONE at the start */
	uint32_t n_threads;
	uint64_t n_samples;

	struct wmodule *modules; /* modules[id - 1] */
	uint32_t n_modules;
	size_t modules_cap;
	/* pid -> 1 + index of its newest live module, the head of its next_live list: a
	 * retirement visits the modules it retires, not every module of the recording (a
	 * system-wide one defines every process's modules, and retires them at each exit). */
	struct u64map live_modules;

	struct intern frames; /* (module, addr) */
	struct intern nodes;  /* (parent node << 32 | module, addr) */

	/* The last stack interned for a few threads (by thread & (STACK_MEMOS - 1)): a thread's
	 * next stack shares its outer frames with it most of the time, and their nodes are
	 * taken from here instead of two hash lookups (cache misses on a large recording) per
	 * frame. Valid while no module has been retired since (retired counts them). */
	struct stack_memo {
		uint32_t thread; /* 0: empty */
		uint32_t retired;
		size_t n, cap, nodes_cap;
		struct sonde_spool_frame *frames; /* as given: innermost first */
		uint32_t *nodes;		  /* nodes[i]: the node of frames[i..n) */
	} memo[8];
	uint32_t retired; /* retire_process calls */
};

enum { STACK_MEMOS = 8 };

static uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL);
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

static bool intern_eq(const void *ctx, uint32_t i, const void *key)
{
	const struct intern_key *k = &((const struct intern *)ctx)->keys[i], *q = key;

	return k->a == q->a && k->b == q->b;
}

/* The id of (a, b), or 0 when it has none. */
static uint32_t intern_find(const struct intern *t, uint64_t a, uint64_t b)
{
	struct intern_key q = {a, b};

	return (uint32_t)(idmap_find(&t->index, (uint32_t)mix(a, b), intern_eq, t, &q) + 1);
}

/* Adds (a, b), which has no id yet, as the next id, into *id. 0 or -errno. */
static int intern_add(struct intern *t, uint64_t a, uint64_t b, uint32_t *id)
{
	if (t->n >= SPOOL_MAX_ID)
		return -ERANGE;
	if (sonde__array_grow(&t->keys, &t->keys_cap, t->n + 1, sizeof(*t->keys), 512) < 0 ||
	    sonde__idmap_insert(&t->index, (uint32_t)mix(a, b), t->n) < 0)
		return -ENOMEM;
	t->keys[t->n] = (struct intern_key){a, b};
	*id = ++t->n;
	return 0;
}

static void intern_free(struct intern *t)
{
	sonde__free(t->keys);
	sonde__idmap_free(&t->index);
}

static void put_varint(struct buf *b, uint64_t v)
{
	sonde__pb_put_varint_raw(b, v);
}

static void put_bytes(struct buf *b, const void *p, size_t n)
{
	put_varint(b, n);
	sonde__buf_append(b, p, n);
}

/* Length-prefixed records are built in place: the tag, a one-byte length placeholder, the
 * payload; end_record then widens the length to its varint size (payloads are small, so
 * the move is short and rare). */
static size_t begin_record(struct buf *b, uint8_t tag)
{
	buf_put_u8(b, tag);
	buf_put_u8(b, 0);
	return b->len;
}

static void end_record(struct buf *b, size_t start)
{
	if (buf_error(b))
		return;
	size_t n = b->len - start;
	uint8_t len[PB_VARINT_MAX];
	size_t k = sonde__pb_varint_encode(len, n);
	if (k > 1 && !sonde__buf_extend(b, k - 1))
		return;
	memmove(b->data + start + k - 1, b->data + start, n);
	memcpy(b->data + start - 1, len, k);
}

static int push(struct sonde_spool_writer *w, size_t at_least)
{
	if (w->err)
		return w->err;
	if (buf_error(&w->out))
		return w->err = -ENOMEM;
	if (w->out.len < at_least || w->out.len == 0)
		return 0;
	int r = w->write(w->ctx, w->out.data, w->out.len);
	if (r < 0)
		return w->err = r;
	w->out.len = 0;
	w->pushed = true;
	return 0;
}

int sonde_spool_writer__write_fd(void *ctx, const void *buf, size_t len)
{
	int fd = (int)(intptr_t)ctx;
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void put_header(struct buf *b, const struct sonde_spool_header *h)
{
	uint8_t payload[3 * PB_VARINT_MAX];
	size_t n = 0;

	sonde__buf_append(b, SPOOL_MAGIC, SPOOL_MAGIC_LEN);
	buf_put_u8(b, SPOOL_VERSION_MAJOR);
	buf_put_u8(b, SPOOL_VERSION_MINOR);
	n += sonde__pb_varint_encode(payload + n, h->start_time_ns);
	n += sonde__pb_varint_encode(payload + n, h->start_monotonic_ns);
	n += sonde__pb_varint_encode(payload + n, h->sample_period_ns);
	put_bytes(b, payload, n);
}

struct sonde_spool_writer *sonde_spool_writer__new(sonde_spool_write_fn write, void *ctx,
						   const struct sonde_spool_header *h)
{
	struct sonde_spool_writer *w;

	if (!write || !h) {
		errno = EINVAL;
		return NULL;
	}
	w = sonde__calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->write = write;
	w->ctx = ctx;
	w->last_cpu = SONDE_SPOOL_CPU_NONE;
	if (sonde__buf_reserve(&w->out, FLUSH_AT + 64 * 1024) < 0)
		goto fail;
	put_header(&w->out, h);
	if (buf_error(&w->out))
		goto fail;
	return w;
fail:
	sonde_spool_writer__free(w);
	errno = ENOMEM;
	return NULL;
}

static int check_open(struct sonde_spool_writer *w)
{
	if (!w)
		return -EINVAL;
	if (w->err)
		return w->err;
	return w->finished ? -SONDE_E_STATE : 0;
}

int sonde_spool_writer__add_module(struct sonde_spool_writer *w, uint64_t time_ns,
				   const struct sonde_spool_module_def *m, uint32_t *id)
{
	int r = check_open(w);
	size_t path_len;

	if (r < 0)
		return r;
	if (!m || !id || m->end <= m->start || m->build_id_len > SPOOL_MAX_BUILD_ID ||
	    (m->build_id_len && !m->build_id) || m->pgoff > UINT64_MAX - (m->end - m->start))
		return -EINVAL;
	path_len = m->path ? strlen(m->path) : 0;
	if (path_len > SPOOL_MAX_PATH)
		return -ENAMETOOLONG;
	if (w->n_modules >= SPOOL_MAX_ID)
		return -ERANGE;
	if (sonde__array_grow(&w->modules, &w->modules_cap, w->n_modules + 1, sizeof(*w->modules),
			      64) < 0)
		return -ENOMEM;
	const uint64_t *older = sonde__u64map_get(&w->live_modules, m->pid);
	w->modules[w->n_modules] = (struct wmodule){.pid = m->pid,
						    .live = true,
						    .next_live = older ? (uint32_t)*older : 0,
						    .lo = m->pgoff,
						    .hi = m->pgoff + (m->end - m->start)};
	if (sonde__u64map_put(&w->live_modules, m->pid, w->n_modules + 1) < 0)
		return -ENOMEM;

	size_t rec = begin_record(&w->out, SPOOL_TAG_MODULE);
	put_varint(&w->out, time_ns);
	put_varint(&w->out, m->pid);
	put_varint(&w->out, m->flags);
	put_varint(&w->out, m->start);
	put_varint(&w->out, m->end - m->start);
	put_varint(&w->out, m->pgoff);
	put_varint(&w->out, m->dev);
	put_varint(&w->out, m->inode);
	put_bytes(&w->out, m->build_id, m->build_id_len);
	put_bytes(&w->out, m->path, path_len);
	end_record(&w->out, rec);
	if ((r = push(w, FLUSH_AT)) < 0)
		return r;
	*id = ++w->n_modules;
	return 0;
}

int sonde_spool_writer__add_thread(struct sonde_spool_writer *w, uint64_t time_ns, uint32_t pid,
				   uint32_t tid, const char *comm, uint32_t *id)
{
	int r = check_open(w);
	size_t comm_len = comm ? strnlen(comm, SPOOL_MAX_COMM) : 0;

	if (r < 0)
		return r;
	if (!id)
		return -EINVAL;
	if (w->n_threads >= SPOOL_MAX_ID)
		return -ERANGE;
	size_t rec = begin_record(&w->out, SPOOL_TAG_THREAD);
	put_varint(&w->out, time_ns);
	put_varint(&w->out, pid);
	put_varint(&w->out, tid);
	/* a comm longer than the bound is cut; the kernel's own limit is 15 bytes */
	put_bytes(&w->out, comm, comm_len < SPOOL_MAX_COMM ? comm_len : SPOOL_MAX_COMM - 1);
	end_record(&w->out, rec);
	if ((r = push(w, FLUSH_AT)) < 0)
		return r;
	*id = ++w->n_threads;
	return 0;
}

int sonde_spool_writer__retire_process(struct sonde_spool_writer *w, uint64_t time_ns, uint32_t pid)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	w->retired++; /* the stack memos hold frames that may be of these modules */
	const uint64_t *newest = sonde__u64map_get(&w->live_modules, pid);
	for (uint32_t i = newest ? (uint32_t)*newest : 0; i; i = w->modules[i - 1].next_live)
		w->modules[i - 1].live = false;
	sonde__u64map_del(&w->live_modules, pid);
	size_t rec = begin_record(&w->out, SPOOL_TAG_RETIRE);
	put_varint(&w->out, time_ns);
	put_varint(&w->out, pid);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

static int check_frame(const struct sonde_spool_writer *w, const struct sonde_spool_frame *f)
{
	if (f->module == 0)
		return 0;
	if (f->module > w->n_modules)
		return -EINVAL;
	const struct wmodule *m = &w->modules[f->module - 1];
	if (!m->live) {
		sonde_debug("spool: frame in retired module %u", f->module);
		return -EINVAL;
	}
	if (f->addr < m->lo || f->addr >= m->hi) {
		sonde_debug("spool: frame offset 0x%llx outside module %u [0x%llx, 0x%llx)",
			    (unsigned long long)f->addr, f->module, (unsigned long long)m->lo,
			    (unsigned long long)m->hi);
		return -EINVAL;
	}
	return 0;
}

/* Defines the node of frame f below parent (which has no such child yet), and f's frame
 * first if it is new: *child receives the node. 0 or -errno. */
static int add_node(struct sonde_spool_writer *w, uint32_t parent,
		    const struct sonde_spool_frame *f, uint32_t *child)
{
	uint32_t frame = intern_find(&w->frames, f->module, f->addr);
	int r;

	if (!frame) {
		if ((r = intern_add(&w->frames, f->module, f->addr, &frame)) < 0)
			return r;
		size_t rec = begin_record(&w->out, SPOOL_TAG_FRAME);
		put_varint(&w->out, f->module);
		put_varint(&w->out, f->addr);
		end_record(&w->out, rec);
	}
	if ((r = intern_add(&w->nodes, (uint64_t)parent << 32 | f->module, f->addr, child)) < 0)
		return r;
	size_t rec = begin_record(&w->out, SPOOL_TAG_NODE);
	put_varint(&w->out, parent);
	put_varint(&w->out, frame);
	end_record(&w->out, rec);
	return 0;
}

/* Interns the stack of thread from its outermost frame inward; new frames and nodes are
 * defined in the output (a frame before the node that uses it). *node receives the
 * innermost node. The outer frames the thread's previous stack shared are not looked up
 * again (their frames were checked then, and no module has been retired since). */
static int intern_stack(struct sonde_spool_writer *w, uint32_t thread,
			const struct sonde_spool_frame *frames, size_t n, uint32_t *node)
{
	struct stack_memo *m = &w->memo[thread & (STACK_MEMOS - 1)];
	uint32_t parent = 0;
	size_t same = 0;

	if (m->thread == thread && m->retired == w->retired) {
		while (same < n && same < m->n &&
		       frames[n - 1 - same].module == m->frames[m->n - 1 - same].module &&
		       frames[n - 1 - same].addr == m->frames[m->n - 1 - same].addr)
			same++;
		if (same)
			parent = m->nodes[m->n - same];
	}
	/* the memo is rewritten below: what it held is no longer needed */
	bool keep = sonde__array_grow(&m->frames, &m->cap, n, sizeof(*m->frames), 64) == 0 &&
		    sonde__array_grow(&m->nodes, &m->nodes_cap, n, sizeof(*m->nodes), 64) == 0;
	if (!keep) {
		m->thread = 0;
		same = 0;
		parent = 0;
	} else if (same && m->n != n) {
		/* the shared outer part moves to where it is in the new stack */
		memmove(m->nodes + n - same, m->nodes + m->n - same, same * sizeof(*m->nodes));
	}
	m->thread = 0; /* valid again only when the whole stack is interned */
	for (size_t i = n - same; i-- > 0;) {
		const struct sonde_spool_frame *f = &frames[i];
		int r = check_frame(w, f);
		if (r < 0)
			return r;
		uint64_t path = (uint64_t)parent << 32 | f->module;
		uint32_t child = intern_find(&w->nodes, path, f->addr);
		if (!child && (r = add_node(w, parent, f, &child)) < 0)
			return r;
		parent = child;
		if (keep)
			m->nodes[i] = child;
	}
	if (keep && n) {
		memcpy(m->frames, frames, n * sizeof(*frames));
		m->n = n;
		m->thread = thread;
		m->retired = w->retired;
	}
	*node = parent;
	return 0;
}

int sonde_spool_writer__add_sample(struct sonde_spool_writer *w, uint64_t time_ns, uint32_t thread,
				   const struct sonde_spool_frame *frames, size_t n_frames,
				   uint32_t flags)
{
	return sonde_spool_writer__add_sample_cpu(w, time_ns, thread, SONDE_SPOOL_CPU_NONE, frames,
						  n_frames, flags);
}

int sonde_spool_writer__add_sample_cpu(struct sonde_spool_writer *w, uint64_t time_ns,
				       uint32_t thread, uint32_t cpu,
				       const struct sonde_spool_frame *frames, size_t n_frames,
				       uint32_t flags)
{
	int r = check_open(w);
	uint32_t node;

	if (r < 0)
		return r;
	if (thread == 0 || thread > w->n_threads || (flags & ~(uint32_t)SPOOL_SAMPLE_FLAG_MASK) ||
	    (n_frames && !frames) || n_frames > SPOOL_MAX_DEPTH)
		return -EINVAL;
	if (time_ns < w->last_time)
		return -ERANGE; /* samples must come in timestamp order */
	if ((r = intern_stack(w, thread, frames, n_frames, &node)) < 0)
		return r;

	uint8_t tag = SPOOL_TAG_SAMPLE | (uint8_t)flags;
	if (thread == w->last_thread)
		tag |= SPOOL_SAMPLE_SAME_THREAD;
	/* Consecutive samples of one CPU (all of a recording without CPUs) omit it. */
	if (cpu != w->last_cpu)
		tag |= SPOOL_SAMPLE_CPU;
	if (sonde__buf_reserve(&w->out, 1 + 4 * PB_VARINT_MAX) < 0)
		return w->err = -ENOMEM;
	uint8_t *p = w->out.data + w->out.len, *start = p;
	*p++ = tag;
	p += sonde__pb_varint_encode(p, time_ns - w->last_time);
	if (!(tag & SPOOL_SAMPLE_SAME_THREAD))
		p += sonde__pb_varint_encode(p, thread);
	if (tag & SPOOL_SAMPLE_CPU)
		p += sonde__pb_varint_encode(p, (uint32_t)(cpu + 1)); /* NONE + 1 wraps to 0 */
	p += sonde__pb_varint_encode(p, node);
	w->out.len += (size_t)(p - start);
	w->last_time = time_ns;
	w->last_thread = thread;
	w->last_cpu = cpu;
	w->n_samples++;
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__declare_offcpu(struct sonde_spool_writer *w)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (w->pushed)
		return -SONDE_E_STATE; /* the header is written: its version cannot change */
	w->out.data[SPOOL_MAGIC_LEN + 1] = SPOOL_VERSION_MINOR_OFFCPU;
	w->offcpu = true;
	return 0;
}

static int check_offcpu(struct sonde_spool_writer *w, uint32_t thread)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (!w->offcpu)
		return -SONDE_E_STATE;
	return thread == 0 || thread > w->n_threads ? -EINVAL : 0;
}

static int add_interval(struct sonde_spool_writer *w, uint8_t tag,
			const struct sonde_spool_offcpu *iv, const struct sonde_spool_frame *frames,
			size_t n_frames)
{
	uint32_t node;
	int r = check_offcpu(w, iv ? iv->thread : 0);

	if (r < 0)
		return r;
	if (iv->switch_in_ns < iv->switch_out_ns || iv->state >= SONDE_OFFCPU_STATES ||
	    (iv->flags & ~(uint32_t)SPOOL_OFFCPU_FLAG_MASK) || (n_frames && !frames) ||
	    n_frames > SPOOL_MAX_DEPTH ||
	    (iv->wakeup_ns &&
	     (iv->wakeup_ns < iv->switch_out_ns || iv->wakeup_ns > iv->switch_in_ns)))
		return -EINVAL;
	if ((r = intern_stack(w, iv->thread, frames, n_frames, &node)) < 0)
		return r;
	size_t rec = begin_record(&w->out, tag);
	put_varint(&w->out, iv->switch_out_ns);
	put_varint(&w->out, iv->switch_in_ns - iv->switch_out_ns);
	put_varint(&w->out, iv->thread);
	put_varint(&w->out, (uint32_t)(iv->cpu + 1)); /* NONE + 1 wraps to 0 */
	put_varint(&w->out, iv->state);
	put_varint(&w->out, iv->flags);
	put_varint(&w->out, iv->waker_tid);
	/* the wakeup as an offset from the switch-out plus one; 0: not seen */
	put_varint(&w->out, iv->wakeup_ns ? iv->wakeup_ns - iv->switch_out_ns + 1 : 0);
	put_varint(&w->out, node);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__add_offcpu(struct sonde_spool_writer *w,
				   const struct sonde_spool_offcpu *iv,
				   const struct sonde_spool_frame *frames, size_t n_frames)
{
	return add_interval(w, SPOOL_TAG_OFFCPU, iv, frames, n_frames);
}

int sonde_spool_writer__add_unknown(struct sonde_spool_writer *w,
				    const struct sonde_spool_offcpu *iv,
				    const struct sonde_spool_frame *frames, size_t n_frames)
{
	return add_interval(w, SPOOL_TAG_UNKNOWN, iv, frames, n_frames);
}

int sonde_spool_writer__add_offcpu_short(struct sonde_spool_writer *w,
					 const struct sonde_spool_offcpu_short *s)
{
	int r = check_offcpu(w, s ? s->thread : 0);

	if (r < 0)
		return r;
	size_t rec = begin_record(&w->out, SPOOL_TAG_OFFCPU_SHORT);
	put_varint(&w->out, s->thread);
	put_varint(&w->out, s->min_ns);
	put_varint(&w->out, s->count);
	put_varint(&w->out, s->total_ns);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__add_switches(struct sonde_spool_writer *w, uint32_t cpu, uint32_t flags,
				     const struct sonde_spool_switch *sw, size_t n)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (!w->offcpu)
		return -SONDE_E_STATE;
	if (n > SONDE_SPOOL_SWITCHES_MAX || (n && !sw) || cpu >= SPOOL_MAX_CPUS ||
	    (flags & ~(uint32_t)SONDE_SWITCHES_GAP))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((sw[i].prev_state & ~(uint32_t)SONDE_SWITCH_INFERRED) > SONDE_SWITCH_EXITED ||
		    (i && sw[i].time_ns < sw[i - 1].time_ns))
			return -EINVAL;
	/* each switch a few bytes: its time as a delta from the previous one (the first from
	 * zero), the two tids, the state */
	size_t rec = begin_record(&w->out, SPOOL_TAG_SWITCHES);
	put_varint(&w->out, cpu);
	put_varint(&w->out, flags);
	put_varint(&w->out, n);
	for (size_t i = 0; i < n; i++) {
		put_varint(&w->out, sw[i].time_ns - (i ? sw[i - 1].time_ns : 0));
		put_varint(&w->out, sw[i].prev_tid);
		put_varint(&w->out, sw[i].next_tid);
		put_varint(&w->out, sw[i].prev_state);
	}
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__add_exit(struct sonde_spool_writer *w, uint64_t time_ns, uint32_t thread)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (thread == 0 || thread > w->n_threads || time_ns == UINT64_MAX)
		return -EINVAL;
	size_t rec = begin_record(&w->out, SPOOL_TAG_EXIT);
	put_varint(&w->out, time_ns);
	put_varint(&w->out, thread);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__add_offcpu_coverage(struct sonde_spool_writer *w, uint32_t flags)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (!w->offcpu)
		return -SONDE_E_STATE;
	if (flags & ~(uint32_t)SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT)
		return -EINVAL;
	size_t rec = begin_record(&w->out, SPOOL_TAG_COVERAGE);
	put_varint(&w->out, flags);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__add_account(struct sonde_spool_writer *w,
				    const struct sonde_spool_account *a)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	if (!a || a->kernel_time > 1)
		return -EINVAL;
	size_t rec = begin_record(&w->out, SPOOL_TAG_ACCOUNT);
	put_varint(&w->out, a->kernel_time);
	put_varint(&w->out, a->kernel_error);
	put_varint(&w->out, a->lost_records);
	put_varint(&w->out, a->lost_samples);
	put_varint(&w->out, a->offcpu_dropped);
	end_record(&w->out, rec);
	return push(w, FLUSH_AT);
}

int sonde_spool_writer__flush(struct sonde_spool_writer *w)
{
	if (!w)
		return -EINVAL;
	return push(w, 1);
}

int sonde_spool_writer__finish(struct sonde_spool_writer *w)
{
	int r = check_open(w);

	if (r < 0)
		return r;
	size_t rec = begin_record(&w->out, SPOOL_TAG_END);
	put_varint(&w->out, w->n_samples);
	end_record(&w->out, rec);
	w->finished = true;
	return push(w, 1);
}

void sonde_spool_writer__free(struct sonde_spool_writer *w)
{
	if (!w)
		return;
	sonde__buf_free(&w->out);
	sonde__free(w->modules);
	sonde__u64map_free(&w->live_modules);
	intern_free(&w->frames);
	intern_free(&w->nodes);
	for (size_t i = 0; i < STACK_MEMOS; i++) {
		sonde__free(w->memo[i].frames);
		sonde__free(w->memo[i].nodes);
	}
	sonde__free(w);
}
