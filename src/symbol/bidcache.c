/* The build-id cache directory (bidcache.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "symbol/bidcache.h"

enum { MAX_ID = 32, COPY_CHUNK = 1 << 16, MAX_ENTRIES = 1 << 16 };

static int fit(int n, size_t cap)
{
	return n < 0 ? -EINVAL : (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int sonde__bidcache_dir(const char *dir, char *out, size_t cap)
{
	const char *env = getenv(BIDCACHE_ENV), *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");

	if (!dir)
		dir = env;
	if (dir)
		return dir[0] ? fit(snprintf(out, cap, "%s", dir), cap) : -ENOENT;
	if (xdg && xdg[0] == '/')
		return fit(snprintf(out, cap, "%s/sonde/buildid", xdg), cap);
	if (home && home[0] == '/')
		return fit(snprintf(out, cap, "%s/.cache/sonde/buildid", home), cap);
	return -ENOENT;
}

static void hex(char *out, const uint8_t *id, size_t len)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[id[i] >> 4];
		out[2 * i + 1] = digits[id[i] & 15];
	}
	out[2 * len] = 0;
}

int sonde__bidcache_path(const char *dir, const uint8_t *id, size_t len, char *out, size_t cap)
{
	char h[2 * MAX_ID + 1];

	if (!len || len > MAX_ID)
		return -EINVAL;
	hex(h, id, len);
	return fit(snprintf(out, cap, "%s/%.2s/%s", dir, h, h + 2), cap);
}

/* mkdir -p of path's directory components and of path itself. */
static int mkdirs(char *path)
{
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char c = *p;
		*p = 0;
		int err = mkdir(path, 0700) < 0 && errno != EEXIST ? -errno : 0;
		*p = c;
		if (err)
			return err;
		if (!c)
			return 0;
	}
}

/* Copies the first size bytes (the size fstat gave and the bound was checked against: a
 * file that keeps growing is not followed past it). */
static int copy_fd(int in, int out, uint64_t size)
{
	char *buf = sonde__malloc(COPY_CHUNK);
	off_t off = 0;
	int err = buf ? 0 : -ENOMEM;

	while (!err && (uint64_t)off < size) {
		size_t want = size - (uint64_t)off < COPY_CHUNK ? (size_t)(size - (uint64_t)off)
								: COPY_CHUNK;
		ssize_t n = pread(in, buf, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : 0;
			break;
		}
		for (ssize_t done = 0; done < n && !err;) {
			ssize_t w = write(out, buf + done, (size_t)(n - done));
			if (w < 0 && errno != EINTR)
				err = -errno;
			done += w > 0 ? w : 0;
		}
		off += n;
	}
	sonde__free(buf);
	return err;
}

struct entry {
	char *path;
	uint64_t size;
	struct timespec mtime;
};

static int by_mtime(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* Appends the regular files of DIR/sub (two hex digits) to e[]. */
static void list_sub(const char *dir, const char *sub, struct entry *e, size_t *n)
{
	char path[4096];
	struct dirent *d;
	struct stat st;

	if (fit(snprintf(path, sizeof(path), "%s/%s", dir, sub), sizeof(path)))
		return;
	DIR *dh = opendir(path);
	if (!dh)
		return;
	while (*n < MAX_ENTRIES && (d = readdir(dh))) {
		char file[4400];
		if (d->d_name[0] == '.' ||
		    fit(snprintf(file, sizeof(file), "%s/%s", path, d->d_name), sizeof(file)) ||
		    lstat(file, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		e[*n] = (struct entry){sonde__strdup(file), (uint64_t)st.st_size, st.st_mtim};
		if (e[*n].path)
			(*n)++;
	}
	closedir(dh);
}

/* Removes the oldest images until the directory holds at most max bytes; keep is spared. */
static void trim(const char *dir, uint64_t max, const char *keep)
{
	struct entry *e = sonde__calloc(MAX_ENTRIES, sizeof(*e));
	uint64_t total = 0;
	size_t n = 0;
	struct dirent *d;
	DIR *dh = e ? opendir(dir) : NULL;

	if (!dh) {
		sonde__free(e);
		return;
	}
	while ((d = readdir(dh)))
		if (strlen(d->d_name) == 2 && d->d_name[0] != '.')
			list_sub(dir, d->d_name, e, &n);
	closedir(dh);
	for (size_t i = 0; i < n; i++)
		total += e[i].size;
	qsort(e, n, sizeof(*e), by_mtime);
	for (size_t i = 0; i < n && total > max; i++) {
		if (strcmp(e[i].path, keep) == 0 || unlink(e[i].path) < 0)
			continue;
		sonde_debug("build-id cache: removed %s (over %llu bytes)", e[i].path,
			    (unsigned long long)max);
		total -= e[i].size;
	}
	for (size_t i = 0; i < n; i++)
		sonde__free(e[i].path);
	sonde__free(e);
}

int sonde__bidcache_store(const char *dir, const uint8_t *id, size_t len, int fd, uint64_t max_bytes)
{
	char path[4096], tmp[4200];
	struct stat st;
	int err = sonde__bidcache_path(dir, id, len, path, sizeof(path));

	if (err)
		return err;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -SONDE_E_NOT_REGULAR;
	if ((uint64_t)st.st_size > max_bytes)
		return -SONDE_E_LIMIT;
	if (access(path, F_OK) == 0)
		return 0;
	char *slash = strrchr(path, '/');
	*slash = 0;
	err = mkdirs(path);
	*slash = '/';
	if (err)
		return err;
	/* Written under a temporary name and renamed: a reader never sees half an image. */
	err = fit(snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()), sizeof(tmp));
	if (err)
		return err;
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return -errno;
	err = copy_fd(fd, out, (uint64_t)st.st_size);
	if (close(out) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err) {
		unlink(tmp);
		return err;
	}
	trim(dir, max_bytes, path);
	return 1;
}

int sonde__bidcache_open(const char *dir, const uint8_t *id, size_t len, uint64_t max_bytes,
		  struct regfile_refusals *refusals)
{
	char path[4096];
	struct regfile_rules rules = {
		.what = "build-id cache entry",
		.max_size = max_bytes,
		.refusals = refusals,
	};
	int err = sonde__bidcache_path(dir, id, len, path, sizeof(path));

	if (err)
		return err;
	return sonde__regfile_open(path, &rules, NULL);
}
