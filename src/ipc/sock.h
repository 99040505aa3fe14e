/* Perfetto socket names (perfetto-wire.md §1.1) and AF_UNIX listen/connect helpers, for
 * the service and the client library. Internal to libsonde. */
#ifndef SONDE_IPC_SOCK_H
#define SONDE_IPC_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum ipc_port { IPC_PORT_PRODUCER, IPC_PORT_CONSUMER, IPC_PORT_CONNECTOR };

/* The socket name for a port: $PERFETTO_PRODUCER_SOCK_NAME / $PERFETTO_CONSUMER_SOCK_NAME
 * if set and non-empty, else /run/perfetto/traced-{producer,consumer}.sock when
 * access("/run/perfetto/", X_OK) succeeds, else /tmp/perfetto-{producer,consumer}.
 * IPC_PORT_CONNECTOR (sonde's own): $SONDE_CONNECTOR_SOCK_NAME, else
 * /run/perfetto/sonde-connector.sock under the same rule, else /tmp/sonde-connector.
 * The string is static or from the environment; do not free it. */
const char *sonde__ipc_default_sock_name(enum ipc_port port);
/* The inode a listener's socket file got at bind time (valid: a path was bound). */
struct ipc_bound {
	dev_t dev;
	ino_t ino;
	bool valid;
};

/* Creates a listening nonblocking close-on-exec stream socket. A TCP or vsock name
 * (ipc/addr.h) is bound exactly as given (IPv6 only for "[V6]:PORT"), mode and group do
 * not apply; otherwise an AF_UNIX socket: A leading '@'
 * selects the abstract namespace. A path is bound only if nothing is there or a stale
 * socket file (nothing answers a connect: ECONNREFUSED), which is replaced. Returns the
 * fd or -errno: -EADDRINUSE when a service already listens at name (path or abstract),
 * -EEXIST when the path exists and is not a socket (it is left alone), -ENAMETOOLONG for
 * names that do not fit sun_path. */
int sonde__ipc_listen(const char *name);
/* The same for a socket type (SOCK_STREAM, SOCK_SEQPACKET), setting a filesystem socket's
 * mode (0: leave it to the umask) and group (-1: leave it) before it listens. Abstract
 * names have no permissions and ignore both. bound (may be NULL) receives the socket
 * file's inode, for sonde__ipc_unlink_bound. */
int sonde__ipc_listen_perm(const char *name, int type, unsigned mode, long gid,
			   struct ipc_bound *bound);
/* Unlinks the socket file name if it is still the inode recorded in *bound, never a file
 * that replaced it; then marks *bound invalid. */
void sonde__ipc_unlink_bound(const char *name, struct ipc_bound *bound);
/* Connects a nonblocking close-on-exec socket to name, any name sonde__ipc_addr_parse
 * takes (TCP sockets get sonde__ipc_sock_tune), or to the first of a comma-separated list
 * that answers. The connect itself is blocking. Returns the fd or -errno. */
int sonde__ipc_connect(const char *name);
/* The same for a socket type (SOCK_STREAM, SOCK_SEQPACKET). */
int sonde__ipc_connect_type(const char *name, int type);
/* The same, each connect giving up after timeout_ms (0: when the kernel does) with
 * -ETIMEDOUT: for a caller that must not block long on a host that does not answer. */
int sonde__ipc_connect_timeout(const char *name, int type, int timeout_ms);
/* A connect that never waits, for an event loop: starts connecting a nonblocking
 * close-on-exec socket to the name of the comma-separated list name at *pos (0: the
 * first), moving *pos past it, and to the next ones while a connect fails at once. Returns
 * the fd, connected (TCP sockets tuned) or, with *pending set, in progress: when it is
 * writable, sonde__ipc_connect_finish tells how it ended (on failure the caller may start
 * again from *pos, the list's next name). -errno when no name is left. */
int sonde__ipc_connect_start(const char *name, size_t *pos, int type, bool *pending);
/* How a pending connect on fd ended: 0 (TCP sockets then tuned) or -errno. */
int sonde__ipc_connect_finish(int fd);

/* Whether fd is an AF_UNIX socket (else TCP or vsock: no peer credentials, no fds). */
bool sonde__ipc_is_unix(int fd);
/* TCP_NODELAY, keepalive and a 1 MiB send buffer on a TCP socket (a connected or
 * accepted one); nothing on others. */
void sonde__ipc_sock_tune(int fd);

#endif
