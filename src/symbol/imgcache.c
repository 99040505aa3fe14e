#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "symbol/imgcache.h"

struct imgcache_entry {
	struct imgcache_entry *prev, *next;
	uint64_t dev, ino, size;
	uint8_t build_id[64];
	size_t build_id_len;
	int fd;
};

static void unlink_entry(struct imgcache *c, struct imgcache_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NULL;
}

static void push_front(struct imgcache *c, struct imgcache_entry *e)
{
	e->prev = NULL;
	e->next = c->head;
	if (c->head)
		c->head->prev = e;
	c->head = e;
	if (!c->tail)
		c->tail = e;
}

static void drop(struct imgcache *c, struct imgcache_entry *e)
{
	unlink_entry(c, e);
	c->n--;
	c->bytes -= e->size;
	close(e->fd);
	sonde__free(e);
}

/* A linear scan: the cache holds at most a few hundred images, and lookups happen once
 * per module load, not per address. */
static struct imgcache_entry *find(struct imgcache *c, uint64_t dev, uint64_t ino)
{
	for (struct imgcache_entry *e = c->head; e; e = e->next)
		if (e->dev == dev && e->ino == ino)
			return e;
	return NULL;
}

int sonde__imgcache_add(struct imgcache *c, uint64_t dev, uint64_t ino, const uint8_t *build_id,
		 size_t build_id_len, int fd, uint64_t size)
{
	struct imgcache_entry *e = find(c, dev, ino);

	if (build_id_len > sizeof(e->build_id))
		build_id_len = sizeof(e->build_id);
	if (e)
		drop(c, e); /* the newer descriptor is the one known to be current */
	if (size > c->max_bytes) {
		close(fd);
		return -SONDE_E_LIMIT;
	}
	e = sonde__calloc(1, sizeof(*e));
	if (!e) {
		close(fd);
		return -ENOMEM;
	}
	e->dev = dev;
	e->ino = ino;
	e->size = size;
	e->fd = fd;
	e->build_id_len = build_id_len;
	if (build_id_len)
		memcpy(e->build_id, build_id, build_id_len);
	while (c->tail && (c->bytes + size > c->max_bytes || c->n + 1 > c->max_n))
		drop(c, c->tail);
	push_front(c, e);
	c->n++;
	c->bytes += size;
	return 0;
}

int sonde__imgcache_get(struct imgcache *c, uint64_t dev, uint64_t ino, const uint8_t *build_id,
		 size_t build_id_len)
{
	struct imgcache_entry *e = find(c, dev, ino);

	if (!e)
		return -1;
	if (build_id_len && e->build_id_len &&
	    (build_id_len != e->build_id_len || memcmp(build_id, e->build_id, build_id_len)))
		return -1;
	unlink_entry(c, e);
	push_front(c, e);
	return e->fd;
}

void sonde__imgcache_free(struct imgcache *c)
{
	if (!c)
		return;
	while (c->head)
		drop(c, c->head);
}
