/* sonde convert: a recording into a Perfetto trace, pprof, folded stacks, speedscope or an
 * SVG flame graph. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/symbolize.h>

#include "cli.h"
#include "flamediff.h"
#include "output.h"
#include "progress.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde convert [-i SPOOL | SPOOL] -o OUT [--format FORMAT] "
		"[--no-symbolize]\n"
		"                     [--metric cpu|off-cpu|wall] [--title T] [--buildid-cache "
		"DIR]\n"
		"       sonde convert --diff BEFORE AFTER -o OUT.svg|OUT.folded\n\n"
		"Converts a spool written by 'sonde record' (default sonde.spool) into a profile\n"
		"other tools read.\n"
		"The format follows OUT's extension unless --format says otherwise:\n"
		"  pprof       .pb.gz, .pprof     gzip'd profile.proto (go tool pprof, pprof)\n"
		"  folded      .folded, .txt      'outer;...;inner COUNT' lines (flamegraph.pl)\n"
		"  speedscope  .json              speedscope's format, one profile per thread\n"
		"                                 (per process, heaviest first, for several)\n"
		"  svg         .svg               an interactive flame graph (click to zoom, "
		"Search)\n"
		"  perfetto    .pftrace, .perfetto-trace  a Perfetto trace (ui.perfetto.dev)\n\n"
		"  -i, --input SPOOL  the spool to convert (or give it as the argument)\n"
		"  --diff             a differential flame graph of two spools: widths from "
		"AFTER,\n"
		"                     each frame red where its self samples grew, blue where they\n"
		"                     shrank (BEFORE scaled to AFTER's total, as difffolded.pl "
		"-n);\n"
		"                     .folded writes 'STACK BEFORE AFTER' lines (flamegraph.pl)\n"
		"  -o, --output OUT   the file to write ('-' for standard output); an existing "
		"file\n"
		"                     is kept as OUT.old, a FIFO or device is written in place\n"
		"  -f, --format F     one of the formats above\n"
		"  --no-symbolize     keep raw addresses and build ids (symbolize elsewhere)\n"
		"  --metric M         what stacks weigh: cpu (on-CPU samples, the default), "
		"off-cpu\n"
		"                     (off-CPU time of a 'record --off-cpu' spool) or wall "
		"(both);\n"
		"                     folded prints microseconds, the SVG milliseconds for time\n"
		"                     metrics; pprof holds every metric and starts on this one\n"
		"  --pid PID[,PID...], --tid TID[,TID...], --comm NAME[,NAME...], --cpu LIST,\n"
		"  --time START,END   only these samples, as 'sonde report' selects them (with\n"
		"                     --diff, on both sides); perfetto keeps the tracks, samples\n"
		"                     and sched events of these threads, CPUs and times\n"
		"  --folded-roots process|thread|none  hang every stack under a 'comm-pid'\n"
		"                     (process) or 'comm-pid/tid' (thread) root frame, as\n"
		"                     'report --folded' does (every format but perfetto)\n"
		"  --inverted, --no-inverted  the SVG as an icicle (root at the top, as\n"
		"                     flamegraph.pl --inverted) or a flame graph (root at the\n"
		"                     bottom); default: the icicle when several processes have\n"
		"                     samples (-a), each under its own root frame, busiest first\n"
		"  --hide-idle, --no-hide-idle  leave out (the subtitle says how much) or show,\n"
		"                     under one node, the idle task and kernel threads in the SVG;\n"
		"                     default: left out of an on-CPU view of several processes\n"
		"  --title T          title of the SVG and speedscope views\n"
		"  --buildid-cache DIR  where 'sonde record --buildid-cache DIR' kept deleted or\n"
		"                     replaced images (default $SONDE_BUILDID_CACHE, else\n"
		"                     $XDG_CACHE_HOME/sonde/buildid, else ~/.cache/sonde/buildid)\n"
		"  -h, --help         this help\n");
}

static int is_perfetto(const char *name, int is_path)
{
	return is_path ? cli_is_trace_name(name) : strcmp(name, "perfetto") == 0;
}

struct conv_job {
	const struct sonde_profile *p; /* NULL: the Perfetto export, straight from the spool */
	enum sonde_profile_format fmt;
	const char *spool;
	const struct sonde_profile_spool_opts *so;
	const struct sonde_profile_write_opts *wo;
};

