#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "hostile_util.h"
#include "ipc/protos.h"
#include "ipc/smb.h"

enum {
	W_PACKETS_PER_CHUNK = 50,
	W_READ_EVERY = 16, /* steps; ~16 KiB, far below the buffer size */
	W_BUFFER_KB = 256,
	RSS_SLACK_KB = 6 * 1024, /* allocator noise, the two 256 KiB rings being touched */
	W_FIELD_TAG = 900,
	W_FIELD_SEQ = 901,
};

/* ------------------------------------------------------------------ /proc */

int proc_fd_count(pid_t pid)
{
	char path[64];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

char *proc_fd_snapshot(pid_t pid)
{
	char path[64], fdpath[320], link[256], line[400];
	struct buf b = BUF_INIT;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		FAIL("cannot list %s: %s", path, strerror(errno));
	sonde__buf_append(&b, "\n", 1);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
		ssize_t n = readlink(fdpath, link, sizeof(link) - 1);
		if (n < 0)
			continue; /* closed meanwhile */
		link[n] = '\0';
		int len = snprintf(line, sizeof(line), "%s %s\n", e->d_name, link);
		sonde__buf_append(&b, line, (size_t)len);
	}
	closedir(d);
	sonde__buf_append(&b, "", 1);
	ASSERT_OK(buf_error(&b));
	return (char *)b.data;
}

/* The entries of now that base has not, or NULL. Both are snapshots: "\n" and then
 * "FD TARGET\n" per descriptor, so an entry is found whole with its newlines around. */
static char *fd_new(const char *now, const char *base)
{
	struct buf b = BUF_INIT;
	char want[420];

	for (const char *p = now + 1, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
		snprintf(want, sizeof(want), "\n%.*s\n", (int)(nl - p), p);
		if (!strstr(base, want))
			sonde__buf_append(&b, want, strlen(want) - 1);
	}
	if (!b.len)
		return NULL;
	sonde__buf_append(&b, "", 1);
	ASSERT_OK(buf_error(&b));
	return (char *)b.data;
}

char *proc_fd_new_since(pid_t pid, const char *base, int timeout_ms)
{
	double end = test_now() + timeout_ms / 1000.0;

	for (;;) {
		char *now = proc_fd_snapshot(pid), *extra = fd_new(now, base);
		free(now);
		if (!extra || test_now() > end)
			return extra;
		free(extra);
		usleep(20000);
	}
}

double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, st = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double proc_runnable_s(pid_t pid)
{
	char path[64];
	unsigned long long run, wait;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	n = fscanf(f, "%llu %llu", &run, &wait);
	fclose(f);
	return n == 2 ? (double)(run + wait) / 1e9 : -1;
}

long proc_rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* ------------------------------------------------------------------ witness */

static void witness_packet(struct buf *b, uint32_t n)
{
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, (uint64_t)n + 1);
	sonde__pb_put_string(b, W_FIELD_TAG, "witness");
	sonde__pb_put_varint(b, W_FIELD_SEQ, n);
}

static void witness_up(struct witness *w, const struct sonded *d)
{
	static const char *const ds[] = {"witness.ds"};
	struct buf cfg = BUF_INIT;
	struct tcmd cmd;

	memset(w, 0, sizeof(*w));
	tprod_open(&w->p, d->psock, "witness-producer", false);
	tprod_register(&w->p, "witness.ds", false, false);
	tc_open(&w->c, d->csock, "ConsumerPort");
	tcfg_basic(&cfg, W_BUFFER_KB, ds, 1);
	w->enable_req = tcons_enable(&w->c, &cfg, -1);
	tprod_expect(&w->p, PF_ASYNC_CMD_SETUP_DATA_SOURCE, &cmd);
	w->target = cmd.target_buffer;
	tprod_expect(&w->p, PF_ASYNC_CMD_START_DATA_SOURCE, &cmd);
	ASSERT(w->p.smb != NULL);
	sonde__buf_free(&cfg);
}

