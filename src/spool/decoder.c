/* The spool decoder: bytes to validated records, one at a time.
 *
 * Every rule of docs/spool.md is checked here, so that the whole-file reader, replay and
 * live tailing share one validator. A record is decoded in two steps: framing (is the
 * whole record in the buffer? if not, "need more bytes") and then its fields, which are
 * bounded by the record's own length, so a field running past it is malformed, not
 * incomplete. Samples have no length prefix; for them "ran out of bytes" and "malformed"
 * are told apart varint by varint.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/spool_reader.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/pb.h"
#include "base/u64map.h"
#include "spool/format.h"

struct dmodule {
	uint32_t pid;
	bool retired;
	uint32_t next_live; /* next live module of the same pid (0 = none) */
	uint64_t lo, hi;    /* valid frame offsets [lo, hi) */
};

/* pid -> most recently defined live module of that pid (a list through next_live), so
 * that retiring a process costs its own modules only. */
struct pid_slot {
	bool used;
	uint32_t pid;
	uint32_t head; /* 0 = no live module */
};

struct sonde_spool_decoder {
	int err;
	bool have_header, ended, have_sample;
	uint64_t offset;
	uint64_t last_time;
	uint32_t last_thread;
	uint32_t last_cpu; /* SONDE_SPOOL_CPU_NONE until a sample names one */
	uint8_t major, minor;
	uint64_t samples;

	struct dmodule *modules; /* modules[id - 1] */
	uint32_t n_modules;
	size_t modules_cap;
	struct pid_slot *pids;
	size_t pids_size, pids_used;
	uint32_t *retired; /* scratch for RETIRE records */
	size_t retired_cap;
	struct sonde_spool_switch *switches; /* scratch for SWITCHES records */
	size_t switches_cap;
	/* CPU -> its last switch so far, for the rule that a CPU's switches go forward
	 * across its runs (within a run the deltas ensure it) */
	struct u64map last_switch;

	uint32_t n_frames, n_threads;
	uint16_t *depth; /* depth[node id], depth[0] = 0 */
	uint32_t n_nodes;
	size_t depth_cap;
};

struct sonde_spool_decoder *sonde_spool_decoder__new(void)
{
	struct sonde_spool_decoder *d = sonde__calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->last_cpu = SONDE_SPOOL_CPU_NONE;
	if (sonde__array_grow(&d->depth, &d->depth_cap, 1, sizeof(*d->depth), 64) < 0) {
		sonde_spool_decoder__free(d);
		errno = ENOMEM;
		return NULL;
	}
	d->depth[0] = 0;
	return d;
}

void sonde_spool_decoder__free(struct sonde_spool_decoder *d)
{
	if (!d)
		return;
	sonde__free(d->modules);
	sonde__free(d->pids);
	sonde__free(d->retired);
	sonde__free(d->switches);
	sonde__u64map_free(&d->last_switch);
	sonde__free(d->depth);
	sonde__free(d);
}

uint64_t sonde_spool_decoder__offset(const struct sonde_spool_decoder *d)
{
	return d->offset;
}

int sonde_spool_decoder__ended(const struct sonde_spool_decoder *d)
{
	return d->ended;
}

/* ---- field readers ---- */

enum { NEED_MORE = 1 };

/* Reads a varint from [*p, end) where end may cut it: 0 ok, NEED_MORE if the bytes end
 * inside it, -SONDE_E_FORMAT if it is malformed. */
static int read_varint_open(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	size_t n = sonde__pb_varint_decode(*p, end, v);

	if (n) {
		*p += n;
		return 0;
	}
	size_t avail = (size_t)(end - *p);
	if (avail >= PB_VARINT_MAX)
		return -SONDE_E_FORMAT;
	for (size_t i = 0; i < avail; i++)
		if (!((*p)[i] & 0x80))
			return -SONDE_E_FORMAT; /* a 10th byte above 1 */
	return NEED_MORE;
}

/* A cursor over one record's payload: running past its end is malformed. */
struct cur {
	const uint8_t *p, *end;
	int err;
};

static uint64_t get(struct cur *c)
{
	uint64_t v = 0;
	size_t n;

	if (c->err)
		return 0;
	n = sonde__pb_varint_decode(c->p, c->end, &v);
	if (!n) {
		c->err = -SONDE_E_FORMAT;
		return 0;
	}
	c->p += n;
	return v;
}

