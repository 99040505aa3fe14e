/* sonded: the Perfetto-compatible system tracing service daemon. It owns the event loop:
 * the service's wait, with its signalfd (SIGINT, SIGTERM and, for its `sonde probes`
 * child, SIGCHLD) watched alongside; everything else is the library. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/relay.h>
#include <sonde/service.h>

#include "supervise.h"
/* One line for an option getopt refused (as the sonde commands say it). */
static void bad_option(int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	char shrt[3] = {'-', (char)optopt, 0};

	if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 128)
		arg = shrt;
	fprintf(stderr, "sonded: %s '%.*s' (see 'sonded --help')\n",
		c == ':' ? "missing value for option" : "unknown option", (int)strcspn(arg, "="),
		arg);
}

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
		"                              /tmp/perfetto-consumer); '@name' is abstract,\n"
		"                              HOST:PORT, [V6]:PORT TCP, vsock://CID:PORT vsock;\n"
		"                              a producer socket may be a comma-separated list,\n"
		"                              each listened on\n"
		"      --relay-socket ADDR     a producer socket for relays (traced_relay,\n"
		"                              sonded --relay): HOST:PORT, [V6]:PORT or\n"
		"                              vsock://CID:PORT, or a comma-separated list; its\n"
		"                              peers may vouch for the producers they forward\n"
		"      --machine-name NAME     this machine's name for machine_name_filter (also\n"
		"                              what a relay tells the host)\n"
		"                              (default $PERFETTO_MACHINE_NAME, else uname -s)\n"
		"  -x, --connector-socket NAME connector socket, where a supervisor hands over\n"
		"                              connected sockets (default\n"
		"                              $SONDE_CONNECTOR_SOCK_NAME, else\n"
		"                              /run/perfetto/sonde-connector.sock or\n"
		"                              /tmp/sonde-connector); 'none' disables it\n"
		"      --socket-mode WHICH:MODE   octal mode of a socket; WHICH is producer,\n"
		"                              consumer or connector (defaults 0666, 0666, 0600)\n"
		"      --socket-group WHICH:GROUP group (name or number) of a socket\n"
		"      --set-socket-permissions PGRP:PMODE:CGRP:CMODE  as traced's option\n"
		"      --lockdown              refuse producers whose uid is not sonded's\n"
		"      --max-sessions N        tracing sessions in all (15)\n"
		"      --max-sessions-per-uid N  sessions of one uid (5)\n"
		"      --max-connections N     client connections in all (1000)\n"
		"      --max-connections-per-uid N  connections of one uid (256)\n"
		"      --max-buffers N         buffers in one session (128, the maximum)\n"
		"      --max-session-buffer-kb N  buffer memory of one session (1048576)\n"
		"      --max-buffer-kb-per-uid N  buffer memory of all sessions of one uid,\n"
		"                              detached ones included (a quarter of MemTotal)\n"
		"      --max-smb-kb N          shared memory buffer of a producer (32768,\n"
		"                              the maximum)\n"
		"      --max-pending-kb N      bytes queued unsent to one client (16384)\n"
		"      --remote-handshake-ms N a TCP or vsock peer that has not bound and\n"
		"                              initialized its connection by then is closed\n"
		"                              (10000)\n"
		"      --stall-timeout-ms N    a client that reads nothing of its socket, or a\n"
		"                              write_into_file output that accepts nothing, for\n"
		"                              this long is closed or ends its session (10000)\n"
		"      --relay HOST:PORT       run as this machine's relay to the tracing service\n"
		"                              at HOST:PORT ([V6]:PORT, vsock://CID:PORT): local\n"
		"                              producers on the producer socket are forwarded\n"
		"                              there; no consumer or connector socket\n"
		"      --no-probes             do not start `sonde probes` (the linux.perf data\n"
		"                              source); --no-perf is the older spelling\n"
		"  -b, --background            detach and run in the background\n"
		"  -f, --foreground            stay in the foreground (the default)\n"
		"  -l, --log-level LEVEL       debug, info, warn (default), error or off\n"
		"  -V, --version               print the version and exit\n"
		"  -h, --help                  show this help\n"
		"\n"
		"If $TRACED_NOTIFY_FD is set, \"1\" is written to that fd once the sockets "
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

