/* sonded's tracing service as a library: a Perfetto-compatible system tracing service
 * (ProducerPort and ConsumerPort over AF_UNIX sockets, shared-memory chunk ingest,
 * central trace buffers, sessions).
 *
 * The service never owns the event loop. Call order:
 *
 *   struct sonde_service_opts o = {.sz = sizeof(o)};      optional socket names
 *   struct sonde_service *s = sonde_service__new(&o);      binds and listens
 *   sonde_service__watch_fd(s, fd);                        optional: the caller's own fd
 *   loop:
 *     sonde_service__poll(s, timeout)                      waits, handles what is ready
 *   sonde_service__free(s);                                closes everything, unlinks paths
 *
 * or, where the caller's loop waits for other things too:
 *   loop:
 *     poll sonde_service__fd(s) for POLLIN, with timeout sonde_service__timeout_ms(s)
 *     sonde_service__process(s)                            handles what is ready
 *
 * Everything happens on the calling thread inside sonde_service__poll() and
 * sonde_service__process(), except the writes into write_into_file outputs, one thread per
 * file (a consumer's file may block a write forever; the loop never waits for it). The process should ignore SIGPIPE (sonded
 * does), so that a pipe whose reader went away fails the write instead. The service has
 * no data source of its own: `sonde probes` (src/probes/), a producer process that sonded
 * supervises, serves linux.perf and the other system data sources.
 */
#ifndef SONDE_SERVICE_H
#define SONDE_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sonde/export.h>

struct sonde_service;

struct sonde_service_opts {
	size_t sz; /* sizeof(struct sonde_service_opts) */
	/* Socket names; NULL selects the Perfetto defaults ($PERFETTO_*_SOCK_NAME, then
	 * /run/perfetto/traced-*.sock or /tmp/perfetto-*). A leading '@' is an abstract
	 * name. */
	const char *producer_socket;
	const char *consumer_socket;
	/* The connector socket where a supervisor hands over connected sockets (see
	 * docs/service.md). NULL: $SONDE_CONNECTOR_SOCK_NAME, else
	 * /run/perfetto/sonde-connector.sock if /run/perfetto/ is accessible, else
	 * /tmp/sonde-connector. "none" disables the connector. */
	const char *connector_socket;
	/* Start in lockdown mode: producers whose uid is not the service's are refused. */
	bool lockdown;
	/* Socket permissions, indexed by enum sonde_service_socket. A mode of 0 selects the
	 * default (0666 producer and consumer, 0600 connector); gid is applied when
	 * socket_gid_set. */
	unsigned socket_mode[3];
	unsigned socket_gid[3];
	bool socket_gid_set[3];
	/* Limits; 0 selects the default documented in docs/service.md. */
	unsigned max_sessions;			  /* 15 */
	unsigned max_sessions_per_uid;		  /* 5 */
	unsigned max_connections;		  /* 1000 */
	unsigned max_connections_per_uid;	  /* 256 */
	unsigned max_buffers_per_session;	  /* 128 (also the hard maximum) */
	unsigned long long max_session_buffer_kb; /* 1 GiB: sum of a session's buffer sizes */
	unsigned max_smb_kb;			  /* 32 MiB (also the hard maximum) */
	unsigned max_pending_kb;		  /* 16 MiB unsent to one client */
	/* Sum of the buffer sizes of every session of one consumer uid, detached sessions
	 * included: a quarter of MemTotal (at least 1 GiB if /proc/meminfo is unreadable). */
	unsigned long long max_uid_buffer_kb;
	/* Relay sockets (HOST:PORT, [V6]:PORT, vsock://CID:PORT; a comma-separated list):
	 * producer sockets whose peers are relays (traced_relay, sonded --relay), trusted
	 * to vouch for the producers they forward (SetPeerIdentity) and to describe their
	 * machine (RelayPort). NULL: none; SetPeerIdentity is then believed from nobody. */
	const char *relay_socket;
	/* The host's machine name for TraceConfig's machine_name_filter. NULL:
	 * $PERFETTO_MACHINE_NAME, else the kernel's name (uname -s), as Perfetto's. */
	const char *machine_name;
	/* Milliseconds a TCP or vsock peer has to bind its service (a producer: and to
	 * initialize its connection; on a relay socket: and to vouch for itself) before
	 * it is closed. 0: 10000. */
	unsigned remote_handshake_ms;
	/* Milliseconds without progress after which a client that does not read its socket
	 * is closed and a write_into_file output that accepts nothing ends its session (both
	 * real time: CLOCK_MONOTONIC). 0: 10000. */
	unsigned stall_timeout_ms;
};

