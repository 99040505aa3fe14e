/* Consumer: ConsumerPort client with callbacks and a blocking layer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sonde/client.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/opts.h"
#include "base/pb.h"
#include "client/conn.h"
#include "ipc/protos.h"

enum {
	CM_ENABLE,
	CM_DISABLE,
	CM_READ,
	CM_FREE,
	CM_FLUSH,
	CM_START,
	CM_STATS,
	CM_STATE,
	CM_CLONE,
	CM_COUNT
};

static const char *const method_names[CM_COUNT] = {
	"EnableTracing", "DisableTracing", "ReadBuffers",	"FreeBuffers",	"Flush",
	"StartTracing",	 "GetTraceStats",  "QueryServiceState", "CloneSession",
};

enum { MAX_PENDING = 32 };

struct pending {
	uint64_t id; /* 0: free slot */
	unsigned method;
	sonde_consumer_done_fn done;
	sonde_consumer_stats_fn stats;
	sonde_consumer_state_fn state;
	sonde_consumer_clone_fn clone;
	void *ctx;
};

struct sonde_consumer {
	struct conn c;
	struct sonde_consumer_cbs cbs;
	struct pending pending[MAX_PENDING];
	bool eof;
	bool session_disabled;
	char disable_error[256];
	struct buf packet; /* slices of the packet being reassembled */
	struct buf state;  /* QueryServiceState parts */
};

static const char *path_of(const struct sonde_consumer_opts *o, char *buf, size_t n)
{
	if (OPTS_GET(o, socket, NULL))
		return o->socket;
	sonde__conn_default_path(CONN_CONSUMER, buf, n);
	return buf;
}

const char *sonde_consumer__socket_path(const struct sonde_consumer_opts *opts)
{
	static __thread char path[108];
	return path_of(opts, path, sizeof(path));
}

struct sonde_consumer *sonde_consumer__new(const struct sonde_consumer_opts *opts)
{
	struct sonde_consumer *c;
	char path[108];
	int r;

	if (!OPTS_VALID(opts, sonde_consumer_opts)) {
		errno = EINVAL;
		return NULL;
	}
	if (!(c = sonde__calloc(1, sizeof(*c))))
		return NULL;
	struct sonde_consumer_opts o = {0};
	OPTS_COPY(&o, opts);
	struct conn_trust t = {o.trust_uid_set, o.trust_uid, o.untrusted_uid};
	r = sonde__conn_trust_from_env(&t);
	if (r == 0)
		r = sonde__conn_open(&c->c, CONN_CONSUMER, path_of(opts, path, sizeof(path)),
			      "ConsumerPort", method_names, CM_COUNT, o.timeout_ms, &t);
	if (r < 0) {
		sonde__free(c);
		errno = -r < SONDE_E_BASE ? -r : EPROTO;
		return NULL;
	}
	return c;
}

void sonde_consumer__free(struct sonde_consumer *c)
{
	if (!c)
		return;
	sonde__conn_close(&c->c);
	sonde__buf_free(&c->packet);
	sonde__buf_free(&c->state);
	sonde__free(c);
}

int sonde_consumer__fd(const struct sonde_consumer *c)
{
	return c->c.ch.fd;
}

bool sonde_consumer__want_write(struct sonde_consumer *c)
{
	return sonde__conn_tx_pending(&c->c) > 0;
}

int sonde_consumer__set_callbacks(struct sonde_consumer *c, const struct sonde_consumer_cbs *cbs)
{
	if (!OPTS_VALID(cbs, sonde_consumer_cbs))
		return -EINVAL;
	memset(&c->cbs, 0, sizeof(c->cbs));
	OPTS_COPY(&c->cbs, cbs);
	return 0;
}

bool sonde_consumer__disabled(const struct sonde_consumer *c)
{
	return c->session_disabled;
}

/* ---------------------------------------------------------------- requests */

static int invoke(struct sonde_consumer *c, unsigned m, const void *args, size_t len, int fd,
		  const struct pending *tmpl)
{
	struct pending *slot = NULL;

	if (c->eof)
		return -ECONNRESET;
	if (tmpl) {
		for (int i = 0; i < MAX_PENDING && !slot; i++)
			if (!c->pending[i].id)
				slot = &c->pending[i];
		if (!slot)
			return -EBUSY;
	}
	int64_t id = sonde__conn_invoke(&c->c, m, args, len, !tmpl, fd);
	if (id < 0)
		return (int)id;
	if (slot) {
		*slot = *tmpl;
		slot->id = (uint64_t)id;
		slot->method = m;
	}
	return 0;
}

