/* sonde probes: the system data sources of a Linux tracing service (linux.perf,
 * linux.ftrace, linux.process_stats, linux.sys_stats),
 * served as one producer to any Perfetto-compatible service: sonded, which starts them as
 * its supervised child, or Perfetto's traced (docs/probes.md).
 *
 * The layer sits on the public client library (include/sonde/client.h) and, per data
 * source, on whatever it records with (the recorder for linux.perf). It never owns the
 * event loop: the program (programs/sonde/cmd_probes.c) polls what sonde__probes_pollfds lists
 * and calls sonde__probes_process.
 *
 *   struct probes_opts o = {.sz = sizeof(o), .socket = NULL};
 *   struct probes *p = sonde__probes_new(&o);
 *   loop: n = sonde__probes_pollfds(p, fds, cap); poll(fds, n, sonde__probes_timeout_ms(p));
 *         sonde__probes_process(p, fds, n);
 *   sonde__probes_free(p);
 *
 * The connection: sonde__probes_process connects (the socket named as Perfetto clients name it:
 * opts.socket, else $PERFETTO_PRODUCER_SOCK_NAME, else the default path), registers every
 * data source of the registry below. When the service goes away every instance stops and
 * the probes connect again, 100 ms later, then twice as long after each failure, up to 5 s
 * (the client library's opts.reconnect once connected, the core's own backoff before).
 *
 * ---- The data-source registry ----
 *
 * Each data source is one `struct probe_source_ops`, listed in probes.c's table. The core
 * registers it under `name` with the descriptor flags given, creates its state once with
 * `create` and frees it with `destroy`, and forwards the service's commands for its instances
 * to the other callbacks, on the loop thread. Instance ids are the service's
 * (DataSourceInstanceID); a source keeps its own instance table. Rules:
 *
 *  - setup/start get the DataSourceConfig bytes exactly as the service sent them (valid
 *    during the call). A config the source refuses is written into the trace (an
 *    android_log packet: sonde__probes_log) rather than failed: the wire protocol has no
 *    error path from a producer to the consumer.
 *  - Writers: sonde__probes_new_writer(core, id) in start (or later); the source frees them in
 *    stop or disconnected, before returning.
 *  - stop ends the instance; everything written before it returns is flushed by the core
 *    and the stop acknowledged (the core registers the source with will_notify_on_stop).
 *  - flush: write what is pending and flush the instance's writers.
 *  - disconnected: the service is gone; free every instance (their writers die with the
 *    connection). No other call follows for them.
 *  - pollfds/process/timeout_ms: the fds the source wants polled (POLLIN), what to do
 *    when any is ready or a timer is due (process gets the whole array and finds its own
 *    fds in it), and in how many ms it wants process called at the latest (-1: no
 *    timer). Optional.
 *  - Whom an instance acts for: sonde__probes_consumer(core, config, len, ...) (below); a source
 *    that reads or exposes anything a consumer could not see itself applies the rules of
 *    proc/perfauth.h to it.
 */
#ifndef SONDE_PROBES_PROBES_H
#define SONDE_PROBES_PROBES_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proc/perfauth.h"

struct probes;
struct sonde_trace_writer;

struct probe_source_ops {
	const char *name; /* the data source name, e.g. "linux.perf" */
	bool handles_incremental_state_clear;
	void *(*create)(struct probes *core); /* NULL and errno on failure */
	void (*destroy)(void *src);
	void (*setup)(void *src, uint64_t id, const void *cfg, size_t len);
	void (*start)(void *src, uint64_t id, const void *cfg, size_t len);
	void (*stop)(void *src, uint64_t id);
	void (*flush)(void *src, uint64_t id);
	void (*clear_incremental_state)(void *src, uint64_t id);
	void (*disconnected)(void *src);
	size_t (*pollfds)(void *src, struct pollfd *fds, size_t cap);
	void (*process)(void *src, const struct pollfd *fds, size_t n);
	int (*timeout_ms)(void *src);
};

/* The sources of the registry (a file of this layer per source, or per sources that
 * work together). */
extern const struct probe_source_ops sonde__perfds_source;
extern const struct probe_source_ops sonde__ftrace_source;    /* sysds.c */
extern const struct probe_source_ops sonde__procstats_source; /* sysds.c */
extern const struct probe_source_ops sonde__sysstats_source;  /* sysds.c */

