/* The connector (the seed's ProducerConnector, ConsumerConnector and BufferReceiver):
 * a SOCK_SEQPACKET socket where a supervisor hands the service an already-connected
 * socket for a producer or a consumer, with SCM_RIGHTS, and for a producer optionally
 * a shared memory buffer (its own, or one the service creates and returns).
 *
 * A handed-over socket becomes an ordinary connection (host.c), indistinguishable from
 * an accepted one except for its identity: the connector peer's SO_PEERCRED, or a
 * narrower identity that peer may grant (docs/service.md "Trust model"). Nothing else in
 * a request is trusted: each fd is checked for what it must be before it is used. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/service.h>

#include "base/alloc.h"
#include "ipc/cxmsg.h"
#include "ipc/fdpass.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "service/internal.h"

enum {
	CX_MAX_CLIENTS = 64,   /* supervisors connected at once */
	CX_BATCH = 32,	       /* requests handled per wake-up of one client */
	CX_ACCEPT_BATCH = 16,  /* clients accepted per wake-up of the listener */
	CX_NOBODY_GID = 65534, /* the gid of a granted uid when none is granted */
};

struct cx_client {
	uint64_t cookie;
	int fd;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool caps_known; /* its capabilities, read at accept (sonde__sec_peer_caps) */
	uint64_t cap_eff;
	uint64_t pid_start;
};

struct svc_connector {
	int lfd;
	uint64_t lcookie;
	char *path;
	struct ipc_bound bound; /* the socket file, unlinked at exit if still ours */
	struct cx_client cl[CX_MAX_CLIENTS];
	size_t ncl;
};

struct cx_ctx {
	struct cx_reply rep;
	int reply_fd; /* sent with the reply (not owned) */
};

static int status(struct cx_ctx *x, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int status(struct cx_ctx *x, int err, const char *fmt, ...)
{
	va_list ap;

	x->rep.status = (uint32_t)err;
	va_start(ap, fmt);
	vsnprintf(x->rep.message, sizeof(x->rep.message), fmt, ap);
	va_end(ap);
	return -err;
}

/* A socket connected to one of the service's own listening sockets would make the
 * service its own client: every frame one end sends, the other end answers. The peer of
 * such a socket is the listener, whose SO_PEERCRED is the process that called listen():
 * this one. No legitimate client is served by sonded itself, so that is refused. */
static int check_not_self(struct cx_ctx *x, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return status(x, ENOTCONN, "the socket has no peer credentials");
	if (cr.pid == getpid())
		return status(x, ELOOP,
			      "the socket is connected to this service itself (to one of its own "
			      "sockets): a self-connection is refused");
	return 0;
}

/* The handed-over socket must be a connected AF_UNIX stream socket: not a listener
 * (accepting on the service's behalf), not a datagram socket. */
static int check_socket(struct cx_ctx *x, int fd)
{
	int dom = 0, type = 0, acc = 0;
	socklen_t l1 = sizeof(dom), l2 = sizeof(type), l3 = sizeof(acc);
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l1) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) < 0)
		return status(x, ENOTSOCK, "the first fd is not a socket");
	if (dom != AF_UNIX || type != SOCK_STREAM)
		return status(x, ENOTSOCK, "the first fd is not an AF_UNIX stream socket");
	if (acc || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
		return status(x, ENOTCONN, "the socket is not connected");
	return check_not_self(x, fd);
}

/* Trust model: the connection carries the supervisor's identity, or one it may grant:
 * root may grant any uid and gid, anybody else only its own. */
