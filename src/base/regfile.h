/* Opening files at paths other users may control. Internal.
 *
 * sonde reads, often as root on another user's behalf, files at paths that someone else
 * can create or replace: /tmp/perf-PID.map, a module's path from /proc/PID/maps, a debug
 * file next to a module. A FIFO there blocks open(2) and read(2) forever, a symbolic link
 * can lead to /dev/zero, a sparse file can claim gigabytes. sonde__regfile_open takes a file only
 * when it is a regular file within a size cap (and, where the rules ask, owned by root or
 * by one given user), opened without blocking and, unless the rules say the path is
 * trusted, not through a symbolic link.
 */
#ifndef SONDE_BASE_REGFILE_H
#define SONDE_BASE_REGFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Files refused, by reason. */
struct regfile_refusals {
	uint64_t symlink;     /* the last path component was a symbolic link */
	uint64_t not_regular; /* a FIFO, socket, device or directory */
	uint64_t too_big;     /* larger than the cap for its kind */
	uint64_t owner;	      /* owned by neither root nor the user it must belong to */
};

struct regfile_rules {
	const char *what; /* the kind of file, for the log: "perf map" */
	uint64_t max_size;
	/* The path is trusted (a system directory, or a /proc magic link such as map_files):
	 * a symbolic link as its last component is followed. */
	bool follow;
	/* Only files owned by root or by owner are taken. */
	bool check_owner;
	uid_t owner;
	/* Refusals are counted here when not NULL; the first of each reason is logged as a
	 * warning, the others (and all of them without counters) at debug level. */
	struct regfile_refusals *refusals;
};

/* Opens path read-only with O_CLOEXEC, O_NOCTTY, O_NONBLOCK (left set: it changes nothing
 * for a regular file) and, unless rules->follow, O_NOFOLLOW. A path that lstat (stat when
 * following) already shows is no regular file is not opened at all, so a device node is
 * never opened; the fstat of the opened file decides. Returns the descriptor and fills *st
 * (may be NULL); or -ELOOP (symbolic link), -SONDE_E_NOT_REGULAR, -EFBIG (over the cap),
 * -SONDE_E_OWNER, or the -errno of stat, open or fstat. */
int sonde__regfile_open(const char *path, const struct regfile_rules *rules, struct stat *st);

/* The generation of fd's inode (FS_IOC_GETVERSION, which ext4, xfs and btrfs answer), 0
 * when the file system keeps none. perf's MMAP2 records carry it (ino_generation): with
 * the inode number it tells a file from a later one that was given the same number once
 * the first was deleted and freed. */
uint32_t sonde__regfile_generation(int fd);
/* Whether two files of the same device and inode number, of generations a and b, can be
 * one: either generation is unknown (0), or they are the same. */
static inline bool sonde__regfile_same_generation(uint32_t a, uint32_t b)
{
	return !a || !b || a == b;
}
/* Whether fd's file can be the one of generation gen (sonde__regfile_same_generation). */
bool sonde__regfile_is_generation(int fd, uint32_t gen);

/* Total of all reasons. */
uint64_t sonde__regfile_refusals_total(const struct regfile_refusals *r);

#endif
