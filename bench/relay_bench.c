/* Relay benchmark (sonded --relay, docs/service.md "Relay mode"): ingest of one flooding
 * producer into a host sonded three ways, interleaved by repetition: on the host's Unix
 * socket with shared memory (local), over TCP on loopback with the producer's own
 * shared-memory emulation (tcp), and through a relay on loopback that translates its
 * shared memory into emulated chunks (relay); the relay's CPU per GB forwarded. With
 * --clock, the clock offset a SyncClock round estimates between two network namespaces
 * joined by a veth pair (root): the relay in one, a RelayPort host in the other, both
 * reading the same CLOCK_BOOTTIME, so the true offset is 0.
 *
 * usage: relay_bench SONDED [--seconds N] [--reps N] [--packet BYTES]
 *        relay_bench --clock [--rounds N]
 *
 * Medians over the repetitions; ratios against local and tcp measured in the same run.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/log.h>
#include <sonde/relay.h>

#include "ipc/frame.h"
#include "ipc/relay_proto.h"
#include "ipc/sock.h"

enum { MAX_REPS = 64, MAX_ROUNDS = 4096 };

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *msg)
{
	fprintf(stderr, "relay_bench: %s\n", msg);
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* utime + stime of a process, in seconds. */
static double proc_cpu(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, st = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("cannot read /proc/PID/stat");
	fclose(f);
	const char *p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		die("cannot parse /proc/PID/stat");
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static bool can_connect(const char *name)
{
	int fd = sonde__ipc_connect(name);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

static pid_t spawn(const char *const argv[])
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGTERM);
	for (int i = 0; i < 100 && waitpid(pid, NULL, WNOHANG) == 0; i++)
		usleep(50000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void wait_listening(const char *name)
{
	for (double end = now_s() + 10; !can_connect(name);) {
		if (now_s() > end)
			die("a socket did not start listening");
		usleep(10000);
	}
}

/* ---------------------------------------------------------------- the flood */

struct flood {
	struct sonde_producer *p;
	size_t pkt;
	uint64_t instance;
	pthread_t th;
	atomic_bool stop;
	bool running, done;
};

static void *flood_thread(void *arg)
{
	struct flood *f = arg;
	uint8_t *pkt = malloc(f->pkt + 16);
	size_t body = f->pkt - 8, n = 0;

	/* TracePacket {900 for_testing: {1 str: body}} */
	pkt[n++] = 0xa2, pkt[n++] = 0x38;
	size_t inner = 1 + (body < 128 ? 1 : 2) + body;
	pkt[n++] = (uint8_t)(inner | 0x80), pkt[n++] = (uint8_t)(inner >> 7);
	pkt[n++] = 0x0a;
	if (body < 128) {
		pkt[n++] = (uint8_t)body;
	} else {
		pkt[n++] = (uint8_t)(body | 0x80), pkt[n++] = (uint8_t)(body >> 7);
	}
	memset(pkt + n, 'x', body);
	n += body;
	struct sonde_trace_writer *w = sonde_producer__new_writer(f->p, f->instance);
	while (w && !atomic_load_explicit(&f->stop, memory_order_relaxed))
		for (int i = 0; i < 64; i++)
			sonde_trace_writer__write_packet(w, pkt, n);
	sonde_trace_writer__free(w);
	free(pkt);
	return NULL;
}

static void flood_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct flood *f = ctx;
	f->instance = id;
	atomic_store(&f->stop, false);
	f->running = pthread_create(&f->th, NULL, flood_thread, f) == 0;
}

static void flood_stop(void *ctx, uint64_t id)
{
	struct flood *f = ctx;
	if (!f->running)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->th, NULL);
	f->running = false;
	f->done = true;
}