static int write_fd(const struct conv_job *j, int fd)
{
	if (!j->p)
		return sonde_profile__spool_to_perfetto(j->spool, fd, j->so);
	return sonde_profile__write(j->p, j->fmt, fd, j->wo);
}

/* A regular file is written under a temporary name and renamed at the end, so that a
 * failed conversion never leaves a half-written profile under the requested name; a FIFO
 * or device is written in place (output.h). */
static int write_out(const struct conv_job *j, const char *out)
{
	struct cli_output o;
	int err = cli_output_open(&o, out);

	if (err)
		return err;
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "writing %s", out);
	struct cli_progress *p = cli_progress_begin("convert", what);
	cli_progress_tick(p);
	err = write_fd(j, o.fd);
	cli_progress_end(p);
	int cerr = cli_output_close(&o, err == 0);
	return err ? err : cerr;
}

/* Why the profile is empty under the metric: the filters left nothing, or the recording
 * had nothing of it. */
static void empty_warning(const struct sonde_profile *p, enum sonde_profile_metric m,
			  const char *spool, const char *out, bool filtered)
{
	if (filtered)
		cli_error("convert",
			  "%s: nothing matches --pid, --tid, --comm, --cpu or --time, so %s is an "
			  "empty profile",
			  spool, out);
	else if (m == SONDE_PROFILE_METRIC_CPU || sonde_profile__offcpu_count(p, NULL, NULL))
		cli_error("convert",
			  "%s: no samples, so %s is an empty profile: the targets used no CPU "
			  "while recorded (sonde samples CPU time), or ran too briefly",
			  spool, out);
	else
		cli_error("convert",
			  "%s: no off-CPU intervals, so %s is an empty profile: record with "
			  "--off-cpu",
			  spool, out);
}

enum {
	OPT_NO_SYMBOLIZE = 256,
	OPT_TITLE,
	OPT_BUILDID_CACHE,
	OPT_DIFF,
	OPT_METRIC,
	OPT_FILTER, /* --pid, --tid, --comm, --cpu, --time: named by the option itself */
	OPT_ROOTS,
	OPT_INVERTED,
	OPT_NO_INVERTED,
	OPT_HIDE_IDLE,
	OPT_NO_HIDE_IDLE,
};

/* The folded stacks of a spool, as `convert -o x.folded` writes them; NULL after saying
 * why. The caller frees. */
static char *folded_of(const char *spool, const struct sonde_profile_spool_opts *so,
		       const struct sonde_profile_write_opts *wo)
{
	struct sonde_profile *p = sonde_profile__from_spool(spool, so);
	int fd = -1, err = 0;
	char *text = NULL;
	off_t len;

	if (!p) {
		cli_spool_error("convert", spool, errno, 0);
		return NULL;
	}
	if (!sonde_profile__total(p, wo->metric))
		cli_error("convert", "%s: no %s: nothing on this side of the difference", spool,
			  wo->metric == SONDE_PROFILE_METRIC_CPU ? "samples" : "off-CPU intervals");
	if ((fd = memfd_create("sonde-folded", MFD_CLOEXEC)) < 0)
		err = -errno;
	if (!err)
		err = sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, wo);
	if (!err && ((len = lseek(fd, 0, SEEK_END)) < 0 || !(text = calloc(1, (size_t)len + 1))))
		err = -ENOMEM;
	if (!err && pread(fd, text, (size_t)len, 0) != len)
		err = -EIO;
	if (err) {
		cli_error("convert", "%s: %s", spool, sonde_strerror(err));
		free(text);
		text = NULL;
	}
	if (fd >= 0)
		close(fd);
	sonde_profile__free(p);
	return text;
}

struct diff_job {
	struct flame_diff d;
	const char *title;
	bool folded;
};

static int write_diff_fd(const struct diff_job *j, int fd)
{
	if (!j->folded)
		return flame_diff_write_svg(&j->d, fd, j->title);
	FILE *f = fdopen(dup(fd), "w");
	if (!f)
		return -errno;
	for (size_t i = 0; i < j->d.n; i++)
		fprintf(f, "%s %.0f %.0f\n", j->d.v[i].text, j->d.v[i].a, j->d.v[i].b);
	return fclose(f) ? -errno : 0;
}

