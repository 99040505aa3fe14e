/* The supervisor side of sonded's connector (include/sonde/connector.h): one request,
 * one reply, over a SOCK_SEQPACKET connection; fds ride on the messages as SCM_RIGHTS. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sonde/connector.h>
#include <sonde/error.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "client/conn.h"
#include "ipc/cxmsg.h"
#include "ipc/fdpass.h"
#include "ipc/sock.h"

struct sonde_connector {
	int fd;
	int timeout_ms;
	uint64_t next_id;
	char error[CX_MAX_TEXT];
};

const char *sonde_connector__socket_path(const struct sonde_connector_opts *opts)
{
	if (OPTS_GET(opts, socket, NULL))
		return opts->socket;
	return sonde__ipc_default_sock_name(IPC_PORT_CONNECTOR);
}

struct sonde_connector *sonde_connector__new(const struct sonde_connector_opts *opts)
{
	struct sonde_connector_opts o = {0};
	struct sonde_connector *c;
	int fd;

	if (!OPTS_VALID(opts, sonde_connector_opts)) {
		errno = EINVAL;
		return NULL;
	}
	OPTS_COPY(&o, opts);
	const char *path = sonde_connector__socket_path(&o);
	struct conn_trust t = {0};
	int rc = sonde__conn_trust_from_env(&t);
	fd = rc < 0 ? rc : sonde__ipc_connect_type(path, SOCK_SEQPACKET);
	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	/* sockets handed to whoever listens there reach that user: it must be the service */
	if ((rc = sonde__conn_check_listener(fd, path, &t)) < 0) {
		close(fd);
		errno = -rc;
		return NULL;
	}
	if (!(c = sonde__calloc(1, sizeof(*c)))) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	c->fd = fd;
	c->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 5000;
	c->next_id = 1;
	return c;
}

void sonde_connector__free(struct sonde_connector *c)
{
	if (!c)
		return;
	close(c->fd);
	sonde__free(c);
}

const char *sonde_connector__last_error(const struct sonde_connector *c)
{
	return c->error;
}

static int send_request(struct sonde_connector *c, const struct cx_request *q, const int *fds,
			size_t nfds)
{
	struct buf b = BUF_INIT;
	struct pollfd p = {c->fd, POLLOUT, 0};
	int rc = 0;

	sonde__cx_request_encode(q, &b);
	if (buf_error(&b) < 0) {
		sonde__buf_free(&b);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t w = sonde__ipc_fdpass_send(c->fd, b.data, b.len, fds, nfds,
					    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w >= 0)
			break;
		if (w != -EAGAIN && w != -EINTR) {
			rc = (int)w;
			break;
		}
		if (poll(&p, 1, c->timeout_ms) == 0) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	sonde__buf_free(&b);
	return rc;
}

/* Receives the reply to request id; *fd gets the fd that came with it (or -1). A reply
 * carries at most one: more is a broken service, and all of them are closed. */
static int recv_reply(struct sonde_connector *c, uint64_t id, struct cx_reply *r, int *fd)
{
	uint8_t msg[CX_MAX_MSG];
	struct pollfd p = {c->fd, POLLIN, 0};
	struct ipc_fds in;
	int mflags;
	ssize_t n;

	*fd = -1;
	for (;;) {
		n = sonde__ipc_fdpass_recv(c->fd, msg, sizeof(msg), MSG_DONTWAIT, &in, &mflags);
		if (n >= 0)
			break;
		if (n != -EAGAIN && n != -EINTR)
			return (int)n;
		int pr = poll(&p, 1, c->timeout_ms);
		if (pr == 0)
			return -ETIMEDOUT;
		if (pr < 0 && errno != EINTR)
			return -errno;
	}
	if (n == 0 && in.n == 0)
		return -ECONNRESET;
	if (in.n > 1 || (mflags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    sonde__cx_reply_decode(msg, (size_t)n, r) < 0 || r->id != id) {
		sonde__ipc_fds_close(&in);
		return -EPROTO;
	}
	if (in.n == 1)
		*fd = in.fd[0];
	return 0;
}

static int request(struct sonde_connector *c, uint32_t kind, int sock,
		   const struct sonde_connect_opts *opts, int *buffer_out)
{
	struct sonde_connect_opts o = {0};
	struct cx_request q = {.id = c->next_id++, .kind = kind};
	struct cx_reply r;
	int fds[2] = {sock, -1}, got = -1, rc;

	if (buffer_out)
		*buffer_out = -1;
	if (!OPTS_VALID(opts, sonde_connect_opts))
		return -EINVAL;
	OPTS_COPY(&o, opts);
	c->error[0] = '\0';
	q.buffer = (uint32_t)o.buffer;
	q.page_size = o.page_size;
	q.buffer_size = o.buffer_size;
	q.has_uid = o.set_uid;
	q.uid = o.uid;
	q.has_gid = o.set_gid;
	q.gid = o.gid;
	if (o.buffer == SONDE_CONNECTOR_BUFFER_PROVIDED)
		fds[1] = o.buffer_fd;
	if ((rc = send_request(c, &q, fds, fds[1] >= 0 ? 2 : 1)) < 0)
		return rc;
	if ((rc = recv_reply(c, q.id, &r, &got)) < 0)
		return rc;
	snprintf(c->error, sizeof(c->error), "%s", r.message);
	if (r.status) {
		if (got >= 0)
			close(got);
		return -(int)r.status;
	}
	if (buffer_out)
		*buffer_out = got;
	else if (got >= 0)
		close(got);
	return 0;
}

int sonde_connector__connect_producer(struct sonde_connector *c, int sock,
				      const struct sonde_connect_opts *opts, int *buffer_out)
{
	return request(c, CX_KIND_PRODUCER, sock, opts, buffer_out);
}

int sonde_connector__connect_consumer(struct sonde_connector *c, int sock,
				      const struct sonde_connect_opts *opts)
{
	return request(c, CX_KIND_CONSUMER, sock, opts, NULL);
}
