/* CloneSession (perfetto-wire.md §3.1, HEAD), the CLONE_SNAPSHOT trigger notice and the
 * session list of QueryServiceState.
 *
 * A clone is a new session in state DISABLED marked read_only: the source is flushed
 * first, then each of its buffers is copied (records, index, sequences and read state),
 * and the clone is bound to the calling consumer, which reads it with ReadBuffers and
 * frees it with FreeBuffers or by disconnecting. It has no data-source instances, so no
 * producer can write into it. Only root or the source's consumer uid may clone (§8). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/fwriter.h"
#include "service/flush.h"
#include "service/internal.h"
#include "service/outfile.h"
#include "service/session.h"

void sonde__clone_trigger_hit(struct svc *s, struct session *ss, const char *name,
		       const struct conn *producer, uint64_t now_ns, uint32_t delay_ms)
{
	struct conn *c = sonde__svc_conn(s, ss->conn_id);
	struct buf b = BUF_INIT;

	if (!c || !(c->k.observe_mask & PF_OBSERVABLE_CLONE_TRIGGER_HIT))
		return;
	size_t m = sonde__pb_begin(&b, PF_OBSERVE_EVENTS_RESP_EVENTS);
	size_t h = sonde__pb_begin(&b, PF_OBSERVABLE_EVENTS_CLONE_TRIGGER_HIT);
	sonde__pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_TRACING_SESSION_ID, ss->id);
	sonde__pb_put_string(&b, PF_CLONE_TRIGGER_HIT_TRIGGER_NAME, name);
	sonde__pb_put_string(&b, PF_CLONE_TRIGGER_HIT_PRODUCER_NAME, producer->p.name);
	if (!producer->remote || producer->vouched)
		sonde__pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_PRODUCER_UID, producer->ch.peer_uid);
	sonde__pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_BOOT_TIME_NS, now_ns);
	sonde__pb_put_varint(&b, PF_CLONE_TRIGGER_HIT_TRIGGER_DELAY_MS, delay_ms);
	sonde__pb_end(&b, h);
	sonde__pb_end(&b, m);
	if (buf_error(&b) == 0) {
		sonde__svc_send_reply(c, c->k.observe_req, true, true, b.data, b.len, -1);
		sonde__svc_conn_update_events(s, c);
	}
	sonde__buf_free(&b);
}

/* A remote consumer's uid is unknown: it cannot be told from another remote consumer, so
 * it clones (and lists) no session. */
static bool may_clone(const struct conn *caller, const struct session *src)
{
	if (caller->remote)
		return false;
	return caller->ch.peer_uid == 0 || (int32_t)caller->ch.peer_uid == src->consumer_uid;
}

/* ------------------------------------------------------------------ CloneSession */

static void reply_clone(struct svc *s, struct conn *c, uint64_t req, const char *err,
			bool was_write_into_file, uint64_t clone_id)
{
	struct buf b = BUF_INIT;
	uint64_t uuid[2];

	if (!req)
		return; /* drop_reply */
	sonde__pb_put_bool(&b, PF_CLONE_SESSION_RESP_SUCCESS, !err);
	if (err) {
		sonde_info("CloneSession refused: %s", err);
		sonde__pb_put_string(&b, PF_CLONE_SESSION_RESP_ERROR, err);
	} else {
		/* the clone is a new trace: a new random (v4-style) uuid */
		if (getrandom(uuid, sizeof(uuid), GRND_NONBLOCK) != sizeof(uuid)) {
			uuid[0] = sonde__svc_boottime_ns();
			uuid[1] = clone_id;
		}
		uuid[0] = (uuid[0] & ~0xF000ull) | 0x4000ull;
		uuid[1] = (uuid[1] & ~(3ull << 62)) | (2ull << 62);
		sonde__pb_put_varint(&b, PF_CLONE_SESSION_RESP_UUID_MSB, uuid[0]);
		sonde__pb_put_varint(&b, PF_CLONE_SESSION_RESP_UUID_LSB, uuid[1]);
		sonde__pb_put_bool(&b, PF_CLONE_SESSION_RESP_WAS_WRITE_INTO_FILE, was_write_into_file);
	}
	sonde__svc_send_reply(c, req, true, false, b.data, b.len, -1);
	sonde__svc_conn_update_events(s, c);
	sonde__buf_free(&b);
}

/* A copy of the source session's buffer i. */
static int init_copy(struct tbuf *tb, size_t i, void *ctx)
{
	const struct session *src = ctx;

	return sonde__tbuf_clone(tb, src->bufs[i]);
}

static struct session *new_clone(struct svc *s, struct conn *c, const struct session *src)
{
	struct session *ss = sonde__calloc(1, sizeof(*ss));

