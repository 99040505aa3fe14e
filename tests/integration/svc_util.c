#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "svc_util.h"

void sonded_start(struct sonded *d, const char *const *extra)
{
	sonded_start_at(d, NULL, NULL, extra);
}

void sonded_start_at(struct sonded *d, const char *prod, const char *cons, const char *const *extra)
{
	const char *argv[32] = {test_bin("sonded"), "-p", d->psock, "-c", d->csock, "-x", d->xsock};
	int n = 7;

	if (prod)
		snprintf(d->psock, sizeof(d->psock), "%s", prod);
	else
		snprintf(d->psock, sizeof(d->psock), "%s/prod.sock", test_tmpdir());
	if (cons)
		snprintf(d->csock, sizeof(d->csock), "%s", cons);
	else
		snprintf(d->csock, sizeof(d->csock), "%s/cons.sock", test_tmpdir());
	snprintf(d->xsock, sizeof(d->xsock), "%s/conn.sock", test_tmpdir());
	for (; extra && *extra && n < 30; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	d->pid = test_spawn(argv);
	for (int i = 0; i < 500; i++) {
		int a = sonde__ipc_connect(d->psock),
		    b = a >= 0 ? sonde__ipc_connect(d->csock) : -1;
		/* the connector listens last */
		int x = b >= 0 ? sonde__ipc_connect_type(d->xsock, SOCK_SEQPACKET) : -1;
		if (a >= 0)
			close(a);
		if (b >= 0)
			close(b);
		if (x >= 0) {
			close(x);
			return;
		}
		usleep(10000);
	}
	FAIL("sonded did not start listening on %s", d->csock);
}

void sonded_stop(struct sonded *d)
{
	kill(d->pid, SIGTERM);
	ASSERT_INT(test_wait(d->pid, 20), ==, 0);
}

pid_t sonded_probes_pid(const struct sonded *d, pid_t not, int timeout_s)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)d->pid, (int)d->pid);
	for (int i = 0; i < timeout_s * 100; i++) {
		char *text = test_read_file(path, NULL);
		long pid = text ? atol(text) : 0;
		free(text);
		if (pid > 0 && pid != not )
			return (pid_t)pid;
		usleep(10000);
	}
	FAIL("sonded %d has no probes child", (int)d->pid);
}

/* Reads what t's connection has (waiting up to timeout_ms for it) and queues its frames;
 * returns whether it read anything, a whole frame or not. */
static bool tc_pump(struct tc *t, int timeout_ms)
{
	struct pollfd p = {t->ch.fd, POLLIN, 0};
	struct ipc_frame f;
	int fd, rc;

	sonde__ipc_chan_flush(&t->ch);
	if (poll(&p, 1, timeout_ms) <= 0)
		return false;
	uint64_t had = t->ch.rx_base + t->ch.rx.len;
	rc = sonde__ipc_chan_read(&t->ch);
	while (sonde__ipc_chan_next(&t->ch, &f, &fd) > 0) {
		struct tc_msg *v = realloc(t->q, (t->nq + 1) * sizeof(*v));
		ASSERT(v != NULL);
		t->q = v;
		struct tc_msg *m = &v[t->nq++];
		/* re-decode from a private copy so the frame outlives the channel buffer */
		m->payload = malloc(f.raw_len + 1);
		ASSERT(m->payload != NULL);
		memcpy(m->payload, f.raw, f.raw_len);
		m->len = f.raw_len + IPC_HEADER_SIZE;
		m->fd = fd;
		ASSERT_OK(sonde__ipc_frame_decode(m->payload, f.raw_len, &m->f));
	}
	if (rc < 0 && rc != -ECONNRESET)
		FAIL("connection error: %s", sonde_strerror(rc));
	return t->ch.rx_base + t->ch.rx.len != had;
}

bool (*svc_util_pump)(void);

static struct tc_msg *tc_take(struct tc *t, uint64_t req)
{
	for (size_t i = 0; i < t->nq; i++) {
		if (t->q[i].f.request_id != req)
			continue;
		struct tc_msg *m = malloc(sizeof(*m));
		ASSERT(m != NULL);
		*m = t->q[i];
		memmove(&t->q[i], &t->q[i + 1], (t->nq - i - 1) * sizeof(*t->q));
		t->nq--;
		return m;
	}
	return NULL;
}

struct tc_msg *tc_wait(struct tc *t, uint64_t req, int timeout_ms)
{
	double end = test_now() + timeout_ms / 1000.0;
	struct tc_msg *m;

