/* /proc inspection and process control. Internal.
 *
 * Process identity: a pid alone can be reused, so a process is (pid, start time) where the
 * start time is field 22 of /proc/PID/stat (clock ticks since boot). Every check that a
 * process is still "the same" compares both.
 */
#ifndef SONDE_PROC_PROC_H
#define SONDE_PROC_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"

struct proc_stat {
	char state; /* R, S, D, T (stopped), t (traced), Z, X, ... */
	int ppid;
	uint64_t start_time;
	char comm[64];
};

/* Reads a whole (pseudo-)file into b (replacing its contents). 0 or -errno; a missing file
 * is -ESRCH, since under /proc that means the process is gone. */
int sonde__proc_read_file(const char *path, struct buf *b);

/* Parses the text of /proc/PID[/task/TID]/stat. 0 or -SONDE_E_FORMAT. */
int sonde__proc_stat_parse(const char *buf, size_t len, struct proc_stat *st);
/* tid 0 reads the process's own stat. -ESRCH when it does not exist. */
int sonde__proc_stat_read(pid_t pid, pid_t tid, struct proc_stat *st);
/* The thread ids of pid (malloc'd array, caller frees). 0 or -errno (-ESRCH: no process). */
int sonde__proc_list_tasks(pid_t pid, pid_t **tids, size_t *n);
/* /proc/PID/task/TID/comm without the newline; out has 16 bytes at least. 0 or -errno. */
int sonde__proc_read_comm(pid_t pid, pid_t tid, char *out, size_t cap);
/* Real and effective uid from the text of /proc/PID/status. 0 or -SONDE_E_FORMAT. */
int sonde__proc_status_parse_uids(const char *buf, size_t len, uid_t *ruid, uid_t *euid);
int sonde__proc_read_uids(pid_t pid, uid_t *ruid, uid_t *euid);

/* 1 when (pid, start_time) is alive (not a zombie), 0 when it exited or the pid was reused,
 * -errno when it cannot be determined (never guessed). start_time 0 skips the identity check. */
int sonde__proc_is_alive(pid_t pid, uint64_t start_time);

/* Parses a list of decimal pids separated by spaces or newlines (the text of
 * /proc/PID/task/TID/children) into out[0..max). Count of pids (at most max), or
 * -SONDE_E_FORMAT at anything else. */
int sonde__proc_parse_pid_list(const char *buf, size_t len, pid_t *out, size_t max);
/* The children of every thread of pid (malloc'd array, caller frees; may be empty).
 * 0 or -errno (-ESRCH: no process). */
int sonde__proc_list_children(pid_t pid, pid_t **pids, size_t *n);

/* A process stopped for attaching. */
struct proc_stopped {
	pid_t pid;
	uint64_t start_time;
	bool stopped_by_us; /* false when it was already stopped: then it is not resumed */
};

/* Stops pid with SIGSTOP and waits (at most timeout_ms) until every thread is stopped.
 * start_time, when nonzero, must match (guards against pid reuse). A process that was
 * already stopped is left as it is. 0 or -errno (-ESRCH: gone or reused, -EPERM: not ours,
 * -ETIMEDOUT: it did not stop, and was resumed). */
int sonde__proc_stop(pid_t pid, uint64_t start_time, int timeout_ms, struct proc_stopped *out);
/* Sends SIGCONT if and only if sonde__proc_stop stopped it, and the pid is still the same process.
 * Idempotent. 0 or -errno. */
int sonde__proc_resume(struct proc_stopped *st);

#endif
