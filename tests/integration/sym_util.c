#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

uint64_t sym_test_nm(const char *path, const char *name, int dynamic)
{
	struct test_output o;
	const char *argv[] = {"/usr/bin/nm", dynamic ? "-D" : "--defined-only", path, NULL};

	test_run(&o, 30, argv);
	ASSERT_INT(o.status, ==, 0);
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long addr;
		char type, sym[512];
		if (sscanf(line, "%llx %c %511s", &addr, &type, sym) == 3 && !strcmp(sym, name)) {
			test_output_free(&o);
			return addr;
		}
	}
	FAIL("nm %s: no symbol %s", path, name);
}

uint64_t sym_test_vaddr_to_off(const char *path, uint64_t vaddr)
{
	struct test_output o;
	const char *argv[] = {"/usr/bin/readelf", "-lW", path, NULL};

	test_run(&o, 30, argv);
	ASSERT_INT(o.status, ==, 0);
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long off, va, pa, filesz, memsz;
		if (sscanf(line, " LOAD 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx", &off, &va, &pa,
			   &filesz, &memsz) == 5 &&
		    vaddr >= va && vaddr < va + filesz) {
			test_output_free(&o);
			return vaddr - va + off;
		}
	}
	FAIL("readelf -l %s: no PT_LOAD holds 0x%llx", path, (unsigned long long)vaddr);
}

struct sonde_sym_module sym_test_module(const char *path)
{
	return (struct sonde_sym_module){
		.flags = SONDE_MODULE_EXEC,
		.start = 0x10000,
		.end = 0x20000,
		.path = path,
	};
}

void sym_test_copy(const char *from, const char *to)
{
	size_t len;
	char *data = test_read_file(from, &len);

	ASSERT_NOT_NULL(data);
	test_write_file(to, data, len);
	free(data);
}

void sym_test_sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	struct test_output o;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	test_run(&o, 60, argv);
	if (o.status != 0)
		FAIL("`%s` exited %d:\n%s%s", cmd, o.status, o.out, o.err);
	test_output_free(&o);
}

size_t sym_test_lines(const char *path, struct sym_test_row *rows, size_t max)
{
	struct test_output o;
	const char *argv[] = {"/usr/bin/objdump", "--dwarf=decodedline", path, NULL};
	size_t n = 0;

	test_run(&o, 60, argv);
	ASSERT_INT(o.status, ==, 0);
	for (char *line = strtok(o.out, "\n"); line && n < max; line = strtok(NULL, "\n")) {
		struct sym_test_row r = {0};
		char num[32];
		unsigned long long addr;
		if (sscanf(line, "%127s %31s 0x%llx", r.file, num, &addr) != 3)
			continue;
		r.addr = addr;
		r.line = num[0] == '-' ? 0 : (uint32_t)strtoul(num, NULL, 10);
		rows[n++] = r;
	}
	test_output_free(&o);
	return n;
}

uint32_t sym_test_line_at(const struct sym_test_row *rows, size_t n, uint64_t vaddr)
{
	uint32_t line = 0;
	uint64_t best = 0;

	for (size_t i = 0; i < n; i++)
		if (rows[i].addr <= vaddr && rows[i].addr >= best) {
			best = rows[i].addr;
			line = rows[i].line;
		}
	return line;
}

uint32_t sym_test_marker_line(const char *src, const char *marker)
{
	char *text = test_read_file(src, NULL);
	uint32_t line = 1;

	ASSERT_NOT_NULL(text);
	char *at = strstr(text, marker);
	if (!at)
		FAIL("%s has no marker %s", src, marker);
	for (char *p = text; p < at; p++)
		line += *p == '\n';
	free(text);
	return line;
}

void sym_test_build_id_hex(const char *path, char *hex, size_t size)
{
	struct test_output o;
	const char *argv[] = {"/usr/bin/readelf", "-n", path, NULL};

	test_run(&o, 30, argv);
	char *at = strstr(o.out, "Build ID: ");
	if (!at)
		FAIL("%s has no build id", path);
	snprintf(hex, size, "%.*s", (int)strcspn(at + 10, " \n"), at + 10);
	test_output_free(&o);
}

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

/* One attempt on port: the server's pid once it serves probe, else -1 (it was stopped). */
static pid_t debuginfod_try(const char *srv, const char *db, const char *probe, int port)
{
	char port_arg[32];
	int st, up = 0;

	snprintf(port_arg, sizeof(port_arg), "--port=%d", port);
	const char *argv[] = {
		"/usr/bin/debuginfod", "-F", port_arg, "-d", db, "-t", "0", "-g", "0", srv, NULL};
	unlink(db);
	pid_t server = test_spawn(argv);
	for (int i = 0; i < 300 && !(up = http_ok(port, probe)); i++) {
		if (waitpid(server, &st, WNOHANG) == server)
			return -1;
		usleep(100000);
	}
	if (up)
		return server;
	kill(server, SIGTERM);
	test_wait(server, 10);
	return -1;
}

pid_t sym_test_debuginfod_start(const char *srv, const char *db, const char *probe, int *port)
{
	*port = 20000 + (int)(getpid() % 20000);
	/* a port someone else holds makes the server exit: then another is tried */
	for (int attempt = 0; attempt < 4; attempt++, *port += 7919) {
		pid_t server = debuginfod_try(srv, db, probe, *port);
		if (server > 0)
			return server;
	}
	FAIL("debuginfod never served %s", probe);
}
