#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/sock.h"

const char *ipc_default_sock_name(enum ipc_port port)
{
	bool prod = port == IPC_PORT_PRODUCER;
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

int ipc_listen(const char *name)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd, rc = make_addr(name, &a, &len);

	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (name[0] != '@')
		unlink(name);
	if (bind(fd, (struct sockaddr *)&a, len) < 0 || listen(fd, SOMAXCONN) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int ipc_connect(const char *name)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd, rc = make_addr(name, &a, &len);

	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
