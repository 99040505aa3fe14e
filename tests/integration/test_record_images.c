/* Images deleted or replaced while recorded still symbolize after the process is gone:
 * `sonde record` keeps them in the build-id cache, and `sonde report` / `sonde convert`
 * (run after the target exited) find them there by build id. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/spool_reader.h>

#include "../test.h"
#include "../util.h"
#include "record/modules.h"

/* Number of images in a build-id cache directory (DIR/xx/rest). */
static int count_images(const char *dir)
{
	char sub[4200];
	struct dirent *d, *e;
	int n = 0;
	DIR *dh = opendir(dir);

	if (!dh)
		return 0;
	while ((d = readdir(dh))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, d->d_name);
		DIR *sh = opendir(sub);
		while (sh && (e = readdir(sh)))
			n += e->d_name[0] != '.';
		if (sh)
			closedir(sh);
	}
	closedir(dh);
	return n;
}

/* Records record_dellib (delete or replace mode) into spool with the cache at cache. */
static void record_gone(const char *spool, const char *cache, const char *mode,
			const char *extra_opt)
{
	struct test_output o;
	const char *dir = test_path("libdir");

	mkdir(dir, 0755);
	setenv("SONDE_BUILDID_CACHE", cache, 1);
	test_runf(&o, 60, "%s record %s -o %s -- %s %s %s 1.5 %s", test_bin("sonde"), extra_opt,
		  spool, test_prog("record_dellib"), test_prog("libsym_shlib.so"), dir, mode);
	ASSERT_INT(o.status, ==, 0);
	if (!strstr(extra_opt, "no-buildid-cache"))
		ASSERT_CONTAINS(o.err, "1 deleted or replaced image kept in the build-id cache");
	test_output_free(&o);
	/* The library is gone from its path (or is another file there now). */
	char lib[4200];
	snprintf(lib, sizeof(lib), "%s/libgone.so", dir);
	if (!*mode)
		ASSERT(access(lib, F_OK) < 0);
}

static void assert_report_names_library(const char *spool)
{
	struct test_output o;

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "shlib_spin [libgone.so]");
	ASSERT_CONTAINS(o.out, "shlib_exported [libgone.so]");
	ASSERT_CONTAINS(o.out, "shlib_local_helper [libgone.so]");
	test_output_free(&o);
}

TEST_TIMEOUT(kernel_deleted_library_symbolizes_after_exit, 120)
{
	const char *spool = test_path("d.spool"), *cache = test_path("bidcache");
	const char *folded = test_path("d.folded");
	struct test_output o;

	test_require_perf();
	record_gone(spool, cache, "", "");
	ASSERT_INT(count_images(cache), ==, 1);
	assert_report_names_library(spool);

	test_runf(&o, 60, "%s convert %s -o %s --format folded", test_bin("sonde"), spool, folded);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	ASSERT_CONTAINS(text, ";main;shlib_spin;shlib_exported");
	free(text);

	/* Without the cache the same recording cannot name them: the image is really gone. */
	setenv("SONDE_BUILDID_CACHE", "", 1);
	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "shlib_exported");
	ASSERT_CONTAINS(o.out, "libgone.so+0x");
	test_output_free(&o);
}

/* A library replaced by another file at the same path (an upgrade) is kept too, and the
 * report does not take the new file for it. */
TEST_TIMEOUT(kernel_replaced_library_symbolizes_after_exit, 120)
{
	const char *spool = test_path("r.spool"), *cache = test_path("bidcache");

	test_require_perf();
	record_gone(spool, cache, "replace", "");
	ASSERT_INT(count_images(cache), ==, 1);
	assert_report_names_library(spool);
}