static pid_t flood_spawn(const char *sock, size_t pkt)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid)
		return pid;
	struct flood f = {.pkt = pkt};
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "bench-flood",
					 .socket = sock,
					 .smb_size_hint = 4 << 20,
					 .smb_page_size_hint = 32768,
					 .stall_ms = 1000};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = flood_start,
					    .stop = flood_stop,
					    .ctx = &f,
					    .will_notify_on_stop = true};
	if (!(f.p = sonde_producer__new(&po)))
		_exit(2);
	sonde_producer__register_data_source(f.p, "bench.flood", &cbs);
	for (double end = now_s() + 600; !f.done && now_s() < end;)
		if (sonde_producer__poll(f.p, 100) < 0)
			break;
	for (int i = 0; i < 5; i++)
		sonde_producer__poll(f.p, 20);
	sonde_producer__free(f.p);
	_exit(0);
}

/* ---------------------------------------------------------------- one measurement */

struct host {
	pid_t pid;
	char dir[64], psock[128], csock[128], tcp[32], list[192];
};

static void host_start(struct host *h, const char *sonded)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(h->dir, sizeof(h->dir), "/tmp/relay_bench.XXXXXX");
	if (!mkdtemp(h->dir) || fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("cannot set up the host's sockets");
	close(fd);
	char dir[sizeof(h->dir)];
	memcpy(dir, h->dir, sizeof(dir));
	snprintf(h->tcp, sizeof(h->tcp), "127.0.0.1:%u", ntohs(sa.sin_port));
	snprintf(h->psock, sizeof(h->psock), "%s/p.sock", dir);
	snprintf(h->csock, sizeof(h->csock), "%s/c.sock", dir);
	snprintf(h->list, sizeof(h->list), "%s,%s", h->psock, h->tcp);
	const char *argv[] = {sonded, "-p",   h->list,	     "-c", h->csock,
			      "-x",   "none", "--no-probes", NULL};
	h->pid = spawn(argv);
	wait_listening(h->csock);
	wait_listening(h->tcp);
}

static struct sonde_consumer *consumer(const struct host *h)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = h->csock};
	struct sonde_consumer *c = sonde_consumer__new(&co);
	if (!c)
		die("cannot connect a consumer");
	return c;
}

static void wait_registered(const struct host *h)
{
	struct sonde_consumer *c = consumer(h);
	for (double end = now_s() + 30;;) {
		struct sonde_service_state *st;
		int found = 0;
		if (sonde_consumer__query_service_state_sync(c, &st, 10000) < 0)
			die("QueryServiceState failed");
		for (size_t i = 0; i < st->n_data_sources; i++)
			found += !strcmp(st->data_sources[i].name, "bench.flood");
		sonde_service_state__free(st);
		if (found)
			break;
		if (now_s() > end)
			die("the producer did not register");
		usleep(20000);
	}
	sonde_consumer__free(c);
}

static void idle(struct sonde_consumer *c, double secs)
{
	for (double end = now_s() + secs; now_s() < end;) {
		struct pollfd p = {.fd = sonde_consumer__fd(c), .events = POLLIN};
		if (poll(&p, 1, 50) > 0)
			sonde_consumer__process(c);
	}
}

static uint64_t bytes_written(struct sonde_consumer *c)
{
	struct sonde_trace_stats st;
	if (sonde_consumer__get_trace_stats_sync(c, &st, 10000) < 0 || st.n_buffers < 1)
		die("GetTraceStats failed");
	return st.buffers[0].bytes_written;
}

enum way { LOCAL, TCP, RELAY, NWAYS };
static const char *const way_name[] = {"local", "tcp", "relay"};

