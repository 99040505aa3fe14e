/* The IPC host: listening sockets, connections, BindService/InvokeMethod dispatch
 * (perfetto-wire.md §1), and the public sonde_service API. */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/service.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "ipc/addr.h"
#include "ipc/protos.h"
#include "ipc/sock.h"
#include "service/fwriter.h"
#include "service/internal.h"
#include "service/session.h"
#include "service/outfile.h"

struct sonde_service {
	struct svc s;
};

/* Method names in .proto order: the index + 1 is the method id. NULL marks a method this
 * service does not implement; it is left out of BindServiceReply so clients skip it. */
static const char *const producer_methods[] = {
	"InitializeConnection",
	"RegisterDataSource",
	"UnregisterDataSource",
	"CommitData",
	"GetAsyncCommand",
	"RegisterTraceWriter",
	"UnregisterTraceWriter",
	"NotifyDataSourceStarted",
	"NotifyDataSourceStopped",
	"ActivateTriggers",
	"Sync",
	"UpdateDataSource",
};
static const char *const consumer_methods[] = {
	"EnableTracing",
	"DisableTracing",
	"ReadBuffers",
	"FreeBuffers",
	"Flush",
	"StartTracing",
	"ChangeTraceConfig",
	"Detach",
	"Attach",
	"GetTraceStats",
	"ObserveEvents",
	"QueryServiceState",
	"QueryCapabilities",
	NULL, /* SaveTraceForBugreport */
	"CloneSession",
};
static const char *const relay_methods[] = {
	"InitRelay",
	"SyncClock",
};
#define NMETHODS(a) (sizeof(a) / sizeof((a)[0]))

char *sonde__svc_strndup(const uint8_t *p, size_t n)
{
	char *s = sonde__malloc(n + 1);

	if (s) {
		memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

struct conn *sonde__svc_conn(struct svc *s, uint64_t id)
{
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i]->id == id && !s->conns[i]->dead)
			return s->conns[i];
	return NULL;
}

void sonde__svc_conn_update_events(struct svc *s, struct conn *c)
{
	/* a held connection is not read: what it sends waits in its socket, whose buffer
	 * then stops the sender; at EOF there is nothing left to read */
	uint32_t want = (c->held || c->eof ? 0 : EPOLLIN) |
			(ipc_chan_tx_pending(&c->ch) ? EPOLLOUT : 0);

	if (c->dead || want == c->events)
		return;
	c->events = want;
	if (sonde__loop_mod(&s->loop, c->ch.fd, want, c->id) < 0)
		sonde__svc_conn_fail(s, c);
}

void sonde__svc_conn_fail(struct svc *s, struct conn *c)
{
	(void)s;
	c->dead = true; /* torn down by reap(), outside of any handler */
}

int sonde__svc_send_reply(struct conn *c, uint64_t req_id, bool success, bool has_more,
		   const uint8_t *data, size_t len, int fd)
{
	struct ipc_frame f = {.request_id = req_id,
			      .msg = IPC_MSG_INVOKE_METHOD_REPLY,
			      .success = success,
			      .has_more = has_more,
			      .data = data ? data : (const uint8_t *)"",
			      .data_len = data ? len : 0};
	int rc;

	if (c->dead)
		return -EPIPE;
	if (!success)
		f.data = NULL;
	rc = sonde__ipc_chan_send(&c->ch, &f, fd);
	if (rc == -SONDE_E_LIMIT) {
		/* a reply no frame can hold (nothing was queued): the call fails, and the
		 * connection, which did nothing wrong, stays */
		sonde_warn("connection %llu: a reply of %zu bytes does not fit a frame; the "
			   "call fails",
			   (unsigned long long)c->id, len);
		f.success = false;
		f.has_more = false;
		f.data = (const uint8_t *)"";
		f.data_len = 0;
		rc = sonde__ipc_chan_send(&c->ch, &f, -1);
	}
	if (rc < 0)
		c->dead = true;
	return rc;
}

int sonde__svc_reply(struct req *r, const struct buf *reply, bool has_more)
{
	if (r->drop_reply)
		return 0;
	return sonde__svc_send_reply(r->c, r->id, true, has_more, reply ? reply->data : NULL,
			      reply ? reply->len : 0, -1);
}

static bool name_is(const char *name, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(name, want, len) == 0;
}

