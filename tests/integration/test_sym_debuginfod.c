/* debuginfod end to end: a local Debian debuginfod server serves the debug file of a
 * stripped binary; the symbolizer fetches it by build id, names the frames from it
 * (origin DEBUGINFOD), and finds it again in the client cache once the server is gone. */
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

static void check_frames(struct sonde_symbolizer *s, const char *stripped, const char *split,
			 uint8_t origin)
{
	static struct sym_test_row rows[4096];
	size_t n_rows = sym_test_lines(split, rows, 4096);
	struct sonde_sym_module m = sym_test_module(stripped);
	uint64_t va = sym_test_nm(split, "compute_warm", 0) + 4;
	struct sonde_sym_frame f[8];
	int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, sym_test_vaddr_to_off(split, va), f, 8));

	ASSERT_STR_EQ(f[n - 1].name, "compute_warm");
	ASSERT_INT(f[n - 1].origin, ==, origin);
	ASSERT_CONTAINS(f[0].file, "split.c");
	ASSERT_INT(f[0].line, ==, sym_test_line_at(rows, n_rows, va));
}

TEST_TIMEOUT(sym_debuginfod_end_to_end, 120)
{
	const char *split = test_prog("split");
	const char *stripped = test_path("split.stripped");
	char hex[130], url[64], probe[256], cache[4096], db[4096], srv[4096];
	int port;

	sym_test_build_id_hex(split, hex, sizeof(hex));
	snprintf(srv, sizeof(srv), "%s/srv", test_tmpdir());
	snprintf(db, sizeof(db), "%s/debuginfod.sqlite", test_tmpdir());
	snprintf(cache, sizeof(cache), "%s/cache", test_tmpdir());
	sym_test_sh("mkdir -p %s && objcopy --only-keep-debug %s %s/split.debug", srv, split, srv);
	sym_test_sh("strip --strip-all -o %s %s", stripped, split);

	snprintf(probe, sizeof(probe), "/buildid/%s/debuginfo", hex);
	pid_t server = sym_test_debuginfod_start(srv, db, probe, &port);

	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	unsetenv("DEBUGINFOD_URLS");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	struct sonde_symbolizer_opts o = {
		.sz = sizeof(o), .debuginfod_urls = url, .debug_dirs = "/nonexistent"};
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	check_frames(s, stripped, split, SONDE_SYM_ORIGIN_DEBUGINFOD);
	sonde_symbolizer__free(s);
	ASSERT(getenv("DEBUGINFOD_URLS") == NULL); /* restored after the query */

	kill(server, SIGTERM);
	test_wait(server, 10);
	char cached[8192];
	struct stat st;
	snprintf(cached, sizeof(cached), "%s/%s/debuginfo", cache, hex);
	ASSERT_INT(stat(cached, &st), ==, 0);
	/* the server is gone: the client's cache answers */
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	check_frames(s, stripped, split, SONDE_SYM_ORIGIN_DEBUGINFOD);
	sonde_symbolizer__free(s);

	/* not configured: no debug information at all */
	struct sonde_symbolizer_opts none = {.sz = sizeof(none), .debug_dirs = "/nonexistent"};
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&none));
	struct sonde_sym_module m = sym_test_module(stripped);
	struct sonde_sym_frame f[4];
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x1000, f, 4));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	sonde_symbolizer__free(s);
}