/* One chunk of numbered packets, committed; every few steps a read. */
static void witness_step(struct witness *w)
{
	struct buf pk[W_PACKETS_PER_CHUNK];
	struct iovec v[W_PACKETS_PER_CHUNK];
	unsigned page = w->steps % (unsigned)(w->p.smb_size / w->p.page);
	unsigned moves[1][2] = {{page, 0}};

	for (int i = 0; i < W_PACKETS_PER_CHUNK; i++) {
		pk[i] = (struct buf)BUF_INIT;
		witness_packet(&pk[i], w->packets + (uint32_t)i);
		v[i] = (struct iovec){pk[i].data, pk[i].len};
	}
	tprod_chunk(&w->p, page, SMB_LAYOUT_DIV1, 0, 1, w->chunk_id++, 0, v, W_PACKETS_PER_CHUNK,
		    true);
	tprod_commit(&w->p, moves, 1, w->target, 0, NULL);
	w->packets += W_PACKETS_PER_CHUNK;
	for (int i = 0; i < W_PACKETS_PER_CHUNK; i++)
		sonde__buf_free(&pk[i]);
	if (++w->steps % W_READ_EVERY == 0)
		tcons_read(&w->c, &w->trace);
}

/* Field 901 of a witness packet, or -1 for another packet. Fails on a damaged one. */
static int64_t witness_seq(const struct tpkt *pk)
{
	struct pb_reader r = pb_reader_init(pk->p, pk->len);
	struct pb_field f;
	int64_t seq = -1, ts = -1;
	bool tag = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == W_FIELD_SEQ)
			seq = (int64_t)f.u;
		else if (f.num == PF_PACKET_TIMESTAMP)
			ts = (int64_t)f.u;
		else if (f.num == W_FIELD_TAG)
			tag = f.len == 7 && !memcmp(f.ptr, "witness", 7);
	}
	if (seq < 0)
		return -1;
	if (!tag || ts != seq + 1)
		FAIL("witness packet %lld is damaged", (long long)seq);
	return seq;
}

/* Disables the witness session and checks that packets 0..n-1 all arrived once. */
static void witness_check(struct witness *w)
{
	struct tcmd cmd;
	struct tpkt pk;
	size_t off = 0;
	uint32_t found = 0;

	tc_msg_free(tc_ok(&w->c, tc_call(&w->c, "DisableTracing", NULL, -1, false)));
	tprod_expect(&w->p, PF_ASYNC_CMD_STOP_DATA_SOURCE, &cmd);
	free(tcons_wait_disabled(&w->c, w->enable_req, 10000));
	tcons_read(&w->c, &w->trace);
	uint8_t *seen = calloc(w->packets + 1, 1);
	ASSERT(seen != NULL);
	while (trace_next(&w->trace, &off, &pk)) {
		int64_t s = witness_seq(&pk);
		if (s < 0)
			continue;
		ASSERT_INT(s, <, w->packets);
		if (seen[s]++)
			FAIL("witness packet %lld arrived twice", (long long)s);
		ASSERT_INT(pk.dropped, ==, s == 0); /* no loss after the first packet */
		found++;
	}
	for (uint32_t i = 0; i < w->packets; i++)
		if (!seen[i])
			FAIL("witness packet %u of %u was lost", i, w->packets);
	ASSERT_UINT(found, ==, w->packets);
	free(seen);
}

/* ------------------------------------------------------------------ the rig */

/* Whether sonded lists data source name, asked over the witness's consumer connection (a
 * connection of its own would be one more fd in sonded until sonded has seen it close). */
static bool lists_data_source(struct tc *t, const char *name)
{
	uint64_t id = tc_call(t, "QueryServiceState", NULL, -1, false);
	bool found = false, more = true;

	while (more) {
		struct tc_msg *m = tc_wait(t, id, 10000);
		if (!m)
			FAIL("QueryServiceState was not answered");
		ASSERT(m->f.success);
		found |= m->f.data && memmem(m->f.data, m->f.data_len, name, strlen(name));
		more = m->f.has_more;
		tc_msg_free(m);
	}
	return found;
}

