/* Tracing sessions (perfetto-wire.md §3.3): TraceConfig, buffers, data-source instances
 * and their commands, start/stop with acks and timeouts, flushes, periodic tasks and
 * write_into_file. */
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/fwriter.h"
#include "service/internal.h"
#include "service/perfauth.h"
#include "service/perfds.h"

enum {
	MAX_DURATION_MS = 7 * 24 * 3600 * 1000u,
	MAX_DURATION_GUARDRAILS_MS = 24 * 3600 * 1000u,
	FILE_FLUSH_BYTES = 1 << 20,
};

struct session *sonde__svc_session(struct svc *s, uint64_t id)
{
	for (size_t i = 0; id && i < s->nsessions; i++)
		if (s->sessions[i]->id == id)
			return s->sessions[i];
	return NULL;
}

bool sonde__session_owns_buffer(const struct session *ss, uint16_t buf_id)
{
	for (size_t i = 0; i < ss->nbufs; i++)
		if (ss->buf_ids[i] == buf_id)
			return true;
	return false;
}

static struct instance *session_instance(struct svc *s, uint64_t id, struct session **out)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		for (size_t j = 0; j < ss->ninst; j++) {
			if (ss->inst[j].id == id) {
				*out = ss;
				return &ss->inst[j];
			}
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------ config */

static int push_str(char ***v, size_t *n, const uint8_t *p, size_t len)
{
	char **nv = sonde__realloc(*v, (*n + 1) * sizeof(**v));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	if (!(nv[*n] = sonde__svc_strndup(p, len)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int parse_ds(struct session *ss, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e), cr;
	struct pb_field f, g;
	struct ds_cfg *v = sonde__realloc(ss->ds, (ss->nds + 1) * sizeof(*v)), *d;

	if (!v)
		return -ENOMEM;
	ss->ds = v;
	d = memset(&v[ss->nds++], 0, sizeof(*d));
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_LEN)
			continue;
		if (f.num == PF_TC_DATA_SOURCE_CONFIG) {
			d->raw = f.ptr;
			d->raw_len = f.len;
		} else if (f.num == PF_TC_DATA_SOURCE_PRODUCER_NAME_FILTER) {
			if (push_str(&d->name_filter, &d->n_name_filter, f.ptr, f.len) < 0)
				return -ENOMEM;
		} else if (f.num == PF_TC_DATA_SOURCE_PRODUCER_NAME_REGEX_FILTER) {
			if (push_str(&d->regex_filter, &d->n_regex_filter, f.ptr, f.len) < 0)
				return -ENOMEM;
		}
	}
	/* a data source without a config has no bytes (and a NULL pointer) to read */
	cr = d->raw ? pb_reader_init(d->raw, d->raw_len) : pb_reader_init("", 0);
	while (sonde__pb_next(&cr, &g) > 0) {
		if (g.num == PF_DS_CONFIG_NAME && g.wire == PB_LEN) {
			sonde__free(d->name);
			d->name = sonde__svc_strndup(g.ptr, g.len);
		} else if (g.num == PF_DS_CONFIG_TARGET_BUFFER && g.wire == PB_VARINT) {
			d->target_buffer = g.u > UINT32_MAX ? UINT32_MAX : (uint32_t)g.u;
		}
	}
	return 0;
}

static void parse_builtin(struct session *ss, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_VARINT)
			continue;
		if (f.num == PF_BUILTIN_DS_DISABLE_CLOCK_SNAPSHOTTING)
			ss->no_clock_snapshots = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_TRACE_CONFIG)
			ss->no_trace_config = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_SYSTEM_INFO)
			ss->no_system_info = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_SERVICE_EVENTS)
			ss->no_service_events = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_SNAPSHOT_INTERVAL_MS && f.u)
			ss->snapshot_interval_ms = (uint32_t)f.u;
	}
}

static uint64_t sub_varint(const struct pb_field *e, uint32_t num)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	uint64_t v = 0;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == num && f.wire == PB_VARINT)
			v = f.u;
	return v;
}

/* Fields of the top-level TraceConfig that are plain varints. */
static void parse_scalar(struct session *ss, const struct pb_field *f)
{
	uint32_t v32 = f->u > UINT32_MAX ? UINT32_MAX : (uint32_t)f->u;

	switch (f->num) {
	case PF_TRACE_CONFIG_DURATION_MS:
		ss->duration_ms = v32;
		break;
	case PF_TRACE_CONFIG_ENABLE_EXTRA_GUARDRAILS:
		ss->extra_guardrails = f->u;
		break;
	case PF_TRACE_CONFIG_WRITE_INTO_FILE:
		ss->write_into_file = f->u;
		break;
	case PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS:
		ss->file_write_period_ms = v32;
		break;
	case PF_TRACE_CONFIG_MAX_FILE_SIZE_BYTES:
		ss->max_file_size = f->u;
		break;
	case PF_TRACE_CONFIG_DEFERRED_START:
		ss->deferred_start = f->u;
		break;
	case PF_TRACE_CONFIG_FLUSH_PERIOD_MS:
		ss->flush_period_ms = v32;
		break;
	case PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS:
		ss->flush_timeout_ms = v32;
		break;
	case PF_TRACE_CONFIG_DATA_SOURCE_STOP_TIMEOUT_MS:
		ss->stop_timeout_ms = v32;
		break;
	default:
		break;
	}
}

/* Parses ss->config. Buffers are returned as (size, discard) pairs in *bufs. Returns an
 * error message for the consumer, or NULL. */
