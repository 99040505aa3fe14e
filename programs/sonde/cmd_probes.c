/* sonde probes: the system data sources (src/probes/) as one producer of a tracing
 * service, sonded or Perfetto's traced (docs/probes.md). This file owns the loop and the
 * signals only. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "cli.h"
#include "probes/probes.h"

enum { MAX_FDS = 1024 }; /* the connection, recorders, and ftrace's per-CPU fds */

/* User-visible lines stay whole, so they can be found with grep. */
/* clang-format off */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde probes [-s SOCKET] [--targets own|any|none] [-l LEVEL]\n"
		"\n"
		"Serves the system data sources (linux.perf, linux.ftrace, linux.process_stats, linux.sys_stats)\n"
		"to a tracing service: sonded, or Perfetto's traced.\n"
		"Reconnects when the service restarts.\n"
		"\n"
		"  -s, --socket NAME     the service's producer socket (default: $PERFETTO_PRODUCER_SOCK_NAME,\n"
		"                        else /run/perfetto/traced-producer.sock if /run/perfetto/ exists,\n"
		"                        else /tmp/perfetto-producer); '@name' is abstract\n"
		"      --targets own|any|none  whom to profile for, as the service does not say who the consumer\n"
		"                        is: own (default): what the probes' own user may profile (its uid's\n"
		"                        processes; everything when root); any: every process, as traced_perf;\n"
		"                        none: nobody in particular (no process, no kernel frames, no ftrace)\n"
		"      --trust-parent    believe the consumer credentials that sonded sends over the socket it\n"
		"                        made for this process (-s fd:N; how sonded starts its probes); from\n"
		"                        any other service act for nobody in particular\n"
		"  -l, --log-level LEVEL debug, info, warn (default), error, off\n"
		"  -h, --help            this text\n");
}
/* clang-format on */

static int loop(struct probes *p, int sfd)
{
	struct pollfd fds[MAX_FDS];

	for (;;) {
		fds[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
		size_t n = 1 + sonde__probes_pollfds(p, fds + 1, MAX_FDS - 1);
		if (poll(fds, n, sonde__probes_timeout_ms(p)) < 0 && errno != EINTR)
			return -errno;
		if (fds[0].revents & POLLIN)
			return 0;
		sonde__probes_process(p, fds + 1, n - 1);
		if (sonde__probes_done(p))
			return 0;
	}
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"targets", required_argument, NULL, 'T'},
		{"trust-parent", no_argument, NULL, 'P'},
		{"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct probes_opts o = {.sz = sizeof(o)};
	enum sonde_log_level level;
	sigset_t mask;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:l:h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.socket = optarg;
			break;
		case 'T':
			if (!strcmp(optarg, "own")) {
				o.targets = PROBES_TARGETS_OWN;
			} else if (!strcmp(optarg, "any")) {
				o.targets = PROBES_TARGETS_ANY;
			} else if (!strcmp(optarg, "none")) {
				o.targets = PROBES_TARGETS_NONE;
			} else {
				cli_error("probes", "--targets takes own, any or none, not '%s'",
					  optarg);
				return CLI_USAGE;
			}
			break;
		case 'P':
			o.trust_parent = true;
			break;
		case 'l':
			if (sonde_log__parse_level(optarg, &level) < 0) {
				cli_error("probes", "unknown log level '%s'", optarg);
				return CLI_USAGE;
			}
			sonde_log__set_level(level);
			break;
		case 'h':
			usage(stdout);
			return CLI_OK;
		default:
			return cli_bad_option("probes", c, argv);
		}
	}
	if (optind < argc) {
		cli_error("probes", "unexpected argument '%s'", argv[optind]);
		return CLI_USAGE;
	}
	/* started by sonded: end with it, even if it could not say so */
	if (o.trust_parent)
		prctl(PR_SET_PDEATHSIG, SIGTERM);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	/* sonded names itself: it may have died before PR_SET_PDEATHSIG took effect */
	const char *parent = getenv("SONDE_PROBES_PARENT");
	if (o.trust_parent && parent && atol(parent) != (long)getppid())
		return CLI_FAILURE;
	struct probes *p = sfd >= 0 ? sonde__probes_new(&o) : NULL;
	if (!p) {
		cli_error("probes", "cannot start: %s", strerror(errno));
		return CLI_FAILURE;
	}
	int rc = loop(p, sfd);
	sonde__probes_free(p);
	close(sfd);
	if (rc < 0) {
		cli_error("probes", "%s", sonde_strerror(rc));
		return CLI_FAILURE;
	}
	return CLI_OK;
}

SONDE_COMMAND("probes", "serve the system data sources (linux.perf, linux.ftrace, ...) to a tracing service", run)
