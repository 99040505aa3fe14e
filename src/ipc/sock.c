#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/sock.h"

const char *ipc_default_sock_name(enum ipc_port port)
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

int ipc_listen_perm(const char *name, int type, unsigned mode, long gid)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd, rc = make_addr(name, &a, &len);

	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (name[0] != '@')
		unlink(name);
	/* permissions are set between bind and listen: nobody can connect before */
	if (bind(fd, (struct sockaddr *)&a, len) < 0) {
		rc = -errno;
		goto fail;
	}
	if (name[0] != '@' && (mode || gid >= 0) && (rc = set_perm(name, mode, gid)) < 0)
		goto fail;
	if (listen(fd, SOMAXCONN) < 0) {
		rc = -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

int ipc_listen(const char *name)
{
	return ipc_listen_perm(name, SOCK_STREAM, 0, -1);
}

int ipc_connect(const char *name)
{
	return ipc_connect_type(name, SOCK_STREAM);
}

int ipc_connect_type(const char *name, int type)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd, rc = make_addr(name, &a, &len);

	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, len) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}