/* MB/s into the host's buffer over secs; *relay_cpu_per_gb for the relay way. */
static double measure(const char *sonded, enum way w, size_t pkt, double secs,
		      double *relay_cpu_per_gb)
{
	struct host h;
	char rsock[160];
	pid_t relay = 0;

	host_start(&h, sonded);
	const char *sock = w == LOCAL ? h.psock : h.tcp;
	if (w == RELAY) {
		snprintf(rsock, sizeof(rsock), "%s/relay.sock", h.dir);
		const char *argv[] = {sonded, "--relay", h.tcp, "-p", rsock, "--no-probes", NULL};
		relay = spawn(argv);
		wait_listening(rsock);
		sock = rsock;
	}
	pid_t prod = flood_spawn(sock, pkt);
	wait_registered(&h);
	struct sonde_trace_config_opts o = {.sz = sizeof(o)};
	struct sonde_trace_config *cfg = sonde_trace_config__new(&o);
	uint8_t *enc;
	size_t len;
	if (!cfg || sonde_trace_config__add_buffer(cfg, 64 * 1024, SONDE_FILL_RING_BUFFER) < 0 ||
	    sonde_trace_config__add_data_source(cfg, "bench.flood", 0, NULL, 0) < 0 ||
	    sonde_trace_config__add_producer(cfg, "bench-flood", 4096, 32) < 0 ||
	    sonde_trace_config__encode(cfg, &enc, &len) < 0)
		die("cannot build the config");
	sonde_trace_config__free(cfg);
	struct sonde_consumer *c = consumer(&h);
	if (sonde_consumer__enable_tracing(c, enc, len, -1) < 0)
		die("EnableTracing failed");
	idle(c, 0.5);
	uint64_t b0 = bytes_written(c);
	double t0 = now_s(), cpu0 = relay ? proc_cpu(relay) : 0;
	idle(c, secs);
	uint64_t b1 = bytes_written(c);
	double t1 = now_s(), cpu1 = relay ? proc_cpu(relay) : 0;
	if (sonde_consumer__disable_tracing(c) < 0 ||
	    sonde_consumer__wait_disabled(c, 60000, NULL, 0) < 0)
		die("the session did not stop");
	sonde_consumer__free(c);
	free(enc);
	waitpid(prod, NULL, 0);
	if (relay)
		stop(relay);
	stop(h.pid);
	unlink(h.psock);
	unlink(h.csock);
	if (relay)
		unlink(rsock);
	rmdir(h.dir);
	if (relay_cpu_per_gb)
		*relay_cpu_per_gb = b1 > b0 ? (cpu1 - cpu0) / ((double)(b1 - b0) / 1e9) : 0;
	return (double)(b1 - b0) / 1e6 / (t1 - t0);
}

static int ingest(const char *sonded, double secs, int reps, size_t pkt)
{
	double mbps[NWAYS][MAX_REPS], cpu[MAX_REPS], ratio_l[MAX_REPS], ratio_t[MAX_REPS];

	printf("ingest, one producer, %zu-byte packets, %.1f s windows, %d repetitions\n", pkt,
	       secs, reps);
	for (int r = 0; r < reps; r++) {
		for (int w = 0; w < NWAYS; w++)
			mbps[w][r] = measure(sonded, (enum way)w, pkt, secs,
					     w == RELAY ? &cpu[r] : NULL);
		ratio_l[r] = mbps[RELAY][r] / mbps[LOCAL][r];
		ratio_t[r] = mbps[RELAY][r] / mbps[TCP][r];
		printf("  rep %d: local %.0f MB/s, tcp %.0f MB/s, relay %.0f MB/s (relay %.2f "
		       "CPU-s/GB)\n",
		       r + 1, mbps[LOCAL][r], mbps[TCP][r], mbps[RELAY][r], cpu[r]);
	}
	for (int w = 0; w < NWAYS; w++)
		printf("%-6s median %.0f MB/s\n", way_name[w], median(mbps[w], reps));
	printf("relay/local median ratio %.2f, relay/tcp median ratio %.2f\n",
	       median(ratio_l, reps), median(ratio_t, reps));
	printf("relay CPU median %.2f s per GB forwarded\n", median(cpu, reps));
	return 0;
}

/* ---------------------------------------------------------------- clock offset */

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int sh(const char *cmd)
{
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char ns_host[32], ns_relay[32];

static void netns_down(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null",
		 ns_host, ns_relay);
	sh(cmd);
}

