/* Rules the test suite keeps about machine-wide state, and the helper that keeps them:
 * a setting under /proc/sys is changed only through test_sysctl_set() (tests/util.c), which
 * locks it and puts it back however the test ends, and only by a TEST_EXCLUSIVE test. */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

struct rule_scan {
	char bad[8192];
	size_t n_files;
};

static void note(struct rule_scan *sc, const char *fmt, const char *path, const char *what)
{
	size_t used = strlen(sc->bad);

	snprintf(sc->bad + used, sizeof(sc->bad) - used, fmt, path, what);
}

/* The TEST header above pos in src (the last line starting with "TEST"), or NULL. */
static const char *test_header_before(const char *src, const char *pos)
{
	const char *h = NULL;

	for (const char *p = src; p && p < pos; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, "TEST", 4) == 0 && p < pos)
			h = p;
	}
	return h;
}

/* Whether src names a file under /proc/sys other than the triggers: files there that hold
 * no setting, whose write only runs work (vm/stat_refresh: the vmstat counters folded by a
 * kworker on every CPU, which tests/progs/kworker_spin.c uses to run one at will). */
static bool names_a_setting(const char *src)
{
	static const char *const triggers[] = {"/proc/sys/vm/stat_refresh"};

	for (const char *p = src; (p = strstr(p, "/proc/sys")); p++) {
		bool trigger = false;
		for (size_t i = 0; i < sizeof(triggers) / sizeof(triggers[0]); i++)
			trigger |= strncmp(p, triggers[i], strlen(triggers[i])) == 0;
		if (!trigger)
			return true;
	}
	return false;
}

static void scan_file(struct rule_scan *sc, const char *path, const char *rel)
{
	char *src = test_read_file(path, NULL);

	if (!src)
		FAIL("read %s: %s", path, strerror(errno));
	sc->n_files++;
	/* util.[ch] hold the helper itself; this file names what it looks for */
	bool exempt = strcmp(rel, "util.c") == 0 || strcmp(rel, "util.h") == 0 ||
		      strcmp(rel, "unit/test_suite_rules.c") == 0;
	if (!exempt && names_a_setting(src))
		note(sc, "%s: names /proc/sys%s (use test_sysctl_get/_set)\n", rel, "");
	if (!exempt && strstr(src, "sysctl -"))
		note(sc, "%s: runs sysctl%s (use test_sysctl_get/_set)\n", rel, "");
	for (const char *p = src; !exempt && (p = strstr(p, "test_sysctl_set(")); p++) {
		const char *h = test_header_before(src, p);
		if (!h || strncmp(h, "TEST_EXCLUSIVE(", 15) != 0) {
			char name[128] = "(not in a test)";
			if (h)
				snprintf(name, sizeof(name), "%.*s", (int)strcspn(h, "\n"), h);
			note(sc, "%s: test_sysctl_set in %s, which is not TEST_EXCLUSIVE\n", rel,
			     name);
		}
	}
	free(src);
}

