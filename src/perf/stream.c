#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "base/array.h"
#include "perf/stream.h"

/* Arena chunks: a record is under 64 KiB, so whatever one event copies fits in a chunk. */
enum { CHUNK_BYTES = 256u << 10, QUEUE_MIN = 64 };
#define NO_CHUNK UINT32_MAX
#define NO_PIN UINT64_MAX

/* A sample's stack copy is read where it lies in the ring, not copied (the copy cost a third
 * of the recorder's CPU at -a -F 999: the bytes are cold, and the unwinder reads a few lines
 * of them), when it is at least BORROW_MIN bytes and the ring's space held from the oldest
 * borrowed record on stays within 1/BORROW_SHARE of the ring: the kernel keeps the rest.
 * A ring that held more than 1/BEHIND_SHARE of its size when the drain began is behind (the
 * reader was slow, or starved): its stacks are copied, and its whole space goes back at once,
 * as the events may wait long. A record that wraps around the ring's end is copied (its bytes
 * are in the ring's scratch buffer). */
enum { BORROW_MIN = 512, BORROW_SHARE = 8, BEHIND_SHARE = 4 };

struct chunk {
	uint8_t *data;
	size_t used;
	uint32_t live; /* queued (or held) events with bytes here */
	bool current;  /* a source is filling it */
};

struct ev {
	struct perf_rec rec;
	uint64_t seq;	/* read order, across sources: ties of equal time */
	uint64_t pin;	/* the pin of the record whose stack it borrows, NO_PIN: none */
	uint32_t chunk; /* where its bytes are, NO_CHUNK: none */
	uint32_t bytes; /* how many */
};

/* A record in the ring whose stack copy an event borrows: the ring's space from its start
 * on is not handed back before the event is released. */
struct pin {
	uint64_t start; /* its ring position */
	bool released;
};

struct source {
	struct ev *q; /* a circular queue in time order, cap a power of two */
	size_t cap, head, n;
	uint64_t latest;    /* newest time read */
	uint32_t chunk;	    /* the arena chunk being filled, NO_CHUNK: none yet */
	bool partial;	    /* its last drain left published records in the ring */
	struct perf_ring *ring; /* the ring its pins are in (drained last), NULL: none */
	struct pin *pins;	/* in ring order, circular, cap a power of two */
	size_t pin_cap, pin_head, pin_n;
	uint64_t pin_seq;  /* the number of pins[pin_head]: pins are numbered as they come */
	bool unpublished;  /* ring space released since it was last handed back */
};

/* How much older than the newest record read a record still in the ring can be: one written
 * by a context another interrupted on the same CPU (the interrupting one stamped later but
 * published first), a matter of microseconds. */
enum { PARTIAL_SLACK_NS = 1000000 };

struct perf_stream {
	struct perf_layout layout;
	perf_stream_filter filter;
	void *ctx;
	struct source *src;
	size_t n_src, cap_src;
	uint32_t *heap; /* sources with events, a binary min-heap on their oldest */
	size_t n_heap, cap_heap;
	bool dirty; /* a drain changed queues: the heap is rebuilt before the next pop */
	struct chunk *chunks;
	size_t n_chunks, cap_chunks;
	uint32_t *free_chunks;
	size_t n_free, cap_free;
	size_t arena_bytes; /* of queued events */
	uint32_t held; /* the chunk of the event popped last, released on the next call */
	uint32_t held_src; /* and its source and pin */
	uint64_t held_pin;
	size_t count;
	uint64_t seq;
};

struct perf_stream *sonde__perf_stream_new(const struct perf_layout *l, perf_stream_filter filter,
					   void *ctx)
{
	struct perf_stream *s = sonde__calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->layout = *l;
	s->filter = filter;
	s->ctx = ctx;
	s->held = NO_CHUNK;
	s->held_pin = NO_PIN;
	return s;
}

void sonde__perf_stream_free(struct perf_stream *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_src; i++) {
		sonde__free(s->src[i].q);
		sonde__free(s->src[i].pins);
	}
	for (size_t i = 0; i < s->n_chunks; i++)
		sonde__free(s->chunks[i].data);
	sonde__free(s->src);
	sonde__free(s->heap);
	sonde__free(s->chunks);
	sonde__free(s->free_chunks);
	sonde__free(s);
}

void sonde__perf_stream_set_layout(struct perf_stream *s, const struct perf_layout *l)
{
	s->layout = *l;
}

