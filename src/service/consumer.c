/* ConsumerPort (perfetto-wire.md §3): the methods, ReadBuffers streaming, trace stats,
 * ObserveEvents and service-state queries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/flush.h"
#include "service/internal.h"
#include "service/session.h"

/* §3.2: a new reply starts once sum(slice + 16) + 64 would exceed the IPC buffer. */
enum { SLICE_OVERHEAD = 16, REPLY_OVERHEAD = 64 };

static struct session *own_session(struct svc *s, struct conn *c)
{
	return sonde__svc_session(s, c->k.session_id);
}

/* ------------------------------------------------------------------ ReadBuffers */

static void flush_reply(struct conn *c, bool has_more)
{
	struct consumer *k = &c->k;

	sonde__svc_send_reply(c, k->read_req, true, has_more, k->reply.data, k->reply.len, -1);
	sonde__buf_reset(&k->reply);
	k->reply_est = 0;
}

static size_t varint_len(size_t n)
{
	size_t l = 1;

	while (n >= 0x80) {
		n >>= 7;
		l++;
	}
	return l;
}

static void put_slice(struct consumer *k, const uint8_t *p, size_t n, bool last)
{
	size_t inner = 1 + varint_len(n) + n + (last ? 2 : 0);

	sonde__pb_put_tag(&k->reply, PF_READ_BUFFERS_RESP_SLICES, PB_LEN);
	sonde__pb_put_varint_raw(&k->reply, inner);
	sonde__pb_put_bytes(&k->reply, PF_SLICE_DATA, p, n);
	if (last)
		sonde__pb_put_bool(&k->reply, PF_SLICE_LAST_SLICE_FOR_PACKET, true);
	k->reply_est += n + SLICE_OVERHEAD;
}

/* Adds a packet's slices to the pending reply, starting new replies as the frame budget
 * requires; a slice that does not fit is split (consumers concatenate slices until one
 * carries last_slice_for_packet). */
static int reply_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct conn *c = ctx;
	struct consumer *k = &c->k;
	const size_t budget = IPC_BUFFER_SIZE - REPLY_OVERHEAD;

	size_t room =
		k->reply_est + SLICE_OVERHEAD < budget ? budget - k->reply_est - SLICE_OVERHEAD : 0;
	if (total <= room) {
		/* the common case: the packet and its trusted suffix as one slice */
		size_t inner = 1 + varint_len(total) + total + 2;
		sonde__pb_put_tag(&k->reply, PF_READ_BUFFERS_RESP_SLICES, PB_LEN);
		sonde__pb_put_varint_raw(&k->reply, inner);
		sonde__pb_put_tag(&k->reply, PF_SLICE_DATA, PB_LEN);
		sonde__pb_put_varint_raw(&k->reply, total);
		for (size_t i = 0; i < n; i++)
			sonde__buf_append(&k->reply, iov[i].iov_base, iov[i].iov_len);
		sonde__pb_put_bool(&k->reply, PF_SLICE_LAST_SLICE_FOR_PACKET, true);
		k->reply_est += total + SLICE_OVERHEAD;
		return ipc_chan_tx_pending(&c->ch) > SVC_READ_PAUSE_BYTES;
	}
	for (size_t i = 0; i < n && !c->dead; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		while (!c->dead) {
			room = k->reply_est + SLICE_OVERHEAD < budget
				       ? budget - k->reply_est - SLICE_OVERHEAD
				       : 0;
			if (len <= room) {
				put_slice(k, p, len, i + 1 == n);
				break;
			}
			if (room > 0) {
				put_slice(k, p, room, false);
				p += room;
				len -= room;
			}
			flush_reply(c, true);
		}
	}
	return c->dead || ipc_chan_tx_pending(&c->ch) > SVC_READ_PAUSE_BYTES;
}

static void finish_read(struct svc *s, struct conn *c, struct session *ss)
{
	if (ss) {
		if (ss->state == SESS_DISABLED && !ss->read_completed_emitted) {
			ss->read_completed_emitted = true;
			sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_READ_TRACING_BUFFERS_COMPLETED);
		}
		sonde__svcpkt_emit_tail(s, ss, reply_packet, c);
	}
	flush_reply(c, false); /* always end with has_more=false (§10.6) */
	c->k.reading = false;
}