	for (;;) {
		if ((m = tc_take(t, req)))
			return m;
		if (svc_util_pump) {
			/* in-process: the reply is there once the service has nothing left to
			 * do; time passes only when the test advances the clock. Reading part
			 * of a large reply is progress too: the service may have been waiting
			 * for room in the socket to send the rest */
			bool busy = svc_util_pump();
			if (!tc_pump(t, 0) && !busy)
				return NULL;
			continue;
		}
		double left = end - test_now();
		if (left <= 0)
			return NULL;
		tc_pump(t, (int)(left * 1000) + 1);
	}
}

void tc_msg_free(struct tc_msg *m)
{
	if (!m)
		return;
	if (m->fd >= 0)
		close(m->fd);
	free(m->payload);
	free(m);
}

struct tc_msg *tc_ok(struct tc *t, uint64_t req)
{
	struct tc_msg *m = tc_wait(t, req, 10000);

	if (!m)
		FAIL("no reply to request %llu", (unsigned long long)req);
	ASSERT_UINT(m->f.msg, ==, IPC_MSG_INVOKE_METHOD_REPLY);
	ASSERT(m->f.success);
	return m;
}

struct tc_msg *tc_call_key(struct tc *t, const char *method, const char *key)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_string(&a, PF_DETACH_REQ_KEY, key);
	struct tc_msg *m = tc_wait(t, tc_call(t, method, &a, -1, false), 10000);
	sonde__buf_free(&a);
	if (!m)
		FAIL("no reply to %s", method);
	return m;
}

void tc_open(struct tc *t, const char *sock, const char *service)
{
	int fd = sonde__ipc_connect(sock);

	ASSERT_OK(fd);
	tc_open_fd(t, fd, service);
}

void tc_open_fd(struct tc *t, int fd, const char *service)
{
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE};
	struct ipc_method mi;
	size_t it = 0;

	memset(t, 0, sizeof(*t));
	ASSERT_OK(sonde__ipc_chan_init(&t->ch, fd));
	t->next_id = 2;
	f.name = service;
	f.name_len = strlen(service);
	ASSERT_OK(sonde__ipc_chan_send(&t->ch, &f, -1));
	struct tc_msg *m = tc_wait(t, 1, 10000);
	ASSERT(m != NULL);
	ASSERT_UINT(m->f.msg, ==, IPC_MSG_BIND_SERVICE_REPLY);
	ASSERT(m->f.success);
	/* sonded: ProducerPort and ConsumerPort 1, RelayPort 2 */
	ASSERT_UINT(m->f.service_id, ==, strcmp(service, "RelayPort") ? 1 : 2);
	t->service_id = m->f.service_id;
	while (sonde__ipc_methods_next(&m->f, &it, &mi) > 0 && t->nmethods < 32) {
		t->names[t->nmethods] = strndup(mi.name, mi.name_len);
		t->ids[t->nmethods++] = mi.id;
	}
	tc_msg_free(m);
}

void tc_close(struct tc *t)
{
	sonde__ipc_chan_close(&t->ch);
	for (size_t i = 0; i < t->nq; i++) {
		if (t->q[i].fd >= 0)
			close(t->q[i].fd);
		free(t->q[i].payload);
	}
	free(t->q);
	for (size_t i = 0; i < t->nmethods; i++)
		free(t->names[i]);
	memset(t, 0, sizeof(*t));
	t->ch.fd = -1;
}

uint32_t tc_method_id(const struct tc *t, const char *name)
{
	for (size_t i = 0; i < t->nmethods; i++)
		if (!strcmp(t->names[i], name))
			return t->ids[i];
	return 0;
}

uint64_t tc_call(struct tc *t, const char *method, const struct buf *args, int fd, bool drop)
{
	struct ipc_frame f = {.request_id = t->next_id++,
			      .msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = t->service_id,
			      .method_id = tc_method_id(t, method),
			      .drop_reply = drop};

	if (!f.method_id)
		FAIL("method %s not listed by the service", method);
	f.data = args ? args->data : NULL;
	f.data_len = args ? args->len : 0;
	ASSERT_OK(sonde__ipc_chan_send(&t->ch, &f, fd));
	while (ipc_chan_tx_pending(&t->ch)) {
		struct pollfd p = {t->ch.fd, POLLOUT, 0};
		if (svc_util_pump)
			svc_util_pump(); /* the service drains the socket */
		poll(&p, 1, svc_util_pump ? 0 : 1000);
		ASSERT_OK(sonde__ipc_chan_flush(&t->ch));
	}
	return f.request_id;
}