static void send_bind_reply(struct conn *c, uint64_t id, const char *name, size_t len)
{
	const char *want = c->is_producer ? "ProducerPort" : "ConsumerPort";
	struct ipc_frame f = {.request_id = id, .msg = IPC_MSG_BIND_SERVICE_REPLY};

	if (name_is(name, len, want)) {
		f.success = true;
		f.service_id = 1;
		f.method_names = c->is_producer ? producer_methods : consumer_methods;
		f.n_methods =
			c->is_producer ? NMETHODS(producer_methods) : NMETHODS(consumer_methods);
		c->bound = true;
	} else if (name_is(name, len, RELAY_SERVICE_NAME) && c->relay_conn) {
		/* only on a relay socket: InitRelay describes a machine, which only a relay
		 * may speak for */
		f.success = true;
		f.service_id = SVC_RELAY_SERVICE_ID;
		f.method_names = relay_methods;
		f.n_methods = NMETHODS(relay_methods);
		c->relay_bound = true;
	} else if (name_is(name, len, RELAY_SERVICE_NAME)) {
		sonde_debug("connection %llu: RelayPort refused: not a relay socket",
			    (unsigned long long)c->id);
	}
	if (sonde__ipc_chan_send(&c->ch, &f, -1) < 0)
		c->dead = true;
}

static void invoke_relay(struct svc *s, struct conn *c, const struct ipc_frame *f)
{
	struct req r = {c, f->request_id, f->drop_reply, f->data, f->data_len, -1};
	int rc = -ENOSYS;

	if (c->relay_bound && f->method_id >= 1 && f->method_id <= NMETHODS(relay_methods)) {
		if (!r.args)
			r.args = (const uint8_t *)"";
		rc = sonde__machine_relay_dispatch(s, &r, f->method_id);
	}
	if (rc < 0 && (!f->drop_reply || rc == -SONDE_E_FORMAT))
		sonde__svc_send_reply(c, f->request_id, false, false, NULL, 0, -1);
}

static void invoke(struct svc *s, struct conn *c, const struct ipc_frame *f, int *fd)
{
	const char *const *names = c->is_producer ? producer_methods : consumer_methods;
	size_t n = c->is_producer ? NMETHODS(producer_methods) : NMETHODS(consumer_methods);
	struct req r = {c, f->request_id, f->drop_reply, f->data, f->data_len, *fd};
	int rc;

	if (f->service_id == SVC_RELAY_SERVICE_ID && c->is_producer)
		return invoke_relay(s, c, f);
	if (!c->bound || f->service_id != 1 || f->method_id == 0 || f->method_id > n ||
	    !names[f->method_id - 1]) {
		sonde__svc_send_reply(c, f->request_id, false, false, NULL, 0, -1);
		return;
	}
	if (!r.args)
		r.args = (const uint8_t *)"";
	rc = c->is_producer ? sonde__producer_dispatch(s, &r, f->method_id)
			    : sonde__consumer_dispatch(s, &r, f->method_id);
	*fd = r.fd;
	/* unparsable arguments are answered even under drop_reply (§1.5) */
	if (rc < 0 && (!f->drop_reply || rc == -SONDE_E_FORMAT))
		sonde__svc_send_reply(c, f->request_id, false, false, NULL, 0, -1);
}

/* The frames a client may attach an fd to (§1.6): the producer's SMB, the consumer's
 * output file. The method takes the fd or it is closed after the method ran. */
static bool fd_expected(const struct conn *c, const struct ipc_frame *f)
{
	if (f->msg != IPC_MSG_INVOKE_METHOD)
		return false;
	if (c->is_producer)
		return f->method_id == PF_PRODUCER_INITIALIZE_CONNECTION;
	return f->method_id == PF_CONSUMER_ENABLE_TRACING ||
	       f->method_id == PF_CONSUMER_CLONE_SESSION;
}