void sonde__consumer_continue_read(struct svc *s, struct conn *c)
{
	struct session *ss = own_session(s, c);

	if (!c->k.reading)
		return;
	if (!ss) {
		finish_read(s, c, NULL);
		return;
	}
	if (!c->k.read_started) {
		c->k.read_started = true;
		sonde__svcpkt_emit_head(s, ss, reply_packet, c);
	}
	if (sonde__session_read_buffers(s, ss, reply_packet, c) == 0 && !c->dead)
		finish_read(s, c, ss);
	/* otherwise paused: conn_io() resumes once the socket drained */
	sonde__svc_conn_update_events(s, c);
}

static int read_buffers(struct svc *s, struct req *r)
{
	struct conn *c = r->c;
	struct session *ss = own_session(s, c);

	if (c->k.reading)
		return -SONDE_E_STATE;
	c->k.reading = true;
	c->k.read_started = false;
	c->k.read_req = r->id;
	sonde__buf_reset(&c->k.reply);
	c->k.reply_est = 0;
	if (!ss || ss->cfg.write_into_file || sonde__trigger_waiting(ss)) {
		finish_read(s, c, NULL);
		return 0;
	}
	sonde__consumer_continue_read(s, c);
	return 0;
}

/* ------------------------------------------------------------------ stats */

static void put_buffer_stats(struct buf *b, const struct tbuf *tb)
{
	const struct tbuf_stats *st = &tb->st;
	size_t m = sonde__pb_begin(b, PF_TRACE_STATS_BUFFER_STATS);

	sonde__pb_put_varint(b, PF_BUFFER_STATS_BUFFER_SIZE, tb->size);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_BYTES_WRITTEN, st->bytes_written);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_BYTES_OVERWRITTEN, st->bytes_overwritten);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_BYTES_READ, st->bytes_read);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_PADDING_BYTES_WRITTEN, st->padding_bytes_written);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_WRITTEN, st->chunks_written);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_REWRITTEN, st->chunks_rewritten);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_OVERWRITTEN, st->chunks_overwritten);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_DISCARDED, st->chunks_discarded);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_READ, st->chunks_read);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_CHUNKS_COMMITTED_OUT_OF_ORDER,
		      st->chunks_committed_out_of_order);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_WRITE_WRAP_COUNT, st->write_wrap_count);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_PATCHES_SUCCEEDED, st->patches_succeeded);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_PATCHES_FAILED, st->patches_failed);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_READAHEADS_SUCCEEDED, st->readaheads_succeeded);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_READAHEADS_FAILED, st->readaheads_failed);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_ABI_VIOLATIONS, st->abi_violations);
	sonde__pb_put_varint(b, PF_BUFFER_STATS_TRACE_WRITER_PACKET_LOSS, st->trace_writer_packet_loss);
	sonde__pb_end(b, m);
}

void sonde__consumer_put_trace_stats(struct svc *s, struct session *ss, struct buf *b)
{
	uint64_t producers = 0;

	for (size_t i = 0; i < ss->nbufs; i++)
		put_buffer_stats(b, ss->bufs[i]);
	for (size_t i = 0; i < s->nconns; i++)
		producers += s->conns[i]->is_producer && s->conns[i]->p.initialized;
	sonde__pb_put_varint(b, PF_TRACE_STATS_PRODUCERS_CONNECTED, producers);
	sonde__pb_put_varint(b, PF_TRACE_STATS_PRODUCERS_SEEN, s->producers_seen);
	sonde__pb_put_varint(b, PF_TRACE_STATS_DATA_SOURCES_REGISTERED, s->nds);
	sonde__pb_put_varint(b, PF_TRACE_STATS_DATA_SOURCES_SEEN, s->data_sources_seen);
	sonde__pb_put_varint(b, PF_TRACE_STATS_TRACING_SESSIONS, s->nsessions);
	sonde__pb_put_varint(b, PF_TRACE_STATS_TOTAL_BUFFERS, sonde__bufid_count(s));
	sonde__pb_put_varint(b, PF_TRACE_STATS_CHUNKS_DISCARDED, s->chunks_discarded);
	sonde__pb_put_varint(b, PF_TRACE_STATS_PATCHES_DISCARDED, s->patches_discarded);
	sonde__pb_put_varint(b, PF_TRACE_STATS_INVALID_PACKETS, ss->invalid_packets);
}

