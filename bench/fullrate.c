/* Full-rate loss benchmark: one producer writes 8 KiB packets as fast as it can, one
 * writer per thread, dropping packets when its shared memory buffer is full (what the
 * Perfetto SDK does by default), into a 64 MiB ring for a fixed duration. The trace is then
 * read back and, for every writer's sequence, the numbered packets missing from the
 * retained window (first to last number seen) are counted: that is what a user loses to
 * a service that does not keep up.
 *
 * usage: fullrate SONDED [PEER] [--pairs N] [--seconds S] [--threads T] [--pkt BYTES]
 *                 [--verbose]
 *
 * Each run starts a fresh service (PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME
 * in a temporary directory, no arguments), one producer and one consumer. With a PEER
 * (e.g. Perfetto's traced), the two services are measured in pairs, in alternating order,
 * and the medians are compared; the spread from run to run is wide, so use many pairs.
 *
 * The producer is sonde's client library, unless $FULLRATE_PRODUCER holds a command
 * (run with /bin/sh -c, e.g. an app built on the Perfetto SDK). Such a producer must
 * register the data source "bench.fullrate", write TracePacket{for_testing{seq_value=N}}
 * with N counting up from 0 on each writer while the data source runs, and may print the
 * number of packets it attempted on stdout before it exits.
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/log.h>

enum { MAX_THREADS = 64, MAX_SEQS = 256, MAX_PAIRS = 200, BUFFER_KB = 64 * 1024 };

static const char DS_NAME[] = "bench.fullrate";
static bool verbose;

struct svc {
	const char *bin, *label;
	pid_t pid;
	char dir[64], psock[128], csock[128];
};

struct run {
	double missing;	    /* share of the retained window's numbers missing */
	double ingest_mbps; /* bytes that reached the buffer, per second of session */
	double write_rate;  /* packets per second the producer attempted (0: unknown) */
	double svc_cpu_gb;  /* service CPU seconds per GB that reached the buffer */
	uint64_t window, received, abi_violations;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What a failed run leaves running: the service and the producer's process group. */
static pid_t running_service, running_producers;

static void die(const char *msg)
{
	fprintf(stderr, "fullrate: %s\n", msg);
	if (running_producers)
		kill(-running_producers, SIGKILL);
	if (running_service)
		kill(running_service, SIGKILL);
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

static void svc_start(struct svc *s)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/fullrate.XXXXXX");
	if (!mkdtemp(s->dir))
		die("mkdtemp failed");
	char dir[sizeof(s->dir)];
	memcpy(dir, s->dir, sizeof(dir)); /* a copy keeps -Wrestrict quiet about s->dir */
	snprintf(s->psock, sizeof(s->psock), "%s/p.sock", dir);
	snprintf(s->csock, sizeof(s->csock), "%s/c.sock", dir);
	setenv("PERFETTO_PRODUCER_SOCK_NAME", s->psock, 1);
	setenv("PERFETTO_CONSUMER_SOCK_NAME", s->csock, 1);
	fflush(NULL);
	s->pid = fork();
	if (s->pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(s->bin, s->bin, (char *)NULL);
		_exit(127);
	}
	running_service = s->pid;
	double end = now_s() + 10;
	while (!(can_connect(s->psock) && can_connect(s->csock))) {
		if (now_s() > end)
			die("the service did not start listening");
		usleep(10000);
	}
}

