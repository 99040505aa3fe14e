/* Decoders of ConsumerPort replies: TraceStats and TracingServiceState (untrusted bytes). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/client.h>
#include <sonde/error.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"

static void copy_str(char *dst, size_t cap, const struct pb_field *f)
{
	size_t n = f->len < cap - 1 ? f->len : cap - 1;
	memcpy(dst, f->ptr, n);
	dst[n] = 0;
}

static int decode_buffer_stats(const struct pb_field *bf, struct sonde_buffer_stats *b)
{
	/* field number -> member, for the varint counters */
	uint64_t *slot[20] = {
		[PF_BUFFER_STATS_BYTES_WRITTEN] = &b->bytes_written,
		[PF_BUFFER_STATS_CHUNKS_WRITTEN] = &b->chunks_written,
		[PF_BUFFER_STATS_CHUNKS_OVERWRITTEN] = &b->chunks_overwritten,
		[PF_BUFFER_STATS_WRITE_WRAP_COUNT] = &b->write_wrap_count,
		[PF_BUFFER_STATS_PATCHES_SUCCEEDED] = &b->patches_succeeded,
		[PF_BUFFER_STATS_PATCHES_FAILED] = &b->patches_failed,
		[PF_BUFFER_STATS_READAHEADS_SUCCEEDED] = &b->readaheads_succeeded,
		[PF_BUFFER_STATS_READAHEADS_FAILED] = &b->readaheads_failed,
		[PF_BUFFER_STATS_ABI_VIOLATIONS] = &b->abi_violations,
		[PF_BUFFER_STATS_CHUNKS_REWRITTEN] = &b->chunks_rewritten,
		[PF_BUFFER_STATS_CHUNKS_COMMITTED_OUT_OF_ORDER] = &b->chunks_committed_out_of_order,
		[PF_BUFFER_STATS_BUFFER_SIZE] = &b->buffer_size,
		[PF_BUFFER_STATS_BYTES_OVERWRITTEN] = &b->bytes_overwritten,
		[PF_BUFFER_STATS_BYTES_READ] = &b->bytes_read,
		[PF_BUFFER_STATS_PADDING_BYTES_WRITTEN] = &b->padding_bytes_written,
		[PF_BUFFER_STATS_PADDING_BYTES_CLEARED] = &b->padding_bytes_cleared,
		[PF_BUFFER_STATS_CHUNKS_READ] = &b->chunks_read,
		[PF_BUFFER_STATS_CHUNKS_DISCARDED] = &b->chunks_discarded,
		[PF_BUFFER_STATS_TRACE_WRITER_PACKET_LOSS] = &b->trace_writer_packet_loss,
	};
	struct pb_reader r = pb_sub(bf);
	struct pb_field f;
	int n;

	while ((n = sonde__pb_next(&r, &f)) > 0)
		if (f.wire == PB_VARINT && f.num < 20 && slot[f.num])
			*slot[f.num] = f.u;
	return n;
}

int sonde_trace_stats__decode(const void *buf, size_t len, struct sonde_trace_stats *s)
{
	uint64_t *slot[11] = {
		[PF_TRACE_STATS_PRODUCERS_CONNECTED] = &s->producers_connected,
		[PF_TRACE_STATS_PRODUCERS_SEEN] = &s->producers_seen,
		[PF_TRACE_STATS_DATA_SOURCES_REGISTERED] = &s->data_sources_registered,
		[PF_TRACE_STATS_DATA_SOURCES_SEEN] = &s->data_sources_seen,
		[PF_TRACE_STATS_TRACING_SESSIONS] = &s->tracing_sessions,
		[PF_TRACE_STATS_TOTAL_BUFFERS] = &s->total_buffers,
		[PF_TRACE_STATS_CHUNKS_DISCARDED] = &s->chunks_discarded,
		[PF_TRACE_STATS_PATCHES_DISCARDED] = &s->patches_discarded,
		[PF_TRACE_STATS_INVALID_PACKETS] = &s->invalid_packets,
	};
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	int n;

	memset(s, 0, sizeof(*s));
	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_TRACE_STATS_BUFFER_STATS && f.wire == PB_LEN) {
			struct sonde_buffer_stats scratch;
			struct sonde_buffer_stats *b = s->n_buffers < SONDE_MAX_STATS_BUFFERS
							       ? &s->buffers[s->n_buffers]
							       : &scratch;
			memset(b, 0, sizeof(*b));
			if ((n = decode_buffer_stats(&f, b)) < 0)
				return n;
			s->n_buffers++;
		} else if (f.wire == PB_VARINT && f.num < 11 && slot[f.num]) {
			*slot[f.num] = f.u;
		}
	}
	return n;
}