/* Two namespaces, a veth pair 10.211.X.1 (host) - 10.211.X.2 (relay). */
static void netns_up(unsigned x)
{
	char cmd[1024];
	snprintf(ns_host, sizeof(ns_host), "rbh%d", (int)getpid());
	snprintf(ns_relay, sizeof(ns_relay), "rbr%d", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "set -e; ip netns add %1$s; ip netns add %2$s; "
		 "ip link add vh%3$d type veth peer name vr%3$d; "
		 "ip link set vh%3$d netns %1$s; ip link set vr%3$d netns %2$s; "
		 "ip -n %1$s addr add 10.211.%4$u.1/24 dev vh%3$d; "
		 "ip -n %2$s addr add 10.211.%4$u.2/24 dev vr%3$d; "
		 "ip -n %1$s link set vh%3$d up; ip -n %2$s link set vr%3$d up; "
		 "ip -n %1$s link set lo up; ip -n %2$s link set lo up",
		 ns_host, ns_relay, (int)getpid() % 100000, x);
	if (sh(cmd) != 0) {
		netns_down();
		die("cannot create the network namespaces (root and iproute2 needed)");
	}
}

static void enter_netns(const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		die("cannot enter a network namespace");
	close(fd);
}

/* The relay, in its namespace: a SyncClock round every interval_ms. */
static pid_t relay_in_netns(const char *host, const char *sock, unsigned interval_ms)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid)
		return pid;
	enter_netns(ns_relay);
	struct sonde_relay_opts o = {.sz = sizeof(o),
				     .host = host,
				     .producer_socket = sock,
				     .sync_interval_ms = interval_ms};
	struct sonde_relay *r = sonde_relay__new(&o);
	if (!r)
		_exit(2);
	for (;;) {
		struct pollfd p = {sonde_relay__fd(r), POLLIN, 0};
		poll(&p, 1, sonde_relay__timeout_ms(r));
		sonde_relay__process(r);
	}
}

static void next_frame(struct ipc_chan *ch, struct ipc_frame *f)
{
	for (double end = now_s() + 10;;) {
		int n = sonde__ipc_chan_next(ch, f, NULL);
		if (n < 0)
			die("the relay broke the protocol");
		if (n == 1)
			return;
		struct pollfd p = {ch->fd, POLLIN, 0};
		if (now_s() > end)
			die("no frame from the relay");
		poll(&p, 1, 100);
		if (sonde__ipc_chan_read(ch) < 0 && !ch->eof)
			die("reading the relay failed");
	}
}

static void reply(struct ipc_chan *ch, const struct ipc_frame *f)
{
	struct ipc_frame r = {.request_id = f->request_id,
			      .msg = f->msg == IPC_MSG_BIND_SERVICE ? IPC_MSG_BIND_SERVICE_REPLY
								    : IPC_MSG_INVOKE_METHOD_REPLY,
			      .success = true,
			      .service_id = 1,
			      .data = (const uint8_t *)"",
			      .data_len = 0};
	static const char *const methods[] = {"InitRelay", "SyncClock"};
	if (f->msg == IPC_MSG_BIND_SERVICE) {
		r.method_names = methods;
		r.n_methods = 2;
	}
	if (sonde__ipc_chan_send(ch, &r, -1) < 0 || sonde__ipc_chan_flush(ch) < 0)
		die("cannot answer the relay");
}

static uint64_t sync_boottime(const struct relay_sync_req *s)
{
	for (size_t i = 0; i < s->n_clocks; i++)
		if (s->clocks[i].clock_id == 6) /* BuiltinClock BOOTTIME */
			return s->clocks[i].timestamp;
	die("SyncClock without BOOTTIME");
	return 0;
}

/* The host side of the RelayPort: for each round, the host's BOOTTIME when the PING and
 * the UPDATE arrived (h, h2) and the relay's BOOTTIME in them (c1, c2). The offset is
 * estimated as Perfetto's trace processor (and sonded's host) does from one round: the
 * mean of (c1 + c2) / 2 - h (the relay's round trip) and c2 - (h + h2) / 2 (the host's);
 * the first alone is printed too. */
