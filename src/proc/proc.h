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
	unsigned flags; /* the kernel's PF_* flags (field 9) */
	/* its process's threads (field 20), a zombie main thread included until the
	 * process is reaped */
	unsigned threads;
	uint64_t start_time;
	char comm[64];
};

/* Reads a whole (pseudo-)file into b (replacing its contents). 0 or -errno; a missing file
 * is -ESRCH, since under /proc that means the process is gone. */
int sonde__proc_read_file(const char *path, struct buf *b);

/* PF_KTHREAD in proc_stat.flags: a kernel thread, which has no user space. */
#define PROC_PF_KTHREAD 0x00200000u
/* PF_EXITING: the task is in its exit (set before its exit record is written; it runs on
 * while its memory and files are torn down, tens of ms for a large process). */
#define PROC_PF_EXITING 0x00000004u

/* Whether st, read from /proc/PID/stat, is of a process that has ended: dead, or a zombie
 * with no thread but its main one. A main thread that ended first (pthread_exit) stays a
 * zombie, and names the process's state 'Z', while the other threads run on: the process
 * lives until its last thread ends. (A thread's own stat, /proc/PID/task/TID/stat, says
 * whether that thread ended.) */
static inline bool sonde__proc_stat_ended(const struct proc_stat *st)
{
	return st->state == 'X' || (st->state == 'Z' && st->threads <= 1);
}

/* Parses the text of /proc/PID[/task/TID]/stat. 0 or -SONDE_E_FORMAT. */
int sonde__proc_stat_parse(const char *buf, size_t len, struct proc_stat *st);
/* tid 0 reads the process's own stat. -ESRCH when it does not exist. */
int sonde__proc_stat_read(pid_t pid, pid_t tid, struct proc_stat *st);
/* The thread ids of pid (malloc'd array, caller frees). 0 or -errno (-ESRCH: no process). */
int sonde__proc_list_tasks(pid_t pid, pid_t **tids, size_t *n);
/* A thread of pid that has not ended, into *tid: pid itself unless its main thread ended
 * first (a zombie whose other threads run on), then another one. What /proc says of the
 * process's memory (maps, exe) and what perf_event_open and ptrace accept go through a
 * live thread: a zombie main thread has none of it. 0 or -ESRCH (none), -ENOMEM. */
int sonde__proc_live_task(pid_t pid, pid_t *tid);
/* /proc/PID/task/TID/comm without the newline; out has 16 bytes at least. 0 or -errno. */
int sonde__proc_read_comm(pid_t pid, pid_t tid, char *out, size_t cap);
/* Real and effective uid from the text of /proc/PID/status. 0 or -SONDE_E_FORMAT. */
int sonde__proc_status_parse_uids(const char *buf, size_t len, uid_t *ruid, uid_t *euid);
int sonde__proc_read_uids(pid_t pid, uid_t *ruid, uid_t *euid);
/* The process (thread group) of a thread, from the text of /proc/TID/status. 0 or
 * -SONDE_E_FORMAT. */
int sonde__proc_status_parse_tgid(const char *buf, size_t len, pid_t *tgid);
/* The same from /proc/TID/status (which exists for every thread). 0 or -errno (-ESRCH: no
 * such thread). */
int sonde__proc_read_tgid(pid_t tid, pid_t *tgid);

/* 1 when (pid, start_time) is alive (a thread of it runs on), 0 when it exited or the pid was reused,
 * -errno when it cannot be determined (never guessed). start_time 0 skips the identity check. */
int sonde__proc_is_alive(pid_t pid, uint64_t start_time);

/* Parses a list of decimal pids separated by spaces or newlines (the text of
 * /proc/PID/task/TID/children) into out[0..max). Count of pids (at most max), or
 * -SONDE_E_FORMAT at anything else. */
int sonde__proc_parse_pid_list(const char *buf, size_t len, pid_t *out, size_t max);
/* The children of every thread of pid (malloc'd array, caller frees; may be empty).
 * 0 or -errno (-ESRCH: no process). */
int sonde__proc_list_children(pid_t pid, pid_t **pids, size_t *n);

/* One thread held by sonde__proc_stop. */
struct proc_held {
	pid_t tid;
	int sig; /* a signal it was about to receive when it stopped: delivered at resume */
	bool stopped;
	bool gone; /* exited while held (its exit was reaped from the ptrace link) */
};

/* A process stopped for attaching. A zeroed one holds nothing. */
struct proc_stopped {
	pid_t pid;
	uint64_t start_time;
	bool stopped_by_us;	/* false when it was already stopped: then it is not resumed */
	bool by_signal;		/* a child of the caller, stopped with SIGSTOP */
	struct proc_held *held; /* malloc'd; freed by sonde__proc_resume */
	size_t n_held;
};

/* Stops every thread of pid for attaching, invisibly to its parent: each thread is seized
 * with PTRACE_SEIZE and stopped with PTRACE_INTERRUPT (a ptrace-stop, which the parent's
 * waitpid does not report, unlike SIGSTOP's group-stop), until a listing of its threads
 * finds no thread that is not stopped (a running thread could have started another). A
 * child of the calling process is stopped with SIGSTOP instead (proc.c says why), and
 * resumed with SIGCONT. Waits at most timeout_ms. start_time, when nonzero, must match (guards
 * against pid reuse). A process that was already stopped is left as it is. The calling thread
 * becomes the tracer: sonde__proc_resume must be called from it. 0 or -errno (-ESRCH: gone or
 * reused, -EPERM: ptrace refused (Yama ptrace_scope, no CAP_SYS_PTRACE, already traced),
 * -ETIMEDOUT: some thread did not stop; every thread is released again on failure). */
int sonde__proc_stop(pid_t pid, uint64_t start_time, int timeout_ms, struct proc_stopped *out);
/* Stops thread tid of pid alone, as sonde__proc_stop stops each of a process's threads
 * (PTRACE_SEIZE + PTRACE_INTERRUPT; a child of the caller is stopped whole, with SIGSTOP),
 * adding it to st: zeroed, or holding other threads of pid already. A thread stopped by
 * someone else is left alone. Waits at most timeout_ms. 0 or -errno (-ESRCH: the thread or
 * the process (pid, start_time) is gone, -EPERM: ptrace refused); on failure st holds what
 * it held before. */
int sonde__proc_stop_thread(pid_t pid, pid_t tid, uint64_t start_time, int timeout_ms,
			    struct proc_stopped *st);
/* Detaches from every thread sonde__proc_stop holds (each receives the signal its stop
 * intercepted, if any), or sends SIGCONT to a child it stopped with SIGSTOP (if it is still
 * the same process), so the process runs on. Idempotent; a zeroed st is fine. 0 or -errno. */
int sonde__proc_resume(struct proc_stopped *st);

#endif
