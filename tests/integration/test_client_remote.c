/* The client library's shared-memory emulation (a producer over TCP) against a service
 * that stops reading: the producer's writers stall, then drop, as with shared memory, and
 * what they wrote arrives whole once the service reads again. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/client.h>

#include "base/pb.h"

#include "../test.h"
#include "../util.h"
#include "client_util.h"

enum { RI_PACKETS = 48 * 1024, RI_PAYLOAD = 1000 };

struct ri_prod {
	uint64_t instance;
	bool started;
};

static void ri_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct ri_prod *r = ctx;

	r->instance = id;
	r->started = true;
}

/* Packet seq: TracePacket.for_testing { seq, str (RI_PAYLOAD bytes) }. */
static size_t ri_packet(uint8_t *out, size_t cap, uint32_t seq)
{
	struct buf b = BUF_INIT, t = BUF_INIT;
	static char payload[RI_PAYLOAD];

	memset(payload, 'p', sizeof(payload));
	sonde__pb_put_varint(&t, CT_TEST_SEQ, seq);
	sonde__pb_put_bytes(&t, CT_TEST_STR, payload, sizeof(payload));
	sonde__pb_put_bytes(&b, CT_FOR_TESTING, t.data, t.len);
	ASSERT_UINT(b.len, <=, cap);
	memcpy(out, b.data, b.len);
	size_t n = b.len;
	sonde__buf_free(&b);
	sonde__buf_free(&t);
	return n;
}

static atomic_bool ri_stop;

static void *ri_poll(void *arg)
{
	while (!atomic_load(&ri_stop))
		if (sonde_producer__poll(arg, 20) < 0)
			break;
	return NULL;
}

struct ri_seen {
	uint8_t *seen; /* RI_PACKETS flags */
	size_t found, dup, bad;
};

static void ri_on_packet(void *ctx, const void *pkt, size_t len)
{
	struct ri_seen *s = ctx;
	struct pb_reader r = pb_reader_init(pkt, len), tr;
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != CT_FOR_TESTING || f.wire != PB_LEN)
			continue;
		uint64_t seq = UINT64_MAX;
		size_t plen = 0;
		tr = pb_sub(&f);
		while (sonde__pb_next(&tr, &g) > 0) {
			if (g.num == CT_TEST_SEQ && g.wire == PB_VARINT)
				seq = g.u;
			else if (g.num == CT_TEST_STR && g.wire == PB_LEN)
				plen = g.len;
		}
		if (seq >= RI_PACKETS || plen != RI_PAYLOAD) {
			s->bad++;
		} else if (s->seen[seq]) {
			s->dup++;
		} else {
			s->seen[seq] = 1;
			s->found++;
		}
	}
}

/* 48 MiB written while the service is stopped (SIGSTOP): far more than the producer's
 * 256 KiB buffer and the sockets hold. The writer must lose packets (it stalls 20 ms, then
 * drops) rather than queue them all in the producer's memory; every packet it did not
 * lose is in the trace once the service runs again, each once and intact. */
TEST_TIMEOUT(client_tcp_emulated_writers_stall_then_drop_when_the_service_stops_reading, 120)
{
	char addr[64];
	struct client_svc svc;
	struct ri_prod rp = {0};
	struct ri_seen seen = {.seen = calloc(RI_PACKETS, 1)};
	uint8_t pkt[RI_PAYLOAD + 64];

	ASSERT(seen.seen != NULL);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", test_free_tcp_port());
	client_svc_start_at(&svc, addr, test_path("cons.sock"));
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "remote-ingest",
					 .socket = addr,
					 .smb_size_hint = 256 * 1024,
					 .smb_page_size_hint = 4096,
					 .stall_ms = 20,
					 .stall_ms_set = true};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs), .start = ri_start, .ctx = &rp};
	struct sonde_producer *p = ASSERT_NOT_NULL(sonde_producer__new(&po));
	ASSERT_OK(sonde_producer__register_data_source(p, "client.test", &cbs));
	client_wait_data_source(svc.csock, "client.test");

	struct sonde_consumer_opts co = {.sz = sizeof(co), .socket = svc.csock};
	struct sonde_consumer *c = ASSERT_NOT_NULL(sonde_consumer__new(&co));
	struct sonde_consumer_cbs ccb = {
		.sz = sizeof(ccb), .on_packet = ri_on_packet, .ctx = &seen};
	sonde_consumer__set_callbacks(c, &ccb);
	struct sonde_trace_config *cfg = ASSERT_NOT_NULL(sonde_trace_config__new(
		&(struct sonde_trace_config_opts){.sz = sizeof(struct sonde_trace_config_opts)}));
	uint8_t *enc;
	size_t enc_len;
	ASSERT_OK(sonde_trace_config__add_buffer(cfg, 96 * 1024, SONDE_FILL_RING_BUFFER));
	ASSERT_OK(sonde_trace_config__add_data_source(cfg, "client.test", 0, NULL, 0));
	ASSERT_OK(sonde_trace_config__encode(cfg, &enc, &enc_len));
	sonde_trace_config__free(cfg);
	ASSERT_OK(sonde_consumer__enable_tracing(c, enc, enc_len, -1));
	free(enc);
	for (double end = test_now() + 20; !rp.started;) {
		ASSERT(test_now() < end);
		ASSERT(sonde_producer__poll(p, 50) >= 0);
	}

	ASSERT_OK(kill(svc.pid, SIGSTOP));
	struct sonde_trace_writer *w = ASSERT_NOT_NULL(sonde_producer__new_writer(p, rp.instance));
	for (uint32_t i = 0; i < RI_PACKETS; i++)
		sonde_trace_writer__write_packet(w, pkt, ri_packet(pkt, sizeof(pkt), i));
	uint64_t lost = sonde_trace_writer__packets_lost(w);
	ASSERT_OK(kill(svc.pid, SIGCONT));
	ASSERT_UINT(lost, >, 0);
	ASSERT_UINT(lost, <, RI_PACKETS);

	/* the service reads again: what was queued goes out, then the writer's last chunk;
	 * the producer answers the flush (on its own thread) once all of it was sent, and the
	 * service handles the connection's frames in order */
	sonde_trace_writer__free(w);
	ASSERT_OK(sonde_producer__commit(p));
	pthread_t th;
	atomic_store(&ri_stop, false);
	ASSERT_INT(pthread_create(&th, NULL, ri_poll, p), ==, 0);
	ASSERT_OK(sonde_consumer__flush_sync(c, 20000, 30000));
	ASSERT_OK(sonde_consumer__disable_tracing(c));
	ASSERT_OK(sonde_consumer__wait_disabled(c, 30000, NULL, 0));
	atomic_store(&ri_stop, true);
	pthread_join(th, NULL);
	sonde_producer__free(p);
	ASSERT_OK(sonde_consumer__read_buffers_sync(c, 30000));
	ASSERT_UINT(seen.bad, ==, 0);
	ASSERT_UINT(seen.dup, ==, 0);
	ASSERT_UINT(seen.found, ==, RI_PACKETS - lost);
	sonde_consumer__free(c);
	client_svc_stop(&svc);
	free(seen.seen);
}