static void scan_dir(struct rule_scan *sc, const char *root, const char *rel)
{
	char dir[4096];
	DIR *d;

	snprintf(dir, sizeof(dir), "%s%s%s", root, rel[0] ? "/" : "", rel);
	d = opendir(dir);
	if (!d)
		FAIL("opendir %s: %s", dir, strerror(errno));
	for (struct dirent *e; (e = readdir(d));) {
		char path[8192], sub[4096];
		size_t n = strlen(e->d_name);

		if (e->d_name[0] == '.' || strcmp(e->d_name, "data") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
		snprintf(path, sizeof(path), "%s/%s", root, sub);
		if (e->d_type == DT_DIR)
			scan_dir(sc, root, sub);
		else if ((n > 2 && (strcmp(e->d_name + n - 2, ".c") == 0 ||
				    strcmp(e->d_name + n - 2, ".h") == 0)) ||
			 (n > 3 && (strcmp(e->d_name + n - 3, ".sh") == 0 ||
				    strcmp(e->d_name + n - 3, ".py") == 0)))
			scan_file(sc, path, sub);
	}
	closedir(d);
}

/* No test source writes (or even names) /proc/sys but the helper, and every test that
 * calls test_sysctl_set is TEST_EXCLUSIVE. */
TEST(test_sysctl_confined)
{
	static struct rule_scan sc;

	scan_dir(&sc, test_src_path("tests"), "");
	printf("%zu test sources scanned\n", sc.n_files);
	ASSERT_UINT(sc.n_files, >, 100);
	if (sc.bad[0])
		FAIL("machine-wide settings touched outside the helper:\n%s", sc.bad);
}

/* The scan sees what it looks for: a test that sets a sysctl without TEST_EXCLUSIVE. */
TEST(test_sysctl_confined_catches_offenders)
{
	static struct rule_scan sc;
	const char *src = "TEST(x)\n{\n\ttest_sysctl_set(\"kernel/a\", 1);\n}\n"
			  "TEST_EXCLUSIVE(y, 60)\n{\n\ttest_sysctl_set(\"kernel/a\", 1);\n}\n"
			  "static void f(void)\n{\n\tfopen(\"/proc/sys/kernel/a\", \"w\");\n}\n";

	test_write_file(test_path("offender.c"), src, strlen(src));
	scan_file(&sc, test_path("offender.c"), "offender.c");
	ASSERT_CONTAINS(sc.bad, "offender.c: names /proc/sys");
	ASSERT_CONTAINS(sc.bad, "test_sysctl_set in TEST(x), which is not TEST_EXCLUSIVE");
	ASSERT_NOT_CONTAINS(sc.bad, "TEST_EXCLUSIVE(y");
	/* a trigger, which holds no setting, is no offence; a setting beside it is */
	ASSERT(!names_a_setting("open(\"/proc/sys/vm/stat_refresh\", O_WRONLY)"));
	ASSERT(names_a_setting("/proc/sys/vm/stat_refresh /proc/sys/vm/swappiness"));
}

/* A process standing for a test: sets the setting to old + 4, tells the parent the old
 * value, and ends as `how` says. */
static pid_t setter(const char *name, int how, int tell)
{
	pid_t pid = fork();

	ASSERT(pid >= 0);
	if (pid)
		return pid;
	long old = test_sysctl_get(name);
	test_sysctl_set(name, old + 4);
	ASSERT_INT(test_sysctl_get(name), ==, old + 4);
	if (write(tell, &old, sizeof(old)) != sizeof(old))
		_exit(3);
	if (how == SIGKILL)
		raise(SIGKILL);
	exit(how);
}

static void restored_after(int how)
{
	const char *name = "kernel/perf_event_mlock_kb";
	int p[2];
	long old = 0;
	int status;

	if (geteuid() != 0)
		SKIP("changing kernel.perf_event_mlock_kb needs root");
	ASSERT_OK(pipe(p));
	pid_t pid = setter(name, how, p[1]);
	close(p[1]);
	ssize_t n = read(p[0], &old, sizeof(old));
	close(p[0]);
	ASSERT_INT(waitpid(pid, &status, 0), ==, pid);
	if (n == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 77)
		SKIP("kernel.perf_event_mlock_kb cannot be changed here");
	ASSERT_INT(n, ==, sizeof(old));
	if (how == SIGKILL)
		ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	else
		ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == how);
	/* waits for the shared lock, which the restoring process keeps until it is done */
	ASSERT_INT(test_sysctl_get(name), ==, old);
}

/* A test that sets a machine-wide setting and then is killed leaves it as it found it. */
TEST_EXCLUSIVE(test_sysctl_restored_when_the_test_is_killed, 60)
{
	restored_after(SIGKILL);
}

/* ... and so does one that fails (exit 1), */
TEST_EXCLUSIVE(test_sysctl_restored_when_the_test_fails, 60)
{
	restored_after(1);
}

/* ... or ends normally. (One case per test: a process holding the lock passes its hold on
 * to the processes it forks, so a second case in the same test would start held.) */
TEST_EXCLUSIVE(test_sysctl_restored_when_the_test_returns, 60)
{
	restored_after(0);
}
