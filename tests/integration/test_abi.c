/* libsonde's ABI: the shared library exports exactly the functions include/sonde/ declares
 * with SONDE_API, the version script lists exactly those, and the SONAME names the major
 * version the symlinks lead to. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"

struct names {
	char **v;
	size_t n, cap;
};

static void names_add(struct names *s, const char *name, size_t len)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		ASSERT_NOT_NULL(s->v);
	}
	s->v[s->n++] = ASSERT_NOT_NULL(strndup(name, len));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_sort(struct names *s)
{
	qsort(s->v, s->n, sizeof(*s->v), cmp_str);
}

static bool names_has(const struct names *s, const char *name)
{
	return bsearch(&name, s->v, s->n, sizeof(*s->v), cmp_str) != NULL;
}

static void names_free(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Prints the names of a missing from b; returns how many. */
static size_t report_missing(const struct names *a, const char *a_what, const struct names *b,
			     const char *b_what)
{
	size_t missing = 0;

	for (size_t i = 0; i < a->n; i++) {
		if (names_has(b, a->v[i]))
			continue;
		fprintf(stderr, "%s in %s but not in %s\n", a->v[i], a_what, b_what);
		missing++;
	}
	return missing;
}

/* Comments and preprocessor lines blanked out, so that only declarations remain. */
static void strip_comments(char *s)
{
	for (char *p = s; *p; p++) {
		if (p[0] == '/' && p[1] == '*') {
			char *end = strstr(p + 2, "*/");
			ASSERT(end);
			memset(p, ' ', (size_t)(end + 2 - p));
			p = end + 1;
		} else if (*p == '#' && (p == s || p[-1] == '\n')) {
			while (*p && *p != '\n')
				*p++ = ' ';
			if (!*p)
				break;
		}
	}
}

static bool is_ident(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* Every function declared "SONDE_API <type> name(...)" in one header: the name is the last
 * identifier before the opening parenthesis. */
static void header_functions(const char *path, struct names *out)
{
	char *text = ASSERT_NOT_NULL(test_read_file(path, NULL));

	strip_comments(text);
	for (char *p = text; (p = strstr(p, "SONDE_API"));) {
		bool word = (p == text || !is_ident(p[-1])) && !is_ident(p[strlen("SONDE_API")]);
		p += strlen("SONDE_API");
		if (!word)
			continue;
		char *paren = strchr(p, '(');
		char *semi = strchr(p, ';');
		if (!paren || (semi && semi < paren))
			FAIL("%s: SONDE_API on something that is not a function: %.60s", path, p);
		char *end = paren;
		while (end > p && isspace((unsigned char)end[-1]))
			end--;
		char *start = end;
		while (start > p && is_ident(start[-1]))
			start--;
		ASSERT(start < end);
		names_add(out, start, (size_t)(end - start));
		p = paren;
	}
	free(text);
}

static void public_functions(struct names *out)
{
	const char *dir = test_src_path("include/sonde");
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];

	if (!d)
		FAIL("opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 3 || strcmp(e->d_name + len - 2, ".h") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		header_functions(path, out);
	}
	closedir(d);
	names_sort(out);
	ASSERT_INT(out->n, >=, 100);
	for (size_t i = 1; i < out->n; i++)
		if (strcmp(out->v[i - 1], out->v[i]) == 0)
			FAIL("%s is declared twice in include/sonde/", out->v[i]);
}

/* The dynamic symbols the shared library defines, each in version node SONDE_*; the
 * nodes themselves (absolute symbols) are not functions and are left out. */
