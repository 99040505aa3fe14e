/* Tracing service benchmark: ingest from flooding producers, buffer drain through
 * ReadBuffers and write_into_file, and service memory. Runs against sonded and, when a
 * path to a peer service binary (e.g. Perfetto's traced) is given, against the peer in the
 * same run, printing ratios. The two take turns at each step (the memory part, each
 * ingest case, each drain), each on a service started for that step, the first to go
 * alternating, so that a change in the machine's load falls on both.
 *
 * usage: trace_bench SONDED [PEER] [--seconds N] [--drain-mb N] [--quick] [--case 0-9]
 *                    [--repeat N] [--rss] [--tcp | --tcp-vs-smb] [--no-page-reporting]
 *
 * --case 0-7 runs one ingest case only (for profiling); --case 8 the ReadBuffers drain only
 * and --case 9 the write_into_file drain only; each --repeat N times (default 1), the
 * services taking turns, each result printed.
 *
 * "svc sys/MB" is the system calls of the service's loop thread per MB ingested, counted
 * by the kernel (raw_syscalls:sys_enter; "-" when not root).
 *
 * --rss measures only the service memory (idle, and with 100 producers holding 256 KiB
 * SMBs in a session).
 *
 * --tcp: every producer connects over TCP on loopback (shared-memory emulation).
 * --tcp-vs-smb: SONDED's producers over TCP, PEER's (SONDED again if no PEER is given) over
 * its Unix socket with shared memory, so that "vs peer" is the TCP/SMB ratio of one
 * interleaved run; then what loopback TCP carries with no service at all (one process
 * writing 96 KiB or 1 MiB buffers, another reading them: the two kernel copies every
 * emulated byte costs), the ceiling of the TCP figures.
 *
 * --no-page-reporting (root): turns the kernel's free page reporting off for the run
 * (page_reporting_order 11; a child restores the old value once the bench is gone, however
 * it ends, under a lock in /run/sonde-test, which it holds until then), then touches and
 * frees 2 GiB so that the run's pages are backed. On a VM whose balloon reports free
 * memory to the host, the first touch of a reported page faults in the host: writing 256
 * MiB into the page cache then costs 3-5 times its CPU, at random for whichever service
 * met such pages, which is most of the write_into_file drain's scatter (docs/service.md).
 *
 * Both services are started with PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME
 * pointing into a temporary directory and no arguments. The producers and consumer are
 * sonde's client library in both cases, so the service is the only variable.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/log.h>

enum { MAX_PRODUCERS = 100 };

struct svc {
	const char *bin, *label;
	bool tcp; /* its producers connect over TCP on loopback */
	pid_t pid;
	char dir[64], psock[128], csock[128];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *msg)
{
	fprintf(stderr, "trace_bench: %s\n", msg);
	exit(1);
}

/* ---------------------------------------------------------------- the service */

static bool can_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* --tcp: producers connect over TCP on loopback (shared-memory emulation), the consumer
 * stays on the Unix socket; --tcp-vs-smb: only the first service's */
static bool over_tcp, tcp_vs_smb;

/* A loopback port nothing listens on at the moment. */
static unsigned free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("cannot pick a loopback port");
	close(fd);
	return ntohs(a.sin_port);
}

static void svc_start(struct svc *s)
{
	char tcp[32] = "", list[sizeof(s->psock) + sizeof(tcp) + 1];
	snprintf(s->dir, sizeof(s->dir), "/tmp/trace_bench.XXXXXX");
	if (!mkdtemp(s->dir))
		die("mkdtemp failed");
	char dir[sizeof(s->dir)];
	memcpy(dir, s->dir, sizeof(dir)); /* a copy keeps -Wrestrict quiet about s->dir */
	snprintf(s->psock, sizeof(s->psock), "%s/p.sock", dir);
	snprintf(s->csock, sizeof(s->csock), "%s/c.sock", dir);
	if (s->tcp)
		snprintf(tcp, sizeof(tcp), "127.0.0.1:%u", free_port());
	snprintf(list, sizeof(list), "%s%s%s", s->psock, *tcp ? "," : "", tcp);
	setenv("PERFETTO_PRODUCER_SOCK_NAME", list, 1);
	setenv("PERFETTO_CONSUMER_SOCK_NAME", s->csock, 1);
	setenv("SONDE_CONNECTOR_SOCK_NAME", "none", 1); /* the default may be in use */
	s->pid = fork();
	if (s->pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(s->bin, s->bin, (char *)NULL);
		_exit(127);
	}
	double end = now_s() + 10;
	while (!(can_connect(s->psock) && can_connect(s->csock))) {
		if (now_s() > end)
			die("the service did not start listening");
		usleep(10000);
	}
	if (*tcp) /* what the producers (children) connect to */
		setenv("PERFETTO_PRODUCER_SOCK_NAME", tcp, 1);
}