/* sonded's `sonde probes` child connects some time after the sockets listen: more fds in
 * sonded (the accepted connection, later its SMB). On a loaded machine that can come
 * after the witness is up, so the baseline waits for it. */
static void wait_perf_producer(struct hostile *h)
{
	for (double end = test_now() + 10; !lists_data_source(&h->w.c, "linux.perf");) {
		if (test_now() > end)
			FAIL("sonded's linux.perf data source never registered");
		usleep(20000);
	}
}

static void take_baseline(struct hostile *h, bool perf)
{
	if (perf)
		wait_perf_producer(h);
	/* a few rounds first, so that buffers and caches reached their working size; these
	 * round trips also come after sonded saw sonded_start's probe connections close */
	for (int i = 0; i < 2 * W_READ_EVERY; i++)
		witness_step(&h->w);
	h->fds0 = proc_fd_count(h->d.pid);
	h->rss0 = proc_rss_kb(h->d.pid);
	ASSERT_INT(h->fds0, >, 0);
	ASSERT_INT(h->rss0, >, 0);
}

void hostile_up_args(struct hostile *h, const char *ds, const char *const *extra)
{
	memset(h, 0, sizeof(*h));
	/* sanitizer builds: freed memory must really be freed for the RSS baseline to mean
	 * anything, so no quarantine in the daemon */
	const char *asan = getenv("ASAN_OPTIONS");
	char opts[512];
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0", asan ? asan : "",
		 asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
	h->quiet =
		mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT(h->quiet != MAP_FAILED);
	*h->quiet = 0;
	sonded_start(&h->d, extra);
	witness_up(&h->w, &h->d);
	if (ds) {
		const char *const dss[] = {ds};
		struct buf cfg = BUF_INIT;
		tc_open(&h->hc, h->d.csock, "ConsumerPort");
		tcfg_basic(&cfg, W_BUFFER_KB, dss, 1);
		h->hc_enable = tcons_enable(&h->hc, &cfg, -1);
		h->has_hc = true;
		sonde__buf_free(&cfg);
	}
	bool perf = true;
	for (const char *const *a = extra; a && *a; a++)
		perf &= strcmp(*a, "--no-perf") != 0 && strcmp(*a, "--no-probes") != 0;
	take_baseline(h, perf);
}

void hostile_up(struct hostile *h, const char *ds)
{
	hostile_up_args(h, ds, NULL);
}

int hostile_run(struct hostile *h, int (*fn)(void *), void *arg, int timeout_s)
{
	double end = test_now() + timeout_s;
	int st;

	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0)
		_exit(fn(arg));
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (test_now() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			FAIL("the attacker still runs after %d s", timeout_s);
		}
		if (!*h->quiet)
			witness_step(&h->w);
		usleep(2000);
	}
	/* the witness goes on after the attack too */
	for (int i = 0; i < W_READ_EVERY; i++)
		witness_step(&h->w);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void wait_baseline(struct hostile *h)
{
	double end = test_now() + 20;
	int fds;
	long rss;

	for (;;) {
		fds = proc_fd_count(h->d.pid);
		rss = proc_rss_kb(h->d.pid);
		if (fds == h->fds0 && rss <= h->rss0 + RSS_SLACK_KB)
			return;
		if (test_now() > end)
			break;
		witness_step(&h->w);
		usleep(50000);
	}
	FAIL("sonded did not return to its baseline: %d fds (baseline %d), RSS %ld KiB "
	     "(baseline %ld KiB, slack %d KiB)",
	     fds, h->fds0, rss, h->rss0, RSS_SLACK_KB);
}

void hostile_down(struct hostile *h)
{
	wait_baseline(h);
	witness_check(&h->w);
	if (h->has_hc)
		tc_close(&h->hc);
	tc_close(&h->w.c);
	tc_close(&h->w.p.t);
	sonde__buf_free(&h->w.trace);
	sonded_stop(&h->d);
	munmap((void *)h->quiet, sizeof(int));
}