static void handle_frame(struct svc *s, struct conn *c, const struct ipc_frame *f, int fd)
{
	if (fd >= 0 && !fd_expected(c, f)) {
		/* a descriptor nobody asked for: close it now and the connection with it, so
		 * that a client cannot pile descriptors up in the service */
		sonde_debug("connection %llu: an fd came with a frame that takes none",
			    (unsigned long long)c->id);
		close(fd);
		c->dead = true;
		return;
	}
	switch (f->msg) {
	case IPC_MSG_BIND_SERVICE:
		send_bind_reply(c, f->request_id, f->name, f->name_len);
		break;
	case IPC_MSG_INVOKE_METHOD:
		invoke(s, c, f, &fd);
		break;
	case IPC_MSG_SET_PEER_IDENTITY:
		/* believed only from a relay socket's connection (machine.c) */
		sonde__machine_peer_identity(s, c, f);
		break;
	case IPC_MSG_BIND_SERVICE_REPLY:
	case IPC_MSG_INVOKE_METHOD_REPLY:
	case IPC_MSG_REQUEST_ERROR:
		/* Only a service sends these: the peer is a service, perhaps this one through a
		 * socket that leads back to it. Answering would start an endless exchange of
		 * errors between two services, so the connection ends instead. */
		sonde_warn("connection %llu (pid %d) sent a reply, not a request: closing",
			   (unsigned long long)c->id, (int)c->ch.peer_pid);
		c->dead = true;
		break;
	default: {
		struct ipc_frame e = {.request_id = f->request_id,
				      .msg = IPC_MSG_REQUEST_ERROR,
				      .name = "unknown request",
				      .name_len = 15};
		if (sonde__ipc_chan_send(&c->ch, &e, -1) < 0)
			c->dead = true;
	}
	}
	if (fd >= 0)
		close(fd);
}

/* Bytes unsent on the connections of uid. */
static size_t uid_unsent(const struct svc *s, uid_t uid)
{
	size_t n = 0;

	for (size_t i = 0; i < s->nconns; i++)
		if (!s->conns[i]->dead && s->conns[i]->ch.peer_uid == uid)
			n += ipc_chan_tx_pending(&s->conns[i]->ch);
	return n;
}

/* Whether c's replies go unread, so that its requests must wait: a client that sends
 * requests and never reads the replies would otherwise make the service queue them
 * without bound (64 such connections of one user took 1.1 GB). A connection with nothing
 * unsent is never held for its uid's sake: a uid's idle connections stay served. */
static bool replies_unread(const struct svc *s, const struct conn *c)
{
	size_t mine = ipc_chan_tx_pending(&c->ch);

	return mine >= SVC_CONN_REPLY_BYTES ||
	       (mine && uid_unsent(s, c->ch.peer_uid) >= SVC_UID_REPLY_BYTES);
}

/* c's turn: up to SVC_FRAMES_PER_TURN of its buffered requests, unless its replies go
 * unread. One connection's pipelined requests thus cannot keep the loop from the
 * others: whatever is left waits for the next round (sonde_service__process). */
static void conn_turn(struct svc *s, struct conn *c)
{
	struct ipc_frame f;
	int n = 0, fd;

	c->turn = s->turn;
	c->backlog = false;
	for (int k = 0; !c->dead; k++) {
		if ((c->held = replies_unread(s, c)))
			break;
		if (k == SVC_FRAMES_PER_TURN) {
			c->backlog = sonde__ipc_chan_queued(&c->ch, 1) > 0;
			break;
		}
		if ((n = sonde__ipc_chan_next(&c->ch, &f, &fd)) <= 0)
			break;
		handle_frame(s, c, &f, fd);
	}
	if (n < 0)
		c->dead = true;
	if (c->dead)
		return;
	size_t waiting = c->held ? sonde__ipc_chan_queued(&c->ch, SVC_MAX_WAITING_REQS + 1) : 0;
	if (waiting > SVC_MAX_WAITING_REQS) {
		sonde_warn("connection %llu (pid %d, uid %d): over %d requests wait while its "
			   "replies go unread; closing",
			   (unsigned long long)c->id, (int)c->ch.peer_pid, (int)c->ch.peer_uid,
			   SVC_MAX_WAITING_REQS);
		c->dead = true;
	} else if (c->eof && (c->held || !sonde__ipc_chan_queued(&c->ch, 1))) {
		c->dead = true; /* gone, and everything it sent was handled (or never will be) */
	}
}

