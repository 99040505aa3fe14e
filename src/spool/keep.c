#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "spool/keep.h"

char *sonde__spool_dup_str(const char *s, size_t n)
{
	char *r = sonde__malloc(n + 1);

	if (r) {
		if (n)
			memcpy(r, s, n);
		r[n] = 0;
	}
	return r;
}

int sonde__spool_keep_module(const struct sonde_spool_record *rec, struct sonde_spool_module *out)
{
	struct sonde_spool_module m = {.def = rec->module.def, .time_ns = rec->module.time_ns};
	char *path = sonde__spool_dup_str(rec->module.def.path, rec->module.path_len);
	uint8_t *bid = m.def.build_id_len ? sonde__malloc(m.def.build_id_len) : NULL;

	if (!path || (m.def.build_id_len && !bid)) {
		sonde__free(path);
		sonde__free(bid);
		return -ENOMEM;
	}
	if (bid)
		memcpy(bid, m.def.build_id, m.def.build_id_len);
	m.def.path = path;
	m.def.build_id = bid;
	*out = m;
	return 0;
}

bool sonde__spool_chain_step(struct sonde_spool_chain *c, uint32_t cpu,
			     const struct sonde_spool_switch *sw, bool gap,
			     struct sonde_spool_run *run)
{
	bool ends = sw->prev_tid && !(c->seen && gap);
	if (ends)
		*run = (struct sonde_spool_run){sw->prev_tid, cpu, c->seen ? c->last_ns : 0,
						sw->time_ns, sw->prev_state};
	c->seen = true;
	c->last_ns = sw->time_ns;
	c->last_next = sw->next_tid;
	return ends;
}