/* Whom the probes act for when the service does not say who the consumer is. */
enum probes_targets {
	/* as the probes' own user: its uid, gid and capabilities, under the kernel's rules
	 * (what `sonde record` run by that user could do) */
	PROBES_TARGETS_OWN = 0,
	/* anyone: every process the probes can open, kernel frames when the kernel gives
	 * them (what traced_perf trusts on a Linux host) */
	PROBES_TARGETS_ANY,
	/* nobody in particular: no process, no kernel frames, no ftrace, no process tree;
	 * only what any user may read (sys_stats). For probes serving consumers whose
	 * identity no one vouches for (a relay's) */
	PROBES_TARGETS_NONE,
};

struct probes_opts {
	size_t sz;	    /* sizeof(struct probes_opts) */
	const char *socket; /* NULL: $PERFETTO_PRODUCER_SOCK_NAME, else the default */
	enum probes_targets targets;
	/* Believe DataSourceConfig.sonded_consumer when the connection is a socket inherited
	 * from this process's parent (socket "fd:N") whose SO_PEERCRED is that parent (pid ==
	 * getppid(), uid root or ours): how sonded starts its probes. Otherwise the field is
	 * ignored and the probes act for nobody in particular, whatever `targets` says. */
	bool trust_parent;
};

/* Creates the probes and their sources; connecting waits for sonde__probes_process. NULL with
 * errno on failure. Free with sonde__probes_free. */
struct probes *sonde__probes_new(const struct probes_opts *o);
/* Ends every instance, disconnects, frees every source. Accepts NULL. */
void sonde__probes_free(struct probes *p);
/* The fds to poll: the connection's (POLLIN, POLLOUT while it has output) and each
 * source's. Returns how many were written (at most cap). */
size_t sonde__probes_pollfds(struct probes *p, struct pollfd *fds, size_t cap);
/* The poll timeout: the next reconnect attempt or source timer, in ms (never -1). */
int sonde__probes_timeout_ms(struct probes *p);
/* Whether the probes are done: their inherited connection ("fd:N") closed or could not
 * be used; it cannot be opened again, so the program exits. */
bool sonde__probes_done(const struct probes *p);
/* Handles what is ready in fds (as filled by sonde__probes_pollfds and polled) and what is due:
 * connecting, the service's commands, the sources' work. */
void sonde__probes_process(struct probes *p, const struct pollfd *fds, size_t n);

/* ---- for the sources ---- */

/* Whom an instance with this DataSourceConfig acts for. With the service's word (the
 * trusted sonded_consumer field), *who is the session's consumer and *any false; with
 * --trust-parent or --targets none and no such word, nobody in particular (who->anonymous:
 * the rules of perfauth.h give it nothing); else the --targets policy: the probes' own
 * credentials, or *any true (no per-target check).
 * desc gets a phrase for messages ("consumer uid 1000", "any consumer (--targets
 * any)"). Returns 0, or -EPERM with a reason in desc when the connection is trusted but
 * the field is missing (nothing can be said about the consumer: refuse). */
int sonde__probes_consumer(struct probes *p, const void *cfg, size_t len, struct perfauth_consumer *who,
		    bool *any, char *desc, size_t desc_len);
/* A trace writer for instance id on the current connection, or NULL with errno. */
struct sonde_trace_writer *sonde__probes_new_writer(struct probes *p, uint64_t id);
/* The state another source of the registry made with its create (sources of one file
 * that work together in one tracing session), or NULL when it is not registered. */
void *sonde__probes_source_state(struct probes *p, const struct probe_source_ops *ops);

enum { PROBES_LOG_WARN = 5, PROBES_LOG_ERROR = 6 }; /* android_log priorities */
/* Writes msg into the trace through w (NULL: nowhere) as an android_log event tagged with
 * the data source's name (the one TracePacket kind that carries free text any Perfetto
 * reader shows: Trace Processor's android_logs table, the UI's log panel; `sonde trace`
 * prints the errors). pid > 0 names the process it is about. */
void sonde__probes_log(struct sonde_trace_writer *w, const char *tag, int prio, int pid,
		       const char *msg);

#endif
