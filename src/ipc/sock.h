/* Perfetto socket names (perfetto-wire.md §1.1) and AF_UNIX listen/connect helpers, for
 * the service and the client library. Internal to libsonde. */
#ifndef SONDE_IPC_SOCK_H
#define SONDE_IPC_SOCK_H

#include <stdbool.h>
#include <stddef.h>

enum ipc_port { IPC_PORT_PRODUCER, IPC_PORT_CONSUMER, IPC_PORT_CONNECTOR };

/* The socket name for a port: $PERFETTO_PRODUCER_SOCK_NAME / $PERFETTO_CONSUMER_SOCK_NAME
 * if set and non-empty, else /run/perfetto/traced-{producer,consumer}.sock when
 * access("/run/perfetto/", X_OK) succeeds, else /tmp/perfetto-{producer,consumer}.
 * IPC_PORT_CONNECTOR (sonde's own): $SONDE_CONNECTOR_SOCK_NAME, else
 * /run/perfetto/sonde-connector.sock under the same rule, else /tmp/sonde-connector.
 * The string is static or from the environment; do not free it. */
const char *ipc_default_sock_name(enum ipc_port port);
/* Creates a listening nonblocking close-on-exec AF_UNIX stream socket. A leading '@'
 * selects the abstract namespace; otherwise a stale path is unlinked first. Returns the
 * fd or -errno (-ENAMETOOLONG for names that do not fit sun_path). */
int ipc_listen(const char *name);
/* The same for a socket type (SOCK_STREAM, SOCK_SEQPACKET), setting a filesystem socket's mode (0: leave it to the umask) and group (-1:
 * leave it) before it listens. Abstract names have no permissions and ignore both. */
int ipc_listen_perm(const char *name, int type, unsigned mode, long gid);
/* Connects a nonblocking close-on-exec socket to name (connect itself is blocking on
 * AF_UNIX, which completes or fails at once). Returns the fd or -errno. */
int ipc_connect(const char *name);
/* The same for a socket type (SOCK_STREAM, SOCK_SEQPACKET). */
int ipc_connect_type(const char *name, int type);

#endif
