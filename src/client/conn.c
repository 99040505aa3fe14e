/* Client connection: socket path rules, connect, BindService, invoke. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "client/conn.h"
#include "ipc/sock.h"

void sonde__conn_default_path(enum conn_kind kind, char *out, size_t size)
{
	const char *fd = getenv(kind == CONN_PRODUCER ? "SONDE_PRODUCER_FD" : "SONDE_CONSUMER_FD");
	const char *env = getenv(kind == CONN_PRODUCER ? "PERFETTO_PRODUCER_SOCK_NAME"
						       : "PERFETTO_CONSUMER_SOCK_NAME");
	if (fd && *fd)
		snprintf(out, size, "fd:%s", fd);
	else if (env && *env)
		snprintf(out, size, "%s", env);
	else if (access("/run/perfetto/", X_OK) == 0)
		snprintf(out, size, "/run/perfetto/traced-%s.sock",
			 kind == CONN_PRODUCER ? "producer" : "consumer");
	else
		snprintf(out, size, "/tmp/perfetto-%s",
			 kind == CONN_PRODUCER ? "producer" : "consumer");
}

/* "fd:N": a connected socket inherited from a supervisor (sonde run --trace). It is taken
 * at most once: the supervisor leaves it without FD_CLOEXEC for exec, and taking it sets
 * the flag, so a second producer of the same process finds it set and gets -EBUSY
 * instead of sharing the stream with the first. */
