#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>

#include "base/pb.h"
#include "ipc/sock.h"

#include "../test.h"
#include "../util.h"
#include "client_util.h"

static bool can_connect(const char *name)
{
	int fd = sonde__ipc_connect(name); /* a path or a TCP address */

	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

void client_svc_start(struct client_svc *s)
{
	client_svc_start_at(s, test_path("prod.sock"), test_path("cons.sock"));
}

void client_svc_start_at(struct client_svc *s, const char *prod, const char *cons)
{
	snprintf(s->psock, sizeof(s->psock), "%s", prod);
	snprintf(s->csock, sizeof(s->csock), "%s", cons);
	/* a connector socket of its own too: the default path may be another sonded's */
	const char *argv[] = {test_bin("sonded"),   "-p", s->psock, "-c", s->csock, "-x",
			      test_path("cx.sock"), NULL};
	s->pid = test_spawn(argv);
	double end = test_now() + 10;
	while (!(can_connect(s->psock) && can_connect(s->csock))) {
		if (test_now() > end)
			FAIL("sonded did not start listening on %s and %s", s->psock, s->csock);
		usleep(10000);
	}
}

void client_svc_stop(struct client_svc *s)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, SIGTERM);
	int st = test_wait(s->pid, 10);
	s->pid = 0;
	ASSERT_INT(st, ==, 0);
}

void client_packet_str(char *out, size_t n, int i)
{
	snprintf(out, n, "client packet %d", i);
}

/* ---------------------------------------------------------------- producer child */

struct child {
	const struct client_prod_opts *o;
	struct sonde_producer *p;
	struct sonde_trace_writer *w;
	uint64_t inst;
	bool started, stopped;
};

static void write_packets(struct child *c)
{
	static uint8_t big[1 << 20];
	char s[64];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	for (int i = 0; i < c->o->packets; i++) {
		struct sonde_trace_writer *w = c->w;
		client_packet_str(s, sizeof(s), i);
		sonde_trace_writer__begin_packet(w);
		sonde_trace_writer__append_varint(w, 8, (uint64_t)i + 1); /* timestamp */
		sonde_trace_writer__begin_nested(w, CT_FOR_TESTING);
		sonde_trace_writer__append_bytes(w, CT_TEST_STR, s, strlen(s));
		sonde_trace_writer__append_varint(w, CT_TEST_SEQ, (uint64_t)i);
		if (c->o->big) {
			/* payload {str: bytes}: a nested length that straddles chunks */
			sonde_trace_writer__begin_nested(w, 5);
			size_t left = c->o->big;
			sonde_trace_writer__begin_nested(w, 1);
			while (left) {
				size_t k = left < sizeof(big) ? left : sizeof(big);
				sonde_trace_writer__append(w, big, k);
				left -= k;
			}
			sonde_trace_writer__end_nested(w);
			sonde_trace_writer__end_nested(w);
		}
		sonde_trace_writer__end_nested(w);
		sonde_trace_writer__end_packet(w);
	}
	if (c->o->commit_on_start)
		sonde_trace_writer__flush(c->w);
}

static void on_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct child *c = ctx;
	c->inst = id;
	c->started = true;
	if (c->o->config_out)
		test_write_file(c->o->config_out, cfg, len);
	c->w = sonde_producer__new_writer(c->p, id);
	if (c->w)
		write_packets(c);
}

static void on_stop(void *ctx, uint64_t id)
{
	struct child *c = ctx;
	if (id != c->inst)
		return;
	sonde_trace_writer__free(c->w);
	c->w = NULL;
	c->stopped = true;
}