enum {
	OPT_SOCKET_MODE = 256,
	OPT_SOCKET_GROUP,
	OPT_SET_PERMS,
	OPT_LOCKDOWN,
	OPT_MAX_SESSIONS,
	OPT_MAX_SESSIONS_UID,
	OPT_MAX_CONNS,
	OPT_MAX_CONNS_UID,
	OPT_MAX_BUFFERS,
	OPT_MAX_SESSION_KB,
	OPT_MAX_UID_KB,
	OPT_MAX_SMB_KB,
	OPT_MAX_PENDING_KB,
	OPT_HANDSHAKE_MS,
	OPT_STALL_MS,
	OPT_RELAY_SOCKET = 512,
	OPT_MACHINE_NAME,
	OPT_RELAY,
};

static int which_socket(const char *s, size_t n)
{
	static const char *const names[] = {"producer", "consumer", "connector"};

	for (int i = 0; i < 3; i++)
		if (strlen(names[i]) == n && !strncmp(s, names[i], n))
			return i;
	return -1;
}

static int set_mode(struct sonde_service_opts *o, int which, const char *v)
{
	char *end;
	unsigned long m = strtoul(v, &end, 8);

	if (which < 0 || !*v || *end || m == 0 || m > 0777)
		return -EINVAL;
	o->socket_mode[which] = (unsigned)m;
	return 0;
}

static int set_group(struct sonde_service_opts *o, int which, const char *v)
{
	char *end;
	unsigned long g = strtoul(v, &end, 10);

	if (which < 0 || !*v)
		return -EINVAL;
	if (*end) {
		struct group *gr = getgrnam(v);
		if (!gr)
			return -ENOENT;
		g = gr->gr_gid;
	}
	o->socket_gid[which] = (unsigned)g;
	o->socket_gid_set[which] = true;
	return 0;
}

/* WHICH:VALUE */
static int socket_opt(struct sonde_service_opts *o, const char *arg, bool mode)
{
	const char *colon = strchr(arg, ':');

	if (!colon)
		return -EINVAL;
	int which = which_socket(arg, (size_t)(colon - arg));
	return mode ? set_mode(o, which, colon + 1) : set_group(o, which, colon + 1);
}

/* traced's --set-socket-permissions prod_grp:prod_mode:cons_grp:cons_mode */
static int set_perms(struct sonde_service_opts *o, char *arg)
{
	char *save = NULL, *f[4];

	for (int i = 0; i < 4; i++)
		if (!(f[i] = strtok_r(i ? NULL : arg, ":", &save)))
			return -EINVAL;
	if (strtok_r(NULL, ":", &save))
		return -EINVAL;
	if (set_group(o, 0, f[0]) < 0 || set_mode(o, 0, f[1]) < 0 || set_group(o, 1, f[2]) < 0 ||
	    set_mode(o, 1, f[3]) < 0)
		return -EINVAL;
	return 0;
}

static int number(const char *v, unsigned long long max, unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(v, &end, 10);
	if (!*v || *end || errno || *out == 0 || *out > max)
		return -EINVAL;
	return 0;
}

static int limit_opt(struct sonde_service_opts *o, int c, const char *v)
{
	unsigned long long n;
	bool kb64 = c == OPT_MAX_SESSION_KB || c == OPT_MAX_UID_KB;

	if (number(v, kb64 ? (1ull << 40) : (1ull << 31), &n) < 0)
		return -EINVAL;
	switch (c) {
	case OPT_MAX_SESSIONS:
		o->max_sessions = (unsigned)n;
		break;
	case OPT_MAX_SESSIONS_UID:
		o->max_sessions_per_uid = (unsigned)n;
		break;
	case OPT_MAX_CONNS:
		o->max_connections = (unsigned)n;
		break;
	case OPT_MAX_CONNS_UID:
		o->max_connections_per_uid = (unsigned)n;
		break;
	case OPT_MAX_BUFFERS:
		o->max_buffers_per_session = (unsigned)n;
		break;
	case OPT_MAX_SESSION_KB:
		o->max_session_buffer_kb = n;
		break;
	case OPT_MAX_UID_KB:
		o->max_uid_buffer_kb = n;
		break;
	case OPT_MAX_SMB_KB:
		o->max_smb_kb = (unsigned)n;
		break;
	case OPT_MAX_PENDING_KB:
		o->max_pending_kb = (unsigned)n;
		break;
	case OPT_HANDSHAKE_MS:
		o->remote_handshake_ms = (unsigned)n;
		break;
	case OPT_STALL_MS:
		o->stall_timeout_ms = (unsigned)n;
		break;
	}
	return 0;
}

