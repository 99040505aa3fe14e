/* linux.ftrace ingest of a context-switch-heavy workload, side by side with an independent
 * recorder of the same run.
 *
 * The workload: two processes bouncing a byte over a pair of pipes, each hop a wakeup and
 * a switch on each side. While it runs, this program records sched_switch and
 * sched_waking through a linux.ftrace session (default buffer, default drain period,
 * poll() on the per-CPU fds, packets encoded and dropped), and the peer records the same
 * events into its own buffer: trace-cmd record (top-level buffer) where it can run, else
 * perf record -a (perf_event rings). Reported: events recorded, the kernel's count of
 * events lost (ring overruns), and each recorder's CPU time per million events (this
 * process's rusage; the peer's from wait4, its reaped children included).
 *
 * usage: bench-ftrace [SECONDS] [PEER] [compact]
 *   PEER: trace-cmd, perf, none (default: the first that works); compact: compact_sched
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/pb.h"
#include "probes/ftrace.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_of(const struct rusage *r)
{
	return r->ru_utime.tv_sec + r->ru_utime.tv_usec / 1e6 + r->ru_stime.tv_sec +
	       r->ru_stime.tv_usec / 1e6;
}

/* Ping-pong until killed; the parent counts round trips. Started before the session, so
 * that the workload holds none of its fds. */
static pid_t start_workload(int *trips_fd, int *go_fd)
{
	int a[2], b[2], c[2], g[2];

	if (pipe(a) || pipe(b) || pipe(c) || pipe(g))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char x = 0;
		close(c[0]), close(g[1]);
		if (fork() == 0) {
			/* The echo side: it ends when the pinger's write end closes. */
			close(a[1]), close(b[0]), close(c[1]);
			for (;;)
				if (read(a[0], &x, 1) != 1 || write(b[1], &x, 1) != 1)
					_exit(0);
		}
		close(a[0]), close(b[1]);
		if (read(g[0], &x, 1) != 1) /* the session is ready */
			_exit(0);
		unsigned long trips = 0;
		for (;;) {
			if (write(a[1], &x, 1) != 1 || read(b[0], &x, 1) != 1)
				break;
			if (++trips % 10000 == 0 && write(c[1], &trips, sizeof(trips)) < 0)
				break;
		}
		_exit(0);
	}
	close(a[0]), close(a[1]), close(b[0]), close(b[1]), close(c[1]), close(g[0]);
	*trips_fd = c[0];
	*go_fd = g[1];
	return pid;
}

struct sink {
	uint64_t bytes, packets;
};

static int drop(void *ctx, const void *p, size_t n)
{
	struct sink *s = ctx;
	s->bytes += n;
	s->packets++;
	return 0;
}

/* Sums the per-CPU overrun of the FtraceStats{END} packet: the kernel's lost events. */
struct stats_ctx {
	struct sink sink;
	uint64_t overrun;
	int phase;
};

static int keep_stats(void *ctx, const void *p, size_t n)
{
	struct stats_ctx *s = ctx;
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g, h;

	drop(&s->sink, p, n);
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 34 || f.wire != PB_LEN)
			continue;
		struct pb_reader st = pb_sub(&f);
		uint64_t over = 0;
		int phase = 0;
		while (sonde__pb_next(&st, &g) > 0) {
			if (g.num == 1)
				phase = (int)g.u;
			if (g.num != 2 || g.wire != PB_LEN)
				continue;
			struct pb_reader cs = pb_sub(&g);
			while (sonde__pb_next(&cs, &h) > 0)
				if (h.num == 3)
					over += h.u;
		}
		if (phase == 2)
			s->overrun = over, s->phase = 2;
	}
	return 0;
}

static int run_quiet(const char *cmd)
{
	char full[1024];
	snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
	return system(full);
}

static pid_t start_peer(const char *peer, const char *out)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", 1);
		dup2(fd, 1), dup2(fd, 2);
		if (!strcmp(peer, "trace-cmd"))
			execlp("trace-cmd", "trace-cmd", "record", "-q", "-e", "sched:sched_switch",
			       "-e", "sched:sched_waking", "-o", out, NULL);
		else
			execlp("perf", "perf", "record", "-q", "-a", "-e", "sched:sched_switch",
			       "-e", "sched:sched_waking", "-o", out, NULL);
		_exit(127);
	}
	return pid;
}

/* Events in the peer's file, and what it says it lost. */
static void peer_count(const char *peer, const char *out, long *events, long *lost)
{
	char cmd[1024], line[4096];

	*events = *lost = 0;
	if (!strcmp(peer, "trace-cmd"))
		snprintf(cmd, sizeof(cmd), "trace-cmd report -i %s 2>/dev/null", out);
	else
		snprintf(cmd, sizeof(cmd), "perf script -i %s 2>/dev/null", out);
	FILE *f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "sched_switch") || strstr(line, "sched_waking"))
			(*events)++;
	if (f)
		pclose(f);
	if (!strcmp(peer, "perf")) {
		snprintf(cmd, sizeof(cmd), "perf report -i %s --stats 2>/dev/null", out);
		f = popen(cmd, "r");
		while (f && fgets(line, sizeof(line), f)) {
			char *p = strstr(line, "LOST_SAMPLES events:");
			if (!p)
				p = strstr(line, "LOST events:");
			if (p)
				*lost += atol(strchr(p, ':') + 1);
		}
		if (f)
			pclose(f);
	}
}