static const char *parse_config(struct session *ss, uint64_t **bufs, size_t *nbufs,
				char **output_path)
{
	struct pb_reader r = pb_reader_init(ss->config, ss->config_len);
	struct pb_field f;
	const char *err;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.wire == PB_VARINT) {
			parse_scalar(ss, &f);
		} else if (f.wire != PB_LEN) {
			continue;
		} else if (f.num == PF_TRACE_CONFIG_BUFFERS) {
			uint64_t *v = sonde__realloc(*bufs, (*nbufs + 1) * 2 * sizeof(*v));
			if (!v)
				return "out of memory";
			*bufs = v;
			v[*nbufs * 2] = sub_varint(&f, PF_BUFFER_CONFIG_SIZE_KB);
			v[*nbufs * 2 + 1] = sub_varint(&f, PF_BUFFER_CONFIG_FILL_POLICY) ==
					    PF_FILL_POLICY_DISCARD;
			(*nbufs)++;
		} else if (f.num == PF_TRACE_CONFIG_DATA_SOURCES) {
			if (parse_ds(ss, &f) < 0)
				return "out of memory";
		} else if (f.num == PF_TRACE_CONFIG_BUILTIN_DATA_SOURCES) {
			parse_builtin(ss, &f);
		} else if (f.num == PF_TRACE_CONFIG_INCREMENTAL_STATE_CONFIG) {
			ss->clear_period_ms = (uint32_t)sub_varint(
				&f, PF_INCREMENTAL_STATE_CONFIG_CLEAR_PERIOD_MS);
		} else if (f.num == PF_TRACE_CONFIG_UNIQUE_SESSION_NAME) {
			sonde__free(ss->unique_name);
			ss->unique_name = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.num == PF_TRACE_CONFIG_OUTPUT_PATH) {
			sonde__free(*output_path);
			*output_path = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.num == PF_TRACE_CONFIG_TRIGGER_CONFIG) {
			if ((err = sonde__trigger_parse(ss, &f)))
				return err;
		}
	}
	if (rc < 0)
		return "malformed TraceConfig";
	if ((err = sonde__trigger_validate(ss)))
		return err;
	if (ss->duration_ms > (ss->extra_guardrails ? MAX_DURATION_GUARDRAILS_MS : MAX_DURATION_MS))
		return "duration_ms is too long";
	if (*nbufs > SVC_MAX_BUFFERS_PER_SESSION)
		return "too many buffers";
	if (ss->extra_guardrails && ss->deferred_start)
		return "deferred_start is not allowed with enable_extra_guardrails";
	return NULL;
}

static const char *check_limits(struct svc *s, const struct session *ss)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		const struct session *o = s->sessions[i];
		if (ss->unique_name && o->unique_name && !strcmp(ss->unique_name, o->unique_name))
			return "a session with this unique_session_name is already running";
	}
	return NULL; /* session caps: sonde__sec_check_session */
}

/* ------------------------------------------------------------------ instances */

static bool regex_full_match(const char *re, const char *s)
{
	size_t n = strlen(re);
	char *anchored = sonde__malloc(n + 5);
	regex_t rx;
	bool ok = false;

	if (!anchored)
		return false;
	snprintf(anchored, n + 5, "^(%s)$", re);
	if (regcomp(&rx, anchored, REG_EXTENDED | REG_NOSUB) == 0) {
		ok = regexec(&rx, s, 0, NULL, 0) == 0;
		regfree(&rx);
	}
	sonde__free(anchored);
	return ok;
}

static bool ds_matches(const struct ds_cfg *d, const struct conn *c, const struct ds_reg *reg)
{
	if (!d->name || strcmp(d->name, reg->name))
		return false;
	if (!d->n_name_filter && !d->n_regex_filter)
		return true;
	for (size_t i = 0; i < d->n_name_filter; i++)
		if (!strcmp(d->name_filter[i], c->p.name))
			return true;
	for (size_t i = 0; i < d->n_regex_filter; i++)
		if (regex_full_match(d->regex_filter[i], c->p.name))
			return true;
	return false;
}

/* The consumer's DataSourceConfig, byte for byte, with the service-owned fields
 * appended (last value wins, §5). */
static uint8_t *rewrite_ds_config(const struct session *ss, const struct ds_cfg *d, uint16_t buf_id,
				  size_t *len)
{
	struct buf b = BUF_INIT;

	sonde__buf_append(&b, d->raw, d->raw_len);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TARGET_BUFFER, buf_id);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TRACE_DURATION_MS, ss->duration_ms);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TRACING_SESSION_ID, ss->id);
	if (ss->extra_guardrails)
		sonde__pb_put_bool(&b, PF_DS_CONFIG_ENABLE_EXTRA_GUARDRAILS, true);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_STOP_TIMEOUT_MS, ss->stop_timeout_ms);
	if (buf_error(&b) < 0) {
		sonde__buf_free(&b);
		return NULL;
	}
	*len = b.len;
	return b.data;
}

static void send_ds_cmd(struct svc *s, struct conn *c, uint32_t cmd, const struct instance *in,
			bool with_config)
{
	struct buf b = BUF_INIT;
	size_t m = sonde__pb_begin(&b, cmd);

	sonde__pb_put_varint(&b, PF_START_DS_NEW_INSTANCE_ID, in->id);
	if (with_config)
		sonde__pb_put_bytes(&b, PF_START_DS_CONFIG, in->cfg, in->cfg_len);
	sonde__pb_end(&b, m);
	sonde__producer_send_cmd(s, c, &b, false);
	sonde__buf_free(&b);
}

static void check_all_started(struct svc *s, struct session *ss)
{
	if (ss->state != SESS_STARTED || ss->all_started_emitted)
		return;
	for (size_t i = 0; i < ss->ninst; i++)
		if (ss->inst[i].state != DS_STARTED)
			return;
	ss->all_started_emitted = true;
	sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_ALL_DATA_SOURCES_STARTED);
	sonde__session_notify_observer(s, ss, NULL, true);
}

static void set_state(struct svc *s, struct session *ss, struct instance *in, enum ds_state st)
{
	in->state = st;
	if (st == DS_CONFIGURED || st == DS_STARTED || st == DS_STOPPED)
		sonde__session_notify_observer(s, ss, in, false);
	if (st == DS_STARTED)
		check_all_started(s, ss);
}

static void start_instance(struct svc *s, struct session *ss, struct instance *in)
{
	struct conn *c = sonde__svc_conn(s, in->conn_id);

	if (!c || in->state != DS_CONFIGURED)
		return;
	send_ds_cmd(s, c, PF_ASYNC_CMD_START_DATA_SOURCE, in, true);
	set_state(s, ss, in, in->notify_start ? DS_STARTING : DS_STARTED);
}