static int child_main(const struct client_prod_opts *o)
{
	struct child c = {.o = o};
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "client-test",
					 .socket = o->socket,
					 .smb_size_hint = o->smb_size,
					 .smb_page_size_hint = o->page_size,
					 .producer_provided_smb = o->provided_smb,
					 .smb_scraping = SONDE_SMB_SCRAPING_ENABLED,
					 .stall_ms = 2000};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = on_start,
					    .stop = on_stop,
					    .ctx = &c,
					    .will_notify_on_stop = true};
	if (!(c.p = sonde_producer__new(&po)))
		return 2;
	if (sonde_producer__register_data_source(c.p, o->ds_name ? o->ds_name : "client.test",
						 &cbs) < 0)
		return 2;
	double end = test_now() + 20, stop_at = 0;
	for (;;) {
		int r = sonde_producer__poll(c.p, 50);
		if (r < 0)
			break; /* the service went away */
		if (c.stopped && !stop_at)
			stop_at = test_now() + 0.3; /* let the stop ack and commits go out */
		if (stop_at && test_now() > stop_at)
			break;
		if (test_now() > end) {
			sonde_producer__free(c.p);
			return 3;
		}
	}
	bool adopted = sonde_producer__smb_adopted(c.p);
	sonde_trace_writer__free(c.w);
	sonde_producer__free(c.p);
	if (o->provided_smb && !adopted)
		return 5;
	return c.started ? 0 : 4;
}

pid_t client_prod_spawn(const struct client_prod_opts *o)
{
	fflush(NULL);
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0)
		_exit(child_main(o));
	return pid;
}

/* ---------------------------------------------------------------- checking traces */

static int check_test_event(const struct pb_field *te, int n, size_t big, int *seq)
{
	struct pb_reader r = pb_sub(te);
	struct pb_field f;
	const uint8_t *str = NULL;
	size_t str_len = 0, payload = 0;
	int64_t s = -1;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == CT_TEST_STR && f.wire == PB_LEN) {
			str = f.ptr;
			str_len = f.len;
		} else if (f.num == CT_TEST_SEQ && f.wire == PB_VARINT) {
			s = (int64_t)f.u;
		} else if (f.num == 5 && f.wire == PB_LEN) {
			struct pb_reader pr = pb_sub(&f);
			struct pb_field g;
			if (sonde__pb_next(&pr, &g) != 1 || g.num != 1 || g.wire != PB_LEN)
				FAIL("packet %lld: malformed nested payload", (long long)s);
			for (size_t i = 0; i < g.len; i++)
				if (g.ptr[i] != (uint8_t)((i % (1 << 20)) * 7))
					FAIL("packet %lld: payload byte %zu differs", (long long)s,
					     i);
			payload = g.len;
		}
	}
	if (s < 0 || s >= n)
		return -1;
	char want[64];
	client_packet_str(want, sizeof(want), (int)s);
	if (!str || str_len != strlen(want) || memcmp(str, want, str_len))
		FAIL("packet %lld: wrong string", (long long)s);
	if (payload != big)
		FAIL("packet %lld: payload of %zu bytes, expected %zu", (long long)s, payload, big);
	*seq = (int)s;
	return 0;
}

int client_count_test_packets(const void *trace, size_t len, int n, size_t big)
{
	char *seen = calloc((size_t)n + 1, 1);
	const void *pkt;
	size_t pos = 0, plen;
	int found = 0, r;

	ASSERT(seen != NULL);
	while ((r = sonde_trace__next_packet(trace, len, &pos, &pkt, &plen)) > 0) {
		struct pb_reader pr = pb_reader_init(pkt, plen);
		struct pb_field f;
		int rc;
		while ((rc = sonde__pb_next(&pr, &f)) > 0) {
			int seq;
			if (f.num != CT_FOR_TESTING || f.wire != PB_LEN ||
			    check_test_event(&f, n, big, &seq) < 0)
				continue;
			if (seen[seq])
				FAIL("packet %d appears twice", seq);
			seen[seq] = 1;
			found++;
		}
		ASSERT_INT(rc, ==, 0);
	}
	ASSERT_INT(r, ==, 0);
	free(seen);
	return found;
}

void client_wait_data_source(const char *csock, const char *name)
{
	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	double end = test_now() + 10;

	for (;;) {
		struct sonde_service_state *s;
		ASSERT_OK(sonde_consumer__query_service_state_sync(c, &s, 5000));
		bool found = false;
		for (size_t i = 0; i < s->n_data_sources; i++)
			found |= strcmp(s->data_sources[i].name, name) == 0;
		sonde_service_state__free(s);
		if (found)
			break;
		if (test_now() > end)
			FAIL("data source %s never registered", name);
		usleep(20000);
	}
	sonde_consumer__free(c);
}
