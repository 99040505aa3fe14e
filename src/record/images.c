/* Keeping the images a recording needs: the recorder holds a descriptor of every mapped
 * file it read a build id from (bounded), and when the recording finishes copies into the
 * build-id cache (symbol/bidcache.h) the ones whose path no longer leads to them (deleted
 * or replaced while mapped). After the processes are gone, the symbolizer finds them there
 * by build id. An image whose path is already wrong when it is first seen is copied at
 * once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "record/recorder.h"
#include "symbol/bidcache.h"
#include "symbol/elfimg.h"

/* Whether path still names the file with this inode (the device is not compared: overlay
 * file systems report another one in /proc/PID/maps than stat does). */
static bool path_is_image(const char *path, uint64_t inode)
{
	static const char deleted[] = " (deleted)";
	size_t n = strlen(path);
	struct stat st;

	if (n > sizeof(deleted) - 1 && strcmp(path + n - (sizeof(deleted) - 1), deleted) == 0)
		return false;
	return stat(path, &st) == 0 && (uint64_t)st.st_ino == inode;
}

static void save(struct sonde_recorder *r, struct rec_build_id *b, int fd, const char *path)
{
	int err = sonde__bidcache_store(r->img.bidcache_dir, b->id, b->len, fd, r->img.bidcache_bytes);

	if (err < 0)
		sonde_warn("cannot keep %s in the build-id cache %s: %s", path, r->img.bidcache_dir,
			   sonde_strerror(err));
	else
		r->sum.images_saved++;
}

void sonde__rec_image_hold(struct sonde_recorder *r, struct rec_build_id *b, int fd, const char *path)
{
	if (!r->img.bidcache_dir || !b->len) {
		close(fd);
		return;
	}
	if (!path_is_image(path, b->inode)) {
		save(r, b, fd, path);
		close(fd);
		return;
	}
	if (r->img.n_images_held >= REC_IMAGES_HELD_MAX || !(b->path = sonde__strdup(path))) {
		close(fd);
		return;
	}
	b->fd = fd;
	r->img.n_images_held++;
}

void sonde__rec_images_save(struct sonde_recorder *r)
{
	for (size_t i = 0; i < r->img.n_build_ids; i++) {
		struct rec_build_id *b = &r->img.build_ids[i];
		if (b->fd < 0)
			continue;
		if (!path_is_image(b->path, b->inode))
			save(r, b, b->fd, b->path);
		close(b->fd);
		b->fd = -1;
		r->img.n_images_held--;
	}
}

void sonde__rec_images_free(struct sonde_recorder *r)
{
	for (size_t i = 0; i < r->img.n_build_ids; i++) {
		if (r->img.build_ids[i].fd >= 0)
			close(r->img.build_ids[i].fd);
		sonde__free(r->img.build_ids[i].path);
	}
	sonde__free(r->img.build_ids);
	sonde__free(r->img.bidcache_dir);
	r->img.build_ids = NULL;
	r->img.bidcache_dir = NULL;
	r->img.n_build_ids = r->img.cap_build_ids = r->img.n_images_held = 0;
}

/* The mapped file, for its build id. map_files reaches it even when it was deleted or
 * replaced (a kernel link, followed); the mapped path is the target's to replace (with a
 * FIFO, a link to a device...), so it is opened as an untrusted path; the inode check
 * makes sure a path that now names another file is not used. A descriptor or -1. */
static int open_mapped_file(struct sonde_recorder *r, pid_t pid, const struct rec_module *m)
{
	struct regfile_rules rules = sonde__elfimg_rules(true, &r->img.refused);
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", (int)pid,
		 (unsigned long long)m->start, (unsigned long long)m->end);
	for (int i = 0; i < 2; i++) {
		rules.follow = i == 0; /* map_files, then the mapped path, not followed */
		int fd = sonde__regfile_open(i == 0 ? path : m->path, &rules, &st);
		if (fd >= 0 && st.st_ino == m->inode && sonde__regfile_is_generation(fd, m->gen))
			return fd;
		if (fd >= 0)
			close(fd);
	}
	return -1;
}

/* Whether b is m's file: the same device and inode, and the same generation where both
 * know it. A deleted file's inode number, once freed, goes to the next file created: a
 * dlopen'd temporary library written again under its name took the first one's build id
 * (and CFI). */
static bool same_file(const struct rec_build_id *b, const struct rec_module *m)
{
	return b->dev == m->dev && b->inode == m->inode &&
	       sonde__regfile_same_generation(b->gen, m->gen);
}

/* Build ids by file identity: every process mapping libc reads it once. */
const struct rec_build_id *sonde__rec_build_id(struct sonde_recorder *r, pid_t pid,
					       struct rec_module *m)
{
	for (size_t i = 0; i < r->img.n_build_ids; i++) {
		struct rec_build_id *b = &r->img.build_ids[i];
		if (same_file(b, m)) {
			if (!m->gen)
				m->gen = b->gen;
			return b;
		}
	}
	if (sonde__array_grow(&r->img.build_ids, &r->img.cap_build_ids, r->img.n_build_ids + 1,
			      sizeof(*r->img.build_ids), 32) < 0)
		return NULL;
	struct rec_build_id *b = &r->img.build_ids[r->img.n_build_ids++];
	memset(b, 0, sizeof(*b));
	b->fd = -1;
	b->dev = m->dev;
	b->inode = m->inode;
	b->gen = m->gen;

	int fd = open_mapped_file(r, pid, m);
	if (fd >= 0) {
		if (!b->gen) /* a mapping read from /proc: the file's own */
			m->gen = b->gen = sonde__regfile_generation(fd);
		int n = sonde__read_build_id(fd, b->id, sizeof(b->id));
		b->len = n > 0 ? (uint8_t)n : 0;
		sonde__rec_image_hold(r, b, fd, m->path);
	}
	return b;
}

int sonde__rec_image_fd(const struct sonde_recorder *r, uint64_t dev, uint64_t inode,
			const uint8_t *build_id, size_t build_id_len)
{
	for (size_t i = 0; i < r->img.n_build_ids; i++) {
		const struct rec_build_id *b = &r->img.build_ids[i];
		if (b->dev != dev || b->inode != inode || b->fd < 0)
			continue;
		if (build_id_len && b->len &&
		    (build_id_len != b->len || memcmp(build_id, b->id, b->len) != 0))
			continue; /* another file that had this inode number (its generation) */
		return b->fd;
	}
	return -1;
}

uint64_t sonde__rec_images_refused(const struct sonde_recorder *r)
{
	return sonde__regfile_refusals_total(&r->img.refused);
}

int sonde__rec_images_configure(struct sonde_recorder *r, const struct sonde_record_opts *o)
{
	char dir[4096];

	r->img.bidcache_bytes =
		o->buildid_cache_bytes ? o->buildid_cache_bytes : BIDCACHE_DEFAULT_BYTES;
	if (o->no_buildid_cache || sonde__bidcache_dir(o->buildid_cache_dir, dir, sizeof(dir)) < 0)
		return 0;
	r->img.bidcache_dir = sonde__strdup(dir);
	return r->img.bidcache_dir ? 0 : -ENOMEM;
}
