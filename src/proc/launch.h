/* Launching a command suspended before execve. Internal.
 *
 * sonde__proc_launch_start forks a child that waits on a pipe before it execs, so the caller can
 * open perf events on it (with enable_on_exec) first. sonde__proc_launch_resume lets it exec and
 * reports whether execve failed: the child writes errno to a close-on-exec pipe, so an
 * end-of-file on that pipe means the exec succeeded. The exit status is waitable.
 *
 * Call order: start, then resume or abort, then wait (any number of times), then free.
 */
#ifndef SONDE_PROC_LAUNCH_H
#define SONDE_PROC_LAUNCH_H

#include <stdbool.h>
#include <sys/types.h>

struct proc_launch {
	pid_t pid;
	int go_fd;  /* write end: one byte lets the child exec; close without writing aborts */
	int err_fd; /* read end of the child's close-on-exec error pipe */
	bool reaped;
	int status; /* wait status once reaped */
};

/* argv[0] is looked up in PATH unless it contains a '/'. envp NULL means the caller's
 * environment. 0 or -errno (-ENOENT/-EACCES when argv[0] cannot be found or run: nothing
 * was started). */
int sonde__proc_launch_start(struct proc_launch *l, char *const argv[], char *const envp[]);
/* Lets the child exec. 0 when execve succeeded, -errno of the failed execve otherwise (the
 * child has then exited with status 127 and been reaped). */
int sonde__proc_launch_resume(struct proc_launch *l);
/* Kills a child that has not been resumed yet and reaps it. */
void sonde__proc_launch_abort(struct proc_launch *l);
/* waitpid on the child (flags: 0 or WNOHANG). 1 with *status (a wait status) once it
 * exited, 0 while it runs (WNOHANG), -errno. Repeated calls after the exit return 1. */
int sonde__proc_launch_wait(struct proc_launch *l, int flags, int *status);
/* Closes the pipes. Does not wait for or kill the child. */
void sonde__proc_launch_free(struct proc_launch *l);

/* Resolves a command name like execvp would: the path of the first executable candidate
 * in PATH (default "/bin:/usr/bin"). 0 or -ENOENT / -EACCES; out has PATH_MAX bytes. */
int sonde__proc_find_in_path(const char *name, char *out, size_t cap);

/* A shell-style exit code from a wait status: the exit status, or 128 + signal. */
int sonde__proc_exit_code(int wait_status);

#endif
