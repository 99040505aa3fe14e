#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/launch.h"

extern char **environ;

int sonde__proc_find_in_path(const char *name, char *out, size_t cap)
{
	const char *path = getenv("PATH");
	int err = -ENOENT;

	if (!*name)
		return -ENOENT;
	if (strchr(name, '/')) {
		if ((size_t)snprintf(out, cap, "%s", name) >= cap)
			return -ENAMETOOLONG;
		return 0;
	}
	if (!path)
		path = "/bin:/usr/bin";
	while (*path) {
		const char *colon = strchrnul(path, ':');
		size_t dlen = (size_t)(colon - path);
		struct stat st;

		/* An empty PATH element means the current directory. */
		if ((size_t)snprintf(out, cap, "%.*s%s%s", (int)dlen, path, dlen ? "/" : "", name) <
			    cap &&
		    stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (access(out, X_OK) == 0)
				return 0;
			err = -EACCES; /* found but not executable: keep looking, like execvp */
		}
		path = *colon ? colon + 1 : colon;
	}
	return err;
}

/* In the child: wait for the go byte, then exec or report errno and exit 127. Only
 * async-signal-safe calls here. */
static void child(int go_rd, int err_wr, const char *path, char *const argv[], char *const envp[])
{
	char c;
	ssize_t n;

	do
		n = read(go_rd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(127); /* aborted */
	close(go_rd);
	execve(path, argv, envp);
	int e = errno;
	while (write(err_wr, &e, sizeof(e)) < 0 && errno == EINTR)
		;
	_exit(127);
}

int sonde__proc_launch_start(struct proc_launch *l, char *const argv[], char *const envp[])
{
	char path[PATH_MAX];
	int go[2], er[2];

	memset(l, 0, sizeof(*l));
	l->go_fd = l->err_fd = -1;
	int err = sonde__proc_find_in_path(argv[0], path, sizeof(path));
	if (err)
		return err;
	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(er, O_CLOEXEC) < 0) {
		err = -errno;
		goto close_go;
	}
	pid_t pid = fork();
	if (pid < 0) {
		err = -errno;
		goto close_er;
	}
	if (pid == 0) {
		close(go[1]);
		close(er[0]);
		child(go[0], er[1], path, argv, envp ? envp : environ);
	}
	close(go[0]);
	close(er[1]);
	l->pid = pid;
	l->go_fd = go[1];
	l->err_fd = er[0];
	return 0;
close_er:
	close(er[0]);
	close(er[1]);
close_go:
	close(go[0]);
	close(go[1]);
	return err;
}

int sonde__proc_launch_resume(struct proc_launch *l)
{
	int e = 0;
	ssize_t n;

	if (l->go_fd < 0)
		return -EINVAL;
	do
		n = write(l->go_fd, "g", 1);
	while (n < 0 && errno == EINTR);
	int werr = n < 0 ? -errno : 0;
	close(l->go_fd);
	l->go_fd = -1;
	if (werr)
		return werr;
	do
		n = read(l->err_fd, &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	close(l->err_fd);
	l->err_fd = -1;
	if (n == (ssize_t)sizeof(e) && e > 0) {
		int status;
		sonde__proc_launch_wait(l, 0, &status);
		return -e;
	}
	return 0;
}

void sonde__proc_launch_abort(struct proc_launch *l)
{
	int status;

	if (l->pid <= 0 || l->reaped)
		return;
	if (l->go_fd >= 0) {
		close(l->go_fd); /* the child sees end-of-file and exits */
		l->go_fd = -1;
	} else {
		kill(l->pid, SIGKILL);
	}
	sonde__proc_launch_wait(l, 0, &status);
}

int sonde__proc_launch_wait(struct proc_launch *l, int flags, int *status)
{
	if (l->reaped) {
		*status = l->status;
		return 1;
	}
	for (;;) {
		pid_t r = waitpid(l->pid, &l->status, flags);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return 0;
		l->reaped = true;
		*status = l->status;
		return 1;
	}
}

void sonde__proc_launch_free(struct proc_launch *l)
{
	if (!l)
		return;
	if (l->go_fd >= 0)
		close(l->go_fd);
	if (l->err_fd >= 0)
		close(l->err_fd);
	l->go_fd = l->err_fd = -1;
}

int sonde__proc_exit_code(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 1;
}
