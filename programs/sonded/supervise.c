/* sonded's `sonde probes` child (supervise.h, docs/service.md "sonded and its probes"). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/service.h>

#include "supervise.h"

enum {
	BACKOFF_MIN_MS = 100,
	BACKOFF_MAX_MS = 5000,
	/* a child that ran this long before dying starts the backoff over */
	HEALTHY_MS = 10000,
	STOP_GRACE_MS = 5000,
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* sonded's environment plus SONDE_PROBES_PARENT=<sonded's pid>, with which the child
 * tells whether it outlived sonded before it asked to end with it. Built before fork:
 * between fork and exec a threaded process may call only async-signal-safe functions. */
static char **child_env(char *parent, size_t cap)
{
	size_t n = 0, k = 0;

	while (environ[n])
		n++;
	char **env = calloc(n + 2, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SONDE_PROBES_PARENT=", 20) != 0)
			env[k++] = environ[i];
	snprintf(parent, cap, "SONDE_PROBES_PARENT=%d", (int)getpid());
	env[k] = parent;
	return env;
}

/* A relay has no consumers' credentials to hand out, so nothing to tell. */
static void trust(struct probes_child *pc, pid_t pid)
{
	if (pc->svc)
		sonde_service__trust_probes(pc->svc, pid);
}

/* With a service, the child reaches it over a socketpair made here, its end inherited as
 * `-s fd:N`: its peer is sonded by construction, on every restart, whatever the producer
 * socket's names are (a TCP name, a list whose Unix name is gone, a name another user
 * took). With a relay, through which no consumer credentials come, the child connects
 * to the relay's socket and acts for nobody in particular (--targets none). */
static int spawn(struct probes_child *pc)
{
	static const char failed[] = "sonded: cannot run sonde probes\n";
	int sv[2] = {-1, -1};
	char chan[32];
	const char *argv[10] = {pc->exe, "probes", "-s", pc->sock};
	int k = 4;

	if (pc->svc) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return -errno;
		snprintf(chan, sizeof(chan), "fd:%d", sv[1]);
		argv[3] = chan;
		argv[k++] = "--trust-parent";
	} else {
		argv[k++] = "--targets";
		argv[k++] = "none";
	}
	if (pc->log_level) {
		argv[k++] = "-l";
		argv[k++] = pc->log_level;
	}
	char parent[48];
	char **env = child_env(parent, sizeof(parent));
	sigset_t none;
	pid_t pid;

	if (!env) {
		if (pc->svc)
			close(sv[0]), close(sv[1]);
		return -ENOMEM;
	}
	pid = fork();
	if (pid < 0) {
		int err = errno;
		free(env);
		if (pc->svc)
			close(sv[0]), close(sv[1]);
		return -err;
	}
	if (pid == 0) {
		/* sonded blocks SIGINT and SIGTERM for its signalfd; the child starts clean */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* its end of the channel, and only that, survives the exec */
		if (sv[1] >= 0 && fcntl(sv[1], F_SETFD, 0) < 0)
			_exit(126);
		execve(pc->exe, (char **)argv, env);
		/* the one message, without stdio: only async-signal-safe calls here */
		ssize_t w = write(STDERR_FILENO, failed, sizeof(failed) - 1);
		_exit(w < 0 ? 126 : 127);
	}
	free(env);
	pc->pid = pid;
	pc->started_ms = now_ms();
	if (pc->svc) {
		close(sv[1]);
		int rc = sonde_service__add_probes(pc->svc, sv[0], pid);
		/* the child then finds its channel closed and exits, and is started again */
		if (rc < 0)
			sonde_warn("cannot serve sonde probes (pid %d): %s", (int)pid,
				   sonde_strerror(rc));
	}
	sonde_info("started sonde probes (pid %d)", (int)pid);
	return 0;
}

static int start(struct probes_child *pc, struct sonde_service *svc, const char *sock,
		 const char *log_level)
{
	char self[sizeof(pc->exe)];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	*pc = (struct probes_child){
		.svc = svc, .sock = sock, .log_level = log_level, .backoff_ms = BACKOFF_MIN_MS};
	if (n <= 0)
		return -errno;
	self[n] = 0;
	if (snprintf(pc->exe, sizeof(pc->exe), "%s/sonde", dirname(self)) >= (int)sizeof(pc->exe))
		return -ENAMETOOLONG;
	if (access(pc->exe, X_OK) < 0)
		return -errno;
	return spawn(pc);
}

int probes_child_start(struct probes_child *pc, struct sonde_service *svc, const char *log_level)
{
	return start(pc, svc, sonde_service__socket(svc, SONDE_SOCKET_PRODUCER), log_level);
}

int probes_child_start_at(struct probes_child *pc, const char *sock, const char *log_level)
{
	return start(pc, NULL, sock, log_level);
}

void probes_child_reap(struct probes_child *pc)
{
	int st;

	if (!pc->pid || waitpid(pc->pid, &st, WNOHANG) != pc->pid)
		return;
	/* from here the pid may be reused: no connection of it is trusted any more */
	trust(pc, 0);
	pc->pid = 0;
	uint64_t now = now_ms();
	if (now - pc->started_ms >= HEALTHY_MS)
		pc->backoff_ms = BACKOFF_MIN_MS;
	if (WIFSIGNALED(st))
		sonde_warn("sonde probes was killed by signal %d; restarting it in %u ms",
			   WTERMSIG(st), (unsigned)pc->backoff_ms);
	else
		sonde_warn("sonde probes exited with status %d; restarting it in %u ms",
			   WEXITSTATUS(st), (unsigned)pc->backoff_ms);
	pc->restart_ms = now + pc->backoff_ms;
	pc->backoff_ms = pc->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : pc->backoff_ms * 2;
}

int probes_child_timeout_ms(const struct probes_child *pc)
{
	if (pc->pid || !pc->restart_ms)
		return -1;
	uint64_t now = now_ms();
	return pc->restart_ms > now ? (int)(pc->restart_ms - now) : 0;
}

void probes_child_tick(struct probes_child *pc)
{
	int rc;

	if (pc->pid || !pc->restart_ms || now_ms() < pc->restart_ms)
		return;
	pc->restart_ms = 0;
	if ((rc = spawn(pc)) < 0) {
		sonde_warn("cannot restart sonde probes: %s", sonde_strerror(rc));
		pc->restart_ms = now_ms() + pc->backoff_ms;
	}
}

void probes_child_stop(struct probes_child *pc)
{
	int st;

	pc->restart_ms = 0;
	if (!pc->pid)
		return;
	kill(pc->pid, SIGTERM);
	for (int waited = 0; waited < STOP_GRACE_MS; waited += 10) {
		if (waitpid(pc->pid, &st, WNOHANG) == pc->pid)
			goto reaped;
		usleep(10000);
	}
	sonde_warn("sonde probes (pid %d) did not stop in %d s: killing it", (int)pc->pid,
		   STOP_GRACE_MS / 1000);
	kill(pc->pid, SIGKILL);
	waitpid(pc->pid, &st, 0);
reaped:
	trust(pc, 0);
	pc->pid = 0;
}