/* convert --diff BEFORE AFTER -o OUT. */
static int run_diff(char **spools, const char *out, const char *format,
		    const struct sonde_profile_spool_opts *so,
		    const struct sonde_profile_write_opts *wo)
{
	struct diff_job j = {.title = wo->title ? wo->title : "Differential flame graph"};
	enum sonde_profile_format fmt;
	struct cli_output o;
	char *a, *b;
	int err;

	if (format ? sonde_profile__parse_format(format, &fmt) < 0
		   : sonde_profile__format_from_path(out, &fmt) < 0)
		fmt = SONDE_PROFILE_PPROF; /* refused below */
	if (fmt != SONDE_PROFILE_SVG && fmt != SONDE_PROFILE_FOLDED) {
		cli_error("convert", "--diff writes svg or folded, not '%s'",
			  format ? format : out);
		return CLI_USAGE;
	}
	j.folded = fmt == SONDE_PROFILE_FOLDED;
	if (!(a = folded_of(spools[0], so, wo)))
		return CLI_FAILURE;
	if (!(b = folded_of(spools[1], so, wo))) {
		free(a);
		return CLI_FAILURE;
	}
	err = flame_diff_build(&j.d, a, b);
	free(a);
	free(b);
	if (!err && !(err = cli_output_open(&o, out))) {
		err = write_diff_fd(&j, o.fd);
		int cerr = cli_output_close(&o, err == 0);
		err = err ? err : cerr;
	}
	flame_diff_free(&j.d);
	if (err) {
		cli_error("convert", "%s: %s", out, sonde_strerror(err));
		return CLI_FAILURE;
	}
	return CLI_OK;
}

