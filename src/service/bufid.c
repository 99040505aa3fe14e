/* Global BufferIDs (perfetto-wire.md §2.4, §5.1: a service-wide u16 pool, 0 unused).
 *
 * Ids are handed out cyclically over the whole pool, as Perfetto's service does, never
 * lowest-free: a producer may still hold a writer bound to a buffer that was just freed
 * (the SDK commits a writer's last chunk only when it replaces the writer, which can be
 * after the next session started). Had that id gone straight to the next session, the
 * old session's data would land in the new one, possibly another user's. With cyclic
 * allocation the old id stays unknown until the whole pool has been used, and
 * CommitData drops (and counts) chunks and patches addressed to it. */
#include <errno.h>

#include "service/internal.h"

int sonde__bufid_alloc(struct svc *s, struct tbuf *tb, uint16_t *out)
{
	uint32_t id = s->last_buf_id;

	for (uint32_t tries = 0; tries < SVC_MAX_BUFFER_ID; tries++) {
		id = id >= SVC_MAX_BUFFER_ID ? 1 : id + 1;
		if (sonde__u64map_get(&s->buf_by_id, id))
			continue;
		if (u64map_put_ptr(&s->buf_by_id, id, tb) < 0)
			return -ENOMEM;
		s->last_buf_id = (uint16_t)id;
		*out = (uint16_t)id;
		return 0;
	}
	return -ENOSPC;
}

struct tbuf *sonde__bufid_get(const struct svc *s, uint64_t id)
{
	if (id == 0 || id > SVC_MAX_BUFFER_ID)
		return NULL;
	return u64map_get_ptr(&s->buf_by_id, id);
}

void sonde__bufid_release(struct svc *s, uint16_t id)
{
	sonde__u64map_del(&s->buf_by_id, id);
}

size_t sonde__bufid_count(const struct svc *s)
{
	return u64map_count(&s->buf_by_id);
}

struct tbuf *sonde__bufid_next(const struct svc *s, size_t *pos)
{
	uint64_t key, val;

	if (!sonde__u64map_next(&s->buf_by_id, pos, &key, &val))
		return NULL;
	return (struct tbuf *)(uintptr_t)val;
}

void sonde__bufid_free(struct svc *s)
{
	sonde__u64map_free(&s->buf_by_id);
}