static void conn_io(struct svc *s, struct conn *c, uint32_t events)
{
	if ((events & EPOLLOUT) && sonde__ipc_chan_flush(&c->ch) < 0)
		c->dead = true;
	if (!c->dead && !c->held && !c->eof && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
		int rc = sonde__ipc_chan_read(&c->ch);
		if (rc == -ECONNRESET) {
			c->eof = true; /* what it sent before is still handled, in turns */
		} else if (rc < 0) {
			sonde_debug("connection %llu: %s", (unsigned long long)c->id,
				    sonde_strerror(rc));
			c->dead = true;
		}
	} else if (!c->dead && c->held && (events & (EPOLLHUP | EPOLLERR))) {
		/* a held connection is not read, so only its peer hanging up wakes it: gone,
		 * the peer can read none of the replies it awaits */
		c->dead = true;
	}
	if (!c->dead)
		conn_turn(s, c);
	if (!c->dead)
		sonde__sec_pending_ok(s, c, 0);
	if (!c->dead && !c->is_producer && c->k.reading &&
	    ipc_chan_tx_pending(&c->ch) < SVC_READ_PAUSE_BYTES / 2)
		sonde__consumer_continue_read(s, c);
	sonde__svc_conn_update_events(s, c);
}

/* A round over the connections that did not have their turn in this iteration but want
 * one: requests left over from their last turn, or held ones whose uid may have drained
 * meanwhile. */
static void serve_waiting(struct svc *s)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->dead || c->turn == s->turn || !(c->backlog || c->held || c->eof))
			continue;
		conn_turn(s, c);
		if (!c->dead && !c->is_producer && c->k.reading &&
		    ipc_chan_tx_pending(&c->ch) < SVC_READ_PAUSE_BYTES / 2)
			sonde__consumer_continue_read(s, c);
		sonde__svc_conn_update_events(s, c);
	}
}

bool sonde__service_writers_busy(struct sonde_service *ss)
{
	for (size_t i = 0; i < ss->s.nsessions; i++)
		if (ss->s.sessions[i]->fw && sonde__fwriter_busy(ss->s.sessions[i]->fw))
			return true;
	return false;
}

static uint64_t chan_now(void *ctx)
{
	return sonde__svc_now(ctx);
}

struct conn *sonde__svc_add_conn(struct svc *s, int fd, bool producer)
{
	struct conn *c = sonde__calloc(1, sizeof(*c));
	struct conn **v = sonde__realloc(s->conns, (s->nconns + 1) * sizeof(*v));

	if (v)
		s->conns = v;
	if (!c || !v || sonde__ipc_chan_init(&c->ch, fd) < 0) {
		if (c)
			sonde__ipc_chan_close(&c->ch);
		else
			close(fd);
		sonde__free(c);
		return NULL;
	}
	c->id = s->next_conn_id++;
	c->accepted_ns = sonde__svc_now(s);
	c->ch.now_ns = chan_now; /* the stall watchdog runs on the service's clock */
	c->ch.now_ctx = s;
	c->is_producer = producer;
	c->p.smb_fd = -1;
	c->k.clone_fd = -1;
	c->events = EPOLLIN;
	if (sonde__sec_peer_identity(c, fd) < 0 || sonde__loop_add(&s->loop, fd, EPOLLIN, c->id) < 0) {
		sonde__ipc_chan_close(&c->ch);
		sonde__free(c);
		return NULL;
	}
	s->conns[s->nconns++] = c;
	return c;
}

static void resume_accept(void *ctx, uint64_t arg)
{
	struct svc *s = ctx;
	int rc = sonde__loop_mod(&s->loop, (int)(arg >> 32), EPOLLIN, arg & UINT32_MAX);

	if (rc < 0)
		sonde_error("cannot watch a listening socket again: %s", sonde_strerror(rc));
}

/* Out of descriptors, no client can connect: say so at warn level, but at most once a
 * second (a listener retries every 100 ms), with the number of failures not reported. */
static void warn_accept(struct svc *s, int err)
{
	uint64_t now = sonde__svc_now(s);

	if (s->accept_warn_ns && now - s->accept_warn_ns < 1000000000ull) {
		s->accept_unreported++;
		return;
	}
	if (s->accept_unreported)
		sonde_warn("cannot accept connections: %s (%llu more failures since the last "
			   "report)",
			   sonde_strerror(-err), (unsigned long long)s->accept_unreported);
	else
		sonde_warn("cannot accept connections: %s", sonde_strerror(-err));
	s->accept_warn_ns = now;
	s->accept_unreported = 0;
}

