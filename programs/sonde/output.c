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
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/view.h>

#include "export/profile.h"
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

static int parse_ids(char *arg, uint32_t *ids, size_t *n)
{
	for (char *save = NULL, *t = strtok_r(arg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(t, &end, 10);
		if (errno || end == t || *end || t[0] == '-' || v > UINT32_MAX ||
		    *n == CLI_FILTER_MAX_IDS)
			return -1;
		ids[(*n)++] = (uint32_t)v;
	}
	return *n ? 0 : -1;
}

static int parse_time(const char *arg, struct cli_filter *f)
{
	const char *comma = strchr(arg, ',');
	char *end;

	f->has_time = true;
	f->from_s = 0;
	f->to_s = -1;
	if (arg[0] && arg[0] != ',') {
		f->from_s = strtod(arg, &end);
		if (end == arg || (*end && *end != ',') || !(f->from_s >= 0))
			return -1;
	}
	if (comma && comma[1]) {
		f->to_s = strtod(comma + 1, &end);
		if (*end || !(f->to_s >= f->from_s))
			return -1;
	}
	return comma || arg[0] ? 0 : -1;
}

int cli_filter_parse(const char *cmd, struct cli_filter *f, const char *name, char *arg)
{
	const char *opt = name; /* as the command spells it: top's are --filter-NAME */

	if (!strncmp(name, "filter-", 7))
		name += 7;
	if (!strcmp(name, "pid") || !strcmp(name, "tid")) {
		if (parse_ids(arg, name[0] == 'p' ? f->pids : f->tids,
			      name[0] == 'p' ? &f->n_pids : &f->n_tids) == 0)
			return 0;
		cli_error(cmd, "--%s wants ids separated by commas, not '%s'", name, arg);
	} else if (!strcmp(name, "comm")) {
		for (char *save = NULL, *t = strtok_r(arg, ",", &save); t;
		     t = strtok_r(NULL, ",", &save)) {
			if (f->n_comms == CLI_FILTER_MAX_IDS)
				break;
			f->comms[f->n_comms++] = t;
		}
		if (f->n_comms && f->n_comms < CLI_FILTER_MAX_IDS)
			return 0;
		cli_error(cmd, "--%s wants names separated by commas", opt);
	} else if (!strcmp(name, "cpu")) {
		free(f->cpus);
		f->cpus = NULL;
		if (sonde_cpu_list__parse(arg, &f->cpus, &f->n_cpus) == 0)
			return 0;
		cli_error(cmd, "--%s wants a CPU list such as 0,2-3, not '%s'", opt, arg);
	} else if (parse_time(arg, f) == 0) {
		return 0;
	} else {
		cli_error(cmd, "--time wants START,END in seconds from the start, not '%s'", arg);
	}
	return CLI_USAGE;
}

bool cli_filter_any(const struct cli_filter *f)
{
	return f->n_pids || f->n_tids || f->n_comms || f->cpus || f->has_time;
}

void cli_filter_to_spool_opts(const struct cli_filter *f, struct sonde_profile_spool_opts *o)
{
	o->pids = f->pids;
	o->n_pids = f->n_pids;
	o->tids = f->tids;
	o->n_tids = f->n_tids;
	o->comms = f->comms;
	o->n_comms = f->n_comms;
	o->cpus = f->cpus;
	o->n_cpus = f->cpus ? f->n_cpus : 0;
	o->time_range = f->has_time;
	o->time_from_s = f->from_s;
	o->time_to_s = f->to_s;
}

void cli_filter_to_view(const struct cli_filter *f, uint64_t start_ns, struct sonde_view_filter *vf)
{
	struct sonde_profile_spool_opts o = {.sz = sizeof(o)};

	cli_filter_to_spool_opts(f, &o);
	sonde__prof_view_filter(&o, start_ns, vf);
}

void cli_filter_free(struct cli_filter *f)
{
	free(f->cpus);
	f->cpus = NULL;
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