static void stop_instance(struct svc *s, struct session *ss, struct instance *in)
{
	struct conn *c = sonde__svc_conn(s, in->conn_id);

	if (in->state == DS_STOPPED || in->state == DS_STOPPING)
		return;
	if (c)
		send_ds_cmd(s, c, PF_ASYNC_CMD_STOP_DATA_SOURCE, in, false);
	set_state(s, ss, in, c && in->notify_stop ? DS_STOPPING : DS_STOPPED);
}

static void create_instance(struct svc *s, struct session *ss, const struct ds_cfg *d,
			    struct conn *c, const struct ds_reg *reg)
{
	struct instance *in;

	if (d->target_buffer >= ss->nbufs || sonde__producer_ensure_smb(s, c, ss) < 0)
		return;
	if (sonde__array_grow(&ss->inst, &ss->inst_cap, ss->ninst + 1, sizeof(*ss->inst), 8) < 0)
		return;
	in = memset(&ss->inst[ss->ninst], 0, sizeof(*in));
	in->buf_id = ss->buf_ids[d->target_buffer];
	in->cfg = rewrite_ds_config(ss, d, in->buf_id, &in->cfg_len);
	in->ds_name = sonde__strdup(reg->name);
	if (!in->cfg || !in->ds_name) {
		sonde__free(in->cfg);
		sonde__free(in->ds_name);
		return;
	}
	ss->ninst++;
	in->id = s->next_instance_id++;
	in->conn_id = c->id;
	in->notify_start = reg->notify_start;
	in->notify_stop = reg->notify_stop;
	in->no_flush = reg->no_flush;
	in->handles_incr = reg->handles_incr;
	sonde__producer_allow_buffer(c, in->buf_id);
	send_ds_cmd(s, c, PF_ASYNC_CMD_SETUP_DATA_SOURCE, in, true);
	set_state(s, ss, in, DS_CONFIGURED);
	if (ss->state == SESS_STARTED)
		start_instance(s, ss, in);
}

void sonde__session_setup_for_producer(struct svc *s, struct conn *c, struct ds_reg *d)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		if (ss->state != SESS_CONFIGURED && ss->state != SESS_STARTED)
			continue;
		for (size_t j = 0; j < ss->nds; j++)
			if (ds_matches(&ss->ds[j], c, d))
				create_instance(s, ss, &ss->ds[j], c, d);
	}
}

/* ------------------------------------------------------------------ stop */

static void cancel_timer(struct svc *s, uint64_t *t)
{
	if (*t)
		sonde__loop_timer_del(&s->loop, *t);
	*t = 0;
}

static void resolve_enable(struct svc *s, struct session *ss)
{
	struct conn *c = sonde__svc_conn(s, ss->conn_id);
	struct buf b = BUF_INIT;

	if (!ss->enable_pending || !c)
		return;
	ss->enable_pending = false;
	sonde__pb_put_bool(&b, PF_ENABLE_TRACING_RESP_DISABLED, true);
	if (ss->error)
		sonde__pb_put_string(&b, PF_ENABLE_TRACING_RESP_ERROR, ss->error);
	sonde__svc_send_reply(c, ss->enable_req, true, false, b.data, b.len, -1);
	sonde__svc_conn_update_events(s, c);
	sonde__buf_free(&b);
}

void sonde__session_resolve_if_disabled(struct svc *s, struct session *ss)
{
	if (ss->state == SESS_DISABLED && (!ss->fw || ss->file_done))
		resolve_enable(s, ss);
}

static void scrape_session(struct svc *s, struct session *ss)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (!c->is_producer || c->dead)
			continue;
		for (size_t j = 0; j < ss->ninst; j++) {
			if (ss->inst[j].conn_id == c->id) {
				sonde__producer_scrape(s, c, ss);
				break;
			}
		}
	}
}

static void finalize(struct svc *s, struct session *ss)
{
	cancel_timer(s, &ss->t_stop);
	cancel_timer(s, &ss->t_duration);
	cancel_timer(s, &ss->t_flush_period);
	cancel_timer(s, &ss->t_clear);
	cancel_timer(s, &ss->t_snapshot);
	for (size_t i = 0; i < ss->ninst; i++)
		if (ss->inst[i].state != DS_STOPPED)
			set_state(s, ss, &ss->inst[i], DS_STOPPED);
	scrape_session(s, ss);
	if (ss->state != SESS_CONFIGURED) {
		sonde__svcpkt_clock_snapshot(s, ss);
		sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_TRACING_DISABLED);
	}
	ss->state = SESS_DISABLED;
	ss->stats_due = true;
	sonde_info("session %llu disabled", (unsigned long long)ss->id);
	cancel_timer(s, &ss->t_file);
	if (ss->fw && !ss->file_done) {
		ss->file_closing = true;
		sonde__session_drain_file(s, ss); /* resolves once the file is complete */
		return;
	}
	resolve_enable(s, ss);
}

static void maybe_finalize(struct svc *s, struct session *ss)
{
	if (ss->state != SESS_STOPPING)
		return;
	for (size_t i = 0; i < ss->ninst; i++)
		if (ss->inst[i].state == DS_STOPPING)
			return;
	finalize(s, ss);
}

static void on_stop_timeout(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss)
		return;
	ss->t_stop = 0;
	sonde_warn("session %llu: data sources did not acknowledge the stop in time",
		   (unsigned long long)id);
	finalize(s, ss);
}