static const char *pick_peer(const char *want)
{
	if (want)
		return want;
	/* trace-cmd 3.1 writes the function tracer's files first; where the kernel refuses
	 * that (EPERM even to root), it cannot record at all. */
	if (run_quiet("trace-cmd record -q -e sched:sched_switch -o /tmp/bench-ftrace-probe.dat "
		      "/bin/true") == 0)
		return "trace-cmd";
	if (run_quiet("perf record -q -e sched:sched_switch -o /tmp/bench-ftrace-probe.data "
		      "/bin/true") == 0)
		return "perf";
	return "none";
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	const char *peer = pick_peer(argc > 2 && strcmp(argv[2], "auto") ? argv[2] : NULL);
	static char events[2][FTRACE_EVENT_NAME_MAX] = {"sched/sched_switch", "sched/sched_waking"};
	struct ftrace_config cfg = {.events = events,
				    .nevents = 2,
				    .compact_sched = argc > 3 && !strcmp(argv[3], "compact")};
	struct ftrace_opts o = {.sz = sizeof(o), .instance = "sonde-bench", .allow_mount = true};
	struct stats_ctx sc = {0};
	char err[256] = "", out[] = "/tmp/bench-ftrace-peer.data";
	struct rusage r0, r1, pr;
	int trips_fd = -1, go_fd = -1, status;

	o.errbuf = err, o.errlen = sizeof(err);
	signal(SIGPIPE, SIG_IGN);
	pid_t peer_pid = strcmp(peer, "none") ? start_peer(peer, out) : -1;
	if (peer_pid > 0)
		sleep(2); /* the peer sets up its buffers before the workload starts */
	pid_t work = start_workload(&trips_fd, &go_fd);
	if (work < 0) {
		perror("bench-ftrace: workload");
		if (peer_pid > 0)
			kill(peer_pid, SIGINT);
		return 1;
	}
	getrusage(RUSAGE_SELF, &r0);
	struct ftrace_session *s = sonde__ftrace_session_new(&cfg, &o, keep_stats, &sc);
	if (!s) {
		fprintf(stderr, "bench-ftrace: %s\n", err[0] ? err : strerror(errno));
		kill(work, SIGKILL);
		if (peer_pid > 0)
			kill(peer_pid, SIGINT);
		return 1;
	}
	int fds[1024];
	size_t n = sonde__ftrace_session_fds(s, fds, NULL, 1024);
	struct pollfd pf[1025];
	for (size_t i = 0; i < n; i++)
		pf[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	if (write(go_fd, "g", 1) != 1)
		return 1;
	double t0 = now(), next_drain = t0;
	unsigned long trips = 0;
	pf[n] = (struct pollfd){.fd = trips_fd, .events = POLLIN};
	while (now() - t0 < seconds) {
		double wait_ms = (next_drain - now()) * 1000;
		poll(pf, n + 1, wait_ms > 0 ? (int)wait_ms : 0);
		if (pf[n].revents & POLLIN)
			if (read(trips_fd, &trips, sizeof(trips)) < 0)
				break;
		for (size_t i = 0; i < n; i++)
			if (pf[i].revents & POLLIN)
				sonde__ftrace_session_drain_cpu(s, i);
		if (now() >= next_drain) {
			sonde__ftrace_session_drain(s);
			next_drain = now() + sonde__ftrace_session_drain_period_ms(s) / 1000.0;
		}
	}
	double elapsed = now() - t0;
	kill(work, SIGTERM);
	waitpid(work, &status, 0);
	sonde__ftrace_session_stop(s);
	getrusage(RUSAGE_SELF, &r1);
	struct ftrace_session_counters c;
	sonde__ftrace_session_counters(s, &c);
	sonde__ftrace_session_free(s);
	double ours_cpu = cpu_of(&r1) - cpu_of(&r0);

	long peer_events = 0, peer_lost = 0;
	double peer_cpu = 0;
	if (peer_pid > 0) {
		kill(peer_pid, SIGINT);
		wait4(peer_pid, &status, 0, &pr);
		peer_cpu = cpu_of(&pr);
		peer_count(peer, out, &peer_events, &peer_lost);
	}
	printf("workload: %.1f s, %lu round trips, %.0f sonde events/s\n", elapsed, trips,
	       c.events / elapsed);
	printf("%-10s %12s %12s %14s %10s\n", "recorder", "events", "lost", "cpu_s", "cpu_ms/Mev");
	printf("%-10s %12" PRIu64 " %12" PRIu64 " %14.3f %10.1f\n", "sonde", c.events,
	       sc.overrun + c.lost_events, ours_cpu, c.events ? ours_cpu * 1e9 / c.events : 0);
	if (peer_pid > 0)
		printf("%-10s %12ld %12ld %14.3f %10.1f\n", peer, peer_events, peer_lost, peer_cpu,
		       peer_events ? peer_cpu * 1e9 / peer_events : 0);
	printf("sonde: %" PRIu64 " pages, %" PRIu64 " with a loss, %" PRIu64 " packets, %" PRIu64
	       " bytes encoded\n",
	       c.pages, c.lost_pages, sc.sink.packets, sc.sink.bytes);
	unlink(out);
	return 0;
}