uint64_t tc_flush(struct tc *t, uint32_t timeout_ms)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_varint(&a, PF_FLUSH_REQ_TIMEOUT_MS, timeout_ms);
	uint64_t id = tc_call(t, "Flush", &a, -1, false);
	sonde__buf_free(&a);
	return id;
}

/* ------------------------------------------------------------------ producer */

void tprod_open(struct tprod *p, const char *sock, const char *name, bool scraping)
{
	int fd = sonde__ipc_connect(sock);

	ASSERT_OK(fd);
	tprod_open_fd(p, fd, name, scraping);
}

void tprod_open_fd(struct tprod *p, int fd, const char *name, bool scraping)
{
	struct buf a = BUF_INIT;

	memset(p, 0, sizeof(*p));
	tc_open_fd(&p->t, fd, "ProducerPort");
	sonde__pb_put_varint(&a, PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES, 4096);
	sonde__pb_put_varint(&a, PF_INIT_CONN_REQ_SIZE_HINT_BYTES, 65536);
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, name);
	sonde__pb_put_varint(&a, PF_INIT_CONN_REQ_SMB_SCRAPING_MODE,
			     scraping ? PF_SMB_SCRAPING_ENABLED : PF_SMB_SCRAPING_DISABLED);
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_SDK_VERSION, "sonde-test");
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "InitializeConnection", &a, -1, false)));
	p->cmd_req = tc_call(&p->t, "GetAsyncCommand", NULL, -1, false);
	sonde__buf_free(&a);
}

void tprod_register(struct tprod *p, const char *ds, bool notify_start, bool notify_stop)
{
	struct buf a = BUF_INIT;
	size_t m = sonde__pb_begin(&a, PF_REGISTER_DS_REQ_DESCRIPTOR);

	sonde__pb_put_string(&a, PF_DS_DESCRIPTOR_NAME, ds);
	if (notify_stop)
		sonde__pb_put_bool(&a, PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_STOP, true);
	if (notify_start)
		sonde__pb_put_bool(&a, PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_START, true);
	sonde__pb_end(&a, m);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "RegisterDataSource", &a, -1, false)));
	sonde__buf_free(&a);
}

static void map_smb(struct tprod *p, struct tc_msg *m, struct pb_reader r)
{
	struct pb_field f;
	struct stat st;

	p->setups++;
	ASSERT_INT(p->setups, ==, 1); /* exactly one setup_tracing per connection */
	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_SETUP_TRACING_PAGE_SIZE_KB)
			p->page = f.u * 1024;
	if (m->fd < 0) { /* emulation: the chunks live here and go inline */
		ASSERT(p->page > 0);
		p->emulated = true;
		p->smb_size = p->page * 16;
		p->smb = mmap(NULL, p->smb_size, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ASSERT(p->smb != MAP_FAILED);
		return;
	}
	ASSERT_OK(fstat(m->fd, &st));
	ASSERT(smb_geometry_abi_ok((size_t)st.st_size, p->page));
	p->smb_size = (size_t)st.st_size;
	p->smb = mmap(NULL, p->smb_size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	ASSERT(p->smb != MAP_FAILED);
}

static void parse_cmd(struct tcmd *c, struct pb_reader r)
{
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_VARINT)
			continue;
		if (f.num == 1 && c->kind != PF_ASYNC_CMD_FLUSH)
			c->inst_id = f.u;
		else if (f.num == PF_FLUSH_CMD_REQUEST_ID && c->kind == PF_ASYNC_CMD_FLUSH)
			c->flush_id = f.u;
	}
	(void)g;
}

static void parse_target(struct tcmd *c, struct pb_reader r)
{
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_START_DS_CONFIG || f.wire != PB_LEN)
			continue;
		struct pb_reader cr = pb_sub(&f);
		while (sonde__pb_next(&cr, &g) > 0)
			if (g.num == PF_DS_CONFIG_TARGET_BUFFER && g.wire == PB_VARINT)
				c->target_buffer = (uint32_t)g.u; /* last value wins */
	}
}