static int clock_bench(int rounds)
{
	double err[MAX_ROUNDS], half[MAX_ROUNDS], rtt[MAX_ROUNDS];
	char host[48], sock[64];
	int k = 0;

	if (rounds > MAX_ROUNDS)
		rounds = MAX_ROUNDS;
	unsigned x = 1 + (unsigned)getpid() % 250;
	netns_up(x);
	snprintf(host, sizeof(host), "10.211.%u.1:7211", x);
	snprintf(sock, sizeof(sock), "/tmp/relay_bench.%d.sock", (int)getpid());
	/* the host runs in this process, in its namespace; the relay in a child */
	int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	enter_netns(ns_host);
	int lfd = sonde__ipc_listen(host);
	if (lfd < 0)
		die("cannot listen in the host namespace");
	pid_t relay = relay_in_netns(host, sock, 20);
	struct pollfd lp = {lfd, POLLIN, 0};
	if (poll(&lp, 1, 10000) != 1)
		die("the relay did not connect");
	struct ipc_chan ch;
	if (sonde__ipc_chan_init(&ch, accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		die("accept failed");
	struct ipc_frame f;
	uint64_t h = 0, c1 = 0;
	while (k < rounds) {
		next_frame(&ch, &f);
		if (f.msg == IPC_MSG_SET_PEER_IDENTITY)
			continue;
		if (f.msg == IPC_MSG_INVOKE_METHOD && f.method_id == PF_RELAY_SYNC_CLOCK) {
			struct relay_sync_req s;
			uint64_t at = boottime_ns();
			if (sonde__relay_sync_req_decode(f.data, f.data_len, &s) < 0)
				die("a malformed SyncClock");
			if (s.phase == RELAY_SYNC_PING) {
				h = at;
				c1 = sync_boottime(&s);
			} else if (h) {
				uint64_t c2 = sync_boottime(&s);
				/* Perfetto's trace processor's estimate, which the host
				 * uses: the round trip the relay started (PING's reply to
				 * UPDATE) and the one the host did, averaged */
				double a = ((double)c1 + (double)c2) / 2 - (double)h;
				double b = (double)c2 - ((double)h + (double)at) / 2;
				err[k] = (a + b) / 2;
				half[k] = a;
				rtt[k++] = (double)(c2 - c1);
				h = 0;
			}
		}
		reply(&ch, &f);
	}
	kill(relay, SIGKILL);
	waitpid(relay, NULL, 0);
	sonde__ipc_chan_close(&ch);
	close(lfd);
	if (self >= 0 && setns(self, CLONE_NEWNET) == 0)
		close(self);
	unlink(sock);
	netns_down();
	double abs_err[MAX_ROUNDS];
	for (int i = 0; i < k; i++)
		abs_err[i] = err[i] < 0 ? -err[i] : err[i];
	double me = median(err, k), mae = median(abs_err, k), mr = median(rtt, k);
	double mh = median(half, k);
	qsort(abs_err, (size_t)k, sizeof(*abs_err), cmp_double);
	printf("clock offset over a veth pair between two network namespaces, %d SyncClock "
	       "rounds (true offset 0)\n",
	       k);
	printf("estimated offset: median %.1f us, median |error| %.1f us, p95 |error| %.1f us, max "
	       "%.1f us\n",
	       me / 1e3, mae / 1e3, abs_err[k * 95 / 100] / 1e3, abs_err[k - 1] / 1e3);
	printf("the relay's round trip alone ((c1 + c2) / 2 - h): median %.1f us\n", mh / 1e3);
	printf("PING->UPDATE round trip at the relay: median %.1f us\n", mr / 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	const char *sonded = NULL;
	double secs = 3;
	int reps = 5, rounds = 200;
	size_t pkt = 1024;
	bool clock = false;

	sonde_log__set_level(SONDE_LOG_ERROR);
	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--packet") && i + 1 < argc)
			pkt = (size_t)atol(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--clock"))
			clock = true;
		else if (argv[i][0] != '-' && !sonded)
			sonded = argv[i];
		else
			die("usage: relay_bench SONDED [--seconds N] [--reps N] [--packet BYTES] | "
			    "relay_bench --clock [--rounds N]");
	}
	if (clock)
		return clock_bench(rounds < 1 ? 1 : rounds);
	if (!sonded || reps < 1 || reps > MAX_REPS || pkt < 64 || pkt > 16000)
		die("usage: relay_bench SONDED [--seconds N] [--reps N] [--packet 64-16000]");
	return ingest(sonded, secs, reps, pkt);
}