/* Index of a socket in sonde_service_opts.socket_* and for sonde_service__socket. */
enum sonde_service_socket {
	SONDE_SOCKET_PRODUCER = 0,
	SONDE_SOCKET_CONSUMER = 1,
	SONDE_SOCKET_CONNECTOR = 2,
};

/* Creates the service and starts listening on both sockets (and the connector's). Returns
 * NULL and sets errno on failure: EADDRINUSE when a service already answers on one of
 * the names, EEXIST when a path exists and is not a socket (a stale socket file, which
 * nothing answers on, is replaced); the log then says which in one line. The caller owns
 * the result (sonde_service__free). */
SONDE_API struct sonde_service *sonde_service__new(const struct sonde_service_opts *opts);
/* A pollable fd that becomes readable when the service has work. Owned by the service. */
SONDE_API int sonde_service__fd(const struct sonde_service *s);
/* Milliseconds until the service's next timer, or -1 if none is armed. */
SONDE_API int sonde_service__timeout_ms(const struct sonde_service *s);
/* Handles ready IO and due timers without blocking. Returns 0 or -errno. */
SONDE_API int sonde_service__process(struct sonde_service *s);
/* Waits until the service has work, its next timer is due, the watched fd is readable or
 * timeout_ms pass (-1: no bound of the caller's), then handles what is ready as
 * sonde_service__process does; one epoll_wait, with no poll of the caller's around it.
 * Returns 1 when the watched fd is readable (the caller reads it), 0, or -errno. */
SONDE_API int sonde_service__poll(struct sonde_service *s, int timeout_ms);
/* Adds fd, the caller's (a signalfd, say), to what sonde_service__poll waits for. The
 * service never reads or closes it; the caller keeps it open until sonde_service__free.
 * 0 or -errno. */
SONDE_API int sonde_service__watch_fd(struct sonde_service *s, int fd);
/* The socket names in use (valid until sonde_service__free). which: an enum
 * sonde_service__socket; NULL for a disabled connector. The producer's is a
 * comma-separated list when it listens on several, Unix names first. */
SONDE_API const char *sonde_service__socket(const struct sonde_service *s, int which);
/* Ends every session and connection, closes the sockets and unlinks the socket files it
 * bound that are still its own (not one put in their place). Accepts NULL. */
SONDE_API void sonde_service__free(struct sonde_service *s);
/* Takes fd, one end of a connected AF_UNIX stream socket (a socketpair) whose other end
 * the caller gave to its own `sonde probes` child pid, as a producer connection of that
 * child: the only connection sent, in each DataSourceConfig, the credentials of the
 * session's consumer (docs/service.md, "sonded and its probes"). No connection made
 * through a socket name ever is. 0, or -errno (fd is closed). */
SONDE_API int sonde_service__add_probes(struct sonde_service *s, int fd, pid_t pid);
/* Names the process that runs the caller's own `sonde probes` (its child, which it
 * reaps: a pid cannot be reused before that), or 0 for none: connections added for
 * another pid lose their trust. Call it with 0 as soon as the child is reaped. */
SONDE_API void sonde_service__trust_probes(struct sonde_service *s, pid_t pid);

#endif