bool tprod_cmd(struct tprod *p, struct tcmd *c, int timeout_ms)
{
	for (;;) {
		struct tc_msg *m = tc_wait(&p->t, p->cmd_req, timeout_ms);
		struct pb_reader r;
		struct pb_field f;

		if (!m)
			return false;
		ASSERT(m->f.success);
		ASSERT(m->f.has_more); /* the command stream never ends */
		memset(c, 0, sizeof(*c));
		r = pb_reader_init(m->f.data, m->f.data_len);
		ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
		c->kind = f.num;
		if (f.num == PF_ASYNC_CMD_SETUP_TRACING) {
			map_smb(p, m, pb_sub(&f));
			tc_msg_free(m);
			continue;
		}
		ASSERT_INT(m->fd, ==, -1);
		parse_cmd(c, pb_sub(&f));
		parse_target(c, pb_sub(&f));
		c->m = m;
		return true;
	}
}

void tprod_expect(struct tprod *p, uint32_t kind, struct tcmd *c)
{
	if (!tprod_cmd(p, c, 10000))
		FAIL("no async command (waiting for %u)", kind);
	ASSERT_UINT(c->kind, ==, kind);
	tc_msg_free(c->m);
	c->m = NULL;
}

uint8_t *tprod_chunk(struct tprod *p, unsigned page, unsigned layout, unsigned idx, uint16_t writer,
		     uint32_t chunk_id, unsigned flags, const struct iovec *frags, size_t n,
		     bool complete)
{
	uint32_t bm = smb_bitmap_load(smb_page_bitmap(p->smb, p->page, page));
	uint8_t *c;
	size_t off = SMB_CHUNK_HDR_SIZE;

	ASSERT(p->smb != NULL);
	if (smb_bitmap_layout(bm) != layout)
		ASSERT(smb_try_partition(p->smb, p->page, page, layout));
	c = smb_acquire_for_writing(p->smb, p->page, page, idx);
	ASSERT(c != NULL);
	smb_chunk_init_hdr(c, chunk_id, writer, flags);
	for (size_t i = 0; i < n; i++) {
		ASSERT(off + 4 + frags[i].iov_len <= smb_chunk_size(p->page, layout));
		sonde__pb_write_redundant_len(c + off, (uint32_t)frags[i].iov_len);
		memcpy(c + off + 4, frags[i].iov_base, frags[i].iov_len);
		off += 4 + frags[i].iov_len;
	}
	smb_chunk_set_packets(c, (unsigned)n, flags);
	if (complete)
		ASSERT(smb_mark_complete(p->smb, p->page, page, idx));
	return c;
}

void tprod_commit(struct tprod *p, const unsigned (*moves)[2], size_t n, uint32_t target,
		  uint64_t flush_id, const struct buf *extra)
{
	struct buf a = BUF_INIT;

	for (size_t i = 0; i < n; i++) {
		size_t m = sonde__pb_begin(&a, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_PAGE, moves[i][0]);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_CHUNK, moves[i][1]);
		sonde__pb_put_varint(&a, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, target);
		if (p->emulated) {
			uint32_t bm =
				smb_bitmap_load(smb_page_bitmap(p->smb, p->page, moves[i][0]));
			unsigned layout = smb_bitmap_layout(bm);
			sonde__pb_put_bytes(
				&a, PF_CHUNKS_TO_MOVE_DATA,
				smb_chunk_ptr(p->smb, p->page, moves[i][0], layout, moves[i][1]),
				smb_chunk_size(p->page, layout));
		}
		sonde__pb_end(&a, m);
	}
	if (extra)
		sonde__buf_append(&a, extra->data, extra->len);
	if (flush_id)
		sonde__pb_put_varint(&a, PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID, flush_id);
	tc_msg_free(tc_ok(&p->t, tc_call(&p->t, "CommitData", &a, -1, false)));
	sonde__buf_free(&a);
}

void tprod_notify(struct tprod *p, const char *method, uint64_t inst_id)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_varint(&a, PF_NOTIFY_DS_REQ_DATA_SOURCE_ID, inst_id);
	tc_call(&p->t, method, &a, -1, true);
	sonde__buf_free(&a);
}

/* ------------------------------------------------------------------ consumer */