void sonde__svc_accept_failed(struct svc *s, int lfd, uint64_t cookie, int err)
{
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
		return; /* EAGAIN, or a transient error: the listener stays */
	warn_accept(s, err);
	/* Out of fds or memory, the peer stays in the backlog and the listener readable: a
	 * level-triggered epoll would wake the loop at once, forever. Stop watching the
	 * listener for a moment instead. The timer's arg packs the fd and the cookie (a
	 * listener's cookie is below 2^32). */
	if (sonde__loop_mod(&s->loop, lfd, 0, cookie) == 0)
		sonde__loop_timer_add(&s->loop, 100, resume_accept,
			       (uint64_t)lfd << 32 | (uint32_t)cookie);
}

static void accept_conns(struct svc *s, size_t li)
{
	const struct svc_listener *l = &s->lis[li];
	int which = l->consumer;

	/* bounded per wake-up (level-triggered: the rest comes in the next iteration), so a
	 * peer connecting as fast as it is refused cannot keep the loop from the others */
	for (int k = 0; k < SVC_ACCEPT_BATCH; k++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			sonde__svc_accept_failed(s, l->fd, SVC_COOKIE_LISTENER + li, errno);
			return;
		}
		struct ucred cr = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
		socklen_t len = sizeof(cr);
		bool remote = !sonde__ipc_is_unix(fd);
		if (remote)
			sonde__ipc_sock_tune(fd);
		/* remote peers share one per-uid quota: the unknown uid's */
		if ((!remote && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) ||
		    !sonde__sec_admit_conn(s, cr.uid, l->relay)) {
			close(fd);
			continue;
		}
		/* never trusted as the probes, whatever its pid: they come over the channel
		 * sonded made for them (sonde_service__add_probes), not through a name */
		struct conn *c = sonde__svc_add_conn(s, fd, which == 0);
		if (c)
			c->relay_conn = l->relay;
		if (c && remote)
			sonde_debug("%s connected over the network%s: uid unknown",
				    which ? "consumer" : "producer",
				    l->relay ? " on a relay socket" : "");
		else if (c)
			sonde_debug("%s connected: pid %d uid %d", which ? "consumer" : "producer",
				    (int)c->ch.peer_pid, (int)c->ch.peer_uid);
	}
}

static void on_io(void *ctx, uint64_t cookie, uint32_t events)
{
	struct svc *s = ctx;

	if (cookie >= SVC_COOKIE_LISTENER && cookie < SVC_COOKIE_LISTENER + s->nlis) {
		accept_conns(s, (size_t)(cookie - SVC_COOKIE_LISTENER));
		return;
	}
	if (sonde__connector_owns(s, cookie)) {
		sonde__connector_io(s, cookie, events);
		return;
	}
	if (sonde__outfile_io(s, cookie))
		return;
	struct conn *c = sonde__svc_conn(s, cookie);
	if (c)
		conn_io(s, c, events);
}

static void destroy_conn(struct svc *s, struct conn *c)
{
	s->freed_bytes += c->ch.rx.cap + c->ch.tx.cap;
	sonde__loop_del(&s->loop, c->ch.fd);
	if (c->is_producer)
		sonde__producer_gone(s, c);
	else
		sonde__consumer_gone(s, c);
	sonde__ipc_chan_close(&c->ch);
	sonde__free(c);
}

/* Gives the memory of connections gone back to the system: freed, the buffers of many
 * connections (each up to a few hundred KiB, some MiB) stay in the heap, between blocks
 * still in use, where free() cannot return them. At most once a second unless forced. */
static void trim(struct svc *s, bool force)
{
	uint64_t now = sonde__svc_now(s);

	if (!s->freed_bytes || (!force && (s->freed_bytes < (1u << 20) ||
					   now - s->trim_ns < 1000000000ull)))
		return;
	malloc_trim(0);
	s->freed_bytes = 0;
	s->trim_ns = now;
}

/* Tears down dead connections. Teardown can kill others (a send to a peer fails), so it
 * repeats until none is left. */
static void reap(struct svc *s)
{
	for (size_t i = 0; i < s->nconns;) {
		struct conn *c = s->conns[i];
		if (!c->dead) {
			i++;
			continue;
		}
		s->conns[i] = s->conns[--s->nconns];
		destroy_conn(s, c);
		i = 0;
	}
	trim(s, false);
}