/* --no-buildid-cache keeps nothing; images still on disk are never copied. */
TEST_TIMEOUT(kernel_buildid_cache_only_keeps_what_is_gone, 120)
{
	const char *spool = test_path("n.spool"), *cache = test_path("bidcache");
	struct test_output o;

	test_require_perf();
	record_gone(spool, cache, "", "--no-buildid-cache");
	ASSERT_INT(count_images(cache), ==, 0);

	/* split maps only files that stay in place: nothing to keep. */
	test_runf(&o, 60, "%s record --buildid-cache %s -o %s -- %s 0.3", test_bin("sonde"), cache,
		  spool, test_prog("split"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.err, "build-id cache");
	test_output_free(&o);
	ASSERT_INT(count_images(cache), ==, 0);
}

/* `record --buildid-cache DIR` is matched by `report --buildid-cache DIR` and
 * `convert --buildid-cache DIR`: a library replaced while recorded is named from DIR. */
TEST_TIMEOUT(kernel_report_and_convert_take_the_buildid_cache_option, 120)
{
	const char *spool = test_path("o.spool"), *cache = test_path("mycache");
	const char *other = test_path("defaultcache"), *folded = test_path("o.folded");
	char opt[4200];
	struct test_output o;

	test_require_perf();
	/* The default ($SONDE_BUILDID_CACHE) is another directory than the one given. */
	snprintf(opt, sizeof(opt), "--buildid-cache %s", cache);
	record_gone(spool, other, "replace", opt);
	ASSERT_INT(count_images(cache), ==, 1);
	ASSERT_INT(count_images(other), ==, 0);

	test_runf(&o, 60, "%s report %s", test_bin("sonde"), spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_NOT_CONTAINS(o.out, "shlib_exported");
	test_output_free(&o);
	test_runf(&o, 60, "%s report --buildid-cache %s %s", test_bin("sonde"), cache, spool);
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "shlib_spin [libgone.so]");
	ASSERT_CONTAINS(o.out, "shlib_exported [libgone.so]");
	test_output_free(&o);

	test_runf(&o, 60, "%s convert --buildid-cache %s %s -o %s", test_bin("sonde"), cache, spool,
		  folded);
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	ASSERT_CONTAINS(text, ";main;shlib_spin;shlib_exported");
	free(text);
}

/* The build id of a module definition i of spool whose path ends in name, into id (its
 * length, 0 when it has none); -1 when there is no such definition. */
static int nth_def_build_id(const struct sonde_spool *s, const char *name, int i, uint8_t *id)
{
	struct sonde_spool_info info;
	struct sonde_spool_module m;
	size_t n = strlen(name);

	sonde_spool__get_info(s, &info);
	for (uint32_t k = 1; k <= info.modules; k++) {
		if (sonde_spool__get_module(s, k, &m) < 0)
			continue;
		size_t len = strlen(m.def.path);
		if (len < n || strcmp(m.def.path + len - n, name) != 0 || i-- > 0)
			continue;
		memcpy(id, m.def.build_id, m.def.build_id_len);
		return (int)m.def.build_id_len;
	}
	return -1;
}

/* A library loaded from a temporary file, deleted, unloaded, then another written under
 * the same name: on ext4 the second gets the first one's inode number, freed with it, and
 * only the inode's generation (perf's ino_generation) tells them apart. Each definition
 * has its own file's build id, or none; before, the second took the first one's (and its
 * CFI), its samples symbolized in the wrong library. */
TEST_TIMEOUT(kernel_a_reused_inode_number_is_another_file, 120)
{
	const char *dir = test_path("reuse"), *spool = test_path("reuse.spool");
	uint8_t want[2][32], got[32];
	int want_len[2];
	struct test_output o;

	test_require_perf();
	mkdir(dir, 0755);
	setenv("SONDE_BUILDID_CACHE", test_path("cache"), 1);
	for (int k = 0; k < 2; k++) {
		int fd = open(test_prog(k ? "liblife_b.so" : "liblife_a.so"), O_RDONLY | O_CLOEXEC);
		ASSERT(fd >= 0);
		want_len[k] = sonde__read_build_id(fd, want[k], sizeof(want[k]));
		close(fd);
		ASSERT_INT(want_len[k], >, 0);
	}
	ASSERT(want_len[0] != want_len[1] || memcmp(want[0], want[1], (size_t)want_len[0]));
	test_runf(&o, 60, "%s record -o %s -- %s %s %s %s", test_bin("sonde"), spool,
		  test_prog("record_inode_reuse"), test_prog("liblife_a.so"),
		  test_prog("liblife_b.so"), dir);
	ASSERT_INT(o.status, ==, 0);
	printf("%s", o.out); /* the inode numbers: equal where the file system reused it */
	test_output_free(&o);

	struct sonde_spool *s = sonde_spool__open(spool, NULL);
	ASSERT(s != NULL);
	for (int k = 0; k < 2; k++) {
		int len = nth_def_build_id(s, "/libreuse.so", k, got);
		ASSERT_INT(len, >=, 0); /* both mappings were seen */
		if (len)
			ASSERT(len == want_len[k] && !memcmp(got, want[k], (size_t)len));
	}
	sonde_spool__close(s);
}