static void svc_stop(struct svc *s)
{
	running_service = 0;
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
static double svc_cpu(const struct svc *s)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", s->pid);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("cannot read the service's /proc/PID/stat");
	fclose(f);
	/* fields after the ')' of comm: state is field 3, utime 14, stime 15 */
	const char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		die("cannot parse /proc/PID/stat");
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---------------------------------------------------------------- sonde's producer */

struct writer_thread {
	struct prod *p;
	pthread_t th;
	uint64_t written;
};

struct prod {
	struct sonde_producer *p;
	uint64_t instance;
	int nthreads;
	size_t pkt_size;
	struct writer_thread t[MAX_THREADS];
	atomic_bool stop;
	bool running, done;
};

/* Writes like the SDK: a packet with a nested for_testing message {seq_value, str}, the
 * message's length filled in at its end (patched when it spans chunks), on a writer of
 * this thread's own; packets are dropped, not waited for, when no chunk is free. */
static void *writer_main(void *arg)
{
	struct writer_thread *wt = arg;
	struct prod *p = wt->p;
	size_t body = p->pkt_size > 32 ? p->pkt_size - 20 : 8;
	char *str = malloc(body);
	struct sonde_trace_writer *w = sonde_producer__new_writer(p->p, p->instance);

	if (!str || !w) {
		free(str);
		sonde_trace_writer__free(w);
		return NULL;
	}
	memset(str, 'x', body);
	uint32_t n = 0;
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
		sonde_trace_writer__begin_packet(w);
		sonde_trace_writer__begin_nested(w, 900);   /* for_testing */
		sonde_trace_writer__append_varint(w, 2, n); /* seq_value */
		sonde_trace_writer__append_bytes(w, 1, str, body);
		sonde_trace_writer__end_packet(w);
		n++;
	}
	wt->written = n;
	sonde_trace_writer__free(w);
	free(str);
	return NULL;
}

static void prod_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct prod *p = ctx;
	p->instance = id;
	atomic_store(&p->stop, false);
	for (int i = 0; i < p->nthreads; i++) {
		p->t[i].p = p;
		if (pthread_create(&p->t[i].th, NULL, writer_main, &p->t[i]) != 0)
			_exit(3);
	}
	p->running = true;
}

static void prod_stop(void *ctx, uint64_t id)
{
	struct prod *p = ctx;
	if (!p->running)
		return;
	atomic_store(&p->stop, true);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->t[i].th, NULL);
	p->running = false;
	p->done = true;
}

/* The producer process: runs one session, prints the packets attempted to `out`. */
static void prod_child(int out, int nthreads, size_t pkt_size)
{
	static struct prod p;
	p.nthreads = nthreads;
	p.pkt_size = pkt_size;
	/* the SDK's defaults: no SMB hints, scraping on, drop when the SMB is full */
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "bench-fullrate",
					 .smb_scraping = SONDE_SMB_SCRAPING_ENABLED,
					 .stall_ms = 0,
					 .stall_ms_set = true};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = prod_start,
					    .stop = prod_stop,
					    .ctx = &p,
					    .will_notify_on_stop = true};
	if (!(p.p = sonde_producer__new(&po)))
		_exit(2);
	sonde_producer__register_data_source(p.p, DS_NAME, &cbs);
	double end = now_s() + 600;
	while (!p.done && now_s() < end && sonde_producer__poll(p.p, 100) >= 0)
		;
	for (int i = 0; i < 5; i++) /* let the stop ack and the last commits out */
		sonde_producer__poll(p.p, 20);
	uint64_t total = 0;
	for (int i = 0; i < nthreads; i++)
		total += p.t[i].written;
	dprintf(out, "%" PRIu64 "\n", total);
	/* stay connected until the trace has been read: a service scrapes the SMB of a
	 * producer that disconnects, into the buffer being read */
	while (sonde_producer__poll(p.p, 1000) >= 0)
		;
	_exit(0);
}

struct producer_proc {
	pid_t pid;
	int out;
};

static void spawn_producer(struct producer_proc *pp, const char *cmd, int nthreads, size_t pkt)
{
	int fds[2];
	if (pipe(fds) < 0)
		die("pipe");
	fflush(NULL);
	pp->pid = fork();
	if (pp->pid == 0) {
		/* A group of its own: the command the shell starts is ended with it. */
		setpgid(0, 0);
		close(fds[0]);
		if (!cmd)
			prod_child(fds[1], nthreads, pkt);
		dup2(fds[1], 1);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pp->pid, pp->pid);
	running_producers = pp->pid;
	close(fds[1]);
	pp->out = fds[0];
}

/* Reaps the producer; returns the packets it says it attempted (0 if it did not say). */
static uint64_t reap_producer(struct producer_proc *pp)
{
	char buf[64] = "";
	struct pollfd pf = {.fd = pp->out, .events = POLLIN};
	uint64_t n = 0;
	if (poll(&pf, 1, 5000) > 0) {
		ssize_t k = read(pp->out, buf, sizeof(buf) - 1);
		if (k > 0)
			n = strtoull(buf, NULL, 10);
	}
	close(pp->out);
	running_producers = 0;
	kill(-pp->pid, SIGTERM);
	waitpid(pp->pid, NULL, 0);
	return n;
}