/* ---------------------------------------------------------------- service state */

struct state_acc {
	struct sonde_service_state *s;
	size_t cap_p, cap_d, cap_s;
};

static void *grow(void *arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return arr;
	size_t n = *cap ? *cap * 2 : 16;
	void *p = sonde__realloc(arr, n * elem);
	if (p)
		*cap = n;
	return p;
}

static int decode_producer(const struct pb_field *pf, struct sonde_service_producer *p)
{
	struct pb_reader r = pb_sub(pf);
	struct pb_field f;
	int n;

	memset(p, 0, sizeof(*p));
	p->uid = p->pid = -1; /* the service leaves out what it does not know */
	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_TSS_PRODUCER_NAME && f.wire == PB_LEN)
			copy_str(p->name, sizeof(p->name), &f);
		else if (f.num == PF_TSS_PRODUCER_SDK_VERSION && f.wire == PB_LEN)
			copy_str(p->sdk_version, sizeof(p->sdk_version), &f);
		else if (f.num == PF_TSS_PRODUCER_MACHINE_NAME && f.wire == PB_LEN)
			copy_str(p->machine_name, sizeof(p->machine_name), &f);
		else if (f.wire != PB_VARINT)
			continue;
		else if (f.num == PF_TSS_PRODUCER_ID)
			p->id = (int32_t)f.u;
		else if (f.num == PF_TSS_PRODUCER_UID)
			p->uid = (int32_t)f.u;
		else if (f.num == PF_TSS_PRODUCER_PID)
			p->pid = (int32_t)f.u;
		else if (f.num == PF_TSS_PRODUCER_MACHINE_ID)
			p->machine_id = (uint32_t)f.u;
	}
	return n;
}

static int decode_descriptor(const struct pb_field *df, struct sonde_service_data_source *d)
{
	struct pb_reader r = pb_sub(df);
	struct pb_field f;
	int n;

	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_DS_DESCRIPTOR_NAME && f.wire == PB_LEN)
			copy_str(d->name, sizeof(d->name), &f);
		else if (f.wire != PB_VARINT)
			continue;
		else if (f.num == PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_START)
			d->will_notify_on_start = f.u != 0;
		else if (f.num == PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_STOP)
			d->will_notify_on_stop = f.u != 0;
		else if (f.num == PF_DS_DESCRIPTOR_HANDLES_INCREMENTAL_STATE_CLEAR)
			d->handles_incremental_state_clear = f.u != 0;
	}
	return n;
}

static int decode_data_source(const struct pb_field *df, struct sonde_service_data_source *d)
{
	struct pb_reader r = pb_sub(df);
	struct pb_field f;
	int n;

	memset(d, 0, sizeof(*d));
	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_TSS_DATA_SOURCE_DESCRIPTOR && f.wire == PB_LEN)
			n = decode_descriptor(&f, d);
		else if (f.num == PF_TSS_DATA_SOURCE_PRODUCER_ID && f.wire == PB_VARINT)
			d->producer_id = (int32_t)f.u;
		if (n < 0)
			return n;
	}
	return n;
}