static uint32_t get_u32(struct cur *c)
{
	uint64_t v = get(c);

	if (v > UINT32_MAX && !c->err)
		c->err = -SONDE_E_RANGE;
	return (uint32_t)v;
}

/* A length-prefixed byte string of at most max bytes; NUL bytes are refused when text. */
static const uint8_t *get_bytes(struct cur *c, size_t max, bool text, size_t *len)
{
	uint64_t n = get(c);

	*len = 0;
	if (c->err)
		return NULL;
	if (n > max || n > (uint64_t)(c->end - c->p)) {
		c->err = -SONDE_E_FORMAT;
		return NULL;
	}
	const uint8_t *s = c->p;
	if (text && memchr(s, 0, n)) {
		c->err = -SONDE_E_FORMAT;
		return NULL;
	}
	c->p += n;
	*len = n;
	return s;
}

/* ---- the header ---- */

static int decode_header(struct sonde_spool_decoder *d, const uint8_t *buf, size_t len,
			 struct sonde_spool_record *rec)
{
	const uint8_t *p = buf + SPOOL_MAGIC_LEN + 2, *end = buf + len;
	uint64_t hlen;

	if (memcmp(buf, SPOOL_MAGIC, len < SPOOL_MAGIC_LEN ? len : SPOOL_MAGIC_LEN))
		return -SONDE_E_MAGIC;
	if (len < SPOOL_MAGIC_LEN + 2)
		return 0;
	if (buf[SPOOL_MAGIC_LEN] < SPOOL_VERSION_MAJOR_OLDEST ||
	    buf[SPOOL_MAGIC_LEN] > SPOOL_VERSION_MAJOR)
		return -SONDE_E_VERSION;
	int r = read_varint_open(&p, end, &hlen);
	if (r)
		return r == NEED_MORE ? 0 : r;
	if (hlen > SPOOL_MAX_HEADER)
		return -SONDE_E_FORMAT;
	if ((uint64_t)(end - p) < hlen)
		return 0;
	struct cur c = {p, p + hlen, 0};
	rec->type = SONDE_SPOOL_REC_HEADER;
	rec->header.major = buf[SPOOL_MAGIC_LEN];
	rec->header.minor = buf[SPOOL_MAGIC_LEN + 1];
	rec->header.h.start_time_ns = get(&c);
	rec->header.h.start_monotonic_ns = get(&c);
	rec->header.h.sample_period_ns = get(&c);
	if (c.err)
		return c.err;
	d->have_header = true;
	d->major = buf[SPOOL_MAGIC_LEN];
	d->minor = buf[SPOOL_MAGIC_LEN + 1];
	return (int)(p + hlen - buf);
}

/* ---- definitions ---- */

static size_t pid_hash(uint32_t pid, size_t size)
{
	return (size_t)((pid * 0x9e3779b97f4a7c15ULL) >> 32) & (size - 1);
}

/* Finds pid's slot; with add, creates it (NULL only when memory runs out). Slots are
 * never removed: a process whose modules all retired keeps an empty list. */
static struct pid_slot *pid_find(struct sonde_spool_decoder *d, uint32_t pid, bool add)
{
	if (add && (d->pids_used + 1) * 2 > d->pids_size) {
		size_t size = d->pids_size ? d->pids_size * 2 : 64;
		struct pid_slot *t = sonde__calloc(size, sizeof(*t));
		if (!t)
			return NULL;
		for (size_t i = 0; i < d->pids_size; i++) {
			if (!d->pids[i].used)
				continue;
			size_t j = pid_hash(d->pids[i].pid, size);
			while (t[j].used)
				j = (j + 1) & (size - 1);
			t[j] = d->pids[i];
		}
		sonde__free(d->pids);
		d->pids = t;
		d->pids_size = size;
	}
	if (!d->pids_size)
		return NULL;
	size_t mask = d->pids_size - 1, j = pid_hash(pid, d->pids_size);
	for (; d->pids[j].used; j = (j + 1) & mask)
		if (d->pids[j].pid == pid)
			return &d->pids[j];
	if (!add)
		return NULL;
	d->pids[j] = (struct pid_slot){.used = true, .pid = pid};
	d->pids_used++;
	return &d->pids[j];
}