void sonde__session_disable(struct svc *s, struct session *ss, bool immediately)
{
	if (ss->state == SESS_DISABLED)
		return;
	if (ss->state == SESS_STOPPING && !immediately)
		return;
	if (ss->state == SESS_STARTED || ss->state == SESS_CONFIGURED) {
		bool was_started = ss->state == SESS_STARTED;
		cancel_timer(s, &ss->t_duration);
		cancel_timer(s, &ss->t_flush_period);
		cancel_timer(s, &ss->t_clear);
		for (size_t i = 0; i < ss->ninst; i++)
			stop_instance(s, ss, &ss->inst[i]);
		if (!was_started) { /* CONFIGURED: no ack wait (§3.3) */
			finalize(s, ss);
			return;
		}
		ss->state = SESS_STOPPING;
	}
	if (immediately) {
		finalize(s, ss);
		return;
	}
	maybe_finalize(s, ss);
	if (ss->state == SESS_STOPPING && !ss->t_stop)
		ss->t_stop = sonde__loop_timer_add(&s->loop, ss->stop_timeout_ms, on_stop_timeout, ss->id);
}

static void remove_instance(struct session *ss, size_t i)
{
	sonde__free(ss->inst[i].cfg);
	sonde__free(ss->inst[i].ds_name);
	ss->inst[i] = ss->inst[--ss->ninst];
}

void sonde__session_remove_ds(struct svc *s, struct conn *c, const char *name)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		for (size_t j = 0; j < ss->ninst;) {
			struct instance *in = &ss->inst[j];
			if (in->conn_id != c->id || (name && strcmp(in->ds_name, name))) {
				j++;
				continue;
			}
			stop_instance(s, ss, in);
			if (in->state != DS_STOPPED)
				set_state(s, ss, in, DS_STOPPED);
			remove_instance(ss, j);
		}
		maybe_finalize(s, ss);
		check_all_started(s, ss);
	}
}

/* ------------------------------------------------------------------ flush */

static void complete_flush(struct svc *s, size_t idx, bool ok)
{
	struct flush fl = s->flushes[idx];
	struct session *ss = sonde__svc_session(s, fl.session_id);

	s->flushes[idx] = s->flushes[--s->nflushes];
	cancel_timer(s, &fl.timer);
	sonde__free(fl.conns);
	if (ss) {
		scrape_session(s, ss); /* §2.6: in both cases */
		sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_ALL_DATA_SOURCES_FLUSHED);
	}
	if (fl.consumer_req) {
		struct conn *c = sonde__svc_conn(s, fl.consumer_conn);
		if (c) {
			sonde__svc_send_reply(c, fl.consumer_req, ok, false, NULL, 0, -1);
			sonde__svc_conn_update_events(s, c);
		}
	}
	if (!ok)
		sonde_info("flush %llu timed out", (unsigned long long)fl.id);
	if (ss && fl.then_disable)
		sonde__session_disable(s, ss, false);
	sonde__clone_flush_done(s, fl.id);
}

static void on_flush_timeout(void *ctx, uint64_t id)
{
	struct svc *s = ctx;

	for (size_t i = 0; i < s->nflushes; i++) {
		if (s->flushes[i].id == id) {
			s->flushes[i].timer = 0;
			complete_flush(s, i, false);
			return;
		}
	}
}

static bool add_conn(struct flush *fl, uint64_t id)
{
	for (size_t i = 0; i < fl->nconns; i++)
		if (fl->conns[i] == id)
			return true;
	uint64_t *v = sonde__realloc(fl->conns, (fl->nconns + 1) * sizeof(*v));
	if (!v)
		return false;
	fl->conns = v;
	v[fl->nconns++] = id;
	return true;
}

static void send_flush(struct svc *s, struct session *ss, struct conn *c, uint64_t id)
{
	struct buf b = BUF_INIT;
	size_t m = sonde__pb_begin(&b, PF_ASYNC_CMD_FLUSH);

	for (size_t i = 0; i < ss->ninst; i++)
		if (ss->inst[i].conn_id == c->id && ss->inst[i].state != DS_STOPPED)
			sonde__pb_put_varint(&b, PF_FLUSH_CMD_DATA_SOURCE_IDS, ss->inst[i].id);
	sonde__pb_put_varint(&b, PF_FLUSH_CMD_REQUEST_ID, id);
	sonde__pb_end(&b, m);
	sonde__producer_send_cmd(s, c, &b, false);
	sonde__buf_free(&b);
}

uint64_t sonde__session_flush(struct svc *s, struct session *ss, uint32_t timeout_ms,
		       uint64_t consumer_conn, uint64_t consumer_req, bool then_disable)
{
	struct flush fl = {.id = s->next_flush_id++,
			   .session_id = ss->id,
			   .consumer_conn = consumer_conn,
			   .consumer_req = consumer_req,
			   .then_disable = then_disable};
	struct flush *v = sonde__realloc(s->flushes, (s->nflushes + 1) * sizeof(*v));

	if (!v)
		return 0;
	s->flushes = v;
	for (size_t i = 0; i < ss->ninst; i++) {
		struct instance *in = &ss->inst[i];
		struct conn *c = sonde__svc_conn(s, in->conn_id);
		if (!c || in->state == DS_STOPPED || in->no_flush)
			continue;
		bool known = false;
		for (size_t k = 0; k < fl.nconns; k++)
			known = known || fl.conns[k] == c->id;
		if (!known && add_conn(&fl, c->id))
			send_flush(s, ss, c, fl.id);
	}
	if (!timeout_ms)
		timeout_ms = ss->flush_timeout_ms;
	s->flushes[s->nflushes++] = fl;
	if (!fl.nconns) {
		complete_flush(s, s->nflushes - 1, true);
		return fl.id;
	}
	s->flushes[s->nflushes - 1].timer =
		sonde__loop_timer_add(&s->loop, timeout_ms, on_flush_timeout, fl.id);
	return fl.id;
}

/* Acks are cumulative: an ack for id X covers every pending flush <= X (§10.8). */
void sonde__session_flush_ack(struct svc *s, struct conn *c, uint64_t flush_id)
{
	for (size_t i = 0; i < s->nflushes;) {
		struct flush *fl = &s->flushes[i];
		bool removed = false;
		for (size_t k = 0; fl->id <= flush_id && k < fl->nconns; k++) {
			if (fl->conns[k] == c->id) {
				fl->conns[k] = fl->conns[--fl->nconns];
				removed = true;
				break;
			}
		}
		if (removed && fl->nconns == 0) {
			complete_flush(s, i, true);
			i = 0; /* the array changed */
			continue;
		}
		i++;
	}
}