static int security_opt(struct sonde_service_opts *o, int c, char *arg)
{
	switch (c) {
	case OPT_SOCKET_MODE:
		return socket_opt(o, arg, true);
	case OPT_SOCKET_GROUP:
		return socket_opt(o, arg, false);
	case OPT_SET_PERMS:
		return set_perms(o, arg);
	case OPT_LOCKDOWN:
		o->lockdown = true;
		return 0;
	default:
		return limit_opt(o, c, arg);
	}
}

/* The loop of a service (svc) or of a relay (relay, svc NULL), with the probes it
 * supervises, until a signal other than SIGCHLD. The signalfd is waited for in the
 * service's own epoll_wait, so that a wakeup costs one system call, not a poll() and
 * then the service's look at what is ready. */
static int run(struct sonde_service *svc, struct sonde_relay *relay, int sfd,
	       struct probes_child *pc)
{
	int rc = svc ? sonde_service__watch_fd(svc, sfd) : sonde_relay__watch_fd(relay, sfd);

	while (rc >= 0) {
		int ms = probes_child_timeout_ms(pc);
		rc = svc ? sonde_service__poll(svc, ms) : sonde_relay__poll(relay, ms);
		if (rc > 0) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == sizeof(si) && si.ssi_signo != SIGCHLD) {
				sonde_info("signal %u: shutting down", si.ssi_signo);
				return 0;
			}
			/* the child's pid stays its own until it is reaped, which ends the trust
			 * of its connections before the service's next turn */
			probes_child_reap(pc);
		}
		probes_child_tick(pc);
	}
	return rc;
}