static int grant_identity(struct cx_ctx *x, const struct cx_client *cl, const struct cx_request *q,
			  uid_t *uid, gid_t *gid)
{
	*uid = cl->uid;
	*gid = cl->gid;
	/* (uid_t)-1 is no one's uid: the kernel refuses it in setuid() and uses it to mean
	 * "unchanged" or "unmapped", so granting it could only make it collide with such a
	 * marker somewhere. */
	if (q->has_uid && q->uid == (uint32_t)(uid_t)-1)
		return status(x, EINVAL, "uid %u is not a valid uid", q->uid);
	if (q->has_gid && q->gid == (uint32_t)(gid_t)-1)
		return status(x, EINVAL, "gid %u is not a valid gid", q->gid);
	if (q->has_uid && q->uid != cl->uid) {
		if (cl->uid != 0)
			return status(x, EPERM, "uid %u may not grant uid %u", (unsigned)cl->uid,
				      q->uid);
		*uid = q->uid;
		*gid = CX_NOBODY_GID;
	}
	if (q->has_gid && q->gid != *gid) {
		if (cl->uid != 0 && q->gid != cl->gid)
			return status(x, EPERM, "uid %u may not grant gid %u", (unsigned)cl->uid,
				      q->gid);
		*gid = q->gid;
	}
	return 0;
}

/* Geometry of the buffer of a request, validated: page 4..32 KiB in 4 KiB powers of two,
 * the size (FROM_SERVICE) a positive multiple of it within the SMB limit. */
static int buffer_geometry(struct svc *s, struct cx_ctx *x, const struct cx_request *q,
			   size_t *page, size_t *size)
{
	*page = q->page_size ? q->page_size : SMB_DEFAULT_PAGE_SIZE;
	*size = q->buffer_size ? q->buffer_size : SMB_DEFAULT_SIZE;
	if (q->buffer != CX_BUFFER_FROM_SERVICE)
		return 0;
	if (*size > s->lim.smb_bytes)
		return status(x, EFBIG, "buffer size %zu is over the limit of %llu bytes", *size,
			      (unsigned long long)s->lim.smb_bytes);
	if (!smb_geometry_svc_ok(*size, *page))
		return status(x, EINVAL, "invalid buffer geometry: size %zu, page size %zu", *size,
			      *page);
	return 0;
}

static int check_buffer(struct svc *s, struct cx_ctx *x, int fd, size_t page, size_t *size)
{
	int rc = sonde__sec_check_smb(s, fd, page, size);

	switch (rc) {
	case 0:
		return 0;
	case -EBADF:
		return status(x, EBADF, "the buffer is not a memfd");
	case -EPERM:
		return status(
			x, EPERM,
			"the buffer must be sealed with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL "
			"and not against writes");
	case -EACCES:
		return status(x, EACCES, "the buffer is not open for writing");
	case -ENODEV:
		return status(x, ENODEV, "the buffer cannot be mapped shared and writable");
	case -EFBIG:
		return status(x, EFBIG, "the buffer is over the limit of %llu bytes",
			      (unsigned long long)s->lim.smb_bytes);
	default:
		return status(x, EINVAL,
			      "invalid buffer geometry: the size must be a positive multiple of "
			      "the page size %zu",
			      page);
	}
}

/* Validates everything before the connection exists, so a refusal leaves no trace. */
static int validate(struct cx_ctx *x, const struct cx_request *q, const int *fds, size_t nfds)
{
	size_t want = 1 + (q->buffer == CX_BUFFER_PROVIDED);

	if (q->kind != CX_KIND_PRODUCER && q->kind != CX_KIND_CONSUMER)
		return status(x, EINVAL, "unknown connection kind %u", q->kind);
	if (q->buffer > CX_BUFFER_FROM_SERVICE ||
	    (q->kind == CX_KIND_CONSUMER && q->buffer != CX_BUFFER_NONE))
		return status(x, EINVAL, "invalid buffer mode %u for this kind", q->buffer);
	if (nfds != want)
		return status(x, EBADF, "expected %zu file descriptors, got %zu", want, nfds);
	return check_socket(x, fds[0]);
}