static int adopt_fd(const char *spec)
{
	char *end;
	long n = strtol(spec, &end, 10);
	int type = 0, fl;
	socklen_t len = sizeof(type);

	if (!*spec || *end || n < 0 || n > 1 << 30)
		return -EINVAL;
	if ((fl = fcntl((int)n, F_GETFD)) < 0)
		return -EBADF;
	if (fl & FD_CLOEXEC)
		return -EBUSY;
	if (getsockopt((int)n, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return -ENOTSOCK;
	if (fcntl((int)n, F_SETFD, fl | FD_CLOEXEC) < 0)
		return -errno;
	return (int)n;
}

int sonde__conn_trust_from_env(struct conn_trust *t)
{
	const char *v = getenv("SONDE_TRUST_UID");
	char *end;

	if (t->uid_set || !v || !*v)
		return 0;
	errno = 0;
	unsigned long u = strtoul(v, &end, 10);
	if (*end || errno || u >= (uid_t)-1)
		return -EINVAL;
	t->uid_set = true;
	t->uid = (uint32_t)u;
	return 0;
}

int sonde__conn_check_listener(int fd, const char *path, const struct conn_trust *t)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	uid_t me = geteuid();

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return -errno;
	if (cr.uid == 0 || cr.uid == me || (t && t->uid_set && cr.uid == t->uid))
		return 0;
	if (t && t->refused_uid)
		*t->refused_uid = cr.uid;
	else
		sonde_warn("not connecting to %s: the service there runs as uid %u, neither root "
			   "nor uid %u (set SONDE_TRUST_UID=%u to trust it)",
			   path, (unsigned)cr.uid, (unsigned)me, (unsigned)cr.uid);
	return -EPERM;
}

static int64_t ms_left(const struct timespec *deadline)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
	       (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

static int resolve_methods(struct conn *c, const struct ipc_frame *f, const char *const *names,
			   size_t n)
{
	if (!f->success || !f->service_id)
		return -SONDE_E_PROTOCOL;
	c->service_id = f->service_id;
	for (size_t i = 0; i < n; i++)
		c->method_ids[i] = sonde__ipc_method_id(f, names[i]);
	return 0;
}

static int await_bind_reply(struct conn *c, uint64_t req, const char *const *names, size_t n,
			    int timeout_ms)
{
	struct timespec deadline;
	struct ipc_frame f;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	for (bool eof = false;;) {
		while ((r = sonde__ipc_chan_next(&c->ch, &f, NULL)) > 0)
			if (f.request_id == req && f.msg == IPC_MSG_BIND_SERVICE_REPLY)
				return resolve_methods(c, &f, names, n);
		if (r < 0)
			return r;
		if (eof)
			return -ECONNRESET;
		int64_t left = ms_left(&deadline);
		if (left <= 0)
			return -ETIMEDOUT;
		if ((r = sonde__conn_wait(c, (int)left)) < 0)
			return r;
		if (r > 0 && (r = sonde__ipc_chan_read(&c->ch)) < 0) {
			if (r != -ECONNRESET)
				return r;
			eof = true;
		}
	}
}

int sonde__conn_open(struct conn *c, enum conn_kind kind, const char *path, const char *service,
		     const char *const *names, size_t n, int timeout_ms,
		     const struct conn_trust *trust)
{
	bool inherited;
	int fd, r;

	memset(c, 0, sizeof(*c));
	c->ch.fd = -1;
	if (n > CONN_MAX_METHODS)
		return -EINVAL;
	if (path)
		snprintf(c->path, sizeof(c->path), "%s", path);
	else
		sonde__conn_default_path(kind, c->path, sizeof(c->path));
	if ((r = pthread_mutex_init(&c->lock, NULL)) != 0)
		return -r;
	c->open = true;
	inherited = !strncmp(c->path, "fd:", 3);
	fd = inherited ? adopt_fd(c->path + 3) : sonde__ipc_connect(c->path);
	if (fd < 0) {
		r = fd;
		goto fail;
	}
	if ((r = sonde__ipc_chan_init(&c->ch, fd)) < 0)
		goto fail;
	/* a TCP or vsock service has no SO_PEERCRED: naming its address is the trust */
	if (!inherited && sonde__ipc_is_unix(fd) &&
	    (r = sonde__conn_check_listener(fd, c->path, trust)) < 0)
		goto fail;
	c->next_request_id = 1;
	struct ipc_frame f = {.request_id = c->next_request_id++,
			      .msg = IPC_MSG_BIND_SERVICE,
			      .name = service,
			      .name_len = strlen(service)};
	if ((r = sonde__ipc_chan_send(&c->ch, &f, -1)) < 0)
		goto fail;
	if ((r = await_bind_reply(c, f.request_id, names, n, timeout_ms > 0 ? timeout_ms : 5000)) <
	    0)
		goto fail;
	return 0;
fail:
	sonde__conn_close(c);
	return r;
}

void sonde__conn_close(struct conn *c)
{
	if (!c->open)
		return;
	sonde__ipc_chan_close(&c->ch);
	pthread_mutex_destroy(&c->lock);
	c->open = false;
}

/* The next request's frame invoking method m, its arguments len bytes (c->lock held). */
static struct ipc_frame invoke_frame(struct conn *c, unsigned m, size_t len, bool drop_reply)
{
	return (struct ipc_frame){.request_id = c->next_request_id++,
				  .msg = IPC_MSG_INVOKE_METHOD,
				  .service_id = c->service_id,
				  .method_id = c->method_ids[m],
				  .data_len = len,
				  .drop_reply = drop_reply};
}

int64_t sonde__conn_invoke(struct conn *c, unsigned m, const void *args, size_t len,
			   bool drop_reply, int fd)
{
	if (m >= CONN_MAX_METHODS || !c->method_ids[m])
		return -SONDE_E_UNSUPPORTED;
	pthread_mutex_lock(&c->lock);
	struct ipc_frame f = invoke_frame(c, m, len, drop_reply);
	f.data = args;
	int r = sonde__ipc_chan_send(&c->ch, &f, fd);
	pthread_mutex_unlock(&c->lock);
	return r < 0 ? r : (int64_t)f.request_id;
}

int64_t sonde__conn_invoke_iov(struct conn *c, unsigned m, const struct iovec *args, int n,
			       size_t len, bool drop_reply)
{
	if (m >= CONN_MAX_METHODS || !c->method_ids[m])
		return -SONDE_E_UNSUPPORTED;
	pthread_mutex_lock(&c->lock);
	struct ipc_frame f = invoke_frame(c, m, len, drop_reply);
	int r = sonde__ipc_chan_send_iov(&c->ch, &f, args, n);
	pthread_mutex_unlock(&c->lock);
	return r < 0 ? r : (int64_t)f.request_id;
}

int sonde__conn_flush(struct conn *c)
{
	pthread_mutex_lock(&c->lock);
	int r = ipc_chan_tx_pending(&c->ch) ? sonde__ipc_chan_flush(&c->ch) : 0;
	pthread_mutex_unlock(&c->lock);
	return r;
}

void sonde__conn_tx_positions(struct conn *c, uint64_t *sent, uint64_t *queued)
{
	pthread_mutex_lock(&c->lock);
	*sent = c->ch.tx_base + c->ch.tx_off;
	*queued = c->ch.tx_base + c->ch.tx.len;
	pthread_mutex_unlock(&c->lock);
}

size_t sonde__conn_tx_pending(struct conn *c)
{
	pthread_mutex_lock(&c->lock);
	size_t n = ipc_chan_tx_pending(&c->ch);
	pthread_mutex_unlock(&c->lock);
	return n;
}

int sonde__conn_read(struct conn *c)
{
	return sonde__ipc_chan_read(&c->ch);
}

int sonde__conn_next(struct conn *c, struct ipc_frame *f, int *fd)
{
	return sonde__ipc_chan_next(&c->ch, f, fd);
}

int sonde__conn_wait(struct conn *c, int timeout_ms)
{
	int r = sonde__conn_flush(c);
	if (r < 0)
		return r;
	struct pollfd p = {.fd = c->ch.fd, .events = POLLIN | (r > 0 ? POLLOUT : 0)};
	for (;;) {
		r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return 0;
		if (p.revents & (POLLIN | POLLHUP | POLLERR))
			return 1;
		/* writable only: push more and keep waiting (timeout restarts, harmless) */
		if ((r = sonde__conn_flush(c)) < 0)
			return r;
		p.events = POLLIN | (r > 0 ? POLLOUT : 0);
	}
}
