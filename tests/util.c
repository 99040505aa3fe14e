#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/spool_reader.h>

#include "test.h"
#include "util.h"

static char build_dir[PATH_MAX];
static char tmpdir[PATH_MAX];

static const char *build_path(const char *fmt, const char *name)
{
	static char bufs[8][PATH_MAX];
	static unsigned next;
	char *buf = bufs[next++ % 8];

	if (!build_dir[0]) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			FAIL("readlink /proc/self/exe: %s", strerror(errno));
		self[n] = 0;
		snprintf(build_dir, sizeof(build_dir), "%s", dirname(self));
	}
	snprintf(buf, PATH_MAX, fmt, build_dir, name);
	return buf;
}

const char *test_bin(const char *name)
{
	return build_path("%s/%s", name);
}

const char *test_prog(const char *name)
{
	return build_path("%s/progs/%s", name);
}

const char *test_src_path(const char *rel)
{
	/* the runner lives in <source>/build/<variant>/ */
	return build_path("%s/../../%s", rel);
}

const char *test_example(const char *name)
{
	return build_path("%s/examples/%s", name);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static pid_t tmpdir_owner; /* a test's forked helpers exit without removing it */
static bool keep_tmpdir;  /* the test failed: its files are what shows why */

static void remove_tmpdir(void)
{
	if (!tmpdir[0] || getpid() != tmpdir_owner)
		return;
	if (keep_tmpdir)
		fprintf(stderr, "the test's files are kept in %s\n", tmpdir);
	else
		nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void test_keep_tmpdir(void)
{
	keep_tmpdir = true;
}

/* Images the recorder keeps for deleted or replaced binaries go to the test's own directory,
 * never into the user's ~/.cache, where a copy left by one run would change what the next run
 * can symbolize. Tests that check the cache's location set their own value. */
static __attribute__((noinline)) void keep_caches_local(void)
{
	char cache[sizeof(tmpdir) + 32];

	snprintf(cache, sizeof(cache), "%s/buildid-cache", tmpdir);
	setenv("SONDE_BUILDID_CACHE", cache, 0);
}

const char *test_tmpdir(void)
{
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/sonde-test.XXXXXX");
		if (!mkdtemp(tmpdir))
			FAIL("mkdtemp: %s", strerror(errno));
		chmod(tmpdir, 0755);
		tmpdir_owner = getpid();
		atexit(remove_tmpdir);
		keep_caches_local();
	}
	return tmpdir;
}

const char *test_path(const char *name)
{
	static char bufs[8][PATH_MAX];
	static unsigned next;
	char *buf = bufs[next++ % 8];

	snprintf(buf, PATH_MAX, "%s/%s", test_tmpdir(), name);
	return buf;
}

double test_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*buf = realloc(*buf, *cap);
		if (!*buf)
			FAIL("out of memory capturing output");
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = 0;
}

