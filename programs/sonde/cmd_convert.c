/* sonde convert: a recording into a Perfetto trace, pprof, folded stacks, speedscope or an
 * SVG flame graph. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/symbolize.h>

#include "cli.h"
#include "output.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde convert SPOOL -o OUT [--format FORMAT] [--no-symbolize] [--title T]\n"
		"                     [--buildid-cache DIR]\n\n"
		"Converts a spool written by 'sonde record' into a profile other tools read.\n"
		"The format follows OUT's extension unless --format says otherwise:\n"
		"  pprof       .pb.gz, .pprof     gzip'd profile.proto (go tool pprof, pprof)\n"
		"  folded      .folded, .txt      'outer;...;inner COUNT' lines (flamegraph.pl)\n"
		"  speedscope  .json              speedscope's format, one profile per thread\n"
		"  svg         .svg               an interactive flame graph (click to zoom, "
		"Search)\n"
		"  perfetto    .pftrace, .perfetto-trace  a Perfetto trace (ui.perfetto.dev)\n\n"
		"  -o, --output OUT   the file to write ('-' for standard output); an existing "
		"file\n"
		"                     is kept as OUT.old, a FIFO or device is written in place\n"
		"  -f, --format F     one of the formats above\n"
		"  --no-symbolize     keep raw addresses and build ids (symbolize elsewhere)\n"
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
	err = write_fd(j, o.fd);
	int cerr = cli_output_close(&o, err == 0);
	return err ? err : cerr;
}

enum { OPT_NO_SYMBOLIZE = 256, OPT_TITLE, OPT_BUILDID_CACHE };

static int run_convert(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"no-symbolize", no_argument, NULL, OPT_NO_SYMBOLIZE},
		{"title", required_argument, NULL, OPT_TITLE},
		{"buildid-cache", required_argument, NULL, OPT_BUILDID_CACHE},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct sonde_symbolizer_opts symo = {.sz = sizeof(symo)};
	struct sonde_profile_spool_opts so = {.sz = sizeof(so), .sym = &symo};
	struct sonde_profile_write_opts wo = {.sz = sizeof(wo)};
	const char *out = NULL, *format = NULL;
	enum sonde_profile_format fmt;
	int c;

	while ((c = getopt_long(argc, argv, "o:f:h", longopts, NULL)) != -1) {
		switch (c) {
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
		case OPT_BUILDID_CACHE:
			symo.buildid_cache_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return CLI_OK;
		default:
			usage(stderr);
			return CLI_USAGE;
		}
	}
	if (optind + 1 != argc || !out) {
		cli_error("convert", optind >= argc ? "no spool file given (see --help)"
				     : optind + 1 < argc
					     ? "one spool file at a time (see --help)"
					     : "no output given: use -o OUT (see --help)");
		return CLI_USAGE;
	}
	const char *spool = argv[optind];
	struct conv_job job = {.spool = spool, .so = &so, .wo = &wo};
	int err;
	if (format ? is_perfetto(format, 0) : is_perfetto(out, 1)) {
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
	job.p = sonde_profile__from_spool(spool, &so);
	if (!job.p) {
		cli_error("convert", "%s: %s", spool, sonde_strerror(errno));
		cli_hint_unfinished("convert", spool);
		return CLI_FAILURE;
	}
	err = write_out(&job, out);
	sonde_profile__free((struct sonde_profile *)job.p);
	if (err) {
		cli_error("convert", "%s: %s", out, sonde_strerror(err));
		return CLI_FAILURE;
	}
	return CLI_OK;
}

SONDE_COMMAND("convert", "convert a recording to perfetto, pprof, folded, speedscope or SVG",
	      run_convert)
