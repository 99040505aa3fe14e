/* The files sonde's commands write: see output.h for the rules. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>

#include "cli.h"
#include "output.h"

enum { NEW_FILE_MODE = 0644 }; /* less the umask */

bool cli_output_is_stdout(const char *name)
{
	return strcmp(name, "-") == 0;
}

static char *with_suffix(const char *path, const char *suffix)
{
	size_t n = strlen(path), k = strlen(suffix);
	char *s = malloc(n + k + 1);

	if (s) {
		memcpy(s, path, n);
		memcpy(s + n, suffix, k + 1);
	}
	return s;
}

static mode_t new_file_mode(void)
{
	mode_t mask = umask(0);

	umask(mask);
	return NEW_FILE_MODE & ~mask;
}

/* A FIFO, a device (or anything else that is not a regular file) is written as it is. */
static int open_in_place(struct cli_output *o, const char *path)
{
	o->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	return o->fd < 0 ? -errno : 0;
}

/* A regular file or a new path: a temporary file beside it, renamed at publish. */
static int open_replacing(struct cli_output *o, const struct stat *old)
{
	if (!(o->tmp = with_suffix(o->path, ".tmp.XXXXXX")))
		return -ENOMEM;
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0) {
		int err = -errno;
		free(o->tmp);
		o->tmp = NULL;
		return err;
	}
	if (old) {
		o->has_mode = true;
		o->mode = old->st_mode & 07777;
		o->uid = old->st_uid;
		o->gid = old->st_gid;
		o->keep_old = old->st_size > 0;
	}
	/* mkostemp made it 0600: give it the mode it will have under its name. */
	if (fchmod(o->fd, o->has_mode ? o->mode : new_file_mode()) < 0) {
		int err = -errno;
		cli_output_close(o, false);
		return err;
	}
	if (o->has_mode && (o->uid != geteuid() || o->gid != getegid()))
		(void)!fchown(o->fd, o->uid, o->gid); /* only root may; a best effort */
	return 0;
}

int cli_output_open(struct cli_output *o, const char *name)
{
	struct stat st;
	char *resolved = NULL;
	int err;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	if (!(o->name = strdup(name)))
		return -ENOMEM;
	if (cli_output_is_stdout(name)) {
		o->fd = STDOUT_FILENO;
		return 0;
	}
	if (stat(name, &st) < 0 && errno != ENOENT) {
		err = -errno;
		goto fail;
	}
	if (lstat(name, &st) < 0) {
		/* A new path: created by the rename. */
		err = errno == ENOENT ? 0 : -errno;
		if (!err && !(o->path = strdup(name)))
			err = -ENOMEM;
		if (!err)
			err = open_replacing(o, NULL);
		goto out;
	}
	if (S_ISLNK(st.st_mode) && !(resolved = realpath(name, NULL))) {
		/* A dangling link: writing through it creates its target. */
		err = errno == ENOENT ? 0 : -errno;
		if (!err) {
			o->fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY,
				     NEW_FILE_MODE);
			err = o->fd < 0 ? -errno : 0;
		}
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		o->path = resolved;
		err = stat(o->path, &st) < 0 ? -errno : 0;
	} else {
		err = (o->path = strdup(name)) ? 0 : -ENOMEM;
	}
	if (!err && S_ISDIR(st.st_mode))
		err = -EISDIR;
	if (!err)
		err = S_ISREG(st.st_mode) ? open_replacing(o, &st) : open_in_place(o, o->path);
out:
	if (!err)
		return 0;
fail:
	cli_output_close(o, false);
	return err;
}

/* path -> path.old, keeping path in place until the new file replaces it (a hard link
 * where the filesystem has them, else a rename). */
static int keep_old(const char *path)
{
	char *old = with_suffix(path, ".old");
	int err = 0;

	if (!old)
		return -ENOMEM;
	if (unlink(old) < 0 && errno != ENOENT)
		err = -errno;
	else if (link(path, old) < 0 && rename(path, old) < 0)
		err = -errno;
	free(old);
	return err;
}

int cli_output_publish(struct cli_output *o)
{
	if (!o->tmp)
		return 0;
	if (o->keep_old) {
		int err = keep_old(o->path);
		if (err)
			return err;
		o->keep_old = false;
	}
	if (rename(o->tmp, o->path) < 0)
		return -errno;
	free(o->tmp);
	o->tmp = NULL;
	return 0;
}

int cli_output_close(struct cli_output *o, bool ok)
{
	int err = 0;

	if (o->fd >= 0 && o->fd != STDOUT_FILENO && close(o->fd) < 0)
		err = -errno;
	else if (o->fd == STDOUT_FILENO && fflush(stdout) != 0)
		err = -errno;
	o->fd = -1;
	if (ok && !err)
		err = cli_output_publish(o);
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	free(o->name);
	o->tmp = o->path = o->name = NULL;
	return err;
}

bool cli_is_trace_name(const char *name)
{
	static const char *const exts[] = {".pftrace", ".perfetto-trace"};
	size_t len = strlen(name);

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t el = strlen(exts[i]);
		if (len > el && strcmp(name + len - el, exts[i]) == 0)
			return true;
	}
	return false;
}

int cli_trace_spool_name(char *buf, size_t cap, const char *trace)
{
	int n = snprintf(buf, cap, "%s.spool", trace);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

void cli_spool_error(const char *cmd, const char *path, int err, uint64_t off)
{
	if (err < 0)
		err = -err;
	if (err == SONDE_E_EMPTY)
		cli_error(cmd, "%s is empty: it holds no recording", path);
	else if (err == SONDE_E_MAGIC)
		cli_error(cmd, "%s: not a sonde spool file", path);
	else if (err >= SONDE_E_BASE && err != SONDE_E_TRUNCATED && off)
		cli_error(cmd, "%s: corrupt spool: %s at byte %" PRIu64, path, sonde_strerror(err),
			  off);
	else
		cli_error(cmd, "%s: %s", path, sonde_strerror(err));
	cli_hint_unfinished(cmd, path);
}

void cli_spool_truncated(const char *cmd, const char *path, uint64_t valid_bytes,
			 uint64_t samples)
{
	cli_error(cmd, "%s: truncated at byte %" PRIu64 ", recovered %" PRIu64 " samples", path,
		  valid_bytes, samples);
}

void cli_hint_unfinished(const char *cmd, const char *input)
{
	char spool[PATH_MAX];

	if (!cli_is_trace_name(input) || cli_trace_spool_name(spool, sizeof(spool), input) < 0 ||
	    access(spool, F_OK) < 0)
		return;
	cli_error(cmd, "%s was not finished; its recording is in %s: run 'sonde convert %s -o %s'",
		  input, spool, spool, input);
}