static int connect_one(struct svc *s, struct cx_ctx *x, const struct cx_client *cl,
		       const struct cx_request *q, int *fds, size_t nfds)
{
	size_t page, size = 0;
	uid_t uid;
	gid_t gid;
	int rc;

	if ((rc = validate(x, q, fds, nfds)) < 0 ||
	    (rc = grant_identity(x, cl, q, &uid, &gid)) < 0 ||
	    (rc = buffer_geometry(s, x, q, &page, &size)) < 0)
		return rc;
	if (q->buffer == CX_BUFFER_PROVIDED && (rc = check_buffer(s, x, fds[1], page, &size)) < 0)
		return rc;
	if (!sonde__sec_admit_conn(s, uid, false))
		return status(x, EUSERS, "too many connections for uid %u", (unsigned)uid);
	struct conn *c = sonde__svc_add_conn(s, fds[0], q->kind == CX_KIND_PRODUCER);
	fds[0] = -1; /* taken, even on failure */
	if (!c)
		return status(x, ENOMEM, "cannot add the connection");
	c->ch.peer_uid = uid;
	c->ch.peer_pid = cl->pid;
	c->peer_gid = gid;
	/* The supervisor's capabilities go with its own identity only: a granted uid or gid
	 * is an ordinary user's (and the socket's creator, whose capabilities
	 * sonde__svc_add_conn read, proves nothing). */
	bool own = uid == cl->uid && gid == cl->gid;
	c->caps_known = own && cl->caps_known;
	c->cap_eff = own ? cl->cap_eff : 0;
	c->pid_start = cl->pid_start;
	if (q->buffer != CX_BUFFER_NONE) {
		bool create = q->buffer == CX_BUFFER_FROM_SERVICE;
		rc = sonde__producer_preassign_smb(c, create ? -1 : fds[1], size, page, create);
		if (rc < 0) {
			c->dead = true;
			return status(x, -rc, "cannot map the buffer: %s", sonde_strerror(rc));
		}
		if (!create)
			fds[1] = -1; /* the producer owns it now */
		x->rep.page_size = (uint32_t)page;
		x->rep.buffer_size = (uint32_t)size;
		x->reply_fd = create ? c->p.smb_fd : -1;
	}
	sonde_info("connector: %s handed over by pid %d uid %d, acting as uid %u%s",
		   c->is_producer ? "producer" : "consumer", (int)cl->pid, (int)cl->uid,
		   (unsigned)uid, q->buffer == CX_BUFFER_NONE ? "" : " (with its buffer)");
	return 0;
}