int sonde__perf_stream_add_source(struct perf_stream *s)
{
	if (s->n_src >= INT32_MAX ||
	    sonde__array_grow(&s->src, &s->cap_src, s->n_src + 1, sizeof(*s->src), 16) ||
	    sonde__array_grow(&s->heap, &s->cap_heap, s->n_src + 1, sizeof(*s->heap), 16))
		return -ENOMEM;
	memset(&s->src[s->n_src], 0, sizeof(s->src[0]));
	s->src[s->n_src].chunk = NO_CHUNK;
	return (int)s->n_src++;
}

static void chunk_release(struct perf_stream *s, uint32_t c)
{
	struct chunk *k;

	if (c == NO_CHUNK)
		return;
	k = &s->chunks[c];
	if (--k->live)
		return;
	/* A source's current chunk is refilled from its start; another goes back to the free
	 * list (its place was reserved when it was made). */
	if (k->current) {
		k->used = 0;
		return;
	}
	s->free_chunks[s->n_free++] = c;
}

/* The ring space of src up to its oldest pin still used (all it read, with none) goes back
 * to the kernel. */
static void hand_back(struct source *src)
{
	if (!src->ring)
		return;
	sonde__perf_ring_release(src->ring, src->pin_n ? src->pins[src->pin_head].start
						       : src->ring->tail);
	src->unpublished = false;
}

/* Pin number seq of src is no longer used: the space of the pins released in a row from the
 * oldest can go back to the kernel (hand_back). */
static void unpin(struct source *src, uint64_t seq)
{
	size_t mask = src->pin_cap - 1;

	src->pins[(src->pin_head + (seq - src->pin_seq)) & mask].released = true;
	while (src->pin_n && src->pins[src->pin_head].released) {
		src->pin_head = (src->pin_head + 1) & mask;
		src->pin_seq++;
		src->pin_n--;
		src->unpublished = true;
	}
}

static void release_held(struct perf_stream *s)
{
	chunk_release(s, s->held);
	s->held = NO_CHUNK;
	if (s->held_pin != NO_PIN)
		unpin(&s->src[s->held_src], s->held_pin);
	s->held_pin = NO_PIN;
}

/* The n elements of `size` bytes of circular array a (cap slots, a power of two, from
 * head), straightened into a new one of twice the slots (QUEUE_MIN at first), which
 * replaces it: NULL when out of memory (a is kept). */
static void *grow_circular(void *a, size_t size, size_t head, size_t n, size_t *cap)
{
	size_t to = *cap ? *cap * 2 : QUEUE_MIN;
	uint8_t *b = sonde__malloc(to * size);

	if (!b)
		return NULL;
	for (size_t i = 0; i < n; i++)
		memcpy(b + i * size, (const uint8_t *)a + ((head + i) & (*cap - 1)) * size, size);
	sonde__free(a);
	*cap = to;
	return b;
}

/* Room for one more pin in src: false when out of memory. */
static bool pin_room(struct source *src)
{
	if (src->pin_n < src->pin_cap)
		return true;
	struct pin *p =
		grow_circular(src->pins, sizeof(*p), src->pin_head, src->pin_n, &src->pin_cap);
	if (!p)
		return false;
	src->pins = p;
	src->pin_head = 0;
	return true;
}

/* Whether the sample e, read from ring at position start (len bytes at rec), can borrow its
 * stack copy from the ring (BORROW_MIN, BORROW_SHARE): then with room for its pin. */
static bool can_borrow(struct source *src, const struct perf_ring *ring, const struct ev *e,
		       const void *rec, uint64_t start)
{
	const uint8_t *p = rec;
	uint64_t oldest = src->pin_n ? src->pins[src->pin_head].start : start;

	return e->rec.sample.stack_len >= BORROW_MIN && p >= ring->data &&
	       p < ring->data + ring->size && ring->tail - oldest <= ring->size / BORROW_SHARE &&
	       pin_room(src);
}

