/* ChangeTraceConfig (perfetto-wire.md §3.1): like traced, the producer name filters of the
 * data sources (producer_name_filter, producer_name_regex_filter) may change in a running
 * session, and so may machine_name_filter (traced keeps the old one and matches without
 * it; here it is honoured as StartTracing honours it); the rest of the new config must be
 * the same. Producers that match the new filters and have no instance yet get one (set up,
 * and started if the session runs); instances already running are left alone. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/internal.h"
#include "service/session.h"

/* The config re-encoded without the data sources' producer and machine filters: two
 * configs that only differ in those encode the same (nested lengths are always written the
 * same way). */
static int strip_filters(const uint8_t *cfg, size_t len, struct buf *out)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f, g;
	int rc;

	for (;;) {
		const uint8_t *start = r.p;
		if ((rc = sonde__pb_next(&r, &f)) <= 0)
			break;
		if (f.num != PF_TRACE_CONFIG_DATA_SOURCES || f.wire != PB_LEN) {
			sonde__buf_append(out, start, (size_t)(r.p - start));
			continue;
		}
		struct pb_reader d = pb_sub(&f);
		size_t m = sonde__pb_begin(out, PF_TRACE_CONFIG_DATA_SOURCES);
		for (;;) {
			const uint8_t *s2 = d.p;
			if ((rc = sonde__pb_next(&d, &g)) <= 0)
				break;
			if (g.num != PF_TC_DATA_SOURCE_PRODUCER_NAME_FILTER &&
			    g.num != PF_TC_DATA_SOURCE_PRODUCER_NAME_REGEX_FILTER &&
			    g.num != PF_TC_DATA_SOURCE_MACHINE_NAME_FILTER)
				sonde__buf_append(out, s2, (size_t)(d.p - s2));
		}
		sonde__pb_end(out, m);
		if (rc < 0)
			return rc;
	}
	if (rc < 0)
		return rc;
	return buf_error(out) ? -ENOMEM : 0;
}

static const char *compatible(const struct session *ss, const uint8_t *cfg, size_t len)
{
	struct buf a = BUF_INIT, b = BUF_INIT;
	const char *err = NULL;

	if (strip_filters(ss->config, ss->config_len, &a) < 0 || strip_filters(cfg, len, &b) < 0)
		err = "malformed TraceConfig";
	else if (a.len != b.len || memcmp(a.data, b.data, a.len))
		err = "only the producer and machine name filters of the data sources can change";
	sonde__buf_free(&a);
	sonde__buf_free(&b);
	return err;
}

static bool has_instance(const struct session *ss, const struct conn *c, const struct ds_cfg *d)
{
	uint16_t buf_id = d->target_buffer < ss->nbufs ? ss->buf_ids[d->target_buffer] : 0;

	for (size_t i = 0; i < ss->ninst; i++)
		if (ss->inst[i].conn_id == c->id && ss->inst[i].buf_id == buf_id &&
		    !strcmp(ss->inst[i].ds_name, d->name))
			return true;
	return false;
}

/* Replaces the session's config (and the data-source table pointing into it). */
static int swap_config(struct session *ss, const uint8_t *cfg, size_t len)
{
	struct session tmp = {.config = sonde__malloc(len ? len : 1), .config_len = len};
	int rc;

	if (!tmp.config)
		return -ENOMEM;
	memcpy(tmp.config, cfg, len);
	const char *why = NULL;
	if ((rc = sonde__session_parse_data_sources(&tmp)) < 0 || tmp.cfg.nds != ss->cfg.nds ||
	    (why = sonde__tcfg_validate(&tmp.cfg, SIZE_MAX))) {
		/* only the data sources were parsed: what validate finds is in their filters */
		if (why)
			sonde_info("ChangeTraceConfig refused: %s", why);
		sonde__session_free_data_sources(&tmp);
		sonde__free(tmp.config);
		return rc < 0 ? rc : why ? -SONDE_E_LIMIT : -SONDE_E_FORMAT;
	}
	sonde__session_free_data_sources(ss);
	sonde__free(ss->config);
	ss->config = tmp.config;
	ss->config_len = tmp.config_len;
	ss->cfg.ds = tmp.cfg.ds;
	ss->cfg.nds = tmp.cfg.nds;
	return 0;
}

int sonde__reconfig_change(struct svc *s, struct req *r)
{
	struct session *ss = sonde__svc_session(s, r->c->k.session_id);
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	const uint8_t *cfg = NULL;
	size_t len = 0, added = 0;
	const char *err;
	int rc;

	while (sonde__pb_next(&rd, &f) > 0)
		if (f.num == PF_CHANGE_TRACE_CONFIG_REQ_TRACE_CONFIG && f.wire == PB_LEN)
			cfg = f.ptr, len = f.len;
	if (!ss || ss->read_only || (ss->state != SESS_CONFIGURED && ss->state != SESS_STARTED)) {
		sonde_info("ChangeTraceConfig refused: no running session");
		return -SONDE_E_STATE;
	}
	if (!cfg || (err = compatible(ss, cfg, len))) {
		sonde_info("ChangeTraceConfig refused: %s", cfg ? err : "no trace_config");
		return -SONDE_E_STATE;
	}
	if ((rc = swap_config(ss, cfg, len)) < 0)
		return rc;
	for (size_t i = 0; i < ss->cfg.nds; i++) {
		for (size_t j = 0; j < s->nds; j++) {
			struct conn *pc = sonde__svc_conn(s, s->ds[j]->conn_id);
			if (!pc || pc->dead ||
			    !sonde__session_ds_matches(s, &ss->cfg.ds[i], pc, s->ds[j]) ||
			    has_instance(ss, pc, &ss->cfg.ds[i]))
				continue;
			sonde__session_add_instance(s, ss, &ss->cfg.ds[i], pc, s->ds[j]);
			added++;
		}
	}
	sonde_info("session %llu: trace config changed, %zu new data source instances",
		   (unsigned long long)ss->id, added);
	return sonde__svc_reply(r, NULL, false);
}
