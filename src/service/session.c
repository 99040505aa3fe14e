/* Tracing sessions (perfetto-wire.md §3.3): TraceConfig, buffers, data-source instances
 * and their commands, start/stop with acks and timeouts, periodic tasks and
 * write_into_file. Flushes are flush.c's, the TraceConfig parser tcfg.c's. */
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
#include "service/flush.h"
#include "service/outfile.h"
#include "service/internal.h"
#include "service/session.h"
#include "service/tcfg.h"
#include "proc/perfauth.h"

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

/* Parses ss->config (tcfg.h) and its trigger_config (trigger.c). An error message for
 * the consumer, or NULL. */
static const char *parse_config(struct session *ss)
{
	const char *err = sonde__tcfg_parse(ss->config, ss->config_len, &ss->cfg);
	struct pb_reader r = pb_reader_init(ss->config, ss->config_len);
	struct pb_field f;

	while (!err && sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_TRACE_CONFIG_TRIGGER_CONFIG && f.wire == PB_LEN)
			err = sonde__trigger_parse(ss, &f);
	if (!err)
		err = sonde__trigger_validate(ss);
	if (!err)
		err = sonde__tcfg_validate(&ss->cfg, SVC_MAX_BUFFERS_PER_SESSION);
	return err;
}

static const char *check_limits(struct svc *s, const struct session *ss)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		const struct session *o = s->sessions[i];
		if (ss->cfg.unique_name && o->cfg.unique_name && !strcmp(ss->cfg.unique_name, o->cfg.unique_name))
			return "a session with this unique_session_name is already running";
	}
	return NULL; /* session caps: sonde__sec_check_session */
}

/* ------------------------------------------------------------------ instances */

/* machine_name_filter, as Perfetto's: the producer's machine name is one of the names, or
 * "host" stands for the host's producers */
static bool machine_matches(struct svc *s, const struct ds_cfg *d, const struct conn *c)
{
	const char *name = sonde__machine_name_of(s, c);

	for (size_t i = 0; i < d->n_machine_filter; i++)
		if (!strcmp(d->machine_filter[i], name) ||
		    (!c->machine_id && !strcmp(d->machine_filter[i], "host")))
			return true;
	return d->n_machine_filter == 0;
}

static bool ds_matches(struct svc *s, const struct ds_cfg *d, const struct conn *c,
		       const struct ds_reg *reg)
{
	if (!d->name || strcmp(d->name, reg->name))
		return false;
	if (!machine_matches(s, d, c)) {
		sonde_debug("data source %s not started on producer \"%s\": machine \"%s\" not in "
			    "its machine_name_filter",
			    d->name, c->p.name ? c->p.name : "", sonde__machine_name_of(s, c));
		return false;
	}
	if (!d->n_name_filter && !d->n_regex_filter)
		return true;
	for (size_t i = 0; i < d->n_name_filter; i++)
		if (!strcmp(d->name_filter[i], c->p.name))
			return true;
	for (size_t i = 0; i < d->n_regex_filter; i++)
		if (d->regex_rx[i] && regexec(d->regex_rx[i], c->p.name, 0, NULL, 0) == 0)
			return true;
	return false;
}

/* The consumer's fields of its DataSourceConfig, byte for byte, except sonded's own
 * sonded_consumer, which only the service may set: a consumer putting it there is not
 * believed. A malformed tail is dropped (no producer could parse it either). */
static void put_consumer_fields(struct buf *b, const uint8_t *raw, size_t len)
{
	struct pb_reader r = pb_reader_init(raw, len);
	struct pb_field f;
	const uint8_t *at = r.p;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_DS_CONFIG_SONDED_CONSUMER)
			sonde__buf_append(b, at, (size_t)(r.p - at));
		at = r.p;
	}
}

/* DataSourceConfig.sonded_consumer: the consumer's credentials as the service knows them
 * (docs/service.md, "sonded and its probes"). */
static void put_sonded_consumer(struct buf *b, const struct perfauth_consumer *who)
{
	size_t m = sonde__pb_begin(b, PF_DS_CONFIG_SONDED_CONSUMER);

	sonde__pb_put_varint(b, PF_SONDED_CONSUMER_UID, who->uid);
	sonde__pb_put_varint(b, PF_SONDED_CONSUMER_GID, who->gid);
	sonde__pb_put_varint(b, PF_SONDED_CONSUMER_PID, (uint64_t)who->pid);
	if (who->pid_start)
		sonde__pb_put_varint(b, PF_SONDED_CONSUMER_PID_START, who->pid_start);
	if (who->caps_known)
		sonde__pb_put_varint(b, PF_SONDED_CONSUMER_CAP_EFF, who->cap_eff);
	sonde__pb_end(b, m);
}

/* The consumer's DataSourceConfig with the service-owned fields appended (last value
 * wins, §5); for sonded's own probes (producer c) also the consumer's credentials. */
