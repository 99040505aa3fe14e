/* Packets the service writes itself, on trusted sequence 1 (perfetto-wire.md §6.3):
 * clock snapshots, the sync marker, the trace config, system info, lifecycle events and
 * trace stats. */
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "service/internal.h"
#include "service/session.h"

static const uint8_t sync_marker[16] = {0x82, 0x47, 0x7A, 0x76, 0xB2, 0x8D, 0x42, 0xBA,
					0x81, 0xDC, 0x33, 0x32, 0x6D, 0x57, 0xA0, 0x79};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sonde__svc_boottime_ns(void)
{
	return clock_ns(CLOCK_BOOTTIME);
}

static void put_trusted(struct svc *s, struct buf *b)
{
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_UID, s->uid);
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, 1);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP_CLOCK_ID, PF_CLOCK_BOOTTIME);
}

/* Appends the packet in s->scratch to a queue as u32 length + bytes. */
void sonde__svcpkt_queue(struct buf *q, const struct buf *b)
{
	uint32_t n = (uint32_t)b->len;

	if (buf_error(b) < 0)
		return;
	sonde__buf_append(q, &n, sizeof(n));
	sonde__buf_append(q, b->data, n);
}

void sonde__svcpkt_emit_queue(struct buf *q, tbuf_packet_fn fn, void *ctx)
{
	for (size_t off = 0; off + 4 <= q->len;) {
		uint32_t n;
		memcpy(&n, q->data + off, 4);
		struct iovec v = {q->data + off + 4, n};
		fn(ctx, &v, 1, n);
		off += 4 + n;
	}
	sonde__buf_reset(q);
}

void sonde__svcpkt_event(struct svc *s, struct session *ss, uint32_t event_field)
{
	struct buf *b = &s->scratch;

	if (ss->cfg.no_service_events)
		return;
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, sonde__svc_boottime_ns());
	size_t m = sonde__pb_begin(b, PF_PACKET_SERVICE_EVENT);
	sonde__pb_put_bool(b, event_field, true);
	sonde__pb_end(b, m);
	put_trusted(s, b);
	sonde__svcpkt_queue(&ss->svc_pkts, &s->scratch);
}

static const struct {
	uint32_t id;
	clockid_t clk;
} clocks[6] = {
	{PF_CLOCK_BOOTTIME, CLOCK_BOOTTIME},
	{PF_CLOCK_REALTIME_COARSE, CLOCK_REALTIME_COARSE},
	{PF_CLOCK_MONOTONIC_COARSE, CLOCK_MONOTONIC_COARSE},
	{PF_CLOCK_REALTIME, CLOCK_REALTIME},
	{PF_CLOCK_MONOTONIC, CLOCK_MONOTONIC},
	{PF_CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC_RAW},
};

void sonde__svcpkt_log(struct svc *s, struct session *ss, const char *tag, int prio,
		       const char *msg)
{
	struct buf *b = &s->scratch;

	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, sonde__svc_boottime_ns());
	size_t a = sonde__pb_begin(b, PF_PACKET_ANDROID_LOG);
	size_t e = sonde__pb_begin(b, PF_ANDROID_LOG_EVENTS);
	/* LogEvent: timestamp (REALTIME, as log events are), tag, prio, message */
	sonde__pb_put_varint(b, PF_LOG_EVENT_TIMESTAMP, clock_ns(CLOCK_REALTIME));
	sonde__pb_put_string(b, PF_LOG_EVENT_TAG, tag);
	sonde__pb_put_varint(b, PF_LOG_EVENT_PRIO, (uint64_t)prio);
	sonde__pb_put_string(b, PF_LOG_EVENT_MESSAGE, msg);
	sonde__pb_end(b, e);
	sonde__pb_end(b, a);
	put_trusted(s, b);
	sonde__svcpkt_queue(&ss->svc_pkts, &s->scratch);
}

static void read_clocks(uint64_t v[6])
{
	for (size_t i = 0; i < 6; i++)
		v[i] = clock_ns(clocks[i].clk);
}

/* A relayed machine's clocks at the instant of the host's snapshot v, estimated from its
 * SyncClock offsets: a ClockSnapshot with its machine_id, for readers that align machines
 * by snapshots (the RemoteClockSync packet carries the raw exchanges, as Perfetto's). */