static void housekeeping(void *ctx, uint64_t arg)
{
	struct svc *s = ctx;
	/* the channel stamps a stalled send with the service's clock (chan_now), as the
	 * handshake deadline */
	uint64_t now = sonde__svc_now(s);

	/* §1.2: a peer that does not drain its socket for 10 s (stall_timeout_ms) is
	 * disconnected */
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->ch.tx_stalled_ns && now - c->ch.tx_stalled_ns > s->lim.stall_ns) {
			unsigned long long ms = s->lim.stall_ns / 1000000;
			sonde_warn("connection %llu: peer did not read for %llu %s, closing",
				   (unsigned long long)c->id, ms % 1000 ? ms : ms / 1000,
				   ms % 1000 ? "ms" : "s");
			c->dead = true;
		}
		sonde__sec_pending_ok(s, c, 0);
		/* a network peer that connects and says nothing would hold its slot for ever */
		if (c->remote && !c->dead && !sonde__sec_handshake_done(c) &&
		    now - c->accepted_ns > s->lim.handshake_ns) {
			sonde_info("connection %llu (remote%s): no handshake within %llu ms; closing",
				   (unsigned long long)c->id, c->relay_conn ? ", relay socket" : "",
				   (unsigned long long)(s->lim.handshake_ns / 1000000));
			c->dead = true;
		}
	}
	sonde__session_reap_writers(s, 0);
	trim(s, true);
	s->t_housekeeping = sonde__loop_timer_add(&s->loop, 1000, housekeeping, 0);
}

void sonde__svc_listen_failed(const char *name, int err)
{
	/* one line that says what to do about it: this is how a second instance ends */
	if (err == -EADDRINUSE)
		sonde_error("%s: a tracing service is already running there", name);
	else if (err == -EEXIST)
		sonde_error("%s: exists and is not a socket; not replacing it", name);
	else
		sonde_error("cannot listen on %s: %s", name, sonde_strerror(err));
}

static int listen_one(struct svc *s, const struct sonde_service_opts *o, int which,
		      const char *name, size_t len)
{
	struct svc_listener *l = &s->lis[s->nlis];
	char *n = sonde__svc_strndup((const uint8_t *)name, len);
	int fd;

	if (!n)
		return -ENOMEM;
	fd = sonde__sec_listen(o, which, n, &l->bound);
	if (fd < 0) {
		sonde__svc_listen_failed(n, fd);
		sonde__free(n);
		return fd;
	}
	l->fd = fd;
	l->consumer = which == 1;
	l->relay = false;
	l->name = n;
	s->nlis++;
	return sonde__loop_add(&s->loop, fd, EPOLLIN, SVC_COOKIE_LISTENER + s->nlis - 1);
}

/* The consumer socket, or each name of the producer's list (as Perfetto's service listens
 * on each); a TCP or vsock name only when given explicitly. */
static int listen_on(struct svc *s, const struct sonde_service_opts *o, int which, const char *name)
{
	const char *one;
	size_t pos = 0, len, n = 0, first = s->nlis;
	int rc;

	if (which == 1) {
		if (!(s->sock_name[1] = sonde__strdup(name)))
			return -ENOMEM;
		return listen_one(s, o, which, name, strlen(name));
	}
	while (sonde__ipc_addr_list_next(name, &pos, &one, &len)) {
		if (n++ == SVC_MAX_PRODUCER_SOCKETS) {
			sonde_error("%s: more than %d producer sockets", name,
				    SVC_MAX_PRODUCER_SOCKETS);
			return -E2BIG;
		}
		if ((rc = listen_one(s, o, which, one, len)) < 0)
			return rc;
	}
	if (n == 0) {
		sonde_error("no producer socket name in \"%s\"", name);
		return -EINVAL;
	}
	/* the list again with the Unix names first: a local client given it (sonded's own
	 * probes) connects where SO_PEERCRED works */
	if (!(s->sock_name[0] = sonde__malloc(strlen(name) + 1)))
		return -ENOMEM;
	s->sock_name[0][0] = '\0';
	for (int unix_pass = 1; unix_pass >= 0; unix_pass--)
		for (size_t i = first; i < s->nlis; i++) {
			struct ipc_addr a;
			const char *ln = s->lis[i].name;
			bool is_unix = sonde__ipc_addr_parse(ln, strlen(ln), &a) == 0 &&
				       a.kind == IPC_ADDR_UNIX;
			if (is_unix != (unix_pass == 1))
				continue;
			if (s->sock_name[0][0])
				strcat(s->sock_name[0], ",");
			strcat(s->sock_name[0], ln);
		}
	return 0;
}

