/* Helpers for the hostile-client tests: a witness session that must lose nothing, an
 * attacker run in a forked child at the same time, sonded's fd and memory baselines, and
 * raw-socket primitives that never fail the test themselves (they are used in the
 * attacker child, where a failed assertion would take the test's tmpdir with it). */
#ifndef SONDE_TEST_HOSTILE_UTIL_H
#define SONDE_TEST_HOSTILE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "svc_util.h"

/* A producer writing numbered packets (field 901 = n, field 900 = "witness", timestamp
 * n + 1) into its own session, and the consumer of that session. */
struct witness {
	struct tprod p;
	struct tc c;
	uint64_t enable_req;
	uint32_t target;
	uint32_t packets; /* written so far: 0..packets-1 */
	uint32_t chunk_id;
	unsigned steps;
	struct buf trace;
};

struct hostile {
	struct sonded d;
	struct witness w;
	struct tc hc; /* the attacker's own consumer session, if any */
	uint64_t hc_enable;
	bool has_hc;
	volatile int *quiet; /* shared with the attacker: while set, the witness pauses */
	int fds0;	     /* sonded's open fds once the sessions run */
	long rss0;	     /* and its resident set, KiB */
};

/* Starts sonded (extra: its further arguments, or NULL) and the witness; with ds, also a
 * consumer session enabling data source ds for the attacker's producer. Then takes the
 * baselines. */
void hostile_up_args(struct hostile *h, const char *ds, const char *const *extra);
void hostile_up(struct hostile *h, const char *ds);
/* Forks fn(arg) as the attacker while the witness keeps writing and reading; returns the
 * attacker's exit code (fn's return value; 128 + signal if it died). Fails after
 * timeout_s. */
int hostile_run(struct hostile *h, int (*fn)(void *), void *arg, int timeout_s);
/* Waits for sonded's fds and RSS to come back to the baselines, checks the witness lost
 * nothing, and stops sonded. */
void hostile_down(struct hostile *h);
/* The attacker's session: reads it (every reply well formed) and frees it. */
void hostile_read_attacker_session(struct hostile *h);
/* A varint field of the TraceStats of t's session. */
uint64_t hostile_stat(struct tc *t, uint32_t field);

/* In the attacker: a producer of data source "hostile.ds", started in the attacker's
 * session; *target receives the buffer it was told to write to. */
bool hostile_producer_started(struct tprod *p, const struct hostile *h, const char *name,
			      uint32_t *target);
/* Appends a ChunksToPatch entry full of out-of-range values naming buffer target. */
void hostile_put_patches(struct buf *a, uint32_t target, unsigned *seed);

/* sonded's open fd count, VmRSS in KiB, and CPU time (user + system) in seconds. */
int proc_fd_count(pid_t pid);
/* pid's open descriptors, one "\nFD TARGET" each (TARGET as /proc/PID/fd links name it:
 * socket:[inode], pipe:[inode], a path), malloc'd. */
char *proc_fd_snapshot(pid_t pid);
/* Waits up to timeout_ms until pid holds no descriptor missing from base (a snapshot):
 * NULL then, else the descriptors it holds that base has not, malloc'd. A leak is a
 * descriptor that was not there before; one of base that went away is none. */
char *proc_fd_new_since(pid_t pid, const char *base, int timeout_ms);
long proc_rss_kb(pid_t pid);
double proc_cpu_s(pid_t pid);
/* Time the process spent runnable (on a CPU or waiting for one), in seconds: about the
 * wall time for a process that never sleeps, whatever the load. -1 if unknown. */
double proc_runnable_s(pid_t pid);

/* ---- raw sockets (never assert) ---- */
/* Sends all n bytes. On a non-blocking fd, returns -EAGAIN if not a byte could be sent
 * within 100 ms; a frame once started is always completed (or -ETIMEDOUT after 30 s). */
int raw_send(int fd, const void *p, size_t n);
/* Reads one frame's payload into out (blocking up to timeout_ms): its length, or -1 on
 * EOF, timeout or a frame larger than cap. */
int raw_next_frame(int fd, uint8_t *out, size_t cap, int timeout_ms);
/* BindService(name) as request 1; true once its successful reply arrived (10 s). */
bool raw_bind_answered(int fd, const char *name);
/* InvokeMethod(service 1, method) as request id. args are the request message, or, with
 * wrap_field != 0, the bytes of that field of it. */
int raw_invoke(int fd, uint64_t id, uint32_t method, uint32_t wrap_field, const struct buf *args);
struct raw_reply {
	int msg; /* enum ipc_msg */
	bool success, has_more;
	size_t data_len;
	uint8_t data[4096]; /* the reply message (its first bytes) */
	char error[200];    /* RequestError's text */
};
/* Reads frames until the one answering request id; returns its msg, or -1 on EOF or
 * after 10 s. */
int raw_reply(int fd, uint64_t id, struct raw_reply *out);
/* Reads and drops everything until EOF or a reset: true if it came within timeout_ms. */
bool raw_wait_eof(int fd, int timeout_ms);
/* Waits, reading nothing, until the peer hung up: true if it did within timeout_ms. */
bool raw_wait_hangup(int fd, int timeout_ms);
/* Reads and drops what is already there. */
void raw_drain(int fd);

#endif
