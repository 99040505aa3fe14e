#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/addr.h"
#include "ipc/sock.h"

const char *sonde__ipc_default_sock_name(enum ipc_port port)
{
	bool prod = port == IPC_PORT_PRODUCER;

	if (port == IPC_PORT_CONNECTOR) {
		const char *e = getenv("SONDE_CONNECTOR_SOCK_NAME");
		if (e && *e)
			return e;
		return access("/run/perfetto/", X_OK) == 0 ? "/run/perfetto/sonde-connector.sock"
							   : "/tmp/sonde-connector";
	}
	const char *env =
		getenv(prod ? "PERFETTO_PRODUCER_SOCK_NAME" : "PERFETTO_CONSUMER_SOCK_NAME");

	if (env && *env)
		return env;
	if (access("/run/perfetto/", X_OK) == 0)
		return prod ? "/run/perfetto/traced-producer.sock"
			    : "/run/perfetto/traced-consumer.sock";
	return prod ? "/tmp/perfetto-producer" : "/tmp/perfetto-consumer";
}

static int make_addr(const char *name, struct sockaddr_un *a, socklen_t *len)
{
	size_t n = strlen(name);

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (n == 0 || n >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path, name, n);
	if (name[0] == '@') {
		/* abstract: the '@' becomes NUL and the name has no trailing NUL */
		a->sun_path[0] = '\0';
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	return 0;
}

/* Sets the mode and group of the socket just bound at path. The path is opened with
 * O_PATH|O_NOFOLLOW and checked to be a socket, so a symlink swapped in after bind() is
 * never followed; chmod goes through /proc/self/fd, which names the inode itself. */
static int set_perm(const char *path, unsigned mode, long gid)
{
	char proc[64];
	struct stat st;
	int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (!S_ISSOCK(st.st_mode))
		rc = -ENOTSOCK;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (rc == 0 && gid >= 0 && fchownat(fd, "", (uid_t)-1, (gid_t)gid, AT_EMPTY_PATH) < 0)
		rc = -errno;
	if (rc == 0 && mode && chmod(proc, mode) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Whether a service listens at the socket file path: -EADDRINUSE if a connect is
 * answered (or the backlog is full, or the socket is of another type: something listens),
 * 0 if it is refused (a stale file, left by a service that died), another -errno if it
 * cannot be told. The connect never blocks. */
static int probe_live(const char *path, int type)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd, rc = make_addr(path, &a, &len);

	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, len) == 0)
		rc = -EADDRINUSE;
	else if (errno == ECONNREFUSED)
		rc = 0;
	else if (errno == EAGAIN || errno == EINPROGRESS || errno == EPROTOTYPE)
		rc = -EADDRINUSE;
	else
		rc = -errno;
	close(fd);
	return rc;
}

/* Makes room to bind at path: nothing there, or a stale socket file, which is removed.
 * A live socket is -EADDRINUSE; anything that is not a socket -EEXIST (never removed). */
static int clear_path(const char *path, int type)
{
	struct stat st;
	int rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	if ((rc = probe_live(path, type)) < 0)
		return rc;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

bool sonde__ipc_is_unix(int fd)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	return getsockname(fd, (struct sockaddr *)&a, &len) == 0 && a.ss_family == AF_UNIX;
}

void sonde__ipc_sock_tune(int fd)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);
	int one = 1, idle = 30, intvl = 10, cnt = 6, bufsz = 1 << 20;

	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0 ||
	    (a.ss_family != AF_INET && a.ss_family != AF_INET6))
		return;
	/* frames are written whole: Nagle would only delay a small reply behind an ACK */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a peer whose machine went away is noticed in about 90 s instead of hours */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	/* a send buffer of 1 MiB (the kernel doubles it, capped by net.core.wmem_max)
	 * instead of autotuning's 16 KiB start: an emulated producer's CommitData (up to
	 * 128 KiB, sent from its chunks, which it holds until the socket took them) goes in
	 * one sendmsg and its chunks free at once. The receive buffer is left to
	 * autotuning, whose ceiling (tcp_rmem) is higher than a fixed size would be */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
}