/* The relay sockets: producer sockets whose peers are relays. A network name only: over
 * AF_UNIX, SO_PEERCRED says who the peer is and nobody need vouch for it. */
static int listen_relay(struct svc *s, const struct sonde_service_opts *o, const char *names)
{
	const char *one;
	size_t pos = 0, len, n = 0;
	struct ipc_addr a;
	int rc;

	while (sonde__ipc_addr_list_next(names, &pos, &one, &len)) {
		if (n++ == SVC_MAX_RELAY_SOCKETS) {
			sonde_error("%s: more than %d relay sockets", names, SVC_MAX_RELAY_SOCKETS);
			return -E2BIG;
		}
		if (sonde__ipc_addr_parse(one, len, &a) < 0 || a.kind == IPC_ADDR_UNIX) {
			sonde_error("relay socket %.*s: not a HOST:PORT, [V6]:PORT or "
				    "vsock://CID:PORT address",
				    (int)len, one);
			return -EINVAL;
		}
		if ((rc = listen_one(s, o, 0, one, len)) < 0)
			return rc;
		s->lis[s->nlis - 1].relay = true;
		sonde_info("accepting relays on %.*s", (int)len, one);
	}
	return 0;
}

/* The host's machine name for machine_name_filter: as Perfetto's, $PERFETTO_MACHINE_NAME,
 * else the kernel's name (uname -s); sonded --machine-name before both. */
static char *host_machine_name(const char *given)
{
	const char *env = getenv("PERFETTO_MACHINE_NAME");
	struct utsname u;

	if (given && *given)
		return sonde__strdup(given);
	if (env && *env)
		return sonde__strdup(env);
	return sonde__strdup(uname(&u) == 0 ? u.sysname : "");
}

struct sonde_service *sonde_service__new(const struct sonde_service_opts *opts)
{
	struct sonde_service *ss;
	const char *prod = NULL, *cons = NULL;
	int rc;