static int get_trace_stats(struct svc *s, struct req *r)
{
	struct session *ss = own_session(s, r->c);
	struct buf b = BUF_INIT;
	int rc;

	if (!ss)
		return -SONDE_E_STATE;
	size_t m = sonde__pb_begin(&b, PF_GET_TRACE_STATS_RESP_TRACE_STATS);
	sonde__consumer_put_trace_stats(s, ss, &b);
	sonde__pb_end(&b, m);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

/* ------------------------------------------------------------------ ObserveEvents */

static void put_state_change(struct svc *s, struct buf *b, const struct instance *in)
{
	struct conn *pc = sonde__svc_conn(s, in->conn_id);
	size_t m = sonde__pb_begin(b, PF_OBSERVABLE_EVENTS_INSTANCE_STATE_CHANGES);

	sonde__pb_put_string(b, PF_INSTANCE_STATE_CHANGE_PRODUCER_NAME, pc ? pc->p.name : "");
	sonde__pb_put_string(b, PF_INSTANCE_STATE_CHANGE_DATA_SOURCE_NAME, in->ds_name);
	sonde__pb_put_varint(b, PF_INSTANCE_STATE_CHANGE_STATE,
		      in->state == DS_STARTED ? PF_DS_INSTANCE_STATE_STARTED
					      : PF_DS_INSTANCE_STATE_STOPPED);
	sonde__pb_end(b, m);
}

static void send_events(struct svc *s, struct conn *c, struct session *ss,
			const struct instance *only, bool all_started)
{
	struct consumer *k = &c->k;
	struct buf b = BUF_INIT;
	size_t m = sonde__pb_begin(&b, PF_OBSERVE_EVENTS_RESP_EVENTS), n = 0;

	if (k->observe_mask & PF_OBSERVABLE_DATA_SOURCES_INSTANCES) {
		for (size_t i = 0; i < ss->ninst; i++) {
			if (!only || only == &ss->inst[i]) {
				put_state_change(s, &b, &ss->inst[i]);
				n++;
			}
		}
	}
	if (all_started && (k->observe_mask & PF_OBSERVABLE_ALL_DATA_SOURCES_STARTED) &&
	    !ss->obs_all_started_sent) {
		sonde__pb_put_bool(&b, PF_OBSERVABLE_EVENTS_ALL_DATA_SOURCES_STARTED, true);
		ss->obs_all_started_sent = true;
		n++;
	}
	sonde__pb_end(&b, m);
	if (n) {
		sonde__svc_send_reply(c, k->observe_req, true, true, b.data, b.len, -1);
		sonde__svc_conn_update_events(s, c);
	}
	sonde__buf_free(&b);
}

void sonde__session_notify_observer(struct svc *s, struct session *ss, struct instance *in,
			     bool all_started)
{
	struct conn *c = sonde__svc_conn(s, ss->conn_id);

	if (c && c->k.observe_mask && (in || all_started))
		send_events(s, c, ss, in, all_started);
}

static int observe_events(struct svc *s, struct req *r)
{
	struct consumer *k = &r->c->k;
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	uint32_t mask = 0;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num != PF_OBSERVE_EVENTS_REQ_EVENTS_TO_OBSERVE)
			continue;
		if (f.wire == PB_VARINT) {
			mask |= (uint32_t)f.u;
		} else if (f.wire == PB_LEN) {
			struct pb_reader pr = pb_sub(&f);
			uint64_t v;
			while (sonde__pb_packed_next(&pr, &v) > 0)
				mask |= (uint32_t)v;
		}
	}
	if (k->observe_mask) /* the previous stream ends */
		sonde__svc_send_reply(r->c, k->observe_req, true, false, NULL, 0, -1);
	k->observe_mask =
		mask & (PF_OBSERVABLE_DATA_SOURCES_INSTANCES |
			PF_OBSERVABLE_ALL_DATA_SOURCES_STARTED | PF_OBSERVABLE_CLONE_TRIGGER_HIT);
	k->observe_req = r->id;
	if (!k->observe_mask)
		return sonde__svc_send_reply(r->c, r->id, true, false, NULL, 0, -1);
	struct session *ss = own_session(s, r->c);
	if (ss) /* the current state, and a started notice not reported yet */
		send_events(s, r->c, ss, NULL, ss->all_started_emitted);
	return 0;
}