/* ------------------------------------------------------------------ producer events */

void sonde__session_ds_started(struct svc *s, struct conn *c, uint64_t inst_id)
{
	struct session *ss;
	struct instance *in = session_instance(s, inst_id, &ss);

	if (!in || in->conn_id != c->id || in->state != DS_STARTING) {
		sonde_debug("ignoring start notification for instance %llu",
			    (unsigned long long)inst_id);
		return;
	}
	set_state(s, ss, in, DS_STARTED);
}

void sonde__session_ds_stopped(struct svc *s, struct conn *c, uint64_t inst_id)
{
	struct session *ss;
	struct instance *in = session_instance(s, inst_id, &ss);

	if (!in || in->conn_id != c->id || in->state != DS_STOPPING) {
		sonde_debug("ignoring stop notification for instance %llu",
			    (unsigned long long)inst_id);
		return;
	}
	set_state(s, ss, in, DS_STOPPED);
	maybe_finalize(s, ss);
}

void sonde__session_producer_gone(struct svc *s, struct conn *c)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		for (size_t j = 0; j < ss->ninst;) {
			if (ss->inst[j].conn_id == c->id) {
				if (ss->inst[j].state != DS_STOPPED)
					set_state(s, ss, &ss->inst[j], DS_STOPPED);
				remove_instance(ss, j);
			} else {
				j++;
			}
		}
		maybe_finalize(s, ss);
		check_all_started(s, ss);
	}
	/* a producer that is gone can no longer ack: treat it as having acked */
	for (size_t i = 0; i < s->nflushes;) {
		struct flush *fl = &s->flushes[i];
		for (size_t k = 0; k < fl->nconns; k++)
			if (fl->conns[k] == c->id)
				fl->conns[k] = fl->conns[--fl->nconns];
		if (fl->nconns == 0) {
			complete_flush(s, i, true);
			i = 0;
			continue;
		}
		i++;
	}
}

/* ------------------------------------------------------------------ periodic tasks */

static void on_duration(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss)
		return;
	ss->t_duration = 0;
	sonde__session_flush(s, ss, 0, 0, 0, true); /* flush first, then disable */
}

static void on_flush_period(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state != SESS_STARTED)
		return;
	ss->t_flush_period = sonde__loop_timer_add(&s->loop, ss->flush_period_ms, on_flush_period, id);
	sonde__session_flush(s, ss, 0, 0, 0, false);
}

static void on_clear_period(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state != SESS_STARTED)
		return;
	ss->t_clear = sonde__loop_timer_add(&s->loop, ss->clear_period_ms, on_clear_period, id);
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		struct buf b = BUF_INIT;
		size_t m = sonde__pb_begin(&b, PF_ASYNC_CMD_CLEAR_INCREMENTAL_STATE);
		size_t n = 0;
		for (size_t j = 0; j < ss->ninst; j++) {
			struct instance *in = &ss->inst[j];
			if (in->conn_id == c->id && in->handles_incr && in->state == DS_STARTED) {
				sonde__pb_put_varint(&b, PF_CLEAR_INCR_CMD_DATA_SOURCE_IDS, in->id);
				n++;
			}
		}
		sonde__pb_end(&b, m);
		if (n)
			sonde__producer_send_cmd(s, c, &b, false);
		sonde__buf_free(&b);
	}
}

static void on_snapshot(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state != SESS_STARTED)
		return;
	ss->t_snapshot = sonde__loop_timer_add(&s->loop, ss->snapshot_interval_ms, on_snapshot, id);
	ss->sync_due = ss->stats_due = true;
	sonde__svcpkt_clock_snapshot_if_drifted(s, ss);
}

static void on_file_period(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state == SESS_DISABLED)
		return;
	ss->t_file = sonde__loop_timer_add(&s->loop, ss->file_write_period_ms, on_file_period, id);
	sonde__session_drain_file(s, ss);
}

void sonde__session_start(struct svc *s, struct session *ss)
{
	if (ss->state != SESS_CONFIGURED)
		return;
	ss->state = SESS_STARTED;
	ss->start_ns = sonde__svc_boottime_ns();
	ss->sync_due = ss->stats_due = true;
	sonde__svcpkt_clock_snapshot(s, ss);
	sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_TRACING_STARTED);
	if (ss->duration_ms)
		ss->t_duration = sonde__loop_timer_add(&s->loop, ss->duration_ms, on_duration, ss->id);
	if (ss->flush_period_ms)
		ss->t_flush_period =
			sonde__loop_timer_add(&s->loop, ss->flush_period_ms, on_flush_period, ss->id);
	if (ss->clear_period_ms)
		ss->t_clear =
			sonde__loop_timer_add(&s->loop, ss->clear_period_ms, on_clear_period, ss->id);
	ss->t_snapshot = sonde__loop_timer_add(&s->loop, ss->snapshot_interval_ms, on_snapshot, ss->id);
	if (ss->write_into_file)
		ss->t_file =
			sonde__loop_timer_add(&s->loop, ss->file_write_period_ms, on_file_period, ss->id);
	sonde_info("session %llu started with %zu data source instances",
		   (unsigned long long)ss->id, ss->ninst);
	for (size_t i = 0; i < ss->ninst; i++)
		start_instance(s, ss, &ss->inst[i]);
	check_all_started(s, ss);
}

/* ------------------------------------------------------------------ write_into_file */

/* The file is written by its writer thread (fwriter.h): the loop moves packets from the
 * buffers into fbuf, and fbuf into the writer's bounded queue. While the queue is full
 * the packets stay in the trace buffers (which then wrap or discard by their own policy,
 * as when the consumer of a ReadBuffers does not read), and a drain is retried soon. A
 * file that takes nothing for SVC_FILE_STALL_MS ends its session with an error; the other
 * sessions never wait for it. */

static void on_pump(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss)
		return;
	ss->t_pump = 0;
	sonde__session_drain_file(s, ss);
}

