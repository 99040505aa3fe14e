/* sonded's tracing service as a library: a Perfetto-compatible system tracing service
 * (ProducerPort and ConsumerPort over AF_UNIX sockets, shared-memory chunk ingest,
 * central trace buffers, sessions).
 *
 * The service never owns the event loop. Call order:
 *
 *   struct sonde_service_opts o = {.sz = sizeof(o)};      optional socket names
 *   struct sonde_service *s = sonde_service_new(&o);      binds and listens
 *   loop:
 *     poll sonde_service_fd(s) for POLLIN, with timeout sonde_service_timeout_ms(s)
 *     sonde_service_process(s)                            handles what is ready
 *   sonde_service_free(s);                                closes everything, unlinks paths
 *
 * Everything happens on the calling thread inside sonde_service_process().
 */
#ifndef SONDE_SERVICE_H
#define SONDE_SERVICE_H

#include <stddef.h>
#include <sonde/export.h>

struct sonde_service;

struct sonde_service_opts {
	size_t sz; /* sizeof(struct sonde_service_opts) */
	/* Socket names; NULL selects the Perfetto defaults ($PERFETTO_*_SOCK_NAME, then
	 * /run/perfetto/traced-*.sock or /tmp/perfetto-*). A leading '@' is an abstract
	 * name. */
	const char *producer_socket;
	const char *consumer_socket;
};

/* Creates the service and starts listening on both sockets. Returns NULL and sets errno
 * on failure. The caller owns the result (sonde_service_free). */
SONDE_API struct sonde_service *sonde_service_new(const struct sonde_service_opts *opts);
/* A pollable fd that becomes readable when the service has work. Owned by the service. */
SONDE_API int sonde_service_fd(const struct sonde_service *s);
/* Milliseconds until the service's next timer, or -1 if none is armed. */
SONDE_API int sonde_service_timeout_ms(const struct sonde_service *s);
/* Handles ready IO and due timers without blocking. Returns 0 or -errno. */
SONDE_API int sonde_service_process(struct sonde_service *s);
/* The socket names in use (valid until sonde_service_free). which: 0 producer,
 * 1 consumer. */
SONDE_API const char *sonde_service_socket(const struct sonde_service *s, int which);
/* Ends every session and connection, closes and unlinks the sockets. Accepts NULL. */
SONDE_API void sonde_service_free(struct sonde_service *s);

#endif
