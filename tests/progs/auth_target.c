/* A target for linux.perf's authorization tests: it spins (in read() of /dev/zero, so that
 * samples have kernel frames too) after putting itself in the state a test needs.
 *
 * usage: auth_target MODE SECONDS [ARG]
 *   spin       as it is started (a set-user-ID or set-group-ID copy keeps those ids)
 *   nodump     prctl(PR_SET_DUMPABLE, 0) first
 *   drop       setresgid(ARG, ARG, ARG) and setresuid(ARG, ARG, ARG) first: a root daemon
 *              dropping to a user (the kernel makes it non-dumpable)
 *   dropsuid   setresuid(ruid, ruid, ruid) first: a set-user-ID program going back to
 *              its caller's uid (the kernel keeps it non-dumpable)
 *   exec       spin, then execv(ARG, {ARG, "secret", SECONDS}): a program that runs a
 *              set-user-ID binary
 *   secret     spin in secret_work (what exec runs)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static char buf[65536];

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_in(int fd, double seconds, volatile long *sink)
{
	double end = now() + seconds;

	while (now() < end) {
		*sink += read(fd, buf, sizeof(buf));
		for (int i = 0; i < 100000; i++)
			*sink += i;
	}
}

__attribute__((noinline)) static void public_work(int fd, double seconds)
{
	volatile long sink = 0;

	spin_in(fd, seconds, &sink);
}

__attribute__((noinline)) static void secret_work(int fd, double seconds)
{
	volatile long sink = 0;

	spin_in(fd, seconds, &sink);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	const char *mode = argv[1];
	double seconds = atof(argv[2]);
	int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	uid_t u;

	if (fd < 0)
		return 3;
	if (!strcmp(mode, "nodump") && prctl(PR_SET_DUMPABLE, 0) < 0)
		return 4;
	if (!strcmp(mode, "drop")) {
		uid_t to = argc >= 4 ? (uid_t)atol(argv[3]) : 0;
		if (!to || setresgid(to, to, to) < 0 || setresuid(to, to, to) < 0)
			return 5;
	}
	u = getuid();
	if (!strcmp(mode, "dropsuid") && setresuid(u, u, u) < 0)
		return 6;
	if (!strcmp(mode, "secret")) {
		secret_work(fd, seconds);
		return 0;
	}
	public_work(fd, seconds);
	if (!strcmp(mode, "exec") && argc >= 4) {
		char *args[] = {argv[3], "secret", argv[2], NULL};
		execv(argv[3], args);
		return 7;
	}
	return 0;
}