static int convert(int argc, char **argv, struct cli_filter *filt)
{
	static const struct option longopts[] = {
		{"pid", required_argument, NULL, OPT_FILTER},
		{"tid", required_argument, NULL, OPT_FILTER},
		{"comm", required_argument, NULL, OPT_FILTER},
		{"cpu", required_argument, NULL, OPT_FILTER},
		{"time", required_argument, NULL, OPT_FILTER},
		{"folded-roots", required_argument, NULL, OPT_ROOTS},
		{"inverted", no_argument, NULL, OPT_INVERTED},
		{"no-inverted", no_argument, NULL, OPT_NO_INVERTED},
		{"hide-idle", no_argument, NULL, OPT_HIDE_IDLE},
		{"no-hide-idle", no_argument, NULL, OPT_NO_HIDE_IDLE},
		{"input", required_argument, NULL, 'i'},
		{"diff", no_argument, NULL, OPT_DIFF},
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"no-symbolize", no_argument, NULL, OPT_NO_SYMBOLIZE},
		{"title", required_argument, NULL, OPT_TITLE},
		{"metric", required_argument, NULL, OPT_METRIC},
		{"buildid-cache", required_argument, NULL, OPT_BUILDID_CACHE},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct sonde_symbolizer_opts symo = {.sz = sizeof(symo)};
	struct sonde_profile_spool_opts so = {.sz = sizeof(so), .sym = &symo};
	struct sonde_profile_write_opts wo = {.sz = sizeof(wo)};
	const char *out = NULL, *format = NULL, *input = NULL;
	enum sonde_profile_format fmt;
	bool diff = false, roots_set = false;
	int c, li = -1;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":i:o:f:h", longopts, &li)) != -1) {
		switch (c) {
		case OPT_ROOTS:
			roots_set = true;
			if (!strcmp(optarg, "process"))
				so.roots = SONDE_PROFILE_ROOTS_PROCESS;
			else if (!strcmp(optarg, "thread"))
				so.roots = SONDE_PROFILE_ROOTS_THREAD;
			else if (!strcmp(optarg, "none"))
				so.roots = SONDE_PROFILE_ROOTS_NONE;
			else {
				cli_error("convert",
					  "--folded-roots wants process, thread or none, not '%s'",
					  optarg);
				return CLI_USAGE;
			}
			break;
		case OPT_INVERTED:
		case OPT_NO_INVERTED:
			wo.inverted = c == OPT_INVERTED ? 1 : -1;
			break;
		case OPT_HIDE_IDLE:
		case OPT_NO_HIDE_IDLE:
			wo.hide_idle = c == OPT_HIDE_IDLE ? 1 : -1;
			break;
		case OPT_FILTER: {
			int err = cli_filter_parse("convert", filt, longopts[li].name, optarg);
			if (err)
				return err;
			break;
		}
		case 'i':
			input = optarg;
			break;
		case OPT_DIFF:
			diff = true;
			break;
		case 'o':
			out = optarg;
			break;
		case 'f':
			format = optarg;
			break;
		case OPT_NO_SYMBOLIZE:
			so.no_symbolize = 1;
			break;
		case OPT_TITLE:
			wo.title = optarg;
			break;
		case OPT_METRIC:
			if (sonde_profile__parse_metric(optarg, &wo.metric)) {
				cli_error("convert",
					  "--metric wants cpu, off-cpu or wall, not '%s'", optarg);
				return CLI_USAGE;
			}
			break;
		case OPT_BUILDID_CACHE:
			symo.buildid_cache_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return CLI_OK;
		default:
			return cli_bad_option("convert", c, argv);
		}
	}
	if (!out) {
		cli_error("convert", "no output given: use -o OUT (see 'sonde convert --help')");
		return CLI_USAGE;
	}
	cli_filter_to_spool_opts(filt, &so);
	if (diff) {
		if (input || argc - optind != 2) {
			cli_error("convert", "--diff takes two spools: BEFORE AFTER");
			return CLI_USAGE;
		}
		/* the differential graph's colors and labels are of sample counts */
		if (wo.metric != SONDE_PROFILE_METRIC_CPU) {
			cli_error("convert", "--diff compares on-CPU samples: no --metric %s",
				  sonde_profile__metric_name(wo.metric));
			return CLI_USAGE;
		}
		return run_diff(argv + optind, out, format, &so, &wo);
	}
	const char *spool = cli_input("convert", input, argc, argv);
	if (!spool)
		return CLI_USAGE;
	struct conv_job job = {.spool = spool, .so = &so, .wo = &wo};
	int err;
	if (format ? is_perfetto(format, 0) : is_perfetto(out, 1)) {
		if (so.roots) {
			cli_error("convert", "the Perfetto export has no root frames: no "
					     "--folded-roots");
			return CLI_USAGE;
		}
		if (access(spool, R_OK) < 0) {
			cli_error("convert", "%s: %s", spool, sonde_strerror(-errno));
			cli_hint_unfinished("convert", spool);
			return CLI_FAILURE;
		}
		err = write_out(&job, out);
		if (err) {
			cli_error("convert", "%s: %s", out, sonde_strerror(err));
			return CLI_FAILURE;
		}
		return CLI_OK;
	}
	if (format && sonde_profile__parse_format(format, &fmt) < 0) {
		cli_error("convert",
			  "unknown format '%s' (perfetto, pprof, folded, speedscope, svg)", format);
		return CLI_USAGE;
	}
	if (!format && sonde_profile__format_from_path(out, &fmt) < 0) {
		cli_error("convert",
			  "cannot tell the format from '%s': name it .pftrace, .pb.gz, .folded, "
			  ".json or .svg, or pass --format",
			  out);
		return CLI_USAGE;
	}
	if (!wo.title)
		wo.title = spool;
	job.fmt = fmt;
	/* a machine-wide flame graph starts with its processes (drawn when there are several) */
	if (fmt == SONDE_PROFILE_SVG && !roots_set)
		so.roots = SONDE_PROFILE_ROOTS_AUTO;
	char what[PATH_MAX + 32];
	snprintf(what, sizeof(what), "reading and symbolizing %s", spool);
	struct cli_progress *prog = cli_progress_begin("convert", what);
	cli_progress_tick(prog);
	job.p = sonde_profile__from_spool(spool, &so);
	cli_progress_end(prog);
	if (!job.p) {
		cli_spool_error("convert", spool, errno, 0);
		return CLI_FAILURE;
	}
	if (!sonde_profile__total(job.p, wo.metric))
		empty_warning(job.p, wo.metric, spool, out, cli_filter_any(filt));
	err = write_out(&job, out);
	sonde_profile__free((struct sonde_profile *)job.p);
	if (err) {
		cli_error("convert", "%s: %s", out, sonde_strerror(err));
		return CLI_FAILURE;
	}
	return CLI_OK;
}

static int run_convert(int argc, char **argv)
{
	struct cli_filter filt = {0};
	int code = convert(argc, argv, &filt);

	cli_filter_free(&filt);
	return code;
}

SONDE_COMMAND("convert", "convert a recording to perfetto, pprof, folded, speedscope or SVG",
	      run_convert)