static int net_listen(const struct ipc_addr *ad, int type)
{
	int fd = socket(ad->sa.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, rc;

	if (fd < 0)
		return -errno;
	/* a restarted service binds again at once, past the old connections' TIME_WAIT */
	if (ad->kind == IPC_ADDR_TCP)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* "[::]:PORT" is IPv6 only: IPv4 is asked for by its own address */
	if (ad->sa.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&ad->sa, ad->sa_len) < 0 ||
	    listen(fd, SOMAXCONN) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int sonde__ipc_listen_perm(const char *name, int type, unsigned mode, long gid,
			   struct ipc_bound *out)
{
	struct ipc_bound local, *bound = out ? out : &local;
	struct sockaddr_un a;
	struct stat st;
	socklen_t len;
	bool path = name[0] != '@';
	struct ipc_addr ad;
	int fd, rc = sonde__ipc_addr_parse(name, strlen(name), &ad);

	*bound = (struct ipc_bound){0};
	if (rc < 0)
		return rc;
	if (ad.kind != IPC_ADDR_UNIX)
		return net_listen(&ad, type);
	if ((rc = make_addr(name, &a, &len)) < 0)
		return rc;
	if (path && (rc = clear_path(name, type)) < 0)
		return rc;
	fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a path created meanwhile, or an abstract name taken, fails here with EADDRINUSE */
	if (bind(fd, (struct sockaddr *)&a, len) < 0) {
		rc = -errno;
		goto fail;
	}
	if (path && lstat(name, &st) == 0) {
		bound->dev = st.st_dev;
		bound->ino = st.st_ino;
		bound->valid = true;
	}
	/* permissions are set between bind and listen: nobody can connect before */
	if (path && (mode || gid >= 0) && (rc = set_perm(name, mode, gid)) < 0)
		goto fail_unlink;
	if (listen(fd, SOMAXCONN) < 0) {
		rc = -errno;
		goto fail_unlink;
	}
	return fd;
fail_unlink:
	sonde__ipc_unlink_bound(name, bound);
fail:
	close(fd);
	return rc;
}

void sonde__ipc_unlink_bound(const char *name, struct ipc_bound *bound)
{
	struct stat st;

	/* only the socket this process bound: a later one at the same path (another
	 * service's, after this one's was removed) is left alone */
	if (bound->valid && lstat(name, &st) == 0 && st.st_dev == bound->dev &&
	    st.st_ino == bound->ino)
		unlink(name);
	bound->valid = false;
}

int sonde__ipc_listen(const char *name)
{
	return sonde__ipc_listen_perm(name, SOCK_STREAM, 0, -1, NULL);
}

int sonde__ipc_connect(const char *name)
{
	return sonde__ipc_connect_type(name, SOCK_STREAM);
}

/* The socket address of one name of a list (n bytes at name). */
struct conn_addr {
	struct sockaddr_un un;
	struct ipc_addr ad;
	const struct sockaddr *sa;
	socklen_t len;
};

static int conn_addr(const char *name, size_t n, struct conn_addr *a)
{
	char path[sizeof(a->un.sun_path)];
	int rc = sonde__ipc_addr_parse(name, n, &a->ad);

	if (rc < 0)
		return rc;
	if (a->ad.kind == IPC_ADDR_UNIX) {
		if (n >= sizeof(path))
			return -ENAMETOOLONG;
		memcpy(path, name, n);
		path[n] = '\0';
		if ((rc = make_addr(path, &a->un, &a->len)) < 0)
			return rc;
		a->sa = (const struct sockaddr *)&a->un;
	} else {
		a->sa = (const struct sockaddr *)&a->ad.sa;
		a->len = a->ad.sa_len;
	}
	return 0;
}

static int connect_one(const char *name, size_t n, int type, int timeout_ms)
{
	struct conn_addr ca;
	const struct sockaddr *sa;
	socklen_t len;
	int fd, rc = conn_addr(name, n, &ca);

	if (rc < 0)
		return rc;
	sa = ca.sa;
	len = ca.len;
	fd = socket(sa->sa_family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* blocking: a TCP connect to loopback or a listening host completes in a round trip
	 * (an unreachable one fails when the kernel gives up, as a Perfetto client does, or
	 * after timeout_ms: connect(2) honours SO_SNDTIMEO, failing with EINPROGRESS) */
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	if (timeout_ms > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if (connect(fd, sa, len) < 0) {
		rc = errno == EINPROGRESS || errno == EAGAIN ? -ETIMEDOUT : -errno;
		close(fd);
		return rc;
	}
	tv = (struct timeval){0, 0};
	if (timeout_ms > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	sonde__ipc_sock_tune(fd);
	return fd;
}

int sonde__ipc_connect_type(const char *name, int type)
{
	return sonde__ipc_connect_timeout(name, type, 0);
}

int sonde__ipc_connect_timeout(const char *name, int type, int timeout_ms)
{
	const char *one;
	size_t pos = 0, n;
	int rc = -ENOENT;

	/* a list (a producer socket, as Perfetto's service listens on each): the first
	 * that answers. Always split, never tried whole: in a shared directory anyone may
	 * bind the literal `a.sock,HOST:PORT` and be reached before the service (a path
	 * holding a comma cannot be named; the service splits the same way) */
	while (sonde__ipc_addr_list_next(name, &pos, &one, &n)) {
		rc = connect_one(one, n, type, timeout_ms);
		if (rc >= 0)
			return rc;
	}
	return rc;
}

int sonde__ipc_connect_start(const char *name, size_t *pos, int type, bool *pending)
{
	const char *one;
	size_t n;
	int rc = -ENOENT;

	*pending = false;
	while (sonde__ipc_addr_list_next(name, pos, &one, &n)) {
		struct conn_addr ca;
		if ((rc = conn_addr(one, n, &ca)) < 0)
			continue;
		int fd = socket(ca.sa->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, ca.sa, ca.len) == 0) {
			sonde__ipc_sock_tune(fd);
			return fd;
		}
		/* a Unix listener whose backlog is full says EAGAIN: no progress to wait for,
		 * as a refusal */
		if (errno == EINPROGRESS) {
			*pending = true;
			return fd;
		}
		rc = -errno;
		close(fd);
	}
	return rc;
}

int sonde__ipc_connect_finish(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	if (err)
		return -err;
	sonde__ipc_sock_tune(fd);
	return 0;
}