static void queue_machine_snapshot(struct svc *s, struct session *ss, const struct svc_machine *m,
				   const uint64_t v[6])
{
	struct buf *b = &s->scratch;
	int64_t off;
	size_t n = 0;

	sonde__buf_reset(b);
	size_t mk = sonde__pb_begin(b, PF_PACKET_CLOCK_SNAPSHOT);
	for (size_t i = 0; i < 6; i++) {
		if (!sonde__machine_clock_offset(m, clocks[i].id, &off))
			continue;
		size_t c = sonde__pb_begin(b, PF_CLOCK_SNAPSHOT_CLOCKS);
		sonde__pb_put_varint(b, PF_CLOCK_CLOCK_ID, clocks[i].id);
		sonde__pb_put_varint(b, PF_CLOCK_TIMESTAMP, v[i] + (uint64_t)off);
		sonde__pb_end(b, c);
		n++;
	}
	sonde__pb_put_varint(b, PF_CLOCK_SNAPSHOT_PRIMARY_TRACE_CLOCK, PF_CLOCK_BOOTTIME);
	sonde__pb_end(b, mk);
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_UID, s->uid);
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, 1);
	sonde__pb_put_varint(b, PF_PACKET_MACHINE_ID, m->id);
	if (n)
		sonde__svcpkt_queue(&ss->svc_clocks, &s->scratch);
}

static void queue_snapshot(struct svc *s, struct session *ss, const uint64_t v[6])
{
	struct buf *b = &s->scratch;

	if (ss->cfg.no_clock_snapshots || ss->svc_clocks.len > 16 * 256) /* at most ~16 queued */
		return;
	memcpy(ss->last_clocks, v, sizeof(ss->last_clocks));
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, v[0]);
	size_t m = sonde__pb_begin(b, PF_PACKET_CLOCK_SNAPSHOT);
	for (size_t i = 0; i < 6; i++) {
		size_t c = sonde__pb_begin(b, PF_CLOCK_SNAPSHOT_CLOCKS);
		sonde__pb_put_varint(b, PF_CLOCK_CLOCK_ID, clocks[i].id);
		sonde__pb_put_varint(b, PF_CLOCK_TIMESTAMP, v[i]);
		sonde__pb_end(b, c);
	}
	sonde__pb_put_varint(b, PF_CLOCK_SNAPSHOT_PRIMARY_TRACE_CLOCK, PF_CLOCK_BOOTTIME);
	sonde__pb_end(b, m);
	put_trusted(s, b);
	sonde__svcpkt_queue(&ss->svc_clocks, &s->scratch);
	for (size_t i = 0; i < s->nmachines; i++)
		queue_machine_snapshot(s, ss, &s->machines[i], v);
}

void sonde__svcpkt_clock_snapshot(struct svc *s, struct session *ss)
{
	uint64_t v[6];

	read_clocks(v);
	queue_snapshot(s, ss, v);
}

void sonde__svcpkt_clock_snapshot_if_drifted(struct svc *s, struct session *ss)
{
	const int64_t threshold = 10 * 1000 * 1000;
	uint64_t v[6];

	read_clocks(v);
	int64_t boot = (int64_t)(v[0] - ss->last_clocks[0]);
	for (size_t i = 1; i < 6; i++) {
		int64_t drift = (int64_t)(v[i] - ss->last_clocks[i]) - boot;
		if (drift >= threshold || drift <= -threshold) {
			queue_snapshot(s, ss, v);
			return;
		}
	}
}

static int emit_scratch(struct svc *s, tbuf_packet_fn fn, void *ctx)
{
	struct iovec v = {s->scratch.data, s->scratch.len};

	if (buf_error(&s->scratch) < 0)
		return 0;
	return fn(ctx, &v, 1, v.iov_len);
}

static void system_info(struct svc *s, struct buf *b)
{
	struct utsname u;

	size_t m = sonde__pb_begin(b, PF_PACKET_SYSTEM_INFO);
	if (uname(&u) == 0) {
		size_t n = sonde__pb_begin(b, PF_SYSTEM_INFO_UTSNAME);
		sonde__pb_put_string(b, PF_UTSNAME_SYSNAME, u.sysname);
		sonde__pb_put_string(b, PF_UTSNAME_VERSION, u.version);
		sonde__pb_put_string(b, PF_UTSNAME_RELEASE, u.release);
		sonde__pb_put_string(b, PF_UTSNAME_MACHINE, u.machine);
		sonde__pb_end(b, n);
	}
	sonde__pb_put_varint(b, PF_SYSTEM_INFO_HZ, (uint64_t)sysconf(_SC_CLK_TCK));
	sonde__pb_put_string(b, PF_SYSTEM_INFO_TRACING_SERVICE_VERSION, "sonded");
	sonde__pb_put_varint(b, PF_SYSTEM_INFO_PAGE_SIZE, (uint64_t)sysconf(_SC_PAGESIZE));
	sonde__pb_put_varint(b, PF_SYSTEM_INFO_NUM_CPUS, (uint64_t)sysconf(_SC_NPROCESSORS_CONF));
	sonde__pb_end(b, m);
	put_trusted(s, b);
}

