/* sonde connector: the supervisor side of sonded's connector socket.
 *
 * A supervisor (a process launcher, a sandbox manager) that can reach sonded hands it an
 * already-connected socket on behalf of a process that cannot: sonded then treats the
 * socket as a producer or consumer connection, speaking Perfetto's protocol, and the
 * supervisor gives the other end to the process (e.g. `sonde run --trace`, which names it
 * in $SONDE_PRODUCER_FD; the client library picks it up). For a producer, the shared
 * memory buffer can be provided (a sealed memfd) or created by the service and returned.
 *
 * The connection carries the supervisor's identity (its SO_PEERCRED at the connector), or
 * one it may grant: root may grant any uid/gid, others only their own (docs/service.md,
 * "Trust model"). The handed-over socket lives on after the connector is freed.
 *
 * Call order:
 *   c = sonde_connector__new(&opts)                 connects to the connector socket
 *   socketpair(AF_UNIX, SOCK_STREAM, 0, sv)
 *   sonde_connector__connect_producer(c, sv[0], &copts, NULL)   (or __connect_consumer)
 *   close(sv[0]); give sv[1] to the traced process
 *   sonde_connector__free(c)                        any time; sv[1] stays connected
 */
#ifndef SONDE_CONNECTOR_H
#define SONDE_CONNECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sonde_connector;

struct sonde_connector_opts {
	size_t sz;	    /* sizeof(struct sonde_connector_opts) */
	const char *socket; /* NULL: $SONDE_CONNECTOR_SOCK_NAME, else
			     * /run/perfetto/sonde-connector.sock if /run/perfetto/ is
			     * accessible, else /tmp/sonde-connector */
	int timeout_ms;	    /* for each request's reply; 0: 5000 */
};

enum sonde_connector_buffer {
	/* the service creates the producer's buffer when tracing starts, as for any producer */
	SONDE_CONNECTOR_BUFFER_NONE = 0,
	/* buffer_fd: a memfd sealed with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, read-write, of
	 * a size that is a multiple of page_size */
	SONDE_CONNECTOR_BUFFER_PROVIDED = 1,
	/* the service creates the buffer now (buffer_size, page_size) and returns it */
	SONDE_CONNECTOR_BUFFER_FROM_SERVICE = 2,
};

struct sonde_connect_opts {
	size_t sz;			    /* sizeof(struct sonde_connect_opts) */
	enum sonde_connector_buffer buffer; /* producers only */
	int buffer_fd;			    /* PROVIDED: the memfd (not taken: sent as a copy) */
	uint32_t page_size;		    /* bytes; 0: 4096 */
	uint32_t buffer_size;		    /* FROM_SERVICE, bytes; 0: 256 KiB */
	/* An identity to grant the connection instead of the caller's own. */
	bool set_uid, set_gid;
	uint32_t uid, gid;
};

/* Connects to the connector socket. NULL with errno on failure (ENOENT, ECONNREFUSED:
 * no service there; EACCES: the socket's mode keeps the caller out; EPERM: the listener's
 * uid is neither root nor the caller's, nor $SONDE_TRUST_UID, so it is not trusted with
 * sockets; EINVAL: $SONDE_TRUST_UID is not a uid). The caller owns the result
 * (sonde_connector__free). */
SONDE_API struct sonde_connector *sonde_connector__new(const struct sonde_connector_opts *opts);
/* Closes the connector connection. Sockets handed over stay connected. NULL is fine. */
SONDE_API void sonde_connector__free(struct sonde_connector *c);
/* Hands `sock` (one end of a connected AF_UNIX stream socket; not taken: the caller closes
 * its copy) to the service as a producer connection. opts may be NULL (no buffer, own
 * identity). With FROM_SERVICE, *buffer_out (if not NULL) receives the service's memfd
 * (the caller owns it); else it is set to -1. Returns 0, or the service's refusal as
 * -errno: -ENOTSOCK / -ENOTCONN (sock is not a connected stream socket), -ELOOP (sock is
 * connected to one of the service's own sockets), -EBADF (buffer not
 * a memfd, or wrong fd count), -EPERM (buffer not sealed; or an identity the caller may not
 * grant), -EACCES (buffer read-only), -EINVAL (geometry or options), -EFBIG (buffer over the
 * service's limit), -EUSERS (connection limits), or -ETIMEDOUT, -EPROTO, -errno of the
 * transport. sonde_connector__last_error then says why in words. */
SONDE_API int sonde_connector__connect_producer(struct sonde_connector *c, int sock,
						const struct sonde_connect_opts *opts,
						int *buffer_out);
/* The same for a consumer connection (no buffer). */
SONDE_API int sonde_connector__connect_consumer(struct sonde_connector *c, int sock,
						const struct sonde_connect_opts *opts);
/* The service's explanation of the last refusal ("" after a success); valid until the
 * next call on c. */
SONDE_API const char *sonde_connector__last_error(const struct sonde_connector *c);
/* The connector socket name opts select (static storage of the call; copy it). */
SONDE_API const char *sonde_connector__socket_path(const struct sonde_connector_opts *opts);

#ifdef __cplusplus
}
#endif

#endif