static uint8_t *rewrite_ds_config(const struct session *ss, const struct ds_cfg *d,
				  const struct conn *c, uint16_t buf_id, size_t *len)
{
	struct buf b = BUF_INIT;

	put_consumer_fields(&b, d->raw, d->raw_len);
	if (c->trusted_probes)
		put_sonded_consumer(&b, &ss->consumer);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TARGET_BUFFER, buf_id);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TRACE_DURATION_MS, ss->cfg.duration_ms);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_TRACING_SESSION_ID, ss->id);
	if (ss->cfg.extra_guardrails)
		sonde__pb_put_bool(&b, PF_DS_CONFIG_ENABLE_EXTRA_GUARDRAILS, true);
	sonde__pb_put_varint(&b, PF_DS_CONFIG_STOP_TIMEOUT_MS, ss->cfg.stop_timeout_ms);
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
	in->cfg = rewrite_ds_config(ss, d, c, in->buf_id, &in->cfg_len);
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
		for (size_t j = 0; j < ss->cfg.nds; j++)
			if (ds_matches(s, &ss->cfg.ds[j], c, d))
				create_instance(s, ss, &ss->cfg.ds[j], c, d);
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

void sonde__session_scrape(struct svc *s, struct session *ss)
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
	sonde__session_scrape(s, ss);
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
		ss->t_stop = sonde__loop_timer_add(&s->loop, ss->cfg.stop_timeout_ms, on_stop_timeout, ss->id);
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

/* sonded's own probes ended (killed, crashed, or their channel closed): they are started
 * again and their data sources set up anew in the running sessions, but what happened
 * in between is not recorded. Each session that loses an instance is told so in its
 * trace, under the data source's name, rather than left with a silent gap. */
void sonde__session_probes_gone(struct svc *s, const struct conn *c)
{
	char msg[320];

	snprintf(msg, sizeof(msg),
		 "sonde probes (pid %d) ended: this data source stops here, and starts again "
		 "once sonded has restarted them; nothing is recorded in between",
		 (int)c->ch.peer_pid);
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		for (size_t j = 0; j < ss->ninst; j++)
			if (ss->inst[j].conn_id == c->id && ss->state == SESS_STARTED &&
			    ss->inst[j].state != DS_STOPPED)
				sonde__svcpkt_log(s, ss, ss->inst[j].ds_name, 5, msg);
	}
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
	sonde__flush_producer_gone(s, c);
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
	ss->t_flush_period = sonde__loop_timer_add(&s->loop, ss->cfg.flush_period_ms, on_flush_period, id);
	sonde__session_flush(s, ss, 0, 0, 0, false);
}

static void on_clear_period(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state != SESS_STARTED)
		return;
	ss->t_clear = sonde__loop_timer_add(&s->loop, ss->cfg.clear_period_ms, on_clear_period, id);
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
	ss->t_snapshot = sonde__loop_timer_add(&s->loop, ss->cfg.snapshot_interval_ms, on_snapshot, id);
	ss->sync_due = ss->stats_due = true;
	sonde__svcpkt_clock_snapshot_if_drifted(s, ss);
}

static void on_file_period(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss || ss->state == SESS_DISABLED)
		return;
	ss->t_file = sonde__loop_timer_add(&s->loop, ss->cfg.file_write_period_ms, on_file_period, id);
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
	if (ss->cfg.duration_ms)
		ss->t_duration = sonde__loop_timer_add(&s->loop, ss->cfg.duration_ms, on_duration, ss->id);
	if (ss->cfg.flush_period_ms)
		ss->t_flush_period =
			sonde__loop_timer_add(&s->loop, ss->cfg.flush_period_ms, on_flush_period, ss->id);
	if (ss->cfg.clear_period_ms)
		ss->t_clear =
			sonde__loop_timer_add(&s->loop, ss->cfg.clear_period_ms, on_clear_period, ss->id);
	ss->t_snapshot = sonde__loop_timer_add(&s->loop, ss->cfg.snapshot_interval_ms, on_snapshot, ss->id);
	if (ss->cfg.write_into_file)
		ss->t_file =
			sonde__loop_timer_add(&s->loop, ss->cfg.file_write_period_ms, on_file_period, ss->id);
	sonde_info("session %llu started with %zu data source instances",
		   (unsigned long long)ss->id, ss->ninst);
	for (size_t i = 0; i < ss->ninst; i++)
		start_instance(s, ss, &ss->inst[i]);
	check_all_started(s, ss);
}

/* ------------------------------------------------------------------ reading */

int sonde__session_read_buffers(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	for (size_t i = 0; i < ss->nbufs; i++)
		if (sonde__tbuf_read(ss->bufs[i], fn, ctx, &ss->next_seq_id, &ss->invalid_packets))
			return 1;
	return 0;
}

/* ------------------------------------------------------------------ enable / free */

