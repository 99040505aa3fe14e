/* make install into a temporary DESTDIR: what it puts there, an outside program built
 * against the installed tree with pkg-config (shared and static) that runs, and make
 * uninstall taking every file away again. Installs the variant under test (make SAN=1
 * install for the sanitizer build, whose sonde.pc adds the sanitizer runtimes). */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

/* Where make installs, relative to DESTDIR. */
#define PREFIX "/usr"

/* "SAN=1" for the sanitizer build, "" for release: from the build directory's name. */
static const char *variant_flag(void)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", test_bin("sonde"));
	const char *v = basename(dirname(dir));
	if (strcmp(v, "san") == 0)
		return "SAN=1";
	ASSERT_STR_EQ(v, "release");
	return "";
}

/* Runs a shell command line (it uses quoting, pipes and $(...)); returns its output. */
static void sh(struct test_output *o, int timeout_s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void sh(struct test_output *o, int timeout_s, const char *fmt, ...)
{
	char *cmd;
	va_list ap;

	va_start(ap, fmt);
	ASSERT_INT(vasprintf(&cmd, fmt, ap), >, 0);
	va_end(ap);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(o, timeout_s, argv);
	if (o->status != 0)
		fprintf(stderr, "$ %s\n%s%s", cmd, o->out, o->err);
	free(cmd);
}

/* The variables `make test` was given on its command line (MAKEFLAGS holds them after
 * " -- ", spaces escaped as the shell reads them), so that the install sees the build the
 * suite runs on instead of rebuilding it with other flags. */
static const char *make_overrides(void)
{
	const char *flags = getenv("MAKEFLAGS");
	const char *vars = flags ? strstr(flags, " -- ") : NULL;

	return vars ? vars + 4 : "";
}

/* make TARGET DESTDIR=destdir PREFIX=/usr for this variant, from the source tree. The
 * runner may itself run under make, whose jobserver is not this make's. One at a time:
 * an install writes into the build tree (the man pages), and two tests running at once
 * had one's make move away the file the other's was writing. */
static void make(const char *target, const char *destdir)
{
	struct test_output o;
	int lock = open(test_bin("install.lock"), O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		FAIL("lock %s: %s", test_bin("install.lock"), strerror(errno));
	sh(&o, 120,
	   "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C %s %s %s DESTDIR=%s PREFIX=" PREFIX
	   " %s",
	   test_src_path("."), variant_flag(), target, destdir, make_overrides());
	close(lock);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
}

static const char *installed(const char *destdir, const char *rel)
{
	static char bufs[4][PATH_MAX];
	static unsigned next;
	char *b = bufs[next++ % 4];

	snprintf(b, PATH_MAX, "%s" PREFIX "/%s", destdir, rel);
	return b;
}

static void assert_file(const char *destdir, const char *rel, mode_t type)
{
	struct stat st;
	const char *path = installed(destdir, rel);

	if (lstat(path, &st) < 0)
		FAIL("%s was not installed: %s", path, strerror(errno));
	ASSERT_UINT(st.st_mode & S_IFMT, ==, type);
}

static size_t non_dirs;

static int count_non_dirs(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag != FTW_D && flag != FTW_DP) {
		fprintf(stderr, "left behind: %s\n", path);
		non_dirs++;
	}
	return 0;
}

TEST_TIMEOUT(install_puts_every_part_in_place_and_uninstall_removes_it, 240)
{
	const char *d = test_path("root");
	char target[256];

	make("install", d);
	assert_file(d, "bin/sonde", S_IFREG);
	assert_file(d, "bin/sonded", S_IFREG);
	assert_file(d, "lib/libsonde.a", S_IFREG);
	assert_file(d, "lib/libsonde.so", S_IFLNK);
	assert_file(d, "lib/libsonde.so.0", S_IFLNK);
	ssize_t n = readlink(installed(d, "lib/libsonde.so.0"), target, sizeof(target) - 1);
	ASSERT_INT(n, >, 0);
	target[n] = 0;
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "lib/%s", target);
	assert_file(d, rel, S_IFREG);
	/* every public header, and only those */
	DIR *dir = opendir(test_src_path("include/sonde"));
	size_t headers = 0;
	for (struct dirent *e; dir && (e = readdir(dir));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof(rel), "include/sonde/%s", e->d_name);
		assert_file(d, rel, S_IFREG);
		headers++;
	}
	ASSERT(dir);
	closedir(dir);
	dir = ASSERT_NOT_NULL(opendir(installed(d, "include/sonde")));
	for (struct dirent *e; (e = readdir(dir));)
		headers -= e->d_name[0] != '.';
	closedir(dir);
	ASSERT_UINT(headers, ==, 0);
	assert_file(d, "lib/pkgconfig/sonde.pc", S_IFREG);
	for (const char *m = "sonde.1\0sonde-record.1\0sonde-report.1\0sonde-convert.1\0"
			     "sonde-top.1\0sonde-trace.1\0sonde-run.1\0";
	     *m; m += strlen(m) + 1) {
		snprintf(rel, sizeof(rel), "share/man/man1/%s", m);
		assert_file(d, rel, S_IFREG);
	}
	assert_file(d, "share/man/man8/sonded.8", S_IFREG);
	assert_file(d, "share/bash-completion/completions/sonde", S_IFREG);
	assert_file(d, "lib/systemd/system/sonded.service", S_IFREG);

	/* The pages are the programs' --help, and man reads them without a warning. */
	struct test_output o;
	sh(&o, 30, "MANWIDTH=100 man --warnings -l %s", installed(d, "share/man/man1/sonde-record.1"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "sonde-record - sample the stacks");
	ASSERT_CONTAINS(o.out, "--buildid-cache DIR");
	ASSERT_STR_EQ(o.err, "");
	test_output_free(&o);
	/* The unit starts the installed sonded on Perfetto's sockets. */
	char *unit = ASSERT_NOT_NULL(
		test_read_file(installed(d, "lib/systemd/system/sonded.service"), NULL));
	ASSERT_CONTAINS(unit, "ExecStart=" PREFIX "/bin/sonded ");
	ASSERT_CONTAINS(unit, "/run/perfetto/traced-producer.sock");
	ASSERT_CONTAINS(unit, "/run/perfetto/traced-consumer.sock");
	ASSERT_CONTAINS(unit, "RuntimeDirectory=perfetto");
	free(unit);
	/* The completion offers the subcommands and options --help names. */
	sh(&o, 30,
	   "PATH=%s:$PATH bash -c '. %s; COMP_WORDS=(sonde record --bu); COMP_CWORD=2; "
	   "_sonde sonde; echo \"${COMPREPLY[*]}\"; COMP_WORDS=(sonde t); COMP_CWORD=1; "
	   "_sonde sonde; echo \"${COMPREPLY[*]}\"'",
	   installed(d, "bin"), installed(d, "share/bash-completion/completions/sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.out, "--buildid-cache\ntop trace\n");
	test_output_free(&o);

	make("uninstall", d);
	non_dirs = 0;
	ASSERT_INT(nftw(d, count_non_dirs, 16, FTW_PHYS), ==, 0);
	ASSERT_UINT(non_dirs, ==, 0);
}

/* The environment that makes pkg-config see only the installed tree, its paths under d. */
#define PKG_ENV "PKG_CONFIG_LIBDIR=%s" PREFIX "/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=%s"

/* record_stacks, as test_example runs it: a launched split, its stacks symbolized. */
static void run_record_stacks(const char *exe, const char *libdir)
{
	struct test_output o;

	sh(&o, 90, "LD_LIBRARY_PATH=%s %s -n 300 -d 30 -o %s %s 1", libdir, exe,
	   test_path("ex.spool"), test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.err, "samples written");
	ASSERT_CONTAINS(o.out, "stack 1: ");
	ASSERT_CONTAINS(o.out, "compute_hot");
	ASSERT_CONTAINS(o.out, "[split]");
	test_output_free(&o);
}

TEST_TIMEOUT(install_tree_builds_record_stacks_with_pkg_config, 300)
{
	const char *d = test_path("root");
	const char *shared = test_path("record_stacks"), *stat = test_path("record_stacks-static");
	const char *src = test_src_path("examples/record_stacks.c");
	struct test_output o;

	test_require_perf();
	make("install", d);
	/* Only the installed headers and libraries: no -I or -L into the source or build tree. */
	sh(&o, 120, PKG_ENV " sh -c 'cc -O1 -g -Wall -Werror $(pkg-config --cflags sonde) %s -o %s "
		    "$(pkg-config --libs sonde)'",
	   d, d, src, shared);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	sh(&o, 30, "readelf -d %s", shared);
	ASSERT_CONTAINS(o.out, "Shared library: [libsonde.so.0]");
	ASSERT_NOT_CONTAINS(o.out, "RUNPATH");
	ASSERT_NOT_CONTAINS(o.out, "RPATH");
	test_output_free(&o);
	run_record_stacks(shared, installed(d, "lib"));

	/* Static: libsonde.a and the Libs.private it needs. */
	sh(&o, 120,
	   PKG_ENV " sh -c 'cc -O1 -g $(pkg-config --cflags sonde) %s -o %s "
		   "$(pkg-config --static --libs sonde | sed \"s/-lsonde/-l:libsonde.a/\")'",
	   d, d, src, stat);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	sh(&o, 30, "readelf -d %s", stat);
	ASSERT_NOT_CONTAINS(o.out, "libsonde");
	test_output_free(&o);
	run_record_stacks(stat, "/nonexistent");
	make("uninstall", d);
}