static int dec_module(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	struct sonde_spool_module_def *m = &rec->module.def;
	size_t path_len;

	rec->module.time_ns = get(c);
	m->pid = get_u32(c);
	m->flags = get_u32(c);
	m->start = get(c);
	uint64_t size = get(c);
	m->pgoff = get(c);
	m->dev = get(c);
	m->inode = get(c);
	m->build_id = get_bytes(c, SPOOL_MAX_BUILD_ID, false, &m->build_id_len);
	m->path = (const char *)get_bytes(c, SPOOL_MAX_PATH, true, &path_len);
	if (c->err)
		return c->err;
	if (size == 0 || m->start > UINT64_MAX - size || m->pgoff > UINT64_MAX - size ||
	    d->n_modules >= SPOOL_MAX_ID)
		return -SONDE_E_RANGE;
	m->end = m->start + size;
	if (sonde__array_grow(&d->modules, &d->modules_cap, (size_t)d->n_modules + 1,
			      sizeof(*d->modules), 64) < 0)
		return -ENOMEM;
	struct pid_slot *slot = pid_find(d, m->pid, true);
	if (!slot)
		return -ENOMEM;
	d->modules[d->n_modules] = (struct dmodule){
		.pid = m->pid, .next_live = slot->head, .lo = m->pgoff, .hi = m->pgoff + size};
	slot->head = ++d->n_modules;
	rec->type = SONDE_SPOOL_REC_MODULE;
	rec->module.id = d->n_modules;
	rec->module.path_len = path_len;
	return 0;
}

static int dec_frame(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	uint32_t module = get_u32(c);
	uint64_t addr = get(c);

	if (c->err)
		return c->err;
	if (module) {
		if (module > d->n_modules || d->modules[module - 1].retired)
			return -SONDE_E_REFERENCE;
		const struct dmodule *m = &d->modules[module - 1];
		if (addr < m->lo || addr >= m->hi)
			return -SONDE_E_RANGE;
	}
	if (d->n_frames >= SPOOL_MAX_ID)
		return -SONDE_E_RANGE;
	rec->type = SONDE_SPOOL_REC_FRAME;
	rec->frame.id = ++d->n_frames;
	rec->frame.frame = (struct sonde_spool_frame){module, addr};
	return 0;
}

static int dec_node(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	uint32_t parent = get_u32(c), frame = get_u32(c);

	if (c->err)
		return c->err;
	if (parent > d->n_nodes || frame == 0 || frame > d->n_frames)
		return -SONDE_E_REFERENCE;
	uint32_t depth = d->depth[parent] + 1u;
	if (depth > SONDE_SPOOL_MAX_DEPTH || d->n_nodes >= SPOOL_MAX_ID)
		return -SONDE_E_RANGE;
	if (sonde__array_grow(&d->depth, &d->depth_cap, (size_t)d->n_nodes + 2, sizeof(*d->depth),
			      64) < 0)
		return -ENOMEM;
	d->depth[++d->n_nodes] = (uint16_t)depth;
	rec->type = SONDE_SPOOL_REC_NODE;
	rec->node.id = d->n_nodes;
	rec->node.parent = parent;
	rec->node.frame = frame;
	rec->node.depth = depth;
	return 0;
}

static int dec_thread(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	rec->thread.time_ns = get(c);
	rec->thread.pid = get_u32(c);
	rec->thread.tid = get_u32(c);
	rec->thread.comm =
		(const char *)get_bytes(c, SPOOL_MAX_COMM - 1, true, &rec->thread.comm_len);
	if (c->err)
		return c->err;
	if (d->n_threads >= SPOOL_MAX_ID)
		return -SONDE_E_RANGE;
	rec->type = SONDE_SPOOL_REC_THREAD;
	rec->thread.id = ++d->n_threads;
	return 0;
}