static void put_clocks(struct buf *b, uint32_t field, const struct relay_clock *v, size_t n)
{
	size_t m = sonde__pb_begin(b, field);

	for (size_t i = 0; i < n; i++) {
		size_t c = sonde__pb_begin(b, PF_CLOCK_SNAPSHOT_CLOCKS);
		sonde__pb_put_varint(b, PF_CLOCK_CLOCK_ID, v[i].clock_id);
		sonde__pb_put_varint(b, PF_CLOCK_TIMESTAMP, v[i].timestamp);
		sonde__pb_end(b, c);
	}
	sonde__pb_end(b, m);
}

/* What Perfetto's service writes of a relayed machine (MaybeEmitRemoteSystemInfo,
 * MaybeEmitRemoteClockSync): its SystemInfo as the relay sent it, once, and the kept
 * SyncClock exchanges, again after each new complete round (PING then UPDATE). */
static void emit_machines(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	struct buf *b = &s->scratch;

	for (size_t i = 0; i < s->nmachines; i++) {
		const struct svc_machine *m = &s->machines[i];
		uint64_t bit = 1ull << (m->id - 1);
		if (m->sysinfo && !(ss->machine_sysinfo_done & bit) && !ss->cfg.no_system_info) {
			ss->machine_sysinfo_done |= bit;
			sonde__buf_reset(b);
			sonde__pb_put_bytes(b, PF_PACKET_SYSTEM_INFO, m->sysinfo, m->sysinfo_len);
			sonde__pb_put_varint(b, PF_PACKET_MACHINE_ID, m->id);
			put_trusted(s, b);
			emit_scratch(s, fn, ctx);
		}
		if (m->nsynced < 2 || ss->machine_sync_gen[i] == m->sync_gen ||
		    m->synced[m->nsynced - 1].phase != RELAY_SYNC_UPDATE)
			continue;
		ss->machine_sync_gen[i] = m->sync_gen;
		sonde__buf_reset(b);
		size_t r = sonde__pb_begin(b, PF_PACKET_REMOTE_CLOCK_SYNC);
		for (size_t k = 0; k < m->nsynced; k++) {
			size_t e = sonde__pb_begin(b, PF_REMOTE_CLOCK_SYNC_SYNCED_CLOCKS);
			put_clocks(b, PF_SYNCED_CLOCKS_CLIENT_CLOCKS, m->synced[k].client,
				   m->synced[k].n_client);
			put_clocks(b, PF_SYNCED_CLOCKS_HOST_CLOCKS, m->synced[k].host,
				   m->synced[k].n_host);
			sonde__pb_end(b, e);
		}
		sonde__pb_end(b, r);
		sonde__pb_put_varint(b, PF_PACKET_MACHINE_ID, m->id);
		sonde__pb_put_varint(b, PF_PACKET_TRUSTED_UID, s->uid);
		sonde__pb_put_varint(b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, 1);
		emit_scratch(s, fn, ctx);
	}
}

void sonde__svcpkt_emit_head(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	struct buf *b = &s->scratch;

	sonde__svcpkt_emit_queue(&ss->svc_clocks, fn, ctx);
	if (ss->sync_due) {
		/* the marker must be the last field: 18 <uid> 50 01 A2 02 10 <16 bytes> */
		ss->sync_due = false;
		sonde__buf_reset(b);
		sonde__pb_put_varint(b, PF_PACKET_TRUSTED_UID, s->uid);
		sonde__pb_put_varint(b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, 1);
		sonde__pb_put_bytes(b, PF_PACKET_SYNCHRONIZATION_MARKER, sync_marker, sizeof(sync_marker));
		emit_scratch(s, fn, ctx);
	}
	if (!ss->config_emitted && !ss->cfg.no_trace_config) {
		ss->config_emitted = true;
		sonde__buf_reset(b);
		size_t m = sonde__pb_begin(b, PF_PACKET_TRACE_CONFIG);
		sonde__buf_append(b, ss->config, ss->config_len);
		sonde__trigger_config_fixup(ss, b);
		sonde__pb_end(b, m);
		put_trusted(s, b);
		emit_scratch(s, fn, ctx);
	}
	sonde__trigger_emit(ss, fn, ctx);
	if (!ss->sysinfo_emitted && !ss->cfg.no_system_info) {
		ss->sysinfo_emitted = true;
		sonde__buf_reset(b);
		system_info(s, b);
		emit_scratch(s, fn, ctx);
	}
	emit_machines(s, ss, fn, ctx);
	sonde__svcpkt_emit_queue(&ss->svc_pkts, fn, ctx);
}

void sonde__svcpkt_emit_tail(struct svc *s, struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	struct buf *b = &s->scratch;

	sonde__svcpkt_emit_queue(&ss->svc_pkts, fn, ctx);
	if (!ss->stats_due)
		return;
	ss->stats_due = false;
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, sonde__svc_boottime_ns());
	size_t m = sonde__pb_begin(b, PF_PACKET_TRACE_STATS);
	sonde__consumer_put_trace_stats(s, ss, b);
	sonde__pb_end(b, m);
	put_trusted(s, b);
	emit_scratch(s, fn, ctx);
}