static void send_reply(struct cx_client *cl, struct cx_ctx *x, bool *dead)
{
	struct buf b = BUF_INIT;

	sonde__cx_reply_encode(&x->rep, &b);
	/* a supervisor that does not read its replies is dropped rather than waited for */
	if (buf_error(&b) < 0 || sonde__ipc_fdpass_send(cl->fd, b.data, b.len, &x->reply_fd,
						 x->reply_fd >= 0, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		*dead = true;
	sonde__buf_free(&b);
}

static void handle(struct svc *s, struct cx_client *cl, const uint8_t *msg, size_t len, int flags,
		   int *fds, size_t nfds, bool *dead)
{
	struct cx_ctx x = {.reply_fd = -1};
	struct cx_request q;

	if (flags & MSG_TRUNC)
		status(&x, EMSGSIZE, "request over %d bytes", CX_MAX_MSG);
	else if (flags & MSG_CTRUNC)
		status(&x, EBADF, "ancillary data truncated");
	else if (sonde__cx_request_decode(msg, len, &q) < 0)
		status(&x, EPROTO, "malformed request");
	else {
		x.rep.id = q.id;
		connect_one(s, &x, cl, &q, fds, nfds);
	}
	if (x.rep.status)
		sonde_info("connector: request of pid %d uid %d refused: %s", (int)cl->pid,
			   (int)cl->uid, x.rep.message);
	send_reply(cl, &x, dead);
}

/* Receives one request with its fds; each fd is taken by the request or closed here.
 * Returns 1 (handled), 0 (nothing more now), -1 (the client is gone). */
static int read_one(struct svc *s, struct cx_client *cl)
{
	uint8_t msg[CX_MAX_MSG];
	struct ipc_fds in;
	bool dead = false;
	int mflags;
	ssize_t n = sonde__ipc_fdpass_recv(cl->fd, msg, sizeof(msg), MSG_DONTWAIT, &in, &mflags);

	if (n < 0)
		return n == -EAGAIN || n == -EINTR ? 0 : -1;
	if (n == 0 && in.n == 0)
		return -1; /* EOF (a SEQPACKET peer cannot send an empty request with no fds) */
	handle(s, cl, msg, (size_t)n, mflags, in.fd, in.n, &dead);
	sonde__ipc_fds_close(&in); /* those connect_one did not take (it set them to -1) */
	return dead ? -1 : 1;
}

static void drop_client(struct svc *s, size_t i)
{
	struct svc_connector *cx = s->cx;

	sonde__loop_del(&s->loop, cx->cl[i].fd);
	close(cx->cl[i].fd);
	cx->cl[i] = cx->cl[--cx->ncl];
}

static void accept_clients(struct svc *s)
{
	struct svc_connector *cx = s->cx;

	/* bounded per wake-up: a client reconnecting as fast as it is refused cannot keep
	 * the loop here */
	for (int k = 0; k < CX_ACCEPT_BATCH; k++) {
		int fd = accept4(cx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			sonde__svc_accept_failed(s, cx->lfd, cx->lcookie, errno);
			return;
		}
		struct ucred cr;
		socklen_t len = sizeof(cr);
		if (cx->ncl == CX_MAX_CLIENTS ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
			sonde_warn("connector: refusing a client (%zu connected)", cx->ncl);
			close(fd);
			continue;
		}
		struct cx_client *cl = &cx->cl[cx->ncl];
		*cl = (struct cx_client){s->next_conn_id++, fd, cr.uid, cr.gid, cr.pid};
		sonde__sec_peer_caps(fd, cr.pid, cr.uid, cr.gid, &cl->caps_known, &cl->cap_eff,
			      &cl->pid_start);
		if (sonde__loop_add(&s->loop, fd, EPOLLIN, cl->cookie) < 0) {
			close(fd);
			continue;
		}
		cx->ncl++;
	}
}

void sonde__connector_io(struct svc *s, uint64_t cookie, uint32_t events)
{
	struct svc_connector *cx = s->cx;

	if (cookie == cx->lcookie) {
		accept_clients(s);
		return;
	}
	for (size_t i = 0; i < cx->ncl; i++) {
		if (cx->cl[i].cookie != cookie)
			continue;
		int rc = 1;
		for (int k = 0; k < CX_BATCH && rc > 0; k++)
			rc = read_one(s, &cx->cl[i]);
		if (rc < 0 || (rc == 0 && (events & (EPOLLHUP | EPOLLERR))))
			drop_client(s, i);
		return;
	}
}

bool sonde__connector_owns(const struct svc *s, uint64_t cookie)
{
	const struct svc_connector *cx = s->cx;

	if (!cx)
		return false;
	if (cookie == cx->lcookie)
		return true;
	for (size_t i = 0; i < cx->ncl; i++)
		if (cx->cl[i].cookie == cookie)
			return true;
	return false;
}

const char *sonde__connector_path(const struct svc *s)
{
	return s->cx ? s->cx->path : NULL;
}

int sonde__connector_init(struct svc *s, const struct sonde_service_opts *o)
{
	const char *name = o->connector_socket ? o->connector_socket
					       : sonde__ipc_default_sock_name(IPC_PORT_CONNECTOR);
	struct svc_connector *cx;
	int fd;

	if (!strcmp(name, "none"))
		return 0;
	if (!(cx = sonde__calloc(1, sizeof(*cx))))
		return -ENOMEM;
	fd = sonde__sec_listen(o, SONDE_SOCKET_CONNECTOR, name, &cx->bound);
	if (fd < 0) {
		sonde__svc_listen_failed(name, fd);
		sonde__free(cx);
		return fd;
	}
	cx->lfd = fd;
	cx->lcookie = s->next_conn_id++;
	s->cx = cx;
	if (!(cx->path = sonde__strdup(name)) || sonde__loop_add(&s->loop, fd, EPOLLIN, cx->lcookie) < 0)
		return -ENOMEM; /* sonde_service__new frees it */
	return 0;
}

void sonde__connector_free(struct svc *s)
{
	struct svc_connector *cx = s->cx;

	if (!cx)
		return;
	while (cx->ncl)
		drop_client(s, 0);
	sonde__loop_del(&s->loop, cx->lfd);
	close(cx->lfd);
	if (cx->path)
		sonde__ipc_unlink_bound(cx->path, &cx->bound);
	sonde__free(cx->path);
	sonde__free(cx);
	s->cx = NULL;
}