/* ------------------------------------------------------------------ queries */

static void put_producer(struct svc *s, struct buf *b, const struct conn *c)
{
	size_t m = sonde__pb_begin(b, PF_TSS_PRODUCERS);
	bool known = !c->remote || c->vouched;

	sonde__pb_put_varint(b, PF_TSS_PRODUCER_ID, c->p.id);
	sonde__pb_put_string(b, PF_TSS_PRODUCER_NAME, c->p.name);
	/* a remote producer's uid and pid are unknown: left out, not made up (a relayed
	 * one's are its relay's word, the pid one on its machine) */
	if (known)
		sonde__pb_put_varint(b, PF_TSS_PRODUCER_UID,
				     (uint64_t)(int64_t)(int32_t)c->ch.peer_uid);
	if (c->p.sdk_version)
		sonde__pb_put_string(b, PF_TSS_PRODUCER_SDK_VERSION, c->p.sdk_version);
	if (known && c->ch.peer_pid > 0)
		sonde__pb_put_varint(b, PF_TSS_PRODUCER_PID, (uint64_t)(int64_t)c->ch.peer_pid);
	/* HEAD's fields (v56): set only for a machine other than the host */
	if (c->machine_id) {
		sonde__pb_put_varint(b, PF_TSS_PRODUCER_MACHINE_ID, c->machine_id);
		sonde__pb_put_string(b, PF_TSS_PRODUCER_MACHINE_NAME, sonde__machine_name_of(s, c));
	}
	sonde__pb_end(b, m);
}

/* TracingServiceState goes in parts that each fit a frame (has_more on all but the last);
 * the concatenation of the parts is the whole message. Each entry (a producer, a data
 * source, a session) is written out first, then added to the current part, which is sent
 * first when the entry would not fit: producers and sessions were put in the first part
 * unmeasured, and two producers with 70 KB names made a reply no frame could hold, which
 * dropped the consumer (`sonde trace` asks it first: nobody could trace). An entry no
 * frame could hold on its own is left out. */
struct qss_parts {
	struct req *r;
	struct buf b;
	size_t m;
	uint32_t left_out;
};

enum { QSS_PART_LIMIT = IPC_BUFFER_SIZE - 1024 };

/* Room for n more bytes in the current part: sent first when they would not fit. */
static void qss_room(struct qss_parts *q, size_t n)
{
	if (q->b.len + n + 32 <= QSS_PART_LIMIT)
		return;
	sonde__pb_end(&q->b, q->m);
	sonde__svc_send_reply(q->r->c, q->r->id, true, true, q->b.data, q->b.len, -1);
	sonde__buf_reset(&q->b);
	q->m = sonde__pb_begin(&q->b, PF_QUERY_SERVICE_STATE_RESP_SERVICE_STATE);
}

/* The entry e (whole fields) into the current part, and e emptied. */
static void qss_put(struct qss_parts *q, struct buf *e)
{
	if (e->len + 64 > QSS_PART_LIMIT) {
		q->left_out++;
	} else if (e->len) {
		qss_room(q, e->len);
		sonde__buf_append(&q->b, e->data, e->len);
	}
	sonde__buf_reset(e);
}