static void svc_stop(struct svc *s)
{
	kill(s->pid, SIGTERM);
	for (int i = 0; i < 100 && waitpid(s->pid, NULL, WNOHANG) == 0; i++)
		usleep(50000);
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	unlink(s->psock);
	unlink(s->csock);
	rmdir(s->dir);
}

/* utime + stime of the service, in seconds. */
/* The service's CPU time, all its threads (those that ended too), in seconds: its
 * process CPU-time clock, to the nanosecond (/proc/PID/stat counts in 10 ms ticks, a
 * tenth of a drain's CPU). */
static double svc_cpu(const struct svc *s)
{
	clockid_t clk;
	struct timespec ts;

	if (clock_getcpuclockid(s->pid, &clk) != 0 || clock_gettime(clk, &ts) != 0)
		die("cannot read the service's CPU-time clock");
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long svc_rss_kb(const struct svc *s)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", s->pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* The system calls of the service's main thread, its loop (ingest is all there), counted
 * by the kernel (the raw_syscalls:sys_enter tracepoint): -1 where tracefs or
 * perf_event_open is refused (not root), and the column then says "-". */
static int syscall_counter(pid_t pid)
{
	struct perf_event_attr a = {.size = sizeof(a), .type = PERF_TYPE_TRACEPOINT};
	FILE *f = fopen("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "r");
	unsigned long long id;

	if (!f)
		return -1;
	bool ok = fscanf(f, "%llu", &id) == 1;
	fclose(f);
	if (!ok)
		return -1;
	a.config = id;
	return (int)syscall(SYS_perf_event_open, &a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static uint64_t counter_read(int fd)
{
	uint64_t v = 0;

	if (fd < 0 || read(fd, &v, sizeof(v)) != sizeof(v))
		return 0;
	return v;
}

/* ---------------------------------------------------------------- flooding producer */

struct flood {
	struct sonde_producer *p;
	size_t pkt_size;
	uint64_t instance;
	pthread_t th;
	atomic_bool stop;
	bool running, done;
	uint64_t packets, lost;
};

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	do {
		p[n++] = (uint8_t)(v | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

/* A TracePacket {900 for_testing: {1 str: body}} of about `size` bytes. */
static size_t make_packet(uint8_t *pkt, size_t size)
{
	size_t body = size > 16 ? size - 10 : 6, n = 0;
	uint8_t inner_hdr[12];
	size_t ih = 0;

	inner_hdr[ih++] = 0x0a;
	ih += put_varint(inner_hdr + ih, body);
	n += put_varint(pkt + n, (900 << 3) | 2);
	n += put_varint(pkt + n, ih + body);
	memcpy(pkt + n, inner_hdr, ih);
	n += ih;
	memset(pkt + n, 'x', body);
	return n + body;
}

static void *flood_thread(void *arg)
{
	struct flood *f = arg;
	uint8_t *pkt = malloc(f->pkt_size + 32);
	if (!pkt)
		return NULL;
	size_t n = make_packet(pkt, f->pkt_size);

	struct sonde_trace_writer *w = sonde_producer__new_writer(f->p, f->instance);
	if (!w) {
		free(pkt);
		return NULL;
	}
	while (!atomic_load_explicit(&f->stop, memory_order_relaxed)) {
		for (int i = 0; i < 64; i++)
			sonde_trace_writer__write_packet(w, pkt, n);
		f->packets += 64;
	}
	f->lost = sonde_trace_writer__packets_lost(w);
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

/* A producer process: floods while its data source runs, then writes "packets lost" to
 * the pipe and exits. */
static void flood_child(int out, size_t pkt_size, uint32_t page, uint32_t smb)
{
	struct flood f = {.pkt_size = pkt_size};
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "bench-flood",
					 .smb_size_hint = smb,
					 .smb_page_size_hint = page,
					 .smb_scraping = SONDE_SMB_SCRAPING_ENABLED,
					 .stall_ms = 1000};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = flood_start,
					    .stop = flood_stop,
					    .ctx = &f,
					    .will_notify_on_stop = true};
	if (!(f.p = sonde_producer__new(&po)))
		_exit(2);
	sonde_producer__register_data_source(f.p, "bench.flood", &cbs);
	double end = now_s() + 600;
	while (!f.done && now_s() < end && sonde_producer__poll(f.p, 100) >= 0)
		;
	for (int i = 0; i < 5; i++) /* let the stop ack and last commits out */
		sonde_producer__poll(f.p, 20);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		     (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	dprintf(out, "%" PRIu64 " %" PRIu64 " %.6f\n", f.packets, f.lost, cpu);
	sonde_producer__free(f.p);
	_exit(0);
}

struct producers {
	pid_t pid[MAX_PRODUCERS];
	int pipe[MAX_PRODUCERS];
	int n;
};

static void spawn_floods(struct producers *ps, int n, size_t pkt, uint32_t page, uint32_t smb)
{
	ps->n = n;
	for (int i = 0; i < n; i++) {
		int fds[2];
		if (pipe(fds) < 0)
			die("pipe");
		fflush(NULL);
		ps->pid[i] = fork();
		if (ps->pid[i] == 0) {
			close(fds[0]);
			flood_child(fds[1], pkt, page, smb);
		}
		close(fds[1]);
		ps->pipe[i] = fds[0];
	}
}

/* Waits for the producers; returns the packets they wrote and lost, and their CPU time. */
static void reap_floods(struct producers *ps, uint64_t *written, uint64_t *lost, double *cpu)
{
	*written = *lost = 0;
	*cpu = 0;
	for (int i = 0; i < ps->n; i++) {
		char buf[96] = "";
		ssize_t k = read(ps->pipe[i], buf, sizeof(buf) - 1);
		uint64_t w = 0, l = 0;
		double c = 0;
		if (k > 0 && sscanf(buf, "%" SCNu64 " %" SCNu64 " %lf", &w, &l, &c) == 3) {
			*written += w;
			*lost += l;
			*cpu += c;
		}
		close(ps->pipe[i]);
		waitpid(ps->pid[i], NULL, 0);
	}
}

/* ---------------------------------------------------------------- consumer side */

static struct sonde_consumer *consumer(const struct svc *s)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = s->csock};
	struct sonde_consumer *c = sonde_consumer__new(&co);
	if (!c)
		die("cannot connect a consumer");
	return c;
}

struct cfg_params {
	const char *ds;
	uint32_t buf_kb, page_kb, smb_kb, file_period_ms;
	enum sonde_fill_policy fill;
	bool wif;
};

static uint8_t *make_config(const struct cfg_params *p, size_t *len)
{
	struct sonde_trace_config_opts o = {.sz = sizeof(o),
					    .write_into_file = p->wif,
					    .file_write_period_ms = p->file_period_ms};
	struct sonde_trace_config *cfg = sonde_trace_config__new(&o);
	uint8_t *out = NULL;
	if (!cfg || sonde_trace_config__add_buffer(cfg, p->buf_kb, p->fill) < 0 ||
	    sonde_trace_config__add_data_source(cfg, p->ds, 0, NULL, 0) < 0 ||
	    (p->smb_kb &&
	     sonde_trace_config__add_producer(cfg, "bench-flood", p->smb_kb, p->page_kb) < 0) ||
	    sonde_trace_config__encode(cfg, &out, len) < 0)
		die("cannot build the config");
	sonde_trace_config__free(cfg);
	return out;
}

static void wait_data_sources(const struct svc *s, const char *name, int n)
{
	struct sonde_consumer *c = consumer(s);
	double end = now_s() + 30;
	for (;;) {
		struct sonde_service_state *st;
		int found = 0;
		if (sonde_consumer__query_service_state_sync(c, &st, 10000) < 0)
			die("QueryServiceState failed");
		for (size_t i = 0; i < st->n_data_sources; i++)
			found += strcmp(st->data_sources[i].name, name) == 0;
		sonde_service_state__free(st);
		if (found >= n)
			break;
		if (now_s() > end)
			die("producers did not register");
		usleep(20000);
	}
	sonde_consumer__free(c);
}

/* Keeps the consumer serviced while time passes. */
static void idle(struct sonde_consumer *c, double secs)
{
	for (double end = now_s() + secs; now_s() < end;) {
		struct pollfd p = {.fd = sonde_consumer__fd(c), .events = POLLIN};
		if (poll(&p, 1, 50) > 0)
			sonde_consumer__process(c);
	}
}

static void stats(struct sonde_consumer *c, struct sonde_trace_stats *st)
{
	if (sonde_consumer__get_trace_stats_sync(c, st, 10000) < 0 || st->n_buffers < 1)
		die("GetTraceStats failed");
}

static void stop_session(struct sonde_consumer *c)
{
	if (sonde_consumer__disable_tracing(c) < 0 ||
	    sonde_consumer__wait_disabled(c, 60000, NULL, 0) < 0)
		die("the session did not stop");
}

struct flood_result {
	double mbps, cpu_per_gb, prod_cpu_per_gb;
	double syscalls_per_mb; /* the service's; < 0: not counted */
	int producers;
	uint64_t bytes, chunks_lost, packets_lost, packets;
};

static void run_flood(struct svc *s, int nprod, uint32_t page, size_t pkt, double secs,
		      struct flood_result *r)
{
	struct producers ps;
	struct cfg_params cp = {.ds = "bench.flood",
				.buf_kb = 64 * 1024,
				.page_kb = page / 1024,
				.smb_kb = 4096,
				.fill = SONDE_FILL_RING_BUFFER};
	struct sonde_trace_stats a, b;
	size_t len;

	spawn_floods(&ps, nprod, pkt, page, 4 << 20);
	wait_data_sources(s, "bench.flood", nprod);
	struct sonde_consumer *c = consumer(s);
	uint8_t *cfg = make_config(&cp, &len);
	if (sonde_consumer__enable_tracing(c, cfg, len, -1) < 0)
		die("EnableTracing failed");
	idle(c, 0.5); /* the producers get their SMB and start writing */
	int sys_fd = syscall_counter(s->pid);
	stats(c, &a);
	double cpu0 = svc_cpu(s), t0 = now_s();
	uint64_t sys0 = counter_read(sys_fd);
	idle(c, secs);
	stats(c, &b);
	double cpu1 = svc_cpu(s), t1 = now_s();
	uint64_t sys1 = counter_read(sys_fd);
	if (sys_fd >= 0)
		close(sys_fd);
	stop_session(c);
	sonde_consumer__free(c);
	free(cfg);
	double prod_cpu;
	r->producers = nprod;
	reap_floods(&ps, &r->packets, &r->packets_lost, &prod_cpu);
	r->bytes = b.buffers[0].bytes_written - a.buffers[0].bytes_written;
	/* the producers' whole life, against everything that reached the buffer */
	r->prod_cpu_per_gb = b.buffers[0].bytes_written
				     ? prod_cpu / ((double)b.buffers[0].bytes_written / 1e9)
				     : 0;
	r->mbps = (double)r->bytes / 1e6 / (t1 - t0);
	r->cpu_per_gb = r->bytes ? (cpu1 - cpu0) / ((double)r->bytes / 1e9) : 0;
	r->syscalls_per_mb = sys_fd < 0	 ? -1
			     : r->bytes ? (double)(sys1 - sys0) / ((double)r->bytes / 1e6)
					: 0;
	r->chunks_lost =
		b.buffers[0].chunks_discarded + b.buffers[0].abi_violations + b.chunks_discarded;
}

/* ---------------------------------------------------------------- drain */

struct drain_result {
	double mbps, cpu_per_mb, client_cpu_per_mb;
	uint64_t bytes;
};

/* CPU time of this process (the consumer), children excluded. */
static double self_cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void count_packet(void *ctx, const void *pkt, size_t len)
{
	(void)pkt;
	*(uint64_t *)ctx += len;
}

/* Floods a DISCARD buffer of buf_kb until it is full (or 60 s pass), then stops. */
static void fill_buffer(struct svc *s, struct sonde_consumer *c, const uint8_t *cfg, size_t len,
			int out_fd, uint32_t buf_kb)
{
	struct producers ps;
	struct sonde_trace_stats st;

	spawn_floods(&ps, 1, 16384, 32768, 4 << 20);
	wait_data_sources(s, "bench.flood", 1);
	if (sonde_consumer__enable_tracing(c, cfg, len, out_fd) < 0)
		die("EnableTracing failed");
	for (double end = now_s() + 60; now_s() < end;) {
		idle(c, 0.2);
		stats(c, &st);
		if (st.buffers[0].chunks_discarded > 0 ||
		    st.buffers[0].bytes_written >= (uint64_t)buf_kb * 1024 * 97 / 100)
			break;
	}
	/* stop the producers first: the drain below then measures the service alone */
	for (int i = 0; i < ps.n; i++)
		kill(ps.pid[i], SIGKILL);
	uint64_t w, l;
	double cpu;
	reap_floods(&ps, &w, &l, &cpu);
}

static void run_drain_read(struct svc *s, uint32_t buf_kb, struct drain_result *r)
{
	struct cfg_params cp = {.ds = "bench.flood",
				.buf_kb = buf_kb,
				.page_kb = 32,
				.smb_kb = 4096,
				.fill = SONDE_FILL_DISCARD};
	struct sonde_consumer *c = consumer(s);
	size_t len;
	uint8_t *cfg = make_config(&cp, &len);

	fill_buffer(s, c, cfg, len, -1, buf_kb);
	stop_session(c);
	uint64_t bytes = 0;
	struct sonde_consumer_cbs cbs = {
		.sz = sizeof(cbs), .on_packet = count_packet, .ctx = &bytes};
	sonde_consumer__set_callbacks(c, &cbs);
	double cpu0 = svc_cpu(s), t0 = now_s(), me0 = self_cpu();
	if (sonde_consumer__read_buffers_sync(c, 300000) < 0)
		die("ReadBuffers failed");
	double t = now_s() - t0, cpu = svc_cpu(s) - cpu0;
	r->client_cpu_per_mb = bytes ? (self_cpu() - me0) / ((double)bytes / 1e6) : 0;
	sonde_consumer__free(c);
	free(cfg);
	r->bytes = bytes;
	r->mbps = (double)bytes / 1e6 / t;
	r->cpu_per_mb = bytes ? cpu / ((double)bytes / 1e6) : 0;
}

static void run_drain_file(struct svc *s, uint32_t buf_kb, struct drain_result *r)
{
	/* no periodic drain: everything is written by the final drain at the end */
	struct cfg_params cp = {.ds = "bench.flood",
				.buf_kb = buf_kb,
				.page_kb = 32,
				.smb_kb = 4096,
				.fill = SONDE_FILL_DISCARD,
				.wif = true,
				.file_period_ms = 3600000};
	struct sonde_consumer *c = consumer(s);
	char path[160];
	size_t len;
	uint8_t *cfg = make_config(&cp, &len);

	snprintf(path, sizeof(path), "%s/out.pftrace", s->dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("cannot create the output file");
	fill_buffer(s, c, cfg, len, fd, buf_kb);
	double cpu0 = svc_cpu(s), t0 = now_s();
	stop_session(c);
	double t = now_s() - t0, cpu = svc_cpu(s) - cpu0;
	struct stat st;
	fstat(fd, &st);
	close(fd);
	unlink(path);
	sonde_consumer__free(c);
	free(cfg);
	r->bytes = (uint64_t)st.st_size;
	r->mbps = (double)r->bytes / 1e6 / t;
	r->cpu_per_mb = r->bytes ? cpu / ((double)r->bytes / 1e6) : 0;
}

/* ---------------------------------------------------------------- memory */

/* One process holding n producers, each registering bench.idle, until killed. */
static pid_t spawn_idle_producers(int n)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	static struct sonde_producer *p[MAX_PRODUCERS];
	struct pollfd fds[MAX_PRODUCERS];
	struct sonde_producer_opts po = {
		.sz = sizeof(po), .name = "bench-idle", .smb_size_hint = 256 * 1024};
	for (int i = 0; i < n; i++) {
		if (!(p[i] = sonde_producer__new(&po)))
			_exit(2);
		sonde_producer__register_data_source(p[i], "bench.idle", NULL);
		fds[i] = (struct pollfd){.fd = sonde_producer__fd(p[i]), .events = POLLIN};
	}
	for (;;) {
		if (poll(fds, (nfds_t)n, 1000) < 0)
			_exit(1);
		for (int i = 0; i < n; i++)
			if (fds[i].revents && sonde_producer__process(p[i]) < 0)
				_exit(0);
	}
}

static void run_rss(struct svc *s, long *idle_kb, long *busy_kb)
{
	struct cfg_params cp = {.ds = "bench.idle", .buf_kb = 1024, .fill = SONDE_FILL_RING_BUFFER};
	size_t len;

	usleep(200000);
	*idle_kb = svc_rss_kb(s);
	pid_t pid = spawn_idle_producers(MAX_PRODUCERS);
	wait_data_sources(s, "bench.idle", MAX_PRODUCERS);
	struct sonde_consumer *c = consumer(s);
	uint8_t *cfg = make_config(&cp, &len);
	if (sonde_consumer__enable_tracing(c, cfg, len, -1) < 0)
		die("EnableTracing failed");
	idle(c, 1.0); /* every producer gets its SMB */
	*busy_kb = svc_rss_kb(s);
	stop_session(c);
	sonde_consumer__free(c);
	free(cfg);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* ---------------------------------------------------------------- driver */

struct flood_case {
	int producers;
	uint32_t page;
	size_t pkt;
};

static const struct flood_case cases[] = {
	{1, 4096, 64}, {1, 4096, 16384}, {1, 32768, 64}, {1, 32768, 16384},
	{4, 4096, 64}, {4, 4096, 16384}, {4, 32768, 64}, {4, 32768, 16384},
};
enum { N_CASES = sizeof(cases) / sizeof(cases[0]) };

struct results {
	struct flood_result flood[N_CASES];
	struct drain_result read, file;
	long rss_idle, rss_busy;
};

/* The steps of a run: the memory part, each ingest case, the two drains. */
enum { STEP_RSS = -1, STEP_READ = N_CASES, STEP_FILE = N_CASES + 1, STEP_END = N_CASES + 2 };

/* Runs one step against a service started for it alone, so that with a peer the two
 * services take turns step by step (what the machine's load does meanwhile falls on both
 * alike) and neither runs on what the other left behind. */
static void run_step(struct svc *s, int step, double secs, uint32_t drain_kb, struct results *r)
{
	svc_start(s);
	if (step == STEP_RSS) {
		run_rss(s, &r->rss_idle, &r->rss_busy);
	} else if (step == STEP_READ) {
		run_drain_read(s, drain_kb, &r->read);
	} else if (step == STEP_FILE) {
		run_drain_file(s, drain_kb, &r->file);
	} else {
		run_flood(s, cases[step].producers, cases[step].page, cases[step].pkt, secs,
			  &r->flood[step]);
		fprintf(stderr, "  %s: flood %dp %2uK %5zuB: %.0f MB/s\n", s->label,
			cases[step].producers, cases[step].page / 1024, cases[step].pkt,
			r->flood[step].mbps);
	}
	svc_stop(s);
}

static void run_all(struct svc *svcs, int nb, double secs, uint32_t drain_kb, bool quick, int only,
		    int repeat, bool rss_only, struct results *res)
{
	if (only >= 0 && only < N_CASES) {
		/* one ingest case only, for profiling or an interleaved comparison */
		for (int t = 0; t < repeat; t++)
			for (int k = 0; k < nb; k++) {
				int i = (k + t) % nb;
				run_step(&svcs[i], only, secs, drain_kb, &res[i]);
				const struct flood_result *f = &res[i].flood[only];
				printf("%s%s: %.1f MB/s, %.3f cpu s/GB, %.1f syscalls/MB, "
				       "producers %.3f cpu s/GB\n",
				       svcs[i].label, svcs[i].tcp ? " (tcp)" : "", f->mbps,
				       f->cpu_per_gb, f->syscalls_per_mb, f->prod_cpu_per_gb);
				fflush(stdout);
			}
		return;
	}
	if (only == STEP_READ || only == STEP_FILE) {
		/* one drain only, `repeat` times, the services taking turns (the first to go
		 * alternating): a before/after comparison of one interleaved run */
		for (int t = 0; t < repeat; t++)
			for (int k = 0; k < nb; k++) {
				int i = (k + t) % nb;
				run_step(&svcs[i], only, secs, drain_kb, &res[i]);
				const struct drain_result *d =
					only == STEP_READ ? &res[i].read : &res[i].file;
				printf("%s: %s drain %.1f MB/s, %.3f svc ms/MB, %" PRIu64
				       " bytes\n",
				       svcs[i].label,
				       only == STEP_READ ? "ReadBuffers" : "write_into_file",
				       d->mbps, d->cpu_per_mb * 1000, d->bytes);
				fflush(stdout);
			}
		return;
	}
	for (int step = STEP_RSS, turn = 0; step < STEP_END; step++) {
		if (rss_only && step != STEP_RSS)
			break;
		if (step >= 0 && step < N_CASES && quick && step % 2)
			continue;
		/* alternate who goes first, so that neither always runs on a warmer machine */
		for (int k = 0; k < nb; k++)
			run_step(&svcs[(k + turn) % nb], step, secs, drain_kb,
				 &res[(k + turn) % nb]);
		turn++;
	}
}

static void ratio(char *out, size_t n, double a, double b)
{
	if (b > 0)
		snprintf(out, n, "%6.2fx", a / b);
	else
		snprintf(out, n, "%7s", "-");
}

/* capacity: the MB/s the slower side would sustain with a core each (the service, or each
 * producer), i.e. the rate on an idle machine with enough cores; on a loaded machine the
 * measured MB/s mostly reflects how much CPU the processes were given */
static void print_flood(const char *name, const struct flood_result *f, const char *q)
{
	double prod = f->producers ? f->prod_cpu_per_gb / f->producers : 0;
	double worst = f->cpu_per_gb > prod ? f->cpu_per_gb : prod;
	char sys[16] = "-";

	if (f->syscalls_per_mb >= 0)
		snprintf(sys, sizeof(sys), "%.1f", f->syscalls_per_mb);
	printf("%-28s %10.1f %10.3f %10s %10.3f %10.0f %11" PRIu64 " %10" PRIu64 " %8s\n", name,
	       f->mbps, f->cpu_per_gb, sys, f->prod_cpu_per_gb, worst > 0 ? 1000 / worst : 0,
	       f->chunks_lost, f->packets_lost, q);
}

static void report(const struct results *r, const struct results *peer, bool quick,
		   bool rss_only)
{
	char q[16];

	if (rss_only)
		goto rss;

	printf("\n%-28s %10s %10s %10s %10s %10s %11s %10s %8s\n", "ingest (64 MiB ring)", "MB/s",
	       "svc s/GB", "svc sys/MB", "prod s/GB", "capacity", "chunks lost", "pkts lost",
	       peer ? "vs peer" : "");
	for (int i = 0; i < N_CASES; i++) {
		const struct flood_result *f = &r->flood[i];
		if (quick && i % 2)
			continue;
		char name[64];
		snprintf(name, sizeof(name), "%d producer%s, %2uK pages, %5zuB", cases[i].producers,
			 cases[i].producers > 1 ? "s" : " ", cases[i].page / 1024, cases[i].pkt);
		ratio(q, sizeof(q), f->mbps, peer ? peer->flood[i].mbps : 0);
		print_flood(name, f, peer ? q : "");
		if (peer)
			print_flood("  peer", &peer->flood[i], "");
	}
	printf("\n%-28s %10s %10s %10s %10s %10s\n", "drain (256 MiB buffer)", "MB/s", "svc ms/MB",
	       "cons ms/MB", "MB", peer ? "vs peer" : "");
	const struct drain_result *d[2] = {&r->read, &r->file};
	const struct drain_result *pd[2] = {peer ? &peer->read : NULL, peer ? &peer->file : NULL};
	const char *names[2] = {"ReadBuffers", "write_into_file"};
	for (int i = 0; i < 2; i++) {
		ratio(q, sizeof(q), d[i]->mbps, pd[i] ? pd[i]->mbps : 0);
		printf("%-28s %10.1f %10.3f %10.3f %10.1f %10s\n", names[i], d[i]->mbps,
		       d[i]->cpu_per_mb * 1000, d[i]->client_cpu_per_mb * 1000,
		       (double)d[i]->bytes / 1e6, peer ? q : "");
		if (pd[i])
			printf("%-28s %10.1f %10.3f %10.3f %10.1f\n", "  peer", pd[i]->mbps,
			       pd[i]->cpu_per_mb * 1000, pd[i]->client_cpu_per_mb * 1000,
			       (double)pd[i]->bytes / 1e6);
	}
rss:
	printf("\n%-28s %12s %10s\n", "service RSS", "KiB", "");
	ratio(q, sizeof(q), (double)r->rss_idle, peer ? (double)peer->rss_idle : 0);
	printf("%-28s %12ld %10s\n", "idle", r->rss_idle, peer ? q : "");
	if (peer)
		printf("%-28s %12ld\n", "  peer", peer->rss_idle);
	ratio(q, sizeof(q), (double)r->rss_busy, peer ? (double)peer->rss_busy : 0);
	printf("%-28s %12ld %10s\n", "100 producers, 256K SMBs", r->rss_busy, peer ? q : "");
	if (peer)
		printf("%-28s %12ld\n", "  peer", peer->rss_busy);
}

/* MB/s that a child writing `chunk`-byte buffers into a loopback TCP socket for secs
 * seconds gets to a reader, with no service in between (0 on a socket error). */
static double loopback_mbps(size_t chunk, double secs)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1;
	char *b = malloc(chunk > (1u << 20) ? chunk : (1u << 20));
	uint64_t total = 0;
	double dt = 0;

	if (l < 0 || !b || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		goto out;
	memset(b, 'x', chunk);
	pid_t pid = fork();
	if (pid == 0) {
		int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			_exit(1);
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		for (double end = now_s() + secs; now_s() < end;)
			if (write(s, b, chunk) < 0)
				_exit(1);
		_exit(0);
	}
	if (pid < 0 || (c = accept(l, NULL, NULL)) < 0)
		goto out;
	double t0 = now_s();
	for (ssize_t n; (n = read(c, b, 1u << 20)) > 0;)
		total += (uint64_t)n;
	dt = now_s() - t0;
	waitpid(pid, NULL, 0);
out:
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	free(b);
	return dt > 0 ? total / dt / 1e6 : 0;
}

static int write_param(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : write(fd, v, strlen(v));

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)strlen(v) ? 0 : -1;
}

/* --no-page-reporting: off until this process and its children are gone. */
static void page_reporting_off(void)
{
	static const char param[] = "/sys/module/page_reporting/parameters/page_reporting_order";
	char old[32] = "";
	pid_t bench = getpid();

	mkdir("/run/sonde-test", 0755);
	int lk = open("/run/sonde-test/page_reporting_order.lock", O_RDWR | O_CREAT | O_CLOEXEC,
		      0644);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		die("--no-page-reporting: cannot lock /run/sonde-test/page_reporting_order.lock");
	FILE *f = fopen(param, "r");
	if (!f || !fgets(old, sizeof(old), f))
		die("--no-page-reporting: this kernel reports no free pages (no page_reporting "
		    "module parameters)");
	fclose(f);
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("--no-page-reporting: fork failed");
	if (pid == 0) {
		/* the restorer: told when the bench is gone, however it ended (a Ctrl-C to the
		 * group reaches this process too, and is for the bench) */
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		prctl(PR_SET_PDEATHSIG, SIGUSR1);
		int sig;
		if (getppid() == bench)
			sigwait(&usr1, &sig);
		_exit(write_param(param, old) == 0 ? 0 : 1);
	}
	sigprocmask(SIG_UNBLOCK, &usr1, NULL);
	if (write_param(param, "11\n") < 0)
		die("--no-page-reporting: cannot write page_reporting_order");
	/* what was reported before stays so until touched: 2 GiB touched and freed now puts
	 * backed pages at the head of the free lists, where the run's allocations (the
	 * buffers, the page cache of the drains) take theirs first; else the first drain
	 * meets the reported ones */
	size_t warm = (size_t)2 << 30;
	void *m = mmap(NULL, warm, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m != MAP_FAILED)
		munmap(m, warm);
	old[strcspn(old, "\n")] = 0;
	printf("trace_bench: free page reporting off for the run (page_reporting_order %s -> 11, "
	       "restored at exit)\n",
	       old);
}

int main(int argc, char **argv)
{
	const char *bins[2] = {NULL, NULL};
	double secs = 10;
	uint32_t drain_kb = 256 * 1024;
	bool quick = false, rss_only = false;
	int nb = 0, only = -1, repeat = 1;
	bool no_reporting = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--drain-mb") && i + 1 < argc)
			drain_kb = (uint32_t)atoi(argv[++i]) * 1024;
		else if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--rss"))
			rss_only = true;
		else if (!strcmp(argv[i], "--tcp"))
			over_tcp = true;
		else if (!strcmp(argv[i], "--tcp-vs-smb"))
			tcp_vs_smb = true;
		else if (!strcmp(argv[i], "--case") && i + 1 < argc)
			only = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-page-reporting"))
			no_reporting = true;
		else if (argv[i][0] != '-' && nb < 2)
			bins[nb++] = argv[i];
		else {
			fprintf(stderr,
				"usage: trace_bench SONDED [PEER] [--seconds N] "
				"[--drain-mb N] [--quick] [--case 0-9] [--repeat N] [--rss] "
				"[--tcp | --tcp-vs-smb] [--no-page-reporting]\n");
			return 2;
		}
	}
	if (!nb) {
		fprintf(stderr,
			"usage: trace_bench SONDED [PEER] [--seconds N] [--drain-mb N] "
			"[--quick] [--case 0-9] [--repeat N] [--rss] [--tcp | --tcp-vs-smb] "
			"[--no-page-reporting]\n");
		return 2;
	}
	if (no_reporting)
		page_reporting_off();
	signal(SIGPIPE, SIG_IGN);
	sonde_log__set_level(SONDE_LOG_ERROR);
	static struct results res[2];
	if (tcp_vs_smb && nb == 1)
		bins[nb++] = bins[0];
	struct svc svcs[2] = {{.bin = bins[0], .label = "sonded", .tcp = over_tcp || tcp_vs_smb},
			      {.bin = bins[1], .label = "peer", .tcp = over_tcp}};
	run_all(svcs, nb, secs, drain_kb, quick, only, repeat, rss_only, res);
	if (only >= 0)
		return 0;
	printf("trace_bench: %.0f s per ingest case; drain of a %u MiB buffer; client: "
	       "libsonde%s\n",
	       secs, drain_kb / 1024,
	       over_tcp	    ? "; producers over TCP on loopback (shared-memory emulation)"
	       : tcp_vs_smb ? "; the first service's producers over TCP on loopback "
			      "(shared-memory emulation), the peer's over its Unix socket"
			    : "");
	printf("service: %s%s%s\n", bins[0], nb > 1 ? ", peer: " : "", nb > 1 ? bins[1] : "");
	report(&res[0], nb > 1 ? &res[1] : NULL, quick, rss_only);
	if (tcp_vs_smb && !rss_only) {
		double s = secs < 3 ? secs : 3;
		printf("\nloopback TCP with no service: %.0f MB/s in 96 KiB writes, %.0f MB/s in 1 "
		       "MiB writes\n",
		       loopback_mbps(96 << 10, s), loopback_mbps(1 << 20, s));
	}
	return 0;
}
