/* tracefs: finding the mount, a private instance for one session, and the files in it.
 * Internal to libsonde.
 *
 * The ftrace data source records into its own instance (instances/NAME), never into the
 * top-level buffer: other tracers (trace-cmd, perf, a second tool) keep their state, and
 * the whole configuration is undone by removing the directory. Ownership is a flock on
 * LOCK_DIR/ftrace-NAME.lock held for as long as the instance is in use:
 *   - a second session (in this process or another) finds the lock taken: -EBUSY;
 *   - after a crash the lock is free but the directory is still there: the next
 *     sonde__tracefs_instance_acquire removes it (disabling everything it had enabled) before
 *     creating a fresh one.
 * The lock and the instance's fds are O_CLOEXEC, but a fork() without exec shares them:
 * a child that outlives the session keeps the lock (and the instance) until it exits.
 */
#ifndef SONDE_PERF_TRACEFS_H
#define SONDE_PERF_TRACEFS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

enum { TRACEFS_PATH_MAX = 256 };

/* Finds tracefs: /sys/kernel/tracing, then /sys/kernel/debug/tracing. When neither is
 * mounted and allow_mount is set, mounts tracefs at /sys/kernel/tracing. Writes the
 * directory into out. Returns 0, -ENOENT (not mounted, not mounting), or mount's -errno. */
int sonde__tracefs_find(char *out, size_t cap, bool allow_mount);

struct tracefs_instance {
	char root[TRACEFS_PATH_MAX]; /* the tracefs mount */
	char dir[TRACEFS_PATH_MAX];  /* root/instances/NAME */
	int lock_fd;
	bool removed_stale; /* acquire found and removed a crashed run's instance */
};

/* Takes the lock and creates a fresh instances/NAME under root (NAME: letters, digits,
 * '_', '-'). Returns 0, -EBUSY when another session holds it, -EINVAL for a bad name, or
 * -errno. lock_dir is created if missing. */
int sonde__tracefs_instance_acquire(struct tracefs_instance *in, const char *root, const char *name,
			     const char *lock_dir);
/* Removes the instance and releases the lock. Safe on a zeroed or released instance.
 * Returns 0, or -EBUSY when a file of the instance stayed open (a forked child still
 * holding a trace_pipe_raw fd): the directory is then left for the next acquire. */
int sonde__tracefs_instance_release(struct tracefs_instance *in);

/* Reads dir/rel into b (replacing its content). Returns 0 or -errno. */
int sonde__tracefs_read(const char *dir, const char *rel, struct buf *b);
/* Writes s to dir/rel in one write(2). Returns 0 or -errno. */
int sonde__tracefs_write(const char *dir, const char *rel, const char *s);

/* Per-CPU counters from per_cpu/cpuN/stats. */
struct tracefs_cpu_stats {
	unsigned long long entries, overrun, commit_overrun, bytes, dropped_events, read_events;
	double oldest_event_ts, now_ts; /* seconds, in the trace clock */
};

/* Parses a per_cpu/cpuN/stats file. Missing lines leave zeros. Returns 0, or
 * -SONDE_E_FORMAT when no line was recognised. */
int sonde__tracefs_cpu_stats_parse(const char *buf, size_t len, struct tracefs_cpu_stats *st);

#endif
