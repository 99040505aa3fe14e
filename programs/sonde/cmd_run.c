/* sonde run --trace -- CMD: run CMD as a producer of the tracing service through a socket
 * handed over by the connector, so that CMD itself needs no access to the service's
 * sockets (a sandbox, another user, another mount namespace). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/connector.h>
#include <sonde/error.h>

#include "cli.h"

#define CMD "run"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde run --trace [options] -- CMD [ARG...]\n"
		"\n"
		"Runs CMD as a producer of the tracing service (sonded) without giving it access\n"
		"to the service's sockets: a connected socket is handed to sonded through its\n"
		"connector, and the other end is passed to CMD, named by $SONDE_PRODUCER_FD (the\n"
		"sonde client library uses it by default).\n"
		"\n"
		"  --trace              connect CMD to the tracing service (required)\n"
		"  --connector PATH     the connector socket (default $SONDE_CONNECTOR_SOCK_NAME,\n"
		"                       else /run/perfetto/sonde-connector.sock or\n"
		"                       /tmp/sonde-connector)\n"
		"  --buffer MODE        the producer's shared memory: 'auto' (the default: the\n"
		"                       service creates it when tracing starts), 'service' (the\n"
		"                       service creates it now) or 'own' (this command creates a\n"
		"                       sealed memfd and hands it over)\n"
		"  --buffer-size SIZE   size of the 'service' or 'own' buffer, e.g. 256kb, 4mb\n"
		"  --page-size SIZE     its page size (4kb to 32kb; default 4kb)\n"
		"  --user USER          run CMD as USER (name or uid; root only); the connection\n"
		"                       then carries USER's identity\n"
		"  -h, --help           show this help\n"
		"\n"
		"The exit status is CMD's (128 + the signal if it was killed).\n");
}

struct opts {
	bool trace;
	const char *connector;
	enum sonde_connector_buffer buffer;
	uint32_t buffer_size, page_size;
	bool set_user;
	uid_t uid;
	gid_t gid;
	char **cmd;
};

static int parse_size(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10), mul = 1;

	if (end == s)
		return -1;
	if (!strcasecmp(end, "kb") || !strcasecmp(end, "k"))
		mul = 1024;
	else if (!strcasecmp(end, "mb") || !strcasecmp(end, "m"))
		mul = 1024 * 1024;
	else if (*end && strcasecmp(end, "b"))
		return -1;
	if (v == 0 || v * mul > UINT32_MAX)
		return -1;
	*out = (uint32_t)(v * mul);
	return 0;
}

static int parse_user(const char *s, struct opts *o)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	struct passwd *pw = *end || !*s ? getpwnam(s) : getpwuid((uid_t)v);

	if (pw) {
		o->uid = pw->pw_uid;
		o->gid = pw->pw_gid;
	} else if (!*end && *s) {
		o->uid = (uid_t)v; /* a uid with no passwd entry: its own group number */
		o->gid = (gid_t)v;
	} else {
		return -1;
	}
	o->set_user = true;
	return 0;
}

static int parse_buffer(const char *s, struct opts *o)
{
	if (!strcmp(s, "auto"))
		o->buffer = SONDE_CONNECTOR_BUFFER_NONE;
	else if (!strcmp(s, "service"))
		o->buffer = SONDE_CONNECTOR_BUFFER_FROM_SERVICE;
	else if (!strcmp(s, "own"))
		o->buffer = SONDE_CONNECTOR_BUFFER_PROVIDED;
	else
		return -1;
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	enum { O_TRACE = 256, O_CONNECTOR, O_BUFFER, O_BUFFER_SIZE, O_PAGE_SIZE, O_USER };
	static const struct option lo[] = {
		{"trace", no_argument, NULL, O_TRACE},
		{"connector", required_argument, NULL, O_CONNECTOR},
		{"buffer", required_argument, NULL, O_BUFFER},
		{"buffer-size", required_argument, NULL, O_BUFFER_SIZE},
		{"page-size", required_argument, NULL, O_PAGE_SIZE},
		{"user", required_argument, NULL, O_USER},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c, bad = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", lo, NULL)) != -1) {
		switch (c) {
		case O_TRACE:
			o->trace = true;
			break;
		case O_CONNECTOR:
			o->connector = optarg;
			break;
		case O_BUFFER:
			bad = parse_buffer(optarg, o);
			break;
		case O_BUFFER_SIZE:
			bad = parse_size(optarg, &o->buffer_size);
			break;
		case O_PAGE_SIZE:
			bad = parse_size(optarg, &o->page_size);
			break;
		case O_USER:
			if (parse_user(optarg, o)) {
				cli_error(CMD, "--user: no such user '%s'", optarg);
				return -1;
			}
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			cli_bad_option(CMD, c, argv);
			return -1;
		}
		if (bad) {
			cli_error(CMD, "invalid value '%s' (see 'sonde run --help')", optarg);
			return -1;
		}
	}
	if (!o->trace) {
		cli_error(CMD, "--trace is required (it is what run does)");
		return -1;
	}
	if (optind >= argc) {
		cli_error(CMD, "no command to run");
		return -1;
	}
	o->cmd = argv + optind;
	return 0;
}