	if (!ss || !(ss->config = sonde__malloc(src->config_len ? src->config_len : 1))) {
		sonde__free(ss);
		return NULL;
	}
	memcpy(ss->config, src->config, src->config_len);
	ss->config_len = src->config_len;
	ss->id = s->next_session_id++;
	ss->conn_id = c->id;
	ss->consumer_uid = (int32_t)c->ch.peer_uid;
	ss->state = SESS_DISABLED;
	ss->read_only = true;
	ss->next_seq_id = src->next_seq_id; /* the copied sequences keep their ids */
	ss->cfg.no_clock_snapshots = src->cfg.no_clock_snapshots;
	ss->cfg.no_trace_config = src->cfg.no_trace_config;
	ss->cfg.no_system_info = src->cfg.no_system_info;
	ss->cfg.no_service_events = src->cfg.no_service_events;
	ss->cfg.snapshot_interval_ms = src->cfg.snapshot_interval_ms;
	ss->cfg.flush_timeout_ms = src->cfg.flush_timeout_ms;
	ss->cfg.stop_timeout_ms = src->cfg.stop_timeout_ms;
	ss->sync_due = ss->stats_due = true;
	ss->start_ns = src->start_ns;
	return ss;
}

/* A write_into_file source, as Perfetto's service clones it: what the source wrote into
 * its file so far is copied into the caller's fd, then the clone's buffers (what the
 * source had not written yet) follow in the same file, and the clone keeps the fd as its
 * output. The copy is read back from the source's file, which must be readable. */
static const char *clone_into_file(struct svc *s, struct session *ss, const struct session *src,
				   const struct conn *c, int fd, char *err, size_t errlen)
{
	uint64_t copied = 0;
	const char *why = NULL;
	int rc = src->fw ? sonde__fwriter_copy_to(src->fw, fd, 1000, &copied, &why) : -EBADF;

	if (rc == 0)
		rc = sonde__outfile_open(ss, c, NULL, fd);
	if (rc < 0) {
		snprintf(err, errlen, "cannot copy the write_into_file session's file: %s",
			 why ? why : strerror(-rc));
		return err;
	}
	ss->cfg.write_into_file = true;
	ss->file_bytes = copied;
	sonde__session_drain_file(s, ss);
	return NULL;
}

/* The source was flushed: copy it into a new session of consumer c. */
static void finish_clone(struct svc *s, struct conn *c, uint64_t src_id, uint64_t req)
{
	struct session *src = sonde__svc_session(s, src_id), *ss, **v;
	uint64_t *cfg = NULL;
	const char *err = NULL;
	char errbuf[160];
	int fd = c->k.clone_fd; /* closed here unless the clone takes it */

	c->k.clone_fd = -1;

	if (!src || sonde__svc_session(s, c->k.session_id)) {
		if (fd >= 0)
			close(fd);
		reply_clone(s, c, req,
			    src ? "this consumer already has a tracing session"
				: "the session ended before it could be cloned",
			    false, 0);
		return;
	}
	ss = new_clone(s, c, src);
	v = sonde__realloc(s->sessions, (s->nsessions + 1) * sizeof(*v));
	cfg = sonde__calloc(src->nbufs ? src->nbufs * 2 : 1, sizeof(*cfg));
	if (!ss || !v || !cfg) {
		if (v)
			s->sessions = v;
		sonde__free(ss ? ss->config : NULL);
		sonde__free(ss);
		sonde__free(cfg);
		if (fd >= 0)
			close(fd);
		reply_clone(s, c, req, "out of memory", false, 0);
		return;
	}
	s->sessions = v;
	for (size_t i = 0; i < src->nbufs; i++)
		cfg[2 * i] = src->bufs[i]->size / 1024;
	err = sonde__sec_check_session(s, ss, cfg, src->nbufs);
	sonde__free(cfg);
	s->sessions[s->nsessions++] = ss; /* so that sonde__session_free finds it */
	if (!err && sonde__session_add_buffers(s, ss, src->nbufs, init_copy, (void *)src) < 0)
		err = "cannot allocate the cloned buffers";
	if (err) {
		sonde__session_free(s, ss);
		if (fd >= 0)
			close(fd);
		reply_clone(s, c, req, err, false, 0);
		return;
	}
	/* triggers recorded but not read yet go with the snapshot */
	sonde__buf_append(&ss->trig.pkts, src->trig.pkts.data, src->trig.pkts.len);
	sonde__svcpkt_clock_snapshot(s, ss);
	sonde__svcpkt_event(s, ss, PF_SERVICE_EVENT_TRACING_DISABLED);
	if (fd >= 0 && (err = clone_into_file(s, ss, src, c, fd, errbuf, sizeof(errbuf)))) {
		sonde__session_free(s, ss); /* it has no writer yet: fd is ours */
		close(fd);
		reply_clone(s, c, req, err, false, 0);
		return;
	}
	c->k.session_id = ss->id;
	sonde_info("session %llu cloned into session %llu (%zu buffers%s)",
		   (unsigned long long)src->id, (unsigned long long)ss->id, ss->nbufs,
		   fd >= 0 ? ", written into the caller's file" : "");
	reply_clone(s, c, req, NULL, fd >= 0, ss->id);
}