int sonde_consumer__enable_tracing(struct sonde_consumer *c, const void *cfg, size_t cfg_len,
				   int output_fd)
{
	struct buf b = BUF_INIT;
	struct pending p = {0};

	sonde__pb_put_bytes(&b, PF_ENABLE_TRACING_REQ_TRACE_CONFIG, cfg, cfg_len);
	if (buf_error(&b)) {
		sonde__buf_free(&b);
		return -ENOMEM;
	}
	c->session_disabled = false;
	c->disable_error[0] = 0;
	int r = invoke(c, CM_ENABLE, b.data, b.len, output_fd, &p);
	sonde__buf_free(&b);
	return r;
}

int sonde_consumer__start_tracing(struct sonde_consumer *c)
{
	return invoke(c, CM_START, NULL, 0, -1, NULL);
}

int sonde_consumer__disable_tracing(struct sonde_consumer *c)
{
	return invoke(c, CM_DISABLE, NULL, 0, -1, NULL);
}

int sonde_consumer__free_buffers(struct sonde_consumer *c)
{
	return invoke(c, CM_FREE, NULL, 0, -1, NULL);
}

int sonde_consumer__read_buffers(struct sonde_consumer *c, sonde_consumer_done_fn done, void *ctx)
{
	struct pending p = {.done = done, .ctx = ctx};
	sonde__buf_reset(&c->packet);
	return invoke(c, CM_READ, NULL, 0, -1, &p);
}

int sonde_consumer__flush(struct sonde_consumer *c, uint32_t timeout_ms,
			  sonde_consumer_done_fn done, void *ctx)
{
	struct pending p = {.done = done, .ctx = ctx};
	uint8_t b[16];
	size_t n = 0;

	if (timeout_ms) {
		n = sonde__pb_varint_encode(b, (PF_FLUSH_REQ_TIMEOUT_MS << 3) | PB_VARINT);
		n += sonde__pb_varint_encode(b + n, timeout_ms);
	}
	return invoke(c, CM_FLUSH, b, n, -1, &p);
}

int sonde_consumer__get_trace_stats(struct sonde_consumer *c, sonde_consumer_stats_fn fn, void *ctx)
{
	struct pending p = {.stats = fn, .ctx = ctx};
	return invoke(c, CM_STATS, NULL, 0, -1, &p);
}

int sonde_consumer__query_service_state(struct sonde_consumer *c, sonde_consumer_state_fn fn,
					void *ctx)
{
	struct pending p = {.state = fn, .ctx = ctx};
	sonde__buf_reset(&c->state);
	return invoke(c, CM_STATE, NULL, 0, -1, &p);
}

int sonde_consumer__clone_session(struct sonde_consumer *c, uint64_t session_id,
				  const char *unique_session_name, sonde_consumer_clone_fn fn,
				  void *ctx)
{
	struct pending p = {.clone = fn, .ctx = ctx};
	struct buf b = BUF_INIT;
	int r;

	if (session_id)
		sonde__pb_put_varint(&b, PF_CLONE_SESSION_REQ_SESSION_ID, session_id);
	else if (unique_session_name)
		sonde__pb_put_string(&b, PF_CLONE_SESSION_REQ_UNIQUE_SESSION_NAME, unique_session_name);
	r = buf_error(&b) ? -ENOMEM : invoke(c, CM_CLONE, b.data, b.len, -1, &p);
	sonde__buf_free(&b);
	return r;
}

/* ---------------------------------------------------------------- replies */