/* A sealed memfd of the requested geometry, as the connector demands. */
static int own_buffer(const struct opts *o)
{
	size_t size = o->buffer_size ? o->buffer_size : 256 * 1024;
	int fd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Hands sock to the service. Returns 0 or an exit code. */
static int hand_over(const struct opts *o, int sock)
{
	struct sonde_connector_opts co = {.sz = sizeof(co), .socket = o->connector};
	struct sonde_connect_opts cc = {.sz = sizeof(cc),
					.buffer = o->buffer,
					.buffer_fd = -1,
					.page_size = o->page_size,
					.buffer_size = o->buffer_size,
					.set_uid = o->set_user,
					.uid = o->uid,
					.set_gid = o->set_user,
					.gid = o->gid};
	struct sonde_connector *c = sonde_connector__new(&co);
	int rc, got = -1;

	if (!c) {
		cli_error(CMD, "cannot reach the connector at %s: %s",
			  sonde_connector__socket_path(&co), strerror(errno));
		return CLI_FAILURE;
	}
	if (o->buffer == SONDE_CONNECTOR_BUFFER_PROVIDED && (cc.buffer_fd = own_buffer(o)) < 0) {
		cli_error(CMD, "cannot create the buffer: %s", sonde_strerror(cc.buffer_fd));
		sonde_connector__free(c);
		return CLI_FAILURE;
	}
	rc = sonde_connector__connect_producer(c, sock, &cc, &got);
	if (rc < 0)
		cli_error(CMD, "the service refused the producer socket: %s (%s)",
			  sonde_connector__last_error(c), sonde_strerror(rc));
	/* the service holds its own copies now; it sends the buffer to CMD with setup_tracing */
	if (got >= 0)
		close(got);
	if (cc.buffer_fd >= 0)
		close(cc.buffer_fd);
	sonde_connector__free(c);
	return rc < 0 ? CLI_FAILURE : 0;
}

static void exec_child(const struct opts *o, int sock)
{
	char num[16];

	if (o->set_user && (setgroups(0, NULL) < 0 || setgid(o->gid) < 0 || setuid(o->uid) < 0)) {
		fprintf(stderr, "sonde run: cannot become uid %u: %s\n", (unsigned)o->uid,
			strerror(errno));
		_exit(126);
	}
	/* the only fd CMD inherits from us on purpose */
	if (fcntl(sock, F_SETFD, 0) < 0)
		_exit(126);
	snprintf(num, sizeof(num), "%d", sock);
	setenv("SONDE_PRODUCER_FD", num, 1);
	execvp(o->cmd[0], o->cmd);
	fprintf(stderr, "sonde run: cannot run %s: %s\n", o->cmd[0], strerror(errno));
	_exit(127);
}

static pid_t child;

static void forward(int sig)
{
	if (child > 0)
		kill(child, sig);
}

static int wait_child(void)
{
	int st;

	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return CLI_FAILURE;
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

static int cmd_run(int argc, char **argv)
{
	struct opts o = {0};
	int sv[2], rc;

	rc = parse(argc, argv, &o);
	if (rc)
		return rc > 0 ? CLI_OK : CLI_USAGE;
	if (o.set_user && geteuid() != 0) {
		cli_error(CMD, "--user needs root");
		return CLI_USAGE;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		cli_error(CMD, "socketpair: %s", strerror(errno));
		return CLI_FAILURE;
	}
	rc = hand_over(&o, sv[0]);
	close(sv[0]);
	if (rc) {
		close(sv[1]);
		return rc;
	}
	signal(SIGINT, forward);
	signal(SIGTERM, forward);
	child = fork();
	if (child < 0) {
		cli_error(CMD, "fork: %s", strerror(errno));
		close(sv[1]);
		return CLI_FAILURE;
	}
	if (child == 0)
		exec_child(&o, sv[1]);
	close(sv[1]);
	return wait_child();
}

SONDE_COMMAND("run", "run a command as a tracing producer through the service's connector", cmd_run)
