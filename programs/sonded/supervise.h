/* sonded's supervision of its `sonde probes` child: started with one end of a socketpair
 * whose other end the service takes as the child's producer connection
 * (sonde_service__add_probes), restarted with backoff (and a new socketpair) when it dies,
 * stopped at exit. Only that connection is sent the consumers' credentials, and only
 * until the child is reaped (sonde_service__trust_probes). */
#ifndef SONDED_SUPERVISE_H
#define SONDED_SUPERVISE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sonde_service;

struct probes_child {
	struct sonde_service *svc; /* NULL in relay mode: nothing to tell */
	const char *sock;	   /* relay mode: the socket the child connects to */
	char exe[4096];		   /* the `sonde` binary next to sonded */
	const char *log_level;	   /* passed on, or NULL */
	pid_t pid;		   /* 0: not running */
	uint32_t backoff_ms;	   /* the wait before the next restart */
	uint64_t started_ms, restart_ms;
};

/* Finds `sonde` next to sonded's own executable and starts it. 0 or -errno (then
 * nothing runs, and nothing is restarted). */
int probes_child_start(struct probes_child *pc, struct sonde_service *svc, const char *log_level);
/* The same for a relay (sonded --relay): the child connects to the relay's local socket
 * and, through it, reaches the host. */
int probes_child_start_at(struct probes_child *pc, const char *sock, const char *log_level);
/* After SIGCHLD: reaps the child if it exited and schedules its restart. */
void probes_child_reap(struct probes_child *pc);
/* The poll timeout the restart needs (ms), or -1. */
int probes_child_timeout_ms(const struct probes_child *pc);
/* Restarts the child when its restart is due. */
void probes_child_tick(struct probes_child *pc);
/* SIGTERM, then SIGKILL after 5 s; reaps it. */
void probes_child_stop(struct probes_child *pc);

#endif
