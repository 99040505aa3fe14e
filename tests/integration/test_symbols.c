/* The names libsonde puts in a program's namespace (docs/api.md): the static archive can
 * hide nothing, so every global symbol it defines carries the project prefix, sonde_ for
 * the public API and sonde__ for what crosses files inside the library; and the public
 * headers never name an internal symbol. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../util.h"

/* Symbols the toolchain itself defines in instrumented builds (the sanitizer and fuzzer
 * variants' ODR indicators and module constructors): reserved names, not the project's. */
static int toolchain_symbol(const char *name)
{
	return name[0] == '_' && name[1] == '_';
}

TEST(symbols_static_archive_prefixed)
{
	const char *lib = test_bin("libsonde.a");
	const char *argv[] = {"/usr/bin/nm", "-g", "--defined-only", lib, NULL};
	struct test_output o;
	char bad[4096] = "";
	size_t n_bad = 0, n_public = 0, n_internal = 0, len = 0;

	test_run(&o, 60, argv);
	if (o.status != 0)
		FAIL("nm %s: status %d: %s", lib, o.status, o.err);
	/* Lines are "ADDR TYPE NAME"; "member.o:" headers and blank lines have no type. */
	for (char *line = strtok(o.out, "\n"); line; line = strtok(NULL, "\n")) {
		char addr[32], type, name[512];
		if (sscanf(line, "%31s %c %511s", addr, &type, name) != 3)
			continue;
		if (!strncmp(name, "sonde__", 7)) {
			n_internal++;
		} else if (!strncmp(name, "sonde_", 6)) {
			n_public++;
		} else if (!toolchain_symbol(name)) {
			if (n_bad++ < 20 && len < sizeof(bad) - 1)
				len += (size_t)snprintf(bad + len, sizeof(bad) - len, " %s(%c)", name,
							type);
		}
	}
	test_output_free(&o);
	if (n_bad)
		FAIL("%zu global symbols of %s lack the sonde_ / sonde__ prefix:%s%s", n_bad, lib,
		     bad, n_bad > 20 ? " ..." : "");
	/* An archive read wrongly (or empty) must not pass: both kinds exist. */
	ASSERT(n_public > 50);
	ASSERT(n_internal > 50);
}

TEST(symbols_public_headers_declare_no_internal_names)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", test_src_path("include/sonde"));
	DIR *d = opendir(dir);
	struct dirent *e;
	int headers = 0;

	if (!d)
		FAIL("opendir %s", dir);
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".h"))
			continue;
		char path[8192];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		char *text = test_read_file(path, NULL);
		if (!text)
			FAIL("read %s", path);
		const char *hit = strstr(text, "sonde__");
		if (hit) {
			int line = 1;
			for (const char *p = text; p < hit; p++)
				line += *p == '\n';
			FAIL("%s:%d names an internal symbol (sonde__...)", path, line);
		}
		free(text);
		headers++;
	}
	closedir(d);
	ASSERT(headers > 5);
}
