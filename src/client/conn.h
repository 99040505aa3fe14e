/* A client connection to one service port (ProducerPort or ConsumerPort): socket path
 * rules, connect, BindService, and method invocation. Internal to libsonde.
 *
 * Sends are serialized by a mutex so that producer trace writers on any thread can
 * commit; receiving is left to the single thread that owns the event loop.
 */
#ifndef SONDE_CLIENT_CONN_H
#define SONDE_CLIENT_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/frame.h"

enum conn_kind { CONN_PRODUCER, CONN_CONSUMER };

enum { CONN_MAX_METHODS = 16 };

struct conn {
	struct ipc_chan ch;
	bool open;
	pthread_mutex_t lock;
	uint64_t next_request_id;
	uint32_t service_id;
	/* method ids by our own index (the order of the names passed to sonde__conn_open); 0 when
	 * the service did not list the method */
	uint32_t method_ids[CONN_MAX_METHODS];
	char path[108];
};

/* The socket name a client of `kind` uses: "fd:N" if SONDE_{PRODUCER,CONSUMER}_FD=N (a
 * socket inherited from a supervisor), else PERFETTO_{PRODUCER,CONSUMER}_SOCK_NAME, else
 * /run/perfetto/traced-{producer,consumer}.sock if /run/perfetto/ is searchable, else
 * /tmp/perfetto-{producer,consumer} (perfetto-wire.md §1.1). */
void sonde__conn_default_path(enum conn_kind kind, char *out, size_t size);

/* Whom a client believes to be the service. A socket path can be bound by anyone who
 * gets there first (/tmp/perfetto-* while no service runs, any abstract name), so before
 * a byte is sent the listener's SO_PEERCRED uid must be root, the caller's effective uid,
 * or `uid` when uid_set. An inherited "fd:N" socket is the supervisor's choice and is not
 * checked. */
struct conn_trust {
	bool uid_set;
	uint32_t uid;
	/* Receives the listener's uid on -EPERM; when NULL the refusal is logged instead. */
	uint32_t *refused_uid;
};

/* Fills t from $SONDE_TRUST_UID unless t->uid_set. -EINVAL if the variable is not a uid. */
int sonde__conn_trust_from_env(struct conn_trust *t);
/* 0 if the process listening at the other end of connected socket fd (named path, for
 * the message) is trusted by t (NULL: root or the caller's own uid), else -EPERM. */
int sonde__conn_check_listener(int fd, const char *path, const struct conn_trust *t);

/* Connects to path (NULL: the default for kind; a leading '@' is the abstract namespace;
 * "fd:N" takes the inherited connected socket N, once: -EBUSY if already taken), checks
 * the listener against trust (NULL: root or the caller's own uid), binds `service` and
 * resolves the n method names (n <= CONN_MAX_METHODS), waiting up to timeout_ms for the
 * reply. Returns 0, -ECONNREFUSED/-ENOENT when nothing listens, -EPERM when the listener
 * is not trusted, -ETIMEDOUT, -SONDE_E_PROTOCOL if the service refused the binding, or
 * -errno. */
int sonde__conn_open(struct conn *c, enum conn_kind kind, const char *path, const char *service,
	      const char *const *names, size_t n, int timeout_ms, const struct conn_trust *trust);
void sonde__conn_close(struct conn *c);

/* Sends InvokeMethod for our method index `m` (fd >= 0 is attached, not taken). Returns the
 * request id (> 0), -SONDE_E_UNSUPPORTED if the service lacks the method, or -errno. */
int64_t sonde__conn_invoke(struct conn *c, unsigned m, const void *args, size_t len, bool drop_reply,
		    int fd);
/* The same with args in n pieces (len bytes in all), not gathered first
 * (sonde__ipc_chan_send_iov): for the inline chunks of shared-memory emulation. */
struct iovec;
int64_t sonde__conn_invoke_iov(struct conn *c, unsigned m, const struct iovec *args, int n,
			       size_t len, bool drop_reply);
/* Positions in the connection's byte stream: how far the socket took it (*sent) and the
 * end of what is queued (*queued). */
void sonde__conn_tx_positions(struct conn *c, uint64_t *sent, uint64_t *queued);
/* Writes queued bytes; 0 when all are out, 1 when some remain, or -errno. */
int sonde__conn_flush(struct conn *c);
/* Bytes waiting in the transmit queue. */
size_t sonde__conn_tx_pending(struct conn *c);
/* Reads what the socket has. Returns 0, -ECONNRESET at EOF, or -errno. Loop thread only. */
int sonde__conn_read(struct conn *c);
/* Next complete frame (see sonde__ipc_chan_next). Loop thread only. */
int sonde__conn_next(struct conn *c, struct ipc_frame *f, int *fd);
/* Waits up to timeout_ms for input (flushing output meanwhile). Returns 1 when readable,
 * 0 on timeout, or -errno. */
int sonde__conn_wait(struct conn *c, int timeout_ms);

#endif
