/* Decoding the ConsumerPort replies sonde trace and the benchmarks rely on. */
#include <sonde/client.h>

#include "base/buf.h"
#include "base/pb.h"

#include "../test.h"

TEST(client_replies_trace_stats_decode)
{
	struct buf b = BUF_INIT;
	struct sonde_trace_stats st;

	for (int i = 0; i < 2; i++) {
		size_t m = sonde__pb_begin(&b, 1);
		sonde__pb_put_varint(&b, 12, 65536u << i);
		sonde__pb_put_varint(&b, 1, 1000 + (uint64_t)i);
		sonde__pb_put_varint(&b, 2, 3);
		sonde__pb_put_varint(&b, 3, 4);
		sonde__pb_put_varint(&b, 18, 5);
		sonde__pb_put_varint(&b, 19, 6);
		sonde__pb_put_varint(&b, 9, 7);
		sonde__pb_put_string(&b, 99, "future field");
		sonde__pb_end(&b, m);
	}
	sonde__pb_put_varint(&b, 2, 1);
	sonde__pb_put_varint(&b, 10, 4);
	sonde__pb_put_varint(&b, 500, 1); /* unknown: ignored */
	ASSERT_OK(sonde_trace_stats__decode(b.data, b.len, &st));
	ASSERT_UINT(st.n_buffers, ==, 2);
	ASSERT_UINT(st.buffers[1].buffer_size, ==, 131072);
	ASSERT_UINT(st.buffers[1].bytes_written, ==, 1001);
	ASSERT_UINT(st.buffers[0].chunks_written, ==, 3);
	ASSERT_UINT(st.buffers[0].chunks_overwritten, ==, 4);
	ASSERT_UINT(st.buffers[0].chunks_discarded, ==, 5);
	ASSERT_UINT(st.buffers[0].trace_writer_packet_loss, ==, 6);
	ASSERT_UINT(st.buffers[0].abi_violations, ==, 7);
	ASSERT_UINT(st.producers_connected, ==, 1);
	ASSERT_UINT(st.invalid_packets, ==, 4);
	ASSERT_ERR(sonde_trace_stats__decode(b.data, b.len - 1, &st), -SONDE_E_FORMAT);
	sonde__buf_free(&b);
}

TEST(client_replies_service_state_parts_concatenate)
{
	struct buf b = BUF_INIT;
	struct sonde_service_state *s;

	/* two QueryServiceState parts, concatenated as the consumer does */
	for (int part = 0; part < 2; part++) {
		size_t m = sonde__pb_begin(&b, 1);
		sonde__pb_put_varint(&b, 1, (uint64_t)part + 1);
		sonde__pb_put_string(&b, 2, part ? "second" : "first");
		sonde__pb_put_varint(&b, 3, 1000);
		sonde__pb_put_varint(&b, 5, 42);
		sonde__pb_end(&b, m);
		m = sonde__pb_begin(&b, 2);
		size_t d = sonde__pb_begin(&b, 1);
		sonde__pb_put_string(&b, 1, "ds");
		sonde__pb_put_bool(&b, 3, true);
		sonde__pb_end(&b, d);
		sonde__pb_put_varint(&b, 2, (uint64_t)part + 1);
		sonde__pb_end(&b, m);
	}
	sonde__pb_put_varint(&b, 3, 2);
	sonde__pb_put_varint(&b, 4, 1);
	size_t m = sonde__pb_begin(&b, 6);
	sonde__pb_put_varint(&b, 1, 9);
	sonde__pb_put_string(&b, 3, "STARTED");
	sonde__pb_put_varint(&b, 5, 1024);
	sonde__pb_put_varint(&b, 5, 2048);
	sonde__pb_put_bool(&b, 11, true);
	sonde__pb_end(&b, m);
	ASSERT_OK(sonde_service_state__decode(b.data, b.len, &s));
	ASSERT_UINT(s->n_producers, ==, 2);
	ASSERT_STR_EQ(s->producers[1].name, "second");
	ASSERT_INT(s->producers[0].pid, ==, 42);
	ASSERT_INT(s->producers[0].uid, ==, 1000);
	ASSERT_UINT(s->n_data_sources, ==, 2);
	ASSERT_STR_EQ(s->data_sources[0].name, "ds");
	ASSERT(s->data_sources[0].will_notify_on_start);
	ASSERT_INT(s->data_sources[1].producer_id, ==, 2);
	ASSERT_INT(s->num_sessions, ==, 2);
	ASSERT_UINT(s->n_sessions, ==, 1);
	ASSERT_UINT(s->sessions[0].buffer_size_kb, ==, 3072);
	ASSERT_STR_EQ(s->sessions[0].state, "STARTED");
	ASSERT(s->sessions[0].is_started);
	sonde_service_state__free(s);
	ASSERT_ERR(sonde_service_state__decode(b.data, 3, &s), -SONDE_E_FORMAT);
	ASSERT(s == NULL);
	sonde__buf_free(&b);
}