static int reap(pid_t pid, double deadline)
{
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, deadline > 0 ? WNOHANG : 0);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			FAIL("waitpid: %s", strerror(errno));
		if (deadline > 0 && test_now() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(2000);
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

void test_run(struct test_output *o, int timeout_s, const char *const argv[])
{
	int out[2], err[2];
	size_t out_cap = 0, err_cap = 0;
	double deadline = test_now() + timeout_s;

	memset(o, 0, sizeof(*o));
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
		FAIL("pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	struct pollfd p[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
	int open_fds = 2;
	append(&o->out, &o->out_len, &out_cap, "", 0);
	append(&o->err, &o->err_len, &err_cap, "", 0);
	while (open_fds > 0) {
		double left = deadline - test_now();
		if (left <= 0)
			break;
		if (poll(p, 2, (int)(left * 1000) + 1) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char tmp[8192];
			ssize_t n = read(p[i].fd, tmp, sizeof(tmp));
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open_fds--;
			} else if (i == 0) {
				append(&o->out, &o->out_len, &out_cap, tmp, (size_t)n);
			} else {
				append(&o->err, &o->err_len, &err_cap, tmp, (size_t)n);
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	o->status = reap(pid, open_fds > 0 ? test_now() - 1 : deadline);
}

void test_runf(struct test_output *o, int timeout_s, const char *fmt, ...)
{
	char line[8192];
	const char *argv[256];
	int argc = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	for (char *save, *tok = strtok_r(line, " ", &save); tok && argc < 255;
	     tok = strtok_r(NULL, " ", &save))
		argv[argc++] = tok;
	argv[argc] = NULL;
	if (argc == 0)
		FAIL("test_runf: empty command line");
	test_run(o, timeout_s, argv);
}

void test_output_free(struct test_output *o)
{
	free(o->out);
	free(o->err);
	memset(o, 0, sizeof(*o));
}

char *test_read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (fd < 0)
		return NULL;
	for (;;) {
		char tmp[65536];
		ssize_t r = read(fd, tmp, sizeof(tmp));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			close(fd);
			free(buf);
			errno = e;
			return NULL;
		}
		if (r == 0)
			break;
		append(&buf, &n, &cap, tmp, (size_t)r);
	}
	close(fd);
	if (!buf)
		append(&buf, &n, &cap, "", 0);
	if (len)
		*len = n;
	return buf;
}

void test_write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		FAIL("open %s: %s", path, strerror(errno));
	if (write(fd, data, len) != (ssize_t)len)
		FAIL("write %s: %s", path, strerror(errno));
	close(fd);
}

/* Returns once the child has exec'd (its close-on-exec end of a pipe closes then), so a
 * test that looks the pid up in /proc, or hands it to the profiler, meets the program and
 * not the forked copy of the test. An exec that fails sends its errno instead. */
/* What the child of spawn() could not do, sent up the exec-closed pipe. */
struct spawn_err {
	int err;
	char what[12];
};

/* Forks argv with stdin on in (-1: /dev/null), stdout on /dev/null, stderr in errfile
 * (NULL: /dev/null), as uid:gid without supplementary groups when as_user; returns once it
 * has exec'd (the pipe closed by the exec), so that nothing meets the copy of the runner
 * it was until then. */
static pid_t spawn(bool as_user, uid_t uid, gid_t gid, const char *errfile, int in,
		   const char *const argv[])
{
	struct spawn_err e = {0};
	int p[2];

	fflush(NULL);
	if (pipe2(p, O_CLOEXEC) < 0)
		FAIL("pipe2: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		int err = errfile ? open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0666) : null;
		dup2(in >= 0 ? in : null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(err >= 0 ? err : null, STDERR_FILENO);
		const char *what = "exec";
		if (err < 0)
			what = "open stderr";
		else if (as_user && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
			what = "set ids";
		else
			execv(argv[0], (char *const *)argv);
		e.err = errno;
		snprintf(e.what, sizeof(e.what), "%s", what);
		if (write(p[1], &e, sizeof(e)) < 0)
			_exit(126);
		_exit(127);
	}
	close(p[1]);
	ssize_t n;
	while ((n = read(p[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	close(p[0]);
	if (n > 0) {
		test_wait(pid, 10);
		FAIL("cannot run %s (%s): %s", argv[0], e.what, strerror(e.err));
	}
	return pid;
}

pid_t test_spawn(const char *const argv[])
{
	return spawn(false, 0, 0, NULL, -1, argv);
}

pid_t test_spawn_fed(int *in, const char *const argv[])
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		FAIL("pipe2: %s", strerror(errno));
	pid_t pid = spawn(false, 0, 0, NULL, p[0], argv);
	close(p[0]);
	*in = p[1];
	return pid;
}

pid_t test_spawn_as(uid_t uid, gid_t gid, const char *errfile, const char *const argv[])
{
	return spawn(true, uid, gid, errfile, -1, argv);
}

int test_wait(pid_t pid, int timeout_s)
{
	return reap(pid, test_now() + timeout_s);
}

void test_gate_open(struct test_gate *g, const char *name)
{
	snprintf(g->path, sizeof(g->path), "%s", test_path(name));
	if (mkfifo(g->path, 0600) < 0)
		FAIL("mkfifo %s: %s", g->path, strerror(errno));
	g->fd = open(g->path, O_RDWR | O_CLOEXEC);
	if (g->fd < 0)
		FAIL("open %s: %s", g->path, strerror(errno));
}

void test_gate_pass(struct test_gate *g)
{
	if (write(g->fd, "go\n", 3) != 3)
		FAIL("writing to %s: %s", g->path, strerror(errno));
}

void test_gate_close(struct test_gate *g)
{
	close(g->fd);
	g->fd = -1;
}

const char *test_copy_for_anyone(const char *path)
{
	const char *base = strrchr(path, '/');
	size_t len;
	char *data = test_read_file(path, &len);

	if (!data)
		FAIL("read %s: %s", path, strerror(errno));
	const char *copy = test_path(base ? base + 1 : path);
	test_write_file(copy, data, len);
	free(data);
	if (chmod(copy, 0755) < 0)
		FAIL("chmod %s: %s", copy, strerror(errno));
	return copy;
}

/* Machine-wide settings: see util.h. The locks a test holds, one per setting. */
#define SYSCTL_LOCK_DIR "/run/sonde-test"

struct sysctl_hold {
	char name[96];
	int fd;		/* the lock file, -1 when it could not be opened (reading only) */
	bool exclusive; /* held LOCK_EX, and a restoring process has the old value */
};

static struct sysctl_hold sysctl_holds[8];

static int sysctl_path(char *buf, size_t size, const char *name)
{
	if (strstr(name, "..") || name[0] == '/')
		FAIL("bad sysctl name %s", name);
	return snprintf(buf, size, "/proc/sys/%s", name);
}

static bool sysctl_read(const char *name, long *v)
{
	char path[256];
	FILE *f;

	sysctl_path(path, sizeof(path), name);
	f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fscanf(f, "%ld", v) == 1;
	fclose(f);
	return ok;
}

static int sysctl_write(const char *name, long v)
{
	char path[256], buf[32];
	int fd, n = snprintf(buf, sizeof(buf), "%ld\n", v);

	sysctl_path(path, sizeof(path), name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = write(fd, buf, (size_t)n) == n ? 0 : -errno;
	close(fd);
	return r;
}

/* The hold for name, its lock file opened (fd -1 if that is impossible for this user). */
static struct sysctl_hold *sysctl_hold(const char *name)
{
	struct sysctl_hold *h = NULL;
	char path[256];

	for (size_t i = 0; i < sizeof(sysctl_holds) / sizeof(sysctl_holds[0]); i++) {
		if (strcmp(sysctl_holds[i].name, name) == 0)
			return &sysctl_holds[i];
		if (!h && !sysctl_holds[i].name[0])
			h = &sysctl_holds[i];
	}
	if (!h)
		FAIL("too many sysctl settings held by one test");
	snprintf(h->name, sizeof(h->name), "%s", name);
	mkdir(SYSCTL_LOCK_DIR, 0755);
	snprintf(path, sizeof(path), SYSCTL_LOCK_DIR "/%s.lock", name);
	for (char *p = path + sizeof(SYSCTL_LOCK_DIR); *p; p++)
		if (*p == '/')
			*p = '.';
	/* Anyone may take the shared lock: the file is made readable by all. */
	h->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (h->fd < 0)
		h->fd = open(path, O_RDONLY | O_CLOEXEC);
	return h;
}

static void sysctl_lock(struct sysctl_hold *h, int how)
{
	if (h->fd < 0 || flock(h->fd, how | LOCK_NB) == 0)
		return;
	if (errno != EWOULDBLOCK)
		FAIL("flock for %s: %s", h->name, strerror(errno));
	printf("waiting for %s: another test has it %s\n", h->name,
	       how == LOCK_EX ? "taken" : "changed");
	while (flock(h->fd, how) < 0)
		if (errno != EINTR)
			FAIL("flock for %s: %s", h->name, strerror(errno));
}

long test_sysctl_get(const char *name)
{
	struct sysctl_hold *h = sysctl_hold(name);
	long v;

	if (!h->exclusive)
		sysctl_lock(h, LOCK_SH);
	if (!sysctl_read(name, &v))
		FAIL("cannot read /proc/sys/%s: %s", name, strerror(errno));
	return v;
}

/* Waits until every copy of the write end of `done` is closed (the test process ended,
 * and whatever it forked without exec with it), then writes old back. It keeps the lock
 * file open, so the lock goes only after the value is back; and it keeps the test's
 * stderr, so the runner sees the test end only then, with any complaint of the restore. */
static void sysctl_restorer(const char *name, long old, int done, int lock_fd)
{
	char c;

	setsid(); /* the runner kills the test's process group when the test ends */
	for (int fd = 3; fd < 1024; fd++)
		if (fd != done && fd != lock_fd)
			close(fd);
	while (read(done, &c, 1) < 0 && errno == EINTR)
		;
	int r = sysctl_write(name, old);
	long now = old;
	if (r < 0 || !sysctl_read(name, &now) || now != old)
		fprintf(stderr, "test_sysctl_set: could not restore %s to %ld (%s; it is %ld)\n",
			name, old, r < 0 ? strerror(-r) : "read back differs", now);
	_exit(0);
}

void test_sysctl_set(const char *name, long value)
{
	struct sysctl_hold *h = sysctl_hold(name);
	long old;
	int done[2];

	if (!h->exclusive) {
		if (h->fd < 0)
			SKIP("cannot change /proc/sys/%s: no lock under " SYSCTL_LOCK_DIR
			     " for this user",
			     name);
		sysctl_lock(h, LOCK_EX);
		if (!sysctl_read(name, &old))
			FAIL("cannot read /proc/sys/%s: %s", name, strerror(errno));
		if (pipe2(done, O_CLOEXEC) < 0)
			FAIL("pipe: %s", strerror(errno));
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid < 0)
			FAIL("fork: %s", strerror(errno));
		if (pid == 0) {
			close(done[1]);
			sysctl_restorer(name, old, done[0], h->fd);
		}
		/* done[1] stays open in this process until it ends. */
		close(done[0]);
		h->exclusive = true;
	}
	int r = sysctl_write(name, value);
	if (r < 0)
		SKIP("cannot change /proc/sys/%s: %s", name, strerror(-r));
}

int test_sysctl_poke(const char *name, long value)
{
	return sysctl_write(name, value);
}

void test_require_perf(void)
{
	long v;

	/* root profiles anything whatever the setting: nothing to read, nothing to hold */
	if (geteuid() == 0)
		return;
	v = test_sysctl_get("kernel/perf_event_paranoid");
	if (v > 2)
		SKIP("perf_event_open is not permitted here (perf_event_paranoid %ld)", v);
}

int test_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		FAIL("opendir /proc/self/fd: %s", strerror(errno));
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory stream's own fd */
}

void test_await_threads(pid_t pid, int n)
{
	char path[64];
	int have = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	for (double end = test_now() + 60;; usleep(10000)) {
		DIR *d = opendir(path);
		if (!d)
			FAIL("pid %d ended with %d of its %d threads seen", (int)pid, have, n);
		have = 0;
		for (struct dirent *e; (e = readdir(d));)
			have += e->d_name[0] != '.';
		closedir(d);
		if (have >= n)
			return;
		if (test_now() > end)
			FAIL("pid %d has %d threads after 60 s, not %d", (int)pid, have, n);
	}
}

double test_cpu_s(pid_t pid)
{
	char path[64];
	unsigned long ut, st;
	char state;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *s = test_read_file(path, NULL);
	const char *p = s ? strrchr(s, ')') : NULL; /* the command name may hold spaces */
	int ok = p &&
		 sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &state, &ut,
			&st) == 3 &&
		 state != 'Z' && state != 'X';
	free(s);
	return ok ? (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) : -1;
}

void test_await_cpu(pid_t pid, double seconds)
{
	double c0 = test_cpu_s(pid), c = c0;

	for (double end = test_now() + 120; c >= 0 && c - c0 < seconds; usleep(10000)) {
		if (test_now() > end)
			FAIL("pid %d ran %.2f s of CPU time in 120 s, not %.2f", (int)pid, c - c0,
			     seconds);
		c = test_cpu_s(pid);
	}
	if (c0 < 0 || c < 0)
		FAIL("pid %d ended before it ran %.2f s of CPU time", (int)pid, seconds);
}

unsigned test_free_tcp_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ASSERT(fd >= 0);
	ASSERT_OK(bind(fd, (struct sockaddr *)&a, sizeof(a)));
	ASSERT_OK(getsockname(fd, (struct sockaddr *)&a, &len));
	close(fd);
	return ntohs(a.sin_port);
}

unsigned long long test_spool_samples(const char *path)
{
	struct sonde_spool *s = sonde_spool__open(path, NULL);
	struct sonde_spool_info in;

	if (!s)
		return 0;
	sonde_spool__get_info(s, &in);
	sonde_spool__close(s);
	return in.samples;
}
