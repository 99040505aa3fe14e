/* sonded's relay mode as a library: a machine's relay to a central tracing service (the
 * host), in the manner of Perfetto's traced_relay. It listens on the local producer socket;
 * every local producer connection gets its own connection to the host, which first hears
 * a SetPeerIdentity naming the local producer (its pid and uid from SO_PEERCRED, this
 * machine's id hint and name), then the producer's frames. The local producer keeps its
 * shared memory buffer: the relay maps it (or creates it) and turns every chunk the
 * producer commits into an emulated chunk, sent inline in CommitData, as the host asks of
 * a connection without shared memory. Host frames go back unchanged except the parts that
 * concern shared memory. When the host goes away, each local producer sees its connection
 * close, as with a service restart, and reconnects.
 *
 * The relay also keeps its own connection to the host's RelayPort service: InitRelay with
 * this machine's SystemInfo, then SyncClock rounds (PING, UPDATE) with this machine's
 * clocks, from which the host tells this machine's clock offsets; it is connected again
 * whenever the host comes back.
 *
 * The relay never owns the event loop. Call order:
 *
 *   struct sonde_relay_opts o = {.sz = sizeof(o), .host = "10.0.0.1:7000"};
 *   struct sonde_relay *r = sonde_relay__new(&o);          binds and listens
 *   sonde_relay__watch_fd(r, fd);                         optional: the caller's own fd
 *   loop:
 *     sonde_relay__poll(r, timeout)                       waits, handles what is ready
 *   sonde_relay__free(r);                                 closes everything, unlinks the path
 *
 * or, polling sonde_relay__fd(r) for POLLIN with timeout sonde_relay__timeout_ms(r) in the
 * caller's own loop, sonde_relay__process(r) when it is readable or the time is up.
 *
 * The process should ignore SIGPIPE.
 */
#ifndef SONDE_RELAY_H
#define SONDE_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <sonde/export.h>

struct sonde_relay;

struct sonde_relay_opts {
	size_t sz; /* sizeof(struct sonde_relay_opts) */
	/* The host's producer socket: HOST:PORT, [V6]:PORT, vsock://CID:PORT (or any socket
	 * name the client library accepts). Required. */
	const char *host;
	/* The local producer socket; NULL selects the Perfetto default
	 * ($PERFETTO_PRODUCER_SOCK_NAME, then /run/perfetto/traced-producer.sock or
	 * /tmp/perfetto-producer). */
	const char *producer_socket;
	/* The local socket's mode (0: 0666) and group (applied when socket_gid_set), as
	 * sonded's producer socket. */
	unsigned socket_mode;
	unsigned socket_gid;
	bool socket_gid_set;
	/* Refuse local producers whose uid is not the relay's (root's are accepted too). */
	bool lockdown;
	/* Local producer connections at once (0: 1000). */
	unsigned max_connections;
	/* Largest shared memory buffer the relay maps or creates for a producer (0: 32768
	 * KiB, also the maximum). */
	unsigned max_smb_kb;
	/* Between two clock synchronisations with the host (0: 30000 ms, as Perfetto's
	 * relay). */
	unsigned sync_interval_ms;
	/* The name this machine is known by at the host (SetPeerIdentity, machine_name_filter);
	 * NULL: $PERFETTO_MACHINE_NAME, else the kernel's name (uname -s), as Perfetto's
	 * relay and sonded's own name. */
	const char *machine_name;
};

/* Listens and returns the relay, or NULL with errno set (EINVAL without a host). */
SONDE_API struct sonde_relay *sonde_relay__new(const struct sonde_relay_opts *opts);
/* One fd to poll for POLLIN. */
SONDE_API int sonde_relay__fd(const struct sonde_relay *r);
/* Milliseconds until sonde_relay__process must run again, or -1. */
SONDE_API int sonde_relay__timeout_ms(const struct sonde_relay *r);
/* Handles what is ready. 0 or -errno (a fatal error of the loop itself). */
SONDE_API int sonde_relay__process(struct sonde_relay *r);
/* Waits until the relay has work, its next deadline, the watched fd is readable or
 * timeout_ms pass (-1: no bound of the caller's), then handles what is ready as
 * sonde_relay__process does, in one epoll_wait. 1 when the watched fd is readable, 0, or
 * -errno. */
SONDE_API int sonde_relay__poll(struct sonde_relay *r, int timeout_ms);
/* Adds fd, the caller's (a signalfd, say), to what sonde_relay__poll waits for; never read
 * or closed by the relay. 0 or -errno. */
SONDE_API int sonde_relay__watch_fd(struct sonde_relay *r, int fd);
/* The local producer socket's name (valid until sonde_relay__free). */
SONDE_API const char *sonde_relay__socket(const struct sonde_relay *r);
/* Local producer connections now forwarded. */
SONDE_API unsigned sonde_relay__connections(const struct sonde_relay *r);
SONDE_API void sonde_relay__free(struct sonde_relay *r);

#endif