static int dec_retire(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	uint64_t time_ns = get(c);
	uint32_t pid = get_u32(c);
	size_t n = 0;

	if (c->err)
		return c->err;
	struct pid_slot *slot = pid_find(d, pid, false);
	for (uint32_t id = slot ? slot->head : 0; id; id = d->modules[id - 1].next_live) {
		if (sonde__array_grow(&d->retired, &d->retired_cap, n + 1, sizeof(*d->retired),
				      64) < 0)
			return -ENOMEM;
		d->retired[n++] = id;
	}
	/* Commit only now that nothing can fail. The list runs newest first. */
	for (size_t i = 0; i < n; i++)
		d->modules[d->retired[i] - 1].retired = true;
	for (size_t i = 0; i < n / 2; i++) {
		uint32_t t = d->retired[i];
		d->retired[i] = d->retired[n - 1 - i];
		d->retired[n - 1 - i] = t;
	}
	if (slot)
		slot->head = 0;
	rec->type = SONDE_SPOOL_REC_RETIRE;
	rec->retire.pid = pid;
	rec->retire.time_ns = time_ns;
	rec->retire.retired = d->retired;
	rec->retire.n_retired = n;
	return 0;
}

static int dec_end(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	uint64_t samples = get(c);

	if (c->err)
		return c->err;
	if (samples != d->samples)
		return -SONDE_E_FORMAT;
	d->ended = true;
	rec->type = SONDE_SPOOL_REC_END;
	rec->end.samples = samples;
	return 0;
}

static int dec_offcpu(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	struct sonde_spool_offcpu *o = &rec->offcpu;
	uint64_t out = get(c), dur = get(c), cpu, wake;

	o->thread = get_u32(c);
	cpu = get(c);
	o->state = get_u32(c);
	o->flags = get_u32(c);
	o->waker_tid = get_u32(c);
	wake = get(c);
	o->stack = get_u32(c);
	if (c->err)
		return c->err;
	if (o->thread == 0 || o->thread > d->n_threads || o->stack > d->n_nodes)
		return -SONDE_E_REFERENCE;
	if (o->flags & ~(uint32_t)SPOOL_OFFCPU_FLAG_MASK)
		return -SONDE_E_FORMAT;
	if (dur > UINT64_MAX - out || cpu > UINT32_MAX || o->state >= SONDE_OFFCPU_STATES ||
	    (wake && wake - 1 > dur))
		return -SONDE_E_RANGE;
	o->switch_out_ns = out;
	o->switch_in_ns = out + dur;
	o->cpu = (uint32_t)(cpu - 1); /* 0 - 1 wraps to SONDE_SPOOL_CPU_NONE */
	o->wakeup_ns = wake ? out + wake - 1 : 0;
	rec->type = SONDE_SPOOL_REC_OFFCPU;
	return 0;
}

static int dec_offcpu_short(struct sonde_spool_decoder *d, struct cur *c,
			    struct sonde_spool_record *rec)
{
	struct sonde_spool_offcpu_short *o = &rec->offcpu_short;

	o->thread = get_u32(c);
	o->min_ns = get(c);
	o->count = get(c);
	o->total_ns = get(c);
	if (c->err)
		return c->err;
	if (o->thread == 0 || o->thread > d->n_threads)
		return -SONDE_E_REFERENCE;
	rec->type = SONDE_SPOOL_REC_OFFCPU_SHORT;
	return 0;
}

static int dec_account(struct cur *c, struct sonde_spool_record *rec)
{
	struct sonde_spool_account *a = &rec->account;

	a->kernel_time = get_u32(c);
	a->kernel_error = get_u32(c);
	a->lost_records = get(c);
	a->lost_samples = get(c);
	a->offcpu_dropped = get(c);
	if (c->err)
		return c->err;
	if (a->kernel_time > 1 || a->kernel_error > 4095)
		return -SONDE_E_RANGE;
	rec->type = SONDE_SPOOL_REC_ACCOUNT;
	return 0;
}

static int dec_exit(struct sonde_spool_decoder *d, struct cur *c, struct sonde_spool_record *rec)
{
	rec->exit.time_ns = get(c);
	rec->exit.thread = get_u32(c);
	if (c->err)
		return c->err;
	if (rec->exit.thread == 0 || rec->exit.thread > d->n_threads)
		return -SONDE_E_REFERENCE;
	if (rec->exit.time_ns == UINT64_MAX) /* readers keep time + 1, 0 meaning none */
		return -SONDE_E_RANGE;
	rec->type = SONDE_SPOOL_REC_EXIT;
	return 0;
}

static int dec_coverage(struct cur *c, struct sonde_spool_record *rec)
{
	uint64_t flags = get(c);

	if (c->err)
		return c->err;
	if (flags & ~(uint64_t)SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT)
		return -SONDE_E_RANGE;
	rec->type = SONDE_SPOOL_REC_COVERAGE;
	rec->coverage.flags = (uint32_t)flags;
	return 0;
}