/* fbuf into the writer's queue; fbuf stays as it is while the queue has no room. */
static int file_push(struct session *ss)
{
	int rc;

	if (!ss->fbuf.len)
		return 0;
	rc = sonde__fwriter_push(ss->fw, ss->fbuf.data, ss->fbuf.len);
	if (rc == -ENOBUFS)
		return 0;
	if (rc == 0)
		sonde__buf_reset(&ss->fbuf);
	return rc;
}

struct file_sink {
	struct session *ss;
	bool full, broken, backlog;
};

/* Writes one Trace.packet record: 0x0A, varint length, the packet's slices. */
static int file_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct file_sink *fs = ctx;
	struct session *ss = fs->ss;
	uint8_t hdr[1 + PB_VARINT_MAX];
	size_t h;

	hdr[0] = (PF_TRACE_PACKET << 3) | PB_LEN;
	h = 1 + sonde__pb_varint_encode(hdr + 1, total);
	if (ss->max_file_size && ss->file_bytes + h + total > ss->max_file_size) {
		fs->full = true;
		return 1;
	}
	sonde__buf_append(&ss->fbuf, hdr, h);
	for (size_t i = 0; i < n; i++)
		sonde__buf_append(&ss->fbuf, iov[i].iov_base, iov[i].iov_len);
	ss->file_bytes += h + total;
	if (ss->fbuf.len >= FILE_FLUSH_BYTES && file_push(ss) < 0)
		fs->broken = true;
	/* this packet is taken; the next ones wait in the buffers for room */
	if (!sonde__fwriter_room(ss->fw, ss->fbuf.len))
		fs->backlog = true;
	return fs->full || fs->broken || fs->backlog;
}

int sonde__session_read_buffers(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	for (size_t i = 0; i < ss->nbufs; i++)
		if (sonde__tbuf_read(ss->bufs[i], fn, ctx, &ss->next_seq_id, &ss->invalid_packets))
			return 1;
	return 0;
}

/* Hands a writer over to the retired list; cancelled, it is stopped now (and freed here
 * if its thread ended at once). */
static void retire(struct svc *s, struct fwriter *w, bool cancel)
{
	if (cancel) {
		sonde__fwriter_cancel(w);
		if (sonde__fwriter_reap(w))
			return;
	}
	if (s->nretired == s->retired_cap) {
		size_t cap = s->retired_cap ? 2 * s->retired_cap : 8;
		struct svc_retired *v = sonde__realloc(s->retired, cap * sizeof(*v));
		if (!v) {
			/* the one blocking way out left, bounded */
			if (!sonde__fwriter_free(w, 100))
				sonde_error("a file writer could not be stopped; it is left running");
			return;
		}
		s->retired = v;
		s->retired_cap = cap;
	}
	if (!cancel)
		for (size_t i = 0, n = 0; i < s->nretired; i++)
			if (!s->retired[i].cancelled && ++n >= SVC_MAX_DRAINING) {
				sonde__fwriter_cancel(w);
				cancel = true;
				break;
			}
	s->retired[s->nretired++] = (struct svc_retired){w, cancel};
}

/* The file failed or stopped draining: the writer goes (a write in progress is
 * abandoned), the session ends with msg as its error. */
static void file_fail(struct svc *s, struct session *ss, const char *msg)
{
	sonde_warn("session %llu: %s", (unsigned long long)ss->id, msg);
	if (!ss->error)
		ss->error = sonde__strdup(msg);
	retire(s, ss->fw, true);
	ss->fw = NULL;
	ss->file_done = true;
	sonde__buf_reset(&ss->fbuf);
	if (ss->state != SESS_DISABLED)
		sonde__session_disable(s, ss, false);
	else
		resolve_enable(s, ss);
}

/* Once DISABLED and everything is queued: fsync (and make a created file readable), then
 * the EnableTracing reply. */
static void file_close_step(struct svc *s, struct session *ss, bool backlog)
{
	if (backlog || ss->fbuf.len)
		return;
	sonde__fwriter_finish(ss->fw, ss->out_created ? 0644 : 0);
	if (!sonde__fwriter_finished(ss->fw))
		return;
	ss->file_done = true;
	resolve_enable(s, ss);
}

void sonde__session_drain_file(struct svc *s, struct session *ss)
{
	struct file_sink fs = {ss, false, false, false};

	if (!ss->fw || ss->file_done)
		return;
	if (sonde__fwriter_stalled_ns(ss->fw, sonde__loop_now_ns()) > SVC_FILE_STALL_MS * 1000000ull) {
		file_fail(s, ss, "the output file accepted nothing for 10 s: session ended");
		return;
	}
	if (file_push(ss) < 0)
		fs.broken = true;
	fs.backlog = !sonde__fwriter_room(ss->fw, ss->fbuf.len);
	if (!fs.broken && !fs.backlog && !ss->file_full && !sonde__trigger_waiting(ss)) {
		sonde__svcpkt_emit_head(s, ss, file_packet, &fs);
		if (!fs.full && !fs.broken && !fs.backlog)
			sonde__session_read_buffers(s, ss, file_packet, &fs);
		if (!fs.full && !fs.broken && !fs.backlog)
			sonde__svcpkt_emit_tail(s, ss, file_packet, &fs);
	}
	if (!fs.broken && file_push(ss) < 0)
		fs.broken = true;
	if (fs.broken || sonde__fwriter_error(ss->fw)) {
		file_fail(s, ss, "writing the output file failed: session ended");
		return;
	}
	if (fs.full && !ss->file_full) {
		/* max_file_size_bytes reached: stop writing, end the session */
		ss->file_full = true;
		if (ss->state == SESS_STARTED)
			sonde__session_disable(s, ss, false);
	}
	if (ss->file_closing && !ss->file_done)
		file_close_step(s, ss, fs.backlog);
	if ((fs.backlog || (ss->file_closing && !ss->file_done)) && !ss->t_pump)
		ss->t_pump = sonde__loop_timer_add(&s->loop, 20, on_pump, ss->id);
}

/* A freed session's writer finishes its queue on its own; reaped when done or stalled.
 * Beyond SVC_MAX_DRAINING at once (a consumer could make many), it is stopped at once. */
