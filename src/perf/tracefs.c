/* tracefs mount, instance and file helpers. See tracefs.h. */
#include "perf/tracefs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <sonde/error.h>

#define TRACEFS_MAGIC_ 0x74726163 /* linux/magic.h TRACEFS_MAGIC */

static bool is_tracefs(const char *dir)
{
	struct statfs sf;
	char p[TRACEFS_PATH_MAX + 16];

	if (statfs(dir, &sf) < 0 || (unsigned long)sf.f_type != TRACEFS_MAGIC_)
		return false;
	snprintf(p, sizeof(p), "%s/events", dir);
	return access(p, F_OK) == 0;
}

int sonde__tracefs_find(char *out, size_t cap, bool allow_mount)
{
	static const char *const dirs[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (is_tracefs(dirs[i])) {
			snprintf(out, cap, "%s", dirs[i]);
			return 0;
		}
	}
	if (!allow_mount)
		return -ENOENT;
	if (mount("nodev", dirs[0], "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return -errno;
	snprintf(out, cap, "%s", dirs[0]);
	return 0;
}

int sonde__tracefs_read(const char *dir, const char *rel, struct buf *b)
{
	char path[TRACEFS_PATH_MAX * 2];
	int fd, r = 0;

	sonde__buf_reset(b);
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		if (sonde__buf_reserve(b, 4096) < 0) {
			r = -ENOMEM;
			break;
		}
		ssize_t n = read(fd, b->data + b->len, b->cap - b->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		b->len += (size_t)n;
	}
	close(fd);
	return r;
}

int sonde__tracefs_write(const char *dir, const char *rel, const char *s)
{
	char path[TRACEFS_PATH_MAX * 2];
	size_t n = strlen(s);
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, s, n);
	if (w < 0)
		r = -errno;
	else if ((size_t)w != n)
		r = -EIO;
	close(fd);
	return r;
}

static bool valid_name(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* An instance's rmdir fails with EBUSY while a file in it is open, e.g. by a reader that
 * has not exited yet; the kernel then keeps it, so retry briefly. */
static int remove_instance(const char *dir)
{
	for (int i = 0; i < 50; i++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		usleep(20000);
	}
	return -EBUSY;
}

int sonde__tracefs_instance_acquire(struct tracefs_instance *in, const char *root, const char *name,
			     const char *lock_dir)
{
	char lock[TRACEFS_PATH_MAX + 80];
	int r;

	memset(in, 0, sizeof(*in));
	in->lock_fd = -1;
	if (!valid_name(name) || strlen(root) + strlen(name) + 12 >= sizeof(in->dir))
		return -EINVAL;
	if (mkdir(lock_dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	snprintf(lock, sizeof(lock), "%s/ftrace-%s.lock", lock_dir, name);
	in->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (in->lock_fd < 0)
		return -errno;
	/* flock belongs to the open file description: a second open in this process
	 * conflicts as one in another process does. */
	if (flock(in->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto fail;
	}
	snprintf(in->root, sizeof(in->root), "%s", root);
	snprintf(in->dir, sizeof(in->dir), "%s/instances/%s", root, name);
	if (access(in->dir, F_OK) == 0) {
		r = remove_instance(in->dir);
		if (r < 0)
			goto fail;
		in->removed_stale = true;
	}
	if (mkdir(in->dir, 0700) < 0) {
		r = -errno;
		goto fail;
	}
	return 0;
fail:
	close(in->lock_fd);
	in->lock_fd = -1;
	in->dir[0] = '\0';
	return r;
}

int sonde__tracefs_instance_release(struct tracefs_instance *in)
{
	int r = 0;

	if (!in || in->lock_fd < 0)
		return 0;
	if (in->dir[0]) {
		/* Stop first so that nothing is recorded while the buffers are freed. */
		sonde__tracefs_write(in->dir, "tracing_on", "0");
		r = remove_instance(in->dir);
	}
	close(in->lock_fd);
	in->lock_fd = -1;
	in->dir[0] = '\0';
	return r;
}

static bool stat_line(const char *p, const char *e, const char *key, const char **val)
{
	size_t kl = strlen(key);

	if ((size_t)(e - p) <= kl || memcmp(p, key, kl) != 0 || p[kl] != ':')
		return false;
	*val = p + kl + 1;
	return true;
}

/* strtoull/strtod need a NUL: copy the value (at most 63 bytes) first. */
static void value_copy(char *dst, size_t cap, const char *s, const char *e)
{
	size_t n = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

int sonde__tracefs_cpu_stats_parse(const char *buf, size_t len, struct tracefs_cpu_stats *st)
{
	static const struct {
		const char *key;
		size_t off;
	} keys[] = {
		{"entries", offsetof(struct tracefs_cpu_stats, entries)},
		{"overrun", offsetof(struct tracefs_cpu_stats, overrun)},
		{"commit overrun", offsetof(struct tracefs_cpu_stats, commit_overrun)},
		{"bytes", offsetof(struct tracefs_cpu_stats, bytes)},
		{"dropped events", offsetof(struct tracefs_cpu_stats, dropped_events)},
		{"read events", offsetof(struct tracefs_cpu_stats, read_events)},
	};
	const char *p = buf, *end = buf + len, *v;
	int found = 0;

	memset(st, 0, sizeof(*st));
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		char tmp[64];
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			if (stat_line(p, e, keys[i].key, &v)) {
				value_copy(tmp, sizeof(tmp), v, e);
				*(unsigned long long *)((char *)st + keys[i].off) =
					strtoull(tmp, NULL, 10);
				found++;
			}
		}
		if (stat_line(p, e, "oldest event ts", &v)) {
			value_copy(tmp, sizeof(tmp), v, e);
			st->oldest_event_ts = strtod(tmp, NULL);
			found++;
		} else if (stat_line(p, e, "now ts", &v)) {
			value_copy(tmp, sizeof(tmp), v, e);
			st->now_ts = strtod(tmp, NULL);
			found++;
		}
		p = nl ? nl + 1 : end;
	}
	return found ? 0 : -SONDE_E_FORMAT;
}