static int dec_switches(struct sonde_spool_decoder *d, struct cur *c,
			struct sonde_spool_record *rec)
{
	uint64_t cpu = get(c), flags = get(c), n = get(c), t = 0;

	if (c->err)
		return c->err;
	if (cpu >= SPOOL_MAX_CPUS || (flags & ~(uint64_t)SONDE_SWITCHES_GAP) ||
	    n > SONDE_SPOOL_SWITCHES_MAX)
		return -SONDE_E_RANGE;
	if (n && sonde__array_grow(&d->switches, &d->switches_cap, (size_t)n,
				   sizeof(*d->switches), 64) < 0)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		struct sonde_spool_switch *sw = &d->switches[i];
		uint64_t dt = get(c);
		sw->prev_tid = get_u32(c);
		sw->next_tid = get_u32(c);
		sw->prev_state = get_u32(c);
		if (c->err)
			return c->err;
		if (dt > UINT64_MAX - t || (sw->prev_state & ~(uint32_t)SONDE_SWITCH_INFERRED) > SONDE_SWITCH_EXITED)
			return -SONDE_E_RANGE;
		t += dt;
		sw->time_ns = t;
	}
	uint64_t *last = sonde__u64map_get(&d->last_switch, cpu);
	if (n && last && d->switches[0].time_ns < *last)
		return -SONDE_E_RANGE; /* a CPU's switches go forward, gap or not */
	if (n && last)
		*last = t;
	else if (n && sonde__u64map_put(&d->last_switch, cpu, t) < 0)
		return -ENOMEM;
	rec->type = SONDE_SPOOL_REC_SWITCHES;
	rec->switches.cpu = (uint32_t)cpu;
	rec->switches.flags = (uint32_t)flags;
	rec->switches.v = d->switches;
	rec->switches.n = (size_t)n;
	return 0;
}

/* Whether tag is an off-CPU record this file may hold: 2.1 and later only (in an older
 * file the tag is some other optional record). */
static bool offcpu_tag(const struct sonde_spool_decoder *d, uint8_t tag)
{
	if (d->major != 2 || d->minor < SPOOL_VERSION_MINOR_OFFCPU)
		return false;
	return tag == SPOOL_TAG_OFFCPU || tag == SPOOL_TAG_OFFCPU_SHORT || tag == SPOOL_TAG_UNKNOWN;
}

/* A length-prefixed record: 0 if incomplete, its size, or an error. */
static int decode_framed(struct sonde_spool_decoder *d, const uint8_t *buf, size_t len,
			 struct sonde_spool_record *rec)
{
	const uint8_t *p = buf + 1, *end = buf + len;
	uint8_t tag = buf[0];
	uint64_t plen;
	int r = read_varint_open(&p, end, &plen);

	if (r)
		return r == NEED_MORE ? 0 : r;
	if (plen > SPOOL_MAX_RECORD)
		return -SONDE_E_FORMAT;
	if ((uint64_t)(end - p) < plen)
		return 0;
	struct cur c = {p, p + plen, 0};
	switch (tag) {
	case SPOOL_TAG_MODULE:
		r = dec_module(d, &c, rec);
		break;
	case SPOOL_TAG_FRAME:
		r = dec_frame(d, &c, rec);
		break;
	case SPOOL_TAG_NODE:
		r = dec_node(d, &c, rec);
		break;
	case SPOOL_TAG_THREAD:
		r = dec_thread(d, &c, rec);
		break;
	case SPOOL_TAG_RETIRE:
		r = dec_retire(d, &c, rec);
		break;
	case SPOOL_TAG_END:
		r = dec_end(d, &c, rec);
		break;
	default:
		if (offcpu_tag(d, tag)) {
			r = tag == SPOOL_TAG_OFFCPU_SHORT ? dec_offcpu_short(d, &c, rec)
							  : dec_offcpu(d, &c, rec);
			if (!r && tag == SPOOL_TAG_UNKNOWN)
				rec->type = SONDE_SPOOL_REC_UNKNOWN;
			break;
		}
		if (tag == SPOOL_TAG_SWITCHES && d->major == 2 &&
		    d->minor >= SPOOL_VERSION_MINOR_OFFCPU) {
			r = dec_switches(d, &c, rec);
			break;
		}
		if (tag == SPOOL_TAG_ACCOUNT && d->major == 2) {
			r = dec_account(&c, rec);
			break;
		}
		if (tag == SPOOL_TAG_COVERAGE && d->major == 2 &&
		    d->minor >= SPOOL_VERSION_MINOR_OFFCPU) {
			r = dec_coverage(&c, rec);
			break;
		}
		if (tag == SPOOL_TAG_EXIT && d->major == 2) {
			r = dec_exit(d, &c, rec);
			break;
		}
		if (tag < SPOOL_TAG_SKIP_FIRST || tag > SPOOL_TAG_SKIP_LAST)
			return -SONDE_E_FORMAT;
		rec->type = SONDE_SPOOL_REC_OPTIONAL;
		rec->optional.tag = tag;
		rec->optional.payload = p;
		rec->optional.len = (size_t)plen;
		r = 0;
	}
	return r < 0 ? r : (int)(p + plen - buf);
}