static void file_release(struct svc *s, struct session *ss)
{
	if (!ss->fw)
		return;
	file_push(ss);
	sonde__fwriter_finish(ss->fw, ss->out_created ? 0644 : 0);
	retire(s, ss->fw, ss->file_done || sonde__fwriter_finished(ss->fw));
	ss->fw = NULL;
}

void sonde__session_reap_writers(struct svc *s, int wait_ms)
{
	uint64_t now = sonde__loop_now_ns(), end = now + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000;

	for (size_t i = 0; i < s->nretired;) {
		struct svc_retired *r = &s->retired[i];
		bool gone;
		if (wait_ms > 0) {
			/* shutdown: the wait is shared by all of them */
			now = sonde__loop_now_ns();
			sonde__fwriter_free(r->fw, end > now ? (int)((end - now) / 1000000) : 0);
			gone = true; /* freed, or left running to the process's exit */
		} else {
			if (!r->cancelled && (sonde__fwriter_finished(r->fw) ||
					      sonde__fwriter_stalled_ns(r->fw, now) >
						      SVC_FILE_STALL_MS * 1000000ull)) {
				sonde__fwriter_cancel(r->fw);
				r->cancelled = true;
			}
			gone = r->cancelled && sonde__fwriter_reap(r->fw);
		}
		if (gone)
			s->retired[i] = s->retired[--s->nretired];
		else
			i++;
	}
	if (wait_ms > 0) {
		sonde__free(s->retired);
		s->retired = NULL;
		s->retired_cap = 0;
	}
}

/* ------------------------------------------------------------------ enable / free */

/* Takes fd (the consumer's) on success; with a path, creates the file. */
static int open_output(struct session *ss, const struct conn *c, const char *path, int fd)
{
	bool created = false;

	if ((fd >= 0) == (path != NULL && path[0]))
		return -EINVAL;
	if (fd < 0) {
		fd = sonde__sec_create_output(c, path);
		if (fd < 0)
			return fd;
		created = true; /* 0600 while written, 0644 once DISABLED */
	}
	ss->fw = sonde__fwriter_new(fd, SVC_FILE_QUEUE_BYTES);
	if (!ss->fw) {
		if (created)
			close(fd);
		return -ENOMEM;
	}
	ss->out_created = created;
	return 0;
}

static int alloc_buffers(struct svc *s, struct session *ss, const uint64_t *cfg, size_t n)
{
	ss->buf_ids = sonde__calloc(n ? n : 1, sizeof(*ss->buf_ids));
	ss->bufs = sonde__calloc(n ? n : 1, sizeof(*ss->bufs));
	if (!ss->buf_ids || !ss->bufs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint16_t id;
		struct tbuf *tb = sonde__calloc(1, sizeof(*tb));
		size_t kb = cfg[2 * i] ? cfg[2 * i] : 1024;
		if (!tb || kb > (1u << 22) || sonde__tbuf_init(tb, kb * 1024, cfg[2 * i + 1]) < 0) {
			sonde__free(tb);
			return -ENOMEM;
		}
		if (sonde__bufid_alloc(s, tb, &id) < 0) {
			sonde__tbuf_free(tb);
			sonde__free(tb);
			return -ENOMEM;
		}
		ss->buf_ids[i] = id;
		ss->bufs[i] = tb;
		ss->nbufs++;
	}
	return 0;
}

static struct session *new_session(struct svc *s, struct conn *c, const uint8_t *cfg, size_t len)
{
	struct session *ss = sonde__calloc(1, sizeof(*ss));

	if (!ss)
		return NULL;
	ss->config = sonde__malloc(len ? len : 1);
	if (!ss->config) {
		sonde__free(ss);
		return NULL;
	}
	memcpy(ss->config, cfg, len);
	ss->config_len = len;
	ss->id = s->next_session_id++;
	ss->conn_id = c->id;
	ss->consumer_uid = (int32_t)c->ch.peer_uid;
	struct perfauth_consumer who = {.uid = c->ch.peer_uid,
					.gid = c->peer_gid,
					.pid = c->ch.peer_pid,
					.caps_known = c->caps_known,
					.cap_eff = c->cap_eff};
	sonde__perfds_note_session(s, ss->id, &who);
	ss->next_seq_id = 2; /* 1 is the service's own sequence */
	return ss;
}

static void apply_defaults(struct session *ss)
{
	if (!ss->flush_timeout_ms)
		ss->flush_timeout_ms = SVC_DEFAULT_TIMEOUT_MS;
	if (!ss->stop_timeout_ms)
		ss->stop_timeout_ms = SVC_DEFAULT_TIMEOUT_MS;
	if (!ss->snapshot_interval_ms)
		ss->snapshot_interval_ms = 10000;
	if (!ss->file_write_period_ms)
		ss->file_write_period_ms = 5000;
	if (ss->file_write_period_ms < 100)
		ss->file_write_period_ms = 100;
}