void tcfg_basic(struct buf *b, uint32_t size_kb, const char *const *ds, size_t n)
{
	size_t m = sonde__pb_begin(b, PF_TRACE_CONFIG_BUFFERS);

	sonde__pb_put_varint(b, PF_BUFFER_CONFIG_SIZE_KB, size_kb);
	sonde__pb_end(b, m);
	for (size_t i = 0; i < n; i++) {
		size_t d = sonde__pb_begin(b, PF_TRACE_CONFIG_DATA_SOURCES);
		size_t c = sonde__pb_begin(b, PF_TC_DATA_SOURCE_CONFIG);
		sonde__pb_put_string(b, PF_DS_CONFIG_NAME, ds[i]);
		sonde__pb_end(b, c);
		sonde__pb_end(b, d);
	}
}

void tcfg_filtered(struct buf *b, const struct tcfg_filter *f)
{
	sonde__buf_reset(b);
	size_t m = sonde__pb_begin(b, PF_TRACE_CONFIG_BUFFERS);
	sonde__pb_put_varint(b, PF_BUFFER_CONFIG_SIZE_KB, 1024);
	sonde__pb_end(b, m);
	size_t d = sonde__pb_begin(b, PF_TRACE_CONFIG_DATA_SOURCES);
	size_t c = sonde__pb_begin(b, PF_TC_DATA_SOURCE_CONFIG);
	sonde__pb_put_string(b, PF_DS_CONFIG_NAME, "test.ds");
	sonde__pb_end(b, c);
	for (size_t i = 0; i < f->n_producers; i++)
		sonde__pb_put_string(b, PF_TC_DATA_SOURCE_PRODUCER_NAME_FILTER, f->producers[i]);
	if (f->regex)
		sonde__pb_put_string(b, PF_TC_DATA_SOURCE_PRODUCER_NAME_REGEX_FILTER, f->regex);
	for (size_t i = 0; i < f->n_machines; i++)
		sonde__pb_put_string(b, PF_TC_DATA_SOURCE_MACHINE_NAME_FILTER, f->machines[i]);
	sonde__pb_end(b, d);
	if (f->duration_ms)
		sonde__pb_put_varint(b, PF_TRACE_CONFIG_DURATION_MS, f->duration_ms);
}

struct tc_msg *tcons_change_config(struct tc *t, const struct buf *cfg)
{
	struct buf a = BUF_INIT;

	sonde__pb_put_bytes(&a, PF_CHANGE_TRACE_CONFIG_REQ_TRACE_CONFIG, cfg->data, cfg->len);
	struct tc_msg *m = tc_wait(t, tc_call(t, "ChangeTraceConfig", &a, -1, false), 10000);
	sonde__buf_free(&a);
	ASSERT(m != NULL);
	return m;
}

uint64_t tcons_enable(struct tc *t, const struct buf *cfg, int fd)
{
	struct buf a = BUF_INIT;
	uint64_t id;

	sonde__pb_put_bytes(&a, PF_ENABLE_TRACING_REQ_TRACE_CONFIG, cfg->data, cfg->len);
	id = tc_call(t, "EnableTracing", &a, fd, false);
	sonde__buf_free(&a);
	return id;
}

char *tcons_wait_disabled(struct tc *t, uint64_t req, int timeout_ms)
{
	struct tc_msg *m = tc_wait(t, req, timeout_ms);

	if (!m)
		FAIL("EnableTracing was not answered within %d ms", timeout_ms);
	return tcons_disabled_reply(m);
}

char *tcons_disabled_reply(struct tc_msg *m)
{
	struct pb_reader r;
	struct pb_field f;
	bool disabled = false;
	char *err = NULL;

	ASSERT(m->f.success);
	ASSERT(!m->f.has_more);
	r = pb_reader_init(m->f.data, m->f.data_len);
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_ENABLE_TRACING_RESP_DISABLED)
			disabled = f.u != 0;
		else if (f.num == PF_ENABLE_TRACING_RESP_ERROR)
			err = strndup((const char *)f.ptr, f.len);
	}
	ASSERT(disabled);
	tc_msg_free(m);
	return err;
}

/* The last value of varint field `field` in r, 0 without one. */
static uint64_t varint_in(struct pb_reader r, uint32_t field)
{
	struct pb_field f;
	uint64_t v = 0;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == field && f.wire == PB_VARINT)
			v = f.u;
	return v;
}