static void exported_functions(struct names *out)
{
	struct test_output o;

	test_runf(&o, 30, "/usr/bin/nm -D --defined-only %s", test_bin("libsonde.so"));
	ASSERT_INT(o.status, ==, 0);
	for (char *save, *line = strtok_r(o.out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char type, name[512];
		if (sscanf(line, "%*s %c %511s", &type, name) != 2)
			FAIL("nm line: %s", line);
		if (type == 'A')
			continue;
		char *at = strchr(name, '@');
		if (!at || strncmp(at, "@@SONDE_", 8) != 0)
			FAIL("%s is exported without a SONDE_ version", name);
		ASSERT(type == 'T');
		names_add(out, name, (size_t)(at - name));
	}
	test_output_free(&o);
	names_sort(out);
}

/* The names in the global: part of src/libsonde.map (comments aside). */
static void map_functions(struct names *out)
{
	char *text = ASSERT_NOT_NULL(test_read_file(test_src_path("src/libsonde.map"), NULL));

	strip_comments(text);
	char *g = strstr(text, "global:"), *l = strstr(text, "local:");

	ASSERT(g && l && g < l);
	ASSERT_CONTAINS(l, "*;");
	for (char *p = g + strlen("global:"); p < l;) {
		while (p < l && isspace((unsigned char)*p))
			p++;
		char *start = p;
		while (p < l && is_ident(*p))
			p++;
		if (p == start)
			break;
		ASSERT(*p == ';');
		names_add(out, start, (size_t)(p - start));
		p++;
	}
	free(text);
	names_sort(out);
}

TEST(abi_shared_library_exports_exactly_the_public_functions)
{
	struct names decl = {0}, exp = {0};

	public_functions(&decl);
	exported_functions(&exp);
	size_t bad = report_missing(&exp, "libsonde.so's exports", &decl, "include/sonde/") +
		     report_missing(&decl, "include/sonde/", &exp, "libsonde.so's exports");
	ASSERT_INT(bad, ==, 0);
	ASSERT_INT(exp.n, ==, decl.n);
	names_free(&decl);
	names_free(&exp);
}

TEST(abi_version_script_lists_exactly_the_public_functions)
{
	struct names decl = {0}, map = {0};

	public_functions(&decl);
	map_functions(&map);
	size_t bad = report_missing(&map, "src/libsonde.map", &decl, "include/sonde/") +
		     report_missing(&decl, "include/sonde/", &map, "src/libsonde.map");
	ASSERT_INT(bad, ==, 0);
	for (size_t i = 1; i < map.n; i++)
		if (strcmp(map.v[i - 1], map.v[i]) == 0)
			FAIL("%s is listed twice in src/libsonde.map", map.v[i]);
	names_free(&decl);
	names_free(&map);
}

/* libsonde.so -> libsonde.so.MAJOR -> libsonde.so.MAJOR.MINOR.PATCH, and the SONAME is
 * libsonde.so.MAJOR. */
TEST(abi_soname_is_the_major_version_symlink)
{
	struct test_output o;
	char link1[PATH_MAX], link2[PATH_MAX], soname[PATH_MAX];
	unsigned major, minor, patch;

	ssize_t n = readlink(test_bin("libsonde.so"), link1, sizeof(link1) - 1);
	ASSERT_INT(n, >, 0);
	link1[n] = 0;
	ASSERT_INT(sscanf(link1, "libsonde.so.%u", &major), ==, 1);
	n = readlink(test_bin(link1), link2, sizeof(link2) - 1);
	ASSERT_INT(n, >, 0);
	link2[n] = 0;
	ASSERT_INT(sscanf(link2, "libsonde.so.%u.%u.%u", &major, &minor, &patch), ==, 3);
	snprintf(soname, sizeof(soname), "libsonde.so.%u", major);
	ASSERT_STR_EQ(link1, soname);
	snprintf(soname, sizeof(soname), "Library soname: [libsonde.so.%u]", major);
	struct stat st;
	ASSERT_INT(lstat(test_bin(link2), &st), ==, 0);
	ASSERT(S_ISREG(st.st_mode));

	test_runf(&o, 30, "/usr/bin/readelf -d %s", test_bin(link2));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, soname);
	test_output_free(&o);
}
