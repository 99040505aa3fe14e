/* Flush bookkeeping (flush.h). */
#include <stdlib.h>

#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/flush.h"
#include "service/internal.h"
#include "service/session.h"

static void complete_flush(struct svc *s, size_t idx, bool ok)
{
	struct flush fl = s->flushes[idx];
	struct session *ss = sonde__svc_session(s, fl.session_id);

	s->flushes[idx] = s->flushes[--s->nflushes];
	if (ss)
		ss->nflushes--;
	if (fl.timer)
		sonde__loop_timer_del(&s->loop, fl.timer);
	sonde__free(fl.conns);
	if (ss) {
		sonde__session_scrape(s, ss); /* §2.6: in both cases */
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

/* A session with SVC_MAX_PENDING_FLUSHES flushes in progress takes no more, as Perfetto's
 * service refuses one past 1000: each is a timer and a record that a producer never acking
 * would otherwise keep until its timeout, however many a consumer pipelines or a short
 * flush_period_ms starts. The refused flush ends at once as failed, asking nothing of the
 * producers and scraping nothing (the flushes in progress will): its consumer gets a failed
 * reply, which the limits on unread replies then hold like any other, and a flush that was to
 * end the session ends it. */
static void refuse_flush(struct svc *s, struct session *ss, uint64_t consumer_conn,
			 uint64_t consumer_req, bool then_disable)
{
	sonde_debug("session %llu: flush refused, %zu in progress", (unsigned long long)ss->id,
		    ss->nflushes);
	if (consumer_req) {
		struct conn *c = sonde__svc_conn(s, consumer_conn);
		if (c) {
			sonde__svc_send_reply(c, consumer_req, false, false, NULL, 0, -1);
			sonde__svc_conn_update_events(s, c);
		}
	}
	if (then_disable)
		sonde__session_disable(s, ss, false);
}

uint64_t sonde__session_flush(struct svc *s, struct session *ss, uint32_t timeout_ms,
		       uint64_t consumer_conn, uint64_t consumer_req, bool then_disable)
{
	struct flush fl = {.id = s->next_flush_id++,
			   .session_id = ss->id,
			   .consumer_conn = consumer_conn,
			   .consumer_req = consumer_req,
			   .then_disable = then_disable};
	struct flush *v;

	if (ss->nflushes >= SVC_MAX_PENDING_FLUSHES) {
		refuse_flush(s, ss, consumer_conn, consumer_req, then_disable);
		return 0;
	}
	v = sonde__realloc(s->flushes, (s->nflushes + 1) * sizeof(*v));
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
		timeout_ms = ss->cfg.flush_timeout_ms;
	if (timeout_ms > SVC_MAX_FLUSH_TIMEOUT_MS)
		timeout_ms = SVC_MAX_FLUSH_TIMEOUT_MS;
	s->flushes[s->nflushes++] = fl;
	ss->nflushes++;
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

/* A producer that is gone can no longer ack: it counts as having acked. */
void sonde__flush_producer_gone(struct svc *s, const struct conn *c)
{
	for (size_t i = 0; i < s->nflushes;) {
		struct flush *fl = &s->flushes[i];
		for (size_t k = 0; k < fl->nconns; k++)
			if (fl->conns[k] == c->id)
				fl->conns[k] = fl->conns[--fl->nconns];
		if (fl->nconns == 0) {
			complete_flush(s, i, true);
			i = 0; /* the array changed */
			continue;
		}
		i++;
	}
}

void sonde__flush_session_gone(struct svc *s, uint64_t session_id)
{
	for (size_t i = 0; i < s->nflushes;) {
		if (s->flushes[i].session_id == session_id) {
			complete_flush(s, i, false);
			i = 0; /* the array changed */
		} else {
			i++;
		}
	}
}
