/* The files sonde's commands write (-o): one rule for every command.
 *
 *   "-"                      standard output.
 *   a FIFO or a device       opened and written in place (as root, -o /dev/null must stay
 *                            the character device it is).
 *   a regular file, or a     written under a temporary name in the same directory, then
 *   path that does not exist renamed over it, so that a failed write never leaves a partial
 *                            file under the name. An existing non-empty file is kept as
 *                            FILE.old (as perf keeps perf.data.old), and the new file gets
 *                            its mode (and owner, when allowed).
 *   a symlink                followed: what it leads to is written (or replaced) by the
 *                            rules above; the link stays a link. A dangling one is written
 *                            through, which creates its target.
 *
 * Call order: cli_output_open, then write to ->fd, then cli_output_publish (optional: puts
 * the file under its name while it is still being written, for a spool that readers follow
 * as it grows), then cli_output_close (publishes, unless the write failed).
 */
#ifndef SONDE_CLI_OUTPUT_H
#define SONDE_CLI_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct cli_output {
	int fd;	       /* write here; -1 once closed */
	char *name;    /* as given, for messages */
	char *path;    /* the file written (a symlink's target); NULL for standard output */
	char *tmp;     /* the temporary name while not published; NULL when written in place */
	bool keep_old; /* path holds a non-empty file, to be kept as path.old */
	bool has_mode; /* give the new file the old one's mode and owner */
	mode_t mode;
	uid_t uid;
	gid_t gid;
};

/* Opens name for writing by the rules above. 0 or -errno (nothing is left behind). */
int cli_output_open(struct cli_output *o, const char *name);
/* Moves a temporary file to its name (keeping the old file as .old first); the fd stays
 * open for writing. Idempotent; nothing to do for a file written in place. 0 or -errno (the
 * temporary file is still there: cli_output_close(o, false) removes it). */
int cli_output_publish(struct cli_output *o);
/* Closes the file. ok: publishes it (a close error fails it first); !ok: an unpublished
 * temporary file is removed and any old file left as it was. 0 or -errno. Idempotent. */
int cli_output_close(struct cli_output *o, bool ok);
/* True when name means standard output. */
bool cli_output_is_stdout(const char *name);

/* The spool `sonde record -o NAME` records into when NAME is a Perfetto trace: NAME.spool
 * (snprintf's result). */
int cli_trace_spool_name(char *buf, size_t cap, const char *trace);
/* true when name ends in .pftrace or .perfetto-trace. */
bool cli_is_trace_name(const char *name);
/* When input cannot be read and it is a trace whose recording did not finish (its spool
 * is still there), says how to recover it, as cmd's message. */
void cli_hint_unfinished(const char *cmd, const char *input);

/* The one-line error of a spool that cannot be read (err: -errno or -SONDE_E_*, off: the
 * byte where it went wrong when known), in the words every reader uses: "FILE is empty",
 * "FILE: not a sonde spool file", "FILE: corrupt spool: ... at byte N"; then the hint of
 * an unfinished trace. */
void cli_spool_error(const char *cmd, const char *path, int err, uint64_t off);
/* The warning of a spool whose recording did not finish: "FILE: truncated at byte N,
 * recovered M samples" (the library's profile reader says the same). */
void cli_spool_truncated(const char *cmd, const char *path, uint64_t valid_bytes,
			 uint64_t samples);

/* The readers' sample filters, with `sonde report`'s syntax and meaning: --pid and --tid
 * take ids separated by commas, --comm names, --cpu a CPU list (0,2-3), --time START,END
 * in seconds from the start (either side may be empty); each --pid/--tid/--comm adds to
 * its list. */
enum { CLI_FILTER_MAX_IDS = 64 };
struct cli_filter {
	uint32_t pids[CLI_FILTER_MAX_IDS], tids[CLI_FILTER_MAX_IDS];
	const char *comms[CLI_FILTER_MAX_IDS];
	size_t n_pids, n_tids, n_comms;
	int *cpus; /* NULL: every CPU */
	size_t n_cpus;
	bool has_time;
	double from_s, to_s; /* to_s < 0: the end */
};
/* Parses the value of filter option name ("pid", "tid", "comm", "cpu", "time", or one of
 * those prefixed "filter-", as top spells them, for its messages), which arg
 * may be cut up in place; 0, or the usage exit status after saying what is wrong. */
int cli_filter_parse(const char *cmd, struct cli_filter *f, const char *name, char *arg);
/* Whether any filter was given. */
bool cli_filter_any(const struct cli_filter *f);
struct sonde_profile_spool_opts;
/* Points the profile reader's filters at f's lists (f must outlive the opts' use). */
void cli_filter_to_spool_opts(const struct cli_filter *f, struct sonde_profile_spool_opts *o);
struct sonde_view_filter;
/* The view's filter of f (include/sonde/view.h), its lists pointing into f (which must
 * outlive it): --time's seconds from start_ns (the recording's start on the sample
 * clock) turned into that clock by sonde_view_filter__time_s. No states: every state
 * passes. */
void cli_filter_to_view(const struct cli_filter *f, uint64_t start_ns,
			struct sonde_view_filter *vf);
void cli_filter_free(struct cli_filter *f);

#endif
