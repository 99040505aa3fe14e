/* CloneSession (perfetto-wire.md §3.1, HEAD) and the CLONE_SNAPSHOT trigger notice. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "service/internal.h"

void clone_trigger_hit(struct svc *s, struct session *ss, const char *name,
		       const struct conn *producer, uint64_t now_ns, uint32_t delay_ms)
{
	struct conn *c = svc_conn(s, ss->conn_id);
	struct buf b = BUF_INIT;

	if (!c || !(c->k.observe_mask & PF_OBSERVABLE_CLONE_TRIGGER_HIT))
		return;
	size_t m = pb_begin(&b, PF_OBSERVE_EVENTS_RESP_EVENTS);
	size_t h = pb_begin(&b, PF_OBSERVABLE_EVENTS_CLONE_TRIGGER_HIT);
	pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_TRACING_SESSION_ID, ss->id);
	pb_put_string(&b, PF_CLONE_TRIGGER_HIT_TRIGGER_NAME, name);
	pb_put_string(&b, PF_CLONE_TRIGGER_HIT_PRODUCER_NAME, producer->p.name);
	pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_PRODUCER_UID, producer->ch.peer_uid);
	pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_BOOT_TIME_NS, now_ns);
	pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_TRIGGER_DELAY_MS, delay_ms);
	pb_end(&b, h);
	pb_end(&b, m);
	if (buf_error(&b) == 0) {
		svc_send_reply(c, c->k.observe_req, true, true, b.data, b.len, -1);
		svc_conn_update_events(s, c);
	}
	buf_free(&b);
}