static int query_service_state(struct svc *s, struct req *r)
{
	struct qss_parts q = {.r = r, .b = BUF_INIT};
	struct buf e = BUF_INIT;
	size_t started = 0;

	q.m = sonde__pb_begin(&q.b, PF_QUERY_SERVICE_STATE_RESP_SERVICE_STATE);
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i]->is_producer && s->conns[i]->p.initialized && !s->conns[i]->dead) {
			put_producer(s, &e, s->conns[i]);
			qss_put(&q, &e);
		}
	for (size_t i = 0; i < s->nds; i++) {
		struct conn *pc = sonde__svc_conn(s, s->ds[i]->conn_id);
		size_t d = sonde__pb_begin(&e, PF_TSS_DATA_SOURCES);
		sonde__pb_put_bytes(&e, PF_TSS_DATA_SOURCE_DESCRIPTOR, s->ds[i]->desc,
				    s->ds[i]->desc_len);
		sonde__pb_put_varint(&e, PF_TSS_DATA_SOURCE_PRODUCER_ID, pc ? pc->p.id : 0);
		sonde__pb_end(&e, d);
		qss_put(&q, &e);
	}
	for (size_t i = 0; i < s->nsessions; i++) {
		started += s->sessions[i]->state == SESS_STARTED;
		sonde__clone_put_session(r->c, s->sessions[i], &e);
		qss_put(&q, &e);
	}
	qss_room(&q, 64);
	sonde__pb_put_varint(&q.b, PF_TSS_NUM_SESSIONS, s->nsessions);
	sonde__pb_put_varint(&q.b, PF_TSS_NUM_SESSIONS_STARTED, started);
	sonde__pb_put_string(&q.b, PF_TSS_TRACING_SERVICE_VERSION, "sonded");
	sonde__pb_put_bool(&q.b, PF_TSS_SUPPORTS_TRACING_SESSIONS, true);
	sonde__pb_end(&q.b, q.m);
	if (q.left_out)
		sonde_info("QueryServiceState: %u entries too large for a frame left out",
			   q.left_out);
	int rc = sonde__svc_send_reply(r->c, r->id, true, false, q.b.data, q.b.len, -1);
	sonde__buf_free(&q.b);
	sonde__buf_free(&e);
	return rc;
}

static int query_capabilities(struct svc *s, struct req *r)
{
	struct buf b = BUF_INIT;
	size_t m = sonde__pb_begin(&b, PF_QUERY_CAPABILITIES_RESP_CAPABILITIES);
	int rc;

	sonde__pb_put_bool(&b, PF_CAPABILITIES_HAS_QUERY_CAPABILITIES, true);
	sonde__pb_put_varint(&b, PF_CAPABILITIES_OBSERVABLE_EVENTS, PF_OBSERVABLE_DATA_SOURCES_INSTANCES);
	sonde__pb_put_varint(&b, PF_CAPABILITIES_OBSERVABLE_EVENTS,
		      PF_OBSERVABLE_ALL_DATA_SOURCES_STARTED);
	sonde__pb_put_varint(&b, PF_CAPABILITIES_OBSERVABLE_EVENTS, PF_OBSERVABLE_CLONE_TRIGGER_HIT);
	sonde__pb_put_bool(&b, PF_CAPABILITIES_HAS_TRACE_CONFIG_OUTPUT_PATH, true);
	sonde__pb_put_bool(&b, PF_CAPABILITIES_HAS_CLONE_SESSION, true);
	sonde__pb_end(&b, m);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

/* ------------------------------------------------------------------ the rest */

static int enable_tracing(struct svc *s, struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	const uint8_t *cfg = (const uint8_t *)"";
	size_t len = 0;
	bool attach_only = false;
	int rc;

	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		if (f.num == PF_ENABLE_TRACING_REQ_TRACE_CONFIG && f.wire == PB_LEN)
			cfg = f.ptr, len = f.len;
		else if (f.num == PF_ENABLE_TRACING_REQ_ATTACH_NOTIFICATION_ONLY &&
			 f.wire == PB_VARINT)
			attach_only = f.u != 0;
	}
	if (rc < 0)
		return -SONDE_E_FORMAT;
	if (attach_only) {
		struct session *ss = own_session(s, r->c);
		if (!ss)
			return -SONDE_E_STATE;
		ss->enable_req = r->id;
		ss->enable_pending = !r->drop_reply;
		sonde__session_resolve_if_disabled(s, ss);
		return 0;
	}
	return sonde__session_enable(s, r, cfg, len, r->fd);
}

static char *arg_key(const struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	char *key = NULL;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_DETACH_REQ_KEY && f.wire == PB_LEN) {
			sonde__free(key);
			key = sonde__svc_strndup(f.ptr, f.len);
		}
	}
	return key;
}

static struct session *detached(struct svc *s, int32_t uid, const char *key)
{
	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		if (ss->detach_key && ss->consumer_uid == uid && !strcmp(ss->detach_key, key))
			return ss;
	}
	return NULL;
}