static int decode_session(const struct pb_field *sf, struct sonde_service_session *s)
{
	struct pb_reader r = pb_sub(sf);
	struct pb_field f;
	int n;

	memset(s, 0, sizeof(*s));
	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_TSS_SESSION_STATE && f.wire == PB_LEN) {
			copy_str(s->state, sizeof(s->state), &f);
		} else if (f.num == PF_TSS_SESSION_UNIQUE_SESSION_NAME && f.wire == PB_LEN) {
			copy_str(s->unique_session_name, sizeof(s->unique_session_name), &f);
		} else if (f.num == PF_TSS_SESSION_BUFFER_SIZE_KB) {
			if (f.wire == PB_VARINT) {
				s->buffer_size_kb += f.u;
			} else if (f.wire == PB_LEN) { /* packed */
				struct pb_reader pk = pb_sub(&f);
				uint64_t v;
				while ((n = sonde__pb_packed_next(&pk, &v)) > 0)
					s->buffer_size_kb += v;
				if (n < 0)
					return n;
			}
		} else if (f.wire != PB_VARINT) {
			continue;
		} else if (f.num == PF_TSS_SESSION_ID) {
			s->id = f.u;
		} else if (f.num == PF_TSS_SESSION_CONSUMER_UID) {
			s->consumer_uid = (int32_t)f.u;
		} else if (f.num == PF_TSS_SESSION_DURATION_MS) {
			s->duration_ms = (uint32_t)f.u;
		} else if (f.num == PF_TSS_SESSION_NUM_DATA_SOURCES) {
			s->num_data_sources = (uint32_t)f.u;
		} else if (f.num == PF_TSS_SESSION_IS_STARTED) {
			s->is_started = f.u != 0;
		}
	}
	return n;
}

static int decode_state_field(struct state_acc *a, const struct pb_field *f)
{
	struct sonde_service_state *s = a->s;
	void *p;

	if (f->num == PF_TSS_PRODUCERS && f->wire == PB_LEN) {
		if (!(p = grow(s->producers, &a->cap_p, s->n_producers + 1, sizeof(*s->producers))))
			return -ENOMEM;
		s->producers = p;
		return decode_producer(f, &s->producers[s->n_producers++]);
	}
	if (f->num == PF_TSS_DATA_SOURCES && f->wire == PB_LEN) {
		if (!(p = grow(s->data_sources, &a->cap_d, s->n_data_sources + 1,
			       sizeof(*s->data_sources))))
			return -ENOMEM;
		s->data_sources = p;
		return decode_data_source(f, &s->data_sources[s->n_data_sources++]);
	}
	if (f->num == PF_TSS_TRACING_SESSIONS && f->wire == PB_LEN) {
		if (!(p = grow(s->sessions, &a->cap_s, s->n_sessions + 1, sizeof(*s->sessions))))
			return -ENOMEM;
		s->sessions = p;
		return decode_session(f, &s->sessions[s->n_sessions++]);
	}
	if (f->num == PF_TSS_TRACING_SERVICE_VERSION && f->wire == PB_LEN)
		copy_str(s->version, sizeof(s->version), f);
	else if (f->num == PF_TSS_NUM_SESSIONS && f->wire == PB_VARINT)
		s->num_sessions = (int32_t)f->u;
	else if (f->num == PF_TSS_NUM_SESSIONS_STARTED && f->wire == PB_VARINT)
		s->num_sessions_started = (int32_t)f->u;
	return 0;
}

int sonde_service_state__decode(const void *buf, size_t len, struct sonde_service_state **out)
{
	struct state_acc a = {0};
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	int n;

	*out = NULL;
	if (!(a.s = sonde__calloc(1, sizeof(*a.s))))
		return -ENOMEM;
	while ((n = sonde__pb_next(&r, &f)) > 0)
		if ((n = decode_state_field(&a, &f)) < 0)
			break;
	if (n < 0) {
		sonde_service_state__free(a.s);
		return n;
	}
	*out = a.s;
	return 0;
}

void sonde_service_state__free(struct sonde_service_state *s)
{
	if (!s)
		return;
	sonde__free(s->producers);
	sonde__free(s->data_sources);
	sonde__free(s->sessions);
	sonde__free(s);
}