void sonde__clone_flush_done(struct svc *s, uint64_t flush_id)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->is_producer || c->dead || !c->k.clone_pending ||
		    c->k.clone_flush != flush_id)
			continue;
		c->k.clone_pending = false;
		finish_clone(s, c, c->k.clone_src, c->k.clone_req);
		return;
	}
}

static struct session *find_source(struct svc *s, uint64_t id, const char *name)
{
	if (id)
		return sonde__svc_session(s, id);
	for (size_t i = 0; name && i < s->nsessions; i++)
		if (s->sessions[i]->cfg.unique_name && !strcmp(s->sessions[i]->cfg.unique_name, name))
			return s->sessions[i];
	return NULL;
}

static bool flush_pending(const struct svc *s, uint64_t id)
{
	for (size_t i = 0; i < s->nflushes; i++)
		if (s->flushes[i].id == id)
			return true;
	return false;
}

int sonde__clone_session(struct svc *s, struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct conn *c = r->c;
	uint64_t id = 0, req = r->drop_reply ? 0 : r->id;
	char name[256] = "";
	struct pb_field f;
	struct session *src;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_CLONE_SESSION_REQ_SESSION_ID && f.wire == PB_VARINT)
			id = f.u;
		else if (f.num == PF_CLONE_SESSION_REQ_UNIQUE_SESSION_NAME && f.wire == PB_LEN)
			snprintf(name, sizeof(name), "%.*s", (int)f.len, (const char *)f.ptr);
	}
	if (c->k.clone_pending)
		return -SONDE_E_STATE;
	if (sonde__svc_session(s, c->k.session_id)) {
		reply_clone(s, c, req, "this consumer already has a tracing session", false, 0);
		return 0;
	}
	if (!id && !name[0]) {
		reply_clone(s, c, req, "CloneSession needs a session_id or a unique_session_name",
			    false, 0);
		return 0;
	}
	src = find_source(s, id, name[0] ? name : NULL);
	if (!src || !may_clone(c, src)) {
		reply_clone(s, c, req,
			    src ? "permission denied: the session belongs to another uid"
				: "no tracing session with this id or unique_session_name",
			    false, 0);
		return 0;
	}
	/* The caller's fd is used only for a write_into_file source (the v53 `perfetto
	 * --clone` always sends one); otherwise it is closed after this method. Without an fd
	 * a write_into_file source's clone holds only what the source has not written into
	 * its file yet, to be read with ReadBuffers. */
	if (src->cfg.write_into_file && r->fd >= 0) {
		c->k.clone_fd = r->fd;
		r->fd = -1;
	}
	uint64_t fl = sonde__session_flush(s, src, 0, 0, 0, false);
	if (fl && flush_pending(s, fl)) {
		c->k.clone_pending = true;
		c->k.clone_flush = fl;
		c->k.clone_src = src->id;
		c->k.clone_req = req;
		return 0;
	}
	finish_clone(s, c, src->id, req); /* nothing to wait for */
	return 0;
}

/* ------------------------------------------------------------------ QueryServiceState */

static const char *state_name(const struct session *ss)
{
	if (ss->read_only)
		return "CLONED_READ_ONLY";
	switch (ss->state) {
	case SESS_CONFIGURED:
		return "CONFIGURED";
	case SESS_STARTED:
		return "STARTED";
	case SESS_STOPPING:
		return "DISABLING_WAITING_STOP_ACKS";
	default:
		return "DISABLED";
	}
}

void sonde__clone_put_session(const struct conn *caller, const struct session *ss,
			      struct buf *b)
{
	if (!may_clone(caller, ss))
		return;
	size_t m = sonde__pb_begin(b, PF_TSS_TRACING_SESSIONS);
	sonde__pb_put_varint(b, PF_TSS_SESSION_ID, ss->id);
	sonde__pb_put_varint(b, PF_TSS_SESSION_CONSUMER_UID, (uint64_t)(int64_t)ss->consumer_uid);
	sonde__pb_put_string(b, PF_TSS_SESSION_STATE, state_name(ss));
	if (ss->cfg.unique_name)
		sonde__pb_put_string(b, PF_TSS_SESSION_UNIQUE_SESSION_NAME, ss->cfg.unique_name);
	for (size_t k = 0; k < ss->nbufs; k++)
		sonde__pb_put_varint(b, PF_TSS_SESSION_BUFFER_SIZE_KB, ss->bufs[k]->size / 1024);
	sonde__pb_put_varint(b, PF_TSS_SESSION_DURATION_MS, ss->cfg.duration_ms);
	sonde__pb_put_varint(b, PF_TSS_SESSION_NUM_DATA_SOURCES, ss->cfg.nds);
	sonde__pb_put_bool(b, PF_TSS_SESSION_IS_STARTED, ss->state != SESS_CONFIGURED);
	sonde__pb_end(b, m);
}