int sonde__session_add_buffers(struct svc *s, struct session *ss, size_t n,
			int (*init)(struct tbuf *tb, size_t i, void *ctx), void *ctx)
{
	ss->buf_ids = sonde__calloc(n ? n : 1, sizeof(*ss->buf_ids));
	ss->bufs = sonde__calloc(n ? n : 1, sizeof(*ss->bufs));
	if (!ss->buf_ids || !ss->bufs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint16_t id;
		struct tbuf *tb = sonde__calloc(1, sizeof(*tb));
		if (!tb || init(tb, i, ctx) < 0) {
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

/* A new buffer from the config's (size_kb, discard) pairs. */
static int init_configured(struct tbuf *tb, size_t i, void *ctx)
{
	const uint64_t *cfg = ctx;
	size_t kb = cfg[2 * i] ? cfg[2 * i] : 1024;

	return kb > (1u << 22) ? -ENOMEM : sonde__tbuf_init(tb, kb * 1024, cfg[2 * i + 1]);
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
	ss->consumer = (struct perfauth_consumer){.uid = c->ch.peer_uid,
						  .gid = c->peer_gid,
						  .pid = c->ch.peer_pid,
						  .caps_known = c->caps_known,
						  .cap_eff = c->cap_eff,
						  .pid_start = c->pid_start};
	ss->next_seq_id = 2; /* 1 is the service's own sequence */
	return ss;
}

static void apply_defaults(struct session *ss)
{
	if (!ss->cfg.flush_timeout_ms)
		ss->cfg.flush_timeout_ms = SVC_DEFAULT_TIMEOUT_MS;
	if (ss->cfg.flush_timeout_ms > SVC_MAX_FLUSH_TIMEOUT_MS)
		ss->cfg.flush_timeout_ms = SVC_MAX_FLUSH_TIMEOUT_MS;
	if (ss->cfg.flush_period_ms && ss->cfg.flush_period_ms < SVC_MIN_FLUSH_PERIOD_MS)
		ss->cfg.flush_period_ms = SVC_MIN_FLUSH_PERIOD_MS;
	if (!ss->cfg.stop_timeout_ms)
		ss->cfg.stop_timeout_ms = SVC_DEFAULT_TIMEOUT_MS;
	if (!ss->cfg.snapshot_interval_ms)
		ss->cfg.snapshot_interval_ms = 10000;
	if (!ss->cfg.file_write_period_ms)
		ss->cfg.file_write_period_ms = 5000;
	if (ss->cfg.file_write_period_ms < 100)
		ss->cfg.file_write_period_ms = 100;
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
	const char *path = NULL;
	const char *err = sonde__sec_apply_lockdown(s, r->c, ss->config, ss->config_len);

	if (!err)
		err = parse_config(ss);
	path = ss->cfg.output_path;
	if (!err)
		err = check_limits(s, ss);
	if (!err)
		err = sonde__sec_check_session(s, ss, ss->cfg.bufs, ss->cfg.nbufs);
	if (!err && sonde__session_add_buffers(s, ss, ss->cfg.nbufs, init_configured, ss->cfg.bufs) < 0)
		err = "cannot allocate the trace buffers";
	if (!err && ss->cfg.write_into_file) {
		int rc = sonde__outfile_open(ss, r->c, path, r->fd);
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
		   (unsigned long long)ss->id, ss->nbufs, ss->cfg.nds);
	for (size_t i = 0; i < ss->cfg.nds; i++)
		for (size_t j = 0; j < s->nds; j++) {
			struct conn *pc = sonde__svc_conn(s, s->ds[j]->conn_id);
			if (pc && ds_matches(s, &ss->cfg.ds[i], pc, s->ds[j]))
				create_instance(s, ss, &ss->cfg.ds[i], pc, s->ds[j]);
		}
	sonde__trigger_session_enabled(s, ss);
	if (!ss->cfg.deferred_start && !sonde__trigger_defers_start(ss))
		sonde__session_start(s, ss);
	return 0;
}

void sonde__session_free(struct svc *s, struct session *ss)
{
	if (ss->state != SESS_DISABLED)
		sonde__session_disable(s, ss, true);
	cancel_timer(s, &ss->t_file);
	cancel_timer(s, &ss->t_pump);
	sonde__outfile_release(s, ss);
	sonde__flush_session_gone(s, ss->id);
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
	sonde__tcfg_free(&ss->cfg);
	sonde__trigger_session_free(s, ss);
	sonde__free(ss->inst);
	sonde__free(ss->buf_ids);
	sonde__free(ss->bufs);
	sonde__free(ss->config);
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
	return sonde__tcfg_parse_data_sources(ss->config, ss->config_len, &ss->cfg);
}

void sonde__session_free_data_sources(struct session *ss)
{
	sonde__tcfg_free_data_sources(&ss->cfg);
}

bool sonde__session_ds_matches(struct svc *s, const struct ds_cfg *d, const struct conn *c,
			       const struct ds_reg *reg)
{
	return ds_matches(s, d, c, reg);
}

void sonde__session_add_instance(struct svc *s, struct session *ss, const struct ds_cfg *d, struct conn *c,
			  const struct ds_reg *reg)
{
	create_instance(s, ss, d, c, reg);
}
