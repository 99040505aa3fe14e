/* The build-id cache directory: layout, idempotent store, the size bound. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "symbol/bidcache.h"

static int make_file(const char *name, size_t size, char fill)
{
	char *buf = malloc(size);
	const char *path = test_path(name);

	memset(buf, fill, size);
	test_write_file(path, buf, size);
	free(buf);
	return open(path, O_RDONLY | O_CLOEXEC);
}

TEST(kernel_bidcache_layout_and_store_once)
{
	const uint8_t id[] = {0xab, 0x01, 0x02, 0xff};
	const char *dir = test_path("c");
	char path[4096], want[4096];
	int fd = make_file("img", 1000, 'x');

	ASSERT_OK(sonde__bidcache_path(dir, id, sizeof(id), path, sizeof(path)));
	snprintf(want, sizeof(want), "%s/ab/0102ff", dir);
	ASSERT_STR_EQ(path, want);
	ASSERT_INT(sonde__bidcache_path(dir, id, 0, path, sizeof(path)), ==, -EINVAL);
	ASSERT_INT(sonde__bidcache_store(dir, id, sizeof(id), fd, 1 << 20), ==, 1);
	ASSERT_INT(sonde__bidcache_store(dir, id, sizeof(id), fd, 1 << 20), ==, 0);
	ASSERT_INT(sonde__bidcache_store(dir, id, sizeof(id), fd, 999), ==, -SONDE_E_LIMIT);
	int in = sonde__bidcache_open(dir, id, sizeof(id), UINT64_MAX, NULL);
	ASSERT_INT(in, >=, 0);
	char buf[2000];
	ASSERT_INT(read(in, buf, sizeof(buf)), ==, 1000);
	ASSERT(buf[0] == 'x' && buf[999] == 'x');
	close(in);
	close(fd);
	ASSERT_INT(sonde__bidcache_open(dir, (const uint8_t *)"\1", 1, UINT64_MAX, NULL), ==, -ENOENT);
}

TEST(kernel_bidcache_removes_oldest_past_its_bound)
{
	const char *dir = test_path("c");
	uint8_t id[3][2] = {{1, 1}, {2, 2}, {3, 3}};

	for (int i = 0; i < 3; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		int fd = make_file(name, 4000, (char)('a' + i));
		/* 10000 bytes hold two images of 4000: storing the third drops the first. */
		ASSERT_INT(sonde__bidcache_store(dir, id[i], 2, fd, 10000), ==, 1);
		close(fd);
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL); /* distinct modification times */
	}
	ASSERT_INT(sonde__bidcache_open(dir, id[0], 2, UINT64_MAX, NULL), ==, -ENOENT);
	for (int i = 1; i < 3; i++) {
		int fd = sonde__bidcache_open(dir, id[i], 2, UINT64_MAX, NULL);
		ASSERT_INT(fd, >=, 0);
		close(fd);
	}
}

TEST(kernel_bidcache_dir_resolution)
{
	char out[4096];

	ASSERT_OK(sonde__bidcache_dir("/x/y", out, sizeof(out)));
	ASSERT_STR_EQ(out, "/x/y");
	ASSERT_INT(sonde__bidcache_dir("", out, sizeof(out)), ==, -ENOENT);
	setenv("SONDE_BUILDID_CACHE", "/env/dir", 1);
	ASSERT_OK(sonde__bidcache_dir(NULL, out, sizeof(out)));
	ASSERT_STR_EQ(out, "/env/dir");
	unsetenv("SONDE_BUILDID_CACHE");
	setenv("XDG_CACHE_HOME", "/xdg", 1);
	ASSERT_OK(sonde__bidcache_dir(NULL, out, sizeof(out)));
	ASSERT_STR_EQ(out, "/xdg/sonde/buildid");
	unsetenv("XDG_CACHE_HOME");
	setenv("HOME", "/home/u", 1);
	ASSERT_OK(sonde__bidcache_dir(NULL, out, sizeof(out)));
	ASSERT_STR_EQ(out, "/home/u/.cache/sonde/buildid");
	unsetenv("HOME");
	ASSERT_INT(sonde__bidcache_dir(NULL, out, sizeof(out)), ==, -ENOENT);
}