uint64_t tcons_stat(struct tc *t, int buffer, uint32_t field)
{
	struct tc_msg *m = tc_ok(t, tc_call(t, "GetTraceStats", NULL, -1, false));
	struct pb_reader r = pb_reader_init(m->f.data, m->f.data_len);
	struct pb_field f, g;
	uint64_t v = UINT64_MAX;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_GET_TRACE_STATS_RESP_TRACE_STATS || f.wire != PB_LEN)
			continue;
		struct pb_reader sr = pb_sub(&f);
		if (buffer < 0) {
			v = varint_in(sr, field);
			continue;
		}
		for (int i = 0; sonde__pb_next(&sr, &g) > 0;)
			if (g.num == PF_TRACE_STATS_BUFFER_STATS && g.wire == PB_LEN &&
			    i++ == buffer)
				v = varint_in(pb_sub(&g), field);
	}
	tc_msg_free(m);
	return v;
}

void tcons_read(struct tc *t, struct buf *trace)
{
	uint64_t id = tc_call(t, "ReadBuffers", NULL, -1, false);
	struct buf pkt = BUF_INIT;

	for (;;) {
		struct tc_msg *m = tc_wait(t, id, 10000);
		struct pb_reader r, sr;
		struct pb_field f, g;

		if (!m)
			FAIL("ReadBuffers stalled");
		ASSERT(m->f.success);
		ASSERT_UINT(m->len, <=, IPC_BUFFER_SIZE);
		r = pb_reader_init(m->f.data, m->f.data_len);
		while (sonde__pb_next(&r, &f) > 0) {
			if (f.num != PF_READ_BUFFERS_RESP_SLICES)
				continue;
			bool last = false;
			sr = pb_sub(&f);
			while (sonde__pb_next(&sr, &g) > 0) {
				if (g.num == PF_SLICE_DATA)
					sonde__buf_append(&pkt, g.ptr, g.len);
				else if (g.num == PF_SLICE_LAST_SLICE_FOR_PACKET)
					last = g.u != 0;
			}
			if (last) {
				sonde__pb_put_bytes(trace, PF_TRACE_PACKET, pkt.data, pkt.len);
				sonde__buf_reset(&pkt);
			}
		}
		bool more = m->f.has_more;
		tc_msg_free(m);
		if (!more)
			break;
	}
	ASSERT_UINT(pkt.len, ==, 0); /* no packet left half-sent */
	sonde__buf_free(&pkt);
}

/* ------------------------------------------------------------------ inspection */

bool trace_next(const struct buf *trace, size_t *off, struct tpkt *pk)
{
	struct pb_reader r = pb_reader_init(trace->data + *off, trace->len - *off), pr;
	struct pb_field f, g;

	if (sonde__pb_next(&r, &f) <= 0)
		return false;
	ASSERT_UINT(f.num, ==, PF_TRACE_PACKET);
	*off = (size_t)(r.p - trace->data);
	memset(pk, 0, sizeof(*pk));
	pk->p = f.ptr;
	pk->len = f.len;
	pr = pb_sub(&f);
	while (sonde__pb_next(&pr, &g) > 0) {
		if (g.num == PF_PACKET_TRUSTED_UID && g.wire == PB_VARINT)
			pk->uid = (int64_t)g.u, pk->has_uid = true;
		else if (g.num == PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID && g.wire == PB_VARINT)
			pk->seq = g.u, pk->has_seq = true;
		else if (g.num == PF_PACKET_PREVIOUS_PACKET_DROPPED && g.wire == PB_VARINT)
			pk->dropped = g.u != 0;
	}
	return true;
}

int trace_count(const struct buf *trace, const void *needle, size_t n, struct tpkt *last)
{
	struct tpkt pk;
	size_t off = 0;
	int count = 0;

	while (trace_next(trace, &off, &pk)) {
		if (pk.len >= n && memmem(pk.p, pk.len, needle, n)) {
			count++;
			if (last)
				*last = pk;
		}
	}
	return count;
}

int trace_count_field(const struct buf *trace, uint32_t field)
{
	struct tpkt pk;
	size_t off = 0;
	int count = 0;

	while (trace_next(trace, &off, &pk)) {
		struct pb_reader r = pb_reader_init(pk.p, pk.len);
		struct pb_field f;
		while (sonde__pb_next(&r, &f) > 0) {
			if (f.num == field) {
				count++;
				break;
			}
		}
	}
	return count;
}

void svc_make_packet(struct buf *b, const char *tag, size_t pad)
{
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, 1000);
	sonde__pb_put_string(b, 900, tag);
	if (pad) {
		uint8_t *p = malloc(pad);
		for (size_t i = 0; i < pad; i++)
			p[i] = (uint8_t)('a' + i % 26);
		sonde__pb_put_bytes(b, 901, p, pad);
		free(p);
	}
}
