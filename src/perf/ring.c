#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "perf/ring.h"

int sonde__perf_ring_map(struct perf_ring *r, int fd, int cpu, unsigned pages, unsigned min_pages)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	if (pages == 0 || (pages & (pages - 1)) || min_pages == 0 || min_pages > pages)
		return -EINVAL;
	for (;;) {
		size_t len = (1 + (size_t)pages) * page;
		void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		if (m != MAP_FAILED) {
			r->map = m;
			r->map_len = len;
			r->meta = m;
			r->data = (uint8_t *)m + page;
			r->size = (uint64_t)pages * page;
			r->fd = fd;
			r->cpu = cpu;
			r->tail = perf_ring_head_acquire(r->meta);
			r->head = r->tail;
			return 0;
		}
		int err = errno;
		if ((err != ENOMEM && err != EPERM) || pages / 2 < min_pages)
			return -err;
		sonde_debug("perf ring of %u pages refused (%s), trying %u", pages, strerror(err),
			    pages / 2);
		pages /= 2;
	}
}

void sonde__perf_ring_init_mem(struct perf_ring *r, struct perf_event_mmap_page *meta, void *data,
			uint64_t size)
{
	memset(r, 0, sizeof(*r));
	r->meta = meta;
	r->data = data;
	r->size = size;
	r->fd = -1;
	r->cpu = -1;
	r->tail = meta->data_tail;
	r->head = r->tail;
}

void sonde__perf_ring_unmap(struct perf_ring *r)
{
	if (!r)
		return;
	if (r->map)
		munmap(r->map, r->map_len);
	sonde__buf_free(&r->scratch);
	r->map = NULL;
	r->meta = NULL;
	r->data = NULL;
}

void sonde__perf_ring_begin(struct perf_ring *r)
{
	r->head = perf_ring_head_acquire(r->meta);
}

uint64_t sonde__perf_ring_pending(const struct perf_ring *r)
{
	return perf_ring_head_acquire(r->meta) - r->tail;
}

/* Copies n bytes starting at ring position pos into dst, across the end of the data area. */
static void ring_copy(const struct perf_ring *r, uint64_t pos, void *dst, size_t n)
{
	uint64_t off = pos & (r->size - 1);
	size_t first = n < r->size - off ? n : (size_t)(r->size - off);

	memcpy(dst, r->data + off, first);
	memcpy((uint8_t *)dst + first, r->data, n - first);
}

int sonde__perf_ring_next(struct perf_ring *r, const void **rec, size_t *len)
{
	struct perf_event_header h;
	uint64_t avail = r->head - r->tail;

	*len = 0; /* what a skip or a failure consumed of the caller's byte budget */
	if (avail == 0)
		return 0;
	/* The head can only be ahead of the tail by at most the ring size; anything else means
	 * the header page was corrupted or the kernel and we disagree: resynchronize. */
	if (avail < sizeof(h) || avail > r->size)
		goto bad;
	ring_copy(r, r->tail, &h, sizeof(h));
	if (h.size < sizeof(h) || h.size > avail)
		goto bad;

	uint64_t off = r->tail & (r->size - 1);
	if (off + h.size <= r->size) {
		*rec = r->data + off;
	} else {
		sonde__buf_reset(&r->scratch);
		void *dst = sonde__buf_extend(&r->scratch, h.size);
		if (!dst)
			return -ENOMEM;
		ring_copy(r, r->tail, dst, h.size);
		*rec = dst;
	}
	*len = h.size;
	r->tail += h.size;
	return 1;
bad:
	sonde_warn("perf ring on cpu %d: malformed record header at %llu, skipping %llu bytes",
		   r->cpu, (unsigned long long)r->tail, (unsigned long long)avail);
	r->tail = r->head;
	return -SONDE_E_FORMAT;
}

void sonde__perf_ring_end(struct perf_ring *r)
{
	perf_ring_tail_release(r->meta, r->tail);
}

void sonde__perf_ring_release(struct perf_ring *r, uint64_t pos)
{
	perf_ring_tail_release(r->meta, pos);
}