	if (!OPTS_VALID(opts, sonde_service_opts)) {
		errno = EINVAL;
		return NULL;
	}
	if (!(ss = sonde__calloc(1, sizeof(*ss))))
		return NULL;
	struct svc *s = &ss->s;
	s->next_conn_id = SVC_FIRST_CONN_ID;
	s->file_wake_fd = -1;
	s->next_instance_id = s->next_session_id = s->next_flush_id = 1;
	s->next_producer_id = 1;
	s->uid = getuid();
	/* opts of an older, smaller layout: zeros select the defaults */
	struct sonde_service_opts o = {0};
	OPTS_COPY(&o, opts);
	prod = o.producer_socket;
	cons = o.consumer_socket;
	sonde__sec_init(s, &o);
	rc = sonde__loop_init(&s->loop, on_io, s);
	if (rc == 0)
		rc = listen_on(s, &o, 0, prod ? prod : sonde__ipc_default_sock_name(IPC_PORT_PRODUCER));
	if (rc == 0)
		rc = listen_on(s, &o, 1, cons ? cons : sonde__ipc_default_sock_name(IPC_PORT_CONSUMER));
	if (rc == 0 && o.relay_socket && *o.relay_socket)
		rc = listen_relay(s, &o, o.relay_socket);
	if (rc == 0 && !(s->machine_name = host_machine_name(o.machine_name)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = sonde__connector_init(s, &o);
	if (rc == 0)
		rc = sonde__outfile_init(s);
	if (rc == 0 && !(s->t_housekeeping = sonde__loop_timer_add(&s->loop, 1000, housekeeping, 0)))
		rc = -ENOMEM;
	if (rc < 0) {
		sonde_service__free(ss);
		errno = -rc;
		return NULL;
	}
	return ss;
}

int sonde_service__fd(const struct sonde_service *ss)
{
	return ss->s.loop.epfd;
}

/* Requests left over from a turn: the next round comes at once. */
static bool has_backlog(const struct svc *s)
{
	for (size_t i = 0; i < s->nconns; i++) {
		const struct conn *c = s->conns[i];
		if (!c->dead && !c->held && (c->backlog || c->eof))
			return true;
	}
	return false;
}

int sonde_service__timeout_ms(const struct sonde_service *ss)
{
	return has_backlog(&ss->s) ? 0 : sonde__loop_timeout_ms(&ss->s.loop);
}

int sonde_service__watch_fd(struct sonde_service *ss, int fd)
{
	return sonde__loop_watch(&ss->s.loop, fd);
}

int sonde_service__poll(struct sonde_service *ss, int timeout_ms)
{
	struct svc *s = &ss->s;

	s->turn++;
	/* the loop itself waits no longer than its next timer */
	int rc = sonde__loop_process(&s->loop, has_backlog(s) ? 0 : timeout_ms);
	serve_waiting(s);
	reap(s);
	return rc < 0 ? rc : s->loop.watch_ready;
}

int sonde_service__process(struct sonde_service *ss)
{
	int rc = sonde_service__poll(ss, 0);

	return rc < 0 ? rc : 0;
}

const char *sonde_service__socket(const struct sonde_service *ss, int which)
{
	if (which == SONDE_SOCKET_CONNECTOR)
		return sonde__connector_path(&ss->s);
	return ss->s.sock_name[which ? 1 : 0];
}

void sonde_service__trust_probes(struct sonde_service *ss, pid_t pid)
{
	if (!ss)
		return;
	ss->s.probes_pid = pid > 0 ? pid : 0;
	for (size_t i = 0; i < ss->s.nconns; i++)
		if (ss->s.conns[i]->ch.peer_pid != ss->s.probes_pid)
			ss->s.conns[i]->trusted_probes = false;
}

int sonde_service__add_probes(struct sonde_service *ss, int fd, pid_t pid)
{
	struct svc *s = &ss->s;

	if (pid <= 0 || !sonde__ipc_is_unix(fd)) {
		close(fd);
		return -EINVAL;
	}
	struct conn *c = sonde__svc_add_conn(s, fd, true);
	if (!c)
		return -ENOMEM;
	/* SO_PEERCRED of a socketpair names its creator, sonded: the peer is the child it
	 * was made for, which runs as sonded's user */
	c->ch.peer_pid = pid;
	c->ch.peer_uid = s->uid;
	c->peer_gid = (uint32_t)getegid();
	c->trusted_probes = true;
	c->probes_channel = true;
	s->probes_pid = pid;
	sonde_debug("producer connected: sonded's probes (pid %d), over the channel made for them",
		    (int)pid);
	return 0;
}

void sonde__service_set_clock(struct sonde_service *ss, loop_clock_fn now_ns, void *clock_ctx)
{
	sonde__loop_set_clock(&ss->s.loop, now_ns, clock_ctx);
}

int sonde__service_adopt(struct sonde_service *ss, int fd, bool producer)
{
	return sonde__svc_add_conn(&ss->s, fd, producer) ? 0 : -ENOMEM;
}

void sonde_service__free(struct sonde_service *ss)
{
	if (!ss)
		return;
	struct svc *s = &ss->s;
	for (size_t i = 0; i < s->nconns; i++)
		s->conns[i]->dead = true;
	reap(s);
	while (s->nsessions) /* detached or orphaned sessions */
		sonde__session_free(s, s->sessions[0]);
	sonde__session_reap_writers(s, 2000); /* their files get 2 s to take what is queued */
	sonde__outfile_fini(s);
	sonde__connector_free(s);
	for (size_t i = 0; i < s->nlis; i++) {
		close(s->lis[i].fd);
		sonde__ipc_unlink_bound(s->lis[i].name, &s->lis[i].bound);
		sonde__free(s->lis[i].name);
	}
	sonde__free(s->sock_name[0]);
	sonde__free(s->sock_name[1]);
	sonde__free(s->machine_name);
	sonde__machine_free_all(s);
	sonde__trigger_svc_free(s);
	sonde__bufid_free(s);
	sonde__free(s->conns);
	sonde__free(s->ds);
	sonde__free(s->sessions);
	sonde__free(s->flushes);
	sonde__buf_free(&s->scratch);
	sonde__loop_free(&s->loop);
	sonde__free(ss);
}
