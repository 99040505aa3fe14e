/* Opening files at paths other users may control (regfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/regfile.h"

/* Counts a refusal and says why: a warning the first time per reason, since a refused
 * file means missing names the user should hear about once, not once per lookup. */
static int refuse(const struct regfile_rules *rules, const char *path, int err)
{
	struct regfile_refusals *c = rules->refusals;
	uint64_t *n = NULL;

	if (c)
		n = err == -ELOOP		  ? &c->symlink
		    : err == -SONDE_E_NOT_REGULAR ? &c->not_regular
		    : err == -EFBIG		  ? &c->too_big
						  : &c->owner;
	sonde_log(n && (*n)++ == 0 ? SONDE_LOG_WARN : SONDE_LOG_DEBUG, "%s %s ignored: %s",
		  rules->what ? rules->what : "file", path,
		  err == -ELOOP ? "a symbolic link" : sonde_strerror(err));
	return err;
}

/* The checks on the opened file's own metadata. */
static int check(const struct regfile_rules *rules, const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return -SONDE_E_NOT_REGULAR;
	if ((uint64_t)st->st_size > rules->max_size)
		return -EFBIG;
	if (rules->check_owner && st->st_uid != 0 && st->st_uid != rules->owner)
		return -SONDE_E_OWNER;
	return 0;
}

int sonde__regfile_open(const char *path, const struct regfile_rules *rules, struct stat *st)
{
	struct stat pre, own;
	int fd, err;

	if (!st)
		st = &own;
	/* No open(2) of what is no regular file: opening a device can have effects. */
	if ((rules->follow ? stat(path, &pre) : lstat(path, &pre)) < 0)
		return -errno;
	if (S_ISLNK(pre.st_mode))
		return refuse(rules, path, -ELOOP);
	if (!S_ISREG(pre.st_mode))
		return refuse(rules, path, -SONDE_E_NOT_REGULAR);
	/* The path may be replaced between the two: O_NONBLOCK keeps a FIFO put there from
	 * blocking the open, O_NOFOLLOW refuses a symbolic link, and fstat decides. */
	fd = open(path,
		  O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (rules->follow ? 0 : O_NOFOLLOW));
	if (fd < 0)
		return errno == ELOOP ? refuse(rules, path, -ELOOP) : -errno;
	if (fstat(fd, st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	err = check(rules, st);
	if (err) {
		close(fd);
		return refuse(rules, path, err);
	}
	return fd;
}

uint64_t sonde__regfile_refusals_total(const struct regfile_refusals *r)
{
	return r->symlink + r->not_regular + r->too_big + r->owner;
}

uint32_t sonde__regfile_generation(int fd)
{
	int gen = 0; /* the file systems that answer write an int */

	return ioctl(fd, FS_IOC_GETVERSION, &gen) == 0 ? (uint32_t)gen : 0;
}

bool sonde__regfile_is_generation(int fd, uint32_t gen)
{
	return !gen || sonde__regfile_same_generation(sonde__regfile_generation(fd), gen);
}
