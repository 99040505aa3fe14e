/* debuginfod end to end: a local Debian debuginfod server serves the debug file of a
 * stripped binary; the symbolizer fetches it by build id, names the frames from it
 * (origin DEBUGINFOD), and finds it again in the client cache once the server is gone. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

/* 1 when GET path on 127.0.0.1:port answers 200. */
static int http_ok(int port, const char *path)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	char req[512], resp[64] = "";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
		if (write(fd, req, (size_t)n) == n && read(fd, resp, sizeof(resp) - 1) > 0)
			ok = strstr(resp, " 200 ") != NULL;
	}
	if (fd >= 0)
		close(fd);
	return ok;
}

static void check_frames(struct sonde_symbolizer *s, const char *stripped, const char *split,
			 uint8_t origin)
{
	static struct sym_test_row rows[4096];
	size_t n_rows = sym_test_lines(split, rows, 4096);
	struct sonde_sym_module m = sym_test_module(stripped);
	uint64_t va = sym_test_nm(split, "compute_warm", 0) + 4;
	struct sonde_sym_frame f[8];
	int n = ASSERT_OK(sonde_symbolize(s, &m, sym_test_vaddr_to_off(split, va), f, 8));

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
	int port = 20000 + (int)(getpid() % 20000);

	sym_test_build_id_hex(split, hex, sizeof(hex));
	snprintf(srv, sizeof(srv), "%s/srv", test_tmpdir());
	snprintf(db, sizeof(db), "%s/debuginfod.sqlite", test_tmpdir());
	snprintf(cache, sizeof(cache), "%s/cache", test_tmpdir());
	sym_test_sh("mkdir -p %s && objcopy --only-keep-debug %s %s/split.debug", srv, split, srv);
	sym_test_sh("strip --strip-all -o %s %s", stripped, split);

	/* a port someone else holds makes the server exit: then another is tried */
	pid_t server = -1;
	int up = 0;
	snprintf(probe, sizeof(probe), "/buildid/%s/debuginfo", hex);
	for (int attempt = 0; attempt < 4 && !up; attempt++) {
		if (attempt)
			port += 7919;
		char port_arg[32];
		int st;
		snprintf(port_arg, sizeof(port_arg), "--port=%d", port);
		const char *argv[] = {"/usr/bin/debuginfod",
				      "-F",
				      port_arg,
				      "-d",
				      db,
				      "-t",
				      "0",
				      "-g",
				      "0",
				      srv,
				      NULL};
		unlink(db);
		server = test_spawn(argv);
		for (int i = 0; i < 300 && !(up = http_ok(port, probe)); i++) {
			if (waitpid(server, &st, WNOHANG) == server) {
				server = -1;
				break;
			}
			usleep(100000);
		}
		if (!up && server > 0) {
			kill(server, SIGTERM);
			test_wait(server, 10);
		}
	}
	if (!up)
		FAIL("debuginfod never served %s", probe);

	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	unsetenv("DEBUGINFOD_URLS");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	struct sonde_symbolizer_opts o = {
		.sz = sizeof(o), .debuginfod_urls = url, .debug_dirs = "/nonexistent"};
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer_new(&o));
	check_frames(s, stripped, split, SONDE_SYM_ORIGIN_DEBUGINFOD);
	sonde_symbolizer_free(s);
	ASSERT(getenv("DEBUGINFOD_URLS") == NULL); /* restored after the query */

	kill(server, SIGTERM);
	test_wait(server, 10);
	char cached[8192];
	struct stat st;
	snprintf(cached, sizeof(cached), "%s/%s/debuginfo", cache, hex);
	ASSERT_INT(stat(cached, &st), ==, 0);
	/* the server is gone: the client's cache answers */
	s = ASSERT_NOT_NULL(sonde_symbolizer_new(&o));
	check_frames(s, stripped, split, SONDE_SYM_ORIGIN_DEBUGINFOD);
	sonde_symbolizer_free(s);

	/* not configured: no debug information at all */
	struct sonde_symbolizer_opts none = {.sz = sizeof(none), .debug_dirs = "/nonexistent"};
	s = ASSERT_NOT_NULL(sonde_symbolizer_new(&none));
	struct sonde_sym_module m = sym_test_module(stripped);
	struct sonde_sym_frame f[4];
	ASSERT_OK(sonde_symbolize(s, &m, 0x1000, f, 4));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	sonde_symbolizer_free(s);
}