/* ---------------------------------------------------------------- the trace */

struct seq_window {
	uint64_t seq_id;
	uint32_t first, last;
	uint64_t seen;
};

struct tally {
	struct seq_window s[MAX_SEQS];
	int n;
	uint64_t foreign; /* packets without a for_testing.seq_value (service packets) */
	uint32_t *nums;	  /* --verbose: the first sequence's numbers, in reading order */
	size_t nnums, capnums;
};

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

/* Finds field `num` (varint, or length-delimited when want_len) in a message. */
static bool find_field(const uint8_t *p, const uint8_t *end, uint32_t num, bool want_len,
		       uint64_t *v, const uint8_t **sub, size_t *sub_len)
{
	while (p < end) {
		uint64_t key, x;
		if (!read_varint(&p, end, &key))
			return false;
		uint32_t f = (uint32_t)(key >> 3), wt = key & 7;
		if (wt == 0) {
			if (!read_varint(&p, end, &x))
				return false;
			if (f == num && !want_len) {
				*v = x;
				return true;
			}
		} else if (wt == 2) {
			if (!read_varint(&p, end, &x) || x > (uint64_t)(end - p))
				return false;
			if (f == num && want_len) {
				*sub = p;
				*sub_len = (size_t)x;
				return true;
			}
			p += x;
		} else if (wt == 1 || wt == 5) {
			size_t k = wt == 1 ? 8 : 4;
			if ((size_t)(end - p) < k)
				return false;
			p += k;
		} else {
			return false;
		}
	}
	return false;
}

static void on_packet(void *ctx, const void *pkt, size_t len)
{
	struct tally *t = ctx;
	const uint8_t *p = pkt, *end = p + len, *ft;
	size_t ft_len;
	uint64_t seq_id = 0, n;

	if (!find_field(p, end, 900, true, NULL, &ft, &ft_len) ||
	    !find_field(ft, ft + ft_len, 2, false, &n, NULL, NULL)) {
		t->foreign++;
		return;
	}
	find_field(p, end, 10, false, &seq_id, NULL, NULL); /* trusted_packet_sequence_id */
	int i = 0;
	while (i < t->n && t->s[i].seq_id != seq_id)
		i++;
	if (i == t->n) {
		if (t->n == MAX_SEQS)
			return;
		t->s[t->n++] = (struct seq_window){
			.seq_id = seq_id, .first = (uint32_t)n, .last = (uint32_t)n};
	}
	struct seq_window *w = &t->s[i];
	if (i == 0 && verbose) {
		if (t->nnums == t->capnums) {
			t->capnums = t->capnums ? t->capnums * 2 : 4096;
			t->nums = realloc(t->nums, t->capnums * sizeof(*t->nums));
		}
		t->nums[t->nnums++] = (uint32_t)n;
	}
	if ((uint32_t)n < w->first)
		w->first = (uint32_t)n;
	if ((uint32_t)n > w->last)
		w->last = (uint32_t)n;
	w->seen++;
}

/* --verbose: where in the window the packets that got through lie, and the buffer's
 * statistics (after the session, and after reading). */
static void print_details(const struct tally *t, const struct sonde_buffer_stats *b,
			  const struct sonde_buffer_stats *a)
{
	if (t->n) {
		int tenth[10] = {0};
		uint64_t span = (uint64_t)(t->s[0].last - t->s[0].first) + 1;
		for (size_t i = 0; i < t->nnums; i++)
			tenth[(uint64_t)(t->nums[i] - t->s[0].first) * 10 / span]++;
		fprintf(stderr, "    first sequence, received per tenth of its window (%.0f each):",
			span / 10.0);
		for (int i = 0; i < 10; i++)
			fprintf(stderr, " %d", tenth[i]);
		fprintf(stderr, "\n");
	}
	fprintf(stderr,
		"    %d sequences, %" PRIu64 " service packets; buffer: %" PRIu64
		" chunks written, %" PRIu64 " overwritten, %" PRIu64 " discarded, patches %" PRIu64
		" ok %" PRIu64 " failed, %" PRIu64 " packets lost by the writer; read: %" PRIu64
		" chunks, %" PRIu64 " bytes, readaheads %" PRIu64 " ok %" PRIu64 " failed\n",
		t->n, t->foreign, b->chunks_written, b->chunks_overwritten, b->chunks_discarded,
		b->patches_succeeded, b->patches_failed, b->trace_writer_packet_loss,
		a->chunks_read, a->bytes_read, a->readaheads_succeeded, a->readaheads_failed);
}