/* need bytes in src's arena: the chunk they go to, NO_CHUNK when out of memory. */
static uint32_t chunk_for(struct perf_stream *s, struct source *src, size_t need)
{
	uint32_t c = src->chunk;

	if (c != NO_CHUNK && s->chunks[c].used + need <= CHUNK_BYTES)
		return c;
	if (c != NO_CHUNK && s->chunks[c].live == 0) {
		s->chunks[c].used = 0;
		return c;
	}
	if (s->n_free) {
		c = s->free_chunks[--s->n_free];
	} else {
		if (s->n_chunks >= NO_CHUNK - 1 ||
		    sonde__array_grow(&s->chunks, &s->cap_chunks, s->n_chunks + 1,
				      sizeof(*s->chunks), 8) ||
		    sonde__array_grow(&s->free_chunks, &s->cap_free, s->n_chunks + 1,
				      sizeof(*s->free_chunks), 8))
			return NO_CHUNK;
		uint8_t *d = sonde__malloc(CHUNK_BYTES);
		if (!d)
			return NO_CHUNK;
		c = (uint32_t)s->n_chunks++;
		s->chunks[c] = (struct chunk){.data = d};
	}
	s->chunks[c].used = 0;
	s->chunks[c].current = true;
	/* The chunk left behind (full, with events still queued) is free once they are
	 * released. */
	if (src->chunk != NO_CHUNK)
		s->chunks[src->chunk].current = false;
	src->chunk = c;
	return c;
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* Copies n bytes at p into the arena at *at, returns where. */
static const void *put(uint8_t **at, const void *p, size_t n)
{
	uint8_t *d = *at;

	memcpy(d, p, n);
	*at += pad8(n);
	return d;
}

/* need bytes (a multiple of 8) of src's arena for event e: where they start, NULL when out
 * of memory. */
static uint8_t *reserve(struct perf_stream *s, struct source *src, struct ev *e, size_t need)
{
	uint32_t c = chunk_for(s, src, need);

	if (c == NO_CHUNK)
		return NULL;
	struct chunk *k = &s->chunks[c];
	uint8_t *at = k->data + k->used;
	k->used += need;
	k->live++;
	e->chunk = c;
	e->bytes = (uint32_t)need;
	s->arena_bytes += need;
	return at;
}

/* Copies what e borrows from the ring into src's arena, but for its stack copy when it
 * stays where it is (borrow). 0 or -ENOMEM. */
static int keep_bytes(struct perf_stream *s, struct source *src, struct ev *e,
		      enum perf_stream_keep keep, bool borrow)
{
	struct perf_rec *r = &e->rec;
	size_t need = 0, fname = 0, comm = 0;

	e->chunk = NO_CHUNK;
	e->bytes = 0;
	switch (r->type) {
	case PERF_RECORD_SAMPLE:
		if (keep != PERF_STREAM_KEEP) {
			r->sample.stack = NULL;
			r->sample.stack_len = 0;
			r->sample.callchain = NULL;
			r->sample.callchain_nr = 0;
		}
		if (!r->sample.stack || !r->sample.stack_len) {
			r->sample.stack = NULL; /* nothing of the ring is used after the drain */
			r->sample.stack_len = 0;
		}
		if (!r->sample.raw)
			r->sample.raw_size = 0;
		need = (borrow ? 0 : pad8(r->sample.stack_len)) + pad8(r->sample.callchain_nr * 8) +
		       pad8(r->sample.raw_size);
		break;
	case PERF_RECORD_MMAP2:
		fname = r->mmap2.filename ? strlen(r->mmap2.filename) + 1 : 0;
		need = pad8(fname) + (r->mmap2.build_id ? 24 : 0);
		break;
	case PERF_RECORD_COMM:
		comm = r->comm.comm ? strlen(r->comm.comm) + 1 : 0;
		need = pad8(comm);
		break;
	default:
		return 0;
	}
	if (need == 0)
		return 0;
	uint8_t *at = reserve(s, src, e, need);
	if (!at)
		return -ENOMEM;
	switch (r->type) {
	case PERF_RECORD_SAMPLE:
		if (r->sample.stack_len && !borrow)
			r->sample.stack = put(&at, r->sample.stack, r->sample.stack_len);
		if (r->sample.callchain_nr)
			r->sample.callchain = put(&at, r->sample.callchain, r->sample.callchain_nr * 8);
		if (r->sample.raw_size)
			r->sample.raw = put(&at, r->sample.raw, r->sample.raw_size);
		break;
	case PERF_RECORD_MMAP2:
		if (fname)
			r->mmap2.filename = put(&at, r->mmap2.filename, fname);
		if (r->mmap2.build_id)
			r->mmap2.build_id = put(&at, r->mmap2.build_id, 20);
		break;
	case PERF_RECORD_COMM:
		r->comm.comm = put(&at, r->comm.comm, comm);
		break;
	}
	return 0;
}

/* A free slot at the back of src's queue (not yet counted), NULL when out of memory. */
static struct ev *slot(struct source *src)
{
	if (src->n == src->cap) {
		struct ev *q = grow_circular(src->q, sizeof(*q), src->head, src->n, &src->cap);
		if (!q)
			return NULL;
		src->q = q; /* straightened: the oldest first */
		src->head = 0;
	}
	return &src->q[(src->head + src->n) & (src->cap - 1)];
}

/* The event just put at the back goes back past newer ones (a ring is nearly in order:
 * a record can be published after a newer one of the same CPU). */
static void settle(struct source *src)
{
	size_t mask = src->cap - 1;

	for (size_t i = src->n - 1; i > 0; i--) {
		struct ev *a = &src->q[(src->head + i - 1) & mask], *b = &src->q[(src->head + i) & mask];
		if (a->rec.time <= b->rec.time)
			return;
		struct ev t = *a;
		*a = *b;
		*b = t;
	}
}

/* The event written at the back of src's queue joins it. */
static void queue(struct perf_stream *s, struct source *src, struct ev *e)
{
	e->seq = s->seq++;
	src->n++;
	s->count++;
	settle(src);
	if (e->rec.time > src->latest)
		src->latest = e->rec.time;
}

int sonde__perf_stream_push(struct perf_stream *s, int si, uint32_t type, uint64_t time,
			    const void *data, uint32_t len)
{
	struct source *src = &s->src[si];

	if (len > CHUNK_BYTES)
		return -EINVAL;
	release_held(s);
	struct ev *e = slot(src);
	if (!e)
		return -ENOMEM;
	memset(&e->rec, 0, sizeof(e->rec));
	e->rec.type = type;
	e->rec.time = time;
	e->pin = NO_PIN;
	e->chunk = NO_CHUNK;
	e->bytes = 0;
	if (len) {
		uint8_t *at = reserve(s, src, e, pad8(len));
		if (!at)
			return -ENOMEM;
		e->rec.sample.raw = put(&at, data, len);
		e->rec.sample.raw_size = len;
	}
	queue(s, src, e);
	s->dirty = true;
	return 0;
}

int sonde__perf_stream_drain(struct perf_stream *s, int si, struct perf_ring *ring,
			     struct perf_stream_drained *out)
{
	return sonde__perf_stream_drain_some(s, si, ring, SIZE_MAX, NULL, out);
}

int sonde__perf_stream_drain_some(struct perf_stream *s, int si, struct perf_ring *ring,
				  size_t max_bytes, bool *more, struct perf_stream_drained *out)
{
	struct perf_stream_drained d = {0};
	struct source *src = &s->src[si];
	const void *buf;
	size_t len, read = 0;
	int got, err = 0;

	release_held(s);
	if (src->ring && src->ring != ring)
		return -EINVAL; /* its ring was not let go (sonde__perf_stream_unborrow) */
	src->ring = ring;
	sonde__perf_ring_begin(ring);
	bool behind = ring->head - ring->tail > ring->size / BEHIND_SHARE;
	while (read < max_bytes && (got = sonde__perf_ring_next(ring, &buf, &len)) != 0) {
		read += len;
		if (got == -ENOMEM) {
			err = got;
			break;
		}
		if (got < 0) { /* the ring skipped to its head */
			d.bad++;
			continue;
		}
		struct ev *e = slot(src);
		if (!e) {
			ring->tail -= len; /* read again by the next drain */
			err = -ENOMEM;
			break;
		}
		/* decoded where it lies: in the ring, or its wrap-around copy */
		if (sonde__perf_decode(buf, len, &s->layout, &e->rec) < 0) {
			d.bad++;
			continue;
		}
		enum perf_stream_keep keep = s->filter ? s->filter(s->ctx, &e->rec) : PERF_STREAM_KEEP;
		if (keep == PERF_STREAM_DROP) {
			d.dropped++;
			continue;
		}
		uint64_t start = ring->tail - len;
		bool borrow = !behind && keep == PERF_STREAM_KEEP &&
			      e->rec.type == PERF_RECORD_SAMPLE && can_borrow(src, ring, e, buf, start);
		if (keep_bytes(s, src, e, keep, borrow) < 0) {
			ring->tail -= len;
			err = -ENOMEM;
			break;
		}
		e->pin = NO_PIN;
		if (borrow) {
			e->pin = src->pin_seq + src->pin_n;
			src->pins[(src->pin_head + src->pin_n++) & (src->pin_cap - 1)] =
				(struct pin){.start = start};
		}
		queue(s, src, e);
		if (e->rec.type == PERF_RECORD_LOST || e->rec.type == PERF_RECORD_LOST_SAMPLES)
			d.lost++;
		d.records++;
	}
	src->partial = ring->tail != ring->head;
	if (more)
		*more = src->partial;
	hand_back(src);
	if (d.records)
		s->dirty = true;
	if (out)
		*out = d;
	return err;
}

/* The event e of src, which borrows its stack copy from the ring, copies it into the arena
 * with what it had there already (keep_bytes, from where they are now). 0, or -ENOMEM:
 * then it goes without its stack. */
static int copy_out(struct perf_stream *s, struct source *src, struct ev *e)
{
	uint32_t had = e->chunk, had_bytes = e->bytes;

	e->pin = NO_PIN;
	if (keep_bytes(s, src, e, PERF_STREAM_KEEP, false) < 0) {
		e->chunk = had;
		e->bytes = had_bytes;
		e->rec.sample.stack = NULL;
		e->rec.sample.stack_len = 0;
		return -ENOMEM;
	}
	chunk_release(s, had);
	s->arena_bytes -= had_bytes;
	return 0;
}

int sonde__perf_stream_unborrow(struct perf_stream *s, int si)
{
	struct source *src = &s->src[si];
	int err = 0;

	release_held(s);
	for (size_t i = 0; src->pin_n && i < src->n; i++) {
		struct ev *e = &src->q[(src->head + i) & (src->cap - 1)];
		if (e->pin != NO_PIN && copy_out(s, src, e) < 0)
			err = -ENOMEM;
	}
	src->pin_n = 0;
	hand_back(src);
	src->ring = NULL;
	return err;
}

static const struct ev *oldest(const struct perf_stream *s, uint32_t si)
{
	const struct source *src = &s->src[si];

	return &src->q[src->head];
}

static bool before(const struct perf_stream *s, uint32_t a, uint32_t b)
{
	const struct ev *x = oldest(s, a), *y = oldest(s, b);

	return x->rec.time < y->rec.time || (x->rec.time == y->rec.time && x->seq < y->seq);
}

static void sift_down(struct perf_stream *s, size_t i)
{
	uint32_t *h = s->heap;

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < s->n_heap && before(s, h[l], h[m]))
			m = l;
		if (l + 1 < s->n_heap && before(s, h[l + 1], h[m]))
			m = l + 1;
		if (m == i)
			return;
		uint32_t t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void rebuild(struct perf_stream *s)
{
	s->n_heap = 0;
	for (size_t i = 0; i < s->n_src; i++)
		if (s->src[i].n)
			s->heap[s->n_heap++] = (uint32_t)i;
	for (size_t i = s->n_heap / 2; i-- > 0;)
		sift_down(s, i);
	s->dirty = false;
}

/* The caller has nothing more to pop for now: the ring space released goes back to the
 * kernel (not at every pop: the tail shares a cache line with the head the kernel
 * writes). */
static const struct perf_rec *none_now(struct perf_stream *s)
{
	for (size_t i = 0; i < s->n_src; i++)
		if (s->src[i].unpublished)
			hand_back(&s->src[i]);
	return NULL;
}

const struct perf_rec *sonde__perf_stream_pop(struct perf_stream *s, uint64_t limit)
{
	release_held(s);
	if (s->dirty)
		rebuild(s);
	if (!s->n_heap)
		return none_now(s);
	uint32_t si = s->heap[0];
	struct source *src = &s->src[si];
	struct ev *e = &src->q[src->head];
	if (e->rec.time > limit)
		return none_now(s);
	/* The slot stays as it is until a drain writes there: after this pop. */
	src->head = (src->head + 1) & (src->cap - 1);
	src->n--;
	s->count--;
	s->held = e->chunk;
	s->held_src = si;
	s->held_pin = e->pin;
	s->arena_bytes -= e->bytes;
	if (!src->n)
		s->heap[0] = s->heap[--s->n_heap];
	sift_down(s, 0);
	return &e->rec;
}

uint64_t sonde__perf_stream_limit(const struct perf_stream *s, uint64_t floor)
{
	uint64_t limit = UINT64_MAX;

	for (size_t i = 0; i < s->n_src; i++) {
		const struct source *src = &s->src[i];
		uint64_t t = src->latest > floor ? src->latest : floor;
		/* a ring read in part still holds records from its newest read on (a little
		 * older, some): it holds the others back, however old that is */
		if (src->partial)
			t = src->latest > PARTIAL_SLACK_NS ? src->latest - PARTIAL_SLACK_NS : 0;
		if (t < limit)
			limit = t;
	}
	return limit == UINT64_MAX ? floor : limit;
}

size_t sonde__perf_stream_count(const struct perf_stream *s)
{
	return s->count;
}

size_t sonde__perf_stream_bytes(const struct perf_stream *s)
{
	return s->count * sizeof(struct ev) + s->arena_bytes;
}