static void decode_clone(const struct ipc_frame *f, struct sonde_clone_result *res)
{
	struct pb_reader r = pb_reader_init(f->data, f->data_len);
	struct pb_field fl;

	memset(res, 0, sizeof(*res));
	while (sonde__pb_next(&r, &fl) > 0) {
		if (fl.num == PF_CLONE_SESSION_RESP_SUCCESS && fl.wire == PB_VARINT)
			res->success = fl.u != 0;
		else if (fl.num == PF_CLONE_SESSION_RESP_ERROR && fl.wire == PB_LEN)
			snprintf(res->error, sizeof(res->error), "%.*s", (int)fl.len,
				 (const char *)fl.ptr);
		else if (fl.num == PF_CLONE_SESSION_RESP_UUID_MSB && fl.wire == PB_VARINT)
			res->uuid_msb = (int64_t)fl.u;
		else if (fl.num == PF_CLONE_SESSION_RESP_UUID_LSB && fl.wire == PB_VARINT)
			res->uuid_lsb = (int64_t)fl.u;
		else if (fl.num == PF_CLONE_SESSION_RESP_WAS_WRITE_INTO_FILE &&
			 fl.wire == PB_VARINT)
			res->was_write_into_file = fl.u != 0;
	}
}

static void session_ended(struct sonde_consumer *c, const char *error)
{
	c->session_disabled = true;
	snprintf(c->disable_error, sizeof(c->disable_error), "%s", error ? error : "");
	if (c->cbs.on_disabled)
		c->cbs.on_disabled(c->cbs.ctx, error);
}

static void on_enable_reply(struct sonde_consumer *c, const struct ipc_frame *f)
{
	char err[256] = "";
	struct pb_reader r = pb_reader_init(f->data, f->data_len);
	struct pb_field fl;

	if (!f->success) {
		session_ended(c, "the service rejected EnableTracing");
		return;
	}
	while (sonde__pb_next(&r, &fl) > 0)
		if (fl.num == PF_ENABLE_TRACING_RESP_ERROR && fl.wire == PB_LEN)
			snprintf(err, sizeof(err), "%.*s", (int)fl.len, (const char *)fl.ptr);
	session_ended(c, err[0] ? err : NULL);
}

/* Slices of ReadBuffers: consecutive slices form one packet until last_slice_for_packet. */
static void on_read_reply(struct sonde_consumer *c, const struct ipc_frame *f)
{
	struct pb_reader r = pb_reader_init(f->data, f->data_len);
	struct pb_field fl, g;

	while (sonde__pb_next(&r, &fl) > 0) {
		if (fl.num != PF_READ_BUFFERS_RESP_SLICES || fl.wire != PB_LEN)
			continue;
		struct pb_reader s = pb_sub(&fl);
		const uint8_t *data = NULL;
		size_t len = 0;
		bool last = false;
		while (sonde__pb_next(&s, &g) > 0) {
			if (g.num == PF_SLICE_DATA && g.wire == PB_LEN) {
				data = g.ptr;
				len = g.len;
			} else if (g.num == PF_SLICE_LAST_SLICE_FOR_PACKET && g.wire == PB_VARINT) {
				last = g.u != 0;
			}
		}
		if (!last) {
			sonde__buf_append(&c->packet, data, len);
			continue;
		}
		if (c->packet.len == 0) { /* a packet in one slice: no copy */
			if (c->cbs.on_packet)
				c->cbs.on_packet(c->cbs.ctx, data, len);
			continue;
		}
		sonde__buf_append(&c->packet, data, len);
		if (buf_error(&c->packet))
			sonde_warn("consumer: out of memory, dropping a packet");
		else if (c->cbs.on_packet)
			c->cbs.on_packet(c->cbs.ctx, c->packet.data, c->packet.len);
		sonde__buf_reset(&c->packet);
	}
}

static void complete(struct sonde_consumer *c, struct pending *p, int status,
		     const struct ipc_frame *f)
{
	struct pending done = *p;

	p->id = 0; /* free the slot first: the callback may issue a new request */
	if (done.method == CM_STATS) {
		struct sonde_trace_stats st;
		struct pb_reader r = pb_reader_init(f ? f->data : NULL, f ? f->data_len : 0);
		struct pb_field fl;
		memset(&st, 0, sizeof(st));
		while (status == 0 && sonde__pb_next(&r, &fl) > 0)
			if (fl.num == PF_GET_TRACE_STATS_RESP_TRACE_STATS && fl.wire == PB_LEN)
				status = sonde_trace_stats__decode(fl.ptr, fl.len, &st);
		if (done.stats)
			done.stats(done.ctx, status, status ? NULL : &st);
	} else if (done.method == CM_STATE) {
		struct sonde_service_state *s = NULL;
		if (status == 0)
			status = sonde_service_state__decode(c->state.data, c->state.len, &s);
		if (done.state)
			done.state(done.ctx, status, s);
		sonde_service_state__free(s);
	} else if (done.method == CM_CLONE) {
		struct sonde_clone_result res;
		if (status == 0)
			decode_clone(f, &res);
		if (done.clone)
			done.clone(done.ctx, status, status ? NULL : &res);
	} else if (done.method == CM_ENABLE) {
		if (status < 0)
			session_ended(c, "connection to the service lost");
	} else if (done.done) {
		done.done(done.ctx, status);
	}
}