/* ---------------------------------------------------------------- one run */

static bool ds_registered(const struct svc *s)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = s->csock};
	struct sonde_consumer *c = sonde_consumer__new(&co);
	struct sonde_service_state *st;
	bool found = false;

	if (!c)
		die("cannot connect a consumer");
	if (sonde_consumer__query_service_state_sync(c, &st, 10000) < 0)
		die("QueryServiceState failed");
	for (size_t i = 0; i < st->n_data_sources; i++)
		found |= strcmp(st->data_sources[i].name, DS_NAME) == 0;
	sonde_service_state__free(st);
	sonde_consumer__free(c);
	return found;
}

static void run_once(struct svc *s, const char *cmd, int nthreads, size_t pkt, double secs,
		     struct run *r)
{
	static struct tally t;
	struct producer_proc pp;
	struct sonde_trace_stats st;

	memset(&t, 0, sizeof(t));
	svc_start(s);
	spawn_producer(&pp, cmd, nthreads, pkt);
	for (double end = now_s() + 30; !ds_registered(s); usleep(20000))
		if (now_s() > end)
			die("the producer did not register its data source");

	struct sonde_trace_config_opts o = {.sz = sizeof(o),
					    .duration_ms = (uint32_t)(secs * 1000)};
	struct sonde_trace_config *cfg = sonde_trace_config__new(&o);
	uint8_t *bytes = NULL;
	size_t len;
	if (!cfg || sonde_trace_config__add_buffer(cfg, BUFFER_KB, SONDE_FILL_RING_BUFFER) < 0 ||
	    sonde_trace_config__add_data_source(cfg, DS_NAME, 0, NULL, 0) < 0 ||
	    sonde_trace_config__encode(cfg, &bytes, &len) < 0)
		die("cannot build the config");
	sonde_trace_config__free(cfg);

	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = s->csock};
	struct sonde_consumer *c = sonde_consumer__new(&co);
	struct sonde_consumer_cbs cbs = {.sz = sizeof(cbs), .on_packet = on_packet, .ctx = &t};
	if (!c)
		die("cannot connect a consumer");
	sonde_consumer__set_callbacks(c, &cbs);
	double t0 = now_s(), cpu0 = svc_cpu(s);
	if (sonde_consumer__enable_tracing(c, bytes, len, -1) < 0)
		die("EnableTracing failed");
	if (sonde_consumer__wait_disabled(c, (int)(secs * 1000) + 30000, NULL, 0) < 0)
		die("the session did not end");
	double t1 = now_s(), cpu1 = svc_cpu(s);
	if (sonde_consumer__get_trace_stats_sync(c, &st, 10000) < 0 || st.n_buffers < 1)
		die("GetTraceStats failed");
	if (sonde_consumer__read_buffers_sync(c, 120000) < 0)
		die("ReadBuffers failed");
	struct sonde_trace_stats after;
	if (verbose &&
	    (sonde_consumer__get_trace_stats_sync(c, &after, 10000) < 0 || after.n_buffers < 1))
		die("GetTraceStats failed");
	sonde_consumer__free(c);
	free(bytes);
	uint64_t attempted = reap_producer(&pp);
	svc_stop(s);

	uint64_t window = 0, seen = 0;
	for (int i = 0; i < t.n; i++) {
		window += (uint64_t)(t.s[i].last - t.s[i].first) + 1;
		seen += t.s[i].seen;
	}
	r->window = window;
	r->received = seen;
	r->missing = window ? (double)(window - seen) / (double)window : 1;
	r->ingest_mbps = (double)st.buffers[0].bytes_written / 1e6 / (t1 - t0);
	r->write_rate = (double)attempted / secs;
	r->svc_cpu_gb = st.buffers[0].bytes_written
				? (cpu1 - cpu0) / ((double)st.buffers[0].bytes_written / 1e9)
				: 0;
	r->abi_violations = st.buffers[0].abi_violations;
	if (verbose)
		print_details(&t, &st.buffers[0], &after.buffers[0]);
	free(t.nums);
}

