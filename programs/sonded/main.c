/* sonded: the Perfetto-compatible system tracing service daemon. It owns the event loop:
 * one poll() over the service's fd and a signalfd; everything else is the library. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/service.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonded [options]\n"
		"\n"
		"A system tracing service that speaks Perfetto's producer and consumer protocols.\n"
		"\n"
		"  -p, --producer-socket NAME  producer socket (default "
		"$PERFETTO_PRODUCER_SOCK_NAME,\n"
		"                              else /run/perfetto/traced-producer.sock if\n"
		"                              /run/perfetto/ exists, else "
		"/tmp/perfetto-producer)\n"
		"  -c, --consumer-socket NAME  consumer socket (default "
		"$PERFETTO_CONSUMER_SOCK_NAME,\n"
		"                              else /run/perfetto/traced-consumer.sock or\n"
		"                              /tmp/perfetto-consumer); '@name' is abstract\n"
		"  -b, --background            detach and run in the background\n"
		"  -f, --foreground            stay in the foreground (the default)\n"
		"  -l, --log-level LEVEL       debug, info, warn (default), error or off\n"
		"  -h, --help                  show this help\n"
		"\n"
		"If $TRACED_NOTIFY_FD is set, \"1\" is written to that fd once both sockets "
		"listen.\n"
		"SIGINT or SIGTERM ends every session and exits cleanly.\n");
}

static int notify_ready(void)
{
	const char *s = getenv("TRACED_NOTIFY_FD");
	char *end;
	long fd;

	if (!s || !*s)
		return 0;
	fd = strtol(s, &end, 10);
	if (*end || fd < 0 || fd > 65535)
		return -EINVAL;
	if (write((int)fd, "1", 1) != 1)
		return -errno;
	close((int)fd);
	return 0;
}

static int run(struct sonde_service *svc, int sfd)
{
	for (;;) {
		struct pollfd p[2] = {{sonde_service_fd(svc), POLLIN, 0}, {sfd, POLLIN, 0}};
		int rc = poll(p, 2, sonde_service_timeout_ms(svc));
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				sonde_info("signal %u: shutting down", si.ssi_signo);
				return 0;
			}
		}
		rc = sonde_service_process(svc);
		if (rc < 0)
			return rc;
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"producer-socket", required_argument, NULL, 'p'},
		{"consumer-socket", required_argument, NULL, 'c'},
		{"background", no_argument, NULL, 'b'},
		{"foreground", no_argument, NULL, 'f'},
		{"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct sonde_service_opts so = {.sz = sizeof(so)};
	bool background = false;
	enum sonde_log_level level;
	sigset_t mask;
	int c, sfd, rc;

	while ((c = getopt_long(argc, argv, "p:c:bfl:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			so.producer_socket = optarg;
			break;
		case 'c':
			so.consumer_socket = optarg;
			break;
		case 'b':
			background = true;
			break;
		case 'f':
			background = false;
			break;
		case 'l':
			if (sonde_log_parse_level(optarg, &level) < 0) {
				fprintf(stderr, "sonded: unknown log level '%s'\n", optarg);
				return 2;
			}
			sonde_log_set_level(level);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sonded: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	struct sonde_service *svc = sonde_service_new(&so);
	if (!svc || sfd < 0) {
		fprintf(stderr, "sonded: cannot start: %s\n", strerror(errno));
		return 1;
	}
	if (background && daemon(0, 0) < 0) {
		fprintf(stderr, "sonded: cannot detach: %s\n", strerror(errno));
		sonde_service_free(svc);
		return 1;
	}
	if (notify_ready() < 0)
		sonde_warn("cannot write to TRACED_NOTIFY_FD");
	sonde_info("listening on %s and %s", sonde_service_socket(svc, 0),
		   sonde_service_socket(svc, 1));
	rc = run(svc, sfd);
	sonde_service_free(svc);
	close(sfd);
	if (rc < 0) {
		fprintf(stderr, "sonded: %s\n", sonde_strerror(rc));
		return 1;
	}
	return 0;
}