/* Config errors are not IPC failures: they come back as disabled + error (§3.1). */
static int reply_error(struct req *r, const char *msg)
{
	struct buf b = BUF_INIT;
	int rc;

	sonde_info("EnableTracing refused: %s", msg);
	sonde__pb_put_bool(&b, PF_ENABLE_TRACING_RESP_DISABLED, true);
	sonde__pb_put_string(&b, PF_ENABLE_TRACING_RESP_ERROR, msg);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

static const char *setup_session(struct svc *s, struct session *ss, struct req *r)
{
	uint64_t *bufcfg = NULL;
	size_t nbufs = 0;
	char *path = NULL;
	const char *err = sonde__sec_apply_lockdown(s, r->c, ss->config, ss->config_len);

	if (!err)
		err = parse_config(ss, &bufcfg, &nbufs, &path);
	if (!err)
		err = check_limits(s, ss);
	if (!err)
		err = sonde__sec_check_session(s, ss, bufcfg, nbufs);
	if (!err && alloc_buffers(s, ss, bufcfg, nbufs) < 0)
		err = "cannot allocate the trace buffers";
	if (!err && ss->write_into_file) {
		int rc = open_output(ss, r->c, path, r->fd);
		if (rc == -EINVAL && !(path && path[0] && path[0] != '/'))
			err = "write_into_file needs exactly one of an fd or output_path";
		else if (rc == -EINVAL)
			err = "output_path must be an absolute path";
		else if (rc == -ENOMEM)
			err = "cannot start the writer of the output file";
		else if (rc == -EEXIST || rc == -ELOOP)
			err = "output_path already exists (it is never overwritten nor followed "
			      "as a symlink)";
		else if (rc < 0)
			err = "cannot create output_path";
		else if (r->fd >= 0)
			r->fd = -1; /* the session owns it now */
	}
	sonde__free(bufcfg);
	sonde__free(path);
	apply_defaults(ss);
	return err;
}

int sonde__session_enable(struct svc *s, struct req *r, const uint8_t *cfg, size_t len, int fd)
{
	struct conn *c = r->c;
	struct session *ss, **v;
	const char *err;

	if (sonde__svc_session(s, c->k.session_id))
		return reply_error(r, "this consumer already has a tracing session");
	ss = new_session(s, c, cfg, len);
	v = sonde__realloc(s->sessions, (s->nsessions + 1) * sizeof(*v));
	if (v)
		s->sessions = v; /* the old array is gone even when the session is not made */
	if (!ss || !v) {
		if (ss)
			sonde__perfds_forget_session(s, ss->id);
		sonde__free(ss ? ss->config : NULL);
		sonde__free(ss);
		return -ENOMEM;
	}
	err = setup_session(s, ss, r);
	if (err) {
		ss->state = SESS_DISABLED;	  /* it never ran: nothing to stop */
		s->sessions[s->nsessions++] = ss; /* so that sonde__session_free finds it */
		sonde__session_free(s, ss);
		return reply_error(r, err);
	}
	s->sessions[s->nsessions++] = ss;
	c->k.session_id = ss->id;
	ss->enable_req = r->id;
	ss->enable_pending = !r->drop_reply;
	sonde_info("session %llu enabled: %zu buffers, %zu data sources",
		   (unsigned long long)ss->id, ss->nbufs, ss->nds);
	for (size_t i = 0; i < ss->nds; i++)
		for (size_t j = 0; j < s->nds; j++) {
			struct conn *pc = sonde__svc_conn(s, s->ds[j]->conn_id);
			if (pc && ds_matches(&ss->ds[i], pc, s->ds[j]))
				create_instance(s, ss, &ss->ds[i], pc, s->ds[j]);
		}
	sonde__trigger_session_enabled(s, ss);
	if (!ss->deferred_start && !sonde__trigger_defers_start(ss))
		sonde__session_start(s, ss);
	return 0;
}

static void free_ds_cfgs(struct session *ss)
{
	for (size_t i = 0; i < ss->nds; i++) {
		struct ds_cfg *d = &ss->ds[i];
		for (size_t k = 0; k < d->n_name_filter; k++)
			sonde__free(d->name_filter[k]);
		for (size_t k = 0; k < d->n_regex_filter; k++)
			sonde__free(d->regex_filter[k]);
		sonde__free(d->name_filter);
		sonde__free(d->regex_filter);
		sonde__free(d->name);
	}
	sonde__free(ss->ds);
}

void sonde__session_free(struct svc *s, struct session *ss)
{
	sonde__perfds_forget_session(s, ss->id);
	if (ss->state != SESS_DISABLED)
		sonde__session_disable(s, ss, true);
	cancel_timer(s, &ss->t_file);
	cancel_timer(s, &ss->t_pump);
	file_release(s, ss);
	for (size_t i = 0; i < s->nflushes;) {
		if (s->flushes[i].session_id == ss->id) {
			complete_flush(s, i, false);
			i = 0;
		} else {
			i++;
		}
	}
	for (size_t i = 0; i < ss->nbufs; i++) {
		uint16_t id = ss->buf_ids[i];
		for (size_t k = 0; k < s->nconns; k++)
			if (s->conns[k]->is_producer)
				sonde__producer_disallow_buffer(s->conns[k], id);
		sonde__bufid_release(s, id);
		sonde__tbuf_free(ss->bufs[i]);
		sonde__free(ss->bufs[i]);
	}
	for (size_t i = 0; i < s->nsessions; i++)
		if (s->sessions[i] == ss)
			s->sessions[i] = s->sessions[--s->nsessions];
	while (ss->ninst)
		remove_instance(ss, 0);
	free_ds_cfgs(ss);
	sonde__trigger_session_free(s, ss);
	sonde__free(ss->inst);
	sonde__free(ss->buf_ids);
	sonde__free(ss->bufs);
	sonde__free(ss->config);
	sonde__free(ss->unique_name);
	sonde__free(ss->detach_key);
	sonde__free(ss->error);
	sonde__buf_free(&ss->fbuf);
	sonde__buf_free(&ss->svc_pkts);
	sonde__buf_free(&ss->svc_clocks);
	sonde__free(ss);
}

/* ------------------------------------------------------------------ for reconfig.c */

int sonde__session_parse_data_sources(struct session *ss)
{
	struct pb_reader r = pb_reader_init(ss->config, ss->config_len);
	struct pb_field f;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0)
		if (f.num == PF_TRACE_CONFIG_DATA_SOURCES && f.wire == PB_LEN &&
		    parse_ds(ss, &f) < 0)
			return -ENOMEM;
	return rc < 0 ? rc : 0;
}

void sonde__session_free_data_sources(struct session *ss)
{
	free_ds_cfgs(ss);
	ss->ds = NULL;
	ss->nds = 0;
}

bool sonde__session_ds_matches(const struct ds_cfg *d, const struct conn *c, const struct ds_reg *reg)
{
	return ds_matches(d, c, reg);
}

void sonde__session_add_instance(struct svc *s, struct session *ss, const struct ds_cfg *d, struct conn *c,
			  const struct ds_reg *reg)
{
	create_instance(s, ss, d, c, reg);
}