static void on_state_part(struct sonde_consumer *c, const struct ipc_frame *f)
{
	struct pb_reader r = pb_reader_init(f->data, f->data_len);
	struct pb_field fl;

	/* each part is a TracingServiceState; concatenating them merges them (repeated
	 * fields append, scalars take the last value) */
	while (sonde__pb_next(&r, &fl) > 0)
		if (fl.num == PF_QUERY_SERVICE_STATE_RESP_SERVICE_STATE && fl.wire == PB_LEN)
			sonde__buf_append(&c->state, fl.ptr, fl.len);
}

static void dispatch(struct sonde_consumer *c, const struct ipc_frame *f)
{
	struct pending *p = NULL;

	for (int i = 0; i < MAX_PENDING && !p; i++)
		if (c->pending[i].id && c->pending[i].id == f->request_id)
			p = &c->pending[i];
	if (!p)
		return;
	if (f->msg == IPC_MSG_REQUEST_ERROR) {
		sonde_warn("consumer: service error: %.*s", (int)f->name_len, f->name);
		complete(c, p, -SONDE_E_PROTOCOL, NULL);
		return;
	}
	if (f->msg != IPC_MSG_INVOKE_METHOD_REPLY)
		return;
	if (p->method == CM_ENABLE) {
		p->id = 0;
		on_enable_reply(c, f);
		return;
	}
	if (f->success && p->method == CM_READ)
		on_read_reply(c, f);
	if (f->success && p->method == CM_STATE)
		on_state_part(c, f);
	if (f->success && f->has_more)
		return;
	int status = f->success ? 0 : p->method == CM_FLUSH ? -ETIMEDOUT : -SONDE_E_PROTOCOL;
	complete(c, p, status, f);
}

int sonde_consumer__process(struct sonde_consumer *c)
{
	struct ipc_frame f;
	int r;

	if (!c->eof) {
		r = sonde__conn_read(&c->c);
		if (r == -ECONNRESET)
			c->eof = true;
		else if (r < 0)
			return r;
	}
	while ((r = sonde__conn_next(&c->c, &f, NULL)) > 0)
		dispatch(c, &f);
	if (r < 0)
		return r;
	if (c->eof) {
		for (int i = 0; i < MAX_PENDING; i++)
			if (c->pending[i].id)
				complete(c, &c->pending[i], -ECONNRESET, NULL);
		return -ECONNRESET;
	}
	r = sonde__conn_flush(&c->c);
	return r < 0 ? r : 0;
}

/* ---------------------------------------------------------------- blocking layer */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs the loop until *flag is set or timeout_ms (< 0: forever) passes. */
static int run_until(struct sonde_consumer *c, const bool *flag, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;

	while (!*flag) {
		int64_t left = deadline == INT64_MAX ? -1 : deadline - now_ms();
		if (deadline != INT64_MAX && left <= 0)
			return -ETIMEDOUT;
		int r = c->eof ? 1 : sonde__conn_wait(&c->c, (int)(left > 1000 ? 1000 : left));
		if (r < 0)
			return r;
		r = sonde_consumer__process(c);
		if (*flag)
			break;
		if (r < 0)
			return r;
	}
	return 0;
}

int sonde_consumer__wait_disabled(struct sonde_consumer *c, int timeout_ms, char *error,
				  size_t error_len)
{
	int r = run_until(c, &c->session_disabled, timeout_ms);
	if (r == 0 && error && error_len)
		snprintf(error, error_len, "%s", c->disable_error);
	return r;
}