/* Detach: the session survives the consumer's disconnect, found again by (uid, key). */
static int detach(struct svc *s, struct req *r)
{
	struct session *ss = own_session(s, r->c);
	char *key = arg_key(r);

	/* a remote consumer could not be told from another one at Attach */
	if (!ss || !key || r->c->remote || ss->detach_key ||
	    detached(s, (int32_t)r->c->ch.peer_uid, key)) {
		sonde__free(key);
		return -SONDE_E_STATE;
	}
	ss->detach_key = key;
	ss->enable_pending = false; /* nobody to tell; Attach re-arms it */
	return sonde__svc_reply(r, NULL, false);
}

static int attach(struct svc *s, struct req *r)
{
	char *key = arg_key(r);
	struct session *ss =
		key && !r->c->remote ? detached(s, (int32_t)r->c->ch.peer_uid, key) : NULL;
	struct buf b = BUF_INIT;
	int rc;

	sonde__free(key);
	if (!ss || own_session(s, r->c))
		return -SONDE_E_STATE;
	struct conn *old = sonde__svc_conn(s, ss->conn_id);
	if (old)
		old->k.session_id = 0;
	sonde__free(ss->detach_key);
	ss->detach_key = NULL;
	ss->conn_id = r->c->id;
	r->c->k.session_id = ss->id;
	sonde__pb_put_bytes(&b, PF_ATTACH_RESP_TRACE_CONFIG, ss->config, ss->config_len);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

static uint64_t arg_varint(const struct req *r, uint32_t num)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	uint64_t v = 0;

	while (sonde__pb_next(&rd, &f) > 0)
		if (f.num == num && f.wire == PB_VARINT)
			v = f.u;
	return v;
}

int sonde__consumer_dispatch(struct svc *s, struct req *r, uint32_t method)
{
	struct session *ss = own_session(s, r->c);
	int rc;

	switch (method) {
	case PF_CONSUMER_ENABLE_TRACING:
		return enable_tracing(s, r);
	case PF_CONSUMER_DISABLE_TRACING:
		rc = sonde__svc_reply(r, NULL, false);
		if (ss)
			sonde__session_disable(s, ss, false);
		return rc;
	case PF_CONSUMER_READ_BUFFERS:
		return read_buffers(s, r);
	case PF_CONSUMER_FREE_BUFFERS:
		if (ss) {
			sonde__session_free(s, ss);
			r->c->k.session_id = 0;
		}
		return sonde__svc_reply(r, NULL, false);
	case PF_CONSUMER_FLUSH: {
		uint32_t t = (uint32_t)arg_varint(r, PF_FLUSH_REQ_TIMEOUT_MS);
		if (!ss)
			return -SONDE_E_STATE;
		sonde__session_flush(s, ss, t, r->c->id, r->drop_reply ? 0 : r->id, false);
		return 0;
	}
	case PF_CONSUMER_START_TRACING:
		if (!ss)
			return -SONDE_E_STATE;
		rc = sonde__svc_reply(r, NULL, false);
		sonde__session_start(s, ss);
		return rc;
	case PF_CONSUMER_DETACH:
		return detach(s, r);
	case PF_CONSUMER_ATTACH:
		return attach(s, r);
	case PF_CONSUMER_GET_TRACE_STATS:
		return get_trace_stats(s, r);
	case PF_CONSUMER_OBSERVE_EVENTS:
		return observe_events(s, r);
	case PF_CONSUMER_QUERY_SERVICE_STATE:
		return query_service_state(s, r);
	case PF_CONSUMER_QUERY_CAPABILITIES:
		return query_capabilities(s, r);
	case PF_CONSUMER_CLONE_SESSION:
		return sonde__clone_session(s, r);
	case PF_CONSUMER_CHANGE_TRACE_CONFIG:
		return sonde__reconfig_change(s, r);
	default:
		return -ENOSYS;
	}
}

void sonde__consumer_gone(struct svc *s, struct conn *c)
{
	struct session *ss = own_session(s, c);

	if (ss && ss->detach_key)
		ss->conn_id = 0; /* detached: it lives on until attached and freed */
	else if (ss)
		sonde__session_free(s, ss);
	c->k.session_id = 0;
	sonde__buf_free(&c->k.reply);
	if (c->k.clone_fd >= 0)
		close(c->k.clone_fd);
	c->k.clone_fd = -1;
}
