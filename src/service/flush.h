/* Flush bookkeeping (perfetto-wire.md §2.6, §10.8): a flush asks every producer with a
 * live instance of its session, waits for each one's ack (acks are cumulative per
 * producer) or for its timeout, then scrapes the session's SMBs, records
 * all_data_sources_flushed and answers whoever asked (a consumer's Flush, CloneSession,
 * a trigger's stop, the session's own duration). The flushes in progress are the
 * service's (struct svc flushes). */
#ifndef SONDE_SERVICE_FLUSH_H
#define SONDE_SERVICE_FLUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct svc;
struct session;
struct conn;

struct flush {
	uint64_t id;
	uint64_t session_id;
	uint64_t *conns; /* producers still to ack */
	size_t nconns;
	uint64_t timer;
	uint64_t consumer_conn, consumer_req; /* 0: not a consumer request */
	bool then_disable;
};

/* Flushes ss: timeout_ms 0 means the session's flush_timeout_ms (either at most
 * SVC_MAX_FLUSH_TIMEOUT_MS); consumer_req (on connection consumer_conn) is answered when it
 * ends, unless 0; then_disable disables the session afterwards. Returns the flush id, or 0
 * when out of memory or refused: with SVC_MAX_PENDING_FLUSHES of ss in progress it ends
 * at once as failed (consumer_req answered so, the session disabled if then_disable). */
uint64_t sonde__session_flush(struct svc *s, struct session *ss, uint32_t timeout_ms,
		       uint64_t consumer_conn, uint64_t consumer_req, bool then_disable);
/* Producer c acked flush_id (and so every earlier one). */
void sonde__session_flush_ack(struct svc *s, struct conn *c, uint64_t flush_id);
/* Producer c disconnected: the flushes waiting for it wait no more. */
void sonde__flush_producer_gone(struct svc *s, const struct conn *c);
/* The session is being freed: its flushes end as failed. */
void sonde__flush_session_gone(struct svc *s, uint64_t session_id);

#endif