struct sync_done {
	bool done;
	int status;
	struct sonde_trace_stats *stats;
	struct sonde_service_state *state;
	struct sonde_clone_result *clone;
};

static void sync_done_cb(void *ctx, int status)
{
	struct sync_done *s = ctx;
	s->done = true;
	s->status = status;
}

static int wait_sync(struct sonde_consumer *c, struct sync_done *s, int r, int timeout_ms)
{
	if (r < 0)
		return r;
	r = run_until(c, &s->done, timeout_ms);
	if (!s->done) {
		/* the reply may still come: it must not reach this stack frame */
		for (int i = 0; i < MAX_PENDING; i++)
			if (c->pending[i].id && c->pending[i].ctx == s)
				c->pending[i].id = 0;
	}
	return r < 0 ? r : s->status;
}

int sonde_consumer__read_buffers_sync(struct sonde_consumer *c, int timeout_ms)
{
	struct sync_done s = {0};
	return wait_sync(c, &s, sonde_consumer__read_buffers(c, sync_done_cb, &s), timeout_ms);
}

int sonde_consumer__flush_sync(struct sonde_consumer *c, uint32_t flush_timeout_ms, int timeout_ms)
{
	struct sync_done s = {0};
	return wait_sync(c, &s, sonde_consumer__flush(c, flush_timeout_ms, sync_done_cb, &s),
			 timeout_ms);
}

static void sync_stats_cb(void *ctx, int status, const struct sonde_trace_stats *st)
{
	struct sync_done *s = ctx;
	s->done = true;
	s->status = status;
	if (st)
		*s->stats = *st;
}

int sonde_consumer__get_trace_stats_sync(struct sonde_consumer *c, struct sonde_trace_stats *out,
					 int timeout_ms)
{
	struct sync_done s = {.stats = out};
	return wait_sync(c, &s, sonde_consumer__get_trace_stats(c, sync_stats_cb, &s), timeout_ms);
}

static void sync_clone_cb(void *ctx, int status, const struct sonde_clone_result *res)
{
	struct sync_done *s = ctx;
	s->done = true;
	s->status = status;
	if (res)
		*s->clone = *res;
}

int sonde_consumer__clone_session_sync(struct sonde_consumer *c, uint64_t session_id,
				       const char *unique_session_name,
				       struct sonde_clone_result *out, int timeout_ms)
{
	struct sync_done s = {.clone = out};
	return wait_sync(c, &s,
			 sonde_consumer__clone_session(c, session_id, unique_session_name,
						       sync_clone_cb, &s),
			 timeout_ms);
}

/* A copy of n elements (an empty array is still a valid allocation). */
static void *dup_array(const void *src, size_t n, size_t size)
{
	void *p = sonde__malloc(n * size + 1);
	if (p && n)
		memcpy(p, src, n * size);
	return p;
}

static void sync_state_cb(void *ctx, int status, const struct sonde_service_state *st)
{
	struct sync_done *s = ctx;
	s->done = true;
	s->status = status;
	if (!st)
		return;
	/* the callback's state is freed after the call: take a deep copy */
	struct sonde_service_state *cp = sonde__calloc(1, sizeof(*cp));
	if (!cp) {
		s->status = -ENOMEM;
		return;
	}
	*cp = *st;
	cp->producers = dup_array(st->producers, st->n_producers, sizeof(*cp->producers));
	cp->data_sources =
		dup_array(st->data_sources, st->n_data_sources, sizeof(*cp->data_sources));
	cp->sessions = dup_array(st->sessions, st->n_sessions, sizeof(*cp->sessions));
	if (!cp->producers || !cp->data_sources || !cp->sessions) {
		sonde_service_state__free(cp);
		s->status = -ENOMEM;
		return;
	}
	s->state = cp;
}

int sonde_consumer__query_service_state_sync(struct sonde_consumer *c,
					     struct sonde_service_state **out, int timeout_ms)
{
	struct sync_done s = {0};
	int r = wait_sync(c, &s, sonde_consumer__query_service_state(c, sync_state_cb, &s),
			  timeout_ms);
	if (r < 0) {
		sonde_service_state__free(s.state);
		return r;
	}
	*out = s.state;
	return 0;
}