/* ---------------------------------------------------------------- summary */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct summary {
	double med, lo, hi;
};

static struct summary summarize(const struct run *r, int n, size_t field_off)
{
	double v[MAX_PAIRS];
	for (int i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&r[i] + field_off, sizeof(double));
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return (struct summary){med, v[0], v[n - 1]};
}

static void print_side(const char *label, const struct run *r, int n)
{
	struct summary m = summarize(r, n, offsetof(struct run, missing));
	struct summary g = summarize(r, n, offsetof(struct run, ingest_mbps));
	struct summary w = summarize(r, n, offsetof(struct run, write_rate));
	struct summary c = summarize(r, n, offsetof(struct run, svc_cpu_gb));
	uint64_t abi = 0;
	for (int i = 0; i < n; i++)
		abi += r[i].abi_violations;
	printf("%-8s missing %5.1f %% (%4.1f-%4.1f)   ingest %7.1f MB/s (%6.1f-%6.1f)", label,
	       m.med * 100, m.lo * 100, m.hi * 100, g.med, g.lo, g.hi);
	printf("   svc %.2f cpu s/GB", c.med);
	if (w.med > 0)
		printf("   written %7.0f pkt/s", w.med);
	printf("   abi violations %" PRIu64 "\n", abi);
}

int main(int argc, char **argv)
{
	const char *bins[2] = {NULL, NULL};
	double secs = 2;
	int nb = 0, pairs = 10, nthreads = 1;
	size_t pkt = 8192;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			pairs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			nthreads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pkt") && i + 1 < argc)
			pkt = (size_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--verbose"))
			verbose = true;
		else if (argv[i][0] != '-' && nb < 2)
			bins[nb++] = argv[i];
		else
			nb = -1;
		if (nb < 0)
			break;
	}
	if (nb < 1 || pairs < 1 || pairs > MAX_PAIRS || nthreads < 1 || nthreads > MAX_THREADS ||
	    secs <= 0 || pkt < 64) {
		fprintf(stderr, "usage: fullrate SONDED [PEER] [--pairs N] [--seconds S] "
				"[--threads T] [--pkt BYTES] [--verbose]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	sonde_log__set_level(SONDE_LOG_ERROR);
	const char *cmd = getenv("FULLRATE_PRODUCER");
	if (cmd && !*cmd)
		cmd = NULL;

	static struct run res[2][MAX_PAIRS];
	struct svc svcs[2] = {{.bin = bins[0], .label = "sonded"},
			      {.bin = bins[1], .label = "peer"}};
	printf("fullrate: %zu-byte packets, %d writer thread%s, %.1f s into a %d MiB ring, "
	       "producer: %s\n",
	       pkt, nthreads, nthreads > 1 ? "s" : "", secs, BUFFER_KB / 1024,
	       cmd ? cmd : "libsonde (drop when full)");
	if (nb == 1)
		printf("no peer service given: measuring sonded alone\n");
	for (int i = 0; i < pairs; i++) {
		for (int k = 0; k < nb; k++) {
			int side = nb == 2 && i % 2 ? 1 - k : k; /* alternate which goes first */
			struct run *r = &res[side][i];
			run_once(&svcs[side], cmd, nthreads, pkt, secs, r);
			fprintf(stderr,
				"  %d %-6s missing %5.1f %% of %7" PRIu64
				", ingest %7.1f MB/s, svc %.2f cpu s/GB\n",
				i, svcs[side].label, r->missing * 100, r->window, r->ingest_mbps,
				r->svc_cpu_gb);
		}
	}
	printf("%d %s; median (min-max)\n", pairs, nb == 2 ? "pairs, alternating order" : "runs");
	print_side("sonded", res[0], pairs);
	if (nb == 2) {
		print_side("peer", res[1], pairs);
		struct summary a = summarize(res[0], pairs, offsetof(struct run, missing));
		struct summary b = summarize(res[1], pairs, offsetof(struct run, missing));
		int better = 0;
		for (int i = 0; i < pairs; i++)
			better += res[0][i].missing <= res[1][i].missing;
		printf("sonded - peer: median missing %+.1f points; sonded lost no more in %d of "
		       "%d pairs\n",
		       (a.med - b.med) * 100, better, pairs);
	}
	return 0;
}