/* sonded --relay: the producer socket's options apply to the relay's local socket. */
static int relay_main(const struct sonde_service_opts *so, const char *host, int sfd,
		      bool background, bool probes, const char *log_level)
{
	struct sonde_relay_opts ro = {
		.sz = sizeof(ro),
		.host = host,
		.producer_socket = so->producer_socket,
		.socket_mode = so->socket_mode[SONDE_SOCKET_PRODUCER],
		.socket_gid = so->socket_gid[SONDE_SOCKET_PRODUCER],
		.socket_gid_set = so->socket_gid_set[SONDE_SOCKET_PRODUCER],
		.lockdown = so->lockdown,
		.max_connections = so->max_connections,
		.max_smb_kb = so->max_smb_kb,
		.machine_name = so->machine_name,
	};
	struct probes_child pc = {0};
	struct sonde_relay *r;
	int rc;

	if (sfd < 0 || !(r = sonde_relay__new(&ro))) {
		if (sfd < 0 || (errno != EADDRINUSE && errno != EEXIST))
			fprintf(stderr, "sonded: cannot start the relay: %s\n", strerror(errno));
		return 1;
	}
	if (background && daemon(0, 0) < 0) {
		fprintf(stderr, "sonded: cannot detach: %s\n", strerror(errno));
		sonde_relay__free(r);
		return 1;
	}
	if (notify_ready() < 0)
		sonde_warn("cannot write to TRACED_NOTIFY_FD");
	if (probes && (rc = probes_child_start_at(&pc, sonde_relay__socket(r), log_level)) < 0)
		sonde_warn("cannot start sonde probes (%s): %s; no linux.perf data source",
			   pc.exe[0] ? pc.exe : "sonde, next to sonded", sonde_strerror(rc));
	sonde_info("relay listening on %s for %s", sonde_relay__socket(r), host);
	rc = run(NULL, r, sfd, &pc);
	probes_child_stop(&pc);
	sonde_relay__free(r);
	close(sfd);
	if (rc < 0) {
		fprintf(stderr, "sonded: %s\n", sonde_strerror(rc));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"producer-socket", required_argument, NULL, 'p'},
		{"consumer-socket", required_argument, NULL, 'c'},
		{"connector-socket", required_argument, NULL, 'x'},
		{"relay-socket", required_argument, NULL, OPT_RELAY_SOCKET},
		{"machine-name", required_argument, NULL, OPT_MACHINE_NAME},
		{"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
		{"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
		{"set-socket-permissions", required_argument, NULL, OPT_SET_PERMS},
		{"lockdown", no_argument, NULL, OPT_LOCKDOWN},
		{"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
		{"max-sessions-per-uid", required_argument, NULL, OPT_MAX_SESSIONS_UID},
		{"max-connections", required_argument, NULL, OPT_MAX_CONNS},
		{"max-connections-per-uid", required_argument, NULL, OPT_MAX_CONNS_UID},
		{"max-buffers", required_argument, NULL, OPT_MAX_BUFFERS},
		{"max-session-buffer-kb", required_argument, NULL, OPT_MAX_SESSION_KB},
		{"max-buffer-kb-per-uid", required_argument, NULL, OPT_MAX_UID_KB},
		{"max-smb-kb", required_argument, NULL, OPT_MAX_SMB_KB},
		{"max-pending-kb", required_argument, NULL, OPT_MAX_PENDING_KB},
		{"remote-handshake-ms", required_argument, NULL, OPT_HANDSHAKE_MS},
		{"stall-timeout-ms", required_argument, NULL, OPT_STALL_MS},
		{"relay", required_argument, NULL, OPT_RELAY},
		{"no-probes", no_argument, NULL, 'P'},
		{"no-perf", no_argument, NULL, 'P'},
		{"background", no_argument, NULL, 'b'},
		{"foreground", no_argument, NULL, 'f'},
		{"log-level", required_argument, NULL, 'l'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct sonde_service_opts so = {.sz = sizeof(so)};
	bool background = false, probes = true;
	const char *log_level = NULL, *relay = NULL;
	struct probes_child pc = {0};
	enum sonde_log_level level;
	sigset_t mask;
	int c, sfd, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:c:x:bfl:Vh", opts, NULL)) != -1) {
		if (c == OPT_RELAY_SOCKET || c == OPT_MACHINE_NAME) {
			*(c == OPT_RELAY_SOCKET ? &so.relay_socket : &so.machine_name) = optarg;
			continue;
		}
		if (c == OPT_RELAY) {
			relay = optarg;
			continue;
		}
		if (c >= OPT_SOCKET_MODE) {
			if (security_opt(&so, c, optarg) < 0) {
				fprintf(stderr, "sonded: invalid option value '%s'\n", optarg);
				return 2;
			}
			continue;
		}
		switch (c) {
		case 'P':
			probes = false;
			break;
		case 'x':
			so.connector_socket = optarg;
			break;
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
			if (sonde_log__parse_level(optarg, &level) < 0) {
				fprintf(stderr, "sonded: unknown log level '%s'\n", optarg);
				return 2;
			}
			sonde_log__set_level(level);
			log_level = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("sonded %s\n", SONDE_VERSION);
			return 0;
		default:
			bad_option(c, argv);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sonded: unexpected argument '%s' (see 'sonded --help')\n",
			argv[optind]);
		return 2;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (relay)
		return relay_main(&so, relay, sfd, background, probes, log_level);
	struct sonde_service *svc = sonde_service__new(&so);
	if (!svc || sfd < 0) {
		/* a socket taken by a running service (or a file in the way) was reported by
		 * the service in one line naming the path; anything else is said here */
		if (svc || sfd < 0 || (errno != EADDRINUSE && errno != EEXIST))
			fprintf(stderr, "sonded: cannot start: %s\n", strerror(errno));
		return 1;
	}
	if (background && daemon(0, 0) < 0) {
		fprintf(stderr, "sonded: cannot detach: %s\n", strerror(errno));
		sonde_service__free(svc);
		return 1;
	}
	if (notify_ready() < 0)
		sonde_warn("cannot write to TRACED_NOTIFY_FD");
	/* after daemon() (its child is the one that supervises) and after the notify fd is
	 * closed (the probes must not inherit it) */
	if (probes && (rc = probes_child_start(&pc, svc, log_level)) < 0)
		sonde_warn("cannot start sonde probes (%s): %s; no linux.perf data source",
			   pc.exe[0] ? pc.exe : "sonde, next to sonded", sonde_strerror(rc));
	sonde_info("listening on %s and %s, connector %s%s", sonde_service__socket(svc, 0),
		   sonde_service__socket(svc, 1),
		   sonde_service__socket(svc, 2) ? sonde_service__socket(svc, 2) : "disabled",
		   so.lockdown ? " (lockdown)" : "");
	rc = run(svc, NULL, sfd, &pc);
	probes_child_stop(&pc); /* its connection goes first, while the service is whole */
	sonde_service__free(svc);
	close(sfd);
	if (rc < 0) {
		fprintf(stderr, "sonded: %s\n", sonde_strerror(rc));
		return 1;
	}
	return 0;
}