static int decode_sample(struct sonde_spool_decoder *d, const uint8_t *buf, size_t len,
			 struct sonde_spool_record *rec)
{
	const uint8_t *p = buf + 1, *end = buf + len;
	uint8_t tag = buf[0];
	uint64_t dt, thread = d->last_thread, node, cpu = (uint32_t)(d->last_cpu + 1);
	int r;

	if (tag & (d->major == 1 ? SPOOL_SAMPLE_RESERVED_V1 : SPOOL_SAMPLE_RESERVED))
		return -SONDE_E_FORMAT;
	if ((r = read_varint_open(&p, end, &dt)))
		return r == NEED_MORE ? 0 : r;
	if (!(tag & SPOOL_SAMPLE_SAME_THREAD) && (r = read_varint_open(&p, end, &thread)))
		return r == NEED_MORE ? 0 : r;
	/* the CPU plus one, 0 for "not known" */
	if ((tag & SPOOL_SAMPLE_CPU) && (r = read_varint_open(&p, end, &cpu)))
		return r == NEED_MORE ? 0 : r;
	if ((r = read_varint_open(&p, end, &node)))
		return r == NEED_MORE ? 0 : r;
	if ((tag & SPOOL_SAMPLE_SAME_THREAD) && !d->have_sample)
		return -SONDE_E_FORMAT;
	if (thread == 0 || thread > d->n_threads || node > d->n_nodes)
		return -SONDE_E_REFERENCE;
	if (cpu > UINT32_MAX)
		return -SONDE_E_RANGE;
	if (dt > UINT64_MAX - d->last_time)
		return -SONDE_E_RANGE;
	d->last_time += dt;
	d->last_thread = (uint32_t)thread;
	d->last_cpu = (uint32_t)(cpu - 1); /* 0 - 1 wraps to SONDE_SPOOL_CPU_NONE */
	d->have_sample = true;
	d->samples++;
	rec->type = SONDE_SPOOL_REC_SAMPLE;
	rec->sample.time_ns = d->last_time;
	rec->sample.thread = (uint32_t)thread;
	rec->sample.stack = (uint32_t)node;
	rec->sample.flags = tag & SPOOL_SAMPLE_FLAG_MASK;
	rec->sample.cpu = d->last_cpu;
	return (int)(p - buf);
}

int sonde_spool_decoder__decode(struct sonde_spool_decoder *d, const void *buf, size_t len,
				struct sonde_spool_record *rec)
{
	const uint8_t *b = buf;
	int r;

	if (!d || !rec || (len && !buf))
		return -EINVAL;
	if (d->err)
		return d->err;
	memset(rec, 0, sizeof(*rec));
	rec->offset = d->offset;
	if (len == 0)
		return 0;
	if (!d->have_header)
		r = decode_header(d, b, len, rec);
	else if (d->ended)
		r = -SONDE_E_FORMAT; /* nothing may follow END */
	else if (b[0] & SPOOL_TAG_SAMPLE)
		r = decode_sample(d, b, len, rec);
	else
		r = decode_framed(d, b, len, rec);
	if (r < 0 && r != -ENOMEM) {
		d->err = r;
		return r;
	}
	if (r > 0) {
		rec->size = (size_t)r;
		d->offset += (uint64_t)r;
	}
	return r;
}