void hostile_read_attacker_session(struct hostile *h)
{
	struct buf trace = BUF_INIT;
	struct tpkt pk;
	size_t off = 0;

	ASSERT(h->has_hc);
	tcons_read(&h->hc, &trace); /* asserts frame sizes and whole packets */
	while (trace_next(&trace, &off, &pk))
		ASSERT(pk.has_seq || pk.len == 0);
	sonde__buf_free(&trace);
}

uint64_t hostile_stat(struct tc *t, uint32_t field)
{
	uint64_t v = tcons_stat(t, -1, field);

	return v == UINT64_MAX ? 0 : v;
}

/* ------------------------------------------------------------------ attacker helpers */

bool hostile_producer_started(struct tprod *p, const struct hostile *h, const char *name,
			      uint32_t *target)
{
	struct tcmd cmd;

	tprod_open(p, h->d.psock, name, true);
	tprod_register(p, "hostile.ds", false, false);
	if (!tprod_cmd(p, &cmd, 10000) || cmd.kind != PF_ASYNC_CMD_SETUP_DATA_SOURCE)
		return false;
	*target = cmd.target_buffer;
	tc_msg_free(cmd.m);
	if (!tprod_cmd(p, &cmd, 10000) || cmd.kind != PF_ASYNC_CMD_START_DATA_SOURCE)
		return false;
	tc_msg_free(cmd.m);
	return p->smb != NULL;
}

void hostile_put_patches(struct buf *a, uint32_t target, unsigned *seed)
{
	static const uint16_t writers[] = {0, 1, 1, 1023, 1024, 65535};
	static const uint64_t offsets[] = {0, 1, 4080, 4084, 4093, 65535, UINT32_MAX, 1ull << 40};
	static const size_t lens[] = {4, 4, 0, 3, 5};
	static const unsigned counts[] = {1, 3, 1025};
	size_t m = sonde__pb_begin(a, PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH);
	unsigned n = counts[(unsigned)rand_r(seed) % 3];

	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_TARGET_BUFFER, target);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_WRITER_ID, writers[(unsigned)rand_r(seed) % 6]);
	sonde__pb_put_varint(a, PF_CHUNK_TO_PATCH_CHUNK_ID, (unsigned)rand_r(seed) % 10);
	for (unsigned i = 0; i < n; i++) {
		size_t pm = sonde__pb_begin(a, PF_CHUNK_TO_PATCH_PATCHES);
		sonde__pb_put_varint(a, PF_PATCH_OFFSET, offsets[(unsigned)rand_r(seed) % 8]);
		sonde__pb_put_bytes(a, PF_PATCH_DATA, "XXXXX", lens[(unsigned)rand_r(seed) % 5]);
		sonde__pb_end(a, pm);
	}
	sonde__pb_put_bool(a, PF_CHUNK_TO_PATCH_HAS_MORE_PATCHES, rand_r(seed) & 1);
	sonde__pb_end(a, m);
}

/* ------------------------------------------------------------------ raw sockets */

static int wait_fd(int fd, short ev, int timeout_ms)
{
	struct pollfd p = {fd, ev, 0};
	int rc = poll(&p, 1, timeout_ms);

	return rc < 0 ? -errno : rc;
}

int raw_send(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t done = 0;
	double end = test_now() + 30;

	while (done < n) {
		ssize_t w = send(fd, b + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (!done && wait_fd(fd, POLLOUT, 100) == 0)
			return -EAGAIN; /* the peer is not reading us: nothing sent */
		if (test_now() > end)
			return -ETIMEDOUT;
		wait_fd(fd, POLLOUT, 100);
	}
	return 0;
}

/* Reads one frame (blocking up to timeout_ms); returns its payload length or -1. */
static int raw_read_frame(int fd, uint8_t *out, size_t cap, int timeout_ms)
{
	uint32_t len;
	size_t got = 0;
	double end = test_now() + timeout_ms / 1000.0;

	for (size_t want = 4; got < want;) {
		if (wait_fd(fd, POLLIN, 100) <= 0) {
			if (test_now() > end)
				return -1;
			continue;
		}
		uint8_t *dst = got < 4 ? (uint8_t *)&len + got : out + got - 4;
		ssize_t r = recv(fd, dst, (got < 4 ? 4 : want) - got, 0);
		if (r <= 0)
			return -1;
		got += (size_t)r;
		if (got == 4) {
			if (len > cap)
				return -1;
			want = 4 + len;
		}
	}
	return (int)len;
}

int raw_next_frame(int fd, uint8_t *out, size_t cap, int timeout_ms)
{
	return raw_read_frame(fd, out, cap, timeout_ms);
}

bool raw_bind_answered(int fd, const char *name)
{
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE};
	struct buf b = BUF_INIT;
	static uint8_t in[IPC_BUFFER_SIZE];
	bool ok = false;

	f.name = name;
	f.name_len = strlen(name);
	if (sonde__ipc_frame_encode(&b, &f) < 0 || raw_send(fd, b.data, b.len) < 0) {
		sonde__buf_free(&b);
		return false;
	}
	sonde__buf_free(&b);
	for (double end = test_now() + 10; !ok && test_now() < end;) {
		int n = raw_read_frame(fd, in, sizeof(in), 10000);
		struct ipc_frame g;
		if (n < 0)
			break;
		ok = sonde__ipc_frame_decode(in, (size_t)n, &g) == 0 && g.request_id == 1 &&
		     g.msg == IPC_MSG_BIND_SERVICE_REPLY && g.success;
	}
	return ok;
}

int raw_reply(int fd, uint64_t id, struct raw_reply *out)
{
	static uint8_t in[IPC_BUFFER_SIZE];

	memset(out, 0, sizeof(*out));
	for (double end = test_now() + 10; test_now() < end;) {
		int n = raw_read_frame(fd, in, sizeof(in), 10000);
		struct ipc_frame g;
		if (n < 0)
			return -1;
		if (sonde__ipc_frame_decode(in, (size_t)n, &g) < 0 || g.request_id != id)
			continue;
		out->msg = (int)g.msg;
		out->success = g.success;
		out->has_more = g.has_more;
		out->data_len = g.data_len;
		if (g.data)
			memcpy(out->data, g.data,
			       g.data_len < sizeof(out->data) ? g.data_len : sizeof(out->data));
		if (g.msg == IPC_MSG_REQUEST_ERROR)
			snprintf(out->error, sizeof(out->error), "%.*s", (int)g.name_len, g.name);
		return out->msg;
	}
	return -1;
}

int raw_invoke(int fd, uint64_t id, uint32_t method, uint32_t wrap_field, const struct buf *args)
{
	struct ipc_frame f = {.request_id = id,
			      .msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = 1,
			      .method_id = method};
	struct buf wrapped = BUF_INIT, b = BUF_INIT;
	int rc;

	if (args && wrap_field) {
		sonde__pb_put_bytes(&wrapped, wrap_field, args->data, args->len);
		args = &wrapped;
	}
	f.data = args ? args->data : NULL;
	f.data_len = args ? args->len : 0;
	rc = sonde__ipc_frame_encode(&b, &f);
	if (rc == 0)
		rc = raw_send(fd, b.data, b.len);
	sonde__buf_free(&b);
	sonde__buf_free(&wrapped);
	return rc;
}

bool raw_wait_eof(int fd, int timeout_ms)
{
	static uint8_t sink[65536];
	double end = test_now() + timeout_ms / 1000.0;

	while (test_now() < end) {
		if (wait_fd(fd, POLLIN, 100) <= 0)
			continue;
		ssize_t r = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return true;
	}
	return false;
}

bool raw_wait_hangup(int fd, int timeout_ms)
{
	double end = test_now() + timeout_ms / 1000.0;

	while (test_now() < end) {
		struct pollfd p = {fd, POLLRDHUP, 0};
		if (poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return true;
	}
	return false;
}

void raw_drain(int fd)
{
	static uint8_t sink[65536];

	while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
}
